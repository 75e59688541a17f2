package target

import (
	"context"
	"errors"
	"github.com/rdisk/rdisk/srp"
	"github.com/rdisk/rdisk/srp/initiator"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/scsi"
)

// TestCreditExhaustionAndRefill: with 4 credits the initiator keeps 3
// commands in flight (one credit in reserve for task management); the
// others wait in Submit until responses bring credits back.
func TestCreditExhaustionAndRefill(t *testing.T) {
	t.Parallel()
	disk := newTestDisk(t, 1<<20)
	lt := startTarget(t, Config{QueueDepth: 4}, PortConfig{}, disk)
	d := openDev(t, lt, initiator.Config{QueueDepth: 32})
	s := d.Session()
	if got := d.Info().QueueDepth; got != 3 {
		t.Fatalf("queue depth %d with 4 credits, want 3", got)
	}
	buf, err := d.AllocBuffer(16 * 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Release()
	want := randBytes(16*4096, 9)
	copy(buf.Bytes(), want)
	disk.hold()
	const n = 16
	done := make(chan *blockdev.Request, n)
	reqs := make([]blockdev.Request, n)
	var submitted sync.WaitGroup
	for i := range reqs {
		reqs[i] = blockdev.Request{Op: blockdev.OpWrite, Offset: int64(i) * 4096, Length: 4096, Buf: buf, BufOff: i * 4096, C: done}
		submitted.Add(1)
		go func() {
			defer submitted.Done()
			if err := d.Submit(&reqs[i]); err != nil {
				t.Errorf("Submit: %v", err)
			}
		}()
	}
	disk.waitBlocked(t, 3)
	time.Sleep(50 * time.Millisecond)
	if b := disk.blocked.Load(); b != 3 {
		t.Errorf("%d commands reached the disk with 4 credits, want 3", b)
	}
	if c := s.Credits(0); c != 1 {
		t.Errorf("%d credits left, want the 1 kept for task management", c)
	}
	disk.open()
	for range n {
		select {
		case r := <-done:
			if r.Err != nil {
				t.Errorf("write: %v", r.Err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("writes did not complete")
		}
	}
	submitted.Wait()
	if p := disk.peak.Load(); p > 3 {
		t.Errorf("%d commands at the disk at once, want at most 3", p)
	}
	waitCredits(t, s, 0, 4)
	got := make([]byte, len(want))
	if err := ioAt(t, d, blockdev.OpRead, got, 0, 0); err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("read back differs")
	}
}

// TestCredReq: a LOGICAL UNIT RESET on channel 0 aborts the commands of
// channel 1 (same I_T nexus). No response carries their credits on channel
// 1, so the target sends SRP_CRED_REQ there.
func TestCredReq(t *testing.T) {
	t.Parallel()
	disk := newTestDisk(t, 1<<20)
	lt := startTarget(t, Config{QueueDepth: 4}, PortConfig{}, disk)
	s := login(t, lt, initiator.Config{Channels: 2})
	clearUA(t, s)
	disk.hold()
	_, res := startReads(t, s, 1, 3)
	disk.waitBlocked(t, 3)
	waitCredits(t, s, 1, 1)
	tmf := make(chan srp.TMRespCode, 1)
	go func() {
		code, err := s.TaskManagement(context.Background(), 0, srp.TskLUNReset, 0, 0)
		if err != nil {
			t.Errorf("LUN RESET: %v", err)
		}
		tmf <- code
	}()
	time.Sleep(50 * time.Millisecond)
	disk.open()
	if code := <-tmf; code != srp.TMComplete {
		t.Fatalf("LUN RESET: %s", code)
	}
	for _, r := range collect(t, res, 3) {
		if !errors.Is(r.err, initiator.ErrAborted) {
			t.Errorf("command on channel 1: %v, want ErrAborted", r.err)
		}
	}
	waitCredits(t, s, 1, 4)
	waitCredits(t, s, 0, 4)
	if _, cr := s.Events(); cr == 0 {
		t.Errorf("no SRP_CRED_REQ received")
	}
	if st := lt.t.Stats(); st.CredReqs == 0 {
		t.Errorf("target stats count no SRP_CRED_REQ: %+v", st)
	}
	// The channel works with its refilled credits.
	clearUA(t, s)
	_, res = startReads(t, s, 1, 3)
	for _, r := range collect(t, res, 3) {
		if r.err != nil {
			t.Errorf("read after the refill: %v", r.err)
		}
	}
}

// TestRawCredits checks the exact request limit deltas on the wire: the
// login grants the queue depth, each response returns one credit, and the
// credits of silently aborted commands come back with the task management
// response or SRP_CRED_REQ, which the target repeats only after SRP_CRED_RSP.
func TestRawCredits(t *testing.T) {
	t.Parallel()
	disk := newTestDisk(t, 1<<20)
	lt := startTarget(t, Config{QueueDepth: 4}, PortConfig{}, disk)
	c, err := rawLogin(t, lt.addr, loginPD(rawLoginFields(srp.MakePortID(0xc, 0xc))))
	if err != nil {
		t.Fatal(err)
	}
	lr, _ := srp.ParseLoginRsp(c.reply)
	credits := lr.ReqLimDelta
	if credits != 4 {
		t.Fatalf("login granted %d credits, want 4", credits)
	}
	cmd := func(tag uint64, cdb []byte, in uint32) []byte {
		b := make([]byte, srp.CmdSize+srp.DirectDescSize)
		f := srp.CmdFields{Tag: tag}
		copy(f.CDB[:], cdb)
		if in > 0 {
			f.DataInFmt = srp.DescDirect
			srp.DirectDesc{VA: c.mr.VA() + uint64(rawRecvs*rawRecvLen), Key: c.mr.RKey(), Len: in}.Put(b[srp.CmdSize:])
		}
		srp.Cmd(b).Encode(&f)
		credits--
		return b
	}
	expectRsp := func(tag uint64) srp.Rsp {
		t.Helper()
		for {
			iu := c.recv(10 * time.Second)
			if iu == nil {
				t.Fatalf("no response for tag %#x", tag)
			}
			switch srp.Opcode(iu[0]) {
			case srp.OpRsp:
				r, err := srp.ParseRsp(iu)
				if err != nil {
					t.Fatal(err)
				}
				credits += r.Fields().ReqLimDelta
				if r.Fields().Tag != tag {
					t.Fatalf("response tag %#x, want %#x", r.Fields().Tag, tag)
				}
				return r
			case srp.OpCredReq:
				f, _ := srp.ParseCredReq(iu)
				credits += f.ReqLimDelta
				b := make([]byte, srp.CredRspSize)
				srp.EncodeInitiatorRsp(b, srp.OpCredRsp, f.Tag)
				c.send(b)
			default:
				t.Fatalf("unexpected %s", srp.Opcode(iu[0]))
			}
		}
	}
	c.send(cmd(1, make([]byte, 6), 0)) // TEST UNIT READY: the power-on unit attention
	if r := expectRsp(1); r.Fields().Status != uint8(scsi.StatusCheckCondition) || r.Fields().ReqLimDelta != 1 {
		t.Errorf("first response %+v", r.Fields())
	}
	c.send(cmd(2, make([]byte, 6), 0))
	if r := expectRsp(2); r.Fields().Status != 0 || r.Fields().ReqLimDelta != 1 {
		t.Errorf("second response %+v", r.Fields())
	}
	disk.hold()
	for i := range 3 {
		c.send(cmd(uint64(10+i), read10(0, 1), 512))
	}
	disk.waitBlocked(t, 3)
	tm := make([]byte, srp.TskMgmtSize)
	srp.EncodeTskMgmt(tm, &srp.TskMgmtFields{Tag: 99, Func: srp.TskAbortTaskSet})
	credits--
	if credits != 0 {
		t.Fatalf("initiator side credit count %d, want 0", credits)
	}
	c.send(tm)
	time.Sleep(50 * time.Millisecond)
	disk.open()
	r := expectRsp(99)
	if rd := r.RespData(); len(rd) != 4 || rd[3] != byte(srp.TMComplete) {
		t.Errorf("task management response data %x", rd)
	}
	// Whatever the target did not return with the response it returns
	// with SRP_CRED_REQ: all four credits come back.
	deadline := time.Now().Add(5 * time.Second)
	for credits < 4 && time.Now().Before(deadline) {
		iu := c.recv(time.Second)
		if iu == nil || srp.Opcode(iu[0]) != srp.OpCredReq {
			continue
		}
		f, _ := srp.ParseCredReq(iu)
		credits += f.ReqLimDelta
		b := make([]byte, srp.CredRspSize)
		srp.EncodeInitiatorRsp(b, srp.OpCredRsp, f.Tag)
		c.send(b)
	}
	if credits != 4 {
		t.Errorf("%d credits after the abort, want 4", credits)
	}
}
