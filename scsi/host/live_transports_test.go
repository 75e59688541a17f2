package host_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/iser"
	iserinit "github.com/rdisk/rdisk/iser/initiator"
	isertarget "github.com/rdisk/rdisk/iser/target"
	"github.com/rdisk/rdisk/scsi"
	"github.com/rdisk/rdisk/scsi/host"
	srpinit "github.com/rdisk/rdisk/srp/initiator"
	srptarget "github.com/rdisk/rdisk/srp/target"
)

// liveTarget is LUN 0 of a target, opened by an initiator, with the
// target-side calls that make the unit attentions host.Live acts on.
type liveTarget struct {
	opened
	// capacityChanged tells the target that LUN 0's disk was resized.
	capacityChanged func() error
	// mapLUN maps another LU.
	mapLUN func(lun uint64, lu *scsi.LU) error
}

func liveSRP(t *testing.T, lu *scsi.LU) liveTarget {
	tp := provider(t)
	tg, err := srptarget.New(srptarget.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	port, err := tg.AddPort(srptarget.PortConfig{IDExt: 1, IOCGUID: 2, AllowAnyInitiator: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := port.Map(0, lu); err != nil {
		t.Fatal(err)
	}
	addr, err := tg.Listen(context.Background(), tp, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d, err := srpinit.Open(ctx(t), provider(t), port.URL(addr.String()), srpinit.Config{MaxTransfer: initiatorMaxTransfer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return liveTarget{
		opened: opened{dev: d, runner: d.Session(), lu: d.LU()},
		// The LU's unit attention only: port.CapacityChanged would also
		// send an SRP_AER_REQ, whose handler in the initiator's own Device
		// races this test's Live for the unit attention (its READ
		// CAPACITY can take it first). srp/initiator's resize test covers
		// the AER.
		capacityChanged: func() error { lu.CapacityChanged(); return nil },
		mapLUN:          port.Map,
	}
}

func liveISCSI(tr iser.Transport) func(t *testing.T, lu *scsi.LU) liveTarget {
	return func(t *testing.T, lu *scsi.LU) liveTarget {
		tp := provider(t)
		tg, err := isertarget.New(isertarget.Config{
			Targets:  []isertarget.TargetConfig{{Name: testIQN, LUNs: []isertarget.LUNConfig{{LUN: 0, Unit: lu}}}},
			Provider: tp, Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- tg.Serve(context.Background(), ln) }()
		t.Cleanup(func() {
			tg.Close()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
		h, port, _ := net.SplitHostPort(ln.Addr().String())
		n, _ := strconv.Atoi(port)
		u := iserinit.URL{Transport: tr, Host: h, Port: n, Target: testIQN}
		d, err := iserinit.Open(ctx(t), u, iserinit.Config{InitiatorName: testInitiator, Provider: provider(t),
			MaxTransfer: initiatorMaxTransfer, CommandTimeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return liveTarget{
			opened:          opened{dev: d, runner: d.Session(), lu: d.LU()},
			capacityChanged: func() error { lu.CapacityChanged(); return nil },
			mapLUN:          func(lun uint64, l *scsi.LU) error { return tg.MapLUN(testIQN, lun, l) },
		}
	}
}

type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// liveDo runs request r through l and the runner: checked and built from
// l's snapshot, sent with l.Do.
func liveDo(t *testing.T, l *host.Live, o opened, r blockdev.Request, data []byte) error {
	t.Helper()
	if r.Op == blockdev.OpRead || r.Op == blockdev.OpWrite {
		b, err := o.dev.AllocBuffer(r.Length) // for Check; the data moves in the Command
		if err != nil {
			t.Fatal(err)
		}
		defer b.Release()
		r.Buf = b
	}
	lu, err := l.Check(&r)
	if err != nil {
		return err
	}
	var cdb [16]byte
	io, err := lu.BuildIO(&cdb, make([]byte, host.UnmapParamLen), &r)
	if err != nil {
		t.Fatal(err)
	}
	return l.Do(ctx(t), o.runner, &host.Command{CDB: cdb[:], Dir: io.Dir, Data: data[:io.Len]})
}

// TestLiveTransports: a LUN resized on the target reaches the initiator
// as CAPACITY DATA HAS CHANGED; host.Live re-reads the capacity before the
// command is sent again, so the LU's Info has the new size when the
// command returns and requests reach the new end. A LUN mapped meanwhile
// (REPORTED LUNS DATA HAS CHANGED) is logged and the command retried. Over
// SRP, iSER and iSCSI/TCP against rdisk's targets.
func TestLiveTransports(t *testing.T) {
	for _, tr := range []struct {
		name string
		open func(t *testing.T, lu *scsi.LU) liveTarget
	}{
		{"srp", liveSRP},
		{"iser", liveISCSI(iser.TransportISER)},
		{"iscsi-tcp", liveISCSI(iser.TransportTCP)},
	} {
		t.Run(tr.name, func(t *testing.T) {
			disk := newLocked(t, 1<<20, 512)
			lu, err := scsi.NewLU(disk, scsi.LUConfig{})
			if err != nil {
				t.Fatal(err)
			}
			lt := tr.open(t, lu)
			var logs logBuffer
			l := host.NewLive(lt.lu, lt.dev.Info(), slog.New(slog.NewTextHandler(&logs, nil)))
			buf := make([]byte, 4096)
			end := blockdev.Request{Op: blockdev.OpRead, Offset: 3<<20 - 4096, Length: 4096}
			if err := liveDo(t, l, lt.opened, end, buf); err != blockdev.ErrRange {
				t.Fatalf("read at 3 MiB before the resize: %v", err)
			}

			if err := disk.Resize(3 << 20); err != nil {
				t.Fatal(err)
			}
			if err := lt.capacityChanged(); err != nil {
				t.Fatal(err)
			}
			if err := liveDo(t, l, lt.opened, blockdev.Request{Op: blockdev.OpRead, Length: 4096}, buf); err != nil {
				t.Fatalf("read after the resize: %v", err)
			}
			if got := l.Info().Size; got != 3<<20 {
				t.Fatalf("Info().Size = %d after the resize, want 3 MiB (log: %s)", got, logs.String())
			}
			if !strings.Contains(logs.String(), "capacity changed") {
				t.Errorf("no capacity change logged: %s", logs.String())
			}
			w := end
			w.Op = blockdev.OpWrite
			copy(buf, "the new end")
			if err := liveDo(t, l, lt.opened, w, buf); err != nil {
				t.Fatalf("write at the new end: %v", err)
			}
			clear(buf)
			if err := liveDo(t, l, lt.opened, end, buf); err != nil || string(buf[:11]) != "the new end" {
				t.Fatalf("read at the new end: %v, %q", err, buf[:11])
			}

			other, err := scsi.NewLU(newLocked(t, 1<<20, 512), scsi.LUConfig{})
			if err != nil {
				t.Fatal(err)
			}
			if err := lt.mapLUN(1, other); err != nil {
				t.Fatal(err)
			}
			if err := liveDo(t, l, lt.opened, blockdev.Request{Op: blockdev.OpRead, Length: 4096}, buf); err != nil {
				t.Fatalf("read after mapping LUN 1: %v", err)
			}
			if !strings.Contains(logs.String(), "reported LUNs data has changed") {
				t.Errorf("no LUN change logged: %s", logs.String())
			}
			if got := l.Info().Size; got != 3<<20 {
				t.Errorf("Info().Size = %d after the LUN change", got)
			}
		})
	}
}
