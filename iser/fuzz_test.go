package iser

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// Native fuzz targets, one per parser. Each checks that parsing never
// panics, that failures carry the right errors, and that what parses
// survives an encode and a second parse unchanged.

// encodeStream writes PDUs (header bytes and data) as a byte stream.
func encodeStream(t testing.TB, hd, dd bool, pdus ...[2][]byte) []byte {
	var b bytes.Buffer
	w := NewWriter(&b)
	w.SetDigests(hd, dd)
	for _, p := range pdus {
		h := append([]byte(nil), p[0]...)
		if err := w.WritePDU(h, nil, p[1]); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// reencode decodes a BHS of a known opcode with its view's Fields, encodes
// the result and returns it; reserved bits of the original are dropped.
func reencode(h BHS) []byte {
	c := make([]byte, BHSSize)
	switch h.Opcode() {
	case OpNOPOut:
		f := NOPOut(h).Fields()
		NOPOut(c).Encode(&f)
	case OpSCSICommand:
		f := SCSICommand(h).Fields()
		SCSICommand(c).Encode(&f)
	case OpTaskMgmtRequest:
		f := TaskMgmtRequest(h).Fields()
		TaskMgmtRequest(c).Encode(&f)
	case OpLoginRequest:
		f := LoginRequest(h).Fields()
		LoginRequest(c).Encode(&f)
	case OpTextRequest:
		f := TextRequest(h).Fields()
		TextRequest(c).Encode(&f)
	case OpDataOut:
		f := DataOut(h).Fields()
		DataOut(c).Encode(&f)
	case OpLogoutRequest:
		f := LogoutRequest(h).Fields()
		LogoutRequest(c).Encode(&f)
	case OpSNACKRequest:
		f := SNACK(h).Fields()
		SNACK(c).Encode(&f)
	case OpNOPIn:
		f := NOPIn(h).Fields()
		NOPIn(c).Encode(&f)
	case OpSCSIResponse:
		f := SCSIResponse(h).Fields()
		SCSIResponse(c).Encode(&f)
	case OpTaskMgmtResponse:
		f := TaskMgmtResponse(h).Fields()
		TaskMgmtResponse(c).Encode(&f)
	case OpLoginResponse:
		f := LoginResponse(h).Fields()
		LoginResponse(c).Encode(&f)
	case OpTextResponse:
		f := TextResponse(h).Fields()
		TextResponse(c).Encode(&f)
	case OpDataIn:
		f := DataIn(h).Fields()
		DataIn(c).Encode(&f)
	case OpLogoutResponse:
		f := LogoutResponse(h).Fields()
		LogoutResponse(c).Encode(&f)
	case OpR2T:
		f := R2T(h).Fields()
		R2T(c).Encode(&f)
	case OpAsyncMessage:
		f := AsyncMessage(h).Fields()
		AsyncMessage(c).Encode(&f)
	case OpReject:
		f := Reject(h).Fields()
		Reject(c).Encode(&f)
	default:
		return nil
	}
	return c
}

func FuzzReadPDU(f *testing.F) {
	for _, c := range goldenCases(f) {
		f.Add(encodeStream(f, false, false, [2][]byte{c.golden(), nil}), false, false)
		f.Add(encodeStream(f, true, true, [2][]byte{c.golden(), []byte("data")}), true, true)
	}
	cmd := unhex(f, rfc3720ReadPDU, 0)
	cmd[4] = 3 // 12 bytes of AHS
	f.Add(append(append(cmd, AppendExtendedCDBAHS(nil, make([]byte, 20))...),
		AppendBidiReadLengthAHS(nil, 9)...), false, false)
	f.Add([]byte{}, false, false)
	f.Add(make([]byte, 47), true, false)

	f.Fuzz(func(t *testing.T, stream []byte, hd, dd bool) {
		r := NewReader(bytes.NewReader(stream))
		r.SetDigests(hd, dd)
		r.SetMaxRecvDataSegmentLength(4096)
		hdr := make([]byte, MaxHeaderLength)
		data := make([]byte, 4096)
		for i := 0; i < 8; i++ {
			p, err := r.ReadPDU(hdr, data)
			if err != nil {
				if errors.Is(err, ErrDataDigest) {
					if p.BHS == nil {
						t.Fatal("data digest error without the PDU")
					}
					continue
				}
				if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.Is(err, ErrHeaderDigest) &&
					!errors.Is(err, ErrDataSegmentTooLong) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if len(p.AHS) != p.BHS.TotalAHSLength() || len(p.Data) != p.BHS.DataSegmentLength() {
				t.Fatalf("lengths: AHS %d/%d data %d/%d", len(p.AHS), p.BHS.TotalAHSLength(), len(p.Data),
					p.BHS.DataSegmentLength())
			}
			if p.BHS.Opcode() == OpSCSICommand {
				if c, err := ParseCommandAHS(p.AHS); err == nil {
					_ = AppendCDB(nil, SCSICommand(p.BHS), c)
				}
			}
			// Write it back and read it again: same bytes.
			wire := encodeStream(t, hd, dd, [2][]byte{append([]byte(nil), p.BHS...), p.Data})
			if len(p.AHS) == 0 {
				r2 := NewReader(bytes.NewReader(wire))
				r2.SetDigests(hd, dd)
				r2.SetMaxRecvDataSegmentLength(4096)
				q, err := r2.ReadPDU(make([]byte, BHSSize), make([]byte, 4096))
				if err != nil || !bytes.Equal(q.BHS, p.BHS) || !bytes.Equal(q.Data, p.Data) {
					t.Fatalf("re-read: %v", err)
				}
			}
			// Decode and re-encode the header: a fixed point.
			if c := reencode(p.BHS); c != nil {
				if d := reencode(BHS(c)); !bytes.Equal(c, d) {
					t.Fatalf("%v: re-encoding is not stable:\n% x\n% x", p.BHS.Opcode(), c, d)
				}
			}
			if _, err := ParsePDU(wire[:min(len(wire), BHSSize+len(p.Data))], 4096); err != nil && !hd {
				t.Fatalf("ParsePDU of a written PDU: %v", err)
			}
		}
	})
}

func FuzzParseText(f *testing.F) {
	f.Add(kvText("InitiatorName=iqn.1994-05.com.redhat:x", "SessionType=Normal", "AuthMethod=CHAP,None"))
	f.Add(kvText("CHAP_C=0x0102", "CHAP_I=1", "X-com.example=1", "=x"))
	f.Add([]byte("A=1\x00\x00B"))
	f.Add([]byte("\x00\x00"))
	f.Fuzz(func(t *testing.T, text []byte) {
		kvs, err := ParseText(text)
		if err != nil {
			if !errors.Is(err, errTextFormat) && !errors.Is(err, errTextKey) && !errors.Is(err, errTextValueLength) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		again, err := ParseText(AppendText(nil, kvs))
		if err != nil || len(again) != len(kvs) {
			t.Fatalf("round trip: %v", err)
		}
		for i := range kvs {
			if kvs[i] != again[i] {
				t.Fatalf("pair %d: %+v != %+v", i, kvs[i], again[i])
			}
		}
		// Every key and value is answered without panicking.
		s := DefaultSettings()
		n := newNegotiator(roleTarget, TransportISER, &s)
		out, err := n.receive(nil, kvs, inOperational)
		if err == nil {
			if _, err := ParseText(out); err != nil {
				t.Fatalf("answers do not parse: %v", err)
			}
		}
		for _, kv := range kvs {
			_, _ = parseNumber(kv.Value)
			_, _ = decodeBinary(kv.Value)
			_, _, _, _, _ = ParseTargetAddress(kv.Value)
		}
	})
}

// loginSeeds returns request streams the target engine sees in real
// logins: the open-iscsi, libiscsi and engine-to-engine flows.
func loginSeeds(t testing.TB) [][]byte {
	req := func(transit bool, csg, nsg Stage, text []byte) [2][]byte {
		h := make([]byte, BHSSize)
		LoginRequest(h).Encode(&LoginRequestFields{Transit: transit, CSG: csg, NSG: nsg, ITT: 1, ISID: ISID{0x80}})
		return [2][]byte{h, text}
	}
	names := []string{"InitiatorName=" + testInitiator, "TargetName=" + testIQN, "SessionType=Normal"}
	return [][]byte{
		encodeStream(t, false, false,
			req(true, 0, 1, kvText(append(names, "AuthMethod=None")...)),
			req(true, 1, 3, kvText("HeaderDigest=None", "MaxBurstLength=262144", "IFMarker=No", "RDMAExtensions=Yes",
				"MaxRecvDataSegmentLength=8192"))),
		encodeStream(t, false, false,
			req(true, 0, 1, kvText(append(names, "AuthMethod=CHAP,None")...)),
			req(false, 0, 0, kvText("CHAP_A=5")),
			req(true, 0, 1, kvText("CHAP_N=alice", "CHAP_R=0x00", "CHAP_I=1", "CHAP_C=0x0102"))),
		encodeStream(t, false, false,
			req(true, 1, 3, kvText("InitiatorName="+testInitiator, "SessionType=Discovery", "TargetRecvDataSegmentLength=512"))),
		encodeStream(t, false, false, func() [2][]byte {
			r := req(false, 1, 0, kvText(names...))
			r[0][1] |= LoginFlagContinue
			return r
		}(), req(true, 1, 3, kvText("DataDigest=CRC32C"))),
	}
}

func FuzzTargetLogin(f *testing.F) {
	for _, s := range loginSeeds(f) {
		f.Add(s, false, false)
		f.Add(s, true, true)
	}
	f.Fuzz(func(t *testing.T, stream []byte, chap, iser bool) {
		info := TargetInfo{PortalGroupTag: 1}
		if chap {
			info.CHAP = &CHAPSecret{User: "alice", Secret: "0123456789abcdef"}
			info.MutualCHAP = &CHAPSecret{User: "t", Secret: "fedcba9876543210"}
		}
		transport := TransportTCP
		if iser {
			transport = TransportISER
		}
		tl, err := NewTargetLogin(testTarget(transport, info), 1)
		if err != nil {
			t.Fatal(err)
		}
		r := NewReader(bytes.NewReader(stream))
		hdr, data := make([]byte, MaxHeaderLength), make([]byte, DefaultRecvDataSegmentLength)
		rsp, rspD := make([]byte, BHSSize), make([]byte, DefaultRecvDataSegmentLength)
		for i := 0; i < maxLoginPDUs+2; i++ {
			p, err := r.ReadPDU(hdr, data)
			if err != nil {
				return
			}
			n, st, err := tl.Step(p.BHS, p.Data, rsp, rspD)
			lr := LoginResponse(rsp)
			if BHS(rsp).Opcode() != OpLoginResponse || BHS(rsp).DataSegmentLength() != n {
				t.Fatalf("bad response header % x", rsp)
			}
			if _, perr := ParseText(rspD[:n]); perr != nil {
				t.Fatalf("response text does not parse: %v (%q)", perr, rspD[:n])
			}
			switch st {
			case LoginFailed:
				if err == nil || lr.Status() == LoginSuccess || lr.Status() != statusOf(err) || n != 0 {
					t.Fatalf("failure with status %v, error %v", lr.Status(), err)
				}
				if _, _, err := tl.Step(p.BHS, p.Data, rsp, rspD); !errors.Is(err, errLoginState) {
					t.Fatal("Step after failure accepted")
				}
				return
			case LoginDone:
				s, ok := tl.Session()
				if !ok || err != nil || lr.TSIH() != 1 || !lr.Transit() || lr.NSG() != StageFullFeature {
					t.Fatalf("done: %+v %v", lr.Fields(), err)
				}
				p := s.Params
				if p.MaxConnections != 1 || p.ErrorRecoveryLevel != 0 || p.FirstBurstLength > p.MaxBurstLength ||
					p.MaxRecvDataSegmentLength < 512 || p.MaxSendDataSegmentLength < 512 ||
					(chap && p.AuthMethod != authMethodCHAP) {
					t.Fatalf("session params %+v", p)
				}
				return
			default:
				if err != nil || lr.Status() != LoginSuccess {
					t.Fatalf("in progress with %v / %v", err, lr.Status())
				}
			}
		}
	})
}

func FuzzInitiatorLogin(f *testing.F) {
	// Seed with the responses of a real login, and a failure response.
	tcfg := testTarget(TransportTCP, TargetInfo{PortalGroupTag: 1})
	tl, _ := NewTargetLogin(tcfg, 2)
	il, _ := NewInitiatorLogin(testInitiatorConfig(TransportTCP))
	reqH, reqD := make([]byte, BHSSize), make([]byte, 8192)
	rspH, rspD := make([]byte, BHSSize), make([]byte, 8192)
	n, _ := il.Start(reqH, reqD)
	var responses [][2][]byte
	for {
		m, _, _ := tl.Step(reqH, reqD[:n], rspH, rspD)
		responses = append(responses, [2][]byte{append([]byte(nil), rspH...), append([]byte(nil), rspD[:m]...)})
		var st LoginState
		n, st, _ = il.Step(rspH, rspD[:m], reqH, reqD)
		if st != LoginInProgress {
			break
		}
	}
	f.Add(encodeStream(f, false, false, responses...), false)
	fail := make([]byte, BHSSize)
	LoginResponse(fail).Encode(&LoginResponseFields{ITT: 0x1000, Status: LoginNotFound})
	f.Add(encodeStream(f, false, false, [2][]byte{fail, nil}), true)
	f.Add(encodeStream(f, false, false, [2][]byte{responses[0][0], kvText("AuthMethod=CHAP", "CHAP_A=5", "CHAP_I=3",
		"CHAP_C=0x0102030405060708090a0b0c0d0e0f10")}), true)

	f.Fuzz(func(t *testing.T, stream []byte, chap bool) {
		cfg := testInitiatorConfig(TransportTCP)
		if chap {
			cfg.CHAP = &CHAPSecret{User: "alice", Secret: "0123456789abcdef"}
			cfg.MutualCHAP = &CHAPSecret{User: "t", Secret: "fedcba9876543210"}
		}
		il, err := NewInitiatorLogin(cfg)
		if err != nil {
			t.Fatal(err)
		}
		req, reqD := make([]byte, BHSSize), make([]byte, 8192)
		if _, err := il.Start(req, reqD); err != nil {
			t.Fatal(err)
		}
		r := NewReader(bytes.NewReader(stream))
		hdr, data := make([]byte, MaxHeaderLength), make([]byte, 8192)
		for i := 0; i < maxLoginPDUs+2; i++ {
			p, err := r.ReadPDU(hdr, data)
			if err != nil {
				return
			}
			n, st, err := il.Step(p.BHS, p.Data, req, reqD)
			switch st {
			case LoginFailed:
				if err == nil {
					t.Fatal("failed without an error")
				}
				return
			case LoginDone:
				s, ok := il.Session()
				if !ok || s.TSIH == 0 || s.Params.FirstBurstLength > s.Params.MaxBurstLength {
					t.Fatalf("session %+v", s)
				}
				return
			}
			if err != nil || BHS(req).Opcode() != OpLoginRequest || BHS(req).DataSegmentLength() != n {
				t.Fatalf("next request: %v", err)
			}
			if _, err := ParseText(reqD[:n]); err != nil {
				t.Fatalf("request text: %v", err)
			}
		}
	})
}

func FuzzTextResponder(f *testing.F) {
	f.Add(kvText("SendTargets=All"), uint16(16), false, uint32(ReservedTag))
	f.Add(kvText("SendTargets="+testIQN, "X-a=b"), uint16(8192), true, uint32(1))
	f.Add([]byte("SendTargets"), uint16(1), false, uint32(ReservedTag))
	f.Fuzz(func(t *testing.T, text []byte, max uint16, cont bool, ttt uint32) {
		r := testResponder(int(max))
		h := make([]byte, BHSSize)
		rsp := make([]byte, 8192)
		for i := 0; i < 64; i++ {
			TextRequest(h).Encode(&TextRequestFields{Final: !cont, Continue: cont, ITT: 3, TTT: ttt})
			f, n, err := r.Respond(h, text, rsp)
			if err != nil {
				return
			}
			if n > r.MaxSendDataSegmentLength && r.MaxSendDataSegmentLength > 0 {
				t.Fatalf("%d bytes over a limit of %d", n, r.MaxSendDataSegmentLength)
			}
			if f.Final {
				return
			}
			if f.TTT == ReservedTag {
				t.Fatal("non-final response without a TTT")
			}
			ttt, text, cont = f.TTT, nil, false
		}
	})
}

func FuzzISER(f *testing.F) {
	f.Add(append([]byte{0x18, 0, 0, 0, 0, 0, 0x12, 0x34}, make([]byte, 20)...))
	f.Add(append([]byte{0x20, 0xaa, 0, 16}, make([]byte, 24)...))
	f.Add(append([]byte{0x31, 0xaa, 0, 4}, make([]byte, 24)...))
	f.Add([]byte{0xc0, 0, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if h, err := ParseISERHeader(b); err == nil {
			fl := h.Fields()
			c := make([]byte, ISERHeaderSize)
			ISERHeader(c).Encode(&fl)
			if !bytes.Equal(c[4:], h[4:]) {
				t.Fatalf("header round trip:\n% x\n% x", c, []byte(h))
			}
			if c[0] != b[0] {
				t.Fatalf("flags %#x re-encoded as %#x", b[0], c[0])
			}
		} else if !errors.Is(err, errISERHeader) {
			t.Fatalf("unexpected error %v", err)
		}
		if m, err := ParseISERHello(b); err == nil {
			c := make([]byte, ISERHeaderSize)
			m.Encode(c)
			if got, err := ParseISERHello(c); err != nil || got != m {
				t.Fatalf("Hello round trip %+v %+v %v", m, got, err)
			}
			_ = ReplyTo(m, 8)
		}
		if m, err := ParseISERHelloReply(b); err == nil {
			c := make([]byte, ISERHeaderSize)
			m.Encode(c)
			if got, err := ParseISERHelloReply(c); err != nil || got != m {
				t.Fatalf("HelloReply round trip %+v %+v %v", m, got, err)
			}
		}
		if c, ok := ParseISERCM(b); ok {
			acc, inv := AcceptFor(c, true)
			if acc.Flags&ISERTZBVANotUsed == 0 || inv != (c.Flags&ISERSendWithInvNotSupported == 0) {
				t.Fatalf("accept %+v for %+v", acc, c)
			}
		}
	})
}
