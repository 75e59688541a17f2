package scsi

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rdisk/rdisk/backstore"
)

// asyncDisk is a RAM disk that implements backstore.AsyncDisk: Start queues
// the I/O, which a goroutine of the disk performs once the test lets it
// (hold) or at once, then calls Done.
type asyncDisk struct {
	*backstore.Mem
	q        chan *backstore.AsyncIO
	mu       sync.Mutex
	held     bool
	waiting  []*backstore.AsyncIO
	inflight atomic.Int32
	peak     atomic.Int32
	started  atomic.Int32
}

func newAsyncDisk(t testing.TB) *asyncDisk {
	d := &asyncDisk{Mem: newMem(t, testBlocks, testBS), q: make(chan *backstore.AsyncIO, 64)}
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		for {
			select {
			case io := <-d.q:
				d.do(io)
			case <-stop:
				return
			}
		}
	}()
	return d
}

func (d *asyncDisk) Start(io *backstore.AsyncIO) error {
	if n := d.inflight.Add(1); n > d.peak.Load() {
		d.peak.Store(n)
	}
	d.started.Add(1)
	d.mu.Lock()
	if d.held {
		d.waiting = append(d.waiting, io)
		d.mu.Unlock()
		return nil
	}
	d.mu.Unlock()
	d.q <- io
	return nil
}

func (d *asyncDisk) do(io *backstore.AsyncIO) {
	switch io.Op {
	case backstore.AsyncRead:
		io.Err = d.Mem.ReadAt(io.Bufs[0], io.Off)
	case backstore.AsyncWrite:
		io.Err = d.Mem.WriteAt(io.Bufs[0], io.Off, io.Flags)
	case backstore.AsyncFlush:
		io.Err = d.Mem.Flush()
	case backstore.AsyncDiscard:
		io.Err = d.Mem.Discard(io.Off, io.Len)
	}
	d.inflight.Add(-1)
	io.Done(io)
}

func (d *asyncDisk) hold() { d.mu.Lock(); d.held = true; d.mu.Unlock() }

// open lets the held I/Os (and later ones) go.
func (d *asyncDisk) open() {
	d.mu.Lock()
	w := d.waiting
	d.waiting, d.held = nil, false
	d.mu.Unlock()
	for _, io := range w {
		d.q <- io
	}
}

// startAll starts cmds on s and returns a channel that gets each as it
// completes.
func startAll(t *testing.T, s *Session, cmds []*Command) chan *Command {
	t.Helper()
	done := make(chan *Command, len(cmds))
	for _, c := range cmds {
		c.Done = func(c *Command) { done <- c }
		if !s.CanStart(c) || !s.Start(c) {
			t.Fatalf("%x: not started", c.CDB)
		}
	}
	return done
}

// TestStartKeepsDepth: commands begun with Start on an AsyncDisk are all
// in flight at the disk at once, started from one goroutine with no
// worker, and complete with the data and status Execute gives.
func TestStartKeepsDepth(t *testing.T) {
	t.Parallel()
	d := newAsyncDisk(t)
	f := newFixture(t, d, LUConfig{})
	const depth = 32
	want := pattern(depth*testBS, 7)
	d.hold()
	var cmds []*Command
	for i := range depth {
		cmds = append(cmds, &Command{CDB: rw10(OpWrite10, uint32(i), 1, 0), Dir: DirOut, ExpectedLength: testBS,
			DataOut: want[i*testBS : (i+1)*testBS], Sense: make([]byte, SenseBufferLen), Tag: uint64(i)})
	}
	done := startAll(t, f.s1, cmds)
	waitFor(t, func() bool { return d.inflight.Load() == depth })
	d.open()
	for range depth {
		good(t, <-done)
	}
	d.hold()
	cmds = cmds[:0]
	for i := range depth {
		cmds = append(cmds, &Command{CDB: rw10(OpRead10, uint32(i), 1, 0), Dir: DirIn, ExpectedLength: testBS,
			DataIn: make([]byte, testBS), Sense: make([]byte, SenseBufferLen), Tag: uint64(i)})
	}
	cmds = append(cmds, &Command{CDB: []byte{OpSyncCache10, 0, 0, 0, 0, 0, 0, 0, 0, 0}, Sense: make([]byte, SenseBufferLen), Tag: depth})
	done = startAll(t, f.s1, cmds)
	waitFor(t, func() bool { return d.inflight.Load() == depth+1 })
	d.open()
	for range depth + 1 {
		c := <-done
		good(t, c)
		if c.Dir == DirIn {
			i := int(c.Tag)
			if !bytes.Equal(data(c), want[i*testBS:(i+1)*testBS]) || c.ResidualKind != ResidualNone {
				t.Fatalf("read %d: wrong data or residual %v", i, c.ResidualKind)
			}
		}
	}
	if p := d.peak.Load(); p < depth+1 {
		t.Errorf("peak I/Os in flight at the disk %d, want %d", p, depth+1)
	}
	// Checks fail at once, from Start, with the sense Execute gives.
	oob := &Command{CDB: rw10(OpRead10, testBlocks, 1, 0), Dir: DirIn, ExpectedLength: testBS, DataIn: make([]byte, testBS), Sense: make([]byte, SenseBufferLen)}
	expect(t, <-startAll(t, f.s1, []*Command{oob}), KeyIllegalRequest, ASCLBAOutOfRange)
	// Not for Start: ORDERED, other commands.
	if f.s1.CanStart(&Command{CDB: rw10(OpRead10, 0, 1, 0), Attr: AttrOrdered}) || f.s1.CanStart(&Command{CDB: tur()}) {
		t.Error("CanStart: ORDERED READ or TEST UNIT READY")
	}
	if f.s1.Start(&Command{CDB: tur(), Done: func(*Command) { t.Error("Done of a command Start refused") }}) {
		t.Error("Start took TEST UNIT READY")
	}
}

// TestStartAbort: ABORT TASK and LUN RESET of commands whose disk I/O is
// in flight wait for the I/O, and the commands complete aborted: silently
// for their own nexus, TASK ABORTED for another's.
func TestStartAbort(t *testing.T) {
	t.Parallel()
	d := newAsyncDisk(t)
	f := newFixture(t, d, LUConfig{})
	d.hold()
	mk := func(tag uint64) *Command {
		return &Command{CDB: rw10(OpRead10, uint32(tag), 1, 0), Dir: DirIn, ExpectedLength: testBS, DataIn: make([]byte, testBS),
			Sense: make([]byte, SenseBufferLen), Tag: tag}
	}
	done1 := startAll(t, f.s1, []*Command{mk(1), mk(2)})
	done2 := startAll(t, f.s2, []*Command{mk(3)})
	waitFor(t, func() bool { return d.inflight.Load() == 3 })
	tmf := make(chan TMFResponse)
	go func() { tmf <- f.s1.TaskManagement(context.Background(), TMFAbortTask, 0, 1) }()
	waitFor(t, func() bool { return f.lu.tasks.find(func(c *Command) bool { return c.aborted() }) })
	select {
	case r := <-tmf:
		t.Fatalf("ABORT TASK answered (%v) while the read's I/O was in flight", r)
	case c := <-done1:
		t.Fatalf("command %d completed while held at the disk", c.Tag)
	default:
	}
	d.open()
	if r := <-tmf; r != TMFComplete {
		t.Fatalf("ABORT TASK: %v", r)
	}
	for range 2 {
		c := <-done1
		switch {
		case c.Tag == 1 && (!c.Aborted || c.Status != StatusTaskAborted):
			t.Errorf("aborted read: Aborted %v, %v", c.Aborted, c.Status)
		case c.Tag == 2:
			good(t, c)
		}
	}
	good(t, <-done2)

	d.hold()
	done1 = startAll(t, f.s1, []*Command{mk(4)})
	done2 = startAll(t, f.s2, []*Command{mk(5)})
	waitFor(t, func() bool { return d.inflight.Load() == 2 })
	go func() { tmf <- f.s1.TaskManagement(context.Background(), TMFLUNReset, 0, 0) }()
	waitFor(t, func() bool { return f.lu.tasks.find(func(c *Command) bool { return c.aborted() }) })
	d.open()
	if r := <-tmf; r != TMFComplete {
		t.Fatalf("LUN RESET: %v", r)
	}
	if c := <-done1; !c.Aborted {
		t.Errorf("own nexus's read after LUN RESET: Aborted %v, %v", c.Aborted, c.Status)
	}
	if c := <-done2; c.Aborted || c.Status != StatusTaskAborted {
		t.Errorf("other nexus's read after LUN RESET: Aborted %v, %v", c.Aborted, c.Status)
	}
}

// TestStartNoAllocations: a READ and a WRITE begun with Start allocate
// nothing per command once the Command has been used. Not parallel (see
// TestNoAllocations).
func TestStartNoAllocations(t *testing.T) {
	d := newAsyncDisk(t)
	f := newFixture(t, d, LUConfig{})
	buf := make([]byte, 8*testBS)
	done := make(chan *Command, 1)
	c := &Command{Sense: make([]byte, SenseBufferLen), Done: func(c *Command) { done <- c }}
	r10, w10 := rw10(OpRead10, 8, 8, 0), rw10(OpWrite10, 8, 8, 0)
	for _, tc := range []struct {
		name string
		cdb  []byte
		dir  Dir
	}{{"READ(10)", r10, DirIn}, {"WRITE(10)", w10, DirOut}} {
		run := func() {
			c.CDB, c.Dir, c.ExpectedLength, c.DataIn, c.DataOut = tc.cdb, tc.dir, uint32(len(buf)), buf, buf
			if !f.s1.Start(c) {
				t.Fatal("not started")
			}
			<-done
		}
		run()
		if n := testing.AllocsPerRun(100, run); n != 0 {
			t.Errorf("%s: %.1f allocations per command", tc.name, n)
		}
		good(t, c)
	}
}

// TestStartUnmap: UNMAP begun with Start discards every block descriptor
// in turn (one AsyncDiscard each, started again from Done) and completes
// once; the blocks read back as zeroes.
func TestStartUnmap(t *testing.T) {
	t.Parallel()
	d := newAsyncDisk(t)
	f := newFixture(t, d, LUConfig{})
	if !f.lu.thin() {
		t.Skip("the RAM disk does not deallocate")
	}
	good(t, out(f.s1, rw10(OpWrite10, 0, 64, 0), pattern(64*testBS, 5)))
	params := unmapParams([2]uint64{2, 3}, [2]uint64{9, 0}, [2]uint64{20, 8}, [2]uint64{40, 1})
	before := d.started.Load()
	c := &Command{CDB: unmapCDB(uint16(len(params))), Dir: DirOut, ExpectedLength: uint32(len(params)), DataOut: params,
		Sense: make([]byte, SenseBufferLen)}
	good(t, <-startAll(t, f.s1, []*Command{c}))
	if n := d.started.Load() - before; n != 3 {
		t.Errorf("%d discards started, want 3 (the descriptors with blocks)", n)
	}
	got := data(in(f.s1, rw10(OpRead10, 0, 64, 0), 64*testBS))
	want := pattern(64*testBS, 5)
	for _, r := range [][2]int{{2, 3}, {20, 8}, {40, 1}} {
		clear(want[r[0]*testBS : (r[0]+r[1])*testBS])
	}
	if !bytes.Equal(got, want) {
		t.Error("blocks after UNMAP differ from the ranges deallocated")
	}
	// A bad descriptor fails before anything is discarded.
	bad := unmapParams([2]uint64{0, 1}, [2]uint64{testBlocks, 1})
	before = d.started.Load()
	c = &Command{CDB: unmapCDB(uint16(len(bad))), Dir: DirOut, ExpectedLength: uint32(len(bad)), DataOut: bad, Sense: make([]byte, SenseBufferLen)}
	expect(t, <-startAll(t, f.s1, []*Command{c}), KeyIllegalRequest, ASCLBAOutOfRange)
	if d.started.Load() != before {
		t.Error("a discard started for an UNMAP that failed its checks")
	}
}
