package target

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/auth"
	"github.com/rdisk/rdisk/rdma"
)

// Config tunes a Target.
type Config struct {
	Provider rdma.Provider
	Logger   *slog.Logger
	// Firmware is the firmware revision reported in Identify (8 chars max).
	Firmware string
	// ConnHook, if set, is called with +1 when an I/O queue connects and
	// with -1 when it ends, and likewise when a queue starts and stops its
	// disk workers (rdisk target sizes GOMAXPROCS with it).
	ConnHook func(delta int)
	// Workers is the number of goroutines per I/O queue that run commands
	// on direct-I/O disks (block devices, O_DIRECT files) and flushes of
	// buffered files, so one queue keeps that many disk I/Os in flight;
	// default workers.Default. Other commands run on the queue's own
	// goroutine.
	Workers int
	// ANATransitionTime is the most time an ANA group stays in the
	// change state (Identify Controller ANATT, whole seconds, 1 s to
	// 255 s); 0 takes nvmet's 10 s. Linux hosts reset a controller whose
	// groups stay in change longer than twice that.
	ANATransitionTime time.Duration
	// ConnectTimeout bounds the time from a transport connection (an
	// RDMA/CM connection request, an accepted NVMe/TCP connection) to its
	// queue's successful Fabrics Connect: a queue without one by then
	// (no ICReq, no command, a Connect refused or never sent) is closed,
	// so a stalled or hostile peer cannot hold it, the keep-alive timer
	// starting only with a controller. 0 takes DefaultConnectTimeout;
	// negative disables it. (nvmet has no such timer; Linux hosts wait
	// 10 s for an ICResp and nvmet 10 s for a TLS handshake.)
	ConnectTimeout time.Duration
	// TCPPDUTimeout bounds the time an NVMe/TCP PDU takes to arrive whole
	// once its first byte has: a queue whose PDU header or data stop
	// arriving midway is closed (nvmet waits forever; its keep-alive
	// notices a stalled admin queue only). The wait for a PDU to begin is
	// not bounded (the keep-alive covers an idle host). 0 takes
	// DefaultTCPPDUTimeout; negative disables it.
	TCPPDUTimeout time.Duration
}

// Timeout defaults (Config).
const (
	// DefaultConnectTimeout is Config.ConnectTimeout's default: the 10 s
	// a Linux host waits for an ICResp.
	DefaultConnectTimeout = 10 * time.Second
	// DefaultTCPPDUTimeout is Config.TCPPDUTimeout's default: the 30 s
	// of a Linux host's I/O timeout (nvme_core.io_timeout), by when the
	// host gave the command up anyway.
	DefaultTCPPDUTimeout = 30 * time.Second
)

// timeoutOr is d, def for 0, and 0 (disabled) for a negative d.
func timeoutOr(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

// Target is an NVMe-oF target: subsystems exported through ports. It is
// safe for concurrent use.
type Target struct {
	p       rdma.Provider
	log     *slog.Logger
	fw      string
	hook    func(delta int)
	workers int
	anatt   uint8 // Identify Controller ANATT, seconds
	// connectTimeout and pduTimeout are Config's ConnectTimeout and
	// TCPPDUTimeout with defaults; 0: none.
	connectTimeout, pduTimeout time.Duration

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started time.Time
	discSub *Subsystem

	mu     sync.Mutex
	subs   map[string]*Subsystem
	ports  map[uint16]*Port
	genctr uint64
	disc   map[*controller]bool // discovery controllers, for log change events
	queues map[*sq]bool
	auths  map[string]*HostAuth // by host NQN
	seq    auth.SeqCounter      // DH-HMAC-CHAP sequence numbers, one series per target as Linux has one

	// draining is set by Drain: no new connection, queue or command.
	draining atomic.Bool
	stats    targetCounters
	// stripes deals the queues their stripes of the namespaces'
	// in-flight counts, in turn.
	stripes atomic.Uint32
	// anaChg is the ANA change count (nvmet_ana_chgcnt): every state
	// or group membership change moves it.
	anaChg atomic.Uint64
}

// New creates a Target with no subsystems and no ports.
func New(cfg Config) (*Target, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fw := cfg.Firmware
	if fw == "" {
		fw = "rdisk"
	}
	if len(fw) > 8 {
		fw = fw[:8]
	}
	anatt, err := anaTransitionTime(cfg.ANATransitionTime)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &Target{p: cfg.Provider, log: log, fw: fw, hook: cfg.ConnHook, workers: cfg.Workers, anatt: anatt, ctx: ctx, cancel: cancel, started: time.Now(),
		connectTimeout: timeoutOr(cfg.ConnectTimeout, DefaultConnectTimeout), pduTimeout: timeoutOr(cfg.TCPPDUTimeout, DefaultTCPPDUTimeout),
		subs: map[string]*Subsystem{}, ports: map[uint16]*Port{}, disc: map[*controller]bool{}, queues: map[*sq]bool{}, auths: map[string]*HostAuth{}}
	t.discSub = &Subsystem{t: t, cfg: SubsystemConfig{NQN: nvmeof.DiscoveryNQN, Serial: "rdisk-discovery", Model: "rdisk discovery",
		AllowAnyHost: true, CntlIDMin: 1, CntlIDMax: 0xffef}, ns: map[uint32]*Namespace{}, ctrls: map[uint16]*controller{}, hosts: map[string]bool{}, nextCID: 1}
	return t, nil
}

func (t *Target) addQueue(q *sq) {
	t.mu.Lock()
	t.queues[q] = true
	t.mu.Unlock()
}

func (t *Target) removeQueue(q *sq) {
	t.mu.Lock()
	delete(t.queues, q)
	t.mu.Unlock()
}

// SetHostAuth sets (a nil a: removes) the DH-HMAC-CHAP settings of host
// hostNQN, for every subsystem it may connect to. Queues connected later
// must authenticate; connected ones keep their state.
func (t *Target) SetHostAuth(hostNQN string, a *HostAuth) error {
	if a != nil {
		if err := a.Key.Validate(); err != nil {
			return fmt.Errorf("host %s: dhchap_key: %w", hostNQN, err)
		}
		if a.CtrlKey != nil {
			if err := a.CtrlKey.Validate(); err != nil {
				return fmt.Errorf("host %s: dhchap_ctrl_key: %w", hostNQN, err)
			}
		}
		c := *a
		a = &c
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if a == nil {
		delete(t.auths, hostNQN)
	} else {
		t.auths[hostNQN] = a
	}
	return nil
}

// hostAuth returns the authentication settings of a host, or nil.
func (t *Target) hostAuth(hostNQN string) *HostAuth {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.auths[hostNQN]
}

// AddSubsystem creates a subsystem.
func (t *Target) AddSubsystem(cfg SubsystemConfig) (*Subsystem, error) {
	s, err := newSubsystem(t, cfg)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	if _, dup := t.subs[cfg.NQN]; dup {
		t.mu.Unlock()
		return nil, fmt.Errorf("subsystem %s already exists", cfg.NQN)
	}
	t.subs[cfg.NQN] = s
	t.mu.Unlock()
	return s, nil
}

// Subsystem returns a subsystem by NQN, or nil.
func (t *Target) Subsystem(nqn string) *Subsystem {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.subs[nqn]
}

// Port is a live port.
type Port struct {
	t    *Target
	cfg  PortConfig
	prov rdma.Provider // serves the port's RDMA; nil on a TCP port
	ln   portListener
	host string
	svc  string
	// ctx ends with the port (Target.RemovePort) or the target: the
	// port's connections and queues end with it. wg counts the port's
	// goroutines (accept loop, connections).
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	subs []*Subsystem

	// ana holds the state of each ANA group on the port (index: group
	// ID; 0: the port has not got the group), read with one atomic load
	// per I/O command; anaMu orders the changes.
	ana   [maxANAGroups + 1]atomic.Uint32
	anaMu sync.Mutex

	// rdmaStats and tcpStats count the connections of each transport.
	rdmaStats, tcpStats portCounters
}

// portListener is a transport binding's listener behind a port (rdma.go).
type portListener interface {
	// Addr is the address it listens on.
	Addr() net.Addr
	// Close stops listening.
	Close() error
	// serve accepts and serves connections until the listener closes.
	serve(p *Port)
	// trTypes lists the transports the port serves (nvmeof.TrType*).
	trTypes() []uint8
}

// Addr is the address the port listens on.
func (p *Port) Addr() net.Addr { return p.ln.Addr() }

// Provider returns the RDMA provider serving the port (PortConfig.Provider
// or the target's), nil on a TCP-only port.
func (p *Port) Provider() rdma.Provider { return p.prov }

// Transport is the transport the port serves (TransportRDMA when the
// config left it empty).
func (p *Port) Transport() Transport {
	if p.cfg.Transport == "" {
		return TransportRDMA
	}
	return p.cfg.Transport
}

// AddPort starts listening on a port.
func (t *Target) AddPort(cfg PortConfig) (*Port, error) {
	if cfg.InlineDataSize == 0 {
		cfg.InlineDataSize = 4096
	}
	if cfg.InlineDataSize < 0 || cfg.InlineDataSize > 16384 {
		return nil, fmt.Errorf("port %d: inline data size %d outside 0..16384", cfg.ID, cfg.InlineDataSize)
	}
	if cfg.TCPInlineDataSize == 0 {
		cfg.TCPInlineDataSize = mdts
	}
	if cfg.TCPInlineDataSize < 0 || cfg.TCPInlineDataSize > mdts {
		return nil, fmt.Errorf("port %d: NVMe/TCP inline data size %d outside 0..%d", cfg.ID, cfg.TCPInlineDataSize, mdts)
	}
	if cfg.MaxQueueSize == 0 {
		cfg.MaxQueueSize = 128
	}
	if cfg.MaxQueueSize < 16 || cfg.MaxQueueSize > 1024 {
		return nil, fmt.Errorf("port %d: queue size %d outside 16..1024", cfg.ID, cfg.MaxQueueSize)
	}
	if cfg.MaxIOQueues == 0 {
		cfg.MaxIOQueues = 128
	}
	if cfg.MaxIOQueues < 1 || cfg.MaxIOQueues > 128 {
		return nil, fmt.Errorf("port %d: I/O queues %d outside 1..128", cfg.ID, cfg.MaxIOQueues)
	}
	if err := (&Port{cfg: cfg}).initANA(cfg.ANAGroups); err != nil {
		return nil, err
	}
	host, svc, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		host, svc = cfg.Addr, "4420"
	}
	t.mu.Lock()
	if _, dup := t.ports[cfg.ID]; dup {
		t.mu.Unlock()
		return nil, fmt.Errorf("port %d already exists", cfg.ID)
	}
	if t.draining.Load() {
		t.mu.Unlock()
		return nil, fmt.Errorf("port %d: the target is draining", cfg.ID)
	}
	t.mu.Unlock()
	addr := net.JoinHostPort(host, svc)
	prov := cfg.Provider
	if prov == nil {
		prov = t.p
	}
	var ln portListener
	switch cfg.Transport {
	case "", TransportRDMA:
		if prov == nil {
			return nil, fmt.Errorf("port %d: transport rdma needs an RDMA provider", cfg.ID)
		}
		ln, err = t.listenRDMA(prov, addr)
	case TransportTCP:
		prov = nil
		ln, err = t.listenTCP(addr, nil)
	case TransportBoth:
		if prov == nil {
			return nil, fmt.Errorf("port %d: transport %s needs an RDMA provider", cfg.ID, cfg.Transport)
		}
		if sp, ok := prov.(rdma.StreamProvider); ok {
			// One TCP listener: MPA requests and ICReqs told apart.
			ln, err = t.listenTCP(addr, sp)
		} else {
			// A device's RDMA/CM port space is not TCP's: an RDMA/CM
			// listener and a TCP one on the same port number.
			ln, err = t.listenPair(prov, addr)
		}
	default:
		return nil, fmt.Errorf("port %d: transport %q: want %s, %s or %s", cfg.ID, cfg.Transport, TransportRDMA, TransportTCP, TransportBoth)
	}
	if err != nil {
		return nil, fmt.Errorf("port %d: %w", cfg.ID, err)
	}
	if ta, ok := ln.Addr().(*net.TCPAddr); ok {
		svc = strconv.Itoa(ta.Port)
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = ta.IP.String()
		}
	}
	p := &Port{t: t, cfg: cfg, ln: ln, host: host, svc: svc, prov: prov}
	p.initANA(cfg.ANAGroups) // checked above
	p.ctx, p.cancel = context.WithCancel(t.ctx)
	t.mu.Lock()
	if _, dup := t.ports[cfg.ID]; dup || t.draining.Load() {
		// Added meanwhile by another call, or Drain began.
		t.mu.Unlock()
		p.cancel()
		ln.Close()
		if dup {
			return nil, fmt.Errorf("port %d already exists", cfg.ID)
		}
		return nil, fmt.Errorf("port %d: the target is draining", cfg.ID)
	}
	t.ports[cfg.ID] = p
	t.mu.Unlock()
	p.goServe(func() { ln.serve(p) })
	t.log.Info("nvmeof: port listening", "port", cfg.ID, "addr", ln.Addr(), "transport", p.Transport())
	return p, nil
}

// goServe runs f on a goroutine of the port (and of the target).
func (p *Port) goServe(f func()) {
	p.t.wg.Add(1)
	p.wg.Add(1)
	go func() {
		defer p.t.wg.Done()
		defer p.wg.Done()
		f()
	}()
}

// endReason names why a connection of the port ended with err (see
// reasonClose...): the target closing, the port removed, or else the
// host closing it or a transport error.
func (p *Port) endReason(err error) string {
	switch {
	case p.t.ctx.Err() != nil:
		return reasonClose
	case p.ctx.Err() != nil:
		return reasonPortRemoved
	case peerClosed(err):
		return reasonHostDisconnect
	}
	return reasonTransportError
}

// closing tells whether the port takes no more connections: it is being
// removed, or the target drains or closes.
func (p *Port) closing() bool { return p.ctx.Err() != nil || p.t.draining.Load() }

// refuse counts and logs a connection of transport trType the port
// refused before it carried a queue.
func (p *Port) refuse(trType uint8, why portReason, peer string, err error) {
	attrs := []any{"reason", portReasonNames[why], "port", p.cfg.ID, "transport", trName(trType), "peer", peer}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	if why == portNoICReq {
		// Port probes and health checks connect and close.
		p.t.log.Debug("nvmeof: connection closed before its ICReq", attrs...)
	} else {
		p.t.log.Warn("nvmeof: connection refused", attrs...)
	}
	p.counters(trType).rejected[why].Add(1) // after the line: a reader of the count finds it
}

// accepted counts and logs a connection of transport trType accepted;
// the caller calls the function returned when it ends.
func (p *Port) accepted(trType uint8, peer string, extra ...any) (ended func()) {
	p.t.log.Debug("nvmeof: connection accepted", append([]any{"port", p.cfg.ID, "transport", trName(trType), "peer", peer}, extra...)...)
	pc := p.counters(trType)
	pc.accepted.Add(1)
	pc.live.Add(1)
	return func() { pc.live.Add(-1) }
}

// Subsystems lists the NQNs of the subsystems p exports.
func (p *Port) Subsystems() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	nqns := make([]string, len(p.subs))
	for i, s := range p.subs {
		nqns[i] = s.cfg.NQN
	}
	return nqns
}

// LinkSubsystem exports s through p. A subsystem removed from the target
// (Target.RemoveSubsystem) is not linked.
func (p *Port) LinkSubsystem(s *Subsystem) {
	p.mu.Lock()
	if s.isRemoved() {
		p.mu.Unlock()
		p.t.log.Warn("nvmeof: not linking a removed subsystem", "port", p.cfg.ID, "subsystem", s.cfg.NQN)
		return
	}
	if !slices.Contains(p.subs, s) {
		p.subs = append(p.subs, s)
	}
	p.mu.Unlock()
	p.t.discoveryChanged()
}

// subsystem returns the subsystem nqn if this port exports it.
func (p *Port) subsystem(nqn string) *Subsystem {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.subs {
		if s.cfg.NQN == nqn {
			return s
		}
	}
	return nil
}

// discoveryChanged bumps the discovery log generation and notifies the
// discovery controllers that asked for it.
func (t *Target) discoveryChanged() {
	t.mu.Lock()
	t.genctr++
	var cs []*controller
	for c := range t.disc {
		cs = append(cs, c)
	}
	t.mu.Unlock()
	for _, c := range cs {
		c.discoveryChanged()
	}
}

// discoveryLog builds the discovery log page for a host on port p that
// reached the discovery controller over trType. A port serving RDMA and
// TCP on one port number lists its subsystems with the transport the host
// came by, so that a host connecting to every entry (nvme connect-all)
// does not open a second path over a transport it did not ask for.
func (t *Target) discoveryLog(p *Port, hostNQN string, trType uint8) []byte {
	t.mu.Lock()
	gen := t.genctr
	t.mu.Unlock()
	var entries []nvmeof.DiscoveryLogEntry
	adrfam := nvmeof.AdrFamIPv4
	if ip := net.ParseIP(p.host); ip != nil && ip.To4() == nil {
		adrfam = nvmeof.AdrFamIPv6
	}
	entry := func(sub uint8, portID uint16, host, svc, nqn string) nvmeof.DiscoveryLogEntry {
		e := nvmeof.DiscoveryLogEntry{
			AdrFam: adrfam, SubType: sub, TReq: nvmeof.TReqNotSpecified,
			PortID: portID, CNTLID: nvmeof.CNTLIDDynamic, ASQSZ: nvmeof.AdminQueueDepth,
			TrSvcID: svc, TrAddr: host, SubNQN: nqn,
		}
		fillTSAS(&e, trType)
		return e
	}
	p.mu.Lock()
	for _, s := range p.subs {
		if s.hostAllowed(hostNQN) {
			entries = append(entries, entry(nvmeof.SubTypeNVMe, p.cfg.ID, p.host, p.svc, s.cfg.NQN))
		}
	}
	p.mu.Unlock()
	for _, r := range p.cfg.Referrals {
		h, s, err := net.SplitHostPort(r.Addr)
		if err != nil {
			h, s = r.Addr, "4420"
		}
		entries = append(entries, entry(nvmeof.SubTypeReferral, r.PortID, h, s, nvmeof.DiscoveryNQN))
	}
	buf := make([]byte, nvmeof.DiscoveryLogSize(len(entries)))
	if _, err := nvmeof.EncodeDiscoveryLog(buf, gen, entries); err != nil {
		t.log.Warn("nvmeof: encoding discovery log", "port", p.cfg.ID, "host", hostNQN, "err", err)
		buf = make([]byte, nvmeof.DiscoveryLogSize(0))
		nvmeof.EncodeDiscoveryLog(buf, gen, nil)
	}
	return buf
}

// Close stops every port and disconnects every controller.
func (t *Target) Close() error {
	t.cancel()
	t.mu.Lock()
	ports := make([]*Port, 0, len(t.ports))
	for _, p := range t.ports {
		ports = append(ports, p)
	}
	subs := make([]*Subsystem, 0, len(t.subs))
	for _, s := range t.subs {
		subs = append(subs, s)
	}
	discs := make([]*controller, 0, len(t.disc))
	for c := range t.disc {
		discs = append(discs, c)
	}
	t.mu.Unlock()
	for _, p := range ports {
		p.ln.Close()
	}
	for _, s := range subs {
		s.mu.RLock()
		cs := s.controllersLocked()
		s.mu.RUnlock()
		for _, c := range cs {
			c.teardown(reasonClose, nil)
		}
	}
	for _, c := range discs {
		c.teardown(reasonClose, nil)
	}
	t.mu.Lock()
	for q := range t.queues {
		q.tr.disconnect()
	}
	t.mu.Unlock()
	t.wg.Wait()
	return nil
}
