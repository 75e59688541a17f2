package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/initiator"
	"github.com/rdisk/rdisk/initiator/multipath"
	"github.com/rdisk/rdisk/internal/bench"
	"github.com/rdisk/rdisk/internal/plot"
	"github.com/rdisk/rdisk/internal/units"
	"github.com/rdisk/rdisk/nvmeof/host"
	"github.com/urfave/cli/v2"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:      "bench",
		Usage:     "load-test a remote disk, fio style (random/sequential read/write, latency percentiles, --verify)",
		ArgsUsage: "URL... (nvme://HOST[:PORT]/SUBNQN[/NSID] (RDMA; also nvme+rdma://), nvme+tcp://HOST[:PORT]/SUBNQN[/NSID], iser://HOST[:PORT]/IQN/LUN, iscsi://HOST[:PORT]/IQN/LUN, srp://HOST[:PORT]/ID_EXT/IOC_GUID/LUN; several URLs: paths of one disk, used with multipath failover as rdisk connect does)",
		Flags: append(append(append(append(hostIDFlags(), iscsiFlags()...), digestFlags()...), dhchapFlags()...),
			&cli.StringFlag{Name: "rw", Value: "randread", Usage: "read, write, randread, randwrite or randrw"},
			&cli.IntFlag{Name: "mix", Value: 50, Usage: "percentage of reads of randrw"},
			&cli.StringFlag{Name: "bs", Value: "4KiB", Usage: "I/O size"},
			&cli.IntFlag{Name: "qd", Value: 32, Usage: "I/Os in flight per job"},
			&cli.IntFlag{Name: "jobs", Value: 1, Usage: "jobs, each on its own queue and slice of the disk"},
			&cli.DurationFlag{Name: "runtime", Value: 10e9, Usage: "how long to run"},
			&cli.StringFlag{Name: "size", Usage: "use only the first SIZE bytes of the disk (default: all)"},
			&cli.BoolFlag{Name: "verify", Usage: "write self-describing blocks, check every read and read back everything written"},
			&cli.Uint64Flag{Name: "seed", Usage: "seed of offsets and verify data (default: from the clock; reuse it to verify an earlier run's blocks with --rw read --verify)"},
			&cli.IntFlag{Name: "queues", Usage: "I/O queues to connect (default: --jobs, or --jobs / --hosts)"},
			&cli.IntFlag{Name: "hosts", Value: 1, Usage: "connect this many times, each connection its own controller or session with --queues queues, as that many hosts would; jobs go to them in turn and the report adds each one's IOPS (default --jobs: --hosts × --queues)"},
			&cli.DurationFlag{Name: "idle", Usage: "once connected, wait this long before the run starts (e.g. to measure the target's memory with --hosts idle connections)"},
			&cli.DurationFlag{Name: "kato", Usage: "keep alive timeout (default 5s)"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object"},
			&cli.StringFlag{Name: "plot", Usage: "draw IOPS/bandwidth over time and the latency distribution to FILE.svg or FILE.png"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress line"},
			cpusFlag("CPUs (Go Ps) to use", "one per queue, like fio's thread per job, up to $GOMAXPROCS or all CPUs"),
			sysmonFlag(),
			policyFlag(),
			discoverFlag(),
			&cli.DurationFlag{Name: "loss-timeout", Value: initiator.DefaultLossTimeout, Usage: "with several URLs: how long I/O waits while no path is usable before it fails"},
			&cli.DurationFlag{Name: "reconnect-delay", Value: initiator.DefaultReconnectDelay, Usage: "with several URLs: pause between a lost path's reconnection attempts"},
		),
		Action: runBench,
	}
}

// ownedNVMe is an NVMe namespace with the RDMA provider opened for it:
// closing it closes both.
type ownedNVMe struct {
	nvmeDevice
	p interface{ Close() error }
}

func (d ownedNVMe) Close() error {
	err := d.nvmeDevice.Close()
	d.p.Close()
	return err
}

// openDevice connects to one URL; closing the device releases everything
// opened for it.
func openDevice(ctx context.Context, c *cli.Context, rawURL string, queues, depth int) (blockdev.Device, error) {
	scheme, _, _ := strings.Cut(rawURL, "://")
	switch strings.ToLower(scheme) {
	case "nvme", "nvme+rdma", "nvme+tcp":
	case "iser", "iscsi":
		o, err := iscsiOptionsFromFlags(c)
		if err != nil {
			return nil, err
		}
		o.QueueDepth = max(depth, 2)
		return openISCSIDevice(ctx, rawURL, o)
	case "srp":
		log, err := logger(c)
		if err != nil {
			return nil, err
		}
		choice, err := rdmaOf(c)
		if err != nil {
			return nil, err
		}
		return openSRPDevice(ctx, rawURL, srpOptions{Queues: queues, Depth: depth, Logger: log, RDMA: choice})
	default:
		return nil, fmt.Errorf("URL %q: want %s, iser://, iscsi:// or srp://", rawURL, nvmeURLUsage)
	}
	u, err := subsystemURL(rawURL)
	if err != nil {
		return nil, err
	}
	cfg, p, err := nvmeSetup(c)
	if err != nil {
		return nil, err
	}
	if err := applyURL(c, &cfg, u); err != nil {
		p.Close()
		return nil, err
	}
	cfg.IOQueues, cfg.QueueDepth = queues, max(depth, 2)
	if k := c.Duration("kato"); k != 0 {
		cfg.KATO = k
	}
	ns, err := host.Open(ctx, p, u, cfg)
	if err != nil {
		p.Close()
		return nil, err
	}
	return ownedNVMe{nvmeDevice{ns}, p}, nil
}

// openDisk opens the disk bench and cp work on: one URL, or several
// paths to one disk through a multipath device over reconnecting
// sessions (--policy, --loss-timeout), which logs the paths' state
// changes.
func openDisk(c *cli.Context, urls []string, queues, depth int) (blockdev.Device, error) {
	if len(urls) == 1 {
		return openDevice(c.Context, c, urls[0], queues, depth)
	}
	policy, err := multipath.ParsePolicy(c.String("policy"))
	if err != nil {
		return nil, fmt.Errorf("--policy: %w", err)
	}
	log, err := logger(c)
	if err != nil {
		return nil, err
	}
	dial := func(ctx context.Context, u string) (blockdev.Device, error) {
		return openDevice(ctx, c, u, queues, depth)
	}
	dialers := initiator.Dialers{}
	for _, s := range []string{"nvme", "nvme+rdma", "nvme+tcp", "iser", "iscsi", "srp"} {
		dialers[s] = dial
	}
	d, err := initiator.DialMultipath(c.Context, initiator.MultipathConfig{URLs: urls, Dialers: dialers, Policy: policy,
		LossTimeout: c.Duration("loss-timeout"), ReconnectDelay: c.Duration("reconnect-delay"), Logger: log})
	if err != nil {
		return nil, fmt.Errorf("multipath over %d URLs: %w", len(urls), err)
	}
	return d, nil
}

func runBench(c *cli.Context) error {
	if c.NArg() < 1 {
		return fmt.Errorf("bench takes a URL (%s, iser://, iscsi:// or srp://), or several for the paths of one disk", nvmeURLUsage)
	}
	pat, err := bench.ParsePattern(c.String("rw"))
	if err != nil {
		return fmt.Errorf("--rw: %w", err)
	}
	bs, err := units.ParseSize(c.String("bs"))
	if err != nil {
		return fmt.Errorf("--bs: %w", err)
	}
	if bs <= 0 || bs > 64<<20 {
		return fmt.Errorf("--bs %s: want 512 bytes to 64 MiB", c.String("bs"))
	}
	var size int64
	if s := c.String("size"); s != "" {
		if size, err = units.ParseSize(s); err != nil {
			return fmt.Errorf("--size: %w", err)
		}
	}
	jobs, qd, hosts := c.Int("jobs"), c.Int("qd"), c.Int("hosts")
	if hosts < 1 || hosts > 256 {
		return fmt.Errorf("--hosts %d: want 1 to 256", hosts)
	}
	queues := c.Int("queues")
	if hosts > 1 && !c.IsSet("jobs") {
		jobs = hosts * max(queues, 1)
	}
	if jobs < 1 || jobs > 1024 || hosts == 1 && jobs > 128 {
		return fmt.Errorf("--jobs %d: want 1 to 128 (1024 with --hosts)", jobs)
	}
	if jobs < hosts {
		return fmt.Errorf("--jobs %d: want at least one job per host (--hosts %d)", jobs, hosts)
	}
	if qd < 1 || qd > 1024 {
		return fmt.Errorf("--qd %d: want 1 to 1024", qd)
	}
	urls := c.Args().Slice()
	if c.Bool("discover") {
		if len(urls) != 1 {
			return fmt.Errorf("--discover takes one nvme:// or nvme+tcp:// URL, not %d", len(urls))
		}
		if urls, err = discoverPaths(c, urls[0]); err != nil {
			return err
		}
	}
	if hosts > 1 && len(urls) > 1 {
		return fmt.Errorf("--hosts %d: takes one URL, not %d paths", hosts, len(urls))
	}
	if queues == 0 {
		queues = (jobs + hosts - 1) / hosts
	}
	// One P per queue (procs.go says why); --cpus fixes the number.
	log, err := logger(c)
	if err != nil {
		return err
	}
	if err := setProcs(c, queues*hosts, log); err != nil {
		return err
	}
	if p := c.String("plot"); p != "" {
		// Before the run, not after it.
		if err := plot.CheckPath(p); err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
	}
	// Jobs share queues when there are fewer queues than jobs.
	perHost := (jobs + hosts - 1) / hosts
	depth := qd * ((perHost + queues - 1) / queues)
	var devs []blockdev.Device
	defer func() {
		for _, d := range devs {
			d.Close()
		}
	}()
	for i := range hosts {
		disk, err := openDisk(c, urls, queues, depth)
		if err != nil {
			if hosts > 1 {
				return fmt.Errorf("host %d of %d: %w", i+1, hosts, err)
			}
			return err
		}
		devs = append(devs, disk)
	}
	var rec *plot.Recorder
	if c.String("plot") != "" {
		if hosts > 1 {
			return fmt.Errorf("--plot: one host only (not with --hosts %d)", hosts)
		}
		rec = plot.NewRecorder(devs[0], 0)
	}
	o := bench.Options{
		Pattern: pat, Mix: c.Int("mix"), BlockSize: int(bs), QD: qd, Jobs: jobs, Runtime: c.Duration("runtime"),
		Size: size, Verify: c.Bool("verify"), Seed: c.Uint64("seed"),
	}
	if !c.Bool("quiet") {
		o.Progress = c.App.ErrWriter
		o.ProgressLines = true
		if f, ok := c.App.ErrWriter.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
				o.ProgressLines = false // a terminal: redraw one line
			}
		}
	}
	if idle := c.Duration("idle"); idle > 0 {
		if !c.Bool("quiet") {
			fmt.Fprintf(c.App.ErrWriter, "bench: %d connection(s) up, idle for %v\n", len(devs), idle)
		}
		select {
		case <-time.After(idle):
		case <-c.Context.Done():
			return c.Context.Err()
		}
	}
	var res *bench.Result
	var runErr error
	if rec != nil {
		res, runErr = bench.Run(c.Context, rec, o)
	} else {
		res, runErr = bench.RunMany(c.Context, devs, o)
	}
	if res == nil {
		return runErr
	}
	if rec != nil {
		title := fmt.Sprintf("%s %s QD%d %s", c.String("rw"), c.String("bs"), qd, c.Args().First())
		if err := rec.Plot(c.String("plot"), title); err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		res.WriteText(c.App.Writer)
	}
	switch {
	case runErr != nil:
		return runErr
	case res.VerifyErrs > 0:
		return fmt.Errorf("bench: %d blocks failed verification (first: LBA %d: %s)", res.VerifyErrs, res.Mismatches[0].LBA, res.Mismatches[0].Reason)
	case res.Errors > 0:
		return fmt.Errorf("bench: %d I/O errors (first: %s)", res.Errors, res.FirstError)
	}
	return nil
}
