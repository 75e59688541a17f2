package initiator

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/blockdev/blockdevtest"
)

// startDaemon runs a daemon with a "fake" dialer and its control socket in
// a temp dir; it returns the daemon, the socket path and the fake target.
func startDaemon(t *testing.T) (*Daemon, string, *fakeTarget) {
	t.Helper()
	ft := newFakeTarget(t, blockdevtest.MemConfig{Size: 8 << 20, Queues: 2})
	d := NewDaemon(DaemonConfig{Dialers: Dialers{"fake": ft.dial}, ReconnectDelay: 10 * time.Millisecond})
	sock := filepath.Join(t.TempDir(), "run", "initiator.sock")
	l, err := ListenControl(sock)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(sock)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("control socket mode: %v %v", st.Mode(), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.ServeControl(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeControl: %v", err)
		}
		d.Close()
	})
	return d, sock, ft
}

func call(t *testing.T, sock string, req *Request) (*Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return Call(ctx, sock, req)
}

func TestDaemonControl(t *testing.T) {
	t.Parallel()
	d, sock, _ := startDaemon(t)
	if _, err := ListenControl(sock); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("second daemon on the socket: %v", err)
	}
	if r, err := call(t, sock, &Request{Op: OpPing}); err != nil || r.PID != os.Getpid() {
		t.Fatalf("ping: %+v %v", r, err)
	}
	dir := t.TempDir()
	nbdSock := filepath.Join(dir, "nbd", "disk.sock")
	r, err := call(t, sock, &Request{Op: OpConnect, Connect: &ConnectSpec{URL: "fake://t/1", Name: "vol1",
		NBD: []string{"unix:" + nbdSock, "tcp:127.0.0.1:0"}, LossTimeoutMS: 500}})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	si := r.Sessions[0]
	if si.Name != "vol1" || si.State != "live" || si.Size != 8<<20 || si.Protocol != "fake" || len(si.Exports) != 2 {
		t.Fatalf("session %+v", si)
	}
	if !strings.HasPrefix(si.Exports[1], "nbd tcp:127.0.0.1:") || strings.HasSuffix(si.Exports[1], ":0") {
		t.Errorf("tcp export %q: want the bound port", si.Exports[1])
	}
	// The NBD endpoints greet.
	for _, a := range []string{"unix:" + nbdSock, strings.TrimPrefix(si.Exports[1], "nbd ")} {
		network, addr, _ := ParseNBDAddr(a)
		c, err := net.Dial(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 8)
		io.ReadFull(c, b)
		c.Close()
		if string(b) != "NBDMAGIC" {
			t.Errorf("%s: greeting %q", a, b)
		}
	}
	// A second session gets a default name; the taken name is refused.
	if r, err := call(t, sock, &Request{Op: OpConnect, Connect: &ConnectSpec{URL: "fake://t/2"}}); err != nil || r.Sessions[0].Name != "disk0" {
		t.Fatalf("second connect: %+v %v", r, err)
	}
	for _, bad := range []struct {
		spec ConnectSpec
		want string
	}{
		{ConnectSpec{URL: "fake://t/3", Name: "vol1"}, "exists"},
		{ConnectSpec{URL: "nope://x"}, "unknown protocol"},
		{ConnectSpec{URL: "not a url"}, "not a URL"},
		{ConnectSpec{URL: "fake://x", NBD: []string{"tcp:10.1.2.3:10809"}}, "loopback"},
		{ConnectSpec{URL: "fake://x", NBD: []string{"unix:relative"}}, "ABSOLUTE"},
		{ConnectSpec{URL: "fake://x", Name: "../etc"}, "session name"},
		{ConnectSpec{URL: "fake://x", NBD: []string{"unix:" + nbdSock}}, "in use"},
	} {
		if _, err := call(t, sock, &Request{Op: OpConnect, Connect: &bad.spec}); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("connect %+v: %v, want %q", bad.spec, err, bad.want)
		}
	}
	r, err = call(t, sock, &Request{Op: OpList})
	if err != nil || len(r.Sessions) != 2 || r.Sessions[0].Name != "vol1" || r.Sessions[1].Name != "disk0" {
		t.Fatalf("list: %+v %v", r, err)
	}
	// I/O through the daemon's session shows in the counters.
	if _, err := blockdev.WriteAt(d.Session("vol1"), make([]byte, 8192), 0); err != nil {
		t.Fatal(err)
	}
	r, _ = call(t, sock, &Request{Op: OpList})
	if st := r.Sessions[0].Stats; st.Writes != 1 || st.BytesWritten != 8192 {
		t.Errorf("stats %+v", st)
	}
	if _, err := call(t, sock, &Request{Op: OpDisconnect, Name: "nope"}); err == nil {
		t.Errorf("disconnect of an unknown session succeeded")
	}
	if _, err := call(t, sock, &Request{Op: OpDisconnect, Name: "vol1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(nbdSock); !os.IsNotExist(err) {
		t.Errorf("NBD socket left behind: %v", err)
	}
	r, err = call(t, sock, &Request{Op: OpDisconnect, All: true})
	if err != nil || len(r.Sessions) != 1 {
		t.Fatalf("disconnect --all: %+v %v", r, err)
	}
	select {
	case <-d.Idle():
	default:
		t.Errorf("no idle signal after the last session went")
	}
	if r, _ := call(t, sock, &Request{Op: OpList}); len(r.Sessions) != 0 {
		t.Errorf("sessions left: %+v", r.Sessions)
	}
}

func TestDaemonConnectUnreachable(t *testing.T) {
	t.Parallel()
	_, sock, ft := startDaemon(t)
	ft.setDown(true)
	_, err := call(t, sock, &Request{Op: OpConnect, Connect: &ConnectSpec{URL: "fake://down"}})
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("connect to a down target: %v", err)
	}
}

// TestDaemonIdleAfterFailedConnect: a connect that fails leaves the daemon
// without sessions, and it says so (a daemon started for that connect with
// --exit-when-idle exits instead of lingering).
func TestDaemonIdleAfterFailedConnect(t *testing.T) {
	t.Parallel()
	d, sock, ft := startDaemon(t)
	ft.setDown(true)
	if _, err := call(t, sock, &Request{Op: OpConnect, Connect: &ConnectSpec{URL: "fake://down"}}); err == nil {
		t.Fatal("connect to a down target succeeded")
	}
	select {
	case <-d.Idle():
	case <-time.After(5 * time.Second):
		t.Fatal("no idle signal after the failed connect")
	}
}

// TestDaemonFUSEDirOnce: a second session on a FUSE directory already in
// use, or on any mount point, is refused instead of mounted over it.
func TestDaemonFUSEDirOnce(t *testing.T) {
	t.Parallel()
	_, sock, _ := startDaemon(t)
	_, err := call(t, sock, &Request{Op: OpConnect, Connect: &ConnectSpec{URL: "fake://x", FUSE: "/proc"}})
	if err == nil || !strings.Contains(err.Error(), "is a mount point already") {
		t.Fatalf("FUSE on a mount point: %v", err)
	}
}

func TestControlBadInput(t *testing.T) {
	t.Parallel()
	_, sock, _ := startDaemon(t)
	for _, in := range []string{"", "{", `{"op":"launch"}`, `{"op":"list","extra":1}`, `{"op":"disconnect"}`, `{"op":"connect"}`, strings.Repeat("x", 2<<20)} {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		go func() { c.Write([]byte(in + "\n")); c.(*net.UnixConn).CloseWrite() }()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		out, _ := io.ReadAll(c)
		c.Close()
		var r Response
		if err := json.Unmarshal(bytes.TrimSpace(out), &r); err != nil || r.OK || r.Error == "" {
			t.Errorf("input %.40q: response %q", in, out)
		}
	}
}

// FuzzDecodeRequest: any input is refused or decodes to a valid request
// that round-trips.
func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"op":"ping"}`))
	f.Add([]byte(`{"op":"list"}` + "\n"))
	f.Add([]byte(`{"op":"connect","connect":{"url":"nvme://127.0.0.1:4420/nqn.x","name":"d1","nbd":["unix:/run/x.sock","tcp:127.0.0.1:10809"],"fuse":"/mnt/r","loss_timeout_ms":-1}}`))
	f.Add([]byte(`{"op":"disconnect","name":"d1","force":true}`))
	f.Add([]byte(`{"op":"disconnect","all":true}`))
	f.Add([]byte(`{"op":"connect","connect":{"url":"x://y","nbd":["tcp:[::1]:1"]}}`))
	f.Add([]byte(`{"op":"connect","connect":{"url":"","urls":["nvme://a/n","iser://b/n/0"],"policy":"queue-depth","name":"mp"}}`))
	f.Add([]byte(`{"op":"connect","connect":{"url":"nvme://a/n","urls":["nvme://b/n"]}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		req, err := DecodeRequest(bytes.NewReader(in))
		if err != nil {
			return
		}
		if err := req.Validate(); err != nil {
			t.Fatalf("decoded request does not validate: %v", err)
		}
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeRequest(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("re-encoded request refused: %v\n%s", err, b)
		}
		b2, _ := json.Marshal(again)
		if !bytes.Equal(b, b2) {
			t.Fatalf("round trip differs:\n%s\n%s", b, b2)
		}
	})
}
