package initiator

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/blockdev/blockdevtest"
)

// hostDialer dials fake://HOST/... on the target of HOST.
func hostDialer(targets map[string]*fakeTarget) Dialer {
	return func(ctx context.Context, url string) (blockdev.Device, error) {
		host, _, _ := strings.Cut(strings.TrimPrefix(url, "fake://"), "/")
		return targets[host].dial(ctx, url)
	}
}

func sessionNamed(t *testing.T, sock, name string) SessionInfo {
	t.Helper()
	r, err := call(t, sock, &Request{Op: OpList})
	if err != nil {
		t.Fatal(err)
	}
	for _, si := range r.Sessions {
		if si.Name == name {
			return si
		}
	}
	t.Fatalf("no session %q in %+v", name, r.Sessions)
	return SessionInfo{}
}

func liveConns(ft *fakeTarget) int {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	n := 0
	for _, c := range ft.conns {
		c.mu.Lock()
		if !c.dead {
			n++
		}
		c.mu.Unlock()
	}
	return n
}

// A connect with several URLs makes a multipath session: list shows its
// paths, a lost gateway costs no I/O and shows, a path that cannot connect
// at first joins later, and disconnect closes every path.
func TestDaemonMultipath(t *testing.T) {
	t.Parallel()
	fa, fb := twoTargets(t, blockdevtest.MemConfig{Size: 8 << 20, Queues: 2})
	fa.access.Store(uint32(blockdev.AccessOptimized))
	fb.access.Store(uint32(blockdev.AccessNonOptimized))
	targets := map[string]*fakeTarget{"a": fa, "b": fb}
	d := NewDaemon(DaemonConfig{Dialers: Dialers{"fake": hostDialer(targets)}, ReconnectDelay: 10 * time.Millisecond})
	sock := filepath.Join(t.TempDir(), "ctl.sock")
	l, err := ListenControl(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.ServeControl(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		<-served
		d.Close()
	})

	urls := []string{"fake://a/disk", "fake://b/disk"}
	r, err := call(t, sock, &Request{Op: OpConnect, Connect: &ConnectSpec{URLs: urls, Name: "mp", Policy: "queue-depth",
		NBD: []string{"unix:" + filepath.Join(t.TempDir(), "mp.nbd")}, LossTimeoutMS: 5000}})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	si := r.Sessions[0]
	if si.State != "live" || si.URL != urls[0] || len(si.URLs) != 2 || si.Policy != "queue-depth" || si.Size != 8<<20 || len(si.Paths) != 2 {
		t.Fatalf("session %+v", si)
	}
	if p := si.Paths[0]; p.URL != urls[0] || p.State != "live" || p.Connection != "live" || p.Access != "optimized" {
		t.Errorf("path a %+v", p)
	}
	if p := si.Paths[1]; p.URL != urls[1] || p.Access != "non-optimized" {
		t.Errorf("path b %+v", p)
	}
	if d.Session("mp") != nil {
		t.Error("Session returns a single-path session for a multipath one")
	}
	dev := d.Device("mp")
	data := make([]byte, 64<<10)
	fill(data, 1)
	if _, err := blockdev.WriteAt(dev, data, 0); err != nil {
		t.Fatal(err)
	}
	if st := sessionNamed(t, sock, "mp"); st.Paths[0].Completed == 0 || st.Paths[1].Completed != 0 {
		t.Errorf("I/O per path %+v: want it all on the optimized path", st.Paths)
	}

	// Gateway a goes away: I/O goes on through b.
	fa.setDown(true)
	got := make([]byte, len(data))
	if _, err := blockdev.ReadAt(dev, got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read with gateway a down: %v (data equal: %v)", err, bytes.Equal(got, data))
	}
	si = sessionNamed(t, sock, "mp")
	if si.State != "degraded" || si.Paths[0].State == "live" && si.Paths[0].Connection == "live" || si.Paths[1].Completed == 0 {
		t.Errorf("with gateway a down: %+v", si)
	}
	if st := statsOf(t, d, "mp"); !st.Connected || st.Paths != 2 || st.UsablePaths != 1 || st.Errors != 0 {
		t.Errorf("SessionStats %+v", st)
	}
	fa.setDown(false)
	waitFor(t, "path a back", func() bool { return sessionNamed(t, sock, "mp").State == "live" })
	if st := statsOf(t, d, "mp"); st.Reconnects == 0 || st.UsablePaths != 2 {
		t.Errorf("SessionStats after the reconnect %+v", st)
	}

	// A path that cannot connect at first joins when it can.
	fb.setDown(true)
	if _, err := call(t, sock, &Request{Op: OpConnect, Connect: &ConnectSpec{URLs: urls, Name: "mp2"}}); err != nil {
		t.Fatalf("connect with one gateway down: %v", err)
	}
	si = sessionNamed(t, sock, "mp2")
	if si.State != "degraded" || si.Paths[1].State != "connecting" || si.Paths[1].LastError == "" {
		t.Errorf("session with gateway b down %+v", si)
	}
	fb.setDown(false)
	waitFor(t, "path b to join", func() bool { return sessionNamed(t, sock, "mp2").State == "live" })
	if _, err := blockdev.ReadAt(d.Device("mp2"), got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read on mp2: %v", err)
	}

	// Disconnect closes every path.
	if _, err := call(t, sock, &Request{Op: OpDisconnect, All: true}); err != nil {
		t.Fatal(err)
	}
	if n, m := liveConns(fa), liveConns(fb); n != 0 || m != 0 {
		t.Errorf("connections left after disconnect: %d, %d", n, m)
	}

	// Refusals.
	for _, bad := range []struct {
		spec ConnectSpec
		want string
	}{
		{ConnectSpec{URLs: []string{"fake://a/disk", "fake://a/disk"}}, "twice"},
		{ConnectSpec{URL: "fake://a/disk", URLs: []string{"fake://a/disk"}}, "twice"},
		{ConnectSpec{URLs: urls, Policy: "numa"}, "policy"},
		{ConnectSpec{URLs: []string{"fake://a/disk", "nope://x"}}, "unknown protocol"},
		{ConnectSpec{URLs: []string{"fake://a/disk", "not a url"}}, "not a URL"},
	} {
		if _, err := call(t, sock, &Request{Op: OpConnect, Connect: &bad.spec}); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("connect %+v: %v, want %q", bad.spec, err, bad.want)
		}
	}
	fa.setDown(true)
	fb.setDown(true)
	if _, err := call(t, sock, &Request{Op: OpConnect, Connect: &ConnectSpec{URLs: urls}}); err == nil || !strings.Contains(err.Error(), "no path connected") {
		t.Errorf("connect with every gateway down: %v", err)
	}
	fa.setDown(false)
	fb.setDown(false)
	fb.setID("disk-2")
	if _, err := call(t, sock, &Request{Op: OpConnect, Connect: &ConnectSpec{URLs: urls}}); err == nil || !strings.Contains(err.Error(), "reaches disk") {
		t.Errorf("connect to two disks: %v", err)
	}
	if l := d.List(); len(l) != 0 {
		t.Errorf("sessions left: %+v", l)
	}
}

// The control protocol stays backwards compatible: a single-URL request
// of before decodes, and its session's JSON has no multipath fields.
func TestControlSingleURLCompatible(t *testing.T) {
	t.Parallel()
	req, err := DecodeRequest(strings.NewReader(`{"op":"connect","connect":{"url":"nvme://127.0.0.1:4420/nqn.x","name":"d1","loss_timeout_ms":-1}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := req.Connect.PathURLs(); len(got) != 1 || got[0] != "nvme://127.0.0.1:4420/nqn.x" {
		t.Errorf("paths %q", got)
	}
	b, _ := json.Marshal(SessionInfo{Name: "d1", URL: "nvme://x"})
	for _, k := range []string{`"urls"`, `"paths"`, `"policy"`} {
		if bytes.Contains(b, []byte(k)) {
			t.Errorf("single-URL session JSON has %s: %s", k, b)
		}
	}
	if _, err := DecodeRequest(strings.NewReader(`{"op":"connect","connect":{"urls":["nvme://a/n","iser://b/n/0"],"policy":"queue-depth"}}`)); err != nil {
		t.Errorf("multipath connect: %v", err)
	}
}

// DialMultipath opens every path or none.
func TestDialMultipath(t *testing.T) {
	t.Parallel()
	fa, fb := twoTargets(t, blockdevtest.MemConfig{Size: 1 << 20})
	dialers := Dialers{"fake": hostDialer(map[string]*fakeTarget{"a": fa, "b": fb})}
	urls := []string{"fake://a/disk", "fake://b/disk"}
	mp, err := DialMultipath(t.Context(), MultipathConfig{URLs: urls, Dialers: dialers, ReconnectDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := blockdev.WriteAt(mp, make([]byte, 8192), 0); err != nil {
			t.Fatal(err)
		}
	}
	if pi := mp.Paths(); len(pi) != 2 || pi[0].Completed != 1 || pi[1].Completed != 1 {
		t.Errorf("paths %+v: want one write on each", pi)
	}
	if mp.Info().Name != urls[0] {
		t.Errorf("name %q", mp.Info().Name)
	}
	mp.Close()
	if n, m := liveConns(fa), liveConns(fb); n != 0 || m != 0 {
		t.Errorf("connections left after Close: %d, %d", n, m)
	}
	fb.setDown(true)
	if _, err := DialMultipath(t.Context(), MultipathConfig{URLs: urls, Dialers: dialers}); err == nil || !strings.Contains(err.Error(), "fake://b/disk") {
		t.Errorf("DialMultipath with b down: %v", err)
	}
	if n := liveConns(fa); n != 0 {
		t.Errorf("%d connections to a left after a failed DialMultipath", n)
	}
}
