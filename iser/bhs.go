package iser

import (
	"encoding/binary"
	"fmt"
	"strconv"
)

// BHSSize is the size of the Basic Header Segment every iSCSI PDU starts
// with (RFC 7143 section 11.2.1, Linux struct iscsi_hdr).
const BHSSize = 48

// Limits of the variable parts of a PDU.
const (
	// MaxAHSLength is the largest total AHS length: TotalAHSLength is a
	// count of 4-byte words in one byte.
	MaxAHSLength = 255 * 4
	// MaxDataSegmentLength is the largest data segment the 3-byte
	// DataSegmentLength field can describe, and the upper bound of
	// MaxRecvDataSegmentLength (ISCSI_MAX_MAX_RECV_SEG_LEN).
	MaxDataSegmentLength = 1<<24 - 1
	// MinRecvDataSegmentLength is the lower bound of
	// MaxRecvDataSegmentLength (ISCSI_MIN_MAX_RECV_SEG_LEN).
	MinRecvDataSegmentLength = 512
	// DefaultRecvDataSegmentLength is MaxRecvDataSegmentLength until one
	// is declared, and the limit for every login PDU
	// (ISCSI_DEF_MAX_RECV_SEG_LEN).
	DefaultRecvDataSegmentLength = 8192
	// DigestSize is the size of a header or data digest (CRC32C).
	DigestSize = 4
	// MaxHeaderLength is the largest header a Reader stores: the BHS and
	// the largest AHS. Give a Reader a header buffer this big.
	MaxHeaderLength = BHSSize + MaxAHSLength
)

// ReservedTag is the all-ones task tag: "no task" in ITT, TTT and SNACK Tag
// fields (Linux RESERVED_ITT, ISCSI_RESERVED_TAG).
const ReservedTag uint32 = 0xffffffff

// Offsets of the fields common to every BHS (struct iscsi_hdr).
const (
	OffsetOpcode            = 0  // opcode, with the I bit 0x40
	OffsetFlags             = 1  // flags, F bit 0x80 and opcode specific bits
	OffsetTotalAHSLength    = 4  // hlength: AHS length in 4-byte words
	OffsetDataSegmentLength = 5  // dlength: 3 bytes, big-endian
	OffsetLUN               = 8  // lun, or opcode specific
	OffsetITT               = 16 // itt
)

// Byte 0 and byte 1 bits shared by many opcodes.
const (
	opImmediate uint8 = 0x40 // ISCSI_OP_IMMEDIATE
	opcodeMask  uint8 = 0x3f // ISCSI_OPCODE_MASK
	flagFinal   uint8 = 0x80 // ISCSI_FLAG_CMD_FINAL and friends
)

// Opcode is the 6-bit iSCSI opcode (Linux ISCSI_OP_*).
type Opcode uint8

// Initiator opcodes.
const (
	OpNOPOut          Opcode = 0x00 // ISCSI_OP_NOOP_OUT
	OpSCSICommand     Opcode = 0x01 // ISCSI_OP_SCSI_CMD
	OpTaskMgmtRequest Opcode = 0x02 // ISCSI_OP_SCSI_TMFUNC
	OpLoginRequest    Opcode = 0x03 // ISCSI_OP_LOGIN
	OpTextRequest     Opcode = 0x04 // ISCSI_OP_TEXT
	OpDataOut         Opcode = 0x05 // ISCSI_OP_SCSI_DATA_OUT
	OpLogoutRequest   Opcode = 0x06 // ISCSI_OP_LOGOUT
	OpSNACKRequest    Opcode = 0x10 // ISCSI_OP_SNACK
)

// Target opcodes.
const (
	OpNOPIn            Opcode = 0x20 // ISCSI_OP_NOOP_IN
	OpSCSIResponse     Opcode = 0x21 // ISCSI_OP_SCSI_CMD_RSP
	OpTaskMgmtResponse Opcode = 0x22 // ISCSI_OP_SCSI_TMFUNC_RSP
	OpLoginResponse    Opcode = 0x23 // ISCSI_OP_LOGIN_RSP
	OpTextResponse     Opcode = 0x24 // ISCSI_OP_TEXT_RSP
	OpDataIn           Opcode = 0x25 // ISCSI_OP_SCSI_DATA_IN
	OpLogoutResponse   Opcode = 0x26 // ISCSI_OP_LOGOUT_RSP
	OpR2T              Opcode = 0x31 // ISCSI_OP_R2T
	OpAsyncMessage     Opcode = 0x32 // ISCSI_OP_ASYNC_EVENT
	OpReject           Opcode = 0x3f // ISCSI_OP_REJECT
)

// String returns the RFC 7143 name of the opcode.
func (o Opcode) String() string {
	switch o {
	case OpNOPOut:
		return "NOP-Out"
	case OpSCSICommand:
		return "SCSI Command"
	case OpTaskMgmtRequest:
		return "Task Management Function Request"
	case OpLoginRequest:
		return "Login Request"
	case OpTextRequest:
		return "Text Request"
	case OpDataOut:
		return "SCSI Data-Out"
	case OpLogoutRequest:
		return "Logout Request"
	case OpSNACKRequest:
		return "SNACK Request"
	case OpNOPIn:
		return "NOP-In"
	case OpSCSIResponse:
		return "SCSI Response"
	case OpTaskMgmtResponse:
		return "Task Management Function Response"
	case OpLoginResponse:
		return "Login Response"
	case OpTextResponse:
		return "Text Response"
	case OpDataIn:
		return "SCSI Data-In"
	case OpLogoutResponse:
		return "Logout Response"
	case OpR2T:
		return "Ready To Transfer"
	case OpAsyncMessage:
		return "Asynchronous Message"
	case OpReject:
		return "Reject"
	}
	if o >= 0x1c && o <= 0x1e {
		return "vendor-specific initiator opcode 0x" + strconv.FormatUint(uint64(o), 16)
	}
	if o >= 0x3c && o <= 0x3e {
		return "vendor-specific target opcode 0x" + strconv.FormatUint(uint64(o), 16)
	}
	return "opcode 0x" + strconv.FormatUint(uint64(o), 16)
}

// Initiator reports whether o is sent by initiators (bit 5 clear).
func (o Opcode) Initiator() bool { return o&0x20 == 0 }

// Known reports whether o is an opcode RFC 7143 defines.
func (o Opcode) Known() bool {
	switch o {
	case OpNOPOut, OpSCSICommand, OpTaskMgmtRequest, OpLoginRequest, OpTextRequest, OpDataOut,
		OpLogoutRequest, OpSNACKRequest, OpNOPIn, OpSCSIResponse, OpTaskMgmtResponse,
		OpLoginResponse, OpTextResponse, OpDataIn, OpLogoutResponse, OpR2T, OpAsyncMessage, OpReject:
		return true
	}
	return false
}

// BHS is a view of a 48-byte Basic Header Segment. The methods here read and
// write the fields every opcode shares; the opcode views (SCSICommand,
// LoginRequest...) are the same bytes with the opcode specific fields.
// Accessors assume len >= BHSSize: ParseBHS checks it.
type BHS []byte

// ParseBHS returns the first 48 bytes of b as a BHS view. It checks only the
// length: any opcode is returned, unknown ones included, so the caller can
// answer them with a Reject.
func ParseBHS(b []byte) (BHS, error) {
	if len(b) < BHSSize {
		return nil, fmt.Errorf("%w: %d bytes", errShortBHS, len(b))
	}
	return BHS(b[:BHSSize]), nil
}

// Opcode returns the opcode (byte 0, low 6 bits).
func (h BHS) Opcode() Opcode { return Opcode(h[OffsetOpcode] & opcodeMask) }

// Immediate reports the I bit: the command is for immediate delivery and
// does not advance CmdSN.
func (h BHS) Immediate() bool { return h[OffsetOpcode]&opImmediate != 0 }

// Final reports the F bit (byte 1, bit 7). For Login PDUs the same bit is T.
func (h BHS) Final() bool { return h[OffsetFlags]&flagFinal != 0 }

// Flags returns byte 1.
func (h BHS) Flags() uint8 { return h[OffsetFlags] }

// TotalAHSLength returns the length of the AHS area in bytes (the field
// counts 4-byte words).
func (h BHS) TotalAHSLength() int { return int(h[OffsetTotalAHSLength]) * 4 }

// DataSegmentLength returns the data segment length in bytes, padding
// excluded.
func (h BHS) DataSegmentLength() int {
	return int(h[5])<<16 | int(h[6])<<8 | int(h[7])
}

// SetLengths sets TotalAHSLength (from a byte count, a multiple of 4 up to
// MaxAHSLength) and DataSegmentLength (up to MaxDataSegmentLength). The
// Writer and AppendPDU call it; a transport building PDUs itself must.
func (h BHS) SetLengths(ahsLen, dataLen int) {
	h[OffsetTotalAHSLength] = uint8(ahsLen / 4)
	h[5], h[6], h[7] = uint8(dataLen>>16), uint8(dataLen>>8), uint8(dataLen)
}

// LUN returns bytes 8-15 as a big-endian integer: the raw 8-byte SAM LUN
// structure (see EncodeLUN). Opcodes without a LUN use the bytes otherwise.
func (h BHS) LUN() uint64 { return binary.BigEndian.Uint64(h[OffsetLUN:]) }

// ITT returns the Initiator Task Tag.
func (h BHS) ITT() uint32 { return binary.BigEndian.Uint32(h[OffsetITT:]) }

// SetITT sets the Initiator Task Tag.
func (h BHS) SetITT(itt uint32) { binary.BigEndian.PutUint32(h[OffsetITT:], itt) }

// word returns the big-endian 32-bit field at off (20, 24, ... 44).
func (h BHS) word(off int) uint32 { return binary.BigEndian.Uint32(h[off:]) }

func (h BHS) setWord(off int, v uint32) { binary.BigEndian.PutUint32(h[off:], v) }

// PaddedLength returns n rounded up to a multiple of 4: data segments and
// AHSs are padded to 4-byte boundaries on the wire.
func PaddedLength(n int) int { return (n + 3) &^ 3 }

// PadLength returns the number of pad bytes after n bytes.
func PadLength(n int) int { return -n & 3 }

// header writes the common bytes of an encoder: it zeroes all 48 bytes
// (lengths included: SetLengths or the Writer set them) and writes opcode,
// immediate bit and flags.
func (h BHS) header(op Opcode, immediate bool, flags uint8) {
	_ = h[BHSSize-1]
	clear(h[:BHSSize])
	h[0] = uint8(op)
	if immediate {
		h[0] |= opImmediate
	}
	h[1] = flags
}

// EncodeLUN returns the 8-byte LUN field for a logical unit number as Linux
// int_to_scsilun does: peripheral device addressing below 256, flat space
// addressing (method 01b) up to 16383.
func EncodeLUN(n uint16) uint64 {
	if n < 256 {
		return uint64(n) << 48
	}
	return uint64(0x4000|n&0x3fff) << 48
}

// DecodeLUN returns the logical unit number of a single-level LUN field in
// peripheral device or flat space addressing; ok is false for other
// addressing methods and multi-level LUNs.
func DecodeLUN(l uint64) (n uint16, ok bool) {
	if l&0x0000ffffffffffff != 0 {
		return 0, false
	}
	top := uint16(l >> 48)
	switch top >> 14 {
	case 0: // peripheral device addressing, bus 0
		if top&0x3f00 != 0 {
			return 0, false
		}
		return top & 0xff, true
	case 1: // flat space
		return top & 0x3fff, true
	}
	return 0, false
}
