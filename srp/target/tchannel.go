package target

import (
	"context"
	"fmt"
	"github.com/rdisk/rdisk/srp"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/scsi"
)

// Work request IDs: receives use the receive buffer index; send-queue work
// requests carry a kind in the top byte and the slot in the low bits.
const (
	wrRsp     uint64 = 1 << 56 // response Send of a slot
	wrRead    uint64 = 2 << 56 // RDMA Read of a slot's data or table
	wrWrite   uint64 = 3 << 56 // RDMA Write of a slot's data (unsignaled)
	wrTReq    uint64 = 4 << 56 // CRED_REQ / AER_REQ Send
	wrTLogout uint64 = 5 << 56 // T_LOGOUT Send
	wrKind    uint64 = 0xff << 56
)

// treqStride is the size of a target request buffer: an SRP_AER_REQ with
// fixed-format sense data, rounded up.
const treqStride = 64

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

// slot is one request context: the copy of a command or task management
// IU, its data buffer and its response IU. A slot is owned by whoever moved
// it into its state: the loop (reading), a worker or the task management
// goroutine (queued, executing), the loop again once the response is
// posted (responding, until its send completion).
type slot struct {
	idx   int
	state slotState
	recv  int // receive buffer still held (the IU, immediate data), or -1
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

	buf       []byte // data buffer (registered, lazily)
	bufMR     rdma.MR
	table     []byte // external indirect table (registered, lazily)
	tableMR   rdma.MR
	readsLeft int
	readErr   bool
	fetching  bool // reading the table, not the data

	rsp  []byte // the slot's response IU buffer (view into rspBuf)
	sge  [1]rdma.SGE
	wr   rdma.SendWR
	rsge [1]rdma.SGE
	rwr  rdma.RecvWR
}

// waitingIU is a received IU that found no free slot.
type waitingIU struct{ recv, n int }

// channel is one RDMA channel (one QP) of an I_T nexus. Its loop goroutine
// polls the CQ, parses IUs and posts RDMA Reads; workers run commands and
// post data-in RDMA Writes and responses. The state they share (credits,
// slots, target requests) is guarded by mu.
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

	pd rdma.PD
	cq rdma.CQ
	qp rdma.QP

	depth      int // request limit granted at login
	nrecv      int // receive buffers: depth + 1 for initiator responses
	iuLen      int // longest IU the initiator sends (its it_iu_len)
	tiLen      int // longest IU we send
	immOff     int // immediate data offset, 0 without immediate data
	recvPad    int
	recvStride int
	recvBuf    []byte
	recvMR     rdma.MR
	rspStride  int
	rspBuf     []byte
	rspMR      rdma.MR
	treqBuf    []byte
	treqMR     rdma.MR
	slots      []slot
	rwr        rdma.RecvWR // loop's receive WR for reposting initiator responses
	rsge       [1]rdma.SGE
	work       chan int
	wg         sync.WaitGroup

	mu         sync.Mutex
	free       []int
	waiting    []waitingIU
	pending    int32 // credits freed but not yet returned to the initiator
	granted    int64 // credits granted in total
	consumed   int64 // credit-consuming IUs received
	responders int   // requests that will answer (and carry credits)
	treqOut    bool  // a CRED_REQ or AER_REQ awaits its response
	treqTag    uint64
	aers       []aerEvent
	dead       bool
	loggingOut bool

	endOnce sync.Once
	stop    sync.Once
}

type aerEvent struct {
	lun uint64
	asc scsi.ASC
}

// newChannel allocates a channel's resources and posts its receives.
func (t *Target) newChannel(prov rdma.Provider, p *Port, f srp.LoginReqFields, immOff int, peer net.Addr) (*channel, error) {
	cfg := &t.cfg
	ch := &channel{
		t: t, port: p, id: t.chanID.Add(1), ipid: f.InitiatorPortID, peer: peer,
		depth: cfg.QueueDepth, nrecv: cfg.QueueDepth + 1, iuLen: int(f.ReqITIULen), immOff: immOff,
	}
	ch.log = t.log.With("channel", ch.id)
	ch.ctx, ch.cancel = context.WithCancel(t.ctx)
	ch.tiLen = min(int(f.ReqITIULen), srp.RspSize+scsi.SenseBufferLen)
	fail := func(step string, err error) (*channel, error) {
		ch.release()
		return nil, fmt.Errorf("%s: %w", step, err)
	}
	var err error
	if ch.pd, err = prov.AllocPD(); err != nil {
		return fail("allocating PD", err)
	}
	nslots := 2 * ch.depth
	maxSend := ch.depth*(cfg.MaxDescriptors+1) + nslots + 4
	if ch.cq, err = prov.CreateCQ(ch.nrecv + maxSend + 8); err != nil {
		return fail("creating CQ", err)
	}
	if ch.qp, err = ch.pd.CreateQP(rdma.QPConfig{SendCQ: ch.cq, RecvCQ: ch.cq, MaxSendWR: maxSend, MaxRecvWR: ch.nrecv,
		MaxSendSGE: 1, MaxRecvSGE: 1, Context: ch}); err != nil {
		return fail("creating QP", err)
	}
	// Receive buffers: when immediate data is on, each IU starts at a pad
	// that puts its data on a 4 KiB boundary, for O_DIRECT backstores.
	if immOff != 0 {
		ch.recvPad = (4096 - immOff%4096) % 4096
		ch.recvStride = (ch.recvPad + ch.iuLen + 4095) &^ 4095
	} else {
		ch.recvStride = (ch.iuLen + 63) &^ 63
	}
	ch.recvBuf = backstore.AlignedBuffer(ch.nrecv*ch.recvStride, 4096)
	if ch.recvMR, err = ch.pd.RegisterMemory(ch.recvBuf, rdma.AccessLocalWrite); err != nil {
		return fail("registering receive buffers", err)
	}
	ch.rspStride = (srp.RspSize + scsi.SenseBufferLen + 63) &^ 63
	ch.rspBuf = backstore.AlignedBuffer(nslots*ch.rspStride, 4096)
	if ch.rspMR, err = ch.pd.RegisterMemory(ch.rspBuf, rdma.AccessLocalWrite); err != nil {
		return fail("registering response buffers", err)
	}
	ch.treqBuf = make([]byte, 2*treqStride)
	if ch.treqMR, err = ch.pd.RegisterMemory(ch.treqBuf, rdma.AccessLocalWrite); err != nil {
		return fail("registering target request buffers", err)
	}
	ch.slots = make([]slot, nslots)
	ch.free = make([]int, 0, nslots)
	for i := range ch.slots {
		s := &ch.slots[i]
		s.idx, s.recv = i, -1
		s.rsp = ch.rspBuf[i*ch.rspStride : (i+1)*ch.rspStride]
		s.descs = make([]srp.DirectDesc, 0, cfg.MaxDescriptors)
		s.cmd.Sense = s.sense[:]
		ch.free = append(ch.free, nslots-1-i)
	}
	ch.rwr.SGL = ch.rsge[:]
	for i := 0; i < ch.nrecv; i++ {
		if err := ch.postRecv(&ch.rwr, ch.rsge[:], i); err != nil {
			return fail("posting receives", err)
		}
	}
	ch.work = make(chan int, nslots)
	for range cfg.Workers {
		ch.wg.Add(1)
		go ch.worker()
	}
	return ch, nil
}

// recvIU returns the bytes of receive buffer i.
func (ch *channel) recvIU(i, n int) []byte {
	off := i*ch.recvStride + ch.recvPad
	return ch.recvBuf[off : off+n : off+ch.iuLen]
}

func (ch *channel) postRecv(wr *rdma.RecvWR, sge []rdma.SGE, i int) error {
	sge[0] = rdma.SGE{MR: ch.recvMR, Offset: i*ch.recvStride + ch.recvPad, Length: ch.iuLen}
	wr.ID, wr.SGL = uint64(i), sge
	return ch.qp.PostRecv(wr)
}

// free releases the resources. The loop, the workers and the task
// management goroutines must have ended.
func (ch *channel) release() {
	if ch.cancel != nil {
		ch.cancel()
	}
	if ch.qp != nil {
		ch.qp.Close()
	}
	for i := range ch.slots {
		if mr := ch.slots[i].bufMR; mr != nil {
			mr.Deregister()
		}
		if mr := ch.slots[i].tableMR; mr != nil {
			mr.Deregister()
		}
	}
	for _, mr := range []rdma.MR{ch.recvMR, ch.rspMR, ch.treqMR} {
		if mr != nil {
			mr.Deregister()
		}
	}
	if ch.cq != nil {
		ch.cq.Close()
	}
	if ch.pd != nil {
		ch.pd.Close()
	}
}

// shutdown disconnects the channel; its loop then ends. Safe from any
// goroutine, any number of times.
func (ch *channel) shutdown(reason string) {
	ch.stop.Do(func() {
		ch.mu.Lock()
		ch.dead = true
		close(ch.work)
		ch.mu.Unlock()
		if ch.qp != nil {
			ch.qp.Disconnect()
		}
		ch.cancel()
		ch.log.Info("srp: channel closing", "initiator", ch.ipid, "reason", reason)
	})
}

// end tears the channel down after its loop ended: detach from the nexus
// (closing the SCSI session with the last channel, which aborts its
// commands), wait for the workers, free the resources.
func (ch *channel) end(reason string) {
	ch.endOnce.Do(func() {
		if reason == "" {
			reason = "connection ended"
			if err := ch.qp.Err(); err != nil {
				reason = err.Error()
			}
		}
		ch.shutdown(reason)
		ch.port.detach(ch)
		ch.wg.Wait()
		ch.release()
	})
}

// loop processes completions until the connection ends.
func (ch *channel) loop() {
	wcs := make([]rdma.WC, 64)
	for {
		n := ch.cq.Poll(wcs)
		if n == 0 {
			if err := ch.cq.Wait(ch.ctx); err != nil {
				ch.shutdown("target closing")
				return
			}
			continue
		}
		for i := range wcs[:n] {
			wc := &wcs[i]
			if wc.Status != rdma.StatusSuccess {
				reason := fmt.Sprintf("%s completion: %s", wc.Op, wc.Status)
				if err := ch.qp.Err(); err != nil {
					reason = err.Error()
				}
				ch.shutdown(reason)
				return
			}
			if !ch.complete(wc) {
				return
			}
		}
	}
}

// complete handles one successful completion; false ends the loop.
func (ch *channel) complete(wc *rdma.WC) bool {
	if wc.Op == rdma.OpRecv {
		return ch.onRecv(int(wc.ID), wc.ByteLen)
	}
	idx := int(wc.ID &^ wrKind)
	switch wc.ID & wrKind {
	case wrRsp:
		ch.mu.Lock()
		ch.freeSlot(&ch.slots[idx])
		ch.mu.Unlock()
	case wrRead:
		ch.onRead(&ch.slots[idx])
	case wrTLogout:
		ch.shutdown("target logout sent")
		return false
	}
	return true
}

// onRecv handles a received IU in receive buffer i.
func (ch *channel) onRecv(i, n int) bool {
	if n < 1 {
		ch.logout(srp.TLogoutInvalidIUType)
		return true
	}
	b := ch.recvIU(i, n)
	switch op := srp.Opcode(b[0]); op {
	case srp.OpCmd, srp.OpTskMgmt:
		ch.mu.Lock()
		ch.consumed++
		s := ch.getSlot()
		if s == nil {
			ch.waiting = append(ch.waiting, waitingIU{i, n})
			ch.mu.Unlock()
			return true
		}
		ch.mu.Unlock()
		ch.start(s, i, n)
	case srp.OpCredRsp, srp.OpAERRsp:
		_, tag, _ := srp.ParseInitiatorRsp(b)
		if err := ch.postRecv(&ch.rwr, ch.rsge[:], i); err != nil {
			ch.shutdown("reposting a receive: " + err.Error())
			return false
		}
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
		ch.log.Info("srp: initiator logout", "initiator", ch.ipid)
		ch.shutdown("initiator logout")
		return false
	default:
		ch.log.Info("srp: invalid IU", "op", op, "bytes", n)
		ch.logout(srp.TLogoutInvalidIUType)
	}
	return true
}

// getSlot takes a free slot (mu held), or returns nil.
func (ch *channel) getSlot() *slot {
	k := len(ch.free)
	if k == 0 {
		return nil
	}
	s := &ch.slots[ch.free[k-1]]
	ch.free = ch.free[:k-1]
	return s
}

// freeSlot returns a slot to the free list (mu held) and starts an IU that
// waited for one.
func (ch *channel) freeSlot(s *slot) {
	s.state, s.abort, s.isTMF, s.recv = slotFree, abortNone, false, -1
	if len(ch.waiting) > 0 && !ch.dead {
		w := ch.waiting[0]
		ch.waiting = ch.waiting[1:]
		// start takes mu itself: hand the slot over outside the lock.
		// ch.dead is false under mu, so end has not begun waiting.
		ch.wg.Add(1)
		go func() {
			defer ch.wg.Done()
			ch.start(s, w.recv, w.n)
		}()
		return
	}
	ch.free = append(ch.free, s.idx)
}

// repost gives a slot's receive buffer back to the initiator and counts the
// credit it frees (mu held).
func (ch *channel) repost(s *slot) {
	if s.recv < 0 {
		return
	}
	if err := ch.postRecv(&s.rwr, s.rsge[:], s.recv); err != nil && !ch.dead {
		ch.log.Debug("srp: reposting a receive failed", "err", err)
	}
	s.recv = -1
	ch.pending++
}

// takeCredits returns the credits to put in an IU sent now (mu held).
func (ch *channel) takeCredits() int32 {
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
	if ch.pending <= 0 || ch.treqOut || ch.dead || ch.loggingOut {
		return
	}
	if ch.responders > 0 && ch.granted-ch.consumed > ch.lowWater() {
		return
	}
	ch.treqTag++
	b := ch.treqBuf[:srp.CredReqSize]
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
	n := srp.EncodeAERReq(ch.treqBuf[:treqStride], &srp.AERReqFields{ReqLimDelta: ch.takeCredits(), Tag: ch.treqTag, LUN: scsi.EncodeLUN(ev.lun)}, sense[:])
	ch.sendTargetReq(n)
}

// sendTargetReq posts the target request in treqBuf[0:n] (mu held).
func (ch *channel) sendTargetReq(n int) {
	ch.treqOut = true
	sge := [1]rdma.SGE{{MR: ch.treqMR, Length: n}}
	wr := rdma.SendWR{ID: wrTReq, Op: rdma.OpSend, SGL: sge[:]}
	if err := ch.qp.PostSend(&wr); err != nil {
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
// second). Safe from any goroutine.
func (ch *channel) logout(r srp.TLogoutReason) {
	ch.mu.Lock()
	if ch.dead || ch.loggingOut {
		ch.mu.Unlock()
		return
	}
	ch.loggingOut = true
	ch.t.stats.tlogouts.Add(1)
	b := ch.treqBuf[treqStride : treqStride+srp.TLogoutSize]
	srp.EncodeTLogout(b, &srp.TLogoutFields{Reason: r})
	sge := [1]rdma.SGE{{MR: ch.treqMR, Offset: treqStride, Length: srp.TLogoutSize}}
	wr := rdma.SendWR{ID: wrTLogout, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: sge[:]}
	err := ch.qp.PostSend(&wr)
	ch.mu.Unlock()
	ch.log.Info("srp: target logout", "initiator", ch.ipid, "reason", r.String())
	if err != nil || ch.qp.State() != rdma.QPConnected {
		ch.shutdown("target logout: " + r.String())
		return
	}
	time.AfterFunc(time.Second, func() { ch.shutdown("target logout: " + r.String()) })
}
