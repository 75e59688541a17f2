package backstore

import (
	"slices"
	"testing"
)

func TestBatch(t *testing.T) {
	t.Parallel()
	var b Batch
	var got []int
	b.Defer(func() { got = append(got, 1) })
	b.Defer(func() {
		got = append(got, 2)
		b.Defer(func() { got = append(got, 4) }) // deferred while running: runs in this Run
	})
	b.Defer(func() { got = append(got, 3) })
	if b.Len() != 3 {
		t.Fatalf("Len %d, want 3", b.Len())
	}
	b.Run()
	if !slices.Equal(got, []int{1, 2, 3, 4}) {
		t.Fatalf("ran %v, want [1 2 3 4]", got)
	}
	if b.Len() != 0 {
		t.Fatalf("Len %d after Run, want 0", b.Len())
	}
	b.Run() // empty: nothing
	if len(got) != 4 {
		t.Fatalf("an empty Run ran something: %v", got)
	}
}

// TestBatchAllocs: once its list has grown, a batch allocates nothing.
// (Not parallel: AllocsPerRun.)
func TestBatchAllocs(t *testing.T) {
	var b Batch
	f := func() {}
	b.Defer(f)
	b.Run()
	if n := testing.AllocsPerRun(100, func() { b.Defer(f); b.Run() }); n != 0 {
		t.Errorf("Defer+Run allocates %.0f times once grown, want 0", n)
	}
}
