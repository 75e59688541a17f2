package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/rdisk/rdisk/internal/units"
	"github.com/rdisk/rdisk/rdma/rdmaperf"
	"github.com/urfave/cli/v2"
)

const defaultPerfAddr = "127.0.0.1:7471"

func rdmaPerfCommand() *cli.Command {
	return &cli.Command{
		Name:  "rdma-perf",
		Usage: "measure the RDMA transport (like perftest's ib_write_bw, ib_read_bw, ib_send_lat)",
		Subcommands: []*cli.Command{
			{
				Name:  "server",
				Usage: "serve rdma-perf clients",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "listen", Value: defaultPerfAddr, Usage: "address to listen on (host:port)"},
					cpusFlag("most CPUs (Go Ps) to use; one per connected client up to this", "$GOMAXPROCS, else all CPUs"),
					sysmonFlag(),
				},
				Action: func(c *cli.Context) error {
					log, err := logger(c)
					if err != nil {
						return err
					}
					choice, err := rdmaOf(c)
					if err != nil {
						return err
					}
					p, err := openRDMA(choice, log, c.String("listen"), true)
					if err != nil {
						return err
					}
					defer p.Close()
					ln, err := p.Listen(c.Context, c.String("listen"))
					if err != nil {
						return err
					}
					defer ln.Close()
					hook, err := procHook(c, log)
					if err != nil {
						return err
					}
					fmt.Printf("rdma-perf server listening on %s (%s); run: rdisk rdma-perf client %s --op write\n", ln.Addr(), providerName(p), ln.Addr())
					return rdmaperf.Serve(c.Context, p, ln, log, hook)
				},
			},
			{
				Name:      "client",
				Usage:     "measure against an rdma-perf server",
				ArgsUsage: "ADDR",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "op", Value: "write", Usage: "write, read or send"},
					&cli.StringFlag{Name: "size", Value: "128KiB", Usage: "bytes per operation (4096, 4KiB, 1MiB ...)"},
					&cli.IntFlag{Name: "qd", Value: 16, Usage: "operations in flight"},
					&cli.DurationFlag{Name: "duration", Value: 5e9, Usage: "how long to measure"},
					&cli.BoolFlag{Name: "json", Usage: "print one JSON object"},
					&cli.BoolFlag{Name: "busy-poll", Usage: "poll the completion queue without sleeping, as perftest does without -e (default: wait as the target's queues do)"},
					cpusFlag("CPUs (Go Ps) to use", "1: one QP, as the target and bench use one per queue"),
					sysmonFlag(),
				},
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return fmt.Errorf("rdma-perf client takes one address (host:port), got %d arguments", c.NArg())
					}
					op, err := rdmaperf.ParseOp(c.String("op"))
					if err != nil {
						return fmt.Errorf("--op: %w", err)
					}
					size, err := units.ParseSize(c.String("size"))
					if err != nil {
						return fmt.Errorf("--size: %w", err)
					}
					log, err := logger(c)
					if err != nil {
						return err
					}
					if err := setProcs(c, 1, log); err != nil { // one QP
						return err
					}
					choice, err := rdmaOf(c)
					if err != nil {
						return err
					}
					p, err := openRDMA(choice, log, c.Args().First(), false)
					if err != nil {
						return err
					}
					defer p.Close()
					r, err := rdmaperf.Run(c.Context, p, c.Args().First(), rdmaperf.Options{Op: op, Size: int(size), QD: c.Int("qd"), Duration: c.Duration("duration"), BusyPoll: c.Bool("busy-poll")})
					if err != nil {
						return err
					}
					if c.Bool("json") {
						enc := json.NewEncoder(os.Stdout)
						return enc.Encode(r)
					}
					fmt.Printf("%-6s size %-8s qd %-4d  %s  %.0f msg/s  lat us: mean %.1f p50 %.1f p99 %.1f p99.9 %.1f max %.1f  (%d ops in %.2fs)\n",
						r.Op, units.FormatSize(int64(r.Size)), r.QD, units.FormatRate(r.BW), r.MsgsPerSec,
						r.Lat.Mean, r.Lat.P50, r.Lat.P99, r.Lat.P999, r.Lat.Max, r.Ops, r.Seconds)
					return nil
				},
			},
		},
	}
}
