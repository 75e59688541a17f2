package main

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rdisk/rdisk/internal/units"
	"github.com/rdisk/rdisk/target"
)

// rdisk admin top: IOPS, bandwidth and latency per namespace and per host,
// from the target's counters (GET /v1/stats), once a second.

func topCommand() *cli.Command {
	return &cli.Command{
		Name:  "top",
		Usage: "a live view of IOPS, bandwidth and latency per namespace and per host, refreshed every --interval",
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "interval", Value: time.Second, Usage: "refresh period"},
			&cli.IntFlag{Name: "count", Usage: "stop after this many refreshes (0: until interrupted)"},
		},
		Action: runTop,
	}
}

func runTop(c *cli.Context) error {
	if c.NArg() != 0 {
		return fmt.Errorf("admin top takes no arguments")
	}
	every := c.Duration("interval")
	if every < 100*time.Millisecond {
		return fmt.Errorf("--interval %s: at least 100ms", every)
	}
	a := adminClient(c)
	get := func() (*target.IOStats, time.Time, error) {
		ctx, cancel := adminCtx(c)
		defer cancel()
		var st target.IOStats
		err := a.Do(ctx, "GET", "/v1/stats", nil, &st)
		return &st, time.Now(), err
	}
	prev, t0, err := get()
	if err != nil {
		return err
	}
	f, isFile := c.App.Writer.(*os.File)
	clear := isFile && isTerminal(f)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for n := 0; c.Int("count") == 0 || n < c.Int("count"); n++ {
		select {
		case <-c.Context.Done():
			return nil
		case <-tick.C:
		}
		cur, t1, err := get()
		if err != nil {
			return err
		}
		if clear {
			fmt.Fprint(c.App.Writer, "\x1b[H\x1b[2J")
		}
		printTop(c.App.Writer, prev, cur, t1.Sub(t0))
		prev, t0 = cur, t1
	}
	return nil
}

// printTop prints the rates between two snapshots dt apart.
func printTop(out io.Writer, prev, cur *target.IOStats, dt time.Duration) {
	sec := dt.Seconds()
	rate := func(a, b uint64) float64 {
		if b < a || sec <= 0 {
			return 0
		}
		return float64(b-a) / sec
	}
	lat := func(a, b target.OpIO) string {
		if b.Ops <= a.Ops {
			return "-"
		}
		return (time.Duration((b.LatencyNanos - a.LatencyNanos) / (b.Ops - a.Ops))).Round(time.Microsecond).String()
	}
	fmt.Fprintf(out, "rdisk admin top  %s  (every %s)\n\n", time.Now().Format("15:04:05"), dt.Round(time.Millisecond))
	w := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
	fmt.Fprintln(w, "NAMESPACE\tNSID\tREAD IOPS\tWRITE IOPS\tREAD\tWRITE\tREAD LAT\tWRITE LAT\tFLUSH/s\tIN FLIGHT\tERRORS/s")
	old := map[string]target.NamespaceIO{}
	for _, n := range prev.Namespaces {
		old[fmt.Sprintf("%s/%d", n.Subsystem, n.NSID)] = n
	}
	for _, n := range cur.Namespaces {
		o := old[fmt.Sprintf("%s/%d", n.Subsystem, n.NSID)]
		errs := rate(o.Read.Errors+o.Write.Errors+o.Flush.Errors, n.Read.Errors+n.Write.Errors+n.Flush.Errors)
		fmt.Fprintf(w, "%s\t%d\t%.0f\t%.0f\t%s/s\t%s/s\t%s\t%s\t%.0f\t%d\t%.0f\n", n.Subsystem, n.NSID,
			rate(o.Read.Ops, n.Read.Ops), rate(o.Write.Ops, n.Write.Ops),
			units.FormatSize(int64(rate(o.Read.Bytes, n.Read.Bytes))), units.FormatSize(int64(rate(o.Write.Bytes, n.Write.Bytes))),
			lat(o.Read, n.Read), lat(o.Write, n.Write), rate(o.Flush.Ops, n.Flush.Ops), n.InFlight, errs)
	}
	fmt.Fprintln(w, "\nHOST\tKIND\tID\tTARGET\tCOMMANDS/s\tREAD\tWRITE")
	oldH := map[string]target.HostIO{}
	for _, h := range prev.Hosts {
		oldH[h.Kind+" "+h.ID] = h
	}
	for _, h := range cur.Hosts {
		o := oldH[h.Kind+" "+h.ID]
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%.0f\t%s/s\t%s/s\n", h.Host, h.Kind, h.ID, h.Target, rate(o.Commands, h.Commands),
			units.FormatSize(int64(rate(o.ReadBytes, h.ReadBytes))), units.FormatSize(int64(rate(o.WriteBytes, h.WriteBytes))))
	}
	w.Flush()
}
