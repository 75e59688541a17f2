package target

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/iser/initiator"
	"github.com/rdisk/rdisk/rdma/iwarp"
	"github.com/rdisk/rdisk/scsi"
)

// Tests of the live-management API against rdisk's initiator on
// 127.0.0.1, over iSCSI/TCP and iSER (pure-Go iWARP) through one portal.

const mgmtInitiator = "iqn.2026-11.io.rdisk:mgmt"

var mgmtTransports = []struct {
	name string
	tr   iser.Transport
}{{"tcp", iser.TransportTCP}, {"iser", iser.TransportISER}}

// portal is a Target (newTestTarget's, with an iWARP provider) serving a
// listener on 127.0.0.1.
type portal struct {
	tg   *Target
	addr string
}

func startPortal(t *testing.T, edit func(*Config)) *portal {
	t.Helper()
	p, err := iwarp.New(iwarp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tg := newTestTarget(t, func(c *Config) {
		c.Provider = p
		if edit != nil {
			edit(c)
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- tg.Serve(context.Background(), ln) }()
	t.Cleanup(func() {
		tg.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		p.Close()
	})
	return &portal{tg: tg, addr: ln.Addr().String()}
}

// config is an initiator configuration named name, on its own provider.
func (pt *portal) config(t *testing.T, name string) initiator.Config {
	t.Helper()
	p, err := iwarp.New(iwarp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return initiator.Config{InitiatorName: name, Provider: p, CommandTimeout: 20 * time.Second, ConnectTimeout: 10 * time.Second}
}

func (pt *portal) login(t *testing.T, tr iser.Transport, iqn string, cfg initiator.Config) (*initiator.Session, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := initiator.Login(ctx, tr, pt.addr, iqn, cfg)
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

func (pt *portal) mustLogin(t *testing.T, tr iser.Transport, iqn string, cfg initiator.Config) *initiator.Session {
	t.Helper()
	s, err := pt.login(t, tr, iqn, cfg)
	if err != nil {
		t.Fatalf("login to %s: %v", iqn, err)
	}
	return s
}

func execute(t *testing.T, s *initiator.Session, cmd *initiator.Command) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Execute(ctx, cmd); err != nil {
		t.Fatalf("%#x: %v", cmd.CDB[0], err)
	}
}

// unitAttention runs TEST UNIT READY on lun and returns the ASC of the
// unit attention it reports, or 0 when it is GOOD.
func unitAttention(t *testing.T, s *initiator.Session, lun uint64) scsi.ASC {
	t.Helper()
	cmd := &initiator.Command{LUN: lun, CDB: make([]byte, 6)}
	execute(t, s, cmd)
	if cmd.Status == scsi.StatusGood {
		return 0
	}
	sn, err := scsi.ParseSense(cmd.Sense)
	if cmd.Status != scsi.StatusCheckCondition || err != nil || sn.Key != scsi.KeyUnitAttention {
		t.Fatalf("TEST UNIT READY: status %v, sense % x", cmd.Status, cmd.Sense)
	}
	return sn.ASC
}

// clearUAs clears the unit attentions of a new session on lun.
func clearUAs(t *testing.T, s *initiator.Session, lun uint64) {
	t.Helper()
	for range 5 {
		if unitAttention(t, s, lun) == 0 {
			return
		}
	}
	t.Fatal("unit attentions do not clear")
}

func rw10(op byte, lba uint32, blocks uint16) []byte {
	return []byte{op, 0, byte(lba >> 24), byte(lba >> 16), byte(lba >> 8), byte(lba), 0, byte(blocks >> 8), byte(blocks), 0}
}

func waitDone(t *testing.T, s *initiator.Session, what string) {
	t.Helper()
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: the initiator's session did not end", what)
	}
}

func sessionOf(t *testing.T, tg *Target, tsih uint16) SessionInfo {
	t.Helper()
	for _, si := range tg.Sessions() {
		if si.TSIH == tsih {
			return si
		}
	}
	t.Fatalf("no session with TSIH %d in %+v", tsih, tg.Sessions())
	return SessionInfo{}
}

// waitSessions waits until tg has n sessions: the target opens a session
// once its last Login Response is sent, after the initiator may have
// returned from its login.
func waitSessions(t *testing.T, tg *Target, n int) []SessionInfo {
	t.Helper()
	var all []SessionInfo
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if all = tg.Sessions(); len(all) == n {
			break
		}
	}
	return all
}

func TestSessions(t *testing.T) {
	t.Parallel()
	for _, x := range mgmtTransports {
		t.Run(x.name, func(t *testing.T) {
			t.Parallel()
			pt := startPortal(t, nil)
			before := time.Now()
			cfg := pt.config(t, mgmtInitiator)
			cfg.ISID = iser.ISID{0x80, 0, 0, 0x12, 0x34, 0x56}
			s := pt.mustLogin(t, x.tr, fuzzIQN, cfg)
			// A discovery session too (over a pipe: it stays open).
			dc, _, _, _, ddone := loginPipe(t, pt.tg, true)
			defer func() { dc.Close(); <-ddone }()

			all := waitSessions(t, pt.tg, 2)
			if len(all) != 2 || !all[0].Discovery || all[0].Target != "" || all[1].Discovery {
				t.Fatalf("Sessions: %+v, want the discovery session, then the normal one", all)
			}
			si := all[1]
			if si.Target != fuzzIQN || si.Initiator != mgmtInitiator || si.ISID != "800000123456" || si.TSIH != s.TSIH() {
				t.Errorf("session %+v, want target %s, initiator %s, ISID 800000123456, TSIH %d", si, fuzzIQN, mgmtInitiator, s.TSIH())
			}
			if si.Since.Before(before) || si.Since.After(time.Now()) {
				t.Errorf("Since %v, not during the test (from %v)", si.Since, before)
			}
			if len(si.Connections) != 1 {
				t.Fatalf("connections %+v", si.Connections)
			}
			ci := si.Connections[0]
			if ci.Transport != x.name || ci.Local != pt.addr || !strings.HasPrefix(ci.Remote, "127.0.0.1:") || ci.Remote == pt.addr || ci.CID != 0 {
				t.Errorf("connection %+v, want %s from 127.0.0.1 to %s", ci, x.name, pt.addr)
			}
			if si.Commands != 0 || si.ReadBytes != 0 || si.WriteBytes != 0 {
				t.Errorf("counters before any command: %+v", si)
			}
			clearUAs(t, s, 0)
			execute(t, s, &initiator.Command{CDB: rw10(scsi.OpWrite10, 8, 8), DataOut: make([]byte, 4096)})
			execute(t, s, &initiator.Command{CDB: rw10(scsi.OpRead10, 0, 16), DataIn: make([]byte, 8192)})
			si2 := sessionOf(t, pt.tg, s.TSIH())
			if si2.Commands < si.Commands+3 || si2.WriteBytes != 4096 || si2.ReadBytes != 8192 {
				t.Errorf("counters after a TEST UNIT READY, a 4 KiB write and an 8 KiB read: %d commands, %d bytes read, %d written",
					si2.Commands, si2.ReadBytes, si2.WriteBytes)
			}
			d := pt.tg.Sessions()[0]
			if d.Initiator != "iqn.2026-11.io.rdisk:fuzzer" || d.Connections[0].Transport != "tcp" {
				t.Errorf("discovery session %+v", d)
			}
		})
	}
}

func TestCloseSession(t *testing.T) {
	t.Parallel()
	for _, x := range mgmtTransports {
		t.Run(x.name, func(t *testing.T) {
			t.Parallel()
			pt := startPortal(t, nil)
			s := pt.mustLogin(t, x.tr, fuzzIQN, pt.config(t, mgmtInitiator))
			clearUAs(t, s, 0)
			start := time.Now()
			if err := pt.tg.CloseSession(s.TSIH()); err != nil {
				t.Fatal(err)
			}
			// rdisk's initiator logs out when asked: no need to wait
			// for the drop.
			if d := time.Since(start); d >= logoutGrace {
				t.Errorf("CloseSession took %v: the initiator was not asked to log out", d)
			}
			waitDone(t, s, "CloseSession")
			if n := len(pt.tg.Sessions()); n != 0 {
				t.Errorf("%d sessions after CloseSession", n)
			}
			err := pt.tg.CloseSession(s.TSIH())
			if err == nil || !strings.Contains(err.Error(), fmt.Sprint(s.TSIH())) {
				t.Errorf("CloseSession of a closed session: %v, want an error naming TSIH %d", err, s.TSIH())
			}
			// The target still takes logins.
			s2 := pt.mustLogin(t, x.tr, fuzzIQN, pt.config(t, mgmtInitiator))
			clearUAs(t, s2, 0)
		})
	}
}

// TestCloseSessionDrops: an initiator that does not log out when asked is
// dropped after the grace period.
func TestCloseSessionDrops(t *testing.T) {
	t.Parallel()
	tg := newTestTarget(t, nil)
	c, r, _, ls, done := loginPipe(t, tg, false)
	defer c.Close()
	waitSessions(t, tg, 1)
	errc := make(chan error, 1)
	go func() { errc <- tg.CloseSession(ls.TSIH) }()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	p, err := r.ReadPDU(make([]byte, iser.MaxHeaderLength), make([]byte, 8192))
	if err != nil {
		t.Fatal(err)
	}
	if p.BHS.Opcode() != iser.OpAsyncMessage || iser.AsyncMessage(p.BHS).Event() != iser.AsyncRequestLogout {
		t.Fatalf("first PDU after CloseSession: %v; want an Async Message requesting logout", p.BHS.Opcode())
	}
	if _, err := r.ReadPDU(make([]byte, iser.MaxHeaderLength), make([]byte, 8192)); err == nil {
		t.Fatal("the connection is still open")
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	<-done
	if n := len(tg.Sessions()); n != 0 {
		t.Errorf("%d sessions after CloseSession", n)
	}
}

func TestAddRemoveTarget(t *testing.T) {
	t.Parallel()
	pt := startPortal(t, nil)
	const iqn = fuzzIQN + "-added"
	disk, err := backstore.NewMem(1<<20, 512)
	if err != nil {
		t.Fatal(err)
	}
	if err := pt.tg.AddTarget(TargetConfig{Name: "not-an-iqn", LUNs: []LUNConfig{{LUN: 0, Disk: disk}}}); err == nil {
		t.Error("AddTarget accepted a bad name")
	}
	if err := pt.tg.AddTarget(TargetConfig{Name: fuzzIQN}); err == nil {
		t.Error("AddTarget accepted an existing IQN")
	}
	if err := pt.tg.AddTarget(TargetConfig{Name: iqn, LUNs: []LUNConfig{{LUN: 2, Disk: disk}}}); err != nil {
		t.Fatal(err)
	}
	if got := pt.tg.TargetNames(); len(got) != 2 || got[1] != iqn || pt.tg.SCSITarget(iqn) == nil {
		t.Fatalf("TargetNames %v after AddTarget", got)
	}
	var added []*initiator.Session
	for _, x := range mgmtTransports {
		s := pt.mustLogin(t, x.tr, iqn, pt.config(t, mgmtInitiator))
		added = append(added, s)
		clearUAs(t, s, 2)
		buf := make([]byte, 4096)
		execute(t, s, &initiator.Command{LUN: 2, CDB: rw10(scsi.OpRead10, 0, 8), DataIn: buf})
		if si := sessionOf(t, pt.tg, s.TSIH()); si.Target != iqn || si.ReadBytes != 4096 {
			t.Errorf("%s: session %+v", x.name, si)
		}
	}
	// One session of the other target stays.
	other := pt.mustLogin(t, iser.TransportTCP, fuzzIQN, pt.config(t, mgmtInitiator))
	if err := pt.tg.RemoveTarget(iqn); err != nil {
		t.Fatal(err)
	}
	for _, s := range added {
		waitDone(t, s, "RemoveTarget")
	}
	for _, si := range pt.tg.Sessions() {
		if si.Target == iqn {
			t.Errorf("session %+v of the removed target", si)
		}
	}
	if got := pt.tg.TargetNames(); len(got) != 1 || pt.tg.SCSITarget(iqn) != nil {
		t.Errorf("TargetNames %v after RemoveTarget", got)
	}
	_, err = pt.login(t, iser.TransportTCP, iqn, pt.config(t, mgmtInitiator))
	var st iser.LoginStatus
	if !errors.As(err, &st) || st != iser.LoginNotFound {
		t.Errorf("login to the removed target: %v, want %v", err, iser.LoginNotFound)
	}
	if err := pt.tg.RemoveTarget(iqn); err == nil {
		t.Error("RemoveTarget of a removed target succeeded")
	}
	clearUAs(t, other, 0)
	// Its LUs were unmapped: the disk can be exported again.
	if err := pt.tg.AddTarget(TargetConfig{Name: iqn, LUNs: []LUNConfig{{LUN: 0, Disk: disk}}}); err != nil {
		t.Fatal(err)
	}
	s := pt.mustLogin(t, iser.TransportTCP, iqn, pt.config(t, mgmtInitiator))
	clearUAs(t, s, 0)
}

// TestRemoveTargetSessionsEnd: RemoveTarget ends the initiators' sessions.
func TestRemoveTargetSessionsEnd(t *testing.T) {
	t.Parallel()
	pt := startPortal(t, nil)
	var ss []*initiator.Session
	for _, x := range mgmtTransports {
		s := pt.mustLogin(t, x.tr, fuzzIQN, pt.config(t, mgmtInitiator))
		clearUAs(t, s, 0)
		ss = append(ss, s)
	}
	if err := pt.tg.RemoveTarget(fuzzIQN); err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		waitDone(t, s, "RemoveTarget")
	}
	if n := len(pt.tg.Sessions()); n != 0 {
		t.Errorf("%d sessions after RemoveTarget", n)
	}
}

func TestMapUnmapLUN(t *testing.T) {
	t.Parallel()
	for _, x := range mgmtTransports {
		t.Run(x.name, func(t *testing.T) {
			t.Parallel()
			pt := startPortal(t, nil)
			s := pt.mustLogin(t, x.tr, fuzzIQN, pt.config(t, mgmtInitiator))
			clearUAs(t, s, 0)
			disk, err := backstore.NewMem(1<<20, 512)
			if err != nil {
				t.Fatal(err)
			}
			lu, err := scsi.NewLU(disk, scsi.LUConfig{MaxTransferBlocks: 128})
			if err != nil {
				t.Fatal(err)
			}
			if err := pt.tg.MapLUN(fuzzIQN, 5, lu); err != nil {
				t.Fatal(err)
			}
			if asc := unitAttention(t, s, 0); asc != scsi.ASCReportedLUNsDataChanged {
				t.Errorf("first command after MapLUN: ASC %v, want REPORTED LUNS DATA HAS CHANGED", asc)
			}
			rl := make([]byte, 64)
			execute(t, s, &initiator.Command{CDB: []byte{scsi.OpReportLUNs, 0, 0, 0, 0, 0, 0, 0, 0, 64, 0, 0}, DataIn: rl})
			if rl[3] != 16 || rl[9] != 0 || rl[17] != 5 {
				t.Errorf("REPORT LUNS after MapLUN: % x", rl[:24])
			}
			clearUAs(t, s, 5)
			execute(t, s, &initiator.Command{LUN: 5, CDB: rw10(scsi.OpWrite10, 0, 1), DataOut: make([]byte, 512)})
			if err := pt.tg.MapLUN(fuzzIQN, 5, lu); err == nil {
				t.Error("MapLUN of a LUN in use succeeded")
			}
			if err := pt.tg.MapLUN(fuzzIQN+"-none", 6, lu); err == nil {
				t.Error("MapLUN on an unknown target succeeded")
			}
			got, err := pt.tg.UnmapLUN(fuzzIQN, 5)
			if err != nil || got != lu {
				t.Fatalf("UnmapLUN: %v, %v", got, err)
			}
			if asc := unitAttention(t, s, 0); asc != scsi.ASCReportedLUNsDataChanged {
				t.Errorf("first command after UnmapLUN: ASC %v, want REPORTED LUNS DATA HAS CHANGED", asc)
			}
			if _, err := pt.tg.UnmapLUN(fuzzIQN, 5); err == nil {
				t.Error("UnmapLUN of an unmapped LUN succeeded")
			}
			if luns := pt.tg.SCSITarget(fuzzIQN).LUNs(); len(luns) != 1 || luns[0] != 0 {
				t.Errorf("LUNs %v after UnmapLUN", luns)
			}
		})
	}
}

func TestSetAllowedInitiators(t *testing.T) {
	t.Parallel()
	pt := startPortal(t, nil)
	const other = "iqn.2026-11.io.rdisk:other"
	s := pt.mustLogin(t, iser.TransportTCP, fuzzIQN, pt.config(t, mgmtInitiator))
	clearUAs(t, s, 0)
	if err := pt.tg.SetAllowedInitiators(fuzzIQN, []string{other}); err != nil {
		t.Fatal(err)
	}
	// The session logged in stays; a new login of the removed initiator
	// is refused.
	clearUAs(t, s, 0)
	for _, x := range mgmtTransports {
		_, err := pt.login(t, x.tr, fuzzIQN, pt.config(t, mgmtInitiator))
		var st iser.LoginStatus
		if !errors.As(err, &st) || st != iser.LoginForbidden {
			t.Errorf("%s: login of an initiator removed from the ACL: %v, want %v", x.name, err, iser.LoginForbidden)
		}
		pt.mustLogin(t, x.tr, fuzzIQN, pt.config(t, other))
	}
	if err := pt.tg.SetAllowedInitiators(fuzzIQN, []string{""}); err == nil {
		t.Error("SetAllowedInitiators accepted an empty name")
	}
	if err := pt.tg.SetAllowedInitiators(fuzzIQN+"-none", nil); err == nil {
		t.Error("SetAllowedInitiators on an unknown target succeeded")
	}
	if err := pt.tg.SetAllowedInitiators(fuzzIQN, nil); err != nil {
		t.Fatal(err)
	}
	pt.mustLogin(t, iser.TransportTCP, fuzzIQN, pt.config(t, mgmtInitiator))
}

func TestSetCHAP(t *testing.T) {
	t.Parallel()
	pt := startPortal(t, nil)
	chap := &iser.CHAPSecret{User: "user1", Secret: "secret-secret-1"}
	mutual := &iser.CHAPSecret{User: "target1", Secret: "secret-secret-2"}
	if err := pt.tg.SetCHAP(fuzzIQN, nil, mutual); err == nil {
		t.Error("SetCHAP accepted mutual CHAP without CHAP")
	}
	if err := pt.tg.SetCHAP(fuzzIQN, &iser.CHAPSecret{User: "u"}, nil); err == nil {
		t.Error("SetCHAP accepted an empty secret")
	}
	if err := pt.tg.SetCHAP(fuzzIQN, chap, mutual); err != nil {
		t.Fatal(err)
	}
	cfg := pt.config(t, mgmtInitiator)
	_, err := pt.login(t, iser.TransportTCP, fuzzIQN, cfg)
	var st iser.LoginStatus
	if !errors.As(err, &st) || st != iser.LoginAuthFailed {
		t.Errorf("login without CHAP: %v, want %v", err, iser.LoginAuthFailed)
	}
	cfg.CHAP, cfg.MutualCHAP = chap, mutual
	for _, x := range mgmtTransports {
		pt.mustLogin(t, x.tr, fuzzIQN, cfg)
	}
	if err := pt.tg.SetCHAP(fuzzIQN, nil, nil); err != nil {
		t.Fatal(err)
	}
	pt.mustLogin(t, iser.TransportTCP, fuzzIQN, pt.config(t, mgmtInitiator))
}

// TestManageWithIOInFlight runs the management calls while commands are in
// flight (for the race detector).
func TestManageWithIOInFlight(t *testing.T) {
	t.Parallel()
	pt := startPortal(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ss []*initiator.Session
	for _, x := range mgmtTransports {
		s := pt.mustLogin(t, x.tr, fuzzIQN, pt.config(t, mgmtInitiator))
		clearUAs(t, s, 0)
		ss = append(ss, s)
	}
	done := make(chan struct{})
	for _, s := range ss {
		go func() {
			defer func() { done <- struct{}{} }()
			buf := make([]byte, 4096)
			for i := 0; ctx.Err() == nil; i++ {
				cmd := &initiator.Command{CDB: rw10(scsi.OpRead10, uint32(i%64)*8, 8), DataIn: buf}
				if i%2 == 1 {
					cmd = &initiator.Command{CDB: rw10(scsi.OpWrite10, uint32(i%64)*8, 8), DataOut: buf}
				}
				if err := s.Execute(ctx, cmd); err != nil {
					return
				}
			}
		}()
	}
	disk, _ := backstore.NewMem(1<<20, 512)
	for i := range 20 {
		lu, err := scsi.NewLU(disk, scsi.LUConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if err := pt.tg.MapLUN(fuzzIQN, 7, lu); err != nil {
			t.Fatal(err)
		}
		pt.tg.Sessions()
		acls := []ACL{{Initiator: mgmtInitiator, MappedLUNs: []MappedLUN{{MappedLUN: 0, LUN: 0}, {MappedLUN: 1, LUN: 7, ReadOnly: i%2 == 0}}}}
		if i%3 == 2 {
			acls = nil
		}
		if err := pt.tg.SetACLs(fuzzIQN, acls); err != nil {
			t.Fatal(err)
		}
		pt.tg.SetAllowedInitiators(fuzzIQN, []string{mgmtInitiator, fmt.Sprint("iqn.2026-11.io.rdisk:", i)})
		pt.tg.SetCHAP(fuzzIQN, nil, nil)
		name := fmt.Sprint(fuzzIQN, "-", i)
		if err := pt.tg.AddTarget(TargetConfig{Name: name}); err != nil {
			t.Fatal(err)
		}
		if _, err := pt.tg.UnmapLUN(fuzzIQN, 7); err != nil {
			t.Fatal(err)
		}
		if err := pt.tg.RemoveTarget(name); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	for _, si := range pt.tg.Sessions() {
		if si.Commands == 0 {
			t.Errorf("session %+v counted no commands", si)
		}
	}
	cancel()
	for range ss {
		<-done
	}
}
