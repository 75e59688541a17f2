package rbd

import (
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/rdisk/rdisk/backstore"
)

// opCounters collects a backstore.OpStats with atomics, without locks or
// allocation (the layout of backstore's own collector, which is not
// exported).
type opCounters struct {
	ops, bytes, errors, sum atomic.Uint64
	buckets                 [backstore.LatencyBuckets]atomic.Uint64
}

func (c *opCounters) done(n int64, d time.Duration, failed bool) {
	if d < 0 {
		d = 0
	}
	c.ops.Add(1)
	if failed {
		c.errors.Add(1)
	} else {
		c.bytes.Add(uint64(n))
	}
	c.sum.Add(uint64(d))
	c.buckets[latencyBucket(d)].Add(1)
}

func (c *opCounters) snapshot() backstore.OpStats {
	s := backstore.OpStats{Ops: c.ops.Load(), Bytes: c.bytes.Load(), Errors: c.errors.Load()}
	s.Latency.Sum = time.Duration(c.sum.Load())
	for i := range c.buckets {
		s.Latency.Buckets[i] = c.buckets[i].Load()
	}
	return s
}

// latencyBucket returns the histogram bucket of d (see
// backstore.LatencyBuckets).
func latencyBucket(d time.Duration) int {
	i := bits.Len64(uint64(d / time.Microsecond))
	if i >= backstore.LatencyBuckets {
		i = backstore.LatencyBuckets - 1
	}
	return i
}

// stats holds an image's live counters.
type stats struct {
	epoch                               time.Time
	read, write, flush, discard, zeroes opCounters
	fua, rejected                       atomic.Uint64
	inFlight                            atomic.Int64
}

func (s *stats) now() time.Duration { return time.Since(s.epoch) }

func (s *stats) snapshot() backstore.Stats {
	return backstore.Stats{
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

// counters returns the counters of op.
func (s *stats) counters(op backstore.AsyncOp) *opCounters {
	switch op {
	case backstore.AsyncRead:
		return &s.read
	case backstore.AsyncWrite, opCompareAndWrite:
		return &s.write
	case backstore.AsyncFlush:
		return &s.flush
	case backstore.AsyncDiscard:
		return &s.discard
	}
	return &s.zeroes
}

// opCompareAndWrite is the internal operation of CompareAndWrite (beyond
// the public backstore.AsyncOp values; Start refuses it).
const opCompareAndWrite backstore.AsyncOp = 200

// backstoreOp maps an AsyncOp to the backstore.Op of range errors.
func backstoreOp(op backstore.AsyncOp) backstore.Op {
	switch op {
	case backstore.AsyncRead:
		return backstore.OpRead
	case backstore.AsyncWrite, opCompareAndWrite:
		return backstore.OpWrite
	case backstore.AsyncFlush:
		return backstore.OpFlush
	case backstore.AsyncDiscard:
		return backstore.OpDiscard
	}
	return backstore.OpWriteZeroes
}

// checkRange validates n bytes at off on a disk of size bytes and block
// size bs (a power of two), without overflow.
func checkRange(op backstore.Op, off, n, size int64, bs int) error {
	if off < 0 || n < 0 || off > size || n > size-off {
		return &backstore.RangeError{Op: op, Off: off, Len: n, Size: size, BlockSize: bs, Reason: backstore.RangeOutOfBounds}
	}
	if (off|n)&int64(bs-1) != 0 {
		return &backstore.RangeError{Op: op, Off: off, Len: n, Size: size, BlockSize: bs, Reason: backstore.RangeUnaligned}
	}
	return nil
}

// vecLen returns the total length of bufs, or -1 when it overflows.
func vecLen(bufs [][]byte) int64 {
	var n int64
	for _, b := range bufs {
		n += int64(len(b))
		if n < 0 {
			return -1
		}
	}
	return n
}
