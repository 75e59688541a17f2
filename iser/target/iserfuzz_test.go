package target

import (
	"context"
	"encoding/binary"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/iwarp"
)

// Layout of a raw iSER initiator's registered buffer: receive buffers,
// one send buffer, and a data area the target may RDMA Read and Write
// (the STags of the iSER headers the fuzzer sends point into it).
const (
	rawRecvs    = 64
	rawRecvLen  = 16 << 10
	rawSendOff  = rawRecvs * rawRecvLen
	rawSendLen  = 16 << 10
	rawDataOff  = rawSendOff + rawSendLen
	rawDataLen  = 256 << 10
	rawBufLen   = rawDataOff + rawDataLen
	rawSendWait = 5 * time.Second
)

// iserRaw is an iSER initiator that speaks PDUs itself over rdisk's
// software iWARP provider: it logs in with package iser's engine, then
// sends whatever it is given. A goroutine takes the target's Sends
// (reposting the receive buffers) and pushes them to pdus.
type iserRaw struct {
	t    testing.TB
	prov *iwarp.Provider
	pd   rdma.PD
	scq  rdma.CQ
	rcq  rdma.CQ
	qp   rdma.QP
	buf  []byte
	mr   rdma.MR
	ls   iser.Session
	pdus chan []byte
	stop context.CancelFunc
	wg   sync.WaitGroup
}

// dialISERRaw connects to the portal at addr and logs in to fuzzIQN.
func dialISERRaw(t testing.TB, addr string) (*iserRaw, error) {
	prov, err := iwarp.New(iwarp.Config{})
	if err != nil {
		return nil, err
	}
	x := &iserRaw{t: t, prov: prov, pdus: make(chan []byte, rawRecvs)}
	ok := false
	defer func() {
		if !ok {
			x.close()
		}
	}()
	if x.pd, err = prov.AllocPD(); err != nil {
		return nil, err
	}
	if x.scq, err = prov.CreateCQ(256); err != nil {
		return nil, err
	}
	if x.rcq, err = prov.CreateCQ(256); err != nil {
		return nil, err
	}
	if x.qp, err = x.pd.CreateQP(rdma.QPConfig{SendCQ: x.scq, RecvCQ: x.rcq, MaxSendWR: 64, MaxRecvWR: rawRecvs}); err != nil {
		return nil, err
	}
	x.buf = make([]byte, rawBufLen)
	if x.mr, err = x.pd.RegisterMemory(x.buf, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead); err != nil {
		return nil, err
	}
	for i := range rawRecvs {
		if err := x.repost(i); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pd := make([]byte, iser.ISERCMSize)
	iser.ISERCM{Flags: iser.ISERZBVANotSupported}.Encode(pd)
	if _, err := x.qp.Connect(ctx, addr, rdma.ConnParam{PrivateData: pd, ResponderResources: 4, InitiatorDepth: 0}); err != nil {
		return nil, err
	}
	rctx, stop := context.WithCancel(context.Background())
	x.stop = stop
	x.wg.Add(1)
	go x.recvLoop(rctx)
	if err := x.login(ctx); err != nil {
		return nil, err
	}
	ok = true
	return x, nil
}

func (x *iserRaw) repost(i int) error {
	return x.qp.PostRecv(&rdma.RecvWR{ID: uint64(i), SGL: []rdma.SGE{{MR: x.mr, Offset: i * rawRecvLen, Length: rawRecvLen}}})
}

// recvLoop hands each received message to pdus (dropped when nobody
// reads) and reposts its buffer.
func (x *iserRaw) recvLoop(ctx context.Context) {
	defer x.wg.Done()
	var wcs [16]rdma.WC
	for {
		n := x.rcq.Poll(wcs[:])
		for _, wc := range wcs[:n] {
			if wc.Status != rdma.StatusSuccess {
				return
			}
			i := int(wc.ID)
			m := append([]byte(nil), x.buf[i*rawRecvLen:i*rawRecvLen+wc.ByteLen]...)
			select {
			case x.pdus <- m:
			default:
			}
			if x.repost(i) != nil {
				return
			}
		}
		if n == 0 {
			if x.rcq.Wait(ctx) != nil {
				return
			}
		}
	}
}

// send posts one Send of b and waits for its completion; it reports
// whether the QP is still usable.
func (x *iserRaw) send(b []byte) bool {
	n := copy(x.buf[rawSendOff:rawSendOff+rawSendLen], b)
	if err := x.qp.PostSend(&rdma.SendWR{Op: rdma.OpSend, Flags: rdma.Signaled,
		SGL: []rdma.SGE{{MR: x.mr, Offset: rawSendOff, Length: n}}}); err != nil {
		return false
	}
	return x.waitSend()
}

// post posts an RDMA Write or Read at the target's memory (rkey, va) and
// waits for it; it reports whether the QP is still usable.
func (x *iserRaw) post(op rdma.Opcode, rkey uint32, va uint64, n int) bool {
	n = min(n, rawDataLen)
	if err := x.qp.PostSend(&rdma.SendWR{Op: op, Flags: rdma.Signaled, RemoteKey: rkey, RemoteAddr: va,
		SGL: []rdma.SGE{{MR: x.mr, Offset: rawDataOff, Length: n}}}); err != nil {
		return false
	}
	return x.waitSend()
}

func (x *iserRaw) waitSend() bool {
	ctx, cancel := context.WithTimeout(context.Background(), rawSendWait)
	defer cancel()
	var wc [1]rdma.WC
	for {
		if x.scq.Poll(wc[:]) == 1 {
			return wc[0].Status == rdma.StatusSuccess
		}
		if x.scq.Wait(ctx) != nil {
			return false
		}
	}
}

// control returns an iSER header for a PDU whose buffers (if any) are
// the data area.
func (x *iserRaw) control(wsv, rsv bool) []byte {
	h := make([]byte, iser.ISERHeaderSize)
	va := x.mr.VA() + rawDataOff
	iser.ISERHeader(h).Encode(&iser.ISERHeaderFields{WriteValid: wsv, WriteSTag: x.mr.RKey(), WriteBaseOffset: va,
		ReadValid: rsv, ReadSTag: x.mr.RKey(), ReadBaseOffset: va})
	return h
}

// next returns the next PDU the target sent, or nil after the timeout.
func (x *iserRaw) next(d time.Duration) []byte {
	select {
	case m := <-x.pdus:
		return m
	case <-time.After(d):
		return nil
	}
}

func (x *iserRaw) login(ctx context.Context) error {
	n := isidSeq.Add(1)
	il, err := iser.NewInitiatorLogin(&iser.InitiatorConfig{Transport: iser.TransportISER, Settings: iser.DefaultSettings(),
		InitiatorName: "iqn.2026-11.io.rdisk:iserfuzzer", TargetName: fuzzIQN,
		ISID: iser.ISID{0x80, 1, 0, byte(n >> 16), byte(n >> 8), byte(n)}})
	if err != nil {
		return err
	}
	req := make([]byte, iser.BHSSize)
	reqData := make([]byte, 8192)
	dl, err := il.Start(req, reqData)
	for {
		if err != nil {
			return err
		}
		iser.BHS(req).SetLengths(0, dl)
		msg := append(append(x.control(false, false), req...), reqData[:iser.PaddedLength(dl)]...)
		if !x.send(msg) {
			return errorString("sending a Login Request failed")
		}
		m := x.next(10 * time.Second)
		if m == nil {
			return errorString("no Login Response")
		}
		p, perr := iser.ParsePDU(m[iser.ISERHeaderSize:], 1<<16)
		if perr != nil {
			return perr
		}
		var st iser.LoginState
		dl, st, err = il.Step(p.BHS, p.Data, req, reqData)
		if st == iser.LoginDone {
			x.ls, _ = il.Session()
			return nil
		}
		if st == iser.LoginFailed {
			return err
		}
	}
}

func (x *iserRaw) close() {
	if x.qp != nil {
		x.qp.Disconnect()
		x.qp.Close()
	}
	if x.stop != nil {
		x.stop()
	}
	x.wg.Wait()
	if x.mr != nil {
		x.mr.Deregister()
	}
	for _, c := range []rdma.CQ{x.scq, x.rcq} {
		if c != nil {
			c.Close()
		}
	}
	if x.pd != nil {
		x.pd.Close()
	}
	x.prov.Close()
}

// iserPortal serves tg's portal with the software iWARP provider on a
// loopback port and returns its address and the number of connections
// the target is serving.
func iserPortal(t testing.TB, edit func(*Config)) (*Target, string, *atomic.Int64) {
	t.Helper()
	prov, err := iwarp.New(iwarp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	live := new(atomic.Int64)
	tg := newTestTarget(t, func(c *Config) {
		c.Provider = prov
		c.ConnHook = func(d int) { live.Add(int64(d)) }
		if edit != nil {
			edit(c)
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go tg.Serve(ctx, ln)
	t.Cleanup(func() {
		cancel()
		tg.Close()
		prov.Close()
	})
	return tg, ln.Addr().String(), live
}

// waitIdle waits until the target serves no connection.
func waitIdle(t testing.TB, live *atomic.Int64, bound time.Duration) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for live.Load() != 0 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("the target did not end the connection\n%s", buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
}

// Records of FuzzISERPDUs inputs: a kind byte, a 2-byte big-endian
// length, and that many bytes (fewer at the end of the input).
const (
	recRaw   = iota // a Send of the bytes as they are (iSER header included)
	recPDU          // an iSER header with both STags on the data area, then the bytes as a PDU with its lengths fixed up and its CmdSN moved into the window
	recWrite        // an RDMA Write at the target: rkey (4 bytes), va (8), length (2)
	recRead         // an RDMA Read from the target, same fields
	nRecKinds
)

// iserRecord encodes one FuzzISERPDUs record.
func iserRecord(kind byte, b []byte) []byte {
	return append([]byte{kind, byte(len(b) >> 8), byte(len(b))}, b...)
}

// FuzzISERPDUs feeds arbitrary iSER traffic to a logged-in iSER
// connection over the software iWARP provider: Sends of raw bytes and of
// PDUs behind a valid iSER header, and RDMA Writes and Reads at the
// target's memory. The target must neither panic nor hang, and must end
// the connection when the initiator goes away.
func FuzzISERPDUs(f *testing.F) {
	_, addr, live := iserPortal(f, func(c *Config) { c.NopInInterval = -1 })
	x, err := dialISERRaw(f, addr)
	if err != nil {
		f.Fatal(err)
	}
	ls := x.ls
	x.close()
	waitIdle(f, live, 10*time.Second)
	var all []byte
	for _, s := range seeds(ls) {
		p, err := iser.ParsePDU(s, 1<<20)
		if err != nil {
			f.Fatal(err)
		}
		b := append(append([]byte(nil), p.Header()...), p.Data...)
		f.Add(iserRecord(recPDU, b))
		all = append(all, iserRecord(recPDU, b)...)
	}
	f.Add(all)
	f.Add(iserRecord(recRaw, append([]byte{iser.ISEROpcodeHello}, make([]byte, 27)...)))
	f.Add(iserRecord(recWrite, make([]byte, 14)))
	f.Fuzz(func(t *testing.T, in []byte) {
		x, err := dialISERRaw(t, addr)
		if err != nil {
			t.Fatalf("login: %v", err)
		}
		go func() {
			for range x.pdus {
			}
		}()
		for len(in) >= 3 {
			kind, n := in[0]%nRecKinds, int(binary.BigEndian.Uint16(in[1:]))
			in = in[3:]
			n = min(n, len(in), rawSendLen-iser.ISERHeaderSize)
			b := in[:n]
			in = in[n:]
			ok := true
			switch kind {
			case recRaw:
				ok = x.send(b)
			case recPDU:
				ok = x.send(append(x.control(true, true), fixPDU(b, x.ls.CmdSN)...))
			case recWrite, recRead:
				if len(b) < 14 {
					continue
				}
				op := rdma.OpRDMAWrite
				if kind == recRead {
					op = rdma.OpRDMARead
				}
				ok = x.post(op, binary.BigEndian.Uint32(b), binary.BigEndian.Uint64(b[4:]), int(binary.BigEndian.Uint16(b[12:])))
			}
			if !ok {
				break
			}
		}
		x.close()
		close(x.pdus)
		waitIdle(t, live, 10*time.Second)
	})
}

// fixPDU returns b as a PDU that gets past framing more often: lengths
// that match the bytes given and CmdSNs in the window.
func fixPDU(b []byte, cmdSN uint32) []byte {
	b = append([]byte(nil), b...)
	if len(b) < iser.BHSSize {
		return b
	}
	h := iser.BHS(b)
	ahs := min(h.TotalAHSLength(), len(b)-iser.BHSSize)
	ahs &^= 3
	h.SetLengths(ahs, len(b)-iser.BHSSize-ahs)
	switch h.Opcode() {
	case iser.OpSCSICommand, iser.OpNOPOut, iser.OpTextRequest, iser.OpTaskMgmtRequest, iser.OpLogoutRequest:
		v := binary.BigEndian.Uint32(b[24:])
		binary.BigEndian.PutUint32(b[24:], cmdSN+v%16)
	}
	return b
}

// TestISERRaw: the raw iSER initiator reaches full feature phase (a
// NOP-Out is answered), and a malformed PDU ends the connection with a
// Reject carrying its BHS first.
func TestISERRaw(t *testing.T) {
	t.Parallel()
	tg, addr, live := iserPortal(t, nil)
	x, err := dialISERRaw(t, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer x.close()
	h := make([]byte, iser.BHSSize)
	iser.NOPOut(h).Encode(&iser.NOPOutFields{Immediate: true, ITT: 7, TTT: iser.ReservedTag, CmdSN: x.ls.CmdSN})
	if !x.send(append(x.control(false, false), h...)) {
		t.Fatal("sending a NOP-Out failed")
	}
	next := func() iser.PDU {
		t.Helper()
		m := x.next(10 * time.Second)
		if m == nil {
			t.Fatal("no answer")
		}
		p, err := iser.ParsePDU(m[iser.ISERHeaderSize:], 1<<16)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if p := next(); p.BHS.Opcode() != iser.OpNOPIn || p.BHS.ITT() != 7 {
		t.Fatalf("got %v itt %#x, want the NOP-In", p.BHS.Opcode(), p.BHS.ITT())
	}
	// A data segment longer than the receive buffers take.
	iser.NOPOut(h).Encode(&iser.NOPOutFields{Immediate: true, ITT: 8, TTT: iser.ReservedTag, CmdSN: x.ls.CmdSN})
	iser.BHS(h).SetLengths(0, iserRecvData+4)
	if !x.send(append(x.control(false, false), h...)) {
		t.Fatal("sending a NOP-Out failed")
	}
	p := next()
	if p.BHS.Opcode() != iser.OpReject || iser.Reject(p.BHS).Reason() != iser.RejectProtocolError ||
		len(p.Data) < iser.BHSSize || iser.BHS(p.Data).ITT() != 8 {
		t.Fatalf("got %v (%d bytes), want a Reject (protocol error) of the NOP-Out", p.BHS.Opcode(), len(p.Data))
	}
	waitIdle(t, live, 10*time.Second)
	if n := tg.Stats().SessionsClosed["protocol_error"]; n != 1 {
		t.Errorf("%d sessions closed for protocol errors, want 1", n)
	}
}
