package target

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/host"
)

// asyncDisk is a backstore.AsyncDisk over a RAM disk: Start hands the
// operation to goroutines of the disk, which wait delay, run it on the RAM
// disk and call Done, so many operations are in flight at once. fail, when
// set, is the error of the operations of that kind; refuse is returned by
// Start itself. Nothing is allocated per operation.
type asyncDisk struct {
	*backstore.Mem
	delay  time.Duration
	ops    chan *backstore.AsyncIO
	wg     sync.WaitGroup
	fail   [backstore.AsyncWriteZeroes + 1]atomic.Pointer[error]
	refuse atomic.Pointer[error]
	// hold, when set, holds the operations until it is closed.
	hold atomic.Pointer[chan struct{}]

	inflight, peak atomic.Int64
	started        [backstore.AsyncWriteZeroes + 1]atomic.Int64
}

func newAsyncDisk(t testing.TB, size int64, delay time.Duration) *asyncDisk {
	t.Helper()
	mem, err := backstore.NewMem(size, 512)
	if err != nil {
		t.Fatal(err)
	}
	d := &asyncDisk{Mem: mem, delay: delay, ops: make(chan *backstore.AsyncIO, 1024)}
	for range 64 {
		d.wg.Add(1)
		go d.run()
	}
	// Create it before the target, so that this runs after the target's
	// Close (cleanups run last first), whose queues waited for every
	// operation.
	t.Cleanup(func() {
		close(d.ops)
		d.wg.Wait()
	})
	return d
}

// Start implements backstore.AsyncDisk.
func (d *asyncDisk) Start(io *backstore.AsyncIO) error {
	if p := d.refuse.Load(); p != nil {
		return *p
	}
	if io.Op < backstore.AsyncRead || io.Op > backstore.AsyncWriteZeroes || io.Done == nil {
		return fmt.Errorf("async disk: bad operation %v: %w", io.Op, backstore.ErrUnsupported)
	}
	d.started[io.Op].Add(1)
	n := d.inflight.Add(1)
	for {
		p := d.peak.Load()
		if n <= p || d.peak.CompareAndSwap(p, n) {
			break
		}
	}
	d.ops <- io
	return nil
}

func (d *asyncDisk) run() {
	defer d.wg.Done()
	for io := range d.ops {
		if d.delay > 0 {
			time.Sleep(d.delay)
		}
		if h := d.hold.Load(); h != nil {
			<-*h
		}
		var err error
		if p := d.fail[io.Op].Load(); p != nil {
			err = *p
		} else {
			err = runOnMem(d.Mem, io)
		}
		io.Err = err
		d.inflight.Add(-1)
		io.Done(io)
	}
}

// runOnMem runs io's operation on m with its synchronous methods.
func runOnMem(m *backstore.Mem, io *backstore.AsyncIO) error {
	switch io.Op {
	case backstore.AsyncRead:
		return m.ReadvAt(io.Bufs, io.Off)
	case backstore.AsyncWrite:
		return m.WritevAt(io.Bufs, io.Off, io.Flags)
	case backstore.AsyncFlush:
		return m.Flush()
	case backstore.AsyncDiscard:
		return m.Discard(io.Off, io.Len)
	case backstore.AsyncWriteZeroes:
		return m.WriteZeroes(io.Off, io.Len, io.Flags)
	}
	return fmt.Errorf("async disk: operation %v: %w", io.Op, backstore.ErrUnsupported)
}

// Traits: a network store waits for every operation (without Start,
// its commands would run on the queues' workers).
func (d *asyncDisk) Traits() backstore.Traits {
	return backstore.Traits{Waits: backstore.WaitsAlways, ZeroesAfterDiscard: true}
}

var _ backstore.AsyncDisk = (*asyncDisk)(nil)

// TestAsyncDiskDepth runs 32 requests at a time on one I/O queue of a
// namespace on an asynchronous disk, each checked through the host: the
// disk sees many more in flight than the queue has workers.
func TestAsyncDiskDepth(t *testing.T) {
	t.Parallel()
	for _, tr := range []Transport{TransportTCP, TransportRDMA} {
		t.Run(string(tr), func(t *testing.T) {
			t.Parallel()
			disk := newAsyncDisk(t, 4<<20, 2*time.Millisecond) // closed after the target
			tg, sub := anaTarget(t, Config{}, tr)
			if err := sub.AddNamespace(NamespaceConfig{NSID: 1, Disk: disk}); err != nil {
				t.Fatal(err)
			}
			p := anaPort(t, tg, sub, 1, tr, nil)
			cfg := hostCfg("nqn.2014-08.org.nvmexpress:uuid:async")
			cfg.IOQueues, cfg.QueueDepth = 1, 32
			c := mustHost(t, tr, p.Addr().String(), testNQN, cfg)
			ns, err := c.Namespace(context.Background(), 1)
			if err != nil {
				t.Fatal(err)
			}
			const workers, rounds, size = 32, 4, 8192
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					off := int64(w) * size
					for round := range rounds {
						pat := bytes.Repeat([]byte{byte(w), byte(round), 0xa5, byte(w ^ round)}, size/4)
						if _, err := blockdev.WriteAt(ns, pat, off); err != nil {
							errs <- fmt.Errorf("worker %d write: %w", w, err)
							return
						}
						got := make([]byte, size)
						if _, err := blockdev.ReadAt(ns, got, off); err != nil || !bytes.Equal(got, pat) {
							errs <- fmt.Errorf("worker %d read: %v (data equal: %v)", w, err, bytes.Equal(got, pat))
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			t.Logf("peak operations in flight on the disk: %d", disk.peak.Load())
			if peak := disk.peak.Load(); peak <= 4 {
				t.Errorf("at most %d operations in flight on the disk, want more than the 4 workers of a queue", peak)
			}
			// Flush, Write Zeroes (deallocating: Discard) and Discard
			// start on the disk too.
			if err := blockdev.Flush(ns); err != nil {
				t.Fatal(err)
			}
			if err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpWriteZeroes, Offset: 0, Length: size}); err != nil {
				t.Fatal(err)
			}
			if err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpDiscard, Offset: size, Length: size}); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, 2*size)
			if _, err := blockdev.ReadAt(ns, got, 0); err != nil || !bytes.Equal(got, make([]byte, 2*size)) {
				t.Errorf("after write zeroes and discard: %v, zeroes %v", err, bytes.Equal(got, make([]byte, 2*size)))
			}
			for op, want := range map[backstore.AsyncOp]int64{backstore.AsyncRead: workers*rounds + 1, backstore.AsyncWrite: workers * rounds,
				backstore.AsyncFlush: 1} {
				if n := disk.started[op].Load(); n < want {
					t.Errorf("%v started %d times, want at least %d", op, n, want)
				}
			}
			if n := disk.started[backstore.AsyncDiscard].Load() + disk.started[backstore.AsyncWriteZeroes].Load(); n < 2 {
				t.Errorf("%d discards and write-zeroes started, want 2", n)
			}
		})
	}
}

// TestAsyncDiskErrors checks the statuses of operations that fail on an
// asynchronous disk, in Done or in Start.
func TestAsyncDiskErrors(t *testing.T) {
	t.Parallel()
	disk := newAsyncDisk(t, 1<<20, 0) // closed after the target
	tg, sub := anaTarget(t, Config{}, TransportTCP)
	if err := sub.AddNamespace(NamespaceConfig{NSID: 1, Disk: disk}); err != nil {
		t.Fatal(err)
	}
	p := anaPort(t, tg, sub, 1, TransportTCP, nil)
	c := mustHost(t, TransportTCP, p.Addr().String(), testNQN, hostCfg("nqn.2014-08.org.nvmexpress:uuid:async-errors"))
	ns, err := c.Namespace(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	status := func(err error) nvmeof.Status {
		var se *host.StatusError
		if !errors.As(err, &se) {
			t.Fatalf("error %v is not a status", err)
		}
		return se.Status
	}
	for _, c := range []struct {
		err  error
		want nvmeof.Status
		path bool
	}{
		{backstore.ErrFenced, nvmeof.StatusInternalPathError, true},
		{backstore.ErrNoSpace, nvmeof.StatusCapacityExceeded.WithDNR(), false},
		{backstore.ErrTimeout, nvmeof.StatusCommandInterrupted, false},
	} {
		e := fmt.Errorf("rbd: aio write: %w", c.err)
		disk.fail[backstore.AsyncWrite].Store(&e)
		_, err := blockdev.WriteAt(ns, buf, 0)
		if st := status(err); st != c.want || errors.Is(err, blockdev.ErrPath) != c.path {
			t.Errorf("%v: %v, want %v (path error %v)", c.err, err, c.want, c.path)
		}
	}
	disk.fail[backstore.AsyncWrite].Store(nil)
	ro := fmt.Errorf("rbd: %w", backstore.ErrReadOnly)
	disk.refuse.Store(&ro)
	if _, err := blockdev.WriteAt(ns, buf, 0); status(err) != nvmeof.StatusNamespaceWriteProtected.WithDNR() {
		t.Errorf("refused in Start: %v", err)
	}
	disk.refuse.Store(nil)
	if _, err := blockdev.WriteAt(ns, buf, 0); err != nil {
		t.Errorf("after the errors: %v", err)
	}
}

// asyncTransport is fuzzTransport signalling each completion.
type asyncTransport struct {
	fuzzTransport
	done chan struct{}
}

func (a *asyncTransport) respond(r *request) error {
	r.sent()
	a.done <- struct{}{}
	return nil
}

// TestAsyncCoreAllocs checks that a Read and a Write on an asynchronous
// disk, started and completed, allocate nothing in the core (not in
// parallel: AllocsPerRun counts the whole process).
func TestAsyncCoreAllocs(t *testing.T) {
	disk := newAsyncDisk(t, 4<<20, 0) // closed after the target
	tg, c := coreController(t, 2)
	if err := tg.Subsystem(testNQN).AddNamespace(NamespaceConfig{NSID: 1, Disk: disk}); err != nil {
		t.Fatal(err)
	}
	for i, tc := range coreOps {
		if tc.placed {
			continue // an asynchronous disk has no memory to place into
		}
		cq := newCoreQueue(t, c, uint16(i+1), tc)
		at := &asyncTransport{fuzzTransport: fuzzTransport{buf: cq.tr.buf}, done: make(chan struct{}, 1)}
		cq.q.tr = at
		once := func() {
			cq.once(t)
			<-at.done
		}
		for range 10 {
			once()
		}
		before := disk.started[backstore.AsyncRead].Load() + disk.started[backstore.AsyncWrite].Load()
		if n := testing.AllocsPerRun(200, once); n != 0 {
			t.Errorf("%s: %.1f allocations per command, want 0", tc.name, n)
		}
		if after := disk.started[backstore.AsyncRead].Load() + disk.started[backstore.AsyncWrite].Load(); after-before < 200 {
			t.Errorf("%s: %d operations started, want one per command", tc.name, after-before)
		}
	}
}

// heldWrite is a target whose namespace 1 is an asynchronous disk holding
// its operations, and a host with a write held on it.
func heldWrite(t *testing.T, tr Transport) (*Target, *asyncDisk, chan struct{}, *host.Controller, <-chan error) {
	t.Helper()
	disk := newAsyncDisk(t, 1<<20, 0) // closed after the target
	tg, sub := anaTarget(t, Config{}, tr)
	release := make(chan struct{})
	disk.hold.Store(&release)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	if err := sub.AddNamespace(NamespaceConfig{NSID: 1, Disk: disk}); err != nil {
		t.Fatal(err)
	}
	p := anaPort(t, tg, sub, 1, tr, nil)
	c := mustHost(t, tr, p.Addr().String(), testNQN, hostCfg("nqn.2014-08.org.nvmexpress:uuid:async-drain"))
	ns, err := c.Namespace(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := blockdev.WriteAt(ns, bytes.Repeat([]byte{7}, 4096), 0)
		wrote <- err
	}()
	eventually(t, "the write started on the disk", func() bool { return disk.inflight.Load() == 1 })
	return tg, disk, release, c, wrote
}

// TestAsyncDrain: Drain waits for a write started on an asynchronous disk
// and answers it before it disconnects the host.
func TestAsyncDrain(t *testing.T) {
	t.Parallel()
	for _, tr := range []Transport{TransportTCP, TransportRDMA} {
		t.Run(string(tr), func(t *testing.T) {
			t.Parallel()
			tg, disk, release, c, wrote := heldWrite(t, tr)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			drained := make(chan error, 1)
			go func() { drained <- tg.Drain(ctx) }()
			time.Sleep(100 * time.Millisecond)
			select {
			case err := <-drained:
				t.Fatalf("Drain returned (%v) with a write on the disk", err)
			case err := <-wrote:
				t.Fatalf("the write completed (%v) before the disk did", err)
			default:
			}
			if st := nsStatsOf(t, tg.Subsystem(testNQN), 1); st.InFlight != 1 {
				t.Fatalf("while the write waits: %+v, want 1 in flight", st)
			}
			close(release)
			if err := <-drained; err != nil {
				t.Fatalf("Drain: %v", err)
			}
			if err := <-wrote; err != nil {
				t.Fatalf("the write: %v, want it answered", err)
			}
			waitDone(t, c, "drained")
			got := make([]byte, 4096)
			if err := disk.Mem.ReadAt(got, 0); err != nil || !bytes.Equal(got, bytes.Repeat([]byte{7}, 4096)) {
				t.Fatalf("the write is not on the disk: %v", err)
			}
		})
	}
}

// TestAsyncTeardown: Close with a write held on an asynchronous disk
// waits for its Done, which then finds the connection gone.
func TestAsyncTeardown(t *testing.T) {
	t.Parallel()
	for _, tr := range []Transport{TransportTCP, TransportRDMA} {
		t.Run(string(tr), func(t *testing.T) {
			t.Parallel()
			tg, disk, release, c, wrote := heldWrite(t, tr)
			closed := make(chan error, 1)
			go func() { closed <- tg.Close() }()
			waitDone(t, c, "target closed")
			select {
			case err := <-closed:
				t.Fatalf("Close returned (%v) with an operation on the disk", err)
			case <-time.After(100 * time.Millisecond):
			}
			close(release)
			if err := <-closed; err != nil {
				t.Fatalf("Close: %v", err)
			}
			if err := <-wrote; err == nil {
				t.Fatal("the write succeeded through a closed target")
			}
			if n := disk.inflight.Load(); n != 0 {
				t.Fatalf("%d operations in flight after Close", n)
			}
		})
	}
}

// syncOnly hides an asyncDisk's Start: its commands run on the queue's
// workers, for comparison.
type syncOnly struct {
	backstore.Disk
	delay time.Duration
}

func (d syncOnly) ReadAt(p []byte, off int64) error {
	time.Sleep(d.delay)
	return d.Disk.ReadAt(p, off)
}

// BenchmarkAsyncDepth reads 4 KiB at QD32 through one NVMe/TCP queue from
// a disk that takes 1 ms per operation: started asynchronously, or on the
// queue's workers.
func BenchmarkAsyncDepth(b *testing.B) {
	for _, async := range []bool{true, false} {
		name := "workers"
		if async {
			name = "async"
		}
		b.Run(name, func(b *testing.B) {
			ad := newAsyncDisk(b, 4<<20, time.Millisecond)
			var disk backstore.Disk = ad
			if !async {
				disk = syncOnly{ad.Mem, ad.delay}
			}
			tg, err := New(Config{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { tg.Close() })
			sub, _ := tg.AddSubsystem(SubsystemConfig{NQN: testNQN, AllowAnyHost: true})
			if err := sub.AddNamespace(NamespaceConfig{NSID: 1, Disk: disk}); err != nil {
				b.Fatal(err)
			}
			p, err := tg.AddPort(PortConfig{ID: 1, Addr: "127.0.0.1:0", Transport: TransportTCP})
			if err != nil {
				b.Fatal(err)
			}
			p.LinkSubsystem(sub)
			cfg := hostCfg("nqn.2014-08.org.nvmexpress:uuid:async-bench")
			cfg.IOQueues, cfg.QueueDepth = 1, 32
			c := mustHost(b, TransportTCP, p.Addr().String(), testNQN, cfg)
			ns, err := c.Namespace(context.Background(), 1)
			if err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				buf := make([]byte, 4096)
				for pb.Next() {
					off := (next.Add(1) % 1024) * 4096
					if _, err := blockdev.ReadAt(ns, buf, off); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// cachedAsyncDisk is an asyncDisk that is also a backstore.NoWaitReader,
// as a buffered file on io_uring is: reads of the first half are "in the
// page cache" and served at once; the rest are declined.
type cachedAsyncDisk struct {
	*asyncDisk
	noWait, declined atomic.Int64
}

func (d *cachedAsyncDisk) ReadAtNoWait(p []byte, off int64) (bool, error) {
	if off+int64(len(p)) > d.Size()/2 {
		d.declined.Add(1)
		return false, nil
	}
	d.noWait.Add(1)
	return true, d.Mem.ReadAt(p, off)
}

var _ backstore.NoWaitReader = (*cachedAsyncDisk)(nil)

// TestAsyncNoWaitFirst: on an AsyncDisk that is a NoWaitReader, a read the
// disk answers from its cache is served on the queue at once, and only a
// declined one is started.
func TestAsyncNoWaitFirst(t *testing.T) {
	t.Parallel()
	for _, tr := range []Transport{TransportTCP, TransportRDMA} {
		t.Run(string(tr), func(t *testing.T) {
			t.Parallel()
			disk := &cachedAsyncDisk{asyncDisk: newAsyncDisk(t, 4<<20, 0)}
			tg, sub := anaTarget(t, Config{}, tr)
			if err := sub.AddNamespace(NamespaceConfig{NSID: 1, Disk: disk}); err != nil {
				t.Fatal(err)
			}
			p := anaPort(t, tg, sub, 1, tr, nil)
			c := mustHost(t, tr, p.Addr().String(), testNQN, hostCfg("nqn.2014-08.org.nvmexpress:uuid:nowait"))
			ns, err := c.Namespace(context.Background(), 1)
			if err != nil {
				t.Fatal(err)
			}
			pat := bytes.Repeat([]byte{0x5a, 0xc3}, 2048)
			for _, off := range []int64{0, 3 << 20} {
				if _, err := blockdev.WriteAt(ns, pat, off); err != nil {
					t.Fatal(err)
				}
			}
			before := disk.started[backstore.AsyncRead].Load()
			got := make([]byte, len(pat))
			for i := range 8 {
				if _, err := blockdev.ReadAt(ns, got, 0); err != nil || !bytes.Equal(got, pat) {
					t.Fatalf("cached read %d: %v, data equal %v", i, err, bytes.Equal(got, pat))
				}
			}
			if n := disk.started[backstore.AsyncRead].Load() - before; n != 0 || disk.noWait.Load() < 8 {
				t.Errorf("cached reads: %d started, %d served without waiting; want 0 started, 8 served", n, disk.noWait.Load())
			}
			if _, err := blockdev.ReadAt(ns, got, 3<<20); err != nil || !bytes.Equal(got, pat) {
				t.Fatalf("uncached read: %v, data equal %v", err, bytes.Equal(got, pat))
			}
			if n := disk.started[backstore.AsyncRead].Load() - before; n != 1 || disk.declined.Load() < 1 {
				t.Errorf("uncached read: %d started, %d declined; want 1 started after a decline", n, disk.declined.Load())
			}
		})
	}
}
