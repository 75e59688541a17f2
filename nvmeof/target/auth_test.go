package target

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/auth"
	"github.com/rdisk/rdisk/nvmeof/tcp"
)

// authSendRecv runs one Authentication Send (msg) or Receive (al bytes).
func (q *tc) authSend(msg []byte) nvmeof.CQEFields {
	sqe := make(nvmeof.SQE, 64)
	sqe.Auth().Encode(&nvmeof.AuthFields{FCType: nvmeof.FCTypeAuthSend, SECP: auth.SECP, SPSP0: auth.SPSP0, SPSP1: auth.SPSP1, Length: uint32(len(msg))})
	return q.exec(sqe, msg, nil, nil)
}

func (q *tc) authRecv(al int) ([]byte, nvmeof.CQEFields) {
	sqe := make(nvmeof.SQE, 64)
	sqe.Auth().Encode(&nvmeof.AuthFields{FCType: nvmeof.FCTypeAuthReceive, SECP: auth.SECP, SPSP0: auth.SPSP0, SPSP1: auth.SPSP1, Length: uint32(al)})
	b := make([]byte, al)
	f := q.exec(sqe, nil, nil, b)
	return b, f
}

// authenticate runs a whole DH-HMAC-CHAP exchange as the host h.
func (q *tc) authenticate(t *testing.T, h *auth.Host) error {
	t.Helper()
	neg, err := h.Start(1)
	if err != nil {
		t.Fatal(err)
	}
	must(t, q.authSend(neg), "auth send negotiate")
	ch, f := q.authRecv(auth.MaxMessageSize)
	must(t, f, "auth receive challenge")
	reply, err := h.HandleChallenge(ch)
	if reply != nil {
		must(t, q.authSend(reply), "auth send reply")
	}
	if err != nil {
		return fmt.Errorf("challenge: %w", err)
	}
	s1, f := q.authRecv(auth.MaxMessageSize)
	must(t, f, "auth receive success1")
	s2, err := h.HandleSuccess1(s1)
	if s2 != nil {
		must(t, q.authSend(s2), "auth send success2")
	}
	return err
}

func identifyTC(q *tc) nvmeof.CQEFields {
	sqe := make(nvmeof.SQE, 64)
	sqe.Identify().Encode(&nvmeof.IdentifyFields{CNS: nvmeof.CNSController})
	return q.exec(sqe, nil, nil, make([]byte, 4096))
}

func TestDHCHAP(t *testing.T) {
	t.Parallel()
	key, err := auth.ParseSecret("DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:")
	if err != nil {
		t.Fatal(err)
	}
	ckey, err := auth.GenerateSecret(nil, auth.HashSHA256, 32, testNQN)
	if err != nil {
		t.Fatal(err)
	}
	wrong, _ := auth.GenerateSecret(nil, auth.HashNone, 32, "")
	cases := []struct {
		name    string
		host    auth.HostConfig
		groups  []auth.DHGroupID
		wantErr auth.FailureCode
	}{
		{name: "null group", host: auth.HostConfig{Secret: key}},
		{name: "ffdhe2048 bidirectional", host: auth.HostConfig{Secret: key, CtrlSecret: &ckey}, groups: []auth.DHGroupID{auth.DHGroupFFDHE2048}},
		{name: "wrong host key", host: auth.HostConfig{Secret: wrong}, wantErr: auth.FailureFailed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tg, port := tcpTarget(t, 1<<20, TransportTCP)
			if err := tg.SetHostAuth(hostNQN, &HostAuth{Key: key, CtrlKey: &ckey, DHGroups: c.groups}); err != nil {
				t.Fatal(err)
			}
			q := dialTC(t, port.Addr().String(), tcp.DigestHeader)
			f := must(t, q.connect(0, 31, nvmeof.CNTLIDDynamic), "connect")
			if uint32(f.Result)&nvmeof.ConnectAuthReqATR == 0 {
				t.Fatalf("connect result %#x: no ATR", f.Result)
			}
			wantStatus(t, identifyTC(q), nvmeof.StatusAuthRequired.WithDNR(), "identify before authenticating")
			hc := c.host
			hc.HostNQN, hc.SubsysNQN = hostNQN, testNQN
			h, err := auth.NewHost(hc)
			if err != nil {
				t.Fatal(err)
			}
			err = q.authenticate(t, h)
			if c.wantErr != 0 {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("authentication: %v, want %v", err, c.wantErr)
				}
				wantStatus(t, identifyTC(q), nvmeof.StatusAuthRequired.WithDNR(), "identify after failing")
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			must(t, q.prop(true, nvmeof.PropCC, uint64(nvmeof.MakeCC(nvmeof.CCFields{EN: true, IOSQES: 6, IOCQES: 4}))), "set CC")
			must(t, identifyTC(q), "identify after authenticating")
		})
	}
	t.Run("bad fields", func(t *testing.T) {
		t.Parallel()
		tg, port := tcpTarget(t, 1<<20, TransportTCP)
		tg.SetHostAuth(hostNQN, &HostAuth{Key: key})
		q := dialTC(t, port.Addr().String(), 0)
		must(t, q.connect(0, 31, nvmeof.CNTLIDDynamic), "connect")
		sqe := make(nvmeof.SQE, 64)
		sqe.Auth().Encode(&nvmeof.AuthFields{FCType: nvmeof.FCTypeAuthSend, SECP: 0x1, SPSP0: 1, SPSP1: 1, Length: 8})
		wantStatus(t, q.exec(sqe, make([]byte, 8), nil, nil), nvmeof.StatusInvalidField.WithDNR(), "auth send with SECP 1")
		_, f := q.authRecv(4)
		wantStatus(t, f, nvmeof.StatusInvalidField.WithDNR(), "auth receive of 4 bytes")
	})
}
