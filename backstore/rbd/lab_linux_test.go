//go:build ceph && linux

package rbd

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
)

// lab is a throwaway cluster started by test/ceph/ceph-lab.sh.
type lab struct {
	dir  string
	conf string
	err  error // why it could not start (the tests skip or fail)
	skip bool  // the ceph binaries are not installed
}

// sharedLab is the test binary's cluster, started on first use and
// stopped by TestMain.
type sharedLab struct {
	once sync.Once
	lab  *lab
}

var labs sharedLab // the test binary's cluster (test state, not package state)

func TestMain(m *testing.M) {
	code := m.Run()
	if labs.lab != nil && labs.lab.dir != "" {
		labs.lab.stop()
	}
	os.Exit(code)
}

func labScript() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "test", "ceph", "ceph-lab.sh")
}

// startLab starts a new cluster in a new temporary directory.
func startLab() *lab {
	for _, b := range []string{"ceph-mon", "ceph-osd", "ceph", "rbd"} {
		if _, err := exec.LookPath(b); err != nil {
			return &lab{skip: true, err: fmt.Errorf("%s not installed (apt-get install ceph-mon ceph-osd ceph-common; scripts/test.sh does it)", b)}
		}
	}
	var last error
	for attempt := 0; attempt < 3; attempt++ {
		dir, err := os.MkdirTemp("", "rdisk-rbd-lab-")
		if err != nil {
			return &lab{err: err}
		}
		cmd := exec.Command(labScript(), "start", dir)
		cmd.Env = append(os.Environ(), "CEPH_LAB_WATCH_PID="+strconv.Itoa(os.Getpid()))
		out, err := cmd.CombinedOutput()
		if err == nil {
			return &lab{dir: dir, conf: filepath.Join(dir, "ceph.conf")}
		}
		last = fmt.Errorf("ceph-lab.sh start: %v: %s", err, out)
		exec.Command(labScript(), "stop", dir).Run()
	}
	return &lab{err: last}
}

func (l *lab) stop() { exec.Command(labScript(), "stop", l.dir).Run() }

// getLab returns the shared cluster, skipping the test without ceph.
func getLab(t testing.TB) *lab {
	t.Helper()
	labs.once.Do(func() {
		// RDISK_TEST_CEPH_CONF: use a running cluster (pool "rbd") instead,
		// e.g. to compare the benchmarks with rbd bench on one cluster.
		if conf := os.Getenv("RDISK_TEST_CEPH_CONF"); conf != "" {
			labs.lab = &lab{conf: conf}
			return
		}
		labs.lab = startLab()
	})
	return checkLab(t, labs.lab)
}

// ownLab starts a cluster for this test alone (tests that make the whole
// cluster full or stop its OSD).
func ownLab(t testing.TB) *lab {
	t.Helper()
	l := startLab()
	if l.dir != "" {
		t.Cleanup(l.stop)
	}
	return checkLab(t, l)
}

func checkLab(t testing.TB, l *lab) *lab {
	t.Helper()
	if l.skip {
		t.Skipf("no Ceph: %v", l.err)
	}
	if l.err != nil {
		t.Fatalf("test cluster: %v", l.err)
	}
	return l
}

// run runs a ceph tool against the cluster.
func (l *lab) run(t testing.TB, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command("timeout", append([]string{"60", name}, args...)...)
	cmd.Env = append(os.Environ(), "CEPH_CONF="+l.conf)
	out, err := cmd.CombinedOutput()
	if err != nil {
		// What the cluster says of itself, for a command that hung (seen
		// once in CI: rbd create timed out after 60 s, with no output).
		st := exec.Command("timeout", "10", "ceph", "--connect-timeout", "5", "health", "detail")
		st.Env = cmd.Env
		health, _ := st.CombinedOutput()
		t.Fatalf("%s %s: %v: %s (cluster health: %s; %s)", name, strings.Join(args, " "), err, out, bytes.TrimSpace(health), l.osdSpace())
	}
	return string(out)
}

// osdSpace reports what the OSD's store says of its space (perf dump
// through its admin socket), for a failure message. A full OSD on the
// shared cluster, which no test fills, was memstore's byte count below
// zero (ceph-lab.sh's ballast object is there against it).
func (l *lab) osdSpace() string {
	socks, _ := filepath.Glob(filepath.Join(l.dir, "run", "osd.*.asok"))
	if len(socks) == 0 {
		return "no OSD admin socket"
	}
	out, err := exec.Command("timeout", "10", "ceph", "--admin-daemon", socks[0], "perf", "dump", "osd").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("OSD perf dump: %v: %s", err, bytes.TrimSpace(out))
	}
	var pd struct {
		OSD struct {
			Bytes uint64 `json:"stat_bytes"`
			Used  uint64 `json:"stat_bytes_used"`
			Avail uint64 `json:"stat_bytes_avail"`
		} `json:"osd"`
	}
	if err := json.Unmarshal(out, &pd); err != nil {
		return fmt.Sprintf("OSD perf dump: %v", err)
	}
	// The OSD computes used as total - available in uint64: memstore's
	// count going below zero shows as a number near 2^64.
	return fmt.Sprintf("OSD store: %d bytes, %d used (as int64: %d), %d available", pd.OSD.Bytes, pd.OSD.Used, int64(pd.OSD.Used), pd.OSD.Avail)
}

// newImage creates an image of size (rbd create --size) with the given
// features ("" = layering) and removes it at the end of the test.
func (l *lab) newImage(t testing.TB, size, features string) string {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	name := "t" + hex.EncodeToString(b[:])
	if features == "" {
		features = "layering"
	}
	args := []string{"create", "--size", size, "rbd/" + name}
	if features != "default" {
		args = append(args, "--image-feature", features)
	}
	l.run(t, "rbd", args...)
	t.Cleanup(func() {
		cmd := exec.Command("timeout", "60", "rbd", "rm", "--no-progress", "rbd/"+name)
		cmd.Env = append(os.Environ(), "CEPH_CONF="+l.conf)
		cmd.Run()
	})
	return name
}

func (l *lab) config(image string) Config {
	return Config{Pool: "rbd", Image: image, ConfFile: l.conf}
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// open opens cfg and closes it at the end of the test.
func open(t testing.TB, cfg Config) *Image {
	t.Helper()
	im, err := Open(cfg, testLogger(t))
	if err != nil {
		t.Fatalf("Open(%s): %v", cfg.Name(), err)
	}
	t.Cleanup(func() {
		if err := im.Close(); err != nil && !errors.Is(err, backstore.ErrClosed) {
			t.Logf("Close: %v", err)
		}
	})
	return im
}

// fillPattern fills p with bytes derived from the absolute offset and a
// seed, so misplaced data is caught.
func fillPattern(p []byte, off int64, seed uint64) {
	for i := 0; i < len(p); i += 8 {
		v := uint64(off+int64(i))*0x9e3779b97f4a7c15 ^ seed*0xbf58476d1ce4e5b9
		for j := 0; j < 8 && i+j < len(p); j++ {
			p[i+j] = byte(v >> (8 * j))
		}
	}
}

// checkPattern returns the first offset where p differs from the pattern,
// or -1.
func checkPattern(p []byte, off int64, seed uint64) int64 {
	want := make([]byte, len(p))
	fillPattern(want, off, seed)
	if bytes.Equal(p, want) {
		return -1
	}
	for i := range p {
		if p[i] != want[i] {
			return off + int64(i)
		}
	}
	return -1
}

func firstNonZero(p []byte) int {
	for i, b := range p {
		if b != 0 {
			return i
		}
	}
	return -1
}

// waitFor polls cond for up to d.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cond()
}
