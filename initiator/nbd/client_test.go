package nbd

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"testing"

	"github.com/rdisk/rdisk/blockdev/blockdevtest"
)

// testClient is a minimal NBD client for tests.
type testClient struct {
	t      testing.TB
	nc     net.Conn
	br     *bufio.Reader
	size   uint64
	tflags uint16
	// block size info from GO
	minBS, prefBS, maxBS uint32
}

// newMem returns a fake device, closed at cleanup.
func newMem(t testing.TB, cfg blockdevtest.MemConfig) *blockdevtest.Mem {
	t.Helper()
	d, err := blockdevtest.NewMem(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// startServer serves exports on a unix socket in a temp dir and returns its
// path.
func startServer(t testing.TB, cfg Config, exports ...*Export) (*Server, string) {
	t.Helper()
	s, err := NewServer(cfg, exports...)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "nbd.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Close()
		s.Wait()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, path
}

func dialRaw(t testing.TB, path string) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	br := bufio.NewReader(nc)
	var b [18]byte
	if _, err := io.ReadFull(br, b[:]); err != nil {
		t.Fatalf("reading greeting: %v", err)
	}
	if binary.BigEndian.Uint64(b[0:]) != magicNBD || binary.BigEndian.Uint64(b[8:]) != magicIHaveOpt {
		t.Fatalf("bad greeting % x", b)
	}
	if f := binary.BigEndian.Uint16(b[16:]); f != flagFixedNewstyle|flagNoZeroes {
		t.Fatalf("handshake flags %#x", f)
	}
	binary.BigEndian.PutUint32(b[:4], clientFixedNewstyle|clientNoZeroes)
	if _, err := nc.Write(b[:4]); err != nil {
		t.Fatal(err)
	}
	return nc, br
}

func sendOption(t testing.TB, nc net.Conn, opt uint32, data []byte) {
	t.Helper()
	b := make([]byte, 16+len(data))
	binary.BigEndian.PutUint64(b[0:], magicIHaveOpt)
	binary.BigEndian.PutUint32(b[8:], opt)
	binary.BigEndian.PutUint32(b[12:], uint32(len(data)))
	copy(b[16:], data)
	if _, err := nc.Write(b); err != nil {
		t.Fatal(err)
	}
}

type optReply struct {
	opt, typ uint32
	data     []byte
}

func readReply(t testing.TB, br *bufio.Reader) optReply {
	t.Helper()
	var h [optReplySize]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		t.Fatalf("reading option reply: %v", err)
	}
	if m := binary.BigEndian.Uint64(h[0:]); m != magicOptReply {
		t.Fatalf("option reply magic %#x", m)
	}
	r := optReply{opt: binary.BigEndian.Uint32(h[8:]), typ: binary.BigEndian.Uint32(h[12:])}
	r.data = make([]byte, binary.BigEndian.Uint32(h[16:]))
	if _, err := io.ReadFull(br, r.data); err != nil {
		t.Fatal(err)
	}
	return r
}

func goData(name string, infos ...uint16) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(name)))
	b = append(b, name...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(infos)))
	for _, i := range infos {
		b = binary.BigEndian.AppendUint16(b, i)
	}
	return b
}

// dial connects and negotiates with NBD_OPT_GO asking for block sizes.
func dial(t testing.TB, path, export string) *testClient {
	t.Helper()
	nc, br := dialRaw(t, path)
	c := &testClient{t: t, nc: nc, br: br}
	sendOption(t, nc, optGo, goData(export, infoBlockSize))
	for {
		r := readReply(t, br)
		switch r.typ {
		case repInfo:
			switch binary.BigEndian.Uint16(r.data) {
			case infoExport:
				c.size = binary.BigEndian.Uint64(r.data[2:])
				c.tflags = binary.BigEndian.Uint16(r.data[10:])
			case infoBlockSize:
				c.minBS = binary.BigEndian.Uint32(r.data[2:])
				c.prefBS = binary.BigEndian.Uint32(r.data[6:])
				c.maxBS = binary.BigEndian.Uint32(r.data[10:])
			}
		case repAck:
			return c
		default:
			t.Fatalf("GO: reply type %#x: %s", r.typ, r.data)
		}
	}
}

// send writes one request (with payload for writes).
func (c *testClient) send(typ, flags uint16, cookie, off uint64, length uint32, payload []byte) error {
	b := make([]byte, requestSize+len(payload))
	encodeRequest(b, flags, typ, cookie, off, length)
	copy(b[requestSize:], payload)
	_, err := c.nc.Write(b)
	return err
}

// recv reads one simple reply; for a successful read of n bytes it reads
// the data too.
func (c *testClient) recv(readLen int) (errno uint32, cookie uint64, data []byte, err error) {
	var h [simpleReplySize]byte
	if _, err := io.ReadFull(c.br, h[:]); err != nil {
		return 0, 0, nil, err
	}
	if m := binary.BigEndian.Uint32(h[0:]); m != magicSimple {
		return 0, 0, nil, fmt.Errorf("reply magic %#x", m)
	}
	errno, cookie = binary.BigEndian.Uint32(h[4:]), binary.BigEndian.Uint64(h[8:])
	if errno == 0 && readLen > 0 {
		data = make([]byte, readLen)
		if _, err := io.ReadFull(c.br, data); err != nil {
			return 0, 0, nil, err
		}
	}
	return errno, cookie, data, nil
}

// do runs one request synchronously.
func (c *testClient) do(typ, flags uint16, off uint64, length uint32, payload []byte) (uint32, []byte) {
	c.t.Helper()
	if err := c.send(typ, flags, 7, off, length, payload); err != nil {
		c.t.Fatal(err)
	}
	rl := 0
	if typ == cmdRead {
		rl = int(length)
	}
	errno, cookie, data, err := c.recv(rl)
	if err != nil {
		c.t.Fatalf("cmd %d: %v", typ, err)
	}
	if cookie != 7 {
		c.t.Fatalf("cookie %d, want 7", cookie)
	}
	return errno, data
}
