package initiator

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/scsi"
)

// Defaults of Config.
const (
	DefaultPort           = 3260
	DefaultQueueDepth     = 128
	DefaultMaxTransfer    = 1 << 20
	DefaultConnectTimeout = 10 * time.Second
	DefaultCommandTimeout = 30 * time.Second
)

// mgmtSlots are the task slots kept for task management, NOP, Text and
// Logout, so that they never wait behind SCSI commands.
const mgmtSlots = 4

// Config is what an initiator brings to a session. InitiatorName is
// required; Provider is required for iSER.
type Config struct {
	// InitiatorName is the initiator's iSCSI name (iqn. form).
	InitiatorName  string
	InitiatorAlias string
	// CHAP, if set, is the identity the initiator logs in with;
	// MutualCHAP, if also set, the identity the target must prove.
	CHAP       *iser.CHAPSecret
	MutualCHAP *iser.CHAPSecret
	// Provider is the RDMA provider iSER sessions run on.
	Provider rdma.Provider
	// QueueDepth is the number of SCSI commands in flight (default 128);
	// the target's command window may lower it.
	QueueDepth int
	// MaxTransfer caps the size of one READ or WRITE (default 1 MiB); the
	// target's block limits may lower it.
	MaxTransfer int
	// HeaderDigest and DataDigest ask for CRC32C digests on iSCSI/TCP.
	HeaderDigest, DataDigest bool
	// ISID is the initiator part of the session identifier; zero picks a
	// random one (type "random", RFC 7143 section 11.12.5).
	ISID iser.ISID
	// ConnectTimeout bounds connecting and logging in (default 10 s).
	ConnectTimeout time.Duration
	// CommandTimeout bounds each command (default 30 s). A command that
	// times out fails the session: everything in flight completes with
	// an error.
	CommandTimeout time.Duration
	// Logger receives session events; nil discards them.
	Logger *slog.Logger
}

func (cfg *Config) defaults() error {
	if cfg.InitiatorName == "" {
		return fmt.Errorf("iscsi initiator: no initiator name")
	}
	if cfg.QueueDepth == 0 {
		cfg.QueueDepth = DefaultQueueDepth
	}
	if cfg.QueueDepth < 1 || cfg.QueueDepth > 1024 {
		return fmt.Errorf("iscsi initiator: queue depth %d outside 1..1024", cfg.QueueDepth)
	}
	if cfg.MaxTransfer == 0 {
		cfg.MaxTransfer = DefaultMaxTransfer
	}
	if cfg.MaxTransfer < 4096 || cfg.MaxTransfer > 16<<20 {
		return fmt.Errorf("iscsi initiator: max transfer %d outside 4 KiB..16 MiB", cfg.MaxTransfer)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.CommandTimeout == 0 {
		cfg.CommandTimeout = DefaultCommandTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ISID == (iser.ISID{}) {
		rand.Read(cfg.ISID[3:])
		cfg.ISID[0] = 0x80 // type 10b: random
	}
	return nil
}

// settings returns what the initiator offers.
func (cfg *Config) settings() iser.Settings {
	st := iser.DefaultSettings()
	st.HeaderDigest = []iser.Digest{iser.DigestNone}
	st.DataDigest = []iser.Digest{iser.DigestNone}
	if cfg.HeaderDigest {
		st.HeaderDigest = []iser.Digest{iser.DigestCRC32C, iser.DigestNone}
	}
	if cfg.DataDigest {
		st.DataDigest = []iser.Digest{iser.DigestCRC32C, iser.DigestNone}
	}
	st.MaxBurstLength = uint32(max(cfg.MaxTransfer, 512))
	st.FirstBurstLength = min(st.FirstBurstLength, st.MaxBurstLength)
	return st
}

// Slot kinds.
const (
	kindCmd uint8 = iota
	kindTMF
	kindText
	kindLogout
	kindNOP
)

// Slot states: free (on a free list), busy (owned by a submitter),
// flight (owned by the receive side until completion).
const (
	slotFree uint32 = iota
	slotBusy
	slotFlight
)

// slot is one task context: an ITT and everything a command needs, allocated
// once per session.
type slot struct {
	s     *Session
	idx   int
	gen   uint16
	itt   uint32
	kind  uint8
	state atomic.Uint32
	// issued is when the PDU was handed to the link (UnixNano), 0 when
	// idle: the watchdog reads it.
	issued atomic.Int64

	// Request.
	hdr    [iser.BHSSize]byte // prepared BHS (CmdSN and ExpStatSN filled at send)
	imm    bool
	lun    uint64
	read   bool
	write  bool
	expLen uint32
	buf    []byte // data buffer (TCP; also iSER with mr)
	mr     rdma.MR
	mrOff  int
	data   []byte // data segment of a control PDU

	// What an in-flight slot still waits for (wantSend, wantResp).
	pending uint8
	// tx counts the TCP sender's items (the command, Data-Out answering
	// an R2T) that still read the slot, plus txResp once the receive side
	// is done with it: the slot completes when it is exactly txResp, by
	// whichever side gets it there (see responded and tcpLink.release),
	// so that its ITT, buffer and data pointer are not reused, nor the
	// caller's buffer handed back, while the sender still sends from them.
	tx atomic.Int32

	// TCP transfer state.
	r2tSN uint32

	// Outcome.
	response uint8
	status   uint8
	sense    [scsi.SenseBufferLen]byte
	senseLen int
	resid    uint32
	over     bool
	under    bool
	dataIn   uint32
	rspData  []byte
	err      error

	// Delivery.
	req     *blockdev.Request
	dev     *Device
	op      blockdev.Op
	retries int
	done    chan struct{}
}

// link is a transport: iSCSI/TCP or iSER.
type link interface {
	// submit sends a prepared slot's PDU (and its data). It does not
	// block on the network; errors mean the connection is gone.
	submit(sl *slot) error
	// finished releases what the transport held for a completed slot
	// (iSER: its registration key, plain memory registered for it).
	finished(sl *slot)
	// close ends the connection; the receive side then sweeps.
	close()
}

// Session is a logged-in iSCSI session (one connection) over TCP or iSER.
// Its methods are safe for concurrent use.
type Session struct {
	cfg    Config
	log    *slog.Logger
	tr     iser.Transport
	addr   string
	params iser.Params
	tsih   uint16
	lk     link

	mu        sync.Mutex
	winCond   sync.Cond
	win       iser.InitiatorWindow
	expStatSN uint32
	text      []byte // continued Text Response

	slots  []slot
	ioFree chan int
	mgFree chan int
	depth  int

	deadOnce  sync.Once
	dead      chan struct{}
	deadErr   error
	loggedOut atomic.Bool
	wdStop    chan struct{}
}

func newSession(cfg Config, tr iser.Transport, addr string, ls iser.Session) *Session {
	s := &Session{cfg: cfg, log: cfg.Logger, tr: tr, addr: addr, params: ls.Params, tsih: ls.TSIH,
		dead: make(chan struct{}), wdStop: make(chan struct{})}
	s.winCond.L = &s.mu
	s.win = iser.InitiatorWindow{CmdSN: ls.CmdSN, ExpCmdSN: ls.CmdWindow.ExpCmdSN, MaxCmdSN: ls.CmdWindow.MaxCmdSN}
	s.expStatSN = ls.StatSN
	window := int(ls.CmdWindow.MaxCmdSN - ls.CmdWindow.ExpCmdSN + 1)
	if window <= 0 || window > 1<<16 {
		window = 1
	}
	s.depth = max(1, min(cfg.QueueDepth, window))
	n := s.depth + mgmtSlots
	s.slots = make([]slot, n)
	s.ioFree = make(chan int, s.depth)
	s.mgFree = make(chan int, mgmtSlots)
	for i := range s.slots {
		sl := &s.slots[i]
		sl.s, sl.idx = s, i
		sl.done = make(chan struct{}, 1)
		if i < s.depth {
			s.ioFree <- i
		} else {
			s.mgFree <- i
		}
	}
	return s
}

// Params returns the negotiated parameters.
func (s *Session) Params() iser.Params { return s.params }

// TSIH returns the target session identifying handle.
func (s *Session) TSIH() uint16 { return s.tsih }

// Transport returns the session's transport.
func (s *Session) Transport() iser.Transport { return s.tr }

// Addr returns the portal address.
func (s *Session) Addr() string { return s.addr }

// QueueDepth is the number of SCSI commands the session keeps in flight.
func (s *Session) QueueDepth() int { return s.depth }

// Done is closed when the session failed or was closed.
func (s *Session) Done() <-chan struct{} { return s.dead }

// Err tells why the session ended (nil while it works).
func (s *Session) Err() error {
	select {
	case <-s.dead:
		return s.deadErr
	default:
		return nil
	}
}

// fail ends the session with err: the link closes and everything in
// flight completes with the error (by the link's receive side).
func (s *Session) fail(err error) {
	s.deadOnce.Do(func() {
		s.deadErr = err
		close(s.dead)
		s.mu.Lock()
		s.winCond.Broadcast()
		s.mu.Unlock()
		if s.lk != nil {
			s.lk.close()
		}
	})
}

// acquire takes a slot of the I/O or management pool.
func (s *Session) acquire(ctx context.Context, mgmt bool) (*slot, error) {
	pool := s.ioFree
	if mgmt {
		pool = s.mgFree
	}
	var cdone <-chan struct{}
	if ctx != nil {
		cdone = ctx.Done()
	}
	select {
	case <-s.dead:
		return nil, s.closedErr()
	default:
	}
	select {
	case i := <-pool:
		sl := &s.slots[i]
		sl.state.Store(slotBusy)
		sl.gen++
		sl.itt = uint32(sl.idx) | uint32(sl.gen&0x7fff)<<16
		sl.err, sl.response, sl.status, sl.senseLen, sl.resid, sl.over, sl.under, sl.dataIn = nil, 0, 0, 0, 0, false, false, 0
		sl.rspData, sl.data, sl.buf, sl.mr, sl.mrOff, sl.req, sl.dev = nil, nil, nil, nil, 0, nil, nil
		sl.r2tSN, sl.retries, sl.imm = 0, 0, false
		return sl, nil
	case <-s.dead:
		return nil, s.closedErr()
	case <-cdone:
		return nil, ctx.Err()
	}
}

// put returns a slot to its pool.
func (s *Session) put(sl *slot) {
	sl.req, sl.dev, sl.buf, sl.data, sl.rspData = nil, nil, nil, nil, nil
	sl.state.Store(slotFree)
	if sl.idx < s.depth {
		s.ioFree <- sl.idx
	} else {
		s.mgFree <- sl.idx
	}
}

// closedErr is what requests on a dead session fail with.
func (s *Session) closedErr() error {
	<-s.dead
	if errors.Is(s.deadErr, blockdev.ErrClosed) {
		return s.deadErr
	}
	return &ConnError{Addr: s.addr, Err: s.deadErr}
}

// slotByITT finds the in-flight slot of an ITT.
func (s *Session) slotByITT(itt uint32) *slot {
	idx := int(itt & 0xffff)
	if idx >= len(s.slots) {
		return nil
	}
	sl := &s.slots[idx]
	if sl.itt != itt || sl.state.Load() != slotFlight {
		return nil
	}
	return sl
}

// nextCmdSN waits for the command window to admit a command and returns
// its CmdSN with the ExpStatSN to send. It fails when the session dies.
func (s *Session) nextCmdSN() (cmdSN, expStatSN uint32, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for !s.win.CanSend() {
		select {
		case <-s.dead:
			return 0, 0, s.deadErr
		default:
		}
		s.winCond.Wait()
	}
	return s.win.Next(), s.expStatSN, nil
}

// tryCmdSN takes a CmdSN if the window admits a command now.
func (s *Session) tryCmdSN() (cmdSN, expStatSN uint32, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.win.CanSend() {
		return 0, 0, false
	}
	return s.win.Next(), s.expStatSN, true
}

// waitWindow waits until the window admits a command or the session dies.
func (s *Session) waitWindow() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for !s.win.CanSend() {
		select {
		case <-s.dead:
			return s.closedErr()
		default:
		}
		s.winCond.Wait()
	}
	return nil
}

// currentSN returns the CmdSN an immediate PDU carries and the ExpStatSN.
func (s *Session) currentSN() (cmdSN, expStatSN uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.win.CmdSN, s.expStatSN
}

// stamp fills CmdSN and ExpStatSN of a request BHS (offsets 24 and 28 in
// every initiator PDU that has them).
func stamp(hdr []byte, cmdSN, expStatSN uint32) {
	binary.BigEndian.PutUint32(hdr[24:], cmdSN)
	binary.BigEndian.PutUint32(hdr[28:], expStatSN)
}

// update takes the window and StatSN of a target PDU.
func (s *Session) update(h iser.BHS) {
	exp := binary.BigEndian.Uint32(h[iser.OffsetExpCmdSN:])
	mx := binary.BigEndian.Uint32(h[iser.OffsetMaxCmdSN:])
	statSN := binary.BigEndian.Uint32(h[iser.OffsetStatSN:])
	op := h.Opcode()
	status := op != iser.OpR2T && !(op == iser.OpDataIn && h.Flags()&iser.DataFlagStatus == 0) &&
		!(op == iser.OpNOPIn && h.ITT() == iser.ReservedTag)
	s.mu.Lock()
	before := s.win.MaxCmdSN
	s.win.Update(exp, mx)
	if status && iser.SNGreaterEq(statSN, s.expStatSN) {
		s.expStatSN = statSN + 1
	}
	if s.win.MaxCmdSN != before {
		s.winCond.Broadcast()
	}
	s.mu.Unlock()
}

// handle processes a target PDU (both transports; Data-In and R2T are the
// TCP link's). It reports a protocol error that ends the session.
func (s *Session) handle(p iser.PDU) error {
	h := p.BHS
	s.update(h)
	switch h.Opcode() {
	case iser.OpSCSIResponse:
		sl := s.slotByITT(h.ITT())
		if sl == nil {
			return fmt.Errorf("SCSI Response for ITT %#x, which is not outstanding", h.ITT())
		}
		r := iser.SCSIResponse(h).Fields()
		sl.response, sl.status = r.Response, r.Status
		sl.over, sl.under, sl.resid = r.Overflow, r.Underflow, r.ResidualCount
		if sense := iser.SenseData(p.Data); len(sense) > 0 {
			sl.senseLen = copy(sl.sense[:], sense)
		}
		s.responded(sl)
	case iser.OpNOPIn:
		if h.ITT() == iser.ReservedTag {
			if ttt := iser.NOPIn(h).TTT(); ttt != iser.ReservedTag {
				s.pingReply(h.LUN(), ttt, p.Data)
			}
			return nil
		}
		if sl := s.slotByITT(h.ITT()); sl != nil && sl.kind == kindNOP {
			sl.rspData = append(sl.rspData[:0], p.Data...)
			s.responded(sl)
		}
	case iser.OpTaskMgmtResponse:
		sl := s.slotByITT(h.ITT())
		if sl == nil || sl.kind != kindTMF {
			return fmt.Errorf("TMF Response for ITT %#x, which is not outstanding", h.ITT())
		}
		sl.response = iser.TaskMgmtResponse(h).Response()
		s.responded(sl)
	case iser.OpTextResponse:
		sl := s.slotByITT(h.ITT())
		if sl == nil || sl.kind != kindText {
			return fmt.Errorf("Text Response for ITT %#x, which is not outstanding", h.ITT())
		}
		tr := iser.TextResponse(h)
		sl.rspData = append(sl.rspData, p.Data...)
		if len(sl.rspData) > iser.MaxNegotiationText {
			return fmt.Errorf("Text Response longer than %d bytes", iser.MaxNegotiationText)
		}
		if tr.Continue() || !h.Final() {
			s.textContinue(sl, tr.TTT())
			return nil
		}
		s.responded(sl)
	case iser.OpLogoutResponse:
		sl := s.slotByITT(h.ITT())
		if sl == nil || sl.kind != kindLogout {
			return fmt.Errorf("Logout Response for ITT %#x, which is not outstanding", h.ITT())
		}
		sl.response = iser.LogoutResponse(h).Response()
		s.responded(sl)
	case iser.OpAsyncMessage:
		ev := iser.AsyncMessage(h).Event()
		s.log.Info("iscsi initiator: asynchronous message", "event", ev)
		switch ev {
		case iser.AsyncRequestLogout:
			go s.Logout(context.Background())
		case iser.AsyncDroppingConnection, iser.AsyncDroppingAllConnections:
			return fmt.Errorf("the target is dropping the connection (async event %d)", ev)
		}
	case iser.OpReject:
		reason := iser.Reject(h).Reason()
		if len(p.Data) >= iser.BHSSize {
			if sl := s.slotByITT(iser.BHS(p.Data).ITT()); sl != nil {
				sl.err = fmt.Errorf("the target rejected the PDU (reason %#x)", uint8(reason))
				s.responded(sl)
				return nil
			}
		}
		return fmt.Errorf("the target sent a Reject (reason %#x)", uint8(reason))
	default:
		return fmt.Errorf("unexpected %v PDU", h.Opcode())
	}
	return nil
}

// txResp is the bit of slot.tx the receive side sets when it is done.
const txResp = 1 << 30

// responded is called when a slot's response is in; the link decides
// whether the slot is complete (iSER also waits for its send completion,
// iSCSI/TCP for its sender to stop reading the slot).
func (s *Session) responded(sl *slot) {
	if sl.pending&wantResp == 0 {
		return
	}
	sl.pending &^= wantResp
	if sl.kind == kindLogout {
		// The target may drop the connection right after its Logout
		// Response, before our own send completion shows up.
		sl.pending = 0
	}
	if sl.pending == 0 && sl.tx.Add(txResp) == txResp {
		s.finish(sl)
	}
}

// Pending bits of an in-flight slot.
const (
	wantSend uint8 = 1 << iota // the local send completion (iSER)
	wantResp                   // the target's response
)

// finish delivers a completed slot (receive side).
func (s *Session) finish(sl *slot) {
	sl.issued.Store(0)
	s.lk.finished(sl)
	if sl.dev != nil && sl.req != nil {
		sl.dev.complete(sl)
		return
	}
	sl.state.Store(slotBusy)
	sl.done <- struct{}{}
}

// sweep completes every in-flight slot of a dead session with its error;
// a slot whose response was in but that its sender held (it stopped
// before it was done) completes with its response. The link's sender has
// stopped.
func (s *Session) sweep() {
	err := s.closedErr()
	for i := range s.slots {
		sl := &s.slots[i]
		if sl.state.Load() != slotFlight {
			continue
		}
		switch {
		case sl.pending != 0:
			sl.err = err
			sl.pending = 0
			s.finish(sl)
		case sl.tx.Load() > txResp:
			s.finish(sl)
		}
	}
}

// post hands a prepared slot to the link. On error the slot is the
// caller's again.
func (s *Session) post(sl *slot) error {
	sl.pending = wantResp
	if s.tr == iser.TransportISER {
		sl.pending |= wantSend
	}
	sl.issued.Store(time.Now().UnixNano())
	sl.tx.Store(0)
	sl.state.Store(slotFlight)
	if err := s.lk.submit(sl); err != nil {
		if sl.state.CompareAndSwap(slotFlight, slotBusy) {
			sl.issued.Store(0)
			return err
		}
		return nil // the sweep completed it
	}
	return nil
}

// wait waits for a synchronous slot.
func (s *Session) wait(ctx context.Context, sl *slot) error {
	var cdone <-chan struct{}
	if ctx != nil {
		cdone = ctx.Done()
	}
	t := time.NewTimer(s.cfg.CommandTimeout)
	defer t.Stop()
	select {
	case <-sl.done:
	case <-cdone:
		s.fail(fmt.Errorf("command abandoned: %w", ctx.Err()))
		<-sl.done
	case <-t.C:
		s.fail(fmt.Errorf("no response in %v: %w", s.cfg.CommandTimeout, ErrTimeout))
		<-sl.done
	}
	return sl.err
}

// watchdog fails the session when a command is overdue.
func (s *Session) watchdog() {
	tick := time.NewTicker(min(s.cfg.CommandTimeout/4, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-s.dead:
			return
		case <-s.wdStop:
			return
		}
		now := time.Now().UnixNano()
		for i := range s.slots {
			if t := s.slots[i].issued.Load(); t != 0 && now-t > int64(s.cfg.CommandTimeout) {
				s.fail(fmt.Errorf("a command got no response in %v: %w", s.cfg.CommandTimeout, ErrTimeout))
				return
			}
		}
	}
}

// Command is one SCSI command run synchronously with plain memory (for
// tools and tests; the I/O path is Device).
type Command struct {
	LUN uint64
	CDB []byte // at most 16 bytes
	// DataIn receives the data-in (read commands); DataOut is the
	// data-out (write commands). At most one of them.
	DataIn  []byte
	DataOut []byte
	Attr    iser.TaskAttr

	// Outcome.
	Status   scsi.Status
	Sense    []byte // a copy of the sense data, nil without
	DataLen  int    // data-in bytes received
	Residual uint32
	Overflow bool
	Underflw bool
}

// Execute runs a command and waits for its status. A SCSI status other
// than GOOD is not an error: see cmd.Status and cmd.Sense (StatusError
// wraps them for callers that want one). Errors are transport failures.
func (s *Session) Execute(ctx context.Context, cmd *Command) error {
	if len(cmd.CDB) == 0 || len(cmd.CDB) > 16 {
		return fmt.Errorf("iscsi: CDB of %d bytes (1 to 16 supported)", len(cmd.CDB))
	}
	if len(cmd.DataIn) > 0 && len(cmd.DataOut) > 0 {
		return fmt.Errorf("iscsi: bidirectional commands are not supported")
	}
	sl, err := s.acquire(ctx, false)
	if err != nil {
		return err
	}
	sl.kind, sl.lun = kindCmd, cmd.LUN
	sl.read, sl.write = len(cmd.DataIn) > 0, len(cmd.DataOut) > 0
	switch {
	case sl.read:
		sl.buf = cmd.DataIn
	case sl.write:
		sl.buf = cmd.DataOut
	}
	sl.expLen = uint32(len(sl.buf))
	var cdb [16]byte
	copy(cdb[:], cmd.CDB)
	iser.SCSICommand(sl.hdr[:]).Encode(&iser.SCSICommandFields{Final: true, Read: sl.read, Write: sl.write, Attr: cmd.Attr,
		LUN: encodeLUN(cmd.LUN), ITT: sl.itt, ExpectedDataTransferLength: sl.expLen, CDB: cdb})
	if err := s.post(sl); err != nil {
		s.put(sl)
		return err
	}
	err = s.wait(ctx, sl)
	if err == nil && sl.response != iser.ResponseCompleted {
		err = fmt.Errorf("iscsi: the target failed the command (response %#x)", sl.response)
	}
	cmd.Status = scsi.Status(sl.status)
	cmd.Sense = nil
	if sl.senseLen > 0 {
		cmd.Sense = append([]byte(nil), sl.sense[:sl.senseLen]...)
	}
	cmd.DataLen = int(sl.dataIn)
	if sl.read && s.tr == iser.TransportISER && err == nil {
		cmd.DataLen = len(cmd.DataIn)
		if sl.under {
			cmd.DataLen -= int(min(sl.resid, uint32(len(cmd.DataIn))))
		}
	}
	cmd.Residual, cmd.Overflow, cmd.Underflw = sl.resid, sl.over, sl.under
	s.put(sl)
	return err
}

// encodeLUN returns the wire LUN field of a LUN number.
func encodeLUN(n uint64) uint64 {
	b := scsi.EncodeLUN(min(n, scsi.MaxLUN))
	return binary.BigEndian.Uint64(b[:])
}

// TaskManagement sends a task management function request (immediate)
// and returns the target's response code (iser.TMFComplete...). refITT
// names the task of ABORT TASK.
func (s *Session) TaskManagement(ctx context.Context, fn iser.TMFunction, lun uint64, refITT uint32) (uint8, error) {
	sl, err := s.acquire(ctx, true)
	if err != nil {
		return 0, err
	}
	defer s.put(sl)
	sl.kind, sl.imm = kindTMF, true
	ref := iser.ReservedTag
	var refSN uint32
	if fn == iser.TMFAbortTask {
		ref = refITT
		if t := s.slotByITT(refITT); t != nil {
			refSN = binary.BigEndian.Uint32(t.hdr[24:])
		}
	}
	iser.TaskMgmtRequest(sl.hdr[:]).Encode(&iser.TaskMgmtRequestFields{Immediate: true, Function: fn, LUN: encodeLUN(lun),
		ITT: sl.itt, ReferencedTaskTag: ref, RefCmdSN: refSN})
	if err := s.post(sl); err != nil {
		return 0, err
	}
	if err := s.wait(ctx, sl); err != nil {
		return 0, err
	}
	return sl.response, nil
}

// Ping sends a NOP-Out and waits for the NOP-In.
func (s *Session) Ping(ctx context.Context, data []byte) error {
	sl, err := s.acquire(ctx, true)
	if err != nil {
		return err
	}
	defer s.put(sl)
	sl.kind, sl.imm, sl.data = kindNOP, true, data
	iser.NOPOut(sl.hdr[:]).Encode(&iser.NOPOutFields{Immediate: true, ITT: sl.itt, TTT: iser.ReservedTag})
	if err := s.post(sl); err != nil {
		return err
	}
	if err := s.wait(ctx, sl); err != nil {
		return err
	}
	if string(sl.rspData) != string(data) {
		return fmt.Errorf("iscsi: NOP-In echoed %d bytes, sent %d", len(sl.rspData), len(data))
	}
	return nil
}

// pingReply answers a target's NOP-In ping (receive side; must not block).
func (s *Session) pingReply(lun uint64, ttt uint32, data []byte) {
	select {
	case i := <-s.mgFree:
		sl := &s.slots[i]
		sl.state.Store(slotBusy)
		sl.kind, sl.imm, sl.data, sl.itt = kindNOP, true, append([]byte(nil), data...), iser.ReservedTag
		iser.NOPOut(sl.hdr[:]).Encode(&iser.NOPOutFields{Immediate: true, LUN: lun, ITT: iser.ReservedTag, TTT: ttt})
		// No response comes: the link frees it once sent.
		sl.pending = 0
		sl.tx.Store(0)
		sl.state.Store(slotFlight)
		if err := s.lk.submit(sl); err != nil {
			s.fail(err)
		}
	default:
		s.log.Debug("iscsi initiator: no slot to answer a NOP-In ping")
	}
}

// SendTargets asks the target for its targets ("All", or one name) with
// a Text Request.
func (s *Session) SendTargets(ctx context.Context, query string) ([]iser.TargetRecord, error) {
	text, err := s.textRequest(ctx, iser.AppendKeyValue(nil, "SendTargets", query))
	if err != nil {
		return nil, err
	}
	return iser.ParseSendTargets(text)
}

func (s *Session) textRequest(ctx context.Context, text []byte) ([]byte, error) {
	sl, err := s.acquire(ctx, true)
	if err != nil {
		return nil, err
	}
	defer s.put(sl)
	sl.kind, sl.imm, sl.data = kindText, true, text
	iser.TextRequest(sl.hdr[:]).Encode(&iser.TextRequestFields{Immediate: true, Final: true, ITT: sl.itt, TTT: iser.ReservedTag})
	if err := s.post(sl); err != nil {
		return nil, err
	}
	if err := s.wait(ctx, sl); err != nil {
		return nil, err
	}
	return append([]byte(nil), sl.rspData...), nil
}

// textContinue asks for the rest of a long Text Response (receive side).
func (s *Session) textContinue(sl *slot, ttt uint32) {
	sl.data = nil
	iser.TextRequest(sl.hdr[:]).Encode(&iser.TextRequestFields{Immediate: true, Final: true, ITT: sl.itt, TTT: ttt})
	if s.tr == iser.TransportISER {
		sl.pending |= wantSend
	}
	if err := s.lk.submit(sl); err != nil {
		s.fail(err)
	}
}

// Logout logs the session out (close the session) and closes it.
func (s *Session) Logout(ctx context.Context) error {
	if !s.loggedOut.CompareAndSwap(false, true) {
		return nil
	}
	defer s.Close()
	sl, err := s.acquire(ctx, true)
	if err != nil {
		return err
	}
	defer s.put(sl)
	sl.kind, sl.imm = kindLogout, true
	iser.LogoutRequest(sl.hdr[:]).Encode(&iser.LogoutRequestFields{Immediate: true, Reason: iser.LogoutCloseSession, ITT: sl.itt, CID: 0})
	if err := s.post(sl); err != nil {
		return err
	}
	if err := s.wait(ctx, sl); err != nil {
		return err
	}
	if sl.response != iser.LogoutSuccess {
		return fmt.Errorf("iscsi: logout refused (response %d)", sl.response)
	}
	return nil
}

// Close closes the connection without logging out. Commands in flight
// fail with blockdev.ErrClosed.
func (s *Session) Close() error {
	s.fail(blockdev.ErrClosed)
	return nil
}
