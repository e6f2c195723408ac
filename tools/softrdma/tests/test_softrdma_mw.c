/*
 * softrdma: memory windows, so that one MR (a publisher's credit slots)
 * can be reached only in part, and only by one peer.
 *
 *   - type 1 (ibv_bind_mw): bound to a range of an MR registered with
 *     IBV_ACCESS_MW_BIND; each bind gives the window a new rkey; any QP of
 *     the PD reaches the range through it, nothing outside it, with no more
 *     access than the bind gave; a bind of length 0 unbinds;
 *   - type 2 (IBV_WR_BIND_MW, also ibv_wr_bind_mw): bound with the rkey the
 *     consumer chose, to the QP that posted the bind: only requests
 *     arriving on that QP pass, another QP of the same PD gets
 *     IBV_WC_REM_ACCESS_ERR; binding it again while bound is
 *     IBV_WC_MW_BIND_ERR; IBV_WR_LOCAL_INV invalidates it;
 *   - a bind needs MW_BIND on the MR, the range inside it, local write for
 *     remote write; a window's key is never an lkey; an MR with a bound
 *     window cannot be deregistered.
 */
#include "sr_test.h"

#define SLOTS 4
#define SLOT 64

static const unsigned RW = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ;

/* The publisher (owner of the slots) and two subscribers, A and B, each
 * with its own RC connection to it.  All in one PD on the publisher. */
struct world {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *pqa, *pqb;      /* the publisher's QPs to A and B */
	struct t_node a, b;
	char *slots, *abuf, *bbuf;
	struct ibv_mr *smr, *amr, *bmr;
	struct ibv_mw *mw[4];           /* windows, freed by world_close */
	int nmw;
};

static struct ibv_mw *wmw(struct world *w, enum ibv_mw_type t)
{
	struct ibv_mw *mw = ibv_alloc_mw(w->pd, t);
	if (mw && w->nmw < 4)
		w->mw[w->nmw++] = mw;
	return mw;
}

static struct ibv_qp *rc_qp(struct world *w)
{
	struct ibv_qp_init_attr ia = {.send_cq = w->cq, .recv_cq = w->cq,
				      .cap = {16, 16, 1, 1, 0}, .qp_type = IBV_QPT_RC,
				      .sq_sig_all = 1};
	return ibv_create_qp(w->pd, &ia);
}

static void world_open(struct world *w, unsigned slot_access)
{
	memset(w, 0, sizeof *w);
	w->ctx = t_open();
	w->pd = ibv_alloc_pd(w->ctx);
	w->cq = ibv_create_cq(w->ctx, 64, NULL, NULL, 0);
	w->pqa = rc_qp(w);
	w->pqb = rc_qp(w);
	assert_non_null(w->pqa);
	assert_non_null(w->pqb);
	struct t_qp_opts o = {.sig_all = 1};
	assert_int_equal(t_node_init(&w->a, &o), 0);
	assert_int_equal(t_node_init(&w->b, &o), 0);
	w->slots = calloc(1, SLOTS * SLOT);
	w->abuf = calloc(1, 4096);
	w->bbuf = calloc(1, 4096);
	w->smr = ibv_reg_mr(w->pd, w->slots, SLOTS * SLOT, slot_access);
	w->amr = ibv_reg_mr(w->a.pd, w->abuf, 4096, RW);
	w->bmr = ibv_reg_mr(w->b.pd, w->bbuf, 4096, RW);
	assert_non_null(w->smr);
	struct t_conn c = t_conn_default;
	c.retry_cnt = 1;
	assert_int_equal(t_connect(w->pqa, w->a.qp->qp_num, &c), 0);
	assert_int_equal(t_connect(w->a.qp, w->pqa->qp_num, &c), 0);
	assert_int_equal(t_connect(w->pqb, w->b.qp->qp_num, &c), 0);
	assert_int_equal(t_connect(w->b.qp, w->pqb->qp_num, &c), 0);
}

static void world_close(struct world *w)
{
	for (int i = 0; i < w->nmw; i++)
		assert_int_equal(ibv_dealloc_mw(w->mw[i]), 0);
	ibv_dereg_mr(w->amr);
	ibv_dereg_mr(w->bmr);
	ibv_dereg_mr(w->smr);
	t_node_fini(&w->a);
	t_node_fini(&w->b);
	ibv_destroy_qp(w->pqa);
	ibv_destroy_qp(w->pqb);
	ibv_destroy_cq(w->cq);
	ibv_dealloc_pd(w->pd);
	ibv_close_device(w->ctx);
	free(w->slots);
	free(w->abuf);
	free(w->bbuf);
}

/* A subscriber writes 8 bytes at slots + off through rkey: the status. */
static enum ibv_wc_status put(struct t_node *n, struct ibv_mr *mr, char *buf,
			      struct world *w, uint64_t off, uint32_t rkey,
			      enum ibv_wr_opcode op)
{
	struct ibv_wc wc;
	memset(buf, 'S', 8);
	if (t_post_write(n->qp, op, buf, 8, mr->lkey, (uintptr_t)w->slots + off,
			 rkey, 0, 0, 1))
		return (enum ibv_wc_status)-1;
	if (t_poll1(n->cq, &wc, T_TIMEOUT_MS) != 1)
		return (enum ibv_wc_status)-2;
	return wc.status;
}

static enum ibv_wc_status pub_done(struct world *w)
{
	struct ibv_wc wc;
	if (t_poll1(w->cq, &wc, T_TIMEOUT_MS) != 1)
		return (enum ibv_wc_status)-2;
	return wc.status;
}

/* Binds a type 2 window on qp over slot k; the completion's status. */
static enum ibv_wc_status bind2(struct world *w, struct ibv_qp *qp,
				struct ibv_mw *mw, uint32_t rkey, int k,
				unsigned access)
{
	struct ibv_send_wr wr = {.wr_id = 50, .opcode = IBV_WR_BIND_MW}, *bad;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info = (struct ibv_mw_bind_info){
		.mr = w->smr, .addr = (uintptr_t)w->slots + (uint64_t)k * SLOT,
		.length = SLOT, .mw_access_flags = access};
	if (ibv_post_send(qp, &wr, &bad))
		return (enum ibv_wc_status)-1;
	return pub_done(w);
}

static void test_type1(void **state)
{
	(void)state;
	struct world w;
	world_open(&w, RW | IBV_ACCESS_MW_BIND);
	struct ibv_mw *mw = wmw(&w, IBV_MW_TYPE_1);
	assert_non_null(mw);
	assert_int_equal(mw->type, IBV_MW_TYPE_1);
	uint32_t before = mw->rkey;
	struct ibv_mw_bind b = {.wr_id = 9, .send_flags = IBV_SEND_SIGNALED,
				.bind_info = {.mr = w.smr,
					      .addr = (uintptr_t)w.slots + SLOT,
					      .length = SLOT,
					      .mw_access_flags = IBV_ACCESS_REMOTE_WRITE}};
	assert_int_equal(ibv_bind_mw(w.pqa, mw, &b), 0);
	assert_int_not_equal(mw->rkey, before);       /* a new key per bind */
	assert_int_equal(mw->rkey >> 8, before >> 8);
	struct ibv_wc wc;
	assert_int_equal(t_poll1(w.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.opcode, IBV_WC_BIND_MW);
	assert_int_equal(wc.wr_id, 9);
	/* inside the window: yes, from either QP of the PD */
	assert_int_equal(put(&w.a, w.amr, w.abuf, &w, SLOT, mw->rkey,
			     IBV_WR_RDMA_WRITE), IBV_WC_SUCCESS);
	assert_int_equal(w.slots[SLOT], 'S');
	assert_int_equal(put(&w.b, w.bmr, w.bbuf, &w, SLOT + 56, mw->rkey,
			     IBV_WR_RDMA_WRITE), IBV_WC_SUCCESS);
	/* the old key no longer reaches anything */
	assert_int_equal(put(&w.b, w.bmr, w.bbuf, &w, SLOT, before,
			     IBV_WR_RDMA_WRITE), IBV_WC_REM_ACCESS_ERR);
	world_close(&w);

	/* outside the window, and reading through a write-only window */
	world_open(&w, RW | IBV_ACCESS_MW_BIND);
	mw = wmw(&w, IBV_MW_TYPE_1);
	b.bind_info.mr = w.smr;
	b.bind_info.addr = (uintptr_t)w.slots + SLOT;
	assert_int_equal(ibv_bind_mw(w.pqa, mw, &b), 0);
	assert_int_equal(pub_done(&w), IBV_WC_SUCCESS);
	assert_int_equal(put(&w.a, w.amr, w.abuf, &w, 2 * SLOT - 4, mw->rkey,
			     IBV_WR_RDMA_WRITE), IBV_WC_REM_ACCESS_ERR);
	assert_int_equal(w.slots[2 * SLOT], 0);
	assert_int_equal(put(&w.b, w.bmr, w.bbuf, &w, SLOT, mw->rkey,
			     IBV_WR_RDMA_READ), IBV_WC_REM_ACCESS_ERR);
	world_close(&w);

	/* unbind (length 0): the window reaches nothing */
	world_open(&w, RW | IBV_ACCESS_MW_BIND);
	mw = wmw(&w, IBV_MW_TYPE_1);
	b.bind_info.mr = w.smr;
	b.bind_info.addr = (uintptr_t)w.slots + SLOT;
	assert_int_equal(ibv_bind_mw(w.pqa, mw, &b), 0);
	assert_int_equal(pub_done(&w), IBV_WC_SUCCESS);
	/* bound: its MR cannot go */
	assert_int_equal(ibv_dereg_mr(w.smr), EBUSY);
	struct ibv_mw_bind un = {.wr_id = 10, .send_flags = IBV_SEND_SIGNALED};
	assert_int_equal(ibv_bind_mw(w.pqa, mw, &un), 0);
	assert_int_equal(pub_done(&w), IBV_WC_SUCCESS);
	assert_int_equal(put(&w.a, w.amr, w.abuf, &w, SLOT, mw->rkey,
			     IBV_WR_RDMA_WRITE), IBV_WC_REM_ACCESS_ERR);
	world_close(&w);
}

static void test_bind_rules(void **state)
{
	(void)state;
	struct world w;
	/* an MR without MW_BIND */
	world_open(&w, RW);
	struct ibv_mw *mw = wmw(&w, IBV_MW_TYPE_1);
	struct ibv_mw_bind b = {.wr_id = 9, .send_flags = IBV_SEND_SIGNALED,
				.bind_info = {.mr = w.smr, .addr = (uintptr_t)w.slots,
					      .length = SLOT,
					      .mw_access_flags = IBV_ACCESS_REMOTE_WRITE}};
	assert_int_equal(ibv_bind_mw(w.pqa, mw, &b), 0);
	assert_int_equal(pub_done(&w), IBV_WC_MW_BIND_ERR);
	world_close(&w);
	/* a range past the MR */
	world_open(&w, RW | IBV_ACCESS_MW_BIND);
	mw = wmw(&w, IBV_MW_TYPE_1);
	b.bind_info.mr = w.smr;
	b.bind_info.addr = (uintptr_t)w.slots + SLOTS * SLOT - 8;
	assert_int_equal(ibv_bind_mw(w.pqa, mw, &b), 0);
	assert_int_equal(pub_done(&w), IBV_WC_MW_BIND_ERR);
	world_close(&w);
	/* remote write through a window on an MR without local write */
	world_open(&w, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND);
	mw = wmw(&w, IBV_MW_TYPE_1);
	b.bind_info.mr = w.smr;
	b.bind_info.addr = (uintptr_t)w.slots;
	assert_int_equal(ibv_bind_mw(w.pqa, mw, &b), 0);
	assert_int_equal(pub_done(&w), IBV_WC_MW_BIND_ERR);
	world_close(&w);
	/* a window's key is never an lkey */
	world_open(&w, RW | IBV_ACCESS_MW_BIND);
	mw = wmw(&w, IBV_MW_TYPE_2);
	struct ibv_mr fake = *w.smr;
	fake.lkey = mw->rkey;
	char tmp[8] = {0};
	assert_int_equal(t_post_write(w.pqa, IBV_WR_RDMA_WRITE, w.slots, 8, fake.lkey,
				      (uintptr_t)w.abuf, w.amr->rkey, 0, 0, 3), 0);
	assert_int_equal(pub_done(&w), IBV_WC_LOC_PROT_ERR);
	(void)tmp;
	world_close(&w);
	/* malformed binds are refused at post */
	world_open(&w, RW | IBV_ACCESS_MW_BIND);
	mw = wmw(&w, IBV_MW_TYPE_2);
	assert_null(ibv_alloc_mw(w.pd, (enum ibv_mw_type)3));
	struct ibv_send_wr wr = {.opcode = IBV_WR_BIND_MW}, *bad;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info.mr = w.smr;
	wr.bind_mw.bind_info.length = SLOT;
	wr.bind_mw.bind_info.addr = (uintptr_t)w.slots;
	wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_LOCAL_WRITE; /* not remote */
	assert_int_equal(ibv_post_send(w.pqa, &wr, &bad), EINVAL);
	struct ibv_mw_bind tb = {.bind_info = b.bind_info};
	assert_int_equal(ibv_bind_mw(w.pqa, mw, &tb), EINVAL); /* type 2 */
	world_close(&w);
}

/* The subscriber-slot case of issue 13: each subscriber a type 2 window
 * on its own slot, bound to its own QP. */
static void test_type2_bound_to_a_qp(void **state)
{
	(void)state;
	struct world w;
	world_open(&w, RW | IBV_ACCESS_MW_BIND);
	struct ibv_mw *ma = wmw(&w, IBV_MW_TYPE_2);
	struct ibv_mw *mb = wmw(&w, IBV_MW_TYPE_2);
	assert_non_null(ma);
	assert_non_null(mb);
	uint32_t ka = ibv_inc_rkey(ma->rkey), kb = ibv_inc_rkey(mb->rkey);
	assert_int_equal(bind2(&w, w.pqa, ma, ka, 0, IBV_ACCESS_REMOTE_WRITE),
			 IBV_WC_SUCCESS);
	assert_int_equal(bind2(&w, w.pqb, mb, kb, 1, IBV_ACCESS_REMOTE_WRITE),
			 IBV_WC_SUCCESS);
	/* each reaches its own slot through its own QP */
	assert_int_equal(put(&w.a, w.amr, w.abuf, &w, 0, ka, IBV_WR_RDMA_WRITE),
			 IBV_WC_SUCCESS);
	assert_int_equal(put(&w.b, w.bmr, w.bbuf, &w, SLOT, kb, IBV_WR_RDMA_WRITE),
			 IBV_WC_SUCCESS);
	/* B with A's key (it learnt it somehow): arrives on the wrong QP */
	w.slots[0] = 0;
	assert_int_equal(put(&w.b, w.bmr, w.bbuf, &w, 0, ka, IBV_WR_RDMA_WRITE),
			 IBV_WC_REM_ACCESS_ERR);
	assert_int_equal(w.slots[0], 0);
	world_close(&w);
}

static void test_type2_rebind_and_invalidate(void **state)
{
	(void)state;
	struct world w;
	world_open(&w, RW | IBV_ACCESS_MW_BIND);
	struct ibv_mw *ma = wmw(&w, IBV_MW_TYPE_2);
	uint32_t k1 = ibv_inc_rkey(ma->rkey), k2 = ibv_inc_rkey(k1);
	assert_int_equal(bind2(&w, w.pqa, ma, k1, 0, IBV_ACCESS_REMOTE_WRITE),
			 IBV_WC_SUCCESS);
	/* bound: binding it again is an error (and the QP goes to ERR) */
	assert_int_equal(bind2(&w, w.pqa, ma, k2, 0, IBV_ACCESS_REMOTE_WRITE),
			 IBV_WC_MW_BIND_ERR);
	world_close(&w);

	world_open(&w, RW | IBV_ACCESS_MW_BIND);
	ma = wmw(&w, IBV_MW_TYPE_2);
	k1 = ibv_inc_rkey(ma->rkey);
	k2 = ibv_inc_rkey(k1);
	assert_int_equal(bind2(&w, w.pqa, ma, k1, 0, IBV_ACCESS_REMOTE_WRITE),
			 IBV_WC_SUCCESS);
	assert_int_equal(put(&w.a, w.amr, w.abuf, &w, 0, k1, IBV_WR_RDMA_WRITE),
			 IBV_WC_SUCCESS);
	/* invalidated: the key reaches nothing; then bound anew with k2 */
	struct ibv_send_wr inv = {.wr_id = 60, .opcode = IBV_WR_LOCAL_INV,
				  .invalidate_rkey = k1}, *bad;
	assert_int_equal(ibv_post_send(w.pqa, &inv, &bad), 0);
	struct ibv_wc wc;
	assert_int_equal(t_poll1(w.cq, &wc, T_TIMEOUT_MS), 1);
	assert_int_equal(wc.status, IBV_WC_SUCCESS);
	assert_int_equal(wc.opcode, IBV_WC_LOCAL_INV);
	assert_int_equal(put(&w.a, w.amr, w.abuf, &w, 0, k1, IBV_WR_RDMA_WRITE),
			 IBV_WC_REM_ACCESS_ERR);
	world_close(&w);

	world_open(&w, RW | IBV_ACCESS_MW_BIND);
	ma = wmw(&w, IBV_MW_TYPE_2);
	k1 = ibv_inc_rkey(ma->rkey);
	k2 = ibv_inc_rkey(k1);
	assert_int_equal(bind2(&w, w.pqa, ma, k1, 0, IBV_ACCESS_REMOTE_WRITE),
			 IBV_WC_SUCCESS);
	inv.invalidate_rkey = k1;
	assert_int_equal(ibv_post_send(w.pqa, &inv, &bad), 0);
	assert_int_equal(pub_done(&w), IBV_WC_SUCCESS);
	assert_int_equal(bind2(&w, w.pqa, ma, k2, 2, IBV_ACCESS_REMOTE_WRITE),
			 IBV_WC_SUCCESS);
	assert_int_equal(put(&w.a, w.amr, w.abuf, &w, 2 * SLOT, k2,
			     IBV_WR_RDMA_WRITE), IBV_WC_SUCCESS);
	assert_int_equal(w.slots[2 * SLOT], 'S');
	/* invalidating a key that is no bound window: an error */
	inv.invalidate_rkey = k1;
	assert_int_equal(ibv_post_send(w.pqa, &inv, &bad), 0);
	assert_int_equal(pub_done(&w), IBV_WC_LOC_PROT_ERR);
	world_close(&w);
}

int main(void)
{
	t_fabric_setup("mw");
	if (!t_is_softrdma()) {
		fprintf(stderr, "SKIP: the loaded libibverbs is not softrdma\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_type1),
		cmocka_unit_test(test_bind_rules),
		cmocka_unit_test(test_type2_bound_to_a_qp),
		cmocka_unit_test(test_type2_rebind_and_invalidate),
	};
	int r = cmocka_run_group_tests(tests, NULL, NULL);
	return t_fabric_check_removed(r);
}
