package scsi

import (
	"bytes"
	"testing"
)

// TestLUInTwoTargets: one LU mapped in two targets (the iSCSI target and
// the SRP target port of one disk) is one LU: a reservation made through
// one target binds the nexuses of the other, while each session sees the
// port and target device designators of its own target. An LU is mapped
// at most once per target.
func TestLUInTwoTargets(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil, LUConfig{})
	srp := NewTarget(TargetConfig{Name: "srp-target"})
	if err := srp.Map(0, f.lu); err != nil {
		t.Fatalf("mapping the LU in a second target: %v", err)
	}
	if err := srp.Map(1, f.lu); err == nil {
		t.Fatal("mapping the LU twice in one target succeeded")
	}
	s, err := srp.NewSession(SessionConfig{InitiatorPort: "0x0000000000000001", ProtocolID: ProtocolSRP, RelativeTargetPort: 1, TargetPort: "srp-port",
		TransportID: []byte{ProtocolSRP, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	clearUA(t, s, 0)

	// Write Exclusive through the first target.
	good(t, out(f.s1, prOutCDB(0x00, 0), prOutParams(0, 0x1234, 0)))
	good(t, out(f.s1, prOutCDB(0x01, 1), prOutParams(0x1234, 0, 0)))
	c := out(s, rw10(0x2a, 0, 1, 0), make([]byte, 512))
	if c.Status != StatusReservationConflict {
		t.Fatalf("WRITE through the second target under the reservation: %v", c.Status)
	}
	good(t, in(s, rw10(0x28, 0, 1, 0), 512))

	// Designators: the LU's are the same, the target device's differ.
	id1, id2 := data(in(f.s1, inquiry(true, 0x83, 255), 255)), data(in(s, inquiry(true, 0x83, 255), 255))
	if !bytes.Equal(id1[4:24], id2[4:24]) {
		t.Errorf("NAA designators differ between the targets:\n%x\n%x", id1[4:24], id2[4:24])
	}
	if !bytes.Contains(id1, []byte("iqn.2026-11.io.rdisk:test")) || !bytes.Contains(id2, []byte("srp-target")) || bytes.Contains(id2, []byte("iqn.2026-11.io.rdisk:test\x00")) {
		t.Errorf("target device names: %q / %q", id1, id2)
	}

	// Unmapping from one target leaves the other's nexus working.
	if _, err := f.tgt.Unmap(0); err != nil {
		t.Fatal(err)
	}
	good(t, in(s, rw10(0x28, 0, 1, 0), 512))
}
