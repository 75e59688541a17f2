package rdmaperf

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdisk/rdisk/rdma/iwarp"
)

func TestRunAgainstServe(t *testing.T) {
	t.Parallel()
	p, err := iwarp.New(iwarp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ln, err := p.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var clients atomic.Int64
	var connects atomic.Int64
	go Serve(ctx, p, ln, slog.New(slog.DiscardHandler), func(d int) {
		clients.Add(int64(d))
		if d > 0 {
			connects.Add(1)
		}
	})
	for _, op := range []Op{OpWrite, OpRead, OpSend} {
		for _, busy := range []bool{false, true} {
			r, err := Run(ctx, p, ln.Addr().String(), Options{Op: op, Size: 4096, QD: 4, Duration: 200 * time.Millisecond, BusyPoll: busy})
			if err != nil {
				t.Fatalf("%s (busy poll %v): %v", op, busy, err)
			}
			if r.Ops == 0 || r.BW <= 0 || r.Lat.P50 <= 0 || r.Lat.P99 < r.Lat.P50 || r.Bytes != r.Ops*4096 {
				t.Fatalf("%s (busy poll %v): implausible result %+v", op, busy, r)
			}
		}
	}
	// The hook saw the six clients come and (eventually) go.
	deadline := time.Now().Add(10 * time.Second)
	for clients.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if connects.Load() != 6 || clients.Load() != 0 {
		t.Fatalf("hook: %d connects, %d clients left, want 6 and 0", connects.Load(), clients.Load())
	}
}

func TestRequestValidation(t *testing.T) {
	t.Parallel()
	good := request{Op: OpRead, Size: 4096, QD: 8}
	if r, err := parseRequest(good.marshal()); err != nil || r != good {
		t.Fatalf("round trip: %+v %v", r, err)
	}
	for _, bad := range []request{{Op: 3, Size: 1, QD: 1}, {Op: OpWrite, Size: 0, QD: 1}, {Op: OpWrite, Size: 1, QD: 0}, {Op: OpSend, Size: 2 << 20, QD: 1}} {
		if _, err := parseRequest(bad.marshal()); err == nil {
			t.Errorf("parseRequest(%+v) succeeded", bad)
		}
	}
	if _, err := parseRequest([]byte("hello")); err == nil {
		t.Error("short private data accepted")
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add((&request{Op: OpWrite, Size: 4096, QD: 16}).marshal())
	f.Add([]byte("RPRF"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseRequest(b)
		if err == nil && (r.Size == 0 || r.QD == 0 || r.Op > OpSend) {
			t.Fatalf("accepted %+v", r)
		}
	})
}
