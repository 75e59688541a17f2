package rbd

import (
	"encoding/json"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdisk/rdisk/backstore"
)

func TestParseURI(t *testing.T) {
	t.Parallel()
	good := []struct {
		in   string
		want Config
	}{
		{"rbd:rbd/disk1", Config{Pool: "rbd", Image: "disk1"}},
		{"rbd:pool/ns/img", Config{Pool: "pool", Namespace: "ns", Image: "img"}},
		{"rbd:p/im%20age", Config{Pool: "p", Image: "im age"}},
		{"rbd:p/i?conf=/etc/ceph/ceph.conf&id=gw1&keyring=/etc/ceph/k&mon_host=10.0.0.1,10.0.0.2:6789",
			Config{Pool: "p", Image: "i", ConfFile: "/etc/ceph/ceph.conf", ID: "gw1", Keyring: "/etc/ceph/k", MonHost: "10.0.0.1,10.0.0.2:6789"}},
		{"rbd:p/i?block_size=4096&read_only=true&op_timeout=10s&lock=exclusive&max_in_flight=64",
			Config{Pool: "p", Image: "i", BlockSize: 4096, ReadOnly: false, OpTimeout: 10 * time.Second, Lock: LockExclusive, MaxInFlight: 64}},
		{"rbd:p/i?read_only=1&lock=auto", Config{Pool: "p", Image: "i", ReadOnly: true, Lock: LockAuto}},
		{"rbd:p/i?mon_host=%5Bv2:1.2.3.4:3300,v1:1.2.3.4:6789%5D", Config{Pool: "p", Image: "i", MonHost: "[v2:1.2.3.4:3300,v1:1.2.3.4:6789]"}},
	}
	for _, g := range good {
		if g.want.Lock == LockExclusive {
			// read_only with exclusive is refused; test the fields apart.
			g.in = strings.Replace(g.in, "read_only=true&", "", 1)
		}
		got, err := ParseURI(g.in)
		if err != nil {
			t.Errorf("ParseURI(%q): %v", g.in, err)
			continue
		}
		if got != g.want {
			t.Errorf("ParseURI(%q) = %+v, want %+v", g.in, got, g.want)
		}
		back, err := ParseURI(got.String())
		if err != nil || back != got {
			t.Errorf("ParseURI(%q.String() = %q) = %+v, %v; want the same config", g.in, got.String(), back, err)
		}
	}
	bad := []struct{ in, mention string }{
		{"", "rbd:"},
		{"rbd://p/i", "without"},
		{"rbd:p", "parts"},
		{"rbd:a/b/c/d", "parts"},
		{"rbd:/i", "pool is empty"},
		{"rbd:p/", "image is empty"},
		{"rbd:p//i", "namespace is empty"},
		{"rbd:p/i%zz", "percent"},
		{"rbd:p/i@snap", "snapshots"},
		{"rbd:p/i#x", "fragment"},
		{"rbd:p/i?bogus=1", `unknown query parameter "bogus"`},
		{"rbd:p/i?id=a&id=b", "2 times"},
		{"rbd:p/i?id=client.admin", "without \"client.\""},
		{"rbd:p/i?block_size=1024", "block_size 1024"},
		{"rbd:p/i?block_size=x", "block_size"},
		{"rbd:p/i?read_only=maybe", "read_only"},
		{"rbd:p/i?op_timeout=5", "op_timeout"},
		{"rbd:p/i?op_timeout=1ms", "outside 1s..1h"},
		{"rbd:p/i?lock=none", `lock "none"`},
		{"rbd:p/i?lock=exclusive&read_only=true", "read-only"},
		{"rbd:p/i?max_in_flight=-1", "max_in_flight"},
		{"rbd:p/i?a=1;b=2", "&, not ;"},
		{"rbd:p/i%0a", "control character"},
		{"rbd:p/i?keyring=%00", "NUL"},
	}
	for _, b := range bad {
		_, err := ParseURI(b.in)
		if err == nil || !strings.Contains(err.Error(), b.mention) {
			t.Errorf("ParseURI(%q) = %v; want an error mentioning %q", b.in, err, b.mention)
		}
	}
}

func TestConfigJSON(t *testing.T) {
	t.Parallel()
	c := Config{Pool: "p", Namespace: "n", Image: "i", ID: "gw", OpTimeout: 45 * time.Second, Lock: LockShared, BlockSize: 4096}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"op_timeout":"45s"`) || !strings.Contains(string(b), `"block_size":4096`) {
		t.Errorf("JSON %s", b)
	}
	var back Config
	if err := json.Unmarshal(b, &back); err != nil || back != c {
		t.Errorf("round trip: %+v, %v", back, err)
	}
	for _, in := range []string{`{"pool":"p","image":"i","bogus":1}`, `{"pool":"p","image":"i","op_timeout":30}`, `{"pool":"p","image":"i","op_timeout":"soon"}`} {
		if err := json.Unmarshal([]byte(in), &back); err == nil {
			t.Errorf("Unmarshal(%s) accepted", in)
		}
	}
	// Inside a larger document, as a target config holds it.
	var doc struct {
		Devices []Config `json:"devices"`
	}
	if err := json.Unmarshal([]byte(`{"devices":[{"pool":"rbd","image":"a","lock":"exclusive"}]}`), &doc); err != nil || doc.Devices[0].Lock != LockExclusive {
		t.Errorf("nested: %+v, %v", doc, err)
	}
}

func TestValidateDefaults(t *testing.T) {
	t.Parallel()
	c := Config{Pool: "rbd", Image: "x"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	d := c.withDefaults()
	if d.ID != "admin" || d.BlockSize != 512 || d.OpTimeout != DefaultOpTimeout || d.Lock != LockShared || d.MaxInFlight != DefaultMaxInFlight {
		t.Errorf("defaults %+v", d)
	}
	if c.Name() != "rbd/x" || (Config{Pool: "a", Namespace: "b", Image: "c"}).Name() != "a/b/c" {
		t.Error("Name")
	}
	for _, bad := range []Config{{Image: "x"}, {Pool: "p"}, {Pool: "p/q", Image: "x"}, {Pool: "p", Namespace: "a/b", Image: "x"}, {Pool: "p", Image: "\xff"}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v) accepted", bad)
		}
	}
}

func TestErrorMapping(t *testing.T) {
	t.Parallel()
	cases := []struct {
		errno syscall.Errno
		want  error
	}{
		{syscall.ENOSPC, backstore.ErrNoSpace},
		{syscall.EDQUOT, backstore.ErrNoSpace},
		{syscall.ETIMEDOUT, backstore.ErrTimeout},
		{syscall.ESHUTDOWN, backstore.ErrFenced},
		{syscall.EROFS, backstore.ErrReadOnly},
		{syscall.EIO, nil},
	}
	for _, c := range cases {
		err := errorOf("write", "rbd/img", 4096, 512, -int64(c.errno))
		if c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%v: %v does not match %v", c.errno, err, c.want)
		}
		if !errors.Is(err, c.errno) {
			t.Errorf("%v: %v does not match the errno", c.errno, err)
		}
		for _, s := range []error{backstore.ErrNoSpace, backstore.ErrTimeout, backstore.ErrFenced, backstore.ErrReadOnly} {
			if s != c.want && errors.Is(err, s) {
				t.Errorf("%v: %v also matches %v", c.errno, err, s)
			}
		}
		if msg := err.Error(); !strings.Contains(msg, "rbd/img") || !strings.Contains(msg, "write of 512 bytes at offset 4096") {
			t.Errorf("message %q lacks the image or the step", msg)
		}
	}
	if errorOf("x", "y", 0, 0, 0) != nil {
		t.Error("errorOf(0) is not nil")
	}
}

// FuzzParseURI: no input panics; what parses is valid and round-trips
// through String.
func FuzzParseURI(f *testing.F) {
	for _, s := range []string{"rbd:rbd/img", "rbd:p/ns/i?conf=/c&id=u&keyring=k&mon_host=1.2.3.4", "rbd:p/i?op_timeout=10s&lock=auto",
		"rbd:p/i%2F?x", "rbd:%/%", "rbd:p/i?read_only=true&block_size=4096&max_in_flight=8", "rbd://", "rbd:a/b/c/d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseURI(s)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("ParseURI(%q) = %+v, which Validate refuses: %v", s, c, err)
		}
		back, err := ParseURI(c.String())
		if err != nil || back != c {
			t.Fatalf("ParseURI(%q) = %+v; its String %q parses to %+v, %v", s, c, c.String(), back, err)
		}
	})
}

// FuzzConfigJSON: no input panics; what decodes and validates encodes and
// decodes to the same config.
func FuzzConfigJSON(f *testing.F) {
	for _, s := range []string{`{"pool":"rbd","image":"a"}`, `{"pool":"p","namespace":"n","image":"i","op_timeout":"30s","lock":"exclusive","block_size":4096}`,
		`{"pool":1}`, `{}`, `{"pool":"p","image":"i"} {}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Config
		if err := json.Unmarshal(b, &c); err != nil || c.Validate() != nil {
			return
		}
		out, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		var back Config
		if err := json.Unmarshal(out, &back); err != nil || back != c {
			t.Fatalf("%s -> %+v -> %s -> %+v, %v", b, c, out, back, err)
		}
	})
}
