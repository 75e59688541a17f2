// Command rdisk is the rdisk storage target, initiator and benchmark tool,
// and the only place that parses flags: it maps them to the packages
// below, wiring every dependency (RDMA provider, disks, loggers,
// GOMAXPROCS hooks) explicitly.
//
//	rdisk target                  NVMe-oF, iSER/iSCSI and SRP target (target/, nvmeof/target, iser/target, srp/target)
//	rdisk discover | nvme | bench host-side tools (nvmeof/host, iser/initiator, srp/initiator, internal/bench)
//	rdisk connect | daemon | list | disconnect | cp
//	                              the initiator daemon and its NBD/FUSE exports (initiator/)
//	rdisk rdma-perf server|client perftest-style transport measurement (rdma/rdmaperf)
//
// procs.go sizes GOMAXPROCS from the connected queues (--cpus).
package main
