package uring

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Opcodes (enum io_uring_op in include/uapi/linux/io_uring.h).
const (
	OpNop       uint8 = 0
	OpReadv     uint8 = 1
	OpWritev    uint8 = 2
	OpFsync     uint8 = 3
	OpFallocate uint8 = 17
	OpRead      uint8 = 22
	OpWrite     uint8 = 23
)

// FsyncDatasync is IORING_FSYNC_DATASYNC: an OpFsync is an fdatasync.
const FsyncDatasync = 1 << 0

// Setup flags, features and ring flags used here.
const (
	setupCQSize = 1 << 3 // IORING_SETUP_CQSIZE
	setupClamp  = 1 << 4 // IORING_SETUP_CLAMP

	featSingleMmap = 1 << 0 // IORING_FEAT_SINGLE_MMAP
	featNoDrop     = 1 << 1 // IORING_FEAT_NODROP

	enterGetEvents = 1 << 0 // IORING_ENTER_GETEVENTS

	sqCQOverflow = 1 << 1 // IORING_SQ_CQ_OVERFLOW

	offSQRing = 0          // IORING_OFF_SQ_RING
	offCQRing = 0x8000000  // IORING_OFF_CQ_RING
	offSQEs   = 0x10000000 // IORING_OFF_SQES
)

// params is struct io_uring_params.
type params struct {
	sqEntries    uint32
	cqEntries    uint32
	flags        uint32
	sqThreadCPU  uint32
	sqThreadIdle uint32
	features     uint32
	wqFd         uint32
	resv         [3]uint32
	sqOff        sqringOffsets
	cqOff        cqringOffsets
}

// sqringOffsets is struct io_sqring_offsets.
type sqringOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

// cqringOffsets is struct io_cqring_offsets.
type cqringOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

// SQE is struct io_uring_sqe (64 bytes), the fields this package uses
// named, the others kept as padding so that the layout is the kernel's.
type SQE struct {
	Opcode      uint8
	Flags       uint8
	IOPrio      uint16
	Fd          int32
	Off         uint64 // off / addr2
	Addr        uint64 // addr / splice_off_in
	Len         uint32
	OpFlags     uint32 // rw_flags, fsync_flags, ...
	UserData    uint64
	BufIndex    uint16
	Personality uint16
	SpliceFdIn  int32
	Addr3       uint64
	pad         uint64
}

// CQE is struct io_uring_cqe (16 bytes).
type CQE struct {
	UserData uint64
	Res      int32
	Flags    uint32
}

// Static size checks of the wire structures.
var (
	_ [64 - unsafe.Sizeof(SQE{})]struct{}
	_ [unsafe.Sizeof(SQE{}) - 64]struct{}
	_ [16 - unsafe.Sizeof(CQE{})]struct{}
	_ [unsafe.Sizeof(CQE{}) - 16]struct{}
	_ [120 - unsafe.Sizeof(params{})]struct{}
	_ [unsafe.Sizeof(params{}) - 120]struct{}
)

// Ring is one io_uring instance. See the package comment for its
// concurrency rules: the submission methods (GetSQE, Submit) need one
// caller at a time; Wait and Peek/Advance need one reaper at a time; the
// two sides may run concurrently.
type Ring struct {
	fd int

	sqMem, cqMem, sqeMem []byte

	sqHead, sqTail, sqFlags *uint32
	sqMask, sqEntries       uint32
	sqes                    []SQE
	sqLocal                 uint32 // next tail, not yet published

	cqHead, cqTail, cqOverflow *uint32
	cqMask, cqEntries          uint32
	cqes                       []CQE

	features uint32
}

// ErrUnavailable wraps the reason io_uring cannot be used: the kernel
// lacks it (ENOSYS), a seccomp filter or the kernel.io_uring_disabled
// sysctl forbids it (EPERM), or a required feature is missing.
var ErrUnavailable = errors.New("io_uring unavailable")

// New sets up a ring with at least entries submission entries (rounded up
// to a power of two by the kernel, clamped to its maximum) and a
// completion ring of twice that. Errors from io_uring_setup wrap
// ErrUnavailable when they mean the facility is missing or forbidden.
func New(entries uint32) (*Ring, error) {
	p := params{flags: setupCQSize | setupClamp, cqEntries: 2 * entries}
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if e != 0 {
		switch e {
		case unix.ENOSYS, unix.EPERM, unix.EACCES:
			return nil, fmt.Errorf("io_uring_setup: %w (%w)", ErrUnavailable, e)
		}
		return nil, fmt.Errorf("io_uring_setup: %w", e)
	}
	r := &Ring{fd: int(fd), features: p.features}
	if err := r.mmap(&p); err != nil {
		r.Close()
		return nil, err
	}
	if p.features&featNoDrop == 0 {
		// Before 5.5 a full CQ drops completions; the owner's slot
		// accounting relies on never losing one.
		r.Close()
		return nil, fmt.Errorf("io_uring without IORING_FEAT_NODROP (kernel before 5.5): %w", ErrUnavailable)
	}
	return r, nil
}

func (r *Ring) mmap(p *params) error {
	sqSize := uintptr(p.sqOff.array) + uintptr(p.sqEntries)*4
	cqSize := uintptr(p.cqOff.cqes) + uintptr(p.cqEntries)*unsafe.Sizeof(CQE{})
	single := p.features&featSingleMmap != 0
	if single {
		sqSize = max(sqSize, cqSize)
		cqSize = sqSize
	}
	var err error
	r.sqMem, err = unix.Mmap(r.fd, offSQRing, int(sqSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("mmap of the submission ring: %w", err)
	}
	if single {
		r.cqMem = r.sqMem
	} else {
		r.cqMem, err = unix.Mmap(r.fd, offCQRing, int(cqSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			return fmt.Errorf("mmap of the completion ring: %w", err)
		}
	}
	r.sqeMem, err = unix.Mmap(r.fd, offSQEs, int(uintptr(p.sqEntries)*unsafe.Sizeof(SQE{})), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("mmap of the submission entries: %w", err)
	}
	sq := unsafe.Pointer(unsafe.SliceData(r.sqMem))
	r.sqHead = (*uint32)(unsafe.Add(sq, p.sqOff.head))
	r.sqTail = (*uint32)(unsafe.Add(sq, p.sqOff.tail))
	r.sqFlags = (*uint32)(unsafe.Add(sq, p.sqOff.flags))
	r.sqMask = *(*uint32)(unsafe.Add(sq, p.sqOff.ringMask))
	r.sqEntries = *(*uint32)(unsafe.Add(sq, p.sqOff.ringEntries))
	// The indirection array maps ring slot i to SQE i once and for all, as
	// liburing does; only the tail moves afterwards.
	array := unsafe.Slice((*uint32)(unsafe.Add(sq, p.sqOff.array)), r.sqEntries)
	for i := range array {
		array[i] = uint32(i)
	}
	r.sqes = unsafe.Slice((*SQE)(unsafe.Pointer(unsafe.SliceData(r.sqeMem))), r.sqEntries)
	r.sqLocal = atomic.LoadUint32(r.sqTail)

	cq := unsafe.Pointer(unsafe.SliceData(r.cqMem))
	r.cqHead = (*uint32)(unsafe.Add(cq, p.cqOff.head))
	r.cqTail = (*uint32)(unsafe.Add(cq, p.cqOff.tail))
	r.cqOverflow = (*uint32)(unsafe.Add(cq, p.cqOff.overflow))
	r.cqMask = *(*uint32)(unsafe.Add(cq, p.cqOff.ringMask))
	r.cqEntries = *(*uint32)(unsafe.Add(cq, p.cqOff.ringEntries))
	r.cqes = unsafe.Slice((*CQE)(unsafe.Add(cq, p.cqOff.cqes)), r.cqEntries)
	return nil
}

// SQEntries and CQEntries return the sizes of the rings.
func (r *Ring) SQEntries() uint32 { return r.sqEntries }

// CQEntries returns the size of the completion ring.
func (r *Ring) CQEntries() uint32 { return r.cqEntries }

// GetSQE returns the next free submission entry, zeroed, or nil when the
// submission ring is full (entries the kernel has not consumed yet). The
// entry is the caller's until Flush publishes it.
func (r *Ring) GetSQE() *SQE {
	head := atomic.LoadUint32(r.sqHead) // acquire: the kernel consumed up to head
	if r.sqLocal-head >= r.sqEntries {
		return nil
	}
	e := &r.sqes[r.sqLocal&r.sqMask]
	*e = SQE{}
	r.sqLocal++
	return e
}

// Flush publishes the entries that GetSQE handed out (a release store of
// the tail, so the kernel sees their contents) and returns how many the
// kernel has not consumed yet.
func (r *Ring) Flush() uint32 {
	atomic.StoreUint32(r.sqTail, r.sqLocal)
	return r.sqLocal - atomic.LoadUint32(r.sqHead)
}

// Enter is io_uring_enter(2): it submits up to toSubmit published entries
// and, with wait, blocks until at least minComplete completions are in the
// ring. It returns how many entries were submitted. EINTR is returned to
// the caller (a signal, or task work run on the way), which retries.
func (r *Ring) Enter(toSubmit, minComplete uint32, wait bool) (int, error) {
	var flags uintptr
	if wait || r.overflowed() {
		// GETEVENTS also flushes completions the kernel held back when
		// the ring was full (IORING_FEAT_NODROP).
		flags |= enterGetEvents
	}
	n, _, e := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(toSubmit), uintptr(minComplete), flags, 0, 0)
	if e != 0 {
		return int(n), e
	}
	return int(n), nil
}

// overflowed reports whether the kernel holds completions that did not fit
// in the completion ring.
func (r *Ring) overflowed() bool {
	return atomic.LoadUint32(r.sqFlags)&sqCQOverflow != 0
}

// Overflowed reports whether completions wait in the kernel's overflow
// list; an Enter with wait (or any Enter while it is set) moves them in.
func (r *Ring) Overflowed() bool { return r.overflowed() }

// Peek returns the completions in the ring, oldest first, without
// consuming them; Advance(len) consumes them. The slices alias the ring
// and are valid until Advance.
func (r *Ring) Peek() (a, b []CQE) {
	head := atomic.LoadUint32(r.cqHead)
	tail := atomic.LoadUint32(r.cqTail) // acquire: the CQEs up to tail are written
	n := tail - head
	if n == 0 {
		return nil, nil
	}
	i := head & r.cqMask
	if first := r.cqEntries - i; n > first {
		return r.cqes[i:], r.cqes[:n-first]
	}
	return r.cqes[i : i+n], nil
}

// Advance consumes n completions (a release store of the head, so the
// kernel may reuse their entries after the caller read them).
func (r *Ring) Advance(n uint32) {
	atomic.StoreUint32(r.cqHead, atomic.LoadUint32(r.cqHead)+n)
}

// Close unmaps the rings and closes the ring descriptor; the kernel
// cancels what is still in flight. The caller makes sure nothing is.
func (r *Ring) Close() error {
	var err error
	if r.sqeMem != nil {
		err = errors.Join(err, unix.Munmap(r.sqeMem))
	}
	if r.cqMem != nil && unsafe.SliceData(r.cqMem) != unsafe.SliceData(r.sqMem) {
		err = errors.Join(err, unix.Munmap(r.cqMem))
	}
	if r.sqMem != nil {
		err = errors.Join(err, unix.Munmap(r.sqMem))
	}
	r.sqeMem, r.cqMem, r.sqMem = nil, nil, nil
	if r.fd >= 0 {
		err = errors.Join(err, unix.Close(r.fd))
		r.fd = -1
	}
	if err != nil {
		return fmt.Errorf("closing io_uring: %w", err)
	}
	return nil
}

// PrepRW fills e for a read or write opcode: fd, the address and length
// (a buffer for OpRead/OpWrite, an iovec array and its count for
// OpReadv/OpWritev), the file offset and the RWF_* flags.
func (e *SQE) PrepRW(op uint8, fd int, addr unsafe.Pointer, n uint32, off int64, rwFlags uint32) {
	e.Opcode = op
	e.Fd = int32(fd)
	e.Addr = uint64(uintptr(addr))
	e.Len = n
	e.Off = uint64(off)
	e.OpFlags = rwFlags
}

// PrepFsync fills e for an fsync (flags FsyncDatasync for fdatasync).
func (e *SQE) PrepFsync(fd int, flags uint32) {
	e.Opcode = OpFsync
	e.Fd = int32(fd)
	e.OpFlags = flags
}

// PrepFallocate fills e for fallocate(fd, mode, off, length): the kernel
// takes the length in addr and the mode in len.
func (e *SQE) PrepFallocate(fd int, mode uint32, off, length int64) {
	e.Opcode = OpFallocate
	e.Fd = int32(fd)
	e.Off = uint64(off)
	e.Addr = uint64(length)
	e.Len = mode
}

// PrepNop fills e for a no-op.
func (e *SQE) PrepNop() { e.Opcode = OpNop }

// registerEventfd is IORING_REGISTER_EVENTFD.
const registerEventfd = 4

// RegisterEventfd makes the kernel signal the eventfd efd for every
// completion posted to the ring (io_uring_register(2)), so that a reaper
// can wait for completions in Go's netpoller instead of blocking a thread
// (and, while the runtime has not noticed, its P) in io_uring_enter.
func (r *Ring) RegisterEventfd(efd int) error {
	fd := int32(efd)
	_, _, e := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), registerEventfd, uintptr(unsafe.Pointer(&fd)), 1, 0, 0)
	if e != 0 {
		return fmt.Errorf("io_uring_register(IORING_REGISTER_EVENTFD): %w", e)
	}
	return nil
}

// CQReady reports whether completions wait in the completion ring. It may
// be called from any goroutine (it only loads the head and tail).
func (r *Ring) CQReady() bool {
	return atomic.LoadUint32(r.cqTail) != atomic.LoadUint32(r.cqHead)
}
