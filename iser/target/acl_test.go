package target

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/iser/initiator"
	"github.com/rdisk/rdisk/scsi"
)

// Tests of per-initiator LUN maps (TargetConfig.ACLs, SetACLs) against
// rdisk's initiator on 127.0.0.1.

const (
	aclA = "iqn.2026-11.io.rdisk:acl-a"
	aclB = "iqn.2026-11.io.rdisk:acl-b"
	aclC = "iqn.2026-11.io.rdisk:acl-c"
)

// aclPortal starts a portal whose target has LUNs 0 and 3 (RAM disks)
// and the ACLs acls.
func aclPortal(t *testing.T, acls []ACL, allowed ...string) *portal {
	t.Helper()
	disk, err := backstore.NewMem(1<<20, 512)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { disk.Close() })
	return startPortal(t, func(c *Config) {
		tc := &c.Targets[0]
		tc.LUNs = append(tc.LUNs, LUNConfig{LUN: 3, Disk: disk, LU: scsi.LUConfig{Serial: "ACL-LUN-3"}})
		tc.ACLs = acls
		tc.AllowedInitiators = allowed
	})
}

// reportedLUNs runs REPORT LUNS through LUN 0 and returns the LUNs listed.
func reportedLUNs(t *testing.T, s *initiator.Session) []uint64 {
	t.Helper()
	buf := make([]byte, 4096)
	cmd := &initiator.Command{CDB: []byte{scsi.OpReportLUNs, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0}, DataIn: buf}
	execute(t, s, cmd)
	if cmd.Status != scsi.StatusGood {
		t.Fatalf("REPORT LUNS: status %v, sense % x", cmd.Status, cmd.Sense)
	}
	n := int(binary.BigEndian.Uint32(buf[0:4]))
	out := []uint64{}
	for p := 8; p < 8+n && p+8 <= len(buf); p += 8 {
		l, err := scsi.DecodeLUN([8]byte(buf[p : p+8]))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// expectSense checks that cmd failed with CHECK CONDITION key/asc.
func expectSense(t *testing.T, what string, cmd *initiator.Command, key scsi.SenseKey, asc scsi.ASC) {
	t.Helper()
	if cmd.Status != scsi.StatusCheckCondition {
		t.Errorf("%s: status %v, want CHECK CONDITION %v %v", what, cmd.Status, key, asc)
		return
	}
	sn, err := scsi.ParseSense(cmd.Sense)
	if err != nil || sn.Key != key || sn.ASC != asc {
		t.Errorf("%s: sense % x (%v %v), want %v %v", what, cmd.Sense, sn.Key, sn.ASC, key, asc)
	}
}

// clearAll clears the unit attentions of a new session on the LUNs it
// sees.
func clearAll(t *testing.T, s *initiator.Session) []uint64 {
	t.Helper()
	luns := reportedLUNs(t, s)
	for _, l := range luns {
		clearUAs(t, s, l)
	}
	return luns
}

// TestACLMappedLUNs: each initiator sees its own LUN map: A its mapped LUNs
// (0 -> LUN 3 read-only, 5 -> LUN 0), B and C (AllowedInitiators) every
// LUN, D (an entry without mapped LUNs) none, as with LIO; others may not
// log in.
func TestACLMappedLUNs(t *testing.T) {
	t.Parallel()
	for _, x := range mgmtTransports {
		t.Run(x.name, func(t *testing.T) {
			t.Parallel()
			const aclD = "iqn.2026-12.io.rdisk:acl-d"
			pt := aclPortal(t, []ACL{
				{Initiator: aclA, MappedLUNs: []MappedLUN{{MappedLUN: 0, LUN: 3, ReadOnly: true}, {MappedLUN: 5, LUN: 0}}},
				{Initiator: aclD},
			}, aclB, aclC)
			a := pt.mustLogin(t, x.tr, fuzzIQN, pt.config(t, aclA))
			b := pt.mustLogin(t, x.tr, fuzzIQN, pt.config(t, aclB))
			c := pt.mustLogin(t, x.tr, fuzzIQN, pt.config(t, aclC))
			d := pt.mustLogin(t, x.tr, fuzzIQN, pt.config(t, aclD))
			if got := clearAll(t, a); !slices.Equal(got, []uint64{0, 5}) {
				t.Errorf("REPORT LUNS of A: %v, want [0 5]", got)
			}
			for name, s := range map[string]*initiator.Session{"B": b, "C": c} {
				if got := clearAll(t, s); !slices.Equal(got, []uint64{0, 3}) {
					t.Errorf("REPORT LUNS of %s: %v, want [0 3]", name, got)
				}
			}
			if got := reportedLUNs(t, d); len(got) != 0 {
				t.Errorf("REPORT LUNS of D (an entry without mapped LUNs): %v, want none", got)
			}
			_, err := pt.login(t, x.tr, fuzzIQN, pt.config(t, mgmtInitiator))
			var st iser.LoginStatus
			if !errors.As(err, &st) || st != iser.LoginForbidden {
				t.Errorf("login of an initiator without an ACL entry: %v, want %v", err, iser.LoginForbidden)
			}

			// A's mapped LUN 0 is LUN 3, read-only.
			sn := make([]byte, 255)
			execute(t, a, &initiator.Command{LUN: 0, CDB: []byte{scsi.OpInquiry, 1, 0x80, 0, 255, 0}, DataIn: sn})
			if got := string(sn[4 : 4+sn[3]]); got != "ACL-LUN-3" {
				t.Errorf("serial number of A's mapped LUN 0: %q", got)
			}
			w := &initiator.Command{LUN: 0, CDB: rw10(scsi.OpWrite10, 0, 1), DataOut: make([]byte, 512)}
			execute(t, a, w)
			expectSense(t, "WRITE through a read-only mapping", w, scsi.KeyDataProtect, scsi.ASCWriteProtected)
			execute(t, a, &initiator.Command{LUN: 0, CDB: rw10(scsi.OpRead10, 0, 1), DataIn: make([]byte, 512)})
			ms := make([]byte, 255)
			execute(t, a, &initiator.Command{LUN: 0, CDB: []byte{scsi.OpModeSense6, 0x08, 0x3f, 0, 255, 0}, DataIn: ms})
			if ms[2]&0x80 == 0 {
				t.Error("MODE SENSE through a read-only mapping: WP clear")
			}
			// B writes the same LU as LUN 3.
			w = &initiator.Command{LUN: 3, CDB: rw10(scsi.OpWrite10, 0, 1), DataOut: make([]byte, 512)}
			execute(t, b, w)
			if w.Status != scsi.StatusGood {
				t.Errorf("WRITE of LUN 3 by B: %v % x", w.Status, w.Sense)
			}
			// A's mapped LUN 5 is LUN 0, writable.
			w = &initiator.Command{LUN: 5, CDB: rw10(scsi.OpWrite10, 0, 1), DataOut: make([]byte, 512)}
			execute(t, a, w)
			if w.Status != scsi.StatusGood {
				t.Errorf("WRITE of A's mapped LUN 5: %v % x", w.Status, w.Sense)
			}
			// LUN 3 does not exist for A.
			r := &initiator.Command{LUN: 3, CDB: rw10(scsi.OpRead10, 0, 1), DataIn: make([]byte, 512)}
			execute(t, a, r)
			expectSense(t, "READ of a LUN A has not mapped", r, scsi.KeyIllegalRequest, scsi.ASCLUNotSupported)
			inq := make([]byte, 36)
			execute(t, a, &initiator.Command{LUN: 3, CDB: []byte{scsi.OpInquiry, 0, 0, 0, 36, 0}, DataIn: inq})
			if inq[0] != 0x7f {
				t.Errorf("INQUIRY of a LUN A has not mapped: peripheral byte %#x, want 7f", inq[0])
			}
		})
	}
}

// TestACLReservation: a reservation A makes through its mapped LUN 5 binds
// B, which sees the same LU as its mapped LUN 0.
func TestACLReservation(t *testing.T) {
	t.Parallel()
	pt := aclPortal(t, []ACL{
		{Initiator: aclA, MappedLUNs: []MappedLUN{{MappedLUN: 5, LUN: 3}}},
		{Initiator: aclB, MappedLUNs: []MappedLUN{{MappedLUN: 0, LUN: 3}, {MappedLUN: 1, LUN: 0}}},
	})
	a := pt.mustLogin(t, iser.TransportTCP, fuzzIQN, pt.config(t, aclA))
	b := pt.mustLogin(t, iser.TransportISER, fuzzIQN, pt.config(t, aclB))
	clearAll(t, a)
	clearAll(t, b)
	prOut := func(sa, typ byte, key, sark uint64) *initiator.Command {
		p := make([]byte, 24)
		binary.BigEndian.PutUint64(p[0:8], key)
		binary.BigEndian.PutUint64(p[8:16], sark)
		cmd := &initiator.Command{LUN: 5, CDB: []byte{scsi.OpPersistentReserveOut, sa, typ, 0, 0, 0, 0, 0, 24, 0}, DataOut: p}
		execute(t, a, cmd)
		if cmd.Status != scsi.StatusGood {
			t.Fatalf("PERSISTENT RESERVE OUT %d: %v % x", sa, cmd.Status, cmd.Sense)
		}
		return cmd
	}
	prOut(0, 0, 0, 0xa11ce) // REGISTER
	prOut(1, 1, 0xa11ce, 0) // RESERVE, Write Exclusive
	w := &initiator.Command{LUN: 0, CDB: rw10(scsi.OpWrite10, 0, 1), DataOut: make([]byte, 512)}
	execute(t, b, w)
	if w.Status != scsi.StatusReservationConflict {
		t.Errorf("B's WRITE of the LU A reserved (its mapped LUN 0): %v, want RESERVATION CONFLICT", w.Status)
	}
	w = &initiator.Command{LUN: 1, CDB: rw10(scsi.OpWrite10, 0, 1), DataOut: make([]byte, 512)}
	execute(t, b, w)
	if w.Status != scsi.StatusGood {
		t.Errorf("B's WRITE of another LU: %v", w.Status)
	}
	w = &initiator.Command{LUN: 5, CDB: rw10(scsi.OpWrite10, 0, 1), DataOut: make([]byte, 512)}
	execute(t, a, w)
	if w.Status != scsi.StatusGood {
		t.Errorf("the holder's WRITE: %v", w.Status)
	}
}

// TestSetACLs: SetACLs changes what running sessions see, with a REPORTED
// LUNS DATA HAS CHANGED unit attention for those whose map changed only.
func TestSetACLs(t *testing.T) {
	t.Parallel()
	for _, x := range mgmtTransports {
		t.Run(x.name, func(t *testing.T) {
			t.Parallel()
			pt := aclPortal(t, []ACL{
				{Initiator: aclA, MappedLUNs: []MappedLUN{{MappedLUN: 0, LUN: 0}}},
			}, aclB)
			a := pt.mustLogin(t, x.tr, fuzzIQN, pt.config(t, aclA))
			b := pt.mustLogin(t, x.tr, fuzzIQN, pt.config(t, aclB))
			if got := clearAll(t, a); !slices.Equal(got, []uint64{0}) {
				t.Fatalf("REPORT LUNS of A: %v", got)
			}
			clearAll(t, b)
			err := pt.tg.SetACLs(fuzzIQN, []ACL{
				{Initiator: aclA, MappedLUNs: []MappedLUN{{MappedLUN: 0, LUN: 0}, {MappedLUN: 1, LUN: 3, ReadOnly: true}}},
			})
			if err != nil {
				t.Fatal(err)
			}
			if asc := unitAttention(t, a, 0); asc != scsi.ASCReportedLUNsDataChanged {
				t.Errorf("A after SetACLs: ASC %v, want REPORTED LUNS DATA HAS CHANGED", asc)
			}
			if asc := unitAttention(t, b, 0); asc != 0 {
				t.Errorf("B (map unchanged) after SetACLs: ASC %v", asc)
			}
			if got := reportedLUNs(t, a); !slices.Equal(got, []uint64{0, 1}) {
				t.Errorf("REPORT LUNS of A after SetACLs: %v, want [0 1]", got)
			}
			clearUAs(t, a, 1)
			w := &initiator.Command{LUN: 1, CDB: rw10(scsi.OpWrite10, 0, 1), DataOut: make([]byte, 512)}
			execute(t, a, w)
			expectSense(t, "WRITE through the new read-only mapping", w, scsi.KeyDataProtect, scsi.ASCWriteProtected)

			// A's entry goes: its session stays but sees nothing, its
			// new logins are refused; B now sees LUN 0 only.
			if err := pt.tg.SetACLs(fuzzIQN, []ACL{{Initiator: aclB, MappedLUNs: []MappedLUN{{MappedLUN: 0, LUN: 0}}}}); err != nil {
				t.Fatal(err)
			}
			if got := reportedLUNs(t, a); len(got) != 0 {
				t.Errorf("REPORT LUNS of A without an ACL entry: %v", got)
			}
			r := &initiator.Command{LUN: 0, CDB: rw10(scsi.OpRead10, 0, 1), DataIn: make([]byte, 512)}
			execute(t, a, r)
			expectSense(t, "READ by A without an ACL entry", r, scsi.KeyIllegalRequest, scsi.ASCLUNotSupported)
			if asc := unitAttention(t, b, 0); asc != scsi.ASCReportedLUNsDataChanged {
				t.Errorf("B after losing LUN 3: ASC %v, want REPORTED LUNS DATA HAS CHANGED", asc)
			}
			if got := reportedLUNs(t, b); !slices.Equal(got, []uint64{0}) {
				t.Errorf("REPORT LUNS of B: %v, want [0]", got)
			}
			_, err = pt.login(t, x.tr, fuzzIQN, pt.config(t, aclA))
			var st iser.LoginStatus
			if !errors.As(err, &st) || st != iser.LoginForbidden {
				t.Errorf("login of A after its entry went: %v, want %v", err, iser.LoginForbidden)
			}
			// No ACLs at all: new sessions see every LUN again.
			if err := pt.tg.SetAllowedInitiators(fuzzIQN, nil); err != nil {
				t.Fatal(err)
			}
			if err := pt.tg.SetACLs(fuzzIQN, nil); err != nil {
				t.Fatal(err)
			}
			if got := reportedLUNs(t, a); !slices.Equal(got, []uint64{0, 3}) {
				t.Errorf("REPORT LUNS of A without ACLs: %v, want [0 3]", got)
			}
			c := pt.mustLogin(t, x.tr, fuzzIQN, pt.config(t, aclC))
			if got := clearAll(t, c); !slices.Equal(got, []uint64{0, 3}) {
				t.Errorf("REPORT LUNS of a new session without ACLs: %v", got)
			}
		})
	}
}

// TestACLUnmapLUN: UnmapLUN takes the LUN out of the ACLs mapping it;
// mapping it again does not bring it back; an entry left without mapped
// LUNs sees none.
func TestACLUnmapLUN(t *testing.T) {
	t.Parallel()
	pt := aclPortal(t, []ACL{
		{Initiator: aclA, MappedLUNs: []MappedLUN{{MappedLUN: 0, LUN: 0}, {MappedLUN: 1, LUN: 3}}},
		{Initiator: aclB, MappedLUNs: []MappedLUN{{MappedLUN: 2, LUN: 3}}},
	}, aclC)
	a := pt.mustLogin(t, iser.TransportTCP, fuzzIQN, pt.config(t, aclA))
	b := pt.mustLogin(t, iser.TransportTCP, fuzzIQN, pt.config(t, aclB))
	clearAll(t, a)
	clearAll(t, b)
	lu, err := pt.tg.UnmapLUN(fuzzIQN, 3)
	if err != nil {
		t.Fatal(err)
	}
	if asc := unitAttention(t, a, 0); asc != scsi.ASCReportedLUNsDataChanged {
		t.Errorf("A after UnmapLUN: ASC %v, want REPORTED LUNS DATA HAS CHANGED", asc)
	}
	if got := reportedLUNs(t, a); !slices.Equal(got, []uint64{0}) {
		t.Errorf("REPORT LUNS of A after UnmapLUN: %v, want [0]", got)
	}
	if got := reportedLUNs(t, b); len(got) != 0 {
		t.Errorf("REPORT LUNS of B after UnmapLUN of its only LUN: %v, want none", got)
	}
	if err := pt.tg.MapLUN(fuzzIQN, 3, lu); err != nil {
		t.Fatal(err)
	}
	if asc := unitAttention(t, a, 0); asc != 0 {
		t.Errorf("A after MapLUN of a LUN it no longer maps: ASC %v", asc)
	}
	if got := reportedLUNs(t, a); !slices.Equal(got, []uint64{0}) {
		t.Errorf("REPORT LUNS of A after MapLUN: %v, want [0]", got)
	}
	c := pt.mustLogin(t, iser.TransportTCP, fuzzIQN, pt.config(t, aclC))
	if got := clearAll(t, c); !slices.Equal(got, []uint64{0, 3}) {
		t.Errorf("REPORT LUNS of C (all LUNs): %v", got)
	}
	b2 := pt.mustLogin(t, iser.TransportTCP, fuzzIQN, pt.config(t, aclB))
	if got := reportedLUNs(t, b2); len(got) != 0 {
		t.Errorf("REPORT LUNS of a new session of B: %v, want none", got)
	}
}

// TestACLValidation: bad ACLs fail New and SetACLs with errors naming the
// field.
func TestACLValidation(t *testing.T) {
	t.Parallel()
	disk, err := backstore.NewMem(1<<20, 512)
	if err != nil {
		t.Fatal(err)
	}
	bad := []struct {
		acls []ACL
		want string
	}{
		{[]ACL{{Initiator: aclA}, {Initiator: aclA}}, "ACLs[1]: initiator " + aclA + " has an entry already (ACLs[0])"},
		{[]ACL{{Initiator: ""}}, "ACLs[0]: initiator \"\""},
		{[]ACL{{Initiator: "a b"}}, "ACLs[0]: initiator \"a b\""},
		{[]ACL{{Initiator: aclA, MappedLUNs: []MappedLUN{{MappedLUN: 1, LUN: 0}, {MappedLUN: 1, LUN: 0}}}}, "ACLs[0] (" + aclA + "): MappedLUNs[1]: MappedLUN 1 is mapped already (MappedLUNs[0])"},
		{[]ACL{{Initiator: aclB}, {Initiator: aclA, MappedLUNs: []MappedLUN{{MappedLUN: 0, LUN: 4}}}}, "ACLs[1] (" + aclA + "): MappedLUNs[0]: LUN 4: the target has no LUN 4"},
		{[]ACL{{Initiator: aclA, MappedLUNs: []MappedLUN{{MappedLUN: 16384, LUN: 0}}}}, "MappedLUNs[0]: MappedLUN 16384 outside 0..16383"},
	}
	for _, b := range bad {
		_, err := New(Config{Targets: []TargetConfig{{Name: fuzzIQN, LUNs: []LUNConfig{{LUN: 0, Disk: disk}}, ACLs: b.acls}}})
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("New with ACLs %+v: %v, want an error with %q", b.acls, err, b.want)
		}
	}
	// The disk was not left mapped by the failures.
	tg := newTestTarget(t, func(c *Config) {
		c.Targets[0].LUNs[0].Disk = disk
		c.Targets[0].ACLs = []ACL{{Initiator: aclA, MappedLUNs: []MappedLUN{{MappedLUN: 7, LUN: 0}}}}
	})
	for _, b := range bad {
		if err := tg.SetACLs(fuzzIQN, b.acls); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("SetACLs %+v: %v, want an error with %q", b.acls, err, b.want)
		}
	}
	if err := tg.SetACLs(fuzzIQN+"-none", nil); err == nil {
		t.Error("SetACLs on an unknown target succeeded")
	}
	// The failed calls left the ACLs as they were.
	if v := tg.node(fuzzIQN).access.Load().viewFor(aclA); len(v.Mappings()) != 1 {
		t.Errorf("A's view after failed SetACLs: %v", v.Mappings())
	}
}
