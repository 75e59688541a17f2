package target

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/auth"
	"github.com/rdisk/rdisk/nvmeof/host"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/iwarp"
)

// Tests of the live-management API (manage.go), with rdisk's own host
// (nvmeof/host) on loopback.

// testHostID is the host identifier the tests' hosts present, and its UUID
// string.
var testHostID = [16]byte{0x0c, 0x7a, 0x4b, 0x2e, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}

const testHostIDString = "0c7a4b2e-0102-0304-0506-0708090a0b0c"

// hostCfg is a host configuration with two I/O queues of 16 entries.
func hostCfg(hostNQN string) host.Config {
	return host.Config{HostNQN: hostNQN, HostID: testHostID, IOQueues: 2, QueueDepth: 16, KATO: 5 * time.Second}
}

// dialHost connects a host to subNQN at addr over tr (TransportBoth: RDMA).
func dialHost(t testing.TB, tr Transport, addr, subNQN string, cfg host.Config) (*host.Controller, error) {
	t.Helper()
	var p rdma.Provider
	if tr == TransportTCP {
		cfg.Transport = host.TransportTCP
	} else {
		ip, err := iwarp.New(iwarp.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ip.Close() })
		p, cfg.Transport = ip, host.TransportRDMA
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := host.Connect(ctx, p, addr, subNQN, cfg)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return c, nil
}

// mustHost is dialHost failing the test on an error.
func mustHost(t testing.TB, tr Transport, addr, subNQN string, cfg host.Config) *host.Controller {
	t.Helper()
	c, err := dialHost(t, tr, addr, subNQN, cfg)
	if err != nil {
		t.Fatalf("connecting to %s at %s: %v", subNQN, addr, err)
	}
	return c
}

// eventually waits up to 10 s for cond.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitDone waits for a host controller to fail.
func waitDone(t testing.TB, c *host.Controller, what string) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: the host's controller is still up after 10 s", what)
	}
}

// alive checks that a host controller is up and its namespace 1 readable.
func alive(t testing.TB, c *host.Controller, what string) {
	t.Helper()
	select {
	case <-c.Done():
		t.Fatalf("%s: the host's controller failed: %v", what, c.Err())
	default:
	}
	ns, err := c.Namespace(context.Background(), 1)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if _, err := blockdev.ReadAt(ns, make([]byte, 4096), 0); err != nil {
		t.Fatalf("%s: read: %v", what, err)
	}
}

// authSecret is a host's DH-HMAC-CHAP secret.
func authSecret() (auth.Secret, error) {
	return auth.ParseSecret("DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:")
}

// findController returns the live controller of subsystem nqn with cntlid.
func findController(tg *Target, nqn string, cntlid uint16) (ControllerInfo, bool) {
	for _, c := range tg.Controllers() {
		if c.Subsystem == nqn && c.CNTLID == cntlid {
			return c, true
		}
	}
	return ControllerInfo{}, false
}

func TestControllers(t *testing.T) {
	t.Parallel()
	for _, tr := range []Transport{TransportTCP, TransportRDMA} {
		t.Run(string(tr), func(t *testing.T) {
			t.Parallel()
			tg, port := tcpTarget(t, 8<<20, tr)
			addr := port.Addr().String()
			if cs := tg.Controllers(); len(cs) != 0 {
				t.Fatalf("controllers before any connect: %+v", cs)
			}
			before := time.Now()
			c := mustHost(t, tr, addr, testNQN, hostCfg(hostNQN))
			disc := mustHost(t, tr, addr, nvmeof.DiscoveryNQN, host.Config{HostNQN: hostNQN2, HostID: testHostID})
			cs := tg.Controllers()
			if len(cs) != 2 || cs[0].Subsystem != nvmeof.DiscoveryNQN || cs[1].Subsystem != testNQN {
				t.Fatalf("controllers %+v: want the discovery one, then %s", cs, testNQN)
			}
			if d := cs[0]; d.CNTLID != disc.CNTLID() || d.HostNQN != hostNQN2 || d.IOQueues != 0 || d.QueueDepth != 0 || d.KATO != 0 {
				t.Errorf("discovery controller %+v", d)
			}
			in := cs[1]
			if in.CNTLID != c.CNTLID() || in.HostNQN != hostNQN || in.HostID != testHostIDString ||
				in.PortID != 1 || !strings.HasPrefix(in.Remote, "127.0.0.1:") || in.IOQueues != 2 || in.QueueDepth != 16 ||
				in.KATO != 5*time.Second || in.Authenticated || in.Connected.Before(before.Add(-time.Second)) || in.Connected.After(time.Now()) {
				t.Errorf("controller %+v", in)
			}
			if want := map[Transport]string{TransportTCP: "tcp", TransportRDMA: "rdma"}[tr]; in.Transport != want {
				t.Errorf("controller transport %q, want %q", in.Transport, want)
			}
			if in.Commands != 0 || in.ReadBytes != 0 || in.WriteBytes != 0 {
				t.Errorf("counters before I/O: %+v", in)
			}

			// Counters grow with I/O, read while it runs (for the race
			// detector).
			stop := make(chan struct{})
			polled := make(chan struct{})
			go func() {
				defer close(polled)
				for {
					select {
					case <-stop:
						return
					default:
						tg.Controllers()
					}
				}
			}()
			ns, err := c.Namespace(context.Background(), 1)
			if err != nil {
				t.Fatal(err)
			}
			data := make([]byte, 8192)
			rand.Read(data)
			if _, err := blockdev.WriteAt(ns, data, 4096); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, 4096)
			if _, err := blockdev.ReadAt(ns, got, 4096); err != nil || !bytes.Equal(got, data[:4096]) {
				t.Fatalf("read back: %v", err)
			}
			// A failing command counts, moving no data.
			if err := tg.Subsystem(testNQN).RemoveNamespace(1); err != nil {
				t.Fatal(err)
			}
			if _, err := blockdev.ReadAt(ns, make([]byte, 4096), 0); err == nil {
				t.Fatal("read of a removed namespace succeeded")
			}
			close(stop)
			<-polled
			in, ok := findController(tg, testNQN, c.CNTLID())
			if !ok || in.Commands != 3 || in.ReadBytes != 4096 || in.WriteBytes != 8192 {
				t.Fatalf("after a write of 8 KiB, a read of 4 KiB and one of a removed namespace: %+v", in)
			}
		})
	}
}

// TestControllersAuthenticated: a host that ran DH-HMAC-CHAP is listed as
// authenticated.
func TestControllersAuthenticated(t *testing.T) {
	t.Parallel()
	tg, port := tcpTarget(t, 1<<20, TransportTCP)
	key, err := authSecret()
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.SetHostAuth(hostNQN, &HostAuth{Key: key}); err != nil {
		t.Fatal(err)
	}
	cfg := hostCfg(hostNQN)
	cfg.DHCHAPSecret = &key
	c := mustHost(t, TransportTCP, port.Addr().String(), testNQN, cfg)
	if in, ok := findController(tg, testNQN, c.CNTLID()); !ok || !in.Authenticated || in.IOQueues != 2 {
		t.Fatalf("authenticated controller %+v (found %v)", in, ok)
	}
}

func TestNamespacesInfo(t *testing.T) {
	t.Parallel()
	tg, port := tcpTarget(t, 8<<20, TransportTCP)
	sub := tg.Subsystem(testNQN)
	ro, _ := backstore.NewMem(1<<20, 4096)
	ro.SetReadOnly(true)
	nguid := [16]byte{15: 9}
	if err := sub.AddNamespace(NamespaceConfig{NSID: 7, Disk: ro, NGUID: nguid, Disabled: true}); err != nil {
		t.Fatal(err)
	}
	d3, _ := backstore.NewMem(2<<20, 512)
	if err := sub.AddNamespace(NamespaceConfig{NSID: 3, Disk: d3, ANAGroupID: 4}); err != nil {
		t.Fatal(err)
	}
	got := sub.Namespaces()
	want := []NamespaceInfo{
		{NSID: 1, Blocks: 8 << 20 / 512, BlockSize: 512, NGUID: deriveNGUID(testNQN, 1), UUID: deriveUUID(testNQN, 1), ANAGroupID: 1},
		{NSID: 3, Blocks: 2 << 20 / 512, BlockSize: 512, NGUID: deriveNGUID(testNQN, 3), UUID: deriveUUID(testNQN, 3), ANAGroupID: 4},
		{NSID: 7, Blocks: 256, BlockSize: 4096, NGUID: nguid, UUID: deriveUUID(testNQN, 7), Disabled: true, ReadOnly: true, ANAGroupID: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("namespaces %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("namespace %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if err := sub.RemoveNamespace(3); err != nil {
		t.Fatal(err)
	}
	if got := sub.Namespaces(); len(got) != 2 || got[0].NSID != 1 || got[1].NSID != 7 {
		t.Fatalf("after removing namespace 3: %+v", got)
	}
	if ps := tg.Ports(); len(ps) != 1 || ps[0] != port || port.ID() != 1 || tg.Port(1) != port || tg.Port(2) != nil {
		t.Fatalf("ports %v, Port(1) %v", ps, tg.Port(1))
	}
	s2, err := tg.AddSubsystem(SubsystemConfig{NQN: testNQN + "-a", AllowedHosts: []string{hostNQN2, hostNQN}})
	if err != nil {
		t.Fatal(err)
	}
	if ss := tg.Subsystems(); len(ss) != 2 || ss[0] != sub || ss[1] != s2 {
		t.Fatalf("subsystems %v", ss)
	}
	if !sub.AllowAnyHost() || s2.AllowAnyHost() || len(sub.AllowedHosts()) != 0 {
		t.Fatalf("AllowAnyHost %v %v, allowed hosts %v", sub.AllowAnyHost(), s2.AllowAnyHost(), sub.AllowedHosts())
	}
	if hs := s2.AllowedHosts(); len(hs) != 2 || hs[0] != hostNQN || hs[1] != hostNQN2 {
		t.Fatalf("allowed hosts %v, want sorted [%s %s]", hs, hostNQN, hostNQN2)
	}
}

// TestRemovedNamespaceIO: I/O to a namespace removed while connected fails
// with Invalid Namespace or Format.
func TestRemovedNamespaceIO(t *testing.T) {
	t.Parallel()
	_, sub, addr := testTarget(t, 8<<20)
	aq, cntlid := admin(t, addr, testNQN, hostNQN, 0)
	sqe := make(nvmeof.SQE, 64)
	sqe.Features().Encode(&nvmeof.FeaturesFields{Opcode: nvmeof.AdminSetFeatures, FID: nvmeof.FeatNumQueues, CDW11: nvmeof.NumQueuesValue(0, 0)})
	must(t, aq.exec(sqe, 0, nil), "set number of queues")
	io := ioQueue(t, addr, 1, cntlid, 16)
	must(t, rw(io, true, 0, 8, false), "write")
	if err := sub.RemoveNamespace(1); err != nil {
		t.Fatal(err)
	}
	for _, write := range []bool{false, true} {
		f := rw(io, write, 0, 8, false)
		if f.Status.Code() != nvmeof.StatusInvalidNamespace || f.Status.Code() != 0x0b || !f.Status.DNR() {
			t.Fatalf("write %v to the removed namespace: status %s, want Invalid Namespace or Format (0x0B) with DNR", write, f.Status)
		}
	}
	sqe = make(nvmeof.SQE, 64)
	sqe.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IOFlush, NSID: 1})
	wantStatus(t, io.exec(sqe, 0, nil), nvmeof.StatusInvalidNamespace.WithDNR(), "flush of the removed namespace")
}

func TestDeleteController(t *testing.T) {
	t.Parallel()
	for _, tr := range []Transport{TransportTCP, TransportRDMA} {
		t.Run(string(tr), func(t *testing.T) {
			t.Parallel()
			tg, port := tcpTarget(t, 1<<20, tr)
			addr := port.Addr().String()
			c := mustHost(t, tr, addr, testNQN, hostCfg(hostNQN))
			other := mustHost(t, tr, addr, testNQN, hostCfg(hostNQN2))
			disc := mustHost(t, tr, addr, nvmeof.DiscoveryNQN, host.Config{HostNQN: hostNQN, HostID: testHostID})
			if err := tg.DeleteController(testNQN, c.CNTLID()); err != nil {
				t.Fatal(err)
			}
			waitDone(t, c, "controller deleted")
			if _, ok := findController(tg, testNQN, c.CNTLID()); ok {
				t.Fatal("deleted controller still listed")
			}
			alive(t, other, "the other host's controller")
			if err := tg.DeleteController(nvmeof.DiscoveryNQN, disc.CNTLID()); err != nil {
				t.Fatal(err)
			}
			waitDone(t, disc, "discovery controller deleted")
			if cs := tg.Controllers(); len(cs) != 1 || cs[0].CNTLID != other.CNTLID() {
				t.Fatalf("controllers after two deletions: %+v", cs)
			}
			err := tg.DeleteController(testNQN, c.CNTLID())
			if err == nil || !strings.Contains(err.Error(), testNQN) || !strings.Contains(err.Error(), fmt.Sprint(c.CNTLID())) {
				t.Fatalf("deleting it again: %v, want an error naming the subsystem and controller", err)
			}
			if err := tg.DeleteController("nqn.2026-11.io.rdisk:none", 1); err == nil {
				t.Fatal("deleting a controller of an unknown subsystem succeeded")
			}
			// The host can connect again.
			alive(t, mustHost(t, tr, addr, testNQN, hostCfg(hostNQN)), "reconnected")
		})
	}
}

func TestDisallowHost(t *testing.T) {
	t.Parallel()
	tg, port := tcpTarget(t, 1<<20, TransportTCP)
	addr := port.Addr().String()
	sub := tg.Subsystem(testNQN)
	sub.SetAllowAnyHost(false)
	if sub.AllowAnyHost() {
		t.Fatal("AllowAnyHost after SetAllowAnyHost(false)")
	}
	if _, err := dialHost(t, TransportTCP, addr, testNQN, hostCfg(hostNQN)); err == nil {
		t.Fatal("a host not allowed connected")
	}
	sub.AllowHost(hostNQN)
	sub.AllowHost(hostNQN2)
	c := mustHost(t, TransportTCP, addr, testNQN, hostCfg(hostNQN))
	// Discovery lists the subsystem to allowed hosts only.
	discovered := func(hostNQN string) bool {
		d := mustHost(t, TransportTCP, addr, nvmeof.DiscoveryNQN, host.Config{HostNQN: hostNQN, HostID: testHostID})
		defer d.Close()
		log, err := d.DiscoveryLog(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return len(log.Entries) == 1 && log.Entries[0].SubNQN == testNQN
	}
	if !discovered(hostNQN) {
		t.Fatal("the subsystem is not in the discovery log of an allowed host")
	}
	sub.DisallowHost(hostNQN)
	if hs := sub.AllowedHosts(); len(hs) != 1 || hs[0] != hostNQN2 {
		t.Fatalf("allowed hosts %v after DisallowHost, want [%s]", hs, hostNQN2)
	}
	alive(t, c, "the disallowed host's existing controller")
	_, err := dialHost(t, TransportTCP, addr, testNQN, hostCfg(hostNQN))
	if err == nil {
		t.Fatal("a disallowed host connected")
	}
	if !strings.Contains(err.Error(), "Connect Invalid Host") {
		t.Fatalf("disallowed host's connect: %v, want Connect Invalid Host", err)
	}
	if discovered(hostNQN) {
		t.Fatal("the subsystem is still in the discovery log of a disallowed host")
	}
	mustHost(t, TransportTCP, addr, testNQN, hostCfg(hostNQN2))
	sub.SetAllowAnyHost(true)
	if !sub.AllowAnyHost() {
		t.Fatal("AllowAnyHost false after SetAllowAnyHost(true)")
	}
	mustHost(t, TransportTCP, addr, testNQN, hostCfg(hostNQN))
	if !discovered(hostNQN) {
		t.Fatal("the subsystem is not in the discovery log with AllowAnyHost")
	}
}

func TestRemovePort(t *testing.T) {
	t.Parallel()
	for _, tr := range []Transport{TransportTCP, TransportRDMA, TransportBoth} {
		t.Run(string(tr), func(t *testing.T) {
			t.Parallel()
			tg, port := tcpTarget(t, 1<<20, tr)
			addr := port.Addr().String()
			sub := tg.Subsystem(testNQN)
			c := mustHost(t, tr, addr, testNQN, hostCfg(hostNQN))
			disc := mustHost(t, tr, addr, nvmeof.DiscoveryNQN, host.Config{HostNQN: hostNQN, HostID: testHostID})
			// A connection that has sent nothing yet ends too (without
			// waiting for the setup timeout). Not on an RDMA port: there
			// the provider holds it (the iWARP listener's Close waits
			// for the MPA handshakes it has under way, up to their
			// timeout).
			var idle net.Conn
			if tr != TransportRDMA {
				var err error
				if idle, err = net.Dial("tcp", addr); err != nil {
					t.Fatal(err)
				}
				defer idle.Close()
			}
			// Another port and its host stay.
			p2, err := tg.AddPort(PortConfig{ID: 2, Addr: "127.0.0.1:0", Transport: TransportTCP})
			if err != nil {
				t.Fatal(err)
			}
			p2.LinkSubsystem(sub)
			c2 := mustHost(t, TransportTCP, p2.Addr().String(), testNQN, hostCfg(hostNQN2))

			if err := tg.RemovePort(1); err != nil {
				t.Fatal(err)
			}
			waitDone(t, c, "port removed")
			waitDone(t, disc, "port removed (discovery controller)")
			if idle != nil {
				idle.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := idle.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("idle connection of the removed port: read %v, want it closed", err)
				}
			}
			if cs := tg.Controllers(); len(cs) != 1 || cs[0].PortID != 2 {
				t.Fatalf("controllers after removing port 1: %+v", cs)
			}
			alive(t, c2, "the other port's controller")
			if tg.Port(1) != nil || len(tg.Ports()) != 1 || tg.Ports()[0] != p2 {
				t.Fatalf("Port(1) %v, ports %v after removing port 1", tg.Port(1), tg.Ports())
			}
			if nc, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
				nc.Close()
				t.Fatal("the removed port's address still accepts connections")
			}
			if _, err := dialHost(t, tr, addr, testNQN, hostCfg(hostNQN)); err == nil {
				t.Fatal("a host connected through the removed port")
			}
			if err := tg.RemovePort(1); err == nil {
				t.Fatal("removing port 1 again succeeded")
			}
			// The ID and the address serve again.
			np, err := tg.AddPort(PortConfig{ID: 1, Addr: addr, Transport: tr})
			if err != nil {
				t.Fatalf("adding port 1 back on %s: %v", addr, err)
			}
			np.LinkSubsystem(sub)
			alive(t, mustHost(t, tr, addr, testNQN, hostCfg(hostNQN)), "connected through the port added back")
		})
	}
}

// TestDiscoveryChangeAEN: each management call that changes what
// discovery reports raises a discovery change event on the discovery
// controllers of other ports.
func TestDiscoveryChangeAEN(t *testing.T) {
	t.Parallel()
	tg, sub, addr := testTarget(t, 1<<20)
	p2, err := tg.AddPort(PortConfig{ID: 2, Addr: "127.0.0.1:0", Transport: TransportTCP})
	if err != nil {
		t.Fatal(err)
	}
	p2.LinkSubsystem(sub)
	s2, err := tg.AddSubsystem(SubsystemConfig{NQN: testNQN + "-2", AllowAnyHost: true})
	if err != nil {
		t.Fatal(err)
	}
	aq := discoveryAdmin(t, addr)
	for _, c := range []struct {
		what string
		do   func() error
	}{
		{"UnlinkSubsystem", func() error { return p2.UnlinkSubsystem(testNQN) }},
		{"DisallowHost", func() error { sub.DisallowHost(hostNQN); return nil }},
		{"SetAllowAnyHost", func() error { sub.SetAllowAnyHost(false); return nil }},
		{"RemovePort", func() error { return tg.RemovePort(2) }},
		{"RemoveSubsystem", func() error { return tg.RemoveSubsystem(s2.NQN()) }},
	} {
		done := postAER(t, tg, aq)
		if err := c.do(); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		waitDiscoveryAEN(t, done, c.what)
		// Reading the log re-arms the event.
		sqe := make(nvmeof.SQE, 64)
		sqe.GetLogPage().Encode(&nvmeof.GetLogPageFields{LID: nvmeof.LogDiscovery, NUMD: nvmeof.NUMDForLength(4096)})
		must(t, aq.exec(sqe, 4096, nil), "discovery log")
	}
}

// discoveryAdmin connects a discovery controller at addr (NVMe/RDMA) and
// enables discovery change events.
func discoveryAdmin(t *testing.T, addr string) *tq {
	t.Helper()
	aq, _ := admin(t, addr, nvmeof.DiscoveryNQN, hostNQN, 0)
	sqe := make(nvmeof.SQE, 64)
	sqe.Features().Encode(&nvmeof.FeaturesFields{Opcode: nvmeof.AdminSetFeatures, FID: nvmeof.FeatAsyncEventConfig, CDW11: nvmeof.AENConfigDiscoveryChange})
	must(t, aq.exec(sqe, 0, nil), "AEN config")
	return aq
}

// postAER posts an Asynchronous Event Request on aq, whose completion the
// channel delivers, and waits until the target holds it.
func postAER(t *testing.T, tg *Target, aq *tq) <-chan nvmeof.CQEFields {
	t.Helper()
	aer := make(nvmeof.SQE, 64)
	aer[0] = nvmeof.AdminAsyncEvent
	done := make(chan nvmeof.CQEFields, 1)
	go func() { done <- aq.exec(aer, 0, nil) }()
	eventually(t, "AER not parked", func() bool {
		tg.mu.Lock()
		defer tg.mu.Unlock()
		for c := range tg.disc {
			c.mu.Lock()
			n := len(c.aers)
			c.mu.Unlock()
			if n > 0 {
				return true
			}
		}
		return false
	})
	return done
}

// waitDiscoveryAEN waits for the AER of discoveryAER to complete with a
// discovery change notice.
func waitDiscoveryAEN(t *testing.T, done <-chan nvmeof.CQEFields, what string) {
	t.Helper()
	select {
	case f := <-done:
		ev := nvmeof.ParseAsyncEvent(uint32(f.Result))
		if f.Status != nvmeof.StatusSuccess || ev.Info != nvmeof.NoticeDiscoveryChanged || ev.LogPage != nvmeof.LogDiscovery {
			t.Fatalf("%s: AER completion %+v event %+v", what, f, ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no discovery change event", what)
	}
}

// discoveredVia lists the subsystems discovery at addr reports to hostNQN.
func discoveredVia(t *testing.T, addr, hostNQN string) []string {
	t.Helper()
	d := mustHost(t, TransportTCP, addr, nvmeof.DiscoveryNQN, host.Config{HostNQN: hostNQN, HostID: testHostID})
	defer d.Close()
	log, err := d.DiscoveryLog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var nqns []string
	for _, e := range log.Entries {
		nqns = append(nqns, e.SubNQN)
	}
	return nqns
}

// addSubsystem adds an open subsystem with a RAM namespace 1 to tg and
// links it to ports.
func addSubsystem(t *testing.T, tg *Target, nqn string, ports ...*Port) *Subsystem {
	t.Helper()
	s, err := tg.AddSubsystem(SubsystemConfig{NQN: nqn, AllowAnyHost: true})
	if err != nil {
		t.Fatal(err)
	}
	disk, err := backstore.NewMem(1<<20, 512)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddNamespace(NamespaceConfig{NSID: 1, Disk: disk}); err != nil {
		t.Fatal(err)
	}
	for _, p := range ports {
		p.LinkSubsystem(s)
	}
	return s
}

func TestUnlinkSubsystem(t *testing.T) {
	t.Parallel()
	tg, p1 := tcpTarget(t, 1<<20, TransportTCP)
	a := tg.Subsystem(testNQN)
	p2, err := tg.AddPort(PortConfig{ID: 2, Addr: "127.0.0.1:0", Transport: TransportTCP})
	if err != nil {
		t.Fatal(err)
	}
	p2.LinkSubsystem(a)
	bNQN := testNQN + "-b"
	addSubsystem(t, tg, bNQN, p1)
	addr1, addr2 := p1.Addr().String(), p2.Addr().String()
	a1 := mustHost(t, TransportTCP, addr1, testNQN, hostCfg(hostNQN))
	a2 := mustHost(t, TransportTCP, addr2, testNQN, hostCfg(hostNQN))
	b1 := mustHost(t, TransportTCP, addr1, bNQN, hostCfg(hostNQN))
	if got := discoveredVia(t, addr1, hostNQN); len(got) != 2 {
		t.Fatalf("port 1 discovery before unlinking: %v", got)
	}

	if err := p1.UnlinkSubsystem(testNQN); err != nil {
		t.Fatal(err)
	}
	waitDone(t, a1, "subsystem unlinked from the controller's port")
	alive(t, a2, "the subsystem's controller on the other port")
	alive(t, b1, "another subsystem's controller on the port")
	if _, ok := findController(tg, testNQN, a1.CNTLID()); ok {
		t.Fatal("the unlinked controller is still listed")
	}
	if got := p1.Subsystems(); len(got) != 1 || got[0] != bNQN {
		t.Fatalf("port 1 exports %v, want [%s]", got, bNQN)
	}
	if got := discoveredVia(t, addr1, hostNQN); len(got) != 1 || got[0] != bNQN {
		t.Fatalf("port 1 discovery after unlinking: %v, want [%s]", got, bNQN)
	}
	if got := discoveredVia(t, addr2, hostNQN); len(got) != 1 || got[0] != testNQN {
		t.Fatalf("port 2 discovery: %v, want [%s]", got, testNQN)
	}
	if _, err := dialHost(t, TransportTCP, addr1, testNQN, hostCfg(hostNQN)); err == nil {
		t.Fatal("connected to a subsystem the port no longer exports")
	}
	if err := p1.UnlinkSubsystem(testNQN); err == nil {
		t.Fatal("unlinking again succeeded")
	}
	p1.LinkSubsystem(a)
	alive(t, mustHost(t, TransportTCP, addr1, testNQN, hostCfg(hostNQN)), "connected after linking again")
}

func TestRemoveSubsystem(t *testing.T) {
	t.Parallel()
	tg, p1 := tcpTarget(t, 1<<20, TransportTCP)
	a := tg.Subsystem(testNQN)
	p2, err := tg.AddPort(PortConfig{ID: 2, Addr: "127.0.0.1:0", Transport: TransportTCP})
	if err != nil {
		t.Fatal(err)
	}
	p2.LinkSubsystem(a)
	bNQN := testNQN + "-b"
	b := addSubsystem(t, tg, bNQN, p1, p2)
	addr1, addr2 := p1.Addr().String(), p2.Addr().String()
	a1 := mustHost(t, TransportTCP, addr1, testNQN, hostCfg(hostNQN))
	a2 := mustHost(t, TransportTCP, addr2, testNQN, hostCfg(hostNQN2))
	b1 := mustHost(t, TransportTCP, addr1, bNQN, hostCfg(hostNQN))

	if err := tg.RemoveSubsystem(testNQN); err != nil {
		t.Fatal(err)
	}
	waitDone(t, a1, "subsystem removed (port 1)")
	waitDone(t, a2, "subsystem removed (port 2)")
	alive(t, b1, "another subsystem's controller")
	if cs := tg.Controllers(); len(cs) != 1 || cs[0].Subsystem != bNQN {
		t.Fatalf("controllers after removing %s: %+v", testNQN, cs)
	}
	if tg.Subsystem(testNQN) != nil {
		t.Fatal("Subsystem finds the removed subsystem")
	}
	if ss := tg.Subsystems(); len(ss) != 1 || ss[0] != b {
		t.Fatalf("subsystems %v, want only %s", ss, bNQN)
	}
	for _, p := range []*Port{p1, p2} {
		if got := p.Subsystems(); len(got) != 1 || got[0] != bNQN {
			t.Fatalf("port %d exports %v, want [%s]", p.ID(), got, bNQN)
		}
	}
	if got := discoveredVia(t, addr2, hostNQN); len(got) != 1 || got[0] != bNQN {
		t.Fatalf("discovery after removing: %v", got)
	}
	if _, err := dialHost(t, TransportTCP, addr1, testNQN, hostCfg(hostNQN)); err == nil {
		t.Fatal("connected to a removed subsystem")
	}
	// The removed subsystem cannot be linked again.
	p1.LinkSubsystem(a)
	if got := p1.Subsystems(); len(got) != 1 {
		t.Fatalf("port 1 exports %v after linking the removed subsystem", got)
	}
	if err := tg.RemoveSubsystem(testNQN); err == nil {
		t.Fatal("removing it again succeeded")
	}
	// A new subsystem with the NQN.
	addSubsystem(t, tg, testNQN, p1)
	alive(t, mustHost(t, TransportTCP, addr1, testNQN, hostCfg(hostNQN)), "connected to the subsystem added back")
}

// TestManageConcurrent runs the management calls against hosts connecting,
// doing I/O and disconnecting (for the race detector), and checks that no
// controller survives the unlinking of its subsystem from its port, even
// one whose Connect raced it. The hosts are raw NVMe/TCP clients (tc)
// whose failures end their attempt (goexitTB).
func TestManageConcurrent(t *testing.T) {
	t.Parallel()
	tg, port := tcpTarget(t, 1<<20, TransportTCP)
	sub := tg.Subsystem(testNQN)
	addr := port.Addr().String()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ios atomic.Int64
	attempt := func() {
		tb := goexitTB{t}
		aq, cntlid := tcpAdmin(tb, addr, 0)
		defer aq.c.Close()
		io := dialTC(tb, addr, 0)
		defer io.c.Close()
		must(tb, io.connect(1, 15, cntlid), "I/O queue connect")
		for range 4 {
			must(tb, tcpRW(io, true, 8, make([]byte, 4096)), "write")
			ios.Add(1)
		}
	}
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				done := make(chan struct{})
				go func() {
					defer close(done)
					attempt()
				}()
				<-done
			}
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, c := range tg.Controllers() {
				if c.CNTLID%3 == 0 {
					tg.DeleteController(c.Subsystem, c.CNTLID)
				}
			}
			sub.Namespaces()
			tg.Ports()
			tg.Subsystems()
		}
	})
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		if err := port.UnlinkSubsystem(testNQN); err != nil {
			t.Fatal(err)
		}
		if cs := tg.Controllers(); slices.ContainsFunc(cs, func(c ControllerInfo) bool { return c.Subsystem == testNQN }) {
			t.Fatalf("controllers after unlinking: %+v", cs)
		}
		port.LinkSubsystem(sub)
	}
	close(stop)
	wg.Wait()
	if ios.Load() == 0 {
		t.Fatal("no host completed any I/O")
	}
	t.Logf("%d writes completed", ios.Load())
	eventually(t, "controllers left after the hosts closed", func() bool { return len(tg.Controllers()) == 0 })
}

// goexitTB is a testing.TB whose Fatal ends the calling goroutine (a
// host's attempt) without failing the test.
type goexitTB struct{ testing.TB }

func (goexitTB) Fatal(...any)          { runtime.Goexit() }
func (goexitTB) Fatalf(string, ...any) { runtime.Goexit() }
