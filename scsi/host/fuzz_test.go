package host

import (
	"testing"

	"github.com/rdisk/rdisk/blockdev"
)

// FuzzParse feeds arbitrary parameter data to every parser and what they
// return to Describe and BuildIO: nothing may panic, and a description
// Describe accepts must be one BuildIO can address.
func FuzzParse(f *testing.F) {
	for _, s := range []string{rc16Thin, rc16Full, b0Thin, b0Short, b0LIO, b2Thin, b2LIOws, b2Bad, mode6RW, mode6WP, inqStd,
		"00000018 00000000 0000000000000000 0003000000000000 4123000000000000 c000000000000000"} {
		f.Add(unhex(f, s), 1<<20)
	}
	f.Fuzz(func(t *testing.T, b []byte, xfer int) {
		ParseInquiry(b)
		ParseModeSense6(b)
		luns, n, err := ParseReportLUNs(b)
		if err == nil && (n < 0 || len(luns) > (len(b)-8)/8) {
			t.Fatalf("%d LUNs, list length %d from %d bytes", len(luns), n, len(b))
		}
		var p Pages
		if c, err := ParseReadCapacity16(b); err == nil {
			p.Capacity = c
		}
		if l, err := ParseBlockLimits(b); err == nil {
			p.Limits = &l
		}
		if v, err := ParseProvisioning(b); err == nil {
			p.Provisioning = &v
		}
		if m, err := ParseModeSense6(b); err == nil {
			p.Mode = &m
		}
		lu, err := Describe(0, p, xfer)
		if err != nil {
			return
		}
		if lu.BlockSize != 1<<lu.Shift || lu.MaxTransfer < lu.BlockSize || lu.MaxTransfer%lu.BlockSize != 0 ||
			lu.MaxZeroes < int64(lu.BlockSize) || lu.MaxZeroes>>lu.Shift > 0xffffffff || lu.MaxTransfer > xfer {
			t.Fatalf("LU %+v from %d-byte transfers", lu, xfer)
		}
		info := lu.Info("", 1, 1)
		param := make([]byte, UnmapParamLen)
		for _, op := range []blockdev.Op{blockdev.OpRead, blockdev.OpWrite, blockdev.OpFlush, blockdev.OpDiscard, blockdev.OpWriteZeroes} {
			r := &blockdev.Request{Op: op, Flags: blockdev.FUA, Offset: info.Size - int64(info.BlockSize), Length: info.BlockSize}
			var cdb [16]byte
			if _, err := lu.BuildIO(&cdb, param, r); err != nil {
				t.Fatalf("%v: %v", op, err)
			}
		}
	})
}
