package target

import (
	"errors"
	"testing"
	"time"

	"github.com/rdisk/rdisk/scsi"
	"github.com/rdisk/rdisk/srp/initiator"
)

// TestPortGroupStateAER: a state change reaches the port's nexuses as an
// SRP_AER_REQ with ASYMMETRIC ACCESS STATE CHANGED, and commands through
// the port then follow the new state.
func TestPortGroupStateAER(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, Config{}, PortConfig{RelativeTargetPort: 3, PortGroups: []scsi.PortGroupConfig{
		{ID: 1, State: scsi.ALUAActiveOptimized, Ports: []uint16{3}},
		{ID: 2, State: scsi.ALUAStandby, Ports: []uint16{4}},
	}}, newTestDisk(t, 1<<20))
	events := make(chan scsi.ASC, 8)
	s := login(t, lt, initiator.Config{OnAER: func(lun uint64, sense []byte) {
		if sn, err := scsi.ParseSense(sense); err == nil && sn.Key == scsi.KeyUnitAttention {
			events <- sn.ASC
		}
	}})
	clearUA(t, s)
	if err := lt.port.SetPortGroupState(1, scsi.ALUAStandby); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-events:
		if got != scsi.ASCAsymmetricAccessChanged {
			t.Errorf("AER %s, want %s", got, scsi.ASCAsymmetricAccessChanged)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no AER")
	}
	// The unit attention is still reported once, then standby refuses
	// TEST UNIT READY with 04h/0Bh.
	var se *initiator.SCSIError
	err := s.Exec(testCtx(t), 0, &initiator.Command{CDB: make([]byte, 6)})
	if !errors.As(err, &se) || se.Parsed.ASC != scsi.ASCAsymmetricAccessChanged {
		t.Fatalf("first command: %v, want the unit attention", err)
	}
	err = s.Exec(testCtx(t), 0, &initiator.Command{CDB: make([]byte, 6)})
	if !errors.As(err, &se) || se.Parsed.Key != scsi.KeyNotReady || se.Parsed.ASC != scsi.ASCALUAStandby {
		t.Fatalf("TEST UNIT READY in standby: %v, want NOT READY 04h/0Bh", err)
	}
	got := lt.port.PortGroups()
	if len(got) != 2 || got[0].State != scsi.ALUAStandby || got[0].Ports[0] != 3 {
		t.Errorf("PortGroups %+v", got)
	}
	if err := lt.port.SetPortGroupState(9, scsi.ALUAStandby); !errors.Is(err, scsi.ErrPortGroup) {
		t.Errorf("unknown group: %v", err)
	}
	if _, err := lt.t.AddPort(PortConfig{IDExt: 9, IOCGUID: 9, PortGroups: []scsi.PortGroupConfig{{ID: 0}}}); !errors.Is(err, scsi.ErrPortGroup) {
		t.Errorf("AddPort with group 0: %v", err)
	}
}
