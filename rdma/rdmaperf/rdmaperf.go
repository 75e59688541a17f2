package rdmaperf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/rdisk/rdisk/internal/latency"
	"github.com/rdisk/rdisk/rdma"
)

// Op is the measured operation.
type Op uint8

// Operations.
const (
	OpWrite Op = iota
	OpRead
	OpSend
)

// ParseOp parses "write", "read" or "send".
func ParseOp(s string) (Op, error) {
	switch s {
	case "write":
		return OpWrite, nil
	case "read":
		return OpRead, nil
	case "send":
		return OpSend, nil
	}
	return 0, fmt.Errorf("unknown operation %q (want write, read or send)", s)
}

func (o Op) String() string {
	switch o {
	case OpWrite:
		return "write"
	case OpRead:
		return "read"
	case OpSend:
		return "send"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

const (
	magic       = "RPRF"
	version     = 1
	reqLen      = 16
	repLen      = 16
	maxSize     = 64 << 20
	maxQD       = 1024
	maxSendSize = 1 << 20
)

// request is the client's connect private data.
type request struct {
	Op   Op
	Size uint32
	QD   uint32
}

func (r *request) marshal() []byte {
	b := make([]byte, reqLen)
	copy(b, magic)
	b[4] = version
	b[5] = byte(r.Op)
	binary.BigEndian.PutUint32(b[8:], r.Size)
	binary.BigEndian.PutUint32(b[12:], r.QD)
	return b
}

func parseRequest(b []byte) (request, error) {
	var r request
	if len(b) < reqLen || string(b[:4]) != magic {
		return r, errors.New("not an rdma-perf client")
	}
	if b[4] != version {
		return r, fmt.Errorf("rdma-perf version %d, want %d", b[4], version)
	}
	r.Op = Op(b[5])
	r.Size = binary.BigEndian.Uint32(b[8:])
	r.QD = binary.BigEndian.Uint32(b[12:])
	if r.Op > OpSend || r.Size == 0 || r.Size > maxSize || r.QD == 0 || r.QD > maxQD || (r.Op == OpSend && r.Size > maxSendSize) {
		return r, fmt.Errorf("bad rdma-perf request: op %d size %d depth %d", r.Op, r.Size, r.QD)
	}
	return r, nil
}

// Serve accepts rdma-perf clients on ln until ctx is done. Each client is
// served on its own goroutine; hook, if not nil, is called with +1 when a
// client connects and -1 when it leaves (rdisk sizes GOMAXPROCS with it).
func Serve(ctx context.Context, p rdma.Provider, ln rdma.Listener, log *slog.Logger, hook func(delta int)) error {
	for {
		req, err := ln.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accepting: %w", err)
		}
		go func() {
			if hook != nil {
				hook(1)
				defer hook(-1)
			}
			if err := serveOne(ctx, p, req); err != nil {
				log.Warn("rdma-perf client failed", "peer", req.RemoteAddr(), "err", err)
			} else {
				log.Info("rdma-perf client done", "peer", req.RemoteAddr())
			}
		}()
	}
}

type endpoint struct {
	pd       rdma.PD
	scq, rcq rdma.CQ
	qp       rdma.QP
	buf      []byte
	mr       rdma.MR
}

func newEndpoint(p rdma.Provider, bufSize, depth int) (*endpoint, error) {
	e := &endpoint{}
	var err error
	if e.pd, err = p.AllocPD(); err != nil {
		return nil, fmt.Errorf("allocating PD: %w", err)
	}
	if e.scq, err = p.CreateCQ(2 * depth); err != nil {
		return nil, fmt.Errorf("creating CQ: %w", err)
	}
	if e.rcq, err = p.CreateCQ(2 * depth); err != nil {
		return nil, fmt.Errorf("creating CQ: %w", err)
	}
	if e.qp, err = e.pd.CreateQP(rdma.QPConfig{SendCQ: e.scq, RecvCQ: e.rcq, MaxSendWR: 2 * depth, MaxRecvWR: 2 * depth, MaxSendSGE: 1, MaxRecvSGE: 1}); err != nil {
		return nil, fmt.Errorf("creating QP: %w", err)
	}
	e.buf = make([]byte, bufSize)
	if e.mr, err = e.pd.RegisterMemory(e.buf, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead); err != nil {
		return nil, fmt.Errorf("registering %d bytes: %w", bufSize, err)
	}
	return e, nil
}

func (e *endpoint) close() {
	if e.qp != nil {
		e.qp.Close()
	}
	if e.mr != nil {
		e.mr.Deregister()
	}
	if e.scq != nil {
		e.scq.Close()
	}
	if e.rcq != nil {
		e.rcq.Close()
	}
	if e.pd != nil {
		e.pd.Close()
	}
}

func serveOne(ctx context.Context, p rdma.Provider, cr rdma.ConnRequest) error {
	r, err := parseRequest(cr.PrivateData())
	if err != nil {
		cr.Reject(nil)
		return err
	}
	size, depth := int(r.Size), int(r.QD)
	e, err := newEndpoint(p, size*depth, depth)
	if err != nil {
		cr.Reject(nil)
		return err
	}
	defer e.close()
	if r.Op == OpSend {
		for i := 0; i < depth; i++ {
			if err := e.qp.PostRecv(&rdma.RecvWR{ID: uint64(i), SGL: []rdma.SGE{{MR: e.mr, Offset: i * size, Length: size}}}); err != nil {
				cr.Reject(nil)
				return fmt.Errorf("posting receives: %w", err)
			}
		}
	}
	rep := make([]byte, repLen)
	binary.BigEndian.PutUint64(rep[0:], e.mr.VA())
	binary.BigEndian.PutUint32(rep[8:], e.mr.RKey())
	binary.BigEndian.PutUint32(rep[12:], uint32(len(e.buf)))
	if err := cr.Accept(ctx, e.qp, rdma.ConnParam{PrivateData: rep}); err != nil {
		return fmt.Errorf("accepting: %w", err)
	}
	if r.Op != OpSend {
		select {
		case <-e.qp.Done():
		case <-ctx.Done():
		}
		return nil
	}
	// Echo a zero-length Send for every message: the client's credit.
	wc := make([]rdma.WC, 32)
	var rwr rdma.RecvWR
	rwr.SGL = make([]rdma.SGE, 1)
	ack := rdma.SendWR{Op: rdma.OpSend}
	for {
		n := e.rcq.Poll(wc)
		if n == 0 {
			// A disconnect flushes the posted receives, which ends the loop.
			if err := e.rcq.Wait(ctx); err != nil {
				return nil
			}
			continue
		}
		for _, w := range wc[:n] {
			if w.Status != rdma.StatusSuccess {
				return nil // flushed at disconnect
			}
			rwr.ID = w.ID
			rwr.SGL[0] = rdma.SGE{MR: e.mr, Offset: int(w.ID) * size, Length: size}
			if err := e.qp.PostRecv(&rwr); err != nil {
				return nil
			}
			if err := e.qp.PostSend(&ack); err != nil {
				return nil
			}
		}
	}
}

// Options shape a client run.
type Options struct {
	Op       Op
	Size     int
	QD       int
	Duration time.Duration
	// BusyPoll polls the completion queue without ever sleeping on it,
	// as perftest does unless given -e (events); otherwise the client
	// waits as the target's queues do (rdma.CQ Wait: a polling budget, then
	// the completion channel).
	BusyPoll bool
}

// Result is what a client run measured.
type Result struct {
	Op         string  `json:"op"`
	Size       int     `json:"size"`
	QD         int     `json:"qd"`
	Seconds    float64 `json:"seconds"`
	Ops        uint64  `json:"ops"`
	Bytes      uint64  `json:"bytes"`
	BW         float64 `json:"bw_bytes_per_sec"`
	MsgsPerSec float64 `json:"msgs_per_sec"`
	Lat        LatUS   `json:"lat_us"`
}

// LatUS is latency in microseconds.
type LatUS struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

// Run connects to an rdma-perf server at addr and measures.
func Run(ctx context.Context, p rdma.Provider, addr string, o Options) (*Result, error) {
	if o.Size <= 0 || o.Size > maxSize || (o.Op == OpSend && o.Size > maxSendSize) {
		return nil, fmt.Errorf("size %d out of range (1 byte to %d MiB; sends to %d MiB)", o.Size, maxSize>>20, maxSendSize>>20)
	}
	if o.QD <= 0 || o.QD > maxQD {
		return nil, fmt.Errorf("queue depth %d out of range (1 to %d)", o.QD, maxQD)
	}
	if o.Duration <= 0 {
		return nil, fmt.Errorf("duration must be positive")
	}
	e, err := newEndpoint(p, o.Size*o.QD, o.QD)
	if err != nil {
		return nil, err
	}
	defer e.close()
	if o.Op == OpSend {
		for i := 0; i < o.QD; i++ {
			if err := e.qp.PostRecv(&rdma.RecvWR{ID: uint64(i)}); err != nil {
				return nil, fmt.Errorf("posting receives: %w", err)
			}
		}
	}
	req := request{Op: o.Op, Size: uint32(o.Size), QD: uint32(o.QD)}
	rep, err := e.qp.Connect(ctx, addr, rdma.ConnParam{PrivateData: req.marshal()})
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", addr, err)
	}
	if len(rep) < repLen {
		return nil, fmt.Errorf("server %s sent %d bytes of reply private data, want %d", addr, len(rep), repLen)
	}
	rva := binary.BigEndian.Uint64(rep[0:])
	rkey := binary.BigEndian.Uint32(rep[8:])
	rlen := int(binary.BigEndian.Uint32(rep[12:]))
	if rlen < o.Size*o.QD {
		return nil, fmt.Errorf("server buffer of %d bytes is smaller than %d", rlen, o.Size*o.QD)
	}
	return e.measure(ctx, o, rva, rkey)
}

func (e *endpoint) measure(ctx context.Context, o Options, rva uint64, rkey uint32) (*Result, error) {
	var hist latency.Histogram
	posted := make([]time.Time, o.QD)
	wr := rdma.SendWR{Flags: rdma.Signaled, SGL: make([]rdma.SGE, 1), RemoteKey: rkey}
	cq := e.scq
	switch o.Op {
	case OpWrite:
		wr.Op = rdma.OpRDMAWrite
	case OpRead:
		wr.Op = rdma.OpRDMARead
	case OpSend:
		wr.Op = rdma.OpSend
		wr.Flags = 0
		cq = e.rcq // the server's acknowledgement completes a Send
	}
	var rwr rdma.RecvWR
	flags := wr.Flags
	// post posts the WR of slot; more chains it to the next one (one
	// doorbell for the WRs a batch of completions frees).
	post := func(slot int, now time.Time, more bool) error {
		wr.ID = uint64(slot)
		wr.SGL[0] = rdma.SGE{MR: e.mr, Offset: slot * o.Size, Length: o.Size}
		wr.RemoteAddr = rva + uint64(slot*o.Size)
		wr.Flags = flags
		if more {
			wr.Flags |= rdma.More
		}
		posted[slot] = now
		return e.qp.PostSend(&wr)
	}
	start := time.Now()
	end := start.Add(o.Duration)
	for i := 0; i < o.QD; i++ {
		if err := post(i, start, i < o.QD-1); err != nil {
			return nil, fmt.Errorf("posting: %w", err)
		}
	}
	repost := make([]int, 0, o.QD)
	// Sends complete in order through acknowledgements; map them to slots
	// in posting order.
	nextAck := 0
	inflight := o.QD
	wc := make([]rdma.WC, 32)
	empty := 0
	for inflight > 0 {
		n := cq.Poll(wc)
		if n == 0 {
			if o.BusyPoll {
				if empty++; empty%1024 == 0 {
					if err := ctx.Err(); err != nil {
						return nil, fmt.Errorf("waiting for completions: %w", err)
					}
					runtime.Gosched()
				}
				continue
			}
			if err := cq.Wait(ctx); err != nil {
				return nil, fmt.Errorf("waiting for completions: %w", err)
			}
			continue
		}
		now := time.Now()
		for _, w := range wc[:n] {
			if w.Status != rdma.StatusSuccess {
				return nil, fmt.Errorf("%s completed with %s (QP: %v)", w.Op, w.Status, e.qp.Err())
			}
			slot := int(w.ID)
			if o.Op == OpSend {
				slot = nextAck
				nextAck = (nextAck + 1) % o.QD
				rwr.ID = w.ID
				if err := e.qp.PostRecv(&rwr); err != nil {
					return nil, fmt.Errorf("posting receive: %w", err)
				}
			}
			hist.Record(now.Sub(posted[slot]))
			inflight--
			if now.Before(end) {
				repost = append(repost, slot)
			}
		}
		for i, slot := range repost {
			if err := post(slot, now, i < len(repost)-1); err != nil {
				return nil, fmt.Errorf("posting: %w", err)
			}
			inflight++
		}
		repost = repost[:0]
	}
	elapsed := time.Since(start).Seconds()
	e.qp.Disconnect()
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	ops := hist.Count()
	return &Result{
		Op: o.Op.String(), Size: o.Size, QD: o.QD, Seconds: elapsed, Ops: ops, Bytes: ops * uint64(o.Size),
		BW: float64(ops) * float64(o.Size) / elapsed, MsgsPerSec: float64(ops) / elapsed,
		Lat: LatUS{Mean: us(hist.Mean()), P50: us(hist.Percentile(50)), P99: us(hist.Percentile(99)), P999: us(hist.Percentile(99.9)), Max: us(hist.Max())},
	}, nil
}
