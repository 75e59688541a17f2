package bench

import (
	"fmt"
	"io"

	"github.com/rdisk/rdisk/internal/units"
)

// WriteText prints the result as a short human-readable summary, in the
// spirit of fio's.
func (r *Result) WriteText(w io.Writer) {
	mix := ""
	if r.Mix != 0 {
		mix = fmt.Sprintf(" mix=%d%% reads", r.Mix)
	}
	fmt.Fprintf(w, "%s: %s bs=%s qd=%d jobs=%d size=%s%s runtime=%.1fs seed=%#x\n",
		r.Device, r.Pattern, units.FormatSize(int64(r.BlockSize)), r.QD, r.Jobs, units.FormatSize(r.Size), mix, r.Seconds, r.Seed)
	line := func(name string, s *OpStat) {
		fmt.Fprintf(w, "  %-6s IOPS=%s BW=%s ios=%d lat(us): mean=%.1f p50=%.1f p99=%.1f p99.9=%.1f max=%.1f\n",
			name+":", fmtCount(s.IOPS), fmtRate(s.BW), s.IOs, s.Lat.Mean, s.Lat.P50, s.Lat.P99, s.Lat.P999, s.Lat.Max)
	}
	if r.Read != nil {
		line("read", r.Read)
	}
	if r.Write != nil {
		line("write", r.Write)
	}
	if r.Read != nil && r.Write != nil {
		line("total", &OpStat{IOs: r.IOs, Bytes: r.Bytes, IOPS: r.IOPS, BW: r.BW, Lat: r.Lat})
	}
	if len(r.Hosts) > 0 {
		lo, hi := r.Hosts[0].IOPS, r.Hosts[0].IOPS
		for _, h := range r.Hosts[1:] {
			lo, hi = min(lo, h.IOPS), max(hi, h.IOPS)
		}
		ratio := 0.0
		if hi > 0 {
			ratio = lo / hi
		}
		fmt.Fprintf(w, "  hosts: %d, IOPS per host min=%s max=%s (min/max %.2f)\n", len(r.Hosts), fmtCount(lo), fmtCount(hi), ratio)
	}
	fmt.Fprintf(w, "  errors: %d", r.Errors)
	if r.FirstError != "" {
		fmt.Fprintf(w, " (first: %s)", r.FirstError)
	}
	fmt.Fprintln(w)
	if r.Verify {
		fmt.Fprintf(w, "  verify: %d blocks checked, %d mismatches\n", r.Verified, r.VerifyErrs)
		for _, m := range r.Mismatches {
			fmt.Fprintf(w, "    LBA %d: %s\n", m.LBA, m.Reason)
		}
		if n := r.VerifyErrs - uint64(len(r.Mismatches)); len(r.Mismatches) > 0 && n > 0 {
			fmt.Fprintf(w, "    ... and %d more\n", n)
		}
	}
}
