package target

import (
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An nvmetcli save, as Linux writes /etc/nvmet/config.json (with a file and
// a RAM namespace).
const nvmetcliJSON = `{
  "hosts": [{"nqn": "nqn.2014-08.org.nvmexpress:uuid:aaaa"}],
  "ports": [
    {
      "addr": {"adrfam": "ipv4", "traddr": "127.0.0.1", "treq": "not specified", "trsvcid": "0", "trtype": "rdma"},
      "param": {"inline_data_size": "8192"},
      "portid": 1,
      "referrals": [],
      "subsystems": ["nqn.2026-11.io.rdisk:cfg"]
    }
  ],
  "subsystems": [
    {
      "allowed_hosts": ["nqn.2014-08.org.nvmexpress:uuid:aaaa"],
      "attr": {"allow_any_host": "0", "cntlid_max": "65519", "cntlid_min": "1", "model": "Linux", "serial": "0123456789abcdef", "version": "1.3"},
      "namespaces": [
        {"device": {"nguid": "00000000-0000-0000-0000-000000000001", "path": "FILE", "uuid": "8f1a2f6c-1b2a-4d3e-9f00-112233445566"}, "enable": 1, "nsid": 1},
        {"device": {"path": "ram:64MiB"}, "enable": 1, "nsid": 2}
      ],
      "nqn": "nqn.2026-11.io.rdisk:cfg"
    }
  ]
}`

func TestStartNvmetcliConfig(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(file, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Parse(strings.NewReader(strings.Replace(nvmetcliJSON, "FILE", file, 1)))
	if err != nil {
		t.Fatal(err)
	}
	p := newIWARP(t)
	run, err := Start(c, p, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	sub := run.T.Subsystem("nqn.2026-11.io.rdisk:cfg")
	if sub == nil || len(run.Ports) != 1 {
		t.Fatalf("subsystem %v ports %d", sub, len(run.Ports))
	}
}

// TestStartTransports: nvmetcli's trtype "rdma" and "tcp", and rdisk's
// "rdma+tcp" (both on one port number), each start a port of that kind.
func TestStartTransports(t *testing.T) {
	t.Parallel()
	p := newIWARP(t)
	defer p.Close()
	for _, tr := range []string{"rdma", "tcp", "rdma+tcp"} {
		c, err := Parse(strings.NewReader(`{"ports":[{"portid":1,"addr":{"adrfam":"ipv4","trtype":"` + tr + `","traddr":"127.0.0.1","trsvcid":"0"},"subsystems":[]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		run, err := Start(c, p, slog.New(slog.DiscardHandler), nil)
		if err != nil {
			t.Fatalf("trtype %s: %v", tr, err)
		}
		if got := string(run.Ports[0].Transport()); got != tr {
			t.Errorf("trtype %s: port serves %s", tr, got)
		}
		run.Close()
	}
}

func TestStartErrors(t *testing.T) {
	t.Parallel()
	p := newIWARP(t)
	for _, tc := range []struct{ json, want string }{
		{`{"subsystems":[{"nqn":"nqn.x","attr":{},"namespaces":[{"nsid":1,"enable":1,"device":{"path":"/nonexistent/disk"}}]}]}`, "/nonexistent/disk"},
		{`{"ports":[{"portid":1,"addr":{"trtype":"fc","traddr":"127.0.0.1","trsvcid":"0"},"subsystems":[]}]}`, "trtype \"fc\""},
		{`{"ports":[{"portid":1,"addr":{"trtype":"rdma","traddr":"127.0.0.1","trsvcid":"0"},"subsystems":["nqn.missing"]}]}`, "not defined"},
		{`{"subsystems":[{"nqn":"nqn.x","attr":{},"namespaces":[{"nsid":1,"enable":1,"device":{"path":"ram:12Q"}}]}]}`, "ram:12Q"},
	} {
		// Refused by Parse (checked before anything opens) or by Start
		// (what needs the disk itself).
		c, err := Parse(strings.NewReader(tc.json))
		if err == nil {
			var run *Running
			if run, err = Start(c, p, slog.New(slog.DiscardHandler), nil); err == nil {
				run.Close()
				t.Errorf("Start(%s) succeeded", tc.json)
				continue
			}
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse/Start(%s) = %v, want it to mention %q", tc.json, err, tc.want)
		}
	}
	if _, err := Parse(strings.NewReader("{")); err == nil {
		t.Error("truncated JSON parsed")
	}
}

// FuzzParseStart feeds arbitrary JSON to Parse and, when it parses, to Start
// with RAM devices only: bad configurations must fail with an error, never
// a panic.
func FuzzParseStart(f *testing.F) {
	f.Add(strings.Replace(nvmetcliJSON, "FILE", "ram:1MiB", 1))
	f.Add(`{"subsystems":[{"nqn":"nqn.a","attr":{"allow_any_host":"1"},"namespaces":[{"nsid":4294967295,"enable":1,"device":{"path":"ram:4k"}}]}]}`)
	f.Add(`{"ports":[{"portid":1,"addr":{"trtype":"rdma","traddr":"127.0.0.1","trsvcid":"0"},"param":{"inline_data_size":"99999"},"subsystems":[]}]}`)
	f.Add(scsiConfig)
	f.Add(healthConfigWith(healthGateway))
	f.Add(healthConfigWith(`, "rdisk_gateway": {"follow_health": true, "health_interval": "90s", "health_failures": 1000}`))
	p := newIWARP(f)
	f.Fuzz(func(t *testing.T, s string) {
		c := fuzzConfig(s)
		if c == nil {
			return
		}
		if run, err := Start(c, p, slog.New(slog.DiscardHandler), nil); err == nil {
			run.Close()
		}
	})
}

// TestStartHostAuth: hosts' DH-HMAC-CHAP keys (flat configfs names or
// nvmetcli's dhchap group) are parsed before anything starts; a bad key
// is refused naming the host and the field.
func TestStartHostAuth(t *testing.T) {
	t.Parallel()
	p := newIWARP(t)
	defer p.Close()
	const key = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"
	for _, tc := range []struct{ hosts, want string }{
		{`[{"nqn":"nqn.h1","dhchap_key":"` + key + `","dhchap_hash":"hmac(sha256)","dhchap_dhgroup":"ffdhe2048"}]`, ""},
		{`[{"nqn":"nqn.h1","dhchap":{"key":"` + key + `","dhgroup":"null"}}]`, ""},
		{`[{"nqn":"nqn.h1","dhchap_key":"DHHC-1:00:AAAA:"}]`, "host nqn.h1: dhchap_key"},
		{`[{"nqn":"nqn.h1","dhchap_key":"` + key + `","dhchap_dhgroup":"ffdhe1024"}]`, "host nqn.h1: dhchap_dhgroup"},
		{`[{"nqn":"nqn.h1","dhchap_ctrl_key":"` + key + `"}]`, "dhchap_ctrl_key without dhchap_key"},
	} {
		c, err := Parse(strings.NewReader(`{"hosts":` + tc.hosts + `}`))
		if err == nil {
			var run *Running
			if run, err = Start(c, p, slog.New(slog.DiscardHandler), nil); err == nil {
				run.Close()
			}
		}
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.hosts, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error with %q", tc.hosts, err, tc.want)
		}
	}
}

// TestStartOptionalPort: an optional port whose address is taken is
// skipped; a required one fails Start naming it.
func TestStartOptionalPort(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, busy, _ := net.SplitHostPort(ln.Addr().String())
	p := newIWARP(t)
	defer p.Close()
	for _, optional := range []bool{true, false} {
		c := &Config{Ports: []Port{
			{PortID: 1, Addr: PortAddr{TrType: "tcp", TrAddr: "127.0.0.1", TrSvcID: "0"}},
			{PortID: 2, Addr: PortAddr{TrType: "tcp", TrAddr: "127.0.0.1", TrSvcID: busy}, Optional: optional},
		}}
		run, err := Start(c, p, nil, nil)
		switch {
		case optional && (err != nil || len(run.Ports) != 1):
			t.Fatalf("optional busy port: %v", err)
		case !optional && (err == nil || !strings.Contains(err.Error(), "port 2")):
			t.Fatalf("required busy port: %v", err)
		}
		if run != nil {
			run.Close()
		}
	}
}

// A configuration as nvmetcli's save writes it today: attribute groups,
// ANA groups and group IDs, referral enable flags, resv.
const nvmetcliFull = `{
  "hosts": [
    {
      "nqn": "nqn.2014-08.org.nvmexpress:uuid:bbbb"
    }
  ],
  "ports": [
    {
      "addr": {
        "adrfam": "ipv4",
        "traddr": "192.0.2.10",
        "treq": "not specified",
        "trsvcid": "4420",
        "trtype": "tcp"
      },
      "ana_groups": [
        {
          "ana": {
            "state": "optimized"
          },
          "grpid": 1
        }
      ],
      "param": {
        "inline_data_size": "16384",
        "pi_enable": "0"
      },
      "portid": 1,
      "referrals": [
        {
          "addr": {"adrfam": "ipv4", "traddr": "192.0.2.11", "treq": "not specified", "trsvcid": "4420", "trtype": "tcp"},
          "enable": 1,
          "name": "r1",
          "portid": 2
        }
      ],
      "subsystems": [
        "nqn.2026-11.io.rdisk:full"
      ]
    }
  ],
  "subsystems": [
    {
      "allowed_hosts": [
        "nqn.2014-08.org.nvmexpress:uuid:bbbb"
      ],
      "attr": {
        "allow_any_host": "0",
        "cntlid_max": "65519",
        "cntlid_min": "1",
        "model": "Linux",
        "pi_enable": "0",
        "serial": "0123456789abcdef",
        "version": "1.3"
      },
      "namespaces": [
        {
          "ana": {
            "grpid": "1"
          },
          "ana_grpid": 1,
          "device": {
            "nguid": "00000000-0000-0000-0000-000000000000",
            "path": "ram:16MiB",
            "uuid": "8f1a2f6c-1b2a-4d3e-9f00-112233445566"
          },
          "enable": 1,
          "nsid": 1,
          "resv": {
            "enable": "0"
          }
        }
      ],
      "nqn": "nqn.2026-11.io.rdisk:full"
    }
  ]
}
`

// TestParseStrict: nvmetcli's own save parses; each kind of mistake is
// refused with its line and field, by Parse, before anything is opened
// or listens.
func TestParseStrict(t *testing.T) {
	t.Parallel()
	if _, err := Parse(strings.NewReader(nvmetcliFull)); err != nil {
		t.Fatalf("nvmetcli's save refused: %v", err)
	}
	const sub = `"subsystems":[{"nqn":"nqn.a","attr":{"allow_any_host":"1"},"allowed_hosts":[],"namespaces":[{"nsid":1,"enable":1,"device":{"path":"ram:1MiB"}}]}]`
	for _, tc := range []struct{ name, json, want string }{
		{"misspelt key", strings.Replace(nvmetcliFull, `"namespaces"`, `"namespace"`, 1),
			`line 56: subsystems[0].namespace: unknown key "namespace"`},
		{"wrong type", strings.Replace(nvmetcliFull, `"nsid": 1`, `"nsid": "1"`, 1),
			`line 68: subsystems[0].namespaces[0].nsid: want a whole number, got the string "1"`},
		{"number too large", strings.Replace(nvmetcliFull, `"portid": 1,`, `"portid": 70000,`, 1),
			"line 28: ports[0].portid: 70000 is not a whole number that fits"},
		{"duplicate nsid", `{` + strings.Replace(sub, `}}]}]`, `}},{"nsid":1,"enable":1,"device":{"path":"ram:1MiB"}}]}]`, 1) + `}`,
			"subsystems[0].namespaces[1].nsid: nsid 1 is used twice in subsystem nqn.a"},
		{"duplicate subsystem", `{"subsystems":[{"nqn":"nqn.a"},{"nqn":"nqn.a"}]}`, "subsystems[1].nqn: subsystem nqn.a is defined twice"},
		{"duplicate port", `{"ports":[{"portid":1,"addr":{"traddr":"127.0.0.1"},"subsystems":[]},{"portid":1,"addr":{"traddr":"127.0.0.1"},"subsystems":[]}]}`,
			"ports[1].portid: port 1 is defined twice"},
		{"duplicate host", `{"hosts":[{"nqn":"nqn.h"},{"nqn":"nqn.h"}]}`, "hosts[1].nqn: host nqn.h is listed twice"},
		{"dangling reference", `{"ports":[{"portid":1,"addr":{"traddr":"127.0.0.1"},"subsystems":["nqn.none"]}]}`,
			"ports[0].subsystems[0]: port 1: subsystem nqn.none is not defined"},
		{"no host may connect", strings.Replace(nvmetcliFull, `"allowed_hosts": [
        "nqn.2014-08.org.nvmexpress:uuid:bbbb"
      ]`, `"allowed_hosts": []`, 1),
			`line 38: ports[0].subsystems[0]: subsystem nqn.2026-11.io.rdisk:full on port 1 (192.0.2.10, not loopback) lets no host in`},
		{"nsid 0", `{` + strings.Replace(sub, `"nsid":1`, `"nsid":0`, 1) + `}`, "subsystems[0].namespaces[0].nsid: nsid 0: want 1 to 1024"},
		{"no device path", `{` + strings.Replace(sub, `"path":"ram:1MiB"`, `"nguid":""`, 1) + `}`, "subsystems[0].namespaces[0].device: namespace 1 names no device path"},
		{"passthru", `{"subsystems":[{"nqn":"nqn.p","passthru":[{"device":{"path":"/dev/nvme0"}}]}]}`, "passthru subsystems are not supported"},
		{"bad trtype", `{"ports":[{"portid":1,"addr":{"trtype":"fc"}}]}`, `ports[0].addr.trtype: trtype "fc"`},
		{"bad inline size", `{"ports":[{"portid":1,"addr":{"trtype":"tcp","traddr":"127.0.0.1"},"param":{"inline_data_size":"big"}}]}`, `ports[0].param.inline_data_size: "big" is not a number`},
		{"trailing data", `{}{}`, "data after the configuration object"},
		{"broken JSON", "{\n\"hosts\": [\n}", "line 3"},
		{"not an object", `[]`, "want an object, got a list"},
	} {
		_, err := Parse(strings.NewReader(tc.json))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// TestReadOnlyNamespaceConfig: rdisk_read_only opens the device
// write-protected.
func TestReadOnlyNamespaceConfig(t *testing.T) {
	t.Parallel()
	c, err := Parse(strings.NewReader(`{"subsystems":[{"nqn":"nqn.ro","attr":{"allow_any_host":"1"},"namespaces":[` +
		`{"nsid":1,"enable":1,"rdisk_read_only":true,"device":{"path":"ram:1MiB"}},{"nsid":2,"enable":1,"device":{"path":"ram:1MiB"}}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	p := newIWARP(t)
	defer p.Close()
	run, err := Start(c, p, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	if d := run.Disks(); !d[0].ReadOnly() || d[1].ReadOnly() {
		t.Fatalf("read-only flags: %v %v", d[0].ReadOnly(), d[1].ReadOnly())
	}
}

// TestHostSecretFromFile: a host's dhchap_key may be "@FILE".
func TestHostSecretFromFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, []byte("DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(strings.NewReader(`{"hosts":[{"nqn":"nqn.h","dhchap_key":"@` + path + `"}]}`)); err != nil {
		t.Fatalf("secret from a file: %v", err)
	}
	_, err := Parse(strings.NewReader(`{"hosts":[{"nqn":"nqn.h","dhchap_key":"@` + path + `.missing"}]}`))
	if err == nil || !strings.Contains(err.Error(), "hosts[0]") || !strings.Contains(err.Error(), "dhchap_key") {
		t.Fatalf("missing secret file: %v", err)
	}
}

// fuzzConfig parses fuzz input into a configuration that is safe to start:
// RAM and null disks only, loopback listeners on port 0, no secrets read
// from files. It returns nil for input that does not parse.
func fuzzConfig(s string) *Config {
	c, err := Parse(strings.NewReader(s))
	if err != nil {
		return nil
	}
	for i := range c.Subsystems {
		for j := range c.Subsystems[i].Namespaces {
			path := c.Subsystems[i].Namespaces[j].Device.Path
			if !strings.HasPrefix(path, "ram:") && !strings.HasPrefix(path, "null:") {
				c.Subsystems[i].Namespaces[j].Device.Path = "null:1MiB" // no files from fuzz input
			}
		}
	}
	for i := range c.Ports {
		c.Ports[i].Addr.TrAddr, c.Ports[i].Addr.TrSvcID = "127.0.0.1", "0"
	}
	for i := range c.Hosts {
		for _, k := range []*string{&c.Hosts[i].Key, &c.Hosts[i].CtrlKey} {
			if strings.HasPrefix(*k, "@") {
				*k = ""
			}
		}
		c.Hosts[i].DHCHAP = nil
	}
	if ic := c.ISCSI; ic != nil {
		ic.Portals = []string{"127.0.0.1:0"}
		chaps := []*CHAP{ic.DiscoveryCHAP, ic.DiscoveryMutualCHAP}
		for i := range ic.Targets {
			chaps = append(chaps, ic.Targets[i].CHAP, ic.Targets[i].MutualCHAP)
		}
		for _, ch := range chaps {
			if ch != nil && strings.HasPrefix(ch.Secret, "@") {
				ch.Secret = "fuzz-secret-1234"
			}
		}
	}
	if c.SRP != nil {
		c.SRP.Listen = []string{"127.0.0.1:0"}
	}
	if c.validate(&positions{}) != nil {
		return nil
	}
	return c
}

// FuzzApply starts one configuration and applies another, then the first
// again: no panic, and an apply that reports no error and nothing skipped
// leaves exactly the configuration applied as the model.
func FuzzApply(f *testing.F) {
	f.Add(applyBefore, applyAfter)
	f.Add(applyAfter, applyBefore)
	f.Add(scsiConfig, applyAfter)
	f.Add(healthConfigWith(healthGateway), healthConfigWith(""))
	f.Add(strings.Replace(nvmetcliJSON, "FILE", "ram:1MiB", 1), applyBefore)
	p := newIWARP(f)
	f.Fuzz(func(t *testing.T, a, b string) {
		ca, cb := fuzzConfig(a), fuzzConfig(b)
		if ca == nil || cb == nil {
			return
		}
		run, err := Start(ca, p, slog.New(slog.DiscardHandler), nil)
		if err != nil {
			return
		}
		defer run.Close()
		for _, c := range []*Config{cb, ca} {
			ch, err := run.Apply(c)
			if err == nil && len(ch.Skipped) == 0 && !same(run.Config(), c) {
				t.Fatalf("applied without an error, but the model is not the configuration:\n%+v\n%+v", run.Config(), c)
			}
		}
	})
}
