package target

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/tcp"
)

// Tests of the connect and PDU timeouts (Config.ConnectTimeout,
// TCPPDUTimeout), configured short: each stall must end its connection
// well before the 10 s and 30 s defaults (and the former 10 s setup
// deadline) could, and a connected, idle queue must stay.

const (
	shortTimeout = 300 * time.Millisecond
	// closeWithin is the bound for the target to close a stalled
	// connection: far above shortTimeout, below every default.
	closeWithin = 5 * time.Second
)

// waitClosed reads c until the target closes it, failing if it is still
// open after closeWithin; it returns what the target sent meanwhile.
func waitClosed(t *testing.T, c net.Conn) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(closeWithin))
	b, err := io.ReadAll(c)
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		t.Fatalf("connection still open %v after a stall, with a %v timeout", closeWithin, shortTimeout)
	}
	return b
}

// waitFor polls cond until it holds, failing after closeWithin.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(closeWithin)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, closeWithin)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// portStat returns the counters of transport tr of the target's port 1.
func portStat(tg *Target, tr Transport) PortStats {
	for _, p := range tg.Stats().Ports {
		if p.ID == 1 && p.Transport == string(tr) {
			return p
		}
	}
	return PortStats{}
}

func TestConnectTimeoutTCP(t *testing.T) {
	t.Parallel()
	cfg := Config{ConnectTimeout: shortTimeout}
	t.Run("no ICReq", func(t *testing.T) {
		t.Parallel()
		tg, port := tcpTargetCfg(t, 1<<20, TransportTCP, cfg)
		c, err := net.Dial("tcp", port.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		waitClosed(t, c)
		waitFor(t, "no_icreq counted", func() bool { return portStat(tg, TransportTCP).Rejected["no_icreq"] == 1 })
	})
	t.Run("partial ICReq", func(t *testing.T) {
		t.Parallel()
		tg, port := tcpTargetCfg(t, 1<<20, TransportTCP, cfg)
		c, err := net.Dial("tcp", port.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var ic [tcp.ICSize]byte
		tcp.IC(ic[:]).Encode(tcp.TypeICReq, &tcp.ICFields{})
		c.Write(ic[:20]) // the header and a part of the rest
		waitClosed(t, c)
		waitFor(t, "no_icreq counted", func() bool { return portStat(tg, TransportTCP).Rejected["no_icreq"] == 1 })
	})
	t.Run("ICReq only", func(t *testing.T) {
		t.Parallel()
		tg, port := tcpTargetCfg(t, 1<<20, TransportTCP, cfg)
		q := dialTC(t, port.Addr().String(), 0)
		waitClosed(t, q.c)
		waitFor(t, "connect_timeout counted", func() bool {
			st := portStat(tg, TransportTCP)
			return st.Accepted == 1 && st.Rejected["connect_timeout"] == 1 && st.Live == 0
		})
	})
	t.Run("Connect refused", func(t *testing.T) {
		t.Parallel()
		tg, port := tcpTargetCfg(t, 1<<20, TransportTCP, cfg)
		q := dialTC(t, port.Addr().String(), 0)
		// An I/O queue naming no controller: refused, and the host stays.
		if f := q.connect(1, 31, 7); f.Status == nvmeof.StatusSuccess {
			t.Fatal("Connect of an I/O queue to no controller succeeded")
		}
		waitClosed(t, q.c)
		waitFor(t, "connect_timeout counted", func() bool { return portStat(tg, TransportTCP).Rejected["connect_timeout"] == 1 })
	})
	t.Run("connected queue stays", func(t *testing.T) {
		t.Parallel()
		tg, port := tcpTargetCfg(t, 1<<20, TransportTCP, cfg)
		q, _ := tcpAdmin(t, port.Addr().String(), 0)
		time.Sleep(3 * shortTimeout)
		must(t, q.prop(false, nvmeof.PropCSTS, 0), "get CSTS after the connect timeout")
		if n := portStat(tg, TransportTCP).Rejected["connect_timeout"]; n != 0 {
			t.Fatalf("connect_timeout %d, want 0", n)
		}
	})
}

func TestConnectTimeoutRDMA(t *testing.T) {
	t.Parallel()
	cfg := Config{ConnectTimeout: shortTimeout}
	t.Run("no Connect", func(t *testing.T) {
		t.Parallel()
		tg, port := tcpTargetCfg(t, 1<<20, TransportRDMA, cfg)
		q, err := dialQueue(t, port.Addr().String(), 0, 31, 32)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the queue disconnected", func() bool { return q.qp.Err() != nil })
		waitFor(t, "connect_timeout counted", func() bool {
			st := portStat(tg, TransportRDMA)
			return st.Accepted == 1 && st.Rejected["connect_timeout"] == 1 && st.Live == 0
		})
	})
	t.Run("connected queue stays", func(t *testing.T) {
		t.Parallel()
		tg, port := tcpTargetCfg(t, 1<<20, TransportRDMA, cfg)
		q, _ := admin(t, port.Addr().String(), testNQN, hostNQN, 0)
		time.Sleep(3 * shortTimeout)
		must(t, q.propGet(nvmeof.PropCSTS, false), "get CSTS after the connect timeout")
		if n := portStat(tg, TransportRDMA).Rejected["connect_timeout"]; n != 0 {
			t.Fatalf("connect_timeout %d, want 0", n)
		}
	})
	t.Run("partial MPA request on a shared port", func(t *testing.T) {
		t.Parallel()
		tg, port := tcpTargetCfg(t, 1<<20, TransportBoth, cfg)
		c, err := net.Dial("tcp", port.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("MPA ID Req Frame\x80")) // the key, then a part of the frame header
		waitClosed(t, c)
		waitFor(t, "accept_failed counted", func() bool { return portStat(tg, TransportRDMA).Rejected["accept_failed"] == 1 })
	})
}

func TestTCPPDUTimeout(t *testing.T) {
	t.Parallel()
	cfg := Config{TCPPDUTimeout: shortTimeout}
	identify := func(q *tc) []byte {
		sqe := make(nvmeof.SQE, 64)
		sqe.Identify().Encode(&nvmeof.IdentifyFields{CNS: nvmeof.CNSController})
		q.cid++
		sqe.SetCID(q.cid)
		sqe[1] |= 0x40
		sqe.DPTR().Encode(&nvmeof.SGLFields{Identifier: nvmeof.SGLTransport, Length: 4096})
		return q.build(tcp.TypeCapsuleCmd, 0, func(h []byte) { copy(h[8:], sqe) }, nil)
	}
	for _, tc := range []struct {
		name string
		cut  func(q *tc) []byte // what the host sends before it stalls
	}{
		{"common header", func(q *tc) []byte { return identify(q)[:5] }},
		{"capsule header", func(q *tc) []byte { return identify(q)[:40] }},
		{"in-capsule data", func(q *tc) []byte {
			sqe := make(nvmeof.SQE, 64)
			sqe.RW().Encode(&nvmeof.RWFields{Opcode: nvmeof.IOWrite, NSID: 1, NLB: 7})
			q.cid++
			sqe.SetCID(q.cid)
			sqe[1] |= 0x40
			sqe.DPTR().Encode(&nvmeof.SGLFields{Identifier: nvmeof.SGLInCapsule, Length: 4096})
			pdu := q.build(tcp.TypeCapsuleCmd, 0, func(h []byte) { copy(h[8:], sqe) }, make([]byte, 4096))
			return pdu[:len(pdu)-1000]
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tg, port := tcpTargetCfg(t, 1<<20, TransportTCP, cfg)
			q, _ := tcpAdmin(t, port.Addr().String(), 0)
			if _, err := q.c.Write(tc.cut(q)); err != nil {
				t.Fatal(err)
			}
			waitClosed(t, q.c)
			waitFor(t, "the controller removed", func() bool { return len(tg.Controllers()) == 0 })
		})
	}
	t.Run("idle and slow PDUs stay", func(t *testing.T) {
		t.Parallel()
		_, port := tcpTargetCfg(t, 1<<20, TransportTCP, cfg)
		q, _ := tcpAdmin(t, port.Addr().String(), 0)
		time.Sleep(3 * shortTimeout) // idle between PDUs: not bounded
		pdu := identify(q)
		for _, piece := range [][]byte{pdu[:5], pdu[5:40], pdu[40:]} {
			if _, err := q.c.Write(piece); err != nil {
				t.Fatal(err)
			}
			time.Sleep(shortTimeout / 4) // each PDU whole within the timeout
		}
		h, data := q.recv()
		if h.Type() != tcp.TypeC2HData || len(data) != 4096 {
			t.Fatalf("got a %s PDU with %d bytes, want the Identify data", tcp.TypeName(h.Type()), len(data))
		}
		if h, _ := q.recv(); h.Type() != tcp.TypeCapsuleResp {
			t.Fatalf("got a %s PDU, want the response", tcp.TypeName(h.Type()))
		}
		must(t, q.prop(false, nvmeof.PropCSTS, 0), "get CSTS")
	})
}

// TestTimeoutDefaults checks the defaults and the disabling of the
// timeouts.
func TestTimeoutDefaults(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg         Config
		connect, pd time.Duration
	}{
		{Config{}, DefaultConnectTimeout, DefaultTCPPDUTimeout},
		{Config{ConnectTimeout: -1, TCPPDUTimeout: -1}, 0, 0},
		{Config{ConnectTimeout: time.Minute, TCPPDUTimeout: time.Second}, time.Minute, time.Second},
	} {
		tg, err := New(c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if tg.connectTimeout != c.connect || tg.pduTimeout != c.pd {
			t.Errorf("%+v: timeouts %v, %v; want %v, %v", c.cfg, tg.connectTimeout, tg.pduTimeout, c.connect, c.pd)
		}
		tg.Close()
	}
	if DefaultConnectTimeout != 10*time.Second || DefaultTCPPDUTimeout != 30*time.Second {
		t.Fatalf("defaults %v, %v", DefaultConnectTimeout, DefaultTCPPDUTimeout)
	}
}
