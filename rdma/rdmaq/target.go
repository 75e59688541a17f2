package rdmaq

import (
	"context"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"

	"github.com/rdisk/rdisk/rdma"
)

// Work request IDs: the kind in the top byte, a slot, receive buffer or
// control buffer index in the low bits. One scheme for every protocol.
const (
	kindRecv  uint64 = 0 << 56
	kindSend  uint64 = 1 << 56 // a slot's response Send
	kindRead  uint64 = 2 << 56 // a slot's RDMA Read
	kindWrite uint64 = 3 << 56 // a slot's RDMA Write (unsignaled)
	kindCtl   uint64 = 4 << 56 // a control buffer's Send
	kindMask  uint64 = 0xff << 56
)

// pageSize aligns receive data areas and slot data buffers, for disks
// opened with direct I/O.
const pageSize = 4096

// TargetConfig sizes a TargetQueue from what the protocol negotiated.
type TargetConfig struct {
	// Provider creates the queue's PD, CQ and QP.
	Provider rdma.Provider
	// Recvs is the number of receive buffers kept posted: the requests
	// (and other messages) the peer may have in flight.
	Recvs int
	// RecvLen is the longest message the peer sends.
	RecvLen int
	// SplitAt, when positive, scatters each receive into two buffers: the
	// first SplitAt bytes (NVMe: the SQE) into a header buffer, the rest
	// (in-capsule data) into a page-aligned data area, as Linux nvmet does.
	SplitAt int
	// AlignAt, when positive and SplitAt is not, places each contiguous
	// receive buffer so that byte AlignAt of a message lands on a 4 KiB
	// boundary (SRP: immediate data), for direct-I/O disks.
	AlignAt int
	// Slots is the number of request slots; default 2*Recvs: a response
	// holds its slot until its send completes, and the peer, whose credit
	// it already returned, may send the next request first. Slots are
	// allocated chunkSlots at a time as the requests in flight need them
	// (or Slot asks for one), so an idle queue holds a few.
	Slots int
	// RespLen is the size of each slot's response buffer.
	RespLen int
	// SendSGE is the scatter entries a send work request may carry
	// (default 1).
	SendSGE int
	// SendWRs is the send work requests the queue may have outstanding
	// (default 2*Slots+Ctl).
	SendWRs int
	// Ctl and CtlLen are the number and size of control buffers:
	// messages that belong to no request (iSCSI NOP-In, SRP_CRED_REQ...).
	Ctl, CtlLen int
	// Implicit registers the provider's implicit MR (rdma.ImplicitPD),
	// when it has one, so reads can be sent from any memory.
	Implicit bool
	// ImplicitWrite registers the provider's implicit write MR
	// (rdma.ImplicitWritePD), when it has one, so a request's data can be
	// RDMA-Read straight into any memory (ReadSGL), such as a RAM disk's.
	ImplicitWrite bool
	// MaxData bounds a slot's data buffer (EnsureData); default 1 MiB.
	MaxData int
	// Hook, if set, is called with +1 when Run starts and -1 when it
	// returns (rdisk target sizes GOMAXPROCS with it).
	Hook func(delta int)
	// QPContext is the QP's rdma.QPConfig.Context.
	QPContext any
}

// Msg is a received message, valid until its receive buffer is reposted.
type Msg struct {
	// Index is the receive buffer.
	Index int
	// Len is the message length in bytes.
	Len int
	// Head is the message, or with SplitAt its first min(Len, SplitAt)
	// bytes; its capacity ends at the buffer's end.
	Head []byte
	// Data is, with SplitAt, the bytes after the first SplitAt, in the
	// page-aligned data area; nil otherwise.
	Data []byte
	// WithInv is set when the message came as a Send with Invalidate of
	// Invalidated, one of the receiver's keys.
	WithInv     bool
	Invalidated uint32
}

// TargetHandler is what a protocol plugs into a TargetQueue: its transport
// operations, in the style of SPDK's nvmf transport ops and Linux nvmet's
// queue_response. All are called on the queue's completion goroutine (Run)
// unless noted.
type TargetHandler[R any] interface {
	// Recv handles a message from the peer. To start a request, call
	// Admit, which runs Start on a free slot now or once one frees; a
	// message not admitted is reposted when Recv returns. An error ends
	// the queue.
	Recv(m Msg) error
	// Start begins the request of message m on slot s: parse it, then
	// fetch its data (Read, then Fetched), execute and Respond. It runs
	// on Run's goroutine, or on the goroutine that called Free.
	Start(s *Slot[R], m Msg) error
	// Fetched is called when the RDMA Reads posted for s completed.
	Fetched(s *Slot[R]) error
	// Sent is called when s's response Send completed; s is free for the
	// next request once it returns.
	Sent(s *Slot[R])
	// CtlSent is called when control buffer i's Send completed.
	CtlSent(i int) error
}

// SlotIniter is optionally implemented by a TargetHandler that sets up each
// slot's protocol state once, when the queue allocates the slot (slots are
// allocated in chunks as the requests in flight grow, or when Slot asks
// for one not allocated yet), before the slot is used. It runs with the
// queue's allocation lock held: it may use the slot's own methods, not the
// queue's.
type SlotIniter[R any] interface {
	InitSlot(s *Slot[R])
}

// Batcher is optionally implemented by a TargetHandler that wants a call
// after each batch of completions, before the queue waits for more (the
// iSCSI connection runs the commands it queued for itself there).
type Batcher interface {
	Batch() error
}

// TargetQueue is the target side of one RDMA queue pair: the receive ring,
// request slots with their registered buffers, one work request ID scheme
// and the completion loop, with back-pressure when every slot is busy. A
// protocol owns what its messages mean through its TargetHandler. Its
// methods are safe for concurrent use unless noted.
type TargetQueue[R any] struct {
	cfg TargetConfig
	h   TargetHandler[R]

	pd       rdma.PD
	cq       rdma.CQ
	qp       rdma.QP
	recvBuf  []byte
	recvMR   rdma.MR
	stride   int // contiguous: bytes per receive buffer
	pad      int // contiguous: offset of a message in its buffer
	dataLen  int // split: bytes per data area
	respBuf  []byte
	respMR   rdma.MR
	respLen  int // bytes per response buffer
	ctl      ctlBuffers
	implicit rdma.MR
	implW    rdma.MR // the implicit write MR (ImplicitWrite)

	// Slots, chunkSlots per chunk, allocated on demand: a chunk never
	// moves once allocated, so *Slot pointers stay valid.
	chunks []atomic.Pointer[slotChunk[R]]
	growMu sync.Mutex // serializes chunk allocation
	initer SlotIniter[R]

	// Completion loop state (Run's goroutine only).
	rwr      rdma.RecvWR
	rsge     [2]rdma.SGE
	wcs      []rdma.WC
	admitted bool

	mu      sync.Mutex // guards free, pending and freed
	free    []int32
	pending []Msg
	freed   int // slots [0, freed) have been put on the free list
}

// chunkSlots is the unit of slot allocation: a few slots, so that an idle
// queue holds one chunk and a busy one grows, without moving any slot, to
// its high-water mark of requests in flight.
const chunkSlots = 8

type slotChunk[R any] [chunkSlots]Slot[R]

// Slot is one request context of a TargetQueue: the protocol's request
// state R, the receive buffer it holds, a registered data buffer and a
// response buffer. A slot belongs to whoever moved its request last (the
// completion loop, a worker, a goroutine completing a parked request); the
// queue only frees it after its response was sent, or on Free.
type Slot[R any] struct {
	// R is the protocol's state of the request on this slot.
	R R

	q      *TargetQueue[R]
	idx    int
	owned  bool // taken by Admit: returns to the free list
	recv   int  // receive buffer held, or -1
	reads  int  // RDMA Reads of the fetch still to complete
	data   []byte
	dataMR rdma.MR
	resp   []byte

	// Work request storage: posts copy it, one post at a time per slot.
	wr   rdma.SendWR
	sgl  [1]rdma.SGE
	rwr  rdma.RecvWR
	rsge [2]rdma.SGE
}

// NewTargetQueue allocates the queue's PD, CQ, QP, buffers and slots and
// posts its receives. Accept the connection on QP, then Run.
func NewTargetQueue[R any](cfg TargetConfig, h TargetHandler[R]) (*TargetQueue[R], error) {
	if cfg.Recvs <= 0 || cfg.RecvLen <= 0 {
		return nil, fmt.Errorf("rdmaq: %d receives of %d bytes", cfg.Recvs, cfg.RecvLen)
	}
	if cfg.Slots <= 0 {
		cfg.Slots = 2 * cfg.Recvs
	}
	if cfg.SendSGE <= 0 {
		cfg.SendSGE = 1
	}
	if cfg.SendWRs <= 0 {
		cfg.SendWRs = 2*cfg.Slots + cfg.Ctl
	}
	if cfg.MaxData <= 0 {
		cfg.MaxData = 1 << 20
	}
	q := &TargetQueue[R]{cfg: cfg, h: h, wcs: make([]rdma.WC, 64)}
	fail := func(step string, err error) (*TargetQueue[R], error) {
		q.Close()
		return nil, fmt.Errorf("rdmaq: %s: %w", step, err)
	}
	var err error
	if q.pd, err = cfg.Provider.AllocPD(); err != nil {
		return fail("allocating a PD", err)
	}
	if q.cq, err = cfg.Provider.CreateCQ(cfg.Recvs + cfg.SendWRs + 8); err != nil {
		return fail("creating a CQ", err)
	}
	recvSGE := 1
	if cfg.SplitAt > 0 && cfg.RecvLen > cfg.SplitAt {
		recvSGE = 2
	}
	if q.qp, err = q.pd.CreateQP(rdma.QPConfig{SendCQ: q.cq, RecvCQ: q.cq, MaxSendWR: cfg.SendWRs, MaxRecvWR: cfg.Recvs,
		MaxSendSGE: cfg.SendSGE, MaxRecvSGE: recvSGE, Context: cfg.QPContext}); err != nil {
		return fail("creating a QP", err)
	}
	if cfg.Implicit {
		if ip, ok := q.pd.(rdma.ImplicitPD); ok {
			if q.implicit, err = ip.RegisterImplicit(); err != nil {
				return fail("registering the implicit MR", err)
			}
		}
	}
	if cfg.ImplicitWrite {
		if ip, ok := q.pd.(rdma.ImplicitWritePD); ok {
			if q.implW, err = ip.RegisterImplicitWrite(); err != nil {
				return fail("registering the implicit write MR", err)
			}
		}
	}
	switch {
	case cfg.SplitAt > 0:
		// Every data area (page aligned), then every header.
		q.dataLen = roundUp(max(cfg.RecvLen-cfg.SplitAt, 0), pageSize)
		q.recvBuf = pageBuffer(cfg.Recvs * (q.dataLen + cfg.SplitAt))
	case cfg.AlignAt > 0:
		q.pad = (pageSize - cfg.AlignAt%pageSize) % pageSize
		q.stride = roundUp(q.pad+cfg.RecvLen, pageSize)
		q.recvBuf = pageBuffer(cfg.Recvs * q.stride)
	default:
		q.stride = roundUp(cfg.RecvLen, 64)
		q.recvBuf = pageBuffer(cfg.Recvs * q.stride)
	}
	if q.recvMR, err = q.pd.RegisterMemory(q.recvBuf, rdma.AccessLocalWrite); err != nil {
		return fail("registering receive buffers", err)
	}
	q.respLen = roundUp(max(cfg.RespLen, 1), 64)
	q.respBuf = pageBuffer(cfg.Slots * q.respLen)
	if q.respMR, err = q.pd.RegisterMemory(q.respBuf, rdma.AccessLocalWrite); err != nil {
		return fail("registering response buffers", err)
	}
	if err := q.ctl.init(q.pd, cfg.Ctl, cfg.CtlLen); err != nil {
		return fail("setting up", err)
	}
	q.initer, _ = h.(SlotIniter[R])
	q.chunks = make([]atomic.Pointer[slotChunk[R]], (cfg.Slots+chunkSlots-1)/chunkSlots)
	q.free = make([]int32, 0, cfg.Slots)
	q.pending = make([]Msg, 0, cfg.Recvs)
	q.mu.Lock()
	q.growLocked()
	q.mu.Unlock()
	for i := range cfg.Recvs {
		if err := q.postRecv(&q.rwr, &q.rsge, i); err != nil {
			return fail("posting receives", err)
		}
	}
	return q, nil
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

// QP returns the queue pair, to accept the connection on.
func (q *TargetQueue[R]) QP() rdma.QP { return q.qp }

// PD returns the protection domain, for memory the protocol registers
// itself (SRP's indirect descriptor tables).
func (q *TargetQueue[R]) PD() rdma.PD { return q.pd }

// Implicit returns the implicit MR (TargetConfig.Implicit), or nil when the
// provider has none.
func (q *TargetQueue[R]) Implicit() rdma.MR { return q.implicit }

// ImplicitWrite returns the implicit write MR (TargetConfig.ImplicitWrite),
// or nil when the provider has none: SGEs naming it, their memory in
// SGE.Buf, may be the sink of ReadSGL.
func (q *TargetQueue[R]) ImplicitWrite() rdma.MR { return q.implW }

// Slots returns the number of slots (TargetConfig.Slots): Slot takes
// 0 <= i < Slots(). Protocols that keep their own allocation (iSCSI's task
// slots) use any of them; to look at every request (SRP task management,
// teardown), range over Allocated instead, which does not allocate. Read
// the protocol state under the protocol's own lock.
func (q *TargetQueue[R]) Slots() int { return q.cfg.Slots }

// Slot returns slot i, allocating its chunk if no request has used one of
// its slots yet. Safe from any goroutine.
func (q *TargetQueue[R]) Slot(i int) *Slot[R] {
	if uint(i) >= uint(q.cfg.Slots) {
		panic(fmt.Sprintf("rdmaq: slot %d of %d", i, q.cfg.Slots))
	}
	if c := q.chunks[i/chunkSlots].Load(); c != nil {
		return &c[i%chunkSlots]
	}
	return &q.chunk(i / chunkSlots)[i%chunkSlots]
}

// Allocated yields the slots allocated so far (a request may have used
// them), in index order, without allocating any. Safe from any goroutine;
// a chunk allocated during the iteration may be left out.
func (q *TargetQueue[R]) Allocated() iter.Seq[*Slot[R]] {
	return func(yield func(*Slot[R]) bool) {
		for ci := range q.chunks {
			c := q.chunks[ci].Load()
			if c == nil {
				continue
			}
			for j := range min(chunkSlots, q.cfg.Slots-ci*chunkSlots) {
				if !yield(&c[j]) {
					return
				}
			}
		}
	}
}

// chunk returns chunk ci, allocating it first if needed.
func (q *TargetQueue[R]) chunk(ci int) *slotChunk[R] {
	q.growMu.Lock()
	defer q.growMu.Unlock()
	if c := q.chunks[ci].Load(); c != nil {
		return c
	}
	c := new(slotChunk[R])
	n := min(chunkSlots, q.cfg.Slots-ci*chunkSlots)
	for j := range c[:n] {
		s, i := &c[j], ci*chunkSlots+j
		s.q, s.idx, s.recv = q, i, -1
		s.resp = q.respBuf[i*q.respLen : i*q.respLen+q.cfg.RespLen : i*q.respLen+q.cfg.RespLen]
		if q.initer != nil {
			q.initer.InitSlot(s)
		}
	}
	q.chunks[ci].Store(c)
	return c
}

// growLocked puts the next chunk's slots on the free list, allocating the
// chunk if no Slot call did; it reports whether there was one. Caller
// holds mu.
func (q *TargetQueue[R]) growLocked() bool {
	if q.freed >= q.cfg.Slots {
		return false
	}
	ci := q.freed / chunkSlots
	q.chunk(ci)
	n := min(chunkSlots, q.cfg.Slots-q.freed)
	for i := q.freed + n - 1; i >= q.freed; i-- {
		q.free = append(q.free, int32(i))
	}
	q.freed += n
	return true
}

// slot returns allocated slot i (the completion loop's lookup of a work
// request's slot, which a request used, so its chunk is allocated).
func (q *TargetQueue[R]) slot(i int) *Slot[R] {
	return &q.chunks[i/chunkSlots].Load()[i%chunkSlots]
}

// Index returns the slot's index.
func (s *Slot[R]) Index() int { return s.idx }

// Resp returns the slot's response buffer (TargetConfig.RespLen bytes).
func (s *Slot[R]) Resp() []byte { return s.resp }

// Data returns the slot's registered data buffer (nil before EnsureData).
func (s *Slot[R]) Data() []byte { return s.data }

// DataMR returns the registration of Data.
func (s *Slot[R]) DataMR() rdma.MR { return s.dataMR }

// HoldsRecv reports whether the slot still holds its receive buffer.
func (s *Slot[R]) HoldsRecv() bool { return s.recv >= 0 }

// EnsureData gives the slot a registered data buffer of at least n bytes
// (page aligned, at most TargetConfig.MaxData; grown in powers of two from
// 4 KiB, registered once per size) and returns all of it.
func (s *Slot[R]) EnsureData(n int) ([]byte, error) {
	if n <= len(s.data) && s.dataMR != nil {
		return s.data, nil
	}
	if n > s.q.cfg.MaxData {
		return nil, fmt.Errorf("rdmaq: data buffer of %d bytes exceeds the %d-byte maximum", n, s.q.cfg.MaxData)
	}
	size := pageSize
	for size < n {
		size <<= 1
	}
	size = min(size, s.q.cfg.MaxData)
	buf := pageBuffer(size)
	mr, err := s.q.pd.RegisterMemory(buf, rdma.AccessLocalWrite)
	if err != nil {
		return nil, fmt.Errorf("rdmaq: registering a %d-byte data buffer: %w", size, err)
	}
	if s.dataMR != nil {
		s.dataMR.Deregister()
	}
	s.data, s.dataMR = buf, mr
	return buf, nil
}

// msg returns the view of receive buffer i holding n bytes.
func (q *TargetQueue[R]) msg(i, n int) Msg {
	m := Msg{Index: i, Len: n}
	if split := q.cfg.SplitAt; split > 0 {
		h := q.cfg.Recvs*q.dataLen + i*split
		m.Head = q.recvBuf[h : h+min(n, split) : h+split]
		if n > split {
			d := i * q.dataLen
			m.Data = q.recvBuf[d : d+n-split : d+q.dataLen]
		}
		return m
	}
	off := i*q.stride + q.pad
	m.Head = q.recvBuf[off : off+n : off+q.cfg.RecvLen]
	return m
}

// postRecv posts receive buffer i with the caller's work request storage.
func (q *TargetQueue[R]) postRecv(wr *rdma.RecvWR, sge *[2]rdma.SGE, i int) error {
	n := 1
	if split := q.cfg.SplitAt; split > 0 {
		sge[0] = rdma.SGE{MR: q.recvMR, Offset: q.cfg.Recvs*q.dataLen + i*split, Length: split}
		if q.dataLen > 0 {
			sge[1] = rdma.SGE{MR: q.recvMR, Offset: i * q.dataLen, Length: q.cfg.RecvLen - split}
			n = 2
		}
	} else {
		sge[0] = rdma.SGE{MR: q.recvMR, Offset: i*q.stride + q.pad, Length: q.cfg.RecvLen}
	}
	*wr = rdma.RecvWR{ID: kindRecv | uint64(i), SGL: sge[:n]}
	return q.qp.PostRecv(wr)
}

// Admit starts a request for message m (from Recv, on Run's goroutine): on
// a free slot at once, or, when every slot is busy, once one frees. The
// slot holds m's receive buffer until Repost.
func (q *TargetQueue[R]) Admit(m Msg) error {
	q.admitted = true
	q.mu.Lock()
	n := len(q.free)
	if n == 0 && (len(q.pending) > 0 || !q.growLocked()) {
		q.pending = append(q.pending, m)
		q.mu.Unlock()
		return nil
	}
	n = len(q.free)
	s := q.slot(int(q.free[n-1]))
	q.free = q.free[:n-1]
	q.mu.Unlock()
	s.owned = true
	s.recv = m.Index
	return q.h.Start(s, m)
}

// Free releases an admitted slot whose request ends without a response
// (aborted, dropped), from any goroutine, and starts a waiting message on
// it there. The slot's receive buffer must have been reposted (or be
// given up with the connection).
func (q *TargetQueue[R]) Free(s *Slot[R]) error {
	if !s.owned {
		return nil
	}
	s.recv = -1
	q.mu.Lock()
	if len(q.pending) > 0 {
		m := q.pending[0]
		copy(q.pending, q.pending[1:])
		q.pending = q.pending[:len(q.pending)-1]
		q.mu.Unlock()
		s.recv = m.Index
		return q.h.Start(s, m)
	}
	s.owned = false
	q.free = append(q.free, int32(s.idx))
	q.mu.Unlock()
	return nil
}

// Repost gives the slot's receive buffer back to the peer (once the
// request no longer needs the message). Safe from any goroutine.
func (q *TargetQueue[R]) Repost(s *Slot[R]) error {
	if s.recv < 0 {
		return nil
	}
	i := s.recv
	s.recv = -1
	return q.postRecv(&s.rwr, &s.rsge, i)
}

// Read posts an RDMA Read of n bytes from the peer's raddr/rkey into the
// slot's data buffer at off: a fetch of one Read, which Fetched follows.
func (q *TargetQueue[R]) Read(s *Slot[R], off, n int, raddr uint64, rkey uint32) error {
	q.Fetch(s, 1)
	return q.ReadSGE(s, rdma.SGE{MR: s.dataMR, Offset: off, Length: n}, raddr, rkey)
}

// Fetch declares that the next n ReadSGE calls for s form one fetch:
// Fetched follows once all n completed. Declaring the count before
// posting keeps a fetch posted off the completion goroutine (a request
// started by Free) from looking done after its first Read.
func (q *TargetQueue[R]) Fetch(s *Slot[R], n int) { s.reads = n }

// ReadSGE posts one Read of a fetch (see Fetch) into any local memory of
// the queue's PD (SRP reads an indirect descriptor table into a buffer of
// its own).
func (q *TargetQueue[R]) ReadSGE(s *Slot[R], sge rdma.SGE, raddr uint64, rkey uint32) error {
	s.sgl[0] = sge
	s.wr = rdma.SendWR{ID: kindRead | uint64(s.idx), Op: rdma.OpRDMARead, Flags: rdma.Signaled, SGL: s.sgl[:],
		RemoteAddr: raddr, RemoteKey: rkey}
	if err := q.qp.PostSend(&s.wr); err != nil {
		return fmt.Errorf("rdmaq: posting an RDMA Read: %w", err)
	}
	return nil
}

// ReadSGL posts one Read of a fetch (see Fetch) scattering into sgl, for
// instance into a RAM disk's chunks through the implicit write MR
// (ImplicitWrite). The scatter list is copied when posted; the memory it
// names must stay untouched until the Read completes.
func (q *TargetQueue[R]) ReadSGL(s *Slot[R], sgl []rdma.SGE, raddr uint64, rkey uint32) error {
	s.wr = rdma.SendWR{ID: kindRead | uint64(s.idx), Op: rdma.OpRDMARead, Flags: rdma.Signaled, SGL: sgl,
		RemoteAddr: raddr, RemoteKey: rkey}
	if err := q.qp.PostSend(&s.wr); err != nil {
		return fmt.Errorf("rdmaq: posting an RDMA Read: %w", err)
	}
	return nil
}

// Write posts an unsignaled RDMA Write of n bytes of the slot's data
// buffer at off to the peer's raddr/rkey. Post it before the response
// Send: the peer sees the data before the response (RC ordering), and the
// Send's completion, which frees the slot, says the Write's memory is no
// longer read (the rdma.QP contract; on Linux siw the verbs provider signals
// such Writes itself to keep it). The Write is posted with rdma.More: it
// may wait for the next WR posted on the queue (Respond, or the
// disconnect after a failure) to go out with it in one doorbell.
func (q *TargetQueue[R]) Write(s *Slot[R], off, n int, raddr uint64, rkey uint32) error {
	s.sgl[0] = rdma.SGE{MR: s.dataMR, Offset: off, Length: n}
	return q.WriteSGL(s, s.sgl[:], raddr, rkey)
}

// WriteSGL is Write gathering from sgl (for instance a RAM disk's memory
// through the implicit MR). The scatter list is copied when posted.
func (q *TargetQueue[R]) WriteSGL(s *Slot[R], sgl []rdma.SGE, raddr uint64, rkey uint32) error {
	s.wr = rdma.SendWR{ID: kindWrite | uint64(s.idx), Op: rdma.OpRDMAWrite, Flags: rdma.More, SGL: sgl, RemoteAddr: raddr, RemoteKey: rkey}
	if err := q.qp.PostSend(&s.wr); err != nil {
		return fmt.Errorf("rdmaq: posting an RDMA Write: %w", err)
	}
	return nil
}

// Respond posts the Send of the first n bytes of the slot's response
// buffer, with Invalidate of the peer's key inv when it is not 0, and
// flags (rdma.Solicited) added to Signaled. Sent follows its completion.
// Safe from any goroutine (a parked request completes from another).
func (q *TargetQueue[R]) Respond(s *Slot[R], n int, inv uint32, flags rdma.WRFlags) error {
	s.sgl[0] = rdma.SGE{MR: q.respMR, Offset: s.idx * q.respLen, Length: n}
	s.wr = rdma.SendWR{ID: kindSend | uint64(s.idx), Op: rdma.OpSend, Flags: rdma.Signaled | flags, SGL: s.sgl[:]}
	if inv != 0 {
		s.wr.Op, s.wr.InvalidateKey = rdma.OpSendWithInv, inv
	}
	if err := q.qp.PostSend(&s.wr); err != nil {
		return fmt.Errorf("rdmaq: posting a response: %w", err)
	}
	return nil
}

// CtlBuf returns control buffer i (TargetConfig.CtlLen bytes). Which
// buffers are in use is the protocol's to track.
func (q *TargetQueue[R]) CtlBuf(i int) []byte { return q.ctl.get(i) }

// SendCtl posts the Send of the first n bytes of control buffer i; CtlSent
// follows its completion. Calls for one buffer must not overlap.
func (q *TargetQueue[R]) SendCtl(i, n int, flags rdma.WRFlags) error {
	return q.ctl.send(q.qp, i, n, rdma.Signaled|flags)
}

// Run processes completions until the connection fails, a handler returns
// an error or ctx is done, and returns why. A failed work completion
// returns the QP's error when it has one (a Terminate, a disconnect), else
// the completion's.
func (q *TargetQueue[R]) Run(ctx context.Context) error {
	if h := q.cfg.Hook; h != nil {
		h(1)
		defer h(-1)
	}
	b, _ := q.h.(Batcher)
	for {
		n := q.cq.Poll(q.wcs)
		if n == 0 {
			if err := q.cq.Wait(ctx); err != nil {
				return err
			}
			continue
		}
		for i := range q.wcs[:n] {
			if err := q.complete(&q.wcs[i]); err != nil {
				return err
			}
		}
		if b != nil {
			if err := b.Batch(); err != nil {
				return err
			}
		}
	}
}

func (q *TargetQueue[R]) complete(wc *rdma.WC) error {
	if wc.Status != rdma.StatusSuccess {
		if err := q.qp.Err(); err != nil {
			return err
		}
		return wc.Err()
	}
	idx := int(wc.ID &^ kindMask)
	switch wc.ID & kindMask {
	case kindRecv:
		q.admitted = false
		m := q.msg(idx, wc.ByteLen)
		if err := q.h.Recv(m); err != nil {
			return err
		}
		if !q.admitted {
			return q.postRecv(&q.rwr, &q.rsge, idx)
		}
	case kindSend:
		s := q.slot(idx)
		q.h.Sent(s)
		return q.Free(s)
	case kindRead:
		s := q.slot(idx)
		if s.reads--; s.reads == 0 {
			return q.h.Fetched(s)
		}
	case kindCtl:
		return q.h.CtlSent(idx)
	}
	return nil
}

// Disconnect ends the connection; Run then returns. Safe from any
// goroutine, any number of times.
func (q *TargetQueue[R]) Disconnect() {
	if q.qp != nil {
		q.qp.Disconnect()
	}
}

// Close frees the queue's resources; Run must have returned (or never
// been called). It is idempotent.
func (q *TargetQueue[R]) Close() {
	if q.qp != nil {
		q.qp.Close()
	}
	for s := range q.Allocated() {
		if mr := s.dataMR; mr != nil {
			mr.Deregister()
			s.dataMR = nil
		}
	}
	for _, mr := range []*rdma.MR{&q.recvMR, &q.respMR, &q.ctl.mr, &q.implicit, &q.implW} {
		if *mr != nil {
			(*mr).Deregister()
			*mr = nil
		}
	}
	if q.cq != nil {
		q.cq.Close()
		q.cq = nil
	}
	if q.pd != nil {
		q.pd.Close()
		q.pd = nil
	}
}
