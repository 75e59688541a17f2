package nvmeof

import "strconv"

// Status is an NVMe completion status field without the phase tag: the
// value Linux names NVME_SC_* (include/linux/nvme.h), which a CQE carries
// shifted left by one above the phase bit (NVMe Base Specification, Common
// Completion Queue Entry, Status Field).
//
//	bits  7:0  SC   status code
//	bits 10:8  SCT  status code type
//	bits 12:11 CRD  command retry delay
//	bit  13    M    more (Error Information log has more)
//	bit  14    DNR  do not retry
type Status uint16

// StatusCodeType is the SCT of a Status.
type StatusCodeType uint8

// Status code types (NVMe Base Specification, Status Code Type values).
const (
	SCTGeneric         StatusCodeType = 0x0
	SCTCommandSpecific StatusCodeType = 0x1
	SCTMediaError      StatusCodeType = 0x2
	SCTPathError       StatusCodeType = 0x3
	SCTVendorSpecific  StatusCodeType = 0x7
)

// String returns the spec name of the status code type.
func (t StatusCodeType) String() string {
	switch t {
	case SCTGeneric:
		return "Generic Command Status"
	case SCTCommandSpecific:
		return "Command Specific Status"
	case SCTMediaError:
		return "Media and Data Integrity Errors"
	case SCTPathError:
		return "Path Related Status"
	case SCTVendorSpecific:
		return "Vendor Specific"
	}
	return "SCT 0x" + strconv.FormatUint(uint64(t), 16)
}

// Flag bits of a Status (Linux NVME_SC_CRD, NVME_SC_MORE, NVME_SC_DNR).
const (
	StatusCRDMask Status = 0x1800
	StatusMore    Status = 0x2000
	StatusDNR     Status = 0x4000

	statusCodeMask Status = 0x07ff // SCT and SC
)

// Generic command status (SCT 0), Linux NVME_SC_*.
const (
	StatusSuccess                 Status = 0x00
	StatusInvalidOpcode           Status = 0x01 // NVME_SC_INVALID_OPCODE
	StatusInvalidField            Status = 0x02 // NVME_SC_INVALID_FIELD
	StatusCIDConflict             Status = 0x03 // NVME_SC_CMDID_CONFLICT
	StatusDataTransferError       Status = 0x04 // NVME_SC_DATA_XFER_ERROR
	StatusPowerLoss               Status = 0x05 // NVME_SC_POWER_LOSS
	StatusInternal                Status = 0x06 // NVME_SC_INTERNAL
	StatusAbortRequested          Status = 0x07 // NVME_SC_ABORT_REQ
	StatusAbortSQDeleted          Status = 0x08 // NVME_SC_ABORT_QUEUE
	StatusFusedFail               Status = 0x09 // NVME_SC_FUSED_FAIL
	StatusFusedMissing            Status = 0x0a // NVME_SC_FUSED_MISSING
	StatusInvalidNamespace        Status = 0x0b // NVME_SC_INVALID_NS
	StatusCommandSequenceError    Status = 0x0c // NVME_SC_CMD_SEQ_ERROR
	StatusSGLInvalidLast          Status = 0x0d // NVME_SC_SGL_INVALID_LAST: invalid SGL segment descriptor
	StatusSGLInvalidCount         Status = 0x0e // NVME_SC_SGL_INVALID_COUNT: invalid number of SGL descriptors
	StatusSGLInvalidDataLength    Status = 0x0f // NVME_SC_SGL_INVALID_DATA: data SGL length invalid
	StatusSGLInvalidMetadata      Status = 0x10 // NVME_SC_SGL_INVALID_METADATA: metadata SGL length invalid
	StatusSGLInvalidType          Status = 0x11 // NVME_SC_SGL_INVALID_TYPE: SGL descriptor type invalid
	StatusCMBInvalidUse           Status = 0x12 // NVME_SC_CMB_INVALID_USE
	StatusPRPInvalidOffset        Status = 0x13 // NVME_SC_PRP_INVALID_OFFSET
	StatusAtomicWriteUnitExceeded Status = 0x14 // NVME_SC_ATOMIC_WU_EXCEEDED
	StatusOperationDenied         Status = 0x15 // NVME_SC_OP_DENIED
	StatusSGLInvalidOffset        Status = 0x16 // NVME_SC_SGL_INVALID_OFFSET
	StatusHostIDInconsistent      Status = 0x18 // NVME_SC_HOST_ID_INCONSIST
	StatusKeepAliveExpired        Status = 0x19 // NVME_SC_KA_TIMEOUT_EXPIRED
	StatusKeepAliveInvalid        Status = 0x1a // NVME_SC_KA_TIMEOUT_INVALID
	StatusAbortedPreempt          Status = 0x1b // NVME_SC_ABORTED_PREEMPT_ABORT
	StatusSanitizeFailed          Status = 0x1c // NVME_SC_SANITIZE_FAILED
	StatusSanitizeInProgress      Status = 0x1d // NVME_SC_SANITIZE_IN_PROGRESS
	StatusSGLInvalidGranularity   Status = 0x1e // NVME_SC_SGL_INVALID_GRANULARITY
	StatusCommandNotSupportedCMB  Status = 0x1f // NVME_SC_CMD_NOT_SUP_CMB_QUEUE
	StatusNamespaceWriteProtected Status = 0x20 // NVME_SC_NS_WRITE_PROTECTED
	StatusCommandInterrupted      Status = 0x21 // NVME_SC_CMD_INTERRUPTED
	StatusTransientTransportError Status = 0x22 // NVME_SC_TRANSIENT_TR_ERR
	StatusAdminMediaNotReady      Status = 0x24 // NVME_SC_ADMIN_COMMAND_MEDIA_NOT_READY
	StatusInvalidIOCommandSet     Status = 0x2c // NVME_SC_INVALID_IO_CMD_SET

	// Generic status values 0x80-0xBF are NVM command set specific.
	StatusLBAOutOfRange       Status = 0x80 // NVME_SC_LBA_RANGE
	StatusCapacityExceeded    Status = 0x81 // NVME_SC_CAP_EXCEEDED
	StatusNamespaceNotReady   Status = 0x82 // NVME_SC_NS_NOT_READY
	StatusReservationConflict Status = 0x83 // NVME_SC_RESERVATION_CONFLICT
	StatusFormatInProgress    Status = 0x84 // NVME_SC_FORMAT_IN_PROGRESS
)

// Command specific status (SCT 1), Linux NVME_SC_*.
const (
	StatusCQInvalid                Status = 0x100 // NVME_SC_CQ_INVALID
	StatusQIDInvalid               Status = 0x101 // NVME_SC_QID_INVALID
	StatusQueueSizeInvalid         Status = 0x102 // NVME_SC_QUEUE_SIZE
	StatusAbortLimitExceeded       Status = 0x103 // NVME_SC_ABORT_LIMIT
	StatusAsyncEventLimitExceeded  Status = 0x105 // NVME_SC_ASYNC_LIMIT
	StatusInvalidFirmwareSlot      Status = 0x106 // NVME_SC_FIRMWARE_SLOT
	StatusInvalidFirmwareImage     Status = 0x107 // NVME_SC_FIRMWARE_IMAGE
	StatusInvalidInterruptVector   Status = 0x108 // NVME_SC_INVALID_VECTOR
	StatusInvalidLogPage           Status = 0x109 // NVME_SC_INVALID_LOG_PAGE
	StatusInvalidFormat            Status = 0x10a // NVME_SC_INVALID_FORMAT
	StatusFirmwareNeedsConvReset   Status = 0x10b // NVME_SC_FW_NEEDS_CONV_RESET
	StatusInvalidQueueDeletion     Status = 0x10c // NVME_SC_INVALID_QUEUE
	StatusFeatureNotSaveable       Status = 0x10d // NVME_SC_FEATURE_NOT_SAVEABLE
	StatusFeatureNotChangeable     Status = 0x10e // NVME_SC_FEATURE_NOT_CHANGEABLE
	StatusFeatureNotPerNamespace   Status = 0x10f // NVME_SC_FEATURE_NOT_PER_NS
	StatusFirmwareNeedsSubsysReset Status = 0x110 // NVME_SC_FW_NEEDS_SUBSYS_RESET
	StatusNamespaceInsufficientCap Status = 0x115 // NVME_SC_NS_INSUFFICIENT_CAP
	StatusNamespaceAlreadyAttached Status = 0x118 // NVME_SC_NS_ALREADY_ATTACHED
	StatusNamespaceNotAttached     Status = 0x11a // NVME_SC_NS_NOT_ATTACHED
	StatusControllerListInvalid    Status = 0x11c // NVME_SC_CTRL_LIST_INVALID
	StatusANAGroupIDInvalid        Status = 0x124 // NVME_SC_ANA_GROUP_ID_INVALID

	// NVM command set command specific status. The same codes mean the
	// Fabrics statuses below when the command is a Fabrics command.
	StatusConflictingAttributes Status = 0x180 // NVME_SC_BAD_ATTRIBUTES
	StatusInvalidPI             Status = 0x181 // NVME_SC_INVALID_PI
	StatusWriteToReadOnly       Status = 0x182 // NVME_SC_READ_ONLY

	// Fabrics command specific status (NVMe over Fabrics, Connect and
	// Discovery), Linux NVME_SC_CONNECT_* and friends.
	StatusConnectIncompatibleFormat Status = 0x180 // NVME_SC_CONNECT_FORMAT
	StatusConnectControllerBusy     Status = 0x181 // NVME_SC_CONNECT_CTRL_BUSY
	StatusConnectInvalidParameters  Status = 0x182 // NVME_SC_CONNECT_INVALID_PARAM
	StatusConnectRestartDiscovery   Status = 0x183 // NVME_SC_CONNECT_RESTART_DISC
	StatusConnectInvalidHost        Status = 0x184 // NVME_SC_CONNECT_INVALID_HOST
	StatusDiscoveryRestart          Status = 0x190 // NVME_SC_DISCOVERY_RESTART
	StatusAuthRequired              Status = 0x191 // NVME_SC_AUTH_REQUIRED
)

// Media and data integrity errors (SCT 2) and path related status (SCT 3),
// Linux NVME_SC_*.
const (
	StatusWriteFault             Status = 0x280 // NVME_SC_WRITE_FAULT
	StatusUnrecoveredReadError   Status = 0x281 // NVME_SC_READ_ERROR
	StatusGuardCheckError        Status = 0x282 // NVME_SC_GUARD_CHECK
	StatusAppTagCheckError       Status = 0x283 // NVME_SC_APPTAG_CHECK
	StatusRefTagCheckError       Status = 0x284 // NVME_SC_REFTAG_CHECK
	StatusCompareFailure         Status = 0x285 // NVME_SC_COMPARE_FAILED
	StatusAccessDenied           Status = 0x286 // NVME_SC_ACCESS_DENIED
	StatusDeallocatedOrUnwritten Status = 0x287 // NVME_SC_UNWRITTEN_BLOCK

	StatusInternalPathError   Status = 0x300 // NVME_SC_INTERNAL_PATH_ERROR
	StatusANAPersistentLoss   Status = 0x301 // NVME_SC_ANA_PERSISTENT_LOSS
	StatusANAInaccessible     Status = 0x302 // NVME_SC_ANA_INACCESSIBLE
	StatusANATransition       Status = 0x303 // NVME_SC_ANA_TRANSITION
	StatusControllerPathError Status = 0x360 // NVME_SC_CTRL_PATH_ERROR
	StatusHostPathError       Status = 0x370 // NVME_SC_HOST_PATH_ERROR
	StatusHostAbortedCommand  Status = 0x371 // NVME_SC_HOST_ABORTED_CMD
)

// SC returns the status code (bits 7:0).
func (s Status) SC() uint8 { return uint8(s) }

// SCT returns the status code type (bits 10:8).
func (s Status) SCT() StatusCodeType { return StatusCodeType(s>>8) & 7 }

// CRD returns the command retry delay index (bits 12:11): 0 for none, 1..3
// for the controller's CRDT1..CRDT3.
func (s Status) CRD() uint8 { return uint8(s>>11) & 3 }

// More reports the More bit: the Error Information log has an entry for
// this completion.
func (s Status) More() bool { return s&StatusMore != 0 }

// DNR reports the Do Not Retry bit.
func (s Status) DNR() bool { return s&StatusDNR != 0 }

// Code returns the status with the CRD, More and DNR bits cleared, for
// comparison with the Status* constants.
func (s Status) Code() Status { return s & statusCodeMask }

// WithDNR returns s with the Do Not Retry bit set.
func (s Status) WithDNR() Status { return s | StatusDNR }

// IsError reports whether s is anything but success.
func (s Status) IsError() bool { return s.Code() != StatusSuccess }

// String returns the spec name of the code with its SCT/SC numbers and the
// set flags, as in "Invalid Field in Command (sct 0x0 sc 0x02, DNR)".
// Command specific codes 0x180-0x183 mean different things for NVM and
// Fabrics commands; String names both.
func (s Status) String() string {
	b := make([]byte, 0, 64)
	b = append(b, s.Code().name()...)
	b = append(b, " (sct 0x"...)
	b = strconv.AppendUint(b, uint64(s.SCT()), 16)
	b = append(b, " sc 0x"...)
	if s.SC() < 0x10 {
		b = append(b, '0')
	}
	b = strconv.AppendUint(b, uint64(s.SC()), 16)
	if crd := s.CRD(); crd != 0 {
		b = append(b, ", CRD "...)
		b = strconv.AppendUint(b, uint64(crd), 10)
	}
	if s.More() {
		b = append(b, ", More"...)
	}
	if s.DNR() {
		b = append(b, ", DNR"...)
	}
	b = append(b, ')')
	return string(b)
}

func (s Status) name() string {
	switch s {
	case StatusSuccess:
		return "Successful Completion"
	case StatusInvalidOpcode:
		return "Invalid Command Opcode"
	case StatusInvalidField:
		return "Invalid Field in Command"
	case StatusCIDConflict:
		return "Command ID Conflict"
	case StatusDataTransferError:
		return "Data Transfer Error"
	case StatusPowerLoss:
		return "Commands Aborted due to Power Loss Notification"
	case StatusInternal:
		return "Internal Error"
	case StatusAbortRequested:
		return "Command Abort Requested"
	case StatusAbortSQDeleted:
		return "Command Aborted due to SQ Deletion"
	case StatusFusedFail:
		return "Command Aborted due to Failed Fused Command"
	case StatusFusedMissing:
		return "Command Aborted due to Missing Fused Command"
	case StatusInvalidNamespace:
		return "Invalid Namespace or Format"
	case StatusCommandSequenceError:
		return "Command Sequence Error"
	case StatusSGLInvalidLast:
		return "Invalid SGL Segment Descriptor"
	case StatusSGLInvalidCount:
		return "Invalid Number of SGL Descriptors"
	case StatusSGLInvalidDataLength:
		return "Data SGL Length Invalid"
	case StatusSGLInvalidMetadata:
		return "Metadata SGL Length Invalid"
	case StatusSGLInvalidType:
		return "SGL Descriptor Type Invalid"
	case StatusCMBInvalidUse:
		return "Invalid Use of Controller Memory Buffer"
	case StatusPRPInvalidOffset:
		return "PRP Offset Invalid"
	case StatusAtomicWriteUnitExceeded:
		return "Atomic Write Unit Exceeded"
	case StatusOperationDenied:
		return "Operation Denied"
	case StatusSGLInvalidOffset:
		return "SGL Offset Invalid"
	case StatusHostIDInconsistent:
		return "Host Identifier Inconsistent Format"
	case StatusKeepAliveExpired:
		return "Keep Alive Timer Expired"
	case StatusKeepAliveInvalid:
		return "Keep Alive Timeout Invalid"
	case StatusAbortedPreempt:
		return "Command Aborted due to Preempt and Abort"
	case StatusSanitizeFailed:
		return "Sanitize Failed"
	case StatusSanitizeInProgress:
		return "Sanitize In Progress"
	case StatusSGLInvalidGranularity:
		return "SGL Data Block Granularity Invalid"
	case StatusCommandNotSupportedCMB:
		return "Command Not Supported for Queue in CMB"
	case StatusNamespaceWriteProtected:
		return "Namespace is Write Protected"
	case StatusCommandInterrupted:
		return "Command Interrupted"
	case StatusTransientTransportError:
		return "Transient Transport Error"
	case StatusAdminMediaNotReady:
		return "Admin Command Media Not Ready"
	case StatusInvalidIOCommandSet:
		return "Invalid IO Command Set"
	case StatusLBAOutOfRange:
		return "LBA Out of Range"
	case StatusCapacityExceeded:
		return "Capacity Exceeded"
	case StatusNamespaceNotReady:
		return "Namespace Not Ready"
	case StatusReservationConflict:
		return "Reservation Conflict"
	case StatusFormatInProgress:
		return "Format In Progress"
	case StatusCQInvalid:
		return "Completion Queue Invalid"
	case StatusQIDInvalid:
		return "Invalid Queue Identifier"
	case StatusQueueSizeInvalid:
		return "Invalid Queue Size"
	case StatusAbortLimitExceeded:
		return "Abort Command Limit Exceeded"
	case StatusAsyncEventLimitExceeded:
		return "Asynchronous Event Request Limit Exceeded"
	case StatusInvalidFirmwareSlot:
		return "Invalid Firmware Slot"
	case StatusInvalidFirmwareImage:
		return "Invalid Firmware Image"
	case StatusInvalidInterruptVector:
		return "Invalid Interrupt Vector"
	case StatusInvalidLogPage:
		return "Invalid Log Page"
	case StatusInvalidFormat:
		return "Invalid Format"
	case StatusFirmwareNeedsConvReset:
		return "Firmware Activation Requires Conventional Reset"
	case StatusInvalidQueueDeletion:
		return "Invalid Queue Deletion"
	case StatusFeatureNotSaveable:
		return "Feature Identifier Not Saveable"
	case StatusFeatureNotChangeable:
		return "Feature Not Changeable"
	case StatusFeatureNotPerNamespace:
		return "Feature Not Namespace Specific"
	case StatusFirmwareNeedsSubsysReset:
		return "Firmware Activation Requires NVM Subsystem Reset"
	case StatusNamespaceInsufficientCap:
		return "Namespace Insufficient Capacity"
	case StatusNamespaceAlreadyAttached:
		return "Namespace Already Attached"
	case StatusNamespaceNotAttached:
		return "Namespace Not Attached"
	case StatusControllerListInvalid:
		return "Controller List Invalid"
	case StatusANAGroupIDInvalid:
		return "ANA Group Identifier Invalid"
	case 0x180:
		return "Connect Incompatible Format / Conflicting Attributes"
	case 0x181:
		return "Connect Controller Busy / Invalid Protection Information"
	case 0x182:
		return "Connect Invalid Parameters / Attempted Write to Read Only Range"
	case 0x183:
		return "Connect Restart Discovery"
	case StatusConnectInvalidHost:
		return "Connect Invalid Host"
	case StatusDiscoveryRestart:
		return "Discovery Restart"
	case StatusAuthRequired:
		return "Authentication Required"
	case StatusWriteFault:
		return "Write Fault"
	case StatusUnrecoveredReadError:
		return "Unrecovered Read Error"
	case StatusGuardCheckError:
		return "End-to-end Guard Check Error"
	case StatusAppTagCheckError:
		return "End-to-end Application Tag Check Error"
	case StatusRefTagCheckError:
		return "End-to-end Reference Tag Check Error"
	case StatusCompareFailure:
		return "Compare Failure"
	case StatusAccessDenied:
		return "Access Denied"
	case StatusDeallocatedOrUnwritten:
		return "Deallocated or Unwritten Logical Block"
	case StatusInternalPathError:
		return "Internal Path Error"
	case StatusANAPersistentLoss:
		return "Asymmetric Access Persistent Loss"
	case StatusANAInaccessible:
		return "Asymmetric Access Inaccessible"
	case StatusANATransition:
		return "Asymmetric Access Transition"
	case StatusControllerPathError:
		return "Controller Pathing Error"
	case StatusHostPathError:
		return "Host Pathing Error"
	case StatusHostAbortedCommand:
		return "Command Aborted By Host"
	}
	return "Unknown Status"
}
