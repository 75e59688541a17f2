package target

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/iser"
	iserinit "github.com/rdisk/rdisk/iser/initiator"
	"github.com/rdisk/rdisk/nvmeof/host"
	"github.com/rdisk/rdisk/scsi"
	scsihost "github.com/rdisk/rdisk/scsi/host"
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
	// A SCSI READ past the end of LUN 0 (namespace 1): ILLEGAL REQUEST.
	h, port, _ := net.SplitHostPort(run.ISCSIPortals[0].String())
	pn, _ := strconv.Atoi(port)
	dev, err := iserinit.Open(ctx, iserinit.URL{Transport: iser.TransportTCP, Host: h, Port: pn, Target: "iqn.2026-12.io.rdisk:t"},
		iserinit.Config{InitiatorName: "iqn.2026-12.io.rdisk:metrics"})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	rd := &scsihost.Command{CDB: []byte{0x28, 0, 0xff, 0xff, 0xff, 0, 0, 0, 1, 0}, Data: make([]byte, 512), Dir: scsi.DirIn}
	if err := scsihost.Do(ctx, dev.Session(), rd); err == nil {
		t.Fatal("a SCSI read past the end succeeded")
	}
	c := run.Collector()
	if ms := gather(t, c, "rdisk_namespace_errors_total", map[string]string{"subsystem": nqnA, "nsid": "1", "protocol": "scsi", "class": "illegal_request"}); len(ms) != 1 || ms[0].GetCounter().GetValue() != 1 {
		t.Fatalf("SCSI errors: %v", ms)
	}
	if ms := gather(t, c, "rdisk_port_connections_accepted_total", map[string]string{"transport": "nvme-tcp", "port": "1"}); len(ms) != 1 || ms[0].GetCounter().GetValue() < 2 {
		t.Fatalf("accepted connections: %v", ms)
	}
	if ms := gather(t, c, "rdisk_port_connections", map[string]string{"transport": "nvme-tcp", "port": "1"}); len(ms) != 1 || ms[0].GetGauge().GetValue() != 2 {
		t.Fatalf("live connections (admin and one I/O queue): %v", ms)
	}
	if ms := gather(t, c, "rdisk_iwarp_fpdus_total", nil); len(ms) != 2 {
		t.Fatalf("iwarp FPDU counters: %v", ms)
	}
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

// syncBuffer is a bytes.Buffer for a logger written from several
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(sub ...string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, l := range strings.Split(s.b.String(), "\n") {
		ok := l != ""
		for _, x := range sub {
			ok = ok && strings.Contains(l, x)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

// TestRefusalsCountedAndLogged: an NVMe-oF host outside a subsystem's
// allowed hosts and an iSCSI initiator outside a target's ACL each move
// their refusal counter and log one line naming who was refused, from
// where.
func TestRefusalsCountedAndLogged(t *testing.T) {
	t.Parallel()
	const stranger = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"
	js := strings.Replace(applyBefore, `{"nqn": "nqn.2026-12.io.rdisk:b", "attr": {"allow_any_host": "1"},`,
		`{"nqn": "nqn.2026-12.io.rdisk:b", "attr": {"allow_any_host": "0"}, "allowed_hosts": ["nqn.2014-08.org.nvmexpress:uuid:0"],`, 1)
	js = strings.Replace(js, `"luns": [{"lun": 0,`, `"allowed_initiators": ["iqn.2026-12.io.rdisk:friend"], "luns": [{"lun": 0,`, 1)
	c, err := Parse(strings.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	p := newIWARP(t)
	defer p.Close()
	run, err := Start(c, p, slog.New(slog.NewTextHandler(&logs, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := host.Connect(ctx, p, run.T.Port(1).Addr().String(), nqnB, host.Config{Transport: host.TransportTCP, HostNQN: stranger, HostID: [16]byte{1}}); err == nil {
		t.Fatal("a host outside allowed_hosts connected")
	}
	if _, err := iserinit.Open(ctx, iserinit.URL{Transport: iser.TransportTCP, Host: "127.0.0.1", Port: portOf(t, run.ISCSIPortals[0].String()),
		Target: "iqn.2026-12.io.rdisk:t"}, iserinit.Config{InitiatorName: "iqn.2026-12.io.rdisk:stranger"}); err == nil {
		t.Fatal("an initiator outside the ACL logged in")
	}
	col := run.Collector()
	if ms := gather(t, col, "rdisk_nvme_connect_rejected_total", map[string]string{"reason": "host_not_allowed"}); len(ms) != 1 || ms[0].GetCounter().GetValue() != 1 {
		t.Fatalf("NVMe-oF refusals: %v", ms)
	}
	// The target counts and logs an iSCSI refusal once the Login Reject
	// is sent, which the initiator may see first: wait for the count.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		ms := gather(t, col, "rdisk_port_connections_rejected_total", map[string]string{"transport": "iscsi", "reason": "forbidden"})
		if len(ms) == 1 && ms[0].GetCounter().GetValue() == 1 {
			break
		}
		if len(ms) > 1 || (len(ms) == 1 && ms[0].GetCounter().GetValue() > 1) || time.Now().After(deadline) {
			t.Fatalf("iSCSI refusals: %v", ms)
		}
	}
	if l := logs.lines("level=WARN", stranger, "peer=127.0.0.1:"); len(l) != 1 {
		t.Fatalf("NVMe-oF refusal log lines: %q\n%s", l, logs.lines())
	}
	if l := logs.lines("level=WARN", "iqn.2026-12.io.rdisk:stranger", "peer=127.0.0.1:", "forbidden"); len(l) != 1 {
		t.Fatalf("iSCSI refusal log lines: %q\n%s", l, logs.lines())
	}
}
