package nvmeof

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCQEGolden(t *testing.T) {
	tests := []struct {
		name string
		f    CQEFields
		want []byte
	}{{
		// struct nvme_completion: result (8), sq_head, sq_id, command_id,
		// status (phase in bit 0).
		name: "connect success, cntlid 1",
		f:    CQEFields{Result: uint64(ConnectResult(1, 0)), SQHead: 1, SQID: 0, CID: 0},
		want: unhex(t, "01 00 00 00 00 00 00 00  01 00 00 00 00 00 00 00", 0),
	}, {
		name: "property get CAP",
		f:    CQEFields{Result: 0x000000200f0003ff, SQHead: 2, CID: 0x1234},
		want: unhex(t, "ff 03 00 0f 20 00 00 00  02 00 00 00 34 12 00 00", 0),
	}, {
		// NVME_SC_INVALID_FIELD | NVME_SC_DNR = 0x4002, shifted: 0x8004.
		name: "invalid field, DNR",
		f:    CQEFields{SQHead: 3, SQID: 1, CID: 7, Status: StatusInvalidField | StatusDNR},
		want: unhex(t, "00 00 00 00 00 00 00 00  03 00 01 00 07 00 04 80", 0),
	}, {
		// 0x4080 << 1 = 0x8100.
		name: "LBA out of range, DNR",
		f:    CQEFields{SQID: 2, CID: 0xffff, Status: StatusLBAOutOfRange | StatusDNR},
		want: unhex(t, "00 00 00 00 00 00 00 00  00 00 02 00 ff ff 00 81", 0),
	}, {
		// 0x4285 << 1 = 0x850a; with nvmet's More bit (1<<14 of the raw
		// word): 0xc50a.
		name: "compare failure, DNR, More, phase",
		f:    CQEFields{SQID: 1, CID: 9, Status: StatusCompareFailure | StatusDNR | StatusMore, Phase: true},
		want: unhex(t, "00 00 00 00 00 00 00 00  00 00 01 00 09 00 0b c5", 0),
	}, {
		// Connect Invalid Parameters, DNR, IATTR data / IPO of cntlid.
		name: "connect invalid parameters",
		f: CQEFields{Result: uint64(ConnectInvalidParamResult(true, 16)), SQHead: 1,
			Status: StatusConnectInvalidParameters | StatusDNR},
		want: unhex(t, "10 00 01 00 00 00 00 00  01 00 00 00 00 00 04 83", 0), // 0x4182 << 1 = 0x8304
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := make([]byte, CQESize)
			c := CQE(b)
			c.Encode(&tt.f)
			checkBytes(t, "CQE", b, tt.want)
			p, err := ParseCQE(tt.want)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.f, p.Fields()); d != "" {
				t.Errorf("parsed CQE (-want +got):\n%s", d)
			}
		})
	}
	if _, err := ParseCQE(make([]byte, 15)); !errors.Is(err, errShortCQE) {
		t.Errorf("ParseCQE(15 bytes) = %v", err)
	}
}

func TestCQEAccessors(t *testing.T) {
	b := unhex(t, "78 56 34 12 f0 de bc 9a  ff ff 05 00 2a 00 05 80", 0)
	c := CQE(b)
	if c.DW0() != 0x12345678 || c.DW1() != 0x9abcdef0 || c.Result() != 0x9abcdef012345678 ||
		c.SQHead() != SQHeadDisabled || c.SQID() != 5 || c.CID() != 42 || c.RawStatus() != 0x8005 ||
		c.Status() != StatusInvalidField|StatusDNR || !c.Phase() {
		t.Errorf("CQE accessors: %+v raw %#x", c.Fields(), c.RawStatus())
	}
	inData, off := ParseConnectInvalidParam(ConnectInvalidParamResult(false, 42))
	if inData || off != 42 {
		t.Errorf("ParseConnectInvalidParam(SQE qid) = %v, %d", inData, off)
	}
	inData, off = ParseConnectInvalidParam(0x00010200)
	if !inData || off != 512 {
		t.Errorf("ParseConnectInvalidParam(data hostnqn) = %v, %d", inData, off)
	}
}
