package nvmeof

import "strconv"

// Property offsets: the controller registers a Fabrics host reads and writes
// with Property Get/Set (Linux NVME_REG_*; NVMe over Fabrics, Properties).
const (
	PropCAP  uint32 = 0x00 // NVME_REG_CAP, 8 bytes
	PropVS   uint32 = 0x08 // NVME_REG_VS
	PropCC   uint32 = 0x14 // NVME_REG_CC
	PropCSTS uint32 = 0x1c // NVME_REG_CSTS
	PropNSSR uint32 = 0x20 // NVME_REG_NSSR
)

// PropertySize returns the size in bytes of the property at off: 8 for
// CAP, 4 for the others.
func PropertySize(off uint32) int {
	if off == PropCAP {
		return 8
	}
	return 4
}

// CAP is the Controller Capabilities property.
type CAP uint64

// CAPFields holds the fields of CAP for MakeCAP.
type CAPFields struct {
	// MQES is the maximum queue entries supported, 0-based.
	MQES uint16
	// CQR is Contiguous Queues Required (always set on fabrics).
	CQR bool
	// AMS is the arbitration mechanisms supported bitmap (bits 18:17).
	AMS uint8
	// TO is the worst-case CC.EN transition time in 500 ms units.
	TO uint8
	// DSTRD is the doorbell stride (0 on fabrics).
	DSTRD uint8
	// NSSRS is NVM Subsystem Reset Supported.
	NSSRS bool
	// CSS is the command sets supported bitmap (bits 44:37): CAPCSSNVM,
	// CAPCSSIOCS.
	CSS uint8
	// MPSMIN and MPSMAX bound the memory page size, 2^(12+n) bytes.
	MPSMIN, MPSMAX uint8
}

// CAP.CSS bits (Linux NVME_CAP_CSS_*).
const (
	CAPCSSNVM  uint8 = 1 << 0 // NVM command set
	CAPCSSIOCS uint8 = 1 << 6 // one or more I/O command sets (NVME_CAP_CSS_CSI)
)

// MakeCAP builds a CAP value.
func MakeCAP(f CAPFields) CAP {
	v := uint64(f.MQES) | uint64(f.AMS&3)<<17 | uint64(f.TO)<<24 | uint64(f.DSTRD&0xf)<<32 |
		uint64(f.CSS)<<37 | uint64(f.MPSMIN&0xf)<<48 | uint64(f.MPSMAX&0xf)<<52
	if f.CQR {
		v |= 1 << 16
	}
	if f.NSSRS {
		v |= 1 << 36
	}
	return CAP(v)
}

// MQES returns the 0-based maximum queue entries (NVME_CAP_MQES).
func (c CAP) MQES() uint16 { return uint16(c) }

// CQR reports Contiguous Queues Required.
func (c CAP) CQR() bool { return c>>16&1 != 0 }

// AMS returns the arbitration mechanisms supported.
func (c CAP) AMS() uint8 { return uint8(c>>17) & 3 }

// TO returns the timeout in 500 ms units (NVME_CAP_TIMEOUT).
func (c CAP) TO() uint8 { return uint8(c >> 24) }

// DSTRD returns the doorbell stride (NVME_CAP_STRIDE).
func (c CAP) DSTRD() uint8 { return uint8(c>>32) & 0xf }

// NSSRS reports NVM Subsystem Reset Supported (NVME_CAP_NSSRC).
func (c CAP) NSSRS() bool { return c>>36&1 != 0 }

// CSS returns the command sets supported (NVME_CAP_CSS).
func (c CAP) CSS() uint8 { return uint8(c >> 37) }

// MPSMIN returns the minimum memory page size exponent (NVME_CAP_MPSMIN).
func (c CAP) MPSMIN() uint8 { return uint8(c>>48) & 0xf }

// MPSMAX returns the maximum memory page size exponent (NVME_CAP_MPSMAX).
func (c CAP) MPSMAX() uint8 { return uint8(c>>52) & 0xf }

// Fields unpacks c.
func (c CAP) Fields() CAPFields {
	return CAPFields{MQES: c.MQES(), CQR: c.CQR(), AMS: c.AMS(), TO: c.TO(), DSTRD: c.DSTRD(),
		NSSRS: c.NSSRS(), CSS: c.CSS(), MPSMIN: c.MPSMIN(), MPSMAX: c.MPSMAX()}
}

// Version is the Version property and Identify Controller VER:
// major << 16 | minor << 8 | tertiary (NVME_VS).
type Version uint32

// MakeVersion builds a Version.
func MakeVersion(major uint16, minor, tertiary uint8) Version {
	return Version(uint32(major)<<16 | uint32(minor)<<8 | uint32(tertiary))
}

// Major returns the major version (NVME_MAJOR).
func (v Version) Major() uint16 { return uint16(v >> 16) }

// Minor returns the minor version (NVME_MINOR).
func (v Version) Minor() uint8 { return uint8(v >> 8) }

// Tertiary returns the tertiary version (NVME_TERTIARY).
func (v Version) Tertiary() uint8 { return uint8(v) }

// String formats v as "1.4.0".
func (v Version) String() string {
	return strconv.Itoa(int(v.Major())) + "." + strconv.Itoa(int(v.Minor())) + "." + strconv.Itoa(int(v.Tertiary()))
}

// CC is the Controller Configuration property.
type CC uint32

// CC fields and values (Linux NVME_CC_*).
const (
	CCEnable CC = 1 << 0 // NVME_CC_ENABLE
	CCCRIME  CC = 1 << 24

	CCShutdownNone   uint8 = 0 // NVME_CC_SHN_NONE
	CCShutdownNormal uint8 = 1 // NVME_CC_SHN_NORMAL
	CCShutdownAbrupt uint8 = 2 // NVME_CC_SHN_ABRUPT

	CCCSSNVM  uint8 = 0 // NVME_CC_CSS_NVM
	CCCSSCSI  uint8 = 6 // NVME_CC_CSS_CSI: all supported I/O command sets
	CCCSSNone uint8 = 7 // admin command set only
)

// CCFields holds the fields of CC for MakeCC.
type CCFields struct {
	EN bool
	// CSS is the I/O command set selected (bits 6:4).
	CSS uint8
	// MPS is the memory page size, 2^(12+MPS) bytes (bits 10:7).
	MPS uint8
	// AMS is the arbitration mechanism selected (bits 13:11).
	AMS uint8
	// SHN is the shutdown notification (bits 15:14).
	SHN uint8
	// IOSQES and IOCQES are the I/O queue entry sizes, 2^n bytes (6 and
	// 4 for NVMe over Fabrics).
	IOSQES, IOCQES uint8
	CRIME          bool
}

// MakeCC builds a CC value.
func MakeCC(f CCFields) CC {
	v := CC(f.CSS&7)<<4 | CC(f.MPS&0xf)<<7 | CC(f.AMS&7)<<11 | CC(f.SHN&3)<<14 |
		CC(f.IOSQES&0xf)<<16 | CC(f.IOCQES&0xf)<<20
	if f.EN {
		v |= CCEnable
	}
	if f.CRIME {
		v |= CCCRIME
	}
	return v
}

// EN reports Enable.
func (c CC) EN() bool { return c&CCEnable != 0 }

// CSS returns the I/O command set selected.
func (c CC) CSS() uint8 { return uint8(c>>4) & 7 }

// MPS returns the memory page size exponent.
func (c CC) MPS() uint8 { return uint8(c>>7) & 0xf }

// AMS returns the arbitration mechanism selected.
func (c CC) AMS() uint8 { return uint8(c>>11) & 7 }

// SHN returns the shutdown notification.
func (c CC) SHN() uint8 { return uint8(c>>14) & 3 }

// IOSQES returns the I/O submission queue entry size exponent.
func (c CC) IOSQES() uint8 { return uint8(c>>16) & 0xf }

// IOCQES returns the I/O completion queue entry size exponent.
func (c CC) IOCQES() uint8 { return uint8(c>>20) & 0xf }

// CRIME reports Controller Ready Independent of Media Enable.
func (c CC) CRIME() bool { return c&CCCRIME != 0 }

// Fields unpacks c.
func (c CC) Fields() CCFields {
	return CCFields{EN: c.EN(), CSS: c.CSS(), MPS: c.MPS(), AMS: c.AMS(), SHN: c.SHN(),
		IOSQES: c.IOSQES(), IOCQES: c.IOCQES(), CRIME: c.CRIME()}
}

// CSTS is the Controller Status property.
type CSTS uint32

// CSTS bits and shutdown states (Linux NVME_CSTS_*).
const (
	CSTSReady CSTS = 1 << 0 // NVME_CSTS_RDY
	CSTSFatal CSTS = 1 << 1 // NVME_CSTS_CFS
	CSTSNSSRO CSTS = 1 << 4 // NVME_CSTS_NSSRO
	CSTSPP    CSTS = 1 << 5 // NVME_CSTS_PP

	ShutdownStatusNormal    uint8 = 0 // NVME_CSTS_SHST_NORMAL: normal operation
	ShutdownStatusOccurring uint8 = 1 // NVME_CSTS_SHST_OCCUR
	ShutdownStatusComplete  uint8 = 2 // NVME_CSTS_SHST_CMPLT
)

// RDY reports Ready.
func (c CSTS) RDY() bool { return c&CSTSReady != 0 }

// CFS reports Controller Fatal Status.
func (c CSTS) CFS() bool { return c&CSTSFatal != 0 }

// SHST returns the shutdown status (bits 3:2).
func (c CSTS) SHST() uint8 { return uint8(c>>2) & 3 }

// WithSHST returns c with the shutdown status set to s.
func (c CSTS) WithSHST(s uint8) CSTS { return c&^(3<<2) | CSTS(s&3)<<2 }
