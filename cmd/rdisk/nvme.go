package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/auth"
	"github.com/rdisk/rdisk/nvmeof/host"
	"github.com/rdisk/rdisk/rdma"
	"github.com/urfave/cli/v2"
)

// nvmeURLUsage names the NVMe-oF URL forms for usage strings.
const nvmeURLUsage = "nvme://HOST[:PORT]/SUBNQN[/NSID] (NVMe/RDMA; also nvme+rdma://) or nvme+tcp://HOST[:PORT]/SUBNQN[/NSID] (NVMe/TCP)"

// digestFlags are the NVMe/TCP digest options, as nvme-cli's connect has
// them (-g/--hdr-digest, -G/--data-digest).
func digestFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "hdr-digest", Aliases: []string{"g"}, Usage: "NVMe/TCP: header digests (CRC32C) on every PDU header (nvme+tcp:// only)"},
		&cli.BoolFlag{Name: "data-digest", Aliases: []string{"G"}, Usage: "NVMe/TCP: data digests (CRC32C) on every PDU's data (nvme+tcp:// only)"},
	}
}

// The environment variables of the DH-HMAC-CHAP flags; rdisk connect hands
// the secrets to the daemon it starts through them, not its command line.
const (
	dhchapSecretEnv     = "RDISK_DHCHAP_SECRET"
	dhchapCtrlSecretEnv = "RDISK_DHCHAP_CTRL_SECRET"
)

// dhchapFlags are nvme-cli's DH-HMAC-CHAP options of connect
// (-S/--dhchap-secret, -C/--dhchap-ctrl-secret).
func dhchapFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "dhchap-secret", Aliases: []string{"S"}, EnvVars: []string{dhchapSecretEnv}, Usage: "NVMe-oF: the host's DH-HMAC-CHAP secret, used when the controller asks for in-band authentication: " +
			"DHHC-1:XX:BASE64: as `nvme gen-dhchap-key` prints it, or @FILE to read it from FILE (which keeps it out of the process list)"},
		&cli.StringFlag{Name: "dhchap-ctrl-secret", Aliases: []string{"C"}, EnvVars: []string{dhchapCtrlSecretEnv}, Usage: "NVMe-oF: the controller's DH-HMAC-CHAP secret, for bidirectional authentication (needs --dhchap-secret): DHHC-1:XX:BASE64: or @FILE"},
	}
}

// dhchapFromFlags puts the secrets of --dhchap-secret and
// --dhchap-ctrl-secret in cfg. Errors name the flag, never the secret.
func dhchapFromFlags(c *cli.Context, cfg *host.Config) error {
	s, err := secretFlag(c, "dhchap-secret")
	if err != nil {
		return err
	}
	cs, err := secretFlag(c, "dhchap-ctrl-secret")
	if err != nil {
		return err
	}
	if cs != nil && s == nil {
		return fmt.Errorf("--dhchap-ctrl-secret needs --dhchap-secret: bidirectional authentication authenticates the host too")
	}
	cfg.DHCHAPSecret, cfg.DHCHAPCtrlSecret = s, cs
	return nil
}

// secretFlag parses a DH-HMAC-CHAP secret flag: DHHC-1:... or @FILE. It
// returns nil when the flag is not set.
func secretFlag(c *cli.Context, name string) (*auth.Secret, error) {
	v := c.String(name)
	if v == "" {
		return nil, nil
	}
	s, err := auth.ParseSecretOrFile(v)
	if err != nil && !strings.HasPrefix(v, "@") && !strings.HasPrefix(v, "DHHC-1:") {
		err = fmt.Errorf("%w (want DHHC-1:XX:BASE64:, or @FILE to read it from a file)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", name, err)
	}
	return &s, nil
}

// applyURL sets the transport of a URL in cfg, with the digest flags for
// NVMe/TCP; asking for digests on an RDMA URL is an error.
func applyURL(c *cli.Context, cfg *host.Config, u host.URL) error {
	cfg.Transport = u.Transport
	cfg.HeaderDigest, cfg.DataDigest = c.Bool("hdr-digest"), c.Bool("data-digest")
	if (cfg.HeaderDigest || cfg.DataDigest) && u.Transport != host.TransportTCP {
		return fmt.Errorf("--hdr-digest and --data-digest are NVMe/TCP options: use an nvme+tcp:// URL (not %s)", u)
	}
	return nil
}

// nvmeSetup builds the host configuration (identity, logger) and the RDMA
// provider for the NVMe-oF commands (NVMe/TCP connections ignore it).
func nvmeSetup(c *cli.Context) (host.Config, rdma.Provider, error) {
	log, err := logger(c)
	if err != nil {
		return host.Config{}, nil, err
	}
	id, err := identityFromFlags(c)
	if err != nil {
		return host.Config{}, nil, err
	}
	log.Debug("host identity", "hostnqn", id.NQN, "from", id.NQNFrom, "hostid", formatUUID(id.ID), "id_from", id.IDFrom)
	choice, err := rdmaOf(c)
	if err != nil {
		return host.Config{}, nil, err
	}
	p, err := openRDMA(choice, log, "", false)
	if err != nil {
		return host.Config{}, nil, err
	}
	cfg := host.Config{HostNQN: id.NQN, HostID: id.ID, Logger: log}
	if err := dhchapFromFlags(c, &cfg); err != nil {
		p.Close()
		return host.Config{}, nil, err
	}
	return cfg, p, nil
}

// subsystemURL parses a URL that must name a subsystem.
func subsystemURL(s string) (host.URL, error) {
	u, err := host.ParseURL(s)
	if err != nil {
		return u, err
	}
	if u.SubNQN == "" {
		return u, fmt.Errorf("URL %q names no subsystem: want %s://HOST[:PORT]/SUBNQN[/NSID] (rdisk discover %s lists them)", s, u.Scheme(), u)
	}
	return u, nil
}

func nvmeCommand() *cli.Command {
	urlArg := nvmeURLUsage
	flags := func() []cli.Flag {
		return append(append(append(hostIDFlags(), digestFlags()...), dhchapFlags()...), &cli.BoolFlag{Name: "json", Usage: "print JSON"})
	}
	return &cli.Command{
		Name:  "nvme",
		Usage: "inspect an NVMe-oF controller (in the spirit of nvme-cli)",
		Subcommands: []*cli.Command{
			{
				Name:      "identify",
				Usage:     "print Identify Controller, and Identify Namespace of the URL's namespace (nvme id-ctrl, id-ns)",
				ArgsUsage: urlArg,
				Flags:     flags(),
				Action:    func(c *cli.Context) error { return withController(c, runIdentify) },
			},
			{
				Name:      "id-ctrl",
				Usage:     "print Identify Controller (nvme id-ctrl; --json with nvme-cli's keys)",
				ArgsUsage: urlArg,
				Flags:     flags(),
				Action:    func(c *cli.Context) error { return withController(c, runIDCtrl) },
			},
			{
				Name:      "id-ns",
				Usage:     "print Identify Namespace of the URL's namespace (nvme id-ns; --json with nvme-cli's keys)",
				ArgsUsage: urlArg,
				Flags:     flags(),
				Action:    func(c *cli.Context) error { return withController(c, runIDNS) },
			},
			{
				Name:      "error-log",
				Usage:     "print the Error Information log (nvme error-log; --json with nvme-cli's keys)",
				ArgsUsage: urlArg,
				Flags:     flags(),
				Action:    func(c *cli.Context) error { return withController(c, runErrorLog) },
			},
			{
				Name:      "list",
				Usage:     "list the subsystem's namespaces (nvme list)",
				ArgsUsage: urlArg,
				Flags:     flags(),
				Action:    func(c *cli.Context) error { return withController(c, runList) },
			},
			{
				Name:      "smart-log",
				Usage:     "print the SMART / Health log (nvme smart-log)",
				ArgsUsage: urlArg,
				Flags:     flags(),
				Action:    func(c *cli.Context) error { return withController(c, runSMART) },
			},
		},
	}
}

// withController connects to the URL's subsystem (one small I/O queue),
// runs fn and disconnects.
func withController(c *cli.Context, fn func(ctx context.Context, c *cli.Context, ctrl *host.Controller, u host.URL) error) error {
	if c.NArg() != 1 {
		return fmt.Errorf("%s takes one URL (%s), got %d arguments", c.Command.Name, nvmeURLUsage, c.NArg())
	}
	u, err := subsystemURL(c.Args().First())
	if err != nil {
		return err
	}
	cfg, p, err := nvmeSetup(c)
	if err != nil {
		return err
	}
	defer p.Close()
	if err := applyURL(c, &cfg, u); err != nil {
		return err
	}
	cfg.IOQueues, cfg.QueueDepth = 1, 2
	ctrl, err := host.Connect(c.Context, p, u.Addr(), u.SubNQN, cfg)
	if err != nil {
		return err
	}
	defer ctrl.Close()
	return fn(c.Context, c, ctrl, u)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func runIdentify(ctx context.Context, c *cli.Context, ctrl *host.Controller, u host.URL) error {
	id := ctrl.Identify()
	var ns *nvmeof.IdentifyNamespace
	var ids *nvmeof.NamespaceIDs
	if u.NSID != 0 {
		n, err := ctrl.IdentifyNamespace(ctx, u.NSID)
		if err != nil {
			return err
		}
		if n.NSZE == 0 {
			return fmt.Errorf("namespace %d of %s is not active", u.NSID, u.SubNQN)
		}
		ns = &n
		if d, err := ctrl.NamespaceIDs(ctx, u.NSID); err == nil {
			ids = &d
		}
	}
	if c.Bool("json") {
		// id-ctrl's object, and id-ns's under "namespace".
		o := idCtrlJSON(&id)
		if ns != nil {
			o.add("namespace", idNSJSON(ns))
		}
		return printJSON(c.App.Writer, o)
	}
	printIDCtrl(c.App.Writer, &id)
	if ns != nil {
		fmt.Fprintln(c.App.Writer)
		printIDNS(c.App.Writer, u.NSID, ns, ids)
	}
	return nil
}

func printIDCtrl(w io.Writer, id *nvmeof.IdentifyController) {
	p := func(name, format string, args ...any) {
		fmt.Fprintf(w, "%-10s: "+format+"\n", append([]any{name}, args...)...)
	}
	fmt.Fprintln(w, "NVME Identify Controller:")
	p("vid", "%#x", id.VID)
	p("ssvid", "%#x", id.SSVID)
	p("sn", "%-20s", id.SN)
	p("mn", "%-40s", id.MN)
	p("fr", "%-8s", id.FR)
	p("rab", "%d", id.RAB)
	p("ieee", "%06x", id.IEEE)
	p("cmic", "%#x", id.CMIC)
	p("mdts", "%d", id.MDTS)
	p("cntlid", "%#x", id.CNTLID)
	p("ver", "%#x", uint32(id.VER))
	p("rtd3r", "%#x", id.RTD3R)
	p("rtd3e", "%#x", id.RTD3E)
	p("oaes", "%#x", id.OAES)
	p("ctratt", "%#x", id.CTRATT)
	p("cntrltype", "%d", id.CNTRLTYPE)
	p("fguid", "%s", hexID(id.FGUID[:]))
	p("crdt1", "%d", id.CRDT1)
	p("crdt2", "%d", id.CRDT2)
	p("crdt3", "%d", id.CRDT3)
	p("oacs", "%#x", id.OACS)
	p("acl", "%d", id.ACL)
	p("aerl", "%d", id.AERL)
	p("frmw", "%#x", id.FRMW)
	p("lpa", "%#x", id.LPA)
	p("elpe", "%d", id.ELPE)
	p("npss", "%d", id.NPSS)
	p("wctemp", "%d", id.WCTEMP)
	p("cctemp", "%d", id.CCTEMP)
	p("kas", "%d", id.KAS)
	p("anatt", "%d", id.ANATT)
	p("anacap", "%d", id.ANACAP)
	p("anagrpmax", "%d", id.ANAGRPMAX)
	p("nanagrpid", "%d", id.NANAGRPID)
	p("sqes", "%#x", id.SQES)
	p("cqes", "%#x", id.CQES)
	p("maxcmd", "%d", id.MAXCMD)
	p("nn", "%d", id.NN)
	p("oncs", "%#x", id.ONCS)
	p("fuses", "%#x", id.FUSES)
	p("fna", "%#x", id.FNA)
	p("vwc", "%#x", id.VWC)
	p("awun", "%d", id.AWUN)
	p("awupf", "%d", id.AWUPF)
	p("nwpc", "%d", id.NWPC)
	p("acwu", "%d", id.ACWU)
	p("sgls", "%#x", id.SGLS)
	p("mnan", "%d", id.MNAN)
	p("subnqn", "%s", id.SUBNQN)
	p("ioccsz", "%d", id.IOCCSZ)
	p("iorcsz", "%d", id.IORCSZ)
	p("icdoff", "%d", id.ICDOFF)
	p("fcatt", "%#x", id.FCATT)
	p("msdbd", "%d", id.MSDBD)
	p("ofcs", "%d", id.OFCS)
	for i, ps := range id.PSD {
		fmt.Fprintf(w, "ps %4d : mp:%.2fW operational enlat:%d exlat:%d rrt:%d rrl:%d\n          rwt:%d rwl:%d\n",
			i, float64(ps.MaxPower)/100, ps.EntryLatency, ps.ExitLatency, ps.RRT, ps.RRL, ps.RWT, ps.RWL)
	}
}

func hexID(b []byte) string {
	h := hex.EncodeToString(b)
	if len(b) == 16 {
		return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
	}
	return h
}

func printIDNS(w io.Writer, nsid uint32, ns *nvmeof.IdentifyNamespace, ids *nvmeof.NamespaceIDs) {
	p := func(name, format string, args ...any) {
		fmt.Fprintf(w, "%-8s: "+format+"\n", append([]any{name}, args...)...)
	}
	fmt.Fprintf(w, "NVME Identify Namespace %d:\n", nsid)
	p("nsze", "%#x", ns.NSZE)
	p("ncap", "%#x", ns.NCAP)
	p("nuse", "%#x", ns.NUSE)
	p("nsfeat", "%#x", ns.NSFEAT)
	p("nlbaf", "%d", ns.NLBAF)
	p("flbas", "%#x", ns.FLBAS)
	p("mc", "%#x", ns.MC)
	p("dpc", "%#x", ns.DPC)
	p("dps", "%#x", ns.DPS)
	p("nmic", "%#x", ns.NMIC)
	p("rescap", "%#x", ns.RESCAP)
	p("fpi", "%#x", ns.FPI)
	p("dlfeat", "%d", ns.DLFEAT)
	p("nawun", "%d", ns.NAWUN)
	p("nawupf", "%d", ns.NAWUPF)
	p("nacwu", "%d", ns.NACWU)
	p("nabsn", "%d", ns.NABSN)
	p("nabo", "%d", ns.NABO)
	p("nabspf", "%d", ns.NABSPF)
	p("noiob", "%d", ns.NOIOB)
	p("nvmcap", "%d", ns.NVMCAP)
	p("npwg", "%d", ns.NPWG)
	p("npwa", "%d", ns.NPWA)
	p("npdg", "%d", ns.NPDG)
	p("npda", "%d", ns.NPDA)
	p("nows", "%d", ns.NOWS)
	p("anagrpid", "%d", ns.ANAGRPID)
	p("nsattr", "%d", ns.NSATTR)
	p("nvmsetid", "%d", ns.NVMSETID)
	p("endgid", "%d", ns.ENDGID)
	p("nguid", "%s", hex.EncodeToString(ns.NGUID[:]))
	p("eui64", "%s", hex.EncodeToString(ns.EUI64[:]))
	if ids != nil && ids.HasUUID {
		p("uuid", "%s", hexID(ids.UUID[:]))
	}
	cur := nvmeof.LBAFormatIndex(ns.FLBAS)
	for i, f := range ns.LBAF {
		inUse := ""
		if i == cur {
			inUse = " (in use)"
		}
		fmt.Fprintf(w, "lbaf %2d : ms:%-3d lbads:%-2d rp:%#x%s\n", i, f.MS, f.LBADS, f.RP, inUse)
	}
}

// decimalSize prints bytes with decimal units, as nvme list does.
func decimalSize(b float64) string {
	units := []string{"B", "kB", "MB", "GB", "TB", "PB"}
	i := 0
	for b >= 1000 && i < len(units)-1 {
		b /= 1000
		i++
	}
	return fmt.Sprintf("%6.2f %2s", b, units[i])
}

type listEntry struct {
	URL          string `json:"url"`
	SerialNumber string `json:"serial"`
	ModelNumber  string `json:"model"`
	Firmware     string `json:"firmware"`
	NSID         uint32 `json:"nsid"`
	UsedBytes    uint64 `json:"used_bytes"`
	PhysicalSize uint64 `json:"size_bytes"`
	SectorSize   uint32 `json:"sector_size"`
}

func runList(ctx context.Context, c *cli.Context, ctrl *host.Controller, u host.URL) error {
	nsids := []uint32{u.NSID}
	if u.NSID == 0 {
		var err error
		if nsids, err = ctrl.ActiveNamespaces(ctx); err != nil {
			return err
		}
	}
	id := ctrl.Identify()
	var out []listEntry
	for _, nsid := range nsids {
		ns, err := ctrl.IdentifyNamespace(ctx, nsid)
		if err != nil {
			return err
		}
		if ns.NSZE == 0 {
			if u.NSID != 0 {
				return fmt.Errorf("namespace %d of %s is not active", nsid, u.SubNQN)
			}
			continue
		}
		bs := ns.BlockSize()
		nu := u
		nu.NSID = nsid
		out = append(out, listEntry{URL: nu.String(), SerialNumber: id.SN, ModelNumber: id.MN, Firmware: id.FR, NSID: nsid,
			UsedBytes: ns.NUSE * uint64(bs), PhysicalSize: ns.NSZE * uint64(bs), SectorSize: bs})
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, struct {
			Devices []listEntry `json:"devices"`
		}{out})
	}
	w := 0
	for _, e := range out {
		w = max(w, len(e.URL))
	}
	w = max(w, len("Node"))
	out2 := c.App.Writer
	fmt.Fprintf(out2, "%-*s %-20s %-40s %-9s %-26s %-16s %-8s\n", w, "Node", "SN", "Model", "Namespace", "Usage", "Format", "FW Rev")
	fmt.Fprintf(out2, "%s %s %s %s %s %s %s\n", strings.Repeat("-", w), strings.Repeat("-", 20), strings.Repeat("-", 40), strings.Repeat("-", 9),
		strings.Repeat("-", 26), strings.Repeat("-", 16), strings.Repeat("-", 8))
	for _, e := range out {
		usage := decimalSize(float64(e.UsedBytes)) + " / " + decimalSize(float64(e.PhysicalSize))
		format := fmt.Sprintf("%-6s + 0 B", fmt.Sprintf("%d B", e.SectorSize))
		out2 := c.App.Writer
		fmt.Fprintf(out2, "%-*s %-20s %-40s %-9d %-26s %-16s %-8s\n", w, e.URL, e.SerialNumber, e.ModelNumber, e.NSID, usage, format, e.Firmware)
	}
	return nil
}

func runSMART(ctx context.Context, c *cli.Context, ctrl *host.Controller, u host.URL) error {
	nsid := nvmeof.NSIDAll
	if u.NSID != 0 && ctrl.Identify().LPA&nvmeof.LPASMARTPerNamespace != 0 {
		nsid = u.NSID
	}
	l, err := ctrl.SMARTLog(ctx, nsid)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, smartJSON(&l))
	}
	w := c.App.Writer
	p := func(name, format string, args ...any) {
		fmt.Fprintf(w, "%-40s: "+format+"\n", append([]any{name}, args...)...)
	}
	fmt.Fprintf(w, "Smart Log for NVME device:%s namespace-id:%x\n", u, nsid)
	p("critical_warning", "%d", l.CriticalWarning)
	if l.Temperature == 0 {
		p("temperature", "not reported")
	} else {
		p("temperature", "%d°C (%d Kelvin)", int(l.Temperature)-273, l.Temperature)
	}
	p("available_spare", "%d%%", l.AvailableSpare)
	p("available_spare_threshold", "%d%%", l.AvailableSpareThreshold)
	p("percentage_used", "%d%%", l.PercentageUsed)
	p("endurance group critical warning summary", "%d", l.EnduranceGroupCriticalWarning)
	p("Data Units Read", "%d (%s)", l.DataUnitsRead, strings.TrimSpace(decimalSize(float64(l.DataUnitsRead)*512000)))
	p("Data Units Written", "%d (%s)", l.DataUnitsWritten, strings.TrimSpace(decimalSize(float64(l.DataUnitsWritten)*512000)))
	p("host_read_commands", "%d", l.HostReads)
	p("host_write_commands", "%d", l.HostWrites)
	p("controller_busy_time", "%d", l.ControllerBusyTime)
	p("power_cycles", "%d", l.PowerCycles)
	p("power_on_hours", "%d", l.PowerOnHours)
	p("unsafe_shutdowns", "%d", l.UnsafeShutdowns)
	p("media_errors", "%d", l.MediaErrors)
	p("num_err_log_entries", "%d", l.ErrorLogEntries)
	p("Warning Temperature Time", "%d", l.WarningTempTime)
	p("Critical Composite Temperature Time", "%d", l.CriticalTempTime)
	for i, t := range l.TempSensors {
		if t != 0 {
			p(fmt.Sprintf("Temperature Sensor %d", i+1), "%d°C (%d Kelvin)", int(t)-273, t)
		}
	}
	p("Thermal Management T1 Trans Count", "%d", l.ThermalMgmtTemp1Count)
	p("Thermal Management T2 Trans Count", "%d", l.ThermalMgmtTemp2Count)
	p("Thermal Management T1 Total Time", "%d", l.ThermalMgmtTemp1Time)
	p("Thermal Management T2 Total Time", "%d", l.ThermalMgmtTemp2Time)
	return nil
}
