package host

import (
	"strconv"
	"strings"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/scsi"
)

// errorString is a constant error, compared with errors.Is.
type errorString string

// Error returns the message.
func (e errorString) Error() string { return string(e) }

// Errors of the parsers and the probe. They come wrapped with the command
// or the step that failed.
const (
	// ErrShortData: the parameter data is shorter than its format needs.
	ErrShortData = errorString("scsi host: parameter data too short")
	// ErrPageCode: a VPD page came back with another page code.
	ErrPageCode = errorString("scsi host: unexpected VPD page code")
	// ErrNotDisk: the LUN is not a connected direct-access block device.
	ErrNotDisk = errorString("scsi host: not a direct-access block device")
	// ErrGeometry: the capacity or block size cannot be served as a
	// blockdev.Device.
	ErrGeometry = errorString("scsi host: unsupported geometry")
	// ErrNoPortGroup: REPORT TARGET PORT GROUPS lists no group of the
	// path's target port.
	ErrNoPortGroup = errorString("scsi host: no target port group of this path")
)

// StatusError is a command that completed with a SCSI status other than
// GOOD or CONDITION MET. It matches the blockdev sentinel Class returns
// with errors.Is, and no other.
type StatusError struct {
	// Transport, if set, prefixes the message ("srp", "iscsi").
	Transport string
	// Command names the command ("READ(16)", "TEST UNIT READY").
	Command string
	Status  scsi.Status
	// Sense is a copy of the sense data (CHECK CONDITION), Parsed its
	// decoding, valid when HasSense.
	Sense    []byte
	Parsed   scsi.Sense
	HasSense bool
}

// NewStatusError returns the error of command ending with status st and
// sense data sense (copied).
func NewStatusError(transport, command string, st scsi.Status, sense []byte) *StatusError {
	e := &StatusError{Transport: transport, Command: command, Status: st}
	if len(sense) > 0 {
		e.Sense = append([]byte(nil), sense...)
		if p, err := scsi.ParseSense(e.Sense); err == nil {
			e.Parsed, e.HasSense = p, true
		}
	}
	return e
}

// Error gives the command, the status and, with sense data, the sense key
// and additional sense code: "srp: READ(16): CHECK CONDITION, ILLEGAL
// REQUEST 21h/00h".
func (e *StatusError) Error() string {
	var b strings.Builder
	if e.Transport != "" {
		b.WriteString(e.Transport)
		b.WriteString(": ")
	}
	b.WriteString(e.Command)
	b.WriteString(": ")
	b.WriteString(e.Status.String())
	if e.HasSense {
		b.WriteString(", ")
		b.WriteString(e.Parsed.Key.String())
		b.WriteByte(' ')
		b.WriteString(e.Parsed.ASC.String())
	}
	return b.String()
}

// Class returns the blockdev sentinel of the error:
//
//   - DATA PROTECT: blockdev.ErrReadOnly (write protected LU)
//   - ILLEGAL REQUEST, LOGICAL BLOCK ADDRESS OUT OF RANGE: blockdev.ErrRange
//   - ILLEGAL REQUEST, INVALID COMMAND OPERATION CODE: blockdev.ErrUnsupported
//   - any other ILLEGAL REQUEST (invalid field in the CDB or the parameter
//     list, LU not supported...): blockdev.ErrInvalid
//   - NOT READY for the path's asymmetric access state (04h/0Ah, 0Bh, 0Ch,
//     12h: see SenseAccessState): blockdev.ErrPath, which also matches
//     blockdev.ErrIO
//   - everything else: blockdev.ErrIO (MEDIUM ERROR, HARDWARE ERROR,
//     ABORTED COMMAND, MISCOMPARE, NOT READY, a unit attention or BUSY left
//     after the retries, RESERVATION CONFLICT, TASK ABORTED, a CHECK
//     CONDITION without usable sense data).
func (e *StatusError) Class() error {
	if e.Status != scsi.StatusCheckCondition || !e.HasSense {
		return blockdev.ErrIO
	}
	if _, ok := SenseAccessState(e.Status, e.Sense); ok {
		return blockdev.ErrPath
	}
	switch e.Parsed.Key {
	case scsi.KeyDataProtect:
		return blockdev.ErrReadOnly
	case scsi.KeyIllegalRequest:
		switch e.Parsed.ASC {
		case scsi.ASCLBAOutOfRange:
			return blockdev.ErrRange
		case scsi.ASCInvalidCommandOpcode:
			return blockdev.ErrUnsupported
		}
		return blockdev.ErrInvalid
	}
	return blockdev.ErrIO
}

// Is matches the sentinel Class returns (and blockdev.ErrIO with
// blockdev.ErrPath, as a blockdev.PathError does).
func (e *StatusError) Is(target error) bool {
	c := e.Class()
	return target == c || c == blockdev.ErrPath && target == blockdev.ErrIO
}

// MaxRetries is how many times a command is sent again after a status
// Retry accepts, as Linux sd's SD_MAX_RETRIES.
const MaxRetries = 5

// Retry tells whether a command that completed with status st and sense
// data sense, already sent again retries times, should be sent again: a
// UNIT ATTENTION (a reset, a mode or capacity change reported to this
// nexus: the condition is cleared by reporting it), BUSY or TASK SET FULL
// (the task set is momentarily full), at most MaxRetries times. It does not
// allocate.
func Retry(st scsi.Status, sense []byte, retries int) bool {
	if retries >= MaxRetries {
		return false
	}
	switch st {
	case scsi.StatusBusy, scsi.StatusTaskSetFull:
		return true
	case scsi.StatusCheckCondition:
		s, err := scsi.ParseSense(sense)
		return err == nil && s.Key == scsi.KeyUnitAttention
	}
	return false
}

// Names of the commands this package builds, as errors show them.
const (
	NameTestUnitReady  = "TEST UNIT READY"
	NameInquiry        = "INQUIRY"
	NameBlockLimits    = "INQUIRY (block limits VPD page)"
	NameProvisioning   = "INQUIRY (logical block provisioning VPD page)"
	NameReadCapacity16 = "READ CAPACITY(16)"
	NameModeSense6     = "MODE SENSE(6)"
	NameReportLUNs     = "REPORT LUNS"
	NameRead16         = "READ(16)"
	NameWrite16        = "WRITE(16)"
	NameSyncCache16    = "SYNCHRONIZE CACHE(16)"
	NameUnmap          = "UNMAP"
	NameWriteSame16    = "WRITE SAME(16)"
	// NameDeviceID and NameRTPG: see alua.go.
)

// IOName returns the name of the command BuildIO uses for op, without
// allocating.
func IOName(op blockdev.Op) string {
	switch op {
	case blockdev.OpRead:
		return NameRead16
	case blockdev.OpWrite:
		return NameWrite16
	case blockdev.OpFlush:
		return NameSyncCache16
	case blockdev.OpDiscard:
		return NameUnmap
	case blockdev.OpWriteZeroes:
		return NameWriteSame16
	}
	return op.String()
}

// CommandName names the command of a CDB for messages: the names above for
// the commands this package builds, "command 0xNN" for the others.
func CommandName(cdb []byte) string {
	if len(cdb) == 0 {
		return "empty command"
	}
	switch cdb[0] {
	case scsi.OpTestUnitReady:
		return NameTestUnitReady
	case scsi.OpInquiry:
		if len(cdb) > 2 && cdb[1]&0x01 != 0 {
			switch cdb[2] {
			case vpdBlockLimits:
				return NameBlockLimits
			case vpdProvisioning:
				return NameProvisioning
			case vpdDeviceID:
				return NameDeviceID
			}
			return "INQUIRY (VPD page " + hex2(cdb[2]) + "h)"
		}
		return NameInquiry
	case scsi.OpServiceActionIn16:
		if len(cdb) > 1 && cdb[1]&0x1f == scsi.SAReadCapacity16 {
			return NameReadCapacity16
		}
	case scsi.OpModeSense6:
		return NameModeSense6
	case scsi.OpReportLUNs:
		return NameReportLUNs
	case scsi.OpMaintenanceIn:
		if len(cdb) > 1 && cdb[1]&0x1f == scsi.SAReportTargetPortGroup {
			return NameRTPG
		}
	case scsi.OpRead16:
		return NameRead16
	case scsi.OpWrite16:
		return NameWrite16
	case scsi.OpSyncCache16:
		return NameSyncCache16
	case scsi.OpUnmap:
		return NameUnmap
	case scsi.OpWriteSame16:
		return NameWriteSame16
	}
	return "command 0x" + hex2(cdb[0])
}

func hex2(b uint8) string {
	s := strconv.FormatUint(uint64(b), 16)
	if len(s) < 2 {
		s = "0" + s
	}
	return s
}
