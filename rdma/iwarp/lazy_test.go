package iwarp

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/rdmatest"
)

// TestQueuesGrowWithUse: send WQEs, the completion ring and the receive
// buffer start small and grow with the work outstanding, up to what the QP
// and CQ were created with, and stop growing there; bursts of small Sends
// arrive intact across the growth.
func TestQueuesGrowWithUse(t *testing.T) {
	t.Parallel()
	t.Run("idle", func(t *testing.T) { t.Parallel(); testQueuesGrow(t, false) })
	t.Run("bursts", func(t *testing.T) { t.Parallel(); testQueuesGrow(t, true) })
}

func testQueuesGrow(t *testing.T, burst bool) {
	const recvs, recvSize, msg = 128, 256, 64
	c, s := rdmatest.Pair(t, func() rdma.Provider { return benchProvider() }, rdmatest.PairConfig{
		BufSize: 1 << 20, PostRecvs: recvs, RecvSize: recvSize,
		QP: rdma.QPConfig{MaxSendWR: 128, MaxRecvWR: recvs + 1},
	})
	cqp, sqp := c.QP.(*qp), s.QP.(*qp)
	scq := c.SendCQ.(*cq)
	seq := uint64(0)
	post := func(n int) {
		t.Helper()
		for i := range n {
			off := (int(seq) % 1024) * msg
			b := c.Buf[off : off+msg]
			binary.LittleEndian.PutUint64(b, seq)
			for j := range b[8:] {
				b[8+j] = byte(seq)
			}
			if err := c.QP.PostSend(&rdma.SendWR{ID: seq, Op: rdma.OpSend, Flags: rdma.Signaled,
				SGL: []rdma.SGE{{MR: c.MR, Offset: off, Length: msg}}}); err != nil {
				t.Fatalf("send %d of %d: %v", i, n, err)
			}
			seq++
		}
	}
	want := seq
	drain := func(n int) {
		t.Helper()
		for range n {
			if wc := rdmatest.WaitWC(t, c.SendCQ); wc.Status != rdma.StatusSuccess {
				t.Fatalf("send completion %+v", wc)
			}
		}
		for range n {
			wc := rdmatest.WaitWC(t, s.RecvCQ)
			if wc.Status != rdma.StatusSuccess || wc.ByteLen != msg {
				t.Fatalf("receive completion %+v", wc)
			}
			off := int(wc.ID) * recvSize
			b := s.Buf[off : off+msg]
			if got := binary.LittleEndian.Uint64(b); got != want || !bytes.Equal(b[8:], bytes.Repeat([]byte{byte(want)}, msg-8)) {
				t.Fatalf("message %d arrived as %d (%x)", want, got, b)
			}
			want++
			if err := s.QP.PostRecv(&rdma.RecvWR{ID: wc.ID, SGL: []rdma.SGE{{MR: s.MR, Offset: off, Length: recvSize}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	sizes := func() (wqes, ring int) {
		cqp.mu.Lock()
		wqes = cqp.sqAlloc
		cqp.mu.Unlock()
		scq.mu.Lock()
		ring = len(scq.ring)
		scq.mu.Unlock()
		return wqes, ring
	}
	// rxBuf is the server's receive buffer size, once its receiver ended.
	rxBuf := func() int {
		s.QP.Close()
		return len(sqp.rx.buf)
	}
	for range 100 {
		post(1)
		drain(1)
	}
	if w, r := sizes(); w != sqChunk || r != cqStart {
		t.Fatalf("one at a time: %d send WQEs, a %d-completion ring; want %d, %d", w, r, sqChunk, cqStart)
	}
	if !burst {
		if b := rxBuf(); b != rxBufStart {
			t.Fatalf("one at a time: a %d-byte receive buffer, want %d", b, rxBufStart)
		}
		return
	}
	for range 20 {
		post(100)
		drain(100)
	}
	w, r := sizes()
	if w > 100+sqChunk || r > 1024 {
		t.Fatalf("after bursts of 100: %d send WQEs, a %d-completion ring", w, r)
	}
	// Fewer outstanding than allocated: nothing more.
	for range 100 {
		post(10)
		drain(10)
	}
	if w2, r2 := sizes(); w2 != w || r2 != r {
		t.Fatalf("bursts of 10 grew the queues: %d send WQEs, a %d-completion ring; were %d, %d", w2, r2, w, r)
	}
	b := rxBuf()
	t.Logf("after bursts: %d send WQEs, a %d-completion ring, a %d-byte receive buffer", w, r, b)
	if b > rxBufSize {
		t.Fatalf("a %d-byte receive buffer", b)
	}
}
