package blockdevtest

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/blockdev"
)

// Run runs the conformance suite against devices made by open, which
// returns a fresh device of at least 1 MiB with at least one queue; Run
// closes it. Subtests run sequentially (the devices may share a target).
func Run(t *testing.T, open func(t *testing.T) blockdev.Device) {
	tests := []struct {
		name string
		fn   func(t *testing.T, d blockdev.Device)
	}{
		{"info", testInfo},
		{"roundtrip", testRoundTrip},
		{"helpers", testHelpers},
		{"invalid", testInvalid},
		{"concurrent", testConcurrent},
		{"resubmit-from-callback", testResubmit},
		{"flush-fua", testFlushFUA},
		{"zeroes-discard", testZeroes},
		{"close", testClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := open(t)
			defer d.Close()
			tc.fn(t, d)
		})
	}
}

func testInfo(t *testing.T, d blockdev.Device) {
	in := d.Info()
	if in.BlockSize < 512 || in.BlockSize&(in.BlockSize-1) != 0 {
		t.Errorf("BlockSize %d: want a power of two >= 512", in.BlockSize)
	}
	if in.Size <= 0 || in.Size%int64(in.BlockSize) != 0 {
		t.Errorf("Size %d is not a positive multiple of the block size %d", in.Size, in.BlockSize)
	}
	if in.Queues < 1 || in.QueueDepth < 1 {
		t.Errorf("Queues %d, QueueDepth %d: want >= 1", in.Queues, in.QueueDepth)
	}
	if in.MaxTransfer < in.BlockSize || in.MaxTransfer%in.BlockSize != 0 {
		t.Errorf("MaxTransfer %d is not a positive multiple of the block size %d", in.MaxTransfer, in.BlockSize)
	}
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func alloc(t *testing.T, d blockdev.Device, n int) blockdev.Buffer {
	t.Helper()
	b, err := d.AllocBuffer(n)
	if err != nil {
		t.Fatalf("AllocBuffer(%d): %v", n, err)
	}
	if len(b.Bytes()) != n {
		t.Fatalf("AllocBuffer(%d) gave %d bytes", n, len(b.Bytes()))
	}
	t.Cleanup(func() { b.Release() })
	return b
}

func testRoundTrip(t *testing.T, d blockdev.Device) {
	in := d.Info()
	bs := in.BlockSize
	sizes := []int{bs, 2 * bs, 8 * bs, min(in.MaxTransfer, 64<<10), in.MaxTransfer}
	wb := alloc(t, d, in.MaxTransfer+bs)
	rb := alloc(t, d, in.MaxTransfer+bs)
	for i, n := range sizes {
		off := int64(i) * int64(in.MaxTransfer)
		if off+int64(n) > in.Size {
			off = in.Size - int64(n)
		}
		fill(wb.Bytes(), uint64(i))
		clear(rb.Bytes())
		// Write with a callback, read through a channel, both at a buffer
		// offset of one block.
		done := make(chan struct{})
		w := &blockdev.Request{Op: blockdev.OpWrite, Offset: off, Length: n, Buf: wb, BufOff: bs, Queue: i,
			Done: func(*blockdev.Request) { close(done) }}
		if err := d.Submit(w); err != nil {
			t.Fatalf("write %d bytes at %d: Submit: %v", n, off, err)
		}
		<-done
		if w.Err != nil {
			t.Fatalf("write %d bytes at %d: %v", n, off, w.Err)
		}
		ch := make(chan *blockdev.Request, 1)
		r := &blockdev.Request{Op: blockdev.OpRead, Offset: off, Length: n, Buf: rb, BufOff: bs, Queue: i + 1, C: ch}
		if err := d.Submit(r); err != nil {
			t.Fatalf("read %d bytes at %d: Submit: %v", n, off, err)
		}
		if got := <-ch; got != r {
			t.Fatalf("completion channel delivered another request")
		}
		if r.Err != nil {
			t.Fatalf("read %d bytes at %d: %v", n, off, r.Err)
		}
		if !bytes.Equal(rb.Bytes()[bs:bs+n], wb.Bytes()[bs:bs+n]) {
			t.Fatalf("read back %d bytes at %d: data differs", n, off)
		}
		if r.Issued.IsZero() || r.Completed.Before(r.Issued) {
			t.Errorf("Issued %v, Completed %v: want both set, in order", r.Issued, r.Completed)
		}
	}
}

func testHelpers(t *testing.T, d blockdev.Device) {
	in := d.Info()
	n := min(2*in.MaxTransfer+3*in.BlockSize, int(in.Size))
	n -= n % in.BlockSize
	p := make([]byte, n)
	fill(p, 99)
	if k, err := blockdev.WriteAt(d, p, 0); err != nil || k != n {
		t.Fatalf("WriteAt: %d, %v", k, err)
	}
	q := make([]byte, n)
	if k, err := blockdev.ReadAt(d, q, 0); err != nil || k != n {
		t.Fatalf("ReadAt: %d, %v", k, err)
	}
	if !bytes.Equal(p, q) {
		t.Fatalf("ReadAt returned other data than WriteAt wrote")
	}
	if err := blockdev.Flush(d); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

func testInvalid(t *testing.T, d blockdev.Device) {
	in := d.Info()
	bs := in.BlockSize
	buf := alloc(t, d, in.MaxTransfer+bs)
	other, err := NewMem(MemConfig{BlockSize: bs, Size: int64(bs) * 16})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	foreign, _ := other.AllocBuffer(bs)
	released := alloc(t, d, bs)
	released.Release()
	cases := []struct {
		name string
		r    blockdev.Request
		want error
	}{
		{"bad op", blockdev.Request{Op: 0, Length: bs, Buf: buf}, blockdev.ErrInvalid},
		{"unaligned offset", blockdev.Request{Op: blockdev.OpRead, Offset: 1, Length: bs, Buf: buf}, blockdev.ErrAlignment},
		{"unaligned length", blockdev.Request{Op: blockdev.OpRead, Length: bs + 1, Buf: buf}, blockdev.ErrAlignment},
		{"zero length", blockdev.Request{Op: blockdev.OpWrite, Length: 0, Buf: buf}, blockdev.ErrAlignment},
		{"past the end", blockdev.Request{Op: blockdev.OpRead, Offset: in.Size, Length: bs, Buf: buf}, blockdev.ErrRange},
		{"straddles the end", blockdev.Request{Op: blockdev.OpRead, Offset: in.Size - int64(bs), Length: 2 * bs, Buf: buf}, blockdev.ErrRange},
		{"too large", blockdev.Request{Op: blockdev.OpRead, Length: in.MaxTransfer + bs, Buf: buf}, blockdev.ErrTooLarge},
		{"no buffer", blockdev.Request{Op: blockdev.OpRead, Length: bs}, blockdev.ErrBuffer},
		{"buffer too small", blockdev.Request{Op: blockdev.OpRead, Length: 2 * bs, Buf: buf, BufOff: in.MaxTransfer}, blockdev.ErrBuffer},
		{"foreign buffer", blockdev.Request{Op: blockdev.OpRead, Length: bs, Buf: foreign}, blockdev.ErrBuffer},
		{"released buffer", blockdev.Request{Op: blockdev.OpRead, Length: bs, Buf: released}, blockdev.ErrBuffer},
	}
	for _, c := range cases {
		r := c.r
		r.Done = func(*blockdev.Request) { t.Errorf("%s: completed although Submit failed", c.name) }
		if err := d.Submit(&r); !errors.Is(err, c.want) {
			t.Errorf("%s: Submit = %v, want %v", c.name, err, c.want)
		}
	}
}

func testConcurrent(t *testing.T, d blockdev.Device) {
	in := d.Info()
	bs := in.BlockSize
	ioSize := min(4*bs, in.MaxTransfer)
	workers := in.Queues * 2
	perWorker := int(min(in.Size/int64(workers)/int64(ioSize), 64))
	if perWorker < 1 {
		t.Skip("device too small")
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			depth := min(in.QueueDepth, perWorker)
			buf, err := d.AllocBuffer(depth * ioSize)
			if err != nil {
				errs <- err
				return
			}
			defer buf.Release()
			base := int64(w) * int64(perWorker) * int64(ioSize)
			// Write every unit with a pattern, keeping depth in flight, then
			// read every unit back.
			for _, op := range []blockdev.Op{blockdev.OpWrite, blockdev.OpRead} {
				ch := make(chan *blockdev.Request, depth)
				reqs := make([]blockdev.Request, depth)
				next, inflight := 0, 0
				submit := func(r *blockdev.Request, unit int) error {
					*r = blockdev.Request{Op: op, Offset: base + int64(unit)*int64(ioSize), Length: ioSize, Buf: r.Buf, BufOff: r.BufOff, Queue: w, C: ch, Tag: uint64(unit)}
					if op == blockdev.OpWrite {
						fill(buf.Bytes()[r.BufOff:r.BufOff+ioSize], uint64(w)<<32|uint64(unit))
					}
					return d.Submit(r)
				}
				for i := range reqs {
					reqs[i].Buf, reqs[i].BufOff = buf, i*ioSize
					if next < perWorker {
						if err := submit(&reqs[i], next); err != nil {
							errs <- err
							return
						}
						next++
						inflight++
					}
				}
				want := make([]byte, ioSize)
				for inflight > 0 {
					r := <-ch
					inflight--
					if r.Err != nil {
						errs <- r.Err
						return
					}
					if op == blockdev.OpRead {
						fill(want, uint64(w)<<32|r.Tag)
						if !bytes.Equal(buf.Bytes()[r.BufOff:r.BufOff+ioSize], want) {
							errs <- errors.New("concurrent: data read back differs from data written")
							return
						}
					}
					if next < perWorker {
						if err := submit(r, next); err != nil {
							errs <- err
							return
						}
						next++
						inflight++
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func testResubmit(t *testing.T, d blockdev.Device) {
	in := d.Info()
	buf := alloc(t, d, in.BlockSize)
	const total = 200
	count := 0
	done := make(chan error, 1)
	r := &blockdev.Request{Op: blockdev.OpRead, Length: in.BlockSize, Buf: buf}
	r.Done = func(r *blockdev.Request) {
		if r.Err != nil {
			done <- r.Err
			return
		}
		count++
		if count == total {
			done <- nil
			return
		}
		r.Offset = int64(count%16) * int64(in.BlockSize)
		if err := d.Submit(r); err != nil {
			done <- err
		}
	}
	if err := d.Submit(r); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("resubmitting from the callback stalled after %d completions", count)
	}
}

func testFlushFUA(t *testing.T, d blockdev.Device) {
	in := d.Info()
	buf := alloc(t, d, in.BlockSize)
	fill(buf.Bytes(), 5)
	if err := blockdev.Do(d, &blockdev.Request{Op: blockdev.OpWrite, Flags: blockdev.FUA, Length: in.BlockSize, Buf: buf}); err != nil {
		t.Fatalf("FUA write: %v", err)
	}
	if err := blockdev.Do(d, &blockdev.Request{Op: blockdev.OpFlush}); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

func testZeroes(t *testing.T, d blockdev.Device) {
	in := d.Info()
	n := 8 * in.BlockSize
	p := make([]byte, n)
	fill(p, 11)
	if _, err := blockdev.WriteAt(d, p, 0); err != nil {
		t.Fatal(err)
	}
	err := blockdev.Do(d, &blockdev.Request{Op: blockdev.OpWriteZeroes, Offset: int64(in.BlockSize), Length: 2 * in.BlockSize})
	if !in.Caps.Has(blockdev.CapWriteZeroes) {
		if !errors.Is(err, blockdev.ErrUnsupported) {
			t.Errorf("write-zeroes without CapWriteZeroes: %v, want ErrUnsupported", err)
		}
	} else {
		if err != nil {
			t.Fatalf("write-zeroes: %v", err)
		}
		q := make([]byte, n)
		if _, err := blockdev.ReadAt(d, q, 0); err != nil {
			t.Fatal(err)
		}
		clear(p[in.BlockSize : 3*in.BlockSize])
		if !bytes.Equal(p, q) {
			t.Errorf("after write-zeroes of blocks 1-2 the data is not the expected")
		}
	}
	err = blockdev.Do(d, &blockdev.Request{Op: blockdev.OpDiscard, Offset: int64(4 * in.BlockSize), Length: 2 * in.BlockSize})
	if !in.Caps.Has(blockdev.CapDiscard) {
		if !errors.Is(err, blockdev.ErrUnsupported) {
			t.Errorf("discard without CapDiscard: %v, want ErrUnsupported", err)
		}
	} else if err != nil {
		t.Fatalf("discard: %v", err)
	}
}

func testClose(t *testing.T, d blockdev.Device) {
	in := d.Info()
	buf := alloc(t, d, in.BlockSize*in.QueueDepth)
	ch := make(chan *blockdev.Request, in.QueueDepth)
	reqs := make([]blockdev.Request, in.QueueDepth)
	for i := range reqs {
		reqs[i] = blockdev.Request{Op: blockdev.OpRead, Offset: int64(i%16) * int64(in.BlockSize), Length: in.BlockSize, Buf: buf, BufOff: i * in.BlockSize, C: ch}
		if err := d.Submit(&reqs[i]); err != nil {
			t.Fatalf("Submit %d: %v", i, err)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	timeout := time.After(20 * time.Second)
	for range reqs {
		select {
		case r := <-ch:
			if r.Err != nil && !errors.Is(r.Err, blockdev.ErrClosed) {
				t.Errorf("request in flight at Close: %v, want nil or ErrClosed", r.Err)
			}
		case <-timeout:
			t.Fatalf("requests in flight at Close did not complete")
		}
	}
	r := blockdev.Request{Op: blockdev.OpRead, Length: in.BlockSize, Buf: buf, C: ch}
	if err := d.Submit(&r); !errors.Is(err, blockdev.ErrClosed) {
		t.Errorf("Submit after Close: %v, want ErrClosed", err)
	}
}
