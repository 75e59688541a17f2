package host

import (
	"fmt"
	"testing"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/nvmeof/target"
)

// TestSubmitAllocs checks that a request round trip allocates nothing in
// steady state: Submit, the completion goroutine and the delivery through a
// channel. testing.AllocsPerRun counts the whole process, target and
// provider included, so the budget covers them; the host's own path must be
// zero (see BenchmarkSubmit for the per-operation figure).
func TestSubmitAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	lt := startTarget(t, 4<<20, target.PortConfig{}, target.SubsystemConfig{})
	cfg := hostConfig()
	cfg.QueueDepth = 8
	submitAllocs(t, openLoop(t, lt, cfg))
}

// TestSubmitAllocsTCP is TestSubmitAllocs over NVMe/TCP, with and without
// digests: 4 KiB writes go in the capsule, 64 KiB ones by R2T and H2CData.
func TestSubmitAllocsTCP(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	for _, dg := range []bool{false, true} {
		t.Run(fmt.Sprintf("digests=%v", dg), func(t *testing.T) {
			lt := startTarget(t, 4<<20, target.PortConfig{Transport: target.TransportTCP}, target.SubsystemConfig{})
			cfg := hostConfig()
			cfg.QueueDepth, cfg.Transport, cfg.HeaderDigest, cfg.DataDigest = 8, TransportTCP, dg, dg
			submitAllocs(t, openTCPLoop(t, lt, cfg))
		})
	}
}

func submitAllocs(t *testing.T, ns *Namespace) {
	buf, err := ns.AllocBuffer(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *blockdev.Request, 1)
	for _, tc := range []struct {
		name string
		op   blockdev.Op
		n    int
	}{
		{"read-4k", blockdev.OpRead, 4096},
		{"write-4k-incapsule", blockdev.OpWrite, 4096},
		{"write-64k-keyed", blockdev.OpWrite, 64 << 10},
		{"read-64k", blockdev.OpRead, 64 << 10},
		{"flush", blockdev.OpFlush, 0},
	} {
		r := &blockdev.Request{Op: tc.op, Length: tc.n, Buf: buf, C: ch}
		once := func() {
			if err := ns.Submit(r); err != nil {
				t.Fatal(err)
			}
			<-ch
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		for range 50 {
			once() // warm up pools on both sides
		}
		allocs := testing.AllocsPerRun(200, once)
		t.Logf("%s: %.2f allocations per I/O (host + target + provider)", tc.name, allocs)
		if allocs > 0 {
			t.Errorf("%s: %.2f allocations per I/O, want 0", tc.name, allocs)
		}
	}
}

func BenchmarkSubmit(b *testing.B) {
	lt := startTarget(b, 4<<20, target.PortConfig{}, target.SubsystemConfig{})
	cfg := hostConfig()
	cfg.QueueDepth = 32
	benchSubmit(b, openLoop(b, lt, cfg))
}

// BenchmarkSubmitTCP is BenchmarkSubmit over NVMe/TCP.
func BenchmarkSubmitTCP(b *testing.B) {
	lt := startTarget(b, 4<<20, target.PortConfig{Transport: target.TransportTCP}, target.SubsystemConfig{})
	cfg := hostConfig()
	cfg.QueueDepth, cfg.Transport = 32, TransportTCP
	benchSubmit(b, openTCPLoop(b, lt, cfg))
}

// benchSubmit keeps 32 4 KiB reads in flight on ns, b.N of them in all.
func benchSubmit(b *testing.B, ns *Namespace) {
	buf, _ := ns.AllocBuffer(32 * 4096)
	ch := make(chan *blockdev.Request, 32)
	reqs := make([]blockdev.Request, 32)
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for i := range reqs {
		reqs[i] = blockdev.Request{Op: blockdev.OpRead, Offset: int64(i) * 4096, Length: 4096, Buf: buf, BufOff: i * 4096, C: ch}
		if err := ns.Submit(&reqs[i]); err != nil {
			b.Fatal(err)
		}
	}
	for n < b.N {
		r := <-ch
		if r.Err != nil {
			b.Fatal(r.Err)
		}
		n++
		if err := ns.Submit(r); err != nil {
			b.Fatal(err)
		}
	}
	for range reqs {
		<-ch
	}
}
