package scsi

// errorString is a constant error: failures are compared with errors.Is
// against these, never against mutable package variables.
type errorString string

// Error returns the message.
func (e errorString) Error() string { return string(e) }

// Errors returned by the configuration API and the codecs. Command
// execution never returns a Go error: its outcome is the status, sense data
// and residual written into the Command.
const (
	// ErrLUNInUse is returned by Target.Map for a LUN that is already
	// mapped, and for an LU that is already mapped (in any target).
	ErrLUNInUse = errorString("scsi: LUN already mapped")
	// ErrNoLUN is returned by Target.Unmap for a LUN that is not mapped.
	ErrNoLUN = errorString("scsi: LUN not mapped")
	// ErrLUNRange is returned for a LUN number this target cannot address
	// (flat space addressing: 0 to 16383).
	ErrLUNRange = errorString("scsi: LUN number out of range (0-16383)")
	// ErrNilDisk is returned by NewLU without a disk.
	ErrNilDisk = errorString("scsi: nil disk")
	// ErrBlockSize is returned by NewLU for a disk whose block size is not
	// a power of two from 512 to 65536 or whose size is not a multiple of
	// it.
	ErrBlockSize = errorString("scsi: unsupported disk geometry")
	// ErrIdentity is returned by NewLU for identity strings that are too
	// long or not printable ASCII.
	ErrIdentity = errorString("scsi: invalid inquiry identity string")
	// ErrSessionClosed is returned by Session methods after Close.
	ErrSessionClosed = errorString("scsi: session closed")
	// ErrDuplicateSession is returned by Target.NewSession when a session
	// with the same I_T nexus identity is open.
	ErrDuplicateSession = errorString("scsi: I_T nexus already has a session")

	// ErrALUAState is returned for an asymmetric access state this
	// package does not support (LBA dependent, reserved values) or a word
	// ParseALUAState does not know.
	ErrALUAState = errorString("scsi: unsupported asymmetric access state")
	// ErrPortGroup is returned for a target port group configuration
	// that cannot be (ID or port 0, a duplicate ID, a port in two
	// groups) and for a group that does not exist.
	ErrPortGroup = errorString("scsi: invalid target port group")

	errShortSense  = errorString("scsi: sense data too short")
	errSenseFormat = errorString("scsi: unknown sense data response code")
	errLUNFormat   = errorString("scsi: unsupported LUN addressing method")
)
