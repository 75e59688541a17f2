package initiator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/rdmaq"
)

// iSER buffer layout. Every Send and receive starts with the iSER header;
// a receive buffer holds a control PDU with a data segment of up to
// InitiatorRecvDataSegmentLength (8 KiB), as Linux's login buffers do.
const (
	iserHdr      = iser.ISERHeaderSize
	iserRecvData = 8192
	recvStride   = (iserHdr + iser.BHSSize + iserRecvData + 63) &^ 63
	ioStride     = 128                                        // iSER header and BHS of a command
	ctlStride    = (iserHdr + iser.BHSSize + 8192 + 63) &^ 63 // management PDUs carry text
	extraRecvs   = 16                                         // unsolicited target PDUs (NOP-In, Async, Reject)
)

// linkSlot is the iSER state of a task slot.
type linkSlot struct {
	tmpMR rdma.MR // plain memory registered for one Execute
}

// iserLink is an iSER connection on an rdmaq.HostQueue whose slots are
// the session's (session.go manages them, for both transports): the
// queue's completion goroutine runs the login, then takes responses and
// send completions; submitters post Sends directly.
type iserLink struct {
	ss      atomic.Pointer[Session] // set when the login is done
	pd      rdma.PD
	q       *rdmaq.HostQueue[linkSlot]
	ios     int  // the queue's command slots (the configured depth)
	sendInv bool // the target may invalidate with Send with Invalidate

	smu sync.Mutex // orders CmdSN assignment with posting

	// Login (the completion goroutine, until done).
	il      *iser.InitiatorLogin
	turn    int // control buffer of the next Login Request
	addr    string
	cfg     *Config
	lerr    error
	loginCh chan error

	once sync.Once
}

// dialISER connects over RDMA and logs in with Sends and receives.
func dialISER(ctx context.Context, addr string, lcfg *iser.InitiatorConfig, cfg *Config) (s *Session, err error) {
	p := cfg.Provider
	l := &iserLink{ios: cfg.QueueDepth, addr: addr, cfg: cfg, loginCh: make(chan error, 1)}
	if l.pd, err = p.AllocPD(); err != nil {
		return nil, fmt.Errorf("iser: allocating a PD: %w", err)
	}
	nslots := cfg.QueueDepth + mgmtSlots
	if l.q, err = rdmaq.NewHostQueue(rdmaq.HostConfig{
		Provider: p, PD: l.pd,
		Pools: []rdmaq.HostPool{{Slots: cfg.QueueDepth, SendLen: ioStride}, {Slots: mgmtSlots, SendLen: ctlStride}},
		Recvs: nslots + extraRecvs, RecvLen: recvStride, FastReg: cfg.MaxTransfer,
		Ctl: 2, CtlLen: iserHdr + iser.BHSSize + iser.DefaultRecvDataSegmentLength,
		SendWRs: 2*nslots + 8, SelfManaged: true, OwnPD: true,
	}, l); err != nil {
		return nil, fmt.Errorf("iser: %w", err)
	}
	defer func() {
		if err != nil {
			l.q.Close(err)
		}
	}()
	if l.il, err = iser.NewInitiatorLogin(lcfg); err != nil {
		return nil, err
	}
	pd := make([]byte, iser.ISERCMSize)
	flags := iser.ISERZBVANotSupported
	noInv := rdma.CapsOf(p).NoRemoteInvalidate
	if noInv {
		// The provider's keys cannot be invalidated by the target's
		// Send with Invalidate (verbs over RoCE: emulated fast
		// registration): ask for plain Sends.
		flags |= iser.ISERSendWithInvNotSupported
	}
	iser.ISERCM{Flags: flags}.Encode(pd)
	reply, err := l.q.Connect(ctx, addr, rdma.ConnParam{PrivateData: pd, ResponderResources: 16, InitiatorDepth: 0})
	if err != nil {
		return nil, fmt.Errorf("iser: connecting to %s: %w", addr, err)
	}
	acc, _ := iser.ParseISERCM(reply)
	l.sendInv = acc.Flags&iser.ISERTSendWithInvNotUsed == 0 && !noInv
	l.q.Start()
	// The login runs on the completion goroutine: a Login Request now,
	// the next one from each response.
	i, req, reqData := l.loginBuf()
	n, err := l.il.Start(req, reqData)
	if err == nil {
		err = l.sendLogin(i, n)
	}
	if err != nil {
		l.q.Fail(err)
	}
	select {
	case err = <-l.loginCh:
	case <-ctx.Done():
		err = ctx.Err()
		l.q.Fail(err)
		<-l.loginCh
	}
	if err != nil {
		return nil, fmt.Errorf("iser: login to %s at %s: %w", lcfg.TargetName, addr, err)
	}
	return l.sess(), nil
}

// sess returns the session, nil during the login.
func (l *iserLink) sess() *Session { return l.ss.Load() }

// loginBuf returns the control buffer for the next Login Request (two
// used in turn: the previous one's response is in) with its BHS and data
// segment.
func (l *iserLink) loginBuf() (i int, req, reqData []byte) {
	i = l.turn
	buf := l.q.CtlBuf(i)
	return i, buf[iserHdr : iserHdr+iser.BHSSize], buf[iserHdr+iser.BHSSize:]
}

// sendLogin sends the Login Request built in control buffer i (n bytes
// of data segment).
func (l *iserLink) sendLogin(i, n int) error {
	l.turn ^= 1
	buf := l.q.CtlBuf(i)
	iser.ISERHeader(buf).Encode(&iser.ISERHeaderFields{})
	iser.BHS(buf[iserHdr:iserHdr+iser.BHSSize]).SetLengths(0, n)
	return l.q.SendCtl(i, iserHdr+iser.BHSSize+iser.PaddedLength(n), false)
}

// loginStep takes a Login Response (completion goroutine): it sends the
// next request, or ends the login with the session or an error.
func (l *iserLink) loginStep(p iser.PDU) error {
	i, req, reqData := l.loginBuf()
	n, st, err := l.il.Step(p.BHS, p.Data, req, reqData)
	switch {
	case st == iser.LoginDone:
		ls, _ := l.il.Session()
		s := newSession(*l.cfg, iser.TransportISER, l.addr, ls)
		s.lk = l
		l.ss.Store(s)
		l.loginCh <- nil
		return nil
	case err != nil:
		l.lerr = err
		return err
	case st == iser.LoginFailed:
		l.lerr = errors.New("login failed")
		return l.lerr
	}
	return l.sendLogin(i, n)
}

// engine returns the queue slot of session slot sl: the command slots
// first, then the management slots.
func (l *iserLink) engine(sl *slot) *rdmaq.HostSlot[linkSlot] {
	if d := l.sess().depth; sl.idx >= d {
		return l.q.Slot(l.ios + sl.idx - d)
	}
	return l.q.Slot(sl.idx)
}

// session returns the session slot of queue slot es.
func (l *iserLink) session(es *rdmaq.HostSlot[linkSlot]) *slot {
	s := l.sess()
	i := es.Index()
	if i >= l.ios {
		i = s.depth + i - l.ios
	}
	if i >= len(s.slots) {
		return nil
	}
	return &s.slots[i]
}

// submit posts a slot's Send (any goroutine, the completion goroutine's
// included).
func (l *iserLink) submit(sl *slot) error {
	s := l.sess()
	es := l.engine(sl)
	buf := es.Buf()
	hdr := buf[:iserHdr]
	bhs := buf[iserHdr : iserHdr+iser.BHSSize]
	var hf iser.ISERHeaderFields
	n := iserHdr + iser.BHSSize
	var data rdma.SGE
	dlen := 0
	if sl.kind == kindCmd {
		if sl.expLen > 0 && sl.mr == nil {
			// Plain memory (Execute): register it for this command.
			mr, err := l.pd.RegisterMemory(sl.buf, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
			if err != nil {
				return fmt.Errorf("iser: registering %d bytes: %w", len(sl.buf), err)
			}
			es.S.tmpMR, sl.mr, sl.mrOff = mr, mr, 0
		}
		p := &s.params
		var imm uint32
		if sl.write && p.ImmediateData {
			imm = min(sl.expLen, p.FirstBurstLength, p.MaxSendDataSegmentLength)
		}
		if sl.read || sl.expLen > imm {
			access := rdma.AccessRemoteRead
			if sl.read {
				access = rdma.AccessLocalWrite | rdma.AccessRemoteWrite
			}
			rkey, va, err := l.q.Map(es, sl.mr, sl.mrOff, int(sl.expLen), access)
			if err != nil {
				return fmt.Errorf("iser: %w", err)
			}
			if sl.read {
				hf.ReadValid, hf.ReadSTag, hf.ReadBaseOffset = true, rkey, va
			} else {
				hf.WriteValid, hf.WriteSTag, hf.WriteBaseOffset = true, rkey, va+uint64(imm)
			}
		}
		if imm > 0 {
			data = rdma.SGE{MR: sl.mr, Offset: sl.mrOff, Length: int(imm)}
			dlen = int(imm)
		}
		iser.BHS(sl.hdr[:])[1] |= iser.CmdFlagFinal
	} else if len(sl.data) > 0 {
		dlen = copy(buf[n:], sl.data)
		n += iser.PaddedLength(dlen)
	}
	l.q.Prepare(es, n, data)
	iser.ISERHeader(hdr).Encode(&hf)
	for {
		l.smu.Lock()
		var cmdSN, expStat uint32
		if sl.imm {
			cmdSN, expStat = s.currentSN()
		} else {
			var ok bool
			if cmdSN, expStat, ok = s.tryCmdSN(); !ok {
				l.smu.Unlock()
				if err := s.waitWindow(); err != nil {
					return err
				}
				continue
			}
		}
		stamp(sl.hdr[:], cmdSN, expStat)
		copy(bhs, sl.hdr[:])
		iser.BHS(bhs).SetLengths(0, dlen)
		err := l.q.Send(es)
		l.smu.Unlock()
		if err != nil {
			return fmt.Errorf("iser: %w", err)
		}
		return nil
	}
}

// finished implements link: the command's key is invalidated (unless the
// target did) and plain memory registered for it released.
func (l *iserLink) finished(sl *slot) {
	es := l.engine(sl)
	l.q.Unmap(es)
	if es.S.tmpMR != nil {
		es.S.tmpMR.Deregister()
		es.S.tmpMR = nil
	}
}

// close implements link: the connection ends; the completion goroutine
// then sweeps the session.
func (l *iserLink) close() {
	l.once.Do(func() { l.q.Fail(errLinkClosed) })
}

// errLinkClosed is the link's failure reason when the session closed it
// (the session has its own).
const errLinkClosed = errorString("iser: connection closed")

// Recv implements rdmaq.HostHandler: a PDU from the target.
func (l *iserLink) Recv(m rdmaq.Msg) error {
	b := m.Head
	if _, err := iser.ParseISERHeader(b); err != nil {
		return fmt.Errorf("iser: bad iSER header: %w", err)
	}
	p, err := iser.ParsePDU(b[iserHdr:], iserRecvData)
	if err != nil {
		return fmt.Errorf("iser: bad PDU: %w", err)
	}
	s := l.sess()
	if s == nil {
		if p.BHS.Opcode() != iser.OpLoginResponse {
			return fmt.Errorf("iser: %v PDU during login", p.BHS.Opcode())
		}
		return l.loginStep(p)
	}
	if p.BHS.Opcode() == iser.OpDataIn || p.BHS.Opcode() == iser.OpR2T {
		return fmt.Errorf("iser: the target sent %v, which iSER does not use", p.BHS.Opcode())
	}
	if m.WithInv {
		sl := s.slotByITT(p.BHS.ITT())
		if sl == nil || !l.q.Invalidated(l.engine(sl), m.Invalidated) {
			return fmt.Errorf("iser: the target invalidated key %#x, which the response's task did not expose", m.Invalidated)
		}
	}
	return s.handle(p)
}

// Sent implements rdmaq.HostHandler: a slot's Send completed.
func (l *iserLink) Sent(es *rdmaq.HostSlot[linkSlot]) {
	s := l.sess()
	if s == nil {
		return
	}
	sl := l.session(es)
	if sl == nil {
		return
	}
	if sl.kind == kindNOP && sl.itt == iser.ReservedTag {
		s.put(sl) // a ping answer: sent
		return
	}
	if sl.state.Load() != slotFlight || sl.pending&wantSend == 0 {
		return
	}
	sl.pending &^= wantSend
	if sl.pending == 0 {
		s.finish(sl)
	}
}

// Complete implements rdmaq.HostHandler (the session completes its slots).
func (l *iserLink) Complete(*rdmaq.HostSlot[linkSlot]) {}

// Failed implements rdmaq.HostHandler: the session fails with the link
// (or the login with it).
func (l *iserLink) Failed(err error) {
	if s := l.sess(); s != nil {
		if err != errLinkClosed { // the session closed the link itself
			s.fail(err)
		}
		return
	}
	if l.lerr != nil {
		err = l.lerr
	}
	l.loginCh <- err
}

// Drained implements rdmaq.Drainer: what was in flight completes with the
// session's error (the queue then frees itself and the link's PD).
func (l *iserLink) Drained() {
	if s := l.sess(); s != nil {
		s.sweep()
	}
}
