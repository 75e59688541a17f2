package target

import (
	"errors"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/nvmeof"
)

// Commands on asynchronous disks (backstore.AsyncDisk, a Ceph RBD image
// through librbd's aio API): a Read, Write, Flush, Write Zeroes or
// Dataset Management (deallocate) is checked on the queue goroutine as
// for any disk (io.go), which fills the request's AsyncIO instead of
// calling the disk; run starts it with Start and returns, so a queue
// keeps its whole depth in flight without a worker per command. The disk
// calls Done on a goroutine of its own, which answers the command there
// (a read's data goes to the host, by RDMA Write or C2HData, after Done;
// a write's data was in before Start). Each request slot has its
// AsyncIO, its buffer list and its Done function, made once: nothing is
// allocated per command. The queue counts the commands started (sq.async)
// and its close waits for them, as it waits for its workers; Drain counts
// them as any command not yet answered.

// isAsync tells whether a command of kind starts on disk d asynchronously.
func isAsync(d backstore.Disk, kind nvmeof.CommandKind) bool {
	if _, ok := d.(backstore.AsyncDisk); !ok {
		return false
	}
	switch kind {
	case nvmeof.KindRead, nvmeof.KindWrite, nvmeof.KindFlush, nvmeof.KindWriteZeroes, nvmeof.KindDatasetManagement:
		return true
	}
	return false
}

// prepareAsync fills r's AsyncIO for run to start: buf for a read or a
// write, off and n for a discard or write-zeroes.
func (r *request) prepareAsync(op backstore.AsyncOp, buf []byte, off, n int64, flags backstore.WriteFlags) {
	r.aio.Op, r.aio.Off, r.aio.Len, r.aio.Flags, r.aio.Err = op, off, n, flags, nil
	r.aio.Bufs = nil
	if buf != nil {
		r.aioBufs[0] = buf
		r.aio.Bufs = r.aioBufs[:1]
	}
	r.aioStart = true
}

// dsmAsync checks every range of a deallocating Dataset Management, then
// prepares the discard of the first non-empty one (asyncDone starts the
// others in turn).
func (c *controller) dsmAsync(r *request, n *Namespace, cmd nvmeof.DSMCommand) {
	if !cmd.Deallocate() {
		return // integral read/write hints are advisory
	}
	nr := cmd.Ranges()
	if len(r.xfer) < nr*nvmeof.DSMRangeSize {
		r.status, r.errLoc = nvmeof.StatusSGLInvalidDataLength.WithDNR(), offDPTR
		return
	}
	for i := 0; i < nr; i++ {
		rg, err := nvmeof.DSMRangeAt(r.xfer, i)
		if err != nil {
			r.status, r.errLoc = nvmeof.StatusSGLInvalidDataLength.WithDNR(), offDPTR
			return
		}
		if err := nvmeof.CheckLBARange(rg.SLBA(), rg.Length(), n.nsze); rg.Length() != 0 && err != nil {
			r.fail(asCommandError(err))
			r.errLoc = nvmeof.ParamErrorLocationNone
			r.lba = rg.SLBA()
			return
		}
	}
	r.dsmNext = 0
	if r.nextRange() {
		r.aioStart = true
	}
}

// nextRange prepares the discard of the next non-empty range of r's
// Dataset Management and reports whether there was one.
func (r *request) nextRange() bool {
	n := r.ns
	nr := nvmeof.SQE(r.sqe[:]).DSM().Ranges()
	for r.dsmNext < nr {
		rg, err := nvmeof.DSMRangeAt(r.xfer, r.dsmNext)
		r.dsmNext++
		if err != nil || rg.Length() == 0 {
			continue
		}
		r.prepareAsync(backstore.AsyncDiscard, nil, int64(rg.SLBA())<<n.lbads, int64(rg.Length())<<n.lbads, 0)
		return true
	}
	return false
}

// startAsync starts the operation io prepared in r. The command counts
// in q.async until it is answered.
func (q *sq) startAsync(r *request) error {
	r.aioStart = false
	if r.aio.Done == nil {
		// Once per request slot: the slot's Done.
		r.aio.Done = func(*backstore.AsyncIO) { q.asyncDone(r) }
	}
	q.async.Add(1)
	return q.asyncStep(r)
}

// asyncStep starts r.aio on the namespace's disk. A refusal up front
// completes the command, but for what the synchronous path does
// otherwise: a deallocation the disk does not support is skipped (it is
// advisory), a Write Zeroes it cannot start runs its synchronous path on a
// worker.
func (q *sq) asyncStep(r *request) error {
	for {
		err := r.ns.cfg.Disk.(backstore.AsyncDisk).Start(&r.aio)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, backstore.ErrUnsupported) && r.kind == nvmeof.KindDatasetManagement:
			if r.nextRange() {
				continue
			}
			err = nil
		case errors.Is(err, backstore.ErrUnsupported) && r.kind == nvmeof.KindWriteZeroes:
			r.noAsync = true
			r.clearAsync()
			q.async.Done()
			q.toWorker(r)
			return nil
		}
		return q.asyncFinish(r, err)
	}
}

// asyncDone is the disk's Done for r, on the disk's goroutine.
func (q *sq) asyncDone(r *request) {
	err := r.aio.Err
	if r.kind == nvmeof.KindDatasetManagement && (err == nil || errors.Is(err, backstore.ErrUnsupported)) {
		err = nil
		if r.nextRange() {
			if err := q.asyncStep(r); err != nil {
				q.shutdown(reasonTransportError, err)
			}
			return
		}
	}
	if err := q.asyncFinish(r, err); err != nil {
		q.shutdown(reasonTransportError, err)
	}
}

// asyncFinish answers r, its operation ended with err.
func (q *sq) asyncFinish(r *request, err error) error {
	defer q.async.Done()
	if err != nil {
		r.status = ioStatus(err, r.aio.Op != backstore.AsyncRead)
	}
	r.batch = r.aio.Batch
	r.clearAsync()
	return q.respond(r)
}

// clearAsync forgets the buffers of r's operation.
func (r *request) clearAsync() {
	r.aioBufs[0] = nil
	r.aio.Bufs, r.aio.Err, r.aio.Batch = nil, nil, nil
}
