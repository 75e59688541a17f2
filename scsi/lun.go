package scsi

import "encoding/binary"

// MaxLUN is the largest LUN number the target maps: SAM-5 flat space
// addressing carries 14 bits.
const MaxLUN = 16383

// EncodeLUN returns the 8-byte SAM-5 LUN structure for LUN number n, as
// REPORT LUNS reports it and as transports put it on the wire: peripheral
// device addressing (00b) for LUNs below 256, flat space addressing (01b)
// above. n must not exceed MaxLUN.
func EncodeLUN(n uint64) [8]byte {
	var b [8]byte
	if n < 256 {
		b[1] = uint8(n)
	} else {
		binary.BigEndian.PutUint16(b[0:2], 0x4000|uint16(n&0x3fff))
	}
	return b
}

// DecodeLUN returns the LUN number of an 8-byte SAM-5 LUN structure in
// peripheral device (00b) or flat space (01b) addressing with a single
// level. Other addressing methods and multi-level LUNs return an error
// wrapping errLUNFormat; transports then answer with LOGICAL UNIT NOT
// SUPPORTED by passing a LUN number above MaxLUN.
func DecodeLUN(b [8]byte) (uint64, error) {
	if binary.BigEndian.Uint64(b[:])&0x0000ffffffffffff != 0 {
		return 0, errLUNFormat
	}
	switch b[0] >> 6 {
	case 0:
		if b[0] != 0 { // bus identifier
			return 0, errLUNFormat
		}
		return uint64(b[1]), nil
	case 1:
		return uint64(binary.BigEndian.Uint16(b[0:2]) & 0x3fff), nil
	}
	return 0, errLUNFormat
}
