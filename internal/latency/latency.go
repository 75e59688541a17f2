package latency

import (
	"math/bits"
	"time"
)

const (
	subBits    = 4
	subBuckets = 1 << subBits
	numBuckets = 64 * subBuckets
)

// Histogram counts durations in nanoseconds.
type Histogram struct {
	counts [numBuckets]uint64
	n      uint64
	sum    uint64
	max    uint64
}

func bucket(ns uint64) int {
	if ns < subBuckets {
		return int(ns)
	}
	e := bits.Len64(ns) - 1 // ns in [2^e, 2^(e+1))
	m := (ns >> (e - subBits)) & (subBuckets - 1)
	return (e-subBits+1)*subBuckets + int(m)
}

// lower returns the smallest value of bucket i.
func lower(i int) uint64 {
	if i < subBuckets {
		return uint64(i)
	}
	e := i/subBuckets + subBits - 1
	m := uint64(i % subBuckets)
	return 1<<e | m<<(e-subBits)
}

// Record adds one duration.
func (h *Histogram) Record(d time.Duration) {
	ns := uint64(max(d, 0))
	h.counts[bucket(ns)]++
	h.n++
	h.sum += ns
	h.max = max(h.max, ns)
}

// Add merges o into h.
func (h *Histogram) Add(o *Histogram) {
	for i := range h.counts {
		h.counts[i] += o.counts[i]
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// Count is the number of recorded durations.
func (h *Histogram) Count() uint64 { return h.n }

// Mean is the average duration.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / h.n)
}

// Max is the longest duration.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Percentile returns the duration below which p percent (0-100) of the
// recorded durations fall, as the midpoint of its bucket.
func (h *Histogram) Percentile(p float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(p / 100 * float64(h.n))
	if rank >= h.n {
		rank = h.n - 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen > rank {
			lo, hi := lower(i), lower(i+1)
			v := lo + (hi-lo)/2
			return time.Duration(min(v, h.max))
		}
	}
	return time.Duration(h.max)
}
