package target

import (
	"context"
	"encoding/binary"
	"errors"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/srp"
	"github.com/rdisk/rdisk/srp/initiator"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/rdma/iwarp"
	"github.com/rdisk/rdisk/scsi"
)

func testLogger() *slog.Logger {
	if os.Getenv("RDISK_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// Test target port identifiers.
const (
	testIDExt   = 0x0011223344556677
	testIOCGUID = 0x8899aabbccddeeff
)

var testTargetID = srp.MakePortID(testIDExt, testIOCGUID)

// loopTarget is an SRP target on 127.0.0.1 over the pure-Go iWARP provider.
type loopTarget struct {
	t    *Target
	port *Port
	addr string
	disk backstore.Disk
}

// startTarget starts a target with one port (testIDExt/testIOCGUID,
// allowing any initiator unless pc says otherwise) and, when disk is not
// nil, LUN 0 on it.
func startTarget(t testing.TB, cfg Config, pc PortConfig, disk backstore.Disk) *loopTarget {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	tg, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	if pc.IDExt == 0 && pc.IOCGUID == 0 {
		pc.IDExt, pc.IOCGUID = testIDExt, testIOCGUID
	}
	if len(pc.AllowedInitiators) == 0 {
		pc.AllowAnyInitiator = true
	}
	port, err := tg.AddPort(pc)
	if err != nil {
		t.Fatal(err)
	}
	if disk != nil {
		lu, err := scsi.NewLU(disk, scsi.LUConfig{MaxTransferBlocks: uint32(tg.Config().MaxTransfer / disk.BlockSize())})
		if err != nil {
			t.Fatal(err)
		}
		if err := port.Map(0, lu); err != nil {
			t.Fatal(err)
		}
	}
	if g, ok := disk.(interface{ open() }); ok {
		t.Cleanup(g.open) // runs before the target closes: nothing stays held
	}
	p, err := iwarp.New(iwarp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := tg.Listen(context.Background(), p, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return &loopTarget{t: tg, port: port, addr: addr.String(), disk: disk}
}

func memDisk(t testing.TB, size int64) *backstore.Mem {
	t.Helper()
	d, err := backstore.NewMem(size, 512)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// login logs in to lt's port with cfg.
func login(t testing.TB, lt *loopTarget, cfg initiator.Config) *initiator.Session {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	p, err := iwarp.New(iwarp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := initiator.Login(testCtx(t), p, lt.addr, testTargetID, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openDev logs in and opens LUN 0 as a blockdev.Device.
func openDev(t testing.TB, lt *loopTarget, cfg initiator.Config) *initiator.Device {
	t.Helper()
	s := login(t, lt, cfg)
	d, err := s.Device(testCtx(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// ioAt runs one read or write of len(data) bytes at off through a fresh
// buffer.
func ioAt(t testing.TB, d blockdev.Device, op blockdev.Op, data []byte, off int64, queue int) error {
	t.Helper()
	buf, err := d.AllocBuffer(len(data))
	if err != nil {
		t.Fatal(err)
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

func newProvider(t testing.TB) *iwarp.Provider {
	t.Helper()
	p, err := iwarp.New(iwarp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// randBytes returns n pseudo-random bytes from seed.
func randBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b
}

// testDisk is a RAM disk whose data accesses are serialized (backstore.Mem
// copies without locks, so a write and a later read ordered only through the
// network look racy to the race detector) and that can hold I/O at a gate.
type testDisk struct {
	*backstore.Mem
	mu       sync.RWMutex
	gmu      sync.Mutex
	gate     chan struct{} // nil: open
	blocked  atomic.Int32
	inflight atomic.Int32
	peak     atomic.Int32
}

func newTestDisk(t testing.TB, size int64) *testDisk { return &testDisk{Mem: memDisk(t, size)} }

// Traits: the gate can hold I/O, so the target must run it on workers.
func (d *testDisk) Traits() backstore.Traits {
	return backstore.Traits{Waits: backstore.WaitsAlways, ZeroesAfterDiscard: true}
}

// hold makes later reads and writes wait until open is called.
func (d *testDisk) hold() {
	d.gmu.Lock()
	defer d.gmu.Unlock()
	if d.gate == nil {
		d.gate = make(chan struct{})
	}
}

// open releases the held I/O.
func (d *testDisk) open() {
	d.gmu.Lock()
	defer d.gmu.Unlock()
	if d.gate != nil {
		close(d.gate)
		d.gate = nil
	}
}

// waitBlocked waits until n calls are held at the gate.
func (d *testDisk) waitBlocked(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for d.blocked.Load() < int32(n) {
		if time.Now().After(deadline) {
			t.Fatalf("%d I/Os held at the disk, want %d", d.blocked.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func (d *testDisk) enter() {
	if n := d.inflight.Add(1); n > d.peak.Load() {
		d.peak.Store(n)
	}
	d.gmu.Lock()
	g := d.gate
	d.gmu.Unlock()
	if g != nil {
		d.blocked.Add(1)
		<-g
		d.blocked.Add(-1)
	}
}

func (d *testDisk) leave() { d.inflight.Add(-1) }

func (d *testDisk) ReadAt(p []byte, off int64) error {
	d.enter()
	defer d.leave()
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.Mem.ReadAt(p, off)
}

func (d *testDisk) WriteAt(p []byte, off int64, f backstore.WriteFlags) error {
	d.enter()
	defer d.leave()
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.Mem.WriteAt(p, off, f)
}

func (d *testDisk) Discard(off, length int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.Mem.Discard(off, length)
}

func (d *testDisk) WriteZeroes(off, length int64, f backstore.WriteFlags) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.Mem.WriteZeroes(off, length, f)
}

// rawConn is a bare RDMA channel for IU-level tests: it logs in with
// whatever private data a test builds and sends and receives raw IUs.
type rawConn struct {
	t     testing.TB
	pd    rdma.PD
	cq    rdma.CQ
	qp    rdma.QP
	mr    rdma.MR
	buf   []byte // 8 receive buffers of 512 bytes, then 8 send buffers of 8 KiB
	turn  int
	reply []byte
}

const rawRecvs, rawRecvLen, rawSendLen = 8, 512, 8 << 10

// rawLogin connects with private data pd. It returns the connection and
// the reply private data, or the connect error (a *rdma.RejectError for a
// login reject).
func rawLogin(t testing.TB, addr string, pd []byte) (*rawConn, error) {
	t.Helper()
	p := newProvider(t)
	c := &rawConn{t: t, buf: backstore.AlignedBuffer(rawRecvs*rawRecvLen+8*rawSendLen, 4096)}
	var err error
	if c.pd, err = p.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if c.cq, err = p.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	if c.qp, err = c.pd.CreateQP(rdma.QPConfig{SendCQ: c.cq, RecvCQ: c.cq, MaxSendWR: 16, MaxRecvWR: rawRecvs}); err != nil {
		t.Fatal(err)
	}
	if c.mr, err = c.pd.RegisterMemory(c.buf, rdma.AccessLocalWrite|rdma.AccessRemoteRead|rdma.AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	for i := range rawRecvs {
		c.postRecv(i)
	}
	c.reply, err = c.qp.Connect(testCtx(t), addr, rdma.ConnParam{PrivateData: pd, ResponderResources: 8})
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (c *rawConn) close() {
	c.qp.Close()
	c.mr.Deregister()
	c.cq.Close()
	c.pd.Close()
}

func (c *rawConn) postRecv(i int) {
	wr := rdma.RecvWR{ID: uint64(i), SGL: []rdma.SGE{{MR: c.mr, Offset: i * rawRecvLen, Length: rawRecvLen}}}
	if err := c.qp.PostRecv(&wr); err != nil {
		c.t.Fatal(err)
	}
}

// send sends an IU.
func (c *rawConn) send(iu []byte) {
	c.t.Helper()
	off := rawRecvs*rawRecvLen + c.turn*rawSendLen
	c.turn = (c.turn + 1) % 8
	copy(c.buf[off:], iu)
	wr := rdma.SendWR{ID: 1 << 40, Op: rdma.OpSend, SGL: []rdma.SGE{{MR: c.mr, Offset: off, Length: len(iu)}}}
	if err := c.qp.PostSend(&wr); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// recv returns the next received IU (a copy), or nil when the connection
// ended or nothing came within d.
func (c *rawConn) recv(d time.Duration) []byte {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	wcs := make([]rdma.WC, 1)
	for {
		if c.cq.Poll(wcs) == 1 {
			wc := wcs[0]
			if wc.Op != rdma.OpRecv {
				if wc.Status != rdma.StatusSuccess {
					return nil
				}
				continue
			}
			if wc.Status != rdma.StatusSuccess {
				return nil
			}
			i := int(wc.ID)
			iu := append([]byte(nil), c.buf[i*rawRecvLen:i*rawRecvLen+wc.ByteLen]...)
			wr := rdma.RecvWR{ID: uint64(i), SGL: []rdma.SGE{{MR: c.mr, Offset: i * rawRecvLen, Length: rawRecvLen}}}
			c.qp.PostRecv(&wr) // fails once the target disconnected: fine
			return iu
		}
		if err := c.cq.Wait(ctx); err != nil {
			return nil
		}
	}
}

// rawLoginFields is a login request for the test port from initiator ipid.
func rawLoginFields(ipid srp.PortID) srp.LoginReqFields {
	return srp.LoginReqFields{Tag: 0x1234, ReqITIULen: 512, ReqBufFmt: srp.BufFmtDirect | srp.BufFmtIndirect, InitiatorPortID: ipid, TargetPortID: testTargetID}
}

func loginPD(f srp.LoginReqFields) []byte {
	b := make([]byte, srp.LoginReqRDMASize)
	srp.LoginReqRDMA(b).Encode(&f)
	return b
}

// clearUA clears the unit attentions of a new nexus on LUN 0.
func clearUA(t testing.TB, s *initiator.Session) {
	t.Helper()
	var err error
	for range 5 {
		err = s.Exec(testCtx(t), 0, &initiator.Command{CDB: make([]byte, 6)})
		var se *initiator.SCSIError
		if !errors.As(err, &se) || se.Parsed.Key != scsi.KeyUnitAttention {
			break
		}
	}
	if err != nil {
		t.Fatalf("TEST UNIT READY: %v", err)
	}
}

func uintptrOf(p *byte) uintptr { return uintptr(unsafe.Pointer(p)) }
