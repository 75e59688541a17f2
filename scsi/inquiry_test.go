package scsi

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func concat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestStandardInquiryGolden(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	want := concat(
		[]byte{0x00, 0x00, 0x06, 0x12, 91, 0x18, 0x00, 0x02}, // TPGS 01b, 3PC
		[]byte("RDISK   "), []byte("RDISK DISK      "), []byte("0001"),
		make([]byte, 22),
		[]byte{0x00, 0xa0, 0x04, 0x60, 0x04, 0xc0, 0x09, 0x60},
		make([]byte, 30),
	)
	c := in(f.s1, inquiry(false, 0, 260), 260)
	good(t, c)
	if diff := cmp.Diff(want, data(c)); diff != "" {
		t.Errorf("standard INQUIRY (-want +got):\n%s", diff)
	}
	if c.ResidualKind != ResidualUnderflow || c.Residual != 260-96 {
		t.Errorf("residual %v %d, want underflow %d", c.ResidualKind, c.Residual, 260-96)
	}
	// Every allocation length works and truncates without overflow.
	for alloc := 0; alloc < 256; alloc++ {
		c := in(f.s1, inquiry(false, 0, uint16(alloc)), alloc)
		good(t, c)
		if n := min(alloc, 96); c.DataInLen != n || !bytes.Equal(data(c), want[:n]) || c.ResidualKind == ResidualOverflow {
			t.Fatalf("alloc %d: %d bytes, residual %v", alloc, c.DataInLen, c.ResidualKind)
		}
	}
	// EVPD 0 with a page code is an error; so is CMDDT.
	expectField(t, in(f.s1, inquiry(false, 1, 255), 255), ASCInvalidFieldInCDB, 2)
	expectField(t, in(f.s1, []byte{OpInquiry, 0x02, 0, 0, 255, 0}, 255), ASCInvalidFieldInCDB, 1)
	expectField(t, in(f.s1, inquiry(true, 0x99, 255), 255), ASCInvalidFieldInCDB, 2)
}

func TestIdentityConfig(t *testing.T) {
	t.Parallel()
	disk := newMem(t, 64, 512)
	for _, cfg := range []LUConfig{
		{Vendor: "TOOLONGVENDOR"},
		{Product: "a product name that is too long"},
		{Revision: "12345"},
		{Serial: "bad\x01serial"},
		{NAA: []byte{1, 2, 3}},
		{PhysicalBlockExp: 16},
	} {
		if _, err := NewLU(disk, cfg); err == nil {
			t.Errorf("NewLU(%+v) succeeded", cfg)
		}
	}
	if _, err := NewLU(nil, LUConfig{}); err == nil {
		t.Error("NewLU(nil) succeeded")
	}
	lu, err := NewLU(disk, LUConfig{Name: "x"})
	if err != nil {
		t.Fatal(err)
	}
	lu2, _ := NewLU(disk, LUConfig{Name: "x"})
	if lu.Serial() == "" || lu.Serial() != lu2.Serial() || !bytes.Equal(lu.naa, lu2.naa) {
		t.Errorf("derived identity not stable: %q %q", lu.Serial(), lu2.Serial())
	}
	if lu.naa[0]>>4 != 3 {
		t.Errorf("derived NAA % x is not NAA 3h", lu.naa)
	}
}

func TestVPDGolden(t *testing.T) {
	t.Parallel()
	naa := []byte{0x60, 0x01, 0x40, 0x50, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x11, 0x22, 0x33, 0x44}
	f := newFixture(t, nil, LUConfig{Serial: "SER1", NAA: naa, EUI64: [8]byte{1, 2, 3, 4, 5, 6, 7, 8}, MaxTransferBlocks: 2048})
	bl := make([]byte, 64)
	bl[1], bl[3] = 0xb0, 0x3c
	bl[4], bl[5] = 0x01, 255
	bl[7] = 1
	binary.BigEndian.PutUint32(bl[8:], 2048)
	binary.BigEndian.PutUint32(bl[20:], 0xffffffff)
	binary.BigEndian.PutUint32(bl[24:], 4095)
	binary.BigEndian.PutUint32(bl[28:], 1)
	bdc := make([]byte, 64)
	bdc[1], bdc[3], bdc[5] = 0xb1, 0x3c, 0x01
	pad := func(s string) []byte { // NUL-terminated, padded to 4
		b := make([]byte, (len(s)+4)&^3)
		copy(b, s)
		return b
	}
	tport, tdev := pad("iqn.2026-11.io.rdisk:test,t,0x0001"), pad("iqn.2026-11.io.rdisk:test")
	devid := concat(
		[]byte{0x01, 0x03, 0x00, 0x10}, naa,
		[]byte{0x02, 0x01, 0x00, 0x0c}, []byte("RDISK   SER1"),
		[]byte{0x01, 0x02, 0x00, 0x08, 1, 2, 3, 4, 5, 6, 7, 8},
		[]byte{0x51, 0x94, 0x00, 0x04, 0, 0, 0, 1},
		[]byte{0x51, 0x95, 0x00, 0x04, 0, 0, 0, 1},
		[]byte{0x53, 0x98, 0x00, byte(len(tport))}, tport,
		[]byte{0x53, 0xa8, 0x00, byte(len(tdev))}, tdev,
	)
	devid = concat([]byte{0x00, 0x83, 0x00, byte(len(devid))}, devid)
	tests := []struct {
		page uint8
		want []byte
	}{
		{0x00, []byte{0x00, 0x00, 0x00, 0x06, 0x00, 0x80, 0x83, 0xb0, 0xb1, 0xb2}},
		{0x80, []byte{0x00, 0x80, 0x00, 0x04, 'S', 'E', 'R', '1'}},
		{0x83, devid},
		{0xb0, bl},
		{0xb1, bdc},
		{0xb2, []byte{0x00, 0xb2, 0x00, 0x04, 0x00, 0xe4, 0x02, 0x00}},
	}
	for _, tc := range tests {
		c := in(f.s1, inquiry(true, tc.page, 255), 255)
		good(t, c)
		if diff := cmp.Diff(tc.want, data(c)); diff != "" {
			t.Errorf("VPD %02xh (-want +got):\n%s", tc.page, diff)
		}
		if int(binary.BigEndian.Uint16(data(c)[2:4]))+4 != c.DataInLen {
			t.Errorf("VPD %02xh: page length does not match", tc.page)
		}
	}
}

func TestInquiryNoLU(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	c := run(f.s1, 7, inquiry(false, 0, 96), DirIn, 96, nil)
	good(t, c)
	if c.DataInLen != 36 || c.DataIn[0] != 0x7f {
		t.Errorf("INQUIRY to an unmapped LUN: % x", data(c))
	}
	c = run(f.s1, 7, tur(), DirNone, 0, nil)
	expect(t, c, KeyIllegalRequest, ASCLUNotSupported)
	c = run(f.s1, 7, []byte{OpRequestSense, 0, 0, 0, 18, 0}, DirIn, 18, nil)
	good(t, c)
	if s, _ := ParseSense(data(c)); s.ASC != ASCLUNotSupported {
		t.Errorf("REQUEST SENSE to an unmapped LUN: %v", s.ASC)
	}
	c = run(f.s1, 7, reportLUNs(64), DirIn, 64, nil)
	good(t, c)
	if c.DataInLen != 16 {
		t.Errorf("REPORT LUNS via an unmapped LUN: % x", data(c))
	}
}

func TestReadCapacityGolden(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{PhysicalBlockExp: 3})
	c := in(f.s1, rw10(OpReadCapacity10, 0, 0, 0), 8)
	good(t, c)
	if diff := cmp.Diff([]byte{0, 0, 0x0f, 0xff, 0, 0, 0x02, 0}, data(c)); diff != "" {
		t.Errorf("READ CAPACITY(10) (-want +got):\n%s", diff)
	}
	// LBA without PMI is invalid.
	expectField(t, in(f.s1, rw10(OpReadCapacity10, 5, 0, 0), 8), ASCInvalidFieldInCDB, 2)
	c = in(f.s1, rc16(32), 32)
	good(t, c)
	want := make([]byte, 32)
	copy(want, []byte{0, 0, 0, 0, 0, 0, 0x0f, 0xff, 0, 0, 0x02, 0, 0, 0x03, 0xc0, 0})
	if diff := cmp.Diff(want, data(c)); diff != "" {
		t.Errorf("READ CAPACITY(16) (-want +got):\n%s", diff)
	}
	for alloc := 0; alloc < 16; alloc++ {
		c := in(f.s1, rc16(uint32(alloc)), alloc)
		good(t, c)
		if c.DataInLen != alloc {
			t.Errorf("alloc %d: %d bytes", alloc, c.DataInLen)
		}
	}
}

func TestReportLUNs(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	lu2, err := NewLU(newMem(t, 64, 4096), LUConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.tgt.Map(300, lu2); err != nil {
		t.Fatal(err)
	}
	if err := f.tgt.Map(0, lu2); err == nil {
		t.Error("mapping LUN 0 twice succeeded")
	}
	// The new LUN is announced with a unit attention on LUN 0.
	expect(t, none(f.s1, tur()), KeyUnitAttention, ASCReportedLUNsDataChanged)
	good(t, none(f.s1, tur()))
	c := in(f.s2, reportLUNs(1024), 1024)
	good(t, c)
	want := []byte{0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x41, 0x2c, 0, 0, 0, 0, 0, 0}
	if diff := cmp.Diff(want, data(c)); diff != "" {
		t.Errorf("REPORT LUNS (-want +got):\n%s", diff)
	}
	// REPORT LUNS cleared the condition for s2.
	good(t, none(f.s2, tur()))
	// Truncated by the allocation length, without overflow.
	c = in(f.s2, reportLUNs(16), 16)
	good(t, c)
	if c.DataInLen != 16 || c.ResidualKind != ResidualNone {
		t.Errorf("truncated REPORT LUNS: %d bytes, residual %v", c.DataInLen, c.ResidualKind)
	}
	expectField(t, in(f.s2, []byte{OpReportLUNs, 0, 0x07, 0, 0, 0, 0, 0, 1, 0, 0, 0}, 256), ASCInvalidFieldInCDB, 2)
	if _, err := f.tgt.Unmap(300); err != nil {
		t.Fatal(err)
	}
	expect(t, none(f.s2, tur()), KeyUnitAttention, ASCReportedLUNsDataChanged)
	if got := f.tgt.LUNs(); !cmp.Equal(got, []uint64{0}) {
		t.Errorf("LUNs after unmap: %v", got)
	}
	if _, err := f.tgt.Unmap(300); err == nil {
		t.Error("unmapping twice succeeded")
	}
}

func TestReportSupportedOpcodes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	c := in(f.s1, rsoc(false, 0, 0, 0, 65535), 65535)
	good(t, c)
	d := data(c)
	n := int(binary.BigEndian.Uint32(d[0:4]))
	if n+4 != len(d) || n%8 != 0 {
		t.Fatalf("command data length %d for %d bytes", n, len(d))
	}
	seen := map[[2]uint16]bool{}
	for p := d[4:]; len(p) > 0; p = p[8:] {
		op, sa, servactv := p[0], binary.BigEndian.Uint16(p[2:4]), p[5]&1 != 0
		if !servactv && sa != 0 {
			t.Errorf("opcode %02x: service action %x without SERVACTV", op, sa)
		}
		seen[[2]uint16{uint16(op), sa}] = true
		opts := uint8(1)
		if servactv {
			opts = 2
		}
		one := in(f.s1, rsoc(false, opts, op, sa, 65535), 65535)
		good(t, one)
		u := data(one)
		if u[1]&7 != 3 || int(binary.BigEndian.Uint16(u[2:4])) != int(binary.BigEndian.Uint16(p[6:8])) || u[4] != op {
			t.Errorf("opcode %02x/%x: one-command data % x", op, sa, u)
		}
		// The other reporting option is an invalid field.
		expectField(t, in(f.s1, rsoc(false, 3-opts, op, sa, 65535), 65535), ASCInvalidFieldInCDB, 2)
	}
	for _, want := range [][2]uint16{{OpRead10, 0}, {OpCompareAndWrite, 0}, {OpOrWrite16, 0}, {OpUnmap, 0}, {OpServiceActionIn16, SAGetLBAStatus}, {OpPersistentReserveOut, 6}} {
		if !seen[want] {
			t.Errorf("opcode %02x/%x not reported", want[0], want[1])
		}
	}
	// DPO and FUA are evaluated (DPOFUA is set in MODE SENSE).
	for _, op := range []uint8{OpRead10, OpWrite16, OpCompareAndWrite, OpOrWrite16} {
		u := data(in(f.s1, rsoc(false, 1, op, 0, 64), 64))
		if u[5]&0x18 != 0x18 {
			t.Errorf("opcode %02x: CDB usage byte 1 = %02x", op, u[5])
		}
	}
	// RCTD adds 12-byte timeout descriptors.
	c = in(f.s1, rsoc(true, 0, 0, 0, 65535), 65535)
	good(t, c)
	for p := data(c)[4:]; len(p) > 0; p = p[20:] {
		if p[5]&0x02 == 0 || binary.BigEndian.Uint16(p[8:10]) != 0x0a {
			t.Fatalf("descriptor % x lacks a timeout descriptor", p[:20])
		}
	}
	// An unsupported opcode is reported as such.
	c = in(f.s1, rsoc(false, 1, 0xc5, 0, 64), 64)
	good(t, c)
	if data(c)[1]&7 != 1 {
		t.Errorf("unsupported opcode: % x", data(c))
	}
	expectField(t, in(f.s1, rsoc(false, 5, 0, 0, 64), 64), ASCInvalidFieldInCDB, 2)
}

func TestReportTPGAndTMFs(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	f.session("iqn.2026-11.io.rdisk:init3,i,0x3", 2)
	c := in(f.s1, []byte{OpMaintenanceIn, SAReportTargetPortGroup, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}, 256)
	good(t, c)
	// One group (1), active/optimized, PREF clear, LIO's supported
	// states (T_SUP O_SUP U_SUP S_SUP AN_SUP AO_SUP), ports 1 and 2.
	want := []byte{0, 0, 0, 16, 0x00, 0xcf, 0, 1, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 2}
	if diff := cmp.Diff(want, data(c)); diff != "" {
		t.Errorf("REPORT TARGET PORT GROUPS (-want +got):\n%s", diff)
	}
	c = in(f.s1, []byte{OpMaintenanceIn, SAReportSupportedTMFs, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0}, 16)
	good(t, c)
	if diff := cmp.Diff([]byte{0xde, 0x01, 0, 0}, data(c)); diff != "" {
		t.Errorf("REPORT SUPPORTED TMFs (-want +got):\n%s", diff)
	}
	// An unknown MAINTENANCE IN service action points at byte 1.
	expectField(t, in(f.s1, []byte{OpMaintenanceIn, 0x1f, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}, 256), ASCInvalidFieldInCDB, 1)
}
