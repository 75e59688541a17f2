package initiator_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/iser/initiator"
	"github.com/rdisk/rdisk/iser/target"
	"github.com/rdisk/rdisk/scsi"
)

// A LUN resized while this initiator is logged in to rdisk's iSCSI target
// (startTarget), over iSCSI/TCP and iSER.

// logBuffer collects a logger's output for the tests to look at (and
// copies it to stderr with RDISK_TEST_LOG set).
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	if os.Getenv("RDISK_TEST_LOG") != "" {
		os.Stderr.Write(p)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// lockedMem is a RAM disk whose data accesses are serialized: backstore.Mem
// copies without locks, and a write and a later read ordered only through
// the network look racy to the race detector. It offers the plain Disk
// methods only, so that every access goes through the lock.
type lockedMem struct {
	m  *backstore.Mem
	mu sync.RWMutex
}

func newLockedMem(t testing.TB, size int64) *lockedMem {
	m, err := backstore.NewMem(size, 512)
	if err != nil {
		t.Fatal(err)
	}
	return &lockedMem{m: m}
}

func (d *lockedMem) BlockSize() int       { return d.m.BlockSize() }
func (d *lockedMem) Size() int64          { return d.m.Size() }
func (d *lockedMem) ReadOnly() bool       { return d.m.ReadOnly() }
func (d *lockedMem) Flush() error         { return d.m.Flush() }
func (d *lockedMem) Close() error         { return d.m.Close() }
func (d *lockedMem) Resize(n int64) error { return d.m.Resize(n) }

func (d *lockedMem) ReadAt(p []byte, off int64) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.m.ReadAt(p, off)
}

func (d *lockedMem) WriteAt(p []byte, off int64, f backstore.WriteFlags) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m.WriteAt(p, off, f)
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// resizeLoop is a target serving lu as LUN 0 and a Device opened on it.
type resizeLoop struct {
	*loop
	dev  *initiator.Device
	logs *logBuffer // the initiator's log
}

func startResize(t *testing.T, tr iser.Transport, lu *scsi.LU, depth int) *resizeLoop {
	t.Helper()
	l := startTarget(t, 1<<20, func(c *target.Config) {
		c.Targets[0].LUNs[0] = target.LUNConfig{LUN: 0, Unit: lu}
	})
	cfg := l.config(t)
	logs := &logBuffer{}
	cfg.Logger, cfg.QueueDepth = logs.logger(), depth
	d, err := initiator.Open(testCtx(t), l.url(tr), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() }) // before the target
	return &resizeLoop{loop: l, dev: d, logs: logs}
}

// TestResize: a LUN grown on the target (LU.CapacityChanged: CAPACITY DATA
// HAS CHANGED on every nexus) while the initiator does I/O: the command
// that reports it gives its slot back, the Device re-reads the capacity
// and submits the command again; no request fails, Info reports the new
// size and the grown part is reachable. With a queue of one slot too (the
// READ CAPACITY needs the slot the reporting command had).
func TestResize(t *testing.T) {
	t.Parallel()
	for _, x := range transports {
		for _, depth := range []int{0, 1} {
			t.Run(fmt.Sprintf("%s/depth=%d", x.name, depth), func(t *testing.T) {
				t.Parallel()
				disk := newLockedMem(t, oldSize)
				lu := newLU(t, disk)
				l := startResize(t, x.tr, lu, depth)
				d := l.dev
				if depth == 1 && l.dev.Session().QueueDepth() != 1 {
					t.Fatalf("queue depth %d, want 1", l.dev.Session().QueueDepth())
				}
				if err := ioAt(d, blockdev.OpWrite, make([]byte, 4096), 3<<20, 0); !errors.Is(err, blockdev.ErrRange) {
					t.Fatalf("write at 3 MiB before the resize: %v, want ErrRange", err)
				}
				stop := ioLoad(d, oldSize, 4)
				time.Sleep(20 * time.Millisecond)
				if err := disk.Resize(newSize); err != nil {
					t.Fatal(err)
				}
				lu.CapacityChanged()
				waitSize(t, d, newSize, l.logs)
				time.Sleep(20 * time.Millisecond) // more I/O at the new size
				n, err := stop()
				if err != nil {
					t.Fatalf("I/O during the resize: %v (log: %s)", err, l.logs)
				}
				t.Logf("%d requests during the resize", n)
				checkGrown(t, d, lu)
				if lg := l.logs.String(); !strings.Contains(lg, "capacity changed") || !strings.Contains(lg, "size=4194304") {
					t.Errorf("the change is not logged: %s", lg)
				}
				if got := d.LU().Blocks; got != newSize/512 {
					t.Errorf("LU().Blocks = %d, want %d", got, newSize/512)
				}
			})
		}
	}
}

// TestResizeRetry: with nothing else in flight, the one read that reports
// CAPACITY DATA HAS CHANGED completes only once the Device has the new
// size; REPORTED LUNS DATA HAS CHANGED is logged and the command sent
// again.
func TestResizeRetry(t *testing.T) {
	t.Parallel()
	for _, x := range transports {
		t.Run(x.name, func(t *testing.T) {
			t.Parallel()
			disk := newLockedMem(t, oldSize)
			lu := newLU(t, disk)
			l := startResize(t, x.tr, lu, 0)
			d := l.dev
			if err := disk.Resize(newSize); err != nil {
				t.Fatal(err)
			}
			lu.CapacityChanged()
			if err := ioAt(d, blockdev.OpRead, make([]byte, 4096), 0, 0); err != nil {
				t.Fatal(err)
			}
			if got := d.Info().Size; got != newSize {
				t.Fatalf("Info().Size = %d once the read that reported the change completed, want %d (log: %s)", got, newSize, l.logs)
			}
			checkGrown(t, d, lu)
			if err := d.Refresh(testCtx(t)); err != nil || d.Info().Size != newSize {
				t.Fatalf("Refresh: %v, size %d", err, d.Info().Size)
			}

			if err := l.tg.MapLUN(testIQN, 1, newLU(t, newLockedMem(t, oldSize))); err != nil {
				t.Fatal(err)
			}
			if err := ioAt(d, blockdev.OpRead, make([]byte, 4096), 0, 0); err != nil {
				t.Fatalf("read after mapping LUN 1: %v", err)
			}
			if !strings.Contains(l.logs.String(), "reported LUNs data has changed") {
				t.Errorf("no LUN change logged: %s", l.logs)
			}
		})
	}
}

// TestRefresh: Device.Refresh picks up a resize that no command reported
// yet (iSCSI has no event for it).
func TestRefresh(t *testing.T) {
	t.Parallel()
	disk := newLockedMem(t, oldSize)
	lu := newLU(t, disk)
	l := startResize(t, transports[0].tr, lu, 0)
	if err := disk.Resize(newSize); err != nil {
		t.Fatal(err)
	}
	lu.CapacityChanged()
	if err := l.dev.Refresh(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	checkGrown(t, l.dev, lu)
}

// ioAt runs one read or write of len(data) bytes at off.
func ioAt(d blockdev.Device, op blockdev.Op, data []byte, off int64, queue int) error {
	buf, err := d.AllocBuffer(len(data))
	if err != nil {
		return err
	}
	defer buf.Release()
	if op == blockdev.OpWrite {
		copy(buf.Bytes(), data)
	}
	r := &blockdev.Request{Op: op, Offset: off, Length: len(data), Buf: buf, Queue: queue}
	if err := blockdev.Do(d, r); err != nil {
		return err
	}
	if op == blockdev.OpRead {
		copy(data, buf.Bytes())
	}
	return nil
}

// writeRead writes a pattern of n bytes at off, reads it back and compares.
func writeRead(d blockdev.Device, rng *rand.Rand, off int64, n, queue int) error {
	want := make([]byte, n)
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	if err := ioAt(d, blockdev.OpWrite, want, off, queue); err != nil {
		return fmt.Errorf("write of %d bytes at %d: %w", n, off, err)
	}
	got := make([]byte, n)
	if err := ioAt(d, blockdev.OpRead, got, off, queue); err != nil {
		return fmt.Errorf("read of %d bytes at %d: %w", n, off, err)
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("%d bytes at %d read back differently", n, off)
	}
	return nil
}

// ioLoad runs writers over the first span bytes of d, each in its own
// part, with flushes in between, until stop is called, which returns the
// first error and how many requests went through.
func ioLoad(d blockdev.Device, span int64, workers int) (stop func() (int, error)) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	count := 0
	part := span / int64(workers) &^ 511
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; ; i++ {
				select {
				case <-quit:
					return
				default:
				}
				n := (1 + rng.IntN(8)) * 4096
				off := int64(w)*part + rng.Int64N((part-int64(n))/512+1)*512
				err := writeRead(d, rng, off, n, w)
				if err == nil && i%8 == 7 {
					err = blockdev.Do(d, &blockdev.Request{Op: blockdev.OpFlush, Queue: w})
				}
				mu.Lock()
				if err != nil && first == nil {
					first = fmt.Errorf("worker %d: %w", w, err)
				}
				count += 3
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	return func() (int, error) {
		close(quit)
		wg.Wait()
		return count, first
	}
}

// waitSize waits for d's Info to report size bytes.
func waitSize(t *testing.T, d blockdev.Device, size int64, logs *logBuffer) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for d.Info().Size != size {
		if time.Now().After(deadline) {
			t.Fatalf("Info().Size = %d, want %d (log: %s)", d.Info().Size, size, logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

const (
	oldSize = 1 << 20
	newSize = 4 << 20
)

// checkGrown checks that d reaches the grown part of a LUN resized from
// oldSize to newSize: a write and a read back at its end and across the old
// end.
func checkGrown(t *testing.T, d blockdev.Device, lu *scsi.LU) {
	t.Helper()
	if got := d.Info().Size; got != newSize {
		t.Fatalf("Info().Size = %d, want %d", got, newSize)
	}
	if got := lu.Blocks() * 512; got != newSize {
		t.Fatalf("the LU has %d bytes, want %d", got, newSize)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, off := range []int64{newSize - 16<<10, oldSize - 4096, 3 << 20} {
		if err := writeRead(d, rng, off, 16<<10-int(off%(16<<10)), 0); err != nil {
			t.Fatalf("in the grown part: %v", err)
		}
	}
	if err := ioAt(d, blockdev.OpRead, make([]byte, 4096), newSize, 0); !errors.Is(err, blockdev.ErrRange) {
		t.Fatalf("read past the new end: %v, want ErrRange", err)
	}
}

func newLU(t *testing.T, disk backstore.Disk) *scsi.LU {
	t.Helper()
	lu, err := scsi.NewLU(disk, scsi.LUConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return lu
}
