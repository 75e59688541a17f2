package target

import (
	"errors"

	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/rdma"
)

// offDPTR is the byte offset of the data pointer in an SQE, for error
// locations.
const offDPTR = 24

// start begins a command received in slot (n bytes of capsule).
func (q *queue) start(slot, n int) error {
	r := q.getRsp()
	if r == nil {
		q.mu.Lock()
		q.pending = append(q.pending, pendingCmd{slot: slot, n: n})
		q.mu.Unlock()
		return nil
	}
	r.cmdSlot = slot
	r.capsule = q.sqeBuf(slot)
	copy(r.sqe[:], r.capsule)
	r.status, r.result, r.errLoc, r.outLen = nvmeof.StatusSuccess, 0, nvmeof.ParamErrorLocationNone, 0
	r.xfer, r.xferLen, r.keyed, r.inval, r.dir, r.nsid, r.lba, r.nseg = nil, 0, false, false, nvmeof.DirNone, 0, 0, 0
	r.onWorker, r.wantWorker = false, false
	r.sqhd = q.sqhd
	if q.sqflow {
		r.sqhd = nvmeof.SQHeadDisabled
	}
	r.state = rspResponded

	sqe, kind, err := nvmeof.ParseCommand(r.capsule, q.qid == 0)
	if err != nil {
		var ce *nvmeof.CommandError
		if !errors.As(err, &ce) {
			return err
		}
		r.fail(ce)
		return q.respond(r)
	}
	r.kind = kind
	r.nsid = sqe.NSID()
	c := q.controller()
	switch {
	case c == nil && kind != nvmeof.KindConnect:
		r.status = nvmeof.StatusCommandSequenceError.WithDNR()
		return q.respond(r)
	case c != nil && kind == nvmeof.KindConnect:
		r.status = nvmeof.StatusCommandSequenceError.WithDNR()
		return q.respond(r)
	case c != nil && !isFabrics(kind) && !c.ready():
		r.status = nvmeof.StatusCommandSequenceError.WithDNR()
		return q.respond(r)
	}
	if c != nil {
		c.traffic()
	}

	r.dir = sqe.Direction()
	if r.dir == nvmeof.DirHostToCtrl || r.dir == nvmeof.DirCtrlToHost {
		sgl := sqe.DPTR()
		if err := sgl.CheckRDMA(r.dir == nvmeof.DirHostToCtrl, uint32(n-nvmeof.SQESize)); err != nil {
			var ce *nvmeof.CommandError
			if errors.As(err, &ce) {
				r.fail(ce)
			} else {
				r.status, r.errLoc = nvmeof.StatusInvalidField.WithDNR(), offDPTR
			}
			return q.respond(r)
		}
		length := int(sgl.Length())
		if length > mdts {
			r.status, r.errLoc = nvmeof.StatusInvalidField.WithDNR(), offDPTR
			return q.respond(r)
		}
		r.xferLen = length
		if sgl.Keyed() {
			r.keyed, r.inval, r.raddr, r.rkey = true, sgl.Invalidate(), sgl.Address(), sgl.Key()
			if length > 0 {
				if err := q.ensureData(r); err != nil {
					r.status = nvmeof.StatusInternal
					return q.respond(r)
				}
				r.xfer = r.data[:length]
				if r.dir == nvmeof.DirHostToCtrl {
					r.state = rspReading
					r.sgl[0] = rdma.SGE{MR: r.dataMR, Length: length}
					r.wr = rdma.SendWR{ID: wrTag + uint64(r.idx), Op: rdma.OpRDMARead, Flags: rdma.Signaled,
						SGL: r.sgl[:], RemoteAddr: r.raddr, RemoteKey: r.rkey}
					return q.qp.PostSend(&r.wr)
				}
				if q.qid == 0 {
					clear(r.xfer)
				}
			}
		} else {
			// CheckRDMA bounded offset+length by the data received.
			off := int(sgl.Address())
			r.xfer = q.inData(r.cmdSlot, n-nvmeof.SQESize)[off : off+length]
		}
	}
	if r.kind == nvmeof.KindAsyncEventRequest {
		if err := q.repostCmd(r); err != nil {
			return err
		}
		return c.parkAER(q, r)
	}
	return q.run(r)
}

// run executes a command whose host data is in place and responds: on a
// worker when it may wait for a device (offload), else here, moving to a
// worker if it finds it must wait after all (an uncached read).
func (q *queue) run(r *rsp) error {
	if q.offload(r) {
		return nil
	}
	q.execute(r)
	if r.wantWorker {
		q.toWorker(r)
		return nil
	}
	return q.respond(r)
}

func isFabrics(k nvmeof.CommandKind) bool {
	switch k {
	case nvmeof.KindConnect, nvmeof.KindPropertyGet, nvmeof.KindPropertySet, nvmeof.KindDisconnect,
		nvmeof.KindAuthSend, nvmeof.KindAuthReceive:
		return true
	}
	return false
}

func (r *rsp) fail(ce *nvmeof.CommandError) {
	r.status, r.errLoc = ce.Status, ce.Loc
}

func (q *queue) controller() *controller {
	q.ctrlMu.Lock()
	defer q.ctrlMu.Unlock()
	return q.ctrl
}

func (q *queue) ensureData(r *rsp) error {
	if r.data != nil {
		return nil
	}
	buf := make([]byte, mdts)
	mr, err := q.pd.RegisterMemory(buf, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	if err != nil {
		return err
	}
	r.data, r.dataMR = buf, mr
	return nil
}

// execute runs a command whose host data (if any) is in r.xfer.
func (q *queue) execute(r *rsp) {
	sqe := nvmeof.SQE(r.sqe[:])
	switch {
	case isFabrics(r.kind):
		q.fabrics(r, sqe)
	case q.qid == 0:
		q.controller().admin(q, r, sqe)
	default:
		q.controller().io(q, r, sqe)
	}
}

// repostCmd gives the command's receive buffer back to the host.
func (q *queue) repostCmd(r *rsp) error {
	if r.cmdSlot < 0 {
		return nil
	}
	slot := r.cmdSlot
	r.cmdSlot, r.capsule = -1, nil
	return q.postRecvWith(&r.rwr, &r.rsge, slot)
}

// respond sends the completion (after the data for reads). Safe to call
// from another goroutine for a parked request.
func (q *queue) respond(r *rsp) error {
	sqe := nvmeof.SQE(r.sqe[:])
	nvmeof.CQE(r.cqe).Encode(&nvmeof.CQEFields{Result: r.result, SQHead: r.sqhd, SQID: q.qid, CID: sqe.CID(), Status: r.status})
	if r.status != nvmeof.StatusSuccess {
		if c := q.controller(); c != nil {
			c.logError(q.qid, sqe.CID(), r.status, r.errLoc, r.lba, r.nsid)
		}
	}
	// Like nvmet, give the receive buffer back before the response, so the
	// host can never send into a missing buffer.
	if err := q.repostCmd(r); err != nil {
		return err
	}
	r.state = rspResponded
	if r.dir == nvmeof.DirCtrlToHost && r.status == nvmeof.StatusSuccess && r.outLen > 0 && r.keyed {
		sgl := r.dsgl[:1]
		if r.nseg > 0 {
			// Straight from the RAM disk (io.go checked outLen <= xferLen).
			sgl = r.dsgl[:r.nseg]
			for i, b := range r.segs[:r.nseg] {
				sgl[i] = rdma.SGE{MR: q.implicit, Buf: b}
			}
		} else {
			sgl[0] = rdma.SGE{MR: r.dataMR, Length: min(r.outLen, r.xferLen)}
		}
		r.wr2 = rdma.SendWR{ID: wrTag + uint64(r.idx), Op: rdma.OpRDMAWrite, SGL: sgl, RemoteAddr: r.raddr, RemoteKey: r.rkey}
		if err := q.qp.PostSend(&r.wr2); err != nil {
			return err
		}
	}
	r.sgl[0] = rdma.SGE{MR: q.rspMR, Offset: r.idx * nvmeof.CQESize, Length: nvmeof.CQESize}
	r.wr = rdma.SendWR{ID: wrTag + uint64(r.idx), Op: rdma.OpSend, Flags: rdma.Signaled, SGL: r.sgl[:]}
	if r.keyed && r.inval {
		r.wr.Op, r.wr.InvalidateKey = rdma.OpSendWithInv, r.rkey
	}
	return q.qp.PostSend(&r.wr)
}
