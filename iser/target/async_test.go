package target

import (
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
)

// asyncGateDisk is a gateDisk that implements backstore.AsyncDisk: each
// started I/O runs through the gateDisk (writes wait at its gate) on a
// goroutine of the disk, then calls Done.
type asyncGateDisk struct{ *gateDisk }

func (d asyncGateDisk) Start(io *backstore.AsyncIO) error {
	go func() {
		switch io.Op {
		case backstore.AsyncRead:
			io.Err = d.ReadAt(io.Bufs[0], io.Off)
		case backstore.AsyncWrite:
			io.Err = d.WriteAt(io.Bufs[0], io.Off, io.Flags)
		case backstore.AsyncFlush:
			io.Err = d.Flush()
		default:
			io.Err = backstore.ErrUnsupported
		}
		io.Done(io)
	}()
	return nil
}

// TestAsyncDiskDepth: on a backstore.AsyncDisk, a connection with one
// worker keeps every write it received at the disk at once: commands are
// started there (scsi.Session.Start), not run on the worker. Over iSER and
// iSCSI/TCP.
func TestAsyncDiskDepth(t *testing.T) {
	t.Parallel()
	for _, x := range mgmtTransports {
		t.Run(x.name, func(t *testing.T) {
			t.Parallel()
			gd := newGateDisk(t)
			pt := startPortal(t, func(c *Config) {
				c.Targets[0].LUNs[0].Disk = asyncGateDisk{gd}
				c.Workers = 1
			})
			t.Cleanup(gd.open) // before the portal's: nothing stays held
			s := pt.mustLogin(t, x.tr, fuzzIQN, pt.config(t, mgmtInitiator))
			clearUAs(t, s, 0)
			gd.hold()
			const n = 8
			var errs []chan error
			for range n {
				_, e := startWrite(s)
				errs = append(errs, e)
			}
			gd.waitBlocked(t, n) // n at the disk with 1 worker
			gd.open()
			for _, e := range errs {
				select {
				case err := <-e:
					if err != nil {
						t.Fatalf("write: %v", err)
					}
				case <-time.After(20 * time.Second):
					t.Fatal("write not completed")
				}
			}
		})
	}
}
