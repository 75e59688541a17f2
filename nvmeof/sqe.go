package nvmeof

import (
	"encoding/binary"
	"fmt"
	"strconv"
)

// SQESize is the size of a submission queue entry (struct nvme_command).
// On NVMe/RDMA a command capsule is the SQE followed by optional in-capsule
// data.
const SQESize = 64

// Offsets of the common SQE fields (struct nvme_common_command). A target
// reports them as the Parameter Error Location of a failed command.
const (
	OffsetOpcode = 0  // opcode
	OffsetFlags  = 1  // flags: FUSE bits 1:0, PSDT bits 7:6
	OffsetCID    = 2  // command_id
	OffsetNSID   = 4  // nsid
	OffsetFCType = 4  // fctype of a Fabrics command (struct nvmf_common_command)
	OffsetCDW2   = 8  // cdw2[0]
	OffsetCDW3   = 12 // cdw2[1]
	OffsetMPTR   = 16 // metadata
	OffsetDPTR   = 24 // dptr (SGL1)
	OffsetCDW10  = 40 // cdw10
	OffsetCDW11  = 44 // cdw11
	OffsetCDW12  = 48 // cdw12
	OffsetCDW13  = 52 // cdw13
	OffsetCDW14  = 56 // cdw14
	OffsetCDW15  = 60 // cdw15
)

// Flags byte values (Linux NVME_CMD_FUSE_* and NVME_CMD_SGL_*).
const (
	FlagFuseFirst  uint8 = 1 << 0 // NVME_CMD_FUSE_FIRST
	FlagFuseSecond uint8 = 1 << 1 // NVME_CMD_FUSE_SECOND
	// FlagSGLMetaBuf is PSDT 01b: SGLs for data, MPTR the address of one
	// contiguous buffer. NVMe over Fabrics requires exactly this value;
	// every encoder in this package sets it.
	FlagSGLMetaBuf uint8 = 1 << 6 // NVME_CMD_SGL_METABUF
	FlagSGLMetaSeg uint8 = 1 << 7 // NVME_CMD_SGL_METASEG
	flagFuseMask   uint8 = FlagFuseFirst | FlagFuseSecond
	flagPSDTMask   uint8 = FlagSGLMetaBuf | FlagSGLMetaSeg
)

// OpcodeFabrics is the opcode of every Fabrics command; the FCType byte
// selects the command (Linux nvme_fabrics_command).
const OpcodeFabrics uint8 = 0x7f

// Admin command opcodes (Linux enum nvme_admin_opcode), the ones an NVMe-oF
// controller implements. Opcodes of PCIe-only admin commands (queue
// creation and deletion) are left out: a fabrics controller answers them
// with Invalid Command Opcode.
const (
	AdminGetLogPage  uint8 = 0x02 // nvme_admin_get_log_page
	AdminIdentify    uint8 = 0x06 // nvme_admin_identify
	AdminAbort       uint8 = 0x08 // nvme_admin_abort_cmd
	AdminSetFeatures uint8 = 0x09 // nvme_admin_set_features
	AdminGetFeatures uint8 = 0x0a // nvme_admin_get_features
	AdminAsyncEvent  uint8 = 0x0c // nvme_admin_async_event
	AdminKeepAlive   uint8 = 0x18 // nvme_admin_keep_alive
)

// NVM command set I/O opcodes (Linux enum nvme_opcode).
const (
	IOFlush       uint8 = 0x00 // nvme_cmd_flush
	IOWrite       uint8 = 0x01 // nvme_cmd_write
	IORead        uint8 = 0x02 // nvme_cmd_read
	IOCompare     uint8 = 0x05 // nvme_cmd_compare
	IOWriteZeroes uint8 = 0x08 // nvme_cmd_write_zeroes
	IODatasetMgmt uint8 = 0x09 // nvme_cmd_dsm
)

// Fabrics command types, the FCType byte (Linux enum nvmf_capsule_command).
const (
	FCTypePropertySet uint8 = 0x00 // nvme_fabrics_type_property_set
	FCTypeConnect     uint8 = 0x01 // nvme_fabrics_type_connect
	FCTypePropertyGet uint8 = 0x04 // nvme_fabrics_type_property_get
	FCTypeAuthSend    uint8 = 0x05 // nvme_fabrics_type_auth_send
	FCTypeAuthReceive uint8 = 0x06 // nvme_fabrics_type_auth_receive
	FCTypeDisconnect  uint8 = 0x08 // nvme_fabrics_type_disconnect
)

// NSIDAll is the broadcast namespace ID (NVME_NSID_ALL).
const NSIDAll uint32 = 0xffffffff

// SQE is a view of a 64-byte submission queue entry.
type SQE []byte

// SQEFields holds every field of the common SQE layout for SQE.Encode.
// Command specific builders (RWCommand.Encode, ConnectCommand.Encode...) are
// usually more convenient.
type SQEFields struct {
	Opcode uint8
	// Flags is written as given: NVMe over Fabrics wants FlagSGLMetaBuf.
	Flags      uint8
	CID        uint16
	NSID       uint32
	CDW2, CDW3 uint32
	MPTR       uint64
	DPTR       SGLFields
	CDW10      uint32
	CDW11      uint32
	CDW12      uint32
	CDW13      uint32
	CDW14      uint32
	CDW15      uint32
}

// ParseSQE returns the first 64 bytes of b as an SQE view. It checks only
// the length; ParseCommand also validates the flags and the opcode.
func ParseSQE(b []byte) (SQE, error) {
	if len(b) < SQESize {
		return nil, fmt.Errorf("%w: %d bytes", errShortSQE, len(b))
	}
	return SQE(b[:SQESize]), nil
}

// Opcode returns the command opcode.
func (s SQE) Opcode() uint8 { return s[OffsetOpcode] }

// Flags returns the flags byte (FUSE and PSDT).
func (s SQE) Flags() uint8 { return s[OffsetFlags] }

// Fuse returns the FUSE field (bits 1:0 of the flags).
func (s SQE) Fuse() uint8 { return s[OffsetFlags] & flagFuseMask }

// PSDT returns the PRP or SGL for Data Transfer field (bits 7:6 of the
// flags): 01b on fabrics.
func (s SQE) PSDT() uint8 { return s[OffsetFlags] >> 6 }

// CID returns the command identifier.
func (s SQE) CID() uint16 { return binary.LittleEndian.Uint16(s[OffsetCID:]) }

// SetCID sets the command identifier, for a host that reuses encoded SQEs.
func (s SQE) SetCID(cid uint16) { binary.LittleEndian.PutUint16(s[OffsetCID:], cid) }

// NSID returns the namespace identifier. It is meaningless in a Fabrics
// command, whose byte 4 is the FCType.
func (s SQE) NSID() uint32 { return binary.LittleEndian.Uint32(s[OffsetNSID:]) }

// IsFabrics reports whether s is a Fabrics command (opcode 0x7F).
func (s SQE) IsFabrics() bool { return s[OffsetOpcode] == OpcodeFabrics }

// FCType returns the Fabrics command type (byte 4) of a Fabrics command.
func (s SQE) FCType() uint8 { return s[OffsetFCType] }

// CDW2 returns command dword 2.
func (s SQE) CDW2() uint32 { return binary.LittleEndian.Uint32(s[OffsetCDW2:]) }

// CDW3 returns command dword 3.
func (s SQE) CDW3() uint32 { return binary.LittleEndian.Uint32(s[OffsetCDW3:]) }

// MPTR returns the metadata pointer.
func (s SQE) MPTR() uint64 { return binary.LittleEndian.Uint64(s[OffsetMPTR:]) }

// DPTR returns the data pointer as an SGL view (SGL1) aliasing s.
func (s SQE) DPTR() SGL { return SGL(s[OffsetDPTR : OffsetDPTR+SGLSize]) }

// CDW10 returns command dword 10.
func (s SQE) CDW10() uint32 { return binary.LittleEndian.Uint32(s[OffsetCDW10:]) }

// CDW11 returns command dword 11.
func (s SQE) CDW11() uint32 { return binary.LittleEndian.Uint32(s[OffsetCDW11:]) }

// CDW12 returns command dword 12.
func (s SQE) CDW12() uint32 { return binary.LittleEndian.Uint32(s[OffsetCDW12:]) }

// CDW13 returns command dword 13.
func (s SQE) CDW13() uint32 { return binary.LittleEndian.Uint32(s[OffsetCDW13:]) }

// CDW14 returns command dword 14.
func (s SQE) CDW14() uint32 { return binary.LittleEndian.Uint32(s[OffsetCDW14:]) }

// CDW15 returns command dword 15.
func (s SQE) CDW15() uint32 { return binary.LittleEndian.Uint32(s[OffsetCDW15:]) }

// Encode writes all 64 bytes of the SQE from f.
func (s SQE) Encode(f *SQEFields) {
	s.header(f.Opcode, f.Flags, f.CID, f.NSID)
	le := binary.LittleEndian
	le.PutUint32(s[OffsetCDW2:], f.CDW2)
	le.PutUint32(s[OffsetCDW3:], f.CDW3)
	le.PutUint64(s[OffsetMPTR:], f.MPTR)
	s.DPTR().Encode(&f.DPTR)
	le.PutUint32(s[OffsetCDW10:], f.CDW10)
	le.PutUint32(s[OffsetCDW11:], f.CDW11)
	le.PutUint32(s[OffsetCDW12:], f.CDW12)
	le.PutUint32(s[OffsetCDW13:], f.CDW13)
	le.PutUint32(s[OffsetCDW14:], f.CDW14)
	le.PutUint32(s[OffsetCDW15:], f.CDW15)
}

// header zeroes the whole SQE and writes the first dwords.
func (s SQE) header(opcode, flags uint8, cid uint16, nsid uint32) {
	_ = s[SQESize-1]
	clear(s[:SQESize])
	s[OffsetOpcode] = opcode
	s[OffsetFlags] = flags
	binary.LittleEndian.PutUint16(s[OffsetCID:], cid)
	binary.LittleEndian.PutUint32(s[OffsetNSID:], nsid)
}

// fabricsHeader zeroes the whole SQE and writes a Fabrics command header.
func (s SQE) fabricsHeader(fctype uint8, cid uint16) {
	s.header(OpcodeFabrics, FlagSGLMetaBuf, cid, 0)
	s[OffsetFCType] = fctype
}

// Direction is the data transfer direction of a command, bits 1:0 of its
// opcode (or of its FCType for a Fabrics command; Linux nvme_is_write).
type Direction uint8

// Data transfer directions.
const (
	DirNone          Direction = 0 // no data
	DirHostToCtrl    Direction = 1 // the command writes: data flows host to controller
	DirCtrlToHost    Direction = 2 // the command reads: data flows controller to host
	DirBidirectional Direction = 3
)

// String names the direction.
func (d Direction) String() string {
	switch d {
	case DirNone:
		return "none"
	case DirHostToCtrl:
		return "host-to-controller"
	case DirCtrlToHost:
		return "controller-to-host"
	}
	return "bidirectional"
}

// Direction returns the data transfer direction the opcode (or FCType)
// encodes.
func (s SQE) Direction() Direction {
	if s.IsFabrics() {
		return Direction(s.FCType() & 3)
	}
	return Direction(s.Opcode() & 3)
}

// CommandKind identifies a command this package decodes.
type CommandKind uint8

// Command kinds.
const (
	KindUnknown CommandKind = iota
	KindFlush
	KindWrite
	KindRead
	KindCompare
	KindWriteZeroes
	KindDatasetManagement
	KindGetLogPage
	KindIdentify
	KindAbort
	KindSetFeatures
	KindGetFeatures
	KindAsyncEventRequest
	KindKeepAlive
	KindConnect
	KindPropertyGet
	KindPropertySet
	KindDisconnect
	KindAuthSend
	KindAuthReceive
)

// String returns the command name.
func (k CommandKind) String() string {
	switch k {
	case KindFlush:
		return "Flush"
	case KindWrite:
		return "Write"
	case KindRead:
		return "Read"
	case KindCompare:
		return "Compare"
	case KindWriteZeroes:
		return "Write Zeroes"
	case KindDatasetManagement:
		return "Dataset Management"
	case KindGetLogPage:
		return "Get Log Page"
	case KindIdentify:
		return "Identify"
	case KindAbort:
		return "Abort"
	case KindSetFeatures:
		return "Set Features"
	case KindGetFeatures:
		return "Get Features"
	case KindAsyncEventRequest:
		return "Asynchronous Event Request"
	case KindKeepAlive:
		return "Keep Alive"
	case KindConnect:
		return "Connect"
	case KindPropertyGet:
		return "Property Get"
	case KindPropertySet:
		return "Property Set"
	case KindDisconnect:
		return "Disconnect"
	case KindAuthSend:
		return "Authentication Send"
	case KindAuthReceive:
		return "Authentication Receive"
	}
	return "Unknown(" + strconv.Itoa(int(k)) + ")"
}

// ParseCommand frames and classifies a received command capsule. b holds
// the capsule (SQE plus any in-capsule data); admin says whether it arrived
// on the admin queue (QID 0).
//
// A capsule shorter than an SQE cannot even be completed (it has no CID):
// the error then is not a *CommandError and the transport should treat the
// queue as broken, as Linux nvmet_rdma_recv_done does. Otherwise a bad
// command yields a *CommandError carrying the status and location, like
// Linux nvmet_req_init and nvmet_parse_*_cmd:
//
//   - fused commands: Invalid Field, DNR, at the flags;
//   - PSDT other than 01b: Invalid Field, DNR, at the flags;
//   - an opcode (or FCType) unknown to this package or not allowed on that
//     queue: Invalid Command Opcode, DNR, at the opcode (or FCType).
//
// Admin queues take the admin commands above plus Connect, Property
// Get/Set and Authentication Send/Receive; I/O queues take the NVM I/O
// commands plus Connect, Disconnect and Authentication Send/Receive.
//
// The returned SQE aliases b. ParseCommand does not validate the data
// pointer: the transport does (SGL.CheckRDMA), since the valid descriptor
// types depend on it.
func ParseCommand(b []byte, admin bool) (SQE, CommandKind, error) {
	s, err := ParseSQE(b)
	if err != nil {
		return nil, KindUnknown, err
	}
	if s.Fuse() != 0 {
		return s, KindUnknown, cmdErr(StatusInvalidField|StatusDNR, OffsetFlags, errFused)
	}
	if s.Flags()&flagPSDTMask != FlagSGLMetaBuf {
		return s, KindUnknown, cmdErr(StatusInvalidField|StatusDNR, OffsetFlags,
			fmt.Errorf("%w: flags %#02x", errPSDT, s.Flags()))
	}
	if s.IsFabrics() {
		k := fabricsKind(s.FCType(), admin)
		if k == KindUnknown {
			return s, k, cmdErr(StatusInvalidOpcode|StatusDNR, OffsetFCType,
				fmt.Errorf("%w: fctype %#02x on %s queue", errUnknownFCType, s.FCType(), queueName(admin)))
		}
		return s, k, nil
	}
	var k CommandKind
	if admin {
		k = adminKind(s.Opcode())
	} else {
		k = ioKind(s.Opcode())
	}
	if k == KindUnknown {
		return s, k, cmdErr(StatusInvalidOpcode|StatusDNR, OffsetOpcode,
			fmt.Errorf("%w: opcode %#02x on %s queue", errUnknownOpcode, s.Opcode(), queueName(admin)))
	}
	return s, k, nil
}

func queueName(admin bool) string {
	if admin {
		return "admin"
	}
	return "I/O"
}

func adminKind(op uint8) CommandKind {
	switch op {
	case AdminGetLogPage:
		return KindGetLogPage
	case AdminIdentify:
		return KindIdentify
	case AdminAbort:
		return KindAbort
	case AdminSetFeatures:
		return KindSetFeatures
	case AdminGetFeatures:
		return KindGetFeatures
	case AdminAsyncEvent:
		return KindAsyncEventRequest
	case AdminKeepAlive:
		return KindKeepAlive
	}
	return KindUnknown
}

func ioKind(op uint8) CommandKind {
	switch op {
	case IOFlush:
		return KindFlush
	case IOWrite:
		return KindWrite
	case IORead:
		return KindRead
	case IOCompare:
		return KindCompare
	case IOWriteZeroes:
		return KindWriteZeroes
	case IODatasetMgmt:
		return KindDatasetManagement
	}
	return KindUnknown
}

func fabricsKind(fctype uint8, admin bool) CommandKind {
	switch fctype {
	case FCTypeConnect:
		return KindConnect
	case FCTypeAuthSend:
		return KindAuthSend
	case FCTypeAuthReceive:
		return KindAuthReceive
	case FCTypePropertyGet:
		if admin {
			return KindPropertyGet
		}
	case FCTypePropertySet:
		if admin {
			return KindPropertySet
		}
	case FCTypeDisconnect:
		if !admin {
			return KindDisconnect
		}
	}
	return KindUnknown
}
