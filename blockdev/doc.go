// Package blockdev is the block-device interface that rdisk's host libraries
// (NVMe-oF now; iSER and SRP later) implement and that its consumers drive:
// `rdisk bench`, the NBD and FUSE frontends and `rdisk cp`. It knows no
// protocol.
//
// # Shape
//
// A Device is a disk of Info.Size bytes in blocks of Info.BlockSize, reached
// through Info.Queues submission queues of Info.QueueDepth requests each. A
// caller fills a Request (operation, byte offset and length, a Buffer the
// device handed out, a completion callback or channel) and calls Submit; the
// device completes it later, exactly once, by calling Request.Done or sending
// the request on Request.C. Nothing in the submission or completion path
// allocates, so a caller that reuses its Requests and Buffers does no
// allocation per I/O.
//
// # Buffers
//
// Data moves only through Buffers obtained from the device's AllocBuffer:
// memory the device has registered with its transport (an RDMA memory region
// for the RDMA protocols), so the transport reads and writes it in place with
// no copy. A Request names the bytes Buf.Bytes()[BufOff:BufOff+Length]. From
// Submit until the completion the device owns those bytes: the caller must
// not read or write them (for a Read they are being filled, for a Write they
// may be read at any time until the completion). After the completion they
// are the caller's again. A Buffer belongs to the device that made it and is
// freed with Release once no request uses it.
//
// ReadAt and WriteAt are simple blocking helpers for callers that have plain
// memory: they copy through a Buffer of their own and split at the device's
// transfer limit. They allocate and are meant for tools and tests, not for
// the I/O path.
//
// # Concurrency
//
// A Device's methods are safe for concurrent use. Submit blocks while the
// chosen queue has QueueDepth requests in flight (back-pressure), and never
// otherwise; a completion frees its slot before the callback runs, so a
// callback may submit the next request to the same queue without blocking.
// Callbacks run on a goroutine of the device, one per queue: they must be
// quick and must not wait for other completions of that queue. Completion
// channels receive with a blocking send, so a channel needs room for every
// request that may complete on it at once.
//
// Errors are returned through Request.Err; the sentinels below let callers
// classify them without knowing the protocol (errors.Is).
package blockdev
