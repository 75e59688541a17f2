package host

import (
	"encoding/binary"
	"fmt"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/scsi"
)

// Data names the data transfer of an IO.
type Data uint8

// Data transfers.
const (
	// DataNone: no data (SYNCHRONIZE CACHE).
	DataNone Data = iota
	// DataBuffer: the request's buffer, Buf.Bytes()[BufOff:BufOff+Length]
	// (data-in for a read, data-out for a write).
	DataBuffer
	// DataParam: the parameter list BuildIO wrote into its param argument
	// (data-out, IO.Len bytes: UNMAP).
	DataParam
	// DataZeroBlock: one logical block of zeroes (data-out, IO.Len bytes:
	// WRITE SAME). The transport keeps such a block, registered, for the
	// LU's lifetime; it is only read.
	DataZeroBlock
)

// IO is the SCSI command of one blockdev request, as BuildIO returns it.
type IO struct {
	// Name names the command for errors (a constant: no allocation).
	Name string
	// Dir is the direction of the data; Data what to transfer and Len its
	// length in bytes (the expected data transfer length).
	Dir  scsi.Dir
	Data Data
	Len  int
}

// UnmapParamLen is the length of the UNMAP parameter list BuildIO writes:
// the 8-byte header and one 16-byte block descriptor.
const UnmapParamLen = 24

// BuildIO writes the 16-byte CDB of request r (already checked with
// blockdev.Check against the LU's Info) into cdb and, for a discard, the
// UNMAP parameter list into param (at least UnmapParamLen bytes), and says
// what data to move. It allocates nothing: the async I/O paths call it per
// request with per-slot storage.
//
//   - OpRead: READ(16). OpWrite: WRITE(16), with FUA when the request asks
//     and the LU reports DPOFUA (CapFUA).
//   - OpFlush: SYNCHRONIZE CACHE(16) of the whole medium (LBA 0, 0 blocks).
//   - OpDiscard: UNMAP with one block descriptor (Describe offers
//     CapDiscard only when the LU supports UNMAP).
//   - OpWriteZeroes: WRITE SAME(16) with one block of zeroes as data-out,
//     UNMAP and NDOB clear.
//
// Why a zero block rather than NDOB (no data-out buffer, SBC-4): NDOB would
// save one block of transfer per command, but only rdisk's own target
// (scsi/sbc.go execWriteSame) honours it. Linux LIO refuses it:
// drivers/target/target_core_sbc.c sbc_setup_write_same returns
// TCM_INVALID_CDB_FIELD ("WRITE SAME with NDOB not supported") for byte 1
// bit 0, and sbc_parse_cdb sizes WRITE_SAME_16's data-out as one block.
// tgt (usr/sbc.c sbc_rw) does not look at the bit, accepts the zero-length
// data-out ("neither ==0 or ==blocksize") and then writes each block from
// the absent data-out buffer (usr/bs_rdwr.c), failing with MEDIUM ERROR or
// writing garbage; its REPORT SUPPORTED OPERATION CODES usage data
// (usr/scsi.c write_same_16, byte 1 mask 0xf8) shows NDOB unsupported. The
// Linux sd driver itself never sets NDOB: sd_setup_write_zeroes_cmnd sends
// WRITE SAME(16) (or (10)) with a zeroed special payload page of one
// logical block (sd_setup_write_same16_cmnd, data_len = sector_size).
// rdisk's target recognizes an all-zero block and writes zeroes without
// the pattern (backstore ZeroWriter), so the block costs it nothing more.
// The UNMAP bit stays clear: write-zeroes keeps the blocks provisioned (as
// Linux with REQ_NOUNMAP, NVMe Write Zeroes without DEAC); OpDiscard is
// the request that deallocates.
func (lu *LU) BuildIO(cdb *[16]byte, param []byte, r *blockdev.Request) (IO, error) {
	*cdb = [16]byte{}
	lba := uint64(r.Offset) >> lu.Shift
	nlb := uint32(uint64(r.Length) >> lu.Shift)
	switch r.Op {
	case blockdev.OpRead:
		putRW16(cdb, scsi.OpRead16, 0, lba, nlb)
		return IO{Name: NameRead16, Dir: scsi.DirIn, Data: DataBuffer, Len: r.Length}, nil
	case blockdev.OpWrite:
		var flags uint8
		if r.Flags&blockdev.FUA != 0 && lu.Caps.Has(blockdev.CapFUA) {
			flags = 0x08 // FUA
		}
		putRW16(cdb, scsi.OpWrite16, flags, lba, nlb)
		return IO{Name: NameWrite16, Dir: scsi.DirOut, Data: DataBuffer, Len: r.Length}, nil
	case blockdev.OpFlush:
		cdb[0] = scsi.OpSyncCache16
		return IO{Name: NameSyncCache16, Dir: scsi.DirNone}, nil
	case blockdev.OpDiscard:
		if len(param) < UnmapParamLen {
			return IO{}, fmt.Errorf("%s: %d-byte parameter area: %w", NameUnmap, len(param), ErrShortData)
		}
		PutUnmapParams(param, lba, nlb)
		cdb[0] = scsi.OpUnmap
		binary.BigEndian.PutUint16(cdb[7:9], UnmapParamLen)
		return IO{Name: NameUnmap, Dir: scsi.DirOut, Data: DataParam, Len: UnmapParamLen}, nil
	case blockdev.OpWriteZeroes:
		putRW16(cdb, scsi.OpWriteSame16, 0, lba, nlb)
		return IO{Name: NameWriteSame16, Dir: scsi.DirOut, Data: DataZeroBlock, Len: lu.BlockSize}, nil
	}
	return IO{}, blockdev.ErrInvalid
}

// putRW16 writes the common 16-byte block command format: byte 1 flags,
// LOGICAL BLOCK ADDRESS at 2, NUMBER OF LOGICAL BLOCKS at 10.
func putRW16(cdb *[16]byte, op, flags uint8, lba uint64, nlb uint32) {
	cdb[0], cdb[1] = op, flags
	binary.BigEndian.PutUint64(cdb[2:10], lba)
	binary.BigEndian.PutUint32(cdb[10:14], nlb)
}

// PutUnmapParams writes an UNMAP parameter list with one block descriptor
// (SBC-3 5.28.2) into p[:UnmapParamLen]: UNMAP DATA LENGTH 22, UNMAP BLOCK
// DESCRIPTOR DATA LENGTH 16, then the LBA and the number of blocks.
func PutUnmapParams(p []byte, lba uint64, nlb uint32) {
	p = p[:UnmapParamLen]
	clear(p)
	binary.BigEndian.PutUint16(p[0:2], UnmapParamLen-2)
	binary.BigEndian.PutUint16(p[2:4], 16)
	binary.BigEndian.PutUint64(p[8:16], lba)
	binary.BigEndian.PutUint32(p[16:20], nlb)
}
