package backstore

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fixture is a hex fixture from testdata: named sections ("@name" lines) of
// hex bytes, with "#" comments.
type fixture struct {
	names    []string // in file order
	sections map[string][]byte
}

func (f *fixture) get(t testing.TB, name string) []byte {
	t.Helper()
	b, ok := f.sections[name]
	if !ok {
		t.Fatalf("fixture has no section %q (have %v)", name, f.names)
	}
	return b
}

// withPrefix returns the sections whose name starts with prefix, in file
// order.
func (f *fixture) withPrefix(prefix string) [][]byte {
	var out [][]byte
	for _, n := range f.names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, f.sections[n])
		}
	}
	return out
}

func loadFixture(t testing.TB, name string) *fixture {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	f, err := parseFixture(raw)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return f
}

func parseFixture(raw []byte) (*fixture, error) {
	f := &fixture{sections: map[string][]byte{}}
	cur := ""
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for line := 1; sc.Scan(); line++ {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "@"):
			cur = l[1:]
			if _, dup := f.sections[cur]; dup {
				return nil, fmt.Errorf("line %d: duplicate section %q", line, cur)
			}
			f.names = append(f.names, cur)
			f.sections[cur] = []byte{}
		default:
			if cur == "" {
				return nil, fmt.Errorf("line %d: data before the first section", line)
			}
			b, err := hex.DecodeString(strings.ReplaceAll(l, " ", ""))
			if err != nil {
				return nil, fmt.Errorf("line %d: %v", line, err)
			}
			f.sections[cur] = append(f.sections[cur], b...)
		}
	}
	return f, sc.Err()
}

// fillPattern fills p, which sits at byte offset off of a disk, with a
// pattern unique to (offset, seed), so that misplaced data is detected.
func fillPattern(p []byte, off int64, seed uint64) {
	for i := 0; i+8 <= len(p); i += 8 {
		binary.LittleEndian.PutUint64(p[i:], uint64(off+int64(i))*0x9e3779b97f4a7c15^seed)
	}
}

// checkPattern reports the first byte offset where p differs from the
// pattern, or -1.
func checkPattern(p []byte, off int64, seed uint64) int64 {
	var want [8]byte
	for i := 0; i+8 <= len(p); i += 8 {
		binary.LittleEndian.PutUint64(want[:], uint64(off+int64(i))*0x9e3779b97f4a7c15^seed)
		if !bytes.Equal(p[i:i+8], want[:]) {
			return off + int64(i)
		}
	}
	return -1
}

// firstNonZero returns the index of the first non-zero byte of p, or -1.
func firstNonZero(p []byte) int {
	for i, c := range p {
		if c != 0 {
			return i
		}
	}
	return -1
}
