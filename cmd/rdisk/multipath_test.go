package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdisk/rdisk/internal/bench"
	"github.com/rdisk/rdisk/rdma/iwarp"
	"github.com/rdisk/rdisk/target"
)

const mpathNQN = "nqn.2026-12.io.rdisk:mpath"

// startGateway starts one gateway of a pair exporting the file img as
// namespace 1 of mpathNQN (shared, with its own controller IDs and ANA
// state on its port) and returns its NVMe/TCP URL.
func startGateway(t *testing.T, img, cntlids, state string) (*target.Running, string) {
	t.Helper()
	return startGatewayOn(t, img, cntlids, state, "0")
}

// startGatewayOn is startGateway on a given TCP port.
func startGatewayOn(t *testing.T, img, cntlids, state, port string) (*target.Running, string) {
	t.Helper()
	lo, hi, _ := strings.Cut(cntlids, "-")
	js := `{"subsystems": [{"nqn": "` + mpathNQN + `", "attr": {"allow_any_host": "1", "cntlid_min": "` + lo + `", "cntlid_max": "` + hi + `"},
	  "namespaces": [{"nsid": 1, "enable": 1, "rdisk_shared": true, "device": {"path": "` + img + `"}}]}],
	  "ports": [{"portid": 1, "addr": {"trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": "` + port + `"},
	    "ana_groups": [{"grpid": 1, "ana": {"state": "` + state + `"}}], "subsystems": ["` + mpathNQN + `"]}]}`
	c, err := target.Parse(strings.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := iwarp.New(iwarp.Config{})
	t.Cleanup(func() { p.Close() })
	run, err := target.Start(c, p, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Close() })
	return run, "nvme+tcp://" + run.T.Port(1).Addr().String() + "/" + mpathNQN
}

// TestBenchMultipathFailover: rdisk bench --verify over two gateways of
// one disk runs to the end with no error and no verify mismatch while the
// optimized gateway stops under load: its I/O fails over to the other.
func TestBenchMultipathFailover(t *testing.T) {
	t.Parallel()
	img := filepath.Join(t.TempDir(), "shared.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 16<<20); err != nil {
		t.Fatal(err)
	}
	a, urlA := startGateway(t, img, "1-99", "optimized")
	_, urlB := startGateway(t, img, "100-199", "non-optimized")
	onA := make(chan uint64, 1)
	go func() {
		time.Sleep(1500 * time.Millisecond)
		var n uint64
		for _, c := range a.Status().Controllers {
			n += c.Commands
		}
		onA <- n
		a.Close()
	}()
	out, errOut, err := runCLI(t, "bench", "--rw", "randrw", "--verify", "--runtime", "4s", "--qd", "8", "-q", "--json",
		"--loss-timeout", "10s", "--reconnect-delay", "100ms", urlA, urlB)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, errOut)
	}
	var res bench.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if res.Errors != 0 || res.VerifyErrs != 0 || res.Read == nil || res.Write == nil || res.Verified == 0 {
		t.Fatalf("bench over a failover: %d errors (%s), %d verify errors, %d blocks verified\n%s", res.Errors, res.FirstError, res.VerifyErrs, res.Verified, out)
	}
	if n := <-onA; n == 0 {
		t.Fatal("the optimized gateway served no I/O before it stopped")
	}
	t.Logf("%d I/Os, %.0f IOPS, max latency %.1f ms (the failover pause)", res.IOs, res.IOPS, res.Lat.Max/1000)
}

// TestConnectMultipathFioVerify: rdisk connect with the URLs of two
// gateways makes one multipath session; fio's verify job through its NBD
// export finishes with zero errors while the optimized gateway stops in
// the middle of it (rdisk list shows its path down) and comes back (its
// path is live and optimized again: the flushes that wait for the writes
// it acknowledged go to it).
func TestConnectMultipathFioVerify(t *testing.T) {
	t.Parallel()
	needFioNBD(t)
	img := filepath.Join(t.TempDir(), "shared.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	a, urlA := startGateway(t, img, "1-99", "optimized")
	_, urlB := startGateway(t, img, "100-199", "non-optimized")
	sock := startTestDaemon(t, "--reconnect-delay", "100ms", "--loss-timeout", "30s")
	nbdSock := filepath.Join(t.TempDir(), "d.nbd")
	out := mustRdisk(t, append([]string{"connect", "--control", sock, "--name", "d", "--nbd", "unix:" + nbdSock, "--policy", "queue-depth"}, append(hostFlags, urlA, urlB)...)...)
	if !strings.Contains(out, "path  "+urlA+": live, optimized") || !strings.Contains(out, "path  "+urlB+": live, non-optimized") {
		t.Fatalf("connect:\n%s", out)
	}
	stopped := make(chan struct{})
	go func() { // stop A once fio's I/O flows through it
		defer close(stopped)
		for i := 0; i < 1000; i++ {
			var n uint64
			for _, c := range a.Status().Controllers {
				n += c.Commands
			}
			if n > 200 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		a.Close()
	}()
	restarted := make(chan struct{})
	go func() {
		defer close(restarted)
		<-stopped
		var list string
		for i := 0; i < 200; i++ {
			list = mustRdisk(t, "list", "--control", sock)
			if strings.Contains(list, "reconnecting") {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		var pathA string
		for _, l := range strings.Split(list, "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), urlA) {
				pathA = l
			}
		}
		if f := strings.Fields(pathA); len(f) < 6 || f[2] == "live" || f[5] == "0" {
			t.Errorf("the stopped gateway's path: want its connection not live, and I/O completed on it before:\n%s", list)
		}
		_, port, _ := strings.Cut(strings.TrimPrefix(urlA, "nvme+tcp://"), ":")
		port, _, _ = strings.Cut(port, "/")
		startGatewayOn(t, img, "1-99", "optimized", port)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fout, err := fioVerify(t, ctx, nbdSock, "d", "64M")
	<-restarted
	if err != nil || !strings.Contains(fout, "err= 0") {
		t.Fatalf("fio verify: %v\n%s", err, fout)
	}
	var list string
	for i := 0; i < 500; i++ {
		if list = mustRdisk(t, "list", "--control", sock); strings.Count(list, " live          optimized") == 1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(list, "d: 2 paths (queue-depth)") || strings.Count(list, "  live   live  ") != 2 {
		t.Fatalf("list after the gateway came back:\n%s", list)
	}
	// Disconnect (a flush of both paths) while both gateways serve.
	mustRdisk(t, "disconnect", "--control", sock, "d")
}
