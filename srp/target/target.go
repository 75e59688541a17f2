package target

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/rdisk/rdisk/srp"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdisk/rdisk/internal/workers"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/scsi"
)

// Target defaults.
const (
	// DefaultQueueDepth is the request limit granted to each channel at
	// login: Linux ib_srp's default queue_size (64), of which it uses 62
	// for commands.
	DefaultQueueDepth = 64
	// DefaultMaxIULen is the longest initiator-to-target IU accepted:
	// what Linux ib_srp asks for with immediate data on (its
	// SRP_IMM_DATA_OFFSET of 68 plus 8 KiB of max_imm_data).
	DefaultMaxIULen = 68 + 8192
	// DefaultMaxTransfer is the largest data transfer of one command
	// (1 MiB; Linux sends at most 512 KiB unless max_sect is raised).
	DefaultMaxTransfer = 1 << 20
	// DefaultMaxDescriptors bounds indirect tables (Linux srpt's
	// SRPT_DEF_SG_TABLESIZE).
	DefaultMaxDescriptors = 128
	// DefaultMaxChannels bounds the channels of one I_T nexus.
	DefaultMaxChannels = 16
	// DefaultRDMAReadDepth is the RDMA Reads in flight per channel asked
	// at accept (capped by the initiator's IRD; Linux ib_srp offers 4).
	DefaultRDMAReadDepth = 16
	// DefaultFirstIUTimeout is Config.FirstIUTimeout's default. Linux
	// ib_srp scans the target as soon as its channels are logged in.
	DefaultFirstIUTimeout = 30 * time.Second

	maxQueueDepth = 4096
)

// Config tunes a Target. Zero fields take the defaults above.
type Config struct {
	// Logger receives login, logout and error events; nil discards them.
	Logger *slog.Logger
	// ConnHook, if set, is called with +1 when a channel's login starts
	// and with -1 when the channel ends (rdisk target sizes GOMAXPROCS
	// with it).
	ConnHook func(delta int)
	// QueueDepth is the request limit (credits) granted to each channel
	// at login; the channel posts one more receive buffer, for the
	// initiator's responses to target requests.
	QueueDepth int
	// MaxIULen is the longest initiator-to-target IU accepted (the size
	// of each receive buffer). Logins asking for more are rejected with
	// RejITIULenTooLarge.
	MaxIULen int
	// MaxTransfer is the largest data transfer of one command. Set the
	// LUs' scsi.LUConfig.MaxTransferBlocks from it so that initiators
	// learn it from the block limits VPD page.
	MaxTransfer int
	// MaxDescriptors bounds the descriptors of an indirect table.
	MaxDescriptors int
	// MaxChannels bounds the RDMA channels of one I_T nexus; 1 refuses
	// multichannel logins with RejMultiChannelUnsupp.
	MaxChannels int
	// RDMAReadDepth is the ORD asked for at accept.
	RDMAReadDepth int
	// Workers is the number of goroutines per channel that run commands
	// on disks that may block (default min(QueueDepth, workers.Default), as the iSER and
	// NVMe-oF targets: on the 2-core test machine 32 workers, each a thread
	// in a system call, gave 35-41k 4 KiB IOPS from a cached file and
	// 4.5-14k from a loop device where 4 gave 90-106k and 20-26k).
	Workers int
	// NoInline runs every command on the workers. By default commands on
	// disks that never block (backstore.Mem, backstore.Null) run on the
	// channel's completion loop, without a goroutine hand-off.
	NoInline bool
	// NoImmediateData declines immediate data (SRP2) at login.
	NoImmediateData bool
	// NoIndirect supports direct descriptors only: logins that require
	// indirect ones are rejected with RejUnsupportedDescFormat and
	// indirect commands end the channel with SRP_T_LOGOUT.
	NoIndirect bool
	// NoExternalTables refuses indirect tables that are not wholly in the
	// IU (CHECK CONDITION) instead of fetching them with RDMA Read.
	NoExternalTables bool
	// FirstIUTimeout bounds the time from a login to the first IU of its
	// I_T nexus: a channel logged in whose nexus has received no IU on
	// any of its channels by then is logged out (SRP_T_LOGOUT, Inactive
	// RDMA channel) and disconnected, so a peer that logs in and sends
	// nothing does not hold the channel's buffers for ever. Channels of
	// a nexus that carries IUs may idle (Linux ib_srp's channels beyond
	// the first carry I/O only when their CPUs issue some). Linux srpt
	// has no such timer, nor one for idle channels, which rdisk does not
	// time out either (srpt leaves them to the connection manager and
	// the initiator). 0 takes DefaultFirstIUTimeout; negative disables it.
	FirstIUTimeout time.Duration

	// afterDetach, if set (by tests), runs when a nexus lost its last
	// channel, before its session closes.
	afterDetach func()
}

func (c *Config) setDefaults() error {
	if c.QueueDepth == 0 {
		c.QueueDepth = DefaultQueueDepth
	}
	if c.MaxIULen == 0 {
		c.MaxIULen = DefaultMaxIULen
	}
	if c.MaxTransfer == 0 {
		c.MaxTransfer = DefaultMaxTransfer
	}
	if c.MaxDescriptors == 0 {
		c.MaxDescriptors = DefaultMaxDescriptors
	}
	if c.MaxChannels == 0 {
		c.MaxChannels = DefaultMaxChannels
	}
	if c.RDMAReadDepth == 0 {
		c.RDMAReadDepth = DefaultRDMAReadDepth
	}
	if c.Workers == 0 {
		c.Workers = min(c.QueueDepth, workers.Default)
	}
	if c.FirstIUTimeout == 0 {
		c.FirstIUTimeout = DefaultFirstIUTimeout
	}
	switch {
	case c.QueueDepth < 2 || c.QueueDepth > maxQueueDepth:
		return fmt.Errorf("srp: queue depth %d: want 2 to %d", c.QueueDepth, maxQueueDepth)
	case c.MaxIULen < srp.MinITIULen || c.MaxIULen > 1<<20:
		return fmt.Errorf("srp: maximum IU length %d: want %d to 1 MiB", c.MaxIULen, srp.MinITIULen)
	case c.MaxTransfer < 4096 || c.MaxTransfer > 64<<20:
		return fmt.Errorf("srp: maximum transfer %d: want 4 KiB to 64 MiB", c.MaxTransfer)
	case c.MaxDescriptors < 1 || c.MaxDescriptors > 4096:
		return fmt.Errorf("srp: maximum descriptors %d: want 1 to 4096", c.MaxDescriptors)
	case c.MaxChannels < 1:
		return fmt.Errorf("srp: maximum channels %d", c.MaxChannels)
	case c.Workers < 1:
		return fmt.Errorf("srp: workers %d", c.Workers)
	}
	return nil
}

// supportedFormats is the SUPPORTED BUFFER FORMATS of the target.
func (c *Config) supportedFormats() uint16 {
	if c.NoIndirect {
		return srp.BufFmtDirect
	}
	return srp.BufFmtDirect | srp.BufFmtIndirect
}

// Target is an SRP target: target ports (each an id_ext/ioc_guid pair with
// a SCSI target of LUNs and an ACL) served on RDMA/CM listeners. Logins
// name the target port by its identifier, as Linux ib_srp's add_target
// does. All methods are safe for concurrent use.
type Target struct {
	cfg Config
	log *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	chanID atomic.Uint64

	mu        sync.Mutex
	ports     map[srp.PortID]*Port
	listeners []rdma.Listener
	closed    bool

	// draining is set by Drain: logins are refused and channels get no
	// more credits.
	draining atomic.Bool

	stats struct {
		logins, rejects, ilogouts, tlogouts                        atomic.Uint64
		commands, direct, indirect, external, immediate, tmfs, aer atomic.Uint64
		credReqs                                                   atomic.Uint64
		rejectsBy                                                  [nRejectReasons]atomic.Uint64
		closed                                                     [nEndReasons]atomic.Uint64
	}
}

// Stats counts what a target has done since it started, for a metrics
// collector (Target.Stats reads it at scrape time). Each map holds every
// key of its fixed set (zero when nothing happened).
type Stats struct {
	Logins       uint64 // channels logged in
	LoginRejects uint64 // logins refused with SRP_LOGIN_REJ
	// LoginRejectsByReason splits LoginRejects by reason:
	//
	//	not_found      no target port with the login's identifier (or
	//	               it was removed): RejUnableAssociateChannel
	//	forbidden      the initiator is not in the port's ACL
	//	bad_request    a malformed login request, an IU length out of
	//	               range, buffer formats not supported, a reserved
	//	               multi-channel action
	//	channel_limit  MaxChannels reached, or multichannel refused
	//	no_resources   the channel's queue or SCSI session could not be
	//	               set up
	//	shutting_down  the target is draining or closing
	//	               (RejInsufficientResources, as Linux srpt answers
	//	               for a disabled port)
	LoginRejectsByReason map[string]uint64
	ILogouts             uint64 // SRP_I_LOGOUT received
	TLogouts             uint64 // SRP_T_LOGOUT sent
	Commands             uint64 // SRP_CMD received
	// Commands by data descriptor format: Direct, Indirect (table in the
	// IU), External (indirect table fetched with RDMA Read), Immediate.
	Direct, Indirect, External, Immediate uint64
	TaskMgmt                              uint64 // SRP_TSK_MGMT received
	CredReqs                              uint64 // SRP_CRED_REQ sent
	AERs                                  uint64 // SRP_AER_REQ sent
	// ChannelsClosed are the logged-in channels that ended, by reason:
	//
	//	logout           the initiator logged out (SRP_I_LOGOUT)
	//	connection_lost  the connection failed or the initiator closed it
	//	protocol_error   the target logged it out for a protocol error
	//	                 (an invalid IU, an unexpected response, a
	//	                 descriptor format not supported)
	//	reinstated       a login with MULTI-CHANNEL ACTION 0 of its
	//	                 initiator port replaced it
	//	admin            CloseChannel or RemovePort ended it
	//	drain            Drain ended it
	//	shutdown         Close ended it
	//	inactive         its nexus received no IU within
	//	                 Config.FirstIUTimeout of the login
	//
	// The first cause wins.
	ChannelsClosed map[string]uint64
	// Live is the number of channels logged in now.
	Live int
}

// Stats returns the target's counters and the number of live channels.
func (t *Target) Stats() Stats {
	c := &t.stats
	// Live first: a channel counts its end before it leaves its nexus, so
	// a snapshot that finds it gone also finds its end counted (read the
	// other way round, one could see Live 0 with an end still uncounted).
	live := 0
	for _, p := range t.Ports() {
		live += p.liveChannels()
	}
	st := Stats{
		Live:   live,
		Logins: c.logins.Load(), LoginRejects: c.rejects.Load(), ILogouts: c.ilogouts.Load(), TLogouts: c.tlogouts.Load(),
		Commands: c.commands.Load(), Direct: c.direct.Load(), Indirect: c.indirect.Load(), External: c.external.Load(),
		Immediate: c.immediate.Load(), TaskMgmt: c.tmfs.Load(), CredReqs: c.credReqs.Load(), AERs: c.aer.Load(),
		LoginRejectsByReason: make(map[string]uint64, nRejectReasons),
		ChannelsClosed:       make(map[string]uint64, nEndReasons-1),
	}
	for i, n := range rejectNames {
		st.LoginRejectsByReason[n] = c.rejectsBy[i].Load()
	}
	for i := endUnset + 1; i < nEndReasons; i++ {
		st.ChannelsClosed[endNames[i]] = c.closed[i].Load()
	}
	return st
}

// New returns a target with no ports. Add ports with AddPort, then
// Listen.
func New(cfg Config) (*Target, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	t := &Target{cfg: cfg, log: log, ports: map[srp.PortID]*Port{}}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	return t, nil
}

// Config returns the configuration with defaults filled in.
func (t *Target) Config() Config { return t.cfg }

// PortConfig describes a target port.
type PortConfig struct {
	// IDExt and IOCGUID form the target port identifier that logins must
	// name (ib_srp's id_ext and ioc_guid).
	IDExt, IOCGUID uint64
	// SCSI is the SCSI target device behind the port: its LUN map.
	// Nil makes a new one named after the port identifier. A SCSI target
	// may be shared with other ports and transports; give each port its
	// own RelativeTargetPort then.
	SCSI *scsi.Target
	// RelativeTargetPort identifies the port to the SCSI core (VPD page
	// 83h, REPORT TARGET PORT GROUPS, reservations); 0 means 1.
	RelativeTargetPort uint16
	// PortGroups and PortGroup are the ALUA target port groups of the
	// SCSI target made when SCSI is nil (scsi.TargetConfig.PortGroups,
	// PortGroup): this port's RelativeTargetPort and those of the other
	// gateways exporting the same LUs. Empty: one active/optimized group.
	// Port.SetPortGroupState changes a group's state live.
	PortGroups []scsi.PortGroupConfig
	PortGroup  uint16
	// AllowedInitiators is the ACL. Each entry is an initiator port
	// identifier ("0x" and 32 hex digits), a port GUID (16 hex digits or
	// "xxxx:xxxx:xxxx:xxxx", matching the second half of the identifier),
	// or an IP address (matching the initiator's RDMA/CM address, as Linux
	// srpt names RDMA/CM logins). Logins matching no entry are rejected
	// with RejUnableEstablishChannel unless AllowAnyInitiator is set.
	AllowedInitiators []string
	// AllowAnyInitiator accepts every initiator.
	AllowAnyInitiator bool
}

// aclEntry is one parsed ACL entry.
type aclEntry struct {
	id     srp.PortID
	isID   bool
	guid   uint64
	isGUID bool
	ip     net.IP
}

func parseACL(entries []string) ([]aclEntry, error) {
	var out []aclEntry
	for _, e := range entries {
		s := strings.TrimSpace(e)
		switch {
		case net.ParseIP(s) != nil:
			out = append(out, aclEntry{ip: net.ParseIP(s)})
		case strings.Count(s, ":") == 3 || len(strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")) <= 16:
			g, err := srp.ParseGUID(s)
			if err != nil {
				return nil, fmt.Errorf("srp: ACL entry %q: %w", e, err)
			}
			out = append(out, aclEntry{guid: g, isGUID: true})
		default:
			id, err := srp.ParsePortID(s)
			if err != nil {
				return nil, fmt.Errorf("srp: ACL entry %q: %w", e, err)
			}
			out = append(out, aclEntry{id: id, isID: true})
		}
	}
	return out, nil
}

// Port is a target port: an SRP target port identifier, its SCSI target
// and its logged-in I_T nexuses. Its methods are safe for concurrent use.
type Port struct {
	t   *Target
	cfg PortConfig // its ACL fields as AddPort got them: see acl
	id  srp.PortID
	st  *scsi.Target
	acl atomic.Pointer[portACL] // replaced whole by SetACL

	mu      sync.Mutex
	nexuses map[srp.PortID]*nexus
	removed bool
}

// portACL is the access control of a port.
type portACL struct {
	any     bool
	entries []aclEntry
}

// nexus is an I_T nexus: the channels of one initiator port on one target
// port, sharing one SCSI session.
type nexus struct {
	port     *Port
	ipid     srp.PortID
	sess     *scsi.Session
	channels []*channel // guarded by port.mu
	// active is set by the first IU any channel of the nexus received
	// (Config.FirstIUTimeout).
	active atomic.Bool
}

// AddPort adds a target port. Logins may name it as soon as AddPort
// returns.
func (t *Target) AddPort(pc PortConfig) (*Port, error) {
	acl, err := parseACL(pc.AllowedInitiators)
	if err != nil {
		return nil, err
	}
	id := srp.MakePortID(pc.IDExt, pc.IOCGUID)
	if pc.RelativeTargetPort == 0 {
		pc.RelativeTargetPort = 1
	}
	st := pc.SCSI
	if st == nil {
		if err := scsi.ValidatePortGroups(pc.PortGroups); err != nil {
			return nil, fmt.Errorf("srp: target port %s: %w", id, err)
		}
		st = scsi.NewTarget(scsi.TargetConfig{Name: id.String(), PortGroups: pc.PortGroups, PortGroup: pc.PortGroup, Logger: t.log})
	}
	p := &Port{t: t, cfg: pc, id: id, st: st, nexuses: map[srp.PortID]*nexus{}}
	p.acl.Store(&portACL{any: pc.AllowAnyInitiator, entries: acl})
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	if t.ports[id] != nil {
		return nil, fmt.Errorf("srp: target port %s already exists", id)
	}
	t.ports[id] = p
	return p, nil
}

// Port returns the target port with identifier id, or nil.
func (t *Target) Port(id srp.PortID) *Port {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ports[id]
}

// RemovePort removes a target port: its channels get SRP_T_LOGOUT and are
// disconnected.
func (t *Target) RemovePort(id srp.PortID) error {
	t.mu.Lock()
	p := t.ports[id]
	delete(t.ports, id)
	t.mu.Unlock()
	if p == nil {
		return fmt.Errorf("srp: no target port %s", id)
	}
	p.logoutAll(srp.TLogoutNoReason, endAdmin)
	return nil
}

// ErrClosed is returned after Target.Close.
const ErrClosed = errorString("srp: target closed")

// ErrDraining is returned by Listen after Target.Drain.
const ErrDraining = errorString("srp: target draining")

// Listen starts an RDMA/CM listener on addr ("host:port"; port 0 picks a
// free one) and serves logins on it in the background until ctx is done or
// the target is closed. It returns the listening address.
func (t *Target) Listen(ctx context.Context, p rdma.Provider, addr string) (net.Addr, error) {
	l, err := p.Listen(t.ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("srp: listening on %s: %w", addr, err)
	}
	t.mu.Lock()
	if t.closed || t.draining.Load() {
		t.mu.Unlock()
		l.Close()
		if t.closed {
			return nil, ErrClosed
		}
		return nil, ErrDraining
	}
	t.listeners = append(t.listeners, l)
	t.mu.Unlock()
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		select {
		case <-ctx.Done():
			l.Close()
		case <-t.ctx.Done():
		}
	}()
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		t.serve(l, p)
	}()
	t.log.Info("srp: listening", "addr", l.Addr())
	return l.Addr(), nil
}

// ListenAndServe listens on addr and serves logins until ctx is done, then
// closes the target. It is the one call `rdisk target` needs.
func (t *Target) ListenAndServe(ctx context.Context, p rdma.Provider, addr string) error {
	if _, err := t.Listen(ctx, p, addr); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-t.ctx.Done():
	}
	return t.Close()
}

func (t *Target) serve(l rdma.Listener, prov rdma.Provider) {
	for {
		req, err := l.Accept(t.ctx)
		if err != nil {
			if t.ctx.Err() == nil && !errors.Is(err, rdma.ErrClosed) {
				t.log.Debug("srp: listener ended", "addr", l.Addr(), "err", err)
			}
			return
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			if h := t.cfg.ConnHook; h != nil {
				h(1)
				defer h(-1)
			}
			t.login(prov, req)
		}()
	}
}

// Close logs every channel out (SRP_T_LOGOUT), closes the listeners and
// waits for the channels to end. On iWARP a target may send only after the
// initiator's first message, so a channel that never carried an IU is just
// disconnected.
func (t *Target) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	ls := t.listeners
	ports := make([]*Port, 0, len(t.ports))
	for _, p := range t.ports {
		ports = append(ports, p)
	}
	t.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	var chs []*channel
	for _, p := range ports {
		chs = append(chs, p.logoutAll(srp.TLogoutNoReason, endShutdown)...)
	}
	// Each channel ends once its SRP_T_LOGOUT was sent; those that do not
	// within the bound are cut.
	deadline := time.After(1500 * time.Millisecond)
wait:
	for _, ch := range chs {
		select {
		case <-ch.ended:
		case <-deadline:
			break wait
		}
	}
	t.cancel()
	t.wg.Wait()
	return nil
}

// ID returns the target port identifier.
func (p *Port) ID() srp.PortID { return p.id }

// SCSI returns the port's SCSI target. Map LUNs through Port.Map to have
// logged-in initiators notified.
func (p *Port) SCSI() *scsi.Target { return p.st }

// URL returns the srp:// URL of the port reached at addr ("host:port").
func (p *Port) URL(addr string) srp.URL {
	u := srp.URL{Port: srp.DefaultPort, IDExt: p.cfg.IDExt, IOCGUID: p.cfg.IOCGUID}
	h, port, err := net.SplitHostPort(addr)
	if err != nil {
		u.Host = addr
		return u
	}
	u.Host = h
	fmt.Sscanf(port, "%d", &u.Port)
	return u
}

// Map maps lu as LUN lun of the port's SCSI target and sends every
// logged-in nexus an SRP_AER_REQ with REPORTED LUNS DATA HAS CHANGED.
func (p *Port) Map(lun uint64, lu *scsi.LU) error {
	if err := p.st.Map(lun, lu); err != nil {
		return err
	}
	p.notify(lun, scsi.ASCReportedLUNsDataChanged)
	return nil
}

// Unmap unmaps LUN lun and notifies the nexuses as Map does.
func (p *Port) Unmap(lun uint64) (*scsi.LU, error) {
	lu, err := p.st.Unmap(lun)
	if err != nil {
		return nil, err
	}
	p.notify(lun, scsi.ASCReportedLUNsDataChanged)
	return lu, nil
}

// CapacityChanged tells the LU at lun to re-read its disk size (after the
// disk was resized) and sends every nexus an SRP_AER_REQ with CAPACITY
// DATA HAS CHANGED.
func (p *Port) CapacityChanged(lun uint64) error {
	lu := p.st.LU(lun)
	if lu == nil {
		return fmt.Errorf("srp: %w: LUN %d", scsi.ErrNoLUN, lun)
	}
	lu.CapacityChanged()
	p.notify(lun, scsi.ASCCapacityDataChanged)
	return nil
}

// SetPortGroupState changes the ALUA state of target port group id of the
// port's SCSI target (scsi.Target.SetPortGroupState) and sends every nexus
// of the port an SRP_AER_REQ with ASYMMETRIC ACCESS STATE CHANGED for each
// LUN, as CapacityChanged does (the nexuses of other ports sharing the
// SCSI target get the unit attention with their next command).
func (p *Port) SetPortGroupState(id uint16, st scsi.ALUAState) error {
	if err := p.st.SetPortGroupState(id, st); err != nil {
		return fmt.Errorf("srp: target port %s: %w", p.id, err)
	}
	p.t.log.Info("srp: ALUA state changed", "port", p.id.String(), "group", id, "state", st.String())
	for _, lun := range p.st.LUNs() {
		p.notify(lun, scsi.ASCAsymmetricAccessChanged)
	}
	return nil
}

// PortGroups returns the ALUA target port groups of the port's SCSI
// target with their current states.
func (p *Port) PortGroups() []scsi.PortGroupConfig { return p.st.PortGroups() }

// notify sends an AER to one live channel of every nexus.
func (p *Port) notify(lun uint64, asc scsi.ASC) {
	p.mu.Lock()
	var chs []*channel
	for _, nx := range p.nexuses {
		if len(nx.channels) > 0 {
			chs = append(chs, nx.channels[0])
		}
	}
	p.mu.Unlock()
	for _, ch := range chs {
		ch.queueAER(lun, asc)
	}
}

// Channels returns the number of live channels of the port.
func (p *Port) Channels() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, nx := range p.nexuses {
		n += len(nx.channels)
	}
	return n
}

// logoutAll logs every channel of the port out (why: the Stats reason)
// and returns them.
func (p *Port) logoutAll(r srp.TLogoutReason, why endReason) []*channel {
	p.mu.Lock()
	p.removed = true
	var chs []*channel
	for _, nx := range p.nexuses {
		chs = append(chs, nx.channels...)
	}
	p.mu.Unlock()
	for _, ch := range chs {
		ch.logoutFor(r, why)
	}
	return chs
}

// liveChannels is the number of the port's channels logged in.
func (p *Port) liveChannels() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, nx := range p.nexuses {
		for _, ch := range nx.channels {
			if ch.live.Load() {
				n++
			}
		}
	}
	return n
}

// allowed checks the ACL.
func (p *Port) allowed(ipid srp.PortID, remote net.Addr) bool {
	acl := p.acl.Load()
	if acl.any {
		return true
	}
	var rip net.IP
	if a, ok := remote.(*net.TCPAddr); ok {
		rip = a.IP
	} else if remote != nil {
		if h, _, err := net.SplitHostPort(remote.String()); err == nil {
			rip = net.ParseIP(h)
		}
	}
	for _, e := range acl.entries {
		switch {
		case e.isID && e.id == ipid:
			return true
		case e.isGUID && e.guid == ipid.GUID():
			return true
		case e.ip != nil && rip != nil && e.ip.Equal(rip):
			return true
		}
	}
	return false
}

// login handles one RDMA/CM connect request: the SRP login.
func (t *Target) login(prov rdma.Provider, req rdma.ConnRequest) {
	t.log.Debug("srp: login request", "peer", addrString(req.RemoteAddr()), "ird", req.ResponderResources(), "ord", req.InitiatorDepth(),
		"private_data", hex.EncodeToString(req.PrivateData()))
	f, err := srp.ParseLoginReqRDMA(req.PrivateData())
	if err != nil {
		t.reject(req, nil, srp.RejUnableEstablishChannel, rejBadRequest, err)
		return
	}
	cfg := &t.cfg
	t.mu.Lock()
	closed := t.closed
	p := t.ports[f.TargetPortID]
	t.mu.Unlock()
	switch {
	case closed || t.draining.Load():
		t.reject(req, &f, srp.RejInsufficientResources, rejShuttingDown, errors.New("the target is shutting down"))
		return
	case f.ReqITIULen < srp.MinITIULen || f.ReqITIULen > uint32(cfg.MaxIULen):
		t.reject(req, &f, srp.RejITIULenTooLarge, rejBadRequest, fmt.Errorf("it_iu_len %d out of range %d..%d", f.ReqITIULen, srp.MinITIULen, cfg.MaxIULen))
		return
	case f.ReqBufFmt&^cfg.supportedFormats() != 0:
		t.reject(req, &f, srp.RejUnsupportedDescFormat, rejBadRequest, fmt.Errorf("required buffer formats %#x, supported %#x", f.ReqBufFmt, cfg.supportedFormats()))
		return
	case f.MultiChannel() > srp.MultiChanMulti:
		t.reject(req, &f, srp.RejUnableEstablishChannel, rejBadRequest, fmt.Errorf("reserved multi-channel action %d", f.MultiChannel()))
		return
	case p == nil:
		t.reject(req, &f, srp.RejUnableAssociateChannel, rejNotFound, fmt.Errorf("no target port %s", f.TargetPortID))
		return
	case !p.allowed(f.InitiatorPortID, req.RemoteAddr()):
		t.reject(req, &f, srp.RejUnableEstablishChannel, rejForbidden, fmt.Errorf("initiator %s at %s is not in the ACL of %s", f.InitiatorPortID, req.RemoteAddr(), p.id))
		return
	}
	p.mu.Lock()
	nx := p.nexuses[f.InitiatorPortID]
	existing := 0
	if nx != nil {
		existing = len(nx.channels)
	}
	p.mu.Unlock()
	if f.MultiChannel() == srp.MultiChanMulti && existing > 0 {
		if cfg.MaxChannels == 1 {
			t.reject(req, &f, srp.RejMultiChannelUnsupp, rejChannelLimit, fmt.Errorf("multichannel login, channels limited to 1"))
			return
		}
		if existing >= cfg.MaxChannels {
			t.reject(req, &f, srp.RejChannelLimitReached, rejChannelLimit, fmt.Errorf("%d channels already", existing))
			return
		}
	}
	immOff := 0
	if f.ReqFlags&srp.ImmedRequested != 0 && !cfg.NoImmediateData && int(f.ImmDataOffset) >= srp.CmdSize && uint32(f.ImmDataOffset) < f.ReqITIULen {
		immOff = int(f.ImmDataOffset)
	}
	ch, err := t.newChannel(prov, p, f, immOff, req.RemoteAddr())
	if err != nil {
		t.reject(req, &f, srp.RejInsufficientResources, rejNoResources, err)
		return
	}
	terminated, err := p.attach(ch, f.MultiChannel() == srp.MultiChanSingle)
	if err != nil {
		t.refuse(req, &f, err)
		ch.end("login rejected")
		return
	}
	rsp := make([]byte, srp.LoginRspSize)
	rf := srp.LoginRspFields{
		ReqLimDelta: int32(ch.depth), Tag: f.Tag, MaxITIULen: uint32(cfg.MaxIULen), MaxTIIULen: uint32(ch.tiLen),
		BufFmt: cfg.supportedFormats(),
	}
	switch {
	case terminated:
		rf.Flags = srp.LoginRspTerminated
	case f.MultiChannel() == srp.MultiChanMulti && existing > 0:
		rf.Flags = srp.LoginRspMaintained
	}
	if immOff != 0 {
		rf.Flags |= srp.LoginRspImmedSupp
	}
	srp.LoginRsp(rsp).Encode(&rf)
	ch.mu.Lock()
	ch.granted = int64(ch.depth)
	ch.mu.Unlock()
	err = req.Accept(ch.ctx, ch.q.QP(), rdma.ConnParam{PrivateData: rsp, ResponderResources: 4, InitiatorDepth: readDepth(cfg.RDMAReadDepth, req.ResponderResources())})
	if err != nil {
		ch.log.Info("srp: accept failed", "err", err)
		ch.end("accept failed")
		return
	}
	t.stats.logins.Add(1)
	ch.live.Store(true)
	ch.log.Info("srp: channel logged in", "depth", ch.depth, "it_iu_len", f.ReqITIULen, "imm_data_offset", immOff,
		"multichannel", f.MultiChannel())
	if d := cfg.FirstIUTimeout; d > 0 {
		tm := time.AfterFunc(d, func() { ch.checkFirstIU(d) })
		defer tm.Stop()
	}
	ch.run()
}

// checkFirstIU logs the channel out if its nexus has received no IU
// since the login, d ago (Config.FirstIUTimeout).
func (ch *channel) checkFirstIU(d time.Duration) {
	if ch.nx.active.Load() {
		return
	}
	ch.log.Warn("srp: no IU since the login: logging the channel out", "reason", endNames[endInactive], "timeout", d)
	ch.mu.Lock()
	if ch.detail == "" {
		ch.detail = fmt.Sprintf("no IU within %v of the login", d)
	}
	ch.mu.Unlock()
	ch.logoutFor(srp.TLogoutInactiveChannel, endInactive)
}

// readDepth is the ORD to ask for at accept: at most the initiator's IRD
// (iWARP's relaxed negotiation caps it there anyway).
func readDepth(want, peerIRD int) int {
	if peerIRD <= 0 {
		return want
	}
	return min(want, peerIRD)
}

// attach adds a new channel to its nexus, creating the nexus and its SCSI
// session for the first channel. With single (MULTI-CHANNEL ACTION 0) the
// other channels of the nexus are logged out; terminated reports whether
// there were any.
func (p *Port) attach(ch *channel, single bool) (terminated bool, err error) {
	p.mu.Lock()
	var nx *nexus
	for tries := 0; ; tries++ {
		if p.removed {
			p.mu.Unlock()
			return false, &refusal{srp.RejUnableAssociateChannel, rejNotFound, fmt.Errorf("target port %s was removed", p.id)}
		}
		if p.t.draining.Load() {
			// Drain looks for channels under p.mu after it set draining:
			// none attaches unseen.
			p.mu.Unlock()
			return false, &refusal{srp.RejInsufficientResources, rejShuttingDown, errors.New("the target is draining")}
		}
		if nx = p.nexuses[ch.ipid]; nx != nil {
			break
		}
		sess, err := p.st.NewSession(scsi.SessionConfig{
			InitiatorPort:      ch.ipid.String(),
			TransportID:        scsi.SRPTransportID(ch.ipid),
			ProtocolID:         scsi.ProtocolSRP,
			RelativeTargetPort: p.cfg.RelativeTargetPort,
			TargetPort:         p.id.String(),
		})
		if err == nil {
			nx = &nexus{port: p, ipid: ch.ipid, sess: sess}
			p.nexuses[ch.ipid] = nx
			break
		}
		if errors.Is(err, scsi.ErrDuplicateSession) && tries < sessionRetries {
			// The last channel of this initiator port's nexus has just
			// left it (detach) and its session is not closed yet: a
			// re-login right after a logout.
			p.mu.Unlock()
			time.Sleep(sessionRetryDelay)
			p.mu.Lock()
			continue
		}
		p.mu.Unlock()
		return false, &refusal{srp.RejUnableEstablishChannel, rejNoResources, err}
	}
	old := slices.Clone(nx.channels)
	nx.channels = append(nx.channels, ch)
	ch.nx = nx
	p.mu.Unlock()
	if single {
		for _, o := range old {
			o.logoutFor(srp.TLogoutMultiChannel, endReinstated)
		}
	}
	return single && len(old) > 0, nil
}

// detach removes an ended channel from its nexus and closes the nexus's
// session with its last channel.
func (p *Port) detach(ch *channel) {
	p.mu.Lock()
	nx := ch.nx
	if nx == nil {
		p.mu.Unlock()
		return
	}
	nx.channels = slices.DeleteFunc(nx.channels, func(c *channel) bool { return c == ch })
	last := len(nx.channels) == 0
	if last && p.nexuses[nx.ipid] == nx {
		delete(p.nexuses, nx.ipid)
	}
	p.mu.Unlock()
	if last {
		if h := p.t.cfg.afterDetach; h != nil {
			h()
		}
		nx.sess.Close()
	}
}

// A login whose initiator port's previous nexus is closing its session
// waits for it, sessionRetries times sessionRetryDelay at most.
const (
	sessionRetries    = 100
	sessionRetryDelay = 10 * time.Millisecond
)

type errorString string

func (e errorString) Error() string { return string(e) }
