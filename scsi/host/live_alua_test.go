package host_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/iser"
	iserinit "github.com/rdisk/rdisk/iser/initiator"
	isertarget "github.com/rdisk/rdisk/iser/target"
	"github.com/rdisk/rdisk/scsi"
	srpinit "github.com/rdisk/rdisk/srp/initiator"
	srptarget "github.com/rdisk/rdisk/srp/target"
)

// aluaGroups: this gateway's port 1 in group 1, another gateway's port 2
// in group 2.
var aluaGroups = []scsi.PortGroupConfig{
	{ID: 1, State: scsi.ALUAActiveOptimized, Ports: []uint16{1}},
	{ID: 2, State: scsi.ALUAActiveNonOptimized, Ports: []uint16{2}},
}

// aluaDevice is a device the initiators build (PathReporter, Identifier)
// and the call that changes its group's state on the target.
type aluaDevice interface {
	blockdev.Device
	blockdev.PathReporter
	blockdev.Identifier
}

type aluaTarget struct {
	dev      aluaDevice
	setState func(id uint16, st scsi.ALUAState) error
	// aer: the target announces the change (SRP_AER_REQ) without a
	// command from the host.
	aer bool
}

func aluaSRP(t *testing.T, lu *scsi.LU) aluaTarget {
	tg, err := srptarget.New(srptarget.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	port, err := tg.AddPort(srptarget.PortConfig{IDExt: 1, IOCGUID: 2, AllowAnyInitiator: true, RelativeTargetPort: 1, PortGroups: aluaGroups})
	if err != nil {
		t.Fatal(err)
	}
	if err := port.Map(0, lu); err != nil {
		t.Fatal(err)
	}
	addr, err := tg.Listen(context.Background(), provider(t), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d, err := srpinit.Open(ctx(t), provider(t), port.URL(addr.String()), srpinit.Config{MaxTransfer: initiatorMaxTransfer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return aluaTarget{dev: d, setState: port.SetPortGroupState, aer: true}
}

func aluaISCSI(tr iser.Transport) func(t *testing.T, lu *scsi.LU) aluaTarget {
	return func(t *testing.T, lu *scsi.LU) aluaTarget {
		tg, err := isertarget.New(isertarget.Config{
			Targets:  []isertarget.TargetConfig{{Name: testIQN, LUNs: []isertarget.LUNConfig{{LUN: 0, Unit: lu}}, PortGroups: aluaGroups}},
			Provider: provider(t), Logger: slog.New(slog.DiscardHandler), PortalGroupTag: 1,
		})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- tg.Serve(context.Background(), ln) }()
		t.Cleanup(func() {
			tg.Close()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
		h, port, _ := net.SplitHostPort(ln.Addr().String())
		n, _ := strconv.Atoi(port)
		u := iserinit.URL{Transport: tr, Host: h, Port: n, Target: testIQN}
		d, err := iserinit.Open(ctx(t), u, iserinit.Config{InitiatorName: testInitiator, Provider: provider(t),
			MaxTransfer: initiatorMaxTransfer, CommandTimeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return aluaTarget{dev: d, setState: func(id uint16, st scsi.ALUAState) error { return tg.SetPortGroupState(testIQN, id, st) }}
	}
}

// waitState polls the device's AccessState until it is want.
func waitState(t *testing.T, d blockdev.PathReporter, want blockdev.AccessState) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for d.AccessState() != want {
		if time.Now().After(deadline) {
			t.Fatalf("access state %v, want %v", d.AccessState(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestLiveALUA: a host on a gateway's port sees its group's state
// (optimized), the LU's NAA as its identity; the target puts the group in
// standby: I/O fails with ErrPath (state inaccessible at once), the state
// is read again (SRP: from the AER alone); back to active/optimized, I/O
// works again. Over SRP, iSER and iSCSI/TCP against rdisk's targets.
func TestLiveALUA(t *testing.T) {
	t.Parallel()
	for _, tr := range []struct {
		name string
		open func(t *testing.T, lu *scsi.LU) aluaTarget
	}{
		{"srp", aluaSRP},
		{"iser", aluaISCSI(iser.TransportISER)},
		{"iscsi-tcp", aluaISCSI(iser.TransportTCP)},
	} {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			naa := []byte{0x60, 0x01, 0x40, 0x5a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f, 0x60, 0x71, 0x82, 0x93, 0xa4, 0xb5, 0xc6}
			lu, err := scsi.NewLU(newLocked(t, 1<<20, 512), scsi.LUConfig{NAA: naa, NoReservations: true})
			if err != nil {
				t.Fatal(err)
			}
			at := tr.open(t, lu)
			d := at.dev
			if got := d.AccessState(); got != blockdev.AccessOptimized {
				t.Errorf("access state at open %v, want optimized", got)
			}
			if got, want := d.DiskID(), "naa.6001405a1b2c3d4e5f60718293a4b5c6"; got != want {
				t.Errorf("DiskID %q, want %q", got, want)
			}
			buf := make([]byte, 4096)
			if _, err := blockdev.ReadAt(d, buf, 0); err != nil {
				t.Fatal(err)
			}

			if err := at.setState(1, scsi.ALUAStandby); err != nil {
				t.Fatal(err)
			}
			if at.aer {
				waitState(t, d, blockdev.AccessInaccessible)
			}
			_, err = blockdev.ReadAt(d, buf, 0)
			var pe *blockdev.PathError
			if !errors.Is(err, blockdev.ErrPath) || !errors.As(err, &pe) || pe.State != blockdev.AccessInaccessible {
				t.Fatalf("read through a standby port: %v, want a PathError (inaccessible)", err)
			}
			if got := d.AccessState(); got != blockdev.AccessInaccessible {
				t.Errorf("access state after the refusal %v", got)
			}
			if st, err := d.RefreshAccessState(); err != nil || st != blockdev.AccessInaccessible {
				t.Errorf("RefreshAccessState in standby: %v %v", st, err)
			}

			if err := at.setState(1, scsi.ALUAActiveNonOptimized); err != nil {
				t.Fatal(err)
			}
			if at.aer {
				waitState(t, d, blockdev.AccessNonOptimized)
			}
			if _, err := blockdev.WriteAt(d, buf, 4096); err != nil {
				t.Fatalf("write after the change back: %v", err)
			}
			waitState(t, d, blockdev.AccessNonOptimized)
			if st, err := d.RefreshAccessState(); err != nil || st != blockdev.AccessNonOptimized {
				t.Errorf("RefreshAccessState: %v %v", st, err)
			}
		})
	}
}

// TestLiveALUATwoGateways: two iSCSI gateways (portal groups 1 and 2, each
// its own target) export one LU; each reports both groups. The host's two
// paths name the same disk and take their own group's state; a failover
// (group 1 standby, group 2 optimized, set on both gateways as the daemon
// does) moves I/O to the second path.
func TestLiveALUATwoGateways(t *testing.T) {
	t.Parallel()
	lu, err := scsi.NewLU(newLocked(t, 1<<20, 512), scsi.LUConfig{Name: "image0", NoReservations: true})
	if err != nil {
		t.Fatal(err)
	}
	groups := []scsi.PortGroupConfig{
		{ID: 1, State: scsi.ALUAActiveOptimized, Ports: []uint16{1}},
		{ID: 2, State: scsi.ALUAActiveNonOptimized, Ports: []uint16{2}},
	}
	var gws []*isertarget.Target
	var devs []*iserinit.Device
	for tpgt := uint16(1); tpgt <= 2; tpgt++ {
		tg, err := isertarget.New(isertarget.Config{
			Targets:        []isertarget.TargetConfig{{Name: testIQN, LUNs: []isertarget.LUNConfig{{LUN: 0, Unit: lu}}, PortGroups: groups}},
			Logger:         slog.New(slog.DiscardHandler),
			PortalGroupTag: tpgt,
		})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- tg.Serve(context.Background(), ln) }()
		t.Cleanup(func() {
			tg.Close()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
		h, port, _ := net.SplitHostPort(ln.Addr().String())
		n, _ := strconv.Atoi(port)
		d, err := iserinit.Open(ctx(t), iserinit.URL{Transport: iser.TransportTCP, Host: h, Port: n, Target: testIQN},
			iserinit.Config{InitiatorName: testInitiator, MaxTransfer: initiatorMaxTransfer, CommandTimeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		gws, devs = append(gws, tg), append(devs, d)
	}
	if devs[0].DiskID() == "" || devs[0].DiskID() != devs[1].DiskID() {
		t.Fatalf("disk IDs %q and %q", devs[0].DiskID(), devs[1].DiskID())
	}
	if a, b := devs[0].AccessState(), devs[1].AccessState(); a != blockdev.AccessOptimized || b != blockdev.AccessNonOptimized {
		t.Fatalf("states %v %v, want optimized, non-optimized", a, b)
	}
	if id := devs[1].Path().DeviceID(); id.RelativeTargetPort != 2 || id.PortGroup != 2 {
		t.Errorf("second path: port %d group %d", id.RelativeTargetPort, id.PortGroup)
	}
	for _, g := range gws {
		if err := g.SetPortGroupState(testIQN, 1, scsi.ALUAStandby); err != nil {
			t.Fatal(err)
		}
		if err := g.SetPortGroupState(testIQN, 2, scsi.ALUAActiveOptimized); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 4096)
	copy(buf, "through gateway 2")
	if _, err := blockdev.WriteAt(devs[0], buf, 0); !errors.Is(err, blockdev.ErrPath) {
		t.Fatalf("write through gateway 1: %v, want ErrPath", err)
	}
	if _, err := blockdev.WriteAt(devs[1], buf, 0); err != nil {
		t.Fatalf("write through gateway 2: %v", err)
	}
	waitState(t, devs[1], blockdev.AccessOptimized)
	if st, err := devs[0].RefreshAccessState(); err != nil || st != blockdev.AccessInaccessible {
		t.Errorf("gateway 1 path: %v %v", st, err)
	}
}
