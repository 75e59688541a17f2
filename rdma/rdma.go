package rdma

import (
	"context"
	"fmt"
	"net"
)

// Access is a set of memory access rights granted when memory is registered
// or fast-registered. Local read is always allowed.
type Access uint32

// Access rights, as in verbs (IB_ACCESS_*).
const (
	// AccessLocalWrite lets the local adapter write the memory: needed for
	// receive buffers and RDMA Read sinks.
	AccessLocalWrite Access = 1 << iota
	// AccessRemoteWrite lets the peer RDMA-Write into the memory (and, on
	// iWARP, place RDMA Read Responses into it).
	AccessRemoteWrite
	// AccessRemoteRead lets the peer RDMA-Read the memory.
	AccessRemoteRead
)

// String returns the rights as "lw|rw|rr".
func (a Access) String() string {
	s := ""
	add := func(f Access, n string) {
		if a&f != 0 {
			if s != "" {
				s += "|"
			}
			s += n
		}
	}
	add(AccessLocalWrite, "local-write")
	add(AccessRemoteWrite, "remote-write")
	add(AccessRemoteRead, "remote-read")
	if s == "" {
		return "local-read"
	}
	return s
}

// Provider is one RDMA device: the pure-Go iWARP provider, or an adapter
// reached through libibverbs. A Provider is safe for concurrent use.
type Provider interface {
	// Name identifies the provider and device ("iwarp", "verbs:mlx5_0").
	Name() string
	// AllocPD allocates a protection domain.
	AllocPD() (PD, error)
	// CreateCQ creates a completion queue holding up to size completions.
	CreateCQ(size int) (CQ, error)
	// Listen starts a connection-manager listener on a host:port address.
	Listen(ctx context.Context, addr string) (Listener, error)
	// Close releases the device. Open QPs, CQs and MRs must be closed first.
	Close() error
}

// PD is a protection domain: memory regions and QPs of one PD can only be
// used together. A PD is safe for concurrent use.
type PD interface {
	// RegisterMemory registers buf for the given access. buf stays owned by
	// the caller but must not be released or resized while registered; the
	// returned MR's VA is the absolute address of buf[0], as Linux uses.
	RegisterMemory(buf []byte, access Access) (MR, error)
	// AllocFastRegMR allocates a key that can later be bound, one I/O at a
	// time, to a range of an already registered MR (verbs ib_alloc_mr with
	// IB_MR_TYPE_MEM_REG, then IB_WR_REG_MR). maxLen bounds the range.
	AllocFastRegMR(maxLen int) (FastRegMR, error)
	// CreateQP creates a reliable-connected QP in the init state. Receive
	// buffers can be posted before it is connected.
	CreateQP(cfg QPConfig) (QP, error)
	// Close frees the PD. MRs and QPs must be closed first.
	Close() error
}

// ImplicitPD is implemented by protection domains that can gather from
// memory that was never registered, like verbs' implicit on-demand-paging
// MR (ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND)). A target uses
// it to send straight from memory it does not own, such as the chunks of a
// RAM disk, instead of copying into a registered buffer first.
type ImplicitPD interface {
	// RegisterImplicit returns a local-read-only MR that covers the whole
	// process memory. An SGE naming it carries its memory in SGE.Buf, and
	// may only be the source of a Send or RDMA Write (never a receive
	// buffer, an RDMA Read sink, or a remote key: its RKey is refused by
	// the peer-facing checks). The memory may change while the request is
	// in flight; the provider still sends a consistent FPDU (with MPA CRC,
	// it copies before checksumming). Deregister releases the key.
	RegisterImplicit() (MR, error)
}

// ImplicitWritePD is implemented by protection domains whose implicit MR
// can also be written by the local adapter: the sink of an RDMA Read, like
// verbs' implicit on-demand-paging MR registered with
// IBV_ACCESS_LOCAL_WRITE. A target uses it to RDMA-Read a write's data
// straight into memory it does not own, such as the chunks of a RAM disk,
// instead of reading into a registered buffer and copying. Providers that
// lack it simply do not implement it; callers fall back to a registered
// buffer.
type ImplicitWritePD interface {
	ImplicitPD
	// RegisterImplicitWrite returns an MR that covers the whole process
	// memory with local read and local write access (Access reports
	// AccessLocalWrite) and no remote access. An SGE naming it carries its
	// memory in SGE.Buf, and may be the source of a Send or RDMA Write or
	// the sink of an RDMA Read: the Read Responses are placed into the
	// SGEs' Bufs in order, as into registered memory. It is never a
	// receive buffer, and never a remote key: its RKey, which an RDMA Read
	// Request carries to the peer as the sink STag, is refused by every
	// peer-facing check (RDMA Write, RDMA Read Request, Send with
	// Invalidate), and it cannot be fast-registered. The Bufs must stay
	// reachable and must not be touched by the caller until the Read
	// completes (the adapter writes them while the Read is in flight;
	// after a failed Read their contents are undefined). Deregister
	// releases the key.
	RegisterImplicitWrite() (MR, error)
}

// MR is a registered memory region. Its methods are safe for concurrent use.
type MR interface {
	// LKey is the local key used in scatter lists.
	LKey() uint32
	// RKey is the remote key (STag on iWARP) a peer uses for RDMA.
	RKey() uint32
	// VA is the address of Bytes()[0] on the wire.
	VA() uint64
	// Bytes is the registered memory.
	Bytes() []byte
	// Access is the rights the region was registered with.
	Access() Access
	// Deregister invalidates the keys. Later remote accesses fail.
	Deregister() error
}

// FastRegMR is a key that an initiator binds to part of a registered region
// for the duration of one I/O, then invalidates (locally, or remotely by the
// peer's Send with Invalidate). Each Map changes the key's low byte, so a
// stale key of an earlier I/O is refused.
type FastRegMR interface {
	// Map binds the key to mr.Bytes()[off:off+length] with the given access,
	// returning the new remote key and the VA of the range. The key must be
	// invalid (fresh, or invalidated since the last Map).
	Map(mr MR, off, length int, access Access) (rkey uint32, va uint64, err error)
	// Invalidate invalidates the key locally (verbs IB_WR_LOCAL_INV).
	Invalidate() error
	// RKey is the current key.
	RKey() uint32
	// Valid tells whether the key is currently mapped and not invalidated.
	Valid() bool
	// Close frees the key.
	Close() error
}

// QPConfig sizes a QP. Zero fields take defaults.
type QPConfig struct {
	SendCQ, RecvCQ CQ
	MaxSendWR      int // outstanding send work requests (default 128)
	MaxRecvWR      int // posted receive work requests (default 128)
	MaxSendSGE     int // scatter entries per send WR (default 4)
	MaxRecvSGE     int // scatter entries per receive WR (default 4)
	// Context is returned in work completions' QP field lookups; free for the
	// caller's use.
	Context any
}

// ConnParam carries what the connection manager exchanges (rdma_conn_param).
type ConnParam struct {
	// PrivateData goes in the connect request, the accept reply or the reject.
	// At most MaxPrivateData bytes.
	PrivateData []byte
	// ResponderResources is the number of incoming RDMA Reads this side
	// accepts at once (IRD).
	ResponderResources int
	// InitiatorDepth is the number of RDMA Reads this side issues at once (ORD).
	InitiatorDepth int
}

// MaxPrivateData is the largest private data a ULP may pass to Connect,
// Accept or Reject: iWARP's RDMA_MAX_PRIVATE_DATA (256 bytes, what Linux siw
// accepts) less the 4 bytes of MPA v2 IRD/ORD words. InfiniBand providers
// carry less in some messages and return an error for more.
const MaxPrivateData = 252

// QPState is the state of a QP.
type QPState uint8

// QP states.
const (
	QPInit QPState = iota
	QPConnecting
	QPConnected
	QPError
	QPClosed
)

func (s QPState) String() string {
	switch s {
	case QPInit:
		return "init"
	case QPConnecting:
		return "connecting"
	case QPConnected:
		return "connected"
	case QPError:
		return "error"
	case QPClosed:
		return "closed"
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}

// QP is a reliable-connected queue pair. PostSend and PostRecv are safe for
// concurrent use; neither blocks on the network.
type QP interface {
	// Num is the QP number carried in work completions.
	Num() uint32
	// Context is QPConfig.Context.
	Context() any
	// Connect runs the active side of the connection manager to addr
	// ("host:port"), sending p. It returns the peer's reply private data,
	// or a *RejectError carrying the peer's reject private data.
	Connect(ctx context.Context, addr string, p ConnParam) (reply []byte, err error)
	// PostSend posts a send-queue work request. The WR and its scatter list
	// are copied; the caller may reuse them when PostSend returns. The
	// memory the scatter list names must stay untouched until completion.
	PostSend(wr *SendWR) error
	// PostRecv posts a receive buffer. The WR is copied.
	PostRecv(wr *RecvWR) error
	// State is the current state.
	State() QPState
	// Done is closed when the QP enters the error or closed state.
	Done() <-chan struct{}
	// Err tells why the QP left the connected state (nil while connected).
	Err() error
	// LocalAddr and RemoteAddr are the connection's transport addresses.
	LocalAddr() net.Addr
	RemoteAddr() net.Addr
	// Disconnect ends the connection: outstanding work requests complete
	// with StatusFlushed. The QP can then only be closed.
	Disconnect() error
	// Close disconnects if needed and frees the QP.
	Close() error
}

// StreamProvider is implemented by providers whose connections are byte
// streams (iWARP over TCP), so a protocol may share a TCP port with RDMA
// (iSCSI/TCP and iSER on 3260): its demultiplexer asks the provider whether
// a new stream starts an RDMA connection request and hands such streams
// over, without knowing the provider's wire format.
type StreamProvider interface {
	Provider
	// ConnRequestPrefix is the number of first bytes of a stream that
	// IsConnRequest needs.
	ConnRequestPrefix() int
	// IsConnRequest reports whether first, the first ConnRequestPrefix
	// bytes of a stream, start an RDMA connection request.
	IsConnRequest(first []byte) bool
	// ServeConn runs the responder side of the connection manager on an
	// accepted stream whose first bytes may have been read already (rest).
	// The request is returned like one from a Listener.
	ServeConn(ctx context.Context, c net.Conn, rest []byte) (ConnRequest, error)
}

// Listener waits for connection requests.
type Listener interface {
	// Accept waits for the next connection request.
	Accept(ctx context.Context) (ConnRequest, error)
	// Addr is the listening address (with the real port when 0 was asked).
	Addr() net.Addr
	// Close stops listening; pending requests are rejected.
	Close() error
}

// ConnRequest is an incoming connection request. Exactly one of Accept or
// Reject must be called.
type ConnRequest interface {
	// PrivateData is the initiator's private data.
	PrivateData() []byte
	// ResponderResources and InitiatorDepth are the initiator's IRD and ORD.
	ResponderResources() int
	InitiatorDepth() int
	LocalAddr() net.Addr
	RemoteAddr() net.Addr
	// Accept binds the request to qp (created on this provider, with its
	// receive buffers already posted) and replies with p. The IRD/ORD in p
	// are capped by the peer's (relaxed negotiation, as siw does).
	Accept(ctx context.Context, qp QP, p ConnParam) error
	// Reject refuses the request, carrying privateData to the initiator.
	Reject(privateData []byte) error
}

// RejectError is returned by Connect when the peer rejected the request.
type RejectError struct {
	PrivateData []byte
	Reason      string
}

func (e *RejectError) Error() string {
	if e.Reason != "" {
		return "rdma: connection rejected by peer: " + e.Reason
	}
	return fmt.Sprintf("rdma: connection rejected by peer (%d bytes of private data)", len(e.PrivateData))
}
