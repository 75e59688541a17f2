package target

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/internal/units"
	"github.com/rdisk/rdisk/nvmeof/auth"
	nvmet "github.com/rdisk/rdisk/nvmeof/target"
)

// Config is nvmetcli's JSON (/etc/nvmet/config.json), with an rdisk
// extension: a namespace "device" may name a RAM disk as "ram:SIZE" (for
// example "ram:1GiB") or a null disk as "null:SIZE".
type Config struct {
	Hosts      []Host      `json:"hosts"`
	Ports      []Port      `json:"ports"`
	Subsystems []Subsystem `json:"subsystems"`
	// ISCSI and SRP export namespaces over the SCSI transports too (rdisk
	// extensions, scsi.go).
	ISCSI *ISCSIConfig `json:"rdisk_iscsi,omitempty"`
	SRP   *SRPConfig   `json:"rdisk_srp,omitempty"`
	// OpenDevice, if set, opens the namespaces' devices in place of the
	// package's OpenDevice (a program that wraps or provides disks; tests).
	// Start keeps it for later changes. Not part of the file.
	OpenDevice func(path string, blockSize int, readOnly bool) (backstore.Disk, error) `json:"-"`
}

// Host is a host entry. Its DH-HMAC-CHAP settings take nvmet's configfs
// names (hosts/<nqn>/dhchap_key, dhchap_ctrl_key, dhchap_hash,
// dhchap_dhgroup), flat or as nvmetcli's "dhchap" attribute group
// ({"key", "ctrl_key", "hash", "dhgroup"}). Keys are in the DHHC-1 format
// of nvme gen-dhchap-key, or "@FILE" to read one from a file.
type Host struct {
	NQN     string    `json:"nqn"`
	Key     string    `json:"dhchap_key,omitempty"`
	CtrlKey string    `json:"dhchap_ctrl_key,omitempty"`
	Hash    string    `json:"dhchap_hash,omitempty"`
	DHGroup string    `json:"dhchap_dhgroup,omitempty"`
	DHCHAP  *HostChap `json:"dhchap,omitempty"`
}

// HostChap is nvmetcli's "dhchap" attribute group of a host.
type HostChap struct {
	Key     string `json:"key,omitempty"`
	CtrlKey string `json:"ctrl_key,omitempty"`
	Hash    string `json:"hash,omitempty"`
	DHGroup string `json:"dhgroup,omitempty"`
}

// hostAuth returns the host's DH-HMAC-CHAP settings, or nil without a key.
func (h *Host) hostAuth() (*nvmet.HostAuth, error) {
	key, ckey, hash, group := h.Key, h.CtrlKey, h.Hash, h.DHGroup
	if g := h.DHCHAP; g != nil {
		key, ckey, hash, group = cmp.Or(key, g.Key), cmp.Or(ckey, g.CtrlKey), cmp.Or(hash, g.Hash), cmp.Or(group, g.DHGroup)
	}
	if key == "" {
		if ckey != "" {
			return nil, fmt.Errorf("host %s: dhchap_ctrl_key without dhchap_key", h.NQN)
		}
		return nil, nil
	}
	s, err := auth.ParseSecretOrFile(key)
	if err != nil {
		return nil, fmt.Errorf("host %s: dhchap_key: %w", h.NQN, err)
	}
	a := &nvmet.HostAuth{Key: s}
	if ckey != "" {
		cs, err := auth.ParseSecretOrFile(ckey)
		if err != nil {
			return nil, fmt.Errorf("host %s: dhchap_ctrl_key: %w", h.NQN, err)
		}
		a.CtrlKey = &cs
	}
	if hash != "" {
		id, err := auth.ParseHashName(hash)
		if err != nil {
			return nil, fmt.Errorf("host %s: dhchap_hash: %w", h.NQN, err)
		}
		a.Hashes = []auth.HashID{id}
	}
	if group != "" {
		id, err := auth.ParseDHGroupName(group)
		if err != nil {
			return nil, fmt.Errorf("host %s: dhchap_dhgroup: %w", h.NQN, err)
		}
		a.DHGroups = []auth.DHGroupID{id}
	}
	return a, nil
}

// Port is an nvmetcli port.
type Port struct {
	PortID     uint16            `json:"portid"`
	Addr       PortAddr          `json:"addr"`
	Param      map[string]string `json:"param,omitempty"`
	Referrals  []Referral        `json:"referrals,omitempty"`
	Subsystems []string          `json:"subsystems"`
	// ANAGroups are nvmetcli's ANA groups of the port (accepted; rdisk
	// reports every path optimized until ANA is implemented).
	ANAGroups []ANAGroup `json:"ana_groups,omitempty"`
	// Optional ports that cannot listen (their address is in use) are
	// skipped with a warning instead of failing Start: rdisk target's
	// default NVMe/TCP discovery port. Not part of nvmetcli's JSON.
	Optional bool `json:"-"`
	// Disabled ports are kept in the configuration but do not listen
	// (rdisk admin port disable; an rdisk extension).
	Disabled bool `json:"rdisk_disabled,omitempty"`
}

// PortAddr is a port's transport address.
type PortAddr struct {
	AdrFam  string `json:"adrfam"`
	TrAddr  string `json:"traddr"`
	TrSvcID string `json:"trsvcid"`
	TrType  string `json:"trtype"`
	TReq    string `json:"treq,omitempty"`
}

// Referral is a port referral.
type Referral struct {
	Name   string   `json:"name"`
	PortID uint16   `json:"portid"`
	Addr   PortAddr `json:"addr"`
	Enable int      `json:"enable,omitempty"`
}

// ANAGroup is an nvmetcli ANA group of a port.
type ANAGroup struct {
	GrpID int               `json:"grpid"`
	ANA   map[string]string `json:"ana,omitempty"`
}

// Subsystem is an nvmetcli subsystem.
type Subsystem struct {
	NQN          string            `json:"nqn"`
	Attr         map[string]string `json:"attr"`
	AllowedHosts []string          `json:"allowed_hosts"`
	Namespaces   []Namespace       `json:"namespaces"`
	// Passthru is nvmetcli's passthru controller, which rdisk does not
	// have: a configuration with one is refused.
	Passthru []map[string]any `json:"passthru,omitempty"`
}

// Namespace is an nvmetcli namespace.
type Namespace struct {
	NSID   uint32 `json:"nsid"`
	Enable int    `json:"enable"`
	Device struct {
		Path  string `json:"path"`
		NGUID string `json:"nguid,omitempty"`
		UUID  string `json:"uuid,omitempty"`
		EUI64 string `json:"eui64,omitempty"`
	} `json:"device"`
	// ANAGrpID, ANA and Resv are nvmetcli's (accepted, not used yet).
	ANAGrpID  int               `json:"ana_grpid,omitempty"`
	ANA       map[string]string `json:"ana,omitempty"`
	Resv      map[string]string `json:"resv,omitempty"`
	BlockSize int               `json:"rdisk_block_size,omitempty"`
	// ReadOnly exports the device write-protected (an rdisk extension).
	ReadOnly bool `json:"rdisk_read_only,omitempty"`
}

// Parse reads a configuration strictly: unknown keys, values of the wrong
// type, duplicate hosts, subsystems, namespaces and ports, references to
// subsystems that are not defined, and a subsystem that no host may reach
// on a non-loopback port are refused with a *ConfigError naming the line
// and the field, before anything is opened or listens.
func Parse(r io.Reader) (*Config, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading the configuration: %w", err)
	}
	var c Config
	pos, err := checkSchema(data, &c)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("parsing nvmetcli JSON: %w", err)
	}
	if err := c.validate(pos); err != nil {
		return nil, err
	}
	return &c, nil
}

// validate checks what the schema cannot: uniqueness and references.
func (c *Config) validate(pos *positions) error {
	hosts := map[string]bool{}
	for i, h := range c.Hosts {
		p := fmt.Sprintf("hosts[%d]", i)
		switch {
		case h.NQN == "":
			return pos.errAt(p, "a host needs an nqn")
		case hosts[h.NQN]:
			return pos.errAt(p+".nqn", "host %s is listed twice", h.NQN)
		}
		hosts[h.NQN] = true
		if _, err := h.hostAuth(); err != nil {
			return pos.errAt(p, "%v", err)
		}
	}
	subs := map[string]*Subsystem{}
	for i := range c.Subsystems {
		s := &c.Subsystems[i]
		p := fmt.Sprintf("subsystems[%d]", i)
		switch {
		case s.NQN == "":
			return pos.errAt(p, "a subsystem needs an nqn")
		case subs[s.NQN] != nil:
			return pos.errAt(p+".nqn", "subsystem %s is defined twice", s.NQN)
		case len(s.Passthru) > 0:
			return pos.errAt(p+".passthru", "passthru subsystems are not supported by rdisk")
		case len(s.Attr["serial"]) > 20:
			return pos.errAt(p+".attr.serial", "serial %q: at most 20 characters", s.Attr["serial"])
		case len(s.Attr["model"]) > 40:
			return pos.errAt(p+".attr.model", "model %q: at most 40 characters", s.Attr["model"])
		}
		if _, err := subsystemConfig(s); err != nil {
			return pos.errAt(p+".attr", "%v", err)
		}
		subs[s.NQN] = s
		nsids := map[uint32]bool{}
		for j, ns := range s.Namespaces {
			np := fmt.Sprintf("%s.namespaces[%d]", p, j)
			switch {
			case ns.NSID == 0 || ns.NSID > 1024:
				return pos.errAt(np+".nsid", "nsid %d: want 1 to 1024", ns.NSID)
			case nsids[ns.NSID]:
				return pos.errAt(np+".nsid", "nsid %d is used twice in subsystem %s", ns.NSID, s.NQN)
			case ns.Device.Path == "":
				return pos.errAt(np+".device", "namespace %d names no device path", ns.NSID)
			}
			nsids[ns.NSID] = true
		}
	}
	ports := map[uint16]bool{}
	for i, pc := range c.Ports {
		p := fmt.Sprintf("ports[%d]", i)
		if ports[pc.PortID] {
			return pos.errAt(p+".portid", "port %d is defined twice", pc.PortID)
		}
		ports[pc.PortID] = true
		switch pc.Addr.TrType {
		case "", "rdma", "tcp", "rdma+tcp", "tcp+rdma":
		default:
			return pos.errAt(p+".addr.trtype", "trtype %q: want rdma, tcp or rdma+tcp (both on one port number)", pc.Addr.TrType)
		}
		if v, ok := pc.Param["inline_data_size"]; ok {
			if _, err := strconv.Atoi(v); err != nil {
				return pos.errAt(p+".param.inline_data_size", "%q is not a number", v)
			}
		}
		loopback := pc.Addr.TrAddr != "" && IsLoopback(pc.Addr.TrAddr)
		for j, nqn := range pc.Subsystems {
			sp := fmt.Sprintf("%s.subsystems[%d]", p, j)
			s := subs[nqn]
			if s == nil {
				return pos.errAt(sp, "port %d: subsystem %s is not defined", pc.PortID, nqn)
			}
			if !loopback && s.Attr["allow_any_host"] != "1" && len(s.AllowedHosts) == 0 {
				return pos.errAt(sp, "subsystem %s on port %d (%s, not loopback) lets no host in: list its allowed_hosts or set its attr allow_any_host to \"1\"",
					nqn, pc.PortID, cmp.Or(pc.Addr.TrAddr, "any address"))
			}
		}
	}
	return c.validateSCSI(pos, subs)
}

// readSecret returns a secret given in the configuration: itself, or the
// trimmed contents of FILE for "@FILE".
func readSecret(v string) (string, error) {
	path, ok := strings.CutPrefix(v, "@")
	if !ok {
		return v, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the secret: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// IsLoopback tells whether a host (a name, or an address with or without
// brackets) is a loopback address: listeners there need no ACL.
func IsLoopback(a string) bool {
	if a == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(a, "[]"))
	return ip != nil && ip.IsLoopback()
}

// OpenDevice opens a namespace's backing store: "ram:SIZE", "null:SIZE",
// a block device, or a regular file, read-only when readOnly is set.
// blockSize 0 means 512 (block devices use their logical block size).
func OpenDevice(path string, blockSize int, readOnly bool) (backstore.Disk, error) {
	if kind, size, ok := strings.Cut(path, ":"); ok && (kind == "ram" || kind == "null") {
		n, err := units.ParseSize(size)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		bs := blockSize
		if bs == 0 {
			bs = 512
		}
		if kind == "null" {
			d := backstore.NewNull(n, bs)
			d.SetReadOnly(readOnly)
			return d, nil
		}
		m, err := backstore.NewMem(n, bs)
		if err != nil {
			return nil, err
		}
		m.SetReadOnly(readOnly)
		return m, nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	if fi.Mode()&os.ModeDevice != 0 {
		return backstore.OpenBlock(path, backstore.BlockOptions{BlockSize: blockSize, ReadOnly: readOnly})
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is neither a block device nor a regular file", path)
	}
	return backstore.OpenFile(path, backstore.FileOptions{BlockSize: blockSize, ReadOnly: readOnly})
}
