package target

import (
	"fmt"
	"sync"
	"time"

	"github.com/rdisk/rdisk/nvmeof"
)

const (
	maxAERs      = 4   // AERL+1, as nvmet and SPDK
	errLogSlots  = 128 // ELPE+1
	kasUnit      = 100 * time.Millisecond
	kas          = 10 // KAS in 100 ms units: 1 s granularity
	maxChangedNS = 1024
)

// controller is one host's association with a subsystem (or the discovery
// service): the admin queue plus its I/O queues.
type controller struct {
	t       *Target
	sub     *Subsystem
	port    *Port
	disc    bool
	trType  uint8 // the transport of its queues (nvmeof.TrType*)
	cntlid  uint16
	hostNQN string
	hostID  [16]byte
	maxQ    int // I/O queues this controller may have
	// connected is when the admin queue connected, remote its peer.
	connected time.Time
	remote    string

	mu        sync.Mutex
	cc        nvmeof.CC
	csts      nvmeof.CSTS
	kato      time.Duration
	kaTimer   *time.Timer
	lastSeen  time.Time
	grantedQ  int
	aenCfg    uint32
	aers      []*aerSlot
	events    []uint32 // pending event DW0s, delivered to the next AER
	masked    map[uint8]bool
	changedNS []uint32
	changedOv bool
	wce       bool
	features  map[uint8]uint32
	tsBase    time.Time
	tsMillis  uint64
	tsSet     bool
	errLog    [errLogSlots]nvmeof.ErrorLogEntry
	errCount  uint64
	errNext   int
	queues    map[uint16]*sq
	live      bool // its Connect succeeded (Target.Controllers lists it)
	dead      bool
	reason    string // why it was torn down (once dead)
	// quiesced: the target drains (Target.Drain); the controller's I/O
	// queues take no new command.
	quiesced bool
	// retired sums the counters of the I/O queues that ended.
	retired struct{ commands, readBytes, writeBytes uint64 }
}

type aerSlot struct {
	q *sq
	r *request
}

// traffic restarts the keep-alive timer (traffic based keep alive, TBKAS).
func (c *controller) traffic() {
	c.mu.Lock()
	c.lastSeen = time.Now()
	c.mu.Unlock()
}

// admit takes a command received on q: it is traffic (TBKAS), and an I/O
// command (io) counts in q.admitted. It refuses (ok false) every command
// once the controller is torn down (its queues' connections are ending)
// and I/O commands while the target drains. ready is CSTS.RDY. One lock
// per command, which traffic and ready each took before.
func (c *controller) admit(q *sq, io bool) (ready, ok bool) {
	c.mu.Lock()
	if c.dead || io && c.quiesced {
		c.mu.Unlock()
		return false, false
	}
	c.lastSeen = time.Now()
	if io {
		q.admitted++
	}
	ready = c.csts.RDY()
	c.mu.Unlock()
	return ready, true
}

// quiesce makes c's I/O queues drop the commands they receive from now on
// (Target.Drain).
func (c *controller) quiesce() {
	c.mu.Lock()
	c.quiesced = true
	c.mu.Unlock()
}

// inFlight returns the I/O commands c's queues began and did not
// complete.
func (c *controller) inFlight() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for qid, q := range c.queues {
		if qid != 0 {
			n += int64(q.admitted - q.stats.commands.Load())
		}
	}
	return n
}

// armKeepAliveLocked (re)starts keep-alive enforcement for kato (0 disables it).
// Caller holds mu.
func (c *controller) armKeepAliveLocked() {
	if c.kaTimer != nil {
		c.kaTimer.Stop()
		c.kaTimer = nil
	}
	if c.kato <= 0 {
		return
	}
	c.lastSeen = time.Now()
	c.kaTimer = time.AfterFunc(c.kato, c.checkKeepAlive)
}

func (c *controller) checkKeepAlive() {
	c.mu.Lock()
	if c.dead || c.kato <= 0 {
		c.mu.Unlock()
		return
	}
	idle := time.Since(c.lastSeen)
	if idle < c.kato {
		c.kaTimer = time.AfterFunc(c.kato-idle, c.checkKeepAlive)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	if c.teardown(reasonKeepAlive, nil) {
		c.t.stats.kaExpired.Add(1)
	}
}

// teardown disconnects every queue and frees the controller ID, for
// reason (see reasonKeepAlive...) and err, its detail if any. It reports
// whether it did: false when the controller was torn down already.
func (c *controller) teardown(reason string, err error) bool { return c.end(reason, err, false) }

// end is teardown; finish: the controller has no command in flight, its
// queues end once their responses are sent (transport.finish).
func (c *controller) end(reason string, err error, finish bool) bool {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return false
	}
	c.dead, c.reason = true, reason
	if c.kaTimer != nil {
		c.kaTimer.Stop()
	}
	qs := make([]*sq, 0, len(c.queues))
	for _, q := range c.queues {
		qs = append(qs, q)
	}
	live, kato, ioq := c.live, c.kato, c.grantedQ
	c.mu.Unlock()
	c.sub.freeController(c.cntlid, c)
	if c.disc {
		c.t.mu.Lock()
		delete(c.t.disc, c)
		c.t.mu.Unlock()
	}
	for _, q := range qs {
		if finish {
			q.tr.finish()
		} else {
			q.tr.disconnect()
		}
	}
	attrs := c.logAttrs("reason", reason)
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	attrs = append(attrs, "kato", kato, "io_queues", ioq)
	if !live {
		// Its Connect had not succeeded: it never was a controller to
		// the host (nor in Stats).
		c.t.log.Debug("nvmeof: controller removed before its Connect completed", attrs...)
		return true
	}
	c.t.log.Info("nvmeof: controller removed", attrs...)
	c.t.stats.removed.Add(1) // after the line: a reader of the count finds it
	return true
}

// logAttrs are the log attributes naming c, then extra.
func (c *controller) logAttrs(extra ...any) []any {
	var port any
	if c.port != nil {
		port = c.port.cfg.ID
	}
	return append([]any{"port", port, "transport", trName(c.trType), "peer", c.remote, "subsystem", c.sub.cfg.NQN,
		"host", c.hostNQN, "cntlid", c.cntlid}, extra...)
}

// queueGone is called when a queue's connection ended, for reason and err
// (Port.endReason); the end of the admin queue tears the controller
// down, a host shutdown when the host had set CC.SHN. It returns why the
// queue ended: reason, or the controller's teardown's when the queue ended
// for it.
func (c *controller) queueGone(q *sq, reason string, err error) (string, error) {
	c.mu.Lock()
	if c.dead {
		reason, err = c.reason, nil
	}
	if c.queues[q.qid] == q {
		delete(c.queues, q.qid)
		c.retired.commands += q.stats.commands.Load()
		c.retired.readBytes += q.stats.readBytes.Load()
		c.retired.writeBytes += q.stats.writeBytes.Load()
	}
	shutdown := c.cc.Fields().SHN != nvmeof.CCShutdownNone
	c.mu.Unlock()
	if shutdown && (reason == reasonHostDisconnect || reason == reasonTransportError) {
		reason, err = reasonHostShutdown, nil
	}
	if q.qid == 0 {
		c.teardown(reason, err)
	}
	return reason, err
}

// logError records a failed command in the Error Information log.
func (c *controller) logError(qid, cid uint16, st nvmeof.Status, loc uint16, lba uint64, nsid uint32, trType uint8) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errCount++
	c.errLog[c.errNext] = nvmeof.ErrorLogEntry{ErrorCount: c.errCount, SQID: qid, CID: cid, Status: st,
		ParamErrorLocation: loc, LBA: lba, NSID: nsid, TrType: trType}
	c.errNext = (c.errNext + 1) % errLogSlots
}

// event queues an asynchronous event and completes a parked AER if any.
func (c *controller) event(typ, info, logPage uint8) {
	dw0 := nvmeof.AsyncEvent{Type: typ, Info: info, LogPage: logPage}.Value()
	c.mu.Lock()
	if c.dead || c.masked[info] {
		c.mu.Unlock()
		return
	}
	// One outstanding event per kind until the host reads the log page.
	if c.masked == nil {
		c.masked = map[uint8]bool{}
	}
	c.masked[info] = true
	c.events = append(c.events, dw0)
	c.deliverLocked()
}

// deliverLocked completes parked AERs with pending events; it unlocks mu.
func (c *controller) deliverLocked() {
	var done []aerSlot
	for len(c.events) > 0 && len(c.aers) > 0 {
		a := c.aers[0]
		c.aers = c.aers[1:]
		a.r.result = uint64(c.events[0])
		c.events = c.events[1:]
		done = append(done, *a)
	}
	c.mu.Unlock()
	for _, a := range done {
		a.r.status = nvmeof.StatusSuccess
		if err := a.q.respond(a.r); err != nil {
			a.q.shutdown(reasonTransportError, fmt.Errorf("completing an AER: %w", err))
		}
	}
}

// namespaceChanged records a namespace change and raises the AEN.
func (c *controller) namespaceChanged(nsid uint32) {
	c.mu.Lock()
	if len(c.changedNS) >= maxChangedNS {
		c.changedOv = true
	} else {
		found := false
		for _, id := range c.changedNS {
			found = found || id == nsid
		}
		if !found {
			c.changedNS = append(c.changedNS, nsid)
		}
	}
	enabled := c.aenCfg&nvmeof.AENConfigNSAttr != 0
	c.mu.Unlock()
	if enabled {
		c.event(nvmeof.AsyncEventNotice, nvmeof.NoticeNSChanged, nvmeof.LogChangedNS)
	}
}

func (c *controller) discoveryChanged() {
	c.mu.Lock()
	enabled := c.aenCfg&nvmeof.AENConfigDiscoveryChange != 0
	c.mu.Unlock()
	if enabled {
		c.event(nvmeof.AsyncEventNotice, nvmeof.NoticeDiscoveryChanged, nvmeof.LogDiscovery)
	}
}

// unmask re-arms an event kind once the host read its log page.
func (c *controller) unmask(info uint8) {
	c.mu.Lock()
	delete(c.masked, info)
	c.mu.Unlock()
}
