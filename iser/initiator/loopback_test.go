package initiator_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/blockdev/blockdevtest"
	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/iser/initiator"
	"github.com/rdisk/rdisk/iser/target"
	"github.com/rdisk/rdisk/rdma/iwarp"
	"github.com/rdisk/rdisk/scsi"
)

// End-to-end tests: this initiator against rdisk's iSCSI target
// (iser/target) on 127.0.0.1, over iSCSI/TCP and over iSER on the pure-Go
// iWARP provider, through the one portal.

const (
	testIQN       = "iqn.2026-11.io.rdisk:test"
	testInitiator = "iqn.2026-11.io.rdisk:initiator"
)

func testLogger() *slog.Logger {
	if os.Getenv("RDISK_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

type loop struct {
	tg   *target.Target
	addr string
	prov *iwarp.Provider
	disk *backstore.Mem
}

// startTarget serves one target with a RAM LUN 0 of size bytes; edit
// changes the configuration first.
func startTarget(t testing.TB, size int64, edit func(*target.Config)) *loop {
	t.Helper()
	p, err := iwarp.New(iwarp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	disk, err := backstore.NewMem(size, 512)
	if err != nil {
		t.Fatal(err)
	}
	cfg := target.Config{
		Targets:  []target.TargetConfig{{Name: testIQN, LUNs: []target.LUNConfig{{LUN: 0, Disk: disk}}}},
		Provider: p,
		Logger:   testLogger(),
	}
	if edit != nil {
		edit(&cfg)
	}
	tg, err := target.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- tg.Serve(context.Background(), ln) }()
	t.Cleanup(func() {
		tg.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		p.Close()
	})
	return &loop{tg: tg, addr: ln.Addr().String(), prov: p, disk: disk}
}

// config returns an initiator configuration on its own provider.
func (l *loop) config(t testing.TB) initiator.Config {
	p, err := iwarp.New(iwarp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return initiator.Config{InitiatorName: testInitiator, Provider: p, Logger: testLogger(), CommandTimeout: 20 * time.Second}
}

func (l *loop) url(tr iser.Transport) initiator.URL {
	host, port, _ := net.SplitHostPort(l.addr)
	var n int
	fmt.Sscan(port, &n)
	return initiator.URL{Transport: tr, Host: host, Port: n, Target: testIQN}
}

var transports = []struct {
	name string
	tr   iser.Transport
}{{"tcp", iser.TransportTCP}, {"iser", iser.TransportISER}}

func TestConformance(t *testing.T) {
	for _, x := range transports {
		t.Run(x.name, func(t *testing.T) {
			l := startTarget(t, 16<<20, nil)
			blockdevtest.Run(t, func(t *testing.T) blockdev.Device {
				d, err := initiator.Open(context.Background(), l.url(x.tr), l.config(t))
				if err != nil {
					t.Fatal(err)
				}
				return d
			})
		})
	}
}

// TestRandomWriteVerify writes 64 MiB of random data in random-sized
// pieces with many commands in flight, then reads it back.
func TestRandomWriteVerify(t *testing.T) {
	size := int64(64 << 20)
	if testing.Short() {
		size = 8 << 20
	}
	for _, x := range transports {
		t.Run(x.name, func(t *testing.T) {
			l := startTarget(t, size, nil)
			d, err := initiator.Open(context.Background(), l.url(x.tr), l.config(t))
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			info := d.Info()
			if info.Size != size || info.BlockSize != 512 {
				t.Fatalf("info %+v, want %d bytes of 512-byte blocks", info, size)
			}
			want := make([]byte, size)
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range want {
				want[i] = byte(rng.Uint32())
			}
			// Pieces of 4 KiB to 1 MiB, 16 in flight.
			type piece struct{ off, n int }
			var pieces []piece
			for off := 0; off < int(size); {
				n := min(int(size)-off, (1+rng.IntN(256))*4096)
				pieces = append(pieces, piece{off, n})
				off += n
			}
			rng.Shuffle(len(pieces), func(i, j int) { pieces[i], pieces[j] = pieces[j], pieces[i] })
			run := func(op blockdev.Op, mem []byte) {
				const inflight = 16
				bufs := make([]blockdev.Buffer, inflight)
				reqs := make([]blockdev.Request, inflight)
				c := make(chan *blockdev.Request, inflight)
				for i := range bufs {
					b, err := d.AllocBuffer(info.MaxTransfer)
					if err != nil {
						t.Fatal(err)
					}
					defer b.Release()
					bufs[i] = b
					reqs[i].Tag = uint64(i)
					c <- &reqs[i]
				}
				next := 0
				flight := 0
				pending := map[uint64]piece{}
				for next < len(pieces) || flight > 0 {
					r := <-c
					if r.Op != 0 {
						flight--
						if r.Err != nil {
							t.Fatalf("%v at %d: %v", r.Op, r.Offset, r.Err)
						}
						if op == blockdev.OpRead {
							p := pending[r.Tag]
							copy(mem[p.off:p.off+p.n], bufs[r.Tag].Bytes()[:p.n])
						}
					}
					if next == len(pieces) {
						r.Op = 0
						continue
					}
					p := pieces[next]
					next++
					if p.n > info.MaxTransfer {
						t.Fatalf("piece of %d bytes over the %d-byte limit", p.n, info.MaxTransfer)
					}
					*r = blockdev.Request{Op: op, Offset: int64(p.off), Length: p.n, Buf: bufs[r.Tag], Tag: r.Tag, C: c}
					if op == blockdev.OpWrite {
						copy(bufs[r.Tag].Bytes(), want[p.off:p.off+p.n])
					}
					pending[r.Tag] = p
					if err := d.Submit(r); err != nil {
						t.Fatal(err)
					}
					flight++
				}
			}
			run(blockdev.OpWrite, nil)
			if err := blockdev.Flush(d); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, size)
			run(blockdev.OpRead, got)
			if !bytes.Equal(got, want) {
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("data differs first at byte %d", i)
					}
				}
			}
			// The disk itself holds the data too.
			disk := make([]byte, 1<<20)
			if err := l.disk.ReadAt(disk, size/2); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(disk, want[size/2:size/2+1<<20]) {
				t.Fatal("the backstore does not hold what was written")
			}
		})
	}
}

func TestCHAP(t *testing.T) {
	chap := &iser.CHAPSecret{User: "user1", Secret: "secret-secret-1"}
	mutual := &iser.CHAPSecret{User: "target1", Secret: "secret-secret-2"}
	l := startTarget(t, 1<<20, func(c *target.Config) {
		c.Targets[0].CHAP = chap
		c.Targets[0].MutualCHAP = mutual
		c.DiscoveryCHAP = chap
	})
	for _, x := range transports {
		t.Run(x.name, func(t *testing.T) {
			ctx := context.Background()
			cfg := l.config(t)
			// Without credentials: refused with an authentication failure.
			_, err := initiator.Login(ctx, x.tr, l.addr, testIQN, cfg)
			var st iser.LoginStatus
			if !errors.As(err, &st) || st != iser.LoginAuthFailed {
				t.Fatalf("login without CHAP: %v, want %v", err, iser.LoginAuthFailed)
			}
			bad := cfg
			bad.CHAP = &iser.CHAPSecret{User: "user1", Secret: "wrong-secret-12"}
			if _, err := initiator.Login(ctx, x.tr, l.addr, testIQN, bad); !errors.As(err, &st) || st != iser.LoginAuthFailed {
				t.Fatalf("login with a wrong secret: %v, want %v", err, iser.LoginAuthFailed)
			}
			good := cfg
			good.CHAP = chap
			s, err := initiator.Login(ctx, x.tr, l.addr, testIQN, good)
			if err != nil {
				t.Fatal(err)
			}
			if s.Params().AuthMethod != "CHAP" {
				t.Errorf("AuthMethod %q", s.Params().AuthMethod)
			}
			if err := s.Logout(ctx); err != nil {
				t.Fatal(err)
			}
			good.MutualCHAP = mutual
			s, err = initiator.Login(ctx, x.tr, l.addr, testIQN, good)
			if err != nil {
				t.Fatalf("mutual CHAP: %v", err)
			}
			s.Logout(ctx)
			good.MutualCHAP = &iser.CHAPSecret{User: "target1", Secret: "not-the-secret!"}
			if _, err := initiator.Login(ctx, x.tr, l.addr, testIQN, good); err == nil {
				t.Fatal("mutual CHAP with the wrong target secret succeeded")
			}
			if _, err := initiator.Discover(ctx, x.tr, l.addr, cfg); err == nil {
				t.Fatal("discovery without CHAP succeeded")
			}
			good.MutualCHAP = nil
			recs, err := initiator.Discover(ctx, x.tr, l.addr, good)
			if err != nil || len(recs) != 1 || recs[0].Name != testIQN {
				t.Fatalf("discovery with CHAP: %v, %v", recs, err)
			}
		})
	}
}

func TestDiscoveryAndACL(t *testing.T) {
	l := startTarget(t, 1<<20, func(c *target.Config) {
		d2, _ := backstore.NewMem(1<<20, 512)
		c.Targets = append(c.Targets, target.TargetConfig{Name: testIQN + "-acl", AllowedInitiators: []string{"iqn.2026-11.io.rdisk:other"},
			LUNs: []target.LUNConfig{{LUN: 3, Disk: d2}}})
	})
	ctx := context.Background()
	for _, x := range transports {
		t.Run(x.name, func(t *testing.T) {
			cfg := l.config(t)
			recs, err := initiator.Discover(ctx, x.tr, l.addr, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 1 || recs[0].Name != testIQN || len(recs[0].Addresses) != 1 || recs[0].Addresses[0] != l.addr+",1" {
				t.Fatalf("SendTargets: %+v", recs)
			}
			_, err = initiator.Login(ctx, x.tr, l.addr, testIQN+"-acl", cfg)
			var st iser.LoginStatus
			if !errors.As(err, &st) || st != iser.LoginForbidden {
				t.Fatalf("login outside the ACL: %v, want %v", err, iser.LoginForbidden)
			}
			_, err = initiator.Login(ctx, x.tr, l.addr, testIQN+"-none", cfg)
			if !errors.As(err, &st) || st != iser.LoginNotFound {
				t.Fatalf("login to an unknown target: %v, want %v", err, iser.LoginNotFound)
			}
			other := cfg
			other.InitiatorName = "iqn.2026-11.io.rdisk:other"
			recs, err = initiator.Discover(ctx, x.tr, l.addr, other)
			if err != nil || len(recs) != 2 {
				t.Fatalf("SendTargets for the ACL's initiator: %+v, %v", recs, err)
			}
			s, err := initiator.Login(ctx, x.tr, l.addr, testIQN+"-acl", other)
			if err != nil {
				t.Fatal(err)
			}
			// SendTargets in a normal session, and a NOP ping.
			recs, err = s.SendTargets(ctx, "")
			if err != nil || len(recs) != 1 || recs[0].Name != testIQN+"-acl" {
				t.Fatalf("SendTargets in a normal session: %+v, %v", recs, err)
			}
			if err := s.Ping(ctx, []byte("ping data")); err != nil {
				t.Fatal(err)
			}
			// REPORT LUNS shows LUN 3.
			rl := make([]byte, 64)
			cmd := initiator.Command{LUN: 3, CDB: []byte{scsi.OpReportLUNs, 0, 0, 0, 0, 0, 0, 0, 0, 64, 0, 0}, DataIn: rl}
			for range 3 { // the first command reports the power-on unit attention
				if err := s.Execute(ctx, &cmd); err != nil {
					t.Fatal(err)
				}
				if cmd.Status == scsi.StatusGood {
					break
				}
			}
			if cmd.Status != scsi.StatusGood || rl[3] != 8 || rl[9] != 3 {
				t.Fatalf("REPORT LUNS: status %v, data % x", cmd.Status, rl[:16])
			}
			if _, err := s.Device(ctx, 3); err != nil {
				t.Fatal(err)
			}
			if err := s.Logout(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestTaskManagement aborts commands held up by a slow disk.
func TestTaskManagement(t *testing.T) {
	for _, x := range transports {
		t.Run(x.name, func(t *testing.T) {
			slow := &slowDisk{Mem: mustMem(t, 1<<20), gate: make(chan struct{})}
			l := startTarget(t, 1<<20, func(c *target.Config) {
				c.Targets[0].LUNs[0].Disk = slow
			})
			ctx := context.Background()
			cfg := l.config(t)
			s, err := initiator.Login(ctx, x.tr, l.addr, testIQN, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			d, err := s.Device(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			buf, _ := d.AllocBuffer(4096)
			defer buf.Release()
			// An ABORT TASK of a task that does not exist.
			if r, err := s.TaskManagement(ctx, iser.TMFAbortTask, 0, 0x1234); err != nil || r != iser.TMFNoTask {
				t.Fatalf("ABORT TASK of nothing: %d, %v", r, err)
			}
			// Block the disk, start reads, reset the LUN: the reads are
			// aborted (no response), the TMF completes, and the
			// initiator... waits for them: they fail when the session
			// closes.
			slow.block.Store(true)
			c := make(chan *blockdev.Request, 4)
			reqs := make([]blockdev.Request, 4)
			for i := range reqs {
				reqs[i] = blockdev.Request{Op: blockdev.OpRead, Offset: int64(i) * 4096, Length: 4096, Buf: buf, C: c}
				if err := d.Submit(&reqs[i]); err != nil {
					t.Fatal(err)
				}
			}
			slow.waitEntered(t, 1)
			done := make(chan uint8, 1)
			go func() {
				r, err := s.TaskManagement(ctx, iser.TMFLogicalUnitReset, 0, 0)
				if err != nil {
					t.Error(err)
				}
				done <- r
			}()
			time.Sleep(50 * time.Millisecond)
			close(slow.gate)
			if r := <-done; r != iser.TMFComplete {
				t.Fatalf("LUN RESET: response %d", r)
			}
			// The aborted commands never complete on their own; a ping
			// still works.
			if err := s.Ping(ctx, nil); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-c:
				t.Fatalf("aborted read completed: %v", r.Err)
			case <-time.After(100 * time.Millisecond):
			}
			s.Close()
			for range reqs {
				r := <-c
				if !errors.Is(r.Err, blockdev.ErrClosed) {
					t.Errorf("aborted read after close: %v", r.Err)
				}
			}
		})
	}
}

func mustMem(t testing.TB, n int64) *backstore.Mem {
	m, err := backstore.NewMem(n, 512)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// slowDisk blocks reads while block is set, until gate closes.
type slowDisk struct {
	*backstore.Mem
	block   atomicBool
	gate    chan struct{}
	mu      sync.Mutex
	entered int
}

// Traits: reads may block, so the target must run them on workers.
func (d *slowDisk) Traits() backstore.Traits {
	return backstore.Traits{Waits: backstore.WaitsAlways, ZeroesAfterDiscard: true}
}

type atomicBool struct {
	mu sync.Mutex
	v  bool
}

func (b *atomicBool) Store(v bool) { b.mu.Lock(); b.v = v; b.mu.Unlock() }
func (b *atomicBool) Load() bool   { b.mu.Lock(); defer b.mu.Unlock(); return b.v }

func (d *slowDisk) ReadAt(p []byte, off int64) error {
	if d.block.Load() {
		d.mu.Lock()
		d.entered++
		d.mu.Unlock()
		<-d.gate
	}
	return d.Mem.ReadAt(p, off)
}

func (d *slowDisk) waitEntered(t *testing.T, n int) {
	for i := 0; i < 500; i++ {
		d.mu.Lock()
		e := d.entered
		d.mu.Unlock()
		if e >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no read reached the disk")
}

// TestSteadyStateAllocs checks that reads and writes, once buffers and
// slots are warm, allocate (almost) nothing on either side.
func TestSteadyStateAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, x := range transports {
		t.Run(x.name, func(t *testing.T) {
			l := startTarget(t, 8<<20, nil)
			d, err := initiator.Open(context.Background(), l.url(x.tr), l.config(t))
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			const inflight = 8
			c := make(chan *blockdev.Request, inflight)
			reqs := make([]blockdev.Request, inflight)
			for i := range reqs {
				b, err := d.AllocBuffer(8192)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Release()
				reqs[i] = blockdev.Request{Buf: b, Length: 8192, C: c}
			}
			run := func(n int) {
				for i := range reqs {
					r := &reqs[i]
					r.Op, r.Offset = blockdev.OpWrite, int64(i)*8192
					if err := d.Submit(r); err != nil {
						t.Fatal(err)
					}
				}
				for i := 0; i < n; i++ {
					r := <-c
					if r.Err != nil {
						t.Fatal(r.Err)
					}
					r.Op = blockdev.OpRead + blockdev.Op(i%2)
					r.Offset = int64(i%1000) * 8192
					if err := d.Submit(r); err != nil {
						t.Fatal(err)
					}
				}
				for range reqs {
					<-c
				}
			}
			run(2000) // warm up: buffers, maps, goroutine stacks
			var a, b runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&a)
			const n = 5000
			run(n)
			runtime.ReadMemStats(&b)
			per := float64(b.Mallocs-a.Mallocs) / n
			t.Logf("%.3f allocations per I/O (initiator and target)", per)
			if per > 0.5 {
				t.Errorf("%.3f allocations per I/O in the steady state", per)
			}
		})
	}
}
