package rdmaq

import (
	"testing"
	"unsafe"
)

// TestPageBuffer: every size comes page aligned, of the length asked.
func TestPageBuffer(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 64, 4095, 4096, 4160, 8192, 12288, 16384, 32 << 10, 32<<10 + 64, 65536, 272 << 10, 1 << 20} {
		for range 4 {
			b := pageBuffer(n)
			if len(b) != n || cap(b) < n {
				t.Fatalf("pageBuffer(%d): len %d cap %d", n, len(b), cap(b))
			}
			if a := uintptr(unsafe.Pointer(unsafe.SliceData(b))) % pageSize; a != 0 {
				t.Fatalf("pageBuffer(%d) at %#x modulo the page", n, a)
			}
		}
	}
}
