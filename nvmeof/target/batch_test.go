package target

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/blockdev"
)

// batchDisk is a backstore.AsyncDisk over a RAM disk that completes its
// operations as a reaper does: one goroutine takes what is queued (up to
// 16), runs it, calls every Done with the same backstore.Batch and then
// runs the batch. deferred counts the work the transports deferred.
type batchDisk struct {
	*backstore.Mem
	ops      chan *backstore.AsyncIO
	done     chan struct{}
	deferred atomic.Int64
	batches  atomic.Int64
}

func newBatchDisk(t testing.TB, size int64) *batchDisk {
	t.Helper()
	mem, err := backstore.NewMem(size, 512)
	if err != nil {
		t.Fatal(err)
	}
	d := &batchDisk{Mem: mem, ops: make(chan *backstore.AsyncIO, 1024), done: make(chan struct{})}
	go d.run()
	t.Cleanup(func() { // after the target's Close (created before it)
		close(d.ops)
		<-d.done
	})
	return d
}

func (d *batchDisk) Start(io *backstore.AsyncIO) error {
	if io.Done == nil {
		return fmt.Errorf("batch disk: no Done: %w", backstore.ErrUnsupported)
	}
	d.ops <- io
	return nil
}

func (d *batchDisk) run() {
	defer close(d.done)
	var b backstore.Batch
	batch := make([]*backstore.AsyncIO, 0, 16)
	for io := range d.ops {
		batch = append(batch[:0], io)
	more:
		for len(batch) < cap(batch) {
			select {
			case io, ok := <-d.ops:
				if !ok {
					break more
				}
				batch = append(batch, io)
			default:
				break more
			}
		}
		for _, io := range batch {
			io.Err = runOnMem(d.Mem, io)
		}
		if len(batch) == 1 {
			batch[0].Batch = nil
			batch[0].Done(batch[0])
			continue
		}
		for _, io := range batch {
			io.Batch = &b
			io.Done(io)
		}
		d.batches.Add(1)
		d.deferred.Add(int64(b.Len()))
		b.Run()
		if b.Len() != 0 {
			panic("Batch.Run left work behind")
		}
	}
}

func (d *batchDisk) Traits() backstore.Traits {
	return backstore.Traits{Waits: backstore.WaitsAlways, ZeroesAfterDiscard: true}
}

var _ backstore.AsyncDisk = (*batchDisk)(nil)

// TestAsyncBatch runs two hosts' queues on a disk that completes their
// commands in batches: every response arrives (each checked), and over
// NVMe/TCP a queue's responses of a batch wait for the batch's end and go
// out in one write (the queues deferred their flushes), also when a batch
// holds both queues' commands.
func TestAsyncBatch(t *testing.T) {
	t.Parallel()
	for _, tr := range []Transport{TransportTCP, TransportRDMA} {
		t.Run(string(tr), func(t *testing.T) {
			t.Parallel()
			disk := newBatchDisk(t, 4<<20)
			tg, sub := anaTarget(t, Config{}, tr)
			if err := sub.AddNamespace(NamespaceConfig{NSID: 1, Disk: disk}); err != nil {
				t.Fatal(err)
			}
			p := anaPort(t, tg, sub, 1, tr, nil)
			const hosts, workers, rounds, size = 2, 16, 8, 4096
			var wg sync.WaitGroup
			errs := make(chan error, hosts*workers)
			for h := range hosts {
				cfg := hostCfg(fmt.Sprintf("nqn.2014-08.org.nvmexpress:uuid:batch-%d", h))
				cfg.IOQueues, cfg.QueueDepth = 1, workers
				c := mustHost(t, tr, p.Addr().String(), testNQN, cfg)
				ns, err := c.Namespace(context.Background(), 1)
				if err != nil {
					t.Fatal(err)
				}
				for w := range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						off := int64(h*workers+w) * size
						got := make([]byte, size)
						for round := range rounds {
							pat := bytes.Repeat([]byte{byte(h), byte(w), byte(round), 0x5a}, size/4)
							if _, err := blockdev.WriteAt(ns, pat, off); err != nil {
								errs <- fmt.Errorf("host %d worker %d write: %w", h, w, err)
								return
							}
							if _, err := blockdev.ReadAt(ns, got, off); err != nil || !bytes.Equal(got, pat) {
								errs <- fmt.Errorf("host %d worker %d read: %v (data equal: %v)", h, w, err, bytes.Equal(got, pat))
								return
							}
						}
					}()
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			t.Logf("%d batches, %d flushes deferred", disk.batches.Load(), disk.deferred.Load())
			if disk.batches.Load() == 0 {
				t.Fatal("the disk never completed more than one operation at once")
			}
			if tr == TransportTCP && disk.deferred.Load() == 0 {
				t.Error("no NVMe/TCP queue deferred its responses to the end of a batch")
			}
			if tr == TransportRDMA && disk.deferred.Load() != 0 {
				t.Errorf("NVMe/RDMA deferred %d flushes; it posts each response", disk.deferred.Load())
			}
		})
	}
}
