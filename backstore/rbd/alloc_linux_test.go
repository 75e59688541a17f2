//go:build ceph && linux

package rbd

import (
	"testing"

	"github.com/rdisk/rdisk/backstore"
)

// TestAllocs: the steady-state I/O paths allocate nothing per I/O: Start
// (read, write, FUA write, flush, discard, write-zeroes, two-segment
// write) with its completion and Done, and the synchronous ReadAt and
// WriteAt. Not parallel: AllocsPerRun counts the whole process's
// allocations (and refuses to run in a parallel test).
func TestAllocs(t *testing.T) {
	l := getLab(t)
	d := open(t, l.config(l.newImage(t, "16M", "")))
	buf := make([]byte, 4096)
	done := make(chan struct{}, 1)
	io := &backstore.AsyncIO{Done: func(*backstore.AsyncIO) { done <- struct{}{} }}
	one := [][]byte{buf}
	two := [][]byte{buf[:2048], buf[2048:]}
	cases := []struct {
		name string
		set  func()
	}{
		{"read", func() { io.Op, io.Bufs, io.Off, io.Flags = backstore.AsyncRead, one, 8192, 0 }},
		{"write", func() { io.Op, io.Bufs, io.Off, io.Flags = backstore.AsyncWrite, one, 8192, 0 }},
		{"write-fua", func() { io.Op, io.Bufs, io.Off, io.Flags = backstore.AsyncWrite, one, 8192, backstore.FUA }},
		{"writev", func() { io.Op, io.Bufs, io.Off, io.Flags = backstore.AsyncWrite, two, 8192, 0 }},
		{"flush", func() { io.Op, io.Bufs = backstore.AsyncFlush, nil }},
		{"discard", func() { io.Op, io.Off, io.Len = backstore.AsyncDiscard, 65536, 4096 }},
		{"write-zeroes", func() { io.Op, io.Off, io.Len = backstore.AsyncWriteZeroes, 65536, 4096 }},
	}
	for _, c := range cases {
		run := func() {
			c.set()
			if err := d.Start(io); err != nil {
				t.Fatal(err)
			}
			<-done
			if io.Err != nil {
				t.Fatal(io.Err)
			}
		}
		for range 20 { // warm up: slots, pinner caches, C threads' Ms
			run()
		}
		if n := testing.AllocsPerRun(200, run); n != 0 {
			t.Errorf("Start %s: %v allocations per I/O", c.name, n)
		}
	}
	if n := testing.AllocsPerRun(200, func() {
		if err := d.WriteAt(buf, 4096, 0); err != nil {
			t.Fatal(err)
		}
		if err := d.ReadAt(buf, 4096); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("WriteAt+ReadAt: %v allocations", n)
	}
}
