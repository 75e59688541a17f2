package nvmeof

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSMARTLogGolden(t *testing.T) {
	l := SMARTLog{
		CriticalWarning: CritMedia, Temperature: 0x13b, AvailableSpare: 100, AvailableSpareThreshold: 10,
		PercentageUsed: 3, EnduranceGroupCriticalWarning: 1,
		DataUnitsRead: 0x0102, DataUnitsWritten: 0x0203, HostReads: 0x0304, HostWrites: 0x0405,
		ControllerBusyTime: 6, PowerCycles: 7, PowerOnHours: 8, UnsafeShutdowns: 9, MediaErrors: 10,
		ErrorLogEntries: 11, WarningTempTime: 12, CriticalTempTime: 13,
		TempSensors:           [8]uint16{0x140, 7: 0x141},
		ThermalMgmtTemp1Count: 14, ThermalMgmtTemp2Count: 15, ThermalMgmtTemp1Time: 16, ThermalMgmtTemp2Time: 17,
	}
	got := make([]byte, SMARTLogSize)
	if err := l.Encode(got); err != nil {
		t.Fatal(err)
	}
	// struct nvme_smart_log, by hand.
	want := make([]byte, 512)
	at(want, 0, 0x08, 0x3b, 0x01, 100, 10, 3, 1)
	at(want, 32, 0x02, 0x01) // data_units_read[16]
	at(want, 48, 0x03, 0x02) // data_units_written
	at(want, 64, 0x04, 0x03) // host_reads
	at(want, 80, 0x05, 0x04) // host_writes
	at(want, 96, 6)          // ctrl_busy_time
	at(want, 112, 7)         // power_cycles
	at(want, 128, 8)         // power_on_hours
	at(want, 144, 9)         // unsafe_shutdowns
	at(want, 160, 10)        // media_errors
	at(want, 176, 11)        // num_err_log_entries
	at(want, 192, 12, 0, 0, 0, 13, 0, 0, 0)
	at(want, 200, 0x40, 0x01) // temp_sensor[0]
	at(want, 214, 0x41, 0x01) // temp_sensor[7]
	at(want, 216, 14, 0, 0, 0, 15, 0, 0, 0, 16, 0, 0, 0, 17)
	checkBytes(t, "SMART log", got, want)
	p, err := ParseSMARTLog(want)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(l, p); d != "" {
		t.Errorf("parsed SMART log (-want +got):\n%s", d)
	}
	// A counter above 2^64 saturates.
	at(want, 32+8, 1)
	if p, _ := ParseSMARTLog(want); p.DataUnitsRead != ^uint64(0) {
		t.Errorf("saturated counter = %#x", p.DataUnitsRead)
	}
	if _, err := ParseSMARTLog(want[:511]); !errors.Is(err, errShortLogPage) {
		t.Errorf("ParseSMARTLog(511 bytes) = %v", err)
	}
}

func TestErrorLogEntryGolden(t *testing.T) {
	e := ErrorLogEntry{ErrorCount: 5, SQID: 1, CID: 0x1234, Status: StatusLBAOutOfRange | StatusDNR,
		ParamErrorLocation: 40, LBA: 0x100000, NSID: 1, VendorInfo: 0, TrType: TrTypeRDMA,
		CommandSpecific: 0xabcdef, TrTypeSpecific: 0x0102}
	got := make([]byte, ErrorLogEntrySize)
	if err := e.Encode(got); err != nil {
		t.Fatal(err)
	}
	// struct nvme_error_slot; status_field is the status << 1 as Linux
	// nvmet_set_error stores it.
	want := make([]byte, 64)
	at(want, 0, 5)
	at(want, 8, 1, 0, 0x34, 0x12, 0x00, 0x81, 40, 0) // sqid, cmdid, status_field, param_error_location
	at(want, 16, 0, 0, 0x10, 0)                      // lba
	at(want, 24, 1, 0, 0, 0, 0, 1)                   // nsid, vs, trtype
	at(want, 32, 0xef, 0xcd, 0xab)                   // cs
	at(want, 40, 0x02, 0x01)                         // transport type specific
	checkBytes(t, "error log entry", got, want)
	p, err := ParseErrorLogEntry(want)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(e, p); d != "" {
		t.Errorf("parsed error log entry (-want +got):\n%s", d)
	}
}

func TestFirmwareSlotLogGolden(t *testing.T) {
	l := FirmwareSlotLog{AFI: 1, FRS: [7]string{"6.1.0-57", "", "v2"}}
	got := make([]byte, FirmwareSlotLogSize)
	if err := l.Encode(got); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 512)
	at(want, 0, 1)
	atString(want, 8, "6.1.0-57")
	atString(want, 24, "v2      ")
	checkBytes(t, "firmware slot log", got, want)
	if p, err := ParseFirmwareSlotLog(want); err != nil || p != l {
		t.Errorf("ParseFirmwareSlotLog = %+v, %v", p, err)
	}
	if err := (&FirmwareSlotLog{FRS: [7]string{"123456789"}}).Encode(got); err == nil {
		t.Errorf("9-byte firmware revision encoded")
	}
}

func TestCommandEffectsLogGolden(t *testing.T) {
	// What Linux nvmet reports for the NVM command set, plus Compare.
	var l CommandEffectsLog
	for _, op := range []uint8{AdminGetLogPage, AdminIdentify, AdminAbort, AdminSetFeatures, AdminGetFeatures,
		AdminAsyncEvent, AdminKeepAlive} {
		l.ACS[op] = EffectsCSUPP
	}
	for _, op := range []uint8{IORead, IOFlush, IODatasetMgmt, IOCompare} {
		l.IOCS[op] = EffectsCSUPP
	}
	l.IOCS[IOWrite] = EffectsCSUPP | EffectsLBCC
	l.IOCS[IOWriteZeroes] = EffectsCSUPP | EffectsLBCC
	got := make([]byte, CommandEffectsLogSize)
	if err := l.Encode(got); err != nil {
		t.Fatal(err)
	}
	// struct nvme_effects_log: acs[256] at 0, iocs[256] at 1024.
	want := make([]byte, 4096)
	for _, op := range []int{0x02, 0x06, 0x08, 0x09, 0x0a, 0x0c, 0x18} {
		at(want, 4*op, 1)
	}
	for _, op := range []int{0x00, 0x02, 0x05, 0x09} {
		at(want, 1024+4*op, 1)
	}
	at(want, 1024+4*0x01, 3)
	at(want, 1024+4*0x08, 3)
	checkBytes(t, "effects log", got, want)
	var p CommandEffectsLog
	if err := ParseCommandEffectsLog(want, &p); err != nil || p != l {
		t.Errorf("ParseCommandEffectsLog: %v", err)
	}
}

func TestChangedNSList(t *testing.T) {
	got := make([]byte, ChangedNSListSize)
	if err := EncodeChangedNSList(got, []uint32{3, 1}); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 4096)
	at(want, 0, 3, 0, 0, 0, 1)
	checkBytes(t, "changed namespace list", got, want)
	l, overflow := ParseChangedNSList(want, nil)
	if overflow || !cmp.Equal(l, []uint32{3, 1}) {
		t.Errorf("ParseChangedNSList = %v, %v", l, overflow)
	}

	if err := EncodeChangedNSList(got, make([]uint32, 1025)); err != nil {
		t.Fatal(err)
	}
	want = make([]byte, 4096)
	at(want, 0, 0xff, 0xff, 0xff, 0xff)
	checkBytes(t, "overflowed changed namespace list", got, want)
	if l, overflow := ParseChangedNSList(want, nil); !overflow || len(l) != 0 {
		t.Errorf("ParseChangedNSList(overflow) = %v, %v", l, overflow)
	}
}
