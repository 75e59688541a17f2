package scsi

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

// ALUAState is a target port asymmetric access state (SPC-5 5.16.2.2,
// table 41 of the REPORT TARGET PORT GROUPS descriptor): the value of the
// ASYMMETRIC ACCESS STATE field. LBA dependent (4h) is not supported.
type ALUAState uint8

// Asymmetric access states.
const (
	ALUAActiveOptimized    ALUAState = 0x0
	ALUAActiveNonOptimized ALUAState = 0x1
	ALUAStandby            ALUAState = 0x2
	ALUAUnavailable        ALUAState = 0x3
	ALUAOffline            ALUAState = 0xe
	ALUATransitioning      ALUAState = 0xf
)

// String returns the state's configuration word ("active-optimized").
func (s ALUAState) String() string {
	switch s {
	case ALUAActiveOptimized:
		return "active-optimized"
	case ALUAActiveNonOptimized:
		return "active-non-optimized"
	case ALUAStandby:
		return "standby"
	case ALUAUnavailable:
		return "unavailable"
	case ALUAOffline:
		return "offline"
	case ALUATransitioning:
		return "transitioning"
	}
	return "alua-state(0x" + strconv.FormatUint(uint64(s), 16) + ")"
}

// Valid reports whether s is one of the states this package supports.
func (s ALUAState) Valid() bool {
	switch s {
	case ALUAActiveOptimized, ALUAActiveNonOptimized, ALUAStandby, ALUAUnavailable, ALUAOffline, ALUATransitioning:
		return true
	}
	return false
}

// ParseALUAState parses a state's configuration word: the names String
// returns, or NVMe ANA's names for the same states ("optimized",
// "non-optimized", "inaccessible", "persistent-loss", "change"), so that
// one word configures both protocols. Case is ignored.
func ParseALUAState(s string) (ALUAState, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "active-optimized", "optimized":
		return ALUAActiveOptimized, nil
	case "active-non-optimized", "non-optimized":
		return ALUAActiveNonOptimized, nil
	case "standby":
		return ALUAStandby, nil
	case "unavailable", "inaccessible":
		return ALUAUnavailable, nil
	case "offline", "persistent-loss":
		return ALUAOffline, nil
	case "transitioning", "change":
		return ALUATransitioning, nil
	}
	return 0, fmt.Errorf("%w: %q", ErrALUAState, s)
}

// PortGroupConfig is one target port group: its identifier, asymmetric
// access state and member ports.
type PortGroupConfig struct {
	// ID is the target port group identifier (1-65535), reported by
	// REPORT TARGET PORT GROUPS and the target port group designator of
	// VPD page 83h.
	ID uint16
	// State is the group's asymmetric access state.
	State ALUAState
	// Ports are the relative target port identifiers of the group's
	// ports (SessionConfig.RelativeTargetPort): local ones and those of
	// other gateways exporting the same LU, which REPORT TARGET PORT
	// GROUPS lists too. A port is in at most one group.
	Ports []uint16
	// ImplicitTransitionSecs is the IMPLICIT TRANSITION TIME reported in
	// the extended header of REPORT TARGET PORT GROUPS to sessions of this
	// group's ports (LIO's implicit_trans_secs); 0: none given.
	ImplicitTransitionSecs uint8
}

// portGroup is the live state of one target port group. Its identity and
// ports are fixed; the state and status change (SetPortGroupState).
type portGroup struct {
	id        uint16
	ports     []uint16 // sorted
	transSecs uint8
	state     atomic.Uint32 // ALUAState
	altered   atomic.Bool   // status code 02h: altered by implicit ALUA
}

// aluaTable is a target's set of port groups, replaced whole when a group
// is added or removed (the groups' states are shared by successive
// tables).
type aluaTable struct {
	groups []*portGroup // in ID order
	byPort map[uint16]*portGroup
	// def is the group of the ports no group lists: the group whose ID is
	// TargetConfig.PortGroup, or an implicit active/optimized group of
	// that ID.
	def *portGroup
	// implicit: def is not one of the configured groups.
	implicit bool
}

// Supported asymmetric access states of every group (the byte after the
// state in a target port group descriptor, SPC-5 table 163): T_SUP,
// O_SUP, U_SUP, S_SUP, AN_SUP and AO_SUP, as LIO's default
// tg_pt_gp_alua_supported_states; LBD_SUP is clear.
const aluaSupportedStates = 0x80 | 0x40 | 0x08 | 0x04 | 0x02 | 0x01

// ASYMMETRIC ACCESS STATE CHANGED and the status codes of a descriptor.
const (
	tpgStatusNone     = 0x00
	tpgStatusImplicit = 0x02 // altered by implicit asymmetric logical unit access
)

// checkPortGroup validates one group against the groups already in gs.
func checkPortGroup(gs []*portGroup, g PortGroupConfig) error {
	if g.ID == 0 {
		return fmt.Errorf("%w: port group ID 0 (1-65535)", ErrPortGroup)
	}
	if !g.State.Valid() {
		return fmt.Errorf("%w: port group %d: state %s", ErrALUAState, g.ID, g.State)
	}
	seen := map[uint16]bool{}
	for _, p := range g.Ports {
		if p == 0 {
			return fmt.Errorf("%w: port group %d: relative target port 0 (1-65535)", ErrPortGroup, g.ID)
		}
		if seen[p] {
			return fmt.Errorf("%w: port group %d lists port %d twice", ErrPortGroup, g.ID, p)
		}
		seen[p] = true
	}
	for _, o := range gs {
		if o.id == g.ID {
			return fmt.Errorf("%w: port group %d already exists", ErrPortGroup, g.ID)
		}
		for _, p := range g.Ports {
			if slices.Contains(o.ports, p) {
				return fmt.Errorf("%w: port %d is in groups %d and %d", ErrPortGroup, p, o.id, g.ID)
			}
		}
	}
	return nil
}

// ValidatePortGroups checks a set of port groups as NewTarget and
// AddPortGroup would take them: IDs and relative target ports 1-65535, no
// ID twice, no port in two groups, supported states.
func ValidatePortGroups(groups []PortGroupConfig) error {
	var gs []*portGroup
	for _, g := range groups {
		if err := checkPortGroup(gs, g); err != nil {
			return err
		}
		gs = append(gs, newPortGroup(g))
	}
	return nil
}

func newPortGroup(g PortGroupConfig) *portGroup {
	pg := &portGroup{id: g.ID, ports: slices.Clone(g.Ports), transSecs: g.ImplicitTransitionSecs}
	slices.Sort(pg.ports)
	pg.state.Store(uint32(g.State))
	return pg
}

// buildALUA makes the table of groups gs (sorted by ID) with default
// group ID def.
func buildALUA(gs []*portGroup, def uint16) *aluaTable {
	tab := &aluaTable{groups: gs, byPort: map[uint16]*portGroup{}}
	for _, g := range gs {
		for _, p := range g.ports {
			tab.byPort[p] = g
		}
		if g.id == def {
			tab.def = g
		}
	}
	if tab.def == nil {
		tab.def = &portGroup{id: def}
		tab.implicit = true
	}
	return tab
}

// showDefault reports whether the implicit default group is reported:
// always without configured groups, otherwise when a port in use (seen)
// is in no configured group.
func (tab *aluaTable) showDefault(seen []uint16) bool {
	if !tab.implicit {
		return false
	}
	if len(tab.groups) == 0 {
		return true
	}
	for _, p := range seen {
		if tab.byPort[p] == nil {
			return true
		}
	}
	return false
}

// group returns the port group of relative target port p.
func (tab *aluaTable) group(p uint16) *portGroup {
	if g := tab.byPort[p]; g != nil {
		return g
	}
	return tab.def
}

// PortGroups returns the target's port groups with their current states,
// in ID order. Without configured groups it is the one implicit group of
// TargetConfig.PortGroup (active/optimized) with the ports sessions came
// in through; beside configured groups, that implicit group is reported
// (here and by REPORT TARGET PORT GROUPS) only while a port in use is in
// no configured group.
func (t *Target) PortGroups() []PortGroupConfig {
	tab := t.alua.Load()
	ports := t.targetPorts()
	var out []PortGroupConfig
	add := func(g *portGroup) {
		out = append(out, PortGroupConfig{ID: g.id, State: ALUAState(g.state.Load()), Ports: t.groupPorts(tab, g, ports), ImplicitTransitionSecs: g.transSecs})
	}
	if tab.showDefault(ports) {
		add(tab.def)
	}
	for _, g := range tab.groups {
		add(g)
	}
	slices.SortFunc(out, func(a, b PortGroupConfig) int { return int(a.ID) - int(b.ID) })
	return out
}

// groupPorts returns the ports of g: those configured, and for the default
// group the ports in use (seen) that no group lists.
func (t *Target) groupPorts(tab *aluaTable, g *portGroup, seen []uint16) []uint16 {
	out := slices.Clone(g.ports)
	if g == tab.def {
		for _, p := range seen {
			if tab.byPort[p] == nil {
				out = append(out, p)
			}
		}
		slices.Sort(out)
		out = slices.Compact(out)
	}
	return out
}

// AddPortGroup adds a target port group. Its ports leave the default group
// (TargetConfig.PortGroup) if they were in it; every nexus of the target
// gets an ASYMMETRIC ACCESS STATE CHANGED unit attention when the group's
// state differs from the one its ports had.
func (t *Target) AddPortGroup(g PortGroupConfig) error {
	t.mu.Lock()
	old := t.alua.Load()
	if err := checkPortGroup(old.groups, g); err != nil {
		t.mu.Unlock()
		return err
	}
	changed := false
	for _, p := range g.Ports {
		if ALUAState(old.group(p).state.Load()) != g.State {
			changed = true
		}
	}
	if g.ID == old.def.id && old.implicit && g.State != ALUAState(old.def.state.Load()) {
		changed = true
	}
	gs := append(slices.Clone(old.groups), newPortGroup(g))
	slices.SortFunc(gs, func(a, b *portGroup) int { return int(a.id) - int(b.id) })
	t.alua.Store(buildALUA(gs, t.cfg.PortGroup))
	t.mu.Unlock()
	if changed {
		t.establishALUAChanged()
	}
	return nil
}

// RemovePortGroup removes a target port group; its ports join the default
// group (TargetConfig.PortGroup). Nexuses whose port changes state get
// ASYMMETRIC ACCESS STATE CHANGED.
func (t *Target) RemovePortGroup(id uint16) error {
	t.mu.Lock()
	old := t.alua.Load()
	i := slices.IndexFunc(old.groups, func(g *portGroup) bool { return g.id == id })
	if i < 0 {
		t.mu.Unlock()
		return fmt.Errorf("%w: no port group %d", ErrPortGroup, id)
	}
	gs := slices.Delete(slices.Clone(old.groups), i, i+1)
	next := buildALUA(gs, t.cfg.PortGroup)
	changed := false
	for _, p := range old.groups[i].ports {
		if next.group(p).state.Load() != old.groups[i].state.Load() {
			changed = true
		}
	}
	t.alua.Store(next)
	t.mu.Unlock()
	if changed {
		t.establishALUAChanged()
	}
	return nil
}

// SetPortGroupState changes the asymmetric access state of group id, an
// implicit transition (SPC-5 5.16.2.6): the group's status code becomes
// ALTERED BY IMPLICIT ASYMMETRIC ACCESS STATE TRANSITION, and every I_T
// nexus of the target gets an ASYMMETRIC ACCESS STATE CHANGED (2Ah/06h)
// unit attention (LIO's core_alua_do_transition_tg_pt_work establishes it
// on the nexuses of the group's ports; SPC-5 asks for every nexus, which
// is what tells hosts on the other groups' paths to look again). Setting
// the state a group has already changes nothing, as in LIO.
func (t *Target) SetPortGroupState(id uint16, st ALUAState) error {
	if !st.Valid() {
		return fmt.Errorf("%w: %s", ErrALUAState, st)
	}
	t.mu.Lock()
	tab := t.alua.Load()
	var g *portGroup
	for _, x := range tab.groups {
		if x.id == id {
			g = x
		}
	}
	if g == nil && tab.def.id == id {
		g = tab.def
	}
	if g == nil {
		t.mu.Unlock()
		return fmt.Errorf("%w: no port group %d", ErrPortGroup, id)
	}
	prev := g.state.Swap(uint32(st))
	if prev != uint32(st) {
		g.altered.Store(true)
	}
	t.mu.Unlock()
	if prev != uint32(st) {
		t.establishALUAChanged()
	}
	return nil
}

// establishALUAChanged sets ASYMMETRIC ACCESS STATE CHANGED on every I_T
// nexus of the target, on every LU.
func (t *Target) establishALUAChanged() {
	for _, e := range *t.luns.Load() {
		e.lu.establishUAFor(func(s *Session) bool { return s.t == t }, uaALUAChanged)
	}
}

// aluaGroup returns the port group of the session's target port.
func (s *Session) aluaGroup() *portGroup {
	return s.t.alua.Load().group(s.cfg.RelativeTargetPort)
}

// ALUAState returns the asymmetric access state of the session's target
// port.
func (s *Session) ALUAState() ALUAState { return ALUAState(s.aluaGroup().state.Load()) }

// aluaCheck applies the command filter of the state of the session's port
// group (LIO's target_alua_state_check): in the active states everything
// passes; in the others only the commands SPC-5 5.16.2.4 allows, the rest
// fail with NOT READY and the state's ASCQ. ok is false when the command
// is refused, with the sense to fail it with.
func (s *Session) aluaCheck(b []byte) (senseInfo, bool) {
	st := ALUAState(s.aluaGroup().state.Load())
	if st == ALUAActiveOptimized || st == ALUAActiveNonOptimized {
		return senseInfo{}, true
	}
	var op, sa uint8
	if len(b) > 0 {
		op = b[0]
	}
	if len(b) > 1 {
		sa = b[1] & 0x1f
	}
	switch st {
	case ALUAStandby:
		if aluaStandbyAllows(op, sa) {
			return senseInfo{}, true
		}
		return senseInfo{key: KeyNotReady, asc: ASCALUAStandby}, false
	case ALUAUnavailable:
		if aluaUnavailableAllows(op, sa) {
			return senseInfo{}, true
		}
		return senseInfo{key: KeyNotReady, asc: ASCALUAUnavailable}, false
	case ALUATransitioning:
		// LIO's core_alua_state_transition: as unavailable, without SET
		// TARGET PORT GROUPS (SPC-5 5.16.2.5).
		if op != OpMaintenanceOut && aluaUnavailableAllows(op, sa) {
			return senseInfo{}, true
		}
		return senseInfo{key: KeyNotReady, asc: ASCALUATransition}, false
	}
	// Offline: LIO's secondary offline state refuses every command with
	// NOT READY, 04h/12h (ASCQ_04H_ALUA_OFFLINE) before looking at it.
	return senseInfo{key: KeyNotReady, asc: ASCALUAOffline}, false
}

// Commands outside this package's command table that the state filters
// name (SPC-5 5.16.2.4.4 and 5.16.2.4.5).
const (
	opLogSelect      = 0x4c
	opSendDiag       = 0x1d
	opReceiveDiag    = 0x1c
	opReadBuffer     = 0x3c
	opWriteBuffer    = 0x3b
	saSetTargetPorts = 0x0a
)

// aluaStandbyAllows: the commands of LIO's core_alua_state_standby
// (SPC-5 5.16.2.4.4): INQUIRY, LOG SELECT/SENSE, MODE SELECT/SENSE (LIO
// lists the 6-byte forms; SPC names the commands, so both forms pass
// here), REPORT LUNS, RECEIVE/SEND DIAGNOSTIC, READ CAPACITY(10/16),
// REPORT/SET TARGET PORT GROUPS, REQUEST SENSE, PERSISTENT RESERVE IN/OUT,
// READ/WRITE BUFFER.
func aluaStandbyAllows(op, sa uint8) bool {
	switch op {
	case OpInquiry, opLogSelect, OpLogSense, OpModeSelect6, OpModeSense6, OpModeSelect10, OpModeSense10,
		OpReportLUNs, opReceiveDiag, opSendDiag, OpReadCapacity10,
		OpRequestSense, OpPersistentReserveIn, OpPersistentReserveOut, opReadBuffer, opWriteBuffer:
		return true
	case OpServiceActionIn16:
		return sa == SAReadCapacity16
	case OpMaintenanceIn:
		return sa == SAReportTargetPortGroup
	case OpMaintenanceOut:
		return sa == saSetTargetPorts
	}
	return false
}

// aluaUnavailableAllows: LIO's core_alua_state_unavailable (SPC-5
// 5.16.2.4.5): INQUIRY, REPORT LUNS, REPORT/SET TARGET PORT GROUPS,
// REQUEST SENSE, READ/WRITE BUFFER.
func aluaUnavailableAllows(op, sa uint8) bool {
	switch op {
	case OpInquiry, OpReportLUNs, OpRequestSense, opReadBuffer, opWriteBuffer:
		return true
	case OpMaintenanceIn:
		return sa == SAReportTargetPortGroup
	case OpMaintenanceOut:
		return sa == saSetTargetPorts
	}
	return false
}

// execReportTPG: REPORT TARGET PORT GROUPS (SPC-5 6.38). Every group with
// its state, the supported states, PREF clear, its status code and its
// ports; PARAMETER DATA FORMAT 001b gives the extended header (SPC-5 table
// 162) with the implicit transition time of the session's group. The
// RETURN DATA LENGTH counts every byte after itself (n-3), which is what
// Linux's scsi_dh_alua adds 4 to.
func execReportTPG(lu *LU, c *Command, b cdb, it *itl) {
	s := it.sess
	t := s.t
	tab := t.alua.Load()
	var fmtType uint8
	switch b[1] >> 5 {
	case 0:
	case 1:
		fmtType = 1
	default:
		c.fail(invalidCDB(1, 7))
		return
	}
	hdr := 4
	if fmtType == 1 {
		hdr = 8
	}
	seen := t.targetPorts()
	var buf [1024]byte
	d := buf[:hdr]
	clear(d)
	put := func(g *portGroup) {
		var desc [8]byte
		desc[0] = uint8(g.state.Load()) & 0x0f // PREF 0
		desc[1] = aluaSupportedStates
		binary.BigEndian.PutUint16(desc[2:4], g.id)
		if g.altered.Load() {
			desc[5] = tpgStatusImplicit
		} else {
			desc[5] = tpgStatusNone
		}
		start := len(d)
		d = append(d, desc[:]...)
		n := 0
		add := func(p uint16) {
			if n == 255 { // TARGET PORT COUNT is one byte
				return
			}
			d = append(d, 0, 0, byte(p>>8), byte(p))
			n++
		}
		// The configured ports and, for the default group, the ports in
		// use that no group lists, in increasing order.
		for _, p := range t.groupPorts(tab, g, seen) {
			add(p)
		}
		d[start+7] = uint8(n)
	}
	placed := !tab.showDefault(seen)
	for _, g := range tab.groups {
		if !placed && tab.def.id < g.id {
			put(tab.def)
			placed = true
		}
		put(g)
	}
	if !placed {
		put(tab.def)
	}
	binary.BigEndian.PutUint32(d[0:4], uint32(len(d)-4))
	if fmtType == 1 {
		d[4] = 0x10 // FORMAT TYPE 001b
		d[5] = tab.group(s.cfg.RelativeTargetPort).transSecs
	}
	c.respond(d, int(b.u32(6)))
}
