//go:build linux

package backstore

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestOpenBlockErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := OpenBlock(filepath.Join(dir, "missing"), BlockOptions{}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing device: %v", err)
	}
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenBlock(regular, BlockOptions{Buffered: true}); err == nil || !strings.Contains(err.Error(), "not a block device") {
		t.Errorf("regular file: %v", err)
	}
}

func TestBlockGeometryAndExclusion(t *testing.T) {
	t.Parallel()
	const size = 1 << 20
	t.Run("512", func(t *testing.T) {
		t.Parallel()
		dev := newLoopDevice(t, size, 512)
		b, err := openBlockRetry(dev, BlockOptions{BlockSize: 4096})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if b.BlockSize() != 4096 || b.LogicalBlockSize() != 512 || b.Size() != size || b.DirectAlignment() < 512 {
			t.Errorf("geometry: block %d, logical %d, size %d, alignment %d", b.BlockSize(), b.LogicalBlockSize(), b.Size(), b.DirectAlignment())
		}
		// O_EXCL: a second exclusive open fails, a shared one works.
		if _, err := OpenBlock(dev, BlockOptions{}); !errors.Is(err, unix.EBUSY) {
			t.Errorf("second exclusive open: %v, want EBUSY", err)
		}
		shared, err := OpenBlock(dev, BlockOptions{Shared: true, ReadOnly: true, Buffered: true})
		if err != nil {
			t.Fatalf("shared open: %v", err)
		}
		if shared.DirectAlignment() != 1 {
			t.Errorf("buffered DirectAlignment() = %d", shared.DirectAlignment())
		}
		shared.Close()
	})
	t.Run("4096", func(t *testing.T) {
		t.Parallel()
		dev := newLoopDevice(t, size, 4096)
		if _, err := openBlockRetry(dev, BlockOptions{BlockSize: 512}); err == nil || !strings.Contains(err.Error(), "smaller than the device's logical block size") {
			t.Errorf("block size below the logical block size: %v", err)
		}
		if _, err := openBlockRetry(dev, BlockOptions{BlockSize: 3000}); err == nil {
			t.Error("block size 3000 accepted")
		}
		b, err := openBlockRetry(dev, BlockOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if b.BlockSize() != 4096 || b.LogicalBlockSize() != 4096 {
			t.Errorf("block %d, logical %d, want 4096", b.BlockSize(), b.LogicalBlockSize())
		}
	})
}

func TestBlockDiscardAndTrim(t *testing.T) {
	t.Parallel()
	dev := newLoopDevice(t, 1<<20, 512)
	b, err := openBlockRetry(dev, BlockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p := AlignedBuffer(1<<20, b.DirectAlignment())
	fillPattern(p, 0, 4)
	if err := b.WriteAt(p, 0, FUA); err != nil {
		t.Fatal(err)
	}
	if err := b.Discard(0, 256<<10); err != nil {
		t.Fatal(err)
	}
	if b.noPunch.Load() {
		t.Log("the loop device refused the hole punch; Discard used BLKZEROOUT")
	}
	if err := b.Trim(512<<10, 256<<10); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			t.Logf("loop device without discard: %v", err)
		} else {
			t.Fatalf("Trim: %v", err)
		}
	}
	if err := b.ReadAt(p, 0); err != nil {
		t.Fatal(err)
	}
	if i := firstNonZero(p[:256<<10]); i >= 0 {
		t.Errorf("discarded range has a non-zero byte at %d", i)
	}
	if at := checkPattern(p[256<<10:512<<10], 256<<10, 4); at >= 0 {
		t.Errorf("data after the discarded range differs at %d", at)
	}
	if err := b.Trim(1, 512); !isRangeError(err, RangeUnaligned) {
		t.Errorf("unaligned Trim: %v", err)
	}
	if s := b.Stats(); s.Discard.Ops != 2 || s.Discard.Errors != 0 && !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("discard stats %+v", s.Discard)
	}
}
