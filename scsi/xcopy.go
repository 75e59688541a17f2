package scsi

import (
	"bytes"
	"encoding/binary"
	"sync"
)

// EXTENDED COPY (LID1) and RECEIVE COPY RESULTS (SPC-4 6.4 and 6.18, the
// LID1 formats of SPC-3), as LIO's emulate_3pc: the copy manager copies
// blocks between LUs of the session's target (VMware's XCOPY offload,
// clones and Storage vMotion within one array) with block device to block
// device segment descriptors (02h) and identification CSCD descriptors
// (E4h) naming LUs by the NAA designator of their VPD page 83h. Only LUs
// the session sees (its LUN view) are found; a read-only mapping or a
// write-protected LU refuses to be a destination.
//
// The parameter list is checked whole before any block moves, in LIO's
// order (target_do_xcopy): descriptor list length, inline data, the
// parameter list length, the segment descriptors, then the CSCD
// descriptors. A CSCD that names no LU, an index beyond the CSCD list,
// a range outside its LU, and any failure while copying end the command
// with COPY ABORTED and COPY TARGET DEVICE NOT REACHABLE (0Dh/02h), the
// sense LIO returns so that hosts fall back to reading and writing
// themselves; LUs of different block sizes with NOT READY, LOGICAL UNIT
// COMMUNICATION FAILURE, as LIO.

// Copy manager limits reported by RECEIVE COPY RESULTS OPERATING
// PARAMETERS.
const (
	xcopyHeaderLen     = 16
	xcopyCSCDLen       = 32 // identification CSCD descriptor (E4h)
	xcopySegB2BLen     = 28 // block device to block device segment (02h)
	xcopyMaxCSCDs      = 2  // a source and a destination, as LIO
	xcopyMaxSegments   = 8
	xcopyMaxDescList   = 1024 // MAXIMUM DESCRIPTOR LIST LENGTH, as LIO
	xcopyMaxSegBlocks  = 0xffff
	xcopyStatusSlots   = 8 // copy statuses kept per I_T nexus
	xcopyMaxConcurrent = xcopyStatusSlots

	cscdIdentification = 0xe4
	segBlockToBlock    = 0x02

	rcrCopyStatus  = 0x00
	rcrOpParams    = 0x03
	rcrOpParamsLen = 44 + 2

	listIDHold     = 0 // LIST ID USAGE 00b: hold data, list ID valid
	listIDReserved = 1
	listIDDiscard  = 2 // 10b: no held data, list ID valid
	listIDNone     = 3 // 11b: list ID not valid (zero)
)

var senseCopyTargetUnreachable = senseInfo{key: KeyCopyAborted, asc: ASCCopyTargetNotReachable}

// xcopyParams is a parameter list validated by parseXCopy: views of its
// CSCD and segment descriptor lists.
type xcopyParams struct {
	listID    uint8
	usage     uint8
	cscds     []byte // n * xcopyCSCDLen
	segs      []byte // n * xcopySegB2BLen
	cscdCount int
}

func (p *xcopyParams) segments() int { return len(p.segs) / xcopySegB2BLen }

// cscd returns the NAA designator of CSCD descriptor i (validated by
// parseXCopy).
func (p *xcopyParams) cscd(i int) []byte {
	d := p.cscds[i*xcopyCSCDLen:]
	return d[8 : 8+int(d[7])]
}

// segment returns the CSCD indexes, block count and LBAs of segment i.
func (p *xcopyParams) segment(i int) (src, dst uint16, nlb uint32, srcLBA, dstLBA uint64) {
	d := p.segs[i*xcopySegB2BLen:]
	return binary.BigEndian.Uint16(d[4:]), binary.BigEndian.Uint16(d[6:]), uint32(binary.BigEndian.Uint16(d[10:])),
		binary.BigEndian.Uint64(d[12:]), binary.BigEndian.Uint64(d[20:])
}

// parseXCopy validates an EXTENDED COPY (LID1) parameter list of which the
// command carried list (the parameter list length bytes, or fewer when the
// data-out was short). It returns the sense data to fail the command with
// on error. It allocates nothing and never panics.
func parseXCopy(list []byte) (xcopyParams, senseInfo, bool) {
	var p xcopyParams
	if len(list) < xcopyHeaderLen {
		return p, senseParamListLen, false
	}
	p.listID = list[0]
	p.usage = list[1] >> 3 & 3
	tdll := int(binary.BigEndian.Uint16(list[2:]))
	sdll := uint64(binary.BigEndian.Uint32(list[8:]))
	inline := binary.BigEndian.Uint32(list[12:])
	if uint64(tdll)+sdll > xcopyMaxDescList {
		return p, senseParamListLen, false
	}
	if inline != 0 {
		return p, invalidParam(12, -1), false
	}
	if len(list) < xcopyHeaderLen+tdll+int(sdll) {
		return p, senseParamListLen, false
	}
	switch {
	case p.usage == listIDReserved:
		return p, invalidParam(1, 4), false
	case p.usage == listIDNone && p.listID != 0:
		return p, invalidParam(0, -1), false
	}
	// Segment descriptors first: they say which CSCDs are used.
	segs := list[xcopyHeaderLen+tdll : xcopyHeaderLen+tdll+int(sdll)]
	for off, n := 0, 0; off < len(segs); n++ {
		at := xcopyHeaderLen + tdll + off
		if n == xcopyMaxSegments {
			return p, senseInfo{key: KeyIllegalRequest, asc: ASCTooManySegmentDescriptors}, false
		}
		if len(segs)-off < 4 {
			return p, senseParamListLen, false
		}
		if segs[off] != segBlockToBlock {
			return p, senseInfo{key: KeyIllegalRequest, asc: ASCUnsupportedSegmentDescType}.fieldPointer(false, at, -1), false
		}
		if binary.BigEndian.Uint16(segs[off+2:]) != xcopySegB2BLen-4 {
			return p, invalidParam(at+2, -1), false
		}
		if len(segs)-off < xcopySegB2BLen {
			return p, senseParamListLen, false
		}
		off += xcopySegB2BLen
	}
	p.segs = segs
	cscds := list[xcopyHeaderLen : xcopyHeaderLen+tdll]
	if tdll%xcopyCSCDLen != 0 {
		// Not a list of 32-byte descriptors: one of them is of a
		// type this copy manager does not know (LIO answers the same).
		return p, senseInfo{key: KeyIllegalRequest, asc: ASCUnsupportedTargetDescType}, false
	}
	if tdll/xcopyCSCDLen > xcopyMaxCSCDs {
		return p, senseInfo{key: KeyIllegalRequest, asc: ASCTooManyTargetDescriptors}, false
	}
	for off := 0; off < len(cscds); off += xcopyCSCDLen {
		d := cscds[off : off+xcopyCSCDLen]
		at := xcopyHeaderLen + off
		switch {
		case d[0] != cscdIdentification:
			return p, senseInfo{key: KeyIllegalRequest, asc: ASCUnsupportedTargetDescType}.fieldPointer(false, at, -1), false
		case d[1]&0x1f != 0: // PERIPHERAL DEVICE TYPE: block devices only
			return p, invalidParam(at+1, 4), false
		case d[4]&0x0f != codeBinary:
			return p, invalidParam(at+4, 3), false
		case d[5]&0x30 != assocLU:
			return p, invalidParam(at+5, 5), false
		case d[5]&0x0f != desigNAA:
			return p, invalidParam(at+5, 3), false
		case d[7] != 8 && d[7] != 16:
			return p, invalidParam(at+7, -1), false
		}
	}
	p.cscds = cscds
	p.cscdCount = tdll / xcopyCSCDLen
	return p, senseInfo{}, true
}

// copyStatus is what RECEIVE COPY RESULTS COPY STATUS reports of one
// EXTENDED COPY of an I_T nexus.
type copyStatus struct {
	used     bool
	running  bool
	failed   bool
	listID   uint8
	segments uint16
	bytes    uint64
	seq      uint64 // age, for replacing the oldest
}

// copyStatuses are the copy statuses of one I_T nexus (per LU), a fixed
// table: the oldest finished entry makes room for a new one.
type copyStatuses struct {
	mu   sync.Mutex
	seq  uint64
	slot [xcopyStatusSlots]copyStatus
}

// begin records a copy with list ID id as running. It fails with the
// sense data to end the command with when a copy with that list ID is
// still running on the nexus (OPERATION IN PROGRESS) or when every slot
// holds a running copy (INSUFFICIENT RESOURCES: more than MAXIMUM
// CONCURRENT COPIES).
func (t *copyStatuses) begin(id uint8) (*copyStatus, senseInfo, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var slot *copyStatus
	for i := range t.slot {
		if s := &t.slot[i]; s.used && s.listID == id {
			if s.running {
				return nil, senseInfo{key: KeyIllegalRequest, asc: ASCOperationInProgress}, false
			}
			slot = s
			break
		}
	}
	for i := 0; slot == nil && i < len(t.slot); i++ {
		if !t.slot[i].used {
			slot = &t.slot[i]
		}
	}
	if slot == nil {
		for i := range t.slot {
			if s := &t.slot[i]; !s.running && (slot == nil || s.seq < slot.seq) {
				slot = s
			}
		}
	}
	if slot == nil {
		return nil, senseInfo{key: KeyIllegalRequest, asc: ASCInsufficientResources}, false
	}
	t.seq++
	*slot = copyStatus{used: true, running: true, listID: id, seq: t.seq}
	return slot, senseInfo{}, true
}

func (t *copyStatuses) update(s *copyStatus, segments uint16, n uint64, done, failed bool) {
	t.mu.Lock()
	s.segments = segments
	s.bytes = n
	if done {
		s.running = false
		s.failed = failed
	}
	t.mu.Unlock()
}

// report fills d (12 bytes) with the COPY STATUS data of list ID id and
// discards a finished copy's status once reported. It returns false when
// the nexus has no copy with that list ID.
func (t *copyStatuses) report(id uint8, d []byte) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range t.slot {
		s := &t.slot[i]
		if !s.used || s.listID != id {
			continue
		}
		binary.BigEndian.PutUint32(d[0:], 8)
		switch {
		case s.running:
			d[4] = 0x00 // operation in progress
		case s.failed:
			d[4] = 0x02 // completed with errors
		default:
			d[4] = 0x01 // completed without errors
		}
		binary.BigEndian.PutUint16(d[5:], s.segments)
		// TRANSFER COUNT in the smallest unit that fits 32 bits.
		n, unit := s.bytes, uint8(0)
		for n > 0xffffffff {
			n >>= 10
			unit++
		}
		d[7] = unit
		binary.BigEndian.PutUint32(d[8:], uint32(n))
		if !s.running {
			*s = copyStatus{}
		}
		return true
	}
	return false
}

// xcopyLU finds the LU a CSCD designator names among those the session
// sees, and whether its mapping is read-only.
func (s *Session) xcopyLU(naa []byte) (*LU, bool) {
	for _, e := range s.luns() {
		if e.lu.xcopyOK() && bytes.Equal(e.lu.naa, naa) {
			return e.lu, e.ro
		}
	}
	return nil, false
}

func (lu *LU) xcopyOK() bool { return !lu.cfg.NoExtendedCopy }

// Reservation classes of the reads and writes of a copy on a CSCD LU.
var (
	xcopyReadDesc  = cmdDesc{class: classRead}
	xcopyWriteDesc = cmdDesc{class: classWrite}
)

// execExtendedCopy: EXTENDED COPY (LID1). The segments run in order; each
// copies through a scratch buffer, reading under a shared range lock of the
// source and writing under one of the destination, a chunk at a time (an
// overlapping copy within one LU to higher LBAs runs backwards, so the
// source is read before it is overwritten).
func execExtendedCopy(lu *LU, c *Command, b cdb, it *itl) {
	plen := b.u32(10)
	c.need = uint64(plen)
	if plen == 0 {
		return
	}
	data := c.outData()
	list := data[:min(uint64(len(data)), uint64(plen))]
	c.xfer = uint64(len(list))
	p, perr, ok := parseXCopy(list)
	if !ok {
		c.fail(perr)
		return
	}
	// Resolve the CSCDs the segments use and check every range before
	// moving a block.
	type end struct {
		lu *LU
		ro bool
	}
	var ends [xcopyMaxCSCDs]end
	resolve := func(i uint16) (*LU, bool, bool) {
		if int(i) >= p.cscdCount {
			return nil, false, false
		}
		if ends[i].lu == nil {
			ends[i].lu, ends[i].ro = it.sess.xcopyLU(p.cscd(int(i)))
			if ends[i].lu == nil {
				return nil, false, false
			}
		}
		return ends[i].lu, ends[i].ro, true
	}
	for i := range p.segments() {
		sx, di, nlb, slba, dlba := p.segment(i)
		src, _, ok1 := resolve(sx)
		dst, ro, ok2 := resolve(di)
		if !ok1 || !ok2 {
			c.fail(senseCopyTargetUnreachable)
			return
		}
		if src.bs != dst.bs {
			// LIO: TCM_LOGICAL_UNIT_COMMUNICATION_FAILURE.
			c.fail(senseInfo{key: KeyNotReady, asc: ASCLUCommunicationFailure})
			return
		}
		if !src.inRange(slba, uint64(nlb)) || !dst.inRange(dlba, uint64(nlb)) {
			c.fail(senseCopyTargetUnreachable)
			return
		}
		if wp, _ := dst.writeProtected(); wp || ro || (dst == lu && c.ro) {
			c.fail(senseCopyTargetUnreachable)
			return
		}
		for _, x := range [...]struct {
			lu *LU
			d  *cmdDesc
		}{{src, &xcopyReadDesc}, {dst, &xcopyWriteDesc}} {
			if x.lu != lu && x.lu.pr.active.Load() && x.lu.conflicts(it.sess, x.d, b) {
				c.fail(senseCopyTargetUnreachable)
				return
			}
		}
	}
	var st *copyStatus
	if p.usage != listIDNone {
		var serr senseInfo
		if st, serr, ok = it.copies.begin(p.listID); !ok {
			c.fail(serr)
			return
		}
	}
	var copied uint64
	done := 0
	for i := range p.segments() {
		sx, di, nlb, slba, dlba := p.segment(i)
		n, s, ok := lu.copyBlocks(c, ends[sx].lu, ends[di].lu, slba, dlba, uint64(nlb))
		copied += n
		if c.aborted() {
			ok, s = false, senseInfo{}
		}
		if !ok {
			if st != nil {
				it.copies.update(st, uint16(done), copied, true, true)
			}
			c.fail(s)
			return
		}
		done++
		if st != nil {
			it.copies.update(st, uint16(done), copied, false, false)
		}
	}
	if st != nil {
		it.copies.update(st, uint16(done), copied, true, false)
	}
}

// copyBlocks copies nlb blocks from src at slba to dst at dlba through
// lu's scratch buffers. It returns the bytes written, and the sense data
// of a failure (an abort fails nothing: the task set reports it).
func (lu *LU) copyBlocks(c *Command, src, dst *LU, slba, dlba, nlb uint64) (uint64, senseInfo, bool) {
	buf := lu.bufs.get()
	defer lu.bufs.put(buf)
	per := uint64(len(buf)) >> src.shift
	backwards := src == dst && dlba > slba && dlba < slba+nlb
	var copied uint64
	for left := nlb; left > 0; {
		if c.aborted() {
			return copied, senseInfo{}, true
		}
		m := min(left, per)
		off := nlb - left // blocks done so far
		if backwards {
			off = left - m
		}
		from, to := slba+off, dlba+off
		chunk := buf[:m<<src.shift]
		lm := src.ranges.lockShared(c, from, from+m)
		if lm == lockNone {
			return copied, senseInfo{}, true
		}
		err := src.disk.ReadAt(chunk, int64(from<<src.shift))
		src.ranges.unlock(c, lm)
		if err != nil {
			return copied, senseCopyTargetUnreachable, false
		}
		lm = dst.ranges.lockShared(c, to, to+m)
		if lm == lockNone {
			return copied, senseInfo{}, true
		}
		err = dst.disk.WriteAt(chunk, int64(to<<dst.shift), dst.writeFlags(0))
		dst.ranges.unlock(c, lm)
		if err != nil {
			return copied, senseCopyTargetUnreachable, false
		}
		copied += uint64(len(chunk))
		left -= m
	}
	return copied, senseInfo{}, true
}

// execReceiveCopyResults: RECEIVE COPY RESULTS (LID1) COPY STATUS and
// OPERATING PARAMETERS. RECEIVE DATA and FAILED SEGMENT DETAILS are not
// supported (no data is held): their service actions are refused by the
// command table.
func execReceiveCopyResults(lu *LU, c *Command, b cdb, it *itl) {
	alloc := int(b.u32(10))
	switch b.serviceAction() {
	case rcrCopyStatus:
		var d [12]byte
		if !it.copies.report(b[2], d[:]) {
			c.fail(invalidCDB(2, -1))
			return
		}
		c.respond(d[:], alloc)
	case rcrOpParams:
		var d [rcrOpParamsLen]byte
		binary.BigEndian.PutUint32(d[0:], rcrOpParamsLen-4)
		d[4] = 0x01 // SNLID: LIST ID USAGE 11b is supported
		binary.BigEndian.PutUint16(d[8:], xcopyMaxCSCDs)
		binary.BigEndian.PutUint16(d[10:], xcopyMaxSegments)
		binary.BigEndian.PutUint32(d[12:], xcopyMaxDescList)
		binary.BigEndian.PutUint32(d[16:], xcopyMaxSegBlocks<<lu.shift) // MAXIMUM SEGMENT LENGTH
		// Inline data, held data and stream devices: none.
		// Copies with a list identifier: at most xcopyMaxConcurrent per
		// I_T nexus (their statuses are kept); TOTAL CONCURRENT COPIES
		// is what one nexus may run.
		binary.BigEndian.PutUint16(d[34:], xcopyMaxConcurrent) // TOTAL CONCURRENT COPIES
		d[36] = xcopyMaxConcurrent                             // MAXIMUM CONCURRENT COPIES
		d[37] = uint8(lu.shift)                                // DATA SEGMENT GRANULARITY (log2)
		d[38] = uint8(lu.shift)                                // INLINE DATA GRANULARITY
		d[39] = uint8(lu.shift)                                // HELD DATA GRANULARITY
		d[43] = 2                                              // IMPLEMENTED DESCRIPTOR LIST LENGTH
		d[44] = segBlockToBlock
		d[45] = cscdIdentification
		c.respond(d[:], alloc)
	}
}
