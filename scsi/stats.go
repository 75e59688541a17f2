package scsi

import "sync/atomic"

// LUErrorStats counts the commands of a logical unit that completed with
// a status other than GOOD, since the LU was made. Commands to LUN numbers
// that map no LU, and commands aborted by task management (TASK ABORTED,
// or no response), are not counted.
type LUErrorStats struct {
	// BySenseKey counts CHECK CONDITION completions by sense key:
	// "no_sense", "recovered_error", "not_ready", "medium_error",
	// "hardware_error", "illegal_request", "unit_attention",
	// "data_protect", "blank_check", "vendor_specific", "copy_aborted",
	// "aborted_command", "equal", "volume_overflow", "miscompare",
	// "completed". Every key is present, zero or not, so that a metrics
	// exporter sees a stable set of series.
	BySenseKey map[string]uint64
	// ByStatus counts the other error statuses: "reservation_conflict",
	// "busy", "task_set_full" (every key present).
	ByStatus map[string]uint64
}

// senseKeyNames names the sense keys (SPC-5 table 52) for LUErrorStats,
// indexed by sense key.
var senseKeyNames = [16]string{
	KeyNoSense:        "no_sense",
	KeyRecoveredError: "recovered_error",
	KeyNotReady:       "not_ready",
	KeyMediumError:    "medium_error",
	KeyHardwareError:  "hardware_error",
	KeyIllegalRequest: "illegal_request",
	KeyUnitAttention:  "unit_attention",
	KeyDataProtect:    "data_protect",
	KeyBlankCheck:     "blank_check",
	0x9:               "vendor_specific",
	0xa:               "copy_aborted",
	KeyAbortedCommand: "aborted_command",
	0xc:               "equal",
	0xd:               "volume_overflow",
	KeyMiscompare:     "miscompare",
	0xf:               "completed",
}

// Indexes of LU.statusErrs, and their names.
const (
	statusErrReservationConflict = iota
	statusErrBusy
	statusErrTaskSetFull
	numStatusErrs
)

var statusErrNames = [numStatusErrs]string{
	statusErrReservationConflict: "reservation_conflict",
	statusErrBusy:                "busy",
	statusErrTaskSetFull:         "task_set_full",
}

// luErrors are an LU's error counters: fixed arrays of atomics, touched
// only by commands that do not complete with GOOD.
type luErrors struct {
	sense  [16]atomic.Uint64
	status [numStatusErrs]atomic.Uint64
}

// countError counts a completed command of the LU whose status is not
// GOOD. It allocates nothing.
func (lu *LU) countError(c *Command) {
	switch c.Status {
	case StatusCheckCondition:
		lu.errs.sense[c.senseKey&0x0f].Add(1)
	case StatusReservationConflict:
		lu.errs.status[statusErrReservationConflict].Add(1)
	case StatusBusy:
		lu.errs.status[statusErrBusy].Add(1)
	case StatusTaskSetFull:
		lu.errs.status[statusErrTaskSetFull].Add(1)
	}
}

// ErrorStats returns the LU's error counters. It is meant for metrics
// scrapes: each call builds new maps; the I/O path only adds to atomics.
func (lu *LU) ErrorStats() LUErrorStats {
	st := LUErrorStats{
		BySenseKey: make(map[string]uint64, len(senseKeyNames)),
		ByStatus:   make(map[string]uint64, len(statusErrNames)),
	}
	for k, name := range senseKeyNames {
		st.BySenseKey[name] = lu.errs.sense[k].Load()
	}
	for i, name := range statusErrNames {
		st.ByStatus[name] = lu.errs.status[i].Load()
	}
	return st
}
