package initiator

import (
	"context"
	"errors"
	"fmt"
	"github.com/rdisk/rdisk/srp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/scsi"
	"github.com/rdisk/rdisk/scsi/host"
)

// Initiator work request IDs: slot index for command Sends, receive index
// for receives, and kinds in the top byte for the rest.
const (
	iwrTMF    uint64 = 1 << 56 // the task management Send
	iwrIRsp   uint64 = 2 << 56 // CRED_RSP / AER_RSP Send
	iwrLogout uint64 = 3 << 56 // I_LOGOUT Send
	iwrKind   uint64 = 0xff << 56
)

// tagTMF marks task management tags; command tags are
// generation<<32 | channel<<16 | slot, unique in the session (the I_T
// nexus), as the SCSI core and ABORT TASK need.
const tagTMF = uint64(1) << 63

// Initiator slot states (islot.state).
const (
	islotFree uint32 = iota
	islotBusy
	islotInFlight
)

// What an in-flight slot still waits for.
const (
	waitSend uint8 = 1 << iota
	waitResp
)

// Slot kinds.
const (
	kindIO   uint8 = iota // a blockdev.Request
	kindSync              // a goroutine waiting in Exec or TaskManagement
)

// islot is one outstanding-request context of an initiator channel.
type islot struct {
	ch    *ichannel
	idx   int
	gen   uint32
	tag   uint64
	state atomic.Uint32
	// issued is when the IU was posted (UnixNano), 0 when idle.
	issued atomic.Int64

	kind    uint8
	pending uint8
	lun     uint64
	retries int
	name    string
	iu      []byte // the IU buffer (registered)
	table   []byte // the external table / parameter area (remote-readable)
	tableOf int    // offset of table in ch.remoteMR
	sge     [2]rdma.SGE
	wr      rdma.SendWR
	fmr     rdma.FastRegMR
	mapped  bool
	tmp     rdma.MR // plain memory registered for one Exec
	req     *blockdev.Request

	// Outcome, set by the completion goroutine.
	status    uint8
	flags     uint8
	outResid  uint32
	inResid   uint32
	sense     [scsi.SenseBufferLen]byte
	senseLen  int
	respCode  int // task management RSP_CODE, -1 without response data
	err       error
	completed bool // guarded by ch.mu for kindSync
	orphan    bool // guarded by ch.mu: the waiter gave up
	done      chan struct{}
}

// ichannel is one RDMA channel of an initiator session. Submitters take a
// slot and a credit under mu and post their IU; one goroutine (run) polls
// the CQ, matches responses to slots by tag, and answers the target's
// credit and event requests.
type ichannel struct {
	s   *Session
	idx int

	qp rdma.QP
	cq rdma.CQ

	depth    int // command slots
	iuStride int
	iuBuf    []byte
	iuMR     rdma.MR
	remote   []byte // per-slot remote-readable areas (tables, UNMAP parameters)
	remoteMR rdma.MR
	rxLen    int
	nrx      int
	rxBuf    []byte
	rxMR     rdma.MR
	irsp     []byte // two 16-byte initiator response buffers
	irspMR   rdma.MR
	irspTurn int
	slots    []islot
	tmf      islot
	tmfMu    sync.Mutex
	tmfSeq   uint64

	immOff int // negotiated immediate data offset, 0 without
	maxImm int
	tiLen  int

	rxWR  rdma.RecvWR
	rxSGE [1]rdma.SGE
	wcs   []rdma.WC

	mu        sync.Mutex
	reqLim    int32
	freeSlots []int
	wake      chan struct{}

	ctx      context.Context
	cancel   context.CancelFunc
	exited   chan struct{}
	started  bool
	deadOnce sync.Once
	dead     chan struct{}
	reqErr   error
	logoutWR chan struct{}
	aerCount atomic.Uint64
	credReqs atomic.Uint64
}

// connLost wraps the reason a channel failed; it matches blockdev.ErrClosed.
type connLost struct{ err error }

func (e *connLost) Error() string        { return "srp: channel failed: " + e.err.Error() }
func (e *connLost) Unwrap() error        { return e.err }
func (e *connLost) Is(target error) bool { return target == blockdev.ErrClosed }

// ErrAborted is the error of a command that a task management function
// aborted (the target sends no response for it).
const ErrAborted = errorString("srp: command aborted by task management")

// LogoutError is the error of requests on a channel the target logged out
// with SRP_T_LOGOUT. It matches blockdev.ErrClosed.
type LogoutError struct{ Reason srp.TLogoutReason }

// Error gives the logout reason.
func (e *LogoutError) Error() string {
	return "srp: target logged the channel out: " + e.Reason.String()
}

// Is matches blockdev.ErrClosed.
func (e *LogoutError) Is(target error) bool { return target == blockdev.ErrClosed }

// fail moves the channel to the dead state: in-flight requests complete
// with err (the first reason wins).
func (ch *ichannel) fail(err error) {
	ch.deadOnce.Do(func() {
		var le *LogoutError
		switch {
		case errors.Is(err, blockdev.ErrClosed) && !errors.As(err, &le):
			ch.reqErr = err
		case errors.As(err, &le):
			ch.reqErr = err
		default:
			ch.reqErr = &connLost{err: err}
		}
		close(ch.dead)
		if ch.qp != nil {
			ch.qp.Disconnect()
		}
		ch.cancel()
	})
}

func (ch *ichannel) failedErr() error {
	<-ch.dead
	return ch.reqErr
}

func (ch *ichannel) signal() {
	select {
	case ch.wake <- struct{}{}:
	default:
	}
}

// acquire takes a slot and a credit. Commands keep one credit in reserve
// for task management, as Linux ib_srp does. It blocks until both are
// available, the channel dies or ctx (which may be nil) is done.
func (ch *ichannel) acquire(ctx context.Context) (*islot, error) {
	var cdone <-chan struct{}
	if ctx != nil {
		cdone = ctx.Done()
	}
	for {
		ch.mu.Lock()
		select {
		case <-ch.dead:
			ch.mu.Unlock()
			return nil, ch.failedErr()
		default:
		}
		if ch.reqLim > 1 && len(ch.freeSlots) > 0 {
			ch.reqLim--
			k := len(ch.freeSlots)
			sl := &ch.slots[ch.freeSlots[k-1]]
			ch.freeSlots = ch.freeSlots[:k-1]
			more := ch.reqLim > 1 && len(ch.freeSlots) > 0
			ch.mu.Unlock()
			if more {
				ch.signal()
			}
			sl.state.Store(islotBusy)
			sl.gen++
			sl.tag = uint64(sl.gen)<<32 | uint64(ch.idx)<<16 | uint64(sl.idx)
			sl.retries, sl.err, sl.completed, sl.orphan = 0, nil, false, false
			return sl, nil
		}
		ch.mu.Unlock()
		select {
		case <-ch.wake:
		case <-ch.dead:
		case <-cdone:
			return nil, ctx.Err()
		}
	}
}

// acquireTMF takes a credit for the task management slot (tmfMu held).
func (ch *ichannel) acquireTMF(ctx context.Context) error {
	for {
		ch.mu.Lock()
		select {
		case <-ch.dead:
			ch.mu.Unlock()
			return ch.failedErr()
		default:
		}
		if ch.reqLim > 0 {
			ch.reqLim--
			ch.mu.Unlock()
			return nil
		}
		ch.mu.Unlock()
		select {
		case <-ch.wake:
		case <-ch.dead:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// release returns a slot (and, if it was never sent, its credit).
func (ch *ichannel) release(sl *islot, credit bool) {
	sl.req = nil
	sl.issued.Store(0)
	sl.state.Store(islotFree)
	ch.mu.Lock()
	if credit {
		ch.reqLim++
	}
	if sl != &ch.tmf {
		ch.freeSlots = append(ch.freeSlots, sl.idx)
	}
	ch.mu.Unlock()
	ch.signal()
}

// addCredits applies a request limit delta from the target.
func (ch *ichannel) addCredits(d int32) {
	if d == 0 {
		return
	}
	ch.mu.Lock()
	ch.reqLim += d
	ch.mu.Unlock()
	ch.signal()
}

// credits returns the current request limit.
func (ch *ichannel) credits() int {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return int(ch.reqLim)
}

// post sends a prepared slot's IU. On error the slot is the caller's
// again, unless the channel died meanwhile and completed it.
func (ch *ichannel) post(sl *islot) error {
	sl.pending = waitSend | waitResp
	sl.issued.Store(time.Now().UnixNano())
	sl.state.Store(islotInFlight)
	if err := ch.qp.PostSend(&sl.wr); err != nil {
		if sl.state.CompareAndSwap(islotInFlight, islotBusy) {
			sl.issued.Store(0)
			if ch.qp.State() >= rdma.QPError {
				// The connection is going down: let the completion
				// goroutine record why (an SRP_T_LOGOUT received before
				// the disconnect, for example) before answering.
				select {
				case <-ch.dead:
				case <-time.After(time.Second):
					ch.fail(fmt.Errorf("srp: posting an IU: %w", err))
				}
				return ch.failedErr()
			}
			select {
			case <-ch.dead:
				return ch.failedErr()
			default:
			}
			return fmt.Errorf("srp: posting an IU: %w", err)
		}
		return nil
	}
	return nil
}

func (ch *ichannel) postRecv(i int) error {
	ch.rxSGE[0] = rdma.SGE{MR: ch.rxMR, Offset: i * ch.rxLen, Length: ch.rxLen}
	ch.rxWR.ID, ch.rxWR.SGL = uint64(i), ch.rxSGE[:]
	return ch.qp.PostRecv(&ch.rxWR)
}

// run is the completion goroutine.
func (ch *ichannel) run() {
	defer close(ch.exited)
	for {
		n := ch.cq.Poll(ch.wcs)
		if n == 0 {
			if err := ch.cq.Wait(ch.ctx); err != nil {
				ch.fail(blockdev.ErrClosed)
				ch.sweep()
				return
			}
			continue
		}
		for i := range ch.wcs[:n] {
			if !ch.handle(&ch.wcs[i]) {
				ch.sweep()
				return
			}
		}
	}
}

func (ch *ichannel) transportErr(wc *rdma.WC) error {
	if err := ch.qp.Err(); err != nil {
		return err
	}
	return wc.Err()
}

// handle processes one completion; false means the channel died.
func (ch *ichannel) handle(wc *rdma.WC) bool {
	if wc.Status != rdma.StatusSuccess {
		ch.fail(ch.transportErr(wc))
		return false
	}
	if wc.Op == rdma.OpRecv {
		return ch.onRecv(int(wc.ID), wc.ByteLen)
	}
	switch wc.ID & iwrKind {
	case iwrIRsp:
		return true
	case iwrLogout:
		select {
		case ch.logoutWR <- struct{}{}:
		default:
		}
		return true
	case iwrTMF:
		ch.sent(&ch.tmf)
		return true
	}
	if int(wc.ID) < len(ch.slots) {
		ch.sent(&ch.slots[wc.ID])
	}
	return true
}

// sent records the send completion of a slot's IU. The pending bits of a
// slot change under mu, so that a local abort (TaskManagement) and the
// completion goroutine agree on who finishes it.
func (ch *ichannel) sent(sl *islot) {
	ch.mu.Lock()
	if sl.state.Load() != islotInFlight || sl.pending&waitSend == 0 {
		ch.mu.Unlock()
		return
	}
	sl.pending &^= waitSend
	done := sl.pending == 0
	ch.mu.Unlock()
	if done {
		ch.finish(sl)
	}
}

// abortLocal completes in-flight commands that a successful task
// management function aborted: the target sends no response for them.
// match selects them; only commands posted before the function (issued
// before sentAt) are affected.
func (ch *ichannel) abortLocal(match func(sl *islot) bool, sentAt int64) int {
	var done []*islot
	ch.mu.Lock()
	for i := range ch.slots {
		sl := &ch.slots[i]
		t := sl.issued.Load()
		if sl.state.Load() != islotInFlight || sl.pending&waitResp == 0 || t == 0 || t > sentAt || !match(sl) {
			continue
		}
		sl.err = ErrAborted
		sl.pending &^= waitResp
		if sl.pending == 0 {
			done = append(done, sl)
		}
	}
	ch.mu.Unlock()
	for _, sl := range done {
		ch.finish(sl)
	}
	return len(done)
}

func (ch *ichannel) onRecv(i, n int) bool {
	b := ch.rxBuf[i*ch.rxLen : i*ch.rxLen+n]
	if n < 1 {
		ch.fail(fmt.Errorf("srp: empty IU from the target"))
		return false
	}
	op := srp.Opcode(b[0])
	var err error
	switch op {
	case srp.OpRsp:
		err = ch.onRsp(b)
	case srp.OpCredReq:
		var f srp.CredReqFields
		if f, err = srp.ParseCredReq(b); err == nil {
			ch.credReqs.Add(1)
			ch.addCredits(f.ReqLimDelta)
			err = ch.answer(srp.OpCredRsp, f.Tag)
		}
	case srp.OpAERReq:
		var f srp.AERReqFields
		var sense []byte
		if f, sense, err = srp.ParseAERReq(b); err == nil {
			ch.aerCount.Add(1)
			ch.addCredits(f.ReqLimDelta)
			if h := ch.s.cfg.OnAER; h != nil {
				lun, _ := scsi.DecodeLUN(f.LUN)
				h(lun, append([]byte(nil), sense...))
			}
			err = ch.answer(srp.OpAERRsp, f.Tag)
		}
	case srp.OpTLogout:
		f, perr := srp.ParseTLogout(b)
		if perr != nil {
			err = perr
			break
		}
		ch.s.log.Info("srp: target logout", "channel", ch.idx, "reason", f.Reason.String())
		ch.fail(&LogoutError{Reason: f.Reason})
		return false
	default:
		err = fmt.Errorf("srp: unexpected %s from the target", op)
	}
	if err == nil {
		err = ch.postRecv(i)
	}
	if errors.Is(err, rdma.ErrQPState) {
		// The connection already failed: keep draining the CQ, whose
		// remaining completions (a target logout that arrived before
		// the close, then the flushed ones) say why.
		return true
	}
	if err != nil {
		ch.fail(err)
		return false
	}
	return true
}

// answer sends an SRP_CRED_RSP or SRP_AER_RSP. Initiator responses use no
// credit; the target has at most one request outstanding, so two buffers
// used in turn are enough.
func (ch *ichannel) answer(op srp.Opcode, tag uint64) error {
	off := ch.irspTurn * srp.CredRspSize
	ch.irspTurn ^= 1
	srp.EncodeInitiatorRsp(ch.irsp[off:off+srp.CredRspSize], op, tag)
	sge := [1]rdma.SGE{{MR: ch.irspMR, Offset: off, Length: srp.CredRspSize}}
	wr := rdma.SendWR{ID: iwrIRsp, Op: rdma.OpSend, SGL: sge[:]}
	return ch.qp.PostSend(&wr)
}

func (ch *ichannel) onRsp(b []byte) error {
	r, err := srp.ParseRsp(b)
	if err != nil {
		return err
	}
	f := r.Fields()
	var sl *islot
	if f.Tag&tagTMF != 0 {
		sl = &ch.tmf
	} else if idx := int(uint16(f.Tag)); idx < len(ch.slots) && int(uint16(f.Tag>>16)) == ch.idx {
		sl = &ch.slots[idx]
	}
	if sl == nil {
		// A response for no tag of ours: keep the credit it returns.
		ch.s.log.Debug("srp: response for a tag not outstanding", "tag", f.Tag)
		ch.addCredits(f.ReqLimDelta)
		return nil
	}
	ch.mu.Lock()
	if sl.state.Load() != islotInFlight || sl.pending&waitResp == 0 || sl.tag != f.Tag {
		ch.reqLim += f.ReqLimDelta
		ch.mu.Unlock()
		ch.signal()
		return nil
	}
	sl.status, sl.flags, sl.outResid, sl.inResid = f.Status, f.Flags, f.DataOutResid, f.DataInResid
	sl.senseLen = copy(sl.sense[:], r.Sense())
	sl.respCode = -1
	if rd := r.RespData(); len(rd) >= 4 {
		sl.respCode = int(rd[3])
	}
	if sl.kind == kindIO && sl.retryable() && ch.reqLim+f.ReqLimDelta > 1 {
		// A unit attention, BUSY or TASK SET FULL: send the same IU again
		// with a credit, keeping one in reserve as for a new command.
		ch.reqLim += f.ReqLimDelta - 1
		sl.retries++
		sl.pending = waitSend | waitResp
		ch.mu.Unlock()
		return ch.qp.PostSend(&sl.wr)
	}
	ch.reqLim += f.ReqLimDelta
	sl.pending &^= waitResp
	done := sl.pending == 0
	ch.mu.Unlock()
	ch.signal()
	if done {
		ch.finish(sl)
	}
	return nil
}

// retryable tells whether a completed I/O should be sent again (the SCSI
// host layer's policy).
func (sl *islot) retryable() bool {
	return host.Retry(scsi.Status(sl.status), sl.sense[:sl.senseLen], sl.retries)
}

// finish completes an in-flight slot (the completion goroutine owns it).
func (ch *ichannel) finish(sl *islot) {
	sl.issued.Store(0)
	if sl.mapped {
		sl.fmr.Invalidate()
		sl.mapped = false
	}
	switch sl.kind {
	case kindIO:
		r := sl.req
		r.Err = sl.result()
		r.Completed = time.Now()
		ch.release(sl, false)
		blockdev.Complete(r)
	case kindSync:
		ch.mu.Lock()
		sl.completed = true
		orphan := sl.orphan
		ch.mu.Unlock()
		if orphan {
			ch.dropTmp(sl)
			ch.release(sl, false)
			return
		}
		sl.state.Store(islotBusy)
		sl.done <- struct{}{}
	}
}

func (ch *ichannel) dropTmp(sl *islot) {
	if sl.tmp != nil {
		sl.tmp.Deregister()
		sl.tmp = nil
	}
}

// result turns a slot's outcome into an error.
func (sl *islot) result() error {
	if sl.err != nil {
		return sl.err
	}
	st := scsi.Status(sl.status)
	if st == scsi.StatusGood || st == scsi.StatusConditionMet {
		return nil
	}
	return newSCSIError(sl.name, st, sl.sense[:sl.senseLen])
}

// sweep completes every in-flight slot of a dead channel with its error.
func (ch *ichannel) sweep() {
	err := ch.failedErr()
	claim := func(sl *islot) {
		ch.mu.Lock()
		ok := sl.state.Load() == islotInFlight && sl.pending != 0
		if ok {
			if sl.err == nil {
				sl.err = err
			}
			sl.pending = 0
		}
		ch.mu.Unlock()
		if ok {
			ch.finish(sl)
		}
	}
	claim(&ch.tmf)
	for i := range ch.slots {
		claim(&ch.slots[i])
	}
}

// overdue returns a slot in flight for longer than d, if any.
func (ch *ichannel) overdue(now int64, d time.Duration) *islot {
	if t := ch.tmf.issued.Load(); t != 0 && now-t > int64(d) {
		return &ch.tmf
	}
	for i := range ch.slots {
		if t := ch.slots[i].issued.Load(); t != 0 && now-t > int64(d) {
			return &ch.slots[i]
		}
	}
	return nil
}

// logout sends SRP_I_LOGOUT and waits (briefly) for it to leave.
func (ch *ichannel) logout() {
	select {
	case <-ch.dead:
		return
	default:
	}
	b := ch.irsp[2*srp.CredRspSize : 2*srp.CredRspSize+srp.ILogoutSize]
	srp.EncodeILogout(b, 0)
	sge := [1]rdma.SGE{{MR: ch.irspMR, Offset: 2 * srp.CredRspSize, Length: srp.ILogoutSize}}
	wr := rdma.SendWR{ID: iwrLogout, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: sge[:]}
	if err := ch.qp.PostSend(&wr); err != nil {
		return
	}
	select {
	case <-ch.logoutWR:
	case <-ch.dead:
	case <-time.After(time.Second):
	}
}

// close logs the channel out, fails what is in flight and frees it.
func (ch *ichannel) close() {
	if ch.started {
		ch.logout()
	}
	ch.fail(blockdev.ErrClosed)
	if ch.qp != nil {
		ch.qp.Close()
	}
	ch.cancel()
	if ch.started {
		<-ch.exited
	} else {
		ch.sweep()
	}
	ch.releaseResources()
}

func (ch *ichannel) releaseResources() {
	for i := range ch.slots {
		if f := ch.slots[i].fmr; f != nil {
			f.Close()
		}
	}
	for _, mr := range []rdma.MR{ch.iuMR, ch.remoteMR, ch.rxMR, ch.irspMR} {
		if mr != nil {
			mr.Deregister()
		}
	}
	if ch.qp != nil {
		ch.qp.Close()
	}
	if ch.cq != nil {
		ch.cq.Close()
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }
