package iwarp

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/rdmatest"
)

const benchDepth = 16

var benchSizes = []int{4 << 10, 128 << 10, 1 << 20}

func benchProvider() rdma.Provider {
	p, err := New(Config{})
	if err != nil {
		panic(err)
	}
	return p
}

// pollOne blocks until one completion is polled into wc.
func pollOne(b *testing.B, cq rdma.CQ, wc []rdma.WC) {
	for cq.Poll(wc[:1]) == 0 {
		if err := cq.Wait(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	if wc[0].Status != rdma.StatusSuccess {
		b.Fatalf("completion: %s", wc[0].Status)
	}
}

func benchRDMA(b *testing.B, op rdma.Opcode, size int) {
	c, s := rdmatest.Pair(b, benchProvider, rdmatest.PairConfig{BufSize: benchDepth * size})
	wr := rdma.SendWR{Op: op, Flags: rdma.Signaled, SGL: make([]rdma.SGE, 1), RemoteKey: s.MR.RKey()}
	wc := make([]rdma.WC, 1)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	inflight := 0
	for i := 0; i < b.N; i++ {
		if inflight == benchDepth {
			pollOne(b, c.SendCQ, wc)
			inflight--
		}
		slot := i % benchDepth
		wr.SGL[0] = rdma.SGE{MR: c.MR, Offset: slot * size, Length: size}
		wr.RemoteAddr = s.MR.VA() + uint64(slot*size)
		if err := c.QP.PostSend(&wr); err != nil {
			b.Fatal(err)
		}
		inflight++
	}
	for ; inflight > 0; inflight-- {
		pollOne(b, c.SendCQ, wc)
	}
}

func BenchmarkRDMAWrite(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(sizeName(n), func(b *testing.B) { benchRDMA(b, rdma.OpRDMAWrite, n) })
	}
}

func BenchmarkRDMARead(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(sizeName(n), func(b *testing.B) { benchRDMA(b, rdma.OpRDMARead, n) })
	}
}

// BenchmarkSend64 measures 64-byte Send round trips at depth 16: the server
// echoes each message back with a Send (iWARP has no receiver-not-ready
// retry, so the echo doubles as the ULP's credit return).
func BenchmarkSend64(b *testing.B) {
	const size = 64
	c, s := rdmatest.Pair(b, benchProvider, rdmatest.PairConfig{BufSize: 64 << 10, PostRecvs: 2 * benchDepth, RecvSize: size})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go echo(ctx, s, size)
	var rwr rdma.RecvWR
	rwr.SGL = make([]rdma.SGE, 1)
	wr := rdma.SendWR{Op: rdma.OpSend, SGL: []rdma.SGE{{MR: c.MR, Offset: 32 << 10, Length: size}}}
	wc := make([]rdma.WC, 1)
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	sent, got := 0, 0
	for ; sent < min(benchDepth, b.N); sent++ {
		if err := c.QP.PostSend(&wr); err != nil {
			b.Fatal(err)
		}
	}
	for got < b.N {
		pollOne(b, c.RecvCQ, wc)
		got++
		rwr.ID = wc[0].ID
		rwr.SGL[0] = rdma.SGE{MR: c.MR, Offset: int(wc[0].ID) * size, Length: size}
		if err := c.QP.PostRecv(&rwr); err != nil {
			b.Fatal(err)
		}
		if sent < b.N {
			if err := c.QP.PostSend(&wr); err != nil {
				b.Fatal(err)
			}
			sent++
		}
	}
}

// echo answers every message received on e with a Send of the same size.
func echo(ctx context.Context, e *rdmatest.End, size int) {
	wc := make([]rdma.WC, 32)
	var rwr rdma.RecvWR
	rwr.SGL = make([]rdma.SGE, 1)
	wr := rdma.SendWR{Op: rdma.OpSend, SGL: []rdma.SGE{{MR: e.MR, Offset: 32 << 10, Length: size}}}
	for {
		k := e.RecvCQ.Poll(wc)
		if k == 0 {
			if e.RecvCQ.Wait(ctx) != nil {
				return
			}
			continue
		}
		for _, w := range wc[:k] {
			if w.Status != rdma.StatusSuccess {
				return
			}
			rwr.ID = w.ID
			rwr.SGL[0] = rdma.SGE{MR: e.MR, Offset: int(w.ID) * size, Length: size}
			if e.QP.PostRecv(&rwr) != nil || e.QP.PostSend(&wr) != nil {
				return
			}
		}
	}
}

// BenchmarkTCPStream is the baseline: one loopback TCP stream, the
// receiver reading into a buffer, in the same run as the RDMA benchmarks.
func BenchmarkTCPStream(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(sizeName(n), func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			done := make(chan error, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					done <- err
					return
				}
				defer c.Close()
				buf := make([]byte, n)
				total := int64(b.N) * int64(n)
				for total > 0 {
					k, err := io.ReadFull(c, buf[:min(int64(n), total)])
					total -= int64(k)
					if err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			c, err := net.Dial("tcp", "127.0.0.1:"+fmt.Sprint(ln.Addr().(*net.TCPAddr).Port))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			buf := make([]byte, n)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}
