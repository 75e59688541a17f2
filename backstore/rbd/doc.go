// Package rbd is the Ceph RBD backstore: a backstore.Disk over a librbd
// image, the disk rdisk serves as a Ceph gateway (as ceph-nvmeof's SPDK
// bdev_rbd, tcmu-runner's rbd handler and tgt's bs_rbd do).
//
// # Builds
//
// The files that use librbd (cgo, github.com/ceph/go-ceph pinned at
// v0.34.0) carry the build tags ceph and linux; go-ceph also needs its
// release tag, pacific for Debian 12's Ceph 16:
//
//	apt-get install librbd-dev librados-dev
//	CGO_ENABLED=1 go build -tags ceph,pacific ./cmd/rdisk
//
// In the default build (pure Go, CGO_ENABLED=0 too) the package holds
// Config, ParseURI and Validate, so a configuration naming an rbd device
// is checked, and Open returns ErrNotBuilt with the command above.
// The binary needs librbd1 and librados2 at run time.
//
// # I/O
//
// Every operation goes through librbd's aio API (rbd_aio_read/readv,
// write/writev, flush, discard, write_zeroes, compare_and_write) from a
// small C shim: the completion's argument is a cgo.Handle of a slot from
// a table that grows up to Config.MaxInFlight and is then reused.
// Completions carry no callback: librbd queues them on the image and
// signals an eventfd (rbd_set_image_notification), which one reaper
// goroutine waits on through the netpoller; it collects up to 64
// completions per cgo call (rbd_poll_io_events) and runs AsyncIO.Done
// for each. So librbd's completion thread never enters Go (a cgo
// callback needs a P, and waits for one while the queue goroutines hold
// them), and the gateway spends less CPU and fewer context switches per
// I/O. (Pacific's compare_and_write never signals the eventfd: it keeps
// a callback, as does everything when the eventfd cannot be set up or
// RDISK_RBD_COMPLETIONS=callback is in the environment, for comparison;
// the callback hands the slot to a completion goroutine.) No goroutine
// or thread waits per I/O in flight, and nothing is allocated per I/O:
// the caller's buffers are pinned (runtime.Pinner) while librbd holds
// them and the iovec arrays are C memory of the slot. The synchronous
// methods (ReadAt, WriteAt, ...) are Start plus a wait on a pooled
// request.
//
// FUA: with rbd_cache off (the lab's conf, and what a gateway should run)
// an acknowledged write is on the OSDs; with rbd_cache on, a FUA write
// is followed by a flush before it completes. Discarded ranges read back
// zeroes (Traits.ZeroesAfterDiscard) only when rbd_skip_partial_discard
// is false (its default is true: partial discards are then skipped).
//
// The image is opened with rados_set_osdmap_full_try, so that a write to
// a full pool fails at once with ENOSPC (or EDQUOT at a quota), which maps
// to backstore.ErrNoSpace, instead of waiting paused in the client until
// the op timeout.
//
// # Errors
//
// librbd's errors become *Error values naming the step and the image;
// errors.Is matches the errno and the backstore sentinel: ENOSPC and
// EDQUOT are ErrNoSpace, ETIMEDOUT (past Config.OpTimeout, which sets
// rados_osd_op_timeout and rados_mon_op_timeout) is ErrTimeout,
// ESHUTDOWN (Ceph's EBLOCKLISTED: this client was blocklisted) is
// ErrFenced, EROFS is ErrReadOnly. Bad ranges are *backstore.RangeError.
//
// # Several gateways: lock modes
//
// The same image is served by two or more rdisk processes (multipath:
// hosts pick a path by ANA/ALUA state, and during a failover both paths
// may carry I/O for a while). With the exclusive-lock image feature
// (a default of `rbd create`), librbd moves the lock to whichever client
// writes, so alternating writers pass it back and forth on every write.
// ceph-nvmeof's SPDK bdev_rbd opens images without taking any lock and
// relies on the hosts' ANA states; tcmu-runner acquires the lock
// explicitly (rbd_lock_acquire, RBD_LOCK_MODE_EXCLUSIVE) when its ALUA
// group becomes active, breaking (and so blocklisting) the previous
// owner. Config.Lock chooses:
//
//   - shared (the default): no lock at all; the image must not have the
//     exclusive-lock feature (nor object-map, fast-diff, journaling, which
//     need it), and Open refuses one, printing the `rbd feature disable`
//     command. Several gateways write at once without lock traffic, as
//     on a SAN disk; ordering between hosts is the hosts' business (they
//     use one path at a time, and reservations). librbd never blocklists
//     anyone in this mode; only an operator's `ceph osd blocklist add`
//     fences a gateway (I/O then fails with ErrFenced).
//   - exclusive: Open takes the lock with RBD_LOCK_MODE_EXCLUSIVE
//     (librbd then refuses to hand it over), breaking the current owner's
//     lock first: the previous owner is blocklisted and its I/O fails
//     with ErrFenced, so the last gateway opened wins (active/passive).
//   - auto: librbd's cooperative transitions; correct but slow with
//     alternating writers; a dead owner's lock is broken and the owner
//     blocklisted by librbd when another client wants it.
//
// # Size and health
//
// Resize grows the image (rbd_resize; shrinking is refused), Rescan
// re-reads its size, and a header watch (rbd_update_watch) notices a
// resize made elsewhere (`rbd resize`) and calls the WatchSize function
// on a goroutine of the image. Health asks the monitors (no ceph-mgr
// needed): a nearfull or full pool (OSD map flags; POOL_NEAR_FULL,
// POOL_FULL, OSD_NEARFULL, OSD_FULL health checks) raises WarnSpare,
// full also WarnReadOnly, any other health check WarnReliability; usage
// (PercentageUsed, AvailableSpare) needs ceph-mgr's statistics and is
// reported only when they are there. The source reads "synthetic" until
// backstore has a source for clusters.
package rbd
