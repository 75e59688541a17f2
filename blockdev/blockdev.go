package blockdev

import (
	"fmt"
	"time"
)

// Op is the operation of a Request.
type Op uint8

// Operations.
const (
	// OpRead reads Length bytes at Offset into the buffer.
	OpRead Op = iota + 1
	// OpWrite writes Length bytes of the buffer at Offset.
	OpWrite
	// OpFlush makes every completed write durable. Offset, Length and the
	// buffer are ignored.
	OpFlush
	// OpDiscard deallocates Length bytes at Offset (TRIM, Dataset
	// Management deallocate, UNMAP); what later reads return depends on the
	// device. No buffer.
	OpDiscard
	// OpWriteZeroes writes zeroes to Length bytes at Offset without
	// transferring them. No buffer.
	OpWriteZeroes
)

// String names the operation.
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
		return "write-zeroes"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// hasData tells whether the operation transfers data through a Buffer.
func (o Op) hasData() bool { return o == OpRead || o == OpWrite }

// Flags modify a Request.
type Flags uint8

// Request flags.
const (
	// FUA (force unit access) makes a Write durable before it completes.
	FUA Flags = 1 << iota
)

// Caps are the optional operations a device supports.
type Caps uint8

// Capabilities.
const (
	// CapFlush: the device has a volatile write cache and honours OpFlush.
	// Without it OpFlush completes at once (nothing to flush).
	CapFlush Caps = 1 << iota
	// CapFUA: Write honours the FUA flag.
	CapFUA
	// CapDiscard: OpDiscard is supported.
	CapDiscard
	// CapWriteZeroes: OpWriteZeroes is supported.
	CapWriteZeroes
	// CapReadOnly: writes fail with ErrReadOnly.
	CapReadOnly
)

// Has reports whether all of want are set.
func (c Caps) Has(want Caps) bool { return c&want == want }

// Info describes a device. Its size may change while the device is open,
// when the target announces a resize (an NVMe Namespace Attribute Changed
// event, a SCSI CAPACITY DATA HAS CHANGED unit attention): call the
// device's Info again rather than keeping a copy.
type Info struct {
	// Name identifies the device for people, e.g. its URL.
	Name string
	// BlockSize is the logical block size in bytes (512, 4096...). Offsets
	// and lengths of every request are multiples of it.
	BlockSize int
	// Size is the capacity in bytes, a multiple of BlockSize.
	Size int64
	// Queues is the number of submission queues; Request.Queue picks one
	// (modulo Queues).
	Queues int
	// QueueDepth is the number of requests each queue holds in flight.
	QueueDepth int
	// MaxTransfer is the largest Length of a Read or Write, a multiple of
	// BlockSize. Submit refuses larger ones with ErrTooLarge.
	MaxTransfer int
	// MaxZeroes is the largest Length of a Discard or WriteZeroes.
	MaxZeroes int64
	// Caps are the optional operations supported.
	Caps Caps
}

// Buffer is memory registered with a device's transport, handed out by
// Device.AllocBuffer. Its methods are safe for concurrent use.
type Buffer interface {
	// Bytes is the memory. Its length is the size asked for; it never
	// changes and stays valid until Release.
	Bytes() []byte
	// Release unregisters the memory. No request may use the buffer any
	// more; later Submits naming it fail.
	Release() error
}

// Request is one I/O. The caller owns it and may reuse it once it completed;
// the device reads it in Submit and writes Err (and nothing else) before
// the completion.
type Request struct {
	Op    Op
	Flags Flags
	// Offset and Length are in bytes, multiples of Info.BlockSize. Length
	// is unused by OpFlush.
	Offset int64
	Length int
	// Buf and BufOff locate the data of a Read or Write:
	// Buf.Bytes()[BufOff:BufOff+Length]. Buf must come from this device.
	Buf    Buffer
	BufOff int
	// Queue selects the submission queue, modulo Info.Queues.
	Queue int

	// Done, if set, is called when the request completes, on a goroutine of
	// the device (see the package comment).
	Done func(*Request)
	// C, if Done is nil, receives the request when it completes.
	C chan<- *Request

	// Err is the outcome, set before the completion: nil on success.
	Err error
	// Issued and Completed are set by the device to the times the request
	// went to the transport and its completion arrived, for latency
	// accounting without a clock read by the caller.
	Issued, Completed time.Time

	// Tag and Ctx are free for the caller's use.
	Tag uint64
	Ctx any
}

// Device is a block device. See the package comment for buffer ownership and
// concurrency.
type Device interface {
	// Info describes the device.
	Info() Info
	// AllocBuffer returns size bytes of registered memory, aligned to at
	// least the block size.
	AllocBuffer(size int) (Buffer, error)
	// Submit queues r. It blocks while the queue r.Queue selects is full.
	// It returns an error, without completing r, when r is invalid (bad
	// operation, alignment, range, buffer) or the device is closed or
	// failed; otherwise r completes exactly once.
	Submit(r *Request) error
	// Close fails requests still in flight with ErrClosed, completing them,
	// and releases the device. Buffers must be released before or after;
	// they cannot be used once the device is closed.
	Close() error
}

// Check validates r against info: the checks every device makes in Submit,
// in the order they report. It returns nil or one of ErrInvalid,
// ErrUnsupported, ErrReadOnly, ErrAlignment, ErrRange, ErrTooLarge and
// ErrBuffer. It does not check that Buf belongs to the device.
func Check(info *Info, r *Request) error {
	switch r.Op {
	case OpRead, OpWrite:
	case OpFlush:
		return nil
	case OpDiscard:
		if !info.Caps.Has(CapDiscard) {
			return ErrUnsupported
		}
		if info.Caps.Has(CapReadOnly) {
			return ErrReadOnly
		}
	case OpWriteZeroes:
		if !info.Caps.Has(CapWriteZeroes) {
			return ErrUnsupported
		}
		if info.Caps.Has(CapReadOnly) {
			return ErrReadOnly
		}
	default:
		return ErrInvalid
	}
	bs := int64(info.BlockSize)
	if r.Length <= 0 || r.Offset < 0 || r.Offset%bs != 0 || int64(r.Length)%bs != 0 {
		return ErrAlignment
	}
	if r.Offset > info.Size || int64(r.Length) > info.Size-r.Offset {
		return ErrRange
	}
	if r.Op.hasData() {
		if r.Length > info.MaxTransfer {
			return ErrTooLarge
		}
		if r.Buf == nil {
			return ErrBuffer
		}
		if b := r.Buf.Bytes(); r.BufOff < 0 || r.BufOff > len(b) || r.Length > len(b)-r.BufOff {
			return ErrBuffer
		}
		if r.Op == OpWrite && info.Caps.Has(CapReadOnly) {
			return ErrReadOnly
		}
	} else if int64(r.Length) > info.MaxZeroes {
		return ErrTooLarge
	}
	return nil
}

// Complete delivers r's completion to its callback or channel. Devices call
// it; it is exported for wrappers and fakes.
func Complete(r *Request) {
	if r.Done != nil {
		r.Done(r)
	} else if r.C != nil {
		r.C <- r
	}
}
