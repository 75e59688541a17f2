//go:build ceph && linux

package rbd

import (
	"os"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
)

// benchImage is a 256 MiB image filled by rbd bench (4 MiB sequential
// writes), so that reads reach the OSD's data, shared by the benchmarks.
type benchImage struct {
	once sync.Once
	name string
}

var benchImg benchImage // test state

func getBenchImage(b *testing.B) (*lab, string) {
	l := getLab(b)
	benchImg.once.Do(func() {
		benchImg.name = "bench"
		if os.Getenv("RDISK_TEST_CEPH_CONF") != "" {
			// An outside cluster: rbd/bench must exist, filled.
			return
		}
		l.run(b, "rbd", "create", "--size", "256M", "--image-feature", "layering", "rbd/bench")
		l.run(b, "rbd", "bench", "--io-type", "write", "--io-size", "4M", "--io-threads", "4", "--io-total", "256M", "--io-pattern", "seq", "rbd/bench")
	})
	return l, benchImg.name
}

// runQD keeps qd I/Os of size bytes in flight through Start until b.N
// have completed; random picks block-aligned random offsets, else they
// are sequential.
func runQD(b *testing.B, op backstore.AsyncOp, size, qd int, random bool) {
	l, name := getBenchImage(b)
	d := open(b, l.config(name))
	span := d.Size() / int64(size)
	done := make(chan *backstore.AsyncIO, qd)
	ios := make([]backstore.AsyncIO, qd)
	for i := range ios {
		ios[i] = backstore.AsyncIO{Op: op, Bufs: [][]byte{make([]byte, size)}, Done: func(io *backstore.AsyncIO) { done <- io }}
		fillPattern(ios[i].Bufs[0], 0, uint64(i))
	}
	var x uint64 = 88172645463325252
	var seq int64
	next := func() int64 {
		if random {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			return int64(x%uint64(span)) * int64(size)
		}
		seq = (seq + 1) % span
		return seq * int64(size)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	started, completed := 0, 0
	for i := range ios {
		if started == b.N {
			break
		}
		ios[i].Off = next()
		if err := d.Start(&ios[i]); err != nil {
			b.Fatal(err)
		}
		started++
	}
	for completed < b.N {
		io := <-done
		completed++
		if io.Err != nil {
			b.Fatal(io.Err)
		}
		if started < b.N {
			io.Off = next()
			if err := d.Start(io); err != nil {
				b.Fatal(err)
			}
			started++
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "IOPS")
}

func BenchmarkRandRead4KQD32(b *testing.B)  { runQD(b, backstore.AsyncRead, 4096, 32, true) }
func BenchmarkRandWrite4KQD32(b *testing.B) { runQD(b, backstore.AsyncWrite, 4096, 32, true) }
func BenchmarkSeqRead128KQD8(b *testing.B)  { runQD(b, backstore.AsyncRead, 128<<10, 8, false) }
func BenchmarkRandRead4KQD1(b *testing.B)   { runQD(b, backstore.AsyncRead, 4096, 1, true) }

// BenchmarkSyncRandRead4K32 is the synchronous path: 32 goroutines in
// ReadAt (Start and a wait each), for comparison.
func BenchmarkSyncRandRead4K32(b *testing.B) {
	l, name := getBenchImage(b)
	d := open(b, l.config(name))
	span := d.Size() / 4096
	b.SetBytes(4096)
	b.ReportAllocs()
	b.SetParallelism(16) // 2 cores here: 32 goroutines
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		p := make([]byte, 4096)
		var x uint64 = uint64(time.Now().UnixNano()) | 1
		for pb.Next() {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			if err := d.ReadAt(p, int64(x%uint64(span))*4096); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "IOPS")
}
