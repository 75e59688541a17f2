package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/internal/latency"
)

// Pattern is the I/O pattern (fio --rw).
type Pattern uint8

// Patterns.
const (
	Read Pattern = iota + 1
	Write
	RandRead
	RandWrite
	RandRW
)

var patternNames = map[Pattern]string{Read: "read", Write: "write", RandRead: "randread", RandWrite: "randwrite", RandRW: "randrw"}

// ParsePattern parses read, write, randread, randwrite or randrw.
func ParsePattern(s string) (Pattern, error) {
	for p, n := range patternNames {
		if n == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("unknown pattern %q (want read, write, randread, randwrite or randrw)", s)
}

func (p Pattern) String() string {
	if n, ok := patternNames[p]; ok {
		return n
	}
	return fmt.Sprintf("Pattern(%d)", uint8(p))
}

func (p Pattern) random() bool { return p == RandRead || p == RandWrite || p == RandRW }
func (p Pattern) writes() bool { return p == Write || p == RandWrite || p == RandRW }
func (p Pattern) reads() bool  { return p == Read || p == RandRead || p == RandRW }

// Options shape a run. Zero fields take the defaults in brackets.
type Options struct {
	Pattern Pattern
	// Mix is the percentage of reads of RandRW [50].
	Mix int
	// BlockSize is the size of each I/O [4096]; a multiple of the device's
	// block size, at most its MaxTransfer.
	BlockSize int
	// QD is the number of I/Os each job keeps in flight [1].
	QD int
	// Jobs is the number of jobs [1]; job i submits to queue i.
	Jobs int
	// Runtime is how long the jobs submit [10s].
	Runtime time.Duration
	// Size is the region used, from offset 0 [the whole device].
	Size int64
	// Verify writes self-describing blocks and checks every read; runs
	// that write read everything back at the end.
	Verify bool
	// Seed seeds offsets and verify data [derived from the time].
	Seed uint64
	// Progress receives a progress line every ProgressInterval [1s];
	// ProgressLines writes each on its own line instead of redrawing it.
	Progress         io.Writer
	ProgressInterval time.Duration
	ProgressLines    bool
	// MaxMismatches bounds the mismatches listed in the result [20].
	MaxMismatches int
}

// maxVerifyUnits bounds the blocks a verifying run tracks (4 bytes each).
const maxVerifyUnits = 64 << 20

// Result is what a run measured. Its JSON form is what `rdisk bench --json`
// prints.
type Result struct {
	Device     string     `json:"device"`
	Pattern    string     `json:"rw"`
	Mix        int        `json:"mix,omitempty"`
	BlockSize  int        `json:"bs"`
	QD         int        `json:"qd"`
	Jobs       int        `json:"jobs"`
	Size       int64      `json:"size"`
	Seed       uint64     `json:"seed"`
	Seconds    float64    `json:"runtime_s"`
	IOs        uint64     `json:"ios"`
	Bytes      uint64     `json:"bytes"`
	IOPS       float64    `json:"iops"`
	BW         float64    `json:"bw_bytes_per_sec"`
	Lat        LatUS      `json:"lat_us"`
	Read       *OpStat    `json:"read,omitempty"`
	Write      *OpStat    `json:"write,omitempty"`
	Errors     uint64     `json:"errors"`
	FirstError string     `json:"first_error,omitempty"`
	Verify     bool       `json:"verify"`
	Verified   uint64     `json:"verified_blocks"`
	VerifyErrs uint64     `json:"verify_errors"`
	Mismatches []Mismatch `json:"mismatches,omitempty"`
	// Hosts is each device's own share, in RunMany's order (only when the
	// run had several devices).
	Hosts []HostStat `json:"hosts,omitempty"`
}

// HostStat is what one device of a RunMany did.
type HostStat struct {
	IOs  uint64  `json:"ios"`
	IOPS float64 `json:"iops"`
	BW   float64 `json:"bw_bytes_per_sec"`
}

// OpStat is the part of a run of one kind of operation.
type OpStat struct {
	IOs   uint64  `json:"ios"`
	Bytes uint64  `json:"bytes"`
	IOPS  float64 `json:"iops"`
	BW    float64 `json:"bw_bytes_per_sec"`
	Lat   LatUS   `json:"lat_us"`
}

// LatUS is completion latency in microseconds.
type LatUS struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

// Mismatch is a block that failed verification.
type Mismatch struct {
	LBA    uint64 `json:"lba"`
	Reason string `json:"reason"`
}

func latOf(h *latency.Histogram) LatUS {
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	return LatUS{Mean: us(h.Mean()), P50: us(h.Percentile(50)), P99: us(h.Percentile(99)), P999: us(h.Percentile(99.9)), Max: us(h.Max())}
}

const (
	opRead  = 0
	opWrite = 1
)

type engine struct {
	devs []blockdev.Device
	info blockdev.Info
	o    Options
	jobs []*job
	end  time.Time
	stop atomic.Bool
}

// Run runs the benchmark on d. It returns an error for bad options or when
// the device failed during the run (the Result, returned as well, then
// holds what was measured).
func Run(ctx context.Context, d blockdev.Device, o Options) (*Result, error) {
	return RunMany(ctx, []blockdev.Device{d}, o)
}

// RunMany runs one benchmark over several devices of the same geometry
// (e.g. one disk reached by many hosts, each its own connection): job i
// runs on device i mod len(devs), on that device's queue i / len(devs),
// and the Result adds each device's own rate (Hosts). Jobs still split
// the region between them, so no two touch the same blocks.
func RunMany(ctx context.Context, devs []blockdev.Device, o Options) (*Result, error) {
	if len(devs) == 0 {
		return nil, errors.New("bench: no device")
	}
	info := devs[0].Info()
	for i, d := range devs[1:] {
		di := d.Info()
		if di.BlockSize != info.BlockSize || di.Size != info.Size {
			return nil, fmt.Errorf("bench: device %d (%s) has %d bytes in blocks of %d, device 0 %d in blocks of %d", i+1, di.Name, di.Size, di.BlockSize, info.Size, info.BlockSize)
		}
		info.MaxTransfer = min(info.MaxTransfer, di.MaxTransfer)
	}
	if err := setDefaults(&o, &info); err != nil {
		return nil, err
	}
	if o.Jobs < len(devs) {
		return nil, fmt.Errorf("bench: %d jobs for %d devices: want at least one job per device", o.Jobs, len(devs))
	}
	e := &engine{devs: devs, info: info, o: o}
	units := o.Size / int64(o.BlockSize)
	for i := range o.Jobs {
		j, err := newJob(e, i, units*int64(i)/int64(o.Jobs), units*int64(i+1)/int64(o.Jobs))
		if err != nil {
			for _, j := range e.jobs {
				j.buf.Release()
			}
			return nil, err
		}
		e.jobs = append(e.jobs, j)
	}
	defer func() {
		for _, j := range e.jobs {
			j.buf.Release()
		}
	}()

	start := time.Now()
	e.end = start.Add(o.Runtime)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-ctx.Done()
		e.stop.Store(true)
	}()
	progDone := make(chan struct{})
	var progWG sync.WaitGroup
	if o.Progress != nil {
		progWG.Add(1)
		go func() {
			defer progWG.Done()
			e.progress(start, progDone)
		}()
	}
	var wg sync.WaitGroup
	for _, j := range e.jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j.run()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(progDone)
	progWG.Wait()

	// Read back everything written.
	if o.Verify && o.Pattern.writes() && !e.fatal() {
		for _, j := range e.jobs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				j.readBack()
			}()
		}
		wg.Wait()
	}
	return e.result(elapsed), e.fatalErr()
}

func setDefaults(o *Options, info *blockdev.Info) error {
	if o.Pattern == 0 {
		o.Pattern = RandRead
	}
	if _, ok := patternNames[o.Pattern]; !ok {
		return fmt.Errorf("unknown pattern %d", o.Pattern)
	}
	if o.Mix == 0 {
		o.Mix = 50
	}
	if o.Mix < 0 || o.Mix > 100 {
		return fmt.Errorf("--mix %d: want a read percentage from 0 to 100", o.Mix)
	}
	if o.BlockSize == 0 {
		o.BlockSize = 4096
	}
	if o.BlockSize < info.BlockSize || o.BlockSize%info.BlockSize != 0 {
		return fmt.Errorf("--bs %d: want a multiple of the device's %d-byte blocks", o.BlockSize, info.BlockSize)
	}
	if o.BlockSize > info.MaxTransfer {
		return fmt.Errorf("--bs %d: larger than the device's transfer limit of %d bytes", o.BlockSize, info.MaxTransfer)
	}
	if o.QD == 0 {
		o.QD = 1
	}
	if o.QD < 1 || o.QD > 65536 {
		return fmt.Errorf("--qd %d: want 1 to 65536", o.QD)
	}
	if o.Jobs == 0 {
		o.Jobs = 1
	}
	if o.Jobs < 1 || o.Jobs > 1024 {
		return fmt.Errorf("--jobs %d: want 1 to 1024", o.Jobs)
	}
	if o.Runtime == 0 {
		o.Runtime = 10 * time.Second
	}
	if o.Runtime < 0 {
		return fmt.Errorf("--runtime %v: must be positive", o.Runtime)
	}
	if o.Size == 0 {
		o.Size = info.Size
	}
	if o.Size < 0 || o.Size > info.Size {
		return fmt.Errorf("--size %d: the device has %d bytes", o.Size, info.Size)
	}
	o.Size -= o.Size % int64(o.BlockSize)
	units := o.Size / int64(o.BlockSize)
	if units < int64(o.Jobs) {
		return fmt.Errorf("--size %d holds %d blocks of %d bytes, fewer than the %d jobs", o.Size, units, o.BlockSize, o.Jobs)
	}
	if o.Verify {
		if units > maxVerifyUnits {
			return fmt.Errorf("--verify tracks at most %d blocks of --bs; use --size to verify at most %d bytes", maxVerifyUnits, int64(maxVerifyUnits)*int64(o.BlockSize))
		}
		if units/int64(o.Jobs) < int64(2*o.QD) {
			return fmt.Errorf("--verify needs at least %d blocks of %d bytes per job (twice --qd) so that no two I/Os in flight overlap; use a larger --size or a smaller --qd", 2*o.QD, o.BlockSize)
		}
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano()) | 1
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = time.Second
	}
	if o.MaxMismatches == 0 {
		o.MaxMismatches = 20
	}
	return nil
}

type job struct {
	e     *engine
	dev   blockdev.Device // e.devs[id mod len]
	id    int
	first int64 // first unit
	units int64
	rng   *rand.Rand
	seq   int64 // next sequential unit, relative

	buf     blockdev.Buffer
	reqs    []blockdev.Request
	ch      chan *blockdev.Request
	sent    []time.Time
	scratch []byte

	gen  []uint32 // verify: writes per unit; genUnknown after a failed write
	busy []bool   // verify: unit has an I/O in flight

	hist  [2]latency.Histogram
	ios   [2]atomic.Uint64
	bytes [2]atomic.Uint64
	errs  atomic.Uint64

	mu         sync.Mutex // guards the fields below (read by result)
	firstErr   error
	fatalErr   error
	verified   uint64
	verifyErrs uint64
	mismatches []Mismatch
}

func newJob(e *engine, id int, first, end int64) (*job, error) {
	o := &e.o
	j := &job{e: e, id: id, first: first, units: end - first,
		rng:  rand.New(rand.NewPCG(o.Seed, uint64(id)+1)),
		reqs: make([]blockdev.Request, o.QD), ch: make(chan *blockdev.Request, o.QD),
		sent: make([]time.Time, o.QD), scratch: make([]byte, e.info.BlockSize),
	}
	j.dev = e.devs[id%len(e.devs)]
	buf, err := j.dev.AllocBuffer(o.QD * o.BlockSize)
	if err != nil {
		return nil, fmt.Errorf("allocating %d bytes of I/O buffers: %w", o.QD*o.BlockSize, err)
	}
	j.buf = buf
	if o.Verify {
		j.gen = make([]uint32, j.units)
		j.busy = make([]bool, j.units)
	} else {
		// Incompressible data for plain writes.
		b := buf.Bytes()
		fillStream(b, uint64(id), o.Seed, 0)
	}
	for i := range j.reqs {
		j.reqs[i] = blockdev.Request{Buf: buf, BufOff: i * o.BlockSize, Length: o.BlockSize, Queue: id / len(e.devs), C: j.ch, Tag: uint64(i)}
	}
	return j, nil
}

// pickUnit chooses the next unit (relative to j.first) for an op, skipping
// units with an I/O in flight when verifying.
func (j *job) pickUnit() int64 {
	for try := 0; ; try++ {
		var u int64
		if j.e.o.Pattern.random() {
			u = j.rng.Int64N(j.units)
		} else {
			u = j.seq
			j.seq++
			if j.seq == j.units {
				j.seq = 0
			}
		}
		if j.busy == nil || !j.busy[u] {
			return u
		}
	}
}

func (j *job) pickOp() blockdev.Op {
	switch j.e.o.Pattern {
	case Read, RandRead:
		return blockdev.OpRead
	case Write, RandWrite:
		return blockdev.OpWrite
	}
	if j.rng.IntN(100) < j.e.o.Mix {
		return blockdev.OpRead
	}
	return blockdev.OpWrite
}

// prepare fills r for its next I/O.
func (j *job) prepare(r *blockdev.Request, op blockdev.Op, u int64) {
	o := &j.e.o
	r.Op = op
	r.Offset = (j.first + u) * int64(o.BlockSize)
	r.Err = nil
	r.Issued, r.Completed = time.Time{}, time.Time{}
	if j.busy != nil {
		j.busy[u] = true
		if op == blockdev.OpWrite {
			g := j.gen[u]
			if g == genUnknown || g == genUnknown-1 {
				g = 0
			}
			g++
			j.gen[u] = g
			bs := j.e.info.BlockSize
			data := r.Buf.Bytes()[r.BufOff : r.BufOff+o.BlockSize]
			lba := uint64(r.Offset) / uint64(bs)
			for k := 0; k < o.BlockSize; k += bs {
				fillBlock(data[k:k+bs], lba+uint64(k/bs), o.Seed, g)
			}
		}
	}
	j.sent[r.Tag] = time.Now()
}

func (j *job) submit(r *blockdev.Request) bool {
	if err := j.dev.Submit(r); err != nil {
		j.fail(fmt.Errorf("submitting a %s of %d bytes at offset %d: %w", r.Op, r.Length, r.Offset, err))
		if j.busy != nil {
			j.busy[r.Offset/int64(j.e.o.BlockSize)-j.first] = false
		}
		return false
	}
	return true
}

// fail records an error that stops the job.
func (j *job) fail(err error) {
	j.mu.Lock()
	if j.fatalErr == nil {
		j.fatalErr = err
	}
	j.mu.Unlock()
	j.e.stop.Store(true)
}

func (j *job) run() {
	inflight := 0
	for i := range j.reqs {
		if j.e.stop.Load() {
			break
		}
		r := &j.reqs[i]
		j.prepare(r, j.pickOp(), j.pickUnit())
		if !j.submit(r) {
			break
		}
		inflight++
	}
	for inflight > 0 {
		r := <-j.ch
		inflight--
		now := time.Now()
		j.complete(r, now)
		if j.e.stop.Load() {
			continue
		}
		if now.After(j.e.end) {
			j.e.stop.Store(true)
			continue
		}
		j.prepare(r, j.pickOp(), j.pickUnit())
		if j.submit(r) {
			inflight++
		}
	}
}

func (j *job) complete(r *blockdev.Request, now time.Time) {
	o := &j.e.o
	k := opRead
	if r.Op == blockdev.OpWrite {
		k = opWrite
	}
	lat := now.Sub(j.sent[r.Tag])
	if !r.Issued.IsZero() && !r.Completed.IsZero() {
		lat = r.Completed.Sub(r.Issued)
	}
	u := r.Offset/int64(o.BlockSize) - j.first
	if r.Err != nil {
		j.errs.Add(1)
		j.mu.Lock()
		if j.firstErr == nil {
			j.firstErr = fmt.Errorf("%s of %d bytes at offset %d: %w", r.Op, r.Length, r.Offset, r.Err)
		}
		j.mu.Unlock()
		if j.busy != nil {
			j.busy[u] = false
			if r.Op == blockdev.OpWrite {
				j.gen[u] = genUnknown
			}
		}
		if errors.Is(r.Err, blockdev.ErrClosed) {
			j.fail(fmt.Errorf("device failed: %w", r.Err))
		}
		return
	}
	j.hist[k].Record(lat)
	j.ios[k].Add(1)
	j.bytes[k].Add(uint64(r.Length))
	if j.busy == nil {
		return
	}
	j.busy[u] = false
	if r.Op == blockdev.OpRead {
		g := j.gen[u]
		switch {
		case g == genUnknown:
		case g > 0:
			j.check(r, g, true)
		case !o.Pattern.writes():
			j.check(r, 0, false) // a block of an earlier run
		}
	}
}

// check verifies the blocks r read.
func (j *job) check(r *blockdev.Request, gen uint32, exact bool) {
	bs := j.e.info.BlockSize
	data := r.Buf.Bytes()[r.BufOff : r.BufOff+r.Length]
	lba := uint64(r.Offset) / uint64(bs)
	var bad []Mismatch
	n := uint64(0)
	for k := 0; k < r.Length; k += bs {
		n++
		if why := checkBlock(data[k:k+bs], j.scratch, lba+uint64(k/bs), j.e.o.Seed, gen, exact); why != "" {
			bad = append(bad, Mismatch{LBA: lba + uint64(k/bs), Reason: why})
		}
	}
	j.mu.Lock()
	j.verified += n
	j.verifyErrs += uint64(len(bad))
	for _, m := range bad {
		if len(j.mismatches) < j.e.o.MaxMismatches {
			j.mismatches = append(j.mismatches, m)
		}
	}
	j.mu.Unlock()
}

// readBack reads every unit the job wrote and checks it.
func (j *job) readBack() {
	o := &j.e.o
	next := int64(0)
	nextUnit := func() int64 {
		for ; next < j.units; next++ {
			if g := j.gen[next]; g != 0 && g != genUnknown {
				next++
				return next - 1
			}
		}
		return -1
	}
	inflight := 0
	issue := func(r *blockdev.Request) bool {
		u := nextUnit()
		if u < 0 {
			return false
		}
		r.Op, r.Offset, r.Err = blockdev.OpRead, (j.first+u)*int64(o.BlockSize), nil
		if err := j.dev.Submit(r); err != nil {
			j.fail(fmt.Errorf("verify read-back: %w", err))
			return false
		}
		inflight++
		return true
	}
	for i := range j.reqs {
		if !issue(&j.reqs[i]) {
			break
		}
	}
	for inflight > 0 {
		r := <-j.ch
		inflight--
		if r.Err != nil {
			j.errs.Add(1)
			j.mu.Lock()
			if j.firstErr == nil {
				j.firstErr = fmt.Errorf("verify read-back at offset %d: %w", r.Offset, r.Err)
			}
			j.mu.Unlock()
			if errors.Is(r.Err, blockdev.ErrClosed) {
				j.fail(fmt.Errorf("device failed: %w", r.Err))
				continue
			}
		} else {
			j.check(r, j.gen[r.Offset/int64(o.BlockSize)-j.first], true)
		}
		if j.fatal() == nil {
			issue(r)
		}
	}
}

func (j *job) fatal() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.fatalErr
}

func (e *engine) fatal() bool { return e.fatalErr() != nil }

func (e *engine) fatalErr() error {
	for _, j := range e.jobs {
		if err := j.fatal(); err != nil {
			return err
		}
	}
	return nil
}

func (e *engine) counters() (ios, bytes [2]uint64, errs uint64) {
	for _, j := range e.jobs {
		for k := range 2 {
			ios[k] += j.ios[k].Load()
			bytes[k] += j.bytes[k].Load()
		}
		errs += j.errs.Load()
	}
	return
}

func (e *engine) progress(start time.Time, done <-chan struct{}) {
	o := &e.o
	t := time.NewTicker(o.ProgressInterval)
	defer t.Stop()
	prevT := start
	var prevIOs, prevBytes [2]uint64
	width := 0
	for {
		select {
		case <-done:
			if !o.ProgressLines && width > 0 {
				fmt.Fprintf(o.Progress, "\r%s\r", strings.Repeat(" ", width))
			}
			return
		case now := <-t.C:
			ios, bytes, errs := e.counters()
			dt := now.Sub(prevT).Seconds()
			var parts []string
			for k, name := range []string{"read", "write"} {
				if (k == opRead && !o.Pattern.reads()) || (k == opWrite && !o.Pattern.writes()) {
					continue
				}
				parts = append(parts, fmt.Sprintf("%s %s IOPS %s", name, fmtCount(float64(ios[k]-prevIOs[k])/dt), fmtRate(float64(bytes[k]-prevBytes[k])/dt)))
			}
			line := fmt.Sprintf("[%3.0fs/%.0fs] %s, errors %d", now.Sub(start).Seconds(), o.Runtime.Seconds(), strings.Join(parts, ", "), errs)
			if o.ProgressLines {
				fmt.Fprintln(o.Progress, line)
			} else {
				pad := ""
				if len(line) < width {
					pad = strings.Repeat(" ", width-len(line))
				}
				fmt.Fprintf(o.Progress, "\r%s%s", line, pad)
				width = len(line)
			}
			prevT, prevIOs, prevBytes = now, ios, bytes
		}
	}
}

func (e *engine) result(elapsed time.Duration) *Result {
	o := &e.o
	secs := elapsed.Seconds()
	res := &Result{
		Device: e.info.Name, Pattern: o.Pattern.String(), BlockSize: o.BlockSize, QD: o.QD, Jobs: o.Jobs,
		Size: o.Size, Seed: o.Seed, Seconds: secs, Verify: o.Verify,
	}
	if o.Pattern == RandRW {
		res.Mix = o.Mix
	}
	var all latency.Histogram
	var hs [2]latency.Histogram
	for _, j := range e.jobs {
		for k := range 2 {
			hs[k].Add(&j.hist[k])
			all.Add(&j.hist[k])
		}
		res.Errors += j.errs.Load()
		j.mu.Lock()
		if res.FirstError == "" && j.firstErr != nil {
			res.FirstError = j.firstErr.Error()
		}
		res.Verified += j.verified
		res.VerifyErrs += j.verifyErrs
		for _, m := range j.mismatches {
			if len(res.Mismatches) < o.MaxMismatches {
				res.Mismatches = append(res.Mismatches, m)
			}
		}
		j.mu.Unlock()
	}
	ios, bytes, _ := e.counters()
	op := func(k int) *OpStat {
		return &OpStat{IOs: ios[k], Bytes: bytes[k], IOPS: float64(ios[k]) / secs, BW: float64(bytes[k]) / secs, Lat: latOf(&hs[k])}
	}
	if o.Pattern.reads() {
		res.Read = op(opRead)
	}
	if o.Pattern.writes() {
		res.Write = op(opWrite)
	}
	res.IOs = ios[0] + ios[1]
	res.Bytes = bytes[0] + bytes[1]
	res.IOPS = float64(res.IOs) / secs
	res.BW = float64(res.Bytes) / secs
	res.Lat = latOf(&all)
	if len(e.devs) > 1 {
		res.Hosts = make([]HostStat, len(e.devs))
		for i, j := range e.jobs {
			h := &res.Hosts[i%len(e.devs)]
			for k := range 2 {
				h.IOs += j.ios[k].Load()
				h.BW += float64(j.bytes[k].Load())
			}
		}
		for i := range res.Hosts {
			res.Hosts[i].IOPS = float64(res.Hosts[i].IOs) / secs
			res.Hosts[i].BW /= secs
		}
	}
	return res
}

// fmtCount prints a rate like fio: 1234, 12.3k, 1.23M.
func fmtCount(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func fmtRate(b float64) string {
	switch {
	case b >= 1e9:
		return fmt.Sprintf("%.2f GB/s", b/1e9)
	case b >= 1e6:
		return fmt.Sprintf("%.1f MB/s", b/1e6)
	case b >= 1e3:
		return fmt.Sprintf("%.1f kB/s", b/1e3)
	}
	return fmt.Sprintf("%.0f B/s", b)
}
