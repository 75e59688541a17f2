// Package fusefile shows a block device as one file in a FUSE mount: the
// disk appears as DIR/NAME, a regular file of the disk's size. Reads,
// writes, fsync and fallocate map to the device (unaligned requests by
// read-modify-write), so `losetup` on the file gives a block device that
// mkfs and mount use, with flushes carried to the device.
package fusefile
