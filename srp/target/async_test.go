package target

import (
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/srp/initiator"
)

// asyncTestDisk is a testDisk that implements backstore.AsyncDisk: each
// started I/O runs through the testDisk (and its gate) on a goroutine of
// the disk, then calls Done.
type asyncTestDisk struct{ *testDisk }

func (d asyncTestDisk) Start(io *backstore.AsyncIO) error {
	go func() {
		switch io.Op {
		case backstore.AsyncRead:
			io.Err = d.ReadAt(io.Bufs[0], io.Off)
		case backstore.AsyncWrite:
			io.Err = d.WriteAt(io.Bufs[0], io.Off, io.Flags)
		case backstore.AsyncFlush:
			io.Err = d.Flush()
		default:
			io.Err = backstore.ErrUnsupported
		}
		io.Done(io)
	}()
	return nil
}

// TestAsyncDiskDepth: on a backstore.AsyncDisk, a channel with one worker
// keeps its whole queue depth at the disk: commands are started there
// (scsi.Session.Start), not run on the worker.
func TestAsyncDiskDepth(t *testing.T) {
	t.Parallel()
	disk := asyncTestDisk{newTestDisk(t, 1<<20)}
	lt := startTarget(t, Config{QueueDepth: 32, Workers: 1}, PortConfig{}, disk)
	t.Cleanup(disk.open) // before the target's: nothing stays held
	d := openDev(t, lt, initiator.Config{QueueDepth: 16})
	buf, err := d.AllocBuffer(16 * 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Release()
	want := randBytes(16*4096, 3)
	copy(buf.Bytes(), want)
	for _, op := range []blockdev.Op{blockdev.OpWrite, blockdev.OpRead} {
		if op == blockdev.OpRead {
			clear(buf.Bytes())
		}
		disk.hold()
		const n = 16
		done := make(chan *blockdev.Request, n)
		reqs := make([]blockdev.Request, n)
		for i := range reqs {
			reqs[i] = blockdev.Request{Op: op, Offset: int64(i) * 4096, Length: 4096, Buf: buf, BufOff: i * 4096, C: done}
			if err := d.Submit(&reqs[i]); err != nil {
				t.Fatalf("Submit: %v", err)
			}
		}
		disk.waitBlocked(t, n) // 16 at the disk with 1 worker
		disk.open()
		for range n {
			select {
			case r := <-done:
				if r.Err != nil {
					t.Fatalf("%v: %v", op, r.Err)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("%v: not completed", op)
			}
		}
	}
	if string(buf.Bytes()) != string(want) {
		t.Error("read back differs")
	}
}
