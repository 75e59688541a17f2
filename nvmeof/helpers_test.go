package nvmeof

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
)

// unhex parses a hex dump like "7f 40 00 00" (spaces and newlines ignored)
// and pads it with zeroes to size bytes (size 0: no padding).
func unhex(t testing.TB, s string, size int) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatalf("bad hex in test: %v", err)
	}
	if size > len(b) {
		b = append(b, make([]byte, size-len(b))...)
	}
	return b
}

// at writes v into b at off: golden buffers are built from byte offsets
// read off the Linux structs by hand, never from this package's constants.
func at(b []byte, off int, v ...byte) { copy(b[off:], v) }

// atString writes s into b at off.
func atString(b []byte, off int, s string) { copy(b[off:], s) }

// byteDiff describes up to 16 differing bytes of got and want.
func byteDiff(got, want []byte) string {
	var sb strings.Builder
	if len(got) != len(want) {
		fmt.Fprintf(&sb, "length %d, want %d; ", len(got), len(want))
	}
	n := 0
	for i := 0; i < min(len(got), len(want)); i++ {
		if got[i] != want[i] {
			fmt.Fprintf(&sb, "byte %d (%#x): got %#02x want %#02x; ", i, i, got[i], want[i])
			if n++; n == 16 {
				sb.WriteString("...")
				break
			}
		}
	}
	return sb.String()
}

func checkBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if d := byteDiff(got, want); d != "" {
		t.Errorf("%s differs from golden bytes: %s", what, d)
	}
}
