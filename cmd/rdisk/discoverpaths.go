package main

import (
	"fmt"
	"slices"

	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/host"
	"github.com/urfave/cli/v2"
)

// discoverFlag makes connect and bench take the paths of a disk from an
// NVMe-oF discovery log, as nvme connect-all does for one subsystem.
func discoverFlag() cli.Flag {
	return &cli.BoolFlag{Name: "discover", Usage: "nvme:// and nvme+tcp:// URLs: read the discovery log at the URL's address and use every port it lists for the URL's subsystem as a path (one port: a plain connection; several: multipath)"}
}

// maxReferrals bounds the discovery controllers --discover reads: the one
// named and the referrals found, breadth first, each once.
const maxReferrals = 16

// discoverPaths reads the discovery log at rawURL's address, over rawURL's
// transport, follows its referrals to other discovery controllers (as
// nvme connect-all does; rdisk gateways each list their own ports, like
// nvmet, and refer to each other), and returns the paths of rawURL's
// subsystem and namespace.
func discoverPaths(c *cli.Context, rawURL string) ([]string, error) {
	u, err := subsystemURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("--discover: %w", err)
	}
	log, err := logger(c)
	if err != nil {
		return nil, err
	}
	cfg, p, err := nvmeSetup(c)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	if err := applyURL(c, &cfg, u); err != nil {
		return nil, err
	}
	all := &host.DiscoveryLog{}
	queue := []host.URL{u}
	seen := map[string]bool{u.Addr() + "|" + u.Scheme(): true}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		dcfg := cfg
		dcfg.Transport = d.Transport
		dlog, err := host.Discover(c.Context, p, d.Addr(), dcfg)
		if err != nil {
			if d == u {
				return nil, fmt.Errorf("--discover: reading the discovery log at %s: %w", d.Addr(), err)
			}
			log.Warn("--discover: a referred discovery controller did not answer", "addr", d.Addr(), "transport", d.Scheme(), "err", err)
			continue
		}
		all.Entries = append(all.Entries, dlog.Entries...)
		for i := range dlog.Entries {
			e := &dlog.Entries[i]
			if e.SubType != nvmeof.SubTypeReferral {
				continue
			}
			r, ok := host.EntryURL(e)
			if key := r.Addr() + "|" + r.Scheme(); ok && !seen[key] && len(seen) < maxReferrals {
				seen[key] = true
				queue = append(queue, r)
			}
		}
	}
	paths, err := pathsOf(all, u)
	if err != nil {
		return nil, fmt.Errorf("--discover: %w", err)
	}
	return paths, nil
}

// pathsOf returns the URL of every port log lists for u's subsystem (NVMe
// subsystem entries over RDMA or TCP without TLS), with u's namespace, in
// log order and without duplicates.
func pathsOf(log *host.DiscoveryLog, u host.URL) ([]string, error) {
	var paths []string
	for i := range log.Entries {
		e := &log.Entries[i]
		if e.SubType != nvmeof.SubTypeNVMe || e.SubNQN != u.SubNQN {
			continue
		}
		p, ok := host.EntryURL(e)
		if !ok {
			continue
		}
		p.NSID = u.NSID
		if s := p.String(); !slices.Contains(paths, s) {
			paths = append(paths, s)
		}
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("the discovery log at %s (%d entries, referrals included) lists no RDMA or TCP port for subsystem %s", u.Addr(), len(log.Entries), u.SubNQN)
	}
	return paths, nil
}
