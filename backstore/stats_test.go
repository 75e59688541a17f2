package backstore

import (
	"sync"
	"testing"
	"time"
)

func TestLatencyBucketBounds(t *testing.T) {
	t.Parallel()
	b := LatencyBucketBounds()
	if len(b) != LatencyBuckets-1 {
		t.Fatalf("%d bounds, want LatencyBuckets-1 = %d", len(b), LatencyBuckets-1)
	}
	if b[0] != time.Microsecond || b[len(b)-1] != (1<<22)*time.Microsecond {
		t.Errorf("bounds run from %v to %v, want 1µs to 4.194304s", b[0], b[len(b)-1])
	}
	for i, ub := range b {
		if ub != LatencyBucketUpper(i) {
			t.Errorf("bound %d = %v, LatencyBucketUpper says %v", i, ub, LatencyBucketUpper(i))
		}
		if i > 0 && ub != 2*b[i-1] {
			t.Errorf("bound %d = %v, want twice %v", i, ub, b[i-1])
		}
		// The bound is exclusive: just below it falls in bucket i, the
		// bound itself in the next.
		if got := latencyBucket(ub - 1); got != i {
			t.Errorf("%v falls in bucket %d, want %d", ub-1, got, i)
		}
		if got := latencyBucket(ub); got != i+1 {
			t.Errorf("%v falls in bucket %d, want %d", ub, got, i+1)
		}
	}
	if got := latencyBucket(time.Hour); got != LatencyBuckets-1 {
		t.Errorf("an hour falls in bucket %d, want the last, %d", got, LatencyBuckets-1)
	}
	b[0] = 0
	if LatencyBucketBounds()[0] != time.Microsecond {
		t.Error("LatencyBucketBounds returns a shared slice")
	}
}

// TestMemInFlight blocks a read and a write on a RAM disk by holding the
// locks of their chunks' stripes, and checks that both count as in flight
// until they finish.
func TestMemInFlight(t *testing.T) {
	t.Parallel()
	m, err := NewMem(4*MemChunkSize, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rd, wr := make([]byte, 4096), make([]byte, 4096)
	if err := m.WriteAt(wr, MemChunkSize, 0); err != nil { // chunk 1 exists
		t.Fatal(err)
	}
	if n := m.Stats().InFlight; n != 0 {
		t.Fatalf("InFlight = %d on an idle disk", n)
	}
	waitInFlight := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for m.Stats().InFlight != want {
			if time.Now().After(deadline) {
				t.Fatalf("InFlight = %d, want %d", m.Stats().InFlight, want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	before := m.Stats()
	m.locks[0].Lock()
	m.locks[1].Lock()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := m.ReadAt(rd, 0); err != nil {
			t.Error(err)
		}
	})
	waitInFlight(1)
	wg.Go(func() {
		if err := m.WriteAt(wr, MemChunkSize, FUA); err != nil {
			t.Error(err)
		}
	})
	waitInFlight(2)
	// Still blocked a little later, and nothing counted as done.
	time.Sleep(20 * time.Millisecond)
	if s := m.Stats(); s.InFlight != 2 || s.Read.Ops != before.Read.Ops || s.Write.Ops != before.Write.Ops {
		t.Fatalf("while blocked: InFlight %d, %d reads and %d writes done; want 2, 0, 0",
			s.InFlight, s.Read.Ops-before.Read.Ops, s.Write.Ops-before.Write.Ops)
	}
	m.locks[0].Unlock()
	waitInFlight(1)
	m.locks[1].Unlock()
	wg.Wait()
	s := m.Stats()
	if s.InFlight != 0 || s.Read.Ops != before.Read.Ops+1 || s.Write.Ops != before.Write.Ops+1 {
		t.Fatalf("after: InFlight %d, %d reads and %d writes done; want 0, 1, 1",
			s.InFlight, s.Read.Ops-before.Read.Ops, s.Write.Ops-before.Write.Ops)
	}
	// A refused request never enters flight.
	if err := m.ReadAt(rd, 1); err == nil {
		t.Fatal("unaligned read succeeded")
	}
	if s := m.Stats(); s.InFlight != 0 || s.Rejected != before.Rejected+1 {
		t.Fatalf("after a refused read: InFlight %d, Rejected +%d", s.InFlight, s.Rejected-before.Rejected)
	}
}

// TestInFlightConcurrent runs reads, writes, discards and flushes from many
// goroutines on RAM and null disks: the gauge never goes negative nor above
// the number of goroutines, and returns to 0.
func TestInFlightConcurrent(t *testing.T) {
	t.Parallel()
	m, err := NewMem(16*MemChunkSize, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for name, d := range map[string]Disk{"mem": m, "null": NewNull(16*MemChunkSize, 4096)} {
		t.Run(name, func(t *testing.T) {
			const workers, rounds = 8, 200
			sr := d.(StatsReporter)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					p := make([]byte, 8192)
					for r := range rounds {
						off := int64((w*rounds+r)%(16*MemChunkSize/8192)) * 8192
						var err error
						switch r % 4 {
						case 0:
							err = d.WriteAt(p, off, 0)
						case 1:
							err = d.ReadAt(p, off)
						case 2:
							if dd, ok := d.(Discarder); ok {
								err = dd.Discard(off, 8192)
							}
						default:
							err = d.Flush()
						}
						if err != nil {
							t.Error(err)
							return
						}
						if n := sr.Stats().InFlight; n < 0 || n > workers {
							t.Errorf("InFlight = %d with %d workers", n, workers)
							return
						}
					}
				})
			}
			wg.Wait()
			if n := sr.Stats().InFlight; n != 0 {
				t.Fatalf("InFlight = %d after the workers finished, want 0", n)
			}
		})
	}
}
