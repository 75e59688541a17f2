package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
	iscsitarget "github.com/rdisk/rdisk/iser/target"
	nvmet "github.com/rdisk/rdisk/nvmeof/target"
	"github.com/rdisk/rdisk/rdma/iwarp"
	"github.com/rdisk/rdisk/scsi"
	srptarget "github.com/rdisk/rdisk/srp/target"
	"github.com/urfave/cli/v2"
)

const testNQN = "nqn.2026-11.io.rdisk:test"

// Fixed host identity flags, so tests never write /etc/rdisk.
var hostFlags = []string{"--hostnqn", "nqn.2014-08.org.nvmexpress:uuid:6a1b2c3d-0000-4000-8000-000000000001", "--hostid", "6a1b2c3d-0000-4000-8000-000000000001"}

// testTarget is an in-process NVMe-oF target with one namespace, that can
// be stopped and started again on the same address.
type testTarget struct {
	t    *testing.T
	open func() (backstore.Disk, error)
	addr string

	mu   sync.Mutex
	prov *iwarp.Provider
	tg   *nvmet.Target
	disk backstore.Disk
}

func startTarget(t *testing.T, open func() (backstore.Disk, error)) *testTarget {
	t.Helper()
	tt := &testTarget{t: t, open: open, addr: "127.0.0.1:0"}
	if err := tt.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tt.stop)
	return tt
}

func (tt *testTarget) start() error {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	disk, err := tt.open()
	if err != nil {
		return err
	}
	p, err := iwarp.New(iwarp.Config{})
	if err != nil {
		disk.Close()
		return err
	}
	tg, err := nvmet.New(nvmet.Config{Provider: p})
	if err != nil {
		disk.Close()
		p.Close()
		return err
	}
	sub, err := tg.AddSubsystem(nvmet.SubsystemConfig{NQN: testNQN, AllowAnyHost: true})
	if err == nil {
		err = sub.AddNamespace(nvmet.NamespaceConfig{NSID: 1, Disk: disk})
	}
	var port *nvmet.Port
	if err == nil {
		port, err = tg.AddPort(nvmet.PortConfig{ID: 1, Addr: tt.addr})
	}
	if err != nil {
		tg.Close()
		p.Close()
		disk.Close()
		return err
	}
	port.LinkSubsystem(sub)
	tt.addr = port.Addr().String()
	tt.prov, tt.tg, tt.disk = p, tg, disk
	return nil
}

func (tt *testTarget) stop() {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if tt.tg == nil {
		return
	}
	tt.tg.Close()
	tt.prov.Close()
	tt.disk.Close()
	tt.tg = nil
}

func (tt *testTarget) url() string { return "nvme://" + tt.addr + "/" + testNQN }

// rdisk runs the command line in-process and returns its output.
func rdisk(t *testing.T, ctx context.Context, args ...string) (string, error) {
	t.Helper()
	app := newApp()
	// urfave/cli's help flag and command are package variables that every
	// App writes while parsing: without help, Apps run in parallel safely.
	app.HideHelp = true
	var hide func(cmds []*cli.Command)
	hide = func(cmds []*cli.Command) {
		for _, c := range cmds {
			c.HideHelp = true
			hide(c.Subcommands)
		}
	}
	hide(app.Commands)
	var out bytes.Buffer
	app.Writer, app.ErrWriter = &out, &out
	err := app.RunContext(ctx, append([]string{"rdisk", "--log-level", "warn"}, args...))
	return out.String(), err
}

func mustRdisk(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := rdisk(t, ctx, args...)
	if err != nil {
		t.Fatalf("rdisk %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// startTestDaemon runs `rdisk daemon` in-process until the test ends and
// returns its control socket.
func startTestDaemon(t *testing.T, extra ...string) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "initiator.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := rdisk(t, ctx, append(append([]string{"daemon", "--control", sock}, hostFlags...), extra...)...)
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("the daemon did not start: %v", <-done)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("daemon: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("the daemon did not stop")
		}
	})
	return sock
}

func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (scripts/test.sh installs it)", tool)
		}
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// needFUSELoop skips unless this test can mount FUSE and use loop devices.
func needFUSELoop(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (FUSE, loop devices, mount)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skip("no loop devices (/dev/loop-control)")
	}
	needTools(t, "losetup", "mkfs.ext4", "mount", "umount")
}

// attachLoop makes a loop device of file, detached at cleanup.
func attachLoop(t *testing.T, file string) string {
	t.Helper()
	dev := strings.TrimSpace(run(t, "losetup", "--find", "--show", file))
	t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
	return dev
}

func mountDev(t *testing.T, dev string) string {
	t.Helper()
	mnt := t.TempDir()
	run(t, "mount", dev, mnt)
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	return mnt
}

// TestConnectFUSEExt4 is the FUSE acceptance test: rdisk target + rdisk
// connect --fuse, losetup, mkfs.ext4, mount, copy a tree, sync, umount,
// disconnect, connect again, mount, and every file's checksum matches.
func TestConnectFUSEExt4(t *testing.T) {
	t.Parallel()
	needFUSELoop(t)
	tt := startTarget(t, func() (backstore.Disk, error) { return backstore.NewMem(64<<20, 512) })
	// The target keeps its RAM disk across sessions (it is not restarted).
	sock := startTestDaemon(t)
	fuseDir := filepath.Join(t.TempDir(), "fuse")
	connect := func() string {
		out := mustRdisk(t, append([]string{"connect", "--control", sock, "--name", "vol", "--fuse", fuseDir}, append(hostFlags, tt.url())...)...)
		if !strings.Contains(out, "connected vol") {
			t.Fatalf("connect output: %s", out)
		}
		file := filepath.Join(fuseDir, "vol")
		if st, err := os.Stat(file); err != nil || st.Size() != 64<<20 {
			t.Fatalf("FUSE file: %v %v", st, err)
		}
		return file
	}
	file := connect()
	loop := attachLoop(t, file)
	run(t, "mkfs.ext4", "-q", "-F", "-E", "nodiscard", loop)
	mnt := mountDev(t, loop)

	// A tree of files of assorted sizes.
	sums := map[string][32]byte{}
	r := rand.New(rand.NewPCG(7, 7))
	for i := range 40 {
		dir := filepath.Join(mnt, fmt.Sprintf("d%d", i%5), fmt.Sprintf("e%d", i%3))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, r.IntN(300<<10)+r.IntN(3))
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		p := filepath.Join(dir, fmt.Sprintf("f%d", i))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(mnt, p)
		sums[rel] = sha256.Sum256(b)
	}
	run(t, "sync")
	out := mustRdisk(t, "list", "--control", sock)
	if !strings.Contains(out, "vol") || !strings.Contains(out, "live") {
		t.Errorf("list:\n%s", out)
	}
	run(t, "umount", mnt)
	run(t, "losetup", "-d", loop)
	mustRdisk(t, "disconnect", "--control", sock, "vol")
	if _, err := os.Stat(file); err == nil {
		t.Fatalf("the FUSE file is still there after disconnect")
	}

	file = connect()
	loop = attachLoop(t, file)
	mnt = mountDev(t, loop)
	seen := 0
	err := filepath.WalkDir(mnt, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.Contains(p, "lost+found") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(mnt, p)
		if want, ok := sums[rel]; !ok || want != sha256.Sum256(b) {
			return fmt.Errorf("%s: checksum differs", rel)
		}
		seen++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != len(sums) {
		t.Fatalf("found %d files, wrote %d", seen, len(sums))
	}
	run(t, "umount", mnt)
	run(t, "losetup", "-d", loop)
	mustRdisk(t, "disconnect", "--control", sock, "--all")
}

// fioVerify runs deploy/fio/verify-crc32c.fio against an NBD socket.
func fioVerify(t *testing.T, ctx context.Context, sock, name, size string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "fio", "--output-format=normal", "../../deploy/fio/verify-crc32c.fio")
	cmd.Env = append(os.Environ(), "NBD_URI=nbd+unix:///"+name+"?socket="+sock, "SIZE="+size)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func needFioNBD(t *testing.T) {
	t.Helper()
	needTools(t, "fio")
	if out, _ := exec.Command("fio", "--enghelp").CombinedOutput(); !strings.Contains(string(out), "nbd") {
		t.Skip("fio has no nbd engine")
	}
}

// TestConnectNBDFioVerify: fio's verify job through the NBD export, over
// NVMe-oF, with zero errors.
func TestConnectNBDFioVerify(t *testing.T) {
	t.Parallel()
	needFioNBD(t)
	tt := startTarget(t, func() (backstore.Disk, error) { return backstore.NewMem(128<<20, 512) })
	sock := startTestDaemon(t)
	nbdSock := filepath.Join(t.TempDir(), "d.nbd")
	mustRdisk(t, append([]string{"connect", "--control", sock, "--name", "d", "--nbd", "unix:" + nbdSock}, append(hostFlags, tt.url())...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := fioVerify(t, ctx, nbdSock, "d", "64M")
	if err != nil || !strings.Contains(out, "err= 0") {
		t.Fatalf("fio verify: %v\n%s", err, out)
	}
	list := mustRdisk(t, "list", "--control", sock)
	if !strings.Contains(list, "live") {
		t.Errorf("list:\n%s", list)
	}
}

// TestConnectReconnectFioVerify: the same with a file backstore, and the
// target restarted in the middle of the run: the session reconnects, fio
// finishes with zero verify errors (nothing acknowledged was lost), and
// the daemon counts the reconnect.
func TestConnectReconnectFioVerify(t *testing.T) {
	t.Parallel()
	needFioNBD(t)
	img := filepath.Join(t.TempDir(), "disk.img")
	tt := startTarget(t, func() (backstore.Disk, error) {
		return backstore.OpenFile(img, backstore.FileOptions{Size: 128 << 20, Create: true})
	})
	sock := startTestDaemon(t, "--reconnect-delay", "100ms", "--loss-timeout", "60s")
	nbdSock := filepath.Join(t.TempDir(), "d.nbd")
	mustRdisk(t, append([]string{"connect", "--control", sock, "--name", "d", "--nbd", "unix:" + nbdSock}, append(hostFlags, tt.url())...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := fioVerify(t, ctx, nbdSock, "d", "96M")
		done <- result{out, err}
	}()
	// Restart the target once fio is well under way.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(mustRdisk(t, "list", "--control", sock, "--json"), `"writes": `) || writesOf(t, sock) < 2000 {
		if time.Now().After(deadline) {
			t.Fatal("fio did not get going")
		}
		time.Sleep(50 * time.Millisecond)
	}
	tt.stop()
	time.Sleep(300 * time.Millisecond)
	if err := tt.start(); err != nil {
		t.Fatalf("restarting the target: %v", err)
	}
	res := <-done
	if res.err != nil || !strings.Contains(res.out, "err= 0") {
		t.Fatalf("fio verify across a target restart: %v\n%s", res.err, res.out)
	}
	js := mustRdisk(t, "list", "--control", sock, "--json")
	if !strings.Contains(js, `"reconnects": 1`) || !strings.Contains(js, `"errors": 0`) {
		t.Errorf("after the restart:\n%s", js)
	}
}

func writesOf(t *testing.T, sock string) int {
	out := mustRdisk(t, "list", "--control", sock, "--json")
	i := strings.Index(out, `"writes": `)
	if i < 0 {
		return 0
	}
	var n int
	fmt.Sscanf(out[i+len(`"writes": `):], "%d", &n)
	return n
}

// TestConnectErrors: bad URLs, unreachable targets and misuse give one
// clear line.
func TestConnectErrors(t *testing.T) {
	t.Parallel()
	sock := startTestDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// An address where nothing listens.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := l.Addr().String()
	l.Close()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"connect", "--control", sock, "nvme//bad"}, "not a URL"},
		{[]string{"connect", "--control", sock, "ftp://x/y"}, "unknown protocol"},
		{[]string{"connect", "--control", sock, "--nbd", "tcp:0.0.0.0:1", "nvme://127.0.0.1/nqn.x"}, "loopback"},
		{append(append([]string{"connect", "--control", sock}, hostFlags...), "nvme://"+dead+"/"+testNQN), "connecting to nvme://"},
		{[]string{"disconnect", "--control", sock, "nope"}, "no session"},
		{[]string{"disconnect", "--control", sock}, "NAME or --all"},
		{[]string{"list", "--control", filepath.Join(t.TempDir(), "none.sock")}, ""},
	} {
		out, err := rdisk(t, ctx, c.args...)
		if c.want == "" {
			if err != nil || !strings.Contains(out, "no sessions") {
				t.Errorf("%v: %v %s", c.args, err, out)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("rdisk %s: %v, want one line with %q", strings.Join(c.args, " "), err, c.want)
		}
	}
}

// TestConnectISERAndSRPFioVerify: the daemon serves iser://, iscsi:// and
// srp:// URLs like nvme:// ones; fio's verify job passes through the NBD
// export of each.
func TestConnectISERAndSRPFioVerify(t *testing.T) {
	t.Parallel()
	needFioNBD(t)
	sock := startTestDaemon(t)
	protos := []string{"iser", "iscsi", "srp"}
	for _, name := range protos {
		tt := startSCSITarget(t, name)
		nbdSock := filepath.Join(t.TempDir(), name+".nbd")
		mustRdisk(t, append([]string{"connect", "--control", sock, "--name", name, "--nbd", "unix:" + nbdSock}, append(hostFlags, tt.url)...)...)
		fctx, fcancel := context.WithTimeout(context.Background(), 2*time.Minute)
		out, err := fioVerify(t, fctx, nbdSock, name, "16M")
		fcancel()
		if err != nil || !strings.Contains(out, "err= 0") {
			t.Fatalf("%s: fio verify: %v\n%s", name, err, out)
		}
	}
	list := mustRdisk(t, "list", "--control", sock)
	for _, name := range protos {
		if !strings.Contains(list, name) {
			t.Errorf("list lacks %s:\n%s", name, list)
		}
	}
	mustRdisk(t, "disconnect", "--control", sock, "--all")
}

// scsiTestTarget is an in-process iSCSI/iSER portal or SRP target port
// over one file disk that can be stopped and started again on the same
// address.
type scsiTestTarget struct {
	t     *testing.T
	proto string // "iser", "iscsi" or "srp"
	img   string
	addr  string

	prov   *iwarp.Provider
	disk   backstore.Disk
	cancel context.CancelFunc
	close  func()
	url    string
}

const scsiTestIQN = "iqn.2026-11.io.rdisk:reconnect-test"

func startSCSITarget(t *testing.T, proto string) *scsiTestTarget {
	t.Helper()
	tt := &scsiTestTarget{t: t, proto: proto, img: filepath.Join(t.TempDir(), "disk.img"), addr: "127.0.0.1:0"}
	if err := tt.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tt.stop)
	return tt
}

func (tt *scsiTestTarget) start() error {
	disk, err := backstore.OpenFile(tt.img, backstore.FileOptions{Size: 128 << 20, Create: true})
	if err != nil {
		return err
	}
	p, err := iwarp.New(iwarp.Config{})
	if err != nil {
		disk.Close()
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	fail := func(err error) error {
		cancel()
		p.Close()
		disk.Close()
		return err
	}
	if tt.proto == "srp" {
		st, err := srptarget.New(srptarget.Config{})
		if err != nil {
			return fail(err)
		}
		port, err := st.AddPort(srptarget.PortConfig{IDExt: 1, IOCGUID: 2, AllowAnyInitiator: true})
		if err == nil {
			var lu *scsi.LU
			if lu, err = scsi.NewLU(disk, scsi.LUConfig{Name: "lun0", MaxTransferBlocks: uint32(st.Config().MaxTransfer / 512)}); err == nil {
				err = port.Map(0, lu)
			}
		}
		var la net.Addr
		if err == nil {
			la, err = st.Listen(ctx, p, tt.addr)
		}
		if err != nil {
			st.Close()
			return fail(err)
		}
		tt.addr, tt.url, tt.close = la.String(), port.URL(la.String()).String()+"/0", func() { st.Close() }
	} else {
		it, err := iscsitarget.New(iscsitarget.Config{Provider: p,
			Targets: []iscsitarget.TargetConfig{{Name: scsiTestIQN, LUNs: []iscsitarget.LUNConfig{{LUN: 0, Disk: disk}}}}})
		if err != nil {
			return fail(err)
		}
		ln, err := net.Listen("tcp", tt.addr)
		if err != nil {
			it.Close()
			return fail(err)
		}
		go it.Serve(ctx, ln)
		tt.addr = ln.Addr().String()
		tt.url, tt.close = tt.proto+"://"+tt.addr+"/"+scsiTestIQN+"/0", func() { it.Close() }
	}
	tt.prov, tt.disk, tt.cancel = p, disk, cancel
	return nil
}

func (tt *scsiTestTarget) stop() {
	if tt.close == nil {
		return
	}
	tt.cancel()
	tt.close()
	tt.prov.Close()
	tt.disk.Close()
	tt.close = nil
}

// TestConnectReconnectSCSIFioVerify is TestConnectReconnectFioVerify over
// iSER, iSCSI/TCP and SRP.
func TestConnectReconnectSCSIFioVerify(t *testing.T) {
	t.Parallel()
	needFioNBD(t)
	for _, proto := range []string{"iser", "iscsi", "srp"} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			tt := startSCSITarget(t, proto)
			sock := startTestDaemon(t, "--reconnect-delay", "100ms", "--loss-timeout", "60s")
			nbdSock := filepath.Join(t.TempDir(), "d.nbd")
			mustRdisk(t, append([]string{"connect", "--control", sock, "--name", "d", "--nbd", "unix:" + nbdSock}, append(hostFlags, tt.url)...)...)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			type result struct {
				out string
				err error
			}
			done := make(chan result, 1)
			go func() {
				out, err := fioVerify(t, ctx, nbdSock, "d", "96M")
				done <- result{out, err}
			}()
			deadline := time.Now().Add(30 * time.Second)
			for writesOf(t, sock) < 2000 {
				if time.Now().After(deadline) {
					t.Fatal("fio did not get going")
				}
				time.Sleep(50 * time.Millisecond)
			}
			tt.stop()
			time.Sleep(300 * time.Millisecond)
			if err := tt.start(); err != nil {
				t.Fatalf("restarting the target: %v", err)
			}
			res := <-done
			if res.err != nil || !strings.Contains(res.out, "err= 0") {
				t.Fatalf("fio verify across a target restart: %v\n%s", res.err, res.out)
			}
			js := mustRdisk(t, "list", "--control", sock, "--json")
			if !strings.Contains(js, `"reconnects": 1`) || !strings.Contains(js, `"errors": 0`) {
				t.Errorf("after the restart:\n%s", js)
			}
		})
	}
}

// TestConnectForegroundDaemonFlags: rdisk connect --foreground runs the
// daemon with connect's own flags, so every flag the daemon reads must be
// defined there with the daemon's default (a missing --drain-timeout read
// as 0 and every foreground stop timed out at once).
func TestConnectForegroundDaemonFlags(t *testing.T) {
	t.Parallel()
	defaults := func(cmd *cli.Command) map[string]string {
		m := map[string]string{}
		for _, f := range cmd.Flags {
			if df, ok := f.(cli.DocGenerationFlag); ok {
				for _, n := range f.Names() {
					m[n] = df.GetValue()
				}
			}
		}
		return m
	}
	conn, daemon := defaults(connectCommand()), defaults(daemonCommand())
	for _, name := range []string{"drain-timeout", "loss-timeout", "reconnect-delay", "cpus", "control"} {
		want, ok := daemon[name]
		if !ok {
			t.Fatalf("rdisk daemon has no --%s", name)
		}
		got, ok := conn[name]
		if !ok {
			t.Errorf("rdisk connect has no --%s, which --foreground's daemon reads", name)
			continue
		}
		if got != want {
			t.Errorf("rdisk connect --%s defaults to %q, the daemon's to %q", name, got, want)
		}
	}
}
