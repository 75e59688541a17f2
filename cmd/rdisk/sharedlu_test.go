package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/iser"
	iserinit "github.com/rdisk/rdisk/iser/initiator"
	"github.com/rdisk/rdisk/rdma/iwarp"
	"github.com/rdisk/rdisk/scsi"
	"github.com/rdisk/rdisk/scsi/host"
	srpinit "github.com/rdisk/rdisk/srp/initiator"
	"github.com/urfave/cli/v2"
)

// TestSharedLUAcrossTransports: rdisk target exports its disk over iSCSI
// and SRP as one SCSI logical unit, so a reservation made through one
// transport binds the other, and COMPARE AND WRITE is atomic across them
// (with an LU per transport, as before, neither held).
func TestSharedLUAcrossTransports(t *testing.T) {
	t.Parallel()
	p, err := iwarp.New(iwarp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var iscsiR, srpR host.Runner
	var iscsiAddr string
	var out bytes.Buffer
	// What rdisk target starts from its flags: a 4 MiB RAM disk exported
	// over iSCSI and SRP (the NVMe-oF port on loopback).
	srpTestApp(t, &out, []string{"--listen", "127.0.0.1:0", "--discovery-listen", "", "--size", "4MiB",
		"--iscsi-listen", "127.0.0.1:0", "--srp-listen", "127.0.0.1:0"}, func(c *cli.Context) error {
		run, su, err := startSRPFromFlags(t, c, p)
		if err != nil {
			return err
		}
		t.Cleanup(func() { run.Close() })
		iscsiAddr = run.ISCSIPortals[0].String()
		sd, err := srpinit.Open(ctx, p, su, srpinit.Config{})
		if err != nil {
			return err
		}
		t.Cleanup(func() { sd.Close() })
		srpR = sd.Session()
		return nil
	})
	h, port, _ := net.SplitHostPort(iscsiAddr)
	n, _ := strconv.Atoi(port)
	idev, err := iserinit.Open(ctx, iserinit.URL{Transport: iser.TransportTCP, Host: h, Port: n, Target: defaultIQN},
		iserinit.Config{InitiatorName: "iqn.2026-11.io.rdisk:shared-lu-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { idev.Close() })
	iscsiR = idev.Session()

	run := func(r host.Runner, c *host.Command) scsi.Status {
		t.Helper()
		if err := r.RunSCSI(ctx, c); err != nil {
			t.Fatal(err)
		}
		return c.Status
	}
	rw := func(write bool, lba uint32, data []byte) *host.Command {
		c := &host.Command{CDB: make([]byte, 10), Data: data, Dir: scsi.DirIn}
		c.CDB[0] = 0x28 // READ(10)
		if write {
			c.CDB[0], c.Dir = 0x2a, scsi.DirOut // WRITE(10)
		}
		binary.BigEndian.PutUint32(c.CDB[2:], lba)
		binary.BigEndian.PutUint16(c.CDB[7:], uint16(len(data)/512))
		return c
	}
	prOut := func(sa, typ uint8, key, sark uint64) *host.Command {
		c := &host.Command{CDB: make([]byte, 10), Data: make([]byte, 24), Dir: scsi.DirOut}
		c.CDB[0], c.CDB[1], c.CDB[2] = 0x5f, sa, typ
		binary.BigEndian.PutUint32(c.CDB[5:], 24)
		binary.BigEndian.PutUint64(c.Data[0:], key)
		binary.BigEndian.PutUint64(c.Data[8:], sark)
		return c
	}
	// The unit attentions of the new nexuses first.
	for _, r := range []host.Runner{iscsiR, srpR} {
		for range 3 {
			run(r, &host.Command{CDB: make([]byte, 6)}) // TEST UNIT READY
		}
	}

	// A Write Exclusive reservation over iSCSI: SRP may read, not write.
	const key = 0xabc
	if st := run(iscsiR, prOut(0x00, 0, 0, key)); st != scsi.StatusGood { // REGISTER
		t.Fatalf("PR OUT REGISTER over iSCSI: %v", st)
	}
	if st := run(iscsiR, prOut(0x01, 1, key, 0)); st != scsi.StatusGood { // RESERVE, Write Exclusive
		t.Fatalf("PR OUT RESERVE over iSCSI: %v", st)
	}
	if st := run(srpR, rw(true, 8, make([]byte, 512))); st != scsi.StatusReservationConflict {
		t.Fatalf("WRITE over SRP under an iSCSI Write Exclusive reservation: %v, want RESERVATION CONFLICT", st)
	}
	if st := run(srpR, rw(false, 8, make([]byte, 512))); st != scsi.StatusGood {
		t.Fatalf("READ over SRP under a Write Exclusive reservation: %v", st)
	}
	if st := run(iscsiR, rw(true, 8, make([]byte, 512))); st != scsi.StatusGood {
		t.Fatalf("WRITE over iSCSI by the holder: %v", st)
	}
	if st := run(iscsiR, prOut(0x02, 1, key, 0)); st != scsi.StatusGood { // RELEASE
		t.Fatalf("PR OUT RELEASE: %v", st)
	}
	if st := run(srpR, rw(true, 8, make([]byte, 512))); st != scsi.StatusGood {
		t.Fatalf("WRITE over SRP after the release: %v", st)
	}

	// COMPARE AND WRITE increments a counter in block 100 from both
	// transports at once: each success must have seen a distinct value.
	const lba, rounds = 100, 150
	block := func(v uint64) []byte {
		b := make([]byte, 512)
		binary.BigEndian.PutUint64(b, v)
		return b
	}
	if st := run(iscsiR, rw(true, lba, block(0))); st != scsi.StatusGood {
		t.Fatalf("initial write: %v", st)
	}
	var mu sync.Mutex
	successes := 0
	var wg sync.WaitGroup
	for _, r := range []host.Runner{iscsiR, srpR} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; {
				cur := make([]byte, 512)
				c := rw(false, lba, cur)
				if err := r.RunSCSI(ctx, c); err != nil || c.Status != scsi.StatusGood {
					t.Errorf("read: %v %v", err, c.Status)
					return
				}
				v := binary.BigEndian.Uint64(cur)
				caw := &host.Command{CDB: make([]byte, 16), Data: append(block(v), block(v+1)...), Dir: scsi.DirOut}
				caw.CDB[0] = 0x89 // COMPARE AND WRITE
				binary.BigEndian.PutUint64(caw.CDB[2:], lba)
				caw.CDB[13] = 1
				if err := r.RunSCSI(ctx, caw); err != nil {
					t.Errorf("compare and write: %v", err)
					return
				}
				switch caw.Status {
				case scsi.StatusGood:
					mu.Lock()
					successes++
					mu.Unlock()
					i++
				case scsi.StatusCheckCondition: // MISCOMPARE: the other side won; retry
					if s, err := scsi.ParseSense(caw.Sense); err != nil || s.Key != scsi.KeyMiscompare {
						t.Errorf("compare and write: sense %x", caw.Sense)
						return
					}
				default:
					t.Errorf("compare and write: %v", caw.Status)
					return
				}
			}
		}()
	}
	wg.Wait()
	final := make([]byte, 512)
	run(srpR, rw(false, lba, final))
	if got := binary.BigEndian.Uint64(final); got != uint64(successes) || successes != 2*rounds {
		t.Fatalf("counter %d after %d successful COMPARE AND WRITEs (want %d): not atomic across transports", got, successes, 2*rounds)
	}
}
