package stream

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"testing"
)

// frames writes n frames of a 4-byte length then payload to w.
func frames(t *testing.T, w io.Writer, sizes []int) [][]byte {
	var out [][]byte
	var all []byte
	for _, n := range sizes {
		p := make([]byte, n)
		rand.Read(p)
		out = append(out, p)
		all = append(all, byte(n), byte(n>>8), byte(n>>16), byte(n>>24))
		all = append(all, p...)
	}
	go func() {
		w.Write(all)
		if c, ok := w.(io.Closer); ok {
			c.Close()
		}
	}()
	return out
}

func readFrames(t *testing.T, x *Reader, want [][]byte) {
	t.Helper()
	for i, p := range want {
		if err := x.Ensure(4); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		b := x.Buffered()
		n := int(b[0]) | int(b[1])<<8 | int(b[2])<<16 | int(b[3])<<24
		x.Consume(4)
		got := make([]byte, n)
		if i%3 == 2 && n > 10 {
			// Skip the first 10 bytes.
			if err := x.Skip(10); err != nil {
				t.Fatal(err)
			}
			got, p = got[10:], p[10:]
		}
		if err := x.ReadFull(got); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !bytes.Equal(got, p) {
			t.Fatalf("frame %d of %d bytes differs", i, n)
		}
	}
	if err := x.Ensure(1); err != io.EOF {
		t.Fatalf("after the last frame: %v, want EOF", err)
	}
}

var sizes = []int{0, 1, 100, 4096, 9000, 20000, 128 << 10, 3, 5, 64 << 10, 16, 1 << 20, 7}

func TestReader(t *testing.T) {
	for _, tcp := range []bool{false, true} {
		var w io.Writer
		var r io.Reader
		if tcp {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			c1, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			c2, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Close()
			w, r = c1, c2
		} else {
			pr, pw := io.Pipe()
			w, r = pw, pr
		}
		x := New(r)
		reads := 0
		x.BeforeRead = func() { reads++ }
		want := frames(t, w, sizes)
		readFrames(t, x, want)
		if reads == 0 {
			t.Fatal("BeforeRead never called")
		}
		if tcp && x.rv.rc == nil {
			t.Fatal("no vectored reads on a TCP connection")
		}
	}
}
