package host

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/nvmeof"
)

// Asymmetric Namespace Access on the host, as Linux does it
// (drivers/nvme/host/multipath.c): when Identify Controller reports ANA
// (CMIC bit 3), the host sizes a log buffer from NANAGRPID and MNAN
// (nvme_mpath_init_identify, which disables ANA when it exceeds the
// transfer limit), reads the ANA log at connect, on every ANA Change
// notice and after an I/O failed with an ANA status (nvme_failover_req
// queues ana_work), and keeps each namespace's state
// (nvme_update_ana_state). While a group is in the change state, the host
// re-reads the log until it leaves it; Linux resets the controller after
// twice ANATT, rdisk logs it and keeps asking.

// anaPollMin bounds how often the log is re-read while a group changes.
const anaPollMin = 100 * time.Millisecond

// initANA decides whether the controller's ANA reporting is used and
// sizes the log buffer (nvme_mpath_init_identify).
func (c *Controller) initANA() {
	id := &c.id
	if id.CMIC&nvmeof.CMICANA == 0 {
		return
	}
	if id.MNAN == 0 || id.MNAN > id.NN {
		// Linux refuses the controller ("Invalid MNAN value"); rdisk
		// goes on without ANA.
		c.log.Warn("nvme host: controller reports ANA with an invalid MNAN; ANA not used", "mnan", id.MNAN, "nn", id.NN)
		return
	}
	size := uint64(nvmeof.ANALogHeaderSize) + uint64(id.NANAGRPID)*nvmeof.ANAGroupDescSize + uint64(id.MNAN)*4
	if size > uint64(c.maxTransfer) {
		c.log.Warn("nvme host: ANA log page larger than the transfer limit; ANA not used", "size", size, "max_transfer", c.maxTransfer)
		return
	}
	c.anaLogSize = int(size+3) &^ 3
	c.anaKick = make(chan struct{}, 1)
}

// usesANA tells whether the controller's ANA reporting is used.
func (c *Controller) usesANA() bool { return c.anaLogSize > 0 }

// ANALog reads the ANA log page (with rgo, Return Groups Only: the groups
// without their namespaces), checking ANAGRPID against ANAGRPMAX as Linux
// nvme_parse_ana_log does. It does not update the namespaces' states (see
// Namespace.RefreshAccessState). Reading it without RAE clears an ANA
// Change notice.
func (c *Controller) ANALog(ctx context.Context, rgo bool) (nvmeof.ANALog, error) {
	size := c.anaLogSize
	if size == 0 {
		id := &c.id
		size = nvmeof.ANALogSize(int(min(id.NANAGRPID, 1024)), int(min(id.MNAN, 1024)))
	}
	b := backstore.AlignedBuffer(size, 4096)
	var lsp uint8
	if rgo {
		lsp = nvmeof.ANALogRGO
	}
	if err := c.getLogPage(ctx, nvmeof.LogANA, lsp, nvmeof.NSIDAll, 0, b, false); err != nil {
		return nvmeof.ANALog{}, fmt.Errorf("reading the ANA log: %w", err)
	}
	l, err := nvmeof.ParseANALog(b)
	if err != nil {
		return l, fmt.Errorf("reading the ANA log: %w", err)
	}
	for _, g := range l.Groups {
		if g.GroupID > c.id.ANAGRPMAX {
			return l, fmt.Errorf("reading the ANA log: group %d above ANAGRPMAX %d", g.GroupID, c.id.ANAGRPMAX)
		}
	}
	return l, nil
}

// accessOf maps an ANA state to the blockdev access state.
func accessOf(s nvmeof.ANAState) blockdev.AccessState {
	switch s {
	case nvmeof.ANAOptimized:
		return blockdev.AccessOptimized
	case nvmeof.ANANonOptimized:
		return blockdev.AccessNonOptimized
	case nvmeof.ANAInaccessible:
		return blockdev.AccessInaccessible
	case nvmeof.ANAPersistentLoss:
		return blockdev.AccessPersistentLoss
	case nvmeof.ANAChange:
		return blockdev.AccessTransitioning
	}
	return blockdev.AccessUnknown
}

// pathAccess is the access state a path related status tells: the ANA
// state for the three ANA statuses, inaccessible for the others (Internal
// Path Error, a target whose store fenced it off; pathing errors).
func pathAccess(st nvmeof.Status) blockdev.AccessState {
	switch st.Code() {
	case nvmeof.StatusANAPersistentLoss:
		return blockdev.AccessPersistentLoss
	case nvmeof.StatusANAInaccessible:
		return blockdev.AccessInaccessible
	case nvmeof.StatusANATransition:
		return blockdev.AccessTransitioning
	}
	return blockdev.AccessInaccessible
}

// isANAStatus tells the ANA statuses (Linux nvme_is_ana_error).
func isANAStatus(st nvmeof.Status) bool {
	switch st.Code() {
	case nvmeof.StatusANAPersistentLoss, nvmeof.StatusANAInaccessible, nvmeof.StatusANATransition:
		return true
	}
	return false
}

// readANA reads the log and updates the open namespaces; it returns
// whether a group is in the change state. Calls are serialized.
func (c *Controller) readANA(ctx context.Context) (changing bool, err error) {
	c.anaMu.Lock()
	defer c.anaMu.Unlock()
	l, err := c.ANALog(ctx, false)
	if err != nil {
		return false, err
	}
	byNS := map[uint32]nvmeof.ANAState{}
	byGroup := map[uint32]nvmeof.ANAState{}
	for _, g := range l.Groups {
		byGroup[g.GroupID] = g.State
		changing = changing || g.State == nvmeof.ANAChange
		for _, id := range g.NSIDs {
			byNS[id] = g.State
		}
	}
	c.anaByNS, c.anaByGroup = byNS, byGroup
	c.nsMu.Lock()
	todo := make([]*Namespace, 0, len(c.open))
	for ns := range c.open {
		todo = append(todo, ns)
	}
	c.nsMu.Unlock()
	for _, ns := range todo {
		c.applyANALocked(ns)
	}
	return changing, nil
}

// applyANALocked sets ns's state from the last log read: by its NSID, or
// by its Identify ANAGRPID when the log does not list it. Caller holds
// anaMu.
func (c *Controller) applyANALocked(ns *Namespace) bool {
	st, ok := c.anaByNS[ns.nsid]
	if !ok {
		st, ok = c.anaByGroup[ns.state.Load().id.ANAGRPID]
	}
	if !ok {
		return false
	}
	a := accessOf(st)
	if old := blockdev.AccessState(ns.access.Swap(uint32(a))); old != a {
		// The first state, at open, is no news (Debug); changes are.
		lvl := slog.LevelInfo
		if old == blockdev.AccessUnknown {
			lvl = slog.LevelDebug
		}
		c.log.Log(context.Background(), lvl, "nvme host: namespace access state changed", "subnqn", c.subNQN, "cntlid", c.cntlid, "nsid", ns.nsid, "old", old, "state", a)
	}
	return true
}

// openANA gives a namespace being opened its state, reading the log
// again when the last read did not know it.
func (c *Controller) openANA(ctx context.Context, ns *Namespace) {
	if !c.usesANA() {
		return
	}
	c.anaMu.Lock()
	found := c.applyANALocked(ns)
	c.anaMu.Unlock()
	if !found {
		if _, err := c.readANA(ctx); err != nil {
			c.log.Warn("nvme host: reading the ANA log failed", "subnqn", c.subNQN, "err", err)
		}
	}
}

// kickANA asks the ANA worker to read the log again. It never blocks
// and does not allocate: the I/O completion path calls it.
func (c *Controller) kickANA() {
	if c.anaKick == nil {
		return
	}
	select {
	case c.anaKick <- struct{}{}:
	default:
	}
}

// anaWorker re-reads the log when kicked, and every ANATT/10 (at least
// 100 ms) while a group is in the change state.
func (c *Controller) anaWorker() {
	defer c.bg.Done()
	anatt := time.Duration(max(c.id.ANATT, 1)) * time.Second
	poll := max(anaPollMin, anatt/10)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var changeSince time.Time
	warned := false
	for {
		select {
		case <-c.anaKick:
		case <-timer.C:
		case <-c.stop:
			return
		case <-c.done:
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.CommandTimeout)
		changing, err := c.readANA(ctx)
		cancel()
		if err != nil {
			if c.closing.Load() || c.Err() != nil {
				return
			}
			c.log.Warn("nvme host: reading the ANA log failed", "subnqn", c.subNQN, "cntlid", c.cntlid, "err", err)
			changing = true // try again
		}
		if !changing {
			changeSince, warned = time.Time{}, false
			timer.Stop()
			continue
		}
		if changeSince.IsZero() {
			changeSince = time.Now()
		}
		if !warned && time.Since(changeSince) > 2*anatt {
			// Linux resets the controller here (nvme_anatt_timeout).
			warned = true
			c.log.Warn("nvme host: ANA transition took longer than twice ANATT", "subnqn", c.subNQN, "cntlid", c.cntlid, "anatt", anatt)
		}
		timer.Reset(poll)
	}
}

// AccessState implements blockdev.PathReporter: the namespace's ANA state
// as the controller last reported it (AccessUnknown when the controller
// does not report ANA).
func (ns *Namespace) AccessState() blockdev.AccessState {
	return blockdev.AccessState(ns.access.Load())
}

// RefreshAccessState implements blockdev.PathReporter: it reads the ANA
// log now and returns the namespace's state.
func (ns *Namespace) RefreshAccessState() (blockdev.AccessState, error) {
	c := ns.c
	if !c.usesANA() {
		return blockdev.AccessUnknown, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.CommandTimeout)
	defer cancel()
	if _, err := c.readANA(ctx); err != nil {
		return ns.AccessState(), fmt.Errorf("namespace %d of %s: %w", ns.nsid, c.subNQN, err)
	}
	return ns.AccessState(), nil
}

// DiskID implements blockdev.Identifier: the subsystem NQN, "/" and the
// namespace's NGUID, EUI-64 or UUID in hex, the first it reports.
func (ns *Namespace) DiskID() string { return ns.diskID }

// diskID derives DiskID from the Identify Namespace data and the
// descriptor list (ids, when read).
func diskID(subNQN string, id *nvmeof.IdentifyNamespace, ids *nvmeof.NamespaceIDs) string {
	nguid, eui := id.NGUID, id.EUI64
	var uuid [16]byte
	if ids != nil {
		if ids.HasNGUID && nguid == ([16]byte{}) {
			nguid = ids.NGUID
		}
		if ids.HasEUI64 && eui == ([8]byte{}) {
			eui = ids.EUI64
		}
		if ids.HasUUID {
			uuid = ids.UUID
		}
	}
	switch {
	case nguid != [16]byte{}:
		return subNQN + "/" + hex.EncodeToString(nguid[:])
	case eui != [8]byte{}:
		return subNQN + "/" + hex.EncodeToString(eui[:])
	case uuid != [16]byte{}:
		return subNQN + "/" + hex.EncodeToString(uuid[:])
	}
	return ""
}

var (
	_ blockdev.PathReporter = (*Namespace)(nil)
	_ blockdev.Identifier   = (*Namespace)(nil)
)
