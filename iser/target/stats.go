package target

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"

	"github.com/rdisk/rdisk/iser"
)

// Stats counts what a Target has done since New, for a metrics collector:
// Target.Stats reads it at scrape time. Each map holds every key of its
// fixed set (zero when nothing happened), so a collector sees the same
// series from the first scrape.
type Stats struct {
	// Connections are the transport connections accepted, by transport:
	// "tcp" (iSCSI/TCP: a TCP connection whose first bytes were not an
	// RDMA connection request) and "iser" (an RDMA connection accepted).
	// One that closes before its first bytes counts as "tcp" only when
	// Config.Provider is nil (nothing to tell apart), else not at all.
	Connections map[string]uint64
	// Logins are the normal sessions opened; DiscoveryLogins the
	// discovery sessions.
	Logins          uint64
	DiscoveryLogins uint64
	// LoginRejects are the logins that did not open a session, by
	// reason:
	//
	//	not_found      no target of that name (or it was removed)
	//	forbidden      the initiator is not in the target's ACL
	//	auth_failed    CHAP failed (or was required and not offered)
	//	bad_request    the initiator broke the login protocol (missing
	//	               keys, bad negotiation, unsupported version...)
	//	timeout        the login did not end within Config.LoginTimeout
	//	shutting_down  the Target is draining or closing (status 03/01
	//	               "service unavailable", or the login was cut)
	//	aborted        the initiator closed the connection mid-login
	//	target_error   the target failed (out of resources, the session
	//	               could not be opened)
	//
	// Connections that close or time out before their first Login
	// Request are not logins and are not counted here.
	LoginRejects map[string]uint64
	// Logouts are the Logout Requests answered with success.
	Logouts uint64
	// SessionsClosed are the sessions (normal and discovery) that ended,
	// by reason:
	//
	//	logout           the initiator logged out on its own
	//	connection_lost  the connection failed or the initiator closed it
	//	protocol_error   the target dropped it for a protocol error
	//	reinstated       a new login with its ISID replaced it
	//	reset            a TARGET COLD RESET ended it
	//	admin            CloseSession or RemoveTarget ended it
	//	drain            Drain ended it (logged out when asked, or dropped)
	//	shutdown         Close ended it
	//	timeout          the initiator did not answer a NOP-In ping
	//	                 within Config.NopInTimeout, or stopped in the
	//	                 middle of a PDU for Config.PDUTimeout
	//
	// The first cause wins: a session asked to log out by CloseSession
	// that then logs out counts as "admin" (and in Logouts).
	SessionsClosed map[string]uint64
	// Live is the number of sessions now (normal and discovery, as
	// Sessions lists them).
	Live int
}

// Transports, as Stats.Connections and the logs name them.
const (
	transTCP = iota
	transISER
	nTransports
)

var transportNames = [nTransports]string{"tcp", "iser"}

// rejectReason is why a login did not open a session (Stats.LoginRejects).
type rejectReason uint8

const (
	rejNotFound rejectReason = iota
	rejForbidden
	rejAuthFailed
	rejBadRequest
	rejTimeout
	rejShuttingDown
	rejAborted
	rejTargetError
	nRejectReasons
)

var rejectNames = [nRejectReasons]string{
	"not_found", "forbidden", "auth_failed", "bad_request", "timeout", "shutting_down", "aborted", "target_error",
}

// endReason is why a session ended (Stats.SessionsClosed); endUnset until
// a cause is known.
type endReason uint32

const (
	endUnset endReason = iota
	endLogout
	endConnLost
	endProtocol
	endReinstated
	endReset
	endAdmin
	endDrain
	endShutdown
	endTimeout
	nEndReasons
)

var endNames = [nEndReasons]string{
	"", "logout", "connection_lost", "protocol_error", "reinstated", "reset", "admin", "drain", "shutdown", "timeout",
}

// counters are the Target's Stats counters: each is added to once per
// connection, login or session, never per command.
type counters struct {
	conns                     [nTransports]atomic.Uint64
	logins, discovery, logout atomic.Uint64
	rejects                   [nRejectReasons]atomic.Uint64
	closed                    [nEndReasons]atomic.Uint64
}

// Stats returns the counters and the number of live sessions.
func (t *Target) Stats() Stats {
	c := &t.stats
	st := Stats{
		Connections:     make(map[string]uint64, nTransports),
		Logins:          c.logins.Load(),
		DiscoveryLogins: c.discovery.Load(),
		LoginRejects:    make(map[string]uint64, nRejectReasons),
		Logouts:         c.logout.Load(),
		SessionsClosed:  make(map[string]uint64, nEndReasons-1),
	}
	for i, n := range transportNames {
		st.Connections[n] = c.conns[i].Load()
	}
	for i, n := range rejectNames {
		st.LoginRejects[n] = c.rejects[i].Load()
	}
	for i := endUnset + 1; i < nEndReasons; i++ {
		st.SessionsClosed[endNames[i]] = c.closed[i].Load()
	}
	t.mu.Lock()
	for _, s := range t.sessions {
		if s != nil {
			st.Live++
		}
	}
	t.mu.Unlock()
	return st
}

// accepted counts and logs a transport connection accepted.
func (t *Target) accepted(log *slog.Logger, tr int) {
	t.stats.conns[tr].Add(1)
	log.Debug("iscsi: connection accepted")
}

// rejectOf is the reason of a login the engine failed with err.
func rejectOf(err error) rejectReason {
	var st iser.LoginStatus
	if !errors.As(err, &st) {
		return rejBadRequest
	}
	switch st {
	case iser.LoginNotFound, iser.LoginTargetRemoved, iser.LoginTargetMovedTemp, iser.LoginTargetMovedPerm:
		return rejNotFound
	case iser.LoginForbidden:
		return rejForbidden
	case iser.LoginAuthFailed:
		return rejAuthFailed
	case iser.LoginServiceUnavailable:
		return rejShuttingDown
	}
	if st.Class() == iser.LoginInitiatorError.Class() {
		return rejBadRequest
	}
	return rejTargetError
}

// loginCut classifies a login phase that ended without a Login Response
// refusing it: the connection failed, timed out or carried garbage after
// npdus Login Requests. ok is false when it was no login at all (nothing
// received before the connection closed or timed out).
func (t *Target) loginCut(npdus int, err error) (r rejectReason, ok bool) {
	var ne net.Error
	timeout := errors.As(err, &ne) && ne.Timeout()
	gone := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		(ne != nil && !timeout)
	switch {
	case !timeout && !gone:
		return rejBadRequest, true
	case npdus == 0:
		return 0, false
	case t.ctx.Err() != nil || t.draining.Load():
		return rejShuttingDown, true
	case timeout:
		return rejTimeout, true
	}
	return rejAborted, true
}

// loginRefused counts and logs a login that did not open a session. log
// carries the connection's peer and transport.
func (t *Target) loginRefused(log *slog.Logger, id iser.LoginIdentity, r rejectReason, err error) {
	log.Warn("iscsi: login refused", "target", id.TargetName, "initiator", id.InitiatorName, "isid", isidHex(id.ISID),
		"reason", rejectNames[r], "err", err)
	t.stats.rejects[r].Add(1) // after the line: a reader of the count finds it
}

// connLog is the logger of a logged-in connection: log (peer, transport)
// with the session's identity.
func connLog(log *slog.Logger, ls iser.Session, id iser.LoginIdentity) *slog.Logger {
	if ls.Params.SessionType == iser.SessionDiscovery {
		return log.With("initiator", id.InitiatorName, "isid", isidHex(ls.ISID), "tsih", ls.TSIH)
	}
	return log.With("target", ls.Params.TargetName, "initiator", id.InitiatorName, "isid", isidHex(ls.ISID), "tsih", ls.TSIH)
}

// sessionOpened counts and logs a session that opened on c; attrs are the
// transport's own (digests, Send with Invalidate).
func (t *Target) sessionOpened(c *conn, ls iser.Session, attrs ...any) {
	if ls.Params.SessionType == iser.SessionDiscovery {
		t.stats.discovery.Add(1)
	} else {
		t.stats.logins.Add(1)
	}
	args := append([]any{"type", ls.Params.SessionType.String(), "chap", ls.Params.AuthMethod == "CHAP"}, attrs...)
	c.log.Info("iscsi: session opened", args...)
}

// sessionEnded counts and logs the end of c's session (before it leaves
// Target.sessions). err is what ended the connection.
func (t *Target) sessionEnded(c *conn, err error) {
	r := endReason(c.end.Load())
	if r == endUnset {
		r = endConnLost
	}
	if err == nil || errors.Is(err, io.EOF) {
		c.log.Info("iscsi: session ended", "reason", endNames[r])
	} else {
		c.log.Info("iscsi: session ended", "reason", endNames[r], "err", err)
	}
	t.stats.closed[r].Add(1) // after the line: a reader of the count finds it
}

// setEnd records why the connection's session ends, unless a cause was
// recorded already.
func (c *conn) setEnd(r endReason) { c.end.CompareAndSwap(uint32(endUnset), uint32(r)) }

func isidHex(isid iser.ISID) string { return fmt.Sprintf("%012x", isid[:]) }
