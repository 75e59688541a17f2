package blockio

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rdisk/rdisk/blockdev"
)

// Pool is a fixed set of equally sized chunks carved from one buffer the
// device registered. A Chunk carries its own Request and completion channel,
// so Chunk.Do allocates nothing. Pool's methods are safe for concurrent use.
type Pool struct {
	dev   blockdev.Device
	info  blockdev.Info
	buf   blockdev.Buffer
	size  int
	free  chan *Chunk
	all   []*Chunk
	queue atomic.Uint32

	// rmw serializes read-modify-write of partial blocks, so two unaligned
	// writes to different bytes of one block do not lose each other.
	rmw sync.Mutex

	closeOnce sync.Once
	closed    chan struct{}
}

// Chunk is one buffer of a Pool and the request that moves it. It belongs to
// the goroutine that took it with Get until Put.
type Chunk struct {
	p    *Pool
	data []byte
	off  int
	req  blockdev.Request
	ch   chan *blockdev.Request
}

// ErrPoolClosed is returned by Get after Close.
var ErrPoolClosed = errors.New("blockio: pool closed")

// NewPool allocates n chunks of size bytes (rounded up to the block size and
// capped at the device's MaxTransfer) from dev.
func NewPool(dev blockdev.Device, size, n int) (*Pool, error) {
	info := dev.Info()
	bs := info.BlockSize
	if size <= 0 || n <= 0 {
		return nil, fmt.Errorf("blockio: pool of %d chunks of %d bytes", n, size)
	}
	size = min((size+bs-1)/bs*bs, info.MaxTransfer)
	buf, err := dev.AllocBuffer(size * n)
	if err != nil {
		return nil, fmt.Errorf("blockio: allocating %d buffers of %d bytes: %w", n, size, err)
	}
	p := &Pool{dev: dev, info: info, buf: buf, size: size, free: make(chan *Chunk, n), closed: make(chan struct{})}
	mem := buf.Bytes()
	for i := range n {
		c := &Chunk{p: p, off: i * size, data: mem[i*size : (i+1)*size : (i+1)*size], ch: make(chan *blockdev.Request, 1)}
		c.req.Buf = buf
		c.req.BufOff = c.off
		c.req.C = c.ch
		p.all = append(p.all, c)
		p.free <- c
	}
	return p, nil
}

// Info returns the device's Info.
func (p *Pool) Info() blockdev.Info { return p.info }

// ChunkSize is the size of every chunk.
func (p *Pool) ChunkSize() int { return p.size }

// Get takes a free chunk, waiting for one. It fails when ctx (nil: no
// deadline) is done or the pool is closed.
func (p *Pool) Get(ctx context.Context) (*Chunk, error) {
	select {
	case c := <-p.free:
		return c, nil
	default:
	}
	var done <-chan struct{}
	if ctx != nil {
		done = ctx.Done()
	}
	select {
	case c := <-p.free:
		return c, nil
	case <-done:
		return nil, ctx.Err()
	case <-p.closed:
		return nil, ErrPoolClosed
	}
}

// Put returns a chunk taken with Get.
func (p *Pool) Put(c *Chunk) { p.free <- c }

// Close waits until every chunk is back, then releases the buffer. Get fails
// from the start of Close on.
func (p *Pool) Close() error {
	var err error
	p.closeOnce.Do(func() {
		close(p.closed)
		for range p.all {
			<-p.free
		}
		err = p.buf.Release()
	})
	return err
}

// Bytes is the chunk's memory.
func (c *Chunk) Bytes() []byte { return c.data }

// Do runs one request on the chunk's memory and waits for it: op at byte
// offset off for n bytes (n bytes of Bytes() for reads and writes; no data
// for flush, discard and write-zeroes). off and n must be block aligned.
func (c *Chunk) Do(op blockdev.Op, off int64, n int, flags blockdev.Flags) error {
	r := &c.req
	r.Op, r.Flags, r.Offset, r.Length, r.Err = op, flags, off, n, nil
	r.Queue = int(c.p.queue.Add(1))
	r.Done = nil
	r.C = c.ch
	r.Buf, r.BufOff = c.p.buf, c.off
	if op != blockdev.OpRead && op != blockdev.OpWrite {
		r.Buf, r.BufOff = nil, 0
	}
	if err := c.p.dev.Submit(r); err != nil {
		return err
	}
	<-c.ch
	return r.Err
}

// Request exposes the chunk's request after Do, for its Issued and
// Completed times.
func (c *Chunk) Request() *blockdev.Request { return &c.req }

// checkRange validates a byte range against the device size.
func (p *Pool) checkRange(off int64, n int) error {
	if off < 0 || n < 0 || off > p.info.Size || int64(n) > p.info.Size-off {
		return blockdev.ErrRange
	}
	return nil
}

// ReadAt reads len(b) bytes at byte offset off, at any alignment, into b.
func (p *Pool) ReadAt(b []byte, off int64) error {
	if err := p.checkRange(off, len(b)); err != nil {
		return err
	}
	if len(b) == 0 {
		return nil
	}
	c, err := p.Get(nil)
	if err != nil {
		return err
	}
	defer p.Put(c)
	bs := int64(p.info.BlockSize)
	for len(b) > 0 {
		start := off / bs * bs
		skip := int(off - start)
		n := min(int64(p.size), (off+int64(len(b))-start+bs-1)/bs*bs)
		if err := c.Do(blockdev.OpRead, start, int(n), 0); err != nil {
			return err
		}
		k := copy(b, c.data[skip:n])
		b = b[k:]
		off += int64(k)
	}
	return nil
}

// WriteAt writes b at byte offset off, at any alignment: whole blocks are
// written directly, partial blocks by read-modify-write under a lock. With
// fua every write is made durable (FUA where the device has it, a flush
// otherwise).
func (p *Pool) WriteAt(b []byte, off int64, fua bool) error {
	if err := p.checkRange(off, len(b)); err != nil {
		return err
	}
	if len(b) == 0 {
		return nil
	}
	c, err := p.Get(nil)
	if err != nil {
		return err
	}
	defer p.Put(c)
	var flags blockdev.Flags
	if fua && p.info.Caps.Has(blockdev.CapFUA) {
		flags = blockdev.FUA
	}
	bs := int64(p.info.BlockSize)
	for len(b) > 0 {
		if off%bs != 0 || int64(len(b)) < bs {
			// A partial block: read it, patch it, write it back.
			start := off / bs * bs
			skip := int(off - start)
			k := min(len(b), int(bs)-skip)
			p.rmw.Lock()
			err := c.Do(blockdev.OpRead, start, int(bs), 0)
			if err == nil {
				copy(c.data[skip:], b[:k])
				err = c.Do(blockdev.OpWrite, start, int(bs), flags)
			}
			p.rmw.Unlock()
			if err != nil {
				return err
			}
			b = b[k:]
			off += int64(k)
			continue
		}
		n := min(len(b)/int(bs)*int(bs), p.size)
		copy(c.data, b[:n])
		if err := c.Do(blockdev.OpWrite, off, n, flags); err != nil {
			return err
		}
		b = b[n:]
		off += int64(n)
	}
	if fua && flags == 0 {
		return c.Do(blockdev.OpFlush, 0, 0, 0)
	}
	return nil
}

// Flush makes every completed write durable.
func (p *Pool) Flush() error {
	c, err := p.Get(nil)
	if err != nil {
		return err
	}
	defer p.Put(c)
	return c.Do(blockdev.OpFlush, 0, 0, 0)
}

// Zero makes n bytes at off read as zeroes, at any alignment: partial
// blocks by read-modify-write, whole blocks with write-zeroes (or discard
// when discard is set and the device has it; or written zero chunks when the
// device has neither).
func (p *Pool) Zero(off int64, n int64, discard bool) error {
	if off < 0 || n < 0 || off > p.info.Size || n > p.info.Size-off {
		return blockdev.ErrRange
	}
	bs := int64(p.info.BlockSize)
	// Partial head and tail blocks.
	for n > 0 && (off%bs != 0 || n < bs) {
		k := min(n, bs-off%bs)
		if err := p.WriteAt(zeroes[:k], off, false); err != nil {
			return err
		}
		off, n = off+k, n-k
	}
	if tail := n % bs; tail != 0 {
		if err := p.WriteAt(zeroes[:tail], off+n-tail, false); err != nil {
			return err
		}
		n -= tail
	}
	if n == 0 {
		return nil
	}
	c, err := p.Get(nil)
	if err != nil {
		return err
	}
	defer p.Put(c)
	op := blockdev.OpWriteZeroes
	switch {
	case discard && p.info.Caps.Has(blockdev.CapDiscard):
		op = blockdev.OpDiscard
	case !p.info.Caps.Has(blockdev.CapWriteZeroes):
		op = blockdev.OpWrite
		clear(c.data)
	}
	step := p.info.MaxZeroes / bs * bs
	if op == blockdev.OpWrite {
		step = int64(p.size)
	}
	if step <= 0 {
		step = bs
	}
	for n > 0 {
		k := min(n, step)
		if err := c.Do(op, off, int(k), 0); err != nil {
			return err
		}
		off, n = off+k, n-k
	}
	return nil
}

// zeroes is a block of zeroes for partial-block zeroing (block sizes are
// at most 4 KiB in practice; larger ones go through WriteAt in pieces).
var zeroes = make([]byte, 64<<10)
