package rdmaq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/rdma"
)

// Host slot states. A slot is owned by whoever moved it into its state:
// the free list (SlotFree), a submitter or waiter (SlotBusy), or the
// queue's completion goroutine (SlotInFlight).
const (
	SlotFree uint32 = iota
	SlotBusy
	SlotInFlight
)

// What an in-flight host slot still waits for.
const (
	waitSend uint8 = 1 << iota // the send completion of its request
	waitResp                   // the target's response
)

// hostSendSGE is the scatter entries of a host request: its send buffer
// and, optionally, data sent in line (in-capsule or immediate data).
const hostSendSGE = 2

// HostPool is a group of host slots that Acquire hands out separately
// (the I/O slots, and a few kept for task management or events so they
// never wait behind I/O).
type HostPool struct {
	// Slots is the number of slots in the pool.
	Slots int
	// SendLen is the size of each slot's registered send buffer (the
	// capsule, IU or PDU header it sends).
	SendLen int
	// NoTimeout exempts the pool's requests from Overdue (an
	// Asynchronous Event Request waits for as long as no event comes).
	NoTimeout bool
}

// HostConfig sizes a HostQueue.
type HostConfig struct {
	// Provider creates the CQ; PD (shared by the host's queues, so one
	// data buffer serves all of them) creates the QP and registrations.
	Provider rdma.Provider
	PD       rdma.PD
	// Pools are the slot groups; slot indices run through them in order.
	Pools []HostPool
	// Recvs receive buffers of RecvLen bytes take the target's messages.
	Recvs, RecvLen int
	// FastReg, when positive, gives every slot a fast-registration key
	// for buffers of up to that many bytes (Map).
	FastReg int
	// Ctl and CtlLen are the number and size of control buffers: messages
	// outside any slot (SRP's answers to target requests, logout).
	Ctl, CtlLen int
	// SendWRs is the send work requests the queue may have outstanding
	// (default 2*slots+Ctl+8).
	SendWRs int
	// Credits, when positive, is the initial send credit of a protocol
	// with flow control (SRP's request limit): Acquire then also takes a
	// credit, keeping Reserve of them for pools other than the first.
	Credits, Reserve int
	// SelfManaged: the protocol tracks its slots' life itself (iSCSI's
	// are shared with its TCP transport): send completions go to
	// HostHandler.Sent, and Acquire, Post, Respond and sweeping are not
	// used. Such a queue frees itself when its completion goroutine
	// stops (after Drainer.Drained).
	SelfManaged bool
	// OwnPD: the queue closes PD with its other resources.
	OwnPD bool
	// ReqErr maps the reason a queue failed to the error its requests
	// complete with (e.g. wrapping it as a lost connection); nil keeps it.
	ReqErr func(reason error) error
	// QPContext is the QP's rdma.QPConfig.Context.
	QPContext any
	// QP and CQ, when set, are a queue pair (on PD) and its completion
	// queue that the protocol created and connected itself, because its
	// login negotiates the sizes of the buffers (SRP); the queue adopts
	// and closes them.
	QP rdma.QP
	CQ rdma.CQ
}

// HostHandler is what a protocol plugs into a HostQueue. Recv and Complete
// run on the queue's completion goroutine.
type HostHandler[S any] interface {
	// Recv handles a message from the target: typically it finds the slot
	// a response answers, records the outcome and calls Respond. The
	// receive buffer is reposted when Recv returns; an error fails the
	// queue.
	Recv(m Msg) error
	// Complete delivers a slot whose request is done (response in and
	// send completed), or failed (s.Err set, by sweep). The slot is the
	// handler's: it hands it back with Put or Release.
	Complete(s *HostSlot[S])
	// Sent reports a send completion of a self-managed slot
	// (HostConfig.SelfManaged); otherwise it is not called.
	Sent(s *HostSlot[S])
	// Failed is called once when the queue fails, with the reason, from
	// the goroutine that failed it.
	Failed(reason error)
}

// HostQueue is the host side of one RDMA queue pair: slots with their
// send buffers, fast-registration keys and work requests, the receive
// ring for the target's messages, the completion loop, send credits,
// command timeouts and, when the connection is lost, the sweep that
// completes every request in flight with an error. Its methods are safe
// for concurrent use unless noted.
type HostQueue[S any] struct {
	cfg HostConfig
	h   HostHandler[S]

	cq      rdma.CQ
	qp      rdma.QP
	sendBuf []byte
	sendMR  rdma.MR
	recvBuf []byte
	recvMR  rdma.MR
	stride  int
	ctl     ctlBuffers
	slots   []HostSlot[S]

	// Completion loop state (its goroutine only).
	rwr  rdma.RecvWR
	rsge [2]rdma.SGE
	wcs  []rdma.WC
	// inRecv: Recv is running; slots it completes wait in deferred until
	// the message's receive buffer is reposted, so a request sent on a
	// freed slot never finds its response's buffer missing.
	inRecv   bool
	deferred []*HostSlot[S]

	mu      sync.Mutex // guards free, credits and the slots' pending bits
	free    [][]int32  // per pool
	credits int
	wake    chan struct{}

	ctx         context.Context
	cancel      context.CancelFunc
	started     bool
	exited      chan struct{}
	deadOnce    sync.Once
	releaseOnce sync.Once
	dead        chan struct{}
	deadErr     error // why the queue failed, set before dead is closed
	reqErr      error // what requests fail with
}

// HostSlot is one request context of a HostQueue: the protocol's state S,
// a registered send buffer, a fast-registration key and a send work
// request, all allocated once.
type HostSlot[S any] struct {
	// S is the protocol's state of the request on this slot.
	S S
	// Err is the transport error a failed request completes with (set by
	// the sweep or Abort), nil otherwise.
	Err error

	q       *HostQueue[S]
	idx     int
	pool    int
	state   atomic.Uint32
	issued  atomic.Int64 // when posted (UnixNano), 0 when idle
	pending uint8        // guarded by q.mu
	buf     []byte
	bufOff  int
	fmr     rdma.FastRegMR
	rkey    uint32
	mapped  bool
	wr      rdma.SendWR
	sge     [hostSendSGE]rdma.SGE
}

// NewHostQueue creates the queue's CQ and QP, registers its buffers and
// posts its receives. Connect it, then Start it.
func NewHostQueue[S any](cfg HostConfig, h HostHandler[S]) (*HostQueue[S], error) {
	nslots, sendLen := 0, 0
	for _, p := range cfg.Pools {
		nslots += p.Slots
		sendLen += p.Slots * roundUp(max(p.SendLen, 1), 64)
	}
	if nslots == 0 || cfg.Recvs <= 0 || cfg.RecvLen <= 0 {
		return nil, fmt.Errorf("rdmaq: %d slots, %d receives of %d bytes", nslots, cfg.Recvs, cfg.RecvLen)
	}
	if cfg.SendWRs <= 0 {
		cfg.SendWRs = 2*nslots + cfg.Ctl + 8
	}
	q := &HostQueue[S]{cfg: cfg, h: h, wcs: make([]rdma.WC, 64), wake: make(chan struct{}, 1),
		exited: make(chan struct{}), dead: make(chan struct{}), credits: cfg.Credits}
	q.ctx, q.cancel = context.WithCancel(context.Background())
	fail := func(step string, err error) (*HostQueue[S], error) {
		q.release()
		return nil, fmt.Errorf("rdmaq: %s: %w", step, err)
	}
	var err error
	q.qp, q.cq = cfg.QP, cfg.CQ
	if q.qp == nil {
		if q.cq, err = cfg.Provider.CreateCQ(cfg.Recvs + cfg.SendWRs + 8); err != nil {
			return fail("creating a CQ", err)
		}
		if q.qp, err = cfg.PD.CreateQP(rdma.QPConfig{SendCQ: q.cq, RecvCQ: q.cq, MaxSendWR: cfg.SendWRs, MaxRecvWR: cfg.Recvs,
			MaxSendSGE: hostSendSGE, MaxRecvSGE: 1, Context: cfg.QPContext}); err != nil {
			return fail("creating a QP", err)
		}
	}
	q.sendBuf = backstore.AlignedBuffer(sendLen, pageSize)
	if q.sendMR, err = cfg.PD.RegisterMemory(q.sendBuf, rdma.AccessLocalWrite); err != nil {
		return fail("registering send buffers", err)
	}
	q.stride = roundUp(cfg.RecvLen, 64)
	q.recvBuf = backstore.AlignedBuffer(cfg.Recvs*q.stride, pageSize)
	if q.recvMR, err = cfg.PD.RegisterMemory(q.recvBuf, rdma.AccessLocalWrite); err != nil {
		return fail("registering receive buffers", err)
	}
	if err := q.ctl.init(cfg.PD, cfg.Ctl, cfg.CtlLen); err != nil {
		return fail("setting up", err)
	}
	q.slots = make([]HostSlot[S], nslots)
	q.deferred = make([]*HostSlot[S], 0, nslots)
	q.free = make([][]int32, len(cfg.Pools))
	i, off := 0, 0
	for p, pc := range cfg.Pools {
		stride := roundUp(max(pc.SendLen, 1), 64)
		q.free[p] = make([]int32, 0, pc.Slots)
		for range pc.Slots {
			s := &q.slots[i]
			s.q, s.idx, s.pool, s.bufOff = q, i, p, off
			s.buf = q.sendBuf[off : off+pc.SendLen : off+pc.SendLen]
			if cfg.FastReg > 0 {
				if s.fmr, err = cfg.PD.AllocFastRegMR(cfg.FastReg); err != nil {
					return fail("allocating fast-registration keys", err)
				}
			}
			off += stride
			i++
		}
		for k := i - 1; k >= i-pc.Slots; k-- {
			q.free[p] = append(q.free[p], int32(k))
		}
	}
	for i := range cfg.Recvs {
		if err := q.postRecv(i); err != nil {
			return fail("posting receives", err)
		}
	}
	return q, nil
}

// QP returns the queue pair.
func (q *HostQueue[S]) QP() rdma.QP { return q.qp }

// HostQPConfig is the rdma.QPConfig a protocol that creates its QP itself
// (HostConfig.QP) gives it for up to slots requests, recvs receives and
// ctl control messages.
func HostQPConfig(cq rdma.CQ, slots, recvs, ctl int, context any) rdma.QPConfig {
	return rdma.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: 2*slots + ctl + 8, MaxRecvWR: recvs,
		MaxSendSGE: hostSendSGE, MaxRecvSGE: 1, Context: context}
}

// Slots returns the slots (protocols that manage them themselves index
// them by their own slot numbers).
func (q *HostQueue[S]) Slots() []HostSlot[S] { return q.slots }

// Slot returns slot i.
func (q *HostQueue[S]) Slot(i int) *HostSlot[S] { return &q.slots[i] }

// Index returns the slot's index.
func (s *HostSlot[S]) Index() int { return s.idx }

// Buf returns the slot's registered send buffer.
func (s *HostSlot[S]) Buf() []byte { return s.buf }

// State returns the slot's state (SlotFree, SlotBusy, SlotInFlight).
func (s *HostSlot[S]) State() uint32 { return s.state.Load() }

// Issued returns when the slot's request was posted (UnixNano), 0 when
// none is in flight.
func (s *HostSlot[S]) Issued() int64 { return s.issued.Load() }

func (q *HostQueue[S]) postRecv(i int) error {
	q.rsge[0] = rdma.SGE{MR: q.recvMR, Offset: i * q.stride, Length: q.cfg.RecvLen}
	q.rwr = rdma.RecvWR{ID: kindRecv | uint64(i), SGL: q.rsge[:1]}
	return q.qp.PostRecv(&q.rwr)
}

// Connect runs the connection manager exchange and returns the target's
// private data.
func (q *HostQueue[S]) Connect(ctx context.Context, addr string, p rdma.ConnParam) ([]byte, error) {
	return q.qp.Connect(ctx, addr, p)
}

// Start launches the completion goroutine (once connected).
func (q *HostQueue[S]) Start() {
	q.started = true
	go q.run()
}

// Dead is closed when the queue failed or was closed.
func (q *HostQueue[S]) Dead() <-chan struct{} { return q.dead }

// Err returns why the queue failed, or nil while it works.
func (q *HostQueue[S]) Err() error {
	select {
	case <-q.dead:
		return q.deadErr
	default:
		return nil
	}
}

// ReqErr waits for the queue to have failed and returns what its requests
// fail with.
func (q *HostQueue[S]) ReqErr() error {
	<-q.dead
	return q.reqErr
}

// Fail moves the queue to the failed state with reason err and disconnects
// it; the completion goroutine then completes every request in flight with
// the error. The first reason wins. Safe from any goroutine.
func (q *HostQueue[S]) Fail(err error) {
	first := false
	q.deadOnce.Do(func() {
		first = true
		q.deadErr, q.reqErr = err, err
		if q.cfg.ReqErr != nil {
			q.reqErr = q.cfg.ReqErr(err)
		}
		close(q.dead)
		if q.qp != nil {
			q.qp.Disconnect()
		}
		q.cancel()
		q.signal()
	})
	if first {
		q.h.Failed(err)
	}
}

func (q *HostQueue[S]) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Acquire takes a free slot of pool (and a send credit when the queue has
// credits), waiting for one; it fails when the queue is dead or ctx (which
// may be nil) is done.
func (q *HostQueue[S]) Acquire(ctx context.Context, pool int) (*HostSlot[S], error) {
	var cdone <-chan struct{}
	if ctx != nil {
		cdone = ctx.Done()
	}
	reserve := 0
	if pool == 0 {
		reserve = q.cfg.Reserve
	}
	for {
		q.mu.Lock()
		select {
		case <-q.dead:
			q.mu.Unlock()
			return nil, q.reqErr
		default:
		}
		fl := q.free[pool]
		if n := len(fl); n > 0 && (q.cfg.Credits == 0 || q.credits > reserve) {
			if q.cfg.Credits != 0 {
				q.credits--
			}
			s := &q.slots[fl[n-1]]
			q.free[pool] = fl[:n-1]
			more := n > 1 && (q.cfg.Credits == 0 || q.credits > reserve)
			q.mu.Unlock()
			if more {
				q.signal() // another waiter may go too
			}
			s.Err = nil
			s.state.Store(SlotBusy)
			return s, nil
		}
		q.mu.Unlock()
		select {
		case <-q.wake:
		case <-q.dead:
		case <-cdone:
			return nil, ctx.Err()
		}
	}
}

// Put returns a slot the caller owns to its pool.
func (q *HostQueue[S]) Put(s *HostSlot[S]) { q.Release(s, false) }

// Release returns a slot the caller owns to its pool, with its credit when
// its request was never sent (credit true).
func (q *HostQueue[S]) Release(s *HostSlot[S], credit bool) {
	s.issued.Store(0)
	s.state.Store(SlotFree)
	q.mu.Lock()
	if credit && q.cfg.Credits != 0 {
		q.credits++
	}
	q.free[s.pool] = append(q.free[s.pool], int32(s.idx))
	q.mu.Unlock()
	q.signal()
}

// AddCredits applies a credit delta from the target.
func (q *HostQueue[S]) AddCredits(d int32) {
	if d == 0 {
		return
	}
	q.mu.Lock()
	q.credits += int(d)
	q.mu.Unlock()
	q.signal()
}

// AddCreditsAndTake applies a credit delta from the target and, when
// that leaves more than the reserve, takes one credit for a request sent
// again (a retry), atomically. It reports whether it took one.
func (q *HostQueue[S]) AddCreditsAndTake(d int32) bool {
	q.mu.Lock()
	q.credits += int(d)
	took := q.credits > q.cfg.Reserve
	if took {
		q.credits--
	}
	q.mu.Unlock()
	if d != 0 {
		q.signal()
	}
	return took
}

// Credits returns the current send credit.
func (q *HostQueue[S]) Credits() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.credits
}

// Map registers n bytes at off of mr under the slot's fast-registration
// key with access, for the target to reach, and returns the key and
// address to send. The key is invalidated when the request completes
// (unless the target invalidated it with its response).
func (q *HostQueue[S]) Map(s *HostSlot[S], mr rdma.MR, off, n int, access rdma.Access) (rkey uint32, va uint64, err error) {
	rkey, va, err = s.fmr.Map(mr, off, n, access)
	if err != nil {
		return 0, 0, fmt.Errorf("rdmaq: mapping %d bytes: %w", n, err)
	}
	s.rkey, s.mapped = rkey, true
	return rkey, va, nil
}

// MapBuf is Map of n bytes at off of the slot's own send buffer (a
// parameter list the target fetches).
func (q *HostQueue[S]) MapBuf(s *HostSlot[S], off, n int, access rdma.Access) (rkey uint32, va uint64, err error) {
	return q.Map(s, q.sendMR, s.bufOff+off, n, access)
}

// Unmap invalidates the slot's key if it is mapped.
func (q *HostQueue[S]) Unmap(s *HostSlot[S]) {
	if s.mapped {
		s.fmr.Invalidate()
		s.mapped = false
	}
}

// Invalidated checks a Send with Invalidate that answers s: the target may
// only invalidate the key the request exposed. It reports false (a
// protocol violation) otherwise.
func (q *HostQueue[S]) Invalidated(s *HostSlot[S], key uint32) bool {
	if !s.mapped || s.rkey != key {
		return false
	}
	s.mapped = false // remotely invalidated
	return true
}

// Prepare sets the slot's send work request: the first n bytes of its
// send buffer followed, when data.Length > 0, by data (in-capsule or
// immediate data from the caller's registered buffer).
func (q *HostQueue[S]) Prepare(s *HostSlot[S], n int, data rdma.SGE) {
	s.sge[0] = rdma.SGE{MR: q.sendMR, Offset: s.bufOff, Length: n}
	k := 1
	if data.Length > 0 {
		s.sge[1] = data
		k = 2
	}
	s.wr = rdma.SendWR{ID: kindSend | uint64(s.idx), Op: rdma.OpSend, Flags: rdma.Signaled, SGL: s.sge[:k]}
}

// Send posts the slot's prepared send work request, with no state change
// (self-managed slots; Post for the others).
func (q *HostQueue[S]) Send(s *HostSlot[S]) error {
	if err := q.qp.PostSend(&s.wr); err != nil {
		return fmt.Errorf("rdmaq: posting a send: %w", err)
	}
	return nil
}

// Post hands a prepared busy slot to the completion goroutine and posts
// its request, which then waits for its send completion and its response
// (Respond). On error the slot is the caller's again (its key unmapped),
// unless the queue failed meanwhile and the sweep completed it: then Post
// returns nil, the completion having been delivered.
func (q *HostQueue[S]) Post(s *HostSlot[S]) error {
	q.mu.Lock()
	s.pending = waitSend | waitResp
	q.mu.Unlock()
	s.issued.Store(time.Now().UnixNano())
	s.state.Store(SlotInFlight)
	if err := q.qp.PostSend(&s.wr); err != nil {
		if s.state.CompareAndSwap(SlotInFlight, SlotBusy) {
			s.issued.Store(0)
			q.Unmap(s)
			select {
			case <-q.dead:
				return q.reqErr
			default:
			}
			return fmt.Errorf("rdmaq: posting a request: %w", err)
		}
	}
	return nil
}

// Resend posts an in-flight slot's request again (a retry after a unit
// attention), from the completion goroutine; it waits for a new send
// completion and response.
func (q *HostQueue[S]) Resend(s *HostSlot[S]) error {
	q.mu.Lock()
	s.pending = waitSend | waitResp
	q.mu.Unlock()
	if err := q.qp.PostSend(&s.wr); err != nil {
		return fmt.Errorf("rdmaq: posting a request again: %w", err)
	}
	return nil
}

// Outstanding tells whether s waits for a response (it is in flight and
// the response has not come). Call it on the completion goroutine before
// trusting a response's tag.
func (q *HostQueue[S]) Outstanding(s *HostSlot[S]) bool {
	if s.state.Load() != SlotInFlight {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return s.pending&waitResp != 0
}

// Respond records that s's response arrived (completion goroutine); the
// slot completes once its send completion is in too.
func (q *HostQueue[S]) Respond(s *HostSlot[S]) {
	q.done(s, waitResp, nil, q.inRecv)
}

// Abort completes an in-flight slot whose response will never come (a
// task management function aborted it) with err, from any goroutine. It
// reports whether s was waiting for a response.
func (q *HostQueue[S]) Abort(s *HostSlot[S], err error) bool {
	if s.state.Load() != SlotInFlight {
		return false
	}
	return q.done(s, waitResp, err, false)
}

// done clears bits of s's pending set and completes it when nothing is
// left, later (after the message's receive buffer is reposted) when
// deferred. It reports whether any of the bits was set.
func (q *HostQueue[S]) done(s *HostSlot[S], bits uint8, err error, deferred bool) bool {
	q.mu.Lock()
	if s.state.Load() != SlotInFlight || s.pending&bits == 0 {
		q.mu.Unlock()
		return false
	}
	if err != nil && s.Err == nil {
		s.Err = err
	}
	s.pending &^= bits
	finished := s.pending == 0
	q.mu.Unlock()
	if finished {
		if deferred {
			q.deferred = append(q.deferred, s)
		} else {
			q.finish(s)
		}
	}
	return true
}

// finish hands a completed slot to the handler.
func (q *HostQueue[S]) finish(s *HostSlot[S]) {
	s.issued.Store(0)
	q.Unmap(s)
	s.state.Store(SlotBusy)
	q.h.Complete(s)
}

// sweep completes every in-flight slot of a failed queue with its error.
func (q *HostQueue[S]) sweep() {
	if q.cfg.SelfManaged {
		return
	}
	err := q.ReqErr()
	for i := range q.slots {
		s := &q.slots[i]
		q.mu.Lock()
		claim := s.state.Load() == SlotInFlight && s.pending != 0
		if claim {
			if s.Err == nil {
				s.Err = err
			}
			s.pending = 0
		}
		q.mu.Unlock()
		if claim {
			q.finish(s)
		}
	}
}

// Overdue returns a slot in flight for longer than d at now (UnixNano),
// if any.
func (q *HostQueue[S]) Overdue(now int64, d time.Duration) *HostSlot[S] {
	for i := range q.slots {
		s := &q.slots[i]
		if t := s.issued.Load(); t != 0 && now-t > int64(d) && !q.cfg.Pools[s.pool].NoTimeout {
			return s
		}
	}
	return nil
}

// CtlBuf returns control buffer i.
func (q *HostQueue[S]) CtlBuf(i int) []byte { return q.ctl.get(i) }

// SendCtl posts the first n bytes of control buffer i, signaled when
// signaled is set (its completion is then reported to CtlSent when the
// handler implements CtlSender).
func (q *HostQueue[S]) SendCtl(i, n int, signaled bool) error {
	var flags rdma.WRFlags
	if signaled {
		flags = rdma.Signaled
	}
	return q.ctl.send(q.qp, i, n, flags)
}

// CtlSender is optionally implemented by a HostHandler that wants the send
// completions of its signaled control messages.
type CtlSender interface {
	CtlSent(i int)
}

// Drainer is optionally implemented by a HostHandler: Drained is called on
// the completion goroutine when it stops, after the queue failed (a
// self-managed protocol completes what was in flight there).
type Drainer interface {
	Drained()
}

// run is the completion goroutine: it ends when the queue failed and its
// requests were swept.
func (q *HostQueue[S]) run() {
	defer close(q.exited)
	if q.cfg.SelfManaged {
		defer q.release()
	}
	if d, ok := q.h.(Drainer); ok {
		defer d.Drained()
	}
	defer q.sweep()
	cs, _ := q.h.(CtlSender)
	for {
		n := q.cq.Poll(q.wcs)
		if n == 0 {
			if q.Err() != nil {
				return
			}
			if err := q.cq.Wait(q.ctx); err != nil {
				q.Fail(fmt.Errorf("rdmaq: waiting for completions: %w", err))
				return
			}
			continue
		}
		for i := range q.wcs[:n] {
			if err := q.complete(&q.wcs[i], cs); err != nil {
				q.Fail(err)
				if !q.cfg.SelfManaged {
					return
				}
			}
		}
	}
}

func (q *HostQueue[S]) complete(wc *rdma.WC, cs CtlSender) error {
	if q.cfg.SelfManaged && q.Err() != nil {
		return nil // flushed, or too late: the protocol sweeps
	}
	if wc.Status != rdma.StatusSuccess {
		if err := q.qp.Err(); err != nil {
			return err
		}
		return wc.Err()
	}
	idx := int(wc.ID &^ kindMask)
	switch wc.ID & kindMask {
	case kindRecv:
		m := q.msg(idx, wc.ByteLen)
		if wc.Flags&rdma.WCWithInv != 0 {
			m.WithInv, m.Invalidated = true, wc.InvalidatedKey
		}
		q.inRecv = true
		rerr := q.h.Recv(m)
		q.inRecv = false
		var perr error
		if rerr == nil {
			perr = q.postRecv(idx)
		}
		for _, s := range q.deferred {
			q.finish(s)
		}
		clear(q.deferred)
		q.deferred = q.deferred[:0]
		if rerr != nil {
			return rerr
		}
		if perr != nil {
			if errors.Is(perr, rdma.ErrQPState) {
				// The connection already failed: keep draining the CQ,
				// whose remaining completions (a message that arrived
				// before the close, then the flushed ones) say why.
				return nil
			}
			return fmt.Errorf("rdmaq: reposting a receive: %w", perr)
		}
	case kindSend:
		s := &q.slots[idx]
		if q.cfg.SelfManaged {
			q.h.Sent(s)
			return nil
		}
		q.done(s, waitSend, nil, false)
	case kindCtl:
		if cs != nil {
			cs.CtlSent(idx)
		}
	}
	return nil
}

func (q *HostQueue[S]) msg(i, n int) Msg {
	off := i * q.stride
	return Msg{Index: i, Len: n, Head: q.recvBuf[off : off+n : off+q.cfg.RecvLen]}
}

// Close fails the queue with reason (if it had not failed), waits for the
// completion goroutine (which completes what was in flight) and frees
// everything.
func (q *HostQueue[S]) Close(reason error) {
	q.Fail(reason)
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

// release frees the queue's resources, once. The fields keep their values:
// a submitter racing with the end of the queue gets an error from the
// provider, not a nil dereference.
func (q *HostQueue[S]) release() {
	q.releaseOnce.Do(func() {
		for i := range q.slots {
			if s := &q.slots[i]; s.fmr != nil {
				s.fmr.Close()
			}
		}
		for _, mr := range []rdma.MR{q.sendMR, q.recvMR, q.ctl.mr} {
			if mr != nil {
				mr.Deregister()
			}
		}
		if q.qp != nil {
			q.qp.Close()
		}
		if q.cq != nil {
			q.cq.Close()
		}
		if q.cfg.OwnPD && q.cfg.PD != nil {
			q.cfg.PD.Close()
		}
	})
}
