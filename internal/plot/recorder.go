package plot

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/internal/latency"
)

// Recorder is a blockdev.Device that passes everything to another device
// and records, per interval, the reads and writes completed, and the
// latency of each. Wrap the device a benchmark drives with it, then Plot.
// It allocates nothing per request (one shadow request per queue slot,
// made at NewRecorder). Its methods are safe for concurrent use.
type Recorder struct {
	dev      blockdev.Device
	info     blockdev.Info
	interval time.Duration
	start    time.Time
	free     chan *shadow
	onDoneFn func(*blockdev.Request)

	rOps, wOps, rBytes, wBytes atomic.Uint64

	hmu    []sync.Mutex // per queue
	rHist  []latency.Histogram
	wHist  []latency.Histogram
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
	mu     sync.Mutex
	series []Sample
}

type shadow struct {
	req   blockdev.Request
	outer *blockdev.Request
}

// NewRecorder wraps d, sampling every interval (0: 250 ms). Sampling
// starts now.
func NewRecorder(d blockdev.Device, interval time.Duration) *Recorder {
	if interval <= 0 {
		interval = 250 * time.Millisecond
	}
	info := d.Info()
	n := max(info.Queues*info.QueueDepth, 1)
	r := &Recorder{dev: d, info: info, interval: interval, start: time.Now(), free: make(chan *shadow, n),
		hmu: make([]sync.Mutex, max(info.Queues, 1)), rHist: make([]latency.Histogram, max(info.Queues, 1)),
		wHist: make([]latency.Histogram, max(info.Queues, 1)), stop: make(chan struct{}), done: make(chan struct{})}
	r.onDoneFn = r.onDone
	for range n {
		s := &shadow{}
		s.req.Done, s.req.Ctx = r.onDoneFn, s
		r.free <- s
	}
	go r.sample()
	return r
}

// Info implements blockdev.Device.
func (r *Recorder) Info() blockdev.Info { return r.info }

// AllocBuffer implements blockdev.Device.
func (r *Recorder) AllocBuffer(n int) (blockdev.Buffer, error) { return r.dev.AllocBuffer(n) }

// Close implements blockdev.Device: it stops sampling and closes the
// wrapped device.
func (r *Recorder) Close() error {
	r.Stop()
	return r.dev.Close()
}

// Submit implements blockdev.Device.
func (r *Recorder) Submit(req *blockdev.Request) error {
	s := <-r.free
	q := &s.req
	q.Op, q.Flags, q.Offset, q.Length, q.Buf, q.BufOff, q.Queue, q.Err = req.Op, req.Flags, req.Offset, req.Length, req.Buf, req.BufOff, req.Queue, nil
	s.outer = req
	if err := r.dev.Submit(q); err != nil {
		s.outer, q.Buf = nil, nil
		r.free <- s
		return err
	}
	return nil
}

func (r *Recorder) onDone(q *blockdev.Request) {
	s := q.Ctx.(*shadow)
	out := s.outer
	out.Err, out.Issued, out.Completed = q.Err, q.Issued, q.Completed
	if q.Err == nil {
		i := int(uint(q.Queue) % uint(len(r.hmu)))
		lat := q.Completed.Sub(q.Issued)
		switch q.Op {
		case blockdev.OpRead:
			r.rOps.Add(1)
			r.rBytes.Add(uint64(q.Length))
			r.hmu[i].Lock()
			r.rHist[i].Record(lat)
			r.hmu[i].Unlock()
		case blockdev.OpWrite:
			r.wOps.Add(1)
			r.wBytes.Add(uint64(q.Length))
			r.hmu[i].Lock()
			r.wHist[i].Record(lat)
			r.hmu[i].Unlock()
		}
	}
	s.outer, q.Buf = nil, nil
	r.free <- s
	blockdev.Complete(out)
}

func (r *Recorder) sample() {
	defer close(r.done)
	t := time.NewTicker(r.interval)
	defer t.Stop()
	var last [4]uint64
	lastAt := r.start
	take := func(now time.Time) {
		cur := [4]uint64{r.rOps.Load(), r.wOps.Load(), r.rBytes.Load(), r.wBytes.Load()}
		sec := now.Sub(lastAt).Seconds()
		if sec <= 0 {
			return
		}
		s := Sample{At: now.Sub(r.start),
			ReadIOPS: float64(cur[0]-last[0]) / sec, WriteIOPS: float64(cur[1]-last[1]) / sec,
			ReadBW: float64(cur[2]-last[2]) / sec, WriteBW: float64(cur[3]-last[3]) / sec}
		r.mu.Lock()
		r.series = append(r.series, s)
		r.mu.Unlock()
		last, lastAt = cur, now
	}
	for {
		select {
		case now := <-t.C:
			take(now)
		case <-r.stop:
			if now := time.Now(); now.Sub(lastAt) > r.interval/4 {
				take(now)
			}
			return
		}
	}
}

// Stop ends sampling (idempotent).
func (r *Recorder) Stop() {
	r.once.Do(func() { close(r.stop) })
	<-r.done
}

// percentiles at which the distributions are drawn.
var percentiles = func() []float64 {
	var ps []float64
	for p := 0.5; p < 90; p += 0.5 {
		ps = append(ps, p)
	}
	for p := 90.0; p < 99; p += 0.1 {
		ps = append(ps, p)
	}
	for p := 99.0; p < 100; p += 0.01 {
		ps = append(ps, p)
	}
	return append(ps, 100)
}()

// Run stops sampling and returns what was recorded, titled.
func (r *Recorder) Run(title string) Run {
	r.Stop()
	run := Run{Title: title}
	r.mu.Lock()
	run.Samples = append([]Sample(nil), r.series...)
	r.mu.Unlock()
	var rh, wh latency.Histogram
	for i := range r.hmu {
		r.hmu[i].Lock()
		rh.Add(&r.rHist[i])
		wh.Add(&r.wHist[i])
		r.hmu[i].Unlock()
	}
	curve := func(h *latency.Histogram) []Point {
		if h.Count() == 0 {
			return nil
		}
		pts := make([]Point, 0, len(percentiles))
		for _, p := range percentiles {
			pts = append(pts, Point{Percent: p, Latency: h.Percentile(p)})
		}
		return pts
	}
	run.Read, run.Write = curve(&rh), curve(&wh)
	return run
}

// Plot stops sampling and draws the run to path (.svg or .png).
func (r *Recorder) Plot(path, title string) error { return Plot(path, r.Run(title)) }
