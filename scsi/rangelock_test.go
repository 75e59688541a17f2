package scsi

import (
	"testing"
	"time"
)

func TestRangeLocks(t *testing.T) {
	t.Parallel()
	var r rangeLocks
	r.init()
	a, b, c, d := &Command{}, &Command{}, &Command{}, &Command{}
	// Fast path while nothing is exclusive.
	if m := r.lockShared(a, 0, 10); m != lockFast {
		t.Fatalf("shared lock: %v", m)
	}
	// An exclusive locker waits for the fast-path holders to drain.
	got := make(chan lockMode)
	go func() { got <- r.lockExcl(b, 5, 8) }()
	waitFor(t, func() bool { return r.excl.Load() == 1 })
	select {
	case <-got:
		t.Fatal("exclusive lock taken over a fast-path shared lock")
	case <-time.After(10 * time.Millisecond):
	}
	r.unlock(a, lockFast)
	if m := <-got; m != lockExcl {
		t.Fatalf("exclusive lock: %v", m)
	}
	// A disjoint shared lock proceeds on the slow path; an overlapping
	// one waits for the exclusive holder.
	if m := r.lockShared(c, 8, 20); m != lockShared {
		t.Fatalf("disjoint shared lock: %v", m)
	}
	go func() { got <- r.lockShared(d, 0, 6) }()
	select {
	case m := <-got:
		t.Fatalf("overlapping shared lock taken: %v", m)
	case <-time.After(10 * time.Millisecond):
	}
	r.unlock(b, lockExcl)
	if m := <-got; m != lockShared {
		t.Fatalf("shared lock after release: %v", m)
	}
	// An exclusive locker overlapping a slow shared lock is aborted while
	// waiting.
	e := &Command{}
	go func() { got <- r.lockExcl(e, 0, 100) }()
	waitFor(t, func() bool { return r.excl.Load() == 1 })
	e.abort.Store(abortSilent)
	r.wake()
	if m := <-got; m != lockNone {
		t.Fatalf("aborted exclusive lock: %v", m)
	}
	r.unlock(c, lockShared)
	r.unlock(d, lockShared)
	if r.excl.Load() != 0 || r.fast.Load() != 0 || len(r.held) != 0 {
		t.Errorf("locks not idle: %d %d %v", r.excl.Load(), r.fast.Load(), r.held)
	}
	// Back to the fast path.
	if m := r.lockShared(a, 0, 1); m != lockFast {
		t.Fatalf("shared lock: %v", m)
	}
	r.unlock(a, lockFast)
}
