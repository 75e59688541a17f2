package scsi

import (
	"bytes"
	"encoding/binary"
	"errors"

	"github.com/rdisk/rdisk/backstore"
)

// checkRW validates the fields common to the block commands: the protection
// field (no protection information is supported, so it must be zero), the
// maximum transfer length and the LBA range. It fails c and returns false on
// error.
func (lu *LU) checkRW(c *Command, f rwFields, maxLen bool) bool {
	if f.flags&flagProtectMask != 0 {
		c.fail(invalidCDB(1, 7))
		return false
	}
	if maxLen && lu.cfg.MaxTransferBlocks != 0 && f.nlb > lu.cfg.MaxTransferBlocks {
		c.fail(invalidCDB(f.lenOff, -1))
		return false
	}
	if !lu.inRange(f.lba, uint64(f.nlb)) {
		c.fail(senseLBAOutOfRange)
		return false
	}
	return true
}

// checkWritable fails c with DATA PROTECT when the LU is write protected
// or c came through a read-only mapping.
func (lu *LU) checkWritable(c *Command) bool {
	if c.ro {
		c.fail(senseInfo{key: KeyDataProtect, asc: ASCWriteProtected})
		return false
	}
	if wp, asc := lu.writeProtected(); wp {
		c.fail(senseInfo{key: KeyDataProtect, asc: asc})
		return false
	}
	return true
}

// execRead: READ(6/10/12/16). The blocks are read straight into DataIn; a
// transfer cut short by the expected length inside a block reads that block
// through a scratch buffer. Reads hold a shared range lock, so COMPARE AND
// WRITE and ORWRITE are atomic with respect to them. With Command.Views,
// whole blocks of a disk in memory are not copied: the views are held
// until the transport releases them (rangeLocks.tryView).
func execRead(lu *LU, c *Command, b cdb, it *itl) {
	f := rwDecode(b)
	if !lu.checkRW(c, f, true) {
		return
	}
	need := uint64(f.nlb) << lu.shift
	c.need = need
	n := min(need, uint64(c.inLimit()))
	if n == 0 {
		return
	}
	whole := n &^ uint64(lu.bs-1)
	off := int64(f.lba << lu.shift)
	if whole == n && len(c.Views) > 0 && lu.view(c, off, int(n)) {
		return
	}
	// A shared lock keeps COMPARE AND WRITE and ORWRITE atomic for
	// readers too: a read never sees half of one.
	lm := lu.ranges.lockShared(c, f.lba, f.lba+(n+uint64(lu.bs)-1)>>lu.shift)
	if lm == lockNone {
		return
	}
	defer lu.ranges.unlock(c, lm)
	if whole > 0 {
		if err := lu.disk.ReadAt(c.DataIn[:whole], off); err != nil {
			c.fail(lu.ioSense(err, false, f.lba))
			return
		}
	}
	if n > whole {
		buf := lu.bufs.get()
		err := lu.disk.ReadAt(buf[:lu.bs], off+int64(whole))
		copy(c.DataIn[whole:n], buf)
		lu.bufs.put(buf)
		if err != nil {
			c.fail(lu.ioSense(err, false, f.lba+whole>>lu.shift))
			return
		}
	}
	c.DataInLen = int(n)
	c.xfer = n
}

// view answers a read of n bytes at off from the disk's memory into
// c.Views (see Command), when the disk has it (LU.viewer), no exclusive locker wants
// the LU, and the range fits the segments. It reports whether it did;
// a failed read has failed c.
func (lu *LU) view(c *Command, off int64, n int) bool {
	v := lu.viewer
	if v == nil || !lu.ranges.tryView() {
		return false
	}
	k, err := v.ViewAt(c.Views, off, n)
	if err != nil {
		lu.ranges.unview()
		if errors.Is(err, backstore.ErrUnsupported) {
			return false // more segments than Views: copy
		}
		c.fail(lu.ioSense(err, false, uint64(off)>>lu.shift))
		return true
	}
	c.viewRL = &lu.ranges
	c.ViewsLen = k
	c.DataInLen = n
	c.xfer = uint64(n)
	return true
}

// writeData returns the whole blocks of data-out a write of nlb blocks
// uses: the smaller of the CDB transfer length and the data received.
func (lu *LU) writeData(c *Command, nlb uint32) []byte {
	need := uint64(nlb) << lu.shift
	c.need = need
	data := c.outData()
	n := min(need, uint64(len(data))) &^ uint64(lu.bs-1)
	return data[:n]
}

// execWrite: WRITE(6/10/12/16).
func execWrite(lu *LU, c *Command, b cdb, it *itl) {
	f := rwDecode(b)
	if !lu.checkRW(c, f, true) || !lu.checkWritable(c) {
		return
	}
	data := lu.writeData(c, f.nlb)
	if len(data) == 0 {
		return
	}
	end := f.lba + uint64(len(data))>>lu.shift
	lm := lu.ranges.lockShared(c, f.lba, end)
	if lm == lockNone {
		return
	}
	err := lu.disk.WriteAt(data, int64(f.lba<<lu.shift), lu.writeFlags(f.flags))
	lu.ranges.unlock(c, lm)
	if err != nil {
		c.fail(lu.ioSense(err, true, f.lba))
		return
	}
	c.xfer = uint64(len(data))
}

// compareMedia compares data with the blocks from lba on, a scratch-sized
// chunk at a time. It returns the offset of the first differing byte (-1
// when equal) or the sense data of a read error.
func (lu *LU) compareMedia(lba uint64, data []byte) (int64, senseInfo, bool) {
	buf := lu.bufs.get()
	defer lu.bufs.put(buf)
	for done := 0; done < len(data); {
		m := min(len(data)-done, scratchSize)
		at := lba + uint64(done)>>lu.shift
		if err := lu.disk.ReadAt(buf[:m], int64(at<<lu.shift)); err != nil {
			return 0, lu.ioSense(err, false, at), false
		}
		if !bytes.Equal(buf[:m], data[done:done+m]) {
			for i := range m {
				if buf[i] != data[done+i] {
					return int64(done + i), senseInfo{}, true
				}
			}
		}
		done += m
	}
	return -1, senseInfo{}, true
}

// readMedia reads nlb blocks from lba through scratch buffers, checking
// that they are readable (VERIFY with BYTCHK 0).
func (lu *LU) readMedia(lba, nlb uint64) (senseInfo, bool) {
	buf := lu.bufs.get()
	defer lu.bufs.put(buf)
	per := uint64(scratchSize) >> lu.shift
	for nlb > 0 {
		m := min(nlb, per)
		if err := lu.disk.ReadAt(buf[:m<<lu.shift], int64(lba<<lu.shift)); err != nil {
			return lu.ioSense(err, false, lba), false
		}
		lba += m
		nlb -= m
	}
	return senseInfo{}, true
}

func miscompare(off int64) senseInfo {
	return senseInfo{key: KeyMiscompare, asc: ASCMiscompareDuringVerify, info: uint64(off), infoValid: true}
}

// verifyDataOut is the data-out length of VERIFY: the blocks with BYTCHK
// 01b, one block with 11b, none otherwise.
func verifyDataOut(lu *LU, b cdb) uint64 {
	f := rwDecode(b)
	switch f.flags >> 1 & 3 {
	case 1:
		return uint64(f.nlb) << lu.shift
	case 3:
		return uint64(lu.bs)
	}
	return 0
}

// execVerify: VERIFY(10/12/16). BYTCHK 00b reads the blocks back, 01b
// compares them with the data-out buffer, 11b compares each with the single
// block of data-out; 10b is reserved. A miscompare reports the offset of
// the first differing byte in the data-out buffer in INFORMATION.
func execVerify(lu *LU, c *Command, b cdb, it *itl) {
	f := rwDecode(b)
	if !lu.checkRW(c, f, false) {
		return
	}
	switch f.flags >> 1 & 3 {
	case 0:
		if s, ok := lu.readMedia(f.lba, uint64(f.nlb)); !ok {
			c.fail(s)
		}
	case 1:
		data := lu.writeData(c, f.nlb)
		off, s, ok := lu.compareMedia(f.lba, data)
		switch {
		case !ok:
			c.fail(s)
		case off >= 0:
			c.fail(miscompare(off))
		default:
			c.xfer = uint64(len(data))
		}
	case 3:
		c.need = uint64(lu.bs)
		data := c.outData()
		if len(data) < lu.bs {
			c.fail(senseCommandIULen)
			return
		}
		pattern := data[:lu.bs]
		c.xfer = uint64(lu.bs)
		buf := lu.bufs.get()
		defer lu.bufs.put(buf)
		per := uint64(scratchSize) >> lu.shift
		for lba, left := f.lba, uint64(f.nlb); left > 0; {
			m := min(left, per)
			if err := lu.disk.ReadAt(buf[:m<<lu.shift], int64(lba<<lu.shift)); err != nil {
				c.fail(lu.ioSense(err, false, lba))
				return
			}
			for i := uint64(0); i < m; i++ {
				blk := buf[i<<lu.shift : (i+1)<<lu.shift]
				if !bytes.Equal(blk, pattern) {
					for j := range blk {
						if blk[j] != pattern[j] {
							c.fail(miscompare(int64(j)))
							return
						}
					}
				}
			}
			lba += m
			left -= m
		}
	default:
		c.fail(invalidCDB(1, 2))
	}
}

// execWriteVerify: WRITE AND VERIFY(10/12/16). The data is written with
// FUA; with BYTCHK 01b it is then read back and compared.
func execWriteVerify(lu *LU, c *Command, b cdb, it *itl) {
	f := rwDecode(b)
	if !lu.checkRW(c, f, true) {
		return
	}
	bytchk := f.flags >> 1 & 3
	if bytchk > 1 {
		c.fail(invalidCDB(1, 2))
		return
	}
	if !lu.checkWritable(c) {
		return
	}
	data := lu.writeData(c, f.nlb)
	if len(data) == 0 {
		return
	}
	end := f.lba + uint64(len(data))>>lu.shift
	lm := lu.ranges.lockShared(c, f.lba, end)
	if lm == lockNone {
		return
	}
	defer lu.ranges.unlock(c, lm)
	if err := lu.disk.WriteAt(data, int64(f.lba<<lu.shift), backstore.FUA); err != nil {
		c.fail(lu.ioSense(err, true, f.lba))
		return
	}
	c.xfer = uint64(len(data))
	if bytchk == 1 {
		off, s, ok := lu.compareMedia(f.lba, data)
		switch {
		case !ok:
			c.fail(s)
		case off >= 0:
			c.fail(miscompare(off))
		}
	}
}

// execOrWrite: ORWRITE(16). Each block becomes the bitwise OR of its
// current contents and the data-out buffer, atomically with respect to
// other writers of the range (SBC-3 5.8, without the ORWRITE(32)
// generation checks).
func execOrWrite(lu *LU, c *Command, b cdb, it *itl) {
	f := rwDecode(b)
	if !lu.checkRW(c, f, true) || !lu.checkWritable(c) {
		return
	}
	data := lu.writeData(c, f.nlb)
	if len(data) == 0 {
		return
	}
	end := f.lba + uint64(len(data))>>lu.shift
	lm := lu.ranges.lockExcl(c, f.lba, end)
	if lm == lockNone {
		return
	}
	defer lu.ranges.unlock(c, lm)
	buf := lu.bufs.get()
	defer lu.bufs.put(buf)
	flags := lu.writeFlags(f.flags)
	for done := 0; done < len(data); {
		m := min(len(data)-done, scratchSize)
		at := f.lba + uint64(done)>>lu.shift
		off := int64(at << lu.shift)
		if err := lu.disk.ReadAt(buf[:m], off); err != nil {
			c.fail(lu.ioSense(err, false, at))
			return
		}
		orBytes(buf[:m], data[done:done+m])
		if err := lu.disk.WriteAt(buf[:m], off, flags); err != nil {
			c.fail(lu.ioSense(err, true, at))
			return
		}
		done += m
	}
	c.xfer = uint64(len(data))
}

func orBytes(dst, src []byte) {
	for len(dst) >= 8 && len(src) >= 8 {
		v := binary.LittleEndian.Uint64(dst) | binary.LittleEndian.Uint64(src)
		binary.LittleEndian.PutUint64(dst, v)
		dst, src = dst[8:], src[8:]
	}
	for i := range dst {
		dst[i] |= src[i]
	}
}

// execCompareAndWrite: COMPARE AND WRITE. The data-out buffer holds the
// verify data then the write data, NUMBER OF LOGICAL BLOCKS each. The
// compare and the write hold an exclusive range lock, so no other write of
// the range interleaves. On a miscompare nothing is written and INFORMATION
// holds the offset of the first differing byte.
func execCompareAndWrite(lu *LU, c *Command, b cdb, it *itl) {
	lba := b.u64(2)
	nlb := uint32(b[13])
	if b[1]&flagProtectMask != 0 {
		c.fail(invalidCDB(1, 7))
		return
	}
	if nlb > uint32(lu.cfg.MaxCompareAndWriteBlocks) {
		c.fail(invalidCDB(13, -1))
		return
	}
	if !lu.inRange(lba, uint64(nlb)) {
		c.fail(senseLBAOutOfRange)
		return
	}
	if nlb == 0 {
		// Not an error (SBC-3 5.2) — unless data-out comes with it: a
		// wrapped block count (256 written as 0). Like Linux LIO
		// (target_cmd_size_check), refuse data the CDB does not account
		// for, pointing at NUMBER OF LOGICAL BLOCKS.
		if c.ExpectedLength != 0 {
			c.fail(invalidCDB(13, -1))
		}
		return
	}
	if !lu.checkWritable(c) {
		return
	}
	need := 2 * uint64(nlb) << lu.shift
	c.need = need
	data := c.outData()
	if uint64(len(data)) != need || uint64(c.ExpectedLength) != need {
		c.fail(senseCommandIULen)
		return
	}
	half := need / 2
	lm := lu.ranges.lockExcl(c, lba, lba+uint64(nlb))
	if lm == lockNone {
		return
	}
	defer lu.ranges.unlock(c, lm)
	if cw, ok := lu.disk.(backstore.CompareWriter); ok && half <= uint64(cw.CompareAndWriteMax()) {
		// The store compares and writes atomically for every gateway
		// serving it, not only against this LU's own commands.
		off, err := cw.CompareAndWrite(data[:half], data[half:], int64(lba<<lu.shift))
		switch {
		case off >= 0:
			c.fail(miscompare(off))
		case err != nil:
			c.fail(lu.ioSense(err, true, lba))
		default:
			c.xfer = need
		}
		return
	}
	off, s, ok := lu.compareMedia(lba, data[:half])
	switch {
	case !ok:
		c.fail(s)
		return
	case off >= 0:
		c.fail(miscompare(off))
		return
	}
	if err := lu.disk.WriteAt(data[half:], int64(lba<<lu.shift), lu.writeFlags(b[1])); err != nil {
		c.fail(lu.ioSense(err, true, lba))
		return
	}
	c.xfer = need
}

// writeSameDataOut is one block, or none with NDOB.
func writeSameDataOut(lu *LU, b cdb) uint64 {
	if b.op() == OpWriteSame16 && b[1]&0x01 != 0 {
		return 0
	}
	return uint64(lu.bs)
}

// execWriteSame: WRITE SAME(10/16). The single block of data-out (zeroes
// with NDOB) is written to every block of the range: by WriteZeroes when it
// is all zeroes and the disk can, by Discard when UNMAP is set, the block is
// all zeroes and the disk can deallocate (deallocated blocks read as
// zeroes: LBPRZ), and otherwise by writing scratch buffers filled with the
// block. NUMBER OF LOGICAL BLOCKS 0 is refused (WSNZ is set in the block
// limits page), as are ANCHOR (ANC_SUP is clear) and the obsolete PBDATA and
// LBDATA bits.
func execWriteSame(lu *LU, c *Command, b cdb, it *itl) {
	f := rwDecode(b)
	unmap := b[1]&0x08 != 0
	ndob := b.op() == OpWriteSame16 && b[1]&0x01 != 0
	switch {
	case f.flags&flagProtectMask != 0:
		c.fail(invalidCDB(1, 7))
		return
	case b[1]&0x10 != 0:
		c.fail(invalidCDB(1, 4)) // ANCHOR
		return
	case b[1]&0x06 != 0:
		c.fail(invalidCDB(1, 2)) // PBDATA, LBDATA
		return
	case unmap && !lu.thin():
		c.fail(invalidCDB(1, 3))
		return
	}
	if !lu.inRange(f.lba, uint64(f.nlb)) {
		c.fail(senseLBAOutOfRange)
		return
	}
	if f.nlb == 0 {
		c.fail(invalidCDB(f.lenOff, -1)) // WSNZ
		return
	}
	if lu.cfg.MaxWriteSameBlocks != 0 && uint64(f.nlb) > lu.cfg.MaxWriteSameBlocks {
		c.fail(invalidCDB(f.lenOff, -1))
		return
	}
	// Write protection before the data-out: a WRITE SAME with UNMAP to a
	// read-only LU is refused as such, whatever data came with it (LIO
	// checks it when it looks the LUN up).
	if !lu.checkWritable(c) {
		return
	}
	var pattern []byte
	if !ndob {
		c.need = uint64(lu.bs)
		data := c.outData()
		if len(data) != lu.bs || c.ExpectedLength != uint32(lu.bs) {
			c.fail(senseCommandIULen)
			return
		}
		pattern = data
		c.xfer = uint64(lu.bs)
	}
	zero := ndob || allZero(pattern)
	off := int64(f.lba << lu.shift)
	length := int64(f.nlb) << lu.shift
	lm := lu.ranges.lockShared(c, f.lba, f.lba+uint64(f.nlb))
	if lm == lockNone {
		return
	}
	defer lu.ranges.unlock(c, lm)
	flags := lu.writeFlags(b[1])
	var err error
	switch {
	case zero && unmap && lu.discrd != nil:
		err = lu.discrd.Discard(off, length)
		if err == nil && flags&backstore.FUA != 0 {
			err = lu.disk.Flush()
		}
	case zero && lu.zeroer != nil:
		err = lu.zeroer.WriteZeroes(off, length, flags)
	default:
		err = lu.writePattern(off, length, pattern, flags)
	}
	if err != nil {
		c.fail(lu.ioSense(err, true, f.lba))
	}
}

// writePattern writes the block pattern (nil: zeroes) over length bytes
// from off.
func (lu *LU) writePattern(off, length int64, pattern []byte, flags backstore.WriteFlags) error {
	buf := lu.bufs.get()
	defer lu.bufs.put(buf)
	fill := min(length, int64(len(buf)))
	if pattern == nil {
		clear(buf[:fill])
	} else {
		for i := int64(0); i < fill; i += int64(lu.bs) {
			copy(buf[i:], pattern)
		}
	}
	for length > 0 {
		m := min(length, fill)
		if err := lu.disk.WriteAt(buf[:m], off, flags); err != nil {
			return err
		}
		off += m
		length -= m
	}
	return nil
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, v := range b {
		if v != 0 {
			return false
		}
	}
	return true
}

// Block limits reported in VPD page B0h for UNMAP.
const (
	maxUnmapBlockDescriptors = 4095       // what a 16-bit parameter list length can carry
	maxUnmapLBACount         = 0xffffffff // no limit
)

// unmapList is a view of an UNMAP parameter list (SBC-3 5.28.2) validated
// by parseUnmap: an 8-byte header, then 16-byte block descriptors.
type unmapList []byte

// parseUnmap validates an UNMAP parameter list against a capacity of
// blocks: the header, the descriptor count and every descriptor's range.
// It returns the descriptors (a multiple of 16 bytes) or the sense data to
// fail the command with. It allocates nothing and never panics.
func parseUnmap(list []byte, blocks uint64) (unmapList, senseInfo, bool) {
	if len(list) < 8 {
		return nil, senseParamListLen, false
	}
	bdl := int(binary.BigEndian.Uint16(list[2:4]))
	size := min(len(list)-8, bdl) &^ 15
	if size/16 > maxUnmapBlockDescriptors {
		return nil, invalidParam(2, -1), false
	}
	descs := unmapList(list[8 : 8+size])
	for p := 0; p < len(descs); p += 16 {
		lba := binary.BigEndian.Uint64(descs[p:])
		n := uint64(binary.BigEndian.Uint32(descs[p+8:]))
		if lba > blocks || n > blocks-lba {
			return nil, senseLBAOutOfRange, false
		}
	}
	return descs, senseInfo{}, true
}

// span returns the smallest block range covering the descriptors.
func (l unmapList) span() (lo, hi uint64) {
	lo = ^uint64(0)
	for p := 0; p < len(l); p += 16 {
		lba := binary.BigEndian.Uint64(l[p:])
		n := uint64(binary.BigEndian.Uint32(l[p+8:]))
		if n == 0 {
			continue
		}
		lo = min(lo, lba)
		hi = max(hi, lba+n)
	}
	if lo > hi {
		lo = hi
	}
	return lo, hi
}

// execUnmap: UNMAP. Every descriptor is checked before any block is
// deallocated.
func execUnmap(lu *LU, c *Command, b cdb, it *itl) {
	if b[1]&0x01 != 0 {
		c.fail(invalidCDB(1, 0)) // ANCHOR: ANC_SUP is clear
		return
	}
	plen := int(b.u16(7))
	c.need = uint64(plen)
	if plen == 0 {
		return
	}
	data := c.outData()
	list := data[:min(len(data), plen)]
	c.xfer = uint64(len(list))
	descs, s, ok := parseUnmap(list, lu.blocks.Load())
	if !ok {
		c.fail(s)
		return
	}
	if !lu.checkWritable(c) {
		return
	}
	lo, hi := descs.span()
	if lo == hi {
		return
	}
	lm := lu.ranges.lockShared(c, lo, hi)
	if lm == lockNone {
		return
	}
	defer lu.ranges.unlock(c, lm)
	for p := 0; p < len(descs); p += 16 {
		lba := binary.BigEndian.Uint64(descs[p:])
		n := uint64(binary.BigEndian.Uint32(descs[p+8:]))
		if n == 0 {
			continue
		}
		if err := lu.discrd.Discard(int64(lba<<lu.shift), int64(n<<lu.shift)); err != nil {
			c.fail(lu.ioSense(err, true, lba))
			return
		}
	}
}

// execSyncCache: SYNCHRONIZE CACHE(10/16) flushes the whole disk (the
// backstore has no ranged flush); IMMED is accepted and the flush still
// completes before status.
func execSyncCache(lu *LU, c *Command, b cdb, it *itl) {
	f := rwDecode(b)
	if !lu.inRange(f.lba, uint64(f.nlb)) {
		c.fail(senseLBAOutOfRange)
		return
	}
	if err := lu.disk.Flush(); err != nil {
		c.fail(lu.ioSense(err, true, f.lba))
	}
}

// execPrefetch: PRE-FETCH(10/16). There is no cache to load: after the
// range check the command completes with GOOD (CONDITION MET would claim
// the blocks were cached).
func execPrefetch(lu *LU, c *Command, b cdb, it *itl) {
	f := rwDecode(b)
	if !lu.inRange(f.lba, uint64(f.nlb)) {
		c.fail(senseLBAOutOfRange)
	}
}

// execReadCapacity10: READ CAPACITY(10).
func execReadCapacity10(lu *LU, c *Command, b cdb, it *itl) {
	if b[8]&0x01 == 0 && b.u32(2) != 0 {
		c.fail(invalidCDB(2, -1)) // LBA without PMI
		return
	}
	var d [8]byte
	last := lu.blocks.Load() - 1
	binary.BigEndian.PutUint32(d[0:4], uint32(min(last, 0xffffffff)))
	binary.BigEndian.PutUint32(d[4:8], uint32(lu.bs))
	c.respond(d[:], len(d))
}

// readCapacity16 builds the READ CAPACITY(16) parameter data.
func (lu *LU) readCapacity16(d *[32]byte) {
	binary.BigEndian.PutUint64(d[0:8], lu.blocks.Load()-1)
	binary.BigEndian.PutUint32(d[8:12], uint32(lu.bs))
	d[13] = lu.cfg.PhysicalBlockExp & 0x0f
	if lu.thin() {
		d[14] = 0x80 | 0x40 // LBPME, LBPRZ
	}
}

// execReadCapacity16: READ CAPACITY(16).
func execReadCapacity16(lu *LU, c *Command, b cdb, it *itl) {
	var d [32]byte
	lu.readCapacity16(&d)
	c.respond(d[:], int(b.u32(10)))
}

// Provisioning status of GET LBA STATUS descriptors.
const lbaMappedOrUnknown = 0x0

// execGetLBAStatus: GET LBA STATUS. The backstore does not report which
// blocks are allocated, so one descriptor covers the blocks from the
// starting LBA with provisioning status 0h, "mapped or unknown" (SBC-4
// 5.7.2), which is what a reader of a thin LU may always be told.
func execGetLBAStatus(lu *LU, c *Command, b cdb, it *itl) {
	lba := b.u64(2)
	n := lu.blocks.Load()
	if lba >= n {
		c.fail(senseLBAOutOfRange)
		return
	}
	var d [24]byte
	binary.BigEndian.PutUint32(d[0:4], 20)
	binary.BigEndian.PutUint64(d[8:16], lba)
	binary.BigEndian.PutUint32(d[16:20], uint32(min(n-lba, 0xffffffff)))
	d[20] = lbaMappedOrUnknown
	c.respond(d[:], int(b.u32(10)))
}
