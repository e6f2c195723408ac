/*
 * softrdma: RDMA READ with a NIC's checks.  A requester reads a responder's
 * MR through its rkey: the MR must grant IBV_ACCESS_REMOTE_READ, the range
 * must lie inside it, the key must be the responder's (its PD), and the
 * responder's QP must allow remote read; failures are
 * IBV_WC_REM_ACCESS_ERR (key, bounds, MR access) or IBV_WC_REM_INV_REQ_ERR
 * (QP access, too many READs), with both QPs in ERR.  A read-only key
 * (REMOTE_READ alone) cannot be written through.  At most max_rd_atomic
 * READs are in flight (later work waits), the responder answers at most
 * max_dest_rd_atomic at once, and IBV_SEND_FENCE holds a work request
 * until the READs before it have landed.
 *
 * The ring here plays a publisher's frame ring that subscribers may read
 * back (issue 15): REMOTE_READ on the ring, nothing else.
 */
#include "sr_test.h"

#define RING 8192
#define LOCAL 16384

struct setup {
	unsigned mr_access;     /* the ring's MR */
	unsigned qp_access;     /* the responder QP */
	uint8_t max_rd_atomic, max_dest_rd_atomic;
};

struct rd {
	struct t_node sub, pub;  /* sub reads pub's ring */
	char *ring, *local;
	struct ibv_mr *ring_mr, *local_mr;
};

static void rd_open(struct rd *r, const struct setup *s)
{
	memset(r, 0, sizeof *r);
	struct t_qp_opts o = {.max_send_wr = 32};
	assert_int_equal(t_node_init(&r->sub, &o), 0);
	assert_int_equal(t_node_init(&r->pub, &o), 0);
	r->ring = calloc(1, RING);
	r->local = calloc(1, LOCAL);
	for (int i = 0; i < RING; i++)
		r->ring[i] = (char)(i * 13 + 1);
	r->ring_mr = ibv_reg_mr(r->pub.pd, r->ring, RING, s->mr_access);
	r->local_mr = ibv_reg_mr(r->sub.pd, r->local, LOCAL, IBV_ACCESS_LOCAL_WRITE);
	assert_non_null(r->ring_mr);
	assert_non_null(r->local_mr);
	struct ibv_qp_attr a;
	/* the reader */
	assert_int_equal(t_to_init(r->sub.qp, 0), 0);
	t_rtr_attr(&a, r->pub.qp->qp_num, 1);
	assert_int_equal(ibv_modify_qp(r->sub.qp, &a, T_RTR_MASK), 0);
	t_rts_attr(&a, 8, 2, 3);
	a.max_rd_atomic = s->max_rd_atomic;
	assert_int_equal(ibv_modify_qp(r->sub.qp, &a, T_RTS_MASK), 0);
	/* the ring's owner */
	assert_int_equal(t_to_init(r->pub.qp, s->qp_access), 0);
	t_rtr_attr(&a, r->sub.qp->qp_num, 1);
	a.max_dest_rd_atomic = s->max_dest_rd_atomic;
	assert_int_equal(ibv_modify_qp(r->pub.qp, &a, T_RTR_MASK), 0);
	t_rts_attr(&a, 8, 2, 3);
	assert_int_equal(ibv_modify_qp(r->pub.qp, &a, T_RTS_MASK), 0);
}

static void rd_close(struct rd *r)
{
	ibv_dereg_mr(r->ring_mr);
	ibv_dereg_mr(r->local_mr);
	t_node_fini(&r->sub);
	t_node_fini(&r->pub);
	free(r->ring);
	free(r->local);
}

static int post_read(struct rd *r, uint32_t loff, uint64_t roff, uint32_t len,
		     uint32_t rkey, unsigned flags, uint64_t id)
{
	return t_post_write(r->sub.qp, IBV_WR_RDMA_READ, r->local + loff, len,
			    r->local_mr->lkey, (uintptr_t)r->ring + roff, rkey, 0,
			    flags | IBV_SEND_SIGNALED, id);
}

static enum ibv_qp_state qstate(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	ibv_query_qp(qp, &a, IBV_QP_STATE, &ia);
	return a.qp_state;
}

static int async_event(struct ibv_context *c, struct ibv_async_event *ev, int ms)
{
	struct pollfd p = {c->async_fd, POLLIN, 0};
	if (poll(&p, 1, ms) != 1)
		return -1;
	return ibv_get_async_event(c, ev);
}

static const struct setup read_only = {
	.mr_access = IBV_ACCESS_REMOTE_READ,
	.qp_access = IBV_ACCESS_REMOTE_READ,
	.max_rd_atomic = 1, .max_dest_rd_atomic = 1,
};

static void test_read_a_ring(void **state)
{
	(void)state;
	struct rd r;
	rd_open(&r, &read_only);
	assert_int_equal(post_read(&r, 0, 100, 3000, r.ring_mr->rkey, 0, 1), 0);
	assert_int_equal(post_read(&r, 4096, RING - 64, 64, r.ring_mr->rkey, 0, 2), 0);
	struct ibv_wc wc[2];
	assert_int_equal(t_poll(r.sub.cq, wc, 2, T_TIMEOUT_MS), 2);
	assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
	assert_int_equal(wc[0].opcode, IBV_WC_RDMA_READ);
	assert_int_equal(wc[0].byte_len, 3000);
	assert_int_equal(wc[1].status, IBV_WC_SUCCESS);
	assert_memory_equal(r.local, r.ring + 100, 3000);
	assert_memory_equal(r.local + 4096, r.ring + RING - 64, 64);
	/* the owner is not involved: no completion, nothing consumed */
	assert_int_equal(ibv_poll_cq(r.pub.cq, 1, wc), 0);
	rd_close(&r);
}

/* Each refusal: the reader's status, both QPs in ERR, the owner's event. */
static void refused(const struct setup *s, uint64_t roff, uint32_t len,
		    uint32_t rkey_xor, enum ibv_wc_status want,
		    enum ibv_event_type ev_want)
{
	struct rd r;
	rd_open(&r, s);
	assert_int_equal(post_read(&r, 0, roff, len, r.ring_mr->rkey ^ rkey_xor, 0, 5), 0);
	struct ibv_wc wc;
	assert_int_equal(t_poll1(r.sub.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.wr_id, 5);
	assert_int_equal(wc.status, want);
	assert_int_equal(qstate(r.sub.qp), IBV_QPS_ERR);
	assert_int_equal(qstate(r.pub.qp), IBV_QPS_ERR);
	struct ibv_async_event ev;
	assert_int_equal(async_event(r.pub.ctx, &ev, T_TIMEOUT_MS), 0);
	assert_int_equal(ev.event_type, ev_want);
	assert_ptr_equal(ev.element.qp, r.pub.qp);
	ibv_ack_async_event(&ev);
	/* nothing was read */
	for (int i = 0; i < 64; i++)
		assert_int_equal(r.local[i], 0);
	rd_close(&r);
}

static void test_cannot_read_outside_the_mr(void **state)
{
	(void)state;
	refused(&read_only, RING - 10, 11, 0, IBV_WC_REM_ACCESS_ERR,
		IBV_EVENT_QP_ACCESS_ERR);                      /* past the end */
	refused(&read_only, (uint64_t)-4096, 16, 0, IBV_WC_REM_ACCESS_ERR,
		IBV_EVENT_QP_ACCESS_ERR);                      /* before it */
	refused(&read_only, 0, 16, 0x4400, IBV_WC_REM_ACCESS_ERR,
		IBV_EVENT_QP_ACCESS_ERR);                      /* another key */
}

static void test_cannot_read_without_remote_read(void **state)
{
	(void)state;
	struct setup s = read_only;
	s.mr_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE; /* no READ */
	refused(&s, 0, 16, 0, IBV_WC_REM_ACCESS_ERR, IBV_EVENT_QP_ACCESS_ERR);
	s = read_only;
	s.qp_access = IBV_ACCESS_REMOTE_WRITE;     /* the QP refuses READs */
	refused(&s, 0, 16, 0, IBV_WC_REM_INV_REQ_ERR, IBV_EVENT_QP_REQ_ERR);
}

static void test_cannot_write_through_a_read_only_key(void **state)
{
	(void)state;
	struct setup s = read_only;
	s.qp_access = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
	struct rd r;
	rd_open(&r, &s);
	memset(r.local, 'X', 64);
	assert_int_equal(t_post_write(r.sub.qp, IBV_WR_RDMA_WRITE, r.local, 64,
				      r.local_mr->lkey, (uintptr_t)r.ring,
				      r.ring_mr->rkey, 0, IBV_SEND_SIGNALED, 6), 0);
	struct ibv_wc wc;
	assert_int_equal(t_poll1(r.sub.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_REM_ACCESS_ERR);
	assert_int_equal(r.ring[0], 1); /* untouched */
	assert_int_equal(qstate(r.pub.qp), IBV_QPS_ERR);
	rd_close(&r);
	/* and a READ into local memory without local write is a local error */
	rd_open(&r, &read_only);
	struct ibv_mr *ro = ibv_reg_mr(r.sub.pd, r.local + 8192, 4096, 0);
	assert_non_null(ro);
	assert_int_equal(t_post_write(r.sub.qp, IBV_WR_RDMA_READ, r.local + 8192, 16,
				      ro->lkey, (uintptr_t)r.ring, r.ring_mr->rkey, 0,
				      IBV_SEND_SIGNALED, 7), 0);
	assert_int_equal(t_poll1(r.sub.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_LOC_PROT_ERR);
	ibv_dereg_mr(ro);
	rd_close(&r);
}

/* The reader keeps at most max_rd_atomic READs in flight: with 1, eight
 * READs against a responder that answers one at a time all succeed. */
static void test_outstanding_reads_limited(void **state)
{
	(void)state;
	struct rd r;
	rd_open(&r, &read_only);
	for (int i = 0; i < 8; i++)
		assert_int_equal(post_read(&r, (uint32_t)i * 512, (uint64_t)i * 512, 512,
					   r.ring_mr->rkey, 0, (uint64_t)i), 0);
	struct ibv_wc wc[8];
	assert_int_equal(t_poll(r.sub.cq, wc, 8, T_TIMEOUT_MS), 8);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
		assert_int_equal(wc[i].wr_id, (uint64_t)i);
	}
	assert_memory_equal(r.local, r.ring, 4096);
	rd_close(&r);

	/* a reader that sends more at once than the responder answers: the
	 * responder NAKs the one it has no resources for */
	struct setup s = read_only;
	s.max_rd_atomic = 4;
	s.max_dest_rd_atomic = 1;
	rd_open(&r, &s);
	struct ibv_send_wr w[2];
	struct ibv_sge sg[2];
	for (int i = 0; i < 2; i++) {
		sg[i] = (struct ibv_sge){(uintptr_t)r.local + (uint64_t)i * 512, 512,
					 r.local_mr->lkey};
		w[i] = (struct ibv_send_wr){.wr_id = (uint64_t)i, .sg_list = &sg[i],
					    .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
					    .send_flags = IBV_SEND_SIGNALED,
					    .next = i ? NULL : &w[1]};
		w[i].wr.rdma.remote_addr = (uintptr_t)r.ring + (uint64_t)i * 512;
		w[i].wr.rdma.rkey = r.ring_mr->rkey;
	}
	struct ibv_send_wr *bad;
	assert_int_equal(ibv_post_send(r.sub.qp, w, &bad), 0);
	assert_int_equal(t_poll(r.sub.cq, wc, 2, T_TIMEOUT_MS), 2);
	assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
	assert_int_equal(wc[1].status, IBV_WC_REM_INV_REQ_ERR);
	rd_close(&r);

	/* a responder with no READ resources at all */
	s = read_only;
	s.max_dest_rd_atomic = 0;
	refused(&s, 0, 16, 0, IBV_WC_REM_INV_REQ_ERR, IBV_EVENT_QP_REQ_ERR);
}

/* A WRITE posted behind a READ of the same local buffer sends what the
 * buffer held before the READ landed; with IBV_SEND_FENCE it waits for
 * the READ and sends what was read. */
static void test_fence(void **state)
{
	(void)state;
	struct setup s = read_only;
	s.mr_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
		      IBV_ACCESS_REMOTE_WRITE;
	s.qp_access = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
	for (int fence = 0; fence < 2; fence++) {
		struct rd r;
		rd_open(&r, &s);
		memset(r.local, 'o', 64); /* old */
		/* one post: both reach the engine at once */
		struct ibv_sge sg = {(uintptr_t)r.local, 64, r.local_mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 2, .sg_list = &sg, .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_SIGNALED |
						       (fence ? IBV_SEND_FENCE : 0)};
		wr.wr.rdma.remote_addr = (uintptr_t)r.ring + 4096;
		wr.wr.rdma.rkey = r.ring_mr->rkey;
		struct ibv_send_wr rd = wr, *bad;
		rd.wr_id = 1;
		rd.opcode = IBV_WR_RDMA_READ;
		rd.send_flags = IBV_SEND_SIGNALED;
		rd.wr.rdma.remote_addr = (uintptr_t)r.ring;
		rd.next = &wr;
		assert_int_equal(ibv_post_send(r.sub.qp, &rd, &bad), 0);
		struct ibv_wc wc[2];
		assert_int_equal(t_poll(r.sub.cq, wc, 2, T_TIMEOUT_MS), 2);
		assert_int_equal(wc[0].wr_id, 1); /* completions in order */
		assert_int_equal(wc[1].wr_id, 2);
		if (fence)
			assert_memory_equal(r.ring + 4096, r.ring, 64);
		else
			assert_int_equal(r.ring[4096], 'o');
		rd_close(&r);
	}
}

int main(void)
{
	t_fabric_setup("read");
	if (!t_is_softrdma()) {
		fprintf(stderr, "SKIP: the loaded libibverbs is not softrdma\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_read_a_ring),
		cmocka_unit_test(test_cannot_read_outside_the_mr),
		cmocka_unit_test(test_cannot_read_without_remote_read),
		cmocka_unit_test(test_cannot_write_through_a_read_only_key),
		cmocka_unit_test(test_outstanding_reads_limited),
		cmocka_unit_test(test_fence),
	};
	int r = cmocka_run_group_tests(tests, NULL, NULL);
	return t_fabric_check_removed(r);
}
