package target

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/scsi"
)

const fuzzIQN = "iqn.2026-11.io.rdisk:fuzz"

// isidSeq gives each test login its own ISID (no reinstatement).
var isidSeq atomic.Uint32

func newTestTarget(t testing.TB, edit func(*Config)) *Target {
	t.Helper()
	disk, err := backstore.NewMem(1<<20, 512)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Targets: []TargetConfig{{Name: fuzzIQN, LUNs: []LUNConfig{{LUN: 0, Disk: disk}}}},
		QueueDepth: 8, MaxTransfer: 64 << 10, Workers: 2}
	if edit != nil {
		edit(&cfg)
	}
	tg, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	return tg
}

// loginPipe serves one connection of tg over a pipe and logs in to the
// target (or a discovery session); it returns the initiator's end with
// its reader, and a channel closed when the target is done with the
// connection.
func loginPipe(t testing.TB, tg *Target, discovery bool) (net.Conn, *iser.Reader, *iser.Writer, iser.Session, chan struct{}) {
	t.Helper()
	return loginPipeWith(t, tg, discovery, nil)
}

// loginPipeWith is loginPipe with the initiator's login configuration
// changed by edit (when not nil).
func loginPipeWith(t testing.TB, tg *Target, discovery bool, edit func(*iser.InitiatorConfig)) (net.Conn, *iser.Reader, *iser.Writer, iser.Session, chan struct{}) {
	t.Helper()
	cli, srv := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		tg.serveConn(srv)
	}()
	n := isidSeq.Add(1)
	cli.SetDeadline(time.Now().Add(10 * time.Second))
	defer cli.SetDeadline(time.Time{})
	cfg := &iser.InitiatorConfig{Transport: iser.TransportTCP, Settings: iser.DefaultSettings(),
		InitiatorName: "iqn.2026-11.io.rdisk:fuzzer", TargetName: fuzzIQN, ISID: iser.ISID{0x80, 0, 0, byte(n >> 16), byte(n >> 8), byte(n)}}
	if discovery {
		cfg.SessionType, cfg.TargetName = iser.SessionDiscovery, ""
	}
	if edit != nil {
		edit(cfg)
	}
	il, err := iser.NewInitiatorLogin(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := iser.NewReader(bufio.NewReader(cli))
	w := iser.NewWriter(cli)
	req := make([]byte, iser.BHSSize)
	reqData := make([]byte, 8192)
	hdr := make([]byte, iser.MaxHeaderLength)
	data := make([]byte, 8192)
	dl, err := il.Start(req, reqData)
	for {
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WritePDU(req, nil, reqData[:dl]); err != nil {
			t.Fatal(err)
		}
		p, err := r.ReadPDU(hdr, data)
		if err != nil {
			t.Fatal(err)
		}
		var st iser.LoginState
		dl, st, err = il.Step(p.BHS, p.Data, req, reqData)
		if st == iser.LoginDone {
			break
		}
		if st == iser.LoginFailed {
			t.Fatal(err)
		}
	}
	ls, _ := il.Session()
	r.SetMaxRecvDataSegmentLength(int(ls.Params.MaxRecvDataSegmentLength))
	return cli, r, w, ls, done
}

// pdu encodes a PDU with the given header fields for the seed corpus.
func pdu(hdr []byte, data []byte) []byte { return iser.AppendPDU(nil, iser.BHS(hdr), nil, data) }

func seeds(ls iser.Session) [][]byte {
	sn := ls.CmdSN
	var out [][]byte
	cmd := func(cdb []byte, read, write bool, exp uint32, imm []byte, final bool) []byte {
		h := make([]byte, iser.BHSSize)
		var c [16]byte
		copy(c[:], cdb)
		iser.SCSICommand(h).Encode(&iser.SCSICommandFields{Final: final, Read: read, Write: write, Attr: iser.AttrSimple,
			ITT: sn, ExpectedDataTransferLength: exp, CmdSN: sn, CDB: c})
		sn++
		return pdu(h, imm)
	}
	read10 := []byte{scsi.OpRead10, 0, 0, 0, 0, 8, 0, 0, 8, 0}
	write10 := []byte{scsi.OpWrite10, 0, 0, 0, 0, 16, 0, 0, 8, 0}
	out = append(out, cmd([]byte{0}, false, false, 0, nil, true))
	out = append(out, cmd(read10, true, false, 4096, nil, true))
	out = append(out, cmd(write10, false, true, 4096, make([]byte, 1024), false))
	dout := make([]byte, iser.BHSSize)
	iser.DataOut(dout).Encode(&iser.DataOutFields{Final: true, ITT: sn - 1, TTT: iser.ReservedTag, BufferOffset: 1024})
	out = append(out, pdu(dout, make([]byte, 3072)))
	nop := make([]byte, iser.BHSSize)
	iser.NOPOut(nop).Encode(&iser.NOPOutFields{Immediate: true, ITT: 77, TTT: iser.ReservedTag, CmdSN: sn})
	out = append(out, pdu(nop, []byte("ping")))
	tmf := make([]byte, iser.BHSSize)
	iser.TaskMgmtRequest(tmf).Encode(&iser.TaskMgmtRequestFields{Immediate: true, Function: iser.TMFAbortTask, ITT: 78, ReferencedTaskTag: 3, CmdSN: sn})
	out = append(out, pdu(tmf, nil))
	txt := make([]byte, iser.BHSSize)
	iser.TextRequest(txt).Encode(&iser.TextRequestFields{Immediate: true, Final: true, ITT: 79, TTT: iser.ReservedTag, CmdSN: sn})
	out = append(out, pdu(txt, iser.AppendKeyValue(nil, "SendTargets", "All")))
	lo := make([]byte, iser.BHSSize)
	iser.LogoutRequest(lo).Encode(&iser.LogoutRequestFields{Immediate: true, ITT: 80, CmdSN: sn})
	out = append(out, pdu(lo, nil))
	return out
}

// FuzzTargetPDUs feeds arbitrary PDU streams to a logged-in iSCSI/TCP
// connection: the target must neither panic nor hang, and must end the
// connection when the initiator goes away.
func FuzzTargetPDUs(f *testing.F) {
	tg := newTestTarget(f, nil)
	// Seeds: each PDU alone, and all of them in a row.
	_, _, _, ls, _ := func() (net.Conn, *iser.Reader, *iser.Writer, iser.Session, chan struct{}) {
		c, r, w, ls, done := loginPipe(f, tg, false)
		c.Close()
		<-done
		return c, r, w, ls, done
	}()
	var all []byte
	for _, s := range seeds(ls) {
		f.Add(s)
		all = append(all, s...)
	}
	f.Add(all)
	f.Fuzz(func(t *testing.T, in []byte) {
		c, _, _, ls, done := loginPipe(t, tg, false)
		// Rewrite CmdSNs relative to the session so that commands land
		// in the window more often than not.
		for off := 0; off+iser.BHSSize <= len(in); off += iser.BHSSize {
			op := iser.BHS(in[off:]).Opcode()
			if op == iser.OpSCSICommand || op == iser.OpNOPOut || op == iser.OpTextRequest {
				v := binary.BigEndian.Uint32(in[off+24:])
				binary.BigEndian.PutUint32(in[off+24:], ls.CmdSN+v%16)
			}
		}
		go io.Copy(io.Discard, c)
		c.SetWriteDeadline(time.Now().Add(2 * time.Second))
		c.Write(in)
		c.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			buf := make([]byte, 1<<20)
			t.Fatalf("the target did not end the connection\n%s", buf[:runtime.Stack(buf, true)])
		}
	})
}

// TestDemux checks the first-bytes dispatch: an MPA request on a portal
// without an RDMA provider is closed, garbage too, and an iSCSI login
// works.
// TestDemux runs in a synctest bubble: the connection that is neither MPA
// nor iSCSI is given up after the client's 5 s read deadline, which fake
// time makes instant.
func TestDemux(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tg := newTestTarget(t, nil)
		for _, first := range []string{"MPA ID Req Frame\x00\x00\x00\x00", "GET / HTTP/1.1\r\n\r\n"} {
			cli, srv := net.Pipe()
			done := make(chan struct{})
			go func() { tg.serveConn(srv); close(done) }()
			go cli.Write([]byte(first))
			cli.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := cli.Read(make([]byte, 1)); err == nil {
				t.Errorf("%q: the target answered", first)
			}
			cli.Close()
			<-done
		}
		c, r, w, ls, done := loginPipe(t, tg, true)
		// SendTargets in the discovery session.
		h := make([]byte, iser.BHSSize)
		iser.TextRequest(h).Encode(&iser.TextRequestFields{Immediate: true, Final: true, ITT: 5, TTT: iser.ReservedTag, CmdSN: ls.CmdSN})
		if err := w.WritePDU(h, nil, iser.AppendKeyValue(nil, "SendTargets", "All")); err != nil {
			t.Fatal(err)
		}
		p, err := r.ReadPDU(make([]byte, iser.MaxHeaderLength), make([]byte, 1<<18))
		if err != nil {
			t.Fatal(err)
		}
		recs, err := iser.ParseSendTargets(p.Data)
		if err != nil || len(recs) != 1 || recs[0].Name != fuzzIQN {
			t.Fatalf("SendTargets: %+v, %v", recs, err)
		}
		// A SCSI command in a discovery session is rejected.
		iser.SCSICommand(h).Encode(&iser.SCSICommandFields{Final: true, ITT: 6, CmdSN: ls.CmdSN})
		w.WritePDU(h, nil, nil)
		p, err = r.ReadPDU(make([]byte, iser.MaxHeaderLength), make([]byte, 1<<18))
		if err != nil || p.BHS.Opcode() != iser.OpReject {
			t.Fatalf("SCSI command in a discovery session: %v, %v", p.BHS.Opcode(), err)
		}
		c.Close()
		<-done
	})
}
