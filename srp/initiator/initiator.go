package initiator

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/rdisk/rdisk/srp"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/blockdev"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/rdmaq"
	"github.com/rdisk/rdisk/scsi"
	"github.com/rdisk/rdisk/scsi/host"
)

// DescriptorPolicy selects how the initiator describes data buffers.
type DescriptorPolicy uint8

// Descriptor policies. PolicyAuto is what Linux ib_srp does on a device
// with fast registration; the others force one format, for tests and for
// probing targets.
const (
	// PolicyAuto sends writes that fit as immediate data when the target
	// accepted it, and a direct descriptor otherwise.
	PolicyAuto DescriptorPolicy = iota
	// PolicyDirect always uses a direct descriptor.
	PolicyDirect
	// PolicyIndirect uses an indirect descriptor whose whole table is in
	// the IU (the buffer split in IndirectPieces descriptors).
	PolicyIndirect
	// PolicyExternal uses an indirect descriptor with only part of the
	// table in the IU: the target must fetch the table with RDMA Read.
	PolicyExternal
)

// String names the policy.
func (p DescriptorPolicy) String() string {
	switch p {
	case PolicyAuto:
		return "auto"
	case PolicyDirect:
		return "direct"
	case PolicyIndirect:
		return "indirect"
	case PolicyExternal:
		return "external"
	}
	return fmt.Sprintf("policy(%d)", uint8(p))
}

// Initiator defaults.
const (
	DefaultQueueDepth = 64
	DefaultMaxIULen   = 68 + 8192 // Linux ib_srp's, with immediate data
	// ImmDataOffset is where the initiator puts immediate data: after a
	// 48-byte SRP_CMD, 16 bytes of additional CDB and the 4-byte
	// descriptor, as Linux ib_srp (SRP_IMM_DATA_OFFSET).
	ImmDataOffset         = 68
	DefaultMaxTransfer    = 512 << 10
	DefaultIndirectPieces = 4
	// DefaultRDMAReadDepth is the IRD offered at login: the target's RDMA
	// Reads of data-out in flight (Linux ib_srp offers 4).
	DefaultRDMAReadDepth       = 16
	DefaultConnectTimeout      = 10 * time.Second
	DefaultCommandTimeout      = 30 * time.Second
	maxInitiatorIndirectPieces = 32
)

// Config tunes an initiator session. Zero fields take defaults.
type Config struct {
	// Logger receives session events; nil discards them.
	Logger *slog.Logger
	// InitiatorPortID identifies this initiator port; zero means
	// DefaultPortID().
	InitiatorPortID srp.PortID
	// Channels is the number of RDMA channels (default 1). The first logs
	// in with MULTI-CHANNEL ACTION 0, the others with 1, as ib_srp's
	// ch_count does.
	Channels int
	// QueueDepth bounds the commands in flight per channel (default 64);
	// the target's credits bound it further (one is kept for task
	// management).
	QueueDepth int
	// MaxITIULen is the initiator-to-target IU length asked at login.
	MaxITIULen int
	// NoImmediateData does not ask for immediate data.
	NoImmediateData bool
	// MaxTransfer bounds one data transfer (default 512 KiB; the LU's
	// block limits may lower it).
	MaxTransfer int
	// Policy chooses the descriptor format; IndirectPieces is the number
	// of descriptors of indirect buffers (default 4, at most 32).
	Policy         DescriptorPolicy
	IndirectPieces int
	// RDMAReadDepth is the IRD offered at login: the target's RDMA Reads
	// of data-out in flight (default 16; Linux ib_srp offers 4).
	RDMAReadDepth int
	// ConnectTimeout bounds each channel's login; CommandTimeout fails a
	// channel whose command got no response for that long.
	ConnectTimeout time.Duration
	CommandTimeout time.Duration
	// OnAER is called with the LUN and sense data of every SRP_AER_REQ,
	// on a completion goroutine; it must be quick.
	OnAER func(lun uint64, sense []byte)
}

func (c *Config) setDefaults() error {
	if c.InitiatorPortID == (srp.PortID{}) {
		c.InitiatorPortID = DefaultPortID()
	}
	if c.Channels == 0 {
		c.Channels = 1
	}
	if c.QueueDepth == 0 {
		c.QueueDepth = DefaultQueueDepth
	}
	if c.MaxITIULen == 0 {
		c.MaxITIULen = DefaultMaxIULen
	}
	if c.MaxTransfer == 0 {
		c.MaxTransfer = DefaultMaxTransfer
	}
	if c.RDMAReadDepth == 0 {
		c.RDMAReadDepth = DefaultRDMAReadDepth
	}
	if c.IndirectPieces == 0 {
		c.IndirectPieces = DefaultIndirectPieces
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.CommandTimeout == 0 {
		c.CommandTimeout = DefaultCommandTimeout
	}
	switch {
	case c.Channels < 1 || c.Channels > 64:
		return fmt.Errorf("srp: %d channels: want 1 to 64", c.Channels)
	case c.QueueDepth < 1 || c.QueueDepth > 4096:
		return fmt.Errorf("srp: queue depth %d: want 1 to 4096", c.QueueDepth)
	case c.MaxITIULen < srp.MinITIULen:
		return fmt.Errorf("srp: IU length %d: want at least %d", c.MaxITIULen, srp.MinITIULen)
	case c.MaxTransfer < 512 || c.MaxTransfer > 64<<20:
		return fmt.Errorf("srp: maximum transfer %d: want 512 bytes to 64 MiB", c.MaxTransfer)
	case c.IndirectPieces < 1 || c.IndirectPieces > maxInitiatorIndirectPieces:
		return fmt.Errorf("srp: %d indirect pieces: want 1 to %d", c.IndirectPieces, maxInitiatorIndirectPieces)
	}
	return nil
}

// DefaultPortID returns initiator_ext 0 and a GUID hashed from
// the host name, stable across runs on one host.
func DefaultPortID() srp.PortID {
	h := fnv.New64a()
	name, _ := os.Hostname()
	io.WriteString(h, "rdisk-srp-initiator/"+name)
	return srp.MakePortID(0, h.Sum64())
}

// LoginError is a login the target refused with SRP_LOGIN_REJ.
type LoginError struct {
	Addr    string
	Channel int
	Reason  srp.RejectReason
	// BufFmt is the set of buffer formats the target says it supports.
	BufFmt uint16
}

// Error describes the reject.
func (e *LoginError) Error() string {
	s := fmt.Sprintf("srp: target %s rejected the login of channel %d: %s", e.Addr, e.Channel, e.Reason)
	if h := e.Reason.Hint(); h != "" {
		s += " (" + h + ")"
	}
	return s
}

// Unwrap returns the reason, so errors.Is(err, RejITIULenTooLarge) works.
func (e *LoginError) Unwrap() error { return e.Reason }

// SCSIError is a command that completed with a status other than GOOD:
// the SCSI host layer's error, shared with the iSER initiator. It matches
// the blockdev sentinel of its status and sense with errors.Is
// (host.StatusError.Class).
type SCSIError = host.StatusError

// newSCSIError returns the error of command name ending with status st.
func newSCSIError(name string, st scsi.Status, sense []byte) *SCSIError {
	return host.NewStatusError("srp", name, st, sense)
}

// Session is an initiator's login to an SRP target port: one or more RDMA
// channels (one I_T nexus). Its methods are safe for concurrent use.
type Session struct {
	cfg    Config
	log    *slog.Logger
	prov   rdma.Provider
	addr   string
	target srp.PortID
	pd     rdma.PD
	chans  []*ichannel
	login  srp.LoginRspFields

	devMu sync.Mutex
	devs  []*Device // the open Devices, for the asynchronous events

	closeOnce sync.Once
	closed    atomic.Bool
	watchStop chan struct{}
	watchDone chan struct{}
}

// Login logs in to the target port target at addr ("host:port") with
// cfg.Channels channels. Linux's own target (ib_srpt) and rdisk's accept
// this login over RDMA/CM (iWARP, RoCE).
func Login(ctx context.Context, p rdma.Provider, addr string, target srp.PortID, cfg Config) (*Session, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Session{cfg: cfg, log: log, prov: p, addr: addr, target: target, watchStop: make(chan struct{}), watchDone: make(chan struct{})}
	var err error
	if s.pd, err = p.AllocPD(); err != nil {
		return nil, fmt.Errorf("srp: allocating a PD: %w", err)
	}
	for i := 0; i < cfg.Channels; i++ {
		ch, err := s.connect(ctx, i)
		if err != nil {
			if i > 0 {
				// As ib_srp: keep the channels that logged in.
				log.Info("srp: fewer channels than asked", "connected", i, "err", err)
				break
			}
			s.pd.Close()
			return nil, err
		}
		s.chans = append(s.chans, ch)
	}
	go s.watchdog()
	return s, nil
}

// connect logs in channel i.
func (s *Session) connect(ctx context.Context, i int) (*ichannel, error) {
	cfg := &s.cfg
	ch := &ichannel{s: s, idx: i, logoutWR: make(chan struct{}, 1)}
	maxSlots := cfg.QueueDepth
	nrx := maxSlots + 3 // command responses, the task management response, a target request
	// The QP comes first, for the login; the queue's buffers follow once
	// the login response sized them.
	cq, err := s.prov.CreateCQ(2*maxSlots + nrx + 8)
	if err != nil {
		return nil, fmt.Errorf("srp: creating a CQ: %w", err)
	}
	qp, err := s.pd.CreateQP(rdmaq.HostQPConfig(cq, maxSlots+1, nrx, 3, ch))
	if err != nil {
		cq.Close()
		return nil, fmt.Errorf("srp: creating a QP: %w", err)
	}
	fail := func(err error) (*ichannel, error) {
		if ch.q != nil {
			ch.q.Close(blockdev.ErrClosed)
		} else {
			qp.Close()
			cq.Close()
		}
		if ch.remoteMR != nil {
			ch.remoteMR.Deregister()
		}
		return nil, err
	}
	lf := srp.LoginReqFields{
		Tag: uint64(i), ReqITIULen: uint32(cfg.MaxITIULen), ReqBufFmt: srp.BufFmtDirect,
		InitiatorPortID: cfg.InitiatorPortID, TargetPortID: s.target,
	}
	if cfg.Policy == PolicyIndirect || cfg.Policy == PolicyExternal {
		lf.ReqBufFmt |= srp.BufFmtIndirect
	}
	if i > 0 {
		lf.ReqFlags = srp.MultiChanMulti
	}
	if !cfg.NoImmediateData && cfg.MaxITIULen > ImmDataOffset {
		lf.ReqFlags |= srp.ImmedRequested
		lf.ImmDataOffset = ImmDataOffset
	}
	pd := make([]byte, srp.LoginReqRDMASize)
	srp.LoginReqRDMA(pd).Encode(&lf)
	cctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	reply, err := qp.Connect(cctx, s.addr, rdma.ConnParam{PrivateData: pd, ResponderResources: cfg.RDMAReadDepth})
	cancel()
	if err != nil {
		var rej *rdma.RejectError
		if errors.As(err, &rej) {
			if f, perr := srp.ParseLoginRej(rej.PrivateData); perr == nil {
				return fail(&LoginError{Addr: s.addr, Channel: i, Reason: f.Reason, BufFmt: f.BufFmt})
			}
		}
		return fail(fmt.Errorf("srp: login of channel %d to %s: %w", i, s.addr, err))
	}
	rsp, err := srp.ParseLoginRsp(reply)
	if err != nil {
		return fail(fmt.Errorf("srp: login of channel %d to %s: bad SRP_LOGIN_RSP: %w", i, s.addr, err))
	}
	if i == 0 {
		s.login = rsp
	}
	switch {
	case rsp.ReqLimDelta < 2:
		return fail(fmt.Errorf("srp: target %s granted %d credits; need 2", s.addr, rsp.ReqLimDelta))
	case rsp.MaxTIIULen < srp.RspSize || rsp.MaxTIIULen > 1<<20:
		return fail(fmt.Errorf("srp: target %s: max_ti_iu_len %d", s.addr, rsp.MaxTIIULen))
	case rsp.MaxITIULen < srp.CmdSize+srp.DirectDescSize:
		return fail(fmt.Errorf("srp: target %s: max_it_iu_len %d is too small for a command", s.addr, rsp.MaxITIULen))
	case cfg.Policy != PolicyAuto && cfg.Policy != PolicyDirect && rsp.BufFmt&srp.BufFmtIndirect == 0:
		return fail(fmt.Errorf("srp: target %s does not support indirect descriptors", s.addr))
	}
	ch.depth = min(maxSlots, int(rsp.ReqLimDelta)-1)
	itLen := min(cfg.MaxITIULen, int(rsp.MaxITIULen))
	if rsp.Flags&srp.LoginRspImmedSupp != 0 && lf.ReqFlags&srp.ImmedRequested != 0 && itLen > ImmDataOffset {
		ch.immOff = ImmDataOffset
		ch.maxImm = itLen - ImmDataOffset
	}
	ch.tiLen = int(rsp.MaxTIIULen)
	if err := ch.allocate(qp, cq, nrx, itLen, rsp.ReqLimDelta); err != nil {
		return fail(err)
	}
	ch.q.Start()
	s.log.Debug("srp: channel logged in", "channel", i, "addr", s.addr, "credits", rsp.ReqLimDelta, "depth", ch.depth,
		"max_it_iu_len", rsp.MaxITIULen, "max_ti_iu_len", rsp.MaxTIIULen, "immediate", ch.immOff != 0, "flags", rsp.Flags)
	return ch, nil
}

// allocate creates the channel's queue on its logged-in QP: depth command
// slots with their IU buffers and fast-registration keys, the task
// management slot, nrx receive buffers of the target's IU length, and the
// request limit the login granted as the queue's credits.
func (ch *ichannel) allocate(qp rdma.QP, cq rdma.CQ, nrx, itLen int, credits int32) error {
	s := ch.s
	cfg := &s.cfg
	pieces := cfg.IndirectPieces
	iuStride := max(srp.CmdSize+16+srp.IndirectHdrSize+pieces*srp.DirectDescSize, ImmDataOffset)
	if iuStride > itLen && cfg.Policy != PolicyAuto && cfg.Policy != PolicyDirect {
		return fmt.Errorf("srp: %d indirect descriptors do not fit in the %d-byte IU", pieces, itLen)
	}
	q, err := rdmaq.NewHostQueue(rdmaq.HostConfig{
		Provider: s.prov, PD: s.pd, QP: qp, CQ: cq,
		Pools: []rdmaq.HostPool{{Slots: ch.depth, SendLen: iuStride}, {Slots: 1, SendLen: srp.TskMgmtSize}},
		Recvs: nrx, RecvLen: ch.tiLen, FastReg: cfg.MaxTransfer, Ctl: 3, CtlLen: ctlLen,
		Credits: int(credits), Reserve: 1, ReqErr: reqErr,
	}, ch)
	if err != nil {
		return fmt.Errorf("srp: %w", err)
	}
	ch.q = q
	remoteStride := (max(pieces*srp.DirectDescSize, 24) + 63) &^ 63
	ch.remote = backstore.AlignedBuffer(ch.depth*remoteStride, 4096)
	if ch.remoteMR, err = s.pd.RegisterMemory(ch.remote, rdma.AccessRemoteRead); err != nil {
		return fmt.Errorf("srp: registering descriptor tables: %w", err)
	}
	for i := range q.Slots() {
		x := &q.Slot(i).S
		x.done = make(chan struct{}, 1)
		if i < ch.depth {
			x.tableOf = i * remoteStride
			x.table = ch.remote[x.tableOf : x.tableOf+remoteStride]
		} else {
			x.kind = kindSync
		}
	}
	return nil
}

// watchdog fails channels whose commands went unanswered too long.
func (s *Session) watchdog() {
	defer close(s.watchDone)
	d := s.cfg.CommandTimeout
	t := time.NewTicker(min(d/4, time.Second))
	defer t.Stop()
	for {
		select {
		case <-s.watchStop:
			return
		case <-t.C:
			now := time.Now().UnixNano()
			for _, ch := range s.chans {
				if sl := ch.overdue(now, d); sl != nil {
					ch.fail(fmt.Errorf("srp: %s on channel %d: no response in %v", sl.S.name, ch.idx, d))
				}
			}
		}
	}
}

// Close logs every channel out (SRP_I_LOGOUT) and disconnects. Requests in
// flight complete with an error matching blockdev.ErrClosed.
func (s *Session) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.watchStop)
		<-s.watchDone
		var wg sync.WaitGroup
		for _, ch := range s.chans {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ch.close()
			}()
		}
		wg.Wait()
		s.pd.Close()
	})
	return nil
}

// Channels returns the number of logged-in channels.
func (s *Session) Channels() int { return len(s.chans) }

// Depth returns the commands channel i keeps in flight at most.
func (s *Session) Depth(i int) int { return s.chans[i].depth }

// Credits returns channel i's current request limit.
func (s *Session) Credits(i int) int { return s.chans[i].credits() }

// LoginResponse returns the first channel's SRP_LOGIN_RSP.
func (s *Session) LoginResponse() srp.LoginRspFields { return s.login }

// Immediate reports whether the target accepted immediate data.
func (s *Session) Immediate() bool { return s.chans[0].immOff != 0 }

// Events returns how many SRP_AER_REQ and SRP_CRED_REQ the session
// received.
func (s *Session) Events() (aer, credReq uint64) {
	for _, ch := range s.chans {
		aer += ch.aerCount.Load()
		credReq += ch.credReqs.Load()
	}
	return aer, credReq
}

// Err returns why the session failed, or nil while every channel is up.
func (s *Session) Err() error {
	for _, ch := range s.chans {
		if ch.q.Err() != nil {
			return ch.q.ReqErr()
		}
	}
	return nil
}

// AllocBuffer returns size bytes of registered memory (4096-aligned) for
// I/O on any channel of the session.
func (s *Session) AllocBuffer(size int) (blockdev.Buffer, error) {
	if s.closed.Load() {
		return nil, blockdev.ErrClosed
	}
	b, err := rdmaq.NewBuffer(s.pd, size, rdma.AccessLocalWrite, s)
	if err != nil {
		return nil, fmt.Errorf("srp: %w", err)
	}
	return b, nil
}

// xfer is a command's data buffer: n bytes at off in mr.
type xfer struct {
	dir scsi.Dir
	mr  rdma.MR
	off int
	n   int
	// param: the data is the slot's remote-readable parameter area.
	param bool
}

// build writes the SRP_CMD for cdb into the slot and returns its length
// and the data that follows it in line (immediate data).
func (ch *ichannel) build(sl *islot, lun uint64, cdb []byte, x xfer) (int, rdma.SGE, error) {
	if len(cdb) > 16 {
		return 0, rdma.SGE{}, fmt.Errorf("srp: CDB of %d bytes", len(cdb))
	}
	sl.S.lun = lun
	f := srp.CmdFields{Tag: sl.S.tag, LUN: scsi.EncodeLUN(lun), TaskAttr: srp.AttrSimple}
	copy(f.CDB[:], cdb)
	iu := sl.Buf()
	n := srp.CmdSize
	var data rdma.SGE
	cfg := &ch.s.cfg
	var fmtOut srp.DescFormat
	switch {
	case x.n == 0:
	case x.param:
		fmtOut = srp.DescDirect
		srp.DirectDesc{VA: ch.remoteMR.VA() + uint64(sl.S.tableOf), Key: ch.remoteMR.RKey(), Len: uint32(x.n)}.Put(iu[srp.CmdSize:])
		n += srp.DirectDescSize
	case x.dir == scsi.DirOut && cfg.Policy == PolicyAuto && ch.immOff != 0 && x.n <= ch.maxImm:
		fmtOut = srp.DescImmediate
		binary.BigEndian.PutUint32(iu[srp.CmdSize:], uint32(x.n))
		clear(iu[srp.CmdSize+srp.ImmediateHdrSize : ch.immOff])
		n = ch.immOff
		data = rdma.SGE{MR: x.mr, Offset: x.off, Length: x.n}
	default:
		access := rdma.AccessRemoteRead
		if x.dir == scsi.DirIn {
			access = rdma.AccessLocalWrite | rdma.AccessRemoteWrite
		}
		rkey, va, err := ch.q.Map(sl, x.mr, x.off, x.n, access)
		if err != nil {
			return 0, rdma.SGE{}, fmt.Errorf("srp: %w", err)
		}
		switch cfg.Policy {
		case PolicyIndirect, PolicyExternal:
			k := min(cfg.IndirectPieces, x.n)
			table := sl.S.table
			inline := k
			if cfg.Policy == PolicyExternal {
				inline = k / 2
				if k == 1 {
					inline = 0
				}
			}
			off := 0
			for j := 0; j < k; j++ {
				l := x.n / k
				if j == k-1 {
					l = x.n - off
				}
				srp.DirectDesc{VA: va + uint64(off), Key: rkey, Len: uint32(l)}.Put(table[j*srp.DirectDescSize:])
				off += l
			}
			hdr := srp.DirectDesc{VA: ch.remoteMR.VA() + uint64(sl.S.tableOf), Key: ch.remoteMR.RKey(), Len: uint32(k * srp.DirectDescSize)}
			srp.PutIndirectHdr(iu[srp.CmdSize:], hdr, uint32(x.n))
			copy(iu[srp.CmdSize+srp.IndirectHdrSize:], table[:inline*srp.DirectDescSize])
			n += srp.IndirectHdrSize + inline*srp.DirectDescSize
			fmtOut = srp.DescIndirect
			if x.dir == scsi.DirOut {
				f.DataOutCount = uint8(inline)
			} else {
				f.DataInCount = uint8(inline)
			}
		default:
			fmtOut = srp.DescDirect
			srp.DirectDesc{VA: va, Key: rkey, Len: uint32(x.n)}.Put(iu[srp.CmdSize:])
			n += srp.DirectDescSize
		}
	}
	if x.dir == scsi.DirOut {
		f.DataOutFmt = fmtOut
	} else if x.dir == scsi.DirIn {
		f.DataInFmt = fmtOut
	}
	srp.Cmd(iu).Encode(&f)
	return n, data, nil
}

// Command is a SCSI command for Session.Exec.
type Command struct {
	LUN uint64
	// CDB is the command descriptor block (at most 16 bytes).
	CDB []byte
	// Dir and Data are the transfer: Data is plain memory, registered for
	// the command's duration (len(Data) is the expected length).
	Dir  scsi.Dir
	Data []byte
	// OnSend, if set, is called with the command's tag just before its IU
	// is posted (to name it in ABORT TASK).
	OnSend func(tag uint64)

	// Results.
	Status scsi.Status
	Sense  []byte
	// Flags are the SRP_RSP flags (residual over/underflow);
	// Residual the residual count of the command's direction.
	Flags    uint8
	Residual uint32
	Tag      uint64
}

// Exec runs c on channel ch (modulo the channel count) and waits for its
// response. It returns an error for transport failures; the SCSI status is
// in c.Status (a *SCSIError is also returned for statuses other than GOOD;
// Exec sends the command once: host.Do, through RunSCSI, retries unit
// attentions). If ctx ends first, Exec returns ctx.Err() and the command completes in
// the background.
func (s *Session) Exec(ctx context.Context, chIdx int, c *Command) error {
	if s.closed.Load() {
		return blockdev.ErrClosed
	}
	ch := s.chans[uint(chIdx)%uint(len(s.chans))]
	sl, err := ch.acquire(ctx)
	if err != nil {
		return err
	}
	x := &sl.S
	x.kind, x.name = kindSync, host.CommandName(c.CDB)
	xf := xfer{dir: c.Dir}
	if len(c.Data) > 0 && c.Dir != scsi.DirNone {
		if len(c.Data) > s.cfg.MaxTransfer {
			ch.release(sl, true)
			return fmt.Errorf("srp: %d bytes exceed the %d-byte transfer limit", len(c.Data), s.cfg.MaxTransfer)
		}
		if x.tmp, err = s.pd.RegisterMemory(c.Data, rdma.AccessLocalWrite); err != nil {
			ch.release(sl, true)
			return fmt.Errorf("srp: registering %d bytes: %w", len(c.Data), err)
		}
		xf.mr, xf.n = x.tmp, len(c.Data)
	}
	n, data, err := ch.build(sl, c.LUN, c.CDB, xf)
	if err != nil {
		ch.q.Unmap(sl)
		ch.dropTmp(sl)
		ch.release(sl, true)
		return err
	}
	c.Tag = x.tag
	if c.OnSend != nil {
		c.OnSend(x.tag)
	}
	if err := ch.post(sl, n, data); err != nil {
		ch.dropTmp(sl)
		ch.release(sl, true)
		return err
	}
	var cdone <-chan struct{}
	if ctx != nil {
		cdone = ctx.Done()
	}
	select {
	case <-x.done:
	case <-cdone:
		ch.mu.Lock()
		if !x.completed {
			x.orphan = true
			ch.mu.Unlock()
			return ctx.Err()
		}
		ch.mu.Unlock()
		<-x.done
	}
	ch.dropTmp(sl)
	c.Status, c.Flags = scsi.Status(x.status), x.flags
	c.Sense = append(c.Sense[:0], x.sense[:x.senseLen]...)
	switch {
	case c.Dir == scsi.DirIn:
		c.Residual = x.inResid
	case c.Dir == scsi.DirOut:
		c.Residual = x.outResid
	}
	err = result(sl)
	ch.release(sl, false)
	return err
}

// TaskManagement sends a task management function on channel chIdx and
// returns the target's response code. taskTag names the command for
// TskAbortTask (Command.Tag). If ctx ends first the channel is failed: a
// task management function cannot be left behind.
func (s *Session) TaskManagement(ctx context.Context, chIdx int, fn srp.TaskFunc, lun uint64, taskTag uint64) (srp.TMRespCode, error) {
	if s.closed.Load() {
		return 0, blockdev.ErrClosed
	}
	ch := s.chans[uint(chIdx)%uint(len(s.chans))]
	sl, err := ch.q.Acquire(ctx, poolTMF) // the task management slot, and a credit
	if err != nil {
		return 0, err
	}
	x := &sl.S
	ch.tmfSeq++
	x.tag = tagTMF | ch.tmfSeq
	x.name, x.completed, x.orphan, x.respCode = fn.String(), false, false, -1
	srp.EncodeTskMgmt(sl.Buf(), &srp.TskMgmtFields{Tag: x.tag, LUN: scsi.EncodeLUN(lun), Func: fn, TaskTag: taskTag})
	sentAt := time.Now().UnixNano()
	if err := ch.post(sl, srp.TskMgmtSize, rdma.SGE{}); err != nil {
		ch.release(sl, true)
		return 0, err
	}
	select {
	case <-x.done:
	case <-ctx.Done():
		ch.fail(fmt.Errorf("srp: %s on channel %d: %w", fn, ch.idx, ctx.Err()))
		<-x.done
	}
	code, err := srp.TMRespCode(x.respCode), sl.Err
	if x.respCode < 0 && err == nil {
		err = fmt.Errorf("srp: %s: response without response data", fn)
	}
	ch.release(sl, false)
	if err == nil && code == srp.TMComplete {
		// The target aborted these commands silently: complete them here.
		var match func(*islot) bool
		switch fn {
		case srp.TskAbortTask:
			match = func(x *islot) bool { return x.S.tag == taskTag }
		case srp.TskAbortTaskSet, srp.TskClearTaskSet, srp.TskLUNReset:
			match = func(x *islot) bool { return x.S.lun == lun }
		}
		if match != nil {
			for _, c := range s.chans {
				c.abortLocal(match, sentAt)
			}
		}
	}
	return code, err
}

// ReportLUNs returns the LUN numbers the target reports (REPORT LUNS).
func (s *Session) ReportLUNs(ctx context.Context) ([]uint64, error) {
	luns, err := host.ReportLUNs(ctx, s)
	if err != nil {
		return nil, fmt.Errorf("srp: %w", err)
	}
	return luns, nil
}

// Inquiry is the standard INQUIRY data of a logical unit.
type Inquiry = host.InquiryData

// Inquiry returns the standard INQUIRY data of lun.
func (s *Session) Inquiry(ctx context.Context, lun uint64) (Inquiry, error) {
	inq, err := host.Inquiry(ctx, s, lun)
	if err != nil {
		return Inquiry{}, fmt.Errorf("srp: LUN %d: %w", lun, err)
	}
	return inq, nil
}

// Capacity is what READ CAPACITY(16) reports.
type Capacity = host.Capacity

// ReadCapacity returns the capacity of lun (READ CAPACITY(16)).
func (s *Session) ReadCapacity(ctx context.Context, lun uint64) (Capacity, error) {
	c, err := host.ReadCapacity(ctx, s, lun)
	if err != nil {
		return Capacity{}, fmt.Errorf("srp: LUN %d: %w", lun, err)
	}
	return c, nil
}
