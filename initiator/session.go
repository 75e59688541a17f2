package initiator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/internal/units"
)

// State is a session's connection state.
type State uint8

// Session states.
const (
	// StateLive: connected; I/O flows.
	StateLive State = iota + 1
	// StateReconnecting: the connection was lost; I/O waits (queued) for a
	// new one until the loss timeout.
	StateReconnecting
	// StateFailed: no new connection within the loss timeout; I/O fails
	// with an error matching blockdev.ErrIO.
	StateFailed
	// StateClosed: closed by its owner.
	StateClosed
)

// String names the state as `rdisk list` shows it.
func (s State) String() string {
	switch s {
	case StateLive:
		return "live"
	case StateReconnecting:
		return "reconnecting"
	case StateFailed:
		return "failed"
	case StateClosed:
		return "closed"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Defaults of SessionConfig.
const (
	DefaultLossTimeout    = 60 * time.Second
	DefaultReconnectDelay = time.Second
	DefaultConnectTimeout = 10 * time.Second
)

// SessionConfig describes a session. Zero durations take the defaults.
type SessionConfig struct {
	// URL names the remote disk; Dial opens it.
	URL  string
	Dial Dialer
	// LossTimeout bounds how long I/O waits for a new connection after the
	// connection is lost (nvme-cli's ctrl_loss_tmo) [60 s]; negative waits
	// forever.
	LossTimeout time.Duration
	// ReconnectDelay is the pause between connection attempts (nvme-cli's
	// reconnect_delay) [1 s].
	ReconnectDelay time.Duration
	// ConnectTimeout bounds one connection attempt [10 s].
	ConnectTimeout time.Duration
	// Logger receives state changes [discard].
	Logger *slog.Logger
	// FailFast makes the session a path of a multipath device
	// (initiator/multipath): when the connection is lost, its requests in
	// flight complete at once with a *PathDownError (matching
	// blockdev.ErrPath and blockdev.ErrClosed) instead of waiting for a new
	// connection, and Submit refuses new ones with it until the session is
	// reconnected; it keeps reconnecting in the background for
	// LossTimeout, and fails after it as without FailFast.
	FailFast bool
}

// LostError is what I/O fails with once a session gave up reconnecting.
// It matches blockdev.ErrIO (so frontends report EIO) and blockdev.ErrClosed.
type LostError struct {
	URL string
	// For is how long the session tried.
	For time.Duration
	// Err is the last connection error.
	Err error
}

func (e *LostError) Error() string {
	return fmt.Sprintf("%s: connection lost and not re-established within %v: %v", e.URL, e.For.Round(time.Millisecond), e.Err)
}

// Unwrap returns the last connection error and the sentinels the error
// matches.
func (e *LostError) Unwrap() []error { return []error{e.Err, blockdev.ErrIO, blockdev.ErrClosed} }

// PathDownError is what a fail-fast session's requests fail with while
// its connection is down (SessionConfig.FailFast). It matches
// blockdev.ErrPath (another path may serve the request), blockdev.ErrClosed
// (this path's connection is gone) and blockdev.ErrIO.
type PathDownError struct {
	URL string
	// Err is the connection error.
	Err error
}

func (e *PathDownError) Error() string {
	return fmt.Sprintf("%s: connection lost, reconnecting: %v", e.URL, e.Err)
}

// Unwrap returns the connection error and the sentinels the error matches.
func (e *PathDownError) Unwrap() []error {
	return []error{e.Err, blockdev.ErrPath, blockdev.ErrClosed, blockdev.ErrIO}
}

func isPathDown(err error) bool {
	var pd *PathDownError
	return errors.As(err, &pd)
}

// BufferRegistrar is an optional capability of a device: registering
// memory the caller owns. A session uses it after a reconnect so that the
// buffers its frontends hold stay zero-copy on the new connection; without
// it the session bounces the data through buffers of the new device.
type BufferRegistrar interface {
	RegisterBuffer(mem []byte) (blockdev.Buffer, error)
}

// doner is an optional capability of a device: a channel closed when its
// connection fails, so the session reconnects before the next I/O.
type doner interface {
	Done() <-chan struct{}
}

// Stats are a session's counters.
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
	// Retries counts requests resubmitted after a connection loss.
	Retries uint64 `json:"retries"`
	// Reconnects counts successful reconnections.
	Reconnects uint64 `json:"reconnects"`
	// InFlight is the number of requests submitted and not completed.
	InFlight int64 `json:"in_flight"`
}

// Session is a blockdev.Device over a connection to a remote disk that
// reconnects: when the connection fails, requests in flight and new ones
// wait and are resubmitted on a new connection, for up to the loss
// timeout; after it they fail with a *LostError.
//
// Buffers from Session.AllocBuffer stay valid across reconnects. Its
// methods are safe for concurrent use.
type Session struct {
	cfg  SessionConfig
	log  *slog.Logger
	info blockdev.Info

	cur    atomic.Pointer[link] // nil while not live
	diskID string               // the first connection's blockdev.Identifier
	// stateA mirrors state for AccessState's lock-free read.
	stateA atomic.Uint32
	// lostGen is the generation of a connection a fail-fast session saw
	// fail: the supervisor replaces it.
	lostGen atomic.Uint64
	free    chan *inner
	all     []*inner

	mu       sync.Mutex
	state    State
	gen      uint64
	parked   []*inner
	lostAt   time.Time
	lastErr  error
	failErr  *LostError
	closing  atomic.Bool
	ctx      context.Context // cancelled by Close: aborts a reconnect attempt
	cancel   context.CancelFunc
	kick     chan struct{}
	closed   chan struct{}
	superved chan struct{}
	stateAt  time.Time

	reads, writes, flushes, discards, zeroes atomic.Uint64
	bytesRead, bytesWritten                  atomic.Uint64
	errs, retries, reconnects                atomic.Uint64
	inflight                                 atomic.Int64

	onDoneFn func(*blockdev.Request)
}

// link is one connection: a device and its generation.
type link struct {
	dev  blockdev.Device
	gen  uint64
	done <-chan struct{}
	rep  blockdev.PathReporter // dev's, if it reports one
}

// inner is the session's request to the device for one caller request.
type inner struct {
	req    blockdev.Request
	outer  *blockdev.Request
	buf    *sessBuffer
	bounce bool
	issued time.Time
	gen    uint64
	tries  int // connection losses this request went through
}

// NewSession connects (once: the first connection must succeed) and
// returns the live session.
func NewSession(ctx context.Context, cfg SessionConfig) (*Session, error) {
	if cfg.Dial == nil {
		return nil, errors.New("initiator: session without a dialer")
	}
	if cfg.LossTimeout == 0 {
		cfg.LossTimeout = DefaultLossTimeout
	}
	if cfg.ReconnectDelay <= 0 {
		cfg.ReconnectDelay = DefaultReconnectDelay
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	dev, err := cfg.Dial(cctx, cfg.URL)
	cancel()
	if err != nil {
		return nil, err
	}
	s := &Session{cfg: cfg, log: cfg.Logger, info: dev.Info(), state: StateLive, gen: 1,
		kick: make(chan struct{}, 1), closed: make(chan struct{}), superved: make(chan struct{}), stateAt: time.Now()}
	s.info.Name = cfg.URL
	s.stateA.Store(uint32(StateLive))
	if id, ok := dev.(blockdev.Identifier); ok {
		s.diskID = id.DiskID()
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	n := max(s.info.Queues*s.info.QueueDepth, 1)
	s.free = make(chan *inner, n)
	s.onDoneFn = s.onDone
	for range n {
		in := &inner{}
		in.req.Done = s.onDoneFn
		in.req.Ctx = in
		s.all = append(s.all, in)
		s.free <- in
	}
	s.cur.Store(newLink(dev, 1))
	go s.supervise()
	return s, nil
}

func newLink(dev blockdev.Device, gen uint64) *link {
	l := &link{dev: dev, gen: gen}
	if d, ok := dev.(doner); ok {
		l.done = d.Done()
	}
	l.rep, _ = dev.(blockdev.PathReporter)
	return l
}

// Info implements blockdev.Device: the Info of the first connection, named
// by the URL.
func (s *Session) Info() blockdev.Info { return s.info }

// URL returns the session's URL.
func (s *Session) URL() string { return s.cfg.URL }

// State returns the connection state and when it was entered.
func (s *Session) State() (State, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state, s.stateAt
}

// LastError returns the last connection error (nil if none).
func (s *Session) LastError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

// Stats returns the counters.
func (s *Session) Stats() Stats {
	return Stats{
		Reads: s.reads.Load(), Writes: s.writes.Load(), Flushes: s.flushes.Load(),
		Discards: s.discards.Load(), WriteZeroes: s.zeroes.Load(),
		BytesRead: s.bytesRead.Load(), BytesWritten: s.bytesWritten.Load(),
		Errors: s.errs.Load(), Retries: s.retries.Load(), Reconnects: s.reconnects.Load(),
		InFlight: s.inflight.Load(),
	}
}

// Waiting returns the number of requests queued for a new connection (the
// connection was lost, or the request is about to be resubmitted on the
// new one).
func (s *Session) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.parked)
}

// Submit implements blockdev.Device. It blocks while the session has
// Queues*QueueDepth requests in flight. While reconnecting it queues the
// request (and returns nil); once the session failed it returns the
// *LostError.
func (s *Session) Submit(r *blockdev.Request) error {
	if err := blockdev.Check(&s.info, r); err != nil {
		return err
	}
	var sb *sessBuffer
	if r.Op == blockdev.OpRead || r.Op == blockdev.OpWrite {
		b, ok := r.Buf.(*sessBuffer)
		if !ok || b.s != s || b.released.Load() {
			return blockdev.ErrBuffer
		}
		sb = b
	}
	if s.closing.Load() {
		return blockdev.ErrClosed
	}
	var in *inner
	select {
	case in = <-s.free:
	default:
		select {
		case in = <-s.free:
		case <-s.closed:
			return blockdev.ErrClosed
		}
	}
	in.outer, in.buf, in.issued, in.gen, in.tries = r, sb, time.Time{}, 0, 0
	q := &in.req
	q.Op, q.Flags, q.Offset, q.Length, q.Queue = r.Op, r.Flags, r.Offset, r.Length, r.Queue
	s.inflight.Add(1)
	if err := s.issue(in); err != nil {
		s.inflight.Add(-1)
		in.outer, in.buf = nil, nil
		s.free <- in
		return err
	}
	return nil
}

// issue sends in on the current connection, or parks it. It returns an
// error only for a request the device refused as invalid (or when the
// session is closed or failed), with in not completed.
func (s *Session) issue(in *inner) error {
	l := s.cur.Load()
	if l == nil {
		return s.park(in, nil)
	}
	q := &in.req
	q.Buf, q.BufOff, in.bounce = nil, 0, false
	in.gen = l.gen
	if in.buf != nil {
		buf, bounce, err := in.buf.forLink(l)
		if err != nil {
			if errors.Is(err, blockdev.ErrClosed) && !s.closing.Load() {
				return s.park(in, err)
			}
			return err
		}
		q.Buf, q.BufOff, in.bounce = buf, in.outer.BufOff, bounce
		if bounce && q.Op == blockdev.OpWrite {
			copy(buf.Bytes()[q.BufOff:q.BufOff+q.Length], in.buf.mem[q.BufOff:])
		}
	}
	q.Err = nil
	if err := l.dev.Submit(q); err != nil {
		if !blockdev.IsRequestError(err) && !s.closing.Load() {
			return s.park(in, err)
		}
		return err
	}
	return nil
}

// maxTries bounds how many connections one request is tried on.
const maxTries = 8

// park queues in for the supervisor: resubmission on a newer connection, or
// a reconnect when its connection is the current one. It returns an error
// (without completing in) when the session is closed or failed.
func (s *Session) park(in *inner, cause error) error {
	s.mu.Lock()
	switch s.state {
	case StateClosed:
		s.mu.Unlock()
		return blockdev.ErrClosed
	case StateFailed:
		err := s.failErr
		s.mu.Unlock()
		return err
	}
	if s.cfg.FailFast {
		if cause != nil {
			s.lastErr = cause
		}
		err := &PathDownError{URL: s.cfg.URL, Err: s.lastErr}
		if err.Err == nil {
			err.Err = errors.New("not connected")
		}
		s.mu.Unlock()
		if cause != nil && in.gen != 0 {
			// Replace the failed connection (once: the supervisor
			// ignores an older generation).
			if s.lostGen.Load() < in.gen {
				s.lostGen.Store(in.gen)
			}
			select {
			case s.kick <- struct{}{}:
			default:
			}
		}
		return err
	}
	if cause != nil {
		s.lastErr = cause
		in.tries++
		if in.tries > maxTries {
			// The request fails on every connection: give up on it alone.
			s.mu.Unlock()
			return fmt.Errorf("%s: request failed on %d connections: %w (%w)", s.cfg.URL, in.tries, cause, blockdev.ErrIO)
		}
	}
	s.parked = append(s.parked, in)
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return nil
}

// onDone is the device's completion of an inner request.
func (s *Session) onDone(r *blockdev.Request) {
	in := r.Ctx.(*inner)
	if r.Err != nil && errors.Is(r.Err, blockdev.ErrClosed) && !s.closing.Load() {
		if !s.cfg.FailFast {
			s.retries.Add(1)
		}
		if err := s.park(in, r.Err); err != nil {
			s.complete(in, err)
		}
		return
	}
	s.complete(in, r.Err)
}

// complete finishes the caller's request: bounce copy, counters, the inner
// back to the pool, then the caller's completion.
func (s *Session) complete(in *inner, err error) {
	out := in.outer
	q := &in.req
	if err == nil && in.bounce && q.Op == blockdev.OpRead {
		copy(in.buf.mem[out.BufOff:out.BufOff+out.Length], q.Buf.Bytes()[q.BufOff:])
	}
	switch {
	case err != nil:
		// A fail-fast session's path failures are its multipath device's
		// to report (it fails the requests over): counted, not logged.
		if s.errs.Add(1) <= 10 && !(s.cfg.FailFast && isPathDown(err)) {
			s.log.Warn("session: I/O error", "url", s.cfg.URL, "op", q.Op, "offset", q.Offset, "length", q.Length, "err", err)
		}
	case q.Op == blockdev.OpRead:
		s.reads.Add(1)
		s.bytesRead.Add(uint64(q.Length))
	case q.Op == blockdev.OpWrite:
		s.writes.Add(1)
		s.bytesWritten.Add(uint64(q.Length))
	case q.Op == blockdev.OpFlush:
		s.flushes.Add(1)
	case q.Op == blockdev.OpDiscard:
		s.discards.Add(1)
	case q.Op == blockdev.OpWriteZeroes:
		s.zeroes.Add(1)
	}
	out.Err = err
	out.Issued, out.Completed = q.Issued, q.Completed
	if !in.issued.IsZero() {
		out.Issued = in.issued
	}
	if out.Completed.IsZero() {
		out.Completed = time.Now()
	}
	if out.Issued.IsZero() {
		out.Issued = out.Completed
	}
	in.outer, in.buf = nil, nil
	q.Buf = nil
	s.inflight.Add(-1)
	s.free <- in
	blockdev.Complete(out)
}

// supervise resubmits parked requests and reconnects. It is the only
// goroutine that changes the connection.
func (s *Session) supervise() {
	defer close(s.superved)
	for {
		l := s.cur.Load()
		var done <-chan struct{}
		if l != nil {
			done = l.done
		}
		select {
		case <-s.closed:
			return
		case <-s.kick:
			if l != nil && s.lostGen.Load() == l.gen {
				// A fail-fast session saw its connection fail.
				s.reconnect(l)
				continue
			}
		case <-done:
			s.mu.Lock()
			s.lastErr = deviceErr(l.dev)
			s.mu.Unlock()
			s.reconnect(l)
			continue
		}
		s.mu.Lock()
		parked := s.parked
		s.parked = nil
		stale := true
		for _, in := range parked {
			if l != nil && in.gen == l.gen {
				stale = false // the current connection failed
			}
		}
		s.mu.Unlock()
		if !stale {
			s.mu.Lock()
			s.parked = append(parked, s.parked...)
			s.mu.Unlock()
			s.reconnect(l)
			continue
		}
		s.resubmit(parked)
	}
}

// deviceErr asks a failed device why, when it can tell.
func deviceErr(dev blockdev.Device) error {
	if e, ok := dev.(interface{ Err() error }); ok {
		if err := e.Err(); err != nil {
			return err
		}
	}
	return errors.New("connection failed")
}

// resubmit issues parked requests again; one that fails for good is
// completed with the error.
func (s *Session) resubmit(parked []*inner) {
	for _, in := range parked {
		if in.issued.IsZero() && !in.req.Issued.IsZero() {
			in.issued = in.req.Issued
		}
		if err := s.issue(in); err != nil {
			s.complete(in, err)
		}
	}
}

// reconnect replaces the failed link l: it closes it (its requests in
// flight come back parked), dials until it succeeds or the loss timeout
// passes, then resubmits everything parked.
func (s *Session) reconnect(l *link) {
	s.mu.Lock()
	if s.state != StateLive || s.cur.Load() != l {
		s.mu.Unlock()
		return
	}
	s.setState(StateReconnecting)
	s.lostAt = s.stateAt
	s.cur.Store(nil)
	cause := s.lastErr
	s.mu.Unlock()
	s.log.Warn("session: connection lost; reconnecting", "url", s.cfg.URL, "reason", cause, "loss-timeout", s.cfg.LossTimeout)
	if l != nil {
		l.dev.Close()
	}
	attempts := 0
	for {
		if s.cfg.LossTimeout >= 0 && time.Since(s.lostAt) > s.cfg.LossTimeout {
			s.fail(cause)
			return
		}
		attempts++
		timeout := s.cfg.ConnectTimeout
		if s.cfg.LossTimeout >= 0 {
			timeout = max(min(timeout, s.cfg.LossTimeout-time.Since(s.lostAt)), 100*time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(s.ctx, timeout)
		dev, err := s.cfg.Dial(ctx, s.cfg.URL)
		cancel()
		if err == nil {
			if err = s.compatible(dev); err != nil {
				dev.Close()
				s.mu.Lock()
				s.lastErr = err
				s.mu.Unlock()
				s.fail(err)
				return
			}
			s.mu.Lock()
			if s.state == StateClosed {
				s.mu.Unlock()
				dev.Close()
				return
			}
			s.gen++
			s.cur.Store(newLink(dev, s.gen))
			s.setState(StateLive)
			parked := s.parked
			s.parked = nil
			s.mu.Unlock()
			s.reconnects.Add(1)
			s.log.Info("session: reconnected", "url", s.cfg.URL, "attempts", attempts, "after", time.Since(s.lostAt).Round(time.Millisecond), "requeued", len(parked))
			s.resubmit(parked)
			return
		}
		cause = err
		s.mu.Lock()
		s.lastErr = err
		s.mu.Unlock()
		s.log.Debug("session: reconnect attempt failed", "url", s.cfg.URL, "attempt", attempts, "err", err)
		select {
		case <-s.closed:
			return
		case <-time.After(s.cfg.ReconnectDelay):
		}
	}
}

// setState enters st (s.mu held).
func (s *Session) setState(st State) {
	s.state, s.stateAt = st, time.Now()
	s.stateA.Store(uint32(st))
}

// compatible checks that a new connection reaches the same disk, of the
// same shape.
func (s *Session) compatible(dev blockdev.Device) error {
	in := dev.Info()
	if id, ok := dev.(blockdev.Identifier); ok && s.diskID != "" {
		if got := id.DiskID(); got != "" && got != s.diskID {
			return fmt.Errorf("reconnected to a different disk: %q, was %q", got, s.diskID)
		}
	}
	if in.BlockSize != s.info.BlockSize || in.Size != s.info.Size {
		return fmt.Errorf("reconnected to a different disk: %s in %d-byte blocks, was %s in %d", units.FormatSize(in.Size), in.BlockSize, units.FormatSize(s.info.Size), s.info.BlockSize)
	}
	if in.MaxTransfer < s.info.MaxTransfer || in.MaxZeroes < s.info.MaxZeroes && s.info.Caps&(blockdev.CapDiscard|blockdev.CapWriteZeroes) != 0 {
		return fmt.Errorf("reconnected disk has a smaller transfer limit (%d, was %d)", in.MaxTransfer, s.info.MaxTransfer)
	}
	if in.Caps&s.info.Caps != s.info.Caps {
		return fmt.Errorf("reconnected disk lost capabilities (%#x, was %#x)", in.Caps, s.info.Caps)
	}
	return nil
}

// fail gives up: parked requests and new ones fail with a *LostError.
func (s *Session) fail(cause error) {
	s.mu.Lock()
	if s.state == StateClosed {
		s.mu.Unlock()
		return
	}
	s.failErr = &LostError{URL: s.cfg.URL, For: time.Since(s.lostAt), Err: cause}
	s.setState(StateFailed)
	parked := s.parked
	s.parked = nil
	err := s.failErr
	s.mu.Unlock()
	s.log.Error("session: giving up", "url", s.cfg.URL, "err", err)
	for _, in := range parked {
		s.complete(in, err)
	}
}

// Close implements blockdev.Device: requests in flight and queued fail
// with blockdev.ErrClosed.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.state == StateClosed {
		s.mu.Unlock()
		return nil
	}
	s.closing.Store(true)
	s.setState(StateClosed)
	close(s.closed)
	s.cancel()
	s.mu.Unlock()
	<-s.superved
	var err error
	if l := s.cur.Swap(nil); l != nil {
		err = l.dev.Close()
	}
	s.mu.Lock()
	parked := s.parked
	s.parked = nil
	s.mu.Unlock()
	for _, in := range parked {
		s.complete(in, blockdev.ErrClosed)
	}
	return err
}

// AccessState implements blockdev.PathReporter: the connection's device's
// access state while live (AccessUnknown if it reports none),
// AccessTransitioning while reconnecting, AccessPersistentLoss once failed
// or closed.
func (s *Session) AccessState() blockdev.AccessState {
	switch State(s.stateA.Load()) {
	case StateLive:
		l := s.cur.Load()
		switch {
		case l == nil:
			return blockdev.AccessTransitioning
		case l.rep != nil:
			return l.rep.AccessState()
		}
		return blockdev.AccessUnknown
	case StateReconnecting:
		return blockdev.AccessTransitioning
	}
	return blockdev.AccessPersistentLoss
}

// RefreshAccessState implements blockdev.PathReporter: it asks the
// connection's device when live and it reports a state; otherwise it
// returns AccessState.
func (s *Session) RefreshAccessState() (blockdev.AccessState, error) {
	l := s.cur.Load()
	if l == nil || l.rep == nil {
		return s.AccessState(), nil
	}
	a, err := l.rep.RefreshAccessState()
	if err != nil {
		return a, fmt.Errorf("%s: reading the access state: %w", s.cfg.URL, err)
	}
	return a, nil
}

// DiskID implements blockdev.Identifier: the identity the first
// connection's device reported ("" if none). A reconnection that reports
// another one fails the session.
func (s *Session) DiskID() string { return s.diskID }
