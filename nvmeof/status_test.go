package nvmeof

import "testing"

func TestStatus(t *testing.T) {
	tests := []struct {
		s      Status
		str    string
		sct    StatusCodeType
		sc     uint8
		dnr    bool
		more   bool
		isErr  bool
		linuxN uint16 // the Linux NVME_SC_* value of the code
	}{
		{StatusSuccess, "Successful Completion (sct 0x0 sc 0x00)", SCTGeneric, 0, false, false, false, 0x0},
		{StatusInvalidOpcode | StatusDNR, "Invalid Command Opcode (sct 0x0 sc 0x01, DNR)", SCTGeneric, 1, true, false, true, 0x1},
		{StatusInvalidField | StatusDNR, "Invalid Field in Command (sct 0x0 sc 0x02, DNR)", SCTGeneric, 2, true, false, true, 0x2},
		{StatusDataTransferError, "Data Transfer Error (sct 0x0 sc 0x04)", SCTGeneric, 4, false, false, true, 0x4},
		{StatusSGLInvalidDataLength | StatusDNR, "Data SGL Length Invalid (sct 0x0 sc 0x0f, DNR)", SCTGeneric, 0xf, true, false, true, 0xf},
		{StatusSGLInvalidType | StatusDNR, "SGL Descriptor Type Invalid (sct 0x0 sc 0x11, DNR)", SCTGeneric, 0x11, true, false, true, 0x11},
		{StatusSGLInvalidOffset | StatusDNR, "SGL Offset Invalid (sct 0x0 sc 0x16, DNR)", SCTGeneric, 0x16, true, false, true, 0x16},
		{StatusLBAOutOfRange | StatusDNR, "LBA Out of Range (sct 0x0 sc 0x80, DNR)", SCTGeneric, 0x80, true, false, true, 0x80},
		{StatusCapacityExceeded | StatusDNR, "Capacity Exceeded (sct 0x0 sc 0x81, DNR)", SCTGeneric, 0x81, true, false, true, 0x81},
		{StatusNamespaceNotReady, "Namespace Not Ready (sct 0x0 sc 0x82)", SCTGeneric, 0x82, false, false, true, 0x82},
		{StatusInvalidLogPage | StatusDNR, "Invalid Log Page (sct 0x1 sc 0x09, DNR)", SCTCommandSpecific, 9, true, false, true, 0x109},
		{StatusConnectInvalidParameters | StatusDNR, "Connect Invalid Parameters / Attempted Write to Read Only Range (sct 0x1 sc 0x82, DNR)", SCTCommandSpecific, 0x82, true, false, true, 0x182},
		{StatusConnectInvalidHost | StatusDNR, "Connect Invalid Host (sct 0x1 sc 0x84, DNR)", SCTCommandSpecific, 0x84, true, false, true, 0x184},
		{StatusCompareFailure | StatusDNR | StatusMore, "Compare Failure (sct 0x2 sc 0x85, More, DNR)", SCTMediaError, 0x85, true, true, true, 0x285},
		{StatusANATransition | 1<<11, "Asymmetric Access Transition (sct 0x3 sc 0x03, CRD 1)", SCTPathError, 3, false, false, true, 0x303},
		{0x7ff, "Unknown Status (sct 0x7 sc 0xff)", SCTVendorSpecific, 0xff, false, false, true, 0x7ff},
	}
	for _, tt := range tests {
		if got := tt.s.String(); got != tt.str {
			t.Errorf("%#x.String() = %q, want %q", uint16(tt.s), got, tt.str)
		}
		if tt.s.SCT() != tt.sct || tt.s.SC() != tt.sc || tt.s.DNR() != tt.dnr || tt.s.More() != tt.more ||
			tt.s.IsError() != tt.isErr || uint16(tt.s.Code()) != tt.linuxN {
			t.Errorf("%#x: sct %v sc %#x dnr %v more %v err %v code %#x", uint16(tt.s), tt.s.SCT(), tt.s.SC(),
				tt.s.DNR(), tt.s.More(), tt.s.IsError(), uint16(tt.s.Code()))
		}
	}
	if StatusInvalidField.WithDNR() != 0x4002 {
		t.Errorf("WithDNR = %#x", uint16(StatusInvalidField.WithDNR()))
	}
	if SCTMediaError.String() != "Media and Data Integrity Errors" || StatusCodeType(5).String() != "SCT 0x5" {
		t.Errorf("StatusCodeType strings: %q %q", SCTMediaError, StatusCodeType(5))
	}
}
