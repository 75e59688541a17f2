package host

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdisk/rdisk/nvmeof/target"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/iwarp"
)

// TestLoopbackTeardownWhileConnecting: the target tears down the controller
// of hosts that are still connecting their I/O queues, through each of its
// live-management calls (DeleteController, Port.UnlinkSubsystem,
// Target.RemovePort), over both transports. Each Connect succeeds or fails
// promptly (well within its timeouts), the controller's failure racing
// Connect's setting up of the I/O queues is no data race (for the race
// detector), and nothing of a failed Connect is left: no controller on the
// target, no goroutine of a controller or queue, no protection domain or
// queue pair (RDMA).
//
// It does not run in parallel: it counts the host's goroutines.
func TestLoopbackTeardownWhileConnecting(t *testing.T) {
	for _, tr := range []Transport{TransportTCP, TransportRDMA} {
		for _, how := range []string{"DeleteController", "UnlinkSubsystem", "RemovePort"} {
			t.Run(string(tr)+"/"+how, func(t *testing.T) { testTeardownWhileConnecting(t, tr, how) })
		}
	}
}

func testTeardownWhileConnecting(t *testing.T, tr Transport, how string) {
	const (
		hosts    = 4
		ioQueues = 16
		// prompt bounds one Connect; its timeouts are far longer, so a
		// Connect left waiting for a queue that no one fails shows.
		prompt  = 10 * time.Second
		timeout = time.Minute
	)
	before := hostGoroutines()
	pc := target.PortConfig{}
	if tr == TransportTCP {
		pc = tcpPort()
	}
	lt := startTarget(t, 1<<20, pc, target.SubsystemConfig{})
	var prov rdma.Provider
	var counted *countingProvider
	if tr == TransportRDMA {
		p, err := iwarp.New(iwarp.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		counted = &countingProvider{Provider: p}
		prov = counted
	}
	cfg := hostConfig()
	cfg.Transport, cfg.IOQueues, cfg.QueueDepth = tr, ioQueues, 8
	cfg.ConnectTimeout, cfg.CommandTimeout = timeout, timeout

	// The operator: tears down the controllers of the subsystem with an odd
	// ID that have some but not all of their I/O queues connected (their
	// hosts are in the middle of Connect), the others get through (unless
	// the teardown takes them too: UnlinkSubsystem and RemovePort end all
	// the port's controllers of the subsystem).
	stop := make(chan struct{})
	var torn atomic.Int64
	var opWG sync.WaitGroup
	opWG.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, c := range lt.tg.Controllers() {
				if c.Subsystem != loopNQN || c.CNTLID%2 == 0 || c.IOQueues == 0 || c.IOQueues == ioQueues {
					continue
				}
				var err error
				switch how {
				case "DeleteController":
					err = lt.tg.DeleteController(loopNQN, c.CNTLID)
				case "UnlinkSubsystem":
					p := lt.tg.Port(1)
					if err = p.UnlinkSubsystem(loopNQN); err == nil {
						p.LinkSubsystem(lt.sub)
					}
				case "RemovePort":
					if err = lt.tg.RemovePort(1); err == nil {
						pc := pc
						pc.ID, pc.Addr = 1, lt.addr
						var p *target.Port
						if p, err = lt.tg.AddPort(pc); err == nil {
							p.LinkSubsystem(lt.sub)
						}
					}
				}
				if err != nil {
					t.Errorf("%s: %v", how, err)
					return
				}
				torn.Add(1)
				break
			}
			runtime.Gosched()
		}
	})

	// The hosts: connect until there were enough teardowns and failed
	// Connects (or the time is up), closing those that succeeded.
	var failed, connected, slowest atomic.Int64
	deadline := time.Now().Add(3 * time.Second)
	var hostWG sync.WaitGroup
	for range hosts {
		hostWG.Go(func() {
			for (torn.Load() < 10 || failed.Load() < 10) && time.Now().Before(deadline) && !t.Failed() {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				start := time.Now()
				c, err := Connect(ctx, prov, lt.addr, loopNQN, cfg)
				took := time.Since(start)
				cancel()
				for old := slowest.Load(); int64(took) > old && !slowest.CompareAndSwap(old, int64(took)); old = slowest.Load() {
				}
				if took > prompt {
					t.Errorf("Connect took %v (error %v)", took, err)
				}
				if err != nil {
					failed.Add(1)
					if failed.Load() <= 3 {
						t.Logf("Connect failed after %v: %v", took, err)
					}
					continue
				}
				connected.Add(1)
				c.Close()
			}
		})
	}
	hostWG.Wait()
	close(stop)
	opWG.Wait()
	t.Logf("%d Connects failed, %d succeeded (the slowest took %v); %d teardowns", failed.Load(), connected.Load(), time.Duration(slowest.Load()), torn.Load())
	if torn.Load() == 0 || failed.Load() == 0 {
		t.Error("no controller torn down during its Connect, or no Connect failed")
	}
	// Every queue of the failed Connects was closed: the target sees no
	// controller, the host runs no goroutine of a controller or queue.
	waitFor(t, "the target's controllers to end", func() bool { return len(lt.tg.Controllers()) == 0 })
	waitFor(t, "the host's goroutines to end", func() bool { return hostGoroutines() <= before })
	if counted != nil {
		if pds, qps := counted.pds.Load(), counted.qps.Load(); pds != 0 || qps != 0 {
			t.Errorf("%d protection domains and %d queue pairs left open", pds, qps)
		}
	}
}

// countingProvider counts the protection domains and queue pairs open.
type countingProvider struct {
	rdma.Provider
	pds, qps atomic.Int64
}

func (p *countingProvider) AllocPD() (rdma.PD, error) {
	pd, err := p.Provider.AllocPD()
	if err != nil {
		return nil, err
	}
	p.pds.Add(1)
	return &countingPD{PD: pd, p: p}, nil
}

type countingPD struct {
	rdma.PD
	p    *countingProvider
	once sync.Once
}

func (pd *countingPD) CreateQP(cfg rdma.QPConfig) (rdma.QP, error) {
	qp, err := pd.PD.CreateQP(cfg)
	if err != nil {
		return nil, err
	}
	pd.p.qps.Add(1)
	return &countingQP{QP: qp, p: pd.p}, nil
}

func (pd *countingPD) Close() error {
	pd.once.Do(func() { pd.p.pds.Add(-1) })
	return pd.PD.Close()
}

type countingQP struct {
	rdma.QP
	p    *countingProvider
	once sync.Once
}

func (qp *countingQP) Close() error {
	qp.once.Do(func() { qp.p.qps.Add(-1) })
	return qp.QP.Close()
}

// hostGoroutines counts the goroutines running code of a host controller
// or queue.
func hostGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		for _, fn := range []string{"nvmeof/host.(*Controller)", "nvmeof/host.(*tcpQueue)", "nvmeof/host.(*rdmaQueue)", "rdmaq.(*HostQueue"} {
			if strings.Contains(g, fn) {
				count++
				break
			}
		}
	}
	return count
}

// waitFor waits up to 10 s for cond.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
