package target

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/rdmaq"
	"github.com/rdisk/rdisk/scsi"
)

// iSER buffer layout. A receive buffer holds the iSER header, the BHS, an
// AHS for a long CDB and a data segment of up to TargetRecvDataSegmentLength
// (immediate data, login and text requests), as Linux isert sizes them.
const (
	iserHdr      = iser.ISERHeaderSize
	iserRecvData = 8192
	iserRecvLen  = (iserHdr + iser.BHSSize + 256 + iserRecvData + 63) &^ 63
	taskSendLen  = (iserHdr + iser.BHSSize + 2 + 252 + 63) &^ 63 // response with sense
	ctlSendLen   = (iserHdr + iser.BHSSize + iserRecvData + 63) &^ 63
	ctlBufs      = 16
	extraRecvs   = 16
)

// iserConn is an iSER connection on an rdmaq.TargetQueue whose slots are
// the conn's task slots (conn.go allocates them, for both transports): the
// queue's completion goroutine runs the login, then the receive side of
// full feature phase; workers post responses directly.
type iserConn struct {
	t       *Target
	c       *conn // set once the login is done
	req     rdma.ConnRequest
	q       *rdmaq.TargetQueue[struct{}]
	log     *slog.Logger
	sendInv bool

	// Login phase (the queue's goroutine).
	tl       *iser.TargetLogin
	tsih     uint16
	timer    *time.Timer
	timedOut atomic.Bool // the login timer fired
	npdus    int         // Login Requests received
	// refused is the error of a login the engine refused (its response
	// carries the status); failed, when not refused, why the login
	// phase ended otherwise (failErr).
	refused error
	failed  rejectReason
	failErr error
	// rejecting is set (queue goroutine) once a Reject ending the
	// connection is queued: later receives are ignored.
	rejecting bool

	smu      sync.Mutex // StatSN order and posting
	ffc      *conn      // x.c for control PDUs: set once the session is open
	statSN   uint32
	ctlFree  []int
	ctlQ     []*ctl
	ctlClose [ctlBufs]bool
	down     bool
	shutOnce sync.Once
}

// errLoginFailed ends a connection whose login failed, once the Login
// Response carrying the status was sent.
const errLoginFailed = errorString("login failed")

// serveISER runs an iSER connection from its connection request to its
// end, on p, the provider the request came from.
func (t *Target) serveISER(p rdma.Provider, req rdma.ConnRequest) {
	log := t.log.With("peer", req.RemoteAddr().String(), "transport", transportNames[transISER])
	acc, sendInv := iserAccept(req.PrivateData(), !t.cfg.NoSendWithInvalidate)
	if len(req.PrivateData()) == 0 {
		log.Debug("iser: connection request without iSER CM private data: no Send with Invalidate")
	}
	x := &iserConn{t: t, req: req, log: log, sendInv: sendInv}
	// One slot (response buffer, data buffer, work requests) per task
	// slot of the conn.
	ntasks := taskSlots(t.cfg.QueueDepth)
	q, err := rdmaq.NewTargetQueue(rdmaq.TargetConfig{
		Provider: p, Recvs: t.cfg.QueueDepth + extraRecvs, RecvLen: iserRecvLen,
		Slots: ntasks, RespLen: taskSendLen, SendWRs: 2*ntasks + ctlBufs + 8,
		Ctl: ctlBufs, CtlLen: ctlSendLen, MaxData: t.cfg.MaxTransfer,
		SendSGE: maxViews, Implicit: true,
	}, x)
	if err != nil {
		log.Warn("iser: no resources for a connection", "err", err)
		req.Reject(nil)
		return
	}
	x.q = q
	defer q.Close()
	for i := range ctlBufs {
		x.ctlFree = append(x.ctlFree, i)
	}
	x.tsih = t.newTSIH()
	defer t.releaseTSIH(x.tsih)
	if x.tl, err = iser.NewTargetLogin(&t.rdmLogin, x.tsih); err != nil {
		log.Warn("iser: login engine", "err", err)
		req.Reject(nil)
		return
	}
	pd := make([]byte, iser.ISERCMSize)
	acc.Encode(pd)
	// Half the initiator's IRD: rdisk's iWARP provider (and so an rdisk
	// initiator) frees an inbound Read's IRD slot only after the writev
	// of its response returns, so a requester at exactly IRD can overrun
	// it (see the report in the package doc).
	ord := max(1, min(req.ResponderResources()/2, 16))
	ctx, cancel := context.WithTimeout(t.ctx, t.cfg.LoginTimeout)
	err = req.Accept(ctx, q.QP(), rdma.ConnParam{PrivateData: pd, ResponderResources: req.InitiatorDepth(), InitiatorDepth: ord})
	cancel()
	if err != nil {
		log.Info("iser: accept failed", "err", err)
		return
	}
	if !t.track(x) {
		return
	}
	defer t.untrack(x)
	t.accepted(log, transISER)
	// The login must be done in time; full feature phase has no deadline.
	x.timer = time.AfterFunc(t.cfg.LoginTimeout, func() {
		x.timedOut.Store(true)
		x.shut()
	})
	err = q.Run(t.ctx)
	x.timer.Stop()
	x.shut()
	if x.c == nil {
		x.loginEnded(err)
		return
	}
	x.c.stop(err)
}

// iserAccept returns the CM private data an iSER connection request with
// private data pd is accepted with, and whether the target may use Send
// with Invalidate. As Linux isert (isert_set_nego_params), a request
// without private data (RFC 7145 section 5.1 asks for the iSER CM REQ
// header, which some initiators omit) is accepted, but only the flags
// byte of private data that is there tells whether the initiator takes
// Send with Invalidate: without it, the target never uses it. Short or
// padded private data is read by its first byte, as isert does.
func iserAccept(pd []byte, sendInv bool) (iser.ISERCM, bool) {
	cm, ok := iser.ParseISERCM(pd)
	return iser.AcceptFor(cm, ok && sendInv)
}

// loginEnded counts and logs a login phase that opened no session; err is
// what ended the queue.
func (x *iserConn) loginEnded(err error) {
	t := x.t
	id := x.tl.Identity()
	switch {
	case x.refused != nil:
		t.loginRefused(x.log, id, rejectOf(x.refused), x.refused)
	case x.failErr != nil:
		t.loginRefused(x.log, id, x.failed, x.failErr)
	case x.npdus == 0:
		x.log.Debug("iscsi: connection closed before login", "err", err)
	case t.ctx.Err() != nil || t.draining.Load():
		t.loginRefused(x.log, id, rejShuttingDown, err)
	case x.timedOut.Load():
		t.loginRefused(x.log, id, rejTimeout, fmt.Errorf("no login within %v", t.cfg.LoginTimeout))
	default:
		t.loginRefused(x.log, id, rejAborted, err)
	}
}

// Recv implements rdmaq.TargetHandler: a PDU (its receive buffer is
// reposted when Recv returns; immediate data is copied into its task).
func (x *iserConn) Recv(m rdmaq.Msg) error {
	b := m.Head
	if iser.ISEROpcode(b) == iser.ISEROpcodeHello {
		// Linux never sends Hello, and RFC 7145 makes it optional.
		return x.protocolError(errors.New("iSER Hello is not supported"))
	}
	ih, err := iser.ParseISERHeader(b)
	if err != nil {
		return x.protocolError(fmt.Errorf("bad iSER header: %w", err))
	}
	c := x.c
	if c != nil {
		c.received()
	}
	if x.rejecting {
		return nil // a Reject is ending the connection: nothing more is read
	}
	p, err := iser.ParsePDU(b[iserHdr:], iserRecvData)
	if err != nil {
		err = fmt.Errorf("bad PDU: %w", err)
		if c != nil && len(b) >= iserHdr+iser.BHSSize {
			// The BHS is there: Reject it, then close.
			x.rejecting = true
			c.rejectClose(b[iserHdr:iserHdr+iser.BHSSize], iser.RejectProtocolError, err.Error())
			return nil
		}
		return x.protocolError(err)
	}
	if c == nil {
		return x.loginStep(p)
	}
	f := ih.Fields()
	c.dispatch(p, &xferInfo{rsv: f.ReadValid, wsv: f.WriteValid, rstag: f.ReadSTag, wstag: f.WriteSTag, rva: f.ReadBaseOffset, wva: f.WriteBaseOffset})
	return nil
}

// protocolError records that the connection ends for a protocol error of
// the initiator's, and returns err.
func (x *iserConn) protocolError(err error) error {
	if x.c != nil {
		x.c.setEnd(endProtocol)
	} else if x.failErr == nil {
		x.failed, x.failErr = rejBadRequest, err
	}
	return err
}

// loginStep answers one Login Request from a control buffer. Once the
// login is done it opens the session and starts full feature phase; a
// failed login ends the connection after its response was sent.
func (x *iserConn) loginStep(p iser.PDU) error {
	x.npdus++
	if p.BHS.Opcode() != iser.OpLoginRequest {
		return x.protocolError(fmt.Errorf("%v PDU during login", p.BHS.Opcode()))
	}
	x.smu.Lock()
	if len(x.ctlFree) == 0 {
		x.smu.Unlock()
		return x.protocolError(errors.New("a Login Request before the previous Login Response was sent"))
	}
	i := x.ctlFree[len(x.ctlFree)-1]
	x.ctlFree = x.ctlFree[:len(x.ctlFree)-1]
	x.smu.Unlock()
	buf := x.q.CtlBuf(i)
	rsp := buf[iserHdr : iserHdr+iser.BHSSize]
	n, st, lerr := x.tl.Step(p.BHS, p.Data, rsp, buf[iserHdr+iser.BHSSize:])
	iser.ISERHeader(buf).Encode(&iser.ISERHeaderFields{})
	iser.BHS(rsp).SetLengths(0, n)
	x.smu.Lock()
	x.ctlClose[i] = st == iser.LoginFailed
	x.smu.Unlock()
	if st == iser.LoginFailed {
		x.refused = lerr // logged when the connection has ended
	}
	if err := x.q.SendCtl(i, iserHdr+iser.BHSSize+iser.PaddedLength(n), 0); err != nil {
		return err
	}
	if st == iser.LoginDone {
		x.timer.Stop()
		ls, _ := x.tl.Session()
		id := x.tl.Identity()
		x.smu.Lock()
		x.statSN = ls.StatSN
		x.smu.Unlock()
		c := newConn(x.t, ls, x, connLog(x.log, ls, id))
		c.connID = ls.CID
		c.views = x.q.Implicit() != nil
		s, err := x.t.openSession(ls, id, c)
		if err != nil {
			c.pool.Close()
			x.failed, x.failErr = rejTargetError, fmt.Errorf("opening the session: %w", err)
			return err
		}
		c.sess = s
		x.c = c
		// Control PDUs queued meanwhile (a management CloseSession's
		// Async Message) go out now.
		x.smu.Lock()
		x.ffc = c
		x.flushCtlLocked()
		x.smu.Unlock()
		x.t.sessionOpened(c, ls, "send_with_inv", x.sendInv)
		c.startNop()
	}
	return nil
}

// Start implements rdmaq.TargetHandler; iSCSI tasks are admitted by conn,
// not by the queue.
func (x *iserConn) Start(*rdmaq.Slot[struct{}], rdmaq.Msg) error {
	return errors.New("iser: unexpected admission")
}

// Fetched implements rdmaq.TargetHandler: a task's data-out is in.
func (x *iserConn) Fetched(s *rdmaq.Slot[struct{}]) error {
	c := x.c
	tk := &c.tasks[s.Index()]
	c.mu.Lock()
	tk.pending = 0
	tk.got = tk.need
	c.mu.Unlock()
	c.dataReady(tk)
	return nil
}

// Sent implements rdmaq.TargetHandler: a task's response went out.
func (x *iserConn) Sent(s *rdmaq.Slot[struct{}]) { x.c.release(&x.c.tasks[s.Index()]) }

// CtlSent implements rdmaq.TargetHandler: a control buffer is free again;
// a Logout Response, a cold reset's TMF Response or a failed login's
// response ends the connection.
func (x *iserConn) CtlSent(i int) error {
	x.smu.Lock()
	cl := x.ctlClose[i]
	x.ctlClose[i] = false
	x.ctlFree = append(x.ctlFree, i)
	x.flushCtlLocked()
	x.smu.Unlock()
	switch {
	case cl && x.c == nil:
		return errLoginFailed
	case cl:
		x.c.drop("the PDU sent ends the connection (logout, cold reset)")
	}
	return nil
}

// Batch implements rdmaq.Batcher: the commands queued for the receive loop
// (disks that never block) run after each batch of completions.
func (x *iserConn) Batch() error {
	if x.c != nil {
		x.c.runInline()
	}
	return nil
}

// Close implements io.Closer for the target's connection tracking.
func (x *iserConn) Close() error {
	x.shut()
	return nil
}

// buffer implements transport: the task's slot's registered data buffer.
func (x *iserConn) buffer(tk *task, n int) ([]byte, error) {
	return x.q.Slot(tk.idx).EnsureData(n)
}

// fetch implements transport: RDMA Read the data-out after the immediate
// data from the initiator's write buffer.
func (x *iserConn) fetch(tk *task) {
	c := x.c
	if tk.inv == 0 {
		tk.inv = x.invKey(tk)
	}
	if !tk.wsv {
		c.log.Info("iser: write command without a write STag", "itt", tk.itt)
		tk.failed = true
		c.failData(tk)
		return
	}
	n := int(min(tk.need, uint32(len(tk.buf)))) - int(tk.got)
	if n <= 0 {
		tk.got = tk.need
		c.dataReady(tk)
		return
	}
	c.mu.Lock()
	tk.pending = 1
	c.mu.Unlock()
	if err := x.q.Read(x.q.Slot(tk.idx), int(tk.got), n, tk.wva, tk.wstag); err != nil {
		c.drop(err.Error())
	}
}

// invKey is the key a task's response invalidates (Linux isert: the read
// STag, else the write STag), or 0.
func (x *iserConn) invKey(tk *task) uint32 {
	if !x.sendInv {
		return 0
	}
	switch {
	case tk.rsv:
		return tk.rstag
	case tk.wsv:
		return tk.wstag
	}
	return 0
}

// fetchAbort implements transport: an RDMA Read in flight finishes first.
func (x *iserConn) fetchAbort(tk *task) bool { return tk.pending == 0 }

// respond implements transport: RDMA Write the data-in, then Send the
// SCSI Response (with Invalidate when allowed).
func (x *iserConn) respond(tk *task, inline bool) {
	c := x.c
	sc := &tk.cmd
	f, slen := c.responseFields(tk)
	s := x.q.Slot(tk.idx)
	buf := s.Resp()
	iser.ISERHeader(buf).Encode(&iser.ISERHeaderFields{})
	bhs := buf[iserHdr : iserHdr+iser.BHSSize]
	copy(buf[iserHdr+iser.BHSSize:], tk.rsp[:slen])
	n := 0
	if sc.Dir == scsi.DirIn {
		n = min(sc.DataInLen, len(tk.buf))
	}
	if n > 0 && !tk.rsv {
		c.log.Info("iser: read command without a read STag", "itt", tk.itt)
		n = 0
		f.Underflow, f.Overflow, f.ResidualCount = true, false, tk.expLen
	}
	if tk.inv == 0 {
		tk.inv = x.invKey(tk)
	}
	x.smu.Lock()
	c.mu.Lock()
	c.creditLocked(tk)
	c.mu.Unlock()
	iser.SCSIResponse(bhs).Encode(&f)
	c.stamp(bhs, x.statSN)
	x.statSN++
	iser.BHS(bhs).SetLengths(0, slen)
	var err error
	switch {
	case n > 0 && sc.ViewsLen > 0:
		// Straight from the disk's memory; Sent (release) lets it go.
		sgl := tk.vsgl[:sc.ViewsLen]
		for i, b := range sc.Views[:sc.ViewsLen] {
			sgl[i] = rdma.SGE{MR: x.q.Implicit(), Buf: b}
		}
		err = x.q.WriteSGL(s, sgl, tk.rva, tk.rstag)
	case n > 0:
		err = x.q.Write(s, 0, n, tk.rva, tk.rstag)
	}
	if err == nil {
		err = x.q.Respond(s, iserHdr+iser.BHSSize+iser.PaddedLength(slen), tk.inv, 0)
	}
	x.smu.Unlock()
	if err != nil {
		c.release(tk)
		c.drop(err.Error())
	}
}

// send implements transport: control PDUs go out through a small pool of
// send buffers, queued when all are busy.
func (x *iserConn) send(p *ctl) {
	x.smu.Lock()
	x.ctlQ = append(x.ctlQ, p)
	x.flushCtlLocked()
	x.smu.Unlock()
}

func (x *iserConn) flushCtlLocked() {
	c := x.ffc
	if c == nil {
		return // the session is not open yet (x.c may be unset)
	}
	for len(x.ctlQ) > 0 && len(x.ctlFree) > 0 && !x.down {
		p := x.ctlQ[0]
		x.ctlQ[0] = nil
		x.ctlQ = x.ctlQ[1:]
		i := x.ctlFree[len(x.ctlFree)-1]
		x.ctlFree = x.ctlFree[:len(x.ctlFree)-1]
		buf := x.q.CtlBuf(i)
		iser.ISERHeader(buf).Encode(&iser.ISERHeaderFields{})
		bhs := buf[iserHdr : iserHdr+iser.BHSSize]
		copy(bhs, p.hdr[:])
		c.stamp(bhs, x.statSN)
		if p.advance {
			x.statSN++
		}
		dl := copy(buf[iserHdr+iser.BHSSize:], p.data)
		iser.BHS(bhs).SetLengths(0, dl)
		x.ctlClose[i] = p.close
		if err := x.q.SendCtl(i, iserHdr+iser.BHSSize+iser.PaddedLength(dl), 0); err != nil {
			x.down = true
			go c.drop("posting a control PDU: " + err.Error())
			return
		}
	}
}

// shut implements transport.
func (x *iserConn) shut() {
	x.shutOnce.Do(func() {
		x.smu.Lock()
		x.down = true
		x.smu.Unlock()
		x.q.Disconnect()
	})
}

func (x *iserConn) localAddr() net.Addr { return x.req.LocalAddr() }

func (x *iserConn) remoteAddr() net.Addr { return x.req.RemoteAddr() }

func (x *iserConn) name() string { return "iser" }

type errorString string

func (e errorString) Error() string { return string(e) }
