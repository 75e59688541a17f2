package scsi

// WRITE ATOMIC(16) (SBC-4 5.48) and READ DEFECT DATA(10/12) (SBC-4 5.11,
// 5.12).

// atomicLimits returns the MAXIMUM ATOMIC TRANSFER LENGTH, ATOMIC
// ALIGNMENT and ATOMIC TRANSFER LENGTH GRANULARITY the LU reports (all
// zero when WRITE ATOMIC is off).
func (lu *LU) atomicLimits() (maxLen, align, gran uint32) {
	maxLen = lu.cfg.AtomicTransferBlocks
	if maxLen == 0 {
		return 0, 0, 0
	}
	if lu.cfg.MaxTransferBlocks != 0 {
		maxLen = min(maxLen, lu.cfg.MaxTransferBlocks)
	}
	maxLen = min(maxLen, 0xffff) // the CDB's TRANSFER LENGTH is 16 bits
	align, gran = lu.cfg.AtomicAlignment, lu.cfg.AtomicGranularity
	if align == 0 {
		align = 1 << lu.cfg.PhysicalBlockExp
	}
	if gran == 0 {
		gran = 1 << lu.cfg.PhysicalBlockExp
	}
	return maxLen, align, gran
}

// execWriteAtomic: WRITE ATOMIC(16). The blocks are written by one disk
// write under an exclusive range lock, so no reader or writer of the range
// sees part of it; the fields are checked in LIO's order
// (sbc_check_atomic): ATOMIC BOUNDARY (no boundary is supported: MAXIMUM
// ATOMIC BOUNDARY SIZE is 0), TRANSFER LENGTH against the maximum and the
// granularity, the LBA against the alignment, then the range. The data-out
// must hold every block: an atomic write is never cut short.
func execWriteAtomic(lu *LU, c *Command, b cdb, it *itl) {
	lba := b.u64(2)
	nlb := uint32(b.u16(12))
	maxLen, align, gran := lu.atomicLimits()
	switch {
	case b[1]&flagProtectMask != 0:
		c.fail(invalidCDB(1, 7))
		return
	case b.u16(10) != 0:
		c.fail(invalidCDB(10, -1))
		return
	case nlb > maxLen || nlb%gran != 0:
		c.fail(invalidCDB(12, -1))
		return
	case lba%uint64(align) != 0:
		c.fail(invalidCDB(2, -1))
		return
	case !lu.inRange(lba, uint64(nlb)):
		c.fail(senseLBAOutOfRange)
		return
	}
	if nlb == 0 {
		return
	}
	if !lu.checkWritable(c) {
		return
	}
	data := lu.writeData(c, nlb)
	if uint64(len(data)) != c.need {
		c.fail(senseCommandIULen)
		return
	}
	lm := lu.ranges.lockExcl(c, lba, lba+uint64(nlb))
	if lm == lockNone {
		return
	}
	err := lu.disk.WriteAt(data, int64(lba<<lu.shift), lu.writeFlags(b[1]))
	lu.ranges.unlock(c, lm)
	if err != nil {
		c.fail(lu.ioSense(err, true, lba))
		return
	}
	c.xfer = uint64(len(data))
}

// execReadDefectData: READ DEFECT DATA(10/12). The LU has no defects: the
// header reports empty primary and grown lists (PLISTV and GLISTV as
// requested) in the requested address format; the reserved format 111b is
// refused.
func execReadDefectData(lu *LU, c *Command, b cdb, it *itl) {
	fmtOff := 2
	if b.op() == OpReadDefectData12 {
		fmtOff = 1
	}
	flags := b[fmtOff]
	if flags&0x07 == 0x07 {
		c.fail(invalidCDB(fmtOff, 2))
		return
	}
	var d [8]byte
	d[1] = flags & 0x1f // PLISTV, GLISTV, DEFECT LIST FORMAT; the lengths are 0
	if b.op() == OpReadDefectData12 {
		c.respond(d[:8], int(b.u32(6)))
		return
	}
	c.respond(d[:4], int(b.u16(7)))
}
