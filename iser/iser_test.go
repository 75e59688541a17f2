package iser

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestISERHeaderGolden builds struct iser_ctrl (include/scsi/iser.h) by
// hand: flags, rsvd[3], __be32 write_stag, __be64 write_va, __be32
// read_stag, __be64 read_va, packed, 28 bytes.
func TestISERHeaderGolden(t *testing.T) {
	t.Parallel()
	want := make([]byte, 28)
	at(want, 0, 0x10|0x08)                                      // ISCSI_CTRL | ISER_WSV
	at(want, 4, 0x00, 0x00, 0x12, 0x34)                         // write_stag
	at(want, 8, 0x00, 0x00, 0x7f, 0x00, 0x10, 0x00, 0x02, 0x00) // write_va
	at(want, 16, 0, 0, 0, 0)                                    // read_stag
	b := make([]byte, 28)
	for i := range b {
		b[i] = 0xee
	}
	f := ISERHeaderFields{WriteValid: true, WriteSTag: 0x1234, WriteBaseOffset: 0x00007f0010000200}
	ISERHeader(b).Encode(&f)
	checkBytes(t, "iSER header", b, want)
	h, err := ParseISERHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(f, h.Fields()); d != "" {
		t.Errorf("Fields (-want +got):\n%s", d)
	}
	// A read: ISCSI_CTRL | ISER_RSV with the read STag and VA.
	ISERHeader(b).Encode(&ISERHeaderFields{ReadValid: true, ReadSTag: 0xabcdef01, ReadBaseOffset: 0x1122334455667788})
	want = make([]byte, 28)
	at(want, 0, 0x14)
	at(want, 16, 0xab, 0xcd, 0xef, 0x01, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88)
	checkBytes(t, "iSER read header", b, want)
	// The Linux initiator's login Sends carry ISCSI_CTRL and nothing else.
	ISERHeader(b).Encode(&ISERHeaderFields{})
	checkBytes(t, "iSER login header", b, append([]byte{0x10}, make([]byte, 27)...))

	for _, bad := range [][]byte{make([]byte, 27), append([]byte{0x20}, make([]byte, 27)...),
		append([]byte{0x11}, make([]byte, 27)...), append([]byte{0x02}, make([]byte, 27)...)} {
		if _, err := ParseISERHeader(bad); !errors.Is(err, errISERHeader) {
			t.Errorf("ParseISERHeader(% x...) = %v", bad[:1], err)
		}
	}
}

func TestISERHello(t *testing.T) {
	t.Parallel()
	b := make([]byte, ISERHeaderSize)
	ISERHello{MaxVersion: 10, MinVersion: 10, IRD: 16}.Encode(b)
	checkBytes(t, "Hello", b, append([]byte{0x20, 0xaa, 0x00, 0x10}, make([]byte, 24)...))
	h, err := ParseISERHello(b)
	if err != nil || h != (ISERHello{10, 10, 16}) || !h.Supports() || ISEROpcode(b) != ISEROpcodeHello {
		t.Errorf("ParseISERHello = %+v, %v", h, err)
	}
	r := ReplyTo(h, 4)
	ISERHelloReply(r).Encode(b)
	checkBytes(t, "HelloReply", b, append([]byte{0x30, 0xaa, 0x00, 0x04}, make([]byte, 24)...))
	got, err := ParseISERHelloReply(b)
	if err != nil || got != r || got.Reject {
		t.Errorf("ParseISERHelloReply = %+v, %v", got, err)
	}
	old := ISERHello{MaxVersion: 9, MinVersion: 8, IRD: 4}
	if rej := ReplyTo(old, 4); !rej.Reject || rej.ORD != 0 {
		t.Errorf("reply to an old version: %+v", rej)
	}
	ISERHelloReply{Reject: true, MaxVersion: 10, CurrentVersion: 10}.Encode(b)
	if b[0] != 0x31 {
		t.Errorf("reject flag: %#x", b[0])
	}
	if _, err := ParseISERHello([]byte{0x20, 0x5a, 0, 1}); !errors.Is(err, errISERVersion) {
		t.Errorf("MinVer above MaxVer: %v", err)
	}
	if _, err := ParseISERHello(b); err == nil {
		t.Error("HelloReply parsed as Hello")
	}
	if _, err := ParseISERHelloReply([]byte{0x30}); err == nil {
		t.Error("short HelloReply accepted")
	}
	if ISEROpcode(nil) != 0 {
		t.Error("ISEROpcode(nil)")
	}
}

// TestISERCM checks struct iser_cm_hdr as the Linux initiator sends it
// (iser_route_handler) and isert answers it (isert_rdma_accept).
func TestISERCM(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		req       []byte
		targetInv bool
		accept    []byte
		sendInv   bool
	}{
		{"initiator without remote invalidation", []byte{0x80 | 0x40, 0, 0, 0}, true, []byte{0xc0, 0, 0, 0}, false},
		{"initiator with remote invalidation", []byte{0x80, 0, 0, 0}, true, []byte{0x80, 0, 0, 0}, true},
		{"target declines send with invalidate", []byte{0x80, 0, 0, 0}, false, []byte{0xc0, 0, 0, 0}, false},
		{"InfiniBand CM padding", append([]byte{0x80, 0, 0, 0}, make([]byte, 52)...), true, []byte{0x80, 0, 0, 0}, true},
	} {
		req, ok := ParseISERCM(tc.req)
		if !ok {
			t.Fatalf("%s: not parsed", tc.name)
		}
		acc, inv := AcceptFor(req, tc.targetInv)
		b := []byte{0xff, 0xff, 0xff, 0xff}
		acc.Encode(b)
		checkBytes(t, tc.name, b, tc.accept)
		if inv != tc.sendInv {
			t.Errorf("%s: send with invalidate %v, want %v", tc.name, inv, tc.sendInv)
		}
	}
	if _, ok := ParseISERCM(nil); ok {
		t.Error("empty private data parsed")
	}
	b := make([]byte, 4)
	ISERCM{Flags: ISERZBVANotSupported | ISERSendWithInvNotSupported}.Encode(b)
	checkBytes(t, "initiator CM data", b, []byte{0xc0, 0, 0, 0})
}
