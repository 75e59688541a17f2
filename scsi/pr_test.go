package scsi

import (
	"encoding/binary"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func register(t *testing.T, s *Session, key, sark uint64) *Command {
	t.Helper()
	return out(s, prOutCDB(prRegister, 0), prOutParams(key, sark, 0))
}

func registerIgnore(t *testing.T, s *Session, sark uint64) {
	t.Helper()
	good(t, out(s, prOutCDB(prRegisterIgnore, 0), prOutParams(0, sark, 0)))
}

func readKeys(t *testing.T, s *Session) (gen uint32, keys []uint64) {
	t.Helper()
	c := in(s, prIn(prInReadKeys, 16384), 16384)
	good(t, c)
	d := data(c)
	if int(binary.BigEndian.Uint32(d[4:8])) != len(d)-8 {
		t.Fatalf("READ KEYS additional length %d for %d bytes", binary.BigEndian.Uint32(d[4:8]), len(d))
	}
	for p := d[8:]; len(p) >= 8; p = p[8:] {
		keys = append(keys, binary.BigEndian.Uint64(p))
	}
	return binary.BigEndian.Uint32(d[0:4]), keys
}

// readResv returns the reservation key and type, and whether the LU is
// reserved.
func readResv(t *testing.T, s *Session) (key uint64, typ uint8, held bool) {
	t.Helper()
	c := in(s, prIn(prInReadResv, 16384), 16384)
	good(t, c)
	d := data(c)
	if binary.BigEndian.Uint32(d[4:8]) == 0 {
		return 0, 0, false
	}
	return binary.BigEndian.Uint64(d[8:16]), d[21] & 0x0f, true
}

func TestPRRegister(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	for sa := uint8(0); sa < 4; sa++ {
		good(t, in(f.s1, prIn(sa, 16384), 16384))
	}
	for sa := uint8(4); sa < 0x20; sa++ {
		expectField(t, in(f.s1, prIn(sa, 16384), 16384), ASCInvalidFieldInCDB, 1)
	}
	gen0, keys := readKeys(t, f.s1)
	if len(keys) != 0 {
		t.Fatalf("keys %v", keys)
	}
	registerIgnore(t, f.s1, 0x1111)
	gen, keys := readKeys(t, f.s1)
	if !cmp.Equal(keys, []uint64{0x1111}) || gen != gen0+1 {
		t.Fatalf("keys %v gen %d", keys, gen)
	}
	// Registering again with the wrong reservation key conflicts.
	if c := register(t, f.s1, 0, 0x2222); c.Status != StatusReservationConflict {
		t.Errorf("re-register: %v", c.Status)
	}
	// An unregistered nexus with a non-zero key conflicts; with zero
	// keys it is a no-op.
	if c := register(t, f.s2, 0x1111, 0x3333); c.Status != StatusReservationConflict {
		t.Errorf("unregistered with key: %v", c.Status)
	}
	good(t, register(t, f.s2, 0, 0))
	// Change the key, then unregister.
	good(t, register(t, f.s1, 0x1111, 0x2222))
	if _, keys := readKeys(t, f.s1); !cmp.Equal(keys, []uint64{0x2222}) {
		t.Errorf("keys %v", keys)
	}
	good(t, register(t, f.s1, 0x2222, 0))
	if _, keys := readKeys(t, f.s1); len(keys) != 0 {
		t.Errorf("keys after unregister: %v", keys)
	}
	// Parameter list checks.
	expect(t, out(f.s1, []byte{OpPersistentReserveOut, 0, 0, 0, 0, 0, 0, 0, 20, 0}, make([]byte, 20)), KeyIllegalRequest, ASCParameterListLengthError)
	expectField(t, out(f.s1, prOutCDB(prRegister, 0), prOutParams(0, 5, 0x08)), ASCInvalidFieldInParameterList, 20)
	expectField(t, out(f.s1, prOutCDB(prRegister, 0), prOutParams(0, 5, 0x01)), ASCInvalidFieldInParameterList, 20)
	expectField(t, out(f.s1, prOutCDB(prRegisterMove, 0), prOutParams(0, 5, 0)), ASCInvalidFieldInCDB, 1)
	// Report capabilities.
	c := in(f.s1, prIn(prInReportCaps, 16384), 16384)
	if diff := cmp.Diff([]byte{0, 8, 0x14, 0x90, 0xea, 0x01, 0, 0}, data(c)); diff != "" {
		t.Errorf("REPORT CAPABILITIES (-want +got):\n%s", diff)
	}
}

func TestPRReserveTypes(t *testing.T) {
	t.Parallel()
	types := []struct {
		typ                            uint8
		regRead, regWrite, unRd, unWrt bool
	}{
		{prExclusiveAccess, false, false, false, false},
		{prWriteExclusive, true, false, true, false},
		{prExclusiveAccessRO, true, true, false, false},
		{prWriteExclusiveRO, true, true, true, false},
		{prExclusiveAccessAll, true, true, false, false},
		{prWriteExclusiveAllReg, true, true, true, false},
	}
	buf := make([]byte, testBS)
	works := func(c *Command, want bool) bool {
		return (c.Status == StatusGood) == want && (want || c.Status == StatusReservationConflict)
	}
	for _, tc := range types {
		f := newFixture(t, nil, LUConfig{})
		registerIgnore(t, f.s1, 0xaaaa)
		registerIgnore(t, f.s2, 0xbbbb)
		good(t, out(f.s1, prOutCDB(prReserve, tc.typ), prOutParams(0xaaaa, 0, 0)))
		wantKey := uint64(0xaaaa)
		if allRegistrants(tc.typ) {
			wantKey = 0
		}
		if key, typ, held := readResv(t, f.s2); !held || key != wantKey || typ != tc.typ {
			t.Errorf("type %d: READ RESERVATION %x %d %v", tc.typ, key, typ, held)
		}
		good(t, in(f.s1, rw10(OpRead10, 1, 1, 0), testBS))
		good(t, out(f.s1, rw10(OpWrite10, 1, 1, 0), buf))
		if !works(in(f.s2, rw10(OpRead10, 1, 1, 0), testBS), tc.regRead) ||
			!works(out(f.s2, rw10(OpWrite10, 1, 1, 0), buf), tc.regWrite) {
			t.Errorf("type %d: registered access wrong", tc.typ)
		}
		good(t, register(t, f.s2, 0xbbbb, 0))
		if !works(in(f.s2, rw10(OpRead10, 1, 1, 0), testBS), tc.unRd) ||
			!works(out(f.s2, rw10(OpWrite10, 1, 1, 0), buf), tc.unWrt) {
			t.Errorf("type %d: unregistered access wrong", tc.typ)
		}
		// Commands that are always allowed.
		good(t, in(f.s2, inquiry(false, 0, 36), 36))
		good(t, none(f.s2, tur()))
		good(t, in(f.s2, rc16(32), 32))
		// Reserving again with the same type is fine; another type or
		// another nexus conflicts.
		good(t, out(f.s1, prOutCDB(prReserve, tc.typ), prOutParams(0xaaaa, 0, 0)))
		if c := out(f.s1, prOutCDB(prReserve, tc.typ%8+1), prOutParams(0xaaaa, 0, 0)); c.Status != StatusReservationConflict && validPRType(tc.typ%8+1) {
			t.Errorf("type %d: reserving another type: %v", tc.typ, c.Status)
		}
		// RELEASE with the wrong type is an error; with the right one it
		// releases.
		other := uint8(prWriteExclusive)
		if tc.typ == other {
			other = prExclusiveAccess
		}
		expect(t, out(f.s1, prOutCDB(prRelease, other), prOutParams(0xaaaa, 0, 0)), KeyIllegalRequest, ASCInvalidReleaseOfPR)
		good(t, out(f.s1, prOutCDB(prRelease, tc.typ), prOutParams(0xaaaa, 0, 0)))
		if _, _, held := readResv(t, f.s1); held {
			t.Errorf("type %d: still reserved", tc.typ)
		}
		good(t, out(f.s2, rw10(OpWrite10, 1, 1, 0), buf))
	}
}

func TestPROwnership(t *testing.T) {
	t.Parallel()
	for _, typ := range []uint8{prExclusiveAccess, prWriteExclusive, prExclusiveAccessRO, prWriteExclusiveRO, prExclusiveAccessAll, prWriteExclusiveAllReg} {
		f := newFixture(t, nil, LUConfig{})
		registerIgnore(t, f.s1, 1)
		registerIgnore(t, f.s2, 2)
		good(t, out(f.s1, prOutCDB(prReserve, typ), prOutParams(1, 0, 0)))
		good(t, register(t, f.s1, 1, 0))
		_, _, held := readResv(t, f.s1)
		if held != allRegistrants(typ) {
			t.Errorf("type %d: held %v after the holder unregistered", typ, held)
		}
		if held {
			good(t, out(f.s2, prOutCDB(prRelease, typ), prOutParams(2, 0, 0)))
		}
		if typ == prExclusiveAccessRO || typ == prWriteExclusiveRO {
			expect(t, none(f.s2, tur()), KeyUnitAttention, ASCReservationsReleased)
		}
		good(t, register(t, f.s2, 2, 0))
		if _, _, held := readResv(t, f.s1); held {
			t.Errorf("type %d: still reserved", typ)
		}
	}
}

func TestPRClearPreempt(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	registerIgnore(t, f.s1, 1)
	gen, _ := readKeys(t, f.s1)
	good(t, out(f.s1, prOutCDB(prReserve, prExclusiveAccess), prOutParams(1, 0, 0)))
	good(t, out(f.s1, prOutCDB(prClear, 0), prOutParams(1, 0, 0)))
	if _, _, held := readResv(t, f.s1); held {
		t.Error("reserved after CLEAR")
	}
	if g, keys := readKeys(t, f.s1); len(keys) != 0 || g != gen+1 {
		t.Errorf("after CLEAR: keys %v generation %d, want %d", keys, g, gen+1)
	}
	// PREEMPT without a reservation removes a registration.
	registerIgnore(t, f.s1, 1)
	registerIgnore(t, f.s2, 2)
	gen, _ = readKeys(t, f.s1)
	good(t, out(f.s2, prOutCDB(prPreempt, prExclusiveAccess), prOutParams(2, 1, 0)))
	expect(t, none(f.s1, tur()), KeyUnitAttention, ASCRegistrationsPreempted)
	good(t, none(f.s2, tur()))
	if g, keys := readKeys(t, f.s1); !cmp.Equal(keys, []uint64{2}) || g != gen+1 {
		t.Errorf("after PREEMPT: keys %v generation %d", keys, g)
	}
	if c := out(f.s2, prOutCDB(prPreempt, prExclusiveAccess), prOutParams(2, 9, 0)); c.Status != StatusReservationConflict {
		t.Errorf("PREEMPT of an unknown key: %v", c.Status)
	}
	expectField(t, out(f.s2, prOutCDB(prPreempt, prExclusiveAccess), prOutParams(2, 0, 0)), ASCInvalidFieldInParameterList, 8)
	// PREEMPT of the holder takes the reservation over.
	registerIgnore(t, f.s1, 1)
	good(t, out(f.s1, prOutCDB(prReserve, prWriteExclusive), prOutParams(1, 0, 0)))
	good(t, out(f.s2, prOutCDB(prPreemptAbort, prExclusiveAccess), prOutParams(2, 1, 0)))
	if key, typ, held := readResv(t, f.s2); !held || key != 2 || typ != prExclusiveAccess {
		t.Errorf("after PREEMPT AND ABORT: %x %d %v", key, typ, held)
	}
	expect(t, none(f.s1, tur()), KeyUnitAttention, ASCRegistrationsPreempted)
	if c := in(f.s1, rw10(OpRead10, 0, 1, 0), testBS); c.Status != StatusReservationConflict {
		t.Errorf("preempted nexus reads: %v", c.Status)
	}
	// READ FULL STATUS shows the holder with its TransportID.
	c := in(f.s2, prIn(prInReadFullStatus, 16384), 16384)
	good(t, c)
	d := data(c)
	if binary.BigEndian.Uint32(d[4:8]) != uint32(len(d)-8) || binary.BigEndian.Uint64(d[8:16]) != 2 || d[8+12] != 0x01 || d[8+13] != prExclusiveAccess ||
		binary.BigEndian.Uint16(d[8+18:]) != 1 || d[8+24] != 0x40|ProtocolISCSI {
		t.Errorf("READ FULL STATUS % x", d)
	}
	good(t, out(f.s2, prOutCDB(prClear, 0), prOutParams(2, 0, 0)))
}

func TestPRAllTargetPorts(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	p2 := f.session("iqn.2026-11.io.rdisk:init1,i,0x000000000001", 2)
	good(t, out(f.s1, prOutCDB(prRegisterIgnore, 0), prOutParams(0, 7, 0x04)))
	// The same initiator through port 2 is registered too.
	good(t, out(p2, prOutCDB(prReserve, prExclusiveAccess), prOutParams(7, 0, 0)))
	good(t, in(f.s1, rw10(OpRead10, 0, 1, 0), testBS))
	if c := in(f.s2, rw10(OpRead10, 0, 1, 0), testBS); c.Status != StatusReservationConflict {
		t.Errorf("other initiator: %v", c.Status)
	}
	good(t, out(p2, prOutCDB(prClear, 0), prOutParams(7, 0, 0)))
}

func TestReserve6(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	reserve6 := []byte{OpReserve6, 0, 0, 0, 0, 0}
	release6 := []byte{OpRelease6, 0, 0, 0, 0, 0}
	good(t, none(f.s1, reserve6))
	good(t, none(f.s1, reserve6))
	if c := none(f.s2, reserve6); c.Status != StatusReservationConflict {
		t.Errorf("RESERVE from another nexus: %v", c.Status)
	}
	good(t, none(f.s2, release6)) // a no-op
	good(t, in(f.s1, modeSense6(false, 0, 0x3f, 0, 255), 255))
	if c := in(f.s2, modeSense6(false, 0, 0x3f, 0, 255), 255); c.Status != StatusReservationConflict {
		t.Errorf("MODE SENSE from another nexus: %v", c.Status)
	}
	good(t, in(f.s2, inquiry(false, 0, 36), 36))
	good(t, in(f.s2, reportLUNs(64), 64))
	// PR commands conflict while an SPC-2 reservation is held.
	if c := in(f.s1, prIn(0, 64), 64); c.Status != StatusReservationConflict {
		t.Errorf("PRIN under RESERVE: %v", c.Status)
	}
	good(t, none(f.s1, release6))
	good(t, none(f.s2, reserve6))
	good(t, none(f.s2, release6))
	// Released by a LUN reset, by session loss and by a target reset.
	good(t, none(f.s1, reserve6))
	if r := f.s1.TaskManagement(t.Context(), TMFLUNReset, 0, 0); r != TMFComplete {
		t.Fatal(r)
	}
	clearUA(t, f.s2, 0)
	good(t, none(f.s2, reserve6))
	good(t, none(f.s2, release6))
	s3 := f.session("iqn.x:three", 1)
	good(t, none(s3, reserve6))
	s3.Close()
	good(t, none(f.s2, reserve6))
	if r := f.s1.TaskManagement(t.Context(), TMFTargetColdReset, 0, 0); r != TMFComplete {
		t.Fatal(r)
	}
	clearUA(t, f.s1, 0)
	good(t, none(f.s1, reserve6))
	good(t, none(f.s1, release6))
	// RESERVE conflicts with registrations.
	registerIgnore(t, f.s1, 5)
	if c := none(f.s1, reserve6); c.Status != StatusReservationConflict {
		t.Errorf("RESERVE with a registration: %v", c.Status)
	}
	expectField(t, none(f.s1, []byte{OpReserve10, 0x10, 0, 0, 0, 0, 0, 0, 0, 0}), ASCInvalidFieldInCDB, 1)
}

func TestTransportIDs(t *testing.T) {
	t.Parallel()
	if diff := cmp.Diff(concat([]byte{0x05, 0, 0, 20}, []byte("iqn.a:b"), make([]byte, 13)), ISCSITransportID("iqn.a:b")); diff != "" {
		t.Errorf("format 00b (-want +got):\n%s", diff)
	}
	id := ISCSITransportID("iqn.2026-11.x:y,i,0x123456789abc")
	if id[0] != 0x45 || int(binary.BigEndian.Uint16(id[2:4])) != len(id)-4 || len(id)%4 != 0 || id[len(id)-1] != 0 {
		t.Errorf("format 01b: % x", id)
	}
	var port [16]byte
	port[0], port[15] = 0xfe, 0x01
	if diff := cmp.Diff(concat([]byte{0x04, 0, 0, 0, 0, 0, 0, 0}, port[:]), SRPTransportID(port)); diff != "" {
		t.Errorf("SRP (-want +got):\n%s", diff)
	}
}
