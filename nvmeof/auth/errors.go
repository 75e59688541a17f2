package auth

import "fmt"

// errorString is a constant error, so that sentinels are constants rather
// than package variables.
type errorString string

// Error returns the message.
func (e errorString) Error() string { return string(e) }

// Sentinel errors, wrapped with detail by the functions that return them.
const (
	// ErrMalformed is wrapped by every parse failure of a message: too
	// short for its header or for the lengths it declares, a wrong
	// auth_type/auth_id for the parser, or a field out of range.
	ErrMalformed = errorString("malformed authentication message")
	// ErrState is returned when a method is called in a state that does
	// not expect it (for example Host.HandleSuccess1 before a Reply was
	// made). The exchange's state is not changed.
	ErrState = errorString("authentication step out of order")
	// ErrShortBuffer is returned by Controller.Receive when the Auth
	// Receive allocation length cannot hold the next message; the state
	// is not changed, so a retry with a larger buffer works.
	ErrShortBuffer = errorString("authentication receive buffer too small")
)

// Error is the error of a failed authentication exchange. Code says why in
// the terms of the protocol (the rescode_exp of the AUTH_Failure message
// sent or received); errors.Is(err, auth.FailureFailed) and the like test
// it.
type Error struct {
	// Step names what was being done: "negotiate", "challenge",
	// "reply", "success1", "success2".
	Step string
	// Code is the failure reason explanation.
	Code FailureCode
	// Remote is true when the peer reported the failure (an
	// AUTH_Failure1 received by the host, an AUTH_Failure2 received by
	// the controller), false when this side detected it.
	Remote bool
	// Err is the detail, if any.
	Err error
}

// Error describes the failure.
func (e *Error) Error() string {
	who := ""
	if e.Remote {
		who = "peer reported "
	}
	if e.Err != nil {
		return fmt.Sprintf("dh-hmac-chap %s: %s%s: %v", e.Step, who, e.Code, e.Err)
	}
	return fmt.Sprintf("dh-hmac-chap %s: %s%s", e.Step, who, e.Code)
}

// Unwrap returns the detail.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is e's FailureCode.
func (e *Error) Is(target error) bool {
	c, ok := target.(FailureCode)
	return ok && c == e.Code
}

func failf(step string, code FailureCode, format string, args ...any) *Error {
	return &Error{Step: step, Code: code, Err: fmt.Errorf(format, args...)}
}
