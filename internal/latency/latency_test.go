package latency

import (
	"testing"
	"time"
)

func TestPercentiles(t *testing.T) {
	t.Parallel()
	var h Histogram
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 500 * time.Microsecond}, {99, 990 * time.Microsecond}, {100, 1000 * time.Microsecond}} {
		got := h.Percentile(tc.p)
		if d := float64(got-tc.want) / float64(tc.want); d > 0.07 || d < -0.07 {
			t.Errorf("p%v = %v, want %v within 7%%", tc.p, got, tc.want)
		}
	}
	if h.Count() != 1000 || h.Mean() != 500500*time.Nanosecond || h.Max() != time.Millisecond {
		t.Errorf("count %d mean %v max %v", h.Count(), h.Mean(), h.Max())
	}
	var o Histogram
	o.Add(&h)
	if o.Percentile(50) != h.Percentile(50) || o.Count() != h.Count() {
		t.Error("Add lost counts")
	}
}

func TestBucketsMonotonic(t *testing.T) {
	t.Parallel()
	prev := -1
	for ns := uint64(0); ns < 1<<20; ns += 7 {
		b := bucket(ns)
		if b < prev || lower(b) > ns || lower(b+1) <= ns {
			t.Fatalf("bucket(%d)=%d lower %d next %d", ns, b, lower(b), lower(b+1))
		}
		prev = b
	}
	if bucket(^uint64(0)) >= numBuckets {
		t.Fatal("max value out of range")
	}
}

func TestRecordAllocs(t *testing.T) {
	var h Histogram
	if n := testing.AllocsPerRun(100, func() { h.Record(123 * time.Microsecond) }); n != 0 {
		t.Fatalf("Record allocates %v", n)
	}
}
