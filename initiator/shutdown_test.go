package initiator

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/blockdev/blockdevtest"
)

// newTestDaemon returns a daemon without a control socket whose dialers
// are the fake targets by scheme; it is closed at the end of the test.
func newTestDaemon(t *testing.T, targets map[string]*fakeTarget) *Daemon {
	t.Helper()
	dialers := Dialers{}
	for scheme, ft := range targets {
		dialers[scheme] = ft.dial
	}
	d := NewDaemon(DaemonConfig{Dialers: dialers, ReconnectDelay: 10 * time.Millisecond})
	t.Cleanup(func() { d.Close() })
	return d
}

func connect(t *testing.T, d *Daemon, spec ConnectSpec) *Session {
	t.Helper()
	if _, err := d.Connect(t.Context(), spec); err != nil {
		t.Fatalf("connect %s: %v", spec.URL, err)
	}
	return d.Session(spec.Name)
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func statsOf(t *testing.T, d *Daemon, name string) SessionStats {
	t.Helper()
	for _, st := range d.SessionStats() {
		if st.Name == name {
			return st
		}
	}
	t.Fatalf("no stats for session %q", name)
	return SessionStats{}
}

// TestDaemonSessionStats: a known workload shows in the counters, and so
// do a lost connection (I/O waiting for it) and the reconnect.
func TestDaemonSessionStats(t *testing.T) {
	t.Parallel()
	ft := newFakeTarget(t, blockdevtest.MemConfig{Size: 8 << 20, Queues: 2})
	d := newTestDaemon(t, map[string]*fakeTarget{"fake": ft})
	s := connect(t, d, ConnectSpec{URL: "fake://t/stats", Name: "st", LossTimeoutMS: -1})
	connect(t, d, ConnectSpec{URL: "fake://t/other", Name: "other"})
	for i := range 3 {
		if _, err := blockdev.WriteAt(s, make([]byte, 8192), int64(i)*8192); err != nil {
			t.Fatal(err)
		}
	}
	p := make([]byte, 4096)
	for range 2 {
		if _, err := blockdev.ReadAt(s, p, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := blockdev.Flush(s); err != nil {
		t.Fatal(err)
	}
	all := d.SessionStats()
	if len(all) != 2 || all[0].Name != "st" || all[1].Name != "other" {
		t.Fatalf("SessionStats %+v: want st, other", all)
	}
	want := SessionStats{Name: "st", URL: "fake://t/stats", Connected: true, Reads: 2, Writes: 3, Flushes: 1, ReadBytes: 8192, WriteBytes: 3 * 8192,
		Paths: 1, UsablePaths: 1}
	if all[0] != want {
		t.Errorf("stats %+v, want %+v", all[0], want)
	}
	if all[1] != (SessionStats{Name: "other", URL: "fake://t/other", Connected: true, Paths: 1, UsablePaths: 1}) {
		t.Errorf("idle session's stats %+v", all[1])
	}

	// The target goes down: the session waits, with a read queued.
	ft.setDown(true)
	waitFor(t, "the session to notice the loss", func() bool { return !statsOf(t, d, "st").Connected })
	read := make(chan error, 1)
	go func() {
		_, err := blockdev.ReadAt(s, make([]byte, 4096), 4096)
		read <- err
	}()
	waitFor(t, "the read to wait for the connection", func() bool { return statsOf(t, d, "st").Waiting == 1 })
	ft.setDown(false)
	if err := <-read; err != nil {
		t.Fatalf("read across the reconnect: %v", err)
	}
	waitFor(t, "the reconnect", func() bool { st := statsOf(t, d, "st"); return st.Connected && st.Reconnects == 1 })
	want.Reads, want.ReadBytes, want.Reconnects = 3, 3*4096, 1
	if st := statsOf(t, d, "st"); st != want {
		t.Errorf("stats after the reconnect %+v, want %+v", st, want)
	}
}

// TestDaemonShutdown: Shutdown stops the control listener and the NBD
// export, flushes the remote device and disconnects.
func TestDaemonShutdown(t *testing.T) {
	t.Parallel()
	d, sock, ft := startDaemon(t)
	nbdSock := filepath.Join(t.TempDir(), "vol.nbd")
	if _, err := call(t, sock, &Request{Op: OpConnect, Connect: &ConnectSpec{URL: "fake://t/1", Name: "vol", NBD: []string{"unix:" + nbdSock}}}); err != nil {
		t.Fatal(err)
	}
	s := d.Session("vol")
	if _, err := blockdev.WriteAt(s, make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	flushes := ft.mem.Ops(blockdev.OpFlush)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := d.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if n := ft.mem.Ops(blockdev.OpFlush); n != flushes+1 {
		t.Errorf("%d flushes reached the device, want 1", n-flushes)
	}
	if st, _ := s.State(); st != StateClosed {
		t.Errorf("session state %v, want closed", st)
	}
	if l := d.List(); len(l) != 0 {
		t.Errorf("sessions left: %+v", l)
	}
	if _, err := os.Stat(nbdSock); !os.IsNotExist(err) {
		t.Errorf("NBD socket left behind: %v", err)
	}
	if _, err := call(t, sock, &Request{Op: OpPing}); err == nil {
		t.Error("the control socket still answers after Shutdown")
	}
	if _, err := d.Connect(t.Context(), ConnectSpec{URL: "fake://t/2"}); err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("Connect after Shutdown: %v", err)
	}
	select {
	case <-d.Idle():
	default:
		t.Error("no idle signal after Shutdown")
	}
	if err := d.Shutdown(ctx); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
}

// TestDaemonShutdownFlushFails: a session whose flush fails is named in
// Shutdown's error (and disconnected all the same); the others stop
// cleanly.
func TestDaemonShutdownFlushFails(t *testing.T) {
	t.Parallel()
	errFlush := errors.New("fake: flush failed")
	good := newFakeTarget(t, blockdevtest.MemConfig{Size: 1 << 20})
	bad := newFakeTarget(t, blockdevtest.MemConfig{Size: 1 << 20, Fault: func(r *blockdev.Request) error {
		if r.Op == blockdev.OpFlush {
			return errFlush
		}
		return nil
	}})
	d := newTestDaemon(t, map[string]*fakeTarget{"fake": good, "bad": bad})
	connect(t, d, ConnectSpec{URL: "fake://t/good", Name: "good"})
	connect(t, d, ConnectSpec{URL: "bad://t/bad", Name: "bad"})
	err := d.Shutdown(t.Context())
	var serr *ShutdownError
	if !errors.As(err, &serr) || !errors.Is(err, errFlush) {
		t.Fatalf("Shutdown: %v, want a ShutdownError matching the flush error", err)
	}
	if len(serr.Sessions) != 1 || serr.Sessions[0].Name != "bad" || serr.Sessions[0].URL != "bad://t/bad" {
		t.Errorf("sessions named: %+v, want bad alone", serr.Sessions)
	}
	if msg := err.Error(); !strings.Contains(msg, "session bad (bad://t/bad): flush: ") || strings.Contains(msg, "good") {
		t.Errorf("error %q", msg)
	}
	if good.mem.Ops(blockdev.OpFlush) != 1 || bad.mem.Ops(blockdev.OpFlush) != 1 {
		t.Errorf("flushes: good %d, bad %d, want 1 each", good.mem.Ops(blockdev.OpFlush), bad.mem.Ops(blockdev.OpFlush))
	}
	if l := d.List(); len(l) != 0 {
		t.Errorf("sessions left: %+v", l)
	}
}

// TestDaemonShutdownTimeout: a flush that cannot complete (the target is
// down and the session waits forever) makes Shutdown return when ctx
// ends, naming the session; the session is disconnected.
func TestDaemonShutdownTimeout(t *testing.T) {
	t.Parallel()
	ft := newFakeTarget(t, blockdevtest.MemConfig{Size: 1 << 20})
	d := newTestDaemon(t, map[string]*fakeTarget{"fake": ft})
	s := connect(t, d, ConnectSpec{URL: "fake://t/down", Name: "down", LossTimeoutMS: -1})
	ft.setDown(true)
	waitFor(t, "the session to notice the loss", func() bool { st, _ := s.State(); return st == StateReconnecting })
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := d.Shutdown(ctx)
	var serr *ShutdownError
	if !errors.As(err, &serr) || !errors.Is(err, context.DeadlineExceeded) || len(serr.Sessions) != 1 || serr.Sessions[0].Name != "down" {
		t.Fatalf("Shutdown: %v, want the session named with the deadline", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("Shutdown took %v", el)
	}
	if st, _ := s.State(); st != StateClosed {
		t.Errorf("session state %v, want closed", st)
	}
	if l := d.List(); len(l) != 0 {
		t.Errorf("sessions left: %+v", l)
	}
}

// TestDaemonShutdownInFlight: a write in flight when Shutdown starts
// completes (it is not failed by the disconnect), and the flush comes
// after it.
func TestDaemonShutdownInFlight(t *testing.T) {
	t.Parallel()
	var ft *fakeTarget
	var flushedAfter atomic.Bool
	var writes atomic.Int64
	ft = newFakeTarget(t, blockdevtest.MemConfig{Size: 1 << 20, Queues: 2, Fault: func(r *blockdev.Request) error {
		switch r.Op {
		case blockdev.OpWrite:
			time.Sleep(100 * time.Millisecond)
			writes.Add(1)
		case blockdev.OpFlush:
			flushedAfter.Store(writes.Load() == 1)
		}
		return nil
	}})
	d := newTestDaemon(t, map[string]*fakeTarget{"fake": ft})
	s := connect(t, d, ConnectSpec{URL: "fake://t/busy", Name: "busy"})
	buf, err := s.AllocBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Release()
	ch := make(chan *blockdev.Request, 1)
	// Queue 1: the flush goes to queue 0 and would not wait behind it.
	w := &blockdev.Request{Op: blockdev.OpWrite, Length: 4096, Buf: buf, Queue: 1, C: ch}
	if err := s.Submit(w); err != nil {
		t.Fatal(err)
	}
	if err := d.Shutdown(t.Context()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if r := <-ch; r.Err != nil {
		t.Errorf("write in flight at Shutdown: %v", r.Err)
	}
	if !flushedAfter.Load() {
		t.Error("the flush did not follow the write in flight")
	}
}

// logRecords is a slog handler that keeps the records' messages and
// attributes.
type logRecords struct {
	mu    *sync.Mutex
	recs  *[]map[string]string
	attrs []slog.Attr
}

func newLogRecords() *logRecords {
	return &logRecords{mu: new(sync.Mutex), recs: new([]map[string]string)}
}

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }

func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	m := map[string]string{"msg": r.Message}
	for _, a := range h.attrs {
		m[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	h.mu.Lock()
	*h.recs = append(*h.recs, m)
	h.mu.Unlock()
	return nil
}

func (h *logRecords) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(slices.Clip(h.attrs), as...)
	return &c
}

func (h *logRecords) WithGroup(string) slog.Handler { return h }

// with returns the records whose message contains msg.
func (h *logRecords) with(msg string) []map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]string
	for _, r := range *h.recs {
		if strings.Contains(r["msg"], msg) {
			out = append(out, r)
		}
	}
	return out
}

// TestDaemonLogsSessionLifecycle: one line per session connected, lost,
// reconnected and disconnected, each with the URL (and the reason); none
// per I/O.
func TestDaemonLogsSessionLifecycle(t *testing.T) {
	t.Parallel()
	ft := newFakeTarget(t, blockdevtest.MemConfig{Size: 1 << 20})
	logs := newLogRecords()
	d := NewDaemon(DaemonConfig{Dialers: Dialers{"fake": ft.dial}, ReconnectDelay: 10 * time.Millisecond, Logger: slog.New(logs)})
	t.Cleanup(func() { d.Close() })
	s := connect(t, d, ConnectSpec{URL: "fake://t/log", Name: "lg", LossTimeoutMS: -1})
	for i := range 50 {
		if _, err := blockdev.WriteAt(s, make([]byte, 512), int64(i)*512); err != nil {
			t.Fatal(err)
		}
	}
	ft.setDown(true)
	waitFor(t, "the loss", func() bool { st, _ := s.State(); return st == StateReconnecting })
	ft.setDown(false)
	waitFor(t, "the reconnect", func() bool { return s.Stats().Reconnects == 1 })
	if _, err := d.Disconnect("lg", false); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ msg, reason string }{
		{"session connected", "connect requested"},
		{"connection lost", "connection reset"},
		{"reconnected", ""},
		{"session disconnected", "disconnect requested"},
	} {
		recs := logs.with(c.msg)
		if len(recs) != 1 {
			t.Errorf("%q: %d lines, want 1: %v", c.msg, len(recs), recs)
			continue
		}
		if r := recs[0]; r["url"] != "fake://t/log" || r["session"] != "lg" || !strings.Contains(r["reason"], c.reason) {
			t.Errorf("%q: %v, want the URL, session and reason %q", c.msg, r, c.reason)
		}
	}
	logs.mu.Lock()
	n := len(*logs.recs)
	logs.mu.Unlock()
	if n > 10 {
		t.Errorf("%d log lines for one session's life and 50 writes", n)
	}
}
