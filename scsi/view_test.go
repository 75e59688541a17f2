package scsi

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// viewFixture is a target with LUs at LUNs 0, 3 and 7 and helpers to open
// sessions with views on it.
type viewFixture struct {
	*fixture
	lu3, lu7 *LU
}

func newViewFixture(t *testing.T) *viewFixture {
	t.Helper()
	f := &viewFixture{fixture: newFixture(t, nil, LUConfig{})}
	for _, x := range []struct {
		lun uint64
		dst **LU
	}{{3, &f.lu3}, {7, &f.lu7}} {
		lu, err := NewLU(newMem(t, testBlocks, testBS), LUConfig{Serial: "VIEWLU" + string(rune('0'+x.lun))})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.tgt.Map(x.lun, lu); err != nil {
			t.Fatal(err)
		}
		*x.dst = lu
	}
	for _, lun := range []uint64{0, 3, 7} {
		clearUA(t, f.s1, lun)
		clearUA(t, f.s2, lun)
	}
	return f
}

// viewSession opens a session that sees mappings, with its unit attentions
// cleared on every LUN it sees.
func (f *viewFixture) viewSession(t *testing.T, name string, mappings ...LUNMapping) *Session {
	t.Helper()
	v, err := NewLUNView(mappings)
	if err != nil {
		t.Fatal(err)
	}
	s, err := f.tgt.NewSession(SessionConfig{InitiatorPort: name, ProtocolID: ProtocolISCSI, RelativeTargetPort: 1, View: v})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	for _, l := range reportedLUNs(t, s) {
		clearUA(t, s, l)
	}
	return s
}

// reportedLUNs returns the LUNs REPORT LUNS lists to s.
func reportedLUNs(t testing.TB, s *Session) []uint64 {
	t.Helper()
	c := run(s, 0, reportLUNs(4096), DirIn, 4096, nil)
	good(t, c)
	d := data(c)
	if n := binary.BigEndian.Uint32(d[0:4]); int(n) != len(d)-8 {
		t.Fatalf("REPORT LUNS list length %d for %d bytes", n, len(d))
	}
	out := []uint64{}
	for p := d[8:]; len(p) >= 8; p = p[8:] {
		l, err := DecodeLUN([8]byte(p[:8]))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

func TestNewLUNView(t *testing.T) {
	t.Parallel()
	if _, err := NewLUNView([]LUNMapping{{MappedLUN: 1, LUN: 0}, {MappedLUN: 1, LUN: 3}}); !errors.Is(err, ErrLUNInUse) {
		t.Errorf("duplicate mapped LUN: %v", err)
	}
	if _, err := NewLUNView([]LUNMapping{{MappedLUN: MaxLUN + 1}}); !errors.Is(err, ErrLUNRange) {
		t.Errorf("mapped LUN out of range: %v", err)
	}
	if _, err := NewLUNView([]LUNMapping{{LUN: MaxLUN + 1}}); !errors.Is(err, ErrLUNRange) {
		t.Errorf("target LUN out of range: %v", err)
	}
	in := []LUNMapping{{MappedLUN: 9, LUN: 0, ReadOnly: true}, {MappedLUN: 2, LUN: 0}}
	v, err := NewLUNView(in)
	if err != nil {
		t.Fatal(err)
	}
	in[0].LUN = 5 // the view keeps its own copy
	want := []LUNMapping{{MappedLUN: 2, LUN: 0}, {MappedLUN: 9, LUN: 0, ReadOnly: true}}
	if got := v.Mappings(); !cmp.Equal(got, want) {
		t.Errorf("Mappings %v, want %v", got, want)
	}
}

// TestViewReportLUNs: a session with a view sees its mapped LUNs under the
// mapped numbers; other LUNs, the target's own numbers included, do not
// exist for it. A session without a view sees the whole map.
func TestViewReportLUNs(t *testing.T) {
	t.Parallel()
	f := newViewFixture(t)
	a := f.viewSession(t, "initA,i,0x1", LUNMapping{MappedLUN: 0, LUN: 7}, LUNMapping{MappedLUN: 5, LUN: 0},
		LUNMapping{MappedLUN: 6, LUN: 11}) // LUN 11 is not mapped: invisible
	if got := reportedLUNs(t, a); !cmp.Equal(got, []uint64{0, 5}) {
		t.Errorf("REPORT LUNS with a view: %v, want [0 5]", got)
	}
	if got := reportedLUNs(t, f.s1); !cmp.Equal(got, []uint64{0, 3, 7}) {
		t.Errorf("REPORT LUNS without a view: %v, want [0 3 7]", got)
	}
	// Mapped LUN 0 is the target's LUN 7.
	c := run(a, 0, inquiry(true, 0x80, 255), DirIn, 255, nil)
	good(t, c)
	if got := string(data(c)[4:]); got != "VIEWLU7" {
		t.Errorf("unit serial number of mapped LUN 0: %q", got)
	}
	for _, lun := range []uint64{3, 6, 7} {
		expect(t, run(a, lun, tur(), DirNone, 0, nil), KeyIllegalRequest, ASCLUNotSupported)
		expect(t, run(a, lun, rw10(OpRead10, 0, 1, 0), DirIn, testBS, nil), KeyIllegalRequest, ASCLUNotSupported)
		c := run(a, lun, inquiry(false, 0, 36), DirIn, 36, nil)
		good(t, c)
		if data(c)[0] != 0x7f {
			t.Errorf("INQUIRY of unmapped LUN %d: peripheral byte %#x, want 7f", lun, data(c)[0])
		}
		if r := a.TaskManagement(context.Background(), TMFLUNReset, lun, 0); r != TMFIncorrectLUN {
			t.Errorf("LUN RESET of unmapped LUN %d: %v", lun, r)
		}
	}
	if r := a.TaskManagement(context.Background(), TMFLUNReset, 5, 0); r != TMFComplete {
		t.Errorf("LUN RESET of mapped LUN 5: %v", r)
	}
	if l, ok := a.TargetLUN(0); !ok || l != 7 {
		t.Errorf("TargetLUN(0) = %d, %v", l, ok)
	}
	if _, ok := a.TargetLUN(3); ok {
		t.Error("TargetLUN(3) of a view without LUN 3 is ok")
	}
	if l, ok := f.s1.TargetLUN(3); !ok || l != 3 {
		t.Errorf("TargetLUN(3) without a view = %d, %v", l, ok)
	}
	empty := f.viewSession(t, "initE,i,0x1")
	if got := reportedLUNs(t, empty); len(got) != 0 {
		t.Errorf("REPORT LUNS of an empty view: %v", got)
	}
	expect(t, run(empty, 0, tur(), DirNone, 0, nil), KeyIllegalRequest, ASCLUNotSupported)
}

// TestViewReadOnly: writes through a read-only mapping fail with DATA
// PROTECT / WRITE PROTECTED and MODE SENSE reports WP; a writable mapping
// of the same LU in another session writes.
func TestViewReadOnly(t *testing.T) {
	t.Parallel()
	f := newViewFixture(t)
	ro := f.viewSession(t, "initRO,i,0x1", LUNMapping{MappedLUN: 2, LUN: 3, ReadOnly: true})
	rw := f.viewSession(t, "initRW,i,0x1", LUNMapping{MappedLUN: 0, LUN: 3})
	buf := pattern(2*testBS, 1)
	writes := []struct {
		name string
		cdb  []byte
		data []byte
	}{
		{"WRITE(10)", rw10(OpWrite10, 0, 1, 0), buf[:testBS]},
		{"WRITE(16)", rw16(OpWrite16, 0, 1, 0), buf[:testBS]},
		{"WRITE AND VERIFY(10)", rw10(OpWriteVerify10, 0, 1, 0), buf[:testBS]},
		{"WRITE SAME(10)", rw10(OpWriteSame10, 0, 1, 0), buf[:testBS]},
		{"COMPARE AND WRITE", caw(0, 1, 0), buf},
		{"UNMAP", unmapCDB(24), unmapParams([2]uint64{0, 1})},
		{"MODE SELECT(6)", modeSelect6(4), make([]byte, 4)},
	}
	for _, w := range writes {
		c := run(ro, 2, w.cdb, DirOut, len(w.data), w.data)
		expect(t, c, KeyDataProtect, ASCWriteProtected)
	}
	good(t, run(ro, 2, rw10(OpRead10, 0, 1, 0), DirIn, testBS, nil))
	good(t, run(rw, 0, rw10(OpWrite10, 0, 1, 0), DirOut, testBS, buf[:testBS]))
	wp := func(s *Session, lun uint64) bool {
		c := run(s, lun, modeSense6(true, 0, 0x3f, 0, 255), DirIn, 255, nil)
		good(t, c)
		return data(c)[2]&0x80 != 0
	}
	if !wp(ro, 2) {
		t.Error("MODE SENSE through a read-only mapping: WP clear")
	}
	if wp(rw, 0) {
		t.Error("MODE SENSE through a writable mapping: WP set")
	}
	if wp(f.s1, 3) {
		t.Error("MODE SENSE without a view: WP set")
	}
}

// TestViewReservation: one LU seen as mapped LUN 5 by one session and as
// mapped LUN 0 by another is one LU: a reservation through one binds the
// other.
func TestViewReservation(t *testing.T) {
	t.Parallel()
	f := newViewFixture(t)
	a := f.viewSession(t, "initA,i,0x1", LUNMapping{MappedLUN: 5, LUN: 3})
	b := f.viewSession(t, "initB,i,0x1", LUNMapping{MappedLUN: 0, LUN: 3}, LUNMapping{MappedLUN: 1, LUN: 7})
	good(t, run(a, 5, prOutCDB(prRegister, 0), DirOut, 24, prOutParams(0, 0xa, 0)))
	good(t, run(a, 5, prOutCDB(prReserve, 1), DirOut, 24, prOutParams(0xa, 0, 0))) // Write Exclusive
	c := run(b, 0, rw10(OpWrite10, 0, 1, 0), DirOut, testBS, make([]byte, testBS))
	if c.Status != StatusReservationConflict {
		t.Fatalf("WRITE of the reserved LU under another mapped LUN: %v %s", c.Status, describe(c))
	}
	good(t, run(b, 0, rw10(OpRead10, 0, 1, 0), DirIn, testBS, nil))
	good(t, run(b, 1, rw10(OpWrite10, 0, 1, 0), DirOut, testBS, make([]byte, testBS)))
	good(t, run(a, 5, rw10(OpWrite10, 0, 1, 0), DirOut, testBS, make([]byte, testBS)))
	c = run(f.s1, 3, rw10(OpWrite10, 0, 1, 0), DirOut, testBS, make([]byte, testBS))
	if c.Status != StatusReservationConflict {
		t.Fatalf("WRITE of the reserved LU without a view: %v", c.Status)
	}
}

// TestViewSwap: SetView changes what a running session sees and raises
// REPORTED LUNS DATA HAS CHANGED for it only; the same view again raises
// nothing.
func TestViewSwap(t *testing.T) {
	t.Parallel()
	f := newViewFixture(t)
	a := f.viewSession(t, "initA,i,0x1", LUNMapping{MappedLUN: 0, LUN: 0})
	b := f.viewSession(t, "initB,i,0x1", LUNMapping{MappedLUN: 0, LUN: 0})
	v, err := NewLUNView([]LUNMapping{{MappedLUN: 0, LUN: 0}, {MappedLUN: 1, LUN: 7}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SetView(v); err != nil {
		t.Fatal(err)
	}
	if a.View() != v || a.Config().View != v {
		t.Error("View does not return the new view")
	}
	expect(t, run(a, 0, tur(), DirNone, 0, nil), KeyUnitAttention, ASCReportedLUNsDataChanged)
	good(t, run(a, 0, tur(), DirNone, 0, nil))
	good(t, run(b, 0, tur(), DirNone, 0, nil))
	if got := reportedLUNs(t, a); !cmp.Equal(got, []uint64{0, 1}) {
		t.Errorf("REPORT LUNS after SetView: %v", got)
	}
	// An equal view changes nothing.
	v2, _ := NewLUNView(v.Mappings())
	if err := a.SetView(v2); err != nil {
		t.Fatal(err)
	}
	good(t, run(a, 0, tur(), DirNone, 0, nil))
	// Read-only: the LUNs stay, their protection changes.
	v3, _ := NewLUNView([]LUNMapping{{MappedLUN: 0, LUN: 0, ReadOnly: true}, {MappedLUN: 1, LUN: 7}})
	if err := a.SetView(v3); err != nil {
		t.Fatal(err)
	}
	expect(t, run(a, 0, tur(), DirNone, 0, nil), KeyUnitAttention, ASCReportedLUNsDataChanged)
	expect(t, run(a, 0, rw10(OpWrite10, 0, 1, 0), DirOut, testBS, make([]byte, testBS)), KeyDataProtect, ASCWriteProtected)
	// Back to the whole map.
	if err := a.SetView(nil); err != nil {
		t.Fatal(err)
	}
	if got := reportedLUNs(t, a); !cmp.Equal(got, []uint64{0, 3, 7}) {
		t.Errorf("REPORT LUNS after SetView(nil): %v", got)
	}
	good(t, run(a, 0, rw10(OpWrite10, 0, 1, 0), DirOut, testBS, make([]byte, testBS)))
	a.Close()
	if err := a.SetView(v); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("SetView after Close: %v", err)
	}
}

// TestViewMapUnmap: unmapping a target LUN takes it out of the views that
// map it (with a unit attention for those sessions only); mapping it again
// brings it back; mapping a LUN no view names raises nothing for views.
func TestViewMapUnmap(t *testing.T) {
	t.Parallel()
	f := newViewFixture(t)
	a := f.viewSession(t, "initA,i,0x1", LUNMapping{MappedLUN: 0, LUN: 0}, LUNMapping{MappedLUN: 1, LUN: 7})
	b := f.viewSession(t, "initB,i,0x1", LUNMapping{MappedLUN: 0, LUN: 0})
	clearUA(t, f.s1, 7)
	lu, err := f.tgt.Unmap(7)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, run(a, 0, tur(), DirNone, 0, nil), KeyUnitAttention, ASCReportedLUNsDataChanged)
	expect(t, run(f.s1, 0, tur(), DirNone, 0, nil), KeyUnitAttention, ASCReportedLUNsDataChanged)
	good(t, run(b, 0, tur(), DirNone, 0, nil))
	if got := reportedLUNs(t, a); !cmp.Equal(got, []uint64{0}) {
		t.Errorf("REPORT LUNS after Unmap: %v", got)
	}
	expect(t, run(a, 1, tur(), DirNone, 0, nil), KeyIllegalRequest, ASCLUNotSupported)
	if err := f.tgt.Map(7, lu); err != nil {
		t.Fatal(err)
	}
	expect(t, run(a, 0, tur(), DirNone, 0, nil), KeyUnitAttention, ASCReportedLUNsDataChanged)
	good(t, run(b, 0, tur(), DirNone, 0, nil))
	if got := reportedLUNs(t, a); !cmp.Equal(got, []uint64{0, 1}) {
		t.Errorf("REPORT LUNS after Map: %v", got)
	}
	lu9, err := NewLU(newMem(t, testBlocks, testBS), LUConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.tgt.Map(9, lu9); err != nil {
		t.Fatal(err)
	}
	good(t, run(a, 0, tur(), DirNone, 0, nil))
	good(t, run(b, 0, tur(), DirNone, 0, nil))
}

// TestViewNoAllocations: commands through a view allocate nothing either.
// Not parallel: AllocsPerRun counts the whole process.
func TestViewNoAllocations(t *testing.T) {
	f := newFixture(t, nil, LUConfig{})
	v, err := NewLUNView([]LUNMapping{{MappedLUN: 4, LUN: 0}, {MappedLUN: 5, LUN: 0, ReadOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.s1.SetView(v); err != nil {
		t.Fatal(err)
	}
	clearUA(t, f.s1, 4)
	buf := make([]byte, 64<<10)
	sense := make([]byte, SenseBufferLen)
	c := &Command{Sense: sense}
	r10, w10 := rw10(OpRead10, 8, 128, 0), rw10(OpWrite10, 8, 128, 0)
	for name, setup := range map[string]func(){
		"READ(10)": func() {
			*c = Command{CDB: r10, LUN: 4, Dir: DirIn, ExpectedLength: 128 * testBS, DataIn: buf, Sense: sense}
		},
		"WRITE(10)": func() {
			*c = Command{CDB: w10, LUN: 4, Dir: DirOut, ExpectedLength: 128 * testBS, DataOut: buf, Sense: sense}
		},
		"WRITE(10) readonly": func() {
			*c = Command{CDB: w10, LUN: 5, Dir: DirOut, ExpectedLength: 128 * testBS, DataOut: buf, Sense: sense}
		},
		"READ(10) unmapped": func() {
			*c = Command{CDB: r10, LUN: 0, Dir: DirIn, ExpectedLength: 128 * testBS, DataIn: buf, Sense: sense}
		},
	} {
		setup()
		f.s1.Execute(c)
		allocs := testing.AllocsPerRun(50, func() {
			setup()
			f.s1.Execute(c)
		})
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations per command, want 0", name, allocs)
		}
	}
}

// BenchmarkExecuteView is BenchmarkExecute's read4k through a LUNView
// (mapped LUN 4 -> LUN 0), to compare with the session without a view.
func BenchmarkExecuteView(b *testing.B) {
	f := newFixture(b, newMem(b, 1<<16, 512), LUConfig{})
	v, err := NewLUNView([]LUNMapping{{MappedLUN: 1, LUN: 9}, {MappedLUN: 4, LUN: 0}})
	if err != nil {
		b.Fatal(err)
	}
	if err := f.s1.SetView(v); err != nil {
		b.Fatal(err)
	}
	clearUA(b, f.s1, 4)
	b.SetBytes(4096)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 4096)
		sense := make([]byte, SenseBufferLen)
		cdbs := make([][]byte, 64)
		for i := range cdbs {
			cdbs[i] = rw10(OpRead10, uint32(i*997%8000)*8, 8, 0)
		}
		var c Command
		i := 0
		for pb.Next() {
			c = Command{CDB: cdbs[i&63], LUN: 4, Tag: uint64(i), Dir: DirIn, DataIn: buf, ExpectedLength: 4096, Sense: sense}
			f.s1.Execute(&c)
			if c.Status != StatusGood {
				b.Fatal(c.Status)
			}
			i++
		}
	})
}
