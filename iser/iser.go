package iser

import (
	"encoding/binary"
	"fmt"
)

// The iSER header (RFC 7145 section 9.2, Linux struct iser_ctrl in
// include/scsi/iser.h) precedes every iSCSI PDU an iSER Send carries:
//
//	byte 0      flags: opcode in the high nibble (0x1 iSCSI control,
//	            0x2 Hello, 0x3 HelloReply), WSV 0x08, RSV 0x04
//	bytes 1-3   reserved
//	bytes 4-7   Write STag (big-endian)
//	bytes 8-15  Write Base Offset (the initiator's buffer VA)
//	bytes 16-19 Read STag
//	bytes 20-27 Read Base Offset
//
// RFC 5046 had a 12-byte header without the base offsets (zero-based
// virtual addressing); Linux and RFC 7145 use these 28 bytes, with absolute
// addresses (the initiator sends ZBVA_NOT_SUP in its CM private data).

// ISERHeaderSize is the size of the iSER header (sizeof(struct iser_ctrl)).
const ISERHeaderSize = 28

// iSER header opcodes and flags (Linux ISCSI_CTRL, ISER_HELLO,
// ISER_HELLORPLY, ISER_WSV, ISER_RSV; Wireshark ISER_REJ).
const (
	ISEROpcodeControl    uint8 = 0x10 // iSCSI control-type PDU follows
	ISEROpcodeHello      uint8 = 0x20 // iSER Hello
	ISEROpcodeHelloReply uint8 = 0x30 // iSER HelloReply
	ISERFlagWSV          uint8 = 0x08 // Write STag valid
	ISERFlagRSV          uint8 = 0x04 // Read STag valid
	ISERFlagReject       uint8 = 0x01 // HelloReply: target rejects the connection
	iserOpcodeMask       uint8 = 0xf0
)

// ISERHeader is a view of the 28-byte iSER header.
type ISERHeader []byte

// ISERHeaderFields holds the fields of an iSER header for an iSCSI control
// PDU. The valid bits are derived from the STags: an STag is valid when
// the matching flag is set.
type ISERHeaderFields struct {
	WriteValid      bool   // WSV: the initiator exposes a buffer for the target to RDMA Read
	WriteSTag       uint32 // write_stag
	WriteBaseOffset uint64 // write_va: where the unsolicited data ends
	ReadValid       bool   // RSV: the initiator exposes a buffer for the target to RDMA Write
	ReadSTag        uint32 // read_stag
	ReadBaseOffset  uint64 // read_va
}

// ParseISERHeader checks an iSER header of an iSCSI control PDU: length,
// opcode 0x1 and no flags other than WSV and RSV. Hello and HelloReply
// messages are parsed with ParseISERHello and ParseISERHelloReply;
// ISEROpcode tells them apart.
func ParseISERHeader(b []byte) (ISERHeader, error) {
	if len(b) < ISERHeaderSize {
		return nil, fmt.Errorf("%w: %d bytes", errISERHeader, len(b))
	}
	if b[0]&iserOpcodeMask != ISEROpcodeControl || b[0]&^(iserOpcodeMask|ISERFlagWSV|ISERFlagRSV) != 0 {
		return nil, fmt.Errorf("%w: flags %#02x", errISERHeader, b[0])
	}
	return ISERHeader(b[:ISERHeaderSize]), nil
}

// ISEROpcode returns the opcode nibble of an iSER message's first byte (0
// for an empty buffer).
func ISEROpcode(b []byte) uint8 {
	if len(b) == 0 {
		return 0
	}
	return b[0] & iserOpcodeMask
}

// WriteValid reports the WSV flag.
func (h ISERHeader) WriteValid() bool { return h[0]&ISERFlagWSV != 0 }

// ReadValid reports the RSV flag.
func (h ISERHeader) ReadValid() bool { return h[0]&ISERFlagRSV != 0 }

// WriteSTag returns the STag the target RDMA Reads Data-Out from.
func (h ISERHeader) WriteSTag() uint32 { return binary.BigEndian.Uint32(h[4:]) }

// WriteBaseOffset returns the address of the data to RDMA Read (after the
// immediate data).
func (h ISERHeader) WriteBaseOffset() uint64 { return binary.BigEndian.Uint64(h[8:]) }

// ReadSTag returns the STag the target RDMA Writes Data-In to.
func (h ISERHeader) ReadSTag() uint32 { return binary.BigEndian.Uint32(h[16:]) }

// ReadBaseOffset returns the address to RDMA Write Data-In to.
func (h ISERHeader) ReadBaseOffset() uint64 { return binary.BigEndian.Uint64(h[20:]) }

// Encode writes the header of an iSCSI control PDU, reserved bytes zeroed.
// STags and offsets are written as given, valid or not.
func (h ISERHeader) Encode(f *ISERHeaderFields) {
	_ = h[ISERHeaderSize-1]
	clear(h[:ISERHeaderSize])
	h[0] = ISEROpcodeControl
	if f.WriteValid {
		h[0] |= ISERFlagWSV
	}
	if f.ReadValid {
		h[0] |= ISERFlagRSV
	}
	binary.BigEndian.PutUint32(h[4:], f.WriteSTag)
	binary.BigEndian.PutUint64(h[8:], f.WriteBaseOffset)
	binary.BigEndian.PutUint32(h[16:], f.ReadSTag)
	binary.BigEndian.PutUint64(h[20:], f.ReadBaseOffset)
}

// Fields decodes the header.
func (h ISERHeader) Fields() ISERHeaderFields {
	return ISERHeaderFields{WriteValid: h.WriteValid(), WriteSTag: h.WriteSTag(), WriteBaseOffset: h.WriteBaseOffset(),
		ReadValid: h.ReadValid(), ReadSTag: h.ReadSTag(), ReadBaseOffset: h.ReadBaseOffset()}
}

// ISERVersion is the iSER protocol version of RFC 7145 carried in the Hello
// messages (MaxVer and MinVer nibbles, as Wireshark's dissector checks).
const ISERVersion = 10

// ISERHello holds an iSER Hello message (RFC 7145 section 9.3): the
// initiator's supported version range and its iSER-IRD, the RDMA Read
// requests it can have incoming. It travels in an iSER header sized
// message; byte 1 holds MaxVer (high nibble) and MinVer, bytes 2-3 the
// IRD. Linux never sends Hello; targets need not expect it.
type ISERHello struct {
	MaxVersion uint8
	MinVersion uint8
	IRD        uint16
}

// Encode writes the Hello into the first ISERHeaderSize bytes of b.
func (m ISERHello) Encode(b []byte) {
	_ = b[ISERHeaderSize-1]
	clear(b[:ISERHeaderSize])
	b[0] = ISEROpcodeHello
	b[1] = m.MaxVersion<<4 | m.MinVersion&0x0f
	binary.BigEndian.PutUint16(b[2:], m.IRD)
}

// ParseISERHello parses a Hello message.
func ParseISERHello(b []byte) (ISERHello, error) {
	if len(b) < 4 || b[0]&iserOpcodeMask != ISEROpcodeHello {
		return ISERHello{}, fmt.Errorf("%w: not a Hello", errISERHeader)
	}
	m := ISERHello{MaxVersion: b[1] >> 4, MinVersion: b[1] & 0x0f, IRD: binary.BigEndian.Uint16(b[2:])}
	if m.MinVersion > m.MaxVersion {
		return m, fmt.Errorf("%w: MinVer %d above MaxVer %d", errISERVersion, m.MinVersion, m.MaxVersion)
	}
	return m, nil
}

// Supports reports whether the Hello's version range includes ISERVersion.
func (m ISERHello) Supports() bool { return m.MinVersion <= ISERVersion && ISERVersion <= m.MaxVersion }

// ISERHelloReply holds an iSER HelloReply message: the target's maximum
// and chosen versions, its iSER-ORD (RDMA Reads it will issue), and the
// reject flag.
type ISERHelloReply struct {
	Reject         bool
	MaxVersion     uint8
	CurrentVersion uint8
	ORD            uint16
}

// Encode writes the HelloReply into the first ISERHeaderSize bytes of b.
func (m ISERHelloReply) Encode(b []byte) {
	_ = b[ISERHeaderSize-1]
	clear(b[:ISERHeaderSize])
	b[0] = ISEROpcodeHelloReply
	if m.Reject {
		b[0] |= ISERFlagReject
	}
	b[1] = m.MaxVersion<<4 | m.CurrentVersion&0x0f
	binary.BigEndian.PutUint16(b[2:], m.ORD)
}

// ParseISERHelloReply parses a HelloReply message.
func ParseISERHelloReply(b []byte) (ISERHelloReply, error) {
	if len(b) < 4 || b[0]&iserOpcodeMask != ISEROpcodeHelloReply {
		return ISERHelloReply{}, fmt.Errorf("%w: not a HelloReply", errISERHeader)
	}
	return ISERHelloReply{Reject: b[0]&ISERFlagReject != 0, MaxVersion: b[1] >> 4,
		CurrentVersion: b[1] & 0x0f, ORD: binary.BigEndian.Uint16(b[2:])}, nil
}

// ReplyTo builds the target's HelloReply to a Hello: it rejects a version
// range without ISERVersion and caps the ORD at the initiator's IRD.
func ReplyTo(h ISERHello, targetORD uint16) ISERHelloReply {
	r := ISERHelloReply{MaxVersion: ISERVersion, CurrentVersion: ISERVersion, ORD: min(targetORD, h.IRD)}
	if !h.Supports() {
		r.Reject = true
		r.ORD = 0
	}
	return r
}

// ISERCMSize is the size of the iSER connection manager private data
// (struct iser_cm_hdr): a flags byte and three reserved bytes.
const ISERCMSize = 4

// iSER CM private data flags (include/scsi/iser.h).
const (
	// ISERZBVANotSupported: the initiator does not support zero-based
	// virtual addresses; base offsets are absolute (Linux always sets it).
	ISERZBVANotSupported uint8 = 0x80 // ISER_ZBVA_NOT_SUP
	// ISERSendWithInvNotSupported: the initiator does not want Send with
	// Invalidate.
	ISERSendWithInvNotSupported uint8 = 0x40 // ISER_SEND_W_INV_NOT_SUP
	// ISERTZBVANotUsed: the target will not use zero-based addresses
	// (Linux isert always sets it in its accept).
	ISERTZBVANotUsed uint8 = 0x80 // ISERT_ZBVA_NOT_USED
	// ISERTSendWithInvNotUsed: the target will not use Send with
	// Invalidate.
	ISERTSendWithInvNotUsed uint8 = 0x40 // ISERT_SEND_W_INV_NOT_USED
)

// ISERCM is the iSER CM private data of a connect request (initiator flags)
// or accept (target flags).
type ISERCM struct {
	Flags uint8
}

// Encode writes the 4 bytes of private data.
func (c ISERCM) Encode(b []byte) {
	_ = b[ISERCMSize-1]
	b[0], b[1], b[2], b[3] = c.Flags, 0, 0, 0
}

// ParseISERCM parses CM private data. Like Linux isert, only the flags byte
// matters: the reserved bytes are ignored and InfiniBand CM padding
// accepted. Empty private data (an initiator that sent none) yields zero
// flags and ok false.
func ParseISERCM(pd []byte) (c ISERCM, ok bool) {
	if len(pd) == 0 {
		return ISERCM{}, false
	}
	return ISERCM{Flags: pd[0]}, true
}

// AcceptFor returns the private data a target accepts a connect request
// with, as Linux isert_rdma_accept: ZBVA never used, Send with Invalidate
// only if the initiator supports it and the target wants it. It also
// reports whether the target may use Send with Invalidate.
func AcceptFor(req ISERCM, targetSendInv bool) (ISERCM, bool) {
	sendInv := targetSendInv && req.Flags&ISERSendWithInvNotSupported == 0
	c := ISERCM{Flags: ISERTZBVANotUsed}
	if !sendInv {
		c.Flags |= ISERTSendWithInvNotUsed
	}
	return c, sendInv
}
