package scsi

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rdisk/rdisk/backstore"
)

func rtpg(ext bool, alloc uint32) []byte {
	b := []byte{OpMaintenanceIn, SAReportTargetPortGroup, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	if ext {
		b[1] |= 0x20
	}
	binary.BigEndian.PutUint32(b[6:10], alloc)
	return b
}

// aluaFixture is a target with three port groups: 1 (active/optimized,
// port 1), 2 (standby, ports 2 and 3) and 7 (unavailable, port 9, another
// gateway's), and sessions through ports 1 and 2.
func aluaFixture(t *testing.T, cfg LUConfig) (f *fixture, p2 *Session) {
	t.Helper()
	if cfg.Serial == "" {
		cfg.Serial = "ALUA0001"
	}
	lu, err := NewLU(newMem(t, testBlocks, testBS), cfg)
	if err != nil {
		t.Fatal(err)
	}
	tgt := NewTarget(TargetConfig{Name: "iqn.2026-11.io.rdisk:alua", PortGroups: []PortGroupConfig{
		{ID: 7, State: ALUAUnavailable, Ports: []uint16{9}},
		{ID: 1, State: ALUAActiveOptimized, Ports: []uint16{1}, ImplicitTransitionSecs: 30},
		{ID: 2, State: ALUAStandby, Ports: []uint16{3, 2}, ImplicitTransitionSecs: 5},
	}})
	if err := tgt.Map(0, lu); err != nil {
		t.Fatal(err)
	}
	f = &fixture{t: t, tgt: tgt, lu: lu, disk: lu.Disk()}
	f.s1 = f.session("iqn.2026-11.io.rdisk:init1,i,0x000000000001", 1)
	s, err := tgt.NewSession(SessionConfig{InitiatorPort: "iqn.2026-11.io.rdisk:init1,i,0x000000000001", ProtocolID: ProtocolISCSI, RelativeTargetPort: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	// Clear the power-on UA through INQUIRY-free means: REQUEST SENSE is
	// allowed in standby and returns it.
	c := in(s, []byte{OpRequestSense, 0, 0, 0, 252, 0}, 252)
	good(t, c)
	return f, s
}

func TestReportTPGGroups(t *testing.T) {
	t.Parallel()
	f, p2 := aluaFixture(t, LUConfig{})
	desc := concat(
		[]byte{0x00, 0xcf, 0, 1, 0, 0x00, 0, 1}, []byte{0, 0, 0, 1},
		[]byte{0x02, 0xcf, 0, 2, 0, 0x00, 0, 2}, []byte{0, 0, 0, 2, 0, 0, 0, 3},
		[]byte{0x03, 0xcf, 0, 7, 0, 0x00, 0, 1}, []byte{0, 0, 0, 9},
	)
	// Length header format (SPC-5 table 161): RETURN DATA LENGTH n-3.
	want := concat([]byte{0, 0, 0, byte(len(desc))}, desc)
	c := in(f.s1, rtpg(false, 1024), 1024)
	good(t, c)
	if diff := cmp.Diff(want, data(c)); diff != "" {
		t.Errorf("RTPG (-want +got):\n%s", diff)
	}
	// Extended header (table 162): format type 001b and the implicit
	// transition time of the session's group (30 s via port 1, 5 via 2).
	for _, tc := range []struct {
		s    *Session
		secs byte
	}{{f.s1, 30}, {p2, 5}} {
		want := concat([]byte{0, 0, 0, byte(len(desc) + 4), 0x10, tc.secs, 0, 0}, desc)
		c = in(tc.s, rtpg(true, 1024), 1024)
		good(t, c)
		if diff := cmp.Diff(want, data(c)); diff != "" {
			t.Errorf("RTPG extended via port %d (-want +got):\n%s", tc.s.cfg.RelativeTargetPort, diff)
		}
	}
	// A truncated answer keeps the full length in the header.
	c = in(f.s1, rtpg(false, 6), 6)
	good(t, c)
	if diff := cmp.Diff(want[:6], data(c)); diff != "" {
		t.Errorf("RTPG truncated (-want +got):\n%s", diff)
	}
	// Reserved parameter data formats are refused.
	c = in(f.s1, []byte{OpMaintenanceIn, SAReportTargetPortGroup | 0x40, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0}, 1024)
	expectField(t, c, ASCInvalidFieldInCDB, 1)

	// An implicit transition: new state, status code 02h.
	if err := f.tgt.SetPortGroupState(2, ALUAActiveNonOptimized); err != nil {
		t.Fatal(err)
	}
	clearUA(t, f.s1, 0)
	c = in(f.s1, rtpg(false, 1024), 1024)
	good(t, c)
	g2 := data(c)[4+12 : 4+12+8]
	if diff := cmp.Diff([]byte{0x01, 0xcf, 0, 2, 0, 0x02, 0, 2}, g2); diff != "" {
		t.Errorf("group 2 after the transition (-want +got):\n%s", diff)
	}
	got := f.tgt.PortGroups()
	wantCfg := []PortGroupConfig{
		{ID: 1, State: ALUAActiveOptimized, Ports: []uint16{1}, ImplicitTransitionSecs: 30},
		{ID: 2, State: ALUAActiveNonOptimized, Ports: []uint16{2, 3}, ImplicitTransitionSecs: 5},
		{ID: 7, State: ALUAUnavailable, Ports: []uint16{9}},
	}
	if diff := cmp.Diff(wantCfg, got); diff != "" {
		t.Errorf("PortGroups (-want +got):\n%s", diff)
	}
}

func TestReportTPGDefaultGroup(t *testing.T) {
	t.Parallel()
	// Ports no group lists are in TargetConfig.PortGroup, here an
	// implicit active/optimized group 4 beside the configured group 9.
	lu, err := NewLU(newMem(t, testBlocks, testBS), LUConfig{Serial: "DEF1"})
	if err != nil {
		t.Fatal(err)
	}
	tgt := NewTarget(TargetConfig{Name: "iqn.2026-11.io.rdisk:def", PortGroup: 4, PortGroups: []PortGroupConfig{{ID: 9, State: ALUAStandby, Ports: []uint16{2}}}})
	if err := tgt.Map(0, lu); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, tgt: tgt, lu: lu}
	f.s1 = f.session("iqn.2026-11.io.rdisk:i,i,0x1", 5)
	c := in(f.s1, rtpg(false, 1024), 1024)
	good(t, c)
	want := []byte{0, 0, 0, 24, 0x00, 0xcf, 0, 4, 0, 0, 0, 1, 0, 0, 0, 5, 0x02, 0xcf, 0, 9, 0, 0, 0, 1, 0, 0, 0, 2}
	if diff := cmp.Diff(want, data(c)); diff != "" {
		t.Errorf("RTPG (-want +got):\n%s", diff)
	}
	// The implicit group's state can be set too.
	if err := tgt.SetPortGroupState(4, ALUAUnavailable); err != nil {
		t.Fatal(err)
	}
	expect(t, none(f.s1, tur()), KeyUnitAttention, ASCAsymmetricAccessChanged)
	expect(t, none(f.s1, tur()), KeyNotReady, ASCALUAUnavailable)
	if err := tgt.SetPortGroupState(5, ALUAStandby); !errors.Is(err, ErrPortGroup) {
		t.Errorf("unknown group: %v", err)
	}
	if err := tgt.SetPortGroupState(4, ALUAState(4)); !errors.Is(err, ErrALUAState) {
		t.Errorf("LBA dependent: %v", err)
	}
}

func TestVPDPortDesignators(t *testing.T) {
	t.Parallel()
	f, p2 := aluaFixture(t, LUConfig{})
	for _, tc := range []struct {
		s         *Session
		port, grp uint16
	}{{f.s1, 1, 1}, {p2, 2, 2}} {
		c := in(tc.s, inquiry(true, 0x83, 255), 255)
		good(t, c)
		var rp, tpg []byte
		b := data(c)[4:]
		for len(b) >= 4 {
			n := 4 + int(b[3])
			switch b[1] & 0x3f {
			case 0x14: // association target port, type 4
				rp = b[:n]
			case 0x15:
				tpg = b[:n]
			}
			b = b[n:]
		}
		if diff := cmp.Diff([]byte{0x51, 0x94, 0, 4, 0, 0, byte(tc.port >> 8), byte(tc.port)}, rp); diff != "" {
			t.Errorf("relative target port designator via %d (-want +got):\n%s", tc.port, diff)
		}
		if diff := cmp.Diff([]byte{0x51, 0x95, 0, 4, 0, 0, byte(tc.grp >> 8), byte(tc.grp)}, tpg); diff != "" {
			t.Errorf("target port group designator via %d (-want +got):\n%s", tc.port, diff)
		}
	}
}

func TestStandardInquiryTPGS(t *testing.T) {
	t.Parallel()
	f, _ := aluaFixture(t, LUConfig{})
	c := in(f.s1, inquiry(false, 0, 96), 96)
	good(t, c)
	if got := data(c)[5] >> 4 & 3; got != 1 {
		t.Errorf("TPGS %02b, want 01b (implicit only)", got)
	}
	// SET TARGET PORT GROUPS: implicit ALUA only, as LIO without
	// TPGS_EXPLICIT_ALUA.
	stpg := []byte{OpMaintenanceOut, saSetTargetPorts, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0}
	expect(t, out(f.s1, stpg, make([]byte, 8)), KeyIllegalRequest, ASCInvalidCommandOpcode)
}

func TestALUAStateFilters(t *testing.T) {
	t.Parallel()
	type cmd struct {
		name string
		cdb  []byte
		dir  Dir
		n    int
	}
	cmds := map[string]cmd{
		"INQUIRY":        {"INQUIRY", inquiry(false, 0, 96), DirIn, 96},
		"REPORT LUNS":    {"REPORT LUNS", reportLUNs(64), DirIn, 64},
		"REQUEST SENSE":  {"REQUEST SENSE", []byte{OpRequestSense, 0, 0, 0, 252, 0}, DirIn, 252},
		"RTPG":           {"RTPG", rtpg(false, 256), DirIn, 256},
		"READ CAPACITY":  {"READ CAPACITY(10)", []byte{OpReadCapacity10, 0, 0, 0, 0, 0, 0, 0, 0, 0}, DirIn, 8},
		"RC16":           {"READ CAPACITY(16)", rc16(32), DirIn, 32},
		"MODE SENSE(6)":  {"MODE SENSE(6)", modeSense6(false, 0, 0x3f, 0, 255), DirIn, 255},
		"MODE SENSE(10)": {"MODE SENSE(10)", modeSense10(false, false, 0, 0x3f, 255), DirIn, 255},
		"LOG SENSE":      {"LOG SENSE", []byte{OpLogSense, 0, 0, 0, 0, 0, 0, 0, 255, 0}, DirIn, 255},
		"PR IN":          {"PERSISTENT RESERVE IN", prIn(0, 64), DirIn, 64},
		"TUR":            {"TEST UNIT READY", tur(), DirNone, 0},
		"READ(10)":       {"READ(10)", rw10(OpRead10, 0, 1, 0), DirIn, 512},
		"WRITE(10)":      {"WRITE(10)", rw10(OpWrite10, 0, 1, 0), DirOut, 512},
		"SYNC CACHE":     {"SYNCHRONIZE CACHE(10)", rw10(OpSyncCache10, 0, 0, 0), DirNone, 0},
		"RSOC":           {"REPORT SUPPORTED OPERATION CODES", rsoc(false, 0, 0, 0, 4096), DirIn, 4096},
		"GET LBA STATUS": {"GET LBA STATUS", getLBAStatus(0, 64), DirIn, 64},
		"unknown":        {"an unknown opcode", []byte{0xc0, 0, 0, 0, 0, 0}, DirNone, 0},
	}
	all := []string{"INQUIRY", "REPORT LUNS", "REQUEST SENSE", "RTPG", "READ CAPACITY", "RC16", "MODE SENSE(6)", "MODE SENSE(10)", "LOG SENSE", "PR IN", "TUR", "READ(10)", "WRITE(10)", "SYNC CACHE", "RSOC", "GET LBA STATUS", "unknown"}
	for _, tc := range []struct {
		state   ALUAState
		asc     ASC
		allowed []string
	}{
		{ALUAActiveOptimized, 0, all[:len(all)-1]},
		{ALUAActiveNonOptimized, 0, all[:len(all)-1]},
		{ALUAStandby, ASCALUAStandby, []string{"INQUIRY", "REPORT LUNS", "REQUEST SENSE", "RTPG", "READ CAPACITY", "RC16", "MODE SENSE(6)", "MODE SENSE(10)", "LOG SENSE", "PR IN"}},
		{ALUAUnavailable, ASCALUAUnavailable, []string{"INQUIRY", "REPORT LUNS", "REQUEST SENSE", "RTPG"}},
		{ALUATransitioning, ASCALUATransition, []string{"INQUIRY", "REPORT LUNS", "REQUEST SENSE", "RTPG"}},
		{ALUAOffline, ASCALUAOffline, nil},
	} {
		t.Run(tc.state.String(), func(t *testing.T) {
			t.Parallel()
			f, p2 := aluaFixture(t, LUConfig{})
			if err := f.tgt.SetPortGroupState(2, tc.state); err != nil {
				t.Fatal(err)
			}
			if tc.state != ALUAStandby {
				// The change is reported first (INQUIRY, REPORT LUNS
				// and REQUEST SENSE do not report unit attentions).
				expect(t, run(p2, 0, rtpg(false, 256), DirIn, 256, nil), KeyUnitAttention, ASCAsymmetricAccessChanged)
			}
			ok := map[string]bool{}
			for _, n := range tc.allowed {
				ok[n] = true
			}
			for _, n := range all {
				cd := cmds[n]
				var dout []byte
				if cd.dir == DirOut {
					dout = make([]byte, cd.n)
				}
				c := run(p2, 0, cd.cdb, cd.dir, cd.n, dout)
				switch {
				case n == "unknown" && tc.asc == 0:
					expect(t, c, KeyIllegalRequest, ASCInvalidCommandOpcode)
				case ok[n]:
					if c.Status != StatusGood {
						t.Errorf("%s in %s: %v %s, want GOOD", cd.name, tc.state, c.Status, describe(c))
					}
				default:
					if c.Status != StatusCheckCondition {
						t.Errorf("%s in %s: %v, want CHECK CONDITION", cd.name, tc.state, c.Status)
						continue
					}
					if s := sense(t, c); s.Key != KeyNotReady || s.ASC != tc.asc {
						t.Errorf("%s in %s: %v %v, want NOT READY %v", cd.name, tc.state, s.Key, s.ASC, tc.asc)
					}
				}
			}
			// The other group's port is not affected.
			clearUA(t, f.s1, 0)
			good(t, in(f.s1, rw10(OpRead10, 0, 1, 0), 512))
		})
	}
}

func TestALUAChangeUA(t *testing.T) {
	t.Parallel()
	f, p2 := aluaFixture(t, LUConfig{})
	s3 := f.session("iqn.2026-11.io.rdisk:init3,i,0x3", 1)
	if err := f.tgt.SetPortGroupState(2, ALUAActiveOptimized); err != nil {
		t.Fatal(err)
	}
	// Every nexus of the target, whatever its group, gets 2Ah/06h once.
	for _, s := range []*Session{f.s1, p2, s3} {
		expect(t, none(s, tur()), KeyUnitAttention, ASCAsymmetricAccessChanged)
		good(t, none(s, tur()))
	}
	good(t, in(p2, rw10(OpRead10, 0, 1, 0), 512))
	if p2.ALUAState() != ALUAActiveOptimized || f.s1.ALUAState() != ALUAActiveOptimized {
		t.Errorf("session states %v %v", p2.ALUAState(), f.s1.ALUAState())
	}
	// Setting the same state again establishes nothing.
	if err := f.tgt.SetPortGroupState(2, ALUAActiveOptimized); err != nil {
		t.Fatal(err)
	}
	good(t, none(p2, tur()))
	// REQUEST SENSE returns (and clears) the condition.
	if err := f.tgt.SetPortGroupState(1, ALUAActiveNonOptimized); err != nil {
		t.Fatal(err)
	}
	c := in(f.s1, []byte{OpRequestSense, 0, 0, 0, 252, 0}, 252)
	good(t, c)
	if s, err := ParseSense(data(c)); err != nil || s.Key != KeyUnitAttention || s.ASC != ASCAsymmetricAccessChanged {
		t.Errorf("REQUEST SENSE: %+v %v", s, err)
	}
	good(t, none(f.s1, tur()))
}

func TestPortGroupAddRemove(t *testing.T) {
	t.Parallel()
	f, p2 := aluaFixture(t, LUConfig{})
	if err := f.tgt.AddPortGroup(PortGroupConfig{ID: 2, Ports: []uint16{4}}); !errors.Is(err, ErrPortGroup) {
		t.Errorf("duplicate ID: %v", err)
	}
	if err := f.tgt.AddPortGroup(PortGroupConfig{ID: 3, Ports: []uint16{2}}); !errors.Is(err, ErrPortGroup) {
		t.Errorf("port in two groups: %v", err)
	}
	// Group 2 (standby) goes: its ports join the default group 1.
	if err := f.tgt.RemovePortGroup(2); err != nil {
		t.Fatal(err)
	}
	expect(t, none(p2, tur()), KeyUnitAttention, ASCAsymmetricAccessChanged)
	good(t, none(p2, tur()))
	if err := f.tgt.RemovePortGroup(2); !errors.Is(err, ErrPortGroup) {
		t.Errorf("removed twice: %v", err)
	}
	if err := f.tgt.AddPortGroup(PortGroupConfig{ID: 5, State: ALUAStandby, Ports: []uint16{2}}); err != nil {
		t.Fatal(err)
	}
	expect(t, none(p2, tur()), KeyUnitAttention, ASCAsymmetricAccessChanged)
	expect(t, none(p2, tur()), KeyNotReady, ASCALUAStandby)
	c := in(p2, inquiry(true, 0x83, 255), 255)
	good(t, c)
	if !containsBytes(data(c), []byte{0x51, 0x95, 0, 4, 0, 0, 0, 5}) {
		t.Errorf("VPD 83h does not name group 5: % x", data(c))
	}
}

func containsBytes(b, sub []byte) bool {
	for i := 0; i+len(sub) <= len(b); i++ {
		if string(b[i:i+len(sub)]) == string(sub) {
			return true
		}
	}
	return false
}

func TestValidatePortGroups(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		g   []PortGroupConfig
		err error
	}{
		{[]PortGroupConfig{{ID: 1, Ports: []uint16{1}}, {ID: 2, State: ALUAStandby, Ports: []uint16{2}}}, nil},
		{[]PortGroupConfig{{ID: 0}}, ErrPortGroup},
		{[]PortGroupConfig{{ID: 1, Ports: []uint16{0}}}, ErrPortGroup},
		{[]PortGroupConfig{{ID: 1, Ports: []uint16{3, 3}}}, ErrPortGroup},
		{[]PortGroupConfig{{ID: 1}, {ID: 1}}, ErrPortGroup},
		{[]PortGroupConfig{{ID: 1, Ports: []uint16{1}}, {ID: 2, Ports: []uint16{1}}}, ErrPortGroup},
		{[]PortGroupConfig{{ID: 1, State: 4}}, ErrALUAState},
		{[]PortGroupConfig{{ID: 1, State: 0x9}}, ErrALUAState},
	} {
		if err := ValidatePortGroups(tc.g); !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("%+v: %v, want %v", tc.g, err, tc.err)
		}
	}
}

func TestParseALUAState(t *testing.T) {
	t.Parallel()
	for word, want := range map[string]ALUAState{
		"active-optimized": ALUAActiveOptimized, "optimized": ALUAActiveOptimized,
		"active-non-optimized": ALUAActiveNonOptimized, "Non-Optimized": ALUAActiveNonOptimized,
		"standby":     ALUAStandby,
		"unavailable": ALUAUnavailable, "inaccessible": ALUAUnavailable,
		"offline": ALUAOffline, "persistent-loss": ALUAOffline,
		"transitioning": ALUATransitioning, "change": ALUATransitioning,
	} {
		got, err := ParseALUAState(word)
		if err != nil || got != want {
			t.Errorf("%q: %v %v, want %v", word, got, err, want)
		}
		if back, err := ParseALUAState(got.String()); err != nil || back != got {
			t.Errorf("%v does not round-trip: %v %v", got, back, err)
		}
	}
	if _, err := ParseALUAState("lba-dependent"); !errors.Is(err, ErrALUAState) {
		t.Errorf("lba-dependent: %v", err)
	}
}

func TestNoReservations(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{NoReservations: true})
	for _, cdb := range [][]byte{
		prIn(0, 64),
		{OpReserve6, 0, 0, 0, 0, 0},
		{OpRelease6, 0, 0, 0, 0, 0},
		{OpReserve10, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		{OpRelease10, 0, 0, 0, 0, 0, 0, 0, 0, 0},
	} {
		expect(t, in(f.s1, cdb, 64), KeyIllegalRequest, ASCInvalidCommandOpcode)
	}
	expect(t, out(f.s1, prOutCDB(0, 0), prOutParams(0, 1, 0)), KeyIllegalRequest, ASCInvalidCommandOpcode)
	c := in(f.s1, rsoc(false, 0, 0, 0, 8192), 8192)
	good(t, c)
	for p := data(c)[4:]; len(p) >= 8; p = p[8:] {
		switch p[0] {
		case OpReserve6, OpRelease6, OpReserve10, OpRelease10, OpPersistentReserveIn, OpPersistentReserveOut:
			t.Errorf("REPORT SUPPORTED OPERATION CODES lists %02xh", p[0])
		}
	}
	c = in(f.s1, rsoc(false, 1, OpReserve6, 0, 64), 64)
	good(t, c)
	if data(c)[1]&7 != 1 {
		t.Errorf("RESERVE(6) reported as % x, want not supported", data(c))
	}
	// Reads and writes are unaffected.
	good(t, out(f.s1, rw10(OpWrite10, 0, 1, 0), make([]byte, 512)))
}

func TestBackstoreNetworkErrors(t *testing.T) {
	t.Parallel()
	mem := newMem(t, 64, 512)
	for _, tc := range []struct {
		err    error
		status Status
		key    SenseKey
		asc    ASC
	}{
		{backstore.ErrNoSpace, StatusCheckCondition, KeyDataProtect, ASCSpaceAllocationFailedWP},
		{backstore.ErrFenced, StatusCheckCondition, KeyNotReady, ASCALUAUnavailable},
		{backstore.ErrTimeout, StatusBusy, 0, 0},
		{errors.Join(errors.New("rbd write"), backstore.ErrTimeout), StatusBusy, 0, 0},
	} {
		f := newFixture(t, errDisk{mem, tc.err}, LUConfig{})
		for _, c := range []*Command{
			in(f.s1, rw10(OpRead10, 5, 1, 0), 512),
			out(f.s1, rw10(OpWrite10, 5, 1, 0), make([]byte, 512)),
			none(f.s1, rw10(OpSyncCache10, 0, 0, 0)),
		} {
			if tc.status == StatusBusy {
				if c.Status != StatusBusy || c.SenseLen != 0 {
					t.Errorf("%v: %v sense %d, want BUSY without sense", tc.err, c.Status, c.SenseLen)
				}
				continue
			}
			expect(t, c, tc.key, tc.asc)
		}
	}
}
