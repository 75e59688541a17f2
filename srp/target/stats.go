package target

import (
	"errors"
	"net"

	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/srp"
)

// rejectReason is why a login was refused (Stats.LoginRejectsByReason).
type rejectReason uint8

const (
	rejNotFound rejectReason = iota
	rejForbidden
	rejBadRequest
	rejChannelLimit
	rejNoResources
	rejShuttingDown
	nRejectReasons
)

var rejectNames = [nRejectReasons]string{
	"not_found", "forbidden", "bad_request", "channel_limit", "no_resources", "shutting_down",
}

// endReason is why a logged-in channel ended (Stats.ChannelsClosed);
// endUnset until a cause is known.
type endReason uint32

const (
	endUnset endReason = iota
	endLogout
	endConnLost
	endProtocol
	endReinstated
	endAdmin
	endDrain
	endShutdown
	endInactive
	nEndReasons
)

var endNames = [nEndReasons]string{
	"", "logout", "connection_lost", "protocol_error", "reinstated", "admin", "drain", "shutdown", "inactive",
}

// endForLogout is the end reason of a channel the target logs out with r,
// unless its caller gave one.
func endForLogout(r srp.TLogoutReason) endReason {
	switch r {
	case srp.TLogoutNoReason:
		return endAdmin
	case srp.TLogoutMultiChannel:
		return endReinstated
	}
	return endProtocol
}

// refusal is a login refused after its checks (attach): the SRP_LOGIN_REJ
// reason and the Stats reason.
type refusal struct {
	rej srp.RejectReason
	why rejectReason
	err error
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// reject refuses a login with an SRP_LOGIN_REJ: counted, logged (at warn,
// with the peer, the initiator and target port IDs when the request was
// parsed, the reason and the error) and sent.
func (t *Target) reject(req rdma.ConnRequest, f *srp.LoginReqFields, r srp.RejectReason, why rejectReason, err error) {
	args := []any{"peer", addrString(req.RemoteAddr())}
	var tag uint64
	if f != nil {
		tag = f.Tag
		args = append(args, "port", f.TargetPortID.String(), "initiator", f.InitiatorPortID.String())
	}
	args = append(args, "reason", rejectNames[why], "rej", r.String(), "err", err)
	t.log.Warn("srp: login refused", args...)
	t.stats.rejects.Add(1) // after the line: a reader of the count finds it
	t.stats.rejectsBy[why].Add(1)
	b := make([]byte, srp.LoginRejSize)
	srp.LoginRej(b).Encode(&srp.LoginRejFields{Reason: r, Tag: tag, BufFmt: t.cfg.supportedFormats()})
	req.Reject(b)
}

// refuse rejects a login whose attach or channel failed with err.
func (t *Target) refuse(req rdma.ConnRequest, f *srp.LoginReqFields, err error) {
	var rf *refusal
	if errors.As(err, &rf) {
		t.reject(req, f, rf.rej, rf.why, rf.err)
		return
	}
	t.reject(req, f, srp.RejInsufficientResources, rejNoResources, err)
}

// setEnd records why a channel ends, unless a cause was recorded already.
func (ch *channel) setEnd(r endReason) { ch.cause.CompareAndSwap(uint32(endUnset), uint32(r)) }

// countEnd counts and logs the end of a logged-in channel.
func (ch *channel) countEnd() {
	r := endReason(ch.cause.Load())
	if r == endUnset {
		r = endConnLost
	}
	ch.mu.Lock()
	detail := ch.detail
	ch.mu.Unlock()
	ch.log.Info("srp: channel ended", "reason", endNames[r], "err", detail)
	ch.t.stats.closed[r].Add(1) // after the line: a reader of the count finds it
}

// addrString is a's string form, "" for none.
func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
