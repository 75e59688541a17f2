package iser

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWriterReaderRoundTrip(t *testing.T) {
	t.Parallel()
	for _, dg := range []struct{ h, d bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		var stream bytes.Buffer
		w := NewWriter(&stream)
		w.SetDigests(dg.h, dg.d)
		type pdu struct {
			op   Opcode
			ahs  []byte
			data []byte
		}
		cdb := make([]byte, 24)
		cdb[0] = 0x7f
		sent := []pdu{
			{OpNOPOut, nil, nil},
			{OpSCSICommand, AppendExtendedCDBAHS(nil, cdb), []byte("immediate data, 29 bytes long")},
			{OpDataOut, nil, bytes.Repeat([]byte{0xab}, 4096)},
			{OpTextRequest, nil, kvText("SendTargets=All")},
			{OpSCSICommand, AppendBidiReadLengthAHS(nil, 512), []byte{1}},
		}
		for i, p := range sent {
			h := make([]byte, BHSSize)
			BHS(h).header(p.op, false, 0x80)
			BHS(h).SetITT(uint32(i))
			if err := w.WritePDU(h, p.ahs, p.data); err != nil {
				t.Fatal(err)
			}
		}
		// The wire length: header, AHS, digests, padded data.
		wantLen := 0
		for _, p := range sent {
			wantLen += BHSSize + len(p.ahs) + PaddedLength(len(p.data))
			if dg.h {
				wantLen += 4
			}
			if dg.d && len(p.data) > 0 {
				wantLen += 4
			}
		}
		if stream.Len() != wantLen {
			t.Errorf("digests %v: stream of %d bytes, want %d", dg, stream.Len(), wantLen)
		}
		r := NewReader(bufio.NewReader(&stream))
		r.SetDigests(dg.h, dg.d)
		r.SetMaxRecvDataSegmentLength(8192)
		hdr := make([]byte, MaxHeaderLength)
		data := make([]byte, 8192)
		for i, p := range sent {
			got, err := r.ReadPDU(hdr, data)
			if err != nil {
				t.Fatalf("digests %v, PDU %d: %v", dg, i, err)
			}
			if got.BHS.Opcode() != p.op || got.BHS.ITT() != uint32(i) || !bytes.Equal(got.AHS, p.ahs) ||
				!bytes.Equal(got.Data, p.data) {
				t.Errorf("digests %v, PDU %d: got op %v itt %d ahs % x data %q", dg, i, got.BHS.Opcode(),
					got.BHS.ITT(), got.AHS, got.Data)
			}
		}
		if _, err := r.ReadPDU(hdr, data); err != io.EOF {
			t.Errorf("after the last PDU: %v, want io.EOF", err)
		}
	}
}

func writePDUs(t *testing.T, header, data bool, pdus ...[]byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w := NewWriter(&b)
	w.SetDigests(header, data)
	for _, d := range pdus {
		h := make([]byte, BHSSize)
		NOPOut(h).Encode(&NOPOutFields{ITT: 1, TTT: ReservedTag})
		if err := w.WritePDU(h, nil, d); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

func TestReaderErrors(t *testing.T) {
	t.Parallel()
	hdr := make([]byte, MaxHeaderLength)
	data := make([]byte, 1024)

	// Header digest mismatch: framing lost.
	wire := writePDUs(t, true, false, []byte("ping"))
	wire[20] ^= 1
	r := NewReader(bytes.NewReader(wire))
	r.SetDigests(true, false)
	if _, err := r.ReadPDU(hdr, data); !errors.Is(err, ErrHeaderDigest) {
		t.Errorf("corrupt header: %v", err)
	}

	// Data digest mismatch: the PDU comes back and the stream stays in step.
	wire = writePDUs(t, false, true, []byte("first"), []byte("second"))
	wire[BHSSize] ^= 1
	r = NewReader(bytes.NewReader(wire))
	r.SetDigests(false, true)
	p, err := r.ReadPDU(hdr, data)
	if !errors.Is(err, ErrDataDigest) || p.BHS.Opcode() != OpNOPOut || len(p.Data) != 5 {
		t.Errorf("corrupt data: %v, %+v", err, p)
	}
	if p, err = r.ReadPDU(hdr, data); err != nil || string(p.Data) != "second" {
		t.Errorf("PDU after a data digest error: %v %q", err, p.Data)
	}

	// Segment above MaxRecvDataSegmentLength, and above the buffer.
	wire = writePDUs(t, false, false, make([]byte, 600))
	r = NewReader(bytes.NewReader(wire))
	r.SetMaxRecvDataSegmentLength(512)
	if _, err := r.ReadPDU(hdr, data); !errors.Is(err, ErrDataSegmentTooLong) {
		t.Errorf("600 bytes over a 512 limit: %v", err)
	}
	r = NewReader(bytes.NewReader(wire))
	if _, err := r.ReadPDU(hdr, data[:100]); !errors.Is(err, ErrDataSegmentTooLong) {
		t.Errorf("600 bytes into 100: %v", err)
	}

	// Truncation inside a PDU.
	wire = writePDUs(t, true, true, []byte("hello"))
	for _, n := range []int{10, BHSSize, BHSSize + 2, BHSSize + 4, BHSSize + 6, len(wire) - 1} {
		r = NewReader(bytes.NewReader(wire[:n]))
		r.SetDigests(true, true)
		if _, err := r.ReadPDU(hdr, data); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("truncated at %d: %v", n, err)
		}
	}

	// AHS longer than the header buffer.
	h := make([]byte, BHSSize)
	h[4] = 4
	r = NewReader(bytes.NewReader(append(h, make([]byte, 16)...)))
	if _, err := r.ReadPDU(make([]byte, BHSSize+8), data); !errors.Is(err, errShortBuffer) {
		t.Errorf("AHS beyond buffer: %v", err)
	}
	if _, err := r.ReadPDU(make([]byte, 10), data); !errors.Is(err, errShortBuffer) {
		t.Errorf("short header buffer: %v", err)
	}
}

func TestWriterErrors(t *testing.T) {
	t.Parallel()
	w := NewWriter(io.Discard)
	if err := w.WritePDU(make([]byte, 10), nil, nil); !errors.Is(err, errShortBHS) {
		t.Errorf("short header: %v", err)
	}
	if err := w.WritePDU(make([]byte, BHSSize), make([]byte, 6), nil); !errors.Is(err, errAHSLength) {
		t.Errorf("unaligned AHS: %v", err)
	}
}

// TestWriterTCP checks the vectored write on a real TCP connection, the
// writev path of net.Buffers.
func TestWriterTCP(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no loopback TCP: %v", err)
	}
	defer ln.Close()
	payload := bytes.Repeat([]byte("0123456789"), 10000)
	errc := make(chan error, 1)
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		w := NewWriter(c)
		w.SetDigests(true, true)
		h := make([]byte, BHSSize)
		DataIn(h).Encode(&DataInFields{Final: true, ITT: 9, TTT: ReservedTag})
		errc <- w.WritePDU(h, nil, payload)
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := NewReader(bufio.NewReader(c))
	r.SetDigests(true, true)
	r.SetMaxRecvDataSegmentLength(len(payload))
	p, err := r.ReadPDU(make([]byte, BHSSize), make([]byte, len(payload)))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p.Data, payload) || DataIn(p.BHS).Fields().ITT != 9 {
		t.Error("payload differs after TCP round trip")
	}
}

func TestParsePDU(t *testing.T) {
	t.Parallel()
	h := make([]byte, BHSSize)
	SCSIResponse(h).Encode(&SCSIResponseFields{ITT: 3, Status: 2})
	sense := AppendSenseData(nil, []byte{0x70, 0, 5})
	b := AppendPDU(nil, h, AppendBidiReadLengthAHS(nil, 7), sense)
	if len(b) != BHSSize+8+8 {
		t.Fatalf("AppendPDU: %d bytes", len(b))
	}
	p, err := ParsePDU(b, 8192)
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(p.Data, sense) || len(p.AHS) != 8 || p.BHS.ITT() != 3 {
		t.Errorf("ParsePDU: %+v", p)
	}
	if h := p.Header(); len(h) != BHSSize+8 || !cmp.Equal(h, b[:BHSSize+8]) {
		t.Errorf("Header() = % x", h)
	}
	if h := (PDU{BHS: p.BHS[:BHSSize:BHSSize], AHS: make([]byte, 8)}).Header(); len(h) != BHSSize {
		t.Errorf("Header() of split BHS and AHS has %d bytes", len(h))
	}
	// iSER sends no padding.
	if _, err := ParsePDU(b[:BHSSize+8+len(sense)], 8192); err != nil {
		t.Errorf("unpadded: %v", err)
	}
	if _, err := ParsePDU(b[:BHSSize+10], 8192); !errors.Is(err, errShortPDU) {
		t.Errorf("truncated: %v", err)
	}
	if _, err := ParsePDU(b, 2); !errors.Is(err, ErrDataSegmentTooLong) {
		t.Errorf("limit: %v", err)
	}
	if _, err := ParsePDU(b[:40], 8192); !errors.Is(err, errShortBHS) {
		t.Errorf("short: %v", err)
	}
}
