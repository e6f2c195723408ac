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
 * implemented) fails with EINVAL and leaves the QP unchanged.  As on a RoCE
 * port, the address vector must carry a GRH (is_global) with a valid
 * sgid_index.  Alternate paths are accepted and ignored.
 *
 * Going to ERR flushes every outstanding send and posted receive with
 * IBV_WC_WR_FLUSH_ERR; going to RESET discards them without completions.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "softrdma.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static struct ibv_qp *create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia,
				uint32_t create_flags)
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
	if (!ia->send_cq || !ia->recv_cq ||
	    ia->send_cq->context != pd->context ||
	    ia->recv_cq->context != pd->context ||
	    cap->max_send_wr > SR_MAX_QP_WR || cap->max_recv_wr > SR_MAX_QP_WR ||
	    cap->max_send_sge > SR_MAX_SGE || cap->max_recv_sge > SR_MAX_SGE ||
	    cap->max_inline_data > SR_MAX_INLINE) {
		errno = EINVAL;
		return NULL;
	}
	struct sr_qp *qp = calloc(1, sizeof *qp);
	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	qp->sq_stride = (sizeof(struct sr_swqe) + cap->max_inline_data + 7) & ~7ul;
	qp->sq = calloc(cap->max_send_wr ? cap->max_send_wr : 1, qp->sq_stride);
	if (ia->qp_type == IBV_QPT_UD && sr_ud_reorder_p > 0)
		qp->held = calloc(SR_UD_HOLD, sizeof *qp->held);
	uint32_t slot;
	if (!qp->sq || (ia->qp_type == IBV_QPT_UD && sr_ud_reorder_p > 0 && !qp->held) ||
	    sr_fabric_alloc_slot(c->fab, SR_SLOT_QP, &slot) < 0) {
		free(qp->held);
		free(qp->sq);
		free(qp);
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
	atomic_store(&s->state, IBV_QPS_RESET);
	atomic_store(&s->dest_qpn, 0);
	atomic_store(&s->access, 0);
	atomic_store(&s->min_rnr_timer, 0);
	s->qp_type = ia->qp_type;
	atomic_store(&s->qkey, 0);
	s->create_flags = create_flags;
	s->recv_cq = rcq->slot;
	s->recv_cq_id = rcq->shm->id;
	s->rq_max = cap->max_recv_wr;
	s->rq_max_sge = cap->max_recv_sge;
	uint32_t ring = 1;
	while (ring < cap->max_recv_wr)
		ring <<= 1;
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
	qp->cap = *cap;
	qp->attr.qp_state = IBV_QPS_RESET;
	qp->attr.cap = *cap;
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
	atomic_fetch_add(&scq->refs, 1);
	atomic_fetch_add(&rcq->refs, 1);
	atomic_fetch_add(&qp->pd->refs, 1);
	pthread_mutex_lock(&sr_registry_lock);
	atomic_store_explicit(&sr_local_qp[slot], qp, memory_order_release);
	pthread_mutex_unlock(&sr_registry_lock);
	return &qp->qp;
}

SR_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd,
				       struct ibv_qp_init_attr *ia)
{
	SR_FAULT_RET("ibv_create_qp", NULL);
	return create_qp(pd, ia, 0);
}
SR_DEFAULT_V11(ibv_create_qp);

/* The extended form, reached through verbs_context.create_qp_ex: only the
 * PD and create_flags masks, and only the flag that blocks a QP's own
 * multicast coming back to it (what mlx5 offers as
 * IBV_QP_CREATE_BLOCK_SELF_MCAST_LB). */
struct ibv_qp *sr_create_qp_ex(struct ibv_context *ctx,
			       struct ibv_qp_init_attr_ex *ia)
{
	SR_FAULT_RET("ibv_create_qp", NULL);
	const uint32_t masks = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
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
	struct ibv_qp_init_attr a = {
		.qp_context = ia->qp_context,
		.send_cq = ia->send_cq,
		.recv_cq = ia->recv_cq,
		.srq = ia->srq,
		.cap = ia->cap,
		.qp_type = ia->qp_type,
		.sq_sig_all = ia->sq_sig_all,
	};
	struct ibv_qp *qp = create_qp(ia->pd, &a, flags);
	if (qp)
		ia->cap = a.cap;
	return qp;
}

SR_EXPORT int ibv_destroy_qp(struct ibv_qp *ibqp)
{
	SR_FAULT_RET("ibv_destroy_qp", errno);
	struct sr_qp *qp = (struct sr_qp *)ibqp;
	struct sr_fabric *f = qp->ctx->fab;
	/* Out of the registry first: the progress thread and poll_cq stop
	 * seeing it. */
	pthread_mutex_lock(&sr_registry_lock);
	atomic_store(&sr_local_qp[qp->slot], NULL);
	pthread_mutex_unlock(&sr_registry_lock);
	pthread_mutex_lock(&qp->sq_lock);
	sr_ud_release_held(qp, 1); /* a held datagram arrives late, not never */
	atomic_store(&qp->shm->state, IBV_QPS_ERR); /* peers now time out */
	pthread_mutex_unlock(&qp->sq_lock);
	if (qp->qp.qp_type == IBV_QPT_UD && sr_fabric_lock(f) == 0) {
		sr_mcg_remove_qpn_locked(f, qp->qp.qp_num); /* as uverbs does */
		sr_fabric_unlock(f);
	}
	sr_fabric_free_slot(f, SR_SLOT_QP, qp->slot);
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

static int values_ok(const struct ibv_qp_attr *a, int mask)
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
		if (ah->port_num != 1 || !ah->is_global ||
		    ah->grh.sgid_index >= SR_GID_TBL_LEN)
			return 0;
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
	pthread_mutex_lock(&qp->sq_lock);
	qp->sq_post = qp->sq_exec = 0;
	atomic_store(&qp->sq_free, 0);
	atomic_store(&qp->stuck, 0);
	qp->rnr_tries = qp->retry_tries = 0;
	if (qp->held) /* reset discards held datagrams, as it does the SQ */
		for (int i = 0; i < SR_UD_HOLD; i++)
			qp->held[i].used = 0;
	pthread_mutex_unlock(&qp->sq_lock);
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
	struct ibv_qp_cap cap = qp->attr.cap;
	memset(&qp->attr, 0, sizeof qp->attr);
	qp->attr.cap = cap;
}

SR_EXPORT int ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *a,
			    int mask)
{
	SR_FAULT_RET("ibv_modify_qp", errno);
	struct sr_qp *qp = (struct sr_qp *)ibqp;
	struct sr_qp_shm *s = qp->shm;
	enum ibv_qp_state cur = atomic_load(&s->state);
	if ((mask & M(CUR_STATE)) && a->cur_qp_state != cur)
		return errno = EINVAL;
	enum ibv_qp_state next = (mask & M(STATE)) ? a->qp_state : cur;
	int req, opt;
	if (!transition(qp->qp.qp_type, cur, next, &req, &opt) || (mask & req) != req ||
	    (mask & ~(req | opt | M(STATE))) || !values_ok(a, mask))
		return errno = EINVAL;

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
		if (mask & M(AV))
			qp->attr.ah_attr = a->ah_attr;
		if (mask & M(PATH_MTU))
			qp->attr.path_mtu = a->path_mtu;
		if (mask & M(RQ_PSN))
			qp->attr.rq_psn = a->rq_psn & 0xffffff;
		if (mask & M(SQ_PSN))
			qp->attr.sq_psn = a->sq_psn & 0xffffff;
		if (mask & M(MAX_DEST_RD_ATOMIC))
			qp->attr.max_dest_rd_atomic = a->max_dest_rd_atomic;
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
	/* Published last: a peer that sees RTR also sees dest_qpn (release). */
	atomic_store_explicit(&s->state, next, memory_order_release);
	if (next == IBV_QPS_ERR && cur != IBV_QPS_ERR) {
		pthread_mutex_lock(&qp->sq_lock);
		sr_sq_flush_locked(qp);
		pthread_mutex_unlock(&qp->sq_lock);
		sr_rq_flush(qp->ctx->fab, s);
	}
	return 0;
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

/* Only QPs made by ibv_create_qp_ex carry the extended send API. */
SR_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	(void)qp;
	return NULL;
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
