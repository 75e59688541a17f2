//go:build verbs

package main

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/verbs"
)

// verbsBuilt tells whether this binary has the verbs provider.
const verbsBuilt = true

// openVerbs opens the verbs provider. RDISK_VERBS_POLL_SPIN (a duration,
// e.g. 200us) sets verbs.Config.PollSpin: CQs keep polling that long
// before they sleep on the completion channel.
func openVerbs(log *slog.Logger) (rdma.Provider, error) {
	cfg := verbs.Config{Logger: log}
	if v := os.Getenv("RDISK_VERBS_POLL_SPIN"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("RDISK_VERBS_POLL_SPIN=%q: want a duration such as 200us", v)
		}
		cfg.PollSpin = d
	}
	return verbs.New(cfg)
}

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
