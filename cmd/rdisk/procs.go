package main

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/rdisk/rdisk/internal/sysmon"
	"github.com/urfave/cli/v2"
)

// Why rdisk sizes GOMAXPROCS: one queue is a pipeline of goroutines (the
// transport's receiver and transmitter, the queue's command loop) that hand
// every I/O to each other. With more Ps than busy queues, each hand-off
// wakes another OS thread on another core to run the woken goroutine, and
// on a small machine shared with the initiator that core is busy with the
// other process: a context switch and a cache miss per hand-off. One P per
// busy queue keeps a queue's pipeline on one thread, as SPDK runs one
// reactor per core and fio one thread per job. On this project's 2-core
// test machine it raised 128 KiB reads at QD8 on one queue from about 1.7
// to 2.5-3.0 GB/s and 4 KiB reads at QD32 by a quarter, while four queues
// still get both cores.

// cpusFlag is the --cpus flag of commands that size GOMAXPROCS; def says
// what happens without it.
func cpusFlag(usage, def string) cli.Flag {
	return &cli.IntFlag{Name: "cpus", Usage: usage, DefaultText: def}
}

// maxProcs returns the most Ps the command may use: --cpus when given
// (validated), else GOMAXPROCS from the environment (Go's own default: the
// CPUs available).
func maxProcs(c *cli.Context) (int, error) {
	if c.IsSet("cpus") {
		n := c.Int("cpus")
		if n < 1 || n > 1024 {
			return 0, fmt.Errorf("--cpus %d: want 1 to 1024", n)
		}
		return n, nil
	}
	return runtime.GOMAXPROCS(0), nil
}

// adjustProcs tells whether rdisk sizes GOMAXPROCS itself: unless the
// environment fixed GOMAXPROCS and --cpus is not given.
func adjustProcs(c *cli.Context) bool {
	return c.IsSet("cpus") || os.Getenv("GOMAXPROCS") == ""
}

// procHook returns the connection hook of a server that keeps one P per
// busy connection (see procGovernor), or nil when rdisk leaves GOMAXPROCS
// alone (adjustProcs).
func procHook(c *cli.Context, log *slog.Logger) (func(delta int), error) {
	maxp, err := maxProcs(c)
	if err == nil {
		err = setSysmonSlack(c, log)
	}
	if err != nil || !adjustProcs(c) {
		return nil, err
	}
	return newProcGovernor(maxp, runtime.GOMAXPROCS, log).hook, nil
}

// setProcs gives a client one P per queue it drives: n, at most
// maxProcs, or exactly --cpus when given; nothing when rdisk leaves
// GOMAXPROCS alone (adjustProcs). It applies --sysmon-slack too.
func setProcs(c *cli.Context, n int, log *slog.Logger) error {
	maxp, err := maxProcs(c)
	if err == nil {
		err = setSysmonSlack(c, log)
	}
	if err != nil || !adjustProcs(c) {
		return err
	}
	if c.IsSet("cpus") {
		n = maxp
	}
	runtime.GOMAXPROCS(min(n, maxp))
	return nil
}

// procGovernor keeps GOMAXPROCS at the number of busy queues, between 1 and
// max. Targets report queues through hook.
type procGovernor struct {
	max int
	set func(int) int // runtime.GOMAXPROCS; replaced in tests
	log *slog.Logger

	mu     sync.Mutex
	queues int
	cur    int
}

func newProcGovernor(max int, set func(int) int, log *slog.Logger) *procGovernor {
	g := &procGovernor{max: max, set: set, log: log}
	g.apply()
	return g
}

// hook is the targets' ConnHook: delta +1 when a queue connects, -1 when it
// ends.
func (g *procGovernor) hook(delta int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.queues += delta
	g.apply()
}

func (g *procGovernor) apply() {
	n := min(max(g.queues, 1), g.max)
	if n != g.cur {
		g.set(n)
		g.cur = n
		g.log.Debug("GOMAXPROCS set", "procs", n, "busy_queues", g.queues, "max", g.max)
	}
}

// sysmonFlag is the --sysmon-slack flag of the long-running commands; see
// package internal/sysmon for why.
func sysmonFlag() cli.Flag {
	return &cli.DurationFlag{Name: "sysmon-slack", Value: time.Millisecond,
		Usage: "timer slack of the Go runtime's monitor thread, which otherwise wakes every ~70 µs under I/O and takes Ps away from system and cgo calls (0: leave it; at most 10ms; needs CAP_SYS_NICE)"}
}

// setSysmonSlack applies --sysmon-slack after checking it. Failing to
// find or set the thread is not fatal: rdisk runs as before, slower, and
// says why.
func setSysmonSlack(c *cli.Context, log *slog.Logger) error {
	d := c.Duration("sysmon-slack")
	if d < 0 || d > sysmon.MaxSlack {
		return fmt.Errorf("--sysmon-slack %v: want 0 (off) to %v", d, sysmon.MaxSlack)
	}
	if d == 0 {
		return nil
	}
	tid, err := sysmon.SetSlack(d)
	if err != nil {
		log.Info("runtime monitor's timer slack left at the default (--sysmon-slack)", "err", err)
		return nil
	}
	log.Debug("runtime monitor's timer slack set", "thread", tid, "slack", d)
	return nil
}
