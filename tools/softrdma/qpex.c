/*
 * The extended send API (ibv_wr_post(3)): ibv_wr_start, one ibv_wr_<op>
 * per work request followed by its ibv_wr_set_* calls, ibv_wr_complete.
 *
 * A QP has it when ibv_create_qp_ex was given send_ops_flags; only the ops
 * named there get a function (the others stay NULL, as with mlx5, whose WQE
 * was sized for those ops alone).  ibv_wr_start takes the send queue's
 * lock; each op builds the next WQE after the ones already posted, not yet
 * visible to the engine; ibv_wr_complete publishes them all at once (or,
 * if any step failed, none, and returns that step's error: ENOMEM for a
 * full queue or inline data over max_inline_data, EINVAL for a malformed
 * request or a QP not in RTS); ibv_wr_abort drops them.  As with
 * ibv_post_send, data is read when the work request runs, inline data when
 * it is set.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "softrdma.h"

#include <errno.h>
#include <string.h>

static inline struct sr_qp *xqp(struct ibv_qp_ex *q)
{
	return (struct sr_qp *)q;
}

static void fail(struct sr_qp *qp, int e)
{
	if (!qp->xq_err)
		qp->xq_err = e;
}

/* The WQE being built, or NULL before the first op / after an error. */
static struct sr_swqe *cur(struct sr_qp *qp)
{
	if (qp->xq_err || !qp->xq_pos)
		return NULL;
	return sr_sq_at(qp, atomic_load_explicit(&qp->sq_post, memory_order_relaxed) +
				    qp->xq_pos - 1);
}

static struct sr_swqe *begin(struct ibv_qp_ex *q, enum ibv_wr_opcode op)
{
	struct sr_qp *qp = xqp(q);
	if (qp->xq_err)
		return NULL;
	uint32_t pos = atomic_load_explicit(&qp->sq_post, memory_order_relaxed) +
		       qp->xq_pos;
	if (!sr_sq_room(qp, pos)) {
		fail(qp, ENOMEM);
		return NULL;
	}
	struct sr_swqe *w = sr_sq_at(qp, pos);
	memset(w, 0, sizeof *w);
	sr_sq_fill(qp, w);
	w->wr_id = q->wr_id;
	w->opcode = op;
	w->flags = q->wr_flags | (qp->sq_sig_all ? IBV_SEND_SIGNALED : 0);
	qp->xq_pos++;
	return w;
}

static void x_start(struct ibv_qp_ex *q)
{
	struct sr_qp *qp = xqp(q);
	pthread_mutex_lock(&qp->sq_lock);
	qp->xq_pos = 0;
	qp->xq_err = 0;
}

static int x_complete(struct ibv_qp_ex *q)
{
	struct sr_qp *qp = xqp(q);
	uint32_t st = atomic_load(&qp->shm->state);
	int e = qp->xq_err;
	if (!e && st != IBV_QPS_RTS && st != IBV_QPS_ERR)
		e = EINVAL;
	/* A WQE without its addressing is malformed. */
	for (uint32_t i = 0; !e && i < qp->xq_pos; i++) {
		struct sr_swqe *w = sr_sq_at(qp, atomic_load(&qp->sq_post) + i);
		if ((qp->qp.qp_type == IBV_QPT_UD && !w->ah) ||
		    ((w->flags & IBV_SEND_INLINE) && w->opcode == IBV_WR_RDMA_READ))
			e = EINVAL;
	}
	uint32_t before = atomic_load(&qp->sq_post);
	if (!e && qp->xq_pos)
		sr_sq_publish(qp, before + qp->xq_pos);
	qp->xq_pos = 0;
	qp->xq_err = 0;
	pthread_mutex_unlock(&qp->sq_lock);
	if (!e)
		sr_sq_help(qp, before);
	return e;
}

static void x_abort(struct ibv_qp_ex *q)
{
	struct sr_qp *qp = xqp(q);
	qp->xq_pos = 0;
	qp->xq_err = 0;
	pthread_mutex_unlock(&qp->sq_lock);
}

static void x_rdma_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr)
{
	struct sr_swqe *w = begin(q, IBV_WR_RDMA_WRITE);
	if (w) {
		w->rkey = rkey;
		w->remote_addr = addr;
	}
}

static void x_rdma_write_imm(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr,
			     __be32 imm)
{
	struct sr_swqe *w = begin(q, IBV_WR_RDMA_WRITE_WITH_IMM);
	if (w) {
		w->rkey = rkey;
		w->remote_addr = addr;
		w->imm_data = imm;
	}
}

static void x_rdma_read(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr)
{
	struct sr_swqe *w = begin(q, IBV_WR_RDMA_READ);
	if (w) {
		w->rkey = rkey;
		w->remote_addr = addr;
	}
}

static void x_send(struct ibv_qp_ex *q)
{
	begin(q, IBV_WR_SEND);
}

static void x_send_imm(struct ibv_qp_ex *q, __be32 imm)
{
	struct sr_swqe *w = begin(q, IBV_WR_SEND_WITH_IMM);
	if (w)
		w->imm_data = imm;
}

static void x_bind_mw(struct ibv_qp_ex *q, struct ibv_mw *mw, uint32_t rkey,
		      const struct ibv_mw_bind_info *b)
{
	struct sr_qp *qp = xqp(q);
	if (!mw || mw->pd != qp->qp.pd || (b->mr && b->mr->pd != qp->qp.pd) ||
	    (b->mw_access_flags & ~(unsigned)(IBV_ACCESS_REMOTE_WRITE |
					      IBV_ACCESS_REMOTE_READ |
					      IBV_ACCESS_REMOTE_ATOMIC))) {
		fail(qp, EINVAL);
		return;
	}
	struct sr_swqe *w = begin(q, IBV_WR_BIND_MW);
	if (w) {
		w->mw = mw;
		w->rkey = rkey;
		w->bind = *b;
	}
}

static void x_local_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
	struct sr_swqe *w = begin(q, IBV_WR_LOCAL_INV);
	if (w)
		w->imm_data = rkey;
}

static void x_set_ud_addr(struct ibv_qp_ex *q, struct ibv_ah *ah,
			  uint32_t remote_qpn, uint32_t remote_qkey)
{
	struct sr_qp *qp = xqp(q);
	struct sr_swqe *w = cur(qp);
	if (!w)
		return;
	if (!ah || ah->pd != qp->qp.pd) {
		fail(qp, EINVAL);
		return;
	}
	w->ah = ah;
	w->remote_qpn = remote_qpn;
	w->remote_qkey = remote_qkey;
}

static void x_set_sge_list(struct ibv_qp_ex *q, size_t n, const struct ibv_sge *sg)
{
	struct sr_qp *qp = xqp(q);
	struct sr_swqe *w = cur(qp);
	if (!w)
		return;
	if (n > qp->cap.max_send_sge) {
		fail(qp, EINVAL);
		return;
	}
	uint64_t len = 0;
	for (size_t i = 0; i < n; i++) {
		w->sge[i] = sg[i];
		len += sg[i].length;
	}
	if (len > SR_MAX_MSG) {
		fail(qp, EINVAL);
		return;
	}
	w->num_sge = (uint32_t)n;
	w->length = (uint32_t)len;
	w->flags &= ~(uint32_t)IBV_SEND_INLINE;
}

static void x_set_sge(struct ibv_qp_ex *q, uint32_t lkey, uint64_t addr,
		      uint32_t length)
{
	struct ibv_sge s = {addr, length, lkey};
	x_set_sge_list(q, 1, &s);
}

static void x_set_inline_data_list(struct ibv_qp_ex *q, size_t n,
				   const struct ibv_data_buf *b)
{
	struct sr_qp *qp = xqp(q);
	struct sr_swqe *w = cur(qp);
	if (!w)
		return;
	size_t len = 0;
	for (size_t i = 0; i < n; i++)
		len += b[i].length;
	if (len > qp->cap.max_inline_data) {
		fail(qp, ENOMEM); /* as mlx5 */
		return;
	}
	uint8_t *d = (uint8_t *)(w + 1);
	for (size_t i = 0; i < n; i++) {
		memcpy(d, b[i].addr, b[i].length);
		d += b[i].length;
	}
	w->length = (uint32_t)len;
	w->num_sge = 0;
	w->flags |= IBV_SEND_INLINE;
}

static void x_set_inline_data(struct ibv_qp_ex *q, void *addr, size_t length)
{
	struct ibv_data_buf b = {addr, length};
	x_set_inline_data_list(q, 1, &b);
}

void sr_qpex_init(struct sr_qp *qp)
{
	struct ibv_qp_ex *q = &qp->qpx;
	uint64_t ops = qp->send_ops;
	q->comp_mask = 0;
	q->wr_start = x_start;
	q->wr_complete = x_complete;
	q->wr_abort = x_abort;
	if (ops & IBV_QP_EX_WITH_RDMA_WRITE)
		q->wr_rdma_write = x_rdma_write;
	if (ops & IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM)
		q->wr_rdma_write_imm = x_rdma_write_imm;
	if (ops & IBV_QP_EX_WITH_RDMA_READ)
		q->wr_rdma_read = x_rdma_read;
	if (ops & IBV_QP_EX_WITH_SEND)
		q->wr_send = x_send;
	if (ops & IBV_QP_EX_WITH_SEND_WITH_IMM)
		q->wr_send_imm = x_send_imm;
	if (ops & IBV_QP_EX_WITH_BIND_MW)
		q->wr_bind_mw = x_bind_mw;
	if (ops & IBV_QP_EX_WITH_LOCAL_INV)
		q->wr_local_inv = x_local_inv;
	if (qp->qp.qp_type == IBV_QPT_UD)
		q->wr_set_ud_addr = x_set_ud_addr;
	q->wr_set_sge = x_set_sge;
	q->wr_set_sge_list = x_set_sge_list;
	q->wr_set_inline_data = x_set_inline_data;
	q->wr_set_inline_data_list = x_set_inline_data_list;
}
