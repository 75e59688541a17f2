package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/rdma"
)

// nullSGL is the data pointer of a command without data.
var nullSGL = nvmeof.SGLFields{Identifier: nvmeof.SGLKeyed}

// capStride is the registered bytes per command slot: the 64-byte SQE and a
// 16-byte Dataset Management range, rounded up.
const capStride = 128

// Slot states. A slot is owned by whoever moved it into its state: the free
// list (slotFree), a submitter or waiter (slotBusy), or the queue's
// completion goroutine (slotInFlight).
const (
	slotFree uint32 = iota
	slotBusy
	slotInFlight
)

// What an in-flight slot still waits for.
const (
	wantSend uint8 = 1 << iota // the send completion of the capsule
	wantResp                   // the response capsule
)

// Slot kinds: how a completion is delivered.
const (
	kindIO   uint8 = iota // a blockdev.Request: its callback or channel
	kindSync              // a goroutine waiting in exec
	kindAER               // the Asynchronous Event Request of the admin queue
)

// slot is one command context: a CID, its capsule, its fast-registration
// key and the send work request, all allocated once.
type slot struct {
	q     *queue
	cid   uint16
	state atomic.Uint32
	// issued is when the command was posted (UnixNano), 0 when idle: the
	// controller's watchdog reads it.
	issued atomic.Int64

	// Set by the owner before posting, read by the completion goroutine.
	kind    uint8
	pending uint8
	name    string // command name for errors (constant strings)
	sqe     nvmeof.SQE
	extra   []byte // capsule bytes after the SQE (DSM range)
	sge     [2]rdma.SGE
	wr      rdma.SendWR
	fmr     rdma.FastRegMR
	rkey    uint32
	mapped  bool
	req     *blockdev.Request

	// Outcome, set by the completion goroutine.
	status nvmeof.Status
	result uint64
	err    error
	done   chan struct{} // kindSync: signalled when complete
}

// queue is one NVMe queue pair (admin or I/O) on one RDMA QP. Submitters
// take a slot from the free list, build the capsule in it and post it; one
// goroutine (run) polls the CQ, matches responses to slots by CID and
// completes them.
type queue struct {
	c       *Controller
	qid     uint16
	entries int // SQ entries, HSQSIZE+1; also the receives posted (HRQSIZE)

	qp    rdma.QP
	cq    rdma.CQ
	capMR rdma.MR
	rspMR rdma.MR
	rsp   []byte
	slots []slot
	free  chan uint16
	aer   *slot // admin queue: the slot reserved for the AER

	// inCapsule is the most data a write may carry in the capsule (0: none).
	inCapsule int

	// Completion goroutine state.
	wcs     []rdma.WC
	recvWR  rdma.RecvWR
	recvSGE [1]rdma.SGE
	ctx     context.Context
	cancel  context.CancelFunc
	exited  chan struct{}
	started bool

	deadOnce sync.Once
	dead     chan struct{}
	deadErr  error // the reason, set before dead is closed
	reqErr   error // what requests fail with: ErrClosed or a *connLost
}

// newQueue allocates a queue's resources: nslots command slots (the last
// one reserved for the AER when aer is set), entries receive buffers, and a
// fast-registration key of fmrLen bytes per slot.
func newQueue(c *Controller, qid uint16, nslots, entries, fmrLen int, aer bool) (*queue, error) {
	q := &queue{
		c: c, qid: qid, entries: entries,
		dead: make(chan struct{}), exited: make(chan struct{}),
		wcs: make([]rdma.WC, 64),
	}
	q.ctx, q.cancel = context.WithCancel(context.Background())
	var err error
	fail := func(what string, err error) (*queue, error) {
		q.free = nil
		q.release()
		return nil, fmt.Errorf("queue %d: %s: %w", qid, what, err)
	}
	if q.cq, err = c.prov.CreateCQ(2*entries + 2); err != nil {
		return fail("creating CQ", err)
	}
	if q.qp, err = c.pd.CreateQP(rdma.QPConfig{SendCQ: q.cq, RecvCQ: q.cq, MaxSendWR: nslots + 1, MaxRecvWR: entries,
		MaxSendSGE: 2, MaxRecvSGE: 1, Context: q}); err != nil {
		return fail("creating QP", err)
	}
	capMem := alignedBuffer(nslots * capStride)
	if q.capMR, err = c.pd.RegisterMemory(capMem, rdma.AccessLocalWrite); err != nil {
		return fail("registering capsules", err)
	}
	q.rsp = alignedBuffer(entries * nvmeof.CQESize)
	if q.rspMR, err = c.pd.RegisterMemory(q.rsp, rdma.AccessLocalWrite); err != nil {
		return fail("registering responses", err)
	}
	q.slots = make([]slot, nslots)
	nfree := nslots
	if aer {
		nfree--
	}
	q.free = make(chan uint16, nfree)
	for i := range q.slots {
		s := &q.slots[i]
		s.q, s.cid = q, uint16(i)
		s.sqe = nvmeof.SQE(capMem[i*capStride : i*capStride+nvmeof.SQESize : i*capStride+nvmeof.SQESize])
		s.extra = capMem[i*capStride+nvmeof.SQESize : (i+1)*capStride : (i+1)*capStride]
		s.sge[0] = rdma.SGE{MR: q.capMR, Offset: i * capStride, Length: nvmeof.SQESize}
		s.wr = rdma.SendWR{ID: uint64(i), Op: rdma.OpSend, Flags: rdma.Signaled, SGL: s.sge[:1]}
		s.done = make(chan struct{}, 1)
		if s.fmr, err = c.pd.AllocFastRegMR(fmrLen); err != nil {
			return fail("allocating fast-registration keys", err)
		}
		if i < nfree {
			q.free <- uint16(i)
		}
	}
	if aer {
		q.aer = &q.slots[nslots-1]
		q.aer.state.Store(slotBusy)
	}
	q.recvWR.SGL = q.recvSGE[:]
	for i := range entries {
		if err := q.postRecv(i); err != nil {
			return fail("posting receives", err)
		}
	}
	return q, nil
}

func (q *queue) postRecv(i int) error {
	q.recvSGE[0] = rdma.SGE{MR: q.rspMR, Offset: i * nvmeof.CQESize, Length: nvmeof.CQESize}
	q.recvWR.ID = uint64(i)
	return q.qp.PostRecv(&q.recvWR)
}

// connect runs the RDMA connection manager exchange for the queue and starts
// its completion goroutine.
func (q *queue) connect(ctx context.Context, addr string) error {
	pd := make([]byte, nvmeof.CMRequestSize)
	hsq := q.entries - 1
	nvmeof.CMRequest(pd).Encode(&nvmeof.CMRequestFields{RecFmt: nvmeof.CMRecFmt, QID: q.qid, HRQSize: uint16(q.entries), HSQSize: uint16(hsq)})
	reply, err := q.qp.Connect(ctx, addr, rdma.ConnParam{PrivateData: pd})
	if err != nil {
		var rej *rdma.RejectError
		if errors.As(err, &rej) {
			re := &RejectError{Addr: addr, QID: q.qid, Err: err}
			if f, perr := nvmeof.ParseCMReject(rej.PrivateData); perr == nil {
				re.Status = f.Status
			}
			return re
		}
		return err
	}
	acc, err := nvmeof.ParseCMAccept(reply)
	if err != nil {
		q.qp.Disconnect()
		return fmt.Errorf("queue %d: bad accept private data from %s: %w", q.qid, addr, err)
	}
	q.c.log.Debug("nvme host: queue connected", "qid", q.qid, "addr", addr, "entries", q.entries, "crqsize", acc.CRQSize)
	q.started = true
	go q.run()
	return nil
}

// fail moves the queue to the dead state with reason err and disconnects its
// QP; the completion goroutine then completes every command in flight with
// the error. The first reason wins.
func (q *queue) fail(err error) {
	q.deadOnce.Do(func() {
		q.deadErr = err
		if errors.Is(err, blockdev.ErrClosed) {
			q.reqErr = err
		} else {
			q.reqErr = &connLost{err: err}
		}
		close(q.dead)
		if q.qp != nil {
			q.qp.Disconnect()
		}
		if !errors.Is(err, blockdev.ErrClosed) {
			q.c.queueFailed(q, err)
		}
	})
}

// failedErr returns the error a request on a dead queue fails with.
func (q *queue) failedErr() error {
	<-q.dead
	return q.reqErr
}

// acquire takes a free slot, waiting for one; it fails when the queue is
// dead or ctx (which may be nil) is done.
func (q *queue) acquire(ctx context.Context) (*slot, error) {
	select {
	case <-q.dead:
		return nil, q.failedErr()
	default:
	}
	var cdone <-chan struct{}
	if ctx != nil {
		cdone = ctx.Done()
	}
	select {
	case cid := <-q.free:
		s := &q.slots[cid]
		s.state.Store(slotBusy)
		return s, nil
	case <-q.dead:
		return nil, q.failedErr()
	case <-cdone:
		return nil, ctx.Err()
	}
}

// putFree returns a slot the caller owns to the free list.
func (q *queue) putFree(s *slot) {
	s.req = nil
	s.state.Store(slotFree)
	q.free <- s.cid
}

// post hands a prepared slot to the completion goroutine and posts its
// capsule. On error the slot is the caller's again, unless the queue died
// meanwhile and completed it (then post returns nil: the completion was
// delivered).
func (q *queue) post(s *slot) error {
	s.pending = wantSend | wantResp
	s.err = nil
	if s.kind != kindAER {
		s.issued.Store(time.Now().UnixNano())
	}
	s.state.Store(slotInFlight)
	if err := q.qp.PostSend(&s.wr); err != nil {
		if s.state.CompareAndSwap(slotInFlight, slotBusy) {
			s.issued.Store(0)
			q.unmap(s)
			select {
			case <-q.dead:
				return q.failedErr()
			default:
			}
			return fmt.Errorf("queue %d: posting a command: %w", q.qid, err)
		}
		return nil
	}
	return nil
}

func (q *queue) unmap(s *slot) {
	if s.mapped {
		s.fmr.Invalidate()
		s.mapped = false
	}
}

// run is the completion goroutine.
func (q *queue) run() {
	defer close(q.exited)
	for {
		n := q.cq.Poll(q.wcs)
		if n == 0 {
			if err := q.cq.Wait(q.ctx); err != nil {
				q.fail(blockdev.ErrClosed)
				q.sweep()
				return
			}
			continue
		}
		for i := range q.wcs[:n] {
			q.handle(&q.wcs[i])
		}
	}
}

func (q *queue) handle(wc *rdma.WC) {
	if wc.Op == rdma.OpRecv {
		if wc.Status != rdma.StatusSuccess {
			q.fail(q.transportErr(wc))
			q.sweep()
			return
		}
		q.onResponse(wc)
		return
	}
	if wc.Status != rdma.StatusSuccess {
		q.fail(q.transportErr(wc))
		q.sweep()
		return
	}
	if wc.ID >= uint64(len(q.slots)) {
		return
	}
	s := &q.slots[wc.ID]
	if s.state.Load() != slotInFlight {
		return
	}
	s.pending &^= wantSend
	if s.pending == 0 {
		q.finish(s)
	}
}

func (q *queue) transportErr(wc *rdma.WC) error {
	if err := q.qp.Err(); err != nil {
		return err
	}
	return wc.Err()
}

func (q *queue) onResponse(wc *rdma.WC) {
	id := int(wc.ID)
	if wc.ByteLen < nvmeof.CQESize {
		q.fail(fmt.Errorf("queue %d: response capsule of %d bytes", q.qid, wc.ByteLen))
		q.sweep()
		return
	}
	cqe := nvmeof.CQE(q.rsp[id*nvmeof.CQESize : (id+1)*nvmeof.CQESize])
	cid, st, res := cqe.CID(), cqe.Status(), cqe.Result()
	if err := q.postRecv(id); err != nil {
		q.fail(fmt.Errorf("queue %d: reposting a receive: %w", q.qid, err))
		q.sweep()
		return
	}
	if int(cid) >= len(q.slots) || q.slots[cid].state.Load() != slotInFlight || q.slots[cid].pending&wantResp == 0 {
		q.fail(fmt.Errorf("queue %d: completion for command %d, which is not outstanding", q.qid, cid))
		q.sweep()
		return
	}
	s := &q.slots[cid]
	if wc.Flags&rdma.WCWithInv != 0 {
		if !s.mapped || wc.InvalidatedKey != s.rkey {
			q.fail(fmt.Errorf("queue %d: the target invalidated key %#x with the completion of command %d, which used %#x (mapped %v)",
				q.qid, wc.InvalidatedKey, cid, s.rkey, s.mapped))
			q.sweep()
			return
		}
		s.mapped = false // remotely invalidated
	}
	s.status, s.result = st, res
	s.pending &^= wantResp
	if s.pending == 0 {
		q.finish(s)
	}
}

// finish completes an in-flight slot (the completion goroutine owns it).
func (q *queue) finish(s *slot) {
	s.issued.Store(0)
	q.unmap(s)
	switch s.kind {
	case kindIO:
		r := s.req
		switch {
		case s.err != nil:
			r.Err = s.err
		case s.status != 0:
			r.Err = &StatusError{Command: s.name, QID: q.qid, Status: s.status}
		default:
			r.Err = nil
		}
		r.Completed = time.Now()
		q.putFree(s)
		blockdev.Complete(r)
	case kindSync:
		s.state.Store(slotBusy)
		s.done <- struct{}{}
	case kindAER:
		s.state.Store(slotBusy)
		q.c.onAER(s.status, uint32(s.result), s.err)
	}
}

// sweep completes every in-flight slot of a dead queue with its error.
func (q *queue) sweep() {
	err := q.failedErr()
	for i := range q.slots {
		s := &q.slots[i]
		if s.state.CompareAndSwap(slotInFlight, slotBusy) {
			s.err = err
			s.pending = 0
			q.finish(s)
		}
	}
}

// overdue returns a command in flight for longer than d, if any.
func (q *queue) overdue(now int64, d time.Duration) *slot {
	for i := range q.slots {
		s := &q.slots[i]
		if t := s.issued.Load(); t != 0 && now-t > int64(d) {
			return s
		}
	}
	return nil
}

// exec runs one command synchronously: encode fills the SQE (the CID is set
// afterwards) given the data pointer for data, which is registered for the
// duration of the command. dir says which way data moves.
func (q *queue) exec(ctx context.Context, name string, data []byte, dir nvmeof.Direction, encode func(sqe nvmeof.SQE, dptr nvmeof.SGLFields)) (uint64, error) {
	s, err := q.acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("nvme %s: %w", name, err)
	}
	var tmp rdma.MR
	var dptr nvmeof.SGLFields
	if len(data) > 0 {
		if tmp, err = q.c.pd.RegisterMemory(data, rdma.AccessLocalWrite); err != nil {
			q.putFree(s)
			return 0, fmt.Errorf("nvme %s: registering %d bytes: %w", name, len(data), err)
		}
		defer tmp.Deregister()
		access := rdma.AccessRemoteRead
		if dir != nvmeof.DirHostToCtrl {
			access = rdma.AccessLocalWrite | rdma.AccessRemoteWrite
		}
		rkey, va, err := s.fmr.Map(tmp, 0, len(data), access)
		if err != nil {
			q.putFree(s)
			return 0, fmt.Errorf("nvme %s: mapping %d bytes: %w", name, len(data), err)
		}
		s.rkey, s.mapped = rkey, true
		dptr = nvmeof.SGLFields{Identifier: nvmeof.SGLKeyedInvalidate, Address: va, Length: uint32(len(data)), Key: rkey}
	}
	encode(s.sqe, dptr)
	if len(data) == 0 {
		// No data: a zero-length keyed descriptor, as Linux
		// nvme_rdma_set_sg_null; nvmet refuses a zeroed DPTR.
		s.sqe.DPTR().Encode(&nullSGL)
	}
	s.sqe.SetCID(s.cid)
	s.kind, s.name = kindSync, name
	s.wr.SGL = s.sge[:1]
	if err := q.post(s); err != nil {
		q.putFree(s) // post failed: the slot is ours again
		return 0, fmt.Errorf("nvme %s: %w", name, err)
	}
	timeout := q.c.cfg.CommandTimeout
	t := time.NewTimer(timeout)
	defer t.Stop()
	var cdone <-chan struct{}
	if ctx != nil {
		cdone = ctx.Done()
	}
	select {
	case <-s.done:
	case <-cdone:
		q.fail(fmt.Errorf("nvme %s on queue %d: %w", name, q.qid, ctx.Err()))
		<-s.done
	case <-t.C:
		q.fail(fmt.Errorf("nvme %s on queue %d: no completion in %v: %w", name, q.qid, timeout, ErrTimeout))
		<-s.done
	}
	res, st, terr := s.result, s.status, s.err
	q.putFree(s)
	if terr != nil {
		return 0, fmt.Errorf("nvme %s: %w", name, terr)
	}
	if st != 0 {
		return res, &StatusError{Command: name, QID: q.qid, Status: st}
	}
	return res, nil
}

// close tears the queue down: disconnect, wait for the completion goroutine
// (which completes what was in flight with ErrClosed), free everything.
func (q *queue) close() {
	q.fail(blockdev.ErrClosed)
	if q.qp != nil {
		q.qp.Close()
	}
	q.cancel()
	if q.started {
		<-q.exited
	} else {
		q.sweep()
	}
	q.release()
}

func (q *queue) release() {
	for i := range q.slots {
		if s := &q.slots[i]; s.fmr != nil {
			s.fmr.Close()
			s.fmr = nil
		}
	}
	if q.capMR != nil {
		q.capMR.Deregister()
	}
	if q.rspMR != nil {
		q.rspMR.Deregister()
	}
	if q.qp != nil {
		q.qp.Close()
	}
	if q.cq != nil {
		q.cq.Close()
	}
}
