package backstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/dswarbrick/smart/ata"
)

// This file maps raw SMART / health data, as devices return it, to Health.
// The transports that fetch the data are in smart_linux.go. Every parser
// checks lengths before slicing and accepts any input without panicking
// (see the Fuzz tests).

// NVMe SMART / Health Information log page (log identifier 02h).
const (
	nvmeSMARTLogID  = 0x02
	nvmeSMARTLogLen = 512
)

// parseNVMeHealth maps an NVMe SMART / Health Information log page to Health.
func parseNVMeHealth(b []byte) (Health, error) {
	if len(b) < nvmeSMARTLogLen {
		return Health{}, fmt.Errorf("NVMe SMART log page has %d bytes, want %d", len(b), nvmeSMARTLogLen)
	}
	h := Health{
		Supported: true,
		Source:    SourceNVMe,
		Valid: FieldCriticalWarning | FieldAvailableSpare | FieldPercentageUsed | FieldMediaErrors |
			FieldPowerOnHours | FieldPowerCycles | FieldUnsafeShutdowns | FieldDataUnits | FieldHostCommands,
		CriticalWarning:         CriticalWarning(b[0]),
		AvailableSpare:          b[3],
		AvailableSpareThreshold: b[4],
		PercentageUsed:          b[5],
		DataUnitsRead:           le128(b[32:48]),
		DataUnitsWritten:        le128(b[48:64]),
		HostReadCommands:        le128(b[64:80]),
		HostWriteCommands:       le128(b[80:96]),
		PowerCycles:             le128(b[112:128]),
		PowerOnHours:            le128(b[128:144]),
		UnsafeShutdowns:         le128(b[144:160]),
		MediaErrors:             le128(b[160:176]),
	}
	// Composite temperature in Kelvin; 0 means not reported.
	if k := binary.LittleEndian.Uint16(b[1:3]); k != 0 {
		h.Temperature = clampInt16(int(k) - 273)
		h.Valid |= FieldTemperature
	}
	return h, nil
}

// le128 decodes a 128-bit little-endian counter, saturating at the largest
// uint64.
func le128(b []byte) uint64 {
	if binary.LittleEndian.Uint64(b[8:16]) != 0 {
		return math.MaxUint64
	}
	return binary.LittleEndian.Uint64(b[:8])
}

func clampInt16(v int) int16 {
	return int16(min(max(v, math.MinInt16), math.MaxInt16))
}

// ATA SMART data: SMART READ DATA and SMART READ THRESHOLDS each return one
// 512-byte sector; the first 362 bytes of the data sector are the attribute
// table that ata.SmartPage describes.
const (
	ataSectorLen       = 512
	ataSmartPageLen    = 362 // binary.Size(ata.SmartPage{})
	ataThresholdOffset = 2
	ataThresholdLen    = 12
	ataMaxAttrs        = 30
	ataPrefailFlag     = 0x0001
)

// ATA attribute IDs used by the mapping (names as in smartctl's drive
// database defaults). Attributes whose raw units differ between vendors
// (241/242 count LBAs, GiB or 32 MiB) are left out: data and command
// counters come from the standard Device Statistics log instead.
const (
	ataAttrPowerOnHours       = 9
	ataAttrPowerCycles        = 12
	ataAttrAvailReserved170   = 170
	ataAttrUnexpectPowerLoss  = 174
	ataAttrWearLeveling       = 177 // Samsung: normalized = life left
	ataAttrReportedUncorrect  = 187
	ataAttrAirflowTemperature = 190
	ataAttrPowerOffRetract    = 192
	ataAttrTemperature        = 194
	ataAttrOfflineUncorrect   = 198
	ataAttrPercentLifeRemain  = 202 // Crucial/Micron
	ataAttrSSDLifeLeft        = 231
	ataAttrAvailReserved232   = 232
	ataAttrMediaWearout       = 233 // Intel
)

// ATA Device Statistics log (log address 04h, ACS-3): pages of 512 bytes made
// of 64-bit statistics; bit 63 says the statistic is supported, bit 62 that
// its value is valid, bits 47:0 hold the value.
const (
	ataLogDeviceStats   = 0x04
	ataStatsGeneral     = 0x01 // page: general statistics
	ataStatsErrors      = 0x04 // page: general errors
	ataStatsTemperature = 0x05 // page: temperature
	ataStatsSSD         = 0x07 // page: solid state device

	ataStatSupported = 1 << 63
	ataStatValid     = 1 << 62
)

// ataDevStatPages lists the Device Statistics pages parseATAHealth uses.
const ataDevStatPages = "\x01\x04\x05\x07"

// ataAttr is one decoded attribute with its threshold (0 when unknown).
type ataAttr struct {
	id, flags, value uint16
	raw              uint64 // the six vendor bytes, little-endian (raw48)
	threshold        uint8
}

// ataInput is what an ATA device returns for health: the SMART READ DATA
// sector, the SMART READ THRESHOLDS sector (nil when unavailable), pages of
// the Device Statistics log (each self-identified by its header; any
// subset, in any order) and the logical sector size for the sector counters.
type ataInput struct {
	data, thresholds []byte
	devStats         [][]byte
	sectorSize       int
}

// parseATAHealth maps ATA SMART data to Health. SMART attributes give
// temperature, power-on hours, power cycles, unsafe shutdowns, media
// errors, wear and spare, read with smartctl's default conversions (raw48;
// power-on hours raw24); the Device Statistics log, in standard units,
// overrides them and adds data units and command counts. Without thresholds
// no critical warning can be judged and CriticalWarning stays outside Valid.
func parseATAHealth(in ataInput) (Health, error) {
	data, thresholds := in.data, in.thresholds
	if len(data) < ataSectorLen {
		return Health{}, fmt.Errorf("ATA SMART data has %d bytes, want %d", len(data), ataSectorLen)
	}
	var page ata.SmartPage
	if err := binary.Read(bytes.NewReader(data[:ataSmartPageLen]), binary.LittleEndian, &page); err != nil {
		return Health{}, fmt.Errorf("decoding ATA SMART data: %w", err)
	}
	var attrs [ataMaxAttrs]ataAttr
	n := 0
	for _, a := range page.Attrs {
		if a.Id == 0 {
			continue
		}
		var raw uint64
		for i := 5; i >= 0; i-- {
			raw = raw<<8 | uint64(a.VendorBytes[i])
		}
		attrs[n] = ataAttr{id: uint16(a.Id), flags: a.Flags, value: uint16(a.Value), raw: raw}
		n++
	}
	haveThresholds := len(thresholds) >= ataSectorLen
	if haveThresholds {
		for i := range ataMaxAttrs {
			e := thresholds[ataThresholdOffset+i*ataThresholdLen:]
			if e[0] == 0 {
				continue
			}
			for j := range attrs[:n] {
				if attrs[j].id == uint16(e[0]) {
					attrs[j].threshold = e[1]
				}
			}
		}
	}
	find := func(ids ...uint16) *ataAttr {
		for _, id := range ids {
			for j := range attrs[:n] {
				if attrs[j].id == id {
					return &attrs[j]
				}
			}
		}
		return nil
	}
	h := Health{Supported: true, Source: SourceATA}
	for _, id := range [...]uint16{ataAttrTemperature, ataAttrAirflowTemperature} {
		if a := find(id); a != nil {
			if t := int8(a.raw); t >= -60 && t <= 120 {
				h.Temperature = int16(t)
				h.Valid |= FieldTemperature
				break
			}
		}
	}
	if a := find(ataAttrPowerOnHours); a != nil {
		h.PowerOnHours = a.raw & 0xffffff
		h.Valid |= FieldPowerOnHours
	}
	if a := find(ataAttrPowerCycles); a != nil {
		h.PowerCycles = a.raw
		h.Valid |= FieldPowerCycles
	}
	if a := find(ataAttrUnexpectPowerLoss, ataAttrPowerOffRetract); a != nil {
		h.UnsafeShutdowns = a.raw
		h.Valid |= FieldUnsafeShutdowns
	}
	if a := find(ataAttrReportedUncorrect, ataAttrOfflineUncorrect); a != nil {
		h.MediaErrors = a.raw
		h.Valid |= FieldMediaErrors
	}
	if a := find(ataAttrMediaWearout, ataAttrWearLeveling, ataAttrSSDLifeLeft, ataAttrPercentLifeRemain); a != nil && validNormalized(a.value) {
		h.PercentageUsed = uint8(100 - min(a.value, 100))
		h.Valid |= FieldPercentageUsed
	}
	if a := find(ataAttrAvailReserved232, ataAttrAvailReserved170); a != nil && validNormalized(a.value) {
		h.AvailableSpare = uint8(min(a.value, 100))
		h.AvailableSpareThreshold = uint8(min(uint16(a.threshold), 100))
		h.Valid |= FieldAvailableSpare
	}
	if haveThresholds {
		h.Valid |= FieldCriticalWarning
		for _, a := range attrs[:n] {
			if !validNormalized(a.value) || a.threshold == 0 || a.threshold >= 0xfe || uint8(a.value) > a.threshold {
				continue
			}
			switch a.id {
			case ataAttrAvailReserved232, ataAttrAvailReserved170:
				h.CriticalWarning |= WarnSpare
			case ataAttrTemperature, ataAttrAirflowTemperature:
				h.CriticalWarning |= WarnTemperature
			default:
				if a.flags&ataPrefailFlag != 0 {
					h.CriticalWarning |= WarnReliability
				}
			}
		}
	}
	applyATADevStats(&h, in.devStats, in.sectorSize)
	return h, nil
}

// applyATADevStats overrides h with the valid statistics of Device
// Statistics log pages. Malformed pages are skipped.
func applyATADevStats(h *Health, pages [][]byte, sectorSize int) {
	if sectorSize <= 0 || sectorSize > 1<<16 {
		sectorSize = 512
	}
	var sectorsRead, sectorsWritten, readCmds, writeCmds uint64
	var have int
	for _, p := range pages {
		if len(p) < ataSectorLen || binary.LittleEndian.Uint16(p) == 0 {
			continue // short, or revision 0: not a statistics page
		}
		stat := func(off int) (uint64, bool) {
			v := binary.LittleEndian.Uint64(p[off:])
			if v&(ataStatSupported|ataStatValid) != ataStatSupported|ataStatValid {
				return 0, false
			}
			return v & (1<<48 - 1), true
		}
		switch p[2] {
		case ataStatsGeneral:
			if v, ok := stat(0x08); ok {
				h.PowerCycles = v
				h.Valid |= FieldPowerCycles
			}
			if v, ok := stat(0x10); ok {
				h.PowerOnHours = v
				h.Valid |= FieldPowerOnHours
			}
			for i, dst := range [...]*uint64{&sectorsWritten, &writeCmds, &sectorsRead, &readCmds} {
				if v, ok := stat(0x18 + 8*i); ok {
					*dst = v
					have |= 1 << i
				}
			}
		case ataStatsErrors:
			if v, ok := stat(0x08); ok {
				h.MediaErrors = v
				h.Valid |= FieldMediaErrors
			}
		case ataStatsTemperature:
			if v, ok := stat(0x08); ok {
				h.Temperature = int16(int8(v))
				h.Valid |= FieldTemperature
			}
		case ataStatsSSD:
			if v, ok := stat(0x08); ok {
				h.PercentageUsed = uint8(min(v&0xff, 255))
				h.Valid |= FieldPercentageUsed
			}
		}
	}
	if have&0b0101 == 0b0101 {
		// Sector counts are 48-bit; times a sector size of at most 64 KiB
		// they stay below 2^64.
		h.DataUnitsWritten = DataUnits(sectorsWritten * uint64(sectorSize))
		h.DataUnitsRead = DataUnits(sectorsRead * uint64(sectorSize))
		h.Valid |= FieldDataUnits
	}
	if have&0b1010 == 0b1010 {
		h.HostWriteCommands, h.HostReadCommands = writeCmds, readCmds
		h.Valid |= FieldHostCommands
	}
}

// validNormalized reports whether an attribute's normalized value is
// meaningful (1 to 253; 0 and 254-255 are reserved).
func validNormalized(v uint16) bool { return v >= 1 && v <= 253 }

// SCSI log pages (SPC-4/SBC-3) used for health.
const (
	scsiLogSupportedPages = 0x00
	scsiLogWriteErrors    = 0x02
	scsiLogReadErrors     = 0x03
	scsiLogVerifyErrors   = 0x05
	scsiLogTemperature    = 0x0d
	scsiLogStartStop      = 0x0e
	scsiLogSolidState     = 0x11
	scsiLogBackgroundScan = 0x15
	scsiLogInfoExceptions = 0x2f

	scsiLogHeaderLen   = 4
	scsiParamHeaderLen = 4
)

// scsiHealthPages lists the codes of the log pages parseSCSIHealth
// understands, in the order they are fetched.
const scsiHealthPages = "\x0d\x2f\x11\x15\x0e\x03\x02\x05"

// splitLogPage splits the first log page off b. It returns the page code,
// the subpage code, the parameter bytes and what follows the page.
func splitLogPage(b []byte) (code, sub byte, params, rest []byte, err error) {
	if len(b) < scsiLogHeaderLen {
		return 0, 0, nil, nil, fmt.Errorf("log page of %d bytes is shorter than its header", len(b))
	}
	n := int(binary.BigEndian.Uint16(b[2:4]))
	if len(b)-scsiLogHeaderLen < n {
		return 0, 0, nil, nil, fmt.Errorf("log page %#02x says %d bytes of parameters, has %d", b[0]&0x3f, n, len(b)-scsiLogHeaderLen)
	}
	return b[0] & 0x3f, b[1], b[scsiLogHeaderLen : scsiLogHeaderLen+n], b[scsiLogHeaderLen+n:], nil
}

// nextLogParam splits the first parameter off a page's parameter bytes.
func nextLogParam(params []byte) (code uint16, data, rest []byte, err error) {
	if len(params) < scsiParamHeaderLen {
		return 0, nil, nil, fmt.Errorf("log parameter of %d bytes is shorter than its header", len(params))
	}
	n := int(params[3])
	if len(params)-scsiParamHeaderLen < n {
		return 0, nil, nil, fmt.Errorf("log parameter %#04x says %d bytes, has %d", binary.BigEndian.Uint16(params), n, len(params)-scsiParamHeaderLen)
	}
	return binary.BigEndian.Uint16(params), params[scsiParamHeaderLen : scsiParamHeaderLen+n], params[scsiParamHeaderLen+n:], nil
}

// beCounter decodes a big-endian counter of any length, saturating at the
// largest uint64.
func beCounter(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		if v > math.MaxUint64>>8 {
			return math.MaxUint64
		}
		v = v<<8 | uint64(c)
	}
	return v
}

// parseSCSIHealth maps LOG SENSE pages (each a complete page with its header,
// as LOG SENSE returns it) to Health. Pages it does not know are skipped; a
// malformed page is an error. Without any known page the device is
// reported as unsupported.
func parseSCSIHealth(pages [][]byte) (Health, error) {
	h := Health{Source: SourceSCSI}
	var tempSet bool
	for _, p := range pages {
		code, sub, params, _, err := splitLogPage(p)
		if err != nil {
			return Health{}, err
		}
		if sub != 0 || strings.IndexByte(scsiHealthPages, code) < 0 {
			continue // a subpage or a page without health parameters
		}
		for len(params) > 0 {
			var (
				pc   uint16
				data []byte
			)
			pc, data, params, err = nextLogParam(params)
			if err != nil {
				return Health{}, fmt.Errorf("log page %#02x: %w", code, err)
			}
			switch {
			case code == scsiLogTemperature && pc == 0x0000 && len(data) >= 2:
				if data[1] != 0xff {
					h.Temperature = int16(data[1])
					h.Valid |= FieldTemperature
					tempSet = true
				}
			case code == scsiLogInfoExceptions && pc == 0x0000 && len(data) >= 2:
				h.Valid |= FieldCriticalWarning
				h.CriticalWarning |= infoExceptionWarning(data[0], data[1])
				if len(data) >= 3 && data[2] != 0xff && !tempSet {
					h.Temperature = int16(data[2])
					h.Valid |= FieldTemperature
				}
			case code == scsiLogSolidState && pc == 0x0001 && len(data) >= 4:
				h.PercentageUsed = data[3]
				h.Valid |= FieldPercentageUsed
			case code == scsiLogBackgroundScan && pc == 0x0000 && len(data) >= 4:
				h.PowerOnHours = uint64(binary.BigEndian.Uint32(data)) / 60
				h.Valid |= FieldPowerOnHours
			case code == scsiLogStartStop && pc == 0x0004 && len(data) >= 4:
				h.PowerCycles = uint64(binary.BigEndian.Uint32(data))
				h.Valid |= FieldPowerCycles
			case (code == scsiLogReadErrors || code == scsiLogWriteErrors || code == scsiLogVerifyErrors) && pc == 0x0006:
				h.MediaErrors = satAdd(h.MediaErrors, beCounter(data))
				h.Valid |= FieldMediaErrors
			case code == scsiLogReadErrors && pc == 0x0005:
				h.DataUnitsRead = DataUnits(beCounter(data))
				h.Valid |= FieldDataUnits
			case code == scsiLogWriteErrors && pc == 0x0005:
				h.DataUnitsWritten = DataUnits(beCounter(data))
				h.Valid |= FieldDataUnits
			}
		}
	}
	if h.Valid == 0 {
		return unsupportedHealth("the device returns none of the SCSI health log pages"), nil
	}
	h.Supported = true
	return h, nil
}

// infoExceptionWarning maps the additional sense code of an informational
// exception to critical warnings: a temperature warning (0Bh/01h) to
// WarnTemperature, any other exception (5Dh FAILURE PREDICTION THRESHOLD
// EXCEEDED and the other 0Bh warnings) to WarnReliability.
func infoExceptionWarning(asc, ascq byte) CriticalWarning {
	switch {
	case asc == 0:
		return 0
	case asc == 0x0b && ascq == 0x01: // WARNING - SPECIFIED TEMPERATURE EXCEEDED
		return WarnTemperature
	default:
		return WarnReliability
	}
}

func satAdd(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

// senseData is the part of SCSI sense data that tells why a command failed.
type senseData struct {
	Key, ASC, ASCQ byte // sense key, additional sense code and qualifier
}

// parseSense decodes fixed (70h/71h) and descriptor (72h/73h) format sense
// data. ok is false when b holds neither.
func parseSense(b []byte) (s senseData, ok bool) {
	if len(b) < 1 {
		return s, false
	}
	switch b[0] & 0x7f {
	case 0x70, 0x71:
		if len(b) < 3 {
			return s, false
		}
		s.Key = b[2] & 0x0f
		if len(b) >= 14 {
			s.ASC, s.ASCQ = b[12], b[13]
		}
		return s, true
	case 0x72, 0x73:
		if len(b) < 4 {
			return s, false
		}
		return senseData{Key: b[1] & 0x0f, ASC: b[2], ASCQ: b[3]}, true
	}
	return s, false
}
