package target

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/tcp"
	"github.com/rdisk/rdisk/rdma/iwarp"
)

// NVMe/TCP tests: a raw PDU client (tc) drives the target's TCP binding,
// so that every PDU and every error can be made on purpose.

// tcpTarget starts a target with one RAM namespace on a loopback port of
// the given transport.
func tcpTarget(t testing.TB, size int64, tr Transport) (*Target, *Port) {
	t.Helper()
	return tcpTargetLog(t, size, tr, nil)
}

// tcpTargetLog is tcpTarget logging to log (nil: nowhere, or to stderr
// with RDISK_TEST_LOG set).
func tcpTargetLog(t testing.TB, size int64, tr Transport, log *slog.Logger) (*Target, *Port) {
	t.Helper()
	return tcpTargetCfg(t, size, tr, Config{Logger: log})
}

// tcpTargetCfg is tcpTarget with cfg (its provider set here for RDMA).
func tcpTargetCfg(t testing.TB, size int64, tr Transport, cfg Config) (*Target, *Port) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
		if os.Getenv("RDISK_TEST_LOG") != "" {
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
	}
	if tr != TransportTCP {
		p, err := iwarp.New(iwarp.Config{})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Provider = p
	}
	tg, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	sub, err := tg.AddSubsystem(SubsystemConfig{NQN: testNQN, AllowAnyHost: true})
	if err != nil {
		t.Fatal(err)
	}
	disk, err := backstore.NewMem(size, 512)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.AddNamespace(NamespaceConfig{NSID: 1, Disk: disk}); err != nil {
		t.Fatal(err)
	}
	port, err := tg.AddPort(PortConfig{ID: 1, Addr: "127.0.0.1:0", Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	port.LinkSubsystem(sub)
	return tg, port
}

// tc is a raw NVMe/TCP host connection.
type tc struct {
	t            testing.TB
	c            net.Conn
	hdgst, ddgst bool
	cid          uint16
	maxH2C       int
	// h2cChunk splits H2CData into PDUs of at most this size (0: one).
	h2cChunk int
}

// dialTC connects and exchanges ICReq/ICResp with the digests asked.
func dialTC(t testing.TB, addr string, digest uint8) *tc { return dialTCPDA(t, addr, digest, 0) }

// dialTCPDA is dialTC asking for C2H data aligned to (hpda+1)*4 bytes.
func dialTCPDA(t testing.TB, addr string, digest, hpda uint8) *tc {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	q := &tc{t: t, c: c, hdgst: digest&tcp.DigestHeader != 0, ddgst: digest&tcp.DigestData != 0}
	var b [tcp.ICSize]byte
	tcp.IC(b[:]).Encode(tcp.TypeICReq, &tcp.ICFields{Digest: digest, PDA: hpda})
	if _, err := c.Write(b[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, b[:]); err != nil {
		t.Fatalf("reading ICResp: %v", err)
	}
	f, err := tcp.CheckICResp(b[:], digest)
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != tcp.TypeICResp || f.PDA != 0 {
		t.Fatalf("ICResp %x", b[:16])
	}
	q.maxH2C = int(f.Max)
	return q
}

// send writes one PDU of type typ: fill sets the type's header fields.
func (q *tc) send(typ, flags uint8, fill func(h []byte), data []byte) {
	q.t.Helper()
	if _, err := q.c.Write(q.build(typ, flags, fill, data)); err != nil {
		q.t.Fatalf("sending %s: %v", tcp.TypeName(typ), err)
	}
}

func (q *tc) build(typ, flags uint8, fill func(h []byte), data []byte) []byte {
	hlen := map[uint8]int{tcp.TypeCapsuleCmd: tcp.CapsuleCmdHLen, tcp.TypeH2CData: tcp.DataHLen, tcp.TypeH2CTermReq: tcp.TermReqHLen}[typ]
	h := make([]byte, hlen)
	pad := tcp.Header(h).Put(typ, flags, hlen, q.hdgst, len(data), q.ddgst, 4)
	if fill != nil {
		fill(h)
	}
	out := append([]byte(nil), h...)
	if q.hdgst && typ != tcp.TypeH2CTermReq {
		out = append(out, 0, 0, 0, 0)
		tcp.PutDigest(out[hlen:], tcp.Digest(h))
	}
	out = append(out, make([]byte, pad)...)
	out = append(out, data...)
	if len(data) > 0 && q.ddgst {
		var d [4]byte
		tcp.PutDigest(d[:], tcp.Digest(data))
		out = append(out, d[:]...)
	}
	return out
}

// recv reads one PDU: its header (without digest) and data.
func (q *tc) recv() (tcp.Header, []byte) {
	q.t.Helper()
	h := make([]byte, tcp.CommonHeaderSize, tcp.MaxHeaderSize)
	if _, err := io.ReadFull(q.c, h); err != nil {
		q.t.Fatalf("reading a PDU: %v", err)
	}
	rest, ferr := tcp.CheckHeader(h, tcp.Host, q.hdgst)
	if ferr != nil {
		q.t.Fatalf("bad PDU from the target: %v", ferr)
	}
	h = h[:tcp.CommonHeaderSize+rest]
	if _, err := io.ReadFull(q.c, h[tcp.CommonHeaderSize:]); err != nil {
		q.t.Fatal(err)
	}
	l, ferr := tcp.CheckPDU(h, q.hdgst, q.ddgst, 4)
	if ferr != nil {
		q.t.Fatalf("bad PDU from the target: %v", ferr)
	}
	if _, err := io.ReadFull(q.c, make([]byte, l.Pad)); err != nil {
		q.t.Fatal(err)
	}
	data := make([]byte, l.DataLen)
	if _, err := io.ReadFull(q.c, data); err != nil {
		q.t.Fatal(err)
	}
	if l.DataDigest {
		var d [4]byte
		io.ReadFull(q.c, d[:])
		if tcp.GetDigest(d[:]) != tcp.Digest(data) {
			q.t.Fatal("data digest from the target does not match")
		}
	}
	return tcp.Header(h[:tcp.Header(h).HLen()]), data
}

// exec runs a command: in-capsule data inCap, or out sent after R2T, or
// data read into in. It returns the completion.
func (q *tc) exec(sqe nvmeof.SQE, inCap, out, in []byte) nvmeof.CQEFields {
	q.t.Helper()
	q.cid++
	s := append(nvmeof.SQE(nil), sqe...)
	s.SetCID(q.cid)
	s[1] |= 0x40 // PSDT: SGLs
	switch {
	case inCap != nil:
		s.DPTR().Encode(&nvmeof.SGLFields{Identifier: nvmeof.SGLInCapsule, Length: uint32(len(inCap))})
	case out != nil:
		s.DPTR().Encode(&nvmeof.SGLFields{Identifier: nvmeof.SGLTransport, Length: uint32(len(out))})
	default:
		s.DPTR().Encode(&nvmeof.SGLFields{Identifier: nvmeof.SGLTransport, Length: uint32(len(in))})
	}
	q.send(tcp.TypeCapsuleCmd, 0, func(h []byte) { copy(h[8:], s) }, inCap)
	for {
		h, data := q.recv()
		switch h.Type() {
		case tcp.TypeR2T:
			f := tcp.Data(h).Fields()
			if f.CCCID != q.cid || int(f.Offset)+int(f.Length) > len(out) {
				q.t.Fatalf("R2T %+v for a %d-byte write", f, len(out))
			}
			chunk := int(f.Length)
			if q.h2cChunk > 0 {
				chunk = q.h2cChunk
			}
			for off := int(f.Offset); off < int(f.Offset+f.Length); off += chunk {
				n := min(chunk, int(f.Offset+f.Length)-off)
				flags := uint8(0)
				if off+n == int(f.Offset+f.Length) {
					flags = tcp.FlagLast
				}
				q.send(tcp.TypeH2CData, flags, func(h []byte) {
					tcp.Data(h).Encode(&tcp.DataFields{CCCID: f.CCCID, TTag: f.TTag, Offset: uint32(off), Length: uint32(n)})
				}, out[off:off+n])
			}
		case tcp.TypeC2HData:
			f := tcp.Data(h).Fields()
			copy(in[f.Offset:], data)
			if h.Flags()&tcp.FlagSuccess != 0 {
				return nvmeof.CQEFields{CID: f.CCCID, Status: nvmeof.StatusSuccess}
			}
		case tcp.TypeCapsuleResp:
			f := nvmeof.CQE(h[8:24]).Fields()
			if f.CID != q.cid {
				q.t.Logf("completion of command %d (an AER?)", f.CID)
				continue
			}
			return f
		case tcp.TypeC2HTermReq:
			q.t.Fatalf("target terminated: FES %d FEI %d", tcp.TermReq(h).FES(), tcp.TermReq(h).FEI())
		}
	}
}

// expectTerm reads until a C2HTermReq and the close, and checks its FES.
func (q *tc) expectTerm(fes uint16, fei int) {
	q.t.Helper()
	for {
		h := make([]byte, tcp.CommonHeaderSize)
		if _, err := io.ReadFull(q.c, h); err != nil {
			q.t.Fatalf("connection ended without C2HTermReq: %v", err)
		}
		rest := int(tcp.Header(h).PLen()) - tcp.CommonHeaderSize
		body := make([]byte, rest)
		if _, err := io.ReadFull(q.c, body); err != nil {
			q.t.Fatal(err)
		}
		if h[0] != tcp.TypeC2HTermReq {
			continue
		}
		tr := tcp.TermReq(append(h, body...))
		if tr.FES() != fes || (fei >= 0 && tr.FEI() != uint32(fei)) {
			q.t.Fatalf("C2HTermReq FES %d (%s) FEI %d, want FES %d FEI %d", tr.FES(), tcp.FESName(tr.FES()), tr.FEI(), fes, fei)
		}
		if _, err := q.c.Read(make([]byte, 1)); err == nil {
			q.t.Fatal("connection still open after C2HTermReq")
		}
		return
	}
}

func (q *tc) connect(qid, sqsize uint16, cntlid uint16) nvmeof.CQEFields {
	d := make([]byte, nvmeof.ConnectDataSize)
	nvmeof.ConnectData(d).Encode(&nvmeof.ConnectDataFields{HostID: [16]byte{1, 2, 3}, CNTLID: cntlid, SubNQN: testNQN, HostNQN: hostNQN})
	sqe := make(nvmeof.SQE, 64)
	sqe.Connect().Encode(&nvmeof.ConnectFields{QID: qid, SQSize: sqsize})
	// Linux nvme-tcp sends Connect data in the capsule.
	return q.exec(sqe, d, nil, nil)
}

func (q *tc) prop(set bool, off uint32, v uint64) nvmeof.CQEFields {
	sqe := make(nvmeof.SQE, 64)
	fc := nvmeof.FCTypePropertyGet
	if set {
		fc = nvmeof.FCTypePropertySet
	}
	sqe.Property().Encode(&nvmeof.PropertyFields{FCType: fc, Offset: off, Value: v, Size8: off == nvmeof.PropCAP})
	return q.exec(sqe, nil, nil, nil)
}

// tcpAdmin connects an admin queue and enables the controller.
func tcpAdmin(t testing.TB, addr string, digest uint8) (*tc, uint16) {
	q := dialTC(t, addr, digest)
	f := must(t, q.connect(0, 31, nvmeof.CNTLIDDynamic), "connect")
	must(t, q.prop(true, nvmeof.PropCC, uint64(nvmeof.MakeCC(nvmeof.CCFields{EN: true, IOSQES: 6, IOCQES: 4}))), "set CC")
	if st := must(t, q.prop(false, nvmeof.PropCSTS, 0), "get CSTS"); !nvmeof.CSTS(st.Result).RDY() {
		t.Fatalf("CSTS %#x", st.Result)
	}
	sqe := make(nvmeof.SQE, 64)
	sqe.Features().Encode(&nvmeof.FeaturesFields{Opcode: nvmeof.AdminSetFeatures, FID: nvmeof.FeatNumQueues, CDW11: nvmeof.NumQueuesValue(3, 3)})
	must(t, q.exec(sqe, nil, nil, nil), "set number of queues")
	return q, uint16(f.Result)
}

func tcpRW(q *tc, write bool, slba uint64, data []byte) nvmeof.CQEFields {
	sqe := make(nvmeof.SQE, 64)
	op := nvmeof.IORead
	if write {
		op = nvmeof.IOWrite
	}
	sqe.RW().Encode(&nvmeof.RWFields{Opcode: op, NSID: 1, SLBA: slba, NLB: uint16(len(data)/512 - 1)})
	if write {
		return q.exec(sqe, nil, data, nil)
	}
	return q.exec(sqe, nil, nil, data)
}

func TestTCPConnectIdentifyReadWrite(t *testing.T) {
	t.Parallel()
	for _, digest := range []uint8{0, tcp.DigestHeader, tcp.DigestData, tcp.DigestHeader | tcp.DigestData} {
		t.Run(fmt.Sprintf("digest%d", digest), func(t *testing.T) {
			t.Parallel()
			_, port := tcpTarget(t, 64<<20, TransportTCP)
			addr := port.Addr().String()
			aq, cntlid := tcpAdmin(t, addr, digest)
			idb := make([]byte, 4096)
			sqe := make(nvmeof.SQE, 64)
			sqe.Identify().Encode(&nvmeof.IdentifyFields{CNS: nvmeof.CNSController})
			must(t, aq.exec(sqe, nil, nil, idb), "identify")
			id, err := nvmeof.ParseIdentifyController(idb)
			if err != nil {
				t.Fatal(err)
			}
			// Linux nvme-tcp: ICDOFF 0, SGL support; no keyed SGLs on TCP.
			if id.CNTLID != cntlid || id.ICDOFF != 0 || id.SGLS&3 == 0 || id.SGLS&nvmeof.SGLSKeyed != 0 || id.IOCCSZ*16 != 64+128<<10 {
				t.Fatalf("identify controller: CNTLID %d ICDOFF %d SGLS %#x IOCCSZ %d", id.CNTLID, id.ICDOFF, id.SGLS, id.IOCCSZ)
			}
			io := dialTC(t, addr, digest)
			must(t, io.connect(1, 127, cntlid), "I/O queue connect")
			data := make([]byte, 128<<10)
			rand.Read(data)
			io.h2cChunk = 16 << 10 // several H2CData PDUs per R2T
			must(t, tcpRW(io, true, 100, data), "write")
			got := make([]byte, len(data))
			must(t, tcpRW(io, false, 100, got), "read")
			if !bytes.Equal(got, data) {
				t.Fatal("read data differs from written")
			}
			small := make([]byte, 4096)
			rand.Read(small)
			sqe = make(nvmeof.SQE, 64)
			sqe.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IOWrite, NSID: 1, SLBA: 7, NLB: 7})
			must(t, io.exec(sqe, small, nil, nil), "in-capsule write")
			got = make([]byte, 4096)
			must(t, tcpRW(io, false, 7, got), "read back")
			if !bytes.Equal(got, small) {
				t.Fatal("in-capsule write not read back")
			}
			// Keyed SGLs are RDMA's.
			sqe = make(nvmeof.SQE, 64)
			sqe.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IORead, NSID: 1, NLB: 0})
			io.cid++
			sqe.SetCID(io.cid)
			sqe[1] |= 0x40
			sqe.DPTR().Encode(&nvmeof.SGLFields{Identifier: nvmeof.SGLKeyedInvalidate, Length: 512, Key: 1})
			io.send(tcp.TypeCapsuleCmd, 0, func(h []byte) { copy(h[8:], sqe) }, nil)
			h, _ := io.recv()
			wantStatus(t, nvmeof.CQE(h[8:24]).Fields(), nvmeof.StatusSGLInvalidType.WithDNR(), "keyed SGL over TCP")
			wantStatus(t, tcpRW(io, false, 64<<20/512-1, make([]byte, 1024)), nvmeof.StatusLBAOutOfRange.WithDNR(), "read past the end")
		})
	}
}

// TestTCPHostPDA: C2HData honours the host's data alignment (HPDA): the
// data starts at a multiple of (HPDA+1)*4 bytes, padding in between.
func TestTCPHostPDA(t *testing.T) {
	t.Parallel()
	_, port := tcpTarget(t, 1<<20, TransportTCP)
	q := dialTCPDA(t, port.Addr().String(), tcp.DigestHeader|tcp.DigestData, 7)
	must(t, q.connect(0, 31, nvmeof.CNTLIDDynamic), "connect")
	must(t, q.prop(true, nvmeof.PropCC, uint64(nvmeof.MakeCC(nvmeof.CCFields{EN: true, IOSQES: 6, IOCQES: 4}))), "set CC")
	sqe := make(nvmeof.SQE, 64)
	sqe.Identify().Encode(&nvmeof.IdentifyFields{CNS: nvmeof.CNSController})
	q.cid++
	sqe.SetCID(q.cid)
	sqe[1] |= 0x40
	sqe.DPTR().Encode(&nvmeof.SGLFields{Identifier: nvmeof.SGLTransport, Length: 4096})
	q.send(tcp.TypeCapsuleCmd, 0, func(h []byte) { copy(h[8:], sqe) }, nil)
	h, data := q.recv()
	if h.Type() != tcp.TypeC2HData || h.PDO()%32 != 0 || h.PDO() < tcp.DataHLen+tcp.DigestSize || len(data) != 4096 {
		t.Fatalf("C2HData PDO %d (want a multiple of 32), %d bytes", h.PDO(), len(data))
	}
	if id, err := nvmeof.ParseIdentifyController(data); err != nil || id.SUBNQN != testNQN {
		t.Fatalf("identify data after the padding: %v %q", err, id.SUBNQN)
	}
}

func TestTCPDisabledSQFlowSuccessFlag(t *testing.T) {
	t.Parallel()
	_, port := tcpTarget(t, 1<<20, TransportTCP)
	q := dialTC(t, port.Addr().String(), 0)
	d := make([]byte, nvmeof.ConnectDataSize)
	nvmeof.ConnectData(d).Encode(&nvmeof.ConnectDataFields{CNTLID: nvmeof.CNTLIDDynamic, SubNQN: testNQN, HostNQN: hostNQN})
	sqe := make(nvmeof.SQE, 64)
	sqe.Connect().Encode(&nvmeof.ConnectFields{QID: 0, SQSize: 31, CAttr: nvmeof.ConnectAttrDisableSQFlow})
	must(t, q.exec(sqe, d, nil, nil), "connect")
	// A read that succeeds ends with C2HData carrying SUCCESS and no
	// response capsule (exec returns on it).
	sqe = make(nvmeof.SQE, 64)
	sqe.Identify().Encode(&nvmeof.IdentifyFields{CNS: nvmeof.CNSController})
	q.prop(true, nvmeof.PropCC, uint64(nvmeof.MakeCC(nvmeof.CCFields{EN: true, IOSQES: 6, IOCQES: 4})))
	f := q.exec(sqe, nil, nil, make([]byte, 4096))
	if f.Status != nvmeof.StatusSuccess || f.CID != q.cid {
		t.Fatalf("identify: %+v", f)
	}
	// The next PDU answers the next command: nothing else was queued.
	must(t, q.prop(false, nvmeof.PropCSTS, 0), "get CSTS")
}

func TestTCPProtocolErrors(t *testing.T) {
	t.Parallel()
	_, port := tcpTarget(t, 1<<20, TransportTCP)
	addr := port.Addr().String()
	raw := func(t *testing.T) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c
	}
	ioq := func(t *testing.T, digest uint8) *tc {
		_, cntlid := tcpAdmin(t, addr, digest)
		q := dialTC(t, addr, digest)
		must(t, q.connect(1, 31, cntlid), "I/O connect")
		return q
	}
	writeSQE := func(q *tc, blocks int) nvmeof.SQE {
		sqe := make(nvmeof.SQE, 64)
		sqe.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IOWrite, NSID: 1, NLB: uint16(blocks - 1)})
		q.cid++
		sqe.SetCID(q.cid)
		sqe[1] |= 0x40
		sqe.DPTR().Encode(&nvmeof.SGLFields{Identifier: nvmeof.SGLTransport, Length: uint32(blocks * 512)})
		return sqe
	}
	t.Run("data before ICReq", func(t *testing.T) {
		t.Parallel()
		q := &tc{t: t, c: raw(t)}
		q.send(tcp.TypeCapsuleCmd, 0, nil, nil)
		q.expectTerm(tcp.FESPDUSequenceError, -1)
	})
	t.Run("bad PFV", func(t *testing.T) {
		t.Parallel()
		q := &tc{t: t, c: raw(t)}
		var b [tcp.ICSize]byte
		tcp.IC(b[:]).Encode(tcp.TypeICReq, &tcp.ICFields{PFV: 1})
		q.c.Write(b[:])
		q.expectTerm(tcp.FESUnsupportedParameter, 8)
	})
	t.Run("unknown PDU type", func(t *testing.T) {
		t.Parallel()
		q := dialTC(t, addr, 0)
		q.c.Write([]byte{0x08, 0, 24, 0, 24, 0, 0, 0})
		q.expectTerm(tcp.FESInvalidHeaderField, 0)
	})
	t.Run("oversized PDU", func(t *testing.T) {
		t.Parallel()
		q := dialTC(t, addr, 0)
		b := q.build(tcp.TypeCapsuleCmd, 0, nil, make([]byte, 200<<10))
		q.c.Write(b[:tcp.CapsuleCmdHLen])
		q.expectTerm(tcp.FESDataLimitExceeded, -1)
	})
	t.Run("header digest mismatch", func(t *testing.T) {
		t.Parallel()
		q := dialTC(t, addr, tcp.DigestHeader)
		b := q.build(tcp.TypeCapsuleCmd, 0, nil, nil)
		b[tcp.CapsuleCmdHLen] ^= 0xff
		q.c.Write(b)
		q.expectTerm(tcp.FESHeaderDigestError, -1)
	})
	t.Run("data digest mismatch", func(t *testing.T) {
		t.Parallel()
		q := ioq(t, tcp.DigestData)
		sqe := make(nvmeof.SQE, 64)
		sqe.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IOWrite, NSID: 1, NLB: 0})
		q.cid++
		sqe.SetCID(q.cid)
		sqe[1] |= 0x40
		sqe.DPTR().Encode(&nvmeof.SGLFields{Identifier: nvmeof.SGLInCapsule, Length: 512})
		b := q.build(tcp.TypeCapsuleCmd, 0, func(h []byte) { copy(h[8:], sqe) }, make([]byte, 512))
		b[len(b)-1] ^= 0xff
		q.c.Write(b)
		h, _ := q.recv()
		wantStatus(t, nvmeof.CQE(h[8:24]).Fields(), nvmeof.StatusTransientTransportError, "write with a bad data digest")
		// The connection goes on.
		must(t, tcpRW(q, false, 0, make([]byte, 512)), "read after a data digest error")
	})
	t.Run("H2CData for an unknown transfer", func(t *testing.T) {
		t.Parallel()
		q := ioq(t, 0)
		q.send(tcp.TypeH2CData, tcp.FlagLast, func(h []byte) {
			tcp.Data(h).Encode(&tcp.DataFields{CCCID: 9, TTag: 3, Length: 512})
		}, make([]byte, 512))
		q.expectTerm(tcp.FESInvalidHeaderField, -1)
	})
	t.Run("H2CData beyond the R2T", func(t *testing.T) {
		t.Parallel()
		q := ioq(t, 0)
		sqe := writeSQE(q, 2)
		q.send(tcp.TypeCapsuleCmd, 0, func(h []byte) { copy(h[8:], sqe) }, nil)
		h, _ := q.recv()
		if h.Type() != tcp.TypeR2T {
			t.Fatalf("got %s, want R2T", tcp.TypeName(h.Type()))
		}
		f := tcp.Data(h).Fields()
		q.send(tcp.TypeH2CData, tcp.FlagLast, func(h []byte) {
			tcp.Data(h).Encode(&tcp.DataFields{CCCID: f.CCCID, TTag: f.TTag, Offset: 512, Length: 1024})
		}, make([]byte, 1024))
		q.expectTerm(tcp.FESDataOutOfRange, -1)
	})
	t.Run("H2CTermReq", func(t *testing.T) {
		t.Parallel()
		q := dialTC(t, addr, 0)
		q.send(tcp.TypeH2CTermReq, 0, func(h []byte) { h[8] = byte(tcp.FESPDUSequenceError) }, nil)
		if _, err := q.c.Read(make([]byte, 1)); err == nil {
			t.Fatal("connection open after H2CTermReq")
		}
	})
	// The target still serves after all of that.
	q, _ := tcpAdmin(t, addr, 0)
	must(t, q.prop(false, nvmeof.PropVS, 0), "property get after the errors")
}

// TestTCPAndRDMAOnePort: NVMe/TCP and NVMe/RDMA (iWARP) on one port number;
// the discovery log lists the port with the transport the host came by.
func TestTCPAndRDMAOnePort(t *testing.T) {
	t.Parallel()
	_, port := tcpTarget(t, 1<<20, TransportBoth)
	addr := port.Addr().String()
	// RDMA.
	aq, _ := admin(t, addr, testNQN, hostNQN, 0)
	must(t, aq.propGet(nvmeof.PropVS, false), "RDMA property get")
	// TCP, then discovery over TCP.
	tq, _ := tcpAdmin(t, addr, tcp.DigestHeader|tcp.DigestData)
	must(t, tq.prop(false, nvmeof.PropVS, 0), "TCP property get")
	dq := dialTC(t, addr, 0)
	d := make([]byte, nvmeof.ConnectDataSize)
	nvmeof.ConnectData(d).Encode(&nvmeof.ConnectDataFields{CNTLID: nvmeof.CNTLIDDynamic, SubNQN: nvmeof.DiscoveryNQN, HostNQN: hostNQN})
	sqe := make(nvmeof.SQE, 64)
	sqe.Connect().Encode(&nvmeof.ConnectFields{QID: 0, SQSize: 31})
	must(t, dq.exec(sqe, d, nil, nil), "discovery connect")
	must(t, dq.prop(true, nvmeof.PropCC, uint64(nvmeof.MakeCC(nvmeof.CCFields{EN: true, IOSQES: 6, IOCQES: 4}))), "set CC")
	page := make([]byte, 4096)
	sqe = make(nvmeof.SQE, 64)
	sqe.GetLogPage().Encode(&nvmeof.GetLogPageFields{LID: nvmeof.LogDiscovery, NUMD: 4096/4 - 1})
	must(t, dq.exec(sqe, nil, nil, page), "discovery log")
	hdr, err := nvmeof.ParseDiscoveryLogHeader(page)
	if err != nil || hdr.NumRec != 1 {
		t.Fatalf("discovery log header %+v, %v", hdr, err)
	}
	e, err := nvmeof.ParseDiscoveryLogEntry(page[1024:])
	if err != nil || e.TrType != nvmeof.TrTypeTCP || e.SubNQN != testNQN {
		t.Fatalf("discovery entry %+v, %v", e, err)
	}
}

// TestTCPCloseMidIO: a target closing with commands in flight ends the
// connection; nothing hangs.
func TestTCPTargetClose(t *testing.T) {
	t.Parallel()
	tg, port := tcpTarget(t, 1<<20, TransportTCP)
	q, _ := tcpAdmin(t, port.Addr().String(), 0)
	done := make(chan error, 1)
	go func() {
		_, err := q.c.Read(make([]byte, 1))
		done <- err
	}()
	tg.Close()
	select {
	case err := <-done:
		if err == nil || !(errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || err != nil) {
			t.Fatalf("read after close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("connection still open 10 s after the target closed")
	}
}

// socketPair returns the two ends of a connected stream socket pair.
func socketPair(t testing.TB) (net.Conn, net.Conn) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	var cs [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = c
	}
	return cs[0], cs[1]
}

// FuzzTCPConn feeds arbitrary bytes after a valid ICReq (and, for half the
// inputs, a Connect) to a live queue: the target must never panic, touch
// memory outside a request or hang.
func FuzzTCPConn(f *testing.F) {
	tg, port := tcpTarget(f, 1<<20, TransportTCP)
	_ = tg
	q := &tc{t: f}
	d := make([]byte, nvmeof.ConnectDataSize)
	nvmeof.ConnectData(d).Encode(&nvmeof.ConnectDataFields{CNTLID: nvmeof.CNTLIDDynamic, SubNQN: testNQN, HostNQN: hostNQN})
	sqe := make(nvmeof.SQE, 64)
	sqe.Connect().Encode(&nvmeof.ConnectFields{QID: 0, SQSize: 31})
	sqe[1] |= 0x40
	sqe.DPTR().Encode(&nvmeof.SGLFields{Identifier: nvmeof.SGLInCapsule, Length: nvmeof.ConnectDataSize})
	connect := q.build(tcp.TypeCapsuleCmd, 0, func(h []byte) { copy(h[8:], sqe) }, d)
	f.Add(connect, uint8(0))
	f.Add(q.build(tcp.TypeH2CData, tcp.FlagLast, func(h []byte) { tcp.Data(h).Encode(&tcp.DataFields{Length: 4}) }, []byte("data")), uint8(1))
	f.Add(q.build(tcp.TypeCapsuleCmd, 0, nil, make([]byte, 100)), uint8(2))
	f.Fuzz(func(t *testing.T, b []byte, opts uint8) { fuzzTCPConn(t, port, connect, b, opts) })
}

func fuzzTCPConn(t *testing.T, port *Port, connect, b []byte, opts uint8) {
	{
		// A socket pair instead of a TCP connection per input (which
		// would exhaust the ephemeral ports): the target's side runs
		// serveStream as an accepted connection would.
		c, srv := socketPair(t)
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		served := make(chan struct{})
		go func() {
			defer close(served)
			port.serveStream(srv, nil)
		}()
		defer func() {
			select {
			case <-served:
			case <-time.After(5 * time.Second):
				t.Fatal("the target's side did not end within 5 s of the input's end")
			}
		}()
		var ic [tcp.ICSize]byte
		tcp.IC(ic[:]).Encode(tcp.TypeICReq, &tcp.ICFields{Digest: opts & 3})
		msg := append(ic[:], b...)
		if opts&4 != 0 {
			msg = append(append(ic[:0:0], ic[:]...), append(connect, b...)...)
		}
		go func() {
			c.Write(msg)
			c.(*net.UnixConn).CloseWrite()
		}()
		// The target ends the connection: at the end of the input, or on
		// an error. Drain until then.
		if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, net.ErrClosed) {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the target did not end the connection within 5 s")
			}
		}
	}
}
