package scsi

import (
	"errors"

	"github.com/rdisk/rdisk/backstore"
)

// execute runs c on lu for session s, in SAM-5 order: unit attention,
// the asymmetric access state of the session's port, CDB decoding,
// reservation conflicts, the task set (task attributes and
// aborts), then the command.
func (lu *LU) execute(s *Session, c *Command) {
	d, b, it, pass, ok := lu.begin(s, c)
	if !ok {
		return
	}
	if pass != passAborted && !c.aborted() {
		d.exec(lu, c, b, it)
	}
	lu.end(c, pass)
}

// begin runs the checks of execute up to the command itself and enters
// the task set; ok false means c is complete (it failed a check) and not
// in the task set. Otherwise end must follow, once c is done.
func (lu *LU) begin(s *Session, c *Command) (d *cmdDesc, b cdb, it *itl, pass gatePass, ok bool) {
	c.lu = lu
	it = lu.itlFor(s)
	switch c.CDB[0] {
	case OpInquiry, OpReportLUNs, OpRequestSense:
		// These report no unit attention (REQUEST SENSE returns it as
		// its data).
	default:
		if asc, ua := it.takeUA(); ua {
			c.fail(senseInfo{key: KeyUnitAttention, asc: asc})
			return
		}
	}
	if si, okALUA := s.aluaCheck(c.CDB); !okALUA {
		c.fail(si)
		return
	}
	d, serr := lu.cmds.lookup(c.CDB)
	if d == nil {
		c.fail(serr)
		return
	}
	b = cdb(c.CDB[:d.cdbLen])
	if b.control()&0x04 != 0 { // NACA: ACA is not supported
		c.fail(invalidCDB(d.cdbLen-1, 2))
		return
	}
	if c.Attr == AttrACA {
		c.fail(senseInfo{key: KeyIllegalRequest, asc: ASCInvalidMessageError})
		return
	}
	if lu.pr.active.Load() && lu.conflicts(s, d, b) {
		c.Status = StatusReservationConflict
		return
	}
	lu.tasks.add(c)
	return d, b, it, lu.tasks.gate.enter(c), true
}

// end leaves the task set after begin and the command: an aborted command
// completes with TASK ABORTED (or silently, Aborted).
func (lu *LU) end(c *Command, pass gatePass) {
	lu.tasks.gate.leave(pass)
	mode := c.abort.Load()
	lu.tasks.remove(c)
	if mode != 0 {
		c.Release()
		c.Status = StatusTaskAborted
		c.SenseLen = 0
		c.DataInLen = 0
		c.xfer = 0
		c.Aborted = mode == abortSilent
	}
}

// inRange reports whether nlb blocks from lba lie inside the LU. A range of
// zero blocks may start at the capacity (UNMAP of 0 blocks at the end of
// the LU is valid); any LBA beyond it is out of range.
func (lu *LU) inRange(lba, nlb uint64) bool {
	n := lu.blocks.Load()
	return lba <= n && nlb <= n-lba
}

// ioSense maps a backstore error to sense data. write selects the medium
// error of a write (WRITE ERROR) or a read (UNRECOVERED READ ERROR); lba is
// reported in the INFORMATION field of medium errors.
func (lu *LU) ioSense(err error, write bool, lba uint64) senseInfo {
	var re *backstore.RangeError
	switch {
	case errors.As(err, &re) && re.OutOfRange():
		return senseLBAOutOfRange
	case errors.As(err, &re):
		return invalidCDB(0, -1)
	case errors.Is(err, backstore.ErrFenced):
		// This gateway lost the store: TARGET PORT IN UNAVAILABLE STATE,
		// the LIO/tcmu-runner way of telling a multipath host to go on
		// through another gateway (tcmu-runner's TCMU_STS_FENCED answers
		// NOT READY too, with 04h/0Bh; 04h/0Ch says the port will not
		// serve the LU at all, which is what a fenced gateway is).
		return senseInfo{key: KeyNotReady, asc: ASCALUAUnavailable}
	case errors.Is(err, backstore.ErrTimeout):
		// tcmu-runner's tcmu_sts_to_scsi answers TCMU_STS_TIMEOUT (the rbd
		// handler's -ETIMEDOUT) with BUSY status so the host retries.
		return senseInfo{busy: true}
	case errors.Is(err, backstore.ErrNoSpace):
		return senseInfo{key: KeyDataProtect, asc: ASCSpaceAllocationFailedWP}
	case errors.Is(err, backstore.ErrReadOnly):
		return senseInfo{key: KeyDataProtect, asc: ASCWriteProtected}
	case errors.Is(err, backstore.ErrUnsupported):
		return senseInfo{key: KeyIllegalRequest, asc: ASCInvalidCommandOpcode}
	case errors.Is(err, backstore.ErrClosed):
		return senseInfo{key: KeyNotReady, asc: ASCLUNotReady}
	case errors.Is(err, backstore.ErrBufferAlignment):
		return senseInternalFailed
	case write:
		return senseInfo{key: KeyMediumError, asc: ASCWriteError, info: lba, infoValid: true}
	default:
		return senseInfo{key: KeyMediumError, asc: ASCUnrecoveredReadError, info: lba, infoValid: true}
	}
}

// writeFlags returns the backstore flags of a write with CDB byte 1 flags:
// FUA when the FUA bit is set or the write cache is disabled.
func (lu *LU) writeFlags(flags uint8) backstore.WriteFlags {
	if flags&flagFUA != 0 || lu.mode.Load()&modeWCE == 0 {
		return backstore.FUA
	}
	return 0
}
