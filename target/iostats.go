package target

import (
	"strconv"

	"github.com/rdisk/rdisk/backstore"
)

// IOStats are the cumulative I/O counters of what is served, for a live
// view (rdisk admin top): a reader computes rates from two snapshots.
type IOStats struct {
	Namespaces []NamespaceIO `json:"namespaces"`
	// Hosts are the NVMe-oF controllers, iSCSI sessions and SRP channels
	// with their counters.
	Hosts []HostIO `json:"hosts"`
}

// NamespaceIO is one namespace's disk counters.
type NamespaceIO struct {
	Subsystem string `json:"subsystem"`
	NSID      uint32 `json:"nsid"`
	Device    string `json:"device"`
	InFlight  int64  `json:"inflight"`
	// Read, Write and Flush: operations, bytes, errors and total latency.
	Read  OpIO `json:"read"`
	Write OpIO `json:"write"`
	Flush OpIO `json:"flush"`
}

// OpIO are the counters of one operation type.
type OpIO struct {
	Ops          uint64 `json:"ops"`
	Bytes        uint64 `json:"bytes"`
	Errors       uint64 `json:"errors"`
	LatencyNanos uint64 `json:"latency_ns"` // the sum over Ops
}

// HostIO is one host connection's counters.
type HostIO struct {
	// Kind is "nvme", "iscsi" or "srp"; ID names it within its kind (the
	// subsystem and controller ID, the TSIH, the channel ID).
	Kind       string `json:"kind"`
	ID         string `json:"id"`
	Host       string `json:"host"` // host NQN, initiator name or port ID
	Target     string `json:"target"`
	Commands   uint64 `json:"commands"`
	ReadBytes  uint64 `json:"read_bytes"`
	WriteBytes uint64 `json:"write_bytes"`
}

func opIO(s backstore.OpStats) OpIO {
	return OpIO{Ops: s.Ops, Bytes: s.Bytes, Errors: s.Errors, LatencyNanos: uint64(s.Latency.Sum)}
}

// IOStats returns the counters now.
func (r *Running) IOStats() *IOStats {
	st := &IOStats{Namespaces: []NamespaceIO{}, Hosts: []HostIO{}}
	r.mu.Lock()
	for _, s := range r.cfg.Subsystems {
		for _, ns := range s.Namespaces {
			d := r.disks[nsKey{s.NQN, ns.NSID}]
			sr, ok := d.(backstore.StatsReporter)
			if !ok {
				continue
			}
			ds := sr.Stats()
			st.Namespaces = append(st.Namespaces, NamespaceIO{Subsystem: s.NQN, NSID: ns.NSID, Device: ns.Device.Path,
				InFlight: ds.InFlight, Read: opIO(ds.Read), Write: opIO(ds.Write), Flush: opIO(ds.Flush)})
		}
	}
	r.mu.Unlock()
	for _, c := range r.T.Controllers() {
		st.Hosts = append(st.Hosts, HostIO{Kind: "nvme", ID: c.Subsystem + "/" + strconv.FormatUint(uint64(c.CNTLID), 10), Host: c.HostNQN, Target: c.Subsystem,
			Commands: c.Commands, ReadBytes: c.ReadBytes, WriteBytes: c.WriteBytes})
	}
	if r.ISCSI != nil {
		for _, s := range r.ISCSI.Sessions() {
			if s.Discovery {
				continue
			}
			st.Hosts = append(st.Hosts, HostIO{Kind: "iscsi", ID: strconv.FormatUint(uint64(s.TSIH), 10), Host: s.Initiator, Target: s.Target,
				Commands: s.Commands, ReadBytes: s.ReadBytes, WriteBytes: s.WriteBytes})
		}
	}
	if r.SRP != nil {
		for _, c := range r.SRP.Channels() {
			st.Hosts = append(st.Hosts, HostIO{Kind: "srp", ID: strconv.FormatUint(c.ID, 10), Host: c.Initiator, Target: c.Port,
				Commands: c.Commands, ReadBytes: c.ReadBytes, WriteBytes: c.WriteBytes})
		}
	}
	return st
}
