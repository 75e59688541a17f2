package host

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/scsi"
)

// unhex decodes hex with spaces, for golden bytes.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testLU is a 512-byte-block LU with FUA and discard.
func testLU() *LU {
	return &LU{BlockSize: 512, Shift: 9, Blocks: 1 << 20, Caps: blockdev.CapFlush | blockdev.CapFUA | blockdev.CapWriteZeroes | blockdev.CapDiscard}
}

func TestBuildIO(t *testing.T) {
	noFUA := testLU()
	noFUA.Caps &^= blockdev.CapFUA
	big := &LU{BlockSize: 4096, Shift: 12, Blocks: 1 << 40, Caps: blockdev.CapFUA}
	for _, c := range []struct {
		name  string
		lu    *LU
		r     blockdev.Request
		cdb   string
		io    IO
		param string
	}{
		{"read", testLU(), blockdev.Request{Op: blockdev.OpRead, Offset: 0x1000, Length: 4096},
			"88 00 0000000000000008 00000008 00 00", IO{NameRead16, scsi.DirIn, DataBuffer, 4096}, ""},
		{"read ignores FUA", testLU(), blockdev.Request{Op: blockdev.OpRead, Flags: blockdev.FUA, Offset: 512, Length: 512},
			"88 00 0000000000000001 00000001 00 00", IO{NameRead16, scsi.DirIn, DataBuffer, 512}, ""},
		{"write", testLU(), blockdev.Request{Op: blockdev.OpWrite, Offset: 1 << 20, Length: 128 << 10},
			"8a 00 0000000000000800 00000100 00 00", IO{NameWrite16, scsi.DirOut, DataBuffer, 128 << 10}, ""},
		{"write FUA", testLU(), blockdev.Request{Op: blockdev.OpWrite, Flags: blockdev.FUA, Offset: 0, Length: 512},
			"8a 08 0000000000000000 00000001 00 00", IO{NameWrite16, scsi.DirOut, DataBuffer, 512}, ""},
		{"write FUA without DPOFUA", noFUA, blockdev.Request{Op: blockdev.OpWrite, Flags: blockdev.FUA, Offset: 0, Length: 512},
			"8a 00 0000000000000000 00000001 00 00", IO{NameWrite16, scsi.DirOut, DataBuffer, 512}, ""},
		{"write 4K LBA above 2^32", big, blockdev.Request{Op: blockdev.OpWrite, Flags: blockdev.FUA, Offset: 0x123456789 << 12, Length: 8192},
			"8a 08 0000000123456789 00000002 00 00", IO{NameWrite16, scsi.DirOut, DataBuffer, 8192}, ""},
		{"flush", testLU(), blockdev.Request{Op: blockdev.OpFlush},
			"91 00 0000000000000000 00000000 00 00", IO{NameSyncCache16, scsi.DirNone, DataNone, 0}, ""},
		{"discard", testLU(), blockdev.Request{Op: blockdev.OpDiscard, Offset: 0x200000, Length: 1 << 20},
			"42 00 00 00 00 00 00 0018 00 000000000000", IO{NameUnmap, scsi.DirOut, DataParam, 24},
			"0016 0010 00000000 0000000000001000 00000800 00000000"},
		{"write zeroes", testLU(), blockdev.Request{Op: blockdev.OpWriteZeroes, Offset: 0x10000, Length: 0xffff * 512},
			"93 00 0000000000000080 0000ffff 00 00", IO{NameWriteSame16, scsi.DirOut, DataZeroBlock, 512}, ""},
		{"write zeroes 4K", big, blockdev.Request{Op: blockdev.OpWriteZeroes, Offset: 4096, Length: 4096},
			"93 00 0000000000000001 00000001 00 00", IO{NameWriteSame16, scsi.DirOut, DataZeroBlock, 4096}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cdb := [16]byte{0xee, 0xee, 0xee} // BuildIO clears what it does not set
			param := bytes.Repeat([]byte{0xee}, 32)
			io, err := c.lu.BuildIO(&cdb, param, &c.r)
			if err != nil {
				t.Fatal(err)
			}
			if want := unhex(t, c.cdb); !bytes.Equal(cdb[:], want) {
				t.Errorf("CDB\n got %x\nwant %x", cdb[:], want)
			}
			if io != c.io {
				t.Errorf("IO %+v, want %+v", io, c.io)
			}
			if c.param != "" {
				if want := unhex(t, c.param); !bytes.Equal(param[:UnmapParamLen], want) {
					t.Errorf("parameter list\n got %x\nwant %x", param[:UnmapParamLen], want)
				}
			} else if !bytes.Equal(param, bytes.Repeat([]byte{0xee}, 32)) {
				t.Errorf("parameter area written: %x", param)
			}
			if IOName(c.r.Op) != io.Name || CommandName(cdb[:]) != io.Name {
				t.Errorf("names %q, %q, want %q", IOName(c.r.Op), CommandName(cdb[:]), io.Name)
			}
		})
	}
	var cdb [16]byte
	if _, err := testLU().BuildIO(&cdb, make([]byte, 23), &blockdev.Request{Op: blockdev.OpDiscard, Length: 512}); !errors.Is(err, ErrShortData) {
		t.Errorf("discard with a 23-byte parameter area: %v", err)
	}
	if _, err := testLU().BuildIO(&cdb, nil, &blockdev.Request{Op: 99}); !errors.Is(err, blockdev.ErrInvalid) {
		t.Errorf("unknown op: %v", err)
	}
}

func TestBuildIOAllocs(t *testing.T) {
	lu := testLU()
	param := make([]byte, UnmapParamLen)
	reqs := []blockdev.Request{{Op: blockdev.OpRead, Length: 4096}, {Op: blockdev.OpWrite, Flags: blockdev.FUA, Length: 512},
		{Op: blockdev.OpFlush}, {Op: blockdev.OpDiscard, Length: 512}, {Op: blockdev.OpWriteZeroes, Length: 512}}
	n := testing.AllocsPerRun(100, func() {
		for i := range reqs {
			var cdb [16]byte
			if _, err := lu.BuildIO(&cdb, param, &reqs[i]); err != nil {
				t.Fatal(err)
			}
		}
	})
	if n != 0 {
		t.Errorf("%v allocations per run", n)
	}
	sense := make([]byte, 18)
	scsi.EncodeFixedSense(sense, scsi.KeyUnitAttention, scsi.ASCPowerOnReset, -1)
	if n := testing.AllocsPerRun(100, func() { Retry(scsi.StatusCheckCondition, sense, 0) }); n != 0 {
		t.Errorf("Retry: %v allocations", n)
	}
}

// Golden parameter data: what rdisk's target (scsi/inquiry.go), LIO
// (target_core_spc.c, target_core_sbc.c) and tgt (usr/spc.c, usr/sbc.c)
// return.
const (
	// rdisk, thin 1 GiB RAM disk: LBPME|LBPRZ.
	rc16Thin = "00000000001fffff 00000200 00 00 c000 0000000000000000 0000000000000000"
	// Fully provisioned, 4 KiB blocks, 8 logical blocks per physical block.
	rc16Full = "00000000000fffff 00001000 00 03 0000 0000000000000000 0000000000000000"
	// rdisk block limits, thin: WSNZ, MAXIMUM TRANSFER LENGTH 256,
	// MAXIMUM UNMAP LBA COUNT 0xffffffff, 4095 descriptors, granularity 1.
	b0Thin = "00 b0 003c 01 ff 0001 00000100 00000000 00000000 ffffffff 00000fff 00000001 00000000 0000000000000000" +
		"00000000 00000000 00000000 00000000 00000000"
	// LIO without thin provisioning: page length 0x10 (bytes past 20 absent).
	b0Short = "00 b0 0010 01 01 0008 00002000 00000400 00000000 ffffffff"
	// tgt thin: MAXIMUM UNMAP LBA COUNT and descriptors 0xffffffff, no
	// MAXIMUM WRITE SAME LENGTH; LIO: MAXIMUM WRITE SAME LENGTH 0xffff.
	b0LIO = "00 b0 003c 01 01 0008 00002000 00000400 00000000 00200000 00000001 00000001 00000000 000000000000ffff" +
		"00000000 00000000 00000000 00000000 00000000"
	b2Thin  = "00 b2 0004 00 e4 02 00" // rdisk and tgt: LBPU LBPWS LBPWS10 LBPRZ, thin
	b2LIOws = "00 b2 0004 00 60 00 00" // LIO emulate_tpws only: LBPWS LBPWS10, no LBPU
	b2Bad   = "00 b0 0004 00 e4 02 00" // wrong page code
	mode6RW = "23 00 10 00"            // DPOFUA
	mode6WP = "23 00 90 00"            // WP, DPOFUA
	inqStd  = "00 00 06 12 5b 00 10 02 52444953 4b202020 52444953 4b204449534b202020202020 30303031"
)

func TestParse(t *testing.T) {
	c, err := ParseReadCapacity16(unhex(t, rc16Thin))
	if want := (Capacity{Blocks: 0x200000, BlockSize: 512, LBPME: true, LBPRZ: true}); err != nil || c != want {
		t.Errorf("READ CAPACITY(16) thin: %+v, %v; want %+v", c, err, want)
	}
	c, err = ParseReadCapacity16(unhex(t, rc16Full))
	if want := (Capacity{Blocks: 0x100000, BlockSize: 4096, PhysicalBlockExp: 3}); err != nil || c != want {
		t.Errorf("READ CAPACITY(16) full: %+v, %v; want %+v", c, err, want)
	}
	c, err = ParseReadCapacity16(unhex(t, "000000000000ffff 00000200")) // 12 bytes only
	if want := (Capacity{Blocks: 0x10000, BlockSize: 512}); err != nil || c != want {
		t.Errorf("READ CAPACITY(16) 12 bytes: %+v, %v", c, err)
	}
	if _, err := ParseReadCapacity16(unhex(t, "ffffffffffffffff 00000200 0000")); !errors.Is(err, ErrGeometry) {
		t.Errorf("last LBA 2^64-1: %v", err)
	}
	if _, err := ParseReadCapacity16(make([]byte, 11)); !errors.Is(err, ErrShortData) {
		t.Errorf("11 bytes: %v", err)
	}

	l, err := ParseBlockLimits(unhex(t, b0Thin))
	if want := (BlockLimits{WSNZ: true, MaxCompareAndWriteBlocks: 0xff, OptimalGranularityBlocks: 1, MaxTransferBlocks: 256,
		MaxUnmapLBACount: 0xffffffff, MaxUnmapDescriptors: 4095, UnmapGranularity: 1}); err != nil || l != want {
		t.Errorf("block limits thin: %+v, %v\nwant %+v", l, err, want)
	}
	l, err = ParseBlockLimits(unhex(t, b0Short))
	if want := (BlockLimits{WSNZ: true, MaxCompareAndWriteBlocks: 1, OptimalGranularityBlocks: 8, MaxTransferBlocks: 0x2000,
		OptimalTransferBlocks: 0x400}); err != nil || l != want {
		t.Errorf("block limits, short page: %+v, %v\nwant %+v", l, err, want)
	}
	l, err = ParseBlockLimits(unhex(t, b0LIO))
	if err != nil || l.MaxWriteSameBlocks != 0xffff || l.MaxUnmapLBACount != 0x200000 || l.MaxUnmapDescriptors != 1 {
		t.Errorf("block limits LIO: %+v, %v", l, err)
	}
	if _, err := ParseBlockLimits(unhex(t, b2Thin)); !errors.Is(err, ErrPageCode) {
		t.Errorf("B2h as block limits: %v", err)
	}

	v, err := ParseProvisioning(unhex(t, b2Thin))
	if want := (Provisioning{LBPU: true, LBPWS: true, LBPWS10: true, LBPRZ: true, Type: 2}); err != nil || v != want {
		t.Errorf("provisioning: %+v, %v; want %+v", v, err, want)
	}
	v, err = ParseProvisioning(unhex(t, b2LIOws))
	if want := (Provisioning{LBPWS: true, LBPWS10: true}); err != nil || v != want {
		t.Errorf("provisioning LIO tpws: %+v, %v; want %+v", v, err, want)
	}
	if _, err := ParseProvisioning(unhex(t, b2Bad)); !errors.Is(err, ErrPageCode) {
		t.Errorf("wrong page code: %v", err)
	}
	if _, err := ParseProvisioning(unhex(t, "00b2")); !errors.Is(err, ErrShortData) {
		t.Errorf("2 bytes: %v", err)
	}

	for s, want := range map[string]ModeHeader{mode6RW: {DPOFUA: true}, mode6WP: {WriteProtected: true, DPOFUA: true}, "030000": {}} {
		if m, err := ParseModeSense6(unhex(t, s)); err != nil || m != want {
			t.Errorf("mode header %s: %+v, %v; want %+v", s, m, err, want)
		}
	}

	inq, err := ParseInquiry(unhex(t, inqStd))
	if want := (InquiryData{Version: 6, Vendor: "RDISK", Product: "RDISK DISK", Revision: "0001"}); err != nil || inq != want {
		t.Errorf("inquiry: %+v, %v; want %+v", inq, err, want)
	}
	inq, err = ParseInquiry(unhex(t, "7f 00 06 02 1f")) // no LU: PQ 3, type 1Fh
	if err != nil || inq.PeripheralQualifier != 3 || inq.DeviceType != 0x1f || inq.Vendor != "" {
		t.Errorf("inquiry without LU: %+v, %v", inq, err)
	}

	luns, n, err := ParseReportLUNs(unhex(t, "00000018 00000000 0000000000000000 0003000000000000 4123000000000000 c000000000000000"))
	if err != nil || n != 24 || len(luns) != 3 || luns[0] != 0 || luns[1] != 3 || luns[2] != 0x123 {
		t.Errorf("report luns: %v, %d, %v", luns, n, err)
	}
	luns, n, err = ParseReportLUNs(unhex(t, "00000800 00000000 0001000000000000")) // longer than the allocation
	if err != nil || n != 0x800 || len(luns) != 1 || luns[0] != 1 {
		t.Errorf("truncated report luns: %v, %d, %v", luns, n, err)
	}
}

func TestDescribe(t *testing.T) {
	parse := func(f func([]byte) (any, error), s string) any {
		v, err := f(unhex(t, s))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	rc := func(s string) Capacity {
		return parse(func(b []byte) (any, error) { return ParseReadCapacity16(b) }, s).(Capacity)
	}
	b0 := func(s string) *BlockLimits {
		l := parse(func(b []byte) (any, error) { return ParseBlockLimits(b) }, s).(BlockLimits)
		return &l
	}
	b2 := func(s string) *Provisioning {
		v := parse(func(b []byte) (any, error) { return ParseProvisioning(b) }, s).(Provisioning)
		return &v
	}
	mode := func(s string) *ModeHeader {
		m := parse(func(b []byte) (any, error) { return ParseModeSense6(b) }, s).(ModeHeader)
		return &m
	}
	const base = blockdev.CapFlush | blockdev.CapWriteZeroes
	for _, c := range []struct {
		name      string
		p         Pages
		xfer      int
		caps      blockdev.Caps
		maxXfer   int
		maxZeroes int64
		err       error
	}{
		{"rdisk thin", Pages{Capacity: rc(rc16Thin), Limits: b0(b0Thin), Provisioning: b2(b2Thin), Mode: mode(mode6RW)}, 512 << 10,
			base | blockdev.CapFUA | blockdev.CapDiscard, 128 << 10, 0xffff * 512, nil},
		{"rdisk thin, read-only", Pages{Capacity: rc(rc16Thin), Limits: b0(b0Thin), Provisioning: b2(b2Thin), Mode: mode(mode6WP)}, 64 << 10,
			base | blockdev.CapFUA | blockdev.CapDiscard | blockdev.CapReadOnly, 64 << 10, 0xffff * 512, nil},
		{"LBPME without the B2h page", Pages{Capacity: rc(rc16Thin), Limits: b0(b0Thin), Mode: mode(mode6RW)}, 1 << 20,
			base | blockdev.CapFUA, 128 << 10, 0xffff * 512, nil},
		{"LBPU without LBPME", Pages{Capacity: rc(rc16Full), Limits: b0(b0LIO), Provisioning: b2(b2Thin), Mode: mode(mode6RW)}, 1 << 20,
			base | blockdev.CapFUA, 1 << 20, 0xffff * 4096, nil},
		{"LIO WRITE SAME with UNMAP only", Pages{Capacity: rc(rc16Thin), Limits: b0(b0LIO), Provisioning: b2(b2LIOws), Mode: mode(mode6RW)}, 1 << 20,
			base | blockdev.CapFUA, 1 << 20, 0xffff * 512, nil},
		{"no unmap count", Pages{Capacity: rc(rc16Thin), Limits: b0(b0Short), Provisioning: b2(b2Thin)}, 1 << 20,
			base, 1 << 20, 0xffff * 512, nil},
		{"LIO thin", Pages{Capacity: rc(rc16Thin), Limits: b0(b0LIO), Provisioning: b2(b2Thin), Mode: mode(mode6RW)}, 1 << 20,
			base | blockdev.CapFUA | blockdev.CapDiscard, 1 << 20, 0xffff * 512, nil},
		{"unmap limit below write same", Pages{Capacity: rc(rc16Thin), Provisioning: b2(b2Thin),
			Limits: &BlockLimits{MaxUnmapLBACount: 2048, MaxUnmapDescriptors: 1, MaxWriteSameBlocks: 1 << 40}}, 4096,
			base | blockdev.CapDiscard, 4096, 2048 * 512, nil},
		{"large write same", Pages{Capacity: rc(rc16Full), Limits: &BlockLimits{MaxWriteSameBlocks: 1 << 40}}, 4096,
			base, 4096, MaxWriteSameBlocks * 4096, nil},
		{"small write same", Pages{Capacity: rc(rc16Full), Limits: &BlockLimits{MaxWriteSameBlocks: 16}}, 1 << 20,
			base, 1 << 20, 16 * 4096, nil},
		{"no pages", Pages{Capacity: Capacity{Blocks: 100, BlockSize: 512}}, 1000, base, 512, 0xffff * 512, nil},
		{"block size 520", Pages{Capacity: Capacity{Blocks: 100, BlockSize: 520}}, 1 << 20, 0, 0, 0, ErrGeometry},
		{"block size 256", Pages{Capacity: Capacity{Blocks: 100, BlockSize: 256}}, 1 << 20, 0, 0, 0, ErrGeometry},
		{"too large", Pages{Capacity: Capacity{Blocks: 1 << 60, BlockSize: 4096}}, 1 << 20, 0, 0, 0, ErrGeometry},
		{"transfer below a block", Pages{Capacity: rc(rc16Full)}, 2048, 0, 0, 0, ErrGeometry},
	} {
		t.Run(c.name, func(t *testing.T) {
			lu, err := Describe(7, c.p, c.xfer)
			if c.err != nil {
				if !errors.Is(err, c.err) {
					t.Fatalf("err %v, want %v", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if lu.Caps != c.caps || lu.MaxTransfer != c.maxXfer || lu.MaxZeroes != c.maxZeroes || lu.LUN != 7 {
				t.Errorf("caps %05b max transfer %d max zeroes %d; want %05b %d %d", lu.Caps, lu.MaxTransfer, lu.MaxZeroes,
					c.caps, c.maxXfer, c.maxZeroes)
			}
			info := lu.Info("x", 2, 16)
			if info.Size != int64(c.p.Capacity.Blocks)*int64(c.p.Capacity.BlockSize) || info.BlockSize != c.p.Capacity.BlockSize ||
				info.Caps != lu.Caps || info.Queues != 2 || info.QueueDepth != 16 || info.Name != "x" {
				t.Errorf("info %+v", info)
			}
		})
	}
}

func TestStatusError(t *testing.T) {
	sense := func(k scsi.SenseKey, asc scsi.ASC) []byte {
		b := make([]byte, scsi.SenseFixedLen)
		scsi.EncodeFixedSense(b, k, asc, -1)
		return b
	}
	desc := unhex(t, "72 05 21 00 00 00 00 00") // descriptor format, LBA out of range
	sentinels := []error{blockdev.ErrRange, blockdev.ErrReadOnly, blockdev.ErrUnsupported, blockdev.ErrInvalid, blockdev.ErrIO,
		blockdev.ErrClosed, blockdev.ErrTooLarge}
	for _, c := range []struct {
		st    scsi.Status
		sense []byte
		want  error
	}{
		{scsi.StatusCheckCondition, sense(scsi.KeyIllegalRequest, scsi.ASCLBAOutOfRange), blockdev.ErrRange},
		{scsi.StatusCheckCondition, desc, blockdev.ErrRange},
		{scsi.StatusCheckCondition, sense(scsi.KeyDataProtect, scsi.ASCWriteProtected), blockdev.ErrReadOnly},
		{scsi.StatusCheckCondition, sense(scsi.KeyDataProtect, scsi.ASCSoftwareWriteProtected), blockdev.ErrReadOnly},
		{scsi.StatusCheckCondition, sense(scsi.KeyIllegalRequest, scsi.ASCInvalidCommandOpcode), blockdev.ErrUnsupported},
		{scsi.StatusCheckCondition, sense(scsi.KeyIllegalRequest, scsi.ASCInvalidFieldInCDB), blockdev.ErrInvalid},
		{scsi.StatusCheckCondition, sense(scsi.KeyIllegalRequest, scsi.ASCInvalidFieldInParameterList), blockdev.ErrInvalid},
		{scsi.StatusCheckCondition, sense(scsi.KeyMediumError, scsi.ASCUnrecoveredReadError), blockdev.ErrIO},
		{scsi.StatusCheckCondition, sense(scsi.KeyHardwareError, scsi.ASCInternalTargetFailure), blockdev.ErrIO},
		{scsi.StatusCheckCondition, sense(scsi.KeyAbortedCommand, 0), blockdev.ErrIO},
		{scsi.StatusCheckCondition, sense(scsi.KeyMiscompare, scsi.ASCMiscompareDuringVerify), blockdev.ErrIO},
		{scsi.StatusCheckCondition, sense(scsi.KeyNotReady, scsi.ASCLUNotReady), blockdev.ErrIO},
		{scsi.StatusCheckCondition, sense(scsi.KeyUnitAttention, scsi.ASCPowerOnReset), blockdev.ErrIO},
		{scsi.StatusCheckCondition, nil, blockdev.ErrIO},
		{scsi.StatusCheckCondition, []byte{0x70, 0}, blockdev.ErrIO},
		{scsi.StatusBusy, nil, blockdev.ErrIO},
		{scsi.StatusReservationConflict, nil, blockdev.ErrIO},
		{scsi.StatusTaskAborted, nil, blockdev.ErrIO},
	} {
		e := NewStatusError("srp", NameWrite16, c.st, c.sense)
		var err error = e
		for _, s := range sentinels {
			if got := errors.Is(err, s); got != (s == c.want) {
				t.Errorf("%v: errors.Is(%v) = %v", e, s, got)
			}
		}
		if e.Class() != c.want {
			t.Errorf("%v: class %v, want %v", e, e.Class(), c.want)
		}
	}
	e := NewStatusError("iscsi", NameRead16, scsi.StatusCheckCondition, sense(scsi.KeyIllegalRequest, scsi.ASCLBAOutOfRange))
	if got, want := e.Error(), "iscsi: READ(16): CHECK CONDITION, ILLEGAL REQUEST 21h/00h"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got, want := NewStatusError("", NameTestUnitReady, scsi.StatusBusy, nil).Error(), "TEST UNIT READY: BUSY"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if e.Parsed.Key != scsi.KeyIllegalRequest || !e.HasSense || len(e.Sense) != scsi.SenseFixedLen {
		t.Errorf("parsed %+v", e)
	}
}

func TestRetry(t *testing.T) {
	ua := make([]byte, 18)
	scsi.EncodeFixedSense(ua, scsi.KeyUnitAttention, scsi.ASCPowerOnReset, -1)
	ill := make([]byte, 18)
	scsi.EncodeFixedSense(ill, scsi.KeyIllegalRequest, scsi.ASCInvalidFieldInCDB, -1)
	for _, c := range []struct {
		st      scsi.Status
		sense   []byte
		retries int
		want    bool
	}{
		{scsi.StatusCheckCondition, ua, 0, true},
		{scsi.StatusCheckCondition, ua, MaxRetries - 1, true},
		{scsi.StatusCheckCondition, ua, MaxRetries, false},
		{scsi.StatusCheckCondition, ill, 0, false},
		{scsi.StatusCheckCondition, nil, 0, false},
		{scsi.StatusBusy, nil, 0, true},
		{scsi.StatusTaskSetFull, nil, 2, true},
		{scsi.StatusTaskSetFull, nil, MaxRetries, false},
		{scsi.StatusReservationConflict, nil, 0, false},
		{scsi.StatusTaskAborted, nil, 0, false},
		{scsi.StatusGood, nil, 0, false},
	} {
		if got := Retry(c.st, c.sense, c.retries); got != c.want {
			t.Errorf("Retry(%v, %x, %d) = %v", c.st, c.sense, c.retries, got)
		}
	}
}

// fakeLU answers the probe's commands with golden data and records the
// CDBs it got.
type fakeLU struct {
	uas   int      // unit attentions still to report
	uaASC scsi.ASC // their code; 0 means POWER ON, RESET
	busy  int      // BUSY statuses still to report
	pages map[string][]byte
	fail  map[byte]scsi.SenseKey // opcode -> CHECK CONDITION
	cdbs  []string
	err   error // transport failure for INQUIRY VPD B0h
}

func (f *fakeLU) RunSCSI(ctx context.Context, c *Command) error {
	f.cdbs = append(f.cdbs, hex.EncodeToString(c.CDB))
	checkCondition := func(k scsi.SenseKey, asc scsi.ASC) error {
		c.Status = scsi.StatusCheckCondition
		c.Sense = make([]byte, scsi.SenseFixedLen)
		scsi.EncodeFixedSense(c.Sense, k, asc, -1)
		return nil
	}
	if f.uas > 0 {
		f.uas--
		if f.uaASC != 0 {
			return checkCondition(scsi.KeyUnitAttention, f.uaASC)
		}
		return checkCondition(scsi.KeyUnitAttention, scsi.ASCPowerOnReset)
	}
	if f.busy > 0 {
		f.busy--
		c.Status = scsi.StatusBusy
		return nil
	}
	if k, ok := f.fail[c.CDB[0]]; ok {
		return checkCondition(k, scsi.ASCInvalidFieldInCDB)
	}
	key := hex.EncodeToString(c.CDB[:3])
	if c.CDB[0] == scsi.OpInquiry && c.CDB[2] == 0xb0 && f.err != nil {
		return f.err
	}
	d, ok := f.pages[key]
	if !ok {
		if c.CDB[0] == scsi.OpTestUnitReady {
			return nil
		}
		return checkCondition(scsi.KeyIllegalRequest, scsi.ASCInvalidFieldInCDB)
	}
	n := copy(c.Data, d)
	c.Resid = uint32(len(c.Data) - n)
	return nil
}

func rdiskPages(t testing.TB, mode string) map[string][]byte {
	return map[string][]byte{
		"120000": unhex(t, inqStd), "9e1000": unhex(t, rc16Thin), "1201b0": unhex(t, b0Thin), "1201b2": unhex(t, b2Thin),
		"1a083f": unhex(t, mode),
	}
}

func TestProbe(t *testing.T) {
	ctx := context.Background()
	f := &fakeLU{uas: 2, busy: 1, pages: rdiskPages(t, mode6WP)}
	lu, err := Probe(ctx, f, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"000000000000", "000000000000", "000000000000", "000000000000", // 2 UAs, BUSY, GOOD
		"120000006000",
		"9e10000000000000000000000020" + "0000",
		"1201b0004000",
		"1201b2000800",
		"1a083f000400",
	}
	if strings.Join(f.cdbs, " ") != strings.Join(want, " ") {
		t.Errorf("CDBs\n got %v\nwant %v", f.cdbs, want)
	}
	if lu.Caps != blockdev.CapFlush|blockdev.CapFUA|blockdev.CapWriteZeroes|blockdev.CapDiscard|blockdev.CapReadOnly ||
		lu.BlockSize != 512 || lu.Blocks != 0x200000 || lu.MaxTransfer != 128<<10 || lu.MaxZeroes != 0xffff*512 ||
		lu.Pages.Inquiry.Vendor != "RDISK" {
		t.Errorf("LU %+v", lu)
	}

	// Fully provisioned: no B2h page asked; optional pages that fail.
	f = &fakeLU{pages: rdiskPages(t, mode6RW), fail: map[byte]scsi.SenseKey{scsi.OpModeSense6: scsi.KeyIllegalRequest}}
	f.pages["9e1000"] = unhex(t, rc16Full)
	delete(f.pages, "1201b0")
	lu, err = Probe(ctx, f, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range f.cdbs {
		if strings.HasPrefix(c, "1201b2") {
			t.Errorf("B2h asked without LBPME")
		}
	}
	if lu.Caps != blockdev.CapFlush|blockdev.CapWriteZeroes || lu.Pages.Limits != nil || lu.Pages.Mode != nil {
		t.Errorf("LU %+v", lu)
	}

	// Failures name the LUN and the step.
	f = &fakeLU{uas: MaxRetries + 1, pages: rdiskPages(t, mode6RW)}
	_, err = Probe(ctx, f, 3, 1<<20)
	var se *StatusError
	if !errors.As(err, &se) || se.Parsed.Key != scsi.KeyUnitAttention || !strings.HasPrefix(err.Error(), "LUN 3: TEST UNIT READY: ") {
		t.Errorf("endless unit attentions: %v", err)
	}
	f = &fakeLU{pages: rdiskPages(t, mode6RW), fail: map[byte]scsi.SenseKey{0x9e: scsi.KeyMediumError}}
	if _, err = Probe(ctx, f, 0, 1<<20); !errors.Is(err, blockdev.ErrIO) || !strings.Contains(err.Error(), "READ CAPACITY(16)") {
		t.Errorf("READ CAPACITY failing: %v", err)
	}
	f = &fakeLU{pages: rdiskPages(t, mode6RW), err: blockdev.ErrClosed}
	if _, err = Probe(ctx, f, 0, 1<<20); !errors.Is(err, blockdev.ErrClosed) || !strings.Contains(err.Error(), NameBlockLimits) {
		t.Errorf("transport failure on an optional page: %v", err)
	}
	f = &fakeLU{pages: rdiskPages(t, mode6RW)}
	f.pages["120000"] = unhex(t, "7f 00 06 02 1f")
	if _, err = Probe(ctx, f, 9, 1<<20); !errors.Is(err, ErrNotDisk) {
		t.Errorf("no LU: %v", err)
	}
}

func TestReportLUNs(t *testing.T) {
	// 300 LUNs: the first allocation (256 entries) is too short.
	list := make([]byte, 8+8*300)
	binary.BigEndian.PutUint32(list[0:4], 8*300)
	for i := range 300 {
		l := scsi.EncodeLUN(uint64(i))
		copy(list[8+8*i:], l[:])
	}
	f := &fakeLU{pages: map[string][]byte{"a00000": list}}
	luns, err := ReportLUNs(context.Background(), f)
	if err != nil || len(luns) != 300 || luns[299] != 299 || len(f.cdbs) != 2 {
		t.Fatalf("%d LUNs, %v, %d commands", len(luns), err, len(f.cdbs))
	}
	if f.cdbs[1] != "a00000000000000009680000" {
		t.Errorf("second REPORT LUNS %s", f.cdbs[1])
	}
}
