package nvmeof

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Log page sizes.
const (
	SMARTLogSize          = 512  // struct nvme_smart_log
	ErrorLogEntrySize     = 64   // struct nvme_error_slot
	FirmwareSlotLogSize   = 512  // struct nvme_fw_slot_info_log
	CommandEffectsLogSize = 4096 // struct nvme_effects_log
	ChangedNSListSize     = 4096 // NVME_MAX_CHANGED_NAMESPACES * 4
)

// SMART/Health critical warning bits (Linux NVME_SMART_CRIT_*).
const (
	CritSpare          uint8 = 1 << 0 // NVME_SMART_CRIT_SPARE
	CritTemperature    uint8 = 1 << 1 // NVME_SMART_CRIT_TEMPERATURE
	CritReliability    uint8 = 1 << 2 // NVME_SMART_CRIT_RELIABILITY
	CritMedia          uint8 = 1 << 3 // NVME_SMART_CRIT_MEDIA: read only
	CritVolatileMemory uint8 = 1 << 4 // NVME_SMART_CRIT_VOLATILE_MEMORY
)

// SMART/Health log field offsets (struct nvme_smart_log).
const (
	smartCritWarn       = 0   // critical_warning
	smartTemperature    = 1   // temperature[2], Kelvin
	smartAvailSpare     = 3   // avail_spare
	smartSpareThresh    = 4   // spare_thresh
	smartPercentUsed    = 5   // percent_used
	smartEnduranceWarn  = 6   // endu_grp_crit_warn_sumry
	smartDataUnitsRead  = 32  // data_units_read[16]
	smartDataUnitsWrite = 48  // data_units_written[16]
	smartHostReads      = 64  // host_reads[16]
	smartHostWrites     = 80  // host_writes[16]
	smartBusyTime       = 96  // ctrl_busy_time[16]
	smartPowerCycles    = 112 // power_cycles[16]
	smartPowerOnHours   = 128 // power_on_hours[16]
	smartUnsafeShutdown = 144 // unsafe_shutdowns[16]
	smartMediaErrors    = 160 // media_errors[16]
	smartErrLogEntries  = 176 // num_err_log_entries[16]
	smartWarnTempTime   = 192 // warning_temp_time
	smartCritTempTime   = 196 // critical_comp_time
	smartTempSensors    = 200 // temp_sensor[8]
	smartThermal1Count  = 216 // thm_temp1_trans_count
	smartThermal2Count  = 220 // thm_temp2_trans_count
	smartThermal1Time   = 224 // thm_temp1_total_time
	smartThermal2Time   = 228 // thm_temp2_total_time
)

// SMARTLog is the SMART / Health Information log page (LID 02h, struct
// nvme_smart_log). The 128-bit counters are uint64 here: Encode writes
// zero upper halves and Parse saturates at 2^64-1.
type SMARTLog struct {
	CriticalWarning uint8 // Crit*
	// Temperature is the composite temperature in Kelvin.
	Temperature uint16
	// AvailableSpare, AvailableSpareThreshold and PercentageUsed are
	// percentages (PercentageUsed may exceed 100).
	AvailableSpare                uint8
	AvailableSpareThreshold       uint8
	PercentageUsed                uint8
	EnduranceGroupCriticalWarning uint8
	// DataUnitsRead and DataUnitsWritten count thousands of 512-byte
	// units (Linux nvmet: sectors/1000 rounded up).
	DataUnitsRead    uint64
	DataUnitsWritten uint64
	HostReads        uint64 // read commands completed
	HostWrites       uint64 // write commands completed
	// ControllerBusyTime is in minutes.
	ControllerBusyTime uint64
	PowerCycles        uint64
	PowerOnHours       uint64
	UnsafeShutdowns    uint64
	MediaErrors        uint64
	ErrorLogEntries    uint64
	// WarningTempTime and CriticalTempTime are in minutes.
	WarningTempTime  uint32
	CriticalTempTime uint32
	// TempSensors are in Kelvin, 0 when not implemented.
	TempSensors           [8]uint16
	ThermalMgmtTemp1Count uint32
	ThermalMgmtTemp2Count uint32
	ThermalMgmtTemp1Time  uint32
	ThermalMgmtTemp2Time  uint32
}

// Encode writes the 512-byte log page into b.
func (l *SMARTLog) Encode(b []byte) error {
	if len(b) < SMARTLogSize {
		return fmt.Errorf("%w: SMART log needs %d bytes, have %d", errShortBuffer, SMARTLogSize, len(b))
	}
	b = b[:SMARTLogSize]
	clear(b)
	le := binary.LittleEndian
	b[smartCritWarn] = l.CriticalWarning
	le.PutUint16(b[smartTemperature:], l.Temperature)
	b[smartAvailSpare] = l.AvailableSpare
	b[smartSpareThresh] = l.AvailableSpareThreshold
	b[smartPercentUsed] = l.PercentageUsed
	b[smartEnduranceWarn] = l.EnduranceGroupCriticalWarning
	le.PutUint64(b[smartDataUnitsRead:], l.DataUnitsRead)
	le.PutUint64(b[smartDataUnitsWrite:], l.DataUnitsWritten)
	le.PutUint64(b[smartHostReads:], l.HostReads)
	le.PutUint64(b[smartHostWrites:], l.HostWrites)
	le.PutUint64(b[smartBusyTime:], l.ControllerBusyTime)
	le.PutUint64(b[smartPowerCycles:], l.PowerCycles)
	le.PutUint64(b[smartPowerOnHours:], l.PowerOnHours)
	le.PutUint64(b[smartUnsafeShutdown:], l.UnsafeShutdowns)
	le.PutUint64(b[smartMediaErrors:], l.MediaErrors)
	le.PutUint64(b[smartErrLogEntries:], l.ErrorLogEntries)
	le.PutUint32(b[smartWarnTempTime:], l.WarningTempTime)
	le.PutUint32(b[smartCritTempTime:], l.CriticalTempTime)
	for i, t := range l.TempSensors {
		le.PutUint16(b[smartTempSensors+2*i:], t)
	}
	le.PutUint32(b[smartThermal1Count:], l.ThermalMgmtTemp1Count)
	le.PutUint32(b[smartThermal2Count:], l.ThermalMgmtTemp2Count)
	le.PutUint32(b[smartThermal1Time:], l.ThermalMgmtTemp1Time)
	le.PutUint32(b[smartThermal2Time:], l.ThermalMgmtTemp2Time)
	return nil
}

// ParseSMARTLog parses the SMART / Health Information log page.
func ParseSMARTLog(b []byte) (SMARTLog, error) {
	var l SMARTLog
	if len(b) < SMARTLogSize {
		return l, fmt.Errorf("%w: SMART log %d bytes, want %d", errShortLogPage, len(b), SMARTLogSize)
	}
	le := binary.LittleEndian
	l.CriticalWarning = b[smartCritWarn]
	l.Temperature = le.Uint16(b[smartTemperature:])
	l.AvailableSpare = b[smartAvailSpare]
	l.AvailableSpareThreshold = b[smartSpareThresh]
	l.PercentageUsed = b[smartPercentUsed]
	l.EnduranceGroupCriticalWarning = b[smartEnduranceWarn]
	l.DataUnitsRead = get128sat(b[smartDataUnitsRead:])
	l.DataUnitsWritten = get128sat(b[smartDataUnitsWrite:])
	l.HostReads = get128sat(b[smartHostReads:])
	l.HostWrites = get128sat(b[smartHostWrites:])
	l.ControllerBusyTime = get128sat(b[smartBusyTime:])
	l.PowerCycles = get128sat(b[smartPowerCycles:])
	l.PowerOnHours = get128sat(b[smartPowerOnHours:])
	l.UnsafeShutdowns = get128sat(b[smartUnsafeShutdown:])
	l.MediaErrors = get128sat(b[smartMediaErrors:])
	l.ErrorLogEntries = get128sat(b[smartErrLogEntries:])
	l.WarningTempTime = le.Uint32(b[smartWarnTempTime:])
	l.CriticalTempTime = le.Uint32(b[smartCritTempTime:])
	for i := range l.TempSensors {
		l.TempSensors[i] = le.Uint16(b[smartTempSensors+2*i:])
	}
	l.ThermalMgmtTemp1Count = le.Uint32(b[smartThermal1Count:])
	l.ThermalMgmtTemp2Count = le.Uint32(b[smartThermal2Count:])
	l.ThermalMgmtTemp1Time = le.Uint32(b[smartThermal1Time:])
	l.ThermalMgmtTemp2Time = le.Uint32(b[smartThermal2Time:])
	return l, nil
}

// ParamErrorLocationNone is the Parameter Error Location of an error not
// tied to a command field.
const ParamErrorLocationNone uint16 = 0xffff

// ErrorLogEntry is one Error Information log entry (LID 01h, struct
// nvme_error_slot). The log page is a sequence of them, newest first.
type ErrorLogEntry struct {
	// ErrorCount is the unique, increasing error number; 0 marks an empty
	// entry.
	ErrorCount uint64
	SQID       uint16
	CID        uint16
	// Status is the status field of the failed command's completion (the
	// wire holds it shifted above the phase tag, as nvmet stores it).
	Status Status
	// Phase is the phase tag of that completion.
	Phase bool
	// ParamErrorLocation is the byte (bits 7:0) and bit (bits 10:8) of the
	// offending field in the SQE, or ParamErrorLocationNone.
	ParamErrorLocation uint16
	LBA                uint64
	NSID               uint32
	VendorInfo         uint8
	// TrType is the transport type of the queue (TrTypeRDMA...).
	TrType uint8
	// CommandSpecific is command specific information.
	CommandSpecific uint64
	// TrTypeSpecific is transport type specific information.
	TrTypeSpecific uint16
}

// Encode writes the 64-byte entry into b.
func (e *ErrorLogEntry) Encode(b []byte) error {
	if len(b) < ErrorLogEntrySize {
		return fmt.Errorf("%w: error log entry needs %d bytes, have %d", errShortBuffer, ErrorLogEntrySize, len(b))
	}
	b = b[:ErrorLogEntrySize]
	clear(b)
	le := binary.LittleEndian
	le.PutUint64(b[0:], e.ErrorCount)
	le.PutUint16(b[8:], e.SQID)
	le.PutUint16(b[10:], e.CID)
	sf := uint16(e.Status) << 1
	if e.Phase {
		sf |= 1
	}
	le.PutUint16(b[12:], sf)
	le.PutUint16(b[14:], e.ParamErrorLocation)
	le.PutUint64(b[16:], e.LBA)
	le.PutUint32(b[24:], e.NSID)
	b[28] = e.VendorInfo
	b[29] = e.TrType
	le.PutUint64(b[32:], e.CommandSpecific)
	le.PutUint16(b[40:], e.TrTypeSpecific)
	return nil
}

// ParseErrorLogEntry parses one 64-byte Error Information log entry.
func ParseErrorLogEntry(b []byte) (ErrorLogEntry, error) {
	if len(b) < ErrorLogEntrySize {
		return ErrorLogEntry{}, fmt.Errorf("%w: error log entry %d bytes, want %d", errShortLogPage, len(b), ErrorLogEntrySize)
	}
	le := binary.LittleEndian
	sf := le.Uint16(b[12:])
	return ErrorLogEntry{
		ErrorCount:         le.Uint64(b[0:]),
		SQID:               le.Uint16(b[8:]),
		CID:                le.Uint16(b[10:]),
		Status:             Status(sf >> 1),
		Phase:              sf&1 != 0,
		ParamErrorLocation: le.Uint16(b[14:]),
		LBA:                le.Uint64(b[16:]),
		NSID:               le.Uint32(b[24:]),
		VendorInfo:         b[28],
		TrType:             b[29],
		CommandSpecific:    le.Uint64(b[32:]),
		TrTypeSpecific:     le.Uint16(b[40:]),
	}, nil
}

// FirmwareSlotLog is the Firmware Slot Information log page (LID 03h,
// struct nvme_fw_slot_info_log).
type FirmwareSlotLog struct {
	// AFI is the active firmware info: active slot in bits 2:0, slot
	// activated at next reset in bits 6:4.
	AFI uint8
	// FRS are the firmware revisions of slots 1..7, printable ASCII (8
	// bytes each), empty for an empty slot.
	FRS [7]string
}

// Encode writes the 512-byte log page into b.
func (l *FirmwareSlotLog) Encode(b []byte) error {
	if len(b) < FirmwareSlotLogSize {
		return fmt.Errorf("%w: firmware slot log needs %d bytes, have %d", errShortBuffer, FirmwareSlotLogSize, len(b))
	}
	for i, r := range l.FRS {
		if err := checkPadded(r, 8, true); err != nil {
			return fieldErr("firmware slot log", fmt.Sprintf("FRS%d", i+1), 8+8*i, err)
		}
	}
	b = b[:FirmwareSlotLogSize]
	clear(b)
	b[0] = l.AFI
	for i, r := range l.FRS {
		if r != "" {
			putPadded(b[8+8*i:16+8*i], r, ' ')
		}
	}
	return nil
}

// ParseFirmwareSlotLog parses the Firmware Slot Information log page.
func ParseFirmwareSlotLog(b []byte) (FirmwareSlotLog, error) {
	var l FirmwareSlotLog
	if len(b) < FirmwareSlotLogSize {
		return l, fmt.Errorf("%w: firmware slot log %d bytes, want %d", errShortLogPage, len(b), FirmwareSlotLogSize)
	}
	l.AFI = b[0]
	for i := range l.FRS {
		l.FRS[i] = trimField(b[8+8*i : 16+8*i])
	}
	return l, nil
}

// Commands Supported and Effects bits (Linux NVME_CMD_EFFECTS_*).
const (
	EffectsCSUPP   uint32 = 1 << 0 // NVME_CMD_EFFECTS_CSUPP: command supported
	EffectsLBCC    uint32 = 1 << 1 // NVME_CMD_EFFECTS_LBCC: logical block content change
	EffectsNCC     uint32 = 1 << 2 // NVME_CMD_EFFECTS_NCC: namespace capability change
	EffectsNIC     uint32 = 1 << 3 // NVME_CMD_EFFECTS_NIC: namespace inventory change
	EffectsCCC     uint32 = 1 << 4 // NVME_CMD_EFFECTS_CCC: controller capability change
	EffectsCSEMask uint32 = 7 << 16
)

// CommandEffectsLog is the Commands Supported and Effects log page (LID
// 05h, struct nvme_effects_log), indexed by opcode.
type CommandEffectsLog struct {
	ACS  [256]uint32 // admin commands
	IOCS [256]uint32 // I/O commands
}

// Encode writes the 4096-byte log page into b.
func (l *CommandEffectsLog) Encode(b []byte) error {
	if len(b) < CommandEffectsLogSize {
		return fmt.Errorf("%w: effects log needs %d bytes, have %d", errShortBuffer, CommandEffectsLogSize, len(b))
	}
	b = b[:CommandEffectsLogSize]
	clear(b)
	for i, v := range l.ACS {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	for i, v := range l.IOCS {
		binary.LittleEndian.PutUint32(b[1024+4*i:], v)
	}
	return nil
}

// ParseCommandEffectsLog parses the Commands Supported and Effects log
// page into l.
func ParseCommandEffectsLog(b []byte, l *CommandEffectsLog) error {
	if len(b) < CommandEffectsLogSize {
		return fmt.Errorf("%w: effects log %d bytes, want %d", errShortLogPage, len(b), CommandEffectsLogSize)
	}
	for i := range l.ACS {
		l.ACS[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	for i := range l.IOCS {
		l.IOCS[i] = binary.LittleEndian.Uint32(b[1024+4*i:])
	}
	return nil
}

// EncodeChangedNSList writes the Changed Namespace List log page (LID 04h)
// into the 4096 bytes of b: the NSIDs, zero-terminated, or, when more than
// 1024 changed, FFFFFFFFh in the first entry and zeroes after it.
func EncodeChangedNSList(b []byte, nsids []uint32) error {
	if len(b) < ChangedNSListSize {
		return fmt.Errorf("%w: changed namespace list needs %d bytes, have %d", errShortBuffer, ChangedNSListSize, len(b))
	}
	clear(b[:ChangedNSListSize])
	if len(nsids) > MaxNSIDListEntries {
		binary.LittleEndian.PutUint32(b, math.MaxUint32)
		return nil
	}
	for i, id := range nsids {
		binary.LittleEndian.PutUint32(b[4*i:], id)
	}
	return nil
}

// ParseChangedNSList appends to dst the NSIDs of a Changed Namespace List
// log page, up to the first zero entry, the end of b or 1024 entries.
// overflow reports the FFFFFFFFh marker: more namespaces changed than the
// list holds, and the host rescans them all.
func ParseChangedNSList(b []byte, dst []uint32) (list []uint32, overflow bool) {
	n := min(len(b)/4, MaxNSIDListEntries)
	if n > 0 && binary.LittleEndian.Uint32(b) == math.MaxUint32 {
		return dst, true
	}
	for i := 0; i < n; i++ {
		id := binary.LittleEndian.Uint32(b[4*i:])
		if id == 0 {
			break
		}
		dst = append(dst, id)
	}
	return dst, false
}
