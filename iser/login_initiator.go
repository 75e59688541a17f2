package iser

import (
	"crypto/rand"
	"fmt"
	"io"
	"strconv"
)

// InitiatorConfig configures the initiator side of one login.
type InitiatorConfig struct {
	// Transport is the transport of the connection.
	Transport Transport
	// Settings are what the initiator offers; see DefaultSettings.
	Settings       Settings
	InitiatorName  string
	InitiatorAlias string // optional
	// TargetName is required for a normal session and not sent in a
	// discovery session.
	TargetName  string
	SessionType SessionType
	ISID        ISID
	CID         uint16
	// CmdSN is the session's initial CmdSN; ITT the task tag of the login
	// PDUs.
	CmdSN uint32
	ITT   uint32
	// CHAP, if set, makes the initiator start in the security stage and
	// offer AuthMethod=CHAP,None; nil skips the security stage.
	CHAP *CHAPSecret
	// MutualCHAP, if set, is the identity the target must prove (mutual
	// CHAP); AuthMethod=None is then not offered.
	MutualCHAP *CHAPSecret
	// Rand supplies the mutual CHAP identifier and challenge; nil means
	// crypto/rand.Reader.
	Rand io.Reader
}

// InitiatorLogin is the initiator side of one connection's login: a pure
// state machine over Login PDUs. Start writes the first Login Request; the
// connection loop sends it, reads the Login Response, and calls Step, which
// writes the next request, until Step returns LoginDone or LoginFailed. It
// does no I/O, is owned by the connection's goroutine and is not safe for
// concurrent use.
type InitiatorLogin struct {
	cfg       *InitiatorConfig
	state     LoginState
	stage     Stage
	npdus     int
	neg       negotiator
	expStatSN uint32
	text      []byte
	out       []byte

	auth      authState
	method    string
	chapID    uint8
	challenge []byte // our mutual CHAP challenge

	opOffered bool
	session   Session
}

// NewInitiatorLogin checks the configuration and returns the login engine.
func NewInitiatorLogin(cfg *InitiatorConfig) (*InitiatorLogin, error) {
	if err := cfg.Settings.validate(); err != nil {
		return nil, err
	}
	if cfg.InitiatorName == "" {
		return nil, fmt.Errorf("%w: InitiatorName is empty", errConfig)
	}
	if cfg.SessionType == SessionNormal && cfg.TargetName == "" {
		return nil, fmt.Errorf("%w: a normal session needs a TargetName", errConfig)
	}
	if cfg.MutualCHAP != nil && cfg.CHAP == nil {
		return nil, fmt.Errorf("%w: mutual CHAP without CHAP", errConfig)
	}
	l := &InitiatorLogin{cfg: cfg}
	l.neg = newNegotiator(roleInitiator, cfg.Transport, &cfg.Settings)
	l.neg.discovery = cfg.SessionType == SessionDiscovery
	return l, nil
}

// State returns the login state.
func (l *InitiatorLogin) State() LoginState { return l.state }

// Session returns the session once the login is done.
func (l *InitiatorLogin) Session() (Session, bool) { return l.session, l.state == LoginDone }

func (l *InitiatorLogin) rand() io.Reader {
	if l.cfg.Rand != nil {
		return l.cfg.Rand
	}
	return rand.Reader
}

// Start writes the first Login Request into req (BHSSize bytes) and its
// text into reqData, returning the text length.
func (l *InitiatorLogin) Start(req []byte, reqData []byte) (int, error) {
	if l.npdus != 0 {
		return 0, errLoginState
	}
	l.out = l.out[:0]
	n := &l.neg
	l.out = n.offer(l.out, kInitiatorName, l.cfg.InitiatorName)
	if l.cfg.InitiatorAlias != "" {
		l.out = n.offer(l.out, kInitiatorAlias, l.cfg.InitiatorAlias)
	}
	if l.cfg.SessionType == SessionNormal {
		l.out = n.offer(l.out, kTargetName, l.cfg.TargetName)
	}
	l.out = n.offer(l.out, kSessionType, l.cfg.SessionType.String())
	if l.cfg.CHAP != nil {
		l.stage = StageSecurity
		methods := "CHAP,None"
		if l.cfg.MutualCHAP != nil {
			methods = authMethodCHAP
		}
		l.out = AppendKeyValue(l.out, "AuthMethod", methods)
		l.auth = authOffered
		return l.request(req, reqData, true, StageOperational)
	}
	l.stage = StageOperational
	l.auth = authOK
	l.method = ValueNone
	l.offerOperational()
	return l.request(req, reqData, true, StageFullFeature)
}

// offerOperational appends the operational offers of the first
// operational stage request.
func (l *InitiatorLogin) offerOperational() {
	n := &l.neg
	l.opOffered = true
	s := &n.local
	rdma := l.cfg.Transport == TransportISER && l.cfg.SessionType == SessionNormal
	if !rdma {
		l.out = n.offer(l.out, kHeaderDigest, s[kHeaderDigest])
		l.out = n.offer(l.out, kDataDigest, s[kDataDigest])
		l.out = n.offer(l.out, kMaxRecvDataSegmentLength, s[kMaxRecvDataSegmentLength])
	}
	l.out = n.offer(l.out, kDefaultTime2Wait, s[kDefaultTime2Wait])
	l.out = n.offer(l.out, kDefaultTime2Retain, s[kDefaultTime2Retain])
	l.out = n.offer(l.out, kErrorRecoveryLevel, s[kErrorRecoveryLevel])
	if l.cfg.SessionType == SessionDiscovery {
		return
	}
	for _, id := range []keyID{kInitialR2T, kImmediateData, kMaxBurstLength, kFirstBurstLength,
		kMaxOutstandingR2T, kMaxConnections, kDataPDUInOrder, kDataSequenceInOrder} {
		l.out = n.offer(l.out, id, s[id])
	}
	if rdma {
		l.out = n.offer(l.out, kRDMAExtensions, ValueYes)
		l.out = n.offer(l.out, kInitiatorRecvDataSegmentLength, s[kInitiatorRecvDataSegmentLength])
		l.out = n.offer(l.out, kTargetRecvDataSegmentLength, s[kTargetRecvDataSegmentLength])
		if s[kMaxOutstandingUnexpectedPDUs] != "0" {
			l.out = n.offer(l.out, kMaxOutstandingUnexpectedPDUs, s[kMaxOutstandingUnexpectedPDUs])
		}
	}
}

// request encodes a Login Request carrying l.out.
func (l *InitiatorLogin) request(req, reqData []byte, transit bool, nsg Stage) (int, error) {
	if len(req) < BHSSize {
		return 0, fmt.Errorf("%w: login header buffer", errShortBuffer)
	}
	if len(l.out) > len(reqData) || len(l.out) > DefaultRecvDataSegmentLength {
		return 0, fmt.Errorf("%w: request text of %d bytes", errShortBuffer, len(l.out))
	}
	l.npdus++
	if l.npdus > maxLoginPDUs {
		return 0, errLoginPDUs
	}
	if !transit {
		nsg = 0
	}
	LoginRequest(req).Encode(&LoginRequestFields{
		Transit: transit, CSG: l.stage, NSG: nsg, VersionMax: loginVersion, VersionMin: loginVersion,
		ISID: l.cfg.ISID, ITT: l.cfg.ITT, CID: l.cfg.CID, CmdSN: l.cfg.CmdSN, ExpStatSN: l.expStatSN,
	})
	n := copy(reqData, l.out)
	BHS(req).SetLengths(0, n)
	return n, nil
}

// Step processes a Login Response (rsp its BHS, data its text) and, while
// the login goes on, writes the next Login Request into req and reqData,
// returning its text length. The error of a failed login carries the
// target's LoginStatus when the target refused (errors.As).
func (l *InitiatorLogin) Step(rsp BHS, data []byte, req []byte, reqData []byte) (int, LoginState, error) {
	if l.state != LoginInProgress || l.npdus == 0 {
		return 0, l.state, errLoginState
	}
	n, err := l.step(rsp, data, req, reqData)
	if err != nil {
		l.state = LoginFailed
		return 0, LoginFailed, err
	}
	return n, l.state, nil
}

func (l *InitiatorLogin) step(rspBHS BHS, data []byte, req, reqData []byte) (int, error) {
	l.out = l.out[:0]
	if len(rspBHS) < BHSSize || rspBHS.Opcode() != OpLoginResponse {
		return 0, fmt.Errorf("%w: expected a Login Response", errOpcode)
	}
	rsp := LoginResponse(rspBHS)
	if BHS(rsp).ITT() != l.cfg.ITT {
		return 0, fmt.Errorf("%w: response ITT %#x", errLoginChanged, BHS(rsp).ITT())
	}
	if st := rsp.Status(); st != LoginSuccess {
		if st.Class() == 1 {
			return 0, loginErr(st, errRedirect)
		}
		return 0, loginErr(st, fmt.Errorf("iser: target %q refused the login", l.cfg.TargetName))
	}
	if rsp[OffsetLoginVersionMin] != loginVersion {
		return 0, fmt.Errorf("%w: active version %#x", errVersion, rsp[OffsetLoginVersionMin])
	}
	transit, nsg := rsp.Transit(), rsp.NSG()
	if rsp.CSG() != l.stage || (transit && rsp.Continue()) || (transit && (nsg <= l.stage || nsg == 2)) {
		return 0, fmt.Errorf("%w: response T=%v C=%v CSG=%d NSG=%d in stage %d", errLoginFlags,
			transit, rsp.Continue(), rsp.CSG(), nsg, l.stage)
	}
	l.expStatSN = rsp.StatSN() + 1
	if len(l.text)+len(data) > MaxNegotiationText {
		return 0, errTextTooLong
	}
	if rsp.Continue() {
		l.text = append(l.text, data...)
		return l.request(req, reqData, false, 0)
	}
	text := data
	if len(l.text) > 0 {
		l.text = append(l.text, data...)
		text = l.text
	}
	kvs, err := ParseText(text)
	l.text = l.text[:0]
	if err != nil {
		return 0, err
	}
	if l.stage == StageSecurity {
		return l.security(rsp, kvs, req, reqData)
	}
	if l.out, err = l.neg.receive(l.out, kvs, inOperational); err != nil {
		return 0, err
	}
	if transit {
		return 0, l.finish(rsp)
	}
	return l.request(req, reqData, true, StageFullFeature)
}

// security handles a response of the security stage.
func (l *InitiatorLogin) security(rsp LoginResponse, kvs []KeyValue, req, reqData []byte) (int, error) {
	auth, rest, err := authKeys(kvs)
	if err != nil {
		return 0, err
	}
	if l.out, err = l.neg.receive(l.out, rest, inSecurity); err != nil {
		return 0, err
	}
	failAuth := func(err error) error { return loginErr(LoginAuthFailed, err) }
	if am, ok := auth["AuthMethod"]; ok {
		if l.auth != authOffered {
			return 0, fmt.Errorf("%w: AuthMethod answered twice", errAnswer)
		}
		switch {
		case am == authMethodCHAP:
			l.auth, l.method = authCHAPChosen, authMethodCHAP
		case am == ValueNone && l.cfg.MutualCHAP == nil:
			l.auth, l.method = authOK, ValueNone
		default:
			return 0, failAuth(fmt.Errorf("%w: target chose AuthMethod=%.40q", errAuthMethod, am))
		}
	}
	transitNext := false
	switch l.auth {
	case authCHAPChosen:
		l.out = AppendKeyValue(l.out, "CHAP_A", chapMD5)
		l.auth = authCHAPSentA
	case authCHAPSentA:
		a, okA := auth["CHAP_A"]
		i, okI := auth["CHAP_I"]
		c, okC := auth["CHAP_C"]
		if !okA || !okI || !okC {
			if rsp.Transit() {
				return 0, failAuth(fmt.Errorf("%w: CHAP_A, CHAP_I and CHAP_C", errCHAPMissing))
			}
			break
		}
		if a != chapMD5 {
			return 0, failAuth(fmt.Errorf("%w: CHAP_A=%.40q", errCHAP, a))
		}
		id, ok := parseCHAPI(i)
		if !ok {
			return 0, failAuth(fmt.Errorf("%w: CHAP_I=%.40q", errCHAP, i))
		}
		challenge, err := parseChallenge(c)
		if err != nil {
			return 0, failAuth(err)
		}
		l.out = AppendKeyValue(l.out, "CHAP_N", l.cfg.CHAP.User)
		l.out = AppendKeyValue(l.out, "CHAP_R", encodeBinary(chapResponse(id, l.cfg.CHAP.Secret, challenge)))
		if l.cfg.MutualCHAP != nil {
			myID, mine, err := newChallenge(l.rand())
			if err != nil {
				return 0, err
			}
			for string(mine) == string(challenge) { // never hand the target its own challenge back
				if myID, mine, err = newChallenge(l.rand()); err != nil {
					return 0, err
				}
			}
			l.chapID, l.challenge = myID, mine
			l.out = AppendKeyValue(l.out, "CHAP_I", strconv.Itoa(int(myID)))
			l.out = AppendKeyValue(l.out, "CHAP_C", encodeBinary(mine))
		}
		l.auth = authCHAPSentR
		transitNext = true
	case authCHAPSentR:
		name, okN := auth["CHAP_N"]
		resp, okR := auth["CHAP_R"]
		if l.cfg.MutualCHAP != nil {
			if !okN || !okR {
				return 0, failAuth(fmt.Errorf("%w: target sent no CHAP_N and CHAP_R", errCHAPMissing))
			}
			if !chapVerify(*l.cfg.MutualCHAP, l.chapID, l.challenge, name, resp) {
				return 0, failAuth(fmt.Errorf("%w: target failed mutual CHAP", errCHAP))
			}
		} else if okN || okR {
			return 0, failAuth(fmt.Errorf("%w: unsolicited CHAP_N or CHAP_R", errCHAP))
		}
		l.auth = authOK
		transitNext = true
	case authOK:
		if len(auth) > 0 && !(len(auth) == 1 && auth["AuthMethod"] != "") {
			return 0, failAuth(fmt.Errorf("%w: CHAP keys after authentication", errCHAP))
		}
		transitNext = true
	}
	if rsp.Transit() {
		if l.auth != authOK {
			return 0, failAuth(fmt.Errorf("%w: target left the security stage in state %v", errCHAP, l.auth))
		}
		l.stage = rsp.NSG()
		if l.stage == StageFullFeature {
			return 0, l.finish(rsp)
		}
		l.offerOperational()
		return l.request(req, reqData, true, StageFullFeature)
	}
	return l.request(req, reqData, transitNext, StageOperational)
}

// finish checks the final response and records the session.
func (l *InitiatorLogin) finish(rsp LoginResponse) error {
	if err := l.neg.unansweredDefaults(); err != nil {
		return err
	}
	p := l.neg.params()
	if l.cfg.Transport == TransportISER && p.SessionType == SessionNormal && !p.RDMAExtensions {
		return errRDMAExtensions
	}
	p.InitiatorName, p.InitiatorAlias = l.cfg.InitiatorName, l.cfg.InitiatorAlias
	p.TargetName = l.cfg.TargetName
	p.AuthMethod = l.method
	if p.AuthMethod == "" {
		p.AuthMethod = ValueNone
	}
	f := rsp.Fields()
	if f.TSIH == 0 {
		return fmt.Errorf("%w: final Login Response with TSIH 0", errLoginFlags)
	}
	l.state = LoginDone
	l.session = Session{
		Params:    p,
		ISID:      l.cfg.ISID,
		TSIH:      f.TSIH,
		CID:       l.cfg.CID,
		CmdWindow: CmdWindow{ExpCmdSN: f.ExpCmdSN, MaxCmdSN: f.MaxCmdSN},
		StatSN:    l.expStatSN,
		CmdSN:     l.cfg.CmdSN,
	}
	return nil
}
