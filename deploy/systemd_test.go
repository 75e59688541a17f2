package deploy

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var unitFiles = []string{"rdisk-target.service", "rdisk-initiator.service"}

// unit is a parsed unit file: section -> key -> values (a key may repeat).
type unit map[string]map[string][]string

func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := unit{}
	sec := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			sec = line[1 : len(line)-1]
			u[sec] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || sec == "" || strings.HasSuffix(line, `\`) {
				t.Fatalf("%s:%d: %q: want KEY=VALUE in a section, on one line", path, n, line)
			}
			u[sec][strings.TrimSpace(k)] = append(u[sec][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return u
}

// get returns the last value of key (the one systemd uses), or "".
func (u unit) get(key string) string {
	v := u["Service"][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// all returns the values of a list-valued key, split at spaces.
func (u unit) all(key string) []string {
	var out []string
	for _, v := range u["Service"][key] {
		out = append(out, strings.Fields(v)...)
	}
	return out
}

// TestDeploySystemdUnits checks what the units promise, before
// systemd-analyze checks their syntax (TestDeploySystemdVerify).
func TestDeploySystemdUnits(t *testing.T) {
	t.Parallel()
	tg := parseUnit(t, "systemd/rdisk-target.service")
	for key, want := range map[string]string{
		"Type":                     "notify",
		"ExecStart":                "/usr/local/bin/rdisk target --config /etc/rdisk/target.json --admin-socket /run/rdisk/admin.sock",
		"ExecReload":               "/bin/kill -HUP $MAINPID",
		"KillSignal":               "SIGTERM",
		"Restart":                  "on-failure",
		"RuntimeDirectory":         "rdisk",
		"RuntimeDirectoryPreserve": "yes",
		"ProtectSystem":            "strict",
		"ProtectHome":              "yes",
		"PrivateTmp":               "yes",
		"NoNewPrivileges":          "yes",
		"LimitMEMLOCK":             "infinity",
		"DevicePolicy":             "closed",
		"CapabilityBoundingSet":    "CAP_NET_BIND_SERVICE CAP_SYS_NICE",
		"AmbientCapabilities":      "CAP_NET_BIND_SERVICE CAP_SYS_NICE",
	} {
		if got := tg.get(key); got != want {
			t.Errorf("rdisk-target.service: %s=%q, want %q", key, got, want)
		}
	}
	// Above the target's --drain-timeout default of 30 s.
	if d, err := time.ParseDuration(tg.get("TimeoutStopSec")); err != nil || d <= 30*time.Second {
		t.Errorf("rdisk-target.service: TimeoutStopSec=%q: want a duration above 30s (%v)", tg.get("TimeoutStopSec"), err)
	}
	if !slices.Contains(tg.all("ReadWritePaths"), "/var/lib/rdisk") {
		t.Errorf("rdisk-target.service: ReadWritePaths %v lacks /var/lib/rdisk", tg.all("ReadWritePaths"))
	}
	devs := tg["Service"]["DeviceAllow"]
	for _, want := range []string{"block-sd rw", "block-blkext rw", "block-device-mapper rw", "char-infiniband_verbs rw", "/dev/infiniband/rdma_cm rw"} {
		if !slices.Contains(devs, want) {
			t.Errorf("rdisk-target.service: no DeviceAllow=%s (have %q)", want, devs)
		}
	}

	in := parseUnit(t, "systemd/rdisk-initiator.service")
	for key, want := range map[string]string{
		"Type":                     "notify",
		"ExecStart":                "/usr/local/bin/rdisk daemon --control /run/rdisk/initiator.sock",
		"Restart":                  "on-failure",
		"RuntimeDirectory":         "rdisk",
		"RuntimeDirectoryPreserve": "yes",
		"NoNewPrivileges":          "yes",
		"LimitMEMLOCK":             "infinity",
		"DevicePolicy":             "closed",
		"CapabilityBoundingSet":    "CAP_SYS_ADMIN CAP_SYS_NICE",
		"AmbientCapabilities":      "CAP_SYS_ADMIN CAP_SYS_NICE",
	} {
		if got := in.get(key); got != want {
			t.Errorf("rdisk-initiator.service: %s=%q, want %q", key, got, want)
		}
	}
	devs = in["Service"]["DeviceAllow"]
	for _, want := range []string{"/dev/fuse rw", "block-nbd rw"} {
		if !slices.Contains(devs, want) {
			t.Errorf("rdisk-initiator.service: no DeviceAllow=%s (have %q)", want, devs)
		}
	}
	// A mount namespace would keep the daemon's FUSE mounts from the host.
	for _, key := range []string{"ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "PrivateMounts", "ReadWritePaths",
		"ReadOnlyPaths", "InaccessiblePaths", "TemporaryFileSystem", "BindPaths", "BindReadOnlyPaths", "ProtectKernelTunables",
		"ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups", "ProtectProc", "ProcSubset", "RootDirectory", "MountFlags"} {
		if v := in.get(key); v != "" && v != "no" {
			t.Errorf("rdisk-initiator.service: %s=%s runs the daemon in a mount namespace of its own: its FUSE files would not be seen outside", key, v)
		}
	}
	for _, u := range []unit{tg, in} {
		if len(u["Install"]["WantedBy"]) == 0 {
			t.Error("a unit without WantedBy= in [Install]: systemctl enable does nothing")
		}
	}
}

// TestDeploySystemdVerify runs systemd-analyze verify on the units, with
// /usr/local/bin/rdisk replaced by a stub (verify wants every command to
// exist); any warning fails the test.
func TestDeploySystemdVerify(t *testing.T) {
	t.Parallel()
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (apt-get install systemd): the units' syntax is not checked")
	}
	dir := t.TempDir()
	stub := filepath.Join(dir, "rdisk")
	if err := os.WriteFile(stub, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, name := range unitFiles {
		data, err := os.ReadFile(filepath.Join("systemd", name))
		if err != nil {
			t.Fatal(err)
		}
		s := strings.ReplaceAll(string(data), "/usr/local/bin/rdisk", stub)
		if _, err := os.Stat("/bin/kill"); err != nil {
			s = strings.ReplaceAll(s, "/bin/kill", stub)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sa, append([]string{"verify", "--man=no"}, paths...)...)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
