package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/nvmeof/target"
	"github.com/rdisk/rdisk/rdma/iwarp"
)

// These tests run the CLI commands of this package against rdisk's own
// NVMe-oF target in the test process, on 127.0.0.1.

const (
	cliNQN    = "nqn.2026-11.io.rdisk:clitest"
	cliHost   = "nqn.2014-08.org.nvmexpress:uuid:0c7a4b2e-5d1f-4e3a-9b6c-7d8e9f0a1b2c"
	cliHostID = "0c7a4b2e-5d1f-4e3a-9b6c-7d8e9f0a1b2c"
)

func startCLITarget(t *testing.T) string { return startCLITargetOn(t, target.TransportRDMA) }

// startCLITargetOn is startCLITarget with a port serving transport tr.
func startCLITargetOn(t *testing.T, tr target.Transport) string {
	t.Helper()
	tg, sub := newCLITarget(t)
	port, err := tg.AddPort(target.PortConfig{ID: 1, Addr: "127.0.0.1:0", Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	port.LinkSubsystem(sub)
	return port.Addr().String()
}

// newCLITarget starts a target in the test process with subsystem cliNQN
// (any host) and an 8 MiB RAM namespace 1, and no port.
func newCLITarget(t *testing.T) (*target.Target, *target.Subsystem) {
	t.Helper()
	p, _ := iwarp.New(iwarp.Config{})
	tg, err := target.New(target.Config{Provider: p, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	sub, err := tg.AddSubsystem(target.SubsystemConfig{NQN: cliNQN, AllowAnyHost: true})
	if err != nil {
		t.Fatal(err)
	}
	disk, _ := backstore.NewMem(8<<20, 512)
	if err := sub.AddNamespace(target.NamespaceConfig{NSID: 1, Disk: disk}); err != nil {
		t.Fatal(err)
	}
	return tg, sub
}

// cliMu serializes app runs: urfave/cli keeps global flag state (the help
// and version flags) that concurrent runs race on.
var cliMu sync.Mutex

// runCLI runs rdisk with args (host identity flags added) and returns
// stdout, stderr and the error main would print.
func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return runCLIContext(t, context.Background(), args...)
}

// runCLIContext is runCLI until ctx ends (rdisk target runs until then).
func runCLIContext(t *testing.T, ctx context.Context, args ...string) (string, string, error) {
	t.Helper()
	app := newApp()
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errOut
	argv := append([]string{"rdisk", "--log-level", "error"}, args...)
	if !slices.Contains(args, "--hostid") && args[0] != "admin" && args[0] != "target" && args[0] != "rdma" {
		argv = append(argv, "--hostnqn", cliHost, "--hostid", cliHostID)
	}
	cliMu.Lock()
	defer cliMu.Unlock()
	err := app.RunContext(ctx, interspersed(app, argv))
	return out.String(), errOut.String(), err
}

func TestCLIEndToEnd(t *testing.T) {
	t.Parallel()
	addr := startCLITarget(t)
	url := "nvme://" + addr + "/" + cliNQN

	out, _, err := runCLI(t, "discover", "nvme://"+addr)
	if err != nil || !strings.Contains(out, "subnqn:  "+cliNQN+"\n") || !strings.Contains(out, "url:     "+url+"\n") {
		t.Errorf("discover: %v\n%s", err, out)
	}
	out, _, err = runCLI(t, "discover", "nvme://"+addr, "--json")
	var disc struct {
		Records []struct{ SubNQN, URL string }
	}
	if err != nil || json.Unmarshal([]byte(out), &disc) != nil || len(disc.Records) == 0 {
		t.Errorf("discover --json: %v\n%s", err, out)
	}

	out, _, err = runCLI(t, "nvme", "identify", url+"/1")
	if err != nil || !strings.Contains(out, "subnqn    : "+cliNQN) || !strings.Contains(out, "nsze    : 0x4000") {
		t.Errorf("nvme identify: %v\n%s", err, out)
	}
	out, _, err = runCLI(t, "nvme", "list", url)
	if err != nil || !strings.Contains(out, url+"/1 ") {
		t.Errorf("nvme list: %v\n%s", err, out)
	}
	out, _, err = runCLI(t, "nvme", "smart-log", url, "--json")
	if err != nil || !strings.Contains(out, `"critical_warning": 0`) { // nvme-cli's key
		t.Errorf("nvme smart-log --json: %v\n%s", err, out)
	}

	out, errOut, err := runCLI(t, "bench", url+"/1", "--rw", "randrw", "--verify", "--qd", "8", "--jobs", "2", "--runtime", "300ms", "--size", "2MiB", "--json")
	var res struct {
		IOs          uint64                           `json:"ios"`
		IOPS         float64                          `json:"iops"`
		Errors       uint64                           `json:"errors"`
		VerifyErrors uint64                           `json:"verify_errors"`
		Verified     uint64                           `json:"verified_blocks"`
		Lat          struct{ P50, P99, P999 float64 } `json:"lat_us"`
	}
	if err != nil || json.Unmarshal([]byte(out), &res) != nil || res.IOs == 0 || res.Errors != 0 || res.VerifyErrors != 0 || res.Verified == 0 || res.Lat.P99 == 0 {
		t.Errorf("bench --verify --json: %v\n%s\n%s", err, out, errOut)
	}
	// --hosts: each its own controller; the report has each one's rate.
	out, _, err = runCLI(t, "bench", url+"/1", "--hosts", "3", "--qd", "4", "--idle", "50ms", "--runtime", "200ms", "--size", "2MiB", "--json")
	var many struct {
		IOs   uint64 `json:"ios"`
		Jobs  int    `json:"jobs"`
		Hosts []struct {
			IOs uint64 `json:"ios"`
		} `json:"hosts"`
	}
	if err != nil || json.Unmarshal([]byte(out), &many) != nil || len(many.Hosts) != 3 || many.Jobs != 3 || many.Hosts[0].IOs == 0 || many.Hosts[2].IOs == 0 {
		t.Errorf("bench --hosts 3: %v\n%s", err, out)
	}
	out, _, err = runCLI(t, "bench", url, "--rw", "write", "--bs", "64KiB", "--runtime", "200ms", "-q")
	if err != nil || !strings.Contains(out, "write: ") || !strings.Contains(out, "errors: 0") {
		t.Errorf("bench text summary: %v\n%s", err, out)
	}
}

// TestCLIEndToEndTCP runs discover, nvme, bench and cp over NVMe/TCP
// (with digests) against a port serving both transports.
func TestCLIEndToEndTCP(t *testing.T) {
	t.Parallel()
	addr := startCLITargetOn(t, target.TransportBoth)
	url := "nvme+tcp://" + addr + "/" + cliNQN
	out, _, err := runCLI(t, "discover", "nvme+tcp://"+addr, "-g")
	if err != nil || !strings.Contains(out, "trtype:  tcp\n") || !strings.Contains(out, "url:     "+url+"\n") {
		t.Errorf("discover over TCP: %v\n%s", err, out)
	}
	out, _, err = runCLI(t, "discover", "nvme+rdma://"+addr)
	if err != nil || !strings.Contains(out, "url:     nvme://"+addr+"/"+cliNQN+"\n") {
		t.Errorf("discover over RDMA on the shared port: %v\n%s", err, out)
	}
	out, _, err = runCLI(t, "nvme", "identify", url+"/1", "--hdr-digest", "--data-digest")
	if err != nil || !strings.Contains(out, "subnqn    : "+cliNQN) || !strings.Contains(out, "nsze    : 0x4000") {
		t.Errorf("nvme identify over TCP: %v\n%s", err, out)
	}
	out, _, err = runCLI(t, "nvme", "list", url)
	if err != nil || !strings.Contains(out, url+"/1 ") {
		t.Errorf("nvme list over TCP: %v\n%s", err, out)
	}
	out, errOut, err := runCLI(t, "bench", url+"/1", "--rw", "randrw", "--bs", "16KiB", "--verify", "--qd", "8", "--jobs", "2",
		"--runtime", "300ms", "--size", "2MiB", "--json", "-g", "-G")
	var res struct {
		IOs          uint64 `json:"ios"`
		Errors       uint64 `json:"errors"`
		VerifyErrors uint64 `json:"verify_errors"`
		Verified     uint64 `json:"verified_blocks"`
	}
	if err != nil || json.Unmarshal([]byte(out), &res) != nil || res.IOs == 0 || res.Errors != 0 || res.VerifyErrors != 0 || res.Verified == 0 {
		t.Errorf("bench over TCP: %v\n%s\n%s", err, out, errOut)
	}
	dir := t.TempDir()
	src, back := filepath.Join(dir, "src.img"), filepath.Join(dir, "back.img")
	img := bytes.Repeat([]byte("rdisk over nvme/tcp\n"), 100000)
	if err := os.WriteFile(src, img, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, _, err := runCLI(t, "cp", "--no-progress", "--verify", "--hdr-digest", src, url); err != nil || !strings.Contains(out, "verified") {
		t.Errorf("cp to nvme+tcp: %v\n%s", err, out)
	}
	if _, _, err := runCLI(t, "cp", "--no-progress", url, back); err != nil {
		t.Errorf("cp from nvme+tcp: %v", err)
	}
	if got, err := os.ReadFile(back); err != nil || !bytes.Equal(got[:len(img)], img) {
		t.Errorf("image copied back over TCP differs (%v)", err)
	}
	if _, _, err := runCLI(t, "bench", "nvme://"+addr+"/"+cliNQN, "--hdr-digest", "--runtime", "100ms"); err == nil || !strings.Contains(err.Error(), "nvme+tcp://") {
		t.Errorf("bench nvme:// --hdr-digest: %v, want an error pointing at nvme+tcp://", err)
	}
}

// TestCLIErrors: every failure is one line, no stack trace.
func TestCLIErrors(t *testing.T) {
	t.Parallel()
	addr := startCLITarget(t)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"bench", "http://x/y"}, "want nvme://"},
		{[]string{"bench", "iser://127.0.0.1:1/iqn.x/1"}, "connection refused"},
		{[]string{"bench", "nvme://" + addr}, "names no subsystem"},
		{[]string{"bench", "nvme://" + addr + "/" + cliNQN, "--rw", "sideways"}, "--rw"},
		{[]string{"bench", "nvme://" + addr + "/" + cliNQN, "--bs", "4 parsecs"}, "--bs"},
		{[]string{"bench", "nvme://" + addr + "/" + cliNQN, "--qd", "0"}, "--qd"},
		{[]string{"bench", "nvme://" + addr + "/" + cliNQN, "--bs", "1000", "--runtime", "100ms"}, "multiple of the device's 512-byte blocks"},
		{[]string{"bench", "nvme://" + addr + "/nqn.2026-11.io.rdisk:nothere"}, "subsystem NQN not found"},
		{[]string{"bench", "nvme://" + addr + "/" + cliNQN + "/5"}, "namespace 5"},
		{[]string{"bench", "nvme://" + addr + "/" + cliNQN, "--hosts", "0"}, "--hosts 0"},
		{[]string{"bench", "nvme://" + addr + "/" + cliNQN, "--hosts", "3", "--jobs", "2"}, "at least one job per host"},
		{[]string{"bench", "nvme://" + addr + "/" + cliNQN, "nvme://" + addr + "/" + cliNQN, "--hosts", "2"}, "takes one URL"},
		{[]string{"bench", "nvme://" + addr + "/" + cliNQN, "--hosts", "2", "--plot", "x.svg", "--runtime", "50ms"}, "--plot: one host only"},
		{[]string{"bench", "nvme://" + addr + "/" + cliNQN, "--sysmon-slack", "11ms"}, "--sysmon-slack 11ms: want 0 (off) to 10ms"},
		{[]string{"target", "--sysmon-slack", "-1ms", "--listen", "127.0.0.1:0", "--discovery-listen=", "--iscsi-listen=", "--srp-listen=", "--admin-socket="}, "--sysmon-slack -1ms"},
		{[]string{"discover", "nvme://127.0.0.1:1"}, "connection refused"},
		{[]string{"discover"}, "one URL"},
		{[]string{"nvme", "identify", "nvme://[::1"}, "unterminated"},
		{[]string{"nvme", "smart-log", "nvme://" + addr + "/" + cliNQN, "--hostid", "xyz"}, "--hostid"},
	}
	for _, c := range cases {
		_, _, err := runCLI(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("rdisk %s: %v, want an error containing %q", strings.Join(c.args, " "), err, c.want)
			continue
		}
		if strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "goroutine") {
			t.Errorf("rdisk %s: error is not one line: %q", strings.Join(c.args, " "), err)
		}
	}
}
