package main

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/rdisk/rdisk/backstore"

	"github.com/rdisk/rdisk/internal/units"
	nvmet "github.com/rdisk/rdisk/nvmeof/target"
	"github.com/rdisk/rdisk/rdma/iwarp"
	"github.com/rdisk/rdisk/srp"
	"github.com/rdisk/rdisk/target"
	"github.com/urfave/cli/v2"
)

const (
	defaultNQN      = "nqn.2026-11.io.rdisk:default"
	defaultNVMeAddr = "127.0.0.1:4420"
	// defaultDiscoveryAddr is NVMe/TCP's well-known discovery port
	// (NVME_TCP_DISC_PORT) on the --listen host.
	defaultDiscoveryAddr = "127.0.0.1:8009"
	defaultIQN           = "iqn.2026-11.io.rdisk:default"
	defaultISCSIAddr     = "127.0.0.1:3260"
	defaultRAMSize       = "1GiB"
	defaultBlockSize     = 512
)

func targetCommand() *cli.Command {
	return &cli.Command{
		Name:  "target",
		Usage: "export disks over NVMe-oF (RDMA and TCP), iSER, iSCSI and SRP (default: a 1 GiB RAM disk on 127.0.0.1)",
		Description: `With no flags, exports a sparse 1 GiB RAM disk as namespace 1 of
nqn.2026-11.io.rdisk:default on 127.0.0.1:4420 over NVMe/TCP and NVMe/RDMA on
rdisk's software iWARP transport (one port number: an MPA request and an
NVMe/TCP ICReq are told apart by their first bytes; --transport rdma or tcp
serves one), with an NVMe/TCP discovery port on 127.0.0.1:8009 (the port
"nvme discover -t tcp" asks by default; --discovery-listen "" turns it off),
and the same disk as LUN 0 of iqn.2026-11.io.rdisk:default on the
iSCSI portal 127.0.0.1:3260 (iSER and iSCSI/TCP on one port) and over SRP on
127.0.0.1:5555, allowing any host (it only listens on loopback).
--iscsi-listen "" and --srp-listen "" turn those off.

--config reads nvmetcli's saved JSON (/etc/nvmet/config.json), strictly
(unknown keys, duplicates and dangling references are refused with their
line); namespaces may also name "ram:SIZE" or "null:SIZE" as their device
path, and rdisk_iscsi / rdisk_srp sections export namespaces over iSCSI and
SRP (one SCSI logical unit per namespace).

While it runs, rdisk admin (on --admin-socket) lists what is live and adds,
removes and resizes namespaces, hosts, ports and LUNs; rdisk admin save
writes the model back as a --config file. SIGHUP re-reads --config and
applies the difference.`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "listen", Value: defaultNVMeAddr, Usage: "NVMe-oF address (host:port)"},
			&cli.StringFlag{Name: "transport", Value: string(nvmet.TransportBoth), Usage: "NVMe-oF transport on --listen: rdma, tcp or rdma+tcp (both on one port number)"},
			&cli.StringFlag{Name: "discovery-listen", Value: defaultDiscoveryAddr, Usage: "NVMe/TCP discovery port (host:port; empty: none; only with a tcp transport)"},
			&cli.StringFlag{Name: "size", Value: defaultRAMSize, Usage: "RAM disk size; with --file, the size to create or extend the file to (as targetcli's fileio)"},
			&cli.BoolFlag{Name: "fill", Usage: "write random data over the whole RAM disk before serving it (reads then touch memory, as on a used disk)"},
			&cli.StringFlag{Name: "file", Usage: "export this regular file instead of a RAM disk"},
			&cli.StringFlag{Name: "device", Usage: "export this block device instead of a RAM disk (or a Ceph RBD image, rbd:POOL/IMAGE[?conf=...], in a build with -tags ceph,pacific)"},
			&cli.BoolFlag{Name: "direct", Usage: "with --file: open the file with O_DIRECT, past the page cache (nvmet's buffered_io 0; in --config, a namespace's \"rdisk_direct\": true)"},
			&cli.BoolFlag{Name: "buffered", Usage: "with --device: open the block device through the page cache instead of O_DIRECT (\"rdisk_buffered\")"},
			&cli.BoolFlag{Name: "no-uring", Usage: "with --file or --device: run disk I/O on worker threads instead of io_uring (\"rdisk_no_uring\")"},
			&cli.BoolFlag{Name: "read-only", Usage: "export the disk write-protected (NVMe namespace write protected, SCSI WP)"},
			&cli.IntFlag{Name: "block-size", Value: defaultBlockSize, Usage: "logical block size of a RAM disk or file (512 or 4096)"},
			&cli.StringFlag{Name: "nqn", Value: defaultNQN, Usage: "subsystem NQN"},
			&cli.StringSliceFlag{Name: "allow-host", Usage: "host NQN allowed to connect (repeatable)"},
			&cli.BoolFlag{Name: "allow-any-host", Usage: "let any host connect (required on a non-loopback address without --allow-host)"},
			&cli.StringFlag{Name: "dhchap-key", Usage: "NVMe-oF: the hosts of --allow-host must authenticate with this DH-HMAC-CHAP secret (nvmet's dhchap_key): DHHC-1:XX:BASE64: as `nvme gen-dhchap-key` prints it, or @FILE"},
			&cli.StringFlag{Name: "dhchap-ctrl-key", Usage: "NVMe-oF: the controller's DH-HMAC-CHAP secret for bidirectional authentication (dhchap_ctrl_key; needs --dhchap-key): DHHC-1:XX:BASE64: or @FILE"},
			&cli.StringFlag{Name: "iscsi-listen", Value: defaultISCSIAddr, Usage: "iSCSI/iSER portal address (host:port; empty: none)"},
			&cli.StringFlag{Name: "iqn", Value: defaultIQN, Usage: "iSCSI target name"},
			&cli.StringSliceFlag{Name: "allow-initiator", Usage: "iSCSI initiator IQN allowed to log in (repeatable)"},
			&cli.StringFlag{Name: "config", Usage: "nvmetcli JSON configuration, with rdisk_iscsi and rdisk_srp sections for the SCSI transports (replaces the flags above); SIGHUP re-reads it and applies the difference"},
			metricsFlag(),
			drainFlag("on SIGTERM/SIGINT, how long to let in-flight I/O finish and hosts log out before dropping them (then the disks are flushed)"),
			&cli.StringFlag{Name: "admin-socket", Value: target.DefaultAdminSocket, Usage: "unix socket for rdisk admin (root only; empty: none; the default is skipped with a warning when another target holds it)"},
			cpusFlag("most CPUs (Go Ps) to use; rdisk uses one per connected queue up to this", "$GOMAXPROCS, else all CPUs"),
			sysmonFlag(),
		}, srpTargetFlags()...),
		Action: runTarget,
	}
}

func runTarget(c *cli.Context) error {
	log, err := logger(c)
	if err != nil {
		return err
	}
	cfg, err := targetConfig(c)
	if err != nil {
		return err
	}
	hook, err := procHook(c, log)
	if err != nil {
		return err
	}
	metricsLn, err := listenMetrics(c)
	if err != nil {
		return err
	}
	if metricsLn != nil {
		defer metricsLn.Close()
	}
	adminLn, err := listenAdmin(c, log)
	if err != nil {
		return err
	}
	if adminLn != nil {
		defer adminLn.Close()
	}
	choice, err := rdmaOf(c)
	if err != nil {
		return err
	}
	provs := &providerSet{log: log}
	defer provs.Close()
	p, err := provs.open(choice, rdmaListenAddr(cfg))
	if err != nil {
		return err
	}
	if _, sw := p.(*iwarp.Provider); !sw {
		log.Info("rdisk target: RDMA over rdma-core verbs", "provider", p.Name())
	}
	// Ports and SCSI sections with their own rdisk_rdma.
	cfg.OpenRDMA = provs.open
	run, err := target.Start(cfg, p, log, hook)
	if err != nil {
		return err
	}
	defer run.Close()
	if c.Bool("fill") {
		d := run.Disks()[0]
		rw, ro := d.(interface{ SetReadOnly(bool) })
		ro = ro && d.ReadOnly()
		if ro {
			// --read-only --fill: the data goes in first, then the disk
			// is write-protected again.
			rw.SetReadOnly(false)
		}
		err := fillRandom(d)
		if ro {
			rw.SetReadOnly(true)
		}
		if err != nil {
			return fmt.Errorf("--fill: %w", err)
		}
	}
	printDisks(cfg, run.Disks())
	for _, port := range run.Ports {
		printPort(port, port.Subsystems(), providerName(port.Provider()))
	}
	printSCSIConfig(cfg, run)
	reload := reloadFunc(c.String("config"), run, log)
	if metricsLn != nil {
		go serveMetrics(c.Context, metricsLn, newRegistry(run.Collector()), log)
		fmt.Printf("  metrics: http://%s/metrics\n", metricsLn.Addr())
	}
	// SIGHUP is caught before the admin socket answers: whoever sees the
	// target up may send it (a SIGHUP before Notify would kill it).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if adminLn != nil {
		go target.ServeAdmin(c.Context, adminLn, run.AdminHandler(reload, log), log)
		fmt.Printf("  admin: rdisk admin --socket %s status\n", adminLn.Addr())
	}
	notifyReady(log, "serving")
	for done := false; !done; {
		select {
		case <-c.Context.Done():
			done = true
		case <-hup:
			if reload == nil {
				log.Warn("rdisk target: SIGHUP: started from flags, no --config file to re-read")
				continue
			}
			if _, err := reload(); err != nil {
				log.Error("rdisk target: SIGHUP: reload", "err", err)
			}
		}
	}
	notifyStopping()
	fmt.Println("rdisk target: stopping: draining (in-flight I/O, logouts), then flushing the disks")
	dctx, dcancel := context.WithTimeout(context.Background(), c.Duration("drain-timeout"))
	derr := run.Drain(dctx)
	dcancel()
	if st := run.SRP; st != nil {
		// Which descriptor formats the initiators used (the interop
		// harness checks them).
		fmt.Printf("rdisk target: SRP stats %+v\n", st.Stats())
	}
	if derr != nil {
		return fmt.Errorf("stopping after --drain-timeout %s: %w", c.Duration("drain-timeout"), derr)
	}
	fmt.Println("rdisk target: stopped cleanly")
	return nil
}

// rdmaListenAddr is the first RDMA address the configuration listens on
// (what --rdma auto asks the devices about), or "".
func rdmaListenAddr(cfg *target.Config) string {
	for _, pc := range cfg.Ports {
		if pc.Addr.TrType != "tcp" && !pc.Disabled {
			return net.JoinHostPort(pc.Addr.TrAddr, pc.Addr.TrSvcID)
		}
	}
	if cfg.SRP != nil && len(cfg.SRP.Listen) > 0 {
		return cfg.SRP.Listen[0]
	}
	return ""
}

// listenAdmin opens --admin-socket. The default path, when it cannot be
// had (another target holds it, or it is not writable), is skipped with a
// warning; a path given is required.
func listenAdmin(c *cli.Context, log *slog.Logger) (net.Listener, error) {
	path := c.String("admin-socket")
	if path == "" {
		return nil, nil
	}
	ln, err := target.ListenAdmin(path)
	if err != nil && !c.IsSet("admin-socket") {
		log.Warn("rdisk target: no admin socket (--admin-socket PATH picks another)", "err", err)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("--admin-socket: %w", err)
	}
	return ln, nil
}

// reloadFunc re-reads the --config file and applies the difference, or is
// nil for a target started from flags.
func reloadFunc(path string, run *target.Running, log *slog.Logger) func() (*target.Changes, error) {
	if path == "" {
		return nil
	}
	return func() (*target.Changes, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("reloading: %w", err)
		}
		defer f.Close()
		cfg, err := target.Parse(f)
		if err != nil {
			return nil, fmt.Errorf("reloading %s (nothing changed): %w", path, err)
		}
		ch, err := run.Apply(cfg)
		if ch != nil {
			for _, a := range ch.Applied {
				log.Info("rdisk target: reload: " + a)
			}
			for _, s := range ch.Skipped {
				log.Warn("rdisk target: reload: not applied (needs a restart): " + s)
			}
			if len(ch.Applied) == 0 && len(ch.Skipped) == 0 {
				log.Info("rdisk target: reload: nothing changed", "config", path)
			}
		}
		return ch, err
	}
}

// prepareFile makes the --file backstore as targetcli's fileio does: with
// --size, a missing file is created (sparse) and a shorter one extended; a
// longer one is refused rather than shrunk. Without --size the file must
// exist and hold data.
func prepareFile(path, size string, sized bool) error {
	fi, err := os.Stat(path)
	switch {
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("--file: %w", err)
	case err == nil && !fi.Mode().IsRegular():
		return fmt.Errorf("--file %s is not a regular file (use --device for a block device)", path)
	case !sized && err != nil:
		return fmt.Errorf("--file %s does not exist: pass --size to create it", path)
	case !sized && fi.Size() == 0:
		return fmt.Errorf("--file %s is empty: pass --size to extend it", path)
	case !sized:
		return nil
	}
	n, perr := units.ParseSize(size)
	if perr != nil {
		return fmt.Errorf("--size: %w", perr)
	}
	if n <= 0 || n%4096 != 0 {
		return fmt.Errorf("--size %s: want a positive multiple of 4 KiB", size)
	}
	if err == nil {
		switch {
		case fi.Size() == n:
			return nil
		case fi.Size() > n:
			return fmt.Errorf("--size %s is smaller than --file %s (%s): rdisk does not shrink files", size, path, units.FormatSize(fi.Size()))
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("--file: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(n); err != nil {
		return fmt.Errorf("--file %s: sizing to %s: %w", path, size, err)
	}
	return nil
}

// withPort adds the protocol's default port to an address given as a
// bare host ("--listen 192.0.2.1" means 192.0.2.1:4420); an empty address
// stays empty (the portal is off).
func withPort(addr, port string) string {
	if addr == "" {
		return ""
	}
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	return net.JoinHostPort(strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]"), port)
}

// scsiFromFlags adds the quick flags' iSCSI portal and SRP target port to
// cfg, each exporting namespace 1 of nqn as LUN 0: the same model --config
// gives, so both run one code (target.Start). An open (non-loopback)
// address needs an ACL or --allow-any-host.
func scsiFromFlags(c *cli.Context, cfg *target.Config, nqn string) error {
	lun := []target.LUNRef{{LUN: 0, Subsystem: nqn, NSID: 1}}
	if addr := withPort(c.String("iscsi-listen"), "3260"); addr != "" {
		h, _, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("--iscsi-listen %q: want HOST or HOST:PORT", c.String("iscsi-listen"))
		}
		allowed := c.StringSlice("allow-initiator")
		if len(allowed) == 0 && !c.Bool("allow-any-host") && !target.IsLoopback(h) {
			return fmt.Errorf("--iscsi-listen %s is not a loopback address: name the initiators allowed with --allow-initiator IQN, or pass --allow-any-host", addr)
		}
		cfg.ISCSI = &target.ISCSIConfig{Portals: []string{addr}, Targets: []target.ISCSITarget{{
			IQN: c.String("iqn"), LUNs: lun, AllowedInitiators: allowed, AllowAnyInitiator: len(allowed) == 0}}}
	}
	if addr := withPort(c.String("srp-listen"), "5555"); addr != "" {
		if _, err := srp.ParseGUID(c.String("srp-id-ext")); err != nil {
			return fmt.Errorf("--srp-id-ext: %w", err)
		}
		if _, err := srp.ParseGUID(c.String("srp-ioc-guid")); err != nil {
			return fmt.Errorf("--srp-ioc-guid: %w", err)
		}
		h, _, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("--srp-listen %q: want HOST or HOST:PORT", c.String("srp-listen"))
		}
		allow := c.StringSlice("srp-allow")
		anyInit := len(allow) == 0 && (c.Bool("allow-any-host") || target.IsLoopback(h))
		if len(allow) == 0 && !anyInit {
			return fmt.Errorf("--srp-listen %s is not a loopback address: name the initiators allowed with --srp-allow, or pass --allow-any-host", addr)
		}
		cfg.SRP = &target.SRPConfig{Listen: []string{addr}, Ports: []target.SRPPort{{
			IDExt: c.String("srp-id-ext"), IOCGUID: c.String("srp-ioc-guid"), LUNs: lun, AllowedInitiators: allow, AllowAnyInitiator: anyInit}}}
	}
	return nil
}

// printSCSIConfig prints the iSCSI targets and SRP ports of the config.
func printSCSIConfig(cfg *target.Config, run *target.Running) {
	if run.ISCSI != nil {
		pname := providerName(run.ISCSIProvider())
		for _, a := range run.ISCSIPortals {
			for _, t := range cfg.ISCSI.Targets {
				switch {
				case pname == "software iWARP":
					fmt.Printf("rdisk target: serving %s on %s (iSCSI/TCP and iSER, %s)\n", t.IQN, a, pname)
				case len(run.ISERPortals) > 0:
					fmt.Printf("rdisk target: serving %s on %s (iSCSI/TCP, and iSER over %s on the same port number)\n", t.IQN, a, pname)
				default:
					fmt.Printf("rdisk target: serving %s on %s (iSCSI/TCP; no RDMA device serves this address for iSER)\n", t.IQN, a)
				}
				for _, l := range t.LUNs {
					fmt.Printf("  LUN %d = %s namespace %d: iscsi://%s/%s/%d  iser://%s/%s/%d\n", l.LUN, l.Subsystem, l.NSID, a, t.IQN, l.LUN, a, t.IQN, l.LUN)
				}
				fmt.Printf("  discover: rdisk discover iscsi://%s   (Linux: iscsiadm -m discovery -t st -p %s [-I iser])\n", a, a)
			}
		}
	}
	pname := providerName(run.SRPProvider())
	for _, a := range run.SRPAddrs {
		for i, p := range run.SRPPorts {
			u := p.URL(a.String())
			fmt.Printf("rdisk target: serving SRP target port on %s (SRP over RDMA/CM, %s)\n  %s\n", a, pname, u)
			for _, l := range cfg.SRP.Ports[i].LUNs {
				fmt.Printf("  LUN %d = %s namespace %d\n", l.LUN, l.Subsystem, l.NSID)
			}
			fmt.Printf("  Linux: echo %s > /sys/class/infiniband_srp/srp-<dev>-1/add_target\n", u.AddTarget())
		}
	}
}

// printDisks prints each namespace's disk: its size and what backs it.
func printDisks(cfg *target.Config, disks []backstore.Disk) {
	i := 0
	for _, s := range cfg.Subsystems {
		for _, ns := range s.Namespaces {
			if i >= len(disks) {
				return
			}
			d := disks[i]
			i++
			backing := ns.Device.Path
			switch {
			case strings.HasPrefix(backing, "ram:"):
				backing = "RAM disk"
			case strings.HasPrefix(backing, "null:"):
				backing = "null disk (reads zeroes, drops writes)"
			}
			ro := ""
			if d.ReadOnly() {
				ro = ", read-only"
			}
			if p := target.IOPathOf(d); p != "" {
				if why, ok := strings.CutPrefix(p, "sync: "); ok {
					p = "worker threads (" + why + ")"
				}
				ro += ", I/O on " + p
			}
			fmt.Printf("rdisk target: %s namespace %d: %s, %d-byte blocks, %s%s\n", s.NQN, ns.NSID, units.FormatSize(d.Size()), d.BlockSize(), backing, ro)
		}
	}
}

// printPort prints what a port serves, with the URLs and the Linux
// commands that reach it.
func printPort(port *nvmet.Port, subs []string, pname string) {
	addr := port.Addr().String()
	tr := port.Transport()
	rdmaOn := tr == nvmet.TransportRDMA || tr == nvmet.TransportBoth
	tcpOn := tr == nvmet.TransportTCP || tr == nvmet.TransportBoth
	what := map[nvmet.Transport]string{
		nvmet.TransportRDMA: "NVMe-oF/RDMA, " + pname,
		nvmet.TransportTCP:  "NVMe/TCP",
		nvmet.TransportBoth: "NVMe/TCP and NVMe-oF/RDMA over " + pname + ", one port",
	}[tr]
	h, p := hostOf(addr), portOf(addr)
	if len(subs) == 0 {
		fmt.Printf("rdisk target: discovery on %s (%s)\n", addr, what)
	}
	for _, s := range subs {
		fmt.Printf("rdisk target: serving %s on %s (%s)\n", s, addr, what)
		if rdmaOn {
			fmt.Printf("  nvme://%s/%s\n", addr, s)
		}
		if tcpOn {
			fmt.Printf("  nvme+tcp://%s/%s\n", addr, s)
		}
	}
	if rdmaOn {
		fmt.Printf("  discover: rdisk discover nvme://%s   (Linux: nvme discover -t rdma -a %s -s %s)\n", addr, h, p)
	}
	if tcpOn {
		fmt.Printf("  discover: rdisk discover nvme+tcp://%s   (Linux: nvme discover -t tcp -a %s -s %s)\n", addr, h, p)
	}
}

// targetConfig builds the configuration from --config or the quick flags.
func targetConfig(c *cli.Context) (*target.Config, error) {
	if path := c.String("config"); path != "" {
		if c.Bool("fill") {
			return nil, fmt.Errorf("--fill writes over the RAM disk of the quick flags only, not with --config")
		}
		for _, f := range []string{"direct", "buffered", "no-uring"} {
			if c.Bool(f) {
				return nil, fmt.Errorf("--%s is a quick flag: with --config, set the namespace's \"rdisk_%s\" instead", f, strings.ReplaceAll(f, "-", "_"))
			}
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("--config: %w", err)
		}
		defer f.Close()
		cfg, err := target.Parse(f)
		if err != nil {
			return nil, fmt.Errorf("--config %s: %w", path, err)
		}
		return cfg, nil
	}
	host, port, err := net.SplitHostPort(withPort(c.String("listen"), "4420"))
	if err != nil {
		return nil, fmt.Errorf("--listen %q: want HOST or HOST:PORT", c.String("listen"))
	}
	hosts := c.StringSlice("allow-host")
	anyHost := c.Bool("allow-any-host")
	if len(hosts) == 0 && !anyHost {
		if !target.IsLoopback(host) {
			return nil, fmt.Errorf("--listen %s is not a loopback address: name the hosts allowed with --allow-host NQN, or pass --allow-any-host", c.String("listen"))
		}
		anyHost = true
	}
	dev := "ram:" + c.String("size")
	if _, err := units.ParseSize(c.String("size")); err != nil {
		return nil, fmt.Errorf("--size: %w", err)
	}
	switch {
	case c.String("file") != "" && c.String("device") != "":
		return nil, fmt.Errorf("--file and --device exclude each other")
	case c.Bool("fill") && (c.String("file") != "" || c.String("device") != ""):
		return nil, fmt.Errorf("--fill writes over the RAM disk only, not over --file or --device")
	case c.Bool("direct") && c.String("file") == "":
		return nil, fmt.Errorf("--direct opens a --file with O_DIRECT: give --file (block devices are opened with O_DIRECT already)")
	case c.Bool("buffered") && c.String("device") == "":
		return nil, fmt.Errorf("--buffered opens a --device through the page cache: give --device (files are buffered unless --direct)")
	case c.Bool("no-uring") && c.String("file") == "" && c.String("device") == "":
		return nil, fmt.Errorf("--no-uring applies to --file and --device only (a RAM disk has no disk I/O)")
	case c.String("file") != "":
		dev = c.String("file")
		if err := prepareFile(dev, c.String("size"), c.IsSet("size")); err != nil {
			return nil, err
		}
	case c.String("device") != "":
		dev = c.String("device")
	}
	bs := c.Int("block-size")
	if bs != 512 && bs != 4096 {
		return nil, fmt.Errorf("--block-size %d: want 512 or 4096", bs)
	}
	if c.String("device") != "" && !c.IsSet("block-size") {
		bs = 0 // the device's own logical block size
	}
	cfg := &target.Config{}
	key, err := secretFlag(c, "dhchap-key")
	if err != nil {
		return nil, err
	}
	ckey, err := secretFlag(c, "dhchap-ctrl-key")
	if err != nil {
		return nil, err
	}
	switch {
	case ckey != nil && key == nil:
		return nil, fmt.Errorf("--dhchap-ctrl-key needs --dhchap-key")
	case key != nil && len(hosts) == 0:
		return nil, fmt.Errorf("--dhchap-key: name the hosts that must authenticate with --allow-host NQN")
	}
	if key != nil {
		for _, h := range hosts {
			e := target.Host{NQN: h, Key: key.String()}
			if ckey != nil {
				e.CtrlKey = ckey.String()
			}
			cfg.Hosts = append(cfg.Hosts, e)
		}
	}
	sub := target.Subsystem{NQN: c.String("nqn"), Attr: map[string]string{}, AllowedHosts: hosts}
	if anyHost {
		sub.Attr["allow_any_host"] = "1"
	}
	ns := target.Namespace{NSID: 1, Enable: 1, BlockSize: bs, ReadOnly: c.Bool("read-only"),
		Direct: c.Bool("direct"), Buffered: c.Bool("buffered"), NoURing: c.Bool("no-uring")}
	ns.Device.Path = dev
	sub.Namespaces = []target.Namespace{ns}
	cfg.Subsystems = []target.Subsystem{sub}
	tr := c.String("transport")
	switch nvmet.Transport(tr) {
	case nvmet.TransportRDMA, nvmet.TransportTCP, nvmet.TransportBoth:
	default:
		return nil, fmt.Errorf("--transport %q: want rdma, tcp or rdma+tcp", tr)
	}
	adrfam := "ipv4"
	if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
		adrfam = "ipv6"
	}
	cfg.Ports = []target.Port{{PortID: 1, Addr: target.PortAddr{AdrFam: adrfam, TrType: tr, TrAddr: host, TrSvcID: port}, Subsystems: []string{sub.NQN}}}
	if err := scsiFromFlags(c, cfg, sub.NQN); err != nil {
		return nil, err
	}
	if d := withPort(c.String("discovery-listen"), "8009"); d != "" && tr != string(nvmet.TransportRDMA) {
		dh, dp, err := net.SplitHostPort(d)
		if err != nil {
			return nil, fmt.Errorf("--discovery-listen %q: want host:port", d)
		}
		if !c.IsSet("discovery-listen") {
			dh = host // the default follows --listen
		}
		if net.JoinHostPort(dh, dp) != net.JoinHostPort(host, port) {
			// A TCP port of its own listing the subsystem, as a discovery
			// port in nvmet: hosts may also connect through it.
			// The default one is skipped when its port is taken (a kernel
			// nvmet, another target): only an explicit address must listen.
			cfg.Ports = append(cfg.Ports, target.Port{PortID: 2, Addr: target.PortAddr{AdrFam: adrfam, TrType: "tcp", TrAddr: dh, TrSvcID: dp},
				Subsystems: []string{sub.NQN}, Optional: !c.IsSet("discovery-listen")})
		}
	}
	return cfg, nil
}

// fillRandom writes pseudo-random data over the whole disk: a sparse RAM
// disk reads unwritten blocks as zeroes without touching memory, which
// flatters read benchmarks.
func fillRandom(d backstore.Disk) error {
	var seed [32]byte
	crand.Read(seed[:])
	r := rand.NewChaCha8(seed)
	buf := make([]byte, 1<<20)
	for off := int64(0); off < d.Size(); off += int64(len(buf)) {
		b := buf[:min(int64(len(buf)), d.Size()-off)]
		r.Read(b)
		if err := d.WriteAt(b, off, 0); err != nil {
			return err
		}
	}
	return nil
}

func hostOf(addr string) string {
	h, _, _ := net.SplitHostPort(addr)
	return h
}

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	if _, err := strconv.Atoi(p); err != nil {
		return "4420"
	}
	return p
}
