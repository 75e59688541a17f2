package multipath

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/blockdev/blockdevtest"
)

func newDev(t *testing.T, cfg Config, fakes ...*fakePath) *Device {
	t.Helper()
	for _, f := range fakes {
		cfg.Paths = append(cfg.Paths, Path{Name: f.name, Dev: f.dev()})
	}
	if cfg.RecheckInterval == 0 {
		cfg.RecheckInterval = 10 * time.Millisecond
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 3))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// The device passes the device conformance suite, over a path that
// registers caller memory and one that bounces.
func TestConformance(t *testing.T) {
	t.Parallel()
	blockdevtest.Run(t, func(t *testing.T) blockdev.Device {
		st := newStore(4 << 20)
		a := newFake(t, st, "fake://a", fakeOpts{})
		b := newFake(t, st, "fake://b", fakeOpts{register: true})
		d, err := New(Config{Paths: []Path{{a.name, a.dev()}, {b.name, b.dev()}}})
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}

func TestParsePolicy(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Policy{"": RoundRobin, "round-robin": RoundRobin, "queue-depth": QueueDepth} {
		if got, err := ParsePolicy(in); err != nil || got != want {
			t.Errorf("ParsePolicy(%q) = %v, %v", in, got, err)
		}
		if in != "" && want.String() != in {
			t.Errorf("%v.String() = %q", want, want.String())
		}
	}
	if _, err := ParsePolicy("numa"); err == nil {
		t.Error("ParsePolicy(numa) succeeded")
	}
}

// readN reads one block n times, one after the other.
func readN(t *testing.T, d *Device, n int) {
	t.Helper()
	p := make([]byte, 512)
	for i := range n {
		if _, err := blockdev.ReadAt(d, p, int64(i%64)*512); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
	}
}

// counts returns how many reads and writes each fake executed since the
// last call.
func counter(fakes ...*fakePath) func() []uint64 {
	last := make([]uint64, len(fakes))
	return func() []uint64 {
		out := make([]uint64, len(fakes))
		for i, f := range fakes {
			c := f.count()
			out[i], last[i] = c-last[i], c
		}
		return out
	}
}

// Round robin alternates over the optimized paths only, falls back to the
// non-optimized ones when no optimized path is usable, and goes back
// (failback) when one is again.
func TestRoundRobinOptimizedFirst(t *testing.T) {
	t.Parallel()
	st := newStore(1 << 20)
	a := newFake(t, st, "a", fakeOpts{access: blockdev.AccessOptimized})
	b := newFake(t, st, "b", fakeOpts{access: blockdev.AccessOptimized})
	c := newFake(t, st, "c", fakeOpts{access: blockdev.AccessNonOptimized})
	d := newDev(t, Config{}, a, b, c)
	count := counter(a, b, c)
	readN(t, d, 100)
	if got := count(); got[0] != 50 || got[1] != 50 || got[2] != 0 {
		t.Fatalf("reads per path %v, want [50 50 0]", got)
	}
	a.setAccess(blockdev.AccessInaccessible)
	b.setAccess(blockdev.AccessTransitioning)
	readN(t, d, 20)
	if got := count(); got[0] != 0 || got[1] != 0 || got[2] != 20 {
		t.Fatalf("reads per path with the optimized paths inaccessible %v, want [0 0 20]", got)
	}
	b.setAccess(blockdev.AccessOptimized)
	readN(t, d, 20)
	if got := count(); got[0] != 0 || got[1] != 20 || got[2] != 0 {
		t.Fatalf("reads per path after b is optimized again %v, want [0 20 0]", got)
	}
	if st := d.Stats(); st.Reads != 140 || st.Errors != 0 || st.Failovers != 0 {
		t.Errorf("stats %+v", st)
	}
}

// Queue depth sends new requests to the path with fewer in flight: with
// one path stuck, only its first request goes there.
func TestQueueDepth(t *testing.T) {
	t.Parallel()
	st := newStore(1 << 20)
	a := newFake(t, st, "a", fakeOpts{})
	b := newFake(t, st, "b", fakeOpts{})
	d := newDev(t, Config{Policy: QueueDepth}, a, b)
	a.setMode(modeHold)
	buf, err := d.AllocBuffer(20 * 512)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Release()
	ch := make(chan *blockdev.Request, 20)
	reqs := make([]blockdev.Request, 20)
	completed := 0
	for i := range reqs {
		before := a.submitted.Load()
		reqs[i] = blockdev.Request{Op: blockdev.OpRead, Offset: int64(i) * 512, Length: 512, Buf: buf, BufOff: i * 512, C: ch}
		if err := d.Submit(&reqs[i]); err != nil {
			t.Fatal(err)
		}
		// Wait until it completed (on b) or is held (on a).
		deadline := time.Now().Add(10 * time.Second)
	wait:
		for {
			select {
			case r := <-ch:
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				completed++
				break wait
			default:
			}
			if a.submitted.Load() > before {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("request neither completed nor held")
			}
			time.Sleep(time.Millisecond)
		}
	}
	if got := a.submitted.Load(); got != 1 {
		t.Errorf("%d requests went to the stuck path, want 1", got)
	}
	if info := d.Paths(); info[0].InFlight != 1 || info[1].InFlight != 0 {
		t.Errorf("in flight per path: %+v", info)
	}
	a.setMode(modeOK)
	for completed < 20 {
		if r := <-ch; r.Err != nil {
			t.Fatal(r.Err)
		}
		completed++
	}
}

// load keeps depth writes in flight over units of size bytes, each with its
// own pattern, for n completions; it calls during after each and returns the
// last seed acknowledged per unit.
func load(t *testing.T, d blockdev.Device, units, size, n, depth int, during func(i int)) []uint64 {
	t.Helper()
	buf, err := d.AllocBuffer(depth * size)
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
		op := blockdev.OpWrite
		fill(buf.Bytes()[r.BufOff:r.BufOff+size], seed)
		*r = blockdev.Request{Op: op, Offset: int64(u * size), Length: size, Buf: buf, BufOff: r.BufOff, Queue: next, C: ch, Tag: uint64(u), Ctx: seed}
		next++
		if err := d.Submit(r); err != nil {
			t.Fatalf("Submit: %v", err)
		}
	}
	for i := range reqs {
		reqs[i].BufOff = i * size
		submit(&reqs[i])
	}
	for i := range n {
		var r *blockdev.Request
		select {
		case r = <-ch:
		case <-time.After(20 * time.Second):
			t.Fatalf("no completion after %d", i)
		}
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

func checkUnits(t *testing.T, d blockdev.Device, last []uint64, size int) {
	t.Helper()
	got := make([]byte, size)
	want := make([]byte, size)
	for u, seed := range last {
		if seed == 0 {
			continue
		}
		if _, err := blockdev.ReadAt(d, got, int64(u*size)); err != nil {
			t.Fatalf("read unit %d: %v", u, err)
		}
		fill(want, seed)
		if !bytes.Equal(got, want) {
			t.Fatalf("unit %d: data differs from the last acknowledged write", u)
		}
	}
}

// A path that starts failing mid-load (ANA refusals, or its connection
// lost) fails over with no request failing, and gets I/O again once back.
func TestFailoverMidLoad(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		mode  int32
		stale bool // the device keeps reporting optimized while it refuses
	}{{"ana", modePath, false}, {"ana-stale-state", modePath, true}, {"connection", modeDown, false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := newStore(4 << 20)
			a := newFake(t, st, "a", fakeOpts{latency: 200 * time.Microsecond, access: blockdev.AccessOptimized})
			b := newFake(t, st, "b", fakeOpts{latency: 200 * time.Microsecond, register: true, access: blockdev.AccessOptimized})
			d := newDev(t, Config{LossTimeout: 10 * time.Second}, a, b)
			var aBefore uint64
			last := load(t, d, 64, 4096, 800, 16, func(i int) {
				switch i {
				case 200:
					a.setMode(tc.mode)
					if tc.mode == modePath && !tc.stale {
						a.setAccess(blockdev.AccessInaccessible)
					}
				case 400:
					aBefore = a.count()
					a.setMode(modeOK)
					a.setAccess(blockdev.AccessOptimized)
				}
			})
			checkUnits(t, d, last, 4096)
			st2 := d.Stats()
			if st2.Errors != 0 || st2.InFlight != 0 {
				t.Errorf("stats %+v: want no errors", st2)
			}
			pi := d.Paths()
			if pi[0].Failovers == 0 || st2.Failovers != pi[0].Failovers {
				t.Errorf("path a: no failovers after its connection was lost: %+v", pi[0])
			}
			// Failback: a serves I/O again.
			waitFor(t, "I/O on path a again", func() bool {
				readN(t, d, 4)
				return a.count() > aBefore
			})
			if pi := d.Paths(); pi[0].State != "live" || pi[0].Access != blockdev.AccessOptimized {
				t.Errorf("path a after coming back: %+v", pi[0])
			}
		})
	}
}

// A request the path fails with a media error is not failed over.
func TestIOErrorNotFailedOver(t *testing.T) {
	t.Parallel()
	st := newStore(1 << 20)
	a := newFake(t, st, "a", fakeOpts{})
	b := newFake(t, st, "b", fakeOpts{})
	d := newDev(t, Config{}, a, b)
	a.setMode(modeIOError)
	b.setMode(modeIOError)
	if _, err := blockdev.ReadAt(d, make([]byte, 512), 0); !errors.Is(err, errFakeIO) {
		t.Fatalf("read: %v, want the path's I/O error", err)
	}
	if st := d.Stats(); st.Errors != 1 || st.Failovers != 0 {
		t.Errorf("stats %+v", st)
	}
	if pi := d.Paths(); pi[0].State != "live" || pi[1].State != "live" {
		t.Errorf("paths after an I/O error: %+v", pi)
	}
}

// All paths down, one back within the loss timeout: nothing fails.
func TestAllPathsDownThenBack(t *testing.T) {
	t.Parallel()
	st := newStore(4 << 20)
	a := newFake(t, st, "a", fakeOpts{latency: 100 * time.Microsecond})
	b := newFake(t, st, "b", fakeOpts{latency: 100 * time.Microsecond})
	d := newDev(t, Config{LossTimeout: 10 * time.Second}, a, b)
	var wg sync.WaitGroup
	last := load(t, d, 64, 4096, 400, 16, func(i int) {
		if i == 100 {
			a.setMode(modeDown)
			b.setMode(modeDown)
			wg.Go(func() {
				waitFor(t, "requests waiting for a path", func() bool { return d.Waiting() > 0 })
				time.Sleep(30 * time.Millisecond)
				b.setMode(modeOK)
			})
		}
	})
	wg.Wait()
	checkUnits(t, d, last, 4096)
	if st := d.Stats(); st.Errors != 0 || st.Failovers == 0 {
		t.Errorf("stats %+v: want failovers and no errors", st)
	}
	if pi := d.Paths(); pi[0].State != "down" || pi[1].State != "live" {
		t.Errorf("paths: %+v", pi)
	}
}

// All paths down and none back: requests fail with ErrIO after the loss
// timeout, new ones at once, until a path is back.
func TestAllPathsDownTimeout(t *testing.T) {
	t.Parallel()
	st := newStore(1 << 20)
	a := newFake(t, st, "a", fakeOpts{latency: 5 * time.Millisecond})
	b := newFake(t, st, "b", fakeOpts{latency: 5 * time.Millisecond})
	d := newDev(t, Config{LossTimeout: 200 * time.Millisecond}, a, b)
	buf, _ := d.AllocBuffer(4 * 512)
	defer buf.Release()
	ch := make(chan *blockdev.Request, 4)
	reqs := make([]blockdev.Request, 4)
	for i := range reqs {
		reqs[i] = blockdev.Request{Op: blockdev.OpWrite, Offset: int64(i) * 512, Length: 512, Buf: buf, BufOff: i * 512, C: ch}
		if err := d.Submit(&reqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	a.setMode(modeDown)
	b.setMode(modeDown)
	for range reqs {
		r := <-ch
		var np *NoPathError
		if !errors.As(r.Err, &np) || !errors.Is(r.Err, blockdev.ErrIO) {
			t.Fatalf("request after the loss timeout: %v, want a NoPathError matching ErrIO", r.Err)
		}
	}
	if el := time.Since(start); el < 150*time.Millisecond {
		t.Errorf("requests failed after %v, before the loss timeout", el)
	}
	r := blockdev.Request{Op: blockdev.OpRead, Length: 512, Buf: buf, C: ch}
	if err := d.Submit(&r); !errors.Is(err, blockdev.ErrIO) {
		t.Errorf("Submit with no path after the loss timeout: %v, want ErrIO at once", err)
	}
	a.setMode(modeOK)
	waitFor(t, "path a back", func() bool { return d.Usable() == 1 })
	if _, err := blockdev.ReadAt(d, make([]byte, 512), 0); err != nil {
		t.Fatalf("read with path a back: %v", err)
	}
}

// Closed paths that cannot report their state are gone for good: with
// every path gone, requests fail at once.
func TestAllPathsGone(t *testing.T) {
	t.Parallel()
	// The path is a device without a PathReporter.
	m, err := blockdevtest.NewMem(blockdevtest.MemConfig{Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	d2, err := New(Config{Paths: []Path{{"mem", m}}, LossTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	m.Close()
	if _, err := blockdev.ReadAt(d2, make([]byte, 512), 0); !errors.Is(err, blockdev.ErrIO) {
		t.Fatalf("read with the only path closed for good: %v, want ErrIO", err)
	}
	if pi := d2.Paths(); pi[0].State != "failed" {
		t.Errorf("path %+v, want failed", pi[0])
	}
}

// Access state changes move I/O: optimized ↔ inaccessible, with failback.
func TestStateChangesMoveIO(t *testing.T) {
	t.Parallel()
	st := newStore(1 << 20)
	a := newFake(t, st, "a", fakeOpts{access: blockdev.AccessOptimized})
	b := newFake(t, st, "b", fakeOpts{access: blockdev.AccessNonOptimized})
	d := newDev(t, Config{Policy: QueueDepth}, a, b)
	count := counter(a, b)
	readN(t, d, 20)
	if got := count(); got[0] != 20 || got[1] != 0 {
		t.Fatalf("reads %v, want all on the optimized path", got)
	}
	a.setAccess(blockdev.AccessInaccessible)
	readN(t, d, 20)
	if got := count(); got[0] != 0 || got[1] != 20 {
		t.Fatalf("reads %v with a inaccessible, want all on b", got)
	}
	a.setAccess(blockdev.AccessOptimized)
	readN(t, d, 20)
	if got := count(); got[0] != 20 || got[1] != 0 {
		t.Fatalf("reads %v after a is optimized again, want all on a", got)
	}
	// A refusal the device had not announced: a is pending until its
	// state is re-read, which says inaccessible; then back.
	a.setMode(modePath)
	a.setAccess(blockdev.AccessInaccessible)
	readN(t, d, 10)
	if got := count(); got[1] != 10 {
		t.Fatalf("reads %v after a refused, want all on b", got)
	}
	a.setMode(modeOK)
	a.setAccess(blockdev.AccessOptimized)
	waitFor(t, "reads on a again", func() bool {
		readN(t, d, 2)
		return count()[0] > 0
	})
	if st := d.Stats(); st.Errors != 0 {
		t.Errorf("stats %+v", st)
	}
}

// Paths to another disk, or of another shape, are refused.
func TestPathMismatch(t *testing.T) {
	t.Parallel()
	st := newStore(1 << 20)
	a := newFake(t, st, "a", fakeOpts{id: "disk-1"})
	other := newFake(t, st, "other", fakeOpts{id: "disk-2"})
	if _, err := New(Config{Paths: []Path{{a.name, a}, {other.name, other}}}); err == nil || !strings.Contains(err.Error(), `reaches disk "disk-2"`) {
		t.Fatalf("New over two disks: %v", err)
	}
	a = newFake(t, st, "a", fakeOpts{id: "disk-1"})
	d := newDev(t, Config{}, a)
	for _, tc := range []struct {
		f    *fakePath
		want string
	}{
		{newFake(t, st, "b", fakeOpts{id: "disk-2"}), "reaches disk"},
		{newFake(t, st, "c", fakeOpts{id: "disk-1", size: 1 << 19}), "disk in"},
		{newFake(t, st, "e", fakeOpts{id: "disk-1", blockSize: 4096}), "disk in"},
		{newFake(t, st, "f", fakeOpts{id: "disk-1", caps: blockdev.CapFlush}), "capabilities"},
		{newFake(t, st, "a", fakeOpts{id: "disk-1"}), "has a path"},
	} {
		if err := d.AddPath(Path{tc.f.name, tc.f}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("AddPath %s: %v, want %q", tc.f.name, err, tc.want)
		}
	}
	if err := d.AddPath(Path{Name: "x"}); err == nil {
		t.Error("AddPath without a device succeeded")
	}
	// A good path joins and takes I/O; removing one moves it all.
	b := newFake(t, st, "b", fakeOpts{id: "disk-1"})
	if err := d.AddPath(Path{b.name, b}); err != nil {
		t.Fatal(err)
	}
	count := counter(a, b)
	readN(t, d, 10)
	if got := count(); got[0] != 5 || got[1] != 5 {
		t.Errorf("reads %v after adding b", got)
	}
	if err := d.RemovePath("a"); err != nil {
		t.Fatal(err)
	}
	if err := d.RemovePath("a"); err == nil {
		t.Error("removing a twice succeeded")
	}
	readN(t, d, 10)
	if got := count(); got[0] != 0 || got[1] != 10 {
		t.Errorf("reads %v after removing a", got)
	}
	if !a.closed.Load() {
		t.Error("the removed path's device is not closed")
	}
	if pi := d.Paths(); len(pi) != 1 || pi[0].Name != "b" {
		t.Errorf("paths %+v", pi)
	}
}

func flushes(fakes ...*fakePath) []uint64 {
	var out []uint64
	for _, f := range fakes {
		out = append(out, f.ops[blockdev.OpFlush].Load())
	}
	return out
}

// A flush goes to every path that completed writes since its last flush.
func TestFlushEveryWrittenPath(t *testing.T) {
	t.Parallel()
	st := newStore(1 << 20)
	a := newFake(t, st, "a", fakeOpts{})
	b := newFake(t, st, "b", fakeOpts{})
	c := newFake(t, st, "c", fakeOpts{})
	d := newDev(t, Config{}, a, b, c)
	if _, err := blockdev.WriteAt(d, make([]byte, 1024), 0); err != nil { // one write per path, on a and b
		t.Fatal(err)
	}
	if _, err := blockdev.WriteAt(d, make([]byte, 512), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := blockdev.WriteAt(d, make([]byte, 512), 0); err != nil {
		t.Fatal(err)
	}
	if err := blockdev.Flush(d); err != nil {
		t.Fatal(err)
	}
	if got := flushes(a, b, c); got[0] != 1 || got[1] != 1 || got[2] != 1 {
		t.Errorf("flushes per path %v after writes on every path, want one each", got)
	}
	if err := blockdev.Flush(d); err != nil {
		t.Fatal(err)
	}
	if got := flushes(a, b, c); got[0]+got[1]+got[2] != 4 {
		t.Errorf("flushes per path %v after a flush with no writes, want one more in all", got)
	}
	// FUA writes need no flush.
	buf, _ := d.AllocBuffer(512)
	defer buf.Release()
	if err := blockdev.Do(d, &blockdev.Request{Op: blockdev.OpWrite, Flags: blockdev.FUA, Length: 512, Buf: buf}); err != nil {
		t.Fatal(err)
	}
	before := flushes(a, b, c)
	if err := blockdev.Flush(d); err != nil {
		t.Fatal(err)
	}
	after := flushes(a, b, c)
	if after[0]+after[1]+after[2] != before[0]+before[1]+before[2]+1 {
		t.Errorf("flushes %v -> %v after a FUA write, want one", before, after)
	}
	if st := d.Stats(); st.Flushes != 3 || st.Errors != 0 {
		t.Errorf("stats %+v", st)
	}
}

// A flush for the writes of a path that lost its connection waits for that
// path: it succeeds when the path is back within the loss timeout, and
// fails with ErrIO when not (once: the next flush does not wait).
func TestFlushWaitsForItsPath(t *testing.T) {
	t.Parallel()
	st := newStore(1 << 20)
	a := newFake(t, st, "a", fakeOpts{access: blockdev.AccessOptimized})
	b := newFake(t, st, "b", fakeOpts{access: blockdev.AccessNonOptimized})
	d := newDev(t, Config{LossTimeout: 300 * time.Millisecond}, a, b)
	write := func() {
		t.Helper()
		if _, err := blockdev.WriteAt(d, make([]byte, 512), 0); err != nil {
			t.Fatal(err)
		}
	}
	// Back in time.
	write() // on a
	a.setMode(modeDown)
	if _, err := blockdev.ReadAt(d, make([]byte, 512), 0); err != nil { // notices a is down
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- blockdev.Flush(d) }()
	time.Sleep(20 * time.Millisecond)
	a.setMode(modeOK)
	if err := <-done; err != nil {
		t.Fatalf("flush with a back in time: %v", err)
	}
	if got := flushes(a, b); got[0] != 1 || got[1] != 0 {
		t.Errorf("flushes %v, want the one on a", got)
	}
	// Not back.
	waitFor(t, "a live", func() bool { return d.Usable() == 2 })
	write() // on a
	a.setMode(modeDown)
	if _, err := blockdev.ReadAt(d, make([]byte, 512), 0); err != nil {
		t.Fatal(err)
	}
	err := blockdev.Flush(d)
	if !errors.Is(err, blockdev.ErrIO) || !strings.Contains(err.Error(), "path a") {
		t.Fatalf("flush with a not back: %v, want ErrIO naming path a", err)
	}
	if err := blockdev.Flush(d); err != nil {
		t.Errorf("the next flush: %v", err)
	}
}

// Steady-state I/O allocates nothing, with bounce and registered paths and
// flushes.
func TestAllocsPerIO(t *testing.T) {
	st := newStore(1 << 20)
	for _, pol := range []Policy{RoundRobin, QueueDepth} {
		d := newDev(t, Config{Policy: pol}, newFake(t, st, "a", fakeOpts{}), newFake(t, st, "b", fakeOpts{register: true}))
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
		run() // buffers made on both paths
		if n := testing.AllocsPerRun(200, run); n != 0 {
			t.Errorf("%v: %v allocations per run of 5 requests, want 0", pol, n)
		}
		buf.Release()
	}
}

func TestPathInfoJSON(t *testing.T) {
	t.Parallel()
	in := PathInfo{Name: "nvme://x", State: "live", Access: blockdev.AccessNonOptimized, InFlight: 2, Completed: 3, Errors: 1, Failovers: 4,
		Changed: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"access":"non-optimized"`) {
		t.Errorf("JSON %s: want the access state by name", b)
	}
	var out PathInfo
	if err := json.Unmarshal(b, &out); err != nil || out != in {
		t.Errorf("round trip: %+v %v, want %+v", out, err, in)
	}
}

// Close fails waiting requests with ErrClosed.
func TestCloseWhileWaiting(t *testing.T) {
	t.Parallel()
	st := newStore(1 << 20)
	a := newFake(t, st, "a", fakeOpts{})
	d := newDev(t, Config{LossTimeout: -1}, a)
	a.setMode(modeDown)
	buf, _ := d.AllocBuffer(512)
	defer buf.Release()
	ch := make(chan *blockdev.Request, 1)
	r := blockdev.Request{Op: blockdev.OpRead, Length: 512, Buf: buf, C: ch}
	if err := d.Submit(&r); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the request waiting", func() bool { return d.Waiting() == 1 })
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if got := <-ch; !errors.Is(got.Err, blockdev.ErrClosed) {
		t.Errorf("waiting request after Close: %v", got.Err)
	}
	if err := d.Submit(&r); !errors.Is(err, blockdev.ErrClosed) {
		t.Errorf("Submit after Close: %v", err)
	}
}

// A flush that a written path fails (a media error) fails, and the next
// flush tries that path again.
func TestFlushErrorRetriedNextTime(t *testing.T) {
	t.Parallel()
	st := newStore(1 << 20)
	a := newFake(t, st, "a", fakeOpts{})
	b := newFake(t, st, "b", fakeOpts{})
	d := newDev(t, Config{}, a, b)
	for range 2 { // one write on each path
		if _, err := blockdev.WriteAt(d, make([]byte, 512), 0); err != nil {
			t.Fatal(err)
		}
	}
	a.setMode(modeIOError)
	if err := blockdev.Flush(d); !errors.Is(err, errFakeIO) {
		t.Fatalf("flush with a failing: %v, want its error", err)
	}
	a.setMode(modeOK)
	before := flushes(a, b)
	if err := blockdev.Flush(d); err != nil {
		t.Fatal(err)
	}
	if after := flushes(a, b); after[0] != before[0]+1 || after[1] != before[1] {
		t.Errorf("flushes %v -> %v: want the next flush on a only", before, after)
	}
}

// TestResize: the device follows a resize once every path reports it
// (Info and Submit), and a path added after it must have the new size.
func TestResize(t *testing.T) {
	t.Parallel()
	st := newStore(2 << 20)
	a := newFake(t, st, "a", fakeOpts{size: 1 << 20, access: blockdev.AccessOptimized})
	b := newFake(t, st, "b", fakeOpts{size: 1 << 20, access: blockdev.AccessOptimized})
	d := newDev(t, Config{Name: "mp"}, a, b)
	p := make([]byte, 512)
	const beyond = 3 << 19 // 1.5 MiB
	if _, err := blockdev.ReadAt(d, p, beyond); !errors.Is(err, blockdev.ErrRange) {
		t.Fatalf("read beyond 1 MiB: %v; want ErrRange", err)
	}
	a.size.Store(2 << 20)
	if got := d.Info().Size; got != 1<<20 {
		t.Errorf("one path grown: size %d; want the smaller, %d", got, 1<<20)
	}
	if _, err := blockdev.ReadAt(d, p, beyond); !errors.Is(err, blockdev.ErrRange) {
		t.Fatalf("read beyond 1 MiB with one path grown: %v; want ErrRange", err)
	}
	b.size.Store(2 << 20)
	// Submit sees the growth without an Info call first.
	for i := range 8 {
		if _, err := blockdev.ReadAt(d, p, beyond); err != nil {
			t.Fatalf("read %d at 1.5 MiB after both paths grew: %v", i, err)
		}
	}
	if got := d.Info().Size; got != 2<<20 {
		t.Errorf("both paths grown: size %d; want %d", got, 2<<20)
	}
	old := newFake(t, st, "old", fakeOpts{size: 1 << 20})
	if err := d.AddPath(Path{old.name, old}); err == nil || !strings.Contains(err.Error(), "1MiB") {
		t.Errorf("adding a path of the old size: %v; want a size mismatch", err)
	}
	grown := newFake(t, st, "grown", fakeOpts{size: 2 << 20})
	if err := d.AddPath(Path{grown.name, grown}); err != nil {
		t.Errorf("adding a path of the new size: %v", err)
	}
}
