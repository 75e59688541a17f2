package iwarp

import (
	"context"
	"fmt"
	"sync"

	"github.com/rdisk/rdisk/rdma"
)

// cq is a completion queue: a ring of completions guarded by a mutex, and a
// one-slot channel that wakes a waiter.
type cq struct {
	mu     sync.Mutex
	ring   []rdma.WC
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
	return &cq{ring: make([]rdma.WC, size), notify: make(chan struct{}, 1), done: make(chan struct{})}, nil
}

// push adds a completion. The caller sized the CQ for every WR that can be
// outstanding; a completion that finds it full is dropped.
func (c *cq) push(wc *rdma.WC) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	if c.n == len(c.ring) {
		c.mu.Unlock()
		return
	}
	c.ring[(c.head+c.n)%len(c.ring)] = *wc
	c.n++
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
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
