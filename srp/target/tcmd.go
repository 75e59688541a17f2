package target

import (
	"errors"
	"github.com/rdisk/rdisk/srp"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/scsi"
)

// start begins the IU received in buffer i (n bytes) on slot s. It runs on
// the loop, or on the goroutine that freed s for an IU that waited.
func (ch *channel) start(s *slot, i, n int) {
	b := ch.recvIU(i, n)
	s.recv, s.n, s.abort, s.readsLeft, s.readErr, s.fetching = i, n, abortNone, 0, false, false
	if srp.Opcode(b[0]) == srp.OpTskMgmt {
		f, err := srp.ParseTskMgmt(b)
		if err != nil {
			ch.drop(s, false)
			ch.logout(srp.TLogoutInvalidIUType)
			return
		}
		s.isTMF, s.tmf, s.tag, s.solNot = true, f, f.Tag, f.SolNot
		ch.t.stats.tmfs.Add(1)
		ch.mu.Lock()
		if ch.dead {
			ch.mu.Unlock()
			return
		}
		ch.responders++
		s.state = slotExecuting
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
	s.isTMF, s.tag, s.solNot = false, c.Tag(), c.SolNot()
	k := copy(s.cdb[:], c.CDB())
	lun, lerr := scsi.DecodeLUN(c.LUN())
	if lerr != nil {
		lun = scsi.MaxLUN + 1 // answered with LOGICAL UNIT NOT SUPPORTED
	}
	s.lun = lun
	cmd := &s.cmd
	cmd.CDB, cmd.LUN, cmd.Tag, cmd.Attr = s.cdb[:k], lun, s.tag, taskAttr(c.TaskAttr())
	cmd.Dir, cmd.ExpectedLength, cmd.DataIn, cmd.DataOut = scsi.DirNone, 0, nil, nil
	ch.mu.Lock()
	ch.responders++
	ch.mu.Unlock()

	cfg := &ch.t.cfg
	d, err := srp.ParseData(c, n, ch.immOff, s.descs[:0], cfg.MaxDescriptors)
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
	s.data = d
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
		cmd.DataIn = s.buf[:d.Length]
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
		cmd.DataOut = s.buf[:need]
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

// drop forgets a slot whose IU ends the channel (mu not held).
func (ch *channel) drop(s *slot, counted bool) {
	ch.mu.Lock()
	if counted {
		ch.responders--
	}
	s.recv = -1
	ch.freeSlot(s)
	ch.mu.Unlock()
}

// ensureBuf gives the slot a registered data buffer of at least n bytes,
// growing it in powers of two; on failure it fails the command.
func (ch *channel) ensureBuf(s *slot, n int) bool {
	if cap(s.buf) >= n && s.bufMR != nil {
		s.buf = s.buf[:cap(s.buf)]
		return true
	}
	size := 4096
	for size < n {
		size <<= 1
	}
	buf := backstore.AlignedBuffer(size, 4096)
	mr, err := ch.pd.RegisterMemory(buf, rdma.AccessLocalWrite)
	if err != nil {
		ch.log.Warn("srp: registering a data buffer failed", "bytes", size, "err", err)
		ch.fail(s, scsi.KeyHardwareError, scsi.ASCInternalTargetFailure, -1)
		return false
	}
	if s.bufMR != nil {
		s.bufMR.Deregister()
	}
	s.buf, s.bufMR = buf, mr
	return true
}

// fetchTable reads an indirect table that is not wholly in the IU.
func (ch *channel) fetchTable(s *slot) {
	cfg := &ch.t.cfg
	if cfg.NoExternalTables {
		ch.fail(s, scsi.KeyIllegalRequest, scsi.ASCInvalidFieldInCommandIU, srp.CmdSize)
		return
	}
	if s.tableMR == nil {
		s.table = make([]byte, cfg.MaxDescriptors*srp.DirectDescSize)
		mr, err := ch.pd.RegisterMemory(s.table, rdma.AccessLocalWrite)
		if err != nil {
			s.table = nil
			ch.fail(s, scsi.KeyHardwareError, scsi.ASCInternalTargetFailure, -1)
			return
		}
		s.tableMR = mr
	}
	t := s.data.Table
	ch.mu.Lock()
	s.state, s.fetching, s.readsLeft = slotReading, true, 1
	ch.mu.Unlock()
	s.sge[0] = rdma.SGE{MR: s.tableMR, Length: int(t.Len)}
	s.wr = rdma.SendWR{ID: wrRead | uint64(s.idx), Op: rdma.OpRDMARead, Flags: rdma.Signaled, SGL: s.sge[:], RemoteAddr: t.VA, RemoteKey: t.Key}
	if err := ch.qp.PostSend(&s.wr); err != nil {
		ch.shutdown("posting an RDMA Read: " + err.Error())
	}
}

// readData pulls the data-out bytes with RDMA Reads, one per descriptor.
func (ch *channel) readData(s *slot) {
	total := len(s.cmd.DataOut)
	reads := 0
	for rem, i := total, 0; rem > 0 && i < len(s.data.Descs); i++ {
		rem -= min(rem, int(s.data.Descs[i].Len))
		reads++
	}
	if reads == 0 {
		ch.dispatch(s)
		return
	}
	ch.mu.Lock()
	s.state, s.fetching, s.readsLeft = slotReading, false, reads
	ch.mu.Unlock()
	off := 0
	for _, d := range s.data.Descs {
		if off == total {
			break
		}
		n := min(total-off, int(d.Len))
		s.sge[0] = rdma.SGE{MR: s.bufMR, Offset: off, Length: n}
		s.wr = rdma.SendWR{ID: wrRead | uint64(s.idx), Op: rdma.OpRDMARead, Flags: rdma.Signaled, SGL: s.sge[:], RemoteAddr: d.VA, RemoteKey: d.Key}
		if err := ch.qp.PostSend(&s.wr); err != nil {
			ch.shutdown("posting an RDMA Read: " + err.Error())
			return
		}
		off += n
	}
}

// onRead handles an RDMA Read completion (on the loop).
func (ch *channel) onRead(s *slot) {
	s.readsLeft--
	if s.readsLeft > 0 {
		return
	}
	if !s.fetching {
		ch.dispatch(s)
		return
	}
	s.fetching = false
	if err := srp.ParseTable(&s.data, s.table); err != nil {
		var fe *srp.FormatError
		field := srp.CmdSize
		if errors.As(err, &fe) {
			field = fe.Field
		}
		ch.fail(s, scsi.KeyIllegalRequest, scsi.ASCInvalidFieldInCommandIU, field)
		return
	}
	if s.cmd.Dir == scsi.DirOut {
		ch.readData(s)
		return
	}
	ch.dispatch(s)
}

// dispatch hands a command to the workers, or runs it at once when its
// disk never blocks (RAM, null), as the iSER target does: no hand-off.
func (ch *channel) dispatch(s *slot) {
	inline := false
	if !ch.t.cfg.NoInline {
		if lu := ch.port.st.LU(s.lun); lu != nil {
			switch lu.Disk().(type) {
			case *backstore.Mem, *backstore.Null:
				inline = true
			}
		}
	}
	ch.mu.Lock()
	if ch.dead {
		ch.mu.Unlock()
		return
	}
	s.state = slotQueued
	if !inline {
		ch.work <- s.idx // never blocks: room for every slot
	}
	ch.mu.Unlock()
	if inline {
		ch.exec(s)
	}
}

// worker runs commands until the channel ends.
func (ch *channel) worker() {
	defer ch.wg.Done()
	for idx := range ch.work {
		ch.exec(&ch.slots[idx])
	}
}

func (ch *channel) exec(s *slot) {
	ch.mu.Lock()
	ab := s.abort
	s.state = slotExecuting
	ch.mu.Unlock()
	c := &s.cmd
	switch ab {
	case abortSilent:
		ch.silent(s)
		return
	case abortStatus:
		c.Status, c.SenseLen, c.DataInLen, c.ResidualKind, c.Residual = scsi.StatusTaskAborted, 0, 0, scsi.ResidualNone, 0
		ch.respond(s)
		return
	}
	ch.nx.sess.Execute(c)
	if c.Aborted {
		ch.silent(s)
		return
	}
	ch.respond(s)
}

// silent ends a command aborted by its own nexus: no response; its credit
// goes back with the next response or an SRP_CRED_REQ.
func (ch *channel) silent(s *slot) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.repost(s)
	ch.responders--
	ch.freeSlot(s)
	ch.maybeCredReq()
}

// fail completes a command with CHECK CONDITION without executing it.
// field is the IU byte of the sense-key-specific field pointer, or -1.
func (ch *channel) fail(s *slot, key scsi.SenseKey, asc scsi.ASC, field int) {
	c := &s.cmd
	c.Status = scsi.StatusCheckCondition
	c.SenseLen = scsi.EncodeFixedSense(s.sense[:], key, asc, field)
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
	c := &s.cmd
	if c.Dir == scsi.DirIn && c.DataInLen > 0 {
		off := 0
		for _, d := range s.data.Descs {
			if off == c.DataInLen {
				break
			}
			n := min(c.DataInLen-off, int(d.Len))
			s.sge[0] = rdma.SGE{MR: s.bufMR, Offset: off, Length: n}
			s.wr = rdma.SendWR{ID: wrWrite | uint64(s.idx), Op: rdma.OpRDMAWrite, SGL: s.sge[:], RemoteAddr: d.VA, RemoteKey: d.Key}
			if err := ch.qp.PostSend(&s.wr); err != nil {
				ch.shutdown("posting an RDMA Write: " + err.Error())
				break
			}
			off += n
		}
	}
	f := srp.RspFields{Tag: s.tag, Status: uint8(c.Status)}
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
	sense := s.sense[:min(c.SenseLen, ch.tiLen-srp.RspSize)]
	ch.sendRsp(s, &f, nil, sense, good)
}

// sendRsp posts a response IU for slot s, returning the slot's credit and
// any pending ones.
func (ch *channel) sendRsp(s *slot, f *srp.RspFields, respData, sense []byte, good bool) {
	var flags rdma.WRFlags = rdma.Signaled
	if (good && s.solNot&srp.SolNotSuccessful != 0) || (!good && s.solNot&srp.SolNotFailed != 0) {
		f.SolNot = srp.SolNotSolicited
		flags |= rdma.Solicited
	}
	ch.mu.Lock()
	ch.repost(s)
	ch.responders--
	f.ReqLimDelta = ch.takeCredits()
	s.state = slotResponding
	dead := ch.dead
	ch.mu.Unlock()
	n := srp.EncodeRsp(s.rsp, f, respData, sense)
	s.sge[0] = rdma.SGE{MR: ch.rspMR, Offset: s.idx * ch.rspStride, Length: n}
	s.wr = rdma.SendWR{ID: wrRsp | uint64(s.idx), Op: rdma.OpSend, Flags: flags, SGL: s.sge[:]}
	if dead {
		return
	}
	if err := ch.qp.PostSend(&s.wr); err != nil {
		ch.shutdown("posting a response: " + err.Error())
	}
}

// runTMF performs a task management function on its own goroutine: the SCSI
// core waits there for the aborted commands, which run on the workers.
func (ch *channel) runTMF(s *slot) {
	defer ch.wg.Done()
	code := ch.taskManagement(&s.tmf)
	good := code == srp.TMComplete || code == srp.TMSucceeded
	ch.sendRsp(s, &srp.RspFields{Tag: s.tag}, []byte{0, 0, 0, byte(code)}, nil, good)
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
			for i := range c.slots {
				s := &c.slots[i]
				if s.state != slotReading && s.state != slotQueued {
					continue
				}
				if s.isTMF || s.lun != lun || (fn == scsi.TMFAbortTask && s.tag != tag) {
					continue
				}
				if fn == scsi.TMFClearACA {
					continue
				}
				s.abort = mark
				n++
			}
			c.mu.Unlock()
		}
	}
	return n
}
