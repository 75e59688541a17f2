package blockdevtest

import (
	"fmt"
	"sync"
	"time"

	"github.com/rdisk/rdisk/blockdev"
)

// MemConfig shapes a Mem device. Zero fields take the defaults in brackets.
type MemConfig struct {
	BlockSize   int   // [512]
	Size        int64 // [1 MiB]
	Queues      int   // [1]
	QueueDepth  int   // [32]
	MaxTransfer int   // [128 KiB]
	// Caps are the capabilities [flush, FUA, discard, write-zeroes].
	Caps blockdev.Caps
	// Latency delays every completion.
	Latency time.Duration
	// Fault, if set, runs before a request executes; a non-nil error fails
	// the request with it. It runs on the queue's goroutine.
	Fault func(r *blockdev.Request) error
	// AfterRead, if set, runs after a read filled data, and may change it
	// (to simulate corruption).
	AfterRead func(r *blockdev.Request, data []byte)
}

// Mem is a RAM-backed blockdev.Device: one goroutine per queue executes the
// requests in order. It is safe for concurrent use.
type Mem struct {
	cfg    MemConfig
	info   blockdev.Info
	dataMu sync.Mutex
	data   []byte
	queues []*memQueue

	mu     sync.RWMutex
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup

	statsMu sync.Mutex
	ops     [blockdev.OpWriteZeroes + 1]uint64
}

type memQueue struct {
	slots chan struct{}
	reqs  chan *blockdev.Request
}

type memBuffer struct {
	owner    *Mem
	b        []byte
	released bool
	mu       sync.Mutex
}

func (b *memBuffer) Bytes() []byte { return b.b }
func (b *memBuffer) Release() error {
	b.mu.Lock()
	b.released = true
	b.mu.Unlock()
	return nil
}

// NewMem returns a zero-filled device.
func NewMem(cfg MemConfig) (*Mem, error) {
	if cfg.BlockSize == 0 {
		cfg.BlockSize = 512
	}
	if cfg.Size == 0 {
		cfg.Size = 1 << 20
	}
	if cfg.Queues == 0 {
		cfg.Queues = 1
	}
	if cfg.QueueDepth == 0 {
		cfg.QueueDepth = 32
	}
	if cfg.MaxTransfer == 0 {
		cfg.MaxTransfer = 128 << 10
	}
	if cfg.Caps == 0 {
		cfg.Caps = blockdev.CapFlush | blockdev.CapFUA | blockdev.CapDiscard | blockdev.CapWriteZeroes
	}
	if cfg.BlockSize <= 0 || cfg.Size <= 0 || cfg.Size%int64(cfg.BlockSize) != 0 || cfg.MaxTransfer%cfg.BlockSize != 0 {
		return nil, fmt.Errorf("blockdevtest: bad geometry: block size %d, size %d, max transfer %d", cfg.BlockSize, cfg.Size, cfg.MaxTransfer)
	}
	d := &Mem{
		cfg:  cfg,
		data: make([]byte, cfg.Size),
		done: make(chan struct{}),
		info: blockdev.Info{
			Name: "mem", BlockSize: cfg.BlockSize, Size: cfg.Size, Queues: cfg.Queues, QueueDepth: cfg.QueueDepth,
			MaxTransfer: cfg.MaxTransfer, MaxZeroes: cfg.Size, Caps: cfg.Caps,
		},
	}
	for range cfg.Queues {
		q := &memQueue{slots: make(chan struct{}, cfg.QueueDepth), reqs: make(chan *blockdev.Request, cfg.QueueDepth)}
		d.queues = append(d.queues, q)
		d.wg.Add(1)
		go d.run(q)
	}
	return d, nil
}

// Info implements blockdev.Device.
func (d *Mem) Info() blockdev.Info { return d.info }

// AllocBuffer implements blockdev.Device.
func (d *Mem) AllocBuffer(size int) (blockdev.Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("blockdevtest: buffer size %d", size)
	}
	return &memBuffer{owner: d, b: make([]byte, size)}, nil
}

// Bytes returns the device's contents (not a copy). Read it only while no
// request is in flight.
func (d *Mem) Bytes() []byte { return d.data }

// Ops returns how many requests of op executed.
func (d *Mem) Ops(op blockdev.Op) uint64 {
	d.statsMu.Lock()
	defer d.statsMu.Unlock()
	return d.ops[op]
}

// Submit implements blockdev.Device.
func (d *Mem) Submit(r *blockdev.Request) error {
	if err := blockdev.Check(&d.info, r); err != nil {
		return err
	}
	if r.Buf != nil && (r.Op == blockdev.OpRead || r.Op == blockdev.OpWrite) {
		b, ok := r.Buf.(*memBuffer)
		if !ok || b.owner != d {
			return blockdev.ErrBuffer
		}
		b.mu.Lock()
		rel := b.released
		b.mu.Unlock()
		if rel {
			return blockdev.ErrBuffer
		}
	}
	q := d.queues[uint(r.Queue)%uint(len(d.queues))]
	select {
	case q.slots <- struct{}{}:
	case <-d.done:
		return blockdev.ErrClosed
	}
	d.mu.RLock()
	if d.closed {
		d.mu.RUnlock()
		<-q.slots
		return blockdev.ErrClosed
	}
	r.Issued = time.Now()
	q.reqs <- r // room: a slot was taken
	d.mu.RUnlock()
	return nil
}

func (d *Mem) run(q *memQueue) {
	defer d.wg.Done()
	for {
		select {
		case r := <-q.reqs:
			d.exec(r)
			r.Completed = time.Now()
			<-q.slots
			blockdev.Complete(r)
		case <-d.done:
			for {
				select {
				case r := <-q.reqs:
					r.Err = blockdev.ErrClosed
					r.Completed = time.Now()
					<-q.slots
					blockdev.Complete(r)
				default:
					return
				}
			}
		}
	}
}

func (d *Mem) exec(r *blockdev.Request) {
	if d.cfg.Latency > 0 {
		time.Sleep(d.cfg.Latency)
	}
	d.statsMu.Lock()
	d.ops[r.Op]++
	d.statsMu.Unlock()
	if d.cfg.Fault != nil {
		if err := d.cfg.Fault(r); err != nil {
			r.Err = err
			return
		}
	}
	r.Err = nil
	d.dataMu.Lock()
	defer d.dataMu.Unlock()
	switch r.Op {
	case blockdev.OpRead:
		data := r.Buf.Bytes()[r.BufOff : r.BufOff+r.Length]
		copy(data, d.data[r.Offset:])
		if d.cfg.AfterRead != nil {
			d.cfg.AfterRead(r, data)
		}
	case blockdev.OpWrite:
		copy(d.data[r.Offset:r.Offset+int64(r.Length)], r.Buf.Bytes()[r.BufOff:])
	case blockdev.OpDiscard, blockdev.OpWriteZeroes:
		clear(d.data[r.Offset : r.Offset+int64(r.Length)])
	}
}

// Close implements blockdev.Device.
func (d *Mem) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.done)
	d.mu.Unlock()
	d.wg.Wait()
	return nil
}
