package scsi

import "testing"

// TestErrorStats: an ILLEGAL REQUEST and a RESERVATION CONFLICT are
// counted on the LU, under their names; GOOD commands and commands to an
// unmapped LUN are not.
func TestErrorStats(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	before := f.lu.ErrorStats()
	if len(before.BySenseKey) != 16 || len(before.ByStatus) != 3 {
		t.Fatalf("ErrorStats %+v: want every sense key and status present", before)
	}
	// GOOD commands count nothing.
	good(t, in(f.s1, rw10(OpRead10, 0, 1, 0), testBS))
	good(t, none(f.s1, tur()))
	// ILLEGAL REQUEST: LBA out of range, with a sense buffer too short to
	// hold the sense key.
	c := &Command{CDB: rw10(OpRead10, testBlocks, 1, 0), Dir: DirIn, ExpectedLength: testBS, DataIn: make([]byte, testBS)}
	f.s1.Execute(c)
	if c.Status != StatusCheckCondition {
		t.Fatalf("READ beyond the capacity: %v", c.Status)
	}
	// RESERVATION CONFLICT: s1 reserves, s2 writes.
	good(t, none(f.s1, []byte{OpReserve6, 0, 0, 0, 0, 0}))
	if c := out(f.s2, rw10(OpWrite10, 0, 1, 0), make([]byte, testBS)); c.Status != StatusReservationConflict {
		t.Fatalf("WRITE under another nexus's reservation: %v", c.Status)
	}
	good(t, none(f.s1, []byte{OpRelease6, 0, 0, 0, 0, 0}))
	// Not the LU's: a command to an unmapped LUN.
	if c := run(f.s1, 5, tur(), DirNone, 0, nil); c.Status != StatusCheckCondition {
		t.Fatalf("TEST UNIT READY to LUN 5: %v", c.Status)
	}
	st := f.lu.ErrorStats()
	for name, n := range st.BySenseKey {
		want := before.BySenseKey[name]
		if name == "illegal_request" {
			want++
		}
		if n != want {
			t.Errorf("BySenseKey[%q] = %d, want %d", name, n, want)
		}
	}
	for name, n := range st.ByStatus {
		want := before.ByStatus[name]
		if name == "reservation_conflict" {
			want++
		}
		if n != want {
			t.Errorf("ByStatus[%q] = %d, want %d", name, n, want)
		}
	}
	// The maps are the caller's.
	st.BySenseKey["illegal_request"] = 100
	if f.lu.ErrorStats().BySenseKey["illegal_request"] != before.BySenseKey["illegal_request"]+1 {
		t.Error("ErrorStats maps share state with the LU")
	}
}

// TestErrorStatsNames: every sense key has a distinct name; the unit
// attention each new session sees is counted.
func TestErrorStatsNames(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for k, name := range senseKeyNames {
		if name == "" || seen[name] {
			t.Errorf("sense key %#x: name %q", k, name)
		}
		seen[name] = true
	}
	f := newFixture(t, nil, LUConfig{})
	// newFixture cleared the POWER ON, RESET unit attention of its two
	// sessions.
	if n := f.lu.ErrorStats().BySenseKey["unit_attention"]; n != 2 {
		t.Errorf("unit_attention = %d, want 2", n)
	}
}
