package target

import (
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/iser/initiator"
	"github.com/rdisk/rdisk/scsi"
)

// TestISERAcceptPrivateData: a connection request without iSER CM private
// data is accepted without Send with Invalidate (Linux isert leaves
// snd_w_inv off when there is none); one with the flags byte, however
// short or padded, is read by it.
func TestISERAcceptPrivateData(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		pd      []byte
		want    bool // Send with Invalidate used
		wantAcc uint8
	}{
		{"none", nil, false, iser.ISERTZBVANotUsed | iser.ISERTSendWithInvNotUsed},
		{"zbva only", []byte{iser.ISERZBVANotSupported, 0, 0, 0}, true, iser.ISERTZBVANotUsed},
		{"short", []byte{iser.ISERZBVANotSupported}, true, iser.ISERTZBVANotUsed},
		{"no send with invalidate", []byte{iser.ISERZBVANotSupported | iser.ISERSendWithInvNotSupported, 0, 0, 0}, false,
			iser.ISERTZBVANotUsed | iser.ISERTSendWithInvNotUsed},
		{"IB padded", append([]byte{iser.ISERZBVANotSupported, 0, 0, 0}, make([]byte, 52)...), true, iser.ISERTZBVANotUsed},
	} {
		acc, inv := iserAccept(tc.pd, true)
		if inv != tc.want || acc.Flags != tc.wantAcc {
			t.Errorf("%s: send with invalidate %v, accept flags %#x; want %v, %#x", tc.name, inv, acc.Flags, tc.want, tc.wantAcc)
		}
		if acc, inv := iserAccept(tc.pd, false); inv || acc.Flags&iser.ISERTSendWithInvNotUsed == 0 {
			t.Errorf("%s: NoSendWithInvalidate: send with invalidate %v, flags %#x", tc.name, inv, acc.Flags)
		}
	}
}

// rawConn is the initiator's end of a logged-in iSCSI/TCP connection
// that speaks PDUs itself.
type rawConn struct {
	t    *testing.T
	c    net.Conn
	r    *iser.Reader
	w    *iser.Writer
	ls   iser.Session
	done chan struct{}
	sn   uint32
	hdr  []byte
	data []byte
}

func newRawConn(t *testing.T, tg *Target, edit func(*iser.InitiatorConfig)) *rawConn {
	t.Helper()
	c, r, w, ls, done := loginPipeWith(t, tg, false, edit)
	t.Cleanup(func() { c.Close(); <-done })
	return &rawConn{t: t, c: c, r: r, w: w, ls: ls, done: done, sn: ls.CmdSN,
		hdr: make([]byte, iser.MaxHeaderLength), data: make([]byte, 1<<18)}
}

// write sends a PDU (its lengths set from data).
func (rc *rawConn) write(h []byte, data []byte) {
	rc.t.Helper()
	rc.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if err := rc.w.WritePDU(h, nil, data); err != nil {
		rc.t.Fatalf("writing %v: %v", iser.BHS(h).Opcode(), err)
	}
}

// read reads the next PDU from the target.
func (rc *rawConn) read() iser.PDU {
	rc.t.Helper()
	rc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	p, err := rc.r.ReadPDU(rc.hdr, rc.data)
	if err != nil {
		rc.t.Fatalf("reading a PDU: %v", err)
	}
	return p
}

// write10 sends WRITE(10) of exp bytes at LBA 0 with the given immediate
// data; it returns the ITT.
func (rc *rawConn) write10(exp uint32, imm []byte, final bool) uint32 {
	rc.t.Helper()
	h := make([]byte, iser.BHSSize)
	var cdb [16]byte
	copy(cdb[:], []byte{scsi.OpWrite10, 0, 0, 0, 0, 0, 0, byte(exp / 512 >> 8), byte(exp / 512), 0})
	itt := rc.sn + 0x100
	iser.SCSICommand(h).Encode(&iser.SCSICommandFields{Final: final, Write: true, Attr: iser.AttrSimple, LUN: 0,
		ITT: itt, ExpectedDataTransferLength: exp, CmdSN: rc.sn, ExpStatSN: rc.ls.StatSN, CDB: cdb})
	rc.sn++
	rc.write(h, imm)
	return itt
}

// ping sends a NOP-Out ping and waits for its NOP-In: the connection is
// alive and in step.
func (rc *rawConn) ping(itt uint32) {
	rc.t.Helper()
	h := make([]byte, iser.BHSSize)
	iser.NOPOut(h).Encode(&iser.NOPOutFields{Immediate: true, ITT: itt, TTT: iser.ReservedTag, CmdSN: rc.sn})
	rc.write(h, nil)
	for {
		p := rc.read()
		if p.BHS.Opcode() == iser.OpNOPIn && p.BHS.ITT() == itt {
			return
		}
	}
}

// expectReject reads a Reject of the PDU whose ITT is itt with reason.
func (rc *rawConn) expectReject(itt uint32, reason iser.RejectReason) {
	rc.t.Helper()
	p := rc.read()
	if p.BHS.Opcode() != iser.OpReject {
		rc.t.Fatalf("got %v (itt %#x), want a Reject", p.BHS.Opcode(), p.BHS.ITT())
	}
	if got := iser.Reject(p.BHS).Reason(); got != reason {
		rc.t.Fatalf("Reject reason %v, want %v", got, reason)
	}
	if len(p.Data) < iser.BHSSize || iser.BHS(p.Data).ITT() != itt {
		rc.t.Fatalf("Reject carries %d bytes of header, want the rejected PDU's (itt %#x)", len(p.Data), itt)
	}
}

// TestImmediateDataChecks: immediate data is checked as LIO's
// iscsit_setup_scsi_cmd checks it, each refused with its Reject and the
// connection kept.
func TestImmediateDataChecks(t *testing.T) {
	t.Parallel()
	set := iser.DefaultSettings()
	set.FirstBurstLength = 512
	tg := newTestTarget(t, func(c *Config) { c.Settings = &set })
	rc := newRawConn(t, tg, func(c *iser.InitiatorConfig) { c.Settings.FirstBurstLength = 512 })
	if rc.ls.Params.FirstBurstLength != 512 || !rc.ls.Params.ImmediateData {
		t.Fatalf("negotiated FirstBurstLength %d, ImmediateData %v", rc.ls.Params.FirstBurstLength, rc.ls.Params.ImmediateData)
	}
	// 64 KiB of immediate data with FirstBurstLength=512: Invalid PDU
	// field, as LIO (ISCSI_REASON_BOOKMARK_INVALID).
	itt := rc.write10(64<<10, make([]byte, 64<<10), true)
	rc.expectReject(itt, iser.RejectInvalidPDUField)
	rc.sn-- // the rejected command's CmdSN was not consumed
	rc.ping(1)
	// Immediate data beyond the expected data transfer length.
	itt = rc.write10(256, make([]byte, 512), true)
	rc.expectReject(itt, iser.RejectProtocolError)
	rc.sn--
	// All the data immediate but F clear.
	itt = rc.write10(512, make([]byte, 512), false)
	rc.expectReject(itt, iser.RejectProtocolError)
	rc.sn--
	rc.ping(2)
	// Within FirstBurstLength: GOOD (after the power-on unit attention).
	itt = rc.write10(512, make([]byte, 512), true)
	p := rc.read()
	if p.BHS.Opcode() == iser.OpSCSIResponse && iser.SCSIResponse(p.BHS).Status() == uint8(scsi.StatusCheckCondition) {
		itt = rc.write10(512, make([]byte, 512), true)
		p = rc.read()
	}
	if p.BHS.Opcode() != iser.OpSCSIResponse || p.BHS.ITT() != itt || iser.SCSIResponse(p.BHS).Status() != uint8(scsi.StatusGood) {
		t.Fatalf("write within FirstBurstLength: %v itt %#x status %#x sense %x", p.BHS.Opcode(), p.BHS.ITT(), iser.SCSIResponse(p.BHS).Status(), p.Data)
	}
}

// TestImmediateDataNotNegotiated: immediate data with ImmediateData=No
// is a protocol error (Reject), the connection stays.
func TestImmediateDataNotNegotiated(t *testing.T) {
	t.Parallel()
	tg := newTestTarget(t, nil)
	rc := newRawConn(t, tg, func(c *iser.InitiatorConfig) { c.Settings.ImmediateData = false })
	if rc.ls.Params.ImmediateData {
		t.Fatal("ImmediateData negotiated Yes")
	}
	itt := rc.write10(512, make([]byte, 512), true)
	rc.expectReject(itt, iser.RejectProtocolError)
	rc.sn--
	rc.ping(1)
}

// TestUnsolicitedBeyondFirstBurst: unsolicited Data-Out past
// FirstBurstLength fails the command with CHECK CONDITION, ABORTED
// COMMAND / 0x0c0d, as LIO's iscsit_check_unsolicited_dataout.
func TestUnsolicitedBeyondFirstBurst(t *testing.T) {
	t.Parallel()
	set := iser.DefaultSettings()
	set.FirstBurstLength = 512
	tg := newTestTarget(t, func(c *Config) { c.Settings = &set })
	rc := newRawConn(t, tg, func(c *iser.InitiatorConfig) { c.Settings.FirstBurstLength = 512; c.Settings.InitialR2T = false })
	if rc.ls.Params.InitialR2T {
		t.Fatal("InitialR2T negotiated Yes")
	}
	itt := rc.write10(4096, make([]byte, 256), false)
	h := make([]byte, iser.BHSSize)
	iser.DataOut(h).Encode(&iser.DataOutFields{Final: true, ITT: itt, TTT: iser.ReservedTag, BufferOffset: 256})
	rc.write(h, make([]byte, 1024))
	for {
		p := rc.read()
		if p.BHS.Opcode() == iser.OpR2T {
			t.Fatal("R2T for a command whose unsolicited data overran FirstBurstLength")
		}
		if p.BHS.Opcode() != iser.OpSCSIResponse {
			continue
		}
		if st := iser.SCSIResponse(p.BHS).Status(); st != uint8(scsi.StatusCheckCondition) || p.BHS.ITT() != itt {
			t.Fatalf("status %#x itt %#x, want CHECK CONDITION", st, p.BHS.ITT())
		}
		sense := p.Data[2:]
		if len(sense) < 14 || sense[2]&0xf != byte(scsi.KeyAbortedCommand) || sense[12] != 0x0c || sense[13] != 0x0d {
			t.Fatalf("sense %x, want ABORTED COMMAND 0c/0d", sense)
		}
		break
	}
	rc.ping(1)
}

// expectClosed waits for the target to end the connection: the reads
// meet EOF (what arrives before it is discarded), within bound.
func (rc *rawConn) expectClosed(bound time.Duration) {
	rc.t.Helper()
	rc.c.SetReadDeadline(time.Now().Add(bound))
	for {
		if _, err := rc.r.ReadPDU(rc.hdr, rc.data); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				rc.t.Fatalf("the connection is still open after %v", bound)
			}
			break
		}
	}
	select {
	case <-rc.done:
	case <-time.After(bound):
		rc.t.Fatalf("the target did not end the connection within %v", bound)
	}
}

// TestRejectBeforeClose: a protocol error that ends the connection is
// answered with a Reject carrying the PDU's header first (RFC 7143
// section 7.2), then the connection closes.
func TestRejectBeforeClose(t *testing.T) {
	t.Parallel()
	tg := newTestTarget(t, nil)
	t.Run("data segment too long", func(t *testing.T) {
		rc := newRawConn(t, tg, nil)
		h := make([]byte, iser.BHSSize)
		iser.NOPOut(h).Encode(&iser.NOPOutFields{Immediate: true, ITT: 9, TTT: iser.ReservedTag, CmdSN: rc.sn})
		iser.BHS(h).SetLengths(0, int(rc.ls.Params.MaxRecvDataSegmentLength)+4)
		rc.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := rc.c.Write(h); err != nil {
			t.Fatal(err)
		}
		rc.expectReject(9, iser.RejectProtocolError)
		rc.expectClosed(10 * time.Second)
	})
	t.Run("data-out beyond the R2T", func(t *testing.T) {
		rc := newRawConn(t, tg, func(c *iser.InitiatorConfig) { c.Settings.InitialR2T = true })
		itt := rc.write10(512, nil, true)
		p := rc.read()
		if p.BHS.Opcode() != iser.OpR2T {
			t.Fatalf("got %v, want an R2T", p.BHS.Opcode())
		}
		ttt := iser.R2T(p.BHS).TTT()
		h := make([]byte, iser.BHSSize)
		iser.DataOut(h).Encode(&iser.DataOutFields{Final: true, ITT: itt, TTT: ttt})
		rc.write(h, make([]byte, 1024))
		rc.expectReject(itt, iser.RejectProtocolError)
		rc.expectClosed(10 * time.Second)
	})
	if n := tg.Stats().SessionsClosed["protocol_error"]; n != 2 {
		t.Errorf("%d sessions closed for protocol errors, want 2", n)
	}
}

// TestNopInPing: an idle connection is pinged (NOP-In, ITT 0xffffffff,
// a TTT of the target's, StatSN not advanced); echoed, it stays up and
// is pinged again; unanswered, it is dropped (session end "timeout").
func TestNopInPing(t *testing.T) {
	t.Parallel()
	ping := func(rc *rawConn) iser.PDU {
		t.Helper()
		p := rc.read()
		if p.BHS.Opcode() != iser.OpNOPIn || p.BHS.ITT() != iser.ReservedTag {
			t.Fatalf("got %v itt %#x, want a NOP-In ping", p.BHS.Opcode(), p.BHS.ITT())
		}
		if ttt := iser.NOPIn(p.BHS).TTT(); ttt == iser.ReservedTag {
			t.Fatalf("ping with TTT %#x: no response asked for", ttt)
		}
		return p
	}
	t.Run("answered", func(t *testing.T) {
		t.Parallel()
		tg := newTestTarget(t, func(c *Config) { c.NopInInterval, c.NopInTimeout = 20*time.Millisecond, time.Minute })
		rc := newRawConn(t, tg, nil)
		var last uint32
		for i := range 3 {
			p := ping(rc)
			ttt := iser.NOPIn(p.BHS).TTT()
			if i > 0 && ttt == last {
				t.Fatalf("ping %d reuses TTT %#x", i, ttt)
			}
			last = ttt
			if sn := binary.BigEndian.Uint32(p.BHS[iser.OffsetStatSN:]); sn != rc.ls.StatSN {
				t.Fatalf("ping %d: StatSN %d, want %d (a ping does not advance it)", i, sn, rc.ls.StatSN)
			}
			h := make([]byte, iser.BHSSize)
			iser.NOPOut(h).Encode(&iser.NOPOutFields{Immediate: true, ITT: iser.ReservedTag, TTT: ttt, CmdSN: rc.sn})
			rc.write(h, nil)
		}
		rc.ping(1) // still up, in step
	})
	t.Run("unanswered", func(t *testing.T) {
		t.Parallel()
		tg := newTestTarget(t, func(c *Config) { c.NopInInterval, c.NopInTimeout = 20*time.Millisecond, 50*time.Millisecond })
		rc := newRawConn(t, tg, nil)
		p := ping(rc)
		// A wrong echo does not count.
		h := make([]byte, iser.BHSSize)
		iser.NOPOut(h).Encode(&iser.NOPOutFields{Immediate: true, ITT: iser.ReservedTag, TTT: iser.NOPIn(p.BHS).TTT() + 1, CmdSN: rc.sn})
		rc.write(h, nil)
		rc.expectClosed(10 * time.Second)
		if n := tg.Stats().SessionsClosed["timeout"]; n != 1 {
			t.Errorf("%d sessions closed for a timeout, want 1", n)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		t.Parallel()
		tg := newTestTarget(t, func(c *Config) { c.NopInInterval = -1 })
		rc := newRawConn(t, tg, nil)
		rc.c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if p, err := rc.r.ReadPDU(rc.hdr, rc.data); err == nil {
			t.Fatalf("NopInInterval < 0: got %v", p.BHS.Opcode())
		}
	})
}

// TestPDUTimeout: a PDU that stops in its header or its data segment
// drops the connection after Config.PDUTimeout (end reason "timeout");
// waiting between PDUs does not.
func TestPDUTimeout(t *testing.T) {
	t.Parallel()
	tg := newTestTarget(t, func(c *Config) { c.PDUTimeout, c.NopInInterval = 50*time.Millisecond, -1 })
	h := make([]byte, iser.BHSSize)
	t.Run("header", func(t *testing.T) {
		rc := newRawConn(t, tg, nil)
		time.Sleep(100 * time.Millisecond) // idle between PDUs: fine
		rc.ping(1)
		iser.NOPOut(h).Encode(&iser.NOPOutFields{Immediate: true, ITT: 2, TTT: iser.ReservedTag, CmdSN: rc.sn})
		if _, err := rc.c.Write(h[:20]); err != nil {
			t.Fatal(err)
		}
		rc.expectClosed(10 * time.Second)
	})
	t.Run("data segment", func(t *testing.T) {
		rc := newRawConn(t, tg, nil)
		iser.NOPOut(h).Encode(&iser.NOPOutFields{Immediate: true, ITT: 3, TTT: iser.ReservedTag, CmdSN: rc.sn})
		iser.BHS(h).SetLengths(0, 1000)
		if _, err := rc.c.Write(append(h, make([]byte, 100)...)); err != nil {
			t.Fatal(err)
		}
		rc.expectClosed(10 * time.Second)
	})
	if n := tg.Stats().SessionsClosed["timeout"]; n != 2 {
		t.Errorf("%d sessions closed for a timeout, want 2", n)
	}
}

// TestLoginTimeoutPartialPDU: a connection that sends part of a Login
// Request and stops is closed after Config.LoginTimeout.
func TestLoginTimeoutPartialPDU(t *testing.T) {
	t.Parallel()
	tg := newTestTarget(t, func(c *Config) { c.LoginTimeout = 50 * time.Millisecond })
	cli, srv := net.Pipe()
	defer cli.Close()
	done := make(chan struct{})
	go func() { defer close(done); tg.serveConn(srv) }()
	h := make([]byte, iser.BHSSize)
	iser.LoginRequest(h).Encode(&iser.LoginRequestFields{Transit: true, CSG: iser.StageOperational, NSG: iser.StageFullFeature})
	iser.BHS(h).SetLengths(0, 100)
	cli.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := cli.Write(append(h, "InitiatorName="...)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a partial Login Request held the connection past the login timeout")
	}
}

// pings returns the number of NOP-In pings the connections of tg's
// sessions have sent.
func pings(tg *Target) uint32 {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	var n uint32
	for _, s := range tg.sessions {
		if s != nil {
			s.conn.nopMu.Lock()
			n += s.conn.nopSeq
			s.conn.nopMu.Unlock()
		}
	}
	return n
}

// TestNopInInitiator: rdisk's own initiator answers the target's pings
// over iSCSI/TCP and iSER, so an idle session outlives many ping
// timeouts.
func TestNopInInitiator(t *testing.T) {
	t.Parallel()
	for _, tr := range []iser.Transport{iser.TransportTCP, iser.TransportISER} {
		t.Run(tr.String(), func(t *testing.T) {
			t.Parallel()
			pt := startPortal(t, func(c *Config) { c.NopInInterval, c.NopInTimeout = 10*time.Millisecond, 5*time.Second })
			s := pt.mustLogin(t, tr, fuzzIQN, pt.config(t, "iqn.2026-12.io.rdisk:nopin-"+tr.String()))
			// A new ping goes out only once the last was answered:
			// three pings mean two answers at least.
			deadline := time.Now().Add(20 * time.Second)
			for pings(pt.tg) < 3 {
				if time.Now().After(deadline) {
					t.Fatalf("%d pings in 20 s", pings(pt.tg))
				}
				time.Sleep(10 * time.Millisecond)
			}
			cmd := &initiator.Command{CDB: []byte{scsi.OpReportLUNs, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0}, DataIn: make([]byte, 4096)}
			execute(t, s, cmd)
			if cmd.Status != scsi.StatusGood {
				t.Fatalf("REPORT LUNS after idling: %v", cmd.Status)
			}
			if n := pt.tg.Stats().SessionsClosed["timeout"]; n != 0 {
				t.Fatalf("%d sessions timed out", n)
			}
		})
	}
}

// TestDataOutTimeout: a write whose Data-Out does not come (for its R2T,
// or the unsolicited data it announced) drops the connection after
// Config.DataOutTimeout, as LIO's dataout timer at ErrorRecoveryLevel 0;
// Data-Out that keeps coming does not.
func TestDataOutTimeout(t *testing.T) {
	t.Parallel()
	tg := newTestTarget(t, func(c *Config) { c.DataOutTimeout, c.NopInInterval = time.Second, -1 })
	t.Run("R2T unanswered", func(t *testing.T) {
		rc := newRawConn(t, tg, func(c *iser.InitiatorConfig) { c.Settings.InitialR2T = true })
		rc.write10(4096, nil, true)
		if p := rc.read(); p.BHS.Opcode() != iser.OpR2T {
			t.Fatalf("got %v, want an R2T", p.BHS.Opcode())
		}
		rc.expectClosed(10 * time.Second)
	})
	t.Run("unsolicited data missing", func(t *testing.T) {
		rc := newRawConn(t, tg, func(c *iser.InitiatorConfig) { c.Settings.InitialR2T = false })
		rc.write10(4096, make([]byte, 512), false) // more unsolicited data announced, none sent
		rc.expectClosed(10 * time.Second)
	})
	t.Run("slow but steady", func(t *testing.T) {
		rc := newRawConn(t, tg, func(c *iser.InitiatorConfig) { c.Settings.InitialR2T = true })
		itt := rc.write10(4096, nil, true)
		p := rc.read()
		if p.BHS.Opcode() != iser.OpR2T {
			t.Fatalf("got %v, want an R2T", p.BHS.Opcode())
		}
		ttt := iser.R2T(p.BHS).TTT()
		h := make([]byte, iser.BHSSize)
		for i := range 4 {
			time.Sleep(300 * time.Millisecond) // each within the timeout, all together beyond it
			iser.DataOut(h).Encode(&iser.DataOutFields{Final: i == 3, ITT: itt, TTT: ttt, DataSN: uint32(i), BufferOffset: uint32(i) * 1024})
			rc.write(h, make([]byte, 1024))
		}
		for {
			p := rc.read()
			if p.BHS.Opcode() == iser.OpSCSIResponse && p.BHS.ITT() == itt {
				break
			}
		}
		rc.ping(1)
	})
	if n := tg.Stats().SessionsClosed["timeout"]; n != 2 {
		t.Errorf("%d sessions closed for a timeout, want 2", n)
	}
}
