package auth

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func seqBytes(start byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = start + byte(i)
	}
	return b
}

func mustHex(t testing.TB, parts ...string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(strings.Join(parts, ""), " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// goldenMessages pairs each message with its wire bytes, laid out by hand
// from include/linux/nvme.h's nvmf_auth_dhchap_*_data.
func goldenMessages(t testing.TB) []struct {
	name string
	m    Message
	wire []byte
} {
	c32 := seqBytes(0xc0, 32)
	r32 := seqBytes(0x40, 32)
	dh := seqBytes(0x01, 256)
	return []struct {
		name string
		m    Message
		wire []byte
	}{
		{
			// What Linux's nvme_auth_set_dhchap_negotiate_data sends.
			name: "negotiate (Linux host)",
			m: &Negotiate{TransactionID: 5, SCC: SCCNone, Protocols: []Protocol{{
				AuthID: AuthIDDHCHAP, Hashes: AllHashes(), DHGroups: AllDHGroups(),
			}}},
			wire: mustHex(t, "00 00 0000 0500 00 01",
				"01 00 03 06", "010203", strings.Repeat("00", 27), "000102030405", strings.Repeat("00", 24)),
		},
		{
			name: "challenge null group",
			m:    &Challenge{TransactionID: 5, Hash: HashSHA256, DHGroup: DHGroupNull, SeqNum: 0x11223344, C: c32},
			wire: mustHex(t, "01 01 0000 0500 20 00 01 00 0000 44332211", hex.EncodeToString(c32)),
		},
		{
			name: "challenge ffdhe2048",
			m:    &Challenge{TransactionID: 0xabcd, Hash: HashSHA256, DHGroup: DHGroupFFDHE2048, SeqNum: 1, C: c32, DHValue: dh},
			wire: mustHex(t, "01 01 0000 cdab 20 00 01 01 0001 01000000", hex.EncodeToString(c32), hex.EncodeToString(dh)),
		},
		{
			name: "reply unidirectional",
			m:    &Reply{TransactionID: 5, Response: r32},
			wire: mustHex(t, "01 02 0000 0500 20 00 00 00 0000 00000000", hex.EncodeToString(r32), strings.Repeat("00", 32)),
		},
		{
			name: "reply bidirectional with DH",
			m:    &Reply{TransactionID: 5, Response: r32, C2: c32, SeqNum: 0x01020304, DHValue: dh},
			wire: mustHex(t, "01 02 0000 0500 20 00 01 00 0001 04030201", hex.EncodeToString(r32), hex.EncodeToString(c32), hex.EncodeToString(dh)),
		},
		{
			name: "success1 without response",
			m:    &Success1{TransactionID: 5, HashLen: 48},
			wire: mustHex(t, "01 03 0000 0500 30 00 00", strings.Repeat("00", 7)),
		},
		{
			name: "success1 with response",
			m:    &Success1{TransactionID: 5, HashLen: 32, Response: r32},
			wire: mustHex(t, "01 03 0000 0500 20 00 01", strings.Repeat("00", 7), hex.EncodeToString(r32)),
		},
		{
			name: "success2",
			m:    &Success2{TransactionID: 5},
			wire: mustHex(t, "01 04 0000 0500", strings.Repeat("00", 10)),
		},
		{
			name: "failure1",
			m:    &Failure{ID: MsgFailure1, TransactionID: 5, Reason: ReasonFailed, Code: FailureIncorrectPayload},
			wire: mustHex(t, "00 f1 0000 0500 01 06"),
		},
		{
			name: "failure2",
			m:    &Failure{ID: MsgFailure2, TransactionID: 0x1234, Reason: ReasonFailed, Code: FailureFailed},
			wire: mustHex(t, "00 f0 0000 3412 01 01"),
		},
	}
}

func TestMessagesGolden(t *testing.T) {
	for _, tc := range goldenMessages(t) {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.m.AppendBinary([]byte{0xee})
			if err != nil {
				t.Fatal(err)
			}
			if got[0] != 0xee || !bytes.Equal(got[1:], tc.wire) {
				t.Errorf("AppendBinary:\n got %x\nwant %x", got[1:], tc.wire)
			}
			// Parse, with trailing zero padding as a Receive buffer has.
			padded := append(append([]byte(nil), tc.wire...), make([]byte, 100)...)
			m, err := ParseMessage(padded)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.m, m); diff != "" {
				t.Errorf("ParseMessage (-want +got):\n%s", diff)
			}
			if m.MessageHeader() != tc.m.MessageHeader() {
				t.Errorf("header %+v, want %+v", m.MessageHeader(), tc.m.MessageHeader())
			}
		})
	}
	if got := len(marshal(goldenMessages(t)[0].m)); got != NegotiateHeaderSize+ProtocolDescriptorSize {
		t.Errorf("Linux negotiate is %d bytes, want 72", got)
	}
}

func TestParseMalformed(t *testing.T) {
	g := goldenMessages(t)
	neg, chDH, rep, s1 := g[0].wire, g[2].wire, g[4].wire, g[6].wire
	mod := func(b []byte, off int, v byte) []byte {
		b = append([]byte(nil), b...)
		b[off] = v
		return b
	}
	for _, tc := range []struct {
		name  string
		parse func([]byte) (Message, error)
		in    []byte
		want  string
	}{
		{"empty", ParseMessage, nil, "shorter than the 6-byte message header"},
		{"unknown message", ParseMessage, mustHex(t, "01 07 0000 0000"), "unknown message dh-hmac-chap/auth message 0x07"},
		{"negotiate short", pm(ParseNegotiate), neg[:7], "shorter than its 8-byte header"},
		{"negotiate napd past end", pm(ParseNegotiate), neg[:71], "cannot hold its 1 protocol descriptors"},
		{"negotiate halen 31", pm(ParseNegotiate), mod(neg, 10, 31), "lists 31 hashes"},
		{"negotiate dhlen 31", pm(ParseNegotiate), mod(neg, 11, 31), "and 31 DH groups"},
		{"negotiate wrong type", pm(ParseNegotiate), mod(neg, 0, 1), "want common/AUTH_Negotiate"},
		{"challenge short", pm(ParseChallenge), chDH[:15], "shorter than its 16-byte header"},
		{"challenge dh past end", pm(ParseChallenge), chDH[:len(chDH)-1], "cannot hold its 32-byte challenge and 256-byte DH value"},
		{"challenge hl past end", pm(ParseChallenge), mod(chDH[:48], 10, 0), "cannot hold"},
		{"challenge as reply", pm(ParseChallenge), rep, "want dh-hmac-chap/DH-HMAC-CHAP_Challenge"},
		{"reply past end", pm(ParseReply), rep[:len(rep)-1], "cannot hold its two 32-byte values"},
		{"reply hl 255", pm(ParseReply), mod(rep, 6, 255), "cannot hold"},
		{"success1 response past end", pm(ParseSuccess1), s1[:47], "cannot hold its 32-byte response"},
		{"success2 short", pm(ParseSuccess2), g[7].wire[:15], "shorter than its 16-byte header"},
		{"failure short", pm(ParseFailure), g[8].wire[:7], "shorter than 8"},
		{"failure wrong id", pm(ParseFailure), mod(g[8].wire, 1, 0xf2), "want common/AUTH_Failure1 or AUTH_Failure2"},
	} {
		_, err := tc.parse(tc.in)
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want ErrMalformed saying %q", tc.name, err, tc.want)
		}
	}
}

// pm adapts a typed parser to ParseMessage's signature.
func pm[T Message](f func([]byte) (T, error)) func([]byte) (Message, error) {
	return func(b []byte) (Message, error) { return f(b) }
}

func TestAppendBinaryErrors(t *testing.T) {
	for _, m := range []Message{
		&Negotiate{Protocols: []Protocol{{Hashes: make([]HashID, 31)}}},
		&Challenge{C: make([]byte, 256)},
		&Reply{Response: make([]byte, 32), C2: make([]byte, 48)},
		&Success1{HashLen: 32, Response: make([]byte, 48)},
		&Failure{ID: MsgSuccess2},
	} {
		if b, err := m.AppendBinary([]byte{1}); err == nil || len(b) != 1 {
			t.Errorf("%T: AppendBinary = %x, %v; want an error and b unchanged", m, b, err)
		}
	}
}

func TestIDStrings(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{HashSHA384.String(), "sha384"},
		{DHGroupFFDHE6144.String(), "ffdhe6144"},
		{MsgFailure1.String(), "AUTH_Failure1"},
		{FailureIncorrectProtocol.Error(), "incorrect protocol message"},
		{TypeDHCHAP.String(), "dh-hmac-chap"},
		{HostAwaitSuccess1.String(), "await-success1"},
		{CtrlFailure1Pending.String(), "failure1-pending"},
		{HashID(9).String(), "hash 0x09"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	for _, s := range []string{"sha256", "hmac(sha512)"} {
		if _, err := ParseHashName(s); err != nil {
			t.Error(err)
		}
	}
	if g, err := ParseDHGroupName("ffdhe3072"); err != nil || g != DHGroupFFDHE3072 {
		t.Error(g, err)
	}
	if _, err := ParseDHGroupName("ffdhe1024"); err == nil {
		t.Error("ffdhe1024 accepted")
	}
}
