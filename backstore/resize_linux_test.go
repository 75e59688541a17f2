//go:build linux

package backstore

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// wantResizeErr checks that err is a resize error: it wraps target and its
// text names the disk and both sizes in units.
func wantResizeErr(t *testing.T, what string, err, target error, texts ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
		return
	}
	if target != nil && !errors.Is(err, target) {
		t.Errorf("%s: %v, want one wrapping %v", what, err, target)
	}
	for _, s := range texts {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: %q does not say %q", what, err, s)
		}
	}
}

func TestMemResize(t *testing.T) {
	t.Parallel()
	m, err := NewMem(4096, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p := make([]byte, 4096)
	fillPattern(p, 0, 1)
	if err := m.WriteAt(p, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := m.ReadAt(p, 4096); !isRangeErr(err) {
		t.Fatalf("read past the end before growing: %v", err)
	}
	// Grow inside the first chunk: the rest of the chunk reads as zeroes.
	if err := m.Resize(8192); err != nil {
		t.Fatal(err)
	}
	if m.Size() != 8192 {
		t.Fatalf("size %d after Resize(8192)", m.Size())
	}
	fillPattern(p, 0, 9)
	if err := m.ReadAt(p, 4096); err != nil {
		t.Fatal(err)
	}
	if i := firstNonZero(p); i >= 0 {
		t.Errorf("grown range has a non-zero byte at %d", i)
	}
	// Grow across leaves (256 MiB each): the directory is replaced, the
	// old data stays, the new end works, nothing is allocated for it.
	const big = 3*memLeafLen*MemChunkSize + 8192
	if err := m.Resize(big); err != nil {
		t.Fatal(err)
	}
	if n := len(*m.dir.Load()); n != 4 {
		t.Errorf("%d leaves for %d bytes, want 4", n, int64(big))
	}
	if m.Allocated() != MemChunkSize {
		t.Errorf("growing allocated memory: %d bytes", m.Allocated())
	}
	if err := m.ReadAt(p, 0); err != nil || checkPattern(p, 0, 1) >= 0 {
		t.Errorf("old data after growing: err %v", err)
	}
	fillPattern(p, big-4096, 2)
	if err := m.WriteAt(p, big-4096, 0); err != nil {
		t.Fatal(err)
	}
	q := make([]byte, 4096)
	if err := m.ReadAt(q, big-4096); err != nil || !bytes.Equal(p, q) {
		t.Errorf("new end: err %v, data equal %v", err, bytes.Equal(p, q))
	}
	var segs [2][]byte
	if n, err := m.ViewAt(segs[:], big-4096, 4096); err != nil || n != 1 || !bytes.Equal(segs[0], p) {
		t.Errorf("ViewAt of the new end: %d segments, err %v", n, err)
	}
	if err := m.Resize(big); err != nil {
		t.Errorf("resize to the same size: %v", err)
	}
	// Refusals leave the size alone.
	wantResizeErr(t, "shrink", m.Resize(4096), ErrUnsupported, "RAM disk", "to 4KiB", "shrinking")
	wantResizeErr(t, "unaligned", m.Resize(big+512), nil, "RAM disk", "block size 4096", "bytes (")
	wantResizeErr(t, "zero", m.Resize(0), nil, "positive multiple")
	wantResizeErr(t, "negative", m.Resize(-4096), nil, "positive multiple")
	wantResizeErr(t, "too large", m.Resize(MaxMemSize+4096), nil, "largest RAM disk is 1PiB")
	if m.Size() != big {
		t.Errorf("size %d after refused resizes, want %d", m.Size(), int64(big))
	}
	// A read-only disk may grow; a closed one may not.
	m.SetReadOnly(true)
	if err := m.Resize(big + 4096); err != nil {
		t.Errorf("read-only grow: %v", err)
	}
	m.Close()
	wantResizeErr(t, "closed", m.Resize(big+8192), ErrClosed, "RAM disk")
}

func TestNullResize(t *testing.T) {
	t.Parallel()
	d := NewNull(1<<20, 512)
	if err := d.Resize(2 << 20); err != nil || d.Size() != 2<<20 {
		t.Fatalf("grow: %v, size %d", err, d.Size())
	}
	if err := d.ReadAt(make([]byte, 512), 2<<20-512); err != nil {
		t.Errorf("read at the new end: %v", err)
	}
	// No data, so it shrinks too.
	if err := d.Resize(512); err != nil || d.Size() != 512 {
		t.Fatalf("shrink: %v, size %d", err, d.Size())
	}
	if err := d.ReadAt(make([]byte, 512), 512); !isRangeErr(err) {
		t.Errorf("read past the shrunk end: %v", err)
	}
	wantResizeErr(t, "unaligned", d.Resize(1000), nil, "null disk", "from 512B", "block size 512")
	d.Close()
	wantResizeErr(t, "closed", d.Resize(4096), ErrClosed, "null disk")
}

func fileSizeOf(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func TestFileResize(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "grow.img")
	f, err := OpenFile(path, FileOptions{Create: true, Size: 1 << 20, BlockSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := make([]byte, 4096)
	fillPattern(p, 0, 1)
	if err := f.WriteAt(p, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Resize(3 << 20); err != nil {
		t.Fatal(err)
	}
	if f.Size() != 3<<20 || fileSizeOf(t, path) != 3<<20 {
		t.Fatalf("after Resize(3MiB): disk %d, file %d", f.Size(), fileSizeOf(t, path))
	}
	fillPattern(p, 3<<20-4096, 2)
	if err := f.WriteAt(p, 3<<20-4096, 0); err != nil {
		t.Fatal(err)
	}
	q := make([]byte, 4096)
	if err := f.ReadAt(q, 3<<20-4096); err != nil || !bytes.Equal(p, q) {
		t.Errorf("new end: err %v", err)
	}
	if err := f.ReadAt(q, 0); err != nil || checkPattern(q, 0, 1) >= 0 {
		t.Errorf("old data after growing: err %v", err)
	}
	wantResizeErr(t, "shrink", f.Resize(1<<20), ErrUnsupported, path, "from 3MiB to 1MiB", "shrinking")
	wantResizeErr(t, "unaligned", f.Resize(3<<20+512), nil, path, "block size 4096")
	if f.Size() != 3<<20 || fileSizeOf(t, path) != 3<<20 {
		t.Errorf("after refused resizes: disk %d, file %d", f.Size(), fileSizeOf(t, path))
	}

	// A file longer than the disk is not touched by a grow that fits.
	long := filepath.Join(dir, "long.img")
	if err := os.WriteFile(long, make([]byte, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	lf, err := OpenFile(long, FileOptions{Size: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	if err := lf.Resize(32 << 10); err != nil || lf.Size() != 32<<10 || fileSizeOf(t, long) != 64<<10 {
		t.Errorf("grow inside a longer file: %v, disk %d, file %d", err, lf.Size(), fileSizeOf(t, long))
	}

	// Read-only files refuse.
	ro, err := OpenFile(long, FileOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	wantResizeErr(t, "read-only", ro.Resize(128<<10), ErrReadOnly, long, "64KiB", "128KiB")
	ro.Close()
	wantResizeErr(t, "closed", ro.Resize(128<<10), nil, long)
	if err := ro.Rescan(); !errors.Is(err, ErrClosed) {
		t.Errorf("Rescan after Close: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	wantResizeErr(t, "closed", f.Resize(4<<20), ErrClosed, path)
}

func TestFileRescan(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rescan.img")
	f, err := OpenFile(path, FileOptions{Create: true, Size: 1 << 20, BlockSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Someone else grows the file, to a size that is not whole blocks.
	if err := os.Truncate(path, 2<<20+100); err != nil {
		t.Fatal(err)
	}
	if f.Size() != 1<<20 {
		t.Fatalf("size %d changed before Rescan", f.Size())
	}
	if err := f.Rescan(); err != nil || f.Size() != 2<<20 {
		t.Fatalf("Rescan after growing: %v, size %d", err, f.Size())
	}
	if err := f.ReadAt(make([]byte, 4096), 2<<20-4096); err != nil {
		t.Errorf("read at the rescanned end: %v", err)
	}
	// Shrunk: the size follows (the data is gone already).
	if err := os.Truncate(path, 512<<10); err != nil {
		t.Fatal(err)
	}
	if err := f.Rescan(); err != nil || f.Size() != 512<<10 {
		t.Fatalf("Rescan after shrinking: %v, size %d", err, f.Size())
	}
	// Emptied: an error, and the size stays.
	if err := os.Truncate(path, 100); err != nil {
		t.Fatal(err)
	}
	wantResizeErr(t, "rescan of an empty file", f.Rescan(), nil, path, "no whole 4096-byte block", "stays 512KiB")
	if f.Size() != 512<<10 {
		t.Errorf("size %d after a failed Rescan", f.Size())
	}
}

// loopBacking returns the backing file of a loop device.
func loopBacking(t *testing.T, dev string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "loop", "backing_file"))
	if err != nil {
		t.Skipf("cannot find the backing file of %s: %v", dev, err)
	}
	return strings.TrimSpace(string(b))
}

func TestBlockResizeAndRescan(t *testing.T) {
	t.Parallel()
	dev := newLoopDevice(t, 1<<20, 512)
	b, err := openBlockRetry(dev, BlockOptions{BlockSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	wantResizeErr(t, "Resize", b.Resize(2<<20), ErrUnsupported, dev, "from 1MiB to 2MiB", "resize the device itself", "rescan")
	if err := b.Rescan(); err != nil || b.Size() != 1<<20 {
		t.Fatalf("Rescan of an unchanged device: %v, size %d", err, b.Size())
	}
	backing := loopBacking(t, dev)
	if err := os.Truncate(backing, 3<<20+512); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("losetup", "--set-capacity", dev).CombinedOutput(); err != nil {
		t.Skipf("losetup --set-capacity %s: %v: %s", dev, err, out)
	}
	if err := b.Rescan(); err != nil {
		t.Fatal(err)
	}
	if b.Size() != 3<<20 { // rounded down to the 4096-byte block
		t.Fatalf("size %d after growing the device to 3MiB+512", b.Size())
	}
	p := AlignedBuffer(4096, 4096)
	fillPattern(p, 3<<20-4096, 3)
	if err := b.WriteAt(p, 3<<20-4096, 0); err != nil {
		t.Fatal(err)
	}
	q := AlignedBuffer(4096, 4096)
	if err := b.ReadAt(q, 3<<20-4096); err != nil || !bytes.Equal(p, q) {
		t.Errorf("new end of the device: err %v", err)
	}
	b.Close()
	if err := b.Rescan(); !errors.Is(err, ErrClosed) {
		t.Errorf("Rescan after Close: %v", err)
	}
}

// TestResizeWhileServing grows disks while goroutines read, write (and
// view) them at the end the last size they saw allows, at the start, and
// at random; each checks what it wrote. Run it with -race: ReadAt, WriteAt,
// ViewAt and Size must not race with Resize.
func TestResizeWhileServing(t *testing.T) {
	t.Parallel()
	type resizable interface {
		Disk
		Resizer
	}
	const leaf = memLeafLen * MemChunkSize
	for _, tt := range []struct {
		name               string
		open               func(t *testing.T) resizable
		start, step, limit int64
		retains            bool
	}{
		{"mem-4096", func(t *testing.T) resizable {
			m, err := NewMem(1<<20, 4096)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m.Close() })
			return m
		}, 1 << 20, leaf / 4, 5*leaf + 1<<20, true},
		{"mem-512", func(t *testing.T) resizable {
			m, err := NewMem(leaf-32<<10, 512)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m.Close() })
			return m
		}, leaf - 32<<10, 4 << 10, leaf + 32<<10, true},
		{"null", func(t *testing.T) resizable {
			n := NewNull(4096, 4096)
			t.Cleanup(func() { n.Close() })
			return n
		}, 4096, 64 << 10, 4 << 20, false},
		{"file-tmpfs", func(t *testing.T) resizable {
			f, err := OpenFile(filepath.Join(shmDir(t), "grow.img"), FileOptions{Create: true, Size: 64 << 10, BlockSize: 4096})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			return f
		}, 64 << 10, 256 << 10, 16 << 20, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := tt.open(t)
			runResizeWhileServing(t, d, tt.start, tt.step, tt.limit, tt.retains)
		})
	}
}

func runResizeWhileServing(t *testing.T, d interface {
	Disk
	Resizer
}, start, step, limit int64, retains bool) {
	const workers = 4
	bs := int64(d.BlockSize())
	var done, failed atomic.Bool
	var ops atomic.Int64 // requests done by the workers
	var wg sync.WaitGroup
	errs := make(chan error, workers+2)
	wg.Add(1)
	go func() { // the resizer, which lets the workers run between resizes
		defer wg.Done()
		defer done.Store(true)
		for sz := start + step; sz <= limit; sz += step {
			for want := ops.Load() + workers; ops.Load() < want && !failed.Load(); {
				runtime.Gosched()
			}
			if err := d.Resize(sz); err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Add(1)
	go func() { // sizes only grow, in whole blocks
		defer wg.Done()
		last := int64(0)
		for !done.Load() {
			sz := d.Size()
			if sz < last || sz%bs != 0 {
				errs <- errors.New("size went from " + sizeText(last) + " to " + sizeText(sz))
				return
			}
			last = sz
			runtime.Gosched()
		}
	}()
	viewer, _ := d.(Viewer)
	written := make([]map[int64]bool, workers)
	for w := range workers {
		written[w] = map[int64]bool{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			p := AlignedBuffer(int(bs), 4096)
			q := AlignedBuffer(int(bs), 4096)
			var segs [1][]byte
			seed := uint64(w + 1)
			for i := 0; !done.Load() || i < 50; i++ {
				n := d.Size() / bs
				var blk int64
				switch i % 3 {
				case 0: // the last block this worker owns below the size seen
					blk = n - 1 - (n-1-int64(w))%workers
				case 1: // the start
					blk = int64(w) + workers*rng.Int64N(16)
				default:
					blk = rng.Int64N(n)
					blk -= (blk - int64(w)) % workers
				}
				if blk < 0 || blk >= n || blk%workers != int64(w) {
					continue
				}
				off := blk * bs
				fillPattern(p, off, seed)
				fail := func(err error) {
					failed.Store(true)
					errs <- err
				}
				if err := d.WriteAt(p, off, 0); err != nil {
					fail(err)
					return
				}
				if err := d.ReadAt(q, off); err != nil {
					fail(err)
					return
				}
				if retains && !bytes.Equal(p, q) {
					fail(errors.New("read back other data at " + sizeText(off)))
					return
				}
				if viewer != nil {
					if k, err := viewer.ViewAt(segs[:], off, int(bs)); err != nil || k != 1 || !bytes.Equal(segs[0], p) {
						fail(errors.New("ViewAt differs at " + sizeText(off)))
						return
					}
				}
				written[w][off] = true
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if d.Size() != limit-(limit-start)%step {
		t.Errorf("final size %d", d.Size())
	}
	if !retains {
		return
	}
	q := AlignedBuffer(int(bs), 4096)
	for w := range workers {
		for off := range written[w] {
			if err := d.ReadAt(q, off); err != nil {
				t.Fatal(err)
			}
			if at := checkPattern(q, off, uint64(w+1)); at >= 0 {
				t.Fatalf("worker %d's block at %d differs at the end", w, off)
			}
		}
	}
}
