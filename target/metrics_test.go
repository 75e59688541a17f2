package target

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/nvmeof/host"
)

// gather scrapes c and returns the metrics of family name whose labels
// include want.
func gather(t *testing.T, c prometheus.Collector, name string, want map[string]string) []*dto.Metric {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []*dto.Metric
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for k, v := range want {
				found := false
				for _, l := range m.GetLabel() {
					if l.GetName() == k && l.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			out = append(out, m)
		}
	}
	return out
}

// TestMetricsCount: after a known number of reads and writes, the
// namespace's counters and latency histogram say exactly that.
func TestMetricsCount(t *testing.T) {
	t.Parallel()
	run, p := startConfig(t, applyBefore)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctrl := connectTCP(t, ctx, run, p, nqnA, host.Config{})
	ns, err := ctrl.Namespace(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	const writes, reads = 37, 23
	buf := make([]byte, 4096)
	for i := range writes {
		if _, err := blockdev.WriteAt(ns, buf, int64(i)*4096); err != nil {
			t.Fatal(err)
		}
	}
	for i := range reads {
		if _, err := blockdev.ReadAt(ns, buf, int64(i)*4096); err != nil {
			t.Fatal(err)
		}
	}
	c := run.Collector()
	for _, tc := range []struct {
		op   string
		n    uint64
		name string
	}{{"write", writes, "rdisk_namespace_ops_total"}, {"read", reads, "rdisk_namespace_ops_total"}} {
		lbl := map[string]string{"subsystem": nqnA, "nsid": "2", "op": tc.op}
		ms := gather(t, c, tc.name, lbl)
		if len(ms) != 1 || uint64(ms[0].GetCounter().GetValue()) != tc.n {
			t.Fatalf("%s %s: %v, want %d", tc.name, tc.op, ms, tc.n)
		}
		ms = gather(t, c, "rdisk_namespace_bytes_total", lbl)
		if len(ms) != 1 || uint64(ms[0].GetCounter().GetValue()) != tc.n*4096 {
			t.Fatalf("bytes %s: %v, want %d", tc.op, ms, tc.n*4096)
		}
		ms = gather(t, c, "rdisk_namespace_latency_seconds", lbl)
		if len(ms) != 1 || ms[0].GetHistogram().GetSampleCount() != tc.n || ms[0].GetHistogram().GetSampleSum() <= 0 {
			t.Fatalf("latency %s: %v, want %d samples", tc.op, ms, tc.n)
		}
	}
	if ms := gather(t, c, "rdisk_nvme_controllers", map[string]string{"subsystem": nqnA}); len(ms) != 1 || ms[0].GetGauge().GetValue() != 1 {
		t.Fatalf("controllers: %v", ms)
	}
	if ms := gather(t, c, "rdisk_namespace_size_bytes", map[string]string{"subsystem": nqnA, "nsid": "1"}); len(ms) != 1 || ms[0].GetGauge().GetValue() != 8<<20 {
		t.Fatalf("size: %v", ms)
	}
}
