package target

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/internal/workers"
	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/scsi"
)

// Defaults of Config.
const (
	DefaultPort           = 3260
	DefaultQueueDepth     = 128
	DefaultMaxTransfer    = 1 << 20
	DefaultPortalGroupTag = 1
	// DefaultLoginTimeout bounds a connection's login phase (and the wait
	// for its first bytes).
	DefaultLoginTimeout = 15 * time.Second
	// DefaultNopInInterval is the idle time after which the target pings
	// a connection in full feature phase (LIO's nopin_timeout).
	DefaultNopInInterval = 15 * time.Second
	// DefaultNopInTimeout is the time a ping has to be answered (LIO's
	// nopin_response_timeout).
	DefaultNopInTimeout = 30 * time.Second
	// DefaultDataOutTimeout bounds the wait for the next Data-Out PDU of
	// a write (iSCSI/TCP). LIO's dataout_timeout is 3 s; rdisk waits
	// longer, for initiators on loaded machines.
	DefaultDataOutTimeout = 10 * time.Second
	// DefaultPDUTimeout bounds the receipt of one PDU once its first byte
	// arrived (iSCSI/TCP).
	DefaultPDUTimeout = 30 * time.Second
)

// Config describes a Target: the iSCSI targets it exports and how it serves
// them. Only Targets is required.
type Config struct {
	// Targets are the iSCSI targets (IQNs) exported through the portal.
	Targets []TargetConfig
	// Provider serves iSER: connections whose first bytes start an RDMA
	// connection request (for iWARP, an MPA request) are handed to it. Nil
	// serves iSCSI over TCP only (such connections are closed).
	Provider rdma.StreamProvider
	// Logger receives connection and session events; nil discards them.
	Logger *slog.Logger
	// ConnHook, if set, is called with +1 when a connection is accepted
	// and with -1 when it ends (rdisk target sizes GOMAXPROCS with it).
	ConnHook func(delta int)
	// QueueDepth is the command window of each session (commands in
	// flight); default DefaultQueueDepth, at most 1024.
	QueueDepth int
	// MaxTransfer is the largest data transfer of one command (bytes);
	// default DefaultMaxTransfer. It is reported as the MAXIMUM TRANSFER
	// LENGTH of the block limits VPD page unless the LU config sets one.
	MaxTransfer int
	// Workers is the number of goroutines per connection that run
	// commands (backstore I/O may block); default workers.Default.
	Workers int
	// PortalGroupTag is the TPGT reported in logins and SendTargets;
	// default 1.
	PortalGroupTag uint16
	// RelativeTargetPort is the relative target port identifier of the
	// portal group's target port (VPD page 83h, REPORT TARGET PORT
	// GROUPS, the I_T nexus of reservations); default PortalGroupTag, as
	// LIO numbers a TPG's port (lun_rtpi) after the TPG. Gateways that
	// export one disk give their portals distinct identifiers.
	RelativeTargetPort uint16
	// DiscoveryCHAP, if set, is the CHAP identity discovery sessions must
	// authenticate with; DiscoveryMutualCHAP the one the target answers a
	// mutual challenge with.
	DiscoveryCHAP       *iser.CHAPSecret
	DiscoveryMutualCHAP *iser.CHAPSecret
	// Settings, if set, replace iser.DefaultSettings for iSCSI/TCP
	// connections (what the target accepts in negotiation).
	Settings *iser.Settings
	// NoSendWithInvalidate keeps the target from using Send with
	// Invalidate on iSER even when the initiator allows it.
	NoSendWithInvalidate bool
	// NoInline runs every command on a worker, even on RAM and null disks,
	// which otherwise run on the connection's receive loop.
	NoInline bool
	// LoginTimeout bounds the login phase of a connection, a partial
	// Login Request included; default DefaultLoginTimeout.
	LoginTimeout time.Duration
	// NopInInterval is how long a connection in full feature phase may
	// receive nothing before the target pings it with a NOP-In
	// (TTT != 0xffffffff: the initiator must echo it in a NOP-Out, as LIO
	// pings); default DefaultNopInInterval, negative: no pings.
	NopInInterval time.Duration
	// NopInTimeout is how long a ping may go unanswered: then the
	// connection is dropped and its tasks cleaned up as on any
	// connection loss (session end reason "timeout"); default
	// DefaultNopInTimeout, negative: pings are never given up on.
	NopInTimeout time.Duration
	// PDUTimeout bounds the receipt of one PDU on iSCSI/TCP once its
	// first byte arrived: a header or data segment left incomplete for
	// longer drops the connection (reason "timeout"). Waiting between
	// PDUs is not bounded by it (NopInInterval covers idle
	// connections); iSER receives whole PDUs. Default DefaultPDUTimeout,
	// negative: unbounded.
	PDUTimeout time.Duration
	// DataOutTimeout bounds the wait of a write for its next Data-Out PDU
	// on iSCSI/TCP (unsolicited, or answering its R2T), as LIO's
	// dataout timer: at ErrorRecoveryLevel 0 the connection is dropped
	// (reason "timeout"). iSER pulls data-out by RDMA Read. Default
	// DefaultDataOutTimeout, negative: unbounded.
	DataOutTimeout time.Duration
}

// TargetConfig is one iSCSI target: its name, LUNs and access control.
type TargetConfig struct {
	// Name is the target's iSCSI name (iqn. or eui. form).
	Name string
	// Alias is the TargetAlias declared at login (optional).
	Alias string
	// LUNs are the logical units.
	LUNs []LUNConfig
	// AllowedInitiators are the initiator names allowed to log in. When
	// both AllowedInitiators and ACLs are empty, any initiator may log in;
	// otherwise the initiators named here or by an ACL entry may.
	AllowedInitiators []string
	// ACLs are per-initiator access control entries, as LIO's node ACLs
	// (/iscsi/IQN/tpg1/acls/INITIATOR): each admits its initiator and may
	// give it its own LUN map (mapped LUNs). An initiator with an entry
	// sees only its mapped LUNs (none if it has none, as with LIO); one
	// without an entry (admitted by AllowedInitiators, or by a target
	// without access control) sees every LUN under the target's LUN
	// numbers. At most one entry per initiator; mapped LUNs must name LUNs
	// of the target.
	ACLs []ACL
	// CHAP, if set, requires initiators to authenticate with CHAP as this
	// user and secret. MutualCHAP is the identity the target answers a
	// mutual challenge with.
	CHAP       *iser.CHAPSecret
	MutualCHAP *iser.CHAPSecret
	// PortGroups are the target's ALUA target port groups
	// (scsi.TargetConfig.PortGroups): this portal's port
	// (Config.RelativeTargetPort) and those of the other gateways that
	// export the same LUs. Empty: one active/optimized group, PortGroup.
	// SetPortGroupState changes a group's state while the target serves.
	PortGroups []scsi.PortGroupConfig
	// PortGroup is the group of the ports PortGroups does not list
	// (scsi.TargetConfig.PortGroup); 0 means 1.
	PortGroup uint16
}

// ACL is the access control entry of one initiator of a target.
type ACL struct {
	// Initiator is the initiator's iSCSI name; the entry admits it to log
	// in, as AllowedInitiators does.
	Initiator string
	// MappedLUNs are the LUNs the initiator sees (LIO's mapped_lunN ->
	// tpg LUN): REPORT LUNS lists their MappedLUN numbers, commands to
	// other LUN numbers fail with LOGICAL UNIT NOT SUPPORTED. Empty: it
	// sees none (AllowedInitiators admits an initiator to every LUN).
	MappedLUNs []MappedLUN
}

// MappedLUN is one LUN of an initiator's LUN map.
type MappedLUN struct {
	// MappedLUN is the LUN number the initiator sees (0-16383), unique in
	// the ACL entry; LUN is the target's LUN (TargetConfig.LUNs, MapLUN)
	// it reaches. Several mapped LUNs, of one or several initiators, may
	// reach one LUN: it stays one logical unit (reservations, unit
	// attentions and mode pages are its own, whatever number it is seen
	// under).
	MappedLUN, LUN uint64
	// ReadOnly write-protects the mapping (LIO's write_protect): writes
	// and MODE SELECT through it fail with DATA PROTECT / WRITE
	// PROTECTED, and MODE SENSE reports WP.
	ReadOnly bool
}

// LUNConfig is one logical unit of a target.
type LUNConfig struct {
	// LUN is the logical unit number (0-16383).
	LUN uint64
	// Disk backs the LU. The caller keeps ownership and closes it after
	// the Target is closed.
	Disk backstore.Disk
	// LU is the SCSI identity and limits (scsi.LUConfig); the zero value
	// is fine.
	LU scsi.LUConfig
	// Unit, if set, is an existing logical unit to export instead of a new
	// one on Disk (Disk and LU are then ignored): the one LU of a disk
	// that other SCSI transports (SRP) export too, so reservations, the
	// COMPARE AND WRITE range lock, mode pages and unit attentions are the
	// same through all of them, as LIO shares one se_device.
	Unit *scsi.LU
}

// node is one exported iSCSI target. Its name and SCSI target are fixed;
// its access settings and inline marks change at run time (Target's
// management methods) and are replaced whole, never modified.
type node struct {
	name  string
	alias string
	scsi  *scsi.Target
	// access is what logins are checked against.
	access atomic.Pointer[access]
	// inline marks LUNs whose disk never blocks (RAM, null): their
	// commands run on the connection's receive loop.
	inline atomic.Pointer[map[uint64]bool]
}

// access is the access control of a node.
type access struct {
	allowed []string // AllowedInitiators
	// acl holds the ACL entries by initiator name: the initiator's view,
	// nil when it sees every LUN. An entry whose mapped LUNs UnmapLUN
	// removed keeps an empty view (it sees no LUN, as in LIO).
	acl          map[string]*scsi.LUNView
	chap, mutual *iser.CHAPSecret
}

// admits reports whether initiator may log in: any initiator when neither
// AllowedInitiators nor ACLs are set, otherwise those they name.
func (a *access) admits(initiator string) bool {
	if len(a.allowed) == 0 && len(a.acl) == 0 {
		return true
	}
	if _, ok := a.acl[initiator]; ok {
		return true
	}
	return slices.Contains(a.allowed, initiator)
}

// viewFor returns the LUN view of a session of initiator: its ACL entry's,
// nil (every LUN) for an admitted initiator without mapped LUNs, and an
// empty view for an initiator no longer admitted (a running session whose
// ACL entry SetACLs removed sees no LUN; new logins are refused).
func (a *access) viewFor(initiator string) *scsi.LUNView {
	if v, ok := a.acl[initiator]; ok {
		return v
	}
	if a.admits(initiator) {
		return nil
	}
	return &scsi.LUNView{}
}

func (n *node) allowed(initiator string) bool { return n.access.Load().admits(initiator) }

// runsInline reports whether commands on lun run on the receive loop.
func (n *node) runsInline(lun uint64) bool { return (*n.inline.Load())[lun] }

// nodeSet is the exported targets: a snapshot, replaced whole under
// Target.nodesMu and read without locks.
type nodeSet struct {
	byName map[string]*node
	order  []string // configuration order, then AddTarget order
}

// Target is an iSCSI target portal that serves iSCSI over TCP and iSER on
// the same listener. Create it with New, then Serve listeners. Its methods
// are safe for concurrent use.
type Target struct {
	cfg      Config
	log      *slog.Logger
	nodes    atomic.Pointer[nodeSet]
	tcpLogin iser.TargetConfig
	rdmLogin iser.TargetConfig

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// Lock order: openMu, nodesMu, mu (each may be taken alone).
	openMu   sync.Mutex // serializes the nexus creation of logins (session.go) and RemoveTarget
	nodesMu  sync.Mutex // serializes changes of the nodes and their LUN maps (manage.go)
	mu       sync.Mutex
	nextTSIH uint16
	sessions map[uint16]*session
	conns    map[io.Closer]bool
	lns      map[io.Closer]bool // portal listeners: net.Listener, and rdma.Listener (ServeRDMA)
	closed   bool

	// draining is set by Drain: logins are refused (service unavailable)
	// and no listener is served.
	draining atomic.Bool
	stats    counters
}

// New checks cfg, creates the SCSI targets and logical units, and returns a
// Target that serves nothing yet.
func New(cfg Config) (*Target, error) {
	if cfg.QueueDepth == 0 {
		cfg.QueueDepth = DefaultQueueDepth
	}
	if cfg.QueueDepth < 1 || cfg.QueueDepth > 1024 {
		return nil, fmt.Errorf("iscsi target: queue depth %d outside 1..1024", cfg.QueueDepth)
	}
	if cfg.MaxTransfer == 0 {
		cfg.MaxTransfer = DefaultMaxTransfer
	}
	if cfg.MaxTransfer < 4096 || cfg.MaxTransfer > 16<<20 {
		return nil, fmt.Errorf("iscsi target: max transfer %d outside 4 KiB..16 MiB", cfg.MaxTransfer)
	}
	if cfg.Workers == 0 {
		cfg.Workers = workers.Default
	}
	if cfg.Workers < 1 || cfg.Workers > 256 {
		return nil, fmt.Errorf("iscsi target: %d workers outside 1..256", cfg.Workers)
	}
	if cfg.PortalGroupTag == 0 {
		cfg.PortalGroupTag = DefaultPortalGroupTag
	}
	if cfg.RelativeTargetPort == 0 {
		cfg.RelativeTargetPort = cfg.PortalGroupTag
	}
	if cfg.LoginTimeout == 0 {
		cfg.LoginTimeout = DefaultLoginTimeout
	}
	if cfg.LoginTimeout < 0 {
		return nil, fmt.Errorf("iscsi target: login timeout %v: want a positive duration", cfg.LoginTimeout)
	}
	if cfg.NopInInterval == 0 {
		cfg.NopInInterval = DefaultNopInInterval
	}
	if cfg.NopInTimeout == 0 {
		cfg.NopInTimeout = DefaultNopInTimeout
	}
	if cfg.PDUTimeout == 0 {
		cfg.PDUTimeout = DefaultPDUTimeout
	}
	if cfg.DataOutTimeout == 0 {
		cfg.DataOutTimeout = DefaultDataOutTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Target{cfg: cfg, log: log, sessions: map[uint16]*session{},
		conns: map[io.Closer]bool{}, lns: map[io.Closer]bool{}, nextTSIH: 1}
	ns := &nodeSet{byName: map[string]*node{}}
	for _, tc := range cfg.Targets {
		if _, dup := ns.byName[tc.Name]; dup {
			return nil, fmt.Errorf("iscsi target: target %s configured twice", tc.Name)
		}
		n, err := t.newNode(tc)
		if err != nil {
			return nil, err
		}
		ns.byName[tc.Name] = n
		ns.order = append(ns.order, tc.Name)
	}
	t.nodes.Store(ns)
	set := iser.DefaultSettings()
	if cfg.Settings != nil {
		set = *cfg.Settings
	}
	t.tcpLogin = iser.TargetConfig{Transport: iser.TransportTCP, Settings: set, Resolve: t.resolve, QueueDepth: uint32(cfg.QueueDepth)}
	if err := t.tcpLogin.Validate(); err != nil {
		return nil, fmt.Errorf("iscsi target: %w", err)
	}
	rs := iser.DefaultSettings()
	// iSER: data moves by RDMA; unsolicited data is the immediate data
	// only, which must fit the receive buffers.
	rs.InitialR2T = true
	rs.TargetRecvDataSegmentLength = iserRecvData
	rs.MaxBurstLength = uint32(min(cfg.MaxTransfer, iser.MaxDataSegmentLength))
	rs.FirstBurstLength = min(rs.FirstBurstLength, rs.MaxBurstLength)
	t.rdmLogin = iser.TargetConfig{Transport: iser.TransportISER, Settings: rs, Resolve: t.resolve, QueueDepth: uint32(cfg.QueueDepth)}
	if err := t.rdmLogin.Validate(); err != nil {
		return nil, fmt.Errorf("iscsi target: %w", err)
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	return t, nil
}

// newNode checks a target's configuration and creates its SCSI target and
// logical units.
func (t *Target) newNode(tc TargetConfig) (*node, error) {
	if err := checkName(tc.Name); err != nil {
		return nil, err
	}
	acc, err := checkAccess(tc.Name, tc.AllowedInitiators, tc.CHAP, tc.MutualCHAP)
	if err != nil {
		return nil, err
	}
	if err := scsi.ValidatePortGroups(tc.PortGroups); err != nil {
		return nil, fmt.Errorf("iscsi target %s: %w", tc.Name, err)
	}
	n := &node{name: tc.Name, alias: tc.Alias, scsi: scsi.NewTarget(scsi.TargetConfig{Name: tc.Name, PortGroups: tc.PortGroups, PortGroup: tc.PortGroup, Logger: t.log})}
	inline := map[uint64]bool{}
	for _, l := range tc.LUNs {
		if l.Unit != nil {
			if err := n.scsi.Map(l.LUN, l.Unit); err != nil {
				n.unmapAll()
				return nil, fmt.Errorf("iscsi target %s LUN %d: %w", tc.Name, l.LUN, err)
			}
			if t.inlineFor(l.Unit) {
				inline[l.LUN] = true
			}
			continue
		}
		lc := l.LU
		if lc.MaxTransferBlocks == 0 && l.Disk != nil {
			lc.MaxTransferBlocks = uint32(t.cfg.MaxTransfer / l.Disk.BlockSize())
		}
		if lc.MaxWriteSameBlocks == 0 {
			// As LIO: libiscsi and Linux then split long WRITE
			// SAMEs, and nothing writes 32 MiB in one command.
			lc.MaxWriteSameBlocks = 0xffff
		}
		if lc.Name == "" {
			lc.Name = fmt.Sprintf("%s/%d", tc.Name, l.LUN)
		}
		lu, err := scsi.NewLU(l.Disk, lc)
		if err != nil {
			n.unmapAll()
			return nil, fmt.Errorf("iscsi target %s LUN %d: %w", tc.Name, l.LUN, err)
		}
		if err := n.scsi.Map(l.LUN, lu); err != nil {
			n.unmapAll()
			return nil, fmt.Errorf("iscsi target %s LUN %d: %w", tc.Name, l.LUN, err)
		}
		if t.inlineFor(lu) {
			inline[l.LUN] = true
		}
	}
	if acc.acl, err = checkACLs(tc.Name, tc.ACLs, n.scsi.LUNs()); err != nil {
		n.unmapAll()
		return nil, err
	}
	n.access.Store(acc)
	n.inline.Store(&inline)
	return n, nil
}

// inlineFor reports whether commands on lu run on the receive loop: its
// disk never blocks and Config.NoInline is not set.
func (t *Target) inlineFor(lu *scsi.LU) bool {
	return !t.cfg.NoInline && backstore.TraitsOf(lu.Disk()).Waits == backstore.WaitsNever
}

// unmapAll unmaps every LUN of a node that is being given up, so that its
// logical units can be mapped elsewhere.
func (n *node) unmapAll() {
	for _, lun := range n.scsi.LUNs() {
		n.scsi.Unmap(lun)
	}
}

// checkAccess checks a target's ACL and CHAP identities.
func checkAccess(name string, allowed []string, chap, mutual *iser.CHAPSecret) (*access, error) {
	for _, a := range allowed {
		if a == "" || strings.ContainsAny(a, " \t\r\n") {
			return nil, fmt.Errorf("iscsi target %s: allowed initiator %q: want a name without spaces", name, a)
		}
	}
	if mutual != nil && chap == nil {
		return nil, fmt.Errorf("iscsi target %s: mutual CHAP needs CHAP", name)
	}
	for _, c := range []*iser.CHAPSecret{chap, mutual} {
		if c != nil && (c.User == "" || c.Secret == "") {
			return nil, fmt.Errorf("iscsi target %s: a CHAP identity needs a user and a secret", name)
		}
	}
	a := &access{allowed: slices.Clone(allowed)}
	if chap != nil {
		c := *chap
		a.chap = &c
	}
	if mutual != nil {
		c := *mutual
		a.mutual = &c
	}
	return a, nil
}

// checkACLs checks a target's ACL entries against its LUNs and returns the
// view of each initiator (nil: every LUN).
func checkACLs(name string, acls []ACL, luns []uint64) (map[string]*scsi.LUNView, error) {
	m := make(map[string]*scsi.LUNView, len(acls))
	at := make(map[string]int, len(acls))
	for i, a := range acls {
		if a.Initiator == "" || strings.ContainsAny(a.Initiator, " \t\r\n") {
			return nil, fmt.Errorf("iscsi target %s: ACLs[%d]: initiator %q: want a name without spaces", name, i, a.Initiator)
		}
		if j, dup := at[a.Initiator]; dup {
			return nil, fmt.Errorf("iscsi target %s: ACLs[%d]: initiator %s has an entry already (ACLs[%d])", name, i, a.Initiator, j)
		}
		at[a.Initiator] = i
		maps := make([]scsi.LUNMapping, len(a.MappedLUNs))
		seen := make(map[uint64]int, len(a.MappedLUNs))
		for k, ml := range a.MappedLUNs {
			field := fmt.Sprintf("iscsi target %s: ACLs[%d] (%s): MappedLUNs[%d]", name, i, a.Initiator, k)
			if ml.MappedLUN > scsi.MaxLUN {
				return nil, fmt.Errorf("%s: MappedLUN %d outside 0..%d", field, ml.MappedLUN, scsi.MaxLUN)
			}
			if j, dup := seen[ml.MappedLUN]; dup {
				return nil, fmt.Errorf("%s: MappedLUN %d is mapped already (MappedLUNs[%d])", field, ml.MappedLUN, j)
			}
			seen[ml.MappedLUN] = k
			if !slices.Contains(luns, ml.LUN) {
				return nil, fmt.Errorf("%s: LUN %d: the target has no LUN %d", field, ml.LUN, ml.LUN)
			}
			maps[k] = scsi.LUNMapping{MappedLUN: ml.MappedLUN, LUN: ml.LUN, ReadOnly: ml.ReadOnly}
		}
		v, err := scsi.NewLUNView(maps)
		if err != nil {
			return nil, fmt.Errorf("iscsi target %s: ACLs[%d] (%s): %w", name, i, a.Initiator, err)
		}
		m[a.Initiator] = v
	}
	return m, nil
}

// node returns the exported target named name, or nil.
func (t *Target) node(name string) *node { return t.nodes.Load().byName[name] }

// checkName accepts iqn., eui. and naa. names of printable ASCII.
func checkName(name string) error {
	if name == "" || len(name) > 223 {
		return fmt.Errorf("iscsi target: target name %q: want 1 to 223 bytes", name)
	}
	for _, r := range name {
		if r <= ' ' || r > '~' || r == '/' {
			return fmt.Errorf("iscsi target: target name %q: no spaces, '/' or non-ASCII characters", name)
		}
	}
	if !strings.HasPrefix(name, "iqn.") && !strings.HasPrefix(name, "eui.") && !strings.HasPrefix(name, "naa.") {
		return fmt.Errorf("iscsi target: target name %q: want an iqn., eui. or naa. name", name)
	}
	return nil
}

// SCSITarget returns the SCSI target device of an iSCSI target, for
// management (mapping LUNs at run time), or nil.
func (t *Target) SCSITarget(name string) *scsi.Target {
	if n := t.node(name); n != nil {
		return n.scsi
	}
	return nil
}

// TargetNames returns the names of the exported targets in configuration
// order (then in the order AddTarget added them).
func (t *Target) TargetNames() []string { return slices.Clone(t.nodes.Load().order) }

// resolve is the login engines' Resolve: target lookup and ACLs.
func (t *Target) resolve(id iser.LoginIdentity) (iser.TargetInfo, error) {
	if t.draining.Load() || t.ctx.Err() != nil {
		// Drain or Close: service unavailable (03/01), for every login.
		return iser.TargetInfo{}, refused(iser.LoginServiceUnavailable, "the target is shutting down")
	}
	if id.SessionType == iser.SessionDiscovery {
		return iser.TargetInfo{CHAP: t.cfg.DiscoveryCHAP, MutualCHAP: t.cfg.DiscoveryMutualCHAP}, nil
	}
	n := t.node(id.TargetName)
	if n == nil {
		return iser.TargetInfo{}, refused(iser.LoginNotFound, "no such target")
	}
	a := n.access.Load()
	if !a.admits(id.InitiatorName) {
		return iser.TargetInfo{}, refused(iser.LoginForbidden, "the initiator is not in the ACL")
	}
	return iser.TargetInfo{Name: n.name, Alias: n.alias, PortalGroupTag: t.cfg.PortalGroupTag,
		CHAP: a.chap, MutualCHAP: a.mutual}, nil
}

// refusal is a login Resolve refuses: the status (errors.As finds it) and
// why, without the status's own text (the login engine adds it).
type refusal struct {
	status iser.LoginStatus
	why    string
}

func refused(st iser.LoginStatus, why string) error { return &refusal{st, why} }

func (r *refusal) Error() string { return r.why }
func (r *refusal) Unwrap() error { return r.status }

// sendTargets answers a SendTargets query for an initiator that reached
// the portal at local.
func (t *Target) sendTargets(initiator string, local net.Addr, query string) []iser.TargetRecord {
	var addr string
	if ta, ok := local.(*net.TCPAddr); ok {
		if ap, ok := netip.AddrFromSlice(ta.IP); ok {
			addr = iser.FormatTargetAddress(netip.AddrPortFrom(ap.Unmap(), uint16(ta.Port)), t.cfg.PortalGroupTag)
		}
	}
	var recs []iser.TargetRecord
	ns := t.nodes.Load()
	for _, name := range ns.order {
		n := ns.byName[name]
		if !n.allowed(initiator) || (query != "All" && query != name) {
			continue
		}
		r := iser.TargetRecord{Name: name}
		if addr != "" {
			r.Addresses = []string{addr}
		}
		recs = append(recs, r)
	}
	return recs
}

// ListenAndServe listens on addr ("host:port"; port 3260 when omitted) and
// serves it until ctx is done or the Target is closed.
func (t *Target) ListenAndServe(ctx context.Context, addr string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, fmt.Sprint(DefaultPort))
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("iscsi target: %w", err)
	}
	return t.Serve(ctx, ln)
}

// Serve accepts connections on ln until ctx is done, ln fails or the
// Target is closed, and serves each: iSCSI over TCP, or iSER when its first
// bytes are an MPA request and Config.Provider is set. Serve closes ln when
// it returns; it returns nil after ctx ended, Drain or Close (and at once
// when called after them).
func (t *Target) Serve(ctx context.Context, ln net.Listener) error {
	done, ok := t.listening(ctx, ln)
	if !ok {
		return nil
	}
	defer done()
	t.log.Info("iscsi: portal listening", "addr", ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || t.ctx.Err() != nil || t.draining.Load() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return fmt.Errorf("iscsi target: accept: %w", err)
		}
		if !t.track(c) {
			c.Close()
			return nil
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			defer t.untrack(c)
			if h := t.cfg.ConnHook; h != nil {
				h(1)
				defer h(-1)
			}
			t.serveConn(c)
		}()
	}
}

// listening registers a portal listener (Drain and Close close it, and so
// does ctx's end) and returns what unregisters and closes it when its
// serve loop returns; ok is false, with ln closed, once the Target is
// closed or draining.
func (t *Target) listening(ctx context.Context, ln io.Closer) (done func(), ok bool) {
	t.mu.Lock()
	if t.closed || t.draining.Load() {
		t.mu.Unlock()
		ln.Close()
		return nil, false
	}
	t.lns[ln] = true
	t.wg.Add(1)
	t.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	return func() {
		stop()
		t.mu.Lock()
		delete(t.lns, ln)
		t.mu.Unlock()
		ln.Close()
		t.wg.Done()
	}, true
}

// ServeRDMA serves iSER connection requests from ln, an RDMA/CM listener
// of p, a provider whose connections are not TCP streams (rdma-core verbs),
// beside Serve's iSCSI/TCP listener of the same port number: a device's
// RDMA/CM port space is its own. It returns as Serve does.
func (t *Target) ServeRDMA(ctx context.Context, p rdma.Provider, ln rdma.Listener) error {
	done, ok := t.listening(ctx, ln)
	if !ok {
		return nil
	}
	defer done()
	t.log.Info("iscsi: iSER portal listening", "addr", ln.Addr())
	for {
		req, err := ln.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil || t.ctx.Err() != nil || t.draining.Load() || errors.Is(err, rdma.ErrClosed) || errors.Is(err, context.Canceled) {
				return nil
			}
			return fmt.Errorf("iscsi target: iSER accept: %w", err)
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			if h := t.cfg.ConnHook; h != nil {
				h(1)
				defer h(-1)
			}
			t.serveISER(p, req)
		}()
	}
}

func (t *Target) track(c io.Closer) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.conns[c] = true
	return true
}

func (t *Target) untrack(c io.Closer) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
}

// serveConn tells iSER from iSCSI/TCP by the first bytes, which the RDMA
// provider recognizes (for iWARP, an MPA request frame).
func (t *Target) serveConn(c net.Conn) {
	defer c.Close()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	br := bufio.NewReaderSize(c, 64<<10)
	c.SetReadDeadline(time.Now().Add(t.cfg.LoginTimeout))
	if p := t.cfg.Provider; p != nil {
		first, err := br.Peek(p.ConnRequestPrefix())
		if err != nil {
			t.log.Debug("iscsi: connection closed before its first PDU", "peer", c.RemoteAddr().String(), "err", err)
			return
		}
		if p.IsConnRequest(first) {
			rest, _ := br.Peek(br.Buffered())
			rest = slices.Clone(rest)
			c.SetReadDeadline(time.Time{})
			req, err := p.ServeConn(t.ctx, c, rest)
			if err != nil {
				t.log.Info("iscsi: RDMA connection request failed", "peer", c.RemoteAddr().String(), "transport", "iser", "err", err)
				return
			}
			t.serveISER(p, req)
			return
		}
	}
	t.serveTCP(c, br)
}

// newTSIH allocates a TSIH for a login (not yet a session).
func (t *Target) newTSIH() uint16 {
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		v := t.nextTSIH
		t.nextTSIH++
		if t.nextTSIH == 0 {
			t.nextTSIH = 1
		}
		if _, used := t.sessions[v]; !used && v != 0 {
			t.sessions[v] = nil // reserved until the login ends
			return v
		}
	}
}

func (t *Target) releaseTSIH(v uint16) {
	t.mu.Lock()
	if t.sessions[v] == nil {
		delete(t.sessions, v)
	}
	t.mu.Unlock()
}

// Close stops every listener, drops every connection (after an
// Asynchronous Message announcing it has been sent, or a second) and
// waits for them to end. The disks stay open: they belong to the caller.
func (t *Target) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	lns := make([]io.Closer, 0, len(t.lns))
	for ln := range t.lns {
		lns = append(lns, ln)
	}
	sess := make([]*session, 0, len(t.sessions))
	for _, s := range t.sessions {
		if s != nil {
			sess = append(sess, s)
		}
	}
	conns := make([]io.Closer, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
	for _, s := range sess {
		s.announceDrop()
	}
	// Each announcement ends its connection once sent; a peer that does
	// not take it within the bound is cut below.
	deadline := time.After(time.Second)
wait:
	for _, s := range sess {
		select {
		case <-s.conn.done:
		case <-deadline:
			break wait
		}
	}
	t.cancel()
	for _, c := range conns {
		c.Close()
	}
	t.wg.Wait()
	return nil
}
