package nbd

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdisk/rdisk/blockdev/blockdevtest"
)

// need skips the test when a tool is missing (scripts/test.sh installs
// them: apt packages qemu-utils and fio).
func need(t *testing.T, tool, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		t.Skipf("%s not installed (apt-get install %s)", tool, pkg)
	}
	return p
}

func run(t *testing.T, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%s %s: timed out after %v:\n%s", name, strings.Join(args, " "), timeout, out)
	}
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestQemuIO drives the server with qemu-io and qemu-img (qemu's NBD
// client: structured replies refused, block sizes requested, FUA, flush,
// write zeroes, discard).
func TestQemuIO(t *testing.T) {
	t.Parallel()
	qio := need(t, "qemu-io", "qemu-utils")
	d := newMem(t, blockdevtest.MemConfig{Size: 64 << 20, Queues: 2})
	_, path := startServer(t, Config{}, &Export{Name: "disk", Dev: d})
	uri := "nbd+unix:///disk?socket=" + path
	out := run(t, time.Minute, qio, "-f", "raw",
		"-c", "write -P 0xa5 0 1M",
		"-c", "write -f -P 0x5a 1M 64k",
		"-c", "write -P 0x11 2000000 3000", // unaligned: qemu aligns it itself, or we RMW
		"-c", "write -z 4M 512k",
		"-c", "discard 8M 1M",
		"-c", "flush",
		"-c", "read -P 0xa5 0 1M",
		"-c", "read -P 0x5a 1M 64k",
		"-c", "read -P 0x11 2000000 3000",
		"-c", "read -P 0 4M 512k",
		"-c", "aio_write -P 0x77 16M 4k",
		"-c", "aio_write -P 0x78 17M 128k",
		"-c", "aio_flush",
		"-c", "read -P 0x77 16M 4k",
		"-c", "read -P 0x78 17M 128k",
		uri)
	if strings.Contains(out, "Pattern verification failed") || strings.Contains(out, "failed") {
		t.Fatalf("qemu-io:\n%s", out)
	}
	qimg := need(t, "qemu-img", "qemu-utils")
	out = run(t, time.Minute, qimg, "info", uri)
	if !strings.Contains(out, "64 MiB") {
		t.Errorf("qemu-img info:\n%s", out)
	}
	// Copy an image in and out.
	dir := t.TempDir()
	src := filepath.Join(dir, "src.raw")
	data := pattern(3<<20, 42)
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, time.Minute, qimg, "convert", "-n", "-f", "raw", "-O", "raw", src, uri)
	dst := filepath.Join(dir, "dst.raw")
	run(t, time.Minute, qimg, "convert", "-f", "raw", "-O", "raw", uri, dst)
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 64<<20 || string(got[:len(data)]) != string(data) {
		t.Errorf("image copied out differs (%d bytes)", len(got))
	}
}

// TestFioVerify runs fio's nbd engine (libnbd) with a crc32c verify job.
func TestFioVerify(t *testing.T) {
	t.Parallel()
	fio := need(t, "fio", "fio")
	if out, _ := exec.Command(fio, "--enghelp").CombinedOutput(); !strings.Contains(string(out), "nbd") {
		t.Skip("fio was built without the nbd engine")
	}
	d := newMem(t, blockdevtest.MemConfig{Size: 32 << 20, Queues: 2})
	_, path := startServer(t, Config{}, &Export{Name: "disk", Dev: d})
	out := run(t, 2*time.Minute, fio, "--name=verify", "--ioengine=nbd", "--uri=nbd+unix:///disk?socket="+path,
		"--rw=randwrite", "--bs=4k", "--bsrange=512-64k", "--iodepth=16", "--size=32M", "--verify=crc32c",
		"--verify_backlog=256", "--do_verify=1", "--numjobs=2", "--offset_increment=16M", "--size=16M",
		"--verify_state_save=0", "--output-format=terse", "--terse-version=3")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(line, ";")
		if len(f) < 5 {
			continue
		}
		if f[4] != "0" {
			t.Fatalf("fio job %s: error %s\n%s", f[2], f[4], out)
		}
	}
	if strings.Contains(out, "verify:") || strings.Contains(out, "bad magic") {
		t.Fatalf("fio verify failures:\n%s", out)
	}
}
