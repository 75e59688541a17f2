package iser

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	testIQN       = "iqn.2026-11.io.rdisk:default"
	testInitiator = "iqn.1994-05.com.redhat:client"
)

// countingRand is a deterministic "random" source for CHAP challenges.
type countingRand struct{ n byte }

func (c *countingRand) Read(p []byte) (int, error) {
	for i := range p {
		c.n++
		p[i] = c.n
	}
	return len(p), nil
}

// testTarget returns a target config serving testIQN with the given
// authentication, refusing "iqn.blocked" and unknown targets.
func testTarget(transport Transport, info TargetInfo) *TargetConfig {
	if info.Name == "" {
		info.Name = testIQN
	}
	disc := TargetInfo{CHAP: info.CHAP, MutualCHAP: info.MutualCHAP}
	return &TargetConfig{
		Transport: transport,
		Settings:  DefaultSettings(),
		Resolve: func(id LoginIdentity) (TargetInfo, error) {
			if id.InitiatorName == "iqn.blocked" {
				return TargetInfo{}, LoginForbidden
			}
			if id.SessionType == SessionDiscovery {
				return disc, nil
			}
			if id.TargetName != info.Name {
				return TargetInfo{}, fmt.Errorf("no target %q: %w", id.TargetName, LoginNotFound)
			}
			return info, nil
		},
		QueueDepth: 32,
		Rand:       &countingRand{},
	}
}

func testInitiatorConfig(transport Transport) *InitiatorConfig {
	return &InitiatorConfig{
		Transport:     transport,
		Settings:      DefaultSettings(),
		InitiatorName: testInitiator,
		TargetName:    testIQN,
		ISID:          ISID{0x00, 0x02, 0x3d, 0x00, 0x00, 0x07},
		CID:           0,
		CmdSN:         100,
		ITT:           0x1000,
		Rand:          &countingRand{n: 100},
	}
}

type loginResult struct {
	target, initiator       Session
	targetErr, initiatorErr error
	transcript              []string
}

// runLogin runs both engines against each other, every PDU going through
// AppendPDU and ParsePDU.
func runLogin(t *testing.T, tcfg *TargetConfig, icfg *InitiatorConfig) loginResult {
	t.Helper()
	tl, err := NewTargetLogin(tcfg, 0x0101)
	if err != nil {
		t.Fatal(err)
	}
	il, err := NewInitiatorLogin(icfg)
	if err != nil {
		t.Fatal(err)
	}
	var res loginResult
	reqH, reqD := make([]byte, BHSSize), make([]byte, DefaultRecvDataSegmentLength)
	rspH, rspD := make([]byte, BHSSize), make([]byte, DefaultRecvDataSegmentLength)
	n, err := il.Start(reqH, reqD)
	if err != nil {
		t.Fatal(err)
	}
	pass := func(h, d []byte) PDU {
		p, err := ParsePDU(AppendPDU(nil, h, nil, d), DefaultRecvDataSegmentLength)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for i := 0; i < 20; i++ {
		p := pass(reqH, reqD[:n])
		q := LoginRequest(p.BHS)
		res.transcript = append(res.transcript, fmt.Sprintf("I T=%v CSG=%d NSG=%d %s", q.Transit(), q.CSG(), q.NSG(), textOf(p.Data)))
		m, tst, terr := tl.Step(p.BHS, p.Data, rspH, rspD)
		res.targetErr = terr
		p = pass(rspH, rspD[:m])
		r := LoginResponse(p.BHS)
		res.transcript = append(res.transcript, fmt.Sprintf("T T=%v CSG=%d NSG=%d %s %s", r.Transit(), r.CSG(), r.NSG(),
			r.Status().String(), textOf(p.Data)))
		var ist LoginState
		n, ist, res.initiatorErr = il.Step(p.BHS, p.Data, reqH, reqD)
		if tst == LoginFailed && ist != LoginFailed {
			t.Fatalf("target failed (%v) but the initiator goes on", terr)
		}
		if ist != LoginInProgress {
			if ist == LoginDone && tst != LoginDone {
				t.Fatalf("initiator done, target %v", tst)
			}
			res.target, _ = tl.Session()
			res.initiator, _ = il.Session()
			return res
		}
	}
	t.Fatalf("login did not finish:\n%s", strings.Join(res.transcript, "\n"))
	return res
}

func TestLoginTable(t *testing.T) {
	t.Parallel()
	user := &CHAPSecret{User: "alice", Secret: "alice-secret-16b"}
	tgt := &CHAPSecret{User: "target", Secret: "target-secret-16"}
	for _, tc := range []struct {
		name      string
		transport Transport
		info      TargetInfo
		init      func(c *InitiatorConfig)
		tune      func(c *TargetConfig)
		status    LoginStatus // expected failure status, 0 for success
		targetErr error       // sentinel in the target's error
		initErr   error       // sentinel in the initiator's error, without a status
		check     func(t *testing.T, r loginResult)
	}{
		{
			name: "no auth, normal session over TCP",
			check: func(t *testing.T, r loginResult) {
				p := r.target.Params
				if p.AuthMethod != ValueNone || p.InitiatorName != testInitiator || p.TargetName != testIQN ||
					p.SessionType != SessionNormal || p.HeaderDigest || p.DataDigest || p.ImmediateData != true ||
					p.InitialR2T || p.MaxRecvDataSegmentLength != 262144 || p.MaxSendDataSegmentLength != 262144 ||
					p.MaxBurstLength != 262144 || p.FirstBurstLength != 65536 || p.ErrorRecoveryLevel != 0 ||
					p.MaxConnections != 1 || p.DefaultTime2Wait != 2 || p.DefaultTime2Retain != 20 {
					t.Errorf("target params %+v", p)
				}
				ip := r.initiator.Params
				ip.InitiatorAlias, p.InitiatorAlias = "", ""
				if d := cmp.Diff(p, ip); d != "" {
					t.Errorf("target and initiator disagree (-target +initiator):\n%s", d)
				}
				if r.target.TSIH != 0x0101 || r.initiator.TSIH != 0x0101 || r.target.CmdSN != 100 ||
					r.target.CmdWindow != (CmdWindow{100, 131}) || r.initiator.CmdWindow != r.target.CmdWindow ||
					r.initiator.StatSN != r.target.StatSN {
					t.Errorf("session numbers: target %+v initiator %+v", r.target, r.initiator)
				}
			},
		},
		{
			name: "header and data digests",
			init: func(c *InitiatorConfig) {
				c.Settings.HeaderDigest = []Digest{DigestCRC32C, DigestNone}
				c.Settings.DataDigest = []Digest{DigestCRC32C}
			},
			check: func(t *testing.T, r loginResult) {
				if !r.target.Params.HeaderDigest || !r.target.Params.DataDigest ||
					!r.initiator.Params.HeaderDigest || !r.initiator.Params.DataDigest {
					t.Errorf("digests not negotiated: %+v", r.target.Params)
				}
			},
		},
		{
			name: "digest the target lacks",
			tune: func(c *TargetConfig) { c.Settings.DataDigest = nil },
			init: func(c *InitiatorConfig) { c.Settings.DataDigest = []Digest{DigestCRC32C, DigestNone} },
			check: func(t *testing.T, r loginResult) {
				if r.target.Params.DataDigest || r.initiator.Params.DataDigest {
					t.Error("DataDigest negotiated to CRC32C although the target supports None only")
				}
			},
		},
		{
			name: "minimum, maximum, AND and OR results",
			init: func(c *InitiatorConfig) {
				c.Settings.MaxBurstLength = 1 << 20
				c.Settings.FirstBurstLength = 1 << 19
				c.Settings.DefaultTime2Wait = 5
				c.Settings.DefaultTime2Retain = 60
				c.Settings.InitialR2T = true
				c.Settings.ImmediateData = false
				c.Settings.MaxRecvDataSegmentLength = 65536
				c.Settings.MaxOutstandingR2T = 8
			},
			tune: func(c *TargetConfig) {
				c.Settings.DefaultTime2Retain = 20
				c.Settings.MaxOutstandingR2T = 4
			},
			check: func(t *testing.T, r loginResult) {
				p := r.target.Params
				if p.MaxBurstLength != 262144 || p.FirstBurstLength != 65536 || p.DefaultTime2Wait != 5 ||
					p.DefaultTime2Retain != 20 || !p.InitialR2T || p.ImmediateData || p.MaxOutstandingR2T != 4 ||
					p.MaxSendDataSegmentLength != 65536 || r.initiator.Params.MaxRecvDataSegmentLength != 65536 ||
					r.initiator.Params.MaxSendDataSegmentLength != 262144 {
					t.Errorf("params %+v", p)
				}
			},
		},
		{
			name: "target proposes keys whose default it cannot take",
			tune: func(c *TargetConfig) {
				c.Settings.ImmediateData = false
				c.Settings.MaxBurstLength = 65536
				c.Settings.FirstBurstLength = 8192
			},
			// InitiatorLogin offers every key; runLoginMinimal uses
			// a hand-made first request that offers none.
			check: func(t *testing.T, r loginResult) {
				p := r.initiator.Params
				if p.ImmediateData || p.MaxBurstLength != 65536 || p.FirstBurstLength != 8192 {
					t.Errorf("params %+v", p)
				}
			},
		},
		{
			name:  "CHAP one-way",
			info:  TargetInfo{CHAP: user},
			init:  func(c *InitiatorConfig) { c.CHAP = user },
			check: func(t *testing.T, r loginResult) { checkAuth(t, r, authMethodCHAP) },
		},
		{
			name: "CHAP mutual",
			info: TargetInfo{CHAP: user, MutualCHAP: tgt, RequireMutual: true},
			init: func(c *InitiatorConfig) { c.CHAP, c.MutualCHAP = user, tgt },
			check: func(t *testing.T, r loginResult) {
				checkAuth(t, r, authMethodCHAP)
				if !strings.Contains(strings.Join(r.transcript, "\n"), "CHAP_N=target|CHAP_R=0x") {
					t.Errorf("no mutual answer in\n%s", strings.Join(r.transcript, "\n"))
				}
			},
		},
		{
			name: "CHAP offered, target needs none",
			init: func(c *InitiatorConfig) { c.CHAP = user },
			check: func(t *testing.T, r loginResult) {
				checkAuth(t, r, ValueNone)
			},
		},
		{
			name:      "CHAP wrong secret",
			info:      TargetInfo{CHAP: user},
			init:      func(c *InitiatorConfig) { c.CHAP = &CHAPSecret{User: "alice", Secret: "wrong-secret-16b"} },
			status:    LoginAuthFailed,
			targetErr: errCHAP,
		},
		{
			name:      "CHAP wrong user",
			info:      TargetInfo{CHAP: user},
			init:      func(c *InitiatorConfig) { c.CHAP = &CHAPSecret{User: "mallory", Secret: user.Secret} },
			status:    LoginAuthFailed,
			targetErr: errCHAP,
		},
		{
			name:      "target requires CHAP, initiator has none",
			info:      TargetInfo{CHAP: user},
			status:    LoginAuthFailed,
			targetErr: errCHAP,
		},
		{
			name:      "initiator wants mutual, target has no credentials",
			info:      TargetInfo{CHAP: user},
			init:      func(c *InitiatorConfig) { c.CHAP, c.MutualCHAP = user, tgt },
			status:    LoginAuthFailed,
			targetErr: errCHAP,
		},
		{
			name:      "target requires mutual, initiator does one-way",
			info:      TargetInfo{CHAP: user, MutualCHAP: tgt, RequireMutual: true},
			init:      func(c *InitiatorConfig) { c.CHAP = user },
			status:    LoginAuthFailed,
			targetErr: errCHAPMissing,
		},
		{
			name:   "mutual CHAP, target answers with the wrong secret",
			info:   TargetInfo{CHAP: user, MutualCHAP: &CHAPSecret{User: "target", Secret: "not-the-secret!!"}},
			init:   func(c *InitiatorConfig) { c.CHAP, c.MutualCHAP = user, tgt },
			status: LoginAuthFailed, // the initiator's own verdict
		},
		{
			name:      "unknown target",
			init:      func(c *InitiatorConfig) { c.TargetName = "iqn.2026-11.io.rdisk:nope" },
			status:    LoginNotFound,
			targetErr: LoginNotFound,
		},
		{
			name:      "forbidden initiator",
			init:      func(c *InitiatorConfig) { c.InitiatorName = "iqn.blocked" },
			status:    LoginForbidden,
			targetErr: LoginForbidden,
		},
		{
			name: "discovery session",
			init: func(c *InitiatorConfig) { c.SessionType, c.TargetName = SessionDiscovery, "" },
			check: func(t *testing.T, r loginResult) {
				if r.target.Params.SessionType != SessionDiscovery || r.initiator.Params.SessionType != SessionDiscovery ||
					r.target.Params.TargetName != "" {
					t.Errorf("params %+v", r.target.Params)
				}
				if strings.Contains(strings.Join(r.transcript, "\n"), "TargetPortalGroupTag") {
					t.Error("TargetPortalGroupTag declared in a discovery session")
				}
			},
		},
		{
			name: "discovery session with CHAP",
			info: TargetInfo{CHAP: user},
			init: func(c *InitiatorConfig) { c.SessionType, c.TargetName, c.CHAP = SessionDiscovery, "", user },
			check: func(t *testing.T, r loginResult) {
				checkAuth(t, r, authMethodCHAP)
			},
		},
		{
			name:      "iSER normal session",
			transport: TransportISER,
			init: func(c *InitiatorConfig) {
				c.Settings.InitiatorRecvDataSegmentLength = 128 * 1024
				c.Settings.TargetRecvDataSegmentLength = 128 * 1024
				c.Settings.MaxOutstandingUnexpectedPDUs = 8
			},
			tune: func(c *TargetConfig) {
				c.Settings.TargetRecvDataSegmentLength = 65536
				c.Settings.InitiatorRecvDataSegmentLength = 256 * 1024
				c.Settings.MaxOutstandingUnexpectedPDUs = 16
			},
			check: func(t *testing.T, r loginResult) {
				p, ip := r.target.Params, r.initiator.Params
				if !p.RDMAExtensions || !ip.RDMAExtensions || p.HeaderDigest || p.TargetRecvDataSegmentLength != 65536 ||
					p.InitiatorRecvDataSegmentLength != 128*1024 || p.MaxRecvDataSegmentLength != 65536 ||
					p.MaxSendDataSegmentLength != 128*1024 || ip.MaxRecvDataSegmentLength != 128*1024 ||
					ip.MaxSendDataSegmentLength != 65536 || p.MaxOutstandingUnexpectedPDUs != 8 ||
					ip.MaxOutstandingUnexpectedPDUs != 16 {
					t.Errorf("target %+v\ninitiator %+v", p, ip)
				}
				tr := strings.Join(r.transcript, "\n")
				if strings.Contains(tr, "MaxRecvDataSegmentLength") || strings.Contains(tr, "Digest") {
					t.Errorf("TCP-only keys on iSER:\n%s", tr)
				}
			},
		},
		{
			name:      "iSER target, initiator without RDMAExtensions",
			transport: TransportISER,
			init:      func(c *InitiatorConfig) { c.Transport = TransportTCP },
			status:    LoginInitiatorError,
			targetErr: errRDMAExtensions,
		},
		{
			// The target answers RDMAExtensions=No; the initiator gives up.
			name:    "TCP target, iSER initiator",
			init:    func(c *InitiatorConfig) { c.Transport = TransportISER },
			initErr: errRDMAExtensions,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tcfg := testTarget(tc.transport, tc.info)
			if tc.tune != nil {
				tc.tune(tcfg)
			}
			icfg := testInitiatorConfig(tc.transport)
			if tc.init != nil {
				tc.init(icfg)
			}
			var r loginResult
			if tc.name == "target proposes keys whose default it cannot take" {
				r = runLoginMinimal(t, tcfg)
			} else {
				r = runLogin(t, tcfg, icfg)
			}
			tr := strings.Join(r.transcript, "\n")
			if tc.status != 0 {
				var st LoginStatus
				if !errors.As(r.initiatorErr, &st) || st != tc.status {
					t.Fatalf("initiator error %v, want status %v\n%s", r.initiatorErr, tc.status, tr)
				}
				if tc.targetErr != nil && !errors.Is(r.targetErr, tc.targetErr) {
					t.Fatalf("target error %v, want %v\n%s", r.targetErr, tc.targetErr, tr)
				}
				if tc.targetErr != nil {
					if st := statusOf(r.targetErr); st != tc.status {
						t.Fatalf("target status %v, want %v", st, tc.status)
					}
				}
				return
			}
			if tc.initErr != nil {
				if !errors.Is(r.initiatorErr, tc.initErr) {
					t.Fatalf("initiator error %v, want %v\n%s", r.initiatorErr, tc.initErr, tr)
				}
				return
			}
			if r.targetErr != nil || r.initiatorErr != nil {
				t.Fatalf("login failed: target %v, initiator %v\n%s", r.targetErr, r.initiatorErr, tr)
			}
			if tc.check != nil {
				tc.check(t, r)
			}
			if t.Failed() {
				t.Logf("transcript:\n%s", tr)
			}
		})
	}
}

func checkAuth(t *testing.T, r loginResult, method string) {
	t.Helper()
	if r.target.Params.AuthMethod != method || r.initiator.Params.AuthMethod != method {
		t.Errorf("AuthMethod: target %q, initiator %q, want %q", r.target.Params.AuthMethod,
			r.initiator.Params.AuthMethod, method)
	}
}

// runLoginMinimal drives a target with a hand-made initiator that offers no
// operational keys (as a minimal initiator may), and answers whatever the
// target proposes with the InitiatorLogin's negotiator.
func runLoginMinimal(t *testing.T, tcfg *TargetConfig) loginResult {
	t.Helper()
	icfg := testInitiatorConfig(TransportTCP)
	il, err := NewInitiatorLogin(icfg)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := NewTargetLogin(tcfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	var r loginResult
	req := make([]byte, BHSSize)
	LoginRequest(req).Encode(&LoginRequestFields{Transit: true, CSG: StageOperational, NSG: StageFullFeature,
		ISID: icfg.ISID, ITT: icfg.ITT, CmdSN: icfg.CmdSN})
	text := kvText("InitiatorName="+testInitiator, "TargetName="+testIQN)
	il.npdus, il.stage, il.auth, il.method, il.opOffered = 1, StageOperational, authOK, ValueNone, true
	rsp, rspD := make([]byte, BHSSize), make([]byte, 8192)
	reqD := make([]byte, 8192)
	for i := 0; i < 4; i++ {
		r.transcript = append(r.transcript, "I "+textOf(text))
		n, tst, err := tl.Step(req, text, rsp, rspD)
		if err != nil {
			t.Fatalf("target: %v\n%s", err, strings.Join(r.transcript, "\n"))
		}
		r.transcript = append(r.transcript, fmt.Sprintf("T T=%v %s", LoginResponse(rsp).Transit(), textOf(rspD[:n])))
		m, ist, err := il.Step(rsp, rspD[:n], req, reqD)
		if err != nil {
			t.Fatalf("initiator: %v\n%s", err, strings.Join(r.transcript, "\n"))
		}
		if ist == LoginDone {
			if tst != LoginDone {
				t.Fatal("initiator done before the target")
			}
			r.target, _ = tl.Session()
			r.initiator, _ = il.Session()
			if i != 1 {
				t.Errorf("login took %d round trips, want 2 (proposal, answer)", i+1)
			}
			return r
		}
		text = append([]byte(nil), reqD[:m]...)
	}
	t.Fatalf("no end:\n%s", strings.Join(r.transcript, "\n"))
	return r
}

// targetScript drives a TargetLogin with hand-made requests and returns
// the responses as "T=.. CSG=.. NSG=.. status text" lines.
type scriptStep struct {
	transit  bool
	cont     bool
	csg, nsg Stage
	text     []byte
}

func targetScript(t *testing.T, cfg *TargetConfig, steps []scriptStep) ([]string, LoginState, error) {
	t.Helper()
	tl, err := NewTargetLogin(cfg, 9)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	req, rsp, rspD := make([]byte, BHSSize), make([]byte, BHSSize), make([]byte, 8192)
	var st LoginState
	for i, s := range steps {
		LoginRequest(req).Encode(&LoginRequestFields{Transit: s.transit, Continue: s.cont, CSG: s.csg, NSG: s.nsg,
			ISID: ISID{0x80, 0, 0, 0, 0, 1}, ITT: 0x42, CmdSN: 1, ExpStatSN: uint32(i)})
		n, state, err := tl.Step(req, s.text, rsp, rspD)
		r := LoginResponse(rsp)
		out = append(out, fmt.Sprintf("T=%v CSG=%d NSG=%d %s %s", r.Transit(), r.CSG(), r.NSG(), r.Status().String(),
			textOf(rspD[:n])))
		st = state
		if state != LoginInProgress {
			return out, st, err
		}
	}
	return out, st, nil
}

// chapResponseHex computes the hex CHAP_R a client sends for the target's
// CHAP_I and CHAP_C found in a response line.
func chapFromLine(t *testing.T, line string) (uint8, []byte) {
	t.Helper()
	var id uint8
	var c []byte
	for _, f := range strings.Split(line, "|") {
		if v, ok := strings.CutPrefix(f, "CHAP_I="); ok {
			id, _ = parseCHAPI(v)
		}
		if v, ok := strings.CutPrefix(f, "CHAP_C="); ok {
			c, _ = decodeBinary(v)
		}
	}
	if c == nil {
		t.Fatalf("no challenge in %q", line)
	}
	return id, c
}

// TestLoginOpenISCSI replays the requests open-iscsi's iscsid sends (usr/
// login.c: AuthMethod=None in the security stage, then its operational
// offers) and checks the target answers only keys open-iscsi recognizes.
func TestLoginOpenISCSI(t *testing.T) {
	t.Parallel()
	cfg := testTarget(TransportTCP, TargetInfo{Alias: "rdisk", PortalGroupTag: 1})
	out, st, err := targetScript(t, cfg, []scriptStep{
		{transit: true, csg: StageSecurity, nsg: StageOperational, text: kvText("InitiatorName="+testInitiator,
			"InitiatorAlias=host", "TargetName="+testIQN, "SessionType=Normal", "AuthMethod=None")},
		{transit: true, csg: StageOperational, nsg: StageFullFeature, text: kvText("HeaderDigest=None",
			"DataDigest=None", "DefaultTime2Wait=2", "DefaultTime2Retain=0", "IFMarker=No", "OFMarker=No",
			"ErrorRecoveryLevel=0", "InitialR2T=No", "ImmediateData=Yes", "MaxBurstLength=16776192",
			"FirstBurstLength=262144", "MaxOutstandingR2T=1", "MaxConnections=1", "DataPDUInOrder=Yes",
			"DataSequenceInOrder=Yes", "MaxRecvDataSegmentLength=262144")},
	})
	if err != nil || st != LoginDone {
		t.Fatalf("login: %v %v\n%s", st, err, strings.Join(out, "\n"))
	}
	want := []string{
		"T=true CSG=0 NSG=1 success TargetPortalGroupTag=1|TargetAlias=rdisk|AuthMethod=None|",
		"T=true CSG=1 NSG=3 success MaxBurstLength=262144|HeaderDigest=None|DataDigest=None|DefaultTime2Wait=2|" +
			"DefaultTime2Retain=0|IFMarker=Reject|OFMarker=Reject|ErrorRecoveryLevel=0|InitialR2T=No|" +
			"ImmediateData=Yes|FirstBurstLength=65536|MaxOutstandingR2T=1|MaxConnections=1|DataPDUInOrder=Yes|" +
			"DataSequenceInOrder=Yes|MaxRecvDataSegmentLength=262144|",
	}
	if d := cmp.Diff(want, out); d != "" {
		t.Errorf("responses (-want +got):\n%s", d)
	}
}

// TestLoginOpenISCSIISER replays open-iscsi's operational offers for an
// iSER normal session (add_params_transport_specific: no digests, no
// MaxRecvDataSegmentLength, the RFC 7145 keys).
func TestLoginOpenISCSIISER(t *testing.T) {
	t.Parallel()
	cfg := testTarget(TransportISER, TargetInfo{PortalGroupTag: 1})
	out, st, err := targetScript(t, cfg, []scriptStep{
		{transit: true, csg: StageSecurity, nsg: StageOperational, text: kvText("InitiatorName="+testInitiator,
			"TargetName="+testIQN, "SessionType=Normal", "AuthMethod=None")},
		{transit: true, csg: StageOperational, nsg: StageFullFeature, text: kvText("DefaultTime2Wait=2",
			"DefaultTime2Retain=0", "IFMarker=No", "OFMarker=No", "ErrorRecoveryLevel=0", "InitialR2T=No",
			"ImmediateData=Yes", "MaxBurstLength=16776192", "FirstBurstLength=262144", "MaxOutstandingR2T=1",
			"MaxConnections=1", "DataPDUInOrder=Yes", "DataSequenceInOrder=Yes",
			"InitiatorRecvDataSegmentLength=262144", "TargetRecvDataSegmentLength=262144", "RDMAExtensions=Yes")},
	})
	if err != nil || st != LoginDone {
		t.Fatalf("login: %v %v\n%s", st, err, strings.Join(out, "\n"))
	}
	want := "T=true CSG=1 NSG=3 success RDMAExtensions=Yes|MaxBurstLength=262144|DefaultTime2Wait=2|" +
		"DefaultTime2Retain=0|IFMarker=Reject|OFMarker=Reject|ErrorRecoveryLevel=0|InitialR2T=No|ImmediateData=Yes|" +
		"FirstBurstLength=65536|MaxOutstandingR2T=1|MaxConnections=1|DataPDUInOrder=Yes|DataSequenceInOrder=Yes|" +
		"InitiatorRecvDataSegmentLength=8192|TargetRecvDataSegmentLength=8192|"
	if out[1] != want {
		t.Errorf("operational response\n got %s\nwant %s", out[1], want)
	}
}

// TestLoginLibiscsiCHAP replays libiscsi's CHAP login (lib/login.c: T=1 on
// the AuthMethod offer, T=0 with CHAP_A, T=1 with an upper-case hex CHAP_R
// and a 32-byte mutual challenge), then its operational stage with the RFC
// 3720 marker keys.
func TestLoginLibiscsiCHAP(t *testing.T) {
	t.Parallel()
	user := &CHAPSecret{User: "libiscsi", Secret: "libiscsi-secret"}
	tgt := &CHAPSecret{User: "tgt", Secret: "target-secret-xx"}
	cfg := testTarget(TransportTCP, TargetInfo{CHAP: user, MutualCHAP: tgt, PortalGroupTag: 1})
	tl, err := NewTargetLogin(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	req, rsp, rspD := make([]byte, BHSSize), make([]byte, BHSSize), make([]byte, 8192)
	step := func(transit bool, csg, nsg Stage, text []byte) (LoginResponse, string) {
		t.Helper()
		LoginRequest(req).Encode(&LoginRequestFields{Transit: transit, CSG: csg, NSG: nsg, ITT: 5, CmdSN: 77})
		n, _, err := tl.Step(req, text, rsp, rspD)
		if err != nil {
			t.Fatalf("target: %v", err)
		}
		return LoginResponse(rsp), textOf(rspD[:n])
	}
	r, text := step(true, StageSecurity, StageOperational, kvText("InitiatorName="+testInitiator,
		"TargetName="+testIQN, "SessionType=Normal", "AuthMethod=CHAP,None"))
	if r.Transit() || text != "TargetPortalGroupTag=1|AuthMethod=CHAP|" {
		t.Fatalf("AuthMethod answer T=%v %s", r.Transit(), text)
	}
	r, text = step(false, StageSecurity, StageOperational, kvText("CHAP_A=5"))
	if r.Transit() || !strings.HasPrefix(text, "CHAP_A=5|CHAP_I=") {
		t.Fatalf("challenge T=%v %s", r.Transit(), text)
	}
	id, c := chapFromLine(t, text)
	if len(c) != 16 {
		t.Errorf("challenge of %d bytes, want 16 (LIO's length)", len(c))
	}
	resp := strings.ToUpper(fmt.Sprintf("%x", chapResponse(id, user.Secret, c)))
	mine := make([]byte, 32)
	for i := range mine {
		mine[i] = byte(0xa0 + i)
	}
	r, text = step(true, StageSecurity, StageOperational, kvText("CHAP_N=libiscsi", "CHAP_R=0x"+resp,
		"CHAP_I=1", "CHAP_C=0x"+strings.ToUpper(fmt.Sprintf("%x", mine))))
	wantR := fmt.Sprintf("CHAP_N=tgt|CHAP_R=0x%x|", chapResponse(1, tgt.Secret, mine))
	if !r.Transit() || r.NSG() != StageOperational || text != wantR {
		t.Fatalf("CHAP result T=%v NSG=%v %s, want %s", r.Transit(), r.NSG(), text, wantR)
	}
	// libiscsi repeats its names in the operational stage.
	r, _ = step(true, StageOperational, StageFullFeature, kvText("InitiatorName="+testInitiator,
		"TargetName="+testIQN, "SessionType=Normal", "HeaderDigest=None,CRC32C", "DataDigest=None",
		"InitialR2T=Yes", "ImmediateData=Yes", "MaxBurstLength=262144", "FirstBurstLength=262144",
		"DefaultTime2Wait=2", "DefaultTime2Retain=0", "MaxOutstandingR2T=1", "ErrorRecoveryLevel=0",
		"IFMarker=No", "OFMarker=No", "MaxConnections=1", "MaxRecvDataSegmentLength=262144",
		"DataPDUInOrder=Yes", "DataSequenceInOrder=Yes"))
	if !r.Transit() || r.NSG() != StageFullFeature || r.TSIH() != 3 || tl.State() != LoginDone {
		t.Fatalf("final response %+v", r.Fields())
	}
	s, _ := tl.Session()
	if s.Params.AuthMethod != authMethodCHAP || s.Params.FirstBurstLength != 65536 || !s.Params.InitialR2T {
		t.Errorf("params %+v", s.Params)
	}
}

func TestLoginTargetErrors(t *testing.T) {
	t.Parallel()
	sec := func(text ...string) scriptStep {
		return scriptStep{transit: true, csg: StageSecurity, nsg: StageOperational, text: kvText(text...)}
	}
	op := func(text ...string) scriptStep {
		return scriptStep{transit: true, csg: StageOperational, nsg: StageFullFeature, text: kvText(text...)}
	}
	names := []string{"InitiatorName=" + testInitiator, "TargetName=" + testIQN}
	user := &CHAPSecret{User: "u", Secret: "0123456789abcdef"}
	for _, tc := range []struct {
		name   string
		info   TargetInfo
		steps  []scriptStep
		status LoginStatus
		err    error
	}{
		{"missing InitiatorName", TargetInfo{}, []scriptStep{sec("TargetName=" + testIQN)}, LoginMissingParameter, errMissingKey},
		{"missing TargetName", TargetInfo{}, []scriptStep{op("InitiatorName=" + testInitiator)}, LoginMissingParameter, errMissingKey},
		{"bad SessionType", TargetInfo{}, []scriptStep{op(append(names, "SessionType=Bogus")...)}, LoginSessionTypeNotSupp, errBadValue},
		{"duplicate key", TargetInfo{}, []scriptStep{op(append(names, "MaxBurstLength=512", "MaxBurstLength=1024")...)}, LoginInitiatorError, errDuplicateKey},
		{"name changed in a later PDU", TargetInfo{}, []scriptStep{
			{csg: StageOperational, text: kvText(names...)},
			op("TargetName=iqn.2026-11.io.rdisk:other")}, LoginInitiatorError, errDuplicateKey},
		{"key repeated in a later PDU", TargetInfo{}, []scriptStep{
			{csg: StageOperational, text: kvText(append(names, "ImmediateData=No")...)},
			op("ImmediateData=No")}, LoginInitiatorError, errDuplicateKey},
		{"malformed text", TargetInfo{}, []scriptStep{{transit: true, csg: StageOperational, nsg: StageFullFeature,
			text: []byte("InitiatorName=x")}}, LoginInitiatorError, errTextFormat},
		{"T and C both set", TargetInfo{}, []scriptStep{{transit: true, cont: true, csg: StageOperational, nsg: StageFullFeature}},
			LoginInitiatorError, errLoginFlags},
		{"NSG not after CSG", TargetInfo{}, []scriptStep{{transit: true, csg: StageOperational, nsg: StageSecurity,
			text: kvText(names...)}}, LoginInitiatorError, errLoginFlags},
		{"NSG 2", TargetInfo{}, []scriptStep{{transit: true, csg: StageSecurity, nsg: 2, text: kvText(names...)}},
			LoginInitiatorError, errLoginFlags},
		{"stage changed", TargetInfo{}, []scriptStep{{csg: StageSecurity, text: kvText(names...)},
			op("MaxBurstLength=512")}, LoginInitiatorError, errLoginFlags},
		{"AuthMethod offer without common method", TargetInfo{CHAP: user}, []scriptStep{sec(append(names, "AuthMethod=None")...)},
			LoginAuthFailed, errAuthMethod},
		{"CHAP_A without MD5", TargetInfo{CHAP: user}, []scriptStep{sec(append(names, "AuthMethod=CHAP")...),
			{csg: StageSecurity, text: kvText("CHAP_A=7,6")}}, LoginAuthFailed, errCHAP},
		{"CHAP_N missing", TargetInfo{CHAP: user}, []scriptStep{sec(append(names, "AuthMethod=CHAP")...),
			{csg: StageSecurity, text: kvText("CHAP_A=5")}, sec("CHAP_R=0x00")}, LoginAuthFailed, errCHAPMissing},
		{"CHAP keys before AuthMethod", TargetInfo{CHAP: user}, []scriptStep{sec(append(names, "CHAP_A=5")...)},
			LoginAuthFailed, errCHAP},
		{"operational stage without CHAP", TargetInfo{CHAP: user}, []scriptStep{op(names...)}, LoginAuthFailed, errCHAP},
		{"existing session (TSIH)", TargetInfo{}, nil, LoginSessionDoesNotExist, nil},
		{"SNACK during login", TargetInfo{}, nil, LoginInvalidDuringLogin, errOpcode},
		{"login with an AHS", TargetInfo{}, nil, LoginInitiatorError, errLoginAHS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testTarget(TransportTCP, tc.info)
			var st LoginState
			var err error
			var out []string
			switch tc.name {
			case "existing session (TSIH)", "SNACK during login", "login with an AHS":
				tl, _ := NewTargetLogin(cfg, 1)
				req := make([]byte, BHSSize)
				LoginRequest(req).Encode(&LoginRequestFields{Transit: true, CSG: StageOperational, NSG: StageFullFeature, TSIH: 5})
				switch tc.name {
				case "SNACK during login":
					SNACK(req).Encode(&SNACKFields{})
				case "login with an AHS":
					LoginRequest(req).Encode(&LoginRequestFields{Transit: true, CSG: StageOperational, NSG: StageFullFeature})
					BHS(req).SetLengths(8, 0) // garbage AHS: 8 bytes the login does not define
				}
				rsp := make([]byte, BHSSize)
				_, st, err = tl.Step(req, kvText(names...), rsp, make([]byte, 8192))
				if LoginResponse(rsp).Status() != tc.status {
					t.Errorf("response status %v", LoginResponse(rsp).Status())
				}
			default:
				out, st, err = targetScript(t, cfg, tc.steps)
			}
			if st != LoginFailed || statusOf(err) != tc.status || (tc.err != nil && !errors.Is(err, tc.err)) {
				t.Fatalf("state %v err %v (status %v), want %v / %v\n%s", st, err, statusOf(err), tc.status, tc.err,
					strings.Join(out, "\n"))
			}
			if len(out) > 0 && !strings.Contains(out[len(out)-1], tc.status.String()) {
				t.Errorf("last response %q does not carry %v", out[len(out)-1], tc.status)
			}
		})
	}
}

// TestLoginReusedChallenge checks that a mutual challenge equal to the
// target's own fails the login (RFC 7143 section 12.1.3).
func TestLoginReusedChallenge(t *testing.T) {
	t.Parallel()
	user := &CHAPSecret{User: "u", Secret: "0123456789abcdef"}
	cfg := testTarget(TransportTCP, TargetInfo{CHAP: user, MutualCHAP: &CHAPSecret{User: "t", Secret: "fedcba9876543210"}})
	names := []string{"InitiatorName=" + testInitiator, "TargetName=" + testIQN}
	tl, _ := NewTargetLogin(cfg, 1)
	req, rsp, rspD := make([]byte, BHSSize), make([]byte, BHSSize), make([]byte, 8192)
	LoginRequest(req).Encode(&LoginRequestFields{CSG: StageSecurity, ITT: 1})
	if _, _, err := tl.Step(req, kvText(append(names, "AuthMethod=CHAP")...), rsp, rspD); err != nil {
		t.Fatal(err)
	}
	n, _, err := tl.Step(req, kvText("CHAP_A=5"), rsp, rspD)
	if err != nil {
		t.Fatal(err)
	}
	id, c := chapFromLine(t, textOf(rspD[:n]))
	LoginRequest(req).Encode(&LoginRequestFields{Transit: true, CSG: StageSecurity, NSG: StageOperational, ITT: 1})
	_, st, err := tl.Step(req, kvText("CHAP_N=u", "CHAP_R="+encodeBinary(chapResponse(id, user.Secret, c)),
		"CHAP_I=9", "CHAP_C="+encodeBinary(c)), rsp, rspD)
	if st != LoginFailed || !errors.Is(err, errCHAPReused) || LoginResponse(rsp).Status() != LoginAuthFailed {
		t.Fatalf("reused challenge: %v %v %v", st, err, LoginResponse(rsp).Status())
	}
}

// TestLoginSkipOperational checks a security stage that asks for full
// feature phase directly: granted when the defaults do, turned into the
// operational stage when the target cannot live with them.
func TestLoginSkipOperational(t *testing.T) {
	t.Parallel()
	first := scriptStep{transit: true, csg: StageSecurity, nsg: StageFullFeature,
		text: kvText("InitiatorName="+testInitiator, "TargetName="+testIQN, "AuthMethod=None")}
	out, st, err := targetScript(t, testTarget(TransportTCP, TargetInfo{}), []scriptStep{first})
	if err != nil || st != LoginDone || !strings.HasPrefix(out[0], "T=true CSG=0 NSG=3 success") {
		t.Errorf("defaults acceptable: %v %v %q", st, err, out)
	}
	cfg := testTarget(TransportTCP, TargetInfo{})
	cfg.Settings.ImmediateData = false
	out, st, err = targetScript(t, cfg, []scriptStep{first,
		{transit: true, csg: StageOperational, nsg: StageFullFeature},
		{transit: true, csg: StageOperational, nsg: StageFullFeature, text: kvText("ImmediateData=No")}})
	if err != nil || st != LoginDone || !strings.HasPrefix(out[0], "T=true CSG=0 NSG=1 success") ||
		!strings.Contains(out[1], "T=false CSG=1 NSG=0 success MaxRecvDataSegmentLength=262144|ImmediateData=No|") {
		t.Errorf("ImmediateData=No target: %v %v\n%s", st, err, strings.Join(out, "\n"))
	}
	out, st, err = targetScript(t, testTarget(TransportISER, TargetInfo{}), []scriptStep{first})
	if err != nil || st != LoginInProgress || !strings.HasPrefix(out[0], "T=true CSG=0 NSG=1 success") {
		t.Errorf("iSER: %v %v %q", st, err, out)
	}
}

// TestLoginContinuation splits the operational offers over two PDUs with
// the C bit; the target acknowledges the first with an empty response.
func TestLoginContinuation(t *testing.T) {
	t.Parallel()
	text := kvText("InitiatorName="+testInitiator, "TargetName="+testIQN, "MaxBurstLength=131072")
	cut := 30 // inside a key=value pair
	out, st, err := targetScript(t, testTarget(TransportTCP, TargetInfo{}), []scriptStep{
		{cont: true, csg: StageOperational, text: text[:cut]},
		{transit: true, csg: StageOperational, nsg: StageFullFeature, text: text[cut:]},
	})
	if err != nil || st != LoginDone {
		t.Fatalf("%v %v\n%s", st, err, strings.Join(out, "\n"))
	}
	if out[0] != "T=false CSG=1 NSG=0 success " || !strings.Contains(out[1], "MaxBurstLength=131072|") {
		t.Errorf("responses:\n%s", strings.Join(out, "\n"))
	}
}

func TestNegotiatorResponder(t *testing.T) {
	t.Parallel()
	s := DefaultSettings()
	s.ImmediateData = false
	s.HeaderDigest = []Digest{DigestNone, DigestCRC32C}
	for _, tc := range []struct {
		name      string
		discovery bool
		stage     uint8
		in        []string
		want      string
		err       error
	}{
		{name: "AND", in: []string{"ImmediateData=Yes"}, want: "ImmediateData=No|"},
		{name: "OR", in: []string{"InitialR2T=Yes", "DataPDUInOrder=No"}, want: "InitialR2T=Yes|DataPDUInOrder=Yes|"},
		{name: "minimum", in: []string{"MaxBurstLength=1048576", "MaxOutstandingR2T=4"}, want: "MaxBurstLength=262144|MaxOutstandingR2T=1|"},
		{name: "maximum", in: []string{"DefaultTime2Wait=0"}, want: "DefaultTime2Wait=2|"},
		{name: "hex numbers", in: []string{"MaxBurstLength=0x200"}, want: "MaxBurstLength=512|"},
		{name: "FirstBurstLength clamped to MaxBurstLength", in: []string{"FirstBurstLength=65536", "MaxBurstLength=4096"},
			want: "MaxBurstLength=4096|FirstBurstLength=4096|"},
		{name: "list, initiator's order", in: []string{"HeaderDigest=CRC32C,None", "DataDigest=None"},
			want: "HeaderDigest=CRC32C|DataDigest=None|"},
		{name: "list without common value", in: []string{"TaskReporting=FastAbort"}, want: "TaskReporting=Reject|"},
		{name: "declarative", in: []string{"MaxRecvDataSegmentLength=4096", "InitiatorAlias=x", "X#NodeArchitecture=a"}, want: ""},
		{name: "out of range", in: []string{"MaxBurstLength=100", "ErrorRecoveryLevel=3", "MaxRecvDataSegmentLength=16777216"},
			want: "MaxBurstLength=Reject|ErrorRecoveryLevel=Reject|MaxRecvDataSegmentLength=Reject|"},
		{name: "malformed", in: []string{"ImmediateData=yes", "HeaderDigest=CRC32C,,None", "DefaultTime2Wait=2s"},
			want: "ImmediateData=Reject|HeaderDigest=Reject|DefaultTime2Wait=Reject|"},
		{name: "ERL above 0", in: []string{"ErrorRecoveryLevel=2"}, want: "ErrorRecoveryLevel=0|"},
		{name: "protocol level", in: []string{"iSCSIProtocolLevel=2"}, want: "iSCSIProtocolLevel=1|"},
		{name: "unknown and extension keys", in: []string{"Foo=1", "X-com.example.k=v", "X#Bar=1", "Z-x=y"},
			want: "Foo=NotUnderstood|X-com.example.k=NotUnderstood|X#Bar=NotUnderstood|Z-x=NotUnderstood|"},
		{name: "obsolete marker keys", in: []string{"IFMarker=No", "OFMarkInt=1~65535"}, want: "IFMarker=Reject|OFMarkInt=Reject|"},
		{name: "target-only key from initiator", in: []string{"TargetAlias=x", "TargetPortalGroupTag=1"},
			want: "TargetAlias=Reject|TargetPortalGroupTag=Reject|"},
		{name: "operational key in security stage", stage: inSecurity, in: []string{"MaxBurstLength=512"}, want: "MaxBurstLength=Reject|"},
		{name: "discovery irrelevance", discovery: true, in: []string{"InitialR2T=Yes", "MaxBurstLength=512", "DefaultTime2Wait=2"},
			want: "MaxBurstLength=Irrelevant|InitialR2T=Irrelevant|DefaultTime2Wait=2|"},
		{name: "iSER keys on TCP", in: []string{"RDMAExtensions=Yes", "TargetRecvDataSegmentLength=8192"},
			want: "RDMAExtensions=No|TargetRecvDataSegmentLength=Irrelevant|"},
		{name: "Irrelevant offered is ignored", in: []string{"InitialR2T=Irrelevant"}, want: ""},
		{name: "Reject offered", in: []string{"InitialR2T=Reject"}, err: errBadValue},
		{name: "duplicate", in: []string{"InitialR2T=Yes", "InitialR2T=No"}, err: errDuplicateKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := newNegotiator(roleTarget, TransportTCP, &s)
			n.discovery = tc.discovery
			var kvs []KeyValue
			for _, p := range tc.in {
				k, v, _ := strings.Cut(p, "=")
				kvs = append(kvs, KeyValue{k, v})
			}
			stage := tc.stage
			if stage == 0 {
				stage = inOperational
			}
			out, err := n.receive(nil, kvs, stage)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("error %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || textOf(out) != tc.want {
				t.Errorf("answers %q, %v; want %q", textOf(out), err, tc.want)
			}
		})
	}
}

func TestNegotiatorOriginator(t *testing.T) {
	t.Parallel()
	s := DefaultSettings()
	s.ImmediateData = false
	s.InitialR2T = true
	for _, tc := range []struct {
		name   string
		offer  map[keyID]string
		answer []string
		err    error
		check  func(p Params) bool
	}{
		{name: "AND answered Yes to No", offer: map[keyID]string{kImmediateData: "No"}, answer: []string{"ImmediateData=Yes"}, err: errAnswer},
		{name: "OR answered No to Yes", offer: map[keyID]string{kInitialR2T: "Yes"}, answer: []string{"InitialR2T=No"}, err: errAnswer},
		{name: "minimum answered higher", offer: map[keyID]string{kMaxBurstLength: "4096"}, answer: []string{"MaxBurstLength=8192"}, err: errAnswer},
		{name: "maximum answered lower", offer: map[keyID]string{kDefaultTime2Wait: "5"}, answer: []string{"DefaultTime2Wait=2"}, err: errAnswer},
		{name: "list answered off the list", offer: map[keyID]string{kHeaderDigest: "None"}, answer: []string{"HeaderDigest=CRC32C"}, err: errAnswer},
		{name: "list answered with a list", offer: map[keyID]string{kHeaderDigest: "None,CRC32C"}, answer: []string{"HeaderDigest=None,CRC32C"}, err: errAnswer},
		{name: "unanswered", offer: map[keyID]string{kMaxBurstLength: "4096"}, err: errNoAnswer},
		{name: "AND No needs no answer", offer: map[keyID]string{kImmediateData: "No"},
			check: func(p Params) bool { return !p.ImmediateData }},
		{name: "OR Yes needs no answer", offer: map[keyID]string{kInitialR2T: "Yes"},
			check: func(p Params) bool { return p.InitialR2T }},
		{name: "Reject keeps the default", offer: map[keyID]string{kMaxBurstLength: "4096"}, answer: []string{"MaxBurstLength=Reject"},
			check: func(p Params) bool { return p.MaxBurstLength == 262144 }},
		{name: "NotUnderstood keeps the default", offer: map[keyID]string{kMaxOutstandingR2T: "4"},
			answer: []string{"MaxOutstandingR2T=NotUnderstood"}, check: func(p Params) bool { return p.MaxOutstandingR2T == 1 }},
		{name: "valid answers", offer: map[keyID]string{kMaxBurstLength: "65536", kDefaultTime2Wait: "1", kHeaderDigest: "CRC32C,None"},
			answer: []string{"MaxBurstLength=32768", "DefaultTime2Wait=3", "HeaderDigest=None"},
			check:  func(p Params) bool { return p.MaxBurstLength == 32768 && p.DefaultTime2Wait == 3 && !p.HeaderDigest }},
		{name: "target declarations", offer: map[keyID]string{kMaxRecvDataSegmentLength: "8192"},
			answer: []string{"MaxRecvDataSegmentLength=65536", "TargetAlias=disk", "TargetPortalGroupTag=3"},
			check: func(p Params) bool {
				return p.MaxSendDataSegmentLength == 65536 && p.MaxRecvDataSegmentLength == 262144 && p.TargetAlias == "disk" &&
					p.TargetPortalGroupTag == 3
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := newNegotiator(roleInitiator, TransportTCP, &s)
			for id, v := range tc.offer {
				n.offer(nil, id, v)
			}
			var kvs []KeyValue
			for _, p := range tc.answer {
				k, v, _ := strings.Cut(p, "=")
				kvs = append(kvs, KeyValue{k, v})
			}
			_, err := n.receive(nil, kvs, inOperational)
			if err == nil {
				err = n.unansweredDefaults()
			}
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("error %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p := n.params(); !tc.check(p) {
				t.Errorf("params %+v", p)
			}
		})
	}
}

func TestEngineMisuse(t *testing.T) {
	t.Parallel()
	if _, err := NewTargetLogin(&TargetConfig{Settings: DefaultSettings()}, 1); !errors.Is(err, errConfig) {
		t.Errorf("nil Resolve: %v", err)
	}
	if _, err := NewTargetLogin(testTarget(TransportTCP, TargetInfo{}), 0); !errors.Is(err, errConfig) {
		t.Errorf("TSIH 0: %v", err)
	}
	bad := DefaultSettings()
	bad.FirstBurstLength = bad.MaxBurstLength + 1
	if _, err := NewInitiatorLogin(&InitiatorConfig{Settings: bad, InitiatorName: "i", TargetName: "t"}); !errors.Is(err, errConfig) {
		t.Errorf("FirstBurst > MaxBurst: %v", err)
	}
	if _, err := NewInitiatorLogin(&InitiatorConfig{Settings: DefaultSettings(), InitiatorName: "i"}); !errors.Is(err, errConfig) {
		t.Errorf("normal session without TargetName: %v", err)
	}
	il, _ := NewInitiatorLogin(testInitiatorConfig(TransportTCP))
	if _, _, err := il.Step(make([]byte, BHSSize), nil, make([]byte, BHSSize), nil); !errors.Is(err, errLoginState) {
		t.Errorf("Step before Start: %v", err)
	}
	r := runLogin(t, testTarget(TransportTCP, TargetInfo{}), testInitiatorConfig(TransportTCP))
	if r.initiatorErr != nil {
		t.Fatal(r.initiatorErr)
	}
	for _, s := range []LoginState{LoginInProgress, LoginDone, LoginFailed, 7} {
		if s.String() == "" {
			t.Error("LoginState.String")
		}
	}
	for a := authStart; a <= authOK+1; a++ {
		if a.String() == "" {
			t.Error("authState.String")
		}
	}
	for st := LoginStatus(0); st < 0x0400; st++ {
		if st.String() == "" || st.Error() == "" {
			t.Errorf("LoginStatus %#x has no text", uint16(st))
		}
	}
}
