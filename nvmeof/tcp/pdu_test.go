package tcp

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
)

func TestICReqGolden(t *testing.T) {
	b := make([]byte, ICSize)
	IC(b).Encode(TypeICReq, &ICFields{PFV: 0, PDA: 0, Digest: DigestHeader | DigestData, Max: 0})
	// struct nvme_tcp_icreq_pdu as Linux nvme_tcp_init_connection fills it
	// with -g -G: type 0, hlen 128, pdo 0, plen 128, pfv 0, hpda 0,
	// digest 3, maxr2t 0.
	want, _ := hex.DecodeString("00008000800000000000000300000000")
	if !bytes.Equal(b[:16], want) || !bytes.Equal(b[16:], make([]byte, ICSize-16)) {
		t.Fatalf("ICReq = %x, want %x and zeroes", b[:16], want)
	}
	rest, err := CheckHeader(b, Controller, false)
	if err != nil || rest != ICSize-CommonHeaderSize {
		t.Fatalf("CheckHeader = %d, %v", rest, err)
	}
	if _, err := CheckPDU(b, false, false, 4); err != nil {
		t.Fatal(err)
	}
	f, err := CheckICReq(b)
	if err != nil || f.Digest != 3 {
		t.Fatalf("CheckICReq = %+v, %v", f, err)
	}
}

func TestICRespCheck(t *testing.T) {
	b := make([]byte, ICSize)
	IC(b).Encode(TypeICResp, &ICFields{Digest: DigestHeader, Max: 0x400000})
	if _, err := CheckICResp(b, DigestHeader); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckICResp(b, 0); err == nil {
		t.Fatal("digest mismatch accepted")
	}
	IC(b).Encode(TypeICResp, &ICFields{Max: 100})
	if _, err := CheckICResp(b, 0); err == nil {
		t.Fatal("MAXH2CDATA 100 accepted")
	}
}

func TestBadPFV(t *testing.T) {
	b := make([]byte, ICSize)
	IC(b).Encode(TypeICReq, &ICFields{PFV: 1})
	_, err := CheckICReq(b)
	if err == nil || err.FES != FESUnsupportedParameter || err.FEI != offPFV {
		t.Fatalf("bad PFV: %v", err)
	}
}

// pdu builds a whole PDU of type typ with header fields fill, data and the
// digests, as a sender would.
func pdu(typ uint8, flags uint8, hdgst, ddgst bool, pda int, fill func(h []byte), data []byte) []byte {
	hlen := hlenOf(typ)
	h := make([]byte, hlen)
	pad := Header(h).Put(typ, flags, hlen, hdgst, len(data), ddgst, pda)
	if fill != nil {
		fill(h)
	}
	out := append([]byte(nil), h...)
	if hdgst && hasHeaderDigest(typ) {
		out = append(out, 0, 0, 0, 0)
		PutDigest(out[hlen:], Digest(h))
	}
	out = append(out, make([]byte, pad)...)
	out = append(out, data...)
	if len(data) > 0 && ddgst {
		var d [4]byte
		PutDigest(d[:], Digest(data))
		out = append(out, d[:]...)
	}
	return out
}

// receive parses a whole PDU as a receiver in role r would.
func receive(b []byte, r Role, hdgst, ddgst bool, pda int) (Layout, *Error) {
	rest, err := CheckHeader(b, r, hdgst)
	if err != nil {
		return Layout{}, err
	}
	if len(b) < CommonHeaderSize+rest {
		return Layout{}, fatal(FESInvalidHeaderField, 0, "short")
	}
	return CheckPDU(b[:CommonHeaderSize+rest], hdgst, ddgst, pda)
}

func TestRoundTrips(t *testing.T) {
	data := []byte("0123456789abcdef")
	for _, dg := range []struct{ h, d bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		for _, pda := range []int{4, 8, 128} {
			b := pdu(TypeCapsuleCmd, 0, dg.h, dg.d, pda, nil, data)
			l, err := receive(b, Controller, dg.h, dg.d, pda)
			if err != nil {
				t.Fatalf("digests %v pda %d: %v", dg, pda, err)
			}
			hd := 0
			if dg.h {
				hd = 4
			}
			start := CapsuleCmdHLen + hd + l.Pad
			if l.DataLen != len(data) || !bytes.Equal(b[start:start+l.DataLen], data) || l.DataDigest != dg.d {
				t.Fatalf("digests %v pda %d: layout %+v", dg, pda, l)
			}
			if start%pda != 0 {
				t.Fatalf("pda %d: data at %d", pda, start)
			}
			if dg.d && GetDigest(b[start+l.DataLen:]) != Digest(data) {
				t.Fatal("data digest")
			}
			// A command without data.
			b = pdu(TypeCapsuleCmd, 0, dg.h, dg.d, pda, nil, nil)
			if l, err := receive(b, Controller, dg.h, dg.d, pda); err != nil || l.DataLen != 0 {
				t.Fatalf("no data: %+v %v", l, err)
			}
			b = pdu(TypeH2CData, FlagLast, dg.h, dg.d, pda, func(h []byte) {
				Data(h).Encode(&DataFields{CCCID: 7, TTag: 3, Offset: 4096, Length: uint32(len(data))})
			}, data)
			if l, err := receive(b, Controller, dg.h, dg.d, pda); err != nil || l.DataLen != len(data) {
				t.Fatalf("H2CData: %+v %v", l, err)
			}
			if f := Data(b).Fields(); f != (DataFields{CCCID: 7, TTag: 3, Offset: 4096, Length: uint32(len(data))}) {
				t.Fatalf("H2CData fields %+v", f)
			}
			b = pdu(TypeR2T, 0, dg.h, dg.d, pda, func(h []byte) {
				Data(h).Encode(&DataFields{CCCID: 7, TTag: 3, Length: 1 << 20})
			}, nil)
			if _, err := receive(b, Host, dg.h, dg.d, pda); err != nil {
				t.Fatalf("R2T: %v", err)
			}
			b = pdu(TypeCapsuleResp, 0, dg.h, dg.d, pda, nil, nil)
			if _, err := receive(b, Host, dg.h, dg.d, pda); err != nil {
				t.Fatalf("CapsuleResp: %v", err)
			}
		}
	}
}

func TestErrors(t *testing.T) {
	data := make([]byte, 512)
	good := pdu(TypeCapsuleCmd, 0, true, true, 4, nil, data)
	mod := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	cases := []struct {
		name string
		b    []byte
		r    Role
		fes  uint16
		fei  uint32
	}{
		{"unknown type", mod(func(b []byte) { b[0] = 0x8 }), Controller, FESInvalidHeaderField, offType},
		{"wrong way", mod(func(b []byte) { b[0] = TypeCapsuleResp }), Controller, FESInvalidHeaderField, offType},
		{"bad hlen", mod(func(b []byte) { b[2] = 64 }), Controller, FESInvalidHeaderField, offHLen},
		{"no hdgst flag", mod(func(b []byte) { b[1] &^= FlagHDGST }), Controller, FESInvalidHeaderField, offFlags},
		{"header digest", mod(func(b []byte) { b[20] ^= 1 }), Controller, FESHeaderDigestError, 0},
		{"short plen", mod(func(b []byte) { b[4], b[5] = 10, 0 }), Controller, FESInvalidHeaderField, offPLen},
	}
	for _, c := range cases {
		_, err := receive(c.b, c.r, true, true, 4)
		if err == nil || err.FES != c.fes || err.FEI != c.fei {
			t.Errorf("%s: got %v, want FES %d FEI %d", c.name, err, c.fes, c.fei)
		}
	}
	// PDO inside the header (digest recomputed so only PDO is wrong).
	b := mod(func(b []byte) { b[3] = 40 })
	PutDigest(b[CapsuleCmdHLen:], Digest(b[:CapsuleCmdHLen]))
	if _, err := receive(b, Controller, true, true, 4); err == nil || err.FEI != offPDO {
		t.Errorf("PDO 40: %v", err)
	}
	// DATAL disagreeing with PLEN.
	b = pdu(TypeH2CData, FlagLast, false, false, 4, func(h []byte) { Data(h).Encode(&DataFields{Length: 9}) }, data)
	if _, err := receive(b, Controller, false, false, 4); err == nil || err.FEI != offDataLength {
		t.Errorf("DATAL: %v", err)
	}
	// SUCCESS without LAST_PDU.
	b = pdu(TypeC2HData, FlagSuccess, false, false, 4, func(h []byte) { Data(h).Encode(&DataFields{Length: 512}) }, data)
	if _, err := receive(b, Host, false, false, 4); err == nil || err.FEI != offFlags {
		t.Errorf("SUCCESS without LAST: %v", err)
	}
	// Misaligned PDO for a receiver that asked for 8-byte alignment (72+4).
	b = pdu(TypeCapsuleCmd, 0, true, false, 4, nil, data)
	if _, err := receive(b, Controller, true, false, 8); err == nil || err.FEI != offPDO {
		t.Errorf("alignment: %v", err)
	}
	var e *Error = &Error{FES: 1, Err: ErrTerminated}
	if !errors.Is(e, ErrTerminated) {
		t.Error("Error does not unwrap")
	}
}

func TestTermReq(t *testing.T) {
	b := make([]byte, MaxTermReqSize)
	hdr := make([]byte, 200)
	n := EncodeTermReq(b, TypeC2HTermReq, FESHeaderDigestError, 0x01020304, hdr)
	if n != MaxTermReqSize {
		t.Fatalf("length %d", n)
	}
	l, err := receive(b[:n], Host, true, true, 4)
	if err != nil || l.DataLen != 128 {
		t.Fatalf("%+v %v", l, err)
	}
	tr := TermReq(b)
	if tr.FES() != FESHeaderDigestError || tr.FEI() != 0x01020304 || b[10] != 4 || b[13] != 1 {
		t.Fatalf("FES %d FEI %#x: %x", tr.FES(), tr.FEI(), b[:24])
	}
}

func FuzzReceive(f *testing.F) {
	f.Add(pdu(TypeCapsuleCmd, 0, true, true, 4, nil, []byte("data")), uint8(3))
	f.Add(pdu(TypeH2CData, FlagLast, false, false, 4, func(h []byte) { Data(h).Encode(&DataFields{Length: 4}) }, []byte("data")), uint8(0))
	f.Add(pdu(TypeC2HData, FlagLast|FlagSuccess, false, true, 4, func(h []byte) { Data(h).Encode(&DataFields{Length: 4}) }, []byte("data")), uint8(2))
	ic := make([]byte, ICSize)
	IC(ic).Encode(TypeICReq, &ICFields{})
	f.Add(ic, uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, opts uint8) {
		hdgst, ddgst := opts&1 != 0, opts&2 != 0
		pda := 4 << (opts >> 5)
		for _, r := range []Role{Controller, Host} {
			rest, err := CheckHeader(b, r, hdgst)
			if err != nil || len(b) < CommonHeaderSize+rest {
				continue
			}
			h := Header(b[:CommonHeaderSize+rest])
			l, err := CheckPDU(h, hdgst, ddgst, pda)
			if err != nil {
				continue
			}
			if l.Pad < 0 || l.DataLen < 0 || uint32(CommonHeaderSize+rest+l.Pad+l.DataLen) > h.PLen() {
				t.Fatalf("layout %+v beyond PLEN %d", l, h.PLen())
			}
			switch h.Type() {
			case TypeICReq:
				CheckICReq(IC(h))
			case TypeICResp:
				CheckICResp(IC(h), 0)
			case TypeH2CData, TypeC2HData, TypeR2T:
				_ = Data(h).Fields()
			case TypeH2CTermReq, TypeC2HTermReq:
				_, _ = TermReq(h).FES(), TermReq(h).FEI()
			}
		}
	})
}

func TestSeal(t *testing.T) {
	b := make([]byte, CapsuleRespHLen+DigestSize)
	Header(b).Put(TypeCapsuleResp, 0, CapsuleRespHLen, true, 0, false, 0)
	if n := Header(b).Seal(true); n != CapsuleRespHLen+DigestSize {
		t.Fatalf("Seal = %d", n)
	}
	if _, err := CheckPDU(b, true, false, 4); err != nil {
		t.Fatalf("sealed header refused: %v", err)
	}
	if n := Header(b).Seal(false); n != CapsuleRespHLen {
		t.Fatalf("Seal without digests = %d", n)
	}
	ic := make([]byte, ICSize)
	IC(ic).Encode(TypeICResp, &ICFields{})
	if n := Header(ic).Seal(true); n != ICSize { // no header digest on ICResp
		t.Fatalf("Seal of ICResp = %d", n)
	}
}
