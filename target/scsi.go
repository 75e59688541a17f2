package target

import (
	"cmp"
	"fmt"
	"net"
	"slices"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/iser"
	iscsitarget "github.com/rdisk/rdisk/iser/target"
	"github.com/rdisk/rdisk/scsi"
	"github.com/rdisk/rdisk/srp"
	srptarget "github.com/rdisk/rdisk/srp/target"
)

// The SCSI transports of a configuration (rdisk extensions beside
// nvmetcli's keys): iSCSI targets on portals (iSCSI/TCP and iSER on one
// port) and SRP target ports, whose LUNs name namespaces of the NVMe-oF
// subsystems. A disk exported both ways is one scsi.LU, shared by every
// SCSI transport (reservations, COMPARE AND WRITE's range lock, mode pages
// and unit attentions are the LU's), as LIO shares one se_device.

// ISCSIConfig is the "rdisk_iscsi" section.
type ISCSIConfig struct {
	// Portals are the addresses to listen on (host:port).
	Portals []string      `json:"portals"`
	Targets []ISCSITarget `json:"targets"`
	// TPGT is the target portal group tag of the portals (default 1).
	TPGT uint16 `json:"tpgt,omitempty"`
	// DiscoveryCHAP, if set, is the CHAP identity SendTargets discovery
	// sessions must log in with (targetcli's discovery_auth);
	// DiscoveryMutualCHAP the one the target answers a mutual challenge
	// with.
	DiscoveryCHAP       *CHAP `json:"discovery_chap,omitempty"`
	DiscoveryMutualCHAP *CHAP `json:"discovery_mutual_chap,omitempty"`
	// NopInTimeout, NopInResponseTimeout and DataOutTimeout are LIO's
	// settings of those names, in seconds (0: the defaults, LIO's 15 and
	// 30 s and 10 s; negative: off): an idle connection is pinged with
	// NOP-In after nopin_timeout and dropped when the ping is not answered
	// within nopin_response_timeout; a write whose next Data-Out does not
	// come within dataout_timeout drops its connection (iSCSI/TCP).
	NopInTimeout         int `json:"nopin_timeout,omitempty"`
	NopInResponseTimeout int `json:"nopin_response_timeout,omitempty"`
	DataOutTimeout       int `json:"dataout_timeout,omitempty"`
	// PortGroups are the ALUA target port groups that REPORT TARGET PORT
	// GROUPS lists, with their states (implicit ALUA). This gateway's
	// portals are relative target port TPGT; a group without ports holds
	// it. Empty: one group, active/optimized.
	PortGroups []PortGroup `json:"port_groups,omitempty"`
	// RDMA is the RDMA provider serving iSER on the portals: auto, iwarp
	// or verbs, as rdisk's --rdma flag; empty, the target's. With iwarp
	// iSER shares the TCP portal; with verbs it listens beside it on the
	// device's RDMA/CM.
	RDMA string `json:"rdisk_rdma,omitempty"`
}

// PortGroup is an ALUA target port group.
type PortGroup struct {
	ID uint16 `json:"id"`
	// State is active-optimized, active-non-optimized, standby,
	// unavailable, offline or transitioning (or NVMe ANA's names:
	// optimized, non-optimized, inaccessible, persistent-loss, change).
	State string `json:"state"`
	// Ports are the relative target port identifiers in the group (other
	// gateways' ports too); empty means this gateway's own.
	Ports []uint16 `json:"ports,omitempty"`
}

// ISCSITarget is one iSCSI target node.
type ISCSITarget struct {
	IQN  string   `json:"iqn"`
	LUNs []LUNRef `json:"luns"`
	// AllowedInitiators are initiator names allowed to log in; empty
	// allows any (refused on a non-loopback portal without CHAP).
	AllowedInitiators []string `json:"allowed_initiators,omitempty"`
	// AllowAnyInitiator lets any initiator in on a non-loopback portal
	// without an ACL or CHAP (rdisk target --allow-any-host).
	AllowAnyInitiator bool  `json:"allow_any_initiator,omitempty"`
	CHAP              *CHAP `json:"chap,omitempty"`
	MutualCHAP        *CHAP `json:"mutual_chap,omitempty"`
	// ACLs are LIO's node ACLs: an initiator named here may log in (as
	// with AllowedInitiators) and, with MappedLUNs, sees only those, under
	// their mapped numbers.
	ACLs []ISCSIACL `json:"acls,omitempty"`
}

// ISCSIACL is one initiator's entry (targetcli's
// /iscsi/IQN/tpg1/acls/INITIATOR).
type ISCSIACL struct {
	Initiator  string      `json:"initiator"`
	MappedLUNs []MappedLUN `json:"mapped_luns,omitempty"`
}

// MappedLUN shows the target's LUN as MappedLUN to the ACL's initiator,
// write-protected with WriteProtect (LIO's mapped_lunN).
type MappedLUN struct {
	MappedLUN    uint64 `json:"mapped_lun"`
	LUN          uint64 `json:"lun"`
	WriteProtect bool   `json:"write_protect,omitempty"`
}

// iscsiACLs is the iser/target form of the ACLs.
func iscsiACLs(acls []ISCSIACL) []iscsitarget.ACL {
	var out []iscsitarget.ACL
	for _, a := range acls {
		e := iscsitarget.ACL{Initiator: a.Initiator}
		for _, m := range a.MappedLUNs {
			e.MappedLUNs = append(e.MappedLUNs, iscsitarget.MappedLUN{MappedLUN: m.MappedLUN, LUN: m.LUN, ReadOnly: m.WriteProtect})
		}
		out = append(out, e)
	}
	return out
}

// CHAP is a CHAP identity. Secret may be "@FILE".
type CHAP struct {
	User   string `json:"user"`
	Secret string `json:"secret"`
}

// LUNRef exports namespace NSID of subsystem Subsystem as LUN.
type LUNRef struct {
	LUN       uint64 `json:"lun"`
	Subsystem string `json:"subsystem"`
	NSID      uint32 `json:"nsid"`
}

// SRPConfig is the "rdisk_srp" section.
type SRPConfig struct {
	// Listen are the RDMA/CM addresses (host:port).
	Listen []string  `json:"listen"`
	Ports  []SRPPort `json:"ports"`
	// PortGroups are the ALUA target port groups of the SRP ports (see
	// ISCSIConfig.PortGroups); a group without ports holds every port of
	// this gateway.
	PortGroups []PortGroup `json:"port_groups,omitempty"`
	// RDMA is the RDMA provider the SRP listeners use: auto, iwarp or
	// verbs, as rdisk's --rdma flag; empty, the target's.
	RDMA string `json:"rdisk_rdma,omitempty"`
}

// SRPPort is one SRP target port.
type SRPPort struct {
	IDExt   string   `json:"id_ext"`
	IOCGUID string   `json:"ioc_guid"`
	LUNs    []LUNRef `json:"luns"`
	// AllowedInitiators is the ACL (port IDs, GUIDs or addresses).
	AllowedInitiators []string `json:"allowed_initiators,omitempty"`
	AllowAnyInitiator bool     `json:"allow_any_initiator,omitempty"`
	// RelativeTargetPort identifies the port in ALUA port groups and VPD
	// page 83h (default 1); gateways serving one disk give theirs
	// distinct ones.
	RelativeTargetPort uint16 `json:"relative_target_port,omitempty"`
}

// portGroups returns the scsi form of port groups; own are this
// gateway's relative target ports, which a group without ports holds.
func portGroups(pgs []PortGroup, own []uint16) ([]scsi.PortGroupConfig, error) {
	var out []scsi.PortGroupConfig
	ids := map[uint16]bool{}
	ports := map[uint16]uint16{}
	for _, g := range pgs {
		if g.ID == 0 {
			return nil, fmt.Errorf("port group 0: want 1 to 65535")
		}
		if ids[g.ID] {
			return nil, fmt.Errorf("port group %d is listed twice", g.ID)
		}
		ids[g.ID] = true
		st, err := scsi.ParseALUAState(g.State)
		if err != nil {
			return nil, fmt.Errorf("port group %d: %w", g.ID, err)
		}
		members := g.Ports
		if len(members) == 0 {
			members = own
		}
		for _, p := range members {
			if p == 0 {
				return nil, fmt.Errorf("port group %d: relative target port 0: want 1 to 65535", g.ID)
			}
			if o, dup := ports[p]; dup {
				return nil, fmt.Errorf("port group %d: relative target port %d is in group %d too", g.ID, p, o)
			}
			ports[p] = g.ID
		}
		out = append(out, scsi.PortGroupConfig{ID: g.ID, State: st, Ports: slices.Clone(members)})
	}
	if len(out) > 0 {
		for _, p := range own {
			if _, ok := ports[p]; !ok {
				return nil, fmt.Errorf("this gateway's relative target port %d is in no port group", p)
			}
		}
	}
	return out, nil
}

// ownPorts is the relative target port of the iSCSI portals: the TPGT.
func (ic *ISCSIConfig) ownPorts() []uint16 { return []uint16{cmp.Or(ic.TPGT, 1)} }

// ownPorts are the SRP ports' relative target ports.
func (sc *SRPConfig) ownPorts() []uint16 {
	var out []uint16
	for _, p := range sc.Ports {
		if rp := cmp.Or(p.RelativeTargetPort, 1); !slices.Contains(out, rp) {
			out = append(out, rp)
		}
	}
	return out
}

// LUOptions are the settings of a namespace's SCSI logical unit.
type LUOptions struct {
	// Shared: other gateways serve the same disk, so reservations (which
	// would not be shared between them) are refused.
	Shared bool
	// PhysicalBlockSize, if larger than the logical block size (a power of
	// two multiple of it), is reported in READ CAPACITY(16) and the Block
	// Limits page (512-byte blocks on a 4 KiB-sector store).
	PhysicalBlockSize int
}

// NewSCSILU makes the logical unit of a disk that every SCSI transport
// exports, with limits that suit the iSCSI and SRP targets' defaults.
// name feeds the LU's serial number and NAA identifier.
func NewSCSILU(disk backstore.Disk, name string, o LUOptions) (*scsi.LU, error) {
	maxXfer := min(iscsitarget.DefaultMaxTransfer, srptarget.DefaultMaxTransfer)
	cfg := scsi.LUConfig{Name: name, MaxTransferBlocks: uint32(maxXfer / disk.BlockSize()),
		// As LIO: libiscsi and Linux split long WRITE SAMEs.
		MaxWriteSameBlocks: 0xffff, NoReservations: o.Shared}
	if pb, lb := o.PhysicalBlockSize, disk.BlockSize(); pb > lb {
		n := pb / lb
		if pb%lb != 0 || n&(n-1) != 0 || n > 1<<15 {
			return nil, fmt.Errorf("SCSI logical unit %s: physical block size %d is not a power-of-two multiple of the logical block size %d", name, pb, lb)
		}
		for n > 1 {
			cfg.PhysicalBlockExp++
			n >>= 1
		}
	}
	lu, err := scsi.NewLU(disk, cfg)
	if err != nil {
		return nil, fmt.Errorf("SCSI logical unit %s: %w", name, err)
	}
	return lu, nil
}

// validateSCSI checks the SCSI sections against the subsystems.
func (c *Config) validateSCSI(pos *positions, subs map[string]*Subsystem) error {
	ref := func(p string, r LUNRef) error {
		s := subs[r.Subsystem]
		if s == nil {
			return pos.errAt(p+".subsystem", "subsystem %s is not defined", r.Subsystem)
		}
		for _, ns := range s.Namespaces {
			if ns.NSID == r.NSID {
				return nil
			}
		}
		return pos.errAt(p+".nsid", "subsystem %s has no namespace %d", r.Subsystem, r.NSID)
	}
	luns := func(p string, refs []LUNRef) error {
		seen := map[uint64]bool{}
		for j, r := range refs {
			lp := fmt.Sprintf("%s.luns[%d]", p, j)
			switch {
			case r.LUN > scsi.MaxLUN:
				return pos.errAt(lp+".lun", "LUN %d: at most %d", r.LUN, scsi.MaxLUN)
			case seen[r.LUN]:
				return pos.errAt(lp+".lun", "LUN %d is used twice", r.LUN)
			}
			seen[r.LUN] = true
			if err := ref(lp, r); err != nil {
				return err
			}
		}
		return nil
	}
	if ic := c.ISCSI; ic != nil {
		if len(ic.Portals) == 0 {
			return pos.errAt("rdisk_iscsi.portals", "no portal to listen on")
		}
		for _, d := range []struct {
			key string
			ch  *CHAP
		}{{"discovery_chap", ic.DiscoveryCHAP}, {"discovery_mutual_chap", ic.DiscoveryMutualCHAP}} {
			if d.ch != nil && (d.ch.User == "" || d.ch.Secret == "") {
				return pos.errAt("rdisk_iscsi."+d.key, "a CHAP identity needs a user and a secret")
			}
		}
		if _, err := portGroups(ic.PortGroups, ic.ownPorts()); err != nil {
			return pos.errAt("rdisk_iscsi.port_groups", "%v", err)
		}
		if ic.DiscoveryMutualCHAP != nil && ic.DiscoveryCHAP == nil {
			return pos.errAt("rdisk_iscsi.discovery_mutual_chap", "discovery_mutual_chap needs discovery_chap")
		}
		if err := checkRDMAChoice(ic.RDMA); err != nil {
			return pos.errAt("rdisk_iscsi.rdisk_rdma", "%v", err)
		}
		open := false
		for i, a := range ic.Portals {
			h, _, err := net.SplitHostPort(a)
			if err != nil {
				return pos.errAt(fmt.Sprintf("rdisk_iscsi.portals[%d]", i), "%q: want host:port", a)
			}
			open = open || !IsLoopback(h)
		}
		names := map[string]bool{}
		for i, t := range ic.Targets {
			p := fmt.Sprintf("rdisk_iscsi.targets[%d]", i)
			switch {
			case t.IQN == "":
				return pos.errAt(p, "a target needs an iqn")
			case names[t.IQN]:
				return pos.errAt(p+".iqn", "target %s is defined twice", t.IQN)
			case open && len(t.AllowedInitiators) == 0 && len(t.ACLs) == 0 && t.CHAP == nil && !t.AllowAnyInitiator:
				return pos.errAt(p, "target %s on a non-loopback portal lets any initiator in: list allowed_initiators or acls, set chap, or set allow_any_initiator", t.IQN)
			case t.MutualCHAP != nil && t.CHAP == nil:
				return pos.errAt(p+".mutual_chap", "mutual_chap needs chap")
			}
			names[t.IQN] = true
			for _, ch := range []*CHAP{t.CHAP, t.MutualCHAP} {
				if ch != nil && (ch.User == "" || ch.Secret == "") {
					return pos.errAt(p, "a CHAP identity needs a user and a secret")
				}
			}
			if err := luns(p, t.LUNs); err != nil {
				return err
			}
			inits := map[string]bool{}
			for j, a := range t.ACLs {
				ap := fmt.Sprintf("%s.acls[%d]", p, j)
				switch {
				case a.Initiator == "":
					return pos.errAt(ap+".initiator", "an ACL needs an initiator name")
				case inits[a.Initiator]:
					return pos.errAt(ap+".initiator", "initiator %s has two ACLs", a.Initiator)
				}
				inits[a.Initiator] = true
				mapped := map[uint64]bool{}
				for k, m := range a.MappedLUNs {
					mp := fmt.Sprintf("%s.mapped_luns[%d]", ap, k)
					switch {
					case m.MappedLUN > scsi.MaxLUN:
						return pos.errAt(mp+".mapped_lun", "mapped LUN %d: at most %d", m.MappedLUN, scsi.MaxLUN)
					case mapped[m.MappedLUN]:
						return pos.errAt(mp+".mapped_lun", "mapped LUN %d is used twice", m.MappedLUN)
					case findLUN(t.LUNs, m.LUN) == nil:
						return pos.errAt(mp+".lun", "target %s has no LUN %d", t.IQN, m.LUN)
					}
					mapped[m.MappedLUN] = true
				}
			}
		}
	}
	if sc := c.SRP; sc != nil {
		if len(sc.Listen) == 0 {
			return pos.errAt("rdisk_srp.listen", "no address to listen on")
		}
		if err := checkRDMAChoice(sc.RDMA); err != nil {
			return pos.errAt("rdisk_srp.rdisk_rdma", "%v", err)
		}
		open := false
		for i, a := range sc.Listen {
			h, _, err := net.SplitHostPort(a)
			if err != nil {
				return pos.errAt(fmt.Sprintf("rdisk_srp.listen[%d]", i), "%q: want host:port", a)
			}
			open = open || !IsLoopback(h)
		}
		if _, err := portGroups(sc.PortGroups, sc.ownPorts()); err != nil {
			return pos.errAt("rdisk_srp.port_groups", "%v", err)
		}
		ids := map[srp.PortID]bool{}
		for i, pt := range sc.Ports {
			p := fmt.Sprintf("rdisk_srp.ports[%d]", i)
			ext, err := srp.ParseGUID(pt.IDExt)
			if err != nil {
				return pos.errAt(p+".id_ext", "%v", err)
			}
			ioc, err := srp.ParseGUID(pt.IOCGUID)
			if err != nil {
				return pos.errAt(p+".ioc_guid", "%v", err)
			}
			id := srp.MakePortID(ext, ioc)
			if ids[id] {
				return pos.errAt(p, "target port %s is defined twice", id)
			}
			ids[id] = true
			if open && len(pt.AllowedInitiators) == 0 && !pt.AllowAnyInitiator {
				return pos.errAt(p, "target port %s on a non-loopback address lets no initiator in: list allowed_initiators or set allow_any_initiator", id)
			}
			if err := luns(p, pt.LUNs); err != nil {
				return err
			}
		}
	}
	return nil
}

// chapOf reads a CHAP identity (the secret may be "@FILE").
func chapOf(c *CHAP) (*iser.CHAPSecret, error) {
	if c == nil {
		return nil, nil
	}
	s, err := readSecret(c.Secret)
	if err != nil {
		return nil, err
	}
	return &iser.CHAPSecret{User: c.User, Secret: s}, nil
}
