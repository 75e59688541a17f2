package backstore

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// RAM disk layout: the disk is cut in chunks of MemChunkSize bytes, allocated
// on first write. Chunk pointers live in leaves of memLeafLen entries, also
// allocated on first write, so an unwritten disk costs one pointer per
// memLeafLen*MemChunkSize bytes (8 bytes per 256 MiB: 32 KiB for 1 TiB).
const (
	memChunkShift = 16
	// MemChunkSize is the allocation unit of a RAM disk in bytes. Discards
	// free the chunks they cover entirely and zero the rest.
	MemChunkSize = 1 << memChunkShift
	memLeafShift = 12
	memLeafLen   = 1 << memLeafShift
	// MaxMemSize is the largest RAM disk NewMem accepts (1 PiB; its
	// directory alone takes 32 MiB).
	MaxMemSize = 1 << 50
)

type memChunk [MemChunkSize]byte

type memLeaf [memLeafLen]atomic.Pointer[memChunk]

// Mem is a sparse RAM disk: memory is allocated on first write in chunks of
// MemChunkSize bytes, unwritten ranges read as zeroes, and Discard and
// WriteZeroes free the chunks they cover. A 1 TiB thin RAM disk costs 32 KiB
// until written.
//
// All methods are safe for concurrent use. Concurrent requests to disjoint
// ranges never interfere; the result of overlapping concurrent writes (or a
// read overlapping a write) is unspecified, as on any disk, but each chunk
// piece is copied under a (striped) lock, so a read that follows a write in
// the caller's order always sees it, even when the order was established
// outside Go (through the network), and the race detector agrees. A placed
// write (Placer) is written by its caller without the lock; Placed then
// takes the lock of each chunk it touched, which orders the write before
// later reads the same way.
// Steady-state I/O (to chunks already allocated) allocates nothing.
//
// Resize grows the disk while it serves: a larger leaf directory replaces
// the old one (which it copies) before the new size is published, so a
// request that sees the new size also sees a directory that covers it.
// Leaves are installed under growMu, so none is lost to a copy in progress;
// chunks live in the leaves, which old and new directories share.
type Mem struct {
	size   atomic.Int64
	bs     int
	ro     atomic.Bool
	closed atomic.Bool
	chunks atomic.Int64 // allocated chunks
	nleaf  atomic.Int64 // allocated leaves
	dir    atomic.Pointer[memDir]
	growMu sync.Mutex // held by Resize, by leaf installs and by Close
	stats  statsCollector
	locks  [memLockStripes]sync.RWMutex // by chunk index
	zeros  *memChunk                    // what ViewAt shows for unwritten chunks; never written
}

// memDir is the leaf directory: one entry per memLeafLen chunks. A
// directory never changes length; Resize replaces it with a longer one.
type memDir []atomic.Pointer[memLeaf]

// memDirLen is the number of leaves that a disk of size bytes needs.
func memDirLen(size int64) int64 {
	return (size + memLeafLen*MemChunkSize - 1) / (memLeafLen * MemChunkSize)
}

// memLockStripes is the number of chunk locks; chunk i uses i % stripes.
const memLockStripes = 64

// Compile-time checks of the optional capabilities.
var (
	_ VectoredDisk   = (*Mem)(nil)
	_ Viewer         = (*Mem)(nil)
	_ Placer         = (*Mem)(nil)
	_ Discarder      = (*Mem)(nil)
	_ ZeroWriter     = (*Mem)(nil)
	_ HealthReporter = (*Mem)(nil)
	_ Resizer        = (*Mem)(nil)
)

// NewMem returns an empty, writable RAM disk of size bytes with the given
// block size (512 or 4096).
// size must be a positive multiple of blockSize, at most MaxMemSize.
func NewMem(size int64, blockSize int) (*Mem, error) {
	if err := checkBlockSize(blockSize); err != nil {
		return nil, fmt.Errorf("creating RAM disk: %w", err)
	}
	if size <= 0 || size%int64(blockSize) != 0 || size > MaxMemSize {
		return nil, fmt.Errorf("creating RAM disk: size %d is not a positive multiple of the block size %d up to %d", size, blockSize, int64(MaxMemSize))
	}
	m := &Mem{
		bs:    blockSize,
		stats: statsCollector{epoch: time.Now()},
		zeros: new(memChunk),
	}
	dir := make(memDir, memDirLen(size))
	m.dir.Store(&dir)
	m.size.Store(size)
	return m, nil
}

// BlockSize returns the block size in bytes.
func (m *Mem) BlockSize() int { return m.bs }

// Size returns the capacity in bytes.
func (m *Mem) Size() int64 { return m.size.Load() }

// Resize grows the disk to size bytes (a positive multiple of the block
// size, at most MaxMemSize); the new range reads as zeroes and costs no
// memory until written. Shrinking is refused with an error wrapping
// ErrUnsupported: requests in flight to the dropped range could bring its
// chunks back. Requests running meanwhile see the old size or the new one.
// A read-only disk may grow too (no data is written).
func (m *Mem) Resize(size int64) error {
	m.growMu.Lock()
	defer m.growMu.Unlock()
	old := m.size.Load()
	switch {
	case m.closed.Load():
		return resizeError("RAM disk", old, size, ErrClosed)
	case size < old && size > 0 && size%int64(m.bs) == 0:
		return resizeError("RAM disk", old, size, errShrink)
	case size > MaxMemSize:
		return resizeError("RAM disk", old, size, fmt.Errorf("the largest RAM disk is %s", sizeText(MaxMemSize)))
	}
	if err := checkNewSize(size, m.bs); err != nil {
		return resizeError("RAM disk", old, size, err)
	}
	if size == old {
		return nil
	}
	d := *m.dir.Load()
	if n := memDirLen(size); n > int64(len(d)) {
		nd := make(memDir, n)
		for i := range d {
			nd[i].Store(d[i].Load())
		}
		m.dir.Store(&nd) // before the size: whoever sees the size sees nd
	}
	m.size.Store(size)
	return nil
}

// ReadOnly reports whether writes are refused.
func (m *Mem) ReadOnly() bool { return m.ro.Load() }

// SetReadOnly makes the disk refuse (ro true) or accept writes, discards and
// write-zeroes from now on. Requests already running are not affected.
func (m *Mem) SetReadOnly(ro bool) { m.ro.Store(ro) }

// Allocated returns the bytes of memory held by written chunks.
func (m *Mem) Allocated() int64 { return m.chunks.Load() * MemChunkSize }

// Stats returns a snapshot of the disk's counters.
func (m *Mem) Stats() Stats { return m.stats.snapshot() }

// Health returns synthetic health: no warnings, the disk's own I/O counters,
// and hours since NewMem as power-on hours. It never fails.
func (m *Mem) Health() (Health, error) {
	s := m.stats.snapshot()
	return syntheticHealth(&s, m.stats.epoch), nil
}

// chunk returns the chunk with index i, or nil when it was never written.
func (m *Mem) chunk(i int64) *memChunk {
	l := (*m.dir.Load())[i>>memLeafShift].Load()
	if l == nil {
		return nil
	}
	return l[i&(memLeafLen-1)].Load()
}

// chunkForWrite returns the chunk with index i, allocating it (and its leaf)
// when needed. Concurrent allocations of the same chunk agree on one.
func (m *Mem) chunkForWrite(i int64) *memChunk {
	l := (*m.dir.Load())[i>>memLeafShift].Load()
	if l == nil {
		l = m.leafForWrite(i >> memLeafShift)
	}
	cp := &l[i&(memLeafLen-1)]
	c := cp.Load()
	if c == nil {
		nc := new(memChunk)
		if cp.CompareAndSwap(nil, nc) {
			m.chunks.Add(1)
			c = nc
		} else {
			c = cp.Load()
		}
	}
	return c
}

// leafForWrite returns leaf k, installing it when needed. It holds growMu,
// so that a directory copy (Resize) never misses a leaf installed in the
// directory it copies; leaves are rare (one per memLeafLen chunks).
func (m *Mem) leafForWrite(k int64) *memLeaf {
	m.growMu.Lock()
	defer m.growMu.Unlock()
	lp := &(*m.dir.Load())[k]
	l := lp.Load()
	if l == nil {
		l = new(memLeaf)
		lp.Store(l)
		m.nleaf.Add(1)
	}
	return l
}

// ReadAt fills p from offset off; unwritten ranges read as zeroes.
func (m *Mem) ReadAt(p []byte, off int64) error {
	if err := m.check(OpRead, off, int64(len(p)), false); err != nil {
		return err
	}
	start := m.stats.begin()
	m.read(p, off)
	m.stats.end(&m.stats.read, int64(len(p)), start, nil)
	return nil
}

// ViewAt fills segs with the memory of n bytes at off (see Viewer): one
// entry per chunk touched, the disk's zero chunk where nothing was written.
// It copies nothing; the chunks are not locked, so a read overlapping a
// write in flight may see part of it, as the Viewer contract allows.
func (m *Mem) ViewAt(segs [][]byte, off int64, n int) (int, error) {
	if err := m.check(OpRead, off, int64(n), false); err != nil {
		return 0, err
	}
	if c := chunksOf(off, n); c > int64(len(segs)) {
		return 0, fmt.Errorf("viewing %d bytes at %d: %d chunks for %d segments: %w", n, off, c, len(segs), ErrUnsupported)
	}
	start := m.stats.begin()
	k := m.fillSegs(segs, off, n, false)
	m.stats.end(&m.stats.read, int64(n), start, nil)
	return k, nil
}

// chunksOf returns how many chunks n bytes at off touch.
func chunksOf(off int64, n int) int64 {
	if n == 0 {
		return 0
	}
	return (off+int64(n)-1)>>memChunkShift - off>>memChunkShift + 1
}

// fillSegs fills segs with the memory of n bytes at off, one entry per
// chunk touched, and returns how many it used: for a write (PlaceAt) each
// chunk allocated as WriteAt would, for a read (ViewAt) the disk's zero
// chunk where nothing was written. The caller checked that segs is long
// enough (chunksOf).
func (m *Mem) fillSegs(segs [][]byte, off int64, n int, write bool) int {
	k := 0
	for o, left := off, n; left > 0; k++ {
		i := o >> memChunkShift
		co := int(o & (MemChunkSize - 1))
		var c *memChunk
		if write {
			c = m.chunkForWrite(i)
		} else if c = m.chunk(i); c == nil {
			c = m.zeros
		}
		l := min(left, MemChunkSize-co)
		// Not c[co:co+l]: slicing the array pointer makes the compiler
		// check it for nil by loading the chunk's first byte, a cache
		// (and often TLB) miss of its own on a random read (12% of a
		// 4 KiB NVMe/TCP randread profile). c is never nil here.
		segs[k] = unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(c), co)), l)
		o += int64(l)
		left -= l
	}
	return k
}

// PlaceAt begins a placed write of n bytes at off (see Placer): segs get
// one entry per chunk touched, each chunk allocated as WriteAt would.
func (m *Mem) PlaceAt(segs [][]byte, off int64, n int) (Placement, error) {
	if err := m.check(OpWrite, off, int64(n), true); err != nil {
		return Placement{}, err
	}
	if c := chunksOf(off, n); c > int64(len(segs)) {
		return Placement{}, fmt.Errorf("placing %d bytes at %d: %d chunks for %d segments: %w", n, off, c, len(segs), ErrUnsupported)
	}
	start := m.stats.begin()
	k := m.fillSegs(segs, off, n, true)
	return Placement{Segs: k, Off: off, Len: n, start: int64(start)}, nil
}

// Placed finishes a placed write (see Placer): it takes and releases the
// lock of each chunk the write touched, so that the caller's writes to
// them happen before any later ReadAt or WriteAt of those chunks, then
// counts the write.
func (m *Mem) Placed(p Placement, flags WriteFlags) error {
	if p.Len > 0 {
		first, last := p.Off>>memChunkShift, (p.Off+int64(p.Len)-1)>>memChunkShift
		for i := first; i <= last; i++ {
			mu := &m.locks[i%memLockStripes]
			mu.Lock()
			mu.Unlock()
		}
	}
	if m.closed.Load() {
		m.stats.abandon()
		return m.stats.reject(ErrClosed)
	}
	m.doneWrite(int64(p.Len), time.Duration(p.start), flags)
	return nil
}

// Unplace gives up a placed write (see Placer).
func (m *Mem) Unplace(Placement) { m.stats.abandon() }

// ReadvAt fills bufs, in order, from offset off.
func (m *Mem) ReadvAt(bufs [][]byte, off int64) error {
	n := vecLen(bufs)
	if err := m.check(OpRead, off, n, false); err != nil {
		return err
	}
	start := m.stats.begin()
	o := off
	for _, b := range bufs {
		m.read(b, o)
		o += int64(len(b))
	}
	m.stats.end(&m.stats.read, n, start, nil)
	return nil
}

// WriteAt copies p to offset off. FUA needs no extra work: memory is as
// durable as a RAM disk gets once the copy is done.
func (m *Mem) WriteAt(p []byte, off int64, flags WriteFlags) error {
	if err := m.check(OpWrite, off, int64(len(p)), true); err != nil {
		return err
	}
	start := m.stats.begin()
	m.write(p, off)
	m.doneWrite(int64(len(p)), start, flags)
	return nil
}

// WritevAt copies bufs, in order, to offset off.
func (m *Mem) WritevAt(bufs [][]byte, off int64, flags WriteFlags) error {
	n := vecLen(bufs)
	if err := m.check(OpWrite, off, n, true); err != nil {
		return err
	}
	start := m.stats.begin()
	o := off
	for _, b := range bufs {
		m.write(b, o)
		o += int64(len(b))
	}
	m.doneWrite(n, start, flags)
	return nil
}

func (m *Mem) doneWrite(n int64, start time.Duration, flags WriteFlags) {
	if flags&FUA != 0 {
		m.stats.fua.Add(1)
	}
	m.stats.end(&m.stats.write, n, start, nil)
}

// Flush does nothing: a RAM disk has no volatile cache beyond itself.
func (m *Mem) Flush() error {
	if m.closed.Load() {
		return m.stats.reject(ErrClosed)
	}
	m.stats.flush.done(0, 0, nil)
	return nil
}

// Discard deallocates the range: chunks it covers entirely are freed, the
// rest of the range is zeroed.
func (m *Mem) Discard(off, length int64) error {
	return m.zero(OpDiscard, off, length)
}

// WriteZeroes zeroes the range, freeing the chunks it covers entirely (a
// thin RAM disk stores zeroes by storing nothing).
func (m *Mem) WriteZeroes(off, length int64, flags WriteFlags) error {
	return m.zero(OpWriteZeroes, off, length)
}

func (m *Mem) zero(op Op, off, length int64) error {
	if err := m.check(op, off, length, true); err != nil {
		return err
	}
	start := m.stats.begin()
	total := length
	dir := *m.dir.Load()
	for length > 0 {
		i := off >> memChunkShift
		co := off & (MemChunkSize - 1)
		n := min(length, MemChunkSize-co)
		if l := dir[i>>memLeafShift].Load(); l != nil {
			cp := &l[i&(memLeafLen-1)]
			mu := &m.locks[i%memLockStripes]
			mu.Lock()
			if n == MemChunkSize {
				if cp.Swap(nil) != nil {
					m.chunks.Add(-1)
				}
			} else if c := cp.Load(); c != nil {
				clear(c[co : co+n])
			}
			mu.Unlock()
		}
		off += n
		length -= n
	}
	m.stats.end(m.stats.op(op), total, start, nil)
	return nil
}

// Close frees the disk's memory. Later calls return ErrClosed.
func (m *Mem) Close() error {
	if m.closed.Swap(true) {
		return ErrClosed
	}
	m.growMu.Lock()
	defer m.growMu.Unlock()
	if m.nleaf.Load() > 0 { // a never-written 1 PiB disk has 4M empty slots
		d := *m.dir.Load()
		for i := range d {
			d[i].Store(nil)
		}
	}
	m.chunks.Store(0)
	return nil
}

// check validates a request; write requests are also refused on a read-only
// disk.
func (m *Mem) check(op Op, off, n int64, write bool) error {
	if m.closed.Load() {
		return m.stats.reject(ErrClosed)
	}
	if write && m.ro.Load() {
		return m.stats.reject(ErrReadOnly)
	}
	if err := checkRange(op, off, n, m.size.Load(), m.bs); err != nil {
		return m.stats.reject(err)
	}
	return nil
}

func (m *Mem) read(p []byte, off int64) {
	for len(p) > 0 {
		i := off >> memChunkShift
		co := off & (MemChunkSize - 1)
		var n int
		mu := &m.locks[i%memLockStripes]
		mu.RLock()
		if c := m.chunk(i); c != nil {
			n = copy(p, c[co:])
		} else {
			n = min(len(p), int(MemChunkSize-co))
			clear(p[:n])
		}
		mu.RUnlock()
		p = p[n:]
		off += int64(n)
	}
}

func (m *Mem) write(p []byte, off int64) {
	for len(p) > 0 {
		i := off >> memChunkShift
		co := off & (MemChunkSize - 1)
		c := m.chunkForWrite(i)
		mu := &m.locks[i%memLockStripes]
		mu.Lock()
		n := copy(c[co:], p)
		mu.Unlock()
		p = p[n:]
		off += int64(n)
	}
}

// Traits implements TraitsReporter: a RAM disk never waits, and discarded
// chunks are freed, so they read back as zeroes.
func (m *Mem) Traits() Traits { return Traits{Waits: WaitsNever, ZeroesAfterDiscard: true} }
