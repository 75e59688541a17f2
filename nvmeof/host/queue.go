package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/rdmaq"
)

// nullSGL is the data pointer of a command without data.
var nullSGL = nvmeof.SGLFields{Identifier: nvmeof.SGLKeyed}

// capStride is the registered bytes per command slot: the 64-byte SQE and a
// 16-byte Dataset Management range, rounded up.
const capStride = 128

// Slot kinds: how a completion is delivered.
const (
	kindIO   uint8 = iota // a blockdev.Request: its callback or channel
	kindSync              // a goroutine waiting in exec
	kindAER               // the Asynchronous Event Request of the admin queue
)

// command is the NVMe state of one slot of a queue: a CID (the slot's
// index) and its capsule, allocated once.
type command struct {
	cid   uint16
	kind  uint8
	name  string     // command name for errors (constant strings)
	sqe   nvmeof.SQE // the capsule's SQE (the slot's send buffer)
	extra []byte     // capsule bytes after the SQE (DSM range)
	req   *blockdev.Request
	ns    *Namespace // kindIO: the namespace of req

	// Outcome, set by the completion goroutine.
	status nvmeof.Status
	result uint64
	done   chan struct{} // kindSync: signalled when complete
}

// slot is a command slot of a queue.
type slot = rdmaq.HostSlot[command]

// rdmaQueue is one NVMe queue pair (admin or I/O) on an rdmaq.HostQueue.
// Submitters take a slot, build the capsule in it and post it; the
// queue's completion goroutine matches responses to slots by CID and
// completes them. Its entries are also the receives posted (HRQSIZE).
type rdmaQueue struct {
	queueBase
	hq  *rdmaq.HostQueue[command]
	aer *slot // admin queue: the slot reserved for the AER
}

var _ hostQueue = (*rdmaQueue)(nil)

// newRDMAQueue allocates a queue's resources: nslots command slots (the
// last one reserved for the AER when aer is set), entries receive buffers,
// and a fast-registration key of fmrLen bytes per slot.
func newRDMAQueue(c *Controller, qid uint16, nslots, entries, fmrLen int, aer bool) (*rdmaQueue, error) {
	q := &rdmaQueue{queueBase: queueBase{c: c, qid: qid, entries: entries}}
	pools := []rdmaq.HostPool{{Slots: nslots, SendLen: capStride}}
	if aer {
		pools = []rdmaq.HostPool{{Slots: nslots - 1, SendLen: capStride}, {Slots: 1, SendLen: capStride, NoTimeout: true}}
	}
	hq, err := rdmaq.NewHostQueue(rdmaq.HostConfig{
		Provider: c.prov, PD: c.pd, Pools: pools, Recvs: entries, RecvLen: nvmeof.CQESize,
		FastReg: fmrLen, SendWRs: nslots + 1, QPContext: q,
		ReqErr: func(err error) error {
			if errors.Is(err, blockdev.ErrClosed) {
				return err
			}
			return &connLost{err: err}
		},
	}, q)
	if err != nil {
		return nil, fmt.Errorf("queue %d: %w", qid, err)
	}
	q.hq = hq
	for i := range hq.Slots() {
		s := hq.Slot(i)
		b := s.Buf()
		s.S.cid = uint16(i)
		s.S.sqe = nvmeof.SQE(b[:nvmeof.SQESize:nvmeof.SQESize])
		s.S.extra = b[nvmeof.SQESize:capStride:capStride]
		s.S.done = make(chan struct{}, 1)
	}
	if aer {
		if q.aer, err = hq.Acquire(nil, 1); err != nil {
			hq.Close(blockdev.ErrClosed)
			return nil, fmt.Errorf("queue %d: reserving the AER slot: %w", qid, err)
		}
	}
	return q, nil
}

// keyedSGL is the descriptor of a buffer the host exposes under a key:
// with Invalidate (the target invalidates the key with its Send with
// Invalidate), unless the provider cannot have its keys invalidated by
// the peer (rdma.Caps.NoRemoteInvalidate: verbs over RoCE, whose emulated
// fast-registration keys are user MRs; the receive would fail with
// remote invalid request): then plain keyed, and the key is invalidated
// locally once the response came.
func (q *rdmaQueue) keyedSGL() uint8 {
	if rdma.CapsOf(q.c.prov).NoRemoteInvalidate {
		return nvmeof.SGLKeyed
	}
	return nvmeof.SGLKeyedInvalidate
}

// connect runs the RDMA connection manager exchange for the queue and starts
// its completion goroutine.
func (q *rdmaQueue) connect(ctx context.Context, addr string) error {
	pd := make([]byte, nvmeof.CMRequestSize)
	hsq := q.entries - 1
	nvmeof.CMRequest(pd).Encode(&nvmeof.CMRequestFields{RecFmt: nvmeof.CMRecFmt, QID: q.qid, HRQSize: uint16(q.entries), HSQSize: uint16(hsq)})
	reply, err := q.hq.Connect(ctx, addr, rdma.ConnParam{PrivateData: pd})
	if err != nil {
		var rej *rdma.RejectError
		if errors.As(err, &rej) {
			re := &RejectError{Addr: addr, QID: q.qid, Err: err}
			if f, perr := nvmeof.ParseCMReject(rej.PrivateData); perr == nil {
				re.Status = f.Status
			}
			return re
		}
		return err
	}
	acc, err := nvmeof.ParseCMAccept(reply)
	if err != nil {
		q.hq.QP().Disconnect()
		return fmt.Errorf("queue %d: bad accept private data from %s: %w", q.qid, addr, err)
	}
	q.c.log.Debug("nvme host: queue connected", "qid", q.qid, "addr", addr, "entries", q.entries, "crqsize", acc.CRQSize)
	q.hq.Start()
	return nil
}

// fail moves the queue to the dead state with reason err and disconnects its
// QP; the completion goroutine then completes every command in flight with
// the error. The first reason wins.
func (q *rdmaQueue) fail(err error) { q.hq.Fail(err) }

// Failed implements rdmaq.HostHandler: a queue lost for another reason
// than Close fails the controller.
func (q *rdmaQueue) Failed(err error) {
	if !errors.Is(err, blockdev.ErrClosed) {
		q.c.queueFailed(q, err)
	}
}

// acquire takes a free slot, waiting for one; it fails when the queue is
// dead or ctx (which may be nil) is done.
func (q *rdmaQueue) acquire(ctx context.Context) (*slot, error) { return q.hq.Acquire(ctx, 0) }

// putFree returns a slot the caller owns to the free list.
func (q *rdmaQueue) putFree(s *slot) {
	s.S.req = nil
	q.hq.Put(s)
}

// post hands a prepared slot (its capsule n bytes of its buffer, then
// data) to the completion goroutine and posts it. On error the slot is the
// caller's again, unless the queue died meanwhile and completed it (then
// post returns nil: the completion was delivered).
func (q *rdmaQueue) post(s *slot, n int, data rdma.SGE) error {
	q.hq.Prepare(s, n, data)
	if err := q.hq.Post(s); err != nil {
		return fmt.Errorf("queue %d: %w", q.qid, err)
	}
	return nil
}

// Recv implements rdmaq.HostHandler: a response capsule.
func (q *rdmaQueue) Recv(m rdmaq.Msg) error {
	if m.Len < nvmeof.CQESize {
		return fmt.Errorf("queue %d: response capsule of %d bytes", q.qid, m.Len)
	}
	cqe := nvmeof.CQE(m.Head[:nvmeof.CQESize])
	cid, st, res := cqe.CID(), cqe.Status(), cqe.Result()
	if int(cid) >= len(q.hq.Slots()) || !q.hq.Outstanding(q.hq.Slot(int(cid))) {
		return fmt.Errorf("queue %d: completion for command %d, which is not outstanding", q.qid, cid)
	}
	s := q.hq.Slot(int(cid))
	if m.WithInv && !q.hq.Invalidated(s, m.Invalidated) {
		return fmt.Errorf("queue %d: the target invalidated key %#x with the completion of command %d, which exposed no such key",
			q.qid, m.Invalidated, cid)
	}
	s.S.status, s.S.result = st, res
	q.hq.Respond(s)
	return nil
}

// Sent implements rdmaq.HostHandler (the engine tracks the slots).
func (q *rdmaQueue) Sent(*slot) {}

// Complete implements rdmaq.HostHandler: deliver a finished command.
func (q *rdmaQueue) Complete(s *slot) {
	x := &s.S
	switch x.kind {
	case kindIO:
		r, ns, name, st, err := x.req, x.ns, x.name, x.status, s.Err
		q.putFree(s)
		completeIO(r, ns, name, q.qid, st, err)
	case kindSync:
		x.done <- struct{}{}
	case kindAER:
		q.c.onAER(x.status, uint32(x.result), s.Err)
	}
}

// overdue reports a command in flight for longer than d, if any.
func (q *rdmaQueue) overdue(now int64, d time.Duration) (uint16, bool) {
	if s := q.hq.Overdue(now, d); s != nil {
		return s.S.cid, true
	}
	return 0, false
}

// exec runs one command synchronously: encode fills the SQE (the CID is set
// afterwards) given the data pointer for data, which is registered for the
// duration of the command. dir says which way data moves.
func (q *rdmaQueue) exec(ctx context.Context, name string, data []byte, dir nvmeof.Direction, encode func(sqe nvmeof.SQE, dptr nvmeof.SGLFields)) (uint64, error) {
	s, err := q.acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("nvme %s: %w", name, err)
	}
	x := &s.S
	var tmp rdma.MR
	var dptr nvmeof.SGLFields
	if len(data) > 0 {
		if tmp, err = q.c.pd.RegisterMemory(data, rdma.AccessLocalWrite); err != nil {
			q.putFree(s)
			return 0, fmt.Errorf("nvme %s: registering %d bytes: %w", name, len(data), err)
		}
		defer tmp.Deregister()
		access := rdma.AccessRemoteRead
		if dir != nvmeof.DirHostToCtrl {
			access = rdma.AccessLocalWrite | rdma.AccessRemoteWrite
		}
		rkey, va, err := q.hq.Map(s, tmp, 0, len(data), access)
		if err != nil {
			q.putFree(s)
			return 0, fmt.Errorf("nvme %s: %w", name, err)
		}
		dptr = nvmeof.SGLFields{Identifier: q.keyedSGL(), Address: va, Length: uint32(len(data)), Key: rkey}
	}
	encode(x.sqe, dptr)
	if len(data) == 0 {
		// No data: a zero-length keyed descriptor, as Linux
		// nvme_rdma_set_sg_null; nvmet refuses a zeroed DPTR.
		x.sqe.DPTR().Encode(&nullSGL)
	}
	x.sqe.SetCID(x.cid)
	x.kind, x.name = kindSync, name
	if err := q.post(s, nvmeof.SQESize, rdma.SGE{}); err != nil {
		q.putFree(s) // post failed: the slot is ours again
		return 0, fmt.Errorf("nvme %s: %w", name, err)
	}
	waitSync(ctx, q, x)
	res, st, terr := x.result, x.status, s.Err
	q.putFree(s)
	return syncResult(q.qid, name, res, st, terr)
}

// close tears the queue down: disconnect, wait for the completion goroutine
// (which completes what was in flight with ErrClosed), free everything.
func (q *rdmaQueue) close() { q.hq.Close(blockdev.ErrClosed) }

// postAER posts the Asynchronous Event Request in its reserved slot.
func (q *rdmaQueue) postAER() error {
	s := q.aer
	encodeAER(&s.S, nullSGL)
	if err := q.post(s, nvmeof.SQESize, rdma.SGE{}); err != nil {
		return fmt.Errorf("posting the asynchronous event request: %w", err)
	}
	return nil
}

// submit implements hostQueue: the data of a read or a large write is
// exposed under the slot's key, a small write goes in the capsule.
func (q *rdmaQueue) submit(ns *Namespace, r *blockdev.Request, buf *rdmaq.Buffer) error {
	s, err := q.acquire(nil)
	if err != nil {
		return err
	}
	x := &s.S
	x.kind, x.req, x.ns, x.name = kindIO, r, ns, opName(r.Op)
	capsule := nvmeof.SQESize
	var data rdma.SGE
	switch r.Op {
	case blockdev.OpRead, blockdev.OpWrite:
		var dptr nvmeof.SGLFields
		access := rdma.AccessLocalWrite | rdma.AccessRemoteWrite
		if r.Op == blockdev.OpWrite {
			access = rdma.AccessRemoteRead
		}
		if r.Op == blockdev.OpWrite && r.Length <= q.inCapsule {
			dptr = nvmeof.SGLFields{Identifier: nvmeof.SGLInCapsule, Address: 0, Length: uint32(r.Length)}
			data = rdma.SGE{MR: buf.MR(), Offset: r.BufOff, Length: r.Length}
		} else {
			rkey, va, err := q.hq.Map(s, buf.MR(), r.BufOff, r.Length, access)
			if err != nil {
				q.putFree(s)
				return fmt.Errorf("nvme %s: mapping the buffer: %w", x.name, err)
			}
			dptr = nvmeof.SGLFields{Identifier: q.keyedSGL(), Address: va, Length: uint32(r.Length), Key: rkey}
		}
		ns.encodeRW(x, r, dptr)
	case blockdev.OpFlush:
		ns.encodeFlush(x, nullSGL)
	case blockdev.OpWriteZeroes:
		ns.encodeWriteZeroes(x, r, nullSGL)
	case blockdev.OpDiscard:
		ns.putRange(x, r)
		var dptr nvmeof.SGLFields
		if q.inCapsule >= nvmeof.DSMRangeSize {
			// The range follows the SQE in the slot's buffer.
			dptr = nvmeof.SGLFields{Identifier: nvmeof.SGLInCapsule, Length: nvmeof.DSMRangeSize}
			capsule += nvmeof.DSMRangeSize
		} else {
			rkey, va, err := q.hq.MapBuf(s, nvmeof.SQESize, nvmeof.DSMRangeSize, rdma.AccessRemoteRead)
			if err != nil {
				q.putFree(s)
				return fmt.Errorf("nvme %s: mapping the range: %w", x.name, err)
			}
			dptr = nvmeof.SGLFields{Identifier: q.keyedSGL(), Address: va, Length: nvmeof.DSMRangeSize, Key: rkey}
		}
		ns.encodeDSM(x, dptr)
	}
	r.Issued = time.Now()
	if err := q.post(s, capsule, data); err != nil {
		q.putFree(s) // post failed: the slot is ours again
		return err
	}
	return nil
}
