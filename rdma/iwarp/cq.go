package iwarp

import (
	"context"
	"fmt"
	"sync"

	"github.com/rdisk/rdisk/rdma"
)

// cq is a completion queue: a ring of completions guarded by a mutex, and a
// one-slot channel that wakes a waiter. The ring starts small and doubles,
// up to the size asked for, when a completion finds it full: it follows
// the completions the consumer lets pile up, not what could.
type cq struct {
	mu     sync.Mutex
	ring   []rdma.WC
	size   int // capacity asked for
	head   int // next to poll
	n      int // completions held
	closed bool
	notify chan struct{}
	done   chan struct{}
}

// CreateCQ implements rdma.Provider.
func (p *Provider) CreateCQ(size int) (rdma.CQ, error) {
	if size <= 0 {
		return nil, fmt.Errorf("iwarp: creating CQ: bad size %d", size)
	}
	return &cq{ring: make([]rdma.WC, min(size, cqStart)), size: size, notify: make(chan struct{}, 1), done: make(chan struct{})}, nil
}

// cqStart is the ring's first capacity.
const cqStart = 16

// push adds a completion. The caller sized the CQ for every WR that can be
// outstanding; a completion that finds it full is dropped.
func (c *cq) push(wc *rdma.WC) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	if c.n == len(c.ring) {
		if len(c.ring) == c.size {
			c.mu.Unlock()
			return
		}
		c.grow()
	}
	c.ring[(c.head+c.n)%len(c.ring)] = *wc
	c.n++
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// grow doubles the full ring (up to size), keeping the completions in
// order. Caller holds mu.
func (c *cq) grow() {
	r := make([]rdma.WC, min(2*len(c.ring), c.size))
	k := copy(r, c.ring[c.head:])
	copy(r[k:], c.ring[:c.head])
	c.ring, c.head = r, 0
}

func (c *cq) Poll(wcs []rdma.WC) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := 0
	for k < len(wcs) && c.n > 0 {
		wcs[k] = c.ring[c.head]
		c.ring[c.head] = rdma.WC{}
		c.head = (c.head + 1) % len(c.ring)
		c.n--
		k++
	}
	return k
}

func (c *cq) Wait(ctx context.Context) error {
	for {
		c.mu.Lock()
		n, closed := c.n, c.closed
		c.mu.Unlock()
		if n > 0 {
			return nil
		}
		if closed {
			return rdma.ErrClosed
		}
		select {
		case <-c.notify:
		case <-c.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *cq) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		close(c.done)
	}
	return nil
}
