package nbd

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// unixPair returns the two ends of a unix stream connection.
func unixPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Error(err)
		}
		acc <- c
	}()
	a, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-acc
	if b == nil {
		t.FailNow()
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// TestSockIO writes more iovecs than one writev takes and more bytes than
// the socket buffer holds (partial writes, EAGAIN waits), with empty
// buffers among them, and reads it all back through sockIO.Read; over a
// unix socket (raw calls) and net.Pipe (the fallback).
func TestSockIO(t *testing.T) {
	for _, kind := range []string{"unix", "pipe"} {
		t.Run(kind, func(t *testing.T) {
			var a, b net.Conn
			if kind == "unix" {
				a, b = unixPair(t)
				if newSockIO(a).rc == nil {
					t.Fatal("a unix socket has no raw descriptor")
				}
			} else {
				a, b = net.Pipe()
				t.Cleanup(func() { a.Close(); b.Close() })
			}
			w, r := newSockIO(a), newSockIO(b)
			var bufs [][]byte
			var want []byte
			for i := range 3000 {
				n := []int{16, 4096, 0, 1, 65536 + 7}[i%5]
				p := pattern(n, uint64(i))
				bufs = append(bufs, p)
				want = append(want, p...)
			}
			type result struct {
				n   int
				err error
			}
			done := make(chan result, 1)
			go func() {
				n, err := w.writev(bufs)
				done <- result{n, err}
			}()
			got := make([]byte, 0, len(want))
			buf := make([]byte, 5000)
			for len(got) < len(want) {
				n, err := r.Read(buf)
				if err != nil {
					t.Fatalf("read after %d bytes: %v", len(got), err)
				}
				got = append(got, buf[:n]...)
			}
			res := <-done
			if res.err != nil || res.n != len(want) {
				t.Fatalf("writev: %d bytes, %v; want %d", res.n, res.err, len(want))
			}
			if !bytes.Equal(got, want) {
				t.Fatal("the bytes read differ from those written")
			}
			// The writer's end closes: EOF.
			a.Close()
			if n, err := r.Read(buf); n != 0 || err != io.EOF {
				t.Errorf("read after the peer closed: %d, %v; want 0, EOF", n, err)
			}
		})
	}
}

// TestSockIOErrors: a read deadline, a read and a write on a closed
// connection, a write to a peer that left.
func TestSockIOErrors(t *testing.T) {
	a, b := unixPair(t)
	r := newSockIO(b)
	b.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	if _, err := r.Read(make([]byte, 10)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read past the deadline: %v, want ErrDeadlineExceeded", err)
	}
	b.Close()
	if _, err := r.Read(make([]byte, 10)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("read on a closed connection: %v, want net.ErrClosed", err)
	}
	if _, err := r.writev([][]byte{[]byte("x")}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write on a closed connection: %v, want net.ErrClosed", err)
	}
	// b is gone: writing to it fails (EPIPE or ECONNRESET) once the
	// buffer cannot take the data.
	w := newSockIO(a)
	var err error
	for range 100 {
		if _, err = w.writev([][]byte{make([]byte, 1<<16)}); err != nil {
			break
		}
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "write" {
		t.Errorf("writing to a peer that left: %v, want a write *net.OpError", err)
	}
}

// TestSockIONoAllocs: a raw read and a raw write allocate nothing.
func TestSockIONoAllocs(t *testing.T) {
	a, b := unixPair(t)
	w, r := newSockIO(a), newSockIO(b)
	out := [][]byte{make([]byte, 16), make([]byte, 4096)}
	bufs := make([][]byte, 2)
	in := make([]byte, 8192)
	run := func() {
		copy(bufs, out)
		if _, err := w.writev(bufs); err != nil {
			t.Fatal(err)
		}
		for n := 0; n < 4096+16; {
			k, err := r.Read(in)
			if err != nil {
				t.Fatal(err)
			}
			n += k
		}
	}
	run()
	if n := testing.AllocsPerRun(200, run); n != 0 {
		t.Errorf("%.1f allocations per write and read, want 0", n)
	}
}
