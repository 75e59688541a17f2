package iwarp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
)

// Stats is a snapshot of a provider's counters, for a metrics exporter.
// Every field but ConnectionsActive only grows (a counter); the maps hold
// every label of their fixed set, zero or not, so that an exporter sees
// the whole set from the start.
type Stats struct {
	// Connections counts the QPs that became connected (either side);
	// ConnectionsActive is how many of them are connected now (their
	// receiver and transmitter still run).
	Connections, ConnectionsActive uint64
	// ConnectRejects counts connection setups that failed, on either
	// side, by reason:
	//
	//	mpa_reject    the peer answered our MPA request with a reject
	//	local_reject  we rejected a request: the ULP's ConnRequest.Reject,
	//	              an Accept refused for its arguments, or a listener
	//	              that closed with the request pending
	//	mpa_invalid   a malformed MPA request or reply (key, revision,
	//	              private data length), or one asking for what rdisk
	//	              does not do (markers, more reads than MaxIRD)
	//	timeout       the TCP connect or the MPA exchange timed out
	//	              (Config.HandshakeTimeout or the caller's deadline)
	//	refused       the TCP connect was refused (nothing listens there)
	//	network       any other transport failure before the connection
	//	              was established: unreachable, reset, closed
	//	              mid-handshake
	//	canceled      the setup was abandoned locally: the caller's
	//	              context was canceled or the QP closed meanwhile
	//
	// A TCP connection to a listener that closes before sending a byte (a
	// port probe) is not counted.
	ConnectRejects map[string]uint64
	// FPDUsSent and FPDUsReceived count FPDUs of every kind (Send, RDMA
	// Write, Read Request, Read Response, Terminate).
	FPDUsSent, FPDUsReceived uint64
	// BytesSent and BytesReceived count data payload: the bytes of Send,
	// RDMA Write and Read Response messages (no headers, trailers, Read
	// Request or Terminate bodies), so one side's BytesSent is the other's
	// BytesReceived.
	BytesSent, BytesReceived uint64
	// BytesPlaced counts the tagged payload (RDMA Write and Read Response)
	// placed into registered memory.
	BytesPlaced uint64
	// TerminatesSent and TerminatesReceived count Terminate messages by
	// the layer, error type and error code they carry (RFC 5040 §7.2,
	// RFC 5041 §7.2, RFC 5044 §8 and RFC 6581 §6): RDMAP errors by type,
	// DDP errors by type and code, MPA (LLP) errors by code. The labels:
	//
	//	rdmap_catastrophic, rdmap_remote_protection (invalid STag, bounds,
	//	  rights, STag not associated, TO wrap), rdmap_remote_operation
	//	  (version, opcode, stream catastrophic, cannot invalidate, ...);
	//	ddp_catastrophic;
	//	ddp_tagged_invalid_stag, ddp_tagged_base_bounds,
	//	  ddp_tagged_stag_not_associated, ddp_tagged_to_wrap,
	//	  ddp_tagged_version;
	//	ddp_untagged_invalid_qn, ddp_untagged_no_buffer,
	//	  ddp_untagged_msn_range, ddp_untagged_invalid_mo,
	//	  ddp_untagged_message_too_long, ddp_untagged_version;
	//	mpa_stream_lost, mpa_crc, mpa_fpdu_start, mpa_invalid_request,
	//	  mpa_local_catastrophic, mpa_insufficient_ird,
	//	  mpa_no_matching_rtr;
	//	other: any combination outside the RFCs.
	//
	// A Terminate is counted as sent once written to the socket.
	TerminatesSent, TerminatesReceived map[string]uint64
	// CRCErrors counts FPDUs received with a bad MPA CRC (each also sends
	// a Terminate "mpa_crc").
	CRCErrors uint64
	// Retransmits is the sum of the kernel's tcpi_total_retrans (TCP_INFO)
	// over the provider's TCP connections: read when Stats is called for
	// the live ones, just before the close for the others. It is 0 where
	// TCP_INFO is not available (not Linux, or a connection that is not a
	// TCP socket).
	Retransmits uint64
}

// rejectNames are the labels of Stats.ConnectRejects, by index.
var rejectNames = [numRejectReasons]string{
	rejectMPAReject: "mpa_reject",
	rejectLocal:     "local_reject",
	rejectInvalid:   "mpa_invalid",
	rejectTimeout:   "timeout",
	rejectRefused:   "refused",
	rejectNetwork:   "network",
	rejectCanceled:  "canceled",
}

const (
	rejectMPAReject = iota
	rejectLocal
	rejectInvalid
	rejectTimeout
	rejectRefused
	rejectNetwork
	rejectCanceled
	numRejectReasons
)

// termNames are the labels of Stats.TerminatesSent and TerminatesReceived,
// by index.
var termNames = [numTermReasons]string{
	termRDMAPCatastrophic:    "rdmap_catastrophic",
	termRDMAPRemoteProt:      "rdmap_remote_protection",
	termRDMAPRemoteOp:        "rdmap_remote_operation",
	termDDPCatastrophic:      "ddp_catastrophic",
	termDDPTInvalidSTag:      "ddp_tagged_invalid_stag",
	termDDPTBaseBounds:       "ddp_tagged_base_bounds",
	termDDPTSTagNotAssoc:     "ddp_tagged_stag_not_associated",
	termDDPTTOWrap:           "ddp_tagged_to_wrap",
	termDDPTVersion:          "ddp_tagged_version",
	termDDPUTInvalidQN:       "ddp_untagged_invalid_qn",
	termDDPUTNoBuf:           "ddp_untagged_no_buffer",
	termDDPUTMSNRange:        "ddp_untagged_msn_range",
	termDDPUTInvalidMO:       "ddp_untagged_invalid_mo",
	termDDPUTMsgTooLong:      "ddp_untagged_message_too_long",
	termDDPUTVersion:         "ddp_untagged_version",
	termMPAStreamLost:        "mpa_stream_lost",
	termMPACRC:               "mpa_crc",
	termMPAFPDUStart:         "mpa_fpdu_start",
	termMPAInvalidReqResp:    "mpa_invalid_request",
	termMPALocalCatastrophic: "mpa_local_catastrophic",
	termMPAInsufficientIRD:   "mpa_insufficient_ird",
	termMPANoMatchingRTR:     "mpa_no_matching_rtr",
	termOther:                "other",
}

const (
	termRDMAPCatastrophic = iota
	termRDMAPRemoteProt
	termRDMAPRemoteOp
	termDDPCatastrophic
	termDDPTInvalidSTag
	termDDPTBaseBounds
	termDDPTSTagNotAssoc
	termDDPTTOWrap
	termDDPTVersion
	termDDPUTInvalidQN
	termDDPUTNoBuf
	termDDPUTMSNRange
	termDDPUTInvalidMO
	termDDPUTMsgTooLong
	termDDPUTVersion
	termMPAStreamLost
	termMPACRC
	termMPAFPDUStart
	termMPAInvalidReqResp
	termMPALocalCatastrophic
	termMPAInsufficientIRD
	termMPANoMatchingRTR
	termOther
	numTermReasons
)

// LLP error codes of RFC 5044 §8 and RFC 6581 §6 that rdisk never sends.
const (
	llpECodeStreamLost        = 0x01
	llpECodeLocalCatastrophic = 0x05
	llpECodeNoMatchingRTR     = 0x07
)

// termReason returns the termNames index of a Terminate.
func termReason(layer, etype, ecode uint8) int {
	switch layer {
	case termLayerRDMAP:
		switch etype {
		case rdmapETypeCatastrophic:
			return termRDMAPCatastrophic
		case rdmapETypeRemoteProt:
			return termRDMAPRemoteProt
		case rdmapETypeRemoteOp:
			return termRDMAPRemoteOp
		}
	case termLayerDDP:
		switch etype {
		case ddpETypeCatastrophic:
			return termDDPCatastrophic
		case ddpETypeTagged:
			if ecode <= ddpECodeTVersion {
				return termDDPTInvalidSTag + int(ecode)
			}
		case ddpETypeUntagged:
			if ecode >= ddpECodeUTInvalidQN && ecode <= ddpECodeUTVersion {
				return termDDPUTInvalidQN + int(ecode) - ddpECodeUTInvalidQN
			}
		}
	case termLayerLLP:
		if etype == llpETypeMPA && ecode >= llpECodeStreamLost && ecode <= llpECodeNoMatchingRTR {
			return termMPAStreamLost + int(ecode) - llpECodeStreamLost
		}
	}
	return termOther
}

// provStats holds a provider's counters. Per-FPDU counts live in each QP
// (txState.c, rxState.c) and are summed here when Stats is called; what a
// QP counted is added to closed when it stops. Rare events (rejects,
// Terminates, CRC errors) are counted here directly.
type provStats struct {
	mu     sync.Mutex
	live   map[*qp]struct{} // started QPs whose loops still run
	closed struct {
		fpdusSent, fpdusRecv, bytesSent, bytesRecv, bytesPlaced, retrans uint64
	}
	connections atomic.Uint64
	rejects     [numRejectReasons]atomic.Uint64
	termSent    [numTermReasons]atomic.Uint64
	termRecv    [numTermReasons]atomic.Uint64
	crcErrors   atomic.Uint64
}

// txCounters are written by the transmitter only, once per batch written.
type txCounters struct {
	fpdus, bytes atomic.Uint64
}

// rxCounters are written by the receiver only. It counts in the plain
// pending fields of rxState and adds them here before each read from the
// socket, so a busy receiver costs no atomic per FPDU and an idle one has
// published everything.
type rxCounters struct {
	fpdus, bytes, placed atomic.Uint64
}

// connStats is a QP's TCP connection as Stats sees it.
type connStats struct {
	rc syscall.RawConn // nil when the connection is not a socket
	// final holds tcpi_total_retrans read just before the connection was
	// closed; closing is set after it.
	final   atomic.Uint64
	closing atomic.Bool
}

// retrans returns the connection's retransmissions so far.
func (c *connStats) retrans() uint64 {
	if c.rc == nil {
		return 0
	}
	if !c.closing.Load() {
		if n, ok := tcpRetrans(c.rc); ok {
			return n
		}
		// Closed meanwhile: final was stored before the close.
	}
	return c.final.Load()
}

// beforeClose records the final retransmission count; every close of a
// started QP's connection goes through it.
func (c *connStats) beforeClose() {
	if c.rc == nil {
		return
	}
	if n, ok := tcpRetrans(c.rc); ok {
		for {
			old := c.final.Load()
			if n <= old || c.final.CompareAndSwap(old, n) {
				break
			}
		}
	}
	c.closing.Store(true)
}

// Stats returns a snapshot of the provider's counters. It is safe for
// concurrent use; it reads TCP_INFO of every live connection.
func (p *Provider) Stats() Stats {
	st := &p.st
	var s Stats
	st.mu.Lock()
	s.FPDUsSent = st.closed.fpdusSent
	s.FPDUsReceived = st.closed.fpdusRecv
	s.BytesSent = st.closed.bytesSent
	s.BytesReceived = st.closed.bytesRecv
	s.BytesPlaced = st.closed.bytesPlaced
	s.Retransmits = st.closed.retrans
	for q := range st.live {
		s.FPDUsSent += q.tx.c.fpdus.Load()
		s.BytesSent += q.tx.c.bytes.Load()
		s.FPDUsReceived += q.rx.c.fpdus.Load()
		s.BytesReceived += q.rx.c.bytes.Load()
		s.BytesPlaced += q.rx.c.placed.Load()
		s.Retransmits += q.cs.retrans()
	}
	s.ConnectionsActive = uint64(len(st.live))
	st.mu.Unlock()
	s.Connections = st.connections.Load()
	s.CRCErrors = st.crcErrors.Load()
	s.ConnectRejects = make(map[string]uint64, numRejectReasons)
	for i, name := range rejectNames {
		s.ConnectRejects[name] = st.rejects[i].Load()
	}
	s.TerminatesSent = make(map[string]uint64, numTermReasons)
	s.TerminatesReceived = make(map[string]uint64, numTermReasons)
	for i, name := range termNames {
		s.TerminatesSent[name] = st.termSent[i].Load()
		s.TerminatesReceived[name] = st.termRecv[i].Load()
	}
	return s
}

// connected registers a QP whose loops start.
func (st *provStats) connected(q *qp) {
	st.connections.Add(1)
	st.mu.Lock()
	if st.live == nil {
		st.live = make(map[*qp]struct{})
	}
	st.live[q] = struct{}{}
	st.mu.Unlock()
}

// stopped moves what a QP counted to the running totals; both of its loops
// have exited.
func (st *provStats) stopped(q *qp) {
	st.mu.Lock()
	delete(st.live, q)
	c := &st.closed
	c.fpdusSent += q.tx.c.fpdus.Load()
	c.bytesSent += q.tx.c.bytes.Load()
	c.fpdusRecv += q.rx.c.fpdus.Load()
	c.bytesRecv += q.rx.c.bytes.Load()
	c.bytesPlaced += q.rx.c.placed.Load()
	c.retrans += q.cs.retrans()
	st.mu.Unlock()
}

func (st *provStats) reject(reason int) { st.rejects[reason].Add(1) }

// setupFailure classifies why a connection setup failed with err; ctx is
// the context that bounded it.
func setupFailure(ctx context.Context, err error) int {
	var ne net.Error
	switch {
	case errors.Is(err, errMPAKey), errors.Is(err, errMPARev), errors.Is(err, errMPAPrivateData), errors.Is(err, errShortMPA):
		return rejectInvalid
	case errors.Is(ctx.Err(), context.DeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return rejectTimeout
	case ctx.Err() != nil, errors.Is(err, context.Canceled):
		return rejectCanceled
	case errors.Is(err, syscall.ECONNREFUSED):
		return rejectRefused
	case errors.As(err, &ne) && ne.Timeout():
		return rejectTimeout
	}
	return rejectNetwork
}

// isProbe tells whether a connection closed before sending a byte.
func isProbe(err error, rest []byte) bool { return len(rest) == 0 && err == io.EOF }

// logTerminate logs a Terminate sent or received on q.
func (p *Provider) logTerminate(msg string, q *qp, te *termError) {
	p.log.Warn(msg, "qp", q.num, "peer", q.conn.RemoteAddr(), "layer", layerName(te.Layer),
		"etype", te.EType, "ecode", fmt.Sprintf("0x%02x", te.ECode),
		"reason", termNames[termReason(te.Layer, te.EType, te.ECode)], "detail", te.Msg)
}
