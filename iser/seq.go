package iser

// Sequence numbers (CmdSN, ExpCmdSN, MaxCmdSN, StatSN, DataSN, R2TSN) are
// 32-bit serial numbers compared with RFC 1982 arithmetic (SERIAL_BITS 32),
// as RFC 7143 section 4.2.2.1 requires. Two numbers exactly 2^31 apart are
// not comparable: both SNLess(a, b) and SNLess(b, a) are false.

// SNLess reports whether a precedes b.
func SNLess(a, b uint32) bool {
	d := b - a
	return d != 0 && d < 1<<31
}

// SNGreater reports whether a follows b.
func SNGreater(a, b uint32) bool { return SNLess(b, a) }

// SNLessEq reports whether a precedes or equals b.
func SNLessEq(a, b uint32) bool { return a == b || SNLess(a, b) }

// SNGreaterEq reports whether a follows or equals b.
func SNGreaterEq(a, b uint32) bool { return a == b || SNLess(b, a) }

// SNInRange reports whether lo <= x <= hi in serial arithmetic.
func SNInRange(x, lo, hi uint32) bool { return SNLessEq(lo, x) && SNLessEq(x, hi) }

// CmdSNCheck is the verdict of CmdWindow.Check on a non-immediate command.
type CmdSNCheck uint8

// Verdicts.
const (
	// CmdSNInWindow: ExpCmdSN <= CmdSN <= MaxCmdSN; deliver in CmdSN order
	// (CmdSN == ExpCmdSN now, later ones once the gap fills).
	CmdSNInWindow CmdSNCheck = iota
	// CmdSNDuplicate: CmdSN < ExpCmdSN, already received; RFC 7143
	// section 4.2.2.1 says to silently ignore the PDU.
	CmdSNDuplicate
	// CmdSNOutOfWindow: CmdSN > MaxCmdSN; silently ignore.
	CmdSNOutOfWindow
)

// String names the verdict.
func (c CmdSNCheck) String() string {
	switch c {
	case CmdSNInWindow:
		return "in window"
	case CmdSNDuplicate:
		return "duplicate"
	case CmdSNOutOfWindow:
		return "out of window"
	}
	return "invalid"
}

// CmdWindow is a session's command window as the target keeps it: the next
// CmdSN it expects and the last it accepts. MaxCmdSN == ExpCmdSN-1 is a
// closed window (RFC 7143 section 4.2.2.1). A CmdWindow is plain data,
// owned by the goroutine that owns the session.
type CmdWindow struct {
	ExpCmdSN uint32
	MaxCmdSN uint32
}

// NewCmdWindow returns a window starting at expCmdSN that admits depth
// commands (depth 0 is a closed window).
func NewCmdWindow(expCmdSN, depth uint32) CmdWindow {
	return CmdWindow{ExpCmdSN: expCmdSN, MaxCmdSN: expCmdSN + depth - 1}
}

// Check classifies the CmdSN of a non-immediate command. Immediate commands
// are not checked against the window: they carry the next CmdSN without
// consuming it.
func (w CmdWindow) Check(cmdSN uint32) CmdSNCheck {
	if SNLess(cmdSN, w.ExpCmdSN) {
		return CmdSNDuplicate
	}
	if SNGreater(cmdSN, w.MaxCmdSN) {
		return CmdSNOutOfWindow
	}
	return CmdSNInWindow
}

// Depth returns the number of commands the window still admits.
func (w CmdWindow) Depth() uint32 {
	d := w.MaxCmdSN - w.ExpCmdSN + 1
	if d >= 1<<31 { // MaxCmdSN < ExpCmdSN-1: treat as closed
		return 0
	}
	return d
}

// Advance consumes the command with CmdSN == ExpCmdSN (delivered in order).
// MaxCmdSN stays, so the window shrinks by one until Credit reopens it.
func (w *CmdWindow) Advance() { w.ExpCmdSN++ }

// Credit moves MaxCmdSN forward by n: call it when a command completes and
// its slot is free again. MaxCmdSN never moves backwards (RFC 7143).
func (w *CmdWindow) Credit(n uint32) { w.MaxCmdSN += n }

// InitiatorWindow tracks the command window from the initiator's side:
// ExpCmdSN and MaxCmdSN as the target last reported them, and the next
// CmdSN to assign.
type InitiatorWindow struct {
	CmdSN    uint32 // next CmdSN to assign to a non-immediate command
	ExpCmdSN uint32
	MaxCmdSN uint32
}

// Update takes ExpCmdSN and MaxCmdSN from a target PDU. Values are taken
// only if they move forward, and ignored when MaxCmdSN < ExpCmdSN-1, as RFC
// 7143 section 4.2.2.1 asks (stale or reordered PDUs).
func (w *InitiatorWindow) Update(expCmdSN, maxCmdSN uint32) {
	if SNLess(maxCmdSN, expCmdSN-1) {
		return
	}
	if SNGreater(expCmdSN, w.ExpCmdSN) {
		w.ExpCmdSN = expCmdSN
	}
	if SNGreater(maxCmdSN, w.MaxCmdSN) {
		w.MaxCmdSN = maxCmdSN
	}
}

// CanSend reports whether a non-immediate command may be sent now
// (CmdSN <= MaxCmdSN).
func (w InitiatorWindow) CanSend() bool { return SNLessEq(w.CmdSN, w.MaxCmdSN) }

// Next returns the CmdSN for a non-immediate command and advances it.
func (w *InitiatorWindow) Next() uint32 {
	sn := w.CmdSN
	w.CmdSN++
	return sn
}
