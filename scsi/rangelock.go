package scsi

import (
	"slices"
	"sync"
	"sync/atomic"
)

// rangeLocks make COMPARE AND WRITE and ORWRITE atomic against every other
// writer of the same blocks. Writers take a shared lock on their range,
// those two commands an exclusive one. While no exclusive lock is held or
// wanted, shared locks are two atomic operations (the fast path); an
// exclusive locker first waits for the fast-path writers to drain, and
// while it holds or wants its lock, writers register their ranges in a
// table so that only overlapping ones wait.
//
// Reads that answer from the disk's own memory (Command.Views) hold it
// until the transport has sent the data, after Execute returned: a wait
// that depends on the transport's send completions. They are counted in
// views, apart from the locks, and an exclusive locker drains them in a
// phase of its own, before it blocks anyone: it first raises intent, which
// makes new reads copy instead (under the ordinary shared lock, which does
// not wait while only intent is raised), waits for views to reach zero,
// and only then takes the exclusive lock as above. So a goroutine that
// must run for views to drain (the transport's completion loop) never
// waits behind an exclusive locker that waits for views: the locker's
// first phase makes no one wait, and its second starts only when no view
// is left and none can be taken. Exclusive lockers themselves must not run
// on such a goroutine (see Exclusive).
type rangeLocks struct {
	excl   atomic.Int32 // exclusive locks held or wanted (second phase)
	fast   atomic.Int64 // shared locks taken on the fast path
	intent atomic.Int32 // exclusive lockers from their first phase until unlock
	_      [48]byte
	views  atomic.Int64 // reads holding disk memory (tryView)

	mu   sync.Mutex
	cond sync.Cond
	held []heldRange
}

type heldRange struct {
	start, end uint64 // [start, end) in blocks
	excl       bool
	owner      *Command
}

// lockMode records how a lock was taken, for unlock.
type lockMode uint8

const (
	lockNone lockMode = iota
	lockFast
	lockShared
	lockExcl
)

func (r *rangeLocks) init() {
	r.cond.L = &r.mu
	r.held = make([]heldRange, 0, 16)
}

func (r *rangeLocks) overlaps(start, end uint64, exclOnly bool) bool {
	for _, h := range r.held {
		if (h.excl || !exclOnly) && h.start < end && start < h.end {
			return true
		}
	}
	return false
}

// lockShared takes a shared lock on [start, end). It returns lockNone when
// c was aborted while waiting.
func (r *rangeLocks) lockShared(c *Command, start, end uint64) lockMode {
	if r.excl.Load() == 0 {
		r.fast.Add(1)
		if r.excl.Load() == 0 {
			return lockFast
		}
		r.unlock(c, lockFast)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.overlaps(start, end, true) {
		if c.aborted() {
			return lockNone
		}
		r.cond.Wait()
	}
	r.held = append(r.held, heldRange{start, end, false, c})
	return lockShared
}

// tryView registers a read that will hold disk memory until unview. It
// fails, registering nothing, while an exclusive locker wants or holds a
// lock: the read copies instead. Two atomic operations, as the fast path.
func (r *rangeLocks) tryView() bool {
	r.views.Add(1)
	if r.intent.Load() == 0 {
		return true
	}
	r.unview()
	return false
}

// unview ends a tryView.
func (r *rangeLocks) unview() {
	if r.views.Add(-1) == 0 && r.intent.Load() > 0 {
		r.wake()
	}
}

// lockExcl takes an exclusive lock on [start, end). It returns lockNone
// when c was aborted while waiting.
func (r *rangeLocks) lockExcl(c *Command, start, end uint64) lockMode {
	r.intent.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	// First phase: the reads holding disk memory drain; no one waits
	// for us meanwhile.
	for r.views.Load() > 0 {
		if c.aborted() {
			r.intent.Add(-1)
			return lockNone
		}
		r.cond.Wait()
	}
	r.excl.Add(1)
	for r.fast.Load() > 0 || r.overlaps(start, end, false) {
		if c.aborted() {
			r.excl.Add(-1)
			r.intent.Add(-1)
			r.cond.Broadcast()
			return lockNone
		}
		r.cond.Wait()
	}
	r.held = append(r.held, heldRange{start, end, true, c})
	return lockExcl
}

func (r *rangeLocks) unlock(c *Command, m lockMode) {
	switch m {
	case lockFast:
		if r.fast.Add(-1) == 0 && r.excl.Load() > 0 {
			r.wake()
		}
	case lockShared, lockExcl:
		r.mu.Lock()
		r.held = slices.DeleteFunc(r.held, func(h heldRange) bool { return h.owner == c })
		if m == lockExcl {
			r.excl.Add(-1)
			r.intent.Add(-1)
		}
		r.cond.Broadcast()
		r.mu.Unlock()
	}
}

func (r *rangeLocks) wake() {
	r.mu.Lock()
	r.cond.Broadcast()
	r.mu.Unlock()
}

// Exclusive reports whether the command with CDB cdb takes an exclusive
// lock on its blocks (COMPARE AND WRITE, ORWRITE(16), WRITE ATOMIC(16)),
// and so may wait until the zero-copy reads of the LU in flight have been
// sent and released (Command.Views). A transport that sets Views must not
// run such a command on the goroutine whose send completions release
// views, which would wait for itself; a worker goroutine will do.
func Exclusive(cdb []byte) bool {
	if len(cdb) == 0 {
		return false
	}
	switch cdb[0] {
	case OpCompareAndWrite, OpOrWrite16, OpWriteAtomic16:
		return true
	}
	return false
}
