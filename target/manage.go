package target

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/internal/units"
	"github.com/rdisk/rdisk/scsi"
	"github.com/rdisk/rdisk/srp"
)

// Live management: every change is made to a copy of the model, checked
// as Parse checks a file, and applied as a difference (applyLocked), so
// what an operator changes live, what SIGHUP reloads and what a restart
// serves are one model.

// ErrNotFound is wrapped by management errors about things that do not
// exist (the admin socket answers 404).
var ErrNotFound = errors.New("not found")

// Config returns a copy of the model being served: what a restart with it
// as the configuration file would serve.
func (r *Running) Config() *Config {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cfg.clone()
}

// Apply makes the target serve c, changing only what differs (SIGHUP's
// reload). c is checked as Parse checks a file first; a bad c changes
// nothing.
func (r *Running) Apply(c *Config) (*Changes, error) {
	if err := c.validate(&positions{}); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applyLocked(c, false)
}

// change applies edit to a copy of the model.
func (r *Running) change(edit func(c *Config) error) (*Changes, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.cfg.clone()
	if err := edit(c); err != nil {
		return nil, err
	}
	if err := c.validate(&positions{}); err != nil {
		return nil, err
	}
	return r.applyLocked(c, false)
}

func notFound(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrNotFound)
}

func subOf(c *Config, nqn string) (*Subsystem, error) {
	s := findSub(c, nqn)
	if s == nil {
		return nil, notFound("subsystem %s", nqn)
	}
	return s, nil
}

// AddSubsystem adds a subsystem (with its namespaces).
func (r *Running) AddSubsystem(s Subsystem) (*Changes, error) {
	return r.change(func(c *Config) error {
		if findSub(c, s.NQN) != nil {
			return fmt.Errorf("subsystem %s exists", s.NQN)
		}
		c.Subsystems = append(c.Subsystems, s)
		return nil
	})
}

// RemoveSubsystem removes a subsystem, its port links and the SCSI LUNs
// exporting its namespaces; its hosts are disconnected.
func (r *Running) RemoveSubsystem(nqn string) (*Changes, error) {
	return r.change(func(c *Config) error {
		if _, err := subOf(c, nqn); err != nil {
			return err
		}
		c.Subsystems = slices.DeleteFunc(c.Subsystems, func(s Subsystem) bool { return s.NQN == nqn })
		for i := range c.Ports {
			c.Ports[i].Subsystems = slices.DeleteFunc(c.Ports[i].Subsystems, func(n string) bool { return n == nqn })
		}
		c.dropLUNs(func(r LUNRef) bool { return r.Subsystem == nqn })
		return nil
	})
}

// AddNamespace adds a namespace to a subsystem; connected hosts get a
// Namespace Attribute Changed event.
func (r *Running) AddNamespace(nqn string, ns Namespace) (*Changes, error) {
	return r.change(func(c *Config) error {
		s, err := subOf(c, nqn)
		if err != nil {
			return err
		}
		if findNS(s, ns.NSID) != nil {
			return fmt.Errorf("subsystem %s already has namespace %d", nqn, ns.NSID)
		}
		s.Namespaces = append(s.Namespaces, ns)
		return nil
	})
}

// RemoveNamespace removes a namespace and the SCSI LUNs exporting it.
// Hosts get a Namespace Attribute Changed event (NVMe), REPORTED LUNS DATA
// HAS CHANGED (SCSI); further I/O to it fails with Invalid Namespace or
// Format (NVMe) or LOGICAL UNIT NOT SUPPORTED (SCSI).
func (r *Running) RemoveNamespace(nqn string, nsid uint32) (*Changes, error) {
	return r.change(func(c *Config) error {
		s, err := subOf(c, nqn)
		if err != nil {
			return err
		}
		if findNS(s, nsid) == nil {
			return notFound("subsystem %s namespace %d", nqn, nsid)
		}
		c.dropNamespace(nsKey{nqn, nsid})
		return nil
	})
}

// SetNamespaceEnabled enables or disables a namespace (nvmetcli's
// "enable"): a disabled one is configured but invisible to hosts.
func (r *Running) SetNamespaceEnabled(nqn string, nsid uint32, enable bool) (*Changes, error) {
	return r.change(func(c *Config) error {
		ns := findNS(findSub(c, nqn), nsid)
		if ns == nil {
			return notFound("subsystem %s namespace %d", nqn, nsid)
		}
		ns.Enable = 0
		if enable {
			ns.Enable = 1
		}
		return nil
	})
}

// ResizeNamespace grows a namespace's disk to size bytes, or with size 0
// re-reads the size of a file or block device grown outside rdisk (as
// nvmet's revalidate_size). Hosts get a Namespace Attribute Changed event
// (NVMe), a CAPACITY DATA HAS CHANGED unit attention (SCSI, and an SRP
// AER).
func (r *Running) ResizeNamespace(nqn string, nsid uint32, size int64) (*Changes, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ns := findNS(findSub(r.cfg, nqn), nsid)
	if ns == nil {
		return nil, notFound("subsystem %s namespace %d", nqn, nsid)
	}
	key := nsKey{nqn, nsid}
	if err := r.resizeLocked(key, size); err != nil {
		return nil, err
	}
	d := r.disks[key]
	if ok, _, kind := memDevice(ns.Device.Path); ok {
		ns.Device.Path = kind + ":" + units.FormatSize(d.Size())
	}
	ch := &Changes{}
	ch.did("subsystem %s namespace %d: %s", nqn, nsid, units.FormatSize(d.Size()))
	return ch, nil
}

// resizeLocked resizes (size > 0) or rescans (0) a served namespace's
// disk and tells the hosts.
func (r *Running) resizeLocked(key nsKey, size int64) error {
	d := r.disks[key]
	sub := r.subs[key.nqn]
	if d == nil || sub == nil {
		return notFound("subsystem %s namespace %d", key.nqn, key.nsid)
	}
	before := d.Size()
	if size > 0 {
		rz, ok := d.(interface{ Resize(int64) error })
		if !ok {
			return fmt.Errorf("subsystem %s namespace %d: its disk cannot be resized", key.nqn, key.nsid)
		}
		if err := rz.Resize(size); err != nil {
			return fmt.Errorf("subsystem %s namespace %d: %w", key.nqn, key.nsid, err)
		}
	} else {
		rs, ok := d.(interface{ Rescan() error })
		if !ok {
			return fmt.Errorf("subsystem %s namespace %d: a RAM disk has no outside size to re-read: give the new size", key.nqn, key.nsid)
		}
		if err := rs.Rescan(); err != nil {
			return fmt.Errorf("subsystem %s namespace %d: %w", key.nqn, key.nsid, err)
		}
	}
	if d.Size() == before {
		return nil
	}
	return r.announceSizeLocked(key)
}

// announceSizeLocked tells the hosts of a namespace that its size
// changed.
func (r *Running) announceSizeLocked(key nsKey) error {
	sub := r.subs[key.nqn]
	if sub == nil {
		return notFound("subsystem %s", key.nqn)
	}
	if err := sub.NamespaceResized(key.nsid); err != nil {
		return err
	}
	if lu := r.lus[key]; lu != nil {
		if sc := r.cfg.SRP; sc != nil && r.SRP != nil {
			for _, pt := range sc.Ports {
				id, _ := srpPortID(pt)
				for _, ref := range pt.LUNs {
					if ref.Subsystem == key.nqn && ref.NSID == key.nsid {
						if port := r.SRP.Port(id); port != nil {
							port.CapacityChanged(ref.LUN)
						}
					}
				}
			}
		}
		lu.CapacityChanged() // iSCSI's nexuses (a no-op if SRP did it)
	}
	return nil
}

// watchSize makes a disk that notices its own size changes (an RBD image
// resized with `rbd resize`) announce them to the hosts, as nvmet's
// revalidate does on a rescan.
func (r *Running) watchSize(key nsKey, d backstore.Disk) {
	w, ok := d.(backstore.SizeWatcher)
	if !ok {
		return
	}
	w.WatchSize(func(size int64) {
		// Not on the disk's goroutine: closing the disk (under r.mu)
		// may wait for it.
		go func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.disks[key] != d {
				return
			}
			if err := r.announceSizeLocked(key); err != nil {
				r.log.Warn("target: announcing a size change", "subsystem", key.nqn, "nsid", key.nsid, "err", err)
				return
			}
			r.log.Info("target: namespace resized outside rdisk", "subsystem", key.nqn, "nsid", key.nsid, "size", size)
		}()
	})
}

// AllowHost lets a host NQN connect to a subsystem.
func (r *Running) AllowHost(nqn, host string) (*Changes, error) {
	return r.change(func(c *Config) error {
		s, err := subOf(c, nqn)
		if err != nil {
			return err
		}
		if slices.Contains(s.AllowedHosts, host) {
			return fmt.Errorf("host %s is already allowed in %s", host, nqn)
		}
		s.AllowedHosts = append(s.AllowedHosts, host)
		return nil
	})
}

// DisallowHost removes a host NQN from a subsystem's allowed hosts (its
// controllers stay connected, as with nvmet).
func (r *Running) DisallowHost(nqn, host string) (*Changes, error) {
	return r.change(func(c *Config) error {
		s, err := subOf(c, nqn)
		if err != nil {
			return err
		}
		if !slices.Contains(s.AllowedHosts, host) {
			return notFound("host %s in the allowed hosts of %s", host, nqn)
		}
		s.AllowedHosts = slices.DeleteFunc(s.AllowedHosts, func(h string) bool { return h == host })
		return nil
	})
}

// SetAllowAnyHost sets a subsystem's allow_any_host.
func (r *Running) SetAllowAnyHost(nqn string, allow bool) (*Changes, error) {
	return r.change(func(c *Config) error {
		s, err := subOf(c, nqn)
		if err != nil {
			return err
		}
		if s.Attr == nil {
			s.Attr = map[string]string{}
		}
		s.Attr["allow_any_host"] = "0"
		if allow {
			s.Attr["allow_any_host"] = "1"
		}
		return nil
	})
}

// AddPort adds an NVMe-oF port (and starts listening unless disabled).
func (r *Running) AddPort(p Port) (*Changes, error) {
	return r.change(func(c *Config) error {
		if findPort(c, p.PortID) != nil {
			return fmt.Errorf("port %d exists", p.PortID)
		}
		c.Ports = append(c.Ports, p)
		return nil
	})
}

// RemovePort stops and removes a port; its controllers are disconnected.
func (r *Running) RemovePort(id uint16) (*Changes, error) {
	return r.change(func(c *Config) error {
		if findPort(c, id) == nil {
			return notFound("port %d", id)
		}
		c.Ports = slices.DeleteFunc(c.Ports, func(p Port) bool { return p.PortID == id })
		return nil
	})
}

// SetPortEnabled starts (true) or stops a port, keeping it in the model.
func (r *Running) SetPortEnabled(id uint16, enable bool) (*Changes, error) {
	return r.change(func(c *Config) error {
		p := findPort(c, id)
		if p == nil {
			return notFound("port %d", id)
		}
		p.Disabled = !enable
		return nil
	})
}

// LinkSubsystem exports a subsystem on a port.
func (r *Running) LinkSubsystem(id uint16, nqn string) (*Changes, error) {
	return r.change(func(c *Config) error {
		p := findPort(c, id)
		if p == nil {
			return notFound("port %d", id)
		}
		if _, err := subOf(c, nqn); err != nil {
			return err
		}
		if slices.Contains(p.Subsystems, nqn) {
			return fmt.Errorf("port %d already exports %s", id, nqn)
		}
		p.Subsystems = append(p.Subsystems, nqn)
		return nil
	})
}

// UnlinkSubsystem stops exporting a subsystem on a port; its controllers
// through that port are disconnected.
func (r *Running) UnlinkSubsystem(id uint16, nqn string) (*Changes, error) {
	return r.change(func(c *Config) error {
		p := findPort(c, id)
		if p == nil {
			return notFound("port %d", id)
		}
		if !slices.Contains(p.Subsystems, nqn) {
			return notFound("subsystem %s on port %d", nqn, id)
		}
		p.Subsystems = slices.DeleteFunc(p.Subsystems, func(n string) bool { return n == nqn })
		return nil
	})
}

// AddISCSITarget adds an iSCSI target node.
func (r *Running) AddISCSITarget(t ISCSITarget) (*Changes, error) {
	return r.change(func(c *Config) error {
		if c.ISCSI == nil {
			return fmt.Errorf("no rdisk_iscsi section is served (its portals start with a restart)")
		}
		if c.iscsiTarget(t.IQN) != nil {
			return fmt.Errorf("iscsi target %s exists", t.IQN)
		}
		c.ISCSI.Targets = append(c.ISCSI.Targets, t)
		return nil
	})
}

// RemoveISCSITarget removes an iSCSI target node and closes its sessions.
func (r *Running) RemoveISCSITarget(iqn string) (*Changes, error) {
	return r.change(func(c *Config) error {
		if c.iscsiTarget(iqn) == nil {
			return notFound("iscsi target %s", iqn)
		}
		c.ISCSI.Targets = slices.DeleteFunc(c.ISCSI.Targets, func(t ISCSITarget) bool { return t.IQN == iqn })
		return nil
	})
}

// MapISCSILUN exports a namespace as a LUN of an iSCSI target (sessions get
// REPORTED LUNS DATA HAS CHANGED).
func (r *Running) MapISCSILUN(iqn string, ref LUNRef) (*Changes, error) {
	return r.change(func(c *Config) error {
		t := c.iscsiTarget(iqn)
		if t == nil {
			return notFound("iscsi target %s", iqn)
		}
		if findLUN(t.LUNs, ref.LUN) != nil {
			return fmt.Errorf("iscsi target %s already has LUN %d", iqn, ref.LUN)
		}
		t.LUNs = append(t.LUNs, ref)
		return nil
	})
}

// UnmapISCSILUN removes a LUN from an iSCSI target.
func (r *Running) UnmapISCSILUN(iqn string, lun uint64) (*Changes, error) {
	return r.change(func(c *Config) error {
		t := c.iscsiTarget(iqn)
		if t == nil {
			return notFound("iscsi target %s", iqn)
		}
		if findLUN(t.LUNs, lun) == nil {
			return notFound("LUN %d of iscsi target %s", lun, iqn)
		}
		t.LUNs = slices.DeleteFunc(t.LUNs, func(r LUNRef) bool { return r.LUN == lun })
		t.ACLs = aclsOf(t.ACLs, t.LUNs)
		return nil
	})
}

// SetISCSIACL adds or replaces an initiator's ACL on an iSCSI target: it
// may log in and, with mapped LUNs, sees only those (its running sessions
// get REPORTED LUNS DATA HAS CHANGED when what they see changes).
func (r *Running) SetISCSIACL(iqn string, acl ISCSIACL) (*Changes, error) {
	return r.change(func(c *Config) error {
		t := c.iscsiTarget(iqn)
		if t == nil {
			return notFound("iscsi target %s", iqn)
		}
		if i := slices.IndexFunc(t.ACLs, func(a ISCSIACL) bool { return a.Initiator == acl.Initiator }); i >= 0 {
			t.ACLs[i] = acl
		} else {
			t.ACLs = append(t.ACLs, acl)
		}
		return nil
	})
}

// RemoveISCSIACL removes an initiator's ACL from an iSCSI target.
func (r *Running) RemoveISCSIACL(iqn, initiator string) (*Changes, error) {
	return r.change(func(c *Config) error {
		t := c.iscsiTarget(iqn)
		if t == nil {
			return notFound("iscsi target %s", iqn)
		}
		i := slices.IndexFunc(t.ACLs, func(a ISCSIACL) bool { return a.Initiator == initiator })
		if i < 0 {
			return notFound("ACL of %s on iscsi target %s", initiator, iqn)
		}
		t.ACLs = slices.Delete(t.ACLs, i, i+1)
		return nil
	})
}

// AllowISCSIInitiator adds an initiator name to an iSCSI target's
// allowed initiators (new logins).
func (r *Running) AllowISCSIInitiator(iqn, initiator string) (*Changes, error) {
	return r.change(func(c *Config) error {
		t := c.iscsiTarget(iqn)
		if t == nil {
			return notFound("iscsi target %s", iqn)
		}
		if slices.Contains(t.AllowedInitiators, initiator) {
			return fmt.Errorf("initiator %s is already allowed in %s", initiator, iqn)
		}
		t.AllowedInitiators = append(t.AllowedInitiators, initiator)
		return nil
	})
}

// DenyISCSIInitiator removes an initiator name from an iSCSI target's
// allowed initiators (its sessions stay; rdisk admin close ends them).
func (r *Running) DenyISCSIInitiator(iqn, initiator string) (*Changes, error) {
	return r.change(func(c *Config) error {
		t := c.iscsiTarget(iqn)
		if t == nil {
			return notFound("iscsi target %s", iqn)
		}
		if !slices.Contains(t.AllowedInitiators, initiator) {
			return notFound("initiator %s in the allowed initiators of %s", initiator, iqn)
		}
		t.AllowedInitiators = slices.DeleteFunc(t.AllowedInitiators, func(n string) bool { return n == initiator })
		return nil
	})
}

// AllowSRPInitiator adds an entry to an SRP target port's ACL.
func (r *Running) AllowSRPInitiator(port, initiator string) (*Changes, error) {
	return r.change(func(c *Config) error {
		pt, err := srpPortOf(c, port)
		if err != nil {
			return err
		}
		if slices.Contains(pt.AllowedInitiators, initiator) {
			return fmt.Errorf("initiator %s is already allowed on srp port %s", initiator, port)
		}
		pt.AllowedInitiators = append(pt.AllowedInitiators, initiator)
		return nil
	})
}

// DenySRPInitiator removes an entry from an SRP target port's ACL.
func (r *Running) DenySRPInitiator(port, initiator string) (*Changes, error) {
	return r.change(func(c *Config) error {
		pt, err := srpPortOf(c, port)
		if err != nil {
			return err
		}
		if !slices.Contains(pt.AllowedInitiators, initiator) {
			return notFound("initiator %s in the ACL of srp port %s", initiator, port)
		}
		pt.AllowedInitiators = slices.DeleteFunc(pt.AllowedInitiators, func(n string) bool { return n == initiator })
		return nil
	})
}

// srpPortOf finds an SRP port by its port ID (0x + 32 hex digits) or its
// id_ext when that is unique.
func srpPortOf(c *Config, name string) (*SRPPort, error) {
	if c.SRP == nil {
		return nil, notFound("srp port %s (no rdisk_srp section is served)", name)
	}
	var found *SRPPort
	for i := range c.SRP.Ports {
		pt := &c.SRP.Ports[i]
		if srpKey(*pt) == name {
			return pt, nil
		}
		ext, err1 := srp.ParseGUID(pt.IDExt)
		want, err2 := srp.ParseGUID(name)
		if err1 == nil && err2 == nil && ext == want {
			if found != nil {
				return nil, fmt.Errorf("srp ports %s and %s share the id_ext %s: name the port ID", srpKey(*found), srpKey(*pt), name)
			}
			found = pt
		}
	}
	if found == nil {
		return nil, notFound("srp port %s", name)
	}
	return found, nil
}

// MapSRPLUN exports a namespace as a LUN of an SRP target port (channels
// get an SRP AER with REPORTED LUNS DATA HAS CHANGED).
func (r *Running) MapSRPLUN(port string, ref LUNRef) (*Changes, error) {
	return r.change(func(c *Config) error {
		pt, err := srpPortOf(c, port)
		if err != nil {
			return err
		}
		if findLUN(pt.LUNs, ref.LUN) != nil {
			return fmt.Errorf("srp port %s already has LUN %d", port, ref.LUN)
		}
		pt.LUNs = append(pt.LUNs, ref)
		return nil
	})
}

// UnmapSRPLUN removes a LUN from an SRP target port.
func (r *Running) UnmapSRPLUN(port string, lun uint64) (*Changes, error) {
	return r.change(func(c *Config) error {
		pt, err := srpPortOf(c, port)
		if err != nil {
			return err
		}
		if findLUN(pt.LUNs, lun) == nil {
			return notFound("LUN %d of srp port %s", lun, port)
		}
		pt.LUNs = slices.DeleteFunc(pt.LUNs, func(r LUNRef) bool { return r.LUN == lun })
		return nil
	})
}

// CloseController disconnects an NVMe-oF controller (all its queues); the
// host may reconnect.
func (r *Running) CloseController(nqn string, cntlid uint16) error {
	if err := r.T.DeleteController(nqn, cntlid); err != nil {
		return fmt.Errorf("%w: %w", err, ErrNotFound)
	}
	return nil
}

// CloseISCSISession closes an iSCSI session (all its connections).
func (r *Running) CloseISCSISession(tsih uint16) error {
	if r.ISCSI == nil {
		return notFound("iscsi session %d (no iSCSI target)", tsih)
	}
	if err := r.ISCSI.CloseSession(tsih); err != nil {
		return fmt.Errorf("%w: %w", err, ErrNotFound)
	}
	return nil
}

// CloseSRPChannel logs an SRP channel out.
func (r *Running) CloseSRPChannel(id uint64) error {
	if r.SRP == nil {
		return notFound("srp channel %d (no SRP target)", id)
	}
	if err := r.SRP.CloseChannel(id); err != nil {
		return fmt.Errorf("%w: %w", err, ErrNotFound)
	}
	return nil
}

// Status is what is live: the namespaces with their disks, the listening
// ports, and the hosts connected through every transport.
type Status struct {
	Namespaces    []NamespaceStatus  `json:"namespaces"`
	Ports         []PortStatus       `json:"ports"`
	Controllers   []ControllerStatus `json:"nvme_controllers"`
	ISCSIPortals  []string           `json:"iscsi_portals,omitempty"`
	ISCSISessions []ISCSISession     `json:"iscsi_sessions"`
	SRPListen     []string           `json:"srp_listen,omitempty"`
	SRPChannels   []SRPChannel       `json:"srp_channels"`
	// ISCSIPortGroups and SRPPortGroups are the ALUA target port groups
	// with their live states (those of the first iSCSI target and SRP
	// port: every target and port has the same).
	ISCSIPortGroups []PortGroupStatus `json:"iscsi_port_groups,omitempty"`
	SRPPortGroups   []PortGroupStatus `json:"srp_port_groups,omitempty"`
}

// PortGroupStatus is an ALUA target port group.
type PortGroupStatus struct {
	ID    uint16   `json:"id"`
	State string   `json:"state"`
	Ports []uint16 `json:"ports"`
}

// IOPathOf says how disk d runs its I/O, for logs, banners and the status:
// "io_uring", "sync: WHY" when a file or block device does not use
// io_uring, and "" for disks that have no such choice (RAM, null, RBD).
func IOPathOf(d backstore.Disk) string {
	r, ok := d.(backstore.IOPathReporter)
	if !ok {
		return ""
	}
	p, why := r.IOPath()
	if why != "" {
		return p.String() + ": " + why
	}
	return p.String()
}

// NamespaceStatus is a served namespace.
type NamespaceStatus struct {
	Subsystem string `json:"subsystem"`
	NSID      uint32 `json:"nsid"`
	Device    string `json:"device"`
	Size      int64  `json:"size"`
	BlockSize int    `json:"block_size"`
	Enabled   bool   `json:"enabled"`
	ReadOnly  bool   `json:"read_only"`
	NGUID     string `json:"nguid"`
	UUID      string `json:"uuid"`
	// ANAGroup is the namespace's ANA group.
	ANAGroup uint32 `json:"ana_group"`
	// IOPath says how a file's or block device's I/O runs: "io_uring",
	// or "sync" and why (see IOPathOf); empty for other disks.
	IOPath string `json:"io_path,omitempty"`
	// SCSI lists where the namespace is a SCSI LUN ("iscsi IQN LUN n",
	// "srp PORT LUN n").
	SCSI []string `json:"scsi,omitempty"`
	// Health is what the health monitor (rdisk_gateway.follow_health)
	// says of the disk: "ok", or "failing: WHY" while its ANA groups are
	// held inaccessible; empty without the monitor.
	Health string `json:"health,omitempty"`
}

// PortStatus is an NVMe-oF port of the model.
type PortStatus struct {
	ID        uint16 `json:"portid"`
	Addr      string `json:"addr"`
	Transport string `json:"trtype"`
	Listening bool   `json:"listening"`
	// Provider names the RDMA provider serving the port (rdma.Provider's
	// Name; empty on a TCP port or one not listening).
	Provider   string   `json:"rdma_provider,omitempty"`
	Subsystems []string `json:"subsystems"`
	// ANA are the states of the port's ANA groups, as hosts connected
	// through it see them (live; group 1 always).
	ANA map[uint32]string `json:"ana,omitempty"`
}

// ControllerStatus is a connected NVMe-oF controller.
type ControllerStatus struct {
	Subsystem     string    `json:"subsystem"`
	CNTLID        uint16    `json:"cntlid"`
	HostNQN       string    `json:"hostnqn"`
	HostID        string    `json:"hostid"`
	Transport     string    `json:"trtype"`
	PortID        uint16    `json:"portid"`
	Remote        string    `json:"remote"`
	IOQueues      int       `json:"io_queues"`
	QueueDepth    int       `json:"queue_depth"`
	KATOSeconds   float64   `json:"kato"`
	Authenticated bool      `json:"authenticated"`
	Connected     time.Time `json:"connected"`
	Commands      uint64    `json:"commands"`
	ReadBytes     uint64    `json:"read_bytes"`
	WriteBytes    uint64    `json:"write_bytes"`
}

// ISCSISession is a logged-in iSCSI session.
type ISCSISession struct {
	Target      string      `json:"target"`
	Initiator   string      `json:"initiator"`
	ISID        string      `json:"isid"`
	TSIH        uint16      `json:"tsih"`
	Discovery   bool        `json:"discovery,omitempty"`
	Connections []ISCSIConn `json:"connections"`
	Commands    uint64      `json:"commands"`
	ReadBytes   uint64      `json:"read_bytes"`
	WriteBytes  uint64      `json:"write_bytes"`
	Since       time.Time   `json:"since"`
}

// ISCSIConn is a connection of an iSCSI session.
type ISCSIConn struct {
	CID       uint16 `json:"cid"`
	Transport string `json:"transport"`
	Remote    string `json:"remote"`
	Local     string `json:"local"`
}

// SRPChannel is a logged-in SRP RDMA channel.
type SRPChannel struct {
	ID         uint64    `json:"id"`
	Port       string    `json:"port"`
	Initiator  string    `json:"initiator"`
	Remote     string    `json:"remote"`
	Depth      int       `json:"depth"`
	MaxIU      int       `json:"max_iu"`
	Commands   uint64    `json:"commands"`
	ReadBytes  uint64    `json:"read_bytes"`
	WriteBytes uint64    `json:"write_bytes"`
	Since      time.Time `json:"since"`
}

// Status reports what is live.
func (r *Running) Status() *Status {
	r.mu.Lock()
	st := &Status{Namespaces: []NamespaceStatus{}, Ports: []PortStatus{}, Controllers: []ControllerStatus{},
		ISCSISessions: []ISCSISession{}, SRPChannels: []SRPChannel{}}
	scsiOf := map[nsKey][]string{}
	if ic := r.cfg.ISCSI; ic != nil {
		for _, t := range ic.Targets {
			for _, l := range t.LUNs {
				k := nsKey{l.Subsystem, l.NSID}
				scsiOf[k] = append(scsiOf[k], fmt.Sprintf("iscsi %s LUN %d", t.IQN, l.LUN))
			}
		}
	}
	if sc := r.cfg.SRP; sc != nil {
		for _, p := range sc.Ports {
			for _, l := range p.LUNs {
				k := nsKey{l.Subsystem, l.NSID}
				scsiOf[k] = append(scsiOf[k], fmt.Sprintf("srp %s LUN %d", srpKey(p), l.LUN))
			}
		}
	}
	for _, s := range r.cfg.Subsystems {
		// The identities the subsystem reports (NGUID and UUID, derived
		// when the configuration names none).
		ids := map[uint32][2]string{}
		groups := map[uint32]uint32{}
		if sub := r.subs[s.NQN]; sub != nil {
			for _, n := range sub.Namespaces() {
				ids[n.NSID] = [2]string{fmt.Sprintf("%x", n.NGUID), uuidString(n.UUID)}
				groups[n.NSID] = max(n.ANAGroupID, 1)
			}
		}
		for _, ns := range s.Namespaces {
			k := nsKey{s.NQN, ns.NSID}
			nst := NamespaceStatus{Subsystem: s.NQN, NSID: ns.NSID, Device: ns.Device.Path, Enabled: ns.Enable != 0, SCSI: scsiOf[k]}
			if d := r.disks[k]; d != nil {
				nst.Size, nst.BlockSize, nst.ReadOnly = d.Size(), d.BlockSize(), d.ReadOnly()
				nst.IOPath = IOPathOf(d)
			}
			nst.NGUID, nst.UUID, nst.ANAGroup = ids[ns.NSID][0], ids[ns.NSID][1], groups[ns.NSID]
			if r.Monitoring() {
				nst.Health = "ok"
				if why, bad := r.failing[k]; bad {
					nst.Health = "failing: " + why
				}
			}
			st.Namespaces = append(st.Namespaces, nst)
		}
	}
	for _, p := range r.cfg.Ports {
		ps := PortStatus{ID: p.PortID, Transport: p.Addr.TrType, Subsystems: slices.Clone(p.Subsystems)}
		if ps.Transport == "" {
			ps.Transport = "rdma"
		}
		if lp := r.T.Port(p.PortID); lp != nil {
			ps.Addr, ps.Listening = lp.Addr().String(), true
			if pp := lp.Provider(); pp != nil {
				ps.Provider = pp.Name()
			}
			ps.ANA = map[uint32]string{}
			for g, a := range lp.ANAStates() {
				ps.ANA[g] = a.String()
			}
		} else {
			svc := p.Addr.TrSvcID
			if svc == "" {
				svc = "4420"
			}
			ps.Addr = p.Addr.TrAddr + ":" + svc
		}
		st.Ports = append(st.Ports, ps)
	}
	if ic := r.cfg.ISCSI; ic != nil && r.ISCSI != nil && len(ic.Targets) > 0 {
		if pgs, err := r.ISCSI.PortGroups(ic.Targets[0].IQN); err == nil {
			st.ISCSIPortGroups = portGroupStatus(pgs)
		}
	}
	if sc := r.cfg.SRP; sc != nil && r.SRP != nil && len(sc.Ports) > 0 {
		if id, err := srpPortID(sc.Ports[0]); err == nil {
			if port := r.SRP.Port(id); port != nil {
				st.SRPPortGroups = portGroupStatus(port.PortGroups())
			}
		}
	}
	r.mu.Unlock()
	for _, c := range r.T.Controllers() {
		st.Controllers = append(st.Controllers, ControllerStatus{Subsystem: c.Subsystem, CNTLID: c.CNTLID, HostNQN: c.HostNQN,
			HostID: c.HostID, Transport: c.Transport, PortID: c.PortID, Remote: c.Remote, IOQueues: c.IOQueues,
			QueueDepth: c.QueueDepth, KATOSeconds: c.KATO.Seconds(), Authenticated: c.Authenticated, Connected: c.Connected,
			Commands: c.Commands, ReadBytes: c.ReadBytes, WriteBytes: c.WriteBytes})
	}
	for _, a := range r.ISCSIPortals {
		st.ISCSIPortals = append(st.ISCSIPortals, a.String())
	}
	if r.ISCSI != nil {
		for _, s := range r.ISCSI.Sessions() {
			is := ISCSISession{Target: s.Target, Initiator: s.Initiator, ISID: s.ISID, TSIH: s.TSIH, Discovery: s.Discovery,
				Commands: s.Commands, ReadBytes: s.ReadBytes, WriteBytes: s.WriteBytes, Since: s.Since, Connections: []ISCSIConn{}}
			for _, c := range s.Connections {
				is.Connections = append(is.Connections, ISCSIConn{CID: c.CID, Transport: c.Transport, Remote: c.Remote, Local: c.Local})
			}
			st.ISCSISessions = append(st.ISCSISessions, is)
		}
	}
	for _, a := range r.SRPAddrs {
		st.SRPListen = append(st.SRPListen, a.String())
	}
	if r.SRP != nil {
		for _, c := range r.SRP.Channels() {
			st.SRPChannels = append(st.SRPChannels, SRPChannel{ID: c.ID, Port: c.Port, Initiator: c.Initiator, Remote: c.Remote,
				Depth: c.Depth, MaxIU: c.MaxIU, Commands: c.Commands, ReadBytes: c.ReadBytes, WriteBytes: c.WriteBytes, Since: c.Since})
		}
	}
	return st
}

func portGroupStatus(pgs []scsi.PortGroupConfig) []PortGroupStatus {
	out := []PortGroupStatus{}
	for _, g := range pgs {
		out = append(out, PortGroupStatus{ID: g.ID, State: g.State.String(), Ports: slices.Clone(g.Ports)})
	}
	return out
}

func uuidString(u [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// ParseNSID reads a namespace ID argument.
func ParseNSID(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("namespace ID %q: want a number from 1", s)
	}
	return uint32(n), nil
}
