package host

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/auth"
	"github.com/rdisk/rdisk/nvmeof/target"
	"github.com/rdisk/rdisk/rdma/iwarp"
)

// DH-HMAC-CHAP against rdisk's own target (Target.SetHostAuth), over both
// transports.

// authTransports are the ports and host transports the tests run on.
var authTransports = []struct {
	name string
	port func() target.PortConfig
	tr   Transport
}{
	{"rdma", func() target.PortConfig { return target.PortConfig{} }, TransportRDMA},
	{"tcp", tcpPort, TransportTCP},
}

func mustSecret(t testing.TB, transform auth.HashID, nqn string) *auth.Secret {
	t.Helper()
	s, err := auth.GenerateSecret(nil, transform, 0, nqn)
	if err != nil {
		t.Fatal(err)
	}
	return &s
}

// dialAuth connects to lt over tr with cfg and returns the error.
func dialAuth(t *testing.T, lt *loopTarget, tr Transport, cfg Config) (*Controller, error) {
	t.Helper()
	cfg.Transport = tr
	var p *iwarp.Provider
	if tr == TransportRDMA {
		var err error
		if p, err = iwarp.New(iwarp.Config{}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var c *Controller
	var err error
	if p != nil {
		c, err = Connect(ctx, p, lt.addr, loopNQN, cfg)
	} else {
		c, err = Connect(ctx, nil, lt.addr, loopNQN, cfg)
	}
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func TestDHCHAP(t *testing.T) {
	t.Parallel()
	hostKey := mustSecret(t, auth.HashSHA256, loopHost)
	ctrlKey := mustSecret(t, auth.HashSHA384, loopNQN)
	wrongKey := mustSecret(t, auth.HashNone, "")
	cases := []struct {
		name string
		// target side (nil: no authentication configured)
		tgt *target.HostAuth
		// host side
		secret, ctrlSecret *auth.Secret
		// wantCode: the Connect fails with this reason; wantRemote: the
		// controller reported it (AUTH_Failure1).
		wantCode    auth.FailureCode
		wantRemote  bool
		wantMissing bool
		wantText    string
		// io: verify data and re-authenticate after connecting.
		io bool
	}{
		{name: "null group", tgt: &target.HostAuth{Key: *hostKey, DHGroups: []auth.DHGroupID{auth.DHGroupNull}},
			secret: hostKey, io: true},
		{name: "ffdhe2048 bidirectional", tgt: &target.HostAuth{Key: *hostKey, CtrlKey: ctrlKey, DHGroups: []auth.DHGroupID{auth.DHGroupFFDHE2048}},
			secret: hostKey, ctrlSecret: ctrlKey, io: true},
		{name: "wrong secret", tgt: &target.HostAuth{Key: *hostKey},
			secret: wrongKey, wantCode: auth.FailureFailed, wantRemote: true, wantText: "peer reported authentication failed"},
		{name: "no secret", tgt: &target.HostAuth{Key: *hostKey},
			wantMissing: true, wantText: "requires DH-HMAC-CHAP authentication (Connect of the admin queue): pass --dhchap-secret"},
		{name: "wrong controller secret", tgt: &target.HostAuth{Key: *hostKey, CtrlKey: ctrlKey},
			secret: hostKey, ctrlSecret: wrongKey, wantCode: auth.FailureFailed, wantText: "wrong controller secret"},
		{name: "target does not ask", secret: hostKey, ctrlSecret: ctrlKey},
	}
	for _, tr := range authTransports {
		for _, tc := range cases {
			t.Run(tr.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				lt := startTarget(t, 1<<20, tr.port(), target.SubsystemConfig{})
				if tc.tgt != nil {
					if err := lt.tg.SetHostAuth(loopHost, tc.tgt); err != nil {
						t.Fatal(err)
					}
				}
				cfg := hostConfig()
				cfg.IOQueues, cfg.QueueDepth = 2, 16
				cfg.DHCHAPSecret, cfg.DHCHAPCtrlSecret = tc.secret, tc.ctrlSecret
				c, err := dialAuth(t, lt, tr.tr, cfg)
				switch {
				case tc.wantMissing:
					if !errors.Is(err, ErrAuthRequired) || !strings.Contains(err.Error(), tc.wantText) {
						t.Fatalf("Connect: %v, want ErrAuthRequired saying %q", err, tc.wantText)
					}
					return
				case tc.wantCode != 0:
					var ae *AuthError
					var pe *auth.Error
					if !errors.As(err, &ae) || !errors.As(err, &pe) || !errors.Is(err, tc.wantCode) {
						t.Fatalf("Connect: %v, want an *AuthError with %v", err, tc.wantCode)
					}
					if ae.QID != 0 || pe.Remote != tc.wantRemote || !strings.Contains(err.Error(), tc.wantText) ||
						!strings.Contains(err.Error(), "admin queue") || !strings.Contains(err.Error(), tc.wantCode.String()) {
						t.Fatalf("Connect: %v (qid %d, remote %v); want the admin queue, remote %v, %q", err, ae.QID, pe.Remote, tc.wantRemote, tc.wantText)
					}
					t.Logf("Connect: %v", err)
					return
				case err != nil:
					t.Fatalf("Connect: %v", err)
				}
				n, _ := c.IOQueues()
				exchanges := uint32(0)
				if tc.tgt != nil {
					exchanges = uint32(1 + n) // admin and every I/O queue
				}
				if got := c.authTID.Load(); got != exchanges || n != 2 {
					t.Fatalf("%d exchanges on %d I/O queues, want %d", got, n, exchanges)
				}
				if !tc.io {
					return
				}
				ns, err := c.Namespace(context.Background(), 1)
				if err != nil {
					t.Fatal(err)
				}
				verifyRandom(t, ns, 1<<20)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				if err := c.Reauthenticate(ctx); err != nil {
					t.Fatalf("Reauthenticate: %v", err)
				}
				if got := c.authTID.Load(); got != 2*exchanges {
					t.Fatalf("%d exchanges after re-authenticating, want %d", got, 2*exchanges)
				}
				verifyRandom(t, ns, 1<<20)
			})
		}
	}
}

// TestDHCHAPConfig: settings refused before anything is sent.
func TestDHCHAPConfig(t *testing.T) {
	t.Parallel()
	key := mustSecret(t, auth.HashNone, "")
	bad := &auth.Secret{Transform: 9, Key: make([]byte, 32)}
	cases := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"ctrl secret alone", func(c *Config) { c.DHCHAPCtrlSecret = key }, "needs the host's secret"},
		{"bad secret", func(c *Config) { c.DHCHAPSecret = bad }, "DH-HMAC-CHAP secret"},
		{"bad ctrl secret", func(c *Config) { c.DHCHAPSecret, c.DHCHAPCtrlSecret = key, bad }, "DH-HMAC-CHAP controller secret"},
		{"no groups", func(c *Config) { c.DHCHAPSecret, c.DHCHAPGroups = key, []auth.DHGroupID{} }, "DH groups"},
		{"unknown hash", func(c *Config) { c.DHCHAPSecret, c.DHCHAPHashes = key, []auth.HashID{7} }, "unknown"},
	}
	for _, tc := range cases {
		cfg := tcpConfig(false, false)
		tc.mod(&cfg)
		_, err := Connect(context.Background(), nil, "127.0.0.1:1", loopNQN, cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// Reauthenticate without a secret.
	lt := startTarget(t, 1<<20, tcpPort(), target.SubsystemConfig{})
	c := connectTCPLoop(t, lt, tcpConfig(false, false))
	if err := c.Reauthenticate(context.Background()); err == nil || !strings.Contains(err.Error(), "no DH-HMAC-CHAP secret") {
		t.Errorf("Reauthenticate without a secret: %v", err)
	}
}

// TestDHCHAPConcatenation: a controller asking for secure channel
// concatenation (ASCR) is refused, with or without a secret, as Linux does
// ("secure concatenation is not supported").
func TestDHCHAPConcatenation(t *testing.T) {
	t.Parallel()
	f := startTCPFake(t, func(f *tcpFake) { f.authreq = nvmeof.ConnectAuthReqATR | nvmeof.ConnectAuthReqASCR })
	for _, secret := range []*auth.Secret{nil, mustSecret(t, auth.HashNone, "")} {
		cfg := tcpHostConfig(false, false)
		cfg.DHCHAPSecret = secret
		_, err := Open(context.Background(), nil, tcpFakeURL(t, f), cfg)
		if err == nil || !strings.Contains(err.Error(), "secure channel concatenation") || !strings.Contains(err.Error(), "admin queue") {
			t.Errorf("Open (secret %v): %v, want secure channel concatenation refused", secret != nil, err)
		}
	}
}
