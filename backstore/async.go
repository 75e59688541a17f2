package backstore

import "fmt"

// AsyncOp is the operation of an AsyncIO.
type AsyncOp uint8

// Asynchronous operations.
const (
	AsyncRead AsyncOp = iota + 1
	AsyncWrite
	AsyncFlush
	AsyncDiscard
	AsyncWriteZeroes
)

// String names the operation.
func (o AsyncOp) String() string {
	switch o {
	case AsyncRead:
		return "read"
	case AsyncWrite:
		return "write"
	case AsyncFlush:
		return "flush"
	case AsyncDiscard:
		return "discard"
	case AsyncWriteZeroes:
		return "write-zeroes"
	}
	return fmt.Sprintf("AsyncOp(%d)", uint8(o))
}

// AsyncIO is one asynchronous disk operation. The caller owns it and may
// reuse it once Done ran: a transport keeps one per command slot, so
// nothing is allocated per I/O.
type AsyncIO struct {
	Op AsyncOp
	// Bufs hold the data of a read (filled) or a write (sent), in order;
	// their total length is the transfer length and follows the ReadAt
	// rules. Unused by flush, discard and write-zeroes.
	Bufs [][]byte
	// Off is the byte offset; Len the length of a discard or write-zeroes.
	Off int64
	Len int64
	// Flags modify a write or write-zeroes (FUA).
	Flags WriteFlags
	// Done is called exactly once when the operation ends, with Err set.
	Done func(*AsyncIO)
	// Err is the outcome, set before Done: nil or the error the
	// synchronous method would have returned.
	Err error
	// Ctx is free for the caller's use.
	Ctx any
}

// AsyncDisk is implemented by disks that keep many operations in flight
// without a goroutine or thread each (network block stores: Ceph RBD
// through librbd's aio API; files and block devices through io_uring). A
// transport that sees it starts its I/O with Start instead of running the
// synchronous methods on its workers, so one queue keeps its whole depth
// in flight.
//
// A disk that is also a NoWaitReader (a buffered File) serves cached reads
// fastest with ReadAtNoWait on the transport's own goroutine: Start must
// hand every completion to a goroutine of the disk, ReadAtNoWait answers
// at once. A transport should try ReadAtNoWait first and Start only the
// reads it declines. Every synchronous method stays usable alongside
// Start.
type AsyncDisk interface {
	Disk
	// Start begins io. It returns an error, without calling Done, when
	// io is refused up front (bad range or operation, read-only, closed,
	// unsupported); otherwise Done is called exactly once, on a goroutine
	// of the disk and never inside Start. The buffers belong to the disk
	// until Done. Done may call Start again with the same io (the next
	// range of a multi-range deallocation): the disk holds nothing of io
	// across the call to Done.
	Start(io *AsyncIO) error
}
