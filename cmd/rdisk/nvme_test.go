package main

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/nvmeof/auth"
	"github.com/rdisk/rdisk/nvmeof/target"
	"github.com/rdisk/rdisk/rdma/iwarp"
)

// startAuthTarget runs a target on a port serving both transports that
// requires cliHost to authenticate with key (and ctrlKey, when the host
// asks for bidirectional authentication).
func startAuthTarget(t *testing.T, key, ctrlKey auth.Secret) string {
	t.Helper()
	p, _ := iwarp.New(iwarp.Config{})
	tg, err := target.New(target.Config{Provider: p, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	if err := tg.SetHostAuth(cliHost, &target.HostAuth{Key: key, CtrlKey: &ctrlKey, DHGroups: []auth.DHGroupID{auth.DHGroupFFDHE2048, auth.DHGroupNull}}); err != nil {
		t.Fatal(err)
	}
	sub, err := tg.AddSubsystem(target.SubsystemConfig{NQN: cliNQN, AllowAnyHost: true})
	if err != nil {
		t.Fatal(err)
	}
	disk, _ := backstore.NewMem(8<<20, 512)
	if err := sub.AddNamespace(target.NamespaceConfig{NSID: 1, Disk: disk}); err != nil {
		t.Fatal(err)
	}
	port, err := tg.AddPort(target.PortConfig{ID: 1, Addr: "127.0.0.1:0", Transport: target.TransportBoth})
	if err != nil {
		t.Fatal(err)
	}
	port.LinkSubsystem(sub)
	return port.Addr().String()
}

// TestCLIDHCHAP runs discover, nvme, bench and cp with --dhchap-secret
// and --dhchap-ctrl-secret against a target that requires authentication,
// and the flags' errors.
func TestCLIDHCHAP(t *testing.T) {
	t.Parallel()
	key, _ := auth.GenerateSecret(nil, auth.HashSHA256, 0, cliHost)
	ctrlKey, _ := auth.GenerateSecret(nil, auth.HashNone, 0, "")
	wrong, _ := auth.GenerateSecret(nil, auth.HashNone, 0, "")
	addr := startAuthTarget(t, key, ctrlKey)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte(key.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tcpURL, rdmaURL := "nvme+tcp://"+addr+"/"+cliNQN, "nvme://"+addr+"/"+cliNQN

	out, _, err := runCLI(t, "nvme", "identify", tcpURL+"/1", "--dhchap-secret", key.String())
	if err != nil || !strings.Contains(out, "subnqn    : "+cliNQN) {
		t.Errorf("nvme identify over TCP with --dhchap-secret: %v\n%s", err, out)
	}
	out, _, err = runCLI(t, "nvme", "list", rdmaURL, "-S", "@"+keyFile, "-C", ctrlKey.String())
	if err != nil || !strings.Contains(out, rdmaURL+"/1 ") {
		t.Errorf("nvme list over RDMA, bidirectional, secret from a file: %v\n%s", err, out)
	}
	out, errOut, err := runCLI(t, "bench", rdmaURL+"/1", "--rw", "randrw", "--bs", "16KiB", "--verify", "--qd", "8", "--jobs", "2",
		"--runtime", "300ms", "--size", "2MiB", "--json", "--dhchap-secret", key.String(), "--dhchap-ctrl-secret", ctrlKey.String())
	var res struct {
		IOs          uint64 `json:"ios"`
		Errors       uint64 `json:"errors"`
		VerifyErrors uint64 `json:"verify_errors"`
	}
	if err != nil || json.Unmarshal([]byte(out), &res) != nil || res.IOs == 0 || res.Errors != 0 || res.VerifyErrors != 0 {
		t.Errorf("bench over RDMA with bidirectional authentication: %v\n%s\n%s", err, out, errOut)
	}
	src := filepath.Join(dir, "src.img")
	if err := os.WriteFile(src, []byte(strings.Repeat("authenticated\n", 40000)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, _, err := runCLI(t, "cp", "--no-progress", "--verify", "--dhchap-secret", "@"+keyFile, src, tcpURL); err != nil || !strings.Contains(out, "verified") {
		t.Errorf("cp to nvme+tcp with --dhchap-secret: %v\n%s", err, out)
	}
	// The discovery controller does not ask; the secret is not used.
	if out, _, err := runCLI(t, "discover", "nvme+tcp://"+addr, "--dhchap-secret", key.String()); err != nil || !strings.Contains(out, cliNQN) {
		t.Errorf("discover with --dhchap-secret: %v\n%s", err, out)
	}

	cases := []struct {
		args []string
		want string
	}{
		{[]string{"nvme", "identify", tcpURL}, "requires DH-HMAC-CHAP authentication (Connect of the admin queue): pass --dhchap-secret"},
		{[]string{"bench", rdmaURL, "--dhchap-secret", wrong.String(), "--runtime", "100ms"}, "authentication failed"},
		{[]string{"nvme", "list", tcpURL, "-S", key.String(), "-C", wrong.String()}, "wrong controller secret"},
		{[]string{"nvme", "list", tcpURL, "--dhchap-secret", "hunter2"}, "--dhchap-secret: invalid DH-HMAC-CHAP secret"},
		{[]string{"bench", tcpURL, "--dhchap-secret", "DHHC-1:00:bm90IGEga2V5:"}, "--dhchap-secret"},
		{[]string{"discover", "nvme+tcp://" + addr, "--dhchap-ctrl-secret", "DHHC-1:00:x:"}, "--dhchap-ctrl-secret"},
		{[]string{"cp", src, tcpURL, "--dhchap-secret", "@" + filepath.Join(dir, "missing")}, "--dhchap-secret: reading DH-HMAC-CHAP secret"},
		{[]string{"cp", src, tcpURL, "--dhchap-ctrl-secret", ctrlKey.String()}, "--dhchap-ctrl-secret needs --dhchap-secret"},
		{[]string{"connect", tcpURL, "--control", filepath.Join(dir, "ctl.sock"), "--dhchap-secret", "hunter2"}, "--dhchap-secret"},
	}
	for _, c := range cases {
		_, _, err := runCLI(t, c.args...)
		t.Logf("rdisk %s ...: %v", c.args[0], err)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("rdisk %s: %v, want an error saying %q (and not the secret)", strings.Join(c.args, " "), err, c.want)
		}
	}
}
