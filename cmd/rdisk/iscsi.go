package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/iser/initiator"
	"github.com/rdisk/rdisk/rdma"
	"github.com/urfave/cli/v2"
)

// iSCSI and iSER on the command line: `rdisk discover iscsi://HOST[:PORT]`
// (or iser://) and `rdisk bench iscsi://HOST[:PORT]/IQN/LUN` (or iser://).
// The initiator name is --initiator-name, else the open-iscsi one in
// /etc/iscsi/initiatorname.iscsi (so the kernel initiator and rdisk look
// like one host to a target's ACLs), else one derived from the host name.

const openISCSIInitiatorFile = "/etc/iscsi/initiatorname.iscsi"

// iscsiFlags are the flags the iSCSI URL schemes read; commands that take
// iscsi:// and iser:// URLs append them.
func iscsiFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "initiator-name", Usage: "iSCSI initiator name (default: " + openISCSIInitiatorFile + ", else derived from the host name)"},
		&cli.StringFlag{Name: "chap-user", Usage: "iSCSI CHAP user name"},
		&cli.StringFlag{Name: "chap-secret", Usage: "iSCSI CHAP secret (12 to 16 characters for most targets)"},
		&cli.StringFlag{Name: "chap-target-user", Usage: "mutual CHAP: the user name the target must answer as"},
		&cli.StringFlag{Name: "chap-target-secret", Usage: "mutual CHAP: the target's secret"},
	}
}

// iscsiOpenOptions is what openISCSIDevice needs besides the URL.
type iscsiOpenOptions struct {
	// InitiatorName; empty resolves it as the package comment says.
	InitiatorName string
	// CHAP and MutualCHAP credentials (optional).
	CHAP, MutualCHAP *iser.CHAPSecret
	// QueueDepth is the number of commands in flight (0: 128).
	QueueDepth int
	Logger     *slog.Logger
	// RDMA is the --rdma choice for iser:// ("": auto).
	RDMA string
}

// iscsiOptionsFromFlags reads the iSCSI flags, tolerating commands that do
// not define them.
func iscsiOptionsFromFlags(c *cli.Context) (iscsiOpenOptions, error) {
	o := iscsiOpenOptions{InitiatorName: c.String("initiator-name")}
	if u, s := c.String("chap-user"), c.String("chap-secret"); u != "" || s != "" {
		if u == "" || s == "" {
			return o, fmt.Errorf("--chap-user and --chap-secret go together")
		}
		o.CHAP = &iser.CHAPSecret{User: u, Secret: s}
	}
	if u, s := c.String("chap-target-user"), c.String("chap-target-secret"); u != "" || s != "" {
		if u == "" || s == "" || o.CHAP == nil {
			return o, fmt.Errorf("--chap-target-user and --chap-target-secret go together, with --chap-user")
		}
		o.MutualCHAP = &iser.CHAPSecret{User: u, Secret: s}
	}
	log, err := logger(c)
	if err != nil {
		return o, err
	}
	o.Logger = log
	if o.RDMA, err = rdmaOf(c); err != nil {
		return o, err
	}
	return o, nil
}

// initiatorName resolves the initiator name.
func initiatorName(flag string) string {
	if flag != "" {
		return flag
	}
	if f, err := os.Open(openISCSIInitiatorFile); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "InitiatorName="); ok && v != "" {
				return v
			}
		}
	}
	h, _ := os.Hostname()
	sum := sha256.Sum256([]byte(h))
	return "iqn.2026-11.io.rdisk:initiator-" + hex.EncodeToString(sum[:4])
}

// iscsiConfig builds the initiator configuration; the iSER provider, if
// any, is the caller's to close.
func iscsiConfig(u initiator.URL, o iscsiOpenOptions) (initiator.Config, rdma.Provider, error) {
	cfg := initiator.Config{InitiatorName: initiatorName(o.InitiatorName), CHAP: o.CHAP, MutualCHAP: o.MutualCHAP,
		QueueDepth: o.QueueDepth, Logger: o.Logger}
	if u.Transport != iser.TransportISER {
		return cfg, nil, nil
	}
	p, err := openRDMA(cmp.Or(o.RDMA, rdmaAuto), o.Logger, net.JoinHostPort(u.Host, strconv.Itoa(u.Port)), false)
	if err != nil {
		return cfg, nil, err
	}
	cfg.Provider = p
	return cfg, p, nil
}

// discoverISCSI runs `rdisk discover iscsi://HOST[:PORT]` (or iser://): a
// discovery session with SendTargets=All, printed as iscsiadm does, with
// the rdisk URLs of each target's LUN 0.
func discoverISCSI(c *cli.Context, url string) error {
	u, err := initiator.ParseURL(url)
	if err != nil {
		return err
	}
	if u.Target != "" {
		return fmt.Errorf("discover asks a portal; drop the target from %s", url)
	}
	o, err := iscsiOptionsFromFlags(c)
	if err != nil {
		return err
	}
	cfg, p, err := iscsiConfig(u, o)
	if err != nil {
		return err
	}
	if p != nil {
		defer p.Close()
	}
	recs, err := initiator.Discover(c.Context, u.Transport, u.Addr(), cfg)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		type rec struct {
			Target    string   `json:"target"`
			Addresses []string `json:"addresses"`
			URLs      []string `json:"urls"`
		}
		out := []rec{}
		for _, r := range recs {
			out = append(out, rec{Target: r.Name, Addresses: r.Addresses, URLs: recordURLs(u, r)})
		}
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	w := c.App.Writer
	if len(recs) == 0 {
		fmt.Fprintf(w, "no targets at %s for initiator %s\n", u.Addr(), cfg.InitiatorName)
		return nil
	}
	for _, r := range recs {
		addrs := r.Addresses
		if len(addrs) == 0 {
			addrs = []string{u.Addr() + ",1"}
		}
		for _, a := range addrs {
			fmt.Fprintf(w, "%s %s\n", a, r.Name)
		}
		for _, s := range recordURLs(u, r) {
			fmt.Fprintf(w, "  %s\n", s)
		}
	}
	return nil
}

// recordURLs returns the iscsi:// and iser:// URLs of a discovered
// target's LUN 0 at each of its addresses.
func recordURLs(portal initiator.URL, r iser.TargetRecord) []string {
	var out []string
	addrs := r.Addresses
	if len(addrs) == 0 {
		addrs = []string{portal.Addr()}
	}
	for _, a := range addrs {
		host, port, _, _, err := iser.ParseTargetAddress(a)
		if err != nil {
			continue
		}
		for _, tr := range []iser.Transport{iser.TransportTCP, iser.TransportISER} {
			out = append(out, initiator.URL{Transport: tr, Host: host, Port: int(port), Target: r.Name}.String())
		}
	}
	return out
}

// openISCSIDevice opens the LUN an iscsi:// or iser:// URL names as a
// blockdev.Device; closing it logs out (and frees the iSER provider).
func openISCSIDevice(ctx context.Context, url string, opts iscsiOpenOptions) (blockdev.Device, error) {
	u, err := initiator.ParseURL(url)
	if err != nil {
		return nil, err
	}
	if u.Target == "" {
		return nil, fmt.Errorf("URL %q names no target: want %s://HOST[:PORT]/IQN/LUN (rdisk discover %s://%s lists them)", url, u.Scheme(), u.Scheme(), u.Addr())
	}
	cfg, p, err := iscsiConfig(u, opts)
	if err != nil {
		return nil, err
	}
	d, err := initiator.Open(ctx, u, cfg)
	if err != nil {
		if p != nil {
			p.Close()
		}
		return nil, err
	}
	if p == nil {
		return d, nil
	}
	return &providerDevice{Device: d, p: p}, nil
}

// providerDevice closes the RDMA provider with the device.
type providerDevice struct {
	*initiator.Device
	p rdma.Provider
}

func (d *providerDevice) Close() error {
	err := d.Device.Close()
	d.p.Close()
	return err
}
