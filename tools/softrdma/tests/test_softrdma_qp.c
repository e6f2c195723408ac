/*
 * softrdma: RC queue pair creation and the state machine, with the attribute
 * masks each transition requires, and what posting does in each state.
 */
#include "sr_test.h"

static struct t_node N;
static char buf[4096];
static struct ibv_mr *MR;

static int setup(void **state)
{
	(void)state;
	struct t_qp_opts o = {.max_send_wr = 8, .max_recv_wr = 8, .max_inline = 64};
	if (t_node_init(&N, &o))
		return -1;
	MR = ibv_reg_mr(N.pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	return MR ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	ibv_dereg_mr(MR);
	t_node_fini(&N);
	return 0;
}

static enum ibv_qp_state qstate(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	assert_int_equal(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia), 0);
	return a.qp_state;
}

static void test_create(void **state)
{
	(void)state;
	struct ibv_qp_init_attr ia = {
		.send_cq = N.cq, .recv_cq = N.cq,
		.cap = {.max_send_wr = 1u << 20, .max_recv_wr = 4,
			.max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
	};
	errno = 0;
	assert_null(ibv_create_qp(N.pd, &ia));
	assert_int_equal(errno, EINVAL);
	ia.cap.max_send_wr = 4;
	ia.cap.max_inline_data = 1u << 20;
	assert_null(ibv_create_qp(N.pd, &ia));
	ia.cap.max_inline_data = 32;
	struct ibv_qp *qp = ibv_create_qp(N.pd, &ia);
	assert_non_null(qp);
	/* written back, at least what was asked, sized as mlx5 sizes: a
	 * 256-byte WQE (192 for the memory-window room a plain RC QP
	 * reserves, 4 of inline header) holds 60 bytes inline */
	assert_int_equal(ia.cap.max_inline_data, 60);
	assert_int_equal(ia.cap.max_send_wr, 4);
	assert_int_equal(ia.cap.max_recv_wr, 4);
	assert_true(qp->qp_num >= 2 && qp->qp_num <= 0xffffff);
	assert_int_not_equal(qp->qp_num, N.qp->qp_num);
	assert_int_equal(qp->qp_type, IBV_QPT_RC);
	assert_int_equal(qstate(qp), IBV_QPS_RESET);
	/* a CQ in use by a QP cannot be destroyed */
	assert_int_equal(ibv_destroy_cq(N.cq), EBUSY);
	assert_int_equal(ibv_destroy_qp(qp), 0);
}

static void test_transitions(void **state)
{
	(void)state;
	struct ibv_qp *qp = N.qp;
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0,
				.port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
	/* RESET -> INIT: PKEY_INDEX, PORT and ACCESS_FLAGS are required */
	assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
						      IBV_QP_ACCESS_FLAGS), EINVAL);
	assert_int_equal(qstate(qp), IBV_QPS_RESET);
	/* ... and nothing else is allowed */
	a.dest_qp_num = 5;
	assert_int_equal(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
						      IBV_QP_PORT | IBV_QP_ACCESS_FLAGS |
						      IBV_QP_DEST_QPN), EINVAL);
	/* a bad port number */
	a.port_num = 2;
	assert_int_equal(t_to_init(qp, 0) == 0 &&
			 ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
						       IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == EINVAL, 1);
	assert_int_equal(qstate(qp), IBV_QPS_INIT);

	/* INIT -> RTS skips a state */
	struct ibv_qp_attr r;
	t_rts_attr(&r, 8, 3, 3);
	assert_int_equal(ibv_modify_qp(qp, &r, T_RTS_MASK), EINVAL);

	/* INIT -> RTR: every required attribute, a GRH on RoCE, sane values */
	t_rtr_attr(&r, qp->qp_num, 1);
	assert_int_equal(ibv_modify_qp(qp, &r, T_RTR_MASK & ~IBV_QP_MIN_RNR_TIMER), EINVAL);
	r.ah_attr.is_global = 0;
	assert_int_equal(ibv_modify_qp(qp, &r, T_RTR_MASK), EINVAL);
	r.ah_attr.is_global = 1;
	r.path_mtu = 7;
	assert_int_equal(ibv_modify_qp(qp, &r, T_RTR_MASK), EINVAL);
	r.path_mtu = IBV_MTU_1024;
	r.min_rnr_timer = 32;
	assert_int_equal(ibv_modify_qp(qp, &r, T_RTR_MASK), EINVAL);
	r.min_rnr_timer = 1;
	assert_int_equal(qstate(qp), IBV_QPS_INIT);
	assert_int_equal(ibv_modify_qp(qp, &r, T_RTR_MASK), 0);
	assert_int_equal(qstate(qp), IBV_QPS_RTR);

	/* RTR -> RTS */
	t_rts_attr(&r, 8, 3, 3);
	assert_int_equal(ibv_modify_qp(qp, &r, T_RTS_MASK & ~IBV_QP_RNR_RETRY), EINVAL);
	r.retry_cnt = 8;
	assert_int_equal(ibv_modify_qp(qp, &r, T_RTS_MASK), EINVAL);
	r.retry_cnt = 3;
	assert_int_equal(ibv_modify_qp(qp, &r, T_RTS_MASK | IBV_QP_DEST_QPN), EINVAL);
	assert_int_equal(ibv_modify_qp(qp, &r, T_RTS_MASK), 0);
	assert_int_equal(qstate(qp), IBV_QPS_RTS);
	assert_int_equal(qp->state, IBV_QPS_RTS);

	/* RTS -> RTS may change the RNR timer; not the path */
	struct ibv_qp_attr m = {.qp_state = IBV_QPS_RTS, .min_rnr_timer = 5,
				.cur_qp_state = IBV_QPS_RTS};
	assert_int_equal(ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER |
						      IBV_QP_CUR_STATE), 0);
	assert_int_equal(ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_PATH_MTU), EINVAL);
	m.cur_qp_state = IBV_QPS_INIT; /* wrong current state */
	assert_int_equal(ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_CUR_STATE), EINVAL);
	/* RTS -> INIT is not a transition */
	m.qp_state = IBV_QPS_INIT;
	assert_int_equal(ibv_modify_qp(qp, &m, IBV_QP_STATE), EINVAL);

	/* query returns what was set */
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr qi;
	assert_int_equal(ibv_query_qp(qp, &q, IBV_QP_STATE | IBV_QP_TIMEOUT, &qi), 0);
	assert_int_equal(q.dest_qp_num, qp->qp_num);
	assert_int_equal(q.timeout, 8);
	assert_int_equal(q.retry_cnt, 3);
	assert_int_equal(q.rnr_retry, 3);
	assert_int_equal(q.min_rnr_timer, 5);
	assert_int_equal(q.qp_access_flags, 0);
	assert_int_equal(q.path_mtu, IBV_MTU_1024);
	/* asked 8 WRs with 64 bytes inline: 320-byte WQEs in a 4 KiB queue
	 * hold 12, and 124 bytes inline */
	assert_int_equal(qi.cap.max_send_wr, 12);
	assert_int_equal(qi.cap.max_inline_data, 124);
	assert_ptr_equal(qi.send_cq, N.cq);

	/* any -> RESET, and the QP can be brought up again */
	struct ibv_qp_attr z = {.qp_state = IBV_QPS_RESET};
	assert_int_equal(ibv_modify_qp(qp, &z, IBV_QP_STATE), 0);
	assert_int_equal(qstate(qp), IBV_QPS_RESET);
}

static void test_post_by_state(void **state)
{
	(void)state;
	struct ibv_qp *qp = N.qp;
	struct ibv_sge sge = {(uintptr_t)buf, 16, MR->lkey};
	struct ibv_send_wr sw = {.wr_id = 7, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_SEND}, *sbad = NULL;
	struct ibv_recv_wr rw = {.wr_id = 9, .sg_list = &sge, .num_sge = 1}, *rbad = NULL;

	assert_int_equal(qstate(qp), IBV_QPS_RESET);
	assert_int_equal(ibv_post_recv(qp, &rw, &rbad), EINVAL);
	assert_ptr_equal(rbad, &rw);
	assert_int_equal(ibv_post_send(qp, &sw, &sbad), EINVAL);
	assert_ptr_equal(sbad, &sw);

	assert_int_equal(t_to_init(qp, 0), 0);
	/* receives are accepted from INIT on; sends only in RTS */
	assert_int_equal(ibv_post_recv(qp, &rw, &rbad), 0);
	sbad = NULL;
	assert_int_equal(ibv_post_send(qp, &sw, &sbad), EINVAL);
	assert_ptr_equal(sbad, &sw);
	struct ibv_qp_attr r;
	t_rtr_attr(&r, qp->qp_num, 1);
	assert_int_equal(ibv_modify_qp(qp, &r, T_RTR_MASK), 0);
	assert_int_equal(ibv_post_send(qp, &sw, &sbad), EINVAL);
	rw.wr_id = 10;
	assert_int_equal(ibv_post_recv(qp, &rw, &rbad), 0);

	/* too many sges */
	struct ibv_sge three[3] = {sge, sge, sge};
	struct ibv_recv_wr big = {.wr_id = 11, .sg_list = three, .num_sge = 3};
	assert_int_equal(ibv_post_recv(qp, &big, &rbad), EINVAL);
	assert_ptr_equal(rbad, &big);

	/* -> ERR flushes the posted receives, in order */
	struct ibv_qp_attr e = {.qp_state = IBV_QPS_ERR};
	assert_int_equal(ibv_modify_qp(qp, &e, IBV_QP_STATE), 0);
	struct ibv_wc wc[4];
	assert_int_equal(t_poll(N.cq, wc, 2, T_TIMEOUT_MS), 2);
	assert_int_equal(wc[0].status, IBV_WC_WR_FLUSH_ERR);
	assert_int_equal(wc[0].wr_id, 9);
	assert_int_equal(wc[1].status, IBV_WC_WR_FLUSH_ERR);
	assert_int_equal(wc[1].wr_id, 10);
	assert_int_equal(wc[0].qp_num, qp->qp_num);

	/* posting in ERR is accepted and flushed, signalled or not */
	sw.send_flags = 0;
	sw.wr_id = 12;
	assert_int_equal(ibv_post_send(qp, &sw, &sbad), 0);
	rw.wr_id = 13;
	assert_int_equal(ibv_post_recv(qp, &rw, &rbad), 0);
	/* (the send is flushed by the send engine, the receive at once: the
	 * two may come in either order) */
	assert_int_equal(t_poll(N.cq, wc, 2, T_TIMEOUT_MS), 2);
	assert_int_equal(wc[0].wr_id + wc[1].wr_id, 12 + 13);
	assert_true(wc[0].wr_id == 12 || wc[1].wr_id == 12);
	assert_int_equal(wc[0].status, IBV_WC_WR_FLUSH_ERR);
	assert_int_equal(wc[1].status, IBV_WC_WR_FLUSH_ERR);
	assert_int_equal(ibv_poll_cq(N.cq, 4, wc), 0);

	/* ERR -> RESET discards, no completions; then up again */
	struct ibv_qp_attr z = {.qp_state = IBV_QPS_RESET};
	assert_int_equal(ibv_modify_qp(qp, &z, IBV_QP_STATE), 0);
	assert_int_equal(t_connect(qp, qp->qp_num, &t_conn_default), 0);
	assert_int_equal(qstate(qp), IBV_QPS_RTS);
	assert_int_equal(ibv_poll_cq(N.cq, 4, wc), 0);
}

int main(void)
{
	t_fabric_setup("qp");
	if (!t_is_softrdma()) {
		fprintf(stderr, "SKIP: the loaded libibverbs is not softrdma\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create),
		cmocka_unit_test(test_transitions),
		cmocka_unit_test(test_post_by_state),
	};
	int r = cmocka_run_group_tests(tests, setup, teardown);
	return t_fabric_check_removed(r);
}
