package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/blockdev/blockdevtest"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/target"
	"github.com/rdisk/rdisk/rdma/iwarp"
)

// End-to-end tests: this host against rdisk's own target (nvmeof/target)
// over the pure-Go iWARP provider on 127.0.0.1.

const (
	loopNQN  = "nqn.2026-11.io.rdisk:hosttest"
	loopHost = "nqn.2014-08.org.nvmexpress:uuid:0c7a4b2e-5d1f-4e3a-9b6c-7d8e9f0a1b2c"
)

func testLogger() *slog.Logger {
	if os.Getenv("RDISK_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

type loopTarget struct {
	tg   *target.Target
	sub  *target.Subsystem
	addr string
}

// startTarget runs a target with one RAM namespace (nsid 1) of size bytes
// in 512-byte blocks.
func startTarget(t testing.TB, size int64, pc target.PortConfig, sc target.SubsystemConfig) *loopTarget {
	t.Helper()
	return startTargetDisk(t, memDisk(t, size, false), pc, sc)
}

// memDisk is a RAM disk of size bytes in 512-byte blocks, serialized for
// the race detector; noView makes it refuse ViewAt, so reads take the
// copying path.
func memDisk(t testing.TB, size int64, noView bool) *syncDisk {
	t.Helper()
	disk, err := backstore.NewMem(size, 512)
	if err != nil {
		t.Fatal(err)
	}
	return &syncDisk{Mem: disk, noView: noView}
}

// startTargetDisk runs a target exporting disk as nsid 1.
func startTargetDisk(t testing.TB, disk backstore.Disk, pc target.PortConfig, sc target.SubsystemConfig) *loopTarget {
	t.Helper()
	p, err := iwarp.New(iwarp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tg, err := target.New(target.Config{Provider: p, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	if sc.NQN == "" {
		sc.NQN = loopNQN
	}
	if len(sc.AllowedHosts) == 0 {
		sc.AllowAnyHost = true
	}
	sub, err := tg.AddSubsystem(sc)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.AddNamespace(target.NamespaceConfig{NSID: 1, Disk: disk}); err != nil {
		t.Fatal(err)
	}
	pc.ID, pc.Addr = 1, "127.0.0.1:0"
	port, err := tg.AddPort(pc)
	if err != nil {
		t.Fatal(err)
	}
	port.LinkSubsystem(sub)
	return &loopTarget{tg: tg, sub: sub, addr: port.Addr().String()}
}

// syncDisk serializes a backstore.Mem's data accesses. backstore.Mem copies
// without synchronization, so a write on one target queue and a later read
// of the same blocks on another, ordered only through the network, is a
// data race to the race detector.
type syncDisk struct {
	mu sync.RWMutex
	*backstore.Mem
	noView bool
}

// ViewAt needs no lock: the target only hands the views to the transport,
// whose writes to the socket the race detector does not see. With noView it
// refuses, as a disk whose range does not fit the segments does.
func (d *syncDisk) ViewAt(segs [][]byte, off int64, n int) (int, error) {
	if d.noView {
		return 0, fmt.Errorf("test disk without views: %w", backstore.ErrUnsupported)
	}
	return d.Mem.ViewAt(segs, off, n)
}

func (d *syncDisk) ReadAt(p []byte, off int64) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.Mem.ReadAt(p, off)
}

func (d *syncDisk) ReadvAt(bufs [][]byte, off int64) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.Mem.ReadvAt(bufs, off)
}

func (d *syncDisk) WriteAt(p []byte, off int64, f backstore.WriteFlags) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.Mem.WriteAt(p, off, f)
}

func (d *syncDisk) WritevAt(bufs [][]byte, off int64, f backstore.WriteFlags) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.Mem.WritevAt(bufs, off, f)
}

func (d *syncDisk) Discard(off, n int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.Mem.Discard(off, n)
}

func (d *syncDisk) WriteZeroes(off, n int64, f backstore.WriteFlags) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.Mem.WriteZeroes(off, n, f)
}

func hostConfig() Config {
	return Config{HostNQN: loopHost, HostID: [16]byte{0x0c, 0x7a, 0x4b, 0x2e, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, Logger: testLogger()}
}

func connectLoop(t testing.TB, lt *loopTarget, cfg Config) *Controller {
	t.Helper()
	p, err := iwarp.New(iwarp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Connect(ctx, p, lt.addr, loopNQN, cfg)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func openLoop(t testing.TB, lt *loopTarget, cfg Config) *Namespace {
	t.Helper()
	c := connectLoop(t, lt, cfg)
	ns, err := c.Namespace(context.Background(), 1)
	if err != nil {
		t.Fatalf("Namespace(1): %v", err)
	}
	return ns
}

func TestLoopbackIdentify(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, 16<<20, target.PortConfig{}, target.SubsystemConfig{})
	c := connectLoop(t, lt, hostConfig())
	id := c.Identify()
	if id.SUBNQN != loopNQN || id.CNTLID != c.CNTLID() || id.KAS == 0 {
		t.Errorf("identify: SUBNQN %q CNTLID %d (connect %d) KAS %d", id.SUBNQN, id.CNTLID, c.CNTLID(), id.KAS)
	}
	ctx := context.Background()
	list, err := c.ActiveNamespaces(ctx)
	if err != nil || len(list) != 1 || list[0] != 1 {
		t.Fatalf("ActiveNamespaces = %v, %v; want [1]", list, err)
	}
	ns, err := c.Namespace(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	in := ns.Info()
	if in.BlockSize != 512 || in.Size != 16<<20 {
		t.Errorf("namespace info %+v: want 512-byte blocks, 16 MiB", in)
	}
	if _, err := c.NamespaceIDs(ctx, 1); err != nil {
		t.Errorf("NamespaceIDs: %v", err)
	}
	if _, err := c.SMARTLog(ctx, nvmeof.NSIDAll); err != nil {
		t.Errorf("SMARTLog: %v", err)
	}
	if _, err := c.ErrorLog(ctx); err != nil {
		t.Errorf("ErrorLog: %v", err)
	}
	if _, err := c.Namespace(ctx, 7); !errors.Is(err, ErrNoNamespace) {
		var se *StatusError
		if !errors.As(err, &se) {
			t.Errorf("Namespace(7): %v, want ErrNoNamespace or an NVMe status", err)
		}
	}
	if err := c.KeepAlive(ctx); err != nil {
		t.Errorf("KeepAlive: %v", err)
	}
}

func TestLoopbackDiscovery(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, 1<<20, target.PortConfig{}, target.SubsystemConfig{})
	p, _ := iwarp.New(iwarp.Config{})
	log, err := Discover(context.Background(), p, lt.addr, hostConfig())
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	found := false
	for _, e := range log.Entries {
		if e.SubNQN == loopNQN {
			found = true
			if u, ok := EntryURL(&e); !ok || u.Addr() != lt.addr {
				t.Errorf("entry URL %v, %v: want address %s", u, ok, lt.addr)
			}
		}
	}
	if !found {
		t.Errorf("discovery log %+v has no entry for %s", log, loopNQN)
	}
}

func TestLoopbackConformance(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, 8<<20, target.PortConfig{}, target.SubsystemConfig{})
	blockdevtest.Run(t, func(t *testing.T) blockdev.Device {
		cfg := hostConfig()
		cfg.IOQueues, cfg.QueueDepth, cfg.MaxTransfer = 2, 16, 64<<10
		return openLoop(t, lt, cfg)
	})
}

// TestLoopbackConformanceCopyPath runs the conformance suite with reads
// copied into the target's registered buffers instead of sent from the RAM
// disk's memory.
func TestLoopbackConformanceCopyPath(t *testing.T) {
	t.Parallel()
	lt := startTargetDisk(t, memDisk(t, 8<<20, true), target.PortConfig{}, target.SubsystemConfig{})
	blockdevtest.Run(t, func(t *testing.T) blockdev.Device {
		cfg := hostConfig()
		cfg.IOQueues, cfg.QueueDepth = 2, 16
		return openLoop(t, lt, cfg)
	})
}

// TestLoopbackConformanceFile runs the conformance suite on file disks:
// buffered (commands inline, Flush on the workers) and O_DIRECT (every
// command on the workers, in-capsule writes from the page-aligned capsule
// buffers).
func TestLoopbackConformanceFile(t *testing.T) {
	t.Parallel()
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) {
			t.Parallel()
			f, err := backstore.OpenFile(filepath.Join(t.TempDir(), "disk.img"), backstore.FileOptions{Create: true, Size: 8 << 20, BlockSize: 512, Direct: direct})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			if direct && f.DirectAlignment() <= 1 {
				t.Fatalf("O_DIRECT file reports alignment %d", f.DirectAlignment())
			}
			lt := startTargetDisk(t, f, target.PortConfig{}, target.SubsystemConfig{})
			blockdevtest.Run(t, func(t *testing.T) blockdev.Device {
				cfg := hostConfig()
				cfg.IOQueues, cfg.QueueDepth = 2, 16
				return openLoop(t, lt, cfg)
			})
		})
	}
}

// noWaitDisk is a RAM disk that looks like a buffered file: every other
// ReadAtNoWait declines (data "not cached"), so reads run both inline and
// on the target's workers.
type noWaitDisk struct {
	*syncDisk
	calls, declined atomic.Int64
}

// Traits says what a buffered file says.
func (d *noWaitDisk) Traits() backstore.Traits {
	return backstore.Traits{Waits: backstore.WaitsOnCacheMiss, ZeroesAfterDiscard: true}
}

func (d *noWaitDisk) ReadAtNoWait(p []byte, off int64) (bool, error) {
	if d.calls.Add(1)%2 == 0 {
		d.declined.Add(1)
		return false, nil
	}
	return true, d.ReadAt(p, off)
}

// TestLoopbackConformanceNoWait runs the conformance suite on a disk whose
// reads are tried without waiting first and, when declined, run on the
// target's workers.
func TestLoopbackConformanceNoWait(t *testing.T) {
	t.Parallel()
	d := &noWaitDisk{syncDisk: memDisk(t, 8<<20, true)}
	lt := startTargetDisk(t, d, target.PortConfig{}, target.SubsystemConfig{})
	blockdevtest.Run(t, func(t *testing.T) blockdev.Device {
		cfg := hostConfig()
		cfg.IOQueues, cfg.QueueDepth = 2, 16
		return openLoop(t, lt, cfg)
	})
	if d.declined.Load() == 0 || d.calls.Load() == d.declined.Load() {
		t.Fatalf("%d no-wait reads, %d declined: want both paths used", d.calls.Load(), d.declined.Load())
	}
}

// barrierDisk is a disk whose reads each wait until n reads are running at
// once (or fail after a timeout): it passes only if the target runs a
// queue's reads concurrently.
type barrierDisk struct {
	*syncDisk
	n       int
	mu      sync.Mutex
	inside  int
	release chan struct{}
}

func (d *barrierDisk) ReadAt(p []byte, off int64) error {
	d.mu.Lock()
	d.inside++
	if d.inside == d.n {
		close(d.release)
	}
	d.mu.Unlock()
	select {
	case <-d.release:
	case <-time.After(20 * time.Second):
		return fmt.Errorf("barrier disk: only %d of %d reads ran at once", d.inside, d.n)
	}
	return d.syncDisk.ReadAt(p, off)
}

// ViewAt refuses, so reads come through ReadAt.
func (d *barrierDisk) ViewAt([][]byte, int64, int) (int, error) {
	return 0, backstore.ErrUnsupported
}

// Traits makes the disk look like direct I/O to a device, whose commands
// the target runs on its workers.
func (d *barrierDisk) Traits() backstore.Traits {
	return backstore.Traits{Waits: backstore.WaitsAlways, ZeroesAfterDiscard: true}
}

// TestLoopbackBlockingDiskConcurrent checks that the reads of one queue
// reach a disk that may block concurrently (the target's workers), not one
// after the other.
func TestLoopbackBlockingDiskConcurrent(t *testing.T) {
	t.Parallel()
	const n = 4
	d := &barrierDisk{syncDisk: memDisk(t, 1<<20, true), n: n, release: make(chan struct{})}
	lt := startTargetDisk(t, d, target.PortConfig{}, target.SubsystemConfig{})
	cfg := hostConfig()
	cfg.IOQueues, cfg.QueueDepth = 1, n
	ns := openLoop(t, lt, cfg)
	buf, err := ns.AllocBuffer(n * 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Release()
	ch := make(chan *blockdev.Request, n)
	reqs := make([]blockdev.Request, n)
	for i := range reqs {
		reqs[i] = blockdev.Request{Op: blockdev.OpRead, Offset: int64(i) * 4096, Length: 4096, Buf: buf, BufOff: i * 4096, C: ch}
		if err := ns.Submit(&reqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	for range reqs {
		if r := <-ch; r.Err != nil {
			t.Fatalf("read at %d: %v", r.Offset, r.Err)
		}
	}
}

func TestLoopbackConformanceNoInCapsule(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, 4<<20, target.PortConfig{}, target.SubsystemConfig{})
	blockdevtest.Run(t, func(t *testing.T) blockdev.Device {
		cfg := hostConfig()
		cfg.NoInCapsule = true
		cfg.QueueDepth = 8
		return openLoop(t, lt, cfg)
	})
}

// TestLoopbackVerify64MiB writes 64 MiB of random data at random 4 KiB..128
// KiB extents over two queues and reads it all back (16 MiB under the race
// detector, which makes every copy and compare slow).
func TestLoopbackVerify64MiB(t *testing.T) {
	t.Parallel()
	size := 64 << 20
	if raceEnabled {
		size = 16 << 20
	}
	lt := startTarget(t, int64(size), target.PortConfig{}, target.SubsystemConfig{})
	cfg := hostConfig()
	cfg.IOQueues, cfg.QueueDepth = 2, 32
	ns := openLoop(t, lt, cfg)
	// Extents of 4 KiB to 128 KiB in random order.
	verifyExtents(t, ns, size, rand.New(rand.NewPCG(1, 2)), 4096, 32)
}

func TestLoopbackMultiQueue(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, 4<<20, target.PortConfig{MaxIOQueues: 3}, target.SubsystemConfig{})
	cfg := hostConfig()
	cfg.IOQueues = 4
	c := connectLoop(t, lt, cfg)
	if n, _ := c.IOQueues(); n != 3 {
		t.Errorf("got %d I/O queues, want the 3 the target grants", n)
	}
	ns, err := c.Namespace(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	buf, _ := ns.AllocBuffer(4096)
	for q := range 3 {
		copy(buf.Bytes(), bytes.Repeat([]byte{byte(q + 1)}, 4096))
		if err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpWrite, Offset: int64(q) * 4096, Length: 4096, Buf: buf, Queue: q}); err != nil {
			t.Fatalf("write on queue %d: %v", q, err)
		}
	}
	for q := range 3 {
		if err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpRead, Offset: int64(q) * 4096, Length: 4096, Buf: buf, Queue: 2 - q}); err != nil {
			t.Fatalf("read on queue %d: %v", 2-q, err)
		}
		if buf.Bytes()[0] != byte(q+1) || buf.Bytes()[4095] != byte(q+1) {
			t.Errorf("block %d read back %d, want %d", q, buf.Bytes()[0], q+1)
		}
	}
}

func TestLoopbackWrongSubsystem(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, 1<<20, target.PortConfig{}, target.SubsystemConfig{})
	p, _ := iwarp.New(iwarp.Config{})
	_, err := Connect(context.Background(), p, lt.addr, "nqn.2026-11.io.rdisk:nonexistent", hostConfig())
	var ce *ConnectError
	if !errors.As(err, &ce) || ce.Status.Code() != nvmeof.StatusConnectInvalidParameters {
		t.Fatalf("Connect to a wrong NQN: %v, want a ConnectError with Connect Invalid Parameters", err)
	}
	t.Logf("wrong NQN: %v", err)
}

func TestLoopbackHostNotAllowed(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, 1<<20, target.PortConfig{}, target.SubsystemConfig{AllowedHosts: []string{"nqn.2026-11.io.rdisk:someone-else"}})
	p, _ := iwarp.New(iwarp.Config{})
	_, err := Connect(context.Background(), p, lt.addr, loopNQN, hostConfig())
	var ce *ConnectError
	if !errors.As(err, &ce) {
		t.Fatalf("Connect from a host not allowed: %v, want a ConnectError", err)
	}
	t.Logf("host not allowed: %v", err)
}

func TestLoopbackOutOfRange(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, 1<<20, target.PortConfig{}, target.SubsystemConfig{})
	ns := openLoop(t, lt, hostConfig())
	// Bypass blockdev.Check by lying about the size: the target must answer
	// LBA Out of Range, which maps to blockdev.ErrRange.
	setSize(ns, 2<<20)
	buf, _ := ns.AllocBuffer(4096)
	err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpRead, Offset: 1 << 20, Length: 4096, Buf: buf})
	var se *StatusError
	if !errors.As(err, &se) || !errors.Is(err, blockdev.ErrRange) {
		t.Fatalf("read past the end: %v, want an LBA Out of Range status", err)
	}
	// The controller still works.
	setSize(ns, 1<<20)
	if err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpRead, Length: 4096, Buf: buf}); err != nil {
		t.Fatalf("read after the error: %v", err)
	}
}

func TestLoopbackNamespaceEvent(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, 1<<20, target.PortConfig{}, target.SubsystemConfig{})
	events := make(chan Event, 4)
	cfg := hostConfig()
	cfg.OnEvent = func(e Event) { events <- e }
	c := connectLoop(t, lt, cfg)
	disk, _ := backstore.NewMem(1<<20, 512)
	if err := lt.sub.AddNamespace(target.NamespaceConfig{NSID: 2, Disk: disk}); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-events:
		if e.Type != nvmeof.AsyncEventNotice || e.Info != nvmeof.NoticeNSChanged {
			t.Fatalf("event %+v: want a namespace attribute notice", e)
		}
		if !e.AllNamespaces && (len(e.Namespaces) != 1 || e.Namespaces[0] != 2) {
			t.Errorf("changed namespaces %v, want [2]", e.Namespaces)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no asynchronous event after adding a namespace")
	}
	list, err := c.ActiveNamespaces(context.Background())
	if err != nil || len(list) != 2 {
		t.Errorf("ActiveNamespaces after the event: %v, %v", list, err)
	}
}

// TestLoopbackRegisterBuffer: caller-owned memory registered with
// RegisterBuffer works for I/O; Done closes when the controller goes.
func TestLoopbackRegisterBuffer(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, 1<<20, target.PortConfig{}, target.SubsystemConfig{})
	ns := openLoop(t, lt, hostConfig())
	mem := make([]byte, 3*4096+100) // unaligned length, plain Go memory
	buf, err := ns.RegisterBuffer(mem)
	if err != nil {
		t.Fatal(err)
	}
	for i := range mem {
		mem[i] = byte(i * 7)
	}
	if err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpWrite, Offset: 8192, Length: 8192, Buf: buf, BufOff: 100}); err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(mem[100 : 100+8192])
	clear(mem)
	if err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpRead, Offset: 8192, Length: 8192, Buf: buf, BufOff: 3}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mem[3:3+8192], want) {
		t.Fatal("data read into a registered caller buffer differs")
	}
	buf.Release()
	if err := ns.Submit(&blockdev.Request{Op: blockdev.OpRead, Length: 512, Buf: buf, C: make(chan *blockdev.Request, 1)}); !errors.Is(err, blockdev.ErrBuffer) {
		t.Errorf("Submit with a released buffer: %v, want ErrBuffer", err)
	}
	select {
	case <-ns.Done():
		t.Fatal("Done closed while the controller works")
	default:
	}
	ns.Controller().Close()
	select {
	case <-ns.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after Close")
	}
}
