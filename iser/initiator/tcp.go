package initiator

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
)

// tcpLink is an iSCSI/TCP connection in full feature phase: a receive
// goroutine that reads PDUs and a send goroutine that writes what
// submitters and the receive side queue, in batches.
type tcpLink struct {
	s    *Session
	nc   net.Conn
	r    *iser.Reader
	bw   *bufio.Writer
	w    *iser.Writer
	hdr  [iser.MaxHeaderLength]byte
	data []byte
	out  [iser.BHSSize]byte

	qmu   sync.Mutex
	q     []txItem
	batch []txItem
	wake  chan struct{}
	quit  chan struct{}
	once  sync.Once
	rdone chan struct{}
	sdone chan struct{} // closed when the sender has stopped touching slots
}

// txItem is a command to send, or Data-Out answering an R2T.
type txItem struct {
	sl     *slot
	r2t    bool
	off, n uint32
	ttt    uint32
}

// dialTCP connects and logs in over TCP.
func dialTCP(ctx context.Context, addr string, lcfg *iser.InitiatorConfig, cfg *Config) (*Session, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("iscsi: connecting to %s: %w", addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	return startTCP(ctx, nc, addr, lcfg, cfg)
}

// startTCP logs in over a connected stream and starts the session's
// goroutines; it closes nc on failure.
func startTCP(ctx context.Context, nc net.Conn, addr string, lcfg *iser.InitiatorConfig, cfg *Config) (*Session, error) {
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	br := bufio.NewReaderSize(nc, 64<<10)
	r := iser.NewReader(br)
	bw := bufio.NewWriterSize(nc, 256<<10)
	w := iser.NewWriter(bw)
	il, err := iser.NewInitiatorLogin(lcfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	req := make([]byte, iser.BHSSize)
	reqData := make([]byte, iser.DefaultRecvDataSegmentLength)
	hdr := make([]byte, iser.MaxHeaderLength)
	data := make([]byte, iser.DefaultRecvDataSegmentLength)
	n, err := il.Start(req, reqData)
	for err == nil {
		if err = w.WritePDU(req, nil, reqData[:n]); err != nil {
			break
		}
		if err = bw.Flush(); err != nil {
			break
		}
		var p iser.PDU
		if p, err = r.ReadPDU(hdr, data); err != nil {
			break
		}
		var st iser.LoginState
		n, st, err = il.Step(p.BHS, p.Data, req, reqData)
		if st == iser.LoginDone {
			break
		}
		if err == nil && st == iser.LoginFailed {
			err = fmt.Errorf("login failed")
		}
	}
	if err != nil {
		nc.Close()
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		return nil, fmt.Errorf("iscsi: login to %s at %s: %w", lcfg.TargetName, addr, err)
	}
	nc.SetDeadline(time.Time{})
	ls, _ := il.Session()
	r.SetDigests(ls.Params.HeaderDigest, ls.Params.DataDigest)
	w.SetDigests(ls.Params.HeaderDigest, ls.Params.DataDigest)
	r.SetMaxRecvDataSegmentLength(int(ls.Params.MaxRecvDataSegmentLength))
	s := newSession(*cfg, iser.TransportTCP, addr, ls)
	l := &tcpLink{s: s, nc: nc, r: r, bw: bw, w: w, data: make([]byte, ls.Params.MaxRecvDataSegmentLength),
		wake: make(chan struct{}, 1), quit: make(chan struct{}), rdone: make(chan struct{}), sdone: make(chan struct{})}
	s.lk = l
	go l.recv()
	go l.sender()
	return s, nil
}

func (l *tcpLink) submit(sl *slot) error {
	sl.tx.Add(1)
	l.enqueue(txItem{sl: sl})
	return nil
}

// release is the sender done with an item of sl: the last one completes
// the slot if the receive side is done with it too (see slot.tx). A ping
// answer, which no response follows, goes back to its pool.
func (l *tcpLink) release(sl *slot) {
	if sl.kind == kindNOP && sl.itt == iser.ReservedTag {
		l.s.put(sl)
		return
	}
	if sl.tx.Add(-1) == txResp {
		l.s.finish(sl)
	}
}

// finished implements link: TCP holds nothing per slot.
func (l *tcpLink) finished(*slot) {}

func (l *tcpLink) enqueue(it txItem) {
	l.qmu.Lock()
	l.q = append(l.q, it)
	l.qmu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *tcpLink) close() {
	l.once.Do(func() {
		close(l.quit)
		l.nc.Close()
	})
}

// recv reads PDUs until the connection ends, then fails what is in flight.
func (l *tcpLink) recv() {
	s := l.s
	defer close(l.rdone)
	var err error
	for {
		var p iser.PDU
		p, err = l.r.ReadPDU(l.hdr[:], l.data)
		if err != nil {
			break
		}
		switch p.BHS.Opcode() {
		case iser.OpDataIn:
			err = l.dataIn(p)
		case iser.OpR2T:
			err = l.r2t(p)
		default:
			err = s.handle(p)
		}
		if err != nil {
			break
		}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		err = fmt.Errorf("connection closed: %w", io.EOF)
	}
	s.fail(err) // closes the connection: the sender stops
	// The sweep completes the slots in flight and hands their buffers
	// back: the sender must be done writing them first.
	<-l.sdone
	s.sweep()
}

// dataIn places a Data-In PDU's data.
func (l *tcpLink) dataIn(p iser.PDU) error {
	s := l.s
	h := p.BHS
	s.update(h)
	sl := s.slotByITT(h.ITT())
	if sl == nil || !sl.read || sl.pending&wantResp == 0 {
		return fmt.Errorf("Data-In for ITT %#x, which is not an outstanding read", h.ITT())
	}
	d := iser.DataIn(h)
	off := d.BufferOffset()
	if uint64(off)+uint64(len(p.Data)) > uint64(len(sl.buf)) {
		return fmt.Errorf("Data-In beyond the buffer (%d+%d > %d)", off, len(p.Data), len(sl.buf))
	}
	copy(sl.buf[off:], p.Data)
	sl.dataIn = max(sl.dataIn, off+uint32(len(p.Data)))
	if d.HasStatus() {
		f := d.Fields()
		sl.response, sl.status = iser.ResponseCompleted, f.Status
		sl.over, sl.under, sl.resid = f.Overflow, f.Underflow, f.ResidualCount
		s.responded(sl)
	}
	return nil
}

// r2t queues the Data-Out an R2T asks for.
func (l *tcpLink) r2t(p iser.PDU) error {
	s := l.s
	s.update(p.BHS)
	sl := s.slotByITT(p.BHS.ITT())
	if sl == nil || !sl.write || sl.pending&wantResp == 0 {
		return fmt.Errorf("R2T for ITT %#x, which is not an outstanding write", p.BHS.ITT())
	}
	r := iser.R2T(p.BHS)
	off, n := r.BufferOffset(), r.DesiredDataTransferLength()
	if uint64(off)+uint64(n) > uint64(len(sl.buf)) {
		return fmt.Errorf("R2T beyond the data (%d+%d > %d)", off, n, len(sl.buf))
	}
	sl.tx.Add(1)
	l.enqueue(txItem{sl: sl, r2t: true, off: off, n: n, ttt: r.TTT()})
	return nil
}

// sender writes queued PDUs, one flush per batch.
func (l *tcpLink) sender() {
	s := l.s
	defer close(l.sdone)
	for {
		select {
		case <-l.wake:
		case <-l.quit:
			return
		}
		l.qmu.Lock()
		l.batch, l.q = l.q, l.batch[:0]
		l.qmu.Unlock()
		var err error
		for i := range l.batch {
			it := l.batch[i]
			l.batch[i] = txItem{}
			switch {
			case err != nil:
			case it.r2t:
				err = l.writeData(it.sl, it.off, it.n, it.ttt)
			default:
				err = l.writeSlot(it.sl)
			}
			// What was written is in the buffered writer or sent: the
			// slot's data is no longer read.
			l.release(it.sl)
		}
		if err == nil {
			err = l.bw.Flush()
		}
		if err != nil {
			s.fail(fmt.Errorf("sending: %w", err))
			return
		}
	}
}

// writeSlot writes a request PDU, with immediate and unsolicited data for
// a write command.
func (l *tcpLink) writeSlot(sl *slot) error {
	s := l.s
	var cmdSN, expStat uint32
	if sl.imm {
		cmdSN, expStat = s.currentSN()
	} else {
		if l.bw.Buffered() > 0 {
			// The window may be closed: send what is ready first.
			if err := l.bw.Flush(); err != nil {
				return err
			}
		}
		var err error
		if cmdSN, expStat, err = s.nextCmdSN(); err != nil {
			return err
		}
	}
	stamp(sl.hdr[:], cmdSN, expStat)
	if sl.kind != kindCmd {
		return l.w.WritePDU(sl.hdr[:], nil, sl.data)
	}
	p := &s.params
	var imm uint32
	if sl.write && p.ImmediateData {
		imm = min(sl.expLen, p.FirstBurstLength, p.MaxSendDataSegmentLength)
	}
	unsol := uint32(0)
	if sl.write && !p.InitialR2T {
		unsol = min(sl.expLen, p.FirstBurstLength)
	}
	final := unsol <= imm
	h := iser.BHS(sl.hdr[:])
	if final {
		h[1] |= iser.CmdFlagFinal
	} else {
		h[1] &^= iser.CmdFlagFinal
	}
	if err := l.w.WritePDU(sl.hdr[:], nil, sl.buf[:imm]); err != nil {
		return err
	}
	if !final {
		return l.writeData(sl, imm, unsol-imm, iser.ReservedTag)
	}
	return nil
}

// writeData writes Data-Out PDUs for n bytes at off. It stops early once
// the command's response is in: the target ended the command before it had
// all the data (a CHECK CONDITION, say), and wants no more of it.
func (l *tcpLink) writeData(sl *slot, off, n, ttt uint32) error {
	s := l.s
	maxSeg := s.params.MaxSendDataSegmentLength
	_, expStat := s.currentSN()
	var sn uint32
	for end := off + n; off < end && sl.tx.Load()&txResp == 0; {
		seg := min(maxSeg, end-off)
		iser.DataOut(l.out[:]).Encode(&iser.DataOutFields{Final: off+seg == end, LUN: encodeLUN(sl.lun), ITT: sl.itt, TTT: ttt,
			ExpStatSN: expStat, DataSN: sn, BufferOffset: off})
		if err := l.w.WritePDU(l.out[:], nil, sl.buf[off:off+seg]); err != nil {
			return err
		}
		sn++
		off += seg
	}
	return nil
}
