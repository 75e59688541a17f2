package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/blockdev/blockdevtest"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/tcp"
)

// NVMe/TCP host tests against the fake controller of tcpfake_test.go.

func tcpHostConfig(hdgst, ddgst bool) Config {
	cfg := fakeHostConfig()
	cfg.Transport, cfg.HeaderDigest, cfg.DataDigest = TransportTCP, hdgst, ddgst
	return cfg
}

func tcpFakeURL(t *testing.T, f *tcpFake) URL {
	return URL{Transport: TransportTCP, Host: "127.0.0.1", Port: mustPort(t, f.addr), SubNQN: fakeNQN}
}

func tcpFakeOpen(t *testing.T, f *tcpFake, cfg Config) *Namespace {
	t.Helper()
	ns, err := Open(context.Background(), nil, tcpFakeURL(t, f), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// TestTCPFakeReadWrite writes random data at several sizes (in the capsule,
// by one R2T, by R2Ts answered with several H2CData PDUs) and reads it
// back in several C2HData PDUs, with each digest setting, with and without
// the SUCCESS optimization.
func TestTCPFakeReadWrite(t *testing.T) {
	t.Parallel()
	for _, dg := range []struct{ h, d bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		for _, success := range []bool{false, true} {
			t.Run(fmt.Sprintf("hdgst=%v,ddgst=%v,success=%v", dg.h, dg.d, success), func(t *testing.T) {
				t.Parallel()
				f := startTCPFake(t, func(f *tcpFake) { f.maxH2C, f.success = 4096, success })
				ns := tcpFakeOpen(t, f, tcpHostConfig(dg.h, dg.d))
				if got := ns.Controller().InCapsuleSize(); got != 8192 {
					t.Errorf("in-capsule size %d, want IOCCSZ*16-64 = 8192", got)
				}
				buf, err := ns.AllocBuffer(128 << 10)
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(3, uint64(len(t.Name()))))
				for _, n := range []int{512, 4096, 8192, 8704, 16 << 10, 40 << 10, 128 << 10} {
					off := int64(rng.IntN(1<<20-n)) &^ 511
					want := make([]byte, n)
					for i := range want {
						want[i] = byte(rng.Uint32())
					}
					copy(buf.Bytes()[100*512:], want[:min(n, len(buf.Bytes())-100*512)])
					bo := 0
					if n <= 64<<10 {
						bo = 100 * 512 // an offset into the buffer
					} else {
						copy(buf.Bytes(), want)
					}
					if err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpWrite, Offset: off, Length: n, Buf: buf, BufOff: bo}); err != nil {
						t.Fatalf("write %d at %d: %v", n, off, err)
					}
					clear(buf.Bytes())
					if err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpRead, Offset: off, Length: n, Buf: buf, BufOff: bo}); err != nil {
						t.Fatalf("read %d at %d: %v", n, off, err)
					}
					if !bytes.Equal(buf.Bytes()[bo:bo+n], want) {
						t.Fatalf("%d bytes at %d read back differ", n, off)
					}
				}
				f.mu.Lock()
				pdus, most := f.h2cPDUs, f.maxSeen
				f.mu.Unlock()
				if pdus == 0 || most != 4096 {
					t.Errorf("%d H2CData PDUs, largest %d: want several of MAXH2CDATA (4096) bytes", pdus, most)
				}
				for _, op := range []blockdev.Op{blockdev.OpFlush, blockdev.OpWriteZeroes, blockdev.OpDiscard} {
					if err := blockdev.Do(ns, &blockdev.Request{Op: op, Offset: 4096, Length: 8192}); err != nil {
						t.Errorf("%v: %v", op, err)
					}
				}
				if err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpRead, Offset: 4096, Length: 8192, Buf: buf}); err != nil || !bytes.Equal(buf.Bytes()[:8192], make([]byte, 8192)) {
					t.Errorf("read after write zeroes/discard: %v (or not zero)", err)
				}
			})
		}
	}
}

// TestTCPFakeNoInCapsule sends every write by R2T, the admin queue's
// Connect data still in the capsule.
func TestTCPFakeNoInCapsule(t *testing.T) {
	t.Parallel()
	f := startTCPFake(t, nil)
	cfg := tcpHostConfig(false, false)
	cfg.NoInCapsule = true
	ns := tcpFakeOpen(t, f, cfg)
	buf, _ := ns.AllocBuffer(4096)
	copy(buf.Bytes(), "hello")
	if err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpWrite, Length: 4096, Buf: buf}); err != nil {
		t.Fatal(err)
	}
	if f.h2cPDUs != 1 {
		t.Errorf("%d H2CData PDUs for a 4 KiB write without in-capsule data, want 1", f.h2cPDUs)
	}
}

func TestTCPFakeConformance(t *testing.T) {
	t.Parallel()
	f := startTCPFake(t, func(f *tcpFake) { f.maxH2C, f.r2tChunk = 8192, 12<<10 })
	blockdevtest.Run(t, func(t *testing.T) blockdev.Device {
		cfg := tcpHostConfig(true, true)
		cfg.IOQueues, cfg.QueueDepth = 2, 16
		return tcpFakeOpen(t, f, cfg)
	})
}

// tcpFakeFailure opens a namespace on a fake whose io hook misbehaves on
// the first read, submits a read and returns its error and the
// controller's.
func tcpFakeFailure(t *testing.T, setup func(f *tcpFake)) (reqErr, ctrlErr error) {
	t.Helper()
	f := startTCPFake(t, setup)
	ns := tcpFakeOpen(t, f, tcpHostConfig(true, true))
	buf, _ := ns.AllocBuffer(4 * 4096)
	ch := make(chan *blockdev.Request, 4)
	n := 0
	for i := range 4 {
		err := ns.Submit(&blockdev.Request{Op: blockdev.OpRead, Offset: int64(i) * 4096, Length: 4096, Buf: buf, BufOff: i * 4096, C: ch})
		if err != nil {
			if !errors.Is(err, blockdev.ErrClosed) {
				t.Fatalf("Submit: %v", err)
			}
			reqErr = err // the queue died already
			break
		}
		n++
	}
	for range n {
		select {
		case r := <-ch:
			if r.Err == nil {
				continue
			}
			if !errors.Is(r.Err, blockdev.ErrClosed) {
				t.Errorf("request: %v, want an error matching ErrClosed", r.Err)
			}
			reqErr = r.Err
		case <-time.After(10 * time.Second):
			t.Fatal("requests in flight did not complete")
		}
	}
	select {
	case <-ns.Controller().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("controller not marked failed")
	}
	if err := ns.Submit(&blockdev.Request{Op: blockdev.OpRead, Length: 4096, Buf: buf, C: ch}); !errors.Is(err, blockdev.ErrClosed) {
		t.Errorf("Submit after the failure: %v, want ErrClosed", err)
	}
	return reqErr, ns.Controller().Err()
}

func TestTCPFakeMalformed(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		io   func(q *tcpFakeQueue, sqe nvmeof.SQE) bool
		want string
	}{
		{"close mid-I/O", func(q *tcpFakeQueue, sqe nvmeof.SQE) bool {
			if sqe.CID() == 3 { // the fourth read
				q.conn.Close()
			}
			return true // hold the others
		}, "closed the connection"},
		{"bad header digest", func(q *tcpFakeQueue, sqe nvmeof.SQE) bool {
			h := q.header(tcp.TypeCapsuleResp, 0, tcp.CapsuleRespHLen, 0, func(h []byte) {
				nvmeof.CQE(h[tcp.CommonHeaderSize:]).Encode(&nvmeof.CQEFields{CID: sqe.CID(), SQID: q.qid})
			})
			h[tcp.CapsuleRespHLen] ^= 1
			q.send(h)
			return true
		}, "header digest"},
		{"C2HTermReq", func(q *tcpFakeQueue, sqe nvmeof.SQE) bool {
			b := make([]byte, tcp.MaxTermReqSize)
			n := tcp.EncodeTermReq(b, tcp.TypeC2HTermReq, tcp.FESDataLimitExceeded, 0, sqe)
			q.send(b[:n])
			return true
		}, "data transfer limit exceeded"},
		{"C2HData for an unknown CID", func(q *tcpFakeQueue, sqe nvmeof.SQE) bool {
			q.c2hData(77, make([]byte, 512), false)
			return true
		}, "command 77, which is not outstanding"},
		{"C2HData beyond the command", func(q *tcpFakeQueue, sqe nvmeof.SQE) bool {
			q.c2hData(sqe.CID(), make([]byte, 8192), false)
			return true
		}, "data transfer out of range"},
		{"R2T for a read", func(q *tcpFakeQueue, sqe nvmeof.SQE) bool {
			h := q.header(tcp.TypeR2T, 0, tcp.R2THLen, 0, func(h []byte) {
				tcp.Data(h).Encode(&tcp.DataFields{CCCID: sqe.CID(), TTag: 1, Length: 512})
			})
			q.send(h)
			return true
		}, "writes no data"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			reqErr, ctrlErr := tcpFakeFailure(t, func(f *tcpFake) { f.io = c.io })
			if reqErr == nil || ctrlErr == nil || !strings.Contains(ctrlErr.Error(), c.want) {
				t.Errorf("request error %v, controller error %v: want one about %q", reqErr, ctrlErr, c.want)
			}
			t.Logf("%s: %v", c.name, ctrlErr)
		})
	}
}

// TestTCPFakeDataDigestError: a C2HData with a bad data digest fails that
// read with Data Transfer Error (as Linux), and the queue keeps working.
func TestTCPFakeDataDigestError(t *testing.T) {
	t.Parallel()
	bad := true
	f := startTCPFake(t, func(f *tcpFake) {
		f.io = func(q *tcpFakeQueue, sqe nvmeof.SQE) bool {
			if !bad || sqe.Opcode() != nvmeof.IORead {
				return false
			}
			bad = false
			d := make([]byte, 512)
			h := q.header(tcp.TypeC2HData, tcp.FlagLast|tcp.FlagSuccess, tcp.DataHLen, len(d), func(h []byte) {
				tcp.Data(h).Encode(&tcp.DataFields{CCCID: sqe.CID(), Length: uint32(len(d))})
			})
			q.send(h, d, []byte{1, 2, 3, 4})
			return true
		}
	})
	ns := tcpFakeOpen(t, f, tcpHostConfig(false, true))
	buf, _ := ns.AllocBuffer(4096)
	err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpRead, Length: 512, Buf: buf})
	var se *StatusError
	if !errors.As(err, &se) || se.Status.Code() != nvmeof.StatusDataTransferError {
		t.Fatalf("read with a bad data digest: %v, want Data Transfer Error", err)
	}
	if err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpRead, Length: 4096, Buf: buf}); err != nil {
		t.Fatalf("read after the digest error: %v", err)
	}
}

func TestTCPFakeICResp(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		edit func(*tcp.ICFields)
		want string
	}{
		{"digest", func(f *tcp.ICFields) { f.Digest = 0 }, "asked for"},
		{"cpda", func(f *tcp.ICFields) { f.PDA = 1 }, "CPDA"},
		{"maxh2cdata", func(f *tcp.ICFields) { f.Max = 1000 }, "MAXH2CDATA"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := startTCPFake(t, func(f *tcpFake) { f.icresp = c.edit })
			_, err := Connect(context.Background(), nil, f.addr, fakeNQN, tcpHostConfig(true, false))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Connect: %v, want an error about %s", err, c.want)
			}
		})
	}
}

// TestTCPFakeIdentifyChecks: TCP needs no keyed SGLs, but SGL support and
// ICDOFF 0.
func TestTCPFakeIdentifyChecks(t *testing.T) {
	t.Parallel()
	f := startTCPFake(t, nil)
	c, err := Connect(context.Background(), nil, f.addr, fakeNQN, tcpHostConfig(false, false))
	if err != nil {
		t.Fatalf("Connect to a controller without keyed SGLs over TCP: %v", err)
	}
	if c.Transport() != TransportTCP {
		t.Errorf("Transport() = %v", c.Transport())
	}
	c.Close()
	c.id.SGLS, c.id.CNTLID = nvmeof.SGLSKeyed, c.cntlid
	if err := c.checkIdentifyTCP(); err == nil || !strings.Contains(err.Error(), "SGLS") {
		t.Errorf("SGLS without bits 1:0: %v", err)
	}
	c.id.SGLS, c.id.ICDOFF = nvmeof.SGLSDwordAligned, 2
	if err := c.checkIdentifyTCP(); err == nil || !strings.Contains(err.Error(), "ICDOFF") {
		t.Errorf("ICDOFF 2: %v", err)
	}
}

func TestTCPConfigErrors(t *testing.T) {
	t.Parallel()
	cfg := hostConfig()
	cfg.HeaderDigest = true
	if _, err := Connect(context.Background(), nil, "127.0.0.1:1", loopNQN, cfg); err == nil || !strings.Contains(err.Error(), "digests") {
		t.Errorf("digests over RDMA: %v", err)
	}
	cfg = hostConfig()
	if _, err := Connect(context.Background(), nil, "127.0.0.1:1", loopNQN, cfg); err == nil || !strings.Contains(err.Error(), "provider") {
		t.Errorf("RDMA without a provider: %v", err)
	}
	cfg.Transport = "fc"
	if _, err := Connect(context.Background(), nil, "127.0.0.1:1", loopNQN, cfg); err == nil || !strings.Contains(err.Error(), "transport") {
		t.Errorf("unknown transport: %v", err)
	}
}

func TestTCPFakeIOTimeout(t *testing.T) {
	t.Parallel()
	f := startTCPFake(t, func(f *tcpFake) {
		f.io = func(q *tcpFakeQueue, sqe nvmeof.SQE) bool { return true }
	})
	cfg := tcpHostConfig(false, false)
	cfg.IOTimeout = 300 * time.Millisecond
	ns := tcpFakeOpen(t, f, cfg)
	buf, _ := ns.AllocBuffer(4096)
	err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpRead, Length: 4096, Buf: buf})
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, blockdev.ErrClosed) {
		t.Fatalf("unanswered read: %v, want ErrTimeout (and ErrClosed)", err)
	}
}
