//go:build linux

package backstore

import (
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestConformance runs the same suite against every kind of disk: RAM (512
// and 4096-byte blocks), null, files on tmpfs and on the disk (buffered and
// O_DIRECT) and loop block devices (512 and 4096-byte sectors). The
// subtests of one kind share its disk and run in order; the kinds run in
// parallel.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, k := range conformanceKinds() {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			runConformance(t, k, k.open(t, conformanceSize))
		})
	}
}

// errCase is a request that must fail.
type errCase struct {
	name string
	do   func() error
}

func runConformance(t *testing.T, k diskKind, d Disk) {
	bs := d.BlockSize()
	size := d.Size()
	buf := func(n int) []byte { return AlignedBuffer(n, 4096) }
	// want checks that p, read at off, holds the pattern of seed (or
	// zeroes on a disk that retains nothing).
	want := func(t *testing.T, what string, p []byte, off int64, seed uint64) {
		t.Helper()
		if !k.retains {
			if i := firstNonZero(p); i >= 0 {
				t.Fatalf("%s: byte %d is %#x, want zero", what, off+int64(i), p[i])
			}
			return
		}
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
	write := func(t *testing.T, off int64, n int, seed uint64, flags WriteFlags) {
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
	stats := func() Stats { return d.(StatsReporter).Stats() }

	t.Run("geometry", func(t *testing.T) {
		if bs != 512 && bs != 4096 {
			t.Errorf("BlockSize = %d", bs)
		}
		if size < conformanceSize || size%int64(bs) != 0 {
			t.Errorf("Size = %d, want >= %d and a multiple of %d", size, conformanceSize, bs)
		}
		if d.ReadOnly() {
			t.Error("new disk is read-only")
		}
		_, isDiscarder := d.(Discarder)
		_, isZeroWriter := d.(ZeroWriter)
		if _, isNull := d.(*Null); isNull == (isDiscarder || isZeroWriter) {
			t.Errorf("capabilities: Discarder %v, ZeroWriter %v; want both exactly on non-null disks", isDiscarder, isZeroWriter)
		}
		if _, ok := d.(VectoredDisk); !ok {
			t.Error("not a VectoredDisk")
		}
	})

	t.Run("boundaries", func(t *testing.T) {
		write(t, 0, bs, 1, 0)
		write(t, size-int64(bs), bs, 2, 0)
		want(t, "first block", read(t, 0, bs), 0, 1)
		want(t, "last block", read(t, size-int64(bs), bs), size-int64(bs), 2)
		// Across a RAM chunk boundary.
		off := int64(MemChunkSize - bs)
		write(t, off, 3*bs, 3, 0)
		want(t, "across a chunk boundary", read(t, off, 3*bs), off, 3)
		// Zero-length requests at both ends are valid no-ops.
		if err := d.ReadAt(nil, size); err != nil {
			t.Errorf("empty read at the end: %v", err)
		}
		if err := d.WriteAt(nil, 0, FUA); err != nil {
			t.Errorf("empty write: %v", err)
		}
		// The whole disk in one request.
		whole := read(t, 0, int(size))
		want(t, "whole disk, first block", whole[:bs], 0, 1)
		want(t, "whole disk, last block", whole[size-int64(bs):], size-int64(bs), 2)
	})

	t.Run("out-of-range", func(t *testing.T) {
		huge := int64(math.MaxInt64) &^ int64(bs-1)
		b1, b2 := buf(bs), buf(2*bs)
		cases := []errCase{
			{"read at end", func() error { return d.ReadAt(b1, size) }},
			{"read across end", func() error { return d.ReadAt(b2, size-int64(bs)) }},
			{"read negative offset", func() error { return d.ReadAt(b1, -int64(bs)) }},
			{"read huge offset", func() error { return d.ReadAt(b1, huge) }},
			{"write at end", func() error { return d.WriteAt(b1, size, 0) }},
			{"write across end", func() error { return d.WriteAt(b2, size-int64(bs), FUA) }},
			{"write negative offset", func() error { return d.WriteAt(b1, -int64(bs), 0) }},
			{"write huge offset", func() error { return d.WriteAt(b1, huge, 0) }},
			{"readv across end", func() error { return d.(VectoredDisk).ReadvAt([][]byte{b1, b1}, size-int64(bs)) }},
			{"writev across end", func() error { return d.(VectoredDisk).WritevAt([][]byte{b1, b1}, size-int64(bs), 0) }},
		}
		if dd, ok := d.(Discarder); ok {
			cases = append(cases,
				errCase{"discard at end", func() error { return dd.Discard(size, int64(bs)) }},
				errCase{"discard length overflowing", func() error { return dd.Discard(size-int64(bs), math.MaxInt64&^int64(bs-1)) }},
				errCase{"discard negative length", func() error { return dd.Discard(0, -int64(bs)) }},
				errCase{"discard huge offset", func() error { return dd.Discard(huge, int64(bs)) }},
			)
		}
		if z, ok := d.(ZeroWriter); ok {
			cases = append(cases,
				errCase{"write zeroes across end", func() error { return z.WriteZeroes(size-int64(bs), 2*int64(bs), FUA) }},
				errCase{"write zeroes negative offset", func() error { return z.WriteZeroes(-int64(bs), int64(bs), 0) }},
				errCase{"write zeroes overflowing", func() error { return z.WriteZeroes(huge, huge, 0) }},
			)
		}
		before := stats().Rejected
		for _, c := range cases {
			err := c.do()
			var re *RangeError
			if !errors.As(err, &re) || !re.OutOfRange() {
				t.Errorf("%s: err = %v, want an out-of-range *RangeError", c.name, err)
				continue
			}
			if re.Size != size || re.BlockSize != bs {
				t.Errorf("%s: RangeError size %d block %d, want %d %d", c.name, re.Size, re.BlockSize, size, bs)
			}
		}
		if got := stats().Rejected - before; got != uint64(len(cases)) {
			t.Errorf("Stats.Rejected grew by %d, want %d", got, len(cases))
		}
		want(t, "last block after refused requests", read(t, size-int64(bs), bs), size-int64(bs), 2)
	})

	t.Run("unaligned", func(t *testing.T) {
		b1 := buf(bs)
		cases := []errCase{
			{"read at odd offset", func() error { return d.ReadAt(b1, 1) }},
			{"read half block", func() error { return d.ReadAt(b1[:bs/2], 0) }},
			{"write at half block", func() error { return d.WriteAt(b1, int64(bs/2), 0) }},
			{"write odd length", func() error { return d.WriteAt(b1[:bs-1], 0, FUA) }},
			{"readv half block", func() error { return d.(VectoredDisk).ReadvAt([][]byte{b1[:bs/2]}, 0) }},
			{"writev odd total", func() error { return d.(VectoredDisk).WritevAt([][]byte{b1, b1[:1]}, 0, 0) }},
		}
		if dd, ok := d.(Discarder); ok {
			cases = append(cases, errCase{"discard odd", func() error { return dd.Discard(1, int64(bs)) }})
		}
		if z, ok := d.(ZeroWriter); ok {
			cases = append(cases, errCase{"write zeroes short", func() error { return z.WriteZeroes(0, int64(bs-1), 0) }})
		}
		for _, c := range cases {
			if err := c.do(); !isRangeError(err, RangeUnaligned) {
				t.Errorf("%s: err = %v, want an unaligned *RangeError", c.name, err)
			}
		}
		want(t, "first block after refused requests", read(t, 0, bs), 0, 1)
	})

	// A region that starts a few blocks before a RAM chunk boundary and
	// covers two whole chunks, so that discard frees some chunks and zeroes
	// parts of others.
	zeroRegion := func(t *testing.T, base int64, zero func(off, n int64) error) {
		t.Helper()
		start := base + MemChunkSize - 2*int64(bs)
		n := int64(2*MemChunkSize + 4*bs)
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
		dd, ok := d.(Discarder)
		if !ok {
			t.Skip("no Discarder")
		}
		before := stats().Discard.Ops
		zeroRegion(t, 4*MemChunkSize, dd.Discard)
		if err := dd.Discard(0, 0); err != nil {
			t.Errorf("empty discard: %v", err)
		}
		if got := stats().Discard.Ops - before; got != 2 {
			t.Errorf("Stats.Discard.Ops grew by %d, want 2", got)
		}
	})

	t.Run("write-zeroes", func(t *testing.T) {
		z, ok := d.(ZeroWriter)
		if !ok {
			t.Skip("no ZeroWriter")
		}
		zeroRegion(t, 8*MemChunkSize, func(off, n int64) error { return z.WriteZeroes(off, n, 0) })
		zeroRegion(t, 12*MemChunkSize, func(off, n int64) error { return z.WriteZeroes(off, n, FUA) })
		// Zeroing what is already zero changes nothing.
		zeroRegion(t, 12*MemChunkSize, func(off, n int64) error { return z.WriteZeroes(off, n, 0) })
	})

	t.Run("vectored", func(t *testing.T) {
		v := d.(VectoredDisk)
		off := int64(20 * MemChunkSize)
		src := buf(8 * bs)
		fillPattern(src, off, 11)
		segs := [][]byte{src[:bs], src[bs : 4*bs], src[4*bs : 4*bs], src[4*bs : 6*bs], src[6*bs:]}
		if err := v.WritevAt(segs, off, 0); err != nil {
			t.Fatal(err)
		}
		want(t, "ReadAt after WritevAt", read(t, off, 8*bs), off, 11)
		dst := buf(8 * bs)
		if err := v.ReadvAt([][]byte{dst[:2*bs], nil, dst[2*bs : 6*bs], dst[6*bs:]}, off); err != nil {
			t.Fatal(err)
		}
		want(t, "ReadvAt", dst, off, 11)
		// More segments than one system call takes.
		const nseg = 3*iovBatch + 5
		big := buf(nseg * bs)
		off = int64(24 * MemChunkSize)
		fillPattern(big, off, 12)
		many := make([][]byte, nseg)
		for i := range many {
			many[i] = big[i*bs : (i+1)*bs]
		}
		if err := v.WritevAt(many, off, FUA); err != nil {
			t.Fatal(err)
		}
		want(t, "ReadAt after a long WritevAt", read(t, off, nseg*bs), off, 12)
		clear(big)
		if err := v.ReadvAt(many, off); err != nil {
			t.Fatal(err)
		}
		want(t, "long ReadvAt", big, off, 12)
	})

	t.Run("concurrent-writers", func(t *testing.T) {
		const writers, rounds, blocks = 4, 8, 8
		base := int64(40 * MemChunkSize)
		span := int64(blocks * bs)
		var wg sync.WaitGroup
		// The in-flight gauge stays within [0, writers] while they run.
		stop := make(chan struct{})
		sampled := make(chan int64, 1)
		go func() {
			var worst int64
			for {
				select {
				case <-stop:
					sampled <- worst
					return
				default:
				}
				if n := stats().InFlight; n < 0 || n > writers {
					worst = n
				}
				time.Sleep(20 * time.Microsecond)
			}
		}()
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				off := base + int64(w)*span
				p := buf(int(span))
				for r := range rounds {
					fillPattern(p, off, uint64(100*w+r))
					flags := WriteFlags(0)
					if r%2 == 1 {
						flags = FUA
					}
					if err := d.WriteAt(p, off, flags); err != nil {
						t.Errorf("writer %d: %v", w, err)
						return
					}
					q := buf(bs)
					if err := d.ReadAt(q, off); err != nil {
						t.Errorf("writer %d: %v", w, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(stop)
		if n := <-sampled; n != 0 {
			t.Errorf("Stats.InFlight was %d with %d writers", n, writers)
		}
		if n := stats().InFlight; n != 0 {
			t.Errorf("Stats.InFlight = %d after the writers finished, want 0", n)
		}
		for w := range writers {
			off := base + int64(w)*span
			want(t, "writer's range", read(t, off, int(span)), off, uint64(100*w+rounds-1))
		}
	})

	t.Run("flush-fua", func(t *testing.T) {
		before := stats()
		write(t, 2*int64(bs), bs, 21, FUA)
		if err := d.Flush(); err != nil {
			t.Fatalf("Flush: %v", err)
		}
		after := stats()
		if after.FUAWrites != before.FUAWrites+1 || after.Write.Ops != before.Write.Ops+1 {
			t.Errorf("FUA write counted as %d FUA / %d writes, want 1 / 1",
				after.FUAWrites-before.FUAWrites, after.Write.Ops-before.Write.Ops)
		}
		if after.Flush.Ops != before.Flush.Ops+1 || after.Flush.Errors != before.Flush.Errors {
			t.Errorf("flush counted as %d ops, %d errors", after.Flush.Ops-before.Flush.Ops, after.Flush.Errors-before.Flush.Errors)
		}
		want(t, "FUA write", read(t, 2*int64(bs), bs), 2*int64(bs), 21)
	})

	t.Run("stats", func(t *testing.T) {
		s := stats()
		if s.Read.Ops == 0 || s.Read.Bytes == 0 || s.Write.Ops == 0 || s.Write.Bytes == 0 {
			t.Errorf("counters did not move: %+v", s)
		}
		if s.Errors() != 0 {
			t.Errorf("%d medium errors", s.Errors())
		}
		for name, o := range map[string]OpStats{"read": s.Read, "write": s.Write, "flush": s.Flush} {
			if o.Latency.Count() != o.Ops {
				t.Errorf("%s: latency histogram holds %d ops, counters %d", name, o.Latency.Count(), o.Ops)
			}
		}
		// Every request so far, refused ones included, has left flight;
		// so has a no-wait read, served or declined.
		if nw, ok := d.(NoWaitReader); ok {
			if _, err := nw.ReadAtNoWait(buf(bs), 0); err != nil {
				t.Errorf("ReadAtNoWait: %v", err)
			}
		}
		if n := stats().InFlight; n != 0 {
			t.Errorf("Stats.InFlight = %d on an idle disk, want 0", n)
		}
	})

	t.Run("health", func(t *testing.T) {
		h, err := d.(HealthReporter).Health()
		if _, isBlock := unwrapDisk(d).(*Block); isBlock {
			// Loop devices have no SMART: the disk must say so.
			if !errors.Is(err, ErrUnsupported) || h.Supported || h.Reason == "" {
				t.Fatalf("loop device health = %+v, %v; want unsupported with a reason", h, err)
			}
			if h != unsupportedHealth(h.Reason) {
				t.Errorf("unsupported health carries numbers: %+v", h)
			}
			if !strings.Contains(h.Reason, "virtual") {
				t.Errorf("reason %q does not say the device is virtual", h.Reason)
			}
			return
		}
		if err != nil || !h.Supported || h.Source != SourceSynthetic || h.CriticalWarning != 0 {
			t.Fatalf("health = %+v, %v; want synthetic without warnings", h, err)
		}
		s := stats()
		if h.HostWriteCommands != s.Write.Ops || h.HostReadCommands != s.Read.Ops || h.DataUnitsWritten != DataUnits(s.Write.Bytes) {
			t.Errorf("health counters %+v do not match stats %+v", h, s)
		}
	})

	t.Run("read-only", func(t *testing.T) {
		write(t, 3*int64(bs), bs, 31, 0)
		if err := d.Flush(); err != nil {
			t.Fatal(err)
		}
		ro := k.readOnly(t, d)
		if !ro.ReadOnly() {
			t.Fatal("ReadOnly() = false")
		}
		p := buf(bs)
		if err := ro.ReadAt(p, 3*int64(bs)); err != nil {
			t.Fatal(err)
		}
		want(t, "read-only read", p, 3*int64(bs), 31)
		if err := ro.WriteAt(p, 0, 0); !errors.Is(err, ErrReadOnly) {
			t.Errorf("WriteAt: %v, want ErrReadOnly", err)
		}
		if err := ro.WriteAt(p, 0, FUA); !errors.Is(err, ErrReadOnly) {
			t.Errorf("FUA WriteAt: %v, want ErrReadOnly", err)
		}
		if err := ro.(VectoredDisk).WritevAt([][]byte{p}, 0, 0); !errors.Is(err, ErrReadOnly) {
			t.Errorf("WritevAt: %v, want ErrReadOnly", err)
		}
		if dd, ok := ro.(Discarder); ok {
			if err := dd.Discard(0, int64(bs)); !errors.Is(err, ErrReadOnly) {
				t.Errorf("Discard: %v, want ErrReadOnly", err)
			}
		}
		if z, ok := ro.(ZeroWriter); ok {
			if err := z.WriteZeroes(0, int64(bs), 0); !errors.Is(err, ErrReadOnly) {
				t.Errorf("WriteZeroes: %v, want ErrReadOnly", err)
			}
		}
		if err := ro.Flush(); err != nil {
			t.Errorf("Flush on a read-only disk: %v", err)
		}
		clear(p)
		if err := ro.ReadAt(p, 0); err != nil {
			t.Fatal(err)
		}
		want(t, "block 0 after refused writes", p, 0, 1)

		if err := ro.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := ro.ReadAt(p, 0); !errors.Is(err, ErrClosed) {
			t.Errorf("ReadAt after Close: %v, want ErrClosed", err)
		}
		if err := ro.Flush(); !errors.Is(err, ErrClosed) {
			t.Errorf("Flush after Close: %v, want ErrClosed", err)
		}
		if err := ro.Close(); !errors.Is(err, ErrClosed) {
			t.Errorf("second Close: %v, want ErrClosed", err)
		}
	})
}
