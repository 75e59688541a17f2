package backstore

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// LatencyBuckets is the number of buckets of a latency histogram. Bucket 0
// counts operations faster than 1µs; bucket i (0 < i < LatencyBuckets-1)
// counts latencies in [2^(i-1)µs, 2^i µs); the last bucket counts everything
// from 2^(LatencyBuckets-2)µs (about 4.2 s) up.
const LatencyBuckets = 24

// LatencyBucketUpper returns the exclusive upper bound of histogram bucket i,
// or 0 for the last (unbounded) bucket and for an invalid i.
func LatencyBucketUpper(i int) time.Duration {
	if i < 0 || i >= LatencyBuckets-1 {
		return 0
	}
	return time.Duration(1<<i) * time.Microsecond
}

// Latency is a latency histogram of one operation type.
type Latency struct {
	// Sum is the total time spent in the operations counted by Buckets.
	Sum time.Duration
	// Buckets counts operations by latency; see LatencyBuckets.
	Buckets [LatencyBuckets]uint64
}

// Count returns the number of operations in the histogram.
func (l *Latency) Count() uint64 {
	var n uint64
	for _, b := range l.Buckets {
		n += b
	}
	return n
}

// Mean returns the mean latency, or 0 without operations.
func (l *Latency) Mean() time.Duration {
	n := l.Count()
	if n == 0 {
		return 0
	}
	return l.Sum / time.Duration(n)
}

// OpStats are the counters of one operation type.
type OpStats struct {
	// Ops counts the operations that reached the medium, failed or not.
	Ops uint64
	// Bytes counts the bytes of the operations that succeeded.
	Bytes uint64
	// Errors counts the operations that failed on the medium (I/O errors,
	// not refused requests; see Stats.Rejected).
	Errors uint64
	// Latency is the histogram of the latencies of all counted operations.
	Latency Latency
}

// Stats is a snapshot of a disk's counters since it was opened. Counters
// only grow; a metrics exporter computes rates from two snapshots.
type Stats struct {
	Read        OpStats // ReadAt, ReadvAt and ViewAt
	Write       OpStats // WriteAt and WritevAt, FUA writes included
	Flush       OpStats // Bytes is always 0
	Discard     OpStats // Discard (and Block.Trim)
	WriteZeroes OpStats // WriteZeroes
	// FUAWrites counts writes with the FUA flag (also counted in Write).
	FUAWrites uint64
	// Rejected counts requests refused before any I/O: range errors,
	// writes to a read-only disk, misaligned direct I/O buffers and I/O
	// after Close.
	Rejected uint64
}

// Errors returns the total of the medium errors of all operation types.
func (s *Stats) Errors() uint64 {
	return s.Read.Errors + s.Write.Errors + s.Flush.Errors + s.Discard.Errors + s.WriteZeroes.Errors
}

// opCounters collects OpStats with atomics, without locks or allocation.
type opCounters struct {
	ops, bytes, errors, sum atomic.Uint64
	buckets                 [LatencyBuckets]atomic.Uint64
}

// done records one operation of n bytes that took d.
func (c *opCounters) done(n int64, d time.Duration, err error) {
	if d < 0 {
		d = 0
	}
	c.ops.Add(1)
	if err != nil {
		c.errors.Add(1)
	} else {
		c.bytes.Add(uint64(n))
	}
	c.sum.Add(uint64(d))
	c.buckets[latencyBucket(d)].Add(1)
}

func (c *opCounters) snapshot() OpStats {
	s := OpStats{
		Ops:    c.ops.Load(),
		Bytes:  c.bytes.Load(),
		Errors: c.errors.Load(),
	}
	s.Latency.Sum = time.Duration(c.sum.Load())
	for i := range c.buckets {
		s.Latency.Buckets[i] = c.buckets[i].Load()
	}
	return s
}

// latencyBucket returns the histogram bucket of d.
func latencyBucket(d time.Duration) int {
	us := uint64(d / time.Microsecond)
	i := bits.Len64(us)
	if i >= LatencyBuckets {
		i = LatencyBuckets - 1
	}
	return i
}

// statsCollector holds a disk's live counters. All methods are safe for
// concurrent use and allocate nothing.
type statsCollector struct {
	// epoch is the disk's creation time. Latencies are measured as
	// differences of time.Since(epoch), which reads only the monotonic
	// clock and costs about half of a time.Now.
	epoch                               time.Time
	read, write, flush, discard, zeroes opCounters
	fua, rejected                       atomic.Uint64
}

// now returns the monotonic time since the epoch, the start of a latency
// measurement.
func (s *statsCollector) now() time.Duration { return time.Since(s.epoch) }

// since returns the time elapsed since start, a value of now.
func (s *statsCollector) since(start time.Duration) time.Duration { return s.now() - start }

func (s *statsCollector) op(op Op) *opCounters {
	switch op {
	case OpRead:
		return &s.read
	case OpWrite:
		return &s.write
	case OpFlush:
		return &s.flush
	case OpDiscard:
		return &s.discard
	default:
		return &s.zeroes
	}
}

func (s *statsCollector) snapshot() Stats {
	return Stats{
		Read:        s.read.snapshot(),
		Write:       s.write.snapshot(),
		Flush:       s.flush.snapshot(),
		Discard:     s.discard.snapshot(),
		WriteZeroes: s.zeroes.snapshot(),
		FUAWrites:   s.fua.Load(),
		Rejected:    s.rejected.Load(),
	}
}

// reject counts a refused request and returns err unchanged.
func (s *statsCollector) reject(err error) error {
	s.rejected.Add(1)
	return err
}

// StatsReporter is implemented by every disk of this package: Mem, File,
// Block and Null.
type StatsReporter interface {
	// Stats returns a snapshot of the disk's counters. It is safe for
	// concurrent use and does not allocate.
	Stats() Stats
}
