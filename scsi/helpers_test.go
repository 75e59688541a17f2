package scsi

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/rdisk/rdisk/backstore"
)

const (
	testBlocks = 4096
	testBS     = 512
)

// newMem returns a RAM disk of blocks*bs bytes, closed at the end of the
// test.
func newMem(t testing.TB, blocks int64, bs int) *backstore.Mem {
	t.Helper()
	m, err := backstore.NewMem(blocks*int64(bs), bs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// fixture is a target with one LU at LUN 0 and two sessions whose unit
// attentions are already cleared.
type fixture struct {
	t    testing.TB
	tgt  *Target
	lu   *LU
	disk backstore.Disk
	s1   *Session
	s2   *Session
}

func newFixture(t testing.TB, disk backstore.Disk, cfg LUConfig) *fixture {
	t.Helper()
	if disk == nil {
		disk = newMem(t, testBlocks, testBS)
	}
	if cfg.Serial == "" {
		cfg.Serial = "TESTSERIAL0001"
	}
	lu, err := NewLU(disk, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tgt := NewTarget(TargetConfig{Name: "iqn.2026-11.io.rdisk:test"})
	if err := tgt.Map(0, lu); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, tgt: tgt, lu: lu, disk: disk}
	f.s1 = f.session("iqn.2026-11.io.rdisk:init1,i,0x000000000001", 1)
	f.s2 = f.session("iqn.2026-11.io.rdisk:init2,i,0x000000000002", 1)
	return f
}

func (f *fixture) session(name string, port uint16) *Session {
	f.t.Helper()
	s, err := f.tgt.NewSession(SessionConfig{InitiatorPort: name, ProtocolID: ProtocolISCSI, RelativeTargetPort: port, TargetPort: "iqn.2026-11.io.rdisk:test,t,0x0001"})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(s.Close)
	clearUA(f.t, s, 0)
	return s
}

// clearUA sends TEST UNIT READY until it returns GOOD.
func clearUA(t testing.TB, s *Session, lun uint64) {
	t.Helper()
	for i := 0; i < 16; i++ {
		c := run(s, lun, tur(), DirNone, 0, nil)
		if c.Status == StatusGood {
			return
		}
	}
	t.Fatal("unit attentions do not clear")
}

// run executes cdb with fresh buffers: a data-in buffer of edtl bytes for
// DirIn, dataOut for DirOut.
func run(s *Session, lun uint64, cdbBytes []byte, dir Dir, edtl int, dataOut []byte) *Command {
	c := &Command{CDB: cdbBytes, LUN: lun, Dir: dir, ExpectedLength: uint32(edtl), Sense: make([]byte, SenseBufferLen)}
	switch dir {
	case DirIn:
		c.DataIn = make([]byte, edtl)
	case DirOut:
		c.DataOut = dataOut
	}
	s.Execute(c)
	return c
}

// in runs a data-in command with an expected length of n.
func in(s *Session, cdbBytes []byte, n int) *Command { return run(s, 0, cdbBytes, DirIn, n, nil) }

// out runs a data-out command.
func out(s *Session, cdbBytes []byte, data []byte) *Command {
	return run(s, 0, cdbBytes, DirOut, len(data), data)
}

// none runs a command without data.
func none(s *Session, cdbBytes []byte) *Command { return run(s, 0, cdbBytes, DirNone, 0, nil) }

// data returns the data-in bytes of c.
func data(c *Command) []byte { return c.DataIn[:c.DataInLen] }

// sense decodes the sense data of c.
func sense(t testing.TB, c *Command) Sense {
	t.Helper()
	s, err := ParseSense(c.Sense[:c.SenseLen])
	if err != nil {
		t.Fatalf("sense %x: %v", c.Sense[:c.SenseLen], err)
	}
	return s
}

// expect checks the outcome of a command: GOOD when key is KeyNoSense and
// asc is 0, otherwise CHECK CONDITION with that sense key and ASC.
func expect(t testing.TB, c *Command, key SenseKey, asc ASC) {
	t.Helper()
	if key == KeyNoSense && asc == 0 {
		if c.Status != StatusGood {
			t.Fatalf("CDB % x: status %v %s, want GOOD", c.CDB, c.Status, describe(c))
		}
		return
	}
	if c.Status != StatusCheckCondition {
		t.Fatalf("CDB % x: status %v, want CHECK CONDITION %v %v", c.CDB, c.Status, key, asc)
	}
	s := sense(t, c)
	if s.Key != key || s.ASC != asc {
		t.Fatalf("CDB % x: sense %v %v, want %v %v", c.CDB, s.Key, s.ASC, key, asc)
	}
}

func good(t testing.TB, c *Command) { t.Helper(); expect(t, c, KeyNoSense, 0) }

func describe(c *Command) string {
	if c.Status != StatusCheckCondition {
		return ""
	}
	s, err := ParseSense(c.Sense[:c.SenseLen])
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("(%v %v)", s.Key, s.ASC)
}

// expectField checks an ILLEGAL REQUEST with a CDB field pointer.
func expectField(t testing.TB, c *Command, asc ASC, byteOff int) {
	t.Helper()
	expect(t, c, KeyIllegalRequest, asc)
	_, b, _, ok := sense(t, c).FieldPointer()
	if !ok || b != byteOff {
		t.Fatalf("CDB % x: field pointer %d (valid %v), want %d", c.CDB, b, ok, byteOff)
	}
}

// CDB builders.

func tur() []byte { return []byte{OpTestUnitReady, 0, 0, 0, 0, 0} }

func inquiry(evpd bool, page uint8, alloc uint16) []byte {
	b := []byte{OpInquiry, 0, page, 0, 0, 0}
	if evpd {
		b[1] = 1
	}
	binary.BigEndian.PutUint16(b[3:5], alloc)
	return b
}

func rw6(op uint8, lba uint32, n uint8) []byte {
	return []byte{op, uint8(lba >> 16 & 0x1f), uint8(lba >> 8), uint8(lba), n, 0}
}

func rw10(op uint8, lba uint32, n uint16, flags uint8) []byte {
	b := make([]byte, 10)
	b[0], b[1] = op, flags
	binary.BigEndian.PutUint32(b[2:6], lba)
	binary.BigEndian.PutUint16(b[7:9], n)
	return b
}

func rw12(op uint8, lba uint32, n uint32, flags uint8) []byte {
	b := make([]byte, 12)
	b[0], b[1] = op, flags
	binary.BigEndian.PutUint32(b[2:6], lba)
	binary.BigEndian.PutUint32(b[6:10], n)
	return b
}

func rw16(op uint8, lba uint64, n uint32, flags uint8) []byte {
	b := make([]byte, 16)
	b[0], b[1] = op, flags
	binary.BigEndian.PutUint64(b[2:10], lba)
	binary.BigEndian.PutUint32(b[10:14], n)
	return b
}

func caw(lba uint64, n uint8, flags uint8) []byte {
	b := make([]byte, 16)
	b[0], b[1] = OpCompareAndWrite, flags
	binary.BigEndian.PutUint64(b[2:10], lba)
	b[13] = n
	return b
}

func rc16(alloc uint32) []byte {
	b := make([]byte, 16)
	b[0], b[1] = OpServiceActionIn16, SAReadCapacity16
	binary.BigEndian.PutUint32(b[10:14], alloc)
	return b
}

func getLBAStatus(lba uint64, alloc uint32) []byte {
	b := make([]byte, 16)
	b[0], b[1] = OpServiceActionIn16, SAGetLBAStatus
	binary.BigEndian.PutUint64(b[2:10], lba)
	binary.BigEndian.PutUint32(b[10:14], alloc)
	return b
}

func modeSense6(dbd bool, pc, page, sub, alloc uint8) []byte {
	b := []byte{OpModeSense6, 0, pc<<6 | page, sub, alloc, 0}
	if dbd {
		b[1] = 0x08
	}
	return b
}

func modeSense10(llbaa, dbd bool, pc, page uint8, alloc uint16) []byte {
	b := make([]byte, 10)
	b[0], b[2] = OpModeSense10, pc<<6|page
	if dbd {
		b[1] |= 0x08
	}
	if llbaa {
		b[1] |= 0x10
	}
	binary.BigEndian.PutUint16(b[7:9], alloc)
	return b
}

func modeSelect6(plen uint8) []byte { return []byte{OpModeSelect6, 0x10, 0, 0, plen, 0} }

func unmapCDB(plen uint16) []byte {
	b := make([]byte, 10)
	b[0] = OpUnmap
	binary.BigEndian.PutUint16(b[7:9], plen)
	return b
}

// unmapParams builds an UNMAP parameter list.
func unmapParams(descs ...[2]uint64) []byte {
	p := make([]byte, 8+16*len(descs))
	binary.BigEndian.PutUint16(p[0:2], uint16(len(p)-2))
	binary.BigEndian.PutUint16(p[2:4], uint16(16*len(descs)))
	for i, d := range descs {
		binary.BigEndian.PutUint64(p[8+16*i:], d[0])
		binary.BigEndian.PutUint32(p[8+16*i+8:], uint32(d[1]))
	}
	return p
}

func prIn(sa uint8, alloc uint16) []byte {
	b := make([]byte, 10)
	b[0], b[1] = OpPersistentReserveIn, sa
	binary.BigEndian.PutUint16(b[7:9], alloc)
	return b
}

func prOutCDB(sa, typ uint8) []byte {
	b := make([]byte, 10)
	b[0], b[1], b[2] = OpPersistentReserveOut, sa, typ
	binary.BigEndian.PutUint32(b[5:9], 24)
	return b
}

func prOutParams(key, sark uint64, flags uint8) []byte {
	p := make([]byte, 24)
	binary.BigEndian.PutUint64(p[0:8], key)
	binary.BigEndian.PutUint64(p[8:16], sark)
	p[20] = flags
	return p
}

func rsoc(rctd bool, opts, op uint8, sa uint16, alloc uint32) []byte {
	b := make([]byte, 12)
	b[0], b[1], b[2], b[3] = OpMaintenanceIn, SAReportSupportedOps, opts, op
	if rctd {
		b[2] |= 0x80
	}
	binary.BigEndian.PutUint16(b[4:6], sa)
	binary.BigEndian.PutUint32(b[6:10], alloc)
	return b
}

func reportLUNs(alloc uint32) []byte {
	b := make([]byte, 12)
	b[0] = OpReportLUNs
	binary.BigEndian.PutUint32(b[6:10], alloc)
	return b
}

// pattern returns n bytes that differ per block and per seed.
func pattern(n int, seed byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i/testBS)*7 + byte(i) + seed
	}
	return p
}
