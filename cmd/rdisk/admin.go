package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rdisk/rdisk/internal/units"
	"github.com/rdisk/rdisk/srp"
	"github.com/rdisk/rdisk/target"
	"github.com/urfave/cli/v2"
)

// rdisk admin: live management of a running rdisk target through its
// admin socket (target/admin.go), in the spirit of targetcli and
// nvmetcli: every change is applied at once, and "save" writes the model
// back as a configuration file.

func adminCommand() *cli.Command {
	nsid := &cli.UintFlag{Name: "nsid", Usage: "namespace ID (default: the lowest free one)"}
	scsiFlags := []cli.Flag{
		&cli.StringFlag{Name: "iscsi", Usage: "the iSCSI target (IQN)"},
		&cli.StringFlag{Name: "srp", Usage: "the SRP target port (port ID, or its id_ext)"},
	}
	return &cli.Command{
		Name:  "admin",
		Usage: "manage a running rdisk target: list what is live, add/remove/resize namespaces, hosts, ports and LUNs, save the configuration",
		Description: `Talks to the target's admin socket (rdisk target --admin-socket, default
` + target.DefaultAdminSocket + `; root only). Changes apply at once and raise the
protocols' notices: NVMe namespace-attribute-changed and discovery-change
events, SCSI unit attentions (REPORTED LUNS DATA HAS CHANGED, CAPACITY DATA
HAS CHANGED) and SRP AERs. "rdisk admin save FILE" writes the model back;
rdisk target --config FILE serves the same after a restart. SIGHUP (or
"rdisk admin reload") makes a target re-read its --config file and apply
the difference. The socket speaks HTTP with JSON: curl --unix-socket
` + target.DefaultAdminSocket + ` http://rdisk/v1/status works too.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "socket", Value: target.DefaultAdminSocket, Usage: "the target's admin socket"},
			&cli.BoolFlag{Name: "json", Usage: "print the socket's JSON answer"},
		},
		Subcommands: []*cli.Command{
			{Name: "status", Aliases: []string{"ls", "list"}, Usage: "namespaces, ports and the hosts connected over every transport, with counters", Action: adminStatus},
			topCommand(),
			{Name: "save", Usage: "print the served configuration, or write it to FILE", ArgsUsage: "[FILE]",
				Flags:  []cli.Flag{&cli.StringFlag{Name: "format", Value: "rdisk", Usage: "rdisk (rdisk target --config reads it back) or nvmetcli (/etc/nvmet/config.json for Linux nvmet: NVMe-oF only)"}},
				Action: adminSave},
			{Name: "reload", Usage: "re-read the target's --config file and apply the difference (as SIGHUP)", Action: func(c *cli.Context) error {
				return adminChange(c, "POST", "/v1/reload", nil)
			}},
			{Name: "apply", Usage: "serve FILE, changing only what differs from what is served", ArgsUsage: "FILE", Action: adminApply},
			{Name: "ns", Usage: "namespaces", Subcommands: []*cli.Command{
				{Name: "add", Usage: "add a namespace", ArgsUsage: "SUBNQN",
					Flags: []cli.Flag{nsid,
						&cli.StringFlag{Name: "device", Required: true, Usage: "backing: a file, a block device, ram:SIZE, null:SIZE or rbd:POOL/IMAGE (Ceph build)"},
						&cli.IntFlag{Name: "block-size", Usage: "logical block size of a RAM disk or file (512 or 4096)"},
						&cli.BoolFlag{Name: "read-only", Usage: "export write-protected"},
						&cli.BoolFlag{Name: "disabled", Usage: "configure it but keep it invisible to hosts"},
						&cli.StringFlag{Name: "uuid", Usage: "namespace UUID (default: derived from the NQN and NSID)"},
						&cli.StringFlag{Name: "nguid", Usage: "namespace NGUID (default: derived from the NQN and NSID)"},
					},
					Action: adminNSAdd},
				{Name: "rm", Aliases: []string{"remove"}, Usage: "remove a namespace (and the SCSI LUNs exporting it)", ArgsUsage: "SUBNQN NSID", Action: adminNS("DELETE", "")},
				{Name: "resize", Usage: "grow a namespace to SIZE, or re-read the size of a file or device grown outside rdisk", ArgsUsage: "SUBNQN NSID [SIZE]", Action: adminNSResize},
				{Name: "enable", Usage: "make a namespace visible to hosts", ArgsUsage: "SUBNQN NSID", Action: adminNS("POST", "/enable")},
				{Name: "disable", Usage: "hide a namespace from hosts", ArgsUsage: "SUBNQN NSID", Action: adminNS("POST", "/disable")},
			}},
			{Name: "subsystem", Aliases: []string{"subsys"}, Usage: "NVMe-oF subsystems", Subcommands: []*cli.Command{
				{Name: "add", Usage: "add a subsystem (then: rdisk admin ns add, port link)", ArgsUsage: "NQN",
					Flags: []cli.Flag{
						&cli.BoolFlag{Name: "allow-any-host", Usage: "let any host connect"},
						&cli.StringSliceFlag{Name: "allow-host", Usage: "host NQN allowed to connect (repeatable)"},
						&cli.StringFlag{Name: "serial", Usage: "controller serial number (default: derived from the NQN)"},
						&cli.StringFlag{Name: "model", Usage: "controller model number (default rdisk)"},
					},
					Action: adminSubsysAdd},
				{Name: "rm", Aliases: []string{"remove"}, Usage: "remove a subsystem, its links and its SCSI LUNs; its hosts are disconnected", ArgsUsage: "NQN", Action: func(c *cli.Context) error {
					a, err := args(c, 1, "NQN")
					if err != nil {
						return err
					}
					return adminChange(c, "DELETE", "/v1/subsystems/"+url.PathEscape(a[0]), nil)
				}},
				{Name: "allow-any-host", Usage: "set allow_any_host", ArgsUsage: "NQN on|off", Action: func(c *cli.Context) error {
					a, err := args(c, 2, "NQN on|off")
					if err != nil {
						return err
					}
					v, err := onOff(a[1])
					if err != nil {
						return err
					}
					return adminChange(c, "POST", "/v1/subsystems/"+url.PathEscape(a[0])+"/allow_any_host/"+strconv.FormatBool(v), nil)
				}},
			}},
			{Name: "host", Usage: "the hosts a subsystem allows", Subcommands: []*cli.Command{
				{Name: "allow", Usage: "let a host NQN connect to a subsystem", ArgsUsage: "SUBNQN HOSTNQN", Action: func(c *cli.Context) error {
					a, err := args(c, 2, "SUBNQN HOSTNQN")
					if err != nil {
						return err
					}
					return adminChange(c, "POST", "/v1/subsystems/"+url.PathEscape(a[0])+"/hosts", target.HostRequest{NQN: a[1]})
				}},
				{Name: "deny", Usage: "remove a host NQN from a subsystem's allowed hosts (connected controllers stay, as with nvmet)", ArgsUsage: "SUBNQN HOSTNQN", Action: func(c *cli.Context) error {
					a, err := args(c, 2, "SUBNQN HOSTNQN")
					if err != nil {
						return err
					}
					return adminChange(c, "DELETE", "/v1/subsystems/"+url.PathEscape(a[0])+"/hosts/"+url.PathEscape(a[1]), nil)
				}},
			}},
			{Name: "port", Usage: "NVMe-oF ports", Subcommands: []*cli.Command{
				{Name: "add", Usage: "add a port and listen", ArgsUsage: "ID",
					Flags: []cli.Flag{
						&cli.StringFlag{Name: "addr", Required: true, Usage: "HOST:PORT (port default 4420)"},
						&cli.StringFlag{Name: "transport", Value: "rdma+tcp", Usage: "rdma, tcp or rdma+tcp"},
						&cli.StringSliceFlag{Name: "subsystem", Usage: "subsystem NQN to export on it (repeatable)"},
						&cli.IntFlag{Name: "inline-data-size", Usage: "in-capsule data size (nvmet's param_inline_data_size)"},
						&cli.StringFlag{Name: "rdma-provider", Usage: "RDMA provider serving the port: auto, iwarp or verbs (the config's rdisk_rdma; default: the target's, its --rdma)"},
					},
					Action: adminPortAdd},
				{Name: "rm", Aliases: []string{"remove"}, Usage: "stop and remove a port; its controllers are disconnected", ArgsUsage: "ID", Action: adminPort("DELETE", "")},
				{Name: "enable", Usage: "start listening on a disabled port", ArgsUsage: "ID", Action: adminPort("POST", "/enable")},
				{Name: "disable", Usage: "stop listening, keeping the port in the configuration", ArgsUsage: "ID", Action: adminPort("POST", "/disable")},
				{Name: "link", Usage: "export a subsystem on a port", ArgsUsage: "ID SUBNQN", Action: adminPortLink("POST")},
				{Name: "unlink", Usage: "stop exporting a subsystem on a port", ArgsUsage: "ID SUBNQN", Action: adminPortLink("DELETE")},
			}},
			{Name: "ana", Usage: "NVMe ANA groups: the state hosts see each namespace in, per port (multipath across gateways)", Subcommands: []*cli.Command{
				{Name: "set", Usage: "set ANA group GRPID's state on port ID (adding the group): optimized, non-optimized, inaccessible, persistent-loss or change", ArgsUsage: "ID GRPID STATE", Action: adminANASet},
				{Name: "rm", Aliases: []string{"remove"}, Usage: "remove ANA group GRPID from port ID (group 1 stays, optimized)", ArgsUsage: "ID GRPID", Action: adminANARemove},
				{Name: "group", Usage: "move a namespace to ANA group GRPID", ArgsUsage: "SUBNQN NSID GRPID", Action: adminANAGroup},
			}},
			{Name: "alua", Usage: "SCSI ALUA target port groups (iSCSI/iSER and SRP)", Subcommands: []*cli.Command{
				{Name: "set", Usage: "set port group ID's state: active-optimized, active-non-optimized, standby, unavailable, offline or transitioning", ArgsUsage: "iscsi|srp ID STATE", Action: adminALUASet},
			}},
			{Name: "gateway", Usage: "set this gateway's state on every ANA group and on its own ALUA port groups at once (optimized, non-optimized, inaccessible, ...)", ArgsUsage: "STATE", Action: func(c *cli.Context) error {
				a, err := args(c, 1, "STATE")
				if err != nil {
					return err
				}
				return adminChange(c, "PUT", "/v1/gateway/state", target.StateRequest{State: a[0]})
			}},
			{Name: "iscsi", Usage: "iSCSI target nodes", Subcommands: []*cli.Command{
				{Name: "add", Usage: "add an iSCSI target (then: rdisk admin lun map --iscsi)", ArgsUsage: "IQN",
					Flags: []cli.Flag{
						&cli.StringSliceFlag{Name: "allow-initiator", Usage: "initiator IQN allowed to log in (repeatable)"},
						&cli.BoolFlag{Name: "allow-any-initiator", Usage: "let any initiator log in"},
					},
					Action: adminISCSIAdd},
				{Name: "rm", Aliases: []string{"remove"}, Usage: "remove an iSCSI target and close its sessions", ArgsUsage: "IQN", Action: func(c *cli.Context) error {
					a, err := args(c, 1, "IQN")
					if err != nil {
						return err
					}
					return adminChange(c, "DELETE", "/v1/iscsi/targets/"+url.PathEscape(a[0]), nil)
				}},
			}},
			{Name: "initiator", Usage: "the initiators an iSCSI target or SRP target port allows", Subcommands: []*cli.Command{
				{Name: "allow", Usage: "allow an initiator name (--iscsi) or ACL entry (--srp: a port ID, GUID or address)", ArgsUsage: "NAME", Flags: scsiFlags, Action: adminInitiator("POST")},
				{Name: "deny", Usage: "remove it (sessions stay: rdisk admin close ends them)", ArgsUsage: "NAME", Flags: scsiFlags, Action: adminInitiator("DELETE")},
			}},
			{Name: "acl", Usage: "iSCSI node ACLs: what LUNs an initiator sees (LIO's mapped LUNs)", Subcommands: []*cli.Command{
				{Name: "set", Usage: "let an initiator log in to an iSCSI target, seeing only the --map LUNs (without --map: none; rdisk admin initiator allow admits to every LUN)", ArgsUsage: "IQN INITIATOR",
					Flags:  []cli.Flag{&cli.StringSliceFlag{Name: "map", Usage: "MAPPED=LUN or MAPPED=LUN:ro (write-protected); repeatable"}},
					Action: adminACLSet},
				{Name: "rm", Aliases: []string{"remove"}, Usage: "remove an initiator's ACL", ArgsUsage: "IQN INITIATOR", Action: func(c *cli.Context) error {
					a, err := args(c, 2, "IQN INITIATOR")
					if err != nil {
						return err
					}
					return adminChange(c, "DELETE", "/v1/iscsi/targets/"+url.PathEscape(a[0])+"/acls/"+url.PathEscape(a[1]), nil)
				}},
			}},
			{Name: "lun", Usage: "SCSI LUNs (one SCSI logical unit per namespace, shared by iSCSI and SRP)", Subcommands: []*cli.Command{
				{Name: "map", Usage: "export a namespace as a LUN", ArgsUsage: "SUBNQN NSID",
					Flags: append([]cli.Flag{&cli.Uint64Flag{Name: "lun", Usage: "the LUN (default: the lowest free one)"}}, scsiFlags...), Action: adminLUNMap},
				{Name: "unmap", Usage: "remove a LUN", ArgsUsage: "LUN", Flags: scsiFlags, Action: adminLUNUnmap},
			}},
			{Name: "close", Usage: "disconnect a host: nvme SUBNQN CNTLID, iscsi TSIH or srp CHANNEL (ids as rdisk admin status shows them)", ArgsUsage: "nvme SUBNQN CNTLID | iscsi TSIH | srp CHANNEL", Action: adminClose},
		},
	}
}

func adminClient(c *cli.Context) *target.AdminClient {
	return target.NewAdminClient(c.String("socket"))
}

func adminCtx(c *cli.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Context, 2*time.Minute)
}

// args returns exactly n arguments, or a usage error naming them.
func args(c *cli.Context, n int, usage string) ([]string, error) {
	if c.NArg() != n {
		return nil, fmt.Errorf("%s takes %s", c.Command.FullName(), usage)
	}
	return c.Args().Slice(), nil
}

func onOff(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "on", "1", "true", "yes":
		return true, nil
	case "off", "0", "false", "no":
		return false, nil
	}
	return false, fmt.Errorf("%q: want on or off", s)
}

// adminChange sends a change and prints what it did.
func adminChange(c *cli.Context, method, path string, body any) error {
	ctx, cancel := adminCtx(c)
	defer cancel()
	var raw []byte
	if err := adminClient(c).Do(ctx, method, path, body, &raw); err != nil {
		return err
	}
	if c.Bool("json") {
		_, err := c.App.Writer.Write(raw)
		return err
	}
	var ch target.Changes
	if err := json.Unmarshal(raw, &ch); err != nil {
		return fmt.Errorf("decoding the answer: %w", err)
	}
	if len(ch.Applied) == 0 && len(ch.Skipped) == 0 {
		fmt.Fprintln(c.App.Writer, "nothing changed")
	}
	for _, a := range ch.Applied {
		fmt.Fprintln(c.App.Writer, a)
	}
	for _, s := range ch.Skipped {
		fmt.Fprintln(c.App.Writer, "not applied (needs a restart):", s)
	}
	return nil
}

func adminConfig(c *cli.Context) (*target.Config, error) {
	ctx, cancel := adminCtx(c)
	defer cancel()
	var cfg target.Config
	if err := adminClient(c).Do(ctx, "GET", "/v1/config", nil, &cfg); err != nil {
		return nil, err
	}
	return &cfg, nil
}

func adminStatus(c *cli.Context) error {
	if c.NArg() != 0 {
		return fmt.Errorf("admin status takes no arguments")
	}
	ctx, cancel := adminCtx(c)
	defer cancel()
	var raw []byte
	if err := adminClient(c).Do(ctx, "GET", "/v1/status", nil, &raw); err != nil {
		return err
	}
	if c.Bool("json") {
		_, err := c.App.Writer.Write(raw)
		return err
	}
	var st target.Status
	if err := json.Unmarshal(raw, &st); err != nil {
		return fmt.Errorf("decoding the answer: %w", err)
	}
	printStatus(c.App.Writer, &st)
	return nil
}

func printStatus(out io.Writer, st *target.Status) {
	w := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
	fmt.Fprintln(w, "NAMESPACES\tNSID\tDEVICE\tSIZE\tBLOCK\tSTATE\tSCSI")
	for _, n := range st.Namespaces {
		state := "enabled"
		if !n.Enabled {
			state = "disabled"
		}
		if n.ReadOnly {
			state += ",read-only"
		}
		if strings.HasPrefix(n.Health, "failing") {
			state += ",failing" // why in --json
		}
		if n.IOPath != "" {
			path, _, _ := strings.Cut(n.IOPath, ":") // why in --json
			state += ",io=" + path
		}
		scsi := strings.Join(n.SCSI, "; ")
		if scsi == "" {
			scsi = "-"
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%d\t%s\t%s\n", n.Subsystem, n.NSID, n.Device, units.FormatSize(n.Size), n.BlockSize, state, scsi)
	}
	fmt.Fprintln(w, "\nPORTS\tTRANSPORT\tADDRESS\tSTATE\tRDMA\tSUBSYSTEMS\tANA GROUPS")
	for _, p := range st.Ports {
		state := "listening"
		if !p.Listening {
			state = "disabled"
		}
		var ana []string
		for _, g := range slices.Sorted(maps.Keys(p.ANA)) {
			ana = append(ana, fmt.Sprintf("%d:%s", g, p.ANA[g]))
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.Transport, p.Addr, state, cmp.Or(p.Provider, "-"), strings.Join(p.Subsystems, " "), cmp.Or(strings.Join(ana, " "), "-"))
	}
	for _, pg := range []struct {
		name string
		gs   []target.PortGroupStatus
	}{{"ISCSI", st.ISCSIPortGroups}, {"SRP", st.SRPPortGroups}} {
		if len(pg.gs) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s PORT GROUPS\tSTATE\tRELATIVE PORTS\n", pg.name)
		for _, g := range pg.gs {
			ports := make([]string, len(g.Ports))
			for i, p := range g.Ports {
				ports[i] = strconv.Itoa(int(p))
			}
			fmt.Fprintf(w, "%d\t%s\t%s\n", g.ID, g.State, strings.Join(ports, " "))
		}
	}
	fmt.Fprintln(w, "\nNVME CONTROLLERS\tCNTLID\tHOST\tTRANSPORT\tREMOTE\tQUEUES\tKATO\tCOMMANDS\tREAD\tWRITTEN")
	for _, c := range st.Controllers {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s (port %d)\t%s\t%d x %d\t%s\t%d\t%s\t%s\n", c.Subsystem, c.CNTLID, c.HostNQN, c.Transport, c.PortID, c.Remote,
			c.IOQueues, c.QueueDepth, time.Duration(c.KATOSeconds*float64(time.Second)), c.Commands, units.FormatSize(int64(c.ReadBytes)), units.FormatSize(int64(c.WriteBytes)))
	}
	if len(st.ISCSIPortals) > 0 {
		fmt.Fprintf(w, "\nISCSI SESSIONS (%s)\tTSIH\tINITIATOR\tCONNECTIONS\tCOMMANDS\tREAD\tWRITTEN\n", strings.Join(st.ISCSIPortals, " "))
		for _, s := range st.ISCSISessions {
			var conns []string
			for _, c := range s.Connections {
				conns = append(conns, c.Transport+" "+c.Remote)
			}
			name := s.Target
			if s.Discovery {
				name = "(discovery)"
			}
			fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%d\t%s\t%s\n", name, s.TSIH, s.Initiator, strings.Join(conns, ", "), s.Commands,
				units.FormatSize(int64(s.ReadBytes)), units.FormatSize(int64(s.WriteBytes)))
		}
	}
	if len(st.SRPListen) > 0 {
		fmt.Fprintf(w, "\nSRP CHANNELS (%s)\tID\tINITIATOR\tREMOTE\tDEPTH\tCOMMANDS\tREAD\tWRITTEN\n", strings.Join(st.SRPListen, " "))
		for _, ch := range st.SRPChannels {
			fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%d\t%d\t%s\t%s\n", ch.Port, ch.ID, ch.Initiator, ch.Remote, ch.Depth, ch.Commands,
				units.FormatSize(int64(ch.ReadBytes)), units.FormatSize(int64(ch.WriteBytes)))
		}
	}
	w.Flush()
}

func adminSave(c *cli.Context) error {
	if c.NArg() > 1 {
		return fmt.Errorf("admin save takes at most a FILE")
	}
	format := c.String("format")
	ctx, cancel := adminCtx(c)
	defer cancel()
	var data []byte
	switch format {
	case "rdisk":
		cfg, err := adminConfig(c)
		if err != nil {
			return err
		}
		if data, err = cfg.JSON(); err != nil {
			return err
		}
	case "nvmetcli":
		var res target.SaveResult
		if err := adminClient(c).Do(ctx, "GET", "/v1/config?format=nvmetcli", nil, &res); err != nil {
			return err
		}
		for _, w := range res.Warnings {
			fmt.Fprintln(c.App.ErrWriter, "rdisk admin save: warning:", w)
		}
		data = res.Config
	default:
		return fmt.Errorf("--format %q: want rdisk or nvmetcli", format)
	}
	if c.NArg() == 0 {
		_, err := c.App.Writer.Write(data)
		return err
	}
	path := c.Args().First()
	// Written beside and renamed: a crash leaves the old file or the new.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	fmt.Fprintf(c.App.ErrWriter, "rdisk admin save: wrote %s (%s format)\n", path, format)
	return nil
}

func adminApply(c *cli.Context) error {
	a, err := args(c, 1, "a FILE")
	if err != nil {
		return err
	}
	data, err := os.ReadFile(a[0])
	if err != nil {
		return err
	}
	if _, err := target.Parse(strings.NewReader(string(data))); err != nil {
		return fmt.Errorf("%s: %w", a[0], err)
	}
	return adminChange(c, "PUT", "/v1/config", data)
}

func nsArgs(c *cli.Context, n int, usage string) (string, uint32, []string, error) {
	a, err := args(c, n, usage)
	if err != nil {
		return "", 0, nil, err
	}
	nsid, err := target.ParseNSID(a[1])
	if err != nil {
		return "", 0, nil, err
	}
	return a[0], nsid, a[2:], nil
}

func nsPath(nqn string, nsid uint32) string {
	return fmt.Sprintf("/v1/subsystems/%s/namespaces/%d", url.PathEscape(nqn), nsid)
}

func adminNS(method, suffix string) cli.ActionFunc {
	return func(c *cli.Context) error {
		nqn, nsid, _, err := nsArgs(c, 2, "SUBNQN NSID")
		if err != nil {
			return err
		}
		return adminChange(c, method, nsPath(nqn, nsid)+suffix, nil)
	}
}

func adminNSResize(c *cli.Context) error {
	n := 3
	if c.NArg() == 2 {
		n = 2
	}
	nqn, nsid, rest, err := nsArgs(c, n, "SUBNQN NSID [SIZE]")
	if err != nil {
		return err
	}
	var req target.ResizeRequest
	if len(rest) > 0 {
		if _, err := units.ParseSize(rest[0]); err != nil {
			return fmt.Errorf("SIZE: %w", err)
		}
		req.Size = rest[0]
	}
	return adminChange(c, "POST", nsPath(nqn, nsid)+"/resize", req)
}

func adminNSAdd(c *cli.Context) error {
	a, err := args(c, 1, "SUBNQN")
	if err != nil {
		return err
	}
	ns := target.Namespace{NSID: uint32(c.Uint("nsid")), Enable: 1, BlockSize: c.Int("block-size"), ReadOnly: c.Bool("read-only")}
	if c.Bool("disabled") {
		ns.Enable = 0
	}
	ns.Device.Path, ns.Device.UUID, ns.Device.NGUID = c.String("device"), c.String("uuid"), c.String("nguid")
	if ns.NSID == 0 {
		cfg, err := adminConfig(c)
		if err != nil {
			return err
		}
		var used []uint32
		for _, s := range cfg.Subsystems {
			if s.NQN == a[0] {
				for _, n := range s.Namespaces {
					used = append(used, n.NSID)
				}
			}
		}
		for ns.NSID = 1; slices.Contains(used, ns.NSID); ns.NSID++ {
		}
	}
	return adminChange(c, "POST", "/v1/subsystems/"+url.PathEscape(a[0])+"/namespaces", ns)
}

func adminSubsysAdd(c *cli.Context) error {
	a, err := args(c, 1, "NQN")
	if err != nil {
		return err
	}
	s := target.Subsystem{NQN: a[0], Attr: map[string]string{"allow_any_host": "0"}, AllowedHosts: c.StringSlice("allow-host")}
	if c.Bool("allow-any-host") {
		s.Attr["allow_any_host"] = "1"
	}
	if v := c.String("serial"); v != "" {
		s.Attr["serial"] = v
	}
	if v := c.String("model"); v != "" {
		s.Attr["model"] = v
	}
	return adminChange(c, "POST", "/v1/subsystems", s)
}

func portArg(c *cli.Context, n int, usage string) (uint16, []string, error) {
	a, err := args(c, n, usage)
	if err != nil {
		return 0, nil, err
	}
	id, err := strconv.ParseUint(a[0], 10, 16)
	if err != nil {
		return 0, nil, fmt.Errorf("port ID %q: want a number", a[0])
	}
	return uint16(id), a[1:], nil
}

func adminPort(method, suffix string) cli.ActionFunc {
	return func(c *cli.Context) error {
		id, _, err := portArg(c, 1, "a port ID")
		if err != nil {
			return err
		}
		return adminChange(c, method, fmt.Sprintf("/v1/ports/%d%s", id, suffix), nil)
	}
}

func adminPortLink(method string) cli.ActionFunc {
	return func(c *cli.Context) error {
		id, rest, err := portArg(c, 2, "ID SUBNQN")
		if err != nil {
			return err
		}
		return adminChange(c, method, fmt.Sprintf("/v1/ports/%d/subsystems/%s", id, url.PathEscape(rest[0])), nil)
	}
}

// anaGroupArg parses an ANA group ID argument.
func anaGroupArg(v string) (uint32, error) {
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil || n < 1 || n > target.MaxANAGroups {
		return 0, fmt.Errorf("ANA group %q: want 1 to %d", v, target.MaxANAGroups)
	}
	return uint32(n), nil
}

func adminANASet(c *cli.Context) error {
	id, rest, err := portArg(c, 3, "ID GRPID STATE")
	if err != nil {
		return err
	}
	g, err := anaGroupArg(rest[0])
	if err != nil {
		return err
	}
	return adminChange(c, "PUT", fmt.Sprintf("/v1/ports/%d/ana_groups/%d", id, g), target.StateRequest{State: rest[1]})
}

func adminANARemove(c *cli.Context) error {
	id, rest, err := portArg(c, 2, "ID GRPID")
	if err != nil {
		return err
	}
	g, err := anaGroupArg(rest[0])
	if err != nil {
		return err
	}
	return adminChange(c, "DELETE", fmt.Sprintf("/v1/ports/%d/ana_groups/%d", id, g), nil)
}

func adminANAGroup(c *cli.Context) error {
	a, err := args(c, 3, "SUBNQN NSID GRPID")
	if err != nil {
		return err
	}
	nsid, err := target.ParseNSID(a[1])
	if err != nil {
		return err
	}
	g, err := anaGroupArg(a[2])
	if err != nil {
		return err
	}
	return adminChange(c, "PUT", fmt.Sprintf("/v1/subsystems/%s/namespaces/%d/ana_group", url.PathEscape(a[0]), nsid), target.GroupRequest{GrpID: g})
}

func adminALUASet(c *cli.Context) error {
	a, err := args(c, 3, "iscsi|srp ID STATE")
	if err != nil {
		return err
	}
	if a[0] != "iscsi" && a[0] != "srp" {
		return fmt.Errorf("transport %q: want iscsi or srp", a[0])
	}
	id, err := strconv.ParseUint(a[1], 10, 16)
	if err != nil || id == 0 {
		return fmt.Errorf("port group %q: want 1 to 65535", a[1])
	}
	return adminChange(c, "PUT", fmt.Sprintf("/v1/%s/port_groups/%d", a[0], id), target.StateRequest{State: a[2]})
}

func adminPortAdd(c *cli.Context) error {
	id, _, err := portArg(c, 1, "a port ID")
	if err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(withPort(c.String("addr"), "4420"))
	if err != nil {
		return fmt.Errorf("--addr %q: want HOST or HOST:PORT", c.String("addr"))
	}
	p := target.Port{PortID: id, Subsystems: c.StringSlice("subsystem")}
	p.Addr.TrAddr, p.Addr.TrSvcID, p.Addr.TrType = host, port, c.String("transport")
	p.Addr.AdrFam = "ipv4"
	if strings.Contains(host, ":") {
		p.Addr.AdrFam = "ipv6"
	}
	if v := c.Int("inline-data-size"); v != 0 {
		p.Param = map[string]string{"inline_data_size": strconv.Itoa(v)}
	}
	p.RDMA = c.String("rdma-provider")
	return adminChange(c, "POST", "/v1/ports", p)
}

func adminISCSIAdd(c *cli.Context) error {
	a, err := args(c, 1, "IQN")
	if err != nil {
		return err
	}
	return adminChange(c, "POST", "/v1/iscsi/targets", target.ISCSITarget{IQN: a[0],
		AllowedInitiators: c.StringSlice("allow-initiator"), AllowAnyInitiator: c.Bool("allow-any-initiator")})
}

// scsiTargetPath is the LUN collection of --iscsi or --srp.
func scsiTargetPath(c *cli.Context) (string, error) {
	p, err := scsiTarget(c)
	return p + "/luns", err
}

// scsiTarget is the path of --iscsi or --srp.
func scsiTarget(c *cli.Context) (string, error) {
	i, s := c.String("iscsi"), c.String("srp")
	switch {
	case (i == "") == (s == ""):
		return "", fmt.Errorf("%s needs --iscsi IQN or --srp PORT", c.Command.FullName())
	case i != "":
		return "/v1/iscsi/targets/" + url.PathEscape(i), nil
	}
	return "/v1/srp/ports/" + url.PathEscape(s), nil
}

func adminInitiator(method string) cli.ActionFunc {
	return func(c *cli.Context) error {
		a, err := args(c, 1, "an initiator NAME")
		if err != nil {
			return err
		}
		p, err := scsiTarget(c)
		if err != nil {
			return err
		}
		if method == "POST" {
			return adminChange(c, method, p+"/initiators", target.HostRequest{NQN: a[0]})
		}
		return adminChange(c, method, p+"/initiators/"+url.PathEscape(a[0]), nil)
	}
}

func adminLUNMap(c *cli.Context) error {
	nqn, nsid, _, err := nsArgs(c, 2, "SUBNQN NSID")
	if err != nil {
		return err
	}
	path, err := scsiTargetPath(c)
	if err != nil {
		return err
	}
	ref := target.LUNRef{LUN: c.Uint64("lun"), Subsystem: nqn, NSID: nsid}
	if !c.IsSet("lun") {
		cfg, err := adminConfig(c)
		if err != nil {
			return err
		}
		var used []target.LUNRef
		if cfg.ISCSI != nil && c.String("iscsi") != "" {
			for _, t := range cfg.ISCSI.Targets {
				if t.IQN == c.String("iscsi") {
					used = t.LUNs
				}
			}
		}
		if cfg.SRP != nil && c.String("srp") != "" {
			want := c.String("srp")
			for _, p := range cfg.SRP.Ports {
				ext, err1 := srp.ParseGUID(p.IDExt)
				ioc, err2 := srp.ParseGUID(p.IOCGUID)
				w, err3 := srp.ParseGUID(want)
				if err1 == nil && err2 == nil && (srp.MakePortID(ext, ioc).String() == want || (err3 == nil && w == ext)) {
					used = p.LUNs
				}
			}
		}
		for slices.ContainsFunc(used, func(r target.LUNRef) bool { return r.LUN == ref.LUN }) {
			ref.LUN++
		}
	}
	return adminChange(c, "POST", path, ref)
}

func adminLUNUnmap(c *cli.Context) error {
	a, err := args(c, 1, "a LUN")
	if err != nil {
		return err
	}
	lun, err := strconv.ParseUint(a[0], 10, 64)
	if err != nil {
		return fmt.Errorf("LUN %q: want a number", a[0])
	}
	path, err := scsiTargetPath(c)
	if err != nil {
		return err
	}
	return adminChange(c, "DELETE", fmt.Sprintf("%s/%d", path, lun), nil)
}

func adminClose(c *cli.Context) error {
	a := c.Args().Slice()
	switch {
	case len(a) == 3 && a[0] == "nvme":
		id, err := strconv.ParseUint(a[2], 10, 16)
		if err != nil {
			return fmt.Errorf("CNTLID %q: want a number", a[2])
		}
		return adminChange(c, "DELETE", fmt.Sprintf("/v1/nvme/controllers/%s/%d", url.PathEscape(a[1]), id), nil)
	case len(a) == 2 && a[0] == "iscsi":
		id, err := strconv.ParseUint(a[1], 10, 16)
		if err != nil {
			return fmt.Errorf("TSIH %q: want a number", a[1])
		}
		return adminChange(c, "DELETE", fmt.Sprintf("/v1/iscsi/sessions/%d", id), nil)
	case len(a) == 2 && a[0] == "srp":
		id, err := strconv.ParseUint(a[1], 10, 64)
		if err != nil {
			return fmt.Errorf("CHANNEL %q: want a number", a[1])
		}
		return adminChange(c, "DELETE", fmt.Sprintf("/v1/srp/channels/%d", id), nil)
	}
	return fmt.Errorf("admin close takes nvme SUBNQN CNTLID, iscsi TSIH or srp CHANNEL")
}

func adminACLSet(c *cli.Context) error {
	a, err := args(c, 2, "IQN INITIATOR")
	if err != nil {
		return err
	}
	acl := target.ISCSIACL{Initiator: a[1]}
	for _, m := range c.StringSlice("map") {
		mapped, lun, ok := strings.Cut(m, "=")
		lun, ro := strings.CutSuffix(lun, ":ro")
		ml, err1 := strconv.ParseUint(mapped, 10, 64)
		tl, err2 := strconv.ParseUint(lun, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("--map %q: want MAPPED=LUN or MAPPED=LUN:ro", m)
		}
		acl.MappedLUNs = append(acl.MappedLUNs, target.MappedLUN{MappedLUN: ml, LUN: tl, WriteProtect: ro})
	}
	return adminChange(c, "PUT", "/v1/iscsi/targets/"+url.PathEscape(a[0])+"/acls/"+url.PathEscape(a[1]), acl)
}
