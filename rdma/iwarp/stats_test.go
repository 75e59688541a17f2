package iwarp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/rdmatest"
)

// logRecorder is a slog handler that keeps every record.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

// find returns the attributes of the records with message msg.
func (h *logRecorder) find(msg string) []map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]string
	for _, r := range h.recs {
		if r.Message != msg {
			continue
		}
		m := map[string]string{"level": r.Level.String()}
		r.Attrs(func(a slog.Attr) bool {
			m[a.Key] = a.Value.String()
			return true
		})
		out = append(out, m)
	}
	return out
}

func (h *logRecorder) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.recs)
}

// statsPair connects a client and a server of two providers with cfg and
// returns them with the providers and their loggers.
func statsPair(t *testing.T, cfg Config, pc rdmatest.PairConfig) (c, s *rdmatest.End, cp, sp *Provider, clog, slg *logRecorder) {
	t.Helper()
	var provs []*Provider
	var logs []*logRecorder
	np := func() rdma.Provider {
		l := &logRecorder{}
		cfg := cfg
		cfg.Logger = slog.New(l)
		p, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		provs = append(provs, p)
		logs = append(logs, l)
		return p
	}
	c, s = rdmatest.Pair(t, np, pc)
	// Pair makes the server's provider first.
	return c, s, provs[1], provs[0], logs[1], logs[0]
}

// waitStats polls p.Stats until ok accepts it.
func waitStats(t *testing.T, p *Provider, what string, ok func(Stats) bool) Stats {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := p.Stats()
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: stats %+v", what, s)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestStatsTransfer moves known amounts with RDMA Write, RDMA Read and
// Send between two providers and checks both sides' counters, before and
// after the connection closes.
func TestStatsTransfer(t *testing.T) {
	t.Parallel()
	const (
		fpdu    = 4096
		wrLen   = 10000 // 3 FPDUs
		rdLen   = 5000  // 2 FPDUs
		sendLen = 100
	)
	c, s, cp, sp, clog, slg := statsPair(t, Config{MaxFPDUPayload: fpdu}, rdmatest.PairConfig{BufSize: 64 << 10, PostRecvs: 1, RecvSize: 4096})
	if err := c.QP.PostSend(&rdma.SendWR{ID: 1, Op: rdma.OpRDMAWrite, Flags: rdma.Signaled,
		SGL: []rdma.SGE{{MR: c.MR, Length: wrLen}}, RemoteAddr: s.MR.VA(), RemoteKey: s.MR.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := rdmatest.WaitWC(t, c.SendCQ); wc.Status != rdma.StatusSuccess {
		t.Fatalf("write: %+v", wc)
	}
	if err := c.QP.PostSend(&rdma.SendWR{ID: 2, Op: rdma.OpRDMARead, Flags: rdma.Signaled,
		SGL: []rdma.SGE{{MR: c.MR, Offset: 32 << 10, Length: rdLen}}, RemoteAddr: s.MR.VA() + 16<<10, RemoteKey: s.MR.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := rdmatest.WaitWC(t, c.SendCQ); wc.Status != rdma.StatusSuccess {
		t.Fatalf("read: %+v", wc)
	}
	if err := c.QP.PostSend(&rdma.SendWR{ID: 3, Op: rdma.OpSend, SGL: []rdma.SGE{{MR: c.MR, Length: sendLen}}}); err != nil {
		t.Fatal(err)
	}
	if wc := rdmatest.WaitWC(t, s.RecvCQ); wc.Status != rdma.StatusSuccess || wc.ByteLen != sendLen {
		t.Fatalf("send: %+v", wc)
	}

	// Client: the zero-length hello Send of Pair, 3 Write FPDUs, a Read
	// Request and a Send out; 2 Read Response FPDUs in.
	wantC := Stats{Connections: 1, ConnectionsActive: 1, FPDUsSent: 6, BytesSent: wrLen + sendLen,
		FPDUsReceived: 2, BytesReceived: rdLen, BytesPlaced: rdLen}
	wantS := Stats{Connections: 1, ConnectionsActive: 1, FPDUsSent: 2, BytesSent: rdLen,
		FPDUsReceived: 6, BytesReceived: wrLen + sendLen, BytesPlaced: wrLen}
	same := func(got, want Stats) bool {
		return got.Connections == want.Connections && got.ConnectionsActive == want.ConnectionsActive &&
			got.FPDUsSent == want.FPDUsSent && got.FPDUsReceived == want.FPDUsReceived &&
			got.BytesSent == want.BytesSent && got.BytesReceived == want.BytesReceived && got.BytesPlaced == want.BytesPlaced
	}
	gotC := waitStats(t, cp, "client", func(st Stats) bool { return same(st, wantC) })
	waitStats(t, sp, "server", func(st Stats) bool { return same(st, wantS) })
	for _, st := range []Stats{gotC, sp.Stats()} {
		if st.CRCErrors != 0 || sum(st.TerminatesSent) != 0 || sum(st.TerminatesReceived) != 0 || sum(st.ConnectRejects) != 0 {
			t.Errorf("errors counted on a clean transfer: %+v", st)
		}
		if len(st.ConnectRejects) != numRejectReasons || len(st.TerminatesSent) != numTermReasons || len(st.TerminatesReceived) != numTermReasons {
			t.Errorf("maps hold %d, %d, %d labels, want the full sets", len(st.ConnectRejects), len(st.TerminatesSent), len(st.TerminatesReceived))
		}
	}
	if runtime.GOOS == "linux" {
		if _, ok := tcpRetrans(c.QP.(*qp).cs.rc); !ok {
			t.Error("TCP_INFO of a live connection unreadable")
		}
	}

	// Closing moves the counts to the running totals, unchanged.
	c.QP.Close()
	wantC.ConnectionsActive, wantS.ConnectionsActive = 0, 0
	if st := cp.Stats(); !same(st, wantC) {
		t.Errorf("client after Close: %+v, want %+v", st, wantC)
	}
	waitStats(t, sp, "server after the peer closed", func(st Stats) bool { return same(st, wantS) })

	for _, l := range []*logRecorder{clog, slg} {
		// The closed record is logged just after the counts move to the
		// totals (tx.go), so it may trail what waitStats saw.
		down := l.find("iwarp: connection closed")
		for deadline := time.Now().Add(10 * time.Second); len(down) == 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
			down = l.find("iwarp: connection closed")
		}
		up := l.find("iwarp: connection established")
		if len(up) != 1 || up[0]["level"] != "DEBUG" || up[0]["peer"] == "" || up[0]["qp"] == "" {
			t.Errorf("connection established logged as %v", up)
		}
		if len(down) != 1 || down[0]["level"] != "DEBUG" || down[0]["peer"] == "" {
			t.Errorf("connection closed logged as %v", down)
		}
		if n := l.count(); n > 4 {
			t.Errorf("%d log records for one connection", n)
		}
	}
}

func sum(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

// onlyLabel checks that m counts n under label and nothing else.
func onlyLabel(t *testing.T, what string, m map[string]uint64, label string, n uint64) {
	t.Helper()
	if m[label] != n || sum(m) != n {
		t.Errorf("%s: %v, want %d %q only", what, nonZero(m), n, label)
	}
}

func nonZero(m map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

// TestStatsTerminate: an RDMA Write to an unknown STag makes the server
// send a Terminate (DDP tagged, invalid STag) that the client receives;
// both are counted by reason and logged at Warn.
func TestStatsTerminate(t *testing.T) {
	t.Parallel()
	c, s, cp, sp, clog, slg := statsPair(t, Config{}, rdmatest.PairConfig{BufSize: 8192})
	if err := c.QP.PostSend(&rdma.SendWR{ID: 1, Op: rdma.OpRDMAWrite,
		SGL: []rdma.SGE{{MR: c.MR, Length: 16}}, RemoteAddr: s.MR.VA(), RemoteKey: 0x777700}); err != nil {
		t.Fatal(err)
	}
	gotS := waitStats(t, sp, "server", func(st Stats) bool { return st.ConnectionsActive == 0 && sum(st.TerminatesSent) > 0 })
	gotC := waitStats(t, cp, "client", func(st Stats) bool { return st.ConnectionsActive == 0 && sum(st.TerminatesReceived) > 0 })
	onlyLabel(t, "server TerminatesSent", gotS.TerminatesSent, "ddp_tagged_invalid_stag", 1)
	onlyLabel(t, "client TerminatesReceived", gotC.TerminatesReceived, "ddp_tagged_invalid_stag", 1)
	if sum(gotS.TerminatesReceived) != 0 || sum(gotC.TerminatesSent) != 0 {
		t.Errorf("Terminates the other way: server received %v, client sent %v", nonZero(gotS.TerminatesReceived), nonZero(gotC.TerminatesSent))
	}
	// The Terminate is an FPDU of each side too (after the hello and the
	// Write).
	if gotS.FPDUsSent != 1 || gotC.FPDUsReceived != 1 || gotC.FPDUsSent != 2 || gotS.BytesPlaced != 0 {
		t.Errorf("FPDUs: server sent %d, client sent %d and received %d; server placed %d bytes",
			gotS.FPDUsSent, gotC.FPDUsSent, gotC.FPDUsReceived, gotS.BytesPlaced)
	}
	for _, tc := range []struct {
		l   *logRecorder
		msg string
		qp  rdma.QP
	}{{slg, "iwarp: Terminate sent", s.QP}, {clog, "iwarp: Terminate received", c.QP}} {
		recs := tc.l.find(tc.msg)
		if len(recs) != 1 {
			t.Fatalf("%q logged %d times", tc.msg, len(recs))
		}
		r := recs[0]
		if r["level"] != "WARN" || r["layer"] != "DDP" || r["etype"] != fmt.Sprint(ddpETypeTagged) ||
			r["ecode"] != "0x00" || r["reason"] != "ddp_tagged_invalid_stag" ||
			r["qp"] != fmt.Sprint(tc.qp.Num()) || r["peer"] == "" || r["peer"] == "<nil>" {
			t.Errorf("%q logged as %v", tc.msg, r)
		}
	}
}

// TestStatsTerminateRaw feeds a QP Terminates and a bad CRC over a pipe.
func TestStatsTerminateRaw(t *testing.T) {
	t.Parallel()
	t.Run("received", func(t *testing.T) {
		t.Parallel()
		r := newRawPeer(t, false, false, 4, 4)
		h := untagged(rdmapTerminate, qnTerminate, 1, 0, true)
		ctrl := make([]byte, 4)
		binary.BigEndian.PutUint32(ctrl, (&termError{Layer: termLayerRDMAP, EType: rdmapETypeRemoteProt, ECode: rdmapECodeBaseBounds}).ctrlWord())
		go r.peer.Write(frame(h, ctrl))
		waitQPError(t, r.q)
		st := waitStats(t, r.q.pd.p, "after the Terminate", func(st Stats) bool { return st.ConnectionsActive == 0 })
		onlyLabel(t, "TerminatesReceived", st.TerminatesReceived, "rdmap_remote_protection", 1)
		if sum(st.TerminatesSent) != 0 || st.FPDUsReceived != 1 {
			t.Errorf("sent %v, %d FPDUs received", nonZero(st.TerminatesSent), st.FPDUsReceived)
		}
	})
	t.Run("crc", func(t *testing.T) {
		t.Parallel()
		r := newRawPeer(t, false, true, 4, 4)
		r.q.PostRecv(&rdma.RecvWR{ID: 1, SGL: []rdma.SGE{{MR: r.mr, Length: 64}}})
		f := frame(untagged(rdmapSend, qnSend, 1, 0, true), []byte("abcd"))
		binary.LittleEndian.PutUint32(f[len(f)-4:], 0xdeadbeef)
		go r.peer.Write(f)
		expectTerminate(t, r.peer, termLayerLLP, llpETypeMPA, llpECodeRecvCRC)
		st := waitStats(t, r.q.pd.p, "after the CRC error", func(st Stats) bool { return sum(st.TerminatesSent) > 0 })
		onlyLabel(t, "TerminatesSent", st.TerminatesSent, "mpa_crc", 1)
		if st.CRCErrors != 1 || st.FPDUsReceived != 0 || st.BytesReceived != 0 {
			t.Errorf("%d CRC errors, %d FPDUs and %d bytes received; want 1, 0, 0", st.CRCErrors, st.FPDUsReceived, st.BytesReceived)
		}
	})
}

func TestTermReason(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, n := range termNames {
		if n == "" || seen[n] {
			t.Errorf("label %q empty or repeated", n)
		}
		seen[n] = true
	}
	for _, tc := range []struct {
		layer, etype, ecode uint8
		want                string
	}{
		{termLayerRDMAP, rdmapETypeCatastrophic, 0, "rdmap_catastrophic"},
		{termLayerRDMAP, rdmapETypeRemoteProt, rdmapECodeAccessRights, "rdmap_remote_protection"},
		{termLayerRDMAP, rdmapETypeRemoteOp, rdmapECodeCannotInval, "rdmap_remote_operation"},
		{termLayerRDMAP, 7, 0, "other"},
		{termLayerDDP, ddpETypeCatastrophic, 0, "ddp_catastrophic"},
		{termLayerDDP, ddpETypeTagged, ddpECodeTInvalidSTag, "ddp_tagged_invalid_stag"},
		{termLayerDDP, ddpETypeTagged, ddpECodeTBaseBounds, "ddp_tagged_base_bounds"},
		{termLayerDDP, ddpETypeTagged, ddpECodeTSTagNotAssoc, "ddp_tagged_stag_not_associated"},
		{termLayerDDP, ddpETypeTagged, ddpECodeTTOWrap, "ddp_tagged_to_wrap"},
		{termLayerDDP, ddpETypeTagged, ddpECodeTVersion, "ddp_tagged_version"},
		{termLayerDDP, ddpETypeTagged, 5, "other"},
		{termLayerDDP, ddpETypeUntagged, 0, "other"},
		{termLayerDDP, ddpETypeUntagged, ddpECodeUTInvalidQN, "ddp_untagged_invalid_qn"},
		{termLayerDDP, ddpETypeUntagged, ddpECodeUTNoBuf, "ddp_untagged_no_buffer"},
		{termLayerDDP, ddpETypeUntagged, ddpECodeUTMSNRange, "ddp_untagged_msn_range"},
		{termLayerDDP, ddpETypeUntagged, ddpECodeUTInvalidMO, "ddp_untagged_invalid_mo"},
		{termLayerDDP, ddpETypeUntagged, ddpECodeUTMsgTooLong, "ddp_untagged_message_too_long"},
		{termLayerDDP, ddpETypeUntagged, ddpECodeUTVersion, "ddp_untagged_version"},
		{termLayerDDP, ddpETypeUntagged, 7, "other"},
		{termLayerLLP, llpETypeMPA, llpECodeStreamLost, "mpa_stream_lost"},
		{termLayerLLP, llpETypeMPA, llpECodeRecvCRC, "mpa_crc"},
		{termLayerLLP, llpETypeMPA, llpECodeFPDUStart, "mpa_fpdu_start"},
		{termLayerLLP, llpETypeMPA, llpECodeInvalidReqResp, "mpa_invalid_request"},
		{termLayerLLP, llpETypeMPA, llpECodeLocalCatastrophic, "mpa_local_catastrophic"},
		{termLayerLLP, llpETypeMPA, llpECodeInsufficientIRD, "mpa_insufficient_ird"},
		{termLayerLLP, llpETypeMPA, llpECodeNoMatchingRTR, "mpa_no_matching_rtr"},
		{termLayerLLP, llpETypeMPA, 0, "other"},
		{termLayerLLP, 1, llpECodeRecvCRC, "other"},
		{3, 0, 0, "other"},
		{15, 15, 255, "other"},
	} {
		if got := termNames[termReason(tc.layer, tc.etype, tc.ecode)]; got != tc.want {
			t.Errorf("layer %d type %d code %#x: %q, want %q", tc.layer, tc.etype, tc.ecode, got, tc.want)
		}
	}
}

// TestStatsConnectRejects fails connection setups in each way and checks
// the reason counted on each side.
func TestStatsConnectRejects(t *testing.T) {
	t.Parallel()
	newProv := func(t *testing.T, cfg Config) *Provider {
		p, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	newQP := func(t *testing.T, p *Provider) rdma.QP {
		pd, _ := p.AllocPD()
		cq, _ := p.CreateCQ(16)
		q, err := pd.CreateQP(rdma.QPConfig{SendCQ: cq, RecvCQ: cq})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { q.Close() })
		return q
	}
	connect := func(t *testing.T, p *Provider, ctx context.Context, addr string) error {
		if ctx == nil {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
		}
		_, err := newQP(t, p).Connect(ctx, addr, rdma.ConnParam{})
		return err
	}
	// rawServer accepts one TCP connection and runs serve on it.
	rawServer := func(t *testing.T, serve func(c net.Conn)) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			serve(c)
		}()
		t.Cleanup(func() { ln.Close(); <-done })
		return ln.Addr().String()
	}
	listen := func(t *testing.T, p *Provider) rdma.Listener {
		ln, err := p.Listen(context.Background(), "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return ln
	}

	t.Run("peer-rejects", func(t *testing.T) {
		t.Parallel()
		cp, sp := newProv(t, Config{}), newProv(t, Config{})
		ln := listen(t, sp)
		go func() {
			if req, err := ln.Accept(context.Background()); err == nil {
				req.Reject([]byte("no"))
			}
		}()
		var re *rdma.RejectError
		if err := connect(t, cp, nil, ln.Addr().String()); !errors.As(err, &re) {
			t.Fatalf("connect: %v, want a reject", err)
		}
		onlyLabel(t, "client", cp.Stats().ConnectRejects, "mpa_reject", 1)
		onlyLabel(t, "server", waitStats(t, sp, "server", func(st Stats) bool { return sum(st.ConnectRejects) > 0 }).ConnectRejects, "local_reject", 1)
		if st := cp.Stats(); st.Connections != 0 || st.ConnectionsActive != 0 {
			t.Errorf("a rejected connect counted as a connection: %+v", st)
		}
	})
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		cp := newProv(t, Config{})
		if err := connect(t, cp, nil, addr); err == nil {
			t.Fatal("connect to a closed port succeeded")
		}
		onlyLabel(t, "client", cp.Stats().ConnectRejects, "refused", 1)
	})
	t.Run("invalid-reply", func(t *testing.T) {
		t.Parallel()
		addr := rawServer(t, func(c net.Conn) {
			io.ReadFull(c, make([]byte, mpaHeaderLen))
			c.Write([]byte(strings.Repeat("x", 40)))
			io.Copy(io.Discard, c)
		})
		cp := newProv(t, Config{})
		if err := connect(t, cp, nil, addr); err == nil {
			t.Fatal("connect with a garbage reply succeeded")
		}
		onlyLabel(t, "client", cp.Stats().ConnectRejects, "mpa_invalid", 1)
	})
	t.Run("invalid-request", func(t *testing.T) {
		t.Parallel()
		sp := newProv(t, Config{})
		ln := listen(t, sp)
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		onlyLabel(t, "server", waitStats(t, sp, "server", func(st Stats) bool { return sum(st.ConnectRejects) > 0 }).ConnectRejects, "mpa_invalid", 1)
	})
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		addr := rawServer(t, func(c net.Conn) { io.Copy(io.Discard, c) })
		cp := newProv(t, Config{HandshakeTimeout: 50 * time.Millisecond})
		if err := connect(t, cp, nil, addr); err == nil {
			t.Fatal("connect to a silent peer succeeded")
		}
		onlyLabel(t, "client", cp.Stats().ConnectRejects, "timeout", 1)
		// And a responder waiting for a request that never comes.
		sp := newProv(t, Config{HandshakeTimeout: 50 * time.Millisecond})
		ln := listen(t, sp)
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("MPA ID Req"))
		onlyLabel(t, "server", waitStats(t, sp, "server", func(st Stats) bool { return sum(st.ConnectRejects) > 0 }).ConnectRejects, "timeout", 1)
	})
	t.Run("canceled", func(t *testing.T) {
		t.Parallel()
		addr := rawServer(t, func(c net.Conn) { io.Copy(io.Discard, c) })
		cp := newProv(t, Config{})
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(20*time.Millisecond, cancel)
		if err := connect(t, cp, ctx, addr); err == nil {
			t.Fatal("canceled connect succeeded")
		}
		onlyLabel(t, "client", cp.Stats().ConnectRejects, "canceled", 1)
	})
	t.Run("network", func(t *testing.T) {
		t.Parallel()
		addr := rawServer(t, func(c net.Conn) { io.ReadFull(c, make([]byte, mpaHeaderLen)) })
		cp := newProv(t, Config{})
		if err := connect(t, cp, nil, addr); err == nil {
			t.Fatal("connect to a peer that hangs up succeeded")
		}
		onlyLabel(t, "client", cp.Stats().ConnectRejects, "network", 1)
	})
	t.Run("probe-not-counted", func(t *testing.T) {
		t.Parallel()
		sp := newProv(t, Config{})
		ln := listen(t, sp)
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		// A real reject after the probe is the only count.
		go func() {
			if req, err := ln.Accept(context.Background()); err == nil {
				req.Reject(nil)
			}
		}()
		connect(t, newProv(t, Config{}), nil, ln.Addr().String())
		time.Sleep(20 * time.Millisecond)
		onlyLabel(t, "server", sp.Stats().ConnectRejects, "local_reject", 1)
	})
}
