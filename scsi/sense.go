package scsi

import (
	"encoding/binary"
	"strconv"
)

// Status is a SCSI status code (SAM-5 table 39).
type Status uint8

// Status codes.
const (
	StatusGood                Status = 0x00
	StatusCheckCondition      Status = 0x02
	StatusConditionMet        Status = 0x04
	StatusBusy                Status = 0x08
	StatusReservationConflict Status = 0x18
	StatusTaskSetFull         Status = 0x28
	StatusACAActive           Status = 0x30
	StatusTaskAborted         Status = 0x40
)

// String returns the SAM name of the status.
func (s Status) String() string {
	switch s {
	case StatusGood:
		return "GOOD"
	case StatusCheckCondition:
		return "CHECK CONDITION"
	case StatusConditionMet:
		return "CONDITION MET"
	case StatusBusy:
		return "BUSY"
	case StatusReservationConflict:
		return "RESERVATION CONFLICT"
	case StatusTaskSetFull:
		return "TASK SET FULL"
	case StatusACAActive:
		return "ACA ACTIVE"
	case StatusTaskAborted:
		return "TASK ABORTED"
	}
	return "status(0x" + strconv.FormatUint(uint64(s), 16) + ")"
}

// SenseKey is the sense key of sense data (SPC-4 table 49).
type SenseKey uint8

// Sense keys.
const (
	KeyNoSense        SenseKey = 0x0
	KeyRecoveredError SenseKey = 0x1
	KeyNotReady       SenseKey = 0x2
	KeyMediumError    SenseKey = 0x3
	KeyHardwareError  SenseKey = 0x4
	KeyIllegalRequest SenseKey = 0x5
	KeyUnitAttention  SenseKey = 0x6
	KeyDataProtect    SenseKey = 0x7
	KeyBlankCheck     SenseKey = 0x8
	KeyCopyAborted    SenseKey = 0xa
	KeyAbortedCommand SenseKey = 0xb
	KeyMiscompare     SenseKey = 0xe
)

// String returns the SPC name of the sense key.
func (k SenseKey) String() string {
	switch k {
	case KeyNoSense:
		return "NO SENSE"
	case KeyRecoveredError:
		return "RECOVERED ERROR"
	case KeyNotReady:
		return "NOT READY"
	case KeyMediumError:
		return "MEDIUM ERROR"
	case KeyHardwareError:
		return "HARDWARE ERROR"
	case KeyIllegalRequest:
		return "ILLEGAL REQUEST"
	case KeyUnitAttention:
		return "UNIT ATTENTION"
	case KeyDataProtect:
		return "DATA PROTECT"
	case KeyBlankCheck:
		return "BLANK CHECK"
	case KeyCopyAborted:
		return "COPY ABORTED"
	case KeyAbortedCommand:
		return "ABORTED COMMAND"
	case KeyMiscompare:
		return "MISCOMPARE"
	}
	return "sense key(0x" + strconv.FormatUint(uint64(k), 16) + ")"
}

// ASC is an additional sense code and its qualifier, ASC in the high byte
// and ASCQ in the low byte (SPC-4 table D.1), as libiscsi and sg3_utils
// print them.
type ASC uint16

// Additional sense codes used by the target.
const (
	ASCNoAdditionalSense            ASC = 0x0000
	ASCOperationInProgress          ASC = 0x0016
	ASCLUNotReady                   ASC = 0x0400
	ASCLUNotReadyManualIntervention ASC = 0x0403
	ASCALUATransition               ASC = 0x040a // ASYMMETRIC ACCESS STATE TRANSITION
	ASCALUAStandby                  ASC = 0x040b // TARGET PORT IN STANDBY STATE
	ASCALUAUnavailable              ASC = 0x040c // TARGET PORT IN UNAVAILABLE STATE
	ASCALUAOffline                  ASC = 0x0412 // LOGICAL UNIT NOT READY, OFFLINE (LIO's ASCQ_04H_ALUA_OFFLINE)
	ASCLUCommunicationFailure       ASC = 0x0800
	ASCWriteError                   ASC = 0x0c00
	ASCCopyTargetNotReachable       ASC = 0x0d02 // COPY TARGET DEVICE NOT REACHABLE
	ASCInvalidFieldInCommandIU      ASC = 0x0e03
	ASCUnrecoveredReadError         ASC = 0x1100
	ASCParameterListLengthError     ASC = 0x1a00
	ASCMiscompareDuringVerify       ASC = 0x1d00
	ASCInvalidCommandOpcode         ASC = 0x2000
	ASCLBAOutOfRange                ASC = 0x2100
	ASCInvalidFieldInCDB            ASC = 0x2400
	ASCLUNotSupported               ASC = 0x2500
	ASCInvalidFieldInParameterList  ASC = 0x2600
	ASCInvalidReleaseOfPR           ASC = 0x2604
	ASCTooManyTargetDescriptors     ASC = 0x2606
	ASCUnsupportedTargetDescType    ASC = 0x2607 // UNSUPPORTED TARGET DESCRIPTOR TYPE CODE
	ASCTooManySegmentDescriptors    ASC = 0x2608
	ASCUnsupportedSegmentDescType   ASC = 0x2609 // UNSUPPORTED SEGMENT DESCRIPTOR TYPE CODE
	ASCWriteProtected               ASC = 0x2700
	ASCSoftwareWriteProtected       ASC = 0x2702
	ASCSpaceAllocationFailedWP      ASC = 0x2707 // SPACE ALLOCATION FAILED WRITE PROTECT
	ASCPowerOnReset                 ASC = 0x2900
	ASCBusDeviceResetOccurred       ASC = 0x2903
	ASCITNexusLossOccurred          ASC = 0x2907
	ASCModeParametersChanged        ASC = 0x2a01
	ASCReservationsPreempted        ASC = 0x2a03
	ASCReservationsReleased         ASC = 0x2a04
	ASCRegistrationsPreempted       ASC = 0x2a05
	ASCAsymmetricAccessChanged      ASC = 0x2a06 // ASYMMETRIC ACCESS STATE CHANGED
	ASCImplicitTransitionFailed     ASC = 0x2a07 // IMPLICIT ASYMMETRIC ACCESS STATE TRANSITION FAILED
	ASCCapacityDataChanged          ASC = 0x2a09
	ASCSavingParamsNotSupported     ASC = 0x3900
	ASCMediumNotPresent             ASC = 0x3a00
	ASCReportedLUNsDataChanged      ASC = 0x3f0e
	ASCInternalTargetFailure        ASC = 0x4400
	ASCInsufficientResources        ASC = 0x5503
	ASCInvalidMessageError          ASC = 0x4900
	ASCMediumRemovalPrevented       ASC = 0x5302
	ASCFailurePredictionThreshold   ASC = 0x5d00
	ASCFailurePredictionFalse       ASC = 0x5dff
)

// Code returns the ASC byte; Qualifier the ASCQ byte.
func (a ASC) Code() uint8      { return uint8(a >> 8) }
func (a ASC) Qualifier() uint8 { return uint8(a) }

// String returns the ASC/ASCQ in hex, "24h/00h".
func (a ASC) String() string {
	const hexd = "0123456789abcdef"
	b := []byte{hexd[a>>12&0xf], hexd[a>>8&0xf], 'h', '/', hexd[a>>4&0xf], hexd[a&0xf], 'h'}
	return string(b)
}

// Sense data formats and sizes.
const (
	// SenseFixedLen is the length of fixed-format sense data as this
	// target builds it (18 bytes, additional sense length 10).
	SenseFixedLen = 18
	// SenseDescriptorMaxLen is the longest descriptor-format sense data
	// this target builds: the 8-byte header, an information descriptor
	// (12 bytes) and a sense-key-specific descriptor (8 bytes).
	SenseDescriptorMaxLen = 28
	// SenseBufferLen is the sense buffer size transports should offer:
	// the largest sense data SPC-4 allows (252 bytes). The target never
	// writes more than SenseDescriptorMaxLen.
	SenseBufferLen = 252

	senseFixedCurrent = 0x70
	senseDescCurrent  = 0x72
)

// senseInfo is sense data before encoding: a value type, so that building
// an error allocates nothing.
type senseInfo struct {
	key SenseKey
	asc ASC
	// info is the INFORMATION field; infoValid says whether it is valid.
	info      uint64
	infoValid bool
	// sks holds the three sense-key-specific bytes (SKSV included) when
	// sksValid is set.
	sks      [3]byte
	sksValid bool
	// busy completes the command with BUSY status and no sense data
	// instead (a backstore that did not answer in time).
	busy bool
}

// fieldPointer sets a sense-key-specific field pointer (SPC-4 4.5.2.4.2):
// cd is true for a CDB field, false for a parameter list field; bit is
// the bit position (0-7) or -1 for a whole byte.
func (s senseInfo) fieldPointer(cd bool, byteOff int, bit int) senseInfo {
	b0 := uint8(0x80)
	if cd {
		b0 |= 0x40
	}
	if bit >= 0 && bit < 8 {
		b0 |= 0x08 | uint8(bit)
	}
	s.sks = [3]byte{b0, uint8(byteOff >> 8), uint8(byteOff)}
	s.sksValid = true
	return s
}

// encodeSense writes sense data into b in fixed (desc false) or descriptor
// format and returns the number of bytes written (at most len(b)).
func encodeSense(b []byte, s senseInfo, desc bool) int {
	var buf [SenseDescriptorMaxLen]byte
	var n int
	if desc {
		buf[0] = senseDescCurrent
		buf[1] = uint8(s.key) & 0x0f
		buf[2] = s.asc.Code()
		buf[3] = s.asc.Qualifier()
		n = 8
		if s.infoValid {
			d := buf[n : n+12]
			d[0] = 0x00 // information descriptor
			d[1] = 0x0a
			d[2] = 0x80 // VALID
			binary.BigEndian.PutUint64(d[4:12], s.info)
			n += 12
		}
		if s.sksValid {
			d := buf[n : n+8]
			d[0] = 0x02 // sense key specific descriptor
			d[1] = 0x06
			copy(d[4:7], s.sks[:])
			n += 8
		}
		buf[7] = uint8(n - 8)
	} else {
		buf[0] = senseFixedCurrent
		if s.infoValid {
			buf[0] |= 0x80
			// The fixed format has a 4-byte INFORMATION field; larger
			// values cannot be reported there.
			if s.info > 0xffffffff {
				buf[0] &^= 0x80
			}
			binary.BigEndian.PutUint32(buf[3:7], uint32(s.info))
		}
		buf[2] = uint8(s.key) & 0x0f
		buf[7] = SenseFixedLen - 8
		buf[12] = s.asc.Code()
		buf[13] = s.asc.Qualifier()
		if s.sksValid {
			copy(buf[15:18], s.sks[:])
		}
		n = SenseFixedLen
	}
	return copy(b, buf[:n])
}

// Sense is a decoded view of sense data in either format, for initiators
// and tests.
type Sense struct {
	Key        SenseKey
	ASC        ASC
	Descriptor bool // descriptor format (72h) rather than fixed (70h)
	// Information is the INFORMATION field, valid when InfoValid.
	Information uint64
	InfoValid   bool
	// SenseKeySpecific holds the three sense-key-specific bytes
	// (SKSV in bit 7 of the first), valid when SKSValid.
	SenseKeySpecific [3]byte
	SKSValid         bool
}

// FieldPointer returns the field pointer of an ILLEGAL REQUEST sense key
// specific field: whether it points into the CDB (or the parameter list),
// the byte and the bit (-1 when no bit is given). ok is false when there
// is no field pointer.
func (s Sense) FieldPointer() (cdb bool, byteOff int, bit int, ok bool) {
	if !s.SKSValid || s.SenseKeySpecific[0]&0x80 == 0 {
		return false, 0, -1, false
	}
	bit = -1
	if s.SenseKeySpecific[0]&0x08 != 0 {
		bit = int(s.SenseKeySpecific[0] & 7)
	}
	return s.SenseKeySpecific[0]&0x40 != 0, int(binary.BigEndian.Uint16(s.SenseKeySpecific[1:3])), bit, true
}

// ParseSense decodes fixed (70h/71h) or descriptor (72h/73h) sense data.
// It returns errShortSense or errSenseFormat when b is not sense data.
func ParseSense(b []byte) (Sense, error) {
	var s Sense
	if len(b) < 1 {
		return s, errShortSense
	}
	switch b[0] & 0x7f {
	case 0x70, 0x71:
		if len(b) < 14 {
			return s, errShortSense
		}
		s.Key = SenseKey(b[2] & 0x0f)
		s.ASC = ASC(b[12])<<8 | ASC(b[13])
		s.InfoValid = b[0]&0x80 != 0
		s.Information = uint64(binary.BigEndian.Uint32(b[3:7]))
		if len(b) >= 18 && b[15]&0x80 != 0 {
			copy(s.SenseKeySpecific[:], b[15:18])
			s.SKSValid = true
		}
	case 0x72, 0x73:
		if len(b) < 8 {
			return s, errShortSense
		}
		s.Descriptor = true
		s.Key = SenseKey(b[1] & 0x0f)
		s.ASC = ASC(b[2])<<8 | ASC(b[3])
		end := min(8+int(b[7]), len(b))
		for p := 8; p+2 <= end; {
			typ, l := b[p], int(b[p+1])
			if p+2+l > end {
				break
			}
			d := b[p : p+2+l]
			switch {
			case typ == 0x00 && l >= 0x0a:
				s.InfoValid = d[2]&0x80 != 0
				s.Information = binary.BigEndian.Uint64(d[4:12])
			case typ == 0x02 && l >= 0x06:
				copy(s.SenseKeySpecific[:], d[4:7])
				s.SKSValid = d[4]&0x80 != 0
			}
			p += 2 + l
		}
	default:
		return s, errSenseFormat
	}
	return s, nil
}

// EncodeFixedSense writes fixed-format sense data (SPC-4 4.5.3) for an
// error a transport finds itself, before the command reaches the core, and
// returns its length (SenseFixedLen, or less when b is shorter). field >= 0
// adds a sense-key-specific field pointer (C/D set) to that byte of the
// command (the CDB, or the transport's command IU).
func EncodeFixedSense(b []byte, key SenseKey, asc ASC, field int) int {
	s := senseInfo{key: key, asc: asc}
	if field >= 0 {
		s = s.fieldPointer(true, field, -1)
	}
	return encodeSense(b, s, false)
}
