// Package backstore holds the disks that rdisk exports: the block stores
// under the NVMe-oF, iSER and SRP targets.
//
// A Disk reads into and writes from buffers that the caller owns (registered
// RDMA memory): a disk never allocates a buffer per I/O, never keeps a
// buffer after a call returns, and copies nothing beyond what the kernel
// does. Offsets and lengths are in bytes and must be multiples of the block
// size and inside the disk; anything else returns a *RangeError, which the
// protocol cores map to their status codes (NVMe LBA Out of Range, SCSI
// LOGICAL BLOCK ADDRESS OUT OF RANGE). No input makes a disk panic:
// negative offsets and lengths and sums that overflow are range errors too.
//
// Kinds:
//   - Mem (NewMem): a sparse RAM disk, allocated in chunks on first write;
//     Discard and WriteZeroes free chunks.
//   - File (OpenFile): a regular file; pread/pwrite, optional O_DIRECT,
//     discard by hole punching, write-zeroes by fallocate, flush by
//     fdatasync, FUA by RWF_DSYNC writes; an AsyncDisk whose Start runs on
//     an io_uring (or, where io_uring is refused, on a few sync workers;
//     IOPath says which).
//   - Block (OpenBlock): a block device; O_DIRECT and O_EXCL by default,
//     size and block size from the device, write-zeroes by BLKZEROOUT, and
//     health from the device's SMART data; an AsyncDisk as File is.
//   - Null (NewNull): drops writes and reads zeroes, for benchmarking the
//     protocol path.
//
// Spec and Open make a disk from a configuration entry.
//
// Optional capabilities are found by interface assertion: VectoredDisk
// (scatter lists), Discarder, ZeroWriter and HealthReporter. A Null disk has
// neither Discarder nor ZeroWriter; a read-only disk has them all but
// returns ErrReadOnly.
//
// Capacity can change while a disk serves: Resizer (Mem, File and Null
// grow; only Null shrinks; Block refuses and says to resize the device) and
// Rescanner (File and Block re-read the size set outside rdisk). Size is
// safe to call meanwhile, and a request sees the old size or the new one.
//
// Every disk keeps Stats (operations, bytes, errors, latency histograms
// whose bucket bounds LatencyBucketBounds lists, and a gauge of the
// requests in flight) with atomic counters, and reports Health: synthetic
// for Mem, File and Null (their own counters, never a warning), SMART for
// Block (ATA, NVMe or SCSI, mapped to one neutral struct). A device without SMART says so with
// Health.Supported false and an error wrapping ErrUnsupported.
//
// All disks are safe for concurrent use by many queues. Close waits for the
// requests in flight on File and Block; I/O after Close returns ErrClosed.
package backstore
