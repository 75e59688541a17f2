package main

// SRP (SCSI RDMA Protocol) hooks for the rdisk commands. The URL shape is
//
//	srp://HOST[:PORT][/ID_EXT/IOC_GUID[/LUN]]
//
// PORT defaults to 5555 (RDMA/CM, as blktests and Linux srpt use), ID_EXT
// and IOC_GUID name the target port as Linux ib_srp's add_target does (16
// hex digits, optional 0x, or xxxx:xxxx:xxxx:xxxx); without them rdisk's
// default target port (srp.DefaultIDExt, srp.DefaultIOCGUID) is meant. LUN
// is decimal; without it `rdisk bench` opens the first LUN REPORT LUNS lists.
//
// Hooks for the other commands:
//   - discover.go:  if strings.HasPrefix(url, "srp://") { return discoverSRP(c, url) }
//   - bench.go (openDevice): case "srp": d, err := openSRPDevice(c.Context, rawURL, srpOptions{Queues: queues, Depth: depth, Logger: log})
//   - target.go: append srpTargetFlags() to the flags; scsiFromFlags turns them into the config's rdisk_srp section.

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/internal/units"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/srp"
	srpinitiator "github.com/rdisk/rdisk/srp/initiator"
	"github.com/urfave/cli/v2"
)

// srpOptions tunes openSRPDevice. Zero fields take the srp package's
// defaults.
type srpOptions struct {
	// Queues is the number of RDMA channels (blockdev queues).
	Queues int
	// Depth is the commands in flight per channel; the target's credits
	// bound it further (one is kept for task management).
	Depth int
	// InitiatorPortID is the initiator port identifier in hex (32 digits);
	// empty means one derived from the host name.
	InitiatorPortID string
	Logger          *slog.Logger
	// RDMA is the --rdma choice ("": auto).
	RDMA string
}

// srpDevice closes its provider with the device.
type srpDevice struct {
	*srpinitiator.Device
	p rdma.Provider
}

func (d *srpDevice) Close() error {
	err := d.Device.Close()
	d.p.Close()
	return err
}

func srpInitiatorConfig(opts srpOptions) (srpinitiator.Config, error) {
	cfg := srpinitiator.Config{Logger: opts.Logger, Channels: opts.Queues, QueueDepth: opts.Depth}
	if opts.InitiatorPortID != "" {
		id, err := srp.ParsePortID(opts.InitiatorPortID)
		if err != nil {
			return cfg, err
		}
		cfg.InitiatorPortID = id
	}
	// Room for the largest bench request (the flag allows 64 MiB).
	cfg.MaxTransfer = 8 << 20
	return cfg, nil
}

// openSRPDevice logs in to the SRP target port a URL names over the RDMA
// provider opts.RDMA picks and opens its LUN as a blockdev.Device. Closing
// the device logs out.
func openSRPDevice(ctx context.Context, rawURL string, opts srpOptions) (blockdev.Device, error) {
	u, err := srp.ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	cfg, err := srpInitiatorConfig(opts)
	if err != nil {
		return nil, err
	}
	p, err := openRDMA(cmp.Or(opts.RDMA, rdmaAuto), opts.Logger, u.Addr(), false)
	if err != nil {
		return nil, err
	}
	d, err := srpinitiator.Open(ctx, p, u, cfg)
	if err != nil {
		p.Close()
		return nil, err
	}
	return &srpDevice{Device: d, p: p}, nil
}

// discoverSRP lists the LUNs of the SRP target port a URL names (REPORT
// LUNS, INQUIRY, READ CAPACITY), with --json as JSON, and the line that
// makes Linux ib_srp log in to it.
func discoverSRP(c *cli.Context, rawURL string) error {
	log, err := logger(c)
	if err != nil {
		return err
	}
	u, err := srp.ParseURL(rawURL)
	if err != nil {
		return err
	}
	choice, err := rdmaOf(c)
	if err != nil {
		return err
	}
	p, err := openRDMA(choice, log, u.Addr(), false)
	if err != nil {
		return err
	}
	defer p.Close()
	luns, err := srpinitiator.Discover(c.Context, p, u, srpinitiator.Config{Logger: log})
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, struct {
			Target    string                 `json:"target"`
			IDExt     string                 `json:"id_ext"`
			IOCGUID   string                 `json:"ioc_guid"`
			AddTarget string                 `json:"linux_add_target"`
			LUNs      []srpinitiator.LUNInfo `json:"luns"`
		}{u.String(), srp.FormatGUID(u.IDExt), srp.FormatGUID(u.IOCGUID), u.AddTarget(), nonNil(luns)})
	}
	printSRPLUNs(c.App.Writer, u, luns)
	return nil
}

func nonNil(l []srpinitiator.LUNInfo) []srpinitiator.LUNInfo {
	if l == nil {
		return []srpinitiator.LUNInfo{}
	}
	return l
}

func printSRPLUNs(w io.Writer, u srp.URL, luns []srpinitiator.LUNInfo) {
	fmt.Fprintf(w, "SRP target port id_ext=%016x ioc_guid=%016x at %s: %d LUN(s)\n", u.IDExt, u.IOCGUID, u.Addr(), len(luns))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "URL\tLUN\tTYPE\tVENDOR\tPRODUCT\tREV\tSIZE\tBLOCK")
	for _, l := range luns {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d\n", l.URL, l.LUN, deviceType(l.Type), l.Vendor, l.Product, l.Revision,
			units.FormatSize(int64(l.Size)), l.BlockSize)
	}
	tw.Flush()
	fmt.Fprintf(w, "Linux: echo %s > /sys/class/infiniband_srp/srp-<device>-<port>/add_target\n", u.AddTarget())
}

func deviceType(t uint8) string {
	switch t {
	case 0x00:
		return "disk"
	case 0x05:
		return "cd/dvd"
	case 0x0d:
		return "enclosure"
	case 0x1f:
		return "none"
	}
	return fmt.Sprintf("type 0x%02x", t)
}

// srpTargetFlags are the `rdisk target` flags of the SRP export.
func srpTargetFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "srp-listen", Value: "127.0.0.1:5555", Usage: "SRP over RDMA/CM address (host:port); empty disables SRP"},
		&cli.StringFlag{Name: "srp-id-ext", Value: srp.FormatGUID(srp.DefaultIDExt), Usage: "SRP target port id_ext (hex)"},
		&cli.StringFlag{Name: "srp-ioc-guid", Value: srp.FormatGUID(srp.DefaultIOCGUID), Usage: "SRP target port ioc_guid (hex)"},
		&cli.StringSliceFlag{Name: "srp-allow", Usage: "SRP initiator allowed to log in: port ID (0x + 32 hex), port GUID or IP address (repeatable)"},
	}
}
