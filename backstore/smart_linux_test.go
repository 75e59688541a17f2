//go:build linux

package backstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestClassifyDevice(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		path string
		want deviceKind
	}{
		{"/sys/devices/pci0000:00/0000:00:1d.0/0000:3d:00.0/nvme/nvme0/nvme0n1", devNVMe},
		{"/sys/devices/pci0000:00/0000:00:1d.0/0000:3d:00.0/nvme/nvme0/nvme0n1/nvme0n1p2", devNVMe},
		{"/sys/devices/virtual/nvme-subsystem/nvme-subsys0/nvme0n1", devNVMe},
		{"/sys/devices/virtual/nvme-fabrics/ctl/nvme1/nvme1n1", devNVMe},
		{"/sys/devices/virtual/block/loop0", devVirtual},
		{"/sys/devices/virtual/block/dm-0", devVirtual},
		{"/sys/devices/virtual/block/zram0", devVirtual},
		{"/sys/devices/pci0000:00/0000:00:05.0/virtio2/block/vda", devVirtio},
		{"/sys/devices/pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0/block/sda", devSCSI},
		{"/sys/devices/pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0/block/sda/sda1", devSCSI},
		{"/sys/devices/pci0000:00/0000:00:14.0/usb2/2-1/2-1:1.0/host6/target6:0:0/6:0:0:0/block/sdb", devSCSI},
		{"/sys/devices/platform/soc/fe340000.mmc/mmc_host/mmc0/mmc0:0001/block/mmcblk0", devUnknown},
	} {
		if got := classifyDevice(tt.path); got != tt.want {
			t.Errorf("classifyDevice(%s) = %d, want %d", tt.path, got, tt.want)
		}
	}
}

// TestReadHealthOnThisMachine reads the health of every block device of the
// machine. On the build VM (virtio disk, loop and zram devices) none has
// SMART, and the code must say so instead of reporting numbers.
func TestReadHealthOnThisMachine(t *testing.T) {
	t.Parallel()
	names, err := filepath.Glob("/sys/block/*")
	if err != nil || len(names) == 0 {
		t.Skip("no /sys/block")
	}
	checked := 0
	for _, sys := range names {
		dev := "/dev/" + filepath.Base(sys)
		h, err := ReadHealth(dev)
		switch {
		case err == nil:
			if !h.Supported || h.Source == SourceNone || h.Source == SourceSynthetic || h.Valid == 0 {
				t.Errorf("%s: health without error but inconsistent: %+v", dev, h)
			}
			t.Logf("%s: %s health: %+v", dev, h.Source, h)
		case errors.Is(err, ErrUnsupported):
			if h.Supported || h.Reason == "" || h != unsupportedHealth(h.Reason) {
				t.Errorf("%s: unsupported health carries data or lacks a reason: %+v", dev, h)
			}
			if !strings.Contains(err.Error(), h.Reason) || !strings.Contains(err.Error(), dev) {
				t.Errorf("%s: error %q does not name the device and the reason", dev, err)
			}
			t.Logf("%s: %v", dev, err)
		case errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENXIO) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOMEDIUM):
			t.Logf("%s: cannot open: %v", dev, err)
			continue
		default:
			t.Errorf("%s: %v", dev, err)
			continue
		}
		base := filepath.Base(sys)
		for _, virt := range []string{"loop", "zram", "vd", "dm-", "ram", "md"} {
			if strings.HasPrefix(base, virt) && h.Supported {
				t.Errorf("%s is virtual but reports SMART: %+v", dev, h)
			}
		}
		checked++
	}
	if checked == 0 {
		t.Skip("no block device could be opened")
	}
}

func TestReadHealthNotABlockDevice(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := ReadHealth(p)
	if !errors.Is(err, ErrUnsupported) || h.Supported || !strings.Contains(h.Reason, "not a block device") {
		t.Errorf("regular file: %+v, %v", h, err)
	}
	if _, err := ReadHealth(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestIoctlLayouts(t *testing.T) {
	t.Parallel()
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("layouts checked on 64-bit only")
	}
	if n := unsafe.Sizeof(sgIOHdr{}); n != 88 {
		t.Errorf("sizeof(sg_io_hdr) = %d, want 88", n)
	}
	if n := unsafe.Offsetof(sgIOHdr{}.usrPtr); n != 56 {
		t.Errorf("offsetof(usr_ptr) = %d, want 56", n)
	}
	if n := unsafe.Offsetof(sgIOHdr{}.info); n != 80 {
		t.Errorf("offsetof(info) = %d, want 80", n)
	}
	if n := unsafe.Sizeof(nvmePassthruCmd{}); n != 72 {
		t.Errorf("sizeof(nvme_passthru_cmd) = %d, want 72", n)
	}
	if nvmeIoctlAdminCmd != 0xc0484e41 {
		t.Errorf("NVME_IOCTL_ADMIN_CMD = %#x, want 0xc0484e41", nvmeIoctlAdminCmd)
	}
}

func TestIsUnsupportedCmd(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{unix.ENOTTY, true},
		{fmt.Errorf("x: %w", unix.EINVAL), true},
		{unix.EOPNOTSUPP, true},
		{unix.EPERM, false},
		{unix.EIO, false},
		{&sgError{status: 2, haveSense: true, sense: senseData{Key: 5, ASC: 0x20}}, true},
		{&sgError{status: 2, haveSense: true, sense: senseData{Key: 3}}, false},
		{&sgError{hostStatus: 7}, false},
		{&nvmeStatusError{status: 0x002}, true},  // invalid field
		{&nvmeStatusError{status: 0x109}, true},  // invalid log page
		{&nvmeStatusError{status: 0x281}, false}, // media error
		{errors.New("other"), false},
	} {
		if got := isUnsupportedCmd(tt.err); got != tt.want {
			t.Errorf("isUnsupportedCmd(%v) = %v, want %v", tt.err, got, tt.want)
		}
		if tt.err.Error() == "" {
			t.Errorf("%#v has an empty message", tt.err)
		}
	}
}

// TestHealthOfThisMachinesDisks classifies every block device of the machine
// from sysfs, without opening it (the build VM does not let even root open
// its root disk), and checks that devices without SMART are reported as
// such: the virtio disk, loop and zram devices of the build VM.
func TestHealthOfThisMachinesDisks(t *testing.T) {
	t.Parallel()
	names, err := filepath.Glob("/sys/block/*")
	if err != nil || len(names) == 0 {
		t.Skip("no /sys/block")
	}
	for _, sys := range names {
		real, err := filepath.EvalSymlinks(sys)
		if err != nil {
			t.Errorf("%s: %v", sys, err)
			continue
		}
		kind := classifyDevice(real)
		if kind == devNVMe || kind == devSCSI {
			t.Logf("%s: %s may have SMART; ReadHealth is the test for it", sys, real)
			continue
		}
		dev := "/dev/" + filepath.Base(sys)
		h, err := sysHealth(-1, dev, real) // the descriptor is not used for these
		if !errors.Is(err, ErrUnsupported) || h.Supported || h.Reason == "" || h != unsupportedHealth(h.Reason) {
			t.Errorf("%s (%s): %+v, %v; want unsupported with a reason and no numbers", dev, real, h, err)
			continue
		}
		t.Logf("%s: %v", dev, err)
	}
}
