package target

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/auth"
	"github.com/rdisk/rdisk/rdma"
)

// SubsystemConfig describes an NVM subsystem, as nvmetcli's "subsystems"
// entries do.
type SubsystemConfig struct {
	NQN    string
	Serial string // 20 printable ASCII characters at most; derived from the NQN when empty
	Model  string // 40 at most; "rdisk" when empty
	// AllowAnyHost admits every host NQN; otherwise only AllowedHosts.
	AllowAnyHost bool
	AllowedHosts []string
	// CntlIDMin and CntlIDMax bound the controller IDs (default 1..0xffef).
	CntlIDMin, CntlIDMax uint16
}

// NamespaceConfig describes one namespace.
type NamespaceConfig struct {
	NSID  uint32
	Disk  backstore.Disk
	NGUID [16]byte // zero: derived from the subsystem and NSID
	UUID  [16]byte // zero: derived from the subsystem and NSID
	EUI64 [8]byte  // zero: not reported
	// Disabled namespaces are configured but not visible to hosts.
	Disabled bool
	// ANAGroupID is the namespace's ANA group, 1 to 128; 0 means group 1,
	// nvmet's default. Each port gives the group its state
	// (PortConfig.ANAGroups).
	ANAGroupID uint32
}

// HostAuth is a host's in-band authentication (DH-HMAC-CHAP) settings,
// nvmet's hosts/<hostnqn>/dhchap_* attributes: a host with HostAuth must
// authenticate every queue after Connect (the Connect result asks for it
// with ATR) before any other command than Fabrics ones is accepted.
type HostAuth struct {
	// Key is the host's secret (dhchap_key).
	Key auth.Secret
	// CtrlKey is the controller's secret for bidirectional authentication
	// (dhchap_ctrl_key); nil: a host asking for it is refused.
	CtrlKey *auth.Secret
	// Hashes and DHGroups are allowed in order of preference (dhchap_hash,
	// dhchap_dhgroup); nil: SHA-256 first, the null group first, as
	// nvmet's defaults.
	Hashes   []auth.HashID
	DHGroups []auth.DHGroupID
}

// Transport is what a port serves, as nvmetcli's "trtype" names it.
type Transport string

const (
	// TransportRDMA: NVMe/RDMA through the target's RDMA provider (the
	// meaning of an empty Transport).
	TransportRDMA Transport = "rdma"
	// TransportTCP: NVMe/TCP on a plain TCP listener.
	TransportTCP Transport = "tcp"
	// TransportBoth: NVMe/TCP and NVMe/RDMA on one port number. It needs a
	// provider whose connections are TCP streams (rdma.StreamProvider, the
	// software iWARP provider): an MPA request and an ICReq are told apart
	// by their first bytes.
	TransportBoth Transport = "rdma+tcp"
)

// PortConfig describes a port: an address a transport binding listens on.
type PortConfig struct {
	ID uint16
	// Transport is TransportRDMA (default), TransportTCP or TransportBoth.
	Transport Transport
	// Addr is host:port; the port defaults to 4420.
	Addr string
	// InlineDataSize is the in-capsule data the port accepts on I/O queues
	// (default 4096, at most 16384), advertised through IOCCSZ.
	InlineDataSize int
	// TCPInlineDataSize is the in-capsule data an NVMe/TCP I/O queue of
	// the port accepts (default and most: MDTS, 128 KiB), advertised
	// through IOCCSZ to hosts on TCP. A write that fits is sent in its
	// command capsule, saving the R2T round trip; the data lands in the
	// command's buffer either way.
	TCPInlineDataSize int
	// MaxQueueSize bounds I/O queue depth (default 128, at most 1024).
	MaxQueueSize int
	// MaxIOQueues bounds I/O queues per controller (default 128).
	MaxIOQueues int
	// Referrals are other discovery services listed in this port's log.
	Referrals []Referral
	// ANAGroups are the ANA groups of the port and their states there
	// (nvmet's ports/N/ana_groups/G/ana_state). Group 1 is optimized
	// unless set here; a group the port has not got is inaccessible
	// through it. Group IDs are 1 to 128 (ANAGRPMAX). Port.SetANAState
	// changes them live.
	ANAGroups map[uint32]nvmeof.ANAState
	// Provider, if set, serves the port's RDMA in place of the target's
	// (Config.Provider): a port on an RDMA NIC's address beside one on the
	// software iWARP provider. The target does not close it.
	Provider rdma.Provider
}

// Referral points hosts to another discovery service.
type Referral struct {
	PortID uint16
	Addr   string // host:port
}

// Namespace is a live namespace.
type Namespace struct {
	cfg   NamespaceConfig
	nsze  uint64 // in blocks
	lbads uint8
	st    *nsStats
}

// nsStats are a namespace's counters (Subsystem.NamespaceStats), shared by
// the copies NamespaceResized makes and kept when AddNamespace replaces
// the namespace. Every I/O command on the namespace adds one to an
// in-flight count when it begins and subtracts it when its completion is
// sent, from the goroutines of every queue of every controller: the count
// is split in stripes, each on a cache line of its own, a queue using
// always the same one (sq.stripe), so that queues running on different
// cores do not contend for one line (one shared counter made 4 KiB reads
// and writes on two queues of one namespace 10-20% slower in
// BenchmarkCoreParallel, two cores; striped, they cost what they did
// without a count).
// errors count error completions by status code type, touched only by
// them.
type nsStats struct {
	_        [64]byte
	inflight [nsStripes]nsStripe
	errors   [8]atomic.Uint64 // by nvmeof.StatusCodeType
}

// nsStripes is the number of stripes of a namespace's in-flight count.
const nsStripes = 8

// nsStripe is one stripe of a namespace's in-flight count.
type nsStripe struct {
	n atomic.Int64
	_ [64 - 8]byte
}

// inFlight sums the stripes.
func (s *nsStats) inFlight() int64 {
	var n int64
	for i := range s.inflight {
		n += s.inflight[i].n.Load()
	}
	return n
}

// Subsystem is a live NVM subsystem. Its methods are safe for concurrent use.
type Subsystem struct {
	t   *Target
	cfg SubsystemConfig

	mu      sync.RWMutex
	ns      map[uint32]*Namespace
	ctrls   map[uint16]*controller
	hosts   map[string]bool
	nextCID uint16
	removed bool // by Target.RemoveSubsystem
}

// NQN returns the subsystem NQN.
func (s *Subsystem) NQN() string { return s.cfg.NQN }

func newSubsystem(t *Target, cfg SubsystemConfig) (*Subsystem, error) {
	if cfg.NQN == "" || len(cfg.NQN) > 223 {
		return nil, fmt.Errorf("subsystem NQN %q: must be 1 to 223 bytes", cfg.NQN)
	}
	if cfg.NQN == nvmeof.DiscoveryNQN {
		return nil, fmt.Errorf("subsystem NQN %q is reserved for discovery", cfg.NQN)
	}
	if cfg.Serial == "" {
		// From the NQN: a restarted target presents the same controller
		// serial (udev's nvme-<model>_<serial> names, Linux's checks of a
		// reconnected subsystem).
		h := sha256.Sum256([]byte("rdisk-serial/" + cfg.NQN))
		cfg.Serial = fmt.Sprintf("%x", h[:8])
	}
	if cfg.Model == "" {
		cfg.Model = "rdisk"
	}
	if len(cfg.Serial) > 20 || len(cfg.Model) > 40 {
		return nil, fmt.Errorf("subsystem %s: serial (max 20) or model (max 40) too long", cfg.NQN)
	}
	if cfg.CntlIDMin == 0 {
		cfg.CntlIDMin = 1
	}
	if cfg.CntlIDMax == 0 {
		cfg.CntlIDMax = 0xffef
	}
	if cfg.CntlIDMin > cfg.CntlIDMax || cfg.CntlIDMax > 0xffef {
		return nil, fmt.Errorf("subsystem %s: controller ID range %d..%d invalid", cfg.NQN, cfg.CntlIDMin, cfg.CntlIDMax)
	}
	s := &Subsystem{t: t, cfg: cfg, ns: map[uint32]*Namespace{}, ctrls: map[uint16]*controller{}, hosts: map[string]bool{}, nextCID: cfg.CntlIDMin}
	for _, h := range cfg.AllowedHosts {
		s.hosts[h] = true
	}
	return s, nil
}

func (s *Subsystem) isRemoved() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.removed
}

// hostAllowed tells whether hostNQN may connect.
func (s *Subsystem) hostAllowed(hostNQN string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cfg.AllowAnyHost || s.hosts[hostNQN]
}

// AllowHost adds a host NQN to the allowed list.
func (s *Subsystem) AllowHost(hostNQN string) {
	s.mu.Lock()
	s.hosts[hostNQN] = true
	s.mu.Unlock()
	s.t.discoveryChanged()
}

// AddNamespace adds (or, with the same NSID, replaces) a namespace and
// notifies connected controllers with a Namespace Attribute Changed event.
func (s *Subsystem) AddNamespace(cfg NamespaceConfig) error {
	if cfg.NSID == 0 || cfg.NSID == nvmeof.NSIDAll || cfg.NSID > maxNSID {
		return fmt.Errorf("namespace ID %d: must be 1 to %d", cfg.NSID, maxNSID)
	}
	if cfg.Disk == nil {
		return fmt.Errorf("namespace %d: no disk", cfg.NSID)
	}
	bs := cfg.Disk.BlockSize()
	if bs < 512 || bs&(bs-1) != 0 {
		return fmt.Errorf("namespace %d: block size %d is not a power of two of at least 512", cfg.NSID, bs)
	}
	if cfg.ANAGroupID == 0 {
		cfg.ANAGroupID = defaultANAGroup
	}
	if err := checkANAGroup(cfg.ANAGroupID); err != nil {
		return fmt.Errorf("namespace %d: %w", cfg.NSID, err)
	}
	if cfg.NGUID == ([16]byte{}) {
		cfg.NGUID = deriveNGUID(s.cfg.NQN, cfg.NSID)
	}
	if cfg.UUID == ([16]byte{}) {
		cfg.UUID = deriveUUID(s.cfg.NQN, cfg.NSID)
	}
	lbads := uint8(0)
	for 1<<lbads < bs {
		lbads++
	}
	n := &Namespace{cfg: cfg, nsze: uint64(cfg.Disk.Size()) / uint64(bs), lbads: lbads}
	s.mu.Lock()
	if old := s.ns[cfg.NSID]; old != nil {
		n.st = old.st // the counters go on (its commands in flight among them)
	} else {
		n.st = &nsStats{}
	}
	s.ns[cfg.NSID] = n
	s.t.anaChanged() // a group gained a member
	ctrls := s.controllersLocked()
	s.mu.Unlock()
	for _, c := range ctrls {
		c.namespaceChanged(cfg.NSID)
	}
	return nil
}

// NamespaceResized re-reads the size of a namespace's disk (after the file
// or device behind it grew or shrank) and notifies connected controllers
// with a Namespace Attribute Changed event, as nvmet does on a resize.
func (s *Subsystem) NamespaceResized(nsid uint32) error {
	s.mu.Lock()
	n, ok := s.ns[nsid]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("namespace %d not found in %s", nsid, s.cfg.NQN)
	}
	// Namespaces are read without the lock on the I/O path: replace, do
	// not modify.
	resized := *n
	resized.nsze = uint64(n.cfg.Disk.Size()) >> n.lbads
	s.ns[nsid] = &resized
	ctrls := s.controllersLocked()
	s.mu.Unlock()
	for _, c := range ctrls {
		c.namespaceChanged(nsid)
	}
	return nil
}

// RemoveNamespace removes a namespace; connected controllers are notified.
func (s *Subsystem) RemoveNamespace(nsid uint32) error {
	s.mu.Lock()
	if _, ok := s.ns[nsid]; !ok {
		s.mu.Unlock()
		return fmt.Errorf("namespace %d not found in %s", nsid, s.cfg.NQN)
	}
	delete(s.ns, nsid)
	ctrls := s.controllersLocked()
	s.mu.Unlock()
	for _, c := range ctrls {
		c.namespaceChanged(nsid)
	}
	return nil
}

func (s *Subsystem) controllersLocked() []*controller {
	out := make([]*controller, 0, len(s.ctrls))
	for _, c := range s.ctrls {
		out = append(out, c)
	}
	return out
}

// namespace returns an enabled namespace or nil.
func (s *Subsystem) namespace(nsid uint32) *Namespace {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := s.ns[nsid]
	if n == nil || n.cfg.Disabled {
		return nil
	}
	return n
}

// activeNSIDs returns the enabled NSIDs greater than after, ascending.
func (s *Subsystem) activeNSIDs(after uint32) []uint32 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var ids []uint32
	for id, n := range s.ns {
		if id > after && !n.cfg.Disabled {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// allocController assigns a controller ID.
func (s *Subsystem) allocController(c *controller) (uint16, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	span := int(s.cfg.CntlIDMax-s.cfg.CntlIDMin) + 1
	for i := 0; i < span; i++ {
		id := s.nextCID
		s.nextCID++
		if s.nextCID > s.cfg.CntlIDMax || s.nextCID < s.cfg.CntlIDMin {
			s.nextCID = s.cfg.CntlIDMin
		}
		if _, used := s.ctrls[id]; !used {
			c.cntlid = id // before others can see c
			s.ctrls[id] = c
			return id, nil
		}
	}
	return 0, errNoControllerID
}

func (s *Subsystem) freeController(id uint16, c *controller) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctrls[id] == c {
		delete(s.ctrls, id)
	}
}

func (s *Subsystem) controller(id uint16) *controller {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ctrls[id]
}

// deriveNGUID makes a stable NGUID from the subsystem NQN and NSID: hosts
// key multipath and udev names on it, so it must survive restarts.
func deriveNGUID(nqn string, nsid uint32) [16]byte {
	h := sha256.Sum256(fmt.Appendf(nil, "%s/%d", nqn, nsid))
	return [16]byte(h[:16])
}

// deriveUUID makes a stable namespace UUID from the subsystem NQN and NSID:
// a name-based UUID version 8 over SHA-256 (RFC 9562 section 5.8), so a
// restarted target presents the same namespace and two namespaces never
// share one.
func deriveUUID(nqn string, nsid uint32) [16]byte {
	h := sha256.Sum256(fmt.Appendf(nil, "rdisk-uuid/%s/%d", nqn, nsid))
	u := [16]byte(h[:16])
	u[6] = u[6]&0x0f | 0x80
	u[8] = u[8]&0x3f | 0x80
	return u
}

const maxNSID = 1024

type errorString string

func (e errorString) Error() string { return string(e) }

const (
	errNoControllerID = errorString("nvmeof target: no free controller ID")
	errQueueBroken    = errorString("nvmeof target: queue broken")
)
