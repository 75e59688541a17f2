package backstore

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The SMART mapping tests run on the recorded-format fixtures in testdata:
// device responses byte for byte as the transports hand them to the parsers.

func TestParseNVMeHealthFixtures(t *testing.T) {
	t.Parallel()
	all := FieldCriticalWarning | FieldTemperature | FieldAvailableSpare | FieldPercentageUsed | FieldMediaErrors |
		FieldPowerOnHours | FieldPowerCycles | FieldUnsafeShutdowns | FieldDataUnits | FieldHostCommands
	tests := []struct {
		file string
		want Health
	}{{
		file: "nvme_samsung_970.hex",
		want: Health{
			Supported: true, Source: SourceNVMe, Valid: all,
			Temperature: 36, AvailableSpare: 100, AvailableSpareThreshold: 10, PercentageUsed: 2,
			DataUnitsRead: 25349845, DataUnitsWritten: 31412560,
			HostReadCommands: 412905723, HostWriteCommands: 561370312,
			PowerCycles: 1204, PowerOnHours: 6512, UnsafeShutdowns: 87, MediaErrors: 0,
		},
	}, {
		file: "nvme_worn.hex",
		want: Health{
			Supported: true, Source: SourceNVMe, Valid: all,
			CriticalWarning: WarnSpare | WarnReliability,
			Temperature:     70, AvailableSpare: 4, AvailableSpareThreshold: 10, PercentageUsed: 112,
			DataUnitsRead: 912345678, DataUnitsWritten: 1823456789,
			HostReadCommands: 9123456789, HostWriteCommands: 12345678901,
			PowerCycles: 3301, PowerOnHours: 41234, UnsafeShutdowns: 412, MediaErrors: 1935,
		},
	}}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			got, err := parseNVMeHealth(loadFixture(t, tt.file).get(t, "log-02"))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("health (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseNVMeHealthEdges(t *testing.T) {
	t.Parallel()
	if _, err := parseNVMeHealth(make([]byte, 511)); err == nil {
		t.Error("short page: no error")
	}
	page := make([]byte, 512)
	// Temperature 0 K: not reported.
	h, err := parseNVMeHealth(page)
	if err != nil {
		t.Fatal(err)
	}
	if h.Valid.Has(FieldTemperature) {
		t.Error("temperature 0 K reported as valid")
	}
	// A 128-bit counter above 2^64 saturates instead of wrapping.
	page[32+8] = 1
	binary.LittleEndian.PutUint16(page[1:], 0xffff)
	h, _ = parseNVMeHealth(page)
	if h.DataUnitsRead != math.MaxUint64 {
		t.Errorf("DataUnitsRead = %d, want saturation", h.DataUnitsRead)
	}
	if h.Temperature != math.MaxInt16 {
		t.Errorf("Temperature = %d, want clamped to %d", h.Temperature, math.MaxInt16)
	}
}

func ataFixtureInput(t testing.TB, file string) ataInput {
	f := loadFixture(t, file)
	in := ataInput{data: f.get(t, "smart-data"), devStats: f.withPrefix("devstat-"), sectorSize: 512}
	if b, ok := f.sections["smart-thresholds"]; ok {
		in.thresholds = b
	}
	return in
}

func TestParseATAHealthFixtures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		file   string
		modify func(*ataInput)
		want   Health
	}{{
		name: "ssd with device statistics",
		file: "ata_ssd_mx500.hex",
		want: Health{
			Supported: true, Source: SourceATA,
			Valid: FieldCriticalWarning | FieldTemperature | FieldPercentageUsed | FieldMediaErrors | FieldPowerOnHours |
				FieldPowerCycles | FieldUnsafeShutdowns | FieldDataUnits | FieldHostCommands,
			Temperature:    38,
			PercentageUsed: 9, // 202 Percent_Lifetime_Remain normalized 91; devstat 07h says 9 too
			PowerOnHours:   14521, PowerCycles: 1460, UnsafeShutdowns: 93, MediaErrors: 0,
			DataUnitsWritten: 29416490, DataUnitsRead: 41234568, // 512-byte sectors, rounded up
			HostWriteCommands: 612345678, HostReadCommands: 498765432,
		},
	}, {
		name:   "ssd attributes only",
		file:   "ata_ssd_mx500.hex",
		modify: func(in *ataInput) { in.devStats = nil },
		want: Health{
			Supported: true, Source: SourceATA,
			Valid: FieldCriticalWarning | FieldTemperature | FieldPercentageUsed | FieldMediaErrors | FieldPowerOnHours |
				FieldPowerCycles | FieldUnsafeShutdowns,
			Temperature: 38, PercentageUsed: 9,
			PowerOnHours: 14520, PowerCycles: 1460, UnsafeShutdowns: 93, MediaErrors: 0,
		},
	}, {
		name:   "ssd without thresholds judges no warnings",
		file:   "ata_ssd_mx500.hex",
		modify: func(in *ataInput) { in.devStats, in.thresholds = nil, nil },
		want: Health{
			Supported: true, Source: SourceATA,
			Valid: FieldTemperature | FieldPercentageUsed | FieldMediaErrors | FieldPowerOnHours |
				FieldPowerCycles | FieldUnsafeShutdowns,
			Temperature: 38, PercentageUsed: 9,
			PowerOnHours: 14520, PowerCycles: 1460, UnsafeShutdowns: 93, MediaErrors: 0,
		},
	}, {
		name:   "4Kn sectors scale the data units",
		file:   "ata_ssd_mx500.hex",
		modify: func(in *ataInput) { in.sectorSize = 4096 },
		want: Health{
			Supported: true, Source: SourceATA,
			Valid: FieldCriticalWarning | FieldTemperature | FieldPercentageUsed | FieldMediaErrors | FieldPowerOnHours |
				FieldPowerCycles | FieldUnsafeShutdowns | FieldDataUnits | FieldHostCommands,
			Temperature: 38, PercentageUsed: 9,
			PowerOnHours: 14521, PowerCycles: 1460, UnsafeShutdowns: 93, MediaErrors: 0,
			DataUnitsWritten: 235331920, DataUnitsRead: 329876544,
			HostWriteCommands: 612345678, HostReadCommands: 498765432,
		},
	}, {
		name: "failing hdd",
		file: "ata_hdd_failing.hex",
		want: Health{
			Supported: true, Source: SourceATA,
			Valid: FieldCriticalWarning | FieldTemperature | FieldMediaErrors | FieldPowerOnHours |
				FieldPowerCycles | FieldUnsafeShutdowns,
			CriticalWarning: WarnReliability, // 5 Reallocated_Sector_Ct: 1 <= threshold 140
			Temperature:     36,
			PowerOnHours:    49012, PowerCycles: 101,
			UnsafeShutdowns: 57, // 192 Power-Off_Retract_Count
			MediaErrors:     17, // 198 Offline_Uncorrectable (no 187)
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := ataFixtureInput(t, tt.file)
			if tt.modify != nil {
				tt.modify(&in)
			}
			got, err := parseATAHealth(in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("health (-want +got):\n%s", diff)
			}
		})
	}
}

func TestATAFixtureChecksums(t *testing.T) {
	t.Parallel()
	// The fixtures carry valid ATA data structure checksums, as devices send.
	for _, file := range []string{"ata_ssd_mx500.hex", "ata_hdd_failing.hex"} {
		f := loadFixture(t, file)
		for _, s := range []string{"smart-data", "smart-thresholds"} {
			var sum byte
			for _, c := range f.get(t, s) {
				sum += c
			}
			if sum != 0 {
				t.Errorf("%s %s: checksum sum %#x, want 0", file, s, sum)
			}
		}
	}
}

func TestParseATAHealthWarnings(t *testing.T) {
	t.Parallel()
	in := ataFixtureInput(t, "ata_ssd_mx500.hex")
	data := bytes.Clone(in.data)
	thr := bytes.Clone(in.thresholds)
	// Add 232 Available_Reservd_Space at 5 (threshold 10), and push the
	// temperature attribute's normalized value under a threshold.
	setAttr := func(slot int, id byte, flags uint16, value byte, threshold byte) {
		a := data[2+slot*12:]
		a[0] = id
		binary.LittleEndian.PutUint16(a[1:], flags)
		a[3], a[4] = value, value
		e := thr[2+slot*12:]
		e[0], e[1] = id, threshold
	}
	setAttr(25, 232, 0x0033, 5, 10)
	for i := range 30 {
		if data[2+i*12] == 194 {
			data[2+i*12+3] = 20
			thr[2+i*12], thr[2+i*12+1] = 194, 30
		}
	}
	got, err := parseATAHealth(ataInput{data: data, thresholds: thr})
	if err != nil {
		t.Fatal(err)
	}
	if want := WarnSpare | WarnTemperature; got.CriticalWarning != want {
		t.Errorf("CriticalWarning = %v, want %v", got.CriticalWarning, want)
	}
	if !got.Valid.Has(FieldAvailableSpare) || got.AvailableSpare != 5 || got.AvailableSpareThreshold != 10 {
		t.Errorf("spare = %d/%d (valid %v), want 5/10", got.AvailableSpare, got.AvailableSpareThreshold, got.Valid.Has(FieldAvailableSpare))
	}
	if _, err := parseATAHealth(ataInput{data: data[:511]}); err == nil {
		t.Error("short SMART data: no error")
	}
}

func TestParseSCSIHealthFixtures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file string
		want Health
	}{{
		file: "scsi_sas_ssd.hex",
		want: Health{
			Supported: true, Source: SourceSCSI,
			Valid: FieldCriticalWarning | FieldTemperature | FieldPercentageUsed | FieldMediaErrors |
				FieldPowerOnHours | FieldPowerCycles | FieldDataUnits,
			Temperature: 31, PercentageUsed: 1, PowerOnHours: 40053, PowerCycles: 0, MediaErrors: 0,
			DataUnitsRead: 842380401, DataUnitsWritten: 562524113,
		},
	}, {
		file: "scsi_sas_hdd_failing.hex",
		want: Health{
			Supported: true, Source: SourceSCSI,
			Valid: FieldCriticalWarning | FieldTemperature | FieldMediaErrors |
				FieldPowerOnHours | FieldPowerCycles | FieldDataUnits,
			CriticalWarning: WarnReliability, // 5Dh/10h
			Temperature:     45,
			PowerOnHours:    50205, PowerCycles: 214,
			MediaErrors:   16, // 12 read + 1 write + 3 verify
			DataUnitsRead: 1781925155, DataUnitsWritten: 241126542,
		},
	}}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			got, err := parseSCSIHealth(loadFixture(t, tt.file).withPrefix("page-"))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("health (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseSCSIHealthEdges(t *testing.T) {
	t.Parallel()
	h, err := parseSCSIHealth(nil)
	if err != nil || h.Supported || h.Reason == "" || h.Valid != 0 {
		t.Errorf("no pages: got %+v, %v; want unsupported with a reason", h, err)
	}
	for _, bad := range [][]byte{
		{0x0d, 0x00},                         // short header
		{0x0d, 0x00, 0x00, 0x08, 0, 0, 3, 2}, // page length beyond data
		{0x0d, 0x00, 0x00, 0x04, 0, 0, 3, 9}, // parameter length beyond page
	} {
		if _, err := parseSCSIHealth([][]byte{bad}); err == nil {
			t.Errorf("page % x: no error", bad)
		}
	}
	// A temperature of FFh means "not available".
	h, err = parseSCSIHealth([][]byte{{0x0d, 0, 0, 6, 0, 0, 3, 2, 0, 0xff}})
	if err != nil || h.Supported || h.Valid.Has(FieldTemperature) {
		t.Errorf("temperature FFh: got %+v, %v", h, err)
	}
	if beCounter(bytes.Repeat([]byte{0xff}, 9)) != math.MaxUint64 {
		t.Error("beCounter does not saturate")
	}
}

func TestInfoExceptionWarning(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		asc, ascq byte
		want      CriticalWarning
	}{
		{0x00, 0x00, 0},
		{0x0b, 0x01, WarnTemperature},
		{0x5d, 0x00, WarnReliability},
		{0x5d, 0x10, WarnReliability},
		{0x0b, 0x00, WarnReliability},
	} {
		if got := infoExceptionWarning(tt.asc, tt.ascq); got != tt.want {
			t.Errorf("infoExceptionWarning(%02xh/%02xh) = %v, want %v", tt.asc, tt.ascq, got, tt.want)
		}
	}
}

func TestParseSense(t *testing.T) {
	t.Parallel()
	fixed := make([]byte, 18)
	fixed[0], fixed[2], fixed[12], fixed[13] = 0x70, 0x05, 0x20, 0x00
	for _, tt := range []struct {
		name string
		in   []byte
		want senseData
		ok   bool
	}{
		{"fixed", fixed, senseData{Key: 5, ASC: 0x20}, true},
		{"fixed short", []byte{0x70, 0, 0x06}, senseData{Key: 6}, true},
		{"descriptor", []byte{0x72, 0x05, 0x24, 0x01}, senseData{Key: 5, ASC: 0x24, ASCQ: 1}, true},
		{"empty", nil, senseData{}, false},
		{"unknown", []byte{0x7f, 1, 2, 3}, senseData{}, false},
		{"descriptor short", []byte{0x72, 5}, senseData{}, false},
	} {
		got, ok := parseSense(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: parseSense = %+v, %v; want %+v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func TestSyntheticHealth(t *testing.T) {
	t.Parallel()
	s := Stats{
		Read:  OpStats{Ops: 10, Bytes: 512000 + 1, Errors: 1},
		Write: OpStats{Ops: 5, Bytes: 4096},
		Flush: OpStats{Ops: 2, Errors: 1},
	}
	h := syntheticHealth(&s, time.Now().Add(-3*time.Hour-time.Minute))
	want := Health{
		Supported: true, Source: SourceSynthetic,
		Valid:       FieldCriticalWarning | FieldMediaErrors | FieldPowerOnHours | FieldDataUnits | FieldHostCommands,
		MediaErrors: 2, PowerOnHours: 3,
		DataUnitsRead: 2, DataUnitsWritten: 1,
		HostReadCommands: 9, HostWriteCommands: 5,
	}
	if diff := cmp.Diff(want, h); diff != "" {
		t.Errorf("synthetic health (-want +got):\n%s", diff)
	}
}

func TestHealthHelpers(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ bytes, units uint64 }{
		{0, 0}, {1, 1}, {512000, 1}, {512001, 2}, {math.MaxUint64, math.MaxUint64/512000 + 1},
	} {
		if got := DataUnits(tt.bytes); got != tt.units {
			t.Errorf("DataUnits(%d) = %d, want %d", tt.bytes, got, tt.units)
		}
	}
	for _, tt := range []struct {
		w    CriticalWarning
		want string
	}{
		{0, "none"}, {WarnSpare, "spare"}, {WarnSpare | WarnReliability, "spare|reliability"},
		{WarnVolatileBackup | 0x80, "volatile-backup|other"}, {0x40, "other"},
	} {
		if got := tt.w.String(); got != tt.want {
			t.Errorf("CriticalWarning(%#x).String() = %q, want %q", uint8(tt.w), got, tt.want)
		}
	}
	for s := SourceNone; s <= SourceSCSI+1; s++ {
		if s.String() == "" {
			t.Errorf("HealthSource(%d) has no name", s)
		}
	}
	if !(FieldTemperature | FieldDataUnits).Has(FieldDataUnits) || FieldTemperature.Has(FieldTemperature|FieldDataUnits) {
		t.Error("HealthFields.Has is wrong")
	}
}

// Fuzz targets: the parsers take bytes straight from devices; whatever they
// get, they must not panic, and what they report must be self-consistent.

func FuzzParseNVMeHealth(f *testing.F) {
	for _, file := range []string{"nvme_samsung_970.hex", "nvme_worn.hex"} {
		f.Add(loadFixture(f, file).get(f, "log-02"))
	}
	f.Add([]byte{})
	f.Add(make([]byte, 511))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseNVMeHealth(b)
		if (err == nil) != (len(b) >= nvmeSMARTLogLen) {
			t.Fatalf("len %d: err %v", len(b), err)
		}
		if err != nil {
			return
		}
		if !h.Supported || h.Source != SourceNVMe || h.CriticalWarning != CriticalWarning(b[0]) {
			t.Fatalf("inconsistent health %+v", h)
		}
		if h.Valid.Has(FieldTemperature) == (b[1] == 0 && b[2] == 0) {
			t.Fatalf("temperature validity wrong for % x", b[1:3])
		}
	})
}

// FuzzParseATAHealth takes one byte string: two bytes of sector size, then
// the SMART data sector, the thresholds sector and Device Statistics pages,
// 512 bytes each (a short tail is passed on too).
func FuzzParseATAHealth(f *testing.F) {
	for _, file := range []string{"ata_ssd_mx500.hex", "ata_hdd_failing.hex"} {
		in := ataFixtureInput(f, file)
		f.Add(append(append(append([]byte{0, 2}, in.data...), in.thresholds...), bytes.Join(in.devStats, nil)...))
	}
	f.Add([]byte{})
	f.Add(make([]byte, 2+512+100))
	f.Fuzz(func(t *testing.T, b []byte) {
		var in ataInput
		if len(b) >= 2 {
			in.sectorSize = int(binary.LittleEndian.Uint16(b))
			b = b[2:]
		}
		var chunks [][]byte
		for len(b) > 0 {
			n := min(len(b), ataSectorLen)
			chunks, b = append(chunks, b[:n]), b[n:]
		}
		if len(chunks) > 0 {
			in.data = chunks[0]
		}
		if len(chunks) > 1 {
			in.thresholds = chunks[1]
		}
		if len(chunks) > 2 {
			in.devStats = chunks[2:]
		}
		h, err := parseATAHealth(in)
		if (err == nil) != (len(in.data) >= ataSectorLen) {
			t.Fatalf("len %d: err %v", len(in.data), err)
		}
		if err != nil {
			return
		}
		if !h.Supported || h.Source != SourceATA {
			t.Fatalf("inconsistent health %+v", h)
		}
		if h.Valid.Has(FieldCriticalWarning) != (len(in.thresholds) >= ataSectorLen) {
			t.Fatalf("critical warning validity %v with %d threshold bytes", h.Valid.Has(FieldCriticalWarning), len(in.thresholds))
		}
		if h.CriticalWarning&^(WarnSpare|WarnTemperature|WarnReliability) != 0 {
			t.Fatalf("ATA raised impossible warnings %v", h.CriticalWarning)
		}
	})
}

func FuzzParseSCSIHealth(f *testing.F) {
	for _, file := range []string{"scsi_sas_ssd.hex", "scsi_sas_hdd_failing.hex"} {
		f.Add(bytes.Join(loadFixture(f, file).withPrefix("page-"), nil))
	}
	f.Add([]byte{})
	f.Add([]byte{0x2f, 0, 0, 7, 0, 0, 3, 3, 0x5d, 0, 40})
	f.Fuzz(func(t *testing.T, b []byte) {
		parseSense(b)
		// Cut the stream into pages as LOG SENSE would return them.
		var pages [][]byte
		for rest := b; len(rest) > 0; {
			_, _, params, next, err := splitLogPage(rest)
			if err != nil {
				pages = append(pages, rest) // malformed: the parser must say so
				break
			}
			pages = append(pages, rest[:len(rest)-len(next)])
			if len(params) > len(rest) {
				t.Fatal("params longer than the page")
			}
			rest = next
		}
		h, err := parseSCSIHealth(pages)
		if err != nil {
			return
		}
		if h.Supported != (h.Valid != 0) {
			t.Fatalf("Supported %v with fields %b", h.Supported, h.Valid)
		}
		if !h.Supported && (h.Reason == "" || strings.TrimSpace(h.Reason) != h.Reason) {
			t.Fatalf("unsupported without a reason: %+v", h)
		}
	})
}
