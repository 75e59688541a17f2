package blockdev

import "fmt"

// This file is what a multipath layer (initiator/multipath) needs from the
// devices of its paths: the path's access state as the target reports it
// (NVMe ANA, SCSI ALUA), an identity to tell that two paths reach the same
// disk, and an error class for "this path cannot serve it now, another may".

// ErrPath: the request failed on this path only and may succeed on another
// path to the same disk: NVMe path-related statuses (status code type 3:
// ANA Inaccessible, ANA Persistent Loss, ANA Transition, Host Pathing
// Error) and the SCSI ALUA ones (NOT READY with ASYMMETRIC ACCESS STATE
// TRANSITION, TARGET PORT IN STANDBY STATE, TARGET PORT IN UNAVAILABLE
// STATE). A device without a second path reports it as a failed I/O: an
// error matching ErrPath also matches ErrIO.
const ErrPath = errorString("blockdev: path cannot serve the request (try another path)")

// PathError is the error of a request refused by its path. It matches
// ErrPath and ErrIO.
type PathError struct {
	// State is the path's access state as the refusal told it.
	State AccessState
	// Err describes the refusal (the protocol status or sense).
	Err error
}

func (e *PathError) Error() string {
	return fmt.Sprintf("path %s: %v", e.State, e.Err)
}

// Unwrap returns the protocol error and the sentinels the error matches.
func (e *PathError) Unwrap() []error { return []error{e.Err, ErrPath, ErrIO} }

// AccessState is the access state of one path to a disk: NVMe's ANA states
// (NVMe 2.0 §8.1.3) and SCSI's ALUA asymmetric access states (SPC-5
// §5.16.2.2) in one shape.
type AccessState uint8

// Access states. The zero value is AccessUnknown.
const (
	// AccessUnknown: the device reports no state (no ANA/ALUA): treat the
	// path as optimized.
	AccessUnknown AccessState = iota
	// AccessOptimized: ANA Optimized, ALUA Active/Optimized.
	AccessOptimized
	// AccessNonOptimized: ANA Non-Optimized, ALUA Active/Non-optimized:
	// serves I/O, more slowly (or from a gateway that should not be
	// preferred).
	AccessNonOptimized
	// AccessInaccessible: ANA Inaccessible, ALUA Standby or Unavailable:
	// I/O is refused with ErrPath until the state changes.
	AccessInaccessible
	// AccessPersistentLoss: ANA Persistent Loss, ALUA Offline: the path
	// will not come back.
	AccessPersistentLoss
	// AccessTransitioning: ANA Change, ALUA Transitioning: I/O is refused
	// for now; ask again (within the ANA transition time).
	AccessTransitioning
)

// String names the state as `rdisk list` shows it.
func (s AccessState) String() string {
	switch s {
	case AccessUnknown:
		return "unknown"
	case AccessOptimized:
		return "optimized"
	case AccessNonOptimized:
		return "non-optimized"
	case AccessInaccessible:
		return "inaccessible"
	case AccessPersistentLoss:
		return "persistent-loss"
	case AccessTransitioning:
		return "transitioning"
	}
	return fmt.Sprintf("AccessState(%d)", uint8(s))
}

// Usable tells whether a path in this state serves I/O.
func (s AccessState) Usable() bool {
	return s == AccessUnknown || s == AccessOptimized || s == AccessNonOptimized
}

// PathReporter is an optional capability of a device: the access state of
// its path, kept current by the device (re-read on the protocol's change
// notices: an NVMe ANA Change AEN, a SCSI ASYMMETRIC ACCESS STATE CHANGED
// unit attention, and after a request refused with ErrPath).
type PathReporter interface {
	// AccessState returns the current state. It is cheap (an atomic
	// load) and safe to call for every request.
	AccessState() AccessState
	// RefreshAccessState asks the target for the state now (reads the ANA
	// log page, sends REPORT TARGET PORT GROUPS) and returns it.
	RefreshAccessState() (AccessState, error)
}

// Identifier is an optional capability of a device: a stable identity of
// the disk behind it, the same through every path to it, so a multipath
// layer can refuse paths that reach another disk.
type Identifier interface {
	// DiskID returns the identity: for NVMe the subsystem NQN with the
	// namespace's NGUID, EUI-64 or UUID (the first it reports, in that
	// order), for SCSI the LU's NAA (or other) designator from VPD page
	// 83h. It is "" when the disk reports none.
	DiskID() string
}
