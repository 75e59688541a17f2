package initiator

import (
	"testing"

	"github.com/rdisk/rdisk/iser"
)

func TestParseURL(t *testing.T) {
	for _, c := range []struct {
		in   string
		want URL
		str  string
	}{
		{"iscsi://10.0.0.1", URL{Transport: iser.TransportTCP, Host: "10.0.0.1", Port: 3260}, "iscsi://10.0.0.1:3260"},
		{"iser://h:3261/iqn.2026-11.io.rdisk:x/5", URL{Transport: iser.TransportISER, Host: "h", Port: 3261, Target: "iqn.2026-11.io.rdisk:x", LUN: 5, HasLUN: true},
			"iser://h:3261/iqn.2026-11.io.rdisk:x/5"},
		{"iscsi://[fe80::1]:3260/iqn.a:b", URL{Transport: iser.TransportTCP, Host: "fe80::1", Port: 3260, Target: "iqn.a:b"}, "iscsi://[fe80::1]:3260/iqn.a:b/0"},
		{"iscsi://[::1]/iqn.a:b/0/", URL{Transport: iser.TransportTCP, Host: "::1", Port: 3260, Target: "iqn.a:b", HasLUN: true}, "iscsi://[::1]:3260/iqn.a:b/0"},
	} {
		got, err := ParseURL(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseURL(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
			continue
		}
		if s := got.String(); s != c.str {
			t.Errorf("String() = %q, want %q", s, c.str)
		}
	}
	for _, bad := range []string{"", "nvme://h/x", "iscsi://", "iscsi://h:0/x", "iscsi://h:99999", "iscsi://user%pw@h/x/0",
		"iscsi://h/x/16384", "iscsi://h/x/-1", "iscsi://fe80::1/x", "iscsi://h//0"} {
		if u, err := ParseURL(bad); err == nil {
			t.Errorf("ParseURL(%q) = %+v, want an error", bad, u)
		}
	}
}

// FuzzParseURL: no panics, and what parses prints back to the same URL.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"iscsi://10.0.0.1", "iser://h:3261/iqn.2026-11.io.rdisk:x/5", "iscsi://[fe80::1%25eth0]:3260/iqn.a:b/1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseURL(s)
		if err != nil {
			return
		}
		v, err := ParseURL(u.String())
		if err != nil {
			t.Fatalf("%q parsed to %+v, whose String %q does not parse: %v", s, u, u.String(), err)
		}
		if u.Target != "" && !u.HasLUN {
			u.HasLUN = true
		}
		if v != u {
			t.Fatalf("%q: %+v round-trips to %+v", s, u, v)
		}
	})
}
