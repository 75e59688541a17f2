package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/auth"
	"github.com/rdisk/rdisk/rdma"
)

// Defaults of Config.
const (
	DefaultQueueDepth     = 128
	DefaultKATO           = 5 * time.Second // Linux NVME_DEFAULT_KATO
	DefaultMaxTransfer    = 1 << 20
	DefaultConnectTimeout = 10 * time.Second
	DefaultCommandTimeout = 30 * time.Second
	DefaultIOTimeout      = 30 * time.Second
	adminEntries          = nvmeof.AdminQueueDepth // 32: HSQSIZE 31, HRQSIZE 32, as Linux
	adminSlots            = adminEntries - 1       // 30 commands and the AER, as Linux
	adminMaxData          = 1 << 20
	maxIOQueues           = 128
)

// Config is what a host brings to a connection. HostNQN and HostID are
// required; the rest have defaults.
type Config struct {
	// HostNQN and HostID identify the host (the CLI reads them from
	// /etc/nvme/hostnqn and /etc/nvme/hostid).
	HostNQN string
	HostID  [16]byte
	// IOQueues is the number of I/O queues to ask for (default 1, at most
	// 128); the controller may grant fewer. Discovery controllers get none.
	IOQueues int
	// QueueDepth is the number of commands in flight per I/O queue
	// (default 128), capped by the controller's CAP.MQES+1 and MAXCMD.
	QueueDepth int
	// KATO is the keep alive timeout: the host sends Keep Alive every
	// KATO/2. 0 takes the default (5 s; none for discovery controllers),
	// negative disables it.
	KATO time.Duration
	// MaxTransfer caps the size of one Read or Write (default 1 MiB); the
	// controller's MDTS may lower it.
	MaxTransfer int
	// ConnectTimeout bounds connecting and enabling the controller
	// (default 10 s).
	ConnectTimeout time.Duration
	// CommandTimeout bounds each admin command (default 30 s). A command
	// that times out tears the controller down.
	CommandTimeout time.Duration
	// IOTimeout bounds each I/O command (default 30 s, as Linux
	// nvme_core.io_timeout). A command that times out fails the controller
	// (rdisk has no abort or reconnect): everything in flight completes with
	// an error.
	IOTimeout time.Duration
	// NoInCapsule sends all write data through keyed SGLs (RDMA) or
	// R2T-solicited H2CData PDUs (TCP), never in the command capsule.
	NoInCapsule bool
	// Transport selects the fabric: TransportRDMA (the zero value) or
	// TransportTCP. Open takes it from the URL instead.
	Transport Transport
	// HeaderDigest and DataDigest ask for NVMe/TCP header and data
	// digests (CRC32C; nvme-cli's --hdr-digest and --data-digest). The
	// controller must enable both as asked. They are refused on RDMA.
	HeaderDigest, DataDigest bool
	// DHCHAPSecret is the host's DH-HMAC-CHAP secret (nvme-cli's connect
	// --dhchap-secret). When a queue's Fabrics Connect result asks for
	// authentication (ATR), the host runs the exchange on that queue with
	// it; without it such a Connect fails with ErrAuthRequired. It is
	// unused when the controller does not ask.
	DHCHAPSecret *auth.Secret
	// DHCHAPCtrlSecret, with DHCHAPSecret, is the controller's secret
	// (--dhchap-ctrl-secret): the host then also authenticates the
	// controller (bidirectional authentication).
	DHCHAPCtrlSecret *auth.Secret
	// DHCHAPHashes and DHCHAPGroups restrict what the host offers, in
	// order of preference; nil offers everything, as Linux does (SHA-256,
	// -384, -512; the null group and ffdhe2048 to ffdhe8192).
	DHCHAPHashes []auth.HashID
	DHCHAPGroups []auth.DHGroupID
	// Logger receives connection events; nil discards them.
	Logger *slog.Logger
	// OnEvent, if set, is called for every asynchronous event, after the
	// host read the log page that clears it and, for a Namespace Attribute
	// Changed notice, refreshed the open Namespaces it names (see
	// Namespace.Refresh). It runs on a goroutine of the controller and may
	// issue admin commands.
	OnEvent func(Event)
}

func (cfg *Config) setDefaults(discovery bool) error {
	if err := CheckNQN(cfg.HostNQN); err != nil {
		return fmt.Errorf("host NQN: %w", err)
	}
	if cfg.IOQueues == 0 {
		cfg.IOQueues = 1
	}
	if cfg.IOQueues < 0 || cfg.IOQueues > maxIOQueues {
		return fmt.Errorf("%d I/O queues: want 1 to %d", cfg.IOQueues, maxIOQueues)
	}
	if discovery {
		cfg.IOQueues = 0
	}
	if cfg.QueueDepth == 0 {
		cfg.QueueDepth = DefaultQueueDepth
	}
	if cfg.QueueDepth < 2 || cfg.QueueDepth > 65536 {
		return fmt.Errorf("queue depth %d: want 2 to 65536", cfg.QueueDepth)
	}
	switch {
	case cfg.KATO == 0 && !discovery:
		cfg.KATO = DefaultKATO
	case cfg.KATO < 0:
		cfg.KATO = 0
	case cfg.KATO > 0 && cfg.KATO < time.Second:
		return fmt.Errorf("keep alive timeout %v: want at least 1s", cfg.KATO)
	}
	if cfg.MaxTransfer == 0 {
		cfg.MaxTransfer = DefaultMaxTransfer
	}
	if cfg.MaxTransfer < 4096 || cfg.MaxTransfer > nvmeof.MaxKeyedSGLLength {
		return fmt.Errorf("max transfer %d: want 4096 to %d bytes", cfg.MaxTransfer, nvmeof.MaxKeyedSGLLength)
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.CommandTimeout <= 0 {
		cfg.CommandTimeout = DefaultCommandTimeout
	}
	if cfg.IOTimeout <= 0 {
		cfg.IOTimeout = DefaultIOTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.checkAuth(); err != nil {
		return err
	}
	switch cfg.Transport = cfg.Transport.orDefault(); cfg.Transport {
	case TransportRDMA:
		if cfg.HeaderDigest || cfg.DataDigest {
			return fmt.Errorf("header and data digests are NVMe/TCP options; the RDMA transport has none")
		}
	case TransportTCP:
	default:
		return fmt.Errorf("transport %q: want %q or %q", string(cfg.Transport), TransportRDMA, TransportTCP)
	}
	return nil
}

// Event is an asynchronous event the controller reported.
type Event struct {
	nvmeof.AsyncEvent
	// Namespaces lists the namespaces a Namespace Attribute Changed notice
	// names (from the Changed Namespace List log); AllNamespaces is set
	// when more changed than the log holds.
	Namespaces    []uint32
	AllNamespaces bool
}

// Controller is a connection to one NVMe-oF controller: an admin queue and,
// unless it is a discovery controller, I/O queues. Its methods are safe for
// concurrent use.
type Controller struct {
	cfg       Config
	log       *slog.Logger
	prov      rdma.Provider
	pd        rdma.PD
	addr      string
	subNQN    string
	discovery bool

	cntlid      uint16
	cap         nvmeof.CAP
	vs          nvmeof.Version
	cc          nvmeof.CC
	id          nvmeof.IdentifyController
	admin       hostQueue
	io          []hostQueue // the I/O queues (see ioMu)
	ioDepth     int
	maxTransfer int
	inCapsule   int

	// ioMu guards io while Connect adds to it (setupIO), one queue at a
	// time: fail, which may run meanwhile (the controller failed during
	// setup), takes it to read io. Once Connect returned io never changes,
	// and the I/O path reads it without a lock.
	ioMu sync.Mutex

	failOnce sync.Once
	done     chan struct{}
	err      error
	closing  atomic.Bool

	closeOnce sync.Once
	bg        sync.WaitGroup
	stop      chan struct{}
	aen       chan uint32

	// The Namespaces opened and not closed, which events refresh.
	nsMu sync.Mutex
	open map[*Namespace]struct{}

	// ANA (ana.go): the log buffer size (0: ANA not used), the kick of
	// the worker that re-reads it, and the last log read, by NSID and by
	// group (guarded by anaMu, which serializes the reads).
	anaLogSize int
	anaKick    chan struct{}
	anaMu      sync.Mutex
	anaByNS    map[uint32]nvmeof.ANAState
	anaByGroup map[uint32]nvmeof.ANAState

	// DH-HMAC-CHAP: the transaction ID counter of the controller (Linux
	// ctrl->transaction), the S2 sequence numbers of its queues, and the
	// lock that keeps Reauthenticate calls apart.
	authTID atomic.Uint32
	authSeq auth.SeqCounter
	authMu  sync.Mutex
}

// Connect connects to the subsystem subNQN at addr ("host:port") over
// Config.Transport (RDMA through the provider p; p may be nil for TCP): it
// sets up the admin queue, enables the controller, checks its Identify data
// and, for an NVM subsystem, creates the I/O queues, posts an Asynchronous
// Event Request and starts the keep-alive. ctx bounds the whole setup (and
// Config.ConnectTimeout each step).
func Connect(ctx context.Context, p rdma.Provider, addr, subNQN string, cfg Config) (*Controller, error) {
	if err := CheckNQN(subNQN); err != nil {
		return nil, fmt.Errorf("subsystem NQN: %w", err)
	}
	disc := subNQN == nvmeof.DiscoveryNQN
	if err := cfg.setDefaults(disc); err != nil {
		return nil, err
	}
	if cfg.Transport == TransportRDMA && p == nil {
		return nil, fmt.Errorf("connecting to %s over RDMA: no RDMA provider", addr)
	}
	c := &Controller{
		cfg: cfg, log: cfg.Logger, prov: p, addr: addr, subNQN: subNQN, discovery: disc,
		done: make(chan struct{}), stop: make(chan struct{}), aen: make(chan uint32, 8),
	}
	if err := c.start(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Controller) start(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ConnectTimeout)
	defer cancel()
	var err error
	if c.cfg.Transport == TransportRDMA {
		if c.pd, err = c.prov.AllocPD(); err != nil {
			return fmt.Errorf("allocating a protection domain: %w", err)
		}
	}
	if c.admin, err = c.newQueue(0, adminSlots+1, adminEntries, adminMaxData, true); err != nil {
		return err
	}
	if err := c.admin.connect(ctx, c.addr); err != nil {
		return c.connectErr(0, err)
	}
	res, err := c.fabricsConnect(ctx, c.admin, nvmeof.CNTLIDDynamic)
	if err != nil {
		return err
	}
	c.cntlid = uint16(res)
	if err := c.connectAuth(ctx, c.admin, res); err != nil {
		return err
	}
	if err := c.enable(ctx); err != nil {
		return err
	}
	if c.id, err = c.IdentifyController(ctx); err != nil {
		return err
	}
	if err := c.checkIdentify(); err != nil {
		return err
	}
	c.log.Debug("nvme host: controller enabled", "addr", c.addr, "subnqn", c.subNQN, "cntlid", c.cntlid,
		"transport", c.cfg.Transport, "vs", c.vs, "mdts", c.id.MDTS, "ioccsz", c.id.IOCCSZ, "maxcmd", c.id.MAXCMD, "sgls", fmt.Sprintf("%#x", c.id.SGLS))
	if c.discovery {
		c.startKeepAlive()
		return nil
	}
	if err := c.setupIO(ctx); err != nil {
		return err
	}
	return nil
}

func (c *Controller) connectErr(qid uint16, err error) error {
	var re *RejectError
	if errors.As(err, &re) {
		return err
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("cannot connect to %s: connection refused (no NVMe-oF target listening there?)", c.addr)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("cannot connect to %s: no answer within %v", c.addr, c.cfg.ConnectTimeout)
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return fmt.Errorf("cannot connect to %s: %w", c.addr, errors.Unwrap(err))
	}
	return fmt.Errorf("connecting queue %d to %s: %w", qid, c.addr, err)
}

// newQueue creates a queue on the controller's transport: nslots command
// slots (the last one reserved for the AER when aer is set), SQ size
// entries and transfers of up to maxData bytes.
func (c *Controller) newQueue(qid uint16, nslots, entries, maxData int, aer bool) (hostQueue, error) {
	if c.cfg.Transport == TransportTCP {
		return newTCPQueue(c, qid, nslots, entries, aer), nil
	}
	return newRDMAQueue(c, qid, nslots, entries, maxData, aer)
}

// fabricsConnect sends the Fabrics Connect of q and returns DW0.
func (c *Controller) fabricsConnect(ctx context.Context, hq hostQueue, cntlid uint16) (uint32, error) {
	q := hq.base()
	data := make([]byte, nvmeof.ConnectDataSize)
	if err := nvmeof.ConnectData(data).Encode(&nvmeof.ConnectDataFields{HostID: c.cfg.HostID, CNTLID: cntlid, SubNQN: c.subNQN, HostNQN: c.cfg.HostNQN}); err != nil {
		return 0, fmt.Errorf("connect data: %w", err)
	}
	kato := uint32(0)
	if q.qid == 0 {
		kato = uint32(c.cfg.KATO / time.Millisecond)
	}
	res, err := hq.exec(ctx, "connect", data, nvmeof.DirHostToCtrl, func(sqe nvmeof.SQE, dptr nvmeof.SGLFields) {
		sqe.Connect().Encode(&nvmeof.ConnectFields{DPTR: dptr, RecFmt: 0, QID: q.qid, SQSize: uint16(q.entries - 1), KATO: kato})
	})
	if err != nil {
		var se *StatusError
		if errors.As(err, &se) {
			return 0, &ConnectError{QID: q.qid, SubNQN: c.subNQN, Status: se.Status, Result: uint32(res)}
		}
		return 0, fmt.Errorf("connect of queue %d: %w", q.qid, err)
	}
	return uint32(res), nil
}

// enable reads CAP and VS, writes CC with EN set and waits for CSTS.RDY.
func (c *Controller) enable(ctx context.Context) error {
	v, err := c.PropertyGet(ctx, nvmeof.PropCAP)
	if err != nil {
		return err
	}
	c.cap = nvmeof.CAP(v)
	if v, err = c.PropertyGet(ctx, nvmeof.PropVS); err != nil {
		return err
	}
	c.vs = nvmeof.Version(v)
	if c.cap.MPSMIN() > 0 {
		return fmt.Errorf("controller's smallest memory page is %d bytes; rdisk uses 4096", 4096<<c.cap.MPSMIN())
	}
	css := nvmeof.CCCSSNVM
	if c.cap.CSS()&nvmeof.CAPCSSNVM == 0 && c.cap.CSS()&nvmeof.CAPCSSIOCS != 0 {
		css = nvmeof.CCCSSCSI
	}
	c.cc = nvmeof.MakeCC(nvmeof.CCFields{EN: true, CSS: css, MPS: 0, AMS: 0, IOSQES: 6, IOCQES: 4})
	if err := c.PropertySet(ctx, nvmeof.PropCC, uint64(c.cc)); err != nil {
		return err
	}
	timeout := time.Duration(c.cap.TO()+1) * 500 * time.Millisecond
	deadline := time.Now().Add(timeout)
	for delay := time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		v, err := c.PropertyGet(ctx, nvmeof.PropCSTS)
		if err != nil {
			return err
		}
		csts := nvmeof.CSTS(v)
		if csts.CFS() {
			return fmt.Errorf("controller reports a fatal status (CSTS %#x) while enabling", uint32(csts))
		}
		if csts.RDY() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("controller not ready %v after enabling (CAP.TO %d): %w", timeout, c.cap.TO(), ErrTimeout)
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return fmt.Errorf("waiting for the controller to become ready: %w", ctx.Err())
		}
	}
}

// checkIdentify applies the checks the Linux NVMe/RDMA or NVMe/TCP host
// makes.
func (c *Controller) checkIdentify() error {
	id := &c.id
	if c.cfg.Transport == TransportTCP {
		return c.checkIdentifyTCP()
	}
	if c.discovery {
		// Linux skips the I/O capsule and keep-alive checks for discovery
		// controllers (nvme_check_ctrl_fabric_info), which report no
		// IOCCSZ/IORCSZ (nvmet_execute_disc_identify).
		switch {
		case id.CNTLID != c.cntlid:
			return fmt.Errorf("identify controller: CNTLID %d, Connect returned %d", id.CNTLID, c.cntlid)
		case id.CNTRLTYPE != 0 && id.CNTRLTYPE != nvmeof.ControllerTypeDiscovery:
			return fmt.Errorf("subsystem %s is not a discovery controller (CNTRLTYPE %d)", c.subNQN, id.CNTRLTYPE)
		case id.ICDOFF != 0:
			return fmt.Errorf("identify controller: ICDOFF %d, the RDMA host needs 0", id.ICDOFF)
		case id.SGLS&nvmeof.SGLSKeyed == 0:
			return fmt.Errorf("identify controller: keyed SGL data blocks not supported (SGLS %#x)", id.SGLS)
		}
		return nil
	}
	if err := id.CheckRDMAHost(c.cntlid, false); err != nil {
		return fmt.Errorf("controller of %s unusable: %w", c.subNQN, err)
	}
	if id.CNTRLTYPE == nvmeof.ControllerTypeDiscovery {
		return fmt.Errorf("subsystem %s is a discovery controller", c.subNQN)
	}
	return nil
}

// setupIO sizes the I/O queues from CAP, Identify and Number of Queues,
// enables events and keep-alive and connects the I/O queues.
func (c *Controller) setupIO(ctx context.Context) error {
	id := &c.id
	c.maxTransfer = c.cfg.MaxTransfer
	if id.MDTS != 0 && id.MDTS < 30 {
		c.maxTransfer = min(c.maxTransfer, 4096<<id.MDTS)
	}
	c.maxTransfer -= c.maxTransfer % 4096
	c.ioDepth = min(c.cfg.QueueDepth, int(c.cap.MQES())+1)
	if id.MAXCMD != 0 {
		c.ioDepth = min(c.ioDepth, int(id.MAXCMD))
	}
	if c.ioDepth < 2 {
		return fmt.Errorf("controller allows %d commands per queue (MQES %d, MAXCMD %d)", c.ioDepth, c.cap.MQES(), id.MAXCMD)
	}
	c.inCapsule = c.ioInCapsule()
	want := uint16(c.cfg.IOQueues - 1)
	res, err := c.SetFeatures(ctx, nvmeof.FeatNumQueues, 0, nvmeof.NumQueuesValue(want, want))
	if err != nil {
		return fmt.Errorf("setting the number of queues: %w", err)
	}
	nsq, ncq := nvmeof.ParseNumQueues(res)
	n := min(c.cfg.IOQueues, int(nsq)+1, int(ncq)+1)
	if n < c.cfg.IOQueues {
		c.log.Info("nvme host: controller granted fewer I/O queues", "asked", c.cfg.IOQueues, "granted", n)
	}
	if aens := id.OAES & (nvmeof.AENConfigNSAttr | nvmeof.AENConfigFWActivation | nvmeof.AENConfigANAChange | nvmeof.AENConfigDiscoveryChange); aens != 0 {
		if _, err := c.SetFeatures(ctx, nvmeof.FeatAsyncEventConfig, 0, aens); err != nil {
			c.log.Warn("nvme host: enabling asynchronous events failed", "err", err)
		}
	}
	c.initANA()
	c.bg.Add(1)
	go c.aenWorker()
	if err := c.postAER(); err != nil {
		return err
	}
	c.startKeepAlive()
	if c.usesANA() {
		if _, err := c.readANA(ctx); err != nil {
			c.log.Warn("nvme host: reading the ANA log at connect failed", "subnqn", c.subNQN, "err", err)
			c.kickANA()
		}
		c.bg.Add(1)
		go c.anaWorker()
	}
	for i := 1; i <= n; i++ {
		q, err := c.newQueue(uint16(i), c.ioDepth, c.ioDepth, c.maxTransfer, false)
		if err != nil {
			return err
		}
		q.base().inCapsule = c.inCapsule
		if err := c.addIO(q); err != nil {
			return fmt.Errorf("connecting queue %d to %s: the controller failed: %w", i, c.addr, err)
		}
		if err := q.connect(ctx, c.addr); err != nil {
			return c.connectErr(uint16(i), err)
		}
		res, err := c.fabricsConnect(ctx, q, c.cntlid)
		if err != nil {
			return err
		}
		if err := c.connectAuth(ctx, q, res); err != nil {
			return err
		}
	}
	c.bg.Add(1)
	go c.watchdog()
	c.log.Debug("nvme host: I/O queues connected", "queues", n, "depth", c.ioDepth, "max_transfer", c.maxTransfer, "in_capsule", c.inCapsule)
	return nil
}

// addIO adds q to the I/O queues (Close frees it with them), unless the
// controller failed meanwhile: then it returns why, and q is not connected.
// Under ioMu, fail either sees q and fails it too (its connect or Fabrics
// Connect then fails at once) or had closed done before.
func (c *Controller) addIO(q hostQueue) error {
	c.ioMu.Lock()
	defer c.ioMu.Unlock()
	c.io = append(c.io, q)
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

func (c *Controller) startKeepAlive() {
	if c.cfg.KATO <= 0 {
		return
	}
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		t := time.NewTicker(c.cfg.KATO / 2)
		defer t.Stop()
		for {
			select {
			case <-t.C:
			case <-c.stop:
				return
			case <-c.done:
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.KATO)
			err := c.KeepAlive(ctx)
			cancel()
			if err != nil {
				if !c.closing.Load() {
					c.fail(fmt.Errorf("keep alive: %w", err))
				}
				return
			}
		}
	}()
}

// watchdog fails the controller when an I/O command is overdue.
func (c *Controller) watchdog() {
	defer c.bg.Done()
	tick := min(c.cfg.IOTimeout/4, time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-c.stop:
			return
		case <-c.done:
			return
		}
		now := time.Now().UnixNano()
		for _, q := range c.io {
			if cid, ok := q.overdue(now, c.cfg.IOTimeout); ok {
				c.fail(fmt.Errorf("command %d on queue %d got no completion in %v: %w", cid, q.base().qid, c.cfg.IOTimeout, ErrTimeout))
				return
			}
		}
	}
}

// queueFailed is called (once per queue) when a queue dies for a reason
// other than Close: the controller is unusable then.
func (c *Controller) queueFailed(q hostQueue, err error) {
	if c.closing.Load() {
		return
	}
	go c.fail(fmt.Errorf("queue %d: %w", q.base().qid, err))
}

// fail marks the controller failed and fails all its queues.
func (c *Controller) fail(err error) {
	c.failOnce.Do(func() {
		c.err = err
		close(c.done)
		if !c.closing.Load() {
			c.log.Warn("nvme host: controller failed", "addr", c.addr, "subnqn", c.subNQN, "err", err)
		}
		if c.admin != nil {
			c.admin.fail(err)
		}
		// Connect may be adding I/O queues: those it adds after this
		// see done closed (addIO).
		c.ioMu.Lock()
		io := c.io
		c.ioMu.Unlock()
		for _, q := range io {
			q.fail(err)
		}
	})
}

// Done is closed when the controller failed or was closed.
func (c *Controller) Done() <-chan struct{} { return c.done }

// Err tells why the controller stopped (nil while it works).
func (c *Controller) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Close shuts the controller down (CC.SHN, when it still answers) and
// disconnects. Requests in flight fail with blockdev.ErrClosed.
func (c *Controller) Close() error {
	c.closeOnce.Do(func() {
		c.closing.Store(true)
		close(c.stop)
		for _, q := range c.io {
			q.close()
		}
		if c.admin != nil {
			if c.Err() == nil && c.cc.EN() {
				c.shutdown()
			}
			c.admin.close()
		}
		c.fail(errClosed)
		c.bg.Wait()
		if c.pd != nil {
			c.pd.Close()
		}
	})
	return nil
}

const errClosed = errorString("nvme host: controller closed")

// shutdown asks for a normal shutdown and waits up to 5 s for it.
func (c *Controller) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cc := c.cc&^(3<<14) | nvmeof.CC(nvmeof.CCShutdownNormal)<<14
	if err := c.PropertySet(ctx, nvmeof.PropCC, uint64(cc)); err != nil {
		c.log.Debug("nvme host: shutdown notification failed", "err", err)
		return
	}
	for delay := time.Millisecond; ctx.Err() == nil; delay = min(2*delay, 50*time.Millisecond) {
		v, err := c.PropertyGet(ctx, nvmeof.PropCSTS)
		if err != nil {
			return
		}
		if nvmeof.CSTS(v).SHST() == nvmeof.ShutdownStatusComplete {
			return
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
		}
	}
	c.log.Debug("nvme host: shutdown did not complete in 5s")
}

// CNTLID is the controller ID the Connect returned.
func (c *Controller) CNTLID() uint16 { return c.cntlid }

// Identify returns the Identify Controller data read at connect.
func (c *Controller) Identify() nvmeof.IdentifyController { return c.id }

// CAP returns the Controller Capabilities property.
func (c *Controller) CAP() nvmeof.CAP { return c.cap }

// Version returns the Version property.
func (c *Controller) Version() nvmeof.Version { return c.vs }

// SubNQN returns the subsystem NQN.
func (c *Controller) SubNQN() string { return c.subNQN }

// Addr returns the address connected to.
func (c *Controller) Addr() string { return c.addr }

// IOQueues returns the number of I/O queues and their depth.
func (c *Controller) IOQueues() (n, depth int) { return len(c.io), c.ioDepth }

// MaxTransfer is the largest Read or Write, in bytes.
func (c *Controller) MaxTransfer() int { return c.maxTransfer }

// InCapsuleSize is the most write data sent in a command capsule (0 when
// the controller does not take in-capsule data).
func (c *Controller) InCapsuleSize() int { return c.inCapsule }

// Transport returns the transport the controller is connected over.
func (c *Controller) Transport() Transport { return c.cfg.Transport }

// ioInCapsule is the most write data an I/O command carries in its
// capsule: IOCCSZ*16-64 (RDMA: when the controller takes SGL offsets, as
// nvme-rdma; TCP: always, as nvme-tcp's nvme_tcp_inline_data_size).
func (c *Controller) ioInCapsule() int {
	id := &c.id
	if c.cfg.NoInCapsule || id.IOCCSZ*16 <= nvmeof.SQESize {
		return 0
	}
	if c.cfg.Transport == TransportRDMA && id.SGLS&nvmeof.SGLSOffset == 0 {
		return 0
	}
	return int(min(id.IOCCSZ*16-nvmeof.SQESize, 1<<20))
}
