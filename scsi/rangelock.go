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
type rangeLocks struct {
	excl atomic.Int32 // exclusive locks held or wanted
	fast atomic.Int64 // shared locks taken on the fast path

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

// lockExcl takes an exclusive lock on [start, end). It returns lockNone
// when c was aborted while waiting.
func (r *rangeLocks) lockExcl(c *Command, start, end uint64) lockMode {
	r.excl.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.fast.Load() > 0 || r.overlaps(start, end, false) {
		if c.aborted() {
			r.excl.Add(-1)
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
