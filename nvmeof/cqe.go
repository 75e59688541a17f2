package nvmeof

import (
	"encoding/binary"
	"fmt"
)

// CQESize is the size of a completion queue entry (struct nvme_completion).
// On NVMe/RDMA a response capsule is exactly one CQE.
const CQESize = 16

// CQE field offsets (struct nvme_completion).
const (
	cqeDW0    = 0  // result (u16, u32 or the low half of u64)
	cqeDW1    = 4  // result (high half of u64)
	cqeSQHead = 8  // sq_head
	cqeSQID   = 10 // sq_id
	cqeCID    = 12 // command_id
	cqeStatus = 14 // status: phase bit 0, status field bits 15:1
)

// SQHeadDisabled is the SQ Head Pointer a controller reports when the
// host's Connect asked for SQ flow control to be disabled
// (ConnectAttrDisableSQFlow).
const SQHeadDisabled uint16 = 0xffff

// CQE is a view of a 16-byte completion queue entry.
type CQE []byte

// CQEFields holds the fields of a completion queue entry.
type CQEFields struct {
	// Result is the command specific result: DW0 in the low 32 bits, DW1
	// in the high 32 (Property Get of an 8-byte property uses both).
	Result uint64
	SQHead uint16
	SQID   uint16
	CID    uint16
	Status Status
	// Phase is the phase tag. Fabrics transports do not use it; Linux
	// nvmet always sends 0.
	Phase bool
}

// ParseCQE returns the first 16 bytes of b as a CQE view.
func ParseCQE(b []byte) (CQE, error) {
	if len(b) < CQESize {
		return nil, fmt.Errorf("%w: %d bytes", errShortCQE, len(b))
	}
	return CQE(b[:CQESize]), nil
}

// DW0 returns completion dword 0, the usual command specific result.
func (c CQE) DW0() uint32 { return binary.LittleEndian.Uint32(c[cqeDW0:]) }

// DW1 returns completion dword 1.
func (c CQE) DW1() uint32 { return binary.LittleEndian.Uint32(c[cqeDW1:]) }

// Result returns DW1:DW0 as one 64-bit result.
func (c CQE) Result() uint64 { return binary.LittleEndian.Uint64(c[cqeDW0:]) }

// SQHead returns the SQ head pointer.
func (c CQE) SQHead() uint16 { return binary.LittleEndian.Uint16(c[cqeSQHead:]) }

// SQID returns the SQ identifier.
func (c CQE) SQID() uint16 { return binary.LittleEndian.Uint16(c[cqeSQID:]) }

// CID returns the identifier of the completed command.
func (c CQE) CID() uint16 { return binary.LittleEndian.Uint16(c[cqeCID:]) }

// RawStatus returns the 16-bit status word with the phase tag in bit 0.
func (c CQE) RawStatus() uint16 { return binary.LittleEndian.Uint16(c[cqeStatus:]) }

// Status returns the status field (the raw word shifted right by one).
func (c CQE) Status() Status { return Status(c.RawStatus() >> 1) }

// Phase returns the phase tag.
func (c CQE) Phase() bool { return c.RawStatus()&1 != 0 }

// Encode writes all 16 bytes of the CQE.
func (c CQE) Encode(f *CQEFields) {
	_ = c[CQESize-1]
	le := binary.LittleEndian
	le.PutUint64(c[cqeDW0:], f.Result)
	le.PutUint16(c[cqeSQHead:], f.SQHead)
	le.PutUint16(c[cqeSQID:], f.SQID)
	le.PutUint16(c[cqeCID:], f.CID)
	raw := uint16(f.Status) << 1
	if f.Phase {
		raw |= 1
	}
	le.PutUint16(c[cqeStatus:], raw)
}

// Fields returns the CQE's fields. Bit 15 of the status field is reserved
// and dropped.
func (c CQE) Fields() CQEFields {
	return CQEFields{
		Result: c.Result(),
		SQHead: c.SQHead(),
		SQID:   c.SQID(),
		CID:    c.CID(),
		Status: c.Status(),
		Phase:  c.Phase(),
	}
}
