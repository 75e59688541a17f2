//go:build linux

package backstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"unsafe"

	"github.com/dswarbrick/smart/ata"
	"github.com/dswarbrick/smart/scsi"
	"golang.org/x/sys/unix"
)

// SMART transports. The command layouts, the ATA IDENTIFY and SMART page
// structures and the SG_IO constants come from github.com/dswarbrick/smart;
// the ioctls are issued here on the descriptor the disk already holds (the
// library's device type opens its own descriptor and keeps its command
// helpers unexported), and NVMe goes through the kernel's admin passthrough
// ioctl (the library's nvme package needs a module this project does not
// carry).

// ReadHealth reads the health of the block device at path, opened read-only
// and shared for the call: NVMe devices (namespaces and multipath heads) by
// the SMART / Health log page, SCSI and SAS devices by LOG SENSE, SATA
// devices by ATA SMART through SCSI/ATA Translation. Devices with no SMART
// of their own (loop, zram, device-mapper, md, virtio-blk, ...) yield a
// Health with Supported false and Reason set, and an error wrapping
// ErrUnsupported. Reading SMART needs CAP_SYS_ADMIN (NVMe) or CAP_SYS_RAWIO
// (ATA).
func ReadHealth(path string) (Health, error) {
	fd, err := openRetry(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return Health{}, fmt.Errorf("reading health: opening %s: %w", path, err)
	}
	defer unix.Close(fd)
	return deviceHealth(fd, path)
}

// deviceKind is the transport of a block device, as sysfs shows it.
type deviceKind uint8

const (
	devUnknown deviceKind = iota
	devNVMe
	devSCSI
	devVirtual
	devVirtio
)

// classifyDevice tells the transport of a block device from its resolved
// sysfs path (/sys/dev/block/MAJ:MIN followed to /sys/devices/...).
func classifyDevice(sysPath string) deviceKind {
	switch {
	case strings.Contains(sysPath, "/nvme"):
		// PCIe controllers, NVMe-oF controllers (under virtual/nvme-fabrics)
		// and multipath heads (virtual/nvme-subsystem) all answer the admin
		// passthrough ioctl.
		return devNVMe
	case strings.Contains(sysPath, "/virtual/"):
		return devVirtual
	case strings.Contains(sysPath, "/virtio"):
		return devVirtio
	case strings.Contains(sysPath, "/host") && strings.Contains(sysPath, "/target"):
		return devSCSI
	}
	return devUnknown
}

// unsupportedFor returns the Health and the error of device name, which has
// no health data for reason.
func unsupportedFor(name, reason string) (Health, error) {
	return unsupportedHealth(reason), fmt.Errorf("reading health of %s: %s: %w", name, reason, ErrUnsupported)
}

// deviceHealth reads the health of the block device open as fd.
func deviceHealth(fd int, name string) (Health, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Health{}, fmt.Errorf("reading health of %s: stat: %w", name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return unsupportedFor(name, "not a block device")
	}
	link := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	sysPath, err := filepath.EvalSymlinks(link)
	if err != nil {
		return Health{}, fmt.Errorf("reading health of %s: resolving %s: %w", name, link, err)
	}
	return sysHealth(fd, name, sysPath)
}

// sysHealth reads the health of the block device open as fd, whose resolved
// sysfs path is sysPath. Devices without SMART are told apart by sysPath
// alone, before fd is used.
func sysHealth(fd int, name, sysPath string) (Health, error) {
	switch classifyDevice(sysPath) {
	case devNVMe:
		page, err := nvmeGetLogPage(fd, nvmeSMARTLogID, nvmeSMARTLogLen)
		if err != nil {
			if isUnsupportedCmd(err) {
				return unsupportedFor(name, fmt.Sprintf("NVMe Get Log Page (SMART / Health) refused: %v", err))
			}
			return Health{}, fmt.Errorf("reading health of %s: NVMe Get Log Page (SMART / Health): %w", name, err)
		}
		h, err := parseNVMeHealth(page)
		if err != nil {
			return Health{}, fmt.Errorf("reading health of %s: %w", name, err)
		}
		return h, nil
	case devSCSI:
		h, reason, err := scsiHealth(fd)
		if err != nil {
			return Health{}, fmt.Errorf("reading health of %s: %w", name, err)
		}
		if reason != "" {
			return unsupportedFor(name, reason)
		}
		return h, nil
	case devVirtual:
		return unsupportedFor(name, fmt.Sprintf("virtual block device %s (loop, zram, device-mapper, md, ...) has no SMART data of its own", filepath.Base(sysPath)))
	case devVirtio:
		return unsupportedFor(name, fmt.Sprintf("virtio block device %s: the hypervisor passes no SMART data", filepath.Base(sysPath)))
	}
	return unsupportedFor(name, fmt.Sprintf("unknown transport for %s (no SMART reader for it)", sysPath))
}

// scsiHealth reads the health of a SCSI disk: ATA SMART for SATA disks behind
// SCSI/ATA Translation, LOG SENSE otherwise (and for SATA disks whose SMART
// fails). A non-empty reason means the device has no health data.
func scsiHealth(fd int) (Health, string, error) {
	inq, err := scsiInquiry(fd)
	if err != nil {
		if isUnsupportedCmd(err) {
			return Health{}, fmt.Sprintf("SCSI INQUIRY through SG_IO refused: %v", err), nil
		}
		return Health{}, "", fmt.Errorf("SCSI INQUIRY: %w", err)
	}
	ataReason := ""
	if string(inq.VendorIdent[:]) == "ATA     " {
		h, reason, err := ataHealth(fd)
		if err != nil {
			return Health{}, "", err
		}
		if reason == "" {
			return h, "", nil
		}
		ataReason = reason + "; "
	}
	supported, err := scsiLogSense(fd, scsiLogSupportedPages)
	if err != nil {
		if isUnsupportedCmd(err) {
			return Health{}, ataReason + fmt.Sprintf("LOG SENSE refused: %v", err), nil
		}
		return Health{}, "", fmt.Errorf("LOG SENSE (supported pages): %w", err)
	}
	_, _, list, _, err := splitLogPage(supported)
	if err != nil {
		return Health{}, "", fmt.Errorf("LOG SENSE (supported pages): %w", err)
	}
	var pages [][]byte
	for i := range len(scsiHealthPages) {
		code := scsiHealthPages[i]
		if bytes.IndexByte(list, code) < 0 {
			continue
		}
		p, err := scsiLogSense(fd, code)
		if err != nil {
			if isUnsupportedCmd(err) {
				continue
			}
			return Health{}, "", fmt.Errorf("LOG SENSE page %#02x: %w", code, err)
		}
		pages = append(pages, p)
	}
	h, err := parseSCSIHealth(pages)
	if err != nil {
		return Health{}, "", err
	}
	if !h.Supported {
		return Health{}, ataReason + h.Reason, nil
	}
	return h, "", nil
}

// SMART READ THRESHOLDS, which dswarbrick/smart/ata does not define.
const ataSmartReadThresholds = 0xd1

// ataHealth reads ATA SMART data through ATA PASS-THROUGH (16).
func ataHealth(fd int) (Health, string, error) {
	id, err := ataPassThrough(fd, ata.ATA_IDENTIFY_DEVICE, 0)
	if err != nil {
		if isUnsupportedCmd(err) {
			return Health{}, fmt.Sprintf("ATA IDENTIFY through SAT refused: %v", err), nil
		}
		return Health{}, "", fmt.Errorf("ATA IDENTIFY DEVICE: %w", err)
	}
	if len(id) < ataSectorLen {
		return Health{}, "", fmt.Errorf("ATA IDENTIFY DEVICE returned %d bytes", len(id))
	}
	var ident ata.IdentifyDeviceData
	if err := binary.Read(bytes.NewReader(id), binary.LittleEndian, &ident); err != nil {
		return Health{}, "", fmt.Errorf("decoding ATA IDENTIFY DEVICE: %w", err)
	}
	word82 := binary.LittleEndian.Uint16(id[164:166])
	if word82 == 0xffff || word82&1 == 0 {
		return Health{}, fmt.Sprintf("ATA device %q has no SMART feature set", bytes.TrimSpace(ident.ModelNumber())), nil
	}
	if ident.Word85&1 == 0 {
		return Health{}, fmt.Sprintf("SMART is disabled on ATA device %q", bytes.TrimSpace(ident.ModelNumber())), nil
	}
	data, err := ataPassThrough(fd, ata.ATA_SMART, ata.SMART_READ_DATA)
	if err != nil {
		if isUnsupportedCmd(err) {
			return Health{}, fmt.Sprintf("SMART READ DATA refused: %v", err), nil
		}
		return Health{}, "", fmt.Errorf("SMART READ DATA: %w", err)
	}
	in := ataInput{data: data, sectorSize: ataLogicalSectorSize(id)}
	if thr, err := ataPassThrough(fd, ata.ATA_SMART, ataSmartReadThresholds); err == nil {
		in.thresholds = thr // obsolete since ACS-3 but widely kept; without it no warnings are judged
	}
	for i := range len(ataDevStatPages) {
		if p, err := ataReadLogExt(fd, ataLogDeviceStats, ataDevStatPages[i]); err == nil {
			in.devStats = append(in.devStats, p)
		}
	}
	h, err := parseATAHealth(in)
	if err != nil {
		return Health{}, "", err
	}
	return h, "", nil
}

// ataLogicalSectorSize returns the logical sector size from IDENTIFY DEVICE
// data (words 106 and 117-118), 512 when not reported.
func ataLogicalSectorSize(id []byte) int {
	w106 := binary.LittleEndian.Uint16(id[212:214])
	if w106&0xc000 != 0x4000 || w106&(1<<12) == 0 {
		return 512
	}
	words := binary.LittleEndian.Uint32(id[234:238])
	if words < 256 || words > 1<<15 {
		return 512
	}
	return int(words) * 2
}

// ataReadLogExt reads one page of a general purpose log with READ LOG EXT, a
// 48-bit command.
func ataReadLogExt(fd int, log, page byte) ([]byte, error) {
	const ataReadLogExtCmd = 0x2f
	cdb := scsi.CDB16{scsi.SCSI_ATA_PASSTHRU_16}
	cdb[1] = 0x09 // protocol 4 (PIO data-in) << 1 | EXTEND
	cdb[2] = 0x0e
	cdb[6] = 1     // one page
	cdb[8] = log   // LBA 7:0: log address
	cdb[10] = page // LBA 15:8: page number
	cdb[14] = ataReadLogExtCmd
	return sgIO(fd, cdb[:], ataSectorLen)
}

// ataPassThrough issues a PIO data-in ATA command returning one sector, the
// way dswarbrick/smart's SATDevice does.
func ataPassThrough(fd int, command, feature byte) ([]byte, error) {
	cdb := scsi.CDB16{scsi.SCSI_ATA_PASSTHRU_16}
	cdb[1] = 0x08 // protocol 4 (PIO data-in) << 1
	cdb[2] = 0x0e // T_DIR in, BYT_BLOK, T_LENGTH in the sector count
	cdb[4] = feature
	cdb[6] = 1 // one sector
	if command == ata.ATA_SMART {
		cdb[10], cdb[12] = 0x4f, 0xc2 // SMART signature in LBA mid/high
	}
	cdb[14] = command
	return sgIO(fd, cdb[:], ataSectorLen)
}

func scsiInquiry(fd int) (scsi.InquiryResponse, error) {
	var inq scsi.InquiryResponse
	cdb := scsi.CDB6{scsi.SCSI_INQUIRY}
	binary.BigEndian.PutUint16(cdb[3:], scsi.INQ_REPLY_LEN)
	resp, err := sgIO(fd, cdb[:], scsi.INQ_REPLY_LEN)
	if err != nil {
		return inq, err
	}
	if len(resp) < scsi.INQ_REPLY_LEN {
		return inq, fmt.Errorf("INQUIRY returned %d bytes", len(resp))
	}
	if err := binary.Read(bytes.NewReader(resp), binary.BigEndian, &inq); err != nil {
		return inq, fmt.Errorf("decoding INQUIRY: %w", err)
	}
	return inq, nil
}

// scsiLogSense reads the cumulative values of a log page with LOG SENSE (10).
func scsiLogSense(fd int, page byte) ([]byte, error) {
	const alloc = 4096
	cdb := [10]byte{0x4d, 0, 1<<6 | page&0x3f}
	binary.BigEndian.PutUint16(cdb[7:], alloc)
	return sgIO(fd, cdb[:], alloc)
}

// sg_io_hdr from <scsi/sg.h>. Pointers are typed unsafe.Pointer so that the
// garbage collector sees them and the layout matches C on every
// architecture.
type sgIOHdr struct {
	interfaceID    int32
	dxferDirection int32
	cmdLen         uint8
	mxSbLen        uint8
	iovecCount     uint16
	dxferLen       uint32
	dxferp         unsafe.Pointer
	cmdp           unsafe.Pointer
	sbp            unsafe.Pointer
	timeout        uint32
	flags          uint32
	packID         int32
	usrPtr         unsafe.Pointer
	status         uint8
	maskedStatus   uint8
	msgStatus      uint8
	sbLenWr        uint8
	hostStatus     uint16
	driverStatus   uint16
	resid          int32
	duration       uint32
	info           uint32
}

const (
	sgInfoOKMask = 0x1
	senseLen     = 32
)

// sgError is a SCSI command that completed with an error status.
type sgError struct {
	status       uint8
	hostStatus   uint16
	driverStatus uint16
	sense        senseData
	haveSense    bool
}

// Error describes the SCSI status and the sense data.
func (e *sgError) Error() string {
	s := fmt.Sprintf("SCSI status %#02x, host status %#02x, driver status %#02x", e.status, e.hostStatus, e.driverStatus)
	if e.haveSense {
		s += fmt.Sprintf(", sense key %#x, ASC/ASCQ %02xh/%02xh", e.sense.Key, e.sense.ASC, e.sense.ASCQ)
	}
	return s
}

// sgIO sends a data-in SCSI command and returns the bytes the device
// transferred.
func sgIO(fd int, cdb []byte, n int) ([]byte, error) {
	buf := make([]byte, n)
	sense := make([]byte, senseLen)
	hdr := &sgIOHdr{
		interfaceID:    'S',
		dxferDirection: scsi.SG_DXFER_FROM_DEV,
		cmdLen:         uint8(len(cdb)),
		mxSbLen:        senseLen,
		dxferLen:       uint32(n),
		dxferp:         unsafe.Pointer(unsafe.SliceData(buf)),
		cmdp:           unsafe.Pointer(unsafe.SliceData(cdb)),
		sbp:            unsafe.Pointer(unsafe.SliceData(sense)),
		timeout:        scsi.DEFAULT_TIMEOUT,
	}
	for {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), scsi.SG_IO, uintptr(unsafe.Pointer(hdr)))
		runtime.KeepAlive(cdb)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return nil, e
		}
		break
	}
	if hdr.info&sgInfoOKMask != 0 || hdr.status != 0 || hdr.hostStatus != 0 || hdr.driverStatus != 0 {
		e := &sgError{status: hdr.status, hostStatus: hdr.hostStatus, driverStatus: hdr.driverStatus}
		e.sense, e.haveSense = parseSense(sense[:min(int(hdr.sbLenWr), senseLen)])
		return nil, e
	}
	got := n - int(hdr.resid)
	if got < 0 || got > n {
		got = n
	}
	return buf[:got], nil
}

// nvme_passthru_cmd from <linux/nvme_ioctl.h> (72 bytes).
type nvmePassthruCmd struct {
	opcode      uint8
	flags       uint8
	rsvd1       uint16
	nsid        uint32
	cdw2        uint32
	cdw3        uint32
	metadata    uint64
	addr        uint64
	metadataLen uint32
	dataLen     uint32
	cdw10       uint32
	cdw11       uint32
	cdw12       uint32
	cdw13       uint32
	cdw14       uint32
	cdw15       uint32
	timeoutMs   uint32
	result      uint32
}

const (
	// NVME_IOCTL_ADMIN_CMD = _IOWR('N', 0x41, struct nvme_admin_cmd).
	nvmeIoctlAdminCmd  = 3<<30 | uintptr(unsafe.Sizeof(nvmePassthruCmd{}))<<16 | 'N'<<8 | 0x41
	nvmeAdminGetLogPg  = 0x02
	nvmeNSIDController = 0xffffffff
	nvmeTimeoutMs      = 20000
)

// nvmeStatusError is an NVMe command that completed with an error status.
type nvmeStatusError struct {
	status uint16 // status code type << 8 | status code
}

// Error describes the NVMe status.
func (e *nvmeStatusError) Error() string {
	return fmt.Sprintf("NVMe status type %#x, code %#02x", e.status>>8&7, e.status&0xff)
}

// nvmeGetLogPage reads n bytes (a multiple of 4) of a controller-wide log
// page through the admin passthrough ioctl.
func nvmeGetLogPage(fd int, lid uint8, n int) ([]byte, error) {
	buf := newHeapBuf(n)
	cmd := &nvmePassthruCmd{
		opcode:    nvmeAdminGetLogPg,
		nsid:      nvmeNSIDController,
		addr:      uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))),
		dataLen:   uint32(n),
		cdw10:     uint32(lid) | uint32(n/4-1)<<16, // LID, NUMDL
		timeoutMs: nvmeTimeoutMs,
	}
	var (
		r uintptr
		e unix.Errno
	)
	for {
		r, _, e = unix.Syscall(unix.SYS_IOCTL, uintptr(fd), nvmeIoctlAdminCmd, uintptr(unsafe.Pointer(cmd)))
		if e != unix.EINTR {
			break
		}
	}
	runtime.KeepAlive(buf)
	if e != 0 {
		return nil, e
	}
	if r != 0 {
		return nil, &nvmeStatusError{status: uint16(r)}
	}
	return buf, nil
}

// newHeapBuf returns a buffer on the heap (it escapes through the result),
// where it does not move while the kernel writes to it through an address
// that the garbage collector does not know about.
//
//go:noinline
func newHeapBuf(n int) []byte { return make([]byte, n) }

// isUnsupportedCmd reports whether err means that the device or its driver
// does not implement the command, as opposed to a failure worth reporting.
func isUnsupportedCmd(err error) bool {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return errno == unix.ENOTTY || errno == unix.EINVAL || errno == unix.EOPNOTSUPP || errno == unix.ENOSYS
	}
	var sg *sgError
	if errors.As(err, &sg) {
		return sg.haveSense && sg.sense.Key == 0x05 // ILLEGAL REQUEST
	}
	var ns *nvmeStatusError
	if errors.As(err, &ns) {
		sct, sc := ns.status>>8&7, ns.status&0xff
		return sct == 0 && (sc == 0x01 || sc == 0x02) || sct == 1 && sc == 0x09 // invalid opcode/field, invalid log page
	}
	return false
}
