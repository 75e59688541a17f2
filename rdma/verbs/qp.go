//go:build verbs

package verbs

/*
#include "cverbs.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"unsafe"

	"github.com/rdisk/rdisk/rdma"
)

const recvBit = uint64(1) << 63

type sqSlot struct {
	id       uint64
	invKey   uint32
	op       rdma.Opcode
	signaled bool // the device reports this WR (the caller's or internal)
	report   bool // the caller asked for its success
	done     bool // completed; wc holds the completion
	wc       rdma.WC
}

type qp struct {
	p    *Provider
	pd   *protDomain
	scq  *cq
	qp   *C.struct_ibv_qp
	num  uint32
	ctxv any

	maxSend, maxRecv, maxSendSGE, maxRecvSGE int

	sqMu sync.Mutex
	// Posted WRs are sqEmit..sqHead-1; completions are reported in posting
	// order (siw completes a Send behind an outstanding Read first).
	sqHead, sqEmit, sqMaxDone uint64
	sqSlots                   []sqSlot
	unsignaled                int
	// The chain of WRs posted with rdma.More not yet handed to the
	// device: sqHead-chainN..sqHead-1, in C memory (cwr, csge).
	cwr      []C.struct_rd_swr
	csge     []C.struct_rd_sge
	chainN   int
	chainSGE int
	sqDead   bool // the QP failed: post at once, hold nothing

	rqMu           sync.Mutex
	rqHead, rqTail uint64
	rqSlots        []uint64
	rsge           []C.struct_rd_sge // C memory

	mu           sync.Mutex
	state        rdma.QPState
	err          error
	done         chan struct{}
	cm           *cmID
	laddr, raddr net.Addr
	teardown     sync.WaitGroup
	closeCh      chan struct{}
}

func (pd *protDomain) CreateQP(cfg rdma.QPConfig) (rdma.QP, error) {
	scq, ok1 := cfg.SendCQ.(*cq)
	rcq, ok2 := cfg.RecvCQ.(*cq)
	if !ok1 || !ok2 || scq.p.dev != pd.p.dev || rcq.p.dev != pd.p.dev {
		return nil, errors.New("verbs: CreateQP needs CQs of this device")
	}
	def := func(v, d int) int {
		if v <= 0 {
			return d
		}
		return v
	}
	q := &qp{p: pd.p, pd: pd, scq: scq, ctxv: cfg.Context, done: make(chan struct{}),
		maxSend: def(cfg.MaxSendWR, 128), maxRecv: def(cfg.MaxRecvWR, 128),
		maxSendSGE: def(cfg.MaxSendSGE, 4), maxRecvSGE: def(cfg.MaxRecvSGE, 4)}
	if q.maxSendSGE > pd.p.dev.maxSGE || q.maxRecvSGE > pd.p.dev.maxSGE {
		return nil, fmt.Errorf("verbs: %d/%d scatter entries asked, device %s has %d", q.maxSendSGE, q.maxRecvSGE, pd.p.dev.name, pd.p.dev.maxSGE)
	}
	var a C.struct_ibv_qp_init_attr
	a.send_cq = scq.cq
	a.recv_cq = rcq.cq
	a.cap.max_send_wr = C.uint32_t(q.maxSend)
	a.cap.max_recv_wr = C.uint32_t(q.maxRecv)
	a.cap.max_send_sge = C.uint32_t(q.maxSendSGE)
	a.cap.max_recv_sge = C.uint32_t(q.maxRecvSGE)
	a.qp_type = C.IBV_QPT_RC
	h, err := C.ibv_create_qp(pd.pd, &a)
	if h == nil {
		if err == nil {
			// libsiw returns NULL without setting errno.
			err = errors.New("failed, the provider set no errno")
		}
		return nil, fmt.Errorf("verbs: ibv_create_qp (%d/%d WRs, %d/%d SGEs) on %s: %v", q.maxSend, q.maxRecv, q.maxSendSGE, q.maxRecvSGE, pd.p.dev.name, err)
	}
	iw := C.int(0)
	if pd.p.dev.iwarp {
		iw = 1
	}
	if rc := C.rd_qp_init(h, iw, C.int(pd.p.dev.port)); rc != 0 {
		C.ibv_destroy_qp(h)
		return nil, fmt.Errorf("verbs: modify QP to INIT: %v", syscall.Errno(rc))
	}
	q.qp = h
	q.num = uint32(h.qp_num)
	q.sqSlots = make([]sqSlot, q.maxSend)
	q.rqSlots = make([]uint64, q.maxRecv)
	q.cwr = unsafe.Slice((*C.struct_rd_swr)(C.calloc(C.RD_MAX_CHAIN, C.size_t(unsafe.Sizeof(C.struct_rd_swr{})))), C.RD_MAX_CHAIN)
	sz := C.size_t(unsafe.Sizeof(C.struct_rd_sge{}))
	q.csge = unsafe.Slice((*C.struct_rd_sge)(C.calloc(C.size_t(C.RD_MAX_CHAIN*q.maxSendSGE), sz)), C.RD_MAX_CHAIN*q.maxSendSGE)
	q.rsge = unsafe.Slice((*C.struct_rd_sge)(C.calloc(C.size_t(q.maxRecvSGE), sz)), q.maxRecvSGE)
	d := pd.p.dev
	d.mu.Lock()
	d.qps[q.num] = q
	d.mu.Unlock()
	return q, nil
}

func (q *qp) Num() uint32  { return q.num }
func (q *qp) Context() any { return q.ctxv }

func (q *qp) State() rdma.QPState {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state
}

func (q *qp) Done() <-chan struct{} { return q.done }

func (q *qp) Err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

func (q *qp) LocalAddr() net.Addr {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.laddr == nil {
		return &net.TCPAddr{}
	}
	return q.laddr
}

func (q *qp) RemoteAddr() net.Addr {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.raddr == nil {
		return &net.TCPAddr{}
	}
	return q.raddr
}

func (q *qp) startConnect(c *cmID) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state != rdma.QPInit {
		return fmt.Errorf("verbs: QP %d is %s, not init", q.num, q.state)
	}
	q.state = rdma.QPConnecting
	q.cm = c
	return nil
}

func (q *qp) connectFailed(err error) {
	q.fail(err)
}

func (q *qp) established(laddr, raddr net.Addr) {
	q.mu.Lock()
	if q.state != rdma.QPConnecting {
		q.mu.Unlock()
		return
	}
	q.state = rdma.QPConnected
	q.laddr, q.raddr = laddr, raddr
	c := q.cm
	q.mu.Unlock()
	q.p.mu.Lock()
	q.p.qps[q] = struct{}{}
	q.p.mu.Unlock()
	q.teardown.Add(1)
	go q.cmEvents(c)
}

// cmEvents follows the connection after it is established.
func (q *qp) cmEvents(c *cmID) {
	defer q.teardown.Done()
	for {
		select {
		case e := <-c.evs:
			switch e.typ {
			case C.RDMA_CM_EVENT_DISCONNECTED:
				q.fail(errors.New("verbs: disconnected by the peer"))
			case C.RDMA_CM_EVENT_DEVICE_REMOVAL:
				q.fail(fmt.Errorf("verbs: device %s removed", q.p.dev.name))
			case C.RDMA_CM_EVENT_ADDR_CHANGE:
				q.fail(errors.New("verbs: address change on the connection's device"))
			case C.RDMA_CM_EVENT_TIMEWAIT_EXIT:
			default:
				q.p.log.Debug("verbs: CM event", "qp", q.num, "event", eventName(e.typ), "status", e.status)
			}
		case <-q.done:
			q.mu.Lock()
			closed := q.state == rdma.QPClosed
			q.mu.Unlock()
			if closed {
				return
			}
			// Keep answering events (DISCONNECTED after our disconnect)
			// until Close.
			select {
			case e := <-c.evs:
				_ = e
			case <-q.closing():
				return
			}
		}
	}
}

func (q *qp) closing() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closeCh == nil {
		q.closeCh = make(chan struct{})
	}
	return q.closeCh
}

// fail moves the QP to the error state: outstanding work is flushed, and
// the connection is disconnected so the peer learns of it.
func (q *qp) fail(err error) {
	q.mu.Lock()
	if q.state == rdma.QPError || q.state == rdma.QPClosed {
		q.mu.Unlock()
		return
	}
	wasConn := q.state == rdma.QPConnected || q.state == rdma.QPConnecting
	q.state = rdma.QPError
	q.err = err
	close(q.done)
	c := q.cm
	q.teardown.Add(1)
	q.mu.Unlock()
	q.p.log.Debug("verbs: QP error", "qp", q.num, "err", err)
	go func() {
		defer q.teardown.Done()
		// A chain held for rdma.More completes flushed, behind the
		// WRs the device flushes (siw ignores WRs posted to a QP in
		// the error state: they would never complete).
		q.sqMu.Lock()
		q.sqDead = true
		held := q.chainN
		if held > 0 {
			q.flushHeldLocked(q.sqHead - uint64(held))
		}
		q.sqMu.Unlock()
		if held > 0 {
			q.scq.kick(q)
		}
		if wasConn && c != nil {
			C.rdma_disconnect(c.id)
		}
		C.rd_qp_error(q.qp)
	}()
}

func (q *qp) checkState() {
	q.mu.Lock()
	st := q.state
	q.mu.Unlock()
	if st != rdma.QPConnected {
		return
	}
	if s := C.rd_qp_state(q.qp); s == C.IBV_QPS_ERR {
		q.fail(errors.New("verbs: the device moved the QP to the error state"))
	}
}

// Connect implements rdma.QP: rdma_resolve_addr, rdma_resolve_route and
// rdma_connect with the QP bound to the new cm_id.
func (q *qp) Connect(ctx context.Context, addr string, prm rdma.ConnParam) ([]byte, error) {
	if err := q.p.checkPD(len(prm.PrivateData), pdConnect); err != nil {
		return nil, err
	}
	ap, err := parseAddr(addr)
	if err != nil {
		return nil, err
	}
	c, err := q.p.newCMID()
	if err != nil {
		return nil, err
	}
	if err := q.startConnect(c); err != nil {
		c.destroy()
		return nil, err
	}
	fail := func(err error) ([]byte, error) {
		q.fail(err)
		return nil, err
	}
	var ss C.struct_sockaddr_storage
	if err := toSockaddr(&ss, ap); err != nil {
		return fail(err)
	}
	if rc, err := C.rdma_resolve_addr(c.id, nil, (*C.struct_sockaddr)(unsafe.Pointer(&ss)), 2000); rc != 0 {
		return fail(fmt.Errorf("verbs: rdma_resolve_addr %s: %v", ap, err))
	}
	if e, err := c.wait(ctx); err != nil {
		return fail(err)
	} else if e.typ != C.RDMA_CM_EVENT_ADDR_RESOLVED {
		return fail(cmError("resolve address "+ap.String(), e))
	}
	if v := C.rd_id_verbs(c.id); v != q.p.dev.ctx {
		name := "none"
		if v != nil {
			name = C.GoString(C.ibv_get_device_name(v.device))
		}
		return fail(fmt.Errorf("verbs: %s is reached through RDMA device %s, not %s", ap, name, q.p.dev.name))
	}
	if rc, err := C.rdma_resolve_route(c.id, 2000); rc != 0 {
		return fail(fmt.Errorf("verbs: rdma_resolve_route %s: %v", ap, err))
	}
	if e, err := c.wait(ctx); err != nil {
		return fail(err)
	} else if e.typ != C.RDMA_CM_EVENT_ROUTE_RESOLVED {
		return fail(cmError("resolve route "+ap.String(), e))
	}
	var cp C.struct_rdma_conn_param
	ptr, err := q.p.connParam(&cp, prm, q, pdConnect)
	if ptr != nil {
		defer C.free(ptr)
	}
	if err != nil {
		return fail(err)
	}
	C.rd_set_qp(c.id, q.qp)
	if rc, err := C.rdma_connect(c.id, &cp); rc != 0 {
		return fail(fmt.Errorf("verbs: rdma_connect %s: %v", ap, err))
	}
	for {
		e, err := c.wait(ctx)
		if err != nil {
			return fail(err)
		}
		switch e.typ {
		case C.RDMA_CM_EVENT_ESTABLISHED:
			q.established(c.addr(false), c.addr(true))
			return e.priv, nil
		case C.RDMA_CM_EVENT_REJECTED:
			re := &rdma.RejectError{PrivateData: e.priv}
			if e.status != 28 { // IB_CM_REJ_CONSUMER_DEFINED: the ULP rejected
				re.Reason = fmt.Sprintf("CM status %d%s", e.status, statusText(e.status))
			}
			q.fail(re)
			return nil, re
		case C.RDMA_CM_EVENT_CONNECT_ERROR, C.RDMA_CM_EVENT_UNREACHABLE, C.RDMA_CM_EVENT_DEVICE_REMOVAL, C.RDMA_CM_EVENT_DISCONNECTED:
			return fail(cmError("connect "+ap.String(), e))
		}
	}
}

// Disconnect implements rdma.QP.
func (q *qp) Disconnect() error {
	q.mu.Lock()
	st := q.state
	q.mu.Unlock()
	if st == rdma.QPClosed {
		return rdma.ErrClosed
	}
	q.fail(errors.New("verbs: disconnected"))
	return nil
}

// Close implements rdma.QP.
func (q *qp) Close() error {
	q.Disconnect()
	q.mu.Lock()
	if q.state == rdma.QPClosed {
		q.mu.Unlock()
		return nil
	}
	q.state = rdma.QPClosed
	if q.closeCh == nil {
		q.closeCh = make(chan struct{})
	}
	close(q.closeCh)
	c := q.cm
	q.mu.Unlock()
	q.teardown.Wait()
	q.p.mu.Lock()
	delete(q.p.qps, q)
	q.p.mu.Unlock()
	if c != nil {
		c.destroy()
	}
	d := q.p.dev
	d.mu.Lock()
	delete(d.qps, q.num)
	d.mu.Unlock()
	rc := C.ibv_destroy_qp(q.qp)
	C.free(unsafe.Pointer(unsafe.SliceData(q.cwr)))
	C.free(unsafe.Pointer(unsafe.SliceData(q.csge)))
	C.free(unsafe.Pointer(unsafe.SliceData(q.rsge)))
	if rc != 0 {
		return fmt.Errorf("verbs: ibv_destroy_qp: %v", syscall.Errno(rc))
	}
	return nil
}

func (q *qp) postState(recv bool) error {
	q.mu.Lock()
	st := q.state
	q.mu.Unlock()
	switch st {
	case rdma.QPConnected:
		return nil
	case rdma.QPInit, rdma.QPConnecting:
		if recv {
			return nil
		}
		return rdma.ErrNotConnected
	case rdma.QPClosed:
		return rdma.ErrClosed
	}
	return rdma.ErrQPState
}

// fillSGL copies a scatter list into C memory, checking every entry; it
// returns the entries written and their bytes.
func fillSGL(dst []C.struct_rd_sge, sgl []rdma.SGE) (n, bytes int, err error) {
	if len(sgl) > len(dst) {
		return 0, 0, rdma.ErrTooManySGE
	}
	for i := range sgl {
		g := &sgl[i]
		m, ok := g.MR.(*mr)
		if !ok || g.Buf != nil || g.Offset < 0 || g.Length < 0 || g.Offset+g.Length > len(m.buf) {
			return 0, 0, rdma.ErrBadSGE
		}
		if g.Length == 0 {
			continue
		}
		dst[n] = C.struct_rd_sge{addr: C.uint64_t(m.addr + uint64(g.Offset)), length: C.uint32_t(g.Length), lkey: C.uint32_t(m.lkey)}
		n++
		bytes += g.Length
	}
	return n, bytes, nil
}

var ibvOp = [...]C.uint32_t{
	rdma.OpSend:        C.IBV_WR_SEND,
	rdma.OpSendWithInv: C.IBV_WR_SEND_WITH_INV,
	rdma.OpRDMAWrite:   C.IBV_WR_RDMA_WRITE,
	rdma.OpRDMARead:    C.IBV_WR_RDMA_READ,
	rdma.OpLocalInv:    C.IBV_WR_LOCAL_INV,
}

// PostSend implements rdma.QP: no Go allocation, and one ibv_post_send
// for each chain of WRs posted with rdma.More (RD_MAX_CHAIN at most).
func (q *qp) PostSend(wr *rdma.SendWR) error {
	if err := q.postState(false); err != nil {
		return err
	}
	if int(wr.Op) >= len(ibvOp) {
		return fmt.Errorf("verbs: opcode %s cannot be posted", wr.Op)
	}
	if len(wr.SGL) > q.maxSendSGE {
		return rdma.ErrTooManySGE
	}
	if wr.Op == rdma.OpLocalInv {
		if f := q.p.fastRegKey(wr.InvalidateKey); f != nil {
			q.lockSQ()
			if q.sqHead-q.sqEmit >= uint64(q.maxSend) {
				q.sqMu.Unlock()
				return rdma.ErrQueueFull
			}
			// The WRs before it are posted first: completing it
			// completes the unsignaled ones before it.
			if q.chainN > 0 {
				if err := q.postChainLocked(false); err != nil {
					q.sqMu.Unlock()
					q.scq.kick(q)
					return err
				}
			}
			q.localInvLocked(wr, f)
			q.sqMu.Unlock()
			q.scq.kick(q)
			return nil
		}
	}
	q.lockSQ()
	if q.sqHead-q.sqEmit >= uint64(q.maxSend) {
		q.sqMu.Unlock()
		return rdma.ErrQueueFull
	}
	if q.chainN == len(q.cwr) {
		if err := q.postChainLocked(false); err != nil {
			q.sqMu.Unlock()
			q.scq.kick(q)
			return err
		}
	}
	n, size, err := fillSGL(q.csge[q.chainSGE:q.chainSGE+q.maxSendSGE], wr.SGL)
	if err != nil {
		q.sqMu.Unlock()
		return err
	}
	seq := q.sqHead
	slot := &q.sqSlots[seq%uint64(q.maxSend)]
	*slot = sqSlot{id: wr.ID, op: wr.Op}
	var flags C.uint32_t
	if wr.Flags&rdma.Signaled != 0 {
		q.unsignaled = 0
		flags |= C.IBV_SEND_SIGNALED
		slot.signaled, slot.report = true, true
	} else if q.unsignaled++; q.unsignaled >= q.maxSend/2 || (q.p.dev.vendor == siwVendor && size >= siwZeroCopyMin && wr.Op != rdma.OpRDMARead) {
		// Signaled for the provider's sake, not reported: every
		// maxSend/2 so that unsignaled WRs retire, and on siw every one
		// that carries a page or more, which siw would otherwise send
		// zero-copy (siwZeroCopyMin).
		q.unsignaled = 0
		flags |= C.IBV_SEND_SIGNALED
		slot.signaled = true
	}
	if wr.Flags&rdma.Solicited != 0 {
		flags |= C.IBV_SEND_SOLICITED
	}
	if wr.Flags&rdma.Fence != 0 {
		flags |= C.IBV_SEND_FENCE
	}
	if wr.Op == rdma.OpLocalInv || wr.Op == rdma.OpSendWithInv {
		slot.invKey = wr.InvalidateKey
	}
	q.cwr[q.chainN] = C.struct_rd_swr{wr_id: C.uint64_t(seq), raddr: C.uint64_t(wr.RemoteAddr), rkey: C.uint32_t(wr.RemoteKey),
		inv_key: C.uint32_t(wr.InvalidateKey), opcode: ibvOp[wr.Op], flags: flags, nsge: C.uint32_t(n), sge_off: C.uint32_t(q.chainSGE)}
	q.chainN++
	q.chainSGE += n
	q.sqHead++
	if wr.Flags&rdma.More != 0 && !q.sqDead {
		q.sqMu.Unlock()
		return nil
	}
	err = q.postChainLocked(true)
	q.sqMu.Unlock()
	if err != nil && err != rdma.ErrQueueFull {
		q.scq.kick(q)
	}
	return err
}

// postChainLocked hands the held chain, sqHead-chainN..sqHead-1, to the
// device with one ibv_post_send. When the device takes only part of it,
// the WRs the callers were told were posted complete with StatusFlushed
// and the QP fails; with last, the last WR is the one being posted: it is
// taken back and its error returned, as for a single WR. The caller kicks
// the CQ after releasing q.sqMu unless the error is ErrQueueFull (nothing
// was flushed). q.sqMu is held.
func (q *qp) postChainLocked(last bool) error {
	n := q.chainN
	q.chainN, q.chainSGE = 0, 0
	var bad C.uint64_t
	rc := C.rd_post_send(q.qp, unsafe.SliceData(q.cwr), C.int(n), unsafe.SliceData(q.csge), &bad)
	if rc == 0 {
		return nil
	}
	first := q.sqHead - uint64(n)
	k := uint64(bad) // the first WR not posted
	if k < first || k >= q.sqHead {
		k = first
	}
	err := fmt.Errorf("verbs: ibv_post_send: %v", syscall.Errno(rc))
	if last {
		q.sqHead-- // the WR being posted: its caller gets the error
		if k == q.sqHead {
			if rc == C.ENOMEM {
				return rdma.ErrQueueFull
			}
			return err
		}
	}
	q.flushHeldLocked(k)
	go q.fail(fmt.Errorf("verbs: ibv_post_send of a chain of %d: %v", n, syscall.Errno(rc)))
	return err
}

// flushHeldLocked completes the WRs from..sqHead-1, which never reached
// the device, with StatusFlushed, and empties the chain. q.sqMu is held;
// the caller kicks the CQ after releasing it.
func (q *qp) flushHeldLocked(from uint64) {
	q.chainN, q.chainSGE = 0, 0
	for seq := from; seq < q.sqHead; seq++ {
		s := &q.sqSlots[seq%uint64(q.maxSend)]
		s.done, s.signaled = true, true
		s.wc = rdma.WC{ID: s.id, Op: s.op, Status: rdma.StatusFlushed, QPNum: q.num, QP: q}
	}
	if q.sqHead > q.sqMaxDone {
		q.sqMaxDone = q.sqHead
	}
}

// siwZeroCopyMin is where Linux siw starts sending unsignaled WQEs
// zero-copy: siw_qp_prepare_tx (siw_qp_tx.c) takes sendpage for a WQE of
// SENDPAGE_THRESH (PAGE_SIZE) bytes or more without SIW_WQE_SIGNALLED, and
// completes it, and the WQEs after it, once TCP holds the pages rather
// than once it has sent them. A caller reusing the memory on a later
// completion (a target's slot freed when its response Send completes)
// would then send the next request's data in its place. siw copies a
// signaled WQE into the socket before completing it, so PostSend signals
// those WQEs itself (and does not report their completions): the rdma.QP
// contract, memory reusable once a later work request completed, holds.
const siwZeroCopyMin = 4096

// lockSQ takes q.sqMu with room in the send queue if completions the
// caller has not polled can make some: a full queue may be full of
// unsignaled WRs already done on the device, which only retire when the
// completion of the WR signaled behind them is polled (cq.reap).
func (q *qp) lockSQ() {
	q.sqMu.Lock()
	if q.sqHead-q.sqEmit < uint64(q.maxSend) {
		return
	}
	q.sqMu.Unlock()
	q.scq.reap()
	q.sqMu.Lock()
}

// PostRecv implements rdma.QP.
func (q *qp) PostRecv(wr *rdma.RecvWR) error {
	if err := q.postState(true); err != nil {
		return err
	}
	q.rqMu.Lock()
	defer q.rqMu.Unlock()
	if len(wr.SGL) > q.maxRecvSGE {
		return rdma.ErrTooManySGE
	}
	if q.rqHead-q.rqTail >= uint64(q.maxRecv) {
		return rdma.ErrQueueFull
	}
	n, _, err := fillSGL(q.rsge, wr.SGL)
	if err != nil {
		return err
	}
	if n == 0 && q.p.dev.iwarp {
		if q.rsge[0], err = q.pd.zeroSGE(); err != nil {
			return err
		}
		n = 1
	}
	seq := q.rqHead
	q.rqSlots[seq%uint64(q.maxRecv)] = wr.ID
	if rc := C.rd_post_recv(q.qp, C.uint64_t(seq|recvBit), unsafe.SliceData(q.rsge), C.int(n)); rc != 0 {
		if rc == C.ENOMEM {
			return rdma.ErrQueueFull
		}
		return fmt.Errorf("verbs: ibv_post_recv: %v", syscall.Errno(rc))
	}
	q.rqHead++
	return nil
}

// complete takes one device completion of q; what is to be reported goes
// to c.soft, in posting order for the send queue. c.mu is held.
func (q *qp) complete(c *cq, w *C.struct_rd_wc) {
	var wcv rdma.WC
	if q.completeOne(c, w, &wcv) {
		c.soft = append(c.soft, wcv)
	}
}

// emitLocked reports the send-queue completions that are next in posting
// order. q.sqMu and c.mu are held.
func (q *qp) emitLocked(c *cq) {
	for q.sqEmit < q.sqHead {
		s := &q.sqSlots[q.sqEmit%uint64(q.maxSend)]
		if !s.done {
			if s.signaled || q.sqMaxDone <= q.sqEmit {
				return
			}
			// Unsignaled and a later WR completed: done.
			q.sqEmit++
			continue
		}
		if s.report || s.wc.Status != rdma.StatusSuccess {
			c.soft = append(c.soft, s.wc)
		}
		s.done = false
		q.sqEmit++
	}
}

// localInvLocked invalidates a key of an emulated fast-registration MR in
// software (libsiw has no IBV_WR_LOCAL_INV, rxe refuses it on user MRs)
// and completes the WR in order with the others. q.sqMu is held; the
// completion is handed to the CQ after it is released.
func (q *qp) localInvLocked(wr *rdma.SendWR, f *fastReg) {
	f.invalidateKey(wr.InvalidateKey)
	seq := q.sqHead
	q.sqSlots[seq%uint64(q.maxSend)] = sqSlot{id: wr.ID, op: rdma.OpLocalInv, invKey: wr.InvalidateKey,
		report: wr.Flags&rdma.Signaled != 0, done: true,
		wc: rdma.WC{ID: wr.ID, Op: rdma.OpLocalInv, QPNum: q.num, QP: q}}
	q.sqHead++
	q.sqMaxDone = q.sqHead
}

// completeOne converts one completion; false when it is not reported
// directly.
func (q *qp) completeOne(c *cq, w *C.struct_rd_wc, wc *rdma.WC) bool {
	seq := uint64(w.wr_id)
	*wc = rdma.WC{Status: wcStatus(w.status), ByteLen: int(w.byte_len), QPNum: q.num, QP: q}
	if seq&recvBit != 0 {
		seq &^= recvBit
		q.rqMu.Lock()
		wc.ID = q.rqSlots[seq%uint64(q.maxRecv)]
		if seq+1 > q.rqTail {
			q.rqTail = seq + 1
		}
		q.rqMu.Unlock()
		wc.Op = rdma.OpRecv
		if w.wc_flags&C.IBV_WC_WITH_INV != 0 && wc.Status == rdma.StatusSuccess {
			wc.Flags |= rdma.WCWithInv
			wc.InvalidatedKey = uint32(w.inv_rkey)
			q.p.invalidated(wc.InvalidatedKey)
		}
	} else {
		if wc.Status != rdma.StatusSuccess {
			wc.ByteLen = 0
		}
		q.sqMu.Lock()
		if seq < q.sqEmit || seq >= q.sqHead {
			// An unsignaled WR passed over by a later completion
			// failed late: report it as it comes.
			q.sqMu.Unlock()
			if wc.Status == rdma.StatusSuccess {
				return false
			}
			c.soft = append(c.soft, *wc)
		} else {
			s := &q.sqSlots[seq%uint64(q.maxSend)]
			wc.ID, wc.Op = s.id, s.op
			if wc.Status == rdma.StatusSuccess && s.op == rdma.OpLocalInv {
				q.p.invalidated(s.invKey)
			}
			s.done, s.wc = true, *wc
			if seq+1 > q.sqMaxDone {
				q.sqMaxDone = seq + 1
			}
			q.emitLocked(c)
			q.sqMu.Unlock()
		}
	}
	if wc.Status != rdma.StatusSuccess && wc.Status != rdma.StatusFlushed {
		q.fail(fmt.Errorf("verbs: %s completed with %s (%s, vendor error %#x)", wc.Op, wc.Status,
			C.GoString(C.ibv_wc_status_str(uint32(w.status))), uint32(w.vendor_err)))
	}
	return uint64(w.wr_id)&recvBit != 0
}

func wcStatus(s C.uint32_t) rdma.Status {
	switch s {
	case C.IBV_WC_SUCCESS:
		return rdma.StatusSuccess
	case C.IBV_WC_LOC_LEN_ERR:
		return rdma.StatusLocalLength
	case C.IBV_WC_LOC_QP_OP_ERR:
		return rdma.StatusLocalQPErr
	case C.IBV_WC_LOC_PROT_ERR, C.IBV_WC_MW_BIND_ERR:
		return rdma.StatusLocalProt
	case C.IBV_WC_WR_FLUSH_ERR:
		return rdma.StatusFlushed
	case C.IBV_WC_REM_ACCESS_ERR:
		return rdma.StatusRemoteAccess
	case C.IBV_WC_REM_OP_ERR:
		return rdma.StatusRemoteOp
	case C.IBV_WC_REM_INV_REQ_ERR:
		return rdma.StatusRemoteInvReq
	}
	return rdma.StatusGeneral
}
