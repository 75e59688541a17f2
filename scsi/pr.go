package scsi

import (
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"
)

// Reservations: SPC-4 persistent reservations (5.13) and SPC-2 RESERVE and
// RELEASE, with compatible reservation handling (CRH, SPC-3 5.6.3): RESERVE
// conflicts with any persistent reservation or registration, and
// PERSISTENT RESERVE IN/OUT conflict while an SPC-2 reservation is held.
// Registrations survive I_T nexus loss and LUN resets; they are kept in
// memory only (APTPL is not supported). SPEC_I_PT and REGISTER AND MOVE are
// not supported; ALL_TG_PT is.

// Persistent reservation types.
const (
	prWriteExclusive       = 0x1
	prExclusiveAccess      = 0x3
	prWriteExclusiveRO     = 0x5
	prExclusiveAccessRO    = 0x6
	prWriteExclusiveAllReg = 0x7
	prExclusiveAccessAll   = 0x8
)

// PERSISTENT RESERVE OUT service actions.
const (
	prRegister         = 0x0
	prReserve          = 0x1
	prRelease          = 0x2
	prClear            = 0x3
	prPreempt          = 0x4
	prPreemptAbort     = 0x5
	prRegisterIgnore   = 0x6
	prRegisterMove     = 0x7
	prOutParamListLen  = 24
	prInReadKeys       = 0x0
	prInReadResv       = 0x1
	prInReportCaps     = 0x2
	prInReadFullStatus = 0x3
)

func validPRType(t uint8) bool {
	switch t {
	case prWriteExclusive, prExclusiveAccess, prWriteExclusiveRO, prExclusiveAccessRO, prWriteExclusiveAllReg, prExclusiveAccessAll:
		return true
	}
	return false
}

func allRegistrants(t uint8) bool { return t == prWriteExclusiveAllReg || t == prExclusiveAccessAll }
func registrantsOnly(t uint8) bool {
	return t == prWriteExclusiveRO || t == prExclusiveAccessRO || allRegistrants(t)
}
func exclusiveAccess(t uint8) bool {
	return t == prExclusiveAccess || t == prExclusiveAccessRO || t == prExclusiveAccessAll
}

type registration struct {
	id      nexusID
	allTgPt bool
	key     uint64
	tid     []byte
}

// matches reports whether the registration covers I_T nexus id.
func (r *registration) matches(id nexusID) bool {
	return r.id.initiator == id.initiator && (r.allTgPt || r.id.port == id.port)
}

type prState struct {
	// active is set while a persistent or SPC-2 reservation is held:
	// only then do commands take mu to check for conflicts.
	active atomic.Bool

	mu   sync.Mutex
	gen  uint32
	regs []registration
	// The persistent reservation: held, its type, and (except for the
	// all-registrants types) the registration of the holder.
	held   bool
	typ    uint8
	holder nexusID
	// The SPC-2 reservation.
	spc2       bool
	spc2Holder nexusID
}

func (p *prState) update() { p.active.Store(p.held || p.spc2) }

func (p *prState) registration(id nexusID) *registration {
	for i := range p.regs {
		if p.regs[i].matches(id) {
			return &p.regs[i]
		}
	}
	return nil
}

// isHolder reports whether id holds the persistent reservation.
func (p *prState) isHolder(id nexusID) bool {
	if !p.held {
		return false
	}
	if allRegistrants(p.typ) {
		return p.registration(id) != nil
	}
	r := p.registration(p.holder)
	return r != nil && r.matches(id)
}

// holderKey is the key READ RESERVATION reports: the holder's key, 0 for
// the all-registrants types.
func (p *prState) holderKey() uint64 {
	if allRegistrants(p.typ) {
		return 0
	}
	if r := p.registration(p.holder); r != nil {
		return r.key
	}
	return 0
}

// conflicts reports whether command d from s conflicts with the
// reservations held (SPC-4 table 63, SBC-3 table 13).
func (lu *LU) conflicts(s *Session, d *cmdDesc, b cdb) bool {
	p := &lu.pr
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.spc2 {
		if d.prInOut {
			return true
		}
		if p.spc2Holder != s.id && !d.spc2OK {
			return true
		}
	}
	if !p.held || d.class == classAllowed {
		return false
	}
	if p.isHolder(s.id) || registrantsOnly(p.typ) && p.registration(s.id) != nil {
		return false
	}
	return d.class == classWrite || exclusiveAccess(p.typ)
}

// nexusLoss releases what an I_T nexus loss releases: the SPC-2
// reservation of s, and aborts the commands of s.
func (lu *LU) nexusLoss(s *Session) {
	p := &lu.pr
	p.mu.Lock()
	if p.spc2 && p.spc2Holder == s.id {
		p.spc2 = false
		p.update()
	}
	p.mu.Unlock()
	lu.tasks.abort(func(c *Command) bool { return c.sess == s }, func(*Command) uint32 { return abortSilent })
}

// execReserve: RESERVE(6) and RESERVE(10), logical unit reservations only.
func execReserve(lu *LU, c *Command, b cdb, it *itl) {
	if b.op() == OpReserve10 && b[1]&0x12 != 0 { // 3RDPTY, LONGID
		c.fail(invalidCDB(1, 4))
		return
	}
	p := &lu.pr
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held || len(p.regs) > 0 || p.spc2 && p.spc2Holder != it.sess.id {
		c.Status = StatusReservationConflict
		return
	}
	p.spc2 = true
	p.spc2Holder = it.sess.id
	p.update()
}

// execRelease: RELEASE(6) and RELEASE(10). Releasing a reservation held
// by another nexus, or none, is not an error.
func execRelease(lu *LU, c *Command, b cdb, it *itl) {
	if b.op() == OpRelease10 && b[1]&0x12 != 0 {
		c.fail(invalidCDB(1, 4))
		return
	}
	p := &lu.pr
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.spc2 && p.spc2Holder == it.sess.id {
		p.spc2 = false
		p.update()
	}
}

// prOut is a decoded PERSISTENT RESERVE OUT basic parameter list.
type prOut struct {
	key, sark uint64
	allTgPt   bool
}

// parsePROut validates the parameter list of PERSISTENT RESERVE OUT with
// service action sa. It allocates nothing and never panics.
func parsePROut(sa uint8, data []byte, plen uint32) (prOut, senseInfo, bool) {
	if sa == prRegisterMove {
		return prOut{}, invalidCDB(1, 4), false
	}
	if plen != prOutParamListLen || len(data) < prOutParamListLen {
		return prOut{}, senseParamListLen, false
	}
	var o prOut
	o.key = binary.BigEndian.Uint64(data[0:8])
	o.sark = binary.BigEndian.Uint64(data[8:16])
	switch {
	case data[20]&0x08 != 0: // SPEC_I_PT
		return prOut{}, invalidParam(20, 3), false
	case data[20]&0x01 != 0: // APTPL: not supported (PTPL_C 0)
		return prOut{}, invalidParam(20, 0), false
	}
	o.allTgPt = data[20]&0x04 != 0
	return o, senseInfo{}, true
}

// execPROut: PERSISTENT RESERVE OUT.
func execPROut(lu *LU, c *Command, b cdb, it *itl) {
	sa := b.serviceAction()
	scope, typ := b[2]>>4, b[2]&0x0f
	plen := b.u32(5)
	c.need = uint64(plen)
	data := c.outData()
	c.xfer = uint64(min(uint64(len(data)), uint64(plen)))
	o, s, ok := parsePROut(sa, data, plen)
	if !ok {
		c.fail(s)
		return
	}
	switch sa {
	case prReserve, prRelease, prPreempt, prPreemptAbort:
		if scope != 0 {
			c.fail(invalidCDB(2, 7))
			return
		}
		if !validPRType(typ) {
			c.fail(invalidCDB(2, 3))
			return
		}
	}
	sess := it.sess
	p := &lu.pr
	p.mu.Lock()
	st, victims, ua, uaTo := lu.prOutLocked(sess, sa, typ, o)
	p.update()
	p.mu.Unlock()
	switch st {
	case prOK:
	case prConflict:
		c.Status = StatusReservationConflict
		return
	case prBadRelease:
		c.fail(senseInfo{key: KeyIllegalRequest, asc: ASCInvalidReleaseOfPR})
		return
	case prBadSARK:
		c.fail(invalidParam(8, -1))
		return
	}
	if ua != 0 {
		lu.establishUAFor(func(s *Session) bool {
			for _, id := range uaTo {
				if id.initiator == s.id.initiator && (id.port == 0 || id.port == s.id.port) {
					return s != sess
				}
			}
			return false
		}, ua)
	}
	if sa == prPreemptAbort && len(victims) > 0 {
		match := func(x *Command) bool {
			if x == c {
				return false
			}
			for i := range victims {
				if victims[i].matches(x.sess.id) {
					return true
				}
			}
			return false
		}
		lu.tasks.abort(match, func(*Command) uint32 { return abortStatus })
		lu.tasks.waitAborted(nil, match)
	}
}

type prStatus uint8

const (
	prOK prStatus = iota
	prConflict
	prBadRelease
	prBadSARK
)

// prOutLocked performs a PERSISTENT RESERVE OUT service action with the
// state locked. It returns the registrations it removed, and the unit
// attention to establish for the nexuses in uaTo (port 0: all ports of
// the initiator).
func (lu *LU) prOutLocked(s *Session, sa, typ uint8, o prOut) (st prStatus, victims []registration, ua uint32, uaTo []nexusID) {
	p := &lu.pr
	reg := p.registration(s.id)
	switch sa {
	case prRegister, prRegisterIgnore:
		if reg == nil {
			if sa == prRegister && o.key != 0 {
				return prConflict, nil, 0, nil
			}
			if o.sark == 0 {
				return prOK, nil, 0, nil
			}
			id := s.id
			if o.allTgPt {
				id.port = 0
			}
			p.regs = append(p.regs, registration{id: id, allTgPt: o.allTgPt, key: o.sark, tid: s.tid})
			p.gen++
			return prOK, nil, 0, nil
		}
		if sa == prRegister && o.key != reg.key {
			return prConflict, nil, 0, nil
		}
		p.gen++
		if o.sark != 0 {
			reg.key = o.sark
			return prOK, nil, 0, nil
		}
		// Unregister. The holder of a reservation that is not for all
		// registrants releases it; registrants-only reservations tell the
		// other registrants.
		releasing := p.held && !allRegistrants(p.typ) && reg.matches(p.holder) && p.registration(p.holder) == reg
		for i := range p.regs {
			if &p.regs[i] == reg {
				p.regs = slices.Delete(p.regs, i, i+1)
				break
			}
		}
		if p.held && allRegistrants(p.typ) && len(p.regs) == 0 {
			p.held = false
		}
		if releasing {
			p.held = false
			if registrantsOnly(p.typ) {
				return prOK, nil, uaReservationsRelease, regIDs(p.regs)
			}
		}
		return prOK, nil, 0, nil

	case prReserve:
		if reg == nil || reg.key != o.key {
			return prConflict, nil, 0, nil
		}
		if p.held {
			if p.typ == typ && p.isHolder(s.id) {
				return prOK, nil, 0, nil
			}
			return prConflict, nil, 0, nil
		}
		p.held, p.typ, p.holder = true, typ, s.id
		return prOK, nil, 0, nil

	case prRelease:
		if reg == nil || reg.key != o.key {
			return prConflict, nil, 0, nil
		}
		if !p.held || !p.isHolder(s.id) {
			return prOK, nil, 0, nil
		}
		if p.typ != typ {
			return prBadRelease, nil, 0, nil
		}
		p.held = false
		if registrantsOnly(p.typ) {
			var others []nexusID
			for _, r := range p.regs {
				if !r.matches(s.id) {
					others = append(others, r.id)
				}
			}
			return prOK, nil, uaReservationsRelease, others
		}
		return prOK, nil, 0, nil

	case prClear:
		if reg == nil || reg.key != o.key {
			return prConflict, nil, 0, nil
		}
		others := regIDs(p.regs)
		p.regs = p.regs[:0]
		p.held = false
		p.gen++
		return prOK, nil, uaReservationsPreempt, others

	case prPreempt, prPreemptAbort:
		if reg == nil || reg.key != o.key {
			return prConflict, nil, 0, nil
		}
		self := *reg
		remove := func(match func(r *registration) bool) []registration {
			var out []registration
			kept := p.regs[:0]
			for i := range p.regs {
				r := p.regs[i]
				if match(&r) && !(r.matches(s.id) && r.key == self.key) {
					out = append(out, r)
					continue
				}
				kept = append(kept, r)
			}
			clear(p.regs[len(kept):])
			p.regs = kept
			return out
		}
		switch {
		case !p.held:
			if o.sark == 0 {
				return prBadSARK, nil, 0, nil
			}
			victims = remove(func(r *registration) bool { return r.key == o.sark })
			if len(victims) == 0 {
				return prConflict, nil, 0, nil
			}
		case allRegistrants(p.typ) && o.sark == 0:
			victims = remove(func(*registration) bool { return true })
			p.typ, p.holder = typ, s.id
		case allRegistrants(p.typ) || o.sark != p.holderKey():
			if o.sark == 0 {
				return prBadSARK, nil, 0, nil
			}
			victims = remove(func(r *registration) bool { return r.key == o.sark })
			if len(victims) == 0 {
				return prConflict, nil, 0, nil
			}
		default:
			// Preempt the holder: remove the registrations with its
			// key and take the reservation with the new type.
			victims = remove(func(r *registration) bool { return r.key == o.sark })
			p.typ, p.holder = typ, s.id
		}
		p.gen++
		return prOK, victims, uaRegistrationsPreempt, regIDs(victims)
	}
	return prOK, nil, 0, nil
}

func regIDs(regs []registration) []nexusID {
	out := make([]nexusID, len(regs))
	for i, r := range regs {
		out[i] = r.id
	}
	return out
}

// execPRIn: PERSISTENT RESERVE IN.
func execPRIn(lu *LU, c *Command, b cdb, it *itl) {
	alloc := int(b.u16(7))
	p := &lu.pr
	p.mu.Lock()
	defer p.mu.Unlock()
	var w respWriter
	w.init(c, alloc)
	var hdr [8]byte
	binary.BigEndian.PutUint32(hdr[0:4], p.gen)
	switch b.serviceAction() {
	case prInReadKeys:
		binary.BigEndian.PutUint32(hdr[4:8], uint32(8*len(p.regs)))
		w.write(hdr[:])
		for _, r := range p.regs {
			var k [8]byte
			binary.BigEndian.PutUint64(k[:], r.key)
			w.write(k[:])
		}
	case prInReadResv:
		if !p.held {
			w.write(hdr[:])
			break
		}
		binary.BigEndian.PutUint32(hdr[4:8], 16)
		w.write(hdr[:])
		var d [16]byte
		binary.BigEndian.PutUint64(d[0:8], p.holderKey())
		d[13] = p.typ // scope 0h: logical unit
		w.write(d[:])
	case prInReportCaps:
		var d [8]byte
		binary.BigEndian.PutUint16(d[0:2], 8)
		d[2] = 0x10 | 0x04 // CRH, ATP_C
		d[3] = 0x80 | 0x10 // TMV, ALLOW COMMANDS 001b
		d[4] = 0x80 | 0x40 | 0x20 | 0x08 | 0x02
		d[5] = 0x01
		w.write(d[:])
	case prInReadFullStatus:
		n := 0
		for _, r := range p.regs {
			n += 24 + len(r.tid)
		}
		binary.BigEndian.PutUint32(hdr[4:8], uint32(n))
		w.write(hdr[:])
		for i := range p.regs {
			r := &p.regs[i]
			var d [24]byte
			binary.BigEndian.PutUint64(d[0:8], r.key)
			if r.allTgPt {
				d[12] |= 0x02
			} else {
				binary.BigEndian.PutUint16(d[18:20], r.id.port)
			}
			if p.held && (allRegistrants(p.typ) || r.matches(p.holder)) {
				d[12] |= 0x01 // R_HOLDER
				d[13] = p.typ
			}
			binary.BigEndian.PutUint32(d[20:24], uint32(len(r.tid)))
			w.write(d[:])
			w.write(r.tid)
		}
	default:
		c.fail(invalidCDB(1, 4))
		return
	}
	w.done()
}

// respWriter writes a response of unknown length into DataIn: bytes past
// the allocation length or the data-in buffer are counted, not written.
type respWriter struct {
	c     *Command
	out   []byte
	alloc int
	total int
}

func (w *respWriter) init(c *Command, alloc int) {
	w.c = c
	w.alloc = alloc
	w.out = c.DataIn[:min(c.inLimit(), alloc)]
}

func (w *respWriter) write(b []byte) {
	if w.total < len(w.out) {
		copy(w.out[w.total:], b)
	}
	w.total += len(b)
}

func (w *respWriter) done() {
	n := min(w.total, w.alloc)
	w.c.need = uint64(n)
	w.c.DataInLen = min(n, len(w.out))
	w.c.xfer = uint64(w.c.DataInLen)
}
