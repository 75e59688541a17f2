package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/host"
	"github.com/rdisk/rdisk/rdma/iwarp"
	"github.com/rdisk/rdisk/target"
)

const adminNQN = "nqn.2026-12.io.rdisk:admin"

// startAdminTarget starts a target from a configuration with its admin
// socket, and returns it, the NVMe/TCP address and the socket path.
func startAdminTarget(t *testing.T) (*target.Running, string, string) {
	t.Helper()
	cfg, err := target.Parse(strings.NewReader(`{
  "subsystems": [{"nqn": "` + adminNQN + `", "attr": {"allow_any_host": "1"},
    "namespaces": [{"nsid": 1, "enable": 1, "device": {"path": "ram:32MiB"}}]}],
  "ports": [{"portid": 1, "addr": {"trtype": "rdma+tcp", "traddr": "127.0.0.1", "trsvcid": "0"}, "subsystems": ["` + adminNQN + `"]}]
}`))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := iwarp.New(iwarp.Config{})
	t.Cleanup(func() { p.Close() })
	run, err := target.Start(cfg, p, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Close() })
	sock := filepath.Join(t.TempDir(), "admin.sock")
	ln, err := target.ListenAdmin(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go target.ServeAdmin(ctx, ln, run.AdminHandler(nil, nil), nil)
	return run, run.Ports[0].Addr().String(), sock
}

// TestAdminUnderBench adds, resizes and removes a namespace through the
// admin socket while rdisk bench --verify runs on another: a connected
// host gets each Namespace Attribute Changed event and sees the new
// capacity, I/O to the removed namespace fails with Invalid Namespace or
// Format, and the benchmark is not disturbed.
func TestAdminUnderBench(t *testing.T) {
	t.Parallel()
	_, addr, sock := startAdminTarget(t)
	benchDone := make(chan error, 1)
	var benchOut string
	go func() {
		out, errOut, err := runCLI(t, "bench", "nvme+tcp://"+addr+"/"+adminNQN+"/1", "--rw", "randrw", "--verify", "--qd", "8",
			"--runtime", "2s", "--size", "4MiB", "--json")
		benchOut = out + errOut
		benchDone <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hostID := [16]byte{0xad, 0x31}
	events := make(chan host.Event, 16)
	ctrl, err := host.Connect(ctx, nil, addr, adminNQN, host.Config{Transport: host.TransportTCP, HostNQN: cliHost, HostID: hostID,
		IOQueues: 1, QueueDepth: 8, OnEvent: func(e host.Event) { events <- e }})
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.Close()
	a := target.NewAdminClient(sock)
	changed := func(what string) {
		t.Helper()
		select {
		case e := <-events:
			if e.Info != nvmeof.NoticeNSChanged || !(e.AllNamespaces || slices.Contains(e.Namespaces, 2)) {
				t.Fatalf("%s: event %+v", what, e)
			}
		case <-ctx.Done():
			t.Fatalf("%s: no Namespace Attribute Changed event", what)
		}
	}
	ns := target.Namespace{NSID: 2, Enable: 1}
	ns.Device.Path = "ram:4MiB"
	if err := a.Do(ctx, http.MethodPost, "/v1/subsystems/"+adminNQN+"/namespaces", ns, nil); err != nil {
		t.Fatal(err)
	}
	changed("add")
	n2, err := ctrl.Namespace(ctx, 2)
	if err != nil || n2.Info().Size != 4<<20 {
		t.Fatalf("the added namespace: %v", err)
	}
	buf := make([]byte, 4096)
	if _, err := blockdev.WriteAt(n2, buf, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Do(ctx, http.MethodPost, "/v1/subsystems/"+adminNQN+"/namespaces/2/resize", target.ResizeRequest{Size: "8MiB"}, nil); err != nil {
		t.Fatal(err)
	}
	changed("resize")
	if got := n2.Info().Size; got != 8<<20 {
		t.Fatalf("the host sees %d bytes after the resize, want 8 MiB", got)
	}
	if _, err := blockdev.WriteAt(n2, buf, 8<<20-4096); err != nil {
		t.Fatalf("a write in the grown part: %v", err)
	}
	if err := a.Do(ctx, http.MethodDelete, "/v1/subsystems/"+adminNQN+"/namespaces/2", nil, nil); err != nil {
		t.Fatal(err)
	}
	changed("remove")
	_, err = blockdev.ReadAt(n2, buf, 0)
	var se *host.StatusError
	if !errors.As(err, &se) || se.Status.Code() != nvmeof.StatusInvalidNamespace {
		t.Fatalf("a read of the removed namespace: %v", err)
	}
	if err := <-benchDone; err != nil {
		t.Fatalf("bench: %v\n%s", err, benchOut)
	}
	var res struct {
		IOs          uint64 `json:"ios"`
		Errors       uint64 `json:"errors"`
		VerifyErrors uint64 `json:"verify_errors"`
	}
	if err := json.Unmarshal([]byte(benchOut[:strings.LastIndexByte(benchOut, '}')+1]), &res); err != nil || res.IOs == 0 || res.Errors != 0 || res.VerifyErrors != 0 {
		t.Fatalf("bench under admin changes: %v\n%s", err, benchOut)
	}
}

// TestAdminCLI runs the rdisk admin verbs against a target's socket.
func TestAdminCLI(t *testing.T) {
	t.Parallel()
	run, _, sock := startAdminTarget(t)
	admin := func(args ...string) (string, error) {
		t.Helper()
		out, errOut, err := runCLI(t, append([]string{"admin", "--socket", sock}, args...)...)
		return out + errOut, err
	}
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"ns", "add", adminNQN, "--device", "ram:2MiB"}, "namespace 2: added (ram:2MiB)"},
		{[]string{"ns", "resize", adminNQN, "2", "4MiB"}, "namespace 2: 4MiB"},
		{[]string{"ns", "disable", adminNQN, "2"}, "namespace 2: disabled"},
		{[]string{"subsystem", "add", "nqn.2026-12.io.rdisk:two", "--allow-any-host"}, "subsystem nqn.2026-12.io.rdisk:two: added"},
		{[]string{"port", "link", "1", "nqn.2026-12.io.rdisk:two"}, "port 1: subsystem nqn.2026-12.io.rdisk:two linked"},
		{[]string{"host", "allow", adminNQN, cliHost}, "host " + cliHost + " allowed"},
		{[]string{"status"}, "ram:4MiB"},
		{[]string{"port", "disable", "1"}, "port 1: disabled"},
		{[]string{"port", "enable", "1"}, "port 1: enabled"},
		{[]string{"ana", "set", "1", "2", "non-optimized"}, "port 1 ANA group 2: non-optimized"},
		{[]string{"ana", "group", adminNQN, "1", "2"}, "namespace 1: ANA group 2"},
		{[]string{"status"}, "1:optimized 2:non-optimized"},
		{[]string{"gateway", "standby"}, "port 1 ANA group 2: inaccessible"},
		{[]string{"ana", "rm", "1", "2"}, "port 1 ANA group 2: removed"},
	}
	for _, s := range steps {
		out, err := admin(s.args...)
		if err != nil || !strings.Contains(out, s.want) {
			t.Fatalf("admin %v: %v\n%s\nwant %q", s.args, err, out, s.want)
		}
	}
	for _, s := range []struct {
		args []string
		want string
	}{
		{[]string{"ns", "rm", "nqn.2026-12.io.rdisk:none", "1"}, "subsystem nqn.2026-12.io.rdisk:none: not found"},
		{[]string{"ns", "rm", adminNQN, "x"}, `namespace ID "x"`},
		{[]string{"ns", "resize", adminNQN, "2", "big"}, "SIZE:"},
		{[]string{"lun", "map", adminNQN, "1"}, "needs --iscsi IQN or --srp PORT"},
		{[]string{"close", "nvme", adminNQN}, "admin close takes"},
		{[]string{"save", "--format", "yaml"}, `--format "yaml"`},
		{[]string{"ana", "set", "1", "0", "optimized"}, `ANA group "0": want 1 to 128`},
		{[]string{"ana", "set", "1", "3", "sideways"}, `state "sideways"`},
		{[]string{"ana", "set", "7", "3", "optimized"}, "port 7: not found"},
		{[]string{"alua", "set", "iscsi", "1", "standby"}, "rdisk_iscsi: not found"},
		{[]string{"alua", "set", "fc", "1", "standby"}, `transport "fc"`},
		{[]string{"iscsi", "add", "iqn.2026-12.io.rdisk:x"}, "no rdisk_iscsi section is served"},
		{[]string{"acl", "set", "iqn.2026-12.io.rdisk:x", "iqn.2026-12.io.rdisk:i", "--map", "5"}, `--map "5": want MAPPED=LUN`},
		{[]string{"acl", "set", "iqn.2026-12.io.rdisk:x", "iqn.2026-12.io.rdisk:i", "--map", "5=1:ro"}, "iscsi target iqn.2026-12.io.rdisk:x: not found"},
	} {
		if out, err := admin(s.args...); err == nil || !strings.Contains(err.Error(), s.want) {
			t.Errorf("admin %v: %v\n%s\nwant an error with %q", s.args, err, out, s.want)
		}
	}
	if _, _, err := runCLI(t, "admin", "--socket", filepath.Join(t.TempDir(), "none.sock"), "status"); err == nil || !strings.Contains(err.Error(), "is rdisk target running") {
		t.Errorf("no target: %v", err)
	}
	out, err := admin("--json", "status")
	var st target.Status
	if err != nil || json.Unmarshal([]byte(out), &st) != nil || len(st.Namespaces) != 2 || !st.Ports[0].Listening {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	dir := t.TempDir()
	saved := filepath.Join(dir, "rdisk.json")
	if out, err := admin("save", saved); err != nil {
		t.Fatalf("save: %v\n%s", err, out)
	}
	f, err := os.Open(saved)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := target.Parse(f)
	f.Close()
	if err != nil {
		t.Fatalf("the saved file does not parse: %v", err)
	}
	p, _ := iwarp.New(iwarp.Config{})
	defer p.Close()
	cfg.Ports[0].Addr.TrSvcID = "0"
	again, err := target.Start(cfg, p, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if a, b := again.Config(), run.Config(); !sameJSON(a, b) {
		t.Fatalf("restarted from the saved file: the model differs\n%+v\n%+v", a, b)
	}
	nvmetcli := filepath.Join(dir, "config.json")
	out, err = admin("save", "--format", "nvmetcli", nvmetcli)
	data, _ := os.ReadFile(nvmetcli)
	if err != nil || !strings.Contains(out, "warning: port 1 serves rdma+tcp") || !strings.Contains(string(data), `"trtype": "tcp"`) {
		t.Fatalf("save --format nvmetcli: %v\n%s\n%s", err, out, data)
	}
	if out, err := admin("ns", "rm", adminNQN, "2"); err != nil || !strings.Contains(out, "namespace 2: removed") {
		t.Fatalf("ns rm: %v\n%s", err, out)
	}
}

func sameJSON(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// TestTargetSIGHUP: rdisk target --config re-reads its file on SIGHUP and
// applies the difference; a file that does not parse changes nothing.
func TestTargetSIGHUP(t *testing.T) {
	t.Parallel()
	// The SIGHUPs go to this whole test process: keep one handler of its
	// own for good, so that a signal delivered after the target's handler
	// stopped (signal.Stop restores the default, which kills) does no harm.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	dir := t.TempDir()
	cfgPath, sock := filepath.Join(dir, "target.json"), filepath.Join(dir, "admin.sock")
	write := func(nss string) {
		t.Helper()
		js := `{"subsystems": [{"nqn": "` + adminNQN + `", "attr": {"allow_any_host": "1"}, "namespaces": [` + nss + `]}],
  "ports": [{"portid": 1, "addr": {"trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": "0"}, "subsystems": ["` + adminNQN + `"]}]}`
		if err := os.WriteFile(cfgPath, []byte(js), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ns1 := `{"nsid": 1, "enable": 1, "device": {"path": "ram:4MiB"}}`
	write(ns1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := runCLIContext(t, ctx, "target", "--config", cfgPath, "--admin-socket", sock)
		done <- err
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("rdisk target: %v", err)
		}
	}()
	a := target.NewAdminClient(sock)
	nsids := func() []uint32 {
		var st target.Status
		if err := a.Do(ctx, "GET", "/v1/status", nil, &st); err != nil {
			return nil
		}
		var ids []uint32
		for _, n := range st.Namespaces {
			ids = append(ids, n.NSID)
		}
		return ids
	}
	waitFor := func(what string, want []uint32) {
		t.Helper()
		for i := 0; i < 200; i++ {
			if got := nsids(); slices.Equal(got, want) {
				return
			}
			time.Sleep(25 * time.Millisecond)
		}
		t.Fatalf("%s: namespaces %v, want %v", what, nsids(), want)
	}
	waitFor("start", []uint32{1})
	write(ns1 + `, {"nsid": 2, "enable": 1, "device": {"path": "ram:1MiB"}}`)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor("after SIGHUP", []uint32{1, 2})
	os.WriteFile(cfgPath, []byte(`{"subsystems": [`), 0o600)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	var ch target.Changes
	if err := a.Do(ctx, "POST", "/v1/reload", nil, &ch); err == nil || !strings.Contains(err.Error(), "nothing changed") {
		t.Fatalf("reload of a broken file: %v", err)
	}
	waitFor("after a broken file", []uint32{1, 2})
}

// TestMetricsDuringBench scrapes /metrics while rdisk bench runs and after
// it: the namespace's write counter, bytes and latency histogram count
// equal the I/Os the benchmark reports.
func TestMetricsDuringBench(t *testing.T) {
	t.Parallel()
	run, addr, _ := startAdminTarget(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go serveMetrics(ctx, ln, newRegistry(run.Collector()), slog.New(slog.DiscardHandler))
	scrape := func() map[string]*dto.MetricFamily {
		t.Helper()
		resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return fams
	}
	value := func(fams map[string]*dto.MetricFamily, name, op string) (float64, uint64) {
		for _, m := range fams[name].GetMetric() {
			ok := 0
			for _, l := range m.GetLabel() {
				if (l.GetName() == "op" && l.GetValue() == op) || (l.GetName() == "nsid" && l.GetValue() == "1") {
					ok++
				}
			}
			if ok == 2 {
				return m.GetCounter().GetValue(), m.GetHistogram().GetSampleCount()
			}
		}
		t.Fatalf("no %s{op=%q,nsid=1}", name, op)
		return 0, 0
	}
	done := make(chan struct{})
	var out, errOut string
	go func() {
		defer close(done)
		out, errOut, err = runCLI(t, "bench", "nvme+tcp://"+addr+"/"+adminNQN+"/1", "--rw", "randwrite", "--qd", "4",
			"--runtime", "1s", "--size", "8MiB", "--json", "-q")
	}()
	time.Sleep(300 * time.Millisecond)
	mid, _ := value(scrape(), "rdisk_namespace_ops_total", "write")
	<-done
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, errOut)
	}
	var res struct {
		IOs   uint64 `json:"ios"`
		Bytes uint64 `json:"bytes"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.IOs == 0 {
		t.Fatalf("bench output: %v\n%s", err, out)
	}
	fams := scrape()
	ops, _ := value(fams, "rdisk_namespace_ops_total", "write")
	bytes, _ := value(fams, "rdisk_namespace_bytes_total", "write")
	_, samples := value(fams, "rdisk_namespace_latency_seconds", "write")
	if uint64(ops) != res.IOs || uint64(bytes) != res.IOs*4096 || samples != res.IOs || mid > ops {
		t.Fatalf("metrics: %v writes, %v bytes, %d latency samples (mid-run %v); bench: %d I/Os", ops, bytes, samples, mid, res.IOs)
	}
	if fams["go_goroutines"] == nil || fams["process_cpu_seconds_total"] == nil {
		t.Fatal("no Go/process metrics")
	}
}

// TestLogFormat: --log-format json writes one JSON object per line; a
// wrong value is refused before anything starts.
func TestLogFormat(t *testing.T) {
	t.Parallel()
	if _, _, err := runCLI(t, "target", "--log-format", "xml"); err == nil || !strings.Contains(err.Error(), `--log-format "xml": want text or json`) {
		t.Fatalf("--log-format xml: %v", err)
	}
}

// TestAdminTop: rdisk admin top shows the rates of a namespace written to
// during its interval, and the host doing it.
func TestAdminTop(t *testing.T) {
	t.Parallel()
	_, addr, sock := startAdminTarget(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctrl, err := host.Connect(ctx, nil, addr, adminNQN, host.Config{Transport: host.TransportTCP, HostNQN: cliHost, HostID: [16]byte{7}, IOQueues: 1, QueueDepth: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.Close()
	ns, err := ctrl.Namespace(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	writing := make(chan struct{})
	go func() {
		defer close(writing)
		buf := make([]byte, 4096)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			blockdev.WriteAt(ns, buf, int64(i%1024)*4096)
		}
	}()
	out, err := func() (string, error) {
		defer func() { close(stop); <-writing }()
		return admin0(t, sock, "top", "--interval", "300ms", "--count", "2")
	}()
	t.Log(out)
	if err != nil || !strings.Contains(out, "WRITE IOPS") || !strings.Contains(out, cliHost) || !strings.Contains(out, adminNQN+"  1 ") {
		t.Fatalf("admin top: %v\n%s", err, out)
	}
}

func admin0(t *testing.T, sock string, args ...string) (string, error) {
	t.Helper()
	out, errOut, err := runCLI(t, append([]string{"admin", "--socket", sock}, args...)...)
	return out + errOut, err
}

// TestTargetSIGTERM: stopping rdisk target (SIGTERM cancels its context)
// while a host writes and flushes to a file-backed namespace drains it:
// the exit is clean and every write acknowledged before a flush that was
// acknowledged is in the file afterwards.
func TestTargetSIGTERM(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file, cfgPath, sock := filepath.Join(dir, "disk.img"), filepath.Join(dir, "target.json"), filepath.Join(dir, "admin.sock")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(file, 16<<20); err != nil {
		t.Fatal(err)
	}
	js := `{"subsystems": [{"nqn": "` + adminNQN + `", "attr": {"allow_any_host": "1"}, "namespaces": [{"nsid": 1, "enable": 1, "device": {"path": "` + file + `"}}]}],
  "ports": [{"portid": 1, "addr": {"trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": "0"}, "subsystems": ["` + adminNQN + `"]}]}`
	if err := os.WriteFile(cfgPath, []byte(js), 0o600); err != nil {
		t.Fatal(err)
	}
	tctx, stopTarget := context.WithCancel(context.Background())
	defer stopTarget()
	exited := make(chan error, 1)
	go func() {
		_, _, err := runCLIContext(t, tctx, "target", "--config", cfgPath, "--admin-socket", sock, "--drain-timeout", "10s")
		exited <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := target.NewAdminClient(sock)
	var st target.Status
	for i := 0; ; i++ {
		if err := a.Do(ctx, "GET", "/v1/status", nil, &st); err == nil && len(st.Ports) == 1 && st.Ports[0].Listening {
			break
		}
		if i == 200 {
			t.Fatal("the target did not start")
		}
		time.Sleep(25 * time.Millisecond)
	}
	ctrl, err := host.Connect(ctx, nil, st.Ports[0].Addr, adminNQN, host.Config{Transport: host.TransportTCP, HostNQN: cliHost, HostID: [16]byte{9},
		IOQueues: 1, QueueDepth: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.Close()
	ns, err := ctrl.Namespace(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Rounds of 8 writes then a flush; the rounds whose flush was
	// acknowledged must be in the file.
	const block = 4096
	pattern := func(i int) []byte { return bytes.Repeat([]byte{byte(i), byte(i >> 8), 0xa5, 0x5a}, block/4) }
	flushed := make(chan int, 1) // the writes before this index are flushed
	go func() {
		defer close(flushed)
		for i := 0; i < 4096; {
			for j := 0; j < 8; j, i = j+1, i+1 {
				if _, err := blockdev.WriteAt(ns, pattern(i), int64(i)*block); err != nil {
					return
				}
			}
			if err := blockdev.Flush(ns); err != nil {
				return
			}
			select {
			case <-flushed:
			default:
			}
			flushed <- i
		}
	}()
	time.Sleep(300 * time.Millisecond)
	stopTarget() // what SIGTERM does through main's signal context
	if err := <-exited; err != nil {
		t.Fatalf("rdisk target after SIGTERM: %v", err)
	}
	last := 0
	for n := range flushed {
		last = n
	}
	if last == 0 {
		t.Fatal("no flush was acknowledged before the stop")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < last; i++ {
		if !bytes.Equal(data[i*block:(i+1)*block], pattern(i)) {
			t.Fatalf("block %d (acknowledged and flushed) is not in the file after the stop", i)
		}
	}
	t.Logf("%d flushed blocks verified", last)
}

// TestPrintStatusStates: the status table's STATE column carries the
// disk's I/O path and a failing health (their reasons are in --json).
func TestPrintStatusStates(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	printStatus(&b, &target.Status{Namespaces: []target.NamespaceStatus{
		{Subsystem: "nqn.a", NSID: 1, Device: "/dev/loop0", Enabled: true, IOPath: "io_uring", Health: "ok"},
		{Subsystem: "nqn.a", NSID: 2, Device: "/srv/f", Enabled: true, ReadOnly: true, IOPath: "sync: io_uring turned off by the options", Health: "failing: timeout"},
		{Subsystem: "nqn.a", NSID: 3, Device: "ram:1MiB", Enabled: false},
	}})
	out := b.String()
	for _, want := range []string{"enabled,io=io_uring ", "enabled,read-only,failing,io=sync ", "disabled "} {
		if !strings.Contains(out, want) {
			t.Errorf("status table lacks %q:\n%s", want, out)
		}
	}
}
