package target

import (
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdisk/rdisk/internal/workers"
	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/scsi"
)

// maxViews is the number of disk memory segments a zero-copy read may
// gather into its RDMA Write (a RAM disk's 64 KiB chunks: up to 128 KiB
// at any offset); longer reads are copied.
const maxViews = 4

// taskState is where a command slot is in its life.
type taskState uint8

const (
	taskFree    taskState = iota
	taskHeld              // received ahead of ExpCmdSN, waiting for the gap to fill
	taskData              // waiting for data-out (R2T or RDMA Read)
	taskQueued            // waiting for a worker
	taskExec              // in scsi.Session.Execute
	taskRespond           // response being sent
)

func (s taskState) String() string {
	return [...]string{"free", "held", "data", "queued", "exec", "respond"}[s]
}

// task is one command slot: the scsi.Command, its data buffer, its sense and
// response bytes, and the transfer state. Slots are allocated once per
// connection and reused.
type task struct {
	idx     int
	gen     uint16 // bumped at each use of the slot, part of the TTT
	state   taskState
	itt     uint32
	cmdSN   uint32
	lun     uint64
	rawLUN  uint64
	imm     bool
	dropped bool     // aborted before Execute: free without a response
	credit  bool     // the window was already credited for it
	failed  bool     // data-out arrived out of sequence: fail the command
	failASC scsi.ASC // the additional sense of that failure (0: DATA PHASE ERROR)
	cmd     scsi.Command
	cdb     [16]byte
	expLen  uint32
	buf     []byte // data buffer (data-out received, data-in to send)
	sense   [scsi.SenseBufferLen]byte
	rsp     [2 + scsi.SenseBufferLen]byte

	// Data-out progress.
	need    uint32 // bytes of data-out to collect before executing
	got     uint32 // bytes collected (immediate, unsolicited, solicited)
	unsol   bool   // unsolicited Data-Out PDUs still to come
	dataSN  uint32 // next DataSN expected in the current sequence
	r2tSN   uint32
	r2tOff  uint32 // offset of the outstanding R2T
	r2tLen  uint32 // its length (0: none outstanding)
	ttt     uint32
	unsolSN uint32

	// iSER.
	rstag, wstag uint32
	rva, wva     uint64
	rsv, wsv     bool
	inv          uint32             // key to invalidate with the response (0: none)
	views        [maxViews][]byte   // zero-copy read: the disk memory (scsi.Command.Views)
	vsgl         [maxViews]rdma.SGE // and the scatter list of its RDMA Write
	pending      int                // work completions still expected
	rspLen       int                // bytes of the response Send
	r2tQueued    bool

	// iSCSI/TCP Data-Out timeout (tcp.go): the deadline (Unix ns, 0:
	// none) and the slot's timer.
	doDeadline atomic.Int64
	doTimer    *time.Timer
}

// ctl is a control PDU to send: NOP-In, Text, Logout and TMF responses,
// Reject, Async Message, R2T. Its header is encoded except StatSN,
// ExpCmdSN and MaxCmdSN, which the sender fills (they sit at the same
// offsets in every target PDU).
type ctl struct {
	hdr     [iser.BHSSize]byte
	data    []byte
	advance bool   // consumes a StatSN
	r2t     *task  // an R2T of this task (StatSN not advanced)
	gen     uint16 // r2t's generation when the R2T was queued
	close   bool   // drop the connection once sent (Logout, cold reset)
}

// transport is what differs between iSCSI/TCP and iSER.
type transport interface {
	// buffer returns a data buffer of at least n bytes for t (the iSER
	// transport's are registered), replacing the one it had.
	buffer(t *task, n int) ([]byte, error)
	// fetch starts collecting the data-out a task still needs; when it is
	// all in, the transport calls conn.dataReady.
	fetch(t *task)
	// respond sends a completed task's data-in and status, then frees it
	// with conn.release. inline is set when the caller is the
	// connection's own receive loop, which may write at once.
	respond(t *task, inline bool)
	// send sends a control PDU.
	send(p *ctl)
	// fetchAbort stops collecting data-out for a task being aborted
	// (c.mu held). It reports whether the caller may free the slot now;
	// false means a transfer is still in flight and dataReady frees it.
	fetchAbort(t *task) bool
	// shut closes the connection (idempotent).
	shut()
	// localAddr is the portal address the initiator reached.
	localAddr() net.Addr
	// remoteAddr is the initiator's address.
	remoteAddr() net.Addr
	// name is the transport's name: "tcp" or "iser".
	name() string
}

// conn is the full feature phase of one connection, common to both
// transports: the task slots, the command window, dispatch to workers, task
// management, NOP, Text and Logout.
type conn struct {
	t      *Target
	sess   *session
	params iser.Params
	log    *slog.Logger
	x      transport
	maxXfr int
	connID uint16
	views  bool // reads may answer from disk memory (the transport sends from any)

	mu       sync.Mutex
	slotFree sync.Cond
	tasks    []task
	free     []*task
	byITT    map[uint32]*task
	held     map[uint32]*task
	win      iser.CmdWindow
	closing  bool
	// frozen stops crediting the command window (Drain): MaxCmdSN stays,
	// so the initiator sends no command beyond those it may already.
	frozen bool

	pool     *workers.Pool[*task] // runs commands on disks that may block
	async    sync.WaitGroup       // commands started on an asynchronous disk, until their response
	inline   bool                 // !Config.NoInline: the receive loop runs what never blocks it
	inlineQ  []*task              // tasks the receive loop runs itself (disks that never block)
	text     iser.TextResponder
	dropOnce sync.Once
	done     chan struct{} // closed when the connection has ended
	tmfWG    sync.WaitGroup
	end      atomic.Uint32 // endReason of the session, first cause wins (setEnd)

	// NOP-In keepalive (nop.go).
	rxSeen   atomic.Bool // a PDU arrived since the keepalive last looked
	nopMu    sync.Mutex
	nopTimer *time.Timer
	nopTTT   uint32 // TTT of the ping awaiting its echo (0: none)
	nopSeq   uint32
	nopOff   bool // the connection ended: no more pings
}

// extraSlots are slots beyond the command window for immediate commands.
const extraSlots = 8

// taskSlots is the number of task slots of a connection with a command
// window of depth. A slot is freed only once its response has been sent,
// but the response already opened the window for the next command, which
// can arrive first: up to a window of commands plus a window of responses
// still being sent can hold slots. With fewer, the receive loop could wait
// in getTask for a slot only its own send completions free. Transports
// size their per-task resources with it too.
func taskSlots(depth int) int { return 2 * (depth + extraSlots) }

func newConn(t *Target, ls iser.Session, x transport, log *slog.Logger) *conn {
	// Data buffers are allocated per slot on first use.
	n := taskSlots(int(t.cfg.QueueDepth))
	c := &conn{t: t, params: ls.Params, log: log, x: x, maxXfr: t.cfg.MaxTransfer,
		tasks: make([]task, n), free: make([]*task, 0, n), byITT: make(map[uint32]*task, n),
		held: map[uint32]*task{}, win: ls.CmdWindow, done: make(chan struct{})}
	c.pool = workers.New(t.cfg.Workers, n, c.runQueued, nil)
	c.inline = !t.cfg.NoInline
	c.slotFree.L = &c.mu
	for i := range c.tasks {
		tk := &c.tasks[i]
		tk.idx = i
		tk.cmd.Sense = tk.sense[:]
		tk.cmd.Done = func(*scsi.Command) { c.asyncDone(tk) } // once per slot
		c.free = append(c.free, &c.tasks[n-1-i])
	}
	c.text = iser.TextResponder{
		SessionType:              ls.Params.SessionType,
		SessionTarget:            ls.Params.TargetName,
		MaxSendDataSegmentLength: int(ls.Params.MaxSendDataSegmentLength),
	}
	return c
}

// stop ends the full feature phase after the connection closed (err is
// why): pending tasks are dropped, TMFs and workers finish, the session
// closes.
func (c *conn) stop(err error) {
	c.stopNop()
	c.mu.Lock()
	c.closing = true
	for i := range c.tasks {
		tk := &c.tasks[i]
		if tk.state == taskHeld || tk.state == taskData || tk.state == taskQueued {
			tk.dropped = true
		}
	}
	inl := c.inlineQ
	c.inlineQ = nil
	c.slotFree.Broadcast()
	c.mu.Unlock()
	for _, tk := range inl {
		c.release(tk)
	}
	if c.sess != nil && c.sess.scsi != nil {
		// Abort what is still running so workers return promptly.
		c.sess.scsi.Close()
	}
	c.pool.Close()
	c.async.Wait() // commands at an asynchronous disk
	c.tmfWG.Wait()
	// Zero-copy reads whose response completion never came let COMPARE
	// AND WRITE go (the transport's loop has ended).
	for i := range c.tasks {
		c.tasks[i].cmd.Release()
	}
	if c.sess != nil {
		c.t.sessionEnded(c, err)
		c.sess.close()
	}
	close(c.done)
}

// drop closes the connection from any goroutine.
func (c *conn) drop(reason string) {
	c.dropOnce.Do(func() {
		c.log.Debug("iscsi: dropping connection", "reason", reason)
		c.x.shut()
	})
}

// getTask takes a free slot, waiting for one (a response being written
// frees its slot right after). It returns nil when the connection closes.
func (c *conn) getTask() *task {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.free) == 0 && !c.closing {
		c.slotFree.Wait()
	}
	if c.closing {
		return nil
	}
	n := len(c.free)
	tk := c.free[n-1]
	c.free = c.free[:n-1]
	return tk
}

// release frees a task slot whose response was sent (or that ends
// without one) and credits the window if that was not done yet.
func (c *conn) release(tk *task) {
	tk.cmd.Release() // a zero-copy read's data was sent (or never will be)
	c.mu.Lock()
	c.creditLocked(tk)
	if cur, ok := c.byITT[tk.itt]; ok && cur == tk {
		delete(c.byITT, tk.itt)
	}
	tk.state = taskFree
	tk.dropped = false
	c.free = append(c.free, tk)
	c.slotFree.Signal()
	c.mu.Unlock()
}

func (c *conn) creditLocked(tk *task) {
	if !tk.credit {
		tk.credit = true
		if !tk.imm && !c.frozen {
			c.win.Credit(1)
		}
	}
}

// freeze stops crediting the command window (Drain).
func (c *conn) freeze() {
	c.mu.Lock()
	c.frozen = true
	c.mu.Unlock()
}

// inflight is the number of commands the connection holds a slot for:
// received and not yet answered (a slot frees once its response is sent).
func (c *conn) inflight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.tasks) - len(c.free)
}

// stamp fills StatSN, ExpCmdSN and MaxCmdSN of a target PDU header.
func (c *conn) stamp(hdr []byte, statSN uint32) {
	c.mu.Lock()
	w := c.win
	c.mu.Unlock()
	binary.BigEndian.PutUint32(hdr[iser.OffsetStatSN:], statSN)
	binary.BigEndian.PutUint32(hdr[iser.OffsetExpCmdSN:], w.ExpCmdSN)
	binary.BigEndian.PutUint32(hdr[iser.OffsetMaxCmdSN:], w.MaxCmdSN)
}

// window returns the current window.
func (c *conn) window() iser.CmdWindow {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.win
}

// consumeSN classifies a non-immediate PDU's CmdSN. In-window PDUs that are
// not SCSI commands consume their CmdSN at once (they hold no slot).
func (c *conn) consumeSN(cmdSN uint32, immediate bool) bool {
	if immediate {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.win.Check(cmdSN) {
	case iser.CmdSNDuplicate, iser.CmdSNOutOfWindow:
		return false
	}
	if cmdSN == c.win.ExpCmdSN {
		c.win.Advance()
		if !c.frozen {
			c.win.Credit(1)
		}
		c.releaseHeldLocked()
	}
	return true
}

// xferInfo is what an iSER header says about a command's buffers.
type xferInfo struct {
	rsv, wsv     bool
	rstag, wstag uint32
	rva, wva     uint64
}

// dispatch handles a PDU of full feature phase other than the transport's
// own (Data-Out on iSCSI/TCP): x is what an iSER header said about a
// command's buffers, nil on TCP. Data-Out reaching here is a protocol
// error (iSER moves data by RDMA).
func (c *conn) dispatch(p iser.PDU, x *xferInfo) {
	switch p.BHS.Opcode() {
	case iser.OpSCSICommand:
		c.onCommand(p, x)
	case iser.OpNOPOut:
		c.onNOPOut(p)
	case iser.OpTaskMgmtRequest:
		c.onTMF(p)
	case iser.OpTextRequest:
		c.onText(p)
	case iser.OpLogoutRequest:
		c.onLogout(p)
	case iser.OpDataOut, iser.OpSNACKRequest, iser.OpLoginRequest:
		c.reject(p, iser.RejectProtocolError)
	default:
		c.reject(p, iser.RejectCmdNotSupported)
	}
}

// onCommand handles a SCSI Command PDU: p.Data is its immediate data (only
// valid during the call), x what an iSER header said about the buffers.
func (c *conn) onCommand(p iser.PDU, x *xferInfo) {
	if c.sess.scsi == nil {
		c.reject(p, iser.RejectProtocolError)
		return
	}
	cmd := iser.SCSICommand(p.BHS)
	immediate := p.BHS.Immediate()
	cmdSN := cmd.CmdSN()
	if !immediate {
		c.mu.Lock()
		v := c.win.Check(cmdSN)
		c.mu.Unlock()
		if v != iser.CmdSNInWindow {
			c.log.Debug("iscsi: ignoring command outside the window", "cmdsn", cmdSN, "verdict", v)
			return
		}
	}
	ahs, err := iser.ParseCommandAHS(p.AHS)
	if err != nil || ahs.HasBidiReadLength || (cmd.Read() && cmd.Write()) {
		c.reject(p, iser.RejectProtocolError)
		return
	}
	if reason, why := c.checkImmediate(p, cmd); why != "" {
		// Rejected before it is a task: its CmdSN is not consumed,
		// the initiator plugs the gap (RFC 7143 section 11.17.1).
		c.log.Info("iscsi: command rejected", "itt", p.BHS.ITT(), "reason", reason, "err", why)
		c.reject(p, reason)
		return
	}
	tk := c.getTask()
	if tk == nil {
		return
	}
	tk.gen++
	tk.itt = p.BHS.ITT()
	tk.cmdSN = cmdSN
	tk.imm = immediate
	tk.credit = false
	tk.dropped = false
	tk.rawLUN = p.BHS.LUN()
	var lb [8]byte
	binary.BigEndian.PutUint64(lb[:], tk.rawLUN)
	if n, err := scsi.DecodeLUN(lb); err == nil {
		tk.lun = n
	} else {
		tk.lun = scsi.MaxLUN + 1
	}
	copy(tk.cdb[:], cmd.CDB())
	cdbLen := 16
	tk.expLen = cmd.ExpectedDataTransferLength()
	if err := c.prepare(tk, cmd, cdbLen, len(ahs.ExtendedCDB) > 0); err != nil {
		c.log.Warn("iscsi: no data buffer for a command", "bytes", tk.expLen, "err", err)
		c.release(tk)
		c.drop("out of data buffers")
		return
	}
	if x != nil {
		tk.rsv, tk.wsv, tk.rstag, tk.wstag, tk.rva, tk.wva = x.rsv, x.wsv, x.rstag, x.wstag, x.rva, x.wva
	}
	// Data-out: immediate data, then unsolicited and solicited data.
	tk.failed, tk.failASC, tk.inv, tk.pending = false, 0, 0, 0
	tk.got, tk.need, tk.unsol, tk.r2tLen, tk.r2tSN, tk.dataSN, tk.unsolSN, tk.r2tQueued = 0, 0, false, 0, 0, 0, 0, false
	if tk.cmd.Dir == scsi.DirOut {
		tk.need = c.sess.scsi.DataOutLength(tk.lun, tk.cmd.CDB, tk.expLen)
		if len(p.Data) > 0 {
			copy(tk.buf, p.Data)
			tk.got = uint32(len(p.Data))
		}
		tk.unsol = !p.BHS.Final() && tk.got < tk.expLen
		tk.cmd.DataOut = tk.buf[:min(uint32(len(tk.buf)), tk.expLen)]
	}
	c.mu.Lock()
	if old, dup := c.byITT[tk.itt]; dup && old != tk {
		// ITT in use: a protocol error at ERL 0.
		c.mu.Unlock()
		c.release(tk)
		c.reject(p, iser.RejectTaskInProgress)
		return
	}
	c.byITT[tk.itt] = tk
	if !immediate && cmdSN != c.win.ExpCmdSN {
		tk.state = taskHeld
		c.held[cmdSN] = tk
		c.mu.Unlock()
		return
	}
	if !immediate {
		c.win.Advance()
	}
	c.startLocked(tk)
	if !immediate {
		c.releaseHeldLocked()
	}
	c.mu.Unlock()
}

// checkImmediate checks a command's immediate data against the session's
// parameters in the order LIO's iscsit_setup_scsi_cmd does, and returns
// the Reject reason and why for a command to refuse (why "": accept it).
func (c *conn) checkImmediate(p iser.PDU, cmd iser.SCSICommand) (iser.RejectReason, string) {
	n := uint32(len(p.Data))
	if n == 0 {
		return 0, ""
	}
	exp := cmd.ExpectedDataTransferLength()
	switch {
	case !c.params.ImmediateData:
		return iser.RejectProtocolError, "immediate data with ImmediateData=No"
	case n == exp && !p.BHS.Final():
		return iser.RejectProtocolError, "all the data immediate but the F bit clear"
	case n > exp:
		return iser.RejectProtocolError, "immediate data beyond the expected data transfer length"
	case n > c.params.FirstBurstLength:
		// LIO: ISCSI_REASON_BOOKMARK_INVALID, RFC 7143's Invalid PDU
		// field.
		return iser.RejectInvalidPDUField, "immediate data beyond FirstBurstLength"
	}
	return 0, ""
}

// prepare fills the scsi.Command of a new task and gives it a data buffer
// large enough for its transfer.
func (c *conn) prepare(tk *task, cmd iser.SCSICommand, cdbLen int, extCDB bool) error {
	sc := &tk.cmd
	sc.CDB = tk.cdb[:cdbLen]
	sc.LUN = tk.lun
	sc.Tag = uint64(tk.itt)
	switch cmd.Attr() {
	case iser.AttrOrdered:
		sc.Attr = scsi.AttrOrdered
	case iser.AttrHeadOfQueue:
		sc.Attr = scsi.AttrHeadOfQueue
	case iser.AttrACA:
		sc.Attr = scsi.AttrACA
	default:
		sc.Attr = scsi.AttrSimple
	}
	if extCDB {
		// CDBs longer than 16 bytes (32-byte variable-length CDBs) are
		// refused by the core; the first 16 bytes carry the opcode.
		sc.CDB = tk.cdb[:16]
	}
	sc.ExpectedLength = tk.expLen
	sc.DataOut, sc.DataIn = nil, nil
	sc.Status, sc.SenseLen, sc.DataInLen, sc.Residual, sc.ResidualKind, sc.Aborted = 0, 0, 0, 0, 0, false
	want := min(int(tk.expLen), c.maxXfr)
	switch {
	case cmd.Write():
		sc.Dir = scsi.DirOut
	case cmd.Read():
		sc.Dir = scsi.DirIn
	default:
		sc.Dir = scsi.DirNone
		want = 0
	}
	if cap(tk.buf) < want {
		b, err := c.x.buffer(tk, want)
		if err != nil {
			return err
		}
		tk.buf = b
	}
	tk.buf = tk.buf[:cap(tk.buf)]
	sc.Views = nil
	if sc.Dir == scsi.DirIn {
		sc.DataIn = tk.buf[:want]
		if c.views {
			sc.Views = tk.views[:]
		}
	}
	return nil
}

// startLocked moves a task whose CmdSN was reached on: collect data-out,
// or run it.
func (c *conn) startLocked(tk *task) {
	if tk.cmd.Dir == scsi.DirOut && (tk.got < tk.need || tk.unsol || tk.failed) {
		tk.state = taskData
		c.mu.Unlock()
		c.x.fetch(tk)
		c.mu.Lock()
		return
	}
	c.queueLocked(tk)
}

func (c *conn) queueLocked(tk *task) {
	tk.state = taskQueued
	// COMPARE AND WRITE and its kind may wait for zero-copy reads to be
	// sent, which the receive loop may have to see: a worker.
	// Commands a backstore.AsyncDisk runs are started there too
	// (scsi.Session.Start): they hold no goroutine while at the disk.
	if c.inline && (c.sess.runsInline(tk.lun) && !scsi.Exclusive(tk.cmd.CDB) || c.sess.scsi.CanStart(&tk.cmd)) {
		c.inlineQ = append(c.inlineQ, tk)
		return
	}
	c.pool.Submit(tk) // never blocks: the pool holds every slot
}

// runInline runs the tasks queued for the receive loop: commands on disks
// that never block (RAM) run without a hand-off to a worker.
func (c *conn) runInline() {
	for {
		c.mu.Lock()
		if len(c.inlineQ) == 0 {
			c.mu.Unlock()
			return
		}
		tk := c.inlineQ[0]
		copy(c.inlineQ, c.inlineQ[1:])
		c.inlineQ = c.inlineQ[:len(c.inlineQ)-1]
		c.mu.Unlock()
		c.run(tk, true)
	}
}

// dataReady is called by the transport when a task's data-out is in.
func (c *conn) dataReady(tk *task) {
	c.mu.Lock()
	if tk.state != taskData {
		c.mu.Unlock()
		return
	}
	if tk.dropped || c.closing {
		c.mu.Unlock()
		c.release(tk)
		return
	}
	c.queueLocked(tk)
	c.mu.Unlock()
}

// failData completes a task whose data-out was out of sequence with
// CHECK CONDITION, ABORTED COMMAND, DATA PHASE ERROR.
func (c *conn) failData(tk *task) {
	c.mu.Lock()
	if tk.state != taskData || tk.dropped || c.closing {
		c.mu.Unlock()
		return
	}
	tk.state = taskRespond
	c.mu.Unlock()
	asc := tk.failASC
	if asc == 0 {
		asc = 0x4b00 // DATA PHASE ERROR
	}
	setSense(&tk.cmd, scsi.KeyAbortedCommand, asc)
	c.sess.completed(tk)
	c.x.respond(tk, false)
}

// setSense completes a command with CHECK CONDITION and fixed-format sense
// data built here (for errors of the transport, not of the core).
func setSense(sc *scsi.Command, key scsi.SenseKey, asc scsi.ASC) {
	s := sc.Sense[:scsi.SenseFixedLen]
	clear(s)
	s[0], s[2], s[7], s[12], s[13] = 0x70, byte(key), scsi.SenseFixedLen-8, asc.Code(), asc.Qualifier()
	sc.Status, sc.SenseLen, sc.DataInLen, sc.Residual, sc.ResidualKind = scsi.StatusCheckCondition, scsi.SenseFixedLen, 0, 0, scsi.ResidualNone
}

// releaseHeldLocked starts held commands whose CmdSN came up.
func (c *conn) releaseHeldLocked() {
	for len(c.held) > 0 {
		tk, ok := c.held[c.win.ExpCmdSN]
		if !ok {
			return
		}
		delete(c.held, c.win.ExpCmdSN)
		c.win.Advance()
		if tk.dropped {
			c.mu.Unlock()
			c.release(tk)
			c.mu.Lock()
			continue
		}
		c.startLocked(tk)
	}
}

// runQueued runs a task on a worker.
func (c *conn) runQueued(tk *task) { c.run(tk, false) }

// run executes a queued task and sends its response.
func (c *conn) run(tk *task, inline bool) {
	c.mu.Lock()
	if tk.dropped || c.closing {
		c.mu.Unlock()
		c.release(tk)
		return
	}
	tk.state = taskExec
	c.mu.Unlock()
	c.async.Add(1)
	if c.sess.scsi.Start(&tk.cmd) {
		return // asyncDone follows
	}
	c.async.Done()
	c.sess.scsi.Execute(&tk.cmd)
	c.executed(tk, inline)
}

// asyncDone ends a task whose command scsi.Session.Start ran (the disk's
// goroutine, or the caller of Start).
func (c *conn) asyncDone(tk *task) {
	c.executed(tk, false)
	c.async.Done()
}

// executed sends the response of a task whose command completed.
func (c *conn) executed(tk *task, inline bool) {
	c.mu.Lock()
	if tk.cmd.Aborted || tk.dropped || c.closing {
		c.mu.Unlock()
		c.release(tk)
		return
	}
	tk.state = taskRespond
	c.mu.Unlock()
	c.sess.completed(tk)
	c.x.respond(tk, inline)
}

// responseFields returns the SCSI Response of a completed task, with the
// sense data (if any) encoded into tk.rsp; n is the data segment length.
func (c *conn) responseFields(tk *task) (iser.SCSIResponseFields, int) {
	sc := &tk.cmd
	f := iser.SCSIResponseFields{
		Response: iser.ResponseCompleted,
		Status:   uint8(sc.Status),
		ITT:      tk.itt,
	}
	switch sc.ResidualKind {
	case scsi.ResidualOverflow:
		f.Overflow, f.ResidualCount = true, sc.Residual
	case scsi.ResidualUnderflow:
		f.Underflow, f.ResidualCount = true, sc.Residual
	}
	n := 0
	if sc.SenseLen > 0 {
		n = len(iser.AppendSenseData(tk.rsp[:0], tk.sense[:sc.SenseLen]))
	}
	return f, n
}

// reject answers a PDU with a Reject carrying its header.
func (c *conn) reject(p iser.PDU, reason iser.RejectReason) {
	r := &ctl{advance: true}
	iser.Reject(r.hdr[:]).Encode(&iser.RejectFields{Reason: reason})
	r.data = append([]byte(nil), p.Header()...)
	c.x.send(r)
}

// rejectGrace bounds the wait for a Reject that ends the connection to go
// out.
const rejectGrace = time.Second

// rejectClose answers a PDU whose error ends the connection (ErrorRecovery
// Level 0) with a Reject carrying its header, as RFC 7143 section 7.2
// asks, and drops the connection once the Reject is sent, or after
// rejectGrace. The receive side must read nothing more.
func (c *conn) rejectClose(hdr []byte, reason iser.RejectReason, why string) {
	c.setEnd(endProtocol)
	c.log.Info("iscsi: protocol error, closing the connection", "reason", reason, "err", why)
	r := &ctl{advance: true, close: true}
	iser.Reject(r.hdr[:]).Encode(&iser.RejectFields{Reason: reason})
	r.data = append([]byte(nil), hdr...)
	c.x.send(r)
	t := time.AfterFunc(rejectGrace, func() { c.drop(why) })
	go func() {
		<-c.done
		t.Stop()
	}()
}

// onNOPOut answers a ping.
func (c *conn) onNOPOut(p iser.PDU) {
	n := iser.NOPOut(p.BHS)
	inWindow := c.consumeSN(n.CmdSN(), p.BHS.Immediate())
	if p.BHS.ITT() == iser.ReservedTag {
		// The answer to a NOP-In of ours (immediate, RFC 7143
		// section 11.18; taken even when it is not).
		c.nopAnswered(n.TTT())
		return
	}
	if !inWindow {
		return
	}
	r := &ctl{advance: true}
	iser.NOPIn(r.hdr[:]).Encode(&iser.NOPInFields{LUN: p.BHS.LUN(), ITT: p.BHS.ITT(), TTT: iser.ReservedTag})
	if len(p.Data) > 0 {
		r.data = append([]byte(nil), p.Data...)
	}
	c.x.send(r)
}

// onText answers a Text Request.
func (c *conn) onText(p iser.PDU) {
	req := iser.TextRequest(p.BHS)
	if !c.consumeSN(req.CmdSN(), p.BHS.Immediate()) {
		return
	}
	if c.text.Targets == nil {
		initiator := c.sess.initiator
		local := c.localAddr()
		c.text.Targets = func(q string) []iser.TargetRecord { return c.t.sendTargets(initiator, local, q) }
	}
	out := make([]byte, c.params.MaxSendDataSegmentLength)
	f, n, err := c.text.Respond(req, p.Data, out)
	if err != nil {
		c.log.Debug("iscsi: bad text request", "err", err)
		c.reject(p, iser.RejectProtocolError)
		return
	}
	r := &ctl{advance: true, data: out[:n]}
	iser.TextResponse(r.hdr[:]).Encode(&f)
	c.x.send(r)
}

// onLogout answers a Logout Request and closes the connection after the
// response.
func (c *conn) onLogout(p iser.PDU) {
	req := iser.LogoutRequest(p.BHS)
	c.consumeSN(req.CmdSN(), p.BHS.Immediate())
	resp := iser.LogoutSuccess
	if req.Reason() == iser.LogoutRecovery {
		resp = iser.LogoutRecoveryUnsupported
	} else if req.Reason() == iser.LogoutCloseConnection && req.CID() != c.cid() {
		resp = iser.LogoutCIDNotFound
	}
	if resp == iser.LogoutSuccess {
		c.setEnd(endLogout)
		c.t.stats.logout.Add(1)
		// The I_T nexus loss completes its SCSI effects (reservations
		// released, tasks aborted: SAM-5 6.3.4) before the response
		// tells the initiator the session is over, so another
		// initiator acting on that sees them done.
		if c.sess != nil && c.sess.scsi != nil {
			c.sess.scsi.Close()
		}
	}
	r := &ctl{advance: true, close: resp == iser.LogoutSuccess}
	iser.LogoutResponse(r.hdr[:]).Encode(&iser.LogoutResponseFields{Response: resp, ITT: p.BHS.ITT()})
	c.x.send(r)
}

// cid is the connection's CID (MaxConnections 1: the login's).
func (c *conn) cid() uint16 { return c.connID }

func (c *conn) localAddr() net.Addr { return c.x.localAddr() }

// sendAsync sends an Asynchronous Message; one announcing that the target
// drops the connection drops it once sent. within is the time a "target
// requests logout" gives the initiator (Parameter3, in seconds: at least
// one, logoutGrace when 0).
func (c *conn) sendAsync(ev iser.AsyncEvent, within time.Duration) {
	r := &ctl{advance: true, close: ev == iser.AsyncDroppingConnection || ev == iser.AsyncDroppingAllConnections}
	f := iser.AsyncMessageFields{Event: ev}
	switch ev {
	case iser.AsyncRequestLogout:
		if within <= 0 {
			within = logoutGrace
		}
		f.Parameter3 = uint16(min(max((within+time.Second-1)/time.Second, 1), 3600))
	case iser.AsyncDroppingConnection, iser.AsyncDroppingAllConnections:
		f.Parameter2, f.Parameter3 = 2, 20 // Time2Wait, Time2Retain
	}
	iser.AsyncMessage(r.hdr[:]).Encode(&f)
	c.x.send(r)
}

// onTMF runs a task management request on its own goroutine: it may wait
// for aborted commands, which the workers must be free to finish.
func (c *conn) onTMF(p iser.PDU) {
	req := iser.TaskMgmtRequest(p.BHS)
	f := req.Fields()
	if !c.consumeSN(f.CmdSN, f.Immediate) {
		return
	}
	c.tmfWG.Add(1)
	go func() {
		defer c.tmfWG.Done()
		resp := c.tmf(f)
		// A cold reset ends the connection once its response is sent.
		cold := f.Function == iser.TMFTargetColdReset && resp == iser.TMFComplete
		if cold {
			c.setEnd(endReset)
		}
		r := &ctl{advance: true, close: cold}
		iser.TaskMgmtResponse(r.hdr[:]).Encode(&iser.TaskMgmtResponseFields{Response: resp, ITT: f.ITT})
		c.x.send(r)
	}()
}

func (c *conn) tmf(f iser.TaskMgmtRequestFields) uint8 {
	if c.sess.scsi == nil {
		return iser.TMFRejected
	}
	var lb [8]byte
	binary.BigEndian.PutUint64(lb[:], f.LUN)
	lun, err := scsi.DecodeLUN(lb)
	if err != nil {
		lun = scsi.MaxLUN + 1
	}
	var fn scsi.TMF
	switch f.Function {
	case iser.TMFAbortTask:
		fn = scsi.TMFAbortTask
	case iser.TMFAbortTaskSet:
		fn = scsi.TMFAbortTaskSet
	case iser.TMFClearACA:
		fn = scsi.TMFClearACA
	case iser.TMFClearTaskSet:
		fn = scsi.TMFClearTaskSet
	case iser.TMFLogicalUnitReset:
		fn = scsi.TMFLUNReset
	case iser.TMFTargetWarmReset:
		fn = scsi.TMFTargetWarmReset
	case iser.TMFTargetColdReset:
		fn = scsi.TMFTargetColdReset
	case iser.TMFTaskReassign:
		return iser.TMFNoFailover
	default:
		return iser.TMFNotSupported
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if fn == scsi.TMFAbortTask {
		c.mu.Lock()
		tk, ok := c.byITT[f.ReferencedTaskTag]
		if !ok || tk.state == taskFree || tk.state == taskRespond || tk.rawLUN != f.LUN {
			w := c.win
			c.mu.Unlock()
			// RFC 7143 section 11.5.1: a task never received whose
			// RefCmdSN is in the window counts as aborted.
			if iser.SNGreaterEq(f.RefCmdSN, w.ExpCmdSN) && iser.SNLess(f.RefCmdSN, f.CmdSN) {
				return iser.TMFComplete
			}
			return iser.TMFNoTask
		}
		if tk.state != taskExec {
			now := c.dropLocked(tk)
			c.mu.Unlock()
			if now {
				c.release(tk)
			}
			return iser.TMFComplete
		}
		c.mu.Unlock()
		return tmfCode(c.sess.scsi.TaskManagement(ctx, fn, lun, uint64(f.ReferencedTaskTag)))
	}
	// Set-wide functions: drop this nexus's tasks that have not reached
	// Execute yet, then let the core abort the running ones.
	switch fn {
	case scsi.TMFAbortTaskSet, scsi.TMFClearTaskSet, scsi.TMFLUNReset, scsi.TMFTargetWarmReset, scsi.TMFTargetColdReset:
		all := fn == scsi.TMFTargetWarmReset || fn == scsi.TMFTargetColdReset
		var drop []*task
		c.mu.Lock()
		for i := range c.tasks {
			tk := &c.tasks[i]
			switch tk.state {
			case taskHeld, taskData, taskQueued:
				if (all || tk.rawLUN == f.LUN) && !tk.dropped && c.dropLocked(tk) {
					drop = append(drop, tk)
				}
			}
		}
		c.mu.Unlock()
		for _, tk := range drop {
			c.release(tk)
		}
	}
	return tmfCode(c.sess.scsi.TaskManagement(ctx, fn, lun, uint64(f.ReferencedTaskTag)))
}

// dropLocked aborts a task that has not reached Execute. It reports
// whether the caller must release the slot (after unlocking c.mu); else a
// worker or the transport frees it.
func (c *conn) dropLocked(tk *task) bool {
	tk.dropped = true
	switch tk.state {
	case taskHeld:
		delete(c.held, tk.cmdSN)
		tk.state = taskQueued // no longer findable
		return true
	case taskData:
		if c.x.fetchAbort(tk) {
			tk.state = taskQueued
			return true
		}
	}
	return false
}

func tmfCode(r scsi.TMFResponse) uint8 {
	switch r {
	case scsi.TMFComplete, scsi.TMFSucceeded:
		return iser.TMFComplete
	case scsi.TMFTaskNotFound:
		return iser.TMFNoTask
	case scsi.TMFIncorrectLUN:
		return iser.TMFNoLUN
	case scsi.TMFRejected:
		return iser.TMFNotSupported
	}
	return iser.TMFRejected
}
