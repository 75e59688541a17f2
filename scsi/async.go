package scsi

import (
	"encoding/binary"

	"github.com/rdisk/rdisk/backstore"
)

// Commands on asynchronous disks (backstore.AsyncDisk: a Ceph RBD image, a
// file or block device on io_uring). READ and WRITE(6/10/12/16) and
// SYNCHRONIZE CACHE(10/16) are started with AsyncDisk.Start and complete
// on the disk's goroutine, and so does UNMAP, one AsyncDiscard per block
// descriptor in turn, so a transport keeps its whole queue depth in
// flight without a worker goroutine per command. The command keeps its
// place in the task set (task attributes, aborts, LUN RESET) and its
// range lock (COMPARE AND WRITE) until the disk is done, exactly as if
// Execute had been waiting for it.

// CanStart reports whether Start would take c: the LUN reaches an LU
// whose disk is a backstore.AsyncDisk and c is a READ, WRITE, SYNCHRONIZE
// CACHE or UNMAP that is not ORDERED. It looks at nothing else and
// changes nothing; transports ask it to decide where to run c (Start on
// their own goroutine, or Execute on a worker).
func (s *Session) CanStart(c *Command) bool {
	if len(c.CDB) == 0 || c.Attr == AttrOrdered || s.closed.Load() {
		return false
	}
	switch c.CDB[0] {
	case OpRead6, OpRead10, OpRead12, OpRead16, OpWrite6, OpWrite10, OpWrite12, OpWrite16, OpSyncCache10, OpSyncCache16, OpUnmap:
	default:
		return false
	}
	e := s.lookup(c.LUN)
	return e != nil && e.lu.async != nil
}

// Start runs c as Execute does, but without waiting for the disk: when
// CanStart(c), it returns true and calls c.Done exactly once with the
// results filled in, from the disk's goroutine once the I/O is done, or
// from Start itself when c completes at once (a unit attention, a bad
// field, an abort, a read ending inside a block). After Start returned
// true the caller must not touch c until Done. Done must be set. When c
// is not one to start (CanStart false, which may change between the calls
// when the session's LUN view changes), Start returns false and does
// nothing: run it with Execute.
//
// Start may wait, as Execute does, only behind other commands: an ORDERED
// command ahead of it in the task set, or a COMPARE AND WRITE of the same
// blocks; never for its own disk I/O.
func (s *Session) Start(c *Command) bool {
	if !s.CanStart(c) || c.Done == nil {
		return false
	}
	e := s.lookup(c.LUN)
	if e == nil {
		return false
	}
	lu := e.lu
	c.Release()
	c.reset()
	c.sess = s
	c.ro = e.ro
	d, b, it, pass, ok := lu.begin(s, c)
	if !ok {
		c.complete()
		return true
	}
	if pass == passAborted || c.aborted() || !lu.startIO(c, d, b, it, pass) {
		lu.end(c, pass)
		c.complete()
	}
	return true
}

// complete finishes a command run by Start and hands it back.
func (c *Command) complete() {
	if c.Status != StatusGood && c.lu != nil {
		c.lu.countError(c)
	}
	c.finish()
	c.Done(c)
}

// startIO checks c like the synchronous handler and starts its disk I/O.
// It returns false when c completed without I/O (a failed check, nothing
// to transfer, a read ending inside a block, which runs synchronously);
// true when the I/O was started and asyncDone will end c.
func (lu *LU) startIO(c *Command, d *cmdDesc, b cdb, it *itl, pass gatePass) bool {
	f := rwDecode(b)
	io := &c.aio
	io.Err, io.Len, io.Flags = nil, 0, 0
	var lm lockMode
	switch c.CDB[0] {
	case OpSyncCache10, OpSyncCache16:
		if !lu.inRange(f.lba, uint64(f.nlb)) {
			c.fail(senseLBAOutOfRange)
			return false
		}
		io.Op, io.Off, io.Bufs = backstore.AsyncFlush, 0, nil
		c.aioWrite = true
	case OpRead6, OpRead10, OpRead12, OpRead16:
		if !lu.checkRW(c, f, true) {
			return false
		}
		c.need = uint64(f.nlb) << lu.shift
		n := min(c.need, uint64(c.inLimit()))
		if n == 0 {
			return false
		}
		if n&uint64(lu.bs-1) != 0 {
			d.exec(lu, c, b, it) // a scratch block: rare, synchronous
			return false
		}
		lm = lu.ranges.lockShared(c, f.lba, f.lba+n>>lu.shift)
		if lm == lockNone {
			return false
		}
		c.aioBufs[0] = c.DataIn[:n]
		io.Op, io.Off, io.Bufs = backstore.AsyncRead, int64(f.lba<<lu.shift), c.aioBufs[:]
		c.aioWrite = false
	case OpUnmap:
		if b[1]&0x01 != 0 {
			c.fail(invalidCDB(1, 0)) // ANCHOR: ANC_SUP is clear
			return false
		}
		plen := int(b.u16(7))
		c.need = uint64(plen)
		if plen == 0 {
			return false
		}
		data := c.outData()
		list := data[:min(len(data), plen)]
		c.xfer = uint64(len(list))
		descs, si, ok := parseUnmap(list, lu.blocks.Load())
		if !ok {
			c.fail(si)
			return false
		}
		if !lu.checkWritable(c) {
			return false
		}
		lo, hi := descs.span()
		if lo == hi {
			return false
		}
		lm = lu.ranges.lockShared(c, lo, hi)
		if lm == lockNone {
			return false
		}
		c.aioUnmap = descs
		io.Op, io.Bufs = backstore.AsyncDiscard, nil
		c.nextDiscard() // span found a descriptor with blocks
		f.lba = uint64(io.Off) >> lu.shift
		c.aioWrite = true
	default: // WRITE(6/10/12/16)
		if !lu.checkRW(c, f, true) || !lu.checkWritable(c) {
			return false
		}
		data := lu.writeData(c, f.nlb)
		if len(data) == 0 {
			return false
		}
		lm = lu.ranges.lockShared(c, f.lba, f.lba+uint64(len(data))>>lu.shift)
		if lm == lockNone {
			return false
		}
		c.aioBufs[0] = data
		io.Op, io.Off, io.Bufs, io.Flags = backstore.AsyncWrite, int64(f.lba<<lu.shift), c.aioBufs[:], lu.writeFlags(f.flags)
		c.aioWrite = true
	}
	c.aioLock, c.aioLBA, c.aioPass = lm, f.lba, pass
	if io.Done == nil {
		io.Done = c.asyncDone // once per Command, not per I/O
	}
	if err := lu.async.Start(io); err != nil {
		c.aioUnmap = nil
		lu.ranges.unlock(c, lm)
		c.fail(lu.ioSense(err, c.aioWrite, f.lba))
		return false
	}
	return true
}

// asyncDone ends a command whose disk I/O completed (the disk's
// goroutine).
func (c *Command) asyncDone(io *backstore.AsyncIO) {
	lu := c.lu
	if io.Op == backstore.AsyncDiscard && io.Err == nil && c.nextDiscard() {
		// The next block descriptor, with the same io (the AsyncDisk
		// contract allows it from Done).
		c.aioLBA = uint64(io.Off) >> lu.shift
		err := lu.async.Start(io)
		if err == nil {
			return
		}
		io.Err = err
	}
	c.aioUnmap = nil
	lu.ranges.unlock(c, c.aioLock)
	switch {
	case io.Err != nil:
		c.fail(lu.ioSense(io.Err, c.aioWrite, c.aioLBA))
	case io.Op == backstore.AsyncRead:
		n := len(io.Bufs[0])
		c.DataInLen = n
		c.xfer = uint64(n)
	case io.Op == backstore.AsyncWrite:
		c.xfer = uint64(len(io.Bufs[0]))
	}
	c.aioBufs[0] = nil
	lu.end(c, c.aioPass)
	c.complete()
}

// nextDiscard points c.aio at the next UNMAP block descriptor with blocks
// and consumes it; false when none is left.
func (c *Command) nextDiscard() bool {
	for len(c.aioUnmap) >= 16 {
		d := c.aioUnmap[:16]
		c.aioUnmap = c.aioUnmap[16:]
		lba := binary.BigEndian.Uint64(d)
		n := int64(binary.BigEndian.Uint32(d[8:]))
		if n == 0 {
			continue
		}
		c.aio.Off, c.aio.Len = int64(lba<<c.lu.shift), n<<c.lu.shift
		return true
	}
	return false
}
