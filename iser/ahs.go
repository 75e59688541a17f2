package iser

import (
	"encoding/binary"
	"fmt"
)

// AHSType is the type code of an Additional Header Segment (RFC 7143
// section 11.2.2.1, Linux ISCSI_AHSTYPE_*).
type AHSType uint8

// AHS types.
const (
	AHSExtendedCDB    AHSType = 1 // ISCSI_AHSTYPE_CDB: CDB bytes beyond 16
	AHSBidiReadLength AHSType = 2 // ISCSI_AHSTYPE_RLENGTH: read length of a bidirectional command
)

// Sizes of the AHS parts.
const (
	ahsHeaderSize      = 3 // AHSLength (2) and AHSType (1); byte 3 is counted in AHSLength
	bidiReadLengthSize = 8 // struct iscsi_rlength_ahdr
	// MaxCDBLength is the longest CDB an Extended CDB AHS can carry
	// (Linux ISCSI_MAX_AHS_SIZE bounds it to 260).
	MaxCDBLength = 16 + MaxAHSLength - 4
)

// AHS is a view of one Additional Header Segment, padding excluded: the
// 2-byte AHSLength, the AHSType byte, then AHSLength bytes (the first of
// which is the type specific byte 3).
type AHS []byte

// Type returns the AHS type (bits 0-5 of byte 2).
func (a AHS) Type() AHSType { return AHSType(a[2] & 0x3f) }

// Specific returns the AHSLength bytes after the type byte.
func (a AHS) Specific() []byte { return a[ahsHeaderSize:] }

// NextAHS returns the first AHS of an AHS area (PDU.AHS) and the area after
// it and its padding. It fails if the AHSLength overruns the area.
func NextAHS(area []byte) (a AHS, rest []byte, err error) {
	if len(area) < 4 {
		return nil, nil, fmt.Errorf("%w: %d bytes left", errAHSLength, len(area))
	}
	n := ahsHeaderSize + int(binary.BigEndian.Uint16(area))
	padded := PaddedLength(n)
	if padded > len(area) {
		return nil, nil, fmt.Errorf("%w: AHSLength %d, %d bytes left", errAHSLength, n-ahsHeaderSize, len(area))
	}
	return AHS(area[:n]), area[padded:], nil
}

// CommandAHS holds the AHSs a SCSI Command may carry.
type CommandAHS struct {
	// ExtendedCDB is the CDB beyond its first 16 bytes (a view into the
	// AHS area), nil without an Extended CDB AHS.
	ExtendedCDB []byte
	// BidiReadLength is the expected read length of a bidirectional
	// command, valid with HasBidiReadLength.
	BidiReadLength    uint32
	HasBidiReadLength bool
}

// ParseCommandAHS decodes the AHS area of a SCSI Command. Each type may
// appear once; unknown types and malformed lengths are errors (a target
// answers them with Reject, RejectProtocolError).
func ParseCommandAHS(area []byte) (CommandAHS, error) {
	var c CommandAHS
	for len(area) > 0 {
		a, rest, err := NextAHS(area)
		if err != nil {
			return CommandAHS{}, err
		}
		area = rest
		switch a.Type() {
		case AHSExtendedCDB:
			if c.ExtendedCDB != nil || len(a) < 5 {
				return CommandAHS{}, fmt.Errorf("%w: extended CDB AHS of %d bytes", errAHSType, len(a))
			}
			c.ExtendedCDB = a[4:] // skip the reserved byte 3
		case AHSBidiReadLength:
			if c.HasBidiReadLength || len(a) != bidiReadLengthSize {
				return CommandAHS{}, fmt.Errorf("%w: bidirectional read length AHS of %d bytes", errAHSType, len(a))
			}
			c.BidiReadLength = binary.BigEndian.Uint32(a[4:])
			c.HasBidiReadLength = true
		default:
			return CommandAHS{}, fmt.Errorf("%w: type %d", errAHSType, a.Type())
		}
	}
	return c, nil
}

// AppendCDB appends the complete CDB of a command to dst: the 16 bytes of
// the BHS, then the extended CDB bytes of the AHS. CDBs shorter than 16
// bytes are returned with their zero padding; the CDB's own opcode tells
// its length.
func AppendCDB(dst []byte, cmd SCSICommand, ahs CommandAHS) []byte {
	dst = append(dst, cmd.CDB()...)
	return append(dst, ahs.ExtendedCDB...)
}

// AppendExtendedCDBAHS appends an Extended CDB AHS for a CDB longer than 16
// bytes (the bytes after 16, with padding) and returns dst unchanged for
// shorter CDBs. Its AHSLength is len(cdb)-15, as in struct iscsi_ecdb_ahdr.
func AppendExtendedCDBAHS(dst, cdb []byte) []byte {
	if len(cdb) <= 16 {
		return dst
	}
	ext := cdb[16:]
	n := len(ext) + 1
	dst = append(dst, uint8(n>>8), uint8(n), uint8(AHSExtendedCDB), 0)
	dst = append(dst, ext...)
	return appendPad(dst, ahsHeaderSize+n)
}

// AppendBidiReadLengthAHS appends a Bidirectional Read Expected Data
// Transfer Length AHS (struct iscsi_rlength_ahdr: AHSLength 5).
func AppendBidiReadLengthAHS(dst []byte, readLength uint32) []byte {
	return append(dst, 0, 5, uint8(AHSBidiReadLength), 0,
		uint8(readLength>>24), uint8(readLength>>16), uint8(readLength>>8), uint8(readLength))
}

func appendPad(dst []byte, n int) []byte {
	for i := PadLength(n); i > 0; i-- {
		dst = append(dst, 0)
	}
	return dst
}
