package target

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/nvmeof"
	"github.com/rdisk/rdisk/scsi"
)

// Gateway health: with rdisk_gateway.follow_health, this gateway's ANA
// and ALUA states follow the health of its disks, so that multipath hosts
// leave a gateway that lost its storage (a Ceph gateway cut off from the
// monitors, a fenced client) for another one, and come back when it
// recovers; what ceph-nvmeof's monitor does for its gateways.
//
// A monitor goroutine probes every namespace's disk each health_interval:
// a probe fails when the disk's Health (backstore.HealthReporter) returns
// an error, or does not answer within the interval, or when I/O failed on
// the disk since the last probe and none succeeded (ioCheck). ErrClosed
// (a disk being replaced or removed) and ErrUnsupported (a block device
// without SMART data) are not failures, and a disk without Health is
// always healthy. After health_failures failed probes in a row the namespace is
// failing; after health_recoveries good ones in a row it is healthy again.
//
// While a namespace fails:
//
//   - NVMe: every ANA group holding it is inaccessible on every NVMe-oF
//     port of this gateway that has the group (group 1 on every port):
//     hosts get the ANA Change event, the ANA log page shows it and I/O
//     gets ANA Inaccessible, as with a state an operator set. Other
//     namespaces of the group go with it: an ANA state is the group's.
//   - SCSI: ALUA states belong to target port groups, which (as
//     rdisk_iscsi.port_groups and rdisk_srp.port_groups) hold every LU the
//     transport exports; a group's state cannot tell one LU from another.
//     So a transport's own port groups (those holding this gateway's
//     ports, as SetGatewayState picks them) go unavailable only when every
//     LU it exports is failing: a gateway still serving one healthy LU
//     keeps its paths, and the failing LUs' I/O fails on the disk as it
//     would without the monitor (the host's path checker fails those
//     paths). With a single LU that is the LU's namespace failing.
//
// The override is live state, never the model's: Config, admin save and a
// reload see the configured states; a state set while a group is held
// inaccessible (SetANAState, SetGatewayState, SetPortGroupState, a reload)
// is kept in the model and takes effect when the override ends, and a
// reload keeps the override of a namespace that is still served.

// GatewayConfig is the "rdisk_gateway" section: how this gateway behaves
// as one of several serving the same disks.
type GatewayConfig struct {
	// FollowHealth makes the ANA and ALUA states follow the disks' health
	// (off by default: the states are the configured ones).
	FollowHealth bool `json:"follow_health,omitempty"`
	// HealthInterval is the time between probes of each disk, a Go
	// duration from 10ms to 1h (default 2s); a probe that does not answer
	// within it has failed.
	HealthInterval string `json:"health_interval,omitempty"`
	// HealthFailures failed probes in a row make a namespace failing
	// (default 3); HealthRecoveries good ones in a row make it healthy
	// again (default 3). 1 to 1000.
	HealthFailures   int `json:"health_failures,omitempty"`
	HealthRecoveries int `json:"health_recoveries,omitempty"`
}

// Defaults of GatewayConfig.
const (
	DefaultHealthInterval   = 2 * time.Second
	DefaultHealthFailures   = 3
	DefaultHealthRecoveries = 3
)

// healthSettings are a GatewayConfig's values, defaults filled in.
type healthSettings struct {
	interval             time.Duration
	failures, recoveries int
}

// settings checks g and fills in the defaults; the error names the field.
func (g *GatewayConfig) settings() (healthSettings, string, error) {
	s := healthSettings{interval: DefaultHealthInterval, failures: DefaultHealthFailures, recoveries: DefaultHealthRecoveries}
	if g.HealthInterval != "" {
		d, err := time.ParseDuration(g.HealthInterval)
		if err != nil {
			return s, "health_interval", fmt.Errorf("%q is not a duration (e.g. 2s)", g.HealthInterval)
		}
		if d < 10*time.Millisecond || d > time.Hour {
			return s, "health_interval", fmt.Errorf("%v: want 10ms to 1h", d)
		}
		s.interval = d
	}
	for _, f := range []struct {
		key string
		v   int
		dst *int
	}{{"health_failures", g.HealthFailures, &s.failures}, {"health_recoveries", g.HealthRecoveries, &s.recoveries}} {
		switch {
		case f.v < 0 || f.v > 1000:
			return s, f.key, fmt.Errorf("%d: want 1 to 1000", f.v)
		case f.v > 0:
			*f.dst = f.v
		}
	}
	return s, "", nil
}

// validateGateway checks the rdisk_gateway section.
func (c *Config) validateGateway(pos *positions) error {
	if c.Gateway == nil {
		return nil
	}
	if _, key, err := c.Gateway.settings(); err != nil {
		return pos.errAt("rdisk_gateway."+key, "%v", err)
	}
	return nil
}

// Monitoring tells whether the health monitor runs.
func (r *Running) Monitoring() bool { return r.monitorDone != nil }

// NamespaceHealth returns why a namespace is failing, "" when it is not
// (or is not served, or the monitor does not run).
func (r *Running) NamespaceHealth(nqn string, nsid uint32) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failing[nsKey{nqn, nsid}]
}

// errNoAnswer is a probe that did not answer within the interval.
var errNoAnswer = errors.New("health check did not answer")

// probe checks one disk: nil when healthy.
func probe(d backstore.Disk) error {
	hr, ok := d.(backstore.HealthReporter)
	if !ok {
		return nil
	}
	_, err := hr.Health()
	if errors.Is(err, backstore.ErrClosed) || errors.Is(err, backstore.ErrUnsupported) {
		return nil
	}
	return err
}

// diskProbe is the monitor's record of one namespace's disk.
type diskProbe struct {
	disk       backstore.Disk
	fails, oks int
	failing    bool
	pending    chan error // a probe under way (nil: none)
	// The disk's I/O counters at the last check (ioSeen: there was one).
	ioSeen         bool
	ioErrs, ioGood uint64
}

// ioCheck compares the disk's I/O counters with the last check's. It
// fails when operations failed on the medium since then and none
// succeeded: every I/O of the interval failed, as it does for a client
// the cluster fenced or blocklisted, or a store that times out, while
// the health check itself may still answer. Some errors among good I/O
// (a bad block) do not count: they say nothing of this gateway's path.
// A disk without counters, and the first check, pass.
func (p *diskProbe) ioCheck() error {
	sr, ok := p.disk.(backstore.StatsReporter)
	if !ok {
		return nil
	}
	s := sr.Stats()
	errs := s.Errors()
	good := s.Read.Ops + s.Write.Ops + s.Flush.Ops + s.Discard.Ops + s.WriteZeroes.Ops - errs
	// Counters only grow; should a disk's ever go back, start over.
	first := !p.ioSeen || errs < p.ioErrs || good < p.ioGood
	newErrs, newGood := errs-p.ioErrs, good-p.ioGood
	p.ioSeen, p.ioErrs, p.ioGood = true, errs, good
	if first || newErrs == 0 || newGood > 0 {
		return nil
	}
	return fmt.Errorf("%d I/O errors and no I/O that succeeded since the last check", newErrs)
}

// startMonitor starts the health monitor when the model asks for it.
func (r *Running) startMonitor() {
	r.mu.Lock()
	g := r.cfg.Gateway
	r.mu.Unlock()
	if g == nil || !g.FollowHealth {
		return
	}
	s, _, err := g.settings()
	if err != nil { // validated
		return
	}
	r.monitorDone = make(chan struct{})
	go r.monitor(r.ctx, s)
}

// monitor probes the disks until ctx ends.
func (r *Running) monitor(ctx context.Context, s healthSettings) {
	defer close(r.monitorDone)
	r.log.Info("target: ANA/ALUA states follow the disks' health", "interval", s.interval, "failures", s.failures, "recoveries", s.recoveries)
	probes := map[nsKey]*diskProbe{}
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r.mu.Lock()
		disks := maps.Clone(r.disks)
		failing := maps.Clone(r.failing)
		r.mu.Unlock()
		for k := range probes {
			if disks[k] == nil {
				delete(probes, k)
			}
		}
		keys := slices.SortedFunc(maps.Keys(disks), func(a, b nsKey) int {
			if c := strings.Compare(a.nqn, b.nqn); c != 0 {
				return c
			}
			return int(a.nsid) - int(b.nsid)
		})
		for _, k := range keys {
			p := probes[k]
			if p == nil || p.disk != disks[k] {
				// A new or replaced disk: a failing namespace stays failing
				// until the new disk proves itself.
				_, bad := failing[k]
				p = &diskProbe{disk: disks[k], failing: bad}
				probes[k] = p
			}
			if p.pending == nil {
				ch := make(chan error, 1)
				d := p.disk
				go func() { ch <- probe(d) }()
				p.pending = ch
			}
		}
		deadline := time.NewTimer(s.interval)
		expired := false
		for _, k := range keys {
			p := probes[k]
			var err error
			if expired {
				select {
				case err = <-p.pending:
					p.pending = nil
				default:
					err = errNoAnswer
				}
			} else {
				select {
				case err = <-p.pending:
					p.pending = nil
				case <-deadline.C:
					expired = true
					select {
					case err = <-p.pending:
						p.pending = nil
					default:
						err = errNoAnswer
					}
				case <-ctx.Done():
					deadline.Stop()
					return
				}
			}
			if errors.Is(err, errNoAnswer) {
				err = fmt.Errorf("%w within %v", errNoAnswer, s.interval)
			}
			if ioErr := p.ioCheck(); err == nil {
				err = ioErr
			}
			if err != nil {
				p.oks, p.fails = 0, p.fails+1
				if !p.failing && p.fails >= s.failures {
					p.failing = true
					r.setFailing(k, p.disk, fmt.Sprintf("%d health checks failed in a row: %v", p.fails, err))
				}
				continue
			}
			p.fails, p.oks = 0, p.oks+1
			if p.failing && p.oks >= s.recoveries {
				p.failing = false
				r.setFailing(k, p.disk, "")
			}
		}
		deadline.Stop()
	}
}

// setFailing records a namespace's transition (reason "": healthy again)
// and sets the live states that follow from it.
func (r *Running) setFailing(k nsKey, d backstore.Disk, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.disks[k] != d {
		return // replaced or removed meanwhile: the next round sees it
	}
	if reason == "" {
		if _, ok := r.failing[k]; !ok {
			return
		}
		delete(r.failing, k)
	} else {
		r.failing[k] = reason
	}
	var groups []uint32
	if ns := findNS(findSub(r.cfg, k.nqn), k.nsid); ns != nil {
		g, _ := ns.anaGroupID()
		groups = []uint32{max(g, 1)}
	}
	err := r.reconcileLocked()
	scsiDown := strings.Join(r.scsiDownLocked(r.cfg), ", ")
	if reason != "" {
		r.log.Warn("target: namespace's storage failing: its ANA groups are inaccessible on this gateway", "subsystem", k.nqn, "nsid", k.nsid,
			"reason", reason, "ana_groups", groups, "scsi_unavailable", scsiDown, "err", err)
	} else {
		r.log.Warn("target: namespace's storage healthy again: its ANA groups have their configured states", "subsystem", k.nqn, "nsid", k.nsid,
			"ana_groups", groups, "scsi_unavailable", scsiDown, "err", err)
	}
}

// failingGroups are the ANA groups of c holding a failing namespace.
func (r *Running) failingGroups(c *Config) map[uint32]bool {
	if len(r.failing) == 0 {
		return nil
	}
	out := map[uint32]bool{}
	for _, s := range c.Subsystems {
		for _, ns := range s.Namespaces {
			if _, bad := r.failing[nsKey{s.NQN, ns.NSID}]; bad {
				g, _ := ns.anaGroupID()
				out[max(g, 1)] = true
			}
		}
	}
	return out
}

// anaWant returns the ANA states port pc of model c is to have live: the
// model's, with the groups holding a failing namespace inaccessible
// (those the port has: group 1 always). r.mu is held.
func (r *Running) anaWant(c *Config, pc *Port) (map[uint32]nvmeof.ANAState, error) {
	st, err := pc.anaStates()
	if err != nil {
		return nil, err
	}
	bad := r.failingGroups(c)
	if len(bad) == 0 {
		return st, nil
	}
	st = maps.Clone(st)
	if st == nil {
		st = map[uint32]nvmeof.ANAState{}
	}
	for g := range bad {
		if _, ok := st[g]; ok || g == 1 {
			st[g] = nvmeof.ANAInaccessible
		}
	}
	return st, nil
}

// scsiDown tells whether every LU of refs is failing (and there is one).
func (r *Running) scsiDown(refs []LUNRef) bool {
	if len(refs) == 0 || len(r.failing) == 0 {
		return false
	}
	for _, ref := range refs {
		if _, bad := r.failing[nsKey{ref.Subsystem, ref.NSID}]; !bad {
			return false
		}
	}
	return true
}

// scsiDownLocked names the SCSI transports of c whose own port groups
// are held unavailable.
func (r *Running) scsiDownLocked(c *Config) []string {
	var out []string
	if ic := c.ISCSI; ic != nil && r.scsiDown(ic.allLUNs()) {
		out = append(out, "iscsi")
	}
	if sc := c.SRP; sc != nil && r.scsiDown(sc.allLUNs()) {
		out = append(out, "srp")
	}
	return out
}

func (ic *ISCSIConfig) allLUNs() []LUNRef {
	var out []LUNRef
	for _, t := range ic.Targets {
		out = append(out, t.LUNs...)
	}
	return out
}

func (sc *SRPConfig) allLUNs() []LUNRef {
	var out []LUNRef
	for _, p := range sc.Ports {
		out = append(out, p.LUNs...)
	}
	return out
}

// aluaWant returns the ALUA states a transport's port groups are to have
// live: the model's, or unavailable for this gateway's own groups when
// down. Without configured groups it is the implicit group 1.
func aluaWant(pgs []PortGroup, own []uint16, down bool) map[uint16]scsi.ALUAState {
	out := map[uint16]scsi.ALUAState{}
	if len(pgs) == 0 {
		out[1] = scsi.ALUAActiveOptimized
		if down {
			out[1] = scsi.ALUAUnavailable
		}
		return out
	}
	for _, g := range pgs {
		st, _ := scsi.ParseALUAState(g.State)
		mine := len(g.Ports) == 0 || slices.ContainsFunc(g.Ports, func(p uint16) bool { return slices.Contains(own, p) })
		if down && mine {
			st = scsi.ALUAUnavailable
		}
		out[g.ID] = st
	}
	return out
}

// reconcileALUALocked sets every iSCSI target's and SRP port's port group
// states to what c and the failing namespaces ask for, where the live
// state differs.
func (r *Running) reconcileALUALocked(c *Config) error {
	var errs []error
	set := func(live []scsi.PortGroupConfig, want map[uint16]scsi.ALUAState, apply func(id uint16, st scsi.ALUAState) error) {
		for _, g := range slices.Sorted(maps.Keys(want)) {
			i := slices.IndexFunc(live, func(l scsi.PortGroupConfig) bool { return l.ID == g })
			if i >= 0 && live[i].State == want[g] {
				continue
			}
			if i < 0 && want[g] == scsi.ALUAActiveOptimized {
				continue // the implicit group, not shown: active/optimized
			}
			if err := apply(g, want[g]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if ic := c.ISCSI; ic != nil && r.ISCSI != nil {
		want := aluaWant(ic.PortGroups, ic.ownPorts(), r.scsiDown(ic.allLUNs()))
		for _, t := range ic.Targets {
			live, err := r.ISCSI.PortGroups(t.IQN)
			if err != nil {
				continue // not served
			}
			set(live, want, func(id uint16, st scsi.ALUAState) error { return r.ISCSI.SetPortGroupState(t.IQN, id, st) })
		}
	}
	if sc := c.SRP; sc != nil && r.SRP != nil {
		want := aluaWant(sc.PortGroups, sc.ownPorts(), r.scsiDown(sc.allLUNs()))
		for _, pt := range sc.Ports {
			id, err := srpPortID(pt)
			if err != nil {
				continue
			}
			port := r.SRP.Port(id)
			if port == nil {
				continue
			}
			set(port.PortGroups(), want, port.SetPortGroupState)
		}
	}
	return errors.Join(errs...)
}

// reconcileLocked sets the live ANA states of every port and the ALUA
// states of every SCSI target to what the model and the failing
// namespaces ask for, where they differ.
func (r *Running) reconcileLocked() error {
	var errs []error
	for i := range r.cfg.Ports {
		pc := &r.cfg.Ports[i]
		port := r.T.Port(pc.PortID)
		if pc.Disabled || port == nil {
			continue
		}
		want, err := r.anaWant(r.cfg, pc)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		live := port.ANAStates()
		for _, g := range slices.Sorted(maps.Keys(want)) {
			if live[g] == want[g] {
				continue
			}
			if err := port.SetANAState(g, want[g]); err != nil {
				errs = append(errs, fmt.Errorf("port %d ANA group %d: %w", pc.PortID, g, err))
			}
		}
		if _, listed := want[1]; !listed && live[1] != nvmeof.ANAOptimized {
			if err := port.SetANAState(1, nvmeof.ANAOptimized); err != nil {
				errs = append(errs, fmt.Errorf("port %d ANA group 1: %w", pc.PortID, err))
			}
		}
	}
	if err := r.reconcileALUALocked(r.cfg); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// pruneFailingLocked forgets the failing namespaces that are no longer
// served.
func (r *Running) pruneFailingLocked() {
	for k := range r.failing {
		if r.disks[k] == nil {
			delete(r.failing, k)
		}
	}
}
