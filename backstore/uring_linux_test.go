//go:build linux

package backstore

import (
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// ioPaths are the two ways Start runs, each test runs on both: the
// io_uring (skipped where the kernel refuses one) and the sync workers
// forced by the options.
var ioPaths = []struct {
	name    string
	noURing bool
}{{"uring", false}, {"sync", true}}

// skipWithoutRing skips t when d was asked for io_uring but fell back.
func skipWithoutRing(t testing.TB, d IOPathReporter, noURing bool) {
	t.Helper()
	p, why := d.IOPath()
	if noURing {
		if p != IOPathSync || why == "" {
			t.Fatalf("IOPath = %v (%q) with NoURing, want sync with a reason", p, why)
		}
		return
	}
	if p != IOPathURing {
		t.Skipf("io_uring unavailable: %s", why)
	}
}

// startWaiter is a disk whose synchronous methods run through Start and
// wait for Done, so that the conformance suite checks the asynchronous
// path of a File or Block.
type startWaiter struct {
	d interface {
		AsyncDisk
		VectoredDisk
		Discarder
		ZeroWriter
		StatsReporter
		HealthReporter
	}
	inner Disk
}

var (
	_ VectoredDisk   = (*startWaiter)(nil)
	_ Discarder      = (*startWaiter)(nil)
	_ ZeroWriter     = (*startWaiter)(nil)
	_ StatsReporter  = (*startWaiter)(nil)
	_ HealthReporter = (*startWaiter)(nil)
)

func newStartWaiter(d Disk) *startWaiter {
	return &startWaiter{d: d.(interface {
		AsyncDisk
		VectoredDisk
		Discarder
		ZeroWriter
		StatsReporter
		HealthReporter
	}), inner: d}
}

func (s *startWaiter) run(io *AsyncIO) error {
	done := make(chan struct{})
	started := make(chan struct{})
	var inStart bool
	io.Done = func(*AsyncIO) {
		// A Done called inside Start would wait here for ever: Start
		// returns only after it.
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			inStart = true
		}
		close(done)
	}
	if err := s.d.Start(io); err != nil {
		return err
	}
	close(started)
	<-done
	if inStart {
		return errors.New("Done was called inside Start")
	}
	return io.Err
}

func (s *startWaiter) BlockSize() int { return s.d.BlockSize() }
func (s *startWaiter) Size() int64    { return s.d.Size() }
func (s *startWaiter) ReadOnly() bool { return s.d.ReadOnly() }
func (s *startWaiter) Close() error   { return s.d.Close() }
func (s *startWaiter) Stats() Stats   { return s.d.Stats() }
func (s *startWaiter) Health() (Health, error) {
	return s.d.Health()
}
func (s *startWaiter) ReadAt(p []byte, off int64) error {
	return s.run(&AsyncIO{Op: AsyncRead, Bufs: [][]byte{p}, Off: off})
}
func (s *startWaiter) ReadvAt(bufs [][]byte, off int64) error {
	return s.run(&AsyncIO{Op: AsyncRead, Bufs: bufs, Off: off})
}
func (s *startWaiter) WriteAt(p []byte, off int64, flags WriteFlags) error {
	return s.run(&AsyncIO{Op: AsyncWrite, Bufs: [][]byte{p}, Off: off, Flags: flags})
}
func (s *startWaiter) WritevAt(bufs [][]byte, off int64, flags WriteFlags) error {
	return s.run(&AsyncIO{Op: AsyncWrite, Bufs: bufs, Off: off, Flags: flags})
}
func (s *startWaiter) Flush() error { return s.run(&AsyncIO{Op: AsyncFlush}) }
func (s *startWaiter) Discard(off, n int64) error {
	return s.run(&AsyncIO{Op: AsyncDiscard, Off: off, Len: n})
}
func (s *startWaiter) WriteZeroes(off, n int64, flags WriteFlags) error {
	return s.run(&AsyncIO{Op: AsyncWriteZeroes, Off: off, Len: n, Flags: flags})
}

// unwrapDisk returns the disk under a startWaiter.
func unwrapDisk(d Disk) Disk {
	if s, ok := d.(*startWaiter); ok {
		return s.inner
	}
	return d
}

// asyncKinds are the file and block kinds of the conformance suite with
// their I/O through Start, on the given path.
func asyncKinds(noURing bool) []diskKind {
	suffix := "-async-uring"
	if noURing {
		suffix = "-async-sync"
	}
	fileKind := func(name string, dir func(t *testing.T) string, bs int, direct bool) diskKind {
		return diskKind{
			name: name + suffix, retains: true,
			open: func(t *testing.T, size int64) Disk {
				f, err := OpenFile(filepath.Join(dir(t), "disk.img"), FileOptions{BlockSize: bs, Size: size, Create: true, Direct: direct, NoURing: noURing})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { f.Close() })
				skipWithoutRing(t, f, noURing)
				return newStartWaiter(f)
			},
			readOnly: func(t *testing.T, d Disk) Disk {
				f := unwrapDisk(d).(*File)
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
				ro, err := OpenFile(f.Path(), FileOptions{BlockSize: bs, ReadOnly: true, Direct: direct, NoURing: noURing})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ro.Close() })
				return newStartWaiter(ro)
			},
		}
	}
	blockKind := func(sector int) diskKind {
		return diskKind{
			name: "block-loop-" + strconv.Itoa(sector) + suffix, retains: true,
			open: func(t *testing.T, size int64) Disk {
				b, err := openBlockRetry(newLoopDevice(t, size, sector), BlockOptions{NoURing: noURing})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Close() })
				skipWithoutRing(t, b, noURing)
				return newStartWaiter(b)
			},
			readOnly: func(t *testing.T, d Disk) Disk {
				b := unwrapDisk(d).(*Block)
				if err := b.Close(); err != nil {
					t.Fatal(err)
				}
				ro, err := openBlockRetry(b.Path(), BlockOptions{ReadOnly: true, NoURing: noURing})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ro.Close() })
				return newStartWaiter(ro)
			},
		}
	}
	return []diskKind{
		fileKind("file-tmpfs-512", shmTestDir, 512, false),
		fileKind("file-tmpfs-direct-4096", shmTestDir, 4096, true),
		fileKind("file-disk-4096", tempDir, 4096, false),
		fileKind("file-disk-direct-512", tempDir, 512, true),
		blockKind(512),
		blockKind(4096),
	}
}

// TestAsyncConformance runs the conformance suite over Start on both
// paths, for every file and block kind.
func TestAsyncConformance(t *testing.T) {
	t.Parallel()
	for _, p := range ioPaths {
		for _, k := range asyncKinds(p.noURing) {
			t.Run(k.name, func(t *testing.T) {
				t.Parallel()
				runConformance(t, k, k.open(t, conformanceSize))
			})
		}
	}
}

// asyncTestDisks opens an O_DIRECT file and a loop device (when the test
// may attach one) on the given path.
func asyncTestDisks(t *testing.T, noURing bool, size int64) map[string]AsyncDisk {
	t.Helper()
	disks := map[string]AsyncDisk{}
	f, err := OpenFile(filepath.Join(t.TempDir(), "a.img"), FileOptions{Create: true, Size: size, BlockSize: 4096, Direct: true, NoURing: noURing})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	skipWithoutRing(t, f, noURing)
	disks["file-direct"] = f
	g, err := OpenFile(filepath.Join(shmDir(t), "a.img"), FileOptions{Create: true, Size: size, BlockSize: 512, NoURing: noURing})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	disks["file-tmpfs"] = g
	if _, err := exec.LookPath("losetup"); err == nil && os.Geteuid() == 0 {
		b, err := openBlockRetry(newLoopDevice(t, size, 512), BlockOptions{BlockSize: 4096, NoURing: noURing})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() }) // before the loop device is detached
		disks["block-loop"] = b
	}
	return disks
}

// TestAsyncManyInFlight keeps more operations in flight than the ring has
// slots (the rest wait in order), writes a pattern per block and reads it
// back, all through Start; Done always runs off Start.
func TestAsyncManyInFlight(t *testing.T) {
	t.Parallel()
	for _, p := range ioPaths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			const blocks = 3 * ringEntries
			const bs = 4096
			f, err := OpenFile(filepath.Join(t.TempDir(), "a.img"), FileOptions{Create: true, Size: blocks * bs, BlockSize: bs, Direct: true, NoURing: p.noURing})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			skipWithoutRing(t, f, p.noURing)
			buf := AlignedBuffer(blocks*bs, 4096)
			ios := make([]AsyncIO, blocks)
			var wg sync.WaitGroup
			var inStart atomic.Int32
			run := func(op AsyncOp, flags WriteFlags) {
				wg.Add(blocks)
				for i := range ios {
					io := &ios[i]
					*io = AsyncIO{Op: op, Bufs: [][]byte{buf[i*bs : (i+1)*bs]}, Off: int64(i) * bs, Flags: flags, Done: func(io *AsyncIO) {
						if io.Err != nil {
							t.Errorf("%s at %d: %v", io.Op, io.Off, io.Err)
						}
						wg.Done()
					}}
					inStart.Add(1)
					if err := f.Start(io); err != nil {
						t.Fatalf("Start: %v", err)
					}
					inStart.Add(-1)
				}
				wg.Wait()
			}
			fillPattern(buf, 0, 5)
			run(AsyncWrite, FUA)
			clear(buf)
			run(AsyncRead, 0)
			if at := checkPattern(buf, 0, 5); at >= 0 {
				t.Fatalf("data differs at byte %d", at)
			}
			if s := f.Stats(); s.InFlight != 0 || s.Read.Ops != blocks || s.Write.Ops != blocks || s.FUAWrites != blocks {
				t.Errorf("stats %+v; want %d reads, writes and FUA writes, none in flight", s, blocks)
			}
		})
	}
}

// TestAsyncDoneRestarts: a Done that starts the next operation with the
// same AsyncIO (as the NVMe core does for a multi-range deallocation and
// any command slot) keeps going without deadlock, and never runs inside
// Start.
func TestAsyncDoneRestarts(t *testing.T) {
	t.Parallel()
	for _, p := range ioPaths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			for name, d := range asyncTestDisks(t, p.noURing, 1<<20) {
				t.Run(name, func(t *testing.T) {
					const chains, steps = 8, 200
					bs := d.BlockSize()
					var wg sync.WaitGroup
					wg.Add(chains)
					for c := range chains {
						buf := AlignedBuffer(bs, 4096)
						var n int
						// returned counts the Start calls that returned;
						// a Done inside Start would wait for its own.
						var returned atomic.Int32
						waitReturned := func(k int32) bool {
							for deadline := time.Now().Add(10 * time.Second); returned.Load() < k; {
								if time.Now().After(deadline) {
									return false
								}
								time.Sleep(10 * time.Microsecond)
							}
							return true
						}
						io := &AsyncIO{Op: AsyncWrite, Bufs: [][]byte{buf}, Off: int64(c * bs)}
						io.Done = func(io *AsyncIO) {
							if !waitReturned(int32(n + 1)) {
								t.Error("Done inside Start")
							}
							if io.Err != nil {
								t.Errorf("chain %d step %d: %v", c, n, io.Err)
							}
							n++
							if n == steps {
								wg.Done()
								return
							}
							io.Op = []AsyncOp{AsyncRead, AsyncWrite, AsyncFlush}[n%3]
							err := d.Start(io)
							returned.Add(1)
							if err != nil {
								t.Errorf("restart: %v", err)
								wg.Done()
							}
						}
						if err := d.Start(io); err != nil {
							t.Fatal(err)
						}
						returned.Add(1)
					}
					wg.Wait()
				})
			}
		})
	}
}

// TestAsyncCloseInFlight: Close waits for every started operation's Done;
// Start after Close refuses with ErrClosed and calls no Done.
func TestAsyncCloseInFlight(t *testing.T) {
	t.Parallel()
	for _, p := range ioPaths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			for name, d := range asyncTestDisks(t, p.noURing, 1<<20) {
				t.Run(name, func(t *testing.T) {
					const n = 64
					bs := d.BlockSize()
					buf := AlignedBuffer(n*bs, 4096)
					var done atomic.Int32
					ios := make([]AsyncIO, n)
					for i := range ios {
						ios[i] = AsyncIO{Op: AsyncRead, Bufs: [][]byte{buf[i*bs : (i+1)*bs]}, Off: int64(i * bs), Done: func(*AsyncIO) {
							time.Sleep(100 * time.Microsecond)
							done.Add(1)
						}}
						if i%8 == 0 {
							ios[i].Op = AsyncFlush
						}
						if err := d.Start(&ios[i]); err != nil {
							t.Fatal(err)
						}
					}
					if err := d.Close(); err != nil {
						t.Fatal(err)
					}
					if got := done.Load(); got != n {
						t.Fatalf("Close returned with %d of %d operations done", got, n)
					}
					late := &AsyncIO{Op: AsyncRead, Bufs: [][]byte{buf[:bs]}, Done: func(*AsyncIO) { t.Error("Done after Close") }}
					if err := d.Start(late); !errors.Is(err, ErrClosed) {
						t.Fatalf("Start after Close = %v, want ErrClosed", err)
					}
					if err := d.Close(); !errors.Is(err, ErrClosed) {
						t.Errorf("second Close = %v, want ErrClosed", err)
					}
				})
			}
		})
	}
}

// TestAsyncErrors: what the synchronous methods refuse up front Start
// refuses without Done; what fails on the way (a read past the end of a
// file that shrank underneath) is the synchronous method's error, in Err.
func TestAsyncErrors(t *testing.T) {
	t.Parallel()
	for _, p := range ioPaths {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "a.img")
			f, err := OpenFile(path, FileOptions{Create: true, Size: 1 << 20, BlockSize: 4096, Direct: true, NoURing: p.noURing})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			skipWithoutRing(t, f, p.noURing)
			buf := AlignedBuffer(8192, 4096)
			never := func(*AsyncIO) { t.Error("Done called for a refused operation") }
			refused := []struct {
				name string
				io   AsyncIO
				want func(error) bool
			}{
				{"past the end", AsyncIO{Op: AsyncRead, Bufs: [][]byte{buf[:4096]}, Off: 1 << 20}, func(err error) bool { return isRangeError(err, RangeOutOfBounds) }},
				{"unaligned", AsyncIO{Op: AsyncWrite, Bufs: [][]byte{buf[:512]}}, func(err error) bool { return isRangeError(err, RangeUnaligned) }},
				{"misaligned buffer", AsyncIO{Op: AsyncRead, Bufs: [][]byte{buf[1 : 4096+1]}}, func(err error) bool { return errors.Is(err, ErrBufferAlignment) }},
				{"discard past the end", AsyncIO{Op: AsyncDiscard, Off: 1 << 20, Len: 4096}, func(err error) bool { return isRangeError(err, RangeOutOfBounds) }},
				{"unknown op", AsyncIO{Op: 99}, func(err error) bool { return errors.Is(err, ErrUnsupported) }},
			}
			for _, c := range refused {
				io := c.io
				io.Done = never
				if err := f.Start(&io); !c.want(err) {
					t.Errorf("%s: Start = %v", c.name, err)
				}
			}
			if err := f.Start(&AsyncIO{Op: AsyncRead, Bufs: [][]byte{buf[:4096]}}); !errors.Is(err, ErrUnsupported) {
				t.Errorf("Start without Done = %v, want ErrUnsupported", err)
			}
			// The file shrinks under the disk: a read of the lost range
			// ends early (EOF), as ReadAt does.
			if err := os.Truncate(path, 4096); err != nil {
				t.Fatal(err)
			}
			want := f.ReadAt(buf, 0)
			if !errors.Is(want, io.ErrUnexpectedEOF) {
				t.Fatalf("ReadAt past the file's end = %v, want ErrUnexpectedEOF", want)
			}
			got := newStartWaiter(f).ReadAt(buf, 0)
			if got == nil || got.Error() != want.Error() || !errors.Is(got, io.ErrUnexpectedEOF) {
				t.Errorf("Start read past the file's end: Err = %v, want %v", got, want)
			}
			ro, err := OpenFile(path, FileOptions{ReadOnly: true, Size: 4096, BlockSize: 4096, NoURing: p.noURing})
			if err != nil {
				t.Fatal(err)
			}
			defer ro.Close()
			if err := ro.Start(&AsyncIO{Op: AsyncWrite, Bufs: [][]byte{buf[:4096]}, Done: never}); !errors.Is(err, ErrReadOnly) {
				t.Errorf("write to a read-only disk: Start = %v, want ErrReadOnly", err)
			}
		})
	}
}

// TestStepRW checks the resubmission rules of a transfer: short
// transfers continue where they stopped, a transfer that makes no
// progress is an EOF (reads) or short write, and a FUA write sent without
// RWF_DSYNC gets its fdatasync.
func TestStepRW(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		total       int64
		res         []int64
		write, fua  bool
		dsync       bool
		want        error
		wantDone    int64
		wantFsyncAt int // index of res after which the stage is fsync, -1 none
	}{
		{"whole", 8192, []int64{8192}, false, false, false, nil, 8192, -1},
		{"short then rest", 8192, []int64{4096, 4096}, false, false, false, nil, 8192, -1},
		{"eof", 8192, []int64{4096, 0}, false, false, false, io.ErrUnexpectedEOF, 4096, -1},
		{"short write", 8192, []int64{0}, true, false, false, io.ErrShortWrite, 0, -1},
		{"fua dsync", 4096, []int64{4096}, true, true, true, nil, 4096, -1},
		{"fua without dsync", 4096, []int64{4096}, true, true, false, errAgain, 4096, 0},
		{"too much", 4096, []int64{1 << 20}, false, false, false, nil, 4096, -1},
		{"empty", 0, []int64{0}, false, false, false, nil, 0, -1},
	}
	for _, c := range cases {
		s := uslot{total: c.total, dsync: c.dsync}
		var err error
		for i, n := range c.res {
			err = stepRW(&s, n, c.write, c.fua)
			if (s.stage == stageFsync) != (i == c.wantFsyncAt) && i == len(c.res)-1 {
				t.Errorf("%s: stage %d after result %d", c.name, s.stage, i)
			}
		}
		if err != c.want || s.done != c.wantDone {
			t.Errorf("%s: err %v, done %d; want %v, %d", c.name, err, s.done, c.want, c.wantDone)
		}
	}
}

// FuzzStepRW feeds arbitrary completion results to a transfer: the bytes
// done never exceed the total, and every sequence ends (done, an error,
// or the fdatasync stage) within one step per byte.
func FuzzStepRW(f *testing.F) {
	f.Add(int64(8192), []byte{16, 16}, true, true)
	f.Add(int64(4096), []byte{0}, false, false)
	f.Add(int64(1<<20), []byte{255, 1, 0}, true, false)
	f.Fuzz(func(t *testing.T, total int64, res []byte, write, fua bool) {
		if total < 0 || total > 1<<30 {
			return
		}
		s := uslot{total: total}
		for _, r := range res {
			n := int64(r) << 8
			err := stepRW(&s, n, write, fua)
			if s.done < 0 || s.done > s.total {
				t.Fatalf("done %d of %d", s.done, s.total)
			}
			if err != errAgain {
				if err == nil && s.done != s.total {
					t.Fatalf("finished with %d of %d bytes", s.done, s.total)
				}
				return
			}
			if s.stage == stageFsync {
				if !write || !fua || s.done != s.total {
					t.Fatalf("fdatasync stage for write %v fua %v at %d of %d", write, fua, s.done, s.total)
				}
				return
			}
		}
	})
}

// TestAsyncNoAllocations checks that an operation started with Start
// allocates nothing in steady state, on both paths. Not parallel:
// AllocsPerRun counts the whole process.
func TestAsyncNoAllocations(t *testing.T) {
	for _, p := range ioPaths {
		t.Run(p.name, func(t *testing.T) {
			for name, open := range map[string]func(t *testing.T) AsyncDisk{
				"file-direct": func(t *testing.T) AsyncDisk {
					f, err := OpenFile(filepath.Join(t.TempDir(), "a.img"), FileOptions{Create: true, Size: 1 << 20, BlockSize: 4096, Direct: true, NoURing: p.noURing})
					if err != nil {
						t.Fatal(err)
					}
					skipWithoutRing(t, f, p.noURing)
					return f
				},
				"file-tmpfs": func(t *testing.T) AsyncDisk {
					f, err := OpenFile(filepath.Join(shmDir(t), "a.img"), FileOptions{Create: true, Size: 1 << 20, BlockSize: 4096, NoURing: p.noURing})
					if err != nil {
						t.Fatal(err)
					}
					return f
				},
			} {
				t.Run(name, func(t *testing.T) {
					d := open(t)
					defer d.Close()
					p := AlignedBuffer(64<<10, 4096)
					ch := make(chan struct{}, 1)
					io := &AsyncIO{Done: func(*AsyncIO) { ch <- struct{}{} }}
					bufs := [][]byte{p[:4096], p[4096 : 12<<10], p[12<<10:]}
					for _, op := range []struct {
						name  string
						op    AsyncOp
						bufs  [][]byte
						flags WriteFlags
					}{
						{"read", AsyncRead, bufs[:1], 0},
						{"readv", AsyncRead, bufs, 0},
						{"write", AsyncWrite, bufs[:1], 0},
						{"writev-fua", AsyncWrite, bufs, FUA},
						{"flush", AsyncFlush, nil, 0},
					} {
						run := func() {
							io.Op, io.Bufs, io.Off, io.Flags = op.op, op.bufs, 0, op.flags
							if err := d.Start(io); err != nil {
								t.Fatal(err)
							}
							<-ch
							if io.Err != nil {
								t.Fatal(io.Err)
							}
						}
						run()
						if n := testing.AllocsPerRun(100, run); n != 0 {
							t.Errorf("%s: %v allocations per operation", op.name, n)
						}
					}
				})
			}
		})
	}
}

// BenchmarkAsyncQD keeps qd operations in flight through Start on an
// O_DIRECT file of the test's temp directory (the disk under it, not
// tmpfs), each Done starting the next one, on both paths: 4 KiB random
// reads at QD32 and 128 KiB sequential reads at QD8, as in fio's
// --ioengine=io_uring --direct=1 runs. Compare with fio on the same file
// system in the same run; the numbers are the device's as much as ours.
func BenchmarkAsyncQD(b *testing.B) {
	const size = 256 << 20
	path := filepath.Join(b.TempDir(), "bench.img")
	{
		f, err := OpenFile(path, FileOptions{Create: true, Size: size, BlockSize: 4096, Direct: true, NoURing: true})
		if err != nil {
			b.Fatal(err)
		}
		p := AlignedBuffer(1<<20, 4096)
		fillPattern(p, 0, 3)
		for off := int64(0); off < size; off += int64(len(p)) {
			if err := f.WriteAt(p, off, 0); err != nil {
				b.Fatal(err)
			}
		}
		f.Close()
	}
	for _, w := range []struct {
		name   string
		n, qd  int
		random bool
	}{{"rand4k-qd32", 4 << 10, 32, true}, {"seq128k-qd8", 128 << 10, 8, false}} {
		for _, p := range ioPaths {
			b.Run(w.name+"/"+p.name, func(b *testing.B) {
				f, err := OpenFile(path, FileOptions{BlockSize: 4096, Direct: true, NoURing: p.noURing})
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				skipWithoutRing(b, f, p.noURing)
				rng := rand.New(rand.NewPCG(1, 2))
				offs := make([]int64, 4096)
				for i := range offs {
					offs[i] = rng.Int64N(size/int64(w.n)) * int64(w.n)
				}
				var (
					mu   sync.Mutex
					left = b.N
					next int
					seq  int64
					wg   sync.WaitGroup
				)
				nextOff := func() (int64, bool) {
					mu.Lock()
					defer mu.Unlock()
					if left == 0 {
						return 0, false
					}
					left--
					if w.random {
						next++
						return offs[next&(len(offs)-1)], true
					}
					off := seq
					if seq += int64(w.n); seq >= size {
						seq = 0
					}
					return off, true
				}
				ios := make([]AsyncIO, w.qd)
				b.SetBytes(int64(w.n))
				b.ReportAllocs()
				b.ResetTimer()
				for i := range ios {
					off, ok := nextOff()
					if !ok {
						break
					}
					wg.Add(1)
					io := &ios[i]
					*io = AsyncIO{Op: AsyncRead, Bufs: [][]byte{AlignedBuffer(w.n, 4096)}, Off: off}
					io.Done = func(io *AsyncIO) {
						if io.Err != nil {
							b.Error(io.Err)
						}
						off, ok := nextOff()
						if !ok {
							wg.Done()
							return
						}
						io.Off = off
						if err := f.Start(io); err != nil {
							b.Error(err)
							wg.Done()
						}
					}
					if err := f.Start(io); err != nil {
						b.Fatal(err)
					}
				}
				wg.Wait()
			})
		}
	}
}

// TestCompletionResult maps completion results as the reaper does: EINTR
// and EAGAIN resubmit, a FUA write the kernel refuses RWF_DSYNC for is
// sent again as a write plus fdatasync, other errnos are the operation's
// error, and a flush's 0 is success.
func TestCompletionResult(t *testing.T) {
	t.Parallel()
	e := &asyncEngine{d: &fdDisk{name: "test"}}
	read := &AsyncIO{Op: AsyncRead}
	fua := &AsyncIO{Op: AsyncWrite, Flags: FUA}
	flush := &AsyncIO{Op: AsyncFlush}
	for _, c := range []struct {
		name string
		io   *AsyncIO
		res  int32
		want error
	}{
		{"eintr", read, -int32(unix.EINTR), errAgain},
		{"eagain", read, -int32(unix.EAGAIN), errAgain},
		{"eio", read, -int32(unix.EIO), unix.EIO},
		{"enospc", fua, -int32(unix.ENOSPC), unix.ENOSPC},
		{"flush", flush, 0, nil},
		{"flush eio", flush, -int32(unix.EIO), unix.EIO},
		{"read whole", read, 4096, nil},
	} {
		s := uslot{io: c.io, total: 4096}
		if got := e.result(&s, c.res); got != c.want {
			t.Errorf("%s: result(%d) = %v, want %v", c.name, c.res, got, c.want)
		}
	}
	s := uslot{io: fua, total: 4096, dsync: true}
	if got := e.result(&s, -int32(unix.EOPNOTSUPP)); got != errAgain || s.dsync || !e.d.noDsync.Load() {
		t.Fatalf("FUA write without RWF_DSYNC: %v, dsync %v, noDsync %v; want a resubmission as a plain write", got, s.dsync, e.d.noDsync.Load())
	}
	if got := e.result(&s, 4096); got != errAgain || s.stage != stageFsync {
		t.Fatalf("after the plain write: %v, stage %d; want the fdatasync stage", got, s.stage)
	}
	if got := e.result(&s, 0); got != nil {
		t.Fatalf("after the fdatasync: %v", got)
	}
}

// FuzzCompletionResult feeds arbitrary completion results (negative
// errnos included) to a read or a FUA write: no panic, bytes done within
// the total, and a finished operation has all its bytes.
func FuzzCompletionResult(f *testing.F) {
	f.Add(int64(8192), int32(4096), int32(4096), int32(0), true)
	f.Add(int64(4096), int32(-4), int32(-11), int32(-95), false)
	f.Add(int64(4096), int32(-95), int32(4096), int32(0), true)
	f.Fuzz(func(t *testing.T, total int64, r1, r2, r3 int32, write bool) {
		if total < 0 || total > 1<<30 {
			return
		}
		e := &asyncEngine{d: &fdDisk{name: "fuzz"}}
		io := &AsyncIO{Op: AsyncRead}
		if write {
			io = &AsyncIO{Op: AsyncWrite, Flags: FUA}
		}
		s := uslot{io: io, total: total, dsync: write}
		for _, r := range []int32{r1, r2, r3} {
			err := e.result(&s, r)
			if s.done < 0 || s.done > s.total {
				t.Fatalf("done %d of %d", s.done, s.total)
			}
			if err == nil && s.done != s.total {
				t.Fatalf("finished with %d of %d bytes", s.done, s.total)
			}
			if err != errAgain {
				return
			}
		}
	})
}
