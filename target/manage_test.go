package target

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/iser"
	iserinit "github.com/rdisk/rdisk/iser/initiator"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/host"
	"github.com/rdisk/rdisk/rdma/iwarp"
	"github.com/rdisk/rdisk/scsi"
	scsihost "github.com/rdisk/rdisk/scsi/host"
)

const (
	nqnA  = "nqn.2026-12.io.rdisk:a"
	nqnB  = "nqn.2026-12.io.rdisk:b"
	hostX = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-00000000000a"
)

// The model before and after a reload: namespace A/1 and port 1 stay;
// A/2 goes, A/3 comes, B goes (with its link and its iSCSI LUN), A/1
// grows, a host is allowed, an iSCSI LUN is added.
const applyBefore = `{
  "subsystems": [
    {"nqn": "nqn.2026-12.io.rdisk:a", "attr": {"allow_any_host": "1"}, "namespaces": [
      {"nsid": 1, "enable": 1, "device": {"path": "ram:8MiB"}},
      {"nsid": 2, "enable": 1, "device": {"path": "ram:1MiB"}}]},
    {"nqn": "nqn.2026-12.io.rdisk:b", "attr": {"allow_any_host": "1"}, "namespaces": [
      {"nsid": 1, "enable": 1, "device": {"path": "ram:1MiB"}}]}],
  "ports": [{"portid": 1, "addr": {"trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": "0"},
             "subsystems": ["nqn.2026-12.io.rdisk:a", "nqn.2026-12.io.rdisk:b"]}],
  "rdisk_iscsi": {"portals": ["127.0.0.1:0"], "targets": [{"iqn": "iqn.2026-12.io.rdisk:t",
    "luns": [{"lun": 0, "subsystem": "nqn.2026-12.io.rdisk:a", "nsid": 1}, {"lun": 1, "subsystem": "nqn.2026-12.io.rdisk:b", "nsid": 1}]}]}
}`

const applyAfter = `{
  "subsystems": [
    {"nqn": "nqn.2026-12.io.rdisk:a", "attr": {"allow_any_host": "1"}, "allowed_hosts": ["` + hostX + `"], "namespaces": [
      {"nsid": 1, "enable": 1, "device": {"path": "ram:16MiB"}},
      {"nsid": 3, "enable": 1, "device": {"path": "null:2MiB"}}]}],
  "ports": [{"portid": 1, "addr": {"trtype": "tcp", "traddr": "127.0.0.1", "trsvcid": "0"},
             "subsystems": ["nqn.2026-12.io.rdisk:a"]}],
  "rdisk_iscsi": {"portals": ["127.0.0.1:0"], "targets": [{"iqn": "iqn.2026-12.io.rdisk:t",
    "luns": [{"lun": 0, "subsystem": "nqn.2026-12.io.rdisk:a", "nsid": 1}, {"lun": 2, "subsystem": "nqn.2026-12.io.rdisk:a", "nsid": 3}]}]}
}`

func startConfig(t *testing.T, js string) (*Running, *iwarp.Provider) {
	t.Helper()
	c, err := Parse(strings.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	p := newIWARP(t)
	t.Cleanup(func() { p.Close() })
	run, err := Start(c, p, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Close() })
	return run, p
}

// connectTCP connects an NVMe/TCP host to subsystem nqn of run's port 1.
func connectTCP(t *testing.T, ctx context.Context, run *Running, p *iwarp.Provider, nqn string, cfg host.Config) *host.Controller {
	t.Helper()
	cfg.Transport = host.TransportTCP
	cfg.HostNQN, cfg.HostID = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555", [16]byte{1, 2, 3}
	cfg.IOQueues, cfg.QueueDepth = 1, 16
	c, err := host.Connect(ctx, p, run.T.Port(1).Addr().String(), nqn, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestApplyDifference: applying a changed configuration (SIGHUP) changes
// exactly what differs: a host connected to a namespace that stays keeps
// its controller and its data, and the changes reported are the
// difference, line by line.
func TestApplyDifference(t *testing.T) {
	t.Parallel()
	run, p := startConfig(t, applyBefore)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctrl := connectTCP(t, ctx, run, p, nqnA, host.Config{})
	ns, err := ctrl.Namespace(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("rdisk-apply-"), 4096/12+1)[:4096]
	if _, err := blockdev.WriteAt(ns, data, 8192); err != nil {
		t.Fatal(err)
	}
	after, err := Parse(strings.NewReader(applyAfter))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := run.Apply(after)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"iscsi target iqn.2026-12.io.rdisk:t LUN 1: unmapped",
		"subsystem nqn.2026-12.io.rdisk:a namespace 2: removed",
		"subsystem nqn.2026-12.io.rdisk:b: removed", // and unlinked from port 1
		"subsystem nqn.2026-12.io.rdisk:a: host " + hostX + " allowed",
		"subsystem nqn.2026-12.io.rdisk:a namespace 1: resized to ram:16MiB",
		"subsystem nqn.2026-12.io.rdisk:a namespace 3: added (null:2MiB)",
		"iscsi target iqn.2026-12.io.rdisk:t LUN 2: mapped to nqn.2026-12.io.rdisk:a namespace 3",
	}
	if !slices.Equal(ch.Applied, want) || len(ch.Skipped) != 0 {
		t.Fatalf("applied:\n%s\nskipped %v\nwant:\n%s", strings.Join(ch.Applied, "\n"), ch.Skipped, strings.Join(want, "\n"))
	}
	// The host of A stays connected, with its data.
	select {
	case <-ctrl.Done():
		t.Fatalf("the controller of %s was disconnected: %v", nqnA, ctrl.Err())
	default:
	}
	got := make([]byte, 4096)
	if _, err := blockdev.ReadAt(ns, got, 8192); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("namespace 1 after the reload: %v, data equal %v", err, bytes.Equal(got, data))
	}
	if run.T.Subsystem(nqnB) != nil {
		t.Fatalf("subsystem %s still served", nqnB)
	}
	var nsids []uint32
	for _, n := range run.T.Subsystem(nqnA).Namespaces() {
		nsids = append(nsids, n.NSID)
		if n.NSID == 1 && n.Blocks != 16<<20/512 {
			t.Fatalf("namespace 1 has %d blocks, want 16 MiB", n.Blocks)
		}
	}
	if !slices.Equal(nsids, []uint32{1, 3}) {
		t.Fatalf("namespaces %v, want 1 and 3", nsids)
	}
	if !same(run.Config(), after) {
		t.Fatalf("model after the reload differs from the file:\n%+v\n%+v", run.Config(), after)
	}
	// Applying the same again changes nothing.
	if ch, err := run.Apply(after); err != nil || len(ch.Applied)+len(ch.Skipped) != 0 {
		t.Fatalf("a second apply: %v %+v", err, ch)
	}
	// A bad configuration changes nothing.
	bad := after.clone()
	bad.Subsystems[0].Namespaces = append(bad.Subsystems[0].Namespaces, Namespace{NSID: 3})
	bad.Subsystems[0].Namespaces[2].Device.Path = "ram:1MiB"
	if _, err := run.Apply(bad); err == nil || !strings.Contains(err.Error(), "nsid 3 is used twice") {
		t.Fatalf("a duplicate nsid: %v", err)
	}
	missing := after.clone()
	missing.Subsystems[0].Namespaces = append(missing.Subsystems[0].Namespaces, Namespace{NSID: 4, Enable: 1})
	missing.Subsystems[0].Namespaces[2].Device.Path = filepath.Join(t.TempDir(), "nonexistent")
	if _, err := run.Apply(missing); err == nil || !strings.Contains(err.Error(), "namespace 4") {
		t.Fatalf("a missing file: %v", err)
	}
	if !same(run.Config(), after) {
		t.Fatal("a refused configuration changed the model")
	}
}

// TestApplyRestartOnly: the SCSI listening addresses change only with a
// restart; a reload says so and applies the rest.
func TestApplyRestartOnly(t *testing.T) {
	t.Parallel()
	run, _ := startConfig(t, applyBefore)
	c := run.Config()
	c.ISCSI.Portals = []string{"127.0.0.1:1"}
	c.Subsystems[1].Namespaces[0].Enable = 0
	ch, err := run.Apply(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Skipped) != 1 || !strings.Contains(ch.Skipped[0], "restart") ||
		!slices.Equal(ch.Applied, []string{"subsystem nqn.2026-12.io.rdisk:b namespace 1: disabled"}) {
		t.Fatalf("%+v", ch)
	}
	if got := run.Config().ISCSI.Portals; !slices.Equal(got, []string{"127.0.0.1:0"}) {
		t.Fatalf("portals in the model: %v", got)
	}
}

// TestAdminSocket drives the admin socket as rdisk admin does: add,
// resize and remove a namespace while a host is connected (it gets the
// Namespace Attribute Changed events), errors name what is wrong, and the
// saved configuration restarts into the same model.
func TestAdminSocket(t *testing.T) {
	t.Parallel()
	run, p := startConfig(t, applyBefore)
	sock := filepath.Join(t.TempDir(), "admin.sock")
	ln, err := ListenAdmin(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go ServeAdmin(ctx, ln, run.AdminHandler(nil, nil), run.log)
	if _, err := ListenAdmin(sock); err == nil || !strings.Contains(err.Error(), "another rdisk target") {
		t.Fatalf("a second listener on a live socket: %v", err)
	}
	events := make(chan host.Event, 16)
	ctrl := connectTCP(t, ctx, run, p, nqnA, host.Config{OnEvent: func(e host.Event) { events <- e }})
	a := NewAdminClient(sock)
	waitNS := func(what string) {
		t.Helper()
		select {
		case e := <-events:
			if e.Info != nvmeof.NoticeNSChanged || !(e.AllNamespaces || slices.Contains(e.Namespaces, 5)) {
				t.Fatalf("%s: event %+v", what, e)
			}
		case <-ctx.Done():
			t.Fatalf("%s: no Namespace Attribute Changed event", what)
		}
	}
	var ch Changes
	ns := Namespace{NSID: 5, Enable: 1}
	ns.Device.Path = "ram:2MiB"
	if err := a.Do(ctx, http.MethodPost, "/v1/subsystems/"+nqnA+"/namespaces", ns, &ch); err != nil {
		t.Fatal(err)
	}
	waitNS("add")
	n5, err := ctrl.Namespace(ctx, 5)
	if err != nil || n5.Info().Size != 2<<20 {
		t.Fatalf("the added namespace: %v", err)
	}
	if err := a.Do(ctx, http.MethodPost, "/v1/subsystems/"+nqnA+"/namespaces/5/resize", ResizeRequest{Size: "4MiB"}, &ch); err != nil {
		t.Fatal(err)
	}
	waitNS("resize")
	if got := n5.Info().Size; got != 4<<20 {
		t.Fatalf("the host sees %d bytes after the resize, want 4 MiB", got)
	}
	var st Status
	if err := a.Do(ctx, http.MethodGet, "/v1/status", nil, &st); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(st.Namespaces, func(n NamespaceStatus) bool { return n.Subsystem == nqnA && n.NSID == 5 })
	if i < 0 || st.Namespaces[i].Size != 4<<20 || st.Namespaces[i].Device != "ram:4MiB" {
		t.Fatalf("status after the resize: %+v", st.Namespaces)
	}
	if len(st.Controllers) != 1 || st.Controllers[0].Subsystem != nqnA || st.Controllers[0].Transport != "tcp" {
		t.Fatalf("controllers: %+v", st.Controllers)
	}
	if err := a.Do(ctx, http.MethodDelete, "/v1/subsystems/"+nqnA+"/namespaces/5", nil, &ch); err != nil {
		t.Fatal(err)
	}
	waitNS("remove")
	buf := make([]byte, 512)
	_, err = blockdev.ReadAt(n5, buf, 0)
	var se *host.StatusError
	if !errors.As(err, &se) || se.Status.Code() != nvmeof.StatusInvalidNamespace {
		t.Fatalf("a read of the removed namespace: %v", err)
	}
	// Errors.
	const nqnC = "nqn.2026-12.io.rdisk:c"
	if err := a.Do(ctx, http.MethodPost, "/v1/subsystems", Subsystem{NQN: nqnC}, &ch); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, path string
		body         any
		want         string
		notFound     bool
	}{
		{http.MethodDelete, "/v1/subsystems/nqn.2026-12.io.rdisk:none/namespaces/1", nil, "subsystem nqn.2026-12.io.rdisk:none", true},
		{http.MethodPost, "/v1/subsystems/" + nqnA + "/namespaces", map[string]any{"nsid": 1, "device": map[string]string{"path": "ram:1MiB"}}, "already has namespace 1", false},
		{http.MethodPost, "/v1/subsystems/" + nqnA + "/namespaces", map[string]any{"nsid": 9, "devise": 1}, `unknown field "devise"`, false},
		{http.MethodPost, "/v1/subsystems/" + nqnA + "/namespaces", map[string]any{"nsid": 2000, "device": map[string]string{"path": "ram:1MiB"}}, "nsid 2000: want 1 to 1024", false},
		{http.MethodPost, "/v1/subsystems/" + nqnA + "/namespaces/1/resize", ResizeRequest{Size: "lots"}, "size:", false},
		{http.MethodPost, "/v1/subsystems/" + nqnA + "/namespaces/1/resize", ResizeRequest{Size: "1MiB"}, "shrink", false},
		{http.MethodPost, "/v1/ports", Port{PortID: 2, Addr: PortAddr{TrType: "tcp", TrAddr: "192.0.2.1", TrSvcID: "4420"}, Subsystems: []string{nqnC}}, "subsystem nqn.2026-12.io.rdisk:c on port 2 (192.0.2.1, not loopback) lets no host in", false},
		{http.MethodPost, "/v1/ports", Port{PortID: 2, Addr: PortAddr{TrType: "tcp", TrAddr: "192.0.2.1", TrSvcID: "4420"}, Subsystems: []string{nqnB}}, "port 2: listen tcp 192.0.2.1:4420", false},
		{http.MethodPost, "/v1/ports/7/subsystems/" + nqnA, nil, "port 7", true},
		{http.MethodDelete, "/v1/nvme/controllers/" + nqnA + "/999", nil, "999", true},
		{http.MethodPost, "/v1/reload", nil, "nothing to reload", false},
	} {
		err := a.Do(ctx, tc.method, tc.path, tc.body, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, ErrNotFound) != tc.notFound {
			t.Errorf("%s %s: %v, want %q (not found %v)", tc.method, tc.path, err, tc.want, tc.notFound)
		}
	}
	if findPort(run.Config(), 2) != nil {
		t.Fatal("a port that could not listen is in the model")
	}
	// Save and restart: the same model.
	var saved Config
	if err := a.Do(ctx, http.MethodGet, "/v1/config", nil, &saved); err != nil {
		t.Fatal(err)
	}
	js, err := saved.JSON()
	if err != nil {
		t.Fatal(err)
	}
	again, _ := startConfig(t, string(js))
	if !same(again.Config(), run.Config()) {
		t.Fatalf("restarted from the saved file:\n%s\nwas\n%+v", js, run.Config())
	}
	var res SaveResult
	if err := a.Do(ctx, http.MethodGet, "/v1/config?format=nvmetcli", nil, &res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(res.Config), `"allow_any_host": "1"`) || len(res.Warnings) == 0 {
		t.Fatalf("nvmetcli save: %s %v", res.Config, res.Warnings)
	}
}

// TestAdminSCSI: LUNs mapped, unmapped and resized live reach a logged-in
// iSCSI session as unit attentions; the ACL and closing a session work.
func TestAdminSCSI(t *testing.T) {
	t.Parallel()
	run, _ := startConfig(t, applyBefore)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const iqn = "iqn.2026-12.io.rdisk:t"
	login := func(name string) (*iserinit.Device, error) {
		h, port, _ := net.SplitHostPort(run.ISCSIPortals[0].String())
		n, _ := strconv.Atoi(port)
		return iserinit.Open(ctx, iserinit.URL{Transport: iser.TransportTCP, Host: h, Port: n, Target: iqn}, iserinit.Config{InitiatorName: name})
	}
	const me = "iqn.2026-12.io.rdisk:admin-test"
	dev, err := login(me)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	s := dev.Session()
	tur := func(lun uint64) (scsi.Status, scsi.ASC) {
		c := &scsihost.Command{LUN: lun, CDB: make([]byte, 6)}
		if err := s.RunSCSI(ctx, c); err != nil {
			t.Fatal(err)
		}
		if c.Status != scsi.StatusCheckCondition {
			return c.Status, 0
		}
		sn, err := scsi.ParseSense(c.Sense)
		if err != nil {
			t.Fatal(err)
		}
		return c.Status, sn.ASC
	}
	settle := func(lun uint64) { // a new nexus reports POWER ON first
		for i := 0; i < 5; i++ {
			if st, _ := tur(lun); st == scsi.StatusGood {
				return
			}
		}
		t.Fatalf("LUN %d does not become ready", lun)
	}
	settle(0)
	expectUA := func(what string, lun uint64, want scsi.ASC) {
		t.Helper()
		st, asc := tur(lun)
		if st != scsi.StatusCheckCondition || asc != want {
			t.Fatalf("%s: status %v ASC %v, want CHECK CONDITION %v", what, st, asc, want)
		}
		if st, _ := tur(lun); st != scsi.StatusGood {
			t.Fatalf("%s: the unit attention was not cleared: %v", what, st)
		}
	}
	if _, err := run.MapISCSILUN(iqn, LUNRef{LUN: 7, Subsystem: nqnA, NSID: 2}); err != nil {
		t.Fatal(err)
	}
	expectUA("map", 0, scsi.ASCReportedLUNsDataChanged)
	settle(7)
	if _, err := run.ResizeNamespace(nqnA, 2, 2<<20); err != nil {
		t.Fatal(err)
	}
	expectUA("resize", 7, scsi.ASCCapacityDataChanged)
	if _, err := run.UnmapISCSILUN(iqn, 7); err != nil {
		t.Fatal(err)
	}
	expectUA("unmap", 0, scsi.ASCReportedLUNsDataChanged)
	if st, asc := tur(7); st != scsi.StatusCheckCondition || asc != scsi.ASCLUNotSupported {
		t.Fatalf("the unmapped LUN: %v %v", st, asc)
	}
	st := run.Status()
	if len(st.ISCSISessions) != 1 || st.ISCSISessions[0].Initiator != me || st.ISCSISessions[0].Commands == 0 {
		t.Fatalf("iscsi sessions: %+v", st.ISCSISessions)
	}
	// The ACL: with one name allowed, another may not log in.
	if _, err := run.AllowISCSIInitiator(iqn, me); err != nil {
		t.Fatal(err)
	}
	if d, err := login("iqn.2026-12.io.rdisk:stranger"); err == nil {
		d.Close()
		t.Fatal("an initiator not in the ACL logged in")
	}
	if err := run.CloseISCSISession(st.ISCSISessions[0].TSIH); err != nil {
		t.Fatal(err)
	}
	c := &scsihost.Command{CDB: make([]byte, 6)}
	if err := s.RunSCSI(ctx, c); err == nil && c.Status == scsi.StatusGood {
		t.Fatal("a closed session still runs commands")
	}
	if err := run.CloseISCSISession(st.ISCSISessions[0].TSIH); !errors.Is(err, ErrNotFound) {
		t.Fatalf("closing it again: %v", err)
	}
}

// TestIdentitiesAcrossRestart: a restart from the same configuration
// presents the same identities (NVMe controller serial, namespace NGUID
// and UUID, SCSI unit serial and device identification VPD, SRP port ID),
// and no two namespaces share one.
func TestIdentitiesAcrossRestart(t *testing.T) {
	t.Parallel()
	type ids struct {
		ns   []NamespaceStatus
		vpd  [][]byte
		srps []string
	}
	snapshot := func() ids {
		run, _ := startConfig(t, scsiConfig)
		defer run.Close()
		var out ids
		out.ns = run.Status().Namespaces
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		h, port, _ := net.SplitHostPort(run.ISCSIPortals[0].String())
		n, _ := strconv.Atoi(port)
		dev, err := iserinit.Open(ctx, iserinit.URL{Transport: iser.TransportTCP, Host: h, Port: n, Target: "iqn.2026-11.io.rdisk:cfg"},
			iserinit.Config{InitiatorName: "iqn.2026-12.io.rdisk:ids"})
		if err != nil {
			t.Fatal(err)
		}
		defer dev.Close()
		for _, lun := range []uint64{0, 1} {
			for _, page := range []byte{0x80, 0x83} {
				c := &scsihost.Command{LUN: lun, CDB: []byte{0x12, 1, page, 0, 255, 0}, Data: make([]byte, 255), Dir: scsi.DirIn}
				if err := scsihost.Do(ctx, dev.Session(), c); err != nil {
					t.Fatalf("INQUIRY VPD %#x of LUN %d: %v", page, lun, err)
				}
				out.vpd = append(out.vpd, slices.Clone(c.DataIn()))
			}
		}
		for _, p := range run.SRPPorts {
			out.srps = append(out.srps, p.ID().String())
		}
		return out
	}
	a, b := snapshot(), snapshot()
	if !same(a, b) {
		t.Fatalf("identities changed across a restart:\n%+v\n%+v", a, b)
	}
	if a.ns[0].NGUID == a.ns[1].NGUID || a.ns[0].UUID == a.ns[1].UUID || bytes.Equal(a.vpd[0], a.vpd[2]) || bytes.Equal(a.vpd[1], a.vpd[3]) {
		t.Fatalf("two namespaces share an identity: %+v %x", a.ns, a.vpd)
	}
	if a.ns[0].NGUID == "" || len(a.vpd[0]) < 8 {
		t.Fatalf("no identities: %+v %x", a.ns, a.vpd)
	}
}

// TestISCSIACLs: an ACL's mapped LUNs are all its initiator sees (under
// their numbers, write-protected where asked), other initiators see every
// LUN; changing the ACL live changes what a running session sees; a LUN
// unmapped leaves the ACLs that named it.
func TestISCSIACLs(t *testing.T) {
	t.Parallel()
	const iqn = "iqn.2026-12.io.rdisk:t"
	const alice, bob = "iqn.2026-12.io.rdisk:alice", "iqn.2026-12.io.rdisk:bob"
	js := strings.Replace(applyBefore, `"luns": [{"lun": 0,`, `"allowed_initiators": ["`+bob+`"],
      "acls": [{"initiator": "`+alice+`", "mapped_luns": [{"mapped_lun": 5, "lun": 1, "write_protect": true}]}],
      "luns": [{"lun": 0,`, 1)
	run, _ := startConfig(t, js)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	login := func(name string, lun uint64) *iserinit.Device {
		t.Helper()
		h, port, _ := net.SplitHostPort(run.ISCSIPortals[0].String())
		n, _ := strconv.Atoi(port)
		d, err := iserinit.Open(ctx, iserinit.URL{Transport: iser.TransportTCP, Host: h, Port: n, Target: iqn, LUN: lun, HasLUN: true}, iserinit.Config{InitiatorName: name})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	reportLUNs := func(d *iserinit.Device) []uint64 {
		t.Helper()
		luns, err := scsihost.ReportLUNs(ctx, d.Session())
		if err != nil {
			t.Fatal(err)
		}
		return luns
	}
	a, b := login(alice, 5), login(bob, 0)
	if got := reportLUNs(a); !slices.Equal(got, []uint64{5}) {
		t.Fatalf("alice sees %v, want [5]", got)
	}
	if got := reportLUNs(b); !slices.Equal(got, []uint64{0, 1}) {
		t.Fatalf("bob sees %v, want [0 1]", got)
	}
	w := &scsihost.Command{LUN: 5, CDB: []byte{0x2a, 0, 0, 0, 0, 0, 0, 0, 1, 0}, Data: make([]byte, 512), Dir: scsi.DirOut}
	err := scsihost.Do(ctx, a.Session(), w)
	if sn, perr := scsi.ParseSense(w.Sense); err == nil || perr != nil || sn.Key != scsi.KeyDataProtect {
		t.Fatalf("a write through alice's write-protected LUN 5: %v %+v", err, w)
	}
	// Live: alice gets LUN 0 as 3, writable.
	if _, err := run.SetISCSIACL(iqn, ISCSIACL{Initiator: alice, MappedLUNs: []MappedLUN{{MappedLUN: 3, LUN: 0}}}); err != nil {
		t.Fatal(err)
	}
	if got := reportLUNs(a); !slices.Equal(got, []uint64{3}) {
		t.Fatalf("alice sees %v after the change, want [3]", got)
	}
	w.LUN = 3
	if err := scsihost.Do(ctx, a.Session(), w); err != nil {
		t.Fatalf("a write through alice's LUN 3: %v", err)
	}
	if _, err := run.SetISCSIACL(iqn, ISCSIACL{Initiator: alice, MappedLUNs: []MappedLUN{{MappedLUN: 3, LUN: 9}}}); err == nil || !strings.Contains(err.Error(), "has no LUN 9") {
		t.Fatalf("an ACL naming a missing LUN: %v", err)
	}
	if _, err := run.UnmapISCSILUN(iqn, 0); err != nil {
		t.Fatal(err)
	}
	acls := run.Config().iscsiTarget(iqn).ACLs
	if len(acls) != 1 || len(acls[0].MappedLUNs) != 0 {
		t.Fatalf("ACLs after LUN 0 was unmapped: %+v", acls)
	}
	if got := reportLUNs(a); len(got) != 0 {
		t.Fatalf("alice sees %v after her only LUN was unmapped", got)
	}
}
