// Package initiator is rdisk's initiator daemon: sessions to remote disks
// that reconnect, exported locally through an NBD server (package nbd) and
// a FUSE file (package fusefile), managed over a root-only control socket.
//
// # Sessions
//
// A Session is a blockdev.Device over a connection to a remote disk,
// opened from a URL by a Dialer. Dialers come from the caller (Dialers maps
// URL schemes to them: the command line wires "nvme" to the NVMe-oF host),
// so there is no global registry.
//
// When the connection fails (a request completes with an error matching
// blockdev.ErrClosed, Submit refuses with it, or the device's Done channel
// closes), the session closes the dead device, which completes what was in
// flight, queues those requests and every new one, and dials again every
// ReconnectDelay. On success it resubmits the queue, oldest first; after
// LossTimeout (nvme-cli's ctrl_loss_tmo) it fails the queue and all later
// I/O with a *LostError, which matches blockdev.ErrIO: frontends report EIO.
// Reads and writes are idempotent, so a request that may have reached the
// old target is simply sent again; flush and FUA flags travel unchanged, so a
// flush completes only once the writes acknowledged before it are durable on
// the connection that acknowledged the flush.
//
// Frontends hold session Buffers across reconnects. A buffer's memory is
// that of a buffer of the connection it was allocated on; on a later
// connection it is registered again when the device implements
// BufferRegistrar, otherwise the data is bounced through a buffer of the
// new device (a copy per request, only after a reconnect).
//
// # Daemon and control protocol
//
// A Daemon holds named sessions with their exports. `rdisk connect` and
// friends talk to it over a unix socket (ListenControl makes it 0600 in a
// 0700 directory, and the daemon checks SO_PEERCRED): one JSON Request line
// in, one JSON Response line out, per connection.
//
// # Metrics and stopping
//
// Daemon.SessionStats reads each session's counters (requests and bytes
// completed, errors, reconnects, I/Os waiting for a lost connection) for a
// metrics scrape; the I/O path only adds to atomics. Sessions log one line
// when connected, lost, reconnected, given up and disconnected, with the
// URL and the reason, and none per I/O (but the first ten I/O errors).
//
// Daemon.Shutdown stops gracefully: no more control requests, then for
// each session its exports stop, the requests in flight complete, the
// remote device is flushed and the session disconnects; a *ShutdownError
// names the sessions that did not stop cleanly (a failed flush, a context
// that ended first). Daemon.Close is the forced stop.
package initiator
