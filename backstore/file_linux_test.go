//go:build linux

package backstore

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestOpenFileOptions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mk := func(name string, size int64) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fileSize := func(p string) int64 {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	for _, tt := range []struct {
		name     string
		path     string
		opts     FileOptions
		wantSize int64  // when the open succeeds
		wantErr  string // substring, when it fails
		wantFile int64  // file size after the open, 0: not checked
	}{
		{name: "missing", path: filepath.Join(dir, "missing"), wantErr: "no such file"},
		{name: "create without size", path: filepath.Join(dir, "c1"), opts: FileOptions{Create: true}, wantErr: "needs a Size"},
		{name: "create read-only", path: filepath.Join(dir, "c2"), opts: FileOptions{Create: true, ReadOnly: true, Size: 4096}, wantErr: "exclude"},
		{name: "bad block size", path: mk("bs", 8192), opts: FileOptions{BlockSize: 1000}, wantErr: "neither 512 nor 4096"},
		{name: "size not a multiple", path: mk("sz", 8192), opts: FileOptions{Size: 5000}, wantErr: "not a multiple"},
		{name: "negative size", path: mk("neg", 8192), opts: FileOptions{Size: -512}, wantErr: "not a multiple"},
		{name: "directory", path: dir, opts: FileOptions{ReadOnly: true}, wantErr: "not a regular file"},
		{name: "no whole block", path: mk("tiny", 100), wantErr: "no whole"},
		{name: "size rounded down", path: mk("odd", 10000), opts: FileOptions{BlockSize: 4096}, wantSize: 8192, wantFile: 10000},
		{name: "extended", path: mk("short", 8192), opts: FileOptions{Size: 16384}, wantSize: 16384, wantFile: 16384},
		{name: "read-only too short", path: mk("short-ro", 8192), opts: FileOptions{Size: 16384, ReadOnly: true}, wantErr: "fewer than"},
		{name: "longer file not truncated", path: mk("long", 16384), opts: FileOptions{Size: 8192}, wantSize: 8192, wantFile: 16384},
		{name: "created", path: filepath.Join(dir, "new"), opts: FileOptions{Create: true, Size: 1 << 20, BlockSize: 4096}, wantSize: 1 << 20, wantFile: 1 << 20},
	} {
		f, err := OpenFile(tt.path, tt.opts)
		if tt.wantErr != "" {
			if err == nil {
				f.Close()
				t.Errorf("%s: no error, want %q", tt.name, tt.wantErr)
			} else if !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "opening") {
				t.Errorf("%s: error %q, want it to say opening and %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if f.Size() != tt.wantSize {
			t.Errorf("%s: Size() = %d, want %d", tt.name, f.Size(), tt.wantSize)
		}
		f.Close()
		if tt.wantFile != 0 && fileSize(tt.path) != tt.wantFile {
			t.Errorf("%s: file has %d bytes, want %d", tt.name, fileSize(tt.path), tt.wantFile)
		}
	}
	if _, err := OpenFile(filepath.Join(dir, "missing"), FileOptions{}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v does not wrap fs.ErrNotExist", err)
	}
}

func TestOpenFilePerm(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	old := umask(t)
	for _, tt := range []struct {
		perm fs.FileMode
		want fs.FileMode
	}{{0, 0o600}, {0o640, 0o640}} {
		p := filepath.Join(dir, tt.perm.String())
		f, err := OpenFile(p, FileOptions{Create: true, Size: 4096, Perm: tt.perm})
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if want := tt.want &^ fs.FileMode(old); fi.Mode().Perm() != want {
			t.Errorf("Perm %v: file mode %v, want %v", tt.perm, fi.Mode().Perm(), want)
		}
	}
}

// umask reads the process umask from /proc without changing it (unix.Umask
// would, for every test running in parallel).
func umask(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("cannot read the umask: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Umask:"); ok {
			m, err := strconv.ParseInt(strings.TrimSpace(v), 8, 32)
			if err != nil {
				t.Fatal(err)
			}
			return int(m)
		}
	}
	t.Skip("no Umask line in /proc/self/status")
	return 0
}

func TestFileDirectAlignment(t *testing.T) {
	t.Parallel()
	f, err := OpenFile(filepath.Join(t.TempDir(), "d.img"), FileOptions{Create: true, Size: 1 << 20, Direct: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	align := f.DirectAlignment()
	if align < 2 {
		t.Fatalf("DirectAlignment() = %d for an O_DIRECT file", align)
	}
	good := AlignedBuffer(2*4096, align)
	bad := AlignedBuffer(2*4096+align, align)[1 : 1+4096]
	if err := f.WriteAt(good, 0, 0); err != nil {
		t.Fatal(err)
	}
	before := f.Stats().Rejected
	for name, err := range map[string]error{
		"ReadAt":   f.ReadAt(bad, 0),
		"WriteAt":  f.WriteAt(bad, 0, FUA),
		"ReadvAt":  f.ReadvAt([][]byte{good[:4096], bad}, 0),
		"WritevAt": f.WritevAt([][]byte{bad, good[:4096]}, 0, 0),
	} {
		if !errors.Is(err, ErrBufferAlignment) {
			t.Errorf("%s with a misaligned buffer: %v, want ErrBufferAlignment", name, err)
		}
	}
	if got := f.Stats().Rejected - before; got != 4 {
		t.Errorf("Rejected grew by %d, want 4", got)
	}
	// A buffered file takes any buffer.
	g, err := OpenFile(filepath.Join(t.TempDir(), "b.img"), FileOptions{Create: true, Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.DirectAlignment() != 1 {
		t.Errorf("buffered DirectAlignment() = %d", g.DirectAlignment())
	}
	if err := g.WriteAt(bad[:512], 512, FUA); err != nil {
		t.Errorf("buffered write of an unaligned buffer: %v", err)
	}
}

// TestFileFallbacks forces the paths taken on kernels and file systems
// without RWF_DSYNC, FALLOC_FL_ZERO_RANGE or hole punching.
func TestFileFallbacks(t *testing.T) {
	t.Parallel()
	for _, dir := range []struct {
		name string
		path func(t *testing.T) string
	}{{"disk", tempDir}, {"tmpfs", shmTestDir}} {
		t.Run(dir.name, func(t *testing.T) {
			t.Parallel()
			f, err := OpenFile(filepath.Join(dir.path(t), "f.img"), FileOptions{Create: true, Size: 1 << 20, BlockSize: 4096})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			p := make([]byte, 1<<20)
			fillPattern(p, 0, 5)
			if err := f.WriteAt(p, 0, 0); err != nil {
				t.Fatal(err)
			}
			// Natural paths first: tmpfs has no FALLOC_FL_ZERO_RANGE.
			if err := f.WriteZeroes(0, 64<<10, FUA); err != nil {
				t.Fatal(err)
			}
			if got, want := f.noZeroRange.Load(), dir.name == "tmpfs"; got != want {
				t.Errorf("zero-range unsupported = %v, want %v", got, want)
			}
			// Then every fallback.
			f.d.noDsync.Store(true)
			f.noZeroRange.Store(true)
			f.noPunch.Store(true)
			fillPattern(p[:8192], 128<<10, 6)
			if err := f.WriteAt(p[:8192], 128<<10, FUA); err != nil {
				t.Fatal(err)
			}
			if err := f.WriteZeroes(256<<10, 300<<10, FUA); err != nil {
				t.Fatal(err)
			}
			if err := f.Discard(768<<10, 64<<10); err != nil {
				t.Fatal(err)
			}
			q := make([]byte, 1<<20)
			if err := f.ReadAt(q, 0); err != nil {
				t.Fatal(err)
			}
			for _, r := range []struct {
				off, n int64
				seed   uint64 // 0: zeroes
			}{
				{0, 64 << 10, 0},
				{64 << 10, 64 << 10, 5},
				{128 << 10, 8192, 6},
				{256 << 10, 300 << 10, 0},
				{556 << 10, 212 << 10, 5},
				{768 << 10, 64 << 10, 0},
				{832 << 10, 192 << 10, 5},
			} {
				got := q[r.off : r.off+r.n]
				if r.seed == 0 {
					if i := firstNonZero(got); i >= 0 {
						t.Errorf("range at %d: non-zero byte at %d", r.off, r.off+int64(i))
					}
				} else if at := checkPattern(got, r.off, r.seed); at >= 0 {
					t.Errorf("range at %d: data differs at %d", r.off, at)
				}
			}
			if s := f.Stats(); s.FUAWrites != 1 || s.WriteZeroes.Ops != 2 || s.Discard.Ops != 1 || s.Errors() != 0 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

func TestFileDiscardPunchesHoles(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "holes.img")
	f, err := OpenFile(path, FileOptions{Create: true, Size: 4 << 20, BlockSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := make([]byte, 4<<20)
	fillPattern(p, 0, 1)
	if err := f.WriteAt(p, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Flush(); err != nil {
		t.Fatal(err)
	}
	blocks := func() int64 {
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return st.Blocks * 512
	}
	full := blocks()
	if err := f.Discard(1<<20, 2<<20); err != nil {
		t.Fatal(err)
	}
	if f.noPunch.Load() {
		t.Skip("the file system of t.TempDir cannot punch holes")
	}
	if got := blocks(); got > full-(2<<20) {
		t.Errorf("discard of 2 MiB left %d of %d bytes allocated", got, full)
	}
	if fi, _ := os.Stat(path); fi.Size() != 4<<20 {
		t.Errorf("discard changed the file size to %d", fi.Size())
	}
}

// TestFileCloseWhileBusy closes a file while goroutines read it: each
// request either completes or returns ErrClosed, and none reaches a closed
// (or reused) descriptor.
func TestFileCloseWhileBusy(t *testing.T) {
	t.Parallel()
	f, err := OpenFile(filepath.Join(t.TempDir(), "c.img"), FileOptions{Create: true, Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := make([]byte, 4096)
			for {
				err := f.ReadAt(p, 0)
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := f.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	if _, err := f.Health(); err != nil {
		t.Errorf("Health after Close: %v", err)
	}
}

// TestFileReadAtNoWait: cached data is read at once; after the pages are
// dropped, and on direct I/O, the read declines without counting; bad
// ranges are refused as by ReadAt.
func TestFileReadAtNoWait(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "nowait.img")
	f, err := OpenFile(path, FileOptions{Create: true, Size: 1 << 20, BlockSize: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := make([]byte, 64<<10)
	for i := range want {
		want[i] = byte(i*13 + 7)
	}
	if err := f.WriteAt(want, 128<<10, 0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	done, err := f.ReadAtNoWait(got, 128<<10)
	if err != nil {
		t.Fatal(err)
	}
	if f.d.noNowait.Load() {
		t.Skip("this kernel or file system has no RWF_NOWAIT reads")
	}
	if !done || !bytes.Equal(got, want) {
		t.Fatalf("cached read: done %v, equal %v", done, bytes.Equal(got, want))
	}
	// Drop the pages (clean them first): the read must not wait for the disk.
	if err := f.Flush(); err != nil {
		t.Fatal(err)
	}
	// FADV_DONTNEED is advice: a busy machine may keep (or re-read) some
	// pages, so it is asked again a few times before the read must decline.
	for try := 0; try < 20; try++ {
		if err := unix.Fadvise(f.d.fd, 0, 0, unix.FADV_DONTNEED); err != nil {
			t.Fatal(err)
		}
		before := f.Stats().Read.Ops
		if done, err = f.ReadAtNoWait(got, 128<<10); err != nil {
			t.Fatalf("uncached read: %v", err)
		}
		if !done {
			if f.Stats().Read.Ops != before {
				t.Fatal("a declined read was counted")
			}
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if done && !onTmpfs(t, path) { // tmpfs keeps its pages: nothing to drop there
		t.Fatalf("uncached read: done %v after 20 FADV_DONTNEED; want a decline", done)
	}
	if err := f.ReadAt(got, 128<<10); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("ReadAt after the decline: %v", err)
	}
	if _, err := f.ReadAtNoWait(got[:100], 0); !isRangeErr(err) {
		t.Fatalf("unaligned: %v, want a RangeError", err)
	}
	if _, err := f.ReadAtNoWait(got, 1<<20); !isRangeErr(err) {
		t.Fatalf("past the end: %v, want a RangeError", err)
	}
	d, err := OpenFile(filepath.Join(t.TempDir(), "direct.img"), FileOptions{Create: true, Size: 1 << 20, BlockSize: 512, Direct: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	buf := AlignedBuffer(4096, 4096)
	if done, err := d.ReadAtNoWait(buf, 0); done || err != nil {
		t.Fatalf("direct file: done %v, err %v; want a decline", done, err)
	}
}

func onTmpfs(t *testing.T, path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Type == unix.TMPFS_MAGIC
}
