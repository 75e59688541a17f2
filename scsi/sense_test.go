package scsi

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestEncodeSenseGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		s    senseInfo
		desc bool
		want []byte
	}{
		{
			name: "fixed invalid field in CDB byte 2",
			s:    invalidCDB(2, -1),
			want: []byte{0x70, 0, 0x05, 0, 0, 0, 0, 0x0a, 0, 0, 0, 0, 0x24, 0x00, 0, 0xc0, 0x00, 0x02},
		},
		{
			name: "fixed invalid field in parameter list byte 20 bit 3",
			s:    invalidParam(20, 3),
			want: []byte{0x70, 0, 0x05, 0, 0, 0, 0, 0x0a, 0, 0, 0, 0, 0x26, 0x00, 0, 0x8b, 0x00, 0x14},
		},
		{
			name: "fixed miscompare at offset 485",
			s:    miscompare(485),
			want: []byte{0xf0, 0, 0x0e, 0, 0, 0x01, 0xe5, 0x0a, 0, 0, 0, 0, 0x1d, 0x00, 0, 0, 0, 0},
		},
		{
			name: "fixed unit attention",
			s:    senseInfo{key: KeyUnitAttention, asc: ASCPowerOnReset},
			want: []byte{0x70, 0, 0x06, 0, 0, 0, 0, 0x0a, 0, 0, 0, 0, 0x29, 0x00, 0, 0, 0, 0},
		},
		{
			name: "descriptor LBA out of range",
			s:    senseLBAOutOfRange,
			desc: true,
			want: []byte{0x72, 0x05, 0x21, 0x00, 0, 0, 0, 0},
		},
		{
			name: "descriptor invalid field with pointer",
			s:    invalidCDB(1, 7),
			desc: true,
			want: []byte{0x72, 0x05, 0x24, 0x00, 0, 0, 0, 0x08, 0x02, 0x06, 0, 0, 0xcf, 0x00, 0x01, 0},
		},
		{
			name: "descriptor medium error with LBA",
			s:    senseInfo{key: KeyMediumError, asc: ASCUnrecoveredReadError, info: 0x123456789a, infoValid: true},
			desc: true,
			want: []byte{0x72, 0x03, 0x11, 0x00, 0, 0, 0, 0x0c, 0x00, 0x0a, 0x80, 0, 0, 0, 0, 0x12, 0x34, 0x56, 0x78, 0x9a},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			buf := make([]byte, SenseBufferLen)
			n := encodeSense(buf, tc.s, tc.desc)
			if diff := cmp.Diff(tc.want, buf[:n]); diff != "" {
				t.Errorf("sense (-want +got):\n%s", diff)
			}
			got, err := ParseSense(buf[:n])
			if err != nil {
				t.Fatal(err)
			}
			if got.Key != tc.s.key || got.ASC != tc.s.asc || got.Descriptor != tc.desc {
				t.Errorf("ParseSense = %+v, want key %v asc %v", got, tc.s.key, tc.s.asc)
			}
			if tc.s.infoValid && (tc.desc || tc.s.info <= 0xffffffff) && (!got.InfoValid || got.Information != tc.s.info) {
				t.Errorf("information %x valid %v, want %x", got.Information, got.InfoValid, tc.s.info)
			}
			if tc.s.sksValid {
				cd, b, bit, ok := got.FieldPointer()
				wantBit := -1
				if tc.s.sks[0]&0x08 != 0 {
					wantBit = int(tc.s.sks[0] & 7)
				}
				if !ok || cd != (tc.s.sks[0]&0x40 != 0) || b != int(tc.s.sks[2]) || bit != wantBit {
					t.Errorf("field pointer %v %d %d %v", cd, b, bit, ok)
				}
			}
		})
	}
}

func TestEncodeSenseTruncates(t *testing.T) {
	t.Parallel()
	buf := make([]byte, 8)
	if n := encodeSense(buf, invalidCDB(2, -1), false); n != 8 {
		t.Errorf("wrote %d bytes into an 8-byte buffer", n)
	}
	if n := encodeSense(nil, invalidCDB(2, -1), true); n != 0 {
		t.Errorf("wrote %d bytes into a nil buffer", n)
	}
}

func TestParseSenseErrors(t *testing.T) {
	t.Parallel()
	for _, b := range [][]byte{nil, {0x70, 0, 5}, {0x72, 5}} {
		if _, err := ParseSense(b); !errors.Is(err, errShortSense) {
			t.Errorf("ParseSense(% x) = %v, want short", b, err)
		}
	}
	if _, err := ParseSense([]byte{0x12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}); !errors.Is(err, errSenseFormat) {
		t.Errorf("unknown response code: %v", err)
	}
}

func TestStrings(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		StatusReservationConflict.String(), KeyMiscompare.String(), ASCInvalidFieldInCDB.String(),
		TMFLUNReset.String(), TMFTaskNotFound.String(), AttrOrdered.String(), DirIn.String(), ResidualOverflow.String(),
	} {
		if s == "" {
			t.Error("empty string")
		}
	}
	if got := ASCLBAOutOfRange.String(); got != "21h/00h" {
		t.Errorf("ASC string %q", got)
	}
}

func TestLUNEncoding(t *testing.T) {
	t.Parallel()
	for _, n := range []uint64{0, 1, 255, 256, 1000, MaxLUN} {
		b := EncodeLUN(n)
		got, err := DecodeLUN(b)
		if err != nil || got != n {
			t.Errorf("LUN %d: % x decodes to %d, %v", n, b, got, err)
		}
	}
	if b := EncodeLUN(5); b != [8]byte{0, 5} {
		t.Errorf("LUN 5 = % x", b)
	}
	if b := EncodeLUN(300); b != [8]byte{0x41, 0x2c} {
		t.Errorf("LUN 300 = % x", b)
	}
	for _, b := range [][8]byte{{0x80, 1}, {0, 1, 0, 1}, {0x01, 1}, {0xc0, 0}} {
		if _, err := DecodeLUN(b); !errors.Is(err, errLUNFormat) {
			t.Errorf("DecodeLUN(% x) = %v", b, err)
		}
	}
}
