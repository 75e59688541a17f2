// minigw: the least a gateway can do, for the speed phase of run-gateways.sh.
//
// It reads an RBD image with librbd's asynchronous C API (the same calls as
// rdisk's rbd backstore: rbd_aio_read into the gateway's buffer) and sends
// every result over one loopback TCP connection to a "host", a child process
// that only receives. No protocol, no framing, no Go: the ceiling of any
// gateway that moves the data over TCP on this machine, against which rdisk's
// ratio to `rbd bench` can be read.
//
//   minigw local POOL/IMAGE BS QD SECONDS   the gateway issues the reads itself
//   minigw req   POOL/IMAGE BS QD SECONDS   the host asks for each read with an
//                                           8-byte request (offset) on the same
//                                           connection, QD outstanding, as an
//                                           initiator does
//
// Reads are sequential (wrapping at the image's end). The conf comes from
// CEPH_CONF (or the default search path). Prints one line:
//   minigw MODE: IOPS=N BW=N B/s
//
// Build: gcc -O2 -o minigw minigw.c -lrbd -lrados -lpthread
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <rados/librados.h>
#include <rbd/librbd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct slot {
	char *buf;
	uint64_t off;
	rbd_completion_t c;
};

static struct {
	int req; // 1: host-driven
	int fd;  // the gateway's end of the connection
	size_t bs;
	uint64_t size, next;
	rbd_image_t img;
	double end;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct slot **done; // completed slots, a ring of qd
	int qd, head, n;
	struct slot **free; // req mode: slots for the reader, a stack
	int nfree;
	long ios;
} g;

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void die(const char *what, int err) {
	fprintf(stderr, "minigw: %s: %s\n", what, strerror(err < 0 ? -err : err));
	exit(1);
}

static int full(int fd, void *p, size_t n, int out) {
	char *b = p;
	while (n) {
		ssize_t k = out ? send(fd, b, n, MSG_NOSIGNAL) : recv(fd, b, n, 0);
		if (k <= 0)
			return -1;
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

static void cb(rbd_completion_t c, void *arg) {
	(void)c;
	struct slot *s = arg;
	pthread_mutex_lock(&g.mu);
	g.done[(g.head + g.n++) % g.qd] = s;
	pthread_cond_broadcast(&g.cv);
	pthread_mutex_unlock(&g.mu);
}

static void issue(struct slot *s, uint64_t off) {
	s->off = off;
	int r = rbd_aio_create_completion(s, cb, &s->c);
	if (r < 0)
		die("rbd_aio_create_completion", r);
	if ((r = rbd_aio_read(g.img, off, g.bs, s->buf, s->c)) < 0)
		die("rbd_aio_read", r);
}

// host: keeps qd requests outstanding (req mode) and receives every result.
static void host(struct sockaddr_in *a, int qd) {
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	if (connect(fd, (struct sockaddr *)a, sizeof *a) < 0)
		_exit(1);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	char *b = malloc(g.bs);
	uint64_t off = 0;
	if (g.req)
		for (int i = 0; i < qd; i++, off = (off + g.bs) % g.size)
			if (full(fd, &off, 8, 1) < 0)
				_exit(1);
	for (;;) {
		if (full(fd, b, g.bs, 0) < 0)
			_exit(0);
		if (g.req) {
			if (full(fd, &off, 8, 1) < 0)
				_exit(0);
			off = (off + g.bs) % g.size;
		}
	}
}

// reader (req mode): one request in, one read issued, from a free slot.
static void *reader(void *arg) {
	(void)arg;
	for (;;) {
		uint64_t off;
		if (full(g.fd, &off, 8, 0) < 0)
			return NULL;
		// The host has at most qd requests outstanding; a slot is
		// freed once its result is sent, which can be just after the
		// host asked again: wait for it.
		pthread_mutex_lock(&g.mu);
		while (g.nfree == 0)
			pthread_cond_wait(&g.cv, &g.mu);
		struct slot *s = g.free[--g.nfree];
		pthread_mutex_unlock(&g.mu);
		issue(s, off % g.size);
	}
}

int main(int argc, char **argv) {
	if (argc != 6 || (strcmp(argv[1], "local") && strcmp(argv[1], "req"))) {
		fprintf(stderr, "usage: minigw local|req POOL/IMAGE BS QD SECONDS\n");
		return 2;
	}
	g.req = !strcmp(argv[1], "req");
	char *pool = strdup(argv[2]), *image = strchr(pool, '/');
	if (!image)
		die("POOL/IMAGE", EINVAL);
	*image++ = 0;
	g.bs = strtoul(argv[3], NULL, 0);
	g.qd = atoi(argv[4]);
	double secs = atof(argv[5]);
	if (g.bs == 0 || g.qd <= 0 || secs <= 0)
		die("BS QD SECONDS", EINVAL);

	rados_t cl;
	rados_ioctx_t io;
	int r;
	if ((r = rados_create(&cl, NULL)) < 0 || (r = rados_conf_read_file(cl, NULL)) < 0 ||
	    (r = rados_conf_parse_env(cl, NULL)) < 0 || (r = rados_connect(cl)) < 0)
		die("connecting to the cluster", r);
	if ((r = rados_ioctx_create(cl, pool, &io)) < 0)
		die("opening the pool", r);
	if ((r = rbd_open(io, image, &g.img, NULL)) < 0)
		die("opening the image", r);
	if ((r = rbd_get_size(g.img, &g.size)) < 0)
		die("rbd_get_size", r);
	g.size -= g.size % g.bs;

	int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof a;
	if (bind(ls, (struct sockaddr *)&a, sizeof a) < 0 || listen(ls, 1) < 0 ||
	    getsockname(ls, (struct sockaddr *)&a, &al) < 0)
		die("listening", errno);
	pid_t kid = fork();
	if (kid == 0)
		host(&a, g.qd);
	if ((g.fd = accept(ls, NULL, NULL)) < 0)
		die("accept", errno);
	setsockopt(g.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

	pthread_mutex_init(&g.mu, NULL);
	pthread_cond_init(&g.cv, NULL);
	g.done = calloc(g.qd, sizeof *g.done);
	struct slot *slots = calloc(g.qd, sizeof *slots);
	g.free = calloc(g.qd, sizeof *g.free);
	for (int i = 0; i < g.qd; i++) {
		if (posix_memalign((void **)&slots[i].buf, 4096, g.bs))
			die("posix_memalign", ENOMEM);
		g.free[g.nfree++] = &slots[i];
	}

	double t0 = now();
	g.end = t0 + secs;
	pthread_t rt;
	if (g.req)
		pthread_create(&rt, NULL, reader, NULL);
	else
		for (int i = 0; i < g.qd; i++, g.next = (g.next + g.bs) % g.size)
			issue(&slots[i], g.next);
	// The sender: results go out in completion order, from this thread.
	for (int inflight = g.qd; inflight > 0;) {
		pthread_mutex_lock(&g.mu);
		while (g.n == 0)
			pthread_cond_wait(&g.cv, &g.mu);
		struct slot *s = g.done[g.head];
		g.head = (g.head + 1) % g.qd;
		g.n--;
		pthread_mutex_unlock(&g.mu);
		ssize_t rv = rbd_aio_get_return_value(s->c);
		rbd_aio_release(s->c);
		if (rv != (ssize_t)g.bs)
			die("read", rv < 0 ? (int)rv : EIO);
		if (full(g.fd, s->buf, g.bs, 1) < 0)
			die("send", errno);
		g.ios++;
		if (now() >= g.end)
			inflight--; // req mode: the host's next request is not served
		else if (!g.req)
			issue(s, g.next), g.next = (g.next + g.bs) % g.size;
		if (g.req) {
			pthread_mutex_lock(&g.mu);
			g.free[g.nfree++] = s;
			pthread_cond_broadcast(&g.cv);
			pthread_mutex_unlock(&g.mu);
		}
	}
	double el = now() - t0;
	printf("minigw %s: IOPS=%.0f BW=%.0f B/s\n", argv[1], g.ios / el, g.ios * (double)g.bs / el);
	fflush(stdout);
	kill(kid, SIGKILL);
	waitpid(kid, NULL, 0);
	_exit(0); // the reader may still be blocked in recv; in-flight reads are abandoned
}
