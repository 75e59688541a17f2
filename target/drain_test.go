package target

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/iser"
	iserinit "github.com/rdisk/rdisk/iser/initiator"
	"github.com/rdisk/rdisk/nvmeof/host"
	"github.com/rdisk/rdisk/rdma/iwarp"
)

// hangingDisk blocks its writes until release is closed.
type hangingDisk struct {
	backstore.Disk
	release chan struct{}
}

func (d *hangingDisk) WriteAt(p []byte, off int64, f backstore.WriteFlags) error {
	<-d.release
	return d.Disk.WriteAt(p, off, f)
}

// startHanging starts applyBefore with namespace A/2 on a disk whose
// writes hang until the returned channel is closed.
func startHanging(t *testing.T) (*Running, *iwarp.Provider, chan struct{}) {
	t.Helper()
	c, err := Parse(strings.NewReader(applyBefore))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	c.OpenDevice = func(path string, o DeviceOptions) (backstore.Disk, error) {
		d, err := OpenDevice(path, o)
		if err != nil || path != "ram:1MiB" {
			return d, err
		}
		return &hangingDisk{Disk: d, release: release}, nil
	}
	p := newIWARP(t)
	t.Cleanup(func() { p.Close() })
	run, err := Start(c, p, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Close() })
	return run, p, release
}

// TestDrain: with the hosts idle, Drain logs the iSCSI session out,
// disconnects the NVMe-oF host, flushes the disks and returns nil; a
// write hung in a disk makes it return, once its context ends, an error
// naming what was left.
func TestDrain(t *testing.T) {
	t.Parallel()
	run, p, release := startHanging(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctrl := connectTCP(t, ctx, run, p, nqnA, host.Config{})
	ns1, err := ctrl.Namespace(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blockdev.WriteAt(ns1, make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	dev, err := iserinit.Open(ctx, iserinit.URL{Transport: iser.TransportTCP, Host: "127.0.0.1", Port: portOf(t, run.ISCSIPortals[0].String()),
		Target: "iqn.2026-12.io.rdisk:t"}, iserinit.Config{InitiatorName: "iqn.2026-12.io.rdisk:drain"})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	// A write that hangs in namespace 2's disk.
	ns2, err := ctrl.Namespace(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	hung := make(chan error, 1)
	go func() { _, err := blockdev.WriteAt(ns2, make([]byte, 4096), 0); hung <- err }()
	time.Sleep(100 * time.Millisecond)
	dctx, dcancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	err = run.Drain(dctx)
	dcancel()
	if err == nil || !strings.Contains(err.Error(), "NVMe-oF") || !strings.Contains(err.Error(), "in flight") {
		t.Fatalf("Drain with a hung write: %v", err)
	}
	t.Logf("Drain with a hung write: %v", err)
	close(release)
	<-hung
	select {
	case <-ctrl.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the NVMe-oF host is still connected after Drain")
	}
	if st := run.Status(); len(st.ISCSISessions) != 0 || len(st.Controllers) != 0 {
		t.Fatalf("left after Drain: %+v %+v", st.ISCSISessions, st.Controllers)
	}
}

// TestDrainClean: idle hosts, nothing hung: Drain returns nil.
func TestDrainClean(t *testing.T) {
	t.Parallel()
	run, p := startConfig(t, applyBefore)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctrl := connectTCP(t, ctx, run, p, nqnA, host.Config{})
	ns, err := ctrl.Namespace(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blockdev.WriteAt(ns, make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	dev, err := iserinit.Open(ctx, iserinit.URL{Transport: iser.TransportTCP, Host: "127.0.0.1", Port: portOf(t, run.ISCSIPortals[0].String()),
		Target: "iqn.2026-12.io.rdisk:t"}, iserinit.Config{InitiatorName: "iqn.2026-12.io.rdisk:drain"})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	if err := run.Drain(dctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if st := run.Status(); len(st.ISCSISessions) != 0 || len(st.Controllers) != 0 {
		t.Fatalf("left after Drain: %+v %+v", st.ISCSISessions, st.Controllers)
	}
}

// portOf is the port number of a host:port address.
func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	n, err2 := strconv.Atoi(port)
	if err != nil || err2 != nil {
		t.Fatalf("address %q: no port", addr)
	}
	return n
}
