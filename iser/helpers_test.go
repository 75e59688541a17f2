package iser

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
)

// unhex parses a hex dump like "01 c0 00 00" (spaces and newlines ignored)
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

// be32 returns v big-endian.
func be32(v uint32) []byte { return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }

// byteDiff describes up to 16 differing bytes of got and want.
func byteDiff(got, want []byte) string {
	var sb strings.Builder
	if len(got) != len(want) {
		fmt.Fprintf(&sb, "length %d, want %d; ", len(got), len(want))
	}
	n := 0
	for i := 0; i < min(len(got), len(want)); i++ {
		if got[i] != want[i] {
			fmt.Fprintf(&sb, "byte %d: got %#02x want %#02x; ", i, got[i], want[i])
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

// dirty returns a 48-byte buffer full of 0xff, so that encoders are seen to
// clear reserved bytes.
func dirty() []byte {
	b := make([]byte, BHSSize)
	for i := range b {
		b[i] = 0xff
	}
	return b
}

// textOf renders key=value text with '|' for NUL, for readable diffs.
func textOf(b []byte) string { return strings.ReplaceAll(string(b), "\x00", "|") }

// kvText builds key=value text from "k=v" strings.
func kvText(pairs ...string) []byte {
	var b []byte
	for _, p := range pairs {
		b = append(b, p...)
		b = append(b, 0)
	}
	return b
}
