package target

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
	"unsafe"

	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/scsi"
)

// iSER buffer layout. A receive buffer holds the iSER header, the BHS, an
// AHS for a long CDB and a data segment of up to TargetRecvDataSegmentLength
// (immediate data, login and text requests), as Linux isert sizes them.
const (
	iserHdr      = iser.ISERHeaderSize
	iserRecvData = 8192
	iserRecvLen  = (iserHdr + iser.BHSSize + 256 + iserRecvData + 63) &^ 63
	taskSendLen  = (iserHdr + iser.BHSSize + 2 + 252 + 63) &^ 63 // response with sense
	ctlSendLen   = (iserHdr + iser.BHSSize + iserRecvData + 63) &^ 63
	ctlBufs      = 16
	extraRecvs   = 16

	// Work request ID tags; the low bits are the task or buffer index.
	wrRecv = 0 << 32
	wrTask = 1 << 32 // a response Send
	wrRead = 2 << 32 // an RDMA Read of data-out
	wrCtl  = 3 << 32 // a control PDU Send
	wrMask = 0xffffffff
)

// iserConn is an iSER connection: one goroutine polls its CQ (receives,
// send and RDMA Read completions) and runs the receive side; workers post
// responses directly.
type iserConn struct {
	t       *Target
	c       *conn
	req     rdma.ConnRequest
	pd      rdma.PD
	cq      rdma.CQ
	qp      rdma.QP
	sendInv bool
	ntasks  int

	recvMem []byte
	recvMR  rdma.MR
	nrecv   int
	rwr     rdma.RecvWR
	rsge    [1]rdma.SGE

	sendMem []byte // task responses, then control PDUs
	sendMR  rdma.MR
	ctlBase int

	// Per task: its data buffer's registration and work requests.
	mrs   []rdma.MR
	wrs   []taskWR
	reads []rdma.SendWR
	rsges [][1]rdma.SGE

	smu      sync.Mutex // StatSN order and posting
	statSN   uint32
	ctlFree  []int
	ctlQ     []*ctl
	ctlClose [ctlBufs]bool
	ctlWR    rdma.SendWR
	ctlSGE   [1]rdma.SGE

	shutOnce sync.Once
	down     bool
	early    []rdma.WC // receives completed while the login finished
}

type taskWR struct {
	write rdma.SendWR
	send  rdma.SendWR
	wsge  [1]rdma.SGE
	ssge  [1]rdma.SGE
}

// serveISER runs an iSER connection from its connection request to its end.
func (t *Target) serveISER(req rdma.ConnRequest) {
	log := t.log.With("peer", req.RemoteAddr().String(), "transport", "iser")
	cm, _ := iser.ParseISERCM(req.PrivateData())
	acc, sendInv := iser.AcceptFor(cm, !t.cfg.NoSendWithInvalidate)
	// One send buffer, MR and work request per task slot of the conn.
	ntasks := taskSlots(t.cfg.QueueDepth)
	x := &iserConn{t: t, req: req, sendInv: sendInv, ntasks: ntasks, nrecv: t.cfg.QueueDepth + extraRecvs}
	if err := x.alloc(); err != nil {
		log.Warn("iser: no resources for a connection", "err", err)
		req.Reject(nil)
		x.free()
		return
	}
	defer x.free()
	pd := make([]byte, iser.ISERCMSize)
	acc.Encode(pd)
	// Half the initiator's IRD: rdisk's iWARP provider (and so an rdisk
	// initiator) frees an inbound Read's IRD slot only after the writev
	// of its response returns, so a requester at exactly IRD can overrun
	// it (see the report in the package doc).
	ord := max(1, min(req.ResponderResources()/2, 16))
	ctx, cancel := context.WithTimeout(t.ctx, t.cfg.LoginTimeout)
	defer cancel()
	if err := req.Accept(ctx, x.qp, rdma.ConnParam{PrivateData: pd, ResponderResources: req.InitiatorDepth(), InitiatorDepth: ord}); err != nil {
		log.Info("iser: accept failed", "err", err)
		return
	}
	if !t.track(x) {
		return
	}
	defer t.untrack(x)
	tsih := t.newTSIH()
	defer t.releaseTSIH(tsih)
	ls, id, err := x.login(ctx, tsih)
	if err != nil {
		log.Info("iser: login failed", "err", err)
		time.Sleep(10 * time.Millisecond) // let the Login Response go out
		x.shut()
		return
	}
	log = log.With("initiator", id.InitiatorName, "tsih", ls.TSIH)
	x.statSN = ls.StatSN
	c := newConn(t, ls, x, log)
	c.connID = ls.CID
	x.c = c
	s, err := t.openSession(ls, id, c)
	if err != nil {
		log.Warn("iser: opening the session", "err", err)
		x.shut()
		return
	}
	c.sess = s
	log.Info("iser: session started", "type", ls.Params.SessionType, "target", ls.Params.TargetName, "send_with_inv", sendInv)
	c.start()
	err = x.loop()
	x.shut()
	c.stop()
	log.Info("iser: session ended", "reason", err)
}

func (x *iserConn) alloc() error {
	p := x.t.cfg.Provider
	var err error
	if x.pd, err = p.AllocPD(); err != nil {
		return fmt.Errorf("allocating a PD: %w", err)
	}
	nsend := 2*x.ntasks + ctlBufs + 8
	if x.cq, err = p.CreateCQ(nsend + x.nrecv + 16); err != nil {
		return fmt.Errorf("creating a CQ: %w", err)
	}
	if x.qp, err = x.pd.CreateQP(rdma.QPConfig{SendCQ: x.cq, RecvCQ: x.cq, MaxSendWR: nsend, MaxRecvWR: x.nrecv,
		MaxSendSGE: 1, MaxRecvSGE: 1}); err != nil {
		return fmt.Errorf("creating a QP: %w", err)
	}
	x.recvMem = make([]byte, x.nrecv*iserRecvLen)
	if x.recvMR, err = x.pd.RegisterMemory(x.recvMem, rdma.AccessLocalWrite); err != nil {
		return fmt.Errorf("registering receive buffers: %w", err)
	}
	x.ctlBase = x.ntasks * taskSendLen
	x.sendMem = make([]byte, x.ctlBase+ctlBufs*ctlSendLen)
	if x.sendMR, err = x.pd.RegisterMemory(x.sendMem, rdma.AccessLocalWrite); err != nil {
		return fmt.Errorf("registering send buffers: %w", err)
	}
	x.mrs = make([]rdma.MR, x.ntasks)
	x.wrs = make([]taskWR, x.ntasks)
	x.reads = make([]rdma.SendWR, x.ntasks)
	x.rsges = make([][1]rdma.SGE, x.ntasks)
	for i := range ctlBufs {
		x.ctlFree = append(x.ctlFree, i)
	}
	x.rwr.SGL = x.rsge[:]
	for i := range x.nrecv {
		if err := x.postRecv(i); err != nil {
			return fmt.Errorf("posting receives: %w", err)
		}
	}
	return nil
}

func (x *iserConn) postRecv(i int) error {
	x.rsge[0] = rdma.SGE{MR: x.recvMR, Offset: i * iserRecvLen, Length: iserRecvLen}
	x.rwr.ID = wrRecv | uint64(i)
	return x.qp.PostRecv(&x.rwr)
}

func (x *iserConn) free() {
	if x.qp != nil {
		x.qp.Close()
	}
	for _, mr := range x.mrs {
		if mr != nil {
			mr.Deregister()
		}
	}
	if x.recvMR != nil {
		x.recvMR.Deregister()
	}
	if x.sendMR != nil {
		x.sendMR.Deregister()
	}
	if x.cq != nil {
		x.cq.Close()
	}
	if x.pd != nil {
		x.pd.Close()
	}
}

// Close implements io.Closer for the target's connection tracking.
func (x *iserConn) Close() error {
	x.shut()
	return nil
}

// login runs the login phase over Sends and receives.
func (x *iserConn) login(ctx context.Context, tsih uint16) (iser.Session, iser.LoginIdentity, error) {
	tl, err := iser.NewTargetLogin(&x.t.rdmLogin, tsih)
	if err != nil {
		return iser.Session{}, iser.LoginIdentity{}, err
	}
	buf := x.sendMem[x.ctlBase : x.ctlBase+ctlSendLen]
	rsp := buf[iserHdr : iserHdr+iser.BHSSize]
	rspData := buf[iserHdr+iser.BHSSize:]
	wcs := make([]rdma.WC, 8)
	sendBusy := false
	for {
		var p iser.PDU
		slot := -1
		for slot < 0 || sendBusy {
			n := x.cq.Poll(wcs)
			if n == 0 {
				if err := x.cq.Wait(ctx); err != nil {
					return iser.Session{}, iser.LoginIdentity{}, err
				}
				continue
			}
			for _, wc := range wcs[:n] {
				if wc.Status != rdma.StatusSuccess {
					return iser.Session{}, iser.LoginIdentity{}, fmt.Errorf("%v completion: %v", wc.Op, wc.Status)
				}
				if wc.Op != rdma.OpRecv {
					sendBusy = false
					continue
				}
				if slot >= 0 {
					return iser.Session{}, iser.LoginIdentity{}, errors.New("a second PDU before the Login Response")
				}
				slot = int(wc.ID & wrMask)
				b := x.recvMem[slot*iserRecvLen : slot*iserRecvLen+wc.ByteLen]
				if _, err := iser.ParseISERHeader(b); err != nil {
					return iser.Session{}, iser.LoginIdentity{}, err
				}
				if p, err = iser.ParsePDU(b[iserHdr:], iserRecvData); err != nil {
					return iser.Session{}, iser.LoginIdentity{}, err
				}
			}
		}
		n, st, lerr := tl.Step(p.BHS, p.Data, rsp, rspData)
		if err := x.postRecv(slot); err != nil {
			return iser.Session{}, iser.LoginIdentity{}, err
		}
		iser.ISERHeader(buf).Encode(&iser.ISERHeaderFields{})
		iser.BHS(rsp).SetLengths(0, n)
		sge := []rdma.SGE{{MR: x.sendMR, Offset: x.ctlBase, Length: iserHdr + iser.BHSSize + iser.PaddedLength(n)}}
		if err := x.qp.PostSend(&rdma.SendWR{ID: wrCtl | ctlBufs, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: sge}); err != nil {
			return iser.Session{}, iser.LoginIdentity{}, err
		}
		sendBusy = true
		switch st {
		case iser.LoginFailed:
			return iser.Session{}, tl.Identity(), lerr
		case iser.LoginDone:
			// Wait for the final response's send completion: its
			// buffer becomes a control buffer.
			for sendBusy {
				n := x.cq.Poll(wcs[:1])
				if n == 0 {
					if err := x.cq.Wait(ctx); err != nil {
						return iser.Session{}, iser.LoginIdentity{}, err
					}
					continue
				}
				if wcs[0].Status != rdma.StatusSuccess {
					return iser.Session{}, iser.LoginIdentity{}, fmt.Errorf("%v completion: %v", wcs[0].Op, wcs[0].Status)
				}
				if wcs[0].Op != rdma.OpRecv {
					sendBusy = false
				} else {
					// The initiator saw the response before our send
					// completion: full feature phase handles it.
					x.early = append(x.early, wcs[0])
				}
			}
			ls, _ := tl.Session()
			return ls, tl.Identity(), nil
		}
	}
}

// loop polls the CQ in full feature phase until the connection ends.
func (x *iserConn) loop() error {
	c := x.c
	for i := range x.early {
		if err := x.complete(&x.early[i]); err != nil {
			return err
		}
	}
	x.early = nil
	wcs := make([]rdma.WC, 32)
	for {
		n := x.cq.Poll(wcs)
		if n == 0 {
			c.runInline()
			if err := x.cq.Wait(x.t.ctx); err != nil {
				return err
			}
			continue
		}
		for i := range wcs[:n] {
			if err := x.complete(&wcs[i]); err != nil {
				return err
			}
		}
		c.runInline()
	}
}

func (x *iserConn) complete(wc *rdma.WC) error {
	c := x.c
	if wc.Status != rdma.StatusSuccess {
		if err := x.qp.Err(); err != nil {
			return err
		}
		return wc.Err()
	}
	idx := int(wc.ID & wrMask)
	switch wc.ID &^ wrMask {
	case wrRecv:
		return x.recv(idx, wc.ByteLen)
	case wrTask:
		c.release(&c.tasks[idx])
	case wrRead:
		tk := &c.tasks[idx]
		c.mu.Lock()
		tk.pending = 0
		tk.got = tk.need
		c.mu.Unlock()
		c.dataReady(tk)
	case wrCtl:
		x.smu.Lock()
		cl := idx < ctlBufs && x.ctlClose[idx]
		if idx < ctlBufs {
			x.ctlClose[idx] = false
			x.ctlFree = append(x.ctlFree, idx)
		}
		x.flushCtlLocked()
		x.smu.Unlock()
		if cl {
			c.drop("logout")
		}
	}
	return nil
}

// recv handles a received PDU (CQ goroutine).
func (x *iserConn) recv(slot, n int) error {
	c := x.c
	b := x.recvMem[slot*iserRecvLen : slot*iserRecvLen+n]
	if iser.ISEROpcode(b) == iser.ISEROpcodeHello {
		// Linux never sends Hello, and RFC 7145 makes it optional.
		return errors.New("iSER Hello is not supported")
	}
	ih, err := iser.ParseISERHeader(b)
	if err != nil {
		return fmt.Errorf("bad iSER header: %w", err)
	}
	p, err := iser.ParsePDU(b[iserHdr:], iserRecvData)
	if err != nil {
		return fmt.Errorf("bad PDU: %w", err)
	}
	switch p.BHS.Opcode() {
	case iser.OpSCSICommand:
		f := ih.Fields()
		xi := xferInfo{rsv: f.ReadValid, wsv: f.WriteValid, rstag: f.ReadSTag, wstag: f.WriteSTag, rva: f.ReadBaseOffset, wva: f.WriteBaseOffset}
		c.onCommand(p, &xi)
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
	return x.postRecv(slot)
}

// ensureMR returns the registration of a task's data buffer, registering
// it when the buffer is new.
func (x *iserConn) ensureMR(tk *task) (rdma.MR, error) {
	mr := x.mrs[tk.idx]
	if mr != nil {
		b := mr.Bytes()
		if len(b) == cap(tk.buf) && len(b) > 0 && unsafe.SliceData(b) == unsafe.SliceData(tk.buf) {
			return mr, nil
		}
		mr.Deregister()
		x.mrs[tk.idx] = nil
	}
	mr, err := x.pd.RegisterMemory(tk.buf[:cap(tk.buf)], rdma.AccessLocalWrite)
	if err != nil {
		return nil, err
	}
	x.mrs[tk.idx] = mr
	return mr, nil
}

// fetch implements transport: RDMA Read the data-out after the immediate
// data from the initiator's write buffer.
func (x *iserConn) fetch(tk *task) {
	c := x.c
	if tk.inv == 0 {
		tk.inv = x.invKey(tk)
	}
	if !tk.wsv {
		c.log.Info("iser: write command without a write STag", "itt", tk.itt)
		tk.failed = true
		c.failData(tk)
		return
	}
	n := int(min(tk.need, uint32(len(tk.buf)))) - int(tk.got)
	if n <= 0 {
		tk.got = tk.need
		c.dataReady(tk)
		return
	}
	mr, err := x.ensureMR(tk)
	if err != nil {
		c.log.Warn("iser: registering a data buffer", "err", err)
		c.drop("out of memory registrations")
		return
	}
	c.mu.Lock()
	tk.pending = 1
	c.mu.Unlock()
	x.rsges[tk.idx][0] = rdma.SGE{MR: mr, Offset: int(tk.got), Length: n}
	x.reads[tk.idx] = rdma.SendWR{ID: wrRead | uint64(tk.idx), Op: rdma.OpRDMARead, Flags: rdma.Signaled,
		SGL: x.rsges[tk.idx][:], RemoteAddr: tk.wva, RemoteKey: tk.wstag}
	if err := x.qp.PostSend(&x.reads[tk.idx]); err != nil {
		c.drop("posting an RDMA Read: " + err.Error())
	}
}

// invKey is the key a task's response invalidates (Linux isert: the read
// STag, else the write STag), or 0.
func (x *iserConn) invKey(tk *task) uint32 {
	if !x.sendInv {
		return 0
	}
	switch {
	case tk.rsv:
		return tk.rstag
	case tk.wsv:
		return tk.wstag
	}
	return 0
}

// fetchAbort implements transport: an RDMA Read in flight finishes first.
func (x *iserConn) fetchAbort(tk *task) bool { return tk.pending == 0 }

// respond implements transport: RDMA Write the data-in, then Send the
// SCSI Response (with Invalidate when allowed).
func (x *iserConn) respond(tk *task, inline bool) {
	c := x.c
	sc := &tk.cmd
	f, slen := c.responseFields(tk)
	off := tk.idx * taskSendLen
	buf := x.sendMem[off : off+taskSendLen]
	iser.ISERHeader(buf).Encode(&iser.ISERHeaderFields{})
	bhs := buf[iserHdr : iserHdr+iser.BHSSize]
	copy(buf[iserHdr+iser.BHSSize:], tk.rsp[:slen])
	w := &x.wrs[tk.idx]
	n := 0
	if sc.Dir == scsi.DirIn {
		n = min(sc.DataInLen, len(tk.buf))
	}
	var mr rdma.MR
	if n > 0 {
		if !tk.rsv {
			c.log.Info("iser: read command without a read STag", "itt", tk.itt)
			n = 0
			f.Underflow, f.Overflow, f.ResidualCount = true, false, tk.expLen
		} else {
			var err error
			if mr, err = x.ensureMR(tk); err != nil {
				c.log.Warn("iser: registering a data buffer", "err", err)
				c.drop("out of memory registrations")
				c.release(tk)
				return
			}
		}
	}
	if tk.inv == 0 {
		tk.inv = x.invKey(tk)
	}
	x.smu.Lock()
	c.mu.Lock()
	c.creditLocked(tk)
	c.mu.Unlock()
	iser.SCSIResponse(bhs).Encode(&f)
	c.stamp(bhs, x.statSN)
	x.statSN++
	iser.BHS(bhs).SetLengths(0, slen)
	var err error
	if n > 0 {
		w.wsge[0] = rdma.SGE{MR: mr, Length: n}
		w.write = rdma.SendWR{ID: wrTask | uint64(tk.idx), Op: rdma.OpRDMAWrite, SGL: w.wsge[:], RemoteAddr: tk.rva, RemoteKey: tk.rstag}
		err = x.qp.PostSend(&w.write)
	}
	if err == nil {
		w.ssge[0] = rdma.SGE{MR: x.sendMR, Offset: off, Length: iserHdr + iser.BHSSize + iser.PaddedLength(slen)}
		w.send = rdma.SendWR{ID: wrTask | uint64(tk.idx), Op: rdma.OpSend, Flags: rdma.Signaled, SGL: w.ssge[:]}
		if tk.inv != 0 {
			w.send.Op, w.send.InvalidateKey = rdma.OpSendWithInv, tk.inv
		}
		err = x.qp.PostSend(&w.send)
	}
	x.smu.Unlock()
	if err != nil {
		c.release(tk)
		c.drop("posting a response: " + err.Error())
	}
}

// send implements transport: control PDUs go out through a small pool of
// send buffers, queued when all are busy.
func (x *iserConn) send(p *ctl) {
	x.smu.Lock()
	x.ctlQ = append(x.ctlQ, p)
	x.flushCtlLocked()
	x.smu.Unlock()
}

func (x *iserConn) flushCtlLocked() {
	c := x.c
	for len(x.ctlQ) > 0 && len(x.ctlFree) > 0 && !x.down {
		p := x.ctlQ[0]
		x.ctlQ[0] = nil
		x.ctlQ = x.ctlQ[1:]
		i := x.ctlFree[len(x.ctlFree)-1]
		x.ctlFree = x.ctlFree[:len(x.ctlFree)-1]
		off := x.ctlBase + i*ctlSendLen
		buf := x.sendMem[off : off+ctlSendLen]
		iser.ISERHeader(buf).Encode(&iser.ISERHeaderFields{})
		bhs := buf[iserHdr : iserHdr+iser.BHSSize]
		copy(bhs, p.hdr[:])
		c.stamp(bhs, x.statSN)
		if p.advance {
			x.statSN++
		}
		dl := copy(buf[iserHdr+iser.BHSSize:], p.data)
		iser.BHS(bhs).SetLengths(0, dl)
		x.ctlClose[i] = p.close
		x.ctlSGE[0] = rdma.SGE{MR: x.sendMR, Offset: off, Length: iserHdr + iser.BHSSize + iser.PaddedLength(dl)}
		x.ctlWR = rdma.SendWR{ID: wrCtl | uint64(i), Op: rdma.OpSend, Flags: rdma.Signaled, SGL: x.ctlSGE[:]}
		if err := x.qp.PostSend(&x.ctlWR); err != nil {
			x.down = true
			go c.drop("posting a control PDU: " + err.Error())
			return
		}
	}
}

// shut implements transport.
func (x *iserConn) shut() {
	x.shutOnce.Do(func() {
		x.smu.Lock()
		x.down = true
		x.smu.Unlock()
		x.qp.Disconnect()
	})
}

func (x *iserConn) localAddr() net.Addr { return x.req.LocalAddr() }
