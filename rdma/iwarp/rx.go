package iwarp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/rdisk/rdisk/internal/stream"
	"github.com/rdisk/rdisk/rdma"
)

// The receiver reads FPDU headers through a buffer. Bulk payload is read
// from the socket straight into the target memory; only bytes that arrive
// in the same read as a header are copied from the buffer. How much a read
// may take adapts to the traffic:
//   - after a small FPDU (payload up to rxSmallPayload) the next read may
//     fill the whole rxBufSize buffer, so a stream of small messages (4 KiB
//     NVMe reads, capsules, responses) costs one system call per many
//     FPDUs and one copy of each small payload, which is far cheaper than a
//     system call per FPDU;
//   - after a large FPDU the next read takes at most rxTailSize bytes (the
//     trailer and the next headers), so at most that much of the following
//     large payload is copied and the rest lands in place.
//
// The buffer starts at rxBufStart bytes and grows to rxBufSize the first
// time a read fills it (more was waiting): an idle or lightly used QP keeps
// a small one.
const (
	rxBufStart     = 2 << 10
	rxBufSize      = 16 << 10
	rxTailSize     = 512
	rxSmallPayload = 8 << 10
)

// rxState is owned by the receiver goroutine (recvStatus and failedRecv
// are read by flush after the receiver exited).
type rxState struct {
	buf    []byte
	r, w   int
	tab    *crc32.Table
	crc    uint32
	expMSN [2]uint32 // next MSN expected on QN 0 (Send) and QN 1 (Read Request)
	sendMO int       // bytes of the current Send placed
	first  bool      // no FPDU received yet
	// wake defers waking the transmitter until the receiver has consumed
	// what it already read, so that Read Requests that arrived together
	// are answered in one vectored write.
	wake bool
	// lastLarge: the previous FPDU carried more than rxSmallPayload bytes.
	lastLarge bool
	// grow: a read filled the (small) buffer; the next one gets rxBufSize.
	grow bool

	recvStatus rdma.Status
	failedRecv uint64
	rv         stream.Readv

	// Counts not yet added to c (see rxCounters).
	pendFPDUs, pendBytes, pendPlaced uint64
	c                                rxCounters
}

// publish adds the pending counts to the counters Stats reads. The
// receiver calls it before each read from the socket and when it exits.
func (r *rxState) publish() {
	if r.pendFPDUs != 0 {
		r.c.fpdus.Add(r.pendFPDUs)
		r.pendFPDUs = 0
	}
	if r.pendBytes != 0 {
		r.c.bytes.Add(r.pendBytes)
		r.pendBytes = 0
	}
	if r.pendPlaced != 0 {
		r.c.placed.Add(r.pendPlaced)
		r.pendPlaced = 0
	}
}

func (r *rxState) init() {
	r.buf = make([]byte, rxBufStart)
	r.tab = crc32.MakeTable(crc32.Castagnoli)
	r.expMSN = [2]uint32{1, 1}
	r.first = true
}

// rxTerm returns the protocol violation found while receiving, as the
// Terminate (layer, type, code) it is answered with.
func rxTerm(layer, etype, ecode uint8, format string, args ...any) *termError {
	return &termError{Layer: layer, EType: etype, ECode: ecode, Msg: fmt.Sprintf(format, args...)}
}

// ensure makes at least n (<= rxBufSize) bytes available in buf[r:w].
func (q *qp) ensure(n int) error {
	x := &q.rx
	if x.w-x.r >= n {
		return nil
	}
	if x.wake {
		x.wake = false
		q.wakeTx()
	}
	x.publish()
	if x.grow {
		x.grow = false
		b := make([]byte, rxBufSize)
		x.w = copy(b, x.buf[x.r:x.w])
		x.buf, x.r = b, 0
	} else if x.r > 0 {
		copy(x.buf, x.buf[x.r:x.w])
		x.w -= x.r
		x.r = 0
	}
	limit := len(x.buf)
	if x.lastLarge {
		limit = rxTailSize
	}
	for x.w < n {
		k, err := q.conn.Read(x.buf[x.w:max(limit, n)])
		x.w += k
		if x.w == len(x.buf) && len(x.buf) < rxBufSize {
			x.grow = true
		}
		if err != nil && x.w < n {
			return err
		}
	}
	return nil
}

// readPayload fills dst from the buffered bytes, then from the socket.
func (q *qp) readPayload(dst []byte) error {
	x := &q.rx
	k := copy(dst, x.buf[x.r:x.w])
	x.r += k
	if k < len(dst) {
		if x.wake {
			x.wake = false
			q.wakeTx()
		}
		if err := q.readRest(dst[k:]); err != nil {
			return err
		}
	}
	if q.crc {
		x.crc = crc32.Update(x.crc, x.tab, dst)
	}
	return nil
}

// readRest fills dst from the socket; the header buffer is empty. On a TCP
// socket one readv(2) fills dst and, behind it, the header buffer with
// whatever follows (the trailer and the next headers), saving a system call
// per FPDU.
func (q *qp) readRest(dst []byte) error {
	x := &q.rx
	x.publish()
	if !x.rv.Ok() {
		_, err := io.ReadFull(q.conn, dst)
		return err
	}
	x.r, x.w = 0, 0
	n, err := x.rv.Fill(dst, x.buf, rxSmallPayload, rxTailSize)
	x.w = n
	if n == len(x.buf) && len(x.buf) < rxBufSize {
		x.grow = true
	}
	return err
}

// scatter reads n payload bytes into the scatter list mem at byte offset off.
func (q *qp) scatter(mem [][]byte, off, n int) error {
	for _, m := range mem {
		if n == 0 {
			return nil
		}
		if off >= len(m) {
			off -= len(m)
			continue
		}
		piece := m[off:]
		if len(piece) > n {
			piece = piece[:n]
		}
		off = 0
		n -= len(piece)
		if err := q.readPayload(piece); err != nil {
			return err
		}
	}
	return nil
}

// skip reads and discards n bytes (CRC still covers them).
func (q *qp) skip(n int) error {
	for n > 0 {
		if err := q.ensure(1); err != nil {
			return err
		}
		x := &q.rx
		k := min(n, x.w-x.r)
		if q.crc {
			x.crc = crc32.Update(x.crc, x.tab, x.buf[x.r:x.r+k])
		}
		x.r += k
		n -= k
	}
	return nil
}

func (q *qp) rxLoop() {
	defer close(q.rxExited)
	defer q.rx.publish()
	for {
		err := q.rxOne()
		if err == nil {
			continue
		}
		var te *termError
		switch {
		case errors.As(err, &te) && te.Remote:
			q.fail(te, nil)
		case errors.As(err, &te):
			q.fail(te, te)
		case q.State() >= rdma.QPError:
			// Closed locally; the read error is the consequence.
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			q.fatalIO(ErrPeerClosed)
		default:
			q.fatalIO(fmt.Errorf("iwarp: receiving: %w", err))
		}
		return
	}
}

// rxOne receives one FPDU.
func (q *qp) rxOne() error {
	x := &q.rx
	if err := q.ensure(4); err != nil {
		return err
	}
	b := x.buf[x.r:]
	ulpdu := int(binary.BigEndian.Uint16(b[offLen:]))
	ddp, rd := b[offDDPCtrl], b[offRDMACtrl]
	tagged := ddp&ddpTagged != 0
	op := rd & rdmapOpMask
	if ddp&ddpVerMask != ddpVersion {
		et := uint8(ddpETypeUntagged)
		ec := uint8(ddpECodeUTVersion)
		if tagged {
			et, ec = ddpETypeTagged, ddpECodeTVersion
		}
		return rxTerm(termLayerDDP, et, ec, "DDP version %d", ddp&ddpVerMask)
	}
	if rd&rdmapVerMask != rdmapVersion {
		return rxTerm(termLayerRDMAP, rdmapETypeRemoteOp, rdmapECodeVersion, "RDMAP version %d", rd>>6)
	}
	if op >= rdmapNumOpcodes || tagged != isTaggedOp(op) {
		return rxTerm(termLayerRDMAP, rdmapETypeRemoteOp, rdmapECodeOpcode, "opcode %d (tagged %v)", op, tagged)
	}
	hl := hdrLen(op)
	payload := ulpdu + 2 - hl
	if payload < 0 {
		return rxTerm(termLayerLLP, llpETypeMPA, llpECodeFPDUStart, "ULPDU length %d shorter than its header", ulpdu)
	}
	x.lastLarge = payload > rxSmallPayload
	if err := q.ensure(hl); err != nil {
		return err
	}
	hdr := x.buf[x.r : x.r+hl]
	if q.crc {
		x.crc = crc32.Update(0, x.tab, hdr)
	}
	last := ddp&ddpLast != 0
	var err error
	if tagged {
		stag := binary.BigEndian.Uint32(hdr[offSTag:])
		to := binary.BigEndian.Uint64(hdr[offTO:])
		x.r += hl
		if op == rdmapWrite {
			err = q.rxWrite(stag, to, payload)
		} else {
			err = q.rxReadResp(stag, to, payload, last)
		}
	} else {
		inv := binary.BigEndian.Uint32(hdr[offInvSTag:])
		qn := binary.BigEndian.Uint32(hdr[offQN:])
		msn := binary.BigEndian.Uint32(hdr[offMSN:])
		mo := binary.BigEndian.Uint32(hdr[offMO:])
		x.r += hl
		switch op {
		case rdmapReadReq:
			err = q.rxReadReq(qn, msn, mo, payload)
		case rdmapTerminate:
			err = q.rxTerminate(qn, payload)
		default:
			err = q.rxSend(op, inv, qn, msn, mo, payload, last)
		}
	}
	if err != nil {
		return err
	}
	// Trailer: pad and CRC (RFC 5044 §4.1).
	pad := padLen(ulpdu)
	if err := q.ensure(pad + mpaCRCLen); err != nil {
		return err
	}
	tr := x.buf[x.r : x.r+pad+mpaCRCLen]
	x.r += pad + mpaCRCLen
	if q.crc {
		c := crc32.Update(x.crc, x.tab, tr[:pad])
		if got := binary.LittleEndian.Uint32(tr[pad:]); got != c {
			q.pd.p.st.crcErrors.Add(1)
			return rxTerm(termLayerLLP, llpETypeMPA, llpECodeRecvCRC, "CRC %#08x, computed %#08x", got, c)
		}
	}
	x.pendFPDUs++
	if op != rdmapReadReq {
		x.pendBytes += uint64(payload)
	}
	if x.first {
		x.first = false
		if q.passive {
			close(q.rxFirst)
		}
	}
	return nil
}

// ddpTaggedCode maps a protection check result to the DDP tagged-buffer code.
func ddpTaggedCode(rdmapCode uint8) uint8 {
	switch rdmapCode {
	case rdmapECodeBaseBounds:
		return ddpECodeTBaseBounds
	case rdmapECodeSTagNotAssoc:
		return ddpECodeTSTagNotAssoc
	case rdmapECodeTOWrap:
		return ddpECodeTTOWrap
	}
	return ddpECodeTInvalidSTag
}

func (q *qp) rxWrite(stag uint32, to uint64, payload int) error {
	if payload == 0 && q.rx.first && q.rtr == rtrWrite {
		return nil // RFC 6581 zero-length RTR Write: no placement
	}
	r := q.pd.p.stags.lookup(stag)
	if r == nil {
		return rxTerm(termLayerDDP, ddpETypeTagged, ddpECodeTInvalidSTag, "RDMA Write to unknown STag %#x", stag)
	}
	dst, code := r.resolve(stag, q.pd, to, payload, rdma.AccessRemoteWrite)
	if code == rdmapECodeAccessRights {
		return rxTerm(termLayerRDMAP, rdmapETypeRemoteProt, code, "RDMA Write to STag %#x without remote-write access", stag)
	}
	if dst == nil && code != 0 || dst == nil && payload > 0 {
		return rxTerm(termLayerDDP, ddpETypeTagged, ddpTaggedCode(code), "RDMA Write of %d bytes at %#x to STag %#x refused", payload, to, stag)
	}
	if err := q.readPayload(dst); err != nil {
		return err
	}
	q.rx.pendPlaced += uint64(payload)
	return nil
}

func (q *qp) rxReadResp(stag uint32, to uint64, payload int, last bool) error {
	q.mu.Lock()
	if q.orqHead == q.orqTail {
		q.mu.Unlock()
		return rxTerm(termLayerRDMAP, rdmapETypeRemoteOp, rdmapECodeOpcode, "Read Response with no Read Request outstanding")
	}
	idx := q.orq[q.orqHead%uint64(len(q.orq))]
	w := q.sq[idx%uint64(len(q.sq))]
	q.mu.Unlock()
	if stag != w.sinkSTag || to != w.sinkTO+uint64(w.placed) || payload > w.length-w.placed {
		return rxTerm(termLayerDDP, ddpETypeTagged, ddpECodeTBaseBounds,
			"Read Response of %d bytes at STag %#x TO %#x does not match the request (STag %#x TO %#x, %d of %d bytes placed)",
			payload, stag, to, w.sinkSTag, w.sinkTO+uint64(w.placed), w.placed, w.length)
	}
	if err := q.scatter(w.mem, w.placed, payload); err != nil {
		return err
	}
	q.rx.pendPlaced += uint64(payload)
	w.placed += payload
	if !last {
		return nil
	}
	if w.placed != w.length {
		return rxTerm(termLayerDDP, ddpETypeTagged, ddpECodeTBaseBounds, "Read Response ended after %d of %d bytes", w.placed, w.length)
	}
	q.mu.Lock()
	w.done = true
	q.orqHead++
	q.readsOut--
	q.retireLocked()
	q.mu.Unlock()
	q.wakeTx()
	return nil
}

func (q *qp) rxSend(op uint8, inv, qn, msn, mo uint32, payload int, last bool) error {
	x := &q.rx
	if qn != qnSend {
		return rxTerm(termLayerDDP, ddpETypeUntagged, ddpECodeUTInvalidQN, "Send on queue number %d", qn)
	}
	if msn != x.expMSN[0] {
		return rxTerm(termLayerDDP, ddpETypeUntagged, ddpECodeUTMSNRange, "Send MSN %d, expected %d", msn, x.expMSN[0])
	}
	if int(mo) != x.sendMO {
		return rxTerm(termLayerDDP, ddpETypeUntagged, ddpECodeUTInvalidMO, "Send MO %d, expected %d", mo, x.sendMO)
	}
	q.mu.Lock()
	if q.rqHead == q.rqTail {
		q.mu.Unlock()
		return rxTerm(termLayerDDP, ddpETypeUntagged, ddpECodeUTNoBuf, "Send MSN %d with no receive buffer posted", msn)
	}
	head := q.rqHead
	w := &q.rq[head%uint64(len(q.rq))]
	q.mu.Unlock()
	if payload > w.length-x.sendMO {
		x.recvStatus, x.failedRecv = rdma.StatusLocalLength, head
		return rxTerm(termLayerDDP, ddpETypeUntagged, ddpECodeUTMsgTooLong,
			"Send of at least %d bytes into a %d-byte receive buffer", x.sendMO+payload, w.length)
	}
	if err := q.scatter(w.mem, x.sendMO, payload); err != nil {
		return err
	}
	x.sendMO += payload
	if !last {
		return nil
	}
	wc := rdma.WC{ID: w.id, Op: rdma.OpRecv, ByteLen: x.sendMO, QPNum: q.num, QP: q}
	if op == rdmapSendInv || op == rdmapSendSEInv {
		if !q.pd.p.invalidate(inv, q.pd) {
			return rxTerm(termLayerRDMAP, rdmapETypeRemoteOp, rdmapECodeCannotInval, "Send with Invalidate of STag %#x that cannot be invalidated", inv)
		}
		wc.Flags |= rdma.WCWithInv
		wc.InvalidatedKey = inv
	}
	if op == rdmapSendSE || op == rdmapSendSEInv {
		wc.Flags |= rdma.WCSolicited
	}
	x.expMSN[0]++
	x.sendMO = 0
	q.mu.Lock()
	q.rqHead++
	q.recvCQ.push(&wc)
	q.mu.Unlock()
	return nil
}

func (q *qp) rxReadReq(qn, msn, mo uint32, payload int) error {
	x := &q.rx
	if qn != qnReadReq {
		return rxTerm(termLayerDDP, ddpETypeUntagged, ddpECodeUTInvalidQN, "Read Request on queue number %d", qn)
	}
	if msn != x.expMSN[1] {
		return rxTerm(termLayerDDP, ddpETypeUntagged, ddpECodeUTMSNRange, "Read Request MSN %d, expected %d", msn, x.expMSN[1])
	}
	if mo != 0 || payload != readReqLen {
		return rxTerm(termLayerDDP, ddpETypeUntagged, ddpECodeUTInvalidMO, "Read Request of %d bytes at MO %d", payload, mo)
	}
	if err := q.ensure(readReqLen); err != nil {
		return err
	}
	var rr readRequest
	body := x.buf[x.r : x.r+readReqLen]
	rr.parse(body)
	if q.crc {
		x.crc = crc32.Update(x.crc, x.tab, body)
	}
	x.r += readReqLen
	x.expMSN[1]++
	var src []byte
	if rr.Size > 0 {
		r := q.pd.p.stags.lookup(rr.SourceSTag)
		if r == nil {
			return rxTerm(termLayerRDMAP, rdmapETypeRemoteProt, rdmapECodeInvalidSTag, "RDMA Read from unknown STag %#x", rr.SourceSTag)
		}
		var code uint8
		src, code = r.resolve(rr.SourceSTag, q.pd, rr.SourceTO, int(rr.Size), rdma.AccessRemoteRead)
		if src == nil {
			return rxTerm(termLayerRDMAP, rdmapETypeRemoteProt, code, "RDMA Read of %d bytes at %#x from STag %#x refused", rr.Size, rr.SourceTO, rr.SourceSTag)
		}
	}
	q.mu.Lock()
	if q.irqTail-q.irqHead >= uint64(q.ird) {
		q.mu.Unlock()
		return rxTerm(termLayerRDMAP, rdmapETypeRemoteOp, rdmapECodeCatastrophic, "more than IRD=%d RDMA Reads outstanding", q.ird)
	}
	q.irq[q.irqTail%uint64(len(q.irq))] = irqEntry{sinkSTag: rr.SinkSTag, sinkTO: rr.SinkTO, src: src}
	q.irqTail++
	q.mu.Unlock()
	x.wake = true
	return nil
}

func (q *qp) rxTerminate(qn uint32, payload int) error {
	x := &q.rx
	if payload < termCtrlLen {
		return rxTerm(termLayerDDP, ddpETypeUntagged, ddpECodeUTInvalidMO, "Terminate of %d bytes", payload)
	}
	if err := q.ensure(termCtrlLen); err != nil {
		return err
	}
	te := parseTermCtrl(binary.BigEndian.Uint32(x.buf[x.r:]))
	x.pendFPDUs++
	p := q.pd.p
	p.st.termRecv[termReason(te.Layer, te.EType, te.ECode)].Add(1)
	p.logTerminate("iwarp: Terminate received", q, te)
	// The rest (offending headers) is informational; the connection ends.
	q.mu.Lock()
	if q.sqHead < q.sqTail {
		w := q.sq[q.sqHead%uint64(len(q.sq))]
		if !w.done {
			w.done = true
			w.status = termStatus(te)
		}
	}
	q.mu.Unlock()
	return te
}

// termStatus maps the peer's Terminate to the status of the work request it
// most likely concerns.
func termStatus(te *termError) rdma.Status {
	switch {
	case te.Layer == termLayerRDMAP && te.EType == rdmapETypeRemoteProt,
		te.Layer == termLayerDDP && te.EType == ddpETypeTagged:
		return rdma.StatusRemoteAccess
	case te.Layer == termLayerRDMAP && te.EType == rdmapETypeRemoteOp:
		return rdma.StatusRemoteOp
	case te.Layer == termLayerDDP && te.EType == ddpETypeUntagged:
		return rdma.StatusRemoteInvReq
	}
	return rdma.StatusRemoteOp
}
