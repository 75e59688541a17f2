package scsi

import "encoding/binary"

// Operation codes (SPC-4 annex D, SBC-3 table 14).
const (
	OpTestUnitReady         = 0x00
	OpRequestSense          = 0x03
	OpRead6                 = 0x08
	OpWrite6                = 0x0a
	OpInquiry               = 0x12
	OpModeSelect6           = 0x15
	OpReserve6              = 0x16
	OpRelease6              = 0x17
	OpModeSense6            = 0x1a
	OpStartStopUnit         = 0x1b
	OpPreventAllow          = 0x1e
	OpReadCapacity10        = 0x25
	OpRead10                = 0x28
	OpWrite10               = 0x2a
	OpWriteVerify10         = 0x2e
	OpVerify10              = 0x2f
	OpPrefetch10            = 0x34
	OpReadDefectData10      = 0x37
	OpSyncCache10           = 0x35
	OpWriteSame10           = 0x41
	OpUnmap                 = 0x42
	OpLogSense              = 0x4d
	OpModeSelect10          = 0x55
	OpReserve10             = 0x56
	OpRelease10             = 0x57
	OpModeSense10           = 0x5a
	OpPersistentReserveIn   = 0x5e
	OpPersistentReserveOut  = 0x5f
	OpVariableLength        = 0x7f
	OpExtendedCopy          = 0x83
	OpReceiveCopyResults    = 0x84
	OpRead16                = 0x88
	OpCompareAndWrite       = 0x89
	OpWrite16               = 0x8a
	OpOrWrite16             = 0x8b
	OpWriteVerify16         = 0x8e
	OpVerify16              = 0x8f
	OpPrefetch16            = 0x90
	OpSyncCache16           = 0x91
	OpWriteSame16           = 0x93
	OpWriteAtomic16         = 0x9c
	OpServiceActionIn16     = 0x9e
	OpReportLUNs            = 0xa0
	OpMaintenanceIn         = 0xa3
	OpMaintenanceOut        = 0xa4
	OpRead12                = 0xa8
	OpWrite12               = 0xaa
	OpWriteVerify12         = 0xae
	OpVerify12              = 0xaf
	OpReadDefectData12      = 0xb7
	SAReadCapacity16        = 0x10
	SAGetLBAStatus          = 0x12
	SAReportTargetPortGroup = 0x0a
	SAReportSupportedOps    = 0x0c
	SAReportSupportedTMFs   = 0x0d
)

// cdbLength returns the length of a CDB from its group code (SPC-4
// 4.2.5.1), or 0 for reserved and vendor-specific groups and for the
// variable-length opcode.
func cdbLength(op uint8) int {
	switch op >> 5 {
	case 0:
		return 6
	case 1, 2:
		return 10
	case 4:
		return 16
	case 5:
		return 12
	}
	return 0
}

// cdb is a view of a validated CDB; its length is at least the length of
// its group. Accessors take the byte offsets of the SBC formats.
type cdb []byte

func (b cdb) op() uint8            { return b[0] }
func (b cdb) u16(off int) uint16   { return binary.BigEndian.Uint16(b[off:]) }
func (b cdb) u32(off int) uint32   { return binary.BigEndian.Uint32(b[off:]) }
func (b cdb) u64(off int) uint64   { return binary.BigEndian.Uint64(b[off:]) }
func (b cdb) u24(off int) uint32   { return uint32(b[off])<<16 | uint32(b[off+1])<<8 | uint32(b[off+2]) }
func (b cdb) control() uint8       { return b[len(b)-1] }
func (b cdb) serviceAction() uint8 { return b[1] & 0x1f }

// rwFields are the fields common to the block commands that address a range
// of logical blocks.
type rwFields struct {
	lba   uint64
	nlb   uint32
	flags uint8 // byte 1: xxPROTECT 7:5, DPO 4, FUA 3, FUA_NV 1 (or BYTCHK 2:1)
	// Byte offsets of the LBA and transfer length, for field pointers.
	lbaOff, lenOff int
}

// rwDecode reads the LBA, the number of logical blocks and byte 1 of the
// 6, 10, 12 and 16-byte block command formats. READ(6) and WRITE(6) carry a
// 21-bit LBA and a transfer length in which 0 means 256 blocks.
func rwDecode(b cdb) rwFields {
	switch len(b) {
	case 6:
		n := uint32(b[4])
		if n == 0 && (b[0] == OpRead6 || b[0] == OpWrite6) {
			n = 256
		}
		return rwFields{lba: uint64(b.u24(1) & 0x1fffff), nlb: n, lbaOff: 1, lenOff: 4}
	case 10:
		return rwFields{lba: uint64(b.u32(2)), nlb: uint32(b.u16(7)), flags: b[1], lbaOff: 2, lenOff: 7}
	case 12:
		return rwFields{lba: uint64(b.u32(2)), nlb: b.u32(6), flags: b[1], lbaOff: 2, lenOff: 6}
	default:
		return rwFields{lba: b.u64(2), nlb: b.u32(10), flags: b[1], lbaOff: 2, lenOff: 10}
	}
}

// Byte 1 flags of the block commands.
const (
	flagProtectMask = 0xe0 // RDPROTECT, WRPROTECT, VRPROTECT, ORPROTECT
	flagDPO         = 0x10
	flagFUA         = 0x08
	flagFUANV       = 0x02
)
