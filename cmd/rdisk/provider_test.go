package main

import (
	"strings"
	"testing"
)

// TestRDMAFlag: --rdma is checked, and verbs in a build without it says
// how to get it; auto and iwarp serve over the software provider.
func TestRDMAFlag(t *testing.T) {
	t.Parallel()
	if _, _, err := runCLI(t, "--rdma", "roce", "discover", "nvme://127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), `--rdma "roce": want auto, iwarp or verbs`) {
		t.Fatalf("--rdma roce: %v", err)
	}
	if verbsBuilt {
		t.Skip("built with the verbs provider")
	}
	if _, _, err := runCLI(t, "--rdma", "verbs", "discover", "nvme://127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "-tags verbs") {
		t.Fatalf("--rdma verbs without verbs: %v", err)
	}
	if _, _, err := runCLI(t, "rdma", "devices"); err == nil || !strings.Contains(err.Error(), "-tags verbs") {
		t.Fatalf("rdma devices without verbs: %v", err)
	}
	addr := startCLITargetOn(t, "rdma")
	for _, choice := range []string{"auto", "iwarp"} {
		out, _, err := runCLI(t, "--rdma", choice, "discover", "nvme://"+addr)
		if err != nil || !strings.Contains(out, cliNQN) {
			t.Errorf("--rdma %s discover: %v\n%s", choice, err, out)
		}
	}
}
