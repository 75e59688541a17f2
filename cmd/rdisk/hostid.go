package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/rdisk/rdisk/nvmeof/host"
	"github.com/urfave/cli/v2"
)

// The host identity an NVMe-oF host presents: its NQN and 128-bit host ID.
// Like nvme-cli, rdisk uses /etc/nvme/hostnqn and /etc/nvme/hostid when
// they exist, so the kernel host and rdisk look like one host to a target's
// ACLs. Otherwise it generates an identity once and keeps it under
// /etc/rdisk (as root) or $XDG_CONFIG_HOME/rdisk (~/.config/rdisk), so the
// identity stays stable across runs. --hostnqn and --hostid override both.

const (
	nvmeConfigDir = "/etc/nvme"
	rootRdiskDir  = "/etc/rdisk"
	uuidNQNPrefix = "nqn.2014-08.org.nvmexpress:uuid:"
)

// hostIdentity is a resolved host NQN and ID with where they came from.
type hostIdentity struct {
	NQN     string
	ID      [16]byte
	NQNFrom string // file path, "--hostnqn" or "generated <path>"
	IDFrom  string
}

func hostIDFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "hostnqn", Usage: "host NQN (default: /etc/nvme/hostnqn, else one generated once and kept in the rdisk config directory)"},
		&cli.StringFlag{Name: "hostid", Usage: "host ID, a UUID (default: /etc/nvme/hostid, the UUID of a uuid-form host NQN, else generated once)"},
	}
}

// rdiskConfigDir is where rdisk keeps a generated identity.
func rdiskConfigDir() string {
	if os.Geteuid() == 0 {
		return rootRdiskDir
	}
	if x := os.Getenv("XDG_CONFIG_HOME"); x != "" {
		return filepath.Join(x, "rdisk")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".config", "rdisk")
	}
	return rootRdiskDir
}

// identityFromFlags resolves the host identity for a command.
func identityFromFlags(c *cli.Context) (hostIdentity, error) {
	return resolveHostIdentity(c.String("hostnqn"), c.String("hostid"), nvmeConfigDir, rdiskConfigDir())
}

// resolveHostIdentity applies, for the NQN: --hostnqn, nvmeDir/hostnqn,
// rdiskDir/hostnqn, else a generated uuid-form NQN kept in rdiskDir; for
// the ID: --hostid, nvmeDir/hostid, the UUID of a uuid-form NQN (as
// nvme-cli derives it), rdiskDir/hostid, else generated and kept.
func resolveHostIdentity(flagNQN, flagID, nvmeDir, rdiskDir string) (hostIdentity, error) {
	var id hostIdentity
	if flagNQN != "" {
		if err := host.CheckNQN(flagNQN); err != nil {
			return id, fmt.Errorf("--hostnqn: %w", err)
		}
		id.NQN, id.NQNFrom = flagNQN, "--hostnqn"
	}
	if flagID != "" {
		u, err := parseUUID(flagID)
		if err != nil {
			return id, fmt.Errorf("--hostid: %w", err)
		}
		id.ID, id.IDFrom = u, "--hostid"
	}
	readNQN := func(dir string) error {
		if id.NQNFrom != "" {
			return nil
		}
		p := filepath.Join(dir, "hostnqn")
		nqn, err := readLine(p)
		if err != nil || nqn == "" {
			return err
		}
		if err := host.CheckNQN(nqn); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		id.NQN, id.NQNFrom = nqn, p
		return nil
	}
	readID := func(dir string) error {
		if id.IDFrom != "" {
			return nil
		}
		p := filepath.Join(dir, "hostid")
		s, err := readLine(p)
		if err != nil || s == "" {
			return err
		}
		u, err := parseUUID(s)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		id.ID, id.IDFrom = u, p
		return nil
	}
	if err := readNQN(nvmeDir); err != nil {
		return id, err
	}
	if err := readID(nvmeDir); err != nil {
		return id, err
	}
	if err := readNQN(rdiskDir); err != nil {
		return id, err
	}
	if id.IDFrom == "" && id.NQNFrom != "" {
		if u, ok := strings.CutPrefix(id.NQN, uuidNQNPrefix); ok {
			if v, err := parseUUID(u); err == nil {
				id.ID, id.IDFrom = v, "the UUID of the host NQN"
			}
		}
	}
	if err := readID(rdiskDir); err != nil {
		return id, err
	}
	// Generate what is still missing and keep it.
	if id.NQNFrom == "" {
		u := id.ID
		if id.IDFrom == "" {
			u = newUUID()
			id.ID = u
			p := filepath.Join(rdiskDir, "hostid")
			got, err := storeOnce(p, formatUUID(u))
			if err != nil {
				return id, err
			}
			if u, err = parseUUID(got); err != nil {
				return id, fmt.Errorf("%s: %w", p, err)
			}
			id.ID, id.IDFrom = u, "generated "+p
		}
		p := filepath.Join(rdiskDir, "hostnqn")
		got, err := storeOnce(p, uuidNQNPrefix+formatUUID(u))
		if err != nil {
			return id, err
		}
		if err := host.CheckNQN(got); err != nil {
			return id, fmt.Errorf("%s: %w", p, err)
		}
		id.NQN, id.NQNFrom = got, "generated "+p
	}
	if id.IDFrom == "" {
		p := filepath.Join(rdiskDir, "hostid")
		got, err := storeOnce(p, formatUUID(newUUID()))
		if err != nil {
			return id, err
		}
		u, err := parseUUID(got)
		if err != nil {
			return id, fmt.Errorf("%s: %w", p, err)
		}
		id.ID, id.IDFrom = u, "generated "+p
	}
	return id, nil
}

// readLine returns the first line of a file, trimmed; "" if it does not
// exist.
func readLine(p string) (string, error) {
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the host identity: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line), nil
}

// storeOnce writes v to p unless p exists, and returns what p then holds
// (another rdisk may have written it first). The file appears whole: it is
// written aside and hard-linked into place, which fails if p exists.
func storeOnce(p, v string) (string, error) {
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("keeping the generated host identity: %w (pass --hostnqn and --hostid)", err)
	}
	f, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(p)+"-*")
	if err != nil {
		return "", fmt.Errorf("keeping the generated host identity: %w (pass --hostnqn and --hostid)", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, werr := f.WriteString(v + "\n")
	if err := errors.Join(werr, f.Chmod(0o644), f.Close()); err != nil {
		return "", fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := os.Link(tmp, p); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("keeping the generated host identity in %s: %w", p, err)
		}
		got, err := readLine(p)
		if err != nil {
			return "", err
		}
		if got == "" {
			return "", fmt.Errorf("%s is empty", p)
		}
		return got, nil
	}
	return v, nil
}

// parseUUID parses the 8-4-4-4-12 hex form (or 32 hex digits).
func parseUUID(s string) ([16]byte, error) {
	var u [16]byte
	h := strings.ReplaceAll(strings.TrimSpace(s), "-", "")
	if len(h) != 32 {
		return u, fmt.Errorf("%q is not a UUID (want xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", s)
	}
	if _, err := hex.Decode(u[:], []byte(h)); err != nil {
		return u, fmt.Errorf("%q is not a UUID: %w", s, err)
	}
	return u, nil
}

func formatUUID(u [16]byte) string {
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// newUUID returns a random (version 4) UUID.
func newUUID() [16]byte {
	var u [16]byte
	rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u
}
