//go:build linux

package backstore

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fdDisk is the part that File and Block share: positioned I/O on a file
// descriptor, with FUA, flush, statistics and a close that waits for the
// requests in flight.
//
// mu is held shared by every request that uses fd and exclusively by Close,
// so a request never reaches a descriptor number that was closed (and maybe
// reused by another open).
type fdDisk struct {
	mu       sync.RWMutex
	fd       int // -1 once closed
	name     string
	size     atomic.Int64 // changed by Resize and Rescan, under resizeMu
	resizeMu sync.Mutex
	bs       int
	ro       bool
	direct   bool
	memAlign int         // direct I/O: buffer address alignment
	lenAlign int         // direct I/O: scatter segment length alignment
	noDsync  atomic.Bool // pwritev2(RWF_DSYNC) unsupported: FUA = write + fdatasync
	noNowait atomic.Bool // preadv2(RWF_NOWAIT) unsupported: readAtNoWait always declines
	zeroOnce sync.Once
	zeroBuf  []byte // zeroes for write-zeroes fallbacks, allocated on first need
	stats    statsCollector
	eng      *asyncEngine // Start's engine (uring_linux.go); set at open
}

// zeroBufSize is the size of the zero buffer used when neither the file
// system nor the device can zero a range by itself.
const zeroBufSize = 256 << 10

func (d *fdDisk) check(op Op, off, n int64, write bool) error {
	if write && d.ro {
		return d.stats.reject(ErrReadOnly)
	}
	if err := checkRange(op, off, n, d.size.Load(), d.bs); err != nil {
		return d.stats.reject(err)
	}
	return nil
}

// bufOK reports whether p may be used for I/O on d.
func (d *fdDisk) bufOK(p []byte) bool {
	return !d.direct || (isAligned(p, d.memAlign) && len(p)&(d.lenAlign-1) == 0)
}

func (d *fdDisk) bufsOK(bufs [][]byte) bool {
	if !d.direct {
		return true
	}
	for _, b := range bufs {
		if !d.bufOK(b) {
			return false
		}
	}
	return true
}

// acquire takes the shared lock and returns the descriptor, or ErrClosed
// without the lock.
func (d *fdDisk) acquire() (int, error) {
	d.mu.RLock()
	if d.fd < 0 {
		d.mu.RUnlock()
		return -1, d.stats.reject(ErrClosed)
	}
	return d.fd, nil
}

func (d *fdDisk) readAt(p []byte, off int64) error {
	if err := d.check(OpRead, off, int64(len(p)), false); err != nil {
		return err
	}
	if !d.bufOK(p) {
		return d.stats.reject(ErrBufferAlignment)
	}
	fd, err := d.acquire()
	if err != nil {
		return err
	}
	start := d.stats.begin()
	err = preadFull(fd, p, off)
	d.mu.RUnlock()
	d.stats.end(&d.stats.read, int64(len(p)), start, err)
	if err != nil {
		return fmt.Errorf("reading %d bytes at offset %d of %s: %w", len(p), off, d.name, err)
	}
	return nil
}

// readAtNoWait reads p from the page cache only (preadv2 with RWF_NOWAIT).
// It declines (false, nothing counted) when part of the range is not
// cached, on direct I/O, and where the kernel or file system cannot tell.
func (d *fdDisk) readAtNoWait(p []byte, off int64) (bool, error) {
	if err := d.check(OpRead, off, int64(len(p)), false); err != nil {
		return false, err
	}
	if d.direct || d.noNowait.Load() {
		return false, nil
	}
	fd, err := d.acquire()
	if err != nil {
		return false, err
	}
	start := d.stats.begin()
	iov := [1]unix.Iovec{{Base: unsafe.SliceData(p)}}
	iov[0].SetLen(len(p))
	var n int
	for {
		n, err = rawRW(unix.SYS_PREADV2, fd, iov[:], off, unix.RWF_NOWAIT)
		if err != unix.EINTR {
			break
		}
	}
	d.mu.RUnlock()
	switch {
	case err == unix.EAGAIN:
		d.stats.abandon()
		return false, nil
	case err == unix.EOPNOTSUPP || err == unix.ENOSYS || err == unix.EINVAL:
		d.noNowait.Store(true)
		d.stats.abandon()
		return false, nil
	case err != nil:
		d.stats.end(&d.stats.read, int64(len(p)), start, err)
		return false, fmt.Errorf("reading %d bytes at offset %d of %s: %w", len(p), off, d.name, err)
	case n < len(p):
		d.stats.abandon()
		return false, nil // partly cached: ReadAt finishes it
	}
	d.stats.end(&d.stats.read, int64(len(p)), start, nil)
	return true, nil
}

func (d *fdDisk) readvAt(bufs [][]byte, off int64) error {
	n := vecLen(bufs)
	if err := d.check(OpRead, off, n, false); err != nil {
		return err
	}
	if !d.bufsOK(bufs) {
		return d.stats.reject(ErrBufferAlignment)
	}
	fd, err := d.acquire()
	if err != nil {
		return err
	}
	start := d.stats.begin()
	err = preadvFull(fd, bufs, off)
	d.mu.RUnlock()
	d.stats.end(&d.stats.read, n, start, err)
	if err != nil {
		return fmt.Errorf("reading %d bytes in %d buffers at offset %d of %s: %w", n, len(bufs), off, d.name, err)
	}
	return nil
}

func (d *fdDisk) writeAt(p []byte, off int64, flags WriteFlags) error {
	if err := d.check(OpWrite, off, int64(len(p)), true); err != nil {
		return err
	}
	if !d.bufOK(p) {
		return d.stats.reject(ErrBufferAlignment)
	}
	fd, err := d.acquire()
	if err != nil {
		return err
	}
	start := d.stats.begin()
	err = d.pwrite(fd, p, nil, off, flags)
	d.mu.RUnlock()
	d.doneWrite(int64(len(p)), start, flags, err)
	if err != nil {
		return fmt.Errorf("writing %d bytes at offset %d of %s: %w", len(p), off, d.name, err)
	}
	return nil
}

func (d *fdDisk) writevAt(bufs [][]byte, off int64, flags WriteFlags) error {
	n := vecLen(bufs)
	if err := d.check(OpWrite, off, n, true); err != nil {
		return err
	}
	if !d.bufsOK(bufs) {
		return d.stats.reject(ErrBufferAlignment)
	}
	fd, err := d.acquire()
	if err != nil {
		return err
	}
	start := d.stats.begin()
	err = d.pwrite(fd, nil, bufs, off, flags)
	d.mu.RUnlock()
	d.doneWrite(n, start, flags, err)
	if err != nil {
		return fmt.Errorf("writing %d bytes in %d buffers at offset %d of %s: %w", n, len(bufs), off, d.name, err)
	}
	return nil
}

func (d *fdDisk) doneWrite(n int64, start time.Duration, flags WriteFlags, err error) {
	if flags&FUA != 0 {
		d.stats.fua.Add(1)
	}
	d.stats.end(&d.stats.write, n, start, err)
}

// pwrite writes p, or bufs when p is nil. A FUA write uses pwritev2 with
// RWF_DSYNC (the kernel turns it into a FUA write on a block device) and,
// where the kernel lacks it, a plain write followed by fdatasync.
func (d *fdDisk) pwrite(fd int, p []byte, bufs [][]byte, off int64, flags WriteFlags) error {
	if flags&FUA != 0 && !d.noDsync.Load() {
		var err error
		if p != nil {
			err = pwriteFull(fd, p, off, unix.RWF_DSYNC)
		} else {
			err = pwritevFull(fd, bufs, off, unix.RWF_DSYNC)
		}
		if err != unix.EOPNOTSUPP && err != unix.ENOSYS {
			return err
		}
		d.noDsync.Store(true)
	}
	var err error
	if p != nil {
		err = pwriteFull(fd, p, off, 0)
	} else {
		err = pwritevFull(fd, bufs, off, 0)
	}
	if err == nil && flags&FUA != 0 {
		err = fdatasync(fd)
	}
	return err
}

func (d *fdDisk) flush() error {
	fd, err := d.acquire()
	if err != nil {
		return err
	}
	start := d.stats.begin()
	err = fdatasync(fd)
	d.mu.RUnlock()
	d.stats.end(&d.stats.flush, 0, start, err)
	if err != nil {
		return fmt.Errorf("flushing %s: %w", d.name, err)
	}
	return nil
}

// zeroRange runs zero (an fallocate or ioctl on fd) for a discard or
// write-zeroes request, then fdatasync when flags ask for FUA.
func (d *fdDisk) zeroRange(op Op, off, length int64, flags WriteFlags, zero func(fd int, off, length int64) error) error {
	if err := d.check(op, off, length, true); err != nil {
		return err
	}
	if length == 0 {
		d.stats.op(op).done(0, 0, nil)
		return nil
	}
	fd, err := d.acquire()
	if err != nil {
		return err
	}
	start := d.stats.begin()
	err = zero(fd, off, length)
	if err == nil && flags&FUA != 0 {
		err = fdatasync(fd)
	}
	d.mu.RUnlock()
	d.stats.end(d.stats.op(op), length, start, err)
	if err != nil {
		return fmt.Errorf("%s of %d bytes at offset %d of %s: %w", op, length, off, d.name, err)
	}
	return nil
}

// writeZeroBuf zeroes a range by writing zeroes: the fallback when the file
// system or the device has no way to do it without data.
func (d *fdDisk) writeZeroBuf(fd int, off, length int64) error {
	d.zeroOnce.Do(func() {
		d.zeroBuf = AlignedBuffer(zeroBufSize, max(d.memAlign, 4096))
	})
	for length > 0 {
		n := min(length, zeroBufSize)
		if err := pwriteFull(fd, d.zeroBuf[:n], off, 0); err != nil {
			return err
		}
		off += n
		length -= n
	}
	return nil
}

func (d *fdDisk) close() error {
	if d.eng != nil {
		d.eng.stop() // refuses new operations, waits for those in flight
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd < 0 {
		return ErrClosed
	}
	err := unix.Close(d.fd)
	d.fd = -1
	if err != nil {
		return fmt.Errorf("closing %s: %w", d.name, err)
	}
	return nil
}

// directAlignment asks the kernel (statx STATX_DIOALIGN) for the direct I/O
// alignments of fd. It returns zeroes when the file system does not say.
func directAlignment(fd int) (mem, off int) {
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &st); err != nil {
		return 0, 0
	}
	if st.Mask&unix.STATX_DIOALIGN == 0 {
		return 0, 0
	}
	return int(st.Dio_mem_align), int(st.Dio_offset_align)
}

// Raw positioned I/O. These loop over short transfers and EINTR, and never
// allocate: scatter lists go to the kernel through an iovec array on the
// stack, in batches of iovBatch.

const iovBatch = 64

func preadFull(fd int, p []byte, off int64) error {
	for len(p) > 0 {
		n, err := unix.Pread(fd, p, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
		p = p[n:]
		off += int64(n)
	}
	return nil
}

func pwriteFull(fd int, p []byte, off int64, rwf int) error {
	for len(p) > 0 {
		var (
			n   int
			err error
		)
		if rwf != 0 {
			iov := [1]unix.Iovec{{Base: unsafe.SliceData(p)}}
			iov[0].SetLen(len(p))
			n, err = rawRW(unix.SYS_PWRITEV2, fd, iov[:], off, rwf)
		} else {
			n, err = unix.Pwrite(fd, p, off)
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		p = p[n:]
		off += int64(n)
	}
	return nil
}

func preadvFull(fd int, bufs [][]byte, off int64) error {
	return rwvFull(unix.SYS_PREADV, fd, bufs, off, 0)
}

func pwritevFull(fd int, bufs [][]byte, off int64, rwf int) error {
	if rwf != 0 {
		return rwvFull(unix.SYS_PWRITEV2, fd, bufs, off, rwf)
	}
	return rwvFull(unix.SYS_PWRITEV, fd, bufs, off, 0)
}

// rwvFull transfers all of bufs with the vectored system call trap.
func rwvFull(trap uintptr, fd int, bufs [][]byte, off int64, rwf int) error {
	read := trap == unix.SYS_PREADV
	var iov [iovBatch]unix.Iovec
	for {
		for len(bufs) > 0 && len(bufs[0]) == 0 {
			bufs = bufs[1:]
		}
		if len(bufs) == 0 {
			return nil
		}
		cnt := 0
		for _, b := range bufs {
			if cnt == iovBatch {
				break
			}
			if len(b) == 0 {
				continue
			}
			iov[cnt] = unix.Iovec{Base: unsafe.SliceData(b)}
			iov[cnt].SetLen(len(b))
			cnt++
		}
		n, err := rawRW(trap, fd, iov[:cnt], off, rwf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			if read {
				return io.ErrUnexpectedEOF
			}
			return io.ErrShortWrite
		}
		off += int64(n)
		for len(bufs) > 0 && n >= len(bufs[0]) {
			n -= len(bufs[0])
			bufs = bufs[1:]
		}
		if n > 0 {
			// Short transfer inside a buffer: finish that buffer alone.
			rest := bufs[0][n:]
			if read {
				err = preadFull(fd, rest, off)
			} else {
				err = pwriteFull(fd, rest, off, rwf)
			}
			if err != nil {
				return err
			}
			off += int64(len(rest))
			bufs = bufs[1:]
		}
	}
}

// rawRW issues preadv, pwritev or pwritev2 (with flags rwf).
func rawRW(trap uintptr, fd int, iov []unix.Iovec, off int64, rwf int) (int, error) {
	// The kernel splits the offset in two longs; on 64-bit the high one is
	// ignored. Two shifts keep the expression valid on 64-bit.
	lo := uintptr(off)
	hi := uintptr(uint64(off) >> (unsafe.Sizeof(uintptr(0))*8 - 1) >> 1)
	r, _, e := unix.Syscall6(trap, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(iov))), uintptr(len(iov)), lo, hi, uintptr(rwf))
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

func fdatasync(fd int) error {
	for {
		err := unix.Fdatasync(fd)
		if err != unix.EINTR {
			return err
		}
	}
}

func fallocate(fd int, mode uint32, off, length int64) error {
	for {
		err := unix.Fallocate(fd, mode, off, length)
		if err != unix.EINTR {
			return err
		}
	}
}

// ioctlRange issues a block device ioctl that takes a {start, length} pair
// (BLKDISCARD, BLKZEROOUT).
func ioctlRange(fd int, req uint, off, length int64) error {
	r := [2]uint64{uint64(off), uint64(length)}
	for {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(unsafe.Pointer(&r)))
		switch e {
		case 0:
			return nil
		case unix.EINTR:
			continue
		}
		return e
	}
}
