package target

import (
	"errors"
	"strings"
	"testing"

	"github.com/rdisk/rdisk/iser/initiator"
	"github.com/rdisk/rdisk/scsi"
)

// TestPortGroups: the portal's sessions come in through
// Config.RelativeTargetPort (default the TPGT), REPORT TARGET PORT GROUPS
// lists the target's groups, and SetPortGroupState changes what commands
// through the port may do, with a unit attention first; over iSCSI/TCP and
// iSER.
func TestPortGroups(t *testing.T) {
	t.Parallel()
	for _, tr := range mgmtTransports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			pt := startPortal(t, func(c *Config) {
				c.PortalGroupTag = 2
				c.Targets[0].PortGroups = []scsi.PortGroupConfig{
					{ID: 10, State: scsi.ALUAActiveOptimized, Ports: []uint16{2}},
					{ID: 20, State: scsi.ALUAActiveNonOptimized, Ports: []uint16{7}},
				}
			})
			s := pt.mustLogin(t, tr.tr, fuzzIQN, pt.config(t, mgmtInitiator))
			clearUAs(t, s, 0)
			// VPD 83h: relative target port 2 (the TPGT), group 10.
			cmd := &initiator.Command{CDB: []byte{scsi.OpInquiry, 1, 0x83, 1, 0, 0}, DataIn: make([]byte, 256)}
			execute(t, s, cmd)
			page := string(cmd.DataIn[:cmd.DataLen])
			for _, d := range []string{"\x51\x94\x00\x04\x00\x00\x00\x02", "\x51\x95\x00\x04\x00\x00\x00\x0a"} {
				if !strings.Contains(page, d) {
					t.Errorf("VPD 83h % x lacks % x", page, d)
				}
			}
			cmd = &initiator.Command{CDB: []byte{scsi.OpMaintenanceIn, scsi.SAReportTargetPortGroup, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}, DataIn: make([]byte, 256)}
			execute(t, s, cmd)
			want := []byte{0, 0, 0, 24, 0x00, 0xcf, 0, 10, 0, 0, 0, 1, 0, 0, 0, 2, 0x01, 0xcf, 0, 20, 0, 0, 0, 1, 0, 0, 0, 7}
			if got := cmd.DataIn[:cmd.DataLen]; string(got) != string(want) {
				t.Errorf("RTPG % x, want % x", got, want)
			}
			if err := pt.tg.SetPortGroupState(fuzzIQN, 10, scsi.ALUAUnavailable); err != nil {
				t.Fatal(err)
			}
			if asc := unitAttention(t, s, 0); asc != scsi.ASCAsymmetricAccessChanged {
				t.Fatalf("unit attention %v, want %v", asc, scsi.ASCAsymmetricAccessChanged)
			}
			cmd = &initiator.Command{CDB: rw10(0x28, 0, 1), DataIn: make([]byte, 512)}
			execute(t, s, cmd)
			sn, err := scsi.ParseSense(cmd.Sense)
			if cmd.Status != scsi.StatusCheckCondition || err != nil || sn.Key != scsi.KeyNotReady || sn.ASC != scsi.ASCALUAUnavailable {
				t.Fatalf("READ through an unavailable port: %v % x", cmd.Status, cmd.Sense)
			}
			groups, err := pt.tg.PortGroups(fuzzIQN)
			if err != nil || len(groups) != 2 || groups[0].State != scsi.ALUAUnavailable {
				t.Errorf("PortGroups %+v %v", groups, err)
			}
			if err := pt.tg.SetPortGroupState(fuzzIQN, 10, scsi.ALUAActiveOptimized); err != nil {
				t.Fatal(err)
			}
			clearUAs(t, s, 0)
			cmd = &initiator.Command{CDB: rw10(0x28, 0, 1), DataIn: make([]byte, 512)}
			execute(t, s, cmd)
			if cmd.Status != scsi.StatusGood {
				t.Errorf("READ after the change back: %v % x", cmd.Status, cmd.Sense)
			}
			if err := pt.tg.SetPortGroupState("iqn.2026-11.io.rdisk:none", 10, scsi.ALUAStandby); err == nil {
				t.Error("SetPortGroupState of an unknown target succeeded")
			}
			if err := pt.tg.SetPortGroupState(fuzzIQN, 30, scsi.ALUAStandby); !errors.Is(err, scsi.ErrPortGroup) {
				t.Errorf("unknown group: %v", err)
			}
		})
	}
}

func TestPortGroupsInvalid(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Targets: []TargetConfig{{Name: fuzzIQN, PortGroups: []scsi.PortGroupConfig{{ID: 1, Ports: []uint16{1}}, {ID: 2, Ports: []uint16{1}}}}}})
	if !errors.Is(err, scsi.ErrPortGroup) {
		t.Errorf("a port in two groups: %v", err)
	}
}
