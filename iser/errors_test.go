package iser

import (
	"strings"
	"testing"
)

// TestLoginStatusHints: the refusals an operator meets most say in words
// what to check.
func TestLoginStatusHints(t *testing.T) {
	for st, want := range map[LoginStatus]string{
		LoginAuthFailed: "CHAP",
		LoginForbidden:  "--allow-initiator",
		LoginNotFound:   "rdisk discover iscsi://",
	} {
		if got := st.Error(); !strings.Contains(got, want) {
			t.Errorf("%v: %q lacks %q", st, got, want)
		}
	}
}
