package backstore

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// LatencyBuckets is the number of buckets of a latency histogram
// (Latency.Buckets). The buckets are not cumulative: each operation is
// counted in exactly one of them, by its latency d measured in nanoseconds:
//
//	bucket 0:                       d < 1µs
//	bucket i, 0 < i < LatencyBuckets-1: 2^(i-1)µs <= d < 2^i µs
//	bucket LatencyBuckets-1:        d >= 2^(LatencyBuckets-2)µs (about 4.19 s)
//
// so the upper bounds are 1µs, 2µs, 4µs, … 4.194304 s (2^22 µs), then none
// (LatencyBucketBounds lists them). A Prometheus histogram built from these
// buckets takes the bounds as its "le" values, sums the counts of buckets
// 0..i for the bucket of bound i, and puts the total count in "+Inf". The
// bounds are exclusive here and inclusive in Prometheus; at nanosecond
// resolution the difference is an operation that took exactly 2^i µs, which
// the histogram counts one bucket higher.
const LatencyBuckets = 24

// LatencyBucketUpper returns the exclusive upper bound of histogram bucket i,
// or 0 for the last (unbounded) bucket and for an invalid i.
func LatencyBucketUpper(i int) time.Duration {
	if i < 0 || i >= LatencyBuckets-1 {
		return 0
	}
	return time.Duration(1<<i) * time.Microsecond
}

// LatencyBucketBounds returns the exclusive upper bounds of the histogram
// buckets 0 to LatencyBuckets-2, in increasing order: 1µs, 2µs, 4µs, …,
// 2^(LatencyBuckets-2)µs. The last bucket (index LatencyBuckets-1) is
// unbounded and has no entry, so the slice has LatencyBuckets-1 elements,
// the layout of Prometheus bucket bounds (whose "+Inf" bucket is implicit).
// Each call returns a new slice.
func LatencyBucketBounds() []time.Duration {
	b := make([]time.Duration, LatencyBuckets-1)
	for i := range b {
		b[i] = LatencyBucketUpper(i)
	}
	return b
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
	// InFlight is a gauge, not a counter: the requests of all operation
	// types that have started on the medium (they passed the checks that
	// count Rejected) and have not finished yet. It is 0 on an idle disk.
	// Requests that complete without doing any work (Flush of Mem and
	// Null, writes to Null, zero-length discards and write-zeroes of File
	// and Block) are counted in their OpStats but never show here.
	InFlight int64
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
	inFlight                            atomic.Int64
}

// now returns the monotonic time since the epoch, the start of a latency
// measurement.
func (s *statsCollector) now() time.Duration { return time.Since(s.epoch) }

// since returns the time elapsed since start, a value of now.
func (s *statsCollector) since(start time.Duration) time.Duration { return s.now() - start }

// begin marks a request in flight and returns its start time, a value of
// now. Every begin is matched by one end or one abandon.
func (s *statsCollector) begin() time.Duration {
	s.inFlight.Add(1)
	return s.now()
}

// end records the operation that began at start on c (n bytes, err) and
// takes it out of flight.
func (s *statsCollector) end(c *opCounters, n int64, start time.Duration, err error) {
	c.done(n, s.since(start), err)
	s.inFlight.Add(-1)
}

// abandon takes a request that began out of flight without counting it
// (ReadAtNoWait declining).
func (s *statsCollector) abandon() { s.inFlight.Add(-1) }

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
		InFlight:    s.inFlight.Load(),
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
