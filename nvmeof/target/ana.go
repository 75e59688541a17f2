package target

import (
	"fmt"
	"slices"
	"time"

	"github.com/rdisk/rdisk/nvmeof"
)

// Asymmetric Namespace Access, cut as Linux nvmet has it
// (drivers/nvme/target/configfs.c ana_groups and ana_state, core.c
// nvmet_check_ana_state and nvmet_port_send_ana_event, admin-cmd.c
// nvmet_execute_get_log_page_ana): every namespace is in an ANA group
// (group 1 unless configured), every port has a state per group (group 1
// optimized unless set; a group the port was not given is inaccessible
// through it), a controller reports the states of its port, and I/O to a
// namespace whose group is not usable on the controller's port fails with
// the path related status of the state. One change count serves the
// target (nvmet_ana_chgcnt).

const (
	// maxANAGroups is ANAGRPMAX and NANAGRPID (NVMET_MAX_ANAGRPS).
	maxANAGroups = 128
	// defaultANAGroup is the group of a namespace that names none
	// (NVMET_DEFAULT_ANA_GRPID).
	defaultANAGroup = 1
	// defaultANATT is nvmet's ANA Transition Time, in seconds.
	defaultANATT = 10
)

// anaTransitionTime converts Config.ANATransitionTime to ANATT seconds.
func anaTransitionTime(d time.Duration) (uint8, error) {
	switch {
	case d == 0:
		return defaultANATT, nil
	case d < 0 || d > 255*time.Second:
		return 0, fmt.Errorf("ANA transition time %v: want 1s to 255s", d)
	}
	return uint8(max(1, (d+time.Second-1)/time.Second)), nil
}

// checkANAGroup validates an ANA group ID.
func checkANAGroup(grpid uint32) error {
	if grpid < 1 || grpid > maxANAGroups {
		return fmt.Errorf("ANA group %d: want 1 to %d", grpid, maxANAGroups)
	}
	return nil
}

// initANA sets the port's states from its config: group 1 optimized
// unless set, as nvmet's ports start.
func (p *Port) initANA(groups map[uint32]nvmeof.ANAState) error {
	p.ana[defaultANAGroup].Store(uint32(nvmeof.ANAOptimized))
	for g, st := range groups {
		if err := checkANAGroup(g); err != nil {
			return fmt.Errorf("port %d: %w", p.cfg.ID, err)
		}
		if !st.Valid() {
			return fmt.Errorf("port %d: ANA group %d: state %v is not an ANA state", p.cfg.ID, g, st)
		}
		p.ana[g].Store(uint32(st))
	}
	return nil
}

// anaState returns the state of group grpid on the port: inaccessible for
// a group the port does not have (nvmet's default for every group but 1).
// It is an atomic load: the I/O path calls it for every command.
func (p *Port) anaState(grpid uint32) nvmeof.ANAState {
	if grpid > maxANAGroups {
		return nvmeof.ANAInaccessible
	}
	if st := nvmeof.ANAState(p.ana[grpid].Load()); st != 0 {
		return st
	}
	return nvmeof.ANAInaccessible
}

// SetANAState sets the state of ANA group grpid on the port, adding the
// group if the port has not got it, and sends an ANA Change notice to the
// controllers of the port that enabled it (as nvmet's ana_state store and
// nvmet_port_send_ana_event). I/O received from then on sees the new
// state.
func (p *Port) SetANAState(grpid uint32, st nvmeof.ANAState) error {
	if err := checkANAGroup(grpid); err != nil {
		return fmt.Errorf("port %d: %w", p.cfg.ID, err)
	}
	if !st.Valid() {
		return fmt.Errorf("port %d: ANA group %d: state %v is not an ANA state", p.cfg.ID, grpid, st)
	}
	p.anaMu.Lock()
	old := nvmeof.ANAState(p.ana[grpid].Swap(uint32(st)))
	p.t.anaChanged()
	p.anaMu.Unlock()
	if old != st {
		p.t.log.Info("nvmeof: ANA state changed", "port", p.cfg.ID, "ana_group", grpid, "old", old, "state", st)
	}
	p.sendANAEvent()
	return nil
}

// RemoveANAGroup takes group grpid off the port: its namespaces are
// inaccessible through the port from then on (nvmet's ana_groups rmdir).
// Group 1, the default group, cannot be removed; set its state instead.
func (p *Port) RemoveANAGroup(grpid uint32) error {
	if err := checkANAGroup(grpid); err != nil {
		return fmt.Errorf("port %d: %w", p.cfg.ID, err)
	}
	if grpid == defaultANAGroup {
		return fmt.Errorf("port %d: ANA group 1 is the default group: it cannot be removed (set its state)", p.cfg.ID)
	}
	p.anaMu.Lock()
	if p.ana[grpid].Load() == 0 {
		p.anaMu.Unlock()
		return fmt.Errorf("port %d has no ANA group %d", p.cfg.ID, grpid)
	}
	p.ana[grpid].Store(0)
	p.t.anaChanged()
	p.anaMu.Unlock()
	p.t.log.Info("nvmeof: ANA group removed from port", "port", p.cfg.ID, "ana_group", grpid)
	p.sendANAEvent()
	return nil
}

// ANAStates returns the port's ANA groups and their states.
func (p *Port) ANAStates() map[uint32]nvmeof.ANAState {
	out := map[uint32]nvmeof.ANAState{}
	for g := uint32(1); g <= maxANAGroups; g++ {
		if st := nvmeof.ANAState(p.ana[g].Load()); st != 0 {
			out[g] = st
		}
	}
	return out
}

// sendANAEvent notifies the controllers of the port.
func (p *Port) sendANAEvent() {
	p.mu.Lock()
	subs := slices.Clone(p.subs)
	p.mu.Unlock()
	for _, s := range subs {
		s.sendANAEvent(p)
	}
}

// sendANAEvent notifies the controllers of s on port p (every port: nil),
// as nvmet_send_ana_event.
func (s *Subsystem) sendANAEvent(p *Port) {
	s.mu.RLock()
	cs := s.controllersLocked()
	s.mu.RUnlock()
	for _, c := range cs {
		if p == nil || c.port == p {
			c.anaChanged()
		}
	}
}

// anaChanged counts a change of any ANA state or membership.
func (t *Target) anaChanged() { t.anaChg.Add(1) }

// SetNamespaceANAGroup moves namespace nsid to ANA group grpid and sends
// an ANA Change notice to every controller of the subsystem that enabled
// it (nvmet's ns anagrpid store).
func (s *Subsystem) SetNamespaceANAGroup(nsid, grpid uint32) error {
	if err := checkANAGroup(grpid); err != nil {
		return fmt.Errorf("namespace %d of %s: %w", nsid, s.cfg.NQN, err)
	}
	s.mu.Lock()
	n, ok := s.ns[nsid]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("namespace %d not found in %s", nsid, s.cfg.NQN)
	}
	// Namespaces are read without the lock on the I/O path: replace, do
	// not modify.
	moved := *n
	moved.cfg.ANAGroupID = grpid
	s.ns[nsid] = &moved
	s.t.anaChanged()
	s.mu.Unlock()
	s.t.log.Info("nvmeof: namespace moved to another ANA group", "subsystem", s.cfg.NQN, "nsid", nsid, "old", n.cfg.ANAGroupID, "ana_group", grpid)
	s.sendANAEvent(nil)
	return nil
}

// anaChanged raises an ANA Change notice if the host enabled it (and none
// is outstanding: the host clears it by reading the log).
func (c *controller) anaChanged() {
	if c.disc {
		return
	}
	c.mu.Lock()
	enabled := c.aenCfg&nvmeof.AENConfigANAChange != 0
	c.mu.Unlock()
	if enabled {
		c.event(nvmeof.AsyncEventNotice, nvmeof.NoticeANAChange, nvmeof.LogANA)
	}
}

// anaLog builds the ANA log page for c: the groups of its port, group 1,
// and the groups of the subsystem's namespaces, ascending, each with the
// state on c's port and (unless rgo) its enabled namespaces.
func (c *controller) anaLog(rgo bool) []byte {
	var present [maxANAGroups + 1]bool
	present[defaultANAGroup] = true
	for g := range maxANAGroups + 1 {
		if g > 0 && c.port.ana[g].Load() != 0 {
			present[g] = true
		}
	}
	members := map[uint32][]uint32{}
	c.sub.mu.RLock()
	for id, n := range c.sub.ns {
		if n.cfg.Disabled {
			continue
		}
		present[n.cfg.ANAGroupID] = true
		members[n.cfg.ANAGroupID] = append(members[n.cfg.ANAGroupID], id)
	}
	c.sub.mu.RUnlock()
	chg := c.t.anaChg.Load()
	l := nvmeof.ANALog{ChangeCount: chg}
	for g := uint32(1); g <= maxANAGroups; g++ {
		if !present[g] {
			continue
		}
		ids := members[g]
		slices.Sort(ids)
		l.Groups = append(l.Groups, nvmeof.ANAGroupDesc{GroupID: g, ChangeCount: chg, State: c.port.anaState(g), NSIDs: ids})
	}
	b := make([]byte, l.Size(rgo))
	if _, err := l.Encode(b, rgo); err != nil {
		// Cannot happen: the groups and states were checked when set.
		c.t.log.Warn("nvmeof: encoding the ANA log", c.logAttrs("err", err)...)
	}
	return b
}
