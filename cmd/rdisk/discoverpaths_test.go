package main

import (
	"strings"
	"testing"
	"time"

	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/host"
	"github.com/rdisk/rdisk/nvmeof/target"
)

func TestPathsOf(t *testing.T) {
	t.Parallel()
	const nqn = "nqn.2026-12.io.rdisk:a"
	entry := func(sub uint8, tr uint8, nqn, addr, svc string) nvmeof.DiscoveryLogEntry {
		return nvmeof.DiscoveryLogEntry{SubType: sub, TrType: tr, AdrFam: nvmeof.AdrFamIPv4, SubNQN: nqn, TrAddr: addr, TrSvcID: svc}
	}
	log := &host.DiscoveryLog{Entries: []nvmeof.DiscoveryLogEntry{
		entry(nvmeof.SubTypeCurrentDiscovery, nvmeof.TrTypeTCP, nvmeof.DiscoveryNQN, "10.0.0.1", "8009"),
		entry(nvmeof.SubTypeNVMe, nvmeof.TrTypeRDMA, nqn, "10.0.0.1", "4420"),
		entry(nvmeof.SubTypeNVMe, nvmeof.TrTypeTCP, "nqn.2026-12.io.rdisk:other", "10.0.0.1", "4420"),
		entry(nvmeof.SubTypeNVMe, nvmeof.TrTypeTCP, nqn, "10.0.0.2", "4421"),
		entry(nvmeof.SubTypeNVMe, nvmeof.TrTypeRDMA, nqn, "10.0.0.1", "4420"), // again
		entry(nvmeof.SubTypeNVMe, nvmeof.TrTypeTCP, nqn, "10.0.0.3", "not a port"),
	}}
	got, err := pathsOf(log, host.URL{Host: "10.0.0.1", Port: 8009, SubNQN: nqn, NSID: 3})
	want := []string{"nvme://10.0.0.1:4420/" + nqn + "/3", "nvme+tcp://10.0.0.2:4421/" + nqn + "/3"}
	if err != nil || strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("pathsOf: %q, %v; want %q", got, err, want)
	}
	if _, err := pathsOf(log, host.URL{Host: "10.0.0.1", Port: 8009, SubNQN: "nqn.2026-12.io.rdisk:none"}); err == nil ||
		!strings.Contains(err.Error(), "lists no RDMA or TCP port for subsystem nqn.2026-12.io.rdisk:none") {
		t.Errorf("a subsystem the log does not list: %v", err)
	}
}

// TestBenchDiscover: bench --discover connects to every port the discovery
// logs list for the subsystem, following referrals (one of which does not
// answer).
func TestBenchDiscover(t *testing.T) {
	t.Parallel()
	tg, sub := newCLITarget(t)
	// Port 2 lists itself; port 1 lists itself and refers to port 2, as
	// two gateways that know each other would.
	p2, err := tg.AddPort(target.PortConfig{ID: 2, Addr: "127.0.0.1:0", Transport: target.TransportRDMA})
	if err != nil {
		t.Fatal(err)
	}
	p2.LinkSubsystem(sub)
	p1, err := tg.AddPort(target.PortConfig{ID: 1, Addr: "127.0.0.1:0", Transport: target.TransportRDMA,
		Referrals: []target.Referral{{PortID: 2, Addr: p2.Addr().String()}, {PortID: 3, Addr: "127.0.0.1:1"}}})
	if err != nil {
		t.Fatal(err)
	}
	p1.LinkSubsystem(sub)
	first := p1.Addr().String()
	done := make(chan error, 1)
	var out string
	go func() {
		var err error
		out, _, err = runCLI(t, "bench", "nvme://"+first+"/"+cliNQN+"/1", "--discover", "--idle", "2s", "--runtime", "200ms", "--qd", "4", "-q")
		done <- err
	}()
	ports := map[uint16]bool{}
	for deadline := time.Now().Add(10 * time.Second); len(ports) < 2 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, c := range tg.Controllers() {
			if c.Subsystem == cliNQN && c.IOQueues > 0 {
				ports[c.PortID] = true
			}
		}
	}
	if err := <-done; err != nil || !strings.Contains(out, "errors: 0") {
		t.Fatalf("bench --discover: %v\n%s", err, out)
	}
	if !ports[1] || !ports[2] {
		t.Errorf("controllers seen on ports %v; want both ports, 1 and 2 (by referral)", ports)
	}
	_, _, err = runCLI(t, "bench", "nvme://"+first+"/nqn.2026-12.io.rdisk:none/1", "--discover", "--runtime", "100ms")
	if err == nil || !strings.Contains(err.Error(), "--discover: the discovery log at "+first) {
		t.Errorf("bench --discover of a subsystem the log does not list: %v", err)
	}
}
