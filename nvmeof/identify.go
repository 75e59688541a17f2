package nvmeof

import (
	"encoding/binary"
	"fmt"
)

// Identify Controller field offsets (struct nvme_id_ctrl).
const (
	idcVID       = 0    // vid
	idcSSVID     = 2    // ssvid
	idcSN        = 4    // sn[20]
	idcMN        = 24   // mn[40]
	idcFR        = 64   // fr[8]
	idcRAB       = 72   // rab
	idcIEEE      = 73   // ieee[3], little endian
	idcCMIC      = 76   // cmic
	idcMDTS      = 77   // mdts
	idcCNTLID    = 78   // cntlid
	idcVER       = 80   // ver
	idcRTD3R     = 84   // rtd3r
	idcRTD3E     = 88   // rtd3e
	idcOAES      = 92   // oaes
	idcCTRATT    = 96   // ctratt
	idcCNTRLTYPE = 111  // cntrltype
	idcFGUID     = 112  // fguid[16]
	idcCRDT1     = 128  // crdt1
	idcCRDT2     = 130  // crdt2
	idcCRDT3     = 132  // crdt3
	idcOACS      = 256  // oacs
	idcACL       = 258  // acl
	idcAERL      = 259  // aerl
	idcFRMW      = 260  // frmw
	idcLPA       = 261  // lpa
	idcELPE      = 262  // elpe
	idcNPSS      = 263  // npss
	idcWCTEMP    = 266  // wctemp
	idcCCTEMP    = 268  // cctemp
	idcKAS       = 320  // kas
	idcANATT     = 342  // anatt
	idcANACAP    = 343  // anacap
	idcANAGRPMAX = 344  // anagrpmax
	idcNANAGRPID = 348  // nanagrpid
	idcSQES      = 512  // sqes
	idcCQES      = 513  // cqes
	idcMAXCMD    = 514  // maxcmd
	idcNN        = 516  // nn
	idcONCS      = 520  // oncs
	idcFUSES     = 522  // fuses
	idcFNA       = 524  // fna
	idcVWC       = 525  // vwc
	idcAWUN      = 526  // awun
	idcAWUPF     = 528  // awupf
	idcNWPC      = 531  // nwpc
	idcACWU      = 532  // acwu
	idcSGLS      = 536  // sgls
	idcMNAN      = 540  // mnan
	idcSUBNQN    = 768  // subnqn[256]
	idcIOCCSZ    = 1792 // ioccsz (fabrics)
	idcIORCSZ    = 1796 // iorcsz
	idcICDOFF    = 1800 // icdoff
	idcFCATT     = 1802 // fcatt (ctrattr in older headers)
	idcMSDBD     = 1803 // msdbd
	idcOFCS      = 1804 // ofcs
	idcDCTYPE    = 1806 // dctype
	idcPSD       = 2048 // psd[32]
	idcVS        = 3072 // vs[1024]

	powerStateSize = 32 // struct nvme_id_power_state
	maxPowerStates = 32
)

// Identify Controller CMIC bits (Linux NVME_CTRL_CMIC_*).
const (
	CMICMultiPort uint8 = 1 << 0 // NVME_CTRL_CMIC_MULTI_PORT
	CMICMultiCtrl uint8 = 1 << 1 // NVME_CTRL_CMIC_MULTI_CTRL
	CMICSRIOV     uint8 = 1 << 2
	CMICANA       uint8 = 1 << 3 // NVME_CTRL_CMIC_ANA
)

// Identify Controller CTRATT bits (Linux enum nvme_ctrl_attr).
const (
	CTRATTHostID128 uint32 = 1 << 0 // NVME_CTRL_ATTR_HID_128_BIT
	CTRATTTBKAS     uint32 = 1 << 6 // NVME_CTRL_ATTR_TBKAS: traffic based keep alive
)

// Identify Controller CNTRLTYPE values (Linux enum nvme_ctrl_type).
const (
	ControllerTypeIO        uint8 = 1 // NVME_CTRL_IO
	ControllerTypeDiscovery uint8 = 2 // NVME_CTRL_DISC
	ControllerTypeAdmin     uint8 = 3 // NVME_CTRL_ADMIN
)

// Identify Controller LPA bits.
const (
	LPASMARTPerNamespace uint8 = 1 << 0
	LPACommandEffects    uint8 = 1 << 1 // NVME_CTRL_LPA_CMD_EFFECTS_LOG
	LPAExtendedData      uint8 = 1 << 2 // Get Log Page NUMDU, LPO
)

// Identify Controller ONCS bits (Linux NVME_CTRL_ONCS_*).
const (
	ONCSCompare            uint16 = 1 << 0 // NVME_CTRL_ONCS_COMPARE
	ONCSWriteUncorrectable uint16 = 1 << 1 // NVME_CTRL_ONCS_WRITE_UNCORRECTABLE
	ONCSDSM                uint16 = 1 << 2 // NVME_CTRL_ONCS_DSM
	ONCSWriteZeroes        uint16 = 1 << 3 // NVME_CTRL_ONCS_WRITE_ZEROES
	ONCSSaveSelect         uint16 = 1 << 4
	ONCSReservations       uint16 = 1 << 5 // NVME_CTRL_ONCS_RESERVATIONS
	ONCSTimestamp          uint16 = 1 << 6 // NVME_CTRL_ONCS_TIMESTAMP
	ONCSVerify             uint16 = 1 << 7
)

// Identify Controller VWC bits.
const (
	VWCPresent uint8 = 1 << 0 // NVME_CTRL_VWC_PRESENT
	// VWCFlushBroadcast is VWC bits 2:1 = 11b: Flush with NSID FFFFFFFFh
	// is supported.
	VWCFlushBroadcast uint8 = 3 << 1
)

// Identify Controller SGLS bits (Linux NVME_CTRL_SGLS_*). The Linux
// NVMe/RDMA host refuses a controller without SGLSKeyed.
const (
	SGLSByteAligned  uint32 = 1 << 0  // NVME_CTRL_SGLS_BYTE_ALIGNED
	SGLSDwordAligned uint32 = 1 << 1  // NVME_CTRL_SGLS_DWORD_ALIGNED
	SGLSKeyed        uint32 = 1 << 2  // NVME_CTRL_SGLS_KSDBDS
	SGLSBitBucket    uint32 = 1 << 16 // bit bucket descriptor supported
	SGLSMetaSingle   uint32 = 1 << 19 // NVME_CTRL_SGLS_MSDS
	SGLSOffset       uint32 = 1 << 20 // NVME_CTRL_SGLS_SAOS: offset (in-capsule data) supported
)

// Identify Controller FRMW bits.
const (
	FRMWSlot1ReadOnly uint8 = 1 << 0
	// FRMWSlots is the number of firmware slots (bits 3:1); nvmet reports
	// one.
	FRMWSlotsShift = 1
)

// Identify Controller OFCS bits (optional fabrics commands supported).
const OFCSDisconnect uint16 = 1 << 0

// PowerState is an Identify Controller power state descriptor (struct
// nvme_id_power_state).
type PowerState struct {
	// MaxPower is in centiwatts (or 0.0001 W with the MXPS flag).
	MaxPower uint16
	// Flags holds MXPS (bit 0) and NOPS (bit 1).
	Flags uint8
	// EntryLatency and ExitLatency are in microseconds.
	EntryLatency, ExitLatency uint32
	RRT, RRL, RWT, RWL        uint8
}

// IdentifyController is the Identify Controller data structure (CNS 01h,
// struct nvme_id_ctrl), with the fields an NVMe-oF controller fills and a
// Linux host checks. Field names are the spec mnemonics; the wire form is
// 4096 bytes.
type IdentifyController struct {
	VID   uint16 // PCI vendor ID
	SSVID uint16 // PCI subsystem vendor ID
	// SN, MN and FR are printable ASCII, space padded on the wire.
	SN   string // serial number, 20 bytes
	MN   string // model number, 40 bytes
	FR   string // firmware revision, 8 bytes
	RAB  uint8  // recommended arbitration burst
	IEEE uint32 // IEEE OUI, 24 bits
	CMIC uint8  // multi-path I/O and namespace sharing: CMIC*
	// MDTS is the maximum data transfer size, 2^MDTS minimum memory pages
	// (CAP.MPSMIN); 0 means no limit.
	MDTS      uint8
	CNTLID    uint16
	VER       Version
	RTD3R     uint32
	RTD3E     uint32
	OAES      uint32 // optional asynchronous events: AENConfig*
	CTRATT    uint32 // controller attributes: CTRATT*
	CNTRLTYPE uint8  // ControllerType*
	FGUID     [16]byte
	// CRDT1..3 are the command retry delay times, in 100 ms units.
	CRDT1, CRDT2, CRDT3 uint16
	OACS                uint16 // optional admin commands
	ACL                 uint8  // abort command limit, 0-based
	AERL                uint8  // asynchronous event request limit, 0-based
	FRMW                uint8  // firmware updates
	LPA                 uint8  // log page attributes: LPA*
	ELPE                uint8  // error log page entries, 0-based
	NPSS                uint8  // number of power states, 0-based
	WCTEMP, CCTEMP      uint16 // temperature thresholds, Kelvin
	// KAS is the keep alive granularity in 100 ms units; a fabrics host
	// requires it non-zero.
	KAS       uint16
	ANATT     uint8
	ANACAP    uint8
	ANAGRPMAX uint32
	NANAGRPID uint32
	// SQES and CQES hold the required (bits 3:0) and maximum (bits 7:4)
	// entry sizes, 2^n bytes: 0x66 and 0x44.
	SQES, CQES uint8
	MAXCMD     uint16 // maximum outstanding commands per queue
	NN         uint32 // number of namespaces (highest NSID)
	ONCS       uint16 // optional NVM commands: ONCS*
	FUSES      uint16
	FNA        uint8
	VWC        uint8 // volatile write cache: VWC*
	AWUN       uint16
	AWUPF      uint16
	NWPC       uint8
	ACWU       uint16
	SGLS       uint32 // SGL support: SGLS*
	MNAN       uint32 // maximum number of allowed namespaces
	// SUBNQN is the subsystem NQN, NUL padded.
	SUBNQN string
	// IOCCSZ is the I/O queue command capsule size in 16-byte units
	// (SQE plus in-capsule data), at least 4.
	IOCCSZ uint32
	// IORCSZ is the I/O queue response capsule size in 16-byte units, at
	// least 1.
	IORCSZ uint32
	// ICDOFF is the in-capsule data offset in 16-byte units; the Linux
	// RDMA host requires 0.
	ICDOFF uint16
	FCATT  uint8  // fabrics controller attributes: bit 0 static model
	MSDBD  uint8  // maximum SGL data block descriptors per command
	OFCS   uint16 // optional fabrics commands: OFCS*
	DCTYPE uint8  // discovery controller type
	// PSD are the power state descriptors, at most 32. Parse returns NPSS+1
	// of them.
	PSD []PowerState
}

// Encode writes the 4096-byte Identify Controller data into b. It returns
// a *FieldError, writing nothing, if a string does not fit its field or SN,
// MN or FR is not printable ASCII, and an error if b is short or PSD has
// more than 32 entries.
func (c *IdentifyController) Encode(b []byte) error {
	if len(b) < IdentifySize {
		return fmt.Errorf("%w: identify controller needs %d bytes, have %d", errShortBuffer, IdentifySize, len(b))
	}
	if err := checkPadded(c.SN, 20, true); err != nil {
		return fieldErr("identify controller", "SN", idcSN, err)
	}
	if err := checkPadded(c.MN, 40, true); err != nil {
		return fieldErr("identify controller", "MN", idcMN, err)
	}
	if err := checkPadded(c.FR, 8, true); err != nil {
		return fieldErr("identify controller", "FR", idcFR, err)
	}
	if err := checkNQNField(c.SUBNQN); err != nil {
		return fieldErr("identify controller", "SUBNQN", idcSUBNQN, err)
	}
	if len(c.PSD) > maxPowerStates {
		return fieldErr("identify controller", "PSD", idcPSD,
			fmt.Errorf("%w: %d power states", errTooManyEntries, len(c.PSD)))
	}
	b = b[:IdentifySize]
	clear(b)
	le := binary.LittleEndian
	le.PutUint16(b[idcVID:], c.VID)
	le.PutUint16(b[idcSSVID:], c.SSVID)
	putPadded(b[idcSN:idcSN+20], c.SN, ' ')
	putPadded(b[idcMN:idcMN+40], c.MN, ' ')
	putPadded(b[idcFR:idcFR+8], c.FR, ' ')
	b[idcRAB] = c.RAB
	put24(b[idcIEEE:], c.IEEE)
	b[idcCMIC] = c.CMIC
	b[idcMDTS] = c.MDTS
	le.PutUint16(b[idcCNTLID:], c.CNTLID)
	le.PutUint32(b[idcVER:], uint32(c.VER))
	le.PutUint32(b[idcRTD3R:], c.RTD3R)
	le.PutUint32(b[idcRTD3E:], c.RTD3E)
	le.PutUint32(b[idcOAES:], c.OAES)
	le.PutUint32(b[idcCTRATT:], c.CTRATT)
	b[idcCNTRLTYPE] = c.CNTRLTYPE
	copy(b[idcFGUID:], c.FGUID[:])
	le.PutUint16(b[idcCRDT1:], c.CRDT1)
	le.PutUint16(b[idcCRDT2:], c.CRDT2)
	le.PutUint16(b[idcCRDT3:], c.CRDT3)
	le.PutUint16(b[idcOACS:], c.OACS)
	b[idcACL] = c.ACL
	b[idcAERL] = c.AERL
	b[idcFRMW] = c.FRMW
	b[idcLPA] = c.LPA
	b[idcELPE] = c.ELPE
	b[idcNPSS] = c.NPSS
	le.PutUint16(b[idcWCTEMP:], c.WCTEMP)
	le.PutUint16(b[idcCCTEMP:], c.CCTEMP)
	le.PutUint16(b[idcKAS:], c.KAS)
	b[idcANATT] = c.ANATT
	b[idcANACAP] = c.ANACAP
	le.PutUint32(b[idcANAGRPMAX:], c.ANAGRPMAX)
	le.PutUint32(b[idcNANAGRPID:], c.NANAGRPID)
	b[idcSQES] = c.SQES
	b[idcCQES] = c.CQES
	le.PutUint16(b[idcMAXCMD:], c.MAXCMD)
	le.PutUint32(b[idcNN:], c.NN)
	le.PutUint16(b[idcONCS:], c.ONCS)
	le.PutUint16(b[idcFUSES:], c.FUSES)
	b[idcFNA] = c.FNA
	b[idcVWC] = c.VWC
	le.PutUint16(b[idcAWUN:], c.AWUN)
	le.PutUint16(b[idcAWUPF:], c.AWUPF)
	b[idcNWPC] = c.NWPC
	le.PutUint16(b[idcACWU:], c.ACWU)
	le.PutUint32(b[idcSGLS:], c.SGLS)
	le.PutUint32(b[idcMNAN:], c.MNAN)
	copy(b[idcSUBNQN:], c.SUBNQN)
	le.PutUint32(b[idcIOCCSZ:], c.IOCCSZ)
	le.PutUint32(b[idcIORCSZ:], c.IORCSZ)
	le.PutUint16(b[idcICDOFF:], c.ICDOFF)
	b[idcFCATT] = c.FCATT
	b[idcMSDBD] = c.MSDBD
	le.PutUint16(b[idcOFCS:], c.OFCS)
	b[idcDCTYPE] = c.DCTYPE
	for i := range c.PSD {
		c.PSD[i].encode(b[idcPSD+i*powerStateSize:])
	}
	return nil
}

// ParseIdentifyController parses Identify Controller data as a host
// receives it. String fields are returned without their padding; nothing
// is validated beyond the length, so a host can report what a misbehaving
// controller sent.
func ParseIdentifyController(b []byte) (IdentifyController, error) {
	var c IdentifyController
	if len(b) < IdentifySize {
		return c, fmt.Errorf("%w: %d bytes", errShortIdentify, len(b))
	}
	le := binary.LittleEndian
	c.VID = le.Uint16(b[idcVID:])
	c.SSVID = le.Uint16(b[idcSSVID:])
	c.SN = trimField(b[idcSN : idcSN+20])
	c.MN = trimField(b[idcMN : idcMN+40])
	c.FR = trimField(b[idcFR : idcFR+8])
	c.RAB = b[idcRAB]
	c.IEEE = get24(b[idcIEEE:])
	c.CMIC = b[idcCMIC]
	c.MDTS = b[idcMDTS]
	c.CNTLID = le.Uint16(b[idcCNTLID:])
	c.VER = Version(le.Uint32(b[idcVER:]))
	c.RTD3R = le.Uint32(b[idcRTD3R:])
	c.RTD3E = le.Uint32(b[idcRTD3E:])
	c.OAES = le.Uint32(b[idcOAES:])
	c.CTRATT = le.Uint32(b[idcCTRATT:])
	c.CNTRLTYPE = b[idcCNTRLTYPE]
	copy(c.FGUID[:], b[idcFGUID:])
	c.CRDT1 = le.Uint16(b[idcCRDT1:])
	c.CRDT2 = le.Uint16(b[idcCRDT2:])
	c.CRDT3 = le.Uint16(b[idcCRDT3:])
	c.OACS = le.Uint16(b[idcOACS:])
	c.ACL = b[idcACL]
	c.AERL = b[idcAERL]
	c.FRMW = b[idcFRMW]
	c.LPA = b[idcLPA]
	c.ELPE = b[idcELPE]
	c.NPSS = b[idcNPSS]
	c.WCTEMP = le.Uint16(b[idcWCTEMP:])
	c.CCTEMP = le.Uint16(b[idcCCTEMP:])
	c.KAS = le.Uint16(b[idcKAS:])
	c.ANATT = b[idcANATT]
	c.ANACAP = b[idcANACAP]
	c.ANAGRPMAX = le.Uint32(b[idcANAGRPMAX:])
	c.NANAGRPID = le.Uint32(b[idcNANAGRPID:])
	c.SQES = b[idcSQES]
	c.CQES = b[idcCQES]
	c.MAXCMD = le.Uint16(b[idcMAXCMD:])
	c.NN = le.Uint32(b[idcNN:])
	c.ONCS = le.Uint16(b[idcONCS:])
	c.FUSES = le.Uint16(b[idcFUSES:])
	c.FNA = b[idcFNA]
	c.VWC = b[idcVWC]
	c.AWUN = le.Uint16(b[idcAWUN:])
	c.AWUPF = le.Uint16(b[idcAWUPF:])
	c.NWPC = b[idcNWPC]
	c.ACWU = le.Uint16(b[idcACWU:])
	c.SGLS = le.Uint32(b[idcSGLS:])
	c.MNAN = le.Uint32(b[idcMNAN:])
	c.SUBNQN = trimField(b[idcSUBNQN : idcSUBNQN+NQNFieldSize])
	c.IOCCSZ = le.Uint32(b[idcIOCCSZ:])
	c.IORCSZ = le.Uint32(b[idcIORCSZ:])
	c.ICDOFF = le.Uint16(b[idcICDOFF:])
	c.FCATT = b[idcFCATT]
	c.MSDBD = b[idcMSDBD]
	c.OFCS = le.Uint16(b[idcOFCS:])
	c.DCTYPE = b[idcDCTYPE]
	n := min(int(c.NPSS)+1, maxPowerStates)
	c.PSD = make([]PowerState, n)
	for i := range c.PSD {
		c.PSD[i] = parsePowerState(b[idcPSD+i*powerStateSize:])
	}
	return c, nil
}

// CheckRDMAHost applies the checks the Linux NVMe/RDMA host makes on
// Identify Controller before it uses a fabrics controller (host/core.c
// nvme_init_identify and nvme_check_ctrl_fabric_info, host/rdma.c
// nvme_rdma_setup_ctrl): CNTLID equal to the one Connect returned, KAS
// non-zero unless discovery, IOCCSZ at least 4 and IORCSZ at least 1 unless
// discovery (Linux nvmet before 6.x reports 0 for both on its discovery
// controller, and the host skips them there), MAXCMD
// non-zero, ICDOFF 0 and keyed SGL data blocks supported. A target runs it
// on what it serves; a host on what it receives. The error is a
// *FieldError for the first field that fails.
func (c *IdentifyController) CheckRDMAHost(cntlid uint16, discovery bool) error {
	const s = "identify controller"
	switch {
	case c.CNTLID != cntlid:
		return fieldErr(s, "CNTLID", idcCNTLID, fmt.Errorf("%w: %d, Connect returned %d", errIdentifyHost, c.CNTLID, cntlid))
	case !discovery && c.KAS == 0:
		return fieldErr(s, "KAS", idcKAS, fmt.Errorf("%w: keep alive support is mandatory", errIdentifyHost))
	case !discovery && c.IOCCSZ < 4:
		return fieldErr(s, "IOCCSZ", idcIOCCSZ, fmt.Errorf("%w: %d < 4", errIdentifyHost, c.IOCCSZ))
	case !discovery && c.IORCSZ < 1:
		return fieldErr(s, "IORCSZ", idcIORCSZ, fmt.Errorf("%w: %d < 1", errIdentifyHost, c.IORCSZ))
	case c.MAXCMD == 0:
		return fieldErr(s, "MAXCMD", idcMAXCMD, fmt.Errorf("%w: 0", errIdentifyHost))
	case c.ICDOFF != 0:
		return fieldErr(s, "ICDOFF", idcICDOFF, fmt.Errorf("%w: %d, the RDMA host needs 0", errIdentifyHost, c.ICDOFF))
	case c.SGLS&SGLSKeyed == 0:
		return fieldErr(s, "SGLS", idcSGLS, fmt.Errorf("%w: keyed SGL data blocks not supported", errIdentifyHost))
	}
	return nil
}

func (p *PowerState) encode(b []byte) {
	le := binary.LittleEndian
	le.PutUint16(b[0:], p.MaxPower)
	b[3] = p.Flags
	le.PutUint32(b[4:], p.EntryLatency)
	le.PutUint32(b[8:], p.ExitLatency)
	b[12], b[13], b[14], b[15] = p.RRT, p.RRL, p.RWT, p.RWL
}

func parsePowerState(b []byte) PowerState {
	le := binary.LittleEndian
	return PowerState{
		MaxPower:     le.Uint16(b[0:]),
		Flags:        b[3],
		EntryLatency: le.Uint32(b[4:]),
		ExitLatency:  le.Uint32(b[8:]),
		RRT:          b[12], RRL: b[13], RWT: b[14], RWL: b[15],
	}
}

// Identify Namespace field offsets (struct nvme_id_ns).
const (
	idnNSZE     = 0   // nsze
	idnNCAP     = 8   // ncap
	idnNUSE     = 16  // nuse
	idnNSFEAT   = 24  // nsfeat
	idnNLBAF    = 25  // nlbaf
	idnFLBAS    = 26  // flbas
	idnMC       = 27  // mc
	idnDPC      = 28  // dpc
	idnDPS      = 29  // dps
	idnNMIC     = 30  // nmic
	idnRESCAP   = 31  // rescap
	idnFPI      = 32  // fpi
	idnDLFEAT   = 33  // dlfeat
	idnNAWUN    = 34  // nawun
	idnNAWUPF   = 36  // nawupf
	idnNACWU    = 38  // nacwu
	idnNABSN    = 40  // nabsn
	idnNABO     = 42  // nabo
	idnNABSPF   = 44  // nabspf
	idnNOIOB    = 46  // noiob
	idnNVMCAP   = 48  // nvmcap[16]
	idnNPWG     = 64  // npwg
	idnNPWA     = 66  // npwa
	idnNPDG     = 68  // npdg
	idnNPDA     = 70  // npda
	idnNOWS     = 72  // nows
	idnANAGRPID = 92  // anagrpid
	idnNSATTR   = 99  // nsattr
	idnNVMSETID = 100 // nvmsetid
	idnENDGID   = 102 // endgid
	idnNGUID    = 104 // nguid[16]
	idnEUI64    = 120 // eui64[8]
	idnLBAF     = 128 // lbaf[64], 4 bytes each
	idnVS       = 384 // vs[3712]

	lbafSize      = 4 // struct nvme_lbaf
	maxLBAFormats = 64
)

// Identify Namespace NSFEAT bits (Linux NVME_NS_FEAT_*).
const (
	NSFEATThin    uint8 = 1 << 0 // NVME_NS_FEAT_THIN
	NSFEATAtomics uint8 = 1 << 1 // NVME_NS_FEAT_ATOMICS
	NSFEATDealloc uint8 = 1 << 2 // deallocated or unwritten block error supported
	NSFEATIOOpt   uint8 = 1 << 4 // NVME_NS_FEAT_IO_OPT: NPWG..NOWS valid
)

// Identify Namespace FLBAS bits (Linux NVME_NS_FLBAS_*).
const (
	FLBASIndexMask uint8 = 0x0f // NVME_NS_FLBAS_LBA_MASK
	FLBASMetaExt   uint8 = 0x10 // NVME_NS_FLBAS_META_EXT
	FLBASIndexHigh uint8 = 0x60 // NVME_NS_FLBAS_LBA_UMASK: format index bits 5:4
)

// Identify Namespace DLFEAT values: bits 2:0 say what a read of a
// deallocated block returns.
const (
	DLFEATReadNotReported uint8 = 0
	DLFEATReadZeroes      uint8 = 1
	DLFEATReadOnes        uint8 = 2
	DLFEATWriteZeroesDeac uint8 = 1 << 3 // Write Zeroes with DEAC deallocates
	DLFEATGuard           uint8 = 1 << 4
)

// Identify Namespace NMIC and NSATTR bits.
const (
	NMICShared     uint8 = 1 << 0 // NVME_NS_NMIC_SHARED
	NSATTRReadOnly uint8 = 1 << 0 // NVME_NS_ATTR_RO
)

// LBAFormat is an LBA format descriptor (struct nvme_lbaf).
type LBAFormat struct {
	// MS is the metadata size per block in bytes.
	MS uint16
	// LBADS is the LBA data size, 2^LBADS bytes (9 for 512, 12 for 4096).
	LBADS uint8
	// RP is the relative performance (bits 1:0).
	RP uint8
}

// LBAFormatIndex returns the LBA format index FLBAS selects (Linux
// nvme_lbaf_index).
func LBAFormatIndex(flbas uint8) int {
	return int(flbas&FLBASIndexMask) | int(flbas&FLBASIndexHigh)>>1
}

// IdentifyNamespace is the Identify Namespace data structure for the NVM
// command set (CNS 00h, struct nvme_id_ns). An inactive namespace is all
// zeroes.
type IdentifyNamespace struct {
	NSZE   uint64 // namespace size in logical blocks
	NCAP   uint64 // namespace capacity
	NUSE   uint64 // namespace utilization
	NSFEAT uint8  // NSFEAT*
	// NLBAF is the number of LBA formats, 0-based.
	NLBAF                      uint8
	FLBAS                      uint8 // formatted LBA size: FLBAS*
	MC                         uint8
	DPC                        uint8
	DPS                        uint8
	NMIC                       uint8
	RESCAP                     uint8
	FPI                        uint8
	DLFEAT                     uint8 // DLFEAT*
	NAWUN, NAWUPF, NACWU       uint16
	NABSN, NABO, NABSPF, NOIOB uint16
	// NVMCAP is the NVM capacity in bytes; a 128-bit field on the wire,
	// read saturating at 2^64-1.
	NVMCAP                       uint64
	NPWG, NPWA, NPDG, NPDA, NOWS uint16
	ANAGRPID                     uint32
	NSATTR                       uint8
	NVMSETID, ENDGID             uint16
	NGUID                        [16]byte
	EUI64                        [8]byte
	// LBAF are the LBA formats, at most 64. Parse returns NLBAF+1.
	LBAF []LBAFormat
}

// BlockSize returns the data size of the formatted LBA format in bytes, or
// 0 if FLBAS selects no listed format or its LBADS is outside 9..31.
func (n *IdentifyNamespace) BlockSize() uint32 {
	i := LBAFormatIndex(n.FLBAS)
	if i >= len(n.LBAF) || n.LBAF[i].LBADS < 9 || n.LBAF[i].LBADS > 31 {
		return 0
	}
	return 1 << n.LBAF[i].LBADS
}

// Encode writes the 4096-byte Identify Namespace data into b. It fails if
// b is short or LBAF has more than 64 entries.
func (n *IdentifyNamespace) Encode(b []byte) error {
	if len(b) < IdentifySize {
		return fmt.Errorf("%w: identify namespace needs %d bytes, have %d", errShortBuffer, IdentifySize, len(b))
	}
	if len(n.LBAF) > maxLBAFormats {
		return fieldErr("identify namespace", "LBAF", idnLBAF,
			fmt.Errorf("%w: %d LBA formats", errTooManyEntries, len(n.LBAF)))
	}
	b = b[:IdentifySize]
	clear(b)
	le := binary.LittleEndian
	le.PutUint64(b[idnNSZE:], n.NSZE)
	le.PutUint64(b[idnNCAP:], n.NCAP)
	le.PutUint64(b[idnNUSE:], n.NUSE)
	b[idnNSFEAT] = n.NSFEAT
	b[idnNLBAF] = n.NLBAF
	b[idnFLBAS] = n.FLBAS
	b[idnMC] = n.MC
	b[idnDPC] = n.DPC
	b[idnDPS] = n.DPS
	b[idnNMIC] = n.NMIC
	b[idnRESCAP] = n.RESCAP
	b[idnFPI] = n.FPI
	b[idnDLFEAT] = n.DLFEAT
	le.PutUint16(b[idnNAWUN:], n.NAWUN)
	le.PutUint16(b[idnNAWUPF:], n.NAWUPF)
	le.PutUint16(b[idnNACWU:], n.NACWU)
	le.PutUint16(b[idnNABSN:], n.NABSN)
	le.PutUint16(b[idnNABO:], n.NABO)
	le.PutUint16(b[idnNABSPF:], n.NABSPF)
	le.PutUint16(b[idnNOIOB:], n.NOIOB)
	le.PutUint64(b[idnNVMCAP:], n.NVMCAP)
	le.PutUint16(b[idnNPWG:], n.NPWG)
	le.PutUint16(b[idnNPWA:], n.NPWA)
	le.PutUint16(b[idnNPDG:], n.NPDG)
	le.PutUint16(b[idnNPDA:], n.NPDA)
	le.PutUint16(b[idnNOWS:], n.NOWS)
	le.PutUint32(b[idnANAGRPID:], n.ANAGRPID)
	b[idnNSATTR] = n.NSATTR
	le.PutUint16(b[idnNVMSETID:], n.NVMSETID)
	le.PutUint16(b[idnENDGID:], n.ENDGID)
	copy(b[idnNGUID:], n.NGUID[:])
	copy(b[idnEUI64:], n.EUI64[:])
	for i, f := range n.LBAF {
		o := idnLBAF + i*lbafSize
		le.PutUint16(b[o:], f.MS)
		b[o+2] = f.LBADS
		b[o+3] = f.RP & 3
	}
	return nil
}

// ParseIdentifyNamespace parses Identify Namespace data as a host receives
// it. Nothing is validated beyond the length.
func ParseIdentifyNamespace(b []byte) (IdentifyNamespace, error) {
	var n IdentifyNamespace
	if len(b) < IdentifySize {
		return n, fmt.Errorf("%w: %d bytes", errShortIdentify, len(b))
	}
	le := binary.LittleEndian
	n.NSZE = le.Uint64(b[idnNSZE:])
	n.NCAP = le.Uint64(b[idnNCAP:])
	n.NUSE = le.Uint64(b[idnNUSE:])
	n.NSFEAT = b[idnNSFEAT]
	n.NLBAF = b[idnNLBAF]
	n.FLBAS = b[idnFLBAS]
	n.MC = b[idnMC]
	n.DPC = b[idnDPC]
	n.DPS = b[idnDPS]
	n.NMIC = b[idnNMIC]
	n.RESCAP = b[idnRESCAP]
	n.FPI = b[idnFPI]
	n.DLFEAT = b[idnDLFEAT]
	n.NAWUN = le.Uint16(b[idnNAWUN:])
	n.NAWUPF = le.Uint16(b[idnNAWUPF:])
	n.NACWU = le.Uint16(b[idnNACWU:])
	n.NABSN = le.Uint16(b[idnNABSN:])
	n.NABO = le.Uint16(b[idnNABO:])
	n.NABSPF = le.Uint16(b[idnNABSPF:])
	n.NOIOB = le.Uint16(b[idnNOIOB:])
	n.NVMCAP = get128sat(b[idnNVMCAP:])
	n.NPWG = le.Uint16(b[idnNPWG:])
	n.NPWA = le.Uint16(b[idnNPWA:])
	n.NPDG = le.Uint16(b[idnNPDG:])
	n.NPDA = le.Uint16(b[idnNPDA:])
	n.NOWS = le.Uint16(b[idnNOWS:])
	n.ANAGRPID = le.Uint32(b[idnANAGRPID:])
	n.NSATTR = b[idnNSATTR]
	n.NVMSETID = le.Uint16(b[idnNVMSETID:])
	n.ENDGID = le.Uint16(b[idnENDGID:])
	copy(n.NGUID[:], b[idnNGUID:])
	copy(n.EUI64[:], b[idnEUI64:])
	n.LBAF = make([]LBAFormat, min(int(n.NLBAF)+1, maxLBAFormats))
	for i := range n.LBAF {
		o := idnLBAF + i*lbafSize
		n.LBAF[i] = LBAFormat{MS: le.Uint16(b[o:]), LBADS: b[o+2], RP: b[o+3] & 3}
	}
	return n, nil
}

// get128sat reads a little-endian 128-bit counter, saturating at 2^64-1.
func get128sat(b []byte) uint64 {
	if binary.LittleEndian.Uint64(b[8:]) != 0 {
		return ^uint64(0)
	}
	return binary.LittleEndian.Uint64(b)
}

// IdentifyControllerNVM is the I/O Command Set specific Identify Controller
// data structure for the NVM command set (CNS 06h, CSI 00h, struct
// nvme_id_ctrl_nvm). All zero means no limits reported, which is what Linux
// nvmet returns.
type IdentifyControllerNVM struct {
	VSL   uint8  // verify size limit
	WZSL  uint8  // write zeroes size limit, 2^n minimum pages
	WUSL  uint8  // write uncorrectable size limit
	DMRL  uint8  // dataset management ranges limit
	DMRSL uint32 // dataset management range size limit, blocks
	DMSL  uint64 // dataset management size limit, blocks
}

// Encode writes the 4096-byte structure into b.
func (c *IdentifyControllerNVM) Encode(b []byte) error {
	if len(b) < IdentifySize {
		return fmt.Errorf("%w: identify controller NVM needs %d bytes, have %d", errShortBuffer, IdentifySize, len(b))
	}
	clear(b[:IdentifySize])
	b[0], b[1], b[2], b[3] = c.VSL, c.WZSL, c.WUSL, c.DMRL
	binary.LittleEndian.PutUint32(b[4:], c.DMRSL)
	binary.LittleEndian.PutUint64(b[8:], c.DMSL)
	return nil
}

// ParseIdentifyControllerNVM parses the structure.
func ParseIdentifyControllerNVM(b []byte) (IdentifyControllerNVM, error) {
	if len(b) < IdentifySize {
		return IdentifyControllerNVM{}, fmt.Errorf("%w: %d bytes", errShortIdentify, len(b))
	}
	return IdentifyControllerNVM{
		VSL: b[0], WZSL: b[1], WUSL: b[2], DMRL: b[3],
		DMRSL: binary.LittleEndian.Uint32(b[4:]),
		DMSL:  binary.LittleEndian.Uint64(b[8:]),
	}, nil
}

// Namespace identification descriptor types and lengths (Linux NVME_NIDT_*).
const (
	NIDTEUI64 uint8 = 0x01 // NVME_NIDT_EUI64, 8 bytes
	NIDTNGUID uint8 = 0x02 // NVME_NIDT_NGUID, 16 bytes
	NIDTUUID  uint8 = 0x03 // NVME_NIDT_UUID, 16 bytes
	NIDTCSI   uint8 = 0x04 // NVME_NIDT_CSI, 1 byte

	nsDescHeader = 4 // struct nvme_ns_id_desc: nidt, nidl, reserved[2]
)

// NamespaceIDs is the Namespace Identification Descriptor list (CNS 03h):
// the identifiers a namespace has. A Has flag says whether the descriptor
// is present.
type NamespaceIDs struct {
	EUI64    [8]byte
	NGUID    [16]byte
	UUID     [16]byte
	CSI      uint8
	HasEUI64 bool
	HasNGUID bool
	HasUUID  bool
	HasCSI   bool
}

// Encode writes the 4096-byte descriptor list into b, in the order Linux
// nvmet uses (UUID, NGUID, then EUI-64 and CSI), zero-terminated.
func (ids *NamespaceIDs) Encode(b []byte) error {
	if len(b) < IdentifySize {
		return fmt.Errorf("%w: descriptor list needs %d bytes, have %d", errShortBuffer, IdentifySize, len(b))
	}
	clear(b[:IdentifySize])
	off := 0
	put := func(t uint8, id []byte) {
		b[off] = t
		b[off+1] = uint8(len(id))
		copy(b[off+nsDescHeader:], id)
		off += nsDescHeader + len(id)
	}
	if ids.HasUUID {
		put(NIDTUUID, ids.UUID[:])
	}
	if ids.HasNGUID {
		put(NIDTNGUID, ids.NGUID[:])
	}
	if ids.HasEUI64 {
		put(NIDTEUI64, ids.EUI64[:])
	}
	if ids.HasCSI {
		put(NIDTCSI, []byte{ids.CSI})
	}
	return nil
}

// ParseNamespaceIDs parses a Namespace Identification Descriptor list. It
// stops at a descriptor of type 0 or at the end of b, skips unknown types,
// and fails if a known type has the wrong NIDL or a descriptor runs past b
// (Linux nvme_process_ns_desc rejects the same).
func ParseNamespaceIDs(b []byte) (NamespaceIDs, error) {
	var ids NamespaceIDs
	for off := 0; off+nsDescHeader <= len(b); {
		t, l := b[off], int(b[off+1])
		if t == 0 {
			break
		}
		body := off + nsDescHeader
		if body+l > len(b) {
			return ids, fmt.Errorf("%w: type %d length %d at byte %d", errNSDescOverflow, t, l, off)
		}
		id := b[body : body+l]
		want := -1
		switch t {
		case NIDTEUI64:
			want = len(ids.EUI64)
			copy(ids.EUI64[:], id)
			ids.HasEUI64 = true
		case NIDTNGUID:
			want = len(ids.NGUID)
			copy(ids.NGUID[:], id)
			ids.HasNGUID = true
		case NIDTUUID:
			want = len(ids.UUID)
			copy(ids.UUID[:], id)
			ids.HasUUID = true
		case NIDTCSI:
			want = 1
			if l >= 1 {
				ids.CSI = id[0]
			}
			ids.HasCSI = true
		}
		if want >= 0 && l != want {
			return ids, fmt.Errorf("%w: type %d length %d, want %d", errNSDescLength, t, l, want)
		}
		off = body + l
	}
	return ids, nil
}

// MaxNSIDListEntries is the number of entries of an active namespace ID
// list (CNS 02h) or changed namespace list (log 04h): 4096/4.
const MaxNSIDListEntries = IdentifySize / 4

// EncodeNSIDList writes an Active Namespace ID list (CNS 02h) into the
// 4096 bytes of b: the NSIDs in increasing order, zero-terminated. nsids
// must be non-zero, strictly increasing and at most 1024 (the controller
// lists those above the command's NSID and stops at 1024).
func EncodeNSIDList(b []byte, nsids []uint32) error {
	if len(b) < IdentifySize {
		return fmt.Errorf("%w: namespace list needs %d bytes, have %d", errShortBuffer, IdentifySize, len(b))
	}
	if len(nsids) > MaxNSIDListEntries {
		return fmt.Errorf("%w: %d namespace IDs", errTooManyEntries, len(nsids))
	}
	var prev uint32
	for i, id := range nsids {
		if id <= prev || id == NSIDAll {
			return fmt.Errorf("%w: NSID %d after %d at entry %d", errNSIDListUnordered, id, prev, i)
		}
		prev = id
	}
	clear(b[:IdentifySize])
	for i, id := range nsids {
		binary.LittleEndian.PutUint32(b[i*4:], id)
	}
	return nil
}

// ParseNSIDList appends to dst the NSIDs of an Active Namespace ID list,
// reading up to the first zero entry, the end of b or 1024 entries. It
// fails on entries that are not strictly increasing.
func ParseNSIDList(b []byte, dst []uint32) ([]uint32, error) {
	var prev uint32
	n := min(len(b)/4, MaxNSIDListEntries)
	for i := 0; i < n; i++ {
		id := binary.LittleEndian.Uint32(b[i*4:])
		if id == 0 {
			break
		}
		if id <= prev {
			return dst, fmt.Errorf("%w: NSID %d after %d at entry %d", errNSIDListUnordered, id, prev, i)
		}
		dst = append(dst, id)
		prev = id
	}
	return dst, nil
}
