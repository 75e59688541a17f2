package nvmeof

import (
	"encoding/binary"
	"fmt"
)

// Discovery log page sizes (struct nvmf_disc_rsp_page_hdr and struct
// nvmf_disc_rsp_page_entry).
const (
	DiscoveryLogHeaderSize = 1024
	DiscoveryLogEntrySize  = 1024
)

// Transport types, TRTYPE (Linux NVMF_TRTYPE_*).
const (
	TrTypeRDMA uint8 = 1   // NVMF_TRTYPE_RDMA
	TrTypeFC   uint8 = 2   // NVMF_TRTYPE_FC
	TrTypeTCP  uint8 = 3   // NVMF_TRTYPE_TCP
	TrTypeLoop uint8 = 254 // NVMF_TRTYPE_LOOP
)

// Address families, ADRFAM (Linux NVMF_ADDR_FAMILY_*).
const (
	AdrFamPCI  uint8 = 0   // NVMF_ADDR_FAMILY_PCI
	AdrFamIPv4 uint8 = 1   // NVMF_ADDR_FAMILY_IP4
	AdrFamIPv6 uint8 = 2   // NVMF_ADDR_FAMILY_IP6
	AdrFamIB   uint8 = 3   // NVMF_ADDR_FAMILY_IB
	AdrFamFC   uint8 = 4   // NVMF_ADDR_FAMILY_FC
	AdrFamLoop uint8 = 254 // NVMF_ADDR_FAMILY_LOOP
)

// Subsystem types, SUBTYPE (Linux enum nvme_subsys_type).
const (
	SubTypeReferral         uint8 = 1 // NVME_NQN_DISC: another discovery controller
	SubTypeNVMe             uint8 = 2 // NVME_NQN_NVME: an NVM subsystem
	SubTypeCurrentDiscovery uint8 = 3 // NVME_NQN_CURR: this discovery subsystem
)

// Transport requirements, TREQ (Linux NVMF_TREQ_*).
const (
	TReqNotSpecified  uint8 = 0      // NVMF_TREQ_NOT_SPECIFIED
	TReqRequired      uint8 = 1      // NVMF_TREQ_REQUIRED: secure channel required
	TReqNotRequired   uint8 = 2      // NVMF_TREQ_NOT_REQUIRED
	TReqDisableSQFlow uint8 = 1 << 2 // NVMF_TREQ_DISABLE_SQFLOW: SQ flow control disable supported
)

// Entry flags, EFLAGS (Linux NVME_DISC_EFLAGS_*).
const (
	EFlagsDupRetInfo uint16 = 1 << 0 // NVME_DISC_EFLAGS_DUPRETINFO
	EFlagsEPCSD      uint16 = 1 << 1 // NVME_DISC_EFLAGS_EPCSD
)

// RDMA transport specific address subtype values (Linux NVMF_RDMA_*).
const (
	RDMAQPTypeConnected uint8 = 1 // NVMF_RDMA_QPTYPE_CONNECTED
	RDMAQPTypeDatagram  uint8 = 2 // NVMF_RDMA_QPTYPE_DATAGRAM

	RDMAPrTypeNotSpecified uint8 = 1 // NVMF_RDMA_PRTYPE_NOT_SPECIFIED
	RDMAPrTypeIB           uint8 = 2 // NVMF_RDMA_PRTYPE_IB
	RDMAPrTypeRoCE         uint8 = 3 // NVMF_RDMA_PRTYPE_ROCE
	RDMAPrTypeRoCEv2       uint8 = 4 // NVMF_RDMA_PRTYPE_ROCEV2
	RDMAPrTypeIWARP        uint8 = 5 // NVMF_RDMA_PRTYPE_IWARP

	RDMACMSRDMACM uint8 = 1 // NVMF_RDMA_CMS_RDMA_CM
)

// Discovery log entry field offsets (struct nvmf_disc_rsp_page_entry).
const (
	dleTrType     = 0   // trtype
	dleAdrFam     = 1   // adrfam
	dleSubType    = 2   // subtype
	dleTReq       = 3   // treq
	dlePortID     = 4   // portid
	dleCNTLID     = 6   // cntlid
	dleASQSZ      = 8   // asqsz
	dleEFlags     = 10  // eflags
	dleTrSvcID    = 32  // trsvcid[NVMF_TRSVCID_SIZE]
	dleSubNQN     = 256 // subnqn[NVMF_NQN_FIELD_LEN]
	dleTrAddr     = 512 // traddr[NVMF_TRADDR_SIZE]
	dleTSAS       = 768 // tsas[NVMF_TSAS_SIZE]
	dleRDMAQPType = 768 // tsas.rdma.qptype
	dleRDMAPrType = 769 // tsas.rdma.prtype
	dleRDMACMS    = 770 // tsas.rdma.cms
	dleRDMAPKey   = 776 // tsas.rdma.pkey

	trSvcIDSize = 32  // NVMF_TRSVCID_SIZE
	trAddrSize  = 256 // NVMF_TRADDR_SIZE
)

// DiscoveryLogHeader is the header of the Discovery log page (LID 70h).
type DiscoveryLogHeader struct {
	// GenCtr is the generation counter; it changes whenever the log does.
	GenCtr uint64
	// NumRec is the number of entries the log holds, also when the host
	// asked for fewer bytes.
	NumRec uint64
	RecFmt uint16
}

// Encode writes the 1024-byte header into b.
func (h *DiscoveryLogHeader) Encode(b []byte) error {
	if len(b) < DiscoveryLogHeaderSize {
		return fmt.Errorf("%w: discovery log header needs %d bytes, have %d", errShortBuffer, DiscoveryLogHeaderSize, len(b))
	}
	clear(b[:DiscoveryLogHeaderSize])
	binary.LittleEndian.PutUint64(b[0:], h.GenCtr)
	binary.LittleEndian.PutUint64(b[8:], h.NumRec)
	binary.LittleEndian.PutUint16(b[16:], h.RecFmt)
	return nil
}

// ParseDiscoveryLogHeader parses the header of a Discovery log page.
func ParseDiscoveryLogHeader(b []byte) (DiscoveryLogHeader, error) {
	if len(b) < DiscoveryLogHeaderSize {
		return DiscoveryLogHeader{}, fmt.Errorf("%w: discovery log header %d bytes, want %d",
			errShortLogPage, len(b), DiscoveryLogHeaderSize)
	}
	return DiscoveryLogHeader{
		GenCtr: binary.LittleEndian.Uint64(b[0:]),
		NumRec: binary.LittleEndian.Uint64(b[8:]),
		RecFmt: binary.LittleEndian.Uint16(b[16:]),
	}, nil
}

// DiscoveryLogEntry is one Discovery log page entry. The RDMA fields are
// the RDMA transport specific address subtype (TSAS) and are meaningful
// when TrType is TrTypeRDMA; for TCP the first TSAS byte is SECTYPE, which
// shares RDMAQPType's position.
type DiscoveryLogEntry struct {
	TrType  uint8  // TrType*
	AdrFam  uint8  // AdrFam*
	SubType uint8  // SubType*
	TReq    uint8  // TReq*
	PortID  uint16 // NVM subsystem port ID
	// CNTLID is CNTLIDDynamic for the dynamic controller model.
	CNTLID uint16
	// ASQSZ is the maximum admin submission queue size (Linux nvmet:
	// AdminQueueDepth).
	ASQSZ  uint16
	EFlags uint16 // EFlags*
	// TrSvcID is the transport service ID: the port number for IP
	// transports, as a decimal string.
	TrSvcID string
	// SubNQN is the subsystem NQN (DiscoveryNQN for discovery entries).
	SubNQN string
	// TrAddr is the transport address: a dotted IPv4 or IPv6 address.
	TrAddr string

	RDMAQPType uint8  // RDMAQPType*
	RDMAPrType uint8  // RDMAPrType*
	RDMACMS    uint8  // RDMACMS*
	RDMAPKey   uint16 // InfiniBand partition key, 0 otherwise
}

// Encode writes the 1024-byte entry into b. Strings are NUL padded, as
// Linux nvmet pads them; TrSvcID and TrAddr must be printable ASCII that
// fits (32 and 256 bytes) and SubNQN at most MaxNQNLength bytes, else the
// error is a *FieldError and b is left untouched.
func (e *DiscoveryLogEntry) Encode(b []byte) error {
	if len(b) < DiscoveryLogEntrySize {
		return fmt.Errorf("%w: discovery log entry needs %d bytes, have %d", errShortBuffer, DiscoveryLogEntrySize, len(b))
	}
	if err := checkPadded(e.TrSvcID, trSvcIDSize, true); err != nil {
		return fieldErr("discovery log entry", "TRSVCID", dleTrSvcID, err)
	}
	if err := checkPadded(e.TrAddr, trAddrSize, true); err != nil {
		return fieldErr("discovery log entry", "TRADDR", dleTrAddr, err)
	}
	if err := checkNQNField(e.SubNQN); err != nil {
		return fieldErr("discovery log entry", "SUBNQN", dleSubNQN, err)
	}
	b = b[:DiscoveryLogEntrySize]
	clear(b)
	le := binary.LittleEndian
	b[dleTrType] = e.TrType
	b[dleAdrFam] = e.AdrFam
	b[dleSubType] = e.SubType
	b[dleTReq] = e.TReq
	le.PutUint16(b[dlePortID:], e.PortID)
	le.PutUint16(b[dleCNTLID:], e.CNTLID)
	le.PutUint16(b[dleASQSZ:], e.ASQSZ)
	le.PutUint16(b[dleEFlags:], e.EFlags)
	copy(b[dleTrSvcID:], e.TrSvcID)
	copy(b[dleSubNQN:], e.SubNQN)
	copy(b[dleTrAddr:], e.TrAddr)
	b[dleRDMAQPType] = e.RDMAQPType
	b[dleRDMAPrType] = e.RDMAPrType
	b[dleRDMACMS] = e.RDMACMS
	le.PutUint16(b[dleRDMAPKey:], e.RDMAPKey)
	return nil
}

// ParseDiscoveryLogEntry parses one 1024-byte entry. Strings lose their
// NUL or space padding; nothing else is validated.
func ParseDiscoveryLogEntry(b []byte) (DiscoveryLogEntry, error) {
	if len(b) < DiscoveryLogEntrySize {
		return DiscoveryLogEntry{}, fmt.Errorf("%w: discovery log entry %d bytes, want %d",
			errShortLogPage, len(b), DiscoveryLogEntrySize)
	}
	le := binary.LittleEndian
	return DiscoveryLogEntry{
		TrType:     b[dleTrType],
		AdrFam:     b[dleAdrFam],
		SubType:    b[dleSubType],
		TReq:       b[dleTReq],
		PortID:     le.Uint16(b[dlePortID:]),
		CNTLID:     le.Uint16(b[dleCNTLID:]),
		ASQSZ:      le.Uint16(b[dleASQSZ:]),
		EFlags:     le.Uint16(b[dleEFlags:]),
		TrSvcID:    trimField(b[dleTrSvcID : dleTrSvcID+trSvcIDSize]),
		SubNQN:     trimField(b[dleSubNQN : dleSubNQN+NQNFieldSize]),
		TrAddr:     trimField(b[dleTrAddr : dleTrAddr+trAddrSize]),
		RDMAQPType: b[dleRDMAQPType],
		RDMAPrType: b[dleRDMAPrType],
		RDMACMS:    b[dleRDMACMS],
		RDMAPKey:   le.Uint16(b[dleRDMAPKey:]),
	}, nil
}

// DiscoveryLogSize returns the size of a Discovery log page with n entries.
func DiscoveryLogSize(n int) int { return DiscoveryLogHeaderSize + n*DiscoveryLogEntrySize }

// EncodeDiscoveryLog writes a whole Discovery log page into b: a header
// with genctr, NUMREC len(entries) and RECFMT 0, then the entries. It
// returns the number of bytes written, DiscoveryLogSize(len(entries)). A
// target serves a Get Log Page from it with LogPageRange.
func EncodeDiscoveryLog(b []byte, genctr uint64, entries []DiscoveryLogEntry) (int, error) {
	n := DiscoveryLogSize(len(entries))
	if len(b) < n {
		return 0, fmt.Errorf("%w: discovery log with %d entries needs %d bytes, have %d",
			errShortBuffer, len(entries), n, len(b))
	}
	h := DiscoveryLogHeader{GenCtr: genctr, NumRec: uint64(len(entries))}
	if err := h.Encode(b); err != nil {
		return 0, err
	}
	for i := range entries {
		if err := entries[i].Encode(b[DiscoveryLogSize(i):]); err != nil {
			return 0, fmt.Errorf("entry %d: %w", i, err)
		}
	}
	return n, nil
}

// ParseDiscoveryLog parses a Discovery log page: the header and the entries
// b holds. If b holds fewer entries than NUMREC (the host read a partial
// page, or the log grew), it returns those it holds together with an error;
// a host then reads the page again with the size NUMREC asks for and checks
// that GENCTR did not change.
func ParseDiscoveryLog(b []byte) (DiscoveryLogHeader, []DiscoveryLogEntry, error) {
	h, err := ParseDiscoveryLogHeader(b)
	if err != nil {
		return h, nil, err
	}
	avail := uint64(len(b)-DiscoveryLogHeaderSize) / DiscoveryLogEntrySize
	n := min(avail, h.NumRec)
	entries := make([]DiscoveryLogEntry, n)
	for i := range entries {
		// Cannot fail: the length was checked above.
		entries[i], _ = ParseDiscoveryLogEntry(b[DiscoveryLogSize(i):])
	}
	if n < h.NumRec {
		return h, entries, fmt.Errorf("%w: %d of %d entries in %d bytes", errTruncatedDiscLog, n, h.NumRec, len(b))
	}
	return h, entries, nil
}
