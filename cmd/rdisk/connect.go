package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rdisk/rdisk/initiator"
	"github.com/rdisk/rdisk/initiator/multipath"
	"github.com/rdisk/rdisk/internal/units"
	"github.com/rdisk/rdisk/nvmeof/host"
	"github.com/urfave/cli/v2"
)

func connectCommand() *cli.Command { return connectCommandWith(protocolDialers) }

func connectCommandWith(mk dialerFactory) *cli.Command {
	return &cli.Command{
		Name:      "connect",
		Usage:     "connect to a remote disk and export it locally (NBD socket, FUSE file)",
		ArgsUsage: "URL... (nvme://HOST[:PORT]/SUBNQN[/NSID] (RDMA; also nvme+rdma://), nvme+tcp://HOST[:PORT]/SUBNQN[/NSID], iser://, iscsi://, srp://; several URLs: the paths of one disk through several gateways)",
		Description: `Adds a session to the initiator daemon (starting it when it is not running)
and exports the disk:

  --nbd unix:/run/rdisk/d.sock     an NBD server on a unix socket (qemu, fio --ioengine=nbd, nbd-client)
  --nbd tcp:127.0.0.1:10809        an NBD server on a loopback TCP port
  --fuse /mnt/rdisk                a FUSE file /mnt/rdisk/NAME of the disk's size (losetup it for a block device)

With neither, the disk is served on the NBD socket /run/rdisk/NAME.nbd. If the
connection drops, I/O is retried on a new connection for --loss-timeout, then
fails with EIO.

Several URLs name paths to one disk (the same disk exported by several rdisk
gateways, e.g. one Ceph RBD image): the session uses every path, choosing by
the paths' ANA/ALUA states (optimized first, then non-optimized; --policy
round-robin among them, or queue-depth: the least busy), fails I/O over to
another path when one is lost or refuses it (ANA inaccessible, ALUA standby),
and waits up to --loss-timeout while no path is usable. Paths that do not
connect at first keep being tried and join later. Flushes go to every path
that carried writes since its last flush. rdisk list shows the paths. --hdr-digest and --data-digest (NVMe/TCP) and the DH-HMAC-CHAP
secrets (--dhchap-secret, --dhchap-ctrl-secret: used for any NVMe-oF controller
that asks for in-band authentication) are settings of the initiator daemon: they
apply when connect starts it (or with --foreground).`,
		Flags: append(append([]cli.Flag{
			&cli.StringFlag{Name: "name", Usage: "session name (default disk0, disk1...); also the FUSE file name and the NBD export name"},
			&cli.StringSliceFlag{Name: "nbd", Usage: "NBD listen address: unix:/PATH or tcp:127.0.0.1:PORT (repeatable)"},
			&cli.StringFlag{Name: "fuse", Usage: "directory to mount the disk file in (created if missing)"},
			&cli.BoolFlag{Name: "read-only", Usage: "export the disk read-only"},
			&cli.BoolFlag{Name: "foreground", Usage: "run the daemon in this process with this session (until interrupted)"},
			drainFlag("with --foreground: on SIGTERM/SIGINT, how long to wait for the session's in-flight I/O, flush and disconnect"),
			&cli.BoolFlag{Name: "json", Usage: "print the session as JSON"},
			policyFlag(),
			discoverFlag(),
			controlFlag(),
		}, sessionFlags()...), append(append(hostIDFlags(), digestFlags()...), dhchapFlags()...)...),
		Action: func(c *cli.Context) error { return runConnect(c, mk) },
	}
}

func runConnect(c *cli.Context, mk dialerFactory) error {
	if c.NArg() < 1 {
		return fmt.Errorf("connect takes a URL (%s, iser://, iscsi:// or srp://), or several for the paths of one disk", nvmeURLUsage)
	}
	if _, err := multipath.ParsePolicy(c.String("policy")); err != nil {
		return fmt.Errorf("--policy: %w", err)
	}
	urls := c.Args().Slice()
	if c.Bool("discover") {
		if len(urls) != 1 {
			return fmt.Errorf("--discover takes one nvme:// or nvme+tcp:// URL, not %d", len(urls))
		}
		var err error
		if urls, err = discoverPaths(c, urls[0]); err != nil {
			return err
		}
	}
	spec := initiator.ConnectSpec{URL: urls[0], Name: c.String("name"), NBD: c.StringSlice("nbd"), ReadOnly: c.Bool("read-only")}
	if len(urls) > 1 {
		spec.URL, spec.URLs, spec.Policy = "", urls, c.String("policy")
	} else if c.IsSet("policy") && !c.Bool("discover") {
		return fmt.Errorf("--policy chooses among the paths of several URLs; connect got one")
	}
	if dir := c.String("fuse"); dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return fmt.Errorf("--fuse: %w", err)
		}
		spec.FUSE = abs
	}
	if c.IsSet("loss-timeout") {
		spec.LossTimeoutMS = c.Duration("loss-timeout").Milliseconds()
		if spec.LossTimeoutMS == 0 {
			spec.LossTimeoutMS = 1 // 0 means "default" on the wire
		}
	}
	if c.IsSet("reconnect-delay") {
		spec.ReconnectDelayMS = max(c.Duration("reconnect-delay").Milliseconds(), 1)
	}
	if err := spec.Validate(); err != nil {
		return err
	}
	// Check the secrets here, so that their errors name the flag instead
	// of ending in the log of a daemon that failed to start.
	if err := dhchapFromFlags(c, &host.Config{}); err != nil {
		return err
	}
	if c.Bool("foreground") {
		if _, err := callDaemon(c, &initiator.Request{Op: initiator.OpPing}, 2*time.Second); err == nil {
			return fmt.Errorf("an initiator daemon is already running on %s: drop --foreground to add the session to it", c.String("control"))
		}
		return runDaemon(c, mk, &spec)
	}
	if _, err := callDaemon(c, &initiator.Request{Op: initiator.OpPing}, 5*time.Second); errors.Is(err, errNoDaemon) {
		if err := startDaemon(c); err != nil {
			return err
		}
	} else if err != nil {
		return err
	} else if c.Bool("hdr-digest") || c.Bool("data-digest") {
		return fmt.Errorf("--hdr-digest and --data-digest configure the initiator daemon, which is already running on %s: pass them to `rdisk daemon`, or disconnect its sessions so that connect starts a new one", c.String("control"))
	} else if c.String("dhchap-secret") != "" || c.String("dhchap-ctrl-secret") != "" {
		return fmt.Errorf("--dhchap-secret and --dhchap-ctrl-secret configure the initiator daemon, which is already running on %s: pass them to `rdisk daemon`, or disconnect its sessions so that connect starts a new one", c.String("control"))
	}
	resp, err := callDaemon(c, &initiator.Request{Op: initiator.OpConnect, Connect: &spec}, 2*time.Minute)
	if err != nil {
		return err
	}
	printConnected(c, resp.Sessions[0])
	return nil
}

// policyFlag is --policy, the path selector of several URLs.
func policyFlag() cli.Flag {
	return &cli.StringFlag{Name: "policy", Value: "round-robin", Usage: "with several URLs: round-robin over the best paths, or queue-depth (the path with the fewest I/Os in flight)"}
}

// startDaemon starts `rdisk daemon --exit-when-idle` in the background,
// logging next to its control socket, and waits until it answers.
func startDaemon(c *cli.Context) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("starting the initiator daemon: %w", err)
	}
	path := c.String("control")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("starting the initiator daemon: %w", err)
	}
	logPath := strings.TrimSuffix(path, ".sock") + ".log"
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("starting the initiator daemon: %w", err)
	}
	defer logf.Close()
	args := []string{"--log-level", c.String("log-level"), "daemon", "--control", path, "--exit-when-idle",
		"--loss-timeout", c.Duration("loss-timeout").String(), "--reconnect-delay", c.Duration("reconnect-delay").String()}
	for _, f := range []string{"hostnqn", "hostid"} {
		if v := c.String(f); v != "" {
			args = append(args, "--"+f, v)
		}
	}
	if c.IsSet("cpus") {
		args = append(args, "--cpus", strconv.Itoa(c.Int("cpus")))
	}
	for _, f := range []string{"hdr-digest", "data-digest"} {
		if c.Bool(f) {
			args = append(args, "--"+f)
		}
	}
	// The secrets go through the environment (readable by the daemon's
	// user only), not the command line (readable by everyone).
	env := os.Environ()
	for f, name := range map[string]string{"dhchap-secret": dhchapSecretEnv, "dhchap-ctrl-secret": dhchapCtrlSecretEnv} {
		v := c.String(f)
		if path, ok := strings.CutPrefix(v, "@"); ok {
			// The daemon reads the file itself; make the path its own.
			abs, err := filepath.Abs(path)
			if err != nil {
				return fmt.Errorf("--%s: %w", f, err)
			}
			v = "@" + abs
		}
		env = append(env, name+"="+v) // empty unsets an inherited one
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the initiator daemon: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := callDaemon(c, &initiator.Request{Op: initiator.OpPing}, time.Second); err == nil {
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("the initiator daemon exited (%v); see %s", err, logPath)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("the initiator daemon did not answer on %s within 10s; see %s", path, logPath)
}

// printConnected tells the user what was made and how to use it.
func printConnected(c *cli.Context, si initiator.SessionInfo) {
	w := c.App.Writer
	if c.Bool("json") {
		b, _ := json.MarshalIndent(si, "", "  ")
		fmt.Fprintln(w, string(b))
		return
	}
	fmt.Fprintf(w, "connected %s: %s (%s, %d-byte blocks)\n", si.Name, sessionURL(si), units.FormatSize(si.Size), si.BlockSize)
	for _, p := range si.Paths {
		fmt.Fprintf(w, "  path  %s: %s, %s\n", p.URL, p.State, p.Access)
	}
	for _, e := range si.Exports {
		kind, addr, _ := strings.Cut(e, " ")
		hint := ""
		switch {
		case kind == "nbd" && strings.HasPrefix(addr, "unix:"):
			sock := strings.TrimPrefix(addr, "unix:")
			hint = fmt.Sprintf("qemu-io nbd+unix:///%s?socket=%s   fio --ioengine=nbd --uri=nbd+unix:///%s?socket=%s", si.Name, sock, si.Name, sock)
		case kind == "nbd":
			hint = fmt.Sprintf("qemu-io nbd://%s/%s   nbd-client %s %s /dev/nbd0 -N %s",
				strings.TrimPrefix(addr, "tcp:"), si.Name, hostOf(strings.TrimPrefix(addr, "tcp:")), portOf(strings.TrimPrefix(addr, "tcp:")), si.Name)
		case kind == "fuse":
			hint = "losetup --find --show " + addr
		}
		fmt.Fprintf(w, "  %-5s %s\n        %s\n", kind, addr, hint)
	}
}
