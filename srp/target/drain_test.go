package target

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rdisk/rdisk/scsi"
	"github.com/rdisk/rdisk/srp"
	"github.com/rdisk/rdisk/srp/initiator"
)

// Tests of Drain.

// startWrite starts a 4 KiB WRITE on channel 0 of s and returns where its
// error goes.
func startWrite(t *testing.T, s *initiator.Session) chan error {
	errc := make(chan error, 1)
	ctx := testCtx(t)
	go func() {
		errc <- s.Exec(ctx, 0, &initiator.Command{CDB: rw10(scsi.OpWrite10, 8, 8), Dir: scsi.DirOut, Data: make([]byte, 4096)})
	}()
	return errc
}

// sideDoor serves one login of lt from a listener of the test's own: a
// login that reached the target before Drain closed its listeners.
func sideDoor(t *testing.T, lt *loopTarget) string {
	t.Helper()
	p := newProvider(t)
	ctx, cancel := context.WithCancel(context.Background())
	l, err := p.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, err := l.Accept(ctx)
		if err != nil {
			return
		}
		lt.t.login(p, req)
	}()
	t.Cleanup(func() { cancel(); l.Close(); <-done })
	return l.Addr().String()
}

// TestDrain: a channel whose write is in flight is logged out once the
// write completed; logins during the drain are refused.
func TestDrain(t *testing.T) {
	t.Parallel()
	var lc logCapture
	disk := newTestDisk(t, 1<<20)
	lt := startTarget(t, Config{Logger: lc.logger()}, PortConfig{}, disk)
	s := login(t, lt, initiator.Config{})
	clearUA(t, s)
	disk.hold()
	werr := startWrite(t, s)
	disk.waitBlocked(t, 1)

	drained := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		drained <- lt.t.Drain(ctx)
	}()
	// The listener closes: logins fail to connect (those that reach the
	// target before are refused).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s2, err := initiator.Login(ctx, newProvider(t), lt.addr, testTargetID, initiator.Config{InitiatorPortID: srp.MakePortID(7, 7), Logger: testLogger()})
		cancel()
		var rej *initiator.LoginError
		if err != nil && !errors.As(err, &rej) {
			break
		}
		if err == nil {
			s2.Close()
			t.Error("a login succeeded during Drain")
		}
		if time.Now().After(deadline) {
			t.Fatal("the target still takes connections during Drain")
		}
	}
	// A login that reached the target anyway is refused.
	before := lt.t.Stats().LoginRejectsByReason["shutting_down"]
	side := sideDoor(t, lt)
	_, err := initiator.Login(testCtx(t), newProvider(t), side, testTargetID, initiator.Config{InitiatorPortID: srp.MakePortID(8, 8), Logger: testLogger()})
	if !errors.Is(err, srp.RejInsufficientResources) {
		t.Errorf("login during Drain: %v, want %v", err, srp.RejInsufficientResources)
	}
	waitStats(t, lt.t, "after a login during Drain", func(st Stats) bool { return st.LoginRejectsByReason["shutting_down"] == before+1 })

	// The channel stays while its write is in flight.
	select {
	case err := <-drained:
		t.Fatalf("Drain returned (%v) with a write in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	if n := lt.port.Channels(); n != 1 {
		t.Fatalf("%d channels during Drain, want 1", n)
	}
	disk.open()
	if err := <-werr; err != nil {
		t.Fatalf("the write in flight: %v", err)
	}
	if err := <-drained; err != nil {
		t.Fatalf("Drain: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	var le *initiator.LogoutError
	if err := s.Err(); !errors.As(err, &le) || le.Reason != srp.TLogoutNoReason {
		t.Errorf("session error after Drain: %v, want a *LogoutError", err)
	}
	st := lt.t.Stats()
	if st.Live != 0 || st.ChannelsClosed["drain"] != 1 || st.TLogouts != 1 {
		t.Errorf("after Drain: %+v", st)
	}
	if ended := lc.records(t, "srp: channel ended"); len(ended) != 1 || ended[0]["reason"] != "drain" {
		t.Errorf("channel ended lines: %v", ended)
	}
	// Still draining: Listen fails, logins are refused.
	if _, err := lt.t.Listen(context.Background(), newProvider(t), "127.0.0.1:0"); !errors.Is(err, ErrDraining) {
		t.Errorf("Listen after Drain: %v, want %v", err, ErrDraining)
	}
	side = sideDoor(t, lt)
	if _, err := initiator.Login(testCtx(t), newProvider(t), side, testTargetID, initiator.Config{Logger: testLogger()}); !errors.Is(err, srp.RejInsufficientResources) {
		t.Errorf("login after Drain: %v", err)
	}
	if err := lt.t.Close(); err != nil {
		t.Errorf("Close after Drain: %v", err)
	}
}

// TestDrainStuckCommand: a command that does not complete before ctx ends
// is named by Drain's error; its channel is disconnected.
func TestDrainStuckCommand(t *testing.T) {
	t.Parallel()
	disk := newTestDisk(t, 1<<20)
	lt := startTarget(t, Config{}, PortConfig{}, disk)
	s := login(t, lt, initiator.Config{Channels: 2})
	clearUA(t, s)
	// Channel 1 carries an IU too: on iWARP the target may send (its
	// SRP_T_LOGOUT) only after the initiator's first message.
	if err := s.Exec(testCtx(t), 1, &initiator.Command{CDB: make([]byte, 6)}); err != nil {
		t.Fatal(err)
	}
	disk.hold()
	werr := startWrite(t, s)
	disk.waitBlocked(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := lt.t.Drain(ctx)
	// The idle channel was logged out and ended; the busy one is left.
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "1 channel left") ||
		!strings.Contains(err.Error(), "1 command in flight") {
		t.Errorf("Drain: %v, want the channel and the command left", err)
	}
	disk.open()
	if err := <-werr; err == nil {
		t.Error("the write in flight succeeded on a disconnected channel")
	}
	st := waitStats(t, lt.t, "after Drain", func(st Stats) bool { return st.Live == 0 })
	if st.ChannelsClosed["drain"] != 2 || st.TLogouts != 1 {
		t.Errorf("after Drain: %+v", st)
	}
	if err := lt.t.Close(); err != nil {
		t.Errorf("Close after Drain: %v", err)
	}
}
