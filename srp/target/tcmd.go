package target

import (
	"errors"
	"github.com/rdisk/rdisk/srp"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/rdmaq"
	"github.com/rdisk/rdisk/scsi"
)

// Start implements rdmaq.TargetHandler: it begins the IU m on slot s. It
// runs on the loop, or on the goroutine that freed a slot for an IU that
// waited.
func (ch *channel) Start(s *slot, m rdmaq.Msg) error {
	ch.start(s, m.Head, m.Len)
	return nil
}

func (ch *channel) start(s *slot, b []byte, n int) {
	s.R.n, s.R.abort, s.R.fetching = n, abortNone, false
	if srp.Opcode(b[0]) == srp.OpTskMgmt {
		f, err := srp.ParseTskMgmt(b)
		if err != nil {
			ch.drop(s, false)
			ch.logout(srp.TLogoutInvalidIUType)
			return
		}
		s.R.isTMF, s.R.tmf, s.R.tag, s.R.solNot = true, f, f.Tag, f.SolNot
		ch.t.stats.tmfs.Add(1)
		ch.mu.Lock()
		if ch.dead {
			ch.mu.Unlock()
			return
		}
		ch.responders++
		s.R.state = slotExecuting
		ch.wg.Add(1)
		ch.mu.Unlock()
		go ch.runTMF(s)
		return
	}
	c, err := srp.ParseCmd(b)
	if err != nil {
		ch.drop(s, false)
		ch.logout(srp.TLogoutInvalidIUType)
		return
	}
	s.R.isTMF, s.R.tag, s.R.solNot = false, c.Tag(), c.SolNot()
	k := copy(s.R.cdb[:], c.CDB())
	lun, lerr := scsi.DecodeLUN(c.LUN())
	if lerr != nil {
		lun = scsi.MaxLUN + 1 // answered with LOGICAL UNIT NOT SUPPORTED
	}
	s.R.lun = lun
	cmd := &s.R.cmd
	cmd.CDB, cmd.LUN, cmd.Tag, cmd.Attr = s.R.cdb[:k], lun, s.R.tag, taskAttr(c.TaskAttr())
	cmd.Dir, cmd.ExpectedLength, cmd.DataIn, cmd.DataOut, cmd.Views = scsi.DirNone, 0, nil, nil, nil
	ch.mu.Lock()
	ch.responders++
	ch.mu.Unlock()

	cfg := &ch.t.cfg
	d, err := srp.ParseData(c, n, ch.immOff, s.R.descs[:0], cfg.MaxDescriptors)
	if err == nil && cfg.NoIndirect && d.Format == srp.DescIndirect {
		r := srp.TLogoutUnsupportedInFmt
		if d.Dir == scsi.DirOut {
			r = srp.TLogoutUnsupportedOutFmt
		}
		err = &srp.FormatError{Logout: r, LogoutSet: true, Msg: "indirect descriptors are not supported"}
	}
	if err != nil {
		var fe *srp.FormatError
		errors.As(err, &fe)
		if fe != nil && fe.LogoutSet {
			ch.log.Info("srp: bad SRP_CMD", "err", err)
			ch.drop(s, true)
			ch.logout(fe.Logout)
			return
		}
		field := 5
		if fe != nil {
			field = fe.Field
		}
		ch.fail(s, scsi.KeyIllegalRequest, scsi.ASCInvalidFieldInCommandIU, field)
		return
	}
	s.R.data = d
	cmd.Dir, cmd.ExpectedLength = d.Dir, d.Length
	st := &ch.t.stats
	st.commands.Add(1)
	switch {
	case d.Format == srp.DescDirect:
		st.direct.Add(1)
	case d.Format == srp.DescImmediate:
		st.immediate.Add(1)
	case d.External:
		st.external.Add(1)
	case d.Format == srp.DescIndirect:
		st.indirect.Add(1)
	}
	if d.Format != srp.DescImmediate && d.Length > uint32(cfg.MaxTransfer) {
		ch.fail(s, scsi.KeyIllegalRequest, scsi.ASCInvalidFieldInCommandIU, srp.CmdSize+c.AddCDBLen())
		return
	}
	switch d.Dir {
	case scsi.DirNone:
		ch.dispatch(s)
	case scsi.DirIn:
		if !ch.ensureBuf(s, int(d.Length)) {
			return
		}
		cmd.DataIn = s.Data()[:d.Length]
		if !d.External && len(d.Descs) == 1 && ch.q.Implicit() != nil {
			// One remote buffer: a RAM disk read goes straight from
			// its memory (respond).
			cmd.Views = s.R.views[:]
		}
		if d.External {
			ch.fetchTable(s)
			return
		}
		ch.dispatch(s)
	case scsi.DirOut:
		if d.Format == srp.DescImmediate {
			cmd.DataOut = b[d.ImmOffset : d.ImmOffset+d.ImmLen]
			ch.dispatch(s)
			return
		}
		need := ch.nx.sess.DataOutLength(lun, cmd.CDB, d.Length)
		if !ch.ensureBuf(s, int(need)) {
			return
		}
		cmd.DataOut = s.Data()[:need]
		if d.External {
			ch.fetchTable(s)
			return
		}
		ch.readData(s)
	}
}

func taskAttr(a uint8) scsi.TaskAttr {
	switch a {
	case srp.AttrSimple:
		return scsi.AttrSimple
	case srp.AttrHeadOfQueue:
		return scsi.AttrHeadOfQueue
	case srp.AttrACA:
		return scsi.AttrACA
	}
	return scsi.AttrOrdered // as Linux srpt maps reserved values
}

// drop forgets a slot whose IU ends the channel (mu not held); its
// receive buffer goes with the channel.
func (ch *channel) drop(s *slot, counted bool) {
	ch.mu.Lock()
	if counted {
		ch.responders--
	}
	s.R.state, s.R.abort, s.R.isTMF = slotFree, abortNone, false
	ch.mu.Unlock()
	ch.q.Free(s)
}

// ensureBuf gives the slot a registered data buffer of at least n bytes;
// on failure it fails the command.
func (ch *channel) ensureBuf(s *slot, n int) bool {
	if _, err := s.EnsureData(n); err != nil {
		ch.log.Warn("srp: registering a data buffer failed", "bytes", n, "err", err)
		ch.fail(s, scsi.KeyHardwareError, scsi.ASCInternalTargetFailure, -1)
		return false
	}
	return true
}

// fetchTable reads an indirect table that is not wholly in the IU.
func (ch *channel) fetchTable(s *slot) {
	cfg := &ch.t.cfg
	if cfg.NoExternalTables {
		ch.fail(s, scsi.KeyIllegalRequest, scsi.ASCInvalidFieldInCommandIU, srp.CmdSize)
		return
	}
	if s.R.tableMR == nil {
		s.R.table = make([]byte, cfg.MaxDescriptors*srp.DirectDescSize)
		mr, err := ch.q.PD().RegisterMemory(s.R.table, rdma.AccessLocalWrite)
		if err != nil {
			s.R.table = nil
			ch.fail(s, scsi.KeyHardwareError, scsi.ASCInternalTargetFailure, -1)
			return
		}
		s.R.tableMR = mr
	}
	t := s.R.data.Table
	ch.mu.Lock()
	s.R.state, s.R.fetching = slotReading, true
	ch.mu.Unlock()
	ch.q.Fetch(s, 1)
	if err := ch.q.ReadSGE(s, rdma.SGE{MR: s.R.tableMR, Length: int(t.Len)}, t.VA, t.Key); err != nil {
		ch.shutdown(err.Error())
	}
}

// readData pulls the data-out bytes with RDMA Reads, one per descriptor.
func (ch *channel) readData(s *slot) {
	total := len(s.R.cmd.DataOut)
	reads := 0
	for rem, i := total, 0; rem > 0 && i < len(s.R.data.Descs); i++ {
		rem -= min(rem, int(s.R.data.Descs[i].Len))
		reads++
	}
	if reads == 0 {
		ch.dispatch(s)
		return
	}
	ch.mu.Lock()
	s.R.state, s.R.fetching = slotReading, false
	ch.mu.Unlock()
	ch.q.Fetch(s, reads)
	off := 0
	for _, d := range s.R.data.Descs {
		if off == total {
			break
		}
		n := min(total-off, int(d.Len))
		if err := ch.q.ReadSGE(s, rdma.SGE{MR: s.DataMR(), Offset: off, Length: n}, d.VA, d.Key); err != nil {
			ch.shutdown(err.Error())
			return
		}
		off += n
	}
}

// Fetched implements rdmaq.TargetHandler: the RDMA Reads of the table or
// of the data-out completed.
func (ch *channel) Fetched(s *slot) error {
	ch.onRead(s)
	return nil
}

func (ch *channel) onRead(s *slot) {
	if !s.R.fetching {
		ch.dispatch(s)
		return
	}
	s.R.fetching = false
	if err := srp.ParseTable(&s.R.data, s.R.table); err != nil {
		var fe *srp.FormatError
		field := srp.CmdSize
		if errors.As(err, &fe) {
			field = fe.Field
		}
		ch.fail(s, scsi.KeyIllegalRequest, scsi.ASCInvalidFieldInCommandIU, field)
		return
	}
	if s.R.cmd.Dir == scsi.DirOut {
		ch.readData(s)
		return
	}
	ch.dispatch(s)
}

// dispatch hands a command to the workers, or runs it at once when its
// disk never blocks (RAM, null), as the iSER target does: no hand-off.
func (ch *channel) dispatch(s *slot) {
	inline := false
	// COMPARE AND WRITE and its kind wait for zero-copy reads to be
	// sent, which this goroutine (the loop) may have to see: a worker.
	if !ch.t.cfg.NoInline && !scsi.Exclusive(s.R.cmd.CDB) {
		if lu := ch.port.st.LU(s.R.lun); lu != nil {
			inline = backstore.TraitsOf(lu.Disk()).Waits == backstore.WaitsNever
		}
	}
	// Commands a backstore.AsyncDisk runs are started here too
	// (scsi.Session.Start): they hold no goroutine while at the disk.
	inline = inline || !ch.t.cfg.NoInline && ch.nx.sess.CanStart(&s.R.cmd)
	ch.mu.Lock()
	if ch.dead {
		ch.mu.Unlock()
		return
	}
	s.R.state = slotQueued
	if !inline {
		ch.pool.Submit(s) // never blocks: room for every slot
	}
	ch.mu.Unlock()
	if inline {
		ch.exec(s)
	}
}

// exec runs a command (on a worker, or inline for disks that never wait).
func (ch *channel) exec(s *slot) {
	ch.mu.Lock()
	ab := s.R.abort
	s.R.state = slotExecuting
	ch.mu.Unlock()
	c := &s.R.cmd
	if c.Dir == scsi.DirOut {
		// The data-out is in (RDMA Read or immediate data).
		ch.writeBytes.Add(uint64(len(c.DataOut)))
	}
	switch ab {
	case abortSilent:
		ch.silent(s)
		return
	case abortStatus:
		c.Status, c.SenseLen, c.DataInLen, c.ResidualKind, c.Residual = scsi.StatusTaskAborted, 0, 0, scsi.ResidualNone, 0
		ch.respond(s)
		return
	}
	ch.async.Add(1)
	if ch.nx.sess.Start(c) {
		return // asyncDone follows
	}
	ch.async.Done()
	ch.nx.sess.Execute(c)
	ch.executed(s)
}

// asyncDone ends a command scsi.Session.Start ran (on the disk's
// goroutine, or on the caller of Start).
func (ch *channel) asyncDone(s *slot) {
	ch.executed(s)
	ch.async.Done()
}

// executed answers a command that completed.
func (ch *channel) executed(s *slot) {
	if s.R.cmd.Aborted {
		ch.silent(s)
		return
	}
	ch.respond(s)
}

// silent ends a command aborted by its own nexus: no response; its credit
// goes back with the next response or an SRP_CRED_REQ.
func (ch *channel) silent(s *slot) {
	ch.mu.Lock()
	ch.repost(s)
	ch.responders--
	s.R.state, s.R.abort, s.R.isTMF = slotFree, abortNone, false
	ch.maybeCredReq()
	ch.mu.Unlock()
	ch.q.Free(s)
}

// fail completes a command with CHECK CONDITION without executing it.
// field is the IU byte of the sense-key-specific field pointer, or -1.
func (ch *channel) fail(s *slot, key scsi.SenseKey, asc scsi.ASC, field int) {
	c := &s.R.cmd
	c.Status = scsi.StatusCheckCondition
	c.SenseLen = scsi.EncodeFixedSense(s.R.sense[:], key, asc, field)
	c.DataInLen, c.ResidualKind, c.Residual = 0, scsi.ResidualNone, 0
	if c.ExpectedLength > 0 {
		c.ResidualKind, c.Residual = scsi.ResidualUnderflow, c.ExpectedLength
	}
	ch.respond(s)
}

// respond sends a command's data-in (RDMA Write) and its SRP_RSP. The
// receive buffer goes back to the initiator first, as Linux srpt and nvmet
// do, so the credit the response returns is always backed by a buffer.
func (ch *channel) respond(s *slot) {
	c := &s.R.cmd
	ch.commands.Add(1)
	switch {
	case c.Dir == scsi.DirIn && c.ViewsLen > 0:
		// Straight from the disk's memory to the one remote buffer
		// (start set Views only then); Sent releases it.
		sgl := s.R.vsgl[:c.ViewsLen]
		for i, b := range c.Views[:c.ViewsLen] {
			sgl[i] = rdma.SGE{MR: ch.q.Implicit(), Buf: b}
		}
		d := s.R.data.Descs[0]
		if c.DataInLen > int(d.Len) {
			ch.shutdown("srp: zero-copy read longer than its descriptor")
			break
		}
		if err := ch.q.WriteSGL(s, sgl, d.VA, d.Key); err != nil {
			ch.shutdown(err.Error())
			break
		}
		ch.readBytes.Add(uint64(c.DataInLen))
	case c.Dir == scsi.DirIn && c.DataInLen > 0:
		off := 0
		for _, d := range s.R.data.Descs {
			if off == c.DataInLen {
				break
			}
			n := min(c.DataInLen-off, int(d.Len))
			if err := ch.q.Write(s, off, n, d.VA, d.Key); err != nil {
				ch.shutdown(err.Error())
				break
			}
			off += n
		}
		ch.readBytes.Add(uint64(off))
	}
	f := srp.RspFields{Tag: s.R.tag, Status: uint8(c.Status)}
	if k := c.ResidualKind; k != scsi.ResidualNone {
		switch c.Dir {
		case scsi.DirIn:
			f.DataInResid = c.Residual
			f.Flags = srp.RspFlagDIUnder
			if k == scsi.ResidualOverflow {
				f.Flags = srp.RspFlagDIOver
			}
		case scsi.DirOut:
			f.DataOutResid = c.Residual
			f.Flags = srp.RspFlagDOUnder
			if k == scsi.ResidualOverflow {
				f.Flags = srp.RspFlagDOOver
			}
		}
	}
	good := c.Status == scsi.StatusGood || c.Status == scsi.StatusConditionMet
	sense := s.R.sense[:min(c.SenseLen, ch.tiLen-srp.RspSize)]
	ch.sendRsp(s, &f, nil, sense, good)
}

// sendRsp posts a response IU for slot s, returning the slot's credit and
// any pending ones.
func (ch *channel) sendRsp(s *slot, f *srp.RspFields, respData, sense []byte, good bool) {
	var flags rdma.WRFlags
	if (good && s.R.solNot&srp.SolNotSuccessful != 0) || (!good && s.R.solNot&srp.SolNotFailed != 0) {
		f.SolNot = srp.SolNotSolicited
		flags = rdma.Solicited
	}
	ch.mu.Lock()
	ch.repost(s)
	ch.responders--
	f.ReqLimDelta = ch.takeCredits()
	s.R.state = slotResponding
	dead := ch.dead
	ch.mu.Unlock()
	n := srp.EncodeRsp(s.Resp(), f, respData, sense)
	if dead {
		return
	}
	if err := ch.q.Respond(s, n, 0, flags); err != nil {
		ch.shutdown(err.Error())
	}
}

// runTMF performs a task management function on its own goroutine: the SCSI
// core waits there for the aborted commands, which run on the workers.
func (ch *channel) runTMF(s *slot) {
	defer ch.wg.Done()
	code := ch.taskManagement(&s.R.tmf)
	good := code == srp.TMComplete || code == srp.TMSucceeded
	ch.sendRsp(s, &srp.RspFields{Tag: s.R.tag}, []byte{0, 0, 0, byte(code)}, nil, good)
}

func (ch *channel) taskManagement(f *srp.TskMgmtFields) srp.TMRespCode {
	lun, err := scsi.DecodeLUN(f.LUN)
	if err != nil {
		return srp.TMIncorrectLUN
	}
	var fn scsi.TMF
	switch f.Func {
	case srp.TskAbortTask:
		fn = scsi.TMFAbortTask
	case srp.TskAbortTaskSet:
		fn = scsi.TMFAbortTaskSet
	case srp.TskClearTaskSet:
		fn = scsi.TMFClearTaskSet
	case srp.TskLUNReset:
		fn = scsi.TMFLUNReset
	case srp.TskClearACA:
		fn = scsi.TMFClearACA
	default:
		return srp.TMNotSupported
	}
	dropped := ch.port.dropQueued(ch.nx, fn, lun, f.TaskTag)
	r := ch.nx.sess.TaskManagement(ch.ctx, fn, lun, f.TaskTag)
	ch.log.Debug("srp: task management", "function", f.Func, "lun", lun, "task", f.TaskTag, "result", r, "dropped", dropped)
	switch r {
	case scsi.TMFComplete, scsi.TMFTaskNotFound:
		// SAM-5: aborting a task that does not exist completes.
		return srp.TMComplete
	case scsi.TMFSucceeded:
		return srp.TMSucceeded
	case scsi.TMFIncorrectLUN:
		return srp.TMIncorrectLUN
	case scsi.TMFRejected:
		return srp.TMNotSupported
	}
	return srp.TMFailed
}

// dropQueued marks the commands that task management function fn affects
// but the SCSI core cannot see yet (RDMA Read in flight, or waiting for a
// worker): those of nexus nx silently, those of other nexuses (CLEAR TASK
// SET, LOGICAL UNIT RESET) with TASK ABORTED. It returns how many.
func (p *Port) dropQueued(nx *nexus, fn scsi.TMF, lun, tag uint64) int {
	n := 0
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, x := range p.nexuses {
		if x != nx && fn != scsi.TMFClearTaskSet && fn != scsi.TMFLUNReset {
			continue
		}
		mark := uint8(abortSilent)
		if x != nx {
			mark = abortStatus
		}
		for _, c := range x.channels {
			c.mu.Lock()
			for i := range c.q.Slots() {
				s := c.q.Slot(i)
				if s.R.state != slotReading && s.R.state != slotQueued {
					continue
				}
				if s.R.isTMF || s.R.lun != lun || (fn == scsi.TMFAbortTask && s.R.tag != tag) {
					continue
				}
				if fn == scsi.TMFClearACA {
					continue
				}
				s.R.abort = mark
				n++
			}
			c.mu.Unlock()
		}
	}
	return n
}
