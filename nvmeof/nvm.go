package nvmeof

import (
	"encoding/binary"
	"fmt"
)

// Offsets of the Read, Write, Compare and Write Zeroes fields (struct
// nvme_rw_command, struct nvme_write_zeroes_cmd).
const (
	OffsetSLBA    = 40 // slba, CDW10-11
	OffsetNLB     = 48 // length, CDW12 bits 15:0
	OffsetControl = 50 // control, CDW12 bits 31:16
	offsetDSMgmt  = 52 // dsmgmt, CDW13
	offsetRefTag  = 56 // reftag, CDW14
	offsetAppTag  = 60 // apptag, CDW15 bits 15:0
	offsetAppMask = 62 // appmask, CDW15 bits 31:16
)

// Control bits (CDW12 bits 31:16) of Read, Write, Compare and Write Zeroes
// (Linux NVME_RW_*, NVME_WZ_DEAC).
const (
	ControlLimitedRetry uint16 = 1 << 15 // NVME_RW_LR
	ControlFUA          uint16 = 1 << 14 // NVME_RW_FUA
	ControlPRACT        uint16 = 1 << 13 // NVME_RW_PRINFO_PRACT
	ControlDEAC         uint16 = 1 << 9  // NVME_WZ_DEAC (Write Zeroes: deallocate)
)

// RWCommand is a view of an SQE as a Read, Write, Compare or Write Zeroes
// command (NVM Command Set Specification; struct nvme_rw_command).
type RWCommand struct{ SQE }

// RW returns s viewed as a Read, Write, Compare or Write Zeroes command.
func (s SQE) RW() RWCommand { return RWCommand{s} }

// RWFields holds the fields of a Read, Write, Compare or Write Zeroes
// command for RWCommand.Encode.
type RWFields struct {
	// Opcode is IORead, IOWrite, IOCompare or IOWriteZeroes.
	Opcode uint8
	CID    uint16
	NSID   uint32
	// DPTR is the data pointer; Write Zeroes carries none (zero value).
	DPTR SGLFields
	// SLBA is the first logical block.
	SLBA uint64
	// NLB is the number of logical blocks, 0-based as on the wire: 0 means
	// one block.
	NLB uint16
	// Control is CDW12 bits 31:16: ControlFUA, ControlLimitedRetry,
	// ControlDEAC...
	Control uint16
	// DSM is the dataset management hints byte (CDW13 bits 7:0).
	DSM uint8
}

// SLBA returns the starting LBA (CDW10-11).
func (c RWCommand) SLBA() uint64 { return binary.LittleEndian.Uint64(c.SQE[OffsetSLBA:]) }

// NLB returns the 0-based number of logical blocks (CDW12 bits 15:0).
func (c RWCommand) NLB() uint16 { return binary.LittleEndian.Uint16(c.SQE[OffsetNLB:]) }

// Blocks returns the number of logical blocks, NLB+1.
func (c RWCommand) Blocks() uint32 { return uint32(c.NLB()) + 1 }

// Control returns CDW12 bits 31:16.
func (c RWCommand) Control() uint16 { return binary.LittleEndian.Uint16(c.SQE[OffsetControl:]) }

// FUA reports Force Unit Access.
func (c RWCommand) FUA() bool { return c.Control()&ControlFUA != 0 }

// LimitedRetry reports the Limited Retry bit.
func (c RWCommand) LimitedRetry() bool { return c.Control()&ControlLimitedRetry != 0 }

// DEAC reports the Deallocate bit of a Write Zeroes command.
func (c RWCommand) DEAC() bool { return c.Control()&ControlDEAC != 0 }

// PRINFO returns the protection information field (CDW12 bits 29:26).
func (c RWCommand) PRINFO() uint8 { return uint8(c.Control()>>10) & 0xf }

// DSM returns the dataset management hints (CDW13 bits 7:0).
func (c RWCommand) DSM() uint8 { return c.SQE[offsetDSMgmt] }

// RefTag returns the initial logical block reference tag (CDW14).
func (c RWCommand) RefTag() uint32 { return binary.LittleEndian.Uint32(c.SQE[offsetRefTag:]) }

// AppTag returns the logical block application tag (CDW15 bits 15:0).
func (c RWCommand) AppTag() uint16 { return binary.LittleEndian.Uint16(c.SQE[offsetAppTag:]) }

// AppMask returns the logical block application tag mask (CDW15 bits 31:16).
func (c RWCommand) AppMask() uint16 { return binary.LittleEndian.Uint16(c.SQE[offsetAppMask:]) }

// Encode writes all 64 bytes of the command, with PSDT 01b.
func (c RWCommand) Encode(f *RWFields) {
	c.header(f.Opcode, FlagSGLMetaBuf, f.CID, f.NSID)
	c.DPTR().Encode(&f.DPTR)
	le := binary.LittleEndian
	le.PutUint64(c.SQE[OffsetSLBA:], f.SLBA)
	le.PutUint16(c.SQE[OffsetNLB:], f.NLB)
	le.PutUint16(c.SQE[OffsetControl:], f.Control)
	c.SQE[offsetDSMgmt] = f.DSM
}

// CheckLBARange checks that blocks logical blocks from slba lie within a
// namespace of nsze blocks. Otherwise it returns a *CommandError with LBA
// Out of Range and DNR at the SLBA (NVM Command Set Specification: "the
// command references an LBA that exceeds the size of the namespace").
func CheckLBARange(slba uint64, blocks uint32, nsze uint64) error {
	if slba > nsze || uint64(blocks) > nsze-slba {
		return cmdErr(StatusLBAOutOfRange|StatusDNR, OffsetSLBA,
			fmt.Errorf("%w: LBA %d + %d blocks, namespace has %d", errLBARange, slba, blocks, nsze))
	}
	return nil
}

// Offsets of the Dataset Management fields (struct nvme_dsm_cmd).
const (
	OffsetDSMNR   = 40 // nr, CDW10 bits 7:0
	offsetDSMAttr = 44 // attributes, CDW11
)

// Dataset Management attributes, CDW11 (Linux NVME_DSMGMT_*).
const (
	DSMIntegralRead  uint32 = 1 << 0 // NVME_DSMGMT_IDR
	DSMIntegralWrite uint32 = 1 << 1 // NVME_DSMGMT_IDW
	DSMDeallocate    uint32 = 1 << 2 // NVME_DSMGMT_AD
)

// DSMRangeSize is the size of a Dataset Management range (struct
// nvme_dsm_range); MaxDSMRanges of them fit a command.
const (
	DSMRangeSize = 16
	MaxDSMRanges = 256 // NVME_DSM_MAX_RANGES
)

// DSMCommand is a view of an SQE as a Dataset Management command (struct
// nvme_dsm_cmd).
type DSMCommand struct{ SQE }

// DSM returns s viewed as a Dataset Management command.
func (s SQE) DSM() DSMCommand { return DSMCommand{s} }

// DSMFields holds the fields of a Dataset Management command.
type DSMFields struct {
	CID  uint16
	NSID uint32
	DPTR SGLFields
	// NR is the number of ranges, 0-based as on the wire.
	NR uint8
	// Attributes is CDW11: DSMDeallocate and friends.
	Attributes uint32
}

// NR returns the 0-based number of ranges (CDW10 bits 7:0).
func (c DSMCommand) NR() uint8 { return c.SQE[OffsetDSMNR] }

// Ranges returns the number of ranges, NR+1.
func (c DSMCommand) Ranges() int { return int(c.NR()) + 1 }

// DataLen returns the length of the range list the command transfers.
func (c DSMCommand) DataLen() uint32 { return uint32(c.Ranges()) * DSMRangeSize }

// Attributes returns CDW11.
func (c DSMCommand) Attributes() uint32 { return binary.LittleEndian.Uint32(c.SQE[offsetDSMAttr:]) }

// Deallocate reports the Attribute - Deallocate bit.
func (c DSMCommand) Deallocate() bool { return c.Attributes()&DSMDeallocate != 0 }

// Encode writes all 64 bytes of the command, with PSDT 01b.
func (c DSMCommand) Encode(f *DSMFields) {
	c.header(IODatasetMgmt, FlagSGLMetaBuf, f.CID, f.NSID)
	c.DPTR().Encode(&f.DPTR)
	c.SQE[OffsetDSMNR] = f.NR
	binary.LittleEndian.PutUint32(c.SQE[offsetDSMAttr:], f.Attributes)
}

// DSMRange is a view of one 16-byte Dataset Management range (struct
// nvme_dsm_range): context attributes, length, starting LBA.
type DSMRange []byte

// DSMRangeFields holds the fields of a Dataset Management range.
type DSMRangeFields struct {
	ContextAttributes uint32
	// Length is the number of logical blocks, 1-based (unlike NLB).
	Length uint32
	SLBA   uint64
}

// DSMRangeAt returns the i-th range of the range list b, checking that b
// holds it.
func DSMRangeAt(b []byte, i int) (DSMRange, error) {
	if i < 0 || i >= len(b)/DSMRangeSize {
		return nil, fmt.Errorf("%w: range %d of %d bytes", errShortDSMRange, i, len(b))
	}
	return DSMRange(b[i*DSMRangeSize : (i+1)*DSMRangeSize]), nil
}

// ContextAttributes returns the context attributes (cattr).
func (r DSMRange) ContextAttributes() uint32 { return binary.LittleEndian.Uint32(r[0:]) }

// Length returns the number of logical blocks (nlb, 1-based).
func (r DSMRange) Length() uint32 { return binary.LittleEndian.Uint32(r[4:]) }

// SLBA returns the starting LBA.
func (r DSMRange) SLBA() uint64 { return binary.LittleEndian.Uint64(r[8:]) }

// Encode writes the 16-byte range.
func (r DSMRange) Encode(f *DSMRangeFields) {
	_ = r[DSMRangeSize-1]
	binary.LittleEndian.PutUint32(r[0:], f.ContextAttributes)
	binary.LittleEndian.PutUint32(r[4:], f.Length)
	binary.LittleEndian.PutUint64(r[8:], f.SLBA)
}
