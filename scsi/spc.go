package scsi

import "encoding/binary"

// execTestUnitReady: TEST UNIT READY. The medium is always present and
// ready (unit attentions were reported before).
func execTestUnitReady(lu *LU, c *Command, b cdb, it *itl) {}

// execRequestSense: REQUEST SENSE (SPC-4 6.39) returns, in the format the
// DESC bit asks for: the highest-priority pending unit attention (and
// clears it); else, when the disk reports a health warning and
// informational exceptions are enabled (MRIE 6h: report on request),
// FAILURE PREDICTION THRESHOLD EXCEEDED; else NO SENSE.
func execRequestSense(lu *LU, c *Command, b cdb, it *itl) {
	s := senseInfo{key: KeyNoSense, asc: ASCNoAdditionalSense}
	if asc, ok := it.takeUA(); ok {
		s = senseInfo{key: KeyUnitAttention, asc: asc}
	} else if lu.mode.Load()&modeDExcpt == 0 && lu.healthWarning() {
		s = senseInfo{key: KeyNoSense, asc: ASCFailurePredictionThreshold}
	}
	var d [SenseDescriptorMaxLen]byte
	n := encodeSense(d[:], s, b[1]&0x01 != 0)
	c.respond(d[:n], int(b[4]))
}

// execReportLUNs: REPORT LUNS.
func execReportLUNs(lu *LU, c *Command, b cdb, it *itl) { it.sess.reportLUNs(c) }

// execStartStop: START STOP UNIT. The medium is not removable: LOEJ is
// refused. START 1 is a no-op; START 0 flushes the write cache (unless
// NO_FLUSH) but leaves the LU ready, since a RAM, file or block backstore
// has nothing to spin down. Power conditions other than START_VALID (0h)
// are not supported.
func execStartStop(lu *LU, c *Command, b cdb, it *itl) {
	switch {
	case b[4]>>4 != 0:
		c.fail(invalidCDB(4, 7))
	case b[4]&0x02 != 0:
		c.fail(invalidCDB(4, 1))
	case b[4]&0x01 == 0 && b[4]&0x04 == 0:
		if err := lu.disk.Flush(); err != nil {
			c.fail(lu.ioSense(err, true, 0))
		}
	}
}

// execPreventAllow: PREVENT ALLOW MEDIUM REMOVAL records the state per I_T
// nexus; with a medium that cannot be removed it has no other effect.
func execPreventAllow(lu *LU, c *Command, b cdb, it *itl) {
	it.prevent.Store(b[4]&0x01 != 0)
}

// execReportTMFs: REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS (SPC-4 6.40).
func execReportTMFs(lu *LU, c *Command, b cdb, it *itl) {
	var d [16]byte
	// ABORT TASK, ABORT TASK SET, CLEAR TASK SET, LUN RESET, QUERY TASK,
	// TARGET RESET; I_T NEXUS RESET.
	d[0] = 0x80 | 0x40 | 0x10 | 0x08 | 0x04 | 0x02
	d[1] = 0x01
	n := 4
	if b[2]&0x80 != 0 { // REPD
		d[3] = 0x0c
		n = 16
	}
	c.respond(d[:n], int(b.u32(6)))
}

// execReportOpcodes: REPORT SUPPORTED OPERATION CODES (SPC-4 6.35) with
// reporting options 000b (all), 001b (opcode), 010b (opcode and service
// action) and 011b (either), and command timeout descriptors (RCTD).
func execReportOpcodes(lu *LU, c *Command, b cdb, it *itl) {
	rctd := b[2]&0x80 != 0
	opts := b[2] & 0x07
	reqOp, reqSA := b[3], b.u16(4)
	alloc := int(b.u32(6))
	t := lu.cmds
	switch opts {
	case 0:
		per := 8
		if rctd {
			per = 20
		}
		total := 4 + per*len(t.list)
		var buf [2048]byte
		d := buf[:]
		if total > len(d) {
			d = make([]byte, total)
		}
		d = d[:total]
		clear(d)
		binary.BigEndian.PutUint32(d[0:4], uint32(total-4))
		p := d[4:]
		for _, cd := range t.list {
			p[0] = cd.op
			binary.BigEndian.PutUint16(p[2:4], uint16(cd.sa))
			if cd.hasSA {
				p[5] |= 0x01 // SERVACTV
			}
			if rctd {
				p[5] |= 0x02 // CTDP
				putTimeoutDescriptor(p[8:20])
			}
			binary.BigEndian.PutUint16(p[6:8], uint16(cd.cdbLen))
			p = p[per:]
		}
		c.respond(d, alloc)
		return
	case 1, 2, 3:
	default:
		c.fail(invalidCDB(2, 2))
		return
	}
	e := &t.ops[reqOp]
	var cd *cmdDesc
	switch {
	case opts == 1 && e.sas != nil, opts == 2 && e.d != nil:
		c.fail(invalidCDB(2, 2))
		return
	case e.d != nil:
		cd = e.d
	default:
		for _, x := range e.sas {
			if uint16(x.sa) == reqSA {
				cd = x
			}
		}
	}
	var d [4 + 16 + 12]byte
	n := 4
	if cd == nil {
		d[1] = 0x01 // not supported
	} else {
		d[1] = 0x03 // supported in conformance with a SCSI standard
		binary.BigEndian.PutUint16(d[2:4], uint16(cd.cdbLen))
		n += copy(d[4:], cd.usage)
		if rctd {
			d[1] |= 0x80 // CTDP
			putTimeoutDescriptor(d[n : n+12])
			n += 12
		}
	}
	c.respond(d[:n], alloc)
}

// putTimeoutDescriptor writes a command timeouts descriptor (SPC-4
// 6.35.4): no nominal or recommended timeout is given.
func putTimeoutDescriptor(d []byte) {
	binary.BigEndian.PutUint16(d[0:2], 0x0a)
}
