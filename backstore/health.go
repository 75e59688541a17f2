package backstore

import (
	"strings"
	"time"
)

// HealthSource tells where the numbers of a Health come from.
type HealthSource uint8

// Health sources.
const (
	// SourceNone: no health data (Health.Supported is false).
	SourceNone HealthSource = iota
	// SourceSynthetic: the disk's own I/O counters (RAM, file and null
	// disks). No warnings are ever raised, nothing is estimated.
	SourceSynthetic
	// SourceATA: ATA SMART attributes (SMART READ DATA and THRESHOLDS),
	// read through SCSI/ATA Translation.
	SourceATA
	// SourceNVMe: the NVMe SMART / Health Information log page (02h).
	SourceNVMe
	// SourceSCSI: SCSI LOG SENSE pages (temperature, informational
	// exceptions, error counters, solid state media, background scan).
	SourceSCSI
	// SourceCluster: a distributed store's own state (Ceph: pool full and
	// nearfull flags, health checks), mapped to warnings.
	SourceCluster
)

// String returns the source's name.
func (s HealthSource) String() string {
	switch s {
	case SourceNone:
		return "none"
	case SourceSynthetic:
		return "synthetic"
	case SourceATA:
		return "ata"
	case SourceNVMe:
		return "nvme"
	case SourceSCSI:
		return "scsi"
	case SourceCluster:
		return "cluster"
	}
	return "unknown"
}

// HealthFields is a set of Health fields; Health.Valid says which fields
// hold data the source reported. A field outside Valid is zero and must be
// treated as "not reported", not as a measured zero.
type HealthFields uint16

// Health fields.
const (
	FieldCriticalWarning HealthFields = 1 << iota
	FieldTemperature
	FieldAvailableSpare // AvailableSpare and AvailableSpareThreshold
	FieldPercentageUsed
	FieldMediaErrors
	FieldPowerOnHours
	FieldPowerCycles
	FieldUnsafeShutdowns
	FieldDataUnits    // DataUnitsRead and DataUnitsWritten
	FieldHostCommands // HostReadCommands and HostWriteCommands
)

// Has reports whether every field of f is in s.
func (s HealthFields) Has(f HealthFields) bool { return s&f == f }

// CriticalWarning is a set of critical warnings, with the bit layout of
// byte 0 of the NVMe SMART / Health log page so that the NVMe target can
// copy it. The SCSI target turns a non-zero set into an informational
// exception (FAILURE PREDICTION THRESHOLD EXCEEDED, 5Dh/00h).
type CriticalWarning uint8

// Critical warnings.
const (
	// WarnSpare: available spare fell below its threshold.
	WarnSpare CriticalWarning = 1 << iota
	// WarnTemperature: temperature outside its thresholds.
	WarnTemperature
	// WarnReliability: reliability degraded by media errors, or a
	// pre-failure attribute crossed its threshold.
	WarnReliability
	// WarnReadOnly: media placed in read-only mode.
	WarnReadOnly
	// WarnVolatileBackup: volatile memory backup device failed.
	WarnVolatileBackup
)

// String lists the warnings, separated by "|", or "none".
func (w CriticalWarning) String() string {
	if w == 0 {
		return "none"
	}
	names := [...]string{"spare", "temperature", "reliability", "read-only", "volatile-backup"}
	var b strings.Builder
	for i, n := range names {
		if w&(1<<i) != 0 {
			if b.Len() > 0 {
				b.WriteByte('|')
			}
			b.WriteString(n)
		}
	}
	if rest := w &^ (1<<len(names) - 1); rest != 0 {
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteString("other")
	}
	return b.String()
}

// Health is a transport-neutral view of a disk's health, from which the NVMe
// SMART / Health log page and the SCSI Informational Exceptions and LOG SENSE
// pages are built. Units follow the NVMe log page where one exists.
type Health struct {
	// Supported is false when the device reports no health data; Reason
	// then says why and every other field is zero.
	Supported bool
	// Reason explains why Supported is false.
	Reason string
	// Source tells where the data comes from.
	Source HealthSource
	// Valid is the set of fields below that the source reported.
	Valid HealthFields

	// CriticalWarning holds the warnings raised by the device.
	CriticalWarning CriticalWarning
	// Temperature is the current (composite) temperature in degrees
	// Celsius. The NVMe log page wants Kelvin: add 273.
	Temperature int16
	// AvailableSpare is the remaining spare capacity in percent (0-100).
	AvailableSpare uint8
	// AvailableSpareThreshold is the level below which WarnSpare is raised.
	AvailableSpareThreshold uint8
	// PercentageUsed estimates the life used in percent; it may exceed 100
	// and saturates at 255.
	PercentageUsed uint8
	// MediaErrors counts unrecovered data integrity errors.
	MediaErrors uint64
	// PowerOnHours counts hours powered on (for synthetic health: hours
	// since the disk was opened).
	PowerOnHours uint64
	// PowerCycles counts power cycles (ATA: power-on resets; SCSI:
	// start-stop cycles).
	PowerCycles uint64
	// UnsafeShutdowns counts power losses without a clean shutdown.
	UnsafeShutdowns uint64
	// DataUnitsRead counts data read in NVMe data units of 1000 512-byte
	// blocks (512,000 bytes), rounded up; see DataUnits.
	DataUnitsRead uint64
	// DataUnitsWritten counts data written, in the same units.
	DataUnitsWritten uint64
	// HostReadCommands counts completed read commands.
	HostReadCommands uint64
	// HostWriteCommands counts completed write commands.
	HostWriteCommands uint64
}

// DataUnitBytes is the size of an NVMe data unit: 1000 blocks of 512 bytes.
const DataUnitBytes = 512 * 1000

// DataUnits converts a byte count to NVMe data units, rounding up as the
// NVMe specification asks.
func DataUnits(bytes uint64) uint64 {
	u := bytes / DataUnitBytes
	if bytes%DataUnitBytes != 0 {
		u++
	}
	return u
}

// syntheticHealth builds the honest health of a disk without a device under
// it: no warnings, and counters of the disk's own I/O since opened. Fields
// that such a disk cannot know (temperature, wear, spare, power cycles) stay
// outside Valid.
func syntheticHealth(s *Stats, opened time.Time) Health {
	h := Health{
		Supported:         true,
		Source:            SourceSynthetic,
		Valid:             FieldCriticalWarning | FieldMediaErrors | FieldPowerOnHours | FieldDataUnits | FieldHostCommands,
		MediaErrors:       s.Errors(),
		PowerOnHours:      uint64(time.Since(opened) / time.Hour),
		DataUnitsRead:     DataUnits(s.Read.Bytes),
		DataUnitsWritten:  DataUnits(s.Write.Bytes),
		HostReadCommands:  s.Read.Ops - s.Read.Errors,
		HostWriteCommands: s.Write.Ops - s.Write.Errors,
	}
	return h
}

// unsupportedHealth is the Health of a device without health data.
func unsupportedHealth(reason string) Health {
	return Health{Supported: false, Source: SourceNone, Reason: reason}
}
