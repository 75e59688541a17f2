package backstore

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// place writes p at off through PlaceAt and Placed, as a transport
// placing an RDMA Read does.
func place(t testing.TB, m *Mem, p []byte, off int64, flags WriteFlags) {
	t.Helper()
	var segs [4][]byte
	pl, err := m.PlaceAt(segs[:], off, len(p))
	if err != nil {
		t.Fatalf("PlaceAt(%d, %d): %v", off, len(p), err)
	}
	rest := p
	for _, s := range segs[:pl.Segs] {
		rest = rest[copy(s, rest):]
	}
	if len(rest) != 0 {
		t.Fatalf("PlaceAt(%d, %d): segments hold %d bytes too few", off, len(p), len(rest))
	}
	if err := m.Placed(pl, flags); err != nil {
		t.Fatalf("Placed(%d, %d): %v", off, len(p), err)
	}
}

// TestMemPlace: data placed through PlaceAt reads back byte-exact at
// chunk-aligned and unaligned offsets, over up to three chunks; the
// segments are the disk's own memory (never the shared zero chunk), and
// the write counts as one, FUA included.
func TestMemPlace(t *testing.T) {
	t.Parallel()
	m, err := NewMem(1<<20, 512)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		off  int64
		n, k int
	}{
		{0, 512, 1},
		{0, MemChunkSize, 1},
		{MemChunkSize, 2 * MemChunkSize, 2},
		{MemChunkSize - 512, 1024, 2},
		{3*MemChunkSize + 4096, 128 << 10, 3},
		{7*MemChunkSize - 512, 2*MemChunkSize + 1024, 4},
		{1<<20 - 4096, 4096, 1},
		{8192, 0, 0},
	} {
		p := make([]byte, c.n)
		fillPattern(p, c.off, uint64(c.n))
		before := m.Stats()
		var segs [4][]byte
		pl, err := m.PlaceAt(segs[:], c.off, c.n)
		if err != nil {
			t.Fatalf("PlaceAt(%d, %d): %v", c.off, c.n, err)
		}
		if pl.Segs != c.k || pl.Off != c.off || pl.Len != c.n {
			t.Fatalf("PlaceAt(%d, %d): %+v, want %d segments", c.off, c.n, pl, c.k)
		}
		if got := m.Stats().InFlight; got != 1 {
			t.Fatalf("PlaceAt(%d, %d): %d in flight, want 1", c.off, c.n, got)
		}
		rest := p
		for _, s := range segs[:pl.Segs] {
			if len(s) > 0 && &s[0] == &m.zeros[0] {
				t.Fatal("PlaceAt handed out the shared zero chunk")
			}
			rest = rest[copy(s, rest):]
		}
		if len(rest) != 0 {
			t.Fatalf("PlaceAt(%d, %d): segments hold %d bytes too few", c.off, c.n, len(rest))
		}
		if err := m.Placed(pl, FUA); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, c.n)
		if err := m.ReadAt(got, c.off); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, p) {
			t.Fatalf("placed %d bytes at %d: read back differs", c.n, c.off)
		}
		after := m.Stats()
		if after.Write.Ops != before.Write.Ops+1 || after.Write.Bytes != before.Write.Bytes+uint64(c.n) ||
			after.FUAWrites != before.FUAWrites+1 || after.InFlight != 0 || after.Rejected != before.Rejected {
			t.Fatalf("placed %d bytes at %d: stats before %+v after %+v", c.n, c.off, before, after)
		}
	}
	// Unwritten blocks still read as zeroes (the zero chunk was not written).
	var segs [1][]byte
	if k, err := m.ViewAt(segs[:], 12*MemChunkSize, 4096); err != nil || k != 1 || !bytes.Equal(segs[0], make([]byte, 4096)) {
		t.Fatalf("unwritten chunk after placements: %d segments, %v", k, err)
	}
}

// TestMemPlaceRefused: PlaceAt refuses what WriteAt refuses, with the same
// errors and counts, and a range needing more segments than given with
// ErrUnsupported, counting nothing.
func TestMemPlaceRefused(t *testing.T) {
	t.Parallel()
	m, err := NewMem(1<<20, 512)
	if err != nil {
		t.Fatal(err)
	}
	var segs [4][]byte
	for _, c := range []struct {
		off int64
		n   int
	}{{1 << 20, 512}, {1<<20 - 512, 1024}, {100, 512}, {0, 100}, {-512, 512}} {
		before := m.Stats()
		_, err := m.PlaceAt(segs[:], c.off, c.n)
		werr := m.WriteAt(make([]byte, max(c.n, 0)), c.off, 0)
		if !isRangeErr(err) || !isRangeErr(werr) {
			t.Fatalf("PlaceAt(%d, %d): %v (WriteAt: %v), want a range error", c.off, c.n, err, werr)
		}
		if after := m.Stats(); after.Rejected != before.Rejected+2 || after.InFlight != 0 {
			t.Fatalf("refused placement: stats %+v", after)
		}
	}
	before := m.Stats()
	if _, err := m.PlaceAt(segs[:2], MemChunkSize-512, MemChunkSize+1024); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("placement over 3 chunks into 2 segments: %v, want ErrUnsupported", err)
	}
	if after := m.Stats(); after != before {
		t.Fatalf("declined placement counted: %+v, was %+v", after, before)
	}
	if m.Allocated() != 0 {
		t.Fatalf("refused placements allocated %d bytes", m.Allocated())
	}
	m.SetReadOnly(true)
	if _, err := m.PlaceAt(segs[:], 0, 512); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("placement on a read-only disk: %v", err)
	}
	m.SetReadOnly(false)
	// A placement begun before the disk became read-only completes.
	pl, err := m.PlaceAt(segs[:], 0, 512)
	if err != nil {
		t.Fatal(err)
	}
	m.SetReadOnly(true)
	if err := m.Placed(pl, 0); err != nil {
		t.Fatalf("placement begun while writable: %v", err)
	}
	m.SetReadOnly(false)
	// Unplace counts nothing and takes the write out of flight.
	before = m.Stats()
	pl, err = m.PlaceAt(segs[:], 4096, 4096)
	if err != nil {
		t.Fatal(err)
	}
	m.Unplace(pl)
	if after := m.Stats(); after.Write != before.Write || after.InFlight != 0 {
		t.Fatalf("Unplace: stats %+v, was %+v", after, before)
	}
	// Close while a placement is in flight: its data is not kept.
	pl, err = m.PlaceAt(segs[:], 8192, 4096)
	if err != nil {
		t.Fatal(err)
	}
	copy(segs[0], "data")
	m.Close()
	if err := m.Placed(pl, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Placed after Close: %v, want ErrClosed", err)
	}
	if _, err := m.PlaceAt(segs[:], 0, 512); !errors.Is(err, ErrClosed) {
		t.Fatalf("PlaceAt after Close: %v, want ErrClosed", err)
	}
	if s := m.Stats(); s.InFlight != 0 {
		t.Fatalf("%d in flight after Close", s.InFlight)
	}
}

// TestMemPlaceConcurrent places writes to disjoint ranges from several
// goroutines, sharing chunks, while others discard and write-zero whole
// chunks elsewhere, zero parts of shared chunks outside the written ranges,
// overlap placements with discards of their own chunks, and grow the disk:
// every range placed outside the discarded ones reads back exactly, and the
// race detector finds nothing.
func TestMemPlaceConcurrent(t *testing.T) {
	t.Parallel()
	const (
		writers = 4
		rounds  = 200
		span    = 8 * MemChunkSize // each writer's own region
	)
	m, err := NewMem(writers*span+8*MemChunkSize, 512)
	if err != nil {
		t.Fatal(err)
	}
	// The writers also share two chunks: writer w owns bytes
	// [w*4096, w*4096+4096) of every 32 KiB, the last 16 KiB of which the
	// background goroutine zeroes.
	shared := int64(writers * span)
	var wg sync.WaitGroup
	errs := make(chan error, writers+3)
	final := make([][]byte, writers)
	for w := range writers {
		final[w] = make([]byte, span)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			var segs [4][]byte
			base := int64(w) * span
			for i := range rounds {
				// An unaligned range of up to 128 KiB, often over 3 chunks.
				n := (1 + r.IntN(256)) * 512
				off := int64(r.IntN(int(span-int64(n))/512)) * 512
				p := make([]byte, n)
				fillPattern(p, off, uint64(w*rounds+i))
				pl, err := m.PlaceAt(segs[:], base+off, n)
				if err != nil {
					errs <- err
					return
				}
				rest := p
				for _, s := range segs[:pl.Segs] {
					rest = rest[copy(s, rest):]
				}
				if err := m.Placed(pl, 0); err != nil {
					errs <- err
					return
				}
				copy(final[w][off:], p)
				// The shared stripes: this writer's 4 KiB of each 32 KiB.
				so := shared + int64(r.IntN(2*MemChunkSize/32768))*32768 + int64(w)*4096
				q := make([]byte, 4096)
				fillPattern(q, so, uint64(i))
				pl, err = m.PlaceAt(segs[:], so, 4096)
				if err != nil {
					errs <- err
					return
				}
				copy(segs[0], q)
				if err := m.Placed(pl, 0); err != nil {
					errs <- err
					return
				}
				got := make([]byte, 4096)
				if err := m.ReadAt(got, so); err != nil || !bytes.Equal(got, q) {
					errs <- fmt.Errorf("writer %d: shared stripe at %d differs after its placement (%v)", w, so, err)
					return
				}
			}
		}()
	}
	// Whole chunks freed and zeroed past the shared area, the parts of the
	// shared chunks no writer owns zeroed, a placement overlapping a
	// discard of its own chunk (no defined result, but no failure), and
	// growth.
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		var segs [4][]byte
		other := shared + 4*MemChunkSize
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := m.Discard(other, MemChunkSize); err != nil {
				errs <- err
				return
			}
			if err := m.WriteZeroes(other+MemChunkSize, MemChunkSize, 0); err != nil {
				errs <- err
				return
			}
			pl, err := m.PlaceAt(segs[:], other+2*MemChunkSize-4096, 8192)
			if err != nil {
				errs <- err
				return
			}
			clear(segs[0])
			m.Discard(other+2*MemChunkSize, MemChunkSize)
			clear(segs[1])
			if err := m.Placed(pl, 0); err != nil {
				errs <- err
				return
			}
			for k := int64(0); k < 2*MemChunkSize; k += 32768 {
				if err := m.WriteZeroes(shared+k+16384, 16384, 0); err != nil {
					errs <- err
					return
				}
			}
			if i%50 == 0 {
				if err := m.Resize(m.Size() + MemChunkSize); err != nil {
					errs <- err
					return
				}
			}
		}
	}()
	wg.Wait()
	close(stop)
	bg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for w := range writers {
		got := make([]byte, span)
		if err := m.ReadAt(got, int64(w)*span); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, final[w]) {
			t.Fatalf("writer %d: region differs from what it placed", w)
		}
	}
	if s := m.Stats(); s.InFlight != 0 {
		t.Fatalf("%d in flight at the end", s.InFlight)
	}
}

// TestMemPlaceAllocs: placing into allocated chunks allocates nothing.
func TestMemPlaceAllocs(t *testing.T) {
	m, err := NewMem(1<<20, 512)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 128<<10)
	place(t, m, p, 4096, 0)
	var segs [4][]byte
	n := testing.AllocsPerRun(100, func() {
		pl, err := m.PlaceAt(segs[:], 4096, len(p))
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Placed(pl, FUA); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Fatalf("%.1f allocations per placed write, want 0", n)
	}
}
