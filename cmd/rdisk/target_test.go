package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/target"
	"github.com/urfave/cli/v2"
)

// TestTargetFillFlag: --fill is refused where there is no RAM disk to
// fill, with an error naming the flag.
func TestTargetFillFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // error substring; empty: no error
	}{
		{[]string{"--fill"}, ""},
		{[]string{"--fill", "--size", "64MiB", "--block-size", "4096"}, ""},
		{[]string{"--fill", "--file", "/dev/null"}, "--fill writes over the RAM disk only"},
		{[]string{"--fill", "--device", "/dev/null"}, "--fill writes over the RAM disk only"},
		{[]string{"--fill", "--config", "/nonexistent.json"}, "--fill writes over the RAM disk of the quick flags only, not with --config"},
	} {
		err := runTargetConfig(tc.args, nil)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestTargetDiskIOFlags: --direct, --buffered and --no-uring reach the
// namespace, and each is refused, naming it, where it does not apply.
func TestTargetDiskIOFlags(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "disk")
	for _, tc := range []struct {
		args []string
		want string // error substring; empty: no error
	}{
		{[]string{"--file", file, "--size", "1MiB", "--direct", "--no-uring"}, ""},
		{[]string{"--device", "/dev/null", "--buffered"}, ""},
		{[]string{"--direct"}, "--direct opens a --file with O_DIRECT"},
		{[]string{"--device", "/dev/null", "--direct"}, "--direct opens a --file with O_DIRECT"},
		{[]string{"--file", file, "--buffered"}, "--buffered opens a --device"},
		{[]string{"--no-uring"}, "--no-uring applies to --file and --device only"},
		{[]string{"--config", "/nonexistent.json", "--no-uring"}, `set the namespace's "rdisk_no_uring" instead`},
	} {
		err := runTargetConfig(tc.args, func(c *cli.Context, cfg *target.Config) {
			ns := cfg.Subsystems[0].Namespaces[0]
			if ns.Direct != c.Bool("direct") || ns.Buffered != c.Bool("buffered") || ns.NoURing != c.Bool("no-uring") {
				t.Errorf("%v: namespace %+v", tc.args, ns)
			}
		})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

// runTargetConfig runs "rdisk target ARGS" up to its configuration, and
// check (if not nil) on the configuration it built.
func runTargetConfig(args []string, check func(*cli.Context, *target.Config)) error {
	cmd := targetCommand()
	cmd.Action = func(c *cli.Context) error {
		cfg, err := targetConfig(c)
		if err == nil && check != nil {
			check(c, cfg)
		}
		return err
	}
	app := &cli.App{Name: "rdisk", Writer: &bytes.Buffer{}, ErrWriter: &bytes.Buffer{}, Commands: []*cli.Command{cmd}}
	return app.RunContext(context.Background(), append([]string{"rdisk", "target"}, args...))
}

// TestFillRandom: every 4 KiB block of the disk, the short last one
// included, holds data after fillRandom.
func TestFillRandom(t *testing.T) {
	const size = 3<<20 + 4096
	d, err := backstore.NewMem(size, 512)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := fillRandom(d); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, size)
	if err := d.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	zero := make([]byte, 4096)
	for off := 0; off < size; off += 4096 {
		if bytes.Equal(buf[off:off+4096], zero) {
			t.Fatalf("block at %d is still zero after fillRandom", off)
		}
	}
}

// TestTargetTransportFlags: --transport picks the port's transport, TCP
// brings the discovery port 8009 on the --listen host unless turned off,
// and a wrong value is refused naming the flag.
func TestTargetTransportFlags(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		want  string   // error substring; empty: no error
		ports []string // trtype@traddr:trsvcid of each port
	}{
		{nil, "", []string{"rdma+tcp@127.0.0.1:4420", "tcp@127.0.0.1:8009"}},
		{[]string{"--transport", "rdma"}, "", []string{"rdma@127.0.0.1:4420"}},
		{[]string{"--transport", "tcp", "--listen", "127.0.0.2:4421"}, "", []string{"tcp@127.0.0.2:4421", "tcp@127.0.0.2:8009"}},
		{[]string{"--discovery-listen", ""}, "", []string{"rdma+tcp@127.0.0.1:4420"}},
		{[]string{"--listen", "127.0.0.1:8009"}, "", []string{"rdma+tcp@127.0.0.1:8009"}},
		{[]string{"--transport", "fc"}, `--transport "fc"`, nil},
		// A bare host takes the protocol's default port.
		{[]string{"--listen", "127.0.0.2"}, "", []string{"rdma+tcp@127.0.0.2:4420", "tcp@127.0.0.2:8009"}},
		{[]string{"--discovery-listen", "127.0.0.3"}, "", []string{"rdma+tcp@127.0.0.1:4420", "tcp@127.0.0.3:8009"}},
		{[]string{"--listen", "[::1]"}, "", []string{"rdma+tcp@::1:4420", "tcp@::1:8009"}},
	} {
		var ports []string
		err := runTargetConfig(tc.args, func(_ *cli.Context, cfg *target.Config) {
			for _, p := range cfg.Ports {
				ports = append(ports, p.Addr.TrType+"@"+p.Addr.TrAddr+":"+p.Addr.TrSvcID)
			}
		})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		case tc.want == "" && strings.Join(ports, " ") != strings.Join(tc.ports, " "):
			t.Errorf("%v: ports %v, want %v", tc.args, ports, tc.ports)
		}
	}
}

// TestTargetDHCHAPFlags: --dhchap-key and --dhchap-ctrl-key make every
// --allow-host authenticate; misuse is refused naming the flag.
func TestTargetDHCHAPFlags(t *testing.T) {
	const key = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"
	for _, tc := range []struct {
		args  []string
		want  string // error substring; empty: no error
		hosts int    // host entries with a key
	}{
		{[]string{"--allow-host", "nqn.h1", "--allow-host", "nqn.h2", "--dhchap-key", key}, "", 2},
		{[]string{"--allow-host", "nqn.h1", "--dhchap-key", key, "--dhchap-ctrl-key", key}, "", 1},
		{[]string{"--dhchap-key", key}, "--dhchap-key: name the hosts", 0},
		{[]string{"--allow-host", "nqn.h1", "--dhchap-ctrl-key", key}, "--dhchap-ctrl-key needs --dhchap-key", 0},
		{[]string{"--allow-host", "nqn.h1", "--dhchap-key", "secret"}, "--dhchap-key:", 0},
		{[]string{"--allow-host", "nqn.h1", "--dhchap-key", "@/nonexistent/key"}, "--dhchap-key:", 0},
	} {
		var n int
		err := runTargetConfig(tc.args, func(c *cli.Context, cfg *target.Config) {
			for _, h := range cfg.Hosts {
				if h.Key != "" && (h.CtrlKey != "") == c.IsSet("dhchap-ctrl-key") {
					n++
				}
			}
		})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		case tc.want == "" && n != tc.hosts:
			t.Errorf("%v: %d hosts with keys, want %d", tc.args, n, tc.hosts)
		}
	}
}

// TestTargetFileSize: --file with --size creates or extends the file (as
// targetcli's fileio); without --size it must exist and hold data; a file
// longer than --size is not shrunk.
func TestTargetFileSize(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "disk.img")
	cfgOf := func(args ...string) error { return runTargetConfig(args, nil) }
	size := func() int64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	if err := cfgOf("--file", path); err == nil || !strings.Contains(err.Error(), "does not exist: pass --size") {
		t.Fatalf("missing file without --size: %v", err)
	}
	if err := cfgOf("--file", path, "--size", "8MiB"); err != nil || size() != 8<<20 {
		t.Fatalf("create: %v, %d bytes", err, size())
	}
	if err := cfgOf("--file", path, "--size", "16MiB"); err != nil || size() != 16<<20 {
		t.Fatalf("extend: %v, %d bytes", err, size())
	}
	if err := cfgOf("--file", path, "--size", "4MiB"); err == nil || !strings.Contains(err.Error(), "does not shrink") || size() != 16<<20 {
		t.Fatalf("shrink: %v, %d bytes", err, size())
	}
	if err := cfgOf("--file", path); err != nil {
		t.Fatalf("existing file: %v", err)
	}
	empty := filepath.Join(dir, "empty.img")
	os.WriteFile(empty, nil, 0o600)
	if err := cfgOf("--file", empty); err == nil || !strings.Contains(err.Error(), "is empty: pass --size") {
		t.Fatalf("empty file: %v", err)
	}
	if err := cfgOf("--file", path, "--size", "1000"); err == nil || !strings.Contains(err.Error(), "multiple of 4 KiB") {
		t.Fatalf("odd size: %v", err)
	}
}
