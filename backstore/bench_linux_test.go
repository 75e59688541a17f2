//go:build linux

package backstore

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Benchmarks: 4 KiB random and 128 KiB sequential reads and writes on a RAM
// disk, a null disk and a file on tmpfs; for the file, raw pread/pwrite on a
// second descriptor of the same file run in the same benchmark, so that the
// backstore's overhead over the system calls shows side by side.

const benchSize = 64 << 20

type benchWorkload struct {
	name   string
	n      int
	random bool
	write  bool
}

func benchWorkloads() [4]benchWorkload {
	return [...]benchWorkload{
		{"rand4k-read", 4 << 10, true, false},
		{"rand4k-write", 4 << 10, true, true},
		{"seq128k-read", 128 << 10, false, false},
		{"seq128k-write", 128 << 10, false, true},
	}
}

// ioFunc performs one request of len(p) bytes at off.
type ioFunc func(p []byte, off int64) error

func runBenchWorkload(b *testing.B, w benchWorkload, read, write ioFunc) {
	p := AlignedBuffer(w.n, 4096)
	fillPattern(p, 0, 1)
	// Random offsets are drawn before the timer starts.
	rng := rand.New(rand.NewPCG(1, 2))
	offs := make([]int64, 4096)
	for i := range offs {
		offs[i] = rng.Int64N(benchSize/int64(w.n)) * int64(w.n)
	}
	do := read
	if w.write {
		do = write
	}
	b.SetBytes(int64(w.n))
	b.ReportAllocs()
	b.ResetTimer()
	var seq int64
	for i := 0; b.Loop(); i++ {
		off := seq
		if w.random {
			off = offs[i&(len(offs)-1)]
		} else if seq += int64(w.n); seq >= benchSize {
			seq = 0
		}
		if err := do(p, off); err != nil {
			b.Fatal(err)
		}
	}
}

// prefill writes the whole disk once, so that reads hit data and RAM chunks
// exist: the benchmarks measure the steady state.
func prefill(b *testing.B, d Disk) {
	p := AlignedBuffer(1<<20, 4096)
	for off := int64(0); off < d.Size(); off += int64(len(p)) {
		fillPattern(p, off, 2)
		if err := d.WriteAt(p, off, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func benchDisk(b *testing.B, d Disk) {
	prefill(b, d)
	for _, w := range benchWorkloads() {
		b.Run(w.name, func(b *testing.B) {
			runBenchWorkload(b, w, d.ReadAt, func(p []byte, off int64) error { return d.WriteAt(p, off, 0) })
		})
	}
}

func BenchmarkMem(b *testing.B) {
	m, err := NewMem(benchSize, 4096)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	benchDisk(b, m)
}

func BenchmarkNull(b *testing.B) {
	benchDisk(b, NewNull(benchSize, 4096))
}

// BenchmarkFileTmpfs runs each workload through a File backstore and through
// raw unix.Pread/unix.Pwrite on the same file.
func BenchmarkFileTmpfs(b *testing.B) {
	path := filepath.Join(shmDir(b), "bench.img")
	f, err := OpenFile(path, FileOptions{Create: true, Size: benchSize, BlockSize: 4096})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	prefill(b, f)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(fd)
	rawRead := func(p []byte, off int64) error {
		n, err := unix.Pread(fd, p, off)
		if err == nil && n != len(p) {
			b.Fatalf("short pread: %d", n)
		}
		return err
	}
	rawWrite := func(p []byte, off int64) error {
		n, err := unix.Pwrite(fd, p, off)
		if err == nil && n != len(p) {
			b.Fatalf("short pwrite: %d", n)
		}
		return err
	}
	for _, w := range benchWorkloads() {
		b.Run("backstore/"+w.name, func(b *testing.B) {
			runBenchWorkload(b, w, f.ReadAt, func(p []byte, off int64) error { return f.WriteAt(p, off, 0) })
		})
		b.Run("raw/"+w.name, func(b *testing.B) {
			runBenchWorkload(b, w, rawRead, rawWrite)
		})
	}
}

// BenchmarkMemViewAt measures the zero-copy read path (Viewer) that RDMA
// transports use on RAM disks: 4 KiB random and 128 KiB sequential views.
func BenchmarkMemViewAt(b *testing.B) {
	m, err := NewMem(benchSize, 4096)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	prefill(b, m)
	var segs [4][]byte
	for _, w := range benchWorkloads() {
		if w.write {
			continue
		}
		b.Run(w.name, func(b *testing.B) {
			runBenchWorkload(b, w, func(p []byte, off int64) error {
				_, err := m.ViewAt(segs[:], off, len(p))
				return err
			}, nil)
		})
	}
}
