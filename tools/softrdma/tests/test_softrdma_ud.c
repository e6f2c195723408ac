/*
 * softrdma UD: the UD state machine, address handles, unicast and multicast
 * datagrams (within a process and across processes), the GRH area, the MTU
 * limit, datagrams dropped for want of a receive, a receive too short,
 * loopback suppression, and the seeded drop / duplicate / reorder faults
 * with their log.
 */
#include "sr_test.h"

#include <arpa/inet.h>
#include <fcntl.h>

#define QKEY 0x11110000u
#define MCAST_QPN 0xffffffu
#define BUF 8192

static const uint8_t group_ip[4] = {239, 1, 2, 3};

struct ud_node {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
};

static int ud_init(struct ud_node *n, uint32_t rq, uint32_t block_lb)
{
	memset(n, 0, sizeof *n);
	n->ctx = t_open();
	if (!n->ctx)
		return -1;
	n->pd = ibv_alloc_pd(n->ctx);
	n->cq = ibv_create_cq(n->ctx, 4096, NULL, NULL, 0);
	n->buf = calloc(1, (size_t)BUF * 64);
	if (!n->pd || !n->cq || !n->buf)
		return -1;
	n->mr = ibv_reg_mr(n->pd, n->buf, (size_t)BUF * 64, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr_ex ia = {
		.send_cq = n->cq,
		.recv_cq = n->cq,
		.cap = {.max_send_wr = 64, .max_recv_wr = rq ? rq : 64,
			.max_send_sge = 2, .max_recv_sge = 2,
			.max_inline_data = 64},
		.qp_type = IBV_QPT_UD,
		.sq_sig_all = 1,
		.comp_mask = IBV_QP_INIT_ATTR_PD,
		.pd = n->pd,
	};
	if (block_lb) {
		ia.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
		ia.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
	}
	n->qp = ibv_create_qp_ex(n->ctx, &ia);
	if (!n->mr || !n->qp)
		return -1;
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0,
				.port_num = 1, .qkey = QKEY};
	if (ibv_modify_qp(n->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					     IBV_QP_PORT | IBV_QP_QKEY))
		return -2;
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(n->qp, &a, IBV_QP_STATE))
		return -3;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	if (ibv_modify_qp(n->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		return -4;
	return 0;
}

static void ud_fini(struct ud_node *n)
{
	if (n->qp)
		ibv_destroy_qp(n->qp);
	if (n->mr)
		ibv_dereg_mr(n->mr);
	if (n->cq)
		ibv_destroy_cq(n->cq);
	if (n->pd)
		ibv_dealloc_pd(n->pd);
	if (n->ctx)
		ibv_close_device(n->ctx);
	free(n->buf);
	memset(n, 0, sizeof *n);
}

static void gid_v4(union ibv_gid *g, const uint8_t ip[4])
{
	memset(g, 0, sizeof *g);
	g->raw[10] = g->raw[11] = 0xff;
	memcpy(g->raw + 12, ip, 4);
}

/* GID indexes of softrdma's RoCE table (as mlx5 lays it out). */
#define GID_LL_V1 0
#define GID_LL_V2 1
#define GID_V4_V1 2
#define GID_V4_V2 3

static struct ibv_ah *ah_to(struct ibv_pd *pd, const uint8_t ip[4])
{
	struct ibv_ah_attr a = {.is_global = 1, .port_num = 1};
	a.grh.hop_limit = 1;
	a.grh.sgid_index = GID_V4_V2;
	gid_v4(&a.grh.dgid, ip);
	return ibv_create_ah(pd, &a);
}

/* Receive slot i: BUF bytes at buf + i * BUF. */
static int post_recvs(struct ud_node *n, int first, int count, uint32_t len)
{
	for (int i = first; i < first + count; i++)
		if (t_post_recv(n->qp, n->buf + (size_t)(i % 32) * BUF, len,
				n->mr->lkey, (uint64_t)i))
			return -1;
	return 0;
}

static int ud_send(struct ud_node *n, struct ibv_ah *ah, uint32_t qpn,
		   uint32_t qkey, uint32_t len, uint32_t imm, uint64_t wr_id)
{
	uint8_t *p = n->buf + (size_t)32 * BUF; /* send area: slots 32.. */
	for (uint32_t i = 0; i < len; i++)
		p[i] = (uint8_t)(imm + i);
	struct ibv_sge sge = {(uintptr_t)p, len, n->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND_WITH_IMM,
				 .imm_data = htonl(imm)}, *bad = NULL;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = qkey;
	return ibv_post_send(n->qp, &wr, &bad);
}

/* Polls for the send completion of a signalled UD send.  The sender's CQ
 * holds only send completions (it posts no receives); the opcode of a
 * failed one is undefined (ibv_poll_cq(3)), so only the status is read. */
static int send_done(struct ud_node *n, enum ibv_wc_status want)
{
	struct ibv_wc wc;
	if (t_poll1(n->cq, &wc, T_TIMEOUT_MS) != 1)
		return -1;
	if (wc.qp_num != n->qp->qp_num)
		return -3;
	if (wc.status == IBV_WC_SUCCESS && wc.opcode != IBV_WC_SEND)
		return -4;
	return wc.status == want ? 0 : -2;
}

static void check_ipv4_grh(const uint8_t *g, const uint8_t dst[4], uint32_t len)
{
	for (int i = 0; i < 20; i++)
		assert_int_equal(g[i], 0);
	const uint8_t *h = g + 20;
	assert_int_equal(h[0], 0x45);
	assert_int_equal(h[9], 17);
	assert_int_equal(h[2] << 8 | h[3], 20 + 8 + 12 + 8 + 4 + len + 4);
	assert_memory_equal(h + 12, ((uint8_t[]){127, 0, 0, 1}), 4);
	assert_memory_equal(h + 16, dst, 4);
	uint32_t s = 0; /* the header checksum verifies to 0xffff */
	for (int i = 0; i < 20; i += 2)
		s += (uint32_t)h[i] << 8 | h[i + 1];
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	assert_int_equal(s, 0xffff);
}

/* ---- tests ---- */

static void test_state_machine(void **state)
{
	(void)state;
	struct ibv_context *c = t_open();
	struct ibv_pd *pd = ibv_alloc_pd(c);
	struct ibv_cq *cq = ibv_create_cq(c, 16, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq,
				      .cap = {4, 4, 1, 1, 0}, .qp_type = IBV_QPT_UD};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	assert_non_null(qp);
	assert_int_equal(qp->qp_type, IBV_QPT_UD);
	assert_true(qp->qp_num != 0 && qp->qp_num < MCAST_QPN);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qkey = 7, .qp_access_flags = 0};
	const int init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	/* the Q_Key is required; RC's access flags are not allowed */
	assert_int_equal(ibv_modify_qp(qp, &a, init), EINVAL);
	assert_int_equal(ibv_modify_qp(qp, &a, init | IBV_QP_QKEY |
						       IBV_QP_ACCESS_FLAGS), EINVAL);
	assert_int_equal(ibv_modify_qp(qp, &a, init | IBV_QP_QKEY), 0);
	/* INIT -> RTR needs nothing; an address vector is not allowed on UD */
	a.qp_state = IBV_QPS_RTR;
	assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV), EINVAL);
	assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	/* RTR -> RTS needs the SQ PSN */
	a.qp_state = IBV_QPS_RTS;
	assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE), EINVAL);
	assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
	a.qkey = 9;
	assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_QKEY), 0);
	assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT),
			 EINVAL);
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr qi;
	assert_int_equal(ibv_query_qp(qp, &q, IBV_QP_STATE | IBV_QP_QKEY, &qi), 0);
	assert_int_equal(q.qp_state, IBV_QPS_RTS);
	assert_int_equal(q.qkey, 9);
	assert_int_equal(qi.qp_type, IBV_QPT_UD);
	/* create flags: only loopback blocking, and only on UD */
	struct ibv_qp_init_attr_ex x = {.send_cq = cq, .recv_cq = cq,
					.cap = {4, 4, 1, 1, 0},
					.qp_type = IBV_QPT_RC, .pd = pd,
					.comp_mask = IBV_QP_INIT_ATTR_PD |
						     IBV_QP_INIT_ATTR_CREATE_FLAGS,
					.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB};
	errno = 0;
	assert_null(ibv_create_qp_ex(c, &x));
	assert_int_equal(errno, EINVAL);
	x.qp_type = IBV_QPT_UD;
	x.create_flags = IBV_QP_CREATE_SCATTER_FCS;
	errno = 0;
	assert_null(ibv_create_qp_ex(c, &x));
	assert_int_equal(errno, EOPNOTSUPP);
	assert_int_equal(ibv_destroy_qp(qp), 0);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(c);
}

static void test_address_handle(void **state)
{
	(void)state;
	struct ibv_context *c = t_open();
	struct ibv_pd *pd = ibv_alloc_pd(c);
	struct ibv_ah_attr a = {.is_global = 0, .port_num = 1};
	errno = 0;
	assert_null(ibv_create_ah(pd, &a)); /* RoCE: a GRH is required */
	assert_int_equal(errno, EINVAL);
	a.is_global = 1;
	a.port_num = 2;
	assert_null(ibv_create_ah(pd, &a));
	a.port_num = 1;
	a.grh.sgid_index = 4; /* an empty entry of the table */
	assert_null(ibv_create_ah(pd, &a));
	a.grh.sgid_index = 255;
	assert_null(ibv_create_ah(pd, &a));
	a.grh.sgid_index = GID_V4_V2;
	struct ibv_ah *ah = ibv_create_ah(pd, &a);
	assert_non_null(ah);
	assert_ptr_equal(ah->pd, pd);
	assert_int_equal(ibv_dealloc_pd(pd), EBUSY); /* the AH uses it */
	assert_int_equal(ibv_destroy_ah(ah), 0);
	assert_int_equal(ibv_dealloc_pd(pd), 0);
	ibv_close_device(c);
}

static void test_unicast(void **state)
{
	(void)state;
	struct ud_node s, r;
	assert_int_equal(ud_init(&s, 0, 0), 0);
	assert_int_equal(ud_init(&r, 0, 0), 0);
	static const uint8_t lo[4] = {127, 0, 0, 1};
	struct ibv_ah *ah = ah_to(s.pd, lo);
	assert_non_null(ah);
	assert_int_equal(post_recvs(&r, 0, 1, BUF), 0);
	assert_int_equal(ud_send(&s, ah, r.qp->qp_num, QKEY, 100, 0xabcdef01, 7), 0);
	assert_int_equal(send_done(&s, IBV_WC_SUCCESS), 0);
	struct ibv_wc wc;
	assert_int_equal(t_poll1(r.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.opcode, IBV_WC_RECV);
	assert_int_equal(wc.byte_len, 40 + 100);
	assert_int_equal(wc.wc_flags & (IBV_WC_GRH | IBV_WC_WITH_IMM),
			 IBV_WC_GRH | IBV_WC_WITH_IMM);
	assert_int_equal(ntohl(wc.imm_data), 0xabcdef01);
	assert_int_equal(wc.src_qp, s.qp->qp_num);
	assert_int_equal(wc.qp_num, r.qp->qp_num);
	check_ipv4_grh(r.buf, lo, 100);
	for (int i = 0; i < 100; i++)
		assert_int_equal(r.buf[40 + i], (uint8_t)(0xabcdef01 + i));

	/* a wrong Q_Key: the receiver never sees it, the sender succeeds */
	assert_int_equal(post_recvs(&r, 1, 1, BUF), 0);
	assert_int_equal(ud_send(&s, ah, r.qp->qp_num, QKEY + 1, 10, 1, 8), 0);
	assert_int_equal(send_done(&s, IBV_WC_SUCCESS), 0);
	assert_int_equal(t_poll1(r.cq, &wc, 50), 0);
	/* a Q_Key with the high bit set means the sender QP's own */
	assert_int_equal(ud_send(&s, ah, r.qp->qp_num, 0x80000000u, 10, 2, 9), 0);
	assert_int_equal(send_done(&s, IBV_WC_SUCCESS), 0);
	assert_int_equal(t_poll1(r.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(ntohl(wc.imm_data), 2);
	/* RDMA opcodes and a missing address handle are refused at post */
	struct ibv_sge sge = {(uintptr_t)s.buf, 8, s.mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE}, *bad = NULL;
	wr.wr.ud.ah = ah;
	assert_int_equal(ibv_post_send(s.qp, &wr, &bad), EINVAL);
	assert_ptr_equal(bad, &wr);
	wr.opcode = IBV_WR_SEND;
	wr.wr.ud.ah = NULL;
	assert_int_equal(ibv_post_send(s.qp, &wr, &bad), EINVAL);
	ibv_destroy_ah(ah);
	ud_fini(&s);
	ud_fini(&r);
}

/* No receive posted: the datagram is gone (no RNR on UD), the sender is
 * not told; a receive that cannot hold GRH + payload is a local length
 * error at the receiver. */
static void test_no_receive_and_short_receive(void **state)
{
	(void)state;
	struct ud_node s, r;
	assert_int_equal(ud_init(&s, 0, 0), 0);
	assert_int_equal(ud_init(&r, 0, 0), 0);
	static const uint8_t lo[4] = {127, 0, 0, 1};
	struct ibv_ah *ah = ah_to(s.pd, lo);
	assert_int_equal(ud_send(&s, ah, r.qp->qp_num, QKEY, 64, 1, 1), 0);
	assert_int_equal(send_done(&s, IBV_WC_SUCCESS), 0);
	assert_int_equal(post_recvs(&r, 0, 1, BUF), 0);
	assert_int_equal(ud_send(&s, ah, r.qp->qp_num, QKEY, 64, 2, 2), 0);
	assert_int_equal(send_done(&s, IBV_WC_SUCCESS), 0);
	struct ibv_wc wc;
	assert_int_equal(t_poll1(r.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(ntohl(wc.imm_data), 2); /* the first was not kept */

	assert_int_equal(post_recvs(&r, 1, 1, 40 + 63), 0);
	assert_int_equal(post_recvs(&r, 2, 1, BUF), 0);
	assert_int_equal(ud_send(&s, ah, r.qp->qp_num, QKEY, 64, 3, 3), 0);
	assert_int_equal(send_done(&s, IBV_WC_SUCCESS), 0);
	assert_int_equal(t_poll1(r.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_LOC_LEN_ERR);
	assert_int_equal(wc.wr_id, 1);
	assert_int_equal(t_poll1(r.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR); /* receiver in ERR */
	assert_int_equal(wc.wr_id, 2);
	ibv_destroy_ah(ah);
	ud_fini(&s);
	ud_fini(&r);
}

static void test_mtu(void **state)
{
	(void)state;
	struct ud_node s, r;
	assert_int_equal(ud_init(&s, 0, 0), 0);
	assert_int_equal(ud_init(&r, 0, 0), 0);
	static const uint8_t lo[4] = {127, 0, 0, 1};
	struct ibv_ah *ah = ah_to(s.pd, lo);
	assert_int_equal(post_recvs(&r, 0, 2, BUF), 0);
	assert_int_equal(ud_send(&s, ah, r.qp->qp_num, QKEY, 4096, 1, 1), 0);
	assert_int_equal(send_done(&s, IBV_WC_SUCCESS), 0);
	struct ibv_wc wc;
	assert_int_equal(t_poll1(r.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.byte_len, 40 + 4096);
	/* one byte over the path MTU: refused by the sending NIC */
	assert_int_equal(ud_send(&s, ah, r.qp->qp_num, QKEY, 4097, 2, 2), 0);
	assert_int_equal(send_done(&s, IBV_WC_LOC_LEN_ERR), 0);
	assert_int_equal(t_poll1(r.cq, &wc, 50), 0);
	ibv_destroy_ah(ah);
	ud_fini(&s);
	ud_fini(&r);
}

static void test_attach_detach(void **state)
{
	(void)state;
	struct ud_node s, r;
	assert_int_equal(ud_init(&s, 0, 0), 0);
	assert_int_equal(ud_init(&r, 0, 0), 0);
	union ibv_gid g, uni;
	gid_v4(&g, group_ip);
	gid_v4(&uni, (uint8_t[]){10, 0, 0, 1});
	assert_int_equal(ibv_attach_mcast(r.qp, &uni, 0), EINVAL);
	assert_int_equal(ibv_detach_mcast(r.qp, &g, 0), EINVAL); /* not attached */
	assert_int_equal(ibv_attach_mcast(r.qp, &g, 0), 0);
	assert_int_equal(ibv_attach_mcast(r.qp, &g, 0), 0); /* again: no-op */
	struct t_node rc;
	struct t_qp_opts o = {0};
	assert_int_equal(t_node_init(&rc, &o), 0);
	assert_int_equal(ibv_attach_mcast(rc.qp, &g, 0), EINVAL); /* RC */
	t_node_fini(&rc);

	struct ibv_ah *ah = ah_to(s.pd, group_ip);
	assert_int_equal(post_recvs(&r, 0, 4, BUF), 0);
	assert_int_equal(ud_send(&s, ah, MCAST_QPN, QKEY, 32, 1, 1), 0);
	assert_int_equal(send_done(&s, IBV_WC_SUCCESS), 0);
	struct ibv_wc wc;
	assert_int_equal(t_poll1(r.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	check_ipv4_grh(r.buf, group_ip, 32);
	/* a multicast dgid needs the multicast QPN */
	assert_int_equal(ud_send(&s, ah, r.qp->qp_num, QKEY, 32, 2, 2), 0);
	assert_int_equal(send_done(&s, IBV_WC_SUCCESS), 0);
	assert_int_equal(t_poll1(r.cq, &wc, 50), 0);
	assert_int_equal(ibv_detach_mcast(r.qp, &g, 0), 0);
	assert_int_equal(ud_send(&s, ah, MCAST_QPN, QKEY, 32, 3, 3), 0);
	assert_int_equal(send_done(&s, IBV_WC_SUCCESS), 0);
	assert_int_equal(t_poll1(r.cq, &wc, 50), 0);
	/* destroying an attached QP detaches it */
	assert_int_equal(ibv_attach_mcast(r.qp, &g, 0), 0);
	ud_fini(&r);
	assert_int_equal(ud_init(&r, 0, 0), 0);
	assert_int_equal(ibv_detach_mcast(r.qp, &g, 0), EINVAL);
	ibv_destroy_ah(ah);
	ud_fini(&s);
	ud_fini(&r);
}

/* Loopback: a member QP that sends to its own group gets its datagram back
 * unless it was created with IBV_QP_CREATE_BLOCK_SELF_MCAST_LB. */
static void test_self_loopback(void **state)
{
	(void)state;
	union ibv_gid g;
	gid_v4(&g, group_ip);
	for (int block = 0; block <= 1; block++) {
		struct ud_node n, other;
		assert_int_equal(ud_init(&n, 0, (uint32_t)block), 0);
		assert_int_equal(ud_init(&other, 0, 0), 0);
		assert_int_equal(ibv_attach_mcast(n.qp, &g, 0), 0);
		assert_int_equal(ibv_attach_mcast(other.qp, &g, 0), 0);
		assert_int_equal(post_recvs(&n, 0, 2, BUF), 0);
		assert_int_equal(post_recvs(&other, 0, 2, BUF), 0);
		struct ibv_ah *ah = ah_to(n.pd, group_ip);
		assert_int_equal(ud_send(&n, ah, MCAST_QPN, QKEY, 16, 5, 5), 0);
		struct ibv_wc wc[2];
		int got = t_poll(n.cq, wc, 2, block ? 100 : T_TIMEOUT_MS);
		assert_int_equal(got, block ? 1 : 2); /* send (+ own copy) */
		assert_int_equal(t_poll1(other.cq, wc, T_TIMEOUT_MS), 1);
		assert_int_equal(ntohl(wc[0].imm_data), 5);
		ibv_destroy_ah(ah);
		ud_fini(&n);
		ud_fini(&other);
	}
}

/* Three processes: the parent sends to the group, two children receive
 * every datagram in order. */
static int child_member(int fd, void *arg)
{
	(void)arg;
	struct ud_node r;
	CHILD_CHECK(ud_init(&r, 64, 0) == 0);
	union ibv_gid g;
	gid_v4(&g, group_ip);
	CHILD_CHECK(ibv_attach_mcast(r.qp, &g, 0) == 0);
	CHILD_CHECK(post_recvs(&r, 0, 20, BUF) == 0);
	uint32_t qpn = r.qp->qp_num;
	CHILD_CHECK(t_send(fd, &qpn, sizeof qpn) == 0);
	for (uint32_t i = 0; i < 20; i++) {
		struct ibv_wc wc;
		CHILD_CHECK(t_poll1(r.cq, &wc, 10000) == 1);
		CHILD_CHECK(wc.status == IBV_WC_SUCCESS);
		CHILD_CHECK(ntohl(wc.imm_data) == 1000 + i);
		CHILD_CHECK(wc.byte_len == 40 + 200);
		const uint8_t *p = r.buf + (size_t)wc.wr_id * BUF;
		CHILD_CHECK(!memcmp(p + 36, group_ip, 4));
		for (int k = 0; k < 200; k++)
			CHILD_CHECK(p[40 + k] == (uint8_t)(1000 + i + k));
	}
	ud_fini(&r);
	return 0;
}

static void test_multicast_processes(void **state)
{
	(void)state;
	struct t_child c[2];
	uint32_t qpn[2];
	for (int i = 0; i < 2; i++) {
		c[i] = t_fork(child_member, NULL);
		assert_true(c[i].pid > 0);
		assert_int_equal(t_recv(c[i].fd, &qpn[i], sizeof qpn[i], 10000), 0);
	}
	assert_int_not_equal(qpn[0], qpn[1]);
	struct ud_node s;
	assert_int_equal(ud_init(&s, 0, 0), 0);
	struct ibv_ah *ah = ah_to(s.pd, group_ip);
	for (uint32_t i = 0; i < 20; i++) {
		assert_int_equal(ud_send(&s, ah, MCAST_QPN, QKEY, 200, 1000 + i, i), 0);
		assert_int_equal(send_done(&s, IBV_WC_SUCCESS), 0);
	}
	for (int i = 0; i < 2; i++)
		assert_int_equal(t_wait(&c[i], 15000), 0);
	ibv_destroy_ah(ah);
	ud_fini(&s);
}

/* ---- seeded faults: run in a fresh image with the variables set ---- */

#define FN 600
#define FR 3

struct evlog {
	int drop[FR][FN], dup[FR][FN], reorder[FR][FN], norecv[FR][FN];
};

static int read_log(const char *path, const uint32_t *qpn, int nr,
		    struct evlog *ev)
{
	memset(ev, 0, sizeof *ev);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char what[16];
	unsigned q, imm, len;
	int lines = 0;
	while (fscanf(f, "%15s %u %u %u", what, &q, &imm, &len) == 4) {
		int r = -1;
		for (int i = 0; i < nr; i++)
			if (qpn[i] == q)
				r = i;
		if (r < 0 || imm >= FN || len != 40 + 64) {
			fclose(f);
			return -2;
		}
		int (*t)[FN] = !strcmp(what, "drop") ? ev->drop :
			       !strcmp(what, "dup") ? ev->dup :
			       !strcmp(what, "reorder") ? ev->reorder :
			       !strcmp(what, "norecv") ? ev->norecv : NULL;
		if (!t) {
			fclose(f);
			return -3;
		}
		t[r][imm]++;
		lines++;
	}
	fclose(f);
	return lines;
}

/* FR members of a group, FN datagrams; every receiver's arrivals must be
 * exactly what the log says: dropped ones missing, duplicated ones twice,
 * reordered ones after the next one.  Exit code 0 = consistent. */
static int fault_child(void)
{
	struct ud_node s, r[FR];
	union ibv_gid g;
	gid_v4(&g, group_ip);
	uint32_t qpn[FR];
	if (ud_init(&s, 0, 0))
		return 1;
	for (int i = 0; i < FR; i++) {
		if (ud_init(&r[i], 2 * FN, 0) || ibv_attach_mcast(r[i].qp, &g, 0))
			return 2;
		for (int k = 0; k < 2 * FN; k++)
			if (t_post_recv(r[i].qp, r[i].buf, BUF, r[i].mr->lkey,
					(uint64_t)k))
				return 3;
		qpn[i] = r[i].qp->qp_num;
	}
	struct ibv_ah *ah = ah_to(s.pd, group_ip);
	for (uint32_t i = 0; i < FN; i++)
		if (ud_send(&s, ah, MCAST_QPN, QKEY, 64, i, i) ||
		    send_done(&s, IBV_WC_SUCCESS))
			return 4;
	ibv_destroy_ah(ah);
	ud_fini(&s); /* releases a datagram still held for reordering */

	struct evlog *ev = calloc(1, sizeof *ev);
	if (!ev || read_log(getenv("SOFTRDMA_UD_LOG"), qpn, FR, ev) <= 0)
		return 5;
	int drops[FR] = {0};
	for (int i = 0; i < FR; i++) {
		int want = 0, seen[FN] = {0}, order[2 * FN], n = 0;
		for (int k = 0; k < FN; k++) {
			if (ev->norecv[i][k])
				return 6; /* every receiver had room */
			drops[i] += ev->drop[i][k];
			want += ev->drop[i][k] ? 0 : 1 + ev->dup[i][k];
		}
		struct ibv_wc wc;
		while (n < want && t_poll1(r[i].cq, &wc, 2000) == 1) {
			if (wc.status != IBV_WC_SUCCESS)
				return 7;
			order[n++] = (int)ntohl(wc.imm_data);
		}
		if (n != want || t_poll1(r[i].cq, &wc, 20) != 0)
			return 8; /* too few, or more than the log explains */
		for (int k = 0; k < n; k++)
			seen[order[k]]++;
		for (int k = 0; k < FN; k++) {
			if (seen[k] != (ev->drop[i][k] ? 0 : 1 + ev->dup[i][k]))
				return 9;
			if (!ev->reorder[i][k])
				continue;
			/* the next datagram that reached this receiver came
			 * before it */
			int next = k + 1;
			while (next < FN && ev->drop[i][next])
				next++;
			if (next == FN)
				continue;
			int pk = -1, pn = -1;
			for (int m = 0; m < n; m++) {
				if (order[m] == k && pk < 0)
					pk = m;
				if (order[m] == next && pn < 0)
					pn = m;
			}
			if (!(pn < pk))
				return 10;
		}
	}
	/* each receiver draws on its own */
	if (!memcmp(ev->drop[0], ev->drop[1], sizeof ev->drop[0]) ||
	    !memcmp(ev->drop[1], ev->drop[2], sizeof ev->drop[0]))
		return 11;
	for (int i = 0; i < FR; i++)
		if (drops[i] < FN / 20 || drops[i] > FN / 4) /* p = 0.1 */
			return 12;
	free(ev);
	for (int i = 0; i < FR; i++)
		ud_fini(&r[i]);
	return 0;
}

/* No faults, only the log: datagrams lost for want of a receive are named. */
static int norecv_child(void)
{
	struct ud_node s, r;
	if (ud_init(&s, 0, 0) || ud_init(&r, 0, 0))
		return 1;
	static const uint8_t lo[4] = {127, 0, 0, 1};
	struct ibv_ah *ah = ah_to(s.pd, lo);
	if (post_recvs(&r, 0, 5, BUF))
		return 2;
	for (uint32_t i = 0; i < 8; i++)
		if (ud_send(&s, ah, r.qp->qp_num, QKEY, 64, i, i) ||
		    send_done(&s, IBV_WC_SUCCESS))
			return 3;
	struct ibv_wc wc[8];
	if (t_poll(r.cq, wc, 5, T_TIMEOUT_MS) != 5 || t_poll(r.cq, wc + 5, 3, 50) != 0)
		return 4;
	struct evlog *ev = calloc(1, sizeof *ev);
	uint32_t q = r.qp->qp_num;
	if (!ev || read_log(getenv("SOFTRDMA_UD_LOG"), &q, 1, ev) != 3)
		return 5;
	for (int k = 0; k < 8; k++)
		if (ev->norecv[0][k] != (k >= 5))
			return 6;
	free(ev);
	ibv_destroy_ah(ah);
	ud_fini(&s);
	ud_fini(&r);
	return 0;
}

/* SOFTRDMA_UD_DROP=abc: refused with a message, so nothing is dropped. */
static int badprob_child(void)
{
	struct ud_node s, r;
	if (ud_init(&s, 0, 0) || ud_init(&r, 0, 0))
		return 1;
	static const uint8_t lo[4] = {127, 0, 0, 1};
	struct ibv_ah *ah = ah_to(s.pd, lo);
	if (post_recvs(&r, 0, 20, BUF))
		return 2;
	for (uint32_t i = 0; i < 20; i++)
		if (ud_send(&s, ah, r.qp->qp_num, QKEY, 64, i, i) ||
		    send_done(&s, IBV_WC_SUCCESS))
			return 3;
	struct ibv_wc wc[20];
	if (t_poll(r.cq, wc, 20, T_TIMEOUT_MS) != 20)
		return 4;
	ibv_destroy_ah(ah);
	ud_fini(&s);
	ud_fini(&r);
	return 0;
}

static int run_child(const char *mode, const char *seed, const char *log)
{
	unlink(log);
	pid_t p = fork();
	if (p == 0) {
		if (!strcmp(mode, "badprob")) {
			setenv("SOFTRDMA_UD_DROP", "abc", 1);
			setenv("SOFTRDMA_UD_REORDER", "1.5", 1);
			/* stderr to the log path, for the parent to read */
			int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
			if (fd < 0 || dup2(fd, 2) < 0)
				_exit(126);
			execl("/proc/self/exe", "test_softrdma_ud", "--child", mode,
			      (char *)NULL);
			_exit(127);
		}
		if (!strcmp(mode, "faults")) {
			setenv("SOFTRDMA_UD_DROP", "0.1", 1);
			setenv("SOFTRDMA_UD_DUP", "0.05", 1);
			setenv("SOFTRDMA_UD_REORDER", "0.05", 1);
		}
		setenv("SOFTRDMA_SEED", seed, 1);
		setenv("SOFTRDMA_UD_LOG", log, 1);
		execl("/proc/self/exe", "test_softrdma_ud", "--child", mode,
		      (char *)NULL);
		_exit(127);
	}
	struct t_child c = {p, dup(0)};
	return t_wait(&c, 60000);
}

/* The log of a run, with each receiver's qpn replaced by its rank. */
static char *log_text(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	char *out = calloc(1, 1 << 20);
	size_t n = 0;
	unsigned qs[FR] = {0};
	char what[16];
	unsigned q, imm, len;
	while (out && fscanf(f, "%15s %u %u %u", what, &q, &imm, &len) == 4) {
		int r = 0;
		while (r < FR && qs[r] && qs[r] != q)
			r++;
		if (r < FR && !qs[r])
			qs[r] = q;
		n += (size_t)snprintf(out + n, (1 << 20) - n, "%s %d %u\n", what,
				      r, imm);
	}
	fclose(f);
	return out;
}

static void test_seeded_faults(void **state)
{
	(void)state;
	char log[3][96];
	for (int i = 0; i < 3; i++)
		snprintf(log[i], sizeof log[i], "/tmp/sr-udlog-%d-%d", (int)getpid(), i);
	assert_int_equal(run_child("faults", "7", log[0]), 0);
	assert_int_equal(run_child("faults", "7", log[1]), 0);
	assert_int_equal(run_child("faults", "8", log[2]), 0);
	char *a = log_text(log[0]), *b = log_text(log[1]), *c = log_text(log[2]);
	assert_non_null(a);
	assert_non_null(b);
	assert_non_null(c);
	assert_non_null(strstr(a, "drop "));
	assert_non_null(strstr(a, "dup "));
	assert_non_null(strstr(a, "reorder "));
	assert_string_equal(a, b);      /* same seed, same faults */
	assert_string_not_equal(a, c);  /* another seed, others */
	free(a);
	free(b);
	free(c);
	assert_int_equal(run_child("norecv", "1", log[0]), 0);
	/* a variable that is not a probability: said so, and ignored */
	assert_int_equal(run_child("badprob", "1", log[1]), 0);
	FILE *f = fopen(log[1], "r");
	assert_non_null(f);
	char err[1024] = "";
	size_t n = fread(err, 1, sizeof err - 1, f);
	err[n] = 0;
	fclose(f);
	assert_non_null(strstr(err, "SOFTRDMA_UD_DROP='abc' is not a probability"));
	assert_non_null(strstr(err, "SOFTRDMA_UD_REORDER='1.5' is not a probability"));
	for (int i = 0; i < 3; i++)
		unlink(log[i]);
}

int main(int argc, char **argv)
{
	t_fabric_setup("ud");
	if (argc == 3 && !strcmp(argv[1], "--child"))
		return !strcmp(argv[2], "faults") ? fault_child() :
		       !strcmp(argv[2], "badprob") ? badprob_child() :
						     norecv_child();
	if (!t_is_softrdma()) {
		fprintf(stderr, "SKIP: the loaded libibverbs is not softrdma\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_state_machine),
		cmocka_unit_test(test_address_handle),
		cmocka_unit_test(test_unicast),
		cmocka_unit_test(test_no_receive_and_short_receive),
		cmocka_unit_test(test_mtu),
		cmocka_unit_test(test_attach_detach),
		cmocka_unit_test(test_self_loopback),
		cmocka_unit_test(test_multicast_processes),
		cmocka_unit_test(test_seeded_faults),
	};
	return t_fabric_check_removed(cmocka_run_group_tests(tests, NULL, NULL));
}
