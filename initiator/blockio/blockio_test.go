package blockio

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/blockdev/blockdevtest"
)

func TestUnaligned(t *testing.T) {
	t.Parallel()
	for _, caps := range []blockdev.Caps{0, blockdev.CapFlush} {
		d, err := blockdevtest.NewMem(blockdevtest.MemConfig{Size: 1 << 20, BlockSize: 4096, MaxTransfer: 16 << 10, Caps: caps})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		p, err := NewPool(d, 64<<10, 2)
		if err != nil {
			t.Fatal(err)
		}
		if p.ChunkSize() != 16<<10 {
			t.Errorf("chunk size %d, want the transfer limit", p.ChunkSize())
		}
		want := make([]byte, 1<<20)
		r := rand.New(rand.NewPCG(4, 5))
		for _, w := range [][2]int{{0, 1}, {1, 4095}, {4095, 2}, {10000, 50000}, {1<<20 - 3, 3}, {8192, 4096}, {100, 0}} {
			b := make([]byte, w[1])
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			if err := p.WriteAt(b, int64(w[0]), w[0]%2 == 0); err != nil {
				t.Fatalf("WriteAt %v: %v", w, err)
			}
			copy(want[w[0]:], b)
		}
		if err := p.Zero(5000, 20000, false); err != nil {
			t.Fatal(err)
		}
		clear(want[5000:25000])
		if err := p.Zero(200000, 100000, true); err != nil {
			t.Fatal(err)
		}
		clear(want[200000:300000])
		got := make([]byte, 1<<20)
		if err := p.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("caps %v: content differs", caps)
		}
		for _, rd := range [][2]int{{3, 7}, {4090, 10}, {1<<20 - 1, 1}} {
			b := make([]byte, rd[1])
			if err := p.ReadAt(b, int64(rd[0])); err != nil || !bytes.Equal(b, want[rd[0]:rd[0]+rd[1]]) {
				t.Errorf("ReadAt %v: %v", rd, err)
			}
		}
		if err := p.ReadAt(make([]byte, 2), 1<<20-1); !errors.Is(err, blockdev.ErrRange) {
			t.Errorf("read past the end: %v", err)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Get(nil); !errors.Is(err, ErrPoolClosed) {
			t.Errorf("Get after Close: %v", err)
		}
	}
}

// TestConcurrentRMW: unaligned writes to different bytes of the same
// blocks from many goroutines lose nothing.
func TestConcurrentRMW(t *testing.T) {
	t.Parallel()
	d, err := blockdevtest.NewMem(blockdevtest.MemConfig{Size: 64 << 10, Queues: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	p, err := NewPool(d, 4096, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 64 {
				off := int64(i*64 + g*8)
				if err := p.WriteAt(bytes.Repeat([]byte{byte(g + 1)}, 8), off, false); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	got := make([]byte, 4096)
	if err := p.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	for i, b := range got {
		if want := byte((i%64)/8 + 1); b != want {
			t.Fatalf("byte %d = %d, want %d", i, b, want)
		}
	}
}
