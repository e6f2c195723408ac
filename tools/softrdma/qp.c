/*
 * Queue pairs: creation, destruction, query, and the RC and UD state
 * machines.
 *
 * ibv_modify_qp accepts exactly the transitions and attribute masks the IB
 * specification (and the kernel's ib_modify_qp_is_ok table) allows for RC:
 *
 *   RESET -> INIT  requires PKEY_INDEX | PORT | ACCESS_FLAGS
 *   INIT  -> INIT  optional PKEY_INDEX | PORT | ACCESS_FLAGS
 *   INIT  -> RTR   requires AV | PATH_MTU | DEST_QPN | RQ_PSN |
 *                           MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER
 *                  optional ALT_PATH | ACCESS_FLAGS | PKEY_INDEX
 *   RTR   -> RTS   requires SQ_PSN | MAX_QP_RD_ATOMIC | RETRY_CNT |
 *                           RNR_RETRY | TIMEOUT
 *                  optional CUR_STATE | ALT_PATH | ACCESS_FLAGS |
 *                           MIN_RNR_TIMER | PATH_MIG_STATE
 *   RTS   -> RTS   optional CUR_STATE | ACCESS_FLAGS | ALT_PATH |
 *                           PATH_MIG_STATE | MIN_RNR_TIMER
 *   any   -> RESET, any -> ERR   nothing else
 *
 * UD (the kernel's table for IB_QPT_UD):
 *
 *   RESET -> INIT  requires PKEY_INDEX | PORT | QKEY
 *   INIT  -> INIT  optional PKEY_INDEX | PORT | QKEY
 *   INIT  -> RTR   optional PKEY_INDEX | QKEY
 *   RTR   -> RTS   requires SQ_PSN        optional CUR_STATE | QKEY
 *   RTS   -> RTS   optional CUR_STATE | QKEY
 *
 * A missing required attribute, an attribute outside required|optional, an
 * out-of-range value, or any other transition (SQD and SQE are not
 * implemented) fails with EINVAL and leaves the QP unchanged.  The address
 * vector is checked against this process's port: on RoCE it must carry a
 * GRH (is_global) whose sgid_index names a GID the table holds, on either
 * link layer the dgid must not be a multicast GID; on InfiniBand the dlid is
 * not checked here (a wrong one ends in IBV_WC_RETRY_EXC_ERR, as on a
 * fabric).  path_mtu may not exceed the port's max_mtu (4096).  A Q_Key
 * with the high bit set (a controlled Q_Key, IB spec 3.5.3) needs
 * CAP_NET_RAW, else EPERM, as the kernel's uverbs says since Linux 6.4.
 * Alternate paths are accepted and ignored.
 *
 * RTR publishes what peers check on every request: the expected PSN (from
 * rq_psn), the path MTU, max_dest_rd_atomic and the address vector (for the
 * acknowledgements' way back); RTS sets the first PSN sent (sq_psn).
 *
 * Going to ERR flushes every outstanding send and posted receive with
 * IBV_WC_WR_FLUSH_ERR; going to RESET discards them without completions.
 *
 * Creation sizes the queues as the mlx5 provider does and writes back what
 * it grants (ibv_create_qp(3): at least what was asked): a send WQE is a
 * control segment, the largest operation segment the QP's send ops need
 * (remote address 16, atomic 32, memory-window bind 176 bytes, which plain
 * ibv_create_qp reserves for RC because it allows every op), a datagram
 * segment on UD, and the sges or the inline data, rounded to 64-byte
 * blocks, at most 512 bytes; max_inline_data is what fits in that WQE;
 * the queue is the next power of two of max_send_wr WQEs' bytes, and
 * max_send_wr is how many fit; the receive queue is a power of two of
 * 16-byte-per-sge WQEs.  Those pages are charged to RLIMIT_MEMLOCK.
 * SOFTRDMA_GRANT_INLINE=n grants at most n bytes of inline data whatever
 * was asked (as providers with small inline segments do), and posting
 * more inline than granted is EINVAL.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "softrdma.h"

#include <errno.h>
#include <linux/capability.h>
#include <stdlib.h>
#include <string.h>

/* ---- sizing, as the mlx5 provider sizes its rings ---- */

#define SEG_CTRL 16u
#define SEG_RADDR 16u
#define SEG_ATOMIC 16u
#define SEG_DATAGRAM 48u
#define SEG_MW (16u + 48u + 64u + 64u) /* ctrl, umr ctrl, mkey, klm */
#define SEG_DATA 16u
#define SEG_INLINE_HDR 4u
#define SR_BB 64u

#define RC_OPS (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | \
		IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |             \
		IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_BIND_MW |              \
		IBV_QP_EX_WITH_LOCAL_INV)
#define UD_OPS (IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM)

static uint32_t pow2(uint64_t v)
{
	uint64_t r = 1;
	while (r < v)
		r <<= 1;
	return r > UINT32_MAX ? 0 : (uint32_t)r;
}

static uint32_t align_up(uint32_t v, uint32_t a)
{
	return (v + a - 1) / a * a;
}

/* The send WQE's overhead before data: what the ops need. */
static uint32_t sq_overhead(enum ibv_qp_type type, uint64_t ops)
{
	uint32_t size = SEG_CTRL;
	if (ops & (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
		   IBV_QP_EX_WITH_RDMA_READ))
		size = SEG_CTRL + SEG_RADDR > size ? SEG_CTRL + SEG_RADDR : size;
	if (ops & (IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
		   IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD))
		size = SEG_CTRL + SEG_RADDR + SEG_ATOMIC > size
			       ? SEG_CTRL + SEG_RADDR + SEG_ATOMIC : size;
	if (ops & (IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV))
		size = SEG_MW > size ? SEG_MW : size;
	if (type == IBV_QPT_UD)
		size += SEG_DATAGRAM;
	return size;
}

struct sizing {
	uint32_t wqe, sq_bytes, rq_bytes, max_send_wr, max_recv_wr;
	uint32_t max_recv_sge, max_inline;
};

/* 0, or EINVAL when the caps cannot be met. */
static int size_queues(enum ibv_qp_type type, uint64_t ops,
		       const struct ibv_qp_cap *cap, struct sizing *z)
{
	memset(z, 0, sizeof *z);
	uint32_t over = sq_overhead(type, ops);
	if (cap->max_send_sge > (SR_MAX_SQ_DESC - over) / SEG_DATA)
		return EINVAL;
	uint32_t size = over + cap->max_send_sge * SEG_DATA;
	uint32_t inl = cap->max_inline_data
			       ? over + align_up(SEG_INLINE_HDR + cap->max_inline_data, 16)
			       : 0;
	uint32_t tot = size > inl ? size : inl;
	if (tot > SR_MAX_SQ_DESC)
		return EINVAL;
	z->wqe = align_up(tot, SR_BB);
	z->max_inline = z->wqe - over - SEG_INLINE_HDR;
	if (cap->max_send_wr) {
		z->sq_bytes = pow2((uint64_t)cap->max_send_wr * z->wqe);
		z->max_send_wr = z->sq_bytes / z->wqe;
	}
	if (cap->max_recv_wr) {
		uint32_t rwqe = pow2(SEG_DATA * (cap->max_recv_sge ? cap->max_recv_sge : 1));
		z->rq_bytes = pow2(cap->max_recv_wr) * rwqe;
		if (z->rq_bytes < SR_BB)
			z->rq_bytes = SR_BB;
		z->max_recv_wr = z->rq_bytes / rwqe;
		z->max_recv_sge = rwqe / SEG_DATA;
	}
	return 0;
}

static struct ibv_qp *create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia,
				uint32_t create_flags, uint64_t ops, int has_qpx)
{
	struct sr_context *c = sr_ctx(pd->context);
	struct ibv_qp_cap *cap = &ia->cap;
	if (ia->qp_type != IBV_QPT_RC && ia->qp_type != IBV_QPT_UD) {
		errno = EOPNOTSUPP; /* UC, XRC, raw packet: not implemented */
		return NULL;
	}
	if (ia->srq) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct sizing z;
	if (!ia->send_cq || !ia->recv_cq ||
	    ia->send_cq->context != pd->context ||
	    ia->recv_cq->context != pd->context ||
	    cap->max_send_wr > SR_MAX_QP_WR || cap->max_recv_wr > SR_MAX_QP_WR ||
	    cap->max_send_sge > SR_MAX_SGE || cap->max_recv_sge > SR_MAX_SGE ||
	    size_queues(ia->qp_type, ops, cap, &z)) {
		errno = EINVAL;
		return NULL;
	}
	/* The provider's buffer (receive queue, send queue) in whole pages. */
	uint64_t pages = ((uint64_t)z.sq_bytes + z.rq_bytes + SR_PAGE - 1) / SR_PAGE;
	int err = sr_memlock_charge(pages);
	if (err) {
		errno = err;
		return NULL;
	}
	struct ibv_qp_cap got = {
		.max_send_wr = z.max_send_wr,
		.max_recv_wr = z.max_recv_wr,
		.max_send_sge = cap->max_send_sge,
		.max_recv_sge = z.max_recv_sge ? z.max_recv_sge : cap->max_recv_sge,
		.max_inline_data = z.max_inline < sr_grant_inline ? z.max_inline
								  : sr_grant_inline,
	};
	if (got.max_recv_sge > SR_MAX_SGE)
		got.max_recv_sge = SR_MAX_SGE;
	struct sr_qp *qp = calloc(1, sizeof *qp);
	if (!qp) {
		sr_memlock_uncharge(pages);
		errno = ENOMEM;
		return NULL;
	}
	qp->pages = pages;
	qp->sq_wqe_bytes = z.wqe;
	qp->sq_stride = (sizeof(struct sr_swqe) + got.max_inline_data + 7) & ~7ul;
	qp->sq = calloc(got.max_send_wr ? got.max_send_wr : 1, qp->sq_stride);
	if (!got.max_send_wr)
		got.max_send_wr = 0;
	if (ia->qp_type == IBV_QPT_UD && sr_ud_reorder_p > 0)
		qp->held = calloc(SR_UD_HOLD, sizeof *qp->held);
	uint32_t slot;
	if (!qp->sq || (ia->qp_type == IBV_QPT_UD && sr_ud_reorder_p > 0 && !qp->held) ||
	    sr_fabric_alloc_slot(c->fab, SR_SLOT_QP, &slot) < 0) {
		free(qp->held);
		free(qp->sq);
		free(qp);
		sr_memlock_uncharge(pages);
		errno = ENOMEM;
		return NULL;
	}
	struct sr_cq *scq = (struct sr_cq *)ia->send_cq;
	struct sr_cq *rcq = (struct sr_cq *)ia->recv_cq;
	struct sr_qp_shm *s = sr_fabric_qp(c->fab, slot);
	s->gen = (s->gen % 0xfffe) + 1; /* qpn 0xffffff is the multicast QPN */
	s->qpn = s->gen << SR_QP_SLOT_BITS | slot;
	s->pid = c->fab->pid;
	s->ctx_id = c->id;
	s->pd_id = ((struct sr_pd *)pd)->id;
	s->proc = c->fab->proc;
	atomic_store(&s->state, IBV_QPS_RESET);
	atomic_store(&s->dest_qpn, 0);
	atomic_store(&s->access, 0);
	atomic_store(&s->min_rnr_timer, 0);
	atomic_store(&s->epsn, 0);
	s->path_mtu = 0;
	s->max_dest_rd_atomic = 0;
	memset(s->av_dgid, 0, sizeof s->av_dgid);
	s->av_dlid = 0;
	s->av_sgid_index = 0;
	s->av_is_global = 0;
	s->qp_type = ia->qp_type;
	atomic_store(&s->qkey, 0);
	s->create_flags = create_flags;
	s->recv_cq = rcq->slot;
	s->recv_cq_id = rcq->shm->id;
	s->send_cq = scq->slot;
	s->send_cq_id = scq->shm->id;
	s->rq_max = got.max_recv_wr;
	s->rq_max_sge = got.max_recv_sge;
	uint32_t ring = pow2(got.max_recv_wr ? got.max_recv_wr : 1);
	s->rq_mask = ring - 1;
	atomic_store(&s->rq_tail, 0);
	atomic_store(&s->rq_head, 0);
	atomic_store(&s->rq_lock, 0);
	atomic_store_explicit(&s->in_use, 1, memory_order_release);

	qp->shm = s;
	qp->slot = slot;
	qp->ctx = c;
	qp->scq = scq;
	qp->rcq = rcq;
	qp->pd = (struct sr_pd *)pd;
	qp->sq_sig_all = ia->sq_sig_all;
	qp->send_ops = ops;
	qp->has_qpx = has_qpx;
	qp->cap = got;
	*cap = got;                     /* written back, as the man page says */
	qp->attr.qp_state = IBV_QPS_RESET;
	qp->attr.cap = got;
	pthread_mutex_init(&qp->sq_lock, NULL);
	pthread_mutex_init(&qp->rq_lock, NULL);
	qp->qp.context = pd->context;
	qp->qp.qp_context = ia->qp_context;
	qp->qp.pd = pd;
	qp->qp.send_cq = ia->send_cq;
	qp->qp.recv_cq = ia->recv_cq;
	qp->qp.handle = s->qpn;
	qp->qp.qp_num = s->qpn;
	qp->qp.state = IBV_QPS_RESET;
	qp->qp.qp_type = ia->qp_type;
	pthread_mutex_init(&qp->qp.mutex, NULL);
	pthread_cond_init(&qp->qp.cond, NULL);
	if (has_qpx)
		sr_qpex_init(qp);
	atomic_fetch_add(&scq->refs, 1);
	atomic_fetch_add(&rcq->refs, 1);
	atomic_fetch_add(&qp->pd->refs, 1);
	pthread_mutex_lock(&sr_registry_lock);
	atomic_store_explicit(&sr_local_qp[slot], qp, memory_order_release);
	pthread_mutex_unlock(&sr_registry_lock);
	sr_exec_register(qp);
	return &qp->qp;
}

SR_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd,
				       struct ibv_qp_init_attr *ia)
{
	SR_FAULT_RET("ibv_create_qp", NULL);
	return create_qp(pd, ia, 0, ia->qp_type == IBV_QPT_UD ? UD_OPS : RC_OPS, 0);
}
SR_DEFAULT_V11(ibv_create_qp);

/* The extended form, reached through verbs_context.create_qp_ex: the PD,
 * create_flags and send_ops_flags masks.  The only create flag is the one
 * that blocks a QP's own multicast coming back to it (mlx5's
 * IBV_QP_CREATE_BLOCK_SELF_MCAST_LB).  send_ops_flags sizes the WQE by the
 * ops named (and only those may be posted); the QP then has the ibv_wr_*
 * API (ibv_qp_to_qp_ex). */
struct ibv_qp *sr_create_qp_ex(struct ibv_context *ctx,
			       struct ibv_qp_init_attr_ex *ia)
{
	SR_FAULT_RET("ibv_create_qp", NULL);
	const uint32_t masks = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
			       IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	if ((ia->comp_mask & ~masks) || !(ia->comp_mask & IBV_QP_INIT_ATTR_PD) ||
	    !ia->pd || ia->pd->context != ctx) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	uint32_t flags = (ia->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS)
				 ? ia->create_flags : 0;
	if (flags & ~(uint32_t)IBV_QP_CREATE_BLOCK_SELF_MCAST_LB) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (flags && ia->qp_type != IBV_QPT_UD) {
		errno = EINVAL;
		return NULL;
	}
	uint64_t all = ia->qp_type == IBV_QPT_UD ? UD_OPS : RC_OPS;
	uint64_t ops = all;
	int has_qpx = 0;
	if (ia->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		ops = ia->send_ops_flags;
		if (ops & ~all) {
			errno = EOPNOTSUPP; /* atomics, TSO, SEND_WITH_INV, ... */
			return NULL;
		}
		if (!ops) {
			errno = EINVAL;
			return NULL;
		}
		has_qpx = 1;
	}
	struct ibv_qp_init_attr a = {
		.qp_context = ia->qp_context,
		.send_cq = ia->send_cq,
		.recv_cq = ia->recv_cq,
		.srq = ia->srq,
		.cap = ia->cap,
		.qp_type = ia->qp_type,
		.sq_sig_all = ia->sq_sig_all,
	};
	struct ibv_qp *qp = create_qp(ia->pd, &a, flags, ops, has_qpx);
	if (qp)
		ia->cap = a.cap;
	return qp;
}

SR_EXPORT int ibv_destroy_qp(struct ibv_qp *ibqp)
{
	SR_FAULT_RET("ibv_destroy_qp", errno);
	struct sr_qp *qp = (struct sr_qp *)ibqp;
	struct sr_fabric *f = qp->ctx->fab;
	/* Out of the engine and the registry first: nothing runs it after. */
	sr_exec_unregister(qp);
	pthread_mutex_lock(&sr_registry_lock);
	atomic_store(&sr_local_qp[qp->slot], NULL);
	pthread_mutex_unlock(&sr_registry_lock);
	sr_exec_lock();
	sr_ud_release_held(qp, 1); /* a held datagram arrives late, not never */
	atomic_store(&qp->shm->state, IBV_QPS_ERR); /* peers now time out */
	sr_exec_unlock();
	if (qp->qp.qp_type == IBV_QPT_UD && sr_fabric_lock(f) == 0) {
		sr_mcg_remove_qpn_locked(f, qp->qp.qp_num); /* as uverbs does */
		sr_fabric_unlock(f);
	}
	sr_fabric_free_slot(f, SR_SLOT_QP, qp->slot);
	sr_memlock_uncharge(qp->pages);
	atomic_fetch_sub(&qp->scq->refs, 1);
	atomic_fetch_sub(&qp->rcq->refs, 1);
	atomic_fetch_sub(&qp->pd->refs, 1);
	pthread_mutex_destroy(&qp->sq_lock);
	pthread_mutex_destroy(&qp->rq_lock);
	free(qp->held);
	free(qp->sq);
	free(qp);
	return 0;
}
SR_DEFAULT_V11(ibv_destroy_qp);

#define M(x) IBV_QP_##x

static int transition_ud(enum ibv_qp_state cur, enum ibv_qp_state next,
			 int *req, int *opt)
{
	switch (cur) {
	case IBV_QPS_RESET:
		if (next != IBV_QPS_INIT)
			return 0;
		*req = M(PKEY_INDEX) | M(PORT) | M(QKEY);
		return 1;
	case IBV_QPS_INIT:
		if (next == IBV_QPS_INIT) {
			*opt = M(PKEY_INDEX) | M(PORT) | M(QKEY);
			return 1;
		}
		if (next != IBV_QPS_RTR)
			return 0;
		*opt = M(PKEY_INDEX) | M(QKEY);
		return 1;
	case IBV_QPS_RTR:
		if (next != IBV_QPS_RTS)
			return 0;
		*req = M(SQ_PSN);
		*opt = M(CUR_STATE) | M(QKEY);
		return 1;
	case IBV_QPS_RTS:
		if (next != IBV_QPS_RTS)
			return 0;
		*opt = M(CUR_STATE) | M(QKEY);
		return 1;
	default:
		return 0;
	}
}

static int transition(enum ibv_qp_type type, enum ibv_qp_state cur,
		      enum ibv_qp_state next, int *req, int *opt)
{
	*req = *opt = 0;
	if (next == IBV_QPS_RESET || next == IBV_QPS_ERR)
		return 1;
	if (type == IBV_QPT_UD)
		return transition_ud(cur, next, req, opt);
	switch (cur) {
	case IBV_QPS_RESET:
		if (next != IBV_QPS_INIT)
			return 0;
		*req = M(PKEY_INDEX) | M(PORT) | M(ACCESS_FLAGS);
		return 1;
	case IBV_QPS_INIT:
		if (next == IBV_QPS_INIT) {
			*opt = M(PKEY_INDEX) | M(PORT) | M(ACCESS_FLAGS);
			return 1;
		}
		if (next != IBV_QPS_RTR)
			return 0;
		*req = M(AV) | M(PATH_MTU) | M(DEST_QPN) | M(RQ_PSN) |
		       M(MAX_DEST_RD_ATOMIC) | M(MIN_RNR_TIMER);
		*opt = M(ALT_PATH) | M(ACCESS_FLAGS) | M(PKEY_INDEX);
		return 1;
	case IBV_QPS_RTR:
		if (next != IBV_QPS_RTS)
			return 0;
		*req = M(SQ_PSN) | M(MAX_QP_RD_ATOMIC) | M(RETRY_CNT) |
		       M(RNR_RETRY) | M(TIMEOUT);
		*opt = M(CUR_STATE) | M(ALT_PATH) | M(ACCESS_FLAGS) |
		       M(MIN_RNR_TIMER) | M(PATH_MIG_STATE);
		return 1;
	case IBV_QPS_RTS:
		if (next != IBV_QPS_RTS)
			return 0;
		*opt = M(CUR_STATE) | M(ACCESS_FLAGS) | M(ALT_PATH) |
		       M(PATH_MIG_STATE) | M(MIN_RNR_TIMER);
		return 1;
	default:
		return 0;
	}
}


static int values_ok(struct sr_qp *qp, const struct ibv_qp_attr *a, int mask)
{
	const unsigned acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	if ((mask & M(ACCESS_FLAGS)) && (a->qp_access_flags & ~acc))
		return 0;
	if ((mask & M(PKEY_INDEX)) && a->pkey_index >= SR_PKEY_TBL_LEN)
		return 0;
	if ((mask & M(PORT)) && a->port_num != 1)
		return 0;
	if (mask & M(AV)) {
		const struct ibv_ah_attr *ah = &a->ah_attr;
		struct sr_port_shm *p = sr_port_self(qp->ctx->fab);
		int ib = p->link_layer == IBV_LINK_LAYER_INFINIBAND;
		if (ah->port_num != 1 || (!ib && !ah->is_global))
			return 0;
		if (ah->is_global) {
			struct sr_gid_entry e;
			if (sr_port_gid(p, ah->grh.sgid_index, &e) < 0 ||
			    e.type == SR_GID_EMPTY || sr_gid_is_mcast(ah->grh.dgid.raw))
				return 0;
		}
		if (ib && ah->dlid >= 0xc000)
			return 0; /* a multicast LID */
	}
	if ((mask & M(PATH_MTU)) &&
	    (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096))
		return 0;
	if ((mask & M(DEST_QPN)) && a->dest_qp_num > 0xffffff)
		return 0;
	if ((mask & M(MAX_DEST_RD_ATOMIC)) && a->max_dest_rd_atomic > SR_MAX_RD_ATOM)
		return 0;
	if ((mask & M(MAX_QP_RD_ATOMIC)) && a->max_rd_atomic > SR_MAX_RD_ATOM)
		return 0;
	if ((mask & M(MIN_RNR_TIMER)) && a->min_rnr_timer > 31)
		return 0;
	if ((mask & M(TIMEOUT)) && a->timeout > 31)
		return 0;
	if ((mask & M(RETRY_CNT)) && a->retry_cnt > 7)
		return 0;
	if ((mask & M(RNR_RETRY)) && a->rnr_retry > 7)
		return 0;
	return 1;
}

static void to_reset(struct sr_qp *qp)
{
	sr_exec_reset_locked(qp);
	if (qp->held) /* reset discards held datagrams, as it does the SQ */
		for (int i = 0; i < SR_UD_HOLD; i++)
			qp->held[i].used = 0;
	pthread_mutex_lock(&qp->rq_lock);
	sr_spin_lock(&qp->shm->rq_lock);
	atomic_store(&qp->shm->rq_head, 0);
	atomic_store(&qp->shm->rq_tail, 0);
	sr_spin_unlock(&qp->shm->rq_lock);
	pthread_mutex_unlock(&qp->rq_lock);
	atomic_store(&qp->shm->dest_qpn, 0);
	atomic_store(&qp->shm->access, 0);
	atomic_store(&qp->shm->min_rnr_timer, 0);
	atomic_store(&qp->shm->qkey, 0);
	atomic_store(&qp->shm->epsn, 0);
	struct ibv_qp_cap cap = qp->attr.cap;
	memset(&qp->attr, 0, sizeof qp->attr);
	qp->attr.cap = cap;
}

static int modify_locked(struct sr_qp *qp, struct ibv_qp_attr *a, int mask)
{
	struct sr_qp_shm *s = qp->shm;
	enum ibv_qp_state cur = atomic_load(&s->state);
	if ((mask & M(CUR_STATE)) && a->cur_qp_state != cur)
		return EINVAL;
	enum ibv_qp_state next = (mask & M(STATE)) ? a->qp_state : cur;
	int req, opt;
	if (!transition(qp->qp.qp_type, cur, next, &req, &opt) || (mask & req) != req ||
	    (mask & ~(req | opt | M(STATE))) || !values_ok(qp, a, mask))
		return EINVAL;
	if ((mask & M(QKEY)) && (a->qkey & 0x80000000u) && !sr_has_cap(CAP_NET_RAW))
		return EPERM; /* a controlled Q_Key */

	if (next == IBV_QPS_RESET) {
		to_reset(qp);
	} else {
		if (mask & M(ACCESS_FLAGS)) {
			qp->attr.qp_access_flags = a->qp_access_flags;
			atomic_store(&s->access, a->qp_access_flags);
		}
		if (mask & M(PKEY_INDEX))
			qp->attr.pkey_index = a->pkey_index;
		if (mask & M(QKEY)) {
			qp->attr.qkey = a->qkey;
			atomic_store(&s->qkey, a->qkey);
		}
		if (mask & M(PORT))
			qp->attr.port_num = a->port_num;
		if (mask & M(AV)) {
			qp->attr.ah_attr = a->ah_attr;
			memcpy(s->av_dgid, a->ah_attr.grh.dgid.raw, 16);
			s->av_dlid = a->ah_attr.dlid;
			s->av_sgid_index = a->ah_attr.grh.sgid_index;
			s->av_is_global = a->ah_attr.is_global;
		}
		if (mask & M(PATH_MTU)) {
			qp->attr.path_mtu = a->path_mtu;
			s->path_mtu = a->path_mtu;
		}
		if (mask & M(RQ_PSN)) {
			qp->attr.rq_psn = a->rq_psn & SR_PSN_MASK;
			atomic_store(&s->epsn, qp->attr.rq_psn);
		}
		if (mask & M(SQ_PSN)) {
			qp->attr.sq_psn = a->sq_psn & SR_PSN_MASK;
			qp->next_psn = qp->attr.sq_psn;
		}
		if (mask & M(MAX_DEST_RD_ATOMIC)) {
			qp->attr.max_dest_rd_atomic = a->max_dest_rd_atomic;
			s->max_dest_rd_atomic = a->max_dest_rd_atomic;
		}
		if (mask & M(MAX_QP_RD_ATOMIC))
			qp->attr.max_rd_atomic = a->max_rd_atomic;
		if (mask & M(MIN_RNR_TIMER)) {
			qp->attr.min_rnr_timer = a->min_rnr_timer;
			atomic_store(&s->min_rnr_timer, a->min_rnr_timer);
		}
		if (mask & M(TIMEOUT))
			qp->attr.timeout = a->timeout;
		if (mask & M(RETRY_CNT))
			qp->attr.retry_cnt = a->retry_cnt;
		if (mask & M(RNR_RETRY))
			qp->attr.rnr_retry = a->rnr_retry;
		if (mask & M(PATH_MIG_STATE))
			qp->attr.path_mig_state = a->path_mig_state;
		if (mask & M(DEST_QPN)) {
			qp->attr.dest_qp_num = a->dest_qp_num;
			atomic_store(&s->dest_qpn, a->dest_qp_num);
		}
	}
	qp->attr.qp_state = next;
	qp->qp.state = next;
	/* Published last: a peer that sees RTR also sees the rest (release). */
	atomic_store_explicit(&s->state, next, memory_order_release);
	if (next == IBV_QPS_ERR && cur != IBV_QPS_ERR) {
		sr_exec_flush_locked(qp);
		sr_rq_flush(qp->ctx->fab, s);
	}
	return 0;
}

SR_EXPORT int ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *a,
			    int mask)
{
	SR_FAULT_RET("ibv_modify_qp", errno);
	struct sr_qp *qp = (struct sr_qp *)ibqp;
	/* The engine does not run while the QP changes. */
	sr_exec_lock();
	int e = modify_locked(qp, a, mask);
	sr_exec_unlock();
	if (e)
		errno = e;
	return e;
}
SR_DEFAULT_V11(ibv_modify_qp);

#undef M

SR_EXPORT int ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr,
			   int attr_mask, struct ibv_qp_init_attr *init_attr)
{
	(void)attr_mask; /* like most providers, fill everything */
	SR_FAULT_RET("ibv_query_qp", errno);
	struct sr_qp *qp = (struct sr_qp *)ibqp;
	enum ibv_qp_state st = atomic_load(&qp->shm->state);
	*attr = qp->attr;
	attr->qp_state = st;
	attr->cur_qp_state = st;
	attr->cap = qp->cap;
	ibqp->state = st;
	if (init_attr) {
		memset(init_attr, 0, sizeof *init_attr);
		init_attr->qp_context = ibqp->qp_context;
		init_attr->send_cq = ibqp->send_cq;
		init_attr->recv_cq = ibqp->recv_cq;
		init_attr->cap = qp->cap;
		init_attr->qp_type = ibqp->qp_type;
		init_attr->sq_sig_all = qp->sq_sig_all;
	}
	return 0;
}
SR_DEFAULT_V11(ibv_query_qp);

/* Only QPs made by ibv_create_qp_ex with send_ops_flags carry the extended
 * send API (as rdma-core's verbs_qp). */
SR_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *ibqp)
{
	struct sr_qp *qp = (struct sr_qp *)ibqp;
	return qp->has_qpx ? &qp->qpx : NULL;
}

SR_EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp,
					 enum ibv_wr_opcode op, uint32_t flags)
{
	(void)qp; (void)op; (void)flags;
	return 0; /* data may not land in order before the completion */
}

SR_EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp; (void)ece;
	return EOPNOTSUPP;
}

SR_EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp; (void)ece;
	return EOPNOTSUPP;
}
