package backstore

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestCheckRange(t *testing.T) {
	t.Parallel()
	const size, bs = 1 << 20, 4096
	for _, tt := range []struct {
		off, n int64
		want   RangeReason // 0: accepted
	}{
		{0, 0, 0},
		{0, bs, 0},
		{0, size, 0},
		{size, 0, 0},
		{size - bs, bs, 0},
		{size, bs, RangeOutOfBounds},
		{size - bs, 2 * bs, RangeOutOfBounds},
		{size + bs, 0, RangeOutOfBounds},
		{-bs, bs, RangeOutOfBounds},
		{0, -bs, RangeOutOfBounds},
		{math.MinInt64, bs, RangeOutOfBounds},
		{bs, math.MaxInt64, RangeOutOfBounds}, // off+n overflows
		{math.MaxInt64 &^ (bs - 1), math.MaxInt64, RangeOutOfBounds}, // both huge
		{1, bs, RangeUnaligned},
		{0, bs + 1, RangeUnaligned},
		{bs / 2, bs / 2, RangeUnaligned},
		{size - 1, 1, RangeUnaligned},
		{size + 1, 1, RangeOutOfBounds}, // out of bounds wins
	} {
		err := checkRange(OpRead, tt.off, tt.n, size, bs)
		if tt.want == 0 {
			if err != nil {
				t.Errorf("checkRange(%d, %d) = %v, want nil", tt.off, tt.n, err)
			}
			continue
		}
		want := &RangeError{Op: OpRead, Off: tt.off, Len: tt.n, Size: size, BlockSize: bs, Reason: tt.want}
		var got *RangeError
		if !errors.As(err, &got) {
			t.Errorf("checkRange(%d, %d) = %v, want a *RangeError", tt.off, tt.n, err)
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("checkRange(%d, %d) (-want +got):\n%s", tt.off, tt.n, diff)
		}
	}
}

func TestRangeErrorAccessors(t *testing.T) {
	t.Parallel()
	e := &RangeError{Op: OpWriteZeroes, Off: 8192, Len: 4096, Size: 8192, BlockSize: 512, Reason: RangeOutOfBounds}
	if !e.OutOfRange() || e.Unaligned() || e.LBA() != 16 {
		t.Errorf("accessors of %v: out %v unaligned %v lba %d", e, e.OutOfRange(), e.Unaligned(), e.LBA())
	}
	want := "backstore: write zeroes of 4096 bytes at offset 8192 out of range (disk of 8192 bytes, block size 512)"
	if e.Error() != want {
		t.Errorf("Error() = %q\nwant      %q", e.Error(), want)
	}
	if (&RangeError{Off: -512, BlockSize: 512}).LBA() != 0 {
		t.Error("LBA of a negative offset is not 0")
	}
	wrapped := fmt.Errorf("command 7: %w", e)
	var re *RangeError
	if !errors.As(wrapped, &re) || re != e {
		t.Error("errors.As does not find a wrapped *RangeError")
	}
	for _, s := range []fmt.Stringer{Op(0), Op(99), RangeReason(0), OpFlush, OpDiscard, RangeUnaligned} {
		if s.String() == "" {
			t.Errorf("%#v has an empty name", s)
		}
	}
}

func TestSentinelErrors(t *testing.T) {
	t.Parallel()
	for _, e := range []error{ErrReadOnly, ErrUnsupported, ErrClosed, ErrBufferAlignment} {
		if !strings.HasPrefix(e.Error(), "backstore: ") {
			t.Errorf("%q lacks the package prefix", e)
		}
		if !errors.Is(fmt.Errorf("step: %w", e), e) {
			t.Errorf("errors.Is fails through wrapping for %q", e)
		}
	}
	if errors.Is(ErrReadOnly, ErrClosed) {
		t.Error("distinct sentinels compare equal")
	}
}

func TestVecLen(t *testing.T) {
	t.Parallel()
	if n := vecLen(nil); n != 0 {
		t.Errorf("vecLen(nil) = %d", n)
	}
	if n := vecLen([][]byte{make([]byte, 3), nil, make([]byte, 5)}); n != 8 {
		t.Errorf("vecLen = %d, want 8", n)
	}
}

func TestLatencyBuckets(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		d    time.Duration
		want int
	}{
		{0, 0}, {999 * time.Nanosecond, 0}, {time.Microsecond, 1}, {3 * time.Microsecond, 2},
		{4 * time.Microsecond, 3}, {time.Millisecond, 10}, {time.Hour, LatencyBuckets - 1},
	} {
		if got := latencyBucket(tt.d); got != tt.want {
			t.Errorf("latencyBucket(%v) = %d, want %d", tt.d, got, tt.want)
		}
		if i := tt.want; i < LatencyBuckets-1 && tt.d >= LatencyBucketUpper(i) {
			t.Errorf("%v is not below the upper bound %v of its bucket %d", tt.d, LatencyBucketUpper(i), i)
		}
	}
	if LatencyBucketUpper(LatencyBuckets-1) != 0 || LatencyBucketUpper(-1) != 0 {
		t.Error("the last bucket must be unbounded")
	}
	var c opCounters
	c.done(4096, 3*time.Millisecond, nil)
	c.done(4096, 0, errors.New("boom"))
	s := c.snapshot()
	if s.Ops != 2 || s.Errors != 1 || s.Bytes != 4096 || s.Latency.Count() != 2 || s.Latency.Mean() < time.Millisecond {
		t.Errorf("snapshot %+v", s)
	}
	var empty Latency
	if empty.Mean() != 0 {
		t.Error("mean of nothing is not 0")
	}
}
