package target

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/nvmeof/host"
	"github.com/rdisk/rdisk/rdma/iwarp"
)

// flakyDisk is a RAM disk whose Health fails while err is set, as an RBD
// image's does when the Ceph monitors cannot be reached.
type flakyDisk struct {
	*backstore.Mem
	err    atomic.Pointer[error]
	probes atomic.Int64
	// hang, while set, is a channel Health waits on (a store that does
	// not answer).
	hang atomic.Pointer[chan struct{}]
	// ioMode makes Stats report failing or good I/O (see ioFailing).
	ioMode         atomic.Int32
	ioErrs, ioGood atomic.Uint64
}

func (d *flakyDisk) Health() (backstore.Health, error) {
	d.probes.Add(1)
	if h := d.hang.Load(); h != nil {
		<-*h
	}
	if e := d.err.Load(); e != nil {
		return backstore.Health{}, *e
	}
	return d.Mem.Health()
}

// I/O modes of a flakyDisk's Stats: each call adds one failed read
// (ioFailing), one failed and one good read (ioMixed), or one good read
// (ioGood) to the RAM disk's counters; ioReal adds nothing.
const (
	ioReal int32 = iota
	ioFailing
	ioMixed
	ioGood
)

func (d *flakyDisk) Stats() backstore.Stats {
	switch d.ioMode.Load() {
	case ioFailing:
		d.ioErrs.Add(1)
	case ioMixed:
		d.ioErrs.Add(1)
		d.ioGood.Add(1)
	case ioGood:
		d.ioGood.Add(1)
	}
	s := d.Mem.Stats()
	e, g := d.ioErrs.Load(), d.ioGood.Load()
	s.Read.Ops += e + g
	s.Read.Errors += e
	return s
}

func (d *flakyDisk) fail(err error) {
	if err == nil {
		d.err.Store(nil)
		return
	}
	d.err.Store(&err)
}

// healthConfig: namespace 1 in ANA group 1, namespace 2 in group 2 (both
// optimized on port 1), namespace 2 the one iSCSI LUN (this gateway's
// portal in ALUA group 1, the other gateway's in group 2); the monitor
// probes every 20ms.
const healthConfig = `{
  "subsystems": [{"nqn": "nqn.2026-12.io.rdisk:a", "attr": {"allow_any_host": "1"}, "namespaces": [
      {"nsid": 1, "enable": 1, "device": {"path": "disk1"}},
      {"nsid": 2, "enable": 1, "device": {"path": "disk2"}, "ana_grpid": 2}]}],
  "ports": [{"portid": 1, "addr": {"trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": "0"},
             "ana_groups": [{"grpid": 1, "ana": {"state": "optimized"}}, {"grpid": 2, "ana": {"state": "optimized"}}],
             "subsystems": ["nqn.2026-12.io.rdisk:a"]}],
  "rdisk_iscsi": {"portals": ["127.0.0.1:0"], "tpgt": 1,
    "port_groups": [{"id": 1, "state": "active-optimized"}, {"id": 2, "state": "standby", "ports": [2]}],
    "targets": [{"iqn": "iqn.2026-12.io.rdisk:h", "luns": [{"lun": 0, "subsystem": "nqn.2026-12.io.rdisk:a", "nsid": 2}]}]}GATEWAY
}`

// healthGateway is healthConfig's rdisk_gateway section.
const healthGateway = `,
  "rdisk_gateway": {"follow_health": true, "health_interval": "20ms", "health_failures": 2, "health_recoveries": 2}`

// healthConfigWith returns healthConfig with gw in place of its
// rdisk_gateway section.
func healthConfigWith(gw string) string { return strings.Replace(healthConfig, "GATEWAY", gw, 1) }

// startFlaky starts js with every namespace on a flakyDisk, by device
// path.
func startFlaky(t *testing.T, js string) (*Running, *iwarp.Provider, func(path string) *flakyDisk) {
	t.Helper()
	return startFlakyLog(t, js, nil)
}

func startFlakyLog(t *testing.T, js string, log *slog.Logger) (*Running, *iwarp.Provider, func(path string) *flakyDisk) {
	t.Helper()
	c, err := Parse(strings.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	disks := map[string]*flakyDisk{}
	c.OpenDevice = func(path string, o DeviceOptions) (backstore.Disk, error) {
		m, err := backstore.NewMem(1<<20, 512)
		if err != nil {
			return nil, err
		}
		d := &flakyDisk{Mem: m}
		mu.Lock()
		disks[path] = d
		mu.Unlock()
		return d, nil
	}
	p := newIWARP(t)
	t.Cleanup(func() { p.Close() })
	run, err := Start(c, p, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Close() })
	return run, p, func(path string) *flakyDisk {
		mu.Lock()
		defer mu.Unlock()
		return disks[path]
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func iscsiGroups(run *Running) string {
	var b strings.Builder
	for _, g := range run.Status().ISCSIPortGroups {
		fmt.Fprintf(&b, "%d=%s ", g.ID, g.State)
	}
	return strings.TrimSpace(b.String())
}

// TestHealthFollow: with rdisk_gateway.follow_health, a namespace whose
// disk's health checks fail (twice in a row) makes its ANA group
// inaccessible on the port (the host follows the ANA change, I/O gets
// ErrPath, the status and the metric say so) and, being the only iSCSI
// LU, this gateway's ALUA port group unavailable; the model keeps the
// configured states, an operator's state set meanwhile is kept for later,
// a reload keeps the override, and on recovery (twice good) the
// operator's states come back.
func TestHealthFollow(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	run, p, disk := startFlakyLog(t, healthConfigWith(healthGateway), slog.New(slog.NewTextHandler(&logs, nil)))
	if !run.Monitoring() {
		t.Fatal("follow_health set and no monitor")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctrl := connectTCP(t, ctx, run, p, "nqn.2026-12.io.rdisk:a", host.Config{})
	ns := map[uint32]*host.Namespace{}
	for _, id := range []uint32{1, 2} {
		n, err := ctrl.Namespace(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		ns[id] = n
	}
	want := func(id uint32, st blockdev.AccessState) {
		t.Helper()
		waitFor(t, fmt.Sprintf("namespace %d %s (is %s)", id, st, ns[id].AccessState()), func() bool { return ns[id].AccessState() == st })
	}
	want(1, blockdev.AccessOptimized)
	want(2, blockdev.AccessOptimized)
	waitFor(t, "probes", func() bool { return disk("disk2").probes.Load() >= 3 })
	st := run.Status()
	if st.Namespaces[0].Health != "ok" || st.Namespaces[1].Health != "ok" {
		t.Fatalf("health %q %q, want ok", st.Namespaces[0].Health, st.Namespaces[1].Health)
	}
	if g := iscsiGroups(run); g != "1=active-optimized 2=standby" {
		t.Fatalf("iSCSI port groups %q", g)
	}
	healthy := func(nsid string) float64 {
		t.Helper()
		ms := gather(t, run.Collector(), "rdisk_namespace_healthy", map[string]string{"nsid": nsid})
		if len(ms) != 1 {
			t.Fatalf("rdisk_namespace_healthy{nsid=%s}: %v", nsid, ms)
		}
		return ms[0].GetGauge().GetValue()
	}
	if healthy("2") != 1 {
		t.Fatal("rdisk_namespace_healthy 0 for a healthy disk")
	}

	// The store stops answering.
	disk("disk2").fail(fmt.Errorf("rbd img: pool stats: %w", backstore.ErrTimeout))
	want(2, blockdev.AccessInaccessible)
	want(1, blockdev.AccessOptimized)
	anaLog := func() string {
		t.Helper()
		l, err := ctrl.ANALog(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, g := range l.Groups {
			fmt.Fprintf(&b, "%d=%s%v ", g.GroupID, g.State, g.NSIDs)
		}
		return strings.TrimSpace(b.String())
	}
	if got := anaLog(); got != "1=optimized[1] 2=inaccessible[2]" {
		t.Fatalf("ANA log page %q", got)
	}
	buf := make([]byte, 4096)
	if _, err := blockdev.ReadAt(ns[2], buf, 0); !errors.Is(err, blockdev.ErrPath) {
		t.Fatalf("read from a failing gateway's group: %v, want ErrPath", err)
	}
	if _, err := blockdev.ReadAt(ns[1], buf, 0); err != nil {
		t.Fatalf("read from the healthy group: %v", err)
	}
	st = run.Status()
	if got := st.Ports[0].ANA; got[1] != "optimized" || got[2] != "inaccessible" {
		t.Fatalf("status ANA %v", got)
	}
	if h := st.Namespaces[1].Health; !strings.HasPrefix(h, "failing: ") || !strings.Contains(h, "did not answer in time") {
		t.Fatalf("namespace 2 health %q", h)
	}
	if st.Namespaces[0].Health != "ok" {
		t.Fatalf("namespace 1 health %q", st.Namespaces[0].Health)
	}
	waitFor(t, "iSCSI group 1 unavailable", func() bool { return iscsiGroups(run) == "1=unavailable 2=standby" })
	if l := strings.Join(logs.lines(), "\n"); !strings.Contains(l, "level=WARN msg=\"target: namespace's storage failing") || !strings.Contains(l, "nsid=2") ||
		!strings.Contains(l, "ana_groups=[2]") || !strings.Contains(l, "scsi_unavailable=iscsi") || !strings.Contains(l, "did not answer in time") {
		t.Fatalf("no warning of the transition:\n%s", l)
	}
	if healthy("2") != 0 || healthy("1") != 1 {
		t.Fatal("rdisk_namespace_healthy does not follow")
	}
	// The model is the configuration's.
	c := run.Config()
	if s := c.Ports[0].ANAGroups[1].ANA["state"]; s != "optimized" {
		t.Fatalf("model: group 2 %q", s)
	}
	if s := c.ISCSI.PortGroups[0].State; s != "active-optimized" {
		t.Fatalf("model: iSCSI group 1 %q", s)
	}

	// An operator's states during the override: kept for later.
	ch, err := run.SetANAState(1, 2, "non-optimized")
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Applied) != 1 || !strings.Contains(ch.Applied[0], "held inaccessible") {
		t.Fatalf("changes %q", ch.Applied)
	}
	if _, err := run.SetPortGroupState("iscsi", 1, "active-non-optimized"); err != nil {
		t.Fatal(err)
	}
	// A reload keeps the override.
	if _, err := run.Apply(run.Config()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(60 * time.Millisecond)
	if got := run.Status().Ports[0].ANA[2]; got != "inaccessible" {
		t.Fatalf("group 2 %s during the override after an operator's change and a reload", got)
	}
	if g := iscsiGroups(run); g != "1=unavailable 2=standby" {
		t.Fatalf("iSCSI port groups %q during the override", g)
	}
	if ns[2].AccessState() != blockdev.AccessInaccessible {
		t.Fatalf("namespace 2 %s during the override", ns[2].AccessState())
	}
	if ch, err := run.Apply(withGateway(t, run.Config(), nil)); err != nil || len(ch.Skipped) != 1 || !strings.Contains(ch.Skipped[0], "rdisk_gateway") {
		t.Fatalf("reload without rdisk_gateway: %v %+v", err, ch)
	}

	// The store is back: the operator's states.
	disk("disk2").fail(nil)
	want(2, blockdev.AccessNonOptimized)
	if got := anaLog(); got != "1=optimized[1] 2=non-optimized[2]" {
		t.Fatalf("ANA log page after recovery %q", got)
	}
	if _, err := blockdev.ReadAt(ns[2], buf, 0); err != nil {
		t.Fatalf("read after recovery: %v", err)
	}
	waitFor(t, "iSCSI group 1 back", func() bool { return iscsiGroups(run) == "1=active-non-optimized 2=standby" })
	st = run.Status()
	if st.Namespaces[1].Health != "ok" || st.Ports[0].ANA[2] != "non-optimized" {
		t.Fatalf("after recovery: health %q, ANA %v", st.Namespaces[1].Health, st.Ports[0].ANA)
	}
	if healthy("2") != 1 {
		t.Fatal("rdisk_namespace_healthy 0 after recovery")
	}
	if l := strings.Join(logs.lines(), "\n"); !strings.Contains(l, "level=WARN msg=\"target: namespace's storage healthy again") {
		t.Fatalf("no warning of the recovery:\n%s", l)
	}
}

// withGateway returns c with its rdisk_gateway section set to g.
func withGateway(t *testing.T, c *Config, g *GatewayConfig) *Config {
	t.Helper()
	c.Gateway = g
	return c
}

// TestHealthSCSIAllLUs: an iSCSI port group goes unavailable only when
// every LU the transport exports fails; ANA group 1 (not listed on the
// port) goes inaccessible and back to optimized; removing a failing
// namespace ends its override.
func TestHealthSCSIAllLUs(t *testing.T) {
	t.Parallel()
	js := strings.Replace(healthConfigWith(healthGateway), `"luns": [{"lun": 0, "subsystem": "nqn.2026-12.io.rdisk:a", "nsid": 2}]`,
		`"luns": [{"lun": 0, "subsystem": "nqn.2026-12.io.rdisk:a", "nsid": 2}, {"lun": 1, "subsystem": "nqn.2026-12.io.rdisk:a", "nsid": 1}]`, 1)
	js = strings.Replace(js, `"ana_groups": [{"grpid": 1, "ana": {"state": "optimized"}}, {"grpid": 2, "ana": {"state": "optimized"}}]`,
		`"ana_groups": [{"grpid": 2, "ana": {"state": "optimized"}}]`, 1)
	run, _, disk := startFlaky(t, js)
	ana := func(g uint32) string { return run.Status().Ports[0].ANA[g] }
	disk("disk2").fail(errors.New("monitors unreachable"))
	waitFor(t, "group 2 inaccessible", func() bool { return ana(2) == "inaccessible" })
	time.Sleep(80 * time.Millisecond)
	if g := iscsiGroups(run); g != "1=active-optimized 2=standby" {
		t.Fatalf("iSCSI port groups %q with one of two LUs failing", g)
	}
	if ana(1) != "optimized" {
		t.Fatalf("group 1 %s", ana(1))
	}
	disk("disk1").fail(errors.New("monitors unreachable"))
	waitFor(t, "group 1 inaccessible", func() bool { return ana(1) == "inaccessible" })
	waitFor(t, "iSCSI group 1 unavailable", func() bool { return iscsiGroups(run) == "1=unavailable 2=standby" })
	// Namespace 2 removed (its LUN with it): its group is the model's
	// again; the transport's one LU left still fails.
	if _, err := run.RemoveNamespace("nqn.2026-12.io.rdisk:a", 2); err != nil {
		t.Fatal(err)
	}
	if ana(2) != "optimized" {
		t.Fatalf("group 2 %s after its failing namespace was removed", ana(2))
	}
	if run.NamespaceHealth("nqn.2026-12.io.rdisk:a", 2) != "" {
		t.Fatal("a removed namespace is still failing")
	}
	if g := iscsiGroups(run); g != "1=unavailable 2=standby" {
		t.Fatalf("iSCSI port groups %q", g)
	}
	disk("disk1").fail(nil)
	waitFor(t, "group 1 optimized", func() bool { return ana(1) == "optimized" })
	waitFor(t, "iSCSI group 1 back", func() bool { return iscsiGroups(run) == "1=active-optimized 2=standby" })
}

// TestHealthOff: without rdisk_gateway (or with follow_health false) no
// monitor runs: failing health checks change nothing.
func TestHealthOff(t *testing.T) {
	t.Parallel()
	for _, gw := range []string{"", `, "rdisk_gateway": {"follow_health": false, "health_interval": "20ms"}`} {
		js := healthConfigWith(gw)
		run, _, disk := startFlaky(t, js)
		if run.Monitoring() {
			t.Fatalf("%q: a monitor runs", gw)
		}
		disk("disk2").fail(backstore.ErrFenced)
		time.Sleep(100 * time.Millisecond)
		st := run.Status()
		if st.Ports[0].ANA[2] != "optimized" || st.Namespaces[1].Health != "" {
			t.Fatalf("%q: ANA %v, health %q", gw, st.Ports[0].ANA, st.Namespaces[1].Health)
		}
		if n := disk("disk2").probes.Load(); n != 0 {
			t.Fatalf("%q: %d health checks", gw, n)
		}
		if ms := gather(t, run.Collector(), "rdisk_namespace_healthy", nil); len(ms) != 0 {
			t.Fatalf("%q: rdisk_namespace_healthy without the monitor: %v", gw, ms)
		}
	}
}

// TestHealthConfigErrors: the rdisk_gateway section is checked strictly,
// the error naming the field.
func TestHealthConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ section, path, want string }{
		{`{"follow_health": true, "health_interval": "soon"}`, "rdisk_gateway.health_interval", "not a duration"},
		{`{"follow_health": true, "health_interval": "1ms"}`, "rdisk_gateway.health_interval", "10ms to 1h"},
		{`{"follow_health": true, "health_failures": -1}`, "rdisk_gateway.health_failures", "1 to 1000"},
		{`{"follow_health": true, "health_recoveries": 1001}`, "rdisk_gateway.health_recoveries", "1 to 1000"},
		{`{"follow_health": true, "health_recoveries": "3"}`, "rdisk_gateway.health_recoveries", ""},
		{`{"follow_health": "yes"}`, "rdisk_gateway.follow_health", ""},
		{`{"follow": true}`, "rdisk_gateway", "follow"},
	} {
		_, err := Parse(strings.NewReader(`{"rdisk_gateway": ` + tc.section + `}`))
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.HasPrefix(ce.Path, tc.path) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a ConfigError at %s with %q", tc.section, err, tc.path, tc.want)
		}
	}
	c, err := Parse(strings.NewReader(`{"rdisk_gateway": {"follow_health": true}}`))
	if err != nil {
		t.Fatal(err)
	}
	if s, _, err := c.Gateway.settings(); err != nil || s != (healthSettings{DefaultHealthInterval, DefaultHealthFailures, DefaultHealthRecoveries}) {
		t.Fatalf("defaults: %+v %v", s, err)
	}
}

// TestHealthProbe: a closed disk (being replaced) and a device without
// health data are not failures; any other error of Health is.
func TestHealthProbe(t *testing.T) {
	t.Parallel()
	m, err := backstore.NewMem(1<<20, 512)
	if err != nil {
		t.Fatal(err)
	}
	d := &flakyDisk{Mem: m}
	for _, tc := range []struct {
		err  error
		fail bool
	}{
		{nil, false},
		{fmt.Errorf("x: %w", backstore.ErrClosed), false},
		{fmt.Errorf("x: %w", backstore.ErrUnsupported), false},
		{backstore.ErrFenced, true},
		{errors.New("monitors unreachable"), true},
	} {
		d.fail(tc.err)
		if got := probe(d); (got != nil) != tc.fail {
			t.Errorf("Health error %v: probe %v", tc.err, got)
		}
	}
}

// TestHealthIOErrors: I/O that fails on a disk whose health check still
// answers (a fenced or blocklisted client) fails the namespace over once
// every I/O between two checks failed; errors among good I/O do not, and
// good I/O brings the namespace back.
func TestHealthIOErrors(t *testing.T) {
	t.Parallel()
	run, _, disk := startFlaky(t, healthConfigWith(healthGateway))
	d := disk("disk2")
	checks := func(n int64) {
		t.Helper()
		m := d.probes.Load()
		waitFor(t, "health checks", func() bool { return d.probes.Load() >= m+n })
	}
	d.ioMode.Store(ioMixed)
	checks(5)
	if st := run.Status().Ports[0].ANA[2]; st != "optimized" {
		t.Fatalf("group 2 %s with some I/O failing among good I/O (health %q)", st, run.NamespaceHealth("nqn.2026-12.io.rdisk:a", 2))
	}
	d.ioMode.Store(ioFailing)
	waitFor(t, "group 2 inaccessible", func() bool { return run.Status().Ports[0].ANA[2] == "inaccessible" })
	if h := run.NamespaceHealth("nqn.2026-12.io.rdisk:a", 2); !strings.Contains(h, "I/O errors and no I/O that succeeded since the last check") {
		t.Fatalf("health %q", h)
	}
	if st := run.Status().Ports[0].ANA[1]; st != "optimized" {
		t.Fatalf("group 1 (namespace 1, no I/O errors) %s", st)
	}
	d.ioMode.Store(ioGood)
	waitFor(t, "group 2 optimized", func() bool { return run.Status().Ports[0].ANA[2] == "optimized" })
	if h := run.NamespaceHealth("nqn.2026-12.io.rdisk:a", 2); h != "" {
		t.Fatalf("health %q after recovery", h)
	}
}

// TestHealthHungProbe: a health check that does not answer within the
// interval fails (and no second check piles up behind it); when it
// answers again the namespace recovers; Close does not wait for a check
// that hangs.
func TestHealthHungProbe(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	again := make(chan struct{})
	t.Cleanup(func() { close(again) }) // after run.Close: Close must not wait for it
	run, _, disk := startFlaky(t, healthConfigWith(healthGateway))
	disk("disk2").hang.Store(&release)
	waitFor(t, "group 2 inaccessible", func() bool { return run.Status().Ports[0].ANA[2] == "inaccessible" })
	if h := run.NamespaceHealth("nqn.2026-12.io.rdisk:a", 2); !strings.Contains(h, "did not answer within 20ms") {
		t.Fatalf("health %q", h)
	}
	n := disk("disk2").probes.Load()
	time.Sleep(100 * time.Millisecond)
	if m := disk("disk2").probes.Load(); m != n {
		t.Fatalf("%d more health checks started behind a hung one", m-n)
	}
	disk("disk2").hang.Store(nil)
	once.Do(func() { close(release) })
	waitFor(t, "group 2 optimized", func() bool { return run.Status().Ports[0].ANA[2] == "optimized" })
	// Hung again, and left hanging for Close.
	disk("disk2").hang.Store(&again)
	waitFor(t, "group 2 inaccessible again", func() bool { return run.Status().Ports[0].ANA[2] == "inaccessible" })
}
