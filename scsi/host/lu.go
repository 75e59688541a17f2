package host

import (
	"fmt"

	"github.com/rdisk/rdisk/blockdev"
)

// Write-zeroes and discard lengths, in logical blocks, when the LU does not
// report a MAXIMUM WRITE SAME LENGTH, and the most used when it reports a
// larger one: Linux sd's SD_MAX_WS10_BLOCKS and SD_MAX_WS16_BLOCKS ("some
// devices can not handle block counts above 0xffff despite supporting
// WRITE SAME(16)", sd_config_write_same).
const (
	DefaultWriteSameBlocks = 0xffff
	MaxWriteSameBlocks     = 0x7fffff
)

// Pages is what a probe read from a logical unit. Nil pointers are pages
// the LU did not return (a CHECK CONDITION for an optional command).
type Pages struct {
	Inquiry      InquiryData
	Capacity     Capacity
	Limits       *BlockLimits
	Provisioning *Provisioning
	Mode         *ModeHeader
}

// LU describes a logical unit as a block device: what blockdev.Info needs,
// and what BuildIO needs to address it.
type LU struct {
	LUN uint64
	// BlockSize is 1<<Shift bytes; Blocks the capacity in blocks.
	BlockSize int
	Shift     uint
	Blocks    uint64
	// Caps are the blockdev capabilities: always CapFlush and
	// CapWriteZeroes; CapFUA with DPOFUA, CapReadOnly with WP (MODE
	// SENSE), CapDiscard when the LU supports UNMAP (see Describe).
	Caps blockdev.Caps
	// MaxTransfer is the largest read or write in bytes; MaxZeroes the
	// largest discard or write-zeroes.
	MaxTransfer int
	MaxZeroes   int64
	// Pages is what the description was derived from.
	Pages Pages
}

// Size is the capacity in bytes.
func (lu *LU) Size() int64 { return int64(lu.Blocks) << lu.Shift }

// Info returns the blockdev.Info of the LU, named name, with the
// transport's queues.
func (lu *LU) Info(name string, queues, depth int) blockdev.Info {
	return blockdev.Info{
		Name: name, BlockSize: lu.BlockSize, Size: lu.Size(), Queues: queues, QueueDepth: depth,
		MaxTransfer: lu.MaxTransfer, MaxZeroes: lu.MaxZeroes, Caps: lu.Caps,
	}
}

// Describe derives the block device description of LUN lun from its pages;
// maxTransfer is the transport's largest data transfer in bytes.
//
//   - Block size: a power of two from 512 to 65536 bytes.
//   - MaxTransfer: maxTransfer, lowered to the MAXIMUM TRANSFER LENGTH of
//     the block limits page, rounded down to whole blocks.
//   - Discard (UNMAP) only when READ CAPACITY(16) reports LBPME, the
//     provisioning page LBPU and the block limits page a non-zero MAXIMUM
//     UNMAP LBA COUNT and MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT (SBC-3
//     4.7.3.3, 6.5.3; Linux sd_discard_mode and sd_read_block_limits
//     decide the same way). A fully provisioned LU (no LBPME), one without
//     the pages, or one whose pages deny UNMAP gets no CapDiscard.
//   - MaxZeroes: the MAXIMUM WRITE SAME LENGTH (DefaultWriteSameBlocks
//     when not reported, at most MaxWriteSameBlocks) and, with discard,
//     the MAXIMUM UNMAP LBA COUNT, whichever is smaller: one limit serves
//     both operations.
//   - CapFUA when the MODE SENSE header has DPOFUA (LIO refuses FUA
//     writes to a device that does not advertise it); CapReadOnly when it
//     has WP. Without the header neither (as sd assumes no FUA then).
func Describe(lun uint64, p Pages, maxTransfer int) (LU, error) {
	bs := p.Capacity.BlockSize
	if bs < 512 || bs > 65536 || bs&(bs-1) != 0 {
		return LU{}, fmt.Errorf("%d-byte blocks: %w", bs, ErrGeometry)
	}
	shift := uint(9)
	for 1<<shift != bs {
		shift++
	}
	if p.Capacity.Blocks > uint64(1<<62)>>shift {
		return LU{}, fmt.Errorf("%d blocks of %d bytes: %w", p.Capacity.Blocks, bs, ErrGeometry)
	}
	lu := LU{LUN: lun, BlockSize: bs, Shift: shift, Blocks: p.Capacity.Blocks, Pages: p}
	xfer := maxTransfer
	if l := p.Limits; l != nil && l.MaxTransferBlocks != 0 {
		xfer = int(min(uint64(xfer), uint64(l.MaxTransferBlocks)<<shift))
	}
	xfer -= xfer % bs
	if xfer < bs {
		return LU{}, fmt.Errorf("%d-byte blocks exceed the %d-byte transfer limit: %w", bs, maxTransfer, ErrGeometry)
	}
	lu.MaxTransfer = xfer
	ws := uint64(DefaultWriteSameBlocks)
	if l := p.Limits; l != nil && l.MaxWriteSameBlocks != 0 {
		ws = min(l.MaxWriteSameBlocks, MaxWriteSameBlocks)
	}
	lu.Caps = blockdev.CapFlush | blockdev.CapWriteZeroes
	if m := p.Mode; m != nil {
		if m.DPOFUA {
			lu.Caps |= blockdev.CapFUA
		}
		if m.WriteProtected {
			lu.Caps |= blockdev.CapReadOnly
		}
	}
	if l, v := p.Limits, p.Provisioning; p.Capacity.LBPME && v != nil && v.LBPU && l != nil &&
		l.MaxUnmapLBACount != 0 && l.MaxUnmapDescriptors != 0 {
		lu.Caps |= blockdev.CapDiscard
		ws = min(ws, uint64(l.MaxUnmapLBACount))
	}
	lu.MaxZeroes = int64(ws) << shift
	return lu, nil
}
