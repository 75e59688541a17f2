package initiator

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/blockdev/blockdevtest"
	"github.com/rdisk/rdisk/initiator/multipath"
)

// A fail-fast session completes its requests in flight at once when the
// connection is lost, with an error matching ErrPath and ErrClosed,
// refuses new ones while reconnecting, and serves again once reconnected.
func TestSessionFailFast(t *testing.T) {
	t.Parallel()
	ft := newFakeTarget(t, blockdevtest.MemConfig{Size: 1 << 20, Latency: 20 * time.Millisecond})
	s := newSession(t, ft, SessionConfig{FailFast: true, LossTimeout: time.Minute})
	buf, _ := s.AllocBuffer(4 * 4096)
	defer buf.Release()
	ch := make(chan *blockdev.Request, 4)
	reqs := make([]blockdev.Request, 4)
	for i := range reqs {
		reqs[i] = blockdev.Request{Op: blockdev.OpWrite, Offset: int64(i) * 4096, Length: 4096, Buf: buf, BufOff: i * 4096, C: ch}
		if err := s.Submit(&reqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	ft.mu.Lock()
	ft.down = true // refuse reconnections
	conn := ft.conns[0]
	ft.mu.Unlock()
	conn.kill(errors.Join(errors.New("fake: reset"), blockdev.ErrClosed))
	for range reqs {
		select {
		case r := <-ch:
			var pd *PathDownError
			if !errors.As(r.Err, &pd) || !errors.Is(r.Err, blockdev.ErrPath) || !errors.Is(r.Err, blockdev.ErrClosed) || !errors.Is(r.Err, blockdev.ErrIO) {
				t.Fatalf("request in flight at the loss: %v, want a PathDownError matching ErrPath, ErrClosed and ErrIO", r.Err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("requests in flight did not fail fast")
		}
	}
	waitFor(t, "reconnecting", func() bool { st, _ := s.State(); return st == StateReconnecting })
	if a := s.AccessState(); a != blockdev.AccessTransitioning {
		t.Errorf("access state while reconnecting: %v", a)
	}
	r := blockdev.Request{Op: blockdev.OpRead, Length: 4096, Buf: buf, C: ch}
	if err := s.Submit(&r); !errors.Is(err, blockdev.ErrPath) {
		t.Fatalf("Submit while reconnecting: %v, want ErrPath at once", err)
	}
	if s.Waiting() != 0 {
		t.Errorf("%d requests queued by a fail-fast session", s.Waiting())
	}
	ft.setDown(false)
	waitFor(t, "the reconnect", func() bool { st, _ := s.State(); return st == StateLive })
	if _, err := blockdev.ReadAt(s, make([]byte, 4096), 0); err != nil {
		t.Fatalf("read after the reconnect: %v", err)
	}
	if st := s.Stats(); st.Reconnects != 1 || st.Retries != 0 {
		t.Errorf("stats %+v: want 1 reconnect, no retries", st)
	}
}

// A session reports its connection's access state and identity, and
// refuses to reconnect to another disk.
func TestSessionPathReporter(t *testing.T) {
	t.Parallel()
	ft := newFakeTarget(t, blockdevtest.MemConfig{Size: 1 << 20})
	ft.access.Store(uint32(blockdev.AccessNonOptimized))
	ft.setID("nqn.x/uuid-1")
	s := newSession(t, ft, SessionConfig{FailFast: true, LossTimeout: 200 * time.Millisecond})
	var _ blockdev.PathReporter = s
	var _ blockdev.Identifier = s
	var _ BufferRegistrar = s
	if a := s.AccessState(); a != blockdev.AccessNonOptimized {
		t.Errorf("AccessState %v", a)
	}
	ft.access.Store(uint32(blockdev.AccessOptimized))
	if a, err := s.RefreshAccessState(); err != nil || a != blockdev.AccessOptimized {
		t.Errorf("RefreshAccessState %v, %v", a, err)
	}
	if id := s.DiskID(); id != "nqn.x/uuid-1" {
		t.Errorf("DiskID %q", id)
	}
	ft.setID("nqn.x/uuid-2")
	ft.setDown(true)
	ft.setDown(false)
	waitFor(t, "the session to fail", func() bool { st, _ := s.State(); return st == StateFailed })
	if err := s.LastError(); err == nil || !strings.Contains(err.Error(), "different disk") {
		t.Errorf("last error %v, want a different disk", err)
	}
	if a := s.AccessState(); a != blockdev.AccessPersistentLoss {
		t.Errorf("AccessState of a failed session: %v", a)
	}
}

// RegisterBuffer: caller memory works on the connection and after a
// reconnect.
func TestSessionRegisterBuffer(t *testing.T) {
	t.Parallel()
	for _, register := range []bool{false, true} {
		ft := newFakeTarget(t, blockdevtest.MemConfig{Size: 1 << 20})
		ft.register = register
		s := newSession(t, ft, SessionConfig{})
		mem := make([]byte, 4096)
		b, err := s.RegisterBuffer(mem)
		if err != nil {
			t.Fatal(err)
		}
		fill(mem, 7)
		if err := blockdev.Do(s, &blockdev.Request{Op: blockdev.OpWrite, Length: 4096, Buf: b}); err != nil {
			t.Fatal(err)
		}
		clear(mem)
		if err := blockdev.Do(s, &blockdev.Request{Op: blockdev.OpRead, Length: 4096, Buf: b}); err != nil {
			t.Fatal(err)
		}
		want := make([]byte, 4096)
		fill(want, 7)
		if string(mem) != string(want) {
			t.Errorf("register=%v: read back through registered memory differs", register)
		}
		b.Release()
	}
}

// twoTargets are two gateways to one disk: their connections share the
// memory.
func twoTargets(t *testing.T, cfg blockdevtest.MemConfig) (*fakeTarget, *fakeTarget) {
	a := newFakeTarget(t, cfg)
	b := &fakeTarget{mem: a.mem, register: true}
	a.setID("disk-1")
	b.setID("disk-1")
	return a, b
}

// A multipath device over fail-fast sessions: a gateway lost mid-load
// costs no request, and gets I/O again once it is back.
func TestMultipathOverSessions(t *testing.T) {
	t.Parallel()
	fa, fb := twoTargets(t, blockdevtest.MemConfig{Size: 4 << 20, Queues: 2, QueueDepth: 8, Latency: 200 * time.Microsecond})
	var paths []multipath.Path
	for _, ft := range []*fakeTarget{fa, fb} {
		s, err := NewSession(context.Background(), SessionConfig{URL: "fake://gw", Dial: ft.dial, FailFast: true, LossTimeout: -1,
			ReconnectDelay: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, multipath.Path{Name: "fake://gw/" + string(rune('a'+len(paths))), Dev: s})
	}
	mp, err := multipath.New(multipath.Config{Paths: paths, LossTimeout: 10 * time.Second, RecheckInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer mp.Close()
	var wg sync.WaitGroup
	last := runIO(t, mp, 64, 4096, 600, 16, func(i int) {
		if i == 150 {
			fa.setDown(true)
			wg.Go(func() {
				time.Sleep(30 * time.Millisecond)
				fa.setDown(false)
			})
		}
	})
	wg.Wait()
	checkUnits(t, mp, last, 4096)
	if st := mp.Stats(); st.Errors != 0 {
		t.Errorf("stats %+v: want no errors", st)
	}
	pa := paths[0].Dev.(*Session)
	waitFor(t, "path a reconnected and live", func() bool {
		st, _ := pa.State()
		return st == StateLive && mp.Usable() == 2
	})
	before := pa.Stats().Reads
	if _, err := blockdev.ReadAt(mp, make([]byte, 8192), 0); err != nil { // two requests: one per path
		t.Fatal(err)
	}
	p := make([]byte, 4096)
	for range 4 {
		if _, err := blockdev.ReadAt(mp, p, 0); err != nil {
			t.Fatal(err)
		}
	}
	if pa.Stats().Reads == before {
		t.Error("no I/O on path a after it came back")
	}
}

// memDialer dials a fresh view of one Mem: a device that allocates nothing
// per I/O.
func memDialer(m *blockdevtest.Mem) Dialer {
	return func(context.Context, string) (blockdev.Device, error) { return m, nil }
}

// Steady-state I/O through a fail-fast session, and through a multipath
// device over two of them, allocates nothing.
func TestSessionAndMultipathAllocs(t *testing.T) {
	m, err := blockdevtest.NewMem(blockdevtest.MemConfig{Size: 1 << 20, Queues: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var devs []blockdev.Device
	var paths []multipath.Path
	for _, name := range []string{"fake://a", "fake://b"} {
		s, err := NewSession(context.Background(), SessionConfig{URL: name, Dial: memDialer(m), FailFast: true})
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, multipath.Path{Name: name, Dev: s})
	}
	devs = append(devs, paths[0].Dev)
	mp, err := multipath.New(multipath.Config{Paths: paths})
	if err != nil {
		t.Fatal(err)
	}
	defer mp.Close()
	devs = append(devs, mp)
	for _, d := range devs {
		buf, err := d.AllocBuffer(4096)
		if err != nil {
			t.Fatal(err)
		}
		ch := make(chan *blockdev.Request, 1)
		w := &blockdev.Request{Op: blockdev.OpWrite, Length: 4096, Buf: buf, C: ch}
		r := &blockdev.Request{Op: blockdev.OpRead, Length: 4096, Buf: buf, C: ch}
		f := &blockdev.Request{Op: blockdev.OpFlush, C: ch}
		run := func() {
			for _, q := range []*blockdev.Request{w, r, w, r, f} {
				if err := d.Submit(q); err != nil {
					t.Fatal(err)
				}
				if got := <-ch; got.Err != nil {
					t.Fatal(got.Err)
				}
			}
		}
		run() // per-path buffers made
		if n := testing.AllocsPerRun(200, run); n != 0 {
			t.Errorf("%T: %v allocations per run of 5 requests, want 0", d, n)
		}
		buf.Release()
	}
}
