package target

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdisk/rdisk/internal/workers"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/rdmaq"
	"github.com/rdisk/rdisk/scsi"
	"github.com/rdisk/rdisk/srp"
)

// maxViews is the number of disk memory segments a zero-copy read may
// gather into its RDMA Write (a RAM disk's 64 KiB chunks: up to 128 KiB
// at any offset); longer reads are copied.
const maxViews = 4

// treqStride is the size of a target request buffer: an SRP_AER_REQ with
// fixed-format sense data, rounded up.
const treqStride = 64

// Control buffers of a channel's queue: the one target request (CRED_REQ,
// AER_REQ) outstanding, and SRP_T_LOGOUT.
const (
	ctlTReq   = 0
	ctlLogout = 1
)

// slotState is where a request slot is in its life.
type slotState uint8

const (
	slotFree       slotState = iota
	slotReading              // RDMA Read of the indirect table or the data-out in flight
	slotQueued               // waiting for a worker
	slotExecuting            // in scsi Session.Execute or task management
	slotResponding           // response Send posted
)

func (s slotState) String() string {
	return [...]string{"free", "reading", "queued", "executing", "responding"}[s]
}

// Abort marks set by task management on commands that have not reached
// Execute yet (the SCSI core cannot see them).
const (
	abortNone   = 0
	abortSilent = 1 // this nexus aborted it: no response
	abortStatus = 2 // another nexus cleared it: TASK ABORTED
)

// request is the SRP state of one request slot: the copy of a command or
// task management IU and what it needs besides the slot's data and
// response buffers. A slot is owned by whoever moved it into its state:
// the loop (reading), a worker or the task management goroutine (queued,
// executing), the loop again once the response is posted (responding,
// until its send completion). state and abort change under channel.mu.
type request struct {
	state slotState
	n     int // IU bytes received
	isTMF bool
	abort uint8

	tag    uint64
	solNot uint8
	lun    uint64
	cdb    [32]byte
	cmd    scsi.Command
	sense  [scsi.SenseBufferLen]byte
	data   srp.Data
	descs  []srp.DirectDesc
	tmf    srp.TskMgmtFields

	// Zero-copy reads (scsi.Command.Views): the disk memory a read
	// answers from, and the scatter list of its RDMA Write.
	views [maxViews][]byte
	vsgl  [maxViews]rdma.SGE

	table    []byte // external indirect table (registered, lazily)
	tableMR  rdma.MR
	fetching bool // reading the table, not the data
}

// slot is a request slot of a channel's queue.
type slot = rdmaq.Slot[request]

// channel is one RDMA channel (one QP) of an I_T nexus, on an
// rdmaq.TargetQueue. Its completion loop parses IUs and posts RDMA
// operations; workers run commands on disks that may block and post their
// data-in RDMA Writes and responses. The state they share (credits, slot
// states, target requests) is guarded by mu.
type channel struct {
	t    *Target
	port *Port
	nx   *nexus // set by attach, guarded by port.mu
	id   uint64
	ipid srp.PortID
	peer net.Addr
	log  *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc

	q      *rdmaq.TargetQueue[request]
	depth  int // request limit granted at login
	iuLen  int // longest IU the initiator sends (its it_iu_len)
	tiLen  int // longest IU we send
	immOff int // immediate data offset, 0 without immediate data
	pool   *workers.Pool[*slot]
	wg     sync.WaitGroup // task management goroutines
	async  sync.WaitGroup // commands started on an asynchronous disk, until answered
	since  time.Time      // when the login arrived
	sawIU  bool           // an IU was received (loop only)

	// SCSI commands answered and data moved: added to by the goroutine
	// that owns the slot (the loop or a worker), read by Target.Channels.
	commands, readBytes, writeBytes atomic.Uint64

	mu         sync.Mutex
	pending    int32 // credits freed but not yet returned to the initiator
	granted    int64 // credits granted in total
	consumed   int64 // credit-consuming IUs received
	responders int   // requests that will answer (and carry credits)
	treqOut    bool  // a CRED_REQ or AER_REQ awaits its response
	treqTag    uint64
	aers       []aerEvent
	dead       bool
	loggingOut bool
	// draining withholds credits (Drain): responses carry a REQUEST
	// LIMIT DELTA of 0, no SRP_CRED_REQ is sent.
	draining bool
	detail   string // what ended the channel, first cause (shutdown, logout)

	live  atomic.Bool   // logged in (accepted): its end is counted and logged
	cause atomic.Uint32 // endReason, first cause wins (setEnd)

	endOnce sync.Once
	stop    sync.Once
	ended   chan struct{} // closed when the channel's resources are freed
}

type aerEvent struct {
	lun uint64
	asc scsi.ASC
}

// Reasons the completion loop ends on its own.
const (
	errILogout    = errorString("initiator logout")
	errLogoutSent = errorString("target logout sent")
)

// newChannel allocates a channel's queue and posts its receives: depth+1
// receive buffers (the extra one for initiator responses), twice as many
// request slots as credits.
func (t *Target) newChannel(prov rdma.Provider, p *Port, f srp.LoginReqFields, immOff int, peer net.Addr) (*channel, error) {
	cfg := &t.cfg
	ch := &channel{
		t: t, port: p, id: t.chanID.Add(1), ipid: f.InitiatorPortID, peer: peer,
		depth: cfg.QueueDepth, iuLen: int(f.ReqITIULen), immOff: immOff, ended: make(chan struct{}), since: time.Now(),
	}
	ch.log = t.log.With("channel", ch.id, "port", p.id.String(), "initiator", ch.ipid.String(), "peer", addrString(peer))
	ch.ctx, ch.cancel = context.WithCancel(t.ctx)
	ch.tiLen = min(int(f.ReqITIULen), srp.RspSize+scsi.SenseBufferLen)
	nslots := 2 * ch.depth
	// When immediate data is on, each IU starts at a pad that puts its
	// data on a 4 KiB boundary, for O_DIRECT backstores.
	q, err := rdmaq.NewTargetQueue(rdmaq.TargetConfig{
		Provider: prov, Recvs: ch.depth + 1, RecvLen: ch.iuLen, AlignAt: immOff,
		Slots: nslots, RespLen: srp.RspSize + scsi.SenseBufferLen,
		SendWRs: ch.depth*(cfg.MaxDescriptors+1) + nslots + 4, SendSGE: maxViews, Implicit: true,
		Ctl: 2, CtlLen: treqStride, MaxData: max(cfg.MaxTransfer, 4096), QPContext: ch,
	}, ch)
	if err != nil {
		ch.cancel()
		return nil, err
	}
	ch.q = q
	for i := range q.Slots() {
		s := q.Slot(i)
		s.R.descs = make([]srp.DirectDesc, 0, cfg.MaxDescriptors)
		s.R.cmd.Sense = s.R.sense[:]
		s.R.cmd.Done = func(*scsi.Command) { ch.asyncDone(s) } // once per slot
	}
	ch.pool = workers.New(cfg.Workers, nslots, ch.exec, nil)
	return ch, nil
}

// release frees the resources. The loop, the workers and the task
// management goroutines must have ended.
func (ch *channel) release() {
	ch.cancel()
	for i := range ch.q.Slots() {
		if mr := ch.q.Slot(i).R.tableMR; mr != nil {
			mr.Deregister()
		}
	}
	ch.q.Close()
}

// shutdown disconnects the channel; its loop then ends. Safe from any
// goroutine, any number of times.
func (ch *channel) shutdown(reason string) {
	ch.stop.Do(func() {
		ch.mu.Lock()
		ch.dead = true
		if ch.detail == "" {
			ch.detail = reason
		}
		ch.mu.Unlock()
		ch.q.Disconnect()
		ch.cancel()
		ch.log.Debug("srp: channel closing", "reason", reason)
	})
}

// end tears the channel down after its loop ended: detach from the nexus
// (closing the SCSI session with the last channel, which aborts its
// commands), wait for the workers, free the resources.
func (ch *channel) end(reason string) {
	ch.endOnce.Do(func() {
		if reason == "" {
			reason = "connection ended"
			if err := ch.q.QP().Err(); err != nil {
				reason = err.Error()
			}
		}
		ch.shutdown(reason)
		if ch.live.Load() {
			ch.countEnd() // before it leaves its nexus: Stats.Live follows
		}
		ch.port.detach(ch)
		ch.pool.Close()
		ch.async.Wait()
		ch.wg.Wait()
		// Zero-copy reads whose response was never sent (or whose
		// completion never came) let COMPARE AND WRITE go.
		for i := range ch.q.Slots() {
			ch.q.Slot(i).R.cmd.Release()
		}
		ch.release()
		close(ch.ended)
	})
}

// run processes completions until the connection ends, then ends the
// channel.
func (ch *channel) run() {
	switch err := ch.q.Run(ch.ctx); {
	case errors.Is(err, context.Canceled):
		if ch.t.ctx.Err() != nil {
			ch.setEnd(endShutdown)
		}
		ch.shutdown("target closing")
	case err != nil:
		ch.shutdown(err.Error())
	}
	ch.end("")
}

// Recv implements rdmaq.TargetHandler: commands and task management take
// a slot (and a credit); initiator responses and logouts do not.
func (ch *channel) Recv(m rdmaq.Msg) error {
	if !ch.sawIU {
		// attach set nx before the loop started.
		ch.sawIU = true
		ch.nx.active.Store(true)
	}
	if m.Len < 1 {
		ch.logout(srp.TLogoutInvalidIUType)
		return nil
	}
	b := m.Head
	switch op := srp.Opcode(b[0]); op {
	case srp.OpCmd, srp.OpTskMgmt:
		ch.mu.Lock()
		ch.consumed++
		ch.mu.Unlock()
		return ch.q.Admit(m)
	case srp.OpCredRsp, srp.OpAERRsp:
		_, tag, _ := srp.ParseInitiatorRsp(b)
		ch.mu.Lock()
		ok := ch.treqOut && tag == ch.treqTag
		if ok {
			ch.treqOut = false
			ch.nextTargetReq()
		}
		ch.mu.Unlock()
		if !ok {
			ch.log.Info("srp: unexpected initiator response", "op", op, "tag", tag)
			ch.logout(srp.TLogoutUnexpectedRsp)
		}
	case srp.OpILogout:
		ch.t.stats.ilogouts.Add(1)
		ch.setEnd(endLogout)
		ch.log.Debug("srp: initiator logout")
		return errILogout
	default:
		ch.log.Info("srp: invalid IU", "op", op, "bytes", m.Len)
		ch.logout(srp.TLogoutInvalidIUType)
	}
	return nil
}

// Sent implements rdmaq.TargetHandler: a response went out; the slot
// frees.
func (ch *channel) Sent(s *slot) {
	s.R.cmd.Release()
	ch.mu.Lock()
	s.R.state, s.R.abort, s.R.isTMF = slotFree, abortNone, false
	ch.mu.Unlock()
}

// CtlSent implements rdmaq.TargetHandler: SRP_T_LOGOUT went out, the
// channel ends.
func (ch *channel) CtlSent(i int) error {
	if i == ctlLogout {
		return errLogoutSent
	}
	return nil
}

// repost gives a slot's receive buffer back to the initiator and counts the
// credit it frees (mu held).
func (ch *channel) repost(s *slot) {
	if !s.HoldsRecv() {
		return
	}
	if err := ch.q.Repost(s); err != nil && !ch.dead {
		ch.log.Debug("srp: reposting a receive failed", "err", err)
	}
	ch.pending++
}

// takeCredits returns the credits to put in an IU sent now (mu held):
// none while draining.
func (ch *channel) takeCredits() int32 {
	if ch.draining {
		return 0
	}
	d := ch.pending
	ch.pending = 0
	ch.granted += int64(d)
	return d
}

// lowWater is the initiator credit below which freed credits are pushed
// with SRP_CRED_REQ rather than waiting for a response to carry them.
func (ch *channel) lowWater() int64 { return int64(max(1, ch.depth/4)) }

// maybeCredReq sends an SRP_CRED_REQ when credits are pending and no
// response will carry them soon, or the initiator runs low (mu held).
func (ch *channel) maybeCredReq() {
	if ch.pending <= 0 || ch.treqOut || ch.dead || ch.loggingOut || ch.draining {
		return
	}
	if ch.responders > 0 && ch.granted-ch.consumed > ch.lowWater() {
		return
	}
	ch.treqTag++
	b := ch.q.CtlBuf(ctlTReq)[:srp.CredReqSize]
	srp.EncodeCredReq(b, &srp.CredReqFields{ReqLimDelta: ch.takeCredits(), Tag: ch.treqTag})
	ch.t.stats.credReqs.Add(1)
	ch.sendTargetReq(srp.CredReqSize)
}

// nextTargetReq sends a queued AER, or a CRED_REQ if due (mu held).
func (ch *channel) nextTargetReq() {
	if ch.treqOut || ch.dead || ch.loggingOut {
		return
	}
	if len(ch.aers) == 0 {
		ch.maybeCredReq()
		return
	}
	ev := ch.aers[0]
	ch.aers = ch.aers[1:]
	ch.treqTag++
	var sense [scsi.SenseFixedLen]byte
	scsi.EncodeFixedSense(sense[:], scsi.KeyUnitAttention, ev.asc, -1)
	ch.t.stats.aer.Add(1)
	n := srp.EncodeAERReq(ch.q.CtlBuf(ctlTReq), &srp.AERReqFields{ReqLimDelta: ch.takeCredits(), Tag: ch.treqTag, LUN: scsi.EncodeLUN(ev.lun)}, sense[:])
	ch.sendTargetReq(n)
}

// sendTargetReq posts the target request in its control buffer's first n
// bytes (mu held). The initiator's response (which needs the Send to have
// arrived) frees the buffer for the next one.
func (ch *channel) sendTargetReq(n int) {
	ch.treqOut = true
	if err := ch.q.SendCtl(ctlTReq, n, 0); err != nil {
		ch.log.Debug("srp: posting a target request failed", "err", err)
	}
}

// queueAER queues an asynchronous event report for the channel's nexus.
func (ch *channel) queueAER(lun uint64, asc scsi.ASC) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.dead {
		return
	}
	ch.aers = append(ch.aers, aerEvent{lun, asc})
	ch.nextTargetReq()
}

// logout sends SRP_T_LOGOUT and disconnects once it is sent (or after a
// second); the channel's end counts as endForLogout(r). Safe from any
// goroutine.
func (ch *channel) logout(r srp.TLogoutReason) { ch.logoutFor(r, endForLogout(r)) }

// logoutFor is logout with the reason the channel's end counts as.
func (ch *channel) logoutFor(r srp.TLogoutReason, why endReason) {
	ch.mu.Lock()
	if ch.dead || ch.loggingOut {
		ch.mu.Unlock()
		return
	}
	ch.loggingOut = true
	ch.setEnd(why)
	if ch.detail == "" {
		ch.detail = "target logout: " + r.String()
	}
	ch.t.stats.tlogouts.Add(1)
	srp.EncodeTLogout(ch.q.CtlBuf(ctlLogout), &srp.TLogoutFields{Reason: r})
	err := ch.q.SendCtl(ctlLogout, srp.TLogoutSize, 0)
	ch.mu.Unlock()
	ch.log.Debug("srp: target logout", "reason", r.String())
	if err != nil || ch.q.QP().State() != rdma.QPConnected {
		ch.shutdown("target logout: " + r.String())
		return
	}
	time.AfterFunc(time.Second, func() { ch.shutdown("target logout: " + r.String()) })
}

// freeze withholds the channel's credits from now on (Drain).
func (ch *channel) freeze() {
	ch.mu.Lock()
	ch.draining = true
	ch.mu.Unlock()
}

// inflight is the number of requests that will answer: commands and task
// management functions received and not yet responded to.
func (ch *channel) inflight() int {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.responders
}
