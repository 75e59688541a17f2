package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"slices"
)

// ControllerState is where a Controller is in an exchange. The states
// follow nvmet's dhchap_step: a Send moves to a "pending" state, the next
// Receive produces that message.
type ControllerState uint8

// Controller states.
const (
	// CtrlAwaitNegotiate: nothing received yet (or Reset).
	CtrlAwaitNegotiate ControllerState = iota
	// CtrlChallengePending: the Negotiate is accepted; the next Receive
	// returns the DH-HMAC-CHAP_Challenge.
	CtrlChallengePending
	// CtrlAwaitReply: the Challenge is out; the next Send must carry the
	// DH-HMAC-CHAP_Reply.
	CtrlAwaitReply
	// CtrlSuccess1Pending: the Reply is accepted; the next Receive
	// returns DH-HMAC-CHAP_Success1.
	CtrlSuccess1Pending
	// CtrlAwaitSuccess2: bidirectional; Success1 with R2 is out, the
	// next Send must carry DH-HMAC-CHAP_Success2.
	CtrlAwaitSuccess2
	// CtrlFailure1Pending: the exchange failed; the next Receive returns
	// the AUTH_Failure1 saying why.
	CtrlFailure1Pending
	// CtrlAuthenticated: the exchange succeeded.
	CtrlAuthenticated
	// CtrlFailed: the exchange failed and the host was told (or told
	// us, with AUTH_Failure2). nvmet then tears the controller down
	// (nvmet_ctrl_fatal_error); so should the caller.
	CtrlFailed
)

// String returns the state's name.
func (s ControllerState) String() string {
	switch s {
	case CtrlAwaitNegotiate:
		return "await-negotiate"
	case CtrlChallengePending:
		return "challenge-pending"
	case CtrlAwaitReply:
		return "await-reply"
	case CtrlSuccess1Pending:
		return "success1-pending"
	case CtrlAwaitSuccess2:
		return "await-success2"
	case CtrlFailure1Pending:
		return "failure1-pending"
	case CtrlAuthenticated:
		return "authenticated"
	case CtrlFailed:
		return "failed"
	}
	return fmt.Sprintf("controller state %d", uint8(s))
}

// ControllerConfig is a subsystem's authentication settings for one host
// (nvmet's /sys/kernel/config/nvmet/hosts/<hostnqn>/dhchap_* attributes).
type ControllerConfig struct {
	// HostNQN and SubsysNQN are the NQNs of the Connect command.
	HostNQN   string
	SubsysNQN string
	// Secret is the host's secret (dhchap_key), which the host's
	// response proves.
	Secret Secret
	// CtrlSecret is the controller's own secret (dhchap_ctrl_key), used
	// when the host asks for bidirectional authentication; a host that
	// asks without one being set gets FailureFailed, as from nvmet.
	CtrlSecret *Secret
	// Hashes are the hash functions allowed, in order of preference:
	// the first one the host offers is chosen. nil means SHA-256,
	// SHA-384, SHA-512: with the Linux host's offer that picks SHA-256,
	// nvmet's default dhchap_hash.
	Hashes []HashID
	// DHGroups are the DH groups allowed, in order of preference. nil
	// means AllDHGroups(), null first, which picks the null group from
	// a Linux host, as nvmet's default dhchap_dhgroup does; put
	// DHGroupFFDHE2048 (or larger) first to have a DH exchange.
	DHGroups []DHGroupID
	// Rand is the source of challenges and DH exponents; nil means
	// crypto/rand.
	Rand io.Reader
	// SeqNums hands out S1; nil means a counter of this Controller's
	// own. Linux has one for the whole kernel.
	SeqNums *SeqCounter
}

// Controller is the controller (target) side of DH-HMAC-CHAP on one queue.
// The transport hands it the data of each Authentication Send command
// (Send) and asks it for the data of each Authentication Receive (Receive),
// as nvmet_execute_auth_send/receive do:
//
//	Auth Send    AUTH_Negotiate            -> Send
//	Auth Receive DH-HMAC-CHAP_Challenge    <- Receive
//	Auth Send    DH-HMAC-CHAP_Reply        -> Send
//	Auth Receive DH-HMAC-CHAP_Success1     <- Receive
//	Auth Send    DH-HMAC-CHAP_Success2     -> Send (bidirectional only)
//
// Failures follow nvmet: a bad message or a wrong response makes the next
// Receive return AUTH_Failure1 with the reason; an AUTH_Failure2 from the
// host ends the exchange. In both cases the Auth Send/Receive commands
// themselves complete successfully; only the command fields (SECP, SPSP0/1,
// TL/AL of 0), which the transport checks, fail with Invalid Field. After
// CtrlFailed the caller should tear the controller down as nvmet does;
// gate other commands on Authenticated (Linux answers them with
// NVME_SC_AUTH_REQUIRED).
//
// nvmet abandons an exchange that stalls for KATO (120 s without one)
// seconds; the caller runs that timer and calls Reset.
//
// Re-authentication: a Negotiate received in any state starts a new
// exchange (the host's re-authentication); Authenticated keeps its value
// until that exchange ends. A new Controller per exchange works as well.
//
// A Controller is not safe for concurrent use; the commands of one queue
// are handled in order. Returned slices are new and owned by the caller;
// message arguments are not retained.
type Controller struct {
	cfg     ControllerConfig
	hostKey []byte
	ctrlKey []byte
	seq     *SeqCounter

	state         ControllerState
	authenticated bool
	tid           uint16
	hash          HashID
	group         DHGroupID
	dh            *DHKey
	c1            []byte
	s1            uint32
	challenge     []byte // the Challenge message, built on the first Receive
	sessKey       []byte
	c2            []byte
	s2            uint32
	failure       FailureCode
	err           error
}

// NewController checks cfg and returns a Controller awaiting the
// Negotiate. cfg's slices are copied; the secrets are transformed once.
func NewController(cfg ControllerConfig) (*Controller, error) {
	if cfg.HostNQN == "" || cfg.SubsysNQN == "" {
		return nil, errors.New("auth: controller config needs HostNQN and SubsysNQN")
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
	if len(cfg.Hashes) == 0 || len(cfg.DHGroups) == 0 {
		return nil, errors.New("auth: controller config allows no hash or no DH group")
	}
	if err := checkIDs("controller config allows", cfg.Hashes, cfg.DHGroups); err != nil {
		return nil, err
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Reader
	}
	c := &Controller{cfg: cfg, seq: cfg.SeqNums}
	if c.seq == nil {
		c.seq = new(SeqCounter)
	}
	c.hostKey, c.ctrlKey = transformKeys(cfg.Secret, cfg.CtrlSecret, cfg.HostNQN, cfg.SubsysNQN)
	return c, nil
}

// State returns the current state.
func (c *Controller) State() ControllerState { return c.state }

// Authenticated reports whether the host has authenticated: true from the
// end of a successful exchange until one fails or Reset; it stays true
// while a re-authentication is under way.
func (c *Controller) Authenticated() bool { return c.authenticated }

// Err returns why the last exchange failed (an *Error), or nil.
func (c *Controller) Err() error { return c.err }

// Hash returns the negotiated hash function.
func (c *Controller) Hash() HashID { return c.hash }

// DHGroup returns the negotiated DH group.
func (c *Controller) DHGroup() DHGroupID { return c.group }

// TransactionID returns the transaction ID of the current exchange.
func (c *Controller) TransactionID() uint16 { return c.tid }

// Reset abandons any exchange (nvmet's auth_expired_work: back to awaiting
// the Negotiate) and clears Authenticated.
func (c *Controller) Reset() {
	c.clearExchange()
	c.authenticated = false
	c.state = CtrlAwaitNegotiate
}

func (c *Controller) clearExchange() {
	clear(c.sessKey)
	a := c.authenticated
	*c = Controller{cfg: c.cfg, hostKey: c.hostKey, ctrlKey: c.ctrlKey, seq: c.seq}
	c.authenticated = a
}

// failSend records a failure found in a received message: the next Receive
// returns the Failure1.
func (c *Controller) failSend(e *Error) error {
	clear(c.sessKey)
	c.sessKey, c.dh = nil, nil
	c.state = CtrlFailure1Pending
	c.failure = e.Code
	c.err = e
	c.authenticated = false
	return e
}

// Send consumes the data of an Authentication Send command. It returns
// nil, or the *Error of a failure the message caused: then the next
// Receive returns the AUTH_Failure1 (after a received AUTH_Failure2 the
// state is CtrlFailed and nothing more is sent). Either way the Auth Send
// command completes successfully, as in nvmet.
//
// Checks, with nvmet's reasons: a Negotiate shorter than one descriptor,
// with authid not DH-HMAC-CHAP or over 30 ids: FailureIncorrectPayload; SC_C
// not 0: FailureConcatMismatch; napd not 1 or no allowed hash offered:
// FailureHashUnusable; no allowed group offered: FailureDHGroupUnusable. A
// message not expected now: FailureIncorrectProtocol; a wrong transaction
// ID: FailureIncorrectPayload. A Reply that is malformed or carries a DH
// value that does not fit the group: FailureIncorrectPayload; an invalid
// DH value: FailureDHGroupUnusable; a wrong response (compared in constant
// time) or hl not the hash size: FailureFailed.
func (c *Controller) Send(payload []byte) error {
	hd, err := ParseHeader(payload)
	if err != nil {
		return c.failSend(&Error{Step: "send", Code: FailureIncorrectPayload, Err: err})
	}
	switch {
	case hd.Type == TypeCommon && hd.ID == MsgNegotiate:
		return c.negotiate(payload)
	case hd.Type == TypeCommon && hd.ID == MsgFailure2:
		f, err := ParseFailure(payload)
		if err != nil {
			return c.failSend(&Error{Step: "failure2", Code: FailureIncorrectPayload, Err: err})
		}
		e := &Error{Step: c.stepName(), Code: f.Code, Remote: true}
		c.clearExchange()
		c.state, c.err, c.authenticated = CtrlFailed, e, false
		return e
	}
	var want MessageID
	switch c.state {
	case CtrlAwaitReply:
		want = MsgReply
	case CtrlAwaitSuccess2:
		want = MsgSuccess2
	default:
		return c.failSend(failf(c.stepName(), FailureIncorrectProtocol, "received %s/%s in state %s", hd.Type, hd.ID, c.state))
	}
	if hd.Type != TypeDHCHAP || hd.ID != want {
		return c.failSend(failf(c.stepName(), FailureIncorrectProtocol, "received %s/%s, want %s", hd.Type, hd.ID, want))
	}
	if hd.TransactionID != c.tid {
		return c.failSend(failf(c.stepName(), FailureIncorrectPayload, "transaction ID %d, want %d", hd.TransactionID, c.tid))
	}
	if want == MsgReply {
		return c.reply(payload)
	}
	if _, err := ParseSuccess2(payload); err != nil {
		return c.failSend(&Error{Step: "success2", Code: FailureIncorrectPayload, Err: err})
	}
	c.succeed()
	return nil
}

// succeed ends the exchange successfully, keeping what was negotiated.
func (c *Controller) succeed() {
	hash, group, tid := c.hash, c.group, c.tid
	c.clearExchange()
	c.hash, c.group, c.tid = hash, group, tid
	c.state, c.authenticated = CtrlAuthenticated, true
}

// stepName names the step the state is in, for errors.
func (c *Controller) stepName() string {
	switch c.state {
	case CtrlAwaitNegotiate, CtrlChallengePending:
		return "negotiate"
	case CtrlAwaitReply:
		return "reply"
	case CtrlSuccess1Pending:
		return "success1"
	case CtrlAwaitSuccess2:
		return "success2"
	}
	return c.state.String()
}

// negotiate starts an exchange (nvmet_auth_negotiate).
func (c *Controller) negotiate(b []byte) error {
	const step = "negotiate"
	c.clearExchange()
	c.tid = uint16(b[offTID]) | uint16(b[offTID+1])<<8
	if len(b) < NegotiateHeaderSize+ProtocolDescriptorSize {
		return c.failSend(failf(step, FailureIncorrectPayload, "%d bytes, shorter than a negotiate with one descriptor (%d)", len(b), NegotiateHeaderSize+ProtocolDescriptorSize))
	}
	if b[offSCC] != SCCNone {
		return c.failSend(failf(step, FailureConcatMismatch, "SC_C %#02x: secure channel concatenation is not supported", b[offSCC]))
	}
	if b[offNAPD] != 1 {
		return c.failSend(failf(step, FailureHashUnusable, "%d protocol descriptors, want 1", b[offNAPD]))
	}
	m, err := ParseNegotiate(b)
	if err != nil {
		return c.failSend(&Error{Step: step, Code: FailureIncorrectPayload, Err: err})
	}
	p := m.Protocols[0]
	if p.AuthID != AuthIDDHCHAP {
		return c.failSend(failf(step, FailureIncorrectPayload, "authid %#02x is not DH-HMAC-CHAP", p.AuthID))
	}
	i := slices.IndexFunc(c.cfg.Hashes, func(h HashID) bool { return slices.Contains(p.Hashes, h) })
	if i < 0 {
		return c.failSend(failf(step, FailureHashUnusable, "host offers %v, controller allows %v", p.Hashes, c.cfg.Hashes))
	}
	c.hash = c.cfg.Hashes[i]
	i = slices.IndexFunc(c.cfg.DHGroups, func(g DHGroupID) bool { return slices.Contains(p.DHGroups, g) })
	if i < 0 {
		return c.failSend(failf(step, FailureDHGroupUnusable, "host offers %v, controller allows %v", p.DHGroups, c.cfg.DHGroups))
	}
	c.group = c.cfg.DHGroups[i]
	c.state = CtrlChallengePending
	return nil
}

// buildChallenge makes C1, S1 and the DH key (nvmet_auth_challenge).
func (c *Controller) buildChallenge() error {
	c.c1 = make([]byte, c.hash.Size())
	if _, err := io.ReadFull(c.cfg.Rand, c.c1); err != nil {
		return fmt.Errorf("reading random challenge: %w", err)
	}
	c.s1 = c.seq.Next()
	m := &Challenge{TransactionID: c.tid, Hash: c.hash, DHGroup: c.group, SeqNum: c.s1, C: c.c1}
	if c.group != DHGroupNull {
		key, err := GenerateDHKey(c.group, c.cfg.Rand)
		if err != nil {
			return err
		}
		c.dh = key
		m.DHValue = key.PublicValue()
	}
	c.challenge = marshal(m)
	return nil
}

// reply checks the host's response (nvmet_auth_reply).
func (c *Controller) reply(b []byte) error {
	const step = "reply"
	r, err := ParseReply(b)
	if err != nil {
		return c.failSend(&Error{Step: step, Code: FailureIncorrectPayload, Err: err})
	}
	if len(r.Response) != c.hash.Size() {
		return c.failSend(failf(step, FailureFailed, "response of %d bytes, want %d for %s", len(r.Response), c.hash.Size(), c.hash))
	}
	switch {
	case c.group == DHGroupNull && len(r.DHValue) != 0:
		return c.failSend(failf(step, FailureIncorrectPayload, "%d-byte DH value with the null DH group", len(r.DHValue)))
	case c.group != DHGroupNull && len(r.DHValue) == 0:
		return c.failSend(failf(step, FailureIncorrectPayload, "no DH value for %s", c.group))
	case c.group != DHGroupNull:
		c.sessKey, err = c.dh.SharedSecret(r.DHValue)
		if err != nil {
			return c.failSend(&Error{Step: step, Code: FailureDHGroupUnusable, Err: fmt.Errorf("host's DH value: %w", err)})
		}
	}
	want := HostResponse(c.hash, c.hostKey, responseChallenge(c.hash, c.sessKey, c.c1), c.s1, c.tid, SCCNone, c.cfg.HostNQN, c.cfg.SubsysNQN)
	if !hmac.Equal(want, r.Response) {
		return c.failSend(failf(step, FailureFailed, "host's response does not match: wrong host secret"))
	}
	// nvmet: S2 = 0 means no controller authentication, whatever cvalid
	// says (the C2 would only feed a TLS PSK).
	c.s2 = r.SeqNum
	if r.C2 != nil && c.s2 != 0 {
		c.c2 = slices.Clone(r.C2)
	}
	c.state = CtrlSuccess1Pending
	return nil
}

// Receive returns the data of an Authentication Receive command with
// allocation length al: the Challenge or Success1 the exchange has come
// to, or an AUTH_Failure1. With a Failure1 it also returns the *Error
// (send the bytes anyway). If al cannot hold the message the error wraps
// ErrShortBuffer and the state is unchanged (nvmet fails the command then);
// the transport may zero-pad the result up to al, as nvmet does.
//
// A Receive when no message is due (before the Negotiate, twice in a row,
// after the exchange ended) returns AUTH_Failure1 with FailureFailed and
// fails the exchange, as nvmet's "unhandled step".
func (c *Controller) Receive(al int) ([]byte, error) {
	switch c.state {
	case CtrlChallengePending:
		if c.challenge == nil {
			if err := c.buildChallenge(); err != nil {
				return c.sendFailure1(&Error{Step: "challenge", Code: FailureFailed, Err: err})
			}
		}
		if al < len(c.challenge) {
			return nil, fmt.Errorf("challenge of %d bytes, allocation length %d: %w", len(c.challenge), al, ErrShortBuffer)
		}
		c.state = CtrlAwaitReply
		out := c.challenge
		c.challenge = nil // the caller owns it now
		return out, nil
	case CtrlSuccess1Pending:
		m := &Success1{TransactionID: c.tid, HashLen: uint8(c.hash.Size())}
		if c.c2 != nil {
			if c.ctrlKey == nil {
				return c.sendFailure1(failf("success1", FailureFailed, "host asks for bidirectional authentication; no controller secret is set"))
			}
			m.Response = ControllerResponse(c.hash, c.ctrlKey, responseChallenge(c.hash, c.sessKey, c.c2), c.s2, c.tid, c.cfg.HostNQN, c.cfg.SubsysNQN)
		}
		if al < Success1HeaderSize+len(m.Response) {
			return nil, fmt.Errorf("success1 of %d bytes, allocation length %d: %w", Success1HeaderSize+len(m.Response), al, ErrShortBuffer)
		}
		out := marshal(m)
		if c.c2 != nil {
			c.state = CtrlAwaitSuccess2
			// The session key is no longer needed.
			clear(c.sessKey)
			c.sessKey, c.dh = nil, nil
		} else {
			c.succeed()
		}
		return out, nil
	case CtrlFailure1Pending:
		if al < FailureSize {
			return nil, fmt.Errorf("failure1 of %d bytes, allocation length %d: %w", FailureSize, al, ErrShortBuffer)
		}
		c.state = CtrlFailed
		return marshal(&Failure{ID: MsgFailure1, TransactionID: c.tid, Reason: ReasonFailed, Code: c.failure}), c.err
	}
	if al < FailureSize {
		return nil, fmt.Errorf("failure1 of %d bytes, allocation length %d: %w", FailureSize, al, ErrShortBuffer)
	}
	return c.sendFailure1(failf(c.stepName(), FailureFailed, "authentication receive in state %s", c.state))
}

func (c *Controller) sendFailure1(e *Error) ([]byte, error) {
	c.failSend(e)
	c.state = CtrlFailed
	return marshal(&Failure{ID: MsgFailure1, TransactionID: c.tid, Reason: ReasonFailed, Code: e.Code}), e
}

// Step is Send followed, when a message is due, by Receive(MaxMessageSize):
// it takes the host's message and returns the controller's answer (nil
// after Success2 or Failure2), for transports and tests that pair the two
// commands. The error is Send's, or else Receive's.
func (c *Controller) Step(payload []byte) ([]byte, error) {
	serr := c.Send(payload)
	switch c.state {
	case CtrlChallengePending, CtrlSuccess1Pending, CtrlFailure1Pending:
		out, rerr := c.Receive(MaxMessageSize)
		if serr == nil {
			serr = rerr
		}
		return out, serr
	}
	return nil, serr
}
