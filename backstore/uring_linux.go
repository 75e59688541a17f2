//go:build linux

package backstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdisk/rdisk/internal/uring"
)

// IOPath says how a file or block disk runs the operations started with
// Start (AsyncDisk).
type IOPath uint8

// I/O paths.
const (
	// IOPathURing: reads, writes and flushes go to the kernel through an
	// io_uring; one ring per disk keeps every started operation in flight
	// without a thread each. Buffered reads of cached data are copied by
	// the kernel during submission (it tries IOCB_NOWAIT first, as
	// preadv2 with RWF_NOWAIT), only reads that would block wait.
	IOPathURing IOPath = iota + 1
	// IOPathSync: the operations run the synchronous system calls
	// (preadv, pwritev, fdatasync) on a few goroutines of the disk, where
	// io_uring is missing, forbidden, or turned off by the options.
	IOPathSync
)

// String names the path as logs and the target's status show it.
func (p IOPath) String() string {
	switch p {
	case IOPathURing:
		return "io_uring"
	case IOPathSync:
		return "sync"
	}
	return fmt.Sprintf("IOPath(%d)", uint8(p))
}

// IOPathReporter is implemented by disks that say how their asynchronous
// operations run (File and Block), for the target to show.
type IOPathReporter interface {
	// IOPath returns the path and, for IOPathSync, why io_uring is not
	// used (empty for IOPathURing).
	IOPath() (IOPath, string)
}

const (
	// ringEntries is the size of a disk's submission ring; the
	// completion ring has twice as many entries, and no more operations
	// than ringEntries are in the ring at once (the others wait in
	// order), so the completion ring cannot overflow.
	ringEntries = 256
	// syncWorkers is the number of goroutines that run the synchronous
	// system calls of started operations: every operation on the sync
	// path, and discards and write-zeroes (fallocate fallbacks and
	// BLKZEROOUT, which io_uring cannot express) on the io_uring path.
	syncWorkers = 8
	// iovMax is the most iovecs one submission carries (UIO_MAXIOV); a
	// longer scatter list is sent as a short transfer and its remainder.
	iovMax = 1024
)

// slot stage: what the slot's current submission does.
const (
	stageRW    uint8 = iota // the read or write itself (and flushes)
	stageFsync              // the fdatasync after a FUA write without RWF_DSYNC
)

// uslot is one operation in the ring; its index is the submission's user
// data. iov is grown once to the longest scatter list seen and reused.
type uslot struct {
	io    *AsyncIO
	iov   []unix.Iovec
	total int64 // bytes to transfer
	done  int64 // bytes transferred so far
	start time.Duration
	stage uint8
	dsync bool // the write is sent with RWF_DSYNC
}

// asyncEngine runs the operations of fdDisk started with Start: on an
// io_uring, or on syncWorkers goroutines. All of its state is under mu;
// system calls are made without it.
//
// Close (stop) marks the engine closed, so that Start refuses with
// ErrClosed, and waits until every started operation has called its Done;
// only then is the descriptor closed.
type asyncEngine struct {
	d       *fdDisk
	runSync func(io *AsyncIO) error // the disk's synchronous method for io
	path    IOPath
	reason  string

	mu       sync.Mutex
	idle     sync.Cond // broadcast when closed and inflight drops to 0
	work     sync.Cond // signals the sync workers
	closed   bool
	inflight int // started operations whose Done has not returned

	ring    *uring.Ring
	slots   []uslot
	free    []int32 // free slot indices
	waiting ioQueue // started while every slot was busy
	pending uint32  // published submissions no io_uring_enter took yet
	// efd is the eventfd the ring signals per completion, which nudge
	// also writes; the reaper reads it in the netpoller.
	efd        *os.File
	reaperEnd  chan struct{} // closed when the reaper returned
	stopReaper atomic.Bool
	nudged     atomic.Bool // the reaper was nudged and has not started its round yet
	one        [8]byte     // the eventfd increment nudge writes (1); never changed

	syncQ       ioQueue // operations for the sync workers
	syncStarted bool
	syncWG      sync.WaitGroup
}

// ioQueue is a FIFO of operations in a ring buffer that grows when full
// and is reused, so steady-state queueing allocates nothing.
type ioQueue struct {
	buf        []*AsyncIO
	head, size int
}

func (q *ioQueue) push(io *AsyncIO) {
	if q.size == len(q.buf) {
		nb := make([]*AsyncIO, max(16, 2*len(q.buf)))
		for i := 0; i < q.size; i++ {
			nb[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = nb, 0
	}
	q.buf[(q.head+q.size)%len(q.buf)] = io
	q.size++
}

func (q *ioQueue) pop() *AsyncIO {
	if q.size == 0 {
		return nil
	}
	io := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) % len(q.buf)
	q.size--
	return io
}

// newAsyncEngine starts the engine of d: an io_uring unless noURing is set
// or the kernel refuses one, the sync path otherwise. It logs which path
// runs and why.
func newAsyncEngine(d *fdDisk, noURing bool, log *slog.Logger, runSync func(*AsyncIO) error) *asyncEngine {
	e := &asyncEngine{d: d, runSync: runSync, path: IOPathSync}
	e.idle.L = &e.mu
	e.work.L = &e.mu
	if log == nil {
		log = slog.Default()
	}
	switch {
	case noURing:
		e.reason = "io_uring turned off by the options"
	default:
		r, efd, err := newRing()
		if err != nil {
			e.reason = err.Error()
			break
		}
		e.ring, e.efd, e.path = r, efd, IOPathURing
		n := min(r.SQEntries(), r.CQEntries()/2)
		e.slots = make([]uslot, n)
		e.free = make([]int32, n)
		for i := range e.free {
			e.free[i] = int32(len(e.free) - 1 - i)
		}
		e.reaperEnd = make(chan struct{})
		binary.NativeEndian.PutUint64(e.one[:], 1)
		go e.reap()
	}
	if e.path == IOPathURing {
		log.Info("backstore: disk I/O path", "disk", d.name, "io_path", e.path.String(), "ring_entries", len(e.slots), "direct", d.direct)
	} else {
		log.Info("backstore: disk I/O path", "disk", d.name, "io_path", e.path.String(), "reason", e.reason, "direct", d.direct)
	}
	return e
}

// newRing sets up a ring and the eventfd its completions signal.
func newRing() (*uring.Ring, *os.File, error) {
	r, err := uring.New(ringEntries)
	if err != nil {
		return nil, nil, err
	}
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		r.Close()
		return nil, nil, fmt.Errorf("eventfd for io_uring completions: %w", err)
	}
	if err := r.RegisterEventfd(fd); err != nil {
		unix.Close(fd)
		r.Close()
		return nil, nil, err
	}
	// Non-blocking, so os.NewFile puts it in the netpoller: the reaper
	// parks without a thread.
	return r, os.NewFile(uintptr(fd), "io_uring-eventfd"), nil
}

// start is Start for d: it refuses what the synchronous method would
// refuse up front, then queues io.
func (e *asyncEngine) start(io *AsyncIO) error {
	d := e.d
	if io == nil || io.Done == nil {
		return d.stats.reject(fmt.Errorf("starting an operation on %s: no AsyncIO or no Done: %w", d.name, ErrUnsupported))
	}
	var total int64
	switch io.Op {
	case AsyncRead, AsyncWrite:
		total = vecLen(io.Bufs)
		op := OpRead
		if io.Op == AsyncWrite {
			op = OpWrite
		}
		if err := d.check(op, io.Off, total, io.Op == AsyncWrite); err != nil {
			return err
		}
		if !d.bufsOK(io.Bufs) {
			return d.stats.reject(ErrBufferAlignment)
		}
	case AsyncFlush:
	case AsyncDiscard, AsyncWriteZeroes:
		op := OpDiscard
		if io.Op == AsyncWriteZeroes {
			op = OpWriteZeroes
		}
		if err := d.check(op, io.Off, io.Len, true); err != nil {
			return err
		}
	default:
		return d.stats.reject(fmt.Errorf("starting %s on %s: %w", io.Op, d.name, ErrUnsupported))
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return d.stats.reject(ErrClosed)
	}
	e.inflight++
	if e.ring == nil || io.Op == AsyncDiscard || io.Op == AsyncWriteZeroes {
		e.syncQ.push(io)
		e.startSyncLocked()
		e.mu.Unlock()
		return nil
	}
	if len(e.free) == 0 {
		e.waiting.push(io)
		e.mu.Unlock()
		return nil
	}
	e.beginLocked(io, total)
	e.mu.Unlock()
	e.nudge()
	return nil
}

// nudge wakes the reaper to submit what Start published. Only the first
// nudge of a reaper round writes the eventfd: the operations a transport
// starts back to back (the commands of one receive batch) go to the
// kernel in one io_uring_enter, as fio submits its batches, instead of a
// system call each, and sequential ones can merge in the block layer's
// plug.
func (e *asyncEngine) nudge() {
	if e.nudged.CompareAndSwap(false, true) {
		if _, err := e.efd.Write(e.one[:]); err != nil {
			slog.Error("backstore: waking the io_uring reaper", "disk", e.d.name, "err", err)
		}
	}
}

// beginLocked puts io in a free slot and publishes its submission.
func (e *asyncEngine) beginLocked(io *AsyncIO, total int64) {
	i := e.free[len(e.free)-1]
	e.free = e.free[:len(e.free)-1]
	s := &e.slots[i]
	*s = uslot{io: io, iov: s.iov, total: total, start: e.d.stats.begin(), stage: stageRW}
	s.dsync = io.Op == AsyncWrite && io.Flags&FUA != 0 && !e.d.noDsync.Load()
	e.prepLocked(i)
}

// prepLocked publishes the next submission of slot i: the rest of its
// transfer, its flush, or its fdatasync stage.
func (e *asyncEngine) prepLocked(i int32) {
	s := &e.slots[i]
	sqe := e.ring.GetSQE()
	if sqe == nil {
		// Cannot happen: no more operations than submission entries
		// are in the ring. Fail loudly rather than corrupt the ring.
		panic("backstore: io_uring submission ring full")
	}
	sqe.UserData = uint64(i)
	fd := e.d.fd
	io := s.io
	switch {
	case io.Op == AsyncFlush || s.stage == stageFsync:
		sqe.PrepFsync(fd, uring.FsyncDatasync)
	case s.total == 0:
		sqe.PrepNop() // an empty transfer still completes on the reaper
	default:
		op1, opv := uring.OpRead, uring.OpReadv
		var rwf uint32
		if io.Op == AsyncWrite {
			op1, opv = uring.OpWrite, uring.OpWritev
			if s.dsync {
				rwf = unix.RWF_DSYNC
			}
		}
		// Skip what is done already.
		bufs, skip := io.Bufs, s.done
		for len(bufs) > 0 && skip >= int64(len(bufs[0])) {
			skip -= int64(len(bufs[0]))
			bufs = bufs[1:]
		}
		off := io.Off + s.done
		if len(bufs) == 1 || s.total-s.done == int64(len(bufs[0]))-skip {
			b := bufs[0][skip:]
			sqe.PrepRW(op1, fd, unsafe.Pointer(unsafe.SliceData(b)), uint32(len(b)), off, rwf)
			break
		}
		n := min(len(bufs), iovMax)
		if cap(s.iov) < n {
			s.iov = make([]unix.Iovec, n)
		}
		iov := s.iov[:0]
		for k, b := range bufs[:n] {
			if k == 0 {
				b = b[skip:]
			}
			if len(b) == 0 {
				continue
			}
			v := unix.Iovec{Base: unsafe.SliceData(b)}
			v.SetLen(len(b))
			iov = append(iov, v)
		}
		sqe.PrepRW(opv, fd, unsafe.Pointer(unsafe.SliceData(iov)), uint32(len(iov)), off, rwf)
	}
	e.ring.Flush()
	e.pending++
}

// enter submits n published entries and returns how many the kernel did
// not take: it retries EINTR, and gives up for now on EAGAIN or EBUSY
// (the kernel lacks memory, or holds overflowed completions), after a
// short sleep, so that the reaper drains the completion ring before it
// tries the rest again.
func (e *asyncEngine) enter(n uint32) uint32 {
	for n > 0 {
		k, err := e.ring.Enter(n, 0, false)
		switch err {
		case nil:
			n -= min32(uint32(k), n)
		case unix.EINTR:
		case unix.EAGAIN, unix.EBUSY:
			time.Sleep(10 * time.Microsecond)
			return n
		default:
			// Not seen for a valid ring; keep trying rather than lose
			// operations.
			slog.Error("backstore: io_uring_enter failed", "disk", e.d.name, "err", err)
			time.Sleep(time.Millisecond)
		}
	}
	return 0
}

func min32(a, b uint32) uint32 {
	if a < b {
		return a
	}
	return b
}

// reap is the ring's goroutine, the only one that calls io_uring_enter:
// each round it submits what Start and the completions published, handles
// every completion in the ring, and repeats until both are done; then it
// sleeps reading the eventfd (parked in the netpoller, without a thread),
// which the kernel signals per completion and nudge writes. It returns
// once stop asks it to, with nothing in flight.
//
// One submitter batches: the operations started while a round runs, or
// before the reaper's goroutine gets to run, go in one system call.
func (e *asyncEngine) reap() {
	defer close(e.reaperEnd)
	var buf [8]byte
	for {
		// Before taking the submissions: a Start after this nudges again.
		e.nudged.Store(false)
		for {
			e.mu.Lock()
			n := e.pending
			e.pending = 0
			e.mu.Unlock()
			if n > 0 {
				if left := e.enter(n); left > 0 {
					e.mu.Lock()
					e.pending += left
					e.mu.Unlock()
				}
			}
			if e.ring.Overflowed() {
				// Completions the kernel held back (cannot happen with
				// the slot bound, handled all the same).
				e.ring.Enter(0, 0, true)
			}
			a, b := e.ring.Peek()
			if len(a)+len(b) == 0 {
				e.mu.Lock()
				more := e.pending > 0
				e.mu.Unlock()
				if more {
					continue
				}
				break
			}
			// The slots were filled under mu before their submission;
			// taking it orders those writes before the reads here for
			// the race detector too (the kernel orders them anyway).
			e.mu.Lock()
			e.mu.Unlock() //nolint:staticcheck // an empty critical section on purpose
			for _, c := range a {
				e.complete(c)
			}
			for _, c := range b {
				e.complete(c)
			}
			e.ring.Advance(uint32(len(a) + len(b)))
		}
		if e.stopReaper.Load() {
			return
		}
		if _, err := e.efd.Read(buf[:]); err != nil {
			slog.Error("backstore: reading the io_uring eventfd", "disk", e.d.name, "err", err)
			time.Sleep(time.Millisecond)
		}
	}
}

// complete handles one completion: a transfer that is not finished (short,
// or interrupted) is resubmitted from where it stopped; otherwise the slot
// is freed and the operation's Done called.
func (e *asyncEngine) complete(c uring.CQE) {
	if c.UserData >= uint64(len(e.slots)) {
		return // not ours: nothing else submits; ignored
	}
	i := int32(c.UserData)
	s := &e.slots[i]
	io := s.io
	err := e.result(s, c.Res)
	if err == errAgain {
		e.mu.Lock()
		e.prepLocked(i)
		e.mu.Unlock()
		return
	}
	d := e.d
	// The error the synchronous method returns, and its counters.
	switch io.Op {
	case AsyncRead:
		d.stats.end(&d.stats.read, s.total, s.start, err)
		if err != nil {
			err = rwError("reading", s.total, len(io.Bufs), io.Off, d.name, err)
		}
	case AsyncWrite:
		d.doneWrite(s.total, s.start, io.Flags, err)
		if err != nil {
			err = rwError("writing", s.total, len(io.Bufs), io.Off, d.name, err)
		}
	case AsyncFlush:
		d.stats.end(&d.stats.flush, 0, s.start, err)
		if err != nil {
			err = fmt.Errorf("flushing %s: %w", d.name, err)
		}
	}
	io.Err = err
	e.mu.Lock()
	s.io = nil
	e.free = append(e.free, i)
	if next := e.waiting.pop(); next != nil {
		e.beginLocked(next, vecLen(next.Bufs))
	}
	e.mu.Unlock()
	io.Batch = nil
	io.Done(io)
	e.finished()
}

// errAgain tells complete to resubmit the slot's next step.
var errAgain = errors.New("again")

// result maps a completion's result to the slot's next step: errAgain to
// resubmit (the rest of a short transfer, an EINTR or EAGAIN, the
// fdatasync of a FUA write), nil when the operation is done, or the error
// the synchronous call would have returned.
func (e *asyncEngine) result(s *uslot, res int32) error {
	io := s.io
	if res < 0 {
		errno := unix.Errno(-res)
		switch {
		case errno == unix.EINTR || errno == unix.EAGAIN:
			return errAgain
		case s.dsync && (errno == unix.EOPNOTSUPP || errno == unix.ENOSYS):
			// No RWF_DSYNC here: a plain write, then fdatasync, as
			// the synchronous path falls back.
			e.d.noDsync.Store(true)
			s.dsync = false
			return errAgain
		}
		return errno
	}
	if s.stage == stageFsync || io.Op == AsyncFlush {
		return nil
	}
	return stepRW(s, int64(res), io.Op == AsyncWrite, io.Flags&FUA != 0)
}

// stepRW accounts n more bytes of a read or write and says what follows:
// nil when done, errAgain for the rest or the fdatasync of a FUA write
// sent without RWF_DSYNC, or the synchronous path's error for a transfer
// that made no progress (end of file or device).
func stepRW(s *uslot, n int64, write, fua bool) error {
	left := s.total - s.done
	if n > left {
		n = left // the kernel never does this; do not run past the buffers
	}
	if n == 0 && left > 0 {
		if write {
			return io.ErrShortWrite
		}
		return io.ErrUnexpectedEOF
	}
	s.done += n
	if s.done < s.total {
		return errAgain
	}
	if write && fua && !s.dsync && s.stage == stageRW {
		s.stage = stageFsync
		return errAgain
	}
	return nil
}

func rwError(verb string, n int64, nbufs int, off int64, name string, err error) error {
	if nbufs == 1 {
		return fmt.Errorf("%s %d bytes at offset %d of %s: %w", verb, n, off, name, err)
	}
	return fmt.Errorf("%s %d bytes in %d buffers at offset %d of %s: %w", verb, n, nbufs, off, name, err)
}

// finished takes an operation out of flight after its Done returned.
func (e *asyncEngine) finished() {
	e.mu.Lock()
	e.inflight--
	if e.closed && e.inflight == 0 {
		e.idle.Broadcast()
	}
	e.mu.Unlock()
}

// startSyncLocked starts the sync workers on first use and wakes one.
func (e *asyncEngine) startSyncLocked() {
	if !e.syncStarted {
		e.syncStarted = true
		e.syncWG.Add(syncWorkers)
		for range syncWorkers {
			go e.syncWorker()
		}
	}
	e.work.Signal()
}

// syncWorker runs queued operations with the disk's synchronous methods
// until the engine is closed and the queue empty.
func (e *asyncEngine) syncWorker() {
	defer e.syncWG.Done()
	e.mu.Lock()
	for {
		io := e.syncQ.pop()
		if io == nil {
			if e.closed {
				e.mu.Unlock()
				return
			}
			e.work.Wait()
			continue
		}
		e.mu.Unlock()
		io.Err, io.Batch = e.runSync(io), nil
		io.Done(io)
		e.finished()
		e.mu.Lock()
	}
}

// stop refuses new operations, waits for those in flight (their Done
// included, so it must not be called from a Done), then stops the reaper
// and the workers and closes the ring. It reports whether the engine was
// open.
func (e *asyncEngine) stop() bool {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return false
	}
	e.closed = true
	for e.inflight > 0 {
		e.idle.Wait()
	}
	e.work.Broadcast()
	e.mu.Unlock()
	if e.ring != nil {
		// Wake the reaper, which sees the engine stopped.
		e.stopReaper.Store(true)
		one := [8]byte{1}
		if _, err := e.efd.Write(one[:]); err != nil {
			slog.Error("backstore: waking the io_uring reaper", "disk", e.d.name, "err", err)
		}
		<-e.reaperEnd
		e.ring.Close()
		e.efd.Close()
	}
	e.syncWG.Wait()
	return true
}

// runSyncIO runs io with d's synchronous methods; discard and zeroes are
// the disk's own (File and Block differ).
func (d *fdDisk) runSyncIO(io *AsyncIO, discard func(off, n int64) error, zeroes func(off, n int64, flags WriteFlags) error) error {
	switch io.Op {
	case AsyncRead:
		if len(io.Bufs) == 1 {
			return d.readAt(io.Bufs[0], io.Off)
		}
		return d.readvAt(io.Bufs, io.Off)
	case AsyncWrite:
		if len(io.Bufs) == 1 {
			return d.writeAt(io.Bufs[0], io.Off, io.Flags)
		}
		return d.writevAt(io.Bufs, io.Off, io.Flags)
	case AsyncFlush:
		return d.flush()
	case AsyncDiscard:
		return discard(io.Off, io.Len)
	case AsyncWriteZeroes:
		return zeroes(io.Off, io.Len, io.Flags)
	}
	return fmt.Errorf("%s on %s: %w", io.Op, d.name, ErrUnsupported)
}
