/*
 * softrdma: device, context, port, GID, PD, MR, CQ, completion channel,
 * string helpers, unsupported verbs, and fault injection.
 */
#include "sr_test.h"

#include <endian.h>
#include <sys/mman.h>

static void test_device_list(void **state)
{
	(void)state;
	int n = -1;
	struct ibv_device **l = ibv_get_device_list(&n);
	assert_non_null(l);
	assert_int_equal(n, 1);
	assert_null(l[1]);
	assert_string_equal(ibv_get_device_name(l[0]), "softrdma0");
	assert_int_equal(l[0]->node_type, IBV_NODE_CA);
	assert_int_equal(l[0]->transport_type, IBV_TRANSPORT_IB);
	assert_true(be64toh(ibv_get_device_guid(l[0])) != 0);
	assert_int_equal(ibv_get_device_index(l[0]), 0);
	ibv_free_device_list(l);
}

static void test_open_query(void **state)
{
	(void)state;
	struct ibv_context *c = t_open();
	assert_non_null(c);
	struct ibv_device_attr da;
	assert_int_equal(ibv_query_device(c, &da), 0);
	assert_int_equal(da.phys_port_cnt, 1);
	assert_true(da.max_qp_wr >= 1024);
	assert_true(da.max_cqe >= 1024);
	assert_true(da.max_sge >= 1);
	struct ibv_device **l = ibv_get_device_list(NULL);
	assert_true(da.node_guid == ibv_get_device_guid(l[0]));
	ibv_free_device_list(l);

	struct ibv_device_attr_ex dx;
	assert_int_equal(ibv_query_device_ex(c, NULL, &dx), 0);
	assert_int_equal(dx.orig_attr.max_qp_wr, da.max_qp_wr);

	struct ibv_port_attr pa;
	memset(&pa, 0xab, sizeof pa);
	assert_int_equal(ibv_query_port(c, 1, &pa), 0);
	assert_int_equal(pa.state, IBV_PORT_ACTIVE);
	assert_int_equal(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
	assert_int_equal(pa.lid, 0);
	assert_true(pa.active_mtu >= IBV_MTU_1024);
	assert_true(pa.gid_tbl_len >= 1);
	assert_int_equal(pa.flags, 0); /* the whole struct is filled */
	assert_int_not_equal(ibv_query_port(c, 2, &pa), 0);
	assert_string_equal(ibv_port_state_str(pa.state), "PORT_ACTIVE");

	/* the GID table as mlx5 lays out a RoCE port: link-local v1, v2,
	 * IPv4-mapped v1, v2; the rest empty */
	assert_int_equal(pa.gid_tbl_len, 256);
	static const uint8_t v4mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
					     0xff, 0xff, 127, 0, 0, 1};
	static const uint8_t ll[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0,
				       0x02, 0, 0, 0xff, 0xfe, 0x5e, 0, 1};
	static const struct { const uint8_t *gid; enum ibv_gid_type type; } tbl[] = {
		{ll, IBV_GID_TYPE_ROCE_V1}, {ll, IBV_GID_TYPE_ROCE_V2},
		{v4mapped, IBV_GID_TYPE_ROCE_V1}, {v4mapped, IBV_GID_TYPE_ROCE_V2},
	};
	union ibv_gid g;
	struct ibv_gid_entry ge;
	for (uint32_t i = 0; i < 4; i++) {
		assert_int_equal(ibv_query_gid(c, 1, (int)i, &g), 0);
		assert_memory_equal(g.raw, tbl[i].gid, 16);
		assert_int_equal(ibv_query_gid_ex(c, 1, i, &ge, 0), 0);
		assert_int_equal(ge.gid_type, tbl[i].type);
		assert_int_equal(ge.gid_index, i);
		assert_memory_equal(ge.gid.raw, tbl[i].gid, 16);
	}
	/* an empty entry: a zero GID through ibv_query_gid, ENODATA through
	 * ibv_query_gid_ex (as rdma-core); past the table: an error */
	memset(&g, 0xab, sizeof g);
	assert_int_equal(ibv_query_gid(c, 1, 4, &g), 0);
	assert_memory_equal(g.raw, ((uint8_t[16]){0}), 16);
	assert_int_equal(ibv_query_gid_ex(c, 1, 4, &ge, 0), ENODATA);
	assert_int_equal(ibv_query_gid(c, 1, pa.gid_tbl_len, &g), -1);
	struct ibv_gid_entry all[8];
	assert_int_equal(ibv_query_gid_table(c, all, 8, 0), 4);
	assert_int_equal(all[3].gid_type, IBV_GID_TYPE_ROCE_V2);
	assert_int_equal(all[3].gid_index, 3);
	assert_int_equal(ibv_query_gid_table(c, all, 3, 0), -EINVAL);
	/* it looks like a ConnectX-5, so tools take their mlx5 paths */
	assert_int_equal(da.vendor_id, 0x02c9);
	assert_int_equal(da.vendor_part_id, 4119);

	__be16 pkey;
	assert_int_equal(ibv_query_pkey(c, 1, 0, &pkey), 0);
	assert_int_equal(be16toh(pkey), 0xffff);
	assert_int_equal(ibv_close_device(c), 0);
}

static void test_pd_mr(void **state)
{
	(void)state;
	struct ibv_context *c = t_open();
	struct ibv_pd *pd = ibv_alloc_pd(c);
	assert_non_null(pd);
	char *buf = malloc(8192);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	assert_non_null(mr);
	assert_ptr_equal(mr->addr, buf);
	assert_int_equal(mr->length, 8192);
	assert_int_equal(mr->lkey, mr->rkey);
	assert_int_not_equal(mr->lkey, 0);

	/* remote write without local write is refused, as by the spec */
	errno = 0;
	assert_null(ibv_reg_mr(pd, buf, 64, IBV_ACCESS_REMOTE_WRITE));
	assert_int_equal(errno, EINVAL);
	/* zero length and unmapped memory are refused */
	assert_null(ibv_reg_mr(pd, buf, 0, IBV_ACCESS_LOCAL_WRITE));
	void *hole = mmap(NULL, 8192, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(hole, 8192);
	errno = 0;
	assert_null(ibv_reg_mr(pd, hole, 8192, IBV_ACCESS_LOCAL_WRITE));
	assert_int_equal(errno, EFAULT);

	/* iova variants; keys differ between registrations */
	struct ibv_mr *m2 = ibv_reg_mr_iova(pd, buf, 4096, 0x1000, IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(m2);
	assert_int_not_equal(m2->rkey, mr->rkey);
	unsigned acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING;
	struct ibv_mr *m3 = ibv_reg_mr_iova2(pd, buf, 4096, (uintptr_t)buf, acc);
	assert_non_null(m3);

	/* a PD in use cannot go */
	assert_int_equal(ibv_dealloc_pd(pd), EBUSY);
	assert_int_equal(ibv_dereg_mr(m3), 0);
	assert_int_equal(ibv_dereg_mr(m2), 0);
	assert_int_equal(ibv_dereg_mr(mr), 0);
	assert_int_equal(ibv_dealloc_pd(pd), 0);
	free(buf);
	ibv_close_device(c);
}

static void test_cq_channel(void **state)
{
	(void)state;
	struct ibv_context *c = t_open();
	struct ibv_comp_channel *ch = ibv_create_comp_channel(c);
	assert_non_null(ch);
	assert_true(ch->fd >= 0);
	errno = 0;
	assert_null(ibv_create_cq(c, 0, NULL, ch, 0));
	assert_int_equal(errno, EINVAL);
	assert_null(ibv_create_cq(c, 16, NULL, ch, 1)); /* one vector */
	int tag;
	struct ibv_cq *cq = ibv_create_cq(c, 100, &tag, ch, 0);
	assert_non_null(cq);
	assert_true(cq->cqe >= 100);
	assert_ptr_equal(cq->cq_context, &tag);
	struct ibv_wc wc;
	assert_int_equal(ibv_poll_cq(cq, 1, &wc), 0);
	assert_int_equal(ibv_req_notify_cq(cq, 0), 0);
	/* nothing completed: the channel is not readable */
	struct pollfd p = {ch->fd, POLLIN, 0};
	assert_int_equal(poll(&p, 1, 10), 0);
	/* the channel is busy while a CQ uses it */
	assert_int_equal(ibv_destroy_comp_channel(ch), -1);
	assert_int_equal(errno, EBUSY);
	assert_int_equal(ibv_destroy_cq(cq), 0);
	assert_int_equal(ibv_destroy_comp_channel(ch), 0);
	ibv_close_device(c);
}

static void test_strings(void **state)
{
	(void)state;
	assert_string_equal(ibv_wc_status_str(IBV_WC_SUCCESS), "success");
	assert_string_not_equal(ibv_wc_status_str(IBV_WC_RNR_RETRY_EXC_ERR), "unknown");
	assert_string_equal(ibv_wc_status_str((enum ibv_wc_status)999), "unknown");
	assert_string_not_equal(ibv_node_type_str(IBV_NODE_CA), "unknown");
	assert_string_not_equal(ibv_event_type_str(IBV_EVENT_CQ_ERR), "unknown");
	assert_string_equal(ibv_port_state_str(IBV_PORT_DOWN), "PORT_DOWN");
	assert_int_equal(ibv_rate_to_mult(IBV_RATE_10_GBPS), 4);
	assert_int_equal(mult_to_ibv_rate(4), IBV_RATE_10_GBPS);
	assert_int_equal(ibv_rate_to_mbps(IBV_RATE_25_GBPS), 25781);
	assert_int_equal(mbps_to_ibv_rate(25781), IBV_RATE_25_GBPS);
	assert_int_equal(ibv_fork_init(), 0);
	assert_int_equal(ibv_is_fork_initialized(), IBV_FORK_UNNEEDED);
}

/* Verbs softrdma does not implement fail cleanly, as on a device without
 * the capability, through the verbs_context and the exported symbols. */
static void test_unsupported(void **state)
{
	(void)state;
	struct ibv_context *c = t_open();
	struct ibv_pd *pd = ibv_alloc_pd(c);
	struct ibv_cq_init_attr_ex cx = {.cqe = 16};
	errno = 0;
	assert_null(ibv_create_cq_ex(c, &cx));
	assert_int_equal(errno, EOPNOTSUPP);
	struct ibv_srq_init_attr si = {.attr = {.max_wr = 16, .max_sge = 1}};
	assert_null(ibv_create_srq(pd, &si));
	struct ibv_xrcd_init_attr xa = {0};
	assert_null(ibv_open_xrcd(c, &xa));
	struct ibv_td_init_attr ta = {0};
	assert_null(ibv_alloc_td(c, &ta));
	struct ibv_cq *cq = ibv_create_cq(c, 4, NULL, NULL, 0);
	struct ibv_qp_init_attr uc = {.send_cq = cq, .recv_cq = cq,
				      .cap = {1, 1, 1, 1, 0}, .qp_type = IBV_QPT_UC};
	errno = 0;
	assert_null(ibv_create_qp(pd, &uc));
	assert_int_equal(errno, EOPNOTSUPP);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(c);
}

/* ---- fault injection: the variables are read at load, so each case runs
 * in a fresh process image (this binary re-executed with a mode argument). */

static int fault_child(const char *mode)
{
	if (!strcmp(mode, "devlist")) {
		/* SOFTRDMA_FAIL_VERB=ibv_get_device_list:2 */
		errno = 0;
		if (ibv_get_device_list(NULL) || errno != ENOSYS)
			return 1;
		if (ibv_get_device_list(NULL))
			return 2;
		struct ibv_device **l = ibv_get_device_list(NULL);
		if (!l)
			return 3; /* third call succeeds */
		ibv_free_device_list(l);
		return 0;
	}
	if (!strcmp(mode, "pd")) {
		/* SOFTRDMA_FAIL_VERB=ibv_alloc_pd:1:EAGAIN */
		struct ibv_context *c = t_open();
		if (!c)
			return 4;
		errno = 0;
		if (ibv_alloc_pd(c) || errno != EAGAIN)
			return 5;
		struct ibv_pd *pd = ibv_alloc_pd(c);
		if (!pd)
			return 6;
		ibv_dealloc_pd(pd);
		ibv_close_device(c);
		return 0;
	}
	if (!strcmp(mode, "post")) {
		/* SOFTRDMA_FAIL_VERB=ibv_post_recv:1 and a delay */
		struct t_node n;
		struct t_qp_opts o = {0};
		if (t_node_init(&n, &o) || t_to_init(n.qp, 0))
			return 7;
		static char buf[64];
		struct ibv_mr *mr = ibv_reg_mr(n.pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
		struct ibv_sge sge = {(uintptr_t)buf, 64, mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
		if (ibv_post_recv(n.qp, &wr, &bad) != ENOMEM || bad != &wr)
			return 8;
		if (ibv_post_recv(n.qp, &wr, &bad) != 0)
			return 9;
		ibv_dereg_mr(mr);
		t_node_fini(&n);
		return 0;
	}
	if (!strcmp(mode, "rate")) {
		/* SOFTRDMA_FAIL_VERB=ibv_alloc_pd, SOFTRDMA_FAIL_RATE=0.5: about
		 * half the calls fail, in a pattern fixed by SOFTRDMA_SEED.  The
		 * exit code is a hash of the pattern. */
		struct ibv_context *c = t_open();
		unsigned fails = 0, hash = 0;
		for (unsigned i = 0; i < 64; i++) {
			struct ibv_pd *pd = ibv_alloc_pd(c);
			if (pd)
				ibv_dealloc_pd(pd);
			else
				fails++, hash = hash * 31 + i;
		}
		ibv_close_device(c);
		if (fails < 8 || fails > 56)
			return 255;
		return (int)(hash % 250) + 1;
	}
	if (!strcmp(mode, "delay")) {
		/* SOFTRDMA_DELAY_NS=2000000: each send WR takes at least 2 ms */
		struct t_node n;
		struct t_qp_opts o = {0};
		if (t_node_init(&n, &o) || t_connect(n.qp, n.qp->qp_num, &t_conn_default))
			return 10;
		static char buf[64];
		struct ibv_mr *mr = ibv_reg_mr(n.pd, buf, sizeof buf,
					       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		uint64_t t0 = t_now_ms();
		for (int i = 0; i < 5; i++)
			if (t_post_write(n.qp, IBV_WR_RDMA_WRITE, buf, 8, mr->lkey,
					 (uintptr_t)buf + 32, mr->rkey, 0,
					 IBV_SEND_SIGNALED, (uint64_t)i))
				return 11;
		struct ibv_wc wc[5];
		if (t_poll(n.cq, wc, 5, T_TIMEOUT_MS) != 5)
			return 12;
		if (t_now_ms() - t0 < 10)
			return 13;
		ibv_dereg_mr(mr);
		t_node_fini(&n);
		return 0;
	}
	return 100;
}

static int run_fault(const char *mode, const char *var, const char *val)
{
	pid_t p = fork();
	if (p == 0) {
		setenv(var, val, 1);
		execl("/proc/self/exe", "test_softrdma_device", "--fault", mode,
		      (char *)NULL);
		_exit(127);
	}
	struct t_child c = {p, dup(0)};
	return t_wait(&c, T_TIMEOUT_MS);
}

static void test_fault_injection(void **state)
{
	(void)state;
	assert_int_equal(run_fault("devlist", "SOFTRDMA_FAIL_VERB",
				   "ibv_get_device_list:2"), 0);
	assert_int_equal(run_fault("pd", "SOFTRDMA_FAIL_VERB",
				   "ibv_alloc_pd:1:EAGAIN"), 0);
	assert_int_equal(run_fault("post", "SOFTRDMA_FAIL_VERB",
				   "ibv_post_recv:1"), 0);
	assert_int_equal(run_fault("delay", "SOFTRDMA_DELAY_NS", "2000000"), 0);
	/* the same seed gives the same faults */
	setenv("SOFTRDMA_FAIL_RATE", "0.5", 1);
	setenv("SOFTRDMA_SEED", "42", 1);
	int a = run_fault("rate", "SOFTRDMA_FAIL_VERB", "ibv_alloc_pd");
	int b = run_fault("rate", "SOFTRDMA_FAIL_VERB", "ibv_alloc_pd");
	setenv("SOFTRDMA_SEED", "4242", 1);
	int c = run_fault("rate", "SOFTRDMA_FAIL_VERB", "ibv_alloc_pd");
	unsetenv("SOFTRDMA_FAIL_RATE");
	unsetenv("SOFTRDMA_SEED");
	assert_true(a >= 1 && a <= 250);
	assert_int_equal(a, b);
	assert_true(c >= 1 && c <= 250);
}

/* The last test: everything above closed its contexts, so the fabric file
 * is gone from /dev/shm. */
static void test_fabric_removed(void **state)
{
	(void)state;
	struct ibv_context *c = t_open();
	assert_true(t_fabric_exists());
	ibv_close_device(c);
	assert_false(t_fabric_exists());
}

int main(int argc, char **argv)
{
	t_fabric_setup("device");
	if (argc == 3 && !strcmp(argv[1], "--fault"))
		return fault_child(argv[2]);
	if (!t_is_softrdma()) {
		fprintf(stderr, "SKIP: the loaded libibverbs is not softrdma\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_device_list),
		cmocka_unit_test(test_open_query),
		cmocka_unit_test(test_pd_mr),
		cmocka_unit_test(test_cq_channel),
		cmocka_unit_test(test_strings),
		cmocka_unit_test(test_unsupported),
		cmocka_unit_test(test_fault_injection),
		cmocka_unit_test(test_fabric_removed),
	};
	return t_fabric_check_removed(cmocka_run_group_tests(tests, NULL, NULL));
}
