package initiator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/rdmaq"
	"github.com/rdisk/rdisk/scsi"
	"github.com/rdisk/rdisk/scsi/host"
	"github.com/rdisk/rdisk/srp"
)

// tagTMF marks task management tags; command tags are
// generation<<32 | channel<<16 | slot, unique in the session (the I_T
// nexus), as the SCSI core and ABORT TASK need.
const tagTMF = uint64(1) << 63

// Slot pools of a channel's queue: the command slots, and the one task
// management slot, which never waits behind commands.
const (
	poolCmd = 0
	poolTMF = 1
)

// Control buffers: two for SRP_CRED_RSP / SRP_AER_RSP used in turn (the
// target has at most one request outstanding), one for SRP_I_LOGOUT.
const (
	ctlAnswer = 0 // and 1
	ctlLogout = 2
	ctlLen    = max(srp.CredRspSize, srp.AERRspSize, srp.ILogoutSize)
)

// Slot kinds.
const (
	kindIO   uint8 = iota // a blockdev.Request
	kindSync              // a goroutine waiting in Exec or TaskManagement
)

// request is the SRP state of one initiator slot.
type request struct {
	gen     uint32
	tag     uint64
	kind    uint8
	lun     uint64
	retries int
	name    string
	table   []byte // the slot's remote-readable area (tables, UNMAP parameters)
	tableOf int    // its offset in ichannel.remoteMR
	tmp     rdma.MR
	req     *blockdev.Request
	dev     *Device // the Device of a kindIO request
	// refresh: the request reported CAPACITY DATA HAS CHANGED; its slot
	// completes without it, and it is sent again after the capacity is
	// re-read (Device.refreshAndResubmit).
	refresh bool

	// Outcome, set by the completion goroutine.
	status    uint8
	flags     uint8
	outResid  uint32
	inResid   uint32
	sense     [scsi.SenseBufferLen]byte
	senseLen  int
	respCode  int  // task management RSP_CODE, -1 without response data
	completed bool // guarded by ichannel.mu for kindSync
	orphan    bool // guarded by ichannel.mu: the waiter gave up
	done      chan struct{}
}

// islot is a request slot of a channel.
type islot = rdmaq.HostSlot[request]

// ichannel is one RDMA channel of an initiator session, on an
// rdmaq.HostQueue whose credits are the SRP request limit. Submitters take
// a slot and a credit and post their IU; the queue's completion goroutine
// matches responses to slots by tag, and answers the target's credit and
// event requests.
type ichannel struct {
	s   *Session
	idx int
	q   *rdmaq.HostQueue[request]

	depth    int // command slots
	remote   []byte
	remoteMR rdma.MR
	tmfSeq   uint64
	irspTurn int

	immOff int // negotiated immediate data offset, 0 without
	maxImm int
	tiLen  int

	mu       sync.Mutex // guards the kindSync slots' completed and orphan
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

// errLoggedOut stops the completion goroutine after SRP_T_LOGOUT (the
// channel failed with a LogoutError first).
const errLoggedOut = errorString("srp: logged out by the target")

// LogoutError is the error of requests on a channel the target logged out
// with SRP_T_LOGOUT. It matches blockdev.ErrClosed.
type LogoutError struct{ Reason srp.TLogoutReason }

// Error gives the logout reason.
func (e *LogoutError) Error() string {
	return "srp: target logged the channel out: " + e.Reason.String()
}

// Is matches blockdev.ErrClosed.
func (e *LogoutError) Is(target error) bool { return target == blockdev.ErrClosed }

// reqErr is what requests on a failed channel complete with.
func reqErr(err error) error {
	var le *LogoutError
	if errors.As(err, &le) || errors.Is(err, blockdev.ErrClosed) {
		return err
	}
	return &connLost{err: err}
}

// fail moves the channel to the dead state: in-flight requests complete
// with err (the first reason wins).
func (ch *ichannel) fail(err error) { ch.q.Fail(err) }

// Failed implements rdmaq.HostHandler.
func (ch *ichannel) Failed(error) {}

// acquire takes a slot and a credit. Commands keep one credit in reserve
// for task management, as Linux ib_srp does. It blocks until both are
// available, the channel dies or ctx (which may be nil) is done.
func (ch *ichannel) acquire(ctx context.Context) (*islot, error) {
	sl, err := ch.q.Acquire(ctx, poolCmd)
	if err != nil {
		return nil, err
	}
	x := &sl.S
	x.gen++
	x.tag = uint64(x.gen)<<32 | uint64(ch.idx)<<16 | uint64(sl.Index())
	x.retries, x.completed, x.orphan, x.refresh = 0, false, false, false
	return sl, nil
}

// release returns a slot (and, if it was never sent, its credit).
func (ch *ichannel) release(sl *islot, credit bool) {
	sl.S.req, sl.S.dev = nil, nil
	ch.q.Release(sl, credit)
}

// credits returns the current request limit.
func (ch *ichannel) credits() int { return ch.q.Credits() }

// post sends a prepared slot's IU (its first n bytes, then data). On error
// the slot is the caller's again (when the channel died and its sweep
// completed the request instead, post returns nil).
func (ch *ichannel) post(sl *islot, n int, data rdma.SGE) error {
	ch.q.Prepare(sl, n, data)
	err := ch.q.Post(sl)
	if err == nil {
		return nil
	}
	if ch.q.QP().State() >= rdma.QPError {
		// The connection is going down: let the completion goroutine
		// record why (an SRP_T_LOGOUT received before the disconnect,
		// for example) before answering.
		select {
		case <-ch.q.Dead():
		case <-time.After(time.Second):
			ch.fail(fmt.Errorf("srp: posting an IU: %w", err))
		}
		return ch.q.ReqErr()
	}
	return fmt.Errorf("srp: %w", err)
}

// Sent implements rdmaq.HostHandler (the engine tracks the slots).
func (ch *ichannel) Sent(*islot) {}

// CtlSent implements rdmaq.CtlSender: SRP_I_LOGOUT left.
func (ch *ichannel) CtlSent(i int) {
	if i == ctlLogout {
		select {
		case ch.logoutWR <- struct{}{}:
		default:
		}
	}
}

// abortLocal completes in-flight commands that a successful task
// management function aborted: the target sends no response for them.
// match selects them; only commands posted before the function (issued
// before sentAt) are affected.
func (ch *ichannel) abortLocal(match func(sl *islot) bool, sentAt int64) int {
	n := 0
	for i := range ch.depth {
		sl := ch.q.Slot(i)
		t := sl.Issued()
		if t == 0 || t > sentAt || !match(sl) {
			continue
		}
		if ch.q.Abort(sl, ErrAborted) {
			n++
		}
	}
	return n
}

// Recv implements rdmaq.HostHandler: an IU from the target.
func (ch *ichannel) Recv(m rdmaq.Msg) error {
	b := m.Head
	if m.Len < 1 {
		return fmt.Errorf("srp: empty IU from the target")
	}
	switch op := srp.Opcode(b[0]); op {
	case srp.OpRsp:
		return ch.onRsp(b)
	case srp.OpCredReq:
		f, err := srp.ParseCredReq(b)
		if err != nil {
			return err
		}
		ch.credReqs.Add(1)
		ch.q.AddCredits(f.ReqLimDelta)
		return ch.answer(srp.OpCredRsp, f.Tag)
	case srp.OpAERReq:
		f, sense, err := srp.ParseAERReq(b)
		if err != nil {
			return err
		}
		ch.aerCount.Add(1)
		ch.q.AddCredits(f.ReqLimDelta)
		lun, _ := scsi.DecodeLUN(f.LUN)
		switch host.ParseUnitAttention(scsi.StatusCheckCondition, sense) {
		case host.CapacityChanged:
			ch.s.capacityChanged(lun)
		case host.ALUAChanged:
			ch.s.aluaChanged(lun)
		}
		if h := ch.s.cfg.OnAER; h != nil {
			h(lun, append([]byte(nil), sense...))
		}
		return ch.answer(srp.OpAERRsp, f.Tag)
	case srp.OpTLogout:
		f, err := srp.ParseTLogout(b)
		if err != nil {
			return err
		}
		ch.s.log.Info("srp: target logout", "channel", ch.idx, "reason", f.Reason.String())
		ch.fail(&LogoutError{Reason: f.Reason})
		return errLoggedOut
	default:
		return fmt.Errorf("srp: unexpected %s from the target", op)
	}
}

// answer sends an SRP_CRED_RSP or SRP_AER_RSP. Initiator responses use no
// credit; the target has at most one request outstanding, so two buffers
// used in turn are enough.
func (ch *ichannel) answer(op srp.Opcode, tag uint64) error {
	i := ctlAnswer + ch.irspTurn
	ch.irspTurn ^= 1
	srp.EncodeInitiatorRsp(ch.q.CtlBuf(i), op, tag)
	err := ch.q.SendCtl(i, srp.CredRspSize, false)
	if errors.Is(err, rdma.ErrQPState) {
		return nil // the connection already failed: the CQ says why
	}
	return err
}

func (ch *ichannel) onRsp(b []byte) error {
	r, err := srp.ParseRsp(b)
	if err != nil {
		return err
	}
	f := r.Fields()
	var sl *islot
	if f.Tag&tagTMF != 0 {
		sl = ch.q.Slot(ch.depth)
	} else if idx := int(uint16(f.Tag)); idx < ch.depth && int(uint16(f.Tag>>16)) == ch.idx {
		sl = ch.q.Slot(idx)
	}
	if sl == nil || !ch.q.Outstanding(sl) || sl.S.tag != f.Tag {
		// A response for no tag of ours: keep the credit it returns.
		ch.s.log.Debug("srp: response for a tag not outstanding", "tag", f.Tag)
		ch.q.AddCredits(f.ReqLimDelta)
		return nil
	}
	x := &sl.S
	x.status, x.flags, x.outResid, x.inResid = f.Status, f.Flags, f.DataOutResid, f.DataInResid
	x.senseLen = copy(x.sense[:], r.Sense())
	x.respCode = -1
	if rd := r.RespData(); len(rd) >= 4 {
		x.respCode = int(rd[3])
	}
	if st, sense := scsi.Status(x.status), x.sense[:x.senseLen]; x.kind == kindIO && host.Retry(st, sense, x.retries) {
		ua := host.ParseUnitAttention(st, sense)
		x.dev.path.UnitAttention(ua)
		switch ua {
		case host.CapacityChanged:
			// The capacity must be re-read first, and this goroutine
			// cannot wait for READ CAPACITY: the slot completes
			// without the request, which Complete hands to a
			// goroutine that refreshes and submits it again.
			ch.q.AddCredits(f.ReqLimDelta)
			x.retries++
			x.refresh = true
			ch.q.Respond(sl)
			return nil
		case host.LUNsChanged:
			x.dev.live.UnitAttention(context.Background(), ch.s, x.lun, host.LUNsChanged) // logs; runs no command
		}
		// A unit attention, BUSY or TASK SET FULL: send the same IU
		// again with a credit, keeping one in reserve as for a new
		// command.
		if ch.q.AddCreditsAndTake(f.ReqLimDelta) {
			x.retries++
			return ch.q.Resend(sl)
		}
	} else {
		ch.q.AddCredits(f.ReqLimDelta)
	}
	ch.q.Respond(sl)
	return nil
}

// Complete implements rdmaq.HostHandler: deliver a finished slot.
func (ch *ichannel) Complete(sl *islot) {
	x := &sl.S
	switch x.kind {
	case kindIO:
		r := x.req
		if x.refresh && sl.Err == nil {
			d, retries := x.dev, x.retries
			ch.release(sl, false)
			go d.refreshAndResubmit(r, retries)
			return
		}
		r.Err = result(sl)
		if sl.Err == nil && scsi.Status(x.status) == scsi.StatusCheckCondition {
			if as, ok := x.dev.path.Failed(scsi.StatusCheckCondition, x.sense[:x.senseLen]); ok {
				r.Err = host.PathError(as, r.Err)
			}
		}
		r.Completed = time.Now()
		ch.release(sl, false)
		blockdev.Complete(r)
	case kindSync:
		ch.mu.Lock()
		x.completed = true
		orphan := x.orphan
		ch.mu.Unlock()
		if orphan {
			ch.dropTmp(sl)
			ch.release(sl, false)
			return
		}
		x.done <- struct{}{}
	}
}

func (ch *ichannel) dropTmp(sl *islot) {
	if sl.S.tmp != nil {
		sl.S.tmp.Deregister()
		sl.S.tmp = nil
	}
}

// result turns a slot's outcome into an error.
func result(sl *islot) error {
	if sl.Err != nil {
		return sl.Err
	}
	x := &sl.S
	st := scsi.Status(x.status)
	if st == scsi.StatusGood || st == scsi.StatusConditionMet {
		return nil
	}
	return newSCSIError(x.name, st, x.sense[:x.senseLen])
}

// overdue returns a slot in flight for longer than d, if any.
func (ch *ichannel) overdue(now int64, d time.Duration) *islot { return ch.q.Overdue(now, d) }

// logout sends SRP_I_LOGOUT and waits (at most a second) for it to leave.
func (ch *ichannel) logout() {
	if ch.q.Err() != nil {
		return
	}
	srp.EncodeILogout(ch.q.CtlBuf(ctlLogout), 0)
	if err := ch.q.SendCtl(ctlLogout, srp.ILogoutSize, true); err != nil {
		return
	}
	select {
	case <-ch.logoutWR:
	case <-ch.q.Dead():
	case <-time.After(time.Second):
	}
}

// close logs the channel out, fails what is in flight and frees it.
func (ch *ichannel) close() {
	ch.logout()
	ch.q.Close(blockdev.ErrClosed)
	if ch.remoteMR != nil {
		ch.remoteMR.Deregister()
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }
