package host

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	good := []struct {
		in   string
		want URL
		str  string
	}{
		{"nvme://10.0.0.1", URL{Transport: TransportRDMA, Host: "10.0.0.1", Port: 4420}, "nvme://10.0.0.1:4420"},
		{"nvme://10.0.0.1:4421/", URL{Transport: TransportRDMA, Host: "10.0.0.1", Port: 4421}, "nvme://10.0.0.1:4421"},
		{"nvme://host.example/nqn.2026-11.io.rdisk:default", URL{Transport: TransportRDMA, Host: "host.example", Port: 4420, SubNQN: "nqn.2026-11.io.rdisk:default"}, ""},
		{"nvme://169.254.99.1:4420/nqn.2014-08.org.nvmexpress:uuid:0c7a4b2e-5d1f-4e3a-9b6c-7d8e9f0a1b2c/1",
			URL{Transport: TransportRDMA, Host: "169.254.99.1", Port: 4420, SubNQN: "nqn.2014-08.org.nvmexpress:uuid:0c7a4b2e-5d1f-4e3a-9b6c-7d8e9f0a1b2c", NSID: 1}, ""},
		{"nvme://[::1]:4420/nqn.a:b/4294967294", URL{Transport: TransportRDMA, Host: "::1", Port: 4420, SubNQN: "nqn.a:b", NSID: 0xfffffffe}, ""},
		{"nvme://[fe80::1%25eth0]/nqn.a:b", URL{Transport: TransportRDMA, Host: "fe80::1%eth0", Port: 4420, SubNQN: "nqn.a:b"}, "nvme://[fe80::1%25eth0]:4420/nqn.a:b"},
		{"nvme://[fe80::1%eth0]:1/nqn.a:b/", URL{Transport: TransportRDMA, Host: "fe80::1%eth0", Port: 1, SubNQN: "nqn.a:b"}, ""},
		{"nvme://h/nqn.a%3Ab/2", URL{Transport: TransportRDMA, Host: "h", Port: 4420, SubNQN: "nqn.a:b", NSID: 2}, ""},
		{"nvme+rdma://10.0.0.1/nqn.a:b/1", URL{Transport: TransportRDMA, Host: "10.0.0.1", Port: 4420, SubNQN: "nqn.a:b", NSID: 1}, "nvme://10.0.0.1:4420/nqn.a:b/1"},
		{"nvme+tcp://10.0.0.1", URL{Transport: TransportTCP, Host: "10.0.0.1", Port: 4420}, "nvme+tcp://10.0.0.1:4420"},
		{"NVMe+TCP://[::1]:4421/nqn.a:b/3", URL{Transport: TransportTCP, Host: "::1", Port: 4421, SubNQN: "nqn.a:b", NSID: 3}, "nvme+tcp://[::1]:4421/nqn.a:b/3"},
	}
	for _, c := range good {
		got, err := ParseURL(c.in)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", c.in, err)
			continue
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("ParseURL(%q) -want +got:\n%s", c.in, diff)
		}
		if c.str != "" && got.String() != c.str {
			t.Errorf("ParseURL(%q).String() = %q, want %q", c.in, got.String(), c.str)
		}
		// String round-trips.
		again, err := ParseURL(got.String())
		if err != nil || again != got {
			t.Errorf("ParseURL(%q) = %+v, %v; want %+v", got.String(), again, err, got)
		}
	}
	bad := []struct{ in, want string }{
		{"", "want nvme://"},
		{"10.0.0.1:4420/nqn.a:b", "want nvme://"},
		{"iser://10.0.0.1/iqn.a/1", `scheme "iser" is not nvme`},
		{"nvme+iwarp://10.0.0.1/nqn.a:b", `scheme "nvme+iwarp" is not nvme`},
		{"nvme+tcp://", "no host"},
		{"nvme://", "no host"},
		{"nvme:///nqn.a:b", "no host"},
		{"nvme://h:0/nqn.a:b", "port"},
		{"nvme://h:65536/nqn.a:b", "port"},
		{"nvme://h:x/nqn.a:b", "port"},
		{"nvme://::1/nqn.a:b", "brackets"},
		{"nvme://[::1/nqn.a:b", "unterminated"},
		{"nvme://[::1]x/nqn.a:b", "unexpected"},
		{"nvme://[nothex]/nqn.a:b", "not an IPv6"},
		{"nvme://h o/nqn.a:b", "bad host"},
		{"nvme://h/nqn.a:b/0", "namespace ID"},
		{"nvme://h/nqn.a:b/4294967295", "namespace ID"},
		{"nvme://h/nqn.a:b/x", "namespace ID"},
		{"nvme://h/nqn.a:b/1/2", "namespace ID"},
		{"nvme://h/nqn a", "not allowed"},
		{"nvme://h/" + strings.Repeat("n", 224), "longer than 223"},
		{"nvme://h/nqn%zz", "subsystem NQN"},
	}
	for _, c := range bad {
		if _, err := ParseURL(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseURL(%q) = %v, want an error containing %q", c.in, err, c.want)
		} else if strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseURL(%q): error spans lines: %q", c.in, err)
		}
	}
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"nvme://10.0.0.1:4420/nqn.2026-11.io.rdisk:default/1",
		"nvme://[fe80::1%25eth0]:4420/nqn.a:b",
		"nvme://h/nqn.a%3Ab/2",
		"nvme://h:65535/",
		"nvme+tcp://10.0.0.1/nqn.a:b/1",
		"nvme+rdma://h/nqn.a:b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseURL(s)
		if err != nil {
			return
		}
		if u.Host == "" || u.Port < 1 || u.Port > 65535 {
			t.Fatalf("ParseURL(%q) = %+v: bad host or port", s, u)
		}
		if u.SubNQN != "" {
			if err := CheckNQN(u.SubNQN); err != nil {
				t.Fatalf("ParseURL(%q) accepted NQN %q: %v", s, u.SubNQN, err)
			}
		} else if u.NSID != 0 {
			t.Fatalf("ParseURL(%q): NSID without NQN", s)
		}
		again, err := ParseURL(u.String())
		if err != nil {
			t.Fatalf("ParseURL(%q).String() = %q does not parse: %v", s, u.String(), err)
		}
		if again != u {
			t.Fatalf("round trip of %q: %+v, then %+v", s, u, again)
		}
	})
}
