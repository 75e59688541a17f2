package rdmatest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/rdisk/rdisk/rdma"
)

// NewProvider returns a fresh provider for one test; the suite closes it.
type NewProvider func(t *testing.T) rdma.Provider

// Run runs the conformance suite. Listen addresses are 127.0.0.1:0.
func Run(t *testing.T, newProvider NewProvider) {
	tests := []struct {
		name string
		fn   func(*testing.T, NewProvider)
	}{
		{"ConnectPrivateData", testConnectPrivateData},
		{"Reject", testReject},
		{"MaxPrivateData", testMaxPrivateData},
		{"SendSmall", testSendSmall},
		{"SendMultiFPDUScatterGather", testSendSG},
		{"RDMAWrite", testWrite},
		{"RDMARead", testRead},
		{"ReadsAtFullORD", testReadsAtFullORD},
		{"ResponderReadsAsymmetricIRD", testResponderReads},
		{"FastRegSendWithInvalidate", testFastRegSendInv},
		{"LocalInvalidate", testLocalInv},
		{"ReadInvalidSTag", testReadInvalidSTag},
		{"ReadWrongKey", testReadWrongKey},
		{"ReadOutOfBounds", testReadOutOfBounds},
		{"ReadWithoutRights", testReadNoRights},
		{"WriteWithoutRights", testWriteNoRights},
		{"RecvTooSmall", testRecvTooSmall},
		{"NoRecvPosted", testNoRecv},
		{"DisconnectFlushes", testDisconnectFlush},
		{"ManyQPs", testManyQPs},
		{"ImplicitGather", testImplicitGather},
		{"ImplicitKeyRefusedRemotely", testImplicitRemote},
		{"ImplicitReadSink", testImplicitReadSink},
		{"ImplicitWriteKeyRefusedRemotely", testImplicitWriteRemote},
		{"QueueFull", testQueueFull},
		{"UnsignaledSendsRetire", testUnsignaledRetire},
		{"WriteSourceReusedAfterCompletion", testWriteSourceReuse},
		{"ChainedPosts", testChainedPosts},
		{"UnendedChainCompletesOnDisconnect", testUnendedChain},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newProvider)
		})
	}
}

// End is one side of a connected pair.
type End struct {
	Prov   rdma.Provider
	PD     rdma.PD
	SendCQ rdma.CQ
	RecvCQ rdma.CQ
	QP     rdma.QP
	Buf    []byte
	MR     rdma.MR
}

// PairConfig shapes Pair.
type PairConfig struct {
	BufSize     int
	Access      rdma.Access // of each side's MR (default all rights)
	PostRecvs   int         // receives of RecvSize posted on each side before connecting
	RecvSize    int
	ServerPD    []byte // accept private data
	ClientPD    []byte
	QP          rdma.QPConfig
	ServerParam rdma.ConnParam
	ClientParam rdma.ConnParam
}

// Pair connects a client and a server QP over loopback.
func Pair(t testing.TB, np func() rdma.Provider, cfg PairConfig) (client, server *End) {
	t.Helper()
	if cfg.BufSize == 0 {
		cfg.BufSize = 1 << 20
	}
	if cfg.Access == 0 {
		cfg.Access = rdma.AccessLocalWrite | rdma.AccessRemoteWrite | rdma.AccessRemoteRead
	}
	if cfg.RecvSize == 0 {
		cfg.RecvSize = 4096
	}
	sp, cp := np(), np()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ln, err := sp.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	server = newEnd(t, sp, cfg, true)
	client = newEnd(t, cp, cfg, false)
	type res struct {
		pd  []byte
		err error
	}
	done := make(chan res, 1)
	go func() {
		p := cfg.ClientParam
		p.PrivateData = cfg.ClientPD
		pd, err := client.QP.Connect(ctx, ln.Addr().String(), p)
		done <- res{pd, err}
	}()
	type acc struct {
		req rdma.ConnRequest
		err error
	}
	accepted := make(chan acc, 1)
	go func() {
		req, err := ln.Accept(ctx)
		accepted <- acc{req, err}
	}()
	var req rdma.ConnRequest
	select {
	case a := <-accepted:
		if a.err != nil {
			t.Fatalf("accept: %v", a.err)
		}
		req = a.req
	case r := <-done:
		// The connect failed before a request reached the listener.
		t.Fatalf("connect to %s: %v (no connection request arrived)", ln.Addr(), r.err)
	}
	if cp := cfg.ClientParam; cp.ResponderResources > 0 && cp.InitiatorDepth > 0 &&
		(req.ResponderResources() != cp.ResponderResources || req.InitiatorDepth() != cp.InitiatorDepth) {
		t.Errorf("server got the initiator's IRD/ORD as %d/%d, it sent %d/%d",
			req.ResponderResources(), req.InitiatorDepth(), cp.ResponderResources, cp.InitiatorDepth)
	}
	if !samePD(req.PrivateData(), cfg.ClientPD) {
		t.Errorf("server got private data %x, want %x", req.PrivateData(), cfg.ClientPD)
	}
	p := cfg.ServerParam
	p.PrivateData = cfg.ServerPD
	if err := req.Accept(ctx, server.QP, p); err != nil {
		t.Fatalf("accept request: %v", err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("connect: %v", r.err)
	}
	if !samePD(r.pd, cfg.ServerPD) {
		t.Errorf("client got reply private data %x, want %x", r.pd, cfg.ServerPD)
	}
	if err := client.QP.PostSend(&rdma.SendWR{ID: helloID, Op: rdma.OpSend}); err != nil {
		t.Fatalf("hello: %v", err)
	}
	if wc := WaitWC(t, server.RecvCQ); wc.ID != helloID || wc.Status != rdma.StatusSuccess {
		t.Fatalf("hello: completion %+v", wc)
	}
	return client, server
}

// helloID is the receive the server posts first: on iWARP the responder
// may not send before the initiator's first message arrived (RFC 5044
// §7.1.2), so Pair has the client send a zero-length hello.
const helloID = ^uint64(0)

func newEnd(t testing.TB, p rdma.Provider, cfg PairConfig, server bool) *End {
	t.Helper()
	e := &End{Prov: p}
	var err error
	if e.PD, err = p.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.SendCQ, err = p.CreateCQ(1024); err != nil {
		t.Fatal(err)
	}
	if e.RecvCQ, err = p.CreateCQ(1024); err != nil {
		t.Fatal(err)
	}
	qc := cfg.QP
	qc.SendCQ, qc.RecvCQ = e.SendCQ, e.RecvCQ
	if e.QP, err = e.PD.CreateQP(qc); err != nil {
		t.Fatal(err)
	}
	e.Buf = make([]byte, cfg.BufSize)
	if e.MR, err = e.PD.RegisterMemory(e.Buf, cfg.Access); err != nil {
		t.Fatal(err)
	}
	if server {
		if err := e.QP.PostRecv(&rdma.RecvWR{ID: helloID}); err != nil {
			t.Fatalf("post hello recv: %v", err)
		}
	}
	for i := 0; i < cfg.PostRecvs; i++ {
		off := i * cfg.RecvSize
		if err := e.QP.PostRecv(&rdma.RecvWR{ID: uint64(i), SGL: []rdma.SGE{{MR: e.MR, Offset: off, Length: cfg.RecvSize}}}); err != nil {
			t.Fatalf("post recv %d: %v", i, err)
		}
	}
	t.Cleanup(func() {
		e.QP.Close()
		e.MR.Deregister()
		e.SendCQ.Close()
		e.RecvCQ.Close()
		e.PD.Close()
		p.Close()
	})
	return e
}

// WaitWC waits for the next completion on cq.
func WaitWC(t testing.TB, cq rdma.CQ) rdma.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wc [1]rdma.WC
	for {
		if cq.Poll(wc[:]) == 1 {
			return wc[0]
		}
		if err := cq.Wait(ctx); err != nil {
			t.Fatalf("waiting for a completion: %v", err)
		}
	}
}

func waitDone(t testing.TB, qp rdma.QP) {
	t.Helper()
	select {
	case <-qp.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("QP %d did not enter the error state", qp.Num())
	}
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// capsOf returns the provider's declared departures (rdma.CapsOf) from a
// provider made for the purpose.
func capsOf(t *testing.T, np NewProvider) rdma.Caps {
	p := np(t)
	defer p.Close()
	return rdma.CapsOf(p)
}

func prov(t *testing.T, np NewProvider) func() rdma.Provider {
	return func() rdma.Provider { return np(t) }
}

func expect(t testing.TB, wc rdma.WC, op rdma.Opcode, st rdma.Status) {
	t.Helper()
	if wc.Op != op || wc.Status != st {
		t.Fatalf("completion %s/%s (id %d), want %s/%s", wc.Op, wc.Status, wc.ID, op, st)
	}
}

// samePD tells whether private data got carries want: exactly, or padded
// with zeros to the connection manager's fixed field size, as the
// InfiniBand CM delivers it (IBTA vol. 1 section 12.6: REQ 92, REP 196,
// REJ 148 bytes), over RoCE (rxe) and InfiniBand. The ULPs' private data
// (NVMe-oF, iSER, SRP) are fixed layouts that padding does not change.
func samePD(got, want []byte) bool {
	if !bytes.HasPrefix(got, want) {
		return false
	}
	for _, b := range got[len(want):] {
		if b != 0 {
			return false
		}
	}
	return true
}

func testConnectPrivateData(t *testing.T, np NewProvider) {
	c, s := Pair(t, prov(t, np), PairConfig{ClientPD: []byte("hello from client"), ServerPD: []byte{1, 2, 3, 4}})
	if c.QP.State() != rdma.QPConnected || s.QP.State() != rdma.QPConnected {
		t.Fatalf("states %s/%s, want connected", c.QP.State(), s.QP.State())
	}
	if c.QP.RemoteAddr().String() != s.QP.LocalAddr().String() {
		t.Errorf("client remote %s != server local %s", c.QP.RemoteAddr(), s.QP.LocalAddr())
	}
}

func testMaxPrivateData(t *testing.T, np NewProvider) {
	caps := capsOf(t, np)
	conn := bytes.Repeat([]byte{0xa5}, caps.MaxConnectPrivateData)
	acc := bytes.Repeat([]byte{0x5a}, caps.MaxAcceptPrivateData)
	Pair(t, prov(t, np), PairConfig{ClientPD: conn, ServerPD: acc})
	rej := bytes.Repeat([]byte{0x3c}, caps.MaxRejectPrivateData)
	rejectWith(t, np, rej, func(re *rdma.RejectError) {
		if !samePD(re.PrivateData, rej) {
			t.Errorf("reject private data: %d bytes %x, want %d bytes of 3c", len(re.PrivateData), re.PrivateData, len(rej))
		}
	})
	c := newEnd(t, np(t), PairConfig{BufSize: 4096}, false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.QP.Connect(ctx, "127.0.0.1:1", rdma.ConnParam{PrivateData: append(conn, 1)}); err == nil {
		t.Fatalf("connect with %d bytes of private data, more than the provider's %d, succeeded", len(conn)+1, len(conn))
	}
}

func testReject(t *testing.T, np NewProvider) {
	rejectWith(t, np, []byte{0, 0, 3, 0}, func(re *rdma.RejectError) {
		if !samePD(re.PrivateData, []byte{0, 0, 3, 0}) {
			t.Errorf("reject private data %x", re.PrivateData)
		}
	})
}

// rejectWith has a listener reject a connection request with pd and
// checks the initiator's error with check.
func rejectWith(t *testing.T, np NewProvider, pd []byte, check func(*rdma.RejectError)) {
	t.Helper()
	sp, cp := np(t), np(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ln, err := sp.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := newEnd(t, cp, PairConfig{BufSize: 4096}, false)
	rejErr := make(chan error, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err == nil {
			err = req.Reject(pd)
		}
		rejErr <- err
	}()
	_, err = c.QP.Connect(ctx, ln.Addr().String(), rdma.ConnParam{PrivateData: []byte("x")})
	if err := <-rejErr; err != nil {
		t.Fatalf("reject with %d bytes of private data: %v", len(pd), err)
	}
	var re *rdma.RejectError
	if !errors.As(err, &re) {
		t.Fatalf("connect error %v, want *rdma.RejectError", err)
	}
	check(re)
}

func testSendSmall(t *testing.T, np NewProvider) {
	c, s := Pair(t, prov(t, np), PairConfig{PostRecvs: 8, RecvSize: 256})
	noFlag := rdma.CapsOf(c.Prov).NoSolicitedFlag
	for i := 0; i < 20; i++ {
		msg := fmt.Appendf(nil, "message %d", i)
		copy(c.Buf[512*1024:], msg)
		flags := rdma.Signaled
		if i%2 == 1 {
			flags |= rdma.Solicited
		}
		if err := c.QP.PostSend(&rdma.SendWR{ID: uint64(100 + i), Op: rdma.OpSend, Flags: flags,
			SGL: []rdma.SGE{{MR: c.MR, Offset: 512 * 1024, Length: len(msg)}}}); err != nil {
			t.Fatal(err)
		}
		expect(t, WaitWC(t, c.SendCQ), rdma.OpSend, rdma.StatusSuccess)
		wc := WaitWC(t, s.RecvCQ)
		expect(t, wc, rdma.OpRecv, rdma.StatusSuccess)
		if wc.ByteLen != len(msg) || !bytes.Equal(s.Buf[int(wc.ID)*256:int(wc.ID)*256+wc.ByteLen], msg) {
			t.Fatalf("recv %d: %d bytes %q, want %q", wc.ID, wc.ByteLen, s.Buf[int(wc.ID)*256:int(wc.ID)*256+wc.ByteLen], msg)
		}
		if got := wc.Flags&rdma.WCSolicited != 0; got != (i%2 == 1 && !noFlag) {
			t.Errorf("recv %d: solicited %v", i, got)
		}
		if err := s.QP.PostRecv(&rdma.RecvWR{ID: wc.ID, SGL: []rdma.SGE{{MR: s.MR, Offset: int(wc.ID) * 256, Length: 256}}}); err != nil {
			t.Fatal(err)
		}
	}
	// Zero-length send.
	if err := c.QP.PostSend(&rdma.SendWR{ID: 1, Op: rdma.OpSend, Flags: rdma.Signaled}); err != nil {
		t.Fatal(err)
	}
	if wc := WaitWC(t, s.RecvCQ); wc.Status != rdma.StatusSuccess || wc.ByteLen != 0 {
		t.Fatalf("zero-length send: %+v", wc)
	}
}

func testSendSG(t *testing.T, np NewProvider) {
	c, s := Pair(t, prov(t, np), PairConfig{BufSize: 4 << 20})
	// Receive into two pieces; send from three.
	if err := s.QP.PostRecv(&rdma.RecvWR{ID: 7, SGL: []rdma.SGE{{MR: s.MR, Offset: 0, Length: 100000}, {MR: s.MR, Offset: 2 << 20, Length: 300000}}}); err != nil {
		t.Fatal(err)
	}
	fill(c.Buf[:1<<20], 1)
	sgl := []rdma.SGE{{MR: c.MR, Offset: 10, Length: 70000}, {MR: c.MR, Offset: 200000, Length: 1}, {MR: c.MR, Offset: 300000, Length: 250000}}
	if err := c.QP.PostSend(&rdma.SendWR{ID: 1, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: sgl}); err != nil {
		t.Fatal(err)
	}
	expect(t, WaitWC(t, c.SendCQ), rdma.OpSend, rdma.StatusSuccess)
	wc := WaitWC(t, s.RecvCQ)
	expect(t, wc, rdma.OpRecv, rdma.StatusSuccess)
	var want []byte
	for _, g := range sgl {
		want = append(want, c.Buf[g.Offset:g.Offset+g.Length]...)
	}
	got := append(append([]byte(nil), s.Buf[:100000]...), s.Buf[2<<20:2<<20+len(want)-100000]...)
	if wc.ByteLen != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("scatter-gather send: %d bytes, want %d; equal=%v", wc.ByteLen, len(want), bytes.Equal(got, want))
	}
}

func testWrite(t *testing.T, np NewProvider) {
	const size = 8 << 20
	c, s := Pair(t, prov(t, np), PairConfig{BufSize: 2 * size})
	// Each write lands in a region the test has not touched: the race
	// detector cannot see the causality carried by the socket, so reusing
	// a region the test read would be reported as a race.
	dst := 0
	for _, n := range []int{1, 4096, 65536 + 3, 128 << 10, size} {
		fill(c.Buf[:n], uint64(n))
		if err := c.QP.PostSend(&rdma.SendWR{ID: uint64(n), Op: rdma.OpRDMAWrite, Flags: rdma.Signaled,
			SGL: []rdma.SGE{{MR: c.MR, Offset: 0, Length: n}}, RemoteAddr: s.MR.VA() + uint64(dst), RemoteKey: s.MR.RKey()}); err != nil {
			t.Fatal(err)
		}
		expect(t, WaitWC(t, c.SendCQ), rdma.OpRDMAWrite, rdma.StatusSuccess)
		// An RDMA Write completes at the sender; a Send after it is
		// ordered behind it on the wire: use one to know placement ended.
		syncSend(t, c, s)
		if !bytes.Equal(s.Buf[dst:dst+n], c.Buf[:n]) {
			t.Fatalf("RDMA Write of %d bytes: data differs", n)
		}
		if dst+n < len(s.Buf) && s.Buf[dst+n] != 0 {
			t.Fatalf("RDMA Write of %d bytes wrote past its end", n)
		}
		dst += (n + 4096) &^ 4095
	}
	// Scatter-gather source.
	fill(c.Buf[:3<<20], 9)
	dst = 2*size - (2 << 20)
	sgl := []rdma.SGE{{MR: c.MR, Offset: 0, Length: 5000}, {MR: c.MR, Offset: 1 << 20, Length: 1 << 20}}
	if err := c.QP.PostSend(&rdma.SendWR{ID: 1, Op: rdma.OpRDMAWrite, SGL: sgl, RemoteAddr: s.MR.VA() + uint64(dst), RemoteKey: s.MR.RKey()}); err != nil {
		t.Fatal(err)
	}
	syncSend(t, c, s)
	if !bytes.Equal(s.Buf[dst:dst+5000], c.Buf[:5000]) || !bytes.Equal(s.Buf[dst+5000:dst+5000+1<<20], c.Buf[1<<20:2<<20]) {
		t.Fatal("scatter-gather RDMA Write: data differs")
	}
}

// syncSend sends a zero-length message from c to s and waits for it.
func syncSend(t testing.TB, c, s *End) {
	t.Helper()
	if err := s.QP.PostRecv(&rdma.RecvWR{ID: 999}); err != nil {
		t.Fatal(err)
	}
	if err := c.QP.PostSend(&rdma.SendWR{ID: 999, Op: rdma.OpSend}); err != nil {
		t.Fatal(err)
	}
	if wc := WaitWC(t, s.RecvCQ); wc.ID != 999 || wc.Status != rdma.StatusSuccess {
		t.Fatalf("sync send: %+v", wc)
	}
}

func testRead(t *testing.T, np NewProvider) {
	const size = 8 << 20
	c, s := Pair(t, prov(t, np), PairConfig{BufSize: 2 * size})
	fill(s.Buf, 3)
	publish(s)
	for _, n := range []int{0, 1, 4096, 100001, 128 << 10, size} {
		clear(c.Buf)
		if err := c.QP.PostSend(&rdma.SendWR{ID: uint64(n), Op: rdma.OpRDMARead, Flags: rdma.Signaled,
			SGL: []rdma.SGE{{MR: c.MR, Offset: 16, Length: n}}, RemoteAddr: s.MR.VA() + 5, RemoteKey: s.MR.RKey()}); err != nil {
			t.Fatal(err)
		}
		wc := WaitWC(t, c.SendCQ)
		expect(t, wc, rdma.OpRDMARead, rdma.StatusSuccess)
		if wc.ByteLen != n || !bytes.Equal(c.Buf[16:16+n], s.Buf[5:5+n]) {
			t.Fatalf("RDMA Read of %d bytes: data differs (byte len %d)", n, wc.ByteLen)
		}
	}
	// Several reads in flight, completions in order with a send between.
	if err := s.QP.PostRecv(&rdma.RecvWR{ID: 1}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		op := rdma.OpRDMARead
		if i == 4 {
			op = rdma.OpSend
		}
		wr := rdma.SendWR{ID: uint64(i), Op: op, Flags: rdma.Signaled, RemoteAddr: s.MR.VA() + uint64(i)*65536, RemoteKey: s.MR.RKey()}
		if op == rdma.OpRDMARead {
			wr.SGL = []rdma.SGE{{MR: c.MR, Offset: i * 65536, Length: 65536}}
		}
		if err := c.QP.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 8; i++ {
		if wc := WaitWC(t, c.SendCQ); wc.ID != uint64(i) || wc.Status != rdma.StatusSuccess {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	for i := 0; i < 8; i++ {
		if i != 4 && !bytes.Equal(c.Buf[i*65536:(i+1)*65536], s.Buf[i*65536:(i+1)*65536]) {
			t.Fatalf("read %d differs", i)
		}
	}
}

// publish makes the test's writes to e's memory visible to e's provider
// for the race detector: remote accesses reach the provider through a
// socket, which carries no happens-before edge; any call on the QP does.
func publish(e *End) { e.QP.State() }

// testReadsAtFullORD keeps the initiator's ORD equal to the responder's IRD
// with a stream of Reads: the responder must count a Read as finished once
// its response is on its way, or the next Read looks like one too many.
func testReadsAtFullORD(t *testing.T, np NewProvider) {
	c, s := Pair(t, prov(t, np), PairConfig{BufSize: 1 << 20,
		ServerParam: rdma.ConnParam{ResponderResources: 2, InitiatorDepth: 2},
		ClientParam: rdma.ConnParam{ResponderResources: 2, InitiatorDepth: 2}})
	fill(s.Buf, 11)
	publish(s)
	const n, depth, size = 400, 8, 64 << 10
	posted, done := 0, 0
	wr := rdma.SendWR{Op: rdma.OpRDMARead, Flags: rdma.Signaled, SGL: make([]rdma.SGE, 1), RemoteKey: s.MR.RKey()}
	for done < n {
		for posted < n && posted-done < depth {
			off := (posted % depth) * size
			wr.ID = uint64(posted)
			wr.SGL[0] = rdma.SGE{MR: c.MR, Offset: off, Length: size}
			wr.RemoteAddr = s.MR.VA() + uint64(off)
			if err := c.QP.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			posted++
		}
		wc := WaitWC(t, c.SendCQ)
		if wc.Status != rdma.StatusSuccess {
			t.Fatalf("read %d: %s (client QP: %v, server QP: %v)", wc.ID, wc.Status, c.QP.Err(), s.QP.Err())
		}
		done++
	}
}

// testResponderReads connects with an initiator offering IRD 4 and ORD 1,
// as a storage host does (the target reads from it, it reads little): the
// responder sees those values, and its Reads towards the initiator run
// 4 deep.
func testResponderReads(t *testing.T, np NewProvider) {
	c, s := Pair(t, prov(t, np), PairConfig{BufSize: 1 << 20,
		ClientParam: rdma.ConnParam{ResponderResources: 4, InitiatorDepth: 1}})
	fill(c.Buf, 12)
	publish(c)
	const n, size = 64, 64 << 10
	for i := 0; i < n; i++ {
		off := (i % 8) * size
		if err := s.QP.PostSend(&rdma.SendWR{ID: uint64(i), Op: rdma.OpRDMARead, Flags: rdma.Signaled,
			SGL: []rdma.SGE{{MR: s.MR, Offset: off, Length: size}}, RemoteAddr: c.MR.VA() + uint64(off), RemoteKey: c.MR.RKey()}); err != nil {
			t.Fatal(err)
		}
		if i >= 4 {
			expect(t, WaitWC(t, s.SendCQ), rdma.OpRDMARead, rdma.StatusSuccess)
		}
	}
	for i := 0; i < 4; i++ {
		expect(t, WaitWC(t, s.SendCQ), rdma.OpRDMARead, rdma.StatusSuccess)
	}
	if !bytes.Equal(s.Buf[:8*size], c.Buf[:8*size]) {
		t.Fatal("responder's Reads: data differs")
	}
}

func testFastRegSendInv(t *testing.T, np NewProvider) {
	c, s := Pair(t, prov(t, np), PairConfig{PostRecvs: 4, RecvSize: 64})
	caps := rdma.CapsOf(c.Prov)
	fr, err := c.PD.AllocFastRegMR(65536)
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Close()
	var lastKey uint32
	var lastVA uint64
	for i := 0; i < 3; i++ {
		off := 65536 * (i + 1) // a fresh region each time (see testWrite)
		rkey, va, err := fr.Map(c.MR, off, 8192, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		if rkey == lastKey {
			t.Fatalf("fast registration reused key %#x", rkey)
		}
		lastKey, lastVA = rkey, va
		if va != c.MR.VA()+uint64(off) {
			t.Fatalf("fast registration VA %#x, want %#x", va, c.MR.VA()+uint64(off))
		}
		if _, _, err := fr.Map(c.MR, 0, 10, rdma.AccessRemoteWrite); err == nil {
			t.Fatal("mapping a still-valid key succeeded")
		}
		fill(s.Buf[:8192], uint64(i))
		if err := s.QP.PostSend(&rdma.SendWR{ID: 1, Op: rdma.OpRDMAWrite, SGL: []rdma.SGE{{MR: s.MR, Length: 8192}}, RemoteAddr: va, RemoteKey: rkey}); err != nil {
			t.Fatal(err)
		}
		if caps.NoRemoteInvalidate {
			// The data goes through the key; the initiator invalidates
			// it locally once the response came.
			if err := s.QP.PostSend(&rdma.SendWR{ID: 2, Op: rdma.OpSend, Flags: rdma.Signaled}); err != nil {
				t.Fatal(err)
			}
			expect(t, WaitWC(t, s.SendCQ), rdma.OpSend, rdma.StatusSuccess)
			wc := WaitWC(t, c.RecvCQ)
			expect(t, wc, rdma.OpRecv, rdma.StatusSuccess)
			if !bytes.Equal(c.Buf[off:off+8192], s.Buf[:8192]) {
				t.Fatal("data written through the fast-registered key differs")
			}
			if err := fr.Invalidate(); err != nil {
				t.Fatal(err)
			}
			if fr.Valid() {
				t.Fatal("key still valid after Invalidate")
			}
			c.QP.PostRecv(&rdma.RecvWR{ID: wc.ID, SGL: []rdma.SGE{{MR: c.MR, Offset: int(wc.ID) * 64, Length: 64}}})
			continue
		}
		if err := s.QP.PostSend(&rdma.SendWR{ID: 2, Op: rdma.OpSendWithInv, Flags: rdma.Signaled, InvalidateKey: rkey}); err != nil {
			t.Fatal(err)
		}
		expect(t, WaitWC(t, s.SendCQ), rdma.OpSendWithInv, rdma.StatusSuccess)
		wc := WaitWC(t, c.RecvCQ)
		expect(t, wc, rdma.OpRecv, rdma.StatusSuccess)
		if caps.NoInvalidateReport {
			if wc.Flags&rdma.WCWithInv != 0 || wc.InvalidatedKey != 0 {
				t.Fatalf("receive completion %+v: reports an invalidation, the provider declares it does not", wc)
			}
			if !fr.Valid() {
				t.Fatal("key reads as invalid without a reported invalidation")
			}
			// The receiver invalidates it itself, except the last
			// time: the stale write below shows the device did.
			if i < 2 {
				if err := fr.Invalidate(); err != nil {
					t.Fatal(err)
				}
			}
		} else {
			if wc.Flags&rdma.WCWithInv == 0 || wc.InvalidatedKey != rkey {
				t.Fatalf("receive completion %+v: want invalidation of %#x", wc, rkey)
			}
			if fr.Valid() {
				t.Fatal("key still valid after Send with Invalidate")
			}
		}
		if !bytes.Equal(c.Buf[off:off+8192], s.Buf[:8192]) {
			t.Fatal("data written through the fast-registered key differs")
		}
		c.QP.PostRecv(&rdma.RecvWR{ID: wc.ID, SGL: []rdma.SGE{{MR: c.MR, Offset: int(wc.ID) * 64, Length: 64}}})
	}
	if caps.NoRemoteInvalidate {
		// A Send with Invalidate of a mapped key is refused at the
		// receiver, and ends the connection.
		rkey, _, err := fr.Map(c.MR, 0, 8192, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.QP.PostSend(&rdma.SendWR{ID: 4, Op: rdma.OpSendWithInv, InvalidateKey: rkey}); err != nil {
			t.Fatal(err)
		}
		expect(t, WaitWC(t, c.RecvCQ), rdma.OpRecv, rdma.StatusRemoteInvReq)
		waitDone(t, c.QP)
		waitDone(t, s.QP)
		return
	}
	// The stale key is refused: the write terminates the connection.
	if err := s.QP.PostSend(&rdma.SendWR{ID: 3, Op: rdma.OpRDMAWrite, SGL: []rdma.SGE{{MR: s.MR, Length: 16}}, RemoteAddr: lastVA, RemoteKey: lastKey}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, c.QP)
	waitDone(t, s.QP)
}

func testLocalInv(t *testing.T, np NewProvider) {
	c, s := Pair(t, prov(t, np), PairConfig{})
	fr, err := c.PD.AllocFastRegMR(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Close()
	rkey, va, err := fr.Map(c.MR, 0, 4096, rdma.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	publish(c)
	// Readable while valid.
	if err := s.QP.PostSend(&rdma.SendWR{ID: 1, Op: rdma.OpRDMARead, Flags: rdma.Signaled, SGL: []rdma.SGE{{MR: s.MR, Length: 4096}}, RemoteAddr: va, RemoteKey: rkey}); err != nil {
		t.Fatal(err)
	}
	expect(t, WaitWC(t, s.SendCQ), rdma.OpRDMARead, rdma.StatusSuccess)
	if err := c.QP.PostSend(&rdma.SendWR{ID: 2, Op: rdma.OpLocalInv, Flags: rdma.Signaled, InvalidateKey: rkey}); err != nil {
		t.Fatal(err)
	}
	expect(t, WaitWC(t, c.SendCQ), rdma.OpLocalInv, rdma.StatusSuccess)
	if fr.Valid() {
		t.Fatal("key valid after local invalidate")
	}
	if err := s.QP.PostSend(&rdma.SendWR{ID: 3, Op: rdma.OpRDMARead, Flags: rdma.Signaled, SGL: []rdma.SGE{{MR: s.MR, Length: 4096}}, RemoteAddr: va, RemoteKey: rkey}); err != nil {
		t.Fatal(err)
	}
	expect(t, WaitWC(t, s.SendCQ), rdma.OpRDMARead, refusedStatus(s))
}

// refusedStatus is the status of e's RDMA Read that the peer refused.
func refusedStatus(e *End) rdma.Status {
	if rdma.CapsOf(e.Prov).RemoteErrorFlushes {
		return rdma.StatusFlushed
	}
	return rdma.StatusRemoteAccess
}

// readFails posts an RDMA Read that the peer must refuse.
func readFails(t *testing.T, np NewProvider, cfg PairConfig, addr func(s *End) (uint64, uint32), n int) {
	c, s := Pair(t, prov(t, np), cfg)
	va, key := addr(s)
	if err := c.QP.PostSend(&rdma.SendWR{ID: 1, Op: rdma.OpRDMARead, Flags: rdma.Signaled, SGL: []rdma.SGE{{MR: c.MR, Length: n}}, RemoteAddr: va, RemoteKey: key}); err != nil {
		t.Fatal(err)
	}
	expect(t, WaitWC(t, c.SendCQ), rdma.OpRDMARead, refusedStatus(c))
	waitDone(t, c.QP)
	waitDone(t, s.QP)
	if c.QP.Err() == nil || s.QP.Err() == nil {
		t.Fatalf("QP errors %v / %v, want both set", c.QP.Err(), s.QP.Err())
	}
}

func testReadInvalidSTag(t *testing.T, np NewProvider) {
	readFails(t, np, PairConfig{}, func(s *End) (uint64, uint32) { return s.MR.VA(), 0xfffff0 << 8 }, 16)
}

func testReadWrongKey(t *testing.T, np NewProvider) {
	readFails(t, np, PairConfig{}, func(s *End) (uint64, uint32) { return s.MR.VA(), s.MR.RKey() ^ 0x5a }, 16)
}

func testReadOutOfBounds(t *testing.T, np NewProvider) {
	readFails(t, np, PairConfig{BufSize: 8192}, func(s *End) (uint64, uint32) { return s.MR.VA() + 8000, s.MR.RKey() }, 4096)
}

func testReadNoRights(t *testing.T, np NewProvider) {
	cfg := PairConfig{Access: rdma.AccessLocalWrite | rdma.AccessRemoteWrite}
	if !capsOf(t, np).RemoteReadUnchecked {
		readFails(t, np, cfg, func(s *End) (uint64, uint32) { return s.MR.VA(), s.MR.RKey() }, 16)
		return
	}
	// The provider declares it answers such Reads: they must succeed
	// with the data, and the connection stay up.
	c, s := Pair(t, prov(t, np), cfg)
	fill(s.Buf[:16], 31)
	publish(s)
	if err := c.QP.PostSend(&rdma.SendWR{ID: 1, Op: rdma.OpRDMARead, Flags: rdma.Signaled, SGL: []rdma.SGE{{MR: c.MR, Length: 16}}, RemoteAddr: s.MR.VA(), RemoteKey: s.MR.RKey()}); err != nil {
		t.Fatal(err)
	}
	expect(t, WaitWC(t, c.SendCQ), rdma.OpRDMARead, rdma.StatusSuccess)
	if !bytes.Equal(c.Buf[:16], s.Buf[:16]) {
		t.Fatal("RDMA Read without remote-read rights: data differs")
	}
	syncSend(t, c, s)
	if c.QP.State() != rdma.QPConnected || s.QP.State() != rdma.QPConnected {
		t.Fatalf("states %s/%s after the Read, want connected", c.QP.State(), s.QP.State())
	}
}

func testWriteNoRights(t *testing.T, np NewProvider) {
	c, s := Pair(t, prov(t, np), PairConfig{Access: rdma.AccessLocalWrite | rdma.AccessRemoteRead})
	s.Buf[0] = 0xEE
	c.Buf[0] = 0x11
	publish(s)
	if err := c.QP.PostSend(&rdma.SendWR{ID: 1, Op: rdma.OpRDMAWrite, SGL: []rdma.SGE{{MR: c.MR, Length: 4096}}, RemoteAddr: s.MR.VA(), RemoteKey: s.MR.RKey()}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, s.QP)
	waitDone(t, c.QP)
	if s.Buf[0] != 0xEE {
		t.Fatal("memory without remote-write access was written")
	}
}

func testRecvTooSmall(t *testing.T, np NewProvider) {
	c, s := Pair(t, prov(t, np), PairConfig{PostRecvs: 2, RecvSize: 100})
	if err := c.QP.PostSend(&rdma.SendWR{ID: 1, Op: rdma.OpSend, SGL: []rdma.SGE{{MR: c.MR, Length: 101}}}); err != nil {
		t.Fatal(err)
	}
	want := rdma.StatusLocalLength
	if st := rdma.CapsOf(s.Prov).RecvOverrunStatus; st != rdma.StatusSuccess {
		want = st
	}
	wc := WaitWC(t, s.RecvCQ)
	expect(t, wc, rdma.OpRecv, want)
	expect(t, WaitWC(t, s.RecvCQ), rdma.OpRecv, rdma.StatusFlushed)
	waitDone(t, c.QP)
}

func testNoRecv(t *testing.T, np NewProvider) {
	c, s := Pair(t, prov(t, np), PairConfig{})
	if err := c.QP.PostSend(&rdma.SendWR{ID: 1, Op: rdma.OpSend, SGL: []rdma.SGE{{MR: c.MR, Length: 10}}}); err != nil {
		t.Fatal(err)
	}
	waitDone(t, s.QP)
	waitDone(t, c.QP)
}

func testDisconnectFlush(t *testing.T, np NewProvider) {
	c, s := Pair(t, prov(t, np), PairConfig{PostRecvs: 5, RecvSize: 64})
	// A read the server will never answer in time is still outstanding
	// when the client disconnects? Reads are answered at once, so use
	// posted receives, which are outstanding until a Send arrives.
	if err := c.QP.Disconnect(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		expect(t, WaitWC(t, c.RecvCQ), rdma.OpRecv, rdma.StatusFlushed)
		expect(t, WaitWC(t, s.RecvCQ), rdma.OpRecv, rdma.StatusFlushed)
	}
	waitDone(t, s.QP)
	if err := c.QP.PostSend(&rdma.SendWR{Op: rdma.OpSend}); err == nil {
		t.Fatal("post send on a disconnected QP succeeded")
	}
}

func testManyQPs(t *testing.T, np NewProvider) {
	const (
		n      = 16
		rounds = 10
		chunk  = 128 << 10
	)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		c, s := Pair(t, prov(t, np), PairConfig{BufSize: 2 * rounds * chunk})
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for k := 0; k < rounds; k++ {
				src, back := 2*k*chunk, (2*k+1)*chunk
				fill(c.Buf[src:src+chunk], uint64(i*100+k))
				remote := s.MR.VA() + uint64(k*chunk)
				if err := c.QP.PostSend(&rdma.SendWR{Op: rdma.OpRDMAWrite, SGL: []rdma.SGE{{MR: c.MR, Offset: src, Length: chunk}}, RemoteAddr: remote, RemoteKey: s.MR.RKey()}); err != nil {
					errs <- err
					return
				}
				if err := c.QP.PostSend(&rdma.SendWR{ID: uint64(k), Op: rdma.OpRDMARead, Flags: rdma.Signaled, SGL: []rdma.SGE{{MR: c.MR, Offset: back, Length: chunk}}, RemoteAddr: remote, RemoteKey: s.MR.RKey()}); err != nil {
					errs <- err
					return
				}
				var wc [1]rdma.WC
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				for c.SendCQ.Poll(wc[:]) == 0 {
					if err := c.SendCQ.Wait(ctx); err != nil {
						cancel()
						errs <- err
						return
					}
				}
				cancel()
				if wc[0].Status != rdma.StatusSuccess || !bytes.Equal(c.Buf[src:src+chunk], c.Buf[back:back+chunk]) {
					errs <- fmt.Errorf("QP %d round %d: %s, data equal %v", i, k, wc[0].Status, bytes.Equal(c.Buf[src:src+chunk], c.Buf[back:back+chunk]))
					return
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func testQueueFull(t *testing.T, np NewProvider) {
	c, _ := Pair(t, prov(t, np), PairConfig{QP: rdma.QPConfig{MaxRecvWR: 2}})
	for i := 0; i < 2; i++ {
		if err := c.QP.PostRecv(&rdma.RecvWR{ID: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.QP.PostRecv(&rdma.RecvWR{ID: 3}); !errors.Is(err, rdma.ErrQueueFull) {
		t.Fatalf("third receive on a 2-deep queue: %v, want ErrQueueFull", err)
	}
	if err := c.QP.PostSend(&rdma.SendWR{Op: rdma.OpSend, SGL: make([]rdma.SGE, 100)}); !errors.Is(err, rdma.ErrTooManySGE) {
		t.Fatalf("100 SGEs: %v, want ErrTooManySGE", err)
	}
}

// testUnsignaledRetire posts three queues' worth of unsignaled Sends and
// never polls the send CQ: their slots must still come free (a full queue
// may answer ErrQueueFull while the Sends are in flight, not for ever).
func testUnsignaledRetire(t *testing.T, np NewProvider) {
	const depth, n = 8, 24
	c, s := Pair(t, prov(t, np), PairConfig{PostRecvs: n, RecvSize: 64, QP: rdma.QPConfig{MaxSendWR: depth}})
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < n; i++ {
		for {
			err := c.QP.PostSend(&rdma.SendWR{ID: uint64(i), Op: rdma.OpSend, SGL: []rdma.SGE{{MR: c.MR, Length: 16}}})
			if err == nil {
				break
			}
			if !errors.Is(err, rdma.ErrQueueFull) || time.Now().After(deadline) {
				t.Fatalf("unsignaled Send %d on a %d-deep queue whose CQ is never polled: %v", i, depth, err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for i := 0; i < n; i++ {
		expect(t, WaitWC(t, s.RecvCQ), rdma.OpRecv, rdma.StatusSuccess)
	}
}

// testWriteSourceReuse is the contract the target queues rely on: once an
// RDMA Write and the signaled Send after it have completed (and the Write's
// own completion, when it is signaled), the Write's source may be
// overwritten (the next request's data) without changing what the peer
// receives, with several such pairs in flight. Linux siw breaks it for
// unsignaled Writes of a page or more by itself (it sends them zero-copy
// and completes them while TCP holds the pages): the verbs provider signals
// those for it.
func testWriteSourceReuse(t *testing.T, np NewProvider) {
	for _, v := range []struct {
		name  string
		flags rdma.WRFlags
	}{{"Signaled", rdma.Signaled}, {"Unsignaled", 0}} {
		t.Run(v.name, func(t *testing.T) { writeSourceReuse(t, np, v.flags) })
	}
}

func writeSourceReuse(t *testing.T, np NewProvider, flags rdma.WRFlags) {
	const (
		size   = 64 << 10
		window = 4 // source regions in rotation
		rounds = 64
	)
	c, s := Pair(t, prov(t, np), PairConfig{BufSize: rounds * size})
	for i := 0; i < rounds; i++ {
		if err := s.QP.PostRecv(&rdma.RecvWR{ID: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// pending[slot] counts the slot's completions still to come (its
	// Send's, and its Write's when signaled).
	var pending [window]int
	reap := func() {
		wc := WaitWC(t, c.SendCQ)
		if wc.Status != rdma.StatusSuccess {
			t.Fatalf("completion %+v", wc)
		}
		pending[int(wc.ID)%window]--
	}
	for i := 0; i < rounds; i++ {
		slot := i % window
		for pending[slot] > 0 {
			reap()
		}
		src := c.Buf[slot*size : (slot+1)*size]
		fill(src, uint64(i)+1)
		if err := c.QP.PostSend(&rdma.SendWR{ID: uint64(slot), Op: rdma.OpRDMAWrite, Flags: flags,
			SGL: []rdma.SGE{{MR: c.MR, Offset: slot * size, Length: size}}, RemoteAddr: s.MR.VA() + uint64(i*size), RemoteKey: s.MR.RKey()}); err != nil {
			t.Fatal(err)
		}
		if err := c.QP.PostSend(&rdma.SendWR{ID: uint64(slot), Op: rdma.OpSend, Flags: rdma.Signaled}); err != nil {
			t.Fatal(err)
		}
		pending[slot] = 1
		if flags&rdma.Signaled != 0 {
			pending[slot] = 2
		}
	}
	for i := 0; i < rounds; i++ {
		expect(t, WaitWC(t, s.RecvCQ), rdma.OpRecv, rdma.StatusSuccess)
	}
	want := make([]byte, size)
	for i := 0; i < rounds; i++ {
		fill(want, uint64(i)+1)
		if !bytes.Equal(s.Buf[i*size:(i+1)*size], want) {
			t.Fatalf("Write %d (from source region %d, reused after its completions) landed with other data", i, i%window)
		}
	}
}

// testChainedPosts posts chains of WRs with rdma.More (RDMA Writes, some
// signaled, an RDMA Read, ended by a signaled Send), shorter and longer than
// a provider's doorbell batch: every WR is carried out, the signaled ones
// complete in posting order, the data lands.
func testChainedPosts(t *testing.T, np NewProvider) {
	const size = 4096
	c, s := Pair(t, prov(t, np), PairConfig{BufSize: 4 << 20})
	half := len(c.Buf) / 2 // reads land in the client's upper half
	fill(s.Buf[half:], 77)
	dst := 0
	id := uint64(0)
	for round, n := range []int{1, 2, 15, 16, 17, 40} {
		if err := s.QP.PostRecv(&rdma.RecvWR{ID: uint64(round)}); err != nil {
			t.Fatal(err)
		}
		var want []uint64
		first := dst
		for i := 0; i < n; i++ {
			id++
			wr := rdma.SendWR{ID: id, Op: rdma.OpRDMAWrite, Flags: rdma.More,
				SGL: []rdma.SGE{{MR: c.MR, Offset: dst, Length: size}}, RemoteAddr: s.MR.VA() + uint64(dst), RemoteKey: s.MR.RKey()}
			fill(c.Buf[dst:dst+size], id)
			if i%3 == 0 {
				wr.Flags |= rdma.Signaled
				want = append(want, id)
			}
			if i == n/2 {
				wr.Op = rdma.OpRDMARead
				wr.RemoteAddr = s.MR.VA() + uint64(half+dst)
				wr.SGL[0].Offset = half + dst
			}
			if err := c.QP.PostSend(&wr); err != nil {
				t.Fatalf("chain of %d, WR %d: %v", n, i, err)
			}
			dst += size
		}
		id++
		if err := c.QP.PostSend(&rdma.SendWR{ID: id, Op: rdma.OpSend, Flags: rdma.Signaled}); err != nil {
			t.Fatalf("chain of %d, the Send ending it: %v", n, err)
		}
		want = append(want, id)
		for _, w := range want {
			wc := WaitWC(t, c.SendCQ)
			if wc.Status != rdma.StatusSuccess || wc.ID != w {
				t.Fatalf("chain of %d: completion %+v, want WR %d succeeded (posting order)", n, wc, w)
			}
		}
		expect(t, WaitWC(t, s.RecvCQ), rdma.OpRecv, rdma.StatusSuccess)
		for i, off := 0, first; i < n; i, off = i+1, off+size {
			if i == n/2 {
				if !bytes.Equal(c.Buf[half+off:half+off+size], s.Buf[half+off:half+off+size]) {
					t.Fatalf("chain of %d: the RDMA Read at WR %d brought other data", n, i)
				}
				continue
			}
			if !bytes.Equal(s.Buf[off:off+size], c.Buf[off:off+size]) {
				t.Fatalf("chain of %d: the RDMA Write at WR %d landed with other data", n, i)
			}
		}
	}
}

// testUnendedChain: WRs posted with rdma.More and never followed by one
// without are not lost when the QP disconnects: each completes (flushed, or
// successfully where the provider had started it).
func testUnendedChain(t *testing.T, np NewProvider) {
	c, s := Pair(t, prov(t, np), PairConfig{})
	for i := 0; i < 3; i++ {
		if err := c.QP.PostSend(&rdma.SendWR{ID: uint64(i), Op: rdma.OpRDMAWrite, Flags: rdma.Signaled | rdma.More,
			SGL: []rdma.SGE{{MR: c.MR, Offset: i * 4096, Length: 4096}}, RemoteAddr: s.MR.VA() + uint64(i*4096), RemoteKey: s.MR.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.QP.Disconnect(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		wc := WaitWC(t, c.SendCQ)
		if wc.ID != uint64(i) || (wc.Status != rdma.StatusSuccess && wc.Status != rdma.StatusFlushed) {
			t.Fatalf("held WR %d: completion %+v, want it succeeded or flushed, in order", i, wc)
		}
	}
}

// implicitMR returns the implicit MR of e's PD, skipping the test when the
// provider has none.
func implicitMR(t *testing.T, e *End) rdma.MR {
	t.Helper()
	ip, ok := e.PD.(rdma.ImplicitPD)
	if !ok {
		t.Skip("provider has no implicit MR")
	}
	m, err := ip.RegisterImplicit()
	if err != nil {
		t.Fatalf("register implicit MR: %v", err)
	}
	t.Cleanup(func() { m.Deregister() })
	return m
}

// testImplicitGather sends and RDMA-Writes from memory that was never
// registered, in several pieces, and checks the implicit MR is refused
// where the adapter would write.
func testImplicitGather(t *testing.T, np NewProvider) {
	c, s := Pair(t, prov(t, np), PairConfig{BufSize: 1 << 20, PostRecvs: 1, RecvSize: 256 << 10})
	im := implicitMR(t, c)
	a, b := make([]byte, 70000), make([]byte, 100001)
	fill(a, 21)
	fill(b, 22)
	sgl := []rdma.SGE{{MR: im, Buf: a}, {MR: c.MR, Offset: 0, Length: 3}, {MR: im, Buf: b}}
	fill(c.Buf[:3], 23)
	want := append(append(append([]byte{}, a...), c.Buf[:3]...), b...)
	dst := 512 << 10
	if err := c.QP.PostSend(&rdma.SendWR{ID: 1, Op: rdma.OpRDMAWrite, Flags: rdma.Signaled, SGL: sgl,
		RemoteAddr: s.MR.VA() + uint64(dst), RemoteKey: s.MR.RKey()}); err != nil {
		t.Fatalf("RDMA Write from the implicit MR: %v", err)
	}
	expect(t, WaitWC(t, c.SendCQ), rdma.OpRDMAWrite, rdma.StatusSuccess)
	if err := c.QP.PostSend(&rdma.SendWR{ID: 2, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: sgl}); err != nil {
		t.Fatalf("Send from the implicit MR: %v", err)
	}
	expect(t, WaitWC(t, c.SendCQ), rdma.OpSend, rdma.StatusSuccess)
	wc := WaitWC(t, s.RecvCQ)
	expect(t, wc, rdma.OpRecv, rdma.StatusSuccess)
	if wc.ByteLen != len(want) || !bytes.Equal(s.Buf[:len(want)], want) {
		t.Fatalf("Send from the implicit MR: got %d bytes, want %d (or data differs)", wc.ByteLen, len(want))
	}
	if !bytes.Equal(s.Buf[dst:dst+len(want)], want) {
		t.Fatal("RDMA Write from the implicit MR: data differs")
	}
	// Never a receive buffer or an RDMA Read sink.
	if err := c.QP.PostRecv(&rdma.RecvWR{ID: 3, SGL: []rdma.SGE{{MR: im, Buf: a}}}); err == nil {
		t.Fatal("receive into the implicit MR accepted")
	}
	if err := c.QP.PostSend(&rdma.SendWR{ID: 4, Op: rdma.OpRDMARead, SGL: []rdma.SGE{{MR: im, Buf: a}},
		RemoteAddr: s.MR.VA(), RemoteKey: s.MR.RKey()}); err == nil {
		t.Fatal("RDMA Read into the implicit MR accepted")
	}
	// Buf with a registered MR is a caller error.
	if err := c.QP.PostSend(&rdma.SendWR{ID: 5, Op: rdma.OpSend, SGL: []rdma.SGE{{MR: c.MR, Buf: a}}}); err == nil {
		t.Fatal("Buf with a registered MR accepted")
	}
}

// testImplicitRemote checks a peer cannot use the implicit MR's key.
func testImplicitRemote(t *testing.T, np NewProvider) {
	c, s := Pair(t, prov(t, np), PairConfig{})
	im := implicitMR(t, s)
	va := uint64(0)
	if len(s.Buf) > 0 {
		va = s.MR.VA()
	}
	if err := c.QP.PostSend(&rdma.SendWR{ID: 1, Op: rdma.OpRDMARead, Flags: rdma.Signaled, SGL: []rdma.SGE{{MR: c.MR, Length: 16}},
		RemoteAddr: va, RemoteKey: im.RKey()}); err != nil {
		t.Fatal(err)
	}
	expect(t, WaitWC(t, c.SendCQ), rdma.OpRDMARead, refusedStatus(c))
	waitDone(t, c.QP)
	waitDone(t, s.QP)
}

// implicitWriteMR returns the implicit write MR (rdma.ImplicitWritePD) of
// e's PD, skipping the test when the provider has none.
func implicitWriteMR(t *testing.T, e *End) rdma.MR {
	t.Helper()
	ip, ok := e.PD.(rdma.ImplicitWritePD)
	if !ok {
		t.Skip("provider has no implicit write MR")
	}
	m, err := ip.RegisterImplicitWrite()
	if err != nil {
		t.Fatalf("register implicit write MR: %v", err)
	}
	t.Cleanup(func() { m.Deregister() })
	if m.Access()&rdma.AccessLocalWrite == 0 || m.Access()&(rdma.AccessRemoteRead|rdma.AccessRemoteWrite) != 0 {
		t.Fatalf("implicit write MR access %s, want local-write only", m.Access())
	}
	return m
}

// testImplicitReadSink RDMA-Reads into memory that was never registered
// through the implicit write MR: one Read scattered over several pieces
// (unregistered memory around a registered range) spanning several
// FPDUs, then several Reads in flight at once at different remote
// offsets, as a target fetching a write into a RAM disk's chunks does.
// The MR still gathers, and is never a receive buffer.
func testImplicitReadSink(t *testing.T, np NewProvider) {
	c, s := Pair(t, prov(t, np), PairConfig{BufSize: 1 << 20, PostRecvs: 1, RecvSize: 256 << 10})
	iw := implicitWriteMR(t, c)
	fill(s.Buf, 41)
	publish(s)
	a, b := make([]byte, 70000), make([]byte, 100001)
	sgl := []rdma.SGE{{MR: iw, Buf: a}, {MR: c.MR, Offset: 8, Length: 3}, {MR: iw, Buf: b}}
	total := len(a) + 3 + len(b)
	src := 4096 + 5
	if err := c.QP.PostSend(&rdma.SendWR{ID: 1, Op: rdma.OpRDMARead, Flags: rdma.Signaled, SGL: sgl,
		RemoteAddr: s.MR.VA() + uint64(src), RemoteKey: s.MR.RKey()}); err != nil {
		t.Fatalf("RDMA Read into the implicit write MR: %v", err)
	}
	expect(t, WaitWC(t, c.SendCQ), rdma.OpRDMARead, rdma.StatusSuccess)
	got := append(append(append([]byte{}, a...), c.Buf[8:11]...), b...)
	if !bytes.Equal(got, s.Buf[src:src+total]) {
		t.Fatal("RDMA Read into the implicit write MR: data differs")
	}
	// Several Reads in flight, each into its own unregistered pieces.
	// Past the server's receive buffer, which the Send below fills (the
	// race detector does not see the order through the network).
	const reads, piece, readsAt = 6, 40000, 300 << 10
	dst := make([][]byte, 2*reads)
	for i := range dst {
		dst[i] = make([]byte, piece)
	}
	for i := 0; i < reads; i++ {
		if err := c.QP.PostSend(&rdma.SendWR{ID: uint64(10 + i), Op: rdma.OpRDMARead, Flags: rdma.Signaled,
			SGL:        []rdma.SGE{{MR: iw, Buf: dst[2*i]}, {MR: iw, Buf: dst[2*i+1]}},
			RemoteAddr: s.MR.VA() + uint64(readsAt+i*2*piece+i), RemoteKey: s.MR.RKey()}); err != nil {
			t.Fatalf("Read %d: %v", i, err)
		}
	}
	for i := 0; i < reads; i++ {
		wc := WaitWC(t, c.SendCQ)
		expect(t, wc, rdma.OpRDMARead, rdma.StatusSuccess)
		if wc.ID != uint64(10+i) {
			t.Fatalf("Read completion %d, want %d (in order)", wc.ID, 10+i)
		}
		off := readsAt + i*2*piece + i
		if !bytes.Equal(dst[2*i], s.Buf[off:off+piece]) || !bytes.Equal(dst[2*i+1], s.Buf[off+piece:off+2*piece]) {
			t.Fatalf("Read %d: data differs", i)
		}
	}
	// It gathers too.
	if err := c.QP.PostSend(&rdma.SendWR{ID: 20, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: []rdma.SGE{{MR: iw, Buf: dst[0][:1000]}}}); err != nil {
		t.Fatalf("Send from the implicit write MR: %v", err)
	}
	expect(t, WaitWC(t, c.SendCQ), rdma.OpSend, rdma.StatusSuccess)
	if wc := WaitWC(t, s.RecvCQ); wc.Status != rdma.StatusSuccess || wc.ByteLen != 1000 || !bytes.Equal(s.Buf[:1000], dst[0][:1000]) {
		t.Fatalf("Send from the implicit write MR: %s, %d bytes", wc.Status, wc.ByteLen)
	}
	// Never a receive buffer.
	if err := c.QP.PostRecv(&rdma.RecvWR{ID: 21, SGL: []rdma.SGE{{MR: iw, Buf: a}}}); err == nil {
		t.Fatal("receive into the implicit write MR accepted")
	}
}

// testImplicitWriteRemote checks a peer can neither RDMA-Write nor
// RDMA-Read through the implicit write MR's key, even after an RDMA Read
// Request told it that key as its sink.
func testImplicitWriteRemote(t *testing.T, np NewProvider) {
	t.Run("Write", func(t *testing.T) {
		c, s := Pair(t, prov(t, np), PairConfig{})
		iw := implicitWriteMR(t, c)
		victim := make([]byte, 4096)
		if err := c.QP.PostSend(&rdma.SendWR{ID: 1, Op: rdma.OpRDMARead, Flags: rdma.Signaled, SGL: []rdma.SGE{{MR: iw, Buf: victim}},
			RemoteAddr: s.MR.VA(), RemoteKey: s.MR.RKey()}); err != nil {
			t.Fatal(err)
		}
		expect(t, WaitWC(t, c.SendCQ), rdma.OpRDMARead, rdma.StatusSuccess)
		clear(victim)
		fill(s.Buf[:4096], 51)
		va := uint64(uintptr(unsafe.Pointer(&victim[0])))
		if err := s.QP.PostSend(&rdma.SendWR{ID: 2, Op: rdma.OpRDMAWrite, Flags: rdma.Signaled, SGL: []rdma.SGE{{MR: s.MR, Length: 4096}},
			RemoteAddr: va, RemoteKey: iw.RKey()}); err != nil {
			t.Fatal(err)
		}
		waitDone(t, c.QP)
		waitDone(t, s.QP)
		if !bytes.Equal(victim, make([]byte, 4096)) {
			t.Fatal("a peer's RDMA Write through the implicit write MR's key changed memory")
		}
	})
	t.Run("Read", func(t *testing.T) {
		c, s := Pair(t, prov(t, np), PairConfig{})
		iw := implicitWriteMR(t, s)
		secret := make([]byte, 16)
		fill(secret, 52)
		if err := c.QP.PostSend(&rdma.SendWR{ID: 1, Op: rdma.OpRDMARead, Flags: rdma.Signaled, SGL: []rdma.SGE{{MR: c.MR, Length: 16}},
			RemoteAddr: uint64(uintptr(unsafe.Pointer(&secret[0]))), RemoteKey: iw.RKey()}); err != nil {
			t.Fatal(err)
		}
		expect(t, WaitWC(t, c.SendCQ), rdma.OpRDMARead, refusedStatus(c))
		waitDone(t, c.QP)
		waitDone(t, s.QP)
		if bytes.Equal(c.Buf[:16], secret) {
			t.Fatal("a peer read memory through the implicit write MR's key")
		}
		runtime.KeepAlive(secret)
	})
}
