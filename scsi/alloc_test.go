package scsi

import (
	"testing"
)

// TestNoAllocations checks that the READ and WRITE paths (and TEST UNIT
// READY, and failures with sense data) allocate nothing per command. It
// does not call t.Parallel: testing.AllocsPerRun counts the allocations of
// the whole process.
func TestNoAllocations(t *testing.T) {
	f := newFixture(t, nil, LUConfig{})
	buf := make([]byte, 64<<10)
	sense := make([]byte, SenseBufferLen)
	c := &Command{Sense: sense}
	r10, r16 := rw10(OpRead10, 8, 128, 0), rw16(OpRead16, 8, 8, flagFUA)
	w10, w16 := rw10(OpWrite10, 8, 128, 0), rw16(OpWrite16, 8, 8, flagFUA)
	t0, oob := tur(), rw10(OpRead10, testBlocks, 1, 0)
	cw := caw(16, 1, 0)
	cawData := make([]byte, 2*testBS)
	views := make([][]byte, 4)
	cmds := map[string]func(){
		"READ(10) zero-copy": func() {
			c.Release()
			*c = Command{CDB: r10, Dir: DirIn, ExpectedLength: 128 * testBS, DataIn: buf, Views: views, Sense: sense}
		},
		"READ(10)": func() {
			*c = Command{CDB: r10, Dir: DirIn, ExpectedLength: 128 * testBS, DataIn: buf, Sense: sense}
		},
		"READ(16) FUA": func() {
			*c = Command{CDB: r16, Dir: DirIn, ExpectedLength: 8 * testBS, DataIn: buf, Sense: sense}
		},
		"WRITE(10)": func() {
			*c = Command{CDB: w10, Dir: DirOut, ExpectedLength: 128 * testBS, DataOut: buf, Sense: sense}
		},
		"WRITE(16) FUA": func() {
			*c = Command{CDB: w16, Dir: DirOut, ExpectedLength: 8 * testBS, DataOut: buf, Sense: sense}
		},
		"TEST UNIT READY": func() { *c = Command{CDB: t0, Sense: sense} },
		"READ ending inside a block": func() {
			*c = Command{CDB: r10, Dir: DirIn, ExpectedLength: 1000, DataIn: buf, Sense: sense}
		},
		"COMPARE AND WRITE": func() {
			*c = Command{CDB: cw, Dir: DirOut, ExpectedLength: 2 * testBS, DataOut: cawData, Sense: sense}
		},
		"READ out of range": func() {
			*c = Command{CDB: oob, Dir: DirIn, ExpectedLength: testBS, DataIn: buf, Sense: sense}
		},
	}
	for name, setup := range cmds {
		// Warm up: RAM chunks, I_T_L state.
		setup()
		f.s1.Execute(c)
		allocs := testing.AllocsPerRun(50, func() {
			setup()
			f.s1.Execute(c)
		})
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations per command, want 0", name, allocs)
		}
		if c.Views != nil && c.ViewsLen == 0 {
			t.Errorf("%s: no views", name)
		}
		c.Release()
	}
}

// TestNoAllocationsALUA: the asymmetric access state check of a session
// in a configured port group (an active one reading, a standby one
// refused) allocates nothing per command. Not parallel, as
// TestNoAllocations.
func TestNoAllocationsALUA(t *testing.T) {
	f, p2 := aluaFixture(t, LUConfig{})
	if err := f.tgt.SetPortGroupState(1, ALUAActiveNonOptimized); err != nil {
		t.Fatal(err)
	}
	clearUA(t, f.s1, 0)
	// p2 is in standby: REQUEST SENSE takes its unit attention.
	good(t, in(p2, []byte{OpRequestSense, 0, 0, 0, 252, 0}, 252))
	buf := make([]byte, 4096)
	sense := make([]byte, SenseBufferLen)
	r10 := rw10(OpRead10, 8, 8, 0)
	c := &Command{}
	for _, tc := range []struct {
		name string
		s    *Session
		want Status
	}{{"non-optimized READ", f.s1, StatusGood}, {"standby READ", p2, StatusCheckCondition}} {
		n := testing.AllocsPerRun(200, func() {
			*c = Command{CDB: r10, Dir: DirIn, ExpectedLength: 8 * testBS, DataIn: buf, Sense: sense}
			tc.s.Execute(c)
		})
		if c.Status != tc.want {
			t.Fatalf("%s: %v", tc.name, c.Status)
		}
		if n != 0 {
			t.Errorf("%s: %v allocations per command", tc.name, n)
		}
	}
}
