package srp

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rdisk/rdisk/scsi"
)

// Golden IUs, written by hand from the layouts of Linux include/scsi/srp.h
// (multi-byte fields big-endian; offsets in the comments).
var (
	portI = PortID{0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f}
	portT = PortID{0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f}

	loginReqFields = LoginReqFields{Tag: 0x0102030405060708, ReqITIULen: 8260, ReqBufFmt: BufFmtDirect | BufFmtIndirect,
		ReqFlags: ImmedRequested | MultiChanMulti, ImmDataOffset: 68, InitiatorPortID: portI, TargetPortID: portT}

	// struct srp_login_req_rdma: 0 tag, 8 req_buf_fmt, 10 req_flags,
	// 11 opcode, 12 req_it_iu_len, 16 initiator port ID, 32 target port
	// ID, 48 imm_data_offset, 50 reserved[6].
	goldenLoginReqRDMA = "0102030405060708" + "0006" + "81" + "00" + "00002044" +
		"101112131415161718191a1b1c1d1e1f" + "202122232425262728292a2b2c2d2e2f" + "0044" + "000000000000"
	// struct srp_login_req: 0 opcode, 8 tag, 16 req_it_iu_len,
	// 24 req_buf_fmt, 26 req_flags, 28 imm_data_offset, 32 initiator
	// port ID, 48 target port ID.
	goldenLoginReq = "00" + "00000000000000" + "0102030405060708" + "00002044" + "00000000" + "0006" + "81" + "00" + "0044" + "0000" +
		"101112131415161718191a1b1c1d1e1f" + "202122232425262728292a2b2c2d2e2f"
	// struct srp_login_rsp (52 bytes, packed).
	goldenLoginRsp = "c0" + "000000" + "00000040" + "0102030405060708" + "00002044" + "00000120" + "0006" + "82" + strings.Repeat("00", 25)
	// struct srp_login_rej.
	goldenLoginRej = "c2" + "000000" + "00010002" + "0102030405060708" + "0000000000000000" + "0006" + "000000000000"
	goldenILogout  = "03" + "00000000000000" + "0102030405060708"
	goldenTLogout  = "80" + "01" + "0000" + "00000004" + "0102030405060708"
	// struct srp_tsk_mgmt: 0 opcode, 1 sol_not, 8 tag, 20 lun,
	// 30 tsk_mgmt_func, 32 task_tag.
	goldenTskMgmt = "01" + "02" + "000000000000" + "0102030405060708" + "00000000" + "0005000000000000" + "0000" + "08" + "00" +
		"1112131415161718" + "0000000000000000"
	// struct srp_cmd: 0 opcode, 1 sol_not, 5 buf_fmt, 6 data_out_desc_cnt,
	// 7 data_in_desc_cnt, 8 tag, 20 lun, 29 task_attr, 31 add_cdb_len,
	// 32 cdb[16].
	goldenCmd = "02" + "06" + "000000" + "12" + "03" + "00" + "0102030405060708" + "00000000" + "0005000000000000" + "00" + "02" + "00" + "04" +
		"28000000001000000800000000000000"
	// struct srp_rsp: 0 opcode, 1 sol_not, 4 req_lim_delta, 8 tag,
	// 18 flags, 19 status, 20 data_out_res_cnt, 24 data_in_res_cnt,
	// 28 sense_data_len, 32 resp_data_len, then sense data.
	goldenRsp = "c1" + "01" + "0000" + "00000005" + "0102030405060708" + "0000" + "22" + "02" + "00000000" + "00001000" + "00000012" + "00000000" +
		"700006000000000a000000002a090000" + "0000"
	goldenCredReq = "81" + "00" + "0000" + "00000003" + "0102030405060708"
	goldenCredRsp = "41" + "00000000000000" + "0102030405060708"
	// struct srp_aer_req: 0 opcode, 4 req_lim_delta, 8 tag, 20 lun,
	// 28 sense_data_len, 36 sense data.
	goldenAERReq = "82" + "00" + "0000" + "00000002" + "0102030405060708" + "00000000" + "0003000000000000" + "00000012" + "00000000" +
		"700006000000000a000000002a090000" + "0000"
	goldenAERRsp = "42" + "00000000000000" + "0102030405060708"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGoldenSizes(t *testing.T) {
	for name, tc := range map[string]struct {
		hex  string
		size int
	}{
		"login_req_rdma": {goldenLoginReqRDMA, LoginReqRDMASize}, "login_req": {goldenLoginReq, LoginReqSize},
		"login_rsp": {goldenLoginRsp, LoginRspSize}, "login_rej": {goldenLoginRej, LoginRejSize},
		"i_logout": {goldenILogout, ILogoutSize}, "t_logout": {goldenTLogout, TLogoutSize},
		"tsk_mgmt": {goldenTskMgmt, TskMgmtSize}, "cmd": {goldenCmd, CmdSize}, "rsp": {goldenRsp, RspSize + 18},
		"cred_req": {goldenCredReq, CredReqSize}, "cred_rsp": {goldenCredRsp, CredRspSize},
		"aer_req": {goldenAERReq, AERReqSize + 18}, "aer_rsp": {goldenAERRsp, AERRspSize},
	} {
		if n := len(tc.hex) / 2; n != tc.size {
			t.Errorf("%s: golden IU of %d bytes, want %d", name, n, tc.size)
		}
	}
}

func uaSense() []byte {
	b := make([]byte, 18)
	scsi.EncodeFixedSense(b, scsi.KeyUnitAttention, scsi.ASCCapacityDataChanged, -1)
	return b
}

func TestGoldenEncode(t *testing.T) {
	check := func(name string, got []byte, want string) {
		t.Helper()
		if h := hex.EncodeToString(got); h != want {
			t.Errorf("%s:\n got %s\nwant %s", name, h, want)
		}
	}
	b := make([]byte, LoginReqRDMASize)
	LoginReqRDMA(b).Encode(&loginReqFields)
	check("login_req_rdma", b, goldenLoginReqRDMA)
	b = make([]byte, LoginReqSize)
	LoginReq(b).Encode(&loginReqFields)
	check("login_req", b, goldenLoginReq)
	b = make([]byte, LoginRspSize)
	LoginRsp(b).Encode(&LoginRspFields{ReqLimDelta: 64, Tag: 0x0102030405060708, MaxITIULen: 8260, MaxTIIULen: 288,
		BufFmt: BufFmtDirect | BufFmtIndirect, Flags: LoginRspImmedSupp | LoginRspMaintained})
	check("login_rsp", b, goldenLoginRsp)
	b = make([]byte, LoginRejSize)
	LoginRej(b).Encode(&LoginRejFields{Reason: RejITIULenTooLarge, Tag: 0x0102030405060708, BufFmt: 6})
	check("login_rej", b, goldenLoginRej)
	b = make([]byte, ILogoutSize)
	EncodeILogout(b, 0x0102030405060708)
	check("i_logout", b, goldenILogout)
	b = make([]byte, TLogoutSize)
	EncodeTLogout(b, &TLogoutFields{SolNot: SolNotSolicited, Reason: TLogoutMultiChannel, Tag: 0x0102030405060708})
	check("t_logout", b, goldenTLogout)
	b = make([]byte, TskMgmtSize)
	EncodeTskMgmt(b, &TskMgmtFields{SolNot: SolNotSuccessful, Tag: 0x0102030405060708, LUN: scsi.EncodeLUN(5), Func: TskLUNReset, TaskTag: 0x1112131415161718})
	check("tsk_mgmt", b, goldenTskMgmt)
	b = make([]byte, CmdSize)
	cf := CmdFields{SolNot: SolNotSuccessful | SolNotFailed, DataOutFmt: DescDirect, DataInFmt: DescIndirect, DataOutCount: 3,
		Tag: 0x0102030405060708, LUN: scsi.EncodeLUN(5), TaskAttr: AttrOrdered, AddCDBLen: 4}
	copy(cf.CDB[:], []byte{scsi.OpRead10, 0, 0, 0, 0, 0x10, 0, 0, 8, 0}) // READ(10) LBA 0x10, 8 blocks
	Cmd(b).Encode(&cf)
	check("cmd", b, goldenCmd)
	b = make([]byte, RspSize+18)
	n := EncodeRsp(b, &RspFields{SolNot: SolNotSolicited, ReqLimDelta: 5, Tag: 0x0102030405060708, Flags: RspFlagDIUnder,
		Status: uint8(scsi.StatusCheckCondition), DataInResid: 4096}, nil, uaSense())
	check("rsp", b[:n], goldenRsp)
	b = make([]byte, CredReqSize)
	EncodeCredReq(b, &CredReqFields{ReqLimDelta: 3, Tag: 0x0102030405060708})
	check("cred_req", b, goldenCredReq)
	b = make([]byte, CredRspSize)
	EncodeInitiatorRsp(b, OpCredRsp, 0x0102030405060708)
	check("cred_rsp", b, goldenCredRsp)
	b = make([]byte, AERReqSize+18)
	n = EncodeAERReq(b, &AERReqFields{ReqLimDelta: 2, Tag: 0x0102030405060708, LUN: scsi.EncodeLUN(3)}, uaSense())
	check("aer_req", b[:n], goldenAERReq)
	b = make([]byte, AERRspSize)
	EncodeInitiatorRsp(b, OpAERRsp, 0x0102030405060708)
	check("aer_rsp", b, goldenAERRsp)
}

func TestGoldenParse(t *testing.T) {
	diff := func(name string, got, want any) {
		t.Helper()
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", name, d)
		}
	}
	lr, err := ParseLoginReqRDMA(unhex(t, goldenLoginReqRDMA))
	if err != nil {
		t.Fatal(err)
	}
	diff("login_req_rdma", lr, loginReqFields)
	if lr.MultiChannel() != MultiChanMulti {
		t.Errorf("multichannel action %d", lr.MultiChannel())
	}
	lr, err = ParseLoginReq(unhex(t, goldenLoginReq))
	if err != nil {
		t.Fatal(err)
	}
	diff("login_req", lr, loginReqFields)
	rsp, err := ParseLoginRsp(unhex(t, goldenLoginRsp))
	if err != nil {
		t.Fatal(err)
	}
	diff("login_rsp", rsp, LoginRspFields{ReqLimDelta: 64, Tag: 0x0102030405060708, MaxITIULen: 8260, MaxTIIULen: 288, BufFmt: 6, Flags: 0x82})
	rej, err := ParseLoginRej(unhex(t, goldenLoginRej))
	if err != nil {
		t.Fatal(err)
	}
	diff("login_rej", rej, LoginRejFields{Reason: RejITIULenTooLarge, Tag: 0x0102030405060708, BufFmt: 6})
	if tag, err := ParseILogout(unhex(t, goldenILogout)); err != nil || tag != 0x0102030405060708 {
		t.Errorf("i_logout: %x, %v", tag, err)
	}
	tl, err := ParseTLogout(unhex(t, goldenTLogout))
	if err != nil {
		t.Fatal(err)
	}
	diff("t_logout", tl, TLogoutFields{SolNot: 1, Reason: TLogoutMultiChannel, Tag: 0x0102030405060708})
	tm, err := ParseTskMgmt(unhex(t, goldenTskMgmt))
	if err != nil {
		t.Fatal(err)
	}
	diff("tsk_mgmt", tm, TskMgmtFields{SolNot: 2, Tag: 0x0102030405060708, LUN: scsi.EncodeLUN(5), Func: TskLUNReset, TaskTag: 0x1112131415161718})
	cmdBytes := append(unhex(t, goldenCmd), 1, 2, 3, 4)
	c, err := ParseCmd(cmdBytes)
	if err != nil {
		t.Fatal(err)
	}
	if c.Tag() != 0x0102030405060708 || c.DataOutFmt() != DescDirect || c.DataInFmt() != DescIndirect || c.DataOutCount() != 3 ||
		c.TaskAttr() != AttrOrdered || c.AddCDBLen() != 4 || len(c.CDB()) != 20 || c.CDB()[0] != scsi.OpRead10 || c.CDB()[19] != 4 {
		t.Errorf("cmd fields %+v, CDB %x", c.Fields(), c.CDB())
	}
	if _, err := ParseCmd(unhex(t, goldenCmd)); !errors.Is(err, ErrLength) {
		t.Errorf("cmd without its additional CDB: %v, want ErrLength", err)
	}
	r, err := ParseRsp(unhex(t, goldenRsp))
	if err != nil {
		t.Fatal(err)
	}
	diff("rsp", r.Fields(), RspFields{SolNot: 1, ReqLimDelta: 5, Tag: 0x0102030405060708, Flags: RspFlagDIUnder | RspFlagSnsValid,
		Status: 2, DataInResid: 4096, SenseLen: 18})
	if sn, err := scsi.ParseSense(r.Sense()); err != nil || sn.ASC != scsi.ASCCapacityDataChanged || len(r.RespData()) != 0 {
		t.Errorf("rsp sense %x: %+v, %v", r.Sense(), sn, err)
	}
	cr, err := ParseCredReq(unhex(t, goldenCredReq))
	if err != nil {
		t.Fatal(err)
	}
	diff("cred_req", cr, CredReqFields{ReqLimDelta: 3, Tag: 0x0102030405060708})
	for _, g := range []struct {
		hex string
		op  Opcode
	}{{goldenCredRsp, OpCredRsp}, {goldenAERRsp, OpAERRsp}} {
		op, tag, err := ParseInitiatorRsp(unhex(t, g.hex))
		if err != nil || op != g.op || tag != 0x0102030405060708 {
			t.Errorf("%s: %s %x %v", g.op, op, tag, err)
		}
	}
	af, sense, err := ParseAERReq(unhex(t, goldenAERReq))
	if err != nil {
		t.Fatal(err)
	}
	diff("aer_req", af, AERReqFields{ReqLimDelta: 2, Tag: 0x0102030405060708, LUN: scsi.EncodeLUN(3), SenseLen: 18})
	diff("aer_req sense", sense, uaSense())
}

func TestParseErrors(t *testing.T) {
	short := func(name string, err error) {
		t.Helper()
		if !errors.Is(err, ErrShort) {
			t.Errorf("%s: %v, want ErrShort", name, err)
		}
	}
	_, err := ParseLoginReqRDMA(make([]byte, 55))
	short("login_req_rdma", err)
	_, err = ParseLoginRsp(make([]byte, 51))
	short("login_rsp", err)
	_, err = ParseCmd([]byte{2})
	short("cmd", err)
	_, err = ParseRsp(unhex(t, goldenRsp)[:35])
	short("rsp", err)
	if _, err := ParseRsp(unhex(t, goldenRsp)[:40]); !errors.Is(err, ErrLength) {
		t.Errorf("rsp with truncated sense: %v, want ErrLength", err)
	}
	if _, _, err := ParseAERReq(unhex(t, goldenAERReq)[:40]); !errors.Is(err, ErrLength) {
		t.Errorf("aer_req with truncated sense: %v, want ErrLength", err)
	}
	if _, err := ParseLoginRsp(unhex(t, goldenLoginRej+strings.Repeat("00", 20))); !errors.Is(err, ErrOpcode) {
		t.Errorf("login_rej as login_rsp: %v, want ErrOpcode", err)
	}
	pd := unhex(t, goldenLoginReqRDMA)
	pd[11] = byte(OpCmd)
	if _, err := ParseLoginReqRDMA(pd); !errors.Is(err, ErrOpcode) {
		t.Errorf("login private data with opcode 2: %v", err)
	}
}

// cmdIU builds an SRP_CMD with the given formats, counts and descriptor
// bytes.
func cmdIU(out, in DescFormat, outCnt, inCnt uint8, desc []byte) []byte {
	b := make([]byte, CmdSize+len(desc))
	f := CmdFields{DataOutFmt: out, DataInFmt: in, DataOutCount: outCnt, DataInCount: inCnt}
	Cmd(b).Encode(&f)
	copy(b[CmdSize:], desc)
	return b
}

func descBytes(ds ...DirectDesc) []byte {
	b := make([]byte, len(ds)*DirectDescSize)
	for i, d := range ds {
		d.Put(b[i*DirectDescSize:])
	}
	return b
}

func TestParseData(t *testing.T) {
	d1 := DirectDesc{VA: 0x1000, Key: 7, Len: 4096}
	d2 := DirectDesc{VA: 0x9000, Key: 8, Len: 1024}
	table := DirectDesc{VA: 0x5000, Key: 9, Len: 2 * DirectDescSize}
	hdr := func(total uint32, t DirectDesc) []byte {
		b := make([]byte, IndirectHdrSize)
		PutIndirectHdr(b, t, total)
		return b
	}
	imm := func(n uint32) []byte {
		b := make([]byte, 4+16+n)
		put32(b, n)
		return b
	}
	tests := []struct {
		name   string
		iu     []byte
		imm    int
		want   Data
		logout TLogoutReason
		field  int // -1: success
	}{
		{"none", cmdIU(0, 0, 0, 0, nil), 0, Data{}, 0, -1},
		{"direct in", cmdIU(0, DescDirect, 0, 0, descBytes(d1)), 0, Data{Dir: scsi.DirIn, Format: DescDirect, Length: 4096, Descs: []DirectDesc{d1}}, 0, -1},
		{"direct out", cmdIU(DescDirect, 0, 0, 0, descBytes(d1)), 0, Data{Dir: scsi.DirOut, Format: DescDirect, Length: 4096, Descs: []DirectDesc{d1}}, 0, -1},
		{"indirect inline", cmdIU(0, DescIndirect, 0, 2, append(hdr(5120, table), descBytes(d1, d2)...)), 0,
			Data{Dir: scsi.DirIn, Format: DescIndirect, Length: 5120, Descs: []DirectDesc{d1, d2}, Table: table, TableCount: 2}, 0, -1},
		{"indirect external", cmdIU(DescIndirect, 0, 1, 0, append(hdr(5120, table), descBytes(d1)...)), 0,
			Data{Dir: scsi.DirOut, Format: DescIndirect, Length: 5120, Descs: []DirectDesc{d1}, Table: table, TableCount: 2, External: true}, 0, -1},
		{"immediate", cmdIU(DescImmediate, 0, 0, 0, imm(100)), 68, Data{Dir: scsi.DirOut, Format: DescImmediate, Length: 100, ImmOffset: 68, ImmLen: 100}, 0, -1},
		{"bidirectional", cmdIU(DescDirect, DescDirect, 0, 0, descBytes(d1, d2)), 0, Data{}, 0, 5},
		{"direct truncated", cmdIU(0, DescDirect, 0, 0, make([]byte, 8)), 0, Data{}, 0, CmdSize},
		{"indirect short of the total", cmdIU(0, DescIndirect, 0, 2, append(hdr(8192, table), descBytes(d1, d2)...)), 0, Data{}, 0, CmdSize + 16},
		{"indirect table length", cmdIU(0, DescIndirect, 0, 0, hdr(10, DirectDesc{Len: 10})), 0, Data{}, 0, CmdSize + 12},
		{"indirect too many", cmdIU(0, DescIndirect, 0, 0, hdr(10, DirectDesc{Len: 5 * DirectDescSize})), 0, Data{}, 0, CmdSize + 12},
		{"indirect count", cmdIU(0, DescIndirect, 0, 3, append(hdr(5120, table), descBytes(d1, d2)...)), 0, Data{}, TLogoutInvalidInCount, 0},
		{"indirect descriptors beyond the IU", cmdIU(DescIndirect, 0, 2, 0, append(hdr(5120, table), descBytes(d1)...)), 0, Data{}, TLogoutInvalidOutCount, 0},
		{"immediate not negotiated", cmdIU(DescImmediate, 0, 0, 0, imm(100)), 0, Data{}, TLogoutUnsupportedOutFmt, 0},
		{"immediate beyond the IU", cmdIU(DescImmediate, 0, 0, 0, imm(100)[:60]), 68, Data{}, 0, CmdSize},
		{"immediate overlaps its descriptor", cmdIU(DescImmediate, 0, 0, 0, imm(100)), 50, Data{}, 0, CmdSize},
		{"format 4 out", cmdIU(4, 0, 0, 0, nil), 0, Data{}, TLogoutUnsupportedOutFmt, 0},
		{"immediate in", cmdIU(0, DescImmediate, 0, 0, nil), 68, Data{}, TLogoutUnsupportedInFmt, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			store := make([]DirectDesc, 0, 4)
			got, err := ParseData(Cmd(tc.iu), len(tc.iu), tc.imm, store, 4)
			if tc.field < 0 && tc.logout == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if len(got.Descs) == 0 {
					got.Descs = nil
				}
				if d := cmp.Diff(tc.want, got); d != "" {
					t.Errorf("(-want +got):\n%s", d)
				}
				return
			}
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("err %v, want *FormatError", err)
			}
			if tc.logout != 0 {
				if !fe.LogoutSet || fe.Logout != tc.logout {
					t.Errorf("%v: want logout %s", err, tc.logout)
				}
			} else if fe.LogoutSet || fe.Field != tc.field {
				t.Errorf("%v: want field %d", err, tc.field)
			}
		})
	}
	// An external table is completed by ParseTable.
	store := make([]DirectDesc, 0, 4)
	iu := cmdIU(DescIndirect, 0, 1, 0, append(hdr(5120, table), descBytes(d1)...))
	d, err := ParseData(Cmd(iu), len(iu), 0, store, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := ParseTable(&d, descBytes(d1, d2)); err != nil || d.External || len(d.Descs) != 2 || d.Descs[1] != d2 {
		t.Errorf("ParseTable: %+v, %v", d, err)
	}
	d, _ = ParseData(Cmd(iu), len(iu), 0, store, 4)
	if err := ParseTable(&d, descBytes(d1, DirectDesc{Len: 1})); err == nil {
		t.Errorf("ParseTable accepted descriptors short of the total")
	}
}

func TestURL(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want URL
		str  string
	}{
		{"srp://10.0.0.1", URL{Host: "10.0.0.1", Port: 5555, IDExt: DefaultIDExt, IOCGUID: DefaultIOCGUID}, "srp://10.0.0.1:5555/0000000000000001/726469736b000001"},
		{"srp://h:7000/a8c6ebfffea5c050/0x2/3", URL{Host: "h", Port: 7000, IDExt: 0xa8c6ebfffea5c050, IOCGUID: 2, LUN: 3, HasLUN: true}, "srp://h:7000/a8c6ebfffea5c050/0000000000000002/3"},
		{"srp://[fe80::1]:5555/a8c6:ebff:fea5:c050/1/", URL{Host: "fe80::1", Port: 5555, IDExt: 0xa8c6ebfffea5c050, IOCGUID: 1}, "srp://[fe80::1]:5555/a8c6ebfffea5c050/0000000000000001"},
	} {
		u, err := ParseURL(tc.in)
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if u != tc.want || u.String() != tc.str {
			t.Errorf("%s: %+v %s, want %+v %s", tc.in, u, u, tc.want, tc.str)
		}
		if back, err := ParseURL(u.String()); err != nil || back != u {
			t.Errorf("%s: round trip %+v, %v", tc.in, back, err)
		}
	}
	for _, bad := range []string{"nvme://h/x", "srp://", "srp://h:0", "srp://h/1", "srp://h/1/2/3/4", "srp://h/xyz/1", "srp://h/1/2/99999", "srp://::1/1/2", "srp://h/11111111111111111/1"} {
		if _, err := ParseURL(bad); err == nil {
			t.Errorf("%s: parsed", bad)
		}
	}
	u, _ := ParseURL("srp://169.254.99.1/1/2")
	if got := u.AddTarget(); got != "id_ext=0000000000000001,ioc_guid=0000000000000002,dest=169.254.99.1:5555" {
		t.Errorf("add_target line %q", got)
	}
}

func TestPortIDs(t *testing.T) {
	p, err := ParsePortID("0x0000000000000000505400fffe4a0b7b")
	if err != nil || p != MakePortID(0, 0x505400fffe4a0b7b) || p.String() != "0x0000000000000000505400fffe4a0b7b" {
		t.Errorf("ParsePortID: %s, %v", p, err)
	}
	if p, err := ParsePortID("505400fffe4a0b7b"); err != nil || p.GUID() != 0x505400fffe4a0b7b || p.Ext() != 0 {
		t.Errorf("short port ID: %s, %v", p, err)
	}
	for _, bad := range []string{"", "0x", "abc", "zz", strings.Repeat("00", 17)} {
		if _, err := ParsePortID(bad); err == nil {
			t.Errorf("ParsePortID(%q) accepted", bad)
		}
	}
	if g, err := ParseGUID("5054:00ff:fe4a:0b7b"); err != nil || g != 0x505400fffe4a0b7b {
		t.Errorf("ParseGUID: %x, %v", g, err)
	}
}

// TestLinuxLoginCapture parses the srp_login_req_rdma private data that
// Linux 6.1 ib_srp sent over siw to rdisk's target in the lab
// (test/interop/run-srp-linux-initiator.sh, ch_count 2): the first channel
// with MULTI-CHANNEL ACTION 0, the second with 1, both asking for immediate
// data at offset 68 and an 8260-byte IU. siw's GID has a zero interface ID,
// so the initiator port ID is all zeroes.
func TestLinuxLoginCapture(t *testing.T) {
	for i, h := range []string{
		"00000000000000000006800000002044000000000000000000000000000000000000000000000001726469736b0000010044000000000000",
		"00000000000000000006810000002044000000000000000000000000000000000000000000000001726469736b0000010044000000000000",
	} {
		f, err := ParseLoginReqRDMA(unhex(t, h))
		if err != nil {
			t.Fatal(err)
		}
		want := LoginReqFields{ReqITIULen: 8260, ReqBufFmt: BufFmtDirect | BufFmtIndirect, ReqFlags: ImmedRequested | uint8(i),
			ImmDataOffset: 68, TargetPortID: MakePortID(DefaultIDExt, DefaultIOCGUID)}
		if d := cmp.Diff(want, f); d != "" {
			t.Errorf("channel %d (-want +got):\n%s", i, d)
		}
		b := make([]byte, LoginReqRDMASize)
		LoginReqRDMA(b).Encode(&f)
		if hex.EncodeToString(b) != h {
			t.Errorf("channel %d: re-encoded %x", i, b)
		}
	}
}

// TestRejectHints: the refusals an operator meets most are explained in
// words with what to check.
func TestRejectHints(t *testing.T) {
	for _, r := range []RejectReason{RejUnableAssociateChannel, RejUnableEstablishChannel, RejInsufficientResources, RejChannelLimitReached} {
		if r.Hint() == "" {
			t.Errorf("%v has no hint", r)
		}
	}
	if !strings.Contains(RejUnableAssociateChannel.Hint(), "rdisk discover srp://") {
		t.Errorf("hint: %s", RejUnableAssociateChannel.Hint())
	}
}
