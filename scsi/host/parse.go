package host

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/rdisk/rdisk/scsi"
)

// VPD page codes the probe reads.
const (
	vpdBlockLimits  = 0xb0
	vpdProvisioning = 0xb2
)

// Allocation lengths the probe asks for.
const (
	// InquiryLen is the standard INQUIRY data asked for (SPC-4 6.6.2).
	InquiryLen = 96
	// BlockLimitsLen is the block limits VPD page length (SBC-3 6.5.3).
	BlockLimitsLen = 64
	// ProvisioningLen is the logical block provisioning VPD page length
	// without provisioning group descriptors (SBC-3 6.5.4).
	ProvisioningLen = 8
	// ReadCapacity16Len is the READ CAPACITY(16) parameter data length.
	ReadCapacity16Len = 32
	// ModeSense6Len is what the probe reads of MODE SENSE(6): the header.
	ModeSense6Len = 4
)

// InquiryData is the standard INQUIRY data of a logical unit.
type InquiryData struct {
	// PeripheralQualifier 0 is a connected LU, 3 no LU at this LUN.
	PeripheralQualifier uint8
	// DeviceType 0 is a direct-access block device (SBC).
	DeviceType uint8
	Removable  bool
	// Version is the SPC version the LU claims (6: SPC-4).
	Version uint8
	// TPGS is the target port group support field (SPC-5 6.7.2): 0 no
	// ALUA, 1 implicit, 2 explicit, 3 both.
	TPGS                      uint8
	Vendor, Product, Revision string
}

// ParseInquiry decodes standard INQUIRY data (at least the 36 bytes SPC-4
// requires; identity fields beyond what arrived are empty).
func ParseInquiry(b []byte) (InquiryData, error) {
	if len(b) < 5 {
		return InquiryData{}, fmt.Errorf("%s: %d bytes: %w", NameInquiry, len(b), ErrShortData)
	}
	b = b[:min(len(b), 5+int(b[4]))]
	field := func(from, to int) string {
		if from >= len(b) {
			return ""
		}
		return strings.TrimRight(string(b[from:min(to, len(b))]), " \x00")
	}
	d := InquiryData{
		PeripheralQualifier: b[0] >> 5, DeviceType: b[0] & 0x1f, Removable: b[1]&0x80 != 0, Version: b[2],
		Vendor: field(8, 16), Product: field(16, 32), Revision: field(32, 36),
	}
	if len(b) > 5 {
		d.TPGS = b[5] >> 4 & 3
	}
	return d, nil
}

// Capacity is the READ CAPACITY(16) parameter data (SBC-3 5.16.2).
type Capacity struct {
	// Blocks is the RETURNED LOGICAL BLOCK ADDRESS plus one.
	Blocks uint64
	// BlockSize is the LOGICAL BLOCK LENGTH IN BYTES.
	BlockSize int
	// PhysicalBlockExp is the LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT.
	PhysicalBlockExp uint8
	// LBPME: logical block provisioning management is enabled (the LU is
	// thin provisioned and may support UNMAP). LBPRZ: unmapped blocks
	// read as zeroes.
	LBPME, LBPRZ bool
}

// ParseReadCapacity16 decodes READ CAPACITY(16) parameter data. The
// provisioning bits count only when the bytes arrived.
func ParseReadCapacity16(b []byte) (Capacity, error) {
	if len(b) < 12 {
		return Capacity{}, fmt.Errorf("%s: %d bytes: %w", NameReadCapacity16, len(b), ErrShortData)
	}
	last := binary.BigEndian.Uint64(b[0:8])
	if last == ^uint64(0) {
		return Capacity{}, fmt.Errorf("%s: last LBA %#x: %w", NameReadCapacity16, last, ErrGeometry)
	}
	c := Capacity{Blocks: last + 1, BlockSize: int(binary.BigEndian.Uint32(b[8:12]))}
	if len(b) > 13 {
		c.PhysicalBlockExp = b[13] & 0x0f
	}
	if len(b) > 14 {
		c.LBPME, c.LBPRZ = b[14]&0x80 != 0, b[14]&0x40 != 0
	}
	return c, nil
}

// vpdPage returns VPD page code in b, cut to its PAGE LENGTH.
func vpdPage(b []byte, code uint8, name string) ([]byte, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%s: %d bytes: %w", name, len(b), ErrShortData)
	}
	if b[1] != code {
		return nil, fmt.Errorf("%s: page %02xh: %w", name, b[1], ErrPageCode)
	}
	return b[:min(len(b), 4+int(binary.BigEndian.Uint16(b[2:4])))], nil
}

// u32At and u64At read a big-endian field that may lie beyond a page
// shorter than the current format (older SBC revisions): absent is zero.
func u32At(p []byte, off int) uint32 {
	if off+4 > len(p) {
		return 0
	}
	return binary.BigEndian.Uint32(p[off:])
}

func u64At(p []byte, off int) uint64 {
	if off+8 > len(p) {
		return 0
	}
	return binary.BigEndian.Uint64(p[off:])
}

// BlockLimits is the block limits VPD page (B0h, SBC-3 6.5.3). Counts are
// in logical blocks; zero means "not reported" (no limit), as do fields
// beyond the page length the LU returned.
type BlockLimits struct {
	// WSNZ: WRITE SAME with NUMBER OF LOGICAL BLOCKS zero is refused.
	WSNZ                     bool
	MaxCompareAndWriteBlocks uint8
	OptimalGranularityBlocks uint16
	MaxTransferBlocks        uint32
	OptimalTransferBlocks    uint32
	// MaxUnmapLBACount and MaxUnmapDescriptors bound one UNMAP command;
	// zero means UNMAP is not supported, 0xFFFFFFFF no limit.
	MaxUnmapLBACount    uint32
	MaxUnmapDescriptors uint32
	UnmapGranularity    uint32
	// MaxWriteSameBlocks is the MAXIMUM WRITE SAME LENGTH.
	MaxWriteSameBlocks uint64
}

// ParseBlockLimits decodes the block limits VPD page.
func ParseBlockLimits(b []byte) (BlockLimits, error) {
	p, err := vpdPage(b, vpdBlockLimits, NameBlockLimits)
	if err != nil {
		return BlockLimits{}, err
	}
	var l BlockLimits
	if len(p) > 4 {
		l.WSNZ = p[4]&0x01 != 0
	}
	if len(p) > 5 {
		l.MaxCompareAndWriteBlocks = p[5]
	}
	if len(p) >= 8 {
		l.OptimalGranularityBlocks = binary.BigEndian.Uint16(p[6:8])
	}
	l.MaxTransferBlocks = u32At(p, 8)
	l.OptimalTransferBlocks = u32At(p, 12)
	l.MaxUnmapLBACount = u32At(p, 20)
	l.MaxUnmapDescriptors = u32At(p, 24)
	l.UnmapGranularity = u32At(p, 28)
	l.MaxWriteSameBlocks = u64At(p, 36)
	return l, nil
}

// Provisioning is the logical block provisioning VPD page (B2h, SBC-3
// 6.5.4).
type Provisioning struct {
	ThresholdExponent uint8
	// LBPU: UNMAP is supported. LBPWS, LBPWS10: WRITE SAME(16) and
	// WRITE SAME(10) with the UNMAP bit are. LBPRZ: unmapped blocks read
	// as zeroes (the LBPRZ field of SBC-4, non-zero).
	LBPU, LBPWS, LBPWS10, LBPRZ bool
	// ANCSup: anchored LBAs are supported; DP: a provisioning group
	// descriptor follows.
	ANCSup, DP bool
	// Type is the PROVISIONING TYPE: 0 fully provisioned or unknown, 1
	// resource provisioned, 2 thin provisioned.
	Type uint8
}

// ParseProvisioning decodes the logical block provisioning VPD page.
func ParseProvisioning(b []byte) (Provisioning, error) {
	p, err := vpdPage(b, vpdProvisioning, NameProvisioning)
	if err != nil {
		return Provisioning{}, err
	}
	var v Provisioning
	if len(p) > 4 {
		v.ThresholdExponent = p[4]
	}
	if len(p) > 5 {
		f := p[5]
		v.LBPU, v.LBPWS, v.LBPWS10, v.LBPRZ = f&0x80 != 0, f&0x40 != 0, f&0x20 != 0, f&0x1c != 0
		v.ANCSup, v.DP = f&0x02 != 0, f&0x01 != 0
	}
	if len(p) > 6 {
		v.Type = p[6] & 0x07
	}
	return v, nil
}

// ModeHeader is the DEVICE-SPECIFIC PARAMETER of a direct-access block
// device's mode parameter header (SBC-3 6.4.1).
type ModeHeader struct {
	// WriteProtected is WP: the medium is write protected.
	WriteProtected bool
	// DPOFUA: the DPO and FUA bits are supported.
	DPOFUA bool
}

// ParseModeSense6 decodes the device-specific parameter of MODE SENSE(6)
// data (mode parameter header byte 2).
func ParseModeSense6(b []byte) (ModeHeader, error) {
	if len(b) < 3 {
		return ModeHeader{}, fmt.Errorf("%s: %d bytes: %w", NameModeSense6, len(b), ErrShortData)
	}
	return ModeHeader{WriteProtected: b[2]&0x80 != 0, DPOFUA: b[2]&0x10 != 0}, nil
}

// ParseReportLUNs decodes REPORT LUNS parameter data: the LUN numbers of
// the entries that arrived (entries in addressing methods scsi.DecodeLUN
// does not know are skipped) and the LUN LIST LENGTH, which tells whether
// a longer allocation would return more (listLen > len(b)-8).
func ParseReportLUNs(b []byte) (luns []uint64, listLen int, err error) {
	if len(b) < 8 {
		return nil, 0, fmt.Errorf("%s: %d bytes: %w", NameReportLUNs, len(b), ErrShortData)
	}
	listLen = int(binary.BigEndian.Uint32(b[0:4]))
	end := 8 + min(listLen, len(b)-8)
	for p := 8; p+8 <= end; p += 8 {
		if l, err := scsi.DecodeLUN([8]byte(b[p : p+8])); err == nil {
			luns = append(luns, l)
		}
	}
	return luns, listLen, nil
}
