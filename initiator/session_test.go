package initiator

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/blockdev/blockdevtest"
)

func newSession(t *testing.T, ft *fakeTarget, cfg SessionConfig) *Session {
	t.Helper()
	cfg.URL, cfg.Dial = "fake://disk", ft.dial
	if cfg.ReconnectDelay == 0 {
		cfg.ReconnectDelay = 10 * time.Millisecond
	}
	s, err := NewSession(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 3))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// The session passes the device conformance suite.
func TestSessionConformance(t *testing.T) {
	t.Parallel()
	blockdevtest.Run(t, func(t *testing.T) blockdev.Device {
		ft := newFakeTarget(t, blockdevtest.MemConfig{Size: 4 << 20, Queues: 2, QueueDepth: 8})
		s, err := NewSession(context.Background(), SessionConfig{URL: "fake://x", Dial: ft.dial})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestSessionFirstConnectFails(t *testing.T) {
	t.Parallel()
	ft := newFakeTarget(t, blockdevtest.MemConfig{})
	ft.setDown(true)
	if _, err := NewSession(context.Background(), SessionConfig{URL: "fake://x", Dial: ft.dial}); !errors.Is(err, errRefused) {
		t.Fatalf("NewSession with the target down: %v", err)
	}
}

// runIO keeps depth writes in flight over units of size bytes, each with
// its own pattern, for n writes; it returns the last seed written per unit.
func runIO(t *testing.T, s blockdev.Device, units, size, n, depth int, during func(i int)) []uint64 {
	t.Helper()
	buf, err := s.AllocBuffer(depth * size)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Release()
	ch := make(chan *blockdev.Request, depth)
	reqs := make([]blockdev.Request, depth)
	last := make([]uint64, units)
	busy := make([]bool, units)
	next := 0
	submit := func(r *blockdev.Request) {
		for busy[next%units] {
			next++
		}
		u := next % units
		busy[u] = true
		seed := uint64(next + 1)
		fill(buf.Bytes()[r.BufOff:r.BufOff+size], seed)
		*r = blockdev.Request{Op: blockdev.OpWrite, Offset: int64(u * size), Length: size, Buf: buf, BufOff: r.BufOff, Queue: next, C: ch, Tag: uint64(u), Ctx: seed}
		next++
		if err := s.Submit(r); err != nil {
			t.Fatalf("Submit: %v", err)
		}
	}
	for i := range reqs {
		reqs[i].BufOff = i * size
		submit(&reqs[i])
	}
	for i := range n {
		r := <-ch
		if r.Err != nil {
			t.Fatalf("write %d: %v", i, r.Err)
		}
		busy[r.Tag] = false
		last[r.Tag] = r.Ctx.(uint64)
		if during != nil {
			during(i)
		}
		if i < n-depth {
			submit(r)
		}
	}
	return last
}

func checkUnits(t *testing.T, s blockdev.Device, last []uint64, size int) {
	t.Helper()
	got := make([]byte, size)
	want := make([]byte, size)
	for u, seed := range last {
		if seed == 0 {
			continue
		}
		if _, err := blockdev.ReadAt(s, got, int64(u*size)); err != nil {
			t.Fatalf("read unit %d: %v", u, err)
		}
		fill(want, seed)
		if !bytes.Equal(got, want) {
			t.Fatalf("unit %d: data differs from the last acknowledged write", u)
		}
	}
}

// TestReconnect drops the connection with writes in flight and brings the
// target back: every write completes, and the data is the last written.
func TestReconnect(t *testing.T) {
	t.Parallel()
	for _, register := range []bool{false, true} {
		name := "bounce"
		if register {
			name = "register"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ft := newFakeTarget(t, blockdevtest.MemConfig{Size: 4 << 20, Queues: 2, QueueDepth: 8, Latency: time.Millisecond})
			ft.register = register
			s := newSession(t, ft, SessionConfig{LossTimeout: 5 * time.Second})
			var wg sync.WaitGroup
			last := runIO(t, s, 64, 4096, 400, 16, func(i int) {
				if i == 100 || i == 250 {
					ft.setDown(true)
					wg.Add(1)
					go func() {
						defer wg.Done()
						time.Sleep(50 * time.Millisecond)
						ft.setDown(false)
					}()
				}
			})
			wg.Wait()
			checkUnits(t, s, last, 4096)
			st := s.Stats()
			if st.Reconnects != 2 || st.Retries == 0 || st.Errors != 0 || st.InFlight != 0 {
				t.Errorf("stats %+v: want 2 reconnects, some retries, no errors", st)
			}
			if state, _ := s.State(); state != StateLive {
				t.Errorf("state %v", state)
			}
		})
	}
}

// TestReconnectIdle: a connection that fails with nothing in flight is
// replaced before the next I/O (through the device's Done channel).
func TestReconnectIdle(t *testing.T) {
	t.Parallel()
	ft := newFakeTarget(t, blockdevtest.MemConfig{Size: 1 << 20})
	s := newSession(t, ft, SessionConfig{})
	ft.setDown(true)
	ft.setDown(false)
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().Reconnects == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no reconnect after the idle connection failed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	p := make([]byte, 4096)
	if _, err := blockdev.WriteAt(s, p, 0); err != nil {
		t.Fatal(err)
	}
}

// TestLossTimeout: the target stays down; queued I/O fails with a
// LostError matching ErrIO after the loss timeout, and so does new I/O.
func TestLossTimeout(t *testing.T) {
	t.Parallel()
	ft := newFakeTarget(t, blockdevtest.MemConfig{Size: 1 << 20, Latency: 20 * time.Millisecond})
	s := newSession(t, ft, SessionConfig{LossTimeout: 200 * time.Millisecond})
	buf, _ := s.AllocBuffer(4096 * 4)
	defer buf.Release()
	ch := make(chan *blockdev.Request, 4)
	reqs := make([]blockdev.Request, 4)
	for i := range reqs {
		reqs[i] = blockdev.Request{Op: blockdev.OpWrite, Offset: int64(i) * 4096, Length: 4096, Buf: buf, BufOff: i * 4096, C: ch}
		if err := s.Submit(&reqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	ft.setDown(true)
	for range reqs {
		r := <-ch
		var lost *LostError
		if !errors.As(r.Err, &lost) || !errors.Is(r.Err, blockdev.ErrIO) {
			t.Fatalf("request after the loss timeout: %v, want a LostError matching ErrIO", r.Err)
		}
	}
	if el := time.Since(start); el < 150*time.Millisecond || el > 5*time.Second {
		t.Errorf("requests failed after %v, want about the loss timeout", el)
	}
	if state, _ := s.State(); state != StateFailed {
		t.Errorf("state %v, want failed", state)
	}
	r := blockdev.Request{Op: blockdev.OpRead, Length: 4096, Buf: buf, C: ch}
	if err := s.Submit(&r); !errors.Is(err, blockdev.ErrIO) {
		t.Errorf("Submit after failing: %v", err)
	}
	if ft.dials < 2 {
		t.Errorf("%d dials, want retries", ft.dials)
	}
}

// TestCloseWhileReconnecting: Close fails queued I/O with ErrClosed and
// returns promptly.
func TestCloseWhileReconnecting(t *testing.T) {
	t.Parallel()
	ft := newFakeTarget(t, blockdevtest.MemConfig{Size: 1 << 20, Latency: 10 * time.Millisecond})
	s := newSession(t, ft, SessionConfig{LossTimeout: -1})
	buf, _ := s.AllocBuffer(4096)
	ch := make(chan *blockdev.Request, 1)
	r := blockdev.Request{Op: blockdev.OpRead, Length: 4096, Buf: buf, C: ch}
	if err := s.Submit(&r); err != nil {
		t.Fatal(err)
	}
	ft.setDown(true)
	time.Sleep(30 * time.Millisecond)
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung while reconnecting")
	}
	if got := <-ch; !errors.Is(got.Err, blockdev.ErrClosed) {
		t.Errorf("queued request after Close: %v", got.Err)
	}
	buf.Release()
}

// TestReconnectDifferentDisk: a target that comes back with another size
// fails the session instead of writing to the wrong disk.
func TestReconnectDifferentDisk(t *testing.T) {
	t.Parallel()
	ft := newFakeTarget(t, blockdevtest.MemConfig{Size: 1 << 20})
	s := newSession(t, ft, SessionConfig{})
	other := newFakeTarget(t, blockdevtest.MemConfig{Size: 2 << 20})
	ft.mu.Lock()
	ft.mem = other.mem
	ft.mu.Unlock()
	ft.setDown(true)
	ft.setDown(false)
	p := make([]byte, 512)
	if _, err := blockdev.ReadAt(s, p, 0); !errors.Is(err, blockdev.ErrIO) {
		t.Fatalf("read after reconnecting to another disk: %v", err)
	}
	if state, _ := s.State(); state != StateFailed {
		t.Errorf("state %v", state)
	}
}
