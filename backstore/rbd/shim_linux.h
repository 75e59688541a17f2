//go:build ceph && linux

#ifndef RDISK_RBD_SHIM_H
#define RDISK_RBD_SHIM_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <rbd/librbd.h>

enum {
	RDISK_OP_READ = 1,
	RDISK_OP_WRITE,
	RDISK_OP_FLUSH,
	RDISK_OP_DISCARD,
	RDISK_OP_ZEROES,
	RDISK_OP_CAW,
};

int rdisk_rbd_submit(rbd_image_t img, int op, uintptr_t arg, const struct iovec *iov, int iovcnt,
		     uint64_t off, uint64_t len, const char *cmp, uint64_t *mismatch, int polled);

// RDISK_REAP_MAX is the most completions one rdisk_rbd_reap collects.
#define RDISK_REAP_MAX 64

// rdisk_rbd_reap takes up to n completed aios of img (rbd_poll_io_events):
// their arguments and return values go to args and rets, the completions
// are released. It returns how many, or a negative errno.
int rdisk_rbd_reap(rbd_image_t img, uintptr_t *args, int64_t *rets, int n);
int rdisk_rbd_update_watch(rbd_image_t img, uint64_t *handle, uintptr_t arg);

#endif
