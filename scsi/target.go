package scsi

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// SPC-4 protocol identifiers (table 362), for SessionConfig.ProtocolID.
const (
	ProtocolFC    = 0x0
	ProtocolSRP   = 0x4
	ProtocolISCSI = 0x5
	ProtocolSAS   = 0x6
)

// TargetConfig describes a SCSI target device.
type TargetConfig struct {
	// Name is the SCSI target device name (iSCSI: the target IQN; SRP: the
	// target port identifier in hex). VPD page 83h reports it as a SCSI
	// name string with association "target device".
	Name string
	// PortGroup is the target port group of the ports that no group of
	// PortGroups lists (REPORT TARGET PORT GROUPS, VPD page 83h); 0 means
	// 1. Without PortGroups every port is in it, active/optimized.
	PortGroup uint16
	// PortGroups are the target port groups (ALUA, SPC-5 5.16): each with
	// its ID, asymmetric access state and relative target ports. Empty:
	// one group, PortGroup, active/optimized. Groups that
	// ValidatePortGroups refuses are left out (and logged): check the
	// configuration first.
	PortGroups []PortGroupConfig
	// Logger receives configuration warnings; nil discards them.
	Logger *slog.Logger
}

// Target is a SCSI target device: a LUN map of logical units and the
// sessions (I_T nexuses) of the initiators logged in to it. Transports
// create a Session per I_T nexus and send commands and task management
// through it. All methods are safe for concurrent use.
type Target struct {
	cfg  TargetConfig
	luns atomic.Pointer[[]lunEntry] // sorted by LUN; replaced, never modified
	alua atomic.Pointer[aluaTable]  // replaced under mu; group states are atomics

	mu       sync.Mutex
	sessions map[nexusID]*Session
	ports    map[uint16]string // relative target port -> port name
}

// lunEntry is one LUN of a LUN map: the target's (ro false) or a
// session's resolved view.
type lunEntry struct {
	lun uint64
	lu  *LU
	ro  bool // the mapping is read-only (LUNMapping.ReadOnly)
}

// NewTarget returns a target with an empty LUN map.
func NewTarget(cfg TargetConfig) *Target {
	if cfg.PortGroup == 0 {
		cfg.PortGroup = 1
	}
	t := &Target{cfg: cfg, sessions: make(map[nexusID]*Session), ports: make(map[uint16]string)}
	empty := []lunEntry{}
	t.luns.Store(&empty)
	var gs []*portGroup
	for _, g := range cfg.PortGroups {
		if err := checkPortGroup(gs, g); err != nil {
			if cfg.Logger != nil {
				cfg.Logger.Warn("scsi: port group left out", "target", cfg.Name, "group", g.ID, "err", err)
			}
			continue
		}
		gs = append(gs, newPortGroup(g))
	}
	slices.SortFunc(gs, func(a, b *portGroup) int { return int(a.id) - int(b.id) })
	t.alua.Store(buildALUA(gs, cfg.PortGroup))
	t.cfg.PortGroups = nil
	return t
}

// Name returns the target device name.
func (t *Target) Name() string { return t.cfg.Name }

// Map makes lu reachable as LUN lun. Every session that sees the LUN (all
// sessions without a LUNView, those whose view maps lun) gets a REPORTED
// LUNS DATA HAS CHANGED unit attention. An LU is mapped at most once in a
// target but may be mapped in several (the targets of different transports
// exporting one disk).
func (t *Target) Map(lun uint64, lu *LU) error {
	if lun > MaxLUN {
		return fmt.Errorf("%w: %d", ErrLUNRange, lun)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.luns.Load()
	for _, e := range old {
		if e.lun == lun {
			return fmt.Errorf("%w: LUN %d", ErrLUNInUse, lun)
		}
	}
	lu.mu.Lock()
	if lu.targets[t] {
		lu.mu.Unlock()
		return fmt.Errorf("%w: %v is mapped in this target already", ErrLUNInUse, lu)
	}
	if lu.targets == nil {
		lu.targets = map[*Target]bool{}
	}
	lu.targets[t] = true
	lu.mu.Unlock()
	next := append(slices.Clip(old), lunEntry{lun: lun, lu: lu})
	sort.Slice(next, func(i, j int) bool { return next[i].lun < next[j].lun })
	t.luns.Store(&next)
	t.refreshViewsLocked()
	return nil
}

// Unmap removes LUN lun from the map and returns its LU. Commands already
// running on it complete; later ones get LOGICAL UNIT NOT SUPPORTED. The
// LUN also disappears from the session views mapping it. Every session
// that saw it gets a REPORTED LUNS DATA HAS CHANGED unit attention.
func (t *Target) Unmap(lun uint64) (*LU, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.luns.Load()
	i := slices.IndexFunc(old, func(e lunEntry) bool { return e.lun == lun })
	if i < 0 {
		return nil, fmt.Errorf("%w: LUN %d", ErrNoLUN, lun)
	}
	lu := old[i].lu
	next := slices.Delete(slices.Clone(old), i, i+1)
	t.luns.Store(&next)
	for s := range lu.sessions() {
		if s.t == t {
			s.dropITL(lu)
		}
	}
	lu.mu.Lock()
	delete(lu.targets, t)
	lu.mu.Unlock()
	t.refreshViewsLocked()
	return lu, nil
}

// LUNs returns the mapped LUN numbers in increasing order.
func (t *Target) LUNs() []uint64 {
	m := *t.luns.Load()
	out := make([]uint64, len(m))
	for i, e := range m {
		out[i] = e.lun
	}
	return out
}

// LU returns the LU mapped at lun, or nil.
func (t *Target) LU(lun uint64) *LU { return t.lookup(lun) }

func (t *Target) lookup(lun uint64) *LU {
	if e := findLUN(*t.luns.Load(), lun); e != nil {
		return e.lu
	}
	return nil
}

// findLUN returns the entry of lun in m (sorted by LUN), or nil.
func findLUN(m []lunEntry, lun uint64) *lunEntry {
	lo, hi := 0, len(m)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if m[mid].lun < lun {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < len(m) && m[lo].lun == lun {
		return &m[lo]
	}
	return nil
}

// SessionConfig identifies the I_T nexus of a session.
type SessionConfig struct {
	// InitiatorPort is the SCSI initiator port name (iSCSI: the initiator
	// name with ",i,0x" and the ISID; SRP: the initiator port identifier
	// in hex). Together with RelativeTargetPort it identifies the I_T
	// nexus that owns unit attentions and reservations.
	InitiatorPort string
	// TransportID is the SPC-4 TransportID of the initiator port, reported
	// by PERSISTENT RESERVE IN READ FULL STATUS (see ISCSITransportID and
	// SRPTransportID). Nil means ISCSITransportID(InitiatorPort).
	TransportID []byte
	// ProtocolID is the SPC-4 protocol identifier of the transport
	// (ProtocolISCSI, ProtocolSRP), reported in VPD page 83h and used to
	// pick the transport version descriptor of the standard INQUIRY data.
	// 0 (Fibre Channel, which rdisk does not speak) marks the protocol as
	// unknown: the port designators then have PIV clear.
	ProtocolID uint8
	// RelativeTargetPort is the relative target port identifier (1-65535)
	// of the port the session came in through; 0 means 1.
	RelativeTargetPort uint16
	// TargetPort is the name of that target port (iSCSI: target name with
	// ",t,0x" and the TPGT), reported in VPD page 83h when not empty.
	TargetPort string
	// View, if set, is the LUNs the session sees (a per-initiator LUN
	// map, see LUNView); nil sees the target's whole LUN map.
	// Session.SetView replaces it while the session runs.
	View *LUNView
}

// nexusID identifies an I_T nexus.
type nexusID struct {
	initiator string
	port      uint16
}

// Session is an I_T nexus: the commands of one initiator port through one
// target port. Execute and TaskManagement are safe for concurrent use (for
// example from several connections of one iSCSI session).
type Session struct {
	t   *Target
	cfg SessionConfig
	id  nexusID
	tid []byte

	itls        atomic.Pointer[map[*LU]*itl] // copy on write
	view        atomic.Pointer[sessionView]  // nil: the target's whole map; set under t.mu
	lunsChanged atomic.Bool
	closed      atomic.Bool
	mu          sync.Mutex
}

// NewSession opens the I_T nexus described by cfg. Each logical unit
// reports a POWER ON, RESET, OR BUS DEVICE RESET OCCURRED unit attention to
// the new nexus on its first command, as after a power on (initiators such
// as libiscsi and Linux clear it with TEST UNIT READY after login).
func (t *Target) NewSession(cfg SessionConfig) (*Session, error) {
	if cfg.RelativeTargetPort == 0 {
		cfg.RelativeTargetPort = 1
	}
	s := &Session{t: t, cfg: cfg, id: nexusID{cfg.InitiatorPort, cfg.RelativeTargetPort}}
	s.tid = cfg.TransportID
	if s.tid == nil {
		s.tid = ISCSITransportID(cfg.InitiatorPort)
	} else {
		s.tid = append([]byte(nil), cfg.TransportID...)
	}
	m := map[*LU]*itl{}
	s.itls.Store(&m)
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, dup := t.sessions[s.id]; dup {
		return nil, fmt.Errorf("%w: %s via port %d", ErrDuplicateSession, cfg.InitiatorPort, cfg.RelativeTargetPort)
	}
	s.view.Store(t.resolveLocked(cfg.View))
	t.sessions[s.id] = s
	if _, ok := t.ports[cfg.RelativeTargetPort]; !ok || cfg.TargetPort != "" {
		t.ports[cfg.RelativeTargetPort] = cfg.TargetPort
	}
	return s, nil
}

// ISCSITransportID returns the SPC-4 TransportID of an iSCSI initiator
// port (7.6.4.6): format 01b when the port name carries the ",i,0x" ISID
// separator, format 00b (the initiator name alone) otherwise; the name is
// NUL-terminated and padded to a multiple of four bytes.
func ISCSITransportID(port string) []byte {
	n := (len(port) + 1 + 3) &^ 3
	n = max(n, 20)
	b := make([]byte, 4+n)
	b[0] = ProtocolISCSI
	if strings.Contains(port, ",i,0x") {
		b[0] |= 0x40
	}
	binary.BigEndian.PutUint16(b[2:4], uint16(n))
	copy(b[4:], port)
	return b
}

// SRPTransportID returns the SPC-4 TransportID of an SRP initiator port
// (7.6.4.5): 24 bytes carrying the 16-byte initiator port identifier.
func SRPTransportID(port [16]byte) []byte {
	b := make([]byte, 24)
	b[0] = ProtocolSRP
	copy(b[8:], port[:])
	return b
}

// Config returns the session's configuration, with its current view.
func (s *Session) Config() SessionConfig {
	cfg := s.cfg
	cfg.View = s.View()
	return cfg
}

// Close ends the I_T nexus (logout, connection loss): its SPC-2
// reservations are released, its commands still running are aborted (they
// complete with Aborted set), and its unit attentions are forgotten.
// Persistent reservation registrations survive, as SPC-4 requires. Close
// waits for the aborted commands to return from Execute.
func (s *Session) Close() {
	s.mu.Lock()
	was := s.closed.Swap(true)
	s.mu.Unlock()
	if was {
		return
	}
	t := s.t
	t.mu.Lock()
	delete(t.sessions, s.id)
	t.mu.Unlock()
	for _, e := range *t.luns.Load() {
		e.lu.nexusLoss(s)
		s.dropITL(e.lu)
	}
	for _, e := range *t.luns.Load() {
		e.lu.tasks.waitAborted(nil, func(c *Command) bool { return c.sess == s })
	}
}

// Execute runs one command to completion and fills its result fields. It
// blocks for the duration of the backend I/O; transports call it from
// their worker goroutines, many at a time. See Command for the buffer,
// residual and abort contract.
func (s *Session) Execute(c *Command) {
	c.Release()
	c.reset()
	c.sess = s
	switch {
	case s.closed.Load():
		c.Aborted = true
		c.abort.Store(abortSilent)
		c.Status = StatusTaskAborted
		return
	case len(c.CDB) == 0:
		c.failFormat(senseInfo{key: KeyIllegalRequest, asc: ASCInvalidCommandOpcode}, false)
	default:
		if e := s.lookup(c.LUN); e != nil {
			c.ro = e.ro
			e.lu.execute(s, c)
			if c.Status != StatusGood {
				e.lu.countError(c)
			}
		} else {
			s.noLU(c)
		}
	}
	c.finish()
}

// noLU answers a command addressed to a LUN that is not mapped (SPC-4
// 4.6.4, SAM-5 5.9.5): INQUIRY reports peripheral qualifier 011b, REPORT
// LUNS and REQUEST SENSE work, everything else fails with LOGICAL UNIT NOT
// SUPPORTED.
func (s *Session) noLU(c *Command) {
	b := cdb(c.CDB)
	switch {
	case b[0] == OpInquiry && len(b) >= 6:
		if b[1]&0x01 != 0 || b[2] != 0 {
			c.failFormat(senseInfo{key: KeyIllegalRequest, asc: ASCLUNotSupported}, false)
			return
		}
		var d [36]byte
		d[0] = 0x7f // qualifier 011b, device type 1Fh
		d[2] = 0x06
		d[3] = 0x02
		d[4] = 31
		c.respond(d[:], int(b.u16(3)))
	case b[0] == OpReportLUNs && len(b) >= 12:
		s.reportLUNs(c)
	case b[0] == OpRequestSense && len(b) >= 6:
		var d [SenseDescriptorMaxLen]byte
		n := encodeSense(d[:], senseInfo{key: KeyIllegalRequest, asc: ASCLUNotSupported}, b[1]&1 != 0)
		c.respond(d[:n], int(b[4]))
	default:
		c.failFormat(senseInfo{key: KeyIllegalRequest, asc: ASCLUNotSupported}, false)
	}
}

// reportLUNs answers REPORT LUNS (SPC-4 6.33) from any LUN: the LUNs the
// session sees.
func (s *Session) reportLUNs(c *Command) {
	b := cdb(c.CDB)
	switch b[2] {
	case 0x00, 0x02, 0x10, 0x11, 0x12:
	case 0x01:
	default:
		c.failFormat(senseInfo{key: KeyIllegalRequest, asc: ASCInvalidFieldInCDB}.fieldPointer(true, 2, -1), s.dsenseFor(c.LUN))
		return
	}
	m := s.luns()
	if b[2] == 0x01 { // well-known LUNs only: none
		m = nil
	}
	alloc := int(b.u32(6))
	total := 8 + 8*len(m)
	c.need = uint64(min(total, alloc))
	out := c.DataIn[:min(c.inLimit(), total, alloc)]
	var hdr [8]byte
	binary.BigEndian.PutUint32(hdr[0:4], uint32(8*len(m)))
	n := copy(out, hdr[:])
	for _, e := range m {
		if n >= len(out) {
			break
		}
		l := EncodeLUN(e.lun)
		n += copy(out[n:], l[:])
	}
	c.DataInLen = n
	c.xfer = uint64(n)
	s.lunsChanged.Store(false)
}

// dsenseFor returns the D_SENSE setting of the LU the session reaches as
// lun (false when none).
func (s *Session) dsenseFor(lun uint64) bool {
	if e := s.lookup(lun); e != nil {
		return e.lu.dsense()
	}
	return false
}

// DataOutLength returns how many data-out bytes a command with this CDB and
// expected data transfer length will consume: min(ExpectedLength, the
// command's own data-out length), or ExpectedLength when the CDB does not
// decode. RDMA transports may pull just that much; transports that receive
// unsolicited data must still accept all the initiator sends.
func (s *Session) DataOutLength(lun uint64, cdbBytes []byte, expected uint32) uint32 {
	e := s.lookup(lun)
	if e == nil {
		return expected
	}
	lu := e.lu
	d, _ := lu.cmds.lookup(cdbBytes)
	if d == nil || d.dataOut == nil {
		return expected
	}
	n := d.dataOut(lu, cdb(cdbBytes[:d.cdbLen]))
	return uint32(min(uint64(expected), n))
}

// newITL creates the I_T_L state of s on lu.
func (s *Session) newITL(lu *LU) *itl {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.itls.Load()
	if it := old[lu]; it != nil {
		return it
	}
	it := &itl{sess: s, lu: lu}
	it.ua.Store(uaPowerOn)
	if s.closed.Load() {
		// Close already dropped the session's state; keep none.
		return it
	}
	lu.mu.Lock()
	lu.itls[s] = it
	lu.mu.Unlock()
	next := make(map[*LU]*itl, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[lu] = it
	s.itls.Store(&next)
	return it
}

// dropITL forgets the I_T_L state of s on lu.
func (s *Session) dropITL(lu *LU) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lu.mu.Lock()
	delete(lu.itls, s)
	lu.mu.Unlock()
	old := *s.itls.Load()
	if old[lu] == nil {
		return
	}
	next := make(map[*LU]*itl, len(old))
	for k, v := range old {
		if k != lu {
			next[k] = v
		}
	}
	s.itls.Store(&next)
}

// String names the session for logs.
func (s *Session) String() string {
	return s.cfg.InitiatorPort + " via port " + strconv.Itoa(int(s.cfg.RelativeTargetPort))
}

// sessions returns the sessions that have I_T_L state on lu.
func (lu *LU) sessions() map[*Session]*itl {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	m := make(map[*Session]*itl, len(lu.itls))
	for k, v := range lu.itls {
		m[k] = v
	}
	return m
}

// targetPorts returns the relative target port identifiers in use, sorted.
func (t *Target) targetPorts() []uint16 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]uint16, 0, len(t.ports))
	for p := range t.ports {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}
