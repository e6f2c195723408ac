/*
 * softrdma: work requests run after they are posted, on the send engine,
 * as on a NIC.  The source buffer is read when the request runs, so a
 * buffer changed after posting sends what it holds then (inline data is
 * copied at post time); a send queue has a backlog, and a full one refuses
 * more; RC packet loss costs the ACK timeout per retry and ends in
 * IBV_WC_RETRY_EXC_ERR after retry_cnt; error completions carry only the
 * fields ibv_poll_cq(3) promises.
 *
 * Cases that need SOFTRDMA_* variables run in a fresh image of this binary
 * (t_reexec): the variables are read when softrdma is loaded.
 */
#include "sr_test.h"

#define BUFSZ 8192

struct pair {
	struct t_node a, b;
	char *abuf, *bbuf;
	struct ibv_mr *amr, *bmr;
};

static const unsigned RW = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ;

static int mkpair(struct pair *p, const struct t_qp_opts *o, const struct t_conn *c)
{
	memset(p, 0, sizeof *p);
	if (t_node_init(&p->a, o) || t_node_init(&p->b, o))
		return -1;
	p->abuf = calloc(1, BUFSZ);
	p->bbuf = calloc(1, BUFSZ);
	p->amr = ibv_reg_mr(p->a.pd, p->abuf, BUFSZ, RW);
	p->bmr = ibv_reg_mr(p->b.pd, p->bbuf, BUFSZ, RW);
	if (!p->amr || !p->bmr)
		return -2;
	if (t_connect(p->a.qp, p->b.qp->qp_num, c) ||
	    t_connect(p->b.qp, p->a.qp->qp_num, c))
		return -3;
	return 0;
}

static void freepair(struct pair *p)
{
	ibv_dereg_mr(p->amr);
	ibv_dereg_mr(p->bmr);
	t_node_fini(&p->a);
	t_node_fini(&p->b);
	free(p->abuf);
	free(p->bbuf);
}

static int write_to_b(struct pair *p, uint32_t off, uint32_t len, unsigned flags,
		      uint64_t wr_id)
{
	return t_post_write(p->a.qp, IBV_WR_RDMA_WRITE, p->abuf + off, len,
			    p->amr->lkey, (uintptr_t)p->bbuf + off, p->bmr->rkey, 0,
			    flags, wr_id);
}

/* ---- children (a fresh image with SOFTRDMA_* set) ---- */

/* SOFTRDMA_DELAY_NS=20000000: the WRITE runs 20 ms after it was posted and
 * sends what the buffer holds then; inline data was copied at post. */
static int child_late_read(void)
{
	struct pair p;
	struct t_qp_opts o = {.max_inline = 64};
	if (mkpair(&p, &o, &t_conn_default))
		return 1;
	memset(p.abuf, 'A', 256);
	if (write_to_b(&p, 0, 256, IBV_SEND_SIGNALED, 1))
		return 2;
	char inl[64];
	memset(inl, 'I', sizeof inl);
	if (t_post_write(p.a.qp, IBV_WR_RDMA_WRITE, inl, 64, 0,
			 (uintptr_t)p.bbuf + 1024, p.bmr->rkey, 0,
			 IBV_SEND_INLINE | IBV_SEND_SIGNALED, 2))
		return 3;
	/* after posting, before it runs */
	memset(p.abuf, 'B', 256);
	memset(inl, 'J', sizeof inl);
	struct ibv_wc wc[2];
	if (ibv_poll_cq(p.a.cq, 2, wc) != 0)
		return 4; /* it has not run yet */
	if (t_poll(p.a.cq, wc, 2, T_TIMEOUT_MS) != 2 || wc[0].status || wc[1].status)
		return 5;
	for (int i = 0; i < 256; i++)
		if (p.bbuf[i] != 'B')
			return 6; /* read when it ran, not when posted */
	for (int i = 0; i < 64; i++)
		if (p.bbuf[1024 + i] != 'I')
			return 7; /* inline: copied at post */
	freepair(&p);
	return 0;
}

/* SOFTRDMA_DELAY_NS=5000000: a backlog builds up; the queue refuses what
 * does not fit (ENOMEM); everything posted completes, in order. */
static int child_backlog(void)
{
	struct pair p;
	struct t_qp_opts o = {.max_send_wr = 4, .sig_all = 1};
	if (mkpair(&p, &o, &t_conn_default))
		return 1;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	ibv_query_qp(p.a.qp, &qa, IBV_QP_CAP, &qi);
	uint32_t cap = qi.cap.max_send_wr;
	if (cap < 4 || cap > 64)
		return 2;
	for (uint32_t i = 0; i < cap; i++)
		if (write_to_b(&p, i * 8, 8, 0, i))
			return 3;
	struct ibv_wc wc[64];
	if (ibv_poll_cq(p.a.cq, 64, wc) != 0)
		return 8; /* posted, not run: a backlog */
	if (write_to_b(&p, 0, 8, 0, 99) != ENOMEM)
		return 4; /* full: none has run, none was polled */
	if (t_poll(p.a.cq, wc, (int)cap, 10 * T_TIMEOUT_MS) != (int)cap)
		return 5;
	for (uint32_t i = 0; i < cap; i++)
		if (wc[i].wr_id != i || wc[i].status != IBV_WC_SUCCESS)
			return 6;
	if (write_to_b(&p, 0, 8, 0, 100))
		return 7; /* room again */
	freepair(&p);
	return 0;
}

/* SOFTRDMA_RC_DROP=1: every packet lost.  The requester retries every
 * 4.096 us * 2^timeout, retry_cnt times, then IBV_WC_RETRY_EXC_ERR. */
static int child_loss_all(void)
{
	struct pair p;
	struct t_qp_opts o = {0};
	struct t_conn c = t_conn_default;
	c.timeout = 12;   /* 16.8 ms */
	c.retry_cnt = 3;
	if (mkpair(&p, &o, &c))
		return 1;
	memset(p.abuf, 'x', 64);
	uint64_t t0 = t_now_ms();
	if (write_to_b(&p, 0, 64, IBV_SEND_SIGNALED, 1))
		return 2;
	struct ibv_wc wc;
	if (t_poll1(p.a.cq, &wc, T_TIMEOUT_MS) != 1)
		return 3;
	uint64_t ms = t_now_ms() - t0;
	if (wc.status != IBV_WC_RETRY_EXC_ERR)
		return 4;
	/* the first try and three retries, each waiting the timeout */
	if (ms < 4 * 16)
		return 5;
	if (p.bbuf[0] != 0)
		return 6; /* nothing arrived */
	freepair(&p);
	return 0;
}

/* SOFTRDMA_RC_DROP=0.3 with retry_cnt 7: losses are retried; every write
 * arrives once, complete, in order; the losses cost timeouts. */
static int child_loss_some(void)
{
	struct pair p;
	struct t_qp_opts o = {.sig_all = 1};
	struct t_conn c = t_conn_default;
	c.timeout = 8;    /* 1 ms */
	c.retry_cnt = 7;
	if (mkpair(&p, &o, &c))
		return 1;
	uint64_t t0 = t_now_ms();
	for (int i = 0; i < 32; i++) {
		memset(p.abuf + i * 64, 'a' + i % 26, 64);
		if (write_to_b(&p, (uint32_t)i * 64, 64, 0, (uint64_t)i))
			return 2;
	}
	struct ibv_wc wc[32];
	if (t_poll(p.a.cq, wc, 32, 10 * T_TIMEOUT_MS) != 32)
		return 3;
	for (int i = 0; i < 32; i++)
		if (wc[i].status != IBV_WC_SUCCESS || wc[i].wr_id != (uint64_t)i)
			return 4;
	if (memcmp(p.abuf, p.bbuf, 32 * 64))
		return 5;
	/* 64 packets at p = 0.3: some were lost, each losing a 1 ms timeout */
	if (t_now_ms() - t0 < 3)
		return 6;
	freepair(&p);
	return 0;
}

/* SOFTRDMA_POISON_WC=0 turns the poisoning off: the same error completion
 * then carries zeros where the poison was. */
static int child_no_poison(void)
{
	struct pair p;
	struct t_qp_opts o = {0};
	if (mkpair(&p, &o, &t_conn_default))
		return 1;
	if (t_post_write(p.a.qp, IBV_WR_RDMA_WRITE, p.abuf, 8, p.amr->lkey ^ 0x300,
			 (uintptr_t)p.bbuf, p.bmr->rkey, 0, 0, 5))
		return 2;
	struct ibv_wc wc;
	memset(&wc, 0x5a, sizeof wc);
	if (t_poll1(p.a.cq, &wc, T_TIMEOUT_MS) != 1 || wc.status != IBV_WC_LOC_PROT_ERR)
		return 3;
	if (wc.byte_len == 0xa5a5a5a5u)
		return 4;
	freepair(&p);
	return 0;
}

/* ---- tests ---- */

static void test_buffer_read_when_run(void **state)
{
	(void)state;
	static const char *const env[] = {"SOFTRDMA_DELAY_NS=20000000", NULL};
	assert_int_equal(t_reexec("late_read", env, 30000), 0);
}

static void test_send_queue_backlog(void **state)
{
	(void)state;
	static const char *const env[] = {"SOFTRDMA_DELAY_NS=5000000", NULL};
	assert_int_equal(t_reexec("backlog", env, 30000), 0);
}

static void test_rc_loss_exhausts_retries(void **state)
{
	(void)state;
	static const char *const env[] = {"SOFTRDMA_RC_DROP=1", NULL};
	assert_int_equal(t_reexec("loss_all", env, 30000), 0);
}

static void test_rc_loss_is_retried(void **state)
{
	(void)state;
	static const char *const env[] = {"SOFTRDMA_RC_DROP=0.3",
					  "SOFTRDMA_SEED=3", NULL};
	assert_int_equal(t_reexec("loss_some", env, 30000), 0);
}

/* Only wr_id, status, qp_num and vendor_err are defined for a failed work
 * request (ibv_poll_cq(3)); softrdma fills the rest with a poison pattern
 * so that code reading them fails here, not on a NIC. */
static void test_error_completion_fields(void **state)
{
	(void)state;
	struct pair p;
	struct t_qp_opts o = {0};
	assert_int_equal(mkpair(&p, &o, &t_conn_default), 0);
	assert_int_equal(t_post_recv(p.b.qp, p.bbuf, 64, p.bmr->lkey, 31), 0);
	assert_int_equal(t_post_write(p.a.qp, IBV_WR_RDMA_WRITE, p.abuf, 8,
				      p.amr->lkey ^ 0x300, (uintptr_t)p.bbuf,
				      p.bmr->rkey, 0, 0, 17), 0);
	struct ibv_wc wc;
	memset(&wc, 0, sizeof wc);
	assert_int_equal(t_poll1(p.a.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.wr_id, 17);
	assert_int_equal(wc.status, IBV_WC_LOC_PROT_ERR);
	assert_int_equal(wc.qp_num, p.a.qp->qp_num);
	assert_int_not_equal(wc.vendor_err, 0);
	assert_int_equal(wc.byte_len, 0xa5a5a5a5u);
	assert_int_equal((uint32_t)wc.opcode, 0xa5a5a5a5u);
	assert_int_equal(wc.src_qp, 0xa5a5a5a5u);
	assert_int_equal(wc.wc_flags, 0xa5a5a5a5u);
	assert_int_equal(wc.imm_data, 0xa5a5a5a5u);
	/* flushed receives too */
	struct ibv_qp_attr e = {.qp_state = IBV_QPS_ERR};
	assert_int_equal(ibv_modify_qp(p.b.qp, &e, IBV_QP_STATE), 0);
	assert_int_equal(t_poll1(p.b.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.wr_id, 31);
	assert_int_equal(wc.status, IBV_WC_WR_FLUSH_ERR);
	assert_int_equal((uint32_t)wc.opcode, 0xa5a5a5a5u);
	assert_int_equal(wc.byte_len, 0xa5a5a5a5u);
	freepair(&p);
	static const char *const env[] = {"SOFTRDMA_POISON_WC=0", NULL};
	assert_int_equal(t_reexec("no_poison", env, 30000), 0);
}

int main(int argc, char **argv)
{
	t_fabric_setup("async");
	if (argc == 3 && !strcmp(argv[1], "--child")) {
		int r = !strcmp(argv[2], "late_read") ? child_late_read() :
			!strcmp(argv[2], "backlog") ? child_backlog() :
			!strcmp(argv[2], "loss_all") ? child_loss_all() :
			!strcmp(argv[2], "loss_some") ? child_loss_some() :
			!strcmp(argv[2], "no_poison") ? child_no_poison() : 100;
		if (r)
			fprintf(stderr, "child %s: step %d failed\n", argv[2], r);
		return r;
	}
	if (!t_is_softrdma()) {
		fprintf(stderr, "SKIP: the loaded libibverbs is not softrdma\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_buffer_read_when_run),
		cmocka_unit_test(test_send_queue_backlog),
		cmocka_unit_test(test_rc_loss_exhausts_retries),
		cmocka_unit_test(test_rc_loss_is_retried),
		cmocka_unit_test(test_error_completion_fields),
	};
	int r = cmocka_run_group_tests(tests, NULL, NULL);
	return t_fabric_check_removed(r);
}
