package auth

import (
	"encoding/binary"
	"fmt"
)

// Wire sizes (include/linux/nvme.h struct nvmf_auth_dhchap_*_data; all
// multi-byte fields little-endian).
const (
	HeaderSize             = 6  // auth_type, auth_id, rsvd[2], t_id (le16): common to every message
	NegotiateHeaderSize    = 8  // struct nvmf_auth_dhchap_negotiate_data: header, sc_c, napd
	ProtocolDescriptorSize = 64 // struct nvmf_auth_dhchap_protocol_descriptor: authid, rsvd, halen, dhlen, idlist[60]
	ChallengeHeaderSize    = 16 // struct nvmf_auth_dhchap_challenge_data before cval[]
	ReplyHeaderSize        = 16 // struct nvmf_auth_dhchap_reply_data before rval[]
	Success1HeaderSize     = 16 // struct nvmf_auth_dhchap_success1_data before rval[]
	Success2Size           = 16 // struct nvmf_auth_dhchap_success2_data
	FailureSize            = 8  // struct nvmf_auth_dhchap_failure_data
	// MaxIDs is how many hash (and, separately, DH group) identifiers a
	// protocol descriptor holds: idlist[0:30] are hashes, idlist[30:60]
	// DH groups (NVME_AUTH_DHCHAP_MAX_HASH_IDS, _MAX_DH_IDS).
	MaxIDs = 30
	// MaxMessageSize bounds what the Linux host reads with one Auth
	// Receive (CHAP_BUF_SIZE): enough for an ffdhe8192 challenge.
	MaxMessageSize = 4096
)

// Offsets of the fields after the common header.
const (
	offType   = 0
	offID     = 1
	offTID    = 4
	offSCC    = 6  // negotiate sc_c
	offNAPD   = 7  // negotiate napd
	offHL     = 6  // challenge, reply, success1: hl
	offHashID = 8  // challenge: hashid
	offDHGID  = 9  // challenge: dhgid
	offCValid = 8  // reply: cvalid
	offRValid = 8  // success1: rvalid
	offDHVLen = 10 // challenge, reply: dhvlen (le16)
	offSeqNum = 12 // challenge, reply: seqnum (le32)
	offResc   = 6  // failure: rescode
	offRescEx = 7  // failure: rescode_exp

	// Within a protocol descriptor.
	offDescAuthID = 0
	offDescHALen  = 2
	offDescDHLen  = 3
	offDescIDList = 4
)

// Header is the part common to every message.
type Header struct {
	Type          AuthType
	ID            MessageID
	TransactionID uint16 // t_id
}

// ParseHeader reads the common header of b, which must hold at least
// HeaderSize bytes. It does not check that Type and ID go together.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: %d bytes, shorter than the %d-byte message header", ErrMalformed, len(b), HeaderSize)
	}
	return Header{Type: AuthType(b[offType]), ID: MessageID(b[offID]), TransactionID: binary.LittleEndian.Uint16(b[offTID:])}, nil
}

func appendHeader(b []byte, t AuthType, id MessageID, tid uint16, size int) ([]byte, []byte) {
	start := len(b)
	b = append(b, make([]byte, size)...)
	m := b[start:]
	m[offType] = byte(t)
	m[offID] = byte(id)
	binary.LittleEndian.PutUint16(m[offTID:], tid)
	return b, m
}

func expect(b []byte, t AuthType, id MessageID, min int) error {
	if len(b) < min {
		return fmt.Errorf("%w: %s of %d bytes is shorter than its %d-byte header", ErrMalformed, id, len(b), min)
	}
	if AuthType(b[offType]) != t || MessageID(b[offID]) != id {
		return fmt.Errorf("%w: got %s/%s, want %s/%s", ErrMalformed, AuthType(b[offType]), MessageID(b[offID]), t, id)
	}
	return nil
}

// Message is any of the seven messages. The concrete types are *Negotiate,
// *Challenge, *Reply, *Success1, *Success2 and *Failure.
type Message interface {
	// MessageHeader returns the message's header fields.
	MessageHeader() Header
	// AppendBinary appends the wire form to b.
	AppendBinary(b []byte) ([]byte, error)
}

// ParseMessage parses whichever message b holds, by its auth_type and
// auth_id. Slices in the result alias b.
func ParseMessage(b []byte) (Message, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return nil, err
	}
	switch {
	case h.Type == TypeCommon && h.ID == MsgNegotiate:
		return ParseNegotiate(b)
	case h.Type == TypeDHCHAP && h.ID == MsgChallenge:
		return ParseChallenge(b)
	case h.Type == TypeDHCHAP && h.ID == MsgReply:
		return ParseReply(b)
	case h.Type == TypeDHCHAP && h.ID == MsgSuccess1:
		return ParseSuccess1(b)
	case h.Type == TypeDHCHAP && h.ID == MsgSuccess2:
		return ParseSuccess2(b)
	case h.Type == TypeCommon && (h.ID == MsgFailure1 || h.ID == MsgFailure2):
		return ParseFailure(b)
	}
	return nil, fmt.Errorf("%w: unknown message %s/%s", ErrMalformed, h.Type, h.ID)
}

// Protocol is one protocol descriptor of an AUTH_Negotiate.
type Protocol struct {
	// AuthID is AuthIDDHCHAP for DH-HMAC-CHAP, the only protocol
	// defined.
	AuthID uint8
	// Hashes lists the hash functions offered (at most MaxIDs), in the
	// sender's order of preference.
	Hashes []HashID
	// DHGroups lists the DH groups offered (at most MaxIDs).
	DHGroups []DHGroupID
}

// Negotiate is AUTH_Negotiate, the host's first message: the transaction
// ID of the exchange and the protocols, hashes and groups it accepts.
type Negotiate struct {
	TransactionID uint16
	// SCC is the secure channel concatenation request (SCCNone, ...).
	SCC uint8
	// Protocols holds napd descriptors; the Linux host sends exactly one.
	Protocols []Protocol
}

// MessageHeader returns the header fields.
func (m *Negotiate) MessageHeader() Header {
	return Header{Type: TypeCommon, ID: MsgNegotiate, TransactionID: m.TransactionID}
}

// AppendBinary appends the NegotiateHeaderSize + 64 * len(Protocols) byte
// wire form to b.
func (m *Negotiate) AppendBinary(b []byte) ([]byte, error) {
	if len(m.Protocols) > 255 {
		return b, fmt.Errorf("encoding negotiate: %d protocol descriptors, at most 255", len(m.Protocols))
	}
	for i, p := range m.Protocols {
		if len(p.Hashes) > MaxIDs || len(p.DHGroups) > MaxIDs {
			return b, fmt.Errorf("encoding negotiate: descriptor %d lists %d hashes and %d DH groups, at most %d each", i, len(p.Hashes), len(p.DHGroups), MaxIDs)
		}
	}
	b, h := appendHeader(b, TypeCommon, MsgNegotiate, m.TransactionID, NegotiateHeaderSize+ProtocolDescriptorSize*len(m.Protocols))
	h[offSCC] = m.SCC
	h[offNAPD] = uint8(len(m.Protocols))
	for i, p := range m.Protocols {
		d := h[NegotiateHeaderSize+i*ProtocolDescriptorSize:]
		d[offDescAuthID] = p.AuthID
		d[offDescHALen] = uint8(len(p.Hashes))
		d[offDescDHLen] = uint8(len(p.DHGroups))
		for j, id := range p.Hashes {
			d[offDescIDList+j] = byte(id)
		}
		for j, id := range p.DHGroups {
			d[offDescIDList+MaxIDs+j] = byte(id)
		}
	}
	return b, nil
}

// ParseNegotiate parses an AUTH_Negotiate. It needs the 8-byte header and
// napd whole 64-byte descriptors, each with halen and dhlen at most 30;
// bytes after the last descriptor are ignored. The result does not alias b.
func ParseNegotiate(b []byte) (*Negotiate, error) {
	if err := expect(b, TypeCommon, MsgNegotiate, NegotiateHeaderSize); err != nil {
		return nil, err
	}
	napd := int(b[offNAPD])
	if need := NegotiateHeaderSize + napd*ProtocolDescriptorSize; len(b) < need {
		return nil, fmt.Errorf("%w: negotiate of %d bytes cannot hold its %d protocol descriptors (%d bytes)", ErrMalformed, len(b), napd, need)
	}
	m := &Negotiate{TransactionID: binary.LittleEndian.Uint16(b[offTID:]), SCC: b[offSCC]}
	if napd > 0 {
		m.Protocols = make([]Protocol, napd)
	}
	for i := range m.Protocols {
		d := b[NegotiateHeaderSize+i*ProtocolDescriptorSize:]
		halen, dhlen := int(d[offDescHALen]), int(d[offDescDHLen])
		if halen > MaxIDs || dhlen > MaxIDs {
			return nil, fmt.Errorf("%w: negotiate descriptor %d lists %d hashes and %d DH groups, at most %d each", ErrMalformed, i, halen, dhlen, MaxIDs)
		}
		p := Protocol{AuthID: d[offDescAuthID]}
		if halen > 0 {
			p.Hashes = make([]HashID, halen)
		}
		for j := range p.Hashes {
			p.Hashes[j] = HashID(d[offDescIDList+j])
		}
		if dhlen > 0 {
			p.DHGroups = make([]DHGroupID, dhlen)
		}
		for j := range p.DHGroups {
			p.DHGroups[j] = DHGroupID(d[offDescIDList+MaxIDs+j])
		}
		m.Protocols[i] = p
	}
	return m, nil
}

// Challenge is DH-HMAC-CHAP_Challenge, the controller's answer to the
// Negotiate: the chosen hash and group, the sequence number S1, the
// challenge C1 and the controller's DH public value.
type Challenge struct {
	TransactionID uint16
	Hash          HashID
	DHGroup       DHGroupID
	SeqNum        uint32 // S1
	// C is the challenge C1; its length is the hl field (the hash size).
	C []byte
	// DHValue is the controller's public value g^x mod p (dhvlen bytes),
	// empty for the null group.
	DHValue []byte
}

// MessageHeader returns the header fields.
func (m *Challenge) MessageHeader() Header {
	return Header{Type: TypeDHCHAP, ID: MsgChallenge, TransactionID: m.TransactionID}
}

// AppendBinary appends the 16 + len(C) + len(DHValue) byte wire form to b.
func (m *Challenge) AppendBinary(b []byte) ([]byte, error) {
	if len(m.C) > 255 || len(m.DHValue) > 0xffff {
		return b, fmt.Errorf("encoding challenge: challenge of %d bytes (at most 255) or DH value of %d (at most 65535)", len(m.C), len(m.DHValue))
	}
	b, h := appendHeader(b, TypeDHCHAP, MsgChallenge, m.TransactionID, ChallengeHeaderSize+len(m.C)+len(m.DHValue))
	h[offHL] = uint8(len(m.C))
	h[offHashID] = byte(m.Hash)
	h[offDHGID] = byte(m.DHGroup)
	binary.LittleEndian.PutUint16(h[offDHVLen:], uint16(len(m.DHValue)))
	binary.LittleEndian.PutUint32(h[offSeqNum:], m.SeqNum)
	copy(h[ChallengeHeaderSize:], m.C)
	copy(h[ChallengeHeaderSize+len(m.C):], m.DHValue)
	return b, nil
}

// ParseChallenge parses a DH-HMAC-CHAP_Challenge: the 16-byte header, then
// hl bytes of challenge and dhvlen bytes of DH value, all within b (a
// controller returns the whole allocation length, so trailing bytes are
// ignored). C and DHValue alias b. Whether hl and the hash agree is for the
// caller (Host) to judge.
func ParseChallenge(b []byte) (*Challenge, error) {
	if err := expect(b, TypeDHCHAP, MsgChallenge, ChallengeHeaderSize); err != nil {
		return nil, err
	}
	hl, dhvlen := int(b[offHL]), int(binary.LittleEndian.Uint16(b[offDHVLen:]))
	if need := ChallengeHeaderSize + hl + dhvlen; len(b) < need {
		return nil, fmt.Errorf("%w: challenge of %d bytes cannot hold its %d-byte challenge and %d-byte DH value (%d bytes)", ErrMalformed, len(b), hl, dhvlen, need)
	}
	m := &Challenge{
		TransactionID: binary.LittleEndian.Uint16(b[offTID:]),
		Hash:          HashID(b[offHashID]),
		DHGroup:       DHGroupID(b[offDHGID]),
		SeqNum:        binary.LittleEndian.Uint32(b[offSeqNum:]),
		C:             b[ChallengeHeaderSize : ChallengeHeaderSize+hl : ChallengeHeaderSize+hl],
	}
	if dhvlen > 0 {
		o := ChallengeHeaderSize + hl
		m.DHValue = b[o : o+dhvlen : o+dhvlen]
	}
	return m, nil
}

// Reply is DH-HMAC-CHAP_Reply, the host's response R1 to C1, its DH public
// value and, for bidirectional authentication, its own challenge C2 with
// sequence number S2.
type Reply struct {
	TransactionID uint16
	// Response is R1; its length is the hl field.
	Response []byte
	// C2 is the host's challenge to the controller (cvalid set), or nil
	// (cvalid clear: the wire carries hl zero bytes in its place). When
	// set it must be as long as Response.
	C2 []byte
	// SeqNum is S2; 0 means no controller authentication is wanted.
	SeqNum uint32
	// DHValue is the host's public value g^y mod p, empty for the null
	// group.
	DHValue []byte
}

// MessageHeader returns the header fields.
func (m *Reply) MessageHeader() Header {
	return Header{Type: TypeDHCHAP, ID: MsgReply, TransactionID: m.TransactionID}
}

// AppendBinary appends the 16 + 2*len(Response) + len(DHValue) byte wire
// form to b.
func (m *Reply) AppendBinary(b []byte) ([]byte, error) {
	hl := len(m.Response)
	if hl > 255 || len(m.DHValue) > 0xffff {
		return b, fmt.Errorf("encoding reply: response of %d bytes (at most 255) or DH value of %d (at most 65535)", hl, len(m.DHValue))
	}
	if m.C2 != nil && len(m.C2) != hl {
		return b, fmt.Errorf("encoding reply: challenge C2 of %d bytes, response of %d: they must be equal", len(m.C2), hl)
	}
	b, h := appendHeader(b, TypeDHCHAP, MsgReply, m.TransactionID, ReplyHeaderSize+2*hl+len(m.DHValue))
	h[offHL] = uint8(hl)
	if m.C2 != nil {
		h[offCValid] = 1
	}
	binary.LittleEndian.PutUint16(h[offDHVLen:], uint16(len(m.DHValue)))
	binary.LittleEndian.PutUint32(h[offSeqNum:], m.SeqNum)
	copy(h[ReplyHeaderSize:], m.Response)
	copy(h[ReplyHeaderSize+hl:], m.C2)
	copy(h[ReplyHeaderSize+2*hl:], m.DHValue)
	return b, nil
}

// ParseReply parses a DH-HMAC-CHAP_Reply: the 16-byte header, then hl
// bytes of response, hl bytes of challenge and dhvlen bytes of DH value,
// all within b (nvmet_auth_reply's check). Slices alias b; C2 is nil when
// cvalid is 0.
func ParseReply(b []byte) (*Reply, error) {
	if err := expect(b, TypeDHCHAP, MsgReply, ReplyHeaderSize); err != nil {
		return nil, err
	}
	hl, dhvlen := int(b[offHL]), int(binary.LittleEndian.Uint16(b[offDHVLen:]))
	if need := ReplyHeaderSize + 2*hl + dhvlen; len(b) < need {
		return nil, fmt.Errorf("%w: reply of %d bytes cannot hold its two %d-byte values and %d-byte DH value (%d bytes)", ErrMalformed, len(b), hl, dhvlen, need)
	}
	o := ReplyHeaderSize
	m := &Reply{
		TransactionID: binary.LittleEndian.Uint16(b[offTID:]),
		SeqNum:        binary.LittleEndian.Uint32(b[offSeqNum:]),
		Response:      b[o : o+hl : o+hl],
	}
	if b[offCValid] != 0 {
		m.C2 = b[o+hl : o+2*hl : o+2*hl]
	}
	if dhvlen > 0 {
		m.DHValue = b[o+2*hl : o+2*hl+dhvlen : o+2*hl+dhvlen]
	}
	return m, nil
}

// Success1 is DH-HMAC-CHAP_Success1: the controller accepted R1 and, for
// bidirectional authentication, answers C2 with R2.
type Success1 struct {
	TransactionID uint16
	// HashLen is the hl field, the negotiated hash's size; the Linux
	// host checks it even when no response is carried.
	HashLen uint8
	// Response is R2 (rvalid set), nil otherwise. When set its length
	// must be HashLen.
	Response []byte
}

// MessageHeader returns the header fields.
func (m *Success1) MessageHeader() Header {
	return Header{Type: TypeDHCHAP, ID: MsgSuccess1, TransactionID: m.TransactionID}
}

// AppendBinary appends the 16 (+ HashLen with a response) byte wire form.
func (m *Success1) AppendBinary(b []byte) ([]byte, error) {
	if m.Response != nil && len(m.Response) != int(m.HashLen) {
		return b, fmt.Errorf("encoding success1: response of %d bytes, hl %d: they must be equal", len(m.Response), m.HashLen)
	}
	b, h := appendHeader(b, TypeDHCHAP, MsgSuccess1, m.TransactionID, Success1HeaderSize+len(m.Response))
	h[offHL] = m.HashLen
	if m.Response != nil {
		h[offRValid] = 1 // NVME_AUTH_DHCHAP_RESPONSE_VALID
	}
	copy(h[Success1HeaderSize:], m.Response)
	return b, nil
}

// ParseSuccess1 parses a DH-HMAC-CHAP_Success1: the 16-byte header and, if
// rvalid is set, hl bytes of response (aliasing b).
func ParseSuccess1(b []byte) (*Success1, error) {
	if err := expect(b, TypeDHCHAP, MsgSuccess1, Success1HeaderSize); err != nil {
		return nil, err
	}
	m := &Success1{TransactionID: binary.LittleEndian.Uint16(b[offTID:]), HashLen: b[offHL]}
	if b[offRValid] != 0 {
		hl := int(m.HashLen)
		if len(b) < Success1HeaderSize+hl {
			return nil, fmt.Errorf("%w: success1 of %d bytes cannot hold its %d-byte response", ErrMalformed, len(b), hl)
		}
		m.Response = b[Success1HeaderSize : Success1HeaderSize+hl : Success1HeaderSize+hl]
	}
	return m, nil
}

// Success2 is DH-HMAC-CHAP_Success2: the host accepted R2.
type Success2 struct {
	TransactionID uint16
}

// MessageHeader returns the header fields.
func (m *Success2) MessageHeader() Header {
	return Header{Type: TypeDHCHAP, ID: MsgSuccess2, TransactionID: m.TransactionID}
}

// AppendBinary appends the 16-byte wire form.
func (m *Success2) AppendBinary(b []byte) ([]byte, error) {
	b, _ = appendHeader(b, TypeDHCHAP, MsgSuccess2, m.TransactionID, Success2Size)
	return b, nil
}

// ParseSuccess2 parses a DH-HMAC-CHAP_Success2 (16 bytes).
func ParseSuccess2(b []byte) (*Success2, error) {
	if err := expect(b, TypeDHCHAP, MsgSuccess2, Success2Size); err != nil {
		return nil, err
	}
	return &Success2{TransactionID: binary.LittleEndian.Uint16(b[offTID:])}, nil
}

// Failure is AUTH_Failure1 (controller to host) or AUTH_Failure2 (host to
// controller).
type Failure struct {
	// ID is MsgFailure1 or MsgFailure2.
	ID            MessageID
	TransactionID uint16
	// Reason is the reason code (rescode), ReasonFailed in practice.
	Reason uint8
	// Code is the reason code explanation (rescode_exp).
	Code FailureCode
}

// MessageHeader returns the header fields.
func (m *Failure) MessageHeader() Header {
	return Header{Type: TypeCommon, ID: m.ID, TransactionID: m.TransactionID}
}

// AppendBinary appends the 8-byte wire form.
func (m *Failure) AppendBinary(b []byte) ([]byte, error) {
	if m.ID != MsgFailure1 && m.ID != MsgFailure2 {
		return b, fmt.Errorf("encoding failure: message id %s is neither AUTH_Failure1 nor AUTH_Failure2", m.ID)
	}
	b, h := appendHeader(b, TypeCommon, m.ID, m.TransactionID, FailureSize)
	h[offResc] = m.Reason
	h[offRescEx] = byte(m.Code)
	return b, nil
}

// ParseFailure parses an AUTH_Failure1 or AUTH_Failure2 (8 bytes).
func ParseFailure(b []byte) (*Failure, error) {
	if len(b) < FailureSize {
		return nil, fmt.Errorf("%w: failure message of %d bytes is shorter than %d", ErrMalformed, len(b), FailureSize)
	}
	id := MessageID(b[offID])
	if AuthType(b[offType]) != TypeCommon || (id != MsgFailure1 && id != MsgFailure2) {
		return nil, fmt.Errorf("%w: got %s/%s, want common/AUTH_Failure1 or AUTH_Failure2", ErrMalformed, AuthType(b[offType]), id)
	}
	return &Failure{ID: id, TransactionID: binary.LittleEndian.Uint16(b[offTID:]), Reason: b[offResc], Code: FailureCode(b[offRescEx])}, nil
}

// marshal encodes m into a new slice; m's encoders fail only on values this
// package never builds.
func marshal(m Message) []byte {
	b, err := m.AppendBinary(nil)
	if err != nil {
		panic("auth: encoding own message: " + err.Error())
	}
	return b
}
