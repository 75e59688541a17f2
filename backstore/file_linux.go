//go:build linux

package backstore

import (
	"fmt"
	"io/fs"
	"log/slog"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdisk/rdisk/internal/units"
)

// FileOptions configure OpenFile. The zero value opens an existing file
// read-write with 512-byte blocks and its current size.
type FileOptions struct {
	// BlockSize is the logical block size: 512 or 4096; 0 means 512.
	BlockSize int
	// Size is the disk size in bytes, a multiple of BlockSize. 0 takes the
	// file's size rounded down to a block. A file shorter than Size is
	// extended (sparsely) to Size; a longer one is exported up to Size
	// only, never truncated.
	Size int64
	// Create creates the file when it does not exist (Size must then be
	// set). It excludes ReadOnly.
	Create bool
	// Perm is the mode of a created file; 0 means 0600.
	Perm fs.FileMode
	// ReadOnly opens the file read-only: writes, discards and write-zeroes
	// return ErrReadOnly.
	ReadOnly bool
	// Direct opens the file with O_DIRECT, bypassing the page cache. Buffers
	// must then be aligned to DirectAlignment (see AlignedBuffer) and
	// BlockSize must be a multiple of the file system's direct I/O offset
	// alignment.
	Direct bool
	// NoURing runs operations started with Start (AsyncDisk) on the sync
	// path even where io_uring works; see IOPath.
	NoURing bool
	// Log receives the line naming the I/O path at open; nil means
	// slog.Default().
	Log *slog.Logger
}

// File is a disk backed by a regular file: pread/pwrite (preadv/pwritev for
// scatter lists) into the caller's buffers, or io_uring for operations
// started with Start (see IOPath), optional O_DIRECT, discard by
// hole punching, write-zeroes by fallocate zero-range (falling back to hole
// punching, then to writing zeroes), flush by fdatasync, and FUA by a
// per-write O_DSYNC (pwritev2 RWF_DSYNC) or, on kernels without it, write
// plus fdatasync.
//
// All methods are safe for concurrent use; Close waits for requests in
// flight. Steady-state I/O allocates nothing.
type File struct {
	d           fdDisk
	noZeroRange atomic.Bool // FALLOC_FL_ZERO_RANGE unsupported by the file system
	noPunch     atomic.Bool // FALLOC_FL_PUNCH_HOLE unsupported by the file system
}

// Compile-time checks of the optional capabilities.
var (
	_ VectoredDisk   = (*File)(nil)
	_ AsyncDisk      = (*File)(nil)
	_ IOPathReporter = (*File)(nil)
	_ NoWaitReader   = (*File)(nil)
	_ Discarder      = (*File)(nil)
	_ ZeroWriter     = (*File)(nil)
	_ HealthReporter = (*File)(nil)
	_ Resizer        = (*File)(nil)
	_ Rescanner      = (*File)(nil)
)

// OpenFile opens (or creates, see FileOptions.Create) the regular file at
// path as a disk.
func OpenFile(path string, opts FileOptions) (*File, error) {
	bs := opts.BlockSize
	if bs == 0 {
		bs = 512
	}
	if err := checkBlockSize(bs); err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	if opts.Size < 0 || opts.Size%int64(bs) != 0 {
		return nil, fmt.Errorf("opening %s: size %s is not a multiple of the block size %d", path, units.FormatSize(opts.Size), bs)
	}
	if opts.Create && opts.ReadOnly {
		return nil, fmt.Errorf("opening %s: Create and ReadOnly exclude each other", path)
	}
	if opts.Create && opts.Size == 0 {
		return nil, fmt.Errorf("opening %s: Create needs a Size", path)
	}
	flags := unix.O_CLOEXEC | unix.O_RDWR
	if opts.ReadOnly {
		flags = unix.O_CLOEXEC | unix.O_RDONLY
	}
	if opts.Create {
		flags |= unix.O_CREAT
	}
	if opts.Direct {
		flags |= unix.O_DIRECT
	}
	perm := uint32(opts.Perm.Perm())
	if perm == 0 {
		perm = 0o600
	}
	fd, err := openRetry(path, flags, perm)
	if err != nil {
		if opts.Direct && err == unix.EINVAL {
			return nil, fmt.Errorf("opening %s with O_DIRECT (the file system may not support it): %w", path, err)
		}
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	f := &File{d: fdDisk{fd: fd, name: path, bs: bs, ro: opts.ReadOnly, direct: opts.Direct, stats: statsCollector{epoch: time.Now()}}}
	if err := f.setup(opts); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	f.d.eng = newAsyncEngine(&f.d, opts.NoURing, opts.Log, func(io *AsyncIO) error {
		return f.d.runSyncIO(io, f.Discard, f.WriteZeroes)
	})
	return f, nil
}

func (f *File) setup(opts FileOptions) error {
	d := &f.d
	var st unix.Stat_t
	if err := unix.Fstat(d.fd, &st); err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("not a regular file (use OpenBlock for block devices)")
	}
	size := opts.Size
	switch {
	case size == 0:
		size = st.Size &^ int64(d.bs-1)
		if size == 0 {
			return fmt.Errorf("the file (%s) holds no whole %d-byte block: give it a size (rdisk target --file PATH --size N creates or extends it)", units.FormatSize(st.Size), d.bs)
		}
	case st.Size < size && d.ro:
		return fmt.Errorf("read-only file has %s, fewer than the size %s", units.FormatSize(st.Size), units.FormatSize(size))
	case st.Size < size:
		if err := unix.Ftruncate(d.fd, size); err != nil {
			return fmt.Errorf("extending to %s: %w", units.FormatSize(size), err)
		}
	}
	d.size.Store(size)
	if d.direct {
		mem, off := directAlignment(d.fd)
		if off > d.bs {
			return fmt.Errorf("block size %d is smaller than the direct I/O alignment %d of the file system", d.bs, off)
		}
		d.memAlign, d.lenAlign = max(mem, 1), max(off, 1)
		if mem == 0 {
			// The file system does not tell (tmpfs): be safe.
			d.memAlign, d.lenAlign = d.bs, d.bs
		}
	}
	return nil
}

func openRetry(path string, flags int, perm uint32) (int, error) {
	for {
		fd, err := unix.Open(path, flags, perm)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// BlockSize returns the block size in bytes.
func (f *File) BlockSize() int { return f.d.bs }

// Size returns the capacity in bytes.
func (f *File) Size() int64 { return f.d.size.Load() }

// Resize grows the disk to size bytes, a positive multiple of the block
// size, extending the file (sparsely, with ftruncate) when it is shorter; a
// file already longer is not touched, as in OpenFile. Shrinking is refused
// with an error wrapping ErrUnsupported (the file is never truncated), and
// so is any resize of a read-only file (ErrReadOnly). Requests running
// meanwhile see the old size or the new one.
func (f *File) Resize(size int64) error {
	d := &f.d
	d.resizeMu.Lock()
	defer d.resizeMu.Unlock()
	old := d.size.Load()
	if d.ro {
		return resizeError(d.name, old, size, ErrReadOnly)
	}
	if err := checkNewSize(size, d.bs); err != nil {
		return resizeError(d.name, old, size, err)
	}
	if size < old {
		return resizeError(d.name, old, size, errShrink)
	}
	if size == old {
		return nil
	}
	fd, err := d.acquire()
	if err != nil {
		return resizeError(d.name, old, size, err)
	}
	defer d.mu.RUnlock()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return resizeError(d.name, old, size, fmt.Errorf("stat: %w", err))
	}
	if st.Size < size {
		if err := unix.Ftruncate(fd, size); err != nil {
			return resizeError(d.name, old, size, fmt.Errorf("extending the file: %w", err))
		}
	}
	d.size.Store(size)
	return nil
}

// Rescan sets the size to the file's current size (fstat) rounded down to
// a block, for a file that someone else grew (or shrank: the data past its
// end is gone already). A disk opened with a FileOptions.Size below the
// file's size is then exported whole. A file left with no whole block is
// an error, and the size is kept.
func (f *File) Rescan() error {
	d := &f.d
	d.resizeMu.Lock()
	defer d.resizeMu.Unlock()
	old := d.size.Load()
	fd, err := d.acquire()
	if err != nil {
		return fmt.Errorf("rescanning the size of %s (%s): %w", d.name, sizeText(old), err)
	}
	defer d.mu.RUnlock()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("rescanning the size of %s (%s): stat: %w", d.name, sizeText(old), err)
	}
	size := st.Size &^ int64(d.bs-1)
	if size <= 0 {
		return fmt.Errorf("rescanning the size of %s: the file (%s) holds no whole %d-byte block; the size stays %s", d.name, sizeText(st.Size), d.bs, sizeText(old))
	}
	d.size.Store(size)
	return nil
}

// ReadOnly reports whether writes are refused.
func (f *File) ReadOnly() bool { return f.d.ro }

// Path returns the path the file was opened with.
func (f *File) Path() string { return f.d.name }

// DirectAlignment returns the buffer address alignment that direct I/O
// needs, or 1 when the file was not opened with FileOptions.Direct.
func (f *File) DirectAlignment() int { return max(f.d.memAlign, 1) }

// Traits implements backstore.TraitsReporter: with direct I/O every call
// waits for the device; buffered, only flushes and uncached reads do.
// Discarded ranges are punched holes, which read back as zeroes.
func (f *File) Traits() Traits {
	if f.d.direct {
		return Traits{Waits: WaitsAlways, ZeroesAfterDiscard: true}
	}
	return Traits{Waits: WaitsOnCacheMiss, ZeroesAfterDiscard: true}
}

// Stats returns a snapshot of the disk's counters.
func (f *File) Stats() Stats { return f.d.stats.snapshot() }

// Health returns synthetic health: no warnings, the disk's own I/O counters
// (medium errors as media errors) and hours since OpenFile as power-on
// hours. It never fails; the device under the file system is not queried.
func (f *File) Health() (Health, error) {
	s := f.d.stats.snapshot()
	return syntheticHealth(&s, f.d.stats.epoch), nil
}

// ReadAt fills p from offset off with pread.
func (f *File) ReadAt(p []byte, off int64) error { return f.d.readAt(p, off) }

// ReadvAt fills bufs, in order, from offset off with preadv.
func (f *File) ReadvAt(bufs [][]byte, off int64) error { return f.d.readvAt(bufs, off) }

// ReadAtNoWait reads p at off when it is in the page cache (see
// NoWaitReader); a file opened with Direct always declines.
func (f *File) ReadAtNoWait(p []byte, off int64) (bool, error) { return f.d.readAtNoWait(p, off) }

// WriteAt writes p at offset off with pwrite; see File for FUA.
func (f *File) WriteAt(p []byte, off int64, flags WriteFlags) error {
	return f.d.writeAt(p, off, flags)
}

// WritevAt writes bufs, in order, at offset off with pwritev.
func (f *File) WritevAt(bufs [][]byte, off int64, flags WriteFlags) error {
	return f.d.writevAt(bufs, off, flags)
}

// Start implements AsyncDisk: reads, writes (FUA by RWF_DSYNC) and flushes
// (fdatasync) go to the disk's io_uring, or to its sync workers (see
// IOPath); discards and write-zeroes run Discard and WriteZeroes on the
// workers. It refuses what the synchronous methods refuse up front, and
// ErrClosed once Close began. Close waits for the operations started.
func (f *File) Start(io *AsyncIO) error { return f.d.eng.start(io) }

// IOPath implements IOPathReporter.
func (f *File) IOPath() (IOPath, string) { return f.d.eng.path, f.d.eng.reason }

// Flush makes completed writes durable with fdatasync.
func (f *File) Flush() error { return f.d.flush() }

// Close closes the file after the requests in flight. It does not flush.
func (f *File) Close() error { return f.d.close() }

// Discard deallocates the range by punching a hole in the file; reads of it
// return zeroes. Where the file system cannot punch holes, zeroes are
// written instead.
func (f *File) Discard(off, length int64) error {
	return f.d.zeroRange(OpDiscard, off, length, 0, f.punch)
}

// WriteZeroes zeroes the range with fallocate(FALLOC_FL_ZERO_RANGE); where
// the file system lacks it (tmpfs), by punching a hole; failing that, by
// writing zeroes. With FUA the range is durable on return.
func (f *File) WriteZeroes(off, length int64, flags WriteFlags) error {
	return f.d.zeroRange(OpWriteZeroes, off, length, flags, f.zeroes)
}

func (f *File) punch(fd int, off, length int64) error {
	if !f.noPunch.Load() {
		err := fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, length)
		if err != unix.EOPNOTSUPP {
			return err
		}
		f.noPunch.Store(true)
	}
	return f.d.writeZeroBuf(fd, off, length)
}

func (f *File) zeroes(fd int, off, length int64) error {
	if !f.noZeroRange.Load() {
		err := fallocate(fd, unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, off, length)
		if err != unix.EOPNOTSUPP {
			return err
		}
		f.noZeroRange.Store(true)
	}
	return f.punch(fd, off, length)
}
