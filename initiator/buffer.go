package initiator

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/rdisk/rdisk/blockdev"
)

// sessBuffer is a session's Buffer. Its memory is fixed for its life: the
// memory of a buffer of the connection it was allocated on (or plain
// aligned memory while reconnecting). On a later connection it is
// registered again when the device implements BufferRegistrar, otherwise
// a bounce buffer of the new device carries the data (a copy per I/O).
type sessBuffer struct {
	s    *Session
	mem  []byte
	orig blockdev.Buffer // the buffer mem came from, nil for plain memory
	gen  uint64          // the connection orig belongs to

	mu        sync.Mutex
	curGen    uint64
	cur       blockdev.Buffer
	curBounce bool
	old       []blockdev.Buffer // buffers of earlier connections, released at Release

	released atomic.Bool
}

// AllocBuffer implements blockdev.Device.
func (s *Session) AllocBuffer(size int) (blockdev.Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("initiator: buffer size %d", size)
	}
	b := &sessBuffer{s: s}
	if l := s.cur.Load(); l != nil {
		db, err := l.dev.AllocBuffer(size)
		if err == nil {
			b.mem, b.orig, b.gen = db.Bytes(), db, l.gen
			b.cur, b.curGen = db, l.gen
			return b, nil
		}
		if !isClosed(err) {
			return nil, err
		}
	}
	// No live connection: plain memory, registered on first use.
	b.mem = alignedMem(size, 4096)
	return b, nil
}

// RegisterBuffer implements BufferRegistrar: mem as a session buffer,
// registered with each connection at its first use there (or bounced), so a
// multipath device can hand out memory usable on every path.
func (s *Session) RegisterBuffer(mem []byte) (blockdev.Buffer, error) {
	if len(mem) == 0 {
		return nil, errors.New("initiator: registering no memory")
	}
	if s.closing.Load() {
		return nil, blockdev.ErrClosed
	}
	return &sessBuffer{s: s, mem: mem}, nil
}

func isClosed(err error) bool { return err != nil && errors.Is(err, blockdev.ErrClosed) }

// Bytes implements blockdev.Buffer.
func (b *sessBuffer) Bytes() []byte { return b.mem }

// Release implements blockdev.Buffer.
func (b *sessBuffer) Release() error {
	if b.released.Swap(true) {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var first error
	for _, o := range b.old {
		if err := o.Release(); err != nil && first == nil && !isClosed(err) {
			first = err
		}
	}
	if b.cur != nil && b.cur != b.orig {
		b.cur.Release()
	}
	if b.orig != nil {
		if err := b.orig.Release(); err != nil && first == nil && !isClosed(err) {
			first = err
		}
	}
	b.old, b.cur = nil, nil
	return first
}

// forLink returns the device buffer that carries this buffer's data on
// link l, and whether it is a bounce buffer.
func (b *sessBuffer) forLink(l *link) (blockdev.Buffer, bool, error) {
	if b.orig != nil && l.gen == b.gen {
		return b.orig, false, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cur != nil && b.curGen == l.gen {
		return b.cur, b.curBounce, nil
	}
	if b.released.Load() {
		return nil, false, blockdev.ErrBuffer
	}
	// A new connection: the previous connection's buffer is unused now
	// (its device completed everything at Close); keep it until Release,
	// as its memory may be ours.
	if b.cur != nil && b.cur != b.orig {
		b.old = append(b.old, b.cur)
	}
	b.cur = nil
	if r, ok := l.dev.(BufferRegistrar); ok {
		nb, err := r.RegisterBuffer(b.mem)
		if err != nil {
			return nil, false, fmt.Errorf("initiator: registering a buffer on the new connection: %w", err)
		}
		b.cur, b.curGen, b.curBounce = nb, l.gen, false
		return nb, false, nil
	}
	nb, err := l.dev.AllocBuffer(len(b.mem))
	if err != nil {
		return nil, false, fmt.Errorf("initiator: allocating a buffer on the new connection: %w", err)
	}
	b.cur, b.curGen, b.curBounce = nb, l.gen, true
	return nb, true, nil
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
