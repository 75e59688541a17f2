package initiator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/blockdev/blockdevtest"
)

// fakeTarget is a remote disk reached through fakeConns that tests can
// kill, and that can refuse connections (the target is down).
type fakeTarget struct {
	mem      *blockdevtest.Mem
	register bool // conns implement BufferRegistrar
	// access is the ANA state the conns report; id their DiskID.
	access atomic.Uint32
	id     atomic.Pointer[string]

	mu    sync.Mutex
	down  bool
	conns []*fakeConn
	dials int
}

func newFakeTarget(t testing.TB, cfg blockdevtest.MemConfig) *fakeTarget {
	t.Helper()
	m, err := blockdevtest.NewMem(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return &fakeTarget{mem: m}
}

var errRefused = errors.New("fake: connection refused")

func (ft *fakeTarget) dial(ctx context.Context, url string) (blockdev.Device, error) {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	ft.dials++
	if ft.down {
		return nil, errRefused
	}
	c := &fakeConn{t: ft, inflight: map[*blockdev.Request]bool{}, done: make(chan struct{})}
	ft.conns = append(ft.conns, c)
	if ft.register {
		return &registeringConn{c}, nil
	}
	return c, nil
}

// setDown stops (or restarts) the target: stopping kills every connection.
func (ft *fakeTarget) setDown(down bool) {
	ft.mu.Lock()
	ft.down = down
	conns := ft.conns
	if down {
		ft.conns = nil
	}
	ft.mu.Unlock()
	if down {
		for _, c := range conns {
			c.kill(fmt.Errorf("fake: connection reset: %w", blockdev.ErrClosed))
		}
	}
}

type fakeConn struct {
	t *fakeTarget

	mu       sync.Mutex
	dead     bool
	err      error
	inflight map[*blockdev.Request]bool
	done     chan struct{}
}

type fakeBuf struct {
	blockdev.Buffer
	c *fakeConn
}

func (c *fakeConn) Info() blockdev.Info { return c.t.mem.Info() }

func (c *fakeConn) AllocBuffer(n int) (blockdev.Buffer, error) {
	c.mu.Lock()
	dead := c.dead
	c.mu.Unlock()
	if dead {
		return nil, blockdev.ErrClosed
	}
	b, err := c.t.mem.AllocBuffer(n)
	if err != nil {
		return nil, err
	}
	return &fakeBuf{b, c}, nil
}

func (c *fakeConn) Done() <-chan struct{} { return c.done }

func (c *fakeConn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *fakeConn) Submit(r *blockdev.Request) error {
	info := c.Info()
	if err := blockdev.Check(&info, r); err != nil {
		return err
	}
	var inner blockdev.Buffer
	if r.Op == blockdev.OpRead || r.Op == blockdev.OpWrite {
		fb, ok := r.Buf.(*fakeBuf)
		if !ok || fb.c != c {
			return blockdev.ErrBuffer // a buffer of another connection
		}
		inner = fb.Buffer
	}
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return c.err
	}
	c.inflight[r] = true
	c.mu.Unlock()
	fwd := &blockdev.Request{Op: r.Op, Flags: r.Flags, Offset: r.Offset, Length: r.Length, Buf: inner, BufOff: r.BufOff, Queue: r.Queue}
	var plain []byte
	if pb, ok := inner.(*plainBuf); ok {
		// Registered caller memory: the fake Mem takes only its own
		// buffers, so copy through one.
		plain = pb.b[r.BufOff : r.BufOff+r.Length]
		tmp, _ := c.t.mem.AllocBuffer(r.Length)
		copy(tmp.Bytes(), plain)
		fwd.Buf, fwd.BufOff = tmp, 0
	}
	fwd.Done = func(f *blockdev.Request) {
		if plain != nil && f.Op == blockdev.OpRead && f.Err == nil {
			copy(plain, f.Buf.Bytes())
		}
		c.mu.Lock()
		if !c.inflight[r] {
			c.mu.Unlock()
			return // completed by kill
		}
		delete(c.inflight, r)
		c.mu.Unlock()
		r.Err, r.Issued, r.Completed = f.Err, f.Issued, f.Completed
		blockdev.Complete(r)
	}
	if err := c.t.mem.Submit(fwd); err != nil {
		c.mu.Lock()
		delete(c.inflight, r)
		c.mu.Unlock()
		return err
	}
	return nil
}

// kill drops the connection: requests in flight fail with err.
func (c *fakeConn) kill(err error) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.dead, c.err = true, err
	var reqs []*blockdev.Request
	for r := range c.inflight {
		reqs = append(reqs, r)
	}
	clear(c.inflight)
	close(c.done)
	c.mu.Unlock()
	for _, r := range reqs {
		r.Err = err
		blockdev.Complete(r)
	}
}

func (c *fakeConn) Close() error {
	c.kill(blockdev.ErrClosed)
	return nil
}

// registeringConn adds BufferRegistrar.
type registeringConn struct{ *fakeConn }

func (c *registeringConn) RegisterBuffer(mem []byte) (blockdev.Buffer, error) {
	return &fakeBuf{&plainBuf{mem}, c.fakeConn}, nil
}

// plainBuf is caller memory as a Buffer of the fake Mem — the Mem checks
// its own buffer type, so registered memory is copied through one.
type plainBuf struct{ b []byte }

func (p *plainBuf) Bytes() []byte  { return p.b }
func (p *plainBuf) Release() error { return nil }

// The conns report the target's access state and identity.
func (c *fakeConn) AccessState() blockdev.AccessState { return blockdev.AccessState(c.t.access.Load()) }

func (c *fakeConn) RefreshAccessState() (blockdev.AccessState, error) {
	c.mu.Lock()
	dead := c.dead
	c.mu.Unlock()
	if dead {
		return blockdev.AccessTransitioning, blockdev.ErrClosed
	}
	return c.AccessState(), nil
}

func (c *fakeConn) DiskID() string {
	if id := c.t.id.Load(); id != nil {
		return *id
	}
	return ""
}

func (ft *fakeTarget) setID(id string) { ft.id.Store(&id) }
