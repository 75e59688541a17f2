package nvmeof

import (
	"fmt"
	"strconv"
)

// errorString is a constant error: parse failures are compared with
// errors.Is against these, never against mutable package variables.
type errorString string

// Error returns the message.
func (e errorString) Error() string { return string(e) }

// Parse and encode failures. They are wrapped with detail (fmt.Errorf %w,
// *CommandError, *FieldError) where the detail helps.
const (
	errShortSQE          = errorString("nvmeof: submission queue entry shorter than 64 bytes")
	errShortCQE          = errorString("nvmeof: completion queue entry shorter than 16 bytes")
	errShortSGL          = errorString("nvmeof: SGL descriptor shorter than 16 bytes")
	errShortConnectData  = errorString("nvmeof: connect data shorter than 1024 bytes")
	errShortIdentify     = errorString("nvmeof: identify data shorter than 4096 bytes")
	errShortLogPage      = errorString("nvmeof: log page data too short")
	errShortBuffer       = errorString("nvmeof: destination buffer too small")
	errShortDSMRange     = errorString("nvmeof: dataset management range list too short")
	errShortCMData       = errorString("nvmeof: RDMA CM private data too short")
	errTruncatedDiscLog  = errorString("nvmeof: discovery log holds fewer entries than its NUMREC")
	errFused             = errorString("nvmeof: fused operations are not supported")
	errPSDT              = errorString("nvmeof: PSDT must be 01b (SGL, MPTR a single buffer) on a fabrics queue")
	errUnknownOpcode     = errorString("nvmeof: unknown or unsupported opcode")
	errUnknownFCType     = errorString("nvmeof: unknown or unsupported fabrics command type")
	errSGLType           = errorString("nvmeof: SGL descriptor type not supported by the RDMA transport")
	errSGLSubtype        = errorString("nvmeof: SGL descriptor subtype not supported by the RDMA transport")
	errSGLTypeTCP        = errorString("nvmeof: SGL descriptor type not supported by the TCP transport")
	errSGLSubtypeTCP     = errorString("nvmeof: SGL descriptor subtype not supported by the TCP transport")
	errSGLOffset         = errorString("nvmeof: in-capsule SGL offset and length exceed the in-capsule data")
	errSGLInCapsuleRead  = errorString("nvmeof: in-capsule data descriptor on a command that does not write")
	errTransferLen       = errorString("nvmeof: SGL length does not match the command's transfer length")
	errLBARange          = errorString("nvmeof: LBA range exceeds the namespace")
	errCMRecFmt          = errorString("nvmeof: RDMA CM private data record format is not 0")
	errCMStatus          = errorString("nvmeof: unknown RDMA CM reject status")
	errNQNUnterminated   = errorString("nvmeof: NQN not NUL-terminated within its 256-byte field")
	errNQNTooLong        = errorString("nvmeof: NQN longer than 223 bytes")
	errNQNEmpty          = errorString("nvmeof: NQN is empty")
	errNQNHasNUL         = errorString("nvmeof: NQN contains a NUL byte")
	errStringTooLong     = errorString("nvmeof: string longer than its field")
	errStringNotASCII    = errorString("nvmeof: string is not printable ASCII")
	errTooManyEntries    = errorString("nvmeof: too many entries for the structure")
	errNSDescLength      = errorString("nvmeof: namespace identification descriptor has the wrong length for its type")
	errNSDescOverflow    = errorString("nvmeof: namespace identification descriptor runs past the data")
	errLogOffset         = errorString("nvmeof: log page offset not dword aligned or past the page")
	errPropertySize      = errorString("nvmeof: property attribute size is neither 4 nor 8 bytes")
	errNSIDListUnordered = errorString("nvmeof: namespace ID list not in increasing order")
	errIdentifyHost      = errorString("nvmeof: identify controller unusable by a fabrics host")
)

// CommandError reports a well-framed command that must be completed with an
// error status. It is what a target puts in the completion (Status) and in
// the Error Information log entry (Loc, the Parameter Error Location).
type CommandError struct {
	// Status is the status to complete the command with, DNR included
	// where a retry cannot succeed.
	Status Status
	// Loc is the byte offset in the SQE of the offending field, as Linux
	// nvmet sets req->error_loc (offsetof the field in struct
	// nvme_common_command and friends).
	Loc uint16
	// Err is the sentinel describing the failure.
	Err error
}

// Error describes the failure, its status and the field location.
func (e *CommandError) Error() string {
	return e.Err.Error() + " (" + e.Status.String() + ", SQE byte " + strconv.Itoa(int(e.Loc)) + ")"
}

// Unwrap returns the sentinel error.
func (e *CommandError) Unwrap() error { return e.Err }

func cmdErr(st Status, loc uint16, err error) *CommandError {
	return &CommandError{Status: st, Loc: loc, Err: err}
}

// FieldError reports a field of a fixed-layout structure that does not parse
// or cannot be encoded.
type FieldError struct {
	// Structure names the structure, as in "connect data".
	Structure string
	// Field is the spec mnemonic of the field, as in "SUBNQN".
	Field string
	// Offset is the byte offset of the field in the structure. A target
	// answering a bad Connect puts it in the Invalid Parameter Offset.
	Offset int
	// Err is the sentinel describing the failure.
	Err error
}

// Error describes the failure and the field.
func (e *FieldError) Error() string {
	return fmt.Sprintf("nvmeof: %s field %s (byte %d): %v", e.Structure, e.Field, e.Offset, e.Err)
}

// Unwrap returns the sentinel error.
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(structure, field string, off int, err error) *FieldError {
	return &FieldError{Structure: structure, Field: field, Offset: off, Err: err}
}
