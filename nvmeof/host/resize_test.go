package host

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/target"
)

// setSize makes ns believe it has size bytes, so that requests past the
// real end reach the target.
func setSize(ns *Namespace, size int64) {
	st := *ns.state.Load()
	st.info.Size = size
	ns.state.Store(&st)
}

// nsEvents collects the Namespace Attribute Changed events of a
// controller, with what each watched Namespace said (Info().Size and
// Removed) when OnEvent ran.
type nsEvents struct {
	watch atomic.Pointer[[]*Namespace]
	ch    chan nsEvent
}

type nsEvent struct {
	ev      Event
	sizes   []int64
	removed []bool
}

func newNSEvents(cfg *Config) *nsEvents {
	e := &nsEvents{ch: make(chan nsEvent, 16)}
	cfg.OnEvent = func(ev Event) {
		if ev.Info != nvmeof.NoticeNSChanged {
			return
		}
		var out nsEvent
		out.ev = ev
		if w := e.watch.Load(); w != nil {
			for _, ns := range *w {
				out.sizes = append(out.sizes, ns.Info().Size)
				out.removed = append(out.removed, ns.Removed())
			}
		}
		e.ch <- out
	}
	return e
}

func (e *nsEvents) next(t *testing.T, what string) nsEvent {
	t.Helper()
	select {
	case ev := <-e.ch:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no Namespace Attribute Changed event", what)
	}
	panic("unreachable")
}

// TestLoopbackNamespaceResize: after the target grows a namespace and says
// so, the open Namespaces of that NSID report the new size by the time
// OnEvent runs, and I/O reaches the new end; a removed namespace is marked
// Removed and I/O to it fails with Invalid Namespace or Format; when it
// comes back it works again. Over RDMA (iWARP) and TCP.
func TestLoopbackNamespaceResize(t *testing.T) {
	t.Parallel()
	for _, tr := range []struct {
		name    string
		port    target.PortConfig
		connect func(testing.TB, *loopTarget, Config) *Controller
		cfg     Config
	}{
		{"rdma", target.PortConfig{}, connectLoop, hostConfig()},
		{"tcp", tcpPort(), connectTCPLoop, tcpConfig(false, false)},
	} {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			disk := memDisk(t, 1<<20, false)
			lt := startTargetDisk(t, disk, tr.port, target.SubsystemConfig{})
			other := memDisk(t, 1<<20, false)
			if err := lt.sub.AddNamespace(target.NamespaceConfig{NSID: 2, Disk: other}); err != nil {
				t.Fatal(err)
			}
			cfg := tr.cfg
			events := newNSEvents(&cfg)
			c := tr.connect(t, lt, cfg)
			ctx := context.Background()
			ns, err := c.Namespace(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			twin, err := c.Namespace(ctx, 1) // a second object for the same NSID
			if err != nil {
				t.Fatal(err)
			}
			ns2, err := c.Namespace(ctx, 2)
			if err != nil {
				t.Fatal(err)
			}
			events.watch.Store(&[]*Namespace{ns, twin, ns2})
			buf, err := ns.AllocBuffer(4096)
			if err != nil {
				t.Fatal(err)
			}
			defer buf.Release()
			if err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpRead, Offset: 1 << 20, Length: 4096, Buf: buf}); !errors.Is(err, blockdev.ErrRange) {
				t.Fatalf("read past the end before the resize: %v", err)
			}

			// Grow.
			if err := disk.Resize(3 << 20); err != nil {
				t.Fatal(err)
			}
			if err := lt.sub.NamespaceResized(1); err != nil {
				t.Fatal(err)
			}
			e := events.next(t, "resize")
			if !e.ev.AllNamespaces && (len(e.ev.Namespaces) != 1 || e.ev.Namespaces[0] != 1) {
				t.Errorf("changed namespaces %v, want [1]", e.ev.Namespaces)
			}
			if e.sizes[0] != 3<<20 || e.sizes[1] != 3<<20 || e.sizes[2] != 1<<20 {
				t.Fatalf("sizes when OnEvent ran: %v, want [3 MiB, 3 MiB, 1 MiB]", e.sizes)
			}
			if id := ns.Identify(); id.NSZE != 3<<20/512 {
				t.Errorf("Identify().NSZE = %d after the resize", id.NSZE)
			}
			copy(buf.Bytes(), "grown")
			if err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpWrite, Offset: 3<<20 - 4096, Length: 4096, Buf: buf}); err != nil {
				t.Fatalf("write at the new end: %v", err)
			}
			clear(buf.Bytes())
			if err := blockdev.Do(twin, &blockdev.Request{Op: blockdev.OpRead, Offset: 3<<20 - 4096, Length: 4096, Buf: buf}); err != nil || string(buf.Bytes()[:5]) != "grown" {
				t.Fatalf("read at the new end: %v, %q", err, buf.Bytes()[:5])
			}

			// Refresh on demand agrees.
			if err := ns.Refresh(ctx); err != nil || ns.Info().Size != 3<<20 {
				t.Fatalf("Refresh: %v, size %d", err, ns.Info().Size)
			}

			// Remove.
			if err := lt.sub.RemoveNamespace(1); err != nil {
				t.Fatal(err)
			}
			e = events.next(t, "remove")
			if !e.removed[0] || !e.removed[1] || e.removed[2] {
				t.Fatalf("Removed() when OnEvent ran: %v, want [true true false]", e.removed)
			}
			if ns.Info().Size != 3<<20 {
				t.Errorf("a removed namespace's Info().Size = %d, want the last one", ns.Info().Size)
			}
			err = blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpRead, Length: 4096, Buf: buf})
			var se *StatusError
			if !errors.As(err, &se) || se.Status.Code() != nvmeof.StatusInvalidNamespace || !strings.Contains(err.Error(), "Invalid Namespace or Format") {
				t.Fatalf("read of the removed namespace: %v, want Invalid Namespace or Format", err)
			}
			if err := ns.Refresh(ctx); !errors.Is(err, ErrNoNamespace) {
				t.Errorf("Refresh of the removed namespace: %v, want ErrNoNamespace", err)
			}
			if err := blockdev.Do(ns2, &blockdev.Request{Op: blockdev.OpRead, Length: 4096, Buf: buf}); err != nil {
				t.Errorf("read of the other namespace: %v", err)
			}

			// Back, on a new disk.
			back := memDisk(t, 2<<20, false)
			if err := lt.sub.AddNamespace(target.NamespaceConfig{NSID: 1, Disk: back}); err != nil {
				t.Fatal(err)
			}
			e = events.next(t, "re-add")
			if e.removed[0] || e.sizes[0] != 2<<20 {
				t.Fatalf("after the namespace came back: removed %v, sizes %v", e.removed, e.sizes)
			}
			if err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpRead, Length: 4096, Buf: buf}); err != nil {
				t.Fatalf("read after the namespace came back: %v", err)
			}

			// A closed Namespace is no longer refreshed.
			twin.Close()
			if err := twin.Refresh(ctx); !errors.Is(err, blockdev.ErrClosed) {
				t.Errorf("Refresh of a closed Namespace: %v", err)
			}
			c.nsMu.Lock()
			n := len(c.open)
			c.nsMu.Unlock()
			if n != 2 {
				t.Errorf("%d open namespaces after closing one of 3", n)
			}
		})
	}
}

// TestLoopbackResizeUnderIO grows a namespace repeatedly while goroutines
// submit I/O at the end they last saw and read Info; with -race this
// checks that Submit, Info and the refresh do not race.
func TestLoopbackResizeUnderIO(t *testing.T) {
	t.Parallel()
	disk := memDisk(t, 1<<20, false)
	lt := startTargetDisk(t, disk, tcpPort(), target.SubsystemConfig{})
	cfg := tcpConfig(false, false)
	cfg.IOQueues = 2
	events := newNSEvents(&cfg)
	c := connectTCPLoop(t, lt, cfg)
	ns, err := c.Namespace(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	var done atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf, err := ns.AllocBuffer(4096)
			if err != nil {
				errs <- err
				return
			}
			defer buf.Release()
			for !done.Load() {
				size := ns.Info().Size
				r := &blockdev.Request{Op: blockdev.OpWrite, Offset: size - 4096, Length: 4096, Buf: buf, Queue: w}
				if w == 0 {
					r.Op = blockdev.OpRead
				}
				if err := blockdev.Do(ns, r); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	size := int64(1 << 20)
	for range 8 {
		size += 1 << 20
		if err := disk.Resize(size); err != nil {
			t.Fatal(err)
		}
		if err := lt.sub.NamespaceResized(1); err != nil {
			t.Fatal(err)
		}
		events.next(t, "resize")
		if got := ns.Info().Size; got != size {
			t.Fatalf("Info().Size = %d after growing to %d", got, size)
		}
	}
	done.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestFakeRefresh drives Refresh through what a controller can answer:
// a new size, a status without DNR (nothing changes), an unknown NSID
// (DNR: removed), zeroes (removed), the namespace back, and a new block
// size, after which Submit refuses.
func TestFakeRefresh(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	nsze, lbads, status := uint64(2048), uint8(9), nvmeof.Status(0)
	f := startFake(t, func(f *fakeCtrl) {
		f.identifyNS = func(nsid uint32, id *nvmeof.IdentifyNamespace) nvmeof.Status {
			mu.Lock()
			defer mu.Unlock()
			if nsid == 1 && status == 0 {
				id.NSZE, id.NCAP, id.NUSE = nsze, nsze, nsze
				id.LBAF = []nvmeof.LBAFormat{{LBADS: lbads}}
			}
			return status
		}
	})
	set := func(n uint64, l uint8, st nvmeof.Status) {
		mu.Lock()
		nsze, lbads, status = n, l, st
		mu.Unlock()
	}
	ns := fakeOpen(t, f, fakeHostConfig())
	ctx := context.Background()
	if ns.Info().Size != 1<<20 {
		t.Fatalf("size %d at open", ns.Info().Size)
	}
	set(4096, 9, 0)
	if err := ns.Refresh(ctx); err != nil || ns.Info().Size != 2<<20 || ns.Info().MaxZeroes != 2<<20 || ns.Removed() {
		t.Fatalf("grown: %v, info %+v, removed %v", err, ns.Info(), ns.Removed())
	}
	set(8192, 9, nvmeof.StatusInternal)
	if err := ns.Refresh(ctx); err == nil || errors.Is(err, ErrNoNamespace) || ns.Info().Size != 2<<20 || ns.Removed() {
		t.Fatalf("retryable status: %v, size %d, removed %v", err, ns.Info().Size, ns.Removed())
	}
	set(8192, 9, nvmeof.StatusInvalidNamespace.WithDNR())
	if err := ns.Refresh(ctx); !errors.Is(err, ErrNoNamespace) || !strings.Contains(err.Error(), "Invalid Namespace or Format") || !ns.Removed() || ns.Info().Size != 2<<20 {
		t.Fatalf("invalid namespace: %v, size %d, removed %v", err, ns.Info().Size, ns.Removed())
	}
	set(0, 9, 0)
	if err := ns.Refresh(ctx); !errors.Is(err, ErrNoNamespace) || !ns.Removed() {
		t.Fatalf("zeroes: %v, removed %v", err, ns.Removed())
	}
	buf, err := ns.AllocBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Release()
	if err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpRead, Length: 4096, Buf: buf}); err != nil {
		t.Errorf("a removed namespace's read did not reach the controller: %v", err) // the fake answers success
	}
	set(2048, 9, 0)
	if err := ns.Refresh(ctx); err != nil || ns.Removed() || ns.Info().Size != 1<<20 {
		t.Fatalf("back: %v, size %d, removed %v", err, ns.Info().Size, ns.Removed())
	}
	set(256, 12, 0) // reformatted with 4096-byte blocks
	err = ns.Refresh(ctx)
	if err == nil || !strings.Contains(err.Error(), "block size changed from 512 to 4096") {
		t.Fatalf("new block size: %v", err)
	}
	if err2 := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpRead, Length: 4096, Buf: buf}); err2 == nil || err2.Error() != err.Error() {
		t.Errorf("read after the block size changed: %v, want %v", err2, err)
	}
	set(2048, 9, 0)
	if err := ns.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpRead, Length: 4096, Buf: buf}); err != nil {
		t.Errorf("read after the old format came back: %v", err)
	}
}
