package main

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
)

// TestCp copies an image with holes to a remote disk and back, verifying
// both ways, and checks that zero blocks were deallocated, not written.
func TestCp(t *testing.T) {
	t.Parallel()
	const size = 8 << 20
	tt := startTarget(t, func() (backstore.Disk, error) { return backstore.NewMem(16<<20, 512) })
	dir := t.TempDir()
	src := filepath.Join(dir, "src.img")
	img := make([]byte, size-1000) // not a whole number of blocks
	r := rand.New(rand.NewPCG(9, 9))
	for i := 0; i < len(img); i += 256 << 10 {
		if (i/(256<<10))%3 == 0 { // every third 256 KiB has data
			for j := i; j < min(i+100<<10, len(img)); j++ {
				img[j] = byte(r.Uint32())
			}
		}
	}
	if err := os.WriteFile(src, img, 0o600); err != nil {
		t.Fatal(err)
	}
	args := func(a ...string) []string {
		return append(append([]string{"cp", "--bs", "256KiB", "--no-progress"}, hostFlags...), a...)
	}
	out := mustRdisk(t, args("--verify", src, tt.url())...)
	if !strings.Contains(out, "verified") || !strings.Contains(out, "of zero blocks not written") || strings.Contains(out, " 0B of zero") {
		t.Errorf("cp to the disk:\n%s", out)
	}
	if !strings.Contains(out, "larger than the source") {
		t.Errorf("no note about the larger destination:\n%s", out)
	}
	back := filepath.Join(dir, "back.img")
	mustRdisk(t, args("--verify", tt.url(), back)...)
	got, err := os.ReadFile(back)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 16<<20 || !bytes.Equal(got[:len(img)], img) || !bytes.Equal(got[len(img):], make([]byte, len(got)-len(img))) {
		t.Fatalf("image copied back differs (%d bytes)", len(got))
	}
	// The local copy is sparse: far fewer blocks allocated than its size.
	var st syscall.Stat_t
	if err := syscall.Stat(back, &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 > 8<<20 {
		t.Errorf("the copy has %d bytes allocated of %d: not sparse", st.Blocks*512, len(got))
	}
}

func TestCpErrors(t *testing.T) {
	t.Parallel()
	tt := startTarget(t, func() (backstore.Disk, error) { return backstore.NewMem(1<<20, 512) })
	dir := t.TempDir()
	big := filepath.Join(dir, "big.img")
	if err := os.WriteFile(big, make([]byte, 2<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{big, tt.url()}, "is larger than"},
		{[]string{big, "nvme://" + dead + "/" + testNQN}, "nvme://" + dead},
		{[]string{big, "nvme://127.0.0.1:99999/x"}, "port"},
		{[]string{big, "nvme://127.0.0.1/"}, "names no subsystem"},
		{[]string{filepath.Join(dir, "missing"), tt.url()}, "no such file"},
		{[]string{big}, "SRC and DST"},
		{[]string{"--bs", "1000", big, tt.url()}, "--bs"},
	} {
		out, err := rdisk(t, ctx, append(append([]string{"cp", "--no-progress"}, hostFlags...), c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("cp %v: %v (%s), want one line with %q", c.args, err, out, c.want)
		}
	}
}
