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
// # Paths of a multipath device
//
// With SessionConfig.FailFast a session is one path of a multipath device
// (package initiator/multipath): on a connection loss its requests fail at
// once with a *PathDownError (matching blockdev.ErrPath and
// blockdev.ErrClosed), so the multipath device sends them on another path,
// and it refuses new ones until it reconnected, in the background. Every
// session implements blockdev.PathReporter (its connection state combined
// with its device's ANA/ALUA state: transitioning while reconnecting,
// persistent loss once failed or closed), blockdev.Identifier (its first
// connection's disk identity; a reconnection to another disk fails the
// session) and BufferRegistrar (caller memory, registered with each
// connection or bounced). DialMultipath makes a multipath device over
// fail-fast sessions for tools; the daemon does it for a connect with
// several URLs.
//
// # Daemon and control protocol
//
// A Daemon holds named sessions with their exports. `rdisk connect` and
// friends talk to it over a unix socket (ListenControl makes it 0600 in a
// 0700 directory, and the daemon checks SO_PEERCRED): one JSON Request line
// in, one JSON Response line out, per connection.
//
// A ConnectSpec with several URLs (URLs, and URL when set) makes a
// multipath session: a fail-fast session per URL, reconnecting for as long
// as the session lives, under a multipath.Device whose requests wait at
// most the loss timeout for a usable path. Paths that do not connect at
// first are retried every reconnect delay and join when they connect (a
// path to another disk is refused). SessionInfo.Paths shows each path's
// state, access state and counters; the session's state is "live" (every
// path serves), "degraded" (some do), "reconnecting" (none does: I/O
// waits) or "failed" (I/O fails for want of a path). A single URL makes a
// plain session, and its JSON is what it was.
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
