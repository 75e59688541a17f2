package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Well-known ports (TCP spec section 7.4.9; NVME_TCP_DISC_PORT).
const (
	DefaultPort   = 4420
	DiscoveryPort = 8009
)

// PDU types (TCP spec Figure 16; enum nvme_tcp_pdu_type).
const (
	TypeICReq       uint8 = 0x0
	TypeICResp      uint8 = 0x1
	TypeH2CTermReq  uint8 = 0x2
	TypeC2HTermReq  uint8 = 0x3
	TypeCapsuleCmd  uint8 = 0x4
	TypeCapsuleResp uint8 = 0x5
	TypeH2CData     uint8 = 0x6
	TypeC2HData     uint8 = 0x7
	TypeR2T         uint8 = 0x9
)

// TypeName names a PDU type for messages.
func TypeName(t uint8) string {
	switch t {
	case TypeICReq:
		return "ICReq"
	case TypeICResp:
		return "ICResp"
	case TypeH2CTermReq:
		return "H2CTermReq"
	case TypeC2HTermReq:
		return "C2HTermReq"
	case TypeCapsuleCmd:
		return "CapsuleCmd"
	case TypeCapsuleResp:
		return "CapsuleResp"
	case TypeH2CData:
		return "H2CData"
	case TypeC2HData:
		return "C2HData"
	case TypeR2T:
		return "R2T"
	}
	return fmt.Sprintf("PDU type %#x", t)
}

// Common header flags (enum nvme_tcp_pdu_flags).
const (
	FlagHDGST   uint8 = 1 << 0 // a header digest follows the header
	FlagDDGST   uint8 = 1 << 1 // a data digest follows the data
	FlagLast    uint8 = 1 << 2 // data PDUs: the last one of the transfer
	FlagSuccess uint8 = 1 << 3 // C2HData: the command succeeded, no response capsule follows
)

// Digest bits of ICReq/ICResp DGST (enum nvme_tcp_digest_option).
const (
	DigestHeader uint8 = 1 << 0
	DigestData   uint8 = 1 << 1
)

// Fatal Error Status values of a terminate request (TCP spec Figure 27,
// enum nvme_tcp_fatal_error_status).
const (
	FESInvalidHeaderField      uint16 = 0x01 // FEI: byte offset of the field
	FESPDUSequenceError        uint16 = 0x02
	FESHeaderDigestError       uint16 = 0x03
	FESDataOutOfRange          uint16 = 0x04
	FESDataLimitExceeded       uint16 = 0x05 // also "R2T limit exceeded"
	FESUnsupportedParameter    uint16 = 0x06 // FEI: byte offset of the parameter
	feiNone                    uint32 = 0
	maxTermData                       = 128 // the PDU header echoed in a terminate request
	offType, offFlags, offHLen        = 0, 1, 2
	offPDO, offPLen                   = 3, 4
)

// Sizes (HLEN of each PDU type; struct nvme_tcp_*_pdu).
const (
	CommonHeaderSize = 8
	ICSize           = 128 // ICReq and ICResp: HLEN and PLEN
	CapsuleCmdHLen   = CommonHeaderSize + 64
	CapsuleRespHLen  = CommonHeaderSize + 16
	DataHLen         = 24 // H2CData, C2HData
	R2THLen          = 24
	TermReqHLen      = 24
	DigestSize       = 4
	// MaxHeaderSize is the longest header with its digest.
	MaxHeaderSize = ICSize
	// MaxTermReqSize is the longest terminate request: its header and
	// the offending PDU header echoed back (NVME_TCP_MAX_C2HTERM_PLEN).
	MaxTermReqSize = TermReqHLen + maxTermData
	// MinMaxH2CData is the least MAXH2CDATA a controller may offer
	// (NVME_TCP_MIN_MAXH2CDATA).
	MinMaxH2CData = 4096
	// PFV10 is the PDU format version of the TCP spec 1.0.
	PFV10 = 0
)

// Error is a fatal transport error found in a received PDU: the receiver
// ends the connection with a terminate request carrying FES and FEI.
type Error struct {
	FES uint16
	FEI uint32
	Err error
}

func (e *Error) Error() string {
	return fmt.Sprintf("nvme/tcp fatal error (FES %#x, FEI %d): %v", e.FES, e.FEI, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

func fatal(fes uint16, fei uint32, format string, args ...any) *Error {
	return &Error{FES: fes, FEI: fei, Err: fmt.Errorf(format, args...)}
}

// castagnoli returns the CRC32C table (crc32.MakeTable hands out the
// package's own, hardware accelerated table for Castagnoli).
func castagnoli() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) }

// Digest returns the CRC32C of b (TCP spec section 3.6.1: HDGST over the
// header, DDGST over the data, as iSCSI computes them).
func Digest(b []byte) uint32 { return crc32.Checksum(b, castagnoli()) }

// UpdateDigest continues a digest over more bytes (start with 0).
func UpdateDigest(crc uint32, b []byte) uint32 { return crc32.Update(crc, castagnoli(), b) }

// PutDigest stores a digest as it travels: little endian.
func PutDigest(b []byte, d uint32) { binary.LittleEndian.PutUint32(b, d) }

// GetDigest reads a digest.
func GetDigest(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

// Header is a view of a PDU's common header (struct nvme_tcp_hdr): at least
// CommonHeaderSize bytes; the PDU-specific header follows in the same slice.
type Header []byte

// Type returns the PDU type.
func (h Header) Type() uint8 { return h[offType] }

// Flags returns the PDU flags.
func (h Header) Flags() uint8 { return h[offFlags] }

// HLen returns the header length (without the header digest).
func (h Header) HLen() int { return int(h[offHLen]) }

// PDO returns the PDU data offset: where the data starts (0: no data).
func (h Header) PDO() int { return int(h[offPDO]) }

// PLen returns the PDU length: header, digests, padding and data.
func (h Header) PLen() uint32 { return binary.LittleEndian.Uint32(h[offPLen:]) }

// Put writes the common header of a PDU of type typ whose specific header
// ends at hlen, carrying dataLen bytes of data aligned to pda bytes (a
// multiple of 4: (CPDA+1)*4 or (HPDA+1)*4 of the receiver), with the
// header and data digests as negotiated. Digest flags are set here; other
// flags come in flags. It returns the padding between the header (and its
// digest) and the data, which the sender writes as zero bytes.
func (h Header) Put(typ, flags uint8, hlen int, hdgst bool, dataLen int, ddgst bool, pda int) (pad int) {
	hd := 0
	if hdgst && hasHeaderDigest(typ) {
		flags |= FlagHDGST
		hd = DigestSize
	}
	pdo, plen := 0, hlen+hd
	if dataLen > 0 {
		pdo = hlen + hd
		if pda > 4 {
			pdo = (pdo + pda - 1) / pda * pda
		}
		pad = pdo - hlen - hd
		plen = pdo + dataLen
		if ddgst {
			flags |= FlagDDGST
			plen += DigestSize
		}
	}
	h[offType], h[offFlags], h[offHLen], h[offPDO] = typ, flags, byte(hlen), byte(pdo)
	binary.LittleEndian.PutUint32(h[offPLen:], uint32(plen))
	return pad
}

// Seal computes the header digest of a header Put wrote and whose fields
// are all in place, when header digests are on and the type carries one,
// and returns the header's length on the wire (HLEN, plus the digest). h
// must have room for the digest.
func (h Header) Seal(hdgst bool) int {
	n := h.HLen()
	if hdgst && hasHeaderDigest(h.Type()) {
		PutDigest(h[n:], Digest(h[:n]))
		n += DigestSize
	}
	return n
}

// hasHeaderDigest tells whether PDUs of type t carry a header digest when
// header digests are on (all but the initialization and terminate PDUs).
func hasHeaderDigest(t uint8) bool {
	switch t {
	case TypeCapsuleCmd, TypeCapsuleResp, TypeH2CData, TypeC2HData, TypeR2T:
		return true
	}
	return false
}

// hasData tells whether PDUs of type t may carry data at PDO.
func hasData(t uint8) bool {
	switch t {
	case TypeCapsuleCmd, TypeH2CData, TypeC2HData:
		return true
	}
	return false
}

// hlenOf is the fixed HLEN of each PDU type (0: unknown type).
func hlenOf(t uint8) int {
	switch t {
	case TypeICReq, TypeICResp:
		return ICSize
	case TypeH2CTermReq, TypeC2HTermReq:
		return TermReqHLen
	case TypeCapsuleCmd:
		return CapsuleCmdHLen
	case TypeCapsuleResp:
		return CapsuleRespHLen
	case TypeH2CData, TypeC2HData:
		return DataHLen
	case TypeR2T:
		return R2THLen
	}
	return 0
}

// Role is which end of a connection receives: the controller receives
// host-to-controller PDUs, the host the others.
type Role uint8

const (
	Controller Role = iota
	Host
)

func (r Role) String() string {
	if r == Host {
		return "host"
	}
	return "controller"
}

// accepts tells whether a receiver in role r accepts PDUs of type t.
func (r Role) accepts(t uint8) bool {
	if r == Controller {
		switch t {
		case TypeICReq, TypeH2CTermReq, TypeCapsuleCmd, TypeH2CData:
			return true
		}
		return false
	}
	switch t {
	case TypeICResp, TypeC2HTermReq, TypeCapsuleResp, TypeC2HData, TypeR2T:
		return true
	}
	return false
}

// CheckHeader checks the common header of a received PDU (the first
// CommonHeaderSize bytes of h) for a receiver in role r with header digests
// hdgst, and returns how many more bytes the PDU header has: the rest of
// the type's header and its digest. Unknown or wrong-way types, a wrong
// HLEN, a header digest flag that disagrees with the negotiation and a
// PLEN shorter than the header are fatal Invalid PDU Header Field errors.
func CheckHeader(h Header, r Role, hdgst bool) (rest int, err *Error) {
	if len(h) < CommonHeaderSize {
		return 0, fatal(FESInvalidHeaderField, offPLen, "%d-byte common header", len(h))
	}
	t := h.Type()
	if !r.accepts(t) {
		return 0, fatal(FESInvalidHeaderField, offType, "%s is not a PDU a %s receives", TypeName(t), r)
	}
	hlen := hlenOf(t)
	if h.HLen() != hlen {
		return 0, fatal(FESInvalidHeaderField, offHLen, "%s with HLEN %d, want %d", TypeName(t), h.HLen(), hlen)
	}
	hd := 0
	if hasHeaderDigest(t) {
		if got := h.Flags()&FlagHDGST != 0; got != hdgst {
			return 0, fatal(FESInvalidHeaderField, offFlags, "%s with HDGST flag %t, header digests negotiated %t", TypeName(t), got, hdgst)
		}
		if hdgst {
			hd = DigestSize
		}
	}
	plen := h.PLen()
	switch t {
	case TypeICReq, TypeICResp:
		if plen != ICSize {
			return 0, fatal(FESInvalidHeaderField, offPLen, "%s with PLEN %d, want %d", TypeName(t), plen, ICSize)
		}
	case TypeH2CTermReq, TypeC2HTermReq:
		if plen < TermReqHLen || plen > MaxTermReqSize {
			return 0, fatal(FESInvalidHeaderField, offPLen, "%s with PLEN %d, want %d to %d", TypeName(t), plen, TermReqHLen, MaxTermReqSize)
		}
	default:
		if plen < uint32(hlen+hd) {
			return 0, fatal(FESInvalidHeaderField, offPLen, "%s with PLEN %d, shorter than its header", TypeName(t), plen)
		}
	}
	return hlen - CommonHeaderSize + hd, nil
}

// Layout is where a received PDU's data lies after its header.
type Layout struct {
	// Pad is the number of bytes between the header (and its digest) and
	// the data, to skip.
	Pad int
	// DataLen is the number of data bytes (0: none).
	DataLen int
	// DataDigest tells that a 4-byte data digest follows the data.
	DataDigest bool
}

// CheckPDU checks a received PDU header h, CommonHeaderSize plus the rest
// CheckHeader returned (so CheckHeader must have accepted it), for a
// receiver with header and data digests hdgst and ddgst that asked for
// data aligned to pda bytes (its (CPDA+1)*4 or (HPDA+1)*4). It verifies the
// header digest and the PDU's length fields and returns where the data is.
// For a terminate request the "data" is the echoed header: DataLen bytes,
// never padded or digested.
func CheckPDU(h Header, hdgst, ddgst bool, pda int) (Layout, *Error) {
	t := h.Type()
	hlen := hlenOf(t)
	if hlen == 0 || len(h) < hlen {
		return Layout{}, fatal(FESInvalidHeaderField, offHLen, "header of %d bytes for %s", len(h), TypeName(t))
	}
	hd := 0
	if hdgst && hasHeaderDigest(t) {
		hd = DigestSize
		if len(h) < hlen+hd {
			return Layout{}, fatal(FESInvalidHeaderField, offHLen, "header of %d bytes for %s with a digest", len(h), TypeName(t))
		}
		if got, want := GetDigest(h[hlen:]), Digest(h[:hlen]); got != want {
			return Layout{}, fatal(FESHeaderDigestError, feiNone, "%s header digest %#08x, computed %#08x", TypeName(t), got, want)
		}
	}
	plen := h.PLen()
	switch t {
	case TypeICReq, TypeICResp:
		return Layout{}, nil
	case TypeH2CTermReq, TypeC2HTermReq:
		return Layout{DataLen: int(plen) - TermReqHLen}, nil
	}
	if plen == uint32(hlen+hd) {
		return Layout{}, nil
	}
	if !hasData(t) {
		return Layout{}, fatal(FESInvalidHeaderField, offPLen, "%s with PLEN %d, want %d", TypeName(t), plen, hlen+hd)
	}
	pdo := h.PDO()
	if pdo < hlen+hd || uint32(pdo) > plen {
		return Layout{}, fatal(FESInvalidHeaderField, offPDO, "%s with PDO %d (header %d bytes, PLEN %d)", TypeName(t), pdo, hlen+hd, plen)
	}
	if pda > 4 && pdo%pda != 0 {
		return Layout{}, fatal(FESInvalidHeaderField, offPDO, "%s with PDO %d, not a multiple of the %d-byte alignment asked for", TypeName(t), pdo, pda)
	}
	l := Layout{Pad: pdo - hlen - hd, DataLen: int(plen) - pdo}
	if got := h.Flags()&FlagDDGST != 0; got != ddgst {
		return Layout{}, fatal(FESInvalidHeaderField, offFlags, "%s with DDGST flag %t, data digests negotiated %t", TypeName(t), got, ddgst)
	}
	if ddgst {
		l.DataDigest = true
		l.DataLen -= DigestSize
	}
	if l.DataLen <= 0 {
		return Layout{}, fatal(FESInvalidHeaderField, offPLen, "%s with PLEN %d leaves no data after PDO %d", TypeName(t), plen, pdo)
	}
	if t == TypeH2CData || t == TypeC2HData {
		d := Data(h)
		if d.DataLength() != uint32(l.DataLen) {
			return Layout{}, fatal(FESInvalidHeaderField, offDataLength, "%s with DATAL %d but %d bytes of data", TypeName(t), d.DataLength(), l.DataLen)
		}
	}
	if t == TypeC2HData && h.Flags()&FlagSuccess != 0 && h.Flags()&FlagLast == 0 {
		return Layout{}, fatal(FESInvalidHeaderField, offFlags, "C2HData with SUCCESS but not LAST_PDU")
	}
	return l, nil
}

// Offsets of the initialization PDU fields (struct nvme_tcp_icreq_pdu,
// nvme_tcp_icresp_pdu).
const (
	offPFV     = 8  // pfv, __le16
	offPDA     = 10 // hpda (ICReq) or cpda (ICResp)
	offDGST    = 11 // digest
	offMaxData = 12 // maxr2t (ICReq, 0's based) or maxdata (ICResp: MAXH2CDATA)
)

// ICFields are the fields of an ICReq or ICResp.
type ICFields struct {
	// PFV is the PDU format version (PFV10).
	PFV uint16
	// PDA is HPDA (ICReq) or CPDA (ICResp): the data alignment the sender
	// asks of PDUs sent to it, in dwords, 0's based (0 to 31).
	PDA uint8
	// Digest is DigestHeader|DigestData as asked (ICReq) or enabled
	// (ICResp).
	Digest uint8
	// Max is MAXR2T (ICReq: R2Ts per command the host takes, 0's based) or
	// MAXH2CDATA (ICResp: the most data in one H2CData PDU).
	Max uint32
}

// IC is a view of an ICReq or ICResp (ICSize bytes).
type IC []byte

// Fields returns the PDU's fields.
func (p IC) Fields() ICFields {
	return ICFields{PFV: binary.LittleEndian.Uint16(p[offPFV:]), PDA: p[offPDA], Digest: p[offDGST], Max: binary.LittleEndian.Uint32(p[offMaxData:])}
}

// Encode writes a whole ICReq (typ TypeICReq) or ICResp into p.
func (p IC) Encode(typ uint8, f *ICFields) {
	p = p[:ICSize]
	clear(p)
	Header(p).Put(typ, 0, ICSize, false, 0, false, 0)
	binary.LittleEndian.PutUint16(p[offPFV:], f.PFV)
	p[offPDA], p[offDGST] = f.PDA, f.Digest
	binary.LittleEndian.PutUint32(p[offMaxData:], f.Max)
}

// CheckICReq checks a received ICReq (after CheckHeader and CheckPDU) as a
// controller: PFV 0, HPDA at most 31, no unknown digest bits. It returns
// its fields.
func CheckICReq(p IC) (ICFields, *Error) {
	f := p.Fields()
	if f.PFV != PFV10 {
		return f, fatal(FESUnsupportedParameter, offPFV, "ICReq with PFV %d, only %d is supported", f.PFV, PFV10)
	}
	if f.PDA > 31 {
		return f, fatal(FESInvalidHeaderField, offPDA, "ICReq with HPDA %d, at most 31", f.PDA)
	}
	if f.Digest&^(DigestHeader|DigestData) != 0 {
		return f, fatal(FESInvalidHeaderField, offDGST, "ICReq with digest bits %#x", f.Digest)
	}
	return f, nil
}

// CheckICResp checks a received ICResp as a host that asked for the digests
// in digest: PFV 0, the same digests, CPDA at most 31, MAXH2CDATA at least
// MinMaxH2CData and a multiple of 4, as Linux nvme_tcp_init_connection
// requires.
func CheckICResp(p IC, digest uint8) (ICFields, error) {
	f := p.Fields()
	switch {
	case f.PFV != PFV10:
		return f, fmt.Errorf("ICResp with PFV %d, want %d", f.PFV, PFV10)
	case f.Digest != digest:
		return f, fmt.Errorf("ICResp enables digests %#x, the host asked for %#x", f.Digest, digest)
	case f.PDA > 31:
		return f, fmt.Errorf("ICResp with CPDA %d, at most 31", f.PDA)
	case f.Max < MinMaxH2CData || f.Max%4 != 0:
		return f, fmt.Errorf("ICResp with MAXH2CDATA %d: want a multiple of 4, at least %d", f.Max, MinMaxH2CData)
	}
	return f, nil
}

// Offsets of the data and R2T PDU fields (struct nvme_tcp_data_pdu,
// nvme_tcp_r2t_pdu: the same layout).
const (
	offCCCID      = 8  // command_id
	offTTag       = 10 // ttag (reserved in C2HData)
	offDataOffset = 12 // data_offset / r2t_offset
	offDataLength = 16 // data_length / r2t_length
)

// DataFields are the fields of an H2CData, C2HData or R2T PDU.
type DataFields struct {
	CCCID  uint16 // the command's CID
	TTag   uint16 // the transfer tag of an R2T (and the H2CData answering it)
	Offset uint32 // byte offset from the start of the command's data
	Length uint32 // bytes in this PDU (data PDUs) or asked for (R2T)
}

// Data is a view of an H2CData, C2HData or R2T PDU header (DataHLen bytes).
type Data []byte

// CCCID returns the command capsule CID.
func (d Data) CCCID() uint16 { return binary.LittleEndian.Uint16(d[offCCCID:]) }

// TTag returns the transfer tag.
func (d Data) TTag() uint16 { return binary.LittleEndian.Uint16(d[offTTag:]) }

// DataOffset returns DATAO (R2TO).
func (d Data) DataOffset() uint32 { return binary.LittleEndian.Uint32(d[offDataOffset:]) }

// DataLength returns DATAL (R2TL).
func (d Data) DataLength() uint32 { return binary.LittleEndian.Uint32(d[offDataLength:]) }

// Fields returns the PDU's fields.
func (d Data) Fields() DataFields {
	return DataFields{CCCID: d.CCCID(), TTag: d.TTag(), Offset: d.DataOffset(), Length: d.DataLength()}
}

// Encode writes the PDU-specific fields (bytes 8 to 23; the common header
// is Header.Put's).
func (d Data) Encode(f *DataFields) {
	_ = d[DataHLen-1]
	binary.LittleEndian.PutUint16(d[offCCCID:], f.CCCID)
	binary.LittleEndian.PutUint16(d[offTTag:], f.TTag)
	binary.LittleEndian.PutUint32(d[offDataOffset:], f.Offset)
	binary.LittleEndian.PutUint32(d[offDataLength:], f.Length)
	clear(d[20:DataHLen])
}

// Offsets of the terminate request fields (TCP spec Figures 26 and 28).
const (
	offFES = 8  // __le16
	offFEI = 10 // __le32 (Linux: feil, feiu)
)

// TermReq is a view of an H2CTermReq or C2HTermReq.
type TermReq []byte

// FES returns the fatal error status.
func (t TermReq) FES() uint16 { return binary.LittleEndian.Uint16(t[offFES:]) }

// FEI returns the fatal error information.
func (t TermReq) FEI() uint32 { return binary.LittleEndian.Uint32(t[offFEI:]) }

// EncodeTermReq writes a terminate request of type typ (TypeH2CTermReq or
// TypeC2HTermReq) reporting fes and fei into b, echoing up to 128 bytes of
// the offending PDU header hdr, and returns its length. b must hold
// MaxTermReqSize bytes.
func EncodeTermReq(b []byte, typ uint8, fes uint16, fei uint32, hdr []byte) int {
	if len(hdr) > maxTermData {
		hdr = hdr[:maxTermData]
	}
	n := TermReqHLen + len(hdr)
	b = b[:n]
	clear(b[:TermReqHLen])
	b[offType], b[offHLen] = typ, TermReqHLen
	binary.LittleEndian.PutUint32(b[offPLen:], uint32(n))
	binary.LittleEndian.PutUint16(b[offFES:], fes)
	binary.LittleEndian.PutUint32(b[offFEI:], fei)
	copy(b[TermReqHLen:], hdr)
	return n
}

// FESName describes a fatal error status for messages.
func FESName(fes uint16) string {
	switch fes {
	case FESInvalidHeaderField:
		return "invalid PDU header field"
	case FESPDUSequenceError:
		return "PDU sequence error"
	case FESHeaderDigestError:
		return "header digest error"
	case FESDataOutOfRange:
		return "data transfer out of range"
	case FESDataLimitExceeded:
		return "data transfer limit exceeded"
	case FESUnsupportedParameter:
		return "unsupported parameter"
	}
	return fmt.Sprintf("fatal error status %#x", fes)
}

// ErrTerminated is matched by the error a receiver reports when the peer
// sent a terminate request.
var ErrTerminated = errors.New("nvme/tcp: the peer terminated the connection")
