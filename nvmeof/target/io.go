package target

import (
	"bytes"
	"errors"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/nvmeof"
)

// io executes an NVM I/O command.
func (c *controller) io(q *sq, r *request, sqe nvmeof.SQE) {
	if r.kind == nvmeof.KindFlush && r.nsid == nvmeof.NSIDAll {
		c.flushAll()
		return
	}
	n := r.ns // found by begin
	if n == nil {
		r.status, r.errLoc = nvmeof.StatusInvalidNamespace.WithDNR(), nvmeof.OffsetNSID
		return
	}
	disk := n.cfg.Disk
	_, async := disk.(backstore.AsyncDisk)
	async = async && !r.noAsync
	switch r.kind {
	case nvmeof.KindFlush:
		if async {
			r.prepareAsync(backstore.AsyncFlush, nil, 0, 0, 0)
			return
		}
		if err := disk.Flush(); err != nil {
			r.status = ioStatus(err, true)
		}
	case nvmeof.KindRead, nvmeof.KindWrite, nvmeof.KindCompare:
		cmd := sqe.RW()
		off, length, ok := c.rwRange(r, n, cmd)
		if !ok {
			return
		}
		r.ioLen = length
		switch r.kind {
		case nvmeof.KindRead:
			r.outLen = length
			if async {
				// A buffered file answers from the page cache at once on the
				// queue goroutine; Start only what that declines (backstore's
				// AsyncDisk doc).
				if nw, ok := disk.(backstore.NoWaitReader); ok && !r.onWorker {
					done, err := nw.ReadAtNoWait(r.xfer[:length], off)
					if err != nil {
						r.status = ioStatus(err, false)
						return
					}
					if done {
						return
					}
				}
				r.prepareAsync(backstore.AsyncRead, r.xfer[:length], off, 0, 0)
				return
			}
			if v, ok := disk.(backstore.Viewer); ok && r.views {
				k, err := v.ViewAt(r.segs[:], off, length)
				if err == nil {
					r.nseg = k
					return
				}
				if !errors.Is(err, backstore.ErrUnsupported) {
					r.status = ioStatus(err, false)
					return
				}
			}
			if nw, ok := disk.(backstore.NoWaitReader); ok && !r.onWorker {
				// On the queue goroutine: from the page cache, or on a
				// worker (see mayBlock).
				done, err := nw.ReadAtNoWait(r.xfer[:length], off)
				if err != nil {
					r.status = ioStatus(err, false)
				} else if !done {
					r.wantWorker = true
				}
				return
			}
			if err := disk.ReadAt(r.xfer[:length], off); err != nil {
				r.status = ioStatus(err, false)
				return
			}
		case nvmeof.KindWrite:
			var flags backstore.WriteFlags
			if cmd.FUA() || !c.writeCache() {
				flags = backstore.FUA
			}
			if p := r.placer; p != nil {
				// The data is in the disk already (placeWrite decided
				// the same range from the same command and namespace).
				r.placer = nil
				if r.place.Off != off || r.place.Len != length {
					p.Unplace(r.place)
					r.status = nvmeof.StatusInternal
					return
				}
				if err := p.Placed(r.place, flags); err != nil {
					r.status = ioStatus(err, true)
				}
				return
			}
			if async {
				r.prepareAsync(backstore.AsyncWrite, r.xfer[:length], off, 0, flags)
				return
			}
			if err := disk.WriteAt(r.xfer[:length], off, flags); err != nil {
				r.status = ioStatus(err, true)
			}
		case nvmeof.KindCompare:
			c.compare(r, disk, off, length)
		}
	case nvmeof.KindWriteZeroes:
		cmd := sqe.RW()
		if err := nvmeof.CheckLBARange(cmd.SLBA(), cmd.Blocks(), n.nsze); err != nil {
			r.fail(asCommandError(err))
			r.lba = cmd.SLBA()
			return
		}
		off, length := int64(cmd.SLBA())<<n.lbads, int64(cmd.Blocks())<<n.lbads
		var flags backstore.WriteFlags
		if cmd.FUA() || !c.writeCache() {
			flags = backstore.FUA
		}
		_, discards := disk.(backstore.Discarder)
		deallocate := discards && cmd.DEAC() && backstore.TraitsOf(disk).ZeroesAfterDiscard
		if async {
			op := backstore.AsyncWriteZeroes
			if deallocate {
				op = backstore.AsyncDiscard
			}
			r.prepareAsync(op, nil, off, length, flags)
			return
		}
		var err error
		if deallocate {
			err = disk.(backstore.Discarder).Discard(off, length)
		} else {
			err = writeZeroes(q, disk, r, off, length, flags)
		}
		if err != nil {
			r.status = ioStatus(err, true)
		}
	case nvmeof.KindDatasetManagement:
		if async {
			c.dsmAsync(r, n, sqe.DSM())
			return
		}
		c.dsm(r, n, sqe.DSM())
	default:
		r.status, r.errLoc = nvmeof.StatusInvalidOpcode.WithDNR(), nvmeof.OffsetOpcode
	}
}

func (c *controller) writeCache() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wce
}

// rwRange validates a Read, Write or Compare and returns its byte range.
func (c *controller) rwRange(r *request, n *Namespace, cmd nvmeof.RWCommand) (int64, int, bool) {
	r.lba = cmd.SLBA()
	if err := nvmeof.CheckLBARange(cmd.SLBA(), cmd.Blocks(), n.nsze); err != nil {
		r.fail(asCommandError(err))
		return 0, 0, false
	}
	length := uint64(cmd.Blocks()) << n.lbads
	have := len(r.xfer)
	if r.placer != nil {
		have = r.place.Len // the data is in the disk, not in xfer
	}
	if err := nvmeof.CheckTransferLen(uint32(r.xferLen), length); err != nil || length > uint64(have) {
		if err == nil {
			r.status, r.errLoc = nvmeof.StatusSGLInvalidDataLength.WithDNR(), offDPTR
		} else {
			r.fail(asCommandError(err))
		}
		return 0, 0, false
	}
	return int64(cmd.SLBA()) << n.lbads, int(length), true
}

// placeWrite decides, before the data of the Write in r is fetched,
// whether it can be placed: fetched straight into the disk's memory
// (backstore.Placer, a RAM disk) instead of into r's buffer, then copied
// by WriteAt. Whatever io and run would decide before writing is decided
// here, from what they decide it from, so that the placed write ends as
// the copied one would: an I/O command on a namespace (begin found it and
// checked the queue, the controller, authentication and the ANA state;
// this target has no reservations), a Write (not Compare or Dataset
// Management; fused commands never begin: ParseCommand refuses them), its
// LBA range inside the namespace and an SGL of exactly its blocks
// (rwRange), a disk that io writes synchronously (not an AsyncDisk), and
// the disk's PlaceAt accepting the range (writable, open, in at most
// len(r.segs) pieces). On success r.segs[:r.nseg] is the memory to fetch
// into and io finishes the write; otherwise nothing changed and the
// transport fetches into a buffer, io deciding the status as before.
// Called on the queue goroutine after decode planned a buffer.
func (q *sq) placeWrite(r *request) bool {
	n := r.ns
	if r.kind != nvmeof.KindWrite || r.dir != nvmeof.DirHostToCtrl || n == nil || q.qid == 0 || r.status != nvmeof.StatusSuccess {
		return false
	}
	disk := n.cfg.Disk
	p, ok := disk.(backstore.Placer)
	if !ok {
		return false
	}
	if _, async := disk.(backstore.AsyncDisk); async {
		return false
	}
	cmd := nvmeof.SQE(r.sqe[:]).RW()
	if nvmeof.CheckLBARange(cmd.SLBA(), cmd.Blocks(), n.nsze) != nil {
		return false
	}
	length := uint64(cmd.Blocks()) << n.lbads
	if nvmeof.CheckTransferLen(uint32(r.xferLen), length) != nil {
		return false
	}
	pl, err := p.PlaceAt(r.segs[:], int64(cmd.SLBA())<<n.lbads, int(length))
	if err != nil {
		return false // refused (read-only, closed) or too many pieces: io reports it after the copy
	}
	r.placer, r.place, r.nseg = p, pl, pl.Segs
	return true
}

// writeZeroes writes zeroes with the disk's own support, else from a zeroed
// buffer.
func writeZeroes(q *sq, disk backstore.Disk, r *request, off, length int64, flags backstore.WriteFlags) error {
	if z, ok := disk.(backstore.ZeroWriter); ok {
		err := z.WriteZeroes(off, length, flags)
		if !errors.Is(err, backstore.ErrUnsupported) {
			return err
		}
	}
	// The request's data buffer carries no host data for Write Zeroes.
	buf, err := q.tr.buffer(r)
	if err != nil {
		return err
	}
	clear(buf)
	for length > 0 {
		n := min(length, int64(len(buf)))
		if err := disk.WriteAt(buf[:n], off, flags); err != nil {
			return err
		}
		off += n
		length -= n
	}
	return nil
}

func (c *controller) compare(r *request, disk backstore.Disk, off int64, length int) {
	buf := make([]byte, length) // Compare is rare: no pool for it
	if err := disk.ReadAt(buf, off); err != nil {
		r.status = ioStatus(err, false)
		return
	}
	if !bytes.Equal(buf, r.xfer[:length]) {
		r.status = nvmeof.StatusCompareFailure.WithDNR()
	}
}

func (c *controller) dsm(r *request, n *Namespace, cmd nvmeof.DSMCommand) {
	if !cmd.Deallocate() {
		return // integral read/write hints are advisory
	}
	nr := cmd.Ranges()
	if len(r.xfer) < nr*nvmeof.DSMRangeSize {
		r.status, r.errLoc = nvmeof.StatusSGLInvalidDataLength.WithDNR(), offDPTR
		return
	}
	d, ok := n.cfg.Disk.(backstore.Discarder)
	for i := 0; i < nr; i++ {
		rg, err := nvmeof.DSMRangeAt(r.xfer, i)
		if err != nil {
			r.status, r.errLoc = nvmeof.StatusSGLInvalidDataLength.WithDNR(), offDPTR
			return
		}
		if rg.Length() == 0 {
			continue
		}
		if err := nvmeof.CheckLBARange(rg.SLBA(), rg.Length(), n.nsze); err != nil {
			r.fail(asCommandError(err))
			r.errLoc = nvmeof.ParamErrorLocationNone
			r.lba = rg.SLBA()
			return
		}
		if !ok {
			continue // deallocation is advisory
		}
		if err := d.Discard(int64(rg.SLBA())<<n.lbads, int64(rg.Length())<<n.lbads); err != nil && !errors.Is(err, backstore.ErrUnsupported) {
			r.status = ioStatus(err, true)
			return
		}
	}
}

// ioStatus maps a backstore error to an NVMe status.
func ioStatus(err error, write bool) nvmeof.Status {
	var re *backstore.RangeError
	switch {
	case errors.As(err, &re):
		return nvmeof.StatusLBAOutOfRange.WithDNR()
	case errors.Is(err, backstore.ErrReadOnly):
		return nvmeof.StatusNamespaceWriteProtected.WithDNR()
	case errors.Is(err, backstore.ErrClosed):
		return nvmeof.StatusNamespaceNotReady
	case errors.Is(err, backstore.ErrNoSpace):
		// Linux nvme_error_status: BLK_STS_NOSPC, ENOSPC to the writer;
		// retrying cannot help.
		return nvmeof.StatusCapacityExceeded.WithDNR()
	case errors.Is(err, backstore.ErrTimeout):
		// Command Interrupted without DNR: Linux retries it
		// (nvme_decide_disposition RETRY, up to nvme_max_retries).
		return nvmeof.StatusCommandInterrupted
	case errors.Is(err, backstore.ErrFenced):
		// A path related status without DNR: Linux multipath fails the
		// request over to another path (nvme_is_path_error: SCT 3h,
		// FAILOVER), where another gateway holds the store.
		return nvmeof.StatusInternalPathError
	case write:
		return nvmeof.StatusWriteFault
	}
	return nvmeof.StatusUnrecoveredReadError
}
