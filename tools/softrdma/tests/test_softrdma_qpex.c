/*
 * softrdma: the extended verbs perftest (and a transport that sizes its
 * queues by the ops it uses) needs: ibv_create_qp_ex with send_ops_flags,
 * ibv_qp_to_qp_ex and the ibv_wr_* API (ibv_wr_post(3)), and
 * ibv_create_ah_from_wc / ibv_init_ah_from_wc for UD replies.
 */
#include "sr_test.h"

#include <arpa/inet.h>

#define BUFSZ 8192

struct xnode {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_qp_ex *qx;
	char *buf;
	struct ibv_mr *mr;
};

static struct ibv_qp *make_qp(struct xnode *n, enum ibv_qp_type t, uint64_t ops,
			      uint32_t sq, uint32_t inl)
{
	struct ibv_qp_init_attr_ex ia = {
		.send_cq = n->cq, .recv_cq = n->cq,
		.cap = {sq, 16, 2, 2, inl}, .qp_type = t, .sq_sig_all = 1,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = n->pd, .send_ops_flags = ops,
	};
	return ibv_create_qp_ex(n->ctx, &ia);
}

static void xopen(struct xnode *n, enum ibv_qp_type t, uint64_t ops, uint32_t sq)
{
	memset(n, 0, sizeof *n);
	n->ctx = t_open();
	n->pd = ibv_alloc_pd(n->ctx);
	n->cq = ibv_create_cq(n->ctx, 64, NULL, NULL, 0);
	n->buf = calloc(1, BUFSZ);
	n->mr = ibv_reg_mr(n->pd, n->buf, BUFSZ, IBV_ACCESS_LOCAL_WRITE |
			   IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	n->qp = make_qp(n, t, ops, sq, 64);
	assert_non_null(n->qp);
	n->qx = ibv_qp_to_qp_ex(n->qp);
	assert_non_null(n->qx);
	assert_ptr_equal(&n->qx->qp_base, n->qp);
}

static void xclose(struct xnode *n)
{
	ibv_destroy_qp(n->qp);
	ibv_dereg_mr(n->mr);
	ibv_destroy_cq(n->cq);
	ibv_dealloc_pd(n->pd);
	ibv_close_device(n->ctx);
	free(n->buf);
}

static const uint64_t WRITES = IBV_QP_EX_WITH_RDMA_WRITE |
			       IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;

static void test_create_and_ops(void **state)
{
	(void)state;
	struct xnode a;
	xopen(&a, IBV_QPT_RC, WRITES, 16);
	/* only the ops asked for have a function */
	assert_non_null(a.qx->wr_rdma_write);
	assert_non_null(a.qx->wr_rdma_write_imm);
	assert_null(a.qx->wr_send);
	assert_null(a.qx->wr_rdma_read);
	assert_null(a.qx->wr_set_ud_addr);
	assert_non_null(a.qx->wr_set_sge);
	assert_non_null(a.qx->wr_set_inline_data);
	/* a QP made without send ops has no extended API */
	struct ibv_qp_init_attr ia = {.send_cq = a.cq, .recv_cq = a.cq,
				      .cap = {4, 4, 1, 1, 0}, .qp_type = IBV_QPT_RC};
	struct ibv_qp *plain = ibv_create_qp(a.pd, &ia);
	assert_null(ibv_qp_to_qp_ex(plain));
	ibv_destroy_qp(plain);
	/* ops the device has not: refused */
	errno = 0;
	assert_null(make_qp(&a, IBV_QPT_RC, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, 4, 0));
	assert_int_equal(errno, EOPNOTSUPP);
	errno = 0;
	assert_null(make_qp(&a, IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE, 4, 0));
	assert_int_equal(errno, EOPNOTSUPP);
	/* an op not asked for cannot be posted the old way either */
	assert_int_equal(t_connect(a.qp, a.qp->qp_num, &t_conn_default), 0);
	assert_int_equal(t_post_write(a.qp, IBV_WR_SEND, a.buf, 8, a.mr->lkey, 0, 0,
				      0, 0, 1), EINVAL);
	assert_int_equal(t_post_write(a.qp, IBV_WR_RDMA_WRITE, a.buf, 8, a.mr->lkey,
				      (uintptr_t)a.buf + 64, a.mr->rkey, 0, 0, 2), 0);
	struct ibv_wc wc;
	assert_int_equal(t_poll1(a.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	xclose(&a);
}

static void test_wr_post(void **state)
{
	(void)state;
	struct xnode a, b;
	xopen(&a, IBV_QPT_RC, WRITES | IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_READ, 8);
	xopen(&b, IBV_QPT_RC, WRITES, 8);
	assert_int_equal(t_connect(a.qp, b.qp->qp_num, &t_conn_default), 0);
	assert_int_equal(t_connect(b.qp, a.qp->qp_num, &t_conn_default), 0);
	assert_int_equal(t_post_recv(b.qp, b.buf + 4096, 256, b.mr->lkey, 70), 0);
	assert_int_equal(t_post_recv(b.qp, NULL, 0, 0, 71), 0);
	memset(a.buf, 'w', 100);
	memset(b.buf + 2048, 'r', 32);
	char inl[40];
	memset(inl, 'i', sizeof inl);
	/* four work requests in one batch */
	ibv_wr_start(a.qx);
	a.qx->wr_id = 1;
	a.qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a.qx, b.mr->rkey, (uintptr_t)b.buf);
	ibv_wr_set_sge(a.qx, a.mr->lkey, (uintptr_t)a.buf, 100);
	a.qx->wr_id = 2;
	ibv_wr_send(a.qx);
	ibv_wr_set_inline_data(a.qx, inl, sizeof inl);
	a.qx->wr_id = 3;
	ibv_wr_rdma_write_imm(a.qx, b.mr->rkey, (uintptr_t)b.buf + 512, htonl(99));
	struct ibv_sge two[2] = {{(uintptr_t)a.buf, 10, a.mr->lkey},
				 {(uintptr_t)a.buf + 50, 10, a.mr->lkey}};
	ibv_wr_set_sge_list(a.qx, 2, two);
	a.qx->wr_id = 4;
	ibv_wr_rdma_read(a.qx, b.mr->rkey, (uintptr_t)b.buf + 2048);
	ibv_wr_set_sge(a.qx, a.mr->lkey, (uintptr_t)a.buf + 1024, 32);
	memset(inl, 'X', sizeof inl); /* inline was copied when set */
	assert_int_equal(ibv_wr_complete(a.qx), 0);
	struct ibv_wc wc[4];
	assert_int_equal(t_poll(a.cq, wc, 4, T_TIMEOUT_MS), 4);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
		assert_int_equal(wc[i].wr_id, (uint64_t)i + 1);
	}
	assert_int_equal(wc[3].opcode, IBV_WC_RDMA_READ);
	assert_memory_equal(b.buf, a.buf, 100);
	assert_memory_equal(a.buf + 1024, b.buf + 2048, 32);
	assert_int_equal(t_poll(b.cq, wc, 2, T_TIMEOUT_MS), 2);
	assert_int_equal(wc[0].wr_id, 70);
	assert_int_equal(wc[0].byte_len, 40);
	assert_int_equal(b.buf[4096], 'i');
	assert_int_equal(wc[1].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
	assert_int_equal(ntohl(wc[1].imm_data), 99);
	assert_int_equal(wc[1].byte_len, 20);
	xclose(&a);
	xclose(&b);
}

static void test_wr_errors(void **state)
{
	(void)state;
	struct xnode a;
	xopen(&a, IBV_QPT_RC, WRITES, 4);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	ibv_query_qp(a.qp, &qa, IBV_QP_CAP, &qi);
	uint32_t cap = qi.cap.max_send_wr;
	/* not in RTS: refused at complete */
	ibv_wr_start(a.qx);
	ibv_wr_rdma_write(a.qx, a.mr->rkey, (uintptr_t)a.buf);
	ibv_wr_set_sge(a.qx, a.mr->lkey, (uintptr_t)a.buf, 8);
	assert_int_equal(ibv_wr_complete(a.qx), EINVAL);
	assert_int_equal(t_connect(a.qp, a.qp->qp_num, &t_conn_default), 0);
	/* more than the queue holds: ENOMEM, and none of the batch posted */
	ibv_wr_start(a.qx);
	for (uint32_t i = 0; i <= cap; i++) {
		a.qx->wr_id = i;
		ibv_wr_rdma_write(a.qx, a.mr->rkey, (uintptr_t)a.buf + 4096);
		ibv_wr_set_sge(a.qx, a.mr->lkey, (uintptr_t)a.buf, 8);
	}
	assert_int_equal(ibv_wr_complete(a.qx), ENOMEM);
	struct ibv_wc wc[8];
	assert_int_equal(t_poll(a.cq, wc, 8, 30), 0);
	/* inline data over max_inline_data: ENOMEM, as mlx5 */
	char big[4096] = {0};
	ibv_wr_start(a.qx);
	ibv_wr_rdma_write(a.qx, a.mr->rkey, (uintptr_t)a.buf + 4096);
	ibv_wr_set_inline_data(a.qx, big, qi.cap.max_inline_data + 1);
	assert_int_equal(ibv_wr_complete(a.qx), ENOMEM);
	/* abort drops what was built */
	ibv_wr_start(a.qx);
	ibv_wr_rdma_write(a.qx, a.mr->rkey, (uintptr_t)a.buf + 4096);
	ibv_wr_set_sge(a.qx, a.mr->lkey, (uintptr_t)a.buf, 8);
	ibv_wr_abort(a.qx);
	assert_int_equal(t_poll(a.cq, wc, 8, 30), 0);
	/* and the queue still works */
	ibv_wr_start(a.qx);
	a.qx->wr_id = 77;
	ibv_wr_rdma_write(a.qx, a.mr->rkey, (uintptr_t)a.buf + 4096);
	ibv_wr_set_sge(a.qx, a.mr->lkey, (uintptr_t)a.buf, 8);
	assert_int_equal(ibv_wr_complete(a.qx), 0);
	assert_int_equal(t_poll1(a.cq, wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc[0].wr_id, 77);
	xclose(&a);
}

/* UD: a datagram comes in; the reply goes back through an AH made from
 * its completion and GRH, for a RoCE v2 (IPv4 header) and a RoCE v1 (GRH)
 * sender. */
static int ud_ready(struct xnode *n)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qkey = 0x11111111};
	if (ibv_modify_qp(n->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					     IBV_QP_PORT | IBV_QP_QKEY))
		return -1;
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(n->qp, &a, IBV_QP_STATE))
		return -2;
	a.qp_state = IBV_QPS_RTS;
	return ibv_modify_qp(n->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

static void test_ah_from_wc(void **state)
{
	(void)state;
	const uint64_t ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
	for (int v1 = 0; v1 < 2; v1++) {
		struct xnode s, r;
		xopen(&s, IBV_QPT_UD, ops, 8);
		xopen(&r, IBV_QPT_UD, ops, 8);
		assert_int_equal(ud_ready(&s), 0);
		assert_int_equal(ud_ready(&r), 0);
		struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1};
		aa.grh.sgid_index = v1 ? 2 : 3;        /* IPv4: RoCE v1 / v2 */
		aa.grh.hop_limit = 64;
		aa.grh.dgid.raw[10] = aa.grh.dgid.raw[11] = 0xff;
		aa.grh.dgid.raw[12] = 127;
		aa.grh.dgid.raw[15] = 1;
		struct ibv_ah *ah = ibv_create_ah(s.pd, &aa);
		assert_non_null(ah);
		assert_int_equal(t_post_recv(r.qp, r.buf, 1024, r.mr->lkey, 1), 0);
		assert_int_equal(t_post_recv(s.qp, s.buf, 1024, s.mr->lkey, 2), 0);
		ibv_wr_start(s.qx);
		s.qx->wr_id = 10;
		ibv_wr_send_imm(s.qx, htonl(5));
		ibv_wr_set_ud_addr(s.qx, ah, r.qp->qp_num, 0x11111111);
		ibv_wr_set_inline_data(s.qx, "hello", 5);
		assert_int_equal(ibv_wr_complete(s.qx), 0);
		struct ibv_wc wc;
		assert_int_equal(t_poll1(r.cq, &wc, T_TIMEOUT_MS), 1);
		assert_int_equal(wc.status, IBV_WC_SUCCESS);
		assert_true(wc.wc_flags & IBV_WC_GRH);
		struct ibv_grh *grh = (struct ibv_grh *)r.buf;
		if (v1)
			assert_int_equal(grh->next_hdr, 0x1b);
		struct ibv_ah_attr back;
		assert_int_equal(ibv_init_ah_from_wc(r.ctx, 1, &wc, grh, &back), 0);
		assert_int_equal(back.is_global, 1);
		assert_int_equal(back.grh.sgid_index, v1 ? 2 : 3);
		assert_memory_equal(back.grh.dgid.raw, aa.grh.dgid.raw, 16);
		struct ibv_ah *rah = ibv_create_ah_from_wc(r.pd, &wc, grh, 1);
		assert_non_null(rah);
		ibv_wr_start(r.qx);
		r.qx->wr_id = 11;
		ibv_wr_send(r.qx);
		ibv_wr_set_ud_addr(r.qx, rah, wc.src_qp, 0x11111111);
		ibv_wr_set_inline_data(r.qx, "back", 4);
		assert_int_equal(ibv_wr_complete(r.qx), 0);
		/* the sender gets its send completion and the reply */
		struct ibv_wc two[2];
		assert_int_equal(t_poll(s.cq, two, 2, T_TIMEOUT_MS), 2);
		int k = two[0].wr_id == 2 ? 0 : 1;
		assert_int_equal(two[k].wr_id, 2);
		assert_int_equal(two[k].status, IBV_WC_SUCCESS);
		assert_memory_equal(s.buf + 40, "back", 4);
		ibv_destroy_ah(rah);
		ibv_destroy_ah(ah);
		xclose(&s);
		xclose(&r);
	}
}

int main(void)
{
	t_fabric_setup("qpex");
	if (!t_is_softrdma()) {
		fprintf(stderr, "SKIP: the loaded libibverbs is not softrdma\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_and_ops),
		cmocka_unit_test(test_wr_post),
		cmocka_unit_test(test_wr_errors),
		cmocka_unit_test(test_ah_from_wc),
	};
	int r = cmocka_run_group_tests(tests, NULL, NULL);
	return t_fabric_check_removed(r);
}
