/*
 * softrdma: what the kernel and the provider limit.
 *
 *   - RLIMIT_MEMLOCK: MRs (the pages they span) and the provider's CQ and
 *     QP rings (sized as mlx5 sizes them) are charged to the process; past
 *     the limit ibv_reg_mr / ibv_create_cq / ibv_create_qp fail with ENOMEM
 *     unless the process has CAP_IPC_LOCK (or SOFTRDMA_NO_IPC_LOCK=1
 *     pretends it has not); freeing gives the pages back;
 *   - ibv_create_qp writes back what it grants, sized by the send ops;
 *     SOFTRDMA_GRANT_INLINE=n grants less inline than asked, and more
 *     than granted is refused at post;
 *   - a controlled Q_Key (high bit set) needs CAP_NET_RAW: EPERM without.
 */
#include "sr_test.h"

#include <sys/resource.h>

/* ---- children: a process that is not root ---- */

static int set_memlock(rlim_t bytes)
{
	struct rlimit rl = {bytes, bytes};
	return setrlimit(RLIMIT_MEMLOCK, &rl);
}

/* 64 KiB of RLIMIT_MEMLOCK (16 pages), no CAP_IPC_LOCK. */
static int child_memlock(void)
{
	if (t_drop_cap(CAP_IPC_LOCK) || set_memlock(64 << 10))
		return 1;
	struct ibv_context *c = t_open();
	struct ibv_pd *pd = ibv_alloc_pd(c);
	if (!c || !pd)
		return 2;
	char *mem = aligned_alloc(4096, 1 << 20);
	/* 8 pages, then 8 more: the limit exactly */
	struct ibv_mr *a = ibv_reg_mr(pd, mem, 8 * 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *b = ibv_reg_mr(pd, mem, 8 * 4096, IBV_ACCESS_LOCAL_WRITE);
	if (!a || !b)
		return 3; /* the same pages twice: charged twice, as the kernel */
	errno = 0;
	if (ibv_reg_mr(pd, mem, 1, IBV_ACCESS_LOCAL_WRITE) || errno != ENOMEM)
		return 4;
	/* a page that straddles: two pages */
	if (ibv_dereg_mr(b))
		return 5;
	struct ibv_mr *s = ibv_reg_mr(pd, mem + 4095, 2, IBV_ACCESS_LOCAL_WRITE);
	if (!s)
		return 6;
	/* 8 + 2 charged: a CQ of 255 entries is a 256 x 64 byte ring, four
	 * pages: fits; one of 511 (eight pages) does not */
	struct ibv_cq *cq = ibv_create_cq(c, 255, NULL, NULL, 0);
	if (!cq || cq->cqe != 255)
		return 7;
	errno = 0;
	if (ibv_create_cq(c, 511, NULL, NULL, 0) || errno != ENOMEM)
		return 8;
	/* 14 charged.  A QP of 16 WRs with 2 sges: 256-byte WQEs x 16 = one
	 * page of send queue + a page of receive queue: fits; 64 does not */
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq,
				      .cap = {16, 16, 2, 2, 0}, .qp_type = IBV_QPT_RC};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp)
		return 9;
	struct ibv_qp_init_attr big = {.send_cq = cq, .recv_cq = cq,
				       .cap = {64, 16, 2, 2, 0}, .qp_type = IBV_QPT_RC};
	errno = 0;
	if (ibv_create_qp(pd, &big) || errno != ENOMEM)
		return 10;
	/* freeing gives back: the MR's 8 pages make room for the bigger QP */
	if (ibv_dereg_mr(a))
		return 11;
	struct ibv_qp *qp2 = ibv_create_qp(pd, &big);
	if (!qp2)
		return 12;
	ibv_destroy_qp(qp2);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(s);
	ibv_dealloc_pd(pd);
	ibv_close_device(c);
	free(mem);
	return 0;
}

/* With CAP_IPC_LOCK (root here) the same limit does not apply. */
static int child_memlock_cap(void)
{
	if (set_memlock(64 << 10))
		return 1;
	struct ibv_context *c = t_open();
	struct ibv_pd *pd = ibv_alloc_pd(c);
	char *mem = aligned_alloc(4096, 1 << 20);
	struct ibv_mr *a = ibv_reg_mr(pd, mem, 1 << 20, IBV_ACCESS_LOCAL_WRITE);
	if (!a)
		return 2;
	ibv_dereg_mr(a);
	ibv_dealloc_pd(pd);
	ibv_close_device(c);
	free(mem);
	return 0;
}

/* SOFTRDMA_NO_IPC_LOCK=1: charged as if the capability were missing. */
static int child_memlock_nocap_env(void)
{
	if (set_memlock(64 << 10))
		return 1;
	struct ibv_context *c = t_open();
	struct ibv_pd *pd = ibv_alloc_pd(c);
	char *mem = aligned_alloc(4096, 1 << 20);
	errno = 0;
	if (ibv_reg_mr(pd, mem, 1 << 20, IBV_ACCESS_LOCAL_WRITE) || errno != ENOMEM)
		return 2;
	ibv_dealloc_pd(pd);
	ibv_close_device(c);
	free(mem);
	return 0;
}

/* SOFTRDMA_GRANT_INLINE=64: asked 200, granted 64, and told so. */
static int child_grant_inline(void)
{
	struct t_node n;
	struct t_qp_opts o = {.max_inline = 200};
	if (t_node_init(&n, &o))
		return 1;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	if (ibv_query_qp(n.qp, &qa, IBV_QP_CAP, &qi) || qi.cap.max_inline_data != 64)
		return 2;
	if (t_connect(n.qp, n.qp->qp_num, &t_conn_default))
		return 3;
	char buf[200] = {0};
	struct ibv_sge sge = {(uintptr_t)buf, 65, 0};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_INLINE}, *bad;
	if (ibv_post_send(n.qp, &wr, &bad) != EINVAL || bad != &wr)
		return 4;
	sge.length = 64;
	if (t_post_recv(n.qp, NULL, 0, 0, 1) == 0 &&
	    ibv_post_send(n.qp, &wr, &bad) != 0)
		return 5;
	t_node_fini(&n);
	return 0;
}

static int ud_qkey(uint32_t qkey)
{
	struct ibv_context *c = t_open();
	struct ibv_pd *pd = ibv_alloc_pd(c);
	struct ibv_cq *cq = ibv_create_cq(c, 8, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq,
				      .cap = {4, 4, 1, 1, 0}, .qp_type = IBV_QPT_UD};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp)
		return -1;
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = qkey};
	int r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				      IBV_QP_QKEY);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(c);
	return r;
}

/* Without CAP_NET_RAW: a controlled Q_Key is refused, others are not. */
static int child_qkey(void)
{
	if (t_drop_cap(CAP_NET_RAW))
		return 1;
	if (ud_qkey(0x80000001u) != EPERM)
		return 2;
	if (ud_qkey(0x11111111u) != 0)
		return 3;
	return 0;
}

/* ---- tests ---- */

static int has_cap(int cap)
{
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2];
	return syscall(SYS_capget, &h, d) == 0 &&
	       ((d[cap / 32].effective >> (cap % 32)) & 1);
}

static void test_memlock(void **state)
{
	(void)state;
	assert_int_equal(t_reexec("memlock", NULL, 30000), 0);
	if (has_cap(CAP_IPC_LOCK))
		assert_int_equal(t_reexec("memlock_cap", NULL, 30000), 0);
	static const char *const env[] = {"SOFTRDMA_NO_IPC_LOCK=1", NULL};
	assert_int_equal(t_reexec("memlock_nocap_env", env, 30000), 0);
}

static void test_caps_written_back(void **state)
{
	(void)state;
	struct ibv_context *c = t_open();
	struct ibv_pd *pd = ibv_alloc_pd(c);
	struct ibv_cq *cq = ibv_create_cq(c, 64, NULL, NULL, 0);
	/* plain RC: every op, so room for a memory-window bind in each WQE */
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq,
				      .cap = {100, 10, 1, 1, 220}, .qp_type = IBV_QPT_RC};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	assert_non_null(qp);
	assert_int_equal(ia.cap.max_inline_data, 252); /* 448-byte WQE */
	assert_int_equal(ia.cap.max_send_wr, 146);     /* 64 KiB / 448 */
	assert_int_equal(ia.cap.max_recv_wr, 16);
	assert_int_equal(ia.cap.max_recv_sge, 1);
	ibv_destroy_qp(qp);
	/* only the ops used: WRITE with immediate and WRITE fit 220 bytes
	 * inline in one 256-byte WQE */
	struct ibv_qp_init_attr_ex x = {
		.send_cq = cq, .recv_cq = cq, .cap = {100, 10, 1, 1, 220},
		.qp_type = IBV_QPT_RC, .pd = pd,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE |
				  IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
	};
	qp = ibv_create_qp_ex(c, &x);
	assert_non_null(qp);
	assert_int_equal(x.cap.max_inline_data, 220);
	assert_int_equal(x.cap.max_send_wr, 128);      /* 32 KiB / 256 */
	ibv_destroy_qp(qp);
	/* UD: 188 bytes inline fit one 256-byte WQE */
	struct ibv_qp_init_attr ud = {.send_cq = cq, .recv_cq = cq,
				      .cap = {64, 64, 1, 1, 188}, .qp_type = IBV_QPT_UD};
	qp = ibv_create_qp(pd, &ud);
	assert_non_null(qp);
	assert_int_equal(ud.cap.max_inline_data, 188);
	assert_int_equal(ud.cap.max_send_wr, 64);
	ibv_destroy_qp(qp);
	/* more than a 512-byte WQE can hold: refused */
	ia.cap.max_inline_data = 400;
	errno = 0;
	assert_null(ibv_create_qp(pd, &ia));
	assert_int_equal(errno, EINVAL);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(c);
	static const char *const env[] = {"SOFTRDMA_GRANT_INLINE=64", NULL};
	assert_int_equal(t_reexec("grant_inline", env, 30000), 0);
}

static void test_privileged_qkey(void **state)
{
	(void)state;
	/* with CAP_NET_RAW (root): allowed */
	assert_int_equal(ud_qkey(0x80000001u), has_cap(CAP_NET_RAW) ? 0 : EPERM);
	assert_int_equal(t_reexec("qkey", NULL, 30000), 0);
}

int main(int argc, char **argv)
{
	t_fabric_setup("limits");
	if (argc == 3 && !strcmp(argv[1], "--child")) {
		int r = !strcmp(argv[2], "memlock") ? child_memlock() :
			!strcmp(argv[2], "memlock_cap") ? child_memlock_cap() :
			!strcmp(argv[2], "memlock_nocap_env") ? child_memlock_nocap_env() :
			!strcmp(argv[2], "grant_inline") ? child_grant_inline() :
			!strcmp(argv[2], "qkey") ? child_qkey() : 100;
		if (r)
			fprintf(stderr, "child %s: step %d failed\n", argv[2], r);
		return r;
	}
	if (!t_is_softrdma()) {
		fprintf(stderr, "SKIP: the loaded libibverbs is not softrdma\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_memlock),
		cmocka_unit_test(test_caps_written_back),
		cmocka_unit_test(test_privileged_qkey),
	};
	int r = cmocka_run_group_tests(tests, NULL, NULL);
	return t_fabric_check_removed(r);
}
