//go:build verbs

package verbs

/*
#include "cverbs.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/rdisk/rdisk/rdma"
)

const (
	cqBatch    = 64 // completions taken per ibv_poll_cq call
	pollBudget = 64 // empty polls in Wait before arming the CQ and sleeping
)

type cq struct {
	p  *Provider
	cq *C.struct_ibv_cq
	ch *C.struct_ibv_comp_channel
	f  *os.File // a dup of the channel's fd, on Go's netpoller

	mu       sync.Mutex
	buf      []C.struct_rd_wc // C memory
	pos, n   int
	soft     []rdma.WC // converted completions not yet returned
	softPos  int
	closed   atomic.Bool
	qpCache  *qp
	numCache uint32
}

// CreateCQ implements rdma.Provider: a CQ with its own completion channel.
func (p *Provider) CreateCQ(size int) (rdma.CQ, error) {
	if size <= 0 {
		size = 1024
	}
	if p.dev.maxCQE > 0 && size > p.dev.maxCQE {
		size = p.dev.maxCQE
	}
	ch, err := C.ibv_create_comp_channel(p.dev.ctx)
	if ch == nil {
		return nil, fmt.Errorf("verbs: ibv_create_comp_channel: %v", err)
	}
	if C.rd_nonblock(ch.fd) != 0 {
		C.ibv_destroy_comp_channel(ch)
		return nil, errors.New("verbs: cannot make the completion channel non-blocking")
	}
	h, err := C.ibv_create_cq(p.dev.ctx, C.int(size), nil, ch, 0)
	if h == nil {
		C.ibv_destroy_comp_channel(ch)
		return nil, fmt.Errorf("verbs: ibv_create_cq(%d): %v", size, err)
	}
	fd, err := syscall.Dup(int(ch.fd))
	if err != nil {
		C.ibv_destroy_cq(h)
		C.ibv_destroy_comp_channel(ch)
		return nil, fmt.Errorf("verbs: dup: %v", err)
	}
	syscall.CloseOnExec(fd)
	c := &cq{p: p, cq: h, ch: ch, f: os.NewFile(uintptr(fd), "verbs-cq")}
	c.buf = unsafe.Slice((*C.struct_rd_wc)(C.calloc(cqBatch, C.size_t(unsafe.Sizeof(C.struct_rd_wc{})))), cqBatch)
	return c, nil
}

// fill polls the device into the buffer; c.mu held.
func (c *cq) fill() {
	c.pos = 0
	c.n = 0
	if r := C.rd_poll(c.cq, unsafe.SliceData(c.buf), cqBatch); r > 0 {
		c.n = int(r)
	}
}

func (c *cq) lookup(num uint32) *qp {
	if c.qpCache != nil && c.numCache == num {
		return c.qpCache
	}
	d := c.p.dev
	d.mu.RLock()
	q := d.qps[num]
	d.mu.RUnlock()
	c.qpCache, c.numCache = q, num
	return q
}

// Poll implements rdma.CQ: one ibv_poll_cq per batch of up to 64.
func (c *cq) Poll(wcs []rdma.WC) int {
	if c.closed.Load() {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := 0
	for k < len(wcs) {
		if c.softPos < len(c.soft) {
			m := copy(wcs[k:], c.soft[c.softPos:])
			k += m
			c.softPos += m
			if c.softPos < len(c.soft) {
				break
			}
			continue
		}
		c.soft, c.softPos = c.soft[:0], 0
		if c.pos == c.n {
			c.fill()
			if c.n == 0 {
				break
			}
		}
		w := &c.buf[c.pos]
		c.pos++
		q := c.lookup(uint32(w.qp_num))
		if q == nil {
			continue // a QP closed with completions still queued
		}
		q.complete(c, w)
	}
	return k
}

// ready reports whether a completion is buffered or on the device.
func (c *cq) ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pos < c.n || c.softPos < len(c.soft) {
		return true
	}
	c.fill()
	return c.n > 0
}

// Wait implements rdma.CQ: busy-polls pollBudget times (and for
// Config.PollSpin more when set), then arms
// the CQ (ibv_req_notify_cq), checks once more and sleeps on the
// completion channel in Go's netpoller.
func (c *cq) Wait(ctx context.Context) error {
	var spinStart time.Time
	pollSpin := c.p.pollSpin
	for i := 0; ; i++ {
		if i == pollBudget {
			if pollSpin == 0 {
				break
			}
			spinStart = time.Now()
		} else if i > pollBudget && i%16 == 0 && time.Since(spinStart) >= pollSpin {
			break
		}
		if c.closed.Load() {
			return rdma.ErrClosed
		}
		if c.ready() {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		runtime.Gosched()
	}
	rc, err := c.f.SyscallConn()
	if err != nil {
		return rdma.ErrClosed
	}
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() { c.f.SetReadDeadline(time.Unix(1, 0)) })
		defer stop()
	}
	for {
		if c.closed.Load() {
			return rdma.ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		C.rd_req_notify(c.cq)
		if c.ready() {
			return nil
		}
		got := false
		err := rc.Read(func(uintptr) bool {
			if C.rd_get_cq_events(c.ch, c.cq) > 0 {
				got = true
				return true
			}
			return false
		})
		if c.closed.Load() {
			return rdma.ErrClosed
		}
		if err != nil {
			if ctx.Err() != nil {
				c.f.SetReadDeadline(time.Time{})
				return ctx.Err()
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				c.f.SetReadDeadline(time.Time{})
				continue
			}
			return rdma.ErrClosed
		}
		_ = got
	}
}

// Close implements rdma.CQ.
func (c *cq) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.f.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	rc := C.ibv_destroy_cq(c.cq)
	C.ibv_destroy_comp_channel(c.ch)
	C.free(unsafe.Pointer(unsafe.SliceData(c.buf)))
	c.buf, c.pos, c.n = nil, 0, 0
	if rc != 0 {
		return fmt.Errorf("verbs: ibv_destroy_cq: %v", syscall.Errno(rc))
	}
	return nil
}

// reap moves the device's completions into the CQ's queue without
// returning any, so that the send queue slots of unsignaled work requests
// are retired behind the completion of the WR the provider signaled for
// them (see PostSend) even when the caller never polls this CQ, as rdma.QP
// lets it: it posts unsignaled Sends and waits only for receives. A
// waiter is woken if reported completions were queued.
func (c *cq) reap() {
	if c.closed.Load() {
		return
	}
	c.mu.Lock()
	if c.softPos == len(c.soft) {
		c.soft, c.softPos = c.soft[:0], 0
	}
	before := len(c.soft)
	for {
		if c.pos == c.n {
			c.fill()
			if c.n == 0 {
				break
			}
		}
		w := &c.buf[c.pos]
		c.pos++
		if q := c.lookup(uint32(w.qp_num)); q != nil {
			q.complete(c, w)
		}
	}
	added := len(c.soft) > before
	c.mu.Unlock()
	if added {
		c.f.SetReadDeadline(time.Unix(1, 0))
	}
}

// kick reports q's send completions that are ready without the device
// (an emulated local invalidate) and wakes a waiter.
func (c *cq) kick(q *qp) {
	c.mu.Lock()
	q.sqMu.Lock()
	q.emitLocked(c)
	q.sqMu.Unlock()
	n := len(c.soft) - c.softPos
	c.mu.Unlock()
	if n > 0 {
		c.f.SetReadDeadline(time.Unix(1, 0))
	}
}
