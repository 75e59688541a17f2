//go:build ceph && linux

package rbd

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
)

const objSize = 4 << 20 // rbd's default object size

// TestConformance runs the checks of backstore's conformance suite (not
// exported from its package) on an image with 512- and 4096-byte blocks.
func TestConformance(t *testing.T) {
	t.Parallel()
	l := getLab(t)
	for _, bs := range []int{512, 4096} {
		t.Run(map[int]string{512: "512", 4096: "4096"}[bs], func(t *testing.T) {
			t.Parallel()
			name := l.newImage(t, "64M", "")
			cfg := l.config(name)
			cfg.BlockSize = bs
			runConformance(t, l, cfg, open(t, cfg))
		})
	}
}

func runConformance(t *testing.T, l *lab, cfg Config, d *Image) {
	bs := d.BlockSize()
	size := d.Size()
	buf := func(n int) []byte { return backstore.AlignedBuffer(n, 4096) }
	want := func(t *testing.T, what string, p []byte, off int64, seed uint64) {
		t.Helper()
		if at := checkPattern(p, off, seed); at >= 0 {
			t.Fatalf("%s: data differs at byte %d", what, at)
		}
	}
	wantZero := func(t *testing.T, what string, p []byte, off int64) {
		t.Helper()
		if i := firstNonZero(p); i >= 0 {
			t.Fatalf("%s: byte %d is %#x, want zero", what, off+int64(i), p[i])
		}
	}
	write := func(t *testing.T, off int64, n int, seed uint64, flags backstore.WriteFlags) {
		t.Helper()
		p := buf(n)
		fillPattern(p, off, seed)
		if err := d.WriteAt(p, off, flags); err != nil {
			t.Fatalf("WriteAt(%d bytes at %d): %v", n, off, err)
		}
	}
	read := func(t *testing.T, off int64, n int) []byte {
		t.Helper()
		p := buf(n)
		if err := d.ReadAt(p, off); err != nil {
			t.Fatalf("ReadAt(%d bytes at %d): %v", n, off, err)
		}
		return p
	}

	t.Run("geometry", func(t *testing.T) {
		if bs != cfg.BlockSize || size != 64<<20 || d.ReadOnly() {
			t.Errorf("BlockSize %d Size %d ReadOnly %v; want %d, %d, false", bs, size, d.ReadOnly(), cfg.BlockSize, 64<<20)
		}
		tr := d.Traits()
		if tr.Waits != backstore.WaitsAlways || !tr.ZeroesAfterDiscard {
			t.Errorf("Traits = %+v; want WaitsAlways and ZeroesAfterDiscard (the lab sets rbd skip partial discard = false)", tr)
		}
		if d.cacheOn {
			t.Error("rbd_cache on, the lab conf turns it off")
		}
	})

	t.Run("boundaries", func(t *testing.T) {
		write(t, 0, bs, 1, 0)
		write(t, size-int64(bs), bs, 2, 0)
		want(t, "first block", read(t, 0, bs), 0, 1)
		want(t, "last block", read(t, size-int64(bs), bs), size-int64(bs), 2)
		off := int64(objSize - bs)
		write(t, off, 3*bs, 3, 0)
		want(t, "across an object boundary", read(t, off, 3*bs), off, 3)
		if err := d.ReadAt(nil, size); err != nil {
			t.Errorf("empty read at the end: %v", err)
		}
		if err := d.WriteAt(nil, 0, backstore.FUA); err != nil {
			t.Errorf("empty write: %v", err)
		}
		whole := read(t, 0, int(size))
		want(t, "whole disk, first block", whole[:bs], 0, 1)
		want(t, "whole disk, last block", whole[size-int64(bs):], size-int64(bs), 2)
	})

	t.Run("out-of-range", func(t *testing.T) {
		huge := int64(math.MaxInt64) &^ int64(bs-1)
		b1, b2 := buf(bs), buf(2*bs)
		cases := map[string]func() error{
			"read at end":          func() error { return d.ReadAt(b1, size) },
			"read across end":      func() error { return d.ReadAt(b2, size-int64(bs)) },
			"read negative":        func() error { return d.ReadAt(b1, -int64(bs)) },
			"read huge":            func() error { return d.ReadAt(b1, huge) },
			"write at end":         func() error { return d.WriteAt(b1, size, 0) },
			"write across end":     func() error { return d.WriteAt(b2, size-int64(bs), backstore.FUA) },
			"writev across end":    func() error { return d.WritevAt([][]byte{b1, b1}, size-int64(bs), 0) },
			"readv across end":     func() error { return d.ReadvAt([][]byte{b1, b1}, size-int64(bs)) },
			"discard at end":       func() error { return d.Discard(size, int64(bs)) },
			"discard overflowing":  func() error { return d.Discard(size-int64(bs), math.MaxInt64&^int64(bs-1)) },
			"discard negative len": func() error { return d.Discard(0, -int64(bs)) },
			"zeroes across end":    func() error { return d.WriteZeroes(size-int64(bs), 2*int64(bs), backstore.FUA) },
			"zeroes overflowing":   func() error { return d.WriteZeroes(huge, huge, 0) },
			"start read huge": func() error {
				return d.Start(&backstore.AsyncIO{Op: backstore.AsyncRead, Bufs: [][]byte{b1}, Off: huge, Done: func(*backstore.AsyncIO) { t.Error("Done called") }})
			},
		}
		before := d.Stats().Rejected
		for name, do := range cases {
			var re *backstore.RangeError
			if err := do(); !errors.As(err, &re) || !re.OutOfRange() || re.Size != size || re.BlockSize != bs {
				t.Errorf("%s: err = %v, want an out-of-range *RangeError of this disk", name, err)
			}
		}
		if got := d.Stats().Rejected - before; got != uint64(len(cases)) {
			t.Errorf("Stats.Rejected grew by %d, want %d", got, len(cases))
		}
	})

	t.Run("unaligned", func(t *testing.T) {
		b1 := buf(bs)
		cases := map[string]func() error{
			"read odd offset":  func() error { return d.ReadAt(b1, 1) },
			"read half block":  func() error { return d.ReadAt(b1[:bs/2], 0) },
			"write odd length": func() error { return d.WriteAt(b1[:bs-1], 0, backstore.FUA) },
			"writev odd total": func() error { return d.WritevAt([][]byte{b1, b1[:1]}, 0, 0) },
			"discard odd":      func() error { return d.Discard(1, int64(bs)) },
			"zeroes short":     func() error { return d.WriteZeroes(0, int64(bs-1), 0) },
		}
		for name, do := range cases {
			var re *backstore.RangeError
			if err := do(); !errors.As(err, &re) || !re.Unaligned() {
				t.Errorf("%s: err = %v, want an unaligned *RangeError", name, err)
			}
		}
		want(t, "first block after refused requests", read(t, 0, bs), 0, 1)
	})

	// A range from 2 blocks before an object boundary over two whole
	// objects: partial and whole-object discards and zeroing.
	zeroRegion := func(t *testing.T, base int64, zero func(off, n int64) error) {
		t.Helper()
		start := base + objSize - 2*int64(bs)
		n := int64(2*objSize + 4*bs)
		outer := start - int64(bs)
		outerLen := int(n) + 2*bs
		write(t, outer, outerLen, 7, 0)
		if err := zero(start, n); err != nil {
			t.Fatal(err)
		}
		p := read(t, outer, outerLen)
		want(t, "block before the range", p[:bs], outer, 7)
		wantZero(t, "range", p[bs:bs+int(n)], start)
		want(t, "block after the range", p[bs+int(n):], start+n, 7)
	}

	t.Run("discard", func(t *testing.T) {
		before := d.Stats().Discard.Ops
		zeroRegion(t, 2*objSize, d.Discard)
		if err := d.Discard(0, 0); err != nil {
			t.Errorf("empty discard: %v", err)
		}
		// A single partial block.
		write(t, 9*objSize, 4*bs, 8, 0)
		if err := d.Discard(9*objSize+int64(bs), int64(bs)); err != nil {
			t.Fatal(err)
		}
		p := read(t, 9*objSize, 4*bs)
		wantZero(t, "discarded block", p[bs:2*bs], 9*objSize+int64(bs))
		want(t, "block after", p[2*bs:], 9*objSize+2*int64(bs), 8)
		if got := d.Stats().Discard.Ops - before; got != 3 {
			t.Errorf("Stats.Discard.Ops grew by %d, want 3", got)
		}
	})

	t.Run("write-zeroes", func(t *testing.T) {
		zeroRegion(t, 5*objSize, func(off, n int64) error { return d.WriteZeroes(off, n, 0) })
		zeroRegion(t, 5*objSize, func(off, n int64) error { return d.WriteZeroes(off, n, backstore.FUA) })
	})

	t.Run("vectored", func(t *testing.T) {
		off := int64(10 * objSize)
		src := buf(8 * bs)
		fillPattern(src, off, 11)
		segs := [][]byte{src[:bs], src[bs : 4*bs], src[4*bs : 4*bs], src[4*bs : 6*bs], src[6*bs:]}
		if err := d.WritevAt(segs, off, 0); err != nil {
			t.Fatal(err)
		}
		want(t, "ReadAt after WritevAt", read(t, off, 8*bs), off, 11)
		dst := buf(8 * bs)
		if err := d.ReadvAt([][]byte{dst[:2*bs], nil, dst[2*bs : 6*bs], dst[6*bs:]}, off); err != nil {
			t.Fatal(err)
		}
		want(t, "ReadvAt", dst, off, 11)
		// More segments than IOV_MAX (1024).
		const nseg = 1100
		big := buf(nseg * bs)
		off = int64(11 * objSize)
		fillPattern(big, off, 12)
		many := make([][]byte, nseg)
		for i := range many {
			many[i] = big[i*bs : (i+1)*bs]
		}
		if err := d.WritevAt(many, off, backstore.FUA); err != nil {
			t.Fatal(err)
		}
		want(t, "ReadAt after a long WritevAt", read(t, off, nseg*bs), off, 12)
		clear(big)
		if err := d.ReadvAt(many, off); err != nil {
			t.Fatal(err)
		}
		want(t, "long ReadvAt", big, off, 12)
	})

	t.Run("concurrent-writers", func(t *testing.T) {
		const writers, rounds, blocks = 8, 8, 8
		base := int64(13 * objSize)
		span := int64(blocks * bs)
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				off := base + int64(w)*span
				p := buf(int(span))
				for r := range rounds {
					fillPattern(p, off, uint64(100*w+r))
					if err := d.WriteAt(p, off, backstore.WriteFlags(r%2)); err != nil {
						t.Errorf("writer %d: %v", w, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if n := d.Stats().InFlight; n != 0 {
			t.Errorf("Stats.InFlight = %d after the writers finished", n)
		}
		for w := range writers {
			off := base + int64(w)*span
			want(t, "writer's range", read(t, off, int(span)), off, uint64(100*w+rounds-1))
		}
	})

	t.Run("flush-fua", func(t *testing.T) {
		before := d.Stats()
		write(t, 2*int64(bs), bs, 21, backstore.FUA)
		if err := d.Flush(); err != nil {
			t.Fatalf("Flush: %v", err)
		}
		after := d.Stats()
		if after.FUAWrites != before.FUAWrites+1 || after.Write.Ops != before.Write.Ops+1 || after.Flush.Ops != before.Flush.Ops+1 {
			t.Errorf("FUA write and flush counted as %d FUA / %d writes / %d flushes, want 1/1/1",
				after.FUAWrites-before.FUAWrites, after.Write.Ops-before.Write.Ops, after.Flush.Ops-before.Flush.Ops)
		}
		// Durable: another client (another rados instance) reads it.
		other := open(t, cfg)
		p := buf(bs)
		if err := other.ReadAt(p, 2*int64(bs)); err != nil {
			t.Fatal(err)
		}
		want(t, "FUA write seen by another client", p, 2*int64(bs), 21)
	})

	t.Run("stats-health", func(t *testing.T) {
		s := d.Stats()
		if s.Read.Ops == 0 || s.Write.Bytes == 0 || s.Errors() != 0 || s.InFlight != 0 {
			t.Errorf("stats %+v", s)
		}
		if s.Read.Latency.Count() != s.Read.Ops {
			t.Errorf("read latency histogram holds %d ops, counter %d", s.Read.Latency.Count(), s.Read.Ops)
		}
		h, err := d.Health()
		if err != nil || !h.Supported || h.CriticalWarning != 0 {
			t.Fatalf("Health = %+v, %v; want supported without warnings on a healthy lab", h, err)
		}
		if h.HostWriteCommands != s.Write.Ops || h.DataUnitsRead != backstore.DataUnits(s.Read.Bytes) {
			t.Errorf("health counters %+v do not match stats %+v", h, s)
		}
	})

	t.Run("read-only", func(t *testing.T) {
		write(t, 3*int64(bs), bs, 31, 0)
		rcfg := cfg
		rcfg.ReadOnly = true
		ro := open(t, rcfg)
		if !ro.ReadOnly() {
			t.Fatal("ReadOnly() = false")
		}
		p := buf(bs)
		if err := ro.ReadAt(p, 3*int64(bs)); err != nil {
			t.Fatal(err)
		}
		want(t, "read-only read", p, 3*int64(bs), 31)
		for name, do := range map[string]func() error{
			"WriteAt":     func() error { return ro.WriteAt(p, 0, 0) },
			"FUA WriteAt": func() error { return ro.WriteAt(p, 0, backstore.FUA) },
			"WritevAt":    func() error { return ro.WritevAt([][]byte{p}, 0, 0) },
			"Discard":     func() error { return ro.Discard(0, int64(bs)) },
			"WriteZeroes": func() error { return ro.WriteZeroes(0, int64(bs), 0) },
			"Resize":      func() error { return ro.Resize(2 * size) },
		} {
			if err := do(); !errors.Is(err, backstore.ErrReadOnly) {
				t.Errorf("%s: %v, want ErrReadOnly", name, err)
			}
		}
		if err := ro.Flush(); err != nil {
			t.Errorf("Flush on a read-only disk: %v", err)
		}
		if err := ro.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := ro.ReadAt(p, 0); !errors.Is(err, backstore.ErrClosed) {
			t.Errorf("ReadAt after Close: %v, want ErrClosed", err)
		}
		if err := ro.Close(); !errors.Is(err, backstore.ErrClosed) {
			t.Errorf("second Close: %v, want ErrClosed", err)
		}
	})
}

// TestAsyncManyInFlight keeps 256 writes, then 256 reads, in flight
// through Start and checks every block, that Done never runs inside
// Start and runs exactly once per I/O.
func TestAsyncManyInFlight(t *testing.T) {
	t.Parallel()
	l := getLab(t)
	d := open(t, l.config(l.newImage(t, "64M", "")))
	const n, size = 256, 16 << 10
	bufs := make([][]byte, n)
	ios := make([]backstore.AsyncIO, n)
	var calls [n]atomic.Int32
	var wg sync.WaitGroup
	var maxInFlight atomic.Int64
	run := func(op backstore.AsyncOp) {
		for i := range ios {
			if bufs[i] == nil {
				bufs[i] = make([]byte, size)
			}
			off := int64(i) * 3 * size // gaps between the I/Os
			if op == backstore.AsyncWrite {
				fillPattern(bufs[i], off, 5)
			} else {
				clear(bufs[i])
			}
			ios[i] = backstore.AsyncIO{Op: op, Bufs: [][]byte{bufs[i][:size/2], bufs[i][size/2:]}, Off: off, Ctx: i,
				Done: func(io *backstore.AsyncIO) {
					if st := make([]byte, 8192); strings.Contains(string(st[:runtime.Stack(st, false)]), ".(*Image).Start(") {
						t.Error("Done called inside Start")
					}
					calls[io.Ctx.(int)].Add(1)
					if io.Err != nil {
						t.Errorf("%v %d: %v", op, io.Ctx, io.Err)
					}
					wg.Done()
				}}
		}
		wg.Add(n)
		for i := range ios {
			if err := d.Start(&ios[i]); err != nil {
				t.Fatalf("Start %d: %v", i, err)
			}
			if f := d.Stats().InFlight; f > maxInFlight.Load() {
				maxInFlight.Store(f)
			}
		}
		wg.Wait()
	}
	run(backstore.AsyncWrite)
	run(backstore.AsyncRead)
	for i := range bufs {
		if at := checkPattern(bufs[i], int64(i)*3*size, 5); at >= 0 {
			t.Fatalf("I/O %d: data differs at %d", i, at)
		}
		if c := calls[i].Load(); c != 2 {
			t.Errorf("I/O %d: Done ran %d times, want 2", i, c)
		}
	}
	gap := make([]byte, 2*size)
	if err := d.ReadAt(gap, size); err != nil {
		t.Fatal(err)
	}
	if i := firstNonZero(gap); i >= 0 {
		t.Errorf("gap between I/Os written at %d", size+i)
	}
	if maxInFlight.Load() < 8 {
		t.Errorf("at most %d I/Os were in flight at once; want many", maxInFlight.Load())
	}
	t.Logf("at most %d of %d I/Os in flight", maxInFlight.Load(), n)
	// Flush, discard and write-zeroes through Start.
	done := make(chan error, 3)
	cb := func(io *backstore.AsyncIO) { done <- io.Err }
	for _, io := range []*backstore.AsyncIO{
		{Op: backstore.AsyncFlush, Done: cb},
		{Op: backstore.AsyncDiscard, Off: 0, Len: size, Done: cb},
		{Op: backstore.AsyncWriteZeroes, Off: 3 * size, Len: size, Flags: backstore.FUA, Done: cb},
	} {
		if err := d.Start(io); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("%v: %v", io.Op, err)
		}
	}
	p := make([]byte, 4*size)
	if err := d.ReadAt(p, 0); err != nil {
		t.Fatal(err)
	}
	if i := firstNonZero(p); i >= 0 {
		t.Errorf("byte %d not zero after discard / write-zeroes", i)
	}
	if err := d.Start(&backstore.AsyncIO{Op: 99, Done: cb}); !errors.Is(err, backstore.ErrUnsupported) {
		t.Errorf("unknown op: %v", err)
	}
}

// TestCompareAndWrite: a matching compare writes, a differing one does
// not and says where.
func TestCompareAndWrite(t *testing.T) {
	t.Parallel()
	l := getLab(t)
	d := open(t, l.config(l.newImage(t, "16M", "")))
	old, data := make([]byte, 512), make([]byte, 512)
	fillPattern(old, 8192, 1)
	fillPattern(data, 8192, 2)
	if err := d.WriteAt(old, 8192, 0); err != nil {
		t.Fatal(err)
	}
	if miss, err := d.CompareAndWrite(old, data, 8192); err != nil || miss != -1 {
		t.Fatalf("matching CompareAndWrite = %d, %v", miss, err)
	}
	bad := append([]byte(nil), data...)
	bad[100] ^= 0xff
	miss, err := d.CompareAndWrite(bad, old, 8192)
	if !errors.Is(err, ErrMiscompare) {
		t.Fatalf("differing CompareAndWrite: %d, %v; want ErrMiscompare", miss, err)
	}
	if miss != 8192+100 && miss != 100 {
		t.Errorf("mismatch offset %d, want 100 into the buffer", miss)
	}
	t.Logf("librbd's mismatch offset: %d (I/O at 8192, byte 100 differs)", miss)
	got := make([]byte, 512)
	if err := d.ReadAt(got, 8192); err != nil {
		t.Fatal(err)
	}
	if at := checkPattern(got, 8192, 2); at >= 0 {
		t.Errorf("data after the miscompare differs at %d: it was written", at)
	}
	// Pacific's librbd takes one 512-byte sector at most.
	if _, err := d.CompareAndWrite(make([]byte, 1024), make([]byte, 1024), 0); err == nil {
		t.Error("a 1024-byte CompareAndWrite succeeded; Pacific refuses more than a sector (update the doc)")
	}
	if s := d.Stats(); s.Write.Errors != 1 {
		t.Errorf("a miscompare counted as a medium error: %+v", s)
	}
}

// TestResizeAndWatch: Resize grows (not shrinks), and the header watch
// reports a resize done by the rbd tool.
func TestResizeAndWatch(t *testing.T) {
	t.Parallel()
	l := getLab(t)
	name := l.newImage(t, "16M", "")
	d := open(t, l.config(name))
	sizes := make(chan int64, 8)
	d.WatchSize(func(n int64) { sizes <- n })
	if err := d.Resize(8 << 20); !errors.Is(err, backstore.ErrUnsupported) {
		t.Errorf("shrinking Resize: %v, want ErrUnsupported", err)
	}
	if err := d.Resize(32<<20 + 1); err == nil {
		t.Error("Resize to an unaligned size succeeded")
	}
	if err := d.Resize(32 << 20); err != nil {
		t.Fatal(err)
	}
	if d.Size() != 32<<20 {
		t.Fatalf("Size after Resize = %d", d.Size())
	}
	p := make([]byte, 4096)
	fillPattern(p, 30<<20, 3)
	if err := d.WriteAt(p, 30<<20, 0); err != nil {
		t.Fatalf("write in the grown part: %v", err)
	}
	select {
	case n := <-sizes:
		if n != 32<<20 {
			t.Errorf("watch reported %d after Resize", n)
		}
	case <-time.After(10 * time.Second):
		t.Error("the watch did not report our own Resize")
	}
	l.run(t, "rbd", "resize", "--no-progress", "--size", "48M", "rbd/"+name)
	select {
	case n := <-sizes:
		if n != 48<<20 || d.Size() != 48<<20 {
			t.Errorf("watch reported %d, Size %d after rbd resize --size 48M", n, d.Size())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not fire after an outside rbd resize")
	}
	if err := d.ReadAt(p, 47<<20); err != nil {
		t.Errorf("read in the part grown outside: %v", err)
	}
	if err := d.Rescan(); err != nil || d.Size() != 48<<20 {
		t.Errorf("Rescan: %v, size %d", err, d.Size())
	}
}

// TestTwoGateways: two opens of one image (two rados clients, as two
// gateways) write alternately in lock mode shared: no errors, each sees
// the other's writes. The same rounds with one client, and in lock mode
// auto (lock passed on every write), are logged for comparison.
func TestTwoGateways(t *testing.T) {
	t.Parallel()
	l := getLab(t)
	const rounds = 100
	alternate := func(t *testing.T, a, b *Image) time.Duration {
		p := make([]byte, 4096)
		start := time.Now()
		for i := range rounds {
			w, r := a, b
			if i%2 == 1 {
				w, r = b, a
			}
			off := int64(i%16) * 4096
			fillPattern(p, off, uint64(i))
			if err := w.WriteAt(p, off, 0); err != nil {
				t.Fatalf("round %d: write: %v", i, err)
			}
			clear(p)
			if err := r.ReadAt(p, off); err != nil {
				t.Fatalf("round %d: read: %v", i, err)
			}
			if at := checkPattern(p, off, uint64(i)); at >= 0 {
				t.Fatalf("round %d: the other gateway reads old data at %d", i, at)
			}
		}
		sa, sb := a.Stats(), b.Stats()
		if e := sa.Errors() + sb.Errors(); e != 0 {
			t.Errorf("%d errors", e)
		}
		return time.Since(start) / rounds
	}
	cfg := l.config(l.newImage(t, "16M", ""))
	a, b := open(t, cfg), open(t, cfg)
	shared := alternate(t, a, b)
	single := alternate(t, a, a)
	acfg := l.config(l.newImage(t, "16M", "default"))
	acfg.Lock = LockAuto
	aa, ab := open(t, acfg), open(t, acfg)
	auto := alternate(t, aa, ab)
	t.Logf("write+read round: %v with two gateways (lock shared), %v with one, %v with two in lock mode auto", shared, single, auto)
}

// TestLockModes: shared refuses an image with exclusive-lock (saying how
// to disable it), exclusive takes the lock over and fences the previous
// owner, auto opens it.
func TestLockModes(t *testing.T) {
	t.Parallel()
	l := getLab(t)
	cfg := l.config(l.newImage(t, "16M", "default"))
	if _, err := Open(cfg, testLogger(t)); !errors.Is(err, ErrLockFeature) || !strings.Contains(err.Error(), "rbd feature disable") {
		t.Fatalf("shared Open of an exclusive-lock image: %v; want ErrLockFeature with the command", err)
	}
	auto := cfg
	auto.Lock = LockAuto
	au := open(t, auto)
	p := make([]byte, 4096)
	if err := au.WriteAt(p, 0, 0); err != nil {
		t.Fatalf("auto: %v", err)
	}
	au.Close()

	ex := cfg
	ex.Lock = LockExclusive
	first := open(t, ex)
	if err := first.WriteAt(p, 0, 0); err != nil {
		t.Fatalf("first exclusive owner: %v", err)
	}
	second := open(t, ex) // breaks first's lock: first is blocklisted
	fillPattern(p, 0, 9)
	if err := second.WriteAt(p, 0, 0); err != nil {
		t.Fatalf("second exclusive owner: %v", err)
	}
	err := first.WriteAt(p, 4096, 0)
	if !errors.Is(err, backstore.ErrFenced) {
		t.Fatalf("write by the fenced first owner: %v; want ErrFenced", err)
	}
	t.Logf("fenced owner's write: %v", err)
	if _, err := Open(Config{Pool: "rbd", Image: "x", Lock: LockExclusive, ReadOnly: true}, nil); err == nil {
		t.Error("exclusive and read-only accepted")
	}
}

// TestBlocklisted: a client blocklisted by the operator (ceph osd
// blocklist add) gets ErrFenced.
func TestBlocklisted(t *testing.T) {
	t.Parallel()
	l := getLab(t)
	cfg := l.config(l.newImage(t, "16M", ""))
	d := open(t, cfg)
	p := make([]byte, 4096)
	if err := d.WriteAt(p, 0, 0); err != nil {
		t.Fatal(err)
	}
	addr, err := d.ClientAddress()
	if err != nil {
		t.Fatal(err)
	}
	addr = strings.TrimPrefix(strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]"), "v2:")
	if i := strings.Index(addr, ",v1:"); i >= 0 {
		addr = addr[:i]
	}
	l.run(t, "ceph", "osd", "blocklist", "add", addr)
	t.Cleanup(func() { l.run(t, "ceph", "osd", "blocklist", "rm", addr) })
	var werr error
	if !waitFor(20*time.Second, func() bool {
		werr = d.WriteAt(p, 0, 0)
		return werr != nil
	}) {
		t.Fatal("writes still succeed after the blocklist")
	}
	if !errors.Is(werr, backstore.ErrFenced) || !errors.Is(werr, syscall.ESHUTDOWN) {
		t.Fatalf("write after blocklist: %v; want ErrFenced (ESHUTDOWN)", werr)
	}
	if !strings.Contains(werr.Error(), cfg.Name()) {
		t.Errorf("error %q does not name the image", werr)
	}
	// A new client (a new address) works again.
	d2 := open(t, cfg)
	if err := d2.WriteAt(p, 0, 0); err != nil {
		t.Fatalf("new client after the blocklist: %v", err)
	}
}

// TestFullAndTimeout (a cluster of its own): a full OSD (injectfull)
// makes the pool full: writes fail with ErrNoSpace and Health warns; a
// stopped OSD makes I/O fail with ErrTimeout after op_timeout.
func TestFullAndTimeout(t *testing.T) {
	t.Parallel()
	l := ownLab(t)
	cfg := l.config("test")
	cfg.OpTimeout = 2 * time.Second
	d := open(t, cfg)
	p := make([]byte, 4096)
	if err := d.WriteAt(p, 0, 0); err != nil {
		t.Fatal(err)
	}
	l.run(t, "ceph", "tell", "osd.0", "injectfull", "full")
	if !waitFor(20*time.Second, func() bool {
		return strings.Contains(l.run(t, "ceph", "osd", "pool", "ls", "detail"), "full")
	}) {
		t.Fatal("the pool did not become full")
	}
	err := d.WriteAt(p, 4096, 0)
	if !errors.Is(err, backstore.ErrNoSpace) {
		t.Errorf("write to a full pool: %v; want ErrNoSpace", err)
	}
	t.Logf("write to a full pool: %v", err)
	d.healthMu.Lock()
	d.healthAt = time.Time{}
	d.healthMu.Unlock()
	h, herr := d.Health()
	if herr != nil || h.CriticalWarning&backstore.WarnSpare == 0 || h.CriticalWarning&backstore.WarnReadOnly == 0 {
		t.Errorf("Health of a full pool: %+v (%v), %v; want spare and read-only warnings", h, h.CriticalWarning, herr)
	}
	if err := d.ReadAt(p, 0); err != nil {
		t.Errorf("read from a full pool: %v", err)
	}
	l.run(t, "ceph", "tell", "osd.0", "injectfull", "none")
	if !waitFor(30*time.Second, func() bool { return d.WriteAt(p, 4096, 0) == nil }) {
		t.Fatal("writes fail after the pool is no longer full")
	}

	// Stop the OSD: I/O times out.
	pid := strings.Fields(strings.Split(l.run(t, "grep", "^osd ", l.dir+"/pids"), "\n")[0])[1]
	l.run(t, "kill", "-STOP", pid)
	t.Cleanup(func() { l.run(t, "kill", "-CONT", pid) })
	// kill returns once the signal is sent; each thread stops when it next
	// runs. Read only once every thread of the OSD shows state T (seen once
	// on a loaded machine under -race: a read answered 1 ms after the kill).
	if !waitFor(10*time.Second, func() bool { return allStopped(pid) }) {
		t.Fatalf("osd %s: not every thread stopped 10 s after SIGSTOP", pid)
	}
	start := time.Now()
	err = d.ReadAt(p, 8192)
	if !errors.Is(err, backstore.ErrTimeout) {
		t.Errorf("read from a stopped OSD: %v; want ErrTimeout", err)
	}
	if el := time.Since(start); el > 30*time.Second {
		t.Errorf("the timeout took %v (op_timeout 2s)", el)
	}
	t.Logf("read from a stopped OSD after %v: %v", time.Since(start).Round(time.Millisecond), err)
}

// TestCloseWaits: Close returns after every I/O in flight has run its
// Done; I/O after Close is refused with ErrClosed, without Done.
func TestCloseWaits(t *testing.T) {
	t.Parallel()
	l := getLab(t)
	d, err := Open(l.config(l.newImage(t, "16M", "")), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	const n = 64
	var dones atomic.Int32
	ios := make([]backstore.AsyncIO, n)
	for i := range ios {
		ios[i] = backstore.AsyncIO{Op: backstore.AsyncWrite, Bufs: [][]byte{make([]byte, 8192)}, Off: int64(i) * 8192,
			Done: func(io *backstore.AsyncIO) {
				if io.Err != nil {
					t.Errorf("write: %v", io.Err)
				}
				dones.Add(1)
			}}
		if err := d.Start(&ios[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if got := dones.Load(); got != n {
		t.Fatalf("Close returned with %d of %d Done calls made", got, n)
	}
	io := &backstore.AsyncIO{Op: backstore.AsyncRead, Bufs: [][]byte{make([]byte, 512)}, Done: func(*backstore.AsyncIO) { t.Error("Done after Close") }}
	if err := d.Start(io); !errors.Is(err, backstore.ErrClosed) {
		t.Errorf("Start after Close: %v", err)
	}
	if _, err := d.Health(); !errors.Is(err, backstore.ErrClosed) {
		t.Errorf("Health after Close: %v", err)
	}
	if err := d.Resize(32 << 20); !errors.Is(err, backstore.ErrClosed) {
		t.Errorf("Resize after Close: %v", err)
	}
}

// TestFUAWithCache: with rbd_cache on, a FUA write is flushed before it
// completes: another client reads it at once.
func TestFUAWithCache(t *testing.T) {
	t.Parallel()
	l := getLab(t)
	conf, err := os.ReadFile(l.conf)
	if err != nil {
		t.Fatal(err)
	}
	cached := filepath.Join(t.TempDir(), "ceph.conf")
	if err := os.WriteFile(cached, []byte(strings.Replace(string(conf), "rbd cache = false", "rbd cache = true\nrbd cache policy = writeback\nrbd cache writethrough until flush = false\nrbd cache max dirty age = 60", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := l.config(l.newImage(t, "16M", ""))
	ccfg := cfg
	ccfg.ConfFile = cached
	d := open(t, ccfg)
	if !d.cacheOn {
		t.Fatal("rbd_cache not seen on")
	}
	other := open(t, cfg)
	p, q := make([]byte, 4096), make([]byte, 4096)
	for i := range 8 {
		off := int64(i) * 4096
		fillPattern(p, off, 77)
		if err := d.WriteAt(p, off, backstore.FUA); err != nil {
			t.Fatal(err)
		}
		if err := other.ReadAt(q, off); err != nil {
			t.Fatal(err)
		}
		if at := checkPattern(q, off, 77); at >= 0 {
			t.Fatalf("FUA write %d not on the OSDs: differs at %d", i, at)
		}
	}
	if s := d.Stats(); s.FUAWrites != 8 || s.Write.Ops != 8 {
		t.Errorf("stats %+v", s)
	}
}

// allStopped reports whether every thread of process pid is stopped
// (state T in /proc/PID/task/TID/stat).
func allStopped(pid string) bool {
	tasks, err := os.ReadDir("/proc/" + pid + "/task")
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/" + pid + "/task/" + task.Name() + "/stat")
		if err != nil {
			return false
		}
		// "TID (comm) S ...": the state follows the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}
