package backstore

import "strconv"

// errorString is the type of the package's constant sentinel errors. Being a
// string constant, a sentinel can be neither reassigned nor mutated, and
// errors.Is compares it by value.
type errorString string

// Error implements error.
func (e errorString) Error() string { return string(e) }

// Sentinel errors. Match them with errors.Is: the disks wrap them with the
// failing step and the disk's name.
const (
	// ErrReadOnly is returned by writes, discards and write-zeroes on a
	// read-only disk. NVMe maps it to Namespace Is Write Protected, SCSI to
	// DATA PROTECT / WRITE PROTECTED (27h/00h).
	ErrReadOnly errorString = "backstore: disk is read-only"
	// ErrUnsupported is returned when a disk or a device cannot do what was
	// asked, for example reading SMART data from a device that has none.
	ErrUnsupported errorString = "backstore: not supported"
	// ErrClosed is returned by every I/O method after Close, and by a second
	// Close.
	ErrClosed errorString = "backstore: disk is closed"
	// ErrBufferAlignment is returned when a disk opened for direct I/O
	// (O_DIRECT) is given a buffer whose address is not aligned to the
	// disk's DirectAlignment; AlignedBuffer makes suitable buffers.
	ErrBufferAlignment errorString = "backstore: buffer not aligned for direct I/O"
	// ErrNoSpace is returned by a write that the store has no space for
	// (a full Ceph pool, ENOSPC from a thin file). NVMe maps it to
	// Capacity Exceeded (generic 81h), SCSI to DATA PROTECT / SPACE
	// ALLOCATION FAILED WRITE PROTECT (27h/07h).
	ErrNoSpace errorString = "backstore: no space left in the store"
	// ErrTimeout is returned when the store did not answer in time (a
	// network store's operation timeout). The command may be retried.
	ErrTimeout errorString = "backstore: the store did not answer in time"
	// ErrFenced is returned once this process was fenced off the store
	// (a Ceph client blocklisted by another gateway taking over): no I/O
	// will succeed through it again. The protocols report it as a path
	// that is lost, so a multipath host goes on through another gateway.
	ErrFenced errorString = "backstore: this gateway was fenced off the store"
)

// Op names a backstore operation in errors and statistics.
type Op uint8

// Operations.
const (
	OpRead Op = iota + 1
	OpWrite
	OpFlush
	OpDiscard
	OpWriteZeroes
)

// String returns the lower-case name of the operation.
func (o Op) String() string {
	switch o {
	case OpRead:
		return "read"
	case OpWrite:
		return "write"
	case OpFlush:
		return "flush"
	case OpDiscard:
		return "discard"
	case OpWriteZeroes:
		return "write zeroes"
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// RangeReason tells why a request was refused with a *RangeError.
type RangeReason uint8

// Range error reasons.
const (
	// RangeOutOfBounds: the request starts or ends beyond the end of the
	// disk, or has a negative offset or length. NVMe: LBA Out of Range
	// (generic status 80h). SCSI: ILLEGAL REQUEST, LOGICAL BLOCK ADDRESS OUT
	// OF RANGE (21h/00h).
	RangeOutOfBounds RangeReason = iota + 1
	// RangeUnaligned: the offset or the length is not a multiple of the
	// block size. Block-addressed protocols cannot produce it; it marks a
	// bug in the caller's conversion. NVMe: Invalid Field in Command (02h);
	// SCSI: ILLEGAL REQUEST, INVALID FIELD IN CDB (24h/00h).
	RangeUnaligned
)

// String returns a short description of the reason.
func (r RangeReason) String() string {
	switch r {
	case RangeOutOfBounds:
		return "out of range"
	case RangeUnaligned:
		return "not aligned to the block size"
	}
	return "range reason(" + strconv.Itoa(int(r)) + ")"
}

// RangeError reports a request whose byte range does not fit the disk. The
// protocol cores map it to their status codes; see RangeReason for the
// mapping. The fields describe the request as it was received.
type RangeError struct {
	Op        Op          // the refused operation
	Off       int64       // byte offset of the request
	Len       int64       // byte length of the request
	Size      int64       // size of the disk in bytes
	BlockSize int         // block size of the disk in bytes
	Reason    RangeReason // why the request was refused
}

// Error describes the request and the disk.
func (e *RangeError) Error() string {
	b := make([]byte, 0, 128)
	b = append(b, "backstore: "...)
	b = append(b, e.Op.String()...)
	b = append(b, " of "...)
	b = strconv.AppendInt(b, e.Len, 10)
	b = append(b, " bytes at offset "...)
	b = strconv.AppendInt(b, e.Off, 10)
	b = append(b, ' ')
	b = append(b, e.Reason.String()...)
	b = append(b, " (disk of "...)
	b = strconv.AppendInt(b, e.Size, 10)
	b = append(b, " bytes, block size "...)
	b = strconv.AppendInt(b, int64(e.BlockSize), 10)
	b = append(b, ')')
	return string(b)
}

// OutOfRange reports whether the request reached beyond the disk.
func (e *RangeError) OutOfRange() bool { return e.Reason == RangeOutOfBounds }

// Unaligned reports whether the request was not block aligned.
func (e *RangeError) Unaligned() bool { return e.Reason == RangeUnaligned }

// LBA returns the first logical block of the request, for the INFORMATION
// field of SCSI sense data. It returns 0 for a negative offset.
func (e *RangeError) LBA() uint64 {
	if e.Off < 0 || e.BlockSize <= 0 {
		return 0
	}
	return uint64(e.Off) / uint64(e.BlockSize)
}

// checkRange validates a request of n bytes at off against a disk of size
// bytes and block size bs (a power of two). It never overflows: the end of
// the request is never computed.
func checkRange(op Op, off, n, size int64, bs int) error {
	if off < 0 || n < 0 || off > size || n > size-off {
		return &RangeError{Op: op, Off: off, Len: n, Size: size, BlockSize: bs, Reason: RangeOutOfBounds}
	}
	if (off|n)&int64(bs-1) != 0 {
		return &RangeError{Op: op, Off: off, Len: n, Size: size, BlockSize: bs, Reason: RangeUnaligned}
	}
	return nil
}

// vecLen returns the total length of bufs, or -1 when it overflows int64.
func vecLen(bufs [][]byte) int64 {
	var n int64
	for _, b := range bufs {
		n += int64(len(b))
		if n < 0 {
			return -1
		}
	}
	return n
}

// checkBlockSize validates a block size: 512 or 4096, the sizes the Disk
// contract allows.
func checkBlockSize(bs int) error {
	if bs != 512 && bs != 4096 {
		return blockSizeError(bs)
	}
	return nil
}

type blockSizeError int

// Error names the refused block size.
func (e blockSizeError) Error() string {
	return "backstore: block size " + strconv.Itoa(int(e)) + " is neither 512 nor 4096"
}
