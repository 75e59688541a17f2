package scsi

// Parse, then execute: the command table maps an operation code (and a
// service action) to a descriptor that gives the CDB length, the CDB usage
// data REPORT SUPPORTED OPERATION CODES reports, how the command fares under
// reservations, and its handler. Each LU builds its own table from its
// disk's capabilities (an LU on a disk that cannot deallocate has no UNMAP),
// so REPORT SUPPORTED OPERATION CODES and dispatch always agree. The table
// is immutable after NewLU.

// execFunc executes a decoded command. b is the CDB cut to the command's
// length; it is the LU of the command's nexus.
type execFunc func(lu *LU, c *Command, b cdb, it *itl)

// cmdClass says how persistent and SPC-2 reservations affect a command
// (SPC-4 table 63, SBC-3 table 13).
type cmdClass uint8

const (
	classAllowed cmdClass = iota // never conflicts (INQUIRY, REPORT LUNS, PRIN...)
	classRead                    // conflicts with exclusive access reservations
	classWrite                   // conflicts with every reservation type
)

// cmdDesc describes one command.
type cmdDesc struct {
	name   string
	op     uint8
	sa     uint8
	hasSA  bool
	cdbLen int
	// usage is the CDB usage data (SPC-4 6.35.3): the bits the device
	// server evaluates; usage[0] is the opcode.
	usage []byte
	class cmdClass
	// spc2OK: allowed while another nexus holds an SPC-2 reservation.
	spc2OK bool
	// prOut: PERSISTENT RESERVE IN/OUT, which conflict with any SPC-2
	// reservation (SPC-3 5.6.3).
	prInOut bool
	exec    execFunc
	// dataOut returns the command's data-out length in bytes (nil for
	// commands without data-out).
	dataOut func(lu *LU, b cdb) uint64
}

type opEntry struct {
	d   *cmdDesc
	sas []*cmdDesc
}

type commandTable struct {
	ops  [256]opEntry
	list []*cmdDesc // in (opcode, service action) order
}

// lookup finds the descriptor of a CDB. On failure it returns the sense
// data to fail the command with: INVALID COMMAND OPERATION CODE for an
// unknown opcode, INVALID FIELD IN CDB pointing at the service action for
// an unknown service action, or at byte 0 for a CDB shorter than its group
// length.
func (t *commandTable) lookup(b []byte) (*cmdDesc, senseInfo) {
	if len(b) == 0 {
		return nil, senseInfo{key: KeyIllegalRequest, asc: ASCInvalidCommandOpcode}
	}
	e := &t.ops[b[0]]
	if e.d == nil && e.sas == nil {
		return nil, senseInfo{key: KeyIllegalRequest, asc: ASCInvalidCommandOpcode}
	}
	n := cdbLength(b[0])
	if len(b) < n {
		return nil, invalidCDB(0, -1)
	}
	if e.d != nil {
		return e.d, senseInfo{}
	}
	sa := b[1] & 0x1f
	for _, d := range e.sas {
		if d.sa == sa {
			return d, senseInfo{}
		}
	}
	return nil, invalidCDB(1, 4)
}

// invalidCDB is INVALID FIELD IN CDB with a field pointer (bit -1: the
// whole byte).
func invalidCDB(byteOff, bit int) senseInfo {
	return senseInfo{key: KeyIllegalRequest, asc: ASCInvalidFieldInCDB}.fieldPointer(true, byteOff, bit)
}

// invalidParam is INVALID FIELD IN PARAMETER LIST with a field pointer.
func invalidParam(byteOff, bit int) senseInfo {
	return senseInfo{key: KeyIllegalRequest, asc: ASCInvalidFieldInParameterList}.fieldPointer(false, byteOff, bit)
}

var (
	senseLBAOutOfRange  = senseInfo{key: KeyIllegalRequest, asc: ASCLBAOutOfRange}
	senseParamListLen   = senseInfo{key: KeyIllegalRequest, asc: ASCParameterListLengthError}
	senseCommandIULen   = senseInfo{key: KeyIllegalRequest, asc: ASCInvalidFieldInCommandIU}
	senseInternalFailed = senseInfo{key: KeyHardwareError, asc: ASCInternalTargetFailure}
)

// CDB usage data building blocks.
const (
	uCtl   = 0x04 // control byte: NACA evaluated
	uRWFlg = 0xfa // xxPROTECT, DPO, FUA, FUA_NV
	uVFlg  = 0xf6 // VRPROTECT/WRPROTECT, DPO, BYTCHK
)

func newCommandTable(lu *LU) *commandTable {
	t := &commandTable{}
	add := func(d *cmdDesc) {
		if lu.cfg.NoReservations {
			switch d.op {
			case OpReserve6, OpRelease6, OpReserve10, OpRelease10, OpPersistentReserveIn, OpPersistentReserveOut:
				return
			}
		}
		d.cdbLen = cdbLength(d.op)
		if len(d.usage) != d.cdbLen {
			panic("scsi: usage data of " + d.name + " does not match its CDB length")
		}
		e := &t.ops[d.op]
		if d.hasSA {
			e.sas = append(e.sas, d)
		} else {
			e.d = d
		}
		t.list = append(t.list, d)
	}
	ff4 := []byte{0xff, 0xff, 0xff, 0xff}
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	rw10 := func(op, flags byte) []byte { return cat([]byte{op, flags}, ff4, []byte{0x1f, 0xff, 0xff, uCtl}) }
	rw12 := func(op, flags byte) []byte { return cat([]byte{op, flags}, ff4, ff4, []byte{0x1f, uCtl}) }
	rw16 := func(op, flags byte) []byte { return cat([]byte{op, flags}, ff4, ff4, ff4, []byte{0x1f, uCtl}) }
	blockDataOut := func(lu *LU, b cdb) uint64 { return uint64(rwDecode(b).nlb) << lu.shift }

	// SPC commands.
	add(&cmdDesc{name: "TEST UNIT READY", op: OpTestUnitReady, usage: []byte{OpTestUnitReady, 0, 0, 0, 0, uCtl}, class: classAllowed, exec: execTestUnitReady})
	add(&cmdDesc{name: "REQUEST SENSE", op: OpRequestSense, usage: []byte{OpRequestSense, 0x01, 0, 0, 0xff, uCtl}, class: classAllowed, spc2OK: true, exec: execRequestSense})
	add(&cmdDesc{name: "INQUIRY", op: OpInquiry, usage: []byte{OpInquiry, 0x01, 0xff, 0xff, 0xff, uCtl}, class: classAllowed, spc2OK: true, exec: execInquiry})
	add(&cmdDesc{name: "MODE SELECT(6)", op: OpModeSelect6, usage: []byte{OpModeSelect6, 0x11, 0, 0, 0xff, uCtl}, class: classWrite, exec: execModeSelect,
		dataOut: func(lu *LU, b cdb) uint64 { return uint64(b[4]) }})
	add(&cmdDesc{name: "RESERVE(6)", op: OpReserve6, usage: []byte{OpReserve6, 0, 0, 0, 0, uCtl}, class: classWrite, exec: execReserve})
	add(&cmdDesc{name: "RELEASE(6)", op: OpRelease6, usage: []byte{OpRelease6, 0, 0, 0, 0, uCtl}, class: classAllowed, spc2OK: true, exec: execRelease})
	add(&cmdDesc{name: "MODE SENSE(6)", op: OpModeSense6, usage: []byte{OpModeSense6, 0x08, 0xff, 0xff, 0xff, uCtl}, class: classWrite, exec: execModeSense})
	add(&cmdDesc{name: "START STOP UNIT", op: OpStartStopUnit, usage: []byte{OpStartStopUnit, 0x01, 0, 0x0f, 0xf7, uCtl}, class: classWrite, exec: execStartStop})
	add(&cmdDesc{name: "PREVENT ALLOW MEDIUM REMOVAL", op: OpPreventAllow, usage: []byte{OpPreventAllow, 0, 0, 0, 0x03, uCtl}, class: classAllowed, exec: execPreventAllow})
	add(&cmdDesc{name: "LOG SENSE", op: OpLogSense, usage: []byte{OpLogSense, 0x01, 0xff, 0xff, 0, 0xff, 0xff, 0xff, 0xff, uCtl}, class: classAllowed, exec: execLogSense})
	add(&cmdDesc{name: "MODE SELECT(10)", op: OpModeSelect10, usage: []byte{OpModeSelect10, 0x11, 0, 0, 0, 0, 0, 0xff, 0xff, uCtl}, class: classWrite, exec: execModeSelect,
		dataOut: func(lu *LU, b cdb) uint64 { return uint64(b.u16(7)) }})
	add(&cmdDesc{name: "RESERVE(10)", op: OpReserve10, usage: []byte{OpReserve10, 0x12, 0, 0xff, 0, 0, 0, 0xff, 0xff, uCtl}, class: classWrite, exec: execReserve})
	add(&cmdDesc{name: "RELEASE(10)", op: OpRelease10, usage: []byte{OpRelease10, 0x12, 0, 0xff, 0, 0, 0, 0xff, 0xff, uCtl}, class: classAllowed, spc2OK: true, exec: execRelease})
	add(&cmdDesc{name: "MODE SENSE(10)", op: OpModeSense10, usage: []byte{OpModeSense10, 0x18, 0xff, 0xff, 0, 0, 0, 0xff, 0xff, uCtl}, class: classWrite, exec: execModeSense})
	for _, sa := range []uint8{0, 1, 2, 3} {
		add(&cmdDesc{name: "PERSISTENT RESERVE IN", op: OpPersistentReserveIn, sa: sa, hasSA: true, usage: []byte{OpPersistentReserveIn, 0x1f, 0, 0, 0, 0, 0, 0xff, 0xff, uCtl}, class: classAllowed, prInOut: true, exec: execPRIn})
	}
	for _, sa := range []uint8{0, 1, 2, 3, 4, 5, 6} {
		add(&cmdDesc{name: "PERSISTENT RESERVE OUT", op: OpPersistentReserveOut, sa: sa, hasSA: true, usage: []byte{OpPersistentReserveOut, 0x1f, 0xff, 0, 0, 0xff, 0xff, 0xff, 0xff, uCtl}, class: classAllowed, prInOut: true, exec: execPROut,
			dataOut: func(lu *LU, b cdb) uint64 { return uint64(b.u32(5)) }})
	}
	add(&cmdDesc{name: "REPORT LUNS", op: OpReportLUNs, usage: []byte{OpReportLUNs, 0, 0xff, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, uCtl}, class: classAllowed, spc2OK: true, exec: execReportLUNs})
	add(&cmdDesc{name: "REPORT TARGET PORT GROUPS", op: OpMaintenanceIn, sa: SAReportTargetPortGroup, hasSA: true, usage: []byte{OpMaintenanceIn, 0xff, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, uCtl}, class: classAllowed, exec: execReportTPG})
	add(&cmdDesc{name: "REPORT SUPPORTED OPERATION CODES", op: OpMaintenanceIn, sa: SAReportSupportedOps, hasSA: true, usage: []byte{OpMaintenanceIn, 0x1f, 0x87, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, uCtl}, class: classAllowed, exec: execReportOpcodes})
	add(&cmdDesc{name: "REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS", op: OpMaintenanceIn, sa: SAReportSupportedTMFs, hasSA: true, usage: []byte{OpMaintenanceIn, 0x1f, 0x80, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, uCtl}, class: classAllowed, exec: execReportTMFs})

	// SBC commands.
	add(&cmdDesc{name: "READ(6)", op: OpRead6, usage: []byte{OpRead6, 0x1f, 0xff, 0xff, 0xff, uCtl}, class: classRead, exec: execRead})
	add(&cmdDesc{name: "WRITE(6)", op: OpWrite6, usage: []byte{OpWrite6, 0x1f, 0xff, 0xff, 0xff, uCtl}, class: classWrite, exec: execWrite, dataOut: blockDataOut})
	add(&cmdDesc{name: "READ CAPACITY(10)", op: OpReadCapacity10, usage: []byte{OpReadCapacity10, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0x01, uCtl}, class: classAllowed, exec: execReadCapacity10})
	add(&cmdDesc{name: "READ(10)", op: OpRead10, usage: rw10(OpRead10, uRWFlg), class: classRead, exec: execRead})
	add(&cmdDesc{name: "WRITE(10)", op: OpWrite10, usage: rw10(OpWrite10, uRWFlg), class: classWrite, exec: execWrite, dataOut: blockDataOut})
	add(&cmdDesc{name: "WRITE AND VERIFY(10)", op: OpWriteVerify10, usage: rw10(OpWriteVerify10, uVFlg), class: classWrite, exec: execWriteVerify, dataOut: blockDataOut})
	add(&cmdDesc{name: "VERIFY(10)", op: OpVerify10, usage: rw10(OpVerify10, uVFlg), class: classRead, exec: execVerify, dataOut: verifyDataOut})
	add(&cmdDesc{name: "PRE-FETCH(10)", op: OpPrefetch10, usage: rw10(OpPrefetch10, 0x02), class: classRead, exec: execPrefetch})
	add(&cmdDesc{name: "SYNCHRONIZE CACHE(10)", op: OpSyncCache10, usage: rw10(OpSyncCache10, 0x06), class: classWrite, exec: execSyncCache})
	add(&cmdDesc{name: "WRITE SAME(10)", op: OpWriteSame10, usage: rw10(OpWriteSame10, 0xfe), class: classWrite, exec: execWriteSame, dataOut: writeSameDataOut})
	if lu.thin() {
		add(&cmdDesc{name: "UNMAP", op: OpUnmap, usage: []byte{OpUnmap, 0x01, 0, 0, 0, 0, 0x1f, 0xff, 0xff, uCtl}, class: classWrite, exec: execUnmap,
			dataOut: func(lu *LU, b cdb) uint64 { return uint64(b.u16(7)) }})
	}
	add(&cmdDesc{name: "READ DEFECT DATA(10)", op: OpReadDefectData10, usage: []byte{OpReadDefectData10, 0, 0x1f, 0, 0, 0, 0, 0xff, 0xff, uCtl}, class: classRead, exec: execReadDefectData})
	add(&cmdDesc{name: "READ DEFECT DATA(12)", op: OpReadDefectData12, usage: []byte{OpReadDefectData12, 0x1f, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, uCtl}, class: classRead, exec: execReadDefectData})
	if lu.cfg.AtomicTransferBlocks != 0 {
		add(&cmdDesc{name: "WRITE ATOMIC(16)", op: OpWriteAtomic16, usage: cat([]byte{OpWriteAtomic16, 0xf8}, ff4, ff4, []byte{0xff, 0xff, 0xff, 0xff, 0x1f, uCtl}), class: classWrite, exec: execWriteAtomic,
			dataOut: func(lu *LU, b cdb) uint64 { return uint64(b.u16(12)) << lu.shift }})
	}
	if lu.xcopyOK() {
		add(&cmdDesc{name: "EXTENDED COPY", op: OpExtendedCopy, sa: 0, hasSA: true, usage: cat([]byte{OpExtendedCopy, 0x1f}, make([]byte, 8), ff4, []byte{0, uCtl}), class: classWrite, exec: execExtendedCopy,
			dataOut: func(lu *LU, b cdb) uint64 { return uint64(b.u32(10)) }})
		for _, sa := range []uint8{rcrCopyStatus, rcrOpParams} {
			add(&cmdDesc{name: "RECEIVE COPY RESULTS", op: OpReceiveCopyResults, sa: sa, hasSA: true, usage: cat([]byte{OpReceiveCopyResults, 0x1f, 0xff}, make([]byte, 7), ff4, []byte{0, uCtl}), class: classAllowed, exec: execReceiveCopyResults})
		}
	}
	add(&cmdDesc{name: "READ(16)", op: OpRead16, usage: rw16(OpRead16, uRWFlg), class: classRead, exec: execRead})
	add(&cmdDesc{name: "COMPARE AND WRITE", op: OpCompareAndWrite, usage: cat([]byte{OpCompareAndWrite, uRWFlg}, ff4, ff4, []byte{0, 0, 0, 0xff, 0x1f, uCtl}), class: classWrite, exec: execCompareAndWrite,
		dataOut: func(lu *LU, b cdb) uint64 { return 2 * uint64(b[13]) << lu.shift }})
	add(&cmdDesc{name: "WRITE(16)", op: OpWrite16, usage: rw16(OpWrite16, uRWFlg), class: classWrite, exec: execWrite, dataOut: blockDataOut})
	add(&cmdDesc{name: "ORWRITE(16)", op: OpOrWrite16, usage: rw16(OpOrWrite16, uRWFlg), class: classWrite, exec: execOrWrite, dataOut: blockDataOut})
	add(&cmdDesc{name: "WRITE AND VERIFY(16)", op: OpWriteVerify16, usage: rw16(OpWriteVerify16, uVFlg), class: classWrite, exec: execWriteVerify, dataOut: blockDataOut})
	add(&cmdDesc{name: "VERIFY(16)", op: OpVerify16, usage: rw16(OpVerify16, uVFlg), class: classRead, exec: execVerify, dataOut: verifyDataOut})
	add(&cmdDesc{name: "PRE-FETCH(16)", op: OpPrefetch16, usage: rw16(OpPrefetch16, 0x02), class: classRead, exec: execPrefetch})
	add(&cmdDesc{name: "SYNCHRONIZE CACHE(16)", op: OpSyncCache16, usage: rw16(OpSyncCache16, 0x06), class: classWrite, exec: execSyncCache})
	add(&cmdDesc{name: "WRITE SAME(16)", op: OpWriteSame16, usage: rw16(OpWriteSame16, 0xff), class: classWrite, exec: execWriteSame, dataOut: writeSameDataOut})
	add(&cmdDesc{name: "READ CAPACITY(16)", op: OpServiceActionIn16, sa: SAReadCapacity16, hasSA: true, usage: cat([]byte{OpServiceActionIn16, 0x1f}, make([]byte, 8), ff4, []byte{0, uCtl}), class: classAllowed, exec: execReadCapacity16})
	add(&cmdDesc{name: "GET LBA STATUS", op: OpServiceActionIn16, sa: SAGetLBAStatus, hasSA: true, usage: cat([]byte{OpServiceActionIn16, 0x1f}, ff4, ff4, ff4, []byte{0, uCtl}), class: classRead, exec: execGetLBAStatus})
	add(&cmdDesc{name: "READ(12)", op: OpRead12, usage: rw12(OpRead12, uRWFlg), class: classRead, exec: execRead})
	add(&cmdDesc{name: "WRITE(12)", op: OpWrite12, usage: rw12(OpWrite12, uRWFlg), class: classWrite, exec: execWrite, dataOut: blockDataOut})
	add(&cmdDesc{name: "WRITE AND VERIFY(12)", op: OpWriteVerify12, usage: rw12(OpWriteVerify12, uVFlg), class: classWrite, exec: execWriteVerify, dataOut: blockDataOut})
	add(&cmdDesc{name: "VERIFY(12)", op: OpVerify12, usage: rw12(OpVerify12, uVFlg), class: classRead, exec: execVerify, dataOut: verifyDataOut})

	// Keep the list in (opcode, service action) order.
	for i := 1; i < len(t.list); i++ {
		for j := i; j > 0 && less(t.list[j], t.list[j-1]); j-- {
			t.list[j], t.list[j-1] = t.list[j-1], t.list[j]
		}
	}
	return t
}

func less(a, b *cmdDesc) bool {
	if a.op != b.op {
		return a.op < b.op
	}
	return a.sa < b.sa
}
