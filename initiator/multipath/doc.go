// Package multipath is rdisk's host multipath: one blockdev.Device over
// several paths (devices) to one disk, as several rdisk gateways export it.
// Linux's NVMe native multipath (drivers/nvme/host/multipath.c) and
// dm-multipath are the model.
//
// # Paths and selection
//
// A Device is made from Paths, each a name (the URL) and a device. Every
// path must reach the same disk: the same DiskID when the devices implement
// blockdev.Identifier, the same block size and size; New and AddPath refuse
// others. The Device's Info is the paths' common ground: the smallest
// transfer limits, queue count and depth, the capabilities all of them have.
//
// A path is usable while it is live and its access state (from
// blockdev.PathReporter, re-read on every request: an atomic load) is
// optimized, non-optimized or unknown (a device without ANA/ALUA counts as
// optimized). Each request goes to an optimized path if there is one, else
// to a non-optimized one, never to an unusable one. The Policy chooses among
// the paths of the best class: RoundRobin takes the next after the last one
// used (nvme_round_robin_path), QueueDepth the one with the fewest requests
// in flight (nvme_queue_depth_path), ties taken in turn.
//
// # Failover
//
// A request that fails with an error matching blockdev.ErrPath (an ANA or
// ALUA refusal) or blockdev.ErrClosed (a lost connection; an
// initiator.LostError and a fail-fast session's refusals match it) is not
// an error of the request: it goes to the requeue list (nvme_failover_req)
// and is sent again on another path; reads and writes are idempotent. The
// path leaves the selection: after ErrPath it is "pending" until its access
// state was re-read (RefreshAccessState, at once), after a connection loss
// it is "down" and re-read every RecheckInterval; a device that reports no
// access state and lost its connection is "failed" for good (a closed
// blockdev.Device does not come back). A Submit to a path that refuses with
// an error other than a bad request does the same, synchronously.
//
// While no path is usable, requests wait on the requeue list and are sent
// as soon as one is (a path back live, a state change, AddPath). A request
// that waited LossTimeout fails with a *NoPathError, which matches
// blockdev.ErrIO; from then on requests fail at once while no path is
// usable (dm-multipath's no_path_retry), until a path is usable again. When
// every path is gone for good (failed, persistent loss) requests fail at
// once.
//
// Failback needs nothing special: selection reads the current states, so
// once an optimized path is live again new I/O goes to it.
//
// # Flush across gateways
//
// The paths reach one shared store through different gateways, each with
// its own volatile cache: a write acknowledged by gateway A is not made
// durable by a flush sent to gateway B. So a Device remembers which paths
// completed writes (also discard and write-zeroes; not FUA writes) since
// their last flush, and an OpFlush goes to every one of them, completing
// when all did; with no such path it goes to one usable path as any
// request. A flush refused by its path (lost connection, ANA refusal) waits
// for that same path to be usable again (a fail-fast session reconnects to
// the same gateway, as a single-path session does) up to LossTimeout, and
// then fails with an error matching blockdev.ErrIO: the writes that gateway
// acknowledged cannot be promised durable. That loss is reported once; the
// next flush does not wait for the path again. A flush that fails on its
// path for another reason (a media error) leaves the path marked, so the
// next flush tries it again. RemovePath flushes the path it removes when it
// carried writes.
//
// # Requests and buffers
//
// A Device has Queues*QueueDepth preallocated inner requests, one per
// request in flight, so the I/O path allocates nothing. Queues and
// QueueDepth are the smallest among the paths, and a request keeps its
// queue number on every path, so no path queue ever holds more requests
// than it takes: Submit blocks only on the Device's own queue, and a
// completion callback may submit to the same queue without blocking.
//
// AllocBuffer hands out memory usable on every path: a buffer of one path
// (preferring one that cannot register caller memory), registered with
// every other path that implements BufferRegistrar, and bounced through a
// buffer of the path otherwise (a copy per request on that path). The
// per-path buffers are made at a buffer's first use on the path.
package multipath
