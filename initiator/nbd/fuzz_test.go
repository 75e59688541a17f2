package nbd

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"testing"

	"github.com/rdisk/rdisk/blockdev/blockdevtest"
)

// FuzzRequest checks the request parser's verdicts: never a panic, and
// whatever it lets through to the device is inside the disk.
func FuzzRequest(f *testing.F) {
	for _, seed := range [][5]uint64{
		{0, cmdRead, 0, 4096, 0}, {cmdFlagFUA, cmdWrite, 1, 512, 0}, {0, cmdFlush, 2, 0, 0},
		{0, cmdTrim, 3, 1 << 20, 1}, {cmdFlagNoHole, cmdWriteZeroes, 4, 1 << 20, 0}, {0, cmdDisc, 5, 0, 0},
		{0, cmdRead, 6, 1, 1 << 40}, {0, 99, 7, 0, 0}, {0, cmdWrite, 8, 1 << 31, 0},
	} {
		b := make([]byte, requestSize)
		encodeRequest(b, uint16(seed[0]), uint16(seed[1]), seed[2], seed[4], uint32(seed[3]))
		f.Add(b, false)
	}
	f.Fuzz(func(t *testing.T, b []byte, ro bool) {
		lim := limits{size: 1 << 30, tflags: tflagHasFlags | tflagSendFlush | tflagSendFUA | tflagSendTrim | tflagSendWriteZeroe, maxPayload: maxPayload}
		if ro {
			lim.tflags |= tflagReadOnly
		}
		v, errno := checkRequest(requestHeader(b), lim)
		if len(b) < requestSize {
			if v != hangUp {
				t.Fatalf("short header: %v", v)
			}
			return
		}
		h := requestHeader(b)
		switch v {
		case doIO:
			if h.typ() != cmdFlush {
				if h.length() == 0 || h.offset()+uint64(h.length()) > uint64(lim.size) {
					t.Fatalf("doIO for %d bytes at %d", h.length(), h.offset())
				}
				if ro && h.typ() != cmdRead {
					t.Fatalf("doIO for command %d on a read-only export", h.typ())
				}
			}
		case replyError:
			if errno == 0 {
				t.Fatalf("replyError without an errno")
			}
		}
		if h.typ() == cmdWrite && h.length() > maxPayload && v != hangUp {
			t.Fatalf("write of %d bytes not refused", h.length())
		}
	})
}

// rw is a client stream fed to the negotiation: reads from in, writes
// discarded.
type rw struct{ io.Reader }

func (rw) Write(p []byte) (int, error) { return len(p), nil }

// FuzzNegotiation feeds arbitrary client bytes to the handshake: it must
// end (the input is finite) without a panic.
func FuzzNegotiation(f *testing.F) {
	client := func(opts ...[]byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, clientFixedNewstyle|clientNoZeroes)
		for _, o := range opts {
			b = append(b, o...)
		}
		return b
	}
	opt := func(o uint32, data []byte) []byte {
		b := binary.BigEndian.AppendUint64(nil, magicIHaveOpt)
		b = binary.BigEndian.AppendUint32(b, o)
		b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
		return append(b, data...)
	}
	f.Add(client(opt(optList, nil), opt(optGo, goData("d", infoBlockSize, infoName))))
	f.Add(client(opt(optInfo, goData("", infoDescription)), opt(optExportName, []byte("d"))))
	f.Add(client(opt(optStructuredReply, nil), opt(optAbort, nil)))
	f.Add(client(opt(optGo, []byte{0, 0, 0, 9, 'x'})))
	f.Add(client(opt(optInfo, []byte{0xff, 0xff, 0xff, 0xff, 0, 0})))
	d, err := blockdevtest.NewMem(blockdevtest.MemConfig{})
	if err != nil {
		f.Fatal(err)
	}
	defer d.Close()
	s, err := NewServer(Config{}, &Export{Name: "d", Description: "fuzz", Dev: d})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		stream := rw{bytes.NewReader(in)}
		n := &negotiation{br: bufio.NewReader(stream), bw: bufio.NewWriter(stream), lookup: s.lookup,
			list: func() []*Export { return s.exports }, blockInfo: s.blockInfo, tflags: s.tflags}
		e, err := n.run()
		if err == nil && e == nil {
			t.Fatalf("negotiation ended without an export or an error")
		}
	})
}
