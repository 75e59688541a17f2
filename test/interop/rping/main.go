package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/iwarp"
)

// Protocol constants from rping.c.
const (
	DefaultPort = 7174
	DefaultSize = 64
	// MinSize is RPING_MIN_BUFSIZE: sizeof("2147483647") + sizeof("rdma-ping-%d: ").
	MinSize = 26
	// MaxSize is RPING_BUFSIZE - 1.
	MaxSize = 64*1024 - 1
	// infoLen is sizeof(struct rping_rdma_info).
	infoLen = 16
	// sqDepth is RPING_SQ_DEPTH; the CQ holds twice that, receive queue 2.
	sqDepth = 16
)

// Work request IDs. rping has at most one of each outstanding.
const (
	idRecv uint64 = iota + 1
	idSend
	idRead
	idWrite
)

// Config is one rping run.
type Config struct {
	// Addr is the server's host (client: required; server: "" = any).
	Addr string
	// Port is the rdma_cm port (0 on the server: pick one, see Server.Addr).
	Port int
	// Count is the number of pings (client: 0 = forever; server: the
	// minimum the client must complete, 0 = any).
	Count int
	// Size is the ping data size (client) or the minimum rdma buffer size
	// (server; it accepts any client size up to MaxSize).
	Size int
	// Verify compares the echoed data (client) or checks the read data
	// against rping's pattern (server).
	Verify bool
	// Verbose prints each ping's data like rping -v.
	Verbose bool
	// HexDump routes the connection through an in-process relay that logs
	// every MPA frame and FPDU.
	HexDump bool
	// CRC asks the peer for MPA CRC32c (only used when Provider is nil).
	CRC bool
	// Provider is the rdma provider; nil means a new iwarp provider.
	Provider rdma.Provider
	Logger   *slog.Logger
	// Out receives the "ping data" lines of Verbose (default os.Stdout).
	Out io.Writer
}

func (c *Config) setDefaults() error {
	if c.Size == 0 {
		c.Size = DefaultSize
	}
	if c.Size < MinSize || c.Size > MaxSize {
		return fmt.Errorf("invalid size %d (valid range is %d to %d)", c.Size, MinSize, MaxSize)
	}
	if c.Count < 0 {
		return fmt.Errorf("invalid count %d", c.Count)
	}
	if c.Port < 0 || c.Port > 65535 {
		return fmt.Errorf("invalid port %d", c.Port)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Out == nil {
		c.Out = os.Stdout
	}
	return nil
}

// Result summarises a run.
type Result struct {
	Role          string // "client" or "server"
	Peer          string
	Iterations    int // pings completed (both Sends answered, data moved)
	BytesVerified int64
	Size          int // client: ping size; server: size of the last read
}

func (r Result) String() string {
	return fmt.Sprintf("role=%s peer=%s iterations=%d size=%d bytes_verified=%d",
		r.Role, r.Peer, r.Iterations, r.Size, r.BytesVerified)
}

// ErrDisconnected is returned (wrapped) when the peer ends the connection.
var ErrDisconnected = errors.New("rping: connection closed by peer")

// FillPing writes rping's ping data for iteration ping into buf exactly as
// rping_test_client does: "rdma-ping-%d: ", then characters from start
// (65 + ping mod 58) counting up and wrapping from 'z' (122) to 'A' (65),
// and a final NUL.
func FillPing(buf []byte, ping int) {
	n := copy(buf, fmt.Sprintf("rdma-ping-%d: ", ping))
	c := byte(65 + ping%58)
	for i := n; i < len(buf); i++ {
		buf[i] = c
		c++
		if c > 122 {
			c = 65
		}
	}
	buf[len(buf)-1] = 0
}

// PutInfo encodes struct rping_rdma_info (network byte order).
func PutInfo(b []byte, addr uint64, rkey, size uint32) {
	binary.BigEndian.PutUint64(b[0:8], addr)
	binary.BigEndian.PutUint32(b[8:12], rkey)
	binary.BigEndian.PutUint32(b[12:16], size)
}

// ParseInfo decodes struct rping_rdma_info.
func ParseInfo(b []byte) (addr uint64, rkey, size uint32) {
	return binary.BigEndian.Uint64(b[0:8]), binary.BigEndian.Uint32(b[8:12]), binary.BigEndian.Uint32(b[12:16])
}

// conn is one connected rping endpoint: its QP, CQ, registered buffers and
// the completion bookkeeping.
type conn struct {
	log     *slog.Logger
	pd      rdma.PD
	cq      rdma.CQ
	qp      rdma.QP
	recvMR  rdma.MR // 16-byte receive buffer
	sendMR  rdma.MR // 16-byte send buffer
	rdmaMR  rdma.MR // rdma sink (client) / read target and write source (server)
	startMR rdma.MR // client only: RDMA Read source

	recvWR rdma.RecvWR
	sendWR rdma.SendWR
	rdmaWR rdma.SendWR

	wcs [8]rdma.WC
	got map[uint64]rdma.WC

	waitCtx context.Context
	cancel  context.CancelFunc
	// graceCtx bounds the wait for completions after the QP left the
	// connected state.
	graceCtx    context.Context
	graceCancel context.CancelFunc
}

// flushGrace is how long completions may trail the QP's Done channel.
const flushGrace = 5 * time.Second

func newConn(prov rdma.Provider, log *slog.Logger, rdmaSize, startSize int) (*conn, error) {
	c := &conn{log: log, got: make(map[uint64]rdma.WC)}
	var err error
	fail := func(what string, e error) (*conn, error) {
		c.close()
		return nil, fmt.Errorf("%s: %w", what, e)
	}
	if c.pd, err = prov.AllocPD(); err != nil {
		return fail("alloc pd", err)
	}
	if c.cq, err = prov.CreateCQ(sqDepth * 2); err != nil {
		return fail("create cq", err)
	}
	c.qp, err = c.pd.CreateQP(rdma.QPConfig{
		SendCQ: c.cq, RecvCQ: c.cq,
		MaxSendWR: sqDepth, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1,
	})
	if err != nil {
		return fail("create qp", err)
	}
	if c.recvMR, err = c.pd.RegisterMemory(make([]byte, infoLen), rdma.AccessLocalWrite); err != nil {
		return fail("register recv buffer", err)
	}
	if c.sendMR, err = c.pd.RegisterMemory(make([]byte, infoLen), 0); err != nil {
		return fail("register send buffer", err)
	}
	remote := rdma.AccessLocalWrite | rdma.AccessRemoteRead | rdma.AccessRemoteWrite
	if c.rdmaMR, err = c.pd.RegisterMemory(make([]byte, rdmaSize), remote); err != nil {
		return fail("register rdma buffer", err)
	}
	if startSize > 0 {
		if c.startMR, err = c.pd.RegisterMemory(make([]byte, startSize), remote); err != nil {
			return fail("register start buffer", err)
		}
	}
	c.recvWR = rdma.RecvWR{ID: idRecv, SGL: []rdma.SGE{{MR: c.recvMR, Length: infoLen}}}
	c.sendWR = rdma.SendWR{ID: idSend, Op: rdma.OpSend, Flags: rdma.Signaled,
		SGL: []rdma.SGE{{MR: c.sendMR, Length: infoLen}}}
	c.rdmaWR = rdma.SendWR{Flags: rdma.Signaled, SGL: []rdma.SGE{{MR: c.rdmaMR}}}
	return c, nil
}

// watch makes waits end when the QP leaves the connected state.
func (c *conn) watch(ctx context.Context) {
	c.waitCtx, c.cancel = context.WithCancel(ctx)
	go func() {
		select {
		case <-c.qp.Done():
			c.cancel()
		case <-c.waitCtx.Done():
		}
	}()
}

func (c *conn) close() {
	if c.cancel != nil {
		c.cancel()
	}
	if c.graceCancel != nil {
		c.graceCancel()
	}
	if c.qp != nil {
		_ = c.qp.Close()
	}
	for _, mr := range []rdma.MR{c.startMR, c.rdmaMR, c.sendMR, c.recvMR} {
		if mr != nil {
			_ = mr.Deregister()
		}
	}
	if c.cq != nil {
		_ = c.cq.Close()
	}
	if c.pd != nil {
		_ = c.pd.Close()
	}
}

func (c *conn) postRecv() error {
	if err := c.qp.PostRecv(&c.recvWR); err != nil {
		return fmt.Errorf("post recv: %w", err)
	}
	return nil
}

// send Sends the 16-byte rping_rdma_info in the send buffer.
func (c *conn) send(addr uint64, rkey, size uint32) error {
	PutInfo(c.sendMR.Bytes(), addr, rkey, size)
	if err := c.qp.PostSend(&c.sendWR); err != nil {
		return fmt.Errorf("post send: %w", err)
	}
	return nil
}

func (c *conn) disconnectErr() error {
	if err := c.qp.Err(); err != nil {
		return fmt.Errorf("%w (qp %s: %v)", ErrDisconnected, c.qp.State(), err)
	}
	return fmt.Errorf("%w (qp %s)", ErrDisconnected, c.qp.State())
}

// await waits until a completion for each of ids has arrived and returns
// them, in the order of ids. An awaited WR completing with StatusFlushed, or
// the QP leaving the connected state without completing all of ids within
// flushGrace, returns an error wrapping ErrDisconnected. Any other failed
// completion (awaited or not) returns its *rdma.WCError. Completions of
// other WRs are kept for later awaits; a flushed one that nobody awaits
// (the receive always posted for the peer's next message) is no error.
func (c *conn) await(ctx context.Context, ids ...uint64) ([]rdma.WC, error) {
	for {
		have := 0
		for _, id := range ids {
			if wc, ok := c.got[id]; ok {
				if wc.Status == rdma.StatusFlushed {
					return nil, fmt.Errorf("%s (wr %d) flushed: %w", wc.Op, wc.ID, c.disconnectErr())
				}
				have++
			}
		}
		if have == len(ids) {
			out := make([]rdma.WC, len(ids))
			for i, id := range ids {
				out[i] = c.got[id]
				delete(c.got, id)
			}
			return out, nil
		}
		n := c.cq.Poll(c.wcs[:])
		for i := range n {
			wc := c.wcs[i]
			c.log.Debug("completion", "id", wc.ID, "op", wc.Op, "status", wc.Status, "bytes", wc.ByteLen)
			if wc.Status != rdma.StatusSuccess && wc.Status != rdma.StatusFlushed {
				return nil, fmt.Errorf("%s completion (wr %d) failed: %w; qp %s err=%v",
					wc.Op, wc.ID, wc.Err(), c.qp.State(), c.qp.Err())
			}
			if _, dup := c.got[wc.ID]; dup {
				return nil, fmt.Errorf("unexpected second completion for wr %d (%s, %s)", wc.ID, wc.Op, wc.Status)
			}
			c.got[wc.ID] = wc
		}
		if n > 0 {
			continue
		}
		select {
		case <-c.qp.Done():
			// The QP left the connected state, but completions of work
			// that was already done (a Send written to the socket just
			// before the peer closed) and the flush of the rest may still
			// be on their way: keep waiting, for a bounded time.
			if c.graceCtx == nil {
				c.graceCtx, c.graceCancel = context.WithTimeout(ctx, flushGrace)
			}
			if err := c.cq.Wait(c.graceCtx); err != nil {
				if ctx.Err() != nil {
					return nil, fmt.Errorf("waiting for completion (qp %s): %w", c.qp.State(), ctx.Err())
				}
				return nil, fmt.Errorf("%w; and no completion (not even a flush) of wr %v within %v after that",
					c.disconnectErr(), ids, flushGrace)
			}
			continue
		default:
		}
		if err := c.cq.Wait(c.waitCtx); err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("waiting for completion (qp %s): %w", c.qp.State(), ctx.Err())
			}
			if c.waitCtx.Err() == nil && !errors.Is(err, context.Canceled) {
				return nil, fmt.Errorf("cq wait: %w", err)
			}
			// QP done: loop once more to poll what is left.
		}
	}
}

func (c *conn) checkInfoRecv(wc rdma.WC) error {
	if wc.ByteLen != infoLen {
		return fmt.Errorf("received bogus data, size %d (want %d)", wc.ByteLen, infoLen)
	}
	return nil
}

// RunClient connects to cfg.Addr:cfg.Port and runs cfg.Count pings.
func RunClient(ctx context.Context, cfg Config) (res Result, err error) {
	if err := cfg.setDefaults(); err != nil {
		return res, err
	}
	if cfg.Addr == "" {
		return res, errors.New("client needs -a ADDR")
	}
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	log := cfg.Logger.With("role", "client")
	res = Result{Role: "client", Size: cfg.Size}
	target := net.JoinHostPort(cfg.Addr, strconv.Itoa(cfg.Port))
	res.Peer = target
	prov := cfg.Provider
	if prov == nil {
		p, err := iwarp.New(iwarp.Config{Logger: cfg.Logger, CRC: cfg.CRC})
		if err != nil {
			return res, fmt.Errorf("iwarp provider: %w", err)
		}
		defer p.Close()
		prov = p
	}
	dial := target
	if cfg.HexDump {
		r, err := startRelay("127.0.0.1:0", target, log)
		if err != nil {
			return res, err
		}
		defer r.Close()
		dial = r.Addr().String()
		log.Info("hexdump relay", "dial", dial, "target", target)
	}

	c, err := newConn(prov, log, cfg.Size, cfg.Size)
	if err != nil {
		return res, err
	}
	defer c.close()
	if err := c.postRecv(); err != nil {
		return res, err
	}
	t0 := time.Now()
	reply, err := c.qp.Connect(ctx, dial, rdma.ConnParam{ResponderResources: 1, InitiatorDepth: 1})
	if err != nil {
		return res, fmt.Errorf("connect %s: %w", target, err)
	}
	c.watch(ctx)
	log.Info("connected", "peer", target, "local", c.qp.LocalAddr(), "remote", c.qp.RemoteAddr(),
		"reply_private_data", len(reply), "took", time.Since(t0).Round(time.Microsecond))

	start, sink := c.startMR.Bytes(), c.rdmaMR.Bytes()
	for ping := 0; cfg.Count == 0 || ping < cfg.Count; ping++ {
		FillPing(start, ping)
		clear(sink)
		log.Debug("ping", "n", ping, "start_va", fmt.Sprintf("%#x", c.startMR.VA()), "start_rkey", fmt.Sprintf("%#x", c.startMR.RKey()))
		// Advertise the start buffer; the server RDMA-Reads it and answers.
		if err := c.send(c.startMR.VA(), c.startMR.RKey(), uint32(cfg.Size)); err != nil {
			return res, err
		}
		wcs, err := c.await(ctx, idSend, idRecv)
		if err != nil {
			return res, fmt.Errorf("ping %d: waiting for the server's go-ahead after the read: %w", ping, err)
		}
		if err := c.checkInfoRecv(wcs[1]); err != nil {
			return res, fmt.Errorf("ping %d: %w", ping, err)
		}
		if err := c.postRecv(); err != nil {
			return res, err
		}
		// Advertise the sink; the server RDMA-Writes the data back.
		if err := c.send(c.rdmaMR.VA(), c.rdmaMR.RKey(), uint32(cfg.Size)); err != nil {
			return res, err
		}
		wcs, err = c.await(ctx, idSend, idRecv)
		if err != nil {
			return res, fmt.Errorf("ping %d: waiting for the server's go-ahead after the write: %w", ping, err)
		}
		if err := c.checkInfoRecv(wcs[1]); err != nil {
			return res, fmt.Errorf("ping %d: %w", ping, err)
		}
		if err := c.postRecv(); err != nil {
			return res, err
		}
		if cfg.Verify {
			if !bytes.Equal(start, sink) {
				i := firstDiff(start, sink)
				return res, fmt.Errorf("ping %d: data mismatch at byte %d: sent %q, got back %q",
					ping, i, clip(start, i), clip(sink, i))
			}
			res.BytesVerified += int64(cfg.Size)
		}
		if cfg.Verbose {
			fmt.Fprintf(cfg.Out, "ping data: %s\n", cstr(sink))
		}
		res.Iterations++
	}
	log.Info("pings done, disconnecting", "iterations", res.Iterations, "took", time.Since(t0).Round(time.Millisecond))
	if err := c.qp.Disconnect(); err != nil {
		log.Warn("disconnect", "err", err)
	}
	return res, nil
}

// Server is a listening rping server.
type Server struct {
	cfg   Config
	log   *slog.Logger
	prov  rdma.Provider
	owned bool
	ln    rdma.Listener
	relay *relay
}

// Listen starts an rping server on cfg.Addr:cfg.Port.
func Listen(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger.With("role", "server"), prov: cfg.Provider}
	if s.prov == nil {
		p, err := iwarp.New(iwarp.Config{Logger: cfg.Logger, CRC: cfg.CRC})
		if err != nil {
			return nil, fmt.Errorf("iwarp provider: %w", err)
		}
		s.prov, s.owned = p, true
	}
	addr := net.JoinHostPort(cfg.Addr, strconv.Itoa(cfg.Port))
	listenAt := addr
	if cfg.HexDump {
		listenAt = "127.0.0.1:0"
	}
	ln, err := s.prov.Listen(ctx, listenAt)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("listen %s: %w", listenAt, err)
	}
	s.ln = ln
	if cfg.HexDump {
		r, err := startRelay(addr, ln.Addr().String(), s.log)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.relay = r
		s.log.Info("hexdump relay", "listen", r.Addr(), "provider_listener", ln.Addr())
	}
	s.log.Info("listening", "addr", s.Addr())
	return s, nil
}

// Addr is where clients connect.
func (s *Server) Addr() net.Addr {
	if s.relay != nil {
		return s.relay.Addr()
	}
	return s.ln.Addr()
}

// Close stops listening.
func (s *Server) Close() error {
	if s.relay != nil {
		s.relay.Close()
	}
	if s.ln != nil {
		_ = s.ln.Close()
	}
	if s.owned && s.prov != nil {
		_ = s.prov.Close()
	}
	return nil
}

// ServeOne accepts one connection and serves pings until the client
// disconnects, like rping -s without -P.
func (s *Server) ServeOne(ctx context.Context) (res Result, err error) {
	cfg, log := s.cfg, s.log
	res = Result{Role: "server"}
	req, err := s.ln.Accept(ctx)
	if err != nil {
		return res, fmt.Errorf("accept: %w", err)
	}
	res.Peer = req.RemoteAddr().String()
	log.Info("connect request", "peer", req.RemoteAddr(), "private_data", len(req.PrivateData()),
		"peer_ird", req.ResponderResources(), "peer_ord", req.InitiatorDepth())

	c, err := newConn(s.prov, log, max(cfg.Size, MaxSize+1), 0)
	if err != nil {
		_ = req.Reject(nil)
		return res, err
	}
	defer c.close()
	if err := c.postRecv(); err != nil {
		_ = req.Reject(nil)
		return res, err
	}
	// rdma_accept(id, NULL): IRD/ORD of the request, seen from this side.
	p := rdma.ConnParam{
		ResponderResources: max(1, req.InitiatorDepth()),
		InitiatorDepth:     max(1, req.ResponderResources()),
	}
	if err := req.Accept(ctx, c.qp, p); err != nil {
		return res, fmt.Errorf("accept: %w", err)
	}
	c.watch(ctx)
	log.Info("connected", "peer", res.Peer, "local", c.qp.LocalAddr(), "ird", p.ResponderResources, "ord", p.InitiatorDepth)

	buf := c.rdmaMR.Bytes()
	err = s.serve(ctx, c, buf, &res)
	if errors.Is(err, errEndOfPings) {
		err = nil
	}
	if err == nil && cfg.Count > 0 && res.Iterations < cfg.Count {
		err = fmt.Errorf("client disconnected after %d of %d iterations", res.Iterations, cfg.Count)
	}
	_ = c.qp.Disconnect()
	return res, err
}

var errEndOfPings = errors.New("client disconnected between pings")

func (s *Server) serve(ctx context.Context, c *conn, buf []byte, res *Result) error {
	cfg, log := s.cfg, s.log
	for ping := 0; ; ping++ {
		// Wait for the client's start buffer info. A disconnect here is
		// the normal end of the run.
		wcs, err := c.await(ctx, idRecv)
		if errors.Is(err, ErrDisconnected) {
			log.Info("client disconnected", "iterations", res.Iterations, "qp_err", c.qp.Err())
			return errEndOfPings
		}
		if err != nil {
			return fmt.Errorf("ping %d: waiting for the start buffer info: %w", ping, err)
		}
		if err := c.checkInfoRecv(wcs[0]); err != nil {
			return fmt.Errorf("ping %d: %w", ping, err)
		}
		addr, rkey, size := ParseInfo(c.recvMR.Bytes())
		log.Debug("start buffer", "ping", ping, "addr", fmt.Sprintf("%#x", addr), "rkey", fmt.Sprintf("%#x", rkey), "len", size)
		if size == 0 || int(size) > len(buf) {
			return fmt.Errorf("ping %d: client buffer size %d outside 1..%d", ping, size, len(buf))
		}
		if err := c.postRecv(); err != nil {
			return err
		}
		// RDMA Read the ping data.
		clear(buf[:size])
		c.rdmaWR.ID, c.rdmaWR.Op = idRead, rdma.OpRDMARead
		c.rdmaWR.RemoteAddr, c.rdmaWR.RemoteKey = addr, rkey
		c.rdmaWR.SGL[0].Length = int(size)
		if err := c.qp.PostSend(&c.rdmaWR); err != nil {
			return fmt.Errorf("ping %d: post rdma read: %w", ping, err)
		}
		if _, err := c.await(ctx, idRead); err != nil {
			return fmt.Errorf("ping %d: rdma read of %d bytes at %#x rkey %#x: %w", ping, size, addr, rkey, err)
		}
		data := buf[:size]
		res.Size = int(size)
		if cfg.Verbose {
			fmt.Fprintf(cfg.Out, "server ping data: %s\n", cstr(data))
		}
		if cfg.Verify {
			want := make([]byte, size)
			FillPing(want, ping)
			if !bytes.Equal(data, want) {
				i := firstDiff(want, data)
				return fmt.Errorf("ping %d: read data mismatch at byte %d: want %q, got %q", ping, i, clip(want, i), clip(data, i))
			}
			res.BytesVerified += int64(size)
		}
		// Go ahead (rping's server send buffer is all zeros).
		if err := c.send(0, 0, 0); err != nil {
			return err
		}
		// Wait for the sink info.
		wcs, err = c.await(ctx, idSend, idRecv)
		if err != nil {
			return fmt.Errorf("ping %d: waiting for the sink buffer info: %w", ping, err)
		}
		if err := c.checkInfoRecv(wcs[1]); err != nil {
			return fmt.Errorf("ping %d: %w", ping, err)
		}
		addr, rkey, sinkLen := ParseInfo(c.recvMR.Bytes())
		log.Debug("sink buffer", "ping", ping, "addr", fmt.Sprintf("%#x", addr), "rkey", fmt.Sprintf("%#x", rkey), "len", sinkLen)
		if err := c.postRecv(); err != nil {
			return err
		}
		// RDMA Write strlen(data)+1 bytes back, as rping does.
		n := bytes.IndexByte(data, 0) + 1
		if n == 0 {
			n = len(data)
		}
		if n > int(sinkLen) {
			return fmt.Errorf("ping %d: sink of %d bytes is smaller than the %d bytes to echo", ping, sinkLen, n)
		}
		c.rdmaWR.ID, c.rdmaWR.Op = idWrite, rdma.OpRDMAWrite
		c.rdmaWR.RemoteAddr, c.rdmaWR.RemoteKey = addr, rkey
		c.rdmaWR.SGL[0].Length = n
		if err := c.qp.PostSend(&c.rdmaWR); err != nil {
			return fmt.Errorf("ping %d: post rdma write: %w", ping, err)
		}
		if _, err := c.await(ctx, idWrite); err != nil {
			return fmt.Errorf("ping %d: rdma write of %d bytes to %#x rkey %#x: %w", ping, n, addr, rkey, err)
		}
		// Tell the client to begin again.
		if err := c.send(0, 0, 0); err != nil {
			return err
		}
		if _, err := c.await(ctx, idSend); err != nil {
			return fmt.Errorf("ping %d: final go-ahead: %w", ping, err)
		}
		res.Iterations++
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// clip returns up to 16 bytes around offset i for error messages.
func clip(b []byte, i int) []byte {
	lo, hi := max(0, i-8), min(len(b), i+8)
	return b[lo:hi]
}

func cstr(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rping", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		server  = fs.Bool("s", false, "server side")
		client  = fs.Bool("c", false, "client side")
		addr    = fs.String("a", "", "address (client: server address; server: address to bind, default any)")
		port    = fs.Int("p", DefaultPort, "port")
		count   = fs.Int("C", 0, "ping count (client: 0 = forever; server: fail if the client does fewer)")
		size    = fs.Int("S", DefaultSize, "ping data size")
		verify  = fs.Bool("V", false, "validate ping data")
		verbose = fs.Bool("v", false, "display ping data to stdout")
		debug   = fs.Bool("d", false, "debug logging")
		hexdump = fs.Bool("hexdump", false, "relay the connection in-process and log every MPA frame and FPDU")
		crc     = fs.Bool("crc", false, "ask the peer for MPA CRC32c (siw enables it when either side asks)")
		timeout = fs.Duration("timeout", 2*time.Minute, "give up after this long (0 = never)")
	)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port] [-hexdump] [-crc]\n"+
			"       rping -c [-vVd] [-S size] [-C count] -a addr [-p port] [-hexdump] [-crc]\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *server == *client || fs.NArg() != 0 {
		fs.Usage()
		return 2
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	cfg := Config{Addr: *addr, Port: *port, Count: *count, Size: *size, Verify: *verify,
		Verbose: *verbose, HexDump: *hexdump, CRC: *crc, Logger: log, Out: stdout}
	ctx := context.Background()
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}

	var (
		res Result
		err error
	)
	if *client {
		res, err = RunClient(ctx, cfg)
	} else {
		var s *Server
		s, err = Listen(ctx, cfg)
		if err == nil {
			res, err = s.ServeOne(ctx)
			s.Close()
		}
	}
	verdict := "PASS"
	if err != nil {
		verdict = "FAIL"
		log.Error("rping failed", "role", res.Role, "iterations", res.Iterations, "err", err)
	}
	log.Info("rping summary", "verdict", verdict, "role", res.Role, "peer", res.Peer,
		"iterations", res.Iterations, "size", res.Size, "bytes_verified", res.BytesVerified)
	fmt.Fprintf(stdout, "RPING-GO %s: %s %s\n", roleName(*client), verdict, res)
	if err != nil {
		fmt.Fprintf(stdout, "RPING-GO %s: error: %v\n", roleName(*client), err)
		return 1
	}
	return 0
}

func roleName(client bool) string {
	if client {
		return "client"
	}
	return "server"
}
