package target

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/backstore/rbd"
	"github.com/rdisk/rdisk/internal/units"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/nvmeof/auth"
	nvmet "github.com/rdisk/rdisk/nvmeof/target"
	"github.com/rdisk/rdisk/rdma"
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
	// Gateway is how this gateway acts as one of several serving the same
	// disks: its ANA and ALUA states following its disks' health (an
	// rdisk extension, health.go).
	Gateway *GatewayConfig `json:"rdisk_gateway,omitempty"`
	// OpenDevice, if set, opens the namespaces' devices in place of the
	// package's OpenDevice (a program that wraps or provides disks; tests).
	// Start keeps it for later changes. Not part of the file.
	OpenDevice func(path string, o DeviceOptions) (backstore.Disk, error) `json:"-"`
	// OpenRDMA, if set, returns the RDMA provider that a port's (or an
	// rdisk_iscsi or rdisk_srp section's) "rdisk_rdma" names, for the
	// address it listens on: auto, iwarp or verbs, as rdisk's --rdma flag.
	// The caller owns the providers (it closes them after the target);
	// without it, a configuration naming a provider is refused. Start
	// keeps it for later changes. Not part of the file.
	OpenRDMA func(choice, addr string) (rdma.Provider, error) `json:"-"`
}

// checkRDMAChoice checks an "rdisk_rdma" value: auto, iwarp, verbs, or
// empty (the target's provider, which rdisk target's --rdma picks).
func checkRDMAChoice(v string) error {
	switch v {
	case "", "auto", "iwarp", "verbs":
		return nil
	}
	return fmt.Errorf("%q: want auto, iwarp or verbs (the RDMA provider serving it; empty: the target's, --rdma)", v)
}

// DeviceOptions are how a namespace's device is opened (OpenDevice).
type DeviceOptions struct {
	// BlockSize is the logical block size; 0 means 512 (block devices
	// use their logical block size).
	BlockSize int
	// ReadOnly opens the device write-protected.
	ReadOnly bool
	// Direct opens a regular file with O_DIRECT, past the page cache
	// (nvmet's file namespaces with buffered_io 0). Only for files.
	Direct bool
	// Buffered opens a block device through the page cache instead of
	// with O_DIRECT. Only for block devices.
	Buffered bool
	// NoURing runs a file's or block device's I/O on the synchronous
	// path (worker threads) instead of io_uring.
	NoURing bool
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
	// ANAGroups are the port's ANA groups and their states (nvmetcli's
	// ports/N/ana_groups/GRPID/ana_state): hosts connected through this
	// port see the namespaces of each group in its state. Group 1 exists
	// on every port, optimized unless listed.
	ANAGroups []ANAGroup `json:"ana_groups,omitempty"`
	// Optional ports that cannot listen (their address is in use) are
	// skipped with a warning instead of failing Start: rdisk target's
	// default NVMe/TCP discovery port. Not part of nvmetcli's JSON.
	Optional bool `json:"-"`
	// Disabled ports are kept in the configuration but do not listen
	// (rdisk admin port disable; an rdisk extension).
	Disabled bool `json:"rdisk_disabled,omitempty"`
	// RDMA is the RDMA provider serving the port (an rdisk extension):
	// auto, iwarp or verbs, as rdisk's --rdma flag; empty, the target's.
	RDMA string `json:"rdisk_rdma,omitempty"`
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

// ANAGroup is an nvmetcli ANA group of a port: ANA["state"] is one of
// optimized, non-optimized, inaccessible, persistent-loss or change.
type ANAGroup struct {
	GrpID int               `json:"grpid"`
	ANA   map[string]string `json:"ana,omitempty"`
}

// MaxANAGroups is the highest ANA group ID (nvmet's NVMET_MAX_ANAGRPS).
const MaxANAGroups = 128

// anaStates returns a port's ANA group states in nvmet's form.
func (p *Port) anaStates() (map[uint32]nvmeof.ANAState, error) {
	if len(p.ANAGroups) == 0 {
		return nil, nil
	}
	out := map[uint32]nvmeof.ANAState{}
	for _, g := range p.ANAGroups {
		if g.GrpID < 1 || g.GrpID > MaxANAGroups {
			return nil, fmt.Errorf("ANA group %d: want 1 to %d", g.GrpID, MaxANAGroups)
		}
		if _, dup := out[uint32(g.GrpID)]; dup {
			return nil, fmt.Errorf("ANA group %d is listed twice", g.GrpID)
		}
		for k := range g.ANA {
			if k != "state" {
				return nil, fmt.Errorf("ANA group %d: unknown attribute %q (want state)", g.GrpID, k)
			}
		}
		st := nvmeof.ANAOptimized
		if v, ok := g.ANA["state"]; ok {
			var err error
			if st, err = nvmeof.ParseANAState(v); err != nil {
				return nil, fmt.Errorf("ANA group %d: %w", g.GrpID, err)
			}
		}
		out[uint32(g.GrpID)] = st
	}
	return out, nil
}

// anaGroupID returns a namespace's ANA group: nvmetcli's "ana": {"grpid"}
// (its save format) or "ana_grpid"; 0 (group 1) when neither is set.
func (ns *Namespace) anaGroupID() (uint32, error) {
	id := ns.ANAGrpID
	for k, v := range ns.ANA {
		if k != "grpid" {
			return 0, fmt.Errorf("ana: unknown attribute %q (want grpid)", k)
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("ana.grpid %q is not a number", v)
		}
		if id != 0 && n != id {
			return 0, fmt.Errorf("ana.grpid %d and ana_grpid %d differ", n, id)
		}
		id = n
	}
	if id < 0 || id > MaxANAGroups {
		return 0, fmt.Errorf("ANA group %d: want 1 to %d", id, MaxANAGroups)
	}
	return uint32(id), nil
}

// setANAGroupID sets a namespace's ANA group in the form it was given
// (nvmetcli's "ana" group unless only ana_grpid was used).
func (ns *Namespace) setANAGroupID(id uint32) {
	if ns.ANAGrpID != 0 && len(ns.ANA) == 0 {
		ns.ANAGrpID = int(id)
		return
	}
	ns.ANAGrpID = 0
	ns.ANA = map[string]string{"grpid": strconv.Itoa(int(id))}
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
	// ANA {"grpid"} (nvmetcli's save format) or ANAGrpID names the
	// namespace's ANA group (default 1). Resv is nvmetcli's (accepted,
	// not used: rdisk has no NVMe reservations yet).
	ANAGrpID  int               `json:"ana_grpid,omitempty"`
	ANA       map[string]string `json:"ana,omitempty"`
	Resv      map[string]string `json:"resv,omitempty"`
	BlockSize int               `json:"rdisk_block_size,omitempty"`
	// ReadOnly exports the device write-protected (an rdisk extension).
	ReadOnly bool `json:"rdisk_read_only,omitempty"`
	// Shared says that other gateways serve the same disk (one Ceph RBD
	// image exported by several rdisk targets, multipath): reservations
	// would not be shared between them, so the SCSI LU refuses them (as
	// LIO without PR emulation), and an RBD image is opened for sharing
	// (an rdisk extension).
	Shared bool `json:"rdisk_shared,omitempty"`
	// PhysicalBlockSize is the physical block size SCSI initiators are
	// told (READ CAPACITY(16), Block Limits), a power-of-two multiple of
	// the logical block size; 0: the logical one (an rdisk extension).
	PhysicalBlockSize int `json:"rdisk_physical_block_size,omitempty"`
	// Direct opens a file device with O_DIRECT, past the page cache
	// (nvmet's buffered_io 0); Buffered opens a block device through the
	// page cache; NoURing runs a file's or block device's I/O on worker
	// threads instead of io_uring (where seccomp forbids io_uring, the
	// disk falls back to them on its own). rdisk extensions.
	Direct   bool `json:"rdisk_direct,omitempty"`
	Buffered bool `json:"rdisk_buffered,omitempty"`
	NoURing  bool `json:"rdisk_no_uring,omitempty"`
}

// deviceOptions are the options ns's device is opened with.
func (ns *Namespace) deviceOptions() DeviceOptions {
	return DeviceOptions{BlockSize: ns.BlockSize, ReadOnly: ns.ReadOnly, Direct: ns.Direct, Buffered: ns.Buffered, NoURing: ns.NoURing}
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
			if pb := ns.PhysicalBlockSize; pb != 0 && (pb < 512 || pb > 1<<24 || pb&(pb-1) != 0) {
				return pos.errAt(np+".rdisk_physical_block_size", "namespace %d: physical block size %d: want a power of two from 512", ns.NSID, pb)
			}
			if _, err := ns.anaGroupID(); err != nil {
				return pos.errAt(np+".ana", "namespace %d: %v", ns.NSID, err)
			}
			if err := checkDevicePath(ns.Device.Path); err != nil {
				return pos.errAt(np+".device.path", "namespace %d: %v", ns.NSID, err)
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
		if _, err := pc.anaStates(); err != nil {
			return pos.errAt(p+".ana_groups", "port %d: %v", pc.PortID, err)
		}
		if err := checkRDMAChoice(pc.RDMA); err != nil {
			return pos.errAt(p+".rdisk_rdma", "port %d: %v", pc.PortID, err)
		}
		if pc.RDMA != "" && pc.Addr.TrType == "tcp" {
			return pos.errAt(p+".rdisk_rdma", "port %d serves NVMe/TCP only: an RDMA provider (%q) has nothing to serve", pc.PortID, pc.RDMA)
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
	if err := c.validateGateway(pos); err != nil {
		return err
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

// checkDevicePath checks what can be checked of a device path before
// anything is opened: an RBD image's URI ("rbd:POOL/IMAGE?...").
func checkDevicePath(path string) error {
	if strings.HasPrefix(path, "rbd:") {
		c, err := rbd.ParseURI(path)
		if err == nil {
			err = c.Validate()
		}
		return err
	}
	return nil
}

// OpenDevice opens a namespace's backing store: "ram:SIZE", "null:SIZE",
// a Ceph RBD image "rbd:POOL/IMAGE" (or POOL/NAMESPACE/IMAGE, with
// ?conf=&id=&keyring=&mon_host=; in a build with Ceph), a block device,
// or a regular file, as o says. Options that do not apply to the kind of
// device (Direct on a block device, Buffered on a file, either or NoURing
// on a RAM disk or an RBD image) are refused, naming the option.
func OpenDevice(path string, o DeviceOptions) (backstore.Disk, error) {
	return openDevice(path, o, nil)
}

// openDevice is OpenDevice with the logger of disks that log (RBD).
func openDevice(path string, o DeviceOptions, log *slog.Logger) (backstore.Disk, error) {
	blockSize, readOnly := o.BlockSize, o.ReadOnly
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	refuse := func(what string, opts ...string) error {
		set := map[string]bool{"rdisk_direct": o.Direct, "rdisk_buffered": o.Buffered, "rdisk_no_uring": o.NoURing}
		for _, k := range opts {
			if set[k] {
				return fmt.Errorf("%s: %s does not apply to %s", path, k, what)
			}
		}
		return nil
	}
	if strings.HasPrefix(path, "rbd:") {
		if err := refuse("a Ceph RBD image", "rdisk_direct", "rdisk_buffered", "rdisk_no_uring"); err != nil {
			return nil, err
		}
		c, err := rbd.ParseURI(path)
		if err != nil {
			return nil, err
		}
		if blockSize != 0 {
			c.BlockSize = blockSize
		}
		c.ReadOnly = c.ReadOnly || readOnly
		img, err := rbd.Open(c, log)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return img, nil
	}
	if kind, size, ok := strings.Cut(path, ":"); ok && (kind == "ram" || kind == "null") {
		if err := refuse("a "+kind+" disk", "rdisk_direct", "rdisk_buffered", "rdisk_no_uring"); err != nil {
			return nil, err
		}
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
		if err := refuse("a block device (opened with O_DIRECT unless rdisk_buffered)", "rdisk_direct"); err != nil {
			return nil, err
		}
		return backstore.OpenBlock(path, backstore.BlockOptions{BlockSize: blockSize, ReadOnly: readOnly, Buffered: o.Buffered, NoURing: o.NoURing, Log: log})
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is neither a block device nor a regular file", path)
	}
	if err := refuse("a regular file (opened through the page cache unless rdisk_direct)", "rdisk_buffered"); err != nil {
		return nil, err
	}
	return backstore.OpenFile(path, backstore.FileOptions{BlockSize: blockSize, ReadOnly: readOnly, Direct: o.Direct, NoURing: o.NoURing, Log: log})
}
