package target

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"

	"github.com/rdisk/rdisk/nvmeof"
)

// Counters for a metrics collector (Target.Stats) and the log's
// vocabulary: why connections and Fabrics Connects are refused, why
// controllers end. They are read at scrape time; what they cost on the
// I/O path is nothing (a refusal or a connection is counted where it is
// handled, once).

// Stats are the target's counters, read at once with Target.Stats. Every
// counter only grows (from New); the maps hold every reason, zero or not.
type Stats struct {
	// Ports lists the live ports sorted by ID, one entry per transport a
	// port serves (an rdma+tcp port has two: "rdma", then "tcp").
	Ports []PortStats
	// KeepAliveExpired counts the controllers torn down because the host
	// sent nothing for KATO.
	KeepAliveExpired uint64
	// ControllersCreated counts the controllers whose admin queue Connect
	// succeeded (discovery controllers included), ControllersRemoved
	// those of them torn down since, whatever the reason: their
	// difference is the number Target.Controllers lists.
	ControllersCreated, ControllersRemoved uint64
	// AuthFailures counts the DH-HMAC-CHAP exchanges that failed (a
	// wrong response, a protocol error, a Failure2 from the host), one
	// per exchange.
	AuthFailures uint64
	// ConnectRejected counts the Fabrics Connect commands refused, by
	// reason:
	//
	//	unknown_subsystem   SUBNQN is not exported through the port
	//	                    (never was, unlinked or removed)
	//	host_not_allowed    the subsystem's allowed hosts exclude HOSTNQN
	//	invalid_parameters  a malformed Connect (record format, data,
	//	                    QID, SQSIZE, a static CNTLID), or an I/O
	//	                    queue's naming a controller that does not
	//	                    exist or is another host's, a queue beyond
	//	                    the granted number or already connected
	//	controller_busy     no free controller ID
	//	invalid_state       the controller is not enabled (CC.EN) or is
	//	                    being torn down, or the queue is connected
	//	                    already
	//	internal            the host's DH-HMAC-CHAP settings are unusable
	//	shutting_down       the target is draining (Target.Drain) or
	//	                    closing
	ConnectRejected map[string]uint64
}

// PortStats are the counters of one transport of a port.
type PortStats struct {
	ID        uint16
	Transport string // "rdma" or "tcp"
	// Accepted counts the transport connections accepted: RDMA CM
	// connections, NVMe/TCP connections past ICReq/ICResp. Each is one
	// queue, once its Fabrics Connect succeeds.
	Accepted uint64
	// Rejected counts the connections that ended before they could carry
	// a queue, by reason:
	//
	//	cm_private_data  (rdma) the CM request's private data is invalid
	//	                 or outside the port's limits (queue size, QID);
	//	                 rejected with its NVMe/RDMA CM status
	//	no_resources     (rdma) the queue's resources could not be
	//	                 allocated; rejected with No Resources
	//	accept_failed    (rdma) accepting failed (the CM or MPA exchange)
	//	icreq            (tcp) the first PDU is not a valid ICReq:
	//	                 terminated with a C2HTermReq
	//	no_icreq         (tcp) the connection closed, failed or timed out
	//	                 (Config.ConnectTimeout) before its ICReq (probes,
	//	                 health checks)
	//	shutting_down    the port or the target is closing or draining
	//	connect_timeout  an accepted connection (counted in Accepted too)
	//	                 whose queue did not complete a Fabrics Connect
	//	                 within Config.ConnectTimeout: closed
	Rejected map[string]uint64
	// Live is the number of its accepted connections (queues) now.
	Live int
}

// connectReason is why a Fabrics Connect was refused.
type connectReason uint8

const (
	connUnknownSubsystem connectReason = iota
	connHostNotAllowed
	connInvalidParameters
	connControllerBusy
	connInvalidState
	connInternal
	connShuttingDown
	numConnectReasons
)

var connectReasonNames = [numConnectReasons]string{
	"unknown_subsystem", "host_not_allowed", "invalid_parameters", "controller_busy", "invalid_state", "internal", "shutting_down",
}

// portReason is why a port refused a connection.
type portReason uint8

const (
	portCMPrivateData portReason = iota
	portNoResources
	portAcceptFailed
	portICReq
	portNoICReq
	portShuttingDown
	portConnectTimeout
	numPortReasons
)

var portReasonNames = [numPortReasons]string{"cm_private_data", "no_resources", "accept_failed", "icreq", "no_icreq", "shutting_down", "connect_timeout"}

// The reasons a controller is torn down, the "reason" of its "controller
// removed" log line (the cause's detail, if any, is its "err").
const (
	// The host sent nothing for KATO.
	reasonKeepAlive = "keep-alive timeout"
	// The admin queue ended after the host set CC.SHN (nvme disconnect).
	reasonHostShutdown = "host shutdown"
	// The admin queue's connection was closed by the host, or lost,
	// without a shutdown.
	reasonHostDisconnect = "host disconnect"
	// The target ended the admin queue on a protocol or transport error
	// (an NVMe/TCP C2HTermReq, a response that could not be sent, a
	// broken capsule), or the host terminated it (H2CTermReq).
	reasonTransportError = "transport error"
	// Target.DeleteController.
	reasonAdminDelete = "admin delete"
	// Target.RemovePort: its port was removed.
	reasonPortRemoved = "port removed"
	// Port.UnlinkSubsystem: its subsystem is no longer exported through
	// its port.
	reasonUnlinked = "subsystem unlinked"
	// Target.RemoveSubsystem.
	reasonSubsystemRemoved = "subsystem removed"
	// Target.Drain.
	reasonDrain = "target drain"
	// Target.Close.
	reasonClose = "target close"
	// A queue's end only (it has no controller): no successful Fabrics
	// Connect within Config.ConnectTimeout.
	reasonConnectTimeout = "connect timeout"
)

// targetCounters are the target-wide counters of Stats.
type targetCounters struct {
	kaExpired, created, removed, authFailures atomic.Uint64
	connectRejected                           [numConnectReasons]atomic.Uint64
}

// portCounters are the counters of one transport of a port.
type portCounters struct {
	accepted atomic.Uint64
	live     atomic.Int64
	rejected [numPortReasons]atomic.Uint64
}

// Stats returns the target's counters.
func (t *Target) Stats() Stats {
	st := Stats{
		KeepAliveExpired:   t.stats.kaExpired.Load(),
		ControllersCreated: t.stats.created.Load(),
		ControllersRemoved: t.stats.removed.Load(),
		AuthFailures:       t.stats.authFailures.Load(),
		ConnectRejected:    make(map[string]uint64, numConnectReasons),
	}
	for i, name := range connectReasonNames {
		st.ConnectRejected[name] = t.stats.connectRejected[i].Load()
	}
	for _, p := range t.Ports() {
		for _, tr := range p.ln.trTypes() {
			pc := p.counters(tr)
			ps := PortStats{ID: p.cfg.ID, Transport: trName(tr), Accepted: pc.accepted.Load(), Live: int(pc.live.Load()),
				Rejected: make(map[string]uint64, numPortReasons)}
			for i, name := range portReasonNames {
				ps.Rejected[name] = pc.rejected[i].Load()
			}
			st.Ports = append(st.Ports, ps)
		}
	}
	return st
}

// counters returns the port's counters for transport trType.
func (p *Port) counters(trType uint8) *portCounters {
	if trType == nvmeof.TrTypeTCP {
		return &p.tcpStats
	}
	return &p.rdmaStats
}

// trName names a transport type as Stats and the log do.
func trName(trType uint8) string {
	if trType == nvmeof.TrTypeTCP {
		return string(TransportTCP)
	}
	return string(TransportRDMA)
}

// peerClosed tells whether a connection's end err is the peer closing or
// resetting it (or the target closing it), not a protocol error.
func peerClosed(err error) bool {
	return err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// addrString is a's string, or "" for nil.
func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
