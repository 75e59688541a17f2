//go:build linux

package backstore

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// diskKind makes disks of one kind for the conformance suite.
type diskKind struct {
	name string
	// retains is false for Null, which drops what it is given.
	retains bool
	// open returns a writable disk of at least size bytes, closed at the
	// end of the test.
	open func(t *testing.T, size int64) Disk
	// readOnly returns a read-only disk over the same storage as d, which
	// it may close.
	readOnly func(t *testing.T, d Disk) Disk
}

const conformanceSize = 4 << 20

func conformanceKinds() []diskKind {
	memKind := func(bs int) diskKind {
		return diskKind{
			name: "mem-" + strconv.Itoa(bs), retains: true,
			open: func(t *testing.T, size int64) Disk {
				m, err := NewMem(size, bs)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { m.Close() })
				return m
			},
			readOnly: func(t *testing.T, d Disk) Disk {
				d.(*Mem).SetReadOnly(true)
				return d
			},
		}
	}
	fileKind := func(name string, dir func(t *testing.T) string, bs int, direct bool) diskKind {
		return diskKind{
			name: name, retains: true,
			open: func(t *testing.T, size int64) Disk {
				path := filepath.Join(dir(t), "disk.img")
				f, err := OpenFile(path, FileOptions{BlockSize: bs, Size: size, Create: true, Direct: direct})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { f.Close() })
				return f
			},
			readOnly: func(t *testing.T, d Disk) Disk {
				f := d.(*File)
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
				ro, err := OpenFile(f.Path(), FileOptions{BlockSize: bs, ReadOnly: true, Direct: direct})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ro.Close() })
				return ro
			},
		}
	}
	blockKind := func(sector int) diskKind {
		return diskKind{
			name: "block-loop-" + strconv.Itoa(sector), retains: true,
			open: func(t *testing.T, size int64) Disk {
				dev := newLoopDevice(t, size, sector)
				b, err := openBlockRetry(dev, BlockOptions{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Close() })
				return b
			},
			readOnly: func(t *testing.T, d Disk) Disk {
				b := d.(*Block)
				if err := b.Close(); err != nil {
					t.Fatal(err)
				}
				ro, err := openBlockRetry(b.Path(), BlockOptions{ReadOnly: true})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ro.Close() })
				return ro
			},
		}
	}
	return []diskKind{
		memKind(512),
		memKind(4096),
		{
			name: "null-512", retains: false,
			open: func(t *testing.T, size int64) Disk {
				n := NewNull(size, 512)
				t.Cleanup(func() { n.Close() })
				return n
			},
			readOnly: func(t *testing.T, d Disk) Disk {
				d.(*Null).SetReadOnly(true)
				return d
			},
		},
		fileKind("file-tmpfs-512", shmTestDir, 512, false),
		fileKind("file-tmpfs-direct-4096", shmTestDir, 4096, true),
		fileKind("file-disk-4096", tempDir, 4096, false),
		fileKind("file-disk-direct-512", tempDir, 512, true),
		blockKind(512),
		blockKind(4096),
	}
}

func tempDir(t *testing.T) string { return t.TempDir() }

func shmTestDir(t *testing.T) string { return shmDir(t) }

// shmDir returns a fresh directory on tmpfs (/dev/shm), removed at the end
// of the test, or skips the test when there is none.
func shmDir(t testing.TB) string {
	t.Helper()
	if fi, err := os.Stat("/dev/shm"); err != nil || !fi.IsDir() {
		t.Skip("no tmpfs at /dev/shm")
	}
	dir, err := os.MkdirTemp("/dev/shm", "rdisk-backstore-test-")
	if err != nil {
		t.Skipf("cannot use /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// newLoopDevice attaches a loop device (losetup -f --show) over a new sparse
// file of size bytes with the given logical sector size, and detaches it at
// the end of the test. It skips the test when loop devices are not usable.
func newLoopDevice(t *testing.T, size int64, sector int) string {
	t.Helper()
	losetup, err := exec.LookPath("losetup")
	if err != nil {
		t.Skip("losetup not found; block backstore not tested")
	}
	if os.Geteuid() != 0 {
		t.Skip("not root: cannot attach loop devices; block backstore not tested")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("no /dev/loop-control (%v); block backstore not tested", err)
	}
	backing := filepath.Join(t.TempDir(), "loop-backing.img")
	f, err := os.Create(backing)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	args := []string{"--find", "--show"}
	if sector != 512 {
		args = append(args, "--sector-size", strconv.Itoa(sector))
	}
	out, err := exec.Command(losetup, append(args, backing)...).CombinedOutput()
	if err != nil {
		t.Skipf("losetup %s failed, no loop device available? %v: %s", strings.Join(args, " "), err, out)
	}
	dev := strings.TrimSpace(string(out))
	if !strings.HasPrefix(dev, "/dev/loop") {
		t.Fatalf("losetup printed %q, not a loop device", dev)
	}
	// Registered after TempDir's cleanup, so it runs before the backing file
	// is removed; disks opened later are closed before this runs.
	t.Cleanup(func() {
		if out, err := exec.Command(losetup, "--detach", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup --detach %s: %v: %s", dev, err, out)
		}
	})
	return dev
}

// openBlockRetry is OpenBlock retried for a while on EBUSY. Closing a disk
// does not end its exclusive claim while a process forked meanwhile (tests
// run losetup and child processes in parallel) still holds a copy of the
// descriptor, until that process execs; the claim then ends.
func openBlockRetry(path string, opts BlockOptions) (*Block, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := OpenBlock(path, opts)
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return b, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// isRangeError reports whether err is a *RangeError with the given reason.
func isRangeError(err error, reason RangeReason) bool {
	var re *RangeError
	return errors.As(err, &re) && re.Reason == reason
}
