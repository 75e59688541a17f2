package iser

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTargetAddress(t *testing.T) {
	t.Parallel()
	if got := FormatTargetAddress(netip.MustParseAddrPort("10.0.0.1:3260"), 1); got != "10.0.0.1:3260,1" {
		t.Errorf("IPv4: %s", got)
	}
	if got := FormatTargetAddress(netip.MustParseAddrPort("[fe80::1]:3261"), 2); got != "[fe80::1]:3261,2" {
		t.Errorf("IPv6: %s", got)
	}
	for _, tc := range []struct {
		in     string
		host   string
		port   uint16
		tag    uint16
		hasTag bool
	}{
		{"10.0.0.1:3260,1", "10.0.0.1", 3260, 1, true},
		{"[fe80::1]:3261,2", "fe80::1", 3261, 2, true},
		{"[fe80::1]", "fe80::1", 3260, 0, false},
		{"storage.example.com", "storage.example.com", 3260, 0, false},
		{"storage.example.com:860,5", "storage.example.com", 860, 5, true},
	} {
		h, p, tag, has, err := ParseTargetAddress(tc.in)
		if err != nil || h != tc.host || p != tc.port || tag != tc.tag || has != tc.hasTag {
			t.Errorf("ParseTargetAddress(%q) = %q %d %d %v %v", tc.in, h, p, tag, has, err)
		}
	}
	for _, bad := range []string{"", ",1", "[fe80::1", "[::1]x", "host:port", "h:1,70000", ":3260"} {
		if _, _, _, _, err := ParseTargetAddress(bad); !errors.Is(err, errTargetAddressFmt) {
			t.Errorf("ParseTargetAddress(%q) = %v", bad, err)
		}
	}
}

func testRecords() []TargetRecord {
	return []TargetRecord{
		{Name: testIQN, Addresses: []string{"10.0.0.1:3260,1", "[fe80::1]:3260,1"}},
		{Name: "iqn.2026-11.io.rdisk:second", Addresses: []string{"10.0.0.1:3260,1"}},
	}
}

func testResponder(max int) *TextResponder {
	return &TextResponder{
		Targets: func(q string) []TargetRecord {
			var out []TargetRecord
			for _, r := range testRecords() {
				if q == "All" || q == r.Name {
					out = append(out, r)
				}
			}
			return out
		},
		SessionType:              SessionDiscovery,
		MaxSendDataSegmentLength: max,
	}
}

func TestSendTargetsText(t *testing.T) {
	t.Parallel()
	text := AppendSendTargets(nil, testRecords())
	want := "TargetName=iqn.2026-11.io.rdisk:default|TargetAddress=10.0.0.1:3260,1|TargetAddress=[fe80::1]:3260,1|" +
		"TargetName=iqn.2026-11.io.rdisk:second|TargetAddress=10.0.0.1:3260,1|"
	if textOf(text) != want {
		t.Errorf("AppendSendTargets:\n got %s\nwant %s", textOf(text), want)
	}
	got, err := ParseSendTargets(text)
	if err != nil || !cmp.Equal(got, testRecords()) {
		t.Errorf("ParseSendTargets = %+v, %v", got, err)
	}
	for _, bad := range [][]byte{
		kvText("TargetAddress=10.0.0.1:3260,1"),
		kvText("TargetName=x", "SendTargets=Reject"),
		kvText("TargetName=x", "TargetAddress=[::1"),
	} {
		if _, err := ParseSendTargets(bad); err == nil {
			t.Errorf("ParseSendTargets(%s) accepted", textOf(bad))
		}
	}
}

// textExchange runs a request through a responder, following continuation
// until the final response, and returns the joined response text.
func textExchange(t *testing.T, r *TextResponder, req []byte) (string, int, error) {
	t.Helper()
	h := make([]byte, BHSSize)
	TextRequest(h).Encode(&TextRequestFields{Final: true, ITT: 7, TTT: ReservedTag})
	rsp := make([]byte, 4096)
	var all []byte
	for pdus := 1; pdus < 100; pdus++ {
		f, n, err := r.Respond(h, req, rsp)
		if err != nil {
			return "", pdus, err
		}
		if f.ITT != 7 || n > r.MaxSendDataSegmentLength {
			t.Fatalf("response %+v with %d bytes", f, n)
		}
		all = append(all, rsp[:n]...)
		if f.Final {
			if f.Continue || f.TTT != ReservedTag {
				t.Fatalf("final response %+v", f)
			}
			return textOf(all), pdus, nil
		}
		if !f.Continue || f.TTT == ReservedTag {
			t.Fatalf("non-final response %+v", f)
		}
		TextRequest(h).Encode(&TextRequestFields{Final: true, ITT: 7, TTT: f.TTT})
		req = nil
	}
	t.Fatal("no final response")
	return "", 0, nil
}

func TestTextResponder(t *testing.T) {
	t.Parallel()
	all := textOf(AppendSendTargets(nil, testRecords()))
	for _, tc := range []struct {
		name  string
		max   int
		typ   SessionType
		req   []byte
		want  string
		pdus  int
		error bool
	}{
		{name: "SendTargets=All", max: 8192, req: kvText("SendTargets=All"), want: all, pdus: 1},
		{name: "split over small segments", max: 16, req: kvText("SendTargets=All"), want: all, pdus: (len(all) + 15) / 16},
		{name: "one target", max: 8192, req: kvText("SendTargets=iqn.2026-11.io.rdisk:second"),
			want: "TargetName=iqn.2026-11.io.rdisk:second|TargetAddress=10.0.0.1:3260,1|", pdus: 1},
		{name: "unknown target", max: 8192, req: kvText("SendTargets=iqn.2026-11.io.rdisk:none"), want: "", pdus: 1},
		{name: "empty in a normal session", max: 8192, typ: SessionNormal, req: kvText("SendTargets="),
			want: "TargetName=iqn.2026-11.io.rdisk:default|TargetAddress=10.0.0.1:3260,1|TargetAddress=[fe80::1]:3260,1|", pdus: 1},
		{name: "All in a normal session (libiscsi iSCSISendTargets.Simple)", max: 8192, typ: SessionNormal,
			req: kvText("SendTargets=All"), want: all, pdus: 1},
		// libiscsi iSCSISendTargets.Invalid expects each of these to fail.
		{name: "bad key", max: 8192, req: kvText("SendTargetsPlease=All"), want: "SendTargetsPlease=NotUnderstood|", pdus: 1},
		{name: "bad value Alle", max: 8192, req: kvText("SendTargets=Alle"), want: "SendTargets=Reject|", pdus: 1},
		{name: "bad value A", max: 8192, req: kvText("SendTargets=A"), want: "SendTargets=Reject|", pdus: 1},
		{name: "bad case", max: 8192, req: kvText("sENDtARGETS=aLL"), want: "sENDtARGETS=NotUnderstood|", pdus: 1},
		{name: "login key in full feature phase", max: 8192, req: kvText("MaxBurstLength=512"), want: "MaxBurstLength=Reject|", pdus: 1},
		{name: "duplicate", max: 8192, req: kvText("SendTargets=All", "SendTargets=All"), error: true},
		{name: "malformed", max: 8192, req: []byte("SendTargets=All"), error: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := testResponder(tc.max)
			r.SessionType = tc.typ
			if tc.typ == SessionNormal {
				r.SessionTarget = testIQN
			}
			got, pdus, err := textExchange(t, r, tc.req)
			if tc.error {
				if err == nil {
					t.Fatal("accepted")
				}
				return
			}
			if err != nil || got != tc.want || pdus != tc.pdus {
				t.Errorf("got %q in %d PDUs, %v; want %q in %d", got, pdus, err, tc.want, tc.pdus)
			}
		})
	}
}

func TestTextResponderContinuedRequest(t *testing.T) {
	t.Parallel()
	r := testResponder(8192)
	req := kvText("SendTargets=All")
	h := make([]byte, BHSSize)
	rsp := make([]byte, 8192)
	TextRequest(h).Encode(&TextRequestFields{Continue: true, ITT: 9, TTT: ReservedTag})
	f, n, err := r.Respond(h, req[:5], rsp)
	if err != nil || n != 0 || f.Final || f.TTT == ReservedTag {
		t.Fatalf("first part: %+v %d %v", f, n, err)
	}
	TextRequest(h).Encode(&TextRequestFields{Final: true, ITT: 9, TTT: f.TTT})
	f, n, err = r.Respond(h, req[5:], rsp)
	if err != nil || !f.Final || textOf(rsp[:n]) != textOf(AppendSendTargets(nil, testRecords())) {
		t.Fatalf("second part: %+v %q %v", f, textOf(rsp[:n]), err)
	}
	// A TTT that continues nothing.
	TextRequest(h).Encode(&TextRequestFields{Final: true, ITT: 9, TTT: 0x1234})
	if _, _, err := r.Respond(h, nil, rsp); !errors.Is(err, errTextResponse) {
		t.Errorf("stray TTT: %v", err)
	}
	// A new request (TTT all ones) abandons a pending response.
	r.MaxSendDataSegmentLength = 10
	TextRequest(h).Encode(&TextRequestFields{Final: true, ITT: 10, TTT: ReservedTag})
	if f, _, _ = r.Respond(h, req, rsp); !f.Continue {
		t.Fatal("expected a continued response")
	}
	TextRequest(h).Encode(&TextRequestFields{Final: true, ITT: 11, TTT: ReservedTag})
	r.MaxSendDataSegmentLength = 8192
	if f, n, err = r.Respond(h, kvText("SendTargets="+testIQN), rsp); err != nil || !f.Final ||
		!strings.HasPrefix(textOf(rsp[:n]), "TargetName="+testIQN) {
		t.Errorf("new exchange: %+v %q %v", f, textOf(rsp[:n]), err)
	}
}

// TestDiscoverySession runs a discovery login and a SendTargets exchange
// between the engines, as `rdisk discover` and the target will.
func TestDiscoverySession(t *testing.T) {
	t.Parallel()
	icfg := testInitiatorConfig(TransportTCP)
	icfg.SessionType, icfg.TargetName = SessionDiscovery, ""
	icfg.Settings.MaxRecvDataSegmentLength = 512
	r := runLogin(t, testTarget(TransportTCP, TargetInfo{}), icfg)
	if r.targetErr != nil || r.initiatorErr != nil {
		t.Fatal(r.targetErr, r.initiatorErr)
	}
	resp := testResponder(int(r.target.Params.MaxSendDataSegmentLength))
	if resp.MaxSendDataSegmentLength != 512 {
		t.Fatalf("initiator's MaxRecvDataSegmentLength not seen by the target: %d", resp.MaxSendDataSegmentLength)
	}
	h := make([]byte, BHSSize)
	TextRequest(h).Encode(&TextRequestFields{Final: true, Immediate: true, ITT: 1, TTT: ReservedTag,
		CmdSN: r.initiator.CmdSN, ExpStatSN: r.initiator.StatSN})
	rsp := make([]byte, 512)
	f, n, err := resp.Respond(h, AppendKeyValue(nil, "SendTargets", "All"), rsp)
	if err != nil || !f.Final {
		t.Fatalf("%+v %v", f, err)
	}
	got, err := ParseSendTargets(rsp[:n])
	if err != nil || !cmp.Equal(got, testRecords()) {
		t.Errorf("discovered %+v, %v", got, err)
	}
}
