package initiator

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/scsi"
)

// A target may answer a write before it received all of its data: with a
// CHECK CONDITION after the command PDU (and its immediate data) while
// unsolicited Data-Out is still to come, or after an R2T it sent, while the
// Data-Out it asked for is still being sent (RFC 7143 sections 11.4, 11.7;
// the initiator may stop sending). The initiator must not hand the slot (its
// ITT, its data pointer) or the caller's buffer back before its sender is
// done with them: else a new command reusing the slot has its data sent
// under the old command's Data-Out, or the old ITT carries the wrong bytes.
//
// earlyTarget is a scripted target on one end of a net.Pipe (every write
// blocks until the initiator reads it, and every initiator write until the
// target reads it, so the test decides who waits). It answers the first
// command as soon as it is read, after an R2T for all of its data when
// r2t, then stops reading until resume is closed; later commands it serves
// fully (unsolicited data, then one R2T for the rest, then GOOD). It records
// every Data-Out PDU that names an ITT it has not seen a command for, that
// carries other bytes than its command's pattern, or a wrong TTT.
type earlyTarget struct {
	nc        net.Conn
	r2t       bool
	delay     time.Duration // between the R2T and the response
	responded chan struct{} // closed when the first command was answered
	resume    chan struct{} // the target reads again once closed

	mu   sync.Mutex
	errs []string
	outs int // Data-Out PDUs read
}

type earlyCmd struct {
	n        int // order of arrival: its pattern byte is 0xa0+n
	edtl     uint32
	got      uint32
	ttt      uint32 // TTT of the R2T it was sent, ReservedTag before
	answered bool
}

func (et *earlyTarget) errorf(format string, a ...any) {
	et.mu.Lock()
	et.errs = append(et.errs, fmt.Sprintf(format, a...))
	et.mu.Unlock()
}

func (et *earlyTarget) serve(st iser.Settings) {
	defer et.nc.Close()
	br := bufio.NewReaderSize(et.nc, 64<<10)
	r := iser.NewReader(br)
	bw := bufio.NewWriter(et.nc)
	w := iser.NewWriter(bw)
	tl, err := iser.NewTargetLogin(&iser.TargetConfig{Transport: iser.TransportTCP, Settings: st, QueueDepth: 1,
		Resolve: func(iser.LoginIdentity) (iser.TargetInfo, error) {
			return iser.TargetInfo{Name: "iqn.2026-11.io.rdisk:early"}, nil
		},
	}, 1)
	if err != nil {
		et.errorf("login engine: %v", err)
		return
	}
	hdr := make([]byte, iser.MaxHeaderLength)
	data := make([]byte, 1<<20)
	rsp := make([]byte, iser.BHSSize)
	rspData := make([]byte, iser.DefaultRecvDataSegmentLength)
	for {
		p, err := r.ReadPDU(hdr, data)
		if err != nil {
			et.errorf("login: %v", err)
			return
		}
		n, ls, _ := tl.Step(p.BHS, p.Data, rsp, rspData)
		if err := w.WritePDU(rsp, nil, rspData[:n]); err != nil || bw.Flush() != nil || ls != iser.LoginDone && ls != iser.LoginInProgress {
			et.errorf("login failed")
			return
		}
		if ls == iser.LoginDone {
			break
		}
	}
	ls, _ := tl.Session()
	r.SetMaxRecvDataSegmentLength(int(ls.Params.MaxRecvDataSegmentLength))
	statSN, expCmdSN := ls.StatSN, ls.CmdWindow.ExpCmdSN
	cmds := map[uint32]*earlyCmd{}
	var out [iser.BHSSize]byte
	respond := func(itt uint32, status scsi.Status) error {
		var sense []byte
		if status != scsi.StatusGood {
			sense = []byte{0, 18, 0x70, 0, 0x05, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x24, 0, 0, 0, 0, 0}
		}
		iser.SCSIResponse(out[:]).Encode(&iser.SCSIResponseFields{Response: iser.ResponseCompleted, Status: uint8(status),
			ITT: itt, StatSN: statSN, ExpCmdSN: expCmdSN, MaxCmdSN: expCmdSN})
		statSN++
		cmds[itt].answered = true
		return w.WritePDU(out[:], nil, sense)
	}
	r2t := func(itt uint32, c *earlyCmd, off uint32) error {
		c.ttt = 0x100 + uint32(c.n)
		iser.R2T(out[:]).Encode(&iser.R2TFields{ITT: itt, TTT: c.ttt, StatSN: statSN, ExpCmdSN: expCmdSN, MaxCmdSN: expCmdSN,
			BufferOffset: off, DesiredDataTransferLength: c.edtl - off})
		return w.WritePDU(out[:], nil, nil)
	}
	// more serves a later command once its unsolicited data is in.
	more := func(itt uint32, c *earlyCmd) error {
		if c.got < c.edtl {
			return r2t(itt, c, c.got)
		}
		return respond(itt, scsi.StatusGood)
	}
	check := func(itt uint32, c *earlyCmd, off uint32, b []byte) {
		if uint64(off)+uint64(len(b)) > uint64(c.edtl) {
			et.errorf("ITT %#x: data at %d+%d beyond %d", itt, off, len(b), c.edtl)
			return
		}
		for i, v := range b {
			if v != byte(0xa0+c.n) {
				et.errorf("ITT %#x (command %d): byte %d is %#x, want %#x", itt, c.n, int(off)+i, v, 0xa0+c.n)
				return
			}
		}
	}
	for {
		p, err := r.ReadPDU(hdr, data)
		if err != nil {
			return // the initiator closed
		}
		h := p.BHS
		itt := h.ITT()
		switch h.Opcode() {
		case iser.OpSCSICommand:
			sc := iser.SCSICommand(h)
			expCmdSN = sc.CmdSN() + 1
			c := &earlyCmd{n: len(cmds), edtl: sc.ExpectedDataTransferLength(), ttt: iser.ReservedTag}
			if cmds[itt] != nil {
				et.errorf("ITT %#x used again", itt)
			}
			cmds[itt] = c
			check(itt, c, 0, p.Data)
			c.got = uint32(len(p.Data))
			if c.n == 0 {
				if et.r2t {
					err = r2t(itt, c, c.got)
					if err == nil && et.delay > 0 {
						// Let the sender start on the Data-Out:
						// it blocks in the middle of it.
						err = bw.Flush()
						time.Sleep(et.delay)
					}
				}
				if err == nil {
					err = respond(itt, scsi.StatusCheckCondition)
				}
				if err == nil {
					err = bw.Flush()
				}
				close(et.responded)
				select {
				case <-et.resume:
				case <-time.After(10 * time.Second):
					et.errorf("not resumed")
				}
			} else if h.Final() {
				err = more(itt, c)
			}
		case iser.OpDataOut:
			et.mu.Lock()
			et.outs++
			et.mu.Unlock()
			d := iser.DataOut(h)
			c := cmds[itt]
			if c == nil {
				et.errorf("Data-Out (offset %d, TTT %#x) for ITT %#x before its command", d.BufferOffset(), d.TTT(), itt)
				continue
			}
			if d.TTT() != c.ttt && !(d.TTT() == iser.ReservedTag && c.ttt == iser.ReservedTag) {
				et.errorf("ITT %#x: Data-Out with TTT %#x, want %#x", itt, d.TTT(), c.ttt)
			}
			check(itt, c, d.BufferOffset(), p.Data)
			c.got = max(c.got, d.BufferOffset()+uint32(len(p.Data)))
			if c.answered || !h.Final() {
				continue
			}
			if d.TTT() == iser.ReservedTag {
				err = more(itt, c)
			} else if c.got == c.edtl {
				err = respond(itt, scsi.StatusGood)
			}
		default:
			et.errorf("unexpected %v", h.Opcode())
		}
		if err == nil {
			err = bw.Flush()
		}
		if err != nil {
			return
		}
	}
}

func TestEarlyResponse(t *testing.T) {
	for _, tc := range []struct {
		name  string
		r2t   bool // solicited data (InitialR2T=Yes, ImmediateData=No)
		delay time.Duration
	}{
		{"unsolicited", false, 0},
		{"r2t-queued", true, 0},
		{"r2t-sending", true, 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) { testEarlyResponse(t, tc.r2t, tc.delay) })
	}
}

func testEarlyResponse(t *testing.T, r2t bool, delay time.Duration) {
	const size = 1 << 20
	st := iser.DefaultSettings()
	st.MaxBurstLength = size
	st.InitialR2T, st.ImmediateData = r2t, !r2t
	st.MaxRecvDataSegmentLength = 8192
	cn, tn := net.Pipe()
	et := &earlyTarget{nc: tn, r2t: r2t, delay: delay, responded: make(chan struct{}), resume: make(chan struct{})}
	tdone := make(chan struct{})
	go func() { defer close(tdone); et.serve(st) }()
	defer func() { <-tdone }()

	cfg := Config{InitiatorName: "iqn.2026-11.io.rdisk:initiator", QueueDepth: 1}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := startTCP(ctx, cn, "pipe", &iser.InitiatorConfig{Transport: iser.TransportTCP, Settings: cfg.settings(),
		InitiatorName: cfg.InitiatorName, TargetName: "iqn.2026-11.io.rdisk:early", SessionType: iser.SessionNormal, ISID: cfg.ISID}, &cfg)
	if err != nil {
		cn.Close()
		t.Fatal(err)
	}
	defer s.Close()
	if s.depth != 1 || s.params.InitialR2T != r2t || s.params.ImmediateData == r2t || s.params.MaxBurstLength != size {
		t.Fatalf("depth %d, params %+v", s.depth, s.params)
	}

	write := func(pattern byte) (*Command, chan error) {
		data := make([]byte, size)
		for i := range data {
			data[i] = pattern
		}
		cdb := []byte{0x2a, 0, 0, 0, 0, 0, 0, 0, 0, 0}
		binary.BigEndian.PutUint16(cdb[7:], size/512)
		cmd := &Command{CDB: cdb, DataOut: data}
		done := make(chan error, 1)
		go func() { done <- s.Execute(ctx, cmd) }()
		return cmd, done
	}
	cmd1, done1 := write(0xa0)
	<-et.responded
	var cmd2 *Command
	var done2 chan error
	select {
	case err := <-done1:
		// The first write completed while the target has not read its
		// Data-Out yet: its slot is free again, and the second write takes
		// it (queue depth 1) while the sender may still be sending the
		// first one's data from it.
		if err != nil || cmd1.Status != scsi.StatusCheckCondition {
			t.Fatalf("first write: %v, status %v", err, cmd1.Status)
		}
		cmd2, done2 = write(0xa1)
		time.Sleep(100 * time.Millisecond)
		close(et.resume)
	case <-time.After(300 * time.Millisecond):
		// The initiator waits for its sender: let the target read.
		close(et.resume)
		if err := <-done1; err != nil || cmd1.Status != scsi.StatusCheckCondition {
			t.Fatalf("first write: %v, status %v", err, cmd1.Status)
		}
		cmd2, done2 = write(0xa1)
	}
	if err := <-done2; err != nil || cmd2.Status != scsi.StatusGood {
		t.Fatalf("second write: %v, status %v", err, cmd2.Status)
	}
	s.Close()
	<-tdone
	for _, e := range et.errs {
		t.Error(e)
	}
	t.Logf("%d Data-Out PDUs", et.outs)
}
