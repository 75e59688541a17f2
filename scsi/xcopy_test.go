package scsi

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// xcopyCDB is EXTENDED COPY (LID1) with a parameter list length.
func xcopyCDB(plen uint32) []byte {
	b := make([]byte, 16)
	b[0] = OpExtendedCopy
	binary.BigEndian.PutUint32(b[10:], plen)
	return b
}

// rcrCDB is RECEIVE COPY RESULTS.
func rcrCDB(sa, listID uint8, alloc uint32) []byte {
	b := make([]byte, 16)
	b[0] = OpReceiveCopyResults
	b[1] = sa
	b[2] = listID
	binary.BigEndian.PutUint32(b[10:], alloc)
	return b
}

// cscdE4 is an identification CSCD descriptor naming an LU by its NAA
// designator, as libiscsi and VMware build it.
func cscdE4(naa []byte, bs int) []byte {
	d := make([]byte, xcopyCSCDLen)
	d[0] = cscdIdentification
	d[4] = codeBinary
	d[5] = assocLU | desigNAA
	d[7] = byte(len(naa))
	copy(d[8:], naa)
	d[29], d[30], d[31] = byte(bs>>16), byte(bs>>8), byte(bs)
	return d
}

// segB2B is a block device to block device segment descriptor.
func segB2B(src, dst uint16, nlb uint16, slba, dlba uint64) []byte {
	d := make([]byte, xcopySegB2BLen)
	d[0] = segBlockToBlock
	binary.BigEndian.PutUint16(d[2:], xcopySegB2BLen-4)
	binary.BigEndian.PutUint16(d[4:], src)
	binary.BigEndian.PutUint16(d[6:], dst)
	binary.BigEndian.PutUint16(d[10:], nlb)
	binary.BigEndian.PutUint64(d[12:], slba)
	binary.BigEndian.PutUint64(d[20:], dlba)
	return d
}

// xcopyList builds a parameter list: header, CSCDs, segments.
func xcopyList(listID, usage uint8, cscds [][]byte, segs [][]byte) []byte {
	h := make([]byte, xcopyHeaderLen)
	h[0] = listID
	h[1] = usage << 3
	var c, s []byte
	for _, d := range cscds {
		c = append(c, d...)
	}
	for _, d := range segs {
		s = append(s, d...)
	}
	binary.BigEndian.PutUint16(h[2:], uint16(len(c)))
	binary.BigEndian.PutUint32(h[8:], uint32(len(s)))
	return append(append(h, c...), s...)
}

func xcopy(s *Session, lun uint64, list []byte) *Command {
	return run(s, lun, xcopyCDB(uint32(len(list))), DirOut, len(list), list)
}

func writeBlocks(t *testing.T, s *Session, lun uint64, lba uint32, p []byte) {
	t.Helper()
	good(t, run(s, lun, rw10(OpWrite10, lba, uint16(len(p)/testBS), 0), DirOut, len(p), p))
}

func readBlocks(t *testing.T, s *Session, lun uint64, lba uint32, n int) []byte {
	t.Helper()
	c := run(s, lun, rw10(OpRead10, lba, uint16(n), 0), DirIn, n*testBS, nil)
	good(t, c)
	return data(c)
}

func TestExtendedCopyWithinLU(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	p := pattern(64*testBS, 7)
	writeBlocks(t, f.s1, 0, 0, p)
	list := xcopyList(1, listIDDiscard, [][]byte{cscdE4(f.lu.naa, testBS)}, [][]byte{segB2B(0, 0, 64, 0, testBlocks-64)})
	good(t, xcopy(f.s1, 0, list))
	if got := readBlocks(t, f.s1, 0, testBlocks-64, 64); !bytes.Equal(got, p) {
		t.Fatal("copied blocks differ from the source")
	}
	// Parameter list length 0: nothing to do.
	good(t, run(f.s1, 0, xcopyCDB(0), DirNone, 0, nil))
}

// TestExtendedCopyOverlap copies a range onto itself shifted up and down
// within one LU: the result is that of copying through a buffer.
func TestExtendedCopyOverlap(t *testing.T) {
	t.Parallel()
	// More than one scratch buffer, so the copy runs in chunks.
	const n = 2*scratchSize/testBS + 3
	for _, shift := range []int{5, -5} {
		f := newFixture(t, nil, LUConfig{})
		p := pattern(n*testBS, 3)
		base := 1000
		for off := 0; off < n; off += 128 {
			m := min(128, n-off)
			writeBlocks(t, f.s1, 0, uint32(base+off), p[off*testBS:(off+m)*testBS])
		}
		list := xcopyList(0, listIDNone, [][]byte{cscdE4(f.lu.naa, testBS)}, [][]byte{segB2B(0, 0, n, uint64(base), uint64(base+shift))})
		good(t, xcopy(f.s1, 0, list))
		for off := 0; off < n; off += 128 {
			m := min(128, n-off)
			if got := readBlocks(t, f.s1, 0, uint32(base+shift+off), m); !bytes.Equal(got, p[off*testBS:(off+m)*testBS]) {
				t.Fatalf("shift %d: blocks %d+%d differ", shift, off, m)
			}
		}
	}
}

// twoLUs is a target with LUN 0 and LUN 1 on separate disks.
func twoLUs(t *testing.T, cfg1 LUConfig) (*fixture, *LU) {
	f := newFixture(t, nil, LUConfig{})
	if cfg1.Serial == "" {
		cfg1.Serial = "TESTSERIAL0002"
	}
	lu1, err := NewLU(newMem(t, testBlocks, testBS), cfg1)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.tgt.Map(1, lu1); err != nil {
		t.Fatal(err)
	}
	clearUA(t, f.s1, 0)
	clearUA(t, f.s1, 1)
	return f, lu1
}

// TestExtendedCopyBetweenLUs is VMware's XCOPY: the command goes to the
// destination LU (or the source), the other LU is named by its NAA.
func TestExtendedCopyBetweenLUs(t *testing.T) {
	t.Parallel()
	f, lu1 := twoLUs(t, LUConfig{})
	p := pattern(16*testBS, 9)
	writeBlocks(t, f.s1, 0, 10, p)
	cscds := [][]byte{cscdE4(f.lu.naa, testBS), cscdE4(lu1.naa, testBS)}
	// Received by the destination (LUN 1), pulling from LUN 0.
	good(t, xcopy(f.s1, 1, xcopyList(0, listIDNone, cscds, [][]byte{segB2B(0, 1, 16, 10, 100)})))
	if got := readBlocks(t, f.s1, 1, 100, 16); !bytes.Equal(got, p) {
		t.Fatal("LUN 1 does not hold the copy")
	}
	// Received by the source, pushing to LUN 1, two segments.
	good(t, xcopy(f.s1, 0, xcopyList(0, listIDNone, cscds, [][]byte{segB2B(0, 1, 8, 10, 200), segB2B(0, 1, 8, 18, 208)})))
	if got := readBlocks(t, f.s1, 1, 200, 16); !bytes.Equal(got, p) {
		t.Fatal("LUN 1 does not hold the two-segment copy")
	}
	// A designator no LU has, an index beyond the list, a range beyond
	// the destination: COPY ABORTED, nothing written.
	other := append([]byte(nil), lu1.naa...)
	other[7] ^= 0xff
	bad := [][]byte{
		xcopyList(0, listIDNone, [][]byte{cscds[0], cscdE4(other, testBS)}, [][]byte{segB2B(0, 1, 1, 0, 0)}),
		xcopyList(0, listIDNone, cscds, [][]byte{segB2B(0, 2, 1, 0, 0)}),
		xcopyList(0, listIDNone, cscds, [][]byte{segB2B(0, 1, 8, 10, 300), segB2B(0, 1, 2, 0, testBlocks-1)}),
	}
	for i, l := range bad {
		expect(t, xcopy(f.s1, 0, l), KeyCopyAborted, ASCCopyTargetNotReachable)
		if i == 2 && !bytes.Equal(readBlocks(t, f.s1, 1, 300, 8), make([]byte, 8*testBS)) {
			t.Fatal("a refused copy wrote its first segment")
		}
	}
}

// TestExtendedCopyVisibility: only LUs the session sees, writable through
// its view, and with the copy manager on take part.
func TestExtendedCopyVisibility(t *testing.T) {
	t.Parallel()
	f, lu1 := twoLUs(t, LUConfig{})
	cscds := [][]byte{cscdE4(f.lu.naa, testBS), cscdE4(lu1.naa, testBS)}
	list := xcopyList(0, listIDNone, cscds, [][]byte{segB2B(0, 1, 4, 0, 0)})

	v, err := NewLUNView([]LUNMapping{{MappedLUN: 0, LUN: 0}})
	if err != nil {
		t.Fatal(err)
	}
	s := f.session("iqn.2026-11.io.rdisk:init3,i,0x000000000003", 1)
	s.SetView(v)
	clearUA(t, s, 0)
	expect(t, xcopy(s, 0, list), KeyCopyAborted, ASCCopyTargetNotReachable)

	v, err = NewLUNView([]LUNMapping{{MappedLUN: 0, LUN: 0}, {MappedLUN: 1, LUN: 1, ReadOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	s.SetView(v)
	clearUA(t, s, 0)
	expect(t, xcopy(s, 0, list), KeyCopyAborted, ASCCopyTargetNotReachable)
	// Reading from the read-only mapping is fine.
	good(t, xcopy(s, 0, xcopyList(0, listIDNone, cscds, [][]byte{segB2B(1, 0, 4, 0, 8)})))

	g, _ := twoLUs(t, LUConfig{NoExtendedCopy: true})
	lu2 := g.tgt.LU(1)
	expect(t, xcopy(g.s1, 0, xcopyList(0, listIDNone, [][]byte{cscdE4(g.lu.naa, testBS), cscdE4(lu2.naa, testBS)}, [][]byte{segB2B(0, 1, 4, 0, 0)})),
		KeyCopyAborted, ASCCopyTargetNotReachable)
	expect(t, xcopy(g.s1, 1, list), KeyIllegalRequest, ASCInvalidCommandOpcode)
	c := in(g.s1, inquiry(false, 0, 96), 96)
	good(t, c)
	if data(c)[5]&0x08 == 0 {
		t.Fatal("3PC clear on an LU with the copy manager")
	}
	c = run(g.s1, 1, inquiry(false, 0, 96), DirIn, 96, nil)
	good(t, c)
	if data(c)[5]&0x08 != 0 {
		t.Fatal("3PC set with NoExtendedCopy")
	}
}

func TestExtendedCopyBlockSizes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	lu1, err := NewLU(newMem(t, 64, 4096), LUConfig{Serial: "TESTSERIAL4K"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.tgt.Map(1, lu1); err != nil {
		t.Fatal(err)
	}
	clearUA(t, f.s1, 0)
	cscds := [][]byte{cscdE4(f.lu.naa, testBS), cscdE4(lu1.naa, 4096)}
	expect(t, xcopy(f.s1, 0, xcopyList(0, listIDNone, cscds, [][]byte{segB2B(0, 1, 8, 0, 0)})), KeyNotReady, ASCLUCommunicationFailure)
}

func TestExtendedCopyReservation(t *testing.T) {
	t.Parallel()
	f, lu1 := twoLUs(t, LUConfig{})
	clearUA(t, f.s2, 1)
	// s2 holds WRITE EXCLUSIVE on LUN 1: s1's copy to it is refused,
	// its copy from it goes through.
	good(t, run(f.s2, 1, prOutCDB(prRegister, 0), DirOut, 24, prOutParams(0, 0xabc, 0)))
	good(t, run(f.s2, 1, prOutCDB(prReserve, 1), DirOut, 24, prOutParams(0xabc, 0, 0)))
	cscds := [][]byte{cscdE4(f.lu.naa, testBS), cscdE4(lu1.naa, testBS)}
	expect(t, xcopy(f.s1, 0, xcopyList(0, listIDNone, cscds, [][]byte{segB2B(0, 1, 1, 0, 0)})), KeyCopyAborted, ASCCopyTargetNotReachable)
	good(t, xcopy(f.s1, 0, xcopyList(0, listIDNone, cscds, [][]byte{segB2B(1, 0, 1, 0, 0)})))
}

// TestParseXCopy checks the parameter list checks and their order (LIO's,
// which libiscsi's ExtendedCopy tests expect).
func TestParseXCopy(t *testing.T) {
	t.Parallel()
	naa := []byte{0x36, 1, 2, 3, 4, 5, 6, 7}
	e4 := cscdE4(naa, 512)
	seg := segB2B(0, 0, 1, 0, 1)
	withByte := func(l []byte, off int, v byte) []byte { l = bytes.Clone(l); l[off] = v; return l }
	one := xcopyList(1, listIDHold, [][]byte{e4}, [][]byte{seg})
	three := xcopyList(1, 0, [][]byte{e4, e4, e4}, [][]byte{seg})
	nine := xcopyList(1, 0, [][]byte{e4}, [][]byte{seg, seg, seg, seg, seg, seg, seg, seg, seg})
	big := make([]byte, 16+1100)
	binary.BigEndian.PutUint16(big[2:], 64)
	binary.BigEndian.PutUint32(big[8:], 1036)
	strm := xcopyList(1, 0, [][]byte{e4}, [][]byte{{0x03, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}})
	for _, tc := range []struct {
		name string
		list []byte
		key  SenseKey
		asc  ASC
	}{
		{"valid", one, 0, 0},
		{"short header", one[:15], KeyIllegalRequest, ASCParameterListLengthError},
		{"truncated CSCD", one[:16+31], KeyIllegalRequest, ASCParameterListLengthError},
		{"truncated segment", one[:len(one)-1], KeyIllegalRequest, ASCParameterListLengthError},
		{"descriptor lists too long", big, KeyIllegalRequest, ASCParameterListLengthError},
		{"inline data", withByte(one, 15, 1), KeyIllegalRequest, ASCInvalidFieldInParameterList},
		{"list ID usage 01b", withByte(one, 1, 1<<3), KeyIllegalRequest, ASCInvalidFieldInParameterList},
		{"list ID with usage 11b", withByte(one, 1, 3<<3), KeyIllegalRequest, ASCInvalidFieldInParameterList},
		{"too many CSCDs", three, KeyIllegalRequest, ASCTooManyTargetDescriptors},
		{"too many segments", nine, KeyIllegalRequest, ASCTooManySegmentDescriptors},
		{"FC N_Port_Name CSCD", withByte(one, 16, 0xe0), KeyIllegalRequest, ASCUnsupportedTargetDescType},
		{"stream to stream segment", strm, KeyIllegalRequest, ASCUnsupportedSegmentDescType},
		{"segment length", withByte(one, 16+32+3, 0x10), KeyIllegalRequest, ASCInvalidFieldInParameterList},
		{"T10 vendor ID designator", withByte(one, 16+5, desigVendor), KeyIllegalRequest, ASCInvalidFieldInParameterList},
		{"ASCII code set", withByte(one, 16+4, codeASCII), KeyIllegalRequest, ASCInvalidFieldInParameterList},
		{"port association", withByte(one, 16+5, assocPort|desigNAA), KeyIllegalRequest, ASCInvalidFieldInParameterList},
		{"designator length", withByte(one, 16+7, 12), KeyIllegalRequest, ASCInvalidFieldInParameterList},
		{"stream device", withByte(one, 16+1, 0x01), KeyIllegalRequest, ASCInvalidFieldInParameterList},
		{"LU ID TYPE ignored (SPC-4)", withByte(one, 16+1, 0x80), 0, 0},
	} {
		p, s, ok := parseXCopy(tc.list)
		if tc.key == 0 {
			if !ok {
				t.Errorf("%s: refused with %v %v", tc.name, s.key, s.asc)
				continue
			}
			if p.cscdCount != 1 || p.segments() != 1 || !bytes.Equal(p.cscd(0), naa) {
				t.Errorf("%s: %d CSCDs, %d segments, NAA % x", tc.name, p.cscdCount, p.segments(), p.cscd(0))
			}
			if src, dst, nlb, slba, dlba := p.segment(0); src != 0 || dst != 0 || nlb != 1 || slba != 0 || dlba != 1 {
				t.Errorf("%s: segment %d %d %d %d %d", tc.name, src, dst, nlb, slba, dlba)
			}
			continue
		}
		if ok || s.key != tc.key || s.asc != tc.asc {
			t.Errorf("%s: ok %v, sense %v %v, want %v %v", tc.name, ok, s.key, s.asc, tc.key, tc.asc)
		}
	}
}

func TestReceiveCopyResults(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	c := in(f.s1, rcrCDB(rcrOpParams, 0, 1024), 1024)
	good(t, c)
	d := data(c)
	if len(d) != 46 || binary.BigEndian.Uint32(d) != 42 || d[4] != 1 ||
		binary.BigEndian.Uint16(d[8:]) != xcopyMaxCSCDs || binary.BigEndian.Uint16(d[10:]) != xcopyMaxSegments ||
		binary.BigEndian.Uint32(d[12:]) != xcopyMaxDescList || binary.BigEndian.Uint32(d[16:]) != 0xffff*testBS ||
		binary.BigEndian.Uint16(d[34:]) != xcopyStatusSlots || d[36] != xcopyStatusSlots ||
		d[37] != 9 || d[43] != 2 || d[44] != 0x02 || d[45] != 0xe4 {
		t.Fatalf("operating parameters % x", d)
	}
	// Allocation length truncates.
	c = in(f.s1, rcrCDB(rcrOpParams, 0, 10), 10)
	good(t, c)
	if c.DataInLen != 10 {
		t.Fatalf("%d bytes for allocation length 10", c.DataInLen)
	}
	// COPY STATUS: none, then the copy's, then none again; other
	// nexuses do not see it.
	expectField(t, in(f.s1, rcrCDB(rcrCopyStatus, 5, 12), 12), ASCInvalidFieldInCDB, 2)
	good(t, xcopy(f.s1, 0, xcopyList(5, listIDHold, [][]byte{cscdE4(f.lu.naa, testBS)}, [][]byte{segB2B(0, 0, 8, 0, 100)})))
	expectField(t, in(f.s2, rcrCDB(rcrCopyStatus, 5, 12), 12), ASCInvalidFieldInCDB, 2)
	c = in(f.s1, rcrCDB(rcrCopyStatus, 5, 12), 12)
	good(t, c)
	want := []byte{0, 0, 0, 8, 0x01, 0, 1, 0, 0, 0, 0x10, 0}
	if !bytes.Equal(data(c), want) {
		t.Fatalf("copy status % x, want % x", data(c), want)
	}
	expectField(t, in(f.s1, rcrCDB(rcrCopyStatus, 5, 12), 12), ASCInvalidFieldInCDB, 2)
	// A failed copy: completed with errors, no segment processed.
	expect(t, xcopy(f.s1, 0, xcopyList(6, listIDDiscard, [][]byte{cscdE4(f.lu.naa, testBS)}, [][]byte{segB2B(0, 0, 8, 0, testBlocks)})),
		KeyCopyAborted, ASCCopyTargetNotReachable)
	expectField(t, in(f.s1, rcrCDB(rcrCopyStatus, 6, 12), 12), ASCInvalidFieldInCDB, 2)
	// Unsupported service actions.
	expectField(t, in(f.s1, rcrCDB(0x01, 0, 12), 12), ASCInvalidFieldInCDB, 1)
	expectField(t, in(f.s1, rcrCDB(0x04, 0, 12), 12), ASCInvalidFieldInCDB, 1)
}

func TestCopyStatusTable(t *testing.T) {
	t.Parallel()
	var tab copyStatuses
	var d [12]byte
	running, _, ok := tab.begin(1)
	if !ok {
		t.Fatal("begin refused")
	}
	if _, s, ok := tab.begin(1); ok || s.asc != ASCOperationInProgress {
		t.Fatalf("a second copy with a running list ID: ok %v, %v", ok, s.asc)
	}
	if !tab.report(1, d[:]) || d[4] != 0 {
		t.Fatalf("running copy status % x", d)
	}
	// Fill the table with finished copies, then one more: the oldest
	// finished entry goes, the running one stays.
	for id := uint8(2); id < 2+xcopyStatusSlots; id++ {
		s, _, ok := tab.begin(id)
		if !ok {
			t.Fatalf("list ID %d refused", id)
		}
		tab.update(s, 1, 1<<40, true, false)
	}
	if tab.report(2, d[:]) {
		t.Fatal("the oldest finished status was kept")
	}
	if !tab.report(9, d[:]) || d[4] != 1 || d[7] != 1 || binary.BigEndian.Uint32(d[8:]) != 1<<30 {
		t.Fatalf("status of a 1 TiB copy % x", d)
	}
	tab.update(running, 0, 0, true, true)
	if !tab.report(1, d[:]) || d[4] != 2 {
		t.Fatalf("failed copy status % x", d)
	}
	// Every slot running: INSUFFICIENT RESOURCES.
	var full copyStatuses
	for id := range uint8(xcopyStatusSlots) {
		if _, _, ok := full.begin(id); !ok {
			t.Fatalf("list ID %d refused", id)
		}
	}
	if _, s, ok := full.begin(100); ok || s.asc != ASCInsufficientResources {
		t.Fatalf("copy beyond the maximum: ok %v, %v", ok, s.asc)
	}
}

func writeAtomic(lba uint64, n uint16, flags uint8) []byte {
	b := make([]byte, 16)
	b[0] = OpWriteAtomic16
	b[1] = flags
	binary.BigEndian.PutUint64(b[2:], lba)
	binary.BigEndian.PutUint16(b[12:], n)
	return b
}

func TestWriteAtomic(t *testing.T) {
	t.Parallel()
	off := newFixture(t, nil, LUConfig{})
	expect(t, out(off.s1, writeAtomic(0, 1, 0), make([]byte, testBS)), KeyIllegalRequest, ASCInvalidCommandOpcode)
	c := in(off.s1, inquiry(true, vpdBlockLimits, 64), 64)
	good(t, c)
	if !bytes.Equal(data(c)[44:64], make([]byte, 20)) {
		t.Fatalf("atomic fields % x without WRITE ATOMIC", data(c)[44:])
	}

	f := newFixture(t, nil, LUConfig{PhysicalBlockExp: 3, AtomicTransferBlocks: 4096, MaxTransferBlocks: 256})
	c = in(f.s1, inquiry(true, vpdBlockLimits, 64), 64)
	good(t, c)
	d := data(c)
	if binary.BigEndian.Uint32(d[44:]) != 256 || binary.BigEndian.Uint32(d[48:]) != 8 || binary.BigEndian.Uint32(d[52:]) != 8 ||
		binary.BigEndian.Uint16(d[6:]) != 8 {
		t.Fatalf("block limits % x", d)
	}
	p := pattern(16*testBS, 4)
	good(t, out(f.s1, writeAtomic(8, 16, flagFUA), p))
	if got := readBlocks(t, f.s1, 0, 8, 16); !bytes.Equal(got, p) {
		t.Fatal("atomic write not on the disk")
	}
	good(t, none(f.s1, writeAtomic(0, 0, 0)))
	expectField(t, out(f.s1, writeAtomic(1, 8, 0), p[:8*testBS]), ASCInvalidFieldInCDB, 2)                // alignment
	expectField(t, out(f.s1, writeAtomic(0, 4, 0), p[:4*testBS]), ASCInvalidFieldInCDB, 12)               // granularity
	expectField(t, out(f.s1, writeAtomic(0, 264, 0), make([]byte, 264*testBS)), ASCInvalidFieldInCDB, 12) // length
	expectField(t, out(f.s1, writeAtomic(0, 8, 0x20), p[:8*testBS]), ASCInvalidFieldInCDB, 1)             // WRPROTECT
	b := writeAtomic(0, 8, 0)
	b[11] = 8 // ATOMIC BOUNDARY
	expectField(t, out(f.s1, b, p[:8*testBS]), ASCInvalidFieldInCDB, 10)
	expect(t, out(f.s1, writeAtomic(testBlocks-8, 16, 0), p), KeyIllegalRequest, ASCLBAOutOfRange)
	expect(t, none(f.s1, writeAtomic(testBlocks+8, 0, 0)), KeyIllegalRequest, ASCLBAOutOfRange)
	// Short data-out: refused whole, nothing written.
	expect(t, run(f.s1, 0, writeAtomic(32, 16, 0), DirOut, 8*testBS, p), KeyIllegalRequest, ASCInvalidFieldInCommandIU)
	if !bytes.Equal(readBlocks(t, f.s1, 0, 32, 16), make([]byte, 16*testBS)) {
		t.Fatal("a refused atomic write wrote")
	}
	for _, cfg := range []LUConfig{
		{AtomicTransferBlocks: 8, AtomicAlignment: 3},
		{AtomicTransferBlocks: 8, AtomicGranularity: 16},
		{AtomicTransferBlocks: 4, PhysicalBlockExp: 3},
	} {
		if _, err := NewLU(newMem(t, 64, testBS), cfg); err == nil {
			t.Errorf("NewLU accepted %+v", cfg)
		}
	}
}

func TestReadDefectData(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	c := in(f.s1, []byte{OpReadDefectData10, 0, 0x18 | 0x05, 0, 0, 0, 0, 0, 32, 0}, 32)
	good(t, c)
	if !bytes.Equal(data(c), []byte{0, 0x1d, 0, 0}) {
		t.Fatalf("READ DEFECT DATA(10) % x", data(c))
	}
	c = in(f.s1, []byte{OpReadDefectData12, 0x10 | 0x03, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0}, 32)
	good(t, c)
	if !bytes.Equal(data(c), []byte{0, 0x13, 0, 0, 0, 0, 0, 0}) {
		t.Fatalf("READ DEFECT DATA(12) % x", data(c))
	}
	expectField(t, in(f.s1, []byte{OpReadDefectData10, 0, 0x07, 0, 0, 0, 0, 0, 32, 0}, 32), ASCInvalidFieldInCDB, 2)
	expectField(t, in(f.s1, []byte{OpReadDefectData12, 0x07, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0}, 32), ASCInvalidFieldInCDB, 1)
}

// TestExtendedCopyConcurrent runs copies between two LUs from one session
// while another writes both LUs and compares and writes their blocks (run
// with -race): every copy completes, and the last copy of a quiet range
// lands whole.
func TestExtendedCopyConcurrent(t *testing.T) {
	t.Parallel()
	f, lu1 := twoLUs(t, LUConfig{})
	clearUA(t, f.s2, 1)
	cscds := [][]byte{cscdE4(f.lu.naa, testBS), cscdE4(lu1.naa, testBS)}
	p := pattern(32*testBS, 5)
	writeBlocks(t, f.s1, 0, 2000, p)
	done := make(chan struct{})
	go func() {
		defer close(done)
		blk := pattern(testBS, 1)
		for i := range 200 {
			lun := uint64(i & 1)
			if c := run(f.s2, lun, rw10(OpWrite10, uint32(i%64), 1, 0), DirOut, testBS, blk); c.Status != StatusGood {
				t.Errorf("write: %v %s", c.Status, describe(c))
				return
			}
			cw := append(bytes.Clone(blk), blk...)
			if c := run(f.s2, lun, caw(uint64(i%64), 1, 0), DirOut, len(cw), cw); c.Status != StatusGood {
				t.Errorf("compare and write: %v %s", c.Status, describe(c))
				return
			}
		}
	}()
	for i := range 50 {
		seg := segB2B(uint16(i&1), uint16(1-i&1), 64, 0, 64)
		if c := xcopy(f.s1, uint64(i&1), xcopyList(uint8(i), listIDHold, cscds, [][]byte{seg})); c.Status != StatusGood {
			t.Fatalf("copy %d: %v %s", i, c.Status, describe(c))
		}
	}
	<-done
	good(t, xcopy(f.s1, 1, xcopyList(0, listIDNone, cscds, [][]byte{segB2B(0, 1, 32, 2000, 3000)})))
	if got := readBlocks(t, f.s1, 1, 3000, 32); !bytes.Equal(got, p) {
		t.Fatal("copy of a quiet range differs")
	}
}
