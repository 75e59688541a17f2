package target

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/internal/stream"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/tcp"
	"github.com/rdisk/rdisk/rdma"
)

// The NVMe/TCP transport binding (NVMe over Fabrics TCP Transport
// Specification 1.0; Linux drivers/nvme/target/tcp.c): one TCP connection
// per queue, ICReq/ICResp, command capsules with in-capsule data, C2HData
// for reads (with the SUCCESS flag and no response capsule when the host
// disabled SQ flow control), R2T and H2CData for writes, header and data
// digests, and C2HTermReq on every fatal error.
//
// One goroutine, the queue's receiver, owns the connection's receive state
// and the command slots: it reads each PDU header through a small buffer
// and the payload straight into the command's buffer (internal/stream),
// then starts the command in the core. Responses are vectored writes of
// headers and data (read data goes out from the disk's memory when the
// core found views); the ones made while the receiver still has PDUs to
// process are held and go out together before it next reads, responses
// from disk workers go out at once. A mutex serializes writers.

const (
	// tcpAdminInCapsule is the in-capsule data an admin queue accepts:
	// Linux hosts send up to NVME_TCP_ADMIN_CCSZ (8 KiB) whatever IOCCSZ
	// says, Fabrics Connect data among it.
	tcpAdminInCapsule = 8192
	// tcpMaxH2CData is the MAXH2CDATA offered: an R2T never asks for more
	// than MDTS, so one H2CData PDU may carry a whole transfer.
	tcpMaxH2CData = mdts
	// tcpLinger bounds the wait for the host to close a connection the
	// target finished (tcpQueue.finish).
	tcpLinger = 2 * time.Second
	// tcpPDA is the data alignment the target asks for (CPDA 0: dwords).
	tcpPDA = 4
	// tcpFlushEvery: the receiver sends the responses it holds once this
	// many are ready, without waiting to have processed all it read, so
	// the host completes and resubmits while the rest are executed
	// (4 KiB randread QD32 from a RAM disk, one queue, interleaved runs:
	// 147k/149k IOPS holding all, 183k/191k every 4, 215k/217k every 8,
	// 172k/209k every 16).
	tcpFlushEvery = 8
	// tcpMaxIov bounds the iovecs of one response: C2HData header, pad,
	// maxDataSGE pieces, data digest, response capsule.
	tcpMaxIov = maxDataSGE + 4
)

// tcpListener is a TCP listener behind a port; with sp set, RDMA
// connection requests of a stream provider share it (one port number for
// NVMe/TCP and NVMe/RDMA over iWARP).
type tcpListener struct {
	net.Listener
	sp rdma.StreamProvider
}

// listenTCP listens on addr; with sp, RDMA connections share the port.
func (t *Target) listenTCP(addr string, sp rdma.StreamProvider) (portListener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &tcpListener{Listener: ln, sp: sp}, nil
}

// serve implements portListener: each connection is one queue.
func (l *tcpListener) serve(p *Port) {
	for {
		c, err := l.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				p.t.log.Warn("nvmeof: accept failed", "port", p.cfg.ID, "transport", p.Transport(), "err", err)
			}
			return
		}
		p.goServe(func() { p.serveStream(c, l.sp) })
	}
}

// trTypes implements portListener.
func (l *tcpListener) trTypes() []uint8 {
	if l.sp != nil {
		return []uint8{nvmeof.TrTypeRDMA, nvmeof.TrTypeTCP}
	}
	return []uint8{nvmeof.TrTypeTCP}
}

// serveStream runs one accepted connection: an NVMe/RDMA connection
// request (when the port shares its number with RDMA) or an NVMe/TCP queue.
func (p *Port) serveStream(c net.Conn, sp rdma.StreamProvider) {
	defer c.Close()
	peer := addrString(c.RemoteAddr())
	if p.closing() {
		p.refuse(nvmeof.TrTypeTCP, portShuttingDown, peer, nil)
		return
	}
	stop := context.AfterFunc(p.ctx, func() { c.Close() })
	defer stop()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	since := time.Now()
	rd := stream.New(c)
	q := &tcpQueue{p: p, c: c, rd: rd, pduTimeout: p.t.pduTimeout}
	q.flushBatch = q.batchFlush
	// The connect timeout covers the MPA request or the ICReq too.
	ct := p.startConnectTimer(since, q.connected, func() { c.Close() })
	defer ct.stop()
	if sp != nil {
		n := max(sp.ConnRequestPrefix(), tcp.CommonHeaderSize)
		if err := rd.Ensure(n); err != nil {
			if ct.expired() {
				err = ct.err("no ICReq or MPA request")
			}
			p.refuse(nvmeof.TrTypeTCP, p.setupFailure(portNoICReq), peer, err)
			return
		}
		if sp.IsConnRequest(rd.Buffered()[:sp.ConnRequestPrefix()]) {
			rest := slices.Clone(rd.Buffered())
			// The provider reads the rest of the MPA request under the
			// connect timeout's deadline; the RDMA queue has a timer of
			// its own from then on.
			ct.stop()
			ctx, cancel := p.ctx, context.CancelFunc(func() {})
			if d := p.t.connectTimeout; d > 0 {
				ctx, cancel = context.WithDeadline(p.ctx, since.Add(d))
			}
			req, err := sp.ServeConn(ctx, c, rest)
			cancel()
			if err != nil {
				p.refuse(nvmeof.TrTypeRDMA, p.setupFailure(portAcceptFailed), peer, err)
				return
			}
			p.serveConn(req, since)
			return
		}
	}
	rd.BeforeRead = q.beforeRead
	if err := q.initConn(); err != nil {
		why := portNoICReq
		if _, ok := errors.AsType[*tcp.Error](err); ok {
			why = portICReq
		} else if ct.expired() {
			err = ct.err("no ICReq")
		}
		p.refuse(nvmeof.TrTypeTCP, p.setupFailure(why), peer, err)
		return
	}
	defer p.accepted(nvmeof.TrTypeTCP, peer, "hdgst", q.hdgst, "ddgst", q.ddgst)()
	err := q.run()
	ct.stop()
	reason := p.endReason(err)
	if ct.expired() && !q.connected() && reason != reasonClose && reason != reasonPortRemoved {
		reason, err = reasonConnectTimeout, ct.err("no Fabrics Connect")
		p.connectTimedOut(nvmeof.TrTypeTCP, peer, q.qid(), err)
	} else if te, ok := errors.AsType[*tcp.Error](err); ok && q.sq == nil {
		// Before its first command: no queue to log its end.
		p.t.log.Warn("nvmeof: queue ended on a transport error", "port", p.cfg.ID, "transport", TransportTCP, "peer", peer,
			"reason", reasonTransportError, "err", err, "fes", tcp.FESName(te.FES))
	}
	q.end(reason, err)
}

// connected reports whether the queue's Fabrics Connect succeeded. Safe
// from any goroutine.
func (q *tcpQueue) connected() bool {
	s := q.bound.Load()
	return s != nil && s.controller() != nil
}

// qid is the queue's ID, 0 before its first command (receiver only).
func (q *tcpQueue) qid() uint16 {
	if q.sq == nil {
		return 0
	}
	return q.sq.qid
}

// setupFailure is why a connection that failed before it carried a
// queue counts as refused: why, unless the port was closing.
func (p *Port) setupFailure(why portReason) portReason {
	if p.closing() {
		return portShuttingDown
	}
	return why
}

// tcpReq is a request slot's state in the TCP binding.
type tcpReq struct {
	request
	buf   []byte // data buffer, page aligned (grown on demand up to mdts)
	recvd int    // host data placed so far (H2CData)
	r2t   bool   // waiting for H2CData
	ddErr bool   // a data digest mismatched: the command fails
	// hdr holds the PDU headers the slot sends: C2HData (and its header
	// digest), its data digest, the response capsule (and digest), R2T.
	hdr [tcpHdrArena]byte
}

const (
	tcpC2HOff   = 0
	tcpDDOff    = tcpC2HOff + tcp.DataHLen + tcp.DigestSize
	tcpRespOff  = tcpDDOff + tcp.DigestSize
	tcpR2TOff   = tcpRespOff + tcp.CapsuleRespHLen + tcp.DigestSize
	tcpHdrArena = tcpR2TOff + tcp.R2THLen + tcp.DigestSize
)

// ensure gives the slot a data buffer of at least n bytes.
func (x *tcpReq) ensure(n int) ([]byte, error) {
	if n <= len(x.buf) {
		return x.buf, nil
	}
	if n > mdts && n > tcpAdminInCapsule {
		return nil, fmt.Errorf("data buffer of %d bytes exceeds the %d-byte maximum", n, mdts)
	}
	size := 4096
	for size < n {
		size *= 2
	}
	x.buf = backstore.AlignedBuffer(size, 4096)
	return x.buf, nil
}

// tcpQueue is one NVMe/TCP queue: a connection carrying an sq of the core.
type tcpQueue struct {
	p  *Port
	c  net.Conn
	rd *stream.Reader
	sq *sq // set by the first command capsule (bind)
	// bound is sq, for the connect timer's goroutine.
	bound atomic.Pointer[sq]

	hdgst, ddgst bool
	hpda         int // the host's data alignment in bytes
	maxInCapsule int
	hooked       bool
	slots        []tcpReq
	last         [tcp.MaxHeaderSize]byte // the PDU header being handled, for terminate requests
	lastLen      int
	ddBuf        [tcp.DigestSize]byte
	// pduTimeout is Config.TCPPDUTimeout (0: none); midPDU is set from
	// the first byte of a PDU until the receiver waits for the next one,
	// pduDL while the read deadline of the PDU's timeout is set (the
	// receiver's reads of a PDU set it when they must wait for bytes).
	pduTimeout    time.Duration
	midPDU, pduDL bool

	mu sync.Mutex // guards what follows
	// free lists the unused slots.
	free []int
	// pend holds PDUs to send (vectors), pendReq the slots whose
	// responses they carry: both go out in flush.
	pend    [][]byte
	pendReq []int
	bufs    net.Buffers
	// inline: the receiver is processing what it read and flushes before
	// it next reads, so responses wait for it.
	inline bool
	// batched: a flush is deferred to the end of the disk's completion
	// batch (flushBatch, set once).
	batched    bool
	flushBatch func()
	werr       error
	// lingering: finish set the read deadline of the wait for the host
	// to close; the PDU timeout leaves it alone.
	lingering bool
	zero      [128]byte // padding source
	term      [tcp.MaxTermReqSize]byte
}

// run reads the connection's PDUs, once initialized, until it fails or
// closes.
func (q *tcpQueue) run() error {
	for {
		if err := q.next(); err != nil {
			if q.pduDL && errors.Is(err, os.ErrDeadlineExceeded) {
				q.mu.Lock()
				lingering := q.lingering
				q.mu.Unlock()
				if !lingering {
					return fmt.Errorf("a PDU begun %v ago is still incomplete: %w", q.pduTimeout, err)
				}
			}
			return err
		}
	}
}

// beforeRead is the stream reader's hook: send what the receiver held
// and, when the read is one of a PDU begun, bound the PDU's arrival.
func (q *tcpQueue) beforeRead() {
	q.mu.Lock()
	q.inline = false
	q.flushLocked()
	if q.midPDU && !q.pduDL && q.pduTimeout > 0 && !q.lingering {
		q.c.SetReadDeadline(time.Now().Add(q.pduTimeout))
		q.pduDL = true
	}
	q.mu.Unlock()
}

// awaitPDU ends the PDU handled (its timeout) and waits, without a bound,
// for the first byte of the next one.
func (q *tcpQueue) awaitPDU() error {
	q.midPDU = false
	if q.pduDL {
		q.pduDL = false
		q.mu.Lock()
		if !q.lingering {
			q.c.SetReadDeadline(time.Time{})
		}
		q.mu.Unlock()
	}
	if len(q.rd.Buffered()) == 0 {
		if err := q.rd.Ensure(1); err != nil {
			return err
		}
	}
	q.midPDU = true
	return nil
}

// header reads the next PDU header (common header, the rest, its digest)
// and checks it, keeping a copy for terminate requests. The header is
// valid in the reader's buffer until the next read; the caller consumes
// it.
func (q *tcpQueue) header() (tcp.Header, tcp.Layout, error) {
	if err := q.awaitPDU(); err != nil {
		return nil, tcp.Layout{}, err
	}
	if err := q.rd.Ensure(tcp.CommonHeaderSize); err != nil {
		return nil, tcp.Layout{}, err
	}
	q.mu.Lock()
	q.inline = true
	q.mu.Unlock()
	b := q.rd.Buffered()
	q.lastLen = copy(q.last[:], b[:tcp.CommonHeaderSize])
	rest, ferr := tcp.CheckHeader(b, tcp.Controller, q.hdgst)
	if ferr != nil {
		return nil, tcp.Layout{}, q.fatal(ferr)
	}
	n := tcp.CommonHeaderSize + rest
	if err := q.rd.Ensure(n); err != nil {
		return nil, tcp.Layout{}, err
	}
	h := tcp.Header(q.rd.Buffered()[:n])
	q.lastLen = copy(q.last[:], h)
	l, ferr := tcp.CheckPDU(h, q.hdgst, q.ddgst, tcpPDA)
	if ferr != nil {
		return nil, tcp.Layout{}, q.fatal(ferr)
	}
	return h, l, nil
}

// initConn takes the ICReq and answers with the ICResp (TCP spec section
// 3.6.2.1): digests as the host asks, CPDA 0, MAXH2CDATA.
func (q *tcpQueue) initConn() error {
	if err := q.rd.Ensure(tcp.CommonHeaderSize); err != nil {
		return fmt.Errorf("waiting for ICReq: %w", err)
	}
	if typ := q.rd.Buffered()[0]; typ != tcp.TypeICReq {
		q.lastLen = copy(q.last[:], q.rd.Buffered()[:tcp.CommonHeaderSize])
		return q.fatal(&tcp.Error{FES: tcp.FESPDUSequenceError, Err: fmt.Errorf("%s before ICReq", tcp.TypeName(typ))})
	}
	h, _, err := q.header()
	if err != nil {
		return err
	}
	f, ferr := tcp.CheckICReq(tcp.IC(h))
	if ferr != nil {
		return q.fatal(ferr)
	}
	q.rd.Consume(len(h))
	q.hdgst, q.ddgst = f.Digest&tcp.DigestHeader != 0, f.Digest&tcp.DigestData != 0
	q.hpda = (int(f.PDA) + 1) * 4
	var resp [tcp.ICSize]byte
	tcp.IC(resp[:]).Encode(tcp.TypeICResp, &tcp.ICFields{PFV: tcp.PFV10, PDA: 0, Digest: f.Digest, Max: tcpMaxH2CData})
	if _, err := q.c.Write(resp[:]); err != nil {
		return fmt.Errorf("sending ICResp: %w", err)
	}
	return nil
}

// next handles one PDU.
func (q *tcpQueue) next() error {
	h, l, err := q.header()
	if err != nil {
		return err
	}
	switch h.Type() {
	case tcp.TypeCapsuleCmd:
		return q.capsule(h, l)
	case tcp.TypeH2CData:
		return q.h2cData(h, l)
	case tcp.TypeH2CTermReq:
		fes, fei := tcp.TermReq(h).FES(), tcp.TermReq(h).FEI()
		q.rd.Consume(len(h))
		q.rd.Skip(l.DataLen)
		return fmt.Errorf("host sent H2CTermReq: %s (FEI %d): %w", tcp.FESName(fes), fei, tcp.ErrTerminated)
	}
	// ICReq again (CheckHeader refused the other types).
	return q.fatal(&tcp.Error{FES: tcp.FESPDUSequenceError, Err: fmt.Errorf("%s after connection initialization", tcp.TypeName(h.Type()))})
}

// bind creates the queue's core from its first command, a Fabrics Connect
// naming the queue ID and SQ size (the TCP binding has no connection
// manager data to learn them from). Any other first command gets a queue
// that answers Command Sequence Error.
func (q *tcpQueue) bind(s nvmeof.SQE) {
	p := q.p
	qid, sqsize := uint16(0), uint16(nvmeof.AdminQueueDepth-1)
	if s.IsFabrics() && s.FCType() == nvmeof.FCTypeConnect {
		qid, sqsize = s.Connect().QID(), s.Connect().SQSize()
	}
	limit := nvmeof.AdminQueueDepth
	if qid != 0 {
		limit = p.cfg.MaxQueueSize
	}
	// A larger SQSIZE gets Connect Invalid Parameters from the core.
	depth := max(min(int(sqsize)+1, limit), 1)
	q.sq = newSQ(p, qid, depth, 2*depth, q)
	if a := q.c.RemoteAddr(); a != nil {
		q.sq.remote = a.String()
	}
	q.maxInCapsule = p.cfg.TCPInlineDataSize
	if qid == 0 {
		q.maxInCapsule = max(q.maxInCapsule, tcpAdminInCapsule)
	}
	q.slots = make([]tcpReq, 2*depth)
	q.free = make([]int, 0, len(q.slots))
	for i := range q.slots {
		q.slots[i].id = i
		q.free = append(q.free, len(q.slots)-1-i)
	}
	q.pend = make([][]byte, 0, len(q.slots)*tcpMaxIov+4)
	q.pendReq = make([]int, 0, len(q.slots))
	q.bound.Store(q.sq)
	p.t.addQueue(q.sq)
	if qid != 0 && p.t.hook != nil {
		p.t.hook(1)
		q.hooked = true
	}
	p.t.log.Debug("nvmeof: tcp queue bound", q.sq.logAttrs("depth", depth)...)
}

// take returns a free slot, or -1.
func (q *tcpQueue) take() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := len(q.free)
	if n == 0 {
		return -1
	}
	id := q.free[n-1]
	q.free = q.free[:n-1]
	return id
}

// capsule handles a CapsuleCmd: the SQE, then any in-capsule data into the
// slot's buffer.
func (q *tcpQueue) capsule(h tcp.Header, l tcp.Layout) error {
	var sqe [nvmeof.SQESize]byte
	copy(sqe[:], h[tcp.CommonHeaderSize:tcp.CapsuleCmdHLen])
	q.rd.Consume(len(h))
	if q.sq == nil {
		q.bind(sqe[:])
	}
	if l.DataLen > q.maxInCapsule {
		return q.fatal(&tcp.Error{FES: tcp.FESDataLimitExceeded, Err: fmt.Errorf("command capsule with %d bytes of data, the queue takes %d", l.DataLen, q.maxInCapsule)})
	}
	id := q.take()
	if id < 0 {
		return q.fatal(&tcp.Error{FES: tcp.FESPDUSequenceError, Err: fmt.Errorf("more commands outstanding than the %d the queue holds", q.sq.depth)})
	}
	x := &q.slots[id]
	r := &x.request
	r.sqe = sqe
	x.r2t, x.ddErr, x.recvd = false, false, 0
	if err := q.rd.Skip(l.Pad); err != nil {
		return err
	}
	if l.DataLen > 0 {
		buf, err := x.ensure(l.DataLen)
		if err != nil {
			return err
		}
		if err := q.readData(x, buf[:l.DataLen], l.DataDigest); err != nil {
			return err
		}
	}
	q.sq.received()
	return q.start(x, l.DataLen)
}

// readData reads data into dst and, with a digest, checks it (a mismatch
// fails the command with Transient Transport Error; the stream stays in
// step since the header was sound).
func (q *tcpQueue) readData(x *tcpReq, dst []byte, digest bool) error {
	if err := q.rd.ReadFull(dst); err != nil {
		return err
	}
	if !digest {
		return nil
	}
	if err := q.rd.ReadFull(q.ddBuf[:]); err != nil {
		return err
	}
	if got, want := tcp.GetDigest(q.ddBuf[:]), tcp.Digest(dst); got != want {
		q.p.t.log.Info("nvmeof: tcp data digest error", q.sq.logAttrs("cid", nvmeof.SQE(x.sqe[:]).CID(),
			"got", fmt.Sprintf("%#08x", got), "want", fmt.Sprintf("%#08x", want))...)
		x.ddErr = true
	}
	return nil
}

// start begins the command in slot x, with inCap bytes of in-capsule data
// in its buffer, and decodes its data pointer.
func (q *tcpQueue) start(x *tcpReq, inCap int) error {
	r := &x.request
	if !q.sq.begin(r) {
		if r.state == reqDropped {
			q.mu.Lock()
			q.finishLocked(x.id)
			q.mu.Unlock()
			return nil
		}
		return q.sq.respond(r)
	}
	if x.ddErr {
		r.status = nvmeof.StatusTransientTransportError
		return q.sq.respond(r)
	}
	if r.dir != nvmeof.DirHostToCtrl && r.dir != nvmeof.DirCtrlToHost {
		return q.sq.run(r)
	}
	sgl := nvmeof.SQE(r.sqe[:]).DPTR()
	if err := sgl.CheckTCP(r.dir == nvmeof.DirHostToCtrl, uint32(inCap)); err != nil {
		var ce *nvmeof.CommandError
		if errors.As(err, &ce) {
			r.fail(ce)
		} else {
			r.status, r.errLoc = nvmeof.StatusInvalidField.WithDNR(), offDPTR
		}
		return q.sq.respond(r)
	}
	if !r.checkLength(sgl.Length()) {
		return q.sq.respond(r)
	}
	length := int(sgl.Length())
	r.xferLen = length
	if sgl.Type() == nvmeof.SGLTypeDataBlock {
		// CheckTCP bounded offset+length by the in-capsule data.
		off := int(sgl.Address())
		r.xfer = x.buf[off : off+length]
		return q.sq.run(r)
	}
	if length == 0 {
		return q.sq.run(r)
	}
	buf, err := x.ensure(length)
	if err != nil {
		r.status = nvmeof.StatusInternal
		return q.sq.respond(r)
	}
	r.xfer = buf[:length]
	if r.dir == nvmeof.DirHostToCtrl {
		r.state = reqFetching
		x.r2t = true
		return q.sendR2T(x)
	}
	if q.sq.qid == 0 {
		clear(r.xfer)
	} else {
		r.views = true
	}
	return q.sq.run(r)
}

// sendR2T asks for all of a write's data (TCP spec section 3.6.2.7), as
// nvmet does; the slot index is the transfer tag.
func (q *tcpQueue) sendR2T(x *tcpReq) error {
	b := x.hdr[tcpR2TOff : tcpR2TOff+tcp.R2THLen+tcp.DigestSize]
	tcp.Header(b).Put(tcp.TypeR2T, 0, tcp.R2THLen, q.hdgst, 0, false, 0)
	tcp.Data(b).Encode(&tcp.DataFields{CCCID: nvmeof.SQE(x.sqe[:]).CID(), TTag: uint16(x.id), Offset: 0, Length: uint32(x.xferLen)})
	n := tcp.Header(b).Seal(q.hdgst)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pend = append(q.pend, b[:n])
	if q.inline {
		return nil
	}
	return q.flushLocked()
}

// h2cData places an H2CData PDU's data in the command's buffer (TCP spec
// section 3.6.2.6): the transfer tag must name a command waiting for data,
// the data continue where the last PDU ended and stay within the R2T.
func (q *tcpQueue) h2cData(h tcp.Header, l tcp.Layout) error {
	f := tcp.Data(h).Fields()
	q.rd.Consume(len(h))
	if q.sq == nil || int(f.TTag) >= len(q.slots) {
		return q.fatal(&tcp.Error{FES: tcp.FESInvalidHeaderField, FEI: 10, Err: fmt.Errorf("H2CData with transfer tag %d, which no R2T gave", f.TTag)})
	}
	x := &q.slots[f.TTag]
	if !x.r2t || nvmeof.SQE(x.sqe[:]).CID() != f.CCCID {
		return q.fatal(&tcp.Error{FES: tcp.FESInvalidHeaderField, FEI: 8, Err: fmt.Errorf("H2CData for command %d with transfer tag %d, which is not waiting for data", f.CCCID, f.TTag)})
	}
	if f.Length > tcpMaxH2CData {
		return q.fatal(&tcp.Error{FES: tcp.FESDataLimitExceeded, Err: fmt.Errorf("H2CData of %d bytes, MAXH2CDATA is %d", f.Length, tcpMaxH2CData)})
	}
	if f.Offset != uint32(x.recvd) || uint64(f.Offset)+uint64(f.Length) > uint64(x.xferLen) {
		return q.fatal(&tcp.Error{FES: tcp.FESDataOutOfRange, Err: fmt.Errorf("H2CData for command %d at offset %d length %d: %d of %d bytes received", f.CCCID, f.Offset, f.Length, x.recvd, x.xferLen)})
	}
	if err := q.rd.Skip(l.Pad); err != nil {
		return err
	}
	r := &x.request
	off := int(f.Offset)
	if err := q.readData(x, r.xfer[off:off+int(f.Length)], l.DataDigest); err != nil {
		return err
	}
	x.recvd += int(f.Length)
	if x.recvd < x.xferLen {
		return nil
	}
	x.r2t = false
	if x.ddErr {
		r.status = nvmeof.StatusTransientTransportError
		return q.sq.respond(r)
	}
	return q.sq.run(r)
}

// respond implements transport: read data in a C2HData PDU (from the
// disk's memory when the core found views), then the response capsule,
// unless the host disabled SQ flow control and the command succeeded: then
// the C2HData's SUCCESS flag stands for it.
func (q *tcpQueue) respond(r *request) error {
	x := &q.slots[r.id]
	b := r.batch
	r.batch = nil
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.werr != nil {
		r.sent()
		q.finishLocked(r.id)
		return q.werr
	}
	needResp := true
	if r.dir == nvmeof.DirCtrlToHost && r.status == nvmeof.StatusSuccess && r.outLen > 0 {
		n := min(r.outLen, r.xferLen)
		success := q.sq.sqflow
		needResp = !success
		flags := tcp.FlagLast
		if success {
			flags |= tcp.FlagSuccess
		}
		b := x.hdr[tcpC2HOff : tcpC2HOff+tcp.DataHLen+tcp.DigestSize]
		pad := tcp.Header(b).Put(tcp.TypeC2HData, flags, tcp.DataHLen, q.hdgst, n, q.ddgst, q.hpda)
		tcp.Data(b).Encode(&tcp.DataFields{CCCID: nvmeof.SQE(r.sqe[:]).CID(), Offset: 0, Length: uint32(n)})
		hl := tcp.Header(b).Seal(q.hdgst)
		q.pend = append(q.pend, b[:hl])
		if pad > 0 {
			q.pend = append(q.pend, q.zero[:pad])
		}
		var dd uint32
		if r.nseg > 0 {
			left := n
			for _, s := range r.segs[:r.nseg] {
				s = s[:min(len(s), left)]
				left -= len(s)
				q.pend = append(q.pend, s)
				if q.ddgst {
					dd = tcp.UpdateDigest(dd, s)
				}
			}
		} else {
			q.pend = append(q.pend, r.xfer[:n])
			if q.ddgst {
				dd = tcp.Digest(r.xfer[:n])
			}
		}
		if q.ddgst {
			d := x.hdr[tcpDDOff : tcpDDOff+tcp.DigestSize]
			tcp.PutDigest(d, dd)
			q.pend = append(q.pend, d)
		}
	}
	if needResp {
		b := x.hdr[tcpRespOff : tcpRespOff+tcp.CapsuleRespHLen+tcp.DigestSize]
		tcp.Header(b).Put(tcp.TypeCapsuleResp, 0, tcp.CapsuleRespHLen, q.hdgst, 0, false, 0)
		r.encodeCQE(b[tcp.CommonHeaderSize:tcp.CapsuleRespHLen], q.sq.qid)
		hl := tcp.Header(b).Seal(q.hdgst)
		q.pend = append(q.pend, b[:hl])
	}
	q.pendReq = append(q.pendReq, r.id)
	if q.inline && len(q.pendReq) < tcpFlushEvery {
		return nil
	}
	if b != nil && len(q.pendReq) < tcpFlushEvery {
		// More completions follow on this goroutine: one write for all
		// of this queue's, after the last.
		if !q.batched {
			// The deferred flush counts as an operation in flight
			// until it ran: the queue's end waits for it.
			q.batched = true
			q.sq.async.Add(1)
			b.Defer(q.flushBatch)
		}
		return nil
	}
	return q.flushLocked()
}

// batchFlush sends what responses of a disk's completion batch held.
func (q *tcpQueue) batchFlush() {
	defer q.sq.async.Done()
	q.mu.Lock()
	q.batched = false
	err := q.flushLocked()
	q.mu.Unlock()
	if err != nil {
		q.sq.shutdown(reasonTransportError, err)
	}
}

// flushLocked sends what is pending in one vectored write and frees the
// slots whose responses went out.
func (q *tcpQueue) flushLocked() error {
	if len(q.pend) == 0 {
		return q.werr
	}
	if q.werr == nil {
		q.bufs = q.pend
		if _, err := q.bufs.WriteTo(q.c); err != nil {
			q.werr = fmt.Errorf("sending: %w", err)
			q.c.Close()
		}
		q.bufs = nil
	}
	clear(q.pend)
	q.pend = q.pend[:0]
	for _, id := range q.pendReq {
		q.slots[id].sent()
		q.finishLocked(id)
	}
	q.pendReq = q.pendReq[:0]
	return q.werr
}

// finishLocked frees slot id once its response is sent (or cannot be).
func (q *tcpQueue) finishLocked(id int) {
	q.slots[id].done()
	q.free = append(q.free, id)
}

// fatal ends the connection for a protocol error: a C2HTermReq with the
// error's FES and FEI echoing the offending header (TCP spec section
// 3.6.2.10), then the close.
func (q *tcpQueue) fatal(e *tcp.Error) error {
	q.mu.Lock()
	q.flushLocked()
	if q.werr == nil {
		n := tcp.EncodeTermReq(q.term[:], tcp.TypeC2HTermReq, e.FES, e.FEI, q.last[:q.lastLen])
		q.c.SetWriteDeadline(time.Now().Add(time.Second))
		q.c.Write(q.term[:n])
		q.werr = fmt.Errorf("terminated: %w", e)
	}
	q.mu.Unlock()
	q.c.Close()
	return e
}

// end tears the queue down once its receiver stopped, for reason and err
// (Port.endReason): the core first (workers may still respond), then the
// connection.
func (q *tcpQueue) end(reason string, err error) {
	q.c.Close()
	if q.sq == nil {
		return
	}
	q.sq.shutdown(reason, err)
	q.sq.close()
	for i := range q.slots {
		q.slots[i].abandon()
	}
	q.p.t.removeQueue(q.sq)
	if q.hooked {
		q.p.t.hook(-1)
	}
}

// release implements transport: the TCP binding has no receive buffers
// to give back (slots are twice the queue depth).
func (q *tcpQueue) release(*request) error { return nil }

// buffer implements transport.
func (q *tcpQueue) buffer(r *request) ([]byte, error) { return q.slots[r.id].ensure(mdts) }

// disconnect implements transport.
func (q *tcpQueue) disconnect() { q.c.Close() }

// finish implements transport: a FIN after the responses written so far,
// and the receiver, dropping what the host still sends (its controller is
// gone, or the target drains), reads until the host closes, for tcpLinger
// at most. Closing at once would reset the connection if the host's
// latest commands were still unread, and the reset would discard the
// responses not yet transmitted.
func (q *tcpQueue) finish() {
	if tc, ok := q.c.(*net.TCPConn); ok && tc.CloseWrite() == nil {
		q.mu.Lock()
		q.lingering = true
		q.c.SetReadDeadline(time.Now().Add(tcpLinger))
		q.mu.Unlock()
		return
	}
	q.c.Close()
}

// trType implements transport.
func (q *tcpQueue) trType() uint8 { return nvmeof.TrTypeTCP }

// pairListener serves NVMe/TCP on a TCP listener and NVMe/RDMA on an
// RDMA/CM listener of the same port number: TransportBoth with a provider
// whose connections are not TCP streams (rdma-core verbs: the RDMA/CM
// port space of RoCE, InfiniBand or a kernel iWARP device is its own).
type pairListener struct {
	tcp  *tcpListener
	rdma rdmaListener
}

// listenPair listens for NVMe/TCP on addr, then for NVMe/RDMA on the port
// number the TCP listener got.
func (t *Target) listenPair(prov rdma.Provider, addr string) (portListener, error) {
	tl, err := t.listenTCP(addr, nil)
	if err != nil {
		return nil, err
	}
	tcp := tl.(*tcpListener)
	host, _, _ := net.SplitHostPort(addr)
	_, port, _ := net.SplitHostPort(tcp.Addr().String())
	rl, err := t.listenRDMA(prov, net.JoinHostPort(host, port))
	if err != nil {
		tcp.Close()
		return nil, fmt.Errorf("NVMe/RDMA beside NVMe/TCP on port %s: %w", port, err)
	}
	return &pairListener{tcp: tcp, rdma: rl.(rdmaListener)}, nil
}

// Addr implements portListener: the TCP address (the same port number
// serves RDMA).
func (l *pairListener) Addr() net.Addr { return l.tcp.Addr() }

// Close implements portListener.
func (l *pairListener) Close() error {
	err := l.tcp.Close()
	if rerr := l.rdma.Close(); err == nil {
		err = rerr
	}
	return err
}

// serve implements portListener: both listeners until they close.
func (l *pairListener) serve(p *Port) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.rdma.serve(p)
	}()
	l.tcp.serve(p)
	<-done
}

// trTypes implements portListener.
func (l *pairListener) trTypes() []uint8 { return []uint8{nvmeof.TrTypeRDMA, nvmeof.TrTypeTCP} }
