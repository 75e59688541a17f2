package main

import (
	"log/slog"
	"slices"
	"sync"
	"testing"
)

func TestProcGovernor(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var sets []int
	set := func(n int) int {
		mu.Lock()
		defer mu.Unlock()
		sets = append(sets, n)
		return 0
	}
	g := newProcGovernor(3, set, slog.New(slog.DiscardHandler))
	// One P with no queue; one per queue up to 3; back down as they end.
	for _, d := range []int{1, 1, 1, 1, 1, -1, -1, -1, -1, -1} {
		g.hook(d)
	}
	want := []int{1, 2, 3, 2, 1}
	if !slices.Equal(sets, want) {
		t.Fatalf("GOMAXPROCS set to %v, want %v", sets, want)
	}
	// Concurrent connects and disconnects end where they started.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				g.hook(1)
				g.hook(-1)
			}
		}()
	}
	wg.Wait()
	if g.cur != 1 || g.queues != 0 {
		t.Fatalf("after balanced hooks: %d Ps for %d queues, want 1 for 0", g.cur, g.queues)
	}
}
