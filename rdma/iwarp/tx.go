package iwarp

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"log/slog"
	"net"
	"time"

	"github.com/rdisk/rdisk/rdma"
)

const (
	txMaxIov   = 512     // iovecs per writev, at most
	txMinIov   = 64      // iovecs per writev at first (grown to txMaxIov on need)
	txMaxBytes = 1 << 20 // payload bytes per writev
	// Each FPDU uses one header slot and one trailer slot in the arena.
	txSlot = untaggedHdrLen + readReqLen + 8
)

// txState is owned by the transmitter goroutine.
type txState struct {
	maxPayload int
	iov        [][]byte
	bufs       net.Buffers
	arena      []byte
	arenaUsed  int
	full       bool // the last batch stopped at the iovec or arena capacity
	bytes      int  // payload bytes in the batch
	fpdus      int  // FPDUs in the batch
	c          txCounters
	tab        *crc32.Table
	msn        [3]uint32 // last MSN sent per queue number
	// staged holds copies of volatile payload for CRC'd FPDUs (allocated
	// on first use): the CRC must cover exactly the bytes written, and
	// memory from the implicit MR may change under the writev.
	staged     []byte
	stagedUsed int
	// Batch bookkeeping: how far the SQ and IRQ got in this batch.
	sqTo  uint64
	irqTo uint64
	one   [1][]byte
}

// init sizes the batch for maxPieces payload pieces per FPDU. The iovecs
// and header arena start at txMinIov entries and double, up to txMaxIov,
// each time a batch fills them: an idle or lightly used QP keeps a few KiB
// instead of ~40, and a busy one reaches full batches after a handful of
// allocations.
func (t *txState) init(maxPayload, maxPieces int) {
	t.maxPayload = maxPayload
	// At least one FPDU of the most pieces fits (header, pieces, trailer).
	t.setCap(min(max(txMinIov, maxPieces+3), txMaxIov))
	t.tab = crc32.MakeTable(crc32.Castagnoli)
}

func (t *txState) setCap(n int) {
	t.iov = make([][]byte, 0, n)
	t.arena = make([]byte, n*txSlot)
}

func (t *txState) reset() {
	if t.full && cap(t.iov) < txMaxIov {
		// The previous batch is written: nothing refers to the old arrays.
		t.setCap(min(2*cap(t.iov), txMaxIov))
	}
	t.full = false
	t.iov = t.iov[:0]
	t.arenaUsed = 0
	t.stagedUsed = 0
	t.bytes = 0
	t.fpdus = 0
}

// sent counts the batch as written.
func (t *txState) sent() {
	t.c.fpdus.Add(uint64(t.fpdus))
	if t.bytes > 0 {
		t.c.bytes.Add(uint64(t.bytes))
	}
}

// stage copies p into the staging buffer and returns the copy.
func (t *txState) stage(p []byte) []byte {
	if t.staged == nil {
		// room() stops a batch after txMaxBytes, so one more FPDU fits.
		t.staged = make([]byte, txMaxBytes+t.maxPayload)
	}
	c := t.staged[t.stagedUsed : t.stagedUsed+len(p) : t.stagedUsed+len(p)]
	copy(c, p)
	t.stagedUsed += len(p)
	return c
}

func (t *txState) slot(n int) []byte {
	b := t.arena[t.arenaUsed : t.arenaUsed+n : t.arenaUsed+n]
	t.arenaUsed += n
	return b
}

// room tells whether one more FPDU of up to maxSGE+1 payload pieces fits.
func (t *txState) room(pieces int) bool {
	if t.bytes >= txMaxBytes {
		return false
	}
	if len(t.iov)+pieces+2 > cap(t.iov) || t.arenaUsed+txSlot > len(t.arena) {
		t.full = true
		return false
	}
	return true
}

// fpdu appends one FPDU: header hdr (already filled but for the length),
// then payload taken from mem starting at off, n bytes. With crc, volatile
// payload is staged first so the checksum matches what is sent.
func (t *txState) fpdu(hdr []byte, mem [][]byte, off, n int, crc, volatile bool) {
	ulpdu := len(hdr) - 2 + n
	binary.BigEndian.PutUint16(hdr, uint16(ulpdu))
	t.iov = append(t.iov, hdr)
	var c uint32
	if crc {
		c = crc32.Update(0, t.tab, hdr)
	}
	left := n
	for _, m := range mem {
		if left == 0 {
			break
		}
		if off >= len(m) {
			off -= len(m)
			continue
		}
		piece := m[off:]
		if len(piece) > left {
			piece = piece[:left]
		}
		off = 0
		left -= len(piece)
		if crc && volatile {
			piece = t.stage(piece)
		}
		t.iov = append(t.iov, piece)
		if crc {
			c = crc32.Update(c, t.tab, piece)
		}
	}
	pad := padLen(ulpdu)
	tr := t.slot(pad + mpaCRCLen)
	clear(tr[:pad])
	if crc {
		c = crc32.Update(c, t.tab, tr[:pad])
		binary.LittleEndian.PutUint32(tr[pad:], c)
	} else {
		binary.LittleEndian.PutUint32(tr[pad:], 0)
	}
	t.iov = append(t.iov, tr)
	t.bytes += n
	t.fpdus++
}

// txLoop transmits queued work until the QP fails, then sends a pending
// Terminate, closes the connection, waits for the receiver and flushes.
func (q *qp) txLoop() {
	defer close(q.txExited)
	if q.passive {
		// RFC 5044 §7.1.2: the responder sends no FPDU before it has
		// received the initiator's first one.
		select {
		case <-q.rxFirst:
		case <-q.done:
		}
	}
	for {
		q.mu.Lock()
		failed := q.state >= rdma.QPError
		q.mu.Unlock()
		if failed {
			break
		}
		if !q.buildBatch() {
			select {
			case <-q.txWake:
			case <-q.done:
			}
			continue
		}
		q.tx.bufs = q.tx.iov
		_, err := q.tx.bufs.WriteTo(q.conn)
		q.tx.bufs = nil
		if err != nil {
			q.fatalIO(err)
			break
		}
		q.tx.sent()
		q.finishBatch()
	}
	q.mu.Lock()
	term := q.term
	q.mu.Unlock()
	if term != nil {
		q.sendTerminate(term)
		q.closeConn()
	}
	<-q.rxExited
	q.flush()
	p := q.pd.p
	p.st.stopped(q)
	if p.log.Enabled(context.Background(), slog.LevelDebug) {
		q.mu.Lock()
		err := q.err
		q.mu.Unlock()
		p.log.Debug("iwarp: connection closed", "qp", q.num, "peer", q.conn.RemoteAddr(), "err", err,
			"fpdus_sent", q.tx.c.fpdus.Load(), "fpdus_received", q.rx.c.fpdus.Load(),
			"bytes_sent", q.tx.c.bytes.Load(), "bytes_received", q.rx.c.bytes.Load())
	}
}

func (q *qp) sendTerminate(term *termError) {
	q.tx.reset()
	h := q.tx.slot(untaggedHdrLen + termCtrlLen)
	q.tx.msn[qnTerminate]++
	putUntagged(h, 0, true, rdmapTerminate, 0, qnTerminate, q.tx.msn[qnTerminate], 0)
	binary.BigEndian.PutUint32(h[untaggedHdrLen:], term.ctrlWord())
	q.tx.fpdu(h, nil, 0, 0, q.crc, false)
	q.conn.SetWriteDeadline(time.Now().Add(time.Second))
	q.tx.bufs = q.tx.iov
	_, err := q.tx.bufs.WriteTo(q.conn)
	q.tx.bufs = nil
	if err != nil {
		q.pd.p.log.Debug("iwarp: sending Terminate failed", "qp", q.num, "peer", q.conn.RemoteAddr(), "err", err)
		return
	}
	q.tx.sent()
	q.pd.p.st.termSent[termReason(term.Layer, term.EType, term.ECode)].Add(1)
	q.pd.p.logTerminate("iwarp: Terminate sent", q, term)
}

// buildBatch fills the iovec batch with Read Responses and send-queue work.
// It reports whether anything is to be written.
func (q *qp) buildBatch() bool {
	t := &q.tx
	t.reset()
	q.mu.Lock()
	defer q.mu.Unlock()
	t.irqTo = q.irqHead
	t.sqTo = q.sqTx
	// Inbound Read Requests first: the peer waits on them.
	for t.irqTo < q.irqTail && t.room(2) {
		e := &q.irq[t.irqTo%uint64(len(q.irq))]
		if !q.emitReadResp(e) {
			break
		}
		t.irqTo++
	}
	// A Read Response fully queued frees its IRD slot now: the peer may
	// receive it, and issue its next Read Request, before the write below
	// returns. The batch keeps no reference to the entry.
	for ; q.irqHead < t.irqTo; q.irqHead++ {
		q.irq[q.irqHead%uint64(len(q.irq))] = irqEntry{}
	}
	for t.sqTo < q.sqTail && t.room(q.maxSGE[0]) {
		w := q.sq[t.sqTo%uint64(len(q.sq))]
		if w.wr.Flags&rdma.Fence != 0 && q.readsOut > 0 {
			break
		}
		if w.wr.Op == rdma.OpRDMARead && q.readsOut >= q.ord {
			break
		}
		if !q.emitSend(w, t.sqTo) {
			break
		}
		t.sqTo++
	}
	return len(t.iov) > 0 || t.sqTo != q.sqTx
}

// emitReadResp adds FPDUs of a Read Response; it reports whether the
// response is complete in this batch.
func (q *qp) emitReadResp(e *irqEntry) bool {
	t := &q.tx
	t.one[0] = e.src
	mem := t.one[:]
	for {
		n := min(len(e.src)-e.sent, t.maxPayload)
		last := e.sent+n == len(e.src)
		h := t.slot(taggedHdrLen)
		putTagged(h, 0, last, rdmapReadResp, e.sinkSTag, e.sinkTO+uint64(e.sent))
		t.fpdu(h, mem, e.sent, n, q.crc, false)
		e.sent += n
		if last {
			return true
		}
		if !t.room(2) {
			return false
		}
	}
}

// emitSend adds the FPDUs of one send-queue WQE; it reports whether the
// WQE is fully in the batch.
func (q *qp) emitSend(w *sendWQE, idx uint64) bool {
	t := &q.tx
	switch w.wr.Op {
	case rdma.OpLocalInv:
		if !q.pd.p.invalidate(w.wr.InvalidateKey, q.pd) {
			w.status = rdma.StatusLocalProt
		}
		return true
	case rdma.OpRDMARead:
		h := t.slot(untaggedHdrLen + readReqLen)
		t.msn[qnReadReq]++
		putUntagged(h, 0, true, rdmapReadReq, 0, qnReadReq, t.msn[qnReadReq], 0)
		rr := readRequest{SinkSTag: w.sinkSTag, SinkTO: w.sinkTO, Size: uint32(w.length), SourceSTag: w.wr.RemoteKey, SourceTO: w.wr.RemoteAddr}
		rr.put(h[untaggedHdrLen:])
		t.fpdu(h, nil, 0, 0, q.crc, false)
		// Queue it for the response before it is on the wire.
		q.orq[q.orqTail%uint64(len(q.orq))] = idx
		q.orqTail++
		q.readsOut++
		return true
	}
	for {
		n := min(w.length-w.sent, t.maxPayload)
		last := w.sent+n == w.length
		var h []byte
		switch w.wr.Op {
		case rdma.OpRDMAWrite:
			h = t.slot(taggedHdrLen)
			putTagged(h, 0, last, rdmapWrite, w.wr.RemoteKey, w.wr.RemoteAddr+uint64(w.sent))
		default:
			op := uint8(rdmapSend)
			inv := uint32(0)
			if w.wr.Op == rdma.OpSendWithInv {
				op, inv = rdmapSendInv, w.wr.InvalidateKey
			}
			if w.wr.Flags&rdma.Solicited != 0 {
				op += rdmapSendSE - rdmapSend
			}
			if w.sent == 0 {
				t.msn[qnSend]++
			}
			h = t.slot(untaggedHdrLen)
			putUntagged(h, 0, last, op, inv, qnSend, t.msn[qnSend], uint32(w.sent))
		}
		t.fpdu(h, w.mem, w.sent, n, q.crc, w.volatile)
		w.sent += n
		if last {
			return true
		}
		if !t.room(q.maxSGE[0]) {
			return false
		}
	}
}

// finishBatch marks what the batch carried as transmitted.
func (q *qp) finishBatch() {
	t := &q.tx
	q.mu.Lock()
	defer q.mu.Unlock()
	for ; q.sqTx < t.sqTo; q.sqTx++ {
		idx := q.sqTx
		w := q.sq[idx%uint64(len(q.sq))]
		if w.wr.Op == rdma.OpRDMARead {
			continue // done when its response has arrived
		}
		w.done = true
	}
	q.retireLocked()
}
