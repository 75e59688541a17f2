package target

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/rdisk/rdisk/iser"
)

// drainPoll is how often Drain looks at the sessions.
const drainPoll = 5 * time.Millisecond

// Drain takes the Target out of service gracefully. It closes the
// listeners (Serve returns nil) and refuses every new login with status
// 03/01 "service unavailable" (Stats.LoginRejects "shutting_down"); each
// session's command window stops opening (MaxCmdSN stays), so the
// initiator sends no new commands, and once the session's commands in
// flight have completed (their responses sent) the initiator is asked to
// log out (Async Message "target requests logout", Parameter3 the time
// left before ctx's deadline). Drain returns nil once every session has
// ended and every connection (also those still in their login phase) has
// closed. If ctx ends first, the remaining sessions and connections are
// dropped (commands still running are aborted; Drain does not wait for
// them) and the error, which wraps ctx.Err(), names what was left:
// sessions, commands in flight, logins in progress. Sessions Drain ended
// count as "drain" in Stats.SessionsClosed.
//
// The Target stays draining: later logins are refused, Serve returns at
// once; Close still has to be called (it may be, after Drain or during
// it).
func (t *Target) Drain(ctx context.Context) error {
	t.mu.Lock()
	t.draining.Store(true)
	lns := make([]io.Closer, 0, len(t.lns))
	for ln := range t.lns {
		lns = append(lns, ln)
	}
	t.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
	sess, logins, _ := t.drainState()
	t.log.Info("iscsi: draining", "sessions", len(sess), "logins", logins)
	asked := map[*session]bool{}
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for {
		sess, logins, conns := t.drainState()
		if len(sess) == 0 && logins == 0 && conns == 0 {
			t.log.Info("iscsi: drained")
			return nil
		}
		for _, s := range sess {
			if asked[s] {
				continue
			}
			// A session that opened during the drain (its login was
			// past Resolve) is frozen here too.
			s.conn.freeze()
			if s.conn.inflight() > 0 {
				continue
			}
			asked[s] = true
			within := logoutGrace
			if dl, ok := ctx.Deadline(); ok {
				within = time.Until(dl)
			}
			s.conn.setEnd(endDrain)
			s.conn.log.Debug("iscsi: asking the initiator to log out", "reason", "drain")
			s.conn.sendAsync(iser.AsyncRequestLogout, within)
		}
		select {
		case <-ctx.Done():
			return t.drainCut(ctx)
		case <-tick.C:
		}
	}
}

// drainState returns the sessions (by TSIH), the logins in progress (TSIHs
// reserved by connections still in their login phase) and the tracked
// connections.
func (t *Target) drainState() (sess []*session, logins, conns int) {
	t.mu.Lock()
	for _, s := range t.sessions {
		if s == nil {
			logins++
		} else {
			sess = append(sess, s)
		}
	}
	conns = len(t.conns)
	t.mu.Unlock()
	slices.SortFunc(sess, func(a, b *session) int { return cmp.Compare(a.tsih, b.tsih) })
	return sess, logins, conns
}

// drainCut drops what a Drain whose ctx ended leaves and says what that
// was.
func (t *Target) drainCut(ctx context.Context) error {
	sess, logins, conns := t.drainState()
	if len(sess) == 0 && logins == 0 && conns == 0 {
		t.log.Info("iscsi: drained")
		return nil
	}
	cmds := 0
	tsihs := make([]string, len(sess))
	for i, s := range sess {
		cmds += s.conn.inflight()
		tsihs[i] = fmt.Sprint(s.tsih)
		s.conn.setEnd(endDrain)
		s.conn.drop("drain: " + ctx.Err().Error())
	}
	t.mu.Lock()
	cs := make([]io.Closer, 0, len(t.conns))
	for c := range t.conns {
		cs = append(cs, c)
	}
	t.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
	var left []string
	if n := len(sess); n > 0 {
		left = append(left, fmt.Sprintf("%s left (TSIH %s)", count(n, "session"), strings.Join(tsihs, ", ")))
	}
	if cmds > 0 {
		left = append(left, count(cmds, "command")+" in flight")
	}
	if logins > 0 {
		left = append(left, count(logins, "login")+" in progress")
	}
	if len(left) == 0 {
		left = append(left, count(conns, "connection")+" open")
	}
	what := strings.Join(left, ", ")
	t.log.Warn("iscsi: drain cut short", "left", what, "err", ctx.Err())
	return fmt.Errorf("iscsi target: drain: %s: %w", what, ctx.Err())
}

// count is "1 thing" or "n things".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
