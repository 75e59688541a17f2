package host

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/iwarp"
)

// A small scripted NVMe/RDMA controller for the host's failure paths: it
// answers the admin bring-up like a target would and lets each test decide
// what happens to I/O commands (and can break the bring-up).

const fakeNQN = "nqn.2026-11.io.rdisk:fake"

type fakeCtrl struct {
	t    *testing.T
	p    *iwarp.Provider
	ln   rdma.Listener
	addr string

	// rejectCM, when set, rejects every connection with this status.
	rejectCM nvmeof.CMStatus
	// connectStatus fails the admin Connect with this status.
	connectStatus nvmeof.Status
	// identify edits the Identify Controller data before it is sent.
	identify func(*nvmeof.IdentifyController)
	// identifyNS, when set, edits the Identify Namespace data of nsid
	// (namespace 1 starts as 2048 512-byte blocks, others as zeroes); a
	// non-zero status fails the command instead.
	identifyNS func(nsid uint32, id *nvmeof.IdentifyNamespace) nvmeof.Status
	// io handles an I/O command; nil answers success without data.
	io func(q *fakeQueue, sqe nvmeof.SQE, kind nvmeof.CommandKind)

	mu     sync.Mutex
	queues []*fakeQueue
}

type fakeQueue struct {
	f        *fakeCtrl
	qid      uint16
	pd       rdma.PD
	qp       rdma.QP
	scq, rcq rdma.CQ
	rbuf     []byte
	rmr      rdma.MR
	dbuf     []byte
	dmr      rdma.MR
	cqes     []byte
	cmr      rdma.MR
	nextCQE  int
	cc       nvmeof.CC
	mu       sync.Mutex // serializes sends (held commands are answered from test goroutines)
}

const (
	fakeCapsule = nvmeof.SQESize + 4096
	fakeRecvs   = 256
)

func startFake(t *testing.T, setup func(f *fakeCtrl)) *fakeCtrl {
	t.Helper()
	p, _ := iwarp.New(iwarp.Config{})
	f := &fakeCtrl{t: t, p: p}
	if setup != nil {
		setup(f)
	}
	ln, err := p.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.ln, f.addr = ln, ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		ln.Close()
		f.mu.Lock()
		for _, q := range f.queues {
			q.qp.Close()
		}
		f.mu.Unlock()
	})
	go func() {
		for {
			req, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			go f.serve(ctx, req)
		}
	}()
	return f
}

func (f *fakeCtrl) serve(ctx context.Context, req rdma.ConnRequest) {
	cm, err := nvmeof.ParseCMRequest(req.PrivateData())
	if err != nil || f.rejectCM != 0 {
		st := f.rejectCM
		if st == 0 {
			st = nvmeof.CMInvalidLength
		}
		rej := make([]byte, nvmeof.CMRejectSize)
		nvmeof.CMReject(rej).Encode(&nvmeof.CMRejectFields{Status: st})
		req.Reject(rej)
		return
	}
	q := &fakeQueue{f: f, qid: cm.QID}
	q.pd, _ = f.p.AllocPD()
	q.scq, _ = f.p.CreateCQ(1024)
	q.rcq, _ = f.p.CreateCQ(1024)
	q.qp, err = q.pd.CreateQP(rdma.QPConfig{SendCQ: q.scq, RecvCQ: q.rcq, MaxSendWR: 512, MaxRecvWR: fakeRecvs, MaxSendSGE: 1, MaxRecvSGE: 1})
	if err != nil {
		f.t.Errorf("fake: creating QP: %v", err)
		return
	}
	q.rbuf = make([]byte, fakeRecvs*fakeCapsule)
	q.rmr, _ = q.pd.RegisterMemory(q.rbuf, rdma.AccessLocalWrite)
	q.dbuf = make([]byte, 1<<20)
	q.dmr, _ = q.pd.RegisterMemory(q.dbuf, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	q.cqes = make([]byte, 256*nvmeof.CQESize)
	q.cmr, _ = q.pd.RegisterMemory(q.cqes, rdma.AccessLocalWrite)
	for i := range fakeRecvs {
		q.postRecv(i)
	}
	acc := make([]byte, nvmeof.CMAcceptSize)
	nvmeof.CMAccept(acc).Encode(&nvmeof.CMAcceptFields{CRQSize: cm.HSQSize + 1})
	f.mu.Lock()
	f.queues = append(f.queues, q)
	f.mu.Unlock()
	if err := req.Accept(ctx, q.qp, rdma.ConnParam{PrivateData: acc}); err != nil {
		return
	}
	wcs := make([]rdma.WC, 16)
	for {
		n := q.rcq.Poll(wcs)
		if n == 0 {
			if q.rcq.Wait(ctx) != nil {
				return
			}
			continue
		}
		for _, wc := range wcs[:n] {
			if wc.Status != rdma.StatusSuccess {
				return
			}
			b := q.rbuf[int(wc.ID)*fakeCapsule : int(wc.ID)*fakeCapsule+wc.ByteLen]
			capsule := append([]byte(nil), b...)
			q.postRecv(int(wc.ID))
			sqe, kind, err := nvmeof.ParseCommand(capsule, q.qid == 0)
			if err != nil {
				var ce *nvmeof.CommandError
				if errors.As(err, &ce) {
					q.respond(sqe.CID(), ce.Status, 0, 0)
				}
				continue
			}
			q.handle(sqe, kind, capsule)
		}
	}
}

func (q *fakeQueue) postRecv(i int) {
	q.qp.PostRecv(&rdma.RecvWR{ID: uint64(i), SGL: []rdma.SGE{{MR: q.rmr, Offset: i * fakeCapsule, Length: fakeCapsule}}})
}

// respond sends a CQE; inv, if non-zero, is invalidated at the host.
func (q *fakeQueue) respond(cid uint16, st nvmeof.Status, result uint64, inv uint32) {
	q.mu.Lock()
	defer q.mu.Unlock()
	i := q.nextCQE % 256
	q.nextCQE++
	nvmeof.CQE(q.cqes[i*16:]).Encode(&nvmeof.CQEFields{Result: result, CID: cid, Status: st, SQID: q.qid})
	wr := &rdma.SendWR{Op: rdma.OpSend, SGL: []rdma.SGE{{MR: q.cmr, Offset: i * 16, Length: 16}}}
	if inv != 0 {
		wr.Op, wr.InvalidateKey = rdma.OpSendWithInv, inv
	}
	q.qp.PostSend(wr)
}

// transfer moves data between the fake's buffer and the host's keyed SGL,
// waiting for it.
func (q *fakeQueue) transfer(sgl nvmeof.SGL, n int, read bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	op := rdma.OpRDMAWrite
	if read {
		op = rdma.OpRDMARead
	}
	if err := q.qp.PostSend(&rdma.SendWR{Op: op, Flags: rdma.Signaled, SGL: []rdma.SGE{{MR: q.dmr, Length: n}}, RemoteAddr: sgl.Address(), RemoteKey: sgl.Key()}); err != nil {
		return err
	}
	wc := make([]rdma.WC, 1)
	for q.scq.Poll(wc) == 0 {
		if err := q.scq.Wait(context.Background()); err != nil {
			return err
		}
	}
	return wc[0].Err()
}

// reply answers a command: data (if any) goes to the host's keyed SGL
// first; the completion invalidates the key when the SGL asked for it.
func (q *fakeQueue) reply(sqe nvmeof.SQE, data []byte, result uint64) {
	sgl := sqe.DPTR()
	if len(data) > 0 {
		n := min(len(data), int(sgl.Length()))
		copy(q.dbuf, data[:n])
		if err := q.transfer(sgl, n, false); err != nil {
			return
		}
	}
	inv := uint32(0)
	if sgl.Keyed() && sgl.Invalidate() && sgl.Length() > 0 {
		inv = sgl.Key()
	}
	q.respond(sqe.CID(), 0, result, inv)
}

func (q *fakeQueue) handle(sqe nvmeof.SQE, kind nvmeof.CommandKind, capsule []byte) {
	f := q.f
	switch kind {
	case nvmeof.KindConnect:
		if err := q.transfer(sqe.DPTR(), nvmeof.ConnectDataSize, true); err != nil {
			return
		}
		if q.qid == 0 && f.connectStatus != 0 {
			q.respond(sqe.CID(), f.connectStatus, 0, sqe.DPTR().Key())
			return
		}
		q.respond(sqe.CID(), 0, uint64(nvmeof.ConnectResult(1, 0)), sqe.DPTR().Key())
	case nvmeof.KindPropertyGet:
		var v uint64
		switch sqe.Property().Offset() {
		case nvmeof.PropCAP:
			v = uint64(nvmeof.MakeCAP(nvmeof.CAPFields{MQES: 127, CQR: true, TO: 2, CSS: nvmeof.CAPCSSNVM}))
		case nvmeof.PropVS:
			v = uint64(nvmeof.MakeVersion(1, 4, 0))
		case nvmeof.PropCSTS:
			var cs nvmeof.CSTS
			if q.cc.EN() {
				cs |= nvmeof.CSTSReady
			}
			if q.cc.SHN() != 0 {
				cs = cs.WithSHST(nvmeof.ShutdownStatusComplete)
			}
			v = uint64(cs)
		case nvmeof.PropCC:
			v = uint64(q.cc)
		}
		q.reply(sqe, nil, v)
	case nvmeof.KindPropertySet:
		if sqe.Property().Offset() == nvmeof.PropCC {
			q.cc = nvmeof.CC(sqe.Property().Value())
		}
		q.reply(sqe, nil, 0)
	case nvmeof.KindIdentify:
		b := make([]byte, nvmeof.IdentifySize)
		switch sqe.Identify().CNS() {
		case nvmeof.CNSController:
			id := nvmeof.IdentifyController{SN: "fake", MN: "fake", FR: "1", CNTLID: 1, VER: nvmeof.MakeVersion(1, 4, 0),
				KAS: 10, SQES: 0x66, CQES: 0x44, MAXCMD: 128, NN: 1, MDTS: 5, SGLS: nvmeof.SGLSKeyed | nvmeof.SGLSOffset,
				SUBNQN: fakeNQN, IOCCSZ: 260, IORCSZ: 1, CNTRLTYPE: nvmeof.ControllerTypeIO, ONCS: nvmeof.ONCSWriteZeroes}
			if f.identify != nil {
				f.identify(&id)
			}
			id.Encode(b)
		case nvmeof.CNSNamespace:
			var ns nvmeof.IdentifyNamespace
			if sqe.NSID() == 1 {
				ns = nvmeof.IdentifyNamespace{NSZE: 2048, NCAP: 2048, NUSE: 2048, LBAF: []nvmeof.LBAFormat{{LBADS: 9}}}
			}
			if f.identifyNS != nil {
				if st := f.identifyNS(sqe.NSID(), &ns); st != 0 {
					q.respond(sqe.CID(), st, 0, 0)
					return
				}
			}
			if ns.NSZE != 0 {
				ns.Encode(b)
			}
		case nvmeof.CNSActiveNSList:
			nvmeof.EncodeNSIDList(b, []uint32{1})
		default:
			q.respond(sqe.CID(), nvmeof.StatusInvalidField.WithDNR(), 0, 0)
			return
		}
		q.reply(sqe, b, 0)
	case nvmeof.KindSetFeatures:
		res := uint64(0)
		if sqe.Features().FID() == nvmeof.FeatNumQueues {
			res = uint64(nvmeof.NumQueuesValue(3, 3))
		}
		q.reply(sqe, nil, res)
	case nvmeof.KindAsyncEventRequest:
		// held: never completed
	case nvmeof.KindKeepAlive:
		q.reply(sqe, nil, 0)
	case nvmeof.KindGetLogPage:
		q.reply(sqe, make([]byte, sqe.GetLogPage().Length()), 0)
	default:
		if f.io != nil {
			f.io(q, sqe, kind)
			return
		}
		q.reply(sqe, nil, 0)
	}
}

func fakeHostConfig() Config {
	cfg := hostConfig()
	cfg.IOQueues, cfg.QueueDepth = 1, 8
	cfg.ConnectTimeout = 5 * time.Second
	return cfg
}

func TestFakeCMReject(t *testing.T) {
	t.Parallel()
	f := startFake(t, func(f *fakeCtrl) { f.rejectCM = nvmeof.CMInvalidHSQSize })
	_, err := Connect(context.Background(), f.p, f.addr, fakeNQN, fakeHostConfig())
	var re *RejectError
	if !errors.As(err, &re) || re.Status != nvmeof.CMInvalidHSQSize || !strings.Contains(err.Error(), "NVME_RDMA_CM_INVALID_HSQSIZE") {
		t.Fatalf("Connect to a rejecting target: %v, want a RejectError naming NVME_RDMA_CM_INVALID_HSQSIZE", err)
	}
}

func TestFakeConnectInvalidHost(t *testing.T) {
	t.Parallel()
	f := startFake(t, func(f *fakeCtrl) { f.connectStatus = nvmeof.StatusConnectInvalidHost.WithDNR() })
	_, err := Connect(context.Background(), f.p, f.addr, fakeNQN, fakeHostConfig())
	var ce *ConnectError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "Connect Invalid Host") || !strings.Contains(err.Error(), "not allowed") {
		t.Fatalf("Connect refused for the host: %v", err)
	}
}

func TestFakeIdentifyChecks(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		edit func(*nvmeof.IdentifyController)
		want string
	}{
		{"cntlid", func(id *nvmeof.IdentifyController) { id.CNTLID = 7 }, "CNTLID"},
		{"kas", func(id *nvmeof.IdentifyController) { id.KAS = 0 }, "KAS"},
		{"keyed sgls", func(id *nvmeof.IdentifyController) { id.SGLS = nvmeof.SGLSOffset }, "SGLS"},
		{"icdoff", func(id *nvmeof.IdentifyController) { id.ICDOFF = 1 }, "ICDOFF"},
		{"ioccsz", func(id *nvmeof.IdentifyController) { id.IOCCSZ = 3 }, "IOCCSZ"},
		{"discovery type", func(id *nvmeof.IdentifyController) { id.CNTRLTYPE = nvmeof.ControllerTypeDiscovery }, "discovery controller"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := startFake(t, func(f *fakeCtrl) { f.identify = c.edit })
			_, err := Connect(context.Background(), f.p, f.addr, fakeNQN, fakeHostConfig())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Connect: %v, want an error about %s", err, c.want)
			}
		})
	}
}

func fakeOpen(t *testing.T, f *fakeCtrl, cfg Config) *Namespace {
	t.Helper()
	ns, err := Open(context.Background(), f.p, URL{Host: "127.0.0.1", Port: mustPort(t, f.addr), SubNQN: fakeNQN}, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

func mustPort(t *testing.T, addr string) int {
	_, p := splitAddr(addr)
	return p
}

// TestFakeTargetDisconnects: the target drops the I/O queue with commands
// in flight; they all complete with an error matching blockdev.ErrClosed
// and the controller reports why.
func TestFakeTargetDisconnects(t *testing.T) {
	t.Parallel()
	var held sync.WaitGroup
	held.Add(4)
	var once sync.Once
	f := startFake(t, func(f *fakeCtrl) {
		f.io = func(q *fakeQueue, sqe nvmeof.SQE, kind nvmeof.CommandKind) {
			held.Done() // hold the first four reads, then disconnect
			once.Do(func() {
				go func() {
					held.Wait()
					q.qp.Disconnect()
				}()
			})
		}
	})
	ns := fakeOpen(t, f, fakeHostConfig())
	buf, _ := ns.AllocBuffer(4 * 4096)
	ch := make(chan *blockdev.Request, 4)
	for i := range 4 {
		if err := ns.Submit(&blockdev.Request{Op: blockdev.OpRead, Offset: int64(i) * 4096, Length: 4096, Buf: buf, BufOff: i * 4096, C: ch}); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		select {
		case r := <-ch:
			if !errors.Is(r.Err, blockdev.ErrClosed) {
				t.Errorf("request in flight when the target left: %v, want an error matching ErrClosed", r.Err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("requests in flight did not complete after the target disconnected")
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
}

// TestFakeWrongInvalidation: the target's Send with Invalidate names the
// key of another command in flight; the host must not accept it.
func TestFakeWrongInvalidation(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var first nvmeof.SQE
	f := startFake(t, func(f *fakeCtrl) {
		f.io = func(q *fakeQueue, sqe nvmeof.SQE, kind nvmeof.CommandKind) {
			mu.Lock()
			defer mu.Unlock()
			if first == nil {
				first = append(nvmeof.SQE(nil), sqe...)
				return
			}
			// Complete the first read invalidating the second's key.
			q.respond(first.CID(), 0, 0, sqe.DPTR().Key())
		}
	})
	ns := fakeOpen(t, f, fakeHostConfig())
	buf, _ := ns.AllocBuffer(2 * 4096)
	ch := make(chan *blockdev.Request, 2)
	for i := range 2 {
		if err := ns.Submit(&blockdev.Request{Op: blockdev.OpRead, Offset: int64(i) * 4096, Length: 4096, Buf: buf, BufOff: i * 4096, C: ch}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		select {
		case r := <-ch:
			if r.Err == nil {
				t.Errorf("a read completed successfully despite the bad invalidation")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no completion")
		}
	}
	<-ns.Controller().Done()
	if err := ns.Controller().Err(); err == nil || !strings.Contains(err.Error(), "invalidated key") {
		t.Errorf("controller error %v, want one about the invalidated key", err)
	}
}

// TestFakeIOTimeout: the target never answers an I/O; the watchdog fails
// the controller and the request completes with the timeout.
func TestFakeIOTimeout(t *testing.T) {
	t.Parallel()
	f := startFake(t, func(f *fakeCtrl) {
		f.io = func(q *fakeQueue, sqe nvmeof.SQE, kind nvmeof.CommandKind) {}
	})
	cfg := fakeHostConfig()
	cfg.IOTimeout = 300 * time.Millisecond
	ns := fakeOpen(t, f, cfg)
	buf, _ := ns.AllocBuffer(4096)
	start := time.Now()
	err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpRead, Length: 4096, Buf: buf})
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, blockdev.ErrClosed) {
		t.Fatalf("unanswered read: %v, want ErrTimeout (and ErrClosed)", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("timeout took %v", d)
	}
}

// TestFakeStatusError: an I/O error status reaches the request as a
// *StatusError with the blockdev class.
func TestFakeStatusError(t *testing.T) {
	t.Parallel()
	f := startFake(t, func(f *fakeCtrl) {
		f.io = func(q *fakeQueue, sqe nvmeof.SQE, kind nvmeof.CommandKind) {
			inv := uint32(0)
			if s := sqe.DPTR(); s.Keyed() && s.Invalidate() && s.Length() > 0 {
				inv = s.Key()
			}
			q.respond(sqe.CID(), nvmeof.StatusUnrecoveredReadError, 0, inv)
		}
	})
	ns := fakeOpen(t, f, fakeHostConfig())
	buf, _ := ns.AllocBuffer(4096)
	err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpRead, Length: 4096, Buf: buf})
	var se *StatusError
	if !errors.As(err, &se) || se.Status.Code() != nvmeof.StatusUnrecoveredReadError || !errors.Is(err, blockdev.ErrIO) {
		t.Fatalf("read: %v, want Unrecovered Read Error as blockdev.ErrIO", err)
	}
	// The controller keeps working: a local invalidation happened, so the
	// slot's key can be mapped again.
	for range 20 {
		if err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpRead, Length: 4096, Buf: buf}); !errors.As(err, &se) {
			t.Fatalf("repeated read: %v", err)
		}
	}
}

// TestFakeWriteZeroesNullSGL checks that a command without data carries the
// zero-length keyed descriptor Linux nvmet requires.
func TestFakeWriteZeroesNullSGL(t *testing.T) {
	t.Parallel()
	got := make(chan []byte, 1)
	f := startFake(t, func(f *fakeCtrl) {
		f.io = func(q *fakeQueue, sqe nvmeof.SQE, kind nvmeof.CommandKind) {
			got <- append([]byte(nil), sqe.DPTR()...)
			q.respond(sqe.CID(), 0, 0, 0)
		}
	})
	ns := fakeOpen(t, f, fakeHostConfig())
	if err := blockdev.Do(ns, &blockdev.Request{Op: blockdev.OpWriteZeroes, Offset: 512, Length: 1024}); err != nil {
		t.Fatal(err)
	}
	d := <-got
	if d[15] != nvmeof.SGLKeyed || binary.LittleEndian.Uint64(d) != 0 || d[8]|d[9]|d[10] != 0 {
		t.Errorf("write zeroes DPTR % x: want a zero-length keyed descriptor (0x40)", d)
	}
}

// noRemoteInvProvider declares that the peer cannot invalidate its keys
// (rdma.Caps.NoRemoteInvalidate), as the verbs provider does over RoCE.
type noRemoteInvProvider struct{ rdma.Provider }

func (noRemoteInvProvider) Caps() rdma.Caps { return rdma.Caps{NoRemoteInvalidate: true} }

// TestFakeNoRemoteInvalidate: over a provider whose keys the peer cannot
// invalidate, the host exposes its buffers with plain keyed SGLs (no
// Invalidate), and reads answered with plain Sends complete and the slot's
// key is invalidated locally (the next reads map it again).
func TestFakeNoRemoteInvalidate(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var ids []uint8
	f := startFake(t, func(f *fakeCtrl) {
		f.io = func(q *fakeQueue, sqe nvmeof.SQE, kind nvmeof.CommandKind) {
			mu.Lock()
			ids = append(ids, sqe.DPTR().Identifier())
			mu.Unlock()
			q.respond(sqe.CID(), 0, 0, 0)
		}
	})
	ns, err := Open(context.Background(), noRemoteInvProvider{f.p}, URL{Host: "127.0.0.1", Port: mustPort(t, f.addr), SubNQN: fakeNQN}, fakeHostConfig())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { ns.Close() })
	buf, _ := ns.AllocBuffer(4096)
	ch := make(chan *blockdev.Request, 1)
	for i := range 20 { // more than the queue's 8 slots: each key is mapped again
		if err := ns.Submit(&blockdev.Request{Op: blockdev.OpRead, Offset: int64(i) * 4096, Length: 4096, Buf: buf, C: ch}); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-ch:
			if r.Err != nil {
				t.Fatalf("read %d: %v", i, r.Err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no completion")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, id := range ids {
		if id != nvmeof.SGLKeyed {
			t.Fatalf("command %d: SGL identifier %#x, want %#x (keyed, no Invalidate)", i, id, nvmeof.SGLKeyed)
		}
	}
}
