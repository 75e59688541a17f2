package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/host"
	"github.com/urfave/cli/v2"
)

func discoverCommand() *cli.Command {
	return &cli.Command{
		Name:      "discover",
		Usage:     "list what a target exports: an NVMe-oF discovery log (like nvme discover -t rdma|tcp) or iSCSI SendTargets",
		ArgsUsage: "nvme://HOST[:PORT] (RDMA; also nvme+rdma://) | nvme+tcp://HOST[:PORT] | iscsi://HOST[:PORT] | iser://HOST[:PORT] | srp://HOST[:PORT][/ID_EXT/IOC_GUID]",
		Flags: append(append(append(append(hostIDFlags(), iscsiFlags()...), digestFlags()...), dhchapFlags()...),
			&cli.BoolFlag{Name: "json", Usage: "print the log as JSON"},
			&cli.DurationFlag{Name: "timeout", Value: host.DefaultConnectTimeout, Usage: "connect timeout"},
		),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return fmt.Errorf("discover takes one URL (nvme://HOST[:PORT] or nvme+tcp://HOST[:PORT]), got %d arguments", c.NArg())
			}
			if s := c.Args().First(); strings.HasPrefix(s, "iscsi://") || strings.HasPrefix(s, "iser://") {
				return discoverISCSI(c, s)
			}
			if u := c.Args().First(); strings.HasPrefix(u, "srp://") {
				return discoverSRP(c, u)
			}
			u, err := host.ParseURL(c.Args().First())
			if err != nil {
				return err
			}
			if u.SubNQN != "" && u.SubNQN != nvmeof.DiscoveryNQN {
				return fmt.Errorf("discover reads the discovery controller; drop the subsystem NQN from %s", u)
			}
			cfg, p, err := nvmeSetup(c)
			if err != nil {
				return err
			}
			defer p.Close()
			if err := applyURL(c, &cfg, u); err != nil {
				return err
			}
			cfg.ConnectTimeout = c.Duration("timeout")
			log, err := host.Discover(c.Context, p, u.Addr(), cfg)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printDiscoveryJSON(c.App.Writer, log)
			}
			printDiscovery(c.App.Writer, log)
			return nil
		},
	}
}

func trTypeName(t uint8) string {
	switch t {
	case nvmeof.TrTypeRDMA:
		return "rdma"
	case nvmeof.TrTypeFC:
		return "fc"
	case nvmeof.TrTypeTCP:
		return "tcp"
	case nvmeof.TrTypeLoop:
		return "loop"
	}
	return fmt.Sprintf("unrecognized (%d)", t)
}

func adrFamName(a uint8) string {
	switch a {
	case nvmeof.AdrFamIPv4:
		return "ipv4"
	case nvmeof.AdrFamIPv6:
		return "ipv6"
	case nvmeof.AdrFamIB:
		return "infiniband"
	case nvmeof.AdrFamFC:
		return "fibre-channel"
	case nvmeof.AdrFamPCI:
		return "pci"
	case nvmeof.AdrFamLoop:
		return "loop"
	}
	return fmt.Sprintf("unrecognized (%d)", a)
}

func subTypeName(s uint8) string {
	switch s {
	case nvmeof.SubTypeReferral:
		return "discovery subsystem referral"
	case nvmeof.SubTypeNVMe:
		return "nvme subsystem"
	case nvmeof.SubTypeCurrentDiscovery:
		return "current discovery subsystem"
	}
	return fmt.Sprintf("unrecognized (%d)", s)
}

func treqName(t uint8) string {
	var s string
	switch t &^ nvmeof.TReqDisableSQFlow {
	case nvmeof.TReqNotSpecified:
		s = "not specified"
	case nvmeof.TReqRequired:
		s = "required"
	case nvmeof.TReqNotRequired:
		s = "not required"
	default:
		s = fmt.Sprintf("unrecognized (%d)", t&3)
	}
	if t&nvmeof.TReqDisableSQFlow != 0 {
		s += ", sq flow control disable supported"
	}
	return s
}

func eflagsName(f uint16) string {
	var parts []string
	if f&nvmeof.EFlagsDupRetInfo != 0 {
		parts = append(parts, "duplicate discovery information")
	}
	if f&nvmeof.EFlagsEPCSD != 0 {
		parts = append(parts, "explicit discovery connections")
	}
	if rest := f &^ (nvmeof.EFlagsDupRetInfo | nvmeof.EFlagsEPCSD); rest != 0 {
		parts = append(parts, fmt.Sprintf("%#x", rest))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func prTypeName(p uint8) string {
	switch p {
	case nvmeof.RDMAPrTypeNotSpecified:
		return "not specified"
	case nvmeof.RDMAPrTypeIB:
		return "infiniband"
	case nvmeof.RDMAPrTypeRoCE:
		return "roce"
	case nvmeof.RDMAPrTypeRoCEv2:
		return "roce-v2"
	case nvmeof.RDMAPrTypeIWARP:
		return "iwarp"
	}
	return fmt.Sprintf("unrecognized (%d)", p)
}

func qpTypeName(q uint8) string {
	switch q {
	case nvmeof.RDMAQPTypeConnected:
		return "connected"
	case nvmeof.RDMAQPTypeDatagram:
		return "datagram"
	}
	return fmt.Sprintf("unrecognized (%d)", q)
}

func cmsName(c uint8) string {
	if c == nvmeof.RDMACMSRDMACM {
		return "rdma-cm"
	}
	return fmt.Sprintf("unrecognized (%d)", c)
}

// printDiscovery prints the log as nvme-cli's `nvme discover` does, with
// the URL of each subsystem entry added (nvme:// for RDMA entries,
// nvme+tcp:// for TCP ones).
func printDiscovery(w io.Writer, log *host.DiscoveryLog) {
	fmt.Fprintf(w, "\nDiscovery Log Number of Records %d, Generation counter %d\n", len(log.Entries), log.GenCtr)
	for i := range log.Entries {
		e := &log.Entries[i]
		fmt.Fprintf(w, "=====Discovery Log Entry %d======\n", i)
		fmt.Fprintf(w, "trtype:  %s\n", trTypeName(e.TrType))
		fmt.Fprintf(w, "adrfam:  %s\n", adrFamName(e.AdrFam))
		fmt.Fprintf(w, "subtype: %s\n", subTypeName(e.SubType))
		fmt.Fprintf(w, "treq:    %s\n", treqName(e.TReq))
		fmt.Fprintf(w, "portid:  %d\n", e.PortID)
		fmt.Fprintf(w, "trsvcid: %s\n", e.TrSvcID)
		fmt.Fprintf(w, "subnqn:  %s\n", e.SubNQN)
		fmt.Fprintf(w, "traddr:  %s\n", e.TrAddr)
		fmt.Fprintf(w, "eflags:  %s\n", eflagsName(e.EFlags))
		switch e.TrType {
		case nvmeof.TrTypeRDMA:
			fmt.Fprintf(w, "rdma_prtype: %s\n", prTypeName(e.RDMAPrType))
			fmt.Fprintf(w, "rdma_qptype: %s\n", qpTypeName(e.RDMAQPType))
			fmt.Fprintf(w, "rdma_cms:    %s\n", cmsName(e.RDMACMS))
			fmt.Fprintf(w, "rdma_pkey: 0x%04x\n", e.RDMAPKey)
		case nvmeof.TrTypeTCP:
			sec := "none"
			if e.RDMAQPType != 0 {
				sec = fmt.Sprintf("%d", e.RDMAQPType)
			}
			fmt.Fprintf(w, "sectype: %s\n", sec)
		}
		if u, ok := host.EntryURL(e); ok && e.SubType == nvmeof.SubTypeNVMe {
			fmt.Fprintf(w, "url:     %s\n", u)
		}
	}
}

type discoveryJSON struct {
	GenCtr  uint64             `json:"genctr"`
	Records []discoveryRecJSON `json:"records"`
}

type discoveryRecJSON struct {
	TrType     string  `json:"trtype"`
	AdrFam     string  `json:"adrfam"`
	SubType    string  `json:"subtype"`
	TReq       string  `json:"treq"`
	PortID     uint16  `json:"portid"`
	TrSvcID    string  `json:"trsvcid"`
	SubNQN     string  `json:"subnqn"`
	TrAddr     string  `json:"traddr"`
	EFlags     string  `json:"eflags"`
	RDMAPrType string  `json:"rdma_prtype,omitempty"`
	RDMAQPType string  `json:"rdma_qptype,omitempty"`
	RDMACMS    string  `json:"rdma_cms,omitempty"`
	RDMAPKey   *uint16 `json:"rdma_pkey,omitempty"`
	URL        string  `json:"url,omitempty"`
}

func printDiscoveryJSON(w io.Writer, log *host.DiscoveryLog) error {
	out := discoveryJSON{GenCtr: log.GenCtr, Records: []discoveryRecJSON{}}
	for i := range log.Entries {
		e := &log.Entries[i]
		r := discoveryRecJSON{
			TrType: trTypeName(e.TrType), AdrFam: adrFamName(e.AdrFam), SubType: subTypeName(e.SubType), TReq: treqName(e.TReq),
			PortID: e.PortID, TrSvcID: e.TrSvcID, SubNQN: e.SubNQN, TrAddr: e.TrAddr, EFlags: eflagsName(e.EFlags),
		}
		if e.TrType == nvmeof.TrTypeRDMA {
			pkey := e.RDMAPKey
			r.RDMAPrType, r.RDMAQPType, r.RDMACMS, r.RDMAPKey = prTypeName(e.RDMAPrType), qpTypeName(e.RDMAQPType), cmsName(e.RDMACMS), &pkey
		}
		if u, ok := host.EntryURL(e); ok && e.SubType == nvmeof.SubTypeNVMe {
			r.URL = u.String()
		}
		out.Records = append(out.Records, r)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
