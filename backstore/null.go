package backstore

import (
	"sync/atomic"
	"time"
)

// Null is a disk that discards writes and reads zeroes, for benchmarks of
// the protocol path. It has neither Discard nor WriteZeroes: callers find
// that out by interface assertion, as they would on a disk without those
// capabilities. All methods are safe for concurrent use and allocate nothing.
type Null struct {
	size   atomic.Int64
	bs     int
	ro     atomic.Bool
	closed atomic.Bool
	stats  statsCollector
}

// Compile-time checks of the optional capabilities.
var (
	_ VectoredDisk   = (*Null)(nil)
	_ HealthReporter = (*Null)(nil)
	_ Resizer        = (*Null)(nil)
)

// NewNull returns a null disk of size bytes and the given block size. A block
// size other than 512 or 4096 is replaced by 512, and
// size is rounded down to a multiple of the block size (a negative size
// becomes 0), so that NewNull never fails.
func NewNull(size int64, blockSize int) *Null {
	if checkBlockSize(blockSize) != nil {
		blockSize = 512
	}
	size = max(size, 0) &^ int64(blockSize-1)
	d := &Null{bs: blockSize, stats: statsCollector{epoch: time.Now()}}
	d.size.Store(size)
	return d
}

// BlockSize returns the block size in bytes.
func (d *Null) BlockSize() int { return d.bs }

// Size returns the capacity in bytes.
func (d *Null) Size() int64 { return d.size.Load() }

// Resize sets the capacity to size bytes, a positive multiple of the block
// size. A null disk holds no data, so it may shrink as well as grow.
func (d *Null) Resize(size int64) error {
	if d.closed.Load() {
		return resizeError("null disk", d.size.Load(), size, ErrClosed)
	}
	if err := checkNewSize(size, d.bs); err != nil {
		return resizeError("null disk", d.size.Load(), size, err)
	}
	d.size.Store(size)
	return nil
}

// ReadOnly reports whether writes are refused.
func (d *Null) ReadOnly() bool { return d.ro.Load() }

// SetReadOnly makes the disk refuse (ro true) or accept writes from now on.
func (d *Null) SetReadOnly(ro bool) { d.ro.Store(ro) }

// Stats returns a snapshot of the disk's counters.
func (d *Null) Stats() Stats { return d.stats.snapshot() }

// Health returns synthetic health from the disk's own counters; it never
// fails.
func (d *Null) Health() (Health, error) {
	s := d.stats.snapshot()
	return syntheticHealth(&s, d.stats.epoch), nil
}

// ReadAt zeroes p.
func (d *Null) ReadAt(p []byte, off int64) error {
	if err := d.check(OpRead, off, int64(len(p)), false); err != nil {
		return err
	}
	start := d.stats.begin()
	clear(p)
	d.stats.end(&d.stats.read, int64(len(p)), start, nil)
	return nil
}

// ReadvAt zeroes every buffer of bufs.
func (d *Null) ReadvAt(bufs [][]byte, off int64) error {
	n := vecLen(bufs)
	if err := d.check(OpRead, off, n, false); err != nil {
		return err
	}
	start := d.stats.begin()
	for _, b := range bufs {
		clear(b)
	}
	d.stats.end(&d.stats.read, n, start, nil)
	return nil
}

// WriteAt validates the request and drops the data.
func (d *Null) WriteAt(p []byte, off int64, flags WriteFlags) error {
	return d.write(int64(len(p)), off, flags)
}

// WritevAt validates the request and drops the data.
func (d *Null) WritevAt(bufs [][]byte, off int64, flags WriteFlags) error {
	return d.write(vecLen(bufs), off, flags)
}

func (d *Null) write(n, off int64, flags WriteFlags) error {
	if err := d.check(OpWrite, off, n, true); err != nil {
		return err
	}
	if flags&FUA != 0 {
		d.stats.fua.Add(1)
	}
	d.stats.write.done(n, 0, nil)
	return nil
}

// Flush does nothing.
func (d *Null) Flush() error {
	if d.closed.Load() {
		return d.stats.reject(ErrClosed)
	}
	d.stats.flush.done(0, 0, nil)
	return nil
}

// Close marks the disk closed; later calls return ErrClosed.
func (d *Null) Close() error {
	if d.closed.Swap(true) {
		return ErrClosed
	}
	return nil
}

func (d *Null) check(op Op, off, n int64, write bool) error {
	if d.closed.Load() {
		return d.stats.reject(ErrClosed)
	}
	if write && d.ro.Load() {
		return d.stats.reject(ErrReadOnly)
	}
	if err := checkRange(op, off, n, d.size.Load(), d.bs); err != nil {
		return d.stats.reject(err)
	}
	return nil
}

// Traits implements TraitsReporter: a null disk never waits.
func (d *Null) Traits() Traits { return Traits{Waits: WaitsNever} }
