package host

import (
	"fmt"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/nvmeof"
)

// StatusError is a command the controller completed with an error status.
// It matches the blockdev sentinel of its class with errors.Is (LBA Out of
// Range is blockdev.ErrRange, and so on).
type StatusError struct {
	// Command names the command ("read", "identify controller"...).
	Command string
	// QID is the queue the command ran on.
	QID uint16
	// Status is the completion status, DNR and More included.
	Status nvmeof.Status
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("nvme %s: %s", e.Command, e.Status)
}

// Is maps the status to the blockdev sentinels.
func (e *StatusError) Is(target error) bool {
	st := e.Status.Code()
	switch target {
	case blockdev.ErrRange:
		return st == nvmeof.StatusLBAOutOfRange || st == nvmeof.StatusCapacityExceeded
	case blockdev.ErrReadOnly:
		return st == nvmeof.StatusNamespaceWriteProtected || (st == nvmeof.StatusWriteToReadOnly && e.QID != 0)
	case blockdev.ErrUnsupported:
		return st == nvmeof.StatusInvalidOpcode
	case blockdev.ErrIO:
		return st.SCT() == nvmeof.SCTMediaError || st == nvmeof.StatusDataTransferError || st == nvmeof.StatusInternal
	}
	return false
}

// ConnectError is a Fabrics Connect the controller refused.
type ConnectError struct {
	QID    uint16
	SubNQN string
	Status nvmeof.Status
	// Result is DW0 of the completion: for Connect Invalid Parameters,
	// the offending field's location.
	Result uint32
}

func (e *ConnectError) Error() string {
	what := "queue " + fmt.Sprint(e.QID)
	if e.QID == 0 {
		what = "admin queue"
	}
	msg := fmt.Sprintf("subsystem %s refused the connect of the %s: %s", e.SubNQN, what, fabricsStatus(e.Status))
	switch e.Status.Code() {
	case nvmeof.StatusConnectInvalidParameters:
		inData, off := nvmeof.ParseConnectInvalidParam(e.Result)
		msg += ": " + connectParamName(inData, off)
	case nvmeof.StatusConnectInvalidHost:
		msg += ": this host NQN is not allowed to connect"
	case nvmeof.StatusConnectControllerBusy:
		msg += ": the controller is busy"
	}
	return msg
}

// fabricsStatus names a status of a Fabrics command: codes 0x180-0x184
// mean Connect errors there, not the NVM command set's.
func fabricsStatus(s nvmeof.Status) string {
	var name string
	switch s.Code() {
	case nvmeof.StatusConnectIncompatibleFormat:
		name = "Connect Incompatible Format"
	case nvmeof.StatusConnectControllerBusy:
		name = "Connect Controller Busy"
	case nvmeof.StatusConnectInvalidParameters:
		name = "Connect Invalid Parameters"
	case nvmeof.StatusConnectRestartDiscovery:
		name = "Connect Restart Discovery"
	case nvmeof.StatusConnectInvalidHost:
		name = "Connect Invalid Host"
	default:
		return s.String()
	}
	flags := ""
	if s.DNR() {
		flags = ", DNR"
	}
	return fmt.Sprintf("%s (sct %#x sc %#02x%s)", name, uint8(s.SCT()), s.SC(), flags)
}

// connectParamName explains a Connect Invalid Parameters location the way
// Linux nvmf_log_connect_error does.
func connectParamName(inData bool, off uint16) string {
	if inData {
		switch off {
		case nvmeof.ConnectDataHostIDOffset:
			return "invalid host ID"
		case nvmeof.ConnectDataCNTLIDOffset:
			return "invalid controller ID"
		case nvmeof.ConnectDataSubNQNOffset:
			return "subsystem NQN not found"
		case nvmeof.ConnectDataHostNQNOffset:
			return "invalid host NQN"
		}
		return fmt.Sprintf("invalid field at connect data offset %d", off)
	}
	switch off {
	case nvmeof.OffsetConnectRecFmt:
		return "invalid record format"
	case nvmeof.OffsetConnectQID:
		return "invalid queue ID"
	case nvmeof.OffsetConnectSQSize:
		return "invalid queue size (SQSIZE)"
	case nvmeof.OffsetConnectCAttr:
		return "invalid connect attributes"
	case nvmeof.OffsetConnectKATO:
		return "invalid keep alive timeout"
	}
	return fmt.Sprintf("invalid field at command offset %d", off)
}

// RejectError is a connection request the target refused at the RDMA
// connection manager, before any NVMe command.
type RejectError struct {
	Addr string
	QID  uint16
	// Status is the NVMe/RDMA reject status; 0 when the reject carried
	// none (not an NVMe/RDMA target, or one out of resources).
	Status nvmeof.CMStatus
	// Err is the provider's error.
	Err error
}

func (e *RejectError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("%s rejected the RDMA connection of queue %d without an NVMe/RDMA status (not an NVMe-oF target?)", e.Addr, e.QID)
	}
	return fmt.Sprintf("%s rejected the RDMA connection of queue %d: %s (%s)", e.Addr, e.QID, CMStatusName(e.Status), e.Status)
}

func (e *RejectError) Unwrap() error { return e.Err }

// CMStatusName returns the Linux name of an NVMe/RDMA CM reject status.
func CMStatusName(s nvmeof.CMStatus) string {
	switch s {
	case nvmeof.CMInvalidLength:
		return "NVME_RDMA_CM_INVALID_LEN"
	case nvmeof.CMInvalidRecFmt:
		return "NVME_RDMA_CM_INVALID_RECFMT"
	case nvmeof.CMInvalidQID:
		return "NVME_RDMA_CM_INVALID_QID"
	case nvmeof.CMInvalidHSQSize:
		return "NVME_RDMA_CM_INVALID_HSQSIZE"
	case nvmeof.CMInvalidHRQSize:
		return "NVME_RDMA_CM_INVALID_HRQSIZE"
	case nvmeof.CMNoResources:
		return "NVME_RDMA_CM_NO_RSC"
	case nvmeof.CMInvalidIRD:
		return "NVME_RDMA_CM_INVALID_IRD"
	case nvmeof.CMInvalidORD:
		return "NVME_RDMA_CM_INVALID_ORD"
	}
	return fmt.Sprintf("NVME_RDMA_CM_STATUS_%d", uint16(s))
}

// Sentinel errors of the host.
const (
	// ErrTimeout: a command or the controller's enable did not complete in
	// time; the controller is torn down.
	ErrTimeout = errorString("nvme host: timed out")
	// ErrNoNamespace: the namespace is not active.
	ErrNoNamespace = errorString("not an active namespace")
)

type errorString string

func (e errorString) Error() string { return string(e) }

// connLost wraps the reason a queue failed so that it matches
// blockdev.ErrClosed.
type connLost struct{ err error }

func (e *connLost) Error() string {
	return "nvme host: connection lost: " + e.err.Error()
}
func (e *connLost) Unwrap() []error { return []error{e.err, blockdev.ErrClosed} }
