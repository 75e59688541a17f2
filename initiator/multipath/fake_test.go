package multipath

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdisk/rdisk/blockdev"
)

// store is the shared disk behind the fake gateways.
type store struct {
	mu   sync.Mutex
	data []byte
}

func newStore(size int) *store { return &store{data: make([]byte, size)} }

// Fake path modes.
const (
	modeOK      = iota
	modePath    // requests fail with a *blockdev.PathError (ANA inaccessible)
	modeDown    // the connection is lost: requests fail with ErrClosed, Submit refuses
	modeHold    // requests wait until the mode changes
	modeIOError // requests fail with ErrIO
)

// fakePath is one gateway's device: it executes requests on the store,
// reports an access state, and can be made to fail. One goroutine
// executes its requests in order; it allocates nothing per request.
type fakePath struct {
	name     string
	st       *store
	info     blockdev.Info
	id       string
	register bool
	latency  time.Duration

	access     atomic.Uint32
	size       atomic.Int64 // a resize: the size Info reports, when set
	mode       atomic.Int32
	refreshErr atomic.Bool // RefreshAccessState fails while set (besides modeDown)
	refreshes  atomic.Int64
	ops        [blockdev.OpWriteZeroes + 1]atomic.Uint64
	submitted  atomic.Uint64

	slots  chan struct{}
	reqs   chan *blockdev.Request
	done   chan struct{}
	closed atomic.Bool
	mu     sync.RWMutex // Submit's push against Close
	wg     sync.WaitGroup
	gate   chan struct{} // modeHold: closed when the hold ends
	gateMu sync.Mutex
}

type fakeOpts struct {
	size, blockSize, queues, depth int
	id                             string
	register                       bool
	latency                        time.Duration
	access                         blockdev.AccessState
	caps                           blockdev.Caps
}

func newFake(t testing.TB, st *store, name string, o fakeOpts) *fakePath {
	if o.blockSize == 0 {
		o.blockSize = 512
	}
	if o.size == 0 {
		o.size = len(st.data)
	}
	if o.queues == 0 {
		o.queues = 2
	}
	if o.depth == 0 {
		o.depth = 16
	}
	if o.id == "" {
		o.id = "nqn.2026-11.io.rdisk:test/uuid-1"
	}
	if o.caps == 0 {
		o.caps = blockdev.CapFlush | blockdev.CapFUA | blockdev.CapDiscard | blockdev.CapWriteZeroes
	}
	f := &fakePath{name: name, st: st, id: o.id, register: o.register, latency: o.latency,
		info: blockdev.Info{Name: name, BlockSize: o.blockSize, Size: int64(o.size), Queues: o.queues, QueueDepth: o.depth,
			MaxTransfer: 128 << 10, MaxZeroes: int64(o.size), Caps: o.caps},
		slots: make(chan struct{}, o.queues*o.depth), reqs: make(chan *blockdev.Request, o.queues*o.depth),
		done: make(chan struct{}), gate: make(chan struct{})}
	f.access.Store(uint32(o.access))
	f.wg.Add(1)
	go f.run()
	t.Cleanup(func() { f.Close() })
	return f
}

// registeringFake adds BufferRegistrar.
type registeringFake struct{ *fakePath }

func (f registeringFake) RegisterBuffer(mem []byte) (blockdev.Buffer, error) {
	return &fakeBuf{b: mem, owner: f.fakePath}, nil
}

func (f *fakePath) dev() blockdev.Device {
	if f.register {
		return registeringFake{f}
	}
	return f
}

type fakeBuf struct {
	b        []byte
	owner    *fakePath
	released atomic.Bool
}

func (b *fakeBuf) Bytes() []byte { return b.b }
func (b *fakeBuf) Release() error {
	b.released.Store(true)
	return nil
}

func (f *fakePath) Info() blockdev.Info {
	in := f.info
	if s := f.size.Load(); s != 0 {
		in.Size = s
	}
	return in
}
func (f *fakePath) DiskID() string { return f.id }

func (f *fakePath) AllocBuffer(n int) (blockdev.Buffer, error) {
	if f.closed.Load() || f.mode.Load() == modeDown {
		return nil, blockdev.ErrClosed
	}
	return &fakeBuf{b: make([]byte, n), owner: f}, nil
}

func (f *fakePath) AccessState() blockdev.AccessState { return blockdev.AccessState(f.access.Load()) }

func (f *fakePath) RefreshAccessState() (blockdev.AccessState, error) {
	f.refreshes.Add(1)
	if f.mode.Load() == modeDown {
		return blockdev.AccessTransitioning, errors.New("fake: not connected")
	}
	if f.refreshErr.Load() {
		return f.AccessState(), errors.New("fake: refresh failed")
	}
	return f.AccessState(), nil
}

var errFakeIO = fmt.Errorf("fake: medium error: %w", blockdev.ErrIO)

func (f *fakePath) Submit(r *blockdev.Request) error {
	in := f.Info()
	if err := blockdev.Check(&in, r); err != nil {
		return err
	}
	if r.Op == blockdev.OpRead || r.Op == blockdev.OpWrite {
		b, ok := r.Buf.(*fakeBuf)
		if !ok || b.owner != f || b.released.Load() {
			return blockdev.ErrBuffer // a buffer of another path
		}
	}
	if f.closed.Load() {
		return blockdev.ErrClosed
	}
	if f.mode.Load() == modeDown {
		return fmt.Errorf("fake %s: connection lost: %w", f.name, blockdev.ErrClosed)
	}
	select {
	case f.slots <- struct{}{}:
	case <-f.done:
		return blockdev.ErrClosed
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed.Load() {
		<-f.slots
		return blockdev.ErrClosed
	}
	f.submitted.Add(1)
	r.Issued = time.Now()
	f.reqs <- r // room: a slot was taken
	return nil
}

var errFakeLost = fmt.Errorf("fake: connection reset: %w", blockdev.ErrClosed)

func (f *fakePath) run() {
	defer f.wg.Done()
	for {
		select {
		case r := <-f.reqs:
			f.exec(r)
		case <-f.done:
			for {
				select {
				case r := <-f.reqs:
					r.Err = blockdev.ErrClosed
					r.Completed = time.Now()
					<-f.slots
					blockdev.Complete(r)
				default:
					return
				}
			}
		}
	}
}

func (f *fakePath) exec(r *blockdev.Request) {
	if f.latency > 0 {
		time.Sleep(f.latency)
	}
	for f.mode.Load() == modeHold {
		f.gateMu.Lock()
		g := f.gate
		f.gateMu.Unlock()
		select {
		case <-g:
		case <-f.done:
		}
		if f.closed.Load() {
			break
		}
	}
	r.Err = nil
	switch {
	case f.closed.Load():
		r.Err = blockdev.ErrClosed
	case f.mode.Load() == modePath:
		r.Err = &blockdev.PathError{State: blockdev.AccessInaccessible, Err: errors.New("fake: ANA inaccessible")}
	case f.mode.Load() == modeDown:
		r.Err = errFakeLost
	case f.mode.Load() == modeIOError:
		r.Err = errFakeIO
	default:
		f.ops[r.Op].Add(1)
		f.st.mu.Lock()
		switch r.Op {
		case blockdev.OpRead:
			copy(r.Buf.Bytes()[r.BufOff:r.BufOff+r.Length], f.st.data[r.Offset:])
		case blockdev.OpWrite:
			copy(f.st.data[r.Offset:r.Offset+int64(r.Length)], r.Buf.Bytes()[r.BufOff:])
		case blockdev.OpDiscard, blockdev.OpWriteZeroes:
			clear(f.st.data[r.Offset : r.Offset+int64(r.Length)])
		}
		f.st.mu.Unlock()
	}
	r.Completed = time.Now()
	<-f.slots
	blockdev.Complete(r)
}

// setMode switches the mode; leaving modeHold releases the held requests.
func (f *fakePath) setMode(m int32) {
	old := f.mode.Swap(m)
	if old == modeHold && m != modeHold {
		f.gateMu.Lock()
		close(f.gate)
		f.gate = make(chan struct{})
		f.gateMu.Unlock()
	}
}

func (f *fakePath) setAccess(a blockdev.AccessState) { f.access.Store(uint32(a)) }

// count returns the reads and writes the path executed.
func (f *fakePath) count() uint64 {
	return f.ops[blockdev.OpRead].Load() + f.ops[blockdev.OpWrite].Load()
}

func (f *fakePath) Close() error {
	f.mu.Lock()
	if f.closed.Swap(true) {
		f.mu.Unlock()
		return nil
	}
	close(f.done)
	f.mu.Unlock()
	f.wg.Wait()
	return nil
}
