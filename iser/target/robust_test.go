package target

import (
	"testing"

	"github.com/rdisk/rdisk/iser"
)

// TestISERAcceptPrivateData: a connection request without iSER CM private
// data is accepted without Send with Invalidate (Linux isert leaves
// snd_w_inv off when there is none); one with the flags byte, however
// short or padded, is read by it.
func TestISERAcceptPrivateData(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		pd      []byte
		want    bool // Send with Invalidate used
		wantAcc uint8
	}{
		{"none", nil, false, iser.ISERTZBVANotUsed | iser.ISERTSendWithInvNotUsed},
		{"zbva only", []byte{iser.ISERZBVANotSupported, 0, 0, 0}, true, iser.ISERTZBVANotUsed},
		{"short", []byte{iser.ISERZBVANotSupported}, true, iser.ISERTZBVANotUsed},
		{"no send with invalidate", []byte{iser.ISERZBVANotSupported | iser.ISERSendWithInvNotSupported, 0, 0, 0}, false,
			iser.ISERTZBVANotUsed | iser.ISERTSendWithInvNotUsed},
		{"IB padded", append([]byte{iser.ISERZBVANotSupported, 0, 0, 0}, make([]byte, 52)...), true, iser.ISERTZBVANotUsed},
	} {
		acc, inv := iserAccept(tc.pd, true)
		if inv != tc.want || acc.Flags != tc.wantAcc {
			t.Errorf("%s: send with invalidate %v, accept flags %#x; want %v, %#x", tc.name, inv, acc.Flags, tc.want, tc.wantAcc)
		}
		if acc, inv := iserAccept(tc.pd, false); inv || acc.Flags&iser.ISERTSendWithInvNotUsed == 0 {
			t.Errorf("%s: NoSendWithInvalidate: send with invalidate %v, flags %#x", tc.name, inv, acc.Flags)
		}
	}
}
