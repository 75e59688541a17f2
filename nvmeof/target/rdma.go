package target

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/rdmaq"
)

// The NVMe/RDMA transport binding (NVMe over Fabrics 1.1 section 7.3,
// nvme-rdma.h): CM private data, capsules received into a ring whose
// in-capsule data lands page aligned, keyed SGLs served by RDMA Read and
// RDMA Write, completions by Send (with Invalidate of the host's key for
// SGL subtype 0xF). The queue machinery is rdmaq.TargetQueue's; the
// commands are the core's (core.go).

// rdmaReq is a request slot's state in the RDMA binding.
type rdmaReq struct {
	request
	keyed bool   // the data pointer is a keyed SGL
	inval bool   // ... asking for Send with Invalidate
	raddr uint64 // the host's buffer
	rkey  uint32
	dsgl  [maxDataSGE]rdma.SGE // zero-copy reads and placed writes: the disk memory to RDMA-Write from or RDMA-Read into
}

// rdmaQueue is one NVMe/RDMA queue pair: an rdmaq.TargetQueue carrying an
// sq of the core.
type rdmaQueue struct {
	tq *rdmaq.TargetQueue[rdmaReq]
	sq *sq
}

// rdmaListener is an RDMA/CM listener behind a port.
type rdmaListener struct{ rdma.Listener }

// listenRDMA listens on addr with provider p (the port's).
func (t *Target) listenRDMA(p rdma.Provider, addr string) (portListener, error) {
	ln, err := p.Listen(t.ctx, addr)
	if err != nil {
		return nil, err
	}
	return rdmaListener{ln}, nil
}

// serve implements portListener: each connection request is one queue.
func (l rdmaListener) serve(p *Port) {
	for {
		req, err := l.Accept(p.ctx)
		if err != nil {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, rdma.ErrClosed) {
				p.t.log.Warn("nvmeof: accept failed", "port", p.cfg.ID, "transport", TransportRDMA, "err", err)
			}
			return
		}
		p.goServe(func() { p.serveConn(req, time.Now()) })
	}
}

// trTypes implements portListener.
func (rdmaListener) trTypes() []uint8 { return []uint8{nvmeof.TrTypeRDMA} }

// fillTSAS sets the transport fields of a discovery log entry for trType
// (NVMe over Fabrics 1.1 section 5.3: the RDMA TSAS; for TCP the TSAS is
// SECTYPE, 0 for no security, as nvmet reports without TLS).
func fillTSAS(e *nvmeof.DiscoveryLogEntry, trType uint8) {
	e.TrType = trType
	if trType == nvmeof.TrTypeRDMA {
		e.RDMAQPType, e.RDMAPrType, e.RDMACMS = nvmeof.RDMAQPTypeConnected, nvmeof.RDMAPrTypeNotSpecified, nvmeof.RDMACMSRDMACM
	}
}

// serveConn runs one queue from its connection request, whose
// connection began at since, to its end.
func (p *Port) serveConn(req rdma.ConnRequest, since time.Time) {
	peer := addrString(req.RemoteAddr())
	if p.closing() {
		p.refuse(nvmeof.TrTypeRDMA, portShuttingDown, peer, nil)
		rejectCM(req, nvmeof.CMNoResources)
		return
	}
	f, err := nvmeof.ParseCMRequest(req.PrivateData())
	if err == nil {
		err = f.Check(uint16(p.cfg.MaxIOQueues), uint16(p.cfg.MaxQueueSize))
	}
	if err != nil {
		st := nvmeof.CMInvalidLength
		errors.As(err, &st)
		p.refuse(nvmeof.TrTypeRDMA, portCMPrivateData, peer, err)
		rejectCM(req, st)
		return
	}
	q, err := p.newRDMAQueue(f)
	if err != nil {
		p.refuse(nvmeof.TrTypeRDMA, portNoResources, peer, err)
		rejectCM(req, nvmeof.CMNoResources)
		return
	}
	defer q.close()
	q.sq.remote = peer
	acc := make([]byte, nvmeof.CMAcceptSize)
	nvmeof.CMAccept(acc).Encode(&nvmeof.CMAcceptFields{RecFmt: nvmeof.CMRecFmt, CRQSize: uint16(q.sq.depth)})
	if err := req.Accept(p.ctx, q.tq.QP(), rdma.ConnParam{PrivateData: acc, ResponderResources: 1}); err != nil {
		why := portAcceptFailed
		if p.closing() {
			why = portShuttingDown
		}
		p.refuse(nvmeof.TrTypeRDMA, why, peer, err)
		return
	}
	defer p.accepted(nvmeof.TrTypeRDMA, peer, "qid", q.sq.qid, "depth", q.sq.depth)()
	p.t.addQueue(q.sq)
	defer p.t.removeQueue(q.sq)
	ct := p.startConnectTimer(since, func() bool { return q.sq.controller() != nil }, q.tq.Disconnect)
	err = q.tq.Run(p.ctx)
	ct.stop()
	reason := p.endReason(err)
	if ct.expired() && q.sq.controller() == nil && reason != reasonClose && reason != reasonPortRemoved {
		// A queue that connected and sent no (successful) Connect.
		reason, err = reasonConnectTimeout, ct.err("no Fabrics Connect")
		p.connectTimedOut(nvmeof.TrTypeRDMA, peer, q.sq.qid, err)
	} else if reason == reasonTransportError {
		if qerr := q.tq.QP().Err(); qerr != nil && errors.Is(err, qerr) {
			// The connection itself ended (the host disconnected, or a
			// failure of the link), not the target on an error.
			reason = reasonHostDisconnect
		}
	}
	q.sq.shutdown(reason, err)
}

func rejectCM(req rdma.ConnRequest, st nvmeof.CMStatus) {
	rej := make([]byte, 4)
	nvmeof.CMReject(rej).Encode(&nvmeof.CMRejectFields{RecFmt: nvmeof.CMRecFmt, Status: st})
	req.Reject(rej)
}

// newRDMAQueue sizes a queue from the host's CM request: HSQSIZE+1
// receive buffers, each an SQE and the port's in-capsule data size, and
// twice as many request slots (a response holds its slot until its send
// completes).
func (p *Port) newRDMAQueue(f nvmeof.CMRequestFields) (*rdmaQueue, error) {
	depth := int(f.HSQSize) + 1
	q := &rdmaQueue{}
	q.sq = newSQ(p, f.QID, depth, 2*depth, q)
	var hook func(int)
	if f.QID != 0 {
		hook = p.t.hook
	}
	tq, err := rdmaq.NewTargetQueue(rdmaq.TargetConfig{
		Provider: p.prov, Recvs: depth, RecvLen: nvmeof.SQESize + p.cfg.InlineDataSize, SplitAt: nvmeof.SQESize,
		Slots: 2 * depth, RespLen: nvmeof.CQESize, SendSGE: maxDataSGE, SendWRs: 4 * depth,
		Implicit: f.QID != 0, ImplicitWrite: f.QID != 0, MaxData: mdts, Hook: hook,
	}, q)
	if err != nil {
		q.sq.close()
		return nil, err
	}
	q.tq = tq
	return q, nil
}

// InitSlot implements rdmaq.SlotIniter: slots are allocated as the
// requests in flight need them.
func (q *rdmaQueue) InitSlot(s *rdmaq.Slot[rdmaReq]) { s.R.id = s.Index() }

// close releases the queue once its connection ended: workers first (they
// may still post), then the RDMA resources, then the requests never
// answered: once the QP is closed, no RDMA Read of a placed write can
// still land in the disk.
func (q *rdmaQueue) close() {
	q.sq.close()
	q.tq.Close()
	for s := range q.tq.Allocated() {
		s.R.abandon()
	}
}

// Recv implements rdmaq.TargetHandler: every message is a command capsule.
func (q *rdmaQueue) Recv(m rdmaq.Msg) error {
	if m.Len < nvmeof.SQESize {
		return fmt.Errorf("capsule of %d bytes is shorter than an SQE: %w", m.Len, errQueueBroken)
	}
	q.sq.received()
	return q.tq.Admit(m)
}

// Start implements rdmaq.TargetHandler: it decodes the command and its
// data pointer, fetches host data with RDMA Read, or runs the command.
func (q *rdmaQueue) Start(s *rdmaq.Slot[rdmaReq], m rdmaq.Msg) error {
	x := &s.R
	r := &x.request
	copy(r.sqe[:], m.Head)
	switch x.decode(q.sq, m.Data, q.tq.Implicit() != nil) {
	case planRespond:
		return q.sq.respond(r)
	case planRun:
		return q.sq.run(r)
	case planDrop:
		r.state = reqFree
		if err := q.tq.Repost(s); err != nil {
			return err
		}
		return q.tq.Free(s)
	}
	if r.dir == nvmeof.DirHostToCtrl {
		if iw := q.tq.ImplicitWrite(); iw != nil && q.sq.placeWrite(r) {
			// A placed write: the RDMA Read lands in the disk's memory.
			sgl := x.dsgl[:r.nseg]
			for i, b := range r.segs[:r.nseg] {
				sgl[i] = rdma.SGE{MR: iw, Buf: b}
			}
			r.state = reqFetching
			q.tq.Fetch(s, 1)
			return q.tq.ReadSGL(s, sgl, x.raddr, x.rkey)
		}
	}
	// Sized by what the command moves (grown in powers of two, registered
	// once per size), not MDTS: a queue of 4 KiB I/O keeps 4 KiB buffers.
	buf, err := s.EnsureData(r.xferLen)
	if err != nil {
		r.status = nvmeof.StatusInternal
		return q.sq.respond(r)
	}
	r.xfer = buf[:r.xferLen]
	if r.dir == nvmeof.DirHostToCtrl {
		r.state = reqFetching
		return q.tq.Read(s, 0, r.xferLen, x.raddr, x.rkey)
	}
	if q.sq.qid == 0 {
		clear(r.xfer)
	}
	return q.sq.run(r)
}

// plan is what a decoded command needs next.
type plan uint8

const (
	planRespond plan = iota // an error status: respond at once
	planRun                 // data in place (or none): run it
	planBuffer              // a keyed SGL with data: give it a buffer (and RDMA Read host data)
	planDrop                // dropped unanswered (the target drains): free the slot
)

// decode begins the command in x.sqe on q and decodes its data pointer
// (NVMe over Fabrics 1.1 section 7.3.2: keyed SGL data block descriptors,
// or an offset into the in-capsule data inCapsule). views tells whether
// reads may go straight from disk memory (an implicit MR).
func (x *rdmaReq) decode(q *sq, inCapsule []byte, views bool) plan {
	r := &x.request
	x.keyed, x.inval = false, false
	if !q.begin(r) {
		if r.state == reqDropped {
			return planDrop
		}
		return planRespond
	}
	if r.dir != nvmeof.DirHostToCtrl && r.dir != nvmeof.DirCtrlToHost {
		return planRun
	}
	sgl := nvmeof.SQE(r.sqe[:]).DPTR()
	if err := sgl.CheckRDMA(r.dir == nvmeof.DirHostToCtrl, uint32(len(inCapsule))); err != nil {
		var ce *nvmeof.CommandError
		if errors.As(err, &ce) {
			r.fail(ce)
		} else {
			r.status, r.errLoc = nvmeof.StatusInvalidField.WithDNR(), offDPTR
		}
		return planRespond
	}
	if !r.checkLength(sgl.Length()) {
		return planRespond
	}
	length := int(sgl.Length())
	r.xferLen = length
	if !sgl.Keyed() {
		// CheckRDMA bounded offset+length by the data received.
		off := int(sgl.Address())
		r.xfer = inCapsule[off : off+length]
		return planRun
	}
	x.keyed, x.inval, x.raddr, x.rkey = true, sgl.Invalidate(), sgl.Address(), sgl.Key()
	r.views = views
	if length == 0 {
		return planRun
	}
	return planBuffer
}

// Fetched implements rdmaq.TargetHandler: the host data is in.
func (q *rdmaQueue) Fetched(s *rdmaq.Slot[rdmaReq]) error { return q.sq.run(&s.R.request) }

// Sent implements rdmaq.TargetHandler: the completion reached the host.
func (q *rdmaQueue) Sent(s *rdmaq.Slot[rdmaReq]) {
	s.R.sent()
	s.R.done()
}

// CtlSent implements rdmaq.TargetHandler (no control buffers).
func (q *rdmaQueue) CtlSent(int) error { return nil }

// respond implements transport: the receive buffer goes back to the host
// first, as nvmet does, so the host can never send into a missing buffer;
// then the read data by RDMA Write (straight from a RAM disk's chunks when
// the core found views) and the completion by Send.
func (q *rdmaQueue) respond(r *request) error {
	r.batch = nil // (each response is its own post)
	s := q.tq.Slot(r.id)
	x := &s.R
	r.encodeCQE(s.Resp(), q.sq.qid)
	if err := q.tq.Repost(s); err != nil {
		return err
	}
	if r.dir == nvmeof.DirCtrlToHost && r.status == nvmeof.StatusSuccess && r.outLen > 0 && x.keyed {
		var err error
		if r.nseg > 0 {
			// io.go checked outLen <= xferLen.
			sgl := x.dsgl[:r.nseg]
			for i, b := range r.segs[:r.nseg] {
				sgl[i] = rdma.SGE{MR: q.tq.Implicit(), Buf: b}
			}
			err = q.tq.WriteSGL(s, sgl, x.raddr, x.rkey)
		} else {
			err = q.tq.Write(s, 0, min(r.outLen, r.xferLen), x.raddr, x.rkey)
		}
		if err != nil {
			return err
		}
	}
	var inv uint32
	if x.keyed && x.inval {
		inv = x.rkey
	}
	return q.tq.Respond(s, nvmeof.CQESize, inv, 0)
}

// release implements transport.
func (q *rdmaQueue) release(r *request) error { return q.tq.Repost(q.tq.Slot(r.id)) }

// buffer implements transport.
func (q *rdmaQueue) buffer(r *request) ([]byte, error) { return q.tq.Slot(r.id).EnsureData(mdts) }

// disconnect implements transport.
func (q *rdmaQueue) disconnect() { q.tq.Disconnect() }

// finish implements transport: a response counts as sent once its Send
// completed, delivered, so nothing is left to wait for.
func (q *rdmaQueue) finish() { q.tq.Disconnect() }

// trType implements transport.
func (q *rdmaQueue) trType() uint8 { return nvmeof.TrTypeRDMA }
