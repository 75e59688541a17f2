package target

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdisk/rdisk/scsi"
	"github.com/rdisk/rdisk/srp"
	"github.com/rdisk/rdisk/srp/initiator"
)

// Tests of the live-management API.

func rw10(op byte, lba uint32, blocks uint16) []byte {
	return []byte{op, 0, byte(lba >> 24), byte(lba >> 16), byte(lba >> 8), byte(lba), 0, byte(blocks >> 8), byte(blocks), 0}
}

func TestChannels(t *testing.T) {
	t.Parallel()
	before := time.Now()
	lt := startTarget(t, Config{}, PortConfig{}, newTestDisk(t, 1<<20))
	// A second port whose ID sorts first.
	p0, err := lt.t.AddPort(PortConfig{IDExt: 1, IOCGUID: 2, SCSI: lt.port.SCSI(), RelativeTargetPort: 2, AllowAnyInitiator: true})
	if err != nil {
		t.Fatal(err)
	}
	if ps := lt.t.Ports(); len(ps) != 2 || ps[0] != p0 || ps[1] != lt.port {
		t.Fatalf("Ports: %v, want the two ports by ID", ps)
	}
	ipid := srp.MakePortID(0x61, 0x62)
	s := login(t, lt, initiator.Config{InitiatorPortID: ipid, Channels: 2})
	clearUA(t, s)
	if err := s.Exec(testCtx(t), 0, &initiator.Command{CDB: rw10(scsi.OpWrite10, 8, 8), Dir: scsi.DirOut, Data: make([]byte, 4096)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Exec(testCtx(t), 1, &initiator.Command{CDB: rw10(scsi.OpRead10, 0, 16), Dir: scsi.DirIn, Data: make([]byte, 8192)}); err != nil {
		t.Fatal(err)
	}
	prov := newProvider(t)
	s0, err := initiator.Login(testCtx(t), prov, lt.addr, p0.ID(), initiator.Config{InitiatorPortID: ipid, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s0.Close()

	chs := lt.t.Channels()
	if len(chs) != 3 {
		t.Fatalf("Channels: %+v, want 3", chs)
	}
	if chs[0].Port != p0.ID().String() || chs[1].Port != testTargetID.String() || chs[2].Port != testTargetID.String() || chs[1].ID >= chs[2].ID {
		t.Errorf("Channels not sorted by port, then ID: %+v", chs)
	}
	var cmds, rd, wr uint64
	for _, c := range chs {
		if c.Initiator != ipid.String() || !strings.HasPrefix(c.Remote, "127.0.0.1:") || c.Depth != DefaultQueueDepth ||
			c.MaxIU < srp.MinITIULen || c.MaxIU > DefaultMaxIULen || c.Since.Before(before) || c.Since.After(time.Now()) {
			t.Errorf("channel %+v", c)
		}
		if c.Port == testTargetID.String() {
			cmds, rd, wr = cmds+c.Commands, rd+c.ReadBytes, wr+c.WriteBytes
		} else if c.Commands != 0 || c.ReadBytes != 0 || c.WriteBytes != 0 {
			t.Errorf("counters of an idle channel: %+v", c)
		}
	}
	if cmds < 3 || rd != 8192 || wr != 4096 {
		t.Errorf("counters after a TEST UNIT READY, a 4 KiB write and an 8 KiB read: %d commands, %d bytes read, %d written", cmds, rd, wr)
	}
}

func TestCloseChannel(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, Config{}, PortConfig{}, newTestDisk(t, 1<<20))
	s := login(t, lt, initiator.Config{})
	clearUA(t, s)
	chs := lt.t.Channels()
	if len(chs) != 1 {
		t.Fatalf("Channels: %+v", chs)
	}
	if err := lt.t.CloseChannel(chs[0].ID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	var le *initiator.LogoutError
	if err := s.Err(); !errors.As(err, &le) || le.Reason != srp.TLogoutNoReason {
		t.Errorf("session error after CloseChannel: %v, want a *LogoutError", err)
	}
	if n := len(lt.t.Channels()); n != 0 {
		t.Errorf("%d channels after CloseChannel", n)
	}
	if st := lt.t.Stats(); st.TLogouts != 1 {
		t.Errorf("%d SRP_T_LOGOUT sent, want 1", st.TLogouts)
	}
	if err := lt.t.CloseChannel(chs[0].ID); err == nil {
		t.Error("CloseChannel of a closed channel succeeded")
	}
	// The port still takes logins.
	clearUA(t, login(t, lt, initiator.Config{}))
}

func TestSetACL(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, Config{}, PortConfig{}, newTestDisk(t, 1<<20))
	a, b := srp.MakePortID(0xa, 0xa), srp.MakePortID(0xb, 0xb)
	s := login(t, lt, initiator.Config{InitiatorPortID: a})
	clearUA(t, s)
	if err := lt.port.SetACL([]string{"not an entry"}, false); err == nil {
		t.Error("SetACL accepted a bad entry")
	}
	if err := lt.port.SetACL([]string{b.String()}, false); err != nil {
		t.Fatal(err)
	}
	// The channel logged in stays; a new login of the removed initiator
	// is refused.
	clearUA(t, s)
	_, err := initiator.Login(testCtx(t), newProvider(t), lt.addr, testTargetID, initiator.Config{InitiatorPortID: a, Logger: testLogger()})
	if !errors.Is(err, srp.RejUnableEstablishChannel) {
		t.Errorf("login of an initiator removed from the ACL: %v, want %v", err, srp.RejUnableEstablishChannel)
	}
	clearUA(t, login(t, lt, initiator.Config{InitiatorPortID: b}))
	if err := lt.port.SetACL(nil, true); err != nil {
		t.Fatal(err)
	}
	login(t, lt, initiator.Config{InitiatorPortID: srp.MakePortID(0xc, 0xc)})
}

func TestPortLUNs(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, Config{}, PortConfig{}, newTestDisk(t, 1<<20))
	if got := lt.port.LUNs(); !slices.Equal(got, []uint64{0}) {
		t.Errorf("LUNs %v, want [0]", got)
	}
	lu, err := scsi.NewLU(newTestDisk(t, 1<<20), scsi.LUConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := lt.port.Map(9, lu); err != nil {
		t.Fatal(err)
	}
	if _, err := lt.port.Unmap(0); err != nil {
		t.Fatal(err)
	}
	if got := lt.port.LUNs(); !slices.Equal(got, []uint64{9}) {
		t.Errorf("LUNs %v, want [9]", got)
	}
}

// TestManageWithIOInFlight runs the management calls while commands are in
// flight (for the race detector).
func TestManageWithIOInFlight(t *testing.T) {
	t.Parallel()
	lt := startTarget(t, Config{}, PortConfig{}, newTestDisk(t, 1<<20))
	s := login(t, lt, initiator.Config{Channels: 2})
	clearUA(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	for q := range 2 {
		go func() {
			defer func() { done <- struct{}{} }()
			buf := make([]byte, 4096)
			for i := 0; ctx.Err() == nil; i++ {
				c := &initiator.Command{CDB: rw10(scsi.OpRead10, uint32(i%64)*8, 8), Dir: scsi.DirIn, Data: buf}
				if i%2 == 1 {
					c = &initiator.Command{CDB: rw10(scsi.OpWrite10, uint32(i%64)*8, 8), Dir: scsi.DirOut, Data: buf}
				}
				if err := s.Exec(ctx, q, c); err != nil && ctx.Err() == nil {
					var se *initiator.SCSIError
					if !errors.As(err, &se) {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	for range 50 {
		lt.t.Channels()
		lt.t.Ports()
		lt.port.LUNs()
		if err := lt.port.SetACL([]string{"10.0.0.1"}, true); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	for range 2 {
		<-done
	}
	for _, c := range lt.t.Channels() {
		if c.Commands == 0 {
			t.Errorf("channel %+v counted no commands", c)
		}
	}
}
