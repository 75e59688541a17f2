package host

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/tcp"
)

// A small NVMe/TCP controller for the host's TCP paths: a 1 MiB RAM
// namespace, admin bring-up as a target answers it, reads split into
// C2HData PDUs of c2hChunk bytes, writes beyond the in-capsule size
// solicited with R2Ts of r2tChunk bytes, and hooks that break the
// protocol on purpose. It checks what the host sends: header and data
// digests, PDU lengths, H2CData within MAXH2CDATA.

type tcpFake struct {
	t    *testing.T
	ln   net.Listener
	addr string

	maxH2C   uint32 // MAXH2CDATA offered
	c2hChunk int    // bytes per C2HData PDU
	r2tChunk int    // bytes per R2T
	success  bool   // reads end with C2HData SUCCESS instead of a CapsuleResp
	ioccsz   uint32
	// authreq is ORed into every Connect result (ConnectAuthReq* bits).
	authreq uint32
	// icresp edits the ICResp before it is sent.
	icresp func(*tcp.ICFields)
	// io, if set, sees every I/O command first; true means it handled it.
	io func(q *tcpFakeQueue, sqe nvmeof.SQE) bool

	mu      sync.Mutex
	disk    []byte
	conns   []net.Conn
	h2cPDUs int    // H2CData PDUs received
	maxSeen int    // largest H2CData
	termFES uint16 // of the host's H2CTermReq
}

type tcpFakeQueue struct {
	f            *tcpFake
	conn         net.Conn
	qid          uint16
	hdgst, ddgst bool
	cc           nvmeof.CC
	wmu          sync.Mutex
}

func startTCPFake(t *testing.T, setup func(f *tcpFake)) *tcpFake {
	t.Helper()
	f := &tcpFake{t: t, maxH2C: 8192, c2hChunk: 4096, r2tChunk: 16 << 10, ioccsz: (64 + 8192) / 16, disk: make([]byte, 1<<20)}
	if setup != nil {
		setup(f)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.ln, f.addr = ln, ln.Addr().String()
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, c)
			f.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				q := &tcpFakeQueue{f: f, conn: c}
				if err := q.serve(); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
					t.Logf("tcp fake: %v", err)
				}
			}()
		}
	}()
	return f
}

func (f *tcpFake) fail(format string, args ...any) { f.t.Errorf("tcp fake: "+format, args...) }

func (q *tcpFakeQueue) send(parts ...[]byte) error {
	q.wmu.Lock()
	defer q.wmu.Unlock()
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	_, err := q.conn.Write(b)
	return err
}

func (q *tcpFakeQueue) serve() error {
	var ic [tcp.ICSize]byte
	if _, err := io.ReadFull(q.conn, ic[:]); err != nil {
		return err
	}
	req, ferr := tcp.CheckICReq(tcp.IC(ic[:]))
	if ferr != nil || tcp.Header(ic[:]).Type() != tcp.TypeICReq || req.PDA != 0 || req.Max != 0 {
		q.f.fail("bad ICReq %+v: %v", req, ferr)
	}
	q.hdgst, q.ddgst = req.Digest&tcp.DigestHeader != 0, req.Digest&tcp.DigestData != 0
	resp := tcp.ICFields{PFV: tcp.PFV10, Digest: req.Digest, Max: q.f.maxH2C}
	if q.f.icresp != nil {
		q.f.icresp(&resp)
	}
	tcp.IC(ic[:]).Encode(tcp.TypeICResp, &resp)
	if err := q.send(ic[:]); err != nil {
		return err
	}
	for {
		hdr, data, err := q.readPDU(tcp.TypeCapsuleCmd)
		if err != nil {
			return err
		}
		sqe := nvmeof.SQE(append([]byte(nil), hdr[tcp.CommonHeaderSize:tcp.CapsuleCmdHLen]...))
		if err := q.handle(sqe, data); err != nil {
			return err
		}
	}
}

// readPDU reads one host PDU of type want, checks its digests and returns
// its header and data.
func (q *tcpFakeQueue) readPDU(want uint8) (tcp.Header, []byte, error) {
	ch := make([]byte, tcp.CommonHeaderSize)
	if _, err := io.ReadFull(q.conn, ch); err != nil {
		return nil, nil, err
	}
	rest, ferr := tcp.CheckHeader(tcp.Header(ch), tcp.Controller, q.hdgst)
	if ferr != nil {
		q.f.fail("host PDU: %v", ferr)
		return nil, nil, ferr
	}
	plen := tcp.Header(ch).PLen()
	pdu := make([]byte, plen)
	copy(pdu, ch)
	if _, err := io.ReadFull(q.conn, pdu[tcp.CommonHeaderSize:]); err != nil {
		return nil, nil, err
	}
	hdr := tcp.Header(pdu[:tcp.CommonHeaderSize+rest])
	l, ferr := tcp.CheckPDU(hdr, q.hdgst, q.ddgst, 4)
	if ferr != nil {
		q.f.fail("host PDU: %v", ferr)
		return nil, nil, ferr
	}
	if hdr.Type() == tcp.TypeH2CTermReq {
		t := tcp.TermReq(hdr)
		q.f.mu.Lock()
		q.f.termFES = t.FES()
		q.f.mu.Unlock()
		return nil, nil, fmt.Errorf("host sent an H2CTermReq: %s", tcp.FESName(t.FES()))
	}
	if hdr.Type() != want {
		q.f.fail("host sent %s, want %s", tcp.TypeName(hdr.Type()), tcp.TypeName(want))
		return nil, nil, io.EOF
	}
	var data []byte
	if l.DataLen > 0 {
		data = pdu[hdr.PDO() : hdr.PDO()+l.DataLen]
		if l.DataDigest {
			if got, want := tcp.GetDigest(pdu[hdr.PDO()+l.DataLen:]), tcp.Digest(data); got != want {
				q.f.fail("%s data digest %#x, computed %#x", tcp.TypeName(hdr.Type()), got, want)
			}
		}
	}
	return hdr, data, nil
}

func (q *tcpFakeQueue) hd() int {
	if q.hdgst {
		return tcp.DigestSize
	}
	return 0
}

// header returns a PDU header of type typ with data, digests included.
func (q *tcpFakeQueue) header(typ, flags uint8, hlen int, dataLen int, fill func(h []byte)) []byte {
	h := make([]byte, hlen+q.hd())
	tcp.Header(h).Put(typ, flags, hlen, q.hdgst, dataLen, q.ddgst, 0)
	fill(h)
	if q.hdgst {
		tcp.PutDigest(h[hlen:], tcp.Digest(h[:hlen]))
	}
	return h
}

// respond sends a CapsuleResp.
func (q *tcpFakeQueue) respond(cid uint16, st nvmeof.Status, result uint64) error {
	h := q.header(tcp.TypeCapsuleResp, 0, tcp.CapsuleRespHLen, 0, func(h []byte) {
		nvmeof.CQE(h[tcp.CommonHeaderSize:]).Encode(&nvmeof.CQEFields{Result: result, CID: cid, Status: st, SQID: q.qid})
	})
	return q.send(h)
}

// c2hData sends data in C2HData PDUs of c2hChunk bytes; with last and
// SUCCESS on the final one.
func (q *tcpFakeQueue) c2hData(cid uint16, data []byte, success bool) error {
	chunk := max(q.f.c2hChunk, 1)
	for off := 0; off < len(data); off += chunk {
		n := min(chunk, len(data)-off)
		var flags uint8
		if off+n == len(data) {
			flags = tcp.FlagLast
			if success {
				flags |= tcp.FlagSuccess
			}
		}
		d := data[off : off+n]
		h := q.header(tcp.TypeC2HData, flags, tcp.DataHLen, n, func(h []byte) {
			tcp.Data(h).Encode(&tcp.DataFields{CCCID: cid, Offset: uint32(off), Length: uint32(n)})
		})
		parts := [][]byte{h, d}
		if q.ddgst {
			var dd [4]byte
			tcp.PutDigest(dd[:], tcp.Digest(d))
			parts = append(parts, dd[:])
		}
		if err := q.send(parts...); err != nil {
			return err
		}
	}
	return nil
}

// dataOut returns a command's host-to-controller data: in-capsule, or
// solicited with R2Ts of r2tChunk bytes, each answered by H2CData PDUs.
func (q *tcpFakeQueue) dataOut(sqe nvmeof.SQE, inline []byte) ([]byte, error) {
	sgl := sqe.DPTR()
	n := int(sgl.Length())
	switch sgl.Identifier() {
	case nvmeof.SGLInCapsule:
		if len(inline) != n || sgl.Address() != 0 {
			q.f.fail("in-capsule SGL for %d bytes at %d, capsule has %d", n, sgl.Address(), len(inline))
		}
		return inline, nil
	case sglTransport:
	default:
		q.f.fail("write with SGL %#x", sgl.Identifier())
		return nil, nil
	}
	if len(inline) != 0 {
		q.f.fail("capsule with %d bytes of data and a transport SGL", len(inline))
	}
	buf := make([]byte, n)
	for off, ttag := 0, uint16(1); off < n; ttag++ {
		rn := min(q.f.r2tChunk, n-off)
		h := q.header(tcp.TypeR2T, 0, tcp.R2THLen, 0, func(h []byte) {
			tcp.Data(h).Encode(&tcp.DataFields{CCCID: sqe.CID(), TTag: ttag, Offset: uint32(off), Length: uint32(rn)})
		})
		if err := q.send(h); err != nil {
			return nil, err
		}
		for got := 0; got < rn; {
			hdr, data, err := q.readPDU(tcp.TypeH2CData)
			if err != nil {
				return nil, err
			}
			d := tcp.Data(hdr)
			q.f.mu.Lock()
			q.f.h2cPDUs++
			q.f.maxSeen = max(q.f.maxSeen, len(data))
			q.f.mu.Unlock()
			last := got+len(data) == rn
			switch {
			case d.CCCID() != sqe.CID() || d.TTag() != ttag || int(d.DataOffset()) != off+got:
				q.f.fail("H2CData %+v, want CID %d TTAG %d offset %d", d.Fields(), sqe.CID(), ttag, off+got)
			case uint32(len(data)) > q.f.maxH2C:
				q.f.fail("H2CData of %d bytes, MAXH2CDATA %d", len(data), q.f.maxH2C)
			case (hdr.Flags()&tcp.FlagLast != 0) != last:
				q.f.fail("H2CData LAST_PDU %v at %d of %d", !last, got+len(data), rn)
			}
			copy(buf[off+got:], data)
			got += len(data)
		}
		off += rn
	}
	return buf, nil
}

func (q *tcpFakeQueue) handle(sqe nvmeof.SQE, inline []byte) error {
	f := q.f
	sqe, kind, err := nvmeof.ParseCommand(sqe, q.qid == 0)
	if err != nil {
		f.fail("command % x: %v", []byte(sqe), err)
		return q.respond(sqe.CID(), nvmeof.StatusInvalidOpcode.WithDNR(), 0)
	}
	if kind == nvmeof.KindConnect {
		data, err := q.dataOut(sqe, inline)
		if err != nil {
			return err
		}
		if sqe.DPTR().Identifier() != nvmeof.SGLInCapsule {
			f.fail("Connect data not in the capsule (SGL %#x)", sqe.DPTR().Identifier())
		}
		if len(data) != nvmeof.ConnectDataSize {
			f.fail("Connect with %d bytes of data", len(data))
		}
		q.qid = sqe.Connect().QID()
		return q.respond(sqe.CID(), 0, uint64(nvmeof.ConnectResult(1, f.authreq)))
	}
	if q.qid == 0 {
		return q.admin(sqe, kind)
	}
	if f.io != nil && f.io(q, sqe) {
		return nil
	}
	if d := sqe.DPTR(); kind != nvmeof.KindWrite && kind != nvmeof.KindDatasetManagement && kind != nvmeof.KindRead &&
		(d.Identifier() != sglTransport || d.Length() != 0 || d.Address() != 0) {
		f.fail("%v without data: DPTR % x, want a zero-length 0x5A descriptor", kind, []byte(d))
	}
	rw := sqe.RW()
	off, n := int(rw.SLBA())*512, int(rw.Blocks())*512
	if kind == nvmeof.KindRead || kind == nvmeof.KindWrite || kind == nvmeof.KindWriteZeroes {
		if off+n > len(f.disk) {
			return q.respond(sqe.CID(), nvmeof.StatusLBAOutOfRange, 0)
		}
	}
	switch kind {
	case nvmeof.KindRead:
		if d := sqe.DPTR(); d.Identifier() != sglTransport || int(d.Length()) != n {
			f.fail("read DPTR % x, want 0x5A for %d bytes", []byte(d), n)
		}
		f.mu.Lock()
		data := append([]byte(nil), f.disk[off:off+n]...)
		f.mu.Unlock()
		if err := q.c2hData(sqe.CID(), data, f.success); err != nil || f.success {
			return err
		}
	case nvmeof.KindWrite:
		data, err := q.dataOut(sqe, inline)
		if err != nil {
			return err
		}
		if len(data) != n {
			f.fail("write of %d blocks with %d bytes", n/512, len(data))
		}
		f.mu.Lock()
		copy(f.disk[off:off+n], data)
		f.mu.Unlock()
	case nvmeof.KindWriteZeroes:
		f.mu.Lock()
		clear(f.disk[off : off+n])
		f.mu.Unlock()
	case nvmeof.KindDatasetManagement:
		data, err := q.dataOut(sqe, inline)
		if err != nil {
			return err
		}
		for i := 0; i+nvmeof.DSMRangeSize <= len(data); i += nvmeof.DSMRangeSize {
			r := nvmeof.DSMRange(data[i:])
			o, l := int(r.SLBA())*512, int(r.Length())*512
			f.mu.Lock()
			clear(f.disk[o:min(o+l, len(f.disk))])
			f.mu.Unlock()
		}
	}
	return q.respond(sqe.CID(), 0, 0)
}

func (q *tcpFakeQueue) admin(sqe nvmeof.SQE, kind nvmeof.CommandKind) error {
	f := q.f
	var data []byte
	var res uint64
	switch kind {
	case nvmeof.KindPropertyGet:
		switch sqe.Property().Offset() {
		case nvmeof.PropCAP:
			res = uint64(nvmeof.MakeCAP(nvmeof.CAPFields{MQES: 127, CQR: true, TO: 2, CSS: nvmeof.CAPCSSNVM}))
		case nvmeof.PropVS:
			res = uint64(nvmeof.MakeVersion(1, 4, 0))
		case nvmeof.PropCSTS:
			var cs nvmeof.CSTS
			if q.cc.EN() {
				cs |= nvmeof.CSTSReady
			}
			if q.cc.SHN() != 0 {
				cs = cs.WithSHST(nvmeof.ShutdownStatusComplete)
			}
			res = uint64(cs)
		}
	case nvmeof.KindPropertySet:
		if sqe.Property().Offset() == nvmeof.PropCC {
			q.cc = nvmeof.CC(sqe.Property().Value())
		}
	case nvmeof.KindIdentify:
		data = make([]byte, nvmeof.IdentifySize)
		switch sqe.Identify().CNS() {
		case nvmeof.CNSController:
			id := nvmeof.IdentifyController{SN: "fake", MN: "fake", FR: "1", CNTLID: 1, VER: nvmeof.MakeVersion(1, 4, 0),
				KAS: 10, SQES: 0x66, CQES: 0x44, MAXCMD: 128, NN: 1, MDTS: 5, SGLS: nvmeof.SGLSDwordAligned | nvmeof.SGLSOffset,
				SUBNQN: fakeNQN, IOCCSZ: f.ioccsz, IORCSZ: 1, CNTRLTYPE: nvmeof.ControllerTypeIO,
				ONCS: nvmeof.ONCSWriteZeroes | nvmeof.ONCSDSM, VWC: nvmeof.VWCPresent}
			id.Encode(data)
		case nvmeof.CNSNamespace:
			if sqe.NSID() == 1 {
				ns := nvmeof.IdentifyNamespace{NSZE: 2048, NCAP: 2048, NUSE: 2048, LBAF: []nvmeof.LBAFormat{{LBADS: 9}}}
				ns.Encode(data)
			}
		case nvmeof.CNSActiveNSList:
			nvmeof.EncodeNSIDList(data, []uint32{1})
		default:
			return q.respond(sqe.CID(), nvmeof.StatusInvalidField.WithDNR(), 0)
		}
	case nvmeof.KindSetFeatures:
		if sqe.Features().FID() == nvmeof.FeatNumQueues {
			res = uint64(nvmeof.NumQueuesValue(3, 3))
		}
	case nvmeof.KindAsyncEventRequest:
		return nil // held
	case nvmeof.KindGetLogPage:
		data = make([]byte, sqe.GetLogPage().Length())
	}
	if d := sqe.DPTR(); d.Identifier() != sglTransport || int(d.Length()) != len(data) {
		f.fail("admin %v DPTR % x, want 0x5A for %d bytes", kind, []byte(d), len(data))
	}
	if len(data) > 0 {
		if err := q.c2hData(sqe.CID(), data, false); err != nil {
			return err
		}
	}
	return q.respond(sqe.CID(), 0, res)
}
