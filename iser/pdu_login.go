package iser

import (
	"encoding/binary"
	"strconv"
)

// Views of the Login and Text PDUs.

// Stage is a login stage, the value of the CSG and NSG fields.
type Stage uint8

// Login stages (ISCSI_SECURITY_NEGOTIATION_STAGE...). 2 is reserved.
const (
	StageSecurity    Stage = 0 // SecurityNegotiation
	StageOperational Stage = 1 // LoginOperationalNegotiation
	StageFullFeature Stage = 3 // FullFeaturePhase
)

// String returns the RFC 7143 name of the stage.
func (s Stage) String() string {
	switch s {
	case StageSecurity:
		return "SecurityNegotiation"
	case StageOperational:
		return "LoginOperationalNegotiation"
	case StageFullFeature:
		return "FullFeaturePhase"
	}
	return "stage " + strconv.Itoa(int(s))
}

// Login flags (byte 1).
const (
	LoginFlagTransit  uint8 = 0x80 // ISCSI_FLAG_LOGIN_TRANSIT (T)
	LoginFlagContinue uint8 = 0x40 // ISCSI_FLAG_LOGIN_CONTINUE (C)
	loginCSGMask      uint8 = 0x0c // ISCSI_FLAG_LOGIN_CURRENT_STAGE_MASK
	loginNSGMask      uint8 = 0x03 // ISCSI_FLAG_LOGIN_NEXT_STAGE_MASK
)

// Text flags (byte 1).
const (
	TextFlagFinal    uint8 = 0x80 // F
	TextFlagContinue uint8 = 0x40 // ISCSI_FLAG_TEXT_CONTINUE (C)
)

// ISID is the 6-byte initiator part of the session identifier.
type ISID [6]byte

// Offsets of the Login Request and Response fields (struct iscsi_login,
// struct iscsi_login_rsp).
const (
	OffsetLoginVersionMax    = 2  // max_version
	OffsetLoginVersionMin    = 3  // min_version (request), active_version (response)
	OffsetLoginISID          = 8  // isid[6]
	OffsetLoginTSIH          = 14 // tsih
	OffsetLoginCID           = 20 // cid (request)
	OffsetLoginStatusClass   = 36 // status_class (response)
	OffsetLoginStatusDetail  = 37 // status_detail (response)
	loginVersion             = 0x00
	offsetLoginRequestCmdSN  = 24
	offsetLoginRequestExpSSN = 28
)

// LoginRequest is a view of a Login Request BHS (opcode 0x03, always with
// the I bit).
type LoginRequest []byte

// LoginRequestFields holds the fields of a Login Request.
type LoginRequestFields struct {
	Transit    bool // T
	Continue   bool // C: the text continues in the next PDU
	CSG        Stage
	NSG        Stage // meaningful with Transit
	VersionMax uint8
	VersionMin uint8
	ISID       ISID
	TSIH       uint16
	ITT        uint32
	CID        uint16
	CmdSN      uint32
	ExpStatSN  uint32
}

// BHS returns the common header view.
func (l LoginRequest) BHS() BHS { return BHS(l) }

// Transit reports the T bit.
func (l LoginRequest) Transit() bool { return l[1]&LoginFlagTransit != 0 }

// Continue reports the C bit.
func (l LoginRequest) Continue() bool { return l[1]&LoginFlagContinue != 0 }

// CSG returns the current stage.
func (l LoginRequest) CSG() Stage { return Stage(l[1]&loginCSGMask) >> 2 }

// NSG returns the next stage.
func (l LoginRequest) NSG() Stage { return Stage(l[1] & loginNSGMask) }

// ISID returns the initiator session ID.
func (l LoginRequest) ISID() ISID { return ISID(l[OffsetLoginISID : OffsetLoginISID+6]) }

// TSIH returns the target session identifying handle (0 for a new session).
func (l LoginRequest) TSIH() uint16 { return binary.BigEndian.Uint16(l[OffsetLoginTSIH:]) }

// CID returns the connection ID.
func (l LoginRequest) CID() uint16 { return binary.BigEndian.Uint16(l[OffsetLoginCID:]) }

// CmdSN returns the initial command sequence number.
func (l LoginRequest) CmdSN() uint32 { return BHS(l).word(offsetLoginRequestCmdSN) }

// ExpStatSN returns the acknowledged StatSN.
func (l LoginRequest) ExpStatSN() uint32 { return BHS(l).word(offsetLoginRequestExpSSN) }

// Encode writes the request; the I bit is always set.
func (l LoginRequest) Encode(f *LoginRequestFields) {
	h := BHS(l)
	h.header(OpLoginRequest, true, loginFlags(f.Transit, f.Continue, f.CSG, f.NSG))
	l[OffsetLoginVersionMax], l[OffsetLoginVersionMin] = f.VersionMax, f.VersionMin
	copy(l[OffsetLoginISID:], f.ISID[:])
	binary.BigEndian.PutUint16(l[OffsetLoginTSIH:], f.TSIH)
	h.SetITT(f.ITT)
	binary.BigEndian.PutUint16(l[OffsetLoginCID:], f.CID)
	h.setWord(offsetLoginRequestCmdSN, f.CmdSN)
	h.setWord(offsetLoginRequestExpSSN, f.ExpStatSN)
}

// Fields decodes the request.
func (l LoginRequest) Fields() LoginRequestFields {
	return LoginRequestFields{Transit: l.Transit(), Continue: l.Continue(), CSG: l.CSG(), NSG: l.NSG(),
		VersionMax: l[OffsetLoginVersionMax], VersionMin: l[OffsetLoginVersionMin], ISID: l.ISID(),
		TSIH: l.TSIH(), ITT: BHS(l).ITT(), CID: l.CID(), CmdSN: l.CmdSN(), ExpStatSN: l.ExpStatSN()}
}

func loginFlags(transit, cont bool, csg, nsg Stage) uint8 {
	f := uint8(csg)<<2&loginCSGMask | uint8(nsg)&loginNSGMask
	if transit {
		f |= LoginFlagTransit
	}
	if cont {
		f |= LoginFlagContinue
	}
	return f
}

// LoginResponse is a view of a Login Response BHS (opcode 0x23).
type LoginResponse []byte

// LoginResponseFields holds the fields of a Login Response.
type LoginResponseFields struct {
	Transit       bool
	Continue      bool
	CSG           Stage
	NSG           Stage
	VersionMax    uint8
	VersionActive uint8
	ISID          ISID
	TSIH          uint16 // assigned in the final response of a new session
	ITT           uint32
	StatSN        uint32
	ExpCmdSN      uint32
	MaxCmdSN      uint32
	Status        LoginStatus
}

// BHS returns the common header view.
func (l LoginResponse) BHS() BHS { return BHS(l) }

// Transit reports the T bit.
func (l LoginResponse) Transit() bool { return l[1]&LoginFlagTransit != 0 }

// Continue reports the C bit.
func (l LoginResponse) Continue() bool { return l[1]&LoginFlagContinue != 0 }

// CSG returns the current stage.
func (l LoginResponse) CSG() Stage { return Stage(l[1]&loginCSGMask) >> 2 }

// NSG returns the next stage.
func (l LoginResponse) NSG() Stage { return Stage(l[1] & loginNSGMask) }

// TSIH returns the target session identifying handle.
func (l LoginResponse) TSIH() uint16 { return binary.BigEndian.Uint16(l[OffsetLoginTSIH:]) }

// StatSN returns the status sequence number (valid with status 0).
func (l LoginResponse) StatSN() uint32 { return BHS(l).word(OffsetStatSN) }

// Status returns Status-Class and Status-Detail.
func (l LoginResponse) Status() LoginStatus {
	return LoginStatus(l[OffsetLoginStatusClass])<<8 | LoginStatus(l[OffsetLoginStatusDetail])
}

// Encode writes the response.
func (l LoginResponse) Encode(f *LoginResponseFields) {
	h := BHS(l)
	h.header(OpLoginResponse, false, loginFlags(f.Transit, f.Continue, f.CSG, f.NSG))
	l[OffsetLoginVersionMax], l[OffsetLoginVersionMin] = f.VersionMax, f.VersionActive
	copy(l[OffsetLoginISID:], f.ISID[:])
	binary.BigEndian.PutUint16(l[OffsetLoginTSIH:], f.TSIH)
	h.SetITT(f.ITT)
	h.setWord(OffsetStatSN, f.StatSN)
	h.setWord(OffsetExpCmdSN, f.ExpCmdSN)
	h.setWord(OffsetMaxCmdSN, f.MaxCmdSN)
	l[OffsetLoginStatusClass], l[OffsetLoginStatusDetail] = f.Status.Class(), f.Status.Detail()
}

// Fields decodes the response.
func (l LoginResponse) Fields() LoginResponseFields {
	h := BHS(l)
	return LoginResponseFields{Transit: l.Transit(), Continue: l.Continue(), CSG: l.CSG(), NSG: l.NSG(),
		VersionMax: l[OffsetLoginVersionMax], VersionActive: l[OffsetLoginVersionMin],
		ISID: ISID(l[OffsetLoginISID : OffsetLoginISID+6]), TSIH: l.TSIH(), ITT: h.ITT(),
		StatSN: h.word(OffsetStatSN), ExpCmdSN: h.word(OffsetExpCmdSN), MaxCmdSN: h.word(OffsetMaxCmdSN),
		Status: l.Status()}
}

// TextRequest is a view of a Text Request BHS (opcode 0x04, struct
// iscsi_text).
type TextRequest []byte

// TextRequestFields holds the fields of a Text Request.
type TextRequestFields struct {
	Immediate bool
	Final     bool
	Continue  bool
	LUN       uint64
	ITT       uint32
	// TTT is ReservedTag to start a new exchange and echoes the target's
	// TTT to continue one.
	TTT       uint32
	CmdSN     uint32
	ExpStatSN uint32
}

// BHS returns the common header view.
func (t TextRequest) BHS() BHS { return BHS(t) }

// Continue reports the C bit.
func (t TextRequest) Continue() bool { return t[1]&TextFlagContinue != 0 }

// TTT returns the Target Transfer Tag.
func (t TextRequest) TTT() uint32 { return BHS(t).word(OffsetTTT) }

// CmdSN returns the command sequence number.
func (t TextRequest) CmdSN() uint32 { return BHS(t).word(offsetInitiatorCmdSN) }

// Encode writes the request.
func (t TextRequest) Encode(f *TextRequestFields) {
	h := BHS(t)
	h.header(OpTextRequest, f.Immediate, textFlags(f.Final, f.Continue))
	putLUN(h, f.LUN)
	h.SetITT(f.ITT)
	h.setWord(OffsetTTT, f.TTT)
	h.setWord(offsetInitiatorCmdSN, f.CmdSN)
	h.setWord(offsetInitiatorExpStatSN, f.ExpStatSN)
}

// Fields decodes the request.
func (t TextRequest) Fields() TextRequestFields {
	h := BHS(t)
	return TextRequestFields{Immediate: h.Immediate(), Final: h.Final(), Continue: t.Continue(), LUN: h.LUN(),
		ITT: h.ITT(), TTT: h.word(OffsetTTT), CmdSN: h.word(offsetInitiatorCmdSN),
		ExpStatSN: h.word(offsetInitiatorExpStatSN)}
}

func textFlags(final, cont bool) uint8 {
	var f uint8
	if final {
		f |= TextFlagFinal
	}
	if cont {
		f |= TextFlagContinue
	}
	return f
}

// TextResponse is a view of a Text Response BHS (opcode 0x24, struct
// iscsi_text_rsp).
type TextResponse []byte

// TextResponseFields holds the fields of a Text Response.
type TextResponseFields struct {
	Final    bool
	Continue bool
	LUN      uint64
	ITT      uint32
	// TTT is ReservedTag in the final response and another value when
	// the target has more to send.
	TTT      uint32
	StatSN   uint32
	ExpCmdSN uint32
	MaxCmdSN uint32
}

// BHS returns the common header view.
func (t TextResponse) BHS() BHS { return BHS(t) }

// Continue reports the C bit.
func (t TextResponse) Continue() bool { return t[1]&TextFlagContinue != 0 }

// TTT returns the Target Transfer Tag.
func (t TextResponse) TTT() uint32 { return BHS(t).word(OffsetTTT) }

// Encode writes the response.
func (t TextResponse) Encode(f *TextResponseFields) {
	h := BHS(t)
	h.header(OpTextResponse, false, textFlags(f.Final, f.Continue))
	putLUN(h, f.LUN)
	h.SetITT(f.ITT)
	h.setWord(OffsetTTT, f.TTT)
	h.setWord(OffsetStatSN, f.StatSN)
	h.setWord(OffsetExpCmdSN, f.ExpCmdSN)
	h.setWord(OffsetMaxCmdSN, f.MaxCmdSN)
}

// Fields decodes the response.
func (t TextResponse) Fields() TextResponseFields {
	h := BHS(t)
	return TextResponseFields{Final: h.Final(), Continue: t.Continue(), LUN: h.LUN(), ITT: h.ITT(),
		TTT: h.word(OffsetTTT), StatSN: h.word(OffsetStatSN), ExpCmdSN: h.word(OffsetExpCmdSN),
		MaxCmdSN: h.word(OffsetMaxCmdSN)}
}
