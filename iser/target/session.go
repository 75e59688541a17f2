package target

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rdisk/rdisk/iser"
	"github.com/rdisk/rdisk/scsi"
)

// session is one iSCSI session: an I_T nexus with one connection
// (MaxConnections is 1), or a discovery session without a nexus.
type session struct {
	t         *Target
	node      *node // nil in a discovery session
	tsih      uint16
	isid      iser.ISID
	initiator string
	scsi      *scsi.Session
	conn      *conn
	since     time.Time
	// remote and local are the connection's addresses.
	remote, local string

	// SCSI commands completed and data moved: added to by the goroutine
	// that completes a command (a worker or the receive loop), read by
	// Target.Sessions.
	commands, readBytes, writeBytes atomic.Uint64
}

// completed counts a command whose response is about to be sent: the
// data-in it sends and the data-out it received.
func (s *session) completed(tk *task) {
	s.commands.Add(1)
	switch tk.cmd.Dir {
	case scsi.DirIn:
		if n := min(tk.cmd.DataInLen, len(tk.buf)); n > 0 {
			s.readBytes.Add(uint64(n))
		}
	case scsi.DirOut:
		if n := min(tk.got, tk.expLen); n > 0 {
			s.writeBytes.Add(uint64(n))
		}
	}
}

// runsInline reports whether commands on the session's LUN lun run on the
// receive loop (the target LUN it reaches, through the session's view).
func (s *session) runsInline(lun uint64) bool {
	l, ok := s.scsi.TargetLUN(lun)
	return ok && s.node.runsInline(l)
}

// initiatorPort is the SCSI initiator port name of an iSCSI session
// (RFC 7143 section 4.4.2): name, ",i,0x" and the ISID in hex.
func initiatorPort(name string, isid iser.ISID) string {
	return fmt.Sprintf("%s,i,0x%x", name, isid[:])
}

// openSession turns a finished login into a session: it reinstates (drops)
// an older session of the same initiator port and opens the I_T nexus.
func (t *Target) openSession(ls iser.Session, id iser.LoginIdentity, c *conn) (*session, error) {
	s := &session{t: t, tsih: ls.TSIH, isid: ls.ISID, initiator: id.InitiatorName, conn: c, since: time.Now()}
	if a := c.x.remoteAddr(); a != nil {
		s.remote = a.String()
	}
	if a := c.x.localAddr(); a != nil {
		s.local = a.String()
	}
	if ls.Params.SessionType == iser.SessionDiscovery {
		t.mu.Lock()
		t.sessions[s.tsih] = s
		t.mu.Unlock()
		return s, nil
	}
	port := initiatorPort(id.InitiatorName, ls.ISID)
	cfg := scsi.SessionConfig{
		InitiatorPort: port,
		ProtocolID:    scsi.ProtocolISCSI,
		TargetPort:    fmt.Sprintf("%s,t,0x%x", ls.Params.TargetName, t.cfg.PortalGroupTag),
		// LIO's lun_rtpi: one relative target port per portal group.
		RelativeTargetPort: t.cfg.RelativeTargetPort,
	}
	for {
		// Session reinstatement (RFC 7143 section 6.3.5): a login with
		// TSIH 0 and the ISID of a live session replaces it. Logins look
		// for the old session and create the nexus under openMu, so two
		// logins with one ISID cannot both miss each other: the second
		// finds the first and waits for it to end.
		t.openMu.Lock()
		// The node is looked up under openMu: RemoveTarget takes it
		// out and collects its sessions under openMu too, so a
		// session either is collected or finds the node gone.
		s.node = t.node(ls.Params.TargetName)
		if s.node == nil {
			t.openMu.Unlock()
			return nil, fmt.Errorf("target %s vanished", ls.Params.TargetName)
		}
		// The view is taken under openMu too: SetACLs and UnmapLUN
		// swap the views of the sessions under it.
		cfg.View = s.node.access.Load().viewFor(id.InitiatorName)
		t.mu.Lock()
		var old *session
		for _, o := range t.sessions {
			if o != nil && o.node == s.node && o.isid == s.isid && o.initiator == s.initiator {
				old = o
				break
			}
		}
		t.mu.Unlock()
		if old == nil {
			ss, err := s.node.scsi.NewSession(cfg)
			if err != nil {
				t.openMu.Unlock()
				return nil, err
			}
			s.scsi = ss
			t.mu.Lock()
			t.sessions[s.tsih] = s
			t.mu.Unlock()
			t.openMu.Unlock()
			return s, nil
		}
		t.openMu.Unlock()
		old.conn.log.Info("iscsi: reinstating session", "new_tsih", s.tsih)
		old.conn.setEnd(endReinstated)
		old.conn.drop("session reinstatement")
		select {
		case <-old.conn.done:
		case <-time.After(10 * time.Second):
			return nil, fmt.Errorf("session %d did not end for reinstatement", old.tsih)
		}
	}
}

// close forgets the session (its nexus is closed by the connection) and
// frees its TSIH.
func (s *session) close() {
	s.t.mu.Lock()
	if s.t.sessions[s.tsih] == s {
		delete(s.t.sessions, s.tsih)
	}
	s.t.mu.Unlock()
}

// announceDrop tells the initiator the target is going away (Close).
func (s *session) announceDrop() {
	if c := s.conn; c != nil {
		c.setEnd(endShutdown)
		c.sendAsync(iser.AsyncDroppingAllConnections, 0)
	}
}
