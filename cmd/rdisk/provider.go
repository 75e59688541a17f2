package main

import (
	"fmt"
	"log/slog"
	"net"
	"sync"

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
	return openKind(resolveRDMA(choice, addr, listen), log)
}

// resolveRDMA is the provider kind (iwarp or verbs) choice picks for addr
// (see openRDMA).
func resolveRDMA(choice, addr string, listen bool) string {
	if choice == rdmaAuto || choice == "" {
		choice = rdmaIWARP
		if verbsBuilt && addr != "" && verbsServes(addr, listen) {
			choice = rdmaVerbs
		}
	}
	return choice
}

// openKind opens a provider of kind iwarp or verbs.
func openKind(kind string, log *slog.Logger) (rdma.Provider, error) {
	switch kind {
	case rdmaVerbs:
		p, err := openVerbs(log)
		if err != nil {
			return nil, fmt.Errorf("--rdma verbs: %w", err)
		}
		return p, nil
	case rdmaIWARP:
		return iwarp.New(iwarp.Config{Logger: log})
	}
	return nil, fmt.Errorf("RDMA provider %q: want auto, iwarp or verbs", kind)
}

// providerSet opens each provider kind once for a target whose ports may
// name their own (the configuration's rdisk_rdma), and closes them all.
type providerSet struct {
	log *slog.Logger
	mu  sync.Mutex
	m   map[string]rdma.Provider // by kind
}

// open returns the provider choice picks for the listening address addr,
// opening it on first use.
func (s *providerSet) open(choice, addr string) (rdma.Provider, error) {
	kind := resolveRDMA(choice, addr, true)
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.m[kind]; p != nil {
		return p, nil
	}
	p, err := openKind(kind, s.log)
	if err != nil {
		return nil, err
	}
	if s.m == nil {
		s.m = map[string]rdma.Provider{}
	}
	s.m[kind] = p
	return p, nil
}

// Close closes the providers opened.
func (s *providerSet) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.m {
		p.Close()
	}
	s.m = nil
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

// providerName is what banners call p ("" for none).
func providerName(p rdma.Provider) string {
	if p == nil {
		return ""
	}
	if _, ok := p.(*iwarp.Provider); ok {
		return "software iWARP"
	}
	return p.Name()
}
