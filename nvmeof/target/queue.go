package target

import (
	"errors"
	"fmt"
	"sync"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/rdma"
)

const (
	// mdtsShift: MDTS is 2^5 pages of 4 KiB, 128 KiB, as SPDK advertises.
	mdtsShift = 5
	mdts      = 4096 << mdtsShift
	// wrTag marks send-queue work request IDs; receive IDs are cmd slots.
	wrTag = 1 << 32
	// inAlign aligns each slot's in-capsule data (direct I/O).
	inAlign = 4096
	// maxDataSGE bounds the pieces of a read sent straight from a RAM disk
	// (an MDTS transfer over 64 KiB chunks touches at most 3).
	maxDataSGE = 4
)

// pendingCmd is a received command that waits for a free rsp slot.
type pendingCmd struct{ slot, n int }

// rspState is where a request is in its life.
type rspState uint8

const (
	rspFree      rspState = iota
	rspReading            // RDMA Read of host data in flight
	rspParked             // an Asynchronous Event Request waiting for an event
	rspResponded          // response Send posted
)

func (s rspState) String() string {
	return [...]string{"free", "reading", "parked", "responded"}[s]
}

// rsp is one request slot: the copy of its command, its data buffer and its
// 16-byte response. Slots are owned by the queue's goroutine, except parked
// AERs, which the controller completes.
type rsp struct {
	idx     int
	state   rspState
	cmdSlot int // receive buffer still holding the capsule, or -1
	sqe     [nvmeof.SQESize]byte
	kind    nvmeof.CommandKind
	capsule []byte // the received SQE (valid while cmdSlot >= 0)

	// Data transfer.
	dir     nvmeof.Direction
	keyed   bool
	inval   bool
	raddr   uint64
	rkey    uint32
	xferLen int
	xfer    []byte // host data (in-capsule or read) or data to return
	data    []byte // the slot's data buffer (lazily registered)
	dataMR  rdma.MR
	outLen  int // bytes of xfer to RDMA-Write back
	// Zero-copy reads: the disk memory to RDMA-Write instead of xfer.
	nseg int
	segs [maxDataSGE][]byte
	dsgl [maxDataSGE]rdma.SGE

	status nvmeof.Status
	result uint64
	errLoc uint16
	sqhd   uint16
	nsid   uint32
	lba    uint64

	cqe []byte // view into the queue's response buffer
	sgl [1]rdma.SGE
	wr  rdma.SendWR
	wr2 rdma.SendWR
	// The receive reposted for cmdSlot: a worker may repost it.
	rwr  rdma.RecvWR
	rsge [2]rdma.SGE
	// onWorker: the command runs on a worker (may block); wantWorker: run
	// inline, it found it must block (an uncached read) and asks for one.
	onWorker, wantWorker bool
}

// queue is one NVMe/RDMA queue pair: admin (qid 0) or I/O.
type queue struct {
	t      *Target
	port   *Port
	qid    uint16
	depth  int // receive buffers: HSQSIZE+1
	inline int
	stride int // the largest capsule: SQE and in-capsule data
	// inAlloc is the bytes of cmdBuf per slot for in-capsule data: inline
	// rounded up to pages, so the data of every slot is page aligned, as
	// direct I/O to block devices needs.
	inAlloc int

	pd     rdma.PD
	cq     rdma.CQ
	qp     rdma.QP
	cmdBuf []byte
	cmdMR  rdma.MR
	rspBuf []byte
	rspMR  rdma.MR
	// implicit sends reads straight from RAM disks (nil when the provider
	// has no implicit MR).
	implicit rdma.MR
	rsps     []rsp
	rwr      rdma.RecvWR
	rsge     [2]rdma.SGE

	mu      sync.Mutex // guards free and pending (AERs complete from other goroutines)
	free    []int
	pending []pendingCmd // commands waiting for a free rsp

	// Workers for disks that may block (started on first use by the
	// queue goroutine; see offload).
	work   chan *rsp
	workWG sync.WaitGroup

	ctrl    *controller // set by Fabrics Connect; read only by the queue goroutine and teardown
	ctrlMu  sync.Mutex
	sqhd    uint16
	sqflow  bool
	closeMu sync.Once
}

// serveConn runs one queue from its connection request to its end.
func (p *Port) serveConn(req rdma.ConnRequest) {
	t := p.t
	f, err := nvmeof.ParseCMRequest(req.PrivateData())
	if err == nil {
		err = f.Check(uint16(p.cfg.MaxIOQueues), uint16(p.cfg.MaxQueueSize))
	}
	if err != nil {
		st := nvmeof.CMInvalidLength
		errors.As(err, &st)
		t.log.Info("nvmeof: rejecting connection", "peer", req.RemoteAddr(), "err", err)
		rej := make([]byte, 4)
		nvmeof.CMReject(rej).Encode(&nvmeof.CMRejectFields{RecFmt: nvmeof.CMRecFmt, Status: st})
		req.Reject(rej)
		return
	}
	q, err := p.newQueue(f)
	if err != nil {
		t.log.Warn("nvmeof: no resources for a queue", "peer", req.RemoteAddr(), "err", err)
		rej := make([]byte, 4)
		nvmeof.CMReject(rej).Encode(&nvmeof.CMRejectFields{RecFmt: nvmeof.CMRecFmt, Status: nvmeof.CMNoResources})
		req.Reject(rej)
		return
	}
	defer q.free_()
	acc := make([]byte, nvmeof.CMAcceptSize)
	nvmeof.CMAccept(acc).Encode(&nvmeof.CMAcceptFields{RecFmt: nvmeof.CMRecFmt, CRQSize: uint16(q.depth)})
	if err := req.Accept(t.ctx, q.qp, rdma.ConnParam{PrivateData: acc, ResponderResources: 1}); err != nil {
		t.log.Info("nvmeof: accept failed", "peer", req.RemoteAddr(), "err", err)
		return
	}
	t.addQueue(q)
	defer t.removeQueue(q)
	if t.hook != nil && q.qid != 0 {
		t.hook(1)
		defer t.hook(-1)
	}
	t.log.Debug("nvmeof: queue connected", "qid", q.qid, "depth", q.depth, "peer", req.RemoteAddr())
	q.loop()
}

func (p *Port) newQueue(f nvmeof.CMRequestFields) (*queue, error) {
	q := &queue{t: p.t, port: p, qid: f.QID, depth: int(f.HSQSize) + 1}
	q.inline = p.cfg.InlineDataSize
	q.stride = nvmeof.SQESize + q.inline
	nrsp := 2 * q.depth
	var err error
	fail := func(step string, err error) (*queue, error) {
		q.free_()
		return nil, fmt.Errorf("%s: %w", step, err)
	}
	if q.pd, err = p.t.p.AllocPD(); err != nil {
		return fail("allocating PD", err)
	}
	if q.cq, err = p.t.p.CreateCQ(q.depth + 2*nrsp + 8); err != nil {
		return fail("creating CQ", err)
	}
	if q.qp, err = q.pd.CreateQP(rdma.QPConfig{SendCQ: q.cq, RecvCQ: q.cq, MaxSendWR: 2 * nrsp, MaxRecvWR: q.depth, MaxSendSGE: maxDataSGE, MaxRecvSGE: 2}); err != nil {
		return fail("creating QP", err)
	}
	if ip, ok := q.pd.(rdma.ImplicitPD); ok && q.qid != 0 {
		if q.implicit, err = ip.RegisterImplicit(); err != nil {
			return fail("registering the implicit MR", err)
		}
	}
	// Like nvmet, a receive scatters the SQE and the in-capsule data into
	// separate buffers: cmdBuf holds every slot's data area (page aligned)
	// and then every slot's SQE.
	q.inAlloc = (q.inline + inAlign - 1) &^ (inAlign - 1)
	q.cmdBuf = backstore.AlignedBuffer(q.depth*(q.inAlloc+nvmeof.SQESize), inAlign)
	if q.cmdMR, err = q.pd.RegisterMemory(q.cmdBuf, rdma.AccessLocalWrite); err != nil {
		return fail("registering command buffers", err)
	}
	q.rspBuf = make([]byte, nrsp*nvmeof.CQESize)
	if q.rspMR, err = q.pd.RegisterMemory(q.rspBuf, rdma.AccessLocalWrite); err != nil {
		return fail("registering response buffers", err)
	}
	q.rsps = make([]rsp, nrsp)
	q.free = make([]int, 0, nrsp)
	q.pending = make([]pendingCmd, 0, q.depth)
	for i := range q.rsps {
		r := &q.rsps[i]
		r.idx = i
		r.cmdSlot = -1
		r.cqe = q.rspBuf[i*nvmeof.CQESize : (i+1)*nvmeof.CQESize]
		q.free = append(q.free, nrsp-1-i)
	}
	for i := 0; i < q.depth; i++ {
		if err := q.postRecv(i); err != nil {
			return fail("posting receives", err)
		}
	}
	return q, nil
}

func (q *queue) postRecv(slot int) error {
	return q.postRecvWith(&q.rwr, &q.rsge, slot)
}

// postRecvWith posts cmd slot's receive with the caller's work request
// storage (a worker reposts with its rsp's).
func (q *queue) postRecvWith(wr *rdma.RecvWR, sge *[2]rdma.SGE, slot int) error {
	sqeOff := q.depth*q.inAlloc + slot*nvmeof.SQESize
	sge[0] = rdma.SGE{MR: q.cmdMR, Offset: sqeOff, Length: nvmeof.SQESize}
	sge[1] = rdma.SGE{MR: q.cmdMR, Offset: slot * q.inAlloc, Length: q.inline}
	n := 2
	if q.inline == 0 {
		n = 1
	}
	*wr = rdma.RecvWR{ID: uint64(slot), SGL: sge[:n]}
	return q.qp.PostRecv(wr)
}

// sqeBuf is the SQE received in cmd slot.
func (q *queue) sqeBuf(slot int) []byte {
	off := q.depth*q.inAlloc + slot*nvmeof.SQESize
	return q.cmdBuf[off : off+nvmeof.SQESize : off+nvmeof.SQESize]
}

// inData is the in-capsule data area of cmd slot (n bytes received).
func (q *queue) inData(slot, n int) []byte {
	off := slot * q.inAlloc
	return q.cmdBuf[off : off+n : off+n]
}

// offload hands r to the queue's workers when its command may wait for a
// device (see mayBlock) and reports whether it did. Called only by the
// queue goroutine.
func (q *queue) offload(r *rsp) bool {
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
	} else if n := c.sub.namespace(r.nsid); n == nil || !mayBlock(n.cfg.Disk, r.kind) {
		return false
	}
	q.toWorker(r)
	return true
}

// toWorker queues r for the workers, starting them on first use. Called
// only by the queue goroutine.
func (q *queue) toWorker(r *rsp) {
	r.onWorker, r.wantWorker = true, false
	if q.work == nil {
		w := q.t.workers
		if w <= 0 {
			w = min(q.depth, DefaultWorkers)
		}
		q.work = make(chan *rsp, len(q.rsps)) // room for every slot: never blocks
		if q.t.hook != nil {
			// Workers sit in blocking system calls: the queue needs a
			// second P so its own goroutines are not stuck behind them
			// until the runtime hands the P off.
			q.t.hook(1)
		}
		q.workWG.Add(w)
		for range w {
			go q.worker()
		}
	}
	q.work <- r
}

// mayBlock tells whether a command of kind on disk may wait for a device,
// so that it runs on a worker instead of holding up the queue. Direct I/O
// (block devices, files opened with O_DIRECT) always waits for the device,
// and a device serves many requests at once. Buffered files mostly hit the
// page cache, where a hand-off to a worker costs more than the I/O (4 KiB
// reads from a cached file: about 130k IOPS inline on one queue, 45-55k
// through 32 workers): their reads run inline with RWF_NOWAIT and go to a
// worker only when not cached (io.go), their writes run inline, and only
// their Flush (fdatasync) is offloaded. RAM and null disks never wait.
func mayBlock(d backstore.Disk, kind nvmeof.CommandKind) bool {
	switch d.(type) {
	case *backstore.Mem, *backstore.Null:
		return false
	}
	if da, ok := d.(interface{ DirectAlignment() int }); ok && da.DirectAlignment() > 1 {
		return true
	}
	return kind == nvmeof.KindFlush
}

// worker runs offloaded commands and posts their responses.
func (q *queue) worker() {
	defer q.workWG.Done()
	for r := range q.work {
		q.execute(r)
		if err := q.respond(r); err != nil {
			q.shutdown(err.Error())
		}
	}
}

// free_ releases the queue's resources once its workers are done.
func (q *queue) free_() {
	if q.work != nil {
		close(q.work)
		q.workWG.Wait()
		if q.t.hook != nil {
			q.t.hook(-1)
		}
	}
	if q.qp != nil {
		q.qp.Close()
	}
	for i := range q.rsps {
		if q.rsps[i].dataMR != nil {
			q.rsps[i].dataMR.Deregister()
		}
	}
	if q.cmdMR != nil {
		q.cmdMR.Deregister()
	}
	if q.implicit != nil {
		q.implicit.Deregister()
	}
	if q.rspMR != nil {
		q.rspMR.Deregister()
	}
	if q.cq != nil {
		q.cq.Close()
	}
	if q.pd != nil {
		q.pd.Close()
	}
}

// disconnect ends the queue's connection; its loop then ends.
func (q *queue) disconnect() {
	if q.qp != nil {
		q.qp.Disconnect()
	}
}

// loop processes completions until the connection ends.
func (q *queue) loop() {
	wcs := make([]rdma.WC, 32)
	for {
		n := q.cq.Poll(wcs)
		if n == 0 {
			if err := q.cq.Wait(q.t.ctx); err != nil {
				q.shutdown("target closing")
				return
			}
			continue
		}
		for i := range wcs[:n] {
			wc := &wcs[i]
			if wc.Status != rdma.StatusSuccess {
				reason := fmt.Sprintf("%s completion: %s", wc.Op, wc.Status)
				if err := q.qp.Err(); err != nil {
					reason = err.Error()
				}
				q.shutdown(reason)
				return
			}
			if err := q.complete(wc); err != nil {
				q.shutdown(err.Error())
				return
			}
		}
	}
}

// shutdown disconnects and, for an admin queue, tears the controller down.
func (q *queue) shutdown(reason string) {
	q.closeMu.Do(func() {
		q.disconnect()
		q.ctrlMu.Lock()
		c := q.ctrl
		q.ctrlMu.Unlock()
		if c != nil {
			c.queueGone(q, reason)
		}
		q.t.log.Debug("nvmeof: queue ended", "qid", q.qid, "reason", reason)
	})
}

func (q *queue) complete(wc *rdma.WC) error {
	if wc.Op == rdma.OpRecv {
		return q.onCommand(int(wc.ID), wc.ByteLen)
	}
	r := &q.rsps[int(wc.ID-wrTag)]
	switch wc.Op {
	case rdma.OpRDMARead:
		return q.run(r)
	case rdma.OpSend, rdma.OpSendWithInv:
		return q.release(r)
	}
	return nil
}

func (q *queue) getRsp() *rsp {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := len(q.free)
	if n == 0 {
		return nil
	}
	i := q.free[n-1]
	q.free = q.free[:n-1]
	return &q.rsps[i]
}

// release frees a slot whose response was sent and starts a waiting command.
func (q *queue) release(r *rsp) error {
	r.state = rspFree
	clear(r.segs[:r.nseg]) // do not keep discarded RAM disk chunks alive
	r.nseg = 0
	q.mu.Lock()
	q.free = append(q.free, r.idx)
	next := pendingCmd{slot: -1}
	if len(q.pending) > 0 {
		next = q.pending[0]
		copy(q.pending, q.pending[1:])
		q.pending = q.pending[:len(q.pending)-1]
	}
	q.mu.Unlock()
	if next.slot >= 0 {
		return q.start(next.slot, next.n)
	}
	return nil
}

// onCommand handles a received capsule in cmd slot.
func (q *queue) onCommand(slot, n int) error {
	if n < nvmeof.SQESize {
		return fmt.Errorf("capsule of %d bytes is shorter than an SQE: %w", n, errQueueBroken)
	}
	q.sqhd++
	if int(q.sqhd) >= q.depth {
		q.sqhd = 0
	}
	return q.start(slot, n)
}
