//go:build verbs

#ifndef RDISK_VERBS_H
#define RDISK_VERBS_H
#include <stdint.h>
#include <stdlib.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

// Send WRs handed to ibv_post_send as one chain at most (rd_post_send).
#define RD_MAX_CHAIN 16

struct rd_sge { uint64_t addr; uint32_t length; uint32_t lkey; };

struct rd_swr {
	uint64_t wr_id;
	uint64_t raddr;
	uint32_t rkey;
	uint32_t inv_key;
	uint32_t opcode;
	uint32_t flags;
	uint32_t nsge;
	uint32_t sge_off;
};

struct rd_wc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t byte_len;
	uint32_t qp_num;
	uint32_t wc_flags;
	uint32_t inv_rkey;
	uint32_t vendor_err;
	uint32_t pad;
};

#define RD_MAX_PD 256
struct rd_event {
	int type;
	int status;
	struct rdma_cm_id *id;
	struct rdma_cm_id *listen_id;
	uintptr_t ctx;
	uintptr_t listen_ctx;
	int pd_len;
	int responder_resources;
	int initiator_depth;
	uint8_t pd[RD_MAX_PD];
};

struct rd_port {
	int state;
	int link_layer;
	int mtu;
	int gid_tbl_len;
};

int rd_post_send(struct ibv_qp *qp, struct rd_swr *w, int n, struct rd_sge *sges, uint64_t *bad);
int rd_post_recv(struct ibv_qp *qp, uint64_t wr_id, struct rd_sge *sges, int nsge);
int rd_poll(struct ibv_cq *cq, struct rd_wc *out, int n);
int rd_req_notify(struct ibv_cq *cq);
int rd_get_cq_events(struct ibv_comp_channel *ch, struct ibv_cq *cq);
int rd_wait2(int fd1, int fd2, int timeout_ms);
int rd_nonblock(int fd);
int rd_get_event(struct rdma_event_channel *ch, struct rd_event *ev);
void rd_set_context(struct rdma_cm_id *id, uintptr_t v);
struct ibv_context *rd_id_verbs(struct rdma_cm_id *id);
void rd_set_qp(struct rdma_cm_id *id, struct ibv_qp *qp);
int rd_addr(struct rdma_cm_id *id, int peer, uint8_t *ip16, int *port);
int rd_sockaddr(struct sockaddr_storage *ss, const uint8_t *ip, int iplen, int port);
int rd_qp_init(struct ibv_qp *qp, int iwarp, int port);
int rd_qp_state(struct ibv_qp *qp);
int rd_qp_error(struct ibv_qp *qp);
int rd_query_port(struct ibv_context *c, int port, struct rd_port *out);
int rd_query_gid(struct ibv_context *c, int port, int idx, uint8_t *gid16);
int rd_get_async(struct ibv_context *c, int *type, uint32_t *qpn, int *port);
int rd_errno(void);
#endif
