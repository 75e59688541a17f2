package iwarp

import (
	"fmt"
	"net"
	"sync"
	"syscall"
	"unsafe"

	"github.com/rdisk/rdisk/rdma"
)

const (
	defaultMaxWR  = 128
	defaultMaxSGE = 4
	maxSGELimit   = 64
	maxWRLimit    = 1 << 16
)

type rtrMode uint8

const (
	rtrNone rtrMode = iota
	rtrWrite
	rtrRead
)

// sendWQE is a posted send work request, copied from the caller's.
type sendWQE struct {
	wr     rdma.SendWR // SGL not kept: see mem
	mem    [][]byte    // resolved scatter list (capacity MaxSendSGE)
	length int
	// volatile: some memory comes from the implicit MR and may change
	// while the WQE is sent (see txState.stage).
	volatile bool
	sent     int  // payload bytes handed to the transmitter
	done     bool // finished (successfully or not)
	status   rdma.Status
	// Read requests: the sink STag and address told to the peer.
	sinkSTag uint32
	sinkTO   uint64
	placed   int // read response bytes placed
}

// recvWQE is a posted receive buffer.
type recvWQE struct {
	id     uint64
	mem    [][]byte
	length int
}

// irqEntry is an inbound RDMA Read being answered (RFC 5040 §5.3).
type irqEntry struct {
	sinkSTag uint32
	sinkTO   uint64
	src      []byte
	sent     int
}

// qp implements rdma.QP. One goroutine receives (rx.go), one transmits
// (tx.go); posting threads and both goroutines share state under mu.
type qp struct {
	pd     *pd
	num    uint32
	ctx    any
	sendCQ *cq
	recvCQ *cq
	maxSGE [2]int // send, recv

	mu    sync.Mutex
	state rdma.QPState
	err   error
	done  chan struct{}

	// Send queue: entries [sqHead, sqTail) are outstanding; [sqHead,
	// sqTx) were handed to the transmitter; indexes grow without bound and
	// are taken modulo len(sq). The ring holds the outstanding WQEs, which
	// come from sqFree: WQEs are allocated sqChunk at a time as the work
	// requests outstanding grow, so an idle QP keeps a few, and a WQE
	// never moves.
	sq                   []*sendWQE
	sqHead, sqTx, sqTail uint64
	sqFree               []*sendWQE
	sqAlloc              int      // WQEs allocated
	orq                  []uint64 // ring: SQ indexes of Read Requests awaiting responses (sized at bind: the ORD)
	orqHead, orqTail     uint64
	readsOut             int

	// Receive queue.
	rq             []recvWQE
	rqHead, rqTail uint64

	// Inbound Read Requests.
	irq              []irqEntry
	irqHead, irqTail uint64

	// Connection.
	conn     net.Conn
	passive  bool
	crc      bool
	ird, ord int
	rtr      rtrMode
	term     *termError // to send before closing
	txWake   chan struct{}
	rxFirst  chan struct{} // closed when the first FPDU arrived (passive side)
	rxExited chan struct{}
	txExited chan struct{}
	started  bool
	flushed  bool
	cs       connStats

	// Transmitter-owned state (tx.go).
	tx txState
	// Receiver-owned state (rx.go).
	rx rxState
}

func newQP(d *pd, cfg rdma.QPConfig) (*qp, error) {
	scq, ok1 := cfg.SendCQ.(*cq)
	rcq, ok2 := cfg.RecvCQ.(*cq)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("iwarp: creating QP: send and receive CQs must be iwarp CQs")
	}
	sw := orDefault(cfg.MaxSendWR, defaultMaxWR)
	rw := orDefault(cfg.MaxRecvWR, defaultMaxWR)
	ss := orDefault(cfg.MaxSendSGE, defaultMaxSGE)
	rs := orDefault(cfg.MaxRecvSGE, defaultMaxSGE)
	if sw > maxWRLimit || rw > maxWRLimit || ss > maxSGELimit || rs > maxSGELimit {
		return nil, fmt.Errorf("iwarp: creating QP: limits %d/%d WRs, %d/%d SGEs exceed %d WRs, %d SGEs", sw, rw, ss, rs, maxWRLimit, maxSGELimit)
	}
	q := &qp{
		pd: d, num: d.p.newQPNum(), ctx: cfg.Context, sendCQ: scq, recvCQ: rcq,
		maxSGE: [2]int{ss, rs},
		done:   make(chan struct{}), txWake: make(chan struct{}, 1), rxFirst: make(chan struct{}),
		rxExited: make(chan struct{}), txExited: make(chan struct{}),
		sq: make([]*sendWQE, sw), sqFree: make([]*sendWQE, 0, sw), rq: make([]recvWQE, rw),
	}
	// One backing array for every receive WQE's scatter list.
	rmem := make([][]byte, rw*rs)
	for i := range q.rq {
		q.rq[i].mem = rmem[i*rs : i*rs : (i+1)*rs]
	}
	q.tx.init(d.p.cfg.MaxFPDUPayload, ss)
	q.rx.init()
	return q, nil
}

func orDefault(v, d int) int {
	if v <= 0 {
		return d
	}
	return v
}

func (q *qp) Num() uint32           { return q.num }
func (q *qp) Context() any          { return q.ctx }
func (q *qp) Done() <-chan struct{} { return q.done }

func (q *qp) State() rdma.QPState {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state
}

func (q *qp) Err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

func (q *qp) LocalAddr() net.Addr {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.conn == nil {
		return nil
	}
	return q.conn.LocalAddr()
}

func (q *qp) RemoteAddr() net.Addr {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.conn == nil {
		return nil
	}
	return q.conn.RemoteAddr()
}

// bind attaches the negotiated connection.
func (q *qp) bind(c net.Conn, passive, crc bool, ird, ord int, rtr rtrMode) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state != rdma.QPInit && q.state != rdma.QPConnecting {
		return fmt.Errorf("iwarp: binding connection: QP is %s", q.state)
	}
	q.conn, q.passive, q.crc, q.ird, q.ord, q.rtr = c, passive, crc, ird, ord, rtr
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			q.cs.rc = rc
		}
	}
	q.rx.rv.Init(c)
	q.irq = make([]irqEntry, max(ird, 1))
	// Read Requests outstanding are at most ord (the transmitter holds the
	// next back) and at most the send queue's WQEs.
	q.orq = make([]uint64, max(min(ord, len(q.sq)), 1))
	q.state = rdma.QPConnected
	if !passive {
		close(q.rxFirst)
	}
	return nil
}

// start runs the transmitter and receiver.
func (q *qp) start() {
	q.mu.Lock()
	q.started = true
	q.mu.Unlock()
	p := q.pd.p
	p.st.connected(q)
	p.log.Debug("iwarp: connection established", "qp", q.num, "peer", q.conn.RemoteAddr(), "local", q.conn.LocalAddr(),
		"passive", q.passive, "crc", q.crc, "ird", q.ird, "ord", q.ord)
	go q.rxLoop()
	go q.txLoop()
}

// closeConn closes the connection, recording its TCP retransmissions first.
func (q *qp) closeConn() {
	q.cs.beforeClose()
	q.conn.Close()
}

func (q *qp) wakeTx() {
	select {
	case q.txWake <- struct{}{}:
	default:
	}
}

func (q *qp) PostSend(wr *rdma.SendWR) error {
	if len(wr.SGL) > q.maxSGE[0] {
		return rdma.ErrTooManySGE
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state >= rdma.QPError {
		return rdma.ErrQPState
	}
	if q.sqTail-q.sqHead >= uint64(len(q.sq)) {
		return rdma.ErrQueueFull
	}
	if len(q.sqFree) == 0 {
		q.growSQ()
	}
	// Taken off the free list once the post succeeds.
	w := q.sqFree[len(q.sqFree)-1]
	w.wr = *wr
	w.wr.SGL = nil
	w.mem = w.mem[:0]
	w.length, w.sent, w.placed, w.done, w.status, w.volatile = 0, 0, 0, false, rdma.StatusSuccess, false
	need := rdma.Access(0)
	switch wr.Op {
	case rdma.OpSend, rdma.OpSendWithInv, rdma.OpRDMAWrite, rdma.OpLocalInv:
	case rdma.OpRDMARead:
		need = rdma.AccessLocalWrite
	default:
		return fmt.Errorf("iwarp: post send: opcode %s not allowed on the send queue", wr.Op)
	}
	for i := range wr.SGL {
		m, err := lookupSGE(q.pd, &wr.SGL[i], need, false)
		if err != nil {
			clear(w.mem) // the WQE stays free: keep no memory reachable
			return fmt.Errorf("iwarp: post send: SGE %d: %w", i, err)
		}
		if wr.SGL[i].Buf != nil {
			w.volatile = true
		}
		w.mem = append(w.mem, m)
		w.length += len(m)
	}
	if wr.Op == rdma.OpRDMARead {
		w.sinkSTag, w.sinkTO = 0, 0
		if len(wr.SGL) > 0 {
			s0 := &wr.SGL[0]
			w.sinkSTag = s0.MR.LKey()
			switch {
			case s0.Buf == nil:
				w.sinkTO = s0.MR.VA() + uint64(s0.Offset)
			case len(w.mem[0]) > 0:
				// The implicit MR: the sink TO is the memory's address, as
				// a verbs SGE's addr. The responder only echoes it;
				// placement follows the WQE's scatter list (rxReadResp).
				w.sinkTO = uint64(uintptr(unsafe.Pointer(&w.mem[0][0])))
			}
		}
	}
	q.sqFree = q.sqFree[:len(q.sqFree)-1]
	q.sq[q.sqTail%uint64(len(q.sq))] = w
	q.sqTail++
	if wr.Flags&rdma.More == 0 {
		// With More the transmitter is woken by the WR that ends the
		// chain, and writes the chain in one batch (one writev).
		q.wakeTx()
	}
	return nil
}

// sqChunk is how many send WQEs the send queue allocates at a time.
const sqChunk = 8

// growSQ allocates send WQEs onto the free list: the outstanding ones
// never exceed len(sq), and the free list is empty only when all
// allocated are outstanding. Caller holds mu.
func (q *qp) growSQ() {
	n := min(sqChunk, len(q.sq)-q.sqAlloc)
	ss := q.maxSGE[0]
	ws := make([]sendWQE, n)
	mem := make([][]byte, n*ss)
	for i := range ws {
		ws[i].mem = mem[i*ss : i*ss : (i+1)*ss]
		q.sqFree = append(q.sqFree, &ws[i])
	}
	q.sqAlloc += n
}

func (q *qp) PostRecv(wr *rdma.RecvWR) error {
	if len(wr.SGL) > q.maxSGE[1] {
		return rdma.ErrTooManySGE
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state >= rdma.QPError {
		return rdma.ErrQPState
	}
	if q.rqTail-q.rqHead >= uint64(len(q.rq)) {
		return rdma.ErrQueueFull
	}
	w := &q.rq[q.rqTail%uint64(len(q.rq))]
	w.id = wr.ID
	w.mem = w.mem[:0]
	w.length = 0
	for i := range wr.SGL {
		m, err := lookupSGE(q.pd, &wr.SGL[i], rdma.AccessLocalWrite, true)
		if err != nil {
			return fmt.Errorf("iwarp: post recv: SGE %d: %w", i, err)
		}
		w.mem = append(w.mem, m)
		w.length += len(m)
	}
	q.rqTail++
	return nil
}

// retireLocked completes finished send WQEs in order: those handed to the
// transmitter (which may still look at the others), or after the flush,
// all. A retired WQE goes back to the free list. Caller holds mu.
func (q *qp) retireLocked() {
	for q.sqHead < q.sqTail && (q.sqHead < q.sqTx || q.flushed) {
		at := &q.sq[q.sqHead%uint64(len(q.sq))]
		w := *at
		if !w.done {
			return
		}
		if w.wr.Flags&rdma.Signaled != 0 || w.status != rdma.StatusSuccess {
			wc := rdma.WC{ID: w.wr.ID, Status: w.status, Op: w.wr.Op, ByteLen: w.length, QPNum: q.num, QP: q}
			q.sendCQ.push(&wc)
		}
		// Drop the references: implicit-MR memory (a RAM disk's chunks)
		// must not stay reachable through an idle WQE.
		clear(w.mem)
		w.mem = w.mem[:0]
		*at = nil
		q.sqFree = append(q.sqFree, w)
		q.sqHead++
	}
}

// ErrDisconnected is the QP error after a local Disconnect.
const ErrDisconnected = errorString("iwarp: disconnected locally")

// ErrPeerClosed is the QP error after the peer closed the connection.
const ErrPeerClosed = errorString("iwarp: connection closed by peer")

// fail moves the QP to the error state with err; term, when set, is sent to
// the peer before the connection closes.
func (q *qp) fail(err error, term *termError) {
	q.mu.Lock()
	if q.state >= rdma.QPError {
		q.mu.Unlock()
		return
	}
	q.state = rdma.QPError
	q.err = err
	q.term = term
	close(q.done)
	started := q.started
	conn := q.conn
	q.mu.Unlock()
	if term != nil {
		q.pd.p.log.Debug("iwarp: QP terminated", "qp", q.num, "err", err)
	}
	if !started {
		if conn != nil {
			conn.Close()
		}
		q.flush()
		return
	}
	if term == nil {
		q.closeConn() // unblocks both loops
	}
	q.wakeTx()
}

// fatalIO handles a transport failure.
func (q *qp) fatalIO(err error) { q.fail(err, nil) }

// flush completes every outstanding work request with StatusFlushed.
func (q *qp) flush() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.flushed {
		return
	}
	q.flushed = true
	for i := q.sqHead; i < q.sqTail; i++ {
		w := q.sq[i%uint64(len(q.sq))]
		if !w.done {
			w.done = true
			w.status = rdma.StatusFlushed
		}
	}
	q.retireLocked()
	for ; q.rqHead < q.rqTail; q.rqHead++ {
		w := &q.rq[q.rqHead%uint64(len(q.rq))]
		st := rdma.StatusFlushed
		if q.rx.recvStatus != rdma.StatusSuccess && q.rqHead == q.rx.failedRecv {
			st = q.rx.recvStatus
		}
		wc := rdma.WC{ID: w.id, Status: st, Op: rdma.OpRecv, QPNum: q.num, QP: q}
		q.recvCQ.push(&wc)
	}
}

func (q *qp) Disconnect() error {
	q.mu.Lock()
	st := q.state
	q.mu.Unlock()
	if st >= rdma.QPError {
		return nil
	}
	q.fail(ErrDisconnected, nil)
	return nil
}

func (q *qp) Close() error {
	q.Disconnect()
	q.mu.Lock()
	started := q.started
	q.mu.Unlock()
	if started {
		<-q.txExited
	}
	q.mu.Lock()
	q.state = rdma.QPClosed
	q.mu.Unlock()
	return nil
}
