package target

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/host"
	"github.com/rdisk/rdisk/rdma/iwarp"
)

// Tests of Asymmetric Namespace Access (ana.go), with rdisk's host.

// anaTarget is a target with cfg, subsystem testNQN and namespace 1 (a
// RAM disk of 1 MiB), not yet on a port.
func anaTarget(t *testing.T, cfg Config, tr Transport) (*Target, *Subsystem) {
	t.Helper()
	cfg.Logger = slog.New(slog.DiscardHandler)
	if tr != TransportTCP {
		p, err := iwarp.New(iwarp.Config{})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Provider = p
	}
	tg, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	sub, err := tg.AddSubsystem(SubsystemConfig{NQN: testNQN, AllowAnyHost: true})
	if err != nil {
		t.Fatal(err)
	}
	addMem(t, sub, 1, 0)
	return tg, sub
}

// addMem adds namespace nsid, a 1 MiB RAM disk, in ANA group grp.
func addMem(t *testing.T, sub *Subsystem, nsid, grp uint32) {
	t.Helper()
	d, err := backstore.NewMem(1<<20, 512)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.AddNamespace(NamespaceConfig{NSID: nsid, Disk: d, ANAGroupID: grp}); err != nil {
		t.Fatal(err)
	}
}

// anaPort adds port id with groups and links sub.
func anaPort(t *testing.T, tg *Target, sub *Subsystem, id uint16, tr Transport, groups map[uint32]nvmeof.ANAState) *Port {
	t.Helper()
	p, err := tg.AddPort(PortConfig{ID: id, Addr: "127.0.0.1:0", Transport: tr, ANAGroups: groups})
	if err != nil {
		t.Fatal(err)
	}
	p.LinkSubsystem(sub)
	return p
}

func TestANAIdentify(t *testing.T) {
	t.Parallel()
	tg, sub := anaTarget(t, Config{ANATransitionTime: 2500 * time.Millisecond}, TransportTCP)
	addMem(t, sub, 2, 7)
	p := anaPort(t, tg, sub, 1, TransportTCP, nil)
	c := mustHost(t, TransportTCP, p.Addr().String(), testNQN, hostCfg("nqn.2014-08.org.nvmexpress:uuid:ana-identify"))
	id := c.Identify()
	want := nvmeof.CMICMultiPort | nvmeof.CMICMultiCtrl | nvmeof.CMICANA
	if id.CMIC != want || id.ANACAP != nvmeof.ANACAPAllStates || id.ANATT != 3 || id.ANAGRPMAX != 128 || id.NANAGRPID != 128 ||
		id.MNAN != 1024 || id.NN != 1024 || id.OAES&nvmeof.AENConfigANAChange == 0 {
		t.Errorf("CMIC %#x ANACAP %#x ANATT %d ANAGRPMAX %d NANAGRPID %d MNAN %d NN %d OAES %#x", id.CMIC, id.ANACAP, id.ANATT,
			id.ANAGRPMAX, id.NANAGRPID, id.MNAN, id.NN, id.OAES)
	}
	// Linux nvme_mpath_init_identify: the log must fit MDTS.
	if size := nvmeof.ANALogSize(int(id.NANAGRPID), int(id.MNAN)); size > 4096<<id.MDTS {
		t.Errorf("ANA log of %d bytes exceeds MDTS %d", size, 4096<<id.MDTS)
	}
	for nsid, grp := range map[uint32]uint32{1: 1, 2: 7} {
		ns, err := c.IdentifyNamespace(context.Background(), nsid)
		if err != nil {
			t.Fatal(err)
		}
		if ns.ANAGRPID != grp || ns.NMIC&nvmeof.NMICShared == 0 {
			t.Errorf("namespace %d: ANAGRPID %d NMIC %#x, want group %d, shared", nsid, ns.ANAGRPID, ns.NMIC, grp)
		}
	}
	if tg, err := New(Config{ANATransitionTime: -time.Second}); err == nil {
		tg.Close()
		t.Error("a negative ANA transition time was taken")
	}
}

func TestANALog(t *testing.T) {
	t.Parallel()
	tg, sub := anaTarget(t, Config{}, TransportTCP)
	addMem(t, sub, 2, 2)
	addMem(t, sub, 3, 2)
	addMem(t, sub, 4, 5)
	p1 := anaPort(t, tg, sub, 1, TransportTCP, map[uint32]nvmeof.ANAState{2: nvmeof.ANANonOptimized, 3: nvmeof.ANAInaccessible})
	p2 := anaPort(t, tg, sub, 2, TransportTCP, map[uint32]nvmeof.ANAState{1: nvmeof.ANANonOptimized, 2: nvmeof.ANAOptimized})
	if got := p1.ANAStates(); !cmp.Equal(got, map[uint32]nvmeof.ANAState{1: nvmeof.ANAOptimized, 2: nvmeof.ANANonOptimized, 3: nvmeof.ANAInaccessible}) {
		t.Errorf("port 1 states %v", got)
	}
	type grp struct {
		id    uint32
		st    nvmeof.ANAState
		nsids []uint32
	}
	check := func(p *Port, want []grp) {
		t.Helper()
		c := mustHost(t, TransportTCP, p.Addr().String(), testNQN, hostCfg("nqn.2014-08.org.nvmexpress:uuid:ana-log"))
		for _, rgo := range []bool{false, true} {
			l, err := c.ANALog(context.Background(), rgo)
			if err != nil {
				t.Fatal(err)
			}
			if l.ChangeCount == 0 || len(l.Groups) != len(want) {
				t.Fatalf("port %d rgo %v: log %+v, want %d groups", p.ID(), rgo, l, len(want))
			}
			for i, w := range want {
				g := l.Groups[i]
				wn := w.nsids
				if rgo {
					wn = nil
				}
				if g.GroupID != w.id || g.State != w.st || g.ChangeCount != l.ChangeCount || !cmp.Equal(g.NSIDs, wn) {
					t.Errorf("port %d rgo %v: group %d: %+v, want %+v", p.ID(), rgo, i, g, w)
				}
			}
		}
	}
	check(p1, []grp{{1, nvmeof.ANAOptimized, []uint32{1}}, {2, nvmeof.ANANonOptimized, []uint32{2, 3}},
		{3, nvmeof.ANAInaccessible, nil}, {5, nvmeof.ANAInaccessible, []uint32{4}}})
	check(p2, []grp{{1, nvmeof.ANANonOptimized, []uint32{1}}, {2, nvmeof.ANAOptimized, []uint32{2, 3}},
		{5, nvmeof.ANAInaccessible, []uint32{4}}})
}

func TestANAConfigRefused(t *testing.T) {
	t.Parallel()
	tg, sub := anaTarget(t, Config{}, TransportTCP)
	for _, g := range []map[uint32]nvmeof.ANAState{{0: nvmeof.ANAOptimized}, {129: nvmeof.ANAOptimized}, {2: 0}, {2: 5}} {
		if p, err := tg.AddPort(PortConfig{ID: 9, Addr: "127.0.0.1:0", Transport: TransportTCP, ANAGroups: g}); err == nil {
			p.LinkSubsystem(sub)
			t.Errorf("port with ANA groups %v added", g)
		}
	}
	d, _ := backstore.NewMem(1<<20, 512)
	if err := sub.AddNamespace(NamespaceConfig{NSID: 5, Disk: d, ANAGroupID: 129}); err == nil {
		t.Error("namespace in group 129 added")
	}
	p := anaPort(t, tg, sub, 1, TransportTCP, nil)
	for _, err := range []error{p.SetANAState(0, nvmeof.ANAOptimized), p.SetANAState(129, nvmeof.ANAOptimized),
		p.SetANAState(2, 0x0e), p.RemoveANAGroup(1), p.RemoveANAGroup(3), sub.SetNamespaceANAGroup(1, 0),
		sub.SetNamespaceANAGroup(9, 2)} {
		if err == nil {
			t.Error("refusal missing")
		}
	}
	if err := p.SetANAState(3, nvmeof.ANAChange); err != nil {
		t.Fatal(err)
	}
	if err := p.RemoveANAGroup(3); err != nil {
		t.Fatal(err)
	}
	if got := p.ANAStates(); !cmp.Equal(got, map[uint32]nvmeof.ANAState{1: nvmeof.ANAOptimized}) {
		t.Errorf("states after removal: %v", got)
	}
}

// anaHost connects a host over tr with an event channel, and opens
// namespace 1 with a known pattern written at 0.
func anaHost(t *testing.T, tr Transport, addr string) (*host.Namespace, <-chan host.Event, []byte) {
	t.Helper()
	events := make(chan host.Event, 16)
	cfg := hostCfg("nqn.2014-08.org.nvmexpress:uuid:ana-host")
	cfg.OnEvent = func(ev host.Event) {
		select {
		case events <- ev:
		default:
		}
	}
	c := mustHost(t, tr, addr, testNQN, cfg)
	ns, err := c.Namespace(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	pat := bytes.Repeat([]byte("ana!"), 1024)
	if _, err := blockdev.WriteAt(ns, pat, 0); err != nil {
		t.Fatal(err)
	}
	return ns, events, pat
}

// waitANAEvent waits for an ANA Change notice.
func waitANAEvent(t *testing.T, events <-chan host.Event, what string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.Type == nvmeof.AsyncEventNotice && ev.Info == nvmeof.NoticeANAChange && ev.LogPage == nvmeof.LogANA {
				return
			}
		case <-timeout:
			t.Fatalf("%s: no ANA Change notice in 10 s", what)
		}
	}
}

// readsAs checks a read of the pattern: it works (want AccessUnknown) or
// fails with a path error of state want.
func readsAs(t *testing.T, ns *host.Namespace, pat []byte, want blockdev.AccessState, what string) {
	t.Helper()
	got := make([]byte, len(pat))
	_, err := blockdev.ReadAt(ns, got, 0)
	if want == blockdev.AccessUnknown {
		if err != nil || !bytes.Equal(got, pat) {
			t.Fatalf("%s: read: %v (data equal: %v)", what, err, bytes.Equal(got, pat))
		}
		return
	}
	var pe *blockdev.PathError
	var se *host.StatusError
	if !errors.Is(err, blockdev.ErrPath) || !errors.As(err, &pe) || pe.State != want || !errors.As(err, &se) || se.Status.DNR() {
		t.Fatalf("%s: read error %v, want a path error of state %v without DNR", what, err, want)
	}
}

func TestANAStateChange(t *testing.T) {
	t.Parallel()
	for _, tr := range []Transport{TransportTCP, TransportRDMA} {
		t.Run(string(tr), func(t *testing.T) {
			t.Parallel()
			tg, sub := anaTarget(t, Config{ANATransitionTime: time.Second}, tr)
			p := anaPort(t, tg, sub, 1, tr, nil)
			ns, events, pat := anaHost(t, tr, p.Addr().String())
			if a := ns.AccessState(); a != blockdev.AccessOptimized {
				t.Fatalf("access state at open %v", a)
			}
			if id := ns.DiskID(); id != fmt.Sprintf("%s/%x", testNQN, sub.Namespaces()[0].NGUID) {
				t.Errorf("DiskID %q", id)
			}
			steps := []struct {
				st     nvmeof.ANAState
				access blockdev.AccessState
				fails  bool
			}{
				{nvmeof.ANAInaccessible, blockdev.AccessInaccessible, true},
				{nvmeof.ANANonOptimized, blockdev.AccessNonOptimized, false},
				{nvmeof.ANAChange, blockdev.AccessTransitioning, true},
				{nvmeof.ANAPersistentLoss, blockdev.AccessPersistentLoss, true},
				{nvmeof.ANAOptimized, blockdev.AccessOptimized, false},
			}
			for _, s := range steps {
				if err := p.SetANAState(1, s.st); err != nil {
					t.Fatal(err)
				}
				waitANAEvent(t, events, s.st.String())
				eventually(t, "access state "+s.access.String(), func() bool { return ns.AccessState() == s.access })
				want := blockdev.AccessUnknown
				if s.fails {
					want = s.access
				}
				readsAs(t, ns, pat, want, s.st.String())
				if a, err := ns.RefreshAccessState(); err != nil || a != s.access {
					t.Errorf("%v: RefreshAccessState = %v, %v", s.st, a, err)
				}
			}
		})
	}
}

func TestNamespaceANAGroupChange(t *testing.T) {
	t.Parallel()
	tg, sub := anaTarget(t, Config{}, TransportTCP)
	p := anaPort(t, tg, sub, 1, TransportTCP, map[uint32]nvmeof.ANAState{4: nvmeof.ANAInaccessible})
	ns, events, pat := anaHost(t, TransportTCP, p.Addr().String())
	if err := sub.SetNamespaceANAGroup(1, 4); err != nil {
		t.Fatal(err)
	}
	waitANAEvent(t, events, "to group 4")
	eventually(t, "inaccessible", func() bool { return ns.AccessState() == blockdev.AccessInaccessible })
	readsAs(t, ns, pat, blockdev.AccessInaccessible, "in group 4")
	if id, err := ns.Controller().IdentifyNamespace(context.Background(), 1); err != nil || id.ANAGRPID != 4 {
		t.Errorf("ANAGRPID %d, %v", id.ANAGRPID, err)
	}
	if got := sub.Namespaces()[0].ANAGroupID; got != 4 {
		t.Errorf("NamespaceInfo.ANAGroupID %d", got)
	}
	// A group taken off the port: inaccessible there too.
	if err := p.SetANAState(4, nvmeof.ANAOptimized); err != nil {
		t.Fatal(err)
	}
	waitANAEvent(t, events, "group 4 optimized")
	eventually(t, "optimized", func() bool { return ns.AccessState() == blockdev.AccessOptimized })
	readsAs(t, ns, pat, blockdev.AccessUnknown, "group 4 optimized")
	if err := p.RemoveANAGroup(4); err != nil {
		t.Fatal(err)
	}
	waitANAEvent(t, events, "group 4 removed")
	eventually(t, "inaccessible after removal", func() bool { return ns.AccessState() == blockdev.AccessInaccessible })
	readsAs(t, ns, pat, blockdev.AccessInaccessible, "group 4 removed")
	if err := sub.SetNamespaceANAGroup(1, 1); err != nil {
		t.Fatal(err)
	}
	eventually(t, "back in group 1", func() bool { return ns.AccessState() == blockdev.AccessOptimized })
	readsAs(t, ns, pat, blockdev.AccessUnknown, "back in group 1")
}

// errDisk fails its writes with err.
type errDisk struct {
	backstore.Disk
	err error
}

func (d *errDisk) WriteAt([]byte, int64, backstore.WriteFlags) error { return d.err }

func TestBackstoreErrorStatus(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want nvmeof.Status
	}{
		{backstore.ErrNoSpace, nvmeof.StatusCapacityExceeded.WithDNR()},
		{backstore.ErrTimeout, nvmeof.StatusCommandInterrupted},
		{backstore.ErrFenced, nvmeof.StatusInternalPathError},
		{backstore.ErrReadOnly, nvmeof.StatusNamespaceWriteProtected.WithDNR()},
		{errors.New("other"), nvmeof.StatusWriteFault},
	} {
		if got := ioStatus(fmt.Errorf("rbd: write: %w", c.err), true); got != c.want {
			t.Errorf("%v: %v, want %v", c.err, got, c.want)
		}
	}
	// Through a host: a fenced gateway is a path error.
	tg, sub := anaTarget(t, Config{}, TransportTCP)
	mem, _ := backstore.NewMem(1<<20, 512)
	if err := sub.AddNamespace(NamespaceConfig{NSID: 1, Disk: &errDisk{Disk: mem, err: fmt.Errorf("rbd: %w", backstore.ErrFenced)}}); err != nil {
		t.Fatal(err)
	}
	p := anaPort(t, tg, sub, 1, TransportTCP, nil)
	c := mustHost(t, TransportTCP, p.Addr().String(), testNQN, hostCfg("nqn.2014-08.org.nvmexpress:uuid:ana-fenced"))
	ns, err := c.Namespace(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = blockdev.WriteAt(ns, make([]byte, 4096), 0)
	var se *host.StatusError
	if !errors.Is(err, blockdev.ErrPath) || !errors.As(err, &se) || se.Status != nvmeof.StatusInternalPathError {
		t.Fatalf("write to a fenced disk: %v", err)
	}
}

// TestANATransitionPolled: a host that gets no ANA notices (it disabled
// them) learns of a transition from a failed I/O, and of its end by
// reading the log again while the group is in change.
func TestANATransitionPolled(t *testing.T) {
	t.Parallel()
	tg, sub := anaTarget(t, Config{ANATransitionTime: time.Second}, TransportTCP)
	p := anaPort(t, tg, sub, 1, TransportTCP, nil)
	ns, _, pat := anaHost(t, TransportTCP, p.Addr().String())
	if _, err := ns.Controller().SetFeatures(context.Background(), nvmeof.FeatAsyncEventConfig, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := p.SetANAState(1, nvmeof.ANAChange); err != nil {
		t.Fatal(err)
	}
	if a := ns.AccessState(); a != blockdev.AccessOptimized {
		t.Fatalf("access state %v before any I/O, want the old one (no notice)", a)
	}
	readsAs(t, ns, pat, blockdev.AccessTransitioning, "in change")
	// Let the host's re-read after the failure find the group in change
	// (and poll it a few times); only its polling can see the end then.
	time.Sleep(300 * time.Millisecond)
	if a := ns.AccessState(); a != blockdev.AccessTransitioning {
		t.Fatalf("access state %v while in change", a)
	}
	if err := p.SetANAState(1, nvmeof.ANAOptimized); err != nil {
		t.Fatal(err)
	}
	eventually(t, "optimized again", func() bool { return ns.AccessState() == blockdev.AccessOptimized })
	readsAs(t, ns, pat, blockdev.AccessUnknown, "optimized again")
}
