package main

import (
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/rdisk/rdisk/internal/units"
	"github.com/rdisk/rdisk/rdma/iwarp"
	"github.com/rdisk/rdisk/target"
	"github.com/urfave/cli/v2"
)

const (
	defaultNQN       = "nqn.2026-11.io.rdisk:default"
	defaultNVMeAddr  = "127.0.0.1:4420"
	defaultRAMSize   = "1GiB"
	defaultBlockSize = 512
)

func targetCommand() *cli.Command {
	return &cli.Command{
		Name:  "target",
		Usage: "export disks over NVMe-oF/RDMA (default: a 1 GiB RAM disk on 127.0.0.1:4420)",
		Description: `With no flags, exports a sparse 1 GiB RAM disk as namespace 1 of
nqn.2026-11.io.rdisk:default on 127.0.0.1:4420 over rdisk's software iWARP
transport, allowing any host (it only listens on loopback).

--config reads nvmetcli's saved JSON (/etc/nvmet/config.json); namespaces may
also name "ram:SIZE" or "null:SIZE" as their device path.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: defaultNVMeAddr, Usage: "NVMe-oF/RDMA address (host:port)"},
			&cli.StringFlag{Name: "size", Value: defaultRAMSize, Usage: "RAM disk size"},
			&cli.StringFlag{Name: "file", Usage: "export this regular file instead of a RAM disk"},
			&cli.StringFlag{Name: "device", Usage: "export this block device instead of a RAM disk"},
			&cli.IntFlag{Name: "block-size", Value: defaultBlockSize, Usage: "logical block size of a RAM disk or file (512 or 4096)"},
			&cli.StringFlag{Name: "nqn", Value: defaultNQN, Usage: "subsystem NQN"},
			&cli.StringSliceFlag{Name: "allow-host", Usage: "host NQN allowed to connect (repeatable)"},
			&cli.BoolFlag{Name: "allow-any-host", Usage: "let any host connect (required on a non-loopback address without --allow-host)"},
			&cli.StringFlag{Name: "config", Usage: "nvmetcli JSON configuration (replaces the flags above)"},
		},
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
	p, err := iwarp.New(iwarp.Config{Logger: log})
	if err != nil {
		return err
	}
	defer p.Close()
	run, err := target.Start(cfg, p, log)
	if err != nil {
		return err
	}
	defer run.Close()
	for i, port := range run.Ports {
		addr := port.Addr().String()
		for _, s := range cfg.Ports[i].Subsystems {
			fmt.Printf("rdisk target: serving %s on %s (NVMe-oF/RDMA, software iWARP)\n", s, addr)
			fmt.Printf("  nvme://%s/%s\n", addr, s)
		}
		fmt.Printf("  discover: rdisk discover nvme://%s   (Linux: nvme discover -t rdma -a %s -s %s)\n", addr, hostOf(addr), portOf(addr))
	}
	<-c.Context.Done()
	fmt.Println("rdisk target: stopping")
	return nil
}

// targetConfig builds the configuration from --config or the quick flags.
func targetConfig(c *cli.Context) (*target.Config, error) {
	if path := c.String("config"); path != "" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("--config: %w", err)
		}
		defer f.Close()
		return target.Parse(f)
	}
	host, port, err := net.SplitHostPort(c.String("listen"))
	if err != nil {
		return nil, fmt.Errorf("--listen %q: want host:port", c.String("listen"))
	}
	hosts := c.StringSlice("allow-host")
	anyHost := c.Bool("allow-any-host")
	if len(hosts) == 0 && !anyHost {
		ip := net.ParseIP(host)
		if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
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
	case c.String("file") != "":
		dev = c.String("file")
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
	sub := target.Subsystem{NQN: c.String("nqn"), Attr: map[string]string{}, AllowedHosts: hosts}
	if anyHost {
		sub.Attr["allow_any_host"] = "1"
	}
	ns := target.Namespace{NSID: 1, Enable: 1, BlockSize: bs}
	ns.Device.Path = dev
	sub.Namespaces = []target.Namespace{ns}
	cfg.Subsystems = []target.Subsystem{sub}
	cfg.Ports = []target.Port{{PortID: 1, Addr: target.PortAddr{AdrFam: "ipv4", TrType: "rdma", TrAddr: host, TrSvcID: port}, Subsystems: []string{sub.NQN}}}
	return cfg, nil
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
