package target

import (
	"errors"
	"github.com/rdisk/rdisk/srp"
	"github.com/rdisk/rdisk/srp/initiator"
	"sync"
	"testing"
	"time"

	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/rdma"
)

// rejectOf logs in raw with pd and returns the SRP_LOGIN_REJ.
func rejectOf(t *testing.T, addr string, pd []byte) srp.LoginRejFields {
	t.Helper()
	c, err := rawLogin(t, addr, pd)
	if err == nil {
		c.close()
		t.Fatalf("login accepted, want a reject")
	}
	var rej *rdma.RejectError
	if !errors.As(err, &rej) {
		t.Fatalf("login: %v, want *rdma.RejectError", err)
	}
	f, err := srp.ParseLoginRej(rej.PrivateData)
	if err != nil {
		t.Fatalf("reject private data %x: %v", rej.PrivateData, err)
	}
	return f
}

func TestLoginRejects(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, Config{}, PortConfig{}, newTestDisk(t, 1<<20))
	noInd := startTarget(t, Config{NoIndirect: true}, PortConfig{}, nil)
	acl := startTarget(t, Config{}, PortConfig{AllowedInitiators: []string{"0x000000000000000a0000000000000b0b", "1234:5678:9abc:def0", "10.9.8.7"}}, nil)
	ipid := srp.MakePortID(1, 2)
	tests := []struct {
		name   string
		addr   string
		mutate func(f *srp.LoginReqFields)
		pd     []byte
		want   srp.RejectReason
	}{
		{"wrong target port ID", lt.addr, func(f *srp.LoginReqFields) { f.TargetPortID = srp.MakePortID(testIDExt, testIOCGUID+1) }, nil, srp.RejUnableAssociateChannel},
		{"swapped id_ext and ioc_guid", lt.addr, func(f *srp.LoginReqFields) { f.TargetPortID = srp.MakePortID(testIOCGUID, testIDExt) }, nil, srp.RejUnableAssociateChannel},
		{"IU too large", lt.addr, func(f *srp.LoginReqFields) { f.ReqITIULen = DefaultMaxIULen + 1 }, nil, srp.RejITIULenTooLarge},
		{"IU too small", lt.addr, func(f *srp.LoginReqFields) { f.ReqITIULen = 63 }, nil, srp.RejITIULenTooLarge},
		{"unsupported format (indirect)", noInd.addr, func(f *srp.LoginReqFields) {}, nil, srp.RejUnsupportedDescFormat},
		{"unsupported format (reserved bit)", lt.addr, func(f *srp.LoginReqFields) { f.ReqBufFmt |= 1 << 5 }, nil, srp.RejUnsupportedDescFormat},
		{"reserved multi-channel action", lt.addr, func(f *srp.LoginReqFields) { f.ReqFlags = 2 }, nil, srp.RejUnableEstablishChannel},
		{"not in the ACL", acl.addr, func(f *srp.LoginReqFields) {}, nil, srp.RejUnableEstablishChannel},
		{"short private data", lt.addr, nil, make([]byte, 40), srp.RejUnableEstablishChannel},
		{"not a login opcode", lt.addr, nil, append(loginPD(rawLoginFields(ipid))[:11:11], append([]byte{byte(srp.OpCmd)}, make([]byte, 44)...)...), srp.RejUnableEstablishChannel},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pd := tc.pd
			if pd == nil {
				f := rawLoginFields(ipid)
				tc.mutate(&f)
				pd = loginPD(f)
			}
			rej := rejectOf(t, tc.addr, pd)
			if rej.Reason != tc.want {
				t.Errorf("reason %#x (%s), want %#x (%s)", uint32(rej.Reason), rej.Reason, uint32(tc.want), tc.want)
			}
			if tc.pd == nil && rej.Tag != 0x1234 {
				t.Errorf("reject tag %#x, want the request's 0x1234", rej.Tag)
			}
			wantFmt := srp.BufFmtDirect | srp.BufFmtIndirect
			if tc.addr == noInd.addr {
				wantFmt = srp.BufFmtDirect
			}
			if rej.BufFmt != wantFmt {
				t.Errorf("reject buffer formats %#x, want %#x", rej.BufFmt, wantFmt)
			}
		})
	}
	// The ACL admits initiator port IDs, port GUIDs and IP addresses.
	for _, id := range []srp.PortID{srp.MakePortID(0xa, 0xb0b), srp.MakePortID(99, 0x123456789abcdef0)} {
		c, err := rawLogin(t, acl.addr, loginPD(rawLoginFields(id)))
		if err != nil {
			t.Errorf("ACL login of %s: %v", id, err)
			continue
		}
		c.close()
	}
	byIP := startTarget(t, Config{}, PortConfig{AllowedInitiators: []string{"127.0.0.1"}}, nil)
	c, err := rawLogin(t, byIP.addr, loginPD(rawLoginFields(ipid)))
	if err != nil {
		t.Errorf("ACL login by IP address: %v", err)
	} else {
		c.close()
	}
	if st := lt.t.Stats(); st.LoginRejects == 0 {
		t.Errorf("stats count no rejects: %+v", st)
	}
}

// TestLoginErrorTyped checks that the initiator library reports rejects as
// *LoginError matching the reason.
func TestLoginErrorTyped(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, Config{MaxIULen: 1024}, PortConfig{}, nil)
	_, err := initiator.Login(testCtx(t), newProvider(t), lt.addr, testTargetID, initiator.Config{MaxITIULen: 4096})
	var le *initiator.LoginError
	if !errors.As(err, &le) || !errors.Is(err, srp.RejITIULenTooLarge) {
		t.Fatalf("login: %v, want a *LoginError for %s", err, srp.RejITIULenTooLarge)
	}
	_, err = initiator.Login(testCtx(t), newProvider(t), lt.addr, srp.MakePortID(1, 1), initiator.Config{MaxITIULen: 1024})
	if !errors.Is(err, srp.RejUnableAssociateChannel) {
		t.Fatalf("login to another port: %v, want %s", err, srp.RejUnableAssociateChannel)
	}
}

func TestLoginResponse(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, Config{QueueDepth: 24}, PortConfig{}, nil)
	noImm := startTarget(t, Config{NoImmediateData: true}, PortConfig{}, nil)
	for i, tc := range []struct {
		name    string
		addr    string
		imm     uint16
		flags   uint8
		credits int32
		wantImm bool
	}{
		{"immediate data", lt.addr, 68, srp.ImmedRequested, 24, true},
		{"offset inside the command", lt.addr, 40, srp.ImmedRequested, 24, false},
		{"no immediate data asked", lt.addr, 68, 0, 24, false},
		{"target declines", noImm.addr, 68, srp.ImmedRequested, DefaultQueueDepth, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := rawLoginFields(srp.MakePortID(7, uint64(i)))
			f.ReqITIULen, f.ReqFlags, f.ImmDataOffset = 8260, tc.flags, tc.imm
			c, err := rawLogin(t, tc.addr, loginPD(f))
			if err != nil {
				t.Fatal(err)
			}
			defer c.close()
			r, err := srp.ParseLoginRsp(c.reply)
			if err != nil {
				t.Fatal(err)
			}
			if r.ReqLimDelta != tc.credits || r.Tag != 0x1234 || r.MaxITIULen != DefaultMaxIULen || r.BufFmt != srp.BufFmtDirect|srp.BufFmtIndirect {
				t.Errorf("login response %+v", r)
			}
			if r.MaxTIIULen < srp.RspSize+18 || r.MaxTIIULen > 8260 {
				t.Errorf("max_ti_iu_len %d", r.MaxTIIULen)
			}
			if got := r.Flags&srp.LoginRspImmedSupp != 0; got != tc.wantImm {
				t.Errorf("immediate data supported %v, want %v (flags %#x)", got, tc.wantImm, r.Flags)
			}
			if r.Flags&3 != srp.LoginRspNoChannels {
				t.Errorf("multichannel flags %#x for a first login", r.Flags&3)
			}
		})
	}
}

func TestMultiChannel(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, Config{MaxChannels: 3}, PortConfig{}, newTestDisk(t, 1<<20))
	id := srp.MakePortID(0x51, 0x52)
	s := login(t, lt, initiator.Config{InitiatorPortID: id, Channels: 3})
	if s.Channels() != 3 || lt.port.Channels() != 3 {
		t.Fatalf("%d initiator channels, %d at the target, want 3", s.Channels(), lt.port.Channels())
	}
	d, err := s.Device(testCtx(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	for q := range 3 {
		data := randBytes(8192, uint64(q))
		if err := ioAt(t, d, blockdev.OpWrite, data, int64(q)*8192, q); err != nil {
			t.Fatal(err)
		}
	}
	// A fourth channel exceeds the limit.
	f := rawLoginFields(id)
	f.ReqFlags = srp.MultiChanMulti
	if rej := rejectOf(t, lt.addr, loginPD(f)); rej.Reason != srp.RejChannelLimitReached {
		t.Errorf("fourth channel: %s, want %s", rej.Reason, srp.RejChannelLimitReached)
	}
	// A login with MULTI-CHANNEL ACTION 0 takes the nexus over: the three
	// channels get SRP_T_LOGOUT (multi-channel action) and end.
	f.ReqFlags = srp.MultiChanSingle
	c, err := rawLogin(t, lt.addr, loginPD(f))
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	r, _ := srp.ParseLoginRsp(c.reply)
	if r.Flags&3 != srp.LoginRspTerminated {
		t.Errorf("takeover login flags %#x, want TERMINATED", r.Flags)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	var le *initiator.LogoutError
	if err := s.Err(); !errors.As(err, &le) || le.Reason != srp.TLogoutMultiChannel {
		t.Fatalf("session error %v, want a logout for the multi-channel action", err)
	}
	for lt.port.Channels() != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := lt.port.Channels(); n != 1 {
		t.Errorf("%d channels after the takeover, want 1", n)
	}
}

func TestMultiChannelUnsupported(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, Config{MaxChannels: 1}, PortConfig{}, nil)
	id := srp.MakePortID(3, 4)
	c, err := rawLogin(t, lt.addr, loginPD(rawLoginFields(id)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	f := rawLoginFields(id)
	f.ReqFlags = srp.MultiChanMulti
	if rej := rejectOf(t, lt.addr, loginPD(f)); rej.Reason != srp.RejMultiChannelUnsupp {
		t.Errorf("second channel: %s, want %s", rej.Reason, srp.RejMultiChannelUnsupp)
	}
}

// TestReloginWhileSessionCloses: a login of an initiator port whose
// previous nexus has lost its last channel but not yet closed its SCSI
// session (a re-login right after a logout) waits for the session instead
// of being refused as a duplicate.
func TestReloginWhileSessionCloses(t *testing.T) {
	t.Parallel()
	inWindow, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	cfg := Config{afterDetach: func() {
		once.Do(func() {
			close(inWindow)
			select {
			case <-release:
			case <-time.After(10 * time.Second):
			}
		})
	}}
	lt := startTarget(t, cfg, PortConfig{}, memDisk(t, 1<<20))
	ipid := srp.MakePortID(3, 3)
	c1, err := rawLogin(t, lt.addr, loginPD(rawLoginFields(ipid)))
	if err != nil {
		t.Fatal(err)
	}
	lo := make([]byte, srp.ILogoutSize)
	srp.EncodeILogout(lo, 9)
	c1.send(lo)
	select {
	case <-inWindow:
	case <-time.After(10 * time.Second):
		t.Fatal("the logged-out channel did not leave its nexus")
	}
	time.AfterFunc(100*time.Millisecond, func() { close(release) })
	c2, err := rawLogin(t, lt.addr, loginPD(rawLoginFields(ipid)))
	if err != nil {
		t.Fatalf("re-login while the previous session closes: %v", err)
	}
	c2.send(tur(1))
	if rsp := c2.recv(10 * time.Second); len(rsp) == 0 || srp.Opcode(rsp[0]) != srp.OpRsp {
		t.Fatalf("no SRP_RSP on the new channel: %x", rsp)
	}
}
