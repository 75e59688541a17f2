package srp

import (
	"encoding/binary"
	"fmt"
	"strconv"
)

// Opcode is the first byte of every information unit (srp-r16a table 6;
// include/scsi/srp.h).
type Opcode uint8

// Information unit opcodes. Initiator to target: LOGIN_REQ, TSK_MGMT, CMD,
// I_LOGOUT, CRED_RSP, AER_RSP. Target to initiator: LOGIN_RSP, RSP,
// LOGIN_REJ, T_LOGOUT, CRED_REQ, AER_REQ.
const (
	OpLoginReq Opcode = 0x00
	OpTskMgmt  Opcode = 0x01
	OpCmd      Opcode = 0x02
	OpILogout  Opcode = 0x03
	OpLoginRsp Opcode = 0xc0
	OpRsp      Opcode = 0xc1
	OpLoginRej Opcode = 0xc2
	OpTLogout  Opcode = 0x80
	OpCredReq  Opcode = 0x81
	OpAERReq   Opcode = 0x82
	OpCredRsp  Opcode = 0x41
	OpAERRsp   Opcode = 0x42
)

// String returns the SRP name of the opcode ("SRP_CMD").
func (o Opcode) String() string {
	switch o {
	case OpLoginReq:
		return "SRP_LOGIN_REQ"
	case OpTskMgmt:
		return "SRP_TSK_MGMT"
	case OpCmd:
		return "SRP_CMD"
	case OpILogout:
		return "SRP_I_LOGOUT"
	case OpLoginRsp:
		return "SRP_LOGIN_RSP"
	case OpRsp:
		return "SRP_RSP"
	case OpLoginRej:
		return "SRP_LOGIN_REJ"
	case OpTLogout:
		return "SRP_T_LOGOUT"
	case OpCredReq:
		return "SRP_CRED_REQ"
	case OpAERReq:
		return "SRP_AER_REQ"
	case OpCredRsp:
		return "SRP_CRED_RSP"
	case OpAERRsp:
		return "SRP_AER_RSP"
	}
	return "opcode(0x" + strconv.FormatUint(uint64(o), 16) + ")"
}

// Sizes of the information units and their fixed parts, in bytes.
const (
	LoginReqSize     = 64 // struct srp_login_req
	LoginReqRDMASize = 56 // struct srp_login_req_rdma: the RDMA/CM private data
	LoginRspSize     = 52 // struct srp_login_rsp
	LoginRejSize     = 32 // struct srp_login_rej
	ILogoutSize      = 16
	TLogoutSize      = 16
	TskMgmtSize      = 48
	CmdSize          = 48 // fixed part of SRP_CMD; additional CDB and descriptors follow
	RspSize          = 36 // fixed part of SRP_RSP; response data and sense data follow
	CredReqSize      = 16
	CredRspSize      = 16
	AERReqSize       = 36 // fixed part of SRP_AER_REQ; sense data follows
	AERRspSize       = 16

	// MinITIULen is the smallest initiator-to-target IU length a login may
	// ask for (the 64-byte SRP_LOGIN_REQ), as srp-r16a and Linux srpt
	// require.
	MinITIULen = 64
)

// Buffer formats of the login REQUIRED/SUPPORTED BUFFER FORMATS fields
// (a bit mask).
const (
	BufFmtDirect   uint16 = 1 << 1 // SRP_BUF_FORMAT_DIRECT
	BufFmtIndirect uint16 = 1 << 2 // SRP_BUF_FORMAT_INDIRECT
)

// Login request flags (srp_login_req.req_flags).
const (
	// MultiChanMask selects the MULTI-CHANNEL ACTION code in the flags.
	MultiChanMask uint8 = 0x03
	// MultiChanSingle asks the target to terminate the other channels of
	// the I_T nexus; MultiChanMulti to keep them.
	MultiChanSingle uint8 = 0x00
	MultiChanMulti  uint8 = 0x01
	// ImmedRequested asks for immediate data (SRP2) at ImmDataOffset.
	ImmedRequested uint8 = 0x80
)

// Login response flags (srp_login_rsp.rsp_flags).
const (
	LoginRspNoChannels uint8 = 0x00 // no other channel of the nexus existed
	LoginRspTerminated uint8 = 0x01 // existing channels were terminated
	LoginRspMaintained uint8 = 0x02 // existing channels are kept
	LoginRspImmedSupp  uint8 = 0x80 // immediate data accepted (SRP2)
)

// RejectReason is the REASON of an SRP_LOGIN_REJ. It implements error so
// that login failures can be matched with errors.As.
type RejectReason uint32

// Login reject reasons (enum srp_login_rej_reason).
const (
	RejUnableEstablishChannel RejectReason = 0x00010000
	RejInsufficientResources  RejectReason = 0x00010001
	RejITIULenTooLarge        RejectReason = 0x00010002
	RejUnableAssociateChannel RejectReason = 0x00010003
	RejUnsupportedDescFormat  RejectReason = 0x00010004
	RejMultiChannelUnsupp     RejectReason = 0x00010005
	RejChannelLimitReached    RejectReason = 0x00010006
)

// String describes the reason as srp-r16a names it.
func (r RejectReason) String() string {
	switch r {
	case RejUnableEstablishChannel:
		return "unable to establish RDMA channel"
	case RejInsufficientResources:
		return "insufficient RDMA channel resources"
	case RejITIULenTooLarge:
		return "requested maximum initiator to target IU length too large"
	case RejUnableAssociateChannel:
		return "unable to associate RDMA channel with specified I_T nexus"
	case RejUnsupportedDescFormat:
		return "requested buffer descriptor format not supported"
	case RejMultiChannelUnsupp:
		return "multiple RDMA channels not supported"
	case RejChannelLimitReached:
		return "RDMA channel limit reached for this initiator"
	}
	return "reject reason 0x" + strconv.FormatUint(uint64(r), 16)
}

// Hint says in words what usually causes the reason and what to check,
// or "" (the target's log has the exact cause; the wire has only the code).
func (r RejectReason) Hint() string {
	switch r {
	case RejUnableAssociateChannel:
		return "the target has no port with the URL's ID_EXT and IOC_GUID (rdisk discover srp://HOST lists its ports)"
	case RejUnableEstablishChannel:
		return "the target refused this initiator: its port ID may not be in the target port's ACL (rdisk target --srp-allow), or the login asked for something the target does not do"
	case RejInsufficientResources:
		return "the target is out of channels or memory; try fewer queues or a smaller queue depth"
	case RejITIULenTooLarge:
		return "the initiator asked for larger information units than the target takes"
	case RejUnsupportedDescFormat:
		return "the target does not support the data buffer descriptor formats asked for"
	case RejChannelLimitReached:
		return "this initiator has as many channels as the target allows; try fewer queues"
	}
	return ""
}

// Error makes a RejectReason an error.
func (r RejectReason) Error() string { return "srp: login rejected: " + r.String() }

// TLogoutReason is the REASON of an SRP_T_LOGOUT (srp-r16a table 25).
type TLogoutReason uint32

// Target logout reasons.
const (
	TLogoutNoReason          TLogoutReason = 0
	TLogoutInactiveChannel   TLogoutReason = 1
	TLogoutInvalidIUType     TLogoutReason = 2
	TLogoutUnexpectedRsp     TLogoutReason = 3 // an initiator response with no target request outstanding
	TLogoutMultiChannel      TLogoutReason = 4 // another login with MULTI-CHANNEL ACTION 0 took over
	TLogoutUnsupportedOutFmt TLogoutReason = 6
	TLogoutUnsupportedInFmt  TLogoutReason = 7
	TLogoutInvalidOutCount   TLogoutReason = 8
	TLogoutInvalidInCount    TLogoutReason = 9
)

// String describes the reason.
func (r TLogoutReason) String() string {
	switch r {
	case TLogoutNoReason:
		return "no reason specified"
	case TLogoutInactiveChannel:
		return "inactive RDMA channel"
	case TLogoutInvalidIUType:
		return "invalid information unit type"
	case TLogoutUnexpectedRsp:
		return "response with no outstanding target request"
	case TLogoutMultiChannel:
		return "disconnected by a multi-channel action of a new login"
	case TLogoutUnsupportedOutFmt:
		return "unsupported data-out buffer descriptor format"
	case TLogoutUnsupportedInFmt:
		return "unsupported data-in buffer descriptor format"
	case TLogoutInvalidOutCount:
		return "invalid data-out buffer descriptor count"
	case TLogoutInvalidInCount:
		return "invalid data-in buffer descriptor count"
	}
	return "logout reason " + strconv.FormatUint(uint64(r), 10)
}

// TaskFunc is the TASK MANAGEMENT FUNCTION of an SRP_TSK_MGMT.
type TaskFunc uint8

// Task management functions.
const (
	TskAbortTask    TaskFunc = 0x01
	TskAbortTaskSet TaskFunc = 0x02
	TskClearTaskSet TaskFunc = 0x04
	TskLUNReset     TaskFunc = 0x08
	TskClearACA     TaskFunc = 0x40
)

// String returns the SRP name of the function.
func (f TaskFunc) String() string {
	switch f {
	case TskAbortTask:
		return "ABORT TASK"
	case TskAbortTaskSet:
		return "ABORT TASK SET"
	case TskClearTaskSet:
		return "CLEAR TASK SET"
	case TskLUNReset:
		return "LOGICAL UNIT RESET"
	case TskClearACA:
		return "CLEAR ACA"
	}
	return "task function 0x" + strconv.FormatUint(uint64(f), 16)
}

// TMRespCode is the RSP_CODE of a task management SRP_RSP (response data
// byte 3; srp-r16a table 24, with SRP2's FUNCTION SUCCEEDED and INCORRECT
// LOGICAL UNIT NUMBER as SAM-5 and FCP-4 number them).
type TMRespCode uint8

// Task management response codes.
const (
	TMComplete      TMRespCode = 0x00
	TMInvalidFields TMRespCode = 0x02
	TMNotSupported  TMRespCode = 0x04
	TMFailed        TMRespCode = 0x05
	TMSucceeded     TMRespCode = 0x08
	TMIncorrectLUN  TMRespCode = 0x09
)

// String names the code.
func (c TMRespCode) String() string {
	switch c {
	case TMComplete:
		return "TASK MANAGEMENT FUNCTION COMPLETE"
	case TMInvalidFields:
		return "REQUEST FIELDS INVALID"
	case TMNotSupported:
		return "TASK MANAGEMENT FUNCTION NOT SUPPORTED"
	case TMFailed:
		return "TASK MANAGEMENT FUNCTION FAILED"
	case TMSucceeded:
		return "TASK MANAGEMENT FUNCTION SUCCEEDED"
	case TMIncorrectLUN:
		return "INCORRECT LOGICAL UNIT NUMBER"
	}
	return "rsp code 0x" + strconv.FormatUint(uint64(c), 16)
}

// Task attributes of SRP_CMD (the low three bits of TASK ATTRIBUTE).
const (
	AttrSimple      uint8 = 0x0
	AttrHeadOfQueue uint8 = 0x1
	AttrOrdered     uint8 = 0x2
	AttrACA         uint8 = 0x4
)

// Solicited notification bits. SRP_CMD and SRP_TSK_MGMT carry SCSOLNT
// (notify on success) and UCSOLNT (notify on failure); SRP_RSP and
// SRP_T_LOGOUT carry SOLNT.
const (
	SolNotSolicited  uint8 = 0x01 // SOLNT
	SolNotSuccessful uint8 = 0x02 // SCSOLNT
	SolNotFailed     uint8 = 0x04 // UCSOLNT
)

// SRP_RSP flags.
const (
	RspFlagRspValid uint8 = 1 << 0
	RspFlagSnsValid uint8 = 1 << 1
	RspFlagDOOver   uint8 = 1 << 2
	RspFlagDOUnder  uint8 = 1 << 3
	RspFlagDIOver   uint8 = 1 << 4
	RspFlagDIUnder  uint8 = 1 << 5
)

// Sentinel parse errors. They are constants: compare with errors.Is.
const (
	ErrShort  = errorString("srp: information unit too short")
	ErrOpcode = errorString("srp: unexpected information unit opcode")
	ErrLength = errorString("srp: inconsistent length fields")
)

type errorString string

func (e errorString) Error() string { return string(e) }

func be16(b []byte) uint16     { return binary.BigEndian.Uint16(b) }
func be32(b []byte) uint32     { return binary.BigEndian.Uint32(b) }
func be64(b []byte) uint64     { return binary.BigEndian.Uint64(b) }
func put16(b []byte, v uint16) { binary.BigEndian.PutUint16(b, v) }
func put32(b []byte, v uint32) { binary.BigEndian.PutUint32(b, v) }
func put64(b []byte, v uint64) { binary.BigEndian.PutUint64(b, v) }

// check verifies the length and opcode of an IU before a view is used.
func check(b []byte, min int, op Opcode) error {
	if len(b) < min {
		return fmt.Errorf("%w: %s of %d bytes, want %d", ErrShort, op, len(b), min)
	}
	if Opcode(b[0]) != op {
		return fmt.Errorf("%w: %s, want %s", ErrOpcode, Opcode(b[0]), op)
	}
	return nil
}

// Tags are opaque to the target: it echoes the initiator's eight bytes.
// The codecs read and write them big-endian, which round-trips any bytes.

// ---------------------------------------------------------------------------
// Login

// LoginReqFields are the fields of a login request, common to the
// SRP_LOGIN_REQ IU (InfiniBand CM) and the srp_login_req_rdma private data
// (RDMA/CM, the form used over iWARP and RoCE).
type LoginReqFields struct {
	Tag uint64
	// ReqITIULen is the longest IU the initiator will send.
	ReqITIULen uint32
	// ReqBufFmt is the set of buffer formats (BufFmtDirect, BufFmtIndirect)
	// the initiator requires the target to support.
	ReqBufFmt uint16
	// ReqFlags holds the multi-channel action (MultiChanMask) and
	// ImmedRequested.
	ReqFlags uint8
	// ImmDataOffset is where immediate data starts in an SRP_CMD, when
	// ImmedRequested is set.
	ImmDataOffset uint16
	// InitiatorPortID is initiator_ext followed by the port GUID (ib_srp:
	// the GID interface ID); TargetPortID is id_ext followed by ioc_guid.
	InitiatorPortID PortID
	TargetPortID    PortID
}

// MultiChannel returns the multi-channel action code of the request.
func (f *LoginReqFields) MultiChannel() uint8 { return f.ReqFlags & MultiChanMask }

// LoginReq is a view of the 64-byte SRP_LOGIN_REQ IU.
type LoginReq []byte

// Encode writes the IU, reserved bytes zeroed.
func (r LoginReq) Encode(f *LoginReqFields) {
	_ = r[LoginReqSize-1]
	clear(r[:LoginReqSize])
	r[0] = byte(OpLoginReq)
	put64(r[8:], f.Tag)
	put32(r[16:], f.ReqITIULen)
	put16(r[24:], f.ReqBufFmt)
	r[26] = f.ReqFlags
	put16(r[28:], f.ImmDataOffset)
	copy(r[32:48], f.InitiatorPortID[:])
	copy(r[48:64], f.TargetPortID[:])
}

// ParseLoginReq parses an SRP_LOGIN_REQ IU.
func ParseLoginReq(b []byte) (LoginReqFields, error) {
	if err := check(b, LoginReqSize, OpLoginReq); err != nil {
		return LoginReqFields{}, err
	}
	f := LoginReqFields{
		Tag: be64(b[8:]), ReqITIULen: be32(b[16:]), ReqBufFmt: be16(b[24:]), ReqFlags: b[26],
		ImmDataOffset: be16(b[28:]),
	}
	copy(f.InitiatorPortID[:], b[32:48])
	copy(f.TargetPortID[:], b[48:64])
	return f, nil
}

// LoginReqRDMA is a view of struct srp_login_req_rdma, the 56 bytes of
// RDMA/CM connect private data by which ib_srp logs in over iWARP and RoCE:
// 0 tag, 8 req_buf_fmt, 10 req_flags, 11 opcode, 12 req_it_iu_len,
// 16 initiator port ID, 32 target port ID, 48 imm_data_offset, 50 reserved.
type LoginReqRDMA []byte

// Encode writes the private data, reserved bytes zeroed.
func (r LoginReqRDMA) Encode(f *LoginReqFields) {
	_ = r[LoginReqRDMASize-1]
	clear(r[:LoginReqRDMASize])
	put64(r[0:], f.Tag)
	put16(r[8:], f.ReqBufFmt)
	r[10] = f.ReqFlags
	r[11] = byte(OpLoginReq)
	put32(r[12:], f.ReqITIULen)
	copy(r[16:32], f.InitiatorPortID[:])
	copy(r[32:48], f.TargetPortID[:])
	put16(r[48:], f.ImmDataOffset)
}

// ParseLoginReqRDMA parses RDMA/CM connect private data. Like Linux srpt it
// needs at least 56 bytes (longer private data is accepted: transports pad
// it) and the SRP_LOGIN_REQ opcode.
func ParseLoginReqRDMA(pd []byte) (LoginReqFields, error) {
	if len(pd) < LoginReqRDMASize {
		return LoginReqFields{}, fmt.Errorf("%w: login private data of %d bytes, want %d", ErrShort, len(pd), LoginReqRDMASize)
	}
	if Opcode(pd[11]) != OpLoginReq {
		return LoginReqFields{}, fmt.Errorf("%w: %s in login private data", ErrOpcode, Opcode(pd[11]))
	}
	f := LoginReqFields{
		Tag: be64(pd[0:]), ReqBufFmt: be16(pd[8:]), ReqFlags: pd[10], ReqITIULen: be32(pd[12:]),
		ImmDataOffset: be16(pd[48:]),
	}
	copy(f.InitiatorPortID[:], pd[16:32])
	copy(f.TargetPortID[:], pd[32:48])
	return f, nil
}

// LoginRspFields are the fields of an SRP_LOGIN_RSP.
type LoginRspFields struct {
	// ReqLimDelta is the initial request limit: how many requests the
	// initiator may send before it hears more.
	ReqLimDelta int32
	Tag         uint64
	// MaxITIULen and MaxTIIULen are the longest IUs each side will send.
	MaxITIULen uint32
	MaxTIIULen uint32
	// BufFmt is the set of buffer formats the target supports.
	BufFmt uint16
	// Flags holds the multi-channel result and LoginRspImmedSupp.
	Flags uint8
}

// LoginRsp is a view of the 52-byte SRP_LOGIN_RSP, which RDMA/CM carries as
// the accept private data.
type LoginRsp []byte

// Encode writes the IU, reserved bytes zeroed.
func (r LoginRsp) Encode(f *LoginRspFields) {
	_ = r[LoginRspSize-1]
	clear(r[:LoginRspSize])
	r[0] = byte(OpLoginRsp)
	put32(r[4:], uint32(f.ReqLimDelta))
	put64(r[8:], f.Tag)
	put32(r[16:], f.MaxITIULen)
	put32(r[20:], f.MaxTIIULen)
	put16(r[24:], f.BufFmt)
	r[26] = f.Flags
}

// ParseLoginRsp parses an SRP_LOGIN_RSP.
func ParseLoginRsp(b []byte) (LoginRspFields, error) {
	if err := check(b, LoginRspSize, OpLoginRsp); err != nil {
		return LoginRspFields{}, err
	}
	return LoginRspFields{
		ReqLimDelta: int32(be32(b[4:])), Tag: be64(b[8:]), MaxITIULen: be32(b[16:]), MaxTIIULen: be32(b[20:]),
		BufFmt: be16(b[24:]), Flags: b[26],
	}, nil
}

// LoginRejFields are the fields of an SRP_LOGIN_REJ.
type LoginRejFields struct {
	Reason RejectReason
	Tag    uint64
	// BufFmt is the set of buffer formats the target supports.
	BufFmt uint16
}

// LoginRej is a view of the 32-byte SRP_LOGIN_REJ, which RDMA/CM carries as
// the reject private data.
type LoginRej []byte

// Encode writes the IU, reserved bytes zeroed.
func (r LoginRej) Encode(f *LoginRejFields) {
	_ = r[LoginRejSize-1]
	clear(r[:LoginRejSize])
	r[0] = byte(OpLoginRej)
	put32(r[4:], uint32(f.Reason))
	put64(r[8:], f.Tag)
	put16(r[24:], f.BufFmt)
}

// ParseLoginRej parses an SRP_LOGIN_REJ.
func ParseLoginRej(b []byte) (LoginRejFields, error) {
	if err := check(b, LoginRejSize, OpLoginRej); err != nil {
		return LoginRejFields{}, err
	}
	return LoginRejFields{Reason: RejectReason(be32(b[4:])), Tag: be64(b[8:]), BufFmt: be16(b[24:])}, nil
}

// ---------------------------------------------------------------------------
// Logout

// EncodeILogout writes a 16-byte SRP_I_LOGOUT.
func EncodeILogout(b []byte, tag uint64) {
	_ = b[ILogoutSize-1]
	clear(b[:ILogoutSize])
	b[0] = byte(OpILogout)
	put64(b[8:], tag)
}

// ParseILogout parses an SRP_I_LOGOUT and returns its tag.
func ParseILogout(b []byte) (uint64, error) {
	if err := check(b, ILogoutSize, OpILogout); err != nil {
		return 0, err
	}
	return be64(b[8:]), nil
}

// TLogoutFields are the fields of an SRP_T_LOGOUT.
type TLogoutFields struct {
	SolNot uint8
	Reason TLogoutReason
	Tag    uint64
}

// EncodeTLogout writes a 16-byte SRP_T_LOGOUT.
func EncodeTLogout(b []byte, f *TLogoutFields) {
	_ = b[TLogoutSize-1]
	clear(b[:TLogoutSize])
	b[0] = byte(OpTLogout)
	b[1] = f.SolNot
	put32(b[4:], uint32(f.Reason))
	put64(b[8:], f.Tag)
}

// ParseTLogout parses an SRP_T_LOGOUT.
func ParseTLogout(b []byte) (TLogoutFields, error) {
	if err := check(b, TLogoutSize, OpTLogout); err != nil {
		return TLogoutFields{}, err
	}
	return TLogoutFields{SolNot: b[1], Reason: TLogoutReason(be32(b[4:])), Tag: be64(b[8:])}, nil
}

// ---------------------------------------------------------------------------
// Task management

// TskMgmtFields are the fields of an SRP_TSK_MGMT.
type TskMgmtFields struct {
	SolNot uint8
	Tag    uint64
	// LUN is the 8-byte SAM LUN structure.
	LUN  [8]byte
	Func TaskFunc
	// TaskTag names the task to abort (ABORT TASK).
	TaskTag uint64
}

// EncodeTskMgmt writes a 48-byte SRP_TSK_MGMT.
func EncodeTskMgmt(b []byte, f *TskMgmtFields) {
	_ = b[TskMgmtSize-1]
	clear(b[:TskMgmtSize])
	b[0] = byte(OpTskMgmt)
	b[1] = f.SolNot
	put64(b[8:], f.Tag)
	copy(b[20:28], f.LUN[:])
	b[30] = byte(f.Func)
	put64(b[32:], f.TaskTag)
}

// ParseTskMgmt parses an SRP_TSK_MGMT.
func ParseTskMgmt(b []byte) (TskMgmtFields, error) {
	if err := check(b, TskMgmtSize, OpTskMgmt); err != nil {
		return TskMgmtFields{}, err
	}
	f := TskMgmtFields{SolNot: b[1], Tag: be64(b[8:]), Func: TaskFunc(b[30]), TaskTag: be64(b[32:])}
	copy(f.LUN[:], b[20:28])
	return f, nil
}

// ---------------------------------------------------------------------------
// Command

// DescFormat is a data buffer descriptor format: one nibble of an SRP_CMD's
// BUFFER FORMAT byte (high nibble data-out, low nibble data-in).
type DescFormat uint8

// Descriptor formats.
const (
	DescNone      DescFormat = 0 // no data buffer
	DescDirect    DescFormat = 1 // one 16-byte direct descriptor
	DescIndirect  DescFormat = 2 // indirect table header and a (partial) table
	DescImmediate DescFormat = 3 // SRP2: 4-byte length, data at the negotiated offset
)

// String names the format.
func (f DescFormat) String() string {
	switch f {
	case DescNone:
		return "none"
	case DescDirect:
		return "direct"
	case DescIndirect:
		return "indirect"
	case DescImmediate:
		return "immediate"
	}
	return "format(" + strconv.Itoa(int(f)) + ")"
}

// CmdFields are the fixed fields of an SRP_CMD.
type CmdFields struct {
	SolNot uint8
	// DataOutFmt and DataInFmt form the BUFFER FORMAT byte.
	DataOutFmt DescFormat
	DataInFmt  DescFormat
	// DataOutCount and DataInCount are the DATA-OUT and DATA-IN BUFFER
	// DESCRIPTOR COUNT fields: for indirect descriptors, the number of
	// direct descriptors of the table present in the IU.
	DataOutCount uint8
	DataInCount  uint8
	Tag          uint64
	LUN          [8]byte
	TaskAttr     uint8
	// AddCDBLen is the ADDITIONAL CDB LENGTH byte as on the wire: the
	// length in bytes of the CDB beyond 16, a multiple of four (srp-r16a
	// puts the count of four-byte words in bits 7..2; the value is the
	// same).
	AddCDBLen uint8
	// CDB is the first 16 bytes of the CDB; an additional CDB follows the
	// fixed part.
	CDB [16]byte
}

// Cmd is a view of an SRP_CMD: the 48-byte fixed part, then ADDITIONAL CDB
// LENGTH bytes of CDB, then the data-out and data-in descriptors.
type Cmd []byte

// SolNot returns the solicited notification bits.
func (c Cmd) SolNot() uint8 { return c[1] }

// DataOutFmt returns the data-out descriptor format (high nibble).
func (c Cmd) DataOutFmt() DescFormat { return DescFormat(c[5] >> 4) }

// DataInFmt returns the data-in descriptor format (low nibble).
func (c Cmd) DataInFmt() DescFormat { return DescFormat(c[5] & 0x0f) }

// DataOutCount returns the DATA-OUT BUFFER DESCRIPTOR COUNT.
func (c Cmd) DataOutCount() uint8 { return c[6] }

// DataInCount returns the DATA-IN BUFFER DESCRIPTOR COUNT.
func (c Cmd) DataInCount() uint8 { return c[7] }

// Tag returns the command's tag.
func (c Cmd) Tag() uint64 { return be64(c[8:]) }

// LUN returns the 8-byte LUN structure.
func (c Cmd) LUN() [8]byte { return [8]byte(c[20:28]) }

// TaskAttr returns the task attribute (low three bits).
func (c Cmd) TaskAttr() uint8 { return c[29] & 0x07 }

// AddCDBLen returns the additional CDB length in bytes (the reserved low
// two bits masked off, as Linux srpt does).
func (c Cmd) AddCDBLen() int { return int(c[31] &^ 3) }

// CDB returns the whole CDB: the 16 bytes of the fixed part and the
// additional CDB. It returns nil when the IU is too short to hold it.
func (c Cmd) CDB() []byte {
	n := CmdSize + c.AddCDBLen()
	if len(c) < n {
		return nil
	}
	if n == CmdSize {
		return c[32:48:48]
	}
	return c[32:n:n]
}

// Descriptors returns the bytes after the CDB, where the descriptors
// begin (nil when the IU is too short).
func (c Cmd) Descriptors() []byte {
	n := CmdSize + c.AddCDBLen()
	if len(c) < n {
		return nil
	}
	return c[n:]
}

// Encode writes the 48-byte fixed part, reserved bytes zeroed. The
// additional CDB and the descriptors are the caller's to write after it.
func (c Cmd) Encode(f *CmdFields) {
	_ = c[CmdSize-1]
	clear(c[:CmdSize])
	c[0] = byte(OpCmd)
	c[1] = f.SolNot
	c[5] = byte(f.DataOutFmt)<<4 | byte(f.DataInFmt)&0x0f
	c[6] = f.DataOutCount
	c[7] = f.DataInCount
	put64(c[8:], f.Tag)
	copy(c[20:28], f.LUN[:])
	c[29] = f.TaskAttr
	c[31] = f.AddCDBLen
	copy(c[32:48], f.CDB[:])
}

// ParseCmd checks that b holds an SRP_CMD with its whole CDB and returns the
// view. Descriptors are checked by ParseData.
func ParseCmd(b []byte) (Cmd, error) {
	if err := check(b, CmdSize, OpCmd); err != nil {
		return nil, err
	}
	c := Cmd(b)
	if CmdSize+c.AddCDBLen() > len(b) {
		return nil, fmt.Errorf("%w: additional CDB of %d bytes in an SRP_CMD of %d bytes", ErrLength, c.AddCDBLen(), len(b))
	}
	return c, nil
}

// Fields returns the fixed fields.
func (c Cmd) Fields() CmdFields {
	return CmdFields{
		SolNot: c[1], DataOutFmt: c.DataOutFmt(), DataInFmt: c.DataInFmt(), DataOutCount: c[6], DataInCount: c[7],
		Tag: c.Tag(), LUN: c.LUN(), TaskAttr: c[29], AddCDBLen: c[31], CDB: [16]byte(c[32:48]),
	}
}

// ---------------------------------------------------------------------------
// Response

// RspFields are the fixed fields of an SRP_RSP.
type RspFields struct {
	SolNot      uint8
	ReqLimDelta int32
	Tag         uint64
	Flags       uint8
	Status      uint8
	// DataOutResid and DataInResid are the residual counts, valid with
	// the DOOVER/DOUNDER and DIOVER/DIUNDER flags.
	DataOutResid uint32
	DataInResid  uint32
	// SenseLen and RespLen are the lengths of the sense data and the
	// response data that follow the fixed part (response data first).
	SenseLen uint32
	RespLen  uint32
}

// Rsp is a view of an SRP_RSP.
type Rsp []byte

// Encode writes the 36-byte fixed part, reserved bytes zeroed.
func (r Rsp) Encode(f *RspFields) {
	_ = r[RspSize-1]
	clear(r[:RspSize])
	r[0] = byte(OpRsp)
	r[1] = f.SolNot
	put32(r[4:], uint32(f.ReqLimDelta))
	put64(r[8:], f.Tag)
	r[18] = f.Flags
	r[19] = f.Status
	put32(r[20:], f.DataOutResid)
	put32(r[24:], f.DataInResid)
	put32(r[28:], f.SenseLen)
	put32(r[32:], f.RespLen)
}

// Fields returns the fixed fields.
func (r Rsp) Fields() RspFields {
	return RspFields{
		SolNot: r[1], ReqLimDelta: int32(be32(r[4:])), Tag: be64(r[8:]), Flags: r[18], Status: r[19],
		DataOutResid: be32(r[20:]), DataInResid: be32(r[24:]), SenseLen: be32(r[28:]), RespLen: be32(r[32:]),
	}
}

// RespData returns the response data (empty without RSPVALID). The view
// must have been checked by ParseRsp.
func (r Rsp) RespData() []byte {
	if r[18]&RspFlagRspValid == 0 {
		return nil
	}
	return r[RspSize : RspSize+int(be32(r[32:]))]
}

// Sense returns the sense data (empty without SNSVALID). The view must have
// been checked by ParseRsp.
func (r Rsp) Sense() []byte {
	if r[18]&RspFlagSnsValid == 0 {
		return nil
	}
	off := RspSize
	if r[18]&RspFlagRspValid != 0 {
		off += int(be32(r[32:]))
	}
	return r[off : off+int(be32(r[28:]))]
}

// EncodeRsp writes a whole SRP_RSP into b: the fixed part, then respData
// (setting RSPVALID and RESPONSE DATA LIST LENGTH when not empty) and sense
// (setting SNSVALID and SENSE DATA LIST LENGTH when not empty). It returns
// the IU length. b must hold RspSize+len(respData)+len(sense) bytes.
func EncodeRsp(b []byte, f *RspFields, respData, sense []byte) int {
	g := *f
	g.RespLen, g.SenseLen = uint32(len(respData)), uint32(len(sense))
	g.Flags &^= RspFlagRspValid | RspFlagSnsValid
	if len(respData) > 0 {
		g.Flags |= RspFlagRspValid
	}
	if len(sense) > 0 {
		g.Flags |= RspFlagSnsValid
	}
	Rsp(b).Encode(&g)
	n := RspSize + copy(b[RspSize:], respData)
	n += copy(b[n:], sense)
	return n
}

// ParseRsp checks that b holds an SRP_RSP whose response and sense data fit
// and returns the view.
func ParseRsp(b []byte) (Rsp, error) {
	if err := check(b, RspSize, OpRsp); err != nil {
		return nil, err
	}
	r := Rsp(b)
	need := uint64(RspSize)
	if r[18]&RspFlagRspValid != 0 {
		need += uint64(be32(r[32:]))
	}
	if r[18]&RspFlagSnsValid != 0 {
		need += uint64(be32(r[28:]))
	}
	if need > uint64(len(b)) {
		return nil, fmt.Errorf("%w: SRP_RSP of %d bytes announces %d", ErrLength, len(b), need)
	}
	return r, nil
}

// ---------------------------------------------------------------------------
// Credits and asynchronous events

// CredReqFields are the fields of an SRP_CRED_REQ.
type CredReqFields struct {
	SolNot      uint8
	ReqLimDelta int32
	Tag         uint64
}

// EncodeCredReq writes a 16-byte SRP_CRED_REQ.
func EncodeCredReq(b []byte, f *CredReqFields) {
	_ = b[CredReqSize-1]
	clear(b[:CredReqSize])
	b[0] = byte(OpCredReq)
	b[1] = f.SolNot
	put32(b[4:], uint32(f.ReqLimDelta))
	put64(b[8:], f.Tag)
}

// ParseCredReq parses an SRP_CRED_REQ.
func ParseCredReq(b []byte) (CredReqFields, error) {
	if err := check(b, CredReqSize, OpCredReq); err != nil {
		return CredReqFields{}, err
	}
	return CredReqFields{SolNot: b[1], ReqLimDelta: int32(be32(b[4:])), Tag: be64(b[8:])}, nil
}

// EncodeInitiatorRsp writes a 16-byte SRP_CRED_RSP or SRP_AER_RSP (op).
func EncodeInitiatorRsp(b []byte, op Opcode, tag uint64) {
	_ = b[CredRspSize-1]
	clear(b[:CredRspSize])
	b[0] = byte(op)
	put64(b[8:], tag)
}

// ParseInitiatorRsp parses an SRP_CRED_RSP or SRP_AER_RSP and returns its
// opcode and tag.
func ParseInitiatorRsp(b []byte) (Opcode, uint64, error) {
	if len(b) < CredRspSize {
		return 0, 0, fmt.Errorf("%w: initiator response of %d bytes", ErrShort, len(b))
	}
	op := Opcode(b[0])
	if op != OpCredRsp && op != OpAERRsp {
		return 0, 0, fmt.Errorf("%w: %s is not an initiator response", ErrOpcode, op)
	}
	return op, be64(b[8:]), nil
}

// AERReqFields are the fixed fields of an SRP_AER_REQ.
type AERReqFields struct {
	SolNot      uint8
	ReqLimDelta int32
	Tag         uint64
	LUN         [8]byte
	// SenseLen is the length of the sense data after the fixed part.
	SenseLen uint32
}

// EncodeAERReq writes an SRP_AER_REQ with its sense data and returns its
// length. b must hold AERReqSize+len(sense) bytes.
func EncodeAERReq(b []byte, f *AERReqFields, sense []byte) int {
	_ = b[AERReqSize+len(sense)-1]
	clear(b[:AERReqSize])
	b[0] = byte(OpAERReq)
	b[1] = f.SolNot
	put32(b[4:], uint32(f.ReqLimDelta))
	put64(b[8:], f.Tag)
	copy(b[20:28], f.LUN[:])
	put32(b[28:], uint32(len(sense)))
	return AERReqSize + copy(b[AERReqSize:], sense)
}

// ParseAERReq parses an SRP_AER_REQ and returns its fields and sense data
// (a sub-slice of b).
func ParseAERReq(b []byte) (AERReqFields, []byte, error) {
	if err := check(b, AERReqSize, OpAERReq); err != nil {
		return AERReqFields{}, nil, err
	}
	f := AERReqFields{SolNot: b[1], ReqLimDelta: int32(be32(b[4:])), Tag: be64(b[8:]), SenseLen: be32(b[28:])}
	copy(f.LUN[:], b[20:28])
	if uint64(f.SenseLen) > uint64(len(b)-AERReqSize) {
		return f, nil, fmt.Errorf("%w: SRP_AER_REQ of %d bytes announces %d bytes of sense data", ErrLength, len(b), f.SenseLen)
	}
	return f, b[AERReqSize : AERReqSize+int(f.SenseLen)], nil
}
