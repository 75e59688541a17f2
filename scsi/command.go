package scsi

import (
	"strconv"
	"sync/atomic"

	"github.com/rdisk/rdisk/backstore"
)

// Dir is the data transfer direction a transport declared for a command
// (the iSCSI R/W bits, the SRP data-in/data-out descriptor formats).
type Dir uint8

// Data transfer directions.
const (
	DirNone Dir = iota // no data transfer
	DirIn              // data-in: target to initiator (READ, INQUIRY)
	DirOut             // data-out: initiator to target (WRITE, UNMAP)
)

// String returns "none", "in" or "out".
func (d Dir) String() string {
	switch d {
	case DirNone:
		return "none"
	case DirIn:
		return "in"
	case DirOut:
		return "out"
	}
	return "dir(" + strconv.Itoa(int(d)) + ")"
}

// TaskAttr is a SAM-5 task attribute.
type TaskAttr uint8

// Task attributes.
const (
	AttrSimple      TaskAttr = iota // may run concurrently with other SIMPLE tasks
	AttrOrdered                     // runs after all earlier tasks, before all later ones
	AttrHeadOfQueue                 // runs at once, ahead of queued tasks
	AttrACA                         // ACA task; refused, NormACA is not supported
)

// String returns the SAM name of the attribute.
func (a TaskAttr) String() string {
	switch a {
	case AttrSimple:
		return "SIMPLE"
	case AttrOrdered:
		return "ORDERED"
	case AttrHeadOfQueue:
		return "HEAD OF QUEUE"
	case AttrACA:
		return "ACA"
	}
	return "attr(" + strconv.Itoa(int(a)) + ")"
}

// ResidualKind says how the data transferred differs from the expected
// data transfer length (iSCSI U/O bits, SRP DIUNDER/DIOVER/DOUNDER/DOOVER).
type ResidualKind uint8

// Residual kinds.
const (
	ResidualNone      ResidualKind = iota
	ResidualUnderflow              // fewer bytes transferred than expected
	ResidualOverflow               // the command wanted more than expected
)

// String returns "none", "underflow" or "overflow".
func (r ResidualKind) String() string {
	switch r {
	case ResidualNone:
		return "none"
	case ResidualUnderflow:
		return "underflow"
	case ResidualOverflow:
		return "overflow"
	}
	return "residual(" + strconv.Itoa(int(r)) + ")"
}

// Command is one SCSI command: the transport fills the request fields, calls
// Session.Execute, and reads the result fields. A transport keeps one
// Command per outstanding-command slot (queue depth) and reuses it: the core
// keeps no reference to it, its buffers or its CDB after Execute returns, and
// allocates nothing for it. A Command must not be copied after first use
// and must not be passed to Execute while a previous Execute with it is
// still running.
//
// # Buffers
//
// DataOut holds the data-out bytes the transport has already received or
// pulled (immediate data, Data-Out PDUs, RDMA Read): the core uses at most
// the first ExpectedLength bytes and never writes it. DataIn is the buffer
// the core fills from offset 0 (registered memory the transport then sends
// with Data-In PDUs or RDMA Write); the core writes at most
// min(ExpectedLength, len(DataIn)) bytes and reports how many in DataInLen.
// Sense receives the sense data of a CHECK CONDITION (SenseBufferLen bytes
// is enough; shorter buffers get truncated sense data). Data-out buffers are
// only read when Dir is DirOut, data-in buffers only written when Dir is
// DirIn. Session.DataOutLength tells, before data-out is fetched, how many
// bytes the command will consume, so that an RDMA transport need not pull
// bytes the command will ignore.
//
// # Zero-copy reads
//
// A transport that can send from any memory (an RDMA implicit MR) may set
// Views to a slice of segment slots. A READ on a disk that keeps its
// blocks in memory (backstore.Viewer) then fills Views[:ViewsLen] with the
// disk's own memory holding its DataInLen bytes, in order, instead of
// copying them into DataIn, which it leaves untouched. The segments alias
// the disk and must only be read. The command holds them until the
// transport calls Release, once the data has been sent (the completion of
// the response that follows the RDMA Write) or will never be (the
// connection ended): COMPARE AND WRITE, ORWRITE and WRITE ATOMIC on the LU
// wait for that (see Exclusive), so a read never sends half of one. A
// command whose ViewsLen is 0 after Execute holds nothing.
//
// # Residuals
//
// Residual and ResidualKind follow SAM-5 and RFC 7143 11.4.5: when the
// command's own transfer length (the CDB transfer length in bytes, or for
// commands with an allocation length the smaller of the allocation length
// and the data available) exceeds ExpectedLength, ResidualKind is
// ResidualOverflow and Residual the difference; otherwise, when fewer than
// ExpectedLength bytes were transferred, ResidualUnderflow and the shortfall.
// A READ or WRITE whose ExpectedLength is shorter than its transfer length
// transfers ExpectedLength bytes (writes: whole blocks only) and completes
// with GOOD and an overflow, as libiscsi's residual tests require.
//
// # Aborts
//
// A command aborted by a task management function completes (Execute
// returns) as soon as it reaches a point where it can stop; backend I/O
// already issued runs to completion, but its result is discarded. When the
// abort came from the command's own I_T nexus (ABORT TASK, ABORT TASK SET,
// CLEAR TASK SET, LUN RESET, I_T NEXUS RESET from the same session),
// Aborted is set and the transport must send no response: the TMF response
// covers it. When it came from another nexus (CLEAR TASK SET, LUN RESET,
// PREEMPT AND ABORT, target reset), the command completes with Status
// TASK ABORTED (the control mode page has TAS set) and the transport sends
// that status.
type Command struct {
	// CDB is the command descriptor block (6 to 16 bytes; 32-byte
	// variable-length CDBs are refused with INVALID COMMAND OPERATION CODE).
	CDB []byte
	// LUN is the logical unit number (see DecodeLUN).
	LUN uint64
	// Tag is the task tag (iSCSI ITT, SRP tag), unique among the session's
	// outstanding commands; ABORT TASK and QUERY TASK name commands by it.
	Tag uint64
	// Attr is the task attribute.
	Attr TaskAttr
	// Dir and ExpectedLength are the direction and the expected data
	// transfer length the initiator declared.
	Dir            Dir
	ExpectedLength uint32
	// DataOut, DataIn and Sense are the transport's buffers; see above.
	DataOut []byte
	DataIn  []byte
	Sense   []byte
	// Views are segment slots a read may fill with the disk's memory
	// instead of writing DataIn; nil turns zero-copy reads off. See
	// above.
	Views [][]byte
	// ViewsLen is the number of Views filled by the last Execute: when
	// positive, the data-in is Views[:ViewsLen] (DataInLen bytes in all)
	// and the command holds it until Release.
	ViewsLen int

	// Status is the SCSI status of the completed command.
	Status Status
	// SenseLen is the length of the sense data in Sense (CHECK CONDITION
	// only; zero otherwise).
	SenseLen int
	// DataInLen is the number of bytes written to DataIn, from offset 0.
	DataInLen int
	// Residual and ResidualKind report over- and underflow; see above.
	Residual     uint32
	ResidualKind ResidualKind
	// Aborted reports that a task management function from this
	// command's own I_T nexus aborted it: send no response.
	Aborted bool
	// Done is called when a command begun with Session.Start completes
	// (see there); set it once, it is not used by Execute.
	Done func(*Command)

	// Task set membership (protected by the LU's task shard lock).
	lu         *LU
	sess       *Session
	next, prev *Command
	shard      *taskShard
	// abort is 0, or abortSilent/abortStatus, set by task management.
	abort atomic.Uint32
	// ro: the command came through a read-only mapping of a LUNView.
	ro bool
	// senseKey is the sense key of a CHECK CONDITION (for the LU's
	// error counters: Sense may be too short to hold it).
	senseKey SenseKey
	// need is the number of bytes the command itself would transfer;
	// xfer the number it did.
	need uint64
	xfer uint64
	// viewRL is the range locks of the LU whose memory Views hold.
	viewRL *rangeLocks

	// Session.Start (async.go): the disk I/O, the lock it holds and
	// what its completion needs.
	aio      backstore.AsyncIO
	aioBufs  [1][]byte
	aioLock  lockMode
	aioPass  gatePass
	aioLBA   uint64
	aioWrite bool
	aioUnmap unmapList // UNMAP: the block descriptors still to discard
}

// Release ends the command's hold on the disk memory in Views (see
// Command): the transport calls it once the data-in has been sent, or
// will not be. It does nothing when the command holds none, so it may be
// called more than once; Execute calls it first. It must not be called
// while Execute runs with c.
func (c *Command) Release() {
	r := c.viewRL
	if r == nil {
		return
	}
	c.viewRL = nil
	clear(c.Views[:c.ViewsLen]) // do not keep discarded RAM disk chunks alive
	c.ViewsLen = 0
	r.unview()
}

const (
	abortSilent = 1 // aborted by its own nexus: no response
	abortStatus = 2 // aborted by another nexus: TASK ABORTED
)

// aborted reports whether a task management function aborted c.
func (c *Command) aborted() bool { return c.abort.Load() != 0 }

// reset clears the results before execution.
func (c *Command) reset() {
	c.Status = StatusGood
	c.SenseLen = 0
	c.DataInLen = 0
	c.Residual = 0
	c.ResidualKind = ResidualNone
	c.Aborted = false
	c.abort.Store(0)
	c.need = 0
	c.xfer = 0
	c.lu = nil
	c.ro = false
	c.next, c.prev, c.shard = nil, nil, nil
}

// inLimit is the number of data-in bytes the transport can take.
func (c *Command) inLimit() int {
	if c.Dir != DirIn {
		return 0
	}
	return min(int(c.ExpectedLength), len(c.DataIn))
}

// outData returns the data-out bytes available to the command.
func (c *Command) outData() []byte {
	if c.Dir != DirOut {
		return nil
	}
	return c.DataOut[:min(int(c.ExpectedLength), len(c.DataOut))]
}

// respond copies a complete response of which the command may transfer
// alloc bytes (its allocation length) into DataIn, and records the
// transfer length for the residual.
func (c *Command) respond(resp []byte, alloc int) {
	n := min(len(resp), alloc)
	c.need = uint64(n)
	m := copy(c.DataIn[:c.inLimit()], resp[:n])
	c.DataInLen = m
	c.xfer = uint64(m)
}

// fail completes the command with CHECK CONDITION and sense data s, in the
// format the LU's control mode page selects.
func (c *Command) fail(s senseInfo) {
	desc := false
	if c.lu != nil {
		desc = c.lu.dsense()
	}
	c.failFormat(s, desc)
}

func (c *Command) failFormat(s senseInfo, desc bool) {
	if s.busy {
		c.Status = StatusBusy
		c.SenseLen = 0
		c.DataInLen = 0
		c.xfer = 0
		return
	}
	c.Status = StatusCheckCondition
	c.senseKey = s.key
	c.SenseLen = encodeSense(c.Sense, s, desc)
	c.DataInLen = 0
	c.xfer = 0
}

// finish computes the residual.
func (c *Command) finish() {
	edtl := uint64(c.ExpectedLength)
	switch {
	case c.need > edtl:
		c.ResidualKind = ResidualOverflow
		c.Residual = uint32(min(c.need-edtl, 0xffffffff))
	case c.xfer < edtl:
		c.ResidualKind = ResidualUnderflow
		c.Residual = uint32(edtl - c.xfer)
	}
}
