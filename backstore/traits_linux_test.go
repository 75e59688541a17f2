package backstore

import (
	"path/filepath"
	"testing"
)

// TestTraits: each kind of disk says when it waits and whether discarded
// ranges read back as zeroes; a disk that says nothing gets the cautious
// answer.
func TestTraits(t *testing.T) {
	t.Parallel()
	mem, err := NewMem(1<<20, 512)
	if err != nil {
		t.Fatal(err)
	}
	null := NewNull(1<<20, 512)
	dir := t.TempDir()
	buffered, err := OpenFile(filepath.Join(dir, "b.img"), FileOptions{Create: true, Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer buffered.Close()
	direct, err := OpenFile(filepath.Join(dir, "d.img"), FileOptions{Create: true, Size: 1 << 20, Direct: true})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	for _, tc := range []struct {
		name string
		d    Disk
		want Traits
	}{
		{"mem", mem, Traits{Waits: WaitsNever, ZeroesAfterDiscard: true}},
		{"null", null, Traits{Waits: WaitsNever}},
		{"buffered file", buffered, Traits{Waits: WaitsOnCacheMiss, ZeroesAfterDiscard: true}},
		{"direct file", direct, Traits{Waits: WaitsAlways, ZeroesAfterDiscard: true}},
		{"unknown disk", struct{ Disk }{mem}, Traits{Waits: WaitsAlways}},
	} {
		if got := TraitsOf(tc.d); got != tc.want {
			t.Errorf("%s: TraitsOf = %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if s := WaitsOnCacheMiss.String(); s != "on cache miss" {
		t.Errorf("WaitsOnCacheMiss.String() = %q", s)
	}
}
