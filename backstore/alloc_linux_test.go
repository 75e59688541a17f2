//go:build linux

package backstore

import (
	"path/filepath"
	"testing"
)

// TestNoAllocations checks that steady-state I/O allocates nothing on every
// kind of disk. It does not call t.Parallel: testing.AllocsPerRun counts the
// allocations of the whole process, so it must run while no other test
// does (parallel tests start only after the sequential ones are done).
func TestNoAllocations(t *testing.T) {
	const size = 1 << 20
	disks := map[string]func(t *testing.T) Disk{
		"mem": func(t *testing.T) Disk {
			m, err := NewMem(size, 4096)
			if err != nil {
				t.Fatal(err)
			}
			return m
		},
		"null": func(t *testing.T) Disk { return NewNull(size, 4096) },
		"file-tmpfs": func(t *testing.T) Disk {
			f, err := OpenFile(filepath.Join(shmDir(t), "a.img"), FileOptions{Create: true, Size: size, BlockSize: 4096})
			if err != nil {
				t.Fatal(err)
			}
			return f
		},
		"file-disk-direct": func(t *testing.T) Disk {
			f, err := OpenFile(filepath.Join(t.TempDir(), "a.img"), FileOptions{Create: true, Size: size, BlockSize: 4096, Direct: true})
			if err != nil {
				t.Fatal(err)
			}
			return f
		},
		"block-loop": func(t *testing.T) Disk {
			b, err := openBlockRetry(newLoopDevice(t, size, 512), BlockOptions{BlockSize: 4096})
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
	}
	for name, open := range disks {
		t.Run(name, func(t *testing.T) {
			d := open(t)
			defer d.Close()
			v := d.(VectoredDisk)
			p := AlignedBuffer(64<<10, 4096)
			bufs := [][]byte{p[:4096], p[4096 : 12<<10], p[12<<10 : 64<<10]}
			// Touch everything once: RAM chunks get allocated, lazy state set.
			if err := d.WriteAt(p, 0, FUA); err != nil {
				t.Fatal(err)
			}
			ops := map[string]func() error{
				"ReadAt":      func() error { return d.ReadAt(p, 0) },
				"WriteAt":     func() error { return d.WriteAt(p, 0, 0) },
				"WriteAt FUA": func() error { return d.WriteAt(p[:4096], 4096, FUA) },
				"ReadvAt":     func() error { return v.ReadvAt(bufs, 0) },
				"WritevAt":    func() error { return v.WritevAt(bufs, 0, 0) },
				"Flush":       func() error { return d.Flush() },
				"Stats":       func() error { _ = d.(StatsReporter).Stats(); return nil },
			}
			if vw, ok := d.(Viewer); ok {
				segs := make([][]byte, 4)
				ops["ViewAt"] = func() error { _, err := vw.ViewAt(segs, 4096, 128<<10); return err }
			}
			if z, ok := d.(ZeroWriter); ok {
				ops["WriteZeroes"] = func() error { return z.WriteZeroes(8192, 4096, 0) }
			}
			for opName, op := range ops {
				var err error
				allocs := testing.AllocsPerRun(20, func() {
					if e := op(); e != nil {
						err = e
					}
				})
				if err != nil {
					t.Errorf("%s: %v", opName, err)
				}
				if allocs != 0 {
					t.Errorf("%s: %.1f allocations per call, want 0", opName, allocs)
				}
			}
		})
	}
}
