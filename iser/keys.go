package iser

import (
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"
)

// keyID numbers the keys the negotiation engine knows: every RFC 7143 login
// and text key, the obsolete RFC 3720 marker keys and the RFC 7145 iSER
// keys. The CHAP keys are handled by the authentication code, not here.
type keyID uint8

const (
	kAuthMethod keyID = iota
	kHeaderDigest
	kDataDigest
	kMaxConnections
	kSendTargets
	kTargetName
	kInitiatorName
	kTargetAlias
	kInitiatorAlias
	kTargetAddress
	kTargetPortalGroupTag
	kInitialR2T
	kImmediateData
	kMaxRecvDataSegmentLength
	kMaxBurstLength
	kFirstBurstLength
	kDefaultTime2Wait
	kDefaultTime2Retain
	kMaxOutstandingR2T
	kDataPDUInOrder
	kDataSequenceInOrder
	kErrorRecoveryLevel
	kSessionType
	kTaskReporting
	kProtocolLevel
	kNodeArchitecture
	kIFMarker
	kOFMarker
	kIFMarkInt
	kOFMarkInt
	kRDMAExtensions
	kTargetRecvDataSegmentLength
	kInitiatorRecvDataSegmentLength
	kMaxOutstandingUnexpectedPDUs
	numKeys
)

// keyKind is a key's negotiation type and result function (RFC 7143
// section 6.2 and the key definitions of section 13).
type keyKind uint8

const (
	kindBoolAnd  keyKind = iota + 1 // Boolean, result AND
	kindBoolOr                      // Boolean, result OR
	kindMin                         // numerical, result minimum
	kindMax                         // numerical, result maximum
	kindList                        // list negotiation: first offered value the responder supports
	kindDecl                        // declarative string
	kindDeclNum                     // declarative number
	kindObsolete                    // RFC 3720 marker keys: answered Reject (RFC 7143 section 13.25)
)

// Who may send a key.
const (
	fromInitiator uint8 = 1 << iota
	fromTarget
	fromBoth = fromInitiator | fromTarget
)

// Where a key may appear.
const (
	inSecurity uint8 = 1 << iota
	inOperational
	inFullFeature
	inLogin = inSecurity | inOperational
)

// keyDef describes one key.
type keyDef struct {
	name    string
	kind    keyKind
	min     uint64 // numerical range
	max     uint64
	def     string // default value (RFC 7143 and RFC 7145)
	senders uint8
	stages  uint8
	// discIrrelevant marks the keys RFC 7143 makes irrelevant in a
	// discovery session; rdma the RFC 7145 keys irrelevant unless
	// RDMAExtensions=Yes.
	discIrrelevant bool
	rdma           bool
}

func lookupKey(name string) (keyID, bool) {
	for id := keyID(0); id < numKeys; id++ {
		if def(id).name == name {
			return id, true
		}
	}
	return 0, false
}

// def returns the definition of a key. A switch instead of a table keeps
// the package free of package-level variables.
func def(id keyID) keyDef {
	const maxSeg = MaxDataSegmentLength
	switch id {
	case kAuthMethod:
		return keyDef{name: "AuthMethod", kind: kindList, def: ValueNone, senders: fromBoth, stages: inSecurity}
	case kHeaderDigest:
		return keyDef{name: "HeaderDigest", kind: kindList, def: ValueNone, senders: fromBoth, stages: inOperational}
	case kDataDigest:
		return keyDef{name: "DataDigest", kind: kindList, def: ValueNone, senders: fromBoth, stages: inOperational}
	case kMaxConnections:
		return keyDef{name: "MaxConnections", kind: kindMin, min: 1, max: 65535, def: "1", senders: fromBoth,
			stages: inOperational, discIrrelevant: true}
	case kSendTargets:
		return keyDef{name: "SendTargets", kind: kindDecl, senders: fromInitiator, stages: inFullFeature}
	case kTargetName:
		return keyDef{name: "TargetName", kind: kindDecl, senders: fromBoth, stages: inLogin | inFullFeature}
	case kInitiatorName:
		return keyDef{name: "InitiatorName", kind: kindDecl, senders: fromInitiator, stages: inLogin}
	case kTargetAlias:
		return keyDef{name: "TargetAlias", kind: kindDecl, senders: fromTarget, stages: inLogin | inFullFeature}
	case kInitiatorAlias:
		return keyDef{name: "InitiatorAlias", kind: kindDecl, senders: fromInitiator, stages: inLogin | inFullFeature}
	case kTargetAddress:
		return keyDef{name: "TargetAddress", kind: kindDecl, senders: fromTarget, stages: inLogin | inFullFeature}
	case kTargetPortalGroupTag:
		return keyDef{name: "TargetPortalGroupTag", kind: kindDeclNum, max: 65535, senders: fromTarget, stages: inLogin}
	case kInitialR2T:
		return keyDef{name: "InitialR2T", kind: kindBoolOr, def: ValueYes, senders: fromBoth, stages: inOperational,
			discIrrelevant: true}
	case kImmediateData:
		return keyDef{name: "ImmediateData", kind: kindBoolAnd, def: ValueYes, senders: fromBoth,
			stages: inOperational, discIrrelevant: true}
	case kMaxRecvDataSegmentLength:
		return keyDef{name: "MaxRecvDataSegmentLength", kind: kindDeclNum, min: 512, max: maxSeg, def: "8192",
			senders: fromBoth, stages: inOperational | inFullFeature}
	case kMaxBurstLength:
		return keyDef{name: "MaxBurstLength", kind: kindMin, min: 512, max: maxSeg, def: "262144", senders: fromBoth,
			stages: inOperational, discIrrelevant: true}
	case kFirstBurstLength:
		return keyDef{name: "FirstBurstLength", kind: kindMin, min: 512, max: maxSeg, def: "65536", senders: fromBoth,
			stages: inOperational, discIrrelevant: true}
	case kDefaultTime2Wait:
		return keyDef{name: "DefaultTime2Wait", kind: kindMax, max: 3600, def: "2", senders: fromBoth, stages: inOperational}
	case kDefaultTime2Retain:
		return keyDef{name: "DefaultTime2Retain", kind: kindMin, max: 3600, def: "20", senders: fromBoth, stages: inOperational}
	case kMaxOutstandingR2T:
		return keyDef{name: "MaxOutstandingR2T", kind: kindMin, min: 1, max: 65535, def: "1", senders: fromBoth,
			stages: inOperational, discIrrelevant: true}
	case kDataPDUInOrder:
		return keyDef{name: "DataPDUInOrder", kind: kindBoolOr, def: ValueYes, senders: fromBoth,
			stages: inOperational, discIrrelevant: true}
	case kDataSequenceInOrder:
		return keyDef{name: "DataSequenceInOrder", kind: kindBoolOr, def: ValueYes, senders: fromBoth,
			stages: inOperational, discIrrelevant: true}
	case kErrorRecoveryLevel:
		return keyDef{name: "ErrorRecoveryLevel", kind: kindMin, max: 2, def: "0", senders: fromBoth, stages: inOperational}
	case kSessionType:
		return keyDef{name: "SessionType", kind: kindDecl, def: SessionNormal.String(), senders: fromInitiator, stages: inLogin}
	case kTaskReporting:
		return keyDef{name: "TaskReporting", kind: kindList, def: "RFC3720", senders: fromBoth, stages: inOperational,
			discIrrelevant: true}
	case kProtocolLevel:
		return keyDef{name: "iSCSIProtocolLevel", kind: kindMin, max: 31, def: "1", senders: fromBoth, stages: inOperational}
	case kNodeArchitecture:
		return keyDef{name: "X#NodeArchitecture", kind: kindDecl, senders: fromBoth, stages: inLogin}
	case kIFMarker:
		return keyDef{name: "IFMarker", kind: kindObsolete, def: ValueNo, senders: fromBoth, stages: inOperational}
	case kOFMarker:
		return keyDef{name: "OFMarker", kind: kindObsolete, def: ValueNo, senders: fromBoth, stages: inOperational}
	case kIFMarkInt:
		return keyDef{name: "IFMarkInt", kind: kindObsolete, senders: fromBoth, stages: inOperational}
	case kOFMarkInt:
		return keyDef{name: "OFMarkInt", kind: kindObsolete, senders: fromBoth, stages: inOperational}
	case kRDMAExtensions:
		return keyDef{name: "RDMAExtensions", kind: kindBoolAnd, def: ValueNo, senders: fromBoth, stages: inOperational,
			discIrrelevant: true}
	case kTargetRecvDataSegmentLength:
		return keyDef{name: "TargetRecvDataSegmentLength", kind: kindMin, min: 512, max: maxSeg, def: "8192",
			senders: fromBoth, stages: inOperational, discIrrelevant: true, rdma: true}
	case kInitiatorRecvDataSegmentLength:
		return keyDef{name: "InitiatorRecvDataSegmentLength", kind: kindMin, min: 512, max: maxSeg, def: "8192",
			senders: fromBoth, stages: inOperational, discIrrelevant: true, rdma: true}
	case kMaxOutstandingUnexpectedPDUs:
		return keyDef{name: "MaxOutstandingUnexpectedPDUs", kind: kindDeclNum, max: 1<<32 - 1, def: "0",
			senders: fromBoth, stages: inOperational, discIrrelevant: true, rdma: true}
	}
	return keyDef{}
}

// parseNumber parses a numerical value: decimal, or hex with 0x/0X, or
// base64 with 0b/0B (RFC 7143 section 6.1), up to 64 bits.
func parseNumber(s string) (uint64, bool) {
	if len(s) == 0 || len(s) > MaxValueLength {
		return 0, false
	}
	if len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		v, err := strconv.ParseUint(s[2:], 16, 64)
		if err != nil {
			return 0, false
		}
		return v, true
	}
	if len(s) > 2 && s[0] == '0' && (s[1] == 'b' || s[1] == 'B') {
		b, err := base64.StdEncoding.DecodeString(s[2:])
		if err != nil || len(b) == 0 || len(b) > 8 {
			return 0, false
		}
		var v uint64
		for _, c := range b {
			v = v<<8 | uint64(c)
		}
		return v, true
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}

// numberIn parses a number and checks it against the key's range. The
// declarative MaxOutstandingUnexpectedPDUs takes 0 or 2 and up.
func numberIn(id keyID, s string) (uint64, bool) {
	v, ok := parseNumber(s)
	if !ok {
		return 0, false
	}
	d := def(id)
	if v < d.min || v > d.max {
		return 0, false
	}
	if id == kMaxOutstandingUnexpectedPDUs && v == 1 {
		return 0, false
	}
	return v, true
}

func parseBool(s string) (bool, bool) {
	switch s {
	case ValueYes:
		return true, true
	case ValueNo:
		return false, true
	}
	return false, false
}

func boolValue(b bool) string {
	if b {
		return ValueYes
	}
	return ValueNo
}

// listValues splits a list value; every element must be non-empty and at
// most 255 bytes.
func listValues(s string) ([]string, bool) {
	vs := strings.Split(s, ",")
	for _, v := range vs {
		if v == "" || len(v) > MaxValueLength || isSpecialValue(v) {
			return nil, false
		}
	}
	return vs, true
}

// decodeBinary decodes a binary value: 0x hex (an odd digit count gets a
// leading zero) or 0b base64.
func decodeBinary(s string) ([]byte, bool) {
	if len(s) < 3 || s[0] != '0' {
		return nil, false
	}
	switch s[1] {
	case 'x', 'X':
		h := s[2:]
		if len(h)%2 == 1 {
			h = "0" + h
		}
		b, err := hex.DecodeString(h)
		return b, err == nil
	case 'b', 'B':
		b, err := base64.StdEncoding.DecodeString(s[2:])
		return b, err == nil && len(b) > 0
	}
	return nil, false
}

// encodeBinary encodes b as a 0x hex value.
func encodeBinary(b []byte) string { return "0x" + hex.EncodeToString(b) }
