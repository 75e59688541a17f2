//go:build ceph && linux

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdisk/rdisk/internal/bench"
)

// startCephLab starts a throwaway cluster (test/ceph/ceph-lab.sh) for one
// test, stopped when it ends (and by the script itself if this process
// dies). It skips when the Ceph binaries are not installed.
func startCephLab(t *testing.T) (conf string) {
	t.Helper()
	for _, b := range []string{"ceph-mon", "ceph-osd", "ceph", "rbd"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("%s not installed (apt-get install ceph-mon ceph-osd ceph-common; scripts/test.sh does it)", b)
		}
	}
	script, _ := filepath.Abs("../../test/ceph/ceph-lab.sh")
	dir := t.TempDir()
	var out []byte
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		cmd := exec.Command(script, "start", dir)
		cmd.Env = append(os.Environ(), "CEPH_LAB_WATCH_PID="+strconv.Itoa(os.Getpid()), "CEPH_LAB_IMAGE_SIZE=128M")
		if out, err = cmd.CombinedOutput(); err == nil {
			break
		}
		exec.Command(script, "stop", dir, "keep").Run()
	}
	if err != nil {
		t.Fatalf("ceph-lab.sh start: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command(script, "stop", dir, "keep").Run() })
	return filepath.Join(dir, "ceph.conf")
}

// TestCephGatewaysBenchVerify: two gateways export one RBD image (rbd:
// device paths, shared namespace, ANA optimized / non-optimized); rdisk
// bench --verify through both runs with zero errors and mismatches while
// the optimized gateway stops in the middle.
func TestCephGatewaysBenchVerify(t *testing.T) {
	t.Parallel()
	conf := startCephLab(t)
	dev := "rbd:rbd/test?conf=" + conf
	a, urlA := startGateway(t, dev, "1-99", "optimized")
	_, urlB := startGateway(t, dev, "100-199", "non-optimized")
	onA := make(chan uint64, 1)
	go func() {
		time.Sleep(2 * time.Second)
		var n uint64
		for _, c := range a.Status().Controllers {
			n += c.Commands
		}
		onA <- n
		a.Close()
	}()
	out, errOut, err := runCLI(t, "bench", "--rw", "randrw", "--verify", "--size", "64MiB", "--runtime", "5s", "--qd", "16", "-q", "--json",
		"--loss-timeout", "20s", "--reconnect-delay", "100ms", urlA, urlB)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, errOut)
	}
	var res bench.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if res.Errors != 0 || res.VerifyErrs != 0 || res.Verified == 0 {
		t.Fatalf("bench over RBD with a failover: %d errors (%s), %d verify errors, %d blocks verified", res.Errors, res.FirstError, res.VerifyErrs, res.Verified)
	}
	if n := <-onA; n == 0 {
		t.Fatal("the optimized gateway served no I/O before it stopped")
	}
	t.Logf("%d I/Os, %.0f IOPS, %d blocks verified, max latency %.1f ms", res.IOs, res.IOPS, res.Verified, res.Lat.Max/1000)
	if !strings.HasPrefix(urlA, "nvme+tcp://") {
		t.Fatal(urlA)
	}
}
