package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
)

// rdmaDevice is one RDMA device as rdisk rdma devices prints it (as
// ibv_devinfo and rdma link do).
type rdmaDevice struct {
	Name      string     `json:"name"`
	NodeGUID  string     `json:"node_guid"`
	Transport string     `json:"transport"`
	Ports     []rdmaPort `json:"ports"`
}

type rdmaPort struct {
	Num       int      `json:"port"`
	State     string   `json:"state"`
	LinkLayer string   `json:"link_layer"`
	MTU       int      `json:"active_mtu"`
	GIDs      []string `json:"gids"`
	NetDev    string   `json:"netdev,omitempty"`
}

func rdmaCommand() *cli.Command {
	return &cli.Command{
		Name:  "rdma",
		Usage: "RDMA devices (the verbs provider's; the software iWARP provider needs none)",
		Subcommands: []*cli.Command{{
			Name:   "devices",
			Usage:  "list RDMA devices, their ports, link layer, state and GIDs (as ibv_devinfo / rdma link)",
			Flags:  []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
			Action: runRDMADevices,
		}},
	}
}

func runRDMADevices(c *cli.Context) error {
	ds, err := rdmaDevices()
	if err != nil {
		return err
	}
	if c.Bool("json") {
		b, err := json.MarshalIndent(ds, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(c.App.Writer, "%s\n", b)
		return err
	}
	if len(ds) == 0 {
		fmt.Fprintln(c.App.Writer, "no RDMA devices (rdisk still serves over its software iWARP provider: --rdma iwarp)")
		return nil
	}
	for _, d := range ds {
		fmt.Fprintf(c.App.Writer, "%s: transport %s, node GUID %s\n", d.Name, d.Transport, d.NodeGUID)
		for _, p := range d.Ports {
			nd := ""
			if p.NetDev != "" {
				nd = ", netdev " + p.NetDev
			}
			fmt.Fprintf(c.App.Writer, "  port %d: %s, link layer %s, MTU %d%s\n", p.Num, p.State, p.LinkLayer, p.MTU, nd)
			if len(p.GIDs) > 0 {
				fmt.Fprintf(c.App.Writer, "    GIDs: %s\n", strings.Join(p.GIDs, " "))
			}
		}
	}
	return nil
}
