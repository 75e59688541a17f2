package bench

import (
	"encoding/binary"
	"fmt"
)

// Verify block format. Every logical block a verifying run writes starts
// with a header naming the block and the write, and continues with a
// pseudo-random stream derived from the header, so a read can tell a good
// block from a stale, misdirected or corrupted one without keeping copies:
//
//	bytes  0..7   magic "RDSKVRFY"
//	bytes  8..15  LBA (little endian)
//	bytes 16..23  seed of the run
//	bytes 24..27  generation: how many times the run wrote the block
//	bytes 28..31  zero
//	bytes 32..    xorshift64* stream seeded from LBA, seed and generation
const (
	verifyMagic   = "RDSKVRFY"
	verifyHdrSize = 32
)

// genUnknown marks a unit whose content is uncertain (a write to it failed).
const genUnknown = ^uint32(0)

// fillBlock writes the verify pattern of one logical block.
func fillBlock(b []byte, lba, seed uint64, gen uint32) {
	copy(b, verifyMagic)
	binary.LittleEndian.PutUint64(b[8:], lba)
	binary.LittleEndian.PutUint64(b[16:], seed)
	binary.LittleEndian.PutUint32(b[24:], gen)
	binary.LittleEndian.PutUint32(b[28:], 0)
	fillStream(b[verifyHdrSize:], lba, seed, gen)
}

func fillStream(b []byte, lba, seed uint64, gen uint32) {
	x := seed ^ (lba+1)*0x9e3779b97f4a7c15 ^ uint64(gen)<<32 ^ 0x2545f4914f6cdd1d
	if x == 0 {
		x = 1
	}
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x ^= x >> 12
		x ^= x << 25
		x ^= x >> 27
		binary.LittleEndian.PutUint64(b[i:], x*0x2545f4914f6cdd1d)
	}
	if i < len(b) {
		var t [8]byte
		x ^= x >> 12
		x ^= x << 25
		x ^= x >> 27
		binary.LittleEndian.PutUint64(t[:], x*0x2545f4914f6cdd1d)
		copy(b[i:], t[:])
	}
}

// checkBlock verifies one logical block read from lba. With exact, the
// block must hold generation gen of this run; otherwise (a read-only run
// checking an earlier run's blocks) it must be a consistent block of this
// seed at this LBA, of any generation. scratch is at least len(b) bytes.
// It returns "" or why the block is bad.
func checkBlock(b, scratch []byte, lba, seed uint64, gen uint32, exact bool) string {
	if string(b[:8]) != verifyMagic {
		if allZero(b) {
			return "block is all zeroes (never written by a --verify run)"
		}
		return "no verify header (never written by a --verify run, or overwritten)"
	}
	hl := binary.LittleEndian.Uint64(b[8:])
	hs := binary.LittleEndian.Uint64(b[16:])
	hg := binary.LittleEndian.Uint32(b[24:])
	switch {
	case hl != lba:
		return fmt.Sprintf("holds the data of LBA %d (misdirected write or read)", hl)
	case hs != seed:
		return fmt.Sprintf("written by another run (seed %#x, want %#x)", hs, seed)
	case exact && hg != gen:
		return fmt.Sprintf("stale data: write #%d of the block, want #%d (a write was lost)", hg, gen)
	}
	s := scratch[:len(b)-verifyHdrSize]
	fillStream(s, lba, seed, hg)
	p := b[verifyHdrSize:]
	for i := range p {
		if p[i] != s[i] {
			return fmt.Sprintf("data corrupted at byte %d of the block", verifyHdrSize+i)
		}
	}
	return ""
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
