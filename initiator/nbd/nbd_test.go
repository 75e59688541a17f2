package nbd

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/blockdev/blockdevtest"
)

func pattern(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestHandshakeOptions(t *testing.T) {
	t.Parallel()
	d := newMem(t, blockdevtest.MemConfig{Size: 4 << 20})
	_, path := startServer(t, Config{}, &Export{Name: "disk", Description: "a test disk", Dev: d}, &Export{Name: "other", Dev: d, ReadOnly: true})

	nc, br := dialRaw(t, path)
	// LIST names both exports, then ACK.
	sendOption(t, nc, optList, nil)
	var names []string
	for {
		r := readReply(t, br)
		if r.typ == repAck {
			break
		}
		if r.typ != repServer {
			t.Fatalf("LIST reply type %#x", r.typ)
		}
		n := binary.BigEndian.Uint32(r.data)
		names = append(names, string(r.data[4:4+n]))
	}
	if len(names) != 2 || names[0] != "disk" || names[1] != "other" {
		t.Errorf("LIST: %q", names)
	}
	// LIST with data is invalid.
	sendOption(t, nc, optList, []byte{1})
	if r := readReply(t, br); r.typ != repErrInvalid {
		t.Errorf("LIST with data: %#x", r.typ)
	}
	// Unknown and unsupported options.
	for _, opt := range []uint32{optStructuredReply, optStartTLS, optListMetaContext, optExtendedHeaders, 99} {
		sendOption(t, nc, opt, nil)
		if r := readReply(t, br); r.typ != repErrUnsup || r.opt != opt {
			t.Errorf("option %d: reply %#x for %d", opt, r.typ, r.opt)
		}
	}
	// INFO of an unknown export.
	sendOption(t, nc, optInfo, goData("nope"))
	if r := readReply(t, br); r.typ != repErrUnknown {
		t.Errorf("INFO nope: %#x", r.typ)
	}
	// Malformed INFO: count says 2 requests, data has 1.
	bad := goData("disk", infoName)
	binary.BigEndian.PutUint16(bad[len(bad)-4:], 2)
	sendOption(t, nc, optInfo, bad)
	if r := readReply(t, br); r.typ != repErrInvalid {
		t.Errorf("INFO malformed: %#x", r.typ)
	}
	// INFO with name, description and block size; without block size the
	// minimum is 1.
	for _, withBS := range []bool{true, false} {
		infos := []uint16{infoName, infoDescription}
		if withBS {
			infos = append(infos, infoBlockSize)
		}
		sendOption(t, nc, optInfo, goData("disk", infos...))
		got := map[uint16][]byte{}
		for {
			r := readReply(t, br)
			if r.typ == repAck {
				break
			}
			if r.typ != repInfo {
				t.Fatalf("INFO reply %#x", r.typ)
			}
			got[binary.BigEndian.Uint16(r.data)] = r.data[2:]
		}
		if e := got[infoExport]; len(e) != 10 || binary.BigEndian.Uint64(e) != 4<<20 {
			t.Errorf("INFO export: % x", e)
		} else if f := binary.BigEndian.Uint16(e[8:]); f&tflagCanMultiConn == 0 || f&tflagSendFUA == 0 || f&tflagSendTrim == 0 || f&tflagReadOnly != 0 {
			t.Errorf("transmission flags %#x", f)
		}
		if string(got[infoName]) != "disk" || string(got[infoDescription]) != "a test disk" {
			t.Errorf("name %q description %q", got[infoName], got[infoDescription])
		}
		bs := got[infoBlockSize]
		if len(bs) != 12 {
			t.Fatalf("block size info % x", bs)
		}
		mn, pref, mx := binary.BigEndian.Uint32(bs), binary.BigEndian.Uint32(bs[4:]), binary.BigEndian.Uint32(bs[8:])
		wantMin := uint32(512)
		if !withBS {
			wantMin = 1
		}
		if mn != wantMin || pref != 4096 || mx != 4<<20 {
			t.Errorf("block sizes %d/%d/%d, want %d/4096/%d", mn, pref, mx, wantMin, 4<<20)
		}
	}
	// ABORT is acknowledged and the server hangs up.
	sendOption(t, nc, optAbort, nil)
	if r := readReply(t, br); r.typ != repAck {
		t.Errorf("ABORT: %#x", r.typ)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Errorf("connection still open after ABORT")
	}
}

func TestExportName(t *testing.T) {
	t.Parallel()
	d := newMem(t, blockdevtest.MemConfig{Size: 1 << 20})
	_, path := startServer(t, Config{}, &Export{Name: "disk", Dev: d})
	nc, br := dialRaw(t, path)
	sendOption(t, nc, optExportName, []byte("disk"))
	var b [10]byte
	if _, err := br.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	if binary.BigEndian.Uint64(b[:]) != 1<<20 {
		t.Fatalf("size % x", b)
	}
	c := &testClient{t: t, nc: nc, br: br}
	want := pattern(4096, 3)
	if e, _ := c.do(cmdWrite, 0, 8192, 4096, want); e != 0 {
		t.Fatalf("write: errno %d", e)
	}
	if e, got := c.do(cmdRead, 0, 8192, 4096, nil); e != 0 || !bytes.Equal(got, want) {
		t.Fatalf("read: errno %d, equal %v", e, bytes.Equal(got, want))
	}
	// An unknown export name closes the connection.
	nc2, br2 := dialRaw(t, path)
	sendOption(t, nc2, optExportName, []byte("nope"))
	if _, err := br2.ReadByte(); err == nil {
		t.Errorf("connection open after an unknown export name")
	}
}

func TestCommands(t *testing.T) {
	t.Parallel()
	for _, caps := range []blockdev.Caps{0, blockdev.CapFlush} {
		name := "all-caps"
		if caps != 0 {
			name = "flush-only"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := newMem(t, blockdevtest.MemConfig{Size: 8 << 20, MaxTransfer: 64 << 10, Queues: 2, Caps: caps})
			_, path := startServer(t, Config{LargeChunks: 4}, &Export{Name: "d", Dev: d})
			c := dial(t, path, "")
			if c.size != 8<<20 || c.minBS != 512 || c.maxBS != 4*64<<10 {
				t.Fatalf("size %d, block sizes %d/%d/%d", c.size, c.minBS, c.prefBS, c.maxBS)
			}
			check := func(off, n int, seed uint64, flags uint16) {
				t.Helper()
				want := pattern(n, seed)
				if e, _ := c.do(cmdWrite, flags, uint64(off), uint32(n), want); e != 0 {
					t.Fatalf("write %d at %d: errno %d", n, off, e)
				}
				e, got := c.do(cmdRead, 0, uint64(off), uint32(n), nil)
				if e != 0 || !bytes.Equal(got, want) {
					t.Fatalf("read %d at %d: errno %d, equal %v", n, off, e, bytes.Equal(got, want))
				}
				if !bytes.Equal(devRead(t, d, off, n), want) {
					t.Fatalf("device content at %d+%d differs", off, n)
				}
			}
			check(0, 512, 1, 0)
			check(4096, 4096, 2, cmdFlagFUA)
			check(1<<20, 200<<10, 3, 0)           // several large chunks
			check(2<<20, 4*64<<10, 4, cmdFlagFUA) // the whole arena
			check(3<<20, 1<<20, 5, 0)             // larger than the arena: slow path
			check(5<<20+100, 3000, 6, 0)          // unaligned: read-modify-write
			check(6<<20+511, 1, 7, cmdFlagFUA)    // one byte
			check(7<<20-1000, 1000, 8, 0)         // up to the end
			if e, _ := c.do(cmdFlush, 0, 0, 0, nil); e != 0 {
				t.Fatalf("flush: errno %d", e)
			}
			if caps&blockdev.CapFlush != 0 && d.Ops(blockdev.OpFlush) == 0 {
				t.Errorf("no device flush")
			}
			// Write zeroes, aligned and not.
			for _, z := range [][2]int{{1 << 20, 64 << 10}, {1<<20 + 70000, 3333}} {
				if e, _ := c.do(cmdWriteZeroes, cmdFlagFUA, uint64(z[0]), uint32(z[1]), nil); e != 0 {
					t.Fatalf("write zeroes %v: errno %d", z, e)
				}
				if !bytes.Equal(devRead(t, d, z[0], z[1]), make([]byte, z[1])) {
					t.Errorf("write zeroes %v: not zero", z)
				}
			}
			if e, _ := c.do(cmdTrim, 0, 1<<20, 64<<10, nil); caps == 0 {
				if e != 0 {
					t.Errorf("trim: errno %d", e)
				}
			} else if e != errInval {
				t.Errorf("trim without discard support: errno %d, want EINVAL", e)
			}
			// Errors.
			if e, _ := c.do(cmdRead, 0, 8<<20, 512, nil); e != errInval {
				t.Errorf("read past the end: errno %d", e)
			}
			if e, _ := c.do(cmdWrite, 0, 8<<20-512, 1024, make([]byte, 1024)); e != errNoSpc {
				t.Errorf("write past the end: errno %d", e)
			}
			if e, _ := c.do(cmdBlockStatus, 0, 0, 512, nil); e != errInval {
				t.Errorf("block status: errno %d", e)
			}
			if e, _ := c.do(cmdRead, 0, 0, 0, nil); e != errInval {
				t.Errorf("zero-length read: errno %d", e)
			}
			if e, _ := c.do(cmdRead, 0, 0, 64<<20, nil); e != errInval {
				t.Errorf("64 MiB read of an 8 MiB disk: errno %d", e)
			}
			// The stream survived the errors.
			check(0, 512, 9, 0)
			// DISC: the server closes.
			if err := c.send(cmdDisc, 0, 1, 0, 0, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := c.br.ReadByte(); err == nil {
				t.Errorf("connection open after DISC")
			}
		})
	}
}

func TestDeviceErrors(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	failAt := int64(-1)
	d := newMem(t, blockdevtest.MemConfig{Size: 1 << 20, Fault: func(r *blockdev.Request) error {
		mu.Lock()
		defer mu.Unlock()
		if r.Offset == failAt {
			return blockdev.ErrIO
		}
		return nil
	}})
	_, path := startServer(t, Config{}, &Export{Name: "d", Dev: d}, &Export{Name: "ro", Dev: d, ReadOnly: true})
	c := dial(t, path, "d")
	mu.Lock()
	failAt = 4096
	mu.Unlock()
	if e, _ := c.do(cmdRead, 0, 4096, 4096, nil); e != errIO {
		t.Errorf("read with a media error: errno %d, want EIO", e)
	}
	if e, _ := c.do(cmdWrite, 0, 4096, 4096, make([]byte, 4096)); e != errIO {
		t.Errorf("write with a media error: errno %d, want EIO", e)
	}
	if e, _ := c.do(cmdRead, 0, 0, 4096, nil); e != 0 {
		t.Errorf("read elsewhere: errno %d", e)
	}
	ro := dial(t, path, "ro")
	if ro.tflags&tflagReadOnly == 0 {
		t.Errorf("read-only export without NBD_FLAG_READ_ONLY")
	}
	if e, _ := ro.do(cmdWrite, 0, 0, 512, make([]byte, 512)); e != errPerm {
		t.Errorf("write to a read-only export: errno %d", e)
	}
}

// TestPipelined keeps many requests in flight on several connections and
// checks every reply and the data.
func TestPipelined(t *testing.T) {
	t.Parallel()
	d := newMem(t, blockdevtest.MemConfig{Size: 16 << 20, Queues: 4, QueueDepth: 8, Latency: 50 * time.Microsecond})
	_, path := startServer(t, Config{SmallChunks: 16, LargeChunks: 4}, &Export{Name: "d", Dev: d})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dial(t, path, "d")
			const n = 200
			sizes := []int{512, 4096, 8192, 128 << 10}
			// Writes: send all, then read all replies.
			go func() {
				for i := range n {
					sz := sizes[i%len(sizes)]
					off := uint64(w)<<22 + uint64(i%16)<<18
					if err := c.send(cmdWrite, 0, uint64(i), off, uint32(sz), pattern(sz, uint64(w*1000+i%16))); err != nil {
						t.Error(err)
						return
					}
				}
			}()
			seen := map[uint64]bool{}
			for range n {
				e, cookie, _, err := c.recv(0)
				if err != nil || e != 0 || seen[cookie] {
					t.Errorf("write reply: errno %d cookie %d err %v", e, cookie, err)
					return
				}
				seen[cookie] = true
			}
			// The last write of each slot wins: sizes repeat every 4, slots every 16.
			for slot := range 16 {
				i := n - 16 + slot
				sz := sizes[i%len(sizes)]
				off := uint64(w)<<22 + uint64(slot)<<18
				e, got := c.do(cmdRead, 0, off, uint32(sz), nil)
				if e != 0 || !bytes.Equal(got, pattern(sz, uint64(w*1000+slot))) {
					t.Errorf("worker %d slot %d: errno %d, data differs", w, slot, e)
				}
			}
		}()
	}
	wg.Wait()
}

// TestNoAllocs checks that the steady-state data path allocates nothing per
// request (the fake device allocates nothing either).
func TestNoAllocs(t *testing.T) {
	d := newMem(t, blockdevtest.MemConfig{Size: 1 << 20})
	_, path := startServer(t, Config{}, &Export{Name: "d", Dev: d})
	c := dial(t, path, "d")
	buf := make([]byte, requestSize+4096)
	rep := make([]byte, simpleReplySize+4096)
	run := func(n int) {
		for i := range n {
			encodeRequest(buf, 0, cmdWrite, uint64(i), uint64(i%64)*4096, 4096)
			if _, err := c.nc.Write(buf); err != nil {
				t.Fatal(err)
			}
			if _, err := readFull(c, rep[:simpleReplySize]); err != nil {
				t.Fatal(err)
			}
			encodeRequest(buf, 0, cmdRead, uint64(i), uint64(i%64)*4096, 4096)
			if _, err := c.nc.Write(buf[:requestSize]); err != nil {
				t.Fatal(err)
			}
			if _, err := readFull(c, rep); err != nil {
				t.Fatal(err)
			}
		}
	}
	run(200) // warm up
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const n = 2000
	run(n)
	runtime.ReadMemStats(&after)
	if per := float64(after.Mallocs-before.Mallocs) / (2 * n); per > 0.1 {
		t.Errorf("%.2f allocations per request, want none", per)
	}
}

func readFull(c *testClient, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := c.br.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	if binary.BigEndian.Uint32(b) != magicSimple || binary.BigEndian.Uint32(b[4:]) != 0 {
		return n, errors.New("bad reply")
	}
	return n, nil
}

func TestCloseWithRequestsInFlight(t *testing.T) {
	t.Parallel()
	d := newMem(t, blockdevtest.MemConfig{Size: 1 << 20, Latency: 20 * time.Millisecond})
	s, path := startServer(t, Config{}, &Export{Name: "d", Dev: d})
	c := dial(t, path, "d")
	for i := range 8 {
		if err := c.send(cmdRead, 0, uint64(i), 0, 4096, nil); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(5 * time.Millisecond)
	s.Close()
	done := make(chan struct{})
	go func() { s.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after Close")
	}
}

// devRead reads the device's bytes [off, off+n) through the blockdev API
// (synchronised with the device's goroutines, unlike Mem.Bytes).
func devRead(t *testing.T, d blockdev.Device, off, n int) []byte {
	t.Helper()
	bs := d.Info().BlockSize
	start := off / bs * bs
	end := (off + n + bs - 1) / bs * bs
	b := make([]byte, end-start)
	if _, err := blockdev.ReadAt(d, b, int64(start)); err != nil {
		t.Fatal(err)
	}
	return b[off-start : off-start+n]
}

// TestTCP serves over a loopback TCP listener.
func TestTCP(t *testing.T) {
	t.Parallel()
	d := newMem(t, blockdevtest.MemConfig{Size: 1 << 20})
	s, err := NewServer(Config{}, &Export{Name: "d", Dev: d})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	t.Cleanup(func() { s.Close(); s.Wait() })
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	var g [18]byte
	if _, err := io.ReadFull(br, g[:]); err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint32(g[:4], clientFixedNewstyle|clientNoZeroes)
	nc.Write(g[:4])
	sendOption(t, nc, optGo, goData("d"))
	for {
		if r := readReply(t, br); r.typ == repAck {
			break
		} else if r.typ != repInfo {
			t.Fatalf("GO: %#x", r.typ)
		}
	}
	c := &testClient{t: t, nc: nc, br: br}
	want := pattern(8192, 5)
	if e, _ := c.do(cmdWrite, cmdFlagFUA, 4096, 8192, want); e != 0 {
		t.Fatalf("write: %d", e)
	}
	if e, got := c.do(cmdRead, 0, 4096, 8192, nil); e != 0 || !bytes.Equal(got, want) {
		t.Fatalf("read: %d", e)
	}
}

// TestConnHook checks the server reports each client connection while it
// is served, and its end.
func TestConnHook(t *testing.T) {
	t.Parallel()
	d := newMem(t, blockdevtest.MemConfig{Size: 1 << 20})
	events := make(chan int, 4)
	_, path := startServer(t, Config{ConnHook: func(delta int) { events <- delta }}, &Export{Name: "disk", Dev: d})
	nc, br := dialRaw(t, path)
	sendOption(t, nc, optExportName, []byte("disk"))
	var b [10]byte
	if _, err := io.ReadFull(br, b[:]); err != nil {
		t.Fatal(err)
	}
	if got := <-events; got != 1 {
		t.Fatalf("first hook call %+d, want +1", got)
	}
	select {
	case got := <-events:
		t.Fatalf("hook called with %+d while the client is connected", got)
	default:
	}
	nc.Close()
	select {
	case got := <-events:
		if got != -1 {
			t.Fatalf("hook called with %+d after the client left, want -1", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no hook call after the client left")
	}
}
