package target

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/scsi"
)

// levelTrace logs every received PDU (below slog.LevelDebug).
const levelTrace = -8

// tcpWriteBuffer is the size of the send buffer: one batch of responses
// (32 reads of 4 KiB with their headers) goes out in one write.
const tcpWriteBuffer = 256 << 10

// tcpConn is an iSCSI/TCP connection in full feature phase. One goroutine
// reads PDUs (serveTCP), one writes them (sender); workers run commands.
type tcpConn struct {
	c    *conn
	nc   net.Conn
	r    *iser.Reader
	bw   *bufio.Writer
	w    *iser.Writer
	hdr  [iser.MaxHeaderLength]byte
	data []byte

	qmu   sync.Mutex
	q     []txItem
	batch []txItem
	// released collects the sender's written tasks (reused).
	released []*task
	wake     chan struct{}
	quit     chan struct{}
	sent     chan struct{} // closed when the sender has exited

	// Writer state, guarded by wmu: the sender goroutine and the receive
	// loop (inline responses) both write.
	wmu    sync.Mutex
	statSN uint32
	out    [iser.BHSSize]byte
	dirty  bool // written but not flushed
	werr   error
	br     *bufio.Reader
	// deadline is set while a read deadline of Config.PDUTimeout is
	// armed (receive goroutine).
	deadline bool

	shutOnce sync.Once
}

// txItem is a task response or a control PDU waiting for the sender.
type txItem struct {
	t *task
	p *ctl
}

// buffer implements transport: plain memory, in powers of two from 4 KiB
// up to the largest transfer.
func (x *tcpConn) buffer(tk *task, n int) ([]byte, error) {
	size := 4096
	for size < n {
		size *= 2
	}
	return make([]byte, min(size, x.c.maxXfr)), nil
}

// serveTCP runs an iSCSI/TCP connection: login, then full feature phase.
func (t *Target) serveTCP(nc net.Conn, br *bufio.Reader) {
	log := t.log.With("peer", nc.RemoteAddr().String(), "transport", transportNames[transTCP])
	t.accepted(log, transTCP)
	r := iser.NewReader(br)
	bw := bufio.NewWriterSize(nc, tcpWriteBuffer)
	w := iser.NewWriter(bw)
	tsih := t.newTSIH()
	defer t.releaseTSIH(tsih)
	tl, err := iser.NewTargetLogin(&t.tcpLogin, tsih)
	if err != nil {
		log.Warn("iscsi: login engine", "err", err)
		return
	}
	hdr := make([]byte, iser.MaxHeaderLength)
	data := make([]byte, iser.DefaultRecvDataSegmentLength)
	rsp := make([]byte, iser.BHSSize)
	rspData := make([]byte, iser.DefaultRecvDataSegmentLength)
	for npdus := 0; ; npdus++ {
		p, err := r.ReadPDU(hdr, data)
		if err != nil {
			if why, ok := t.loginCut(npdus, err); ok {
				t.loginRefused(log, tl.Identity(), why, err)
			} else {
				log.Debug("iscsi: connection closed before login", "err", err)
			}
			return
		}
		n, st, lerr := tl.Step(p.BHS, p.Data, rsp, rspData)
		werr := w.WritePDU(rsp, nil, rspData[:n])
		if werr == nil {
			werr = bw.Flush()
		}
		if st == iser.LoginFailed {
			t.loginRefused(log, tl.Identity(), rejectOf(lerr), lerr)
			return
		}
		if werr != nil {
			why, _ := t.loginCut(npdus+1, werr)
			t.loginRefused(log, tl.Identity(), why, werr)
			return
		}
		if st == iser.LoginDone {
			break
		}
	}
	nc.SetReadDeadline(time.Time{})
	ls, _ := tl.Session()
	id := tl.Identity()
	r.SetDigests(ls.Params.HeaderDigest, ls.Params.DataDigest)
	w.SetDigests(ls.Params.HeaderDigest, ls.Params.DataDigest)
	r.SetMaxRecvDataSegmentLength(int(ls.Params.MaxRecvDataSegmentLength))
	tc := &tcpConn{nc: nc, r: r, bw: bw, w: w, br: br, statSN: ls.StatSN,
		data: make([]byte, ls.Params.MaxRecvDataSegmentLength),
		wake: make(chan struct{}, 1), quit: make(chan struct{}), sent: make(chan struct{})}
	c := newConn(t, ls, tc, connLog(log, ls, id))
	c.connID = ls.CID
	tc.c = c
	s, err := t.openSession(ls, id, c)
	if err != nil {
		c.pool.Close()
		t.loginRefused(log, id, rejTargetError, fmt.Errorf("opening the session: %w", err))
		return
	}
	c.sess = s
	t.sessionOpened(c, ls, "digests", fmt.Sprintf("%v/%v", ls.Params.HeaderDigest, ls.Params.DataDigest))
	go tc.sender()
	c.startNop()
	err = tc.recvLoop()
	tc.shut()
	<-tc.sent
	c.stop(err)
}

// recvLoop reads and dispatches PDUs until the connection fails.
func (tc *tcpConn) recvLoop() error {
	c := tc.c
	for {
		c.runInline()
		if tc.br.Buffered() < iser.BHSSize {
			tc.flush()
		}
		p, err := tc.readPDU()
		if err == nil || errors.Is(err, iser.ErrDataDigest) {
			c.received()
		}
		if err != nil {
			if errors.Is(err, iser.ErrDataDigest) {
				c.reject(p, iser.RejectDataDigestError)
				continue
			}
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				return io.EOF
			}
			if errors.Is(err, iser.ErrDataSegmentTooLong) {
				// The header is intact: Reject it (LIO: protocol
				// error), then close.
				return tc.rejectClose(tc.hdr[:iser.BHSSize], iser.RejectProtocolError, err)
			}
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout():
				c.setEnd(endTimeout)
				c.log.Warn("iscsi: a PDU not received in time, dropping the connection", "timeout", c.t.cfg.PDUTimeout)
			case !errors.As(err, &ne) && !errors.Is(err, io.ErrUnexpectedEOF):
				c.setEnd(endProtocol) // a PDU the reader refused
			}
			return err
		}
		if c.log.Enabled(context.Background(), levelTrace) {
			c.log.Log(context.Background(), levelTrace, "iscsi: pdu", "op", p.BHS.Opcode(), "itt", p.BHS.ITT(), "flags", p.BHS.Flags(), "len", len(p.Data), "b20", fmt.Sprintf("%x", p.BHS[20:48]))
		}
		if p.BHS.Opcode() == iser.OpDataOut {
			if err := tc.onDataOut(p); err != nil {
				return tc.rejectClose(p.Header(), iser.RejectProtocolError, err)
			}
			continue
		}
		c.dispatch(p, nil)
	}
}

// readPDU reads the next PDU. With Config.PDUTimeout, a PDU must arrive
// whole within it once its first byte is in: the wait for that byte is
// unbounded, and no deadline is set for a PDU the read buffer holds
// whole already (the steady state of a busy connection).
func (tc *tcpConn) readPDU() (iser.PDU, error) {
	if pt := tc.c.t.cfg.PDUTimeout; pt > 0 {
		if tc.br.Buffered() == 0 {
			if tc.deadline {
				tc.nc.SetReadDeadline(time.Time{})
				tc.deadline = false
			}
			if _, err := tc.br.Peek(1); err != nil {
				return iser.PDU{}, err
			}
		}
		if !tc.buffered() {
			tc.nc.SetReadDeadline(time.Now().Add(pt))
			tc.deadline = true
		}
	}
	return tc.r.ReadPDU(tc.hdr[:], tc.data)
}

// buffered reports whether the read buffer holds the next PDU whole.
func (tc *tcpConn) buffered() bool {
	n := tc.br.Buffered()
	if n < iser.BHSSize {
		return false
	}
	b, _ := tc.br.Peek(iser.BHSSize)
	h := iser.BHS(b)
	want := iser.BHSSize + h.TotalAHSLength() + iser.PaddedLength(h.DataSegmentLength())
	if tc.c.params.HeaderDigest {
		want += iser.DigestSize
	}
	if tc.c.params.DataDigest && h.DataSegmentLength() > 0 {
		want += iser.DigestSize
	}
	return n >= want
}

// rejectClose sends a Reject of hdr that ends the connection and waits,
// reading nothing more, until the connection is shut (the Reject sent, or
// rejectGrace passed); it returns err.
func (tc *tcpConn) rejectClose(hdr []byte, reason iser.RejectReason, err error) error {
	tc.c.rejectClose(hdr, reason, err.Error())
	<-tc.quit
	return err
}

// ttt is the Target Transfer Tag of a task's R2Ts.
func ttt(tk *task) uint32 { return uint32(tk.idx) | uint32(tk.gen&0x7fff)<<16 }

// fetch implements transport: R2T for what unsolicited data did not bring.
func (tc *tcpConn) fetch(tk *task) {
	if tk.unsol || tk.r2tLen > 0 {
		// Unsolicited data still coming, or an R2T outstanding.
		tc.armDataOut(tk)
		return
	}
	if tk.failed {
		tc.c.failData(tk)
		return
	}
	tc.r2t(tk)
}

// r2t queues the next R2T of a task (receive goroutine).
func (tc *tcpConn) r2t(tk *task) {
	c := tc.c
	left := tk.need - tk.got
	n := min(left, c.params.MaxBurstLength)
	tk.r2tOff, tk.r2tLen, tk.dataSN = tk.got, n, 0
	p := &ctl{r2t: tk, gen: tk.gen}
	iser.R2T(p.hdr[:]).Encode(&iser.R2TFields{LUN: tk.rawLUN, ITT: tk.itt, TTT: ttt(tk), R2TSN: tk.r2tSN,
		BufferOffset: tk.r2tOff, DesiredDataTransferLength: n})
	tk.r2tSN++
	tc.send(p)
	tc.armDataOut(tk)
}

// fetchAbort implements transport: Data-Out for the task is ignored from
// now on (its TTT no longer matches once the slot is reused).
func (tc *tcpConn) fetchAbort(tk *task) bool { return true }

// onDataOut places a Data-Out PDU's data (receive goroutine). Errors are
// protocol errors that end the connection (ErrorRecoveryLevel 0).
func (tc *tcpConn) onDataOut(p iser.PDU) error {
	c := tc.c
	d := iser.DataOut(p.BHS)
	tag := d.TTT()
	c.mu.Lock()
	var tk *task
	if tag == iser.ReservedTag {
		tk = c.byITT[p.BHS.ITT()]
		if tk != nil && !tk.unsol {
			tk = nil
		}
	} else if idx := int(tag & 0xffff); idx < len(c.tasks) {
		tk = &c.tasks[idx]
		if ttt(tk) != tag || tk.r2tLen == 0 || tk.itt != p.BHS.ITT() {
			tk = nil
		}
	}
	if tk == nil || (tk.state != taskData && tk.state != taskHeld) || tk.dropped {
		c.mu.Unlock()
		return nil // a task aborted meanwhile, or unknown: ignore
	}
	held := tk.state == taskHeld
	c.mu.Unlock()
	off := d.BufferOffset()
	sn := d.DataSN()
	n := uint32(len(p.Data))
	if tk.got+n > tk.expLen {
		return fmt.Errorf("Data-Out beyond the expected data transfer length (%d+%d > %d)", tk.got, n, tk.expLen)
	}
	var bad string
	if tag == iser.ReservedTag {
		if sn != tk.unsolSN {
			bad = fmt.Sprintf("unsolicited Data-Out with DataSN %d, want %d", sn, tk.unsolSN)
		}
		if fb := c.params.FirstBurstLength; tk.got+n > fb && !tk.failed {
			// As LIO's iscsit_check_unsolicited_dataout: CHECK
			// CONDITION, INCORRECT AMOUNT OF DATA (ABORTED COMMAND,
			// 0x0c0d); the framing is intact, the connection stays.
			c.log.Info("iscsi: unsolicited data beyond FirstBurstLength", "itt", tk.itt, "bytes", tk.got+n, "first_burst", fb)
			tk.failed, tk.failASC = true, 0x0c0d
		}
		tk.unsolSN++
	} else {
		if sn != tk.dataSN {
			bad = fmt.Sprintf("Data-Out with DataSN %d, want %d", sn, tk.dataSN)
		}
		tk.dataSN++
	}
	if bad == "" && off != tk.got {
		bad = fmt.Sprintf("Data-Out at offset %d, want %d (DataPDUInOrder)", off, tk.got)
	}
	if bad != "" && !tk.failed {
		// The framing is intact: fail the command (ABORTED COMMAND,
		// DATA PHASE ERROR) once its data sequence ends, keep the
		// connection.
		c.log.Info("iscsi: data-out error", "itt", tk.itt, "err", bad)
		tk.failed = true
	}
	if !tk.failed && int(off) < len(tk.buf) {
		copy(tk.buf[off:], p.Data)
	}
	tk.got += n
	if tag == iser.ReservedTag {
		if p.BHS.Final() {
			tk.unsol = false
		}
	} else {
		end := tk.r2tOff + tk.r2tLen
		if tk.got > end && !tk.failed {
			return fmt.Errorf("Data-Out beyond the R2T (%d > %d)", tk.got, end)
		}
		if tk.got >= end || p.BHS.Final() {
			tk.r2tLen = 0
		}
	}
	if held || tk.unsol || tk.r2tLen > 0 {
		tc.armDataOut(tk) // more Data-Out to come: the timeout starts again
		return nil
	}
	tc.disarmDataOut(tk)
	if tk.failed {
		c.failData(tk)
		return nil
	}
	if tk.got < tk.need {
		tc.r2t(tk)
		return nil
	}
	c.dataReady(tk)
	return nil
}

// armDataOut (re)starts a task's Data-Out timeout (receive goroutine), as
// LIO's dataout timer: the next Data-Out PDU the task waits for
// (unsolicited, or for its R2T) must come within Config.DataOutTimeout,
// or the connection is dropped (ErrorRecoveryLevel 0 cannot recover
// it). The timer is made once per slot and reused.
func (tc *tcpConn) armDataOut(tk *task) {
	d := tc.c.t.cfg.DataOutTimeout
	if d <= 0 {
		return
	}
	tk.doDeadline.Store(time.Now().Add(d).UnixNano())
	if tk.doTimer == nil {
		tk.doTimer = time.AfterFunc(d, func() { tc.dataOutExpired(tk) })
		return
	}
	tk.doTimer.Reset(d)
}

// disarmDataOut stops a task's Data-Out timeout (receive goroutine).
func (tc *tcpConn) disarmDataOut(tk *task) {
	if tk.doDeadline.Load() != 0 {
		tk.doDeadline.Store(0)
		tk.doTimer.Stop()
	}
}

// dataOutExpired is a task's Data-Out timer: the connection is dropped if
// the task still waits for Data-Out past its deadline.
func (tc *tcpConn) dataOutExpired(tk *task) {
	c := tc.c
	dl := tk.doDeadline.Load()
	if dl == 0 || time.Now().UnixNano() < dl {
		return // answered, or re-armed meanwhile (its timer fires later)
	}
	c.mu.Lock()
	waiting := tk.state == taskData && !tk.dropped && !c.closing
	itt := tk.itt
	c.mu.Unlock()
	if !waiting {
		return
	}
	c.setEnd(endTimeout)
	c.log.Warn("iscsi: no Data-Out in time, dropping the connection", "itt", itt, "timeout", c.t.cfg.DataOutTimeout)
	c.drop("Data-Out timeout")
}

// respond implements transport.
func (tc *tcpConn) respond(tk *task, inline bool) {
	if !inline {
		tc.enqueue(txItem{t: tk})
		return
	}
	tc.wmu.Lock()
	if tc.werr == nil {
		tc.werr = tc.writeTask(tk)
		tc.dirty = true
	}
	err := tc.werr
	tc.wmu.Unlock()
	tc.c.release(tk)
	if err != nil {
		tc.shut()
	}
}

// flush writes out what the receive loop left buffered.
func (tc *tcpConn) flush() {
	tc.wmu.Lock()
	if tc.dirty && tc.werr == nil {
		tc.werr = tc.bw.Flush()
	}
	tc.dirty = false
	err := tc.werr
	tc.wmu.Unlock()
	if err != nil {
		tc.shut()
	}
}

// send implements transport.
func (tc *tcpConn) send(p *ctl) { tc.enqueue(txItem{p: p}) }

func (tc *tcpConn) enqueue(it txItem) {
	tc.qmu.Lock()
	tc.q = append(tc.q, it)
	tc.qmu.Unlock()
	select {
	case tc.wake <- struct{}{}:
	default:
	}
}

func (tc *tcpConn) localAddr() net.Addr { return tc.nc.LocalAddr() }

func (tc *tcpConn) remoteAddr() net.Addr { return tc.nc.RemoteAddr() }

func (tc *tcpConn) name() string { return "tcp" }

// shut implements transport.
func (tc *tcpConn) shut() {
	tc.shutOnce.Do(func() {
		close(tc.quit)
		tc.nc.Close()
	})
}

// sender writes queued PDUs in batches, one flush per batch.
func (tc *tcpConn) sender() {
	defer close(tc.sent)
	for {
		select {
		case <-tc.wake:
		case <-tc.quit:
			tc.drain()
			return
		}
		tc.qmu.Lock()
		tc.batch, tc.q = tc.q, tc.batch[:0]
		tc.qmu.Unlock()
		closeAfter := false
		released := tc.released[:0]
		tc.wmu.Lock()
		for i := range tc.batch {
			it := tc.batch[i]
			tc.batch[i] = txItem{}
			if it.t != nil {
				if tc.werr == nil {
					tc.werr = tc.writeTask(it.t)
				}
				released = append(released, it.t)
				continue
			}
			if tc.werr == nil {
				var ok bool
				ok, tc.werr = tc.writeCtl(it.p)
				if ok && it.p.close {
					closeAfter = true
				}
			}
		}
		if tc.werr == nil {
			tc.werr = tc.bw.Flush()
			tc.dirty = false
		}
		err := tc.werr
		tc.wmu.Unlock()
		for i, tk := range released {
			tc.c.release(tk)
			released[i] = nil
		}
		tc.released = released[:0]
		if err != nil || closeAfter {
			tc.shut()
		}
	}
}

// drain releases what is still queued when the connection ends.
func (tc *tcpConn) drain() {
	tc.qmu.Lock()
	q := tc.q
	tc.q = nil
	tc.qmu.Unlock()
	for _, it := range q {
		if it.t != nil {
			tc.c.release(it.t)
		}
	}
}

// writeCtl writes a control PDU; ok is false for a stale R2T.
func (tc *tcpConn) writeCtl(p *ctl) (ok bool, err error) {
	c := tc.c
	if tk := p.r2t; tk != nil {
		c.mu.Lock()
		live := tk.gen == p.gen && tk.state == taskData && !tk.dropped
		c.mu.Unlock()
		if !live {
			return false, nil
		}
	}
	c.stamp(p.hdr[:], tc.statSN)
	if p.advance {
		tc.statSN++
	}
	return true, tc.w.WritePDU(p.hdr[:], nil, p.data)
}

// writeTask writes a task's Data-In PDUs and status.
func (tc *tcpConn) writeTask(tk *task) error {
	c := tc.c
	sc := &tk.cmd
	f, slen := c.responseFields(tk)
	n := 0
	if sc.Dir == scsi.DirIn {
		n = min(sc.DataInLen, len(tk.buf))
	}
	collapse := n > 0 && slen == 0 && sc.Status == scsi.StatusGood
	maxSeg := int(c.params.MaxSendDataSegmentLength)
	burst := int(c.params.MaxBurstLength)
	c.mu.Lock()
	c.creditLocked(tk)
	c.mu.Unlock()
	var dsn uint32
	for off := 0; off < n; {
		seg := min(maxSeg, n-off)
		last := off+seg == n
		df := iser.DataInFields{Final: last || (off+seg)%burst == 0, LUN: tk.rawLUN, ITT: tk.itt, TTT: iser.ReservedTag,
			DataSN: dsn, BufferOffset: uint32(off)}
		sn := tc.statSN
		if last && collapse {
			df.Final, df.HasStatus, df.Status = true, true, f.Status
			df.Overflow, df.Underflow, df.ResidualCount = f.Overflow, f.Underflow, f.ResidualCount
			tc.statSN++
		}
		iser.DataIn(tc.out[:]).Encode(&df)
		c.stamp(tc.out[:], sn)
		if err := tc.w.WritePDU(tc.out[:], nil, tk.buf[off:off+seg]); err != nil {
			return err
		}
		dsn++
		off += seg
	}
	if collapse {
		return nil
	}
	f.ExpDataSN = dsn
	if sc.Dir == scsi.DirOut {
		f.ExpDataSN = tk.r2tSN
	}
	iser.SCSIResponse(tc.out[:]).Encode(&f)
	c.stamp(tc.out[:], tc.statSN)
	tc.statSN++
	return tc.w.WritePDU(tc.out[:], nil, tk.rsp[:slen])
}
