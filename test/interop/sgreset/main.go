package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// From <scsi/sg.h>.
const (
	sgSCSIReset       = 0x2284
	sgSCSIResetDevice = 1
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: sgreset /dev/sdX")
		os.Exit(2)
	}
	if err := reset(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "sgreset:", err)
		os.Exit(1)
	}
	fmt.Printf("sgreset: device reset of %s done\n", os.Args[1])
}

func reset(dev string) error {
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.IoctlSetPointerInt(int(f.Fd()), sgSCSIReset, sgSCSIResetDevice); err != nil {
		return fmt.Errorf("SG_SCSI_RESET (device) on %s: %w", dev, err)
	}
	return nil
}
