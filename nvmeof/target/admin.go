package target

import (
	"errors"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/nvmeof"
)

// admin executes an admin command (not a Fabrics one) on controller c.
func (c *controller) admin(r *request, sqe nvmeof.SQE) {
	if c.disc {
		switch r.kind {
		case nvmeof.KindIdentify, nvmeof.KindGetLogPage, nvmeof.KindKeepAlive, nvmeof.KindAsyncEventRequest,
			nvmeof.KindSetFeatures, nvmeof.KindGetFeatures:
		default:
			r.status, r.errLoc = nvmeof.StatusInvalidOpcode.WithDNR(), nvmeof.OffsetOpcode
			return
		}
	}
	switch r.kind {
	case nvmeof.KindIdentify:
		c.identify(r, sqe.Identify())
	case nvmeof.KindGetLogPage:
		c.getLogPage(r, sqe.GetLogPage())
	case nvmeof.KindSetFeatures:
		c.setFeatures(r, sqe.Features())
	case nvmeof.KindGetFeatures:
		c.getFeatures(r, sqe.Features())
	case nvmeof.KindKeepAlive:
		c.traffic()
	case nvmeof.KindAbort:
		// Commands run to completion quickly; like nvmet, report that the
		// command was not aborted.
		r.result = uint64(nvmeof.AbortNotAborted)
	default:
		r.status, r.errLoc = nvmeof.StatusInvalidOpcode.WithDNR(), nvmeof.OffsetOpcode
	}
}

// parkAER holds an Asynchronous Event Request until an event occurs (or
// completes it at once with a pending one). The command's receive buffer
// must already be reposted: a parked request may be completed from any
// goroutine.
func (c *controller) parkAER(q *sq, r *request) error {
	c.mu.Lock()
	if len(c.aers) >= maxAERs {
		c.mu.Unlock()
		r.status = nvmeof.StatusAsyncEventLimitExceeded.WithDNR()
		return q.respond(r)
	}
	r.state = reqParked
	c.aers = append(c.aers, &aerSlot{q: q, r: r})
	c.deliverLocked()
	return nil
}

// out returns the data buffer for a controller-to-host transfer of n bytes
// of structure: the command's buffer if large enough, noting the length.
func (r *request) out(n int) []byte {
	if r.xfer == nil {
		return nil
	}
	r.outLen = min(n, len(r.xfer))
	return r.xfer
}

func (c *controller) identify(r *request, cmd nvmeof.IdentifyCommand) {
	if len(r.xfer) < nvmeof.IdentifySize {
		if err := nvmeof.CheckTransferLen(uint32(r.xferLen), nvmeof.IdentifySize); err != nil {
			r.fail(asCommandError(err))
			return
		}
	}
	b := r.out(nvmeof.IdentifySize)
	var err error
	switch cmd.CNS() {
	case nvmeof.CNSController:
		id := c.identifyController()
		err = id.Encode(b)
	case nvmeof.CNSNamespace:
		if c.disc {
			r.status, r.errLoc = nvmeof.StatusInvalidField.WithDNR(), nvmeof.OffsetIdentifyCNS
			return
		}
		n := c.sub.namespace(r.nsid)
		if n == nil {
			if r.nsid == 0 || r.nsid == nvmeof.NSIDAll || r.nsid > maxNSID {
				r.status, r.errLoc = nvmeof.StatusInvalidNamespace.WithDNR(), nvmeof.OffsetNSID
				return
			}
			// An inactive namespace is all zeroes (NVMe Base §5.17.2.1).
			clear(b[:nvmeof.IdentifySize])
			return
		}
		idns := c.identifyNamespace(n)
		err = idns.Encode(b)
	case nvmeof.CNSActiveNSList:
		if c.disc {
			r.status, r.errLoc = nvmeof.StatusInvalidField.WithDNR(), nvmeof.OffsetIdentifyCNS
			return
		}
		if r.nsid >= 0xfffffffe {
			r.status, r.errLoc = nvmeof.StatusInvalidNamespace.WithDNR(), nvmeof.OffsetNSID
			return
		}
		ids := c.sub.activeNSIDs(r.nsid)
		if len(ids) > nvmeof.MaxNSIDListEntries {
			ids = ids[:nvmeof.MaxNSIDListEntries]
		}
		err = nvmeof.EncodeNSIDList(b, ids)
	case nvmeof.CNSNSDescriptorList:
		n := c.namespaceOrNil(r.nsid)
		if n == nil {
			r.status, r.errLoc = nvmeof.StatusInvalidNamespace.WithDNR(), nvmeof.OffsetNSID
			return
		}
		ids := nvmeof.NamespaceIDs{NGUID: n.cfg.NGUID, HasNGUID: true, UUID: n.cfg.UUID, HasUUID: true, CSI: nvmeof.CSINVM, HasCSI: true}
		if n.cfg.EUI64 != ([8]byte{}) {
			ids.EUI64, ids.HasEUI64 = n.cfg.EUI64, true
		}
		err = ids.Encode(b)
	case nvmeof.CNSCSController:
		if cmd.CSI() != nvmeof.CSINVM {
			r.status, r.errLoc = nvmeof.StatusInvalidField.WithDNR(), nvmeof.OffsetIdentifyCNS
			return
		}
		var nvm nvmeof.IdentifyControllerNVM
		err = nvm.Encode(b)
	case nvmeof.CNSCSNamespace:
		if cmd.CSI() != nvmeof.CSINVM || c.namespaceOrNil(r.nsid) == nil {
			r.status, r.errLoc = nvmeof.StatusInvalidField.WithDNR(), nvmeof.OffsetIdentifyCNS
			return
		}
		// The NVM command set specific namespace structure is all zeroes
		// when no extended features are supported.
		clear(b[:nvmeof.IdentifySize])
	default:
		r.status, r.errLoc = nvmeof.StatusInvalidField.WithDNR(), nvmeof.OffsetIdentifyCNS
		return
	}
	if err != nil {
		c.t.log.Warn("nvmeof: encoding identify data", c.logAttrs("cns", cmd.CNS(), "err", err)...)
		r.status = nvmeof.StatusInternal
	}
}

func (c *controller) namespaceOrNil(nsid uint32) *Namespace {
	if c.disc {
		return nil
	}
	return c.sub.namespace(nsid)
}

// inlineDataSize is the in-capsule data the controller's I/O queues take:
// the port's, for the controller's transport.
func (c *controller) inlineDataSize() int {
	if c.trType == nvmeof.TrTypeTCP {
		return c.port.cfg.TCPInlineDataSize
	}
	return c.port.cfg.InlineDataSize
}

func (c *controller) identifyController() nvmeof.IdentifyController {
	p := c.port
	id := nvmeof.IdentifyController{
		SN: c.sub.cfg.Serial, MN: c.sub.cfg.Model, FR: c.t.fw,
		RAB: 6, CNTLID: c.cntlid, VER: nvmeof.MakeVersion(1, 4, 0),
		CTRATT: nvmeof.CTRATTHostID128 | nvmeof.CTRATTTBKAS,
		ACL:    3, AERL: maxAERs - 1, FRMW: nvmeof.FRMWSlot1ReadOnly | 1<<nvmeof.FRMWSlotsShift,
		LPA:  nvmeof.LPACommandEffects | nvmeof.LPAExtendedData,
		ELPE: errLogSlots - 1, KAS: kas, SQES: 0x66, CQES: 0x44,
		MAXCMD: uint16(p.cfg.MaxQueueSize), MDTS: mdtsShift,
		SGLS: nvmeof.SGLSByteAligned, MSDBD: 1,
		IOCCSZ: uint32((nvmeof.SQESize + c.inlineDataSize()) / 16), IORCSZ: nvmeof.CQESize / 16,
		OFCS: nvmeof.OFCSDisconnect, SUBNQN: c.sub.cfg.NQN,
		PSD: []nvmeof.PowerState{{MaxPower: 2500}},
	}
	if c.trType == nvmeof.TrTypeRDMA {
		// Keyed SGLs only where the transport has keys (nvmet:
		// NVMF_KEYED_SGLS).
		id.SGLS |= nvmeof.SGLSKeyed
	}
	if c.inlineDataSize() > 0 {
		id.SGLS |= nvmeof.SGLSOffset
	}
	if c.disc {
		id.CNTRLTYPE = nvmeof.ControllerTypeDiscovery
		id.MAXCMD = nvmeof.AdminQueueDepth
		id.OAES = nvmeof.AENConfigDiscoveryChange
		id.IOCCSZ, id.IORCSZ = 0, 0
		return id
	}
	id.CNTRLTYPE = nvmeof.ControllerTypeIO
	// Several ports and controllers reach the namespaces, with ANA
	// reporting (nvmet_execute_identify_ctrl): what Linux needs to
	// enable native multipath (nvme_mpath_init_identify, which sizes the
	// ANA log from NANAGRPID and MNAN and wants it within MDTS: 16 +
	// 128*32 + 1024*4 bytes here).
	id.CMIC = nvmeof.CMICMultiPort | nvmeof.CMICMultiCtrl | nvmeof.CMICANA
	id.OAES = nvmeof.AENConfigNSAttr | nvmeof.AENConfigANAChange
	id.ANACAP = nvmeof.ANACAPAllStates
	id.ANATT = c.t.anatt
	id.ANAGRPMAX, id.NANAGRPID = maxANAGroups, maxANAGroups
	id.NN = maxNSID
	id.MNAN = maxNSID
	id.ONCS = nvmeof.ONCSCompare | nvmeof.ONCSDSM | nvmeof.ONCSWriteZeroes | nvmeof.ONCSTimestamp
	id.VWC = nvmeof.VWCPresent
	return id
}

func (c *controller) identifyNamespace(n *Namespace) nvmeof.IdentifyNamespace {
	id := nvmeof.IdentifyNamespace{
		NSZE: n.nsze, NCAP: n.nsze, NUSE: n.nsze,
		NMIC: nvmeof.NMICShared, NGUID: n.cfg.NGUID, EUI64: n.cfg.EUI64,
		LBAF:     []nvmeof.LBAFormat{{LBADS: n.lbads}},
		ANAGRPID: n.cfg.ANAGroupID,
	}
	if n.cfg.Disk.ReadOnly() {
		id.NSATTR |= nvmeof.NSATTRReadOnly // hosts then mount it read-only
	}
	if _, ok := n.cfg.Disk.(backstore.Discarder); ok {
		// Thin provisioned; deallocated blocks read as zeroes only where
		// the backstore guarantees it.
		id.NSFEAT |= nvmeof.NSFEATThin
		if backstore.TraitsOf(n.cfg.Disk).ZeroesAfterDiscard {
			id.DLFEAT = nvmeof.DLFEATReadZeroes | nvmeof.DLFEATWriteZeroesDeac
		}
	}
	return id
}

func (c *controller) getLogPage(r *request, cmd nvmeof.GetLogPageCommand) {
	var page []byte
	lid := cmd.LID()
	switch {
	case lid == nvmeof.LogDiscovery && c.disc:
		page = c.t.discoveryLog(c.port, c.hostNQN, c.trType)
		if !cmd.RAE() {
			c.unmask(nvmeof.NoticeDiscoveryChanged)
		}
	case c.disc:
		r.status, r.errLoc = nvmeof.StatusInvalidLogPage.WithDNR(), nvmeof.OffsetLogLID
		return
	case lid == nvmeof.LogError:
		page = make([]byte, errLogSlots*64)
		c.mu.Lock()
		for i := 0; i < errLogSlots; i++ {
			e := c.errLog[(c.errNext-1-i+2*errLogSlots)%errLogSlots]
			e.Encode(page[i*64:])
		}
		c.mu.Unlock()
	case lid == nvmeof.LogSMART:
		page = make([]byte, nvmeof.SMARTLogSize)
		l := c.smartLog(r.nsid)
		l.Encode(page)
	case lid == nvmeof.LogFirmwareSlot:
		page = make([]byte, 512)
		fw := nvmeof.FirmwareSlotLog{AFI: 1}
		fw.FRS[0] = c.t.fw
		fw.Encode(page)
	case lid == nvmeof.LogChangedNS:
		page = make([]byte, 4096)
		c.mu.Lock()
		list := c.changedNS
		if c.changedOv {
			list = make([]uint32, maxChangedNS+1)
		}
		nvmeof.EncodeChangedNSList(page, list)
		if !cmd.RAE() {
			c.changedNS, c.changedOv = c.changedNS[:0], false
		}
		c.mu.Unlock()
		if !cmd.RAE() {
			c.unmask(nvmeof.NoticeNSChanged)
		}
	case lid == nvmeof.LogANA:
		page = c.anaLog(cmd.LSP()&nvmeof.ANALogRGO != 0)
		if !cmd.RAE() {
			c.unmask(nvmeof.NoticeANAChange) // nvmet_clear_aen_bit
		}
	case lid == nvmeof.LogCommandEffects:
		page = make([]byte, 4096)
		c.effectsLog().Encode(page)
	default:
		r.status, r.errLoc = nvmeof.StatusInvalidLogPage.WithDNR(), nvmeof.OffsetLogLID
		return
	}
	part, err := nvmeof.LogPageRange(page, cmd.LPO(), cmd.Length())
	if err != nil {
		r.fail(asCommandError(err))
		return
	}
	if uint64(len(r.xfer)) < cmd.Length() {
		r.status, r.errLoc = nvmeof.StatusSGLInvalidDataLength.WithDNR(), offDPTR
		return
	}
	b := r.out(int(cmd.Length()))
	n := copy(b, part)
	clear(b[n:r.outLen])
}

func (c *controller) effectsLog() *nvmeof.CommandEffectsLog {
	var l nvmeof.CommandEffectsLog
	for _, op := range []uint8{nvmeof.AdminGetLogPage, nvmeof.AdminIdentify, nvmeof.AdminAbort, nvmeof.AdminSetFeatures,
		nvmeof.AdminGetFeatures, nvmeof.AdminAsyncEvent, nvmeof.AdminKeepAlive} {
		l.ACS[op] = nvmeof.EffectsCSUPP
	}
	for _, op := range []uint8{nvmeof.IOFlush, nvmeof.IORead, nvmeof.IOCompare} {
		l.IOCS[op] = nvmeof.EffectsCSUPP
	}
	for _, op := range []uint8{nvmeof.IOWrite, nvmeof.IOWriteZeroes, nvmeof.IODatasetMgmt} {
		l.IOCS[op] = nvmeof.EffectsCSUPP | nvmeof.EffectsLBCC
	}
	return &l
}

// smartLog builds the SMART / Health log from the backstore health of the
// namespace (or all namespaces for NSID 0 / FFFFFFFFh).
func (c *controller) smartLog(nsid uint32) nvmeof.SMARTLog {
	var l nvmeof.SMARTLog
	l.AvailableSpare, l.AvailableSpareThreshold = 100, 10
	ids := c.sub.activeNSIDs(0)
	if nsid != 0 && nsid != nvmeof.NSIDAll {
		ids = []uint32{nsid}
	}
	var temp int
	for _, id := range ids {
		n := c.sub.namespace(id)
		if n == nil {
			continue
		}
		hr, ok := n.cfg.Disk.(backstore.HealthReporter)
		if !ok {
			continue
		}
		h, err := hr.Health()
		if err != nil && !errors.Is(err, backstore.ErrUnsupported) {
			continue
		}
		if !h.Supported {
			continue
		}
		l.CriticalWarning |= uint8(h.CriticalWarning)
		if h.Temperature != 0 && int(h.Temperature)+273 > temp {
			temp = int(h.Temperature) + 273
		}
		if h.AvailableSpare != 0 || h.AvailableSpareThreshold != 0 {
			l.AvailableSpare = min(l.AvailableSpare, h.AvailableSpare)
			l.AvailableSpareThreshold = max(l.AvailableSpareThreshold, h.AvailableSpareThreshold)
		}
		l.PercentageUsed = max(l.PercentageUsed, h.PercentageUsed)
		l.DataUnitsRead += h.DataUnitsRead
		l.DataUnitsWritten += h.DataUnitsWritten
		l.HostReads += h.HostReadCommands
		l.HostWrites += h.HostWriteCommands
		l.MediaErrors += h.MediaErrors
		l.PowerOnHours = max(l.PowerOnHours, h.PowerOnHours)
		l.PowerCycles = max(l.PowerCycles, h.PowerCycles)
		l.UnsafeShutdowns += h.UnsafeShutdowns
	}
	l.Temperature = uint16(temp)
	c.mu.Lock()
	l.ErrorLogEntries = c.errCount
	c.mu.Unlock()
	return l
}

func (c *controller) setFeatures(r *request, cmd nvmeof.FeaturesCommand) {
	if cmd.Save() {
		r.status, r.errLoc = nvmeof.StatusFeatureNotSaveable.WithDNR(), nvmeof.OffsetFeatureFID
		return
	}
	v := cmd.Value()
	c.mu.Lock()
	defer c.mu.Unlock()
	switch fid := cmd.FID(); fid {
	case nvmeof.FeatNumQueues:
		if c.disc {
			break
		}
		nsqr, ncqr := nvmeof.ParseNumQueues(v)
		if nsqr == 0xffff || ncqr == 0xffff {
			r.status, r.errLoc = nvmeof.StatusInvalidField.WithDNR(), nvmeof.OffsetFeatureFID
			return
		}
		n := min(int(min(nsqr, ncqr))+1, c.maxQ)
		c.grantedQ = n
		r.result = uint64(nvmeof.NumQueuesValue(uint16(n-1), uint16(n-1)))
		return
	case nvmeof.FeatAsyncEventConfig:
		c.aenCfg = v
		return
	case nvmeof.FeatKeepAliveTimer:
		c.kato = time.Duration(v) * time.Millisecond
		c.armKeepAliveLocked()
		return
	case nvmeof.FeatVolatileWC:
		if !c.disc {
			c.wce = v&1 != 0
			return
		}
	case nvmeof.FeatTimestamp:
		if !c.disc {
			ms, _, err := nvmeof.ParseTimestamp(r.xfer)
			if err != nil {
				r.status, r.errLoc = nvmeof.StatusSGLInvalidDataLength.WithDNR(), offDPTR
				return
			}
			c.tsBase, c.tsMillis, c.tsSet = time.Now(), ms, true
			return
		}
	case nvmeof.FeatArbitration, nvmeof.FeatPowerMgmt:
		if !c.disc {
			if fid == nvmeof.FeatPowerMgmt && v&0x1f != 0 {
				// Only power state 0 exists.
				r.status, r.errLoc = nvmeof.StatusInvalidField.WithDNR(), nvmeof.OffsetFeatureFID
				return
			}
			c.features[fid] = v
			return
		}
	case nvmeof.FeatHostID:
		// The host identifier comes with Connect on fabrics; Set is refused
		// as nvmet does.
		r.status, r.errLoc = nvmeof.StatusCommandSequenceError.WithDNR(), nvmeof.OffsetFeatureFID
		return
	}
	r.status, r.errLoc = nvmeof.StatusInvalidField.WithDNR(), nvmeof.OffsetFeatureFID
}

func (c *controller) getFeatures(r *request, cmd nvmeof.FeaturesCommand) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sel := cmd.Select()
	if sel == 3 { // supported capabilities
		r.result = 0 // nothing saveable or per-namespace
		return
	}
	current := sel == nvmeof.SelectCurrent
	switch fid := cmd.FID(); fid {
	case nvmeof.FeatNumQueues:
		n := c.grantedQ
		if !current || n == 0 {
			n = c.maxQ
		}
		r.result = uint64(nvmeof.NumQueuesValue(uint16(n-1), uint16(n-1)))
		return
	case nvmeof.FeatAsyncEventConfig:
		if current {
			r.result = uint64(c.aenCfg)
		}
		return
	case nvmeof.FeatKeepAliveTimer:
		if current {
			r.result = uint64(c.kato / time.Millisecond)
		}
		return
	case nvmeof.FeatVolatileWC:
		if !c.disc {
			if !current || c.wce {
				r.result = 1
			}
			return
		}
	case nvmeof.FeatTimestamp:
		if !c.disc {
			var ms uint64
			var attrs uint8
			if c.tsSet && current {
				ms = c.tsMillis + uint64(time.Since(c.tsBase)/time.Millisecond)
				attrs = 1 << 1 // set by a Set Features command
			} else {
				ms = uint64(time.Since(c.t.started) / time.Millisecond)
			}
			b := r.out(nvmeof.TimestampSize)
			if len(b) < nvmeof.TimestampSize {
				r.status, r.errLoc = nvmeof.StatusSGLInvalidDataLength.WithDNR(), offDPTR
				return
			}
			nvmeof.EncodeTimestamp(b, ms, attrs)
			return
		}
	case nvmeof.FeatArbitration, nvmeof.FeatPowerMgmt:
		if !c.disc {
			if current {
				r.result = uint64(c.features[fid])
			}
			return
		}
	case nvmeof.FeatHostID:
		if cmd.Value()&1 == 0 {
			// Only the 128-bit host identifier exists on fabrics.
			r.status, r.errLoc = nvmeof.StatusInvalidField.WithDNR(), nvmeof.OffsetFeatureFID
			return
		}
		b := r.out(16)
		if len(b) < 16 {
			r.status, r.errLoc = nvmeof.StatusSGLInvalidDataLength.WithDNR(), offDPTR
			return
		}
		copy(b, c.hostID[:])
		return
	}
	r.status, r.errLoc = nvmeof.StatusInvalidField.WithDNR(), nvmeof.OffsetFeatureFID
}
