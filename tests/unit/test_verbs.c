/*
 * The verbs device module (verbs.h, verbs_events.h) on softrdma: the one
 * reading of rdma_device, rdma_port and gid_index, both link layers
 * (InfiniBand is faked by wrapping the context's query_port), refusals
 * with their messages (iWARP and EFA among them), the queue-pair helpers
 * rc and ud share with the exact attributes they pass (create_qp_ex with
 * only the send operations, the address vector on RoCE and on InfiniBand,
 * the path's keys), the NUMA check, and the asynchronous events.
 *
 * This test defines ibv_open_device, ibv_get_device_list,
 * ibv_query_device, ibv_query_gid, ibv_modify_qp, ibv_create_qp and
 * _ibv_query_gid_ex, which the static library binds to, to record what it
 * is asked and to change what softrdma reports when a test asks;
 * otherwise they pass straight through.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/error.h"
#include "bus/transport/verbs.h"
#include <tickbus/tickbus.h>

#include "bus/transport/verbs_events.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------ what we fake */

static int fake_ib;        /* ports report InfiniBand, LID 7 */
static int fake_roce_v1;   /* GIDs report RoCE v1 */
static int fake_node = -1; /* the device's node type, or -1: as it is */
static int fake_transport = -1;
static uint32_t fake_vendor; /* its PCI vendor; 0: as it is */
static const char *fake_ibdev_path; /* its sysfs directory */
static int fake_gid_bump;  /* ibv_query_gid's last byte, plus this */

/* What tickbus asked of the device, recorded. */
static struct ibv_qp_attr mods[16];
static int mod_masks[16], n_mods;
static struct ibv_qp_init_attr_ex created_ex[8];
static int n_created_ex;
static struct ibv_qp_init_attr created[8];
static int n_created;

static int (*real_query_port)(struct ibv_context *, uint8_t,
			      struct ibv_port_attr *, size_t);
static struct ibv_qp *(*real_create_qp_ex)(struct ibv_context *,
					   struct ibv_qp_init_attr_ex *);

static struct ibv_qp *recording_create_qp_ex(struct ibv_context *ctx,
					     struct ibv_qp_init_attr_ex *ia)
{
	if (n_created_ex < 8)
		created_ex[n_created_ex++] = *ia;
	return real_create_qp_ex(ctx, ia);
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	static int (*real)(struct ibv_qp *, struct ibv_qp_attr *, int);

	if (!real)
		real = (int (*)(struct ibv_qp *, struct ibv_qp_attr *, int))
			dlvsym(RTLD_NEXT, "ibv_modify_qp", "IBVERBS_1.1");
	if (n_mods < 16) {
		mods[n_mods] = *attr;
		mod_masks[n_mods++] = mask;
	}
	return real(qp, attr, mask);
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia)
{
	static struct ibv_qp *(*real)(struct ibv_pd *, struct ibv_qp_init_attr *);

	if (!real)
		real = (struct ibv_qp * (*)(struct ibv_pd *, struct ibv_qp_init_attr *))
			dlvsym(RTLD_NEXT, "ibv_create_qp", "IBVERBS_1.1");
	if (n_created < 8)
		created[n_created++] = *ia;
	return real(pd, ia);
}

struct ibv_device **ibv_get_device_list(int *n)
{
	static struct ibv_device **(*real)(int *);
	static char saved_path[IBV_SYSFS_PATH_MAX];
	static enum ibv_node_type saved_node;
	static enum ibv_transport_type saved_transport;
	static int saved;
	struct ibv_device **l;

	if (!real)
		real = (struct ibv_device * *(*)(int *))
			dlvsym(RTLD_NEXT, "ibv_get_device_list", "IBVERBS_1.1");
	l = real(n);
	if (!l || !l[0])
		return l;
	if (!saved) {
		memcpy(saved_path, l[0]->ibdev_path, sizeof(saved_path));
		saved_node = l[0]->node_type;
		saved_transport = l[0]->transport_type;
		saved = 1;
	}
	l[0]->node_type = fake_node >= 0 ? (enum ibv_node_type)fake_node : saved_node;
	l[0]->transport_type = fake_transport >= 0
				       ? (enum ibv_transport_type)fake_transport
				       : saved_transport;
	snprintf(l[0]->ibdev_path, sizeof(l[0]->ibdev_path), "%s",
		 fake_ibdev_path ? fake_ibdev_path : saved_path);
	return l;
}

int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *a)
{
	static int (*real)(struct ibv_context *, struct ibv_device_attr *);
	int rc;

	if (!real)
		real = (int (*)(struct ibv_context *, struct ibv_device_attr *))
			dlvsym(RTLD_NEXT, "ibv_query_device", "IBVERBS_1.1");
	rc = real(ctx, a);
	if (rc == 0 && fake_vendor)
		a->vendor_id = fake_vendor;
	return rc;
}

int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index,
		  union ibv_gid *gid)
{
	static int (*real)(struct ibv_context *, uint8_t, int, union ibv_gid *);
	int rc;

	if (!real)
		real = (int (*)(struct ibv_context *, uint8_t, int, union ibv_gid *))
			dlvsym(RTLD_NEXT, "ibv_query_gid", "IBVERBS_1.1");
	rc = real(ctx, port, index, gid);
	if (rc == 0)
		gid->raw[15] = (uint8_t)(gid->raw[15] + fake_gid_bump);
	return rc;
}

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
	v = ctx ? verbs_get_ctx_op(ctx, create_qp_ex) : NULL;
	if (v) {
		real_create_qp_ex = v->create_qp_ex;
		v->create_qp_ex = recording_create_qp_ex;
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
	/* mlx5's layout: 0 and 1 the link-local GID (RoCE v1, v2), 2 and 3
	 * the IPv4 one (v1, v2): automatic passes over the first three. */
	assert_int_equal(d.gid_index, 3);
	assert_memory_equal(d.gid.raw, lo, 16);
	assert_true(d.ifindex > 0);
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
	c.gid_index = 200;   /* the table has 256 entries; this one is empty */
	assert_int_equal(tb_verbs_open(&d, &c, NULL), TB_ECONFIG);
	assert_true(msg_has("gid_index 200"));
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
	tb_verbs_path_t path;
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
	path = tb_verbs_path_of(&c, d.mtu);
	n_mods = 0;
	assert_int_equal(tb_verbs_rc_connect(&d, a, &pa, 22, &path), 0);
	assert_int_equal(tb_verbs_rc_connect(&d, b, &pb, 11, &path), 0);
	assert_int_equal(qp_state(a), IBV_QPS_RTS);
	assert_int_equal(qp_state(b), IBV_QPS_RTS);
	/* RoCE: addressed by GID, with the GRH's traffic class from the
	 * stream (default 106: DSCP 26, the lossless queue of the usual RoCE
	 * QoS set-up), no LID; RTS with the stream's timeout and retries. */
	assert_int_equal(n_mods, 4);
	assert_int_equal(mods[0].qp_state, IBV_QPS_RTR);
	assert_int_equal(mods[0].path_mtu, d.mtu);
	assert_int_equal(mods[0].dest_qp_num, b->qp_num);
	assert_int_equal(mods[0].rq_psn, 11);
	assert_int_equal(mods[0].ah_attr.is_global, 1);
	assert_int_equal(mods[0].ah_attr.dlid, 0);
	assert_int_equal(mods[0].ah_attr.grh.traffic_class, 106);
	assert_int_equal(mods[0].ah_attr.grh.sgid_index, 3);
	assert_memory_equal(mods[0].ah_attr.grh.dgid.raw, d.gid.raw, 16);
	assert_true(mod_masks[0] & IBV_QP_AV);
	assert_int_equal(mods[1].qp_state, IBV_QPS_RTS);
	assert_int_equal(mods[1].timeout, 12);
	assert_int_equal(mods[1].retry_cnt, 7);
	assert_int_equal(mods[1].rnr_retry, 7);
	assert_int_equal(mods[1].sq_psn, 22);
	/* Connecting again is the wrong state: refused, with the verb named. */
	assert_int_equal(tb_verbs_rc_connect(&d, a, &pa, 22, &path), TB_EINVAL);
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
	/* No device inlines a megabyte: asked again for none, and told what
	 * its WQE holds anyway (mlx5 writes the capabilities back). */
	n_created = 0;
	qp = tb_verbs_qp_create(&d, &qc, &got);
	assert_non_null(qp);
	assert_int_equal(n_created, 2);
	assert_int_equal(created[0].cap.max_inline_data, 1u << 20);
	assert_int_equal(created[1].cap.max_inline_data, 0);
	assert_true(got < (1u << 20));
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


/* InfiniBand: the address vector carries the peer's LID and the stream's
 * service level, no GRH; a peer on the other link layer is refused. */
static void infiniband_address_vector(void **state)
{
	tb_stream_cfg_t c;
	tb_verbs_dev_t d;
	struct ibv_cq *cq;
	struct ibv_qp *a;
	tb_verbs_qp_cfg_t qc = {.type = IBV_QPT_RC, .send_wr = 8, .recv_wr = 8,
				.send_sge = 1, .access = IBV_ACCESS_REMOTE_WRITE};
	tb_verbs_peer_t peer = {.qpn = 0x123, .psn = 5, .lid = 0x2a};
	tb_verbs_path_t path;

	(void)state;
	cfg_for(&c);
	c.rdma_sl = 5;
	c.rdma_timeout = 9;
	c.rdma_retry = 3;
	fake_ib = 1;
	assert_int_equal(tb_verbs_open(&d, &c, NULL), 0);
	assert_int_equal(d.lid, 7);
	cq = ibv_create_cq(d.ctx, 16, NULL, NULL, 0);
	qc.cq = cq;
	a = tb_verbs_qp_create(&d, &qc, NULL);
	assert_non_null(a);
	path = tb_verbs_path_of(&c, IBV_MTU_2048);
	assert_int_equal(path.sl, 5);
	/* RoCE peer (no LID): refused before any verb is called. */
	peer.lid = 0;
	n_mods = 0;
	assert_int_equal(tb_verbs_rc_connect(&d, a, &peer, 1, &path), TB_EINVAL);
	assert_true(msg_has("same link layer"));
	assert_int_equal(n_mods, 0);
	/* softrdma's port is RoCE underneath, so it refuses an RTR without a
	 * GRH; what matters here is what tickbus asked for. */
	peer.lid = 0x2a;
	tb_verbs_rc_connect(&d, a, &peer, 1, &path);
	assert_true(n_mods >= 1);
	assert_int_equal(mods[0].qp_state, IBV_QPS_RTR);
	assert_int_equal(mods[0].ah_attr.is_global, 0);
	assert_int_equal(mods[0].ah_attr.dlid, 0x2a);
	assert_int_equal(mods[0].ah_attr.sl, 5);
	assert_int_equal(mods[0].ah_attr.port_num, 1);
	assert_int_equal(mods[0].path_mtu, IBV_MTU_2048);
	ibv_destroy_qp(a);
	ibv_destroy_cq(cq);
	tb_verbs_close(&d);
	fake_ib = 0;
	/* And a RoCE end refuses an InfiniBand peer. */
	cfg_for(&c);
	assert_int_equal(tb_verbs_open(&d, &c, NULL), 0);
	cq = ibv_create_cq(d.ctx, 16, NULL, NULL, 0);
	qc.cq = cq;
	a = tb_verbs_qp_create(&d, &qc, NULL);
	path = tb_verbs_path_of(&c, d.mtu);
	assert_int_equal(tb_verbs_rc_connect(&d, a, &peer, 1, &path), TB_EINVAL);
	assert_true(msg_has("LID 42"));
	ibv_destroy_qp(a);
	ibv_destroy_cq(cq);
	tb_verbs_close(&d);
}

/* With send_ops, ibv_create_qp_ex is asked with the PD and those
 * operations alone (so mlx5 sizes a WQE without memory-window room);
 * where the provider lacks it (EOPNOTSUPP), plain ibv_create_qp with the
 * same capabilities. */
static void qp_ex_with_only_the_send_ops(void **state)
{
	tb_stream_cfg_t c;
	tb_verbs_dev_t d;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_pd *pd2;
	tb_verbs_qp_cfg_t qc = {.type = IBV_QPT_RC, .send_wr = 1024, .recv_wr = 1,
				.send_sge = 1, .inline_want = TB_VERBS_INLINE_RC_WRITE,
				.inline_min = TB_VERBS_INLINE_RC_WRITE,
				.access = IBV_ACCESS_REMOTE_WRITE,
				.send_ops = IBV_QP_EX_WITH_RDMA_WRITE |
					    IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM};
	uint32_t got = 0;

	(void)state;
	cfg_for(&c);
	assert_int_equal(tb_verbs_open(&d, &c, NULL), 0);
	cq = ibv_create_cq(d.ctx, 1100, NULL, NULL, 0);
	pd2 = ibv_alloc_pd(d.ctx);
	qc.cq = cq;
	qc.pd = pd2;
	n_created_ex = n_created = 0;
	qp = tb_verbs_qp_create(&d, &qc, &got);
	assert_non_null(qp);
	assert_int_equal(n_created_ex, 1);
	assert_int_equal(created_ex[0].comp_mask,
			 IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS);
	assert_true(created_ex[0].send_ops_flags ==
		    (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM));
	assert_ptr_equal(created_ex[0].pd, pd2);
	assert_int_equal(created_ex[0].qp_type, IBV_QPT_RC);
	assert_int_equal(created_ex[0].cap.max_send_wr, 1024);
	assert_int_equal(created_ex[0].cap.max_recv_wr, 1);
	assert_int_equal(created_ex[0].cap.max_send_sge, 1);
	assert_int_equal(created_ex[0].cap.max_inline_data, 220);
	/* The inline threshold fits one 256-byte WQE: 16 + 16 + 4 + 220. */
	assert_int_equal(16 + 16 + 4 + TB_VERBS_INLINE_RC_WRITE, 256);
	assert_int_equal(16 + 48 + 4 + TB_VERBS_INLINE_UD_SEND, 256);
	assert_ptr_equal(qp->pd, pd2);
	if (n_created) {
		/* This softrdma has no extended create: the fallback. */
		assert_int_equal(n_created, 1);
		assert_int_equal(created[0].cap.max_send_wr, 1024);
		assert_int_equal(created[0].cap.max_inline_data, 220);
	}
	assert_true(got >= 220);
	ibv_destroy_qp(qp);
	/* Without send_ops: plain ibv_create_qp, as ud asks today. */
	qc.send_ops = 0;
	n_created_ex = n_created = 0;
	qp = tb_verbs_qp_create(&d, &qc, NULL);
	assert_non_null(qp);
	assert_int_equal(n_created_ex, 0);
	assert_int_equal(n_created, 1);
	ibv_destroy_qp(qp);
	ibv_dealloc_pd(pd2);
	ibv_destroy_cq(cq);
	tb_verbs_close(&d);
}

/* iWARP, usNIC and EFA: refused at open with what to use instead, named
 * or found automatically.  EFA says its port is InfiniBand; it is told
 * apart by node type and vendor. */
static void iwarp_and_efa_are_refused(void **state)
{
	tb_stream_cfg_t c;
	tb_verbs_dev_t d;

	(void)state;
	cfg_for(&c);
	fake_node = IBV_NODE_RNIC;
	fake_transport = IBV_TRANSPORT_IWARP;
	assert_int_equal(tb_verbs_open(&d, &c, NULL), TB_ENOTSUP);
	assert_true(msg_has("softrdma0 is an iWARP device"));
	assert_true(msg_has("rdma_cm"));
	assert_true(msg_has("use transport = udp"));
	assert_null(d.ctx);
	snprintf(c.rdma_device, sizeof(c.rdma_device), "softrdma0");
	assert_int_equal(tb_verbs_open(&d, &c, NULL), TB_ENOTSUP);
	assert_true(msg_has("iWARP"));
	/* EFA: node type unspecified, port "InfiniBand", vendor Amazon. */
	cfg_for(&c);
	fake_node = IBV_NODE_UNSPECIFIED;
	fake_transport = IBV_TRANSPORT_UNSPECIFIED;
	fake_ib = 1;
	fake_vendor = TB_VERBS_VENDOR_AMAZON;
	assert_int_equal(tb_verbs_open(&d, &c, NULL), TB_ENOTSUP);
	assert_true(msg_has("AWS EFA"));
	assert_true(msg_has("SRD"));
	assert_true(msg_has("use transport = udp"));
	/* The vendor alone is enough. */
	fake_node = fake_transport = -1;
	assert_int_equal(tb_verbs_open(&d, &c, NULL), TB_ENOTSUP);
	assert_true(msg_has("AWS EFA"));
	fake_ib = 0;
	fake_vendor = 0;
	fake_node = IBV_NODE_USNIC_UDP;
	fake_transport = IBV_TRANSPORT_USNIC_UDP;
	assert_int_equal(tb_verbs_open(&d, &c, NULL), TB_ENOTSUP);
	assert_true(msg_has("usNIC"));
	fake_node = fake_transport = -1;
	assert_int_equal(tb_verbs_open(&d, &c, NULL), 0);
	tb_verbs_close(&d);
}

/* The device's NUMA node comes from sysfs; a ring on another node is
 * warned about (1), the same node or an unknown one is not (0). */
static void numa_node_of_the_device(void **state)
{
	char dir[] = "/tmp/tb-verbs-numa.XXXXXX", path[128];
	tb_stream_cfg_t c;
	tb_verbs_dev_t d;
	FILE *f;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/device", dir);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/device/numa_node", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("1\n", f);
	fclose(f);
	cfg_for(&c);
	fake_ibdev_path = dir;
	assert_int_equal(tb_verbs_open(&d, &c, NULL), 0);
	assert_int_equal(d.numa_node, 1);
	assert_string_equal(d.ibdev_path, dir);
	assert_int_equal(tb_verbs_numa_check(&d, 0, "stream 'x'"), 1);
	assert_int_equal(tb_verbs_numa_check(&d, 1, "stream 'x'"), 0);
	assert_int_equal(tb_verbs_numa_check(&d, -1, "stream 'x'"), 0);
	tb_verbs_close(&d);
	/* "-1": no NUMA information. */
	f = fopen(path, "w");
	fputs("-1\n", f);
	fclose(f);
	assert_int_equal(tb_verbs_open(&d, &c, NULL), 0);
	assert_int_equal(d.numa_node, -1);
	assert_int_equal(tb_verbs_numa_check(&d, 0, "stream 'x'"), 0);
	tb_verbs_close(&d);
	fake_ibdev_path = NULL;
	unlink(path);
	snprintf(path, sizeof(path), "%s/device", dir);
	rmdir(path);
	rmdir(dir);
}

/* Waits up to 2 s for the next event. */
static int next_event(tb_verbs_dev_t *d, tb_verbs_event_t *ev)
{
	for (int i = 0; i < 2000; i++) {
		int rc = tb_verbs_events_next(d, ev);

		if (rc != 0)
			return rc;
		usleep(1000);
	}
	return 0;
}

/* A CQ overrun and a remote access error arrive as asynchronous events,
 * classified, with the CQ and the QP they are about; the fd does not
 * block when there is none. */
static void async_events_are_read_and_sorted(void **state)
{
	tb_stream_cfg_t c;
	tb_verbs_dev_t d;
	struct ibv_cq *small, *cq;
	struct ibv_qp *a, *b;
	struct ibv_mr *mr;
	static uint8_t buf[4096];
	tb_verbs_qp_cfg_t qc = {.type = IBV_QPT_RC, .send_wr = 16, .recv_wr = 16,
				.send_sge = 1, .inline_want = 64, .inline_min = 64,
				.access = IBV_ACCESS_REMOTE_WRITE};
	tb_verbs_peer_t pa = {0}, pb = {0};
	tb_verbs_path_t path;
	tb_verbs_event_t ev;
	struct ibv_send_wr *bad;

	(void)state;
	cfg_for(&c);
	assert_int_equal(tb_verbs_open(&d, &c, NULL), 0);
	assert_int_equal(tb_verbs_events_init(&d), 0);
	assert_true(tb_verbs_events_fd(&d) >= 0);
	assert_int_equal(tb_verbs_events_next(&d, &ev), 0);
	small = ibv_create_cq(d.ctx, 1, NULL, NULL, 0);
	cq = ibv_create_cq(d.ctx, 64, NULL, NULL, 0);
	mr = ibv_reg_mr(d.pd, buf, sizeof(buf),
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	assert_non_null(small);
	assert_non_null(mr);
	qc.cq = small;
	a = tb_verbs_qp_create(&d, &qc, NULL);
	qc.cq = cq;
	b = tb_verbs_qp_create(&d, &qc, NULL);
	assert_non_null(a);
	assert_non_null(b);
	pa = (tb_verbs_peer_t){.qpn = b->qp_num, .psn = 1};
	pb = (tb_verbs_peer_t){.qpn = a->qp_num, .psn = 2};
	memcpy(pa.gid, d.gid.raw, 16);
	memcpy(pb.gid, d.gid.raw, 16);
	path = tb_verbs_path_of(&c, d.mtu);
	assert_int_equal(tb_verbs_rc_connect(&d, a, &pa, 2, &path), 0);
	assert_int_equal(tb_verbs_rc_connect(&d, b, &pb, 1, &path), 0);
	/* Signalled writes into a one-entry CQ, never polled: overrun. */
	for (int i = 0; i < 4; i++) {
		struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 8,
				      .lkey = mr->lkey};
		struct ibv_send_wr w = {.wr_id = (uint64_t)i, .sg_list = &sge,
					.num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
					.send_flags = IBV_SEND_SIGNALED,
					.wr.rdma = {.remote_addr = (uintptr_t)buf + 64,
						    .rkey = mr->rkey}};

		assert_int_equal(ibv_post_send(a, &w, &bad), 0);
	}
	assert_int_equal(next_event(&d, &ev), 1);
	assert_int_equal(ev.kind, TB_VERBS_EV_CQ_ERR);
	assert_int_equal(ev.type, IBV_EVENT_CQ_ERR);
	assert_ptr_equal(ev.cq, small);
	assert_null(ev.qp);
	assert_non_null(tb_verbs_event_name(&ev));
	/* A write from b with a key that is not: b's peer (a) is the
	 * responder and gets the access error. */
	{
		struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 8,
				      .lkey = mr->lkey};
		struct ibv_send_wr w = {.sg_list = &sge, .num_sge = 1,
					.opcode = IBV_WR_RDMA_WRITE,
					.wr.rdma = {.remote_addr = (uintptr_t)buf,
						    .rkey = mr->rkey + 999}};

		assert_int_equal(ibv_post_send(b, &w, &bad), 0);
	}
	assert_int_equal(next_event(&d, &ev), 1);
	assert_int_equal(ev.kind, TB_VERBS_EV_QP_FATAL);
	assert_ptr_equal(ev.qp, a);
	ibv_destroy_qp(a);   /* acknowledged: destroying does not hang */
	ibv_destroy_qp(b);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(small);
	ibv_destroy_cq(cq);
	tb_verbs_close(&d);
}

/* Every event type lands in the kind that says what to do. */
static void event_kinds(void **state)
{
	tb_verbs_dev_t d = {.port = 1};
	tb_verbs_event_t ev = {.kind = TB_VERBS_EV_PORT_DOWN, .port = 1};

	(void)state;
	assert_int_equal(tb_verbs_event_kind_of(IBV_EVENT_QP_FATAL), TB_VERBS_EV_QP_FATAL);
	assert_int_equal(tb_verbs_event_kind_of(IBV_EVENT_QP_REQ_ERR), TB_VERBS_EV_QP_FATAL);
	assert_int_equal(tb_verbs_event_kind_of(IBV_EVENT_QP_ACCESS_ERR), TB_VERBS_EV_QP_FATAL);
	assert_int_equal(tb_verbs_event_kind_of(IBV_EVENT_CQ_ERR), TB_VERBS_EV_CQ_ERR);
	assert_int_equal(tb_verbs_event_kind_of(IBV_EVENT_PORT_ERR), TB_VERBS_EV_PORT_DOWN);
	assert_int_equal(tb_verbs_event_kind_of(IBV_EVENT_PORT_ACTIVE), TB_VERBS_EV_PORT_UP);
	assert_int_equal(tb_verbs_event_kind_of(IBV_EVENT_GID_CHANGE), TB_VERBS_EV_ADDR_CHANGE);
	assert_int_equal(tb_verbs_event_kind_of(IBV_EVENT_LID_CHANGE), TB_VERBS_EV_ADDR_CHANGE);
	assert_int_equal(tb_verbs_event_kind_of(IBV_EVENT_DEVICE_FATAL), TB_VERBS_EV_DEVICE_FATAL);
	assert_int_equal(tb_verbs_event_kind_of(IBV_EVENT_QP_LAST_WQE_REACHED), TB_VERBS_EV_OTHER);
	assert_int_equal(tb_verbs_event_on_port(&d, &ev), 1);
	ev.port = 2;
	assert_int_equal(tb_verbs_event_on_port(&d, &ev), 0);
	ev = (tb_verbs_event_t){.kind = TB_VERBS_EV_CQ_ERR, .port = 1};
	assert_int_equal(tb_verbs_event_on_port(&d, &ev), 0);
}

/* After an address event: our GID read again, and a change reported. */
static void refresh_sees_a_new_gid(void **state)
{
	tb_stream_cfg_t c;
	tb_verbs_dev_t d;
	uint8_t before[16];

	(void)state;
	cfg_for(&c);
	assert_int_equal(tb_verbs_open(&d, &c, NULL), 0);
	memcpy(before, d.gid.raw, 16);
	assert_int_equal(tb_verbs_refresh(&d), 0);
	fake_gid_bump = 1;
	assert_int_equal(tb_verbs_refresh(&d), 1);
	assert_int_equal(d.gid.raw[15], (uint8_t)(before[15] + 1));
	assert_int_equal(tb_verbs_refresh(&d), 0);
	fake_gid_bump = 0;
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
		cmocka_unit_test(infiniband_address_vector),
		cmocka_unit_test(qp_ex_with_only_the_send_ops),
		cmocka_unit_test(iwarp_and_efa_are_refused),
		cmocka_unit_test(numa_node_of_the_device),
		cmocka_unit_test(async_events_are_read_and_sorted),
		cmocka_unit_test(event_kinds),
		cmocka_unit_test(refresh_sees_a_new_gid),
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
