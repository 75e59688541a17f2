package initiator

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rdisk/rdisk/blockdev"
)

// SessionStats are one session's numbers for a metrics scrape.
type SessionStats struct {
	// Name and URL identify the session.
	Name, URL string
	// Connected: the session has a live connection (not reconnecting,
	// failed or closed).
	Connected bool
	// Reconnects counts the connections re-established after a loss.
	Reconnects uint64
	// Waiting is the number of I/Os queued for a lost connection to come
	// back.
	Waiting int
	// Reads, Writes and Flushes count the requests completed without an
	// error; ReadBytes and WriteBytes their bytes.
	Reads, Writes, Flushes uint64
	ReadBytes, WriteBytes  uint64
	// Errors counts the requests completed with an error.
	Errors uint64
	// Paths is the number of paths of a multipath session (1 for a
	// single-URL session), UsablePaths the number serving I/O now.
	Paths, UsablePaths int
}

// SessionStats returns every session's numbers, oldest session first. The
// I/O path only adds to the sessions' atomic counters; this reads them.
func (d *Daemon) SessionStats() []SessionStats {
	var out []SessionStats
	for _, n := range d.names() {
		d.mu.Lock()
		e := d.sessions[n]
		d.mu.Unlock()
		if e == nil {
			continue
		}
		if e.mp != nil {
			st := e.mp.Stats()
			usable := e.mp.Usable()
			out = append(out, SessionStats{
				Name: e.name, URL: e.url(), Connected: usable > 0, Reconnects: e.reconnects(),
				Waiting: e.mp.Waiting(), Reads: st.Reads, Writes: st.Writes, Flushes: st.Flushes,
				ReadBytes: st.BytesRead, WriteBytes: st.BytesWritten, Errors: st.Errors,
				Paths: len(e.urls), UsablePaths: usable,
			})
			continue
		}
		s := e.sess
		st := s.Stats()
		state, _ := s.State()
		connected := 0
		if state == StateLive {
			connected = 1
		}
		out = append(out, SessionStats{
			Name: e.name, URL: s.URL(), Connected: state == StateLive, Reconnects: st.Reconnects,
			Waiting: s.Waiting(), Reads: st.Reads, Writes: st.Writes, Flushes: st.Flushes,
			ReadBytes: st.BytesRead, WriteBytes: st.BytesWritten, Errors: st.Errors,
			Paths: 1, UsablePaths: connected,
		})
	}
	return out
}

// ShutdownError is Shutdown's error: the sessions that did not stop
// cleanly, and why.
type ShutdownError struct {
	// Sessions are those sessions, oldest first.
	Sessions []SessionError
	// Connects is the number of connects still in progress when the
	// context ended.
	Connects int
}

// SessionError is why one session did not stop cleanly.
type SessionError struct {
	Name, URL string
	Err       error
}

func (e *ShutdownError) Error() string {
	var b strings.Builder
	b.WriteString("initiator: shutdown:")
	sep := " "
	for _, s := range e.Sessions {
		fmt.Fprintf(&b, "%ssession %s (%s): %v", sep, s.Name, s.URL, s.Err)
		sep = "; "
	}
	if e.Connects > 0 {
		fmt.Fprintf(&b, "%s%d connects still in progress", sep, e.Connects)
	}
	return b.String()
}

// Unwrap returns the sessions' errors.
func (e *ShutdownError) Unwrap() []error {
	var errs []error
	for _, s := range e.Sessions {
		errs = append(errs, s.Err)
	}
	return errs
}

// Shutdown stops the daemon gracefully. It stops accepting control
// requests (the listeners ServeControl serves close, and Connect refuses),
// waits for the connects in progress (each undoes its session), then, for
// every session at once: stops its exports (NBD listeners and connections,
// the FUSE mount, detached lazily when busy), waits for the requests in
// flight (the exports', and any other user's) to complete, flushes the remote device (blockdev OpFlush: every
// write acknowledged before is durable) and disconnects, as `rdisk
// disconnect` does.
//
// It returns nil when all of that succeeded. Otherwise it returns a
// *ShutdownError naming the sessions that did not stop cleanly, and why: a
// flush that failed, or ctx ending before a session's in-flight requests
// or flush completed. Those sessions are disconnected all the same (without
// a flush, once ctx ended, as Close does), so that no session is left when
// Shutdown returns, except one another control request was disconnecting
// when ctx ended.
func (d *Daemon) Shutdown(ctx context.Context) error {
	d.mu.Lock()
	d.closed = true
	for l := range d.ctl {
		l.Close()
	}
	d.mu.Unlock()
	d.log.Info("daemon: shutting down")
	serr := &ShutdownError{}
	var mu sync.Mutex // guards failed
	var failed []*entry
	errs := map[*entry]error{}
	fail := func(e *entry, err error) {
		mu.Lock()
		failed = append(failed, e)
		errs[e] = err
		mu.Unlock()
	}
	// Connects in progress see the daemon closed and undo their sessions.
	serr.Connects = d.waitConnects(ctx)
	var wg sync.WaitGroup
	mine := map[*entry]bool{}
	for {
		var wait []*entry
		d.mu.Lock()
		for _, e := range d.sessions {
			switch {
			case !e.closing:
				d.claim(e)
				mine[e] = true
				wg.Go(func() {
					if err := d.stop(ctx, e); err != nil {
						fail(e, err)
					}
				})
			case !mine[e]:
				wait = append(wait, e)
			}
		}
		var settled []chan struct{}
		for _, e := range wait {
			settled = append(settled, e.settled)
		}
		d.mu.Unlock()
		if len(wait) == 0 {
			break
		}
		// Another control request is disconnecting these; if it gives
		// up (a busy FUSE mount), Shutdown takes them over.
		if i := waitSettled(ctx, settled); i >= 0 {
			for _, e := range wait[i:] {
				fail(e, fmt.Errorf("being disconnected by another request: %w", ctx.Err()))
			}
			break
		}
	}
	wg.Wait()
	if len(failed) == 0 && serr.Connects == 0 {
		d.log.Info("daemon: shut down")
		return nil
	}
	sort.SliceStable(failed, func(i, j int) bool { return failed[i].created.Before(failed[j].created) })
	for _, e := range failed {
		serr.Sessions = append(serr.Sessions, SessionError{Name: e.name, URL: e.url(), Err: errs[e]})
	}
	d.log.Error("daemon: shut down, not cleanly", "err", serr)
	return serr
}

// waitConnects waits until no Connect is in progress, or ctx ends; it
// returns the number still in progress.
func (d *Daemon) waitConnects(ctx context.Context) int {
	for {
		d.mu.Lock()
		n := len(d.pending)
		d.mu.Unlock()
		if n == 0 {
			return 0
		}
		select {
		case <-d.connected:
		case <-ctx.Done():
			return n
		}
	}
}

// stop takes one session down gracefully for Shutdown: exports, in-flight
// requests, flush, disconnect. It returns why the session did not stop
// cleanly (nil if it did); it disconnects it in any case.
func (d *Daemon) stop(ctx context.Context, e *entry) error {
	var why error
	d.unmount(e, true)
	if e.nbd != nil {
		e.nbd.Close()
		// The NBD connections end once the session completed what they
		// have in flight.
		if err := waitCtx(ctx, func() { e.nbd.Wait(); e.serving.Wait() }); err != nil {
			why = fmt.Errorf("waiting for in-flight requests: %w", err)
		}
	}
	if why == nil {
		// Requests of other users of the session (a FUSE mount's
		// kernel requests, a detached mount's users) complete too.
		if err := e.drain(ctx); err != nil {
			why = fmt.Errorf("waiting for in-flight requests: %w", err)
		}
	}
	if why == nil {
		if err := flushCtx(ctx, e.dev); err != nil {
			why = fmt.Errorf("flush: %w", err)
		}
	}
	if err := d.closeSession(e); err != nil && why == nil {
		why = fmt.Errorf("disconnecting: %w", err)
	}
	reason := "shutdown"
	if why != nil {
		reason = "shutdown, not cleanly: " + why.Error()
	}
	d.remove(e, reason)
	return why
}

// drain waits until no request of the session's device is in flight
// (queued ones included), or ctx ends. It polls: the I/O path pays nothing
// for it.
func (e *entry) drain(ctx context.Context) error {
	inflight := func() int64 {
		if e.mp != nil {
			return e.mp.Stats().InFlight
		}
		return e.sess.inflight.Load()
	}
	delay := 100 * time.Microsecond
	for inflight() > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		delay = min(2*delay, 10*time.Millisecond)
	}
	return nil
}

// waitCtx runs wait and returns when it does (nil), or when ctx ends
// (ctx's error; wait goes on in the background).
func waitCtx(ctx context.Context, wait func()) error {
	done := make(chan struct{})
	go func() {
		wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitSettled waits for every channel to close; it returns -1, or the
// index of the first channel still open when ctx ended.
func waitSettled(ctx context.Context, chs []chan struct{}) int {
	for i, ch := range chs {
		select {
		case <-ch:
		case <-ctx.Done():
			return i
		}
	}
	return -1
}

// flushCtx flushes dev, waiting at most until ctx ends (a flush left
// behind completes when dev closes; Submit itself may block while dev's
// queues are full).
func flushCtx(ctx context.Context, dev blockdev.Device) error {
	done := make(chan error, 1)
	go func() { done <- blockdev.Flush(dev) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
