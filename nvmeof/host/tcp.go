package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/internal/stream"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/tcp"
	"github.com/rdisk/rdisk/rdma/rdmaq"
)

// NVMe/TCP host queue (TCP transport binding, NVMe-oF 1.1 section 7.4;
// modelled on Linux drivers/nvme/host/tcp.c).
//
// One TCP connection per queue. Submitters build the command capsule in
// their slot and write it themselves (header, header digest, in-capsule
// data and its digest in one writev), serialized by wmu. One receive
// goroutine reads the controller's PDUs: CapsuleResp completes a command
// by CID, C2HData is placed straight into the command's buffer at DATAO
// (its SUCCESS flag completing the command without a response capsule),
// R2T is handed to the queue's H2C goroutine, which answers it with
// H2CData PDUs of at most MAXH2CDATA bytes from the command's buffer, and
// C2HTermReq fails the queue. The H2C goroutine exists so that the
// receiver never blocks on a full socket (a controller blocked writing to
// us while we block writing to it would deadlock).

const (
	// tcpAdminInCapsule is the in-capsule data the admin queue carries
	// (Linux NVME_TCP_ADMIN_CCSZ): Connect data and small admin writes.
	tcpAdminInCapsule = 8 << 10
	// tcpReadAhead is a queue's receive buffer: PDU headers and small data
	// come through it (a whole queue of 4 KiB reads in a few system
	// calls); larger data is placed straight into its destination.
	tcpReadAhead = 64 << 10
	// tcpSlotStride is the bytes per slot: the capsule PDU header (common
	// header, SQE, header digest) and, from tcpExtraOff, the DSM range.
	tcpSlotStride = 128
	tcpExtraOff   = 80
	// tcpH2CBatch is the most H2CData PDUs written in one writev.
	tcpH2CBatch = 16
	// sglTransport is the transport SGL data block descriptor (0x5A,
	// NVME_TRANSPORT_SGL_DATA_DESC << 4 | NVME_SGL_FMT_TRANSPORT_A): data
	// moved by C2HData, or R2T and H2CData.
	sglTransport = nvmeof.SGLTypeTransportDataBlock<<4 | nvmeof.SGLSubtypeTransportA
)

// tcpNullSGL is the data pointer of a command without data (Linux
// nvme_tcp_set_sg_null: a zero-length transport data block).
var tcpNullSGL = nvmeof.SGLFields{Identifier: sglTransport}

// TCP slot states, as rdmaq's: owned by the free list, a submitter (or
// whoever completes it), or the connection while in flight.
const (
	tcpSlotFree uint32 = iota
	tcpSlotBusy
	tcpSlotInFlight
)

// tcpSlot is one command slot of a tcpQueue; its index is the CID.
type tcpSlot struct {
	command
	noTimeout bool          // the AER
	state     atomic.Uint32 // tcpSlot*
	issued    atomic.Int64  // when sent (UnixNano), 0 when idle
	err       error         // the transport error it completes with

	pdu   []byte  // capsule PDU header: common header, SQE, header digest
	ddgst [4]byte // data digest of the in-capsule data

	// The command's data (set by its submitter before it is in flight).
	data   []byte // read destination or write source
	write  bool   // data moves host to controller
	inline int    // bytes of data in the capsule

	// R2T state, guarded by the queue's sendMu.
	sent     uint32 // end of the data sent so far
	r2tOff   uint32 // the R2T being answered
	r2tLen   uint32
	ttag     uint16
	r2tBusy  bool // an R2T is being answered
	respLate bool // the response came meanwhile: the H2C goroutine completes
	// The next R2T, come in while the last data of the one being answered
	// was being written: the controller had it (MAXR2T 0 allows one R2T
	// outstanding per command, and ours was done from its side).
	r2tNext          bool
	nextOff, nextLen uint32
	nextTTag         uint16

	xferErr bool // receiver: a C2HData digest mismatched
}

// tcpQueue is one NVMe queue pair over an NVMe/TCP connection.
type tcpQueue struct {
	queueBase
	hdgst, ddgst bool
	slots        []tcpSlot
	aer          *tcpSlot

	mu   sync.Mutex // guards free and conn
	free []int32
	wake chan struct{}
	conn *net.TCPConn

	maxH2C  uint32 // MAXH2CDATA, set at connect
	started bool

	wmu        sync.Mutex // serializes writes to the connection
	w          *tcp.Writer
	sendClosed bool // guarded by sendMu: the sweep ran, nothing more is sent
	termBuf    [tcp.MaxTermReqSize]byte

	sendMu sync.Mutex // guards sendq, r2ts and the slots' R2T state
	// sendq are the commands posted and not yet handed to the socket;
	// the send goroutine takes them all at once (sendSpare is the other
	// slice it swaps in).
	sendq, sendSpare []*tcpSlot
	r2ts             []*tcpSlot // commands with an R2T to answer, in arrival order
	sendWake         chan struct{}
	// H2C goroutine state.
	h2cHdr [tcpH2CBatch][tcp.DataHLen + tcp.DigestSize]byte
	h2cDD  [tcpH2CBatch][tcp.DigestSize]byte

	// Receive goroutine state.
	rd  *stream.Reader // PDU headers buffered, data placed by readv
	hdr [tcp.MaxHeaderSize]byte

	deadOnce     sync.Once
	dead         chan struct{}
	deadErr      error // why the queue failed, set before dead is closed
	reqErr       error // what requests fail with
	exited       chan struct{}
	senderExited chan struct{}
}

var _ hostQueue = (*tcpQueue)(nil)

// newTCPQueue allocates a queue of nslots command slots (the last one
// reserved for the AER when aer is set) and SQ size entries.
func newTCPQueue(c *Controller, qid uint16, nslots, entries int, aer bool) *tcpQueue {
	q := &tcpQueue{
		queueBase: queueBase{c: c, qid: qid, entries: entries},
		hdgst:     c.cfg.HeaderDigest, ddgst: c.cfg.DataDigest,
		slots: make([]tcpSlot, nslots), free: make([]int32, 0, nslots), wake: make(chan struct{}, 1),
		r2ts: make([]*tcpSlot, 0, nslots), sendWake: make(chan struct{}, 1),
		sendq: make([]*tcpSlot, 0, nslots), sendSpare: make([]*tcpSlot, 0, nslots),
		dead: make(chan struct{}), exited: make(chan struct{}), senderExited: make(chan struct{}),
	}
	if qid == 0 {
		q.inCapsule = tcpAdminInCapsule
	}
	mem := make([]byte, nslots*tcpSlotStride)
	for i := range q.slots {
		s := &q.slots[i]
		b := mem[i*tcpSlotStride : (i+1)*tcpSlotStride : (i+1)*tcpSlotStride]
		s.cid = uint16(i)
		s.pdu = b[: tcp.CapsuleCmdHLen+tcp.DigestSize : tcp.CapsuleCmdHLen+tcp.DigestSize]
		s.sqe = nvmeof.SQE(b[tcp.CommonHeaderSize:tcp.CapsuleCmdHLen:tcp.CapsuleCmdHLen])
		s.extra = b[tcpExtraOff:tcpSlotStride:tcpSlotStride]
		s.done = make(chan struct{}, 1)
	}
	n := nslots
	if aer {
		n--
		q.aer = &q.slots[n]
		q.aer.noTimeout = true
		q.aer.state.Store(tcpSlotBusy)
	}
	for i := n - 1; i >= 0; i-- {
		q.free = append(q.free, int32(i))
	}
	return q
}

// connect dials the controller, exchanges ICReq and ICResp (as Linux
// nvme_tcp_init_connection: PFV 0, HPDA 0, MAXR2T 0, the digests asked
// for; the ICResp must enable exactly those, with CPDA 0 and a MAXH2CDATA
// of at least 4096 and a multiple of 4) and starts the queue's goroutines.
func (q *tcpQueue) connect(ctx context.Context, addr string) error {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	conn, ok := nc.(*net.TCPConn)
	if !ok {
		nc.Close()
		return fmt.Errorf("dialing %s: not a TCP connection", addr)
	}
	q.mu.Lock()
	q.conn = conn
	q.mu.Unlock()
	select {
	case <-q.dead: // failed or closed meanwhile
		conn.Close()
		return q.reqErr
	default:
	}
	if err := q.initConnection(ctx, conn); err != nil {
		conn.Close()
		if ctx.Err() != nil {
			return fmt.Errorf("initializing the NVMe/TCP connection: %w", ctx.Err())
		}
		return fmt.Errorf("initializing the NVMe/TCP connection: %w", err)
	}
	q.c.log.Debug("nvme host: TCP queue connected", "qid", q.qid, "addr", addr, "entries", q.entries,
		"maxh2cdata", q.maxH2C, "hdgst", q.hdgst, "ddgst", q.ddgst)
	q.started = true
	go q.sendLoop()
	go q.recvLoop()
	return nil
}

func (q *tcpQueue) initConnection(ctx context.Context, conn *net.TCPConn) error {
	if err := conn.SetNoDelay(true); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	var digest uint8
	if q.hdgst {
		digest |= tcp.DigestHeader
	}
	if q.ddgst {
		digest |= tcp.DigestData
	}
	var ic [tcp.ICSize]byte
	tcp.IC(ic[:]).Encode(tcp.TypeICReq, &tcp.ICFields{PFV: tcp.PFV10, PDA: 0, Digest: digest, Max: 0})
	if _, err := conn.Write(ic[:]); err != nil {
		return fmt.Errorf("sending ICReq: %w", err)
	}
	q.rd = stream.NewSize(conn, tcpReadAhead)
	hdr, l, err := q.readHeader()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("the controller closed the connection instead of answering ICReq (not an NVMe/TCP port?)")
		}
		return err
	}
	switch hdr.Type() {
	case tcp.TypeICResp:
	case tcp.TypeC2HTermReq:
		return q.recvTerm(hdr, l)
	default:
		return fmt.Errorf("%s in answer to ICReq, want ICResp", tcp.TypeName(hdr.Type()))
	}
	f, err := tcp.CheckICResp(tcp.IC(hdr), digest)
	if err != nil {
		return err
	}
	if f.PDA != 0 {
		return fmt.Errorf("ICResp with CPDA %d: rdisk, like Linux nvme-tcp, supports only 0", f.PDA)
	}
	q.maxH2C = f.Max
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return err
	}
	if q.w, err = tcp.NewWriter(conn); err != nil {
		return err
	}
	return nil
}

// readHeader reads the next PDU header into q.hdr and checks it (common
// header, then the whole header and its digest); it returns the header
// and where the PDU's data lies. A bad PDU is reported to the controller
// with an H2CTermReq.
func (q *tcpQueue) readHeader() (tcp.Header, tcp.Layout, error) {
	ch, err := q.rd.Peek(tcp.CommonHeaderSize)
	if err != nil {
		return nil, tcp.Layout{}, err
	}
	if q.w == nil && string(ch) == "MPA ID R" {
		return nil, tcp.Layout{}, errors.New("the port answered ICReq with an MPA reply: it serves NVMe/RDMA (iWARP), not NVMe/TCP; use an nvme:// URL")
	}
	rest, ferr := tcp.CheckHeader(tcp.Header(ch), tcp.Host, q.hdgst)
	if ferr != nil {
		return nil, tcp.Layout{}, q.fatal(ferr, ch)
	}
	full, err := q.rd.Peek(tcp.CommonHeaderSize + rest)
	if err != nil {
		return nil, tcp.Layout{}, err
	}
	hdr := tcp.Header(q.hdr[:len(full)])
	copy(hdr, full)
	q.rd.Skip(len(full))
	l, ferr := tcp.CheckPDU(hdr, q.hdgst, q.ddgst, 4) // HPDA 0: dword aligned
	if ferr != nil {
		return nil, tcp.Layout{}, q.fatal(ferr, hdr)
	}
	if l.Pad > 0 {
		if err := q.rd.Skip(l.Pad); err != nil {
			return nil, tcp.Layout{}, err
		}
	}
	return hdr, l, nil
}

// fatal tells the controller about a fatal error in a PDU it sent (an
// H2CTermReq echoing the header, best effort: only if no one is writing)
// and returns the error the queue fails with.
func (q *tcpQueue) fatal(e *tcp.Error, hdr []byte) error {
	if q.w != nil && q.wmu.TryLock() {
		n := tcp.EncodeTermReq(q.termBuf[:], tcp.TypeH2CTermReq, e.FES, e.FEI, hdr)
		q.mu.Lock()
		conn := q.conn
		q.mu.Unlock()
		conn.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		q.w.Add(q.termBuf[:n])
		q.w.Flush()
		q.wmu.Unlock()
	}
	return fmt.Errorf("bad PDU from the controller (%s): %w", tcp.FESName(e.FES), e)
}

// recvTerm reads the rest of a C2HTermReq and returns the error naming its
// fatal error status.
func (q *tcpQueue) recvTerm(hdr tcp.Header, l tcp.Layout) error {
	if l.DataLen > 0 {
		q.rd.Skip(l.DataLen) // the echoed header of our PDU
	}
	t := tcp.TermReq(hdr)
	return fmt.Errorf("the controller terminated the connection: %s (C2HTermReq FES %#x, FEI %#x): %w",
		tcp.FESName(t.FES()), t.FES(), t.FEI(), tcp.ErrTerminated)
}

// fail implements hostQueue.
func (q *tcpQueue) fail(err error) {
	first := false
	q.deadOnce.Do(func() {
		first = true
		q.deadErr, q.reqErr = err, err
		if !errors.Is(err, blockdev.ErrClosed) {
			q.reqErr = &connLost{err: err}
		}
		close(q.dead)
		q.mu.Lock()
		conn := q.conn
		q.mu.Unlock()
		if conn != nil {
			conn.Close()
		}
		q.signal()
	})
	if first && !errors.Is(err, blockdev.ErrClosed) {
		q.c.queueFailed(q, err)
	}
}

// close implements hostQueue.
func (q *tcpQueue) close() {
	q.fail(blockdev.ErrClosed)
	if q.started {
		<-q.exited
	} else {
		q.sweep()
	}
}

func (q *tcpQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// acquire takes a free slot, waiting for one; it fails when the queue is
// dead or ctx (which may be nil) is done.
func (q *tcpQueue) acquire(ctx context.Context) (*tcpSlot, error) {
	var cdone <-chan struct{}
	if ctx != nil {
		cdone = ctx.Done()
	}
	for {
		q.mu.Lock()
		select {
		case <-q.dead:
			q.mu.Unlock()
			return nil, q.reqErr
		default:
		}
		if n := len(q.free); n > 0 {
			s := &q.slots[q.free[n-1]]
			q.free = q.free[:n-1]
			q.mu.Unlock()
			if n > 1 {
				q.signal() // another waiter may go too
			}
			s.err = nil
			s.state.Store(tcpSlotBusy)
			return s, nil
		}
		q.mu.Unlock()
		select {
		case <-q.wake:
		case <-q.dead:
		case <-cdone:
			return nil, ctx.Err()
		}
	}
}

// putFree returns a slot the caller owns to the free list.
func (q *tcpQueue) putFree(s *tcpSlot) {
	s.req, s.data = nil, nil
	s.issued.Store(0)
	s.state.Store(tcpSlotFree)
	q.mu.Lock()
	q.free = append(q.free, int32(s.cid))
	q.mu.Unlock()
	q.signal()
}

// setData records the command's data and returns its data pointer:
// in-capsule (SGL 0x01, offset 0, as nvme_tcp_set_sg_inline) for a write
// that fits the capsule, else a transport data block (0x5A) moved by
// C2HData or R2T and H2CData.
func (q *tcpQueue) setData(s *tcpSlot, data []byte, write bool) nvmeof.SGLFields {
	return q.setDataCapsule(s, data, write, q.inCapsule)
}

// capsuleData is the most data a command capsule of this queue holds, which
// exec uses whatever Config.NoInCapsule says, so that Fabrics Connect data
// goes in the capsule, as Linux sends it: NVME_TCP_ADMIN_CCSZ on the admin
// queue, IOCCSZ*16-64 on I/O queues.
func (q *tcpQueue) capsuleData() int {
	if q.qid == 0 {
		return tcpAdminInCapsule
	}
	if n := int(q.c.id.IOCCSZ)*16 - nvmeof.SQESize; n > 0 {
		return n
	}
	return 0
}

// setDataCapsule is setData with up to inCapsule bytes in the capsule.
func (q *tcpQueue) setDataCapsule(s *tcpSlot, data []byte, write bool, inCapsule int) nvmeof.SGLFields {
	s.data, s.write, s.inline, s.sent = data, write, 0, 0
	s.r2tBusy, s.respLate, s.r2tNext, s.xferErr = false, false, false, false
	if len(data) == 0 {
		return tcpNullSGL
	}
	if write && len(data) <= inCapsule {
		s.inline, s.sent = len(data), uint32(len(data))
		return nvmeof.SGLFields{Identifier: nvmeof.SGLInCapsule, Address: 0, Length: uint32(len(data))}
	}
	return nvmeof.SGLFields{Identifier: sglTransport, Length: uint32(len(data))}
}

// post sends a prepared busy slot's capsule: on error the slot is the
// caller's again, unless the queue died meanwhile and its sweep completed
// it (then post returns nil: the completion was delivered).
func (q *tcpQueue) post(s *tcpSlot) error {
	tcp.Header(s.pdu).Put(tcp.TypeCapsuleCmd, 0, tcp.CapsuleCmdHLen, q.hdgst, s.inline, q.ddgst, 0)
	tcp.Header(s.pdu).Seal(q.hdgst)
	if s.inline > 0 && q.ddgst {
		tcp.PutDigest(s.ddgst[:], tcp.Digest(s.data[:s.inline]))
	}
	s.issued.Store(time.Now().UnixNano())
	s.state.Store(tcpSlotInFlight)
	q.sendMu.Lock()
	if q.sendClosed {
		q.sendMu.Unlock()
		return q.reclaim(s)
	}
	q.sendq = append(q.sendq, s)
	q.sendMu.Unlock()
	select {
	case q.sendWake <- struct{}{}:
	default:
	}
	return nil
}

// sendCapsules writes the capsules of batch in one writev.
func (q *tcpQueue) sendCapsules(batch []*tcpSlot) error {
	hl := tcp.CapsuleCmdHLen
	if q.hdgst {
		hl += tcp.DigestSize
	}
	q.wmu.Lock()
	for _, s := range batch {
		q.w.Add(s.pdu[:hl])
		if s.inline > 0 {
			q.w.Add(s.data[:s.inline])
			if q.ddgst {
				q.w.Add(s.ddgst[:])
			}
		}
	}
	err := q.w.Flush()
	q.wmu.Unlock()
	if err != nil {
		return fmt.Errorf("sending commands: %w", err)
	}
	return nil
}

// reclaim takes back a slot whose capsule could not be sent, unless the
// sweep completed it already (nil: the completion was delivered).
func (q *tcpQueue) reclaim(s *tcpSlot) error {
	if !s.state.CompareAndSwap(tcpSlotInFlight, tcpSlotBusy) {
		return nil
	}
	s.issued.Store(0)
	<-q.dead
	return q.reqErr
}

// finish completes an in-flight slot with transport error err (nil: the
// controller's status in s), once: the receiver, the H2C goroutine and the
// sweep may race for it.
func (q *tcpQueue) finish(s *tcpSlot, err error) {
	if !s.state.CompareAndSwap(tcpSlotInFlight, tcpSlotBusy) {
		return
	}
	s.issued.Store(0)
	if err != nil {
		s.err = err
	}
	x := &s.command
	switch x.kind {
	case kindIO:
		r, ns, name, st, terr := x.req, x.ns, x.name, x.status, s.err
		q.putFree(s)
		completeIO(r, ns, name, q.qid, st, terr)
	case kindSync:
		x.done <- struct{}{}
	case kindAER:
		q.c.onAER(x.status, uint32(x.result), s.err)
	}
}

// sweep completes everything still in flight with the queue's error.
func (q *tcpQueue) sweep() {
	<-q.dead
	for i := range q.slots {
		if s := &q.slots[i]; s.state.Load() == tcpSlotInFlight {
			q.finish(s, q.reqErr)
		}
	}
}

// overdue implements hostQueue.
func (q *tcpQueue) overdue(now int64, d time.Duration) (uint16, bool) {
	for i := range q.slots {
		s := &q.slots[i]
		if t := s.issued.Load(); t != 0 && now-t > int64(d) && !s.noTimeout {
			return s.cid, true
		}
	}
	return 0, false
}

// exec implements hostQueue: data moves in the capsule (writes up to the
// in-capsule size: Connect data, on every queue), by R2T and H2CData
// (larger writes) or by C2HData (reads).
func (q *tcpQueue) exec(ctx context.Context, name string, data []byte, dir nvmeof.Direction, encode func(sqe nvmeof.SQE, dptr nvmeof.SGLFields)) (uint64, error) {
	s, err := q.acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("nvme %s: %w", name, err)
	}
	x := &s.command
	dptr := q.setDataCapsule(s, data, dir == nvmeof.DirHostToCtrl, q.capsuleData())
	encode(x.sqe, dptr)
	if len(data) == 0 {
		x.sqe.DPTR().Encode(&tcpNullSGL)
	}
	x.sqe.SetCID(x.cid)
	x.kind, x.name = kindSync, name
	if err := q.post(s); err != nil {
		q.putFree(s) // not sent: the slot is ours again
		return 0, fmt.Errorf("nvme %s: %w", name, err)
	}
	waitSync(ctx, q, x)
	res, st, terr := x.result, x.status, s.err
	q.putFree(s)
	return syncResult(q.qid, name, res, st, terr)
}

// postAER implements hostQueue.
func (q *tcpQueue) postAER() error {
	s := q.aer
	q.setData(s, nil, false)
	encodeAER(&s.command, tcpNullSGL)
	if err := q.post(s); err != nil {
		return fmt.Errorf("posting the asynchronous event request: %w", err)
	}
	return nil
}

// submit implements hostQueue.
func (q *tcpQueue) submit(ns *Namespace, r *blockdev.Request, buf *rdmaq.Buffer) error {
	s, err := q.acquire(nil)
	if err != nil {
		return err
	}
	x := &s.command
	x.kind, x.req, x.ns, x.name = kindIO, r, ns, opName(r.Op)
	switch r.Op {
	case blockdev.OpRead, blockdev.OpWrite:
		dptr := q.setData(s, buf.Bytes()[r.BufOff:r.BufOff+r.Length], r.Op == blockdev.OpWrite)
		ns.encodeRW(x, r, dptr)
	case blockdev.OpFlush:
		q.setData(s, nil, false)
		ns.encodeFlush(x, tcpNullSGL)
	case blockdev.OpWriteZeroes:
		q.setData(s, nil, false)
		ns.encodeWriteZeroes(x, r, tcpNullSGL)
	case blockdev.OpDiscard:
		ns.encodeDSM(x, q.setData(s, ns.putRange(x, r), true))
	}
	r.Issued = time.Now()
	if err := q.post(s); err != nil {
		q.putFree(s) // not sent: the slot is ours again
		return err
	}
	return nil
}

// recvLoop is the receive goroutine: it reads PDUs until the connection
// fails or closes, then waits for the H2C goroutine, stops all sends and
// completes whatever was in flight.
func (q *tcpQueue) recvLoop() {
	defer close(q.exited)
	q.fail(q.receive())
	<-q.senderExited
	q.sendMu.Lock()
	q.sendClosed = true
	q.sendMu.Unlock()
	q.sweep()
}

// receive reads and handles PDUs until an error.
func (q *tcpQueue) receive() error {
	for {
		hdr, l, err := q.readHeader()
		if err == nil {
			switch hdr.Type() {
			case tcp.TypeCapsuleResp:
				err = q.recvResp(hdr)
			case tcp.TypeC2HData:
				err = q.recvData(hdr, l)
			case tcp.TypeR2T:
				err = q.recvR2T(hdr)
			case tcp.TypeC2HTermReq:
				err = q.recvTerm(hdr, l)
			default:
				err = q.fatal(&tcp.Error{FES: tcp.FESPDUSequenceError, Err: fmt.Errorf("%s after the connection was initialized", tcp.TypeName(hdr.Type()))}, hdr)
			}
		}
		if err != nil {
			select {
			case <-q.dead:
				return q.deadErr // closed or failed by someone else
			default:
			}
			switch {
			case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
				return fmt.Errorf("the controller closed the connection: %w", err)
			case errors.Is(err, syscall.ECONNRESET):
				return fmt.Errorf("the controller reset the connection: %w", err)
			}
			var ne net.Error
			if errors.As(err, &ne) {
				return fmt.Errorf("receiving: %w", err)
			}
			return err
		}
	}
}

// inFlight returns the in-flight slot a PDU names by CID, or an error
// naming the PDU.
func (q *tcpQueue) inFlight(cid uint16, hdr tcp.Header) (*tcpSlot, error) {
	if int(cid) < len(q.slots) {
		if s := &q.slots[cid]; s.state.Load() == tcpSlotInFlight {
			return s, nil
		}
	}
	return nil, fmt.Errorf("%s for command %d, which is not outstanding", tcp.TypeName(hdr.Type()), cid)
}

// recvResp handles a CapsuleResp: the command's completion.
func (q *tcpQueue) recvResp(hdr tcp.Header) error {
	cqe := nvmeof.CQE(hdr[tcp.CommonHeaderSize : tcp.CommonHeaderSize+nvmeof.CQESize])
	s, err := q.inFlight(cqe.CID(), hdr)
	if err != nil {
		return err
	}
	s.status, s.result = cqe.Status(), cqe.Result()
	if s.xferErr && s.status == 0 {
		s.status = nvmeof.StatusDataTransferError
	}
	if s.write && s.inline < len(s.data) {
		q.sendMu.Lock()
		busy := s.r2tBusy
		s.respLate = busy
		q.sendMu.Unlock()
		if busy {
			return nil // the H2C goroutine still reads the data: it completes
		}
	}
	q.finish(s, nil)
	return nil
}

// recvData places a C2HData PDU's data in its command's buffer at DATAO;
// with SUCCESS set it completes the command (no CapsuleResp follows). A
// data digest mismatch fails the command with Data Transfer Error, as
// Linux does, and keeps the queue.
func (q *tcpQueue) recvData(hdr tcp.Header, l tcp.Layout) error {
	d := tcp.Data(hdr)
	s, err := q.inFlight(d.CCCID(), hdr)
	if err != nil {
		return err
	}
	if s.write || len(s.data) == 0 {
		return q.fatal(&tcp.Error{FES: tcp.FESInvalidHeaderField, FEI: 8, Err: fmt.Errorf("C2HData for command %d, which reads no data", s.cid)}, hdr)
	}
	off, n := d.DataOffset(), l.DataLen
	if uint64(off)+uint64(n) > uint64(len(s.data)) {
		return q.fatal(&tcp.Error{FES: tcp.FESDataOutOfRange, Err: fmt.Errorf("C2HData of %d bytes at offset %d for command %d, which reads %d", n, off, s.cid, len(s.data))}, hdr)
	}
	dst := s.data[off : int(off)+n]
	if err := q.rd.ReadFull(dst); err != nil {
		return err
	}
	if l.DataDigest {
		b, err := q.rd.Peek(tcp.DigestSize)
		if err != nil {
			return err
		}
		got := tcp.GetDigest(b)
		q.rd.Skip(tcp.DigestSize)
		if want := tcp.Digest(dst); got != want {
			s.xferErr = true
			q.c.log.Warn("nvme host: data digest error", "qid", q.qid, "cid", s.cid, "received", fmt.Sprintf("%#08x", got), "computed", fmt.Sprintf("%#08x", want))
		}
	}
	if hdr.Flags()&tcp.FlagSuccess != 0 {
		s.status, s.result = 0, 0
		if s.xferErr {
			s.status = nvmeof.StatusDataTransferError
		}
		q.finish(s, nil)
	}
	return nil
}

// recvR2T queues an R2T for the H2C goroutine, checking it as Linux
// nvme_tcp_handle_r2t does: a write in flight, a non-zero length within
// the data and no offset before what was sent. MAXR2T 0 allows one R2T
// outstanding; the controller may send the next as soon as it has the
// last data of the previous one, which the H2C goroutine may not have
// noted yet: that one waits in the slot. More is a protocol error.
func (q *tcpQueue) recvR2T(hdr tcp.Header) error {
	d := tcp.Data(hdr)
	s, err := q.inFlight(d.CCCID(), hdr)
	if err != nil {
		return err
	}
	off, n := d.DataOffset(), d.DataLength()
	q.sendMu.Lock()
	var e *tcp.Error
	switch {
	case !s.write || len(s.data) == 0:
		e = &tcp.Error{FES: tcp.FESInvalidHeaderField, FEI: 8, Err: fmt.Errorf("R2T for command %d, which writes no data", s.cid)}
	case n == 0:
		e = &tcp.Error{FES: tcp.FESInvalidHeaderField, FEI: 16, Err: fmt.Errorf("R2T of 0 bytes for command %d", s.cid)}
	case uint64(off)+uint64(n) > uint64(len(s.data)) || off < s.sent || s.r2tBusy && off < s.r2tOff+s.r2tLen:
		e = &tcp.Error{FES: tcp.FESDataOutOfRange, Err: fmt.Errorf("R2T for %d bytes at offset %d of command %d, which writes %d (%d sent)", n, off, s.cid, len(s.data), s.sent)}
	case s.r2tNext:
		e = &tcp.Error{FES: tcp.FESDataLimitExceeded, Err: fmt.Errorf("third R2T for command %d while one is answered (MAXR2T 0)", s.cid)}
	}
	if e != nil {
		q.sendMu.Unlock()
		return q.fatal(e, hdr)
	}
	if s.r2tBusy {
		s.r2tNext, s.nextOff, s.nextLen, s.nextTTag = true, off, n, d.TTag()
		q.sendMu.Unlock()
		return nil
	}
	s.r2tOff, s.r2tLen, s.ttag, s.r2tBusy = off, n, d.TTag(), true
	q.r2ts = append(q.r2ts, s)
	q.sendMu.Unlock()
	select {
	case q.sendWake <- struct{}{}:
	default:
	}
	return nil
}

// sendLoop is the H2C goroutine: it answers R2Ts in the order they came.
func (q *tcpQueue) sendLoop() {
	defer close(q.senderExited)
	for {
		var s *tcpSlot
		q.sendMu.Lock()
		batch := q.sendq
		q.sendq = q.sendSpare
		if len(q.r2ts) > 0 {
			s = q.r2ts[0]
			n := copy(q.r2ts, q.r2ts[1:])
			q.r2ts[n] = nil
			q.r2ts = q.r2ts[:n]
		}
		q.sendMu.Unlock()
		if len(batch) > 0 {
			if err := q.sendCapsules(batch); err != nil {
				q.fail(err)
				return
			}
		}
		clear(batch)
		q.sendSpare = batch[:0]
		if s == nil {
			if len(batch) > 0 {
				continue
			}
			select {
			case <-q.sendWake:
				continue
			case <-q.dead:
				return
			}
		}
		if err := q.answerR2T(s); err != nil {
			q.fail(err)
			return
		}
	}
}

// answerR2T sends the data an R2T asked for in H2CData PDUs of at most
// MAXH2CDATA bytes each, LAST_PDU on the final one (as Linux
// nvme_tcp_setup_h2c_data_pdu), batching up to tcpH2CBatch per writev.
func (q *tcpQueue) answerR2T(s *tcpSlot) error {
	q.sendMu.Lock()
	off, end := s.r2tOff, s.r2tOff+s.r2tLen // end > off: recvR2T refuses empty R2Ts
	q.sendMu.Unlock()
	for {
		select {
		case <-q.dead:
			return q.deadErr
		default:
		}
		q.wmu.Lock()
		for k := 0; k < tcpH2CBatch && off < end; k++ {
			n := min(end-off, q.maxH2C)
			var flags uint8
			if off+n == end {
				flags = tcp.FlagLast
			}
			h := q.h2cHdr[k][:]
			tcp.Header(h).Put(tcp.TypeH2CData, flags, tcp.DataHLen, q.hdgst, int(n), q.ddgst, 0)
			tcp.Data(h).Encode(&tcp.DataFields{CCCID: s.cid, TTag: s.ttag, Offset: off, Length: n})
			hl := tcp.Header(h).Seal(q.hdgst)
			data := s.data[off : off+n]
			q.w.Add(h[:hl])
			q.w.Add(data)
			if q.ddgst {
				tcp.PutDigest(q.h2cDD[k][:], tcp.Digest(data))
				q.w.Add(q.h2cDD[k][:])
			}
			off += n
		}
		err := q.w.Flush()
		q.wmu.Unlock()
		if err != nil {
			return fmt.Errorf("sending H2CData for command %d: %w", s.cid, err)
		}
		if off < end {
			continue
		}
		q.sendMu.Lock()
		s.sent = max(s.sent, end)
		if s.r2tNext { // the next R2T came meanwhile
			s.r2tNext = false
			s.r2tOff, s.r2tLen, s.ttag = s.nextOff, s.nextLen, s.nextTTag
			off, end = s.r2tOff, s.r2tOff+s.r2tLen
			q.sendMu.Unlock()
			continue
		}
		// Done, in the same critical section as the check above: an R2T
		// coming in between would see r2tBusy, wait in the slot
		// (r2tNext) and never be answered.
		s.r2tBusy = false
		late := s.respLate
		s.respLate = false
		q.sendMu.Unlock()
		if late {
			q.finish(s, nil)
		}
		return nil
	}
}

// checkIdentifyTCP applies the checks the Linux NVMe/TCP host makes
// (host/core.c nvme_check_ctrl_fabric_info, host/tcp.c
// nvme_tcp_setup_ctrl): CNTLID as Connect returned; for an I/O controller
// KAS, IOCCSZ >= 4, IORCSZ >= 1 and MAXCMD; ICDOFF 0; SGL support (SGLS
// bits 1:0; keyed SGLs are an RDMA matter).
func (c *Controller) checkIdentifyTCP() error {
	id := &c.id
	var err error
	switch {
	case id.CNTLID != c.cntlid:
		err = fmt.Errorf("CNTLID %d, Connect returned %d", id.CNTLID, c.cntlid)
	case !c.discovery && id.KAS == 0:
		err = fmt.Errorf("KAS 0: keep alive support is mandatory")
	case !c.discovery && id.IOCCSZ < 4:
		err = fmt.Errorf("IOCCSZ %d < 4", id.IOCCSZ)
	case !c.discovery && id.IORCSZ < 1:
		err = fmt.Errorf("IORCSZ %d < 1", id.IORCSZ)
	case !c.discovery && id.MAXCMD == 0:
		err = fmt.Errorf("MAXCMD 0")
	case id.ICDOFF != 0:
		err = fmt.Errorf("ICDOFF %d, the TCP host needs 0", id.ICDOFF)
	case id.SGLS&(nvmeof.SGLSByteAligned|nvmeof.SGLSDwordAligned) == 0:
		err = fmt.Errorf("SGLS %#x: SGLs not supported", id.SGLS)
	}
	if err != nil {
		return fmt.Errorf("controller of %s unusable: identify controller: %w", c.subNQN, err)
	}
	if c.discovery {
		if id.CNTRLTYPE != 0 && id.CNTRLTYPE != nvmeof.ControllerTypeDiscovery {
			return fmt.Errorf("subsystem %s is not a discovery controller (CNTRLTYPE %d)", c.subNQN, id.CNTRLTYPE)
		}
		return nil
	}
	if id.CNTRLTYPE == nvmeof.ControllerTypeDiscovery {
		return fmt.Errorf("subsystem %s is a discovery controller", c.subNQN)
	}
	return nil
}
