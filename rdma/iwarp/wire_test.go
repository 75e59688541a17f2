package iwarp

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdisk/rdisk/rdma"
)

// Frames captured from Linux 6.1 siw (../shared/lab/results/c-siw-mpa-capture.log):
// the kernel NVMe/RDMA host's MPA request, and its first FPDU, a Send of the
// 64-byte Fabrics Connect command.
const (
	siwMPARequestHex = "4d504120494420526571204672616d6510020024008000000000000020001f00000000000000000000000000000000000000000000000000"
	siwSendFPDUHex   = "0052414300000000000000000000000100000000" +
		"7f400000010000000000000000000000000000000000000000581805750b1fff00040001ab44564f000000001f00000088130000000000000000000000000000" +
		"00000000"
)

func mustHex(t testing.TB, s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMPARequestGolden(t *testing.T) {
	t.Parallel()
	raw := mustHex(t, siwMPARequestHex)
	f, err := parseMPA(raw, false)
	if err != nil {
		t.Fatal(err)
	}
	want := mpaFrame{Rev: 2, Enhanced: true, IRD: 128, ORD: 0,
		PrivateData: append([]byte{0, 0, 0, 0, 0x20, 0, 0x1f, 0}, make([]byte, 24)...)}
	if diff := cmp.Diff(want, f); diff != "" {
		t.Fatalf("parsed siw MPA request (-want +got):\n%s", diff)
	}
	if got := appendMPA(nil, &f); !bytes.Equal(got, raw) {
		t.Fatalf("re-encoded MPA request\n got %x\nwant %x", got, raw)
	}
}

func TestMPAReplyAndReject(t *testing.T) {
	t.Parallel()
	// The reply nvmet-rdma/siw sent to an IRD=16/ORD=16 request.
	raw := mustHex(t, "4d504120494420526570204672616d6510020024001000100000200000000000"+strings.Repeat("00", 24))
	f, err := parseMPA(raw, true)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Reply || f.IRD != 16 || f.ORD != 16 || len(f.PrivateData) != 32 || f.PrivateData[2] != 0x20 {
		t.Fatalf("parsed reply %+v", f)
	}
	if _, err := parseMPA(raw, false); err == nil {
		t.Fatal("a reply parsed as a request")
	}
	rej := appendMPA(nil, &mpaFrame{Reply: true, Reject: true, Rev: 1, PrivateData: []byte{1, 2}})
	want := append([]byte(mpaKeyRep), 0x20, 1, 0, 2, 1, 2)
	if !bytes.Equal(rej, want) {
		t.Fatalf("reject frame %x, want %x", rej, want)
	}
	for _, bad := range [][]byte{
		raw[:10],
		append(append([]byte(nil), raw[:17]...), 3, 0, 0), // revision 3
		append([]byte(mpaKeyRep), 0x10, 2, 0, 2, 0, 0),    // enhanced with 2 bytes
		append([]byte(mpaKeyRep), 0, 1, 0x02, 0x01),       // 513 bytes announced
	} {
		if _, err := parseMPA(bad, true); err == nil {
			t.Errorf("parseMPA(%x) succeeded", bad)
		}
	}
}

func TestPadLen(t *testing.T) {
	t.Parallel()
	for ulpdu, want := range map[int]int{82: 0, 18: 0, 19: 3, 20: 2, 21: 1, 46: 0} {
		if got := padLen(ulpdu); got != want || (2+ulpdu+got)%4 != 0 {
			t.Errorf("padLen(%d) = %d, want %d", ulpdu, got, want)
		}
	}
}

// rawPeer binds a fresh QP to one end of a pipe; the test speaks raw
// iWARP on the other end. The QP has a 64 KiB region with all rights and
// a 64 KiB region of canary bytes after it.
type rawPeer struct {
	q     *qp
	peer  net.Conn
	mr    rdma.MR
	buf   []byte // region followed by canary
	scq   *cq
	rcq   *cq
	total []byte
}

func newRawPeer(t testing.TB, passive, crc bool, ird, ord int) *rawPeer {
	p, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	pdI, _ := p.AllocPD()
	scq, _ := p.CreateCQ(256)
	rcq, _ := p.CreateCQ(256)
	qpI, err := pdI.CreateQP(rdma.QPConfig{SendCQ: scq, RecvCQ: rcq})
	if err != nil {
		t.Fatal(err)
	}
	total := bytes.Repeat([]byte{0xC5}, 128<<10)
	region := total[:64<<10]
	clear(region)
	m, err := pdI.RegisterMemory(region, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	q := qpI.(*qp)
	if err := q.bind(a, passive, crc, ird, ord, rtrNone); err != nil {
		t.Fatal(err)
	}
	q.start()
	r := &rawPeer{q: q, peer: b, mr: m, buf: region, scq: scq.(*cq), rcq: rcq.(*cq), total: total}
	t.Cleanup(func() {
		b.Close()
		q.Close()
	})
	return r
}

func (r *rawPeer) canaryIntact() bool {
	return bytes.Count(r.total[64<<10:], []byte{0xC5}) == 64<<10
}

// frame builds one FPDU with CRC off.
func frame(hdr []byte, payload []byte) []byte {
	ulpdu := len(hdr) - 2 + len(payload)
	b := append(append([]byte(nil), hdr...), payload...)
	binary.BigEndian.PutUint16(b, uint16(ulpdu))
	b = append(b, make([]byte, padLen(ulpdu)+mpaCRCLen)...)
	return b
}

func untagged(op uint8, qn, msn, mo uint32, last bool) []byte {
	h := make([]byte, untaggedHdrLen)
	putUntagged(h, 0, last, op, 0, qn, msn, mo)
	return h
}

// readFPDU reads one FPDU from the peer end.
func readFPDU(t testing.TB, c net.Conn) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		t.Fatalf("reading FPDU: %v", err)
	}
	ulpdu := int(binary.BigEndian.Uint16(l[:]))
	rest := make([]byte, ulpdu+padLen(ulpdu)+mpaCRCLen)
	if _, err := io.ReadFull(c, rest); err != nil {
		t.Fatalf("reading FPDU: %v", err)
	}
	return append(l[:], rest...)
}

// expectTerminate reads FPDUs until a Terminate and checks its control word.
func expectTerminate(t testing.TB, c net.Conn, layer, etype, ecode uint8) {
	t.Helper()
	for i := 0; i < 100; i++ {
		f := readFPDU(t, c)
		if f[offRDMACtrl]&rdmapOpMask != rdmapTerminate {
			continue
		}
		if q := binary.BigEndian.Uint32(f[offQN:]); q != qnTerminate {
			t.Fatalf("Terminate on queue %d", q)
		}
		te := parseTermCtrl(binary.BigEndian.Uint32(f[untaggedHdrLen:]))
		if te.Layer != layer || te.EType != etype || te.ECode != ecode {
			t.Fatalf("Terminate layer %d type %d code %#x (%s), want %d/%d/%#x", te.Layer, te.EType, te.ECode, te.Msg, layer, etype, ecode)
		}
		return
	}
	t.Fatal("no Terminate")
}

func waitQPError(t testing.TB, q *qp) {
	t.Helper()
	select {
	case <-q.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("QP did not fail")
	}
}

func TestGoldenSendFPDUReceived(t *testing.T) {
	t.Parallel()
	r := newRawPeer(t, true, false, 16, 16)
	if err := r.q.PostRecv(&rdma.RecvWR{ID: 5, SGL: []rdma.SGE{{MR: r.mr, Length: 1024}}}); err != nil {
		t.Fatal(err)
	}
	raw := mustHex(t, siwSendFPDUHex)
	if len(raw) != 88 {
		t.Fatalf("fixture is %d bytes", len(raw))
	}
	go r.peer.Write(raw)
	var wc [1]rdma.WC
	deadline := time.Now().Add(10 * time.Second)
	for r.rcq.Poll(wc[:]) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no receive completion")
		}
		time.Sleep(time.Millisecond)
	}
	if wc[0].ID != 5 || wc[0].Status != rdma.StatusSuccess || wc[0].ByteLen != 64 || !bytes.Equal(r.buf[:64], raw[20:84]) {
		t.Fatalf("completion %+v, data %x", wc[0], r.buf[:64])
	}
}

func TestGoldenSendFPDUSent(t *testing.T) {
	t.Parallel()
	r := newRawPeer(t, false, false, 16, 16)
	raw := mustHex(t, siwSendFPDUHex)
	copy(r.buf, raw[20:84])
	if err := r.q.PostSend(&rdma.SendWR{Op: rdma.OpSend, SGL: []rdma.SGE{{MR: r.mr, Length: 64}}}); err != nil {
		t.Fatal(err)
	}
	if got := readFPDU(t, r.peer); !bytes.Equal(got, raw) {
		t.Fatalf("Send FPDU\n got %x\nwant %x", got, raw)
	}
}

func TestGoldenReadRequestAndCRC(t *testing.T) {
	t.Parallel()
	r := newRawPeer(t, false, true, 16, 16)
	if err := r.q.PostSend(&rdma.SendWR{Op: rdma.OpRDMARead, SGL: []rdma.SGE{{MR: r.mr, Offset: 8, Length: 4096}}, RemoteAddr: 0x1122334455667788, RemoteKey: 0xabcdef01}); err != nil {
		t.Fatal(err)
	}
	f := readFPDU(t, r.peer)
	// RFC 5040 §4.4: untagged QN 1, MSN 1, MO 0, then sink STag/TO, size, source STag/TO.
	want := make([]byte, 48)
	binary.BigEndian.PutUint16(want, 46)
	want[2], want[3] = 0x41, 0x41
	binary.BigEndian.PutUint32(want[8:], 1)
	binary.BigEndian.PutUint32(want[12:], 1)
	binary.BigEndian.PutUint32(want[20:], r.mr.LKey())
	binary.BigEndian.PutUint64(want[24:], r.mr.VA()+8)
	binary.BigEndian.PutUint32(want[32:], 4096)
	binary.BigEndian.PutUint32(want[36:], 0xabcdef01)
	binary.BigEndian.PutUint64(want[40:], 0x1122334455667788)
	if !bytes.Equal(f[:48], want) {
		t.Fatalf("Read Request\n got %x\nwant %x", f[:48], want)
	}
	crc := crc32.Checksum(f[:48], crc32.MakeTable(crc32.Castagnoli))
	if got := binary.LittleEndian.Uint32(f[48:]); got != crc {
		t.Fatalf("CRC %#x, want %#x", got, crc)
	}
}

func TestTerminateIRDExceeded(t *testing.T) {
	t.Parallel()
	r := newRawPeer(t, false, false, 1, 1)
	req := func(msn uint32) []byte {
		rr := readRequest{SinkSTag: 0x100, SinkTO: 0, Size: 16, SourceSTag: r.mr.RKey(), SourceTO: r.mr.VA()}
		p := make([]byte, readReqLen)
		rr.put(p)
		return frame(untagged(rdmapReadReq, qnReadReq, msn, 0, true), p)
	}
	// Three requests in one write arrive in one read: the receiver
	// handles them all before it wakes the transmitter, so the second is
	// one more than IRD=1 allows whatever the scheduling.
	go r.peer.Write(append(append(req(1), req(2)...), req(3)...))
	expectTerminate(t, r.peer, termLayerRDMAP, rdmapETypeRemoteOp, rdmapECodeCatastrophic)
	waitQPError(t, r.q)
}

func TestTerminateCases(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name                string
		frame               func(r *rawPeer) []byte
		layer, etype, ecode uint8
	}{
		{"WrongMSN", func(r *rawPeer) []byte { return frame(untagged(rdmapSend, qnSend, 2, 0, true), []byte("x")) },
			termLayerDDP, ddpETypeUntagged, ddpECodeUTMSNRange},
		{"WrongQN", func(r *rawPeer) []byte { return frame(untagged(rdmapSend, 5, 1, 0, true), nil) },
			termLayerDDP, ddpETypeUntagged, ddpECodeUTInvalidQN},
		{"WrongMO", func(r *rawPeer) []byte { return frame(untagged(rdmapSend, qnSend, 1, 8, true), nil) },
			termLayerDDP, ddpETypeUntagged, ddpECodeUTInvalidMO},
		{"NoReceiveBuffer", func(r *rawPeer) []byte { return frame(untagged(rdmapSend, qnSend, 1, 0, true), []byte("x")) },
			termLayerDDP, ddpETypeUntagged, ddpECodeUTNoBuf},
		{"DDPVersion", func(r *rawPeer) []byte {
			h := untagged(rdmapSend, qnSend, 1, 0, true)
			h[offDDPCtrl] = h[offDDPCtrl]&^ddpVerMask | 2
			return frame(h, nil)
		}, termLayerDDP, ddpETypeUntagged, ddpECodeUTVersion},
		{"RDMAPVersion", func(r *rawPeer) []byte {
			h := untagged(rdmapSend, qnSend, 1, 0, true)
			h[offRDMACtrl] = 0x80 | rdmapSend
			return frame(h, nil)
		}, termLayerRDMAP, rdmapETypeRemoteOp, rdmapECodeVersion},
		{"BadOpcode", func(r *rawPeer) []byte {
			h := untagged(rdmapSend, qnSend, 1, 0, true)
			h[offRDMACtrl] = rdmapVersion | 0x9
			return frame(h, nil)
		}, termLayerRDMAP, rdmapETypeRemoteOp, rdmapECodeOpcode},
		{"ShortULPDU", func(r *rawPeer) []byte { return []byte{0, 4, 0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0} },
			termLayerLLP, llpETypeMPA, llpECodeFPDUStart},
		{"WriteInvalidSTag", func(r *rawPeer) []byte {
			h := make([]byte, taggedHdrLen)
			putTagged(h, 0, true, rdmapWrite, 0x7777700, r.mr.VA())
			return frame(h, []byte("data"))
		}, termLayerDDP, ddpETypeTagged, ddpECodeTInvalidSTag},
		{"WriteOutOfBounds", func(r *rawPeer) []byte {
			h := make([]byte, taggedHdrLen)
			putTagged(h, 0, true, rdmapWrite, r.mr.RKey(), r.mr.VA()+64<<10-2)
			return frame(h, []byte("data"))
		}, termLayerDDP, ddpETypeTagged, ddpECodeTBaseBounds},
		{"WriteTOWrap", func(r *rawPeer) []byte {
			h := make([]byte, taggedHdrLen)
			putTagged(h, 0, true, rdmapWrite, r.mr.RKey(), ^uint64(0)-1)
			return frame(h, []byte("data"))
		}, termLayerDDP, ddpETypeTagged, ddpECodeTTOWrap},
		{"ReadResponseUnexpected", func(r *rawPeer) []byte {
			h := make([]byte, taggedHdrLen)
			putTagged(h, 0, true, rdmapReadResp, r.mr.RKey(), r.mr.VA())
			return frame(h, []byte("data"))
		}, termLayerRDMAP, rdmapETypeRemoteOp, rdmapECodeOpcode},
		{"ReadRequestBadSTag", func(r *rawPeer) []byte {
			rr := readRequest{SinkSTag: 1, Size: 16, SourceSTag: r.mr.RKey() ^ 1, SourceTO: r.mr.VA()}
			p := make([]byte, readReqLen)
			rr.put(p)
			return frame(untagged(rdmapReadReq, qnReadReq, 1, 0, true), p)
		}, termLayerRDMAP, rdmapETypeRemoteProt, rdmapECodeInvalidSTag},
		{"ReadRequestOutOfBounds", func(r *rawPeer) []byte {
			rr := readRequest{SinkSTag: 1, Size: 65537, SourceSTag: r.mr.RKey(), SourceTO: r.mr.VA()}
			p := make([]byte, readReqLen)
			rr.put(p)
			return frame(untagged(rdmapReadReq, qnReadReq, 1, 0, true), p)
		}, termLayerRDMAP, rdmapETypeRemoteProt, rdmapECodeBaseBounds},
		{"SendInvalidateUnknown", func(r *rawPeer) []byte {
			r.q.PostRecv(&rdma.RecvWR{ID: 1, SGL: []rdma.SGE{{MR: r.mr, Length: 64}}})
			h := untagged(rdmapSendInv, qnSend, 1, 0, true)
			binary.BigEndian.PutUint32(h[offInvSTag:], r.mr.RKey())
			return frame(h, nil)
		}, termLayerRDMAP, rdmapETypeRemoteOp, rdmapECodeCannotInval},
		{"MessageTooLong", func(r *rawPeer) []byte {
			r.q.PostRecv(&rdma.RecvWR{ID: 1, SGL: []rdma.SGE{{MR: r.mr, Length: 4}}})
			return frame(untagged(rdmapSend, qnSend, 1, 0, true), []byte("12345"))
		}, termLayerDDP, ddpETypeUntagged, ddpECodeUTMsgTooLong},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRawPeer(t, false, false, 4, 4)
			f := tc.frame(r)
			go r.peer.Write(f)
			expectTerminate(t, r.peer, tc.layer, tc.etype, tc.ecode)
			waitQPError(t, r.q)
			if !r.canaryIntact() {
				t.Fatal("memory outside the region was written")
			}
		})
	}
}

func TestCRCMismatch(t *testing.T) {
	t.Parallel()
	r := newRawPeer(t, false, true, 4, 4)
	r.q.PostRecv(&rdma.RecvWR{ID: 1, SGL: []rdma.SGE{{MR: r.mr, Length: 64}}})
	f := frame(untagged(rdmapSend, qnSend, 1, 0, true), []byte("abcd"))
	binary.LittleEndian.PutUint32(f[len(f)-4:], 0xdeadbeef)
	go r.peer.Write(f)
	expectTerminate(t, r.peer, termLayerLLP, llpETypeMPA, llpECodeRecvCRC)
	waitQPError(t, r.q)
}

func TestPeerTerminateFailsQP(t *testing.T) {
	t.Parallel()
	r := newRawPeer(t, false, false, 4, 4)
	h := untagged(rdmapTerminate, qnTerminate, 1, 0, true)
	ctrl := make([]byte, 4)
	binary.BigEndian.PutUint32(ctrl, (&termError{Layer: termLayerRDMAP, EType: rdmapETypeRemoteProt, ECode: rdmapECodeBaseBounds}).ctrlWord())
	go r.peer.Write(frame(h, ctrl))
	waitQPError(t, r.q)
	if err := r.q.Err(); err == nil || !strings.Contains(err.Error(), "peer terminate: base or bounds") {
		t.Fatalf("QP error %v", err)
	}
}

// FuzzMPA checks that any bytes parse or fail cleanly, and that what
// parses re-encodes to an equivalent frame.
func FuzzMPA(f *testing.F) {
	f.Add(mustHex(f, siwMPARequestHex), false)
	f.Add(append([]byte(mpaKeyRep), 0x20, 1, 0, 0), true)
	f.Add(append([]byte(mpaKeyReq), 0x50, 2, 0, 4, 0x80, 1, 0x40, 2), false)
	f.Fuzz(func(t *testing.T, b []byte, reply bool) {
		fr, err := parseMPA(b, reply)
		if err != nil {
			return
		}
		again, err := parseMPA(appendMPA(nil, &fr), reply)
		if err != nil {
			t.Fatalf("re-encoded frame does not parse: %v", err)
		}
		if !bytes.Equal(again.PrivateData, fr.PrivateData) || again.IRD != fr.IRD || again.ORD != fr.ORD || again.CRC != fr.CRC {
			t.Fatalf("round trip changed the frame: %+v -> %+v", fr, again)
		}
	})
}

// FuzzReceive feeds arbitrary bytes to a QP's receive path: it must never
// panic or write outside its registered region.
func FuzzReceive(f *testing.F) {
	f.Add(mustHex(f, siwSendFPDUHex), false)
	h := make([]byte, taggedHdrLen)
	putTagged(h, 0, true, rdmapWrite, 1<<8, 0)
	f.Add(frame(h, []byte("data")), false)
	f.Add(frame(untagged(rdmapReadReq, qnReadReq, 1, 0, true), make([]byte, readReqLen)), true)
	f.Add(frame(untagged(rdmapTerminate, qnTerminate, 1, 0, true), []byte{0x10, 0, 0, 0}), false)
	f.Fuzz(func(t *testing.T, b []byte, crc bool) {
		r := newRawPeer(t, false, crc, 4, 4)
		r.q.PostRecv(&rdma.RecvWR{ID: 1, SGL: []rdma.SGE{{MR: r.mr, Length: 100}, {MR: r.mr, Offset: 1000, Length: 100}}})
		go io.Copy(io.Discard, r.peer)
		r.peer.SetWriteDeadline(time.Now().Add(2 * time.Second))
		r.peer.Write(b)
		r.q.Disconnect()
		<-r.q.txExited
		if !r.canaryIntact() {
			t.Fatal("memory outside the region was written")
		}
	})
}

// TestIsConnRequest: the demultiplexers of shared ports (iSCSI/iSER on
// 3260) recognize an MPA request by its key and nothing else.
func TestIsConnRequest(t *testing.T) {
	t.Parallel()
	p, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var sp rdma.StreamProvider = p
	if n := sp.ConnRequestPrefix(); n != 16 {
		t.Fatalf("ConnRequestPrefix = %d, want the 16-byte MPA key", n)
	}
	for first, want := range map[string]bool{"MPA ID Req Frame": true, "MPA ID Rep Frame": false, "\x43\x87\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00": false} {
		if got := sp.IsConnRequest([]byte(first)); got != want {
			t.Errorf("IsConnRequest(%q) = %v, want %v", first, got, want)
		}
	}
}
