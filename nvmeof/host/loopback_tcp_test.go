package host

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/blockdev/blockdevtest"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/target"
	"github.com/rdisk/rdisk/rdma/iwarp"
)

// End-to-end NVMe/TCP tests: this host against rdisk's own target on a
// TCP port (and a port serving both transports) on 127.0.0.1.

func tcpPort() target.PortConfig { return target.PortConfig{Transport: target.TransportTCP} }

func tcpConfig(hdgst, ddgst bool) Config {
	cfg := hostConfig()
	cfg.Transport, cfg.HeaderDigest, cfg.DataDigest = TransportTCP, hdgst, ddgst
	return cfg
}

func connectTCPLoop(t testing.TB, lt *loopTarget, cfg Config) *Controller {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Connect(ctx, nil, lt.addr, loopNQN, cfg)
	if err != nil {
		t.Fatalf("Connect over TCP: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func openTCPLoop(t testing.TB, lt *loopTarget, cfg Config) *Namespace {
	t.Helper()
	c := connectTCPLoop(t, lt, cfg)
	ns, err := c.Namespace(context.Background(), 1)
	if err != nil {
		t.Fatalf("Namespace(1): %v", err)
	}
	return ns
}

func TestTCPLoopbackIdentify(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, 16<<20, tcpPort(), target.SubsystemConfig{})
	c := connectTCPLoop(t, lt, tcpConfig(false, false))
	id := c.Identify()
	if id.SUBNQN != loopNQN || id.CNTLID != c.CNTLID() || id.KAS == 0 {
		t.Errorf("identify: SUBNQN %q CNTLID %d (connect %d) KAS %d", id.SUBNQN, id.CNTLID, c.CNTLID(), id.KAS)
	}
	t.Logf("TCP controller: IOCCSZ %d (in-capsule %d), MDTS %d, SGLS %#x, MAXCMD %d", id.IOCCSZ, c.InCapsuleSize(), id.MDTS, id.SGLS, id.MAXCMD)
	ctx := context.Background()
	list, err := c.ActiveNamespaces(ctx)
	if err != nil || len(list) != 1 || list[0] != 1 {
		t.Fatalf("ActiveNamespaces = %v, %v; want [1]", list, err)
	}
	ns, err := c.Namespace(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if in := ns.Info(); in.BlockSize != 512 || in.Size != 16<<20 || in.Name[:11] != "nvme+tcp://" {
		t.Errorf("namespace info %+v: want 512-byte blocks, 16 MiB, an nvme+tcp:// name", in)
	}
	if _, err := c.SMARTLog(ctx, nvmeof.NSIDAll); err != nil {
		t.Errorf("SMARTLog: %v", err)
	}
	if _, err := c.ErrorLog(ctx); err != nil {
		t.Errorf("ErrorLog: %v", err)
	}
	if err := c.KeepAlive(ctx); err != nil {
		t.Errorf("KeepAlive: %v", err)
	}
}

func TestTCPLoopbackConformance(t *testing.T) {
	t.Parallel()
	for _, dg := range []struct{ h, d bool }{{false, false}, {true, true}} {
		t.Run(fmt.Sprintf("hdgst=%v,ddgst=%v", dg.h, dg.d), func(t *testing.T) {
			t.Parallel()
			lt := startTarget(t, 8<<20, tcpPort(), target.SubsystemConfig{})
			blockdevtest.Run(t, func(t *testing.T) blockdev.Device {
				cfg := tcpConfig(dg.h, dg.d)
				cfg.IOQueues, cfg.QueueDepth, cfg.MaxTransfer = 2, 16, 64<<10
				return openTCPLoop(t, lt, cfg)
			})
		})
	}
}

func TestTCPLoopbackConformanceNoInCapsule(t *testing.T) {
	t.Parallel()
	lt := startTargetDisk(t, memDisk(t, 4<<20, true), tcpPort(), target.SubsystemConfig{})
	blockdevtest.Run(t, func(t *testing.T) blockdev.Device {
		cfg := tcpConfig(false, true)
		cfg.NoInCapsule, cfg.QueueDepth = true, 8
		return openTCPLoop(t, lt, cfg)
	})
}

// TestTCPLoopbackVerify writes random data at random 4 KiB..128 KiB extents
// (in-capsule writes up to the target's 4 KiB, R2T above) over two queues
// and reads it all back, with each digest setting.
func TestTCPLoopbackVerify(t *testing.T) {
	t.Parallel()
	for _, dg := range []struct{ h, d bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		t.Run(fmt.Sprintf("hdgst=%v,ddgst=%v", dg.h, dg.d), func(t *testing.T) {
			t.Parallel()
			size := 16 << 20
			if raceEnabled {
				size = 4 << 20
			}
			lt := startTarget(t, int64(size), tcpPort(), target.SubsystemConfig{})
			cfg := tcpConfig(dg.h, dg.d)
			cfg.IOQueues, cfg.QueueDepth = 2, 32
			verifyRandom(t, openTCPLoop(t, lt, cfg), size)
		})
	}
}

// verifyRandom writes random data over the first size bytes of ns in
// random extents of 512 bytes to 128 KiB, on all queues, and reads it back.
func verifyRandom(t *testing.T, ns *Namespace, size int) {
	verifyExtents(t, ns, size, rand.New(rand.NewPCG(7, uint64(size))), 512, 256)
}

// verifyExtents writes random data over the first size bytes of ns in
// extents of 1 to max units of unit bytes, in random order, spread over
// all queues, and reads it all back.
func verifyExtents(t *testing.T, ns *Namespace, size int, rng *rand.Rand, unit, max int) {
	want := make([]byte, size)
	for i := 0; i < size; i += 8 {
		binary.LittleEndian.PutUint64(want[i:], rng.Uint64())
	}
	type ext struct{ off, n int }
	var exts []ext
	for off := 0; off < size; {
		n := min((1+rng.IntN(max))*unit, size-off)
		exts = append(exts, ext{off, n})
		off += n
	}
	rng.Shuffle(len(exts), func(i, j int) { exts[i], exts[j] = exts[j], exts[i] })
	in := ns.Info()
	run := func(op blockdev.Op) {
		var wg sync.WaitGroup
		errs := make(chan error, in.Queues)
		for qi := range in.Queues {
			wg.Add(1)
			go func() {
				defer wg.Done()
				depth := in.QueueDepth
				buf, err := ns.AllocBuffer(depth * 128 << 10)
				if err != nil {
					errs <- err
					return
				}
				defer buf.Release()
				ch := make(chan *blockdev.Request, depth)
				reqs := make([]blockdev.Request, depth)
				mine := exts[qi*len(exts)/in.Queues : (qi+1)*len(exts)/in.Queues]
				next, inflight := 0, 0
				submit := func(r *blockdev.Request) error {
					e := mine[next]
					next++
					r.Op, r.Offset, r.Length, r.Queue, r.C = op, int64(e.off), e.n, qi, ch
					if op == blockdev.OpWrite {
						copy(buf.Bytes()[r.BufOff:], want[e.off:e.off+e.n])
					}
					inflight++
					return ns.Submit(r)
				}
				for i := range reqs {
					reqs[i].Buf, reqs[i].BufOff = buf, i*128<<10
					if next < len(mine) {
						if err := submit(&reqs[i]); err != nil {
							errs <- err
							return
						}
					}
				}
				for inflight > 0 {
					r := <-ch
					inflight--
					if r.Err != nil {
						errs <- r.Err
						return
					}
					if op == blockdev.OpRead && !bytes.Equal(buf.Bytes()[r.BufOff:r.BufOff+r.Length], want[r.Offset:r.Offset+int64(r.Length)]) {
						errs <- fmt.Errorf("data read back differs at offset %d (%d bytes)", r.Offset, r.Length)
						return
					}
					if next < len(mine) {
						if err := submit(r); err != nil {
							errs <- err
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("%s: %v", op, err)
		}
	}
	run(blockdev.OpWrite)
	run(blockdev.OpRead)
}

func TestTCPLoopbackMultiQueue(t *testing.T) {
	t.Parallel()
	pc := tcpPort()
	pc.MaxIOQueues = 3
	lt := startTarget(t, 4<<20, pc, target.SubsystemConfig{})
	cfg := tcpConfig(true, false)
	cfg.IOQueues = 4
	c := connectTCPLoop(t, lt, cfg)
	if n, _ := c.IOQueues(); n != 3 {
		t.Errorf("got %d I/O queues, want the 3 the target grants", n)
	}
	ns, err := c.Namespace(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	buf, _ := ns.AllocBuffer(64 << 10)
	for q := range 3 {
		copy(buf.Bytes(), bytes.Repeat([]byte{byte(q + 1)}, 64<<10))
		if err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpWrite, Offset: int64(q) * 64 << 10, Length: 64 << 10, Buf: buf, Queue: q}); err != nil {
			t.Fatalf("write on queue %d: %v", q, err)
		}
	}
	for q := range 3 {
		if err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpRead, Offset: int64(q) * 64 << 10, Length: 64 << 10, Buf: buf, Queue: 2 - q}); err != nil {
			t.Fatalf("read on queue %d: %v", 2-q, err)
		}
		if buf.Bytes()[0] != byte(q+1) || buf.Bytes()[64<<10-1] != byte(q+1) {
			t.Errorf("extent %d read back %d, want %d", q, buf.Bytes()[0], q+1)
		}
	}
}

// TestTCPLoopbackDiscovery: the discovery log of a TCP port lists TCP
// entries, which become nvme+tcp:// URLs.
func TestTCPLoopbackDiscovery(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, 1<<20, tcpPort(), target.SubsystemConfig{})
	log, err := Discover(context.Background(), nil, lt.addr, tcpConfig(false, false))
	if err != nil {
		t.Fatalf("Discover over TCP: %v", err)
	}
	found := false
	for _, e := range log.Entries {
		if e.SubNQN != loopNQN {
			continue
		}
		found = true
		u, ok := EntryURL(&e)
		if !ok || u.Transport != TransportTCP || u.Addr() != lt.addr || u.String()[:11] != "nvme+tcp://" {
			t.Errorf("entry %+v: URL %v, %v: want nvme+tcp://%s/...", e, u, ok, lt.addr)
		}
		// The URL opens the namespace.
		ns, err := Open(context.Background(), nil, u, hostConfig())
		if err != nil {
			t.Fatalf("Open(%s): %v", u, err)
		}
		ns.Close()
	}
	if !found {
		t.Errorf("discovery log %+v has no entry for %s", log, loopNQN)
	}
}

// TestTCPLoopbackBothTransports: one port number serves NVMe/RDMA and
// NVMe/TCP; both hosts see the same data.
func TestTCPLoopbackBothTransports(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, 1<<20, target.PortConfig{Transport: target.TransportBoth}, target.SubsystemConfig{})
	tns := openTCPLoop(t, lt, tcpConfig(true, true))
	rns := openLoop(t, lt, hostConfig())
	tb, _ := tns.AllocBuffer(8192)
	rb, _ := rns.AllocBuffer(8192)
	copy(tb.Bytes(), bytes.Repeat([]byte("tcp!"), 2048))
	if err := blockdev.Do(tns, &blockdev.Request{Op: blockdev.OpWrite, Offset: 8192, Length: 8192, Buf: tb}); err != nil {
		t.Fatal(err)
	}
	if err := blockdev.Do(rns, &blockdev.Request{Op: blockdev.OpRead, Offset: 8192, Length: 8192, Buf: rb}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rb.Bytes(), tb.Bytes()) {
		t.Error("RDMA host reads other data than the TCP host wrote")
	}
	// Buffers do not cross controllers.
	if err := rns.Submit(&blockdev.Request{Op: blockdev.OpRead, Length: 512, Buf: tb, C: make(chan *blockdev.Request, 1)}); !errors.Is(err, blockdev.ErrBuffer) {
		t.Errorf("RDMA Submit with a TCP controller's buffer: %v, want ErrBuffer", err)
	}
	if err := tns.Submit(&blockdev.Request{Op: blockdev.OpRead, Length: 512, Buf: rb, C: make(chan *blockdev.Request, 1)}); !errors.Is(err, blockdev.ErrBuffer) {
		t.Errorf("TCP Submit with an RDMA controller's buffer: %v, want ErrBuffer", err)
	}
	// An RDMA host on a TCP-only port fails cleanly, and a TCP host on an
	// RDMA-only port too.
	tcpOnly := startTarget(t, 1<<20, tcpPort(), target.SubsystemConfig{})
	p, _ := iwarp.New(iwarp.Config{})
	cfg := hostConfig()
	cfg.ConnectTimeout = 3 * time.Second
	if _, err := Connect(context.Background(), p, tcpOnly.addr, loopNQN, cfg); err == nil {
		t.Error("RDMA connect to a TCP-only port succeeded")
	} else {
		t.Logf("RDMA host on a TCP port: %v", err)
	}
	rdmaOnly := startTarget(t, 1<<20, target.PortConfig{}, target.SubsystemConfig{})
	cfg = tcpConfig(false, false)
	cfg.ConnectTimeout = 3 * time.Second
	if _, err := Connect(context.Background(), nil, rdmaOnly.addr, loopNQN, cfg); err == nil {
		t.Error("TCP connect to an RDMA-only port succeeded")
	} else {
		t.Logf("TCP host on an RDMA port: %v", err)
	}
}

// TestTCPLoopbackTargetCloses: the target goes away with I/O in flight;
// every request completes with an error and the controller fails.
func TestTCPLoopbackTargetCloses(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, 8<<20, tcpPort(), target.SubsystemConfig{})
	cfg := tcpConfig(false, false)
	cfg.IOQueues, cfg.QueueDepth = 2, 32
	ns := openTCPLoop(t, lt, cfg)
	buf, _ := ns.AllocBuffer(64 * 64 << 10)
	ch := make(chan *blockdev.Request, 64)
	reqs := make([]blockdev.Request, 64)
	var stop sync.Once
	inflight := 0
	for i := range reqs {
		op := blockdev.OpRead
		if i%2 == 1 {
			op = blockdev.OpWrite
		}
		reqs[i] = blockdev.Request{Op: op, Offset: int64(i) * 64 << 10, Length: 64 << 10, Buf: buf, BufOff: i * 64 << 10, Queue: i % 2, C: ch}
		if err := ns.Submit(&reqs[i]); err != nil {
			t.Fatal(err)
		}
		inflight++
	}
	failed := 0
	deadline := time.After(20 * time.Second)
	for resubmits := 0; inflight > 0; {
		select {
		case r := <-ch:
			inflight--
			if r.Err != nil {
				failed++
				if !errors.Is(r.Err, blockdev.ErrClosed) {
					t.Errorf("request: %v, want an error matching ErrClosed", r.Err)
				}
				continue
			}
			if resubmits++; resubmits == 200 {
				stop.Do(func() { go lt.tg.Close() })
			}
			if err := ns.Submit(r); err == nil {
				inflight++
			} else if !errors.Is(err, blockdev.ErrClosed) {
				t.Errorf("Submit: %v", err)
			}
		case <-deadline:
			t.Fatalf("%d requests still in flight 20s after the target closed", inflight)
		}
	}
	select {
	case <-ns.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("controller not failed after the target closed")
	}
	t.Logf("%d requests failed; controller: %v", failed, ns.Controller().Err())
}
