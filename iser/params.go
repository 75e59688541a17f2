package iser

import (
	"fmt"
	"strconv"
	"strings"
)

// SessionType is the SessionType key.
type SessionType uint8

// Session types.
const (
	SessionNormal    SessionType = 0
	SessionDiscovery SessionType = 1
)

// String returns the key value, "Normal" or "Discovery".
func (s SessionType) String() string {
	if s == SessionDiscovery {
		return "Discovery"
	}
	return "Normal"
}

// Transport is the transport a connection runs on. It decides which keys
// are relevant: RFC 7145's iSER keys and RDMAExtensions=Yes on iSER,
// digests and MaxRecvDataSegmentLength on TCP.
type Transport uint8

// Transports.
const (
	TransportTCP  Transport = 0 // iSCSI over TCP
	TransportISER Transport = 1 // iSER (RFC 7145) over an RDMA connection
)

// String names the transport.
func (t Transport) String() string {
	if t == TransportISER {
		return "iSER"
	}
	return "TCP"
}

// Digest is a HeaderDigest or DataDigest value.
type Digest uint8

// Digests.
const (
	DigestNone   Digest = 0
	DigestCRC32C Digest = 1
)

// String returns the key value, "None" or "CRC32C".
func (d Digest) String() string {
	if d == DigestCRC32C {
		return "CRC32C"
	}
	return ValueNone
}

func digestList(ds []Digest) string {
	if len(ds) == 0 {
		return ValueNone
	}
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = d.String()
	}
	return strings.Join(s, ",")
}

// Settings are one side's wishes for the operational keys: what an
// initiator offers, and what a target accepts (for numerical keys the
// largest or smallest value it takes, for lists the values it supports).
// Start from DefaultSettings and change what you need. ErrorRecoveryLevel
// is always 0 and MaxConnections always 1: that is what this package
// implements.
type Settings struct {
	// HeaderDigest and DataDigest list the digests in order of
	// preference (an initiator) or the digests supported (a target).
	// Empty means None only. Ignored on iSER, which has no digests.
	HeaderDigest []Digest
	DataDigest   []Digest
	// MaxRecvDataSegmentLength is the largest data segment this side
	// receives on TCP, declared to the peer.
	MaxRecvDataSegmentLength uint32
	MaxBurstLength           uint32
	FirstBurstLength         uint32
	// InitialR2T false lets the initiator send unsolicited Data-Out
	// (result OR: either side can insist on Yes).
	InitialR2T bool
	// ImmediateData allows data in the SCSI Command PDU (result AND).
	ImmediateData       bool
	MaxOutstandingR2T   uint16
	DefaultTime2Wait    uint16
	DefaultTime2Retain  uint16
	DataPDUInOrder      bool
	DataSequenceInOrder bool
	// InitiatorRecvDataSegmentLength and TargetRecvDataSegmentLength are
	// the RFC 7145 replacements of MaxRecvDataSegmentLength on iSER: the
	// largest control PDU data segment the initiator and the target
	// receive. Result function minimum.
	InitiatorRecvDataSegmentLength uint32
	TargetRecvDataSegmentLength    uint32
	// MaxOutstandingUnexpectedPDUs is declared on iSER when not zero: the
	// number of unsolicited PDUs this side can have outstanding from
	// its peer (0: no limit).
	MaxOutstandingUnexpectedPDUs uint32
}

// DefaultSettings returns the RFC 7143 defaults, with ImmediateData and
// InitialR2T=No allowed and 256 KiB data segments, which is what Linux
// initiators ask for.
func DefaultSettings() Settings {
	return Settings{
		HeaderDigest:                   []Digest{DigestNone, DigestCRC32C},
		DataDigest:                     []Digest{DigestNone, DigestCRC32C},
		MaxRecvDataSegmentLength:       262144,
		MaxBurstLength:                 262144,
		FirstBurstLength:               65536,
		InitialR2T:                     false,
		ImmediateData:                  true,
		MaxOutstandingR2T:              1,
		DefaultTime2Wait:               2,
		DefaultTime2Retain:             20,
		DataPDUInOrder:                 true,
		DataSequenceInOrder:            true,
		InitiatorRecvDataSegmentLength: 8192,
		TargetRecvDataSegmentLength:    8192,
	}
}

// validate checks the ranges RFC 7143 gives each key.
func (s *Settings) validate() error {
	seg := func(name string, v uint32) error {
		if v < MinRecvDataSegmentLength || v > MaxDataSegmentLength {
			return fmt.Errorf("%w: %s %d not in 512..16777215", errConfig, name, v)
		}
		return nil
	}
	for _, c := range []struct {
		name string
		v    uint32
	}{
		{"MaxRecvDataSegmentLength", s.MaxRecvDataSegmentLength},
		{"MaxBurstLength", s.MaxBurstLength},
		{"FirstBurstLength", s.FirstBurstLength},
		{"InitiatorRecvDataSegmentLength", s.InitiatorRecvDataSegmentLength},
		{"TargetRecvDataSegmentLength", s.TargetRecvDataSegmentLength},
	} {
		if err := seg(c.name, c.v); err != nil {
			return err
		}
	}
	if s.FirstBurstLength > s.MaxBurstLength {
		return fmt.Errorf("%w: FirstBurstLength %d exceeds MaxBurstLength %d", errConfig, s.FirstBurstLength, s.MaxBurstLength)
	}
	if s.MaxOutstandingR2T == 0 {
		return fmt.Errorf("%w: MaxOutstandingR2T 0", errConfig)
	}
	if s.DefaultTime2Wait > 3600 || s.DefaultTime2Retain > 3600 {
		return fmt.Errorf("%w: DefaultTime2Wait/Retain above 3600", errConfig)
	}
	if s.MaxOutstandingUnexpectedPDUs == 1 {
		return fmt.Errorf("%w: MaxOutstandingUnexpectedPDUs must be 0 or at least 2", errConfig)
	}
	return nil
}

// localValues returns the Settings as key values. Keys this side never
// proposes or restricts keep "" and use the key's default.
func (s *Settings) localValues(transport Transport) [numKeys]string {
	var l [numKeys]string
	u := func(v uint32) string { return strconv.FormatUint(uint64(v), 10) }
	l[kHeaderDigest] = digestList(s.HeaderDigest)
	l[kDataDigest] = digestList(s.DataDigest)
	if transport == TransportISER {
		l[kHeaderDigest], l[kDataDigest] = ValueNone, ValueNone
	}
	l[kMaxConnections] = "1"
	l[kInitialR2T] = boolValue(s.InitialR2T)
	l[kImmediateData] = boolValue(s.ImmediateData)
	l[kMaxRecvDataSegmentLength] = u(s.MaxRecvDataSegmentLength)
	l[kMaxBurstLength] = u(s.MaxBurstLength)
	l[kFirstBurstLength] = u(s.FirstBurstLength)
	l[kDefaultTime2Wait] = u(uint32(s.DefaultTime2Wait))
	l[kDefaultTime2Retain] = u(uint32(s.DefaultTime2Retain))
	l[kMaxOutstandingR2T] = u(uint32(s.MaxOutstandingR2T))
	l[kDataPDUInOrder] = boolValue(s.DataPDUInOrder)
	l[kDataSequenceInOrder] = boolValue(s.DataSequenceInOrder)
	l[kErrorRecoveryLevel] = "0"
	l[kTaskReporting] = "RFC3720"
	l[kProtocolLevel] = "1"
	l[kRDMAExtensions] = boolValue(transport == TransportISER)
	l[kInitiatorRecvDataSegmentLength] = u(s.InitiatorRecvDataSegmentLength)
	l[kTargetRecvDataSegmentLength] = u(s.TargetRecvDataSegmentLength)
	l[kMaxOutstandingUnexpectedPDUs] = u(s.MaxOutstandingUnexpectedPDUs)
	return l
}

// Params are the results of a login, from one side's point of view (the
// data segment limits are "mine" and "the peer's").
type Params struct {
	SessionType    SessionType
	InitiatorName  string
	InitiatorAlias string
	TargetName     string // empty in a discovery session
	TargetAlias    string
	// TargetAddress is a TargetAddress key the target sent during login
	// (redirection, not supported, or informational).
	TargetAddress        string
	TargetPortalGroupTag uint16
	// AuthMethod is "None" or "CHAP".
	AuthMethod   string
	HeaderDigest bool
	DataDigest   bool
	// MaxRecvDataSegmentLength is the largest data segment this side
	// accepts (its own declaration; TargetRecvDataSegmentLength or
	// InitiatorRecvDataSegmentLength with RDMAExtensions). Give it to
	// Reader.SetMaxRecvDataSegmentLength.
	MaxRecvDataSegmentLength uint32
	// MaxSendDataSegmentLength is the largest data segment the peer
	// accepts: never send a longer one.
	MaxSendDataSegmentLength uint32
	MaxConnections           uint16
	InitialR2T               bool
	ImmediateData            bool
	MaxBurstLength           uint32
	// FirstBurstLength is the unsolicited data limit; irrelevant (but
	// set) when InitialR2T is true and ImmediateData false.
	FirstBurstLength    uint32
	DefaultTime2Wait    uint16
	DefaultTime2Retain  uint16
	MaxOutstandingR2T   uint16
	DataPDUInOrder      bool
	DataSequenceInOrder bool
	ErrorRecoveryLevel  uint8
	TaskReporting       string
	ProtocolLevel       uint8
	// RDMAExtensions is true for an iSER-assisted session.
	RDMAExtensions                 bool
	InitiatorRecvDataSegmentLength uint32
	TargetRecvDataSegmentLength    uint32
	// MaxOutstandingUnexpectedPDUs is the peer's declaration (0: no
	// limit): how many unsolicited PDUs this side may have outstanding.
	MaxOutstandingUnexpectedPDUs uint32
}
