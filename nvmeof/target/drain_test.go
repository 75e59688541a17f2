package target

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/nvmeof/host"
)

// slowDisk is a disk whose writes wait until release is closed. Its
// traits are the default ones (a disk that waits), so its commands run on
// the queues' disk workers.
type slowDisk struct {
	backstore.Disk
	entered chan struct{} // a write began
	release chan struct{}
	writes  atomic.Int32
}

func newSlowDisk(t testing.TB, size int64) *slowDisk {
	t.Helper()
	mem, err := backstore.NewMem(size, 512)
	if err != nil {
		t.Fatal(err)
	}
	return &slowDisk{Disk: mem, entered: make(chan struct{}, 16), release: make(chan struct{})}
}

func (d *slowDisk) WriteAt(p []byte, off int64, flags backstore.WriteFlags) error {
	d.writes.Add(1)
	d.entered <- struct{}{}
	<-d.release
	return d.Disk.WriteAt(p, off, flags)
}

// drainTarget is a target of transport tr whose namespace 1 is a slow
// disk, and a host connected to it with a write under way, waiting for
// the disk.
func drainTarget(t *testing.T, tr Transport) (*Target, *slowDisk, *host.Controller, <-chan error) {
	t.Helper()
	tg, port := tcpTarget(t, 1<<20, tr)
	slow := newSlowDisk(t, 1<<20)
	// Released before the target closes (cleanups run last first).
	t.Cleanup(func() {
		select {
		case <-slow.release:
		default:
			close(slow.release)
		}
	})
	if err := tg.Subsystem(testNQN).AddNamespace(NamespaceConfig{NSID: 1, Disk: slow}); err != nil {
		t.Fatal(err)
	}
	c := mustHost(t, tr, port.Addr().String(), testNQN, hostCfg(hostNQN))
	ns, err := c.Namespace(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := blockdev.WriteAt(ns, make([]byte, 4096), 0)
		wrote <- err
	}()
	select {
	case <-slow.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the write did not reach the disk")
	}
	return tg, slow, c, wrote
}

// TestDrain: Drain closes the listeners and refuses new work, waits for
// the write on the disk worker, answers it, then disconnects the host; a
// write sent during the drain is neither run nor answered.
func TestDrain(t *testing.T) {
	t.Parallel()
	for _, tr := range []Transport{TransportTCP, TransportRDMA} {
		t.Run(string(tr), func(t *testing.T) {
			t.Parallel()
			tg, slow, c, wrote := drainTarget(t, tr)
			addr := tg.Port(1).Addr().String()
			sub := tg.Subsystem(testNQN)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			drained := make(chan error, 1)
			go func() { drained <- tg.Drain(ctx) }()
			eventually(t, "the listener closed", func() bool {
				nc, err := net.DialTimeout("tcp", addr, time.Second)
				if err == nil {
					nc.Close()
				}
				return err != nil
			})
			eventually(t, "the controller quiesced", func() bool {
				sc := sub.controller(c.CNTLID())
				if sc == nil {
					t.Fatal("controller gone")
				}
				sc.mu.Lock()
				defer sc.mu.Unlock()
				return sc.quiesced
			})
			if _, err := tg.AddPort(PortConfig{ID: 2, Addr: "127.0.0.1:0", Transport: TransportTCP}); err == nil {
				t.Fatal("AddPort succeeded while draining")
			}
			// A write sent now is dropped: it never reaches the disk.
			ns, err := c.Namespace(context.Background(), 1)
			if err != nil {
				t.Fatal(err)
			}
			late := make(chan error, 1)
			go func() {
				_, err := blockdev.WriteAt(ns, make([]byte, 4096), 8192)
				late <- err
			}()
			time.Sleep(100 * time.Millisecond)
			select {
			case err := <-drained:
				t.Fatalf("Drain returned (%v) with a write on the disk", err)
			case err := <-wrote:
				t.Fatalf("the write completed (%v) before the disk did", err)
			default:
			}
			if st := nsStatsOf(t, sub, 1); st.InFlight != 1 {
				t.Fatalf("while the write waits: %+v, want 1 in flight", st)
			}
			if cs := tg.Controllers(); len(cs) != 1 {
				t.Fatalf("controllers while draining: %+v", cs)
			}
			close(slow.release)
			if err := <-drained; err != nil {
				t.Fatalf("Drain: %v", err)
			}
			if err := <-wrote; err != nil {
				t.Fatalf("the write received before the drain: %v, want it answered", err)
			}
			waitDone(t, c, "drained")
			if err := <-late; err == nil {
				t.Fatal("the write sent while draining succeeded")
			}
			if n := slow.writes.Load(); n != 1 {
				t.Fatalf("%d writes reached the disk, want 1", n)
			}
			if cs := tg.Controllers(); len(cs) != 0 {
				t.Fatalf("controllers after Drain: %+v", cs)
			}
			if st := nsStatsOf(t, sub, 1); st.InFlight != 0 {
				t.Fatalf("after Drain: %+v", st)
			}
			if st := tg.Stats(); st.ControllersCreated != 1 || st.ControllersRemoved != 1 {
				t.Fatalf("stats after Drain: %+v", st)
			}
			if err := tg.Drain(ctx); err != nil {
				t.Fatalf("Drain again: %v", err)
			}
			if err := tg.Close(); err != nil {
				t.Fatalf("Close after Drain: %v", err)
			}
		})
	}
}

// TestDrainTimeout: a Drain whose context ends with a write still on the
// disk tears the controller down anyway and says what was left.
func TestDrainTimeout(t *testing.T) {
	t.Parallel()
	tg, _, c, wrote := drainTarget(t, TransportTCP)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := tg.Drain(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain: %v, want the context's deadline", err)
	}
	want := fmt.Sprintf("1 I/O commands in flight: 1 on controller %d of %s (host %s)", c.CNTLID(), testNQN, hostNQN)
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("Drain: %v, want it to say %q", err, want)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Drain took %v", d)
	}
	waitDone(t, c, "drain cut short")
	if err := <-wrote; err == nil {
		t.Fatal("the write succeeded, its controller torn down")
	}
	if cs := tg.Controllers(); len(cs) != 0 {
		t.Fatalf("controllers after Drain: %+v", cs)
	}
}
