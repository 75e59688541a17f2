package nvmeof

import (
	"encoding/binary"
	"fmt"
)

// IdentifySize is the size of every Identify data structure
// (NVME_IDENTIFY_DATA_SIZE).
const IdentifySize = 4096

// Identify CNS values (Linux NVME_ID_CNS_*).
const (
	CNSNamespace        uint8 = 0x00 // NVME_ID_CNS_NS
	CNSController       uint8 = 0x01 // NVME_ID_CNS_CTRL
	CNSActiveNSList     uint8 = 0x02 // NVME_ID_CNS_NS_ACTIVE_LIST
	CNSNSDescriptorList uint8 = 0x03 // NVME_ID_CNS_NS_DESC_LIST
	CNSCSNamespace      uint8 = 0x05 // NVME_ID_CNS_CS_NS
	CNSCSController     uint8 = 0x06 // NVME_ID_CNS_CS_CTRL
	CNSActiveNSListCS   uint8 = 0x07 // NVME_ID_CNS_NS_ACTIVE_LIST_CS
	CNSNamespaceCSIndep uint8 = 0x08 // NVME_ID_CNS_NS_CS_INDEP
	CNSControllerNSList uint8 = 0x12 // NVME_ID_CNS_CTRL_NS_LIST
	CNSControllerList   uint8 = 0x13 // NVME_ID_CNS_CTRL_LIST
	CNSUUIDList         uint8 = 0x17 // NVME_ID_CNS_UUID_LIST
)

// Command set identifiers (Linux NVME_CSI_*).
const (
	CSINVM uint8 = 0x00 // NVME_CSI_NVM
	CSIZNS uint8 = 0x02 // NVME_CSI_ZNS
)

// Offsets of the Identify fields (struct nvme_identify).
const (
	OffsetIdentifyCNS    = 40 // cns, CDW10 bits 7:0
	offsetIdentifyCNTID  = 42 // ctrlid, CDW10 bits 31:16
	offsetIdentifyCNSSID = 44 // CDW11 bits 15:0
	offsetIdentifyCSI    = 47 // csi, CDW11 bits 31:24
)

// IdentifyCommand is a view of an SQE as an Identify command.
type IdentifyCommand struct{ SQE }

// Identify returns s viewed as an Identify command.
func (s SQE) Identify() IdentifyCommand { return IdentifyCommand{s} }

// IdentifyFields holds the fields of an Identify command.
type IdentifyFields struct {
	CID    uint16
	NSID   uint32
	DPTR   SGLFields
	CNS    uint8
	CNTID  uint16
	CNSSID uint16
	CSI    uint8
}

// CNS returns the Controller or Namespace Structure selector.
func (c IdentifyCommand) CNS() uint8 { return c.SQE[OffsetIdentifyCNS] }

// CNTID returns the controller identifier (CDW10 bits 31:16).
func (c IdentifyCommand) CNTID() uint16 {
	return binary.LittleEndian.Uint16(c.SQE[offsetIdentifyCNTID:])
}

// CNSSID returns the CNS specific identifier (CDW11 bits 15:0).
func (c IdentifyCommand) CNSSID() uint16 {
	return binary.LittleEndian.Uint16(c.SQE[offsetIdentifyCNSSID:])
}

// CSI returns the command set identifier (CDW11 bits 31:24).
func (c IdentifyCommand) CSI() uint8 { return c.SQE[offsetIdentifyCSI] }

// Encode writes all 64 bytes of the command, with PSDT 01b.
func (c IdentifyCommand) Encode(f *IdentifyFields) {
	c.header(AdminIdentify, FlagSGLMetaBuf, f.CID, f.NSID)
	c.DPTR().Encode(&f.DPTR)
	c.SQE[OffsetIdentifyCNS] = f.CNS
	binary.LittleEndian.PutUint16(c.SQE[offsetIdentifyCNTID:], f.CNTID)
	binary.LittleEndian.PutUint16(c.SQE[offsetIdentifyCNSSID:], f.CNSSID)
	c.SQE[offsetIdentifyCSI] = f.CSI
}

// Log page identifiers (Linux NVME_LOG_*).
const (
	LogSupportedPages uint8 = 0x00 // NVME_LOG_SUPPORTED
	LogError          uint8 = 0x01 // NVME_LOG_ERROR
	LogSMART          uint8 = 0x02 // NVME_LOG_SMART
	LogFirmwareSlot   uint8 = 0x03 // NVME_LOG_FW_SLOT
	LogChangedNS      uint8 = 0x04 // NVME_LOG_CHANGED_NS
	LogCommandEffects uint8 = 0x05 // NVME_LOG_CMD_EFFECTS
	LogANA            uint8 = 0x0c // NVME_LOG_ANA
	LogDiscovery      uint8 = 0x70 // NVME_LOG_DISC
	LogReservation    uint8 = 0x80 // NVME_LOG_RESERVATION
)

// Offsets of the Get Log Page fields (struct nvme_get_log_page_command).
const (
	OffsetLogLID   = 40 // lid, CDW10 bits 7:0
	offsetLogLSP   = 41 // lsp (bits 6:0) and RAE (bit 7), CDW10 bits 15:8
	offsetLogNUMDL = 42 // numdl, CDW10 bits 31:16
	offsetLogNUMDU = 44 // numdu, CDW11 bits 15:0
	offsetLogLSI   = 46 // lsi, CDW11 bits 31:16
	OffsetLogLPO   = 48 // lpo (lpol, lpou), CDW12-13
	offsetLogCSI   = 59 // csi, CDW14 bits 31:24
)

// GetLogPageCommand is a view of an SQE as a Get Log Page command.
type GetLogPageCommand struct{ SQE }

// GetLogPage returns s viewed as a Get Log Page command.
func (s SQE) GetLogPage() GetLogPageCommand { return GetLogPageCommand{s} }

// GetLogPageFields holds the fields of a Get Log Page command.
type GetLogPageFields struct {
	CID  uint16
	NSID uint32
	DPTR SGLFields
	LID  uint8
	// LSP is the log specific field (7 bits).
	LSP uint8
	// RAE is Retain Asynchronous Event.
	RAE bool
	// NUMD is the number of dwords to return, 0-based as on the wire; see
	// NUMDForLength.
	NUMD uint32
	LSI  uint16
	// LPO is the byte offset into the log page; dword aligned.
	LPO uint64
	CSI uint8
}

// NUMDForLength returns the 0-based dword count for a transfer of n bytes
// (n a non-zero multiple of 4).
func NUMDForLength(n uint32) uint32 { return n/4 - 1 }

// LID returns the log page identifier.
func (c GetLogPageCommand) LID() uint8 { return c.SQE[OffsetLogLID] }

// LSP returns the log specific field (CDW10 bits 14:8).
func (c GetLogPageCommand) LSP() uint8 { return c.SQE[offsetLogLSP] & 0x7f }

// RAE returns the Retain Asynchronous Event bit (CDW10 bit 15).
func (c GetLogPageCommand) RAE() bool { return c.SQE[offsetLogLSP]&0x80 != 0 }

// NUMD returns the 0-based number of dwords, NUMDU:NUMDL.
func (c GetLogPageCommand) NUMD() uint32 {
	return uint32(binary.LittleEndian.Uint16(c.SQE[offsetLogNUMDU:]))<<16 |
		uint32(binary.LittleEndian.Uint16(c.SQE[offsetLogNUMDL:]))
}

// Length returns the number of bytes requested, (NUMD+1)*4, as Linux
// nvmet_get_log_page_len computes it.
func (c GetLogPageCommand) Length() uint64 { return (uint64(c.NUMD()) + 1) * 4 }

// LSI returns the log specific identifier (CDW11 bits 31:16).
func (c GetLogPageCommand) LSI() uint16 { return binary.LittleEndian.Uint16(c.SQE[offsetLogLSI:]) }

// LPO returns the log page offset in bytes (CDW12-13).
func (c GetLogPageCommand) LPO() uint64 { return binary.LittleEndian.Uint64(c.SQE[OffsetLogLPO:]) }

// CSI returns the command set identifier (CDW14 bits 31:24).
func (c GetLogPageCommand) CSI() uint8 { return c.SQE[offsetLogCSI] }

// Encode writes all 64 bytes of the command, with PSDT 01b.
func (c GetLogPageCommand) Encode(f *GetLogPageFields) {
	c.header(AdminGetLogPage, FlagSGLMetaBuf, f.CID, f.NSID)
	c.DPTR().Encode(&f.DPTR)
	c.SQE[OffsetLogLID] = f.LID
	c.SQE[offsetLogLSP] = f.LSP & 0x7f
	if f.RAE {
		c.SQE[offsetLogLSP] |= 0x80
	}
	binary.LittleEndian.PutUint16(c.SQE[offsetLogNUMDL:], uint16(f.NUMD))
	binary.LittleEndian.PutUint16(c.SQE[offsetLogNUMDU:], uint16(f.NUMD>>16))
	binary.LittleEndian.PutUint16(c.SQE[offsetLogLSI:], f.LSI)
	binary.LittleEndian.PutUint64(c.SQE[OffsetLogLPO:], f.LPO)
	c.SQE[offsetLogCSI] = f.CSI
}

// LogPageRange returns the part of page a Get Log Page with offset lpo and
// length n transfers. It may be shorter than n when the request runs past
// the page: the controller returns zeroes for the rest, as Linux nvmet
// does. An offset that is not dword aligned or lies past the page is
// Invalid Field in Command with DNR at the LPO.
func LogPageRange(page []byte, lpo, n uint64) ([]byte, error) {
	if lpo&3 != 0 || lpo > uint64(len(page)) {
		return nil, cmdErr(StatusInvalidField|StatusDNR, OffsetLogLPO,
			fmt.Errorf("%w: offset %d, page %d bytes", errLogOffset, lpo, len(page)))
	}
	rest := page[lpo:]
	if n < uint64(len(rest)) {
		rest = rest[:n]
	}
	return rest, nil
}

// Feature identifiers (Linux NVME_FEAT_*).
const (
	FeatArbitration      uint8 = 0x01 // NVME_FEAT_ARBITRATION
	FeatPowerMgmt        uint8 = 0x02 // NVME_FEAT_POWER_MGMT
	FeatTempThreshold    uint8 = 0x04 // NVME_FEAT_TEMP_THRESH
	FeatErrorRecovery    uint8 = 0x05 // NVME_FEAT_ERR_RECOVERY
	FeatVolatileWC       uint8 = 0x06 // NVME_FEAT_VOLATILE_WC
	FeatNumQueues        uint8 = 0x07 // NVME_FEAT_NUM_QUEUES
	FeatIRQCoalesce      uint8 = 0x08 // NVME_FEAT_IRQ_COALESCE
	FeatWriteAtomic      uint8 = 0x0a // NVME_FEAT_WRITE_ATOMIC
	FeatAsyncEventConfig uint8 = 0x0b // NVME_FEAT_ASYNC_EVENT
	FeatTimestamp        uint8 = 0x0e // NVME_FEAT_TIMESTAMP
	FeatKeepAliveTimer   uint8 = 0x0f // NVME_FEAT_KATO
	FeatHostBehavior     uint8 = 0x16 // NVME_FEAT_HOST_BEHAVIOR
	FeatHostID           uint8 = 0x81 // NVME_FEAT_HOST_ID
	FeatResvMask         uint8 = 0x82 // NVME_FEAT_RESV_MASK
	FeatResvPersist      uint8 = 0x83 // NVME_FEAT_RESV_PERSIST
	FeatWriteProtect     uint8 = 0x84 // NVME_FEAT_WRITE_PROTECT
)

// Get Features select values (CDW10 bits 10:8).
const (
	SelectCurrent   uint8 = 0
	SelectDefault   uint8 = 1
	SelectSaved     uint8 = 2
	SelectSupported uint8 = 3
)

// Offsets of the Set/Get Features fields (struct nvme_features).
const (
	OffsetFeatureFID = 40 // fid, CDW10 bits 7:0
	offsetFeatureSEL = 41 // CDW10 bits 10:8 (Get Features)
	offsetFeatureSV  = 43 // CDW10 bit 31 (Set Features)
)

// FeaturesCommand is a view of an SQE as a Set Features or Get Features
// command.
type FeaturesCommand struct{ SQE }

// Features returns s viewed as a Set or Get Features command.
func (s SQE) Features() FeaturesCommand { return FeaturesCommand{s} }

// FeaturesFields holds the fields of a Set or Get Features command.
type FeaturesFields struct {
	// Opcode is AdminSetFeatures or AdminGetFeatures.
	Opcode uint8
	CID    uint16
	NSID   uint32
	DPTR   SGLFields
	FID    uint8
	// Save is the SV bit of Set Features.
	Save bool
	// Select is the SEL field of Get Features.
	Select uint8
	// CDW11 is the feature specific value.
	CDW11 uint32
}

// FID returns the feature identifier.
func (c FeaturesCommand) FID() uint8 { return c.SQE[OffsetFeatureFID] }

// Save returns the Save bit of Set Features (CDW10 bit 31).
func (c FeaturesCommand) Save() bool { return c.SQE[offsetFeatureSV]&0x80 != 0 }

// Select returns the SEL field of Get Features (CDW10 bits 10:8).
func (c FeaturesCommand) Select() uint8 { return c.SQE[offsetFeatureSEL] & 7 }

// Value returns CDW11, the feature specific value.
func (c FeaturesCommand) Value() uint32 { return c.CDW11() }

// Encode writes all 64 bytes of the command, with PSDT 01b.
func (c FeaturesCommand) Encode(f *FeaturesFields) {
	c.header(f.Opcode, FlagSGLMetaBuf, f.CID, f.NSID)
	c.DPTR().Encode(&f.DPTR)
	c.SQE[OffsetFeatureFID] = f.FID
	c.SQE[offsetFeatureSEL] = f.Select & 7
	if f.Save {
		c.SQE[offsetFeatureSV] = 0x80
	}
	binary.LittleEndian.PutUint32(c.SQE[OffsetCDW11:], f.CDW11)
}

// NumQueuesValue packs the Number of Queues feature (CDW11 of Set Features
// and DW0 of its completion): NSQR in bits 15:0, NCQR in bits 31:16, both
// 0-based.
func NumQueuesValue(nsqr, ncqr uint16) uint32 { return uint32(ncqr)<<16 | uint32(nsqr) }

// ParseNumQueues unpacks the Number of Queues feature into its 0-based
// submission and completion queue counts.
func ParseNumQueues(v uint32) (nsqr, ncqr uint16) { return uint16(v), uint16(v >> 16) }

// TimestampSize is the size of the Timestamp feature data.
const TimestampSize = 8

// EncodeTimestamp writes the 8-byte Timestamp feature data: milliseconds
// since the Unix epoch in bytes 5:0 and the attributes byte (Synch bit 0,
// Timestamp Origin bits 3:1) in byte 6.
func EncodeTimestamp(b []byte, millis uint64, attrs uint8) error {
	if len(b) < TimestampSize {
		return fmt.Errorf("%w: timestamp needs %d bytes, have %d", errShortBuffer, TimestampSize, len(b))
	}
	var t [8]byte
	binary.LittleEndian.PutUint64(t[:], millis&(1<<48-1))
	t[6] = attrs
	copy(b, t[:])
	return nil
}

// ParseTimestamp reads the Timestamp feature data.
func ParseTimestamp(b []byte) (millis uint64, attrs uint8, err error) {
	if len(b) < TimestampSize {
		return 0, 0, fmt.Errorf("%w: timestamp %d bytes", errShortLogPage, len(b))
	}
	return binary.LittleEndian.Uint64(b) & (1<<48 - 1), b[6], nil
}

// Offsets of the Abort fields (struct nvme_abort_cmd).
const (
	OffsetAbortSQID = 40 // sqid, CDW10 bits 15:0
	offsetAbortCID  = 42 // cid, CDW10 bits 31:16
)

// AbortCommand is a view of an SQE as an Abort command.
type AbortCommand struct{ SQE }

// Abort returns s viewed as an Abort command.
func (s SQE) Abort() AbortCommand { return AbortCommand{s} }

// AbortFields holds the fields of an Abort command.
type AbortFields struct {
	CID uint16
	// SQID and TargetCID name the command to abort.
	SQID      uint16
	TargetCID uint16
}

// SQID returns the submission queue of the command to abort.
func (c AbortCommand) SQID() uint16 { return binary.LittleEndian.Uint16(c.SQE[OffsetAbortSQID:]) }

// TargetCID returns the command identifier of the command to abort.
func (c AbortCommand) TargetCID() uint16 {
	return binary.LittleEndian.Uint16(c.SQE[offsetAbortCID:])
}

// Encode writes all 64 bytes of the command, with PSDT 01b.
func (c AbortCommand) Encode(f *AbortFields) {
	c.header(AdminAbort, FlagSGLMetaBuf, f.CID, 0)
	binary.LittleEndian.PutUint16(c.SQE[OffsetAbortSQID:], f.SQID)
	binary.LittleEndian.PutUint16(c.SQE[offsetAbortCID:], f.TargetCID)
}

// AbortNotAborted is DW0 of an Abort completion when the command was not
// aborted (bit 0 set), what Linux nvmet always answers.
const AbortNotAborted uint32 = 1

// Asynchronous event types, bits 2:0 of an AER completion's DW0 (Linux
// NVME_AER_*).
const (
	AsyncEventError      uint8 = 0 // NVME_AER_ERROR
	AsyncEventSMART      uint8 = 1 // NVME_AER_SMART
	AsyncEventNotice     uint8 = 2 // NVME_AER_NOTICE
	AsyncEventCommandSet uint8 = 6 // NVME_AER_CSS
	AsyncEventVendor     uint8 = 7 // NVME_AER_VS
)

// Notice asynchronous event information values (Linux NVME_AER_NOTICE_*).
const (
	NoticeNSChanged        uint8 = 0x00 // NVME_AER_NOTICE_NS_CHANGED
	NoticeFWActivation     uint8 = 0x01 // NVME_AER_NOTICE_FW_ACT_STARTING
	NoticeANAChange        uint8 = 0x03 // NVME_AER_NOTICE_ANA
	NoticeDiscoveryChanged uint8 = 0xf0 // NVME_AER_NOTICE_DISC_CHANGED
)

// Asynchronous Event Configuration feature bits, also OAES in Identify
// Controller (Linux NVME_AEN_CFG_*).
const (
	AENConfigNSAttr          uint32 = 1 << 8  // NVME_AEN_CFG_NS_ATTR
	AENConfigFWActivation    uint32 = 1 << 9  // NVME_AEN_CFG_FW_ACT
	AENConfigANAChange       uint32 = 1 << 11 // NVME_AEN_CFG_ANA_CHANGE
	AENConfigDiscoveryChange uint32 = 1 << 31 // NVME_AEN_CFG_DISC_CHANGE
)

// AsyncEvent is the DW0 of an Asynchronous Event Request completion.
type AsyncEvent struct {
	// Type is bits 2:0: AsyncEventNotice and friends.
	Type uint8
	// Info is bits 15:8: NoticeNSChanged and friends.
	Info uint8
	// LogPage is bits 23:16: the log page the host reads to clear it.
	LogPage uint8
}

// Value packs the event into a completion DW0.
func (e AsyncEvent) Value() uint32 {
	return uint32(e.Type&7) | uint32(e.Info)<<8 | uint32(e.LogPage)<<16
}

// ParseAsyncEvent unpacks an AER completion DW0.
func ParseAsyncEvent(dw0 uint32) AsyncEvent {
	return AsyncEvent{Type: uint8(dw0) & 7, Info: uint8(dw0 >> 8), LogPage: uint8(dw0 >> 16)}
}
