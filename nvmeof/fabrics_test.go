package nvmeof

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var testHostID = [16]byte{0x6b, 0x3a, 0x9c, 0x11, 0x0f, 0x4e, 0x4d, 0x2a, 0x8e, 0x31, 0x5c, 0x7d, 0x00, 0x11, 0x22, 0x33}

const (
	testSubNQN  = "nqn.2026-11.io.rdisk:default"
	testHostNQN = "nqn.2014-08.org.nvmexpress:uuid:6b3a9c11-0f4e-4d2a-8e31-5c7d00112233"
)

func TestConnectDataGolden(t *testing.T) {
	f := ConnectDataFields{HostID: testHostID, CNTLID: CNTLIDDynamic, SubNQN: testSubNQN, HostNQN: testHostNQN}
	got := make([]byte, ConnectDataSize)
	for i := range got {
		got[i] = 0x5a
	}
	if err := ConnectData(got).Encode(&f); err != nil {
		t.Fatal(err)
	}
	// struct nvmf_connect_data: hostid[16] at 0, cntlid at 16, resv4[238],
	// subsysnqn[256] at 256, hostnqn[256] at 512, resv5[256].
	want := make([]byte, 1024)
	at(want, 0, testHostID[:]...)
	at(want, 16, 0xff, 0xff)
	atString(want, 256, testSubNQN)
	atString(want, 512, testHostNQN)
	checkBytes(t, "connect data", got, want)

	p, err := ParseConnectData(want)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(f, p); d != "" {
		t.Errorf("parsed connect data (-want +got):\n%s", d)
	}
	d := ConnectData(want)
	if string(d.SubNQN()) != testSubNQN || string(d.HostNQN()) != testHostNQN || d.CNTLID() != 0xffff ||
		d.HostID() != testHostID {
		t.Errorf("connect data accessors: %q %q %#x", d.SubNQN(), d.HostNQN(), d.CNTLID())
	}
}

func TestConnectDataErrors(t *testing.T) {
	good := func() []byte {
		b := make([]byte, 1024)
		ConnectData(b).Encode(&ConnectDataFields{SubNQN: testSubNQN, HostNQN: testHostNQN, CNTLID: 1})
		return b
	}
	tests := []struct {
		name   string
		mod    func(b []byte) []byte
		offset int
		err    error
	}{
		{"short", func(b []byte) []byte { return b[:1023] }, -1, errShortConnectData},
		{"empty subnqn", func(b []byte) []byte { clear(b[256:512]); return b }, 256, errNQNEmpty},
		{"unterminated subnqn", func(b []byte) []byte {
			copy(b[256:512], strings.Repeat("x", 256))
			return b
		}, 256, errNQNUnterminated},
		{"subnqn 224 bytes", func(b []byte) []byte {
			copy(b[256:], strings.Repeat("x", 224))
			return b
		}, 256, errNQNTooLong},
		{"empty hostnqn", func(b []byte) []byte { clear(b[512:768]); return b }, 512, errNQNEmpty},
		{"unterminated hostnqn", func(b []byte) []byte {
			copy(b[512:768], strings.Repeat("y", 256))
			return b
		}, 512, errNQNUnterminated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConnectData(tt.mod(good()))
			if !errors.Is(err, tt.err) {
				t.Fatalf("error %v, want %v", err, tt.err)
			}
			var fe *FieldError
			if tt.offset >= 0 && (!errors.As(err, &fe) || fe.Offset != tt.offset) {
				t.Errorf("error %v, want a *FieldError at offset %d", err, tt.offset)
			}
		})
	}
	// 223 bytes is the longest NQN.
	b := good()
	copy(b[256:], strings.Repeat("x", 223))
	if _, err := ParseConnectData(b); err != nil {
		t.Errorf("223-byte NQN: %v", err)
	}

	for _, f := range []ConnectDataFields{
		{SubNQN: "", HostNQN: testHostNQN},
		{SubNQN: testSubNQN, HostNQN: strings.Repeat("h", 224)},
		{SubNQN: "a\x00b", HostNQN: testHostNQN},
	} {
		var fe *FieldError
		if err := ConnectData(make([]byte, 1024)).Encode(&f); !errors.As(err, &fe) {
			t.Errorf("Encode(%q, %q) = %v, want a *FieldError", f.SubNQN, f.HostNQN, err)
		}
	}
}

func TestPropertyCommand(t *testing.T) {
	b := make([]byte, SQESize)
	s := SQE(b)
	s.Property().Encode(&PropertyFields{FCType: FCTypePropertySet, Offset: PropCC, Value: 1})
	p := s.Property()
	if n, err := p.Size(); n != 4 || err != nil || p.Offset() != PropCC || p.Value() != 1 {
		t.Errorf("property set: size %d %v offset %#x value %d", n, err, p.Offset(), p.Value())
	}
	b[40] = 2
	var ce *CommandError
	if _, err := p.Size(); !errors.As(err, &ce) || ce.Status != StatusInvalidField|StatusDNR || ce.Loc != 40 {
		t.Errorf("attrib 2: %v", err)
	}
	if PropertySize(PropCAP) != 8 || PropertySize(PropCSTS) != 4 {
		t.Errorf("PropertySize")
	}

	s.Auth().Encode(&AuthFields{FCType: FCTypeAuthReceive, SECP: 0xe9, SPSP0: 1, SPSP1: 2, Length: 4096})
	a := s.Auth()
	if a.SECP() != 0xe9 || a.SPSP0() != 1 || a.SPSP1() != 2 || a.Length() != 4096 || s.Direction() != DirCtrlToHost {
		t.Errorf("auth receive accessors")
	}
	s.EncodeDisconnect(1)
	if s.DisconnectRecFmt() != 0 || s.FCType() != FCTypeDisconnect || s.Direction() != DirNone {
		t.Errorf("disconnect accessors")
	}
}
