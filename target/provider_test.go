package target

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/nvmeof/host"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/iwarp"
)

// namedProvider is a software iWARP provider under another name, standing
// in for the verbs provider a port's rdisk_rdma names.
type namedProvider struct {
	*iwarp.Provider
	name string
}

func (n namedProvider) Name() string { return n.name }

// connectPort connects an NVMe-oF/RDMA host through hp to the namespace's
// subsystem on run's port id.
func connectPort(t *testing.T, ctx context.Context, hp rdma.Provider, run *Running, id uint16) *host.Controller {
	t.Helper()
	hc, err := host.Connect(ctx, hp, run.T.Port(id).Addr().String(), "nqn.2026-12.io.rdisk:p", host.Config{
		HostNQN: "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555", HostID: [16]byte{1}, IOQueues: 1, QueueDepth: 8})
	if err != nil {
		t.Fatalf("NVMe-oF/RDMA through port %d: %v", id, err)
	}
	return hc
}

const providersConfig = `{
  "subsystems": [{"nqn": "nqn.2026-12.io.rdisk:p", "attr": {"allow_any_host": "1"},
    "namespaces": [{"nsid": 1, "enable": 1, "device": {"path": "ram:1MiB"}}]}],
  "ports": [{"portid": 1, "addr": {"trtype": "rdma", "traddr": "127.0.0.1", "trsvcid": "0"}, "subsystems": ["nqn.2026-12.io.rdisk:p"]},
            {"portid": 2, "addr": {"trtype": "rdma", "traddr": "127.0.0.1", "trsvcid": "0"}, "subsystems": ["nqn.2026-12.io.rdisk:p"],
             "rdisk_rdma": "verbs"}],
  "rdisk_srp": {"listen": ["127.0.0.1:0"], "rdisk_rdma": "auto",
    "ports": [{"id_ext": "0000000000000007", "ioc_guid": "726469736b000007", "allow_any_initiator": true,
               "luns": [{"lun": 0, "subsystem": "nqn.2026-12.io.rdisk:p", "nsid": 1}]}]}
}`

// TestPortProviders: a port's (and the SRP section's) rdisk_rdma is served
// by the provider Config.OpenRDMA returns for it and its address, the
// other ports by the target's; hosts connect through both; the status
// names each port's provider; without OpenRDMA the configuration is
// refused naming the port.
func TestPortProviders(t *testing.T) {
	t.Parallel()
	def := newIWARP(t)
	defer def.Close()
	ip := newIWARP(t)
	defer ip.Close()
	other := namedProvider{ip, "verbs:test0"}
	var mu sync.Mutex
	var asked []string
	c, err := Parse(strings.NewReader(providersConfig))
	if err != nil {
		t.Fatal(err)
	}
	c.OpenRDMA = func(choice, addr string) (rdma.Provider, error) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, choice+" "+addr)
		return other, nil
	}
	run, err := Start(c, def, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	mu.Lock()
	got := strings.Join(asked, ", ")
	mu.Unlock()
	if got != "verbs 127.0.0.1:0, auto 127.0.0.1:0" && got != "auto 127.0.0.1:0, verbs 127.0.0.1:0" {
		t.Errorf("OpenRDMA asked for %q, want the port's verbs and the SRP section's auto, each with its address", got)
	}
	if p := run.T.Port(1).Provider(); p != rdma.Provider(def) {
		t.Errorf("port 1 (no rdisk_rdma) served by %v, want the target's provider", p)
	}
	if p := run.T.Port(2).Provider(); p != rdma.Provider(other) {
		t.Errorf("port 2 (rdisk_rdma verbs) served by %v, want OpenRDMA's", p)
	}
	if p := run.SRPProvider(); p != rdma.Provider(other) {
		t.Errorf("SRP (rdisk_rdma auto) served by %v, want OpenRDMA's", p)
	}
	names := map[uint16]string{}
	for _, ps := range run.Status().Ports {
		names[ps.ID] = ps.Provider
	}
	if names[1] != "iwarp" || names[2] != "verbs:test0" {
		t.Errorf("status providers %v, want port 1 iwarp, port 2 verbs:test0", names)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hp := newIWARP(t)
	defer hp.Close()
	for _, id := range []uint16{1, 2} {
		connectPort(t, ctx, hp, run, id).Close()
	}

	// Without OpenRDMA, a configuration naming a provider does not start.
	c2, _ := Parse(strings.NewReader(providersConfig))
	if r2, err := Start(c2, def, nil, nil); err == nil {
		r2.Close()
		t.Fatal("rdisk_rdma without Config.OpenRDMA: started")
	} else if !strings.Contains(err.Error(), `rdisk_rdma "`) {
		t.Fatalf("rdisk_rdma without Config.OpenRDMA: %v, want an error naming rdisk_rdma", err)
	}
}

func TestPortProviderErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ from, to, want string }{
		{`"rdisk_rdma": "verbs"`, `"rdisk_rdma": "ibverbs"`, `ports[1].rdisk_rdma: port 2: "ibverbs": want auto, iwarp or verbs`},
		{`"trtype": "rdma", "traddr": "127.0.0.1", "trsvcid": "0"}, "subsystems": ["nqn.2026-12.io.rdisk:p"],
             "rdisk_rdma"`, `"trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": "0"}, "subsystems": ["nqn.2026-12.io.rdisk:p"],
             "rdisk_rdma"`, "ports[1].rdisk_rdma: port 2 serves NVMe/TCP only"},
	} {
		js := strings.Replace(providersConfig, tc.from, tc.to, 1)
		if js == providersConfig {
			t.Fatalf("%s: not in the configuration", tc.from)
		}
		_, err := Parse(strings.NewReader(js))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s -> %s: %v, want %q", tc.from, tc.to, err, tc.want)
		}
	}
}

// TestPortProviderMetrics: with a target provider that is not the software
// iWARP one (verbs-like), the iWARP metrics come from the port whose
// rdisk_rdma names it.
func TestPortProviderMetrics(t *testing.T) {
	t.Parallel()
	vp := newIWARP(t)
	defer vp.Close()
	ip := newIWARP(t)
	defer ip.Close()
	js := strings.Replace(providersConfig, `"rdisk_rdma": "verbs"`, `"rdisk_rdma": "iwarp"`, 1)
	js = strings.Replace(js, `"rdisk_rdma": "auto"`, `"rdisk_rdma": "iwarp"`, 1)
	c, err := Parse(strings.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	c.OpenRDMA = func(choice, addr string) (rdma.Provider, error) { return ip, nil }
	// Port 1 takes the target's provider: verbs-like, its listener one TCP
	// port up (ownSpace); nothing connects to it here.
	run, err := Start(c, ownSpace{vp}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	col := run.Collector()
	if ms := gather(t, col, "rdisk_iwarp_connections", nil); len(ms) != 1 || ms[0].GetGauge().GetValue() != 0 {
		t.Fatalf("iWARP connections before any host: %v", ms)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hp := newIWARP(t)
	defer hp.Close()
	defer connectPort(t, ctx, hp, run, 2).Close()
	if ms := gather(t, col, "rdisk_iwarp_connections", nil); len(ms) != 1 || ms[0].GetGauge().GetValue() < 2 {
		t.Fatalf("iWARP connections with a host on port 2 (admin and I/O queue): %v", ms)
	}
}

// newIWARP opens a software iWARP provider for a test, failing it if the
// provider cannot be opened (the caller closes it).
func newIWARP(tb testing.TB) *iwarp.Provider {
	tb.Helper()
	p, err := iwarp.New(iwarp.Config{})
	if err != nil {
		tb.Fatalf("opening the software iWARP provider: %v", err)
	}
	return p
}
