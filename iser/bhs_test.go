package iser

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The golden headers below are built from the byte offsets of the structs
// in Linux include/scsi/iscsi_proto.h (and RFC 7143 section 11 where the
// Linux struct is stale, as for SNACK), independently of this package's
// offset constants.

// rfc3720ReadPDU is the SCSI READ(10) command of RFC 3720 appendix B.4.
const rfc3720ReadPDU = `01 c0 00 00 00 00 00 00 00 00 00 00 00 00 00 00
	14 00 00 00 00 00 04 00 00 00 00 14 00 00 00 18
	28 00 00 00 00 00 00 00 02 00 00 00 00 00 00 00`

type goldenCase struct {
	name   string
	encode func(b []byte)
	golden func() []byte
	// reencode decodes b with Fields and encodes the result into c.
	reencode func(b, c []byte)
}

func goldenCases(t testing.TB) []goldenCase {
	return []goldenCase{
		{
			name: "SCSI Command (RFC 3720 B.4 READ(10))",
			encode: func(b []byte) {
				var cdb [16]byte
				cdb[0], cdb[8] = 0x28, 0x02
				SCSICommand(b).Encode(&SCSICommandFields{Final: true, Read: true, ITT: 0x14000000,
					ExpectedDataTransferLength: 1024, CmdSN: 0x14, ExpStatSN: 0x18, CDB: cdb})
			},
			golden: func() []byte { return unhex(t, rfc3720ReadPDU, 0) },
			reencode: func(b, c []byte) {
				f := SCSICommand(b).Fields()
				SCSICommand(c).Encode(&f)
			},
		},
		{
			name: "SCSI Command write, immediate, ordered",
			encode: func(b []byte) {
				var cdb [16]byte
				cdb[0] = 0x8a
				SCSICommand(b).Encode(&SCSICommandFields{Immediate: true, Write: true, Attr: AttrOrdered,
					LUN: EncodeLUN(3), ITT: 7, ExpectedDataTransferLength: 0x10000, CmdSN: 9, ExpStatSN: 2, CDB: cdb})
			},
			golden: func() []byte {
				b := make([]byte, 48)
				at(b, 0, 0x41, 0x22)      // opcode|I, flags W|ATTR ordered (iscsi_cmd.flags)
				at(b, 8, 0, 3)            // lun[8]: peripheral LUN 3
				at(b, 16, be32(7)...)     // itt
				at(b, 20, be32(65536)...) // data_length
				at(b, 24, be32(9)...)     // cmdsn
				at(b, 28, be32(2)...)     // exp_statsn
				at(b, 32, 0x8a)           // cdb[16]
				return b
			},
			reencode: func(b, c []byte) { f := SCSICommand(b).Fields(); SCSICommand(c).Encode(&f) },
		},
		{
			name: "SCSI Response",
			encode: func(b []byte) {
				SCSIResponse(b).Encode(&SCSIResponseFields{Underflow: true, BidiOverflow: true, Status: 0x02,
					ITT: 0x01020304, StatSN: 10, ExpCmdSN: 11, MaxCmdSN: 42, ExpDataSN: 3,
					BidiReadResidualCount: 5, ResidualCount: 512})
			},
			golden: func() []byte {
				b := make([]byte, 48)
				at(b, 0, 0x21, 0x80|0x10|0x02, 0x00, 0x02) // opcode, flags, response, cmd_status
				at(b, 16, 1, 2, 3, 4)                      // itt
				at(b, 24, be32(10)...)                     // statsn
				at(b, 28, be32(11)...)                     // exp_cmdsn
				at(b, 32, be32(42)...)                     // max_cmdsn
				at(b, 36, be32(3)...)                      // exp_datasn
				at(b, 40, be32(5)...)                      // bi_residual_count
				at(b, 44, be32(512)...)                    // residual_count
				return b
			},
			reencode: func(b, c []byte) { f := SCSIResponse(b).Fields(); SCSIResponse(c).Encode(&f) },
		},
		{
			name: "Task Management Request",
			encode: func(b []byte) {
				TaskMgmtRequest(b).Encode(&TaskMgmtRequestFields{Immediate: true, Function: TMFAbortTask,
					LUN: EncodeLUN(1), ITT: 0x20, ReferencedTaskTag: 0x10, CmdSN: 5, ExpStatSN: 6, RefCmdSN: 4, ExpDataSN: 0})
			},
			golden: func() []byte {
				b := make([]byte, 48)
				at(b, 0, 0x42, 0x81)     // opcode|I, F|function
				at(b, 8, 0, 1)           // lun
				at(b, 16, be32(0x20)...) // itt
				at(b, 20, be32(0x10)...) // rtt
				at(b, 24, be32(5)...)    // cmdsn
				at(b, 28, be32(6)...)    // exp_statsn
				at(b, 32, be32(4)...)    // refcmdsn
				return b
			},
			reencode: func(b, c []byte) { f := TaskMgmtRequest(b).Fields(); TaskMgmtRequest(c).Encode(&f) },
		},
		{
			name: "Task Management Response",
			encode: func(b []byte) {
				TaskMgmtResponse(b).Encode(&TaskMgmtResponseFields{Response: TMFNoTask, ITT: 0x20, StatSN: 1, ExpCmdSN: 2, MaxCmdSN: 3})
			},
			golden: func() []byte {
				b := make([]byte, 48)
				at(b, 0, 0x22, 0x80, 0x01) // opcode, flags, response
				at(b, 16, be32(0x20)...)
				at(b, 24, be32(1)...)
				at(b, 28, be32(2)...)
				at(b, 32, be32(3)...)
				return b
			},
			reencode: func(b, c []byte) { f := TaskMgmtResponse(b).Fields(); TaskMgmtResponse(c).Encode(&f) },
		},
		{
			name: "Login Request",
			encode: func(b []byte) {
				LoginRequest(b).Encode(&LoginRequestFields{Transit: true, CSG: StageSecurity, NSG: StageOperational,
					ISID: ISID{0x00, 0x02, 0x3d, 0x00, 0x00, 0x01}, ITT: 0x55, CID: 1, CmdSN: 0x100, ExpStatSN: 0x200})
			},
			golden: func() []byte {
				b := make([]byte, 48)
				at(b, 0, 0x43, 0x81, 0x00, 0x00)    // opcode|I, T|CSG 0|NSG 1, max_version, min_version
				at(b, 8, 0x00, 0x02, 0x3d, 0, 0, 1) // isid[6]
				at(b, 16, be32(0x55)...)            // itt
				at(b, 20, 0, 1)                     // cid
				at(b, 24, be32(0x100)...)           // cmdsn
				at(b, 28, be32(0x200)...)           // exp_statsn
				return b
			},
			reencode: func(b, c []byte) { f := LoginRequest(b).Fields(); LoginRequest(c).Encode(&f) },
		},
		{
			name: "Login Response",
			encode: func(b []byte) {
				LoginResponse(b).Encode(&LoginResponseFields{Transit: true, CSG: StageOperational, NSG: StageFullFeature,
					ISID: ISID{0x80, 1, 2, 3, 4, 5}, TSIH: 0x1234, ITT: 0x55, StatSN: 7, ExpCmdSN: 0x100, MaxCmdSN: 0x13f})
			},
			golden: func() []byte {
				b := make([]byte, 48)
				at(b, 0, 0x23, 0x87)          // opcode, T|CSG 1|NSG 3
				at(b, 8, 0x80, 1, 2, 3, 4, 5) // isid
				at(b, 14, 0x12, 0x34)         // tsih
				at(b, 16, be32(0x55)...)      // itt
				at(b, 24, be32(7)...)         // statsn
				at(b, 28, be32(0x100)...)     // exp_cmdsn
				at(b, 32, be32(0x13f)...)     // max_cmdsn
				return b
			},
			reencode: func(b, c []byte) { f := LoginResponse(b).Fields(); LoginResponse(c).Encode(&f) },
		},
		{
			name: "Login Response failure 02/07",
			encode: func(b []byte) {
				LoginResponse(b).Encode(&LoginResponseFields{CSG: StageSecurity, ITT: 1, Status: LoginMissingParameter})
			},
			golden: func() []byte {
				b := make([]byte, 48)
				at(b, 0, 0x23, 0x00)
				at(b, 16, be32(1)...)
				at(b, 36, 0x02, 0x07) // status_class, status_detail
				return b
			},
			reencode: func(b, c []byte) { f := LoginResponse(b).Fields(); LoginResponse(c).Encode(&f) },
		},
		{
			name: "Text Request",
			encode: func(b []byte) {
				TextRequest(b).Encode(&TextRequestFields{Immediate: true, Final: true, ITT: 3, TTT: ReservedTag, CmdSN: 8, ExpStatSN: 9})
			},
			golden: func() []byte {
				b := make([]byte, 48)
				at(b, 0, 0x44, 0x80)
				at(b, 16, be32(3)...)
				at(b, 20, 0xff, 0xff, 0xff, 0xff) // ttt
				at(b, 24, be32(8)...)
				at(b, 28, be32(9)...)
				return b
			},
			reencode: func(b, c []byte) { f := TextRequest(b).Fields(); TextRequest(c).Encode(&f) },
		},
		{
			name: "Text Response continued",
			encode: func(b []byte) {
				TextResponse(b).Encode(&TextResponseFields{Continue: true, ITT: 3, TTT: 0x77, StatSN: 1, ExpCmdSN: 2, MaxCmdSN: 3})
			},
			golden: func() []byte {
				b := make([]byte, 48)
				at(b, 0, 0x24, 0x40) // C bit ISCSI_FLAG_TEXT_CONTINUE
				at(b, 16, be32(3)...)
				at(b, 20, be32(0x77)...)
				at(b, 24, be32(1)...)
				at(b, 28, be32(2)...)
				at(b, 32, be32(3)...)
				return b
			},
			reencode: func(b, c []byte) { f := TextResponse(b).Fields(); TextResponse(c).Encode(&f) },
		},
		{
			name: "SCSI Data-Out",
			encode: func(b []byte) {
				DataOut(b).Encode(&DataOutFields{Final: true, LUN: EncodeLUN(0), ITT: 4, TTT: 0x99, ExpStatSN: 5, DataSN: 2, BufferOffset: 8192})
			},
			golden: func() []byte {
				b := make([]byte, 48)
				at(b, 0, 0x05, 0x80)
				at(b, 16, be32(4)...)    // itt
				at(b, 20, be32(0x99)...) // ttt
				at(b, 28, be32(5)...)    // exp_statsn
				at(b, 36, be32(2)...)    // datasn
				at(b, 40, be32(8192)...) // offset
				return b
			},
			reencode: func(b, c []byte) { f := DataOut(b).Fields(); DataOut(c).Encode(&f) },
		},
		{
			name: "SCSI Data-In with status",
			encode: func(b []byte) {
				DataIn(b).Encode(&DataInFields{Final: true, HasStatus: true, Underflow: true, Status: 0, LUN: EncodeLUN(1),
					ITT: 4, TTT: ReservedTag, StatSN: 6, ExpCmdSN: 7, MaxCmdSN: 8, DataSN: 1, BufferOffset: 4096, ResidualCount: 100})
			},
			golden: func() []byte {
				b := make([]byte, 48)
				at(b, 0, 0x25, 0x80|0x02|0x01, 0x00, 0x00) // F|U|S, rsvd2, cmd_status
				at(b, 8, 0, 1)
				at(b, 16, be32(4)...)
				at(b, 20, 0xff, 0xff, 0xff, 0xff)
				at(b, 24, be32(6)...)
				at(b, 28, be32(7)...)
				at(b, 32, be32(8)...)
				at(b, 36, be32(1)...)
				at(b, 40, be32(4096)...)
				at(b, 44, be32(100)...)
				return b
			},
			reencode: func(b, c []byte) { f := DataIn(b).Fields(); DataIn(c).Encode(&f) },
		},
		{
			name: "Logout Request",
			encode: func(b []byte) {
				LogoutRequest(b).Encode(&LogoutRequestFields{Immediate: true, Reason: LogoutCloseSession, ITT: 0x30, CID: 1, CmdSN: 0x21, ExpStatSN: 0x22})
			},
			golden: func() []byte {
				b := make([]byte, 48)
				at(b, 0, 0x46, 0x80)
				at(b, 16, be32(0x30)...)
				at(b, 20, 0, 1) // cid
				at(b, 24, be32(0x21)...)
				at(b, 28, be32(0x22)...)
				return b
			},
			reencode: func(b, c []byte) { f := LogoutRequest(b).Fields(); LogoutRequest(c).Encode(&f) },
		},
		{
			name: "Logout Response",
			encode: func(b []byte) {
				LogoutResponse(b).Encode(&LogoutResponseFields{Response: LogoutSuccess, ITT: 0x30, StatSN: 1, ExpCmdSN: 2, MaxCmdSN: 3, Time2Wait: 2, Time2Retain: 20})
			},
			golden: func() []byte {
				b := make([]byte, 48)
				at(b, 0, 0x26, 0x80, 0x00)
				at(b, 16, be32(0x30)...)
				at(b, 24, be32(1)...)
				at(b, 28, be32(2)...)
				at(b, 32, be32(3)...)
				at(b, 40, 0, 2, 0, 20) // t2wait, t2retain
				return b
			},
			reencode: func(b, c []byte) { f := LogoutResponse(b).Fields(); LogoutResponse(c).Encode(&f) },
		},
		{
			name: "R2T",
			encode: func(b []byte) {
				R2T(b).Encode(&R2TFields{LUN: EncodeLUN(2), ITT: 5, TTT: 0x1000, StatSN: 3, ExpCmdSN: 4, MaxCmdSN: 5, R2TSN: 1,
					BufferOffset: 65536, DesiredDataTransferLength: 262144})
			},
			golden: func() []byte {
				b := make([]byte, 48)
				at(b, 0, 0x31, 0x80)
				at(b, 8, 0, 2)
				at(b, 16, be32(5)...)
				at(b, 20, be32(0x1000)...)
				at(b, 24, be32(3)...)
				at(b, 28, be32(4)...)
				at(b, 32, be32(5)...)
				at(b, 36, be32(1)...)      // r2tsn
				at(b, 40, be32(65536)...)  // data_offset
				at(b, 44, be32(262144)...) // data_length
				return b
			},
			reencode: func(b, c []byte) { f := R2T(b).Fields(); R2T(c).Encode(&f) },
		},
		{
			name: "Asynchronous Message",
			encode: func(b []byte) {
				AsyncMessage(b).Encode(&AsyncMessageFields{LUN: EncodeLUN(0), StatSN: 9, ExpCmdSN: 10, MaxCmdSN: 11,
					Event: AsyncRequestLogout, Parameter3: 5})
			},
			golden: func() []byte {
				b := make([]byte, 48)
				at(b, 0, 0x32, 0x80)
				at(b, 16, 0xff, 0xff, 0xff, 0xff) // ITT reserved (RFC 7143 11.9)
				at(b, 24, be32(9)...)
				at(b, 28, be32(10)...)
				at(b, 32, be32(11)...)
				at(b, 36, 0x01, 0x00) // async_event, async_vcode
				at(b, 42, 0, 5)       // param3
				return b
			},
			reencode: func(b, c []byte) { f := AsyncMessage(b).Fields(); AsyncMessage(c).Encode(&f) },
		},
		{
			name: "Reject",
			encode: func(b []byte) {
				Reject(b).Encode(&RejectFields{Reason: RejectProtocolError, StatSN: 1, ExpCmdSN: 2, MaxCmdSN: 3})
			},
			golden: func() []byte {
				b := make([]byte, 48)
				at(b, 0, 0x3f, 0x80, 0x04)
				at(b, 16, 0xff, 0xff, 0xff, 0xff) // ffffffff
				at(b, 24, be32(1)...)
				at(b, 28, be32(2)...)
				at(b, 32, be32(3)...)
				return b
			},
			reencode: func(b, c []byte) { f := Reject(b).Fields(); Reject(c).Encode(&f) },
		},
		{
			name: "NOP-Out ping answer",
			encode: func(b []byte) {
				NOPOut(b).Encode(&NOPOutFields{Immediate: true, ITT: ReservedTag, TTT: 0x42, CmdSN: 5, ExpStatSN: 6})
			},
			golden: func() []byte {
				b := make([]byte, 48)
				at(b, 0, 0x40, 0x80)
				at(b, 16, 0xff, 0xff, 0xff, 0xff)
				at(b, 20, be32(0x42)...)
				at(b, 24, be32(5)...)
				at(b, 28, be32(6)...)
				return b
			},
			reencode: func(b, c []byte) { f := NOPOut(b).Fields(); NOPOut(c).Encode(&f) },
		},
		{
			name: "NOP-In",
			encode: func(b []byte) {
				NOPIn(b).Encode(&NOPInFields{ITT: 0x12, TTT: ReservedTag, StatSN: 5, ExpCmdSN: 6, MaxCmdSN: 7})
			},
			golden: func() []byte {
				b := make([]byte, 48)
				at(b, 0, 0x20, 0x80)
				at(b, 16, be32(0x12)...)
				at(b, 20, 0xff, 0xff, 0xff, 0xff)
				at(b, 24, be32(5)...)
				at(b, 28, be32(6)...)
				at(b, 32, be32(7)...)
				return b
			},
			reencode: func(b, c []byte) { f := NOPIn(b).Fields(); NOPIn(c).Encode(&f) },
		},
		{
			name: "SNACK (RFC 7143 11.16 layout)",
			encode: func(b []byte) {
				SNACK(b).Encode(&SNACKFields{Type: SNACKStatus, ITT: ReservedTag, TTT: ReservedTag, ExpStatSN: 4, BegRun: 2, RunLength: 1})
			},
			golden: func() []byte {
				b := make([]byte, 48)
				at(b, 0, 0x10, 0x81)
				at(b, 16, 0xff, 0xff, 0xff, 0xff)
				at(b, 20, 0xff, 0xff, 0xff, 0xff)
				at(b, 28, be32(4)...)
				at(b, 40, be32(2)...) // BegRun
				at(b, 44, be32(1)...) // RunLength
				return b
			},
			reencode: func(b, c []byte) { f := SNACK(b).Fields(); SNACK(c).Encode(&f) },
		},
	}
}

func TestBHSGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range goldenCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := dirty()
			tc.encode(b)
			want := tc.golden()
			checkBytes(t, "encoded BHS", b, want)
			c := dirty()
			tc.reencode(want, c)
			checkBytes(t, "decode+encode of golden BHS", c, want)
		})
	}
}

func TestBHSCommon(t *testing.T) {
	t.Parallel()
	b := unhex(t, rfc3720ReadPDU, 0)
	h, err := ParseBHS(b)
	if err != nil {
		t.Fatal(err)
	}
	if h.Opcode() != OpSCSICommand || h.Immediate() || !h.Final() || h.ITT() != 0x14000000 {
		t.Errorf("common fields: op %v imm %v final %v itt %#x", h.Opcode(), h.Immediate(), h.Final(), h.ITT())
	}
	c := SCSICommand(h)
	if !c.Read() || c.Write() || c.Attr() != AttrUntagged || c.ExpectedDataTransferLength() != 1024 ||
		c.CmdSN() != 0x14 || c.ExpStatSN() != 0x18 || c.CDB()[0] != 0x28 {
		t.Errorf("command fields: %+v", c.Fields())
	}
	h.SetLengths(8, 0x123456)
	if h.TotalAHSLength() != 8 || h.DataSegmentLength() != 0x123456 || b[4] != 2 || b[5] != 0x12 || b[7] != 0x56 {
		t.Errorf("SetLengths: ahs %d dsl %#x bytes % x", h.TotalAHSLength(), h.DataSegmentLength(), b[4:8])
	}
	if _, err := ParseBHS(b[:47]); !errors.Is(err, errShortBHS) {
		t.Errorf("ParseBHS(47 bytes) = %v", err)
	}
	for op := Opcode(0); op < 64; op++ {
		if op.String() == "" {
			t.Errorf("opcode %#x has no name", uint8(op))
		}
	}
	if !OpSCSICommand.Initiator() || OpSCSIResponse.Initiator() || !OpReject.Known() || Opcode(0x11).Known() {
		t.Error("Opcode.Initiator/Known")
	}
}

func TestLUN(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n    uint16
		want uint64
	}{
		{0, 0}, {5, 0x0005_0000_0000_0000}, {255, 0x00ff_0000_0000_0000}, {256, 0x4100_0000_0000_0000},
		{16383, 0x7fff_0000_0000_0000},
	} {
		if got := EncodeLUN(tc.n); got != tc.want {
			t.Errorf("EncodeLUN(%d) = %#x, want %#x", tc.n, got, tc.want)
		}
		if n, ok := DecodeLUN(tc.want); !ok || n != tc.n {
			t.Errorf("DecodeLUN(%#x) = %d, %v", tc.want, n, ok)
		}
	}
	for _, bad := range []uint64{0x0005_0000_0000_0001, 0x8000_0000_0000_0000, 0x0105_0000_0000_0000} {
		if _, ok := DecodeLUN(bad); ok {
			t.Errorf("DecodeLUN(%#x) accepted", bad)
		}
	}
}

func TestAHS(t *testing.T) {
	t.Parallel()
	cdb := make([]byte, 32)
	for i := range cdb {
		cdb[i] = byte(i + 1)
	}
	area := AppendExtendedCDBAHS(nil, cdb)
	area = AppendBidiReadLengthAHS(area, 0x10000)
	// struct iscsi_ecdb_ahdr: ahslength = CDB length - 15 = 17, type 1,
	// reserved, then CDB bytes 16..31 and 3 pad bytes to 20+... bytes.
	want := []byte{0x00, 17, 0x01, 0x00}
	want = append(want, cdb[16:]...)
	want = append(want, 0, 0, 0, 0) // 4+16 = 20, already aligned? 3+17 = 20: no pad
	want = want[:20]
	want = append(want, 0x00, 0x05, 0x02, 0x00, 0x00, 0x01, 0x00, 0x00) // struct iscsi_rlength_ahdr
	checkBytes(t, "AHS area", area, want)
	c, err := ParseCommandAHS(area)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(CommandAHS{ExtendedCDB: cdb[16:], BidiReadLength: 0x10000, HasBidiReadLength: true}, c); d != "" {
		t.Errorf("ParseCommandAHS (-want +got):\n%s", d)
	}
	hdr := make([]byte, 48)
	var first [16]byte
	copy(first[:], cdb)
	SCSICommand(hdr).Encode(&SCSICommandFields{CDB: first})
	if full := AppendCDB(nil, SCSICommand(hdr), c); !cmp.Equal(full, cdb) {
		t.Errorf("AppendCDB = % x", full)
	}
	// A 20-byte CDB: AHSLength 5, 4 CDB bytes, padded to 8.
	a20 := AppendExtendedCDBAHS(nil, cdb[:20])
	checkBytes(t, "20-byte CDB AHS", a20, []byte{0, 5, 1, 0, 17, 18, 19, 20})
	if AppendExtendedCDBAHS(nil, cdb[:16]) != nil {
		t.Error("16-byte CDB got an AHS")
	}
	for _, bad := range [][]byte{
		{0, 9, 1, 0},             // overruns
		{0, 5, 7, 0, 0, 0, 0, 0}, // unknown type
		{0, 1, 2, 0},             // bidi of wrong length
		{0, 5, 2, 0, 0, 0, 0, 1, 0, 5, 2, 0, 0, 0, 0, 1}, // twice
		{0, 0}, // short
	} {
		if _, err := ParseCommandAHS(bad); err == nil {
			t.Errorf("ParseCommandAHS(% x) accepted", bad)
		}
	}
}

func TestSenseData(t *testing.T) {
	t.Parallel()
	sense := []byte{0x70, 0, 5, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x24, 0}
	d := AppendSenseData(nil, sense)
	if d[0] != 0 || d[1] != 14 || !cmp.Equal(SenseData(d), sense) {
		t.Errorf("sense data % x", d)
	}
	if SenseData([]byte{0, 9, 1}) != nil || SenseData([]byte{1}) != nil || AppendSenseData(nil, nil) != nil {
		t.Error("SenseData accepted inconsistent lengths")
	}
}
