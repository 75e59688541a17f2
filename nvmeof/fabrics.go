package nvmeof

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
)

// Offsets of the Connect command fields (struct nvmf_connect_command).
const (
	OffsetConnectRecFmt = 40 // recfmt
	OffsetConnectQID    = 42 // qid
	OffsetConnectSQSize = 44 // sqsize (0-based)
	OffsetConnectCAttr  = 46 // cattr
	OffsetConnectKATO   = 48 // kato (milliseconds)
)

// ConnectAttrDisableSQFlow is the Connect attribute asking the controller
// to disable SQ flow control (NVME_CONNECT_DISABLE_SQFLOW); the controller
// then reports SQHeadDisabled in every completion of that queue.
const ConnectAttrDisableSQFlow uint8 = 1 << 2

// CNTLIDDynamic is the controller ID a host puts in the Connect data of an
// admin queue Connect to the dynamic controller model (NVME_CNTLID_DYNAMIC),
// and what discovery log entries advertise. CNTLIDMin and CNTLIDMax bound
// the IDs a subsystem hands out (NVME_CNTLID_MIN, NVME_CNTLID_MAX).
const (
	CNTLIDDynamic uint16 = 0xffff
	CNTLIDMin     uint16 = 1
	CNTLIDMax     uint16 = 0xffef
)

// AdminQueueDepth is the admin queue depth of NVMe-oF hosts and the most an
// NVMe/RDMA admin queue may ask for (NVME_AQ_DEPTH): a CM request for QID 0
// with HSQSIZE+1 above it is rejected.
const AdminQueueDepth = 32

// ConnectCommand is a view of an SQE as a Fabrics Connect command.
type ConnectCommand struct{ SQE }

// Connect returns s viewed as a Connect command.
func (s SQE) Connect() ConnectCommand { return ConnectCommand{s} }

// ConnectFields holds the fields of a Connect command.
type ConnectFields struct {
	CID uint16
	// DPTR describes the 1024-byte Connect data.
	DPTR   SGLFields
	RecFmt uint16
	QID    uint16
	// SQSize is the submission queue size, 0-based as on the wire.
	SQSize uint16
	CAttr  uint8
	// KATO is the keep alive timeout in milliseconds (admin queue).
	KATO uint32
}

// RecFmt returns the record format (0).
func (c ConnectCommand) RecFmt() uint16 {
	return binary.LittleEndian.Uint16(c.SQE[OffsetConnectRecFmt:])
}

// QID returns the queue identifier: 0 for the admin queue.
func (c ConnectCommand) QID() uint16 { return binary.LittleEndian.Uint16(c.SQE[OffsetConnectQID:]) }

// SQSize returns the 0-based submission queue size.
func (c ConnectCommand) SQSize() uint16 {
	return binary.LittleEndian.Uint16(c.SQE[OffsetConnectSQSize:])
}

// CAttr returns the connect attributes.
func (c ConnectCommand) CAttr() uint8 { return c.SQE[OffsetConnectCAttr] }

// KATO returns the keep alive timeout in milliseconds.
func (c ConnectCommand) KATO() uint32 { return binary.LittleEndian.Uint32(c.SQE[OffsetConnectKATO:]) }

// Encode writes all 64 bytes of the command: opcode 0x7F, flags 0x40
// (PSDT 01b), FCType 0x01.
func (c ConnectCommand) Encode(f *ConnectFields) {
	c.fabricsHeader(FCTypeConnect, f.CID)
	c.DPTR().Encode(&f.DPTR)
	le := binary.LittleEndian
	le.PutUint16(c.SQE[OffsetConnectRecFmt:], f.RecFmt)
	le.PutUint16(c.SQE[OffsetConnectQID:], f.QID)
	le.PutUint16(c.SQE[OffsetConnectSQSize:], f.SQSize)
	c.SQE[OffsetConnectCAttr] = f.CAttr
	le.PutUint32(c.SQE[OffsetConnectKATO:], f.KATO)
}

// Connect response DW0 bits (Linux NVME_CONNECT_AUTHREQ_*): authentication
// requirements reported with a successful Connect.
const (
	ConnectAuthReqATR  uint32 = 1 << 17 // NVME_CONNECT_AUTHREQ_ATR: authentication transaction required
	ConnectAuthReqASCR uint32 = 1 << 18 // NVME_CONNECT_AUTHREQ_ASCR: secure channel concatenation required
)

// ConnectResult returns DW0 of a successful Connect completion: the
// controller ID in bits 15:0 plus any ConnectAuthReq* bits.
func ConnectResult(cntlid uint16, authreq uint32) uint32 { return uint32(cntlid) | authreq }

// ConnectInvalidParamResult returns DW0 of a Connect completed with Connect
// Invalid Parameters, the way Linux nvmet encodes it (IPO_IATTR_CONNECT_DATA
// and IPO_IATTR_CONNECT_SQE): the byte offset of the bad field in bits 15:0,
// and bit 16 set when the field is in the Connect data rather than the SQE.
// The Linux host decodes exactly this (nvmf_log_connect_error).
func ConnectInvalidParamResult(inData bool, offset uint16) uint32 {
	v := uint32(offset)
	if inData {
		v |= 1 << 16
	}
	return v
}

// ParseConnectInvalidParam decodes DW0 of a Connect Invalid Parameters
// completion.
func ParseConnectInvalidParam(dw0 uint32) (inData bool, offset uint16) {
	return dw0>>16 != 0, uint16(dw0)
}

// Property attribute sizes (struct nvmf_property_*_command attrib bits 2:0).
const (
	PropertySize4 uint8 = 0 // 4-byte property
	PropertySize8 uint8 = 1 // 8-byte property
)

// Offsets of the Property Get/Set fields (struct nvmf_property_get_command,
// struct nvmf_property_set_command).
const (
	OffsetPropertyAttrib = 40 // attrib
	OffsetPropertyOffset = 44 // offset
	OffsetPropertyValue  = 48 // value (Property Set)
)

// PropertyCommand is a view of an SQE as a Fabrics Property Get or Property
// Set command.
type PropertyCommand struct{ SQE }

// Property returns s viewed as a Property Get or Set command.
func (s SQE) Property() PropertyCommand { return PropertyCommand{s} }

// PropertyFields holds the fields of a Property Get or Set command.
type PropertyFields struct {
	// FCType is FCTypePropertyGet or FCTypePropertySet.
	FCType uint8
	CID    uint16
	// Size8 selects an 8-byte access (CAP); otherwise 4 bytes.
	Size8 bool
	// Offset is the property offset, PropCAP and friends.
	Offset uint32
	// Value is the value to set (Property Set only).
	Value uint64
}

// Attrib returns the attribute byte.
func (c PropertyCommand) Attrib() uint8 { return c.SQE[OffsetPropertyAttrib] }

// Size returns the access size in bytes, 4 or 8. Any other attribute size
// is a *CommandError (Invalid Field, DNR, at the attribute).
func (c PropertyCommand) Size() (int, error) {
	switch c.Attrib() & 7 {
	case PropertySize4:
		return 4, nil
	case PropertySize8:
		return 8, nil
	}
	return 0, cmdErr(StatusInvalidField|StatusDNR, OffsetPropertyAttrib,
		fmt.Errorf("%w: attrib %#02x", errPropertySize, c.Attrib()))
}

// Offset returns the property offset.
func (c PropertyCommand) Offset() uint32 {
	return binary.LittleEndian.Uint32(c.SQE[OffsetPropertyOffset:])
}

// Value returns the value of a Property Set.
func (c PropertyCommand) Value() uint64 {
	return binary.LittleEndian.Uint64(c.SQE[OffsetPropertyValue:])
}

// Encode writes all 64 bytes of the command: opcode 0x7F, flags 0x40.
func (c PropertyCommand) Encode(f *PropertyFields) {
	c.fabricsHeader(f.FCType, f.CID)
	if f.Size8 {
		c.SQE[OffsetPropertyAttrib] = PropertySize8
	}
	binary.LittleEndian.PutUint32(c.SQE[OffsetPropertyOffset:], f.Offset)
	if f.FCType == FCTypePropertySet {
		binary.LittleEndian.PutUint64(c.SQE[OffsetPropertyValue:], f.Value)
	}
}

// OffsetDisconnectRecFmt is the offset of the record format of a Fabrics
// Disconnect (NVMe over Fabrics, Disconnect command, bytes 41:40).
const OffsetDisconnectRecFmt = 40

// EncodeDisconnect writes a Fabrics Disconnect command (FCType 0x08) with
// record format 0 into s.
func (s SQE) EncodeDisconnect(cid uint16) { s.fabricsHeader(FCTypeDisconnect, cid) }

// DisconnectRecFmt returns the record format of a Disconnect command.
func (s SQE) DisconnectRecFmt() uint16 {
	return binary.LittleEndian.Uint16(s[OffsetDisconnectRecFmt:])
}

// Offsets of the Authentication Send/Receive fields (struct
// nvmf_auth_send_command, struct nvmf_auth_receive_command).
const (
	offsetAuthSPSP0 = 41 // spsp0
	offsetAuthSPSP1 = 42 // spsp1
	offsetAuthSECP  = 43 // secp
	// OffsetAuthSPSP0 and friends locate the Authentication Send/Receive
	// fields for error locations.
	OffsetAuthSPSP0 = offsetAuthSPSP0
	OffsetAuthSPSP1 = offsetAuthSPSP1
	OffsetAuthSECP  = offsetAuthSECP
	OffsetAuthLen   = offsetAuthLen
	offsetAuthLen   = 44 // tl (send) or al (receive)
)

// AuthProtocolDHCHAP is the SECP of NVMe in-band authentication
// (NVME_AUTH_DHCHAP_PROTOCOL_IDENTIFIER).
const AuthProtocolDHCHAP uint8 = 0xe9

// AuthCommand is a view of an SQE as a Fabrics Authentication Send or
// Receive command.
type AuthCommand struct{ SQE }

// Auth returns s viewed as an Authentication Send or Receive command.
func (s SQE) Auth() AuthCommand { return AuthCommand{s} }

// AuthFields holds the fields of an Authentication Send or Receive command.
type AuthFields struct {
	// FCType is FCTypeAuthSend or FCTypeAuthReceive.
	FCType uint8
	CID    uint16
	DPTR   SGLFields
	SECP   uint8
	SPSP0  uint8
	SPSP1  uint8
	// Length is TL (send: transfer length) or AL (receive: allocation
	// length).
	Length uint32
}

// SECP returns the security protocol.
func (c AuthCommand) SECP() uint8 { return c.SQE[offsetAuthSECP] }

// SPSP0 returns SP specific byte 0.
func (c AuthCommand) SPSP0() uint8 { return c.SQE[offsetAuthSPSP0] }

// SPSP1 returns SP specific byte 1.
func (c AuthCommand) SPSP1() uint8 { return c.SQE[offsetAuthSPSP1] }

// Length returns TL (send) or AL (receive).
func (c AuthCommand) Length() uint32 { return binary.LittleEndian.Uint32(c.SQE[offsetAuthLen:]) }

// Encode writes all 64 bytes of the command: opcode 0x7F, flags 0x40.
func (c AuthCommand) Encode(f *AuthFields) {
	c.fabricsHeader(f.FCType, f.CID)
	c.DPTR().Encode(&f.DPTR)
	c.SQE[offsetAuthSPSP0] = f.SPSP0
	c.SQE[offsetAuthSPSP1] = f.SPSP1
	c.SQE[offsetAuthSECP] = f.SECP
	binary.LittleEndian.PutUint32(c.SQE[offsetAuthLen:], f.Length)
}

// ConnectDataSize is the size of the Connect data (struct
// nvmf_connect_data).
const ConnectDataSize = 1024

// NQNFieldSize is the size of an NQN field (NVMF_NQN_FIELD_LEN) and
// MaxNQNLength the longest NQN it may hold (NVMF_NQN_SIZE).
const (
	NQNFieldSize = 256
	MaxNQNLength = 223
)

// DiscoveryNQN is the NQN of the well-known discovery subsystem
// (NVME_DISC_SUBSYS_NAME).
const DiscoveryNQN = "nqn.2014-08.org.nvmexpress.discovery"

// Offsets of the Connect data fields (struct nvmf_connect_data). A
// controller rejecting one reports ConnectInvalidParamResult(true, offset).
const (
	ConnectDataHostIDOffset  = 0   // hostid (UUID)
	ConnectDataCNTLIDOffset  = 16  // cntlid
	ConnectDataSubNQNOffset  = 256 // subsysnqn
	ConnectDataHostNQNOffset = 512 // hostnqn
)

// ConnectData is a view of the 1024-byte Connect data.
type ConnectData []byte

// ConnectDataFields holds the fields of the Connect data.
type ConnectDataFields struct {
	// HostID is the host identifier, a UUID in wire byte order.
	HostID [16]byte
	// CNTLID is CNTLIDDynamic on an admin queue Connect, the controller ID
	// returned by it on I/O queue Connects.
	CNTLID  uint16
	SubNQN  string
	HostNQN string
}

// HostID returns the host identifier.
func (d ConnectData) HostID() (id [16]byte) {
	copy(id[:], d[ConnectDataHostIDOffset:])
	return id
}

// CNTLID returns the controller ID.
func (d ConnectData) CNTLID() uint16 {
	return binary.LittleEndian.Uint16(d[ConnectDataCNTLIDOffset:])
}

// SubNQN returns the subsystem NQN field up to its first NUL, aliasing d.
func (d ConnectData) SubNQN() []byte {
	return cstring(d[ConnectDataSubNQNOffset : ConnectDataSubNQNOffset+NQNFieldSize])
}

// HostNQN returns the host NQN field up to its first NUL, aliasing d.
func (d ConnectData) HostNQN() []byte {
	return cstring(d[ConnectDataHostNQNOffset : ConnectDataHostNQNOffset+NQNFieldSize])
}

// Encode writes all 1024 bytes of the Connect data. It returns a
// *FieldError, leaving d zeroed, when an NQN is empty, longer than
// MaxNQNLength or holds a NUL.
func (d ConnectData) Encode(f *ConnectDataFields) error {
	_ = d[ConnectDataSize-1]
	clear(d[:ConnectDataSize])
	if err := checkNQN(f.SubNQN); err != nil {
		return fieldErr("connect data", "SUBNQN", ConnectDataSubNQNOffset, err)
	}
	if err := checkNQN(f.HostNQN); err != nil {
		return fieldErr("connect data", "HOSTNQN", ConnectDataHostNQNOffset, err)
	}
	copy(d[ConnectDataHostIDOffset:], f.HostID[:])
	binary.LittleEndian.PutUint16(d[ConnectDataCNTLIDOffset:], f.CNTLID)
	copy(d[ConnectDataSubNQNOffset:], f.SubNQN)
	copy(d[ConnectDataHostNQNOffset:], f.HostNQN)
	return nil
}

// ParseConnectData parses the Connect data a host sent. Both NQNs must be
// NUL-terminated within their 256-byte field, non-empty and at most
// MaxNQNLength bytes; otherwise the error is a *FieldError whose Offset is
// what the controller reports with ConnectInvalidParamResult(true, ...).
func ParseConnectData(b []byte) (ConnectDataFields, error) {
	var f ConnectDataFields
	if len(b) < ConnectDataSize {
		return f, fmt.Errorf("%w: %d bytes", errShortConnectData, len(b))
	}
	d := ConnectData(b[:ConnectDataSize])
	sub, err := parseNQN(d[ConnectDataSubNQNOffset : ConnectDataSubNQNOffset+NQNFieldSize])
	if err != nil {
		return f, fieldErr("connect data", "SUBNQN", ConnectDataSubNQNOffset, err)
	}
	host, err := parseNQN(d[ConnectDataHostNQNOffset : ConnectDataHostNQNOffset+NQNFieldSize])
	if err != nil {
		return f, fieldErr("connect data", "HOSTNQN", ConnectDataHostNQNOffset, err)
	}
	f.HostID = d.HostID()
	f.CNTLID = d.CNTLID()
	f.SubNQN = sub
	f.HostNQN = host
	return f, nil
}

// checkNQN validates an NQN for encoding.
func checkNQN(s string) error {
	switch {
	case s == "":
		return errNQNEmpty
	case len(s) > MaxNQNLength:
		return fmt.Errorf("%w: %d bytes", errNQNTooLong, len(s))
	case strings.IndexByte(s, 0) >= 0:
		return errNQNHasNUL
	}
	return nil
}

// parseNQN reads a strict NUL-terminated NQN field.
func parseNQN(field []byte) (string, error) {
	n := bytes.IndexByte(field, 0)
	switch {
	case n < 0:
		return "", errNQNUnterminated
	case n == 0:
		return "", errNQNEmpty
	case n > MaxNQNLength:
		return "", fmt.Errorf("%w: %d bytes", errNQNTooLong, n)
	}
	return string(field[:n]), nil
}

// cstring returns b up to its first NUL.
func cstring(b []byte) []byte {
	if n := bytes.IndexByte(b, 0); n >= 0 {
		return b[:n]
	}
	return b
}
