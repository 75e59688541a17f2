package rdma

import (
	"context"
	"fmt"
)

// Opcode is a work request or work completion opcode.
type Opcode uint8

// Send-queue opcodes, and the receive opcode used in completions.
const (
	OpSend        Opcode = iota // Send
	OpSendWithInv               // Send with Invalidate of SendWR.InvalidateKey at the peer
	OpRDMAWrite                 // RDMA Write to RemoteAddr/RemoteKey
	OpRDMARead                  // RDMA Read from RemoteAddr/RemoteKey into the scatter list
	OpLocalInv                  // invalidate SendWR.InvalidateKey locally
	OpRecv                      // completion of a receive
)

func (o Opcode) String() string {
	switch o {
	case OpSend:
		return "send"
	case OpSendWithInv:
		return "send-with-invalidate"
	case OpRDMAWrite:
		return "rdma-write"
	case OpRDMARead:
		return "rdma-read"
	case OpLocalInv:
		return "local-invalidate"
	case OpRecv:
		return "recv"
	}
	return fmt.Sprintf("Opcode(%d)", uint8(o))
}

// SGE is one scatter/gather entry: Length bytes at Offset in MR.
type SGE struct {
	MR     MR
	Offset int
	Length int
	// Buf is the memory of an entry whose MR is an implicit MR (see
	// ImplicitPD and ImplicitWritePD); Offset and Length are then ignored.
	// Nil otherwise.
	Buf []byte
}

// WRFlags modify a send work request.
type WRFlags uint8

// Send work request flags.
const (
	// Signaled asks for a completion on success (failures always complete).
	Signaled WRFlags = 1 << iota
	// Solicited sets the solicited-event bit of a Send.
	Solicited
	// Fence waits for earlier RDMA Reads to complete before this WR starts.
	Fence
	// More says that the caller posts another send work request at once:
	// the provider may hold this one and hand the chain to the device with
	// one doorbell (one ibv_post_send) when a WR without More is posted.
	// Every chain must end with a WR without More; until then its WRs may
	// not have started (the software iWARP provider wakes its transmitter
	// for the WR that ends the chain, so a chain goes out in one writev).
	More
)

// SendWR is a send-queue work request.
type SendWR struct {
	ID    uint64 // returned in the completion
	Op    Opcode
	Flags WRFlags
	SGL   []SGE
	// RemoteAddr and RemoteKey address the peer's memory (RDMA Write/Read).
	RemoteAddr uint64
	RemoteKey  uint32
	// InvalidateKey is the key to invalidate (Send with Invalidate: at the
	// peer; local invalidate: here).
	InvalidateKey uint32
}

// RecvWR is a receive-queue work request.
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// Status is a work completion status (ib_wc_status).
type Status uint8

// Work completion statuses.
const (
	StatusSuccess      Status = iota
	StatusLocalLength         // receive buffer too small, or local length error
	StatusLocalQPErr          // local QP operation error
	StatusLocalProt           // local protection error (bad lkey, range or rights)
	StatusFlushed             // flushed because the QP entered the error state
	StatusRemoteAccess        // the peer refused an access to its memory
	StatusRemoteOp            // the peer failed the operation
	StatusRemoteInvReq        // the peer found the request invalid
	StatusGeneral             // anything else
)

func (s Status) String() string {
	switch s {
	case StatusSuccess:
		return "success"
	case StatusLocalLength:
		return "local length error"
	case StatusLocalQPErr:
		return "local QP operation error"
	case StatusLocalProt:
		return "local protection error"
	case StatusFlushed:
		return "work request flushed"
	case StatusRemoteAccess:
		return "remote access error"
	case StatusRemoteOp:
		return "remote operation error"
	case StatusRemoteInvReq:
		return "remote invalid request"
	case StatusGeneral:
		return "general error"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// WCFlags describe a receive completion.
type WCFlags uint8

// Work completion flags.
const (
	// WCWithInv: the Send carried an invalidation; WC.InvalidatedKey was invalidated.
	WCWithInv WCFlags = 1 << iota
	// WCSolicited: the Send had the solicited-event bit.
	WCSolicited
)

// WC is a work completion.
type WC struct {
	ID             uint64
	Status         Status
	Op             Opcode
	Flags          WCFlags
	ByteLen        int
	InvalidatedKey uint32
	QPNum          uint32
	QP             QP
}

// Err returns nil for a successful completion, else an error naming the
// opcode and status.
func (wc *WC) Err() error {
	if wc.Status == StatusSuccess {
		return nil
	}
	return &WCError{Op: wc.Op, Status: wc.Status}
}

// WCError is a failed work completion as an error.
type WCError struct {
	Op     Opcode
	Status Status
}

func (e *WCError) Error() string {
	return fmt.Sprintf("rdma: %s completed with %s", e.Op, e.Status)
}

// CQ is a completion queue. It is safe for concurrent use, though one
// poller per CQ is the usual shape.
type CQ interface {
	// Poll moves up to len(wcs) completions into wcs without blocking and
	// returns how many it moved.
	Poll(wcs []WC) int
	// Wait blocks until at least one completion is available, ctx is done
	// (returning ctx.Err()) or the CQ is closed (returning ErrClosed).
	Wait(ctx context.Context) error
	// Close frees the CQ. QPs using it must be closed first.
	Close() error
}

// Sentinel errors common to providers. They are constants: compare with errors.Is.
const (
	ErrClosed       = errorString("rdma: closed")
	ErrQueueFull    = errorString("rdma: work queue full")
	ErrNotConnected = errorString("rdma: QP not connected")
	ErrQPState      = errorString("rdma: QP is in the error state")
	ErrTooManySGE   = errorString("rdma: too many scatter/gather entries")
	ErrBadSGE       = errorString("rdma: scatter/gather entry outside its memory region")
	ErrCQFull       = errorString("rdma: completion queue overrun")
)

type errorString string

func (e errorString) Error() string { return string(e) }
