package target

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/iwarp"
)

const (
	testNQN  = "nqn.2026-11.io.rdisk:test"
	hostNQN  = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"
	hostNQN2 = "nqn.2014-08.org.nvmexpress:uuid:99999999-2222-3333-4444-555555555555"
)

// testTarget starts a target with one RAM namespace of size bytes on a
// loopback port.
func testTarget(t testing.TB, size int64, hosts ...string) (*Target, *Subsystem, string) {
	t.Helper()
	disk, err := backstore.NewMem(size, 512)
	if err != nil {
		t.Fatal(err)
	}
	return diskTarget(t, disk, hosts...)
}

// diskTarget starts a target exporting disk as namespace 1 of testNQN on
// a loopback port, for hosts (any host when none).
func diskTarget(t testing.TB, disk backstore.Disk, hosts ...string) (*Target, *Subsystem, string) {
	t.Helper()
	p, err := iwarp.New(iwarp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("RDISK_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	tg, err := New(Config{Provider: p, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	sub, err := tg.AddSubsystem(SubsystemConfig{NQN: testNQN, AllowAnyHost: len(hosts) == 0, AllowedHosts: hosts})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.AddNamespace(NamespaceConfig{NSID: 1, Disk: disk}); err != nil {
		t.Fatal(err)
	}
	port, err := tg.AddPort(PortConfig{ID: 1, Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	port.LinkSubsystem(sub)
	return tg, sub, port.Addr().String()
}

// tq is a minimal NVMe/RDMA host queue for driving the target in tests.
type tq struct {
	t    testing.TB
	p    rdma.Provider
	pd   rdma.PD
	cq   rdma.CQ
	qp   rdma.QP
	buf  []byte // [0,4096): SQE staging; [4096,+rsp): CQEs; data after
	mr   rdma.MR
	cid  uint16
	mu   sync.Mutex
	qid  uint16
	rsps int
}

const (
	tqRspOff  = 4096
	tqDataOff = 8192
	tqDataLen = 1 << 20
)

func dialQueue(t testing.TB, addr string, qid, hsqsize, hrqsize uint16) (*tq, error) {
	p, err := iwarp.New(iwarp.Config{})
	if err != nil {
		return nil, err
	}
	q := &tq{t: t, p: p, qid: qid, rsps: int(hrqsize)}
	q.pd, _ = p.AllocPD()
	q.cq, _ = p.CreateCQ(1024)
	q.qp, err = q.pd.CreateQP(rdma.QPConfig{SendCQ: q.cq, RecvCQ: q.cq, MaxRecvWR: q.rsps})
	if err != nil {
		return nil, err
	}
	q.buf = make([]byte, tqDataOff+tqDataLen)
	q.mr, _ = q.pd.RegisterMemory(q.buf, rdma.AccessLocalWrite|rdma.AccessRemoteRead|rdma.AccessRemoteWrite)
	for i := 0; i < q.rsps; i++ {
		q.postRecv(i)
	}
	pd := make([]byte, nvmeof.CMRequestSize)
	nvmeof.CMRequest(pd).Encode(&nvmeof.CMRequestFields{QID: qid, HRQSize: hrqsize, HSQSize: hsqsize})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep, err := q.qp.Connect(ctx, addr, rdma.ConnParam{PrivateData: pd})
	if err != nil {
		q.close()
		return nil, err
	}
	if a, err := nvmeof.ParseCMAccept(rep); err != nil || int(a.CRQSize) != int(hsqsize)+1 {
		t.Errorf("CM accept %+v, %v; want CRQSIZE %d", a, err, hsqsize+1)
	}
	t.Cleanup(q.close)
	return q, nil
}

func (q *tq) postRecv(i int) {
	if err := q.qp.PostRecv(&rdma.RecvWR{ID: uint64(i), SGL: []rdma.SGE{{MR: q.mr, Offset: tqRspOff + 16*i, Length: 16}}}); err != nil {
		q.t.Fatalf("post recv: %v", err)
	}
}

func (q *tq) close() {
	q.qp.Close()
	q.p.Close()
}

// data is the data region: the host's buffer for transfers.
func (q *tq) data() []byte { return q.buf[tqDataOff:] }

// exec sends sqe (its DPTR filled here with a keyed SGL for n data bytes
// unless inline is set) and waits for its completion.
func (q *tq) exec(sqe nvmeof.SQE, n int, inline []byte) nvmeof.CQEFields {
	q.t.Helper()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.cid++
	sqe[2], sqe[3] = byte(q.cid), byte(q.cid>>8)
	capsule := append([]byte(nil), sqe...)
	if capsule[1]&0xc0 == 0 {
		capsule[1] |= 0x40 // PSDT 01b: SGLs, as every fabrics host sends
	}
	if inline != nil {
		nvmeof.SGL(capsule[24:40]).Encode(&nvmeof.SGLFields{Identifier: nvmeof.SGLTypeDataBlock<<4 | nvmeof.SGLSubtypeOffset, Length: uint32(len(inline))})
		capsule = append(capsule, inline...)
	} else if n > 0 {
		nvmeof.SGL(capsule[24:40]).Encode(&nvmeof.SGLFields{Identifier: nvmeof.SGLKeyed, Address: q.mr.VA() + tqDataOff, Length: uint32(n), Key: q.mr.RKey()})
	} else {
		// No data: a null keyed descriptor, as Linux nvme_rdma_set_sg_null.
		nvmeof.SGL(capsule[24:40]).Encode(&nvmeof.SGLFields{Identifier: nvmeof.SGLKeyed})
	}
	copy(q.buf, capsule)
	if err := q.qp.PostSend(&rdma.SendWR{Op: rdma.OpSend, SGL: []rdma.SGE{{MR: q.mr, Length: len(capsule)}}}); err != nil {
		q.t.Fatalf("post send: %v", err)
	}
	for {
		wc := q.wait()
		if wc.Op != rdma.OpRecv {
			continue
		}
		cqe := nvmeof.CQE(q.buf[tqRspOff+16*int(wc.ID):])
		f := cqe.Fields()
		q.postRecv(int(wc.ID))
		if f.CID != q.cid {
			// A completed AER or similar: not ours.
			q.t.Logf("unexpected completion cid %d status %s", f.CID, f.Status)
			continue
		}
		return f
	}
}

func (q *tq) wait() rdma.WC {
	q.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wc [1]rdma.WC
	for q.cq.Poll(wc[:]) == 0 {
		if err := q.cq.Wait(ctx); err != nil {
			q.t.Fatalf("waiting for a completion: %v (QP: %v)", err, q.qp.Err())
		}
	}
	if wc[0].Status != rdma.StatusSuccess {
		q.t.Fatalf("completion %s: %s (QP: %v)", wc[0].Op, wc[0].Status, q.qp.Err())
	}
	return wc[0]
}

func (q *tq) connect(subnqn, host string, cntlid uint16, sqsize uint16, kato uint32) nvmeof.CQEFields {
	q.t.Helper()
	d := q.data()[:nvmeof.ConnectDataSize]
	clear(d)
	nvmeof.ConnectData(d).Encode(&nvmeof.ConnectDataFields{HostID: [16]byte{1, 2, 3}, CNTLID: cntlid, SubNQN: subnqn, HostNQN: host})
	sqe := make(nvmeof.SQE, 64)
	sqe.Connect().Encode(&nvmeof.ConnectFields{QID: q.qid, SQSize: sqsize, KATO: kato})
	return q.exec(sqe, nvmeof.ConnectDataSize, nil)
}

func (q *tq) propSet(off uint32, v uint64) nvmeof.CQEFields {
	sqe := make(nvmeof.SQE, 64)
	sqe.Property().Encode(&nvmeof.PropertyFields{FCType: nvmeof.FCTypePropertySet, Offset: off, Value: v})
	return q.exec(sqe, 0, nil)
}

func (q *tq) propGet(off uint32, size8 bool) nvmeof.CQEFields {
	sqe := make(nvmeof.SQE, 64)
	sqe.Property().Encode(&nvmeof.PropertyFields{FCType: nvmeof.FCTypePropertyGet, Offset: off, Size8: size8})
	return q.exec(sqe, 0, nil)
}

func must(t testing.TB, f nvmeof.CQEFields, what string) nvmeof.CQEFields {
	t.Helper()
	if f.Status != nvmeof.StatusSuccess {
		t.Fatalf("%s: %s", what, f.Status)
	}
	return f
}

func wantStatus(t testing.TB, f nvmeof.CQEFields, want nvmeof.Status, what string) {
	t.Helper()
	if f.Status.Code() != want.Code() || !f.Status.DNR() != !want.DNR() {
		t.Fatalf("%s: status %s, want %s", what, f.Status, want)
	}
}

// admin connects an admin queue and enables the controller.
func admin(t testing.TB, addr, subnqn, host string, kato uint32) (*tq, uint16) {
	t.Helper()
	q, err := dialQueue(t, addr, 0, 31, 32)
	if err != nil {
		t.Fatal(err)
	}
	f := must(t, q.connect(subnqn, host, nvmeof.CNTLIDDynamic, 31, kato), "connect")
	cntlid := uint16(f.Result)
	cap := must(t, q.propGet(nvmeof.PropCAP, true), "get CAP")
	if nvmeof.CAP(cap.Result).Fields().MQES == 0 {
		t.Fatal("CAP.MQES is 0")
	}
	must(t, q.propSet(nvmeof.PropCC, uint64(nvmeof.MakeCC(nvmeof.CCFields{EN: true, IOSQES: 6, IOCQES: 4}))), "set CC")
	if st := must(t, q.propGet(nvmeof.PropCSTS, false), "get CSTS"); !nvmeof.CSTS(st.Result).RDY() {
		t.Fatalf("CSTS %#x not ready", st.Result)
	}
	return q, cntlid
}

func identify(t testing.TB, q *tq, cns uint8, nsid uint32) []byte {
	t.Helper()
	sqe := make(nvmeof.SQE, 64)
	sqe.Identify().Encode(&nvmeof.IdentifyFields{CNS: cns, NSID: nsid})
	must(t, q.exec(sqe, 4096, nil), "identify")
	return append([]byte(nil), q.data()[:4096]...)
}

func ioQueue(t testing.TB, addr string, qid uint16, cntlid uint16, depth uint16) *tq {
	t.Helper()
	q, err := dialQueue(t, addr, qid, depth-1, depth)
	if err != nil {
		t.Fatal(err)
	}
	must(t, q.connect(testNQN, hostNQN, cntlid, depth-1, 0), "I/O queue connect")
	return q
}

func rw(q *tq, write bool, slba uint64, blocks int, fua bool) nvmeof.CQEFields {
	sqe := make(nvmeof.SQE, 64)
	op := nvmeof.IORead
	if write {
		op = nvmeof.IOWrite
	}
	var ctl uint16
	if fua {
		ctl = nvmeof.ControlFUA
	}
	sqe.RW().Encode(&nvmeof.RWFields{Opcode: op, NSID: 1, SLBA: slba, NLB: uint16(blocks - 1), Control: ctl})
	return q.exec(sqe, blocks*512, nil)
}

func TestConnectIdentifyReadWrite(t *testing.T) {
	t.Parallel()
	_, _, addr := testTarget(t, 64<<20)
	aq, cntlid := admin(t, addr, testNQN, hostNQN, 0)
	id, err := nvmeof.ParseIdentifyController(identify(t, aq, nvmeof.CNSController, 0))
	if err != nil {
		t.Fatal(err)
	}
	if id.CNTLID != cntlid || id.SUBNQN != testNQN || id.KAS == 0 || id.ICDOFF != 0 || id.IOCCSZ < 4 || id.SGLS&nvmeof.SGLSKeyed == 0 || id.CNTRLTYPE != nvmeof.ControllerTypeIO {
		t.Fatalf("identify controller: %+v", id)
	}
	if err := id.CheckRDMAHost(cntlid, false); err != nil {
		t.Fatalf("the Linux host would refuse this controller: %v", err)
	}
	ns, err := nvmeof.ParseIdentifyNamespace(identify(t, aq, nvmeof.CNSNamespace, 1))
	if err != nil || ns.NSZE != 64<<20/512 || ns.BlockSize() != 512 {
		t.Fatalf("identify namespace: %+v %v", ns, err)
	}
	list, err := nvmeof.ParseNSIDList(identify(t, aq, nvmeof.CNSActiveNSList, 0), nil)
	if err != nil || len(list) != 1 || list[0] != 1 {
		t.Fatalf("active namespaces %v, %v", list, err)
	}
	// Number of queues, then an I/O queue.
	sqe := make(nvmeof.SQE, 64)
	sqe.Features().Encode(&nvmeof.FeaturesFields{Opcode: nvmeof.AdminSetFeatures, FID: nvmeof.FeatNumQueues, CDW11: nvmeof.NumQueuesValue(3, 3)})
	f := must(t, aq.exec(sqe, 0, nil), "set number of queues")
	if nsqr, ncqr := nvmeof.ParseNumQueues(uint32(f.Result)); nsqr != 3 || ncqr != 3 {
		t.Fatalf("granted %d/%d queues", nsqr+1, ncqr+1)
	}
	io := ioQueue(t, addr, 1, cntlid, 32)
	data := make([]byte, 128<<10)
	rand.Read(data)
	copy(io.data(), data)
	must(t, rw(io, true, 100, 256, false), "write")
	clear(io.data()[:len(data)])
	must(t, rw(io, false, 100, 256, false), "read")
	if !bytes.Equal(io.data()[:len(data)], data) {
		t.Fatal("read data differs from written")
	}
	// In-capsule write.
	small := []byte("in-capsule data!")
	small = append(small, make([]byte, 512-len(small))...)
	sqe = make(nvmeof.SQE, 64)
	sqe.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IOWrite, NSID: 1, SLBA: 7, NLB: 0})
	must(t, io.exec(sqe, 0, small), "in-capsule write")
	must(t, rw(io, false, 7, 1, false), "read back")
	if !bytes.Equal(io.data()[:512], small) {
		t.Fatal("in-capsule write not read back")
	}
	// Errors.
	wantStatus(t, rw(io, false, 64<<20/512-1, 2, false), nvmeof.StatusLBAOutOfRange.WithDNR(), "read past the end")
	sqe = make(nvmeof.SQE, 64)
	sqe.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IORead, NSID: 1, SLBA: 0, NLB: 511})
	wantStatus(t, io.exec(sqe, 512*512, nil), nvmeof.StatusInvalidField.WithDNR(), "read over MDTS")
	sqe = make(nvmeof.SQE, 64)
	sqe.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IORead, NSID: 1, SLBA: 0, NLB: 7})
	wantStatus(t, io.exec(sqe, 512, nil), nvmeof.StatusSGLInvalidDataLength.WithDNR(), "SGL shorter than NLB")
	sqe = make(nvmeof.SQE, 64)
	sqe.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IORead, NSID: 9, SLBA: 0, NLB: 0})
	wantStatus(t, io.exec(sqe, 512, nil), nvmeof.StatusInvalidNamespace.WithDNR(), "unknown namespace")
	sqe = make(nvmeof.SQE, 64)
	sqe[0] = 0x7e
	wantStatus(t, io.exec(sqe, 0, nil), nvmeof.StatusInvalidOpcode.WithDNR(), "unknown opcode")
	// Flush, write zeroes, DSM, compare.
	sqe = make(nvmeof.SQE, 64)
	sqe.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IOFlush, NSID: 1})
	must(t, io.exec(sqe, 0, nil), "flush")
	sqe = make(nvmeof.SQE, 64)
	sqe.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IOWriteZeroes, NSID: 1, SLBA: 100, NLB: 9})
	must(t, io.exec(sqe, 0, nil), "write zeroes")
	must(t, rw(io, false, 100, 20, false), "read")
	if !bytes.Equal(io.data()[:10*512], make([]byte, 10*512)) || !bytes.Equal(io.data()[10*512:20*512], data[10*512:20*512]) {
		t.Fatal("write zeroes did not zero exactly its range")
	}
	copy(io.data(), data[20*512:21*512])
	sqe = make(nvmeof.SQE, 64)
	sqe.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IOCompare, NSID: 1, SLBA: 120, NLB: 0})
	must(t, io.exec(sqe, 512, nil), "compare equal")
	io.data()[3] ^= 1
	wantStatus(t, io.exec(sqe, 512, nil), nvmeof.StatusCompareFailure.WithDNR(), "compare different")
	rg := io.data()[:16]
	nvmeof.DSMRange(rg).Encode(&nvmeof.DSMRangeFields{SLBA: 120, Length: 8})
	sqe = make(nvmeof.SQE, 64)
	sqe.DSM().Encode(&nvmeof.DSMFields{NSID: 1, NR: 0, Attributes: nvmeof.DSMDeallocate})
	must(t, io.exec(sqe, 16, nil), "deallocate")
	must(t, rw(io, false, 120, 8, false), "read deallocated")
	if !bytes.Equal(io.data()[:8*512], make([]byte, 8*512)) {
		t.Fatal("deallocated blocks do not read as zeroes")
	}
}

func TestLogPagesAndFeatures(t *testing.T) {
	t.Parallel()
	_, _, addr := testTarget(t, 8<<20)
	aq, _ := admin(t, addr, testNQN, hostNQN, 0)
	glp := func(lid uint8, n int, nsid uint32) nvmeof.CQEFields {
		sqe := make(nvmeof.SQE, 64)
		sqe.GetLogPage().Encode(&nvmeof.GetLogPageFields{LID: lid, NSID: nsid, NUMD: nvmeof.NUMDForLength(uint32(n))})
		return aq.exec(sqe, n, nil)
	}
	must(t, glp(nvmeof.LogSMART, 512, nvmeof.NSIDAll), "SMART log")
	if _, err := nvmeof.ParseSMARTLog(aq.data()[:512]); err != nil {
		t.Fatal(err)
	}
	must(t, glp(nvmeof.LogFirmwareSlot, 512, 0), "firmware slot log")
	must(t, glp(nvmeof.LogCommandEffects, 4096, 0), "effects log")
	must(t, glp(nvmeof.LogChangedNS, 4096, 0), "changed namespace log")
	wantStatus(t, glp(0x42, 512, 0), nvmeof.StatusInvalidLogPage.WithDNR(), "unknown log page")
	// An error is then in the error log.
	must(t, glp(nvmeof.LogError, 64, 0), "error log")
	e, err := nvmeof.ParseErrorLogEntry(aq.data()[:64])
	if err != nil || e.ErrorCount == 0 || e.Status.Code() != nvmeof.StatusInvalidLogPage {
		t.Fatalf("newest error log entry %+v, %v", e, err)
	}
	// Features.
	feat := func(set bool, fid uint8, v uint32, n int) nvmeof.CQEFields {
		sqe := make(nvmeof.SQE, 64)
		op := nvmeof.AdminGetFeatures
		if set {
			op = nvmeof.AdminSetFeatures
		}
		sqe.Features().Encode(&nvmeof.FeaturesFields{Opcode: op, FID: fid, CDW11: v})
		return aq.exec(sqe, n, nil)
	}
	must(t, feat(true, nvmeof.FeatVolatileWC, 0, 0), "disable write cache")
	if f := must(t, feat(false, nvmeof.FeatVolatileWC, 0, 0), "get write cache"); f.Result != 0 {
		t.Fatalf("write cache %d after disabling", f.Result)
	}
	must(t, feat(true, nvmeof.FeatKeepAliveTimer, 30000, 0), "set KATO")
	if f := must(t, feat(false, nvmeof.FeatKeepAliveTimer, 0, 0), "get KATO"); f.Result != 30000 {
		t.Fatalf("KATO %d", f.Result)
	}
	nvmeof.EncodeTimestamp(aq.data(), uint64(time.Now().UnixMilli()), 0)
	must(t, feat(true, nvmeof.FeatTimestamp, 0, 8), "set timestamp")
	must(t, feat(false, nvmeof.FeatTimestamp, 0, 8), "get timestamp")
	if ms, attrs, _ := nvmeof.ParseTimestamp(aq.data()); attrs&2 == 0 || time.Since(time.UnixMilli(int64(ms))) > time.Minute {
		t.Fatalf("timestamp %d attrs %#x", ms, attrs)
	}
	must(t, feat(false, nvmeof.FeatHostID, 1, 16), "get host ID")
	if !bytes.Equal(aq.data()[:3], []byte{1, 2, 3}) {
		t.Fatalf("host ID %x", aq.data()[:16])
	}
	must(t, feat(true, nvmeof.FeatArbitration, 3, 0), "set arbitration")
	wantStatus(t, feat(true, 0x77, 0, 0), nvmeof.StatusInvalidField.WithDNR(), "unknown feature")
	sqe := make(nvmeof.SQE, 64)
	sqe[0] = nvmeof.AdminKeepAlive
	must(t, aq.exec(sqe, 0, nil), "keep alive")
}

func TestConnectRejections(t *testing.T) {
	t.Parallel()
	_, _, addr := testTarget(t, 8<<20, hostNQN)
	// CM level: admin queue deeper than 32.
	_, err := dialQueue(t, addr, 0, 63, 64)
	var re *rdma.RejectError
	if !errors.As(err, &re) {
		t.Fatalf("deep admin queue: %v, want a reject", err)
	}
	if rj, perr := nvmeof.ParseCMReject(re.PrivateData); perr != nil || rj.Status != nvmeof.CMInvalidHSQSize {
		t.Fatalf("reject %+v %v, want invalid HSQSIZE", rj, perr)
	}
	// Host not allowed.
	q, err := dialQueue(t, addr, 0, 31, 32)
	if err != nil {
		t.Fatal(err)
	}
	f := q.connect(testNQN, hostNQN2, nvmeof.CNTLIDDynamic, 31, 0)
	wantStatus(t, f, nvmeof.StatusConnectInvalidHost.WithDNR(), "host not allowed")
	// Unknown subsystem.
	f = q.connect("nqn.2026-11.io.rdisk:nope", hostNQN, nvmeof.CNTLIDDynamic, 31, 0)
	wantStatus(t, f, nvmeof.StatusConnectInvalidParameters.WithDNR(), "unknown subsystem")
	if inData, off := nvmeof.ParseConnectInvalidParam(uint32(f.Result)); !inData || off != nvmeof.ConnectDataSubNQNOffset {
		t.Fatalf("invalid parameter at data=%v offset %d", inData, off)
	}
	// Commands before Connect.
	sqe := make(nvmeof.SQE, 64)
	sqe.Identify().Encode(&nvmeof.IdentifyFields{CNS: nvmeof.CNSController})
	wantStatus(t, q.exec(sqe, 4096, nil), nvmeof.StatusCommandSequenceError.WithDNR(), "identify before connect")
	// I/O queue for a controller that does not exist.
	io, err := dialQueue(t, addr, 1, 31, 32)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, io.connect(testNQN, hostNQN, 77, 31, 0), nvmeof.StatusConnectInvalidParameters.WithDNR(), "unknown controller")
}

func TestDiscovery(t *testing.T) {
	t.Parallel()
	tg, _, addr := testTarget(t, 8<<20)
	aq, _ := admin(t, addr, nvmeof.DiscoveryNQN, hostNQN, 0)
	id, err := nvmeof.ParseIdentifyController(identify(t, aq, nvmeof.CNSController, 0))
	if err != nil || id.CNTRLTYPE != nvmeof.ControllerTypeDiscovery || id.SUBNQN != nvmeof.DiscoveryNQN {
		t.Fatalf("discovery identify %+v %v", id, err)
	}
	if err := id.CheckRDMAHost(id.CNTLID, true); err != nil {
		t.Fatalf("the Linux host would refuse this discovery controller: %v", err)
	}
	read := func() (nvmeof.DiscoveryLogHeader, []nvmeof.DiscoveryLogEntry) {
		sqe := make(nvmeof.SQE, 64)
		sqe.GetLogPage().Encode(&nvmeof.GetLogPageFields{LID: nvmeof.LogDiscovery, NUMD: nvmeof.NUMDForLength(4096)})
		must(t, aq.exec(sqe, 4096, nil), "discovery log")
		h, es, err := nvmeof.ParseDiscoveryLog(aq.data()[:4096])
		if err != nil {
			t.Fatal(err)
		}
		return h, es
	}
	h, es := read()
	if len(es) != 1 || es[0].SubNQN != testNQN || es[0].TrType != nvmeof.TrTypeRDMA || es[0].TrAddr != "127.0.0.1" || es[0].RDMACMS != nvmeof.RDMACMSRDMACM {
		t.Fatalf("discovery log %+v %+v", h, es)
	}
	// Enable discovery change events and post an AER; adding a subsystem
	// to the port completes it.
	sqe := make(nvmeof.SQE, 64)
	sqe.Features().Encode(&nvmeof.FeaturesFields{Opcode: nvmeof.AdminSetFeatures, FID: nvmeof.FeatAsyncEventConfig, CDW11: nvmeof.AENConfigDiscoveryChange})
	must(t, aq.exec(sqe, 0, nil), "AEN config")
	aer := make(nvmeof.SQE, 64)
	aer[0] = nvmeof.AdminAsyncEvent
	done := make(chan nvmeof.CQEFields, 1)
	go func() { done <- aq.exec(aer, 0, nil) }()
	time.Sleep(50 * time.Millisecond)
	s2, err := tg.AddSubsystem(SubsystemConfig{NQN: testNQN + "2", AllowAnyHost: true})
	if err != nil {
		t.Fatal(err)
	}
	tg.ports[1].LinkSubsystem(s2)
	select {
	case f := <-done:
		ev := nvmeof.ParseAsyncEvent(uint32(f.Result))
		if f.Status != nvmeof.StatusSuccess || ev.Info != nvmeof.NoticeDiscoveryChanged || ev.LogPage != nvmeof.LogDiscovery {
			t.Fatalf("AER completion %+v event %+v", f, ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no AER completion after the discovery log changed")
	}
	if h2, es := read(); len(es) != 2 || h2.GenCtr == h.GenCtr {
		t.Fatalf("after the change: genctr %d->%d, %d entries", h.GenCtr, h2.GenCtr, len(es))
	}
}

func TestNamespaceChangeAEN(t *testing.T) {
	t.Parallel()
	_, sub, addr := testTarget(t, 8<<20)
	aq, _ := admin(t, addr, testNQN, hostNQN, 0)
	sqe := make(nvmeof.SQE, 64)
	sqe.Features().Encode(&nvmeof.FeaturesFields{Opcode: nvmeof.AdminSetFeatures, FID: nvmeof.FeatAsyncEventConfig, CDW11: nvmeof.AENConfigNSAttr})
	must(t, aq.exec(sqe, 0, nil), "AEN config")
	aer := make(nvmeof.SQE, 64)
	aer[0] = nvmeof.AdminAsyncEvent
	done := make(chan nvmeof.CQEFields, 1)
	go func() { done <- aq.exec(aer, 0, nil) }()
	time.Sleep(50 * time.Millisecond)
	disk, _ := backstore.NewMem(1<<20, 4096)
	if err := sub.AddNamespace(NamespaceConfig{NSID: 5, Disk: disk}); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-done:
		if ev := nvmeof.ParseAsyncEvent(uint32(f.Result)); ev.Info != nvmeof.NoticeNSChanged || ev.LogPage != nvmeof.LogChangedNS {
			t.Fatalf("AER event %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no AER after adding a namespace")
	}
	sqe = make(nvmeof.SQE, 64)
	sqe.GetLogPage().Encode(&nvmeof.GetLogPageFields{LID: nvmeof.LogChangedNS, NUMD: nvmeof.NUMDForLength(4096)})
	must(t, aq.exec(sqe, 4096, nil), "changed namespace log")
	if ids, _ := nvmeof.ParseChangedNSList(aq.data()[:4096], nil); len(ids) != 1 || ids[0] != 5 {
		t.Fatalf("changed namespaces %v", ids)
	}
	ns, _ := nvmeof.ParseIdentifyNamespace(identify(t, aq, nvmeof.CNSNamespace, 5))
	if ns.BlockSize() != 4096 || ns.NSZE != 256 {
		t.Fatalf("new namespace %+v", ns)
	}

	// A resize raises the event again once the log was read.
	grow := &growDisk{Disk: disk, size: 1 << 20}
	if err := sub.AddNamespace(NamespaceConfig{NSID: 6, Disk: grow}); err != nil {
		t.Fatal(err)
	}
	if f := aq.exec(aer, 0, nil); f.Status != nvmeof.StatusSuccess { // the add's event, already pending
		t.Fatalf("AER for the added namespace: %s", f.Status)
	}
	sqe = make(nvmeof.SQE, 64)
	sqe.GetLogPage().Encode(&nvmeof.GetLogPageFields{LID: nvmeof.LogChangedNS, NUMD: nvmeof.NUMDForLength(4096)})
	must(t, aq.exec(sqe, 4096, nil), "changed namespace log")
	go func() { done <- aq.exec(aer, 0, nil) }()
	time.Sleep(50 * time.Millisecond)
	grow.size = 2 << 20
	if err := sub.NamespaceResized(6); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-done:
		if ev := nvmeof.ParseAsyncEvent(uint32(f.Result)); ev.Info != nvmeof.NoticeNSChanged {
			t.Fatalf("AER event after resize %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no AER after a resize")
	}
	if ns, _ := nvmeof.ParseIdentifyNamespace(identify(t, aq, nvmeof.CNSNamespace, 6)); ns.NSZE != 512 {
		t.Fatalf("resized namespace has NSZE %d, want 512", ns.NSZE)
	}
}

// growDisk is a disk whose size the test changes.
type growDisk struct {
	backstore.Disk
	size int64
}

func (g *growDisk) Size() int64 { return g.size }

func TestKeepAliveExpiry(t *testing.T) {
	t.Parallel()
	_, sub, addr := testTarget(t, 8<<20)
	aq, cntlid := admin(t, addr, testNQN, hostNQN, 1000) // KATO 1 s
	select {
	case <-aq.qp.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("controller not torn down after the keep-alive timeout")
	}
	deadline := time.Now().Add(5 * time.Second)
	for sub.controller(cntlid) != nil {
		if time.Now().After(deadline) {
			t.Fatal("controller ID still allocated")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestMultiQueueParallel(t *testing.T) {
	t.Parallel()
	_, _, addr := testTarget(t, 64<<20)
	aq, cntlid := admin(t, addr, testNQN, hostNQN, 0)
	sqe := make(nvmeof.SQE, 64)
	sqe.Features().Encode(&nvmeof.FeaturesFields{Opcode: nvmeof.AdminSetFeatures, FID: nvmeof.FeatNumQueues, CDW11: nvmeof.NumQueuesValue(3, 3)})
	must(t, aq.exec(sqe, 0, nil), "set number of queues")
	var wg sync.WaitGroup
	for qid := uint16(1); qid <= 4; qid++ {
		io := ioQueue(t, addr, qid, cntlid, 16)
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := make([]byte, 64<<10)
			for i := 0; i < 32; i++ {
				rand.Read(want)
				lba := uint64(qid)*20000 + uint64(i)*128
				copy(io.data(), want)
				if f := rw(io, true, lba, 128, i%2 == 0); f.Status != nvmeof.StatusSuccess {
					t.Errorf("queue %d write: %s", qid, f.Status)
					return
				}
				clear(io.data()[:len(want)])
				if f := rw(io, false, lba, 128, false); f.Status != nvmeof.StatusSuccess || !bytes.Equal(io.data()[:len(want)], want) {
					t.Errorf("queue %d read: %s, equal %v", qid, f.Status, bytes.Equal(io.data()[:len(want)], want))
					return
				}
			}
		}()
	}
	wg.Wait()
	// A fifth queue exceeds the four granted.
	io5, err := dialQueue(t, addr, 5, 15, 16)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, io5.connect(testNQN, hostNQN, cntlid, 15, 0), nvmeof.StatusConnectInvalidParameters.WithDNR(), "queue beyond the granted count")
}
