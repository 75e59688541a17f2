package target

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdisk/rdisk/backstore"
)

// deviceConfig is a one-namespace configuration over device path with
// the namespace's extra JSON fields extra.
func deviceConfig(path, extra string) string {
	return fmt.Sprintf(`{"subsystems": [{"nqn": %q, "attr": {"allow_any_host": "1"}, "namespaces": [
  {"nsid": 1, "enable": 1, "device": {"path": %q}%s}]}],
  "ports": [{"portid": 1, "addr": {"trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": "0"}, "subsystems": [%q]}]}`, nqnA, path, extra, nqnA)
}

// TestDeviceOptions: rdisk_direct, rdisk_buffered and rdisk_no_uring reach
// the disk (O_DIRECT, the sync path, shown in the status), and one that
// does not apply to the device is refused before anything serves, naming
// the field.
func TestDeviceOptions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "disk")
	if err := os.WriteFile(file, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("no_uring", func(t *testing.T) {
		run, _ := startConfig(t, deviceConfig(file, `, "rdisk_no_uring": true`))
		st := run.Status()
		if len(st.Namespaces) != 1 || !strings.HasPrefix(st.Namespaces[0].IOPath, "sync: ") {
			t.Fatalf("status namespaces %+v: want io_path sync with a reason", st.Namespaces)
		}
	})
	t.Run("default", func(t *testing.T) {
		run, _ := startConfig(t, deviceConfig(file, ""))
		d := run.disks[nsKey{nqnA, 1}]
		if a := d.(*backstore.File).DirectAlignment(); a != 1 {
			t.Errorf("a file without rdisk_direct has direct alignment %d: opened with O_DIRECT", a)
		}
		if p := run.Status().Namespaces[0].IOPath; p != "io_uring" && !strings.HasPrefix(p, "sync: ") {
			t.Errorf("io_path %q", p)
		}
	})
	t.Run("direct", func(t *testing.T) {
		c, err := Parse(strings.NewReader(deviceConfig(file, `, "rdisk_direct": true`)))
		if err != nil {
			t.Fatal(err)
		}
		d, err := OpenDevice(file, c.Subsystems[0].Namespaces[0].deviceOptions())
		if err != nil {
			if strings.Contains(err.Error(), "O_DIRECT") {
				t.Skipf("the temp dir's file system has no O_DIRECT: %v", err)
			}
			t.Fatal(err)
		}
		defer d.Close()
		if a := d.(*backstore.File).DirectAlignment(); a < 512 {
			t.Errorf("rdisk_direct: direct alignment %d, want the O_DIRECT alignment", a)
		}
	})
	for _, tc := range []struct{ path, extra, want string }{
		{"ram:1MiB", `, "rdisk_direct": true`, "rdisk_direct does not apply to a ram disk"},
		{"null:1MiB", `, "rdisk_no_uring": true`, "rdisk_no_uring does not apply to a null disk"},
		{file, `, "rdisk_buffered": true`, "rdisk_buffered does not apply to a regular file"},
		{"rbd:pool/image", `, "rdisk_no_uring": true`, "rdisk_no_uring does not apply to a Ceph RBD image"},
	} {
		c, err := Parse(strings.NewReader(deviceConfig(tc.path, tc.extra)))
		if err != nil {
			t.Fatalf("%s %s: %v", tc.path, tc.extra, err)
		}
		if run, err := Start(c, nil, nil, nil); err == nil {
			run.Close()
			t.Errorf("%s %s: started", tc.path, tc.extra)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: %v, want %q", tc.path, tc.extra, err, tc.want)
		}
	}
}
