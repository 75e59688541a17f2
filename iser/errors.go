package iser

import (
	"strconv"
)

// errorString is a constant error: failures are compared with errors.Is
// against these, never against mutable package variables.
type errorString string

// Error returns the message.
func (e errorString) Error() string { return string(e) }

// Errors a connection loop acts on. They are returned wrapped with detail;
// compare with errors.Is.
const (
	// ErrHeaderDigest reports a PDU whose header digest does not match. At
	// ErrorRecoveryLevel 0 the connection must be dropped: the header, and
	// so the framing, cannot be trusted.
	ErrHeaderDigest = errorString("iser: header digest mismatch")
	// ErrDataDigest reports a PDU whose data digest does not match. The
	// header is intact and the PDU is returned with the error: a target
	// answers it with a Reject (RejectDataDigestError) and discards the
	// data, as RFC 7143 section 7.8 asks.
	ErrDataDigest = errorString("iser: data digest mismatch")
	// ErrDataSegmentTooLong reports a data segment longer than the
	// negotiated MaxRecvDataSegmentLength (or the caller's buffer). The
	// PDU cannot be read without losing the framing: drop the connection.
	ErrDataSegmentTooLong = errorString("iser: data segment longer than MaxRecvDataSegmentLength")
)

// Parse and encode failures, wrapped with detail where the detail helps.
const (
	errShortBHS         = errorString("iser: basic header segment shorter than 48 bytes")
	errShortBuffer      = errorString("iser: buffer too small")
	errShortPDU         = errorString("iser: PDU shorter than its header says")
	errAHSLength        = errorString("iser: additional header segment length overruns the AHS area")
	errAHSType          = errorString("iser: unknown or malformed additional header segment")
	errOpcode           = errorString("iser: unexpected opcode")
	errTextFormat       = errorString("iser: malformed key=value text")
	errTextKey          = errorString("iser: malformed key name")
	errTextValueLength  = errorString("iser: value too long")
	errTextTooLong      = errorString("iser: text exceeds the negotiation buffer")
	errDuplicateKey     = errorString("iser: key sent twice in one negotiation")
	errBadValue         = errorString("iser: value out of range or malformed")
	errAnswer           = errorString("iser: invalid answer to an offered key")
	errNoAnswer         = errorString("iser: offered key left unanswered")
	errNotUnderstood    = errorString("iser: standard key answered NotUnderstood")
	errLoginFlags       = errorString("iser: invalid login flags (T, C, CSG, NSG)")
	errLoginChanged     = errorString("iser: login PDU changed ISID, ITT, CID or version")
	errLoginAHS         = errorString("iser: Login Request with an AHS")
	errLoginPDUs        = errorString("iser: too many login PDUs")
	errLoginState       = errorString("iser: login step called in a finished state")
	errCHAP             = errorString("iser: CHAP authentication failed")
	errCHAPReused       = errorString("iser: CHAP challenge reused for the other direction")
	errCHAPMissing      = errorString("iser: CHAP key missing")
	errAuthMethod       = errorString("iser: no acceptable AuthMethod")
	errMissingKey       = errorString("iser: required key missing")
	errRDMAExtensions   = errorString("iser: iSER normal session without RDMAExtensions=Yes")
	errRedirect         = errorString("iser: login redirection is not supported")
	errVersion          = errorString("iser: unsupported iSCSI version")
	errConfig           = errorString("iser: invalid configuration")
	errIRD              = errorString("iser: iSER hello IRD/ORD invalid")
	errISERHeader       = errorString("iser: malformed iSER header")
	errISERVersion      = errorString("iser: unsupported iSER version")
	errTextResponse     = errorString("iser: unexpected text response")
	errSendTargetsFmt   = errorString("iser: malformed SendTargets response")
	errTargetAddressFmt = errorString("iser: malformed TargetAddress")
)

// LoginStatus is the Status-Class and Status-Detail pair of a Login Response
// (RFC 7143 section 11.13.5), class in the high byte. The login engines
// return it (wrapped with detail) when a login fails; the target puts it in
// the Login Response it sends, the initiator reads it from the one it got.
// It implements error, so errors.As finds it.
type LoginStatus uint16

// Login status codes (Linux ISCSI_STATUS_CLS_* and ISCSI_LOGIN_STATUS_*).
const (
	LoginSuccess              LoginStatus = 0x0000
	LoginTargetMovedTemp      LoginStatus = 0x0101
	LoginTargetMovedPerm      LoginStatus = 0x0102
	LoginInitiatorError       LoginStatus = 0x0200
	LoginAuthFailed           LoginStatus = 0x0201
	LoginForbidden            LoginStatus = 0x0202
	LoginNotFound             LoginStatus = 0x0203
	LoginTargetRemoved        LoginStatus = 0x0204
	LoginUnsupportedVersion   LoginStatus = 0x0205
	LoginTooManyConnections   LoginStatus = 0x0206
	LoginMissingParameter     LoginStatus = 0x0207
	LoginCantIncludeInSession LoginStatus = 0x0208
	LoginSessionTypeNotSupp   LoginStatus = 0x0209
	LoginSessionDoesNotExist  LoginStatus = 0x020a
	LoginInvalidDuringLogin   LoginStatus = 0x020b
	LoginTargetError          LoginStatus = 0x0300
	LoginServiceUnavailable   LoginStatus = 0x0301
	LoginOutOfResources       LoginStatus = 0x0302
)

// Class returns the Status-Class byte.
func (s LoginStatus) Class() uint8 { return uint8(s >> 8) }

// Detail returns the Status-Detail byte.
func (s LoginStatus) Detail() uint8 { return uint8(s) }

// String returns the RFC 7143 name of the status, as libiscsi prints it.
func (s LoginStatus) String() string {
	switch s {
	case LoginSuccess:
		return "success"
	case LoginTargetMovedTemp:
		return "target moved temporarily"
	case LoginTargetMovedPerm:
		return "target moved permanently"
	case LoginInitiatorError:
		return "initiator error"
	case LoginAuthFailed:
		return "authentication failure"
	case LoginForbidden:
		return "authorization failure"
	case LoginNotFound:
		return "target not found"
	case LoginTargetRemoved:
		return "target removed"
	case LoginUnsupportedVersion:
		return "unsupported version"
	case LoginTooManyConnections:
		return "too many connections"
	case LoginMissingParameter:
		return "missing parameter"
	case LoginCantIncludeInSession:
		return "can't include in session"
	case LoginSessionTypeNotSupp:
		return "session type not supported"
	case LoginSessionDoesNotExist:
		return "session does not exist"
	case LoginInvalidDuringLogin:
		return "invalid request during login"
	case LoginTargetError:
		return "target error"
	case LoginServiceUnavailable:
		return "service unavailable"
	case LoginOutOfResources:
		return "out of resources"
	}
	return "status " + strconv.FormatUint(uint64(s.Class()), 16) + "/" + strconv.FormatUint(uint64(s.Detail()), 16)
}

// Error makes a LoginStatus an error.
func (s LoginStatus) Error() string {
	e := "iser: login failed: " + s.String() + " (" + hex2(s.Class()) + "/" + hex2(s.Detail()) + ")"
	if h := s.hint(); h != "" {
		e += ": " + h
	}
	return e
}

// hint says in words what usually causes a refusal and what to check.
func (s LoginStatus) hint() string {
	switch s {
	case LoginAuthFailed:
		return "the target wants CHAP and the name or secret did not match (rdisk daemon --chap-user/--chap-secret)"
	case LoginForbidden:
		return "the initiator name is not in the target's ACL (rdisk target --allow-initiator IQN)"
	case LoginNotFound:
		return "no target of that name on the portal (rdisk discover iscsi://HOST lists them)"
	case LoginTooManyConnections:
		return "the session has as many connections as the target allows"
	case LoginTargetMovedTemp, LoginTargetMovedPerm:
		return "the portal redirected the login elsewhere"
	}
	return ""
}

func hex2(b uint8) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[b>>4], digits[b&15]})
}

// loginError ties a login failure to the status the target answers with.
type loginError struct {
	status LoginStatus
	err    error
}

// Error describes the status and the cause.
func (e *loginError) Error() string { return e.status.Error() + ": " + e.err.Error() }

// Unwrap returns both the status and the cause, so errors.As finds the
// LoginStatus and errors.Is the sentinel.
func (e *loginError) Unwrap() []error { return []error{e.status, e.err} }

func loginErr(st LoginStatus, err error) error { return &loginError{status: st, err: err} }
