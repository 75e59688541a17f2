package nvmeof

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSGLGolden(t *testing.T) {
	tests := []struct {
		name string
		f    SGLFields
		want []byte
	}{{
		// struct nvme_keyed_sgl_desc: addr le64, length[3], key[4], type.
		name: "keyed with invalidate",
		f:    SGLFields{Identifier: 0x4f, Address: 0xff1f0b7505185800, Length: 1024, Key: 0x5644ab01},
		want: unhex(t, "00 58 18 05 75 0b 1f ff  00 04 00 01 ab 44 56 4f", 0),
	}, {
		name: "keyed, max length",
		f:    SGLFields{Identifier: 0x40, Address: 1, Length: MaxKeyedSGLLength, Key: 0x01020304},
		want: unhex(t, "01 00 00 00 00 00 00 00  ff ff ff 04 03 02 01 40", 0),
	}, {
		// struct nvme_sgl_desc: addr le64, length le32, rsvd[3], type.
		name: "in-capsule offset",
		f:    SGLFields{Identifier: 0x01, Address: 0, Length: 0x00012000, Key: 0xffffffff},
		want: unhex(t, "00 00 00 00 00 00 00 00  00 20 01 00 00 00 00 01", 0),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := make([]byte, SGLSize)
			for i := range b {
				b[i] = 0xee
			}
			s := SGL(b)
			s.Encode(&tt.f)
			checkBytes(t, "SGL", b, tt.want)
			want := tt.f
			if !s.Keyed() {
				want.Key = 0
			}
			if d := cmp.Diff(want, s.Fields()); d != "" {
				t.Errorf("Fields (-want +got):\n%s", d)
			}
		})
	}
	if _, err := ParseSGL(make([]byte, 15)); !errors.Is(err, errShortSGL) {
		t.Errorf("ParseSGL(15 bytes) = %v", err)
	}
}

func TestSGLCheckRDMA(t *testing.T) {
	tests := []struct {
		name      string
		f         SGLFields
		write     bool
		inCapsule uint32
		status    Status
		loc       uint16
	}{
		{"keyed 0x40", SGLFields{Identifier: 0x40, Length: 4096}, false, 0, 0, 0},
		{"keyed 0x4f", SGLFields{Identifier: 0x4f, Length: 4096}, true, 0, 0, 0},
		{"keyed zero length", SGLFields{Identifier: 0x40}, false, 0, 0, 0},
		{"keyed subtype 1", SGLFields{Identifier: 0x41}, false, 0, 0x4002, 24},
		{"keyed transport subtype", SGLFields{Identifier: 0x4a}, false, 0, 0x4002, 24},
		{"in-capsule whole", SGLFields{Identifier: 0x01, Length: 4096}, true, 4096, 0, 0},
		{"in-capsule tail", SGLFields{Identifier: 0x01, Address: 4000, Length: 96}, true, 4096, 0, 0},
		{"in-capsule empty", SGLFields{Identifier: 0x01}, true, 0, 0, 0},
		{"in-capsule too long", SGLFields{Identifier: 0x01, Length: 4097}, true, 4096, 0x4016, 24},
		{"in-capsule offset past", SGLFields{Identifier: 0x01, Address: 4097}, true, 4096, 0x4016, 24},
		{"in-capsule wrapping", SGLFields{Identifier: 0x01, Address: 0xfffffffffffffe00, Length: 0x1000}, true, 4096, 0x4016, 24},
		{"in-capsule on a read", SGLFields{Identifier: 0x01, Length: 512}, false, 4096, 0x4002, 0},
		{"data block address", SGLFields{Identifier: 0x00, Length: 512}, true, 4096, 0x4002, 24},
		{"segment", SGLFields{Identifier: 0x20}, true, 0, 0x4011, 24},
		{"last segment", SGLFields{Identifier: 0x30}, true, 0, 0x4011, 24},
		{"bit bucket", SGLFields{Identifier: 0x10}, true, 0, 0x4011, 24},
		{"TCP transport data block", SGLFields{Identifier: 0x5a}, true, 0, 0x4011, 24},
		{"vendor", SGLFields{Identifier: 0xf0}, true, 0, 0x4011, 24},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := make([]byte, SGLSize)
			SGL(b).Encode(&tt.f)
			err := SGL(b).CheckRDMA(tt.write, tt.inCapsule)
			if tt.status == 0 {
				if err != nil {
					t.Fatalf("CheckRDMA = %v, want nil", err)
				}
				return
			}
			var ce *CommandError
			if !errors.As(err, &ce) || ce.Status != tt.status || ce.Loc != tt.loc {
				t.Fatalf("CheckRDMA = %v, want status %v at byte %d", err, tt.status, tt.loc)
			}
		})
	}
}

func TestCheckTransferLen(t *testing.T) {
	if err := CheckTransferLen(4096, 4096); err != nil {
		t.Errorf("CheckTransferLen(equal) = %v", err)
	}
	var ce *CommandError
	err := CheckTransferLen(4096, 512)
	if !errors.As(err, &ce) || ce.Status != StatusSGLInvalidDataLength|StatusDNR || ce.Loc != 24 {
		t.Errorf("CheckTransferLen(mismatch) = %v, want Data SGL Length Invalid, DNR at byte 24", err)
	}
	if !errors.Is(err, errTransferLen) {
		t.Errorf("CheckTransferLen error does not wrap errTransferLen")
	}
}
