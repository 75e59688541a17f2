package multipath

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/rdisk/rdisk/blockdev"
)

// mpBuffer is a Device's Buffer: fixed memory, and per path the device
// buffer that carries it there (made at first use on the path).
type mpBuffer struct {
	d      *Device
	mem    []byte
	native blockdev.Buffer // the path buffer mem is, nil for plain memory
	// nativeID is the path native belongs to.
	nativeID int

	mu  sync.Mutex
	per atomic.Pointer[[]pathBuf] // by path id, copy on write under mu

	released atomic.Bool
}

type pathBuf struct {
	buf    blockdev.Buffer
	bounce bool
}

// AllocBuffer implements blockdev.Device: memory of one path's buffer,
// registered or bounced on the others. With no usable path it is plain
// memory, registered on first use.
func (d *Device) AllocBuffer(size int) (blockdev.Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("multipath: buffer size %d", size)
	}
	if d.closing.Load() {
		return nil, blockdev.ErrClosed
	}
	b := &mpBuffer{d: d, nativeID: -1}
	// A path that cannot register caller memory gives the memory, so that
	// it works in place there; the others register it.
	var from *path
	for _, p := range *d.paths.Load() {
		if p.class() == classUnusable {
			continue
		}
		if from == nil || from.reg != nil && p.reg == nil {
			from = p
		}
	}
	if from != nil {
		nb, err := from.dev.AllocBuffer(size)
		if err == nil {
			b.mem, b.native, b.nativeID = nb.Bytes(), nb, from.id
			return b, nil
		}
		if blockdev.IsRequestError(err) {
			return nil, err
		}
	}
	b.mem = alignedMem(size, 4096)
	return b, nil
}

// RegisterBuffer implements BufferRegistrar: mem, registered with each
// path at its first use there (or bounced).
func (d *Device) RegisterBuffer(mem []byte) (blockdev.Buffer, error) {
	if len(mem) == 0 {
		return nil, errors.New("multipath: registering no memory")
	}
	if d.closing.Load() {
		return nil, blockdev.ErrClosed
	}
	return &mpBuffer{d: d, mem: mem, nativeID: -1}, nil
}

// Bytes implements blockdev.Buffer.
func (b *mpBuffer) Bytes() []byte { return b.mem }

// Release implements blockdev.Buffer.
func (b *mpBuffer) Release() error {
	if b.released.Swap(true) {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var first error
	if per := b.per.Load(); per != nil {
		for _, pb := range *per {
			if pb.buf != nil {
				if err := pb.buf.Release(); err != nil && first == nil && !errors.Is(err, blockdev.ErrClosed) {
					first = err
				}
			}
		}
	}
	b.per.Store(nil)
	if b.native != nil {
		if err := b.native.Release(); err != nil && first == nil && !errors.Is(err, blockdev.ErrClosed) {
			first = err
		}
	}
	return first
}

// forPath returns the device buffer that carries this buffer's data on p,
// and whether it is a bounce buffer.
func (b *mpBuffer) forPath(p *path) (blockdev.Buffer, bool, error) {
	if p.id == b.nativeID {
		return b.native, false, nil
	}
	if per := b.per.Load(); per != nil && p.id < len(*per) {
		if pb := (*per)[p.id]; pb.buf != nil {
			return pb.buf, pb.bounce, nil
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.released.Load() {
		return nil, false, blockdev.ErrBuffer
	}
	var old []pathBuf
	if per := b.per.Load(); per != nil {
		old = *per
		if p.id < len(old) && old[p.id].buf != nil {
			return old[p.id].buf, old[p.id].bounce, nil
		}
	}
	var pb pathBuf
	if p.reg != nil {
		nb, err := p.reg.RegisterBuffer(b.mem)
		if err != nil {
			return nil, false, fmt.Errorf("multipath: registering a buffer with path %s: %w", p.name, err)
		}
		pb.buf = nb
	} else {
		nb, err := p.dev.AllocBuffer(len(b.mem))
		if err != nil {
			return nil, false, fmt.Errorf("multipath: allocating a buffer on path %s: %w", p.name, err)
		}
		pb.buf, pb.bounce = nb, true
	}
	per := make([]pathBuf, max(len(old), p.id+1))
	copy(per, old)
	per[p.id] = pb
	b.per.Store(&per)
	return pb.buf, pb.bounce, nil
}

// alignedMem returns size bytes aligned to align.
func alignedMem(size, align int) []byte {
	b := make([]byte, size+align)
	off := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) % uintptr(align)); r != 0 {
		off = align - r
	}
	return b[off : off+size : off+size]
}
