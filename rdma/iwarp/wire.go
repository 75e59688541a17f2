package iwarp

import (
	"encoding/binary"
	"fmt"
)

// MPA request/reply frame (RFC 5044 §7.1, RFC 6581 §5).
const (
	mpaKeyReq = "MPA ID Req Frame"
	mpaKeyRep = "MPA ID Rep Frame"

	mpaHeaderLen = 20 // key(16) flags(1) rev(1) pd_len(2)

	mpaFlagMarkers  = 0x80
	mpaFlagCRC      = 0x40
	mpaFlagReject   = 0x20
	mpaFlagEnhanced = 0x10 // RFC 6581 enhanced connection establishment

	// maxMPAPrivateData is RFC 5044's bound on private data in a request or
	// reply (§7.1: PD_Length at most 512), which rdisk accepts. siw accepts
	// at most 256 (RDMA_MAX_PRIVATE_DATA), which bounds what rdisk sends:
	// rdma.MaxPrivateData plus the 4 bytes of IRD/ORD words.
	maxMPAPrivateData = 512

	// RFC 6581 §5 IRD/ORD words.
	mpaV2PeerToPeer  = 0x8000 // in IRD word
	mpaV2ZeroLenRTR  = 0x4000 // in IRD word
	mpaV2WriteRTR    = 0x8000 // in ORD word
	mpaV2ReadRTR     = 0x4000 // in ORD word
	mpaV2IRDORDMask  = 0x3fff
	mpaV2WordsLength = 4
)

// mpaFrame is a decoded MPA request or reply.
type mpaFrame struct {
	Reply    bool
	Markers  bool
	CRC      bool
	Reject   bool
	Enhanced bool
	Rev      uint8
	// Private data as the ULP sees it: with Enhanced, the IRD/ORD words
	// are split off into IRD/ORD/P2P fields.
	PrivateData []byte
	IRD, ORD    int
	P2P         bool
	ZeroLenRTR  bool
	WriteRTR    bool
	ReadRTR     bool
}

// parseMPAHeader checks the fixed 20-byte header and returns the private
// data length still to be read.
func parseMPAHeader(b []byte, wantReply bool) (f mpaFrame, pdLen int, err error) {
	if len(b) < mpaHeaderLen {
		return f, 0, errShortMPA
	}
	key := string(b[:16])
	switch {
	case wantReply && key == mpaKeyRep:
		f.Reply = true
	case !wantReply && key == mpaKeyReq:
	default:
		return f, 0, fmt.Errorf("%w: key %q", errMPAKey, b[:16])
	}
	flags := b[16]
	f.Markers = flags&mpaFlagMarkers != 0
	f.CRC = flags&mpaFlagCRC != 0
	f.Reject = flags&mpaFlagReject != 0
	f.Rev = b[17]
	f.Enhanced = flags&mpaFlagEnhanced != 0 && f.Rev == 2
	if f.Rev > 2 {
		return f, 0, fmt.Errorf("%w: revision %d", errMPARev, f.Rev)
	}
	pdLen = int(binary.BigEndian.Uint16(b[18:20]))
	if pdLen > maxMPAPrivateData {
		return f, 0, fmt.Errorf("%w: %d bytes", errMPAPrivateData, pdLen)
	}
	return f, pdLen, nil
}

// finishMPA splits the enhanced IRD/ORD words off the private data pd.
func (f *mpaFrame) finishMPA(pd []byte) error {
	if f.Enhanced {
		if len(pd) < mpaV2WordsLength {
			return fmt.Errorf("%w: enhanced frame with %d bytes of private data", errMPAPrivateData, len(pd))
		}
		ird := binary.BigEndian.Uint16(pd[0:2])
		ord := binary.BigEndian.Uint16(pd[2:4])
		f.IRD = int(ird & mpaV2IRDORDMask)
		f.ORD = int(ord & mpaV2IRDORDMask)
		f.P2P = ird&mpaV2PeerToPeer != 0
		f.ZeroLenRTR = ird&mpaV2ZeroLenRTR != 0
		f.WriteRTR = ord&mpaV2WriteRTR != 0
		f.ReadRTR = ord&mpaV2ReadRTR != 0
		pd = pd[mpaV2WordsLength:]
	}
	f.PrivateData = pd
	return nil
}

// parseMPA decodes a whole frame (header plus private data) held in b.
func parseMPA(b []byte, wantReply bool) (mpaFrame, error) {
	f, pdLen, err := parseMPAHeader(b, wantReply)
	if err != nil {
		return f, err
	}
	if len(b) != mpaHeaderLen+pdLen {
		return f, fmt.Errorf("%w: frame of %d bytes, header says %d", errShortMPA, len(b), mpaHeaderLen+pdLen)
	}
	err = f.finishMPA(b[mpaHeaderLen:])
	return f, err
}

// appendMPA encodes f (PrivateData being the ULP's) in the RFC 6581 layout
// siw uses: revision 2 with the enhanced flag and IRD/ORD words, or a
// revision 1 frame when f.Rev is 1.
func appendMPA(dst []byte, f *mpaFrame) []byte {
	if f.Reply {
		dst = append(dst, mpaKeyRep...)
	} else {
		dst = append(dst, mpaKeyReq...)
	}
	var flags byte
	if f.Markers {
		flags |= mpaFlagMarkers
	}
	if f.CRC {
		flags |= mpaFlagCRC
	}
	if f.Reject {
		flags |= mpaFlagReject
	}
	enhanced := f.Enhanced && f.Rev == 2
	if enhanced {
		flags |= mpaFlagEnhanced
	}
	pdLen := len(f.PrivateData)
	if enhanced {
		pdLen += mpaV2WordsLength
	}
	dst = append(dst, flags, f.Rev, byte(pdLen>>8), byte(pdLen))
	if enhanced {
		ird := uint16(f.IRD) & mpaV2IRDORDMask
		ord := uint16(f.ORD) & mpaV2IRDORDMask
		if f.P2P {
			ird |= mpaV2PeerToPeer
		}
		if f.ZeroLenRTR {
			ird |= mpaV2ZeroLenRTR
		}
		if f.WriteRTR {
			ord |= mpaV2WriteRTR
		}
		if f.ReadRTR {
			ord |= mpaV2ReadRTR
		}
		dst = binary.BigEndian.AppendUint16(dst, ird)
		dst = binary.BigEndian.AppendUint16(dst, ord)
	}
	return append(dst, f.PrivateData...)
}

// FPDU layout (RFC 5044 §4, RFC 5041 §4, RFC 5040 §4). All header fields
// are big-endian; the CRC is sent in the byte order siw uses (see crcBytes).
const (
	// ctrl: MPA ULPDU_Length(2) DDP ctrl(1) RDMAP ctrl(1)
	offLen      = 0
	offDDPCtrl  = 2
	offRDMACtrl = 3
	// tagged: STag(4) TO(8)
	offSTag      = 4
	offTO        = 8
	taggedHdrLen = 16
	// untagged: rsvd/inval STag(4) QN(4) MSN(4) MO(4)
	offInvSTag     = 4
	offQN          = 8
	offMSN         = 12
	offMO          = 16
	untaggedHdrLen = 20
	// Read Request payload (RFC 5040 §4.4)
	readReqLen = 28

	ddpTagged   = 0x80
	ddpLast     = 0x40
	ddpVersion  = 0x01
	ddpVerMask  = 0x03
	ddpReserved = 0x3c

	rdmapVersion = 0x40 // version 1 in the top two bits
	rdmapVerMask = 0xc0
	rdmapOpMask  = 0x0f

	mpaCRCLen = 4

	// DDP queue numbers (RFC 5040 §5.1).
	qnSend      = 0
	qnReadReq   = 1
	qnTerminate = 2
)

// RDMAP opcodes (RFC 5040 §4.3).
const (
	rdmapWrite      = 0
	rdmapReadReq    = 1
	rdmapReadResp   = 2
	rdmapSend       = 3
	rdmapSendInv    = 4
	rdmapSendSE     = 5
	rdmapSendSEInv  = 6
	rdmapTerminate  = 7
	rdmapNumOpcodes = 8
)

// isTaggedOp tells whether an RDMAP opcode travels in tagged DDP segments.
func isTaggedOp(op uint8) bool { return op == rdmapWrite || op == rdmapReadResp }

// hdrLen is the header length (ULPDU length field included) for an opcode.
func hdrLen(op uint8) int {
	if isTaggedOp(op) {
		return taggedHdrLen
	}
	return untaggedHdrLen
}

// padLen is the MPA pad after a ULPDU so that the FPDU (2-byte length
// included) ends on a 4-byte boundary (RFC 5044 §4.1).
func padLen(ulpduLen int) int { return (4 - (2+ulpduLen)%4) % 4 }

// putTagged writes a tagged segment header in h[:16].
func putTagged(h []byte, ulpduLen int, last bool, op uint8, stag uint32, to uint64) {
	binary.BigEndian.PutUint16(h[offLen:], uint16(ulpduLen))
	c := byte(ddpTagged | ddpVersion)
	if last {
		c |= ddpLast
	}
	h[offDDPCtrl] = c
	h[offRDMACtrl] = rdmapVersion | op
	binary.BigEndian.PutUint32(h[offSTag:], stag)
	binary.BigEndian.PutUint64(h[offTO:], to)
}

// putUntagged writes an untagged segment header in h[:20].
func putUntagged(h []byte, ulpduLen int, last bool, op uint8, invSTag, qn, msn, mo uint32) {
	binary.BigEndian.PutUint16(h[offLen:], uint16(ulpduLen))
	c := byte(ddpVersion)
	if last {
		c |= ddpLast
	}
	h[offDDPCtrl] = c
	h[offRDMACtrl] = rdmapVersion | op
	binary.BigEndian.PutUint32(h[offInvSTag:], invSTag)
	binary.BigEndian.PutUint32(h[offQN:], qn)
	binary.BigEndian.PutUint32(h[offMSN:], msn)
	binary.BigEndian.PutUint32(h[offMO:], mo)
}

// readRequest is the RDMAP Read Request message (RFC 5040 §4.4).
type readRequest struct {
	SinkSTag   uint32
	SinkTO     uint64
	Size       uint32
	SourceSTag uint32
	SourceTO   uint64
}

func (r *readRequest) put(b []byte) {
	binary.BigEndian.PutUint32(b[0:], r.SinkSTag)
	binary.BigEndian.PutUint64(b[4:], r.SinkTO)
	binary.BigEndian.PutUint32(b[12:], r.Size)
	binary.BigEndian.PutUint32(b[16:], r.SourceSTag)
	binary.BigEndian.PutUint64(b[20:], r.SourceTO)
}

func (r *readRequest) parse(b []byte) {
	r.SinkSTag = binary.BigEndian.Uint32(b[0:])
	r.SinkTO = binary.BigEndian.Uint64(b[4:])
	r.Size = binary.BigEndian.Uint32(b[12:])
	r.SourceSTag = binary.BigEndian.Uint32(b[16:])
	r.SourceTO = binary.BigEndian.Uint64(b[20:])
}

// Terminate layers, error types and codes (RFC 5040 §8, RFC 5041 §7,
// RFC 5044 §8; values as in Linux siw iwarp.h).
const (
	termLayerRDMAP = 0
	termLayerDDP   = 1
	termLayerLLP   = 2

	rdmapETypeCatastrophic = 0
	rdmapETypeRemoteProt   = 1
	rdmapETypeRemoteOp     = 2

	rdmapECodeInvalidSTag   = 0x00
	rdmapECodeBaseBounds    = 0x01
	rdmapECodeAccessRights  = 0x02
	rdmapECodeSTagNotAssoc  = 0x03
	rdmapECodeTOWrap        = 0x04
	rdmapECodeVersion       = 0x05
	rdmapECodeOpcode        = 0x06
	rdmapECodeCatastrophic  = 0x07
	rdmapECodeCannotInval   = 0x09
	rdmapECodeUnspecified   = 0xff
	ddpETypeCatastrophic    = 0
	ddpETypeTagged          = 1
	ddpETypeUntagged        = 2
	ddpECodeTInvalidSTag    = 0x00
	ddpECodeTBaseBounds     = 0x01
	ddpECodeTSTagNotAssoc   = 0x02
	ddpECodeTTOWrap         = 0x03
	ddpECodeTVersion        = 0x04
	ddpECodeUTInvalidQN     = 0x01
	ddpECodeUTNoBuf         = 0x02
	ddpECodeUTMSNRange      = 0x03
	ddpECodeUTInvalidMO     = 0x04
	ddpECodeUTMsgTooLong    = 0x05
	ddpECodeUTVersion       = 0x06
	llpETypeMPA             = 0
	llpECodeRecvCRC         = 0x02
	llpECodeFPDUStart       = 0x03
	llpECodeInvalidReqResp  = 0x04
	llpECodeInsufficientIRD = 0x06

	termCtrlLen = 4
)

// termError is a protocol violation detected locally or reported by the
// peer's Terminate message.
type termError struct {
	Layer, EType, ECode uint8
	Remote              bool // reported by the peer
	Msg                 string
}

func (e *termError) Error() string {
	who := "local"
	if e.Remote {
		who = "peer"
	}
	return fmt.Sprintf("iwarp: %s terminate: %s (layer %s, type %d, code %#x)", who, e.Msg, layerName(e.Layer), e.EType, e.ECode)
}

func layerName(l uint8) string {
	switch l {
	case termLayerRDMAP:
		return "RDMAP"
	case termLayerDDP:
		return "DDP"
	case termLayerLLP:
		return "MPA"
	}
	return fmt.Sprintf("%d", l)
}

func (e *termError) ctrlWord() uint32 {
	return uint32(e.Layer&0xf)<<28 | uint32(e.EType&0xf)<<24 | uint32(e.ECode)<<16
}

func parseTermCtrl(w uint32) *termError {
	return &termError{
		Layer: uint8(w >> 28), EType: uint8(w>>24) & 0xf, ECode: uint8(w >> 16),
		Remote: true, Msg: termMessage(uint8(w>>28), uint8(w>>24)&0xf, uint8(w>>16)),
	}
}

func termMessage(layer, etype, ecode uint8) string {
	switch layer {
	case termLayerRDMAP:
		if etype == rdmapETypeRemoteProt {
			switch ecode {
			case rdmapECodeInvalidSTag:
				return "invalid STag"
			case rdmapECodeBaseBounds:
				return "base or bounds violation"
			case rdmapECodeAccessRights:
				return "access rights violation"
			case rdmapECodeSTagNotAssoc:
				return "STag not associated with the RDMAP stream"
			case rdmapECodeTOWrap:
				return "tagged offset wrap"
			}
		}
		switch ecode {
		case rdmapECodeVersion:
			return "invalid RDMAP version"
		case rdmapECodeOpcode:
			return "unexpected opcode"
		case rdmapECodeCatastrophic:
			return "catastrophic error, localized to the stream"
		case rdmapECodeCannotInval:
			return "cannot invalidate"
		}
		return "RDMAP error"
	case termLayerDDP:
		if etype == ddpETypeTagged {
			switch ecode {
			case ddpECodeTInvalidSTag:
				return "invalid STag"
			case ddpECodeTBaseBounds:
				return "base or bounds violation"
			case ddpECodeTSTagNotAssoc:
				return "STag not associated"
			case ddpECodeTTOWrap:
				return "tagged offset wrap"
			case ddpECodeTVersion:
				return "invalid DDP version"
			}
		}
		if etype == ddpETypeUntagged {
			switch ecode {
			case ddpECodeUTInvalidQN:
				return "invalid queue number"
			case ddpECodeUTNoBuf:
				return "no receive buffer posted"
			case ddpECodeUTMSNRange:
				return "MSN out of range"
			case ddpECodeUTInvalidMO:
				return "invalid message offset"
			case ddpECodeUTMsgTooLong:
				return "message too long for the receive buffer"
			case ddpECodeUTVersion:
				return "invalid DDP version"
			}
		}
		return "DDP error"
	case termLayerLLP:
		switch ecode {
		case llpECodeRecvCRC:
			return "CRC error"
		case llpECodeFPDUStart:
			return "bad FPDU"
		case llpECodeInvalidReqResp:
			return "invalid MPA request or reply"
		case llpECodeInsufficientIRD:
			return "insufficient IRD"
		}
		return "MPA error"
	}
	return "unknown layer"
}

// Constant parse errors.
type errorString string

func (e errorString) Error() string { return string(e) }

const (
	errShortMPA       = errorString("iwarp: short MPA frame")
	errMPAKey         = errorString("iwarp: bad MPA key")
	errMPARev         = errorString("iwarp: unsupported MPA revision")
	errMPAPrivateData = errorString("iwarp: bad MPA private data length")
	errMPATimeout     = errorString("iwarp: MPA handshake timed out")
)
