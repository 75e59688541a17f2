package target

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rdisk/rdisk/backstore"
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
			if sr, ok := d.(backstore.StatsReporter); ok {
				collectDiskStats(ch, sr.Stats(), s.NQN, nsid)
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
		}
		ch <- prometheus.MustNewConstMetric(descPortListening, prometheus.GaugeValue, up, strconv.Itoa(int(p.PortID)), tr, addr)
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
	}
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
