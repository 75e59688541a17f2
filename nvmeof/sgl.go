package nvmeof

import (
	"encoding/binary"
	"fmt"
)

// SGLSize is the size of an SGL descriptor (struct nvme_sgl_desc and struct
// nvme_keyed_sgl_desc).
const SGLSize = 16

// SGL descriptor types, the upper nibble of the identifier byte (NVMe Base
// Specification, SGL Descriptor Type; Linux NVME_SGL_FMT_*_DESC).
const (
	SGLTypeDataBlock          uint8 = 0x0 // NVME_SGL_FMT_DATA_DESC
	SGLTypeBitBucket          uint8 = 0x1
	SGLTypeSegment            uint8 = 0x2 // NVME_SGL_FMT_SEG_DESC
	SGLTypeLastSegment        uint8 = 0x3 // NVME_SGL_FMT_LAST_SEG_DESC
	SGLTypeKeyedDataBlock     uint8 = 0x4 // NVME_KEY_SGL_FMT_DATA_DESC
	SGLTypeTransportDataBlock uint8 = 0x5 // NVME_TRANSPORT_SGL_DATA_DESC
)

// SGL descriptor subtypes, the lower nibble of the identifier byte (Linux
// NVME_SGL_FMT_ADDRESS and friends).
const (
	SGLSubtypeAddress    uint8 = 0x0 // NVME_SGL_FMT_ADDRESS
	SGLSubtypeOffset     uint8 = 0x1 // NVME_SGL_FMT_OFFSET
	SGLSubtypeTransportA uint8 = 0xa // NVME_SGL_FMT_TRANSPORT_A
	SGLSubtypeInvalidate uint8 = 0xf // NVME_SGL_FMT_INVALIDATE (RDMA)
)

// Whole identifier bytes the NVMe/RDMA transport uses (Linux host/rdma.c
// nvme_rdma_map_data, target/rdma.c nvmet_rdma_map_sgl).
const (
	// SGLKeyed is a keyed data block with an address: the host's buffer
	// under a remote key, no invalidation requested (0x40).
	SGLKeyed uint8 = SGLTypeKeyedDataBlock<<4 | SGLSubtypeAddress
	// SGLKeyedInvalidate is a keyed data block whose key the controller
	// invalidates with Send with Invalidate when it completes (0x4F).
	SGLKeyedInvalidate uint8 = SGLTypeKeyedDataBlock<<4 | SGLSubtypeInvalidate
	// SGLInCapsule is a data block with an offset: the data follows the
	// SQE in the command capsule, at Address bytes past ICDOFF (0x01).
	SGLInCapsule uint8 = SGLTypeDataBlock<<4 | SGLSubtypeOffset
	// SGLTransport is the transport SGL data block of NVMe/TCP: the data
	// moves in C2HData PDUs, or H2CData PDUs after R2T (0x5A; Linux
	// nvme_tcp_set_sg_host_data, also with length 0 for no data).
	SGLTransport uint8 = SGLTypeTransportDataBlock<<4 | SGLSubtypeTransportA
)

// MaxKeyedSGLLength is the largest length a keyed SGL descriptor carries
// (24 bits).
const MaxKeyedSGLLength = 1<<24 - 1

// SGL descriptor field offsets (struct nvme_sgl_desc / nvme_keyed_sgl_desc).
const (
	sglAddress    = 0  // addr, __le64
	sglLength     = 8  // length: __le32 (unkeyed) or __u8[3] (keyed)
	sglKey        = 11 // key, __u8[4] little endian (keyed)
	sglIdentifier = 15 // type: descriptor type << 4 | subtype
)

// SGL is a view of a 16-byte SGL descriptor, as found in the DPTR of an SQE.
type SGL []byte

// SGLFields holds the fields of an SGL descriptor for Encode.
type SGLFields struct {
	// Identifier is the descriptor type << 4 | subtype, e.g. SGLKeyed.
	Identifier uint8
	// Address is the host address (keyed and address subtypes) or the
	// offset into the in-capsule data (offset subtype).
	Address uint64
	// Length is the data length in bytes. A keyed descriptor holds 24
	// bits: Encode keeps only the low 24 bits, so callers limit transfers
	// to MaxKeyedSGLLength (MDTS does).
	Length uint32
	// Key is the remote key (RDMA rkey, iWARP STag) of a keyed descriptor.
	Key uint32
}

// ParseSGL returns b as an SGL view if it is long enough. It checks
// nothing else: CheckRDMA validates the descriptor for the RDMA transport.
func ParseSGL(b []byte) (SGL, error) {
	if len(b) < SGLSize {
		return nil, fmt.Errorf("%w: %d bytes", errShortSGL, len(b))
	}
	return SGL(b[:SGLSize]), nil
}

// Identifier returns the identifier byte: type << 4 | subtype.
func (s SGL) Identifier() uint8 { return s[sglIdentifier] }

// Type returns the descriptor type (upper nibble of the identifier).
func (s SGL) Type() uint8 { return s[sglIdentifier] >> 4 }

// Subtype returns the descriptor subtype (lower nibble of the identifier).
func (s SGL) Subtype() uint8 { return s[sglIdentifier] & 0xf }

// Keyed reports whether s is a keyed data block descriptor.
func (s SGL) Keyed() bool { return s.Type() == SGLTypeKeyedDataBlock }

// Invalidate reports whether s asks the controller to invalidate its key
// (keyed data block, subtype 0xF).
func (s SGL) Invalidate() bool { return s.Identifier() == SGLKeyedInvalidate }

// Address returns the address (or in-capsule offset) field.
func (s SGL) Address() uint64 { return binary.LittleEndian.Uint64(s[sglAddress:]) }

// Length returns the data length: 24 bits for a keyed descriptor, 32 bits
// otherwise.
func (s SGL) Length() uint32 {
	if s.Keyed() {
		return get24(s[sglLength:])
	}
	return binary.LittleEndian.Uint32(s[sglLength:])
}

// Key returns the key of a keyed descriptor. For other types the bytes are
// reserved (or part of the 32-bit length) and Key is meaningless.
func (s SGL) Key() uint32 { return binary.LittleEndian.Uint32(s[sglKey:]) }

// Encode writes all 16 bytes of the descriptor. A keyed descriptor gets a
// 24-bit length and the key; any other type gets a 32-bit length and zeroed
// reserved bytes.
func (s SGL) Encode(f *SGLFields) {
	_ = s[SGLSize-1]
	binary.LittleEndian.PutUint64(s[sglAddress:], f.Address)
	if f.Identifier>>4 == SGLTypeKeyedDataBlock {
		put24(s[sglLength:], f.Length)
		binary.LittleEndian.PutUint32(s[sglKey:], f.Key)
	} else {
		binary.LittleEndian.PutUint32(s[sglLength:], f.Length)
		s[12], s[13], s[14] = 0, 0, 0
	}
	s[sglIdentifier] = f.Identifier
}

// Fields returns the descriptor's fields; Encode(Fields()) reproduces a
// well-formed descriptor.
func (s SGL) Fields() SGLFields {
	f := SGLFields{Identifier: s.Identifier(), Address: s.Address(), Length: s.Length()}
	if s.Keyed() {
		f.Key = s.Key()
	}
	return f
}

// CheckRDMA validates s as the data pointer (SGL1) of a command received
// over the NVMe/RDMA transport, as Linux nvmet_rdma_map_sgl does:
//
//   - keyed data block 0x40 or 0x4F: accepted (any 24-bit length);
//   - keyed data block with another subtype: Invalid Field in Command;
//   - data block with the offset subtype (in-capsule data, 0x01): only for
//     commands that write (write is the command's host-to-controller
//     direction), else Invalid Field; Address+Length must lie within the
//     inCapsule bytes of data that arrived after the SQE, else SGL Offset
//     Invalid (checked without overflow, unlike some nvmet releases);
//   - data block with another subtype: Invalid Field in Command;
//   - any other descriptor type (segments, bit bucket, transport data
//     block): SGL Descriptor Type Invalid.
//
// All with DNR. The returned error is a *CommandError locating the DPTR
// (or the opcode, for in-capsule data on a read), or nil.
func (s SGL) CheckRDMA(write bool, inCapsule uint32) error {
	switch s.Type() {
	case SGLTypeKeyedDataBlock:
		switch s.Subtype() {
		case SGLSubtypeAddress, SGLSubtypeInvalidate:
			return nil
		}
		return cmdErr(StatusInvalidField|StatusDNR, OffsetDPTR,
			fmt.Errorf("%w: identifier %#02x", errSGLSubtype, s.Identifier()))
	case SGLTypeDataBlock:
		if s.Subtype() != SGLSubtypeOffset {
			return cmdErr(StatusInvalidField|StatusDNR, OffsetDPTR,
				fmt.Errorf("%w: identifier %#02x", errSGLSubtype, s.Identifier()))
		}
		if !write {
			return cmdErr(StatusInvalidField|StatusDNR, OffsetOpcode, errSGLInCapsuleRead)
		}
		off, n := s.Address(), uint64(s.Length())
		if off > uint64(inCapsule) || n > uint64(inCapsule)-off {
			return cmdErr(StatusSGLInvalidOffset|StatusDNR, OffsetDPTR,
				fmt.Errorf("%w: offset %d length %d, %d bytes in capsule", errSGLOffset, off, n, inCapsule))
		}
		return nil
	}
	return cmdErr(StatusSGLInvalidType|StatusDNR, OffsetDPTR,
		fmt.Errorf("%w: identifier %#02x", errSGLType, s.Identifier()))
}

// CheckTCP validates s as the data pointer of a command received over the
// NVMe/TCP transport, as Linux nvmet_tcp_map_data and the TCP transport
// specification (section 7.4.8) have it: the transport data block 0x5A
// (data by C2HData, or R2T and H2CData) is accepted with any length; the
// in-capsule data block 0x01 is checked as CheckRDMA does against the
// inCapsule bytes the CapsuleCmd PDU carried; keyed data blocks, which
// need RDMA, and every other type are SGL Descriptor Type Invalid, other
// subtypes Invalid Field; all with DNR.
func (s SGL) CheckTCP(write bool, inCapsule uint32) error {
	switch s.Type() {
	case SGLTypeTransportDataBlock:
		if s.Subtype() != SGLSubtypeTransportA {
			return cmdErr(StatusInvalidField|StatusDNR, OffsetDPTR,
				fmt.Errorf("%w: identifier %#02x", errSGLSubtypeTCP, s.Identifier()))
		}
		return nil
	case SGLTypeDataBlock:
		return s.CheckRDMA(write, inCapsule)
	}
	return cmdErr(StatusSGLInvalidType|StatusDNR, OffsetDPTR,
		fmt.Errorf("%w: identifier %#02x", errSGLTypeTCP, s.Identifier()))
}

// CheckTransferLen compares the length a command's SGL describes with the
// length the command itself implies (NLB and the LBA size, NUMD, the size of
// the Identify data...). A mismatch is Data SGL Length Invalid with DNR at
// the DPTR, as Linux nvmet_check_transfer_len reports it.
func CheckTransferLen(sglLen uint32, want uint64) error {
	if uint64(sglLen) == want {
		return nil
	}
	return cmdErr(StatusSGLInvalidDataLength|StatusDNR, OffsetDPTR,
		fmt.Errorf("%w: SGL %d bytes, command %d", errTransferLen, sglLen, want))
}

func get24(b []byte) uint32 {
	_ = b[2]
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16
}

func put24(b []byte, v uint32) {
	_ = b[2]
	b[0], b[1], b[2] = byte(v), byte(v>>8), byte(v>>16)
}
