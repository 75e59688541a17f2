package main

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/nvmeof/target"
)

// TestNVMeCLINames: id-ctrl, id-ns, smart-log and error-log as nvme-cli
// names them, their --json with nvme-cli's keys and value types.
func TestNVMeCLINames(t *testing.T) {
	t.Parallel()
	tg, err := target.New(target.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	sub, err := tg.AddSubsystem(target.SubsystemConfig{NQN: cliNQN, AllowAnyHost: true})
	if err != nil {
		t.Fatal(err)
	}
	disk, _ := backstore.NewMem(8<<20, 512)
	if err := sub.AddNamespace(target.NamespaceConfig{NSID: 1, Disk: disk}); err != nil {
		t.Fatal(err)
	}
	port, err := tg.AddPort(target.PortConfig{ID: 1, Addr: "127.0.0.1:0", Transport: target.TransportTCP})
	if err != nil {
		t.Fatal(err)
	}
	port.LinkSubsystem(sub)
	u := "nvme+tcp://" + port.Addr().String() + "/" + cliNQN
	decode := func(args ...string) map[string]any {
		t.Helper()
		out, errOut, err := runCLI(t, append(args, "--json")...)
		if err != nil {
			t.Fatalf("rdisk %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("rdisk %s --json: %v\n%s", strings.Join(args, " "), err, out)
		}
		return m
	}
	ctrl := decode("nvme", "id-ctrl", u)
	if ctrl["subnqn"] != cliNQN || ctrl["mn"] == nil || ctrl["psds"] == nil {
		t.Errorf("id-ctrl JSON: %v", ctrl)
	}
	if _, ok := ctrl["sn"].(string); !ok {
		t.Errorf("id-ctrl sn is %T, nvme-cli prints a string", ctrl["sn"])
	}
	if _, ok := ctrl["mdts"].(float64); !ok {
		t.Errorf("id-ctrl mdts is %T, nvme-cli prints a number", ctrl["mdts"])
	}
	ns := decode("nvme", "id-ns", u+"/1")
	if ns["nsze"] != float64(8<<20/512) || ns["lbafs"] == nil {
		t.Errorf("id-ns JSON: %v", ns)
	}
	if _, ok := ns["nguid"].(string); !ok {
		t.Errorf("id-ns nguid is %T", ns["nguid"])
	}
	smart := decode("nvme", "smart-log", u)
	for _, k := range []string{"critical_warning", "avail_spare", "spare_thresh", "percent_used", "data_units_read", "host_write_commands", "num_err_log_entries"} {
		if _, ok := smart[k].(float64); !ok {
			t.Errorf("smart-log JSON has no number %q: %v", k, smart)
		}
	}
	errs := decode("nvme", "error-log", u)
	if _, ok := errs["errors"].([]any); !ok {
		t.Errorf("error-log JSON: %v", errs)
	}
	if _, _, err := runCLI(t, "nvme", "id-ns", u); err == nil || !strings.Contains(err.Error(), "id-ns needs a namespace") {
		t.Errorf("id-ns without a namespace: %v", err)
	}
}
