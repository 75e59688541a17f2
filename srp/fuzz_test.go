package srp

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rdisk/rdisk/scsi"
)

// Native fuzz targets, one per decoder. Each checks that parsing never
// panics, that failures are the package's error types, and that what parses
// survives an encode and a second parse unchanged.

func addGolden(f *testing.F, hexes ...string) {
	for _, h := range hexes {
		f.Add(unhex(f, h))
	}
	f.Add([]byte{})
	f.Add([]byte{0})
}

func parseErrOK(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ErrShort) && !errors.Is(err, ErrOpcode) && !errors.Is(err, ErrLength) {
		t.Fatalf("unexpected error type: %v", err)
	}
}

func FuzzParseLoginReqRDMA(f *testing.F) {
	addGolden(f, goldenLoginReqRDMA, goldenLoginReqRDMA+"00000000")
	f.Fuzz(func(t *testing.T, b []byte) {
		lf, err := ParseLoginReqRDMA(b)
		if err != nil {
			parseErrOK(t, err)
			return
		}
		out := make([]byte, LoginReqRDMASize)
		LoginReqRDMA(out).Encode(&lf)
		again, err := ParseLoginReqRDMA(out)
		if err != nil || again != lf {
			t.Fatalf("round trip: %+v -> %+v, %v", lf, again, err)
		}
		// Only the reserved bytes may differ.
		if !bytes.Equal(out[:50], b[:50]) {
			t.Fatalf("re-encoding changed defined fields: %x -> %x", b[:50], out[:50])
		}
	})
}

func FuzzParseLoginReq(f *testing.F) {
	addGolden(f, goldenLoginReq)
	f.Fuzz(func(t *testing.T, b []byte) {
		lf, err := ParseLoginReq(b)
		if err != nil {
			parseErrOK(t, err)
			return
		}
		out := make([]byte, LoginReqSize)
		LoginReq(out).Encode(&lf)
		if again, err := ParseLoginReq(out); err != nil || again != lf {
			t.Fatalf("round trip: %+v -> %+v, %v", lf, again, err)
		}
	})
}

func FuzzParseLoginRsp(f *testing.F) {
	addGolden(f, goldenLoginRsp)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseLoginRsp(b)
		if err != nil {
			parseErrOK(t, err)
			return
		}
		out := make([]byte, LoginRspSize)
		LoginRsp(out).Encode(&r)
		if again, err := ParseLoginRsp(out); err != nil || again != r {
			t.Fatalf("round trip: %+v -> %+v, %v", r, again, err)
		}
	})
}

func FuzzParseLoginRej(f *testing.F) {
	addGolden(f, goldenLoginRej)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseLoginRej(b)
		if err != nil {
			parseErrOK(t, err)
			return
		}
		_ = r.Reason.String() + r.Reason.Error()
		out := make([]byte, LoginRejSize)
		LoginRej(out).Encode(&r)
		if again, err := ParseLoginRej(out); err != nil || again != r {
			t.Fatalf("round trip: %+v -> %+v, %v", r, again, err)
		}
	})
}

func FuzzParseLogout(f *testing.F) {
	addGolden(f, goldenILogout, goldenTLogout)
	f.Fuzz(func(t *testing.T, b []byte) {
		if tag, err := ParseILogout(b); err == nil {
			out := make([]byte, ILogoutSize)
			EncodeILogout(out, tag)
			if again, err := ParseILogout(out); err != nil || again != tag {
				t.Fatalf("I_LOGOUT round trip %x -> %x, %v", tag, again, err)
			}
		} else {
			parseErrOK(t, err)
		}
		if tl, err := ParseTLogout(b); err == nil {
			_ = tl.Reason.String()
			out := make([]byte, TLogoutSize)
			EncodeTLogout(out, &tl)
			if again, err := ParseTLogout(out); err != nil || again != tl {
				t.Fatalf("T_LOGOUT round trip %+v -> %+v, %v", tl, again, err)
			}
		} else {
			parseErrOK(t, err)
		}
	})
}

func FuzzParseTskMgmt(f *testing.F) {
	addGolden(f, goldenTskMgmt)
	f.Fuzz(func(t *testing.T, b []byte) {
		tm, err := ParseTskMgmt(b)
		if err != nil {
			parseErrOK(t, err)
			return
		}
		_ = tm.Func.String()
		out := make([]byte, TskMgmtSize)
		EncodeTskMgmt(out, &tm)
		if again, err := ParseTskMgmt(out); err != nil || again != tm {
			t.Fatalf("round trip %+v -> %+v, %v", tm, again, err)
		}
	})
}

// FuzzParseCmd covers the SRP_CMD view and the descriptor parser.
func FuzzParseCmd(f *testing.F) {
	d1 := DirectDesc{VA: 0x1000, Key: 7, Len: 4096}
	for _, iu := range [][]byte{
		cmdIU(0, DescDirect, 0, 0, descBytes(d1)),
		cmdIU(DescIndirect, 0, 1, 0, append(make([]byte, IndirectHdrSize), descBytes(d1)...)),
		cmdIU(DescImmediate, 0, 0, 0, make([]byte, 40)),
		append(unhex(f, goldenCmd), 1, 2, 3, 4),
	} {
		f.Add(iu, uint16(68), uint8(4))
	}
	hdr := make([]byte, IndirectHdrSize)
	PutIndirectHdr(hdr, DirectDesc{Len: 3 * DirectDescSize}, 100)
	f.Add(cmdIU(0, DescIndirect, 0, 2, append(hdr, descBytes(d1, d1)...)), uint16(0), uint8(8))
	f.Fuzz(func(t *testing.T, b []byte, imm uint16, max uint8) {
		c, err := ParseCmd(b)
		if err != nil {
			parseErrOK(t, err)
			return
		}
		fields := c.Fields()
		out := make([]byte, len(b))
		copy(out, b)
		Cmd(out).Encode(&fields)
		if again := Cmd(out).Fields(); again != fields {
			t.Fatalf("fields round trip %+v -> %+v", fields, again)
		}
		_, _ = c.CDB(), c.Descriptors()
		store := make([]DirectDesc, 0, int(max%16)+1)
		d, err := ParseData(c, len(b), int(imm), store, int(max))
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("ParseData error %v is not a *FormatError", err)
			}
			_ = fe.Error()
			return
		}
		switch d.Format {
		case DescNone:
			if d.Dir != scsi.DirNone || d.Length != 0 {
				t.Fatalf("no descriptor, but %+v", d)
			}
		case DescDirect:
			if len(d.Descs) != 1 || d.Descs[0].Len != d.Length {
				t.Fatalf("direct: %+v", d)
			}
		case DescIndirect:
			if len(d.Descs) > d.TableCount || d.TableCount > cap(store) || d.TableCount > int(max) {
				t.Fatalf("indirect: %+v (cap %d, max %d)", d, cap(store), max)
			}
			if d.External {
				table := make([]byte, d.TableCount*DirectDescSize)
				_ = ParseTable(&d, table)
			} else {
				var sum uint64
				for _, x := range d.Descs {
					sum += uint64(x.Len)
				}
				if sum < uint64(d.Length) {
					t.Fatalf("descriptors cover %d < %d", sum, d.Length)
				}
			}
		case DescImmediate:
			if d.Dir != scsi.DirOut || d.ImmOffset != int(imm) || d.ImmOffset+d.ImmLen > len(b) || d.ImmOffset < CmdSize+c.AddCDBLen()+ImmediateHdrSize {
				t.Fatalf("immediate: %+v in %d bytes", d, len(b))
			}
		default:
			t.Fatalf("format %d parsed", d.Format)
		}
	})
}

func FuzzParseRsp(f *testing.F) {
	addGolden(f, goldenRsp)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRsp(b)
		if err != nil {
			parseErrOK(t, err)
			return
		}
		fields := r.Fields()
		rd, sense := r.RespData(), r.Sense()
		out := make([]byte, RspSize+len(rd)+len(sense))
		n := EncodeRsp(out, &fields, rd, sense)
		again, err := ParseRsp(out[:n])
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		if !bytes.Equal(again.RespData(), rd) || !bytes.Equal(again.Sense(), sense) {
			t.Fatalf("data round trip")
		}
		g := again.Fields()
		fields.SenseLen, fields.RespLen = uint32(len(sense)), uint32(len(rd))
		if fields.Flags&RspFlagRspValid == 0 || len(rd) == 0 {
			fields.Flags &^= RspFlagRspValid
		}
		if fields.Flags&RspFlagSnsValid == 0 || len(sense) == 0 {
			fields.Flags &^= RspFlagSnsValid
		}
		if d := cmp.Diff(fields, g); d != "" {
			t.Fatalf("fields round trip (-want +got):\n%s", d)
		}
	})
}

func FuzzParseCredAER(f *testing.F) {
	addGolden(f, goldenCredReq, goldenCredRsp, goldenAERReq, goldenAERRsp)
	f.Fuzz(func(t *testing.T, b []byte) {
		if cr, err := ParseCredReq(b); err == nil {
			out := make([]byte, CredReqSize)
			EncodeCredReq(out, &cr)
			if again, err := ParseCredReq(out); err != nil || again != cr {
				t.Fatalf("CRED_REQ round trip")
			}
		} else {
			parseErrOK(t, err)
		}
		if op, tag, err := ParseInitiatorRsp(b); err == nil {
			out := make([]byte, CredRspSize)
			EncodeInitiatorRsp(out, op, tag)
			if op2, tag2, err := ParseInitiatorRsp(out); err != nil || op2 != op || tag2 != tag {
				t.Fatalf("initiator response round trip")
			}
		} else {
			parseErrOK(t, err)
		}
		if af, sense, err := ParseAERReq(b); err == nil {
			out := make([]byte, AERReqSize+len(sense))
			n := EncodeAERReq(out, &af, sense)
			again, s2, err := ParseAERReq(out[:n])
			if err != nil || again != af || !bytes.Equal(s2, sense) {
				t.Fatalf("AER_REQ round trip: %+v -> %+v, %v", af, again, err)
			}
		} else {
			parseErrOK(t, err)
		}
	})
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"srp://h", "srp://10.0.0.1:5555/1/2/3", "srp://[::1]:9/a:b:c:d/0x1", "srp://h/1/2/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseURL(s)
		if err != nil {
			return
		}
		again, err := ParseURL(u.String())
		if err != nil || again != u {
			t.Fatalf("%q: %+v -> %q -> %+v, %v", s, u, u.String(), again, err)
		}
	})
}
