package target

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/internal/workers"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/auth"
)

// The controller core: submission queues, command dispatch, disk workers
// and completion, whatever the transport. A transport binding (rdma.go)
// receives capsules, puts each command's host data in place and calls
// sq.run; the core executes the command and answers through the binding's
// respond, as Linux nvmet's core does through a transport's queue_response.

const (
	// mdtsShift: MDTS is 2^5 pages of 4 KiB, 128 KiB, as SPDK advertises.
	mdtsShift = 5
	mdts      = 4096 << mdtsShift
	// maxDataSGE bounds the pieces of a read sent straight from a RAM disk
	// (an MDTS transfer over 64 KiB chunks touches at most 3).
	maxDataSGE = 4
	// offDPTR is the byte offset of the data pointer in an SQE, for error
	// locations.
	offDPTR = 24
)

// transport is a transport binding's side of one queue.
type transport interface {
	// respond sends the completion of r (and, for a read, its data first).
	// It is called once per command, from any goroutine.
	respond(r *request) error
	// release gives the command buffer of r back to the host before a
	// command that stays outstanding for long (an Asynchronous Event
	// Request), so the host's queue does not shrink while it waits.
	release(r *request) error
	// buffer returns r's data buffer, at least mdts bytes (Write Zeroes
	// writes zeroes from it when the disk cannot).
	buffer(r *request) ([]byte, error)
	// disconnect ends the queue's connection.
	disconnect()
	// finish ends the queue's connection once the responses handed to
	// respond are sent, when no command is in flight (Target.Drain).
	finish()
	// trType is the transport type for log pages (nvmeof.TrTypeRDMA...).
	trType() uint8
}

// reqState is where a request is in its life.
type reqState uint8

const (
	reqFree      reqState = iota
	reqFetching           // the transport is collecting host data
	reqParked             // an Asynchronous Event Request waiting for an event
	reqResponded          // completion handed to the transport
	reqDropped            // not run, not answered: the target drains (Target.Drain)
)

func (s reqState) String() string {
	return [...]string{"free", "fetching", "parked", "responded", "dropped"}[s]
}

// request is one command in the core. The transport owns its storage (one
// per slot) and sets xfer, xferLen and views before run; the core fills
// the outcome. A request belongs to one goroutine at a time: the queue's,
// a worker's, or (parked) the one completing it.
type request struct {
	// id is the transport's slot of the request.
	id    int
	state reqState
	sqe   [nvmeof.SQESize]byte
	kind  nvmeof.CommandKind

	// Data transfer.
	dir     nvmeof.Direction
	xferLen int    // bytes the data pointer describes
	xfer    []byte // host data (in place), or the buffer for data to return
	outLen  int    // bytes of xfer to return to the host
	// views: the transport can send read data straight from disk memory
	// (segs), without copying it into xfer.
	views bool
	nseg  int
	segs  [maxDataSGE][]byte
	// A placed write (sq.placeWrite): its data is fetched straight into
	// the memory of placer, a RAM disk (segs[:nseg]), and io finishes the
	// write with Placed instead of copying it with WriteAt; place is the
	// disk's record of it. Set from before the fetch until io finishes
	// the write or unplace gives it up.
	placer backstore.Placer
	place  backstore.Placement

	status nvmeof.Status
	result uint64
	errLoc uint16
	sqhd   uint16
	nsid   uint32
	lba    uint64
	// ns is the namespace of an I/O command, found when it begins (as
	// nvmet_req_find_ns does): the command counts in its in-flight
	// commands until its completion is sent.
	ns *Namespace
	// nsIn is the stripe of ns's in-flight count the command counts in
	// (its queue's).
	nsIn *atomic.Int64
	// admitted: an I/O command its controller admitted (sq.admitted),
	// which respond counts in the queue's stats.
	admitted bool
	// ioLen is the bytes a Read or Write moves (for the queue's
	// counters; 0 for other commands).
	ioLen int

	// onWorker: the command runs on a worker (may block); wantWorker: it
	// ran inline, found it must block (an uncached read) and asks for one.
	onWorker, wantWorker bool

	// A command on a backstore.AsyncDisk (async.go): io fills aio and
	// sets aioStart, and run starts it on the disk; aioBufs is its
	// buffer list, dsmNext the next Dataset Management range to discard.
	// noAsync runs the command's synchronous path instead (a Write
	// Zeroes the disk cannot start).
	aio      backstore.AsyncIO
	aioBufs  [1][]byte
	aioStart bool
	noAsync  bool
	dsmNext  int
	// batch is the disk's completion batch (AsyncIO.Batch) from the end
	// of the command's operation to its respond, which clears it.
	batch *backstore.Batch
}

// encodeCQE writes r's completion queue entry for queue qid into b.
func (r *request) encodeCQE(b []byte, qid uint16) {
	nvmeof.CQE(b).Encode(&nvmeof.CQEFields{Result: r.result, SQHead: r.sqhd, SQID: qid, CID: nvmeof.SQE(r.sqe[:]).CID(), Status: r.status})
}

// done forgets what the request pointed to once its completion was sent.
func (r *request) done() {
	r.state = reqFree
	clear(r.segs[:r.nseg]) // do not keep discarded RAM disk chunks alive
	r.nseg = 0
	r.xfer = nil
}

func (r *request) fail(ce *nvmeof.CommandError) {
	r.status, r.errLoc = ce.Status, ce.Loc
}

// sq is one NVMe submission/completion queue pair in the core: admin (qid
// 0) or I/O, bound to its controller by Fabrics Connect.
type sq struct {
	t     *Target
	port  *Port
	qid   uint16
	depth int // commands the host may have outstanding (receive buffers)
	tr    transport
	// remote is the peer's address (set by the binding before the queue
	// runs).
	remote string
	// entries is the queue size the host's Connect asked for (SQSIZE+1),
	// set before the queue joins its controller.
	entries int
	// pool runs commands on disks that may wait (started on first use).
	pool *workers.Pool[*request]
	// async counts the commands started on asynchronous disks and not
	// yet answered: close waits for them.
	async sync.WaitGroup
	// stripe is the stripe of the namespaces' in-flight counts the
	// queue's commands count in (nsStats).
	stripe uint8

	ctrlMu sync.Mutex
	ctrl   *controller // set by Fabrics Connect
	sqhd   uint16      // queue goroutine only
	sqflow bool        // SQ flow control disabled (Connect CATTR)
	// auth is the queue's DH-HMAC-CHAP state when its host must
	// authenticate (queue goroutine only: Fabrics commands run there).
	auth       *auth.Controller
	authWarned bool        // the missing authentication was logged
	authOK     atomic.Bool // auth.Authenticated(), for Target.Controllers

	closeOnce sync.Once

	// stats count the queue's I/O commands for Target.Controllers.
	stats queueStats
	// admitted counts the I/O commands begun since the queue joined its
	// controller (guarded by the controller's mu): those of them not
	// yet answered (respond counts them in stats.commands) are in flight
	// (Target.Drain).
	admitted uint64
}

// queueStats are an I/O queue's counters: added to by whichever goroutine
// completes a command of the queue (its own or one of its workers), read
// with atomics by Target.Controllers. They sit on a cache line of their own
// so that their writes do not disturb the queue's other fields.
type queueStats struct {
	_          [64]byte
	commands   atomic.Uint64 // I/O commands answered, whatever their status, since the queue joined its controller
	readBytes  atomic.Uint64 // data of successful Reads
	writeBytes atomic.Uint64 // data of successful Writes
	_          [64 - 24]byte
}

// newSQ returns the core of queue qid with depth receive buffers and up to
// slots requests in flight.
func newSQ(p *Port, qid uint16, depth, slots int, tr transport) *sq {
	q := &sq{t: p.t, port: p, qid: qid, depth: depth, tr: tr, stripe: uint8(p.t.stripes.Add(1) % nsStripes)}
	var hook func(int)
	if qid != 0 {
		// Workers sit in blocking system calls: the queue needs a second P
		// so its own goroutines are not stuck behind them until the
		// runtime hands the P off.
		hook = p.t.hook
	}
	q.pool = workers.New(p.t.workers, slots, q.onWorker, hook)
	return q
}

// received counts a capsule taken from the submission queue (the SQ head
// the completions report). Called by the transport on the queue goroutine.
func (q *sq) received() {
	q.sqhd++
	if int(q.sqhd) >= q.depth {
		q.sqhd = 0
	}
}

// begin resets r for the command in r.sqe and checks it against the queue
// and controller state; the transport then puts its data in place and
// calls run. When begin returns false, r carries an error status: the
// transport responds at once; or, state reqDropped, r is an I/O command
// received while the target drains: the transport forgets it, unanswered
// (the host sends it again once reconnected, as it does every command its
// controller's end left unanswered).
func (q *sq) begin(r *request) bool {
	r.status, r.result, r.errLoc, r.outLen = nvmeof.StatusSuccess, 0, nvmeof.ParamErrorLocationNone, 0
	r.xfer, r.xferLen, r.views, r.dir, r.nsid, r.lba, r.nseg = nil, 0, false, nvmeof.DirNone, 0, 0, 0
	r.onWorker, r.wantWorker, r.ioLen, r.ns, r.nsIn, r.admitted = false, false, 0, nil, nil, false
	r.aioStart, r.noAsync = false, false
	r.unplace() // never set here: a placement ends with its command
	r.sqhd = q.sqhd
	if q.sqflow {
		r.sqhd = nvmeof.SQHeadDisabled
	}
	r.state = reqResponded
	c := q.controller()
	ready := false
	if c != nil {
		io := q.qid != 0 && !nvmeof.SQE(r.sqe[:]).IsFabrics()
		var ok bool
		if ready, ok = c.admit(q, io); !ok {
			r.state = reqDropped
			return false
		}
		r.admitted = io
	}
	sqe, kind, err := nvmeof.ParseCommand(r.sqe[:], q.qid == 0)
	if err != nil {
		var ce *nvmeof.CommandError
		if !errors.As(err, &ce) {
			ce = &nvmeof.CommandError{Status: nvmeof.StatusInvalidOpcode.WithDNR(), Loc: nvmeof.OffsetOpcode, Err: err}
		}
		r.fail(ce)
		return false
	}
	r.kind = kind
	r.nsid = sqe.NSID()
	if c != nil && !isFabrics(kind) && q.auth != nil && !q.auth.Authenticated() {
		// nvmet_check_auth_status, before the controller's state.
		if !q.authWarned {
			q.authWarned = true
			q.t.log.Warn("nvmeof: host has not authenticated (DH-HMAC-CHAP): refusing its commands with Authentication Required", q.logAttrs()...)
		}
		r.status = nvmeof.StatusAuthRequired.WithDNR()
		return false
	}
	switch {
	case c != nil && kind == nvmeof.KindConnect:
		q.refuseConnect(connInvalidState, c.sub.cfg.NQN, c.hostNQN, errors.New("the queue is connected already"))
		fallthrough
	case c == nil && kind != nvmeof.KindConnect,
		c != nil && !isFabrics(kind) && !ready:
		r.status = nvmeof.StatusCommandSequenceError.WithDNR()
		return false
	}
	if q.qid != 0 && !isFabrics(kind) {
		// c is set: an I/O command without a controller failed above.
		if n := c.sub.namespace(r.nsid); n != nil {
			r.ns, r.nsIn = n, &n.st.inflight[q.stripe].n
			r.nsIn.Add(1)
			// nvmet_check_ana_state: the group's state on this port, before
			// any data moves.
			if st := q.port.anaState(n.cfg.ANAGroupID); !st.Usable() {
				r.status, r.errLoc = st.IOStatus(), nvmeof.OffsetNSID
				return false
			}
		}
	}
	r.dir = sqe.Direction()
	return true
}

// checkLength checks the data pointer's length n against MDTS, setting an
// error status when it is too long.
func (r *request) checkLength(n uint32) bool {
	if n > mdts {
		r.status, r.errLoc = nvmeof.StatusInvalidField.WithDNR(), offDPTR
		return false
	}
	return true
}

// run executes a command whose host data is in place and responds: on a
// worker when it may wait for a device (offload), else here, moving to a
// worker if it finds it must wait after all (an uncached read). An
// Asynchronous Event Request is parked until an event.
func (q *sq) run(r *request) error {
	if r.kind == nvmeof.KindAsyncEventRequest && q.qid == 0 {
		if err := q.tr.release(r); err != nil {
			return err
		}
		return q.controller().parkAER(q, r)
	}
	if q.offload(r) {
		return nil
	}
	q.execute(r)
	if r.aioStart {
		return q.startAsync(r)
	}
	if r.wantWorker {
		q.toWorker(r)
		return nil
	}
	return q.respond(r)
}

// respond records a failed command in the error log and hands the
// completion to the transport. Safe from any goroutine.
func (q *sq) respond(r *request) error {
	if r.status != nvmeof.StatusSuccess {
		if c := q.controller(); c != nil {
			c.logError(q.qid, nvmeof.SQE(r.sqe[:]).CID(), r.status, r.errLoc, r.lba, r.nsid, q.tr.trType())
		}
		if r.ns != nil {
			r.ns.st.errors[r.status.SCT()].Add(1)
		}
	}
	if r.admitted {
		q.stats.commands.Add(1)
		if r.ioLen > 0 && r.status == nvmeof.StatusSuccess {
			switch r.kind {
			case nvmeof.KindRead:
				q.stats.readBytes.Add(uint64(r.ioLen))
			case nvmeof.KindWrite:
				q.stats.writeBytes.Add(uint64(r.ioLen))
			}
		}
	}
	r.unplace()
	r.state = reqResponded
	return q.tr.respond(r)
}

func isFabrics(k nvmeof.CommandKind) bool {
	switch k {
	case nvmeof.KindConnect, nvmeof.KindPropertyGet, nvmeof.KindPropertySet, nvmeof.KindDisconnect,
		nvmeof.KindAuthSend, nvmeof.KindAuthReceive:
		return true
	}
	return false
}

func (q *sq) controller() *controller {
	q.ctrlMu.Lock()
	defer q.ctrlMu.Unlock()
	return q.ctrl
}

// execute runs a command whose host data (if any) is in r.xfer.
func (q *sq) execute(r *request) {
	sqe := nvmeof.SQE(r.sqe[:])
	switch {
	case isFabrics(r.kind):
		q.fabrics(r, sqe)
	case q.qid == 0:
		q.controller().admin(r, sqe)
	default:
		q.controller().io(q, r, sqe)
	}
}

// offload hands r to the queue's workers when its command may wait for a
// device (see mayBlock) and reports whether it did. Called only by the
// queue goroutine.
func (q *sq) offload(r *request) bool {
	if q.qid == 0 || isFabrics(r.kind) {
		return false
	}
	c := q.controller()
	if c == nil {
		return false
	}
	if r.kind == nvmeof.KindFlush && r.nsid == nvmeof.NSIDAll {
		block := false
		for _, id := range c.sub.activeNSIDs(0) {
			if n := c.sub.namespace(id); n != nil && mayBlock(n.cfg.Disk, r.kind) {
				block = true
			}
		}
		if !block {
			return false
		}
	} else if r.ns == nil || (!r.noAsync && isAsync(r.ns.cfg.Disk, r.kind)) || !mayBlock(r.ns.cfg.Disk, r.kind) {
		// An asynchronous disk's commands start on the queue goroutine.
		return false
	}
	q.toWorker(r)
	return true
}

// toWorker queues r for the workers.
func (q *sq) toWorker(r *request) {
	r.onWorker, r.wantWorker = true, false
	q.pool.Submit(r) // the pool holds every slot: never blocks
}

// mayBlock tells whether a command of kind on disk may wait for a device,
// so that it runs on a worker instead of holding up the queue. Direct I/O
// (backstore.WaitsAlways: block devices, files opened with O_DIRECT)
// always waits for the device, and a device serves many requests at once.
// Buffered files (WaitsOnCacheMiss) mostly hit the page cache, where a
// hand-off to a worker costs more than the I/O (4 KiB reads from a cached
// file: about 130k IOPS inline on one queue, 45-55k through 32 workers):
// their reads run inline with RWF_NOWAIT and go to a worker only when not
// cached (io.go), their writes run inline, and only their Flush
// (fdatasync) is offloaded. RAM and null disks never wait.
func mayBlock(d backstore.Disk, kind nvmeof.CommandKind) bool {
	switch backstore.TraitsOf(d).Waits {
	case backstore.WaitsNever:
		return false
	case backstore.WaitsOnCacheMiss:
		return kind == nvmeof.KindFlush
	}
	return true
}

// onWorker runs an offloaded command and posts its response.
func (q *sq) onWorker(r *request) {
	q.execute(r)
	if r.aioStart {
		if err := q.startAsync(r); err != nil {
			q.shutdown(reasonTransportError, err)
		}
		return
	}
	if err := q.respond(r); err != nil {
		q.shutdown(reasonTransportError, err)
	}
}

// shutdown disconnects and, for an admin queue, tears the controller
// down, for reason (Port.endReason) and err, its detail.
func (q *sq) shutdown(reason string, err error) {
	q.closeOnce.Do(func() {
		q.tr.disconnect()
		if c := q.controller(); c != nil {
			reason, err = c.queueGone(q, reason, err)
		}
		attrs := q.logAttrs("reason", reason)
		if err != nil {
			attrs = append(attrs, "err", err)
		}
		if reason == reasonTransportError {
			q.t.log.Warn("nvmeof: queue ended on a transport error", attrs...)
		} else {
			q.t.log.Debug("nvmeof: queue ended", attrs...)
		}
	})
}

// logAttrs are the log attributes naming the queue (with its controller's
// subsystem, host and ID once it has one), then extra.
func (q *sq) logAttrs(extra ...any) []any {
	attrs := []any{"port", q.port.cfg.ID, "transport", trName(q.tr.trType()), "peer", q.remote}
	if c := q.controller(); c != nil {
		attrs = append(attrs, "subsystem", c.sub.cfg.NQN, "host", c.hostNQN, "cntlid", c.cntlid)
	}
	return append(append(attrs, "qid", q.qid), extra...)
}

// close waits for the queue's workers, and for the commands started on
// asynchronous disks, once its connection ended.
func (q *sq) close() {
	q.pool.Close()
	q.async.Wait()
}

// sent is called by the transport once r's completion left (NVMe/TCP:
// written to the connection; NVMe/RDMA: its Send completed), or could not
// leave: the command no longer counts in its namespace's commands in
// flight.
func (r *request) sent() {
	if r.nsIn != nil {
		r.nsIn.Add(-1)
		r.ns, r.nsIn = nil, nil
	}
}

// abandon forgets a request that began and will never be answered, its
// queue's connection gone (a write whose data never came): it no longer
// counts in its namespace's commands in flight, and a placed write whose
// data never all came is given up. Called once the queue's workers are
// done and its connection can place no more data.
func (r *request) abandon() {
	r.unplace()
	r.sent()
}

// unplace gives up r's placed write when io did not finish it: the
// command failed before writing, or never ran (its RDMA Read failed, the
// queue ended). The blocks then hold undefined data, as after any failed
// write.
func (r *request) unplace() {
	if r.placer != nil {
		r.placer.Unplace(r.place)
		r.placer = nil
	}
}
