package multipath

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/internal/units"
)

// Policy chooses among the usable paths of the best access class.
type Policy uint8

// Policies.
const (
	// RoundRobin sends each request to the next path (the default).
	RoundRobin Policy = iota
	// QueueDepth sends each request to the path with the fewest requests
	// in flight.
	QueueDepth
)

// String names the policy as ParsePolicy takes it.
func (p Policy) String() string {
	switch p {
	case RoundRobin:
		return "round-robin"
	case QueueDepth:
		return "queue-depth"
	}
	return fmt.Sprintf("Policy(%d)", uint8(p))
}

// ParsePolicy parses "round-robin" or "queue-depth" (nvme_core's iopolicy
// names); "" is RoundRobin.
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "", "round-robin":
		return RoundRobin, nil
	case "queue-depth":
		return QueueDepth, nil
	}
	return 0, fmt.Errorf("multipath: unknown policy %q (want round-robin or queue-depth)", s)
}

// Defaults of Config.
const (
	DefaultLossTimeout     = 60 * time.Second
	DefaultRecheckInterval = 5 * time.Second
)

// Path is one path to the disk.
type Path struct {
	// Name identifies the path (e.g. its URL); unique within a Device.
	Name string
	// Dev is the path's device. The Device owns it from New or AddPath on,
	// and closes it.
	Dev blockdev.Device
}

// Config describes a Device. Zero durations take the defaults.
type Config struct {
	// Name is Info().Name [the first path's name].
	Name  string
	Paths []Path
	// Policy chooses among the paths [RoundRobin].
	Policy Policy
	// LossTimeout bounds how long a request waits while no path is usable
	// (nvme-cli's ctrl_loss_tmo, multipath's no_path_retry); then it fails
	// with a *NoPathError matching blockdev.ErrIO [60 s]. Negative waits
	// forever.
	LossTimeout time.Duration
	// RecheckInterval is how often the access state of unusable paths is
	// re-read for failback [5 s].
	RecheckInterval time.Duration
	// Logger receives path state changes [discard].
	Logger *slog.Logger
}

// BufferRegistrar is an optional capability of a path device: registering
// memory the caller owns (initiator.BufferRegistrar). The Device implements
// it too.
type BufferRegistrar interface {
	RegisterBuffer(mem []byte) (blockdev.Buffer, error)
}

// NoPathError is what a request fails with when no path was usable for
// the loss timeout, or every path is gone for good. It matches
// blockdev.ErrIO.
type NoPathError struct {
	// Name is the Device's name.
	Name string
	// For is how long the request waited.
	For time.Duration
	// Err is the last path error, if any.
	Err error
}

func (e *NoPathError) Error() string {
	s := fmt.Sprintf("%s: no usable path for %v", e.Name, e.For.Round(time.Millisecond))
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the last path error and blockdev.ErrIO.
func (e *NoPathError) Unwrap() []error {
	if e.Err == nil {
		return []error{blockdev.ErrIO}
	}
	return []error{e.Err, blockdev.ErrIO}
}

// Stats are a Device's counters.
type Stats struct {
	Reads        uint64 `json:"reads"`
	Writes       uint64 `json:"writes"`
	Flushes      uint64 `json:"flushes"`
	Discards     uint64 `json:"discards"`
	WriteZeroes  uint64 `json:"write_zeroes"`
	BytesRead    uint64 `json:"bytes_read"`
	BytesWritten uint64 `json:"bytes_written"`
	// Errors counts requests completed with an error.
	Errors uint64 `json:"errors"`
	// Failovers counts requests sent again after their path failed them.
	Failovers uint64 `json:"failovers"`
	// InFlight is the number of requests submitted and not completed.
	InFlight int64 `json:"in_flight"`
}

// Device is a blockdev.Device over several paths to one disk. Its methods
// are safe for concurrent use.
type Device struct {
	cfg  Config
	log  *slog.Logger
	info blockdev.Info // as opened; Size is the paths' size then (see size)
	// size is the disk's size as the paths last reported it: a resize
	// reaches each path on its own (an NVMe AEN, a SCSI unit attention),
	// and the device follows the smallest.
	size atomic.Int64

	paths atomic.Pointer[[]*path] // the selectable paths, copy on write under mu
	rr    atomic.Uint32           // round robin: index of the last path taken
	slots []chan struct{}         // per queue: a token per request in flight
	free  chan *mreq
	// noPath is set once a request waited the loss timeout without a
	// usable path: requests fail at once until a path is usable.
	noPath atomic.Pointer[NoPathError]

	mu      sync.Mutex
	diskID  string
	nextID  int
	waiting []*sub // the requeue list
	closed  bool
	lastErr error

	closing   atomic.Bool
	kick      chan struct{}
	done      chan struct{} // closed by Close
	superDone chan struct{}
	refreshes sync.WaitGroup

	reads, writes, flushes, discards, zeroes atomic.Uint64
	bytesRead, bytesWritten                  atomic.Uint64
	errs, failovers                          atomic.Uint64
	inflight                                 atomic.Int64

	onDoneFn func(*blockdev.Request)
}

// mreq carries one caller request through its paths.
type mreq struct {
	outer  *blockdev.Request
	buf    *mpBuffer
	slot   int
	issued time.Time
	main   sub
	// kids are the per-path flushes of a flush (grown to the number of
	// paths, then reused).
	kids    []*sub
	pending atomic.Int32
	mu      sync.Mutex
	err     error
}

// sub is one request on one path: the caller's request, or one path's
// flush of a flush.
type sub struct {
	req    blockdev.Request
	m      *mreq
	path   *path
	pinned bool // a flush of one path's writes: only that path will do
	bounce bool
	tries  int
	since  time.Time // when it started waiting for a path; zero if not
}

const maxTries = 32

// New returns a Device over cfg.Paths (at least one), which it owns from
// then on (even when it fails: it closes them then).
func New(cfg Config) (*Device, error) {
	if len(cfg.Paths) == 0 {
		return nil, errors.New("multipath: no paths")
	}
	fail := func(err error) (*Device, error) {
		for _, p := range cfg.Paths {
			if p.Dev != nil {
				p.Dev.Close()
			}
		}
		return nil, err
	}
	if cfg.LossTimeout == 0 {
		cfg.LossTimeout = DefaultLossTimeout
	}
	if cfg.RecheckInterval <= 0 {
		cfg.RecheckInterval = DefaultRecheckInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Policy > QueueDepth {
		return fail(fmt.Errorf("multipath: unknown policy %v", cfg.Policy))
	}
	d := &Device{cfg: cfg, log: cfg.Logger, kick: make(chan struct{}, 1), done: make(chan struct{}), superDone: make(chan struct{})}
	var ps []*path
	for i, pc := range cfg.Paths {
		if err := checkPath(pc); err != nil {
			return fail(err)
		}
		for _, o := range ps {
			if o.name == pc.Name {
				return fail(fmt.Errorf("multipath: path %q given twice", pc.Name))
			}
		}
		in := pc.Dev.Info()
		id := diskID(pc.Dev)
		if i == 0 {
			d.info = in
			d.diskID = id
		} else {
			if err := d.sameDisk(pc.Name, in, id); err != nil {
				return fail(err)
			}
			if d.diskID == "" {
				d.diskID = id
			}
			d.info.Caps &= in.Caps
			d.info.MaxTransfer = min(d.info.MaxTransfer, in.MaxTransfer)
			d.info.MaxZeroes = min(d.info.MaxZeroes, in.MaxZeroes)
			d.info.Queues = min(d.info.Queues, in.Queues)
			d.info.QueueDepth = min(d.info.QueueDepth, in.QueueDepth)
		}
		ps = append(ps, d.newPath(pc))
	}
	if d.info.BlockSize <= 0 || d.info.Queues <= 0 || d.info.QueueDepth <= 0 {
		return fail(fmt.Errorf("multipath: path %q: bad geometry (block size %d, %d queues of %d)", cfg.Paths[0].Name,
			d.info.BlockSize, d.info.Queues, d.info.QueueDepth))
	}
	if cfg.Name == "" {
		cfg.Name = cfg.Paths[0].Name
		d.cfg.Name = cfg.Name
	}
	d.info.Name = cfg.Name
	d.size.Store(d.info.Size)
	d.paths.Store(&ps)
	d.onDoneFn = d.onDone
	n := d.info.Queues * d.info.QueueDepth
	d.free = make(chan *mreq, n)
	for range n {
		m := &mreq{}
		m.main.m = m
		m.main.req.Ctx, m.main.req.Done = &m.main, d.onDoneFn
		d.free <- m
	}
	for range d.info.Queues {
		d.slots = append(d.slots, make(chan struct{}, d.info.QueueDepth))
	}
	go d.supervise()
	d.log.Info("multipath: device ready", "name", cfg.Name, "paths", len(ps), "policy", cfg.Policy, "disk", d.diskID)
	return d, nil
}

func checkPath(pc Path) error {
	if pc.Name == "" {
		return errors.New("multipath: a path without a name")
	}
	if pc.Dev == nil {
		return fmt.Errorf("multipath: path %q without a device", pc.Name)
	}
	return nil
}

func diskID(dev blockdev.Device) string {
	if id, ok := dev.(blockdev.Identifier); ok {
		return id.DiskID()
	}
	return ""
}

// sameDisk checks that a path reaches the Device's disk (d.mu held, or
// during New).
func (d *Device) sameDisk(name string, in blockdev.Info, id string) error {
	if id != "" && d.diskID != "" && id != d.diskID {
		return fmt.Errorf("multipath: path %q reaches disk %q, not %q", name, id, d.diskID)
	}
	size := d.size.Load()
	if size == 0 { // during New
		size = d.info.Size
	}
	if in.BlockSize != d.info.BlockSize || in.Size != size {
		return fmt.Errorf("multipath: path %q is a %s disk in %d-byte blocks, not %s in %d", name,
			units.FormatSize(in.Size), in.BlockSize, units.FormatSize(size), d.info.BlockSize)
	}
	return nil
}

// Info implements blockdev.Device. Size is the smallest of the paths'
// current sizes, so it follows a resize once every path has seen it.
func (d *Device) Info() blockdev.Info {
	in := d.info
	in.Size = d.refreshSize()
	return in
}

// refreshSize reads the paths' sizes and keeps the smallest; with no path
// it keeps the last one.
func (d *Device) refreshSize() int64 {
	size := int64(0)
	for _, p := range *d.paths.Load() {
		if s := p.dev.Info().Size; s > 0 && (size == 0 || s < size) {
			size = s
		}
	}
	if size > 0 {
		d.size.Store(size)
		return size
	}
	return d.size.Load()
}

// DiskID implements blockdev.Identifier: the paths' common identity ("" if
// none reports one).
func (d *Device) DiskID() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.diskID
}

// Stats returns the counters.
func (d *Device) Stats() Stats {
	return Stats{
		Reads: d.reads.Load(), Writes: d.writes.Load(), Flushes: d.flushes.Load(),
		Discards: d.discards.Load(), WriteZeroes: d.zeroes.Load(),
		BytesRead: d.bytesRead.Load(), BytesWritten: d.bytesWritten.Load(),
		Errors: d.errs.Load(), Failovers: d.failovers.Load(), InFlight: d.inflight.Load(),
	}
}

// Waiting returns the number of requests on the requeue list (waiting for
// a usable path, or about to be sent again).
func (d *Device) Waiting() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.waiting)
}

// LastError returns the last path error (nil if none).
func (d *Device) LastError() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lastErr
}

// Usable returns the number of paths that serve I/O now.
func (d *Device) Usable() int {
	n := 0
	for _, p := range *d.paths.Load() {
		if p.class() < classUnusable {
			n++
		}
	}
	return n
}

// Submit implements blockdev.Device. It blocks while the request's queue
// holds QueueDepth requests. While no path is usable the request waits (and
// Submit returns nil), up to the loss timeout.
func (d *Device) Submit(r *blockdev.Request) error {
	info := d.info
	info.Size = d.size.Load()
	err := blockdev.Check(&info, r)
	if errors.Is(err, blockdev.ErrRange) {
		// Beyond the size last seen: the disk may have grown since.
		info.Size = d.refreshSize()
		err = blockdev.Check(&info, r)
	}
	if err != nil {
		return err
	}
	var b *mpBuffer
	if r.Op == blockdev.OpRead || r.Op == blockdev.OpWrite {
		mb, ok := r.Buf.(*mpBuffer)
		if !ok || mb.d != d || mb.released.Load() {
			return blockdev.ErrBuffer
		}
		b = mb
	}
	if d.closing.Load() {
		return blockdev.ErrClosed
	}
	q := int(uint(r.Queue) % uint(len(d.slots)))
	select {
	case d.slots[q] <- struct{}{}:
	default:
		select {
		case d.slots[q] <- struct{}{}:
		case <-d.done:
			return blockdev.ErrClosed
		}
	}
	m := <-d.free // there is one per slot
	m.outer, m.buf, m.slot, m.issued, m.err = r, b, q, time.Time{}, nil
	d.inflight.Add(1)
	if r.Op == blockdev.OpFlush {
		err = d.startFlush(m)
	} else {
		s := &m.main
		s.reset(r, q)
		err = d.send(s, true)
	}
	if err != nil {
		d.release(m)
		return err
	}
	return nil
}

func (s *sub) reset(r *blockdev.Request, q int) {
	qr := &s.req
	qr.Op, qr.Flags, qr.Offset, qr.Length, qr.Queue = r.Op, r.Flags, r.Offset, r.Length, q
	qr.Buf, qr.BufOff, qr.Err = nil, 0, nil
	qr.Issued, qr.Completed = time.Time{}, time.Time{}
	s.path, s.pinned, s.bounce, s.tries, s.since = nil, false, false, 0, time.Time{}
}

// startFlush sends a flush to every path that completed writes since its
// last flush, or to one path when none did.
func (d *Device) startFlush(m *mreq) error {
	k := 0
	if d.info.Caps.Has(blockdev.CapFlush) {
		for _, p := range *d.paths.Load() {
			if !p.dirty.Swap(false) {
				continue
			}
			if k == len(m.kids) {
				s := &sub{m: m}
				s.req.Ctx, s.req.Done = s, d.onDoneFn
				m.kids = append(m.kids, s)
			}
			s := m.kids[k]
			s.reset(m.outer, m.slot)
			s.path, s.pinned = p, true
			k++
		}
	}
	if k == 0 {
		s := &m.main
		s.reset(m.outer, m.slot)
		return d.send(s, true)
	}
	m.pending.Store(int32(k))
	for _, s := range m.kids[:k] {
		d.send(s, false)
	}
	return nil
}

// send submits s to a usable path (its own when pinned), failing over when
// a path refuses it, or puts it on the requeue list. It returns an error
// (s not completed) only when first is set: a request the paths refuse as
// invalid, or the Device closed or failed; otherwise it completes s with
// such errors.
func (d *Device) send(s *sub, first bool) error {
	attempts := 0
	for {
		var p *path
		if s.pinned {
			p = s.path
			if p.hopeless() {
				return d.fail(s, first, fmt.Errorf("multipath: %s: path %s carried writes and is gone before they were flushed (%w)",
					d.cfg.Name, p.name, blockdev.ErrIO))
			}
			if p.class() == classUnusable {
				p = nil
			}
		} else {
			p = d.pick()
		}
		if p == nil || attempts > 2+len(*d.paths.Load()) {
			if !s.pinned {
				if err := d.noPathNow(); err != nil {
					return d.fail(s, first, err)
				}
			}
			return d.wait(s, first)
		}
		attempts++
		err := d.submitOn(s, p)
		if err == nil {
			if d.noPath.Load() != nil {
				d.noPath.Store(nil)
			}
			return nil
		}
		if blockdev.IsRequestError(err) {
			return d.fail(s, first, err)
		}
		d.pathFailed(p, err)
	}
}

// fail ends s with err: returned when first, completed otherwise.
func (d *Device) fail(s *sub, first bool, err error) error {
	if first {
		return err
	}
	d.subDone(s, err)
	return nil
}

// noPathNow returns the error a request without a usable path fails with at
// once (nil: it waits): after a loss timeout passed, or when every path is
// gone for good.
func (d *Device) noPathNow() error {
	if e := d.noPath.Load(); e != nil {
		return e
	}
	ps := *d.paths.Load()
	if len(ps) == 0 {
		return nil
	}
	for _, p := range ps {
		if !p.hopeless() {
			return nil
		}
	}
	return &NoPathError{Name: d.cfg.Name, Err: fmt.Errorf("every path is gone: %w", d.LastError())}
}

// submitOn submits s on p.
func (d *Device) submitOn(s *sub, p *path) error {
	q := &s.req
	s.path = p
	q.Buf, q.BufOff, s.bounce = nil, 0, false
	m := s.m
	if m.buf != nil && s == &m.main {
		buf, bounce, err := m.buf.forPath(p)
		if err != nil {
			return err
		}
		q.Buf, q.BufOff, s.bounce = buf, m.outer.BufOff, bounce
		if bounce && q.Op == blockdev.OpWrite {
			copy(buf.Bytes()[q.BufOff:q.BufOff+q.Length], m.buf.mem[q.BufOff:])
		}
	}
	q.Err = nil
	p.inflight.Add(1)
	if err := p.dev.Submit(q); err != nil {
		p.inflight.Add(-1)
		return err
	}
	return nil
}

// isPathError tells whether a completion error is the path's, not the
// request's: another path may serve it.
func isPathError(err error) bool {
	return errors.Is(err, blockdev.ErrPath) || errors.Is(err, blockdev.ErrClosed)
}

// onDone is a path's completion of a sub.
func (d *Device) onDone(r *blockdev.Request) {
	s := r.Ctx.(*sub)
	p := s.path
	p.inflight.Add(-1)
	err := r.Err
	if err != nil && isPathError(err) && !d.closing.Load() {
		p.failovers.Add(1)
		d.failovers.Add(1)
		d.pathFailed(p, err)
		s.tries++
		if s.tries > maxTries {
			d.subDone(s, fmt.Errorf("multipath: %s: request failed on %d paths: %w (%w)", d.cfg.Name, s.tries, err, blockdev.ErrIO))
			return
		}
		if s == &s.m.main && s.m.issued.IsZero() {
			s.m.issued = r.Issued // flush kids may fail at once: only the main sub writes it
		}
		d.requeue(s)
		return
	}
	if err != nil {
		p.errs.Add(1)
		if s.pinned {
			p.dirty.Store(true) // the path failed its flush: try it again at the next one
		}
	} else {
		p.completed.Add(1)
		switch r.Op {
		case blockdev.OpWrite, blockdev.OpDiscard, blockdev.OpWriteZeroes:
			if r.Flags&blockdev.FUA == 0 && d.info.Caps.Has(blockdev.CapFlush) && !p.dirty.Load() {
				p.dirty.Store(true)
			}
		}
	}
	d.subDone(s, err)
}

// subDone ends one sub: a flush kid counts down its flush, the main sub
// completes the caller's request.
func (d *Device) subDone(s *sub, err error) {
	m := s.m
	if s != &m.main {
		if err != nil {
			m.mu.Lock()
			if m.err == nil {
				m.err = err
			}
			m.mu.Unlock()
		}
		if m.pending.Add(-1) > 0 {
			return
		}
		m.mu.Lock()
		err = m.err
		m.mu.Unlock()
		d.finish(m, err, time.Time{}, time.Time{})
		return
	}
	q := &s.req
	if err == nil && s.bounce && q.Op == blockdev.OpRead {
		copy(m.buf.mem[q.BufOff:q.BufOff+q.Length], q.Buf.Bytes()[q.BufOff:])
	}
	d.finish(m, err, q.Issued, q.Completed)
}

// finish completes the caller's request: counters, the mreq back to the
// pool and the slot freed, then the caller's completion.
func (d *Device) finish(m *mreq, err error, issued, completed time.Time) {
	out := m.outer
	switch {
	case err != nil:
		if d.errs.Add(1) <= 10 {
			d.log.Warn("multipath: I/O error", "name", d.cfg.Name, "op", out.Op, "offset", out.Offset, "length", out.Length, "err", err)
		}
	case out.Op == blockdev.OpRead:
		d.reads.Add(1)
		d.bytesRead.Add(uint64(out.Length))
	case out.Op == blockdev.OpWrite:
		d.writes.Add(1)
		d.bytesWritten.Add(uint64(out.Length))
	case out.Op == blockdev.OpFlush:
		d.flushes.Add(1)
	case out.Op == blockdev.OpDiscard:
		d.discards.Add(1)
	case out.Op == blockdev.OpWriteZeroes:
		d.zeroes.Add(1)
	}
	if !m.issued.IsZero() {
		issued = m.issued
	}
	if completed.IsZero() {
		completed = time.Now()
	}
	if issued.IsZero() {
		issued = completed
	}
	out.Err, out.Issued, out.Completed = err, issued, completed
	d.release(m)
	blockdev.Complete(out)
}

// release returns m to the pool and frees its slot.
func (d *Device) release(m *mreq) {
	slot := m.slot
	m.outer, m.buf = nil, nil
	m.main.req.Buf, m.main.path = nil, nil
	for _, s := range m.kids {
		s.path = nil
	}
	d.inflight.Add(-1)
	d.free <- m
	<-d.slots[slot]
}

// requeue puts s on the requeue list for the supervisor.
func (d *Device) requeue(s *sub) {
	if err := d.wait(s, false); err != nil {
		d.subDone(s, err)
	}
}

// wait puts s on the requeue list. It returns blockdev.ErrClosed when the
// Device is closed (s not queued, not completed) if first is set, and
// completes s with it otherwise.
func (d *Device) wait(s *sub, first bool) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return d.fail(s, first, blockdev.ErrClosed)
	}
	if s.since.IsZero() {
		s.since = time.Now()
	}
	d.waiting = append(d.waiting, s)
	d.mu.Unlock()
	d.poke()
	return nil
}

func (d *Device) poke() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Close implements blockdev.Device: it closes every path; requests in
// flight and waiting fail with blockdev.ErrClosed.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.closing.Store(true)
	close(d.done)
	d.mu.Unlock()
	<-d.superDone
	var errs []error
	for _, p := range *d.paths.Load() {
		if err := p.dev.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing path %s: %w", p.name, err))
		}
	}
	d.refreshes.Wait()
	d.mu.Lock()
	waiting := d.waiting
	d.waiting = nil
	d.mu.Unlock()
	for _, s := range waiting {
		d.subDone(s, blockdev.ErrClosed)
	}
	d.log.Info("multipath: device closed", "name", d.cfg.Name)
	return errors.Join(errs...)
}

// names lists the path names (for messages).
func names(ps []*path) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.name)
	}
	return strings.Join(s, ", ")
}

// Failing reports whether requests fail at once for want of a usable path
// (a request waited the loss timeout, and no path has been usable since).
func (d *Device) Failing() bool { return d.noPath.Load() != nil && d.Usable() == 0 }
