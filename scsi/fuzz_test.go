package scsi

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzExecute runs arbitrary CDBs with arbitrary expected lengths,
// directions and data-out bytes against a small RAM LU from two sessions.
// The core must never panic, never write beyond the data-in and sense
// buffers it was given (they are capacity-limited, so a stray write
// panics), never modify data-out, and report consistent lengths.
func FuzzExecute(f *testing.F) {
	for _, seed := range [][]byte{
		tur(), inquiry(true, 0x83, 255), rw10(OpRead10, 1, 2, 0), rw16(OpWrite16, 3, 1, flagFUA), caw(2, 1, 0),
		rw10(OpWriteSame10, 0, 4, 0x08), unmapCDB(24), modeSense6(false, 0, 0x3f, 0, 255), modeSelect6(16),
		prOutCDB(prRegisterIgnore, 0), prIn(prInReadFullStatus, 200), rsoc(true, 0, 0, 0, 4096),
		rw16(OpOrWrite16, 5, 2, 0), rw10(OpVerify10, 0, 3, 0x06), getLBAStatus(0, 24), rc16(32),
		[]byte{OpLogSense, 0, 0x40, 0, 0, 0, 0, 1, 0, 0}, reportLUNs(100), []byte{OpReserve6, 0, 0, 0, 0, 0},
		rtpg(true, 64), rtpg(false, 3), {OpMaintenanceOut, saSetTargetPorts, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0},
		xcopyCDB(76), xcopyCDB(16), rcrCDB(rcrOpParams, 0, 64), rcrCDB(rcrCopyStatus, 1, 12), writeAtomic(0, 2, 0),
		{OpReadDefectData10, 0, 0x18, 0, 0, 0, 0, 0, 8, 0}, {OpReadDefectData12, 0x1b, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0},
	} {
		f.Add(seed, uint16(512), uint8(DirIn), uint8(0), uint8(0), bytes.Repeat([]byte{1}, 64))
		f.Add(seed, uint16(1024), uint8(DirOut), uint8(1), uint8(0), bytes.Repeat([]byte{0}, 1024))
	}
	fx := newFixture(f, newMem(f, 64, 512), LUConfig{AtomicTransferBlocks: 16})
	// A valid EXTENDED COPY parameter list for the LU, as data-out.
	f.Add(xcopyCDB(76), uint16(76), uint8(DirOut), uint8(0), uint8(0),
		xcopyList(1, 0, [][]byte{cscdE4(fx.lu.naa, 512)}, [][]byte{segB2B(0, 0, 4, 0, 8)}))
	sessions := []*Session{fx.s1, fx.s2}
	f.Fuzz(func(t *testing.T, cdbBytes []byte, edtl uint16, dir, attr, who uint8, payload []byte) {
		if len(cdbBytes) > 32 {
			cdbBytes = cdbBytes[:32]
		}
		c := &Command{
			CDB:            cdbBytes,
			LUN:            uint64(who>>1) & 1,
			Tag:            uint64(who),
			Attr:           TaskAttr(attr % 4),
			Dir:            Dir(dir % 3),
			ExpectedLength: uint32(edtl),
		}
		in := make([]byte, int(edtl)/2+int(who))
		c.DataIn = in[:len(in):len(in)]
		out := bytes.Clone(payload)
		c.DataOut = out[:len(out):len(out)]
		sense := make([]byte, int(who)%40)
		c.Sense = sense[:len(sense):len(sense)]
		s := sessions[who&1]
		s.Execute(c)
		if c.DataInLen < 0 || c.DataInLen > min(len(c.DataIn), int(c.ExpectedLength)) {
			t.Fatalf("DataInLen %d with a %d-byte buffer and EDTL %d", c.DataInLen, len(c.DataIn), c.ExpectedLength)
		}
		if c.Dir != DirIn && c.DataInLen != 0 {
			t.Fatalf("DataInLen %d for direction %v", c.DataInLen, c.Dir)
		}
		if !bytes.Equal(out, payload) {
			t.Fatal("data-out modified")
		}
		if c.SenseLen > len(c.Sense) || (c.Status != StatusCheckCondition && c.SenseLen != 0) {
			t.Fatalf("SenseLen %d, status %v", c.SenseLen, c.Status)
		}
		if c.Status == StatusCheckCondition && len(c.Sense) >= 18 {
			if _, err := ParseSense(c.Sense[:c.SenseLen]); err != nil {
				t.Fatalf("sense % x: %v", c.Sense[:c.SenseLen], err)
			}
		}
		switch c.ResidualKind {
		case ResidualNone:
			if c.Residual != 0 {
				t.Fatal("residual without a kind")
			}
		case ResidualUnderflow:
			if c.Residual == 0 || c.Residual > c.ExpectedLength {
				t.Fatalf("underflow %d with EDTL %d", c.Residual, c.ExpectedLength)
			}
		case ResidualOverflow:
			if c.Residual == 0 {
				t.Fatal("overflow of 0")
			}
		}
		if c.Aborted {
			t.Fatal("command aborted without task management")
		}
	})
}

// FuzzUnmapParams checks the UNMAP parameter list parser.
func FuzzUnmapParams(f *testing.F) {
	f.Add(unmapParams([2]uint64{0, 1}, [2]uint64{63, 1}), uint64(64))
	f.Add(unmapParams([2]uint64{64, 0}), uint64(64))
	f.Add([]byte{0, 6, 0xff, 0xff, 0, 0, 0, 0}, uint64(1))
	f.Fuzz(func(t *testing.T, list []byte, blocks uint64) {
		descs, s, ok := parseUnmap(list, blocks)
		if !ok {
			if s.key != KeyIllegalRequest {
				t.Fatalf("sense key %v", s.key)
			}
			return
		}
		if len(descs)%16 != 0 || len(descs) > len(list) || len(descs)/16 > maxUnmapBlockDescriptors {
			t.Fatalf("%d bytes of descriptors from %d", len(descs), len(list))
		}
		for p := 0; p < len(descs); p += 16 {
			lba := binary.BigEndian.Uint64(descs[p:])
			n := uint64(binary.BigEndian.Uint32(descs[p+8:]))
			if lba > blocks || lba+n > blocks || lba+n < lba {
				t.Fatalf("descriptor %d+%d accepted for %d blocks", lba, n, blocks)
			}
		}
		lo, hi := descs.span()
		if lo > hi || hi > blocks {
			t.Fatalf("span %d-%d", lo, hi)
		}
	})
}

// FuzzXCopyParams checks the EXTENDED COPY parameter list parser: what it
// accepts holds whole, known descriptors within the limits, and what it
// refuses it refuses with ILLEGAL REQUEST.
func FuzzXCopyParams(f *testing.F) {
	naa := []byte{0x36, 1, 2, 3, 4, 5, 6, 7}
	e4 := cscdE4(naa, 512)
	seg := segB2B(0, 1, 8, 0, 100)
	f.Add(xcopyList(1, 0, [][]byte{e4}, [][]byte{seg}))
	f.Add(xcopyList(0, 3, [][]byte{e4, e4}, [][]byte{seg, seg}))
	f.Add(xcopyList(1, 0, [][]byte{e4, e4, e4}, [][]byte{seg}))
	f.Add(xcopyList(1, 0, [][]byte{e4}, [][]byte{{0x03, 0, 0, 0x10}}))
	f.Add(xcopyList(1, 2, nil, nil)[:15])
	f.Fuzz(func(t *testing.T, list []byte) {
		p, s, ok := parseXCopy(list)
		if !ok {
			if s.key != KeyIllegalRequest {
				t.Fatalf("sense key %v", s.key)
			}
			return
		}
		if p.cscdCount > xcopyMaxCSCDs || p.segments() > xcopyMaxSegments || len(p.segs)%xcopySegB2BLen != 0 ||
			len(p.cscds) != p.cscdCount*xcopyCSCDLen || len(p.cscds)+len(p.segs) > xcopyMaxDescList {
			t.Fatalf("%d CSCDs (%d bytes), %d segment bytes accepted", p.cscdCount, len(p.cscds), len(p.segs))
		}
		for i := range p.cscdCount {
			if n := len(p.cscd(i)); n != 8 && n != 16 {
				t.Fatalf("CSCD %d: %d-byte designator", i, n)
			}
		}
		for i := range p.segments() {
			p.segment(i)
		}
	})
}

// FuzzModeSelect checks the MODE SELECT parameter list parser.
func FuzzModeSelect(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0x0a, 0x0a, 0x02, 0x10, 0x08, 0x40, 0, 0, 0xff, 0xff, 0, 0}, false, uint32(modeWCE))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 2, 0, 0x08, 0x12, 0x04}, true, uint32(0))
	f.Fuzz(func(t *testing.T, data []byte, ten bool, cur uint32) {
		cur &= modeWCE | modeDSense | modeSWP | modeDExcpt
		next, s, ok := parseModeSelect(data, ten, 512, cur)
		if !ok {
			if s.key != KeyIllegalRequest {
				t.Fatalf("sense key %v", s.key)
			}
			return
		}
		if next&^(modeWCE|modeDSense|modeSWP|modeDExcpt) != 0 {
			t.Fatalf("unknown mode bits %x", next)
		}
	})
}

// FuzzPROut runs PERSISTENT RESERVE OUT with arbitrary service actions,
// types and parameter lists from two nexuses and checks the state stays
// consistent: READ KEYS matches the registrations and a reservation that
// is not for all registrants has a registered holder.
func FuzzPROut(f *testing.F) {
	f.Add(uint8(prRegisterIgnore), uint8(0), prOutParams(0, 1, 0), false)
	f.Add(uint8(prReserve), uint8(prExclusiveAccess), prOutParams(1, 0, 0), false)
	f.Add(uint8(prPreemptAbort), uint8(prWriteExclusive), prOutParams(2, 1, 0x04), true)
	f.Add(uint8(prClear), uint8(0), prOutParams(1, 0, 0), true)
	fx := newFixture(f, newMem(f, 64, 512), LUConfig{})
	f.Fuzz(func(t *testing.T, sa, typ uint8, params []byte, second bool) {
		s := fx.s1
		if second {
			s = fx.s2
		}
		cdbBytes := prOutCDB(sa&0x1f, typ)
		binary.BigEndian.PutUint32(cdbBytes[5:9], uint32(len(params)))
		c := out(s, cdbBytes, params)
		if c.Status != StatusGood && c.Status != StatusCheckCondition && c.Status != StatusReservationConflict {
			if c.Status == StatusCheckCondition {
				return
			}
			t.Fatalf("status %v", c.Status)
		}
		p := &fx.lu.pr
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.held && !allRegistrants(p.typ) && p.registration(p.holder) == nil {
			t.Fatalf("reservation type %d held by an unregistered nexus", p.typ)
		}
		if p.held && allRegistrants(p.typ) && len(p.regs) == 0 {
			t.Fatal("all-registrants reservation without registrants")
		}
		seen := map[nexusID]bool{}
		for _, r := range p.regs {
			if r.key == 0 {
				t.Fatal("registration with key 0")
			}
			if seen[r.id] {
				t.Fatalf("nexus %v registered twice", r.id)
			}
			seen[r.id] = true
		}
	})
}

// FuzzParseSense checks that ParseSense never panics and round-trips what
// the target encodes.
func FuzzParseSense(f *testing.F) {
	f.Add([]byte{0x70, 0, 5, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x24, 0, 0, 0xc0, 0, 2}, uint8(5), uint16(0x2400), true)
	f.Add([]byte{0x72, 5, 0x24, 0, 0, 0, 0, 8, 2, 6, 0, 0, 0xcf, 0, 1, 0}, uint8(6), uint16(0x2900), false)
	f.Fuzz(func(t *testing.T, b []byte, key uint8, asc uint16, desc bool) {
		ParseSense(b)
		s := senseInfo{key: SenseKey(key & 0x0f), asc: ASC(asc)}.fieldPointer(desc, int(asc), int(key%9)-1)
		buf := make([]byte, SenseBufferLen)
		n := encodeSense(buf, s, desc)
		got, err := ParseSense(buf[:n])
		if err != nil || got.Key != s.key || got.ASC != s.asc {
			t.Fatalf("round trip: %+v %v", got, err)
		}
	})
}
