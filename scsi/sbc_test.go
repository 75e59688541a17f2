package scsi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"sync"
	"testing"

	"github.com/rdisk/rdisk/backstore"
)

func TestReadWriteRoundTrip(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	type pair struct {
		name  string
		write func(lba uint64, n uint32) []byte
		read  func(lba uint64, n uint32) []byte
	}
	pairs := []pair{
		{"6", func(l uint64, n uint32) []byte { return rw6(OpWrite6, uint32(l), uint8(n)) }, func(l uint64, n uint32) []byte { return rw6(OpRead6, uint32(l), uint8(n)) }},
		{"10", func(l uint64, n uint32) []byte { return rw10(OpWrite10, uint32(l), uint16(n), 0) }, func(l uint64, n uint32) []byte { return rw10(OpRead10, uint32(l), uint16(n), 0) }},
		{"12", func(l uint64, n uint32) []byte { return rw12(OpWrite12, uint32(l), n, flagFUA) }, func(l uint64, n uint32) []byte { return rw12(OpRead12, uint32(l), n, flagDPO) }},
		{"16", func(l uint64, n uint32) []byte { return rw16(OpWrite16, l, n, flagFUA|flagDPO) }, func(l uint64, n uint32) []byte { return rw16(OpRead16, l, n, flagFUA) }},
	}
	for i, p := range pairs {
		for _, n := range []uint32{1, 7, 255} {
			for _, lba := range []uint64{0, testBlocks - uint64(n)} {
				buf := pattern(int(n)*testBS, byte(i*31)+byte(n))
				good(t, out(f.s1, p.write(lba, n), buf))
				c := in(f.s1, p.read(lba, n), int(n)*testBS)
				good(t, c)
				if !bytes.Equal(data(c), buf) || c.ResidualKind != ResidualNone {
					t.Fatalf("%s: %d blocks at %d read back differently (residual %v)", p.name, n, lba, c.ResidualKind)
				}
			}
		}
	}
	// READ(6) with transfer length 0 reads 256 blocks.
	c := in(f.s1, rw6(OpRead6, 0, 0), 256*testBS)
	good(t, c)
	if c.DataInLen != 256*testBS {
		t.Errorf("READ(6) of 0 (256) blocks returned %d bytes", c.DataInLen)
	}
}

func TestReadWriteErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{MaxTransferBlocks: 1024})
	buf := make([]byte, 2*testBS)
	oob := []struct {
		name string
		cdb  []byte
	}{
		{"read10 beyond end", rw10(OpRead10, testBlocks-1, 2, 0)},
		{"read10 at end+1, 0 blocks", rw10(OpRead10, testBlocks+1, 0, 0)},
		{"read10 at 2^31", rw10(OpRead10, 0x80000000, 1, 0)},
		{"read10 at -1", rw10(OpRead10, 0xffffffff, 1, 0)},
		{"read16 at 2^63", rw16(OpRead16, 1<<63, 1, 0)},
		{"read16 at -1", rw16(OpRead16, ^uint64(0), 1, 0)},
		{"read6 at 1fffffh", rw6(OpRead6, 0x1fffff, 1)},
		{"verify10 at end+1", rw10(OpVerify10, testBlocks+1, 0, 0x02)},
		{"prefetch10 beyond end", rw10(OpPrefetch10, testBlocks-1, 2, 0)},
		{"sync cache16 beyond end", rw16(OpSyncCache16, testBlocks, 1, 0)},
	}
	for _, tc := range oob {
		expect(t, in(f.s1, tc.cdb, 2*testBS), KeyIllegalRequest, ASCLBAOutOfRange)
	}
	expect(t, out(f.s1, rw10(OpWrite10, testBlocks-1, 2, 0), buf), KeyIllegalRequest, ASCLBAOutOfRange)
	expect(t, out(f.s1, rw16(OpWrite16, ^uint64(0), 1, 0), buf[:testBS]), KeyIllegalRequest, ASCLBAOutOfRange)
	// Zero blocks at LBA 0 is not an error.
	good(t, in(f.s1, rw10(OpRead10, 0, 0, 0), 0))
	good(t, out(f.s1, rw16(OpWrite16, 0, 0, 0), nil))
	// Protection fields are refused: no protection information.
	for p := uint8(1); p < 8; p++ {
		expectField(t, in(f.s1, rw10(OpRead10, 0, 1, p<<5), testBS), ASCInvalidFieldInCDB, 1)
		expectField(t, out(f.s1, rw16(OpWrite16, 0, 1, p<<5), buf[:testBS]), ASCInvalidFieldInCDB, 1)
		expectField(t, out(f.s1, rw16(OpOrWrite16, 0, 1, p<<5), buf[:testBS]), ASCInvalidFieldInCDB, 1)
	}
	// The maximum transfer length is enforced.
	expectField(t, in(f.s1, rw10(OpRead10, 0, 1025, 0), 1025*testBS), ASCInvalidFieldInCDB, 7)
	// NACA is refused.
	expectField(t, in(f.s1, []byte{OpRead10, 0, 0, 0, 0, 0, 0, 0, 1, 0x04}, testBS), ASCInvalidFieldInCDB, 9)
	// Unknown opcodes.
	expect(t, none(f.s1, []byte{0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0}), KeyIllegalRequest, ASCInvalidCommandOpcode)
	expect(t, none(f.s1, []byte{OpVariableLength, 0, 0, 0, 0, 0, 0, 0, 0, 0}), KeyIllegalRequest, ASCInvalidCommandOpcode)
	expect(t, none(f.s1, nil), KeyIllegalRequest, ASCInvalidCommandOpcode)
	// A CDB shorter than its group.
	expectField(t, none(f.s1, []byte{OpRead10, 0, 0}), ASCInvalidFieldInCDB, 0)
}

// TestResiduals checks the iSCSI residual rules that libiscsi's
// iSCSIResiduals tests apply to READ(10) and WRITE(10).
func TestResiduals(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	good(t, out(f.s1, rw10(OpWrite10, 0, 2, 0), bytes.Repeat([]byte{'a'}, 2*testBS)))
	tests := []struct {
		name    string
		blocks  uint16
		edtl    int
		kind    ResidualKind
		resid   uint32
		datalen int
	}{
		{"1 block, EDTL 0", 1, 0, ResidualOverflow, testBS, 0},
		{"1 block, EDTL 10000", 1, 10000, ResidualUnderflow, 10000 - testBS, testBS},
		{"1 block, EDTL 200", 1, 200, ResidualOverflow, testBS - 200, 200},
		{"2 blocks, EDTL 1 block", 2, testBS, ResidualOverflow, testBS, testBS},
		{"1 block, exact", 1, testBS, ResidualNone, 0, testBS},
	}
	for _, tc := range tests {
		c := in(f.s1, rw10(OpRead10, 0, tc.blocks, 0), tc.edtl)
		good(t, c)
		if c.ResidualKind != tc.kind || c.Residual != tc.resid || c.DataInLen != tc.datalen {
			t.Errorf("read %s: residual %v %d, %d bytes; want %v %d, %d", tc.name, c.ResidualKind, c.Residual, c.DataInLen, tc.kind, tc.resid, tc.datalen)
		}
		if !bytes.Equal(data(c), bytes.Repeat([]byte{'a'}, tc.datalen)) {
			t.Errorf("read %s: wrong data", tc.name)
		}
		w := bytes.Repeat([]byte{'b'}, tc.edtl)
		c = out(f.s1, rw10(OpWrite10, 0, tc.blocks, 0), w)
		good(t, c)
		if c.ResidualKind != tc.kind || c.Residual != tc.resid {
			t.Errorf("write %s: residual %v %d, want %v %d", tc.name, c.ResidualKind, c.Residual, tc.kind, tc.resid)
		}
		// Only whole blocks within the expected length are written.
		written := min(tc.edtl, int(tc.blocks)*testBS) / testBS
		c = in(f.s1, rw10(OpRead10, 0, 2, 0), 2*testBS)
		want := append(bytes.Repeat([]byte{'b'}, written*testBS), bytes.Repeat([]byte{'a'}, (2-written)*testBS)...)
		if !bytes.Equal(data(c), want) {
			t.Errorf("write %s: %d blocks written, want %d", tc.name, bytes.Count(data(c), []byte{'b'})/testBS, written)
		}
		good(t, out(f.s1, rw10(OpWrite10, 0, 2, 0), bytes.Repeat([]byte{'a'}, 2*testBS)))
	}
	// A READ flagged as a write at the transport: no data-in, GOOD.
	c := run(f.s1, 0, rw10(OpRead10, 0, 1, 0), DirOut, testBS, make([]byte, testBS))
	good(t, c)
	if c.DataInLen != 0 {
		t.Errorf("READ with data-out direction returned %d bytes", c.DataInLen)
	}
	// Allocation-length commands: truncation is not an overflow, a short
	// response is an underflow.
	c = in(f.s1, modeSense6(false, 0, 0x3f, 0, 4), 4)
	good(t, c)
	if c.DataInLen != 4 || c.ResidualKind != ResidualNone {
		t.Errorf("MODE SENSE(6) alloc 4: %d bytes, %v", c.DataInLen, c.ResidualKind)
	}
	c = in(f.s1, modeSense6(false, 0, 0x3f, 0, 255), 255)
	if c.ResidualKind != ResidualUnderflow || int(c.Residual) != 255-c.DataInLen {
		t.Errorf("MODE SENSE(6) alloc 255: %d bytes, %v %d", c.DataInLen, c.ResidualKind, c.Residual)
	}
}

func TestDataOutLength(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	for _, tc := range []struct {
		cdb  []byte
		edtl uint32
		want uint32
	}{
		{rw10(OpWrite10, 0, 4, 0), 8192, 4 * testBS},
		{rw10(OpWrite10, 0, 4, 0), 100, 100},
		{caw(0, 2, 0), 1 << 20, 4 * testBS},
		{rw16(OpWriteSame16, 0, 100, 0), 4096, testBS},
		{rw16(OpWriteSame16, 0, 100, 0x01), 4096, 0},
		{rw10(OpVerify10, 0, 3, 0x02), 1 << 20, 3 * testBS},
		{rw10(OpVerify10, 0, 3, 0x00), 1 << 20, 0},
		{unmapCDB(24), 4096, 24},
		{rw10(OpRead10, 0, 4, 0), 2048, 2048},
		{[]byte{0xc0}, 77, 77},
	} {
		if got := f.s1.DataOutLength(0, tc.cdb, tc.edtl); got != tc.want {
			t.Errorf("DataOutLength(% x, %d) = %d, want %d", tc.cdb, tc.edtl, got, tc.want)
		}
	}
	if got := f.s1.DataOutLength(9, rw10(OpWrite10, 0, 4, 0), 5); got != 5 {
		t.Errorf("unmapped LUN: %d", got)
	}
}

func TestWriteProtect(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{ReadOnly: true})
	buf := make([]byte, testBS)
	for _, cdb := range [][]byte{
		rw10(OpWrite10, 0, 1, 0), rw16(OpWriteVerify16, 0, 1, 0), rw16(OpOrWrite16, 0, 1, 0), rw10(OpWriteSame10, 0, 1, 0),
	} {
		expect(t, out(f.s1, cdb, buf), KeyDataProtect, ASCWriteProtected)
	}
	expect(t, out(f.s1, caw(0, 1, 0), make([]byte, 2*testBS)), KeyDataProtect, ASCWriteProtected)
	expect(t, out(f.s1, unmapCDB(24), unmapParams([2]uint64{0, 1})), KeyDataProtect, ASCWriteProtected)
	good(t, in(f.s1, rw10(OpRead10, 0, 1, 0), testBS))
	c := in(f.s1, modeSense6(true, 0, 0x3f, 0, 255), 255)
	if data(c)[2] != 0x90 {
		t.Errorf("device-specific parameter %02x, want WP|DPOFUA", data(c)[2])
	}
	// A read-only disk is write protected too.
	m := newMem(t, 64, 512)
	m.SetReadOnly(true)
	g := newFixture(t, m, LUConfig{})
	expect(t, out(g.s1, rw10(OpWrite10, 0, 1, 0), buf), KeyDataProtect, ASCWriteProtected)
}

func TestVerify(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	buf := pattern(256*testBS, 9)
	good(t, out(f.s1, rw10(OpWrite10, 100, 256, 0), buf))
	verifies := []func(n uint32, bytchk uint8) []byte{
		func(n uint32, b uint8) []byte { return rw10(OpVerify10, 100, uint16(n), b<<1) },
		func(n uint32, b uint8) []byte { return rw12(OpVerify12, 100, n, b<<1) },
		func(n uint32, b uint8) []byte { return rw16(OpVerify16, 100, n, b<<1|flagDPO) },
	}
	for _, v := range verifies {
		good(t, none(f.s1, v(256, 0)))
		good(t, out(f.s1, v(256, 1), buf))
		bad := bytes.Clone(buf)
		bad[1000] ^= 'X'
		c := out(f.s1, v(256, 1), bad)
		expect(t, c, KeyMiscompare, ASCMiscompareDuringVerify)
		if s := sense(t, c); !s.InfoValid || s.Information != 1000 {
			t.Errorf("miscompare offset %d (valid %v), want 1000", s.Information, s.InfoValid)
		}
		expectField(t, out(f.s1, v(1, 2), buf[:testBS]), ASCInvalidFieldInCDB, 1)
		good(t, out(f.s1, v(0, 1), nil))
	}
	// BYTCHK 11b compares one block against each block.
	same := bytes.Repeat([]byte{0x5a}, testBS)
	good(t, out(f.s1, rw10(OpWriteSame10, 500, 8, 0), same))
	good(t, out(f.s1, rw10(OpVerify10, 500, 8, 0x06), same))
	same[3] = 0
	c := out(f.s1, rw10(OpVerify10, 500, 8, 0x06), same)
	expect(t, c, KeyMiscompare, ASCMiscompareDuringVerify)
	if s := sense(t, c); s.Information != 3 {
		t.Errorf("BYTCHK 11b miscompare at %d, want 3", s.Information)
	}
}

func TestWriteAndVerify(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	for _, cdb := range [][]byte{rw10(OpWriteVerify10, 7, 3, 0), rw12(OpWriteVerify12, 7, 3, 0x02), rw16(OpWriteVerify16, 7, 3, 0x12)} {
		buf := pattern(3*testBS, cdb[0])
		good(t, out(f.s1, cdb, buf))
		c := in(f.s1, rw10(OpRead10, 7, 3, 0), 3*testBS)
		if !bytes.Equal(data(c), buf) {
			t.Errorf("% x: data not written", cdb)
		}
	}
	expectField(t, out(f.s1, rw10(OpWriteVerify10, 0, 1, 0x04), make([]byte, testBS)), ASCInvalidFieldInCDB, 1)
}

func TestOrWrite(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	for _, n := range []uint32{1, 255, 600} {
		for _, lba := range []uint64{0, testBlocks - uint64(n)} {
			good(t, out(f.s1, rw10(OpWrite10, uint32(lba), uint16(n), 0), make([]byte, int(n)*testBS)))
			good(t, out(f.s1, rw16(OpOrWrite16, lba, n, flagFUA), bytes.Repeat([]byte{0xa5}, int(n)*testBS)))
			good(t, out(f.s1, rw16(OpOrWrite16, lba, n, flagDPO), bytes.Repeat([]byte{0x5a}, int(n)*testBS)))
			c := in(f.s1, rw16(OpRead16, lba, n, 0), int(n)*testBS)
			if !bytes.Equal(data(c), bytes.Repeat([]byte{0xff}, int(n)*testBS)) {
				t.Fatalf("ORWRITE of %d blocks at %d: not all 0xff", n, lba)
			}
		}
	}
	expect(t, out(f.s1, rw16(OpOrWrite16, testBlocks, 1, 0), make([]byte, testBS)), KeyIllegalRequest, ASCLBAOutOfRange)
}

func TestCompareAndWrite(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	for _, n := range []int{1, 2, 255} {
		for _, lba := range []uint64{0, testBlocks - uint64(n)} {
			a := bytes.Repeat([]byte{'A'}, n*testBS)
			good(t, out(f.s1, rw16(OpWrite16, lba, uint32(n), 0), a))
			buf := append(bytes.Clone(a), bytes.Repeat([]byte{'B'}, n*testBS)...)
			buf[n*testBS-27] = 'C'
			c := out(f.s1, caw(lba, uint8(n), 0), buf)
			expect(t, c, KeyMiscompare, ASCMiscompareDuringVerify)
			if s := sense(t, c); s.Information != uint64(n*testBS-27) {
				t.Errorf("miscompare offset %d, want %d", s.Information, n*testBS-27)
			}
			if !bytes.Equal(data(in(f.s1, rw16(OpRead16, lba, uint32(n), 0), n*testBS)), a) {
				t.Fatal("data changed after a miscompare")
			}
			buf[n*testBS-27] = 'A'
			good(t, out(f.s1, caw(lba, uint8(n), flagFUA|flagDPO), buf))
			if !bytes.Equal(data(in(f.s1, rw16(OpRead16, lba, uint32(n), 0), n*testBS)), buf[n*testBS:]) {
				t.Fatal("COMPARE AND WRITE did not write")
			}
		}
	}
	// 256 blocks is beyond MAXIMUM COMPARE AND WRITE LENGTH; the field
	// cannot express it, so check a smaller limit.
	g := newFixture(t, nil, LUConfig{MaxCompareAndWriteBlocks: 4})
	expectField(t, out(g.s1, caw(0, 5, 0), make([]byte, 10*testBS)), ASCInvalidFieldInCDB, 13)
	// NUMBER OF LOGICAL BLOCKS 0 is not an error, but data-out with it (a
	// block count of 256 wrapped to 0) is refused, as LIO does and
	// libiscsi's CompareAndWrite tests expect.
	good(t, out(f.s1, caw(0, 0, flagDPO), nil))
	expectField(t, out(f.s1, caw(0, 0, flagDPO), make([]byte, 2*256*testBS)), ASCInvalidFieldInCDB, 13)
	// The data-out length must be twice the blocks.
	expect(t, out(f.s1, caw(0, 1, 0), make([]byte, 4*testBS)), KeyIllegalRequest, ASCInvalidFieldInCommandIU)
	expect(t, out(f.s1, caw(0, 3, 0), make([]byte, 4*testBS)), KeyIllegalRequest, ASCInvalidFieldInCommandIU)
	expect(t, out(f.s1, caw(testBlocks, 1, 0), make([]byte, 2*testBS)), KeyIllegalRequest, ASCLBAOutOfRange)
}

// TestCompareAndWriteAtomic increments a counter in one block from many
// goroutines with COMPARE AND WRITE loops, while plain writes hammer the
// neighbouring block: no increment may be lost.
func TestCompareAndWriteAtomic(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	const workers, incs = 4, 50
	good(t, out(f.s1, rw10(OpWrite10, 10, 1, 0), make([]byte, testBS)))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	go func() {
		buf := make([]byte, 2*testBS)
		for {
			select {
			case <-stop:
				return
			default:
			}
			out(f.s2, rw10(OpWrite10, 11, 1, 0), buf[:testBS])
		}
	}()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := f.s1
			if w%2 == 1 {
				s = f.s2
			}
			for i := 0; i < incs; {
				cur := data(in(s, rw10(OpRead10, 10, 1, 0), testBS))
				buf := make([]byte, 2*testBS)
				copy(buf, cur)
				binary.BigEndian.PutUint64(buf[testBS:], binary.BigEndian.Uint64(cur)+1)
				c := out(s, caw(10, 1, 0), buf)
				switch c.Status {
				case StatusGood:
					i++
				case StatusCheckCondition:
				default:
					t.Errorf("status %v", c.Status)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	if got := binary.BigEndian.Uint64(data(in(f.s1, rw10(OpRead10, 10, 1, 0), testBS))); got != workers*incs {
		t.Errorf("counter = %d, want %d", got, workers*incs)
	}
}

func TestWriteSame(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	for i := 1; i <= 300; i += 37 {
		for _, lba := range []uint64{0, testBlocks - uint64(i)} {
			blk := bytes.Repeat([]byte{byte(i)}, testBS)
			good(t, out(f.s1, rw10(OpWriteSame10, uint32(lba), uint16(i), 0), blk))
			c := in(f.s1, rw10(OpRead10, uint32(lba), uint16(i), 0), i*testBS)
			if !bytes.Equal(data(c), bytes.Repeat(blk, i)) {
				t.Fatalf("WRITE SAME(10) of %d blocks at %d", i, lba)
			}
			// UNMAP with a zero block deallocates; it reads back as zero.
			good(t, out(f.s1, rw16(OpWriteSame16, lba, uint32(i), 0x08), make([]byte, testBS)))
			c = in(f.s1, rw16(OpRead16, lba, uint32(i), 0), i*testBS)
			if !allZero(data(c)) {
				t.Fatalf("WRITE SAME(16) UNMAP of %d blocks at %d did not zero", i, lba)
			}
		}
	}
	// A large write same of a pattern spans several scratch buffers.
	blk := pattern(testBS, 3)
	good(t, out(f.s1, rw16(OpWriteSame16, 0, 2000, 0), blk))
	c := in(f.s1, rw16(OpRead16, 0, 2000, 0), 2000*testBS)
	if !bytes.Equal(data(c), bytes.Repeat(blk, 2000)) {
		t.Fatal("WRITE SAME(16) of 2000 blocks")
	}
	// UNMAP with a non-zero block writes the block.
	good(t, out(f.s1, rw16(OpWriteSame16, 0, 4, 0x08), blk))
	if c := in(f.s1, rw16(OpRead16, 0, 4, 0), 4*testBS); !bytes.Equal(data(c), bytes.Repeat(blk, 4)) {
		t.Fatal("WRITE SAME UNMAP with data")
	}
	// NDOB writes zeroes without data-out.
	good(t, none(f.s1, rw16(OpWriteSame16, 0, 4, 0x01)))
	if c := in(f.s1, rw16(OpRead16, 0, 4, 0), 4*testBS); !allZero(data(c)) {
		t.Fatal("WRITE SAME NDOB")
	}
	one := make([]byte, testBS)
	expectField(t, out(f.s1, rw10(OpWriteSame10, 0, 0, 0), one), ASCInvalidFieldInCDB, 7) // WSNZ
	expect(t, out(f.s1, rw10(OpWriteSame10, testBlocks+1, 0, 0), one), KeyIllegalRequest, ASCLBAOutOfRange)
	expect(t, out(f.s1, rw10(OpWriteSame10, testBlocks-1, 2, 0), one), KeyIllegalRequest, ASCLBAOutOfRange)
	expect(t, out(f.s1, rw10(OpWriteSame10, 0x80000000, 1, 0), one), KeyIllegalRequest, ASCLBAOutOfRange)
	expectField(t, out(f.s1, rw10(OpWriteSame10, 0, 1, 0x10), one), ASCInvalidFieldInCDB, 1) // ANCHOR
	expectField(t, out(f.s1, rw10(OpWriteSame10, 0, 1, 0x18), one), ASCInvalidFieldInCDB, 1) // ANCHOR+UNMAP
	expectField(t, out(f.s1, rw10(OpWriteSame10, 0, 1, 0x04), one), ASCInvalidFieldInCDB, 1) // PBDATA
	expectField(t, out(f.s1, rw10(OpWriteSame10, 0, 1, 3<<5), one), ASCInvalidFieldInCDB, 1) // WRPROTECT
	expect(t, out(f.s1, rw10(OpWriteSame10, 0, 1, 0x08), one[:testBS/2]), KeyIllegalRequest, ASCInvalidFieldInCommandIU)
	expect(t, out(f.s1, rw10(OpWriteSame10, 0, 1, 0x08), make([]byte, 2*testBS)), KeyIllegalRequest, ASCInvalidFieldInCommandIU)
	g := newFixture(t, nil, LUConfig{MaxWriteSameBlocks: 8})
	expectField(t, out(g.s1, rw10(OpWriteSame10, 0, 9, 0), one), ASCInvalidFieldInCDB, 7)
}

func TestUnmap(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	a := bytes.Repeat([]byte{'a'}, 256*testBS)
	good(t, out(f.s1, rw10(OpWrite10, 0, 256, 0), a))
	// One descriptor per block, then one for a range.
	var descs [][2]uint64
	for i := uint64(0); i < 100; i++ {
		descs = append(descs, [2]uint64{i, 1})
	}
	p := unmapParams(descs...)
	good(t, out(f.s1, unmapCDB(uint16(len(p))), p))
	p = unmapParams([2]uint64{150, 50})
	good(t, out(f.s1, unmapCDB(uint16(len(p))), p))
	c := in(f.s1, rw10(OpRead10, 0, 256, 0), 256*testBS)
	d := data(c)
	if !allZero(d[:100*testBS]) || !allZero(d[150*testBS:200*testBS]) || !bytes.Equal(d[100*testBS:150*testBS], a[:50*testBS]) || !bytes.Equal(d[200*testBS:], a[:56*testBS]) {
		t.Error("UNMAP deallocated the wrong blocks")
	}
	// Zero-length descriptors and lists are fine, also at the end.
	for _, p := range [][]byte{unmapParams(), unmapParams([2]uint64{testBlocks, 0}), unmapParams([2]uint64{5, 0}, [2]uint64{5, 0})} {
		good(t, out(f.s1, unmapCDB(uint16(len(p))), p))
	}
	good(t, none(f.s1, unmapCDB(0)))
	// Errors: nothing is unmapped when any descriptor is out of range.
	good(t, out(f.s1, rw10(OpWrite10, 0, 1, 0), a[:testBS]))
	p = unmapParams([2]uint64{0, 1}, [2]uint64{testBlocks - 1, 2})
	expect(t, out(f.s1, unmapCDB(uint16(len(p))), p), KeyIllegalRequest, ASCLBAOutOfRange)
	if allZero(data(in(f.s1, rw10(OpRead10, 0, 1, 0), testBS))) {
		t.Error("a failed UNMAP deallocated a block")
	}
	expect(t, out(f.s1, unmapCDB(4), []byte{0, 2, 0, 0}), KeyIllegalRequest, ASCParameterListLengthError)
	expectField(t, out(f.s1, []byte{OpUnmap, 1, 0, 0, 0, 0, 0, 0, 8, 0}, unmapParams()), ASCInvalidFieldInCDB, 1)
	// UNMAP is absent from an LU whose disk cannot deallocate.
	n := newFixture(t, backstore.NewNull(1<<20, 512), LUConfig{})
	expect(t, out(n.s1, unmapCDB(24), unmapParams([2]uint64{0, 1})), KeyIllegalRequest, ASCInvalidCommandOpcode)
	expectField(t, out(n.s1, rw10(OpWriteSame10, 0, 1, 0x08), make([]byte, 512)), ASCInvalidFieldInCDB, 1)
	c = in(n.s1, rc16(32), 32)
	if data(c)[14] != 0 {
		t.Errorf("null disk reports LBPME/LBPRZ: %02x", data(c)[14])
	}
	c = in(n.s1, inquiry(true, 0xb2, 64), 64)
	if data(c)[5] != 0 {
		t.Errorf("null disk reports LBPU: %02x", data(c)[5])
	}
	c = in(n.s1, inquiry(true, 0xb0, 64), 64)
	if binary.BigEndian.Uint32(data(c)[20:24]) != 0 || binary.BigEndian.Uint32(data(c)[24:28]) != 0 {
		t.Errorf("null disk reports unmap limits")
	}
}

func TestGetLBAStatus(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	for _, lba := range []uint64{1, 256, testBlocks - 1} {
		c := in(f.s1, getLBAStatus(lba, 24), 24)
		good(t, c)
		d := data(c)
		if binary.BigEndian.Uint32(d[0:4]) != 20 || binary.BigEndian.Uint64(d[8:16]) != lba ||
			binary.BigEndian.Uint32(d[16:20]) != uint32(testBlocks-lba) || d[20] != 0 {
			t.Errorf("GET LBA STATUS at %d: % x", lba, d)
		}
	}
	for _, lba := range []uint64{testBlocks, testBlocks + 1, 1 << 63, ^uint64(0)} {
		expect(t, in(f.s1, getLBAStatus(lba, 24), 24), KeyIllegalRequest, ASCLBAOutOfRange)
	}
}

func TestSyncCachePrefetch(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	good(t, none(f.s1, rw10(OpSyncCache10, 0, 0, 0x02)))
	good(t, none(f.s1, rw16(OpSyncCache16, 10, 10, 0)))
	good(t, none(f.s1, rw10(OpPrefetch10, 0, 1, 0x02)))
	good(t, none(f.s1, rw16(OpPrefetch16, testBlocks-1, 1, 0)))
	good(t, none(f.s1, rw10(OpPrefetch10, 0, 0, 0)))
	expect(t, none(f.s1, rw16(OpPrefetch16, testBlocks+1, 0, 0)), KeyIllegalRequest, ASCLBAOutOfRange)
}

// errDisk fails every I/O.
type errDisk struct {
	backstore.Disk
	err error
}

func (d errDisk) ReadAt(p []byte, off int64) error                          { return d.err }
func (d errDisk) WriteAt(p []byte, off int64, f backstore.WriteFlags) error { return d.err }
func (d errDisk) Flush() error                                              { return d.err }

func TestBackstoreErrorMapping(t *testing.T) {
	t.Parallel()
	mem := newMem(t, 64, 512)
	for _, tc := range []struct {
		err       error
		key       SenseKey
		readASC   ASC
		writeASC  ASC
		infoValid bool
	}{
		{errors.New("EIO"), KeyMediumError, ASCUnrecoveredReadError, ASCWriteError, true},
		{backstore.ErrReadOnly, KeyDataProtect, ASCWriteProtected, ASCWriteProtected, false},
		{backstore.ErrClosed, KeyNotReady, ASCLUNotReady, ASCLUNotReady, false},
		{backstore.ErrUnsupported, KeyIllegalRequest, ASCInvalidCommandOpcode, ASCInvalidCommandOpcode, false},
		{&backstore.RangeError{Reason: backstore.RangeOutOfBounds}, KeyIllegalRequest, ASCLBAOutOfRange, ASCLBAOutOfRange, false},
		{backstore.ErrBufferAlignment, KeyHardwareError, ASCInternalTargetFailure, ASCInternalTargetFailure, false},
	} {
		f := newFixture(t, errDisk{mem, tc.err}, LUConfig{})
		c := in(f.s1, rw10(OpRead10, 5, 1, 0), 512)
		expect(t, c, tc.key, tc.readASC)
		if s := sense(t, c); s.InfoValid != tc.infoValid || tc.infoValid && s.Information != 5 {
			t.Errorf("%v: information %d valid %v", tc.err, s.Information, s.InfoValid)
		}
		expect(t, out(f.s1, rw10(OpWrite10, 5, 1, 0), make([]byte, 512)), tc.key, tc.writeASC)
		expect(t, none(f.s1, rw10(OpSyncCache10, 0, 0, 0)), tc.key, tc.writeASC)
	}
}

// storeCAW is a RAM disk whose store compares and writes itself (as an RBD
// image does on the OSD), up to max bytes, counting the calls.
type storeCAW struct {
	*backstore.Mem
	max   int
	mu    sync.Mutex
	calls int
}

func (d *storeCAW) CompareAndWriteMax() int { return d.max }

func (d *storeCAW) CompareAndWrite(cmp, data []byte, off int64) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	cur := make([]byte, len(cmp))
	if err := d.ReadAt(cur, off); err != nil {
		return -1, err
	}
	for i := range cur {
		if cur[i] != cmp[i] {
			return int64(i), errors.New("store: miscompare")
		}
	}
	return -1, d.WriteAt(data, off, 0)
}

// TestCompareAndWriteByStore: a disk that compares and writes in its store
// (backstore.CompareWriter) gets COMPARE AND WRITE within its limit, so it
// stays atomic across gateways; a miscompare reports the store's offset;
// longer ones are compared by the LU as before.
func TestCompareAndWriteByStore(t *testing.T) {
	t.Parallel()
	d := &storeCAW{Mem: newMem(t, testBlocks, testBS), max: testBS}
	f := newFixture(t, d, LUConfig{})
	a := bytes.Repeat([]byte{'A'}, testBS)
	good(t, out(f.s1, rw16(OpWrite16, 7, 1, 0), a))
	buf := append(bytes.Clone(a), bytes.Repeat([]byte{'B'}, testBS)...)
	buf[100] = 'x'
	c := out(f.s1, caw(7, 1, 0), buf)
	expect(t, c, KeyMiscompare, ASCMiscompareDuringVerify)
	if s := sense(t, c); s.Information != 100 {
		t.Errorf("miscompare offset %d, want 100", s.Information)
	}
	buf[100] = 'A'
	good(t, out(f.s1, caw(7, 1, 0), buf))
	if !bytes.Equal(data(in(f.s1, rw16(OpRead16, 7, 1, 0), testBS)), buf[testBS:]) {
		t.Fatal("COMPARE AND WRITE did not write")
	}
	if d.calls != 2 {
		t.Fatalf("the store compared %d times, want 2", d.calls)
	}
	// Two blocks: beyond the store's limit, the LU compares.
	two := bytes.Repeat([]byte{'C'}, 2*testBS)
	good(t, out(f.s1, rw16(OpWrite16, 8, 2, 0), two))
	good(t, out(f.s1, caw(8, 2, 0), append(bytes.Clone(two), make([]byte, 2*testBS)...)))
	if d.calls != 2 {
		t.Fatalf("a 2-block COMPARE AND WRITE went to the store (limit 1 block)")
	}
}
