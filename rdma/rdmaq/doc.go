// Package rdmaq holds rdisk's RDMA queue engines: the machinery every
// RDMA storage protocol needs around one queue pair, written once below
// the protocols so that NVMe-oF, SRP and iSER keep only what their
// messages mean.
//
// TargetQueue is the target side: it owns the receive ring (contiguous, or
// scattered into a header and a page-aligned data area as Linux nvmet does
// for capsules), request slots with their registered data and response
// buffers, one work request ID scheme, the completion loop, back-pressure
// when every slot is busy (received messages wait for a slot instead of
// stalling the loop) and control buffers for messages outside any
// request. A protocol plugs in through TargetHandler, in the style of
// SPDK's transport operations and Linux nvmet's queue_response: Recv
// (parse a message, Admit it to a slot), Start (decode, post data
// transfers with Read), Fetched (data in: execute), Respond (RDMA Write
// the data, Send the response) and Sent (the slot frees).
//
// Disk I/O that may block runs on the protocols' worker pools
// (internal/workers), not in the engine: the NVMe-oF controller core and
// the iSCSI connection share theirs with their TCP transports.
//
// The steady-state data path allocates nothing: work requests live in the
// slots and are copied when posted (rdma's contract).
package rdmaq
