package scsi

import (
	"encoding/binary"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rdisk/rdisk/backstore"
)

func TestModeSenseGolden(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	caching := []byte{0x08, 0x12, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	control := []byte{0x0a, 0x0a, 0x02, 0x10, 0x00, 0x40, 0, 0, 0xff, 0xff, 0, 0}
	iec := []byte{0x1c, 0x0a, 0x00, 0x06, 0, 0, 0, 0, 0, 0, 0, 0}
	bd := []byte{0, 0, 0x10, 0, 0, 0, 0x02, 0}
	all := concat(caching, control, iec)
	c := in(f.s1, modeSense6(false, 0, 0x3f, 0, 255), 255)
	good(t, c)
	want := concat([]byte{byte(3 + 8 + len(all)), 0, 0x10, 8}, bd, all)
	if diff := cmp.Diff(want, data(c)); diff != "" {
		t.Errorf("MODE SENSE(6) all pages (-want +got):\n%s", diff)
	}
	c = in(f.s1, modeSense6(true, 0, 0x0a, 0, 255), 255)
	if diff := cmp.Diff(concat([]byte{15, 0, 0x10, 0}, control), data(c)); diff != "" {
		t.Errorf("MODE SENSE(6) control (-want +got):\n%s", diff)
	}
	c = in(f.s1, modeSense6(true, 1, 0x3f, 0, 255), 255)
	chg := concat(
		[]byte{0x08, 0x12, 0x04}, make([]byte, 17),
		[]byte{0x0a, 0x0a, 0x04, 0, 0x08, 0, 0, 0, 0, 0, 0, 0},
		[]byte{0x1c, 0x0a, 0x08, 0, 0, 0, 0, 0, 0, 0, 0, 0},
	)
	if diff := cmp.Diff(concat([]byte{byte(3 + len(chg)), 0, 0x10, 0}, chg), data(c)); diff != "" {
		t.Errorf("MODE SENSE(6) changeable (-want +got):\n%s", diff)
	}
	// MODE SENSE(10) with a long LBA block descriptor.
	c = in(f.s1, modeSense10(true, false, 0, 0x08, 255), 255)
	lbd := make([]byte, 16)
	binary.BigEndian.PutUint64(lbd, testBlocks)
	binary.BigEndian.PutUint32(lbd[12:], testBS)
	want = concat([]byte{0, byte(6 + 16 + 20), 0, 0x10, 0x01, 0, 0, 16}, lbd, caching)
	if diff := cmp.Diff(want, data(c)); diff != "" {
		t.Errorf("MODE SENSE(10) LLBAA (-want +got):\n%s", diff)
	}
	expect(t, in(f.s1, modeSense6(false, 3, 0x3f, 0, 255), 255), KeyIllegalRequest, ASCSavingParamsNotSupported)
	expectField(t, in(f.s1, modeSense6(false, 0, 0x19, 0, 255), 255), ASCInvalidFieldInCDB, 2)
	expectField(t, in(f.s1, modeSense6(false, 0, 0x08, 0x01, 255), 255), ASCInvalidFieldInCDB, 3)
	good(t, in(f.s1, modeSense6(false, 0, 0x3f, 0xff, 255), 255))
}

// controlPage returns the current control page of f's LU.
func controlPage(t *testing.T, s *Session) []byte {
	t.Helper()
	c := in(s, modeSense6(true, 0, 0x0a, 0, 255), 255)
	good(t, c)
	return data(c)[4:]
}

func TestModeSelectSWPAndDSense(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	page := controlPage(t, f.s1)
	page[4] |= 0x08 // SWP, as libiscsi's set_swp does
	param := concat([]byte{0, 0, 0, 0}, page)
	good(t, out(f.s1, modeSelect6(uint8(len(param))), param))
	if controlPage(t, f.s1)[4]&0x08 == 0 {
		t.Fatal("SWP not set")
	}
	good(t, in(f.s1, rw10(OpRead10, 0, 1, 0), testBS))
	expect(t, out(f.s1, rw10(OpWrite10, 0, 1, 0), make([]byte, testBS)), KeyDataProtect, ASCSoftwareWriteProtected)
	// The other nexus is told the mode parameters changed.
	expect(t, none(f.s2, tur()), KeyUnitAttention, ASCModeParametersChanged)
	// Clear SWP, set D_SENSE: sense data is now in descriptor format.
	page[4] &^= 0x08
	page[2] |= 0x04
	param = concat([]byte{0, 0, 0, 0}, page)
	good(t, out(f.s1, modeSelect6(uint8(len(param))), param))
	c := in(f.s1, rw16(OpRead16, ^uint64(0), 1, 0), testBS)
	expect(t, c, KeyIllegalRequest, ASCLBAOutOfRange)
	if c.Sense[0] != 0x72 {
		t.Errorf("sense format %02x, want 72h", c.Sense[0])
	}
	// A non-changeable field must not change.
	bad := concat([]byte{0, 0, 0, 0}, page)
	bad[4+5] = 0 // TAS
	c = out(f.s1, modeSelect6(uint8(len(bad))), bad)
	expect(t, c, KeyIllegalRequest, ASCInvalidFieldInParameterList)
	if cd, b, bit, _ := sense(t, c).FieldPointer(); cd || b != 9 || bit != 6 {
		t.Errorf("field pointer %v %d %d", cd, b, bit)
	}
	// A LUN reset restores the defaults.
	if r := f.s1.TaskManagement(t.Context(), TMFLUNReset, 0, 0); r != TMFComplete {
		t.Fatal(r)
	}
	clearUA(t, f.s1, 0)
	if controlPage(t, f.s1)[2]&0x04 != 0 {
		t.Error("D_SENSE survived a LUN reset")
	}
}

func TestModeSelectWCE(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	c := in(f.s1, modeSense10(false, false, 0, 0x08, 255), 255)
	good(t, c)
	param := make([]byte, 8+8+20)
	copy(param[8:], data(c)[8:])
	param[7] = 8     // block descriptor length
	param[8+8+2] = 0 // WCE off
	cdb := []byte{OpModeSelect10, 0x10, 0, 0, 0, 0, 0, 0, byte(len(param)), 0}
	good(t, out(f.s1, cdb, param))
	if f.lu.mode.Load()&modeWCE != 0 {
		t.Error("WCE still set")
	}
	if f.lu.writeFlags(0) != backstore.FUA {
		t.Error("writes are not FUA with WCE off")
	}
	// Default values still report WCE on.
	c = in(f.s1, modeSense6(true, 2, 0x08, 0, 255), 255)
	if data(c)[4+2]&0x04 == 0 {
		t.Error("default caching page lacks WCE")
	}
	// Parameter list errors.
	for _, tc := range []struct {
		cdb   []byte
		param []byte
		asc   ASC
	}{
		{modeSelect6(3), []byte{0, 0, 0}, ASCParameterListLengthError},
		{modeSelect6(12), concat([]byte{0, 0, 0, 8}, make([]byte, 8)), ASCInvalidFieldInParameterList}, // block length 0
		{modeSelect6(8), []byte{0, 0, 0, 0, 0x19, 2, 0, 0}, ASCInvalidFieldInParameterList},            // unknown page
		{modeSelect6(8), []byte{0, 0, 0, 0, 0x0a, 2, 0, 0}, ASCInvalidFieldInParameterList},            // wrong length
		{modeSelect6(6), []byte{0, 0, 0, 0, 0x0a, 0x0a}, ASCParameterListLengthError},                  // truncated page
		{modeSelect6(8), []byte{0, 0, 0, 5, 0, 0, 0, 0}, ASCInvalidFieldInParameterList},               // descriptor length
		{modeSelect6(8), []byte{0, 0, 0, 0, 0x48, 0, 0, 0}, ASCInvalidFieldInParameterList},            // subpage format
	} {
		expect(t, out(f.s1, tc.cdb, tc.param), KeyIllegalRequest, tc.asc)
	}
	// A matching block descriptor is accepted.
	bd := concat([]byte{0, 0, 0, 8}, []byte{0, 0, 0, 0, 0, 0, 0x02, 0})
	good(t, out(f.s1, modeSelect6(12), bd))
	expectField(t, out(f.s1, []byte{OpModeSelect6, 0x11, 0, 0, 4, 0}, []byte{0, 0, 0, 0}), ASCInvalidFieldInCDB, 1)
	expectField(t, out(f.s1, []byte{OpModeSelect6, 0x00, 0, 0, 4, 0}, []byte{0, 0, 0, 0}), ASCInvalidFieldInCDB, 1)
	good(t, none(f.s1, modeSelect6(0)))
}

// healthDisk is a RAM disk with a configurable health report.
type healthDisk struct {
	*backstore.Mem
	h backstore.Health
}

func (d *healthDisk) Health() (backstore.Health, error) { return d.h, nil }

func logSense(page uint8, alloc uint16) []byte {
	b := []byte{OpLogSense, 0, 0x40 | page, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(b[7:9], alloc)
	return b
}

func TestLogSense(t *testing.T) {
	t.Parallel()
	d := &healthDisk{Mem: newMem(t, 64, 512), h: backstore.Health{
		Supported: true, Valid: backstore.FieldTemperature | backstore.FieldCriticalWarning, Temperature: 41, CriticalWarning: backstore.WarnSpare,
	}}
	f := newFixture(t, d, LUConfig{})
	for _, tc := range []struct {
		page uint8
		want []byte
	}{
		{0x00, []byte{0x00, 0, 0, 3, 0x00, 0x0d, 0x2f}},
		{0x0d, []byte{0x0d, 0, 0, 12, 0, 0, 3, 2, 0, 41, 0, 1, 3, 2, 0, 0xff}},
		{0x2f, []byte{0x2f, 0, 0, 7, 0, 0, 3, 3, 0x5d, 0x00, 41}},
	} {
		c := in(f.s1, logSense(tc.page, 255), 255)
		good(t, c)
		if diff := cmp.Diff(tc.want, data(c)); diff != "" {
			t.Errorf("LOG SENSE %02xh (-want +got):\n%s", tc.page, diff)
		}
	}
	expectField(t, in(f.s1, logSense(0x33, 255), 255), ASCInvalidFieldInCDB, 2)
	// REQUEST SENSE reports the informational exception (MRIE 6h).
	c := in(f.s1, []byte{OpRequestSense, 0, 0, 0, 252, 0}, 252)
	good(t, c)
	if s, _ := ParseSense(data(c)); s.Key != KeyNoSense || s.ASC != ASCFailurePredictionThreshold {
		t.Errorf("REQUEST SENSE: %v %v", s.Key, s.ASC)
	}
	// Without health data the temperature is unknown.
	g := newFixture(t, backstore.NewNull(1<<20, 512), LUConfig{})
	c = in(g.s1, logSense(0x0d, 255), 255)
	if data(c)[9] != 0xff {
		t.Errorf("unknown temperature reported as %d", data(c)[9])
	}
}

func TestUnitAttentions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	s := f.session("iqn.x:fresh", 1)
	// newFixture's session() clears them; open a raw one.
	raw, err := f.tgt.NewSession(SessionConfig{InitiatorPort: "iqn.x:raw"})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := f.tgt.NewSession(SessionConfig{InitiatorPort: "iqn.x:raw"}); err == nil {
		t.Error("duplicate session accepted")
	}
	// INQUIRY does not report it; REQUEST SENSE returns and clears it.
	good(t, in(raw, inquiry(false, 0, 36), 36))
	c := in(raw, []byte{OpRequestSense, 0x01, 0, 0, 252, 0}, 252)
	good(t, c)
	if sd, _ := ParseSense(data(c)); !sd.Descriptor || sd.Key != KeyUnitAttention || sd.ASC != ASCPowerOnReset {
		t.Errorf("REQUEST SENSE: %+v", sd)
	}
	good(t, none(raw, tur()))
	// Capacity change.
	f.lu.CapacityChanged() // unchanged: no UA
	good(t, none(s, tur()))
	// LUN reset: every nexus, the issuer included.
	if r := s.TaskManagement(t.Context(), TMFLUNReset, 0, 0); r != TMFComplete {
		t.Fatal(r)
	}
	expect(t, none(s, tur()), KeyUnitAttention, ASCBusDeviceResetOccurred)
	expect(t, none(raw, tur()), KeyUnitAttention, ASCBusDeviceResetOccurred)
	good(t, none(raw, tur()))
	// Target reset: POWER ON, RESET.
	if r := s.TaskManagement(t.Context(), TMFTargetWarmReset, 0, 0); r != TMFComplete {
		t.Fatal(r)
	}
	expect(t, none(raw, tur()), KeyUnitAttention, ASCPowerOnReset)
	good(t, none(raw, tur()))
	// I_T nexus reset: only that nexus.
	if r := raw.TaskManagement(t.Context(), TMFITNexusReset, 0, 0); r != TMFComplete {
		t.Fatal(r)
	}
	expect(t, none(raw, tur()), KeyUnitAttention, ASCITNexusLossOccurred)
	expect(t, none(s, tur()), KeyUnitAttention, ASCPowerOnReset)
	good(t, none(s, tur()))
	if r := s.TaskManagement(t.Context(), TMFClearACA, 0, 0); r != TMFRejected {
		t.Errorf("CLEAR ACA: %v", r)
	}
	if r := s.TaskManagement(t.Context(), TMFAbortTaskSet, 5, 0); r != TMFIncorrectLUN {
		t.Errorf("TMF to an unmapped LUN: %v", r)
	}
}

func TestCapacityChanged(t *testing.T) {
	t.Parallel()
	d := &resizable{Mem: newMem(t, 128, 512), size: 64 * 512}
	f := newFixture(t, d, LUConfig{})
	d.size = 128 * 512
	f.lu.CapacityChanged()
	expect(t, none(f.s1, tur()), KeyUnitAttention, ASCCapacityDataChanged)
	c := in(f.s1, rw10(OpReadCapacity10, 0, 0, 0), 8)
	if binary.BigEndian.Uint32(data(c)) != 127 {
		t.Errorf("capacity after resize: % x", data(c))
	}
}

type resizable struct {
	*backstore.Mem
	size int64
}

func (r *resizable) Size() int64 { return r.size }

func TestStartStopPreventAllow(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	good(t, none(f.s1, []byte{OpStartStopUnit, 1, 0, 0, 0x01, 0}))
	good(t, none(f.s1, []byte{OpStartStopUnit, 0, 0, 0, 0x00, 0}))
	good(t, none(f.s1, []byte{OpStartStopUnit, 0, 0, 0, 0x04, 0}))
	good(t, none(f.s1, tur()))
	// LOEJ: the medium is not removable.
	expectField(t, none(f.s1, []byte{OpStartStopUnit, 1, 0, 0, 0x02, 0}), ASCInvalidFieldInCDB, 4)
	expectField(t, none(f.s1, []byte{OpStartStopUnit, 1, 0, 0, 0x30, 0}), ASCInvalidFieldInCDB, 4)
	good(t, none(f.s1, []byte{OpPreventAllow, 0, 0, 0, 1, 0}))
	good(t, none(f.s1, []byte{OpPreventAllow, 0, 0, 0, 0, 0}))
}
