package deploy

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rdisk/rdisk/rdma/iwarp"
	"github.com/rdisk/rdisk/target"
)

// configFiles are the example configurations of config/, with the
// protocols each exports.
var configFiles = map[string][]string{
	"nvme-rdma-tcp.json": {"nvme"},
	"iscsi.json":         {"iscsi"},
	"srp.json":           {"srp"},
	"all.json":           {"nvme", "iscsi", "srp"},
}

// backingDir is where the examples keep their backing files (the systemd
// unit's StateDirectory, the image's volume, the DaemonSet's hostPath).
const backingDir = "/var/lib/rdisk/"

func parseConfigFile(t *testing.T, path string) *target.Config {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := target.Parse(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: target.Parse: %v", path, err)
	}
	return cfg
}

type nsRef struct {
	nqn  string
	nsid uint32
}

// exported returns, per protocol, the namespaces a configuration exports:
// over NVMe-oF those of the subsystems linked to an enabled port, over
// iSCSI and SRP those their LUNs name.
func exported(cfg *target.Config) map[string][]nsRef {
	out := map[string][]nsRef{}
	add := func(proto string, r nsRef) {
		if !slices.Contains(out[proto], r) {
			out[proto] = append(out[proto], r)
		}
	}
	linked := map[string]bool{}
	for _, p := range cfg.Ports {
		if !p.Disabled {
			for _, s := range p.Subsystems {
				linked[s] = true
			}
		}
	}
	for _, s := range cfg.Subsystems {
		if linked[s.NQN] {
			for _, ns := range s.Namespaces {
				add("nvme", nsRef{s.NQN, ns.NSID})
			}
		}
	}
	if cfg.ISCSI != nil {
		for _, t := range cfg.ISCSI.Targets {
			for _, l := range t.LUNs {
				add("iscsi", nsRef{l.Subsystem, l.NSID})
			}
		}
	}
	if cfg.SRP != nil {
		for _, p := range cfg.SRP.Ports {
			for _, l := range p.LUNs {
				add("srp", nsRef{l.Subsystem, l.NSID})
			}
		}
	}
	return out
}

// TestDeployConfigsParse: every example configuration is accepted by
// target.Parse (rdisk target --config's strict reader), is file-backed under
// /var/lib/rdisk, and exports one namespace over each of its protocols and
// over no other.
func TestDeployConfigsParse(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("config/*.json")
	if err != nil {
		t.Fatal(err)
	}
	for i := range files {
		files[i] = filepath.Base(files[i])
	}
	var want []string
	for name := range configFiles {
		want = append(want, name)
	}
	slices.Sort(files)
	slices.Sort(want)
	if !slices.Equal(files, want) {
		t.Errorf("config/ holds %v, the test knows %v", files, want)
	}
	for name, protos := range configFiles {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := parseConfigFile(t, filepath.Join("config", name))
			for _, s := range cfg.Subsystems {
				if len(s.Namespaces) == 0 {
					t.Errorf("subsystem %s has no namespace", s.NQN)
				}
				for _, ns := range s.Namespaces {
					p := ns.Device.Path
					if !strings.HasPrefix(p, backingDir) || !strings.HasSuffix(p, ".img") || strings.Contains(p, "..") {
						t.Errorf("subsystem %s namespace %d: device %q is not a file under %s", s.NQN, ns.NSID, p, backingDir)
					}
					if ns.Enable != 1 {
						t.Errorf("subsystem %s namespace %d is not enabled", s.NQN, ns.NSID)
					}
				}
			}
			ex := exported(cfg)
			var got []string
			seen := map[nsRef]string{}
			for proto, refs := range ex {
				got = append(got, proto)
				if len(refs) != 1 {
					t.Errorf("%s exports %d namespaces (%v), want one", proto, len(refs), refs)
				}
				for _, r := range refs {
					if other, ok := seen[r]; ok {
						t.Errorf("namespace %d of %s is exported over both %s and %s", r.nsid, r.nqn, other, proto)
					}
					seen[r] = proto
				}
			}
			slices.Sort(got)
			wantProtos := slices.Sorted(slices.Values(protos))
			if !slices.Equal(got, wantProtos) {
				t.Errorf("exports over %v, want %v", got, wantProtos)
			}
			// Every namespace is exported by something.
			for _, s := range cfg.Subsystems {
				for _, ns := range s.Namespaces {
					if _, ok := seen[nsRef{s.NQN, ns.NSID}]; !ok {
						t.Errorf("namespace %d of %s is exported by no protocol", ns.NSID, s.NQN)
					}
				}
			}
		})
	}
}

// loopbackConfig moves cfg to 127.0.0.1 with ports 0 and its backing files
// (and @FILE secrets) into dir, creating them, so that it can be started
// in a test.
func loopbackConfig(t *testing.T, cfg *target.Config, dir string) {
	t.Helper()
	for i := range cfg.Ports {
		cfg.Ports[i].Addr.TrAddr, cfg.Ports[i].Addr.TrSvcID = "127.0.0.1", "0"
	}
	for i := range cfg.Subsystems {
		for j := range cfg.Subsystems[i].Namespaces {
			d := &cfg.Subsystems[i].Namespaces[j].Device
			d.Path = filepath.Join(dir, strings.TrimPrefix(d.Path, backingDir))
			f, err := os.Create(d.Path)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(16 << 20); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
	secret := func(ch *target.CHAP) {
		if ch == nil || !strings.HasPrefix(ch.Secret, "@") {
			return
		}
		p := filepath.Join(dir, filepath.Base(ch.Secret))
		if err := os.WriteFile(p, []byte("0123456789abcdef\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		ch.Secret = "@" + p
	}
	if ic := cfg.ISCSI; ic != nil {
		for i := range ic.Portals {
			ic.Portals[i] = "127.0.0.1:0"
		}
		secret(ic.DiscoveryCHAP)
		secret(ic.DiscoveryMutualCHAP)
		for i := range ic.Targets {
			secret(ic.Targets[i].CHAP)
			secret(ic.Targets[i].MutualCHAP)
		}
	}
	if sc := cfg.SRP; sc != nil {
		for i := range sc.Listen {
			sc.Listen[i] = "127.0.0.1:0"
		}
	}
}

// TestDeployConfigsStart: every example configuration also starts (what
// Parse leaves to target.Start: the SRP ACL entries, CHAP secret files, the
// disks), moved to loopback with free ports and temporary backing files,
// with every port, portal and SRP address listening.
func TestDeployConfigsStart(t *testing.T) {
	t.Parallel()
	for name := range configFiles {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := parseConfigFile(t, filepath.Join("config", name))
			loopbackConfig(t, cfg, t.TempDir())
			p, err := iwarp.New(iwarp.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			run, err := target.Start(cfg, p, slog.New(slog.DiscardHandler), nil)
			if err != nil {
				t.Fatalf("target.Start: %v", err)
			}
			defer run.Close()
			if got, want := len(run.Ports), len(cfg.Ports); got != want {
				t.Errorf("%d NVMe-oF ports listen, want %d", got, want)
			}
			if cfg.ISCSI != nil && len(run.ISCSIPortals) != len(cfg.ISCSI.Portals) {
				t.Errorf("%d iSCSI portals listen, want %d", len(run.ISCSIPortals), len(cfg.ISCSI.Portals))
			}
			if cfg.SRP != nil && (len(run.SRPAddrs) != len(cfg.SRP.Listen) || len(run.SRPPorts) != len(cfg.SRP.Ports)) {
				t.Errorf("SRP: %d addresses and %d target ports, want %d and %d", len(run.SRPAddrs), len(run.SRPPorts), len(cfg.SRP.Listen), len(cfg.SRP.Ports))
			}
			n := 0
			for _, s := range cfg.Subsystems {
				n += len(s.Namespaces)
			}
			if got := len(run.Disks()); got != n {
				t.Errorf("%d disks open, want %d", got, n)
			}
		})
	}
}
