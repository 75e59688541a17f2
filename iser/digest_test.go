package iser

import (
	"testing"
)

// TestCRC32CVectors checks the CRC32C test vectors of RFC 3720 appendix
// B.4, which list the digest bytes in wire order.
func TestCRC32CVectors(t *testing.T) {
	t.Parallel()
	inc := make([]byte, 32)
	dec := make([]byte, 32)
	ones := make([]byte, 32)
	for i := range inc {
		inc[i] = byte(i)
		dec[i] = byte(31 - i)
		ones[i] = 0xff
	}
	for _, tc := range []struct {
		name string
		data []byte
		wire string
	}{
		{"32 bytes of zeroes", make([]byte, 32), "aa 36 91 8a"},
		{"32 bytes of ones", ones, "43 ab a8 62"},
		{"32 incrementing bytes", inc, "4e 79 dd 46"},
		{"32 decrementing bytes", dec, "5c db 3f 11"},
		{"iSCSI SCSI Read (10) command PDU", unhex(t, rfc3720ReadPDU, 0), "56 3a 96 d9"},
	} {
		got := make([]byte, 4)
		PutDigest(got, CRC32C(tc.data))
		checkBytes(t, tc.name, got, unhex(t, tc.wire, 0))
		if GetDigest(got) != CRC32C(tc.data) {
			t.Errorf("%s: GetDigest does not invert PutDigest", tc.name)
		}
	}
	// The header digest of the RFC's read command PDU is the same CRC.
	pdu := unhex(t, rfc3720ReadPDU, 0)
	if HeaderDigest(pdu, nil) != 0xd9963a56 || HeaderDigest(pdu[:20], pdu[20:]) != 0xd9963a56 {
		t.Errorf("HeaderDigest = %#x", HeaderDigest(pdu, nil))
	}
}

func TestDataDigestPadding(t *testing.T) {
	t.Parallel()
	for n := 0; n < 9; n++ {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i*7 + 1)
		}
		padded := append(append([]byte(nil), data...), make([]byte, PadLength(n))...)
		if got, want := DataDigest(data), CRC32C(padded); got != want {
			t.Errorf("DataDigest(%d bytes) = %#x, want CRC32C of padded data %#x", n, got, want)
		}
	}
}
