package target

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/iser/initiator"
	"github.com/rdisk/rdisk/scsi"
)

// Tests of Drain.

// gateDisk is a RAM disk whose writes can be held at a gate (a slow disk:
// a write stays in flight until the test opens the gate). Its accesses
// are serialized for the race detector.
type gateDisk struct {
	*backstore.Mem
	mu      sync.Mutex // data accesses
	gmu     sync.Mutex
	gate    chan struct{} // nil: open
	blocked atomic.Int32
}

func newGateDisk(t *testing.T) *gateDisk {
	t.Helper()
	m, err := backstore.NewMem(1<<20, 512)
	if err != nil {
		t.Fatal(err)
	}
	d := &gateDisk{Mem: m}
	t.Cleanup(d.open) // before the target's cleanup: nothing stays held
	return d
}

// Traits: the gate can hold writes, so commands run on workers.
func (d *gateDisk) Traits() backstore.Traits { return backstore.Traits{Waits: backstore.WaitsAlways} }

func (d *gateDisk) hold() {
	d.gmu.Lock()
	defer d.gmu.Unlock()
	if d.gate == nil {
		d.gate = make(chan struct{})
	}
}

func (d *gateDisk) open() {
	d.gmu.Lock()
	defer d.gmu.Unlock()
	if d.gate != nil {
		close(d.gate)
		d.gate = nil
	}
}

func (d *gateDisk) waitBlocked(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); d.blocked.Load() < int32(n); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes held at the disk, want %d", d.blocked.Load(), n)
		}
	}
}

func (d *gateDisk) WriteAt(p []byte, off int64, f backstore.WriteFlags) error {
	d.gmu.Lock()
	g := d.gate
	d.gmu.Unlock()
	if g != nil {
		d.blocked.Add(1)
		<-g
		d.blocked.Add(-1)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.Mem.WriteAt(p, off, f)
}

func (d *gateDisk) ReadAt(p []byte, off int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.Mem.ReadAt(p, off)
}

// gatePortal is a portal whose LUN 0 is a gateDisk.
func gatePortal(t *testing.T, edit func(*Config)) (*portal, *gateDisk) {
	gd := newGateDisk(t)
	pt := startPortal(t, func(c *Config) {
		c.Targets[0].LUNs[0].Disk = gd
		if edit != nil {
			edit(c)
		}
	})
	return pt, gd
}

// startWrite starts a 4 KiB WRITE on s and returns where its error goes.
func startWrite(s *initiator.Session) (*initiator.Command, chan error) {
	cmd := &initiator.Command{CDB: rw10(scsi.OpWrite10, 8, 8), DataOut: make([]byte, 4096)}
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		errc <- s.Execute(ctx, cmd)
	}()
	return cmd, errc
}

// sideDoor serves one connection of tg from a listener of the test's own:
// a login that reached the portal before Drain closed its listeners.
func sideDoor(t *testing.T, tg *Target) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		tg.serveConn(c)
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

// TestDrain: an initiator that logs out when asked ends cleanly once its
// write in flight completed; logins during the drain are refused.
func TestDrain(t *testing.T) {
	t.Parallel()
	for _, x := range mgmtTransports {
		t.Run(x.name, func(t *testing.T) {
			t.Parallel()
			var lc logCapture
			pt, gd := gatePortal(t, func(c *Config) { c.Logger = lc.logger() })
			s := pt.mustLogin(t, x.tr, fuzzIQN, pt.config(t, mgmtInitiator))
			clearUAs(t, s, 0)
			gd.hold()
			cmd, werr := startWrite(s)
			gd.waitBlocked(t, 1)

			drained := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				drained <- pt.tg.Drain(ctx)
			}()
			// The portal stops accepting.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				c, err := net.DialTimeout("tcp", pt.addr, time.Second)
				if err != nil {
					break
				}
				c.Close()
				if time.Now().After(deadline) {
					t.Fatal("the portal still accepts connections during Drain")
				}
			}
			// A login that reached the target anyway is refused:
			// service unavailable.
			_, err := initiator.Login(context.Background(), x.tr, sideDoor(t, pt.tg), fuzzIQN, pt.config(t, mgmtInitiator))
			if st := loginStatus(t, err); st != iser.LoginServiceUnavailable {
				t.Errorf("login during Drain: %v, want %v", err, iser.LoginServiceUnavailable)
			}
			waitStats(t, pt.tg, "after a login during Drain", func(st Stats) bool { return st.LoginRejects["shutting_down"] == 1 })

			// The session stays while its write is in flight.
			select {
			case err := <-drained:
				t.Fatalf("Drain returned (%v) with a write in flight", err)
			case <-time.After(100 * time.Millisecond):
			}
			sessionOf(t, pt.tg, s.TSIH())
			gd.open()
			if err := <-werr; err != nil || cmd.Status != scsi.StatusGood {
				t.Fatalf("the write in flight: %v, status %v", err, cmd.Status)
			}
			if err := <-drained; err != nil {
				t.Fatalf("Drain: %v", err)
			}
			waitDone(t, s, "Drain")
			st := pt.tg.Stats()
			if st.Live != 0 || st.SessionsClosed["drain"] != 1 || st.Logouts != 1 {
				t.Errorf("after Drain: %+v", st)
			}
			if ended := lc.records(t, "iscsi: session ended"); len(ended) != 1 || ended[0]["reason"] != "drain" {
				t.Errorf("session ended lines: %v", ended)
			}
			// Still draining: Serve returns at once, logins are refused.
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			if err := pt.tg.Serve(context.Background(), ln); err != nil {
				t.Errorf("Serve after Drain: %v", err)
			}
			if _, err := initiator.Login(context.Background(), x.tr, sideDoor(t, pt.tg), fuzzIQN, pt.config(t, mgmtInitiator)); loginStatus(t, err) != iser.LoginServiceUnavailable {
				t.Errorf("login after Drain: %v", err)
			}
			if err := pt.tg.Close(); err != nil {
				t.Errorf("Close after Drain: %v", err)
			}
		})
	}
}

// TestDrainNoLogout: an initiator that does not log out when asked is
// dropped when ctx ends, and Drain says so.
func TestDrainNoLogout(t *testing.T) {
	t.Parallel()
	tg := newTestTarget(t, nil)
	c, r, _, _, done := loginPipe(t, tg, false)
	defer c.Close()
	waitSessions(t, tg, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- tg.Drain(ctx) }()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	hdr, data := make([]byte, iser.MaxHeaderLength), make([]byte, 8192)
	p, err := r.ReadPDU(hdr, data)
	if err != nil {
		t.Fatal(err)
	}
	if p.BHS.Opcode() != iser.OpAsyncMessage || iser.AsyncMessage(p.BHS).Event() != iser.AsyncRequestLogout {
		t.Fatalf("first PDU after Drain: %v; want an Async Message requesting logout", p.BHS.Opcode())
	}
	if s := iser.AsyncMessage(p.BHS).Fields().Parameter3; s != 1 {
		t.Errorf("Parameter3 %d, want 1 (the time left before ctx's deadline, rounded up)", s)
	}
	// No logout: the connection is dropped when ctx ends.
	if _, err := r.ReadPDU(hdr, data); err == nil {
		t.Fatal("the connection is still open")
	}
	err = <-drained
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "1 session left (TSIH ") {
		t.Errorf("Drain: %v, want the session left and the deadline", err)
	}
	<-done
	if st := tg.Stats(); st.Live != 0 || st.SessionsClosed["drain"] != 1 {
		t.Errorf("after Drain: %+v", st)
	}
	if err := tg.Close(); err != nil {
		t.Errorf("Close after Drain: %v", err)
	}
}

// TestDrainStuckCommand: a command that does not complete before ctx ends
// is named by Drain's error; its session is dropped.
func TestDrainStuckCommand(t *testing.T) {
	t.Parallel()
	for _, x := range mgmtTransports {
		t.Run(x.name, func(t *testing.T) {
			t.Parallel()
			pt, gd := gatePortal(t, nil)
			s := pt.mustLogin(t, x.tr, fuzzIQN, pt.config(t, mgmtInitiator))
			clearUAs(t, s, 0)
			gd.hold()
			_, werr := startWrite(s)
			gd.waitBlocked(t, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			err := pt.tg.Drain(ctx)
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "1 session left") ||
				!strings.Contains(err.Error(), "1 command in flight") {
				t.Errorf("Drain: %v, want the session and the command left", err)
			}
			waitDone(t, s, "Drain cut short")
			gd.open()
			if err := <-werr; err == nil {
				t.Error("the write in flight succeeded on a dropped connection")
			}
			waitSessions(t, pt.tg, 0)
			if st := pt.tg.Stats(); st.SessionsClosed["drain"] != 1 {
				t.Errorf("after Drain: %+v", st)
			}
			if err := pt.tg.Close(); err != nil {
				t.Errorf("Close after Drain: %v", err)
			}
		})
	}
}
