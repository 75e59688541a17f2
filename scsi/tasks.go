package scsi

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
)

// The task set of a logical unit: the commands in flight, kept on intrusive
// lists (the links live in the transport's Command, so tracking allocates
// nothing), sharded by tag to spread the lock. Task management walks the
// lists to abort commands; a command checks its abort flag before starting
// backend I/O and when it leaves.
const taskShards = 8

type taskShard struct {
	mu   sync.Mutex
	head *Command
	_    [40]byte // keep shards on separate cache lines
}

type taskSet struct {
	shards [taskShards]taskShard
	gate   orderGate
	ranges *rangeLocks // the LU's, woken on aborts

	// notify is closed (and replaced) when an aborted command leaves the
	// task set; task management waits on it.
	notifyMu sync.Mutex
	notify   chan struct{}
}

func (ts *taskSet) init() {
	ts.gate.cond.L = &ts.gate.mu
	ts.notify = make(chan struct{})
}

func (ts *taskSet) add(c *Command) {
	sh := &ts.shards[c.Tag%taskShards]
	c.shard = sh
	sh.mu.Lock()
	c.prev = nil
	c.next = sh.head
	if sh.head != nil {
		sh.head.prev = c
	}
	sh.head = c
	sh.mu.Unlock()
}

func (ts *taskSet) remove(c *Command) {
	sh := c.shard
	sh.mu.Lock()
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		sh.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	}
	c.next, c.prev, c.shard = nil, nil, nil
	sh.mu.Unlock()
	if c.aborted() {
		ts.notifyMu.Lock()
		close(ts.notify)
		ts.notify = make(chan struct{})
		ts.notifyMu.Unlock()
	}
}

// abort marks the commands for which match returns true as aborted: mode
// gives abortSilent or abortStatus for each. It returns how many it marked
// and wakes commands waiting in the task set gates.
func (ts *taskSet) abort(match func(*Command) bool, mode func(*Command) uint32) int {
	n := 0
	for i := range ts.shards {
		sh := &ts.shards[i]
		sh.mu.Lock()
		for c := sh.head; c != nil; c = c.next {
			if match(c) {
				c.abort.CompareAndSwap(0, mode(c))
				n++
			}
		}
		sh.mu.Unlock()
	}
	if n > 0 {
		ts.gate.wake()
		if ts.ranges != nil {
			ts.ranges.wake() // an exclusive locker waiting may be aborted
		}
	}
	return n
}

// find reports whether a command matching match is in the task set.
func (ts *taskSet) find(match func(*Command) bool) bool {
	for i := range ts.shards {
		sh := &ts.shards[i]
		sh.mu.Lock()
		for c := sh.head; c != nil; c = c.next {
			if match(c) {
				sh.mu.Unlock()
				return true
			}
		}
		sh.mu.Unlock()
	}
	return false
}

// waitAborted waits until no aborted command matching match is left in the
// task set, or until ctx (which may be nil) is done; it reports whether all
// left.
func (ts *taskSet) waitAborted(ctx context.Context, match func(*Command) bool) bool {
	for {
		ts.notifyMu.Lock()
		ch := ts.notify
		ts.notifyMu.Unlock()
		if !ts.find(func(c *Command) bool { return c.aborted() && match(c) }) {
			return true
		}
		if ctx == nil {
			<-ch
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// orderGate implements the task attributes. SIMPLE commands run
// concurrently; an ORDERED command waits for every command that entered
// before it and holds back every command that enters after it until it
// completes; HEAD OF QUEUE commands run at once. While no ORDERED command
// is pending, SIMPLE commands pass with two atomic operations.
type orderGate struct {
	barriers atomic.Int32 // ORDERED commands pending
	fast     atomic.Int64 // commands admitted on the fast path

	mu         sync.Mutex
	cond       sync.Cond
	ticket     uint64
	slowActive int
	ordered    []uint64 // tickets of pending ORDERED commands, increasing
	waiting    []uint64 // tickets of SIMPLE commands waiting, increasing
}

type gatePass uint8

const (
	passAborted gatePass = iota
	passFast
	passSlow
	passOrdered
)

func (g *orderGate) enter(c *Command) gatePass {
	switch c.Attr {
	case AttrHeadOfQueue:
		g.fast.Add(1)
		return passFast
	case AttrOrdered:
		g.barriers.Add(1)
		g.mu.Lock()
		t := g.ticket
		g.ticket++
		g.ordered = append(g.ordered, t)
		for !c.aborted() && !(g.ordered[0] == t && g.fast.Load() == 0 && g.slowActive == 0 && (len(g.waiting) == 0 || g.waiting[0] > t)) {
			g.cond.Wait()
		}
		if c.aborted() {
			g.ordered = slices.DeleteFunc(g.ordered, func(x uint64) bool { return x == t })
			g.barriers.Add(-1)
			g.cond.Broadcast()
			g.mu.Unlock()
			return passAborted
		}
		g.mu.Unlock()
		return passOrdered
	}
	if g.barriers.Load() == 0 {
		g.fast.Add(1)
		if g.barriers.Load() == 0 {
			return passFast
		}
		g.leave(passFast)
	}
	g.mu.Lock()
	t := g.ticket
	g.ticket++
	g.waiting = append(g.waiting, t)
	for !c.aborted() && !(len(g.ordered) == 0 || g.ordered[0] > t) {
		g.cond.Wait()
	}
	g.waiting = slices.DeleteFunc(g.waiting, func(x uint64) bool { return x == t })
	if c.aborted() {
		g.cond.Broadcast()
		g.mu.Unlock()
		return passAborted
	}
	g.slowActive++
	g.mu.Unlock()
	return passSlow
}

func (g *orderGate) leave(p gatePass) {
	switch p {
	case passFast:
		if g.fast.Add(-1) == 0 && g.barriers.Load() > 0 {
			g.wake()
		}
	case passSlow:
		g.mu.Lock()
		g.slowActive--
		g.cond.Broadcast()
		g.mu.Unlock()
	case passOrdered:
		g.mu.Lock()
		g.ordered = slices.Delete(g.ordered, 0, 1)
		g.barriers.Add(-1)
		g.cond.Broadcast()
		g.mu.Unlock()
	}
}

func (g *orderGate) wake() {
	g.mu.Lock()
	g.cond.Broadcast()
	g.mu.Unlock()
}
