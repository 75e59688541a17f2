package backstore

import "fmt"

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
	// Size is the capacity in bytes, a multiple of BlockSize. It may
	// change while the disk serves (see Resizer and Rescanner); each call
	// returns the current one.
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

// Placer is implemented by disks that keep their blocks in process memory
// (RAM disks), so that a transport can place a write's data straight into
// them (an RDMA Read into the disk's memory through an implicit write MR,
// rdma.ImplicitWritePD) instead of fetching it into a buffer and copying
// it with WriteAt. A placed write has three steps: PlaceAt checks the
// request and returns the memory, the caller (its adapter) writes the data
// there, and Placed finishes the write, or Unplace gives it up. Steady
// state (chunks already allocated) allocates nothing.
type Placer interface {
	// PlaceAt begins a write of n bytes at byte offset off. It checks the
	// request as WriteAt does (the range rules, ErrReadOnly, ErrClosed;
	// counted in Stats.Rejected the same way), fills segs with the disk
	// memory holding the range, in order, allocating what was never
	// written (never the zeroed chunk ViewAt shows), and returns the
	// Placement to finish. When the range needs more than len(segs)
	// entries it returns an error wrapping ErrUnsupported, counts
	// nothing, and the caller uses WriteAt.
	//
	// The segments alias the disk: the caller may write only inside them,
	// only until it calls Placed or Unplace, and must not keep them
	// afterwards. Until Placed the write is in flight: concurrent
	// requests that overlap it have no defined order with it, as on any
	// disk (a read may see part of the new data; a discard or write-zeroes
	// may free or zero the memory of blocks it covers, whose placed data
	// is then lost, as if the discard came later). Requests to other
	// blocks never interfere with it, and memory stays valid for as long
	// as the caller holds the segments, whatever happens to the disk.
	PlaceAt(segs [][]byte, off int64, n int) (Placement, error)
	// Placed finishes a write begun by PlaceAt once its data is in the
	// segments: it counts as a write in the disk's statistics (Stats.Write,
	// its latency from PlaceAt; with FUA in Stats.FUAWrites too; FUA needs
	// no more work than WriteAt's), and a read that follows it in the
	// caller's order sees the data. A disk closed meanwhile returns
	// ErrClosed: the data was not kept. A disk made read-only meanwhile
	// still completes it (requests already running are not affected).
	Placed(p Placement, flags WriteFlags) error
	// Unplace gives up a write begun by PlaceAt whose data will not all
	// arrive (the transfer failed, the connection ended). The range then
	// holds undefined data, part old and part new, as after any failed
	// write. It is counted nowhere.
	Unplace(p Placement)
}

// Placement is a write begun by Placer.PlaceAt; finish it with exactly one
// Placed or Unplace.
type Placement struct {
	// Segs is the number of entries of segs PlaceAt filled.
	Segs int
	// Off and Len are the write's byte range.
	Off int64
	Len int
	// start is when the write began (the disk's clock).
	start int64
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

// CompareWriter is implemented by disks whose store compares and writes
// atomically itself, for every client at once (Ceph RBD's
// rbd_aio_compare_and_write on the OSD), so that COMPARE AND WRITE stays
// atomic when several gateways serve the disk (a gateway's own range lock
// only orders its own commands).
type CompareWriter interface {
	// CompareAndWrite writes data at off only if the disk holds cmp
	// there (cmp and data of one block-aligned length, at most
	// CompareAndWriteMax). When they differ it writes nothing and returns
	// the byte offset in cmp of the first difference (with an error);
	// otherwise mismatch is -1.
	CompareAndWrite(cmp, data []byte, off int64) (mismatch int64, err error)
	// CompareAndWriteMax is the longest range CompareAndWrite takes, in
	// bytes; longer ones are compared and written by the caller.
	CompareAndWriteMax() int
}

// Resizer is implemented by disks whose capacity can change while serving.
type Resizer interface {
	// Resize changes the capacity to size bytes (a positive multiple of the
	// block size). Growing is supported; shrinking returns an error (it
	// would drop data) unless the disk can do it safely. Concurrent I/O
	// stays safe: I/O sees either size.
	Resize(size int64) error
}

// Rescanner is implemented by disks whose size is set outside rdisk (block
// devices, files grown by someone else): Rescan re-reads it.
type Rescanner interface{ Rescan() error }

// SizeWatcher is implemented by disks that notice by themselves when their
// size changes outside rdisk (an RBD image resized with `rbd resize`: a
// watch on its header). The target announces the new size to the hosts.
type SizeWatcher interface {
	// WatchSize sets the function called, on a goroutine of the disk,
	// after Size changed, with the new size; nil stops the calls. Calls
	// are not concurrent with each other.
	WatchSize(changed func(size int64))
}

// HealthReporter is implemented by disks that report health (SMART or
// synthetic); see Health.
type HealthReporter interface {
	// Health returns the disk's current health. A device without health
	// data returns Supported false with a Reason, and an error wrapping
	// ErrUnsupported.
	Health() (Health, error)
}

// Waits says when a disk's calls may wait for a device (or a network), so
// that a transport knows where to run its I/O: on its own goroutine, or on
// workers that may sit in a system call.
type Waits uint8

// How disks wait.
const (
	// WaitsAlways: reads, writes and flushes wait for a device (block
	// devices, files opened with O_DIRECT) and a device serves many at
	// once: run them on workers. The assumption for disks that report no
	// Traits.
	WaitsAlways Waits = iota
	// WaitsOnCacheMiss: I/O goes through the page cache (buffered files):
	// writes and cached reads return at once, flushes and uncached reads
	// wait (a NoWaitReader tells which reads).
	WaitsOnCacheMiss
	// WaitsNever: no call waits (RAM, null).
	WaitsNever
)

// String names the class.
func (w Waits) String() string {
	switch w {
	case WaitsAlways:
		return "always"
	case WaitsOnCacheMiss:
		return "on cache miss"
	case WaitsNever:
		return "never"
	}
	return fmt.Sprintf("Waits(%d)", uint8(w))
}

// Traits describes what a disk does, for the transports and protocol cores
// that decide where its I/O runs and what they promise a host. Transports
// ask (TraitsOf) instead of switching on concrete types, so a new kind of
// disk needs no change in any protocol.
type Traits struct {
	// Waits says when calls may wait for a device.
	Waits Waits
	// ZeroesAfterDiscard: ranges deallocated by Discard read back as
	// zeroes (RAM chunks are freed, file holes are punched), so a discard
	// may serve a write-zeroes. Block devices make no such promise.
	ZeroesAfterDiscard bool
}

// TraitsReporter is implemented by disks that describe themselves.
type TraitsReporter interface {
	// Traits returns the disk's traits; they do not change while it is
	// open.
	Traits() Traits
}

// TraitsOf returns d's traits, or the conservative ones (WaitsAlways, no
// zeroes after discard) when d does not report any.
func TraitsOf(d Disk) Traits {
	if tr, ok := d.(TraitsReporter); ok {
		return tr.Traits()
	}
	return Traits{Waits: WaitsAlways}
}
