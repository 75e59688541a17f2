package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/rdma/iwarp"
)

// Ping data printed by the kernel's `rping -c -C 10 -V -v` (rdma-core 44)
// in the lab's reference run (../shared/lab/results/a-siw-loopback.log).
var kernelPingData = map[int]string{
	0: "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr",
	1: "rdma-ping-1: BCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrs",
	9: "rdma-ping-9: JKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyzA",
}

func TestFillPingMatchesKernelRping(t *testing.T) {
	t.Parallel()
	for ping, want := range kernelPingData {
		buf := make([]byte, DefaultSize)
		FillPing(buf, ping)
		if buf[len(buf)-1] != 0 {
			t.Errorf("ping %d: last byte %#x, want NUL", ping, buf[len(buf)-1])
		}
		if got := cstr(buf); got != want {
			t.Errorf("ping %d:\n got %q\nwant %q", ping, got, want)
		}
	}
	// The start character wraps after 58 pings (A..z).
	a, b := make([]byte, 100), make([]byte, 100)
	FillPing(a, 1)
	FillPing(b, 59)
	if a[13] != b[14] || a[13] != 'B' {
		t.Errorf("start character after wrap: ping 1 %q, ping 59 %q", a[13], b[14])
	}
}

func TestInfoLayout(t *testing.T) {
	t.Parallel()
	b := make([]byte, infoLen)
	PutInfo(b, 0x0102030405060708, 0x0a0b0c0d, 64)
	want := "0102030405060708" + "0a0b0c0d" + "00000040"
	if got := hex.EncodeToString(b); got != want {
		t.Fatalf("rping_rdma_info = %s, want %s (big-endian buf, rkey, size)", got, want)
	}
	a, k, s := ParseInfo(b)
	if a != 0x0102030405060708 || k != 0x0a0b0c0d || s != 64 {
		t.Fatalf("ParseInfo = %#x %#x %d", a, k, s)
	}
}

// Frames captured from the kernel (siw on Linux 6.1) in the lab's
// c-siw-mpa-capture reference run.
const (
	kernelMPAReq = "4d504120494420526571204672616d6510020024008000000000000020001f00000000000000000000000000000000000000000000000000"
)

func TestDecodeKernelFrames(t *testing.T) {
	t.Parallel()
	req, _ := hex.DecodeString(kernelMPAReq)
	n, line, ok := decodeMPA(req)
	if n != 56 || !ok {
		t.Fatalf("decodeMPA = %d, %q, %v", n, line, ok)
	}
	for _, s := range []string{`"MPA ID Req Frame"`, "enh=1", "rev=2", "pd_len=36", "ird=128", "ord=0", "ulp_private_data=32"} {
		if !strings.Contains(line, s) {
			t.Errorf("MPA line %q lacks %q", line, s)
		}
	}
	if n, _, _ := decodeMPA(req[:30]); n != 0 {
		t.Errorf("partial MPA frame: n = %d, want 0", n)
	}

	// The 88-byte Send FPDU (NVMe Fabrics Connect) the kernel sent next.
	send := make([]byte, 88)
	hdr, _ := hex.DecodeString("005241430000000000000000000000010000000000000000")
	copy(send, hdr)
	n, line = decodeFPDU(send)
	if n != 88 {
		t.Fatalf("decodeFPDU length = %d, want 88 (%s)", n, line)
	}
	for _, s := range []string{"ulpdu=82", "Send", "T=false", "L=true", "qn=0", "msn=1", "mo=0", "payload=64", "crc=0"} {
		if !strings.Contains(line, s) {
			t.Errorf("FPDU line %q lacks %q", line, s)
		}
	}
	if n, _ := decodeFPDU(send[:87]); n != 0 {
		t.Errorf("partial FPDU: n = %d, want 0", n)
	}

	// A tap fed byte by byte frames the same stream.
	var logBuf bytes.Buffer
	tp := &tap{log: slog.New(slog.NewTextHandler(&logBuf, nil)), dir: "test"}
	stream := append(append([]byte{}, req...), send...)
	for i := range stream {
		tp.Write(stream[i : i+1])
	}
	if tp.n != 1 || len(tp.buf) != 0 || tp.raw {
		t.Errorf("tap: fpdus=%d leftover=%d raw=%v\n%s", tp.n, len(tp.buf), tp.raw, logBuf.String())
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// runPair runs our server and our client against each other over
// 127.0.0.1 (port 0), each with its own iwarp provider.
func runPair(t *testing.T, srvCfg, cliCfg Config) (srv, cli Result, srvErr, cliErr error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	log := testLogger(t)
	for _, c := range []*Config{&srvCfg, &cliCfg} {
		p, err := iwarp.New(iwarp.Config{Logger: log, CRC: c.CRC})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		c.Provider, c.Out = p, io.Discard
		if c.Logger == nil {
			c.Logger = log
		}
	}
	srvCfg.Addr, srvCfg.Port = "127.0.0.1", 0
	s, err := Listen(ctx, srvCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, port, _ := net.SplitHostPort(s.Addr().String())
	cliCfg.Addr = "127.0.0.1"
	cliCfg.Port, _ = strconv.Atoi(port)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		srv, srvErr = s.ServeOne(ctx)
	}()
	cli, cliErr = RunClient(ctx, cliCfg)
	wg.Wait()
	return
}

func TestLoopback(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		size    int
		count   int
		hexdump bool
		crc     bool // client asks for CRC
	}{
		{"default-64B", 0, 20, false, false},
		{"min-size", MinSize, 3, false, false},
		{"4KiB", 4096, 10, false, false},
		{"max-size", MaxSize, 4, false, false},
		{"hexdump-relay", 0, 5, true, false},
		{"crc-max-size", MaxSize, 3, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			size := tc.size
			if size == 0 {
				size = DefaultSize
			}
			srv, cli, srvErr, cliErr := runPair(t,
				Config{Count: tc.count, Verify: true, HexDump: tc.hexdump},
				Config{Count: tc.count, Size: tc.size, Verify: true, HexDump: tc.hexdump, CRC: tc.crc})
			if cliErr != nil || srvErr != nil {
				t.Fatalf("client: %v\nserver: %v", cliErr, srvErr)
			}
			want := int64(tc.count * size)
			if cli.Iterations != tc.count || cli.BytesVerified != want {
				t.Errorf("client %s, want %d iterations, %d bytes verified", cli, tc.count, want)
			}
			if srv.Iterations != tc.count || srv.BytesVerified != want || srv.Size != size {
				t.Errorf("server %s, want %d iterations of %d bytes, %d verified", srv, tc.count, size, want)
			}
		})
	}
}

// With CRC asked by the client, the relay sees CRC32c on every FPDU of both
// directions, and every one checks out.
func TestHexdumpCRC(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	_, _, srvErr, cliErr := runPair(t,
		Config{Count: 2, Verify: true, Logger: log},
		Config{Count: 2, Size: 3000, Verify: true, HexDump: true, CRC: true, Logger: log})
	if cliErr != nil || srvErr != nil {
		t.Fatalf("client: %v\nserver: %v", cliErr, srvErr)
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if !strings.Contains(out, "C=1") {
		t.Errorf("no MPA frame with the C bit:\n%s", out)
	}
	fpdus, ok := strings.Count(out, "wire: FPDU"), strings.Count(out, "crc=ok(le)")
	if fpdus < 10 || ok != fpdus || strings.Contains(out, "crc=BAD") {
		t.Errorf("%d FPDUs, %d with a good little-endian CRC32c:\n%s", fpdus, ok, out)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// The server's -C is a minimum: a client doing fewer pings fails the server.
func TestServerCountNotReached(t *testing.T) {
	t.Parallel()
	srv, cli, srvErr, cliErr := runPair(t, Config{Count: 5}, Config{Count: 2, Verify: true})
	if cliErr != nil {
		t.Fatalf("client: %v", cliErr)
	}
	if cli.Iterations != 2 || srv.Iterations != 2 {
		t.Errorf("iterations client %d server %d, want 2", cli.Iterations, srv.Iterations)
	}
	if srvErr == nil || !strings.Contains(srvErr.Error(), "2 of 5") {
		t.Errorf("server error = %v, want \"2 of 5 iterations\"", srvErr)
	}
}

func TestClientConnectRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = RunClient(ctx, Config{Addr: "127.0.0.1", Port: port, Count: 1, Logger: testLogger(t)})
	if err == nil {
		t.Fatal("client connected to a closed port")
	}
}

// The command line: our client (via run) against our server.
func TestCommandLine(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := Listen(ctx, Config{Addr: "127.0.0.1", Count: 3, Verify: true, Logger: testLogger(t), Out: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srvErr := make(chan error, 1)
	go func() {
		_, err := s.ServeOne(ctx)
		srvErr <- err
	}()
	_, port, _ := net.SplitHostPort(s.Addr().String())
	var stdout, stderr bytes.Buffer
	rc := run([]string{"-c", "-a", "127.0.0.1", "-p", port, "-C", "3", "-V", "-v", "-timeout", "50s"}, &stdout, &stderr)
	if rc != 0 {
		t.Fatalf("rc=%d\nstdout:\n%s\nstderr:\n%s", rc, stdout.String(), stderr.String())
	}
	if err := <-srvErr; err != nil {
		t.Fatalf("server: %v", err)
	}
	out := stdout.String()
	for _, s := range []string{"ping data: " + kernelPingData[0], "RPING-GO client: PASS", "iterations=3", "bytes_verified=192"} {
		if !strings.Contains(out, s) {
			t.Errorf("stdout lacks %q:\n%s", s, out)
		}
	}
}

func TestCommandLineUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{},
		{"-s", "-c"},
		{"-c", "-a", "127.0.0.1", "-S", "10"},
		{"-c", "-a", "127.0.0.1", "extra"},
	} {
		var stdout, stderr bytes.Buffer
		if rc := run(args, &stdout, &stderr); rc == 0 {
			t.Errorf("run(%q) = 0, want failure", args)
		}
	}
	if err := (&Config{Size: 10}).setDefaults(); err == nil {
		t.Errorf("size 10 accepted")
	}
}
