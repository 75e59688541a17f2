package nvmeof

import (
	"encoding/binary"
	"fmt"
	"strconv"
)

// Sizes of the NVMe/RDMA connection manager private data (NVMe over
// Fabrics RDMA transport binding; include/linux/nvme-rdma.h). Over iWARP
// the MPA private data carries the 4-byte MPA v2 IRD/ORD words before these
// bytes; rdma_cm strips them, and so must an iWARP provider.
const (
	CMRequestSize = 32 // struct nvme_rdma_cm_req
	CMAcceptSize  = 32 // struct nvme_rdma_cm_rep
	CMRejectSize  = 4  // struct nvme_rdma_cm_rej
)

// CMRecFmt is the only defined record format (NVME_RDMA_CM_FMT_1_0).
const CMRecFmt uint16 = 0

// CMStatus is the status of an NVMe/RDMA CM reject (enum
// nvme_rdma_cm_status). It implements error, so the parse functions return
// it (wrapped with detail) and a target finds the status to reject with
// through errors.As.
type CMStatus uint16

// CM reject statuses.
const (
	CMInvalidLength  CMStatus = 0x01 // NVME_RDMA_CM_INVALID_LEN
	CMInvalidRecFmt  CMStatus = 0x02 // NVME_RDMA_CM_INVALID_RECFMT
	CMInvalidQID     CMStatus = 0x03 // NVME_RDMA_CM_INVALID_QID
	CMInvalidHSQSize CMStatus = 0x04 // NVME_RDMA_CM_INVALID_HSQSIZE
	CMInvalidHRQSize CMStatus = 0x05 // NVME_RDMA_CM_INVALID_HRQSIZE
	CMNoResources    CMStatus = 0x06 // NVME_RDMA_CM_NO_RSC
	CMInvalidIRD     CMStatus = 0x07 // NVME_RDMA_CM_INVALID_IRD
	CMInvalidORD     CMStatus = 0x08 // NVME_RDMA_CM_INVALID_ORD
)

// String returns the message Linux nvme_rdma_cm_msg prints for s.
func (s CMStatus) String() string {
	switch s {
	case CMInvalidLength:
		return "invalid length"
	case CMInvalidRecFmt:
		return "invalid record format"
	case CMInvalidQID:
		return "invalid queue ID"
	case CMInvalidHSQSize:
		return "invalid host SQ size"
	case CMInvalidHRQSize:
		return "invalid host RQ size"
	case CMNoResources:
		return "resource not found"
	case CMInvalidIRD:
		return "invalid IRD"
	case CMInvalidORD:
		return "invalid ORD"
	}
	return "unrecognized reason " + strconv.Itoa(int(s))
}

// Error makes a CMStatus an error.
func (s CMStatus) Error() string { return "nvmeof: RDMA CM reject: " + s.String() }

// Valid reports whether s is one of the defined statuses 1..8.
func (s CMStatus) Valid() bool { return s >= CMInvalidLength && s <= CMInvalidORD }

// CMRequest is a view of the 32-byte private data of an NVMe/RDMA connect
// request.
type CMRequest []byte

// CMRequestFields holds the fields of a CM connect request.
type CMRequestFields struct {
	RecFmt uint16
	// QID is the queue the connection carries: 0 for the admin queue.
	QID uint16
	// HRQSize is the number of receive queue entries the host posts
	// (1-based): its completion capacity, the controller's send queue size.
	HRQSize uint16
	// HSQSize is the host's submission queue size, 0-based: the
	// controller posts HSQSize+1 receives.
	HSQSize uint16
}

// RecFmt returns the record format.
func (r CMRequest) RecFmt() uint16 { return binary.LittleEndian.Uint16(r[0:]) }

// QID returns the queue ID.
func (r CMRequest) QID() uint16 { return binary.LittleEndian.Uint16(r[2:]) }

// HRQSize returns the host receive queue size.
func (r CMRequest) HRQSize() uint16 { return binary.LittleEndian.Uint16(r[4:]) }

// HSQSize returns the 0-based host send queue size.
func (r CMRequest) HSQSize() uint16 { return binary.LittleEndian.Uint16(r[6:]) }

// Encode writes all 32 bytes of the request, reserved bytes zeroed.
func (r CMRequest) Encode(f *CMRequestFields) {
	_ = r[CMRequestSize-1]
	clear(r[:CMRequestSize])
	binary.LittleEndian.PutUint16(r[0:], f.RecFmt)
	binary.LittleEndian.PutUint16(r[2:], f.QID)
	binary.LittleEndian.PutUint16(r[4:], f.HRQSize)
	binary.LittleEndian.PutUint16(r[6:], f.HSQSize)
}

// ParseCMRequest parses the private data of a connect request. Private
// data shorter than 32 bytes yields CMInvalidLength and a record format
// other than 0 CMInvalidRecFmt (as Linux nvmet_rdma_parse_cm_connect_req),
// wrapped with detail. Longer private data is accepted: InfiniBand CM pads
// it. Reserved bytes are ignored.
func ParseCMRequest(pd []byte) (CMRequestFields, error) {
	if len(pd) < CMRequestSize {
		return CMRequestFields{}, fmt.Errorf("%w (%d bytes, want %d)", CMInvalidLength, len(pd), CMRequestSize)
	}
	r := CMRequest(pd)
	f := CMRequestFields{RecFmt: r.RecFmt(), QID: r.QID(), HRQSize: r.HRQSize(), HSQSize: r.HSQSize()}
	if f.RecFmt != CMRecFmt {
		return f, fmt.Errorf("%w (recfmt %d)", CMInvalidRecFmt, f.RecFmt)
	}
	return f, nil
}

// Check applies a target's limits to a parsed request: QID at most maxQID
// (CMInvalidQID); for the admin queue HSQSIZE+1 at most AdminQueueDepth,
// for I/O queues at most maxQueueSize (CMInvalidHSQSize); HRQSIZE from 1 to
// the same bound (CMInvalidHRQSize). The admin bound is the one Linux nvmet
// enforces; the others are rdisk policy.
func (f CMRequestFields) Check(maxQID, maxQueueSize uint16) error {
	if f.QID > maxQID {
		return fmt.Errorf("%w (qid %d, at most %d)", CMInvalidQID, f.QID, maxQID)
	}
	limit := uint32(maxQueueSize)
	if f.QID == 0 {
		limit = AdminQueueDepth
	}
	if uint32(f.HSQSize)+1 > limit {
		return fmt.Errorf("%w (hsqsize %d, queue at most %d entries)", CMInvalidHSQSize, f.HSQSize, limit)
	}
	if f.HRQSize == 0 || uint32(f.HRQSize) > limit {
		return fmt.Errorf("%w (hrqsize %d, at most %d)", CMInvalidHRQSize, f.HRQSize, limit)
	}
	return nil
}

// CMAccept is a view of the 32-byte private data of an NVMe/RDMA connect
// accept (reply).
type CMAccept []byte

// CMAcceptFields holds the fields of a CM accept.
type CMAcceptFields struct {
	RecFmt uint16
	// CRQSize is the controller receive queue size: Linux nvmet answers
	// HSQSIZE+1.
	CRQSize uint16
}

// RecFmt returns the record format.
func (a CMAccept) RecFmt() uint16 { return binary.LittleEndian.Uint16(a[0:]) }

// CRQSize returns the controller receive queue size.
func (a CMAccept) CRQSize() uint16 { return binary.LittleEndian.Uint16(a[2:]) }

// Encode writes all 32 bytes of the accept, reserved bytes zeroed.
func (a CMAccept) Encode(f *CMAcceptFields) {
	_ = a[CMAcceptSize-1]
	clear(a[:CMAcceptSize])
	binary.LittleEndian.PutUint16(a[0:], f.RecFmt)
	binary.LittleEndian.PutUint16(a[2:], f.CRQSize)
}

// ParseCMAccept parses the private data of a connect accept, as the host
// receives it. Short data or a record format other than 0 is an error.
func ParseCMAccept(pd []byte) (CMAcceptFields, error) {
	if len(pd) < CMAcceptSize {
		return CMAcceptFields{}, fmt.Errorf("%w: accept %d bytes, want %d", errShortCMData, len(pd), CMAcceptSize)
	}
	a := CMAccept(pd)
	f := CMAcceptFields{RecFmt: a.RecFmt(), CRQSize: a.CRQSize()}
	if f.RecFmt != CMRecFmt {
		return f, fmt.Errorf("%w: accept recfmt %d", errCMRecFmt, f.RecFmt)
	}
	return f, nil
}

// CMReject is a view of the 4-byte private data of an NVMe/RDMA connect
// reject.
type CMReject []byte

// CMRejectFields holds the fields of a CM reject.
type CMRejectFields struct {
	RecFmt uint16
	Status CMStatus
}

// RecFmt returns the record format.
func (r CMReject) RecFmt() uint16 { return binary.LittleEndian.Uint16(r[0:]) }

// Status returns the reject status.
func (r CMReject) Status() CMStatus { return CMStatus(binary.LittleEndian.Uint16(r[2:])) }

// Encode writes the 4 bytes of the reject.
func (r CMReject) Encode(f *CMRejectFields) {
	_ = r[CMRejectSize-1]
	binary.LittleEndian.PutUint16(r[0:], f.RecFmt)
	binary.LittleEndian.PutUint16(r[2:], uint16(f.Status))
}

// ParseCMReject parses the private data of a connect reject, as the host
// receives it. Data shorter than 4 bytes (a reject that is not from an
// NVMe/RDMA controller), a record format other than 0 or a status outside
// 1..8 is an error; the fields are returned as far as they were read.
func ParseCMReject(pd []byte) (CMRejectFields, error) {
	if len(pd) < CMRejectSize {
		return CMRejectFields{}, fmt.Errorf("%w: reject %d bytes, want %d", errShortCMData, len(pd), CMRejectSize)
	}
	r := CMReject(pd)
	f := CMRejectFields{RecFmt: r.RecFmt(), Status: r.Status()}
	if f.RecFmt != CMRecFmt {
		return f, fmt.Errorf("%w: reject recfmt %d", errCMRecFmt, f.RecFmt)
	}
	if !f.Status.Valid() {
		return f, fmt.Errorf("%w: %d", errCMStatus, uint16(f.Status))
	}
	return f, nil
}
