package iser

import (
	"bytes"
	"testing"
)

// loopback is an io.ReadWriter that replays what was written, without
// allocating.
type loopback struct {
	buf []byte
	r   int
}

func (l *loopback) Write(p []byte) (int, error) { l.buf = append(l.buf, p...); return len(p), nil }

func (l *loopback) Read(p []byte) (int, error) {
	n := copy(p, l.buf[l.r:])
	l.r += n
	if l.r == len(l.buf) {
		l.buf, l.r = l.buf[:0], 0
	}
	return n, nil
}

// TestDataPathAllocs checks that the per-PDU codec allocates nothing: a
// target reads every command and writes every Data-In and response.
func TestDataPathAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts are not meaningful under -short builds")
	}
	lb := &loopback{buf: make([]byte, 0, 1<<20)}
	w := NewWriter(lb)
	r := NewReader(lb)
	w.SetDigests(true, true)
	r.SetDigests(true, true)
	r.SetMaxRecvDataSegmentLength(65536)
	hdr := make([]byte, MaxHeaderLength)
	data := make([]byte, 65536)
	out := make([]byte, BHSSize)
	payload := bytes.Repeat([]byte{7}, 4099)
	var cdb [16]byte
	cdb[0] = 0x28
	win := NewCmdWindow(1, 64)
	allocs := testing.AllocsPerRun(200, func() {
		SCSICommand(out).Encode(&SCSICommandFields{Final: true, Read: true, ITT: 1, CmdSN: win.ExpCmdSN,
			ExpectedDataTransferLength: 4099, CDB: cdb})
		if err := w.WritePDU(out, nil, nil); err != nil {
			t.Fatal(err)
		}
		p, err := r.ReadPDU(hdr, data)
		if err != nil {
			t.Fatal(err)
		}
		cmd := SCSICommand(p.BHS)
		if win.Check(cmd.CmdSN()) != CmdSNInWindow {
			t.Fatal("window")
		}
		win.Advance()
		win.Credit(1)
		DataIn(out).Encode(&DataInFields{Final: true, HasStatus: true, ITT: p.BHS.ITT(), TTT: ReservedTag,
			StatSN: 1, ExpCmdSN: win.ExpCmdSN, MaxCmdSN: win.MaxCmdSN, BufferOffset: 0})
		if err := w.WritePDU(out, nil, payload); err != nil {
			t.Fatal(err)
		}
		if p, err = r.ReadPDU(hdr, data); err != nil || len(p.Data) != len(payload) {
			t.Fatal(err)
		}
		if _, err := ParsePDU(AppendPDU(lb.buf[:0], out, nil, nil), 8192); err != nil {
			t.Fatal(err)
		}
		var ih [ISERHeaderSize]byte
		ISERHeader(ih[:]).Encode(&ISERHeaderFields{ReadValid: true, ReadSTag: 5, ReadBaseOffset: 1 << 40})
		if _, err := ParseISERHeader(ih[:]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("data path allocates %v times per command, want 0", allocs)
	}
}
