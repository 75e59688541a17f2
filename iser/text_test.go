package iser

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseText(t *testing.T) {
	t.Parallel()
	got, err := ParseText(kvText("InitiatorName=iqn.1994-05.com.redhat:x", "X-com.example.k=a=b", "Empty=",
		"HeaderDigest=CRC32C,None"))
	if err != nil {
		t.Fatal(err)
	}
	want := []KeyValue{{"InitiatorName", "iqn.1994-05.com.redhat:x"}, {"X-com.example.k", "a=b"}, {"Empty", ""},
		{"HeaderDigest", "CRC32C,None"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ParseText (-want +got):\n%s", d)
	}
	if textOf(AppendText(nil, want)) != textOf(kvText("InitiatorName=iqn.1994-05.com.redhat:x",
		"X-com.example.k=a=b", "Empty=", "HeaderDigest=CRC32C,None")) {
		t.Error("AppendText does not round-trip")
	}
	// Stray NULs (padding-like) are skipped.
	if kvs, err := ParseText([]byte("\x00A=1\x00\x00B=2\x00\x00")); err != nil || len(kvs) != 2 {
		t.Errorf("stray NULs: %v %v", kvs, err)
	}
	if kvs, err := ParseText(nil); err != nil || kvs != nil {
		t.Errorf("empty text: %v %v", kvs, err)
	}
	long := strings.Repeat("v", 256)
	for _, tc := range []struct {
		text string
		want error
	}{
		{"A=1", errTextFormat},                           // no terminating NUL
		{"A\x00", errTextFormat},                         // no '='
		{"=1\x00", errTextKey},                           // empty key
		{"A B=1\x00", errTextKey},                        // space in key
		{strings.Repeat("K", 64) + "=1\x00", errTextKey}, // key too long
		{"A=" + long + "\x00", errTextValueLength},       // value over 255
		{"CHAP_C=0x" + strings.Repeat("0", 8200) + "\x00", errTextValueLength},
	} {
		if _, err := ParseText([]byte(tc.text)); !errors.Is(err, tc.want) {
			t.Errorf("ParseText(%.30q) = %v, want %v", tc.text, err, tc.want)
		}
	}
	if _, err := ParseText([]byte("CHAP_C=0x" + strings.Repeat("ab", 1024) + "\x00")); err != nil {
		t.Errorf("1024-byte challenge rejected: %v", err)
	}
}

func TestParseNumber(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s  string
		v  uint64
		ok bool
	}{
		{"8192", 8192, true}, {"0x2000", 8192, true}, {"0X2000", 8192, true}, {"0bIAA=", 8192, true},
		{"0", 0, true}, {"", 0, false}, {"-1", 0, false}, {"12a", 0, false}, {"0x", 0, false},
		{"18446744073709551616", 0, false}, {"0b", 0, false},
	} {
		v, ok := parseNumber(tc.s)
		if v != tc.v || ok != tc.ok {
			t.Errorf("parseNumber(%q) = %d, %v", tc.s, v, ok)
		}
	}
	if b, ok := decodeBinary("0xabc"); !ok || !cmp.Equal(b, []byte{0x0a, 0xbc}) {
		t.Errorf("odd hex: % x %v", b, ok)
	}
	if b, ok := decodeBinary("0bq80="); !ok || !cmp.Equal(b, []byte{0xab, 0xcd}) {
		t.Errorf("base64: % x %v", b, ok)
	}
	for _, bad := range []string{"abc", "0x", "0xzz", "0b!!", "1x00"} {
		if _, ok := decodeBinary(bad); ok {
			t.Errorf("decodeBinary(%q) accepted", bad)
		}
	}
}
