package initiator

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/rdma"
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

// iserLink is an iSER connection in full feature phase: one goroutine polls
// the CQ (responses, send completions); submitters post Sends directly.
type iserLink struct {
	s  *Session
	pd rdma.PD
	cq rdma.CQ
	qp rdma.QP

	sendMem []byte
	sendMR  rdma.MR
	recvMem []byte
	recvMR  rdma.MR
	nrecv   int
	nslots  int
	sendInv bool // the target may invalidate with Send with Invalidate

	smu    sync.Mutex // orders CmdSN assignment with posting
	rwr    rdma.RecvWR
	rsge   [1]rdma.SGE
	wcs    []rdma.WC
	ctx    context.Context
	cancel context.CancelFunc
	exited chan struct{}
	once   sync.Once

	// Per slot: the Send's work request and scatter list.
	wr  []rdma.SendWR
	sge [][2]rdma.SGE
}

func (l *iserLink) sendOff(idx int) int {
	ios := l.nslots - mgmtSlots
	if idx < ios {
		return idx * ioStride
	}
	return ios*ioStride + (idx-ios)*ctlStride
}

// dialISER connects over RDMA and logs in with Sends and receives.
func dialISER(ctx context.Context, addr string, lcfg *iser.InitiatorConfig, cfg *Config) (s *Session, err error) {
	p := cfg.Provider
	nslots := cfg.QueueDepth + mgmtSlots
	l := &iserLink{nslots: nslots, nrecv: nslots + extraRecvs, wcs: make([]rdma.WC, 64), exited: make(chan struct{})}
	defer func() {
		if err != nil {
			l.release()
		}
	}()
	if l.pd, err = p.AllocPD(); err != nil {
		return nil, fmt.Errorf("iser: allocating a PD: %w", err)
	}
	if l.cq, err = p.CreateCQ(3*nslots + l.nrecv + 16); err != nil {
		return nil, fmt.Errorf("iser: creating a CQ: %w", err)
	}
	if l.qp, err = l.pd.CreateQP(rdma.QPConfig{SendCQ: l.cq, RecvCQ: l.cq, MaxSendWR: 2*nslots + 8, MaxRecvWR: l.nrecv,
		MaxSendSGE: 2, MaxRecvSGE: 1}); err != nil {
		return nil, fmt.Errorf("iser: creating a QP: %w", err)
	}
	ios := nslots - mgmtSlots
	l.sendMem = alignedBuffer(ios*ioStride + mgmtSlots*ctlStride)
	if l.sendMR, err = l.pd.RegisterMemory(l.sendMem, rdma.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("iser: registering send buffers: %w", err)
	}
	l.recvMem = alignedBuffer(l.nrecv * recvStride)
	if l.recvMR, err = l.pd.RegisterMemory(l.recvMem, rdma.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("iser: registering receive buffers: %w", err)
	}
	l.rwr.SGL = l.rsge[:]
	for i := range l.nrecv {
		if err = l.postRecv(i); err != nil {
			return nil, fmt.Errorf("iser: posting receives: %w", err)
		}
	}
	pd := make([]byte, iser.ISERCMSize)
	iser.ISERCM{Flags: iser.ISERZBVANotSupported}.Encode(pd)
	reply, err := l.qp.Connect(ctx, addr, rdma.ConnParam{PrivateData: pd, ResponderResources: 16, InitiatorDepth: 0})
	if err != nil {
		return nil, fmt.Errorf("iser: connecting to %s: %w", addr, err)
	}
	acc, _ := iser.ParseISERCM(reply)
	l.sendInv = acc.Flags&iser.ISERTSendWithInvNotUsed == 0
	ls, err := l.login(ctx, lcfg)
	if err != nil {
		return nil, fmt.Errorf("iser: login to %s at %s: %w", lcfg.TargetName, addr, err)
	}
	s = newSession(*cfg, iser.TransportISER, addr, ls)
	s.lk = l
	l.s = s
	l.wr = make([]rdma.SendWR, nslots)
	l.sge = make([][2]rdma.SGE, nslots)
	for i := range s.slots {
		if i < s.depth {
			if s.slots[i].fmr, err = l.pd.AllocFastRegMR(cfg.MaxTransfer); err != nil {
				return nil, fmt.Errorf("iser: allocating registration keys: %w", err)
			}
		}
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	go l.run()
	return s, nil
}

func (l *iserLink) postRecv(i int) error {
	l.rsge[0] = rdma.SGE{MR: l.recvMR, Offset: i * recvStride, Length: recvStride}
	l.rwr.ID = uint64(i)
	return l.qp.PostRecv(&l.rwr)
}

// login runs the login phase synchronously on the CQ.
func (l *iserLink) login(ctx context.Context, lcfg *iser.InitiatorConfig) (iser.Session, error) {
	il, err := iser.NewInitiatorLogin(lcfg)
	if err != nil {
		return iser.Session{}, err
	}
	buf := l.sendMem[:iserHdr+iser.BHSSize+iser.DefaultRecvDataSegmentLength]
	req := buf[iserHdr : iserHdr+iser.BHSSize]
	reqData := buf[iserHdr+iser.BHSSize:]
	n, err := il.Start(req, reqData)
	for err == nil {
		iser.ISERHeader(buf).Encode(&iser.ISERHeaderFields{})
		iser.BHS(req).SetLengths(0, n)
		sge := []rdma.SGE{{MR: l.sendMR, Length: iserHdr + iser.BHSSize + iser.PaddedLength(n)}}
		if err = l.qp.PostSend(&rdma.SendWR{ID: 1 << 40, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: sge}); err != nil {
			break
		}
		var rsp iser.PDU
		var slot int
		sent := false
		for !sent || rsp.BHS == nil {
			var wc rdma.WC
			if wc, err = l.next(ctx); err != nil {
				break
			}
			if wc.Op != rdma.OpRecv {
				sent = true
				continue
			}
			slot = int(wc.ID)
			b := l.recvMem[slot*recvStride : slot*recvStride+wc.ByteLen]
			if _, err = iser.ParseISERHeader(b); err != nil {
				break
			}
			if rsp, err = iser.ParsePDU(b[iserHdr:], iserRecvData); err != nil {
				break
			}
		}
		if err != nil {
			break
		}
		var st iser.LoginState
		n, st, err = il.Step(rsp.BHS, rsp.Data, req, reqData)
		if perr := l.postRecv(slot); perr != nil && err == nil {
			err = perr
		}
		if st == iser.LoginDone {
			ls, _ := il.Session()
			return ls, nil
		}
		if err == nil && st == iser.LoginFailed {
			err = errors.New("login failed")
		}
	}
	return iser.Session{}, err
}

// next returns the next work completion (login phase), failing on errors.
func (l *iserLink) next(ctx context.Context) (rdma.WC, error) {
	var wc [1]rdma.WC
	for {
		if l.cq.Poll(wc[:]) == 1 {
			if wc[0].Status != rdma.StatusSuccess {
				if err := l.qp.Err(); err != nil {
					return wc[0], err
				}
				return wc[0], wc[0].Err()
			}
			return wc[0], nil
		}
		if err := l.cq.Wait(ctx); err != nil {
			return wc[0], err
		}
	}
}

// submit posts a slot's Send (any goroutine, the CQ's included).
func (l *iserLink) submit(sl *slot) error {
	s := l.s
	off := l.sendOff(sl.idx)
	hdr := l.sendMem[off : off+iserHdr]
	bhs := l.sendMem[off+iserHdr : off+iserHdr+iser.BHSSize]
	var hf iser.ISERHeaderFields
	sge := &l.sge[sl.idx]
	wr := &l.wr[sl.idx]
	*wr = rdma.SendWR{ID: uint64(sl.idx), Op: rdma.OpSend, Flags: rdma.Signaled}
	sge[0] = rdma.SGE{MR: l.sendMR, Offset: off, Length: iserHdr + iser.BHSSize}
	nsge := 1
	dlen := 0
	if sl.kind == kindCmd {
		if sl.expLen > 0 && sl.mr == nil {
			// Plain memory (Execute): register it for this command.
			mr, err := l.pd.RegisterMemory(sl.buf, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
			if err != nil {
				return fmt.Errorf("iser: registering %d bytes: %w", len(sl.buf), err)
			}
			sl.tmpMR, sl.mr, sl.mrOff = mr, mr, 0
		}
		p := &s.params
		var imm uint32
		if sl.write && p.ImmediateData {
			imm = min(sl.expLen, p.FirstBurstLength, p.MaxSendDataSegmentLength)
		}
		if sl.read || sl.expLen > imm {
			if sl.fmr == nil {
				return fmt.Errorf("iser: no registration key for this slot")
			}
			access := rdma.AccessRemoteRead
			if sl.read {
				access = rdma.AccessLocalWrite | rdma.AccessRemoteWrite
			}
			rkey, va, err := sl.fmr.Map(sl.mr, sl.mrOff, int(sl.expLen), access)
			if err != nil {
				return fmt.Errorf("iser: mapping %d bytes: %w", sl.expLen, err)
			}
			sl.rkey, sl.mapped = rkey, true
			if sl.read {
				hf.ReadValid, hf.ReadSTag, hf.ReadBaseOffset = true, rkey, va
			} else {
				hf.WriteValid, hf.WriteSTag, hf.WriteBaseOffset = true, rkey, va+uint64(imm)
			}
		}
		if imm > 0 {
			sge[1] = rdma.SGE{MR: sl.mr, Offset: sl.mrOff, Length: int(imm)}
			nsge = 2
			dlen = int(imm)
		}
		iser.BHS(sl.hdr[:])[1] |= iser.CmdFlagFinal
	} else if len(sl.data) > 0 {
		dlen = copy(l.sendMem[off+iserHdr+iser.BHSSize:off+ctlStride], sl.data)
		sge[0].Length += iser.PaddedLength(dlen)
	}
	wr.SGL = sge[:nsge]
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
		err := l.qp.PostSend(wr)
		l.smu.Unlock()
		if err != nil {
			return fmt.Errorf("iser: posting a Send: %w", err)
		}
		return nil
	}
}

func (l *iserLink) close() {
	l.once.Do(func() {
		if l.qp != nil {
			l.qp.Disconnect()
		}
		if l.cancel != nil {
			l.cancel()
		}
	})
}

// run polls the CQ until the connection ends.
func (l *iserLink) run() {
	s := l.s
	defer close(l.exited)
	for {
		n := l.cq.Poll(l.wcs)
		if n == 0 {
			dead := false
			select {
			case <-s.dead:
				dead = true
			default:
			}
			if dead {
				break
			}
			if err := l.cq.Wait(l.ctx); err != nil {
				s.fail(err)
			}
			continue
		}
		for i := range l.wcs[:n] {
			if err := l.handle(&l.wcs[i]); err != nil {
				s.fail(err)
			}
		}
	}
	s.sweep()
	l.release()
}

func (l *iserLink) handle(wc *rdma.WC) error {
	s := l.s
	select {
	case <-s.dead:
		return nil // flushed
	default:
	}
	if wc.Status != rdma.StatusSuccess {
		if err := l.qp.Err(); err != nil {
			return err
		}
		return wc.Err()
	}
	if wc.Op != rdma.OpRecv {
		if wc.ID >= uint64(len(s.slots)) {
			return nil
		}
		sl := &s.slots[wc.ID]
		if sl.kind == kindNOP && sl.itt == iser.ReservedTag {
			s.put(sl) // a ping answer: sent
			return nil
		}
		if sl.state.Load() != slotFlight || sl.pending&wantSend == 0 {
			return nil
		}
		sl.pending &^= wantSend
		if sl.pending == 0 {
			s.finish(sl)
		}
		return nil
	}
	i := int(wc.ID)
	b := l.recvMem[i*recvStride : i*recvStride+wc.ByteLen]
	if _, err := iser.ParseISERHeader(b); err != nil {
		return fmt.Errorf("iser: bad iSER header: %w", err)
	}
	p, err := iser.ParsePDU(b[iserHdr:], iserRecvData)
	if err != nil {
		return fmt.Errorf("iser: bad PDU: %w", err)
	}
	if p.BHS.Opcode() == iser.OpDataIn || p.BHS.Opcode() == iser.OpR2T {
		return fmt.Errorf("iser: the target sent %v, which iSER does not use", p.BHS.Opcode())
	}
	if wc.Flags&rdma.WCWithInv != 0 {
		sl := s.slotByITT(p.BHS.ITT())
		if sl == nil || !sl.mapped || sl.rkey != wc.InvalidatedKey {
			return fmt.Errorf("iser: the target invalidated key %#x, which the response's task did not expose", wc.InvalidatedKey)
		}
		sl.mapped = false
	}
	herr := s.handle(p)
	if err := l.postRecv(i); err != nil && !s.loggedOut.Load() {
		return err
	}
	return herr
}

// release frees the connection's resources (after the poller stopped).
func (l *iserLink) release() {
	if l.qp != nil {
		l.qp.Close()
	}
	if l.s != nil {
		for i := range l.s.slots {
			if sl := &l.s.slots[i]; sl.fmr != nil {
				sl.fmr.Close()
				sl.fmr = nil
			}
		}
	}
	if l.sendMR != nil {
		l.sendMR.Deregister()
	}
	if l.recvMR != nil {
		l.recvMR.Deregister()
	}
	if l.cq != nil {
		l.cq.Close()
	}
	if l.pd != nil {
		l.pd.Close()
	}
}
