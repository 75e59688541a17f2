package main

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func writeFile(t *testing.T, p, v string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
		t.Fatal(err)
	}
}

const (
	testUUID = "0c7a4b2e-5d1f-4e3a-9b6c-7d8e9f0a1b2c"
	otherID  = "11111111-2222-3333-4444-555555555555"
)

func TestHostIdentity(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name            string
		nvme, rdisk     map[string]string // files in each directory
		flagNQN, flagID string
		wantNQN, wantID string // "" : generated
		wantNQNFrom     string
		wantErr         string
		wantStoredRdisk bool
	}{
		{
			name:    "nvme-cli files",
			nvme:    map[string]string{"hostnqn": uuidNQNPrefix + testUUID + "\n", "hostid": otherID + "\n"},
			wantNQN: uuidNQNPrefix + testUUID, wantID: otherID, wantNQNFrom: "hostnqn",
		},
		{
			name:    "nqn without hostid: the NQN's UUID",
			nvme:    map[string]string{"hostnqn": uuidNQNPrefix + testUUID},
			wantNQN: uuidNQNPrefix + testUUID, wantID: testUUID,
		},
		{
			name:    "non-uuid nqn without hostid: generated and kept",
			nvme:    map[string]string{"hostnqn": "nqn.2026-11.io.example:host1\n"},
			wantNQN: "nqn.2026-11.io.example:host1", wantStoredRdisk: true,
		},
		{
			name:    "flags win",
			nvme:    map[string]string{"hostnqn": uuidNQNPrefix + testUUID, "hostid": testUUID},
			flagNQN: "nqn.2026-11.io.example:flag", flagID: strings.ToUpper(otherID),
			wantNQN: "nqn.2026-11.io.example:flag", wantID: otherID, wantNQNFrom: "--hostnqn",
		},
		{
			name:    "rdisk directory",
			rdisk:   map[string]string{"hostnqn": uuidNQNPrefix + otherID + "\n", "hostid": otherID + "\n"},
			wantNQN: uuidNQNPrefix + otherID, wantID: otherID,
		},
		{
			name:            "nothing: generated once",
			wantStoredRdisk: true,
		},
		{
			name:    "hostid flag only: uuid nqn of it, kept",
			flagID:  testUUID,
			wantNQN: uuidNQNPrefix + testUUID, wantID: testUUID, wantStoredRdisk: true,
		},
		{name: "bad hostid file", nvme: map[string]string{"hostnqn": "nqn.a:b", "hostid": "nope"}, wantErr: "not a UUID"},
		{name: "bad hostnqn file", nvme: map[string]string{"hostnqn": "nqn with space"}, wantErr: "hostnqn"},
		{name: "bad flag", flagNQN: strings.Repeat("n", 300), wantErr: "--hostnqn"},
		{name: "bad id flag", flagID: "1234", wantErr: "--hostid"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			nvmeDir, rdiskDir := filepath.Join(dir, "etc-nvme"), filepath.Join(dir, "config", "rdisk")
			for k, v := range c.nvme {
				writeFile(t, filepath.Join(nvmeDir, k), v)
			}
			for k, v := range c.rdisk {
				writeFile(t, filepath.Join(rdiskDir, k), v)
			}
			id, err := resolveHostIdentity(c.flagNQN, c.flagID, nvmeDir, rdiskDir)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one about %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.wantNQN != "" && id.NQN != c.wantNQN {
				t.Errorf("NQN %q (from %s), want %q", id.NQN, id.NQNFrom, c.wantNQN)
			}
			if c.wantID != "" && formatUUID(id.ID) != c.wantID {
				t.Errorf("ID %s (from %s), want %s", formatUUID(id.ID), id.IDFrom, c.wantID)
			}
			if c.wantNQNFrom != "" && !strings.HasSuffix(id.NQNFrom, c.wantNQNFrom) {
				t.Errorf("NQN from %q, want ...%q", id.NQNFrom, c.wantNQNFrom)
			}
			if id.ID == ([16]byte{}) {
				t.Error("zero host ID")
			}
			_, statErr := os.Stat(rdiskDir)
			if c.wantStoredRdisk != (statErr == nil) && len(c.rdisk) == 0 {
				t.Errorf("rdisk directory created: %v, want %v", statErr == nil, c.wantStoredRdisk)
			}
			// Stable: resolving again gives the same identity.
			again, err := resolveHostIdentity(c.flagNQN, c.flagID, nvmeDir, rdiskDir)
			if err != nil || again.NQN != id.NQN || again.ID != id.ID {
				t.Errorf("second resolution %+v, %v; first %+v", again, err, id)
			}
		})
	}
}

func TestHostIdentityGenerated(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	id, err := resolveHostIdentity("", "", filepath.Join(dir, "none"), dir)
	if err != nil {
		t.Fatal(err)
	}
	u, ok := strings.CutPrefix(id.NQN, uuidNQNPrefix)
	if !ok || u != formatUUID(id.ID) {
		t.Errorf("generated NQN %q and ID %s: want the uuid form of the ID", id.NQN, formatUUID(id.ID))
	}
	if id.ID[6]>>4 != 4 || id.ID[8]>>6 != 2 {
		t.Errorf("generated ID %s is not a version 4 UUID", formatUUID(id.ID))
	}
	b, _ := os.ReadFile(filepath.Join(dir, "hostnqn"))
	if strings.TrimSpace(string(b)) != id.NQN {
		t.Errorf("stored hostnqn %q, want %q", b, id.NQN)
	}
}

// TestHostIdentityConcurrent: rdisk processes starting together end with
// one identity.
func TestHostIdentityConcurrent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var wg sync.WaitGroup
	ids := make([]hostIdentity, 8)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if ids[i], err = resolveHostIdentity("", "", filepath.Join(dir, "none"), dir); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, id := range ids[1:] {
		if id.NQN != ids[0].NQN || id.ID != ids[0].ID {
			t.Fatalf("identities differ: %+v and %+v", id, ids[0])
		}
	}
}

func TestUUID(t *testing.T) {
	t.Parallel()
	u, err := parseUUID(testUUID)
	if err != nil || formatUUID(u) != testUUID {
		t.Fatalf("parseUUID(%q) = %s, %v", testUUID, formatUUID(u), err)
	}
	if _, err := parseUUID(strings.ReplaceAll(testUUID, "-", "")); err != nil {
		t.Errorf("UUID without dashes: %v", err)
	}
	for _, bad := range []string{"", "xyz", testUUID + "0", strings.Replace(testUUID, "0", "g", 1)} {
		if _, err := parseUUID(bad); err == nil {
			t.Errorf("parseUUID(%q) succeeded", bad)
		}
	}
}
