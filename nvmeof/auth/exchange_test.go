package auth

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

const (
	testHostNQN   = "nqn.2014-08.org.nvmexpress:uuid:6a1a3b1f-0f5e-4a8e-9c39-2d6a8c1c2b7e"
	testSubsysNQN = "nqn.2026-11.io.rdisk:default"
)

func testSecret(t testing.TB, transform HashID, fill byte, nqn string) Secret {
	t.Helper()
	n := 32
	if transform != HashNone {
		n = transform.Size()
	}
	s, err := NewSecret(bytes.Repeat([]byte{fill}, n), transform, nqn)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type pair struct {
	h *Host
	c *Controller
}

func newPair(t testing.TB, hc HostConfig, cc ControllerConfig) pair {
	t.Helper()
	hc.HostNQN, hc.SubsysNQN = testHostNQN, testSubsysNQN
	cc.HostNQN, cc.SubsysNQN = testHostNQN, testSubsysNQN
	h, err := NewHost(hc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewController(cc)
	if err != nil {
		t.Fatal(err)
	}
	return pair{h, c}
}

// run drives one exchange as a transport would, returning the first error
// of either side.
func (p pair) run(t testing.TB, tid uint16) error {
	t.Helper()
	neg, err := p.h.Start(tid)
	if err != nil {
		return err
	}
	ch, _ := p.c.Step(neg) // a Failure1 is the host's to report
	rep, herr := p.h.HandleChallenge(ch)
	if herr != nil {
		if rep != nil {
			p.c.Send(rep)
		}
		return herr
	}
	s1, _ := p.c.Step(rep)
	last, herr := p.h.HandleSuccess1(s1)
	if last != nil {
		if err := p.c.Send(last); err != nil && herr == nil {
			return err
		}
	}
	return herr
}

// TestLoopback authenticates for every hash with the null, ffdhe2048 and
// ffdhe3072 groups, one- and two-way, with transformed and plain secrets.
func TestLoopback(t *testing.T) {
	seq := new(SeqCounter)
	for _, hash := range AllHashes() {
		for _, group := range []DHGroupID{DHGroupNull, DHGroupFFDHE2048, DHGroupFFDHE3072} {
			for _, bidi := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/bidi=%v", hash, group, bidi), func(t *testing.T) {
					hs := testSecret(t, hash, 0x11, testHostNQN) // key transformed with the same hash
					hc := HostConfig{Secret: hs, SeqNums: seq}
					cc := ControllerConfig{Secret: hs, Hashes: []HashID{hash}, DHGroups: []DHGroupID{group}, SeqNums: seq}
					if bidi {
						cs := testSecret(t, HashNone, 0x22, testSubsysNQN)
						hc.CtrlSecret, cc.CtrlSecret = &cs, &cs
					}
					p := newPair(t, hc, cc)
					if err := p.run(t, 7); err != nil {
						t.Fatal(err)
					}
					if p.h.State() != HostAuthenticated || p.c.State() != CtrlAuthenticated || !p.c.Authenticated() {
						t.Fatalf("states %s / %s", p.h.State(), p.c.State())
					}
					if p.h.Hash() != hash || p.h.DHGroup() != group || p.c.Hash() != hash || p.c.DHGroup() != group {
						t.Errorf("negotiated %s/%s (host) %s/%s (ctrl)", p.h.Hash(), p.h.DHGroup(), p.c.Hash(), p.c.DHGroup())
					}
					// Re-authentication on the same objects.
					if err := p.run(t, 8); err != nil {
						t.Fatalf("re-authentication: %v", err)
					}
					if p.h.State() != HostAuthenticated || !p.c.Authenticated() || p.c.TransactionID() != 8 {
						t.Fatalf("after re-authentication: %s / %s tid %d", p.h.State(), p.c.State(), p.c.TransactionID())
					}
				})
			}
		}
	}
}

// TestLoopbackLargeGroups runs the larger groups once each (bidirectional,
// so each side does both exponentiations); they are slow under -race.
func TestLoopbackLargeGroups(t *testing.T) {
	for _, group := range []DHGroupID{DHGroupFFDHE4096, DHGroupFFDHE6144, DHGroupFFDHE8192} {
		if testing.Short() && group != DHGroupFFDHE4096 {
			continue
		}
		hs := testSecret(t, HashSHA512, 0x33, testHostNQN)
		cs := testSecret(t, HashSHA384, 0x44, testSubsysNQN)
		p := newPair(t, HostConfig{Secret: hs, CtrlSecret: &cs}, ControllerConfig{Secret: hs, CtrlSecret: &cs, DHGroups: []DHGroupID{group}})
		if err := p.run(t, 1); err != nil {
			t.Fatalf("%s: %v", group, err)
		}
		if p.c.DHGroup() != group || !p.c.Authenticated() {
			t.Errorf("%s: negotiated %s, authenticated %v", group, p.c.DHGroup(), p.c.Authenticated())
		}
	}
}

// TestNegotiateSelection: the controller takes its first allowed id the
// host offers; the defaults pick what nvmet's defaults pick.
func TestNegotiateSelection(t *testing.T) {
	hs := testSecret(t, HashNone, 1, testHostNQN)
	for _, tc := range []struct {
		name         string
		hostH, ctrlH []HashID
		hostG, ctrlG []DHGroupID
		wantH        HashID
		wantG        DHGroupID
		wantCode     FailureCode
	}{
		{name: "defaults", wantH: HashSHA256, wantG: DHGroupNull},
		{name: "controller preference", ctrlH: []HashID{HashSHA512, HashSHA256}, ctrlG: []DHGroupID{DHGroupFFDHE3072, DHGroupNull}, wantH: HashSHA512, wantG: DHGroupFFDHE3072},
		{name: "host subset", hostH: []HashID{HashSHA384}, hostG: []DHGroupID{DHGroupFFDHE2048}, wantH: HashSHA384, wantG: DHGroupFFDHE2048},
		{name: "no common hash", hostH: []HashID{HashSHA256}, ctrlH: []HashID{HashSHA512}, wantCode: FailureHashUnusable},
		{name: "no common group", hostG: []DHGroupID{DHGroupNull}, ctrlG: []DHGroupID{DHGroupFFDHE2048}, wantCode: FailureDHGroupUnusable},
	} {
		p := newPair(t, HostConfig{Secret: hs, Hashes: tc.hostH, DHGroups: tc.hostG}, ControllerConfig{Secret: hs, Hashes: tc.ctrlH, DHGroups: tc.ctrlG})
		err := p.run(t, 3)
		if tc.wantCode != 0 {
			var e *Error
			if !errors.As(err, &e) || e.Code != tc.wantCode || !e.Remote || e.Step != "challenge" {
				t.Errorf("%s: %v, want the host to get Failure1 %s", tc.name, err, tc.wantCode)
			}
			if p.c.State() != CtrlFailed || p.h.State() != HostFailed {
				t.Errorf("%s: states %s / %s", tc.name, p.h.State(), p.c.State())
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
		} else if p.c.Hash() != tc.wantH || p.c.DHGroup() != tc.wantG {
			t.Errorf("%s: chose %s/%s, want %s/%s", tc.name, p.c.Hash(), p.c.DHGroup(), tc.wantH, tc.wantG)
		}
	}
}

// TestWrongHostKey: the controller answers a wrong R1 with Failure1
// "failed"; the host reports it as the peer's verdict.
func TestWrongHostKey(t *testing.T) {
	for _, group := range []DHGroupID{DHGroupNull, DHGroupFFDHE2048} {
		p := newPair(t,
			HostConfig{Secret: testSecret(t, HashSHA256, 1, testHostNQN)},
			ControllerConfig{Secret: testSecret(t, HashSHA256, 2, testHostNQN), DHGroups: []DHGroupID{group}})
		neg, _ := p.h.Start(1)
		ch, err := p.c.Step(neg)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := p.h.HandleChallenge(ch)
		if err != nil {
			t.Fatal(err)
		}
		f1, cerr := p.c.Step(rep)
		if !errors.Is(cerr, FailureFailed) || p.c.State() != CtrlFailed || p.c.Authenticated() {
			t.Fatalf("%s: controller: %v in %s", group, cerr, p.c.State())
		}
		f, err := ParseFailure(f1)
		if err != nil || f.ID != MsgFailure1 || f.Code != FailureFailed || f.Reason != ReasonFailed || f.TransactionID != 1 {
			t.Fatalf("%s: controller sent %+v (%v)", group, f, err)
		}
		out, herr := p.h.HandleSuccess1(f1)
		var e *Error
		if out != nil || !errors.As(herr, &e) || e.Code != FailureFailed || !e.Remote || p.h.State() != HostFailed {
			t.Errorf("%s: host: %x, %v", group, out, herr)
		}
	}
}

// TestWrongControllerKey: the host detects a wrong R2 and sends Failure2,
// which fails the controller.
func TestWrongControllerKey(t *testing.T) {
	hs := testSecret(t, HashSHA384, 1, testHostNQN)
	hcs := testSecret(t, HashNone, 2, testSubsysNQN)
	ccs := testSecret(t, HashNone, 3, testSubsysNQN)
	p := newPair(t, HostConfig{Secret: hs, CtrlSecret: &hcs}, ControllerConfig{Secret: hs, CtrlSecret: &ccs, DHGroups: []DHGroupID{DHGroupFFDHE2048}})
	neg, _ := p.h.Start(9)
	ch, _ := p.c.Step(neg)
	rep, _ := p.h.HandleChallenge(ch)
	s1, err := p.c.Step(rep)
	if err != nil || p.c.State() != CtrlAwaitSuccess2 {
		t.Fatalf("controller: %v in %s", err, p.c.State())
	}
	f2, herr := p.h.HandleSuccess1(s1)
	if !errors.Is(herr, FailureFailed) || p.h.State() != HostFailed {
		t.Fatalf("host: %v in %s", herr, p.h.State())
	}
	f, err := ParseFailure(f2)
	if err != nil || f.ID != MsgFailure2 || f.Code != FailureFailed || f.TransactionID != 9 {
		t.Fatalf("host sent %+v (%v)", f, err)
	}
	cerr := p.c.Send(f2)
	var e *Error
	if !errors.As(cerr, &e) || !e.Remote || e.Code != FailureFailed || p.c.State() != CtrlFailed || p.c.Authenticated() {
		t.Errorf("controller after Failure2: %v in %s", cerr, p.c.State())
	}
}

// TestBidirectionalWithoutControllerSecret: nvmet answers a host asking
// for a controller response it cannot give with Failure1 "failed".
func TestBidirectionalWithoutControllerSecret(t *testing.T) {
	hs := testSecret(t, HashNone, 1, testHostNQN)
	cs := testSecret(t, HashNone, 2, testSubsysNQN)
	p := newPair(t, HostConfig{Secret: hs, CtrlSecret: &cs}, ControllerConfig{Secret: hs})
	if err := p.run(t, 1); !errors.Is(err, FailureFailed) || p.c.State() != CtrlFailed || p.h.State() != HostFailed {
		t.Errorf("%v, states %s / %s", err, p.h.State(), p.c.State())
	}
	// The reverse, a controller secret the host does not use, is fine.
	p = newPair(t, HostConfig{Secret: hs}, ControllerConfig{Secret: hs, CtrlSecret: &cs})
	if err := p.run(t, 1); err != nil {
		t.Error(err)
	}
}

// challengeFor returns a controller that has sent its Challenge, and that
// Challenge.
func challengeFor(t *testing.T, p pair, tid uint16) []byte {
	t.Helper()
	neg, _ := p.h.Start(tid)
	ch, err := p.c.Step(neg)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func failure1Code(t *testing.T, b []byte) FailureCode {
	t.Helper()
	f, err := ParseFailure(b)
	if err != nil || f.ID != MsgFailure1 {
		t.Fatalf("want a Failure1, got %x (%v)", b, err)
	}
	return f.Code
}

// TestControllerRejects covers the controller's checks of what it receives.
func TestControllerRejects(t *testing.T) {
	hs := testSecret(t, HashNone, 1, testHostNQN)
	cfg := ControllerConfig{Secret: hs, DHGroups: []DHGroupID{DHGroupFFDHE2048}}
	negotiate := func(mod func(b []byte)) []byte {
		b := marshal(&Negotiate{TransactionID: 4, Protocols: []Protocol{{AuthID: AuthIDDHCHAP, Hashes: AllHashes(), DHGroups: AllDHGroups()}}})
		if mod != nil {
			mod(b)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		msgs func(p pair) [][]byte // each passed to Step; the last answer must be a Failure1
		want FailureCode
	}{
		{"negotiate too short", func(pair) [][]byte { return [][]byte{negotiate(nil)[:71]} }, FailureIncorrectPayload},
		{"negotiate sc_c", func(pair) [][]byte { return [][]byte{negotiate(func(b []byte) { b[6] = SCCNewTLSPSK })} }, FailureConcatMismatch},
		{"negotiate napd 0", func(pair) [][]byte { return [][]byte{negotiate(func(b []byte) { b[7] = 0 })} }, FailureHashUnusable},
		{"negotiate authid", func(pair) [][]byte { return [][]byte{negotiate(func(b []byte) { b[8] = 2 })} }, FailureIncorrectPayload},
		{"negotiate halen 40", func(pair) [][]byte { return [][]byte{negotiate(func(b []byte) { b[10] = 40 })} }, FailureIncorrectPayload},
		{"header only", func(pair) [][]byte { return [][]byte{{0, 0}} }, FailureIncorrectPayload},
		{"unknown auth type", func(pair) [][]byte { return [][]byte{{9, 0, 0, 0, 0, 0, 0, 0}} }, FailureIncorrectProtocol},
		{"reply before negotiate", func(pair) [][]byte { return [][]byte{marshal(&Reply{Response: make([]byte, 32)})} }, FailureIncorrectProtocol},
		{"success2 instead of reply", func(p pair) [][]byte {
			return [][]byte{negotiate(nil), marshal(&Success2{TransactionID: 4})}
		}, FailureIncorrectProtocol},
		{"reply with wrong transaction", func(p pair) [][]byte {
			return [][]byte{negotiate(nil), marshal(&Reply{TransactionID: 5, Response: make([]byte, 32), DHValue: []byte{2}})}
		}, FailureIncorrectPayload},
		{"reply truncated", func(p pair) [][]byte {
			r := marshal(&Reply{TransactionID: 4, Response: make([]byte, 32), DHValue: make([]byte, 256)})
			return [][]byte{negotiate(nil), r[:len(r)-1]}
		}, FailureIncorrectPayload},
		{"reply without DH value", func(p pair) [][]byte {
			return [][]byte{negotiate(nil), marshal(&Reply{TransactionID: 4, Response: make([]byte, 32)})}
		}, FailureIncorrectPayload},
		{"reply with DH value 1", func(p pair) [][]byte {
			return [][]byte{negotiate(nil), marshal(&Reply{TransactionID: 4, Response: make([]byte, 32), DHValue: []byte{1}})}
		}, FailureDHGroupUnusable},
		{"reply with short response", func(p pair) [][]byte {
			return [][]byte{negotiate(nil), marshal(&Reply{TransactionID: 4, Response: make([]byte, 31), DHValue: []byte{2}})}
		}, FailureFailed},
		{"reply with zero response", func(p pair) [][]byte {
			return [][]byte{negotiate(nil), marshal(&Reply{TransactionID: 4, Response: make([]byte, 32), DHValue: []byte{4}})}
		}, FailureFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, HostConfig{Secret: hs}, cfg)
			var last []byte
			for _, m := range tc.msgs(p) {
				last, _ = p.c.Step(m)
			}
			if got := failure1Code(t, last); got != tc.want {
				t.Errorf("Failure1 %s, want %s (err %v)", got, tc.want, p.c.Err())
			}
			if p.c.State() != CtrlFailed || p.c.Authenticated() || !errors.Is(p.c.Err(), tc.want) {
				t.Errorf("state %s, authenticated %v, err %v", p.c.State(), p.c.Authenticated(), p.c.Err())
			}
		})
	}
}

func TestControllerReceive(t *testing.T) {
	hs := testSecret(t, HashNone, 1, testHostNQN)
	p := newPair(t, HostConfig{Secret: hs}, ControllerConfig{Secret: hs, DHGroups: []DHGroupID{DHGroupFFDHE2048}})
	neg, _ := p.h.Start(2)
	if err := p.c.Send(neg); err != nil {
		t.Fatal(err)
	}
	// A short allocation length leaves the state alone; the retry gets
	// the same challenge.
	if _, err := p.c.Receive(100); !errors.Is(err, ErrShortBuffer) || p.c.State() != CtrlChallengePending {
		t.Fatalf("short receive: %v in %s", err, p.c.State())
	}
	ch, err := p.c.Receive(16 + 32 + 256)
	if err != nil || len(ch) != 16+32+256 {
		t.Fatalf("receive: %d bytes, %v", len(ch), err)
	}
	// A second Receive now is out of order: Failure1 "failed".
	out, err := p.c.Receive(MaxMessageSize)
	if failure1Code(t, out) != FailureFailed || !errors.Is(err, FailureFailed) || p.c.State() != CtrlFailed {
		t.Errorf("second receive: %v in %s", err, p.c.State())
	}
	// Receive before any Negotiate.
	c, _ := NewController(ControllerConfig{HostNQN: testHostNQN, SubsysNQN: testSubsysNQN, Secret: hs})
	if out, _ := c.Receive(MaxMessageSize); failure1Code(t, out) != FailureFailed {
		t.Error("receive before negotiate did not fail")
	}
	// A Negotiate restarts even a failed controller; Reset clears it.
	if err := c.Send(neg); err != nil || c.State() != CtrlChallengePending {
		t.Errorf("negotiate after failure: %v in %s", err, c.State())
	}
	c.Reset()
	if c.State() != CtrlAwaitNegotiate || c.Authenticated() {
		t.Errorf("after Reset: %s", c.State())
	}
}

// TestHostRejects covers the host's checks of the Challenge and Success1.
func TestHostRejects(t *testing.T) {
	hs := testSecret(t, HashNone, 1, testHostNQN)
	cs := testSecret(t, HashNone, 2, testSubsysNQN)
	c32 := make([]byte, 32)
	for _, tc := range []struct {
		name string
		ch   []byte
		want FailureCode
	}{
		{"garbage", []byte{1}, FailureIncorrectPayload},
		{"truncated", marshal(&Challenge{TransactionID: 6, Hash: HashSHA256, C: c32})[:40], FailureIncorrectPayload},
		{"success1 instead", marshal(&Success1{TransactionID: 6, HashLen: 32}), FailureIncorrectProtocol},
		{"wrong transaction", marshal(&Challenge{TransactionID: 7, Hash: HashSHA256, C: c32}), FailureIncorrectProtocol},
		{"unknown hash", marshal(&Challenge{TransactionID: 6, Hash: 4, C: c32}), FailureHashUnusable},
		{"unoffered hash", marshal(&Challenge{TransactionID: 6, Hash: HashSHA512, C: make([]byte, 64)}), FailureHashUnusable},
		{"hl not hash size", marshal(&Challenge{TransactionID: 6, Hash: HashSHA256, C: make([]byte, 48)}), FailureHashUnusable},
		{"unknown group", marshal(&Challenge{TransactionID: 6, Hash: HashSHA256, DHGroup: 6, C: c32, DHValue: []byte{2}}), FailureDHGroupUnusable},
		{"unoffered group", marshal(&Challenge{TransactionID: 6, Hash: HashSHA256, DHGroup: DHGroupFFDHE8192, C: c32, DHValue: []byte{2}}), FailureDHGroupUnusable},
		{"group without DH value", marshal(&Challenge{TransactionID: 6, Hash: HashSHA256, DHGroup: DHGroupFFDHE2048, C: c32}), FailureDHGroupUnusable},
		{"null group with DH value", marshal(&Challenge{TransactionID: 6, Hash: HashSHA256, C: c32, DHValue: []byte{2}}), FailureIncorrectPayload},
		{"bad DH value", marshal(&Challenge{TransactionID: 6, Hash: HashSHA256, DHGroup: DHGroupFFDHE2048, C: c32, DHValue: []byte{1}}), FailureIncorrectPayload},
	} {
		h, err := NewHost(HostConfig{HostNQN: testHostNQN, SubsysNQN: testSubsysNQN, Secret: hs,
			Hashes: []HashID{HashSHA256, HashSHA384}, DHGroups: []DHGroupID{DHGroupNull, DHGroupFFDHE2048}})
		if err != nil {
			t.Fatal(err)
		}
		h.Start(6)
		out, err := h.HandleChallenge(tc.ch)
		f, perr := ParseFailure(out)
		if perr != nil || f.ID != MsgFailure2 || f.Code != tc.want || f.TransactionID != 6 || !errors.Is(err, tc.want) || h.State() != HostFailed {
			t.Errorf("%s: sent %+v (%v), error %v, state %s; want Failure2 %s", tc.name, f, perr, err, h.State(), tc.want)
		}
	}

	// Success1 checks, bidirectional.
	mk := func() pair {
		return newPair(t, HostConfig{Secret: hs, CtrlSecret: &cs}, ControllerConfig{Secret: hs, CtrlSecret: &cs})
	}
	for _, tc := range []struct {
		name string
		mod  func(s1 []byte) []byte
		want FailureCode
	}{
		{"no response", func(s1 []byte) []byte { s1[8] = 0; return s1[:16] }, FailureFailed},
		{"flipped response", func(s1 []byte) []byte { s1[20] ^= 1; return s1 }, FailureFailed},
		{"wrong hl", func(s1 []byte) []byte { s1[6] = 48; return append(s1, make([]byte, 16)...) }, FailureHashUnusable},
		{"truncated", func(s1 []byte) []byte { return s1[:30] }, FailureIncorrectPayload},
		{"wrong transaction", func(s1 []byte) []byte { s1[4]++; return s1 }, FailureIncorrectProtocol},
	} {
		p := mk()
		ch := challengeFor(t, p, 3)
		rep, err := p.h.HandleChallenge(ch)
		if err != nil {
			t.Fatal(err)
		}
		s1, err := p.c.Step(rep)
		if err != nil {
			t.Fatal(err)
		}
		out, err := p.h.HandleSuccess1(tc.mod(s1))
		f, perr := ParseFailure(out)
		if perr != nil || f.ID != MsgFailure2 || f.Code != tc.want || !errors.Is(err, tc.want) {
			t.Errorf("success1 %s: sent %+v (%v), error %v; want Failure2 %s", tc.name, f, perr, err, tc.want)
		}
	}

	// Out of order calls change nothing.
	h, _ := NewHost(HostConfig{HostNQN: testHostNQN, SubsysNQN: testSubsysNQN, Secret: hs})
	if out, err := h.HandleSuccess1(nil); out != nil || !errors.Is(err, ErrState) || h.State() != HostIdle {
		t.Errorf("HandleSuccess1 before Start: %x %v %s", out, err, h.State())
	}
}

func TestConfigErrors(t *testing.T) {
	hs := testSecret(t, HashNone, 1, testHostNQN)
	bad := Secret{Transform: HashSHA256, Key: make([]byte, 48)}
	for i, cfg := range []HostConfig{
		{SubsysNQN: testSubsysNQN, Secret: hs},
		{HostNQN: testHostNQN, SubsysNQN: testSubsysNQN, Secret: bad},
		{HostNQN: testHostNQN, SubsysNQN: testSubsysNQN, Secret: hs, CtrlSecret: &bad},
		{HostNQN: testHostNQN, SubsysNQN: testSubsysNQN, Secret: hs, Hashes: []HashID{}},
		{HostNQN: testHostNQN, SubsysNQN: testSubsysNQN, Secret: hs, Hashes: []HashID{HashNone}},
		{HostNQN: testHostNQN, SubsysNQN: testSubsysNQN, Secret: hs, DHGroups: []DHGroupID{9}},
	} {
		if _, err := NewHost(cfg); err == nil {
			t.Errorf("host config %d accepted", i)
		}
	}
	for i, cfg := range []ControllerConfig{
		{HostNQN: testHostNQN, Secret: hs},
		{HostNQN: testHostNQN, SubsysNQN: testSubsysNQN},
		{HostNQN: testHostNQN, SubsysNQN: testSubsysNQN, Secret: hs, DHGroups: []DHGroupID{}},
		{HostNQN: testHostNQN, SubsysNQN: testSubsysNQN, Secret: hs, Hashes: []HashID{7}},
	} {
		if _, err := NewController(cfg); err == nil {
			t.Errorf("controller config %d accepted", i)
		}
	}
}

func TestSeqCounter(t *testing.T) {
	var c SeqCounter
	a := c.Next()
	if b := c.Next(); a == 0 || b != a+1 && !(a == 0xffffffff && b == 1) {
		t.Errorf("Next = %d, %d", a, b)
	}
	c.n = 0xffffffff
	if got := c.Next(); got != 1 {
		t.Errorf("wrap: %d, want 1 (0 is skipped)", got)
	}
}
