package target

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/internal/units"
	"github.com/rdisk/rdisk/iser"
	iscsitarget "github.com/rdisk/rdisk/iser/target"
	"github.com/rdisk/rdisk/nvmeof"
	nvmet "github.com/rdisk/rdisk/nvmeof/target"
	"github.com/rdisk/rdisk/scsi"
	srptarget "github.com/rdisk/rdisk/srp/target"
)

// Changes are what applying a configuration did, a line each.
type Changes struct {
	Applied []string `json:"applied"`
	// Skipped are differences that only a restart applies (the listening
	// addresses of the SCSI transports): they were left as they were.
	Skipped []string `json:"skipped,omitempty"`
}

func (ch *Changes) did(format string, args ...any) {
	ch.Applied = append(ch.Applied, fmt.Sprintf(format, args...))
}

// clone deep-copies c.
func (c *Config) clone() *Config {
	b, err := json.Marshal(c)
	if err != nil {
		panic(fmt.Sprintf("target: marshalling the model: %v", err)) // plain data: cannot fail
	}
	var out Config
	if err := json.Unmarshal(b, &out); err != nil {
		panic(fmt.Sprintf("target: unmarshalling the model: %v", err))
	}
	for i := range out.Ports {
		out.Ports[i].Optional = c.Ports[i].Optional
	}
	return &out
}

// same tells whether a and b have the same JSON form (maps compare by
// content, nil and empty alike where the field is omitempty).
func same(a, b any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

func findSub(c *Config, nqn string) *Subsystem {
	for i := range c.Subsystems {
		if c.Subsystems[i].NQN == nqn {
			return &c.Subsystems[i]
		}
	}
	return nil
}

func findNS(s *Subsystem, nsid uint32) *Namespace {
	if s == nil {
		return nil
	}
	for i := range s.Namespaces {
		if s.Namespaces[i].NSID == nsid {
			return &s.Namespaces[i]
		}
	}
	return nil
}

func findPort(c *Config, id uint16) *Port {
	for i := range c.Ports {
		if c.Ports[i].PortID == id {
			return &c.Ports[i]
		}
	}
	return nil
}

func findLUN(refs []LUNRef, lun uint64) *LUNRef {
	for i := range refs {
		if refs[i].LUN == lun {
			return &refs[i]
		}
	}
	return nil
}

func (c *Config) iscsiTarget(iqn string) *ISCSITarget {
	if c.ISCSI == nil {
		return nil
	}
	for i := range c.ISCSI.Targets {
		if c.ISCSI.Targets[i].IQN == iqn {
			return &c.ISCSI.Targets[i]
		}
	}
	return nil
}

func (c *Config) srpPort(key string) *SRPPort {
	if c.SRP == nil {
		return nil
	}
	for i := range c.SRP.Ports {
		if srpKey(c.SRP.Ports[i]) == key {
			return &c.SRP.Ports[i]
		}
	}
	return nil
}

// srpKey names an SRP port of the model: its port ID.
func srpKey(pt SRPPort) string {
	id, err := srpPortID(pt)
	if err != nil {
		return pt.IDExt + "/" + pt.IOCGUID
	}
	return id.String()
}

// subReplaced tells whether a subsystem changed in a way only a new
// subsystem applies: its identity (serial, model, controller ID range).
func subReplaced(o, n *Subsystem) bool {
	for _, k := range []string{"serial", "model", "cntlid_min", "cntlid_max"} {
		if o.Attr[k] != n.Attr[k] {
			return true
		}
	}
	return false
}

// nsGrowth returns the new size when n differs from o only by a larger
// RAM or null disk size ("ram:1GiB" to "ram:2GiB"): a resize, which keeps
// the data.
func nsGrowth(o, n *Namespace) (int64, bool) {
	ok1, os, ko := memDevice(o.Device.Path)
	ok2, ns, kn := memDevice(n.Device.Path)
	if !ok1 || !ok2 || ko != kn || ns <= os {
		return 0, false
	}
	a, b := *o, *n
	a.Device.Path, b.Device.Path, a.Enable, b.Enable = "", "", 0, 0
	a.ANA, b.ANA, a.ANAGrpID, b.ANAGrpID = nil, nil, 0, 0
	return ns, same(a, b)
}

// nsReplaced tells whether namespace n needs a new disk in place of o's.
func nsReplaced(o, n *Namespace) bool {
	if _, grow := nsGrowth(o, n); grow {
		return false
	}
	a, b := *o, *n
	a.Enable, b.Enable = 0, 0
	a.ANA, b.ANA, a.ANAGrpID, b.ANAGrpID = nil, nil, 0, 0 // changed live
	return !same(a, b)
}

// anaGroupChanged tells whether a kept namespace moved to another ANA
// group.
func anaGroupChanged(o, n *Namespace) (uint32, bool) {
	og, _ := o.anaGroupID()
	ng, _ := n.anaGroupID()
	return max(ng, 1), max(og, 1) != max(ng, 1)
}

// portReplaced tells whether a port changed in more than its subsystem
// links and ANA group states: it has to listen anew.
func portReplaced(o, n *Port) bool {
	a, b := *o, *n
	a.Subsystems, b.Subsystems = nil, nil
	a.ANAGroups, b.ANAGroups = nil, nil
	return !same(a, b)
}

// applyANA sets a kept port's ANA group states from o's (of model old)
// to n's (of model nc): the live states, those of the groups holding a
// failing namespace held inaccessible (health.go).
func (r *Running) applyANA(port *nvmet.Port, old, nc *Config, o, n *Port, ch *Changes) error {
	os, _ := r.anaWant(old, o)
	ns, err := r.anaWant(nc, n)
	if err != nil {
		return err
	}
	rawOld, _ := o.anaStates()
	rawNew, _ := n.anaStates()
	held := r.failingGroups(nc)
	var errs []error
	for _, g := range slices.Sorted(maps.Keys(ns)) {
		if st, ok := os[g]; ok && st == ns[g] {
			if st, ok := rawNew[g]; ok && held[g] && rawOld[g] != st {
				ch.did("port %d ANA group %d: %s, held inaccessible while its storage fails", n.PortID, g, st)
			}
			continue
		}
		if err := port.SetANAState(g, ns[g]); err != nil {
			errs = append(errs, fmt.Errorf("port %d ANA group %d: %w", n.PortID, g, err))
			continue
		}
		ch.did("port %d ANA group %d: %s", n.PortID, g, ns[g])
	}
	for _, g := range slices.Sorted(maps.Keys(os)) {
		if _, ok := ns[g]; ok {
			continue
		}
		if g == 1 {
			// Group 1 is never removed (nvmet's default group): unlisted,
			// it is optimized.
			if os[g] != nvmeof.ANAOptimized {
				if err := port.SetANAState(1, nvmeof.ANAOptimized); err != nil {
					errs = append(errs, fmt.Errorf("port %d ANA group 1: %w", n.PortID, err))
				} else {
					ch.did("port %d ANA group 1: %s", n.PortID, nvmeof.ANAOptimized)
				}
			}
			continue
		}
		if err := port.RemoveANAGroup(g); err != nil {
			errs = append(errs, fmt.Errorf("port %d ANA group %d: %w", n.PortID, g, err))
			continue
		}
		ch.did("port %d ANA group %d: removed", n.PortID, g)
	}
	return errors.Join(errs...)
}

// keepRestartOnly leaves the differences that need a restart as they are
// in old, noting them.
func keepRestartOnly(old, nc *Config, ch *Changes) {
	switch {
	case old.ISCSI == nil && nc.ISCSI != nil:
		ch.Skipped = append(ch.Skipped, "rdisk_iscsi added: the iSCSI portals start with a restart")
		nc.ISCSI = nil
	case old.ISCSI != nil && nc.ISCSI == nil:
		ch.Skipped = append(ch.Skipped, "rdisk_iscsi removed: the iSCSI portals stop with a restart (its targets are kept)")
		nc.ISCSI = old.clone().ISCSI
	case old.ISCSI != nil:
		o, n := old.ISCSI, nc.ISCSI
		if !same(o.Portals, n.Portals) || o.TPGT != n.TPGT || !same(o.DiscoveryCHAP, n.DiscoveryCHAP) || !same(o.DiscoveryMutualCHAP, n.DiscoveryMutualCHAP) ||
			o.NopInTimeout != n.NopInTimeout || o.NopInResponseTimeout != n.NopInResponseTimeout || o.DataOutTimeout != n.DataOutTimeout || o.RDMA != n.RDMA {
			ch.Skipped = append(ch.Skipped, "rdisk_iscsi portals, tpgt, discovery CHAP, rdisk_rdma and timeouts change with a restart")
			n.Portals, n.TPGT, n.DiscoveryCHAP, n.DiscoveryMutualCHAP = slices.Clone(o.Portals), o.TPGT, o.DiscoveryCHAP, o.DiscoveryMutualCHAP
			n.NopInTimeout, n.NopInResponseTimeout, n.DataOutTimeout, n.RDMA = o.NopInTimeout, o.NopInResponseTimeout, o.DataOutTimeout, o.RDMA
		}
	}
	switch {
	case old.SRP == nil && nc.SRP != nil:
		ch.Skipped = append(ch.Skipped, "rdisk_srp added: SRP starts listening with a restart")
		nc.SRP = nil
	case old.SRP != nil && nc.SRP == nil:
		ch.Skipped = append(ch.Skipped, "rdisk_srp removed: SRP stops listening with a restart (its ports are kept)")
		nc.SRP = old.clone().SRP
	case old.SRP != nil && (!same(old.SRP.Listen, nc.SRP.Listen) || old.SRP.RDMA != nc.SRP.RDMA):
		ch.Skipped = append(ch.Skipped, "rdisk_srp rdisk_rdma and listen addresses change with a restart")
		nc.SRP.Listen, nc.SRP.RDMA = slices.Clone(old.SRP.Listen), old.SRP.RDMA
	}
	if !same(old.Gateway, nc.Gateway) {
		ch.Skipped = append(ch.Skipped, "rdisk_gateway changes with a restart")
		nc.Gateway = old.clone().Gateway
	}
	if old.ISCSI != nil && nc.ISCSI != nil {
		if _, structural := groupStateChanges(old.ISCSI.PortGroups, nc.ISCSI.PortGroups); structural {
			ch.Skipped = append(ch.Skipped, "rdisk_iscsi port groups other than their states (ids, ports) change with a restart")
			nc.ISCSI.PortGroups = slices.Clone(old.ISCSI.PortGroups)
		}
	}
	if old.SRP != nil && nc.SRP != nil {
		if _, structural := groupStateChanges(old.SRP.PortGroups, nc.SRP.PortGroups); structural {
			ch.Skipped = append(ch.Skipped, "rdisk_srp port groups other than their states (ids, ports) change with a restart")
			nc.SRP.PortGroups = slices.Clone(old.SRP.PortGroups)
		}
		for i := range nc.SRP.Ports {
			np := &nc.SRP.Ports[i]
			if op := old.srpPort(srpKey(*np)); op != nil && op.RelativeTargetPort != np.RelativeTargetPort {
				ch.Skipped = append(ch.Skipped, fmt.Sprintf("rdisk_srp port %s: relative_target_port changes with a restart", srpKey(*np)))
				np.RelativeTargetPort = op.RelativeTargetPort
			}
		}
	}
}

// groupStateChanges compares two lists of ALUA port groups: the groups
// whose state alone changed, or structural when ids or ports differ.
func groupStateChanges(o, n []PortGroup) (changed []PortGroup, structural bool) {
	if len(o) != len(n) {
		return nil, true
	}
	for i := range o {
		if o[i].ID != n[i].ID || !same(o[i].Ports, n[i].Ports) {
			return nil, true
		}
		os, _ := scsi.ParseALUAState(o[i].State)
		ns, _ := scsi.ParseALUAState(n[i].State)
		if os != ns {
			changed = append(changed, n[i])
		}
	}
	return changed, false
}

// applyPortGroupStates sets the ALUA states that changed on every iSCSI
// target and SRP port: the model's, with this gateway's own groups held
// unavailable while every LU of the transport is failing (health.go).
func (r *Running) applyPortGroupStates(old, nc *Config, ch *Changes) error {
	report := func(transport string, o, n []PortGroup, down bool) {
		changed, _ := groupStateChanges(o, n)
		for _, g := range changed {
			st, _ := scsi.ParseALUAState(g.State)
			if down {
				ch.did("%s port group %d: %s, held unavailable while its storage fails", transport, g.ID, st)
			} else {
				ch.did("%s port group %d: %s", transport, g.ID, st)
			}
		}
	}
	if old.ISCSI != nil && nc.ISCSI != nil && r.ISCSI != nil {
		report("iscsi", old.ISCSI.PortGroups, nc.ISCSI.PortGroups, r.scsiDown(nc.ISCSI.allLUNs()))
	}
	if old.SRP != nil && nc.SRP != nil && r.SRP != nil {
		report("srp", old.SRP.PortGroups, nc.SRP.PortGroups, r.scsiDown(nc.SRP.allLUNs()))
	}
	return r.reconcileALUALocked(nc)
}

type openedNS struct {
	disk backstore.Disk
	nc   nvmet.NamespaceConfig
}

// applyLocked makes the running target serve in, changing only what
// differs from the model served now: namespaces, subsystems, ports,
// links, hosts and SCSI LUNs that did not change keep serving untouched
// (their hosts stay connected). New disks are opened first: if one fails,
// nothing changes. in must be valid (Parse or validate). r.mu is held.
func (r *Running) applyLocked(in *Config, starting bool) (*Changes, error) {
	nc := in.clone()
	old := r.cfg
	ch := &Changes{}
	if !starting {
		keepRestartOnly(old, nc, ch)
		if err := nc.validate(&positions{}); err != nil {
			return nil, fmt.Errorf("the configuration with the restart-only differences left out: %w", err)
		}
	}
	subGone := func(nqn string) bool {
		o := findSub(old, nqn)
		if o == nil {
			return false
		}
		n := findSub(nc, nqn)
		return n == nil || subReplaced(o, n)
	}
	nsGone := func(nqn string, nsid uint32) bool {
		o := findNS(findSub(old, nqn), nsid)
		if o == nil {
			return false
		}
		if subGone(nqn) {
			return true
		}
		n := findNS(findSub(nc, nqn), nsid)
		return n == nil || nsReplaced(o, n)
	}
	refGone := func(o, n *LUNRef) bool {
		return n == nil || n.Subsystem != o.Subsystem || n.NSID != o.NSID || nsGone(o.Subsystem, o.NSID)
	}

	// Open the disks of new and replaced namespaces.
	opened := map[nsKey]openedNS{}
	for i := range nc.Subsystems {
		s := &nc.Subsystems[i]
		for j := range s.Namespaces {
			ns := &s.Namespaces[j]
			if o := findNS(findSub(old, s.NQN), ns.NSID); o != nil && !nsGone(s.NQN, ns.NSID) {
				continue
			}
			disk, cfg, err := r.openNamespace(s.NQN, ns)
			if err != nil {
				for _, o := range opened {
					o.disk.Close()
				}
				return nil, err
			}
			opened[nsKey{s.NQN, ns.NSID}] = openedNS{disk, cfg}
		}
	}
	var errs []error
	fail := func(err error) { errs = append(errs, err) }

	// Removals: SCSI LUNs first (they hold namespaces' LUs), then NVMe
	// ports and links, then subsystems and namespaces.
	if o := old.ISCSI; o != nil && r.ISCSI != nil {
		for _, ot := range o.Targets {
			nt := nc.iscsiTarget(ot.IQN)
			if nt == nil {
				if err := r.ISCSI.RemoveTarget(ot.IQN); err != nil {
					fail(err)
				}
				ch.did("iscsi target %s: removed", ot.IQN)
				continue
			}
			for _, ol := range ot.LUNs {
				if refGone(&ol, findLUN(nt.LUNs, ol.LUN)) {
					if _, err := r.ISCSI.UnmapLUN(ot.IQN, ol.LUN); err != nil {
						fail(err)
					}
					ch.did("iscsi target %s LUN %d: unmapped", ot.IQN, ol.LUN)
				}
			}
		}
	}
	if o := old.SRP; o != nil && r.SRP != nil {
		for _, op := range o.Ports {
			key := srpKey(op)
			id, _ := srpPortID(op)
			np := nc.srpPort(key)
			if np == nil {
				if err := r.SRP.RemovePort(id); err != nil {
					fail(err)
				}
				ch.did("srp port %s: removed", key)
				continue
			}
			port := r.SRP.Port(id)
			for _, ol := range op.LUNs {
				if refGone(&ol, findLUN(np.LUNs, ol.LUN)) && port != nil {
					if _, err := port.Unmap(ol.LUN); err != nil {
						fail(err)
					}
					ch.did("srp port %s LUN %d: unmapped", key, ol.LUN)
				}
			}
		}
	}
	for _, op := range old.Ports {
		if op.Disabled || r.T.Port(op.PortID) == nil {
			continue
		}
		np := findPort(nc, op.PortID)
		if np == nil || np.Disabled || portReplaced(&op, np) {
			if err := r.T.RemovePort(op.PortID); err != nil {
				fail(err)
			}
			switch {
			case np == nil:
				ch.did("port %d: removed", op.PortID)
			case np.Disabled:
				ch.did("port %d: disabled", op.PortID)
			}
			continue
		}
		port := r.T.Port(op.PortID)
		if err := r.applyANA(port, old, nc, &op, np, ch); err != nil {
			fail(err)
			np.ANAGroups = op.ANAGroups
		}
		for _, nqn := range op.Subsystems {
			if !slices.Contains(np.Subsystems, nqn) && !subGone(nqn) {
				if err := port.UnlinkSubsystem(nqn); err != nil {
					fail(err)
				}
				ch.did("port %d: subsystem %s unlinked", op.PortID, nqn)
			}
		}
	}
	for _, os := range old.Subsystems {
		if subGone(os.NQN) {
			if err := r.T.RemoveSubsystem(os.NQN); err != nil {
				fail(err)
			}
			for _, ns := range os.Namespaces {
				r.dropDisk(nsKey{os.NQN, ns.NSID})
			}
			delete(r.subs, os.NQN)
			if findSub(nc, os.NQN) == nil {
				ch.did("subsystem %s: removed", os.NQN)
			}
			continue
		}
		sub := r.subs[os.NQN]
		for _, ns := range os.Namespaces {
			if nsGone(os.NQN, ns.NSID) {
				if err := sub.RemoveNamespace(ns.NSID); err != nil {
					fail(err)
				}
				r.dropDisk(nsKey{os.NQN, ns.NSID})
				if findNS(findSub(nc, os.NQN), ns.NSID) == nil {
					ch.did("subsystem %s namespace %d: removed", os.NQN, ns.NSID)
				}
			}
		}
	}

	// DH-HMAC-CHAP settings of hosts.
	for _, oh := range old.Hosts {
		if !slices.ContainsFunc(nc.Hosts, func(h Host) bool { return h.NQN == oh.NQN }) {
			if err := r.T.SetHostAuth(oh.NQN, nil); err != nil {
				fail(err)
			}
			ch.did("host %s: removed", oh.NQN)
		}
	}
	for _, nh := range nc.Hosts {
		i := slices.IndexFunc(old.Hosts, func(h Host) bool { return h.NQN == nh.NQN })
		if i >= 0 && same(old.Hosts[i], nh) {
			continue
		}
		a, err := nh.hostAuth()
		if err == nil {
			err = r.T.SetHostAuth(nh.NQN, a)
		}
		if err != nil {
			fail(err)
			continue
		}
		if !starting {
			ch.did("host %s: set", nh.NQN)
		}
	}

	// Additions and changes: subsystems and namespaces, then ports and
	// links, then SCSI LUNs.
	var dropNS []nsKey
	for i := range nc.Subsystems {
		s := &nc.Subsystems[i]
		os := findSub(old, s.NQN)
		sub := r.subs[s.NQN]
		if os == nil || subGone(s.NQN) {
			sc, err := subsystemConfig(s)
			if err == nil {
				sub, err = r.T.AddSubsystem(sc)
			}
			if err != nil {
				fail(err)
				for _, ns := range s.Namespaces {
					if o, ok := opened[nsKey{s.NQN, ns.NSID}]; ok {
						o.disk.Close()
					}
					dropNS = append(dropNS, nsKey{s.NQN, ns.NSID})
				}
				continue
			}
			r.subs[s.NQN] = sub
			if os == nil {
				ch.did("subsystem %s: added", s.NQN)
			} else {
				ch.did("subsystem %s: replaced (serial, model or controller IDs changed)", s.NQN)
			}
		} else {
			if any := s.Attr["allow_any_host"] == "1"; any != (os.Attr["allow_any_host"] == "1") {
				sub.SetAllowAnyHost(any)
				ch.did("subsystem %s: allow_any_host %v", s.NQN, any)
			}
			for _, h := range os.AllowedHosts {
				if !slices.Contains(s.AllowedHosts, h) {
					sub.DisallowHost(h)
					ch.did("subsystem %s: host %s no longer allowed", s.NQN, h)
				}
			}
			for _, h := range s.AllowedHosts {
				if !slices.Contains(os.AllowedHosts, h) {
					sub.AllowHost(h)
					ch.did("subsystem %s: host %s allowed", s.NQN, h)
				}
			}
		}
		for j := range s.Namespaces {
			ns := &s.Namespaces[j]
			key := nsKey{s.NQN, ns.NSID}
			if o, ok := opened[key]; ok {
				if err := sub.AddNamespace(o.nc); err != nil {
					o.disk.Close()
					fail(fmt.Errorf("subsystem %s: %w", s.NQN, err))
					dropNS = append(dropNS, key)
					continue
				}
				r.disks[key] = o.disk
				r.watchSize(key, o.disk)
				if on := findNS(os, ns.NSID); on != nil && !subGone(s.NQN) {
					ch.did("subsystem %s namespace %d: replaced (%s)", s.NQN, ns.NSID, ns.Device.Path)
				} else if !starting || os != nil {
					ch.did("subsystem %s namespace %d: added (%s)", s.NQN, ns.NSID, ns.Device.Path)
				}
				continue
			}
			on := findNS(os, ns.NSID) // kept
			if grp, moved := anaGroupChanged(on, ns); moved {
				if err := sub.SetNamespaceANAGroup(ns.NSID, grp); err != nil {
					fail(fmt.Errorf("subsystem %s namespace %d: %w", s.NQN, ns.NSID, err))
					ns.ANA, ns.ANAGrpID = on.ANA, on.ANAGrpID
				} else {
					ch.did("subsystem %s namespace %d: ANA group %d", s.NQN, ns.NSID, grp)
				}
			}
			if size, grow := nsGrowth(on, ns); grow {
				if err := r.resizeLocked(key, size); err != nil {
					fail(err)
					ns.Device.Path = on.Device.Path
				} else {
					ch.did("subsystem %s namespace %d: resized to %s", s.NQN, ns.NSID, ns.Device.Path)
				}
			}
			if (on.Enable == 0) != (ns.Enable == 0) {
				cfg, err := namespaceConfig(s.NQN, ns)
				if err == nil {
					cfg.Disk = r.disks[key]
					err = sub.AddNamespace(cfg)
				}
				if err != nil {
					fail(err)
					ns.Enable = on.Enable
				} else if ns.Enable == 0 {
					ch.did("subsystem %s namespace %d: disabled", s.NQN, ns.NSID)
				} else {
					ch.did("subsystem %s namespace %d: enabled", s.NQN, ns.NSID)
				}
			}
		}
	}
	for _, k := range dropNS {
		nc.dropNamespace(k)
	}

	var dropPorts []uint16
	for i := range nc.Ports {
		np := &nc.Ports[i]
		if np.Disabled {
			continue
		}
		op := findPort(old, np.PortID)
		port := r.T.Port(np.PortID)
		fresh := port == nil
		if fresh {
			cfg, err := portConfig(np)
			if err == nil {
				cfg.ANAGroups, err = r.anaWant(nc, np)
			}
			if err == nil && np.RDMA != "" {
				cfg.Provider, err = r.provider(np.RDMA, cfg.Addr, fmt.Sprintf("port %d", np.PortID))
			}
			if err == nil {
				port, err = r.T.AddPort(cfg)
			}
			if err != nil && np.Optional {
				r.log.Warn("target: optional port not started", "port", np.PortID, "addr", cfg.Addr, "err", err)
				dropPorts = append(dropPorts, np.PortID)
				continue
			}
			if err != nil {
				fail(err)
				dropPorts = append(dropPorts, np.PortID)
				continue
			}
			switch {
			case op == nil && !starting:
				ch.did("port %d: added (%s)", np.PortID, port.Addr())
			case op != nil && op.Disabled:
				ch.did("port %d: enabled (%s)", np.PortID, port.Addr())
			case op != nil:
				ch.did("port %d: replaced (%s)", np.PortID, port.Addr())
			}
		}
		var links []string
		for _, nqn := range np.Subsystems {
			sub := r.subs[nqn]
			if sub == nil {
				fail(fmt.Errorf("port %d: subsystem %s is not served", np.PortID, nqn))
				continue
			}
			links = append(links, nqn)
			if fresh || !slices.Contains(op.Subsystems, nqn) || subGone(nqn) {
				port.LinkSubsystem(sub)
				if !fresh {
					ch.did("port %d: subsystem %s linked", np.PortID, nqn)
				}
			}
		}
		np.Subsystems = links
	}
	for _, id := range dropPorts {
		nc.Ports = slices.DeleteFunc(nc.Ports, func(p Port) bool { return p.PortID == id })
	}

	if n := nc.ISCSI; n != nil && r.ISCSI != nil {
		for i := range n.Targets {
			nt := &n.Targets[i]
			ot := old.iscsiTarget(nt.IQN)
			var luns []LUNRef
			if ot == nil {
				tc := iscsitarget.TargetConfig{Name: nt.IQN, AllowedInitiators: nt.AllowedInitiators}
				acls := nt.ACLs
				var err error
				if tc.PortGroups, err = portGroups(n.PortGroups, n.ownPorts()); err == nil {
					tc.CHAP, err = chapOf(nt.CHAP)
				}
				if err == nil {
					tc.MutualCHAP, err = chapOf(nt.MutualCHAP)
				}
				for _, ref := range nt.LUNs {
					lu, lerr := r.luLocked(nc, ref)
					if lerr != nil {
						fail(fmt.Errorf("iscsi target %s LUN %d: %w", nt.IQN, ref.LUN, lerr))
						continue
					}
					tc.LUNs = append(tc.LUNs, iscsitarget.LUNConfig{LUN: ref.LUN, Unit: lu})
					luns = append(luns, ref)
				}
				nt.LUNs = luns
				nt.ACLs = aclsOf(acls, luns)
				tc.ACLs = iscsiACLs(nt.ACLs)
				if err == nil {
					err = r.ISCSI.AddTarget(tc)
				}
				if err != nil {
					fail(fmt.Errorf("iscsi target %s: %w", nt.IQN, err))
					nt.IQN = "" // dropped below
					continue
				}
				if !starting {
					ch.did("iscsi target %s: added", nt.IQN)
				}
				continue
			}
			// A LUN unmapped and mapped again loses its ACL mappings
			// (as LIO's): the ACLs are set again then.
			relinked := false
			if !same(ot.AllowedInitiators, nt.AllowedInitiators) {
				if err := r.ISCSI.SetAllowedInitiators(nt.IQN, nt.AllowedInitiators); err != nil {
					fail(err)
				}
				ch.did("iscsi target %s: allowed initiators %v", nt.IQN, nt.AllowedInitiators)
			}
			if !same(ot.CHAP, nt.CHAP) || !same(ot.MutualCHAP, nt.MutualCHAP) {
				c, err := chapOf(nt.CHAP)
				var m *iser.CHAPSecret
				if err == nil {
					m, err = chapOf(nt.MutualCHAP)
				}
				if err == nil {
					err = r.ISCSI.SetCHAP(nt.IQN, c, m)
				}
				if err != nil {
					fail(err)
				}
				ch.did("iscsi target %s: CHAP set", nt.IQN)
			}
			for _, ref := range nt.LUNs {
				ol := findLUN(ot.LUNs, ref.LUN)
				if ol == nil || refGone(ol, &ref) {
					lu, err := r.luLocked(nc, ref)
					if err == nil {
						err = r.ISCSI.MapLUN(nt.IQN, ref.LUN, lu)
					}
					if err != nil {
						fail(fmt.Errorf("iscsi target %s LUN %d: %w", nt.IQN, ref.LUN, err))
						continue
					}
					relinked = relinked || ol != nil
					ch.did("iscsi target %s LUN %d: mapped to %s namespace %d", nt.IQN, ref.LUN, ref.Subsystem, ref.NSID)
				}
				luns = append(luns, ref)
			}
			for _, ol := range ot.LUNs {
				relinked = relinked || findLUN(nt.LUNs, ol.LUN) == nil
			}
			nt.LUNs = luns
			nt.ACLs = aclsOf(nt.ACLs, luns)
			if relinked || !same(ot.ACLs, nt.ACLs) {
				if err := r.ISCSI.SetACLs(nt.IQN, iscsiACLs(nt.ACLs)); err != nil {
					fail(err)
				} else if !same(ot.ACLs, nt.ACLs) {
					ch.did("iscsi target %s: ACLs set (%d initiators)", nt.IQN, len(nt.ACLs))
				}
			}
		}
		n.Targets = slices.DeleteFunc(n.Targets, func(t ISCSITarget) bool { return t.IQN == "" })
	}
	if n := nc.SRP; n != nil && r.SRP != nil {
		for i := range n.Ports {
			np := &n.Ports[i]
			key := srpKey(*np)
			op := old.srpPort(key)
			id, err := srpPortID(*np)
			if err != nil {
				fail(err)
				continue
			}
			port := r.SRP.Port(id)
			if op == nil {
				var pgs []scsi.PortGroupConfig
				if pgs, err = portGroups(n.PortGroups, n.ownPorts()); err == nil {
					port, err = r.SRP.AddPort(srptarget.PortConfig{IDExt: id.Ext(), IOCGUID: id.GUID(), AllowedInitiators: np.AllowedInitiators,
						AllowAnyInitiator: np.AllowAnyInitiator, RelativeTargetPort: np.RelativeTargetPort, PortGroups: pgs})
				}
				if err != nil {
					fail(fmt.Errorf("srp port %s: %w", key, err))
					np.IDExt = "" // dropped below
					continue
				}
				if !starting {
					ch.did("srp port %s: added", key)
				}
			} else if !same(op.AllowedInitiators, np.AllowedInitiators) || op.AllowAnyInitiator != np.AllowAnyInitiator {
				if err := port.SetACL(np.AllowedInitiators, np.AllowAnyInitiator); err != nil {
					fail(err)
				}
				ch.did("srp port %s: allowed initiators %v (any: %v)", key, np.AllowedInitiators, np.AllowAnyInitiator)
			}
			var luns []LUNRef
			for _, ref := range np.LUNs {
				var ol *LUNRef
				if op != nil {
					ol = findLUN(op.LUNs, ref.LUN)
				}
				if ol == nil || refGone(ol, &ref) {
					lu, err := r.luLocked(nc, ref)
					if err == nil {
						err = port.Map(ref.LUN, lu)
					}
					if err != nil {
						fail(fmt.Errorf("srp port %s LUN %d: %w", key, ref.LUN, err))
						continue
					}
					if op != nil {
						ch.did("srp port %s LUN %d: mapped to %s namespace %d", key, ref.LUN, ref.Subsystem, ref.NSID)
					}
				}
				luns = append(luns, ref)
			}
			np.LUNs = luns
		}
		n.Ports = slices.DeleteFunc(n.Ports, func(p SRPPort) bool { return p.IDExt == "" })
	}
	if err := r.applyPortGroupStates(old, nc, ch); err != nil {
		fail(err)
	}
	r.cfg = nc
	r.pruneFailingLocked()
	if len(errs) > 0 {
		return ch, fmt.Errorf("applying the configuration (what failed is left out of the model): %w", errors.Join(errs...))
	}
	return ch, nil
}

// aclsOf returns acls without the mapped LUNs whose LUN is not in luns.
func aclsOf(acls []ISCSIACL, luns []LUNRef) []ISCSIACL {
	out := slices.Clone(acls)
	for i := range out {
		out[i].MappedLUNs = slices.DeleteFunc(slices.Clone(out[i].MappedLUNs), func(m MappedLUN) bool { return findLUN(luns, m.LUN) == nil })
	}
	return out
}

// dropNamespace removes a namespace, and the SCSI LUNs exporting it, from
// the model.
func (c *Config) dropNamespace(k nsKey) {
	if s := findSub(c, k.nqn); s != nil {
		s.Namespaces = slices.DeleteFunc(s.Namespaces, func(n Namespace) bool { return n.NSID == k.nsid })
	}
	c.dropLUNs(func(r LUNRef) bool { return r.Subsystem == k.nqn && r.NSID == k.nsid })
}

// dropLUNs removes the SCSI LUNs for which drop is true from the model.
func (c *Config) dropLUNs(drop func(LUNRef) bool) {
	if c.ISCSI != nil {
		for i := range c.ISCSI.Targets {
			t := &c.ISCSI.Targets[i]
			t.LUNs = slices.DeleteFunc(t.LUNs, drop)
			t.ACLs = aclsOf(t.ACLs, t.LUNs)
		}
	}
	if c.SRP != nil {
		for i := range c.SRP.Ports {
			c.SRP.Ports[i].LUNs = slices.DeleteFunc(c.SRP.Ports[i].LUNs, drop)
		}
	}
}

// luLocked returns the one SCSI logical unit of a namespace, made on first
// use and shared by every SCSI transport.
func (r *Running) luLocked(c *Config, ref LUNRef) (*scsi.LU, error) {
	k := nsKey{ref.Subsystem, ref.NSID}
	if lu := r.lus[k]; lu != nil {
		return lu, nil
	}
	d := r.disks[k]
	if d == nil {
		return nil, fmt.Errorf("subsystem %s has no namespace %d being served", ref.Subsystem, ref.NSID)
	}
	ns := findNS(findSub(c, ref.Subsystem), ref.NSID)
	if ns == nil {
		return nil, fmt.Errorf("subsystem %s has no namespace %d", ref.Subsystem, ref.NSID)
	}
	lu, err := NewSCSILU(d, fmt.Sprintf("%s/%d", ref.Subsystem, ref.NSID), LUOptions{Shared: ns.Shared, PhysicalBlockSize: ns.PhysicalBlockSize})
	if err != nil {
		return nil, err
	}
	r.lus[k] = lu
	return lu, nil
}

// dropDisk closes a removed namespace's disk (after its in-flight I/O:
// the disks wait for it) and forgets its LU.
func (r *Running) dropDisk(k nsKey) {
	if d := r.disks[k]; d != nil {
		if w, ok := d.(backstore.SizeWatcher); ok {
			w.WatchSize(nil)
		}
		if err := d.Close(); err != nil {
			r.log.Warn("target: closing a removed namespace's disk", "subsystem", k.nqn, "nsid", k.nsid, "err", err)
		}
	}
	delete(r.disks, k)
	delete(r.lus, k)
}

// memDevice parses a "ram:SIZE" or "null:SIZE" device path.
func memDevice(path string) (ok bool, size int64, kind string) {
	kind, sz, found := strings.Cut(path, ":")
	if !found || (kind != "ram" && kind != "null") {
		return false, 0, ""
	}
	n, err := units.ParseSize(sz)
	if err != nil {
		return false, 0, ""
	}
	return true, n, kind
}
