package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"slices"
)

// HostState is where a Host is in an exchange.
type HostState uint8

// Host states, in the order an exchange passes them.
const (
	// HostIdle: no exchange started yet.
	HostIdle HostState = iota
	// HostAwaitChallenge: the AUTH_Negotiate is made; the next message
	// received must be the DH-HMAC-CHAP_Challenge (or AUTH_Failure1).
	HostAwaitChallenge
	// HostAwaitSuccess1: the DH-HMAC-CHAP_Reply is made; the next message
	// received must be DH-HMAC-CHAP_Success1 (or AUTH_Failure1).
	HostAwaitSuccess1
	// HostAuthenticated: the exchange succeeded (after Success2 was made
	// for bidirectional authentication).
	HostAuthenticated
	// HostFailed: the exchange failed; Err says why.
	HostFailed
)

// String returns the state's name.
func (s HostState) String() string {
	switch s {
	case HostIdle:
		return "idle"
	case HostAwaitChallenge:
		return "await-challenge"
	case HostAwaitSuccess1:
		return "await-success1"
	case HostAuthenticated:
		return "authenticated"
	case HostFailed:
		return "failed"
	}
	return fmt.Sprintf("host state %d", uint8(s))
}

// HostConfig is what a host needs to authenticate to one subsystem.
type HostConfig struct {
	// HostNQN and SubsysNQN are the NQNs of the Connect command; both
	// enter the responses and the key transformations.
	HostNQN   string
	SubsysNQN string
	// Secret is the host's secret (nvme connect --dhchap-secret).
	Secret Secret
	// CtrlSecret, if not nil, is the controller's secret (nvme connect
	// --dhchap-ctrl-secret): the host then sends a challenge C2 and
	// requires the controller to answer it (bidirectional
	// authentication).
	CtrlSecret *Secret
	// Hashes and DHGroups are what the AUTH_Negotiate offers, in order
	// of preference; nil means everything, in the Linux host's order
	// (AllHashes, AllDHGroups). A Challenge choosing anything else fails
	// with FailureHashUnusable or FailureDHGroupUnusable.
	Hashes   []HashID
	DHGroups []DHGroupID
	// Rand is the source of challenges and DH exponents; nil means
	// crypto/rand.
	Rand io.Reader
	// SeqNums hands out S2 for bidirectional authentication; nil means
	// a counter of this Host's own. Share one among the Hosts of a
	// process to mirror Linux's single counter.
	SeqNums *SeqCounter
}

// Host is the host side of DH-HMAC-CHAP on one queue. It produces the
// messages a host sends with Authentication Send and consumes what it gets
// with Authentication Receive:
//
//	negotiate, _ := h.Start(tid)        // Auth Send
//	reply, err := h.HandleChallenge(m)  // m from Auth Receive; reply: Auth Send
//	last, err := h.HandleSuccess1(m)    // m from Auth Receive; last (Success2), if not nil: Auth Send
//
// Whenever a method returns bytes, send them, even when it also returns an
// error: that is the AUTH_Failure2 telling the controller why the host
// gave up. An error without bytes means there is nothing to send (the
// controller reported the failure with AUTH_Failure1, or the call was out
// of order: ErrState). Returned slices are new and owned by the caller;
// message arguments are not retained.
//
// Re-authentication: Start may be called in any state and begins a new
// exchange on the same Host (Linux re-runs its per-queue context the same
// way); the transaction ID must then differ from the previous one. A new
// Host per exchange works just as well.
//
// A Host is not safe for concurrent use: drive one exchange from one
// goroutine.
type Host struct {
	cfg     HostConfig
	hostKey []byte // Secret.TransformedKey(HostNQN), as Linux caches host_response
	ctrlKey []byte // CtrlSecret.TransformedKey(SubsysNQN), nil if unidirectional
	seq     *SeqCounter

	state   HostState
	tid     uint16
	hash    HashID
	group   DHGroupID
	sessKey []byte
	c2      []byte
	s2      uint32
	err     error
}

// NewHost checks cfg and returns a Host in state HostIdle. It transforms
// the secrets once; cfg's slices are copied.
func NewHost(cfg HostConfig) (*Host, error) {
	if cfg.HostNQN == "" || cfg.SubsysNQN == "" {
		return nil, errors.New("auth: host config needs HostNQN and SubsysNQN")
	}
	if err := cfg.Secret.Validate(); err != nil {
		return nil, fmt.Errorf("auth: host secret: %w", err)
	}
	if cfg.CtrlSecret != nil {
		if err := cfg.CtrlSecret.Validate(); err != nil {
			return nil, fmt.Errorf("auth: controller secret: %w", err)
		}
	}
	if cfg.Hashes == nil {
		cfg.Hashes = AllHashes()
	} else {
		cfg.Hashes = slices.Clone(cfg.Hashes)
	}
	if cfg.DHGroups == nil {
		cfg.DHGroups = AllDHGroups()
	} else {
		cfg.DHGroups = slices.Clone(cfg.DHGroups)
	}
	if len(cfg.Hashes) == 0 || len(cfg.Hashes) > MaxIDs || len(cfg.DHGroups) == 0 || len(cfg.DHGroups) > MaxIDs {
		return nil, fmt.Errorf("auth: host config offers %d hashes and %d DH groups; want 1 to %d of each", len(cfg.Hashes), len(cfg.DHGroups), MaxIDs)
	}
	if err := checkIDs("host config offers", cfg.Hashes, cfg.DHGroups); err != nil {
		return nil, err
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Reader
	}
	h := &Host{cfg: cfg, seq: cfg.SeqNums}
	if h.seq == nil {
		h.seq = new(SeqCounter)
	}
	h.hostKey, h.ctrlKey = transformKeys(cfg.Secret, cfg.CtrlSecret, cfg.HostNQN, cfg.SubsysNQN)
	return h, nil
}

// State returns the current state.
func (h *Host) State() HostState { return h.state }

// Err returns why the exchange failed (an *Error), or nil.
func (h *Host) Err() error { return h.err }

// Hash returns the hash function the controller chose, once the Challenge
// is handled.
func (h *Host) Hash() HashID { return h.hash }

// DHGroup returns the DH group the controller chose, once the Challenge is
// handled.
func (h *Host) DHGroup() DHGroupID { return h.group }

// TransactionID returns the transaction ID of the current exchange.
func (h *Host) TransactionID() uint16 { return h.tid }

// Bidirectional reports whether the host authenticates the controller too
// (HostConfig.CtrlSecret set).
func (h *Host) Bidirectional() bool { return h.ctrlKey != nil }

// Start begins an exchange with transaction ID tid and returns the
// AUTH_Negotiate to send: one DH-HMAC-CHAP descriptor with the configured
// hashes and groups, SC_C 0 (the Linux host's message, 72 bytes). Linux
// takes tid from a per-controller counter incremented for every exchange
// on every queue; the controller echoes it in every message. Start resets
// any previous exchange.
func (h *Host) Start(tid uint16) ([]byte, error) {
	h.reset()
	h.tid = tid
	h.state = HostAwaitChallenge
	m := &Negotiate{TransactionID: tid, SCC: SCCNone, Protocols: []Protocol{{
		AuthID: AuthIDDHCHAP, Hashes: h.cfg.Hashes, DHGroups: h.cfg.DHGroups,
	}}}
	return marshal(m), nil
}

func (h *Host) reset() {
	clear(h.sessKey)
	*h = Host{cfg: h.cfg, hostKey: h.hostKey, ctrlKey: h.ctrlKey, seq: h.seq}
}

// fail ends the exchange with e; with send it returns the AUTH_Failure2.
func (h *Host) fail(e *Error, send bool) ([]byte, error) {
	h.state = HostFailed
	h.err = e
	clear(h.sessKey)
	h.sessKey = nil
	if !send {
		return nil, e
	}
	return marshal(&Failure{ID: MsgFailure2, TransactionID: h.tid, Reason: ReasonFailed, Code: e.Code}), e
}

// receive checks the common part of a received message: a Failure1 ends the
// exchange, anything but want (in this transaction) is a protocol error.
// done is true when the exchange ended and out/err are the result.
func (h *Host) receive(step string, msg []byte, want MessageID) (out []byte, err error, done bool) {
	hd, perr := ParseHeader(msg)
	if perr != nil {
		out, err = h.fail(&Error{Step: step, Code: FailureIncorrectPayload, Err: perr}, true)
		return out, err, true
	}
	if hd.Type == TypeCommon && hd.ID == MsgFailure1 {
		f, perr := ParseFailure(msg)
		if perr != nil {
			out, err = h.fail(&Error{Step: step, Code: FailureIncorrectPayload, Err: perr}, true)
			return out, err, true
		}
		out, err = h.fail(&Error{Step: step, Code: f.Code, Remote: true}, false)
		return out, err, true
	}
	if hd.Type != TypeDHCHAP || hd.ID != want {
		out, err = h.fail(failf(step, FailureIncorrectProtocol, "received %s/%s, want %s", hd.Type, hd.ID, want), true)
		return out, err, true
	}
	if hd.TransactionID != h.tid {
		out, err = h.fail(failf(step, FailureIncorrectProtocol, "transaction ID %d, want %d", hd.TransactionID, h.tid), true)
		return out, err, true
	}
	return nil, nil, false
}

// HandleChallenge consumes what Auth Receive returned after the Negotiate:
// a DH-HMAC-CHAP_Challenge, answered with the DH-HMAC-CHAP_Reply to send
// (response R1, the host's DH value, and C2/S2 if bidirectional), or an
// AUTH_Failure1 (error, nothing to send). A challenge the host cannot use
// (checks as Linux's nvme_auth_process_dhchap_challenge: unknown or
// unoffered hash or hl not its size: FailureHashUnusable; unknown or
// unoffered group, or no DH value with a group: FailureDHGroupUnusable; a
// DH value with the null group or an invalid one: FailureIncorrectPayload)
// yields an AUTH_Failure2 and an error. msg may be longer than the message
// (the whole Auth Receive buffer).
func (h *Host) HandleChallenge(msg []byte) ([]byte, error) {
	const step = "challenge"
	if h.state != HostAwaitChallenge {
		return nil, fmt.Errorf("handling challenge in state %s: %w", h.state, ErrState)
	}
	if out, err, done := h.receive(step, msg, MsgChallenge); done {
		return out, err
	}
	ch, err := ParseChallenge(msg)
	if err != nil {
		return h.fail(&Error{Step: step, Code: FailureIncorrectPayload, Err: err}, true)
	}
	switch {
	case !ch.Hash.Valid():
		return h.fail(failf(step, FailureHashUnusable, "unknown %s", ch.Hash), true)
	case !slices.Contains(h.cfg.Hashes, ch.Hash):
		return h.fail(failf(step, FailureHashUnusable, "controller chose %s, which the host did not offer", ch.Hash), true)
	case len(ch.C) != ch.Hash.Size():
		return h.fail(failf(step, FailureHashUnusable, "challenge of %d bytes for %s (want %d)", len(ch.C), ch.Hash, ch.Hash.Size()), true)
	case !ch.DHGroup.Valid():
		return h.fail(failf(step, FailureDHGroupUnusable, "unknown %s", ch.DHGroup), true)
	case !slices.Contains(h.cfg.DHGroups, ch.DHGroup):
		return h.fail(failf(step, FailureDHGroupUnusable, "controller chose %s, which the host did not offer", ch.DHGroup), true)
	case ch.DHGroup != DHGroupNull && len(ch.DHValue) == 0:
		return h.fail(failf(step, FailureDHGroupUnusable, "no DH value for %s", ch.DHGroup), true)
	case ch.DHGroup == DHGroupNull && len(ch.DHValue) != 0:
		return h.fail(failf(step, FailureIncorrectPayload, "%d-byte DH value with the null DH group", len(ch.DHValue)), true)
	}
	h.hash, h.group = ch.Hash, ch.DHGroup

	var pub []byte
	if ch.DHGroup != DHGroupNull {
		key, err := GenerateDHKey(ch.DHGroup, h.cfg.Rand)
		if err != nil {
			return h.fail(&Error{Step: step, Code: FailureFailed, Err: err}, true)
		}
		h.sessKey, err = key.SharedSecret(ch.DHValue)
		if err != nil {
			return h.fail(&Error{Step: step, Code: FailureIncorrectPayload, Err: fmt.Errorf("controller's DH value: %w", err)}, true)
		}
		pub = key.PublicValue()
	}
	r1 := HostResponse(h.hash, h.hostKey, responseChallenge(h.hash, h.sessKey, ch.C), ch.SeqNum, h.tid, SCCNone, h.cfg.HostNQN, h.cfg.SubsysNQN)
	reply := &Reply{TransactionID: h.tid, Response: r1, DHValue: pub}
	if h.ctrlKey != nil {
		h.c2 = make([]byte, h.hash.Size())
		if _, err := io.ReadFull(h.cfg.Rand, h.c2); err != nil {
			return h.fail(&Error{Step: step, Code: FailureFailed, Err: fmt.Errorf("reading random challenge: %w", err)}, true)
		}
		h.s2 = h.seq.Next()
		reply.C2, reply.SeqNum = h.c2, h.s2
	}
	h.state = HostAwaitSuccess1
	return marshal(reply), nil
}

// HandleSuccess1 consumes what Auth Receive returned after the Reply. For a
// DH-HMAC-CHAP_Success1 with the right hl: unidirectionally the exchange
// is done (nil, nil); bidirectionally the controller's response R2 is
// checked (constant time) and the DH-HMAC-CHAP_Success2 to send is
// returned, or, if R2 is wrong or missing, an AUTH_Failure2 with
// FailureFailed and an error. An AUTH_Failure1 ends the exchange with an
// error and nothing to send.
//
// Linux's host accepts a Success1 without R2 even when it asked for one;
// this Host does not.
func (h *Host) HandleSuccess1(msg []byte) ([]byte, error) {
	const step = "success1"
	if h.state != HostAwaitSuccess1 {
		return nil, fmt.Errorf("handling success1 in state %s: %w", h.state, ErrState)
	}
	if out, err, done := h.receive(step, msg, MsgSuccess1); done {
		return out, err
	}
	s1, err := ParseSuccess1(msg)
	if err != nil {
		return h.fail(&Error{Step: step, Code: FailureIncorrectPayload, Err: err}, true)
	}
	if int(s1.HashLen) != h.hash.Size() {
		return h.fail(failf(step, FailureHashUnusable, "hl %d, want %d for %s", s1.HashLen, h.hash.Size(), h.hash), true)
	}
	if h.ctrlKey == nil {
		h.state = HostAuthenticated
		clear(h.sessKey)
		h.sessKey = nil
		return nil, nil
	}
	if s1.Response == nil {
		return h.fail(failf(step, FailureFailed, "controller sent no response to the host's challenge"), true)
	}
	want := ControllerResponse(h.hash, h.ctrlKey, responseChallenge(h.hash, h.sessKey, h.c2), h.s2, h.tid, h.cfg.HostNQN, h.cfg.SubsysNQN)
	if !hmac.Equal(want, s1.Response) {
		return h.fail(failf(step, FailureFailed, "controller's response does not match: wrong controller secret"), true)
	}
	h.state = HostAuthenticated
	clear(h.sessKey)
	h.sessKey = nil
	return marshal(&Success2{TransactionID: h.tid}), nil
}
