package fusefile

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/blockdev/blockdevtest"
)

// needFUSE skips unless FUSE can be mounted here (root and /dev/fuse).
func needFUSE(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("FUSE mounts need root here")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
}

func mountMem(t *testing.T, cfg blockdevtest.MemConfig) (*blockdevtest.Mem, *Mount) {
	t.Helper()
	needFUSE(t)
	d, err := blockdevtest.NewMem(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	m, err := New(Config{Dir: t.TempDir(), Name: "disk0", Dev: d})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(true); err != nil {
			t.Errorf("Unmount: %v", err)
		}
	})
	return d, m
}

func TestFileIO(t *testing.T) {
	t.Parallel()
	d, m := mountMem(t, blockdevtest.MemConfig{Size: 8 << 20})
	st, err := os.Stat(m.Path())
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != 8<<20 || !st.Mode().IsRegular() {
		t.Fatalf("stat: size %d mode %v", st.Size(), st.Mode())
	}
	f, err := os.OpenFile(m.Path(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := rand.New(rand.NewPCG(1, 2))
	want := make([]byte, 8<<20)
	for _, w := range [][2]int{{0, 4096}, {4096, 1 << 20}, {100, 3000}, {5<<20 + 1, 1}, {7 << 20, 700 << 10}, {8<<20 - 10, 10}} {
		p := make([]byte, w[1])
		for i := range p {
			p[i] = byte(r.Uint32())
		}
		if n, err := f.WriteAt(p, int64(w[0])); err != nil || n != len(p) {
			t.Fatalf("write %v: %d, %v", w, n, err)
		}
		copy(want[w[0]:], p)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if d.Ops(blockdev.OpFlush) == 0 {
		t.Errorf("fsync did not flush the device")
	}
	got := make([]byte, len(want))
	if n, err := f.ReadAt(got, 0); err != nil || n != len(got) {
		t.Fatalf("read: %d, %v", n, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("file content differs from what was written")
	}
	// Odd reads.
	for _, rd := range [][2]int{{3, 5}, {511, 2}, {4095, 8193}} {
		b := make([]byte, rd[1])
		if _, err := f.ReadAt(b, int64(rd[0])); err != nil || !bytes.Equal(b, want[rd[0]:rd[0]+rd[1]]) {
			t.Errorf("read %v: %v", rd, err)
		}
	}
	// Writes past the end fail; a truncate to another size fails.
	if _, err := f.WriteAt([]byte{1}, 8<<20); err == nil {
		t.Errorf("write past the end succeeded")
	}
	if err := f.Truncate(1 << 20); err == nil {
		t.Errorf("truncate succeeded")
	}
	// Punch a hole and zero a range.
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 1<<20, 64<<10); err != nil {
		t.Fatalf("punch hole: %v", err)
	}
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, 2<<20+100, 5000); err != nil {
		t.Fatalf("zero range: %v", err)
	}
	clear(want[1<<20 : 1<<20+64<<10])
	clear(want[2<<20+100 : 2<<20+5100])
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("content after fallocate differs")
	}
	if d.Ops(blockdev.OpDiscard) == 0 {
		t.Errorf("punching a hole did not discard")
	}
	// Busy while open: a plain unmount fails.
	if err := m.Unmount(false); err == nil {
		t.Errorf("unmount while the file is open succeeded")
	}
}

func TestReadOnly(t *testing.T) {
	t.Parallel()
	needFUSE(t)
	d, err := blockdevtest.NewMem(blockdevtest.MemConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	m, err := New(Config{Dir: t.TempDir(), Name: "ro", Dev: d, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmount(true)
	if _, err := os.OpenFile(m.Path(), os.O_RDWR, 0); err == nil {
		t.Errorf("read-write open of a read-only disk succeeded")
	}
	b, err := os.ReadFile(m.Path())
	if err != nil || len(b) != 1<<20 {
		t.Errorf("read: %d bytes, %v", len(b), err)
	}
}

func TestBadConfig(t *testing.T) {
	t.Parallel()
	d, _ := blockdevtest.NewMem(blockdevtest.MemConfig{})
	defer d.Close()
	dir := t.TempDir()
	for _, c := range []Config{
		{Dir: dir, Name: "a/b", Dev: d},
		{Dir: filepath.Join(dir, "missing"), Name: "x", Dev: d},
		{Dir: dir, Name: "x"},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) succeeded", c)
		}
	}
}
