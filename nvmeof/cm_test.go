package nvmeof

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The CM private data of ../shared/lab/results/c-siw-mpa-capture.log: the
// Linux host's admin queue request (after the 4 MPA v2 IRD/ORD bytes) and
// Linux nvmet's accept.
const (
	captureCMRequest = "00 00 00 00 20 00 1f 00"
	captureCMAccept  = "00 00 20 00"
)

func TestCMRequestCapture(t *testing.T) {
	pd := unhex(t, captureCMRequest, 32)
	f, err := ParseCMRequest(pd)
	if err != nil {
		t.Fatalf("ParseCMRequest(capture): %v", err)
	}
	want := CMRequestFields{RecFmt: 0, QID: 0, HRQSize: 32, HSQSize: 31}
	if d := cmp.Diff(want, f); d != "" {
		t.Errorf("parsed request (-want +got):\n%s", d)
	}
	if err := f.Check(128, 128); err != nil {
		t.Errorf("Check(capture) = %v", err)
	}

	b := make([]byte, CMRequestSize)
	for i := range b {
		b[i] = 0xff
	}
	CMRequest(b).Encode(&want)
	checkBytes(t, "CM request", b, pd)
}

func TestCMAcceptReject(t *testing.T) {
	acc := unhex(t, captureCMAccept, 32)
	f, err := ParseCMAccept(acc)
	if err != nil || f != (CMAcceptFields{CRQSize: 32}) {
		t.Errorf("ParseCMAccept(capture) = %+v, %v", f, err)
	}
	b := make([]byte, CMAcceptSize)
	CMAccept(b).Encode(&CMAcceptFields{CRQSize: 32})
	checkBytes(t, "CM accept", b, acc)

	rej := make([]byte, CMRejectSize)
	CMReject(rej).Encode(&CMRejectFields{Status: CMInvalidHSQSize})
	checkBytes(t, "CM reject", rej, []byte{0x00, 0x00, 0x04, 0x00})
	rf, err := ParseCMReject(rej)
	if err != nil || rf.Status != CMInvalidHSQSize || rf.Status.String() != "invalid host SQ size" {
		t.Errorf("ParseCMReject = %+v, %v", rf, err)
	}

	for _, tt := range []struct {
		name string
		pd   []byte
		want error
	}{
		{"accept short", make([]byte, 31), errShortCMData},
		{"accept recfmt", unhex(t, "01 00 20 00", 32), errCMRecFmt},
		{"reject empty", nil, errShortCMData},
		{"reject recfmt", []byte{1, 0, 1, 0}, errCMRecFmt},
		{"reject status 0", []byte{0, 0, 0, 0}, errCMStatus},
		{"reject status 9", []byte{0, 0, 9, 0}, errCMStatus},
	} {
		var err error
		if tt.name[:6] == "accept" {
			_, err = ParseCMAccept(tt.pd)
		} else {
			_, err = ParseCMReject(tt.pd)
		}
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: error %v, want %v", tt.name, err, tt.want)
		}
	}
	for s := CMStatus(0); s <= 9; s++ {
		if s.Valid() != (s >= 1 && s <= 8) {
			t.Errorf("CMStatus(%d).Valid() = %v", s, s.Valid())
		}
	}
}

func TestCMRequestErrors(t *testing.T) {
	tests := []struct {
		name     string
		pd       []byte
		maxQID   uint16
		maxQueue uint16
		want     CMStatus // 0: accepted
	}{
		{"empty", nil, 8, 128, CMInvalidLength},
		{"31 bytes", make([]byte, 31), 8, 128, CMInvalidLength},
		{"recfmt 1", unhex(t, "01 00 00 00 20 00 1f 00", 32), 8, 128, CMInvalidRecFmt},
		{"InfiniBand padded to 56", unhex(t, "00 00 00 00 20 00 1f 00", 56), 8, 128, 0},
		{"admin hsqsize 32", unhex(t, "00 00 00 00 21 00 20 00", 32), 8, 128, CMInvalidHSQSize},
		{"admin hrqsize 0", unhex(t, "00 00 00 00 00 00 1f 00", 32), 8, 128, CMInvalidHRQSize},
		{"admin hrqsize 33", unhex(t, "00 00 00 00 21 00 1f 00", 32), 8, 128, CMInvalidHRQSize},
		{"io queue 128", unhex(t, "00 00 01 00 80 00 7f 00", 32), 8, 128, 0},
		{"io queue 129", unhex(t, "00 00 01 00 81 00 80 00", 32), 8, 128, CMInvalidHSQSize},
		{"io hrqsize 129", unhex(t, "00 00 01 00 81 00 7f 00", 32), 8, 128, CMInvalidHRQSize},
		{"qid 9 of 8", unhex(t, "00 00 09 00 80 00 7f 00", 32), 8, 128, CMInvalidQID},
		{"hsqsize 0xffff", unhex(t, "00 00 01 00 80 00 ff ff", 32), 8, 0xffff, CMInvalidHSQSize},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := ParseCMRequest(tt.pd)
			if err == nil {
				err = f.Check(tt.maxQID, tt.maxQueue)
			}
			if tt.want == 0 {
				if err != nil {
					t.Fatalf("error %v, want acceptance", err)
				}
				return
			}
			var st CMStatus
			if !errors.As(err, &st) || st != tt.want {
				t.Fatalf("error %v, want reject status %d (%v)", err, tt.want, tt.want)
			}
		})
	}
}
