package backstore

// This file fixes the interface that the protocol cores (nvmeof, scsi) build
// on. Implementations may add methods; these signatures stay.

// WriteFlags modify a write.
type WriteFlags uint8

// Write flags.
const (
	// FUA (force unit access): the write is durable when the call returns.
	FUA WriteFlags = 1 << iota
)

// Disk is a block store. All methods are safe for concurrent use. Buffers
// belong to the caller (they are registered RDMA memory); a Disk never keeps
// them after a call returns and never allocates a buffer per I/O.
type Disk interface {
	// BlockSize is the logical block size in bytes (512 or 4096).
	BlockSize() int
	// Size is the capacity in bytes, a multiple of BlockSize.
	Size() int64
	// ReadOnly tells whether writes are refused.
	ReadOnly() bool
	// ReadAt fills p from byte offset off. off and len(p) must be multiples
	// of BlockSize and inside the disk; otherwise a *RangeError is returned.
	ReadAt(p []byte, off int64) error
	// WriteAt writes p at byte offset off, with the same rules as ReadAt.
	// A read-only disk returns ErrReadOnly.
	WriteAt(p []byte, off int64, flags WriteFlags) error
	// Flush makes every completed write durable (volatile write cache flush).
	Flush() error
	// Close releases the disk.
	Close() error
}

// VectoredDisk is implemented by disks that read and write scatter lists in
// one call (preadv/pwritev). Total length follows the ReadAt rules.
type VectoredDisk interface {
	Disk
	// ReadvAt fills bufs, in order, from byte offset off.
	ReadvAt(bufs [][]byte, off int64) error
	// WritevAt writes bufs, in order, at byte offset off.
	WritevAt(bufs [][]byte, off int64, flags WriteFlags) error
}

// Viewer is implemented by disks that keep their blocks in process memory
// (RAM disks), so a transport can send read data straight from them through
// an implicit MR (rdma.ImplicitPD) instead of copying it into a registered
// buffer first.
type Viewer interface {
	// ViewAt fills segs with the memory holding n bytes at byte offset off,
	// in order, and returns how many entries it used. The range follows the
	// ReadAt rules. When the range needs more than len(segs) entries it
	// returns an error wrapping ErrUnsupported and the caller uses ReadAt.
	//
	// The segments alias the disk: the caller must only read them, and
	// must be done with them before it completes the request, because later
	// writes change them (a read overlapping a write in flight sees either,
	// as on any disk). Unwritten ranges alias a zeroed chunk that is never
	// written. ViewAt counts as a read in the disk's statistics.
	ViewAt(segs [][]byte, off int64, n int) (int, error)
}

// NoWaitReader is implemented by disks that can serve a read at once when
// its data is cached (buffered files: preadv2 with RWF_NOWAIT). A transport
// tries it on its own goroutine and hands the read to a worker only when it
// is not done, as Linux nvmet's file backend does (IOCB_NOWAIT first, then
// its buffered-I/O workqueue).
type NoWaitReader interface {
	// ReadAtNoWait reads p at off, like ReadAt, when the whole range can be
	// read without waiting for a device, and returns true. Otherwise it
	// returns false, counts nothing, and the caller uses ReadAt. Requests
	// ReadAt refuses are refused the same way.
	ReadAtNoWait(p []byte, off int64) (bool, error)
}

// Discarder is implemented by disks that can deallocate (unmap/trim) a range;
// later reads of the range return zeroes.
type Discarder interface {
	// Discard deallocates length bytes at off (block aligned, inside the
	// disk, else a *RangeError; ErrReadOnly on a read-only disk).
	Discard(off, length int64) error
}

// ZeroWriter is implemented by disks that write zeroes over a range without a
// data buffer.
type ZeroWriter interface {
	// WriteZeroes zeroes length bytes at off, with the rules of Discard;
	// with FUA the zeroes are durable on return.
	WriteZeroes(off, length int64, flags WriteFlags) error
}

// HealthReporter is implemented by disks that report health (SMART or
// synthetic); see Health.
type HealthReporter interface {
	// Health returns the disk's current health. A device without health
	// data returns Supported false with a Reason, and an error wrapping
	// ErrUnsupported.
	Health() (Health, error)
}
