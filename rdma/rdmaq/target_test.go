package rdmaq

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/iwarp"
	"github.com/rdisk/rdisk/rdma/rdmatest"
)

// The test protocol: a request is [op, 0, 0, 0, n uint32, raddr uint64,
// rkey uint32, tag uint32] followed by any payload; the response is
// [tag uint32, result uint32].
const (
	opFetch = 'F' // RDMA Read n bytes from the host, respond with their sum
	opWrite = 'W' // RDMA Write n bytes of the tag to the host, respond
	opHold  = 'H' // respond only when the test releases the tag
	opPlace = 'P' // RDMA Read n bytes into unregistered memory (ImplicitWrite), respond with their sum
	opCtl   = 'C' // not a request: answered from control buffer 0
	reqLen  = 24
)

type testReq struct {
	tag   uint32
	n     int
	start int // order of Start calls
	// placed: opPlace's memory, three unregistered pieces.
	placed [3][]byte
	sgl    [3]rdma.SGE
}

type testHandler struct {
	t      *testing.T
	q      *TargetQueue[testReq]
	mu     sync.Mutex
	starts int
	heads  [][]byte // message heads seen by Start (copies)
	msgs   []Msg
	held   map[uint32]*Slot[testReq]
	ctls   int
	sent   int
	inits  map[int]int // InitSlot calls per slot
	// implicit and implW are the queue's implicit MRs, read on the
	// queue's goroutine before the test starts (Close clears the
	// queue's fields when the connection ends).
	implicit, implW rdma.MR
}

func (h *testHandler) Recv(m Msg) error {
	if m.Head[0] == opCtl {
		b := h.q.CtlBuf(0)
		copy(b, "ctl!")
		h.mu.Lock()
		h.ctls++
		h.mu.Unlock()
		return h.q.SendCtl(0, 4, 0)
	}
	return h.q.Admit(m)
}

func (h *testHandler) Start(s *Slot[testReq], m Msg) error {
	b := m.Head
	s.R.tag = binary.LittleEndian.Uint32(b[20:])
	s.R.n = int(binary.LittleEndian.Uint32(b[4:]))
	raddr, rkey := binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint32(b[16:])
	h.mu.Lock()
	h.starts++
	s.R.start = h.starts
	h.heads = append(h.heads, append([]byte(nil), b...))
	h.msgs = append(h.msgs, m)
	h.mu.Unlock()
	switch b[0] {
	case opFetch:
		if _, err := s.EnsureData(s.R.n); err != nil {
			return err
		}
		return h.q.Read(s, 0, s.R.n, raddr, rkey)
	case opPlace:
		iw := h.q.ImplicitWrite()
		if iw == nil {
			return fmt.Errorf("no implicit write MR")
		}
		a := s.R.n / 3
		s.R.placed = [3][]byte{make([]byte, a), make([]byte, a+1), make([]byte, s.R.n-2*a-1)}
		for i, b := range s.R.placed {
			s.R.sgl[i] = rdma.SGE{MR: iw, Buf: b}
		}
		h.q.Fetch(s, 1)
		return h.q.ReadSGL(s, s.R.sgl[:], raddr, rkey)
	case opWrite:
		d, err := s.EnsureData(s.R.n)
		if err != nil {
			return err
		}
		for i := range d[:s.R.n] {
			d[i] = byte(s.R.tag)
		}
		if err := h.q.Write(s, 0, s.R.n, raddr, rkey); err != nil {
			return err
		}
		return h.respond(s, 0)
	case opHold:
		if err := h.q.Repost(s); err != nil {
			return err
		}
		h.mu.Lock()
		h.held[s.R.tag] = s
		h.mu.Unlock()
		return nil
	}
	return fmt.Errorf("unknown op %q", b[0])
}

func (h *testHandler) respond(s *Slot[testReq], result uint32) error {
	binary.LittleEndian.PutUint32(s.Resp()[0:], s.R.tag)
	binary.LittleEndian.PutUint32(s.Resp()[4:], result)
	if err := h.q.Repost(s); err != nil {
		return err
	}
	return h.q.Respond(s, 8, 0, 0)
}

func (h *testHandler) Fetched(s *Slot[testReq]) error {
	sum := uint32(0)
	if s.R.placed[0] != nil {
		for _, b := range s.R.placed {
			for _, c := range b {
				sum += uint32(c)
			}
		}
		s.R.placed = [3][]byte{}
		return h.respond(s, sum)
	}
	for _, c := range s.Data()[:s.R.n] {
		sum += uint32(c)
	}
	return h.respond(s, sum)
}

func (h *testHandler) Sent(*Slot[testReq]) {
	h.mu.Lock()
	h.sent++
	h.mu.Unlock()
}

func (h *testHandler) CtlSent(int) error { return nil }

// release responds to a held request from the test's goroutine.
func (h *testHandler) release(tag uint32) error {
	h.mu.Lock()
	s := h.held[tag]
	delete(h.held, tag)
	h.mu.Unlock()
	if s == nil {
		return fmt.Errorf("tag %d is not held", tag)
	}
	return h.respond(s, 0)
}

// host is the peer: a raw QP with a receive per response and one buffer.
type host struct {
	t   *testing.T
	e   *rdmatest.End
	buf []byte
	mr  rdma.MR
	out []byte
	oMR rdma.MR
	rsp []byte
	rMR rdma.MR
	n   int
}

func setup(t *testing.T, cfg TargetConfig) (*host, *testHandler) {
	t.Helper()
	p, err := iwarp.New(iwarp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	cfg.Provider = p
	ln, err := p.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	h := &testHandler{t: t, held: map[uint32]*Slot[testReq]{}}
	ready := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, err := ln.Accept(context.Background())
		if err != nil {
			ready <- err
			return
		}
		q, err := NewTargetQueue[testReq](cfg, h)
		if err != nil {
			req.Reject(nil)
			ready <- err
			return
		}
		h.q = q
		h.implicit, h.implW = q.Implicit(), q.ImplicitWrite()
		defer q.Close()
		if err := req.Accept(context.Background(), q.QP(), rdma.ConnParam{ResponderResources: 4, InitiatorDepth: 4}); err != nil {
			ready <- err
			return
		}
		ready <- nil
		q.Run(context.Background())
	}()
	hp, err := iwarp.New(iwarp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hp.Close() })
	pd, _ := hp.AllocPD()
	cq, _ := hp.CreateCQ(256)
	qp, err := pd.CreateQP(rdma.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: 64, MaxRecvWR: 64})
	if err != nil {
		t.Fatal(err)
	}
	hs := &host{t: t, e: &rdmatest.End{Prov: hp, PD: pd, SendCQ: cq, RecvCQ: cq, QP: qp}, n: 32}
	hs.buf = make([]byte, 1<<16)
	hs.mr, _ = pd.RegisterMemory(hs.buf, rdma.AccessLocalWrite|rdma.AccessRemoteRead|rdma.AccessRemoteWrite)
	hs.out = make([]byte, 64*cfg.RecvLen)
	hs.oMR, _ = pd.RegisterMemory(hs.out, rdma.AccessLocalWrite)
	hs.rsp = make([]byte, hs.n*64)
	hs.rMR, _ = pd.RegisterMemory(hs.rsp, rdma.AccessLocalWrite)
	for i := range hs.n {
		if err := qp.PostRecv(&rdma.RecvWR{ID: uint64(i), SGL: []rdma.SGE{{MR: hs.rMR, Offset: i * 64, Length: 64}}}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := qp.Connect(ctx, ln.Addr().String(), rdma.ConnParam{ResponderResources: 4, InitiatorDepth: 4}); err != nil {
		t.Fatal(err)
	}
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		qp.Disconnect()
		<-done
		qp.Close()
	})
	return hs, h
}

// send posts request i (a slot of the host's send buffer).
func (hs *host) send(i int, op byte, n int, tag uint32, payload []byte) {
	hs.t.Helper()
	b := hs.out[i*256 : i*256+256]
	b[0] = op
	binary.LittleEndian.PutUint32(b[4:], uint32(n))
	binary.LittleEndian.PutUint64(b[8:], hs.mr.VA())
	binary.LittleEndian.PutUint32(b[16:], hs.mr.RKey())
	binary.LittleEndian.PutUint32(b[20:], tag)
	k := copy(b[reqLen:], payload)
	if err := hs.e.QP.PostSend(&rdma.SendWR{ID: 1000 + uint64(i), Op: rdma.OpSend, SGL: []rdma.SGE{{MR: hs.oMR, Offset: i * 256, Length: reqLen + k}}}); err != nil {
		hs.t.Fatal(err)
	}
}

// response waits for the next response and returns its tag and result.
func (hs *host) response() (uint32, uint32) {
	hs.t.Helper()
	for {
		wc := rdmatest.WaitWC(hs.t, hs.e.RecvCQ)
		if wc.Status != rdma.StatusSuccess {
			hs.t.Fatalf("completion %v: %v", wc.Op, wc.Status)
		}
		if wc.Op != rdma.OpRecv {
			continue
		}
		i := int(wc.ID)
		b := hs.rsp[i*64 : i*64+wc.ByteLen]
		tag, res := binary.LittleEndian.Uint32(b), uint32(0)
		if len(b) >= 8 {
			res = binary.LittleEndian.Uint32(b[4:])
		}
		if err := hs.e.QP.PostRecv(&rdma.RecvWR{ID: uint64(i), SGL: []rdma.SGE{{MR: hs.rMR, Offset: i * 64, Length: 64}}}); err != nil {
			hs.t.Fatal(err)
		}
		return tag, res
	}
}

func TestTargetQueueReadWriteRespond(t *testing.T) {
	t.Parallel()
	hs, _ := setup(t, TargetConfig{Recvs: 8, RecvLen: 256, RespLen: 8, Ctl: 1, CtlLen: 16})
	for i := range hs.buf[:3000] {
		hs.buf[i] = byte(i)
	}
	want := uint32(0)
	for _, c := range hs.buf[:3000] {
		want += uint32(c)
	}
	hs.send(0, opFetch, 3000, 7, nil)
	if tag, sum := hs.response(); tag != 7 || sum != want {
		t.Fatalf("fetch: response tag %d sum %d, want 7 %d", tag, sum, want)
	}
	hs.send(1, opWrite, 5000, 9, nil)
	if tag, _ := hs.response(); tag != 9 {
		t.Fatalf("write: response tag %d, want 9", tag)
	}
	if !bytes.Equal(hs.buf[:5000], bytes.Repeat([]byte{9}, 5000)) {
		t.Fatal("write: the host buffer does not hold the written data")
	}
	hs.send(2, opCtl, 0, 0, nil)
	if tag, _ := hs.response(); tag != uint32('c')|uint32('t')<<8|uint32('l')<<16|uint32('!')<<24 {
		t.Fatalf("control message: got %#x", tag)
	}
}

// TestTargetQueueReadSGL: with ImplicitWrite, a fetch RDMA-Reads into
// unregistered memory in pieces (ReadSGL), as a RAM disk's placed write.
func TestTargetQueueReadSGL(t *testing.T) {
	t.Parallel()
	hs, h := setup(t, TargetConfig{Recvs: 8, RecvLen: 256, RespLen: 8, SendSGE: 3, ImplicitWrite: true})
	if h.implW == nil || h.implicit != nil {
		t.Fatalf("implicit MRs %v (write) %v (read), want only the write one", h.implW, h.implicit)
	}
	for i := range hs.buf[:50000] {
		hs.buf[i] = byte(i * 7)
	}
	want := uint32(0)
	for _, c := range hs.buf[:50000] {
		want += uint32(c)
	}
	hs.send(0, opPlace, 50000, 3, nil)
	if tag, sum := hs.response(); tag != 3 || sum != want {
		t.Fatalf("placed fetch: response tag %d sum %d, want 3 %d", tag, sum, want)
	}
}

// TestTargetQueueBackPressure: with every slot held, further requests
// wait (their receive buffers stay with them) and start, in order, as
// slots free, on the goroutine that freed them.
func TestTargetQueueBackPressure(t *testing.T) {
	t.Parallel()
	hs, h := setup(t, TargetConfig{Recvs: 8, RecvLen: 256, RespLen: 8, Slots: 2})
	for i := range 5 {
		hs.send(i, opHold, 0, uint32(100+i), nil)
	}
	waitFor(t, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.starts == 2
	})
	time.Sleep(20 * time.Millisecond) // nothing more may start
	h.mu.Lock()
	starts := h.starts
	h.mu.Unlock()
	if starts != 2 {
		t.Fatalf("%d requests started on 2 slots", starts)
	}
	for want := uint32(100); want < 105; want++ {
		if err := h.release(want); err != nil {
			waitFor(t, func() bool {
				h.mu.Lock()
				defer h.mu.Unlock()
				return h.held[want] != nil
			})
			if err := h.release(want); err != nil {
				t.Fatal(err)
			}
		}
		if tag, _ := hs.response(); tag != want {
			t.Fatalf("response for tag %d, want %d", tag, want)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, b := range h.heads {
		if tag := binary.LittleEndian.Uint32(b[20:]); tag != uint32(100+i) {
			t.Fatalf("start %d was tag %d: pending requests must start in order", i, tag)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestTargetQueueLayouts: SplitAt puts the data after the header on a page
// boundary; AlignAt puts byte AlignAt of a contiguous message there.
func TestTargetQueueLayouts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  TargetConfig
	}{
		{"split", TargetConfig{Recvs: 4, RecvLen: reqLen + 512, SplitAt: reqLen, RespLen: 8}},
		{"align", TargetConfig{Recvs: 4, RecvLen: 256, AlignAt: 40, RespLen: 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs, h := setup(t, tc.cfg)
			payload := bytes.Repeat([]byte("0123456789abcdef"), 8)
			for i := range 3 {
				hs.send(i, opHold, 0, uint32(i), payload)
				waitFor(t, func() bool {
					h.mu.Lock()
					defer h.mu.Unlock()
					// Start counts a request before it holds it.
					return h.starts == i+1 && h.held[uint32(i)] != nil
				})
				h.mu.Lock()
				m := h.msgs[i]
				h.mu.Unlock()
				if m.Len != reqLen+len(payload) {
					t.Fatalf("message length %d, want %d", m.Len, reqLen+len(payload))
				}
				var at []byte
				if tc.cfg.SplitAt > 0 {
					if len(m.Head) != reqLen || !bytes.Equal(m.Data, payload) {
						t.Fatalf("split: head %d bytes, data %q", len(m.Head), m.Data)
					}
					at = m.Data
				} else {
					if !bytes.Equal(m.Head[reqLen:], payload) {
						t.Fatalf("contiguous: payload %q", m.Head[reqLen:])
					}
					at = m.Head[tc.cfg.AlignAt:]
				}
				if a := uintptr(unsafe.Pointer(&at[0])) % pageSize; a != 0 {
					t.Fatalf("aligned byte at %#x modulo the page", a)
				}
				if err := h.release(uint32(i)); err != nil {
					t.Fatal(err)
				}
				if tag, _ := hs.response(); tag != uint32(i) {
					t.Fatalf("response tag %d", tag)
				}
			}
		})
	}
}

// InitSlot implements SlotIniter: it counts the slots set up, once each.
func (h *testHandler) InitSlot(s *Slot[testReq]) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.inits == nil {
		h.inits = map[int]int{}
	}
	h.inits[s.Index()]++
}

func allocated[R any](q *TargetQueue[R]) (n int) {
	for range q.Allocated() {
		n++
	}
	return n
}

// TestTargetQueueSlotsGrow: a queue allocates its slots a chunk at a time
// as the requests in flight grow, and stops at their high-water mark:
// rounds of as many requests again allocate nothing more, and a slot
// never moves.
func TestTargetQueueSlotsGrow(t *testing.T) {
	t.Parallel()
	hs, h := setup(t, TargetConfig{Recvs: 32, RecvLen: 256, RespLen: 8})
	q := h.q
	if q.Slots() != 64 {
		t.Fatalf("%d slots, want 2*Recvs = 64", q.Slots())
	}
	if n := allocated(q); n != chunkSlots {
		t.Fatalf("idle queue: %d slots allocated, want one chunk (%d)", n, chunkSlots)
	}
	first := q.Slot(0)
	const inFlight = 2*chunkSlots + 3
	want := (inFlight + chunkSlots - 1) / chunkSlots * chunkSlots
	tag := uint32(0)
	for round := range 10 {
		for i := range inFlight {
			hs.send(i, opHold, 0, tag+uint32(i), nil)
		}
		waitFor(t, func() bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return len(h.held) == inFlight
		})
		if n := allocated(q); n != want {
			t.Fatalf("round %d: %d requests in flight on %d slots, want %d", round, inFlight, n, want)
		}
		h.mu.Lock()
		for _, s := range h.held {
			if s.Index() >= want {
				h.mu.Unlock()
				t.Fatalf("round %d: a request on slot %d, beyond the %d allocated", round, s.Index(), want)
			}
		}
		h.mu.Unlock()
		for i := range inFlight {
			if err := h.release(tag + uint32(i)); err != nil {
				t.Fatal(err)
			}
			hs.response()
		}
		tag += inFlight
		// Slots free once their response Send completed.
		waitFor(t, func() bool {
			q.mu.Lock()
			defer q.mu.Unlock()
			return len(q.free) == want
		})
	}
	if q.Slot(0) != first {
		t.Fatal("slot 0 moved")
	}
	// Slot allocates the chunk of a slot no request used yet, once.
	last := q.Slot(q.Slots() - 1)
	if last.Index() != q.Slots()-1 || q.Slot(q.Slots()-1) != last {
		t.Fatalf("Slot(%d) is slot %d", q.Slots()-1, last.Index())
	}
	if n := allocated(q); n != want+chunkSlots {
		t.Fatalf("%d slots allocated after Slot(%d), want %d", n, q.Slots()-1, want+chunkSlots)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, n := range h.inits {
		if n != 1 {
			t.Fatalf("slot %d set up %d times", i, n)
		}
	}
	if len(h.inits) != want+chunkSlots {
		t.Fatalf("%d slots set up, want %d", len(h.inits), want+chunkSlots)
	}
}
