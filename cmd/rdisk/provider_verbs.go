//go:build verbs

package main

import (
	"log/slog"

	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/verbs"
)

// verbsBuilt tells whether this binary has the verbs provider.
const verbsBuilt = true

func openVerbs(log *slog.Logger) (rdma.Provider, error) { return verbs.New(verbs.Config{Logger: log}) }

func verbsServesAddr(addr string) bool { return verbs.ServesAddr(addr) }

func rdmaDevices() ([]rdmaDevice, error) {
	ds, err := verbs.Devices()
	if err != nil {
		return nil, err
	}
	out := make([]rdmaDevice, 0, len(ds))
	for _, d := range ds {
		rd := rdmaDevice{Name: d.Name, NodeGUID: d.NodeGUID, Transport: d.Transport, Ports: []rdmaPort{}}
		for _, p := range d.Ports {
			rd.Ports = append(rd.Ports, rdmaPort{Num: p.Num, State: p.State, LinkLayer: p.LinkLayer, MTU: p.MTU, GIDs: p.GIDs, NetDev: p.NetDev})
		}
		out = append(out, rd)
	}
	return out, nil
}
