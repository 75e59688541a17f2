//go:build verbs

// C helpers for package verbs: the inline verbs calls (ibv_post_send,
// ibv_poll_cq, ...) and copying CM events out before they are acked.

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <netinet/in.h>
#include "cverbs.h"

int rd_post_send(struct ibv_qp *qp, struct rd_swr *w, int n, struct rd_sge *sges, uint64_t *bad) {
	struct ibv_send_wr wrs[RD_MAX_CHAIN];
	struct ibv_send_wr *badwr = NULL;
	int i, rc;
	if (n > RD_MAX_CHAIN)
		return EINVAL;
	memset(wrs, 0, sizeof(wrs[0]) * n);
	for (i = 0; i < n; i++) {
		struct ibv_send_wr *s = &wrs[i];
		s->wr_id = w[i].wr_id;
		s->next = i + 1 < n ? &wrs[i + 1] : NULL;
		s->sg_list = (struct ibv_sge *)&sges[w[i].sge_off];
		s->num_sge = w[i].nsge;
		s->opcode = w[i].opcode;
		s->send_flags = w[i].flags;
		switch (w[i].opcode) {
		case IBV_WR_RDMA_WRITE:
		case IBV_WR_RDMA_READ:
			s->wr.rdma.remote_addr = w[i].raddr;
			s->wr.rdma.rkey = w[i].rkey;
			break;
		case IBV_WR_SEND_WITH_INV:
			// libsiw (rdma-core 44) takes the key to invalidate
			// from wr.rdma.rkey; the field is unused otherwise.
			s->wr.rdma.rkey = w[i].inv_key;
			s->invalidate_rkey = w[i].inv_key;
			break;
		case IBV_WR_LOCAL_INV:
			s->invalidate_rkey = w[i].inv_key;
			break;
		}
	}
	rc = ibv_post_send(qp, wrs, &badwr);
	if (rc && badwr && bad)
		*bad = badwr->wr_id;
	return rc;
}

int rd_post_recv(struct ibv_qp *qp, uint64_t wr_id, struct rd_sge *sges, int nsge) {
	struct ibv_recv_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = (struct ibv_sge *)sges;
	wr.num_sge = nsge;
	return ibv_post_recv(qp, &wr, &bad);
}

int rd_poll(struct ibv_cq *cq, struct rd_wc *out, int n) {
	struct ibv_wc wc[32];
	int got = 0;
	while (got < n) {
		int want = n - got, i, k;
		if (want > 32)
			want = 32;
		k = ibv_poll_cq(cq, want, wc);
		if (k < 0)
			return got ? got : -1;
		for (i = 0; i < k; i++) {
			struct rd_wc *o = &out[got + i];
			o->wr_id = wc[i].wr_id;
			o->status = wc[i].status;
			o->opcode = wc[i].opcode;
			o->byte_len = wc[i].byte_len;
			o->qp_num = wc[i].qp_num;
			o->wc_flags = wc[i].wc_flags;
			o->inv_rkey = (wc[i].wc_flags & IBV_WC_WITH_INV) ? wc[i].invalidated_rkey : 0;
			o->vendor_err = wc[i].vendor_err;
		}
		got += k;
		if (k < want)
			break;
	}
	return got;
}

int rd_req_notify(struct ibv_cq *cq) { return ibv_req_notify_cq(cq, 0); }

// rd_get_cq_events takes every pending event off the (non-blocking)
// channel and acks them; returns how many.
int rd_get_cq_events(struct ibv_comp_channel *ch, struct ibv_cq *cq) {
	int n = 0;
	struct ibv_cq *ev_cq;
	void *ctx;
	while (ibv_get_cq_event(ch, &ev_cq, &ctx) == 0) {
		ibv_ack_cq_events(ev_cq, 1);
		n++;
	}
	return n;
}

int rd_wait2(int fd1, int fd2, int timeout_ms) {
	struct pollfd p[2];
	int rc;
	p[0].fd = fd1; p[0].events = POLLIN; p[0].revents = 0;
	p[1].fd = fd2; p[1].events = POLLIN; p[1].revents = 0;
	rc = poll(p, 2, timeout_ms);
	if (rc < 0)
		return errno == EINTR ? 0 : -1;
	return (p[0].revents ? 1 : 0) | (p[1].revents ? 2 : 0);
}

int rd_nonblock(int fd) {
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0)
		return -1;
	return fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

// rd_get_event copies one CM event (the channel is non-blocking: returns
// -1 with errno EAGAIN when there is none) and acks it.
int rd_get_event(struct rdma_event_channel *ch, struct rd_event *ev) {
	struct rdma_cm_event *e;
	int n;
	if (rdma_get_cm_event(ch, &e))
		return -1;
	memset(ev, 0, sizeof(*ev));
	ev->type = e->event;
	ev->status = e->status;
	ev->id = e->id;
	ev->listen_id = e->listen_id;
	ev->ctx = (uintptr_t)(e->id ? e->id->context : NULL);
	ev->listen_ctx = (uintptr_t)(e->listen_id ? e->listen_id->context : NULL);
	if (e->id && e->id->ps != RDMA_PS_UDP) {
		n = e->param.conn.private_data_len;
		if (n > RD_MAX_PD)
			n = RD_MAX_PD;
		if (n > 0 && e->param.conn.private_data)
			memcpy(ev->pd, e->param.conn.private_data, n);
		else
			n = 0;
		ev->pd_len = n;
		ev->responder_resources = e->param.conn.responder_resources;
		ev->initiator_depth = e->param.conn.initiator_depth;
	}
	rdma_ack_cm_event(e);
	return 0;
}

void rd_set_context(struct rdma_cm_id *id, uintptr_t v) { id->context = (void *)v; }
struct ibv_context *rd_id_verbs(struct rdma_cm_id *id) { return id->verbs; }
void rd_set_qp(struct rdma_cm_id *id, struct ibv_qp *qp) { id->qp = qp; }

// rd_addr returns the local (peer=0) or remote address of id as an IPv6 or
// IPv4-mapped address and a port; returns the family or -1.
int rd_addr(struct rdma_cm_id *id, int peer, uint8_t *ip16, int *port) {
	struct sockaddr *sa = peer ? rdma_get_peer_addr(id) : rdma_get_local_addr(id);
	memset(ip16, 0, 16);
	if (!sa)
		return -1;
	if (sa->sa_family == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)sa;
		ip16[10] = 0xff; ip16[11] = 0xff;
		memcpy(ip16 + 12, &s->sin_addr, 4);
		*port = ntohs(s->sin_port);
		return AF_INET;
	}
	if (sa->sa_family == AF_INET6) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)sa;
		memcpy(ip16, &s->sin6_addr, 16);
		*port = ntohs(s->sin6_port);
		return AF_INET6;
	}
	return -1;
}

int rd_sockaddr(struct sockaddr_storage *ss, const uint8_t *ip, int iplen, int port) {
	memset(ss, 0, sizeof(*ss));
	if (iplen == 4) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(port);
		memcpy(&s->sin_addr, ip, 4);
		return sizeof(*s);
	}
	if (iplen == 16) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
		s->sin6_family = AF_INET6;
		s->sin6_port = htons(port);
		memcpy(&s->sin6_addr, ip, 16);
		return sizeof(*s);
	}
	return -1;
}

// rd_qp_init moves a new RC QP to INIT so receives can be posted before
// the CM connects it (librdmacm redoes INIT with the route's attributes).
int rd_qp_init(struct ibv_qp *qp, int iwarp, int port) {
	struct ibv_qp_attr a;
	int mask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	if (!iwarp) {
		a.pkey_index = 0;
		a.port_num = port;
		mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	}
	return ibv_modify_qp(qp, &a, mask);
}

int rd_qp_state(struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
		return -1;
	return a.qp_state;
}

int rd_qp_error(struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_ERR;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

int rd_query_port(struct ibv_context *c, int port, struct rd_port *out) {
	struct ibv_port_attr a;
	int rc = ibv_query_port(c, port, &a);
	if (rc)
		return rc;
	out->state = a.state;
	out->link_layer = a.link_layer;
	out->mtu = a.active_mtu >= IBV_MTU_256 && a.active_mtu <= IBV_MTU_4096 ? 128 << a.active_mtu : 0;
	out->gid_tbl_len = a.gid_tbl_len;
	return 0;
}

int rd_query_gid(struct ibv_context *c, int port, int idx, uint8_t *gid16) {
	union ibv_gid g;
	int rc = ibv_query_gid(c, port, idx, &g);
	if (rc)
		return rc;
	memcpy(gid16, g.raw, 16);
	return 0;
}

// rd_get_async takes one async event off the (non-blocking) async fd.
int rd_get_async(struct ibv_context *c, int *type, uint32_t *qpn, int *port) {
	struct ibv_async_event e;
	if (ibv_get_async_event(c, &e))
		return -1;
	*type = e.event_type;
	*qpn = 0;
	*port = 0;
	switch (e.event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		*qpn = e.element.qp->qp_num;
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		*port = e.element.port_num;
		break;
	default:
		break;
	}
	ibv_ack_async_event(&e);
	return 0;
}

int rd_errno(void) { return errno; }
