package iser

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
)

// TargetInfo is the target a login reaches, as TargetConfig.Resolve
// describes it: its name and the authentication it demands.
type TargetInfo struct {
	// Name is the target's iSCSI name (empty for a discovery session).
	Name string
	// Alias, if set, is declared as TargetAlias in the first response.
	Alias string
	// PortalGroupTag is declared as TargetPortalGroupTag in the first
	// response of a normal session.
	PortalGroupTag uint16
	// CHAP, if set, requires the initiator to authenticate with CHAP as
	// this user and secret; nil accepts AuthMethod=None.
	CHAP *CHAPSecret
	// MutualCHAP is the identity the target answers a mutual CHAP
	// challenge with. Without it a mutual challenge fails the login.
	MutualCHAP *CHAPSecret
	// RequireMutual fails a CHAP login that does not challenge the
	// target.
	RequireMutual bool
}

// LoginIdentity is what the first Login Request of a connection says about
// the session it wants.
type LoginIdentity struct {
	InitiatorName  string
	InitiatorAlias string
	TargetName     string // empty in a discovery session
	SessionType    SessionType
	ISID           ISID
	CID            uint16
	Transport      Transport
}

// TargetConfig configures the target side of logins. One TargetConfig
// serves any number of connections; it is read, never written, by the
// login engines, so it may be shared once set up.
type TargetConfig struct {
	// Transport is the transport of the connections (decides the iSER
	// keys and digests).
	Transport Transport
	// Settings are what the target accepts; see DefaultSettings.
	Settings Settings
	// Resolve maps a login to a target, called once per connection after
	// the first Login Request. Refuse it by returning a LoginStatus
	// (LoginNotFound, LoginForbidden, LoginSessionTypeNotSupp...) or an
	// error wrapping one; other errors fail the login with
	// LoginTargetError. A discovery session gets a TargetInfo too: its
	// authentication settings apply.
	Resolve func(LoginIdentity) (TargetInfo, error)
	// QueueDepth is the number of commands the command window admits
	// (MaxCmdSN = ExpCmdSN + QueueDepth - 1); 0 means 64.
	QueueDepth uint32
	// Rand supplies CHAP identifiers and challenges; nil means
	// crypto/rand.Reader.
	Rand io.Reader
}

// Validate checks the configuration.
func (c *TargetConfig) Validate() error {
	if c.Resolve == nil {
		return fmt.Errorf("%w: TargetConfig.Resolve is nil", errConfig)
	}
	return c.Settings.validate()
}

// TargetLogin is the target side of one connection's login: a pure state
// machine over Login PDUs. The connection loop reads a Login Request, calls
// Step, sends the Login Response Step wrote, and repeats while Step returns
// LoginInProgress. It does no I/O; it is owned by the connection's goroutine
// and not safe for concurrent use.
type TargetLogin struct {
	cfg   *TargetConfig
	tsih  uint16
	state LoginState
	stage Stage
	npdus int
	neg   negotiator

	isid                   ISID
	itt                    uint32
	cid                    uint16
	cmdSN                  uint32
	versionMax, versionMin uint8
	statSN                 uint32

	text     []byte // continued (C bit) request text
	out      []byte // response text under construction
	id       LoginIdentity
	target   TargetInfo
	resolved bool

	auth      authState
	method    string
	chapID    uint8
	challenge []byte

	declaredMRDSL bool
	proposed      bool
	session       Session
}

// NewTargetLogin starts the login of one connection. tsih is the TSIH the
// session gets if the login succeeds: the caller allocates it (non-zero,
// unique among its sessions). The config must stay unchanged while the
// login runs.
func NewTargetLogin(cfg *TargetConfig, tsih uint16) (*TargetLogin, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if tsih == 0 {
		return nil, fmt.Errorf("%w: TSIH 0 is reserved", errConfig)
	}
	t := &TargetLogin{cfg: cfg, tsih: tsih}
	t.neg = newNegotiator(roleTarget, cfg.Transport, &cfg.Settings)
	return t, nil
}

// State returns the login state.
func (t *TargetLogin) State() LoginState { return t.state }

// Session returns the session once the login is done.
func (t *TargetLogin) Session() (Session, bool) { return t.session, t.state == LoginDone }

// Identity returns what the first Login Request said (valid after the
// first Step): a target uses InitiatorName and ISID for session
// reinstatement.
func (t *TargetLogin) Identity() LoginIdentity { return t.id }

func (t *TargetLogin) queueDepth() uint32 {
	if t.cfg.QueueDepth == 0 {
		return 64
	}
	return t.cfg.QueueDepth
}

func (t *TargetLogin) rand() io.Reader {
	if t.cfg.Rand != nil {
		return t.cfg.Rand
	}
	return rand.Reader
}

// targetStep is what one step decided about the response.
type targetStep struct {
	transit bool
	csg     Stage
	nsg     Stage
}

// Step processes one PDU received during login. req is its BHS (a PDU of
// any opcode: anything but a Login Request fails the login with
// LoginInvalidDuringLogin) and data its data segment. Step writes the Login
// Response header into rsp (at least BHSSize bytes) and its text into
// rspData (DefaultRecvDataSegmentLength bytes suffice) and returns the text
// length. Send the response in every state Step returns; after
// LoginFailed, close the connection. The error explains a failure and
// carries the LoginStatus sent (errors.As).
func (t *TargetLogin) Step(req BHS, data []byte, rsp []byte, rspData []byte) (int, LoginState, error) {
	if t.state != LoginInProgress {
		return 0, t.state, errLoginState
	}
	if len(rsp) < BHSSize || len(req) < BHSSize {
		return 0, t.state, fmt.Errorf("%w: login header buffers", errShortBuffer)
	}
	ts, err := t.step(req, data)
	if err == nil && len(t.out) > len(rspData) {
		err = loginErr(LoginTargetError, fmt.Errorf("%w: response text of %d bytes, buffer %d", errShortBuffer, len(t.out), len(rspData)))
	}
	if err != nil {
		t.state = LoginFailed
		t.encode(rsp, targetStep{csg: t.stage}, statusOf(err), 0)
		return 0, LoginFailed, err
	}
	n := copy(rspData, t.out)
	t.encode(rsp, ts, LoginSuccess, n)
	return n, t.state, nil
}

func (t *TargetLogin) encode(rsp []byte, ts targetStep, st LoginStatus, n int) {
	f := LoginResponseFields{
		Transit: ts.transit, CSG: ts.csg, NSG: ts.nsg,
		VersionMax: loginVersion, VersionActive: loginVersion,
		ISID: t.isid, ITT: t.itt, StatSN: t.statSN,
		ExpCmdSN: t.cmdSN, MaxCmdSN: t.cmdSN + t.queueDepth() - 1, Status: st,
	}
	if !ts.transit {
		f.NSG = 0
	}
	if t.state == LoginDone {
		f.TSIH = t.tsih
	}
	r := LoginResponse(rsp)
	r.Encode(&f)
	BHS(rsp).SetLengths(0, n)
	t.statSN++
}

func (t *TargetLogin) step(reqBHS BHS, data []byte) (targetStep, error) {
	t.out = t.out[:0]
	if t.npdus == 0 {
		t.itt = reqBHS.ITT() // echoed even when the first PDU is refused
	}
	if reqBHS.Opcode() != OpLoginRequest {
		return targetStep{}, loginErr(LoginInvalidDuringLogin, fmt.Errorf("%w: %v", errOpcode, reqBHS.Opcode()))
	}
	req := LoginRequest(reqBHS)
	t.npdus++
	if t.npdus > maxLoginPDUs {
		return targetStep{}, loginErr(LoginTargetError, errLoginPDUs)
	}
	first := t.npdus == 1
	if first {
		t.isid, t.itt, t.cid, t.cmdSN = req.ISID(), BHS(req).ITT(), req.CID(), req.CmdSN()
		t.versionMax, t.versionMin = req[OffsetLoginVersionMax], req[OffsetLoginVersionMin]
		t.statSN = req.ExpStatSN()
		t.stage = req.CSG()
		if t.versionMin > loginVersion {
			return targetStep{}, loginErr(LoginUnsupportedVersion, fmt.Errorf("%w: min %#x", errVersion, t.versionMin))
		}
		if req.TSIH() != 0 {
			// Connections are never added to a session: MaxConnections=1.
			return targetStep{}, loginErr(LoginSessionDoesNotExist,
				fmt.Errorf("iser: login to existing session TSIH %#x", req.TSIH()))
		}
	} else if req.ISID() != t.isid || BHS(req).ITT() != t.itt || req.CID() != t.cid ||
		req[OffsetLoginVersionMax] != t.versionMax || req[OffsetLoginVersionMin] != t.versionMin {
		return targetStep{}, loginErr(LoginInitiatorError, errLoginChanged)
	}
	if n := BHS(req).TotalAHSLength(); n != 0 {
		// RFC 7143 defines no AHS for a Login Request: refused as an
		// initiator error (02/00), as LIO answers malformed requests.
		return targetStep{}, loginErr(LoginInitiatorError, fmt.Errorf("%w: %d bytes of AHS", errLoginAHS, n))
	}
	csg, nsg := req.CSG(), req.NSG()
	if csg != t.stage || csg > StageOperational || (req.Transit() && req.Continue()) ||
		(req.Transit() && (nsg <= csg || nsg == 2)) {
		return targetStep{}, loginErr(LoginInitiatorError,
			fmt.Errorf("%w: T=%v C=%v CSG=%d NSG=%d in stage %d", errLoginFlags, req.Transit(), req.Continue(), csg, nsg, t.stage))
	}
	if len(t.text)+len(data) > MaxNegotiationText {
		return targetStep{}, loginErr(LoginInitiatorError, errTextTooLong)
	}
	if req.Continue() {
		// RFC 7143 section 11.12.2: acknowledge with an empty response.
		t.text = append(t.text, data...)
		return targetStep{csg: t.stage}, nil
	}
	text := data
	if len(t.text) > 0 {
		t.text = append(t.text, data...)
		text = t.text
	}
	kvs, err := ParseText(text)
	t.text = t.text[:0]
	if err != nil {
		return targetStep{}, loginErr(LoginInitiatorError, err)
	}
	var auth map[string]string
	if t.stage == StageSecurity {
		if auth, kvs, err = authKeys(kvs); err != nil {
			return targetStep{}, loginErr(LoginInitiatorError, err)
		}
	}
	stageBit := inSecurity
	if t.stage == StageOperational {
		stageBit = inOperational
	}
	if t.out, err = t.neg.receive(t.out, kvs, stageBit); err != nil {
		return targetStep{}, loginErr(LoginInitiatorError, err)
	}
	if !t.resolved {
		// The first complete request text (after any C-bit
		// continuations) names the initiator and the target.
		if err := t.resolve(kvs); err != nil {
			return targetStep{}, err
		}
		if t.id.SessionType == SessionNormal {
			t.out = t.neg.offer(t.out, kTargetPortalGroupTag, strconv.Itoa(int(t.target.PortalGroupTag)))
		}
		if t.target.Alias != "" {
			t.out = t.neg.offer(t.out, kTargetAlias, t.target.Alias)
		}
	}
	ts := targetStep{csg: t.stage}
	switch t.stage {
	case StageSecurity:
		if err := t.authenticate(auth); err != nil {
			return targetStep{}, err
		}
		if !req.Transit() || !t.authComplete() {
			return ts, nil
		}
		if nsg == StageFullFeature && (len(t.neg.conflicts()) > 0 ||
			(t.cfg.Transport == TransportISER && t.id.SessionType == SessionNormal)) {
			// Skipping the operational stage would leave keys at
			// defaults this target cannot take (or iSER without
			// RDMAExtensions): transit to it instead, as Linux LIO
			// always does.
			nsg = StageOperational
		}
	case StageOperational:
		if !t.authComplete() {
			return targetStep{}, loginErr(LoginAuthFailed,
				fmt.Errorf("%w: operational stage reached without authentication", errCHAP))
		}
		t.declare()
		if !req.Transit() {
			return ts, nil
		}
		if !t.proposed {
			t.proposed = true
			if ids := t.neg.conflicts(); len(ids) > 0 {
				for _, id := range ids {
					t.out = t.neg.offer(t.out, id, t.neg.local[id])
				}
				return ts, nil // the answers come in the next request
			}
		}
	}
	ts.transit, ts.nsg = true, nsg
	t.stage = nsg
	if nsg == StageFullFeature {
		if err := t.finish(); err != nil {
			return targetStep{}, err
		}
	}
	return ts, nil
}

// resolve reads the identity of the first request and asks the config for
// the target.
func (t *TargetLogin) resolve(kvs []KeyValue) error {
	for _, kv := range kvs {
		if kv.Key == "SessionType" && kv.Value != SessionNormal.String() && kv.Value != SessionDiscovery.String() {
			return loginErr(LoginSessionTypeNotSupp, fmt.Errorf("%w: SessionType=%.40q", errBadValue, kv.Value))
		}
	}
	n := &t.neg
	t.id = LoginIdentity{
		InitiatorName:  n.st[kInitiatorName].value,
		InitiatorAlias: n.st[kInitiatorAlias].value,
		TargetName:     n.st[kTargetName].value,
		ISID:           t.isid,
		CID:            t.cid,
		Transport:      t.cfg.Transport,
	}
	if n.discovery {
		t.id.SessionType = SessionDiscovery
		t.id.TargetName = ""
	}
	if t.id.InitiatorName == "" {
		return loginErr(LoginMissingParameter, fmt.Errorf("%w: InitiatorName", errMissingKey))
	}
	if t.id.SessionType == SessionNormal && t.id.TargetName == "" {
		return loginErr(LoginMissingParameter, fmt.Errorf("%w: TargetName", errMissingKey))
	}
	info, err := t.cfg.Resolve(t.id)
	if err != nil {
		var st LoginStatus
		if !errors.As(err, &st) {
			st = LoginTargetError
		}
		return loginErr(st, fmt.Errorf("iser: resolving %q for %q: %w", t.id.TargetName, t.id.InitiatorName, err))
	}
	t.target, t.resolved = info, true
	return nil
}

// authComplete reports whether the login may leave the security stage.
func (t *TargetLogin) authComplete() bool {
	return t.auth == authOK || (t.auth == authStart && t.target.CHAP == nil)
}

// authenticate runs the target side of the security stage for one request.
func (t *TargetLogin) authenticate(auth map[string]string) error {
	failAuth := func(err error) error { return loginErr(LoginAuthFailed, err) }
	if am, ok := auth["AuthMethod"]; ok {
		if t.auth != authStart {
			return loginErr(LoginInitiatorError, fmt.Errorf("%w: AuthMethod", errDuplicateKey))
		}
		offered, ok := listValues(am)
		if !ok {
			return loginErr(LoginInitiatorError, fmt.Errorf("%w: AuthMethod=%.40q", errBadValue, am))
		}
		choice := ""
		switch {
		case t.target.CHAP != nil && slices.Contains(offered, authMethodCHAP):
			choice = authMethodCHAP
		case t.target.CHAP == nil && slices.Contains(offered, ValueNone):
			choice = ValueNone
		}
		if choice == "" {
			return failAuth(fmt.Errorf("%w: offered %s", errAuthMethod, am))
		}
		t.out = AppendKeyValue(t.out, "AuthMethod", choice)
		t.method = choice
		if choice == ValueNone {
			t.auth = authOK
		} else {
			t.auth = authCHAPChosen
		}
	}
	hasCHAP := false
	for k := range auth {
		if k != "AuthMethod" {
			hasCHAP = true
		}
	}
	switch t.auth {
	case authStart, authOK:
		if hasCHAP {
			return failAuth(fmt.Errorf("%w: CHAP keys outside a CHAP exchange", errCHAP))
		}
	case authCHAPChosen:
		a, ok := auth["CHAP_A"]
		if !ok {
			if hasCHAP {
				return failAuth(fmt.Errorf("%w: CHAP_A", errCHAPMissing))
			}
			return nil
		}
		if len(auth) > 1 && !(len(auth) == 2 && auth["AuthMethod"] != "") {
			return failAuth(fmt.Errorf("%w: unexpected keys with CHAP_A", errCHAP))
		}
		if !chapAlgorithms(a) {
			return failAuth(fmt.Errorf("%w: CHAP_A=%.40q has no MD5", errCHAP, a))
		}
		id, c, err := newChallenge(t.rand())
		if err != nil {
			return loginErr(LoginTargetError, err)
		}
		t.chapID, t.challenge = id, c
		t.out = AppendKeyValue(t.out, "CHAP_A", chapMD5)
		t.out = AppendKeyValue(t.out, "CHAP_I", formatCHAPI(id))
		t.out = AppendKeyValue(t.out, "CHAP_C", encodeBinary(c))
		t.auth = authCHAPWaitR
	case authCHAPWaitR:
		name, okN := auth["CHAP_N"]
		resp, okR := auth["CHAP_R"]
		if !okN || !okR {
			return failAuth(fmt.Errorf("%w: CHAP_N and CHAP_R", errCHAPMissing))
		}
		if !chapVerify(*t.target.CHAP, t.chapID, t.challenge, name, resp) {
			return failAuth(fmt.Errorf("%w: wrong CHAP_N or CHAP_R from %q", errCHAP, t.id.InitiatorName))
		}
		ci, okI := auth["CHAP_I"]
		cc, okC := auth["CHAP_C"]
		switch {
		case okI != okC:
			return failAuth(fmt.Errorf("%w: mutual CHAP needs both CHAP_I and CHAP_C", errCHAPMissing))
		case okI:
			if t.target.MutualCHAP == nil {
				return failAuth(fmt.Errorf("%w: mutual CHAP requested, no target credentials", errCHAP))
			}
			id, ok := parseCHAPI(ci)
			if !ok {
				return failAuth(fmt.Errorf("%w: CHAP_I=%.40q", errCHAP, ci))
			}
			c, err := parseChallenge(cc)
			if err != nil {
				return failAuth(err)
			}
			if bytes.Equal(c, t.challenge) {
				return failAuth(errCHAPReused)
			}
			t.out = AppendKeyValue(t.out, "CHAP_N", t.target.MutualCHAP.User)
			t.out = AppendKeyValue(t.out, "CHAP_R", encodeBinary(chapResponse(id, t.target.MutualCHAP.Secret, c)))
		case t.target.RequireMutual:
			return failAuth(fmt.Errorf("%w: target requires mutual CHAP", errCHAPMissing))
		}
		t.auth = authOK
	}
	return nil
}

// declare adds the target's own declarations of the operational stage.
func (t *TargetLogin) declare() {
	if t.declaredMRDSL {
		return
	}
	t.declaredMRDSL = true
	n := &t.neg
	if !n.rdmaMode() {
		t.out = n.offer(t.out, kMaxRecvDataSegmentLength, n.local[kMaxRecvDataSegmentLength])
		return
	}
	if n.st[kMaxOutstandingUnexpectedPDUs].got && n.local[kMaxOutstandingUnexpectedPDUs] != "0" {
		t.out = n.offer(t.out, kMaxOutstandingUnexpectedPDUs, n.local[kMaxOutstandingUnexpectedPDUs])
	}
}

// finish checks the negotiation and records the session.
func (t *TargetLogin) finish() error {
	if err := t.neg.unansweredDefaults(); err != nil {
		return loginErr(LoginInitiatorError, err)
	}
	p := t.neg.params()
	if t.cfg.Transport == TransportISER && p.SessionType == SessionNormal && !p.RDMAExtensions {
		return loginErr(LoginInitiatorError, errRDMAExtensions)
	}
	p.TargetName = t.id.TargetName
	p.TargetAlias = t.target.Alias
	if p.SessionType == SessionNormal {
		p.TargetPortalGroupTag = t.target.PortalGroupTag
	}
	p.AuthMethod = ValueNone
	if t.method == authMethodCHAP {
		p.AuthMethod = authMethodCHAP
	}
	t.state = LoginDone
	t.session = Session{
		Params:    p,
		ISID:      t.isid,
		TSIH:      t.tsih,
		CID:       t.cid,
		Target:    t.target,
		CmdWindow: NewCmdWindow(t.cmdSN, t.queueDepth()),
		StatSN:    t.statSN + 1, // encode sends t.statSN in the final response
		CmdSN:     t.cmdSN,
	}
	return nil
}
