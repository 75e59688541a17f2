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
	// Batch, set by the disk before Done, is non-nil when the disk is
	// completing several operations in a row on this goroutine: Done may
	// hold back work that serves many of them at once (a transport's
	// socket write) and hand it to Batch.Defer, which runs it after the
	// batch's last Done. Nil: do it now. A disk sets it before every
	// Done (nil when it completes one operation alone).
	Batch *Batch
}

// Batch collects the work that the Done functions of one run of
// completions deferred. A disk keeps one per completing goroutine (not
// shared), sets it in each AsyncIO it completes in the run and calls Run
// after the last; nothing is allocated once its list has grown.
type Batch struct {
	fns []func()
}

// Defer asks for f to run once the batch's completions are all done, on
// the same goroutine. A caller defers once per batch what it would
// otherwise do on every Done (it keeps its own "deferred" flag): f runs as
// often as it was deferred.
func (b *Batch) Defer(f func()) { b.fns = append(b.fns, f) }

// Len returns how many functions wait for Run.
func (b *Batch) Len() int { return len(b.fns) }

// Run runs the deferred functions in the order they were deferred (also
// those deferred while it runs) and empties the batch. The disk calls it
// after the batch's last Done.
func (b *Batch) Run() {
	for i := 0; i < len(b.fns); i++ {
		f := b.fns[i]
		b.fns[i] = nil
		f()
	}
	b.fns = b.fns[:0]
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
