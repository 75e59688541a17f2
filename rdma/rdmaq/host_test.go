package rdmaq

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/iwarp"
)

// The host tests run a HostQueue against a raw target QP: a request is
// [tag uint32] in the slot's buffer; the target answers [tag uint32] when
// the test tells it to.

type hostReq struct {
	tag  uint32
	done chan error
}

type hostHandler struct {
	q      *HostQueue[hostReq]
	mu     sync.Mutex
	failed []error
}

func (h *hostHandler) Recv(m Msg) error {
	tag := binary.LittleEndian.Uint32(m.Head)
	s := h.q.Slot(int(tag & 0xffff))
	if !h.q.Outstanding(s) || s.S.tag != tag {
		return errors.New("response for a request not outstanding")
	}
	h.q.Respond(s)
	return nil
}

func (h *hostHandler) Complete(s *HostSlot[hostReq]) { s.S.done <- s.Err }
func (h *hostHandler) Sent(*HostSlot[hostReq])       {}
func (h *hostHandler) Failed(err error) {
	h.mu.Lock()
	h.failed = append(h.failed, err)
	h.mu.Unlock()
}

// rawTarget is the peer: it receives requests and answers them on demand.
type rawTarget struct {
	t    *testing.T
	qp   rdma.QP
	cq   rdma.CQ
	mr   rdma.MR
	buf  []byte
	reqs chan uint32
}

func hostSetup(t *testing.T, cfg HostConfig) (*HostQueue[hostReq], *hostHandler, *rawTarget) {
	t.Helper()
	tp, err := iwarp.New(iwarp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tp.Close() })
	ln, err := tp.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	rt := &rawTarget{t: t, reqs: make(chan uint32, 64), buf: make([]byte, 128*64)}
	tpd, _ := tp.AllocPD()
	rt.cq, _ = tp.CreateCQ(256)
	if rt.qp, err = tpd.CreateQP(rdma.QPConfig{SendCQ: rt.cq, RecvCQ: rt.cq, MaxSendWR: 64, MaxRecvWR: 64}); err != nil {
		t.Fatal(err)
	}
	rt.mr, _ = tpd.RegisterMemory(rt.buf, rdma.AccessLocalWrite)
	for i := range 32 {
		rt.qp.PostRecv(&rdma.RecvWR{ID: uint64(i), SGL: []rdma.SGE{{MR: rt.mr, Offset: i * 64, Length: 64}}})
	}
	accepted := make(chan error, 1)
	go func() {
		req, err := ln.Accept(context.Background())
		if err == nil {
			err = req.Accept(context.Background(), rt.qp, rdma.ConnParam{})
		}
		accepted <- err
		if err != nil {
			return
		}
		wcs := make([]rdma.WC, 8)
		for {
			n := rt.cq.Poll(wcs)
			if n == 0 {
				if rt.cq.Wait(context.Background()) != nil {
					return
				}
				continue
			}
			for _, wc := range wcs[:n] {
				if wc.Status != rdma.StatusSuccess {
					return
				}
				if wc.Op == rdma.OpRecv {
					i := int(wc.ID)
					rt.reqs <- binary.LittleEndian.Uint32(rt.buf[i*64:])
					rt.qp.PostRecv(&rdma.RecvWR{ID: uint64(i), SGL: []rdma.SGE{{MR: rt.mr, Offset: i * 64, Length: 64}}})
				}
			}
		}
	}()
	hp, err := iwarp.New(iwarp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hp.Close() })
	pd, _ := hp.AllocPD()
	cfg.Provider, cfg.PD = hp, pd
	h := &hostHandler{}
	q, err := NewHostQueue(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	h.q = q
	for i := range q.Slots() {
		q.Slot(i).S.done = make(chan error, 1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := q.Connect(ctx, ln.Addr().String(), rdma.ConnParam{}); err != nil {
		t.Fatal(err)
	}
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	q.Start()
	t.Cleanup(func() {
		q.Close(errors.New("test done"))
		rt.qp.Close()
	})
	return q, h, rt
}

// answer sends the response to tag from the raw target.
func (rt *rawTarget) answer(tag uint32, slot int) {
	rt.t.Helper()
	off := 32*64 + slot*64
	binary.LittleEndian.PutUint32(rt.buf[off:], tag)
	if err := rt.qp.PostSend(&rdma.SendWR{Op: rdma.OpSend, SGL: []rdma.SGE{{MR: rt.mr, Offset: off, Length: 4}}}); err != nil {
		rt.t.Fatal(err)
	}
}

func post(t *testing.T, q *HostQueue[hostReq], s *HostSlot[hostReq], gen uint32) {
	t.Helper()
	s.S.tag = gen<<16 | uint32(s.Index())
	binary.LittleEndian.PutUint32(s.Buf(), s.S.tag)
	q.Prepare(s, 4, rdma.SGE{})
	if err := q.Post(s); err != nil {
		t.Fatal(err)
	}
}

// TestHostQueueCreditsAndPools: Acquire waits for a credit, keeps the
// reserve for the other pools, and completes requests when answered.
func TestHostQueueCreditsAndPools(t *testing.T) {
	t.Parallel()
	q, _, rt := hostSetup(t, HostConfig{Pools: []HostPool{{Slots: 4, SendLen: 16}, {Slots: 1, SendLen: 16}},
		Recvs: 8, RecvLen: 16, Credits: 3, Reserve: 1})
	a, err := q.Acquire(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := q.Acquire(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	// One credit left: the reserve, not for pool 0.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if _, err := q.Acquire(ctx, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third command slot with the last credit: %v, want to wait", err)
	}
	cancel()
	tm, err := q.Acquire(nil, 1)
	if err != nil {
		t.Fatalf("the reserved credit for pool 1: %v", err)
	}
	post(t, q, a, 1)
	post(t, q, b, 1)
	post(t, q, tm, 1)
	for range 3 {
		tag := <-rt.reqs
		rt.answer(tag, int(tag&0xffff))
	}
	for _, s := range []*HostSlot[hostReq]{a, b, tm} {
		if err := <-s.S.done; err != nil {
			t.Fatalf("slot %d: %v", s.Index(), err)
		}
		q.Put(s)
	}
	if c := q.Credits(); c != 0 {
		t.Fatalf("%d credits after three requests without returned credit, want 0", c)
	}
	q.AddCredits(3)
	if s, err := q.Acquire(nil, 0); err != nil {
		t.Fatal(err)
	} else {
		q.Release(s, true) // never sent: the credit comes back
	}
	if c := q.Credits(); c != 3 {
		t.Fatalf("credits %d, want 3", c)
	}
}

// TestHostQueueSweepAndOverdue: a lost connection completes every request
// in flight with the mapped error; Overdue skips NoTimeout pools.
func TestHostQueueSweepAndOverdue(t *testing.T) {
	t.Parallel()
	lost := errors.New("lost")
	q, h, rt := hostSetup(t, HostConfig{Pools: []HostPool{{Slots: 4, SendLen: 16}, {Slots: 1, SendLen: 16, NoTimeout: true}},
		Recvs: 8, RecvLen: 16, ReqErr: func(err error) error { return errors.Join(lost, err) }})
	var slots []*HostSlot[hostReq]
	for _, pool := range []int{0, 0, 1} {
		s, err := q.Acquire(nil, pool)
		if err != nil {
			t.Fatal(err)
		}
		post(t, q, s, 1)
		slots = append(slots, s)
	}
	for range 3 {
		<-rt.reqs // all arrived, none answered
	}
	time.Sleep(20 * time.Millisecond)
	now := time.Now().UnixNano()
	if s := q.Overdue(now, 10*time.Millisecond); s == nil || s == slots[2] {
		t.Fatalf("Overdue = %v, want a command slot (the NoTimeout pool is exempt)", s)
	}
	rt.qp.Disconnect()
	for _, s := range slots {
		if err := <-s.S.done; !errors.Is(err, lost) {
			t.Fatalf("slot %d completed with %v, want the mapped loss", s.Index(), err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.failed) != 1 {
		t.Fatalf("Failed called %d times, want 1", len(h.failed))
	}
	if _, err := q.Acquire(nil, 0); !errors.Is(err, lost) {
		t.Fatalf("Acquire on a failed queue: %v", err)
	}
}

// TestHostQueueAbort: an aborted request completes with the abort error,
// and a response that comes later is refused by Outstanding.
func TestHostQueueAbort(t *testing.T) {
	t.Parallel()
	q, _, rt := hostSetup(t, HostConfig{Pools: []HostPool{{Slots: 2, SendLen: 16}}, Recvs: 8, RecvLen: 16})
	s, err := q.Acquire(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	post(t, q, s, 7)
	<-rt.reqs
	aborted := errors.New("aborted")
	deadline := time.Now().Add(5 * time.Second)
	for !q.Abort(s, aborted) { // the send completion may still be on its way
		if time.Now().After(deadline) {
			t.Fatal("Abort never took")
		}
		time.Sleep(time.Millisecond)
	}
	if err := <-s.S.done; err != aborted {
		t.Fatalf("aborted request completed with %v", err)
	}
	if q.Outstanding(s) {
		t.Fatal("an aborted request still looks outstanding")
	}
}
