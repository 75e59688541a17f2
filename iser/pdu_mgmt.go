package iser

import "encoding/binary"

// Views of the management PDUs: Task Management Function Request and
// Response, NOP-Out and NOP-In, Logout Request and Response, Asynchronous
// Message, Reject and SNACK Request.

// TMFunction is a task management function code (ISCSI_TM_FUNC_*).
type TMFunction uint8

// Task management functions.
const (
	TMFAbortTask        TMFunction = 1 // ISCSI_TM_FUNC_ABORT_TASK
	TMFAbortTaskSet     TMFunction = 2 // ISCSI_TM_FUNC_ABORT_TASK_SET
	TMFClearACA         TMFunction = 3 // ISCSI_TM_FUNC_CLEAR_ACA
	TMFClearTaskSet     TMFunction = 4 // ISCSI_TM_FUNC_CLEAR_TASK_SET
	TMFLogicalUnitReset TMFunction = 5 // ISCSI_TM_FUNC_LOGICAL_UNIT_RESET
	TMFTargetWarmReset  TMFunction = 6 // ISCSI_TM_FUNC_TARGET_WARM_RESET
	TMFTargetColdReset  TMFunction = 7 // ISCSI_TM_FUNC_TARGET_COLD_RESET
	TMFTaskReassign     TMFunction = 8 // ISCSI_TM_FUNC_TASK_REASSIGN
)

// TMF response codes (ISCSI_TMF_RSP_*).
const (
	TMFComplete              uint8 = 0x00 // function complete
	TMFNoTask                uint8 = 0x01 // task does not exist
	TMFNoLUN                 uint8 = 0x02 // LUN does not exist
	TMFTaskAllegiant         uint8 = 0x03 // task still allegiant
	TMFNoFailover            uint8 = 0x04 // task allegiance reassignment not supported
	TMFNotSupported          uint8 = 0x05 // task management function not supported
	TMFAuthFailed            uint8 = 0x06 // function authorization failed
	TMFRejected              uint8 = 0xff // function rejected
	tmfFunctionMask          uint8 = 0x7f // ISCSI_FLAG_TM_FUNC_MASK
	logoutReasonMask         uint8 = 0x7f // ISCSI_FLAG_LOGOUT_REASON_MASK
	snackTypeMask            uint8 = 0x0f // ISCSI_FLAG_SNACK_TYPE_MASK
	offsetInitiatorCmdSN           = OffsetCmdCmdSN
	offsetInitiatorExpStatSN       = OffsetCmdExpStatSN
)

// TaskMgmtRequest is a view of a Task Management Function Request BHS
// (opcode 0x02, struct iscsi_tm).
type TaskMgmtRequest []byte

// TaskMgmtRequestFields holds the fields of a TMF request.
type TaskMgmtRequestFields struct {
	Immediate bool
	Function  TMFunction
	LUN       uint64
	ITT       uint32
	// ReferencedTaskTag is the ITT of the task to abort (ABORT TASK),
	// ReservedTag otherwise.
	ReferencedTaskTag uint32
	CmdSN             uint32
	ExpStatSN         uint32
	RefCmdSN          uint32
	ExpDataSN         uint32
}

// BHS returns the common header view.
func (t TaskMgmtRequest) BHS() BHS { return BHS(t) }

// Function returns the task management function.
func (t TaskMgmtRequest) Function() TMFunction { return TMFunction(t[1] & tmfFunctionMask) }

// ReferencedTaskTag returns the ITT of the referenced task.
func (t TaskMgmtRequest) ReferencedTaskTag() uint32 { return BHS(t).word(20) }

// CmdSN returns the command sequence number.
func (t TaskMgmtRequest) CmdSN() uint32 { return BHS(t).word(offsetInitiatorCmdSN) }

// RefCmdSN returns the CmdSN of the referenced task.
func (t TaskMgmtRequest) RefCmdSN() uint32 { return BHS(t).word(32) }

// Encode writes the request.
func (t TaskMgmtRequest) Encode(f *TaskMgmtRequestFields) {
	h := BHS(t)
	h.header(OpTaskMgmtRequest, f.Immediate, flagFinal|uint8(f.Function)&tmfFunctionMask)
	putLUN(h, f.LUN)
	h.SetITT(f.ITT)
	h.setWord(20, f.ReferencedTaskTag)
	h.setWord(offsetInitiatorCmdSN, f.CmdSN)
	h.setWord(offsetInitiatorExpStatSN, f.ExpStatSN)
	h.setWord(32, f.RefCmdSN)
	h.setWord(36, f.ExpDataSN)
}

// Fields decodes the request.
func (t TaskMgmtRequest) Fields() TaskMgmtRequestFields {
	h := BHS(t)
	return TaskMgmtRequestFields{Immediate: h.Immediate(), Function: t.Function(), LUN: h.LUN(), ITT: h.ITT(),
		ReferencedTaskTag: h.word(20), CmdSN: h.word(offsetInitiatorCmdSN),
		ExpStatSN: h.word(offsetInitiatorExpStatSN), RefCmdSN: h.word(32), ExpDataSN: h.word(36)}
}

// TaskMgmtResponse is a view of a Task Management Function Response BHS
// (opcode 0x22, struct iscsi_tm_rsp).
type TaskMgmtResponse []byte

// TaskMgmtResponseFields holds the fields of a TMF response.
type TaskMgmtResponseFields struct {
	Response uint8 // TMFComplete...
	ITT      uint32
	StatSN   uint32
	ExpCmdSN uint32
	MaxCmdSN uint32
}

// BHS returns the common header view.
func (t TaskMgmtResponse) BHS() BHS { return BHS(t) }

// Response returns the response code.
func (t TaskMgmtResponse) Response() uint8 { return t[2] }

// Encode writes the response.
func (t TaskMgmtResponse) Encode(f *TaskMgmtResponseFields) {
	h := BHS(t)
	h.header(OpTaskMgmtResponse, false, flagFinal)
	t[2] = f.Response
	h.SetITT(f.ITT)
	h.setWord(OffsetStatSN, f.StatSN)
	h.setWord(OffsetExpCmdSN, f.ExpCmdSN)
	h.setWord(OffsetMaxCmdSN, f.MaxCmdSN)
}

// Fields decodes the response.
func (t TaskMgmtResponse) Fields() TaskMgmtResponseFields {
	h := BHS(t)
	return TaskMgmtResponseFields{Response: t[2], ITT: h.ITT(), StatSN: h.word(OffsetStatSN),
		ExpCmdSN: h.word(OffsetExpCmdSN), MaxCmdSN: h.word(OffsetMaxCmdSN)}
}

// NOPOut is a view of a NOP-Out BHS (opcode 0x00, struct iscsi_nopout).
type NOPOut []byte

// NOPOutFields holds the fields of a NOP-Out.
type NOPOutFields struct {
	// Immediate NOP-Outs do not consume a CmdSN; non-immediate ones do,
	// and the target must advance ExpCmdSN for them.
	Immediate bool
	LUN       uint64
	// ITT is ReservedTag for a NOP-Out answering a NOP-In ping.
	ITT uint32
	// TTT echoes the NOP-In's TTT in an answer, ReservedTag otherwise.
	TTT       uint32
	CmdSN     uint32
	ExpStatSN uint32
}

// BHS returns the common header view.
func (n NOPOut) BHS() BHS { return BHS(n) }

// TTT returns the Target Transfer Tag.
func (n NOPOut) TTT() uint32 { return BHS(n).word(OffsetTTT) }

// CmdSN returns the command sequence number.
func (n NOPOut) CmdSN() uint32 { return BHS(n).word(offsetInitiatorCmdSN) }

// ExpStatSN returns the acknowledged StatSN.
func (n NOPOut) ExpStatSN() uint32 { return BHS(n).word(offsetInitiatorExpStatSN) }

// Encode writes the NOP-Out.
func (n NOPOut) Encode(f *NOPOutFields) {
	h := BHS(n)
	h.header(OpNOPOut, f.Immediate, flagFinal)
	putLUN(h, f.LUN)
	h.SetITT(f.ITT)
	h.setWord(OffsetTTT, f.TTT)
	h.setWord(offsetInitiatorCmdSN, f.CmdSN)
	h.setWord(offsetInitiatorExpStatSN, f.ExpStatSN)
}

// Fields decodes the NOP-Out.
func (n NOPOut) Fields() NOPOutFields {
	h := BHS(n)
	return NOPOutFields{Immediate: h.Immediate(), LUN: h.LUN(), ITT: h.ITT(), TTT: h.word(OffsetTTT),
		CmdSN: h.word(offsetInitiatorCmdSN), ExpStatSN: h.word(offsetInitiatorExpStatSN)}
}

// NOPIn is a view of a NOP-In BHS (opcode 0x20, struct iscsi_nopin).
type NOPIn []byte

// NOPInFields holds the fields of a NOP-In.
type NOPInFields struct {
	LUN uint64
	// ITT echoes the NOP-Out's ITT in an answer; ReservedTag for a ping
	// the target starts.
	ITT uint32
	// TTT is ReservedTag in an answer; a ping that wants an answer
	// carries another value, which the NOP-Out echoes.
	TTT uint32
	// StatSN advances only in an answer to a NOP-Out (ITT not
	// ReservedTag).
	StatSN   uint32
	ExpCmdSN uint32
	MaxCmdSN uint32
}

// BHS returns the common header view.
func (n NOPIn) BHS() BHS { return BHS(n) }

// TTT returns the Target Transfer Tag.
func (n NOPIn) TTT() uint32 { return BHS(n).word(OffsetTTT) }

// StatSN returns the status sequence number.
func (n NOPIn) StatSN() uint32 { return BHS(n).word(OffsetStatSN) }

// Encode writes the NOP-In.
func (n NOPIn) Encode(f *NOPInFields) {
	h := BHS(n)
	h.header(OpNOPIn, false, flagFinal)
	putLUN(h, f.LUN)
	h.SetITT(f.ITT)
	h.setWord(OffsetTTT, f.TTT)
	h.setWord(OffsetStatSN, f.StatSN)
	h.setWord(OffsetExpCmdSN, f.ExpCmdSN)
	h.setWord(OffsetMaxCmdSN, f.MaxCmdSN)
}

// Fields decodes the NOP-In.
func (n NOPIn) Fields() NOPInFields {
	h := BHS(n)
	return NOPInFields{LUN: h.LUN(), ITT: h.ITT(), TTT: h.word(OffsetTTT), StatSN: h.word(OffsetStatSN),
		ExpCmdSN: h.word(OffsetExpCmdSN), MaxCmdSN: h.word(OffsetMaxCmdSN)}
}

// LogoutReason is the reason code of a Logout Request
// (ISCSI_LOGOUT_REASON_*).
type LogoutReason uint8

// Logout reasons.
const (
	LogoutCloseSession    LogoutReason = 0 // close the session
	LogoutCloseConnection LogoutReason = 1 // close the connection
	LogoutRecovery        LogoutReason = 2 // remove the connection for recovery
)

// Logout response codes (ISCSI_LOGOUT_*).
const (
	LogoutSuccess             uint8 = 0 // connection or session closed successfully
	LogoutCIDNotFound         uint8 = 1 // CID not found
	LogoutRecoveryUnsupported uint8 = 2 // connection recovery is not supported
	LogoutCleanupFailed       uint8 = 3 // cleanup failed for various reasons
)

// LogoutRequest is a view of a Logout Request BHS (opcode 0x06, struct
// iscsi_logout).
type LogoutRequest []byte

// LogoutRequestFields holds the fields of a Logout Request.
type LogoutRequestFields struct {
	Immediate bool
	Reason    LogoutReason
	ITT       uint32
	CID       uint16 // connection to close (reasons 1 and 2)
	CmdSN     uint32
	ExpStatSN uint32
}

// BHS returns the common header view.
func (l LogoutRequest) BHS() BHS { return BHS(l) }

// Reason returns the reason code.
func (l LogoutRequest) Reason() LogoutReason { return LogoutReason(l[1] & logoutReasonMask) }

// CID returns the connection ID.
func (l LogoutRequest) CID() uint16 { return binary.BigEndian.Uint16(l[20:]) }

// CmdSN returns the command sequence number.
func (l LogoutRequest) CmdSN() uint32 { return BHS(l).word(offsetInitiatorCmdSN) }

// Encode writes the request.
func (l LogoutRequest) Encode(f *LogoutRequestFields) {
	h := BHS(l)
	h.header(OpLogoutRequest, f.Immediate, flagFinal|uint8(f.Reason)&logoutReasonMask)
	h.SetITT(f.ITT)
	binary.BigEndian.PutUint16(l[20:], f.CID)
	h.setWord(offsetInitiatorCmdSN, f.CmdSN)
	h.setWord(offsetInitiatorExpStatSN, f.ExpStatSN)
}

// Fields decodes the request.
func (l LogoutRequest) Fields() LogoutRequestFields {
	h := BHS(l)
	return LogoutRequestFields{Immediate: h.Immediate(), Reason: l.Reason(), ITT: h.ITT(), CID: l.CID(),
		CmdSN: h.word(offsetInitiatorCmdSN), ExpStatSN: h.word(offsetInitiatorExpStatSN)}
}

// LogoutResponse is a view of a Logout Response BHS (opcode 0x26, struct
// iscsi_logout_rsp).
type LogoutResponse []byte

// LogoutResponseFields holds the fields of a Logout Response.
type LogoutResponseFields struct {
	Response    uint8 // LogoutSuccess...
	ITT         uint32
	StatSN      uint32
	ExpCmdSN    uint32
	MaxCmdSN    uint32
	Time2Wait   uint16
	Time2Retain uint16
}

// BHS returns the common header view.
func (l LogoutResponse) BHS() BHS { return BHS(l) }

// Response returns the response code.
func (l LogoutResponse) Response() uint8 { return l[2] }

// Encode writes the response.
func (l LogoutResponse) Encode(f *LogoutResponseFields) {
	h := BHS(l)
	h.header(OpLogoutResponse, false, flagFinal)
	l[2] = f.Response
	h.SetITT(f.ITT)
	h.setWord(OffsetStatSN, f.StatSN)
	h.setWord(OffsetExpCmdSN, f.ExpCmdSN)
	h.setWord(OffsetMaxCmdSN, f.MaxCmdSN)
	binary.BigEndian.PutUint16(l[40:], f.Time2Wait)
	binary.BigEndian.PutUint16(l[42:], f.Time2Retain)
}

// Fields decodes the response.
func (l LogoutResponse) Fields() LogoutResponseFields {
	h := BHS(l)
	return LogoutResponseFields{Response: l[2], ITT: h.ITT(), StatSN: h.word(OffsetStatSN),
		ExpCmdSN: h.word(OffsetExpCmdSN), MaxCmdSN: h.word(OffsetMaxCmdSN),
		Time2Wait: binary.BigEndian.Uint16(l[40:]), Time2Retain: binary.BigEndian.Uint16(l[42:])}
}

// AsyncEvent is an Asynchronous Message event code (ISCSI_ASYNC_MSG_*).
type AsyncEvent uint8

// Asynchronous events.
const (
	AsyncSCSIEvent              AsyncEvent = 0   // SCSI asynchronous event, sense data follows
	AsyncRequestLogout          AsyncEvent = 1   // target requests a logout
	AsyncDroppingConnection     AsyncEvent = 2   // target will drop the connection
	AsyncDroppingAllConnections AsyncEvent = 3   // target will drop all connections
	AsyncParamNegotiation       AsyncEvent = 4   // target requests renegotiation
	AsyncVendorSpecific         AsyncEvent = 255 // vendor specific
)

// AsyncMessage is a view of an Asynchronous Message BHS (opcode 0x32,
// struct iscsi_async).
type AsyncMessage []byte

// AsyncMessageFields holds the fields of an Asynchronous Message. Encode
// sets the ITT to ReservedTag, as RFC 7143 requires.
type AsyncMessageFields struct {
	LUN        uint64
	StatSN     uint32
	ExpCmdSN   uint32
	MaxCmdSN   uint32
	Event      AsyncEvent
	VendorCode uint8
	Parameter1 uint16
	Parameter2 uint16
	Parameter3 uint16
}

// BHS returns the common header view.
func (a AsyncMessage) BHS() BHS { return BHS(a) }

// Event returns the event code.
func (a AsyncMessage) Event() AsyncEvent { return AsyncEvent(a[36]) }

// Encode writes the message.
func (a AsyncMessage) Encode(f *AsyncMessageFields) {
	h := BHS(a)
	h.header(OpAsyncMessage, false, flagFinal)
	putLUN(h, f.LUN)
	h.SetITT(ReservedTag)
	h.setWord(OffsetStatSN, f.StatSN)
	h.setWord(OffsetExpCmdSN, f.ExpCmdSN)
	h.setWord(OffsetMaxCmdSN, f.MaxCmdSN)
	a[36], a[37] = uint8(f.Event), f.VendorCode
	binary.BigEndian.PutUint16(a[38:], f.Parameter1)
	binary.BigEndian.PutUint16(a[40:], f.Parameter2)
	binary.BigEndian.PutUint16(a[42:], f.Parameter3)
}

// Fields decodes the message.
func (a AsyncMessage) Fields() AsyncMessageFields {
	h := BHS(a)
	return AsyncMessageFields{LUN: h.LUN(), StatSN: h.word(OffsetStatSN), ExpCmdSN: h.word(OffsetExpCmdSN),
		MaxCmdSN: h.word(OffsetMaxCmdSN), Event: AsyncEvent(a[36]), VendorCode: a[37],
		Parameter1: binary.BigEndian.Uint16(a[38:]), Parameter2: binary.BigEndian.Uint16(a[40:]),
		Parameter3: binary.BigEndian.Uint16(a[42:])}
}

// RejectReason is the reason code of a Reject (ISCSI_REASON_*).
type RejectReason uint8

// Reject reasons.
const (
	RejectDataDigestError  RejectReason = 0x02 // data (payload) digest error
	RejectSNACKReject      RejectReason = 0x03 // SNACK reject
	RejectProtocolError    RejectReason = 0x04 // protocol error
	RejectCmdNotSupported  RejectReason = 0x05 // command not supported
	RejectImmCmdReject     RejectReason = 0x06 // immediate command reject, too many
	RejectTaskInProgress   RejectReason = 0x07 // task in progress
	RejectInvalidDataAck   RejectReason = 0x08 // invalid data ack
	RejectInvalidPDUField  RejectReason = 0x09 // invalid PDU field
	RejectOutOfResources   RejectReason = 0x0a // long operation reject, out of resources
	RejectNegotiationReset RejectReason = 0x0b // deprecated in RFC 7143
	RejectWaitingForLogout RejectReason = 0x0c // waiting for logout
)

// Reject is a view of a Reject BHS (opcode 0x3f, struct iscsi_reject). Its
// data segment is the complete header (BHS and AHS) of the rejected PDU.
// At ErrorRecoveryLevel 0 a target answers a SNACK Request with a Reject
// with RejectProtocolError, as Linux LIO does.
type Reject []byte

// RejectFields holds the fields of a Reject. Encode sets the bytes 16-19 to
// ReservedTag, as RFC 7143 requires.
type RejectFields struct {
	Reason   RejectReason
	StatSN   uint32
	ExpCmdSN uint32
	MaxCmdSN uint32
	DataSN   uint32 // DataSN or R2TSN of a rejected data SNACK, else 0
}

// BHS returns the common header view.
func (r Reject) BHS() BHS { return BHS(r) }

// Reason returns the reason code.
func (r Reject) Reason() RejectReason { return RejectReason(r[2]) }

// Encode writes the Reject.
func (r Reject) Encode(f *RejectFields) {
	h := BHS(r)
	h.header(OpReject, false, flagFinal)
	r[2] = uint8(f.Reason)
	h.SetITT(ReservedTag)
	h.setWord(OffsetStatSN, f.StatSN)
	h.setWord(OffsetExpCmdSN, f.ExpCmdSN)
	h.setWord(OffsetMaxCmdSN, f.MaxCmdSN)
	h.setWord(OffsetDataSN, f.DataSN)
}

// Fields decodes the Reject.
func (r Reject) Fields() RejectFields {
	h := BHS(r)
	return RejectFields{Reason: RejectReason(r[2]), StatSN: h.word(OffsetStatSN),
		ExpCmdSN: h.word(OffsetExpCmdSN), MaxCmdSN: h.word(OffsetMaxCmdSN), DataSN: h.word(OffsetDataSN)}
}

// SNACKType is the type of a SNACK Request.
type SNACKType uint8

// SNACK types.
const (
	SNACKData     SNACKType = 0 // Data/R2T SNACK
	SNACKStatus   SNACKType = 1 // status SNACK
	SNACKDataAck  SNACKType = 2 // DataACK
	SNACKRDataACK SNACKType = 3 // R-Data SNACK
)

// SNACK is a view of a SNACK Request BHS (opcode 0x10), laid out as RFC 7143
// section 11.16 (Linux struct iscsi_snack still has a draft layout). This
// package negotiates ErrorRecoveryLevel 0 only, where a target answers a
// SNACK with a Reject; the view exists to parse and log it.
type SNACK []byte

// SNACKFields holds the fields of a SNACK Request.
type SNACKFields struct {
	Type      SNACKType
	LUN       uint64
	ITT       uint32
	TTT       uint32 // TTT or SNACK Tag
	ExpStatSN uint32
	BegRun    uint32
	RunLength uint32
}

// BHS returns the common header view.
func (s SNACK) BHS() BHS { return BHS(s) }

// Type returns the SNACK type.
func (s SNACK) Type() SNACKType { return SNACKType(s[1] & snackTypeMask) }

// Encode writes the SNACK Request.
func (s SNACK) Encode(f *SNACKFields) {
	h := BHS(s)
	h.header(OpSNACKRequest, false, flagFinal|uint8(f.Type)&snackTypeMask)
	putLUN(h, f.LUN)
	h.SetITT(f.ITT)
	h.setWord(OffsetTTT, f.TTT)
	h.setWord(offsetInitiatorExpStatSN, f.ExpStatSN)
	h.setWord(40, f.BegRun)
	h.setWord(44, f.RunLength)
}

// Fields decodes the SNACK Request.
func (s SNACK) Fields() SNACKFields {
	h := BHS(s)
	return SNACKFields{Type: s.Type(), LUN: h.LUN(), ITT: h.ITT(), TTT: h.word(OffsetTTT),
		ExpStatSN: h.word(offsetInitiatorExpStatSN), BegRun: h.word(40), RunLength: h.word(44)}
}
