package backstore

import (
	"bytes"
	"errors"
	"sync"
	"testing"
)

func TestNewMemArguments(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		size int64
		bs   int
		ok   bool
	}{
		{1 << 20, 512, true},
		{1 << 20, 4096, true},
		{4096, 4096, true},
		{MaxMemSize, 4096, true},
		{0, 512, false},
		{-4096, 512, false},
		{1<<20 + 512, 4096, false},
		{MaxMemSize + 4096, 4096, false},
		{1 << 20, 0, false},
		{1 << 20, 1000, false},
		{1 << 20, 1024, false},
		{1 << 20, 2048, false},
		{1 << 20, 256, false},
		{1 << 20, 128 << 10, false},
	} {
		m, err := NewMem(tt.size, tt.bs)
		if (err == nil) != tt.ok {
			t.Errorf("NewMem(%d, %d): err %v, want ok %v", tt.size, tt.bs, err, tt.ok)
		}
		if m != nil {
			m.Close()
		}
	}
}

func TestMemThin(t *testing.T) {
	t.Parallel()
	const tib = 1 << 40
	m, err := NewMem(tib, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Allocated() != 0 {
		t.Fatalf("new 1 TiB disk holds %d bytes", m.Allocated())
	}
	// The directory of a 1 TiB thin disk is one pointer per 256 MiB.
	if n := len(*m.dir.Load()); n != tib/(memLeafLen*MemChunkSize) {
		t.Errorf("%d leaves", n)
	}
	p := make([]byte, 8192)
	fillPattern(p, tib-8192, 1)
	if err := m.WriteAt(p, tib-8192, 0); err != nil {
		t.Fatal(err)
	}
	if got := m.Allocated(); got != MemChunkSize {
		t.Errorf("after one write: %d bytes allocated, want one chunk", got)
	}
	q := make([]byte, 8192)
	if err := m.ReadAt(q, tib-8192); err != nil {
		t.Fatal(err)
	}
	if at := checkPattern(q, tib-8192, 1); at >= 0 {
		t.Fatalf("data differs at %d", at)
	}
	// Never-written ranges read as zeroes without allocating.
	fillPattern(q, 0, 2)
	if err := m.ReadAt(q, 1<<39); err != nil {
		t.Fatal(err)
	}
	if i := firstNonZero(q); i >= 0 {
		t.Errorf("unwritten range has a non-zero byte at %d", i)
	}
	if got := m.Allocated(); got != MemChunkSize {
		t.Errorf("after a read: %d bytes allocated", got)
	}
}

func TestMemDiscardFreesChunks(t *testing.T) {
	t.Parallel()
	m, err := NewMem(16*MemChunkSize, 512)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p := make([]byte, 4*MemChunkSize)
	fillPattern(p, MemChunkSize, 3)
	if err := m.WriteAt(p, MemChunkSize, 0); err != nil {
		t.Fatal(err)
	}
	if got := m.Allocated(); got != 4*MemChunkSize {
		t.Fatalf("%d bytes allocated, want 4 chunks", got)
	}
	// Half of chunk 1, chunks 2 and 3, half of chunk 4: two chunks freed,
	// two partly zeroed.
	if err := m.Discard(MemChunkSize+MemChunkSize/2, 3*MemChunkSize); err != nil {
		t.Fatal(err)
	}
	if got := m.Allocated(); got != 2*MemChunkSize {
		t.Errorf("after discard: %d bytes allocated, want 2 chunks", got)
	}
	if err := m.WriteZeroes(MemChunkSize, MemChunkSize, FUA); err != nil {
		t.Fatal(err)
	}
	if got := m.Allocated(); got != MemChunkSize {
		t.Errorf("after write zeroes: %d bytes allocated, want 1 chunk", got)
	}
	q := make([]byte, 4*MemChunkSize)
	if err := m.ReadAt(q, MemChunkSize); err != nil {
		t.Fatal(err)
	}
	if i := firstNonZero(q[:3*MemChunkSize+MemChunkSize/2]); i >= 0 {
		t.Errorf("discarded range has a non-zero byte at %d", MemChunkSize+i)
	}
	tail := int64(4*MemChunkSize + MemChunkSize/2)
	if at := checkPattern(q[3*MemChunkSize+MemChunkSize/2:], tail, 3); at >= 0 {
		t.Errorf("data after the discarded range differs at %d", at)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if m.Allocated() != 0 {
		t.Errorf("closed disk holds %d bytes", m.Allocated())
	}
	if err := m.WriteAt(p[:512], 0, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("write after Close: %v", err)
	}
}

// TestMemConcurrentFirstWrites has many goroutines write disjoint blocks of
// the same unallocated chunks at once: they must agree on one chunk, and no
// write may be lost.
func TestMemConcurrentFirstWrites(t *testing.T) {
	t.Parallel()
	const bs, chunks = 512, 4
	m, err := NewMem(chunks*MemChunkSize, bs)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const workers = 8
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := make([]byte, bs)
			for off := int64(w * bs); off < chunks*MemChunkSize; off += workers * bs {
				fillPattern(p, off, 9)
				if err := m.WriteAt(p, off, 0); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := m.Allocated(); got != chunks*MemChunkSize {
		t.Errorf("%d bytes allocated, want %d", got, chunks*MemChunkSize)
	}
	q := make([]byte, chunks*MemChunkSize)
	if err := m.ReadAt(q, 0); err != nil {
		t.Fatal(err)
	}
	if at := checkPattern(q, 0, 9); at >= 0 {
		t.Errorf("lost write at %d", at)
	}
}

func TestNullArguments(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		size     int64
		bs       int
		wantSize int64
		wantBS   int
	}{
		{1 << 20, 4096, 1 << 20, 4096},
		{1<<20 + 100, 4096, 1 << 20, 4096},
		{-1, 512, 0, 512},
		{1 << 20, 1000, 1 << 20, 512},
	} {
		n := NewNull(tt.size, tt.bs)
		if n.Size() != tt.wantSize || n.BlockSize() != tt.wantBS {
			t.Errorf("NewNull(%d, %d) = %d bytes of %d, want %d of %d", tt.size, tt.bs, n.Size(), n.BlockSize(), tt.wantSize, tt.wantBS)
		}
	}
	// An empty null disk refuses every non-empty request, without panicking.
	n := NewNull(0, 512)
	if err := n.ReadAt(make([]byte, 512), 0); !isRangeErr(err) {
		t.Errorf("read from an empty disk: %v", err)
	}
}

func isRangeErr(err error) bool {
	var re *RangeError
	return errors.As(err, &re)
}

// TestMemViewAt checks ViewAt shows the disk's contents, written or not, in
// chunk-sized pieces, and refuses what ReadAt refuses.
func TestMemViewAt(t *testing.T) {
	t.Parallel()
	m, err := NewMem(8*MemChunkSize, 512)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	data := make([]byte, 3*MemChunkSize)
	for i := range data {
		data[i] = byte(i*7 + i>>11)
	}
	// Chunks 1-3 written; chunk 5 never written.
	if err := m.WriteAt(data, MemChunkSize, 0); err != nil {
		t.Fatal(err)
	}
	segs := make([][]byte, 4)
	for _, c := range []struct {
		off int64
		n   int
		k   int
	}{
		{MemChunkSize + 512, 4096, 1},
		{2*MemChunkSize - 512, 1024, 2},
		{MemChunkSize + 512, 2*MemChunkSize + 1024, 3},
		{3*MemChunkSize + 512, 3 * MemChunkSize, 4}, // ends in unwritten chunks
		{0, 0, 0},
	} {
		k, err := m.ViewAt(segs, c.off, c.n)
		if err != nil {
			t.Fatalf("ViewAt(%d, %d): %v", c.off, c.n, err)
		}
		if k != c.k {
			t.Fatalf("ViewAt(%d, %d) used %d segments, want %d", c.off, c.n, k, c.k)
		}
		want := make([]byte, c.n)
		if err := m.ReadAt(want, c.off); err != nil {
			t.Fatal(err)
		}
		if got := bytes.Join(segs[:k], nil); !bytes.Equal(got, want) && c.n > 0 {
			t.Fatalf("ViewAt(%d, %d) differs from ReadAt", c.off, c.n)
		}
	}
	// Later writes show through a view taken before them.
	k, _ := m.ViewAt(segs, MemChunkSize, 512)
	if err := m.WriteAt(make([]byte, 512), MemChunkSize, 0); err != nil {
		t.Fatal(err)
	}
	if k != 1 || !bytes.Equal(segs[0], make([]byte, 512)) {
		t.Fatal("view does not alias the disk")
	}
	if _, err := m.ViewAt(segs[:2], 512, 2*MemChunkSize); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("ViewAt over 3 chunks into 2 segments: %v, want ErrUnsupported", err)
	}
	if _, err := m.ViewAt(segs, 7*MemChunkSize, MemChunkSize+512); !isRangeErr(err) {
		t.Fatalf("ViewAt past the end: %v, want a RangeError", err)
	}
	if _, err := m.ViewAt(segs, 100, 512); !isRangeErr(err) {
		t.Fatalf("ViewAt unaligned: %v, want a RangeError", err)
	}
	if st := m.Stats(); st.Read.Ops == 0 {
		t.Fatal("ViewAt not counted as reads")
	}
}
