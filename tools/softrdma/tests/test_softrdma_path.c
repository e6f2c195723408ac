/*
 * softrdma: what the path between two RC QPs checks, request by request, as
 * two NICs and the wire between them do.
 *
 *   - PSNs: a requester ahead of the responder's expected PSN is NAKed
 *     (sequence error) until retry_cnt runs out: IBV_WC_RETRY_EXC_ERR, no
 *     data; one behind it is taken for a retransmission: acknowledged, not
 *     executed (the write "succeeds" and nothing arrives);
 *   - GIDs: a request whose dgid the peer's port does not have is lost (and
 *     so is an acknowledgement whose way back is wrong: the data lands, the
 *     requester still fails); the address vector at RTR must name a GID the
 *     table holds and no multicast GID;
 *   - path MTU: a message longer than the path MTU goes as first/middle
 *     packets of exactly that MTU; a responder with another path MTU NAKs
 *     (IBV_WC_REM_INV_REQ_ERR), a requester gets READ responses it cannot
 *     take (IBV_WC_BAD_RESP_ERR); a packet larger than either port's
 *     active MTU (SOFTRDMA_PORT_MTU, per process) is dropped on the wire;
 *   - InfiniBand (SOFTRDMA_LINK_LAYER=ib): LIDs, a one-entry GID table of
 *     type IB, no GRH needed; a missing or wrong dlid ends in
 *     IBV_WC_RETRY_EXC_ERR after the retries; per-process LIDs.
 */
#include "sr_test.h"

#include <arpa/inet.h>

#define BUFSZ 16384

static const unsigned RW = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ;

/* Short timers: a lost packet costs ~1 ms, three retries. */
static const struct t_conn fast = {
	.access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
	.min_rnr_timer = 1, .timeout = 8, .retry_cnt = 3, .rnr_retry = 3,
};

struct end {
	struct t_node n;
	char *buf;
	struct ibv_mr *mr;
};

static int end_init(struct end *e)
{
	struct t_qp_opts o = {.sig_all = 1};
	if (t_node_init(&e->n, &o))
		return -1;
	e->buf = calloc(1, BUFSZ);
	e->mr = ibv_reg_mr(e->n.pd, e->buf, BUFSZ, RW);
	return e->mr ? 0 : -1;
}

static void end_fini(struct end *e)
{
	ibv_dereg_mr(e->mr);
	t_node_fini(&e->n);
	free(e->buf);
}

/* What may differ between the two ends' attributes. */
struct link {
	uint32_t sq_psn, rq_psn;
	enum ibv_mtu mtu;
	uint8_t sgid_index;
	const uint8_t *dgid;    /* NULL: ::ffff:127.0.0.1 */
	int ib;                 /* InfiniBand: no GRH, dlid */
	uint16_t dlid;
};

static int connect_one(struct ibv_qp *qp, uint32_t dest, const struct link *l)
{
	struct ibv_qp_attr a;
	if (t_to_init(qp, fast.access))
		return -1;
	t_rtr_attr(&a, dest, fast.min_rnr_timer);
	a.rq_psn = l->rq_psn;
	a.path_mtu = l->mtu ? l->mtu : IBV_MTU_1024;
	a.ah_attr.grh.sgid_index = l->sgid_index ? l->sgid_index : 3;
	if (l->dgid)
		memcpy(a.ah_attr.grh.dgid.raw, l->dgid, 16);
	if (l->ib) {
		a.ah_attr.is_global = 0;
		a.ah_attr.dlid = l->dlid;
	}
	if (ibv_modify_qp(qp, &a, T_RTR_MASK))
		return -2;
	t_rts_attr(&a, fast.timeout, fast.retry_cnt, fast.rnr_retry);
	a.sq_psn = l->sq_psn;
	if (ibv_modify_qp(qp, &a, T_RTS_MASK))
		return -3;
	return 0;
}

static void connect_pair(struct end *a, struct end *b, const struct link *la,
			 const struct link *lb)
{
	assert_int_equal(connect_one(a->n.qp, b->n.qp->qp_num, la), 0);
	assert_int_equal(connect_one(b->n.qp, a->n.qp->qp_num, lb), 0);
}

static int op(struct end *a, struct end *b, enum ibv_wr_opcode o, uint32_t off,
	      uint32_t len, struct ibv_wc *wc)
{
	if (t_post_write(a->n.qp, o, a->buf + off, len, a->mr->lkey,
			 (uintptr_t)b->buf + off, b->mr->rkey, htonl(1), 0, 9))
		return -1;
	return t_poll1(a->n.cq, wc, T_TIMEOUT_MS) == 1 ? 0 : -2;
}

static enum ibv_qp_state qstate(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	ibv_query_qp(qp, &a, IBV_QP_STATE, &ia);
	return a.qp_state;
}

/* ---- PSNs ---- */

static void test_psn_ahead_is_nakked(void **state)
{
	(void)state;
	struct end a, b;
	assert_int_equal(end_init(&a), 0);
	assert_int_equal(end_init(&b), 0);
	/* a sends from PSN 500; b expects 100 */
	struct link la = {.sq_psn = 500, .rq_psn = 7}, lb = {.sq_psn = 7, .rq_psn = 100};
	connect_pair(&a, &b, &la, &lb);
	/* b to a is in step (7 = 7): it works */
	struct ibv_wc wc;
	memset(b.buf + 64, 'q', 64);
	assert_int_equal(op(&b, &a, IBV_WR_RDMA_WRITE, 64, 64, &wc), 0);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(a.buf[64], 'q');
	/* a to b is 400 ahead: NAKed until the retries run out */
	memset(a.buf, 'p', 64);
	assert_int_equal(op(&a, &b, IBV_WR_RDMA_WRITE, 0, 64, &wc), 0);
	assert_int_equal(wc.status, IBV_WC_RETRY_EXC_ERR);
	assert_int_equal(b.buf[0], 0); /* nothing executed */
	end_fini(&a);
	end_fini(&b);
}

static void test_psn_behind_is_a_duplicate(void **state)
{
	(void)state;
	struct end a, b;
	assert_int_equal(end_init(&a), 0);
	assert_int_equal(end_init(&b), 0);
	/* a sends from PSN 90; b expects 100: a's first ten packets look
	 * like retransmissions of what b already executed */
	struct link la = {.sq_psn = 90, .rq_psn = 0}, lb = {.rq_psn = 100};
	connect_pair(&a, &b, &la, &lb);
	struct ibv_wc wc;
	memset(a.buf, 'd', 64);
	assert_int_equal(op(&a, &b, IBV_WR_RDMA_WRITE, 0, 64, &wc), 0);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);  /* acknowledged ... */
	assert_int_equal(b.buf[0], 0);                /* ... never executed */
	/* a SEND is a duplicate too: no receive consumed */
	assert_int_equal(t_post_recv(b.n.qp, b.buf + 4096, 64, b.mr->lkey, 1), 0);
	assert_int_equal(op(&a, &b, IBV_WR_SEND, 128, 16, &wc), 0);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(t_poll1(b.n.cq, &wc, 20), 0);
	/* a duplicate READ is answered again */
	memset(b.buf + 256, 'r', 32);
	assert_int_equal(op(&a, &b, IBV_WR_RDMA_READ, 256, 32, &wc), 0);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(a.buf[256], 'r');
	end_fini(&a);
	end_fini(&b);
}

static void test_psn_advances_per_packet(void **state)
{
	(void)state;
	struct end a, b;
	assert_int_equal(end_init(&a), 0);
	assert_int_equal(end_init(&b), 0);
	struct link la = {.sq_psn = 0xfffffe}, lb = {.rq_psn = 0xfffffe};
	connect_pair(&a, &b, &la, &lb);
	/* 5000 bytes at MTU 1024: five packets, across the 24-bit wrap; then
	 * READs and zero-length writes keep both ends in step */
	struct ibv_wc wc;
	memset(a.buf, 'w', 5000);
	assert_int_equal(op(&a, &b, IBV_WR_RDMA_WRITE, 0, 5000, &wc), 0);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(op(&a, &b, IBV_WR_RDMA_READ, 8192, 3000, &wc), 0);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(op(&a, &b, IBV_WR_RDMA_WRITE, 0, 0, &wc), 0);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	memset(a.buf + 6000, 'z', 10);
	assert_int_equal(op(&a, &b, IBV_WR_RDMA_WRITE, 6000, 10, &wc), 0);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(b.buf[6000], 'z');
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr qi;
	assert_int_equal(ibv_query_qp(b.n.qp, &q, IBV_QP_RQ_PSN, &qi), 0);
	assert_int_equal(q.rq_psn, 0xfffffe);   /* as set: query reports it */
	assert_memory_equal(a.buf, b.buf, 5000);
	end_fini(&a);
	end_fini(&b);
}

/* ---- GIDs ---- */

static const uint8_t elsewhere[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff,
				      10, 9, 9, 9};

static void test_wrong_dgid_is_lost(void **state)
{
	(void)state;
	struct end a, b;
	assert_int_equal(end_init(&a), 0);
	assert_int_equal(end_init(&b), 0);
	struct link la = {.dgid = elsewhere}, lb = {0};
	connect_pair(&a, &b, &la, &lb);
	memset(a.buf, 'g', 64);
	struct ibv_wc wc;
	uint64_t t0 = t_now_ms();
	assert_int_equal(op(&a, &b, IBV_WR_RDMA_WRITE, 0, 64, &wc), 0);
	assert_int_equal(wc.status, IBV_WC_RETRY_EXC_ERR);
	assert_true(t_now_ms() - t0 >= 4); /* four timeouts of 1 ms */
	assert_int_equal(b.buf[0], 0);
	end_fini(&a);
	end_fini(&b);
}

static void test_wrong_way_back_loses_the_ack(void **state)
{
	(void)state;
	struct end a, b;
	assert_int_equal(end_init(&a), 0);
	assert_int_equal(end_init(&b), 0);
	/* b's address vector points elsewhere: a's request arrives, b's
	 * acknowledgements do not */
	struct link la = {0}, lb = {.dgid = elsewhere};
	connect_pair(&a, &b, &la, &lb);
	memset(a.buf, 'k', 64);
	struct ibv_wc wc;
	assert_int_equal(op(&a, &b, IBV_WR_RDMA_WRITE, 0, 64, &wc), 0);
	assert_int_equal(wc.status, IBV_WC_RETRY_EXC_ERR);
	assert_int_equal(b.buf[0], 'k'); /* it did land */
	end_fini(&a);
	end_fini(&b);
}

/* A RoCE v1 source and a v2 source reach the same IPv4 address as two
 * different kinds of packet: both ends need not agree, each direction
 * needs its GID to exist with that type at the other end. */
static void test_gid_types(void **state)
{
	(void)state;
	struct end a, b;
	assert_int_equal(end_init(&a), 0);
	assert_int_equal(end_init(&b), 0);
	static const uint8_t ll[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0,
				       0x02, 0, 0, 0xff, 0xfe, 0x5e, 0, 1};
	struct link la = {.sgid_index = 2}, lb = {.sgid_index = 1, .dgid = ll};
	connect_pair(&a, &b, &la, &lb);
	struct ibv_wc wc;
	memset(a.buf, 't', 8);
	assert_int_equal(op(&a, &b, IBV_WR_RDMA_WRITE, 0, 8, &wc), 0);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(b.buf[0], 't');
	end_fini(&a);
	end_fini(&b);
}

static void test_rtr_checks_the_address(void **state)
{
	(void)state;
	struct end a;
	assert_int_equal(end_init(&a), 0);
	struct ibv_qp_attr r;
	assert_int_equal(t_to_init(a.n.qp, 0), 0);
	t_rtr_attr(&r, a.n.qp->qp_num, 1);
	r.ah_attr.grh.sgid_index = 7;      /* an empty entry */
	assert_int_equal(ibv_modify_qp(a.n.qp, &r, T_RTR_MASK), EINVAL);
	r.ah_attr.grh.sgid_index = 3;
	r.ah_attr.grh.dgid.raw[12] = 239;  /* ::ffff:239.0.0.1: a group */
	assert_int_equal(ibv_modify_qp(a.n.qp, &r, T_RTR_MASK), EINVAL);
	t_rtr_attr(&r, a.n.qp->qp_num, 1);
	r.ah_attr.is_global = 0;           /* RoCE: a GRH is required */
	assert_int_equal(ibv_modify_qp(a.n.qp, &r, T_RTR_MASK), EINVAL);
	t_rtr_attr(&r, a.n.qp->qp_num, 1);
	assert_int_equal(ibv_modify_qp(a.n.qp, &r, T_RTR_MASK), 0);
	end_fini(&a);
}

/* ---- path MTU ---- */

static void test_path_mtu_mismatch(void **state)
{
	(void)state;
	struct end a, b;
	struct ibv_wc wc;
	assert_int_equal(end_init(&a), 0);
	assert_int_equal(end_init(&b), 0);
	/* a sends with 4096, b takes 1024 */
	struct link la = {.mtu = IBV_MTU_4096}, lb = {.mtu = IBV_MTU_1024};
	connect_pair(&a, &b, &la, &lb);
	memset(a.buf, 'm', 4096);
	assert_int_equal(op(&a, &b, IBV_WR_RDMA_WRITE, 0, 1024, &wc), 0);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);  /* one packet: fits both */
	assert_int_equal(op(&a, &b, IBV_WR_RDMA_WRITE, 0, 2000, &wc), 0);
	assert_int_equal(wc.status, IBV_WC_REM_INV_REQ_ERR); /* 2000 > 1024 */
	assert_int_equal(qstate(b.n.qp), IBV_QPS_ERR);
	end_fini(&a);
	end_fini(&b);

	/* a sends with 1024, b takes 4096: the first packet is not b's MTU */
	assert_int_equal(end_init(&a), 0);
	assert_int_equal(end_init(&b), 0);
	la.mtu = IBV_MTU_1024;
	lb.mtu = IBV_MTU_4096;
	connect_pair(&a, &b, &la, &lb);
	assert_int_equal(op(&a, &b, IBV_WR_RDMA_WRITE, 0, 1000, &wc), 0);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(op(&a, &b, IBV_WR_RDMA_WRITE, 0, 2048, &wc), 0);
	assert_int_equal(wc.status, IBV_WC_REM_INV_REQ_ERR);
	end_fini(&a);
	end_fini(&b);

	/* a READ answered in b's 4096-byte packets at a's 1024: bad response */
	assert_int_equal(end_init(&a), 0);
	assert_int_equal(end_init(&b), 0);
	connect_pair(&a, &b, &la, &lb);
	assert_int_equal(op(&a, &b, IBV_WR_RDMA_READ, 0, 3000, &wc), 0);
	assert_int_equal(wc.status, IBV_WC_BAD_RESP_ERR);
	assert_int_equal(qstate(a.n.qp), IBV_QPS_ERR);
	assert_int_equal(qstate(b.n.qp), IBV_QPS_RTS); /* b answered fine */
	end_fini(&a);
	end_fini(&b);

	/* the same MTU on both ends: multi-packet messages work */
	assert_int_equal(end_init(&a), 0);
	assert_int_equal(end_init(&b), 0);
	la.mtu = lb.mtu = IBV_MTU_1024;
	connect_pair(&a, &b, &la, &lb);
	assert_int_equal(op(&a, &b, IBV_WR_RDMA_WRITE, 0, 5000, &wc), 0);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(op(&a, &b, IBV_WR_RDMA_READ, 8192, 5000, &wc), 0);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	end_fini(&a);
	end_fini(&b);
}

/* ---- another process: a port with a smaller active MTU ---- */

struct xinfo {
	uint32_t qpn, rkey;
	uint64_t addr;
	uint32_t port_mtu;
};

static int child_small_port(int fd, void *arg)
{
	(void)arg;
	setenv("SOFTRDMA_PORT_MTU", "1024", 1); /* read when it attaches */
	struct end b;
	CHILD_CHECK(end_init(&b) == 0);
	struct ibv_port_attr pa;
	CHILD_CHECK(ibv_query_port(b.n.ctx, 1, &pa) == 0);
	CHILD_CHECK(pa.active_mtu == IBV_MTU_1024 && pa.max_mtu == IBV_MTU_4096);
	struct xinfo me = {b.n.qp->qp_num, b.mr->rkey, (uintptr_t)b.buf,
			   pa.active_mtu}, peer;
	CHILD_CHECK(t_send(fd, &me, sizeof me) == 0);
	CHILD_CHECK(t_recv(fd, &peer, sizeof peer, T_TIMEOUT_MS) == 0);
	/* a path MTU over its own port's: allowed (max_mtu is 4096) */
	struct link l = {.mtu = IBV_MTU_4096};
	CHILD_CHECK(connect_one(b.n.qp, peer.qpn, &l) == 0);
	CHILD_CHECK(t_send(fd, &me, sizeof me) == 0);
	char done;
	CHILD_CHECK(t_recv(fd, &done, 1, T_TIMEOUT_MS) == 0);
	end_fini(&b);
	return 0;
}

static void test_port_mtu_per_process(void **state)
{
	(void)state;
	struct t_child c = t_fork(child_small_port, NULL);
	assert_true(c.pid > 0);
	struct end a;
	assert_int_equal(end_init(&a), 0);
	struct ibv_port_attr pa;
	assert_int_equal(ibv_query_port(a.n.ctx, 1, &pa), 0);
	assert_int_equal(pa.active_mtu, IBV_MTU_4096);
	struct xinfo peer, me = {a.n.qp->qp_num, 0, 0, 0};
	assert_int_equal(t_recv(c.fd, &peer, sizeof peer, T_TIMEOUT_MS), 0);
	assert_int_equal(peer.port_mtu, IBV_MTU_1024);
	assert_int_equal(t_send(c.fd, &me, sizeof me), 0);
	/* both ends at path MTU 4096, over a 1024 port on one side */
	struct link l = {.mtu = IBV_MTU_4096};
	assert_int_equal(connect_one(a.n.qp, peer.qpn, &l), 0);
	assert_int_equal(t_recv(c.fd, &peer, sizeof peer, T_TIMEOUT_MS), 0);
	struct ibv_wc wc;
	memset(a.buf, 'u', 4096);
	assert_int_equal(t_post_write(a.n.qp, IBV_WR_RDMA_WRITE, a.buf, 1024,
				      a.mr->lkey, peer.addr, peer.rkey, 0, 0, 1), 0);
	assert_int_equal(t_poll1(a.n.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_SUCCESS); /* fits the smaller port */
	assert_int_equal(t_post_write(a.n.qp, IBV_WR_RDMA_WRITE, a.buf, 2048,
				      a.mr->lkey, peer.addr, peer.rkey, 0, 0, 2), 0);
	assert_int_equal(t_poll1(a.n.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_RETRY_EXC_ERR); /* dropped on the wire */
	assert_int_equal(t_send(c.fd, "x", 1), 0);
	assert_int_equal(t_wait(&c, T_TIMEOUT_MS), 0);
	end_fini(&a);
}

/* ---- InfiniBand ---- */

static int child_ib_peer(int fd, void *arg)
{
	(void)arg;
	setenv("SOFTRDMA_LID", "42", 1);
	struct end b;
	CHILD_CHECK(end_init(&b) == 0);
	struct ibv_port_attr pa;
	CHILD_CHECK(ibv_query_port(b.n.ctx, 1, &pa) == 0);
	CHILD_CHECK(pa.link_layer == IBV_LINK_LAYER_INFINIBAND && pa.lid == 42);
	struct xinfo me = {b.n.qp->qp_num, b.mr->rkey, (uintptr_t)b.buf, pa.lid}, peer;
	CHILD_CHECK(t_send(fd, &me, sizeof me) == 0);
	CHILD_CHECK(t_recv(fd, &peer, sizeof peer, T_TIMEOUT_MS) == 0);
	struct link l = {.ib = 1, .dlid = (uint16_t)peer.port_mtu};
	CHILD_CHECK(connect_one(b.n.qp, peer.qpn, &l) == 0);
	CHILD_CHECK(t_send(fd, &me, sizeof me) == 0);
	char done;
	CHILD_CHECK(t_recv(fd, &done, 1, T_TIMEOUT_MS) == 0);
	end_fini(&b);
	return 0;
}

/* SOFTRDMA_LINK_LAYER=ib (this image), LID 7; the forked peer LID 42. */
static int child_ib(void)
{
	struct end a;
	if (end_init(&a))
		return 1;
	struct ibv_port_attr pa;
	if (ibv_query_port(a.n.ctx, 1, &pa) || pa.link_layer != IBV_LINK_LAYER_INFINIBAND ||
	    pa.lid != 7 || pa.sm_lid != 1 || pa.state != IBV_PORT_ACTIVE)
		return 2;
	struct ibv_gid_entry ge;
	if (ibv_query_gid_ex(a.n.ctx, 1, 0, &ge, 0) || ge.gid_type != IBV_GID_TYPE_IB ||
	    ge.gid.raw[0] != 0xfe || ibv_query_gid_ex(a.n.ctx, 1, 1, &ge, 0) != ENODATA)
		return 3;
	struct t_child c = t_fork(child_ib_peer, NULL);
	struct xinfo peer, me = {a.n.qp->qp_num, 0, 0, pa.lid};
	if (t_recv(c.fd, &peer, sizeof peer, T_TIMEOUT_MS) || peer.port_mtu != 42)
		return 4;
	if (t_send(c.fd, &me, sizeof me))
		return 5;
	/* no GRH on InfiniBand; the dlid is the peer's LID */
	struct link l = {.ib = 1, .dlid = 42};
	if (connect_one(a.n.qp, peer.qpn, &l))
		return 6;
	if (t_recv(c.fd, &peer, sizeof peer, T_TIMEOUT_MS))
		return 7;
	struct ibv_wc wc;
	memset(a.buf, 'i', 64);
	if (t_post_write(a.n.qp, IBV_WR_RDMA_WRITE, a.buf, 64, a.mr->lkey, peer.addr,
			 peer.rkey, 0, 0, 1) || t_poll1(a.n.cq, &wc, T_TIMEOUT_MS) != 1 ||
	    wc.status != IBV_WC_SUCCESS)
		return 8;
	/* a missing dlid (0), and our own LID: lost, after the retries */
	for (int k = 0; k < 2; k++) {
		struct ibv_qp_attr z = {.qp_state = IBV_QPS_RESET};
		if (ibv_modify_qp(a.n.qp, &z, IBV_QP_STATE))
			return 9;
		struct link bad = {.ib = 1, .dlid = k ? 7 : 0};
		if (connect_one(a.n.qp, peer.qpn, &bad))
			return 10;
		if (t_post_write(a.n.qp, IBV_WR_RDMA_WRITE, a.buf, 64, a.mr->lkey,
				 peer.addr, peer.rkey, 0, 0, 2) ||
		    t_poll1(a.n.cq, &wc, T_TIMEOUT_MS) != 1 ||
		    wc.status != IBV_WC_RETRY_EXC_ERR)
			return 11 + k;
	}
	if (t_send(c.fd, "x", 1) || t_wait(&c, T_TIMEOUT_MS))
		return 13;
	end_fini(&a);
	return 0;
}

static void test_infiniband(void **state)
{
	(void)state;
	static const char *const env[] = {"SOFTRDMA_LINK_LAYER=ib", "SOFTRDMA_LID=7",
					  NULL};
	assert_int_equal(t_reexec("ib", env, 30000), 0);
}

int main(int argc, char **argv)
{
	t_fabric_setup("path");
	if (argc == 3 && !strcmp(argv[1], "--child")) {
		int r = !strcmp(argv[2], "ib") ? child_ib() : 100;
		if (r)
			fprintf(stderr, "child %s: step %d failed\n", argv[2], r);
		return r;
	}
	if (!t_is_softrdma()) {
		fprintf(stderr, "SKIP: the loaded libibverbs is not softrdma\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_psn_ahead_is_nakked),
		cmocka_unit_test(test_psn_behind_is_a_duplicate),
		cmocka_unit_test(test_psn_advances_per_packet),
		cmocka_unit_test(test_wrong_dgid_is_lost),
		cmocka_unit_test(test_wrong_way_back_loses_the_ack),
		cmocka_unit_test(test_gid_types),
		cmocka_unit_test(test_rtr_checks_the_address),
		cmocka_unit_test(test_path_mtu_mismatch),
		cmocka_unit_test(test_port_mtu_per_process),
		cmocka_unit_test(test_infiniband),
	};
	int r = cmocka_run_group_tests(tests, NULL, NULL);
	return t_fabric_check_removed(r);
}
