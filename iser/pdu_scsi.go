package iser

// Views of the SCSI data path PDUs: SCSI Command and Response, Data-Out,
// Data-In and R2T. Each is a []byte of at least BHSSize bytes (ParseBHS
// checks that); Encode writes all 48 bytes except the two length fields
// (SetLengths, or the Writer, sets those) and Fields decodes them back.

// TaskAttr is the task attribute of a SCSI Command (ISCSI_ATTR_*).
type TaskAttr uint8

// Task attributes.
const (
	AttrUntagged    TaskAttr = 0 // ISCSI_ATTR_UNTAGGED
	AttrSimple      TaskAttr = 1 // ISCSI_ATTR_SIMPLE
	AttrOrdered     TaskAttr = 2 // ISCSI_ATTR_ORDERED
	AttrHeadOfQueue TaskAttr = 3 // ISCSI_ATTR_HEAD_OF_QUEUE
	AttrACA         TaskAttr = 4 // ISCSI_ATTR_ACA
)

// SCSI Command flags (byte 1).
const (
	CmdFlagFinal uint8 = 0x80 // ISCSI_FLAG_CMD_FINAL
	CmdFlagRead  uint8 = 0x40 // ISCSI_FLAG_CMD_READ
	CmdFlagWrite uint8 = 0x20 // ISCSI_FLAG_CMD_WRITE
	cmdAttrMask  uint8 = 0x07 // ISCSI_FLAG_CMD_ATTR_MASK
)

// Offsets of the SCSI Command fields (struct iscsi_cmd).
const (
	OffsetCmdExpectedLength = 20 // data_length
	OffsetCmdCmdSN          = 24 // cmdsn
	OffsetCmdExpStatSN      = 28 // exp_statsn
	OffsetCmdCDB            = 32 // cdb[16]
)

// SCSICommand is a view of a SCSI Command BHS (opcode 0x01).
type SCSICommand []byte

// SCSICommandFields holds the fields of a SCSI Command.
type SCSICommandFields struct {
	Immediate bool
	// Final is the F bit: no unsolicited Data-Out follows (always set
	// over iSER, and when there is no unsolicited data).
	Final bool
	Read  bool // R bit: data flows to the initiator
	Write bool // W bit: data flows to the target
	Attr  TaskAttr
	LUN   uint64
	ITT   uint32
	// ExpectedDataTransferLength is the write length for writes and for
	// bidirectional commands; the read length of a bidirectional command
	// goes in a BidiReadLength AHS.
	ExpectedDataTransferLength uint32
	CmdSN                      uint32
	ExpStatSN                  uint32
	// CDB holds the first 16 CDB bytes; a longer CDB continues in an
	// ExtendedCDB AHS.
	CDB [16]byte
}

// BHS returns the common header view.
func (c SCSICommand) BHS() BHS { return BHS(c) }

// Read reports the R bit.
func (c SCSICommand) Read() bool { return c[1]&CmdFlagRead != 0 }

// Write reports the W bit.
func (c SCSICommand) Write() bool { return c[1]&CmdFlagWrite != 0 }

// Attr returns the task attribute.
func (c SCSICommand) Attr() TaskAttr { return TaskAttr(c[1] & cmdAttrMask) }

// ExpectedDataTransferLength returns bytes 20-23.
func (c SCSICommand) ExpectedDataTransferLength() uint32 { return BHS(c).word(OffsetCmdExpectedLength) }

// CmdSN returns the command sequence number.
func (c SCSICommand) CmdSN() uint32 { return BHS(c).word(OffsetCmdCmdSN) }

// ExpStatSN returns the acknowledged status sequence number.
func (c SCSICommand) ExpStatSN() uint32 { return BHS(c).word(OffsetCmdExpStatSN) }

// CDB returns the 16 CDB bytes of the BHS (a view, not a copy).
func (c SCSICommand) CDB() []byte { return c[OffsetCmdCDB : OffsetCmdCDB+16] }

// Encode writes the command.
func (c SCSICommand) Encode(f *SCSICommandFields) {
	flags := uint8(f.Attr) & cmdAttrMask
	if f.Final {
		flags |= CmdFlagFinal
	}
	if f.Read {
		flags |= CmdFlagRead
	}
	if f.Write {
		flags |= CmdFlagWrite
	}
	h := BHS(c)
	h.header(OpSCSICommand, f.Immediate, flags)
	putLUN(h, f.LUN)
	h.SetITT(f.ITT)
	h.setWord(OffsetCmdExpectedLength, f.ExpectedDataTransferLength)
	h.setWord(OffsetCmdCmdSN, f.CmdSN)
	h.setWord(OffsetCmdExpStatSN, f.ExpStatSN)
	copy(c[OffsetCmdCDB:], f.CDB[:])
}

// Fields decodes the command.
func (c SCSICommand) Fields() SCSICommandFields {
	h := BHS(c)
	f := SCSICommandFields{
		Immediate: h.Immediate(), Final: h.Final(), Read: c.Read(), Write: c.Write(), Attr: c.Attr(),
		LUN: h.LUN(), ITT: h.ITT(), ExpectedDataTransferLength: c.ExpectedDataTransferLength(),
		CmdSN: c.CmdSN(), ExpStatSN: c.ExpStatSN(),
	}
	copy(f.CDB[:], c.CDB())
	return f
}

// SCSI Response flags (byte 1; bit 7 is always set).
const (
	RspFlagBidiOverflow  uint8 = 0x10 // ISCSI_FLAG_CMD_BIDI_OVERFLOW (o)
	RspFlagBidiUnderflow uint8 = 0x08 // ISCSI_FLAG_CMD_BIDI_UNDERFLOW (u)
	RspFlagOverflow      uint8 = 0x04 // ISCSI_FLAG_CMD_OVERFLOW (O)
	RspFlagUnderflow     uint8 = 0x02 // ISCSI_FLAG_CMD_UNDERFLOW (U)
)

// SCSI Response iSCSI response codes (byte 2).
const (
	ResponseCompleted     uint8 = 0x00 // ISCSI_STATUS_CMD_COMPLETED
	ResponseTargetFailure uint8 = 0x01 // ISCSI_STATUS_TARGET_FAILURE
)

// Offsets of the fields of the target PDUs that carry sequence numbers
// (struct iscsi_cmd_rsp, iscsi_data_rsp, iscsi_r2t_rsp, iscsi_nopin...).
const (
	OffsetTTT       = 20 // ttt, or SNACK Tag in a SCSI Response
	OffsetStatSN    = 24 // statsn
	OffsetExpCmdSN  = 28 // exp_cmdsn
	OffsetMaxCmdSN  = 32 // max_cmdsn
	OffsetDataSN    = 36 // datasn, r2tsn, exp_datasn
	OffsetBufferOff = 40 // offset, bi_residual_count in a SCSI Response
	OffsetResidual  = 44 // residual_count, data_length in an R2T
)

// SCSIResponse is a view of a SCSI Response BHS (opcode 0x21). Its data
// segment, if any, is a 2-byte SenseLength, the sense data and response
// data (see AppendSenseData).
type SCSIResponse []byte

// SCSIResponseFields holds the fields of a SCSI Response.
type SCSIResponseFields struct {
	BidiOverflow, BidiUnderflow bool
	Overflow, Underflow         bool
	Response                    uint8 // iSCSI service response (ResponseCompleted)
	Status                      uint8 // SCSI status byte
	ITT                         uint32
	SNACKTag                    uint32
	StatSN                      uint32
	ExpCmdSN                    uint32
	MaxCmdSN                    uint32
	ExpDataSN                   uint32
	BidiReadResidualCount       uint32
	ResidualCount               uint32
}

// BHS returns the common header view.
func (r SCSIResponse) BHS() BHS { return BHS(r) }

// Response returns the iSCSI service response byte.
func (r SCSIResponse) Response() uint8 { return r[2] }

// Status returns the SCSI status byte.
func (r SCSIResponse) Status() uint8 { return r[3] }

// StatSN returns the status sequence number.
func (r SCSIResponse) StatSN() uint32 { return BHS(r).word(OffsetStatSN) }

// ExpCmdSN returns the next expected CmdSN.
func (r SCSIResponse) ExpCmdSN() uint32 { return BHS(r).word(OffsetExpCmdSN) }

// MaxCmdSN returns the highest CmdSN the target accepts.
func (r SCSIResponse) MaxCmdSN() uint32 { return BHS(r).word(OffsetMaxCmdSN) }

// ResidualCount returns the (read or write) residual count.
func (r SCSIResponse) ResidualCount() uint32 { return BHS(r).word(OffsetResidual) }

// Encode writes the response.
func (r SCSIResponse) Encode(f *SCSIResponseFields) {
	flags := flagFinal
	if f.BidiOverflow {
		flags |= RspFlagBidiOverflow
	}
	if f.BidiUnderflow {
		flags |= RspFlagBidiUnderflow
	}
	if f.Overflow {
		flags |= RspFlagOverflow
	}
	if f.Underflow {
		flags |= RspFlagUnderflow
	}
	h := BHS(r)
	h.header(OpSCSIResponse, false, flags)
	r[2], r[3] = f.Response, f.Status
	h.SetITT(f.ITT)
	h.setWord(OffsetTTT, f.SNACKTag)
	h.setWord(OffsetStatSN, f.StatSN)
	h.setWord(OffsetExpCmdSN, f.ExpCmdSN)
	h.setWord(OffsetMaxCmdSN, f.MaxCmdSN)
	h.setWord(OffsetDataSN, f.ExpDataSN)
	h.setWord(OffsetBufferOff, f.BidiReadResidualCount)
	h.setWord(OffsetResidual, f.ResidualCount)
}

// Fields decodes the response.
func (r SCSIResponse) Fields() SCSIResponseFields {
	h := BHS(r)
	fl := r[1]
	return SCSIResponseFields{
		BidiOverflow: fl&RspFlagBidiOverflow != 0, BidiUnderflow: fl&RspFlagBidiUnderflow != 0,
		Overflow: fl&RspFlagOverflow != 0, Underflow: fl&RspFlagUnderflow != 0,
		Response: r[2], Status: r[3], ITT: h.ITT(), SNACKTag: h.word(OffsetTTT),
		StatSN: h.word(OffsetStatSN), ExpCmdSN: h.word(OffsetExpCmdSN), MaxCmdSN: h.word(OffsetMaxCmdSN),
		ExpDataSN: h.word(OffsetDataSN), BidiReadResidualCount: h.word(OffsetBufferOff),
		ResidualCount: h.word(OffsetResidual),
	}
}

// AppendSenseData appends the data segment of a SCSI Response carrying
// sense data: the 2-byte SenseLength then the sense bytes (RFC 7143
// section 11.4.7.2). It returns dst unchanged when sense is empty.
func AppendSenseData(dst, sense []byte) []byte {
	if len(sense) == 0 {
		return dst
	}
	dst = append(dst, uint8(len(sense)>>8), uint8(len(sense)))
	return append(dst, sense...)
}

// SenseData returns the sense bytes of a SCSI Response data segment (a view
// into data) or nil if there are none or the length is inconsistent.
func SenseData(data []byte) []byte {
	if len(data) < 2 {
		return nil
	}
	n := int(data[0])<<8 | int(data[1])
	if n > len(data)-2 {
		return nil
	}
	return data[2 : 2+n]
}

// Data-In flags (byte 1).
const (
	DataFlagFinal     uint8 = 0x80 // F
	DataFlagAck       uint8 = 0x40 // ISCSI_FLAG_DATA_ACK (A)
	DataFlagOverflow  uint8 = 0x04 // ISCSI_FLAG_DATA_OVERFLOW (O)
	DataFlagUnderflow uint8 = 0x02 // ISCSI_FLAG_DATA_UNDERFLOW (U)
	DataFlagStatus    uint8 = 0x01 // ISCSI_FLAG_DATA_STATUS (S)
)

// DataOut is a view of a SCSI Data-Out BHS (opcode 0x05, struct
// iscsi_data).
type DataOut []byte

// DataOutFields holds the fields of a Data-Out.
type DataOutFields struct {
	Final        bool
	LUN          uint64
	ITT          uint32
	TTT          uint32 // ReservedTag for unsolicited data
	ExpStatSN    uint32
	DataSN       uint32
	BufferOffset uint32
}

// BHS returns the common header view.
func (d DataOut) BHS() BHS { return BHS(d) }

// TTT returns the Target Transfer Tag.
func (d DataOut) TTT() uint32 { return BHS(d).word(OffsetTTT) }

// DataSN returns the data sequence number within the sequence.
func (d DataOut) DataSN() uint32 { return BHS(d).word(OffsetDataSN) }

// BufferOffset returns the offset of the data in the command's buffer.
func (d DataOut) BufferOffset() uint32 { return BHS(d).word(OffsetBufferOff) }

// Encode writes the Data-Out header.
func (d DataOut) Encode(f *DataOutFields) {
	h := BHS(d)
	var flags uint8
	if f.Final {
		flags = flagFinal
	}
	h.header(OpDataOut, false, flags)
	putLUN(h, f.LUN)
	h.SetITT(f.ITT)
	h.setWord(OffsetTTT, f.TTT)
	h.setWord(OffsetCmdExpStatSN, f.ExpStatSN)
	h.setWord(OffsetDataSN, f.DataSN)
	h.setWord(OffsetBufferOff, f.BufferOffset)
}

// Fields decodes the Data-Out header.
func (d DataOut) Fields() DataOutFields {
	h := BHS(d)
	return DataOutFields{Final: h.Final(), LUN: h.LUN(), ITT: h.ITT(), TTT: h.word(OffsetTTT),
		ExpStatSN: h.word(OffsetCmdExpStatSN), DataSN: h.word(OffsetDataSN), BufferOffset: h.word(OffsetBufferOff)}
}

// DataIn is a view of a SCSI Data-In BHS (opcode 0x25, struct
// iscsi_data_rsp).
type DataIn []byte

// DataInFields holds the fields of a Data-In.
type DataInFields struct {
	Final     bool
	Ack       bool // A bit (ErrorRecoveryLevel > 0 only)
	Overflow  bool
	Underflow bool
	// HasStatus is the S bit: the PDU carries the command status, no SCSI
	// Response follows. Final must be set with it.
	HasStatus bool
	Status    uint8 // SCSI status, valid with HasStatus
	LUN       uint64
	ITT       uint32
	TTT       uint32 // ReservedTag unless Ack
	// StatSN is valid only with HasStatus; the target otherwise sends the
	// current value without advancing it.
	StatSN        uint32
	ExpCmdSN      uint32
	MaxCmdSN      uint32
	DataSN        uint32
	BufferOffset  uint32
	ResidualCount uint32 // valid with HasStatus
}

// BHS returns the common header view.
func (d DataIn) BHS() BHS { return BHS(d) }

// HasStatus reports the S bit.
func (d DataIn) HasStatus() bool { return d[1]&DataFlagStatus != 0 }

// DataSN returns the data sequence number.
func (d DataIn) DataSN() uint32 { return BHS(d).word(OffsetDataSN) }

// BufferOffset returns the offset of the data in the command's buffer.
func (d DataIn) BufferOffset() uint32 { return BHS(d).word(OffsetBufferOff) }

// Encode writes the Data-In header.
func (d DataIn) Encode(f *DataInFields) {
	var flags uint8
	if f.Final {
		flags |= DataFlagFinal
	}
	if f.Ack {
		flags |= DataFlagAck
	}
	if f.Overflow {
		flags |= DataFlagOverflow
	}
	if f.Underflow {
		flags |= DataFlagUnderflow
	}
	if f.HasStatus {
		flags |= DataFlagStatus
	}
	h := BHS(d)
	h.header(OpDataIn, false, flags)
	d[3] = f.Status
	putLUN(h, f.LUN)
	h.SetITT(f.ITT)
	h.setWord(OffsetTTT, f.TTT)
	h.setWord(OffsetStatSN, f.StatSN)
	h.setWord(OffsetExpCmdSN, f.ExpCmdSN)
	h.setWord(OffsetMaxCmdSN, f.MaxCmdSN)
	h.setWord(OffsetDataSN, f.DataSN)
	h.setWord(OffsetBufferOff, f.BufferOffset)
	h.setWord(OffsetResidual, f.ResidualCount)
}

// Fields decodes the Data-In header.
func (d DataIn) Fields() DataInFields {
	h := BHS(d)
	fl := d[1]
	return DataInFields{
		Final: fl&DataFlagFinal != 0, Ack: fl&DataFlagAck != 0, Overflow: fl&DataFlagOverflow != 0,
		Underflow: fl&DataFlagUnderflow != 0, HasStatus: fl&DataFlagStatus != 0, Status: d[3],
		LUN: h.LUN(), ITT: h.ITT(), TTT: h.word(OffsetTTT), StatSN: h.word(OffsetStatSN),
		ExpCmdSN: h.word(OffsetExpCmdSN), MaxCmdSN: h.word(OffsetMaxCmdSN), DataSN: h.word(OffsetDataSN),
		BufferOffset: h.word(OffsetBufferOff), ResidualCount: h.word(OffsetResidual),
	}
}

// R2T is a view of a Ready To Transfer BHS (opcode 0x31, struct
// iscsi_r2t_rsp).
type R2T []byte

// R2TFields holds the fields of an R2T.
type R2TFields struct {
	LUN                       uint64
	ITT                       uint32
	TTT                       uint32
	StatSN                    uint32 // current StatSN, not advanced
	ExpCmdSN                  uint32
	MaxCmdSN                  uint32
	R2TSN                     uint32
	BufferOffset              uint32
	DesiredDataTransferLength uint32
}

// BHS returns the common header view.
func (r R2T) BHS() BHS { return BHS(r) }

// TTT returns the Target Transfer Tag the Data-Out PDUs must echo.
func (r R2T) TTT() uint32 { return BHS(r).word(OffsetTTT) }

// BufferOffset returns the offset of the requested data.
func (r R2T) BufferOffset() uint32 { return BHS(r).word(OffsetBufferOff) }

// DesiredDataTransferLength returns the number of bytes requested.
func (r R2T) DesiredDataTransferLength() uint32 { return BHS(r).word(OffsetResidual) }

// Encode writes the R2T.
func (r R2T) Encode(f *R2TFields) {
	h := BHS(r)
	h.header(OpR2T, false, flagFinal)
	putLUN(h, f.LUN)
	h.SetITT(f.ITT)
	h.setWord(OffsetTTT, f.TTT)
	h.setWord(OffsetStatSN, f.StatSN)
	h.setWord(OffsetExpCmdSN, f.ExpCmdSN)
	h.setWord(OffsetMaxCmdSN, f.MaxCmdSN)
	h.setWord(OffsetDataSN, f.R2TSN)
	h.setWord(OffsetBufferOff, f.BufferOffset)
	h.setWord(OffsetResidual, f.DesiredDataTransferLength)
}

// Fields decodes the R2T.
func (r R2T) Fields() R2TFields {
	h := BHS(r)
	return R2TFields{LUN: h.LUN(), ITT: h.ITT(), TTT: h.word(OffsetTTT), StatSN: h.word(OffsetStatSN),
		ExpCmdSN: h.word(OffsetExpCmdSN), MaxCmdSN: h.word(OffsetMaxCmdSN), R2TSN: h.word(OffsetDataSN),
		BufferOffset: h.word(OffsetBufferOff), DesiredDataTransferLength: h.word(OffsetResidual)}
}

func putLUN(h BHS, lun uint64) {
	h[8], h[9], h[10], h[11] = uint8(lun>>56), uint8(lun>>48), uint8(lun>>40), uint8(lun>>32)
	h[12], h[13], h[14], h[15] = uint8(lun>>24), uint8(lun>>16), uint8(lun>>8), uint8(lun)
}
