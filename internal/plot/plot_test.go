package plot

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/blockdev/blockdevtest"
)

func TestRecorderAndPlot(t *testing.T) {
	t.Parallel()
	m, err := blockdevtest.NewMem(blockdevtest.MemConfig{Size: 1 << 20, Queues: 2, Latency: 50 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	rec := NewRecorder(m, 20*time.Millisecond)
	defer rec.Close()
	p := make([]byte, 64<<10)
	deadline := time.Now().Add(150 * time.Millisecond)
	for time.Now().Before(deadline) {
		if _, err := blockdev.WriteAt(rec, p, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := blockdev.ReadAt(rec, p, 4096); err != nil {
			t.Fatal(err)
		}
	}
	run := rec.Run("test run")
	if len(run.Samples) < 3 || len(run.Read) == 0 || len(run.Write) == 0 {
		t.Fatalf("recorded %d samples, %d/%d latency points", len(run.Samples), len(run.Read), len(run.Write))
	}
	var ops float64
	for _, s := range run.Samples {
		ops += s.ReadIOPS + s.WriteIOPS
	}
	if ops == 0 {
		t.Errorf("no IOPS recorded")
	}
	dir := t.TempDir()
	for _, name := range []string{"run.svg", "run.png"} {
		path := filepath.Join(dir, name)
		if err := Plot(path, run); err != nil {
			t.Fatalf("Plot %s: %v", name, err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(name, ".svg") && !bytes.Contains(b, []byte("<svg")) || strings.HasSuffix(name, ".png") && !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Errorf("%s: not the right format", name)
		}
	}
	if err := Plot(filepath.Join(dir, "x.jpg"), run); err == nil {
		t.Errorf("a .jpg was accepted")
	}
	if err := Plot(filepath.Join(dir, "y.svg"), Run{}); err == nil {
		t.Errorf("an empty run was plotted")
	}
}

// The recorder is a conforming device.
func TestRecorderConformance(t *testing.T) {
	t.Parallel()
	blockdevtest.Run(t, func(t *testing.T) blockdev.Device {
		m, err := blockdevtest.NewMem(blockdevtest.MemConfig{Size: 1 << 20, Queues: 2})
		if err != nil {
			t.Fatal(err)
		}
		return NewRecorder(m, 0)
	})
}

func TestCheckPath(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "run.svg"), ""},
		{filepath.Join(dir, "run.PNG"), ""},
		{filepath.Join(dir, "run.txt"), "want a .svg or .png"},
		{filepath.Join(dir, "missing", "run.svg"), "no such file"},
	} {
		err := CheckPath(tc.path)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckPath(%s) = %v, want %q", tc.path, err, tc.want)
		}
	}
}
