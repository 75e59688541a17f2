package backstore

import "unsafe"

// AlignedBuffer returns a zeroed buffer of size bytes whose address is a
// multiple of align, for disks opened with direct I/O (see the disks'
// DirectAlignment). An align that is not a positive power of two means
// 4096. Its capacity equals its length, so appending never writes into the
// alignment padding. Allocate buffers once and reuse them:
// this is not meant to be called per I/O.
func AlignedBuffer(size, align int) []byte {
	if align < 1 || align&(align-1) != 0 {
		align = 4096
	}
	if size <= 0 {
		return []byte{}
	}
	b := make([]byte, size+align)
	pad := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) & uintptr(align-1)); r != 0 {
		pad = align - r
	}
	return b[pad : pad+size : pad+size]
}

// isAligned reports whether the address of p is a multiple of align (a power
// of two). An empty slice is aligned.
func isAligned(p []byte, align int) bool {
	if len(p) == 0 {
		return true
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(p)))&uintptr(align-1) == 0
}
