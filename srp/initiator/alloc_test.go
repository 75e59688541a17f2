package initiator_test

import (
	"runtime"
	"testing"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/srp/initiator"
)

// TestSteadyStateAllocs checks that requests of every kind but discard
// (the RAM disk here is fully provisioned), once buffers and slots are
// warm, allocate nothing on either side (the target's allocations count
// too), over two channels.
func TestSteadyStateAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	l := startLoop(t, newLU(t, newLockedMem(t, 8<<20)), initiator.Config{Channels: 2})
	d := l.dev
	const inflight = 8
	c := make(chan *blockdev.Request, inflight)
	reqs := make([]blockdev.Request, inflight)
	for i := range reqs {
		b, err := d.AllocBuffer(8192)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Release()
		reqs[i] = blockdev.Request{Buf: b, Length: 8192, C: c, Queue: i}
	}
	ops := [...]blockdev.Op{blockdev.OpWrite, blockdev.OpRead, blockdev.OpFlush, blockdev.OpWriteZeroes}
	run := func(n int) {
		for i := range reqs {
			r := &reqs[i]
			r.Op, r.Flags, r.Offset = blockdev.OpWrite, blockdev.FUA, int64(i)*8192
			if err := d.Submit(r); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < n; i++ {
			r := <-c
			if r.Err != nil {
				t.Fatalf("%v: %v", r.Op, r.Err)
			}
			r.Op = ops[i%len(ops)]
			r.Offset = int64(i%1000) * 8192
			if err := d.Submit(r); err != nil {
				t.Fatal(err)
			}
		}
		for range reqs {
			<-c
		}
	}
	run(2000) // warm up: buffers, disk chunks, goroutine stacks
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	const n = 5000
	run(n)
	runtime.ReadMemStats(&b)
	per := float64(b.Mallocs-a.Mallocs) / n
	t.Logf("%.3f allocations per request (initiator and target)", per)
	if per > 0.5 {
		t.Errorf("%.3f allocations per request in the steady state", per)
	}
}
