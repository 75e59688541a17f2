package workers

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestPoolRunsConcurrentlyAndCloses(t *testing.T) {
	t.Parallel()
	var hook atomic.Int64
	var started sync.WaitGroup
	started.Add(3)
	release := make(chan struct{})
	var ran atomic.Int64
	p := New(3, 10, func(v int) {
		if v < 3 {
			started.Done()
			<-release // three requests block at once: three workers
		}
		ran.Add(int64(v))
	}, func(d int) { hook.Add(int64(d)) })
	if got := hook.Load(); got != 0 {
		t.Fatalf("hook before the first Submit = %d, want 0 (workers start lazily)", got)
	}
	for i := range 5 {
		if !p.Submit(i) {
			t.Fatalf("Submit(%d) refused on an open pool", i)
		}
	}
	started.Wait()
	if got := hook.Load(); got != 1 {
		t.Fatalf("hook while running = %d, want 1", got)
	}
	close(release)
	p.Close()
	if got := ran.Load(); got != 0+1+2+3+4 {
		t.Fatalf("ran %d, want every request (10)", got)
	}
	if got := hook.Load(); got != 0 {
		t.Fatalf("hook after Close = %d, want 0", got)
	}
	if p.Submit(9) {
		t.Fatal("Submit after Close accepted")
	}
	p.Close() // idempotent
}

func TestPoolNeverStarted(t *testing.T) {
	t.Parallel()
	calls := 0
	p := New(0, 1, func(int) {}, func(int) { calls++ })
	p.Close()
	if calls != 0 {
		t.Fatalf("hook called %d times for a pool that never started", calls)
	}
	if p.n != Default {
		t.Fatalf("n = %d, want Default %d", p.n, Default)
	}
}
