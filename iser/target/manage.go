package target

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/scsi"
)

// Live management: what a management socket calls to inspect and change a
// serving Target. Changes of access control apply to new logins; LUN map
// changes, and the per-initiator LUN maps of SetACLs, reach logged-in
// sessions too, as REPORTED LUNS DATA HAS CHANGED unit attentions
// (scsi.Target.Map and Unmap, scsi.Session.SetView).

// ConnInfo describes a connection of a session.
type ConnInfo struct {
	CID       uint16
	Transport string // "iser" or "tcp"
	Remote    string // the initiator's address
	Local     string // the portal address it reached
}

// SessionInfo describes a logged-in session.
type SessionInfo struct {
	Target      string // target IQN ("" for discovery sessions)
	Initiator   string // initiator name
	ISID        string // hex, 12 digits
	TSIH        uint16
	Discovery   bool
	Connections []ConnInfo
	// Commands is the number of SCSI commands completed (with a
	// response); ReadBytes and WriteBytes the data-in sent and the
	// data-out received by them.
	Commands, ReadBytes, WriteBytes uint64
	Since                           time.Time // when the login completed
}

// logoutGrace is how long an initiator asked to log out (Async Message
// "target requests logout", whose Parameter3 announces it) has before its
// connection is dropped.
const logoutGrace = 2 * time.Second

// endWait bounds the wait for a dropped connection to end (its commands
// are aborted; a disk may hold one a while).
const endWait = 10 * time.Second

// Sessions returns the logged-in sessions, sorted by target name, then
// TSIH.
func (t *Target) Sessions() []SessionInfo {
	t.mu.Lock()
	out := make([]SessionInfo, 0, len(t.sessions))
	for _, s := range t.sessions {
		if s != nil {
			out = append(out, s.info())
		}
	}
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b SessionInfo) int {
		return cmp.Or(cmp.Compare(a.Target, b.Target), cmp.Compare(a.TSIH, b.TSIH))
	})
	return out
}

// info describes the session (its fields other than the counters are set
// before it is published in Target.sessions).
func (s *session) info() SessionInfo {
	si := SessionInfo{
		Initiator: s.initiator,
		ISID:      fmt.Sprintf("%012x", s.isid[:]),
		TSIH:      s.tsih,
		Discovery: s.node == nil,
		Connections: []ConnInfo{{
			CID: s.conn.connID, Transport: s.conn.x.name(), Remote: s.remote, Local: s.local,
		}},
		Commands:   s.commands.Load(),
		ReadBytes:  s.readBytes.Load(),
		WriteBytes: s.writeBytes.Load(),
		Since:      s.since,
	}
	if s.node != nil {
		si.Target = s.node.name
	}
	return si
}

// CloseSession ends the session with TSIH tsih: the initiator is asked to
// log out (Async Message "target requests logout"); its connection is
// dropped if it has not within two seconds. CloseSession returns once the
// session has ended.
func (t *Target) CloseSession(tsih uint16) error {
	t.mu.Lock()
	s := t.sessions[tsih]
	t.mu.Unlock()
	if s == nil {
		return fmt.Errorf("iscsi target: no session with TSIH %d", tsih)
	}
	return t.endSessions([]*session{s}, "closed by the administrator")
}

// endSessions asks the initiators of sess to log out, drops the
// connections of those that have not within logoutGrace, and waits for
// every session to end.
func (t *Target) endSessions(sess []*session, reason string) error {
	for _, s := range sess {
		s.conn.log.Info("iscsi: ending session", "reason", reason)
		s.conn.setEnd(endAdmin)
		s.conn.sendAsync(iser.AsyncRequestLogout, logoutGrace)
	}
	grace := time.NewTimer(logoutGrace)
	defer grace.Stop()
wait:
	for _, s := range sess {
		select {
		case <-s.conn.done:
		case <-grace.C:
			break wait
		}
	}
	for _, s := range sess {
		s.conn.drop(reason)
	}
	bound := time.NewTimer(endWait)
	defer bound.Stop()
	var errs []error
	for _, s := range sess {
		select {
		case <-s.conn.done:
		case <-bound.C:
			errs = append(errs, fmt.Errorf("iscsi target: session %d did not end within %v", s.tsih, endWait))
			continue
		}
	}
	return errors.Join(errs...)
}

// AddTarget exports a new target while the Target serves, checked as New
// checks Config.Targets. Logins may name it once AddTarget returns.
func (t *Target) AddTarget(tc TargetConfig) error {
	t.nodesMu.Lock()
	defer t.nodesMu.Unlock()
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return errors.New("iscsi target: closed")
	}
	old := t.nodes.Load()
	if _, dup := old.byName[tc.Name]; dup {
		return fmt.Errorf("iscsi target: target %s exists", tc.Name)
	}
	n, err := t.newNode(tc)
	if err != nil {
		return err
	}
	ns := &nodeSet{byName: make(map[string]*node, len(old.byName)+1), order: append(slices.Clip(old.order), tc.Name)}
	for k, v := range old.byName {
		ns.byName[k] = v
	}
	ns.byName[tc.Name] = n
	t.nodes.Store(ns)
	t.log.Info("iscsi: target added", "target", tc.Name)
	return nil
}

// RemoveTarget stops exporting the target named iqn: new logins to it
// fail with "not found", its sessions end as CloseSession ends them, then
// its LUNs are unmapped (their logical units may be mapped elsewhere).
func (t *Target) RemoveTarget(iqn string) error {
	t.openMu.Lock()
	t.nodesMu.Lock()
	old := t.nodes.Load()
	n := old.byName[iqn]
	if n == nil {
		t.nodesMu.Unlock()
		t.openMu.Unlock()
		return fmt.Errorf("iscsi target: no target %s", iqn)
	}
	ns := &nodeSet{byName: make(map[string]*node, len(old.byName)), order: slices.DeleteFunc(slices.Clone(old.order), func(s string) bool { return s == iqn })}
	for k, v := range old.byName {
		if k != iqn {
			ns.byName[k] = v
		}
	}
	t.nodes.Store(ns)
	t.nodesMu.Unlock()
	// Logins create their sessions under openMu and look the node up
	// there: every session of n is in t.sessions now, and no other will
	// be.
	var sess []*session
	t.mu.Lock()
	for _, s := range t.sessions {
		if s != nil && s.node == n {
			sess = append(sess, s)
		}
	}
	t.mu.Unlock()
	t.openMu.Unlock()
	t.log.Info("iscsi: removing target", "target", iqn, "sessions", len(sess))
	err := t.endSessions(sess, "target removed")
	n.unmapAll()
	return err
}

// MapLUN maps lu as LUN lun of the target named iqn (scsi.Target.Map: the
// sessions get a REPORTED LUNS DATA HAS CHANGED unit attention). The LU's
// limits are the caller's: set its MaxTransferBlocks from
// Config.MaxTransfer.
func (t *Target) MapLUN(iqn string, lun uint64, lu *scsi.LU) error {
	if lu == nil {
		return fmt.Errorf("iscsi target %s LUN %d: no logical unit", iqn, lun)
	}
	t.nodesMu.Lock()
	defer t.nodesMu.Unlock()
	n := t.node(iqn)
	if n == nil {
		return fmt.Errorf("iscsi target: no target %s", iqn)
	}
	if err := n.scsi.Map(lun, lu); err != nil {
		return fmt.Errorf("iscsi target %s LUN %d: %w", iqn, lun, err)
	}
	n.setInline(lun, t.inlineFor(lu))
	return nil
}

// UnmapLUN unmaps LUN lun of the target named iqn and returns its logical
// unit (scsi.Target.Unmap: commands running on it complete, the sessions
// that saw it get a REPORTED LUNS DATA HAS CHANGED unit attention). The
// mapped LUNs of the ACLs that reach lun are removed, as LIO removes them
// with the TPG LUN: mapping lun again does not bring them back (SetACLs
// does). An ACL entry that loses its last mapped LUN this way sees no LUN
// (not every LUN, as an entry configured without mapped LUNs does).
func (t *Target) UnmapLUN(iqn string, lun uint64) (*scsi.LU, error) {
	// openMu: sessions take their view from the ACLs under it.
	t.openMu.Lock()
	defer t.openMu.Unlock()
	t.nodesMu.Lock()
	defer t.nodesMu.Unlock()
	n := t.node(iqn)
	if n == nil {
		return nil, fmt.Errorf("iscsi target: no target %s", iqn)
	}
	lu, err := n.scsi.Unmap(lun)
	if err != nil {
		return nil, fmt.Errorf("iscsi target %s: %w", iqn, err)
	}
	n.setInline(lun, false)
	a := n.access.Load()
	var pruned map[string]*scsi.LUNView
	for ini, v := range a.acl {
		ms := v.Mappings()
		keep := slices.DeleteFunc(slices.Clone(ms), func(m scsi.LUNMapping) bool { return m.LUN == lun })
		if len(keep) == len(ms) {
			continue
		}
		if pruned == nil {
			pruned = maps.Clone(a.acl)
		}
		nv, err := scsi.NewLUNView(keep)
		if err != nil { // cannot happen: a subset of a valid view
			nv = &scsi.LUNView{}
		}
		pruned[ini] = nv
	}
	if pruned != nil {
		na := *a
		na.acl = pruned
		n.access.Store(&na)
		// The scsi target dropped the LUN from the views already: this
		// swap raises no second unit attention.
		t.applyViews(n, &na)
	}
	return lu, nil
}

// setInline replaces the inline marks with lun's set to on (nodesMu held).
func (n *node) setInline(lun uint64, on bool) {
	old := *n.inline.Load()
	if old[lun] == on {
		return
	}
	m := make(map[uint64]bool, len(old)+1)
	for k, v := range old {
		if v {
			m[k] = true
		}
	}
	if on {
		m[lun] = true
	} else {
		delete(m, lun)
	}
	n.inline.Store(&m)
}

// SetAllowedInitiators replaces the initiator names allowed to log in to
// the target named iqn (empty: any initiator). Sessions already logged in
// stay.
func (t *Target) SetAllowedInitiators(iqn string, names []string) error {
	return t.setAccess(iqn, func(a *access) (*access, error) {
		na, err := checkAccess(iqn, names, a.chap, a.mutual)
		if err == nil {
			na.acl = a.acl
		}
		return na, err
	})
}

// SetCHAP replaces the CHAP identity initiators must log in to the target
// named iqn with (nil: none) and the one the target answers a mutual
// challenge with (nil: mutual CHAP fails). Sessions already logged in
// stay.
func (t *Target) SetCHAP(iqn string, chap, mutual *iser.CHAPSecret) error {
	return t.setAccess(iqn, func(a *access) (*access, error) {
		na, err := checkAccess(iqn, a.allowed, chap, mutual)
		if err == nil {
			na.acl = a.acl
		}
		return na, err
	})
}

// SetACLs replaces the ACL entries of the target named iqn (see
// TargetConfig.ACLs; checked as New checks them, against the target's
// current LUNs). They decide new logins, as AllowedInitiators does, and
// the LUN map of new and running sessions: each running session takes the
// view of its initiator's new entry at once, with a REPORTED LUNS DATA HAS
// CHANGED unit attention when what it sees changes. A running session
// whose initiator the new ACLs no longer admit stays logged in but sees no
// LUN.
func (t *Target) SetACLs(iqn string, acls []ACL) error {
	// openMu: a login takes its session's view under it, so none opens
	// with the old ACLs after the views below are swapped.
	t.openMu.Lock()
	defer t.openMu.Unlock()
	t.nodesMu.Lock()
	defer t.nodesMu.Unlock()
	n := t.node(iqn)
	if n == nil {
		return fmt.Errorf("iscsi target: no target %s", iqn)
	}
	m, err := checkACLs(iqn, acls, n.scsi.LUNs())
	if err != nil {
		return err
	}
	na := *n.access.Load()
	na.acl = m
	n.access.Store(&na)
	t.applyViews(n, &na)
	return nil
}

// applyViews gives every running session of n its initiator's view under
// a (openMu held).
func (t *Target) applyViews(n *node, a *access) {
	var sess []*session
	t.mu.Lock()
	for _, s := range t.sessions {
		if s != nil && s.node == n && s.scsi != nil {
			sess = append(sess, s)
		}
	}
	t.mu.Unlock()
	for _, s := range sess {
		// A session closing meanwhile fails with ErrSessionClosed:
		// nothing to update.
		s.scsi.SetView(a.viewFor(s.initiator))
	}
}

func (t *Target) setAccess(iqn string, edit func(*access) (*access, error)) error {
	t.nodesMu.Lock()
	defer t.nodesMu.Unlock()
	n := t.node(iqn)
	if n == nil {
		return fmt.Errorf("iscsi target: no target %s", iqn)
	}
	a, err := edit(n.access.Load())
	if err != nil {
		return err
	}
	n.access.Store(a)
	return nil
}

// SetPortGroupState changes the ALUA state of target port group id of the
// target named iqn (scsi.Target.SetPortGroupState): its sessions get an
// ASYMMETRIC ACCESS STATE CHANGED unit attention on their next command,
// and commands through the group's ports follow the new state.
func (t *Target) SetPortGroupState(iqn string, id uint16, st scsi.ALUAState) error {
	n := t.node(iqn)
	if n == nil {
		return fmt.Errorf("iscsi target: no target %s", iqn)
	}
	if err := n.scsi.SetPortGroupState(id, st); err != nil {
		return fmt.Errorf("iscsi target %s: %w", iqn, err)
	}
	t.log.Info("iscsi: ALUA state changed", "target", iqn, "group", id, "state", st.String())
	return nil
}

// PortGroups returns the ALUA target port groups of the target named iqn
// with their current states (scsi.Target.PortGroups).
func (t *Target) PortGroups(iqn string) ([]scsi.PortGroupConfig, error) {
	n := t.node(iqn)
	if n == nil {
		return nil, fmt.Errorf("iscsi target: no target %s", iqn)
	}
	return n.scsi.PortGroups(), nil
}
