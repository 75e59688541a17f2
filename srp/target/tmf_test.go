package target

import (
	"context"
	"encoding/binary"
	"errors"
	"github.com/rdisk/rdisk/srp"
	"github.com/rdisk/rdisk/srp/initiator"
	"testing"
	"time"

	"github.com/rdisk/rdisk/scsi"
)

func read10(lba uint32, blocks uint16) []byte {
	b := make([]byte, 10)
	b[0] = scsi.OpRead10
	binary.BigEndian.PutUint32(b[2:], lba)
	binary.BigEndian.PutUint16(b[7:], blocks)
	return b
}

func write10(lba uint32, blocks uint16) []byte {
	b := read10(lba, blocks)
	b[0] = scsi.OpWrite10
	return b
}

// execResult is the outcome of an asynchronous Exec.
type execResult struct {
	c   *initiator.Command
	err error
}

// startReads starts n 4 KiB READ(10) commands on channel ch of s on LUN 0
// and returns their tags (once sent) and results.
func startReads(t *testing.T, s *initiator.Session, ch, n int) ([]uint64, chan execResult) {
	t.Helper()
	res := make(chan execResult, n)
	tags := make(chan uint64, n)
	for i := range n {
		c := &initiator.Command{CDB: read10(uint32(i*8), 8), Dir: scsi.DirIn, Data: make([]byte, 4096), OnSend: func(tag uint64) { tags <- tag }}
		go func() {
			err := s.Exec(context.Background(), ch, c)
			res <- execResult{c, err}
		}()
	}
	var out []uint64
	for range n {
		select {
		case tag := <-tags:
			out = append(out, tag)
		case <-time.After(20 * time.Second):
			t.Fatalf("commands not sent")
		}
	}
	return out, res
}

func collect(t *testing.T, res chan execResult, n int) []execResult {
	t.Helper()
	var out []execResult
	for range n {
		select {
		case r := <-res:
			out = append(out, r)
		case <-time.After(20 * time.Second):
			t.Fatalf("only %d of %d commands completed", len(out), n)
		}
	}
	return out
}

// waitCredits waits until channel ch of s has want credits.
func waitCredits(t *testing.T, s *initiator.Session, ch, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.Credits(ch) != want {
		if time.Now().After(deadline) {
			t.Fatalf("channel %d has %d credits, want %d", ch, s.Credits(ch), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestAbortTask(t *testing.T) {
	t.Parallel()
	disk := newTestDisk(t, 1<<20)
	lt := startTarget(t, Config{QueueDepth: 8}, PortConfig{}, disk)
	s := login(t, lt, initiator.Config{})
	clearUA(t, s)
	disk.hold()
	tags, res := startReads(t, s, 0, 2)
	disk.waitBlocked(t, 2)
	tmf := make(chan srp.TMRespCode, 1)
	go func() {
		code, err := s.TaskManagement(context.Background(), 0, srp.TskAbortTask, 0, tags[0])
		if err != nil {
			t.Errorf("ABORT TASK: %v", err)
		}
		tmf <- code
	}()
	// The SCSI core completes the abort once the backstore I/O returns.
	waitTMFs(t, lt, 1)
	disk.open()
	if code := <-tmf; code != srp.TMComplete {
		t.Fatalf("ABORT TASK: %s", code)
	}
	for _, r := range collect(t, res, 2) {
		switch {
		case r.c.Tag == tags[0] && !errors.Is(r.err, initiator.ErrAborted):
			t.Errorf("aborted command: %v, want ErrAborted", r.err)
		case r.c.Tag == tags[1] && r.err != nil:
			t.Errorf("other command: %v", r.err)
		}
	}
	// The aborted command's credit comes back (TMF response or CRED_REQ).
	waitCredits(t, s, 0, 8)
	// Aborting a task that does not exist completes (SAM-5).
	if code, err := s.TaskManagement(testCtx(t), 0, srp.TskAbortTask, 0, 0xdead); err != nil || code != srp.TMComplete {
		t.Errorf("ABORT TASK of no task: %s, %v", code, err)
	}
}

func TestAbortTaskSetAndLUNReset(t *testing.T) {
	t.Parallel()
	for _, fn := range []srp.TaskFunc{srp.TskAbortTaskSet, srp.TskLUNReset, srp.TskClearTaskSet} {
		t.Run(fn.String(), func(t *testing.T) {
			disk := newTestDisk(t, 1<<20)
			lt := startTarget(t, Config{QueueDepth: 6}, PortConfig{}, disk)
			s := login(t, lt, initiator.Config{})
			clearUA(t, s)
			disk.hold()
			_, res := startReads(t, s, 0, 4)
			disk.waitBlocked(t, 4)
			waitCredits(t, s, 0, 2)
			tmf := make(chan srp.TMRespCode, 1)
			go func() {
				code, err := s.TaskManagement(context.Background(), 0, fn, 0, 0)
				if err != nil {
					t.Errorf("%s: %v", fn, err)
				}
				tmf <- code
			}()
			waitTMFs(t, lt, 1)
			disk.open()
			if code := <-tmf; code != srp.TMComplete {
				t.Fatalf("%s: %s", fn, code)
			}
			for _, r := range collect(t, res, 4) {
				if !errors.Is(r.err, initiator.ErrAborted) {
					t.Errorf("command: %v, want ErrAborted", r.err)
				}
			}
			waitCredits(t, s, 0, 6)
			if fn == srp.TskLUNReset {
				// The reset leaves a unit attention, which Exec reports.
				c := &initiator.Command{CDB: make([]byte, 6)}
				var se *initiator.SCSIError
				if err := s.Exec(testCtx(t), 0, c); !errors.As(err, &se) || se.Parsed.Key != scsi.KeyUnitAttention || se.Parsed.ASC != scsi.ASCBusDeviceResetOccurred {
					t.Errorf("TEST UNIT READY after the reset: %v, want BUS DEVICE RESET unit attention", err)
				}
			}
		})
	}
}

// TestClearTaskSetOtherNexus: CLEAR TASK SET from one initiator aborts
// another initiator's command with TASK ABORTED (TAS), including one still
// waiting for its data-out RDMA Read... here, one held in the backstore.
func TestClearTaskSetOtherNexus(t *testing.T) {
	t.Parallel()
	disk := newTestDisk(t, 1<<20)
	lt := startTarget(t, Config{QueueDepth: 8}, PortConfig{}, disk)
	a := login(t, lt, initiator.Config{InitiatorPortID: srp.MakePortID(1, 0xa)})
	b := login(t, lt, initiator.Config{InitiatorPortID: srp.MakePortID(1, 0xb)})
	clearUA(t, b)
	disk.hold()
	_, res := startReads(t, b, 0, 1)
	disk.waitBlocked(t, 1)
	tmf := make(chan srp.TMRespCode, 1)
	go func() {
		code, _ := a.TaskManagement(context.Background(), 0, srp.TskClearTaskSet, 0, 0)
		tmf <- code
	}()
	waitTMFs(t, lt, 1)
	disk.open()
	if code := <-tmf; code != srp.TMComplete {
		t.Fatalf("CLEAR TASK SET: %s", code)
	}
	r := collect(t, res, 1)[0]
	if r.c.Status != scsi.StatusTaskAborted {
		t.Errorf("other nexus's command: status %s (%v), want TASK ABORTED", r.c.Status, r.err)
	}
	waitCredits(t, b, 0, 8)
}

func TestTaskManagementRefused(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, Config{}, PortConfig{}, newTestDisk(t, 1<<20))
	s := login(t, lt, initiator.Config{})
	for _, tc := range []struct {
		fn   srp.TaskFunc
		lun  uint64
		want srp.TMRespCode
	}{
		{srp.TskClearACA, 0, srp.TMNotSupported},
		{0x20, 0, srp.TMNotSupported},
		{srp.TskAbortTaskSet, 77, srp.TMIncorrectLUN},
		{srp.TskLUNReset, 77, srp.TMIncorrectLUN},
	} {
		code, err := s.TaskManagement(testCtx(t), 0, tc.fn, tc.lun, 0)
		if err != nil || code != tc.want {
			t.Errorf("%s on LUN %d: %s, %v; want %s", tc.fn, tc.lun, code, err, tc.want)
		}
	}
	waitCredits(t, s, 0, DefaultQueueDepth)
}

// waitTMFs waits until the target received n task management IUs (the
// initiator may take long to send one on a loaded machine), then leaves
// their goroutines a moment to reach the SCSI core.
func waitTMFs(t *testing.T, lt *loopTarget, n uint64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for lt.t.Stats().TaskMgmt < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d task management IUs received, want %d", lt.t.Stats().TaskMgmt, n)
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
}
