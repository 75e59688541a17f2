package target

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/iser"
	iserinit "github.com/rdisk/rdisk/iser/initiator"
	"github.com/rdisk/rdisk/nvmeof/host"
	"github.com/rdisk/rdisk/scsi"
	scsihost "github.com/rdisk/rdisk/scsi/host"
)

// A gateway of a multipath pair: two ANA groups on port 1, namespace 1 in
// group 1 and namespace 2 in group 2, and two ALUA port groups (this
// gateway's portal is relative port 1, the other gateway's 2). Namespace 1
// is shared (another gateway serves it too).
const anaConfig = `{
  "subsystems": [{"nqn": "nqn.2026-12.io.rdisk:a", "attr": {"allow_any_host": "1", "cntlid_min": "100", "cntlid_max": "199"}, "namespaces": [
      {"nsid": 1, "enable": 1, "rdisk_shared": true, "rdisk_physical_block_size": 4096, "device": {"path": "ram:1MiB"}, "ana": {"grpid": "1"}},
      {"nsid": 2, "enable": 1, "device": {"path": "ram:1MiB"}, "ana_grpid": 2}]}],
  "ports": [{"portid": 1, "addr": {"trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": "0"},
             "ana_groups": [{"grpid": 1, "ana": {"state": "optimized"}}, {"grpid": 2, "ana": {"state": "non-optimized"}}],
             "subsystems": ["nqn.2026-12.io.rdisk:a"]}],
  "rdisk_iscsi": {"portals": ["127.0.0.1:0"], "tpgt": 1,
    "port_groups": [{"id": 1, "state": "active-optimized"}, {"id": 2, "state": "standby", "ports": [2]}],
    "targets": [{"iqn": "iqn.2026-12.io.rdisk:t", "luns": [{"lun": 0, "subsystem": "nqn.2026-12.io.rdisk:a", "nsid": 1}]}]}
}`

// TestANAConfigLive: ANA groups and ALUA port groups from the
// configuration reach hosts, and state changes through the model (the
// admin API) reach them live: an NVMe host sees each namespace's group
// state, follows an ANA change (and a namespace moved to another group)
// through the ANA Change event, gets ErrPath from an inaccessible group,
// and the gateway switch sets everything at once; the SCSI port groups
// change state live and a shared LU refuses reservations.
func TestANAConfigLive(t *testing.T) {
	t.Parallel()
	run, p := startConfig(t, anaConfig)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctrl := connectTCP(t, ctx, run, p, nqnA, host.Config{})
	ns := map[uint32]*host.Namespace{}
	for _, id := range []uint32{1, 2} {
		n, err := ctrl.Namespace(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		ns[id] = n
	}
	want := func(id uint32, st blockdev.AccessState) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for ns[id].AccessState() != st {
			if time.Now().After(deadline) {
				t.Fatalf("namespace %d: access state %s, want %s", id, ns[id].AccessState(), st)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	want(1, blockdev.AccessOptimized)
	want(2, blockdev.AccessNonOptimized)

	ch, err := run.SetANAState(1, 2, "inaccessible")
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Applied) != 1 || ch.Applied[0] != "port 1 ANA group 2: inaccessible" {
		t.Fatalf("changes %q", ch.Applied)
	}
	want(2, blockdev.AccessInaccessible)
	buf := make([]byte, 4096)
	if _, err := blockdev.ReadAt(ns[2], buf, 0); !errors.Is(err, blockdev.ErrPath) {
		t.Fatalf("read from an inaccessible group: %v, want ErrPath", err)
	}
	if _, err := blockdev.ReadAt(ns[1], buf, 0); err != nil {
		t.Fatalf("read from the optimized group: %v", err)
	}
	if _, err := run.SetNamespaceANAGroup(nqnA, 1, 2); err != nil {
		t.Fatal(err)
	}
	want(1, blockdev.AccessInaccessible)
	st := run.Status()
	if got := st.Ports[0].ANA; got[1] != "optimized" || got[2] != "inaccessible" {
		t.Fatalf("status ANA %v", got)
	}
	if st.Namespaces[0].ANAGroup != 2 || st.Namespaces[1].ANAGroup != 2 {
		t.Fatalf("status namespaces' groups %d %d", st.Namespaces[0].ANAGroup, st.Namespaces[1].ANAGroup)
	}
	if ms := gather(t, run.Collector(), "rdisk_ana_group_state", map[string]string{"port": "1", "group": "2"}); len(ms) != 1 || ms[0].GetLabel()[2].GetValue() != "inaccessible" {
		t.Fatalf("rdisk_ana_group_state of group 2: %v", ms)
	}
	// The model holds the change in nvmetcli's form: a restart serves it.
	c := run.Config()
	if g, _ := c.Subsystems[0].Namespaces[0].anaGroupID(); g != 2 {
		t.Fatalf("model: namespace 1 in group %d", g)
	}
	if _, err := run.SetGatewayState("non-optimized"); err != nil {
		t.Fatal(err)
	}
	want(1, blockdev.AccessNonOptimized)
	want(2, blockdev.AccessNonOptimized)
	if _, err := blockdev.ReadAt(ns[2], buf, 0); err != nil {
		t.Fatalf("read after the gateway switch: %v", err)
	}
	if _, err := run.SetANAState(1, 3, "sideways"); err == nil || !strings.Contains(err.Error(), `"sideways"`) {
		t.Fatalf("bad state: %v", err)
	}
	if _, err := run.SetANAState(9, 1, "optimized"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown port: %v", err)
	}

	// SCSI: the groups as configured, then live changes.
	groups := func() string {
		var b strings.Builder
		for _, g := range run.Status().ISCSIPortGroups {
			b.WriteString(g.State + " ")
		}
		return strings.TrimSpace(b.String())
	}
	if g := groups(); g != "active-non-optimized standby" {
		t.Fatalf("iSCSI port groups after the gateway switch: %q", g)
	}
	if _, err := run.SetPortGroupState("iscsi", 2, "optimized"); err != nil {
		t.Fatal(err)
	}
	if g := groups(); g != "active-non-optimized active-optimized" {
		t.Fatalf("iSCSI port groups: %q", g)
	}
	if _, err := run.SetPortGroupState("iscsi", 7, "standby"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown port group: %v", err)
	}
	h, _, _ := net.SplitHostPort(run.ISCSIPortals[0].String())
	dev, err := iserinit.Open(ctx, iserinit.URL{Transport: iser.TransportTCP, Host: h, Port: portOf(t, run.ISCSIPortals[0].String()), Target: "iqn.2026-12.io.rdisk:t"},
		iserinit.Config{InitiatorName: "iqn.2026-12.io.rdisk:ana-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if got := dev.AccessState(); got != blockdev.AccessNonOptimized {
		t.Fatalf("iSCSI path state %s, want non-optimized", got)
	}
	// PERSISTENT RESERVE OUT (REGISTER) on the shared LU: refused as LIO
	// without PR emulation refuses it.
	pr := &scsihost.Command{CDB: []byte{0x5f, 0, 0, 0, 0, 0, 0, 0, 24, 0}, Data: make([]byte, 24), Dir: scsi.DirOut}
	for i := 0; i < 3; i++ { // past the nexus's POWER ON unit attention
		if err := dev.Session().RunSCSI(ctx, pr); err != nil {
			t.Fatal(err)
		}
		sn, _ := scsi.ParseSense(pr.Sense)
		if pr.Status != scsi.StatusCheckCondition || sn.Key != scsi.KeyUnitAttention {
			break
		}
	}
	sn, _ := scsi.ParseSense(pr.Sense)
	if pr.Status != scsi.StatusCheckCondition || sn.Key != scsi.KeyIllegalRequest {
		t.Fatalf("PERSISTENT RESERVE OUT on a shared LU: status %v sense %+v, want ILLEGAL REQUEST", pr.Status, sn)
	}
	// rdisk_physical_block_size 4096 over 512-byte blocks: LOGICAL
	// BLOCKS PER PHYSICAL BLOCK EXPONENT 3 in READ CAPACITY(16).
	rc := &scsihost.Command{CDB: []byte{0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0}, Data: make([]byte, 32), Dir: scsi.DirIn}
	if err := dev.Session().RunSCSI(ctx, rc); err != nil || rc.Status != scsi.StatusGood {
		t.Fatalf("READ CAPACITY(16): %v status %v", err, rc.Status)
	}
	if exp := rc.Data[13] & 0x0f; exp != 3 {
		t.Fatalf("LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT %d, want 3", exp)
	}
}

// TestANAConfigErrors: bad ANA and ALUA settings are refused by Parse with
// the field named.
func TestANAConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ from, to, want string }{
		{`"state": "non-optimized"`, `"state": "sideways"`, `ports[0].ana_groups: port 1: ANA group 2: `},
		{`{"grpid": 2,`, `{"grpid": 200,`, `ANA group 200: want 1 to 128`},
		{`{"grpid": 2,`, `{"grpid": 1,`, `ANA group 1 is listed twice`},
		{`"ana_grpid": 2`, `"ana_grpid": 129`, `subsystems[0].namespaces[1].ana: namespace 2: ANA group 129`},
		{`"ana": {"grpid": "1"}`, `"ana": {"grpid": "x"}`, `ana.grpid "x" is not a number`},
		{`"ana": {"grpid": "1"}`, `"ana": {"group": "1"}`, `unknown attribute "group"`},
		{`"state": "standby", "ports": [2]`, `"state": "standby", "ports": [1]`, `rdisk_iscsi.port_groups: port group 2: relative target port 1 is in group 1 too`},
		{`"state": "standby", "ports": [2]`, `"state": "asleep", "ports": [2]`, `rdisk_iscsi.port_groups: port group 2: `},
		{`{"id": 1, "state": "active-optimized"}, `, ``, `this gateway's relative target port 1 is in no port group`},
		{`"rdisk_physical_block_size": 4096`, `"rdisk_physical_block_size": 3000`, `physical block size 3000: want a power of two`},
	} {
		js := strings.Replace(anaConfig, tc.from, tc.to, 1)
		if js == anaConfig {
			t.Fatalf("%q is not in the configuration", tc.from)
		}
		_, err := Parse(strings.NewReader(js))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s -> %s: %v, want %q", tc.from, tc.to, err, tc.want)
		}
	}
}

// sizeWatchingDisk is a RAM disk that notices "outside" resizes itself,
// as an RBD image's header watch does.
type sizeWatchingDisk struct {
	*backstore.Mem
	fn atomic.Pointer[func(int64)]
}

func (d *sizeWatchingDisk) WatchSize(f func(int64)) {
	if f == nil {
		d.fn.Store(nil)
		return
	}
	d.fn.Store(&f)
}

// grow resizes the disk behind the target's back and tells the watcher.
func (d *sizeWatchingDisk) grow(size int64) error {
	if err := d.Mem.Resize(size); err != nil {
		return err
	}
	if f := d.fn.Load(); f != nil {
		go (*f)(size)
	}
	return nil
}

// TestSizeWatcher: a disk that notices its own resize (backstore.
// SizeWatcher, as RBD's header watch) makes the target announce it: the
// connected host sees the new capacity without an admin command.
func TestSizeWatcher(t *testing.T) {
	t.Parallel()
	var disk *sizeWatchingDisk
	c, err := Parse(strings.NewReader(`{"subsystems": [{"nqn": "nqn.2026-12.io.rdisk:a", "attr": {"allow_any_host": "1"}, "namespaces": [
      {"nsid": 1, "enable": 1, "device": {"path": "watched"}}]}],
  "ports": [{"portid": 1, "addr": {"trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": "0"}, "subsystems": ["nqn.2026-12.io.rdisk:a"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	c.OpenDevice = func(path string, o DeviceOptions) (backstore.Disk, error) {
		m, err := backstore.NewMem(1<<20, 512)
		if err != nil {
			return nil, err
		}
		disk = &sizeWatchingDisk{Mem: m}
		return disk, nil
	}
	p := newIWARP(t)
	t.Cleanup(func() { p.Close() })
	run, err := Start(c, p, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctrl := connectTCP(t, ctx, run, p, nqnA, host.Config{})
	ns, err := ctrl.Namespace(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := ns.Info().Size; got != 1<<20 {
		t.Fatalf("size %d", got)
	}
	if err := disk.grow(4 << 20); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for ns.Info().Size != 4<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("the host still sees %d bytes after the disk grew to 4 MiB", ns.Info().Size)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := run.Status().Namespaces[0].Size; got != 4<<20 {
		t.Fatalf("status size %d", got)
	}
}

// TestISCSITimeoutsConfig: LIO's nopin_timeout, nopin_response_timeout
// and dataout_timeout are read, kept in the model and change with a
// restart only (a reload says so).
func TestISCSITimeoutsConfig(t *testing.T) {
	t.Parallel()
	js := strings.Replace(anaConfig, `"tpgt": 1,`, `"tpgt": 1, "nopin_timeout": 5, "nopin_response_timeout": -1, "dataout_timeout": 3,`, 1)
	run, _ := startConfig(t, js)
	ic := run.Config().ISCSI
	if ic.NopInTimeout != 5 || ic.NopInResponseTimeout != -1 || ic.DataOutTimeout != 3 {
		t.Fatalf("model: %+v", ic)
	}
	c, err := Parse(strings.NewReader(strings.Replace(js, `"dataout_timeout": 3`, `"dataout_timeout": 4`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := run.Apply(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Skipped) != 1 || !strings.Contains(ch.Skipped[0], "timeouts change with a restart") || run.Config().ISCSI.DataOutTimeout != 3 {
		t.Fatalf("reload: %+v", ch)
	}
	if _, err := Parse(strings.NewReader(strings.Replace(js, `"nopin_timeout": 5`, `"nopin_timeout": "5s"`, 1))); err == nil {
		t.Fatal("a string nopin_timeout was accepted")
	}
}
