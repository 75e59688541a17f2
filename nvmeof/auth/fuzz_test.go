package auth

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// addGolden seeds f with every golden message and a few truncations.
func addGolden(f *testing.F) {
	for _, g := range goldenMessages(f) {
		f.Add(g.wire)
		f.Add(g.wire[:len(g.wire)/2])
	}
	f.Add([]byte{})
}

// fuzzRoundTrip parses b with parse; a message that parses must encode and
// parse back to the same value, and parse errors must wrap ErrMalformed.
func fuzzRoundTrip[T Message](t *testing.T, b []byte, parse func([]byte) (T, error)) {
	m, err := parse(b)
	if err != nil {
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("parse error %v does not wrap ErrMalformed", err)
		}
		return
	}
	enc, err := m.AppendBinary(nil)
	if err != nil {
		t.Fatalf("parsed message does not encode: %v", err)
	}
	if len(enc) > len(b) {
		t.Fatalf("encoding is %d bytes, input only %d", len(enc), len(b))
	}
	m2, err := parse(enc)
	if err != nil {
		t.Fatalf("encoding does not parse: %v", err)
	}
	if diff := cmp.Diff(m, m2); diff != "" {
		t.Fatalf("round trip (-first +second):\n%s", diff)
	}
}

func FuzzParseNegotiate(f *testing.F) {
	addGolden(f)
	f.Fuzz(func(t *testing.T, b []byte) { fuzzRoundTrip(t, b, ParseNegotiate) })
}

func FuzzParseChallenge(f *testing.F) {
	addGolden(f)
	f.Fuzz(func(t *testing.T, b []byte) { fuzzRoundTrip(t, b, ParseChallenge) })
}

func FuzzParseReply(f *testing.F) {
	addGolden(f)
	f.Fuzz(func(t *testing.T, b []byte) { fuzzRoundTrip(t, b, ParseReply) })
}

func FuzzParseSuccess1(f *testing.F) {
	addGolden(f)
	f.Fuzz(func(t *testing.T, b []byte) { fuzzRoundTrip(t, b, ParseSuccess1) })
}

func FuzzParseSuccess2(f *testing.F) {
	addGolden(f)
	f.Fuzz(func(t *testing.T, b []byte) { fuzzRoundTrip(t, b, ParseSuccess2) })
}

func FuzzParseFailure(f *testing.F) {
	addGolden(f)
	f.Fuzz(func(t *testing.T, b []byte) { fuzzRoundTrip(t, b, ParseFailure) })
}

func FuzzParseMessage(f *testing.F) {
	addGolden(f)
	f.Fuzz(func(t *testing.T, b []byte) { fuzzRoundTrip(t, b, ParseMessage) })
}

func FuzzParseSecret(f *testing.F) {
	for _, s := range []string{
		"DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:",
		"DHHC-1:02:Ti30cf3iSuNjq/lRjFAhjm2RbFcWDhJUTcJd/fCwC/aWd7zsWLS2PiiYtssUGro8MrL7/g==:",
		"DHHC-1:03:smW4WrBsoTcAXpZ6ucGeDNt+YGcpgWlIkUI7Ukrr2nD/Ul8aDGhgfqlZflaD2BExZPqsyKaOxcpUaCO313Y/2X10Ig8=",
		"DHHC-1:01:",
		"DHHC-1",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sec, err := ParseSecret(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidSecret) {
				t.Fatalf("error %v does not wrap ErrInvalidSecret", err)
			}
			return
		}
		if err := sec.Validate(); err != nil {
			t.Fatalf("parsed secret does not validate: %v", err)
		}
		again, err := ParseSecret(sec.String())
		if err != nil || again.Transform != sec.Transform || !bytes.Equal(again.Key, sec.Key) {
			t.Fatalf("String() does not parse back: %v", err)
		}
	})
}

// FuzzController feeds three arbitrary Auth Send payloads, each followed by
// an Auth Receive, to a Controller: it must never panic and must end in a
// consistent state.
func FuzzController(f *testing.F) {
	g := goldenMessages(f)
	f.Add(g[0].wire, g[4].wire, g[7].wire, uint16(4096))
	f.Add(g[0].wire, g[3].wire, g[9].wire, uint16(8))
	f.Add([]byte{}, []byte{1}, g[0].wire, uint16(0))
	hs := testSecret(f, HashNone, 1, testHostNQN)
	cs := testSecret(f, HashNone, 2, testSubsysNQN)
	f.Fuzz(func(t *testing.T, a, b, c []byte, al uint16) {
		ctrl, err := NewController(ControllerConfig{HostNQN: testHostNQN, SubsysNQN: testSubsysNQN, Secret: hs, CtrlSecret: &cs,
			DHGroups: []DHGroupID{DHGroupNull, DHGroupFFDHE2048}})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range [][]byte{a, b, c} {
			ctrl.Send(m)
			out, err := ctrl.Receive(int(al))
			if len(out) > int(al) {
				t.Fatalf("Receive(%d) returned %d bytes", al, len(out))
			}
			if out != nil {
				if _, perr := ParseMessage(out); perr != nil {
					t.Fatalf("controller sent an unparsable message: %v", perr)
				}
			}
			if err == nil && out == nil {
				t.Fatal("Receive returned neither bytes nor an error")
			}
		}
		if ctrl.State() == CtrlFailed && ctrl.Authenticated() {
			t.Fatal("failed but authenticated")
		}
	})
}

// FuzzHost feeds an arbitrary Challenge and Success1 to a Host.
func FuzzHost(f *testing.F) {
	g := goldenMessages(f)
	f.Add(g[1].wire, g[6].wire)
	f.Add(g[2].wire, g[5].wire)
	f.Add(g[8].wire, []byte{})
	hs := testSecret(f, HashNone, 1, testHostNQN)
	cs := testSecret(f, HashNone, 2, testSubsysNQN)
	f.Fuzz(func(t *testing.T, ch, s1 []byte) {
		h, err := NewHost(HostConfig{HostNQN: testHostNQN, SubsysNQN: testSubsysNQN, Secret: hs, CtrlSecret: &cs})
		if err != nil {
			t.Fatal(err)
		}
		h.Start(5)
		out, err := h.HandleChallenge(ch)
		if out == nil && err == nil {
			t.Fatalf("HandleChallenge returned %d bytes and %v", len(out), err)
		}
		if out != nil {
			if _, perr := ParseMessage(out); perr != nil {
				t.Fatalf("host sent an unparsable message: %v", perr)
			}
		}
		out, _ = h.HandleSuccess1(s1)
		if h.State() == HostAuthenticated {
			t.Fatal("host authenticated a controller that cannot know the secret")
		}
		if out != nil {
			if _, perr := ParseMessage(out); perr != nil {
				t.Fatalf("host sent an unparsable message: %v", perr)
			}
		}
	})
}
