//go:build ceph && linux

#include "shim_linux.h"
#include "_cgo_export.h"

// rdisk_rbd_cb runs on a librbd thread when an aio completes: it reads the
// result, releases the completion and hands the slot to Go.
static void rdisk_rbd_cb(rbd_completion_t c, void *arg) {
	ssize_t r = rbd_aio_get_return_value(c);
	rbd_aio_release(c);
	rdiskRBDDone((uintptr_t)arg, (int64_t)r);
}

int rdisk_rbd_submit(rbd_image_t img, int op, uintptr_t arg, const struct iovec *iov, int iovcnt,
		     uint64_t off, uint64_t len, const char *cmp, uint64_t *mismatch, int polled) {
	rbd_completion_t c;
	// Polled: no callback; librbd queues the completion on the image and
	// signals its eventfd (rbd_set_image_notification), rdisk_rbd_reap
	// collects it.
	int r = rbd_aio_create_completion((void *)arg, polled ? NULL : rdisk_rbd_cb, &c);
	if (r < 0)
		return r;
	switch (op) {
	case RDISK_OP_READ:
		if (iovcnt == 1)
			r = rbd_aio_read(img, off, iov[0].iov_len, iov[0].iov_base, c);
		else
			r = rbd_aio_readv(img, iov, iovcnt, off, c);
		break;
	case RDISK_OP_WRITE:
		if (iovcnt == 1)
			r = rbd_aio_write(img, off, iov[0].iov_len, iov[0].iov_base, c);
		else
			r = rbd_aio_writev(img, iov, iovcnt, off, c);
		break;
	case RDISK_OP_FLUSH:
		r = rbd_aio_flush(img, c);
		break;
	case RDISK_OP_DISCARD:
		r = rbd_aio_discard(img, off, len, c);
		break;
	case RDISK_OP_ZEROES:
		r = rbd_aio_write_zeroes(img, off, len, c, 0, 0);
		break;
	case RDISK_OP_CAW:
		if (iovcnt != 1) {
			r = -EINVAL;
			break;
		}
		r = (int)rbd_aio_compare_and_write(img, off, iov[0].iov_len, cmp, iov[0].iov_base, c, mismatch, 0);
		break;
	default:
		r = -EINVAL;
	}
	if (r < 0)
		rbd_aio_release(c);
	return r;
}

int rdisk_rbd_reap(rbd_image_t img, uintptr_t *args, int64_t *rets, int n) {
	rbd_completion_t comps[RDISK_REAP_MAX];
	if (n > RDISK_REAP_MAX)
		n = RDISK_REAP_MAX;
	int k = rbd_poll_io_events(img, comps, n);
	for (int i = 0; i < k; i++) {
		args[i] = (uintptr_t)rbd_aio_get_arg(comps[i]);
		rets[i] = (int64_t)rbd_aio_get_return_value(comps[i]);
		rbd_aio_release(comps[i]);
	}
	return k;
}

static void rdisk_rbd_watch_cb(void *arg) { rdiskRBDWatch((uintptr_t)arg); }

int rdisk_rbd_update_watch(rbd_image_t img, uint64_t *handle, uintptr_t arg) {
	return rbd_update_watch(img, handle, rdisk_rbd_watch_cb, (void *)arg);
}
