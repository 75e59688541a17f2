package target

import (
	"errors"
	"fmt"
	"time"

	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/auth"
)

// capValue is the controller's CAP property (NVMe over Fabrics §3.5:
// Property Get/Set).
func (c *controller) capValue() nvmeof.CAP {
	mqes := c.port.cfg.MaxQueueSize - 1
	if c.disc {
		mqes = nvmeof.AdminQueueDepth - 1
	}
	return nvmeof.MakeCAP(nvmeof.CAPFields{MQES: uint16(mqes), CQR: true, TO: 15, CSS: nvmeof.CAPCSSNVM})
}

func (q *sq) fabrics(r *request, sqe nvmeof.SQE) {
	switch r.kind {
	case nvmeof.KindConnect:
		q.connect(r, sqe)
	case nvmeof.KindPropertyGet:
		q.controller().propertyGet(r, sqe.Property())
	case nvmeof.KindPropertySet:
		q.controller().propertySet(r, sqe.Property())
	case nvmeof.KindDisconnect:
		// The host disconnects this I/O queue; the response goes first.
		r.status = nvmeof.StatusSuccess
	case nvmeof.KindAuthSend:
		q.authSend(r, sqe.Auth())
	case nvmeof.KindAuthReceive:
		q.authReceive(r, sqe.Auth())
	default:
		r.status, r.errLoc = nvmeof.StatusInvalidOpcode.WithDNR(), nvmeof.OffsetFCType
	}
}

func connectParamErr(r *request, inData bool, off int) {
	r.status = nvmeof.StatusConnectInvalidParameters.WithDNR()
	r.result = uint64(nvmeof.ConnectInvalidParamResult(inData, uint16(off)))
}

// refuseConnect counts and logs a Connect refused for why (the caller sets
// its status); subNQN and hostNQN are "" when its data did not parse.
func (q *sq) refuseConnect(why connectReason, subNQN, hostNQN string, err error) {
	attrs := []any{"reason", connectReasonNames[why], "port", q.port.cfg.ID, "transport", trName(q.tr.trType()), "peer", q.remote,
		"subsystem", subNQN, "host", hostNQN, "qid", q.qid}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	q.t.log.Warn("nvmeof: connect refused", attrs...)
	q.t.stats.connectRejected[why].Add(1) // after the line: a reader of the count finds it
}

// shuttingDown refuses a Connect because the target drains or closes:
// Connect Controller Busy without DNR, so that the host tries again
// (Linux: every reconnect_delay until ctrl_loss_tmo), maybe reaching the
// target restarted.
func (q *sq) shuttingDown(r *request, subNQN, hostNQN string) {
	r.status = nvmeof.StatusConnectControllerBusy
	q.refuseConnect(connShuttingDown, subNQN, hostNQN, nil)
}

// stopping tells whether the target drains or closes.
func (t *Target) stopping() bool { return t.draining.Load() || t.ctx.Err() != nil }

func (q *sq) connect(r *request, sqe nvmeof.SQE) {
	cmd := sqe.Connect()
	if cmd.RecFmt() != 0 {
		r.status, r.errLoc = nvmeof.StatusConnectIncompatibleFormat.WithDNR(), nvmeof.OffsetConnectRecFmt
		q.refuseConnect(connInvalidParameters, "", "", fmt.Errorf("record format %d", cmd.RecFmt()))
		return
	}
	if err := nvmeof.CheckTransferLen(uint32(r.xferLen), nvmeof.ConnectDataSize); err != nil || len(r.xfer) < nvmeof.ConnectDataSize {
		r.status, r.errLoc = nvmeof.StatusSGLInvalidDataLength.WithDNR(), offDPTR
		q.refuseConnect(connInvalidParameters, "", "", fmt.Errorf("%d bytes of data, want %d", r.xferLen, nvmeof.ConnectDataSize))
		return
	}
	d, err := nvmeof.ParseConnectData(r.xfer)
	if err != nil {
		var fe *nvmeof.FieldError
		off := nvmeof.ConnectDataSubNQNOffset
		if errors.As(err, &fe) {
			off = fe.Offset
		}
		connectParamErr(r, true, off)
		q.refuseConnect(connInvalidParameters, "", "", err)
		return
	}
	if cmd.QID() != q.qid {
		connectParamErr(r, false, nvmeof.OffsetConnectQID)
		q.refuseConnect(connInvalidParameters, d.SubNQN, d.HostNQN, fmt.Errorf("QID %d on queue %d", cmd.QID(), q.qid))
		return
	}
	sqsize := int(cmd.SQSize())
	if sqsize == 0 || sqsize+1 > q.depth {
		// The SQ can hold no more commands than receive buffers we posted.
		connectParamErr(r, false, nvmeof.OffsetConnectSQSize)
		q.refuseConnect(connInvalidParameters, d.SubNQN, d.HostNQN, fmt.Errorf("SQSIZE %d, the queue holds %d", sqsize, q.depth))
		return
	}
	t := q.t
	if t.stopping() {
		q.shuttingDown(r, d.SubNQN, d.HostNQN)
		return
	}
	var sub *Subsystem
	if d.SubNQN == nvmeof.DiscoveryNQN {
		sub = t.discSub
	} else {
		sub = q.port.subsystem(d.SubNQN)
	}
	if sub == nil {
		connectParamErr(r, true, nvmeof.ConnectDataSubNQNOffset)
		q.refuseConnect(connUnknownSubsystem, d.SubNQN, d.HostNQN, nil)
		return
	}
	if !sub.hostAllowed(d.HostNQN) {
		r.status = nvmeof.StatusConnectInvalidHost.WithDNR()
		r.result = uint64(nvmeof.ConnectInvalidParamResult(true, nvmeof.ConnectDataHostNQNOffset))
		q.refuseConnect(connHostNotAllowed, d.SubNQN, d.HostNQN, nil)
		return
	}
	q.sqflow = cmd.CAttr()&nvmeof.ConnectAttrDisableSQFlow != 0
	var authreq uint32
	if a := t.hostAuth(d.HostNQN); a != nil && sub != t.discSub {
		ac, err := auth.NewController(auth.ControllerConfig{HostNQN: d.HostNQN, SubsysNQN: sub.cfg.NQN, Secret: a.Key, CtrlSecret: a.CtrlKey,
			Hashes: a.Hashes, DHGroups: a.DHGroups, SeqNums: &t.seq})
		if err != nil {
			r.status = nvmeof.StatusInternal
			q.refuseConnect(connInternal, d.SubNQN, d.HostNQN, fmt.Errorf("DH-HMAC-CHAP settings unusable: %w", err))
			return
		}
		// Every queue authenticates before other commands (nvmet sets ATR
		// on each Connect of a host with a key).
		q.auth = ac
		authreq = nvmeof.ConnectAuthReqATR
	}
	if q.qid == 0 {
		q.connectAdmin(r, cmd, d, sub, sqsize, authreq)
		return
	}
	c := sub.controller(d.CNTLID)
	if c == nil || c.hostNQN != d.HostNQN || c.hostID != d.HostID || c.trType != q.tr.trType() {
		connectParamErr(r, true, nvmeof.ConnectDataCNTLIDOffset)
		q.refuseConnect(connInvalidParameters, d.SubNQN, d.HostNQN, fmt.Errorf("no controller %d of this host on this transport", d.CNTLID))
		return
	}
	c.mu.Lock()
	switch {
	case c.quiesced:
		c.mu.Unlock()
		q.shuttingDown(r, d.SubNQN, d.HostNQN)
		return
	case c.dead || !c.csts.RDY():
		c.mu.Unlock()
		r.status = nvmeof.StatusCommandSequenceError.WithDNR()
		q.refuseConnect(connInvalidState, d.SubNQN, d.HostNQN, fmt.Errorf("controller %d not enabled or torn down", d.CNTLID))
		return
	case int(q.qid) > c.grantedQ || c.queues[q.qid] != nil:
		granted := c.grantedQ
		c.mu.Unlock()
		connectParamErr(r, false, nvmeof.OffsetConnectQID)
		q.refuseConnect(connInvalidParameters, d.SubNQN, d.HostNQN, fmt.Errorf("queue %d connected already or beyond the %d granted", q.qid, granted))
		return
	}
	q.entries = sqsize + 1
	c.queues[q.qid] = q
	c.mu.Unlock()
	q.ctrlMu.Lock()
	q.ctrl = c
	q.ctrlMu.Unlock()
	r.result = uint64(nvmeof.ConnectResult(c.cntlid, authreq))
	t.log.Debug("nvmeof: I/O queue connected", q.logAttrs("sqsize", sqsize)...)
}

// connectAdmin creates the controller of an admin queue's Connect.
func (q *sq) connectAdmin(r *request, cmd nvmeof.ConnectCommand, d nvmeof.ConnectDataFields, sub *Subsystem, sqsize int, authreq uint32) {
	t := q.t
	if d.CNTLID != nvmeof.CNTLIDDynamic {
		connectParamErr(r, true, nvmeof.ConnectDataCNTLIDOffset)
		q.refuseConnect(connInvalidParameters, d.SubNQN, d.HostNQN, fmt.Errorf("static controller ID %d", d.CNTLID))
		return
	}
	q.entries = sqsize + 1
	c := &controller{t: t, sub: sub, port: q.port, disc: sub == t.discSub, trType: q.tr.trType(), hostNQN: d.HostNQN, hostID: d.HostID,
		maxQ: q.port.cfg.MaxIOQueues, queues: map[uint16]*sq{0: q}, wce: true, features: map[uint8]uint32{},
		connected: time.Now(), remote: q.remote}
	id, err := sub.allocController(c)
	if err != nil {
		r.status = nvmeof.StatusConnectControllerBusy.WithDNR()
		q.refuseConnect(connControllerBusy, d.SubNQN, d.HostNQN, err)
		return
	}
	switch {
	case t.stopping():
		// Drain (or Close) started since the check in connect: it lists
		// the controllers after it sets draining, and may have missed
		// this one, registered after it listed them.
		sub.freeController(id, c)
		q.shuttingDown(r, d.SubNQN, d.HostNQN)
		return
	case !c.disc && q.port.subsystem(d.SubNQN) != sub:
		// Unlinked from the port (or removed) since the look-up: the
		// unlinking may have missed this controller, so refuse it
		// (see Port.UnlinkSubsystem).
		sub.freeController(id, c)
		connectParamErr(r, true, nvmeof.ConnectDataSubNQNOffset)
		q.refuseConnect(connUnknownSubsystem, d.SubNQN, d.HostNQN, errors.New("unlinked from the port meanwhile"))
		return
	}
	if c.disc {
		t.mu.Lock()
		t.disc[c] = true
		t.mu.Unlock()
	}
	c.mu.Lock()
	if c.dead {
		// Torn down meanwhile (Target.DeleteController, RemovePort,
		// Close): teardown may have run before the registration
		// above, so undo it.
		c.mu.Unlock()
		if c.disc {
			t.mu.Lock()
			delete(t.disc, c)
			t.mu.Unlock()
		}
		if t.stopping() {
			q.shuttingDown(r, d.SubNQN, d.HostNQN)
			return
		}
		r.status = nvmeof.StatusCommandSequenceError.WithDNR()
		q.refuseConnect(connInvalidState, d.SubNQN, d.HostNQN, errors.New("controller torn down while connecting"))
		return
	}
	c.kato = time.Duration(cmd.KATO()) * time.Millisecond
	c.armKeepAliveLocked()
	c.live = true
	c.mu.Unlock()
	q.ctrlMu.Lock()
	q.ctrl = c
	q.ctrlMu.Unlock()
	r.result = uint64(nvmeof.ConnectResult(id, authreq))
	t.log.Info("nvmeof: controller created", c.logAttrs("hostid", uuidString(d.HostID), "kato", c.kato, "sqsize", sqsize,
		"max_io_queues", c.maxQ)...)
	t.stats.created.Add(1)
}

// authFields checks an Authentication Send/Receive command's fields as
// nvmet does (SECP DH-HMAC-CHAP, SPSP0 and SPSP1 1, a non-zero length
// matching the data pointer's) and returns the length.
func (q *sq) authFields(r *request, cmd nvmeof.AuthCommand) (int, bool) {
	if q.auth == nil {
		// No authentication configured for this host.
		r.status, r.errLoc = nvmeof.StatusInvalidOpcode.WithDNR(), nvmeof.OffsetFCType
		return 0, false
	}
	switch {
	case cmd.SECP() != auth.SECP:
		r.status, r.errLoc = nvmeof.StatusInvalidField.WithDNR(), nvmeof.OffsetAuthSECP
	case cmd.SPSP0() != auth.SPSP0:
		r.status, r.errLoc = nvmeof.StatusInvalidField.WithDNR(), nvmeof.OffsetAuthSPSP0
	case cmd.SPSP1() != auth.SPSP1:
		r.status, r.errLoc = nvmeof.StatusInvalidField.WithDNR(), nvmeof.OffsetAuthSPSP1
	case cmd.Length() == 0 || cmd.Length() > auth.MaxMessageSize:
		r.status, r.errLoc = nvmeof.StatusInvalidField.WithDNR(), nvmeof.OffsetAuthLen
	default:
		n := int(cmd.Length())
		if err := nvmeof.CheckTransferLen(uint32(r.xferLen), uint64(n)); err != nil || len(r.xfer) < n {
			r.status, r.errLoc = nvmeof.StatusSGLInvalidDataLength.WithDNR(), offDPTR
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// authSend hands an Authentication Send's message to the queue's
// DH-HMAC-CHAP state (nvmet_execute_auth_send): the command succeeds
// whatever the message; a failure is the next Receive's Failure1, or was
// the host's Failure2.
func (q *sq) authSend(r *request, cmd nvmeof.AuthCommand) {
	n, ok := q.authFields(r, cmd)
	if !ok {
		return
	}
	before := q.auth.State()
	if err := q.auth.Send(r.xfer[:n]); err != nil {
		q.authFailed(before, err)
	}
	q.authDone(before)
	q.authOK.Store(q.auth.Authenticated())
}

// authReceive returns the queue's next DH-HMAC-CHAP message, zero padded
// to the allocation length (nvmet_execute_auth_receive).
func (q *sq) authReceive(r *request, cmd nvmeof.AuthCommand) {
	n, ok := q.authFields(r, cmd)
	if !ok {
		return
	}
	before := q.auth.State()
	msg, err := q.auth.Receive(n)
	if errors.Is(err, auth.ErrShortBuffer) {
		r.status, r.errLoc = nvmeof.StatusInvalidField.WithDNR(), nvmeof.OffsetAuthLen
		return
	}
	if err != nil {
		q.authFailed(before, err)
	}
	k := copy(r.xfer[:n], msg)
	clear(r.xfer[k:n])
	r.outLen = n
	q.authDone(before)
	q.authOK.Store(q.auth.Authenticated())
}

// authDone logs the end of a successful exchange.
func (q *sq) authDone(before auth.ControllerState) {
	if before != auth.CtrlAuthenticated && q.auth.State() == auth.CtrlAuthenticated {
		log := q.t.log.Info
		if q.qid != 0 {
			log = q.t.log.Debug // one line per controller, not per queue
		}
		log("nvmeof: host authenticated", q.logAttrs("hash", q.auth.Hash(), "dhgroup", q.auth.DHGroup())...)
	}
}

// authFailed counts and logs a failed authentication (once per exchange:
// a failure found in an Authentication Send is returned again by the
// Receive that carries the Failure1), naming the host; its queue then
// answers everything but Fabrics commands with Authentication Required,
// and the host gives up (Linux tears the controller down).
func (q *sq) authFailed(before auth.ControllerState, err error) {
	if before == auth.CtrlFailure1Pending || before == auth.CtrlFailed {
		return
	}
	q.t.log.Warn("nvmeof: DH-HMAC-CHAP authentication failed", q.logAttrs("err", err)...)
	q.t.stats.authFailures.Add(1)
}

func (c *controller) propertyGet(r *request, cmd nvmeof.PropertyCommand) {
	size, err := cmd.Size()
	if err != nil {
		r.fail(asCommandError(err))
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var v uint64
	switch off := cmd.Offset(); {
	case off == nvmeof.PropCAP && size == 8:
		v = uint64(c.capValue())
	case off == nvmeof.PropVS && size == 4:
		v = uint64(nvmeof.MakeVersion(1, 4, 0))
	case off == nvmeof.PropCC && size == 4:
		v = uint64(c.cc)
	case off == nvmeof.PropCSTS && size == 4:
		v = uint64(c.csts)
	default:
		r.status, r.errLoc = nvmeof.StatusInvalidField.WithDNR(), nvmeof.OffsetPropertyOffset
		return
	}
	r.result = v
}

func (c *controller) propertySet(r *request, cmd nvmeof.PropertyCommand) {
	size, err := cmd.Size()
	if err != nil {
		r.fail(asCommandError(err))
		return
	}
	if cmd.Offset() != nvmeof.PropCC || size != 4 {
		r.status, r.errLoc = nvmeof.StatusInvalidField.WithDNR(), nvmeof.OffsetPropertyOffset
		return
	}
	cc := nvmeof.CC(uint32(cmd.Value()))
	c.mu.Lock()
	old := c.cc
	c.cc = cc
	switch {
	case cc.EN() && !old.EN():
		f := cc.Fields()
		// The fabrics entry sizes are fixed; page size 4 KiB; NVM set.
		if f.IOSQES != 6 || f.IOCQES != 4 || f.MPS != 0 || (f.CSS != nvmeof.CCCSSNVM && f.CSS != nvmeof.CCCSSNone) || f.AMS != 0 {
			c.csts |= nvmeof.CSTSFatal
		} else {
			c.csts |= nvmeof.CSTSReady
		}
	case !cc.EN() && old.EN():
		c.csts &^= nvmeof.CSTSReady | nvmeof.CSTSFatal
	}
	if sh := cc.Fields().SHN; sh != nvmeof.CCShutdownNone && old.Fields().SHN == nvmeof.CCShutdownNone {
		// Nothing is cached in the target: flush the disks and report the
		// shutdown complete.
		c.mu.Unlock()
		c.flushAll()
		c.mu.Lock()
		c.csts = c.csts.WithSHST(2)
	} else if sh == nvmeof.CCShutdownNone {
		c.csts = c.csts.WithSHST(0)
	}
	c.mu.Unlock()
}

func asCommandError(err error) *nvmeof.CommandError {
	var ce *nvmeof.CommandError
	if errors.As(err, &ce) {
		return ce
	}
	return &nvmeof.CommandError{Status: nvmeof.StatusInvalidField.WithDNR(), Loc: nvmeof.ParamErrorLocationNone, Err: err}
}

// flushAll flushes every namespace's disk.
func (c *controller) flushAll() {
	if c.disc {
		return
	}
	for _, id := range c.sub.activeNSIDs(0) {
		if n := c.sub.namespace(id); n != nil {
			n.cfg.Disk.Flush()
		}
	}
}
