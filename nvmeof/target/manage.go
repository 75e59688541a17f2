package target

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rdisk/rdisk/nvmeof"
)

// The live-management API: what an operator (rdisk target's management
// socket) inspects and changes on a running target, as nvmet's configfs
// does for Linux.

// ControllerInfo describes one live controller (the admin queue and its I/O
// queues).
type ControllerInfo struct {
	Subsystem     string // subsystem NQN (nvmeof.DiscoveryNQN for discovery controllers)
	CNTLID        uint16
	HostNQN       string
	HostID        string // the 16-byte host identifier as a UUID string
	Transport     string // "rdma" or "tcp"
	PortID        uint16
	Remote        string // the admin queue's peer address
	IOQueues      int    // I/O queues connected now
	QueueDepth    int    // entries of its I/O queues (SQSIZE+1) (0 without I/O queues)
	KATO          time.Duration
	Authenticated bool // DH-HMAC-CHAP completed
	Connected     time.Time
	// Commands counts the I/O commands completed (whatever their status)
	// over all its I/O queues, those that ended included; ReadBytes and
	// WriteBytes the data of the successful Reads and Writes among them.
	Commands   uint64
	ReadBytes  uint64
	WriteBytes uint64
}

// Controllers lists the live controllers, sorted by subsystem NQN, then
// controller ID.
func (t *Target) Controllers() []ControllerInfo {
	var out []ControllerInfo
	for _, s := range t.subsystems(true) {
		s.mu.RLock()
		cs := s.controllersLocked()
		s.mu.RUnlock()
		for _, c := range cs {
			if info, ok := c.info(); ok {
				out = append(out, info)
			}
		}
	}
	slices.SortFunc(out, func(a, b ControllerInfo) int {
		return cmp.Or(strings.Compare(a.Subsystem, b.Subsystem), cmp.Compare(a.CNTLID, b.CNTLID))
	})
	return out
}

// info describes c; false while its Connect is under way and once it is
// torn down.
func (c *controller) info() (ControllerInfo, bool) {
	c.mu.Lock()
	if !c.live || c.dead {
		c.mu.Unlock()
		return ControllerInfo{}, false
	}
	in := ControllerInfo{
		Subsystem: c.sub.cfg.NQN, CNTLID: c.cntlid, HostNQN: c.hostNQN, HostID: uuidString(c.hostID),
		Transport: string(TransportRDMA), PortID: c.port.cfg.ID, Remote: c.remote, KATO: c.kato, Connected: c.connected,
		Commands: c.retired.commands, ReadBytes: c.retired.readBytes, WriteBytes: c.retired.writeBytes,
	}
	qs := make([]*sq, 0, len(c.queues))
	for _, q := range c.queues {
		qs = append(qs, q)
	}
	c.mu.Unlock()
	if c.trType == nvmeof.TrTypeTCP {
		in.Transport = string(TransportTCP)
	}
	for _, q := range qs {
		if q.qid == 0 {
			in.Authenticated = q.authOK.Load()
			continue
		}
		in.IOQueues++
		in.QueueDepth = max(in.QueueDepth, q.entries)
		in.Commands += q.stats.commands.Load()
		in.ReadBytes += q.stats.readBytes.Load()
		in.WriteBytes += q.stats.writeBytes.Load()
	}
	return in, true
}

// uuidString formats 16 bytes as a UUID (8-4-4-4-12 hex digits).
func uuidString(u [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// subsystems returns the subsystems, with the discovery one first if disc.
func (t *Target) subsystems(disc bool) []*Subsystem {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*Subsystem, 0, len(t.subs)+1)
	if disc {
		out = append(out, t.discSub)
	}
	for _, s := range t.subs {
		out = append(out, s)
	}
	return out
}

// Subsystems lists the subsystems (not the discovery one), sorted by NQN.
func (t *Target) Subsystems() []*Subsystem {
	out := t.subsystems(false)
	slices.SortFunc(out, func(a, b *Subsystem) int { return strings.Compare(a.cfg.NQN, b.cfg.NQN) })
	return out
}

// Port returns the port with ID id, or nil.
func (t *Target) Port(id uint16) *Port {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ports[id]
}

// Ports lists the ports, sorted by ID.
func (t *Target) Ports() []*Port {
	t.mu.Lock()
	out := make([]*Port, 0, len(t.ports))
	for _, p := range t.ports {
		out = append(out, p)
	}
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b *Port) int { return cmp.Compare(a.cfg.ID, b.cfg.ID) })
	return out
}

// ID returns the port's ID.
func (p *Port) ID() uint16 { return p.cfg.ID }

// AllowedHosts lists the host NQNs allowed to connect, sorted (whatever
// AllowAnyHost says).
func (s *Subsystem) AllowedHosts() []string {
	s.mu.RLock()
	out := make([]string, 0, len(s.hosts))
	for h := range s.hosts {
		out = append(out, h)
	}
	s.mu.RUnlock()
	slices.Sort(out)
	return out
}

// AllowAnyHost tells whether every host may connect.
func (s *Subsystem) AllowAnyHost() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cfg.AllowAnyHost
}

// NamespaceInfo describes a namespace.
type NamespaceInfo struct {
	NSID        uint32
	Blocks      uint64 // size in logical blocks
	BlockSize   int    // logical block size in bytes
	NGUID, UUID [16]byte
	Disabled    bool // configured, not visible to hosts
	ReadOnly    bool // the disk refuses writes
	ANAGroupID  uint32
}

// Namespaces lists the namespaces, disabled ones included, sorted by NSID.
func (s *Subsystem) Namespaces() []NamespaceInfo {
	s.mu.RLock()
	ns := make([]*Namespace, 0, len(s.ns))
	for _, n := range s.ns {
		ns = append(ns, n)
	}
	s.mu.RUnlock()
	out := make([]NamespaceInfo, 0, len(ns))
	for _, n := range ns {
		out = append(out, NamespaceInfo{NSID: n.cfg.NSID, Blocks: n.nsze, BlockSize: 1 << n.lbads, NGUID: n.cfg.NGUID, UUID: n.cfg.UUID,
			Disabled: n.cfg.Disabled, ReadOnly: n.cfg.Disk.ReadOnly(), ANAGroupID: n.cfg.ANAGroupID})
	}
	slices.SortFunc(out, func(a, b NamespaceInfo) int { return cmp.Compare(a.NSID, b.NSID) })
	return out
}

// NamespaceStats are a namespace's I/O counters.
type NamespaceStats struct {
	NSID uint32
	// InFlight counts the I/O commands on the namespace received and not
	// yet completed: from the capsule's arrival to its completion sent
	// (NVMe/TCP: written to the connection; NVMe/RDMA: its Send
	// completed), a write's data transfer and its time on a disk worker
	// included.
	InFlight int64
	// Errors counts the completions of I/O commands on the namespace with
	// an error status, by status code type (NVMe Base section 4.2.3.1):
	// "generic" (Invalid Field, Data Transfer Error, Internal...),
	// "command_specific" (Invalid Format, Conflicting Attributes...),
	// "media" (Write Fault, Unrecovered Read Error, Compare Failure, LBA
	// Out of Range...), "path" and "vendor"; every key is present. A
	// command naming no namespace (Invalid Namespace) counts in none.
	Errors map[string]uint64
}

// sctNames names the status code types NamespaceStats reports (the
// reserved types 4 to 6 are never used).
var sctNames = [...]struct {
	sct  nvmeof.StatusCodeType
	name string
}{
	{nvmeof.SCTGeneric, "generic"}, {nvmeof.SCTCommandSpecific, "command_specific"},
	{nvmeof.SCTMediaError, "media"}, {nvmeof.SCTPathError, "path"}, {nvmeof.SCTVendorSpecific, "vendor"},
}

// NamespaceStats returns the counters of the namespaces, disabled ones
// included, sorted by NSID. A namespace replaced through AddNamespace with
// the same NSID keeps its counters; one removed and added again starts
// from zero.
func (s *Subsystem) NamespaceStats() []NamespaceStats {
	s.mu.RLock()
	ns := make([]*Namespace, 0, len(s.ns))
	for _, n := range s.ns {
		ns = append(ns, n)
	}
	s.mu.RUnlock()
	out := make([]NamespaceStats, 0, len(ns))
	for _, n := range ns {
		st := NamespaceStats{NSID: n.cfg.NSID, InFlight: n.st.inFlight(), Errors: make(map[string]uint64, len(sctNames))}
		for _, c := range sctNames {
			st.Errors[c.name] = n.st.errors[c.sct].Load()
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b NamespaceStats) int { return cmp.Compare(a.NSID, b.NSID) })
	return out
}

// DeleteController disconnects every queue of controller cntlid of
// subsystem subNQN (nvmeof.DiscoveryNQN for a discovery controller) and
// frees its ID, as nvmet does on a fatal error or a keep-alive timeout:
// the host sees its queues end.
func (t *Target) DeleteController(subNQN string, cntlid uint16) error {
	s := t.discSub
	if subNQN != nvmeof.DiscoveryNQN {
		s = t.Subsystem(subNQN)
	}
	if s == nil {
		return fmt.Errorf("controller %d of subsystem %s: no such subsystem", cntlid, subNQN)
	}
	c := s.controller(cntlid)
	if c == nil {
		return fmt.Errorf("subsystem %s has no controller %d", subNQN, cntlid)
	}
	c.teardown(reasonAdminDelete, nil)
	return nil
}

// DisallowHost removes a host NQN from the allowed list. Its connected
// controllers stay, as in nvmet; new ones are refused unless AllowAnyHost.
func (s *Subsystem) DisallowHost(hostNQN string) {
	s.mu.Lock()
	delete(s.hosts, hostNQN)
	s.mu.Unlock()
	s.t.discoveryChanged()
}

// SetAllowAnyHost admits every host (allow) or only the allowed ones.
// Connected controllers stay.
func (s *Subsystem) SetAllowAnyHost(allow bool) {
	s.mu.Lock()
	s.cfg.AllowAnyHost = allow
	s.mu.Unlock()
	s.t.discoveryChanged()
}

// RemovePort stops listening on port id and ends every connection and
// queue accepted on it, the controllers whose admin queue came through it
// with their other queues, and forgets it (AddPort may then reuse its ID
// and address). It returns once the port's connections are gone. The
// discovery controllers of other ports get a discovery change event.
func (t *Target) RemovePort(id uint16) error {
	t.mu.Lock()
	p := t.ports[id]
	if p == nil {
		t.mu.Unlock()
		return fmt.Errorf("port %d not found", id)
	}
	delete(t.ports, id)
	t.mu.Unlock()
	// The port's context ends its connections (and queues) at every
	// stage: accepting, connecting, running (as Target.Close does).
	p.cancel()
	p.ln.Close()
	for _, s := range t.subsystems(true) {
		s.teardownControllers(func(c *controller) bool { return c.port == p }, reasonPortRemoved)
	}
	p.wg.Wait()
	t.log.Info("nvmeof: port removed", "port", id, "addr", p.ln.Addr())
	t.discoveryChanged()
	return nil
}

// teardownControllers tears down the controllers for which match (nil:
// all) is true.
func (s *Subsystem) teardownControllers(match func(*controller) bool, reason string) {
	s.mu.RLock()
	var cs []*controller
	for _, c := range s.ctrls {
		if match == nil || match(c) {
			cs = append(cs, c)
		}
	}
	s.mu.RUnlock()
	for _, c := range cs {
		c.teardown(reason, nil)
	}
}

// UnlinkSubsystem stops exporting subsystem nqn through p, as nvmet does
// when ports/<id>/subsystems/<nqn> is removed: the subsystem's controllers
// that came through p are disconnected (those of other ports stay) and the
// discovery controllers get a discovery change event.
func (p *Port) UnlinkSubsystem(nqn string) error {
	s := p.unlink(func(s *Subsystem) bool { return s.cfg.NQN == nqn })
	if s == nil {
		return fmt.Errorf("port %d does not export subsystem %s", p.cfg.ID, nqn)
	}
	// A Connect that found the link before it went checks it again once
	// its controller is registered (fabrics.go): the controller is
	// either torn down here or refused there.
	s.teardownControllers(func(c *controller) bool { return c.port == p }, reasonUnlinked)
	p.t.log.Info("nvmeof: subsystem unlinked", "port", p.cfg.ID, "subsystem", nqn)
	p.t.discoveryChanged()
	return nil
}

// unlink drops the link to the subsystem match picks and returns it, or
// nil.
func (p *Port) unlink(match func(*Subsystem) bool) *Subsystem {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.IndexFunc(p.subs, match)
	if i < 0 {
		return nil
	}
	s := p.subs[i]
	p.subs = slices.Delete(p.subs, i, i+1)
	return s
}

// RemoveSubsystem unlinks subsystem nqn from every port, disconnects its
// controllers and forgets it: AddSubsystem may then create one with the
// same NQN. Its disks stay open (they are the caller's).
func (t *Target) RemoveSubsystem(nqn string) error {
	t.mu.Lock()
	s := t.subs[nqn]
	if s == nil {
		t.mu.Unlock()
		return fmt.Errorf("subsystem %s not found", nqn)
	}
	delete(t.subs, nqn)
	ports := make([]*Port, 0, len(t.ports))
	for _, p := range t.ports {
		ports = append(ports, p)
	}
	t.mu.Unlock()
	// Removed first, so that a concurrent LinkSubsystem either links it
	// before the unlinking below or sees it removed.
	s.mu.Lock()
	s.removed = true
	s.mu.Unlock()
	for _, p := range ports {
		p.unlink(func(x *Subsystem) bool { return x == s })
	}
	s.teardownControllers(nil, reasonSubsystemRemoved)
	t.log.Info("nvmeof: subsystem removed", "subsystem", nqn)
	t.discoveryChanged()
	return nil
}
