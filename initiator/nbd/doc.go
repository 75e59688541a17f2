// Package nbd is an NBD (Network Block Device) server over any
// blockdev.Device, for clients such as qemu, fio's nbd engine (libnbd),
// nbdkit's nbd plugin and the Linux kernel's nbd-client.
//
// # Protocol
//
// The fixed newstyle handshake with NBD_OPT_EXPORT_NAME, NBD_OPT_GO,
// NBD_OPT_INFO (export size and flags, name, description and block size
// constraints), NBD_OPT_LIST and NBD_OPT_ABORT; other options are refused
// with NBD_REP_ERR_UNSUP, so clients fall back to simple replies.
// Transmission: READ, WRITE, FLUSH, TRIM, WRITE_ZEROES and DISC, with FUA
// (passed to the device, or emulated with a flush after the write).
// NBD_FLAG_CAN_MULTI_CONN is set: every connection of an export drives the
// same device, and a device flush covers writes from all of them.
//
// # Data path
//
// Each connection allocates, once, an arena of device-registered memory:
// small chunks (4 KiB) and large chunks (ChunkSize, at most the device's
// MaxTransfer), with a preallocated request state for each request in
// flight. A write's payload is read from the socket straight into chunks
// and submitted; a read is submitted into chunks and written back with the
// reply header in one vectored write, batched with other ready replies.
// Nothing is allocated per request on this path. Requests the arena cannot
// take (unaligned ones, done by read-modify-write, and ones larger than the
// advertised maximum block size) go through a slow synchronous path.
//
// A client that did not ask for block size constraints is told a minimum
// of 1 (as qemu-nbd does) and may send unaligned requests.
package nbd
