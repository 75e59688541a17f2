package scsi

import "encoding/binary"

// Mode pages (SPC-4 7.5, SBC-3 6.4). Three are implemented: caching (08h:
// WCE changeable), control (0Ah: D_SENSE and SWP changeable, TAS set, QAM
// 1h) and informational exceptions control (1Ch: DEXCPT changeable, MRIE
// 6h). Nothing can be saved: PC 11b (saved values) and SP are refused with
// SAVING PARAMETERS NOT SUPPORTED and INVALID FIELD IN CDB. A LUN reset
// restores the defaults.
const (
	pageCaching   = 0x08
	pageControl   = 0x0a
	pageIEControl = 0x1c
	pageAll       = 0x3f

	pcCurrent    = 0
	pcChangeable = 1
	pcDefault    = 2
	pcSaved      = 3
)

// modePageLen returns the length of a page (header included), 0 when the
// page is not implemented.
func modePageLen(page uint8) int {
	switch page {
	case pageCaching:
		return 20
	case pageControl, pageIEControl:
		return 12
	}
	return 0
}

var modePages = [...]uint8{pageCaching, pageControl, pageIEControl}

// putModePage writes page (modePageLen bytes) for page control pc into d,
// from the mode bits m.
func putModePage(d []byte, page uint8, pc int, m uint32) {
	n := modePageLen(page)
	d = d[:n]
	clear(d)
	d[0] = page
	d[1] = uint8(n - 2)
	changeable := pc == pcChangeable
	switch page {
	case pageCaching:
		if changeable || m&modeWCE != 0 {
			d[2] |= 0x04
		}
	case pageControl:
		if changeable {
			d[2] = 0x04 // D_SENSE
			d[4] = 0x08 // SWP
			return
		}
		d[2] = 0x02 // GLTSD: log parameters are not saved
		if m&modeDSense != 0 {
			d[2] |= 0x04
		}
		d[3] = 0x10 // QUEUE ALGORITHM MODIFIER 1h: unrestricted reordering
		if m&modeSWP != 0 {
			d[4] |= 0x08
		}
		d[5] = 0x40                                 // TAS
		binary.BigEndian.PutUint16(d[8:10], 0xffff) // busy timeout: unlimited
	case pageIEControl:
		if changeable {
			d[2] = 0x08 // DEXCPT
			return
		}
		if m&modeDExcpt != 0 {
			d[2] |= 0x08
		}
		d[3] = 0x06 // MRIE 6h: report informational exceptions on request
	}
}

// execModeSense: MODE SENSE(6) and MODE SENSE(10).
func execModeSense(lu *LU, c *Command, b cdb, it *itl) {
	ten := b.op() == OpModeSense10
	dbd := b[1]&0x08 != 0
	llbaa := ten && b[1]&0x10 != 0
	pc := int(b[2] >> 6)
	page := b[2] & 0x3f
	sub := b[3]
	alloc := int(b[4])
	if ten {
		alloc = int(b.u16(7))
	}
	if pc == pcSaved {
		c.fail(senseInfo{key: KeyIllegalRequest, asc: ASCSavingParamsNotSupported}.fieldPointer(true, 2, 7))
		return
	}
	if page != pageAll && modePageLen(page) == 0 {
		c.fail(invalidCDB(2, 5))
		return
	}
	if sub != 0 && sub != 0xff {
		c.fail(invalidCDB(3, -1))
		return
	}
	m := lu.mode.Load()
	if pc == pcDefault {
		m = lu.defaultMode()
	}
	var buf [8 + 16 + 20 + 12 + 12]byte
	hdr := 4
	if ten {
		hdr = 8
	}
	p := hdr
	blocks := lu.blocks.Load()
	switch {
	case dbd:
	case llbaa:
		binary.BigEndian.PutUint64(buf[p:], blocks)
		binary.BigEndian.PutUint32(buf[p+12:], uint32(lu.bs))
		p += 16
	default:
		binary.BigEndian.PutUint32(buf[p:], uint32(min(blocks, 0xffffffff)))
		binary.BigEndian.PutUint32(buf[p+4:], uint32(lu.bs)) // density code 0
		p += 8
	}
	bdl := p - hdr
	for _, pg := range modePages {
		if page == pageAll || page == pg {
			putModePage(buf[p:], pg, pc, m)
			p += modePageLen(pg)
		}
	}
	dsp := uint8(0x10) // DPOFUA
	if wp, _ := lu.writeProtected(); wp || c.ro {
		dsp |= 0x80
	}
	if ten {
		binary.BigEndian.PutUint16(buf[0:2], uint16(p-2))
		buf[3] = dsp
		if llbaa && !dbd {
			buf[4] = 0x01 // LONGLBA
		}
		binary.BigEndian.PutUint16(buf[6:8], uint16(bdl))
	} else {
		buf[0] = uint8(p - 1)
		buf[2] = dsp
		buf[3] = uint8(bdl)
	}
	c.respond(buf[:p], alloc)
}

// parseModeSelect validates a MODE SELECT parameter list (ten: the 10-byte
// format) for an LU of block size bs whose current mode bits are cur, and
// returns the new mode bits. Fields that are not changeable must keep
// their current values. It allocates nothing and never panics.
func parseModeSelect(data []byte, ten bool, bs int, cur uint32) (uint32, senseInfo, bool) {
	hdr := 4
	if ten {
		hdr = 8
	}
	if len(data) < hdr {
		return 0, senseParamListLen, false
	}
	var bdl int
	long := false
	if ten {
		bdl = int(binary.BigEndian.Uint16(data[6:8]))
		long = data[4]&0x01 != 0
	} else {
		bdl = int(data[3])
	}
	switch {
	case bdl == 0:
	case bdl == 8 && !long, bdl == 16 && long:
		if len(data) < hdr+bdl {
			return 0, senseParamListLen, false
		}
		d := data[hdr : hdr+bdl]
		var blen uint32
		if long {
			blen = binary.BigEndian.Uint32(d[12:16])
		} else {
			blen = binary.BigEndian.Uint32(d[4:8]) & 0xffffff
		}
		if blen != uint32(bs) {
			off := hdr + 5
			if long {
				off = hdr + 12
			}
			return 0, invalidParam(off, -1), false
		}
	default:
		off := 3
		if ten {
			off = 6
		}
		return 0, invalidParam(off, -1), false
	}
	next := cur
	var curPage, chg [20]byte
	for p := hdr + bdl; p < len(data); {
		if len(data)-p < 2 {
			return 0, senseParamListLen, false
		}
		if data[p]&0x40 != 0 { // SPF: no subpages are implemented
			return 0, invalidParam(p, 6), false
		}
		page := data[p] & 0x3f
		n := modePageLen(page)
		if n == 0 {
			return 0, invalidParam(p, 5), false
		}
		if int(data[p+1]) != n-2 {
			return 0, invalidParam(p+1, -1), false
		}
		if len(data)-p < n {
			return 0, senseParamListLen, false
		}
		pg := data[p : p+n]
		putModePage(curPage[:], page, pcCurrent, next)
		putModePage(chg[:], page, pcChangeable, next)
		for i := 2; i < n; i++ {
			if bad := (pg[i] ^ curPage[i]) &^ chg[i]; bad != 0 {
				bit := 7
				for bad&(1<<bit) == 0 {
					bit--
				}
				return 0, invalidParam(p+i, bit), false
			}
		}
		switch page {
		case pageCaching:
			next = setBit(next, modeWCE, pg[2]&0x04 != 0)
		case pageControl:
			next = setBit(next, modeDSense, pg[2]&0x04 != 0)
			next = setBit(next, modeSWP, pg[4]&0x08 != 0)
		case pageIEControl:
			next = setBit(next, modeDExcpt, pg[2]&0x08 != 0)
		}
		p += n
	}
	return next, senseInfo{}, true
}

func setBit(v, bit uint32, on bool) uint32 {
	if on {
		return v | bit
	}
	return v &^ bit
}

// execModeSelect: MODE SELECT(6) and MODE SELECT(10). A change of mode
// parameters establishes MODE PARAMETERS CHANGED for the other nexuses.
// Through a read-only mapping a parameter list is refused (DATA PROTECT).
func execModeSelect(lu *LU, c *Command, b cdb, it *itl) {
	ten := b.op() == OpModeSelect10
	plen := int(b[4])
	if ten {
		plen = int(b.u16(7))
	}
	switch {
	case b[1]&0x01 != 0: // SP
		c.fail(invalidCDB(1, 0))
		return
	case b[1]&0x10 == 0: // PF: only the SPC page format is supported
		c.fail(invalidCDB(1, 4))
		return
	}
	c.need = uint64(plen)
	if plen == 0 {
		return
	}
	if c.ro {
		// A read-only mapping changes no LU state other sessions see.
		c.fail(senseInfo{key: KeyDataProtect, asc: ASCWriteProtected})
		return
	}
	data := c.outData()
	if len(data) < plen {
		c.fail(senseParamListLen)
		return
	}
	data = data[:plen]
	c.xfer = uint64(plen)
	lu.pr.mu.Lock() // serializes mode changes (rare)
	cur := lu.mode.Load()
	next, s, ok := parseModeSelect(data, ten, lu.bs, cur)
	if ok {
		lu.mode.Store(next)
	}
	lu.pr.mu.Unlock()
	if !ok {
		c.fail(s)
		return
	}
	if next != cur {
		lu.establishUA(it.sess, uaModeParamsChanged)
	}
}
