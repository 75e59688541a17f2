package target

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/nvmeof"
)

// nsStats returns namespace nsid's counters.
func nsStatsOf(t testing.TB, sub *Subsystem, nsid uint32) NamespaceStats {
	t.Helper()
	for _, st := range sub.NamespaceStats() {
		if st.NSID == nsid {
			return st
		}
	}
	t.Fatalf("no stats for namespace %d", nsid)
	return NamespaceStats{}
}

func TestNamespaceStats(t *testing.T) {
	t.Parallel()
	_, sub, addr := testTarget(t, 1<<20)
	aq, cntlid := admin(t, addr, testNQN, hostNQN, 0)
	sqe := make(nvmeof.SQE, 64)
	sqe.Features().Encode(&nvmeof.FeaturesFields{Opcode: nvmeof.AdminSetFeatures, FID: nvmeof.FeatNumQueues, CDW11: nvmeof.NumQueuesValue(0, 0)})
	must(t, aq.exec(sqe, 0, nil), "set number of queues")
	io := ioQueue(t, addr, 1, cntlid, 16)
	for i := range 4 {
		must(t, rw(io, i%2 == 0, uint64(i)*8, 8, false), "read or write")
	}
	// Past the end: LBA Out of Range (generic status).
	wantStatus(t, rw(io, false, 1<<20/512, 1, false), nvmeof.StatusLBAOutOfRange.WithDNR(), "read past the end")
	// A miscompare: Compare Failure (media error).
	clear(io.data()[:512])
	io.data()[0] = 1
	sqe = make(nvmeof.SQE, 64)
	sqe.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IOCompare, NSID: 1, SLBA: 100})
	wantStatus(t, io.exec(sqe, 512, nil), nvmeof.StatusCompareFailure.WithDNR(), "compare")
	// A namespace that does not exist counts nowhere.
	sqe = make(nvmeof.SQE, 64)
	sqe.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IORead, NSID: 7})
	wantStatus(t, io.exec(sqe, 512, nil), nvmeof.StatusInvalidNamespace.WithDNR(), "read of namespace 7")

	// A command counts until its completion is sent: the host may see it
	// first.
	eventually(t, "no command in flight", func() bool { return nsStatsOf(t, sub, 1).InFlight == 0 })
	st := nsStatsOf(t, sub, 1)
	want := map[string]uint64{"generic": 1, "command_specific": 0, "media": 1, "path": 0, "vendor": 0}
	if st.InFlight != 0 || len(st.Errors) != len(want) {
		t.Fatalf("stats %+v, want nothing in flight and errors %v", st, want)
	}
	for k, v := range want {
		if st.Errors[k] != v {
			t.Fatalf("errors %v, want %v", st.Errors, want)
		}
	}
	// Resizing keeps the counters; a namespace removed and added again
	// starts afresh.
	if err := sub.NamespaceResized(1); err != nil {
		t.Fatal(err)
	}
	if st := nsStatsOf(t, sub, 1); st.Errors["generic"] != 1 {
		t.Fatalf("after a resize: %+v", st)
	}
	n := sub.namespace(1)
	if err := sub.RemoveNamespace(1); err != nil {
		t.Fatal(err)
	}
	if len(sub.NamespaceStats()) != 0 {
		t.Fatalf("stats of a removed namespace: %+v", sub.NamespaceStats())
	}
	if err := sub.AddNamespace(n.cfg); err != nil {
		t.Fatal(err)
	}
	if st := nsStatsOf(t, sub, 1); st.Errors["generic"] != 0 || st.InFlight != 0 {
		t.Fatalf("a namespace added again: %+v", st)
	}
}

// portStats returns the counters of port id's transport tr.
func portStats(t testing.TB, st Stats, id uint16, tr string) PortStats {
	t.Helper()
	for _, p := range st.Ports {
		if p.ID == id && p.Transport == tr {
			return p
		}
	}
	t.Fatalf("no stats for port %d %s in %+v", id, tr, st.Ports)
	return PortStats{}
}

func TestStats(t *testing.T) {
	t.Parallel()
	tg, _, addr := testTarget(t, 1<<20, hostNQN)
	st := tg.Stats()
	if len(st.Ports) != 1 || st.Ports[0].ID != 1 || st.Ports[0].Transport != "rdma" || st.Ports[0].Accepted != 0 ||
		len(st.ConnectRejected) != int(numConnectReasons) || len(st.Ports[0].Rejected) != int(numPortReasons) {
		t.Fatalf("stats of a new target: %+v", st)
	}
	// A controller whose host sends nothing for its KATO (1 s).
	aq, _ := admin(t, addr, testNQN, hostNQN, 1000)
	st = tg.Stats()
	if p := portStats(t, st, 1, "rdma"); p.Accepted != 1 || p.Live != 1 || st.ControllersCreated != 1 {
		t.Fatalf("after a controller connected: %+v", st)
	}
	// Refused Connects: unknown subsystem, host not allowed.
	q, err := dialQueue(t, addr, 0, 31, 32)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, q.connect("nqn.2026-11.io.rdisk:nope", hostNQN, nvmeof.CNTLIDDynamic, 31, 0), nvmeof.StatusConnectInvalidParameters.WithDNR(), "unknown subsystem")
	wantStatus(t, q.connect(testNQN, hostNQN2, nvmeof.CNTLIDDynamic, 31, 0), nvmeof.StatusConnectInvalidHost.WithDNR(), "host not allowed")
	wantStatus(t, q.connect(testNQN, hostNQN2, nvmeof.CNTLIDDynamic, 31, 0), nvmeof.StatusConnectInvalidHost.WithDNR(), "host not allowed")
	// Refused by the CM: an admin queue deeper than 32.
	if _, err := dialQueue(t, addr, 0, 63, 64); err == nil {
		t.Fatal("a deep admin queue connected")
	}
	st = tg.Stats()
	if r := st.ConnectRejected; r["unknown_subsystem"] != 1 || r["host_not_allowed"] != 2 || r["invalid_parameters"] != 0 {
		t.Fatalf("connects rejected %v", r)
	}
	if p := portStats(t, st, 1, "rdma"); p.Accepted != 2 || p.Live != 2 || p.Rejected["cm_private_data"] != 1 {
		t.Fatalf("port after a refused CM request: %+v", p)
	}
	select {
	case <-aq.qp.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("controller not torn down after its keep-alive timeout")
	}
	eventually(t, "keep-alive expiry counted", func() bool {
		st := tg.Stats()
		return st.KeepAliveExpired == 1 && st.ControllersRemoved == 1 && portStats(t, st, 1, "rdma").Live == 1
	})
	q.close()
	eventually(t, "connection ended", func() bool { return portStats(t, tg.Stats(), 1, "rdma").Live == 0 })
	if st := tg.Stats(); st.ControllersCreated != 1 || st.KeepAliveExpired != 1 {
		t.Fatalf("final stats %+v", st)
	}
}

// TestStatsTCP: connections past ICReq are accepted; a bad first PDU is
// refused (icreq), a connection closed before its ICReq counts apart; an
// rdma+tcp port reports both transports.
func TestStatsTCP(t *testing.T) {
	t.Parallel()
	tg, port := tcpTarget(t, 1<<20, TransportBoth)
	addr := port.Addr().String()
	aq, _ := tcpAdmin(t, addr, 0)
	bad, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	bad.Write(make([]byte, 128)) // a PDU of type 0 (ICReq) with a zero length
	closed, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	eventually(t, "connections counted", func() bool {
		p := portStats(t, tg.Stats(), 1, "tcp")
		return p.Accepted == 1 && p.Live == 1 && p.Rejected["icreq"] == 1 && p.Rejected["no_icreq"] == 1
	})
	if st := tg.Stats(); len(st.Ports) != 2 || st.Ports[0].Transport != "rdma" || st.Ports[1].Transport != "tcp" || st.Ports[0].Accepted != 0 {
		t.Fatalf("stats of an rdma+tcp port: %+v", st.Ports)
	}
	aq.c.Close()
	eventually(t, "connection ended", func() bool {
		st := tg.Stats()
		return portStats(t, st, 1, "tcp").Live == 0 && st.ControllersRemoved == 1
	})
}

// logRecords is a slog handler keeping the records, with their
// attributes, that tests look for.
type logRecords struct {
	mu   sync.Mutex
	recs []logRecord
}

type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	l.mu.Lock()
	l.recs = append(l.recs, rec)
	l.mu.Unlock()
	return nil
}

// find returns the records with message msg.
func (l *logRecords) find(msg string) []logRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logRecord
	for _, r := range l.recs {
		if r.msg == msg {
			out = append(out, r)
		}
	}
	return out
}

// TestLogControllerLifetime: a host connecting and disconnecting makes
// one "controller created" and one "controller removed" line, at Info,
// with the fields an operator looks for; refusals are warnings naming the
// peer and the host.
func TestLogControllerLifetime(t *testing.T) {
	t.Parallel()
	for _, tr := range []Transport{TransportTCP, TransportRDMA} {
		t.Run(string(tr), func(t *testing.T) {
			t.Parallel()
			logs := &logRecords{}
			tg, port := tcpTargetLog(t, 1<<20, tr, slog.New(logs))
			addr := port.Addr().String()
			c := mustHost(t, tr, addr, testNQN, hostCfg(hostNQN))
			cntlid := fmt.Sprint(c.CNTLID())
			c.Close()
			eventually(t, "controller removed", func() bool { return len(logs.find("nvmeof: controller removed")) > 0 })
			tg.Subsystem(testNQN).SetAllowAnyHost(false)
			if _, err := dialHost(t, tr, addr, testNQN, hostCfg(hostNQN2)); err == nil {
				t.Fatal("a host not allowed connected")
			}
			common := map[string]string{"port": "1", "transport": string(tr), "subsystem": testNQN, "host": hostNQN, "cntlid": cntlid}
			check := func(msg string, want map[string]string) {
				t.Helper()
				recs := logs.find(msg)
				if len(recs) != 1 {
					t.Fatalf("%d %q lines, want 1: %+v", len(recs), msg, recs)
				}
				r := recs[0]
				if r.level != slog.LevelInfo {
					t.Errorf("%q at %v", msg, r.level)
				}
				for k, v := range common {
					if r.attrs[k] != v {
						t.Errorf("%q: %s=%q, want %q (%v)", msg, k, r.attrs[k], v, r.attrs)
					}
				}
				for k, v := range want {
					if r.attrs[k] != v {
						t.Errorf("%q: %s=%q, want %q (%v)", msg, k, r.attrs[k], v, r.attrs)
					}
				}
				if !strings.HasPrefix(r.attrs["peer"], "127.0.0.1:") {
					t.Errorf("%q: peer %q", msg, r.attrs["peer"])
				}
			}
			check("nvmeof: controller created", map[string]string{"hostid": testHostIDString, "kato": "5s", "max_io_queues": "128"})
			check("nvmeof: controller removed", map[string]string{"reason": reasonHostShutdown, "io_queues": "2"})
			var refused []logRecord
			for _, r := range logs.find("nvmeof: connect refused") {
				if r.attrs["host"] == hostNQN2 {
					refused = append(refused, r)
				}
			}
			if len(refused) != 1 || refused[0].level != slog.LevelWarn || refused[0].attrs["reason"] != "host_not_allowed" ||
				!strings.HasPrefix(refused[0].attrs["peer"], "127.0.0.1:") || refused[0].attrs["subsystem"] != testNQN {
				t.Fatalf("refusals logged: %+v", refused)
			}
		})
	}
}
