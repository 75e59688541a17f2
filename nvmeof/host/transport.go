package host

import (
	"context"
	"fmt"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/rdma/rdmaq"
)

// Transport names an NVMe-oF transport binding.
type Transport string

// The transports the host speaks.
const (
	// TransportRDMA is NVMe/RDMA over an rdma.Provider (the default).
	TransportRDMA Transport = "rdma"
	// TransportTCP is NVMe/TCP over a plain TCP connection per queue.
	TransportTCP Transport = "tcp"
)

// orDefault maps the zero Transport to TransportRDMA.
func (t Transport) orDefault() Transport {
	if t == "" {
		return TransportRDMA
	}
	return t
}

// String returns "rdma" or "tcp".
func (t Transport) String() string { return string(t.orDefault()) }

// hostQueue is one NVMe queue pair (admin or I/O) on a transport: the
// controller, the admin commands and Namespace.Submit run on it without
// knowing which. Implementations: rdmaQueue (queue.go), tcpQueue (tcp.go).
// All methods are safe for concurrent use.
type hostQueue interface {
	// base returns the transport-neutral queue state.
	base() *queueBase
	// connect establishes the queue's connection (RDMA CM exchange, or
	// TCP connect and ICReq/ICResp) and starts its receive goroutine.
	connect(ctx context.Context, addr string) error
	// exec runs one command synchronously: encode fills the SQE (the CID
	// is set afterwards) given the data pointer for data, which the
	// transport makes reachable for the duration of the command. dir says
	// which way data moves.
	exec(ctx context.Context, name string, data []byte, dir nvmeof.Direction, encode func(sqe nvmeof.SQE, dptr nvmeof.SGLFields)) (uint64, error)
	// submit builds the command of a checked request in a free slot
	// (waiting for one) and sends it; buf is r.Buf for reads and writes.
	// It does not allocate.
	submit(ns *Namespace, r *blockdev.Request, buf *rdmaq.Buffer) error
	// postAER sends the Asynchronous Event Request in the admin queue's
	// reserved slot.
	postAER() error
	// overdue reports a command (other than the AER) in flight for longer
	// than d at now (UnixNano).
	overdue(now int64, d time.Duration) (cid uint16, ok bool)
	// fail moves the queue to the dead state with reason err and closes
	// its connection; everything in flight completes with the error. The
	// first reason wins.
	fail(err error)
	// close fails the queue with blockdev.ErrClosed, waits for its
	// goroutines (which complete what was in flight) and frees it.
	close()
}

// queueBase is what every transport's queue shares.
type queueBase struct {
	c       *Controller
	qid     uint16
	entries int // SQ entries, HSQSIZE+1
	// inCapsule is the most data a write may carry in the capsule (0:
	// none).
	inCapsule int
}

func (b *queueBase) base() *queueBase { return b }

// opName names an I/O command for errors (constant strings).
func opName(op blockdev.Op) string {
	switch op {
	case blockdev.OpRead:
		return "read"
	case blockdev.OpWrite:
		return "write"
	case blockdev.OpFlush:
		return "flush"
	case blockdev.OpWriteZeroes:
		return "write zeroes"
	case blockdev.OpDiscard:
		return "dataset management"
	}
	return "I/O"
}

// encodeRW fills x's SQE with the Read or Write of r, data at dptr.
func (ns *Namespace) encodeRW(x *command, r *blockdev.Request, dptr nvmeof.SGLFields) {
	f := nvmeof.RWFields{Opcode: nvmeof.IORead, CID: x.cid, NSID: ns.nsid, SLBA: uint64(r.Offset) >> ns.shift,
		NLB: uint16((r.Length >> ns.shift) - 1), DPTR: dptr}
	if r.Op == blockdev.OpWrite {
		f.Opcode = nvmeof.IOWrite
		if r.Flags&blockdev.FUA != 0 {
			f.Control = nvmeof.ControlFUA
		}
	}
	x.sqe.RW().Encode(&f)
}

// encodeFlush fills x's SQE with a Flush; null is the transport's
// descriptor of no data.
func (ns *Namespace) encodeFlush(x *command, null nvmeof.SGLFields) {
	x.sqe.Encode(&nvmeof.SQEFields{Opcode: nvmeof.IOFlush, Flags: nvmeof.FlagSGLMetaBuf, CID: x.cid, NSID: ns.nsid, DPTR: null})
}

// encodeWriteZeroes fills x's SQE with the Write Zeroes of r.
func (ns *Namespace) encodeWriteZeroes(x *command, r *blockdev.Request, null nvmeof.SGLFields) {
	x.sqe.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IOWriteZeroes, CID: x.cid, NSID: ns.nsid, SLBA: uint64(r.Offset) >> ns.shift,
		NLB: uint16((r.Length >> ns.shift) - 1), DPTR: null})
}

// putRange writes the Dataset Management range of discard r into the
// slot's extra bytes and returns it.
func (ns *Namespace) putRange(x *command, r *blockdev.Request) []byte {
	rng := x.extra[:nvmeof.DSMRangeSize]
	nvmeof.DSMRange(rng).Encode(&nvmeof.DSMRangeFields{Length: uint32(r.Length >> ns.shift), SLBA: uint64(r.Offset) >> ns.shift})
	return rng
}

// encodeDSM fills x's SQE with a deallocating Dataset Management of one
// range at dptr.
func (ns *Namespace) encodeDSM(x *command, dptr nvmeof.SGLFields) {
	x.sqe.DSM().Encode(&nvmeof.DSMFields{CID: x.cid, NSID: ns.nsid, NR: 0, Attributes: nvmeof.DSMDeallocate, DPTR: dptr})
}

// encodeAER fills x's SQE with an Asynchronous Event Request.
func encodeAER(x *command, null nvmeof.SGLFields) {
	x.sqe.Encode(&nvmeof.SQEFields{Opcode: nvmeof.AdminAsyncEvent, Flags: nvmeof.FlagSGLMetaBuf, CID: x.cid, DPTR: null})
	x.kind, x.name = kindAER, "asynchronous event request"
}

// waitSync waits for the synchronous command x posted on q: its completion,
// ctx or the command timeout (either of which fails the queue, after which
// the completion still comes, with the queue's error).
func waitSync(ctx context.Context, q hostQueue, x *command) {
	b := q.base()
	timeout := b.c.cfg.CommandTimeout
	t := time.NewTimer(timeout)
	defer t.Stop()
	var cdone <-chan struct{}
	if ctx != nil {
		cdone = ctx.Done()
	}
	select {
	case <-x.done:
	case <-cdone:
		q.fail(fmt.Errorf("nvme %s on queue %d: %w", x.name, b.qid, ctx.Err()))
		<-x.done
	case <-t.C:
		q.fail(fmt.Errorf("nvme %s on queue %d: no completion in %v: %w", x.name, b.qid, timeout, ErrTimeout))
		<-x.done
	}
}

// syncResult turns the outcome of a synchronous command into exec's
// results.
func syncResult(qid uint16, name string, res uint64, st nvmeof.Status, terr error) (uint64, error) {
	if terr != nil {
		return 0, fmt.Errorf("nvme %s: %w", name, terr)
	}
	if st != 0 {
		return res, &StatusError{Command: name, QID: qid, Status: st}
	}
	return res, nil
}

// completeIO delivers a finished I/O request: err is the transport error
// (nil when the command reached the controller), st its status.
//
// A path related status (SCT 3h) completes with a *blockdev.PathError, so
// that a multipath layer tries another path (Linux nvme_is_path_error:
// FAILOVER); an ANA status also records the state it tells and has the
// controller read the ANA log again (nvme_failover_req).
func completeIO(r *blockdev.Request, ns *Namespace, name string, qid uint16, st nvmeof.Status, err error) {
	switch {
	case err != nil:
		r.Err = err
	case st.SCT() == nvmeof.SCTPathError:
		a := pathAccess(st)
		if ns != nil && isANAStatus(st) {
			ns.access.Store(uint32(a))
			ns.c.kickANA()
		}
		r.Err = &blockdev.PathError{State: a, Err: &StatusError{Command: name, QID: qid, Status: st}}
	case st != 0:
		r.Err = &StatusError{Command: name, QID: qid, Status: st}
	default:
		r.Err = nil
	}
	r.Completed = time.Now()
	blockdev.Complete(r)
}
