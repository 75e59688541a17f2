package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/blockdev/blockdevtest"
)

func newMem(t *testing.T, cfg blockdevtest.MemConfig) *blockdevtest.Mem {
	t.Helper()
	if cfg.Size == 0 {
		cfg.Size = 4 << 20
	}
	d, err := blockdevtest.NewMem(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestPatterns(t *testing.T) {
	t.Parallel()
	for _, p := range []Pattern{Read, Write, RandRead, RandWrite, RandRW} {
		t.Run(p.String(), func(t *testing.T) {
			t.Parallel()
			d := newMem(t, blockdevtest.MemConfig{Queues: 2})
			res, err := Run(context.Background(), d, Options{Pattern: p, BlockSize: 4096, QD: 4, Jobs: 2, Runtime: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if res.IOs == 0 || res.Errors != 0 || res.IOPS <= 0 || res.Lat.P50 <= 0 {
				t.Fatalf("result %+v: want I/Os, no errors, a rate and latencies", res)
			}
			if (res.Read != nil) != p.reads() || (res.Write != nil) != p.writes() {
				t.Errorf("read/write sections %v/%v for %s", res.Read != nil, res.Write != nil, p)
			}
			if p.reads() && d.Ops(blockdev.OpRead) == 0 || p.writes() && d.Ops(blockdev.OpWrite) == 0 {
				t.Errorf("device saw %d reads, %d writes", d.Ops(blockdev.OpRead), d.Ops(blockdev.OpWrite))
			}
			if !p.writes() && d.Ops(blockdev.OpWrite) != 0 || !p.reads() && d.Ops(blockdev.OpRead) != 0 {
				t.Errorf("%s: device saw %d reads, %d writes", p, d.Ops(blockdev.OpRead), d.Ops(blockdev.OpWrite))
			}
		})
	}
}

func TestJSON(t *testing.T) {
	t.Parallel()
	d := newMem(t, blockdevtest.MemConfig{})
	res, err := Run(context.Background(), d, Options{Pattern: RandRW, Mix: 70, QD: 2, Runtime: 50 * time.Millisecond, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"iops", "bw_bytes_per_sec", "lat_us", "ios", "errors", "verify_errors"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON %s lacks %q", b, k)
		}
	}
	lat, _ := m["lat_us"].(map[string]any)
	for _, k := range []string{"mean", "p50", "p99", "p999"} {
		if _, ok := lat[k]; !ok {
			t.Errorf("lat_us lacks %q", k)
		}
	}
	if res.Mix != 70 {
		t.Errorf("mix %d, want 70", res.Mix)
	}
}

func TestMix(t *testing.T) {
	t.Parallel()
	d := newMem(t, blockdevtest.MemConfig{})
	res, err := Run(context.Background(), d, Options{Pattern: RandRW, Mix: 90, QD: 4, Runtime: 100 * time.Millisecond, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	frac := float64(res.Read.IOs) / float64(res.IOs)
	if res.IOs < 200 || frac < 0.8 || frac > 0.97 {
		t.Errorf("%d of %d I/Os were reads (%.2f), want about 0.9", res.Read.IOs, res.IOs, frac)
	}
}

func TestVerifyClean(t *testing.T) {
	t.Parallel()
	d := newMem(t, blockdevtest.MemConfig{Queues: 2, BlockSize: 512})
	o := Options{Pattern: RandRW, BlockSize: 4096, QD: 8, Jobs: 2, Runtime: 150 * time.Millisecond, Size: 1 << 20, Verify: true, Seed: 42}
	res, err := Run(context.Background(), d, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.VerifyErrs != 0 || res.Errors != 0 {
		t.Fatalf("clean device: %d verify errors (%v), %d errors", res.VerifyErrs, res.Mismatches, res.Errors)
	}
	if res.Verified == 0 {
		t.Fatal("nothing verified")
	}
	// Read-only verification of the blocks the first run wrote, with the
	// same seed, succeeds; with another seed it reports every block read.
	o.Pattern, o.Runtime = RandRead, 50*time.Millisecond
	o.Size = 4096 * 64 // the region a first sequential write covers
	d2 := newMem(t, blockdevtest.MemConfig{BlockSize: 512})
	w := Options{Pattern: Write, BlockSize: 4096, QD: 4, Size: 4096 * 64, Runtime: 50 * time.Millisecond, Verify: true, Seed: 42}
	if res, err := Run(context.Background(), d2, w); err != nil || res.VerifyErrs != 0 {
		t.Fatalf("sequential write + verify: %v, %+v", err, res)
	}
	res, err = Run(context.Background(), d2, o)
	if err != nil || res.VerifyErrs != 0 || res.Verified == 0 {
		t.Fatalf("read-only verify with the same seed: %v, %d errors of %d blocks: %v", err, res.VerifyErrs, res.Verified, res.Mismatches)
	}
	o.Seed = 43
	res, err = Run(context.Background(), d2, o)
	if err != nil || res.VerifyErrs == 0 || !strings.Contains(res.Mismatches[0].Reason, "another run") {
		t.Fatalf("read-only verify with another seed: %v, %+v", err, res)
	}
}

func TestVerifyDetects(t *testing.T) {
	t.Parallel()
	const badLBA = 100 // 512-byte LBA inside the 4 KiB unit 12
	cases := []struct {
		name string
		hook func(lba uint64, b []byte)
		want string
	}{
		{"corruption", func(lba uint64, b []byte) { b[300] ^= 0xff }, "corrupted at byte 300"},
		{"misdirected", func(lba uint64, b []byte) { fillBlock(b, lba+8, 7, 1) }, "holds the data of LBA 108"},
		{"lost write", func(lba uint64, b []byte) {
			if g := uint32(b[24]); g > 1 {
				fillBlock(b, lba, 7, g-1)
			} else {
				clear(b)
			}
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var armed atomic.Bool
			d := newMem(t, blockdevtest.MemConfig{BlockSize: 512, AfterRead: func(r *blockdev.Request, data []byte) {
				first := uint64(r.Offset) / 512
				if !armed.Load() || badLBA < first || badLBA >= first+uint64(r.Length/512) {
					return
				}
				k := (badLBA - first) * 512
				tc.hook(badLBA, data[k:k+512])
			}})
			// Write the region twice, sequentially, then arm the fault and
			// read it all back.
			o := Options{Pattern: Write, BlockSize: 4096, QD: 2, Size: 64 * 4096, Verify: true, Seed: 7, Runtime: time.Hour}
			o.Runtime = 30 * time.Millisecond
			armed.Store(true)
			res, err := Run(context.Background(), d, o)
			if err != nil {
				t.Fatal(err)
			}
			if res.VerifyErrs == 0 {
				t.Fatalf("no mismatch reported (%d blocks verified)", res.Verified)
			}
			found := false
			for _, m := range res.Mismatches {
				if m.LBA != badLBA {
					t.Errorf("mismatch at LBA %d (%s), want only LBA %d", m.LBA, m.Reason, badLBA)
				}
				if strings.Contains(m.Reason, tc.want) {
					found = true
				}
			}
			if !found {
				t.Errorf("mismatches %+v: want a reason with %q", res.Mismatches, tc.want)
			}
			var buf bytes.Buffer
			res.WriteText(&buf)
			if !strings.Contains(buf.String(), "LBA 100") {
				t.Errorf("summary does not name the LBA:\n%s", buf.String())
			}
		})
	}
}

func TestDeviceErrors(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	d := newMem(t, blockdevtest.MemConfig{Fault: func(r *blockdev.Request) error {
		if n.Add(1)%10 == 0 {
			return blockdev.ErrIO
		}
		return nil
	}})
	res, err := Run(context.Background(), d, Options{Pattern: RandRW, QD: 4, Runtime: 50 * time.Millisecond, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors == 0 || !strings.Contains(res.FirstError, "I/O error") {
		t.Fatalf("errors %d, first %q: want I/O errors counted", res.Errors, res.FirstError)
	}
	if res.VerifyErrs != 0 {
		t.Errorf("failed I/Os caused %d verify errors: %v", res.VerifyErrs, res.Mismatches)
	}
}

func TestDeviceClosed(t *testing.T) {
	t.Parallel()
	d := newMem(t, blockdevtest.MemConfig{Latency: time.Millisecond})
	go func() {
		time.Sleep(30 * time.Millisecond)
		d.Close()
	}()
	res, err := Run(context.Background(), d, Options{Pattern: RandRead, QD: 4, Runtime: 5 * time.Second})
	if !errors.Is(err, blockdev.ErrClosed) {
		t.Fatalf("Run on a device closed under it: %v, want ErrClosed", err)
	}
	if res == nil || res.Seconds > 2 {
		t.Fatalf("result %+v: want the partial result, promptly", res)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	d := newMem(t, blockdevtest.MemConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	res, err := Run(ctx, d, Options{Runtime: time.Minute})
	if err != nil || res.Seconds > 2 {
		t.Fatalf("cancelled run: %v, %+v", err, res)
	}
}

func TestProgress(t *testing.T) {
	t.Parallel()
	d := newMem(t, blockdevtest.MemConfig{})
	var buf lockedBuffer
	_, err := Run(context.Background(), d, Options{Pattern: RandRW, Runtime: 120 * time.Millisecond, Progress: &buf, ProgressInterval: 20 * time.Millisecond, ProgressLines: true})
	if err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, "read ") || !strings.Contains(out, "write ") || !strings.Contains(out, "IOPS") || strings.Count(out, "\n") < 2 {
		t.Errorf("progress output %q", out)
	}
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestOptionErrors(t *testing.T) {
	t.Parallel()
	d := newMem(t, blockdevtest.MemConfig{BlockSize: 4096, Size: 1 << 20, MaxTransfer: 64 << 10})
	cases := []struct {
		o    Options
		want string
	}{
		{Options{BlockSize: 512}, "multiple of the device's 4096-byte blocks"},
		{Options{BlockSize: 128 << 10}, "transfer limit"},
		{Options{Mix: 101, Pattern: RandRW}, "--mix"},
		{Options{QD: -1}, "--qd"},
		{Options{Jobs: 2000}, "--jobs"},
		{Options{Size: 2 << 20}, "--size"},
		{Options{Size: 4096, Jobs: 2}, "fewer than the 2 jobs"},
		{Options{Verify: true, QD: 200}, "twice --qd"},
		{Options{Runtime: -1}, "--runtime"},
	}
	for _, c := range cases {
		if _, err := Run(context.Background(), d, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error about %q", c.o, err, c.want)
		}
	}
	if _, err := ParsePattern("randomread"); err == nil {
		t.Error("ParsePattern accepted randomread")
	}
	for _, s := range []string{"read", "write", "randread", "randwrite", "randrw"} {
		if p, err := ParsePattern(s); err != nil || p.String() != s {
			t.Errorf("ParsePattern(%q) = %v, %v", s, p, err)
		}
	}
}

func TestBlockFormat(t *testing.T) {
	t.Parallel()
	b := make([]byte, 4096)
	s := make([]byte, 4096)
	fillBlock(b, 12345, 99, 3)
	if why := checkBlock(b, s, 12345, 99, 3, true); why != "" {
		t.Fatalf("good block: %s", why)
	}
	if why := checkBlock(b, s, 12345, 99, 0, false); why != "" {
		t.Fatalf("good block, any generation: %s", why)
	}
	if why := checkBlock(b, s, 12345, 99, 4, true); !strings.Contains(why, "stale") {
		t.Errorf("generation 3 checked as 4: %q", why)
	}
	c := bytes.Clone(b)
	c[4095] ^= 1
	if why := checkBlock(c, s, 12345, 99, 3, true); !strings.Contains(why, "byte 4095") {
		t.Errorf("flipped last byte: %q", why)
	}
	if why := checkBlock(make([]byte, 512), s, 1, 99, 1, true); !strings.Contains(why, "all zeroes") {
		t.Errorf("zero block: %q", why)
	}
	// Two generations of one block differ; the stream differs per LBA.
	d := make([]byte, 4096)
	fillBlock(d, 12345, 99, 4)
	if bytes.Equal(b[32:], d[32:]) {
		t.Error("generations 3 and 4 carry the same data")
	}
	fillBlock(d, 12346, 99, 3)
	if bytes.Equal(b[32:], d[32:]) {
		t.Error("LBAs 12345 and 12346 carry the same data")
	}
}

func FuzzCheckBlock(f *testing.F) {
	b := make([]byte, 512)
	fillBlock(b, 7, 9, 2)
	f.Add(b, uint64(7), uint64(9), uint32(2), true)
	f.Add(make([]byte, 40), uint64(0), uint64(0), uint32(0), false)
	f.Fuzz(func(t *testing.T, b []byte, lba, seed uint64, gen uint32, exact bool) {
		if len(b) < verifyHdrSize {
			return
		}
		why := checkBlock(b, make([]byte, len(b)), lba, seed, gen, exact)
		g := make([]byte, len(b))
		fillBlock(g, lba, seed, gen)
		if bytes.Equal(g, b) && why != "" {
			t.Fatalf("a block filled for (%d, %d, %d) fails: %s", lba, seed, gen, why)
		}
	})
}

// TestAllocsPerIO: the engine (and the in-memory device) allocate nothing
// per I/O; what a run allocates is its setup.
func TestAllocsPerIO(t *testing.T) {
	d := newMem(t, blockdevtest.MemConfig{Queues: 2})
	run := func(rt time.Duration) (uint64, uint64) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		res, err := Run(context.Background(), d, Options{Pattern: RandRW, QD: 8, Jobs: 2, Runtime: rt, Verify: true, Size: 1 << 20})
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		return after.Mallocs - before.Mallocs, res.IOs
	}
	run(20 * time.Millisecond) // warm up
	shortAllocs, shortIOs := run(20 * time.Millisecond)
	longAllocs, longIOs := run(200 * time.Millisecond)
	if longIOs < 2*shortIOs {
		t.Skipf("too few I/Os to compare (%d, %d)", shortIOs, longIOs)
	}
	perIO := float64(int64(longAllocs)-int64(shortAllocs)) / float64(longIOs-shortIOs)
	t.Logf("%d allocations for %d I/Os, %d for %d: %.4f per I/O", shortAllocs, shortIOs, longAllocs, longIOs, perIO)
	if perIO > 0.01 {
		t.Errorf("%.4f allocations per I/O, want 0", perIO)
	}
}

// TestRunMany: jobs spread over the devices round-robin, each device's
// queues in turn; Hosts adds up to the whole; verify works per device.
func TestRunMany(t *testing.T) {
	t.Parallel()
	var devs []blockdev.Device
	var mems []*blockdevtest.Mem
	for range 3 {
		m := newMem(t, blockdevtest.MemConfig{Queues: 2, BlockSize: 512})
		mems = append(mems, m)
		devs = append(devs, m)
	}
	o := Options{Pattern: RandRW, BlockSize: 4096, QD: 4, Jobs: 6, Runtime: 150 * time.Millisecond, Verify: true, Seed: 7}
	res, err := RunMany(context.Background(), devs, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 0 || res.VerifyErrs != 0 || res.Verified == 0 {
		t.Fatalf("errors %d, verify errors %d of %d: %v", res.Errors, res.VerifyErrs, res.Verified, res.Mismatches)
	}
	if len(res.Hosts) != 3 {
		t.Fatalf("hosts %+v: want 3", res.Hosts)
	}
	var sum uint64
	for i, h := range res.Hosts {
		sum += h.IOs
		if h.IOs == 0 || h.IOPS <= 0 {
			t.Errorf("host %d: %+v", i, h)
		}
		if mems[i].Ops(blockdev.OpRead)+mems[i].Ops(blockdev.OpWrite) == 0 {
			t.Errorf("device %d saw no I/O", i)
		}
	}
	if sum != res.IOs {
		t.Errorf("hosts' I/Os add up to %d, the run's to %d", sum, res.IOs)
	}
	var b bytes.Buffer
	res.WriteText(&b)
	if !strings.Contains(b.String(), "hosts: 3, IOPS per host") {
		t.Errorf("text report without the hosts line:\n%s", b.String())
	}
	// One device: no Hosts section.
	if res, err := RunMany(context.Background(), devs[:1], Options{BlockSize: 4096, QD: 2, Runtime: 20 * time.Millisecond}); err != nil || res.Hosts != nil {
		t.Errorf("one device: %v, hosts %v", err, res.Hosts)
	}
	if _, err := RunMany(context.Background(), devs, Options{BlockSize: 4096, QD: 2, Jobs: 2, Runtime: 20 * time.Millisecond}); err == nil || !strings.Contains(err.Error(), "2 jobs for 3 devices") {
		t.Errorf("fewer jobs than devices: %v", err)
	}
	other := newMem(t, blockdevtest.MemConfig{Size: 8 << 20, BlockSize: 512})
	if _, err := RunMany(context.Background(), []blockdev.Device{devs[0], other}, Options{Jobs: 2, Runtime: 20 * time.Millisecond}); err == nil || !strings.Contains(err.Error(), "device 1") {
		t.Errorf("devices of different sizes: %v", err)
	}
	if _, err := RunMany(context.Background(), nil, Options{}); err == nil {
		t.Error("no device accepted")
	}
}
