package target

import (
	"maps"
	"net"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rdisk/rdisk/backstore"
	"github.com/rdisk/rdisk/rdma"
	"github.com/rdisk/rdisk/rdma/iwarp"
	"github.com/rdisk/rdisk/scsi"
)

// Prometheus metrics of a running target. Everything is read at scrape
// time from the counters the target keeps anyway (the disks' statistics,
// the protocol targets' counters): collecting costs the I/O path nothing.
// Labels are the model's names (subsystem NQN, NSID, port, target IQN,
// host NQN), never per I/O.

// The latency histogram's buckets: the disks' power-of-two microsecond
// buckets (backstore.LatencyBuckets), from 8 µs to about 4.2 s; faster
// operations count in the first bucket.
const firstLatencyBucket = 3

var (
	descNSOps = prometheus.NewDesc("rdisk_namespace_ops_total",
		"Operations that reached a namespace's disk, by operation (NVMe-oF and SCSI I/O together: one disk).",
		[]string{"subsystem", "nsid", "op"}, nil)
	descNSBytes = prometheus.NewDesc("rdisk_namespace_bytes_total",
		"Bytes of the successful operations of a namespace's disk, by operation.",
		[]string{"subsystem", "nsid", "op"}, nil)
	descNSLatency = prometheus.NewDesc("rdisk_namespace_latency_seconds",
		"Latency of a namespace's disk operations, by operation.",
		[]string{"subsystem", "nsid", "op"}, nil)
	descNSMediaErrors = prometheus.NewDesc("rdisk_namespace_disk_errors_total",
		"Operations that failed on a namespace's disk (I/O errors), by operation.",
		[]string{"subsystem", "nsid", "op"}, nil)
	descNSRejected = prometheus.NewDesc("rdisk_namespace_rejected_total",
		"Requests a namespace's disk refused before any I/O (range, read-only, after close).",
		[]string{"subsystem", "nsid"}, nil)
	descNSSize = prometheus.NewDesc("rdisk_namespace_size_bytes",
		"Capacity of a namespace.", []string{"subsystem", "nsid"}, nil)
	descNSInfo = prometheus.NewDesc("rdisk_namespace_info",
		"A served namespace (1), with its device and state.", []string{"subsystem", "nsid", "device", "enabled", "read_only"}, nil)
	descHealthWarning = prometheus.NewDesc("rdisk_backstore_health_critical_warning",
		"The disk's critical warning bits (NVMe SMART byte 0).", []string{"subsystem", "nsid"}, nil)
	descHealthUsed = prometheus.NewDesc("rdisk_backstore_health_percentage_used",
		"The disk's estimated life used, in percent.", []string{"subsystem", "nsid"}, nil)
	descHealthSpare = prometheus.NewDesc("rdisk_backstore_health_available_spare",
		"The disk's available spare, in percent.", []string{"subsystem", "nsid"}, nil)
	descHealthTemp = prometheus.NewDesc("rdisk_backstore_health_temperature_celsius",
		"The disk's temperature.", []string{"subsystem", "nsid"}, nil)
	descHealthMedia = prometheus.NewDesc("rdisk_backstore_health_media_errors",
		"The disk's unrecovered media errors.", []string{"subsystem", "nsid"}, nil)
	descControllers = prometheus.NewDesc("rdisk_nvme_controllers",
		"Connected NVMe-oF controllers.", []string{"subsystem"}, nil)
	descHostQueues = prometheus.NewDesc("rdisk_nvme_host_io_queues",
		"I/O queues connected by a host.", []string{"subsystem", "hostnqn", "trtype"}, nil)
	descHostCommands = prometheus.NewDesc("rdisk_nvme_host_commands_total",
		"I/O commands completed for a host's connected controllers.", []string{"subsystem", "hostnqn"}, nil)
	descISCSISessions = prometheus.NewDesc("rdisk_iscsi_sessions",
		"Logged-in iSCSI sessions.", []string{"target"}, nil)
	descSRPChannels = prometheus.NewDesc("rdisk_srp_channels",
		"Logged-in SRP channels.", []string{"port"}, nil)
	descPortListening = prometheus.NewDesc("rdisk_port_listening",
		"An NVMe-oF port of the model: 1 listening, 0 disabled.", []string{"port", "trtype", "addr"}, nil)
	descANAState = prometheus.NewDesc("rdisk_ana_group_state",
		"The ANA state of a group on an NVMe-oF port (1 for the state it is in).", []string{"port", "group", "state"}, nil)
	descNSHealthy = prometheus.NewDesc("rdisk_namespace_healthy",
		"With rdisk_gateway.follow_health: 1 while a namespace's disk is healthy, 0 while it fails and its ANA groups are held inaccessible.",
		[]string{"subsystem", "nsid"}, nil)
	descNSInFlight = prometheus.NewDesc("rdisk_namespace_inflight",
		"Requests in flight on a namespace's disk.", []string{"subsystem", "nsid"}, nil)
	descNSErrors = prometheus.NewDesc("rdisk_namespace_errors_total",
		"Commands to a namespace completed with an error, by protocol and class (NVMe status code type; SCSI sense key or status).",
		[]string{"subsystem", "nsid", "protocol", "class"}, nil)
	descNVMeInFlight = prometheus.NewDesc("rdisk_nvme_namespace_inflight",
		"NVMe-oF I/O commands received for a namespace and not yet completed.", []string{"subsystem", "nsid"}, nil)
	descConnAccepted = prometheus.NewDesc("rdisk_port_connections_accepted_total",
		"Transport connections accepted (transport nvme-rdma, nvme-tcp, iscsi-tcp, iscsi-iser; srp: logins; port: the NVMe-oF port ID, the SCSI transports' addresses).",
		[]string{"transport", "port"}, nil)
	descConnRejected = prometheus.NewDesc("rdisk_port_connections_rejected_total",
		"Connections or logins refused, by reason.", []string{"transport", "port", "reason"}, nil)
	descConnLive = prometheus.NewDesc("rdisk_port_connections",
		"Connections (NVMe-oF queues, iSCSI sessions, SRP channels) now.", []string{"transport", "port"}, nil)
	descKeepAlive = prometheus.NewDesc("rdisk_nvme_keepalive_expired_total",
		"NVMe-oF controllers torn down because their host sent nothing for KATO.", nil, nil)
	descNVMeConnectRejected = prometheus.NewDesc("rdisk_nvme_connect_rejected_total",
		"NVMe-oF Fabrics Connect commands refused, by reason.", []string{"reason"}, nil)
	descAuthFailures = prometheus.NewDesc("rdisk_auth_failures_total",
		"Failed authentications (NVMe DH-HMAC-CHAP, iSCSI CHAP).", []string{"protocol"}, nil)
	descControllersCreated = prometheus.NewDesc("rdisk_nvme_controllers_created_total",
		"NVMe-oF controllers created (discovery included).", nil, nil)
	descSessionsClosed = prometheus.NewDesc("rdisk_sessions_closed_total",
		"iSCSI sessions and SRP channels ended, by reason.", []string{"protocol", "reason"}, nil)
	descIWARPConns = prometheus.NewDesc("rdisk_iwarp_connections",
		"Connected iWARP QPs of the software RDMA provider.", nil, nil)
	descIWARPConnRejects = prometheus.NewDesc("rdisk_iwarp_connect_rejects_total",
		"iWARP connection setups that failed, by reason.", []string{"reason"}, nil)
	descIWARPFPDUs = prometheus.NewDesc("rdisk_iwarp_fpdus_total",
		"iWARP FPDUs, by direction.", []string{"dir"}, nil)
	descIWARPBytes = prometheus.NewDesc("rdisk_iwarp_bytes_total",
		"iWARP data payload bytes, by direction; placed: tagged payload placed into registered memory.", []string{"dir"}, nil)
	descIWARPTerminates = prometheus.NewDesc("rdisk_iwarp_terminates_total",
		"iWARP Terminate messages, by direction and reason (layer, error type and code).", []string{"dir", "reason"}, nil)
	descIWARPCRC = prometheus.NewDesc("rdisk_iwarp_crc_errors_total",
		"iWARP FPDUs received with a bad MPA CRC.", nil, nil)
	descIWARPRetrans = prometheus.NewDesc("rdisk_iwarp_tcp_retransmits_total",
		"TCP retransmissions of the provider's connections.", nil, nil)
)

// diskOps names the operations of backstore.Stats.
var diskOps = [...]string{"read", "write", "flush", "discard", "write_zeroes"}

// Collector returns a Prometheus collector of r.
func (r *Running) Collector() prometheus.Collector { return collector{r} }

type collector struct{ r *Running }

func (c collector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

func (c collector) Collect(ch chan<- prometheus.Metric) {
	r := c.r
	r.mu.Lock()
	cfg := r.cfg.clone()
	disks := make(map[nsKey]backstore.Disk, len(r.disks))
	for k, d := range r.disks {
		disks[k] = d
	}
	failing := maps.Clone(r.failing)
	lus := make(map[nsKey]*scsi.LU, len(r.lus))
	for k, lu := range r.lus {
		lus[k] = lu
	}
	r.mu.Unlock()
	for _, s := range cfg.Subsystems {
		for _, ns := range s.Namespaces {
			d := disks[nsKey{s.NQN, ns.NSID}]
			if d == nil {
				continue
			}
			nsid := strconv.FormatUint(uint64(ns.NSID), 10)
			ch <- prometheus.MustNewConstMetric(descNSInfo, prometheus.GaugeValue, 1, s.NQN, nsid, ns.Device.Path,
				strconv.FormatBool(ns.Enable != 0), strconv.FormatBool(d.ReadOnly()))
			ch <- prometheus.MustNewConstMetric(descNSSize, prometheus.GaugeValue, float64(d.Size()), s.NQN, nsid)
			if r.Monitoring() {
				healthy := 1.0
				if _, bad := failing[nsKey{s.NQN, ns.NSID}]; bad {
					healthy = 0
				}
				ch <- prometheus.MustNewConstMetric(descNSHealthy, prometheus.GaugeValue, healthy, s.NQN, nsid)
			}
			if sr, ok := d.(backstore.StatsReporter); ok {
				collectDiskStats(ch, sr.Stats(), s.NQN, nsid)
			}
			if sub := r.T.Subsystem(s.NQN); sub != nil {
				for _, st := range sub.NamespaceStats() {
					if st.NSID != ns.NSID {
						continue
					}
					ch <- prometheus.MustNewConstMetric(descNVMeInFlight, prometheus.GaugeValue, float64(st.InFlight), s.NQN, nsid)
					for class, n := range st.Errors {
						ch <- prometheus.MustNewConstMetric(descNSErrors, prometheus.CounterValue, float64(n), s.NQN, nsid, "nvme", class)
					}
				}
			}
			if lu := lus[nsKey{s.NQN, ns.NSID}]; lu != nil {
				es := lu.ErrorStats()
				for class, n := range es.BySenseKey {
					ch <- prometheus.MustNewConstMetric(descNSErrors, prometheus.CounterValue, float64(n), s.NQN, nsid, "scsi", class)
				}
				for class, n := range es.ByStatus {
					ch <- prometheus.MustNewConstMetric(descNSErrors, prometheus.CounterValue, float64(n), s.NQN, nsid, "scsi", class)
				}
			}
			if hr, ok := d.(backstore.HealthReporter); ok {
				if h, err := hr.Health(); err == nil && h.Supported {
					collectHealth(ch, h, s.NQN, nsid)
				}
			}
		}
	}
	for _, p := range cfg.Ports {
		tr := p.Addr.TrType
		if tr == "" {
			tr = "rdma"
		}
		addr, up := p.Addr.TrAddr+":"+p.Addr.TrSvcID, 0.0
		if lp := r.T.Port(p.PortID); lp != nil {
			addr, up = lp.Addr().String(), 1
			for g, st := range lp.ANAStates() {
				ch <- prometheus.MustNewConstMetric(descANAState, prometheus.GaugeValue, 1, strconv.Itoa(int(p.PortID)), strconv.Itoa(int(g)), st.String())
			}
		}
		ch <- prometheus.MustNewConstMetric(descPortListening, prometheus.GaugeValue, up, strconv.Itoa(int(p.PortID)), tr, addr)
	}
	nst := r.T.Stats()
	for _, p := range nst.Ports {
		tr, port := "nvme-"+p.Transport, strconv.Itoa(int(p.ID))
		ch <- prometheus.MustNewConstMetric(descConnAccepted, prometheus.CounterValue, float64(p.Accepted), tr, port)
		ch <- prometheus.MustNewConstMetric(descConnLive, prometheus.GaugeValue, float64(p.Live), tr, port)
		for reason, n := range p.Rejected {
			ch <- prometheus.MustNewConstMetric(descConnRejected, prometheus.CounterValue, float64(n), tr, port, reason)
		}
	}
	ch <- prometheus.MustNewConstMetric(descKeepAlive, prometheus.CounterValue, float64(nst.KeepAliveExpired))
	ch <- prometheus.MustNewConstMetric(descControllersCreated, prometheus.CounterValue, float64(nst.ControllersCreated))
	ch <- prometheus.MustNewConstMetric(descAuthFailures, prometheus.CounterValue, float64(nst.AuthFailures), "nvme")
	for reason, n := range nst.ConnectRejected {
		ch <- prometheus.MustNewConstMetric(descNVMeConnectRejected, prometheus.CounterValue, float64(n), reason)
	}
	ctrls := map[string]int{}
	type hostKey struct{ sub, host, tr string }
	queues := map[hostKey]int{}
	commands := map[[2]string]uint64{}
	for _, s := range cfg.Subsystems {
		ctrls[s.NQN] = 0
	}
	for _, ci := range r.T.Controllers() {
		ctrls[ci.Subsystem]++
		queues[hostKey{ci.Subsystem, ci.HostNQN, ci.Transport}] += ci.IOQueues
		commands[[2]string{ci.Subsystem, ci.HostNQN}] += ci.Commands
	}
	for sub, n := range ctrls {
		ch <- prometheus.MustNewConstMetric(descControllers, prometheus.GaugeValue, float64(n), sub)
	}
	for k, n := range queues {
		ch <- prometheus.MustNewConstMetric(descHostQueues, prometheus.GaugeValue, float64(n), k.sub, k.host, k.tr)
	}
	for k, n := range commands {
		ch <- prometheus.MustNewConstMetric(descHostCommands, prometheus.CounterValue, float64(n), k[0], k[1])
	}
	if r.ISCSI != nil && cfg.ISCSI != nil {
		sessions := map[string]int{}
		for _, t := range cfg.ISCSI.Targets {
			sessions[t.IQN] = 0
		}
		for _, s := range r.ISCSI.Sessions() {
			if !s.Discovery {
				sessions[s.Target]++
			}
		}
		for t, n := range sessions {
			ch <- prometheus.MustNewConstMetric(descISCSISessions, prometheus.GaugeValue, float64(n), t)
		}
		ist := r.ISCSI.Stats()
		portals := addrList(r.ISCSIPortals)
		for tr, n := range ist.Connections {
			ch <- prometheus.MustNewConstMetric(descConnAccepted, prometheus.CounterValue, float64(n), "iscsi-"+tr, portals)
		}
		for reason, n := range ist.LoginRejects {
			ch <- prometheus.MustNewConstMetric(descConnRejected, prometheus.CounterValue, float64(n), "iscsi", portals, reason)
		}
		ch <- prometheus.MustNewConstMetric(descConnLive, prometheus.GaugeValue, float64(ist.Live), "iscsi", portals)
		ch <- prometheus.MustNewConstMetric(descAuthFailures, prometheus.CounterValue, float64(ist.LoginRejects["auth_failed"]), "iscsi")
		for reason, n := range ist.SessionsClosed {
			ch <- prometheus.MustNewConstMetric(descSessionsClosed, prometheus.CounterValue, float64(n), "iscsi", reason)
		}
	}
	if r.SRP != nil && cfg.SRP != nil {
		chans := map[string]int{}
		for _, p := range cfg.SRP.Ports {
			chans[srpKey(p)] = 0
		}
		for _, c := range r.SRP.Channels() {
			chans[c.Port]++
		}
		for p, n := range chans {
			ch <- prometheus.MustNewConstMetric(descSRPChannels, prometheus.GaugeValue, float64(n), p)
		}
		sst := r.SRP.Stats()
		addrs := addrList(r.SRPAddrs)
		ch <- prometheus.MustNewConstMetric(descConnAccepted, prometheus.CounterValue, float64(sst.Logins), "srp", addrs)
		for reason, n := range sst.LoginRejectsByReason {
			ch <- prometheus.MustNewConstMetric(descConnRejected, prometheus.CounterValue, float64(n), "srp", addrs, reason)
		}
		ch <- prometheus.MustNewConstMetric(descConnLive, prometheus.GaugeValue, float64(sst.Live), "srp", addrs)
		for reason, n := range sst.ChannelsClosed {
			ch <- prometheus.MustNewConstMetric(descSessionsClosed, prometheus.CounterValue, float64(n), "srp", reason)
		}
	}
	if ip := r.iwarpStats(); ip != nil {
		collectIWARP(ch, ip.Stats())
	}
}

// iwarpStats is the software iWARP provider serving the target: the
// target's own, else the first port's or SCSI section's (rdisk_rdma);
// rdisk target opens one of each kind, so there is at most one.
func (r *Running) iwarpStats() interface{ Stats() iwarp.Stats } {
	provs := []rdma.Provider{r.p}
	for _, port := range r.T.Ports() {
		provs = append(provs, port.Provider())
	}
	for _, p := range append(provs, r.iscsiP, r.srpP) {
		if ip, ok := p.(interface{ Stats() iwarp.Stats }); ok {
			return ip
		}
	}
	return nil
}

// addrList is the port label of the SCSI transports: their listening
// addresses.
func addrList(as []net.Addr) string {
	var b strings.Builder
	for i, a := range as {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(a.String())
	}
	return b.String()
}

func collectIWARP(ch chan<- prometheus.Metric, st iwarp.Stats) {
	ch <- prometheus.MustNewConstMetric(descIWARPConns, prometheus.GaugeValue, float64(st.ConnectionsActive))
	for reason, n := range st.ConnectRejects {
		ch <- prometheus.MustNewConstMetric(descIWARPConnRejects, prometheus.CounterValue, float64(n), reason)
	}
	ch <- prometheus.MustNewConstMetric(descIWARPFPDUs, prometheus.CounterValue, float64(st.FPDUsSent), "tx")
	ch <- prometheus.MustNewConstMetric(descIWARPFPDUs, prometheus.CounterValue, float64(st.FPDUsReceived), "rx")
	ch <- prometheus.MustNewConstMetric(descIWARPBytes, prometheus.CounterValue, float64(st.BytesSent), "tx")
	ch <- prometheus.MustNewConstMetric(descIWARPBytes, prometheus.CounterValue, float64(st.BytesReceived), "rx")
	ch <- prometheus.MustNewConstMetric(descIWARPBytes, prometheus.CounterValue, float64(st.BytesPlaced), "placed")
	for reason, n := range st.TerminatesSent {
		ch <- prometheus.MustNewConstMetric(descIWARPTerminates, prometheus.CounterValue, float64(n), "tx", reason)
	}
	for reason, n := range st.TerminatesReceived {
		ch <- prometheus.MustNewConstMetric(descIWARPTerminates, prometheus.CounterValue, float64(n), "rx", reason)
	}
	ch <- prometheus.MustNewConstMetric(descIWARPCRC, prometheus.CounterValue, float64(st.CRCErrors))
	ch <- prometheus.MustNewConstMetric(descIWARPRetrans, prometheus.CounterValue, float64(st.Retransmits))
}

func collectDiskStats(ch chan<- prometheus.Metric, st backstore.Stats, sub, nsid string) {
	for i, op := range []*backstore.OpStats{&st.Read, &st.Write, &st.Flush, &st.Discard, &st.WriteZeroes} {
		name := diskOps[i]
		ch <- prometheus.MustNewConstMetric(descNSOps, prometheus.CounterValue, float64(op.Ops), sub, nsid, name)
		ch <- prometheus.MustNewConstMetric(descNSBytes, prometheus.CounterValue, float64(op.Bytes), sub, nsid, name)
		ch <- prometheus.MustNewConstMetric(descNSMediaErrors, prometheus.CounterValue, float64(op.Errors), sub, nsid, name)
		buckets := make(map[float64]uint64, backstore.LatencyBuckets-firstLatencyBucket)
		var cum uint64
		for b := 0; b < backstore.LatencyBuckets-1; b++ {
			cum += op.Latency.Buckets[b]
			if b >= firstLatencyBucket {
				buckets[backstore.LatencyBucketUpper(b).Seconds()] = cum
			}
		}
		cum += op.Latency.Buckets[backstore.LatencyBuckets-1]
		ch <- prometheus.MustNewConstHistogram(descNSLatency, cum, op.Latency.Sum.Seconds(), buckets, sub, nsid, name)
	}
	ch <- prometheus.MustNewConstMetric(descNSRejected, prometheus.CounterValue, float64(st.Rejected), sub, nsid)
	ch <- prometheus.MustNewConstMetric(descNSInFlight, prometheus.GaugeValue, float64(st.InFlight), sub, nsid)
}

func collectHealth(ch chan<- prometheus.Metric, h backstore.Health, sub, nsid string) {
	ch <- prometheus.MustNewConstMetric(descHealthWarning, prometheus.GaugeValue, float64(h.CriticalWarning), sub, nsid)
	if h.Valid&backstore.FieldTemperature != 0 {
		ch <- prometheus.MustNewConstMetric(descHealthTemp, prometheus.GaugeValue, float64(h.Temperature), sub, nsid)
	}
	ch <- prometheus.MustNewConstMetric(descHealthUsed, prometheus.GaugeValue, float64(h.PercentageUsed), sub, nsid)
	ch <- prometheus.MustNewConstMetric(descHealthSpare, prometheus.GaugeValue, float64(h.AvailableSpare), sub, nsid)
	ch <- prometheus.MustNewConstMetric(descHealthMedia, prometheus.GaugeValue, float64(h.MediaErrors), sub, nsid)
}
