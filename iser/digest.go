package iser

import (
	"encoding/binary"
	"hash/crc32"
)

// iSCSI header and data digests are CRC32C (Castagnoli, RFC 7143 section
// 13.1 and RFC 3720 appendix B.4). The 32-bit result travels least
// significant byte first: Linux computes it with the crc32c shash, whose
// output is the little-endian CRC, and sends those bytes as they are (as do
// open-iscsi and libiscsi). RFC 3720 B.4 lists its test vectors in that
// byte order (32 zero bytes give aa 36 91 8a, the CRC 0x8a9136aa).

// castagnoli returns the CRC32C table. crc32.MakeTable returns the package's
// own table for Castagnoli (hardware accelerated where available) without
// allocating, so no package variable holds it.
func castagnoli() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) }

// CRC32C returns the CRC32C of b.
func CRC32C(b []byte) uint32 { return crc32.Checksum(b, castagnoli()) }

// HeaderDigest returns the header digest of a BHS and its AHS area.
func HeaderDigest(bhs, ahs []byte) uint32 {
	t := castagnoli()
	return crc32.Update(crc32.Update(0, t, bhs), t, ahs)
}

// DataDigest returns the data digest of a data segment: the CRC32C of the
// data followed by its zero padding.
func DataDigest(data []byte) uint32 {
	t := castagnoli()
	return updateZeros(crc32.Update(0, t, data), t, PadLength(len(data)))
}

// updateZeros extends crc over n zero bytes, the way crc32.Update would,
// without a zero buffer.
func updateZeros(crc uint32, t *crc32.Table, n int) uint32 {
	c := ^crc
	for ; n > 0; n-- {
		c = t[uint8(c)] ^ c>>8
	}
	return ^c
}

// PutDigest writes a digest in wire byte order (least significant byte
// first) into the first 4 bytes of b.
func PutDigest(b []byte, d uint32) { binary.LittleEndian.PutUint32(b, d) }

// GetDigest reads a digest in wire byte order.
func GetDigest(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
