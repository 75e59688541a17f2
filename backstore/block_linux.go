//go:build linux

package backstore

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// BlockOptions configure OpenBlock. The zero value opens the device
// read-write, exclusively, with O_DIRECT and its logical block size.
type BlockOptions struct {
	// BlockSize is the exported block size, 512 or 4096, not smaller than
	// the device's logical block size (BLKSSZGET). 0 means the logical
	// block size when it is 512 or 4096, else 4096 for devices with a
	// smaller one (1024 or 2048).
	BlockSize int
	// ReadOnly opens the device read-only.
	ReadOnly bool
	// Buffered opens the device without O_DIRECT, through the page cache.
	Buffered bool
	// Shared opens the device without O_EXCL, so that it can be open (or
	// mounted) elsewhere at the same time. Exporting a device that is in
	// use elsewhere corrupts data unless both sides only read.
	Shared bool
	// NoURing runs operations started with Start (AsyncDisk) on the sync
	// path even where io_uring works; see IOPath.
	NoURing bool
	// Log receives the line naming the I/O path at open; nil means
	// slog.Default().
	Log *slog.Logger
}

// Block is a disk backed by a block device: size from BLKGETSIZE64, logical
// block size from BLKSSZGET, O_DIRECT and exclusive open by default,
// pread/pwrite into the caller's buffers, write-zeroes by BLKZEROOUT, discard
// by a hole punch (deallocation that guarantees zeroes) falling back to
// BLKZEROOUT, flush by fdatasync (a device cache flush) and FUA by RWF_DSYNC
// writes. Health comes from the device's SMART data; see ReadHealth.
//
// All methods are safe for concurrent use; Close waits for requests in
// flight. Steady-state I/O allocates nothing.
type Block struct {
	d       fdDisk
	lbs     int
	noPunch atomic.Bool
}

// Compile-time checks of the optional capabilities.
var (
	_ VectoredDisk   = (*Block)(nil)
	_ AsyncDisk      = (*Block)(nil)
	_ IOPathReporter = (*Block)(nil)
	_ Discarder      = (*Block)(nil)
	_ ZeroWriter     = (*Block)(nil)
	_ HealthReporter = (*Block)(nil)
	_ Resizer        = (*Block)(nil)
	_ Rescanner      = (*Block)(nil)
)

// OpenBlock opens the block device at path as a disk.
func OpenBlock(path string, opts BlockOptions) (*Block, error) {
	flags := unix.O_CLOEXEC | unix.O_RDWR
	if opts.ReadOnly {
		flags = unix.O_CLOEXEC | unix.O_RDONLY
	}
	if !opts.Buffered {
		flags |= unix.O_DIRECT
	}
	if !opts.Shared {
		flags |= unix.O_EXCL
	}
	fd, err := openRetry(path, flags, 0)
	if err != nil {
		if err == unix.EBUSY {
			return nil, fmt.Errorf("opening %s exclusively (in use, mounted or opened with O_EXCL elsewhere): %w", path, err)
		}
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	b := &Block{d: fdDisk{fd: fd, name: path, ro: opts.ReadOnly, direct: !opts.Buffered, stats: statsCollector{epoch: time.Now()}}}
	if err := b.setup(opts); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	b.d.eng = newAsyncEngine(&b.d, opts.NoURing, opts.Log, func(io *AsyncIO) error {
		return b.d.runSyncIO(io, b.Discard, b.WriteZeroes)
	})
	return b, nil
}

func (b *Block) setup(opts BlockOptions) error {
	d := &b.d
	var st unix.Stat_t
	if err := unix.Fstat(d.fd, &st); err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return fmt.Errorf("not a block device (use OpenFile for regular files)")
	}
	size, err := unix.IoctlGetUint64(d.fd, unix.BLKGETSIZE64)
	if err != nil {
		return fmt.Errorf("reading the size (BLKGETSIZE64): %w", err)
	}
	lbs, err := unix.IoctlGetInt(d.fd, unix.BLKSSZGET)
	if err != nil {
		return fmt.Errorf("reading the logical block size (BLKSSZGET): %w", err)
	}
	if lbs < 512 || lbs > 4096 || lbs&(lbs-1) != 0 {
		return fmt.Errorf("logical block size %d is not supported (512 to 4096)", lbs)
	}
	b.lbs = lbs
	d.bs = opts.BlockSize
	if d.bs == 0 {
		d.bs = lbs
		if checkBlockSize(lbs) != nil {
			d.bs = 4096
		}
	}
	if err := checkBlockSize(d.bs); err != nil {
		return err
	}
	if d.bs < lbs {
		return fmt.Errorf("block size %d is smaller than the device's logical block size %d", d.bs, lbs)
	}
	if size > 1<<62 {
		return fmt.Errorf("device size %d is too large", size)
	}
	d.size.Store(int64(size) &^ int64(d.bs-1))
	if d.size.Load() == 0 {
		return fmt.Errorf("device of %d bytes holds no whole %d-byte block", size, d.bs)
	}
	if d.direct {
		mem, _ := directAlignment(d.fd)
		if mem == 0 {
			mem = lbs
		}
		d.memAlign, d.lenAlign = mem, lbs
	}
	return nil
}

// BlockSize returns the block size in bytes.
func (b *Block) BlockSize() int { return b.d.bs }

// LogicalBlockSize returns the device's own logical block size.
func (b *Block) LogicalBlockSize() int { return b.lbs }

// Size returns the capacity in bytes.
func (b *Block) Size() int64 { return b.d.size.Load() }

// Resize refuses, with an error wrapping ErrUnsupported: a block device's
// size is the device's own. Resize the device itself (lvextend, the
// storage array, losetup --set-capacity after growing the backing file)
// and call Rescan.
func (b *Block) Resize(size int64) error {
	return resizeError(b.d.name, b.d.size.Load(), size, fmt.Errorf("a block device cannot be resized by rdisk: resize the device itself, then rescan: %w", ErrUnsupported))
}

// Rescan sets the size to the device's current size (BLKGETSIZE64) rounded
// down to the block size, after the device grew or shrank. A device left
// with no whole block is an error, and the size is kept.
func (b *Block) Rescan() error {
	d := &b.d
	d.resizeMu.Lock()
	defer d.resizeMu.Unlock()
	old := d.size.Load()
	fd, err := d.acquire()
	if err != nil {
		return fmt.Errorf("rescanning the size of %s (%s): %w", d.name, sizeText(old), err)
	}
	defer d.mu.RUnlock()
	n, err := unix.IoctlGetUint64(fd, unix.BLKGETSIZE64)
	if err != nil {
		return fmt.Errorf("rescanning the size of %s (%s): BLKGETSIZE64: %w", d.name, sizeText(old), err)
	}
	if n > 1<<62 {
		return fmt.Errorf("rescanning the size of %s: device size %d is too large; the size stays %s", d.name, n, sizeText(old))
	}
	size := int64(n) &^ int64(d.bs-1)
	if size == 0 {
		return fmt.Errorf("rescanning the size of %s: the device (%s) holds no whole %d-byte block; the size stays %s", d.name, sizeText(int64(n)), d.bs, sizeText(old))
	}
	d.size.Store(size)
	return nil
}

// ReadOnly reports whether writes are refused.
func (b *Block) ReadOnly() bool { return b.d.ro }

// Path returns the path the device was opened with.
func (b *Block) Path() string { return b.d.name }

// DirectAlignment returns the buffer address alignment that direct I/O
// needs, or 1 when the device was opened with BlockOptions.Buffered.
func (b *Block) DirectAlignment() int { return max(b.d.memAlign, 1) }

// Traits implements backstore.TraitsReporter: every call waits for the
// device, and a discarded range need not read back as zeroes.
func (b *Block) Traits() Traits { return Traits{Waits: WaitsAlways} }

// Stats returns a snapshot of the disk's counters.
func (b *Block) Stats() Stats { return b.d.stats.snapshot() }

// ReadAt fills p from offset off with pread.
func (b *Block) ReadAt(p []byte, off int64) error { return b.d.readAt(p, off) }

// ReadvAt fills bufs, in order, from offset off with preadv.
func (b *Block) ReadvAt(bufs [][]byte, off int64) error { return b.d.readvAt(bufs, off) }

// WriteAt writes p at offset off with pwrite; with FUA, the write is a FUA
// write to the device (pwritev2 RWF_DSYNC).
func (b *Block) WriteAt(p []byte, off int64, flags WriteFlags) error {
	return b.d.writeAt(p, off, flags)
}

// WritevAt writes bufs, in order, at offset off with pwritev.
func (b *Block) WritevAt(bufs [][]byte, off int64, flags WriteFlags) error {
	return b.d.writevAt(bufs, off, flags)
}

// Start implements AsyncDisk: reads, writes (FUA by RWF_DSYNC) and flushes
// go to the disk's io_uring, or to its sync workers (see IOPath);
// discards and write-zeroes run Discard and WriteZeroes on the workers.
// It refuses what the synchronous methods refuse up front, and ErrClosed
// once Close began. Close waits for the operations started.
func (b *Block) Start(io *AsyncIO) error { return b.d.eng.start(io) }

// IOPath implements IOPathReporter.
func (b *Block) IOPath() (IOPath, string) { return b.d.eng.path, b.d.eng.reason }

// Flush flushes the device's volatile write cache (fdatasync).
func (b *Block) Flush() error { return b.d.flush() }

// Close closes the device after the requests in flight. It does not flush.
func (b *Block) Close() error { return b.d.close() }

// Discard deallocates the range so that it reads back as zeroes. It uses
// fallocate(FALLOC_FL_PUNCH_HOLE), which the kernel turns into a
// write-zeroes-with-unmap and refuses on devices that cannot do it; those
// get BLKZEROOUT instead. (A bare BLKDISCARD does not promise zeroes; Trim
// issues one.)
func (b *Block) Discard(off, length int64) error {
	return b.d.zeroRange(OpDiscard, off, length, 0, b.punch)
}

// WriteZeroes zeroes the range with BLKZEROOUT, which the device may do by
// deallocating. With FUA the range is durable on return.
func (b *Block) WriteZeroes(off, length int64, flags WriteFlags) error {
	return b.d.zeroRange(OpWriteZeroes, off, length, flags, zeroout)
}

// Trim issues BLKDISCARD over the range: a hint that the device may
// deallocate it, after which reads return unspecified data (zeroes, old data
// or a pattern, depending on the device). Use it only where the protocol
// allows that (an NVMe Deallocate with DLFEAT reporting no guarantee); use
// Discard otherwise. It is counted as a discard in Stats.
func (b *Block) Trim(off, length int64) error {
	return b.d.zeroRange(OpDiscard, off, length, 0, func(fd int, off, length int64) error {
		return ioctlRange(fd, unix.BLKDISCARD, off, length)
	})
}

func (b *Block) punch(fd int, off, length int64) error {
	if !b.noPunch.Load() {
		err := fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, length)
		if err != unix.EOPNOTSUPP {
			return err
		}
		b.noPunch.Store(true)
	}
	return zeroout(fd, off, length)
}

func zeroout(fd int, off, length int64) error {
	return ioctlRange(fd, unix.BLKZEROOUT, off, length)
}

// Health reads the device's SMART / health data and maps it to Health. A
// device without SMART (a loop, virtio or device-mapper device, for example)
// yields a Health with Supported false and Reason set, and an error wrapping
// ErrUnsupported; no numbers are made up.
func (b *Block) Health() (Health, error) {
	fd, err := b.d.acquire()
	if err != nil {
		return Health{}, err
	}
	defer b.d.mu.RUnlock()
	return deviceHealth(fd, b.d.name)
}
