package uring

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// newRing returns a ring closed at the end of the test, or skips the test
// where io_uring is unavailable (a seccomp filter in a container).
func newRing(t *testing.T, entries uint32) *Ring {
	t.Helper()
	r, err := New(entries)
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("io_uring unavailable: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	})
	return r
}

// reap waits for n completions and returns them in order.
func reap(t *testing.T, r *Ring, n int) []CQE {
	t.Helper()
	var got []CQE
	for len(got) < n {
		a, b := r.Peek()
		got = append(append(got, a...), b...)
		r.Advance(uint32(len(a) + len(b)))
		if len(got) >= n {
			break
		}
		if _, err := r.Enter(0, 1, true); err != nil && err != unix.EINTR {
			t.Fatalf("io_uring_enter: %v", err)
		}
	}
	return got
}

func TestNopRoundTrip(t *testing.T) {
	t.Parallel()
	r := newRing(t, 8)
	if r.SQEntries() != 8 || r.CQEntries() != 16 {
		t.Fatalf("rings of %d and %d entries, want 8 and 16", r.SQEntries(), r.CQEntries())
	}
	for i := range 8 {
		e := r.GetSQE()
		if e == nil {
			t.Fatalf("GetSQE %d: ring full", i)
		}
		e.PrepNop()
		e.UserData = uint64(100 + i)
	}
	if e := r.GetSQE(); e != nil {
		t.Fatal("GetSQE past the ring size returned an entry")
	}
	if n := r.Flush(); n != 8 {
		t.Fatalf("Flush: %d pending, want 8", n)
	}
	if n, err := r.Enter(8, 0, false); err != nil || n != 8 {
		t.Fatalf("Enter = %d, %v; want 8 submitted", n, err)
	}
	got := reap(t, r, 8)
	for i, c := range got {
		if c.UserData != uint64(100+i) || c.Res != 0 {
			t.Errorf("CQE %d = %+v, want user data %d, res 0", i, c, 100+i)
		}
	}
}

// TestCQOverflow submits more no-ops than the completion ring holds before
// reaping any: the kernel keeps the rest (IORING_FEAT_NODROP) and hands
// them over as the ring drains, none lost.
func TestCQOverflow(t *testing.T) {
	t.Parallel()
	r := newRing(t, 4) // CQ of 8
	const total = 40
	for i := 0; i < total; {
		for e := r.GetSQE(); e != nil && i < total; e = r.GetSQE() {
			e.PrepNop()
			e.UserData = uint64(i)
			i++
		}
		n := r.Flush()
		for n > 0 {
			k, err := r.Enter(n, 0, false)
			if err == unix.EBUSY {
				// Older kernels refuse submissions while completions
				// overflow; the test then only checks nothing is lost.
				break
			}
			if err != nil {
				t.Fatalf("io_uring_enter: %v", err)
			}
			n -= uint32(k)
		}
		if r.Flush() != 0 {
			break
		}
	}
	if !r.Overflowed() {
		t.Log("the kernel did not report an overflow")
	}
	got := reap(t, r, total)
	seen := make(map[uint64]bool)
	for _, c := range got {
		if seen[c.UserData] {
			t.Errorf("completion %d twice", c.UserData)
		}
		seen[c.UserData] = true
	}
	if len(seen) != total {
		t.Errorf("%d distinct completions, want %d", len(seen), total)
	}
}

func TestReadWriteFsync(t *testing.T) {
	t.Parallel()
	r := newRing(t, 4)
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	data := []byte("hello, ring")
	do := func(prep func(e *SQE)) CQE {
		e := r.GetSQE()
		prep(e)
		e.UserData = 7
		r.Flush()
		if _, err := r.Enter(1, 0, false); err != nil {
			t.Fatal(err)
		}
		return reap(t, r, 1)[0]
	}
	if c := do(func(e *SQE) { e.PrepRW(OpWrite, fd, unsafe.Pointer(&data[0]), uint32(len(data)), 4096, 0) }); c.Res != int32(len(data)) {
		t.Fatalf("write: res %d", c.Res)
	}
	if c := do(func(e *SQE) { e.PrepFsync(fd, FsyncDatasync) }); c.Res != 0 {
		t.Fatalf("fdatasync: res %d", c.Res)
	}
	got := make([]byte, 64)
	iov := []unix.Iovec{{Base: &got[0]}}
	iov[0].SetLen(len(got))
	// Past the end of the file: a short read.
	if c := do(func(e *SQE) { e.PrepRW(OpReadv, fd, unsafe.Pointer(&iov[0]), 1, 4096, 0) }); c.Res != int32(len(data)) || string(got[:len(data)]) != string(data) {
		t.Fatalf("readv: res %d, %q", c.Res, got[:max(c.Res, 0)])
	}
	if c := do(func(e *SQE) {
		e.PrepFallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 4096, 4096)
	}); c.Res != 0 && c.Res != -int32(unix.EOPNOTSUPP) {
		t.Fatalf("fallocate: res %d", c.Res)
	}
	// A bad descriptor comes back as a negative errno in the CQE.
	if c := do(func(e *SQE) { e.PrepFsync(-1, 0) }); c.Res != -int32(unix.EBADF) {
		t.Fatalf("fsync(-1): res %d, want -EBADF", c.Res)
	}
}

// TestEventfd: a registered eventfd counts the completions posted.
func TestEventfd(t *testing.T) {
	t.Parallel()
	r := newRing(t, 4)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	if err := r.RegisterEventfd(efd); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r.GetSQE().PrepNop()
	}
	r.Flush()
	if _, err := r.Enter(2, 2, true); err != nil {
		t.Fatal(err)
	}
	var b [8]byte
	if n, err := unix.Read(efd, b[:]); err != nil || n != 8 || b[0] == 0 {
		t.Fatalf("eventfd read = %d, %v, %v; want a count", n, err, b)
	}
	reap(t, r, 2)
}
