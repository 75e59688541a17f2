package target

import (
	"context"
	"encoding/binary"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdisk/rdisk/iser"
	iserinit "github.com/rdisk/rdisk/iser/initiator"
	"github.com/rdisk/rdisk/scsi"
	"github.com/rdisk/rdisk/scsi/host"
	srpinit "github.com/rdisk/rdisk/srp/initiator"
)

const scsiConfig = `{
  "subsystems": [{"nqn": "nqn.2026-11.io.rdisk:scsi", "attr": {"allow_any_host": "1"},
    "namespaces": [{"nsid": 1, "enable": 1, "device": {"path": "ram:4MiB"}}, {"nsid": 2, "enable": 1, "device": {"path": "ram:1MiB"}}]}],
  "rdisk_iscsi": {"portals": ["127.0.0.1:0"],
    "targets": [{"iqn": "iqn.2026-11.io.rdisk:cfg", "luns": [{"lun": 0, "subsystem": "nqn.2026-11.io.rdisk:scsi", "nsid": 1},
                                                      {"lun": 1, "subsystem": "nqn.2026-11.io.rdisk:scsi", "nsid": 2}]}]},
  "rdisk_srp": {"listen": ["127.0.0.1:0"],
    "ports": [{"id_ext": "0000000000000007", "ioc_guid": "726469736b000007", "allow_any_initiator": true,
               "luns": [{"lun": 0, "subsystem": "nqn.2026-11.io.rdisk:scsi", "nsid": 1}]}]}
}`

// TestConfigSCSITransports: the config's rdisk_iscsi and rdisk_srp
// sections export namespaces over iSCSI and SRP; a namespace exported both
// ways is one logical unit (an iSCSI reservation binds SRP).
func TestConfigSCSITransports(t *testing.T) {
	t.Parallel()
	c, err := Parse(strings.NewReader(scsiConfig))
	if err != nil {
		t.Fatal(err)
	}
	p := newIWARP(t)
	defer p.Close()
	run, err := Start(c, p, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	if run.ISCSI == nil || len(run.ISCSIPortals) != 1 || run.SRP == nil || len(run.SRPAddrs) != 1 {
		t.Fatalf("SCSI transports not started: %+v", run)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, port, _ := net.SplitHostPort(run.ISCSIPortals[0].String())
	n, _ := strconv.Atoi(port)
	idev, err := iserinit.Open(ctx, iserinit.URL{Transport: iser.TransportTCP, Host: h, Port: n, Target: "iqn.2026-11.io.rdisk:cfg"},
		iserinit.Config{InitiatorName: "iqn.2026-11.io.rdisk:cfg-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer idev.Close()
	if idev.Info().Size != 4<<20 {
		t.Fatalf("iSCSI LUN 0 is %d bytes, want namespace 1's 4 MiB", idev.Info().Size)
	}
	sdev, err := srpinit.Open(ctx, p, run.SRPPorts[0].URL(run.SRPAddrs[0].String()), srpinit.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer sdev.Close()
	run1 := func(r host.Runner, c *host.Command) scsi.Status {
		if err := r.RunSCSI(ctx, c); err != nil {
			t.Fatal(err)
		}
		return c.Status
	}
	for _, r := range []host.Runner{idev.Session(), sdev.Session()} {
		for range 3 {
			run1(r, &host.Command{CDB: make([]byte, 6)})
		}
	}
	prOut := func(sa, typ uint8, key, sark uint64) *host.Command {
		c := &host.Command{CDB: make([]byte, 10), Data: make([]byte, 24), Dir: scsi.DirOut}
		c.CDB[0], c.CDB[1], c.CDB[2] = 0x5f, sa, typ
		binary.BigEndian.PutUint32(c.CDB[5:], 24)
		binary.BigEndian.PutUint64(c.Data[0:], key)
		binary.BigEndian.PutUint64(c.Data[8:], sark)
		return c
	}
	if st := run1(idev.Session(), prOut(0, 0, 0, 7)); st != scsi.StatusGood {
		t.Fatalf("REGISTER: %v", st)
	}
	if st := run1(idev.Session(), prOut(1, 1, 7, 0)); st != scsi.StatusGood {
		t.Fatalf("RESERVE: %v", st)
	}
	w := &host.Command{CDB: []byte{0x2a, 0, 0, 0, 0, 0, 0, 0, 1, 0}, Data: make([]byte, 512), Dir: scsi.DirOut}
	if st := run1(sdev.Session(), w); st != scsi.StatusReservationConflict {
		t.Fatalf("SRP WRITE under the iSCSI reservation: %v", st)
	}
}

func TestConfigSCSIErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ from, to, want string }{
		{`"nsid": 2}]}]}`, `"nsid": 3}]}]}`, "rdisk_iscsi.targets[0].luns[1].nsid: subsystem nqn.2026-11.io.rdisk:scsi has no namespace 3"},
		{`{"lun": 1, "subsystem"`, `{"lun": 0, "subsystem"`, "rdisk_iscsi.targets[0].luns[1].lun: LUN 0 is used twice"},
		{`"portals": ["127.0.0.1:0"]`, `"portals": ["192.0.2.1:3260"]`, "lets any initiator in"},
		{`"listen": ["127.0.0.1:0"]`, `"listen": []`, "rdisk_srp.listen: no address to listen on"},
		{`"id_ext": "0000000000000007"`, `"id_ext": "xyz"`, "rdisk_srp.ports[0].id_ext"},
		{`"allow_any_initiator": true`, `"allow_any_initiatr": true`, `unknown key "allow_any_initiatr"`},
		{`"listen": ["127.0.0.1:0"]`, `"listen": ["127.0.0.1:0"], "rdisk_rdma": "rxe"`, `rdisk_srp.rdisk_rdma: "rxe": want auto, iwarp or verbs`},
		{`"portals": ["127.0.0.1:0"]`, `"portals": ["127.0.0.1:0"], "rdisk_rdma": "mlx5"`, `rdisk_iscsi.rdisk_rdma: "mlx5": want auto, iwarp or verbs`},
	} {
		_, err := Parse(strings.NewReader(strings.Replace(scsiConfig, tc.from, tc.to, 1)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s -> %s: %v, want %q", tc.from, tc.to, err, tc.want)
		}
	}
}
