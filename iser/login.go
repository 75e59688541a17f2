package iser

import (
	"errors"
	"strconv"
)

// LoginState is where a login engine (TargetLogin, InitiatorLogin) stands
// after a step.
type LoginState uint8

// Login states.
const (
	// LoginInProgress: send the PDU the step produced and feed the
	// engine the peer's next one.
	LoginInProgress LoginState = iota
	// LoginDone: the final Login Response was produced (target) or
	// received (initiator); the connection is in full feature phase and
	// Session returns the results.
	LoginDone
	// LoginFailed: the target sends the Login Response the step produced
	// (it carries the status) and closes the connection; the initiator
	// closes it.
	LoginFailed
)

// String names the state.
func (s LoginState) String() string {
	switch s {
	case LoginInProgress:
		return "in progress"
	case LoginDone:
		return "done"
	case LoginFailed:
		return "failed"
	}
	return "LoginState(" + strconv.Itoa(int(s)) + ")"
}

// maxLoginPDUs bounds the requests of one login (Linux LIO allows 7 steps).
const maxLoginPDUs = 16

// Session is the result of a successful login.
type Session struct {
	// Params are the negotiated parameters, from this side's view.
	Params Params
	ISID   ISID
	TSIH   uint16
	CID    uint16
	// Target is what the target's Resolve returned (target side only).
	Target TargetInfo
	// CmdWindow is the command window at the start of full feature
	// phase: on the target, the one to keep; on the initiator, the
	// target's ExpCmdSN and MaxCmdSN from the final Login Response.
	CmdWindow CmdWindow
	// StatSN is, on the target, the StatSN of the first full feature
	// phase response; on the initiator, the ExpStatSN to acknowledge.
	StatSN uint32
	// CmdSN is the CmdSN of the initiator's first non-immediate command
	// (login requests are immediate and do not consume it).
	CmdSN uint32
}

// statusOf returns the LoginStatus an error carries, LoginInitiatorError
// if none (protocol errors).
func statusOf(err error) LoginStatus {
	var st LoginStatus
	if errors.As(err, &st) {
		return st
	}
	return LoginInitiatorError
}

// authState is the progress of authentication on one side of a login.
type authState uint8

const (
	authStart      authState = iota // nothing exchanged
	authOffered                     // initiator: AuthMethod offered
	authCHAPChosen                  // CHAP selected, CHAP_A next
	authCHAPSentA                   // initiator: CHAP_A sent, challenge awaited
	authCHAPWaitR                   // target: challenge sent, CHAP_N and CHAP_R awaited
	authCHAPSentR                   // initiator: CHAP_N and CHAP_R sent
	authOK                          // authenticated, or None
)

// String names the state.
func (a authState) String() string {
	switch a {
	case authStart:
		return "start"
	case authOffered:
		return "AuthMethod offered"
	case authCHAPChosen:
		return "CHAP chosen"
	case authCHAPSentA:
		return "CHAP_A sent"
	case authCHAPWaitR:
		return "CHAP challenge outstanding"
	case authCHAPSentR:
		return "CHAP response sent"
	case authOK:
		return "authenticated"
	}
	return "authState(" + strconv.Itoa(int(a)) + ")"
}
