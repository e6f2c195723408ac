/*
 * The verbs device module (verbs.h) on softrdma: the one reading of
 * rdma_device, rdma_port and gid_index, both link layers (InfiniBand is
 * faked by wrapping the context's query_port), refusals with their
 * messages, and the queue-pair helpers rc and ud share.
 *
 * This test defines ibv_open_device and _ibv_query_gid_ex, which the
 * static library binds to, to change what softrdma reports when a test
 * asks; otherwise both pass straight through.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/error.h"
#include "bus/transport/verbs.h"
#include <tickbus/tickbus.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------ what we fake */

static int fake_ib;        /* ports report InfiniBand, LID 7 */
static int fake_roce_v1;   /* GIDs report RoCE v1 */

static int (*real_query_port)(struct ibv_context *, uint8_t,
			      struct ibv_port_attr *, size_t);

static int faking_query_port(struct ibv_context *ctx, uint8_t port,
			     struct ibv_port_attr *pa, size_t len)
{
	int rc = real_query_port(ctx, port, pa, len);

	if (rc == 0 && fake_ib) {
		pa->link_layer = IBV_LINK_LAYER_INFINIBAND;
		pa->lid = 7;
	}
	return rc;
}

struct ibv_context *ibv_open_device(struct ibv_device *dev)
{
	static struct ibv_context *(*real)(struct ibv_device *);
	struct ibv_context *ctx;
	struct verbs_context *v;

	if (!real)
		real = (struct ibv_context * (*)(struct ibv_device *))
			dlvsym(RTLD_NEXT, "ibv_open_device", "IBVERBS_1.1");
	ctx = real(dev);
	v = ctx ? verbs_get_ctx_op(ctx, query_port) : NULL;
	if (v) {
		real_query_port = v->query_port;
		v->query_port = faking_query_port;
	}
	return ctx;
}

int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
		      struct ibv_gid_entry *e, uint32_t flags, size_t size)
{
	static int (*real)(struct ibv_context *, uint32_t, uint32_t,
			   struct ibv_gid_entry *, uint32_t, size_t);
	int rc;

	if (!real)
		real = (int (*)(struct ibv_context *, uint32_t, uint32_t,
				struct ibv_gid_entry *, uint32_t, size_t))
			dlvsym(RTLD_NEXT, "_ibv_query_gid_ex", "IBVERBS_1.11");
	rc = real(ctx, port, index, e, flags, size);
	if (rc == 0 && fake_roce_v1)
		e->gid_type = IBV_GID_TYPE_ROCE_V1;
	return rc;
}

static void cfg_for(tb_stream_cfg_t *c)
{
	tb_stream_cfg_init(c);
	snprintf(c->name, sizeof(c->name), "verbs");
	c->id = 5;
	c->transport = TB_TRANSPORT_RC;
}

static int msg_has(const char *s)
{
	return strstr(tb_errmsg(), s) != NULL;
}

/* ---------------------------------------------------------- the device */

static void automatic_is_the_first_active_roce_port_and_v2_ipv4_gid(void **state)
{
	static const uint8_t lo[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff,
				       127, 0, 0, 1};
	tb_stream_cfg_t c;
	tb_verbs_dev_t d;

	(void)state;
	cfg_for(&c);
	assert_int_equal(c.gid_index, -1);
	assert_int_equal(tb_verbs_open(&d, &c, NULL), 0);
	assert_string_equal(d.name, "softrdma0");
	assert_int_equal(d.port, 1);
	assert_int_equal(d.link_layer, IBV_LINK_LAYER_ETHERNET);
	assert_int_equal(d.global, 1);
	assert_int_equal(d.lid, 0);
	assert_int_equal(d.gid_index, 0);
	assert_memory_equal(d.gid.raw, lo, 16);
	assert_int_equal(d.ifindex, 1);
	assert_int_equal(tb_verbs_mtu_bytes(d.mtu), 4096);
	assert_non_null(d.pd);
	tb_verbs_close(&d);
	assert_null(d.ctx);
	assert_null(d.pd);
	tb_verbs_close(&d);    /* a zeroed device: nothing to do */
	/* The same with every key given, and with a reason to refuse IB
	 * that a RoCE port never needs. */
	snprintf(c.rdma_device, sizeof(c.rdma_device), "softrdma0");
	c.rdma_port = 1;
	c.gid_index = 0;
	assert_int_equal(tb_verbs_open(&d, &c, "no reason"), 0);
	assert_int_equal(d.gid_index, 0);
	tb_verbs_close(&d);
}

static void refusals_say_what_is_missing(void **state)
{
	tb_stream_cfg_t c;
	tb_verbs_dev_t d;

	(void)state;
	cfg_for(&c);
	snprintf(c.rdma_device, sizeof(c.rdma_device), "mlx5_9");
	assert_int_equal(tb_verbs_open(&d, &c, NULL), TB_ENOENT);
	assert_true(msg_has("no RDMA device named 'mlx5_9'"));
	assert_true(msg_has("softrdma0"));     /* what there is instead */
	assert_null(d.ctx);
	cfg_for(&c);
	c.rdma_port = 2;
	assert_int_equal(tb_verbs_open(&d, &c, NULL), TB_ENOENT);
	assert_true(msg_has("no active port 2"));
	cfg_for(&c);
	c.gid_index = 3;
	assert_int_equal(tb_verbs_open(&d, &c, NULL), TB_ECONFIG);
	assert_true(msg_has("gid_index 3"));
	assert_null(d.ctx);
	assert_null(d.pd);
}

/* Automatic on RoCE means a RoCE v2 GID in IPv4-mapped form: a port with
 * none is refused rather than given another GID silently. */
static void roce_without_a_v2_ipv4_gid(void **state)
{
	tb_stream_cfg_t c;
	tb_verbs_dev_t d;

	(void)state;
	cfg_for(&c);
	fake_roce_v1 = 1;
	assert_int_equal(tb_verbs_open(&d, &c, NULL), TB_ECONFIG);
	assert_true(msg_has("no RoCE v2 GID in IPv4-mapped form"));
	assert_true(msg_has("gid_index"));
	/* Naming the index is the way out. */
	c.gid_index = 0;
	assert_int_equal(tb_verbs_open(&d, &c, NULL), 0);
	assert_int_equal(d.gid_index, 0);
	tb_verbs_close(&d);
	fake_roce_v1 = 0;
}

static void infiniband_gid_zero_and_the_lid(void **state)
{
	tb_stream_cfg_t c;
	tb_verbs_dev_t d;

	(void)state;
	cfg_for(&c);
	fake_ib = 1;
	assert_int_equal(tb_verbs_open(&d, &c, NULL), 0);
	assert_int_equal(d.link_layer, IBV_LINK_LAYER_INFINIBAND);
	assert_int_equal(d.global, 0);
	assert_int_equal(d.lid, 7);
	assert_int_equal(d.gid_index, 0);
	assert_int_equal(d.ifindex, 0);
	tb_verbs_close(&d);
	/* A transport that cannot use it: passed over, and refused with its
	 * reason when nothing else is there. */
	assert_int_equal(tb_verbs_open(&d, &c, "the moon is full"), TB_ENOTSUP);
	assert_true(msg_has("InfiniBand"));
	assert_true(msg_has("the moon is full"));
	assert_null(d.ctx);
	c.rdma_port = 1;
	assert_int_equal(tb_verbs_open(&d, &c, "the moon is full"), TB_ENOTSUP);
	assert_true(msg_has("port 1"));
	fake_ib = 0;
}

static void psn_and_mtu(void **state)
{
	(void)state;
	for (int i = 0; i < 1000; i++)
		assert_true(tb_verbs_psn_random() <= TB_VERBS_PSN_MASK);
	assert_int_equal(tb_verbs_mtu_bytes(IBV_MTU_256), 256);
	assert_int_equal(tb_verbs_mtu_bytes(IBV_MTU_1024), 1024);
	assert_int_equal(tb_verbs_mtu_bytes(IBV_MTU_4096), 4096);
}

/* --------------------------------------------------------- queue pairs */

static enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	assert_int_equal(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia), 0);
	return a.qp_state;
}

static void rc_pair_to_rts(void **state)
{
	tb_stream_cfg_t c;
	tb_verbs_dev_t d;
	struct ibv_cq *cq;
	struct ibv_qp *a, *b;
	tb_verbs_qp_cfg_t qc = {.type = IBV_QPT_RC, .send_wr = 16, .recv_wr = 16,
				.send_sge = 1, .inline_want = 64, .inline_min = 64,
				.access = IBV_ACCESS_REMOTE_WRITE};
	tb_verbs_peer_t pa = {0}, pb = {0};
	uint32_t got = 0;

	(void)state;
	cfg_for(&c);
	assert_int_equal(tb_verbs_open(&d, &c, NULL), 0);
	cq = ibv_create_cq(d.ctx, 64, NULL, NULL, 0);
	assert_non_null(cq);
	qc.cq = cq;
	a = tb_verbs_qp_create(&d, &qc, &got);
	b = tb_verbs_qp_create(&d, &qc, NULL);
	assert_non_null(a);
	assert_non_null(b);
	assert_true(got >= 64);
	assert_int_equal(qp_state(a), IBV_QPS_INIT);
	pa = (tb_verbs_peer_t){.qpn = b->qp_num, .psn = 11};
	pb = (tb_verbs_peer_t){.qpn = a->qp_num, .psn = 22};
	memcpy(pa.gid, d.gid.raw, 16);
	memcpy(pb.gid, d.gid.raw, 16);
	assert_int_equal(tb_verbs_rc_connect(&d, a, &pa, 22, d.mtu), 0);
	assert_int_equal(tb_verbs_rc_connect(&d, b, &pb, 11, d.mtu), 0);
	assert_int_equal(qp_state(a), IBV_QPS_RTS);
	assert_int_equal(qp_state(b), IBV_QPS_RTS);
	/* Connecting again is the wrong state: refused, with the verb named. */
	assert_int_equal(tb_verbs_rc_connect(&d, a, &pa, 22, d.mtu), TB_EINVAL);
	assert_true(msg_has("ibv_modify_qp (RC) to RTR"));
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_cq(cq);
	tb_verbs_close(&d);
}

static void ud_to_rts_and_inline_fallback(void **state)
{
	tb_stream_cfg_t c;
	tb_verbs_dev_t d;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	tb_verbs_qp_cfg_t qc = {.type = IBV_QPT_UD, .send_wr = 8, .recv_wr = 8,
				.send_sge = 2, .inline_want = 1u << 20,
				.inline_min = 0, .qkey = 0x54000005u};
	uint32_t got = 99;

	(void)state;
	cfg_for(&c);
	assert_int_equal(tb_verbs_open(&d, &c, NULL), 0);
	cq = ibv_create_cq(d.ctx, 16, NULL, NULL, 0);
	assert_non_null(cq);
	qc.cq = cq;
	/* No device inlines a megabyte: asked again for none. */
	qp = tb_verbs_qp_create(&d, &qc, &got);
	assert_non_null(qp);
	assert_int_equal(got, 0);
	assert_int_equal(tb_verbs_ud_ready(&d, qp), 0);
	assert_int_equal(ibv_query_qp(qp, &a, IBV_QP_STATE | IBV_QP_QKEY, &ia), 0);
	assert_int_equal(a.qp_state, IBV_QPS_RTS);
	assert_int_equal(a.qkey, 0x54000005u);
	ibv_destroy_qp(qp);
	/* With no lower bound to fall back to: refused. */
	qc.inline_min = qc.inline_want;
	assert_null(tb_verbs_qp_create(&d, &qc, &got));
	assert_true(msg_has("ibv_create_qp (UD"));
	ibv_destroy_cq(cq);
	tb_verbs_close(&d);
}

/* ------------------------------------- faults, in a child (environment) */

static int run_child(const char *verb_fault, const char *mode)
{
	pid_t pid;
	int st;

	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		setenv("SOFTRDMA_FAIL_VERB", verb_fault, 1);
		execl("/proc/self/exe", "test_verbs", mode, (char *)NULL);
		_exit(127);
	}
	assert_true(pid > 0);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

static void no_device_names_softrdma(void **state)
{
	(void)state;
	assert_int_equal(run_child("ibv_get_device_list", "--no-device"), 0);
}

/* ibv_modify_qp returns its errno: the message carries that one. */
static void a_failing_verb_is_named_with_its_errno(void **state)
{
	(void)state;
	assert_int_equal(run_child("ibv_modify_qp:1:EPERM", "--modify-fails"), 0);
	assert_int_equal(run_child("ibv_alloc_pd:1:ENOMEM", "--pd-fails"), 0);
}

static int child(const char *mode)
{
	tb_stream_cfg_t c;
	tb_verbs_dev_t d;

	cfg_for(&c);
	if (!strcmp(mode, "--no-device")) {
		if (tb_verbs_open(&d, &c, NULL) != TB_ENOTSUP)
			return 1;
		return msg_has("softrdma") ? 0 : 2;
	}
	if (!strcmp(mode, "--pd-fails")) {
		if (tb_verbs_open(&d, &c, NULL) != TB_ENOMEM)
			return 1;
		return msg_has("ibv_alloc_pd") && d.ctx == NULL ? 0 : 2;
	}
	if (!strcmp(mode, "--modify-fails")) {
		tb_verbs_qp_cfg_t qc = {.type = IBV_QPT_RC, .send_wr = 4,
					.recv_wr = 4, .send_sge = 1};

		if (tb_verbs_open(&d, &c, NULL) != 0)
			return 1;
		qc.cq = ibv_create_cq(d.ctx, 8, NULL, NULL, 0);
		if (!qc.cq || tb_verbs_qp_create(&d, &qc, NULL) != NULL)
			return 2;
		if (!msg_has("to INIT") || !msg_has("Operation not permitted"))
			return 3;
		ibv_destroy_cq(qc.cq);
		tb_verbs_close(&d);
		return 0;
	}
	return 99;
}

/* The device these tests describe: softrdma's, found through the module
 * under test itself. */
static int on_softrdma(void)
{
	tb_stream_cfg_t c;
	tb_verbs_dev_t d;
	int ok;

	cfg_for(&c);
	if (tb_verbs_open(&d, &c, NULL) < 0)
		return 0;
	ok = !strcmp(d.name, "softrdma0");
	tb_verbs_close(&d);
	return ok;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(automatic_is_the_first_active_roce_port_and_v2_ipv4_gid),
		cmocka_unit_test(refusals_say_what_is_missing),
		cmocka_unit_test(roce_without_a_v2_ipv4_gid),
		cmocka_unit_test(infiniband_gid_zero_and_the_lid),
		cmocka_unit_test(psn_and_mtu),
		cmocka_unit_test(rc_pair_to_rts),
		cmocka_unit_test(ud_to_rts_and_inline_fallback),
		cmocka_unit_test(no_device_names_softrdma),
		cmocka_unit_test(a_failing_verb_is_named_with_its_errno),
	};

	if (!getenv("SOFTRDMA_FABRIC")) {
		char name[64];

		snprintf(name, sizeof(name), "t-verbs-%d", (int)getpid());
		setenv("SOFTRDMA_FABRIC", name, 1);
	}
	if (argc == 2)
		return child(argv[1]);
	if (!on_softrdma()) {
		fprintf(stderr, "SKIP: needs softrdma (LD_LIBRARY_PATH=build/softrdma)\n");
		return 77;
	}
	return cmocka_run_group_tests_name("verbs", tests, NULL, NULL);
}
