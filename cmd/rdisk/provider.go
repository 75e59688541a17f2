package main

import (
	"fmt"
	"log/slog"
	"net"

	"github.com/urfave/cli/v2"

	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/iwarp"
)

// --rdma picks the RDMA provider: rdisk's pure-Go software iWARP (over
// TCP; talks to Linux siw), or rdma-core's verbs (real RDMA NICs, rxe,
// siw; only in a binary built with -tags verbs). auto takes verbs when
// the binary has it and an RDMA device serves the address, iwarp
// otherwise.

const (
	rdmaAuto  = "auto"
	rdmaIWARP = "iwarp"
	rdmaVerbs = "verbs"
)

func rdmaFlag() cli.Flag {
	return &cli.StringFlag{Name: "rdma", Value: rdmaAuto, Usage: "RDMA provider: auto (verbs when built in and an RDMA device serves the address, else iwarp), iwarp (rdisk's software iWARP over TCP) or verbs (rdma-core; needs a build with -tags verbs)"}
}

// rdmaOf reads --rdma.
func rdmaOf(c *cli.Context) (string, error) {
	switch v := c.String("rdma"); v {
	case "", rdmaAuto:
		return rdmaAuto, nil
	case rdmaIWARP, rdmaVerbs:
		return v, nil
	default:
		return "", fmt.Errorf("--rdma %q: want auto, iwarp or verbs", v)
	}
}

// openRDMA opens the provider choice picks for addr: the address to
// listen on (listen) or to dial ("" when not known yet: auto then takes
// iwarp).
func openRDMA(choice string, log *slog.Logger, addr string, listen bool) (rdma.Provider, error) {
	if choice == rdmaAuto {
		choice = rdmaIWARP
		if verbsBuilt && addr != "" && verbsServes(addr, listen) {
			choice = rdmaVerbs
		}
	}
	if choice == rdmaVerbs {
		p, err := openVerbs(log)
		if err != nil {
			return nil, fmt.Errorf("--rdma verbs: %w", err)
		}
		return p, nil
	}
	return iwarp.New(iwarp.Config{Logger: log})
}

// verbsServes tells whether an RDMA device serves addr: for a listener the
// address itself, for a dial the local address the kernel routes the
// destination from.
func verbsServes(addr string, listen bool) bool {
	if !listen {
		c, err := net.Dial("udp", addr) // no packet: only the route
		if err != nil {
			return false
		}
		addr = c.LocalAddr().String()
		c.Close()
	}
	return verbsServesAddr(addr)
}

// providerName is what banners call p.
func providerName(p rdma.Provider) string {
	if _, ok := p.(*iwarp.Provider); ok {
		return "software iWARP"
	}
	return p.Name()
}
