// Command srptarget is a minimal rdisk SRP target for the interop harness:
// it exports a RAM disk as LUN 0 of one SRP target port over RDMA/CM on the
// software iWARP provider, prints the port's srp:// URL and the line that
// makes Linux ib_srp log in, and serves until SIGINT or SIGTERM.
//
//	srptarget [-listen 169.254.99.1:5555] [-size 256MiB] [-id-ext HEX] [-ioc-guid HEX] [-log-level debug]
//
// As a helper of the guest script, `srptarget -sg-reset /dev/sdX` asks the
// kernel for a SCSI device reset (ioctl SG_SCSI_RESET, SG_SCSI_RESET_DEVICE),
// which Linux ib_srp turns into an SRP_TSK_MGMT LOGICAL UNIT RESET.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/internal/units"
	"github.com/rdisk/rdisk/rdma/iwarp"
	"github.com/rdisk/rdisk/scsi"
	"github.com/rdisk/rdisk/srp"
	srptarget "github.com/rdisk/rdisk/srp/target"
	"golang.org/x/sys/unix"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:5555", "RDMA/CM address (host:port)")
	size := flag.String("size", "256MiB", "RAM disk size")
	bs := flag.Int("block-size", 512, "logical block size")
	idExt := flag.String("id-ext", srp.FormatGUID(srp.DefaultIDExt), "target port id_ext (hex)")
	ioc := flag.String("ioc-guid", srp.FormatGUID(srp.DefaultIOCGUID), "target port ioc_guid (hex)")
	depth := flag.Int("queue-depth", 0, "credits per channel (default: srptarget.DefaultQueueDepth)")
	level := flag.String("log-level", "info", "debug, info, warn or error")
	reset := flag.String("sg-reset", "", "only ask the kernel for a SCSI device reset of this block device, then exit")
	flag.Parse()
	if *reset != "" {
		if err := sgReset(*reset); err != nil {
			fmt.Fprintln(os.Stderr, "srptarget:", err)
			os.Exit(1)
		}
		fmt.Printf("srptarget: device reset of %s done\n", *reset)
		return
	}
	if err := run(*listen, *size, *bs, *idExt, *ioc, *depth, *level); err != nil {
		fmt.Fprintln(os.Stderr, "srptarget:", err)
		os.Exit(1)
	}
}

func run(listen, size string, bs int, idExt, ioc string, depth int, level string) error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	n, err := units.ParseSize(size)
	if err != nil {
		return err
	}
	disk, err := backstore.NewMem(n, bs)
	if err != nil {
		return err
	}
	defer disk.Close()
	ext, err := srp.ParseGUID(idExt)
	if err != nil {
		return err
	}
	guid, err := srp.ParseGUID(ioc)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p, err := iwarp.New(iwarp.Config{Logger: log})
	if err != nil {
		return err
	}
	defer p.Close()
	t, err := srptarget.New(srptarget.Config{Logger: log, QueueDepth: depth})
	if err != nil {
		return err
	}
	port, err := t.AddPort(srptarget.PortConfig{IDExt: ext, IOCGUID: guid, AllowAnyInitiator: true})
	if err != nil {
		return err
	}
	lu, err := scsi.NewLU(disk, scsi.LUConfig{MaxTransferBlocks: uint32(t.Config().MaxTransfer / bs)})
	if err != nil {
		return err
	}
	if err := port.Map(0, lu); err != nil {
		return err
	}
	addr, err := t.Listen(ctx, p, listen)
	if err != nil {
		return err
	}
	u := port.URL(addr.String())
	fmt.Printf("srptarget: serving a %s RAM disk as LUN 0 on %s\n  %s\n  add_target: %s\n", size, addr, u, u.AddTarget())
	<-ctx.Done()
	st := t.Stats()
	t.Close()
	fmt.Printf("srptarget: stopped; stats %+v\n", st)
	return nil
}

// sgReset issues SG_SCSI_RESET with SG_SCSI_RESET_DEVICE on a SCSI disk.
func sgReset(dev string) error {
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	const sgSCSIReset, sgSCSIResetDevice = 0x2284, 1
	if err := unix.IoctlSetPointerInt(int(f.Fd()), sgSCSIReset, sgSCSIResetDevice); err != nil {
		return fmt.Errorf("SG_SCSI_RESET on %s: %w", dev, err)
	}
	return nil
}
