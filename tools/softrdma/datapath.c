/*
 * The data path: ibv_post_send, ibv_post_recv, and the requester engine that
 * executes send work requests.
 *
 * A send WQE is executed by its own requester, inside ibv_post_send, under
 * the QP's send lock (process-local; other processes never take it).  The
 * engine does what the two NICs of a connection would do, in this order:
 *
 *   1. resolve the peer QP from dest_qp_num: it must exist, be in RTR or RTS
 *      and be connected back to us, else the "packet" is lost and the
 *      requester retries on its transport timer (retry_cnt, timeout), then
 *      completes with IBV_WC_RETRY_EXC_ERR.  A peer process that died is
 *      seen the same way (process_vm_writev fails with ESRCH);
 *   2. check the local sges against the MR table (lkey, PD, bounds; local
 *      write for READ): IBV_WC_LOC_PROT_ERR;
 *   3. check the rkey (key, PD of the responder, bounds, REMOTE_WRITE or
 *      REMOTE_READ): IBV_WC_REM_ACCESS_ERR, and the responder QP's own
 *      access flags: IBV_WC_REM_INV_REQ_ERR.  Both also put the responder
 *      QP in ERR and raise IBV_EVENT_QP_ACCESS_ERR / IBV_EVENT_QP_REQ_ERR in
 *      the responder's process, as the IB spec has a responder do;
 *   4. for SEND and WRITE-with-immediate, take a posted receive at the
 *      responder; none posted is receiver-not-ready: wait the responder's
 *      min_rnr_timer and retry, rnr_retry times (7 = forever), then
 *      IBV_WC_RNR_RETRY_EXC_ERR.  A receive too short is IBV_WC_LOC_LEN_ERR
 *      at the responder and IBV_WC_REM_INV_REQ_ERR here; a bad receive lkey
 *      is IBV_WC_LOC_PROT_ERR there and IBV_WC_REM_OP_ERR here;
 *   5. move the bytes (process_vm_writev / readv, memcpy within a process),
 *      complete the receive at the responder, complete the send here if it
 *      was signalled.
 * Any error completion is generated whether or not the WQE was signalled,
 * moves the requester QP to ERR and flushes everything behind it.
 *
 * A WQE that must wait stays at the head of the send queue; later WQEs
 * wait behind it, in order.  The progress thread (started on first need)
 * retries it when its timer expires.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "softrdma.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define SR_STALL (-1)

static inline struct sr_swqe *sq_at(struct sr_qp *qp, uint32_t pos)
{
	return (struct sr_swqe *)(qp->sq +
				  (size_t)(pos % qp->cap.max_send_wr) * qp->sq_stride);
}

static inline uint8_t *wqe_inline(struct sr_swqe *w)
{
	return (uint8_t *)(w + 1);
}

/* IB spec table of RNR NAK timer codes, in microseconds (code 0 = 655.36 ms). */
static const uint32_t rnr_timer_us[32] = {
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960,
	1280, 1920, 2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720,
	40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
};

/* ---- receive queue ---- */

/* Consumer side; any process.  A3 pairs with R3 in sr_post_recv. */
static int rq_pop(struct sr_qp_shm *q, struct sr_rqe *out)
{
	sr_spin_lock(&q->rq_lock);
	uint64_t h = atomic_load_explicit(&q->rq_head, memory_order_relaxed);
	uint64_t t = atomic_load_explicit(&q->rq_tail, memory_order_acquire);
	int got = h != t;
	if (got) {
		*out = q->rqe[h & q->rq_mask];
		/* R4: the producer may reuse the slot (A4 in sr_post_recv) */
		atomic_store_explicit(&q->rq_head, h + 1, memory_order_release);
	}
	sr_spin_unlock(&q->rq_lock);
	return got;
}

static struct sr_cq_shm *recv_cq_of(struct sr_fabric *f, struct sr_qp_shm *q)
{
	struct sr_cq_shm *cq = sr_fabric_cq(f, q->recv_cq);
	return cq->id == q->recv_cq_id ? cq : NULL;
}

void sr_rq_flush(struct sr_fabric *f, struct sr_qp_shm *q)
{
	struct sr_cq_shm *cq = recv_cq_of(f, q);
	sr_spin_lock(&q->rq_lock);
	uint64_t h = atomic_load_explicit(&q->rq_head, memory_order_relaxed);
	uint64_t t = atomic_load_explicit(&q->rq_tail, memory_order_acquire);
	for (; h != t; h++) {
		struct sr_cqe e = {
			.wr_id = q->rqe[h & q->rq_mask].wr_id,
			.status = IBV_WC_WR_FLUSH_ERR,
			.opcode = IBV_WC_RECV,
			.qp_num = q->qpn,
		};
		if (cq)
			sr_cq_push(f, cq, &e);
	}
	atomic_store_explicit(&q->rq_head, h, memory_order_release);
	sr_spin_unlock(&q->rq_lock);
}

void sr_qp_set_error(struct sr_fabric *f, struct sr_qp_shm *q)
{
	uint32_t st = atomic_exchange(&q->state, IBV_QPS_ERR);
	if (st != IBV_QPS_ERR && st != IBV_QPS_RESET)
		sr_rq_flush(f, q);
}

/* Hot path when the QP is in INIT/RTR/RTS: one short process-local lock, no
 * system call. */
int sr_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
		 struct ibv_recv_wr **bad)
{
	if (SR_UNLIKELY(sr_fault_active)) {
		int e = sr_fault_hit("ibv_post_recv");
		if (e) {
			*bad = wr;
			return e;
		}
	}
	struct sr_qp *qp = (struct sr_qp *)ibqp;
	struct sr_qp_shm *q = qp->shm;
	int ret = 0;
	pthread_mutex_lock(&qp->rq_lock);
	if (SR_UNLIKELY(atomic_load(&q->state) == IBV_QPS_RESET)) {
		*bad = wr;
		ret = EINVAL;
		goto out;
	}
	uint64_t t = atomic_load_explicit(&q->rq_tail, memory_order_relaxed);
	for (; wr; wr = wr->next) {
		if (SR_UNLIKELY(wr->num_sge < 0 ||
				(uint32_t)wr->num_sge > q->rq_max_sge)) {
			*bad = wr;
			ret = EINVAL;
			break;
		}
		/* A4 pairs with R4 in rq_pop */
		uint64_t h = atomic_load_explicit(&q->rq_head, memory_order_acquire);
		if (SR_UNLIKELY(t - h >= q->rq_max)) {
			*bad = wr;
			ret = ENOMEM;
			break;
		}
		struct sr_rqe *e = &q->rqe[t & q->rq_mask];
		e->wr_id = wr->wr_id;
		e->num_sge = (uint32_t)wr->num_sge;
		for (int i = 0; i < wr->num_sge; i++) {
			e->sge[i].addr = wr->sg_list[i].addr;
			e->sge[i].length = wr->sg_list[i].length;
			e->sge[i].lkey = wr->sg_list[i].lkey;
		}
		t++;
		atomic_store_explicit(&q->rq_tail, t, memory_order_release); /* R3 */
	}
	/* Posted in ERR (or raced with an error): flush at once. */
	if (SR_UNLIKELY(atomic_load(&q->state) == IBV_QPS_ERR))
		sr_rq_flush(qp->ctx->fab, q);
out:
	pthread_mutex_unlock(&qp->rq_lock);
	return ret;
}

/* ---- memory checks and copies ---- */

/* Translates [addr, addr+len) of key into the owner's address; NULL when the
 * key, owner, PD, access or bounds do not allow it. */
static void *mr_translate(struct sr_fabric *f, uint32_t key, pid_t pid,
			  uint32_t pd_id, unsigned need, uint64_t addr,
			  uint64_t len)
{
	uint32_t slot = key >> 8;
	if (SR_UNLIKELY(slot >= SR_MAX_MRS))
		return NULL;
	struct sr_mr_shm *m = sr_fabric_mr(f, slot);
	if (SR_UNLIKELY(atomic_load_explicit(&m->key, memory_order_acquire) != key))
		return NULL;
	if (SR_UNLIKELY(m->pid != pid || m->pd_id != pd_id ||
			(m->access & need) != need))
		return NULL;
	if (SR_UNLIKELY(addr < m->iova || len > m->length ||
			addr - m->iova > m->length - len))
		return NULL;
	return (void *)(uintptr_t)(m->addr + (addr - m->iova));
}

/* Returns 0, -ESRCH (target gone) or -EFAULT. */
static int xfer(pid_t self, pid_t pid, int to_peer, struct iovec *l, int ln,
		struct iovec *r, int rn, size_t len)
{
	if (pid == self) {
		/* Same process: a plain copy across the two iovec lists. */
		struct iovec *src = to_peer ? l : r, *dst = to_peer ? r : l;
		int sn = to_peer ? ln : rn, dn = to_peer ? rn : ln;
		int si = 0, di = 0;
		size_t so = 0, dof = 0;
		while (len && si < sn && di < dn) {
			size_t n = src[si].iov_len - so;
			if (dst[di].iov_len - dof < n)
				n = dst[di].iov_len - dof;
			if (n > len)
				n = len;
			memmove((uint8_t *)dst[di].iov_base + dof,
				(uint8_t *)src[si].iov_base + so, n);
			so += n; dof += n; len -= n;
			if (so == src[si].iov_len) { si++; so = 0; }
			if (dof == dst[di].iov_len) { di++; dof = 0; }
		}
		return 0;
	}
	if (len == 0)
		return kill(pid, 0) < 0 && errno == ESRCH ? -ESRCH : 0;
	ssize_t n = to_peer ? process_vm_writev(pid, l, (unsigned long)ln, r,
						(unsigned long)rn, 0)
			    : process_vm_readv(pid, l, (unsigned long)ln, r,
					       (unsigned long)rn, 0);
	if (n < 0)
		return errno == ESRCH ? -ESRCH : -EFAULT;
	return (size_t)n == len ? 0 : -EFAULT;
}

/* ---- the requester engine ---- */

static void complete(struct sr_qp *qp, struct sr_swqe *w, uint32_t pos,
		     enum ibv_wc_status st)
{
	static const uint8_t wc_op[] = {
		[IBV_WR_RDMA_WRITE] = IBV_WC_RDMA_WRITE,
		[IBV_WR_RDMA_WRITE_WITH_IMM] = IBV_WC_RDMA_WRITE,
		[IBV_WR_SEND] = IBV_WC_SEND,
		[IBV_WR_SEND_WITH_IMM] = IBV_WC_SEND,
		[IBV_WR_RDMA_READ] = IBV_WC_RDMA_READ,
	};
	if (st == IBV_WC_SUCCESS && !(w->flags & IBV_SEND_SIGNALED))
		return;
	struct sr_cqe e = {
		.wr_id = w->wr_id,
		.status = st,
		.opcode = wc_op[w->opcode],
		.byte_len = w->opcode == IBV_WR_RDMA_READ ? w->length : 0,
		.qp_num = qp->qp.qp_num,
		.sq_index = pos,
		.flags = SR_CQE_SQ,
	};
	if (st == IBV_WC_SUCCESS)
		e.byte_len = w->length;
	sr_cq_push(qp->ctx->fab, qp->scq->shm, &e);
}

void sr_sq_flush_locked(struct sr_qp *qp)
{
	for (; qp->sq_exec != qp->sq_post; qp->sq_exec++)
		complete(qp, sq_at(qp, qp->sq_exec), qp->sq_exec,
			 IBV_WC_WR_FLUSH_ERR);
	atomic_store(&qp->stuck, 0);
}

/* Retry bookkeeping for the head WQE: SR_STALL, or the error to finish with. */
static int stall_rnr(struct sr_qp *qp, uint32_t timer)
{
	if (qp->attr.rnr_retry != 7 && qp->rnr_tries >= qp->attr.rnr_retry)
		return IBV_WC_RNR_RETRY_EXC_ERR;
	qp->rnr_tries++;
	qp->next_try_ns = sr_now_ns() + (uint64_t)rnr_timer_us[timer & 31] * 1000;
	return SR_STALL;
}

static int stall_transport(struct sr_qp *qp)
{
	uint64_t wait;
	if (qp->attr.timeout == 0) {
		wait = 1000000; /* infinite timeout: keep trying, never fail */
	} else {
		if (qp->retry_tries >= qp->attr.retry_cnt)
			return IBV_WC_RETRY_EXC_ERR;
		qp->retry_tries++;
		wait = 4096ull << qp->attr.timeout; /* 4.096 us * 2^timeout */
	}
	qp->next_try_ns = sr_now_ns() + wait;
	return SR_STALL;
}

/* The responder reports an error: its completion (if a receive was taken),
 * its QP to ERR, its async event. */
static void responder_error(struct sr_fabric *f, struct sr_qp_shm *peer,
			    const struct sr_rqe *rqe, enum ibv_wc_status st,
			    enum ibv_event_type ev, uint32_t src_qp)
{
	if (rqe) {
		struct sr_cq_shm *cq = recv_cq_of(f, peer);
		struct sr_cqe e = {.wr_id = rqe->wr_id, .status = st,
				   .opcode = IBV_WC_RECV, .qp_num = peer->qpn,
				   .src_qp = src_qp};
		if (cq)
			sr_cq_push(f, cq, &e);
	}
	sr_qp_set_error(f, peer);
	if ((int)ev >= 0)
		sr_async_post(f, peer->pid, peer->ctx_id, ev, SR_SLOT_QP,
			      peer->qpn & (SR_MAX_QPS - 1), peer->qpn);
}

/* The WQE's local buffers as iovecs in this process; -1 on a bad lkey. */
static int local_iov(struct sr_qp *qp, struct sr_swqe *w, struct iovec *liov,
		     int *ln)
{
	struct sr_fabric *f = qp->ctx->fab;
	*ln = 0;
	if (w->flags & IBV_SEND_INLINE) {
		liov[0].iov_base = wqe_inline(w);
		liov[0].iov_len = w->length;
		*ln = 1;
		return 0;
	}
	unsigned need = w->opcode == IBV_WR_RDMA_READ ? IBV_ACCESS_LOCAL_WRITE : 0;
	for (uint32_t i = 0; i < w->num_sge; i++) {
		void *p = mr_translate(f, w->sge[i].lkey, f->pid, qp->pd->id, need,
				       w->sge[i].addr, w->sge[i].length);
		if (SR_UNLIKELY(!p))
			return -1;
		liov[*ln].iov_base = p;
		liov[(*ln)++].iov_len = w->sge[i].length;
	}
	return 0;
}

/* For ud.c: the receive side of a datagram, with the same checks a SEND
 * gets.  Returns 1 delivered, 0 dropped (no receive, peer gone), or -1 when
 * the receive completed in error (the peer QP is now in ERR). */
int sr_ud_put(struct sr_qp *qp, struct sr_qp_shm *peer, struct iovec *liov,
	      int ln, uint32_t len, uint32_t imm, int has_imm, int solicited)
{
	struct sr_fabric *f = qp->ctx->fab;
	struct sr_rqe rqe;
	if (!rq_pop(peer, &rqe))
		return 0;
	struct iovec riov[SR_MAX_SGE];
	int rn = 0;
	uint64_t room = 0;
	for (uint32_t i = 0; i < rqe.num_sge; i++) {
		void *p = mr_translate(f, rqe.sge[i].lkey, peer->pid, peer->pd_id,
				       IBV_ACCESS_LOCAL_WRITE, rqe.sge[i].addr,
				       rqe.sge[i].length);
		if (SR_UNLIKELY(!p)) {
			responder_error(f, peer, &rqe, IBV_WC_LOC_PROT_ERR, -1,
					qp->qp.qp_num);
			return -1;
		}
		riov[rn].iov_base = p;
		riov[rn++].iov_len = rqe.sge[i].length;
		room += rqe.sge[i].length;
	}
	if (SR_UNLIKELY(room < len)) {
		responder_error(f, peer, &rqe, IBV_WC_LOC_LEN_ERR, -1, qp->qp.qp_num);
		return -1;
	}
	if (xfer(f->pid, peer->pid, 1, liov, ln, riov, rn, len) < 0)
		return 0; /* the receiver's process went away: lost */
	struct sr_cq_shm *cq = recv_cq_of(f, peer);
	struct sr_cqe e = {
		.wr_id = rqe.wr_id,
		.status = IBV_WC_SUCCESS,
		.opcode = IBV_WC_RECV,
		.byte_len = len,
		.imm_data = has_imm ? imm : 0,
		.qp_num = peer->qpn,
		.src_qp = qp->qp.qp_num,
		.wc_flags = IBV_WC_GRH | (has_imm ? IBV_WC_WITH_IMM : 0),
		.flags = solicited ? SR_CQE_SOLICITED : 0,
	};
	if (cq)
		sr_cq_push(f, cq, &e);
	return 1;
}

/* Executes one WQE: an ibv_wc_status, or SR_STALL. */
static int execute(struct sr_qp *qp, struct sr_swqe *w)
{
	struct sr_fabric *f = qp->ctx->fab;
	if (SR_UNLIKELY(sr_fault_delay_ns))
		sr_fault_delay();
	if (qp->qp.qp_type == IBV_QPT_UD) {
		struct iovec liov[SR_MAX_SGE + 1];
		int ln;
		if (SR_UNLIKELY(local_iov(qp, w, liov + 1, &ln) < 0))
			return IBV_WC_LOC_PROT_ERR;
		return sr_ud_execute(qp, w, liov, ln + 1);
	}

	/* 1. the peer, connected back to us */
	uint32_t dq = qp->attr.dest_qp_num;
	struct sr_qp_shm *peer = sr_fabric_qp(f, dq & (SR_MAX_QPS - 1));
	uint32_t ps = atomic_load_explicit(&peer->state, memory_order_acquire);
	if (SR_UNLIKELY(atomic_load(&peer->in_use) != 1 || peer->qpn != dq ||
			(ps != IBV_QPS_RTR && ps != IBV_QPS_RTS) ||
			atomic_load(&peer->dest_qpn) != qp->qp.qp_num))
		return stall_transport(qp);

	/* 2. local buffers */
	struct iovec liov[SR_MAX_SGE];
	int ln;
	if (SR_UNLIKELY(local_iov(qp, w, liov, &ln) < 0))
		return IBV_WC_LOC_PROT_ERR;

	/* 3. remote memory for RDMA */
	struct iovec riov[SR_MAX_SGE];
	int rn = 0;
	int rdma = w->opcode == IBV_WR_RDMA_WRITE ||
		   w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
		   w->opcode == IBV_WR_RDMA_READ;
	if (rdma) {
		unsigned need = w->opcode == IBV_WR_RDMA_READ ? IBV_ACCESS_REMOTE_READ
							      : IBV_ACCESS_REMOTE_WRITE;
		if (SR_UNLIKELY(!(atomic_load(&peer->access) & need))) {
			responder_error(f, peer, NULL, 0, IBV_EVENT_QP_REQ_ERR,
					qp->qp.qp_num);
			return IBV_WC_REM_INV_REQ_ERR;
		}
		void *p = mr_translate(f, w->rkey, peer->pid, peer->pd_id, need,
				       w->remote_addr, w->length);
		if (SR_UNLIKELY(!p)) {
			responder_error(f, peer, NULL, 0, IBV_EVENT_QP_ACCESS_ERR,
					qp->qp.qp_num);
			return IBV_WC_REM_ACCESS_ERR;
		}
		riov[0].iov_base = p;
		riov[0].iov_len = w->length;
		rn = 1;
	}

	/* 4. a receive at the responder */
	struct sr_rqe rqe;
	int takes_recv = w->opcode == IBV_WR_SEND ||
			 w->opcode == IBV_WR_SEND_WITH_IMM ||
			 w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
	if (takes_recv) {
		if (!rq_pop(peer, &rqe))
			return stall_rnr(qp, atomic_load(&peer->min_rnr_timer));
		if (!rdma) {
			uint64_t room = 0;
			for (uint32_t i = 0; i < rqe.num_sge; i++) {
				void *p = mr_translate(f, rqe.sge[i].lkey, peer->pid,
						       peer->pd_id,
						       IBV_ACCESS_LOCAL_WRITE,
						       rqe.sge[i].addr,
						       rqe.sge[i].length);
				if (SR_UNLIKELY(!p)) {
					responder_error(f, peer, &rqe,
							IBV_WC_LOC_PROT_ERR, -1,
							qp->qp.qp_num);
					return IBV_WC_REM_OP_ERR;
				}
				riov[rn].iov_base = p;
				riov[rn++].iov_len = rqe.sge[i].length;
				room += rqe.sge[i].length;
			}
			if (SR_UNLIKELY(room < w->length)) {
				responder_error(f, peer, &rqe, IBV_WC_LOC_LEN_ERR,
						-1, qp->qp.qp_num);
				return IBV_WC_REM_INV_REQ_ERR;
			}
		}
	}

	/* 5. the bytes */
	int r = xfer(f->pid, peer->pid, w->opcode != IBV_WR_RDMA_READ, liov, ln, riov,
		     rn, w->length);
	if (SR_UNLIKELY(r == -ESRCH))
		return stall_transport(qp);
	if (SR_UNLIKELY(r < 0))
		return w->opcode == IBV_WR_RDMA_READ ? IBV_WC_LOC_PROT_ERR
						     : IBV_WC_REM_ACCESS_ERR;
	if (takes_recv) {
		struct sr_cq_shm *cq = recv_cq_of(f, peer);
		int imm = w->opcode != IBV_WR_SEND;
		struct sr_cqe e = {
			.wr_id = rqe.wr_id,
			.status = IBV_WC_SUCCESS,
			.opcode = w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM
					  ? IBV_WC_RECV_RDMA_WITH_IMM
					  : IBV_WC_RECV,
			.byte_len = w->length,
			.imm_data = imm ? w->imm_data : 0,
			.qp_num = peer->qpn,
			.src_qp = qp->qp.qp_num,
			.wc_flags = imm ? IBV_WC_WITH_IMM : 0,
			.flags = (w->flags & IBV_SEND_SOLICITED) ? SR_CQE_SOLICITED : 0,
		};
		if (cq)
			sr_cq_push(f, cq, &e);
	}
	return IBV_WC_SUCCESS;
}

void sr_sq_progress_locked(struct sr_qp *qp)
{
	while (qp->sq_exec != qp->sq_post) {
		if (SR_UNLIKELY(atomic_load_explicit(&qp->shm->state,
						     memory_order_relaxed) ==
				IBV_QPS_ERR)) {
			sr_sq_flush_locked(qp);
			return;
		}
		if (SR_UNLIKELY(atomic_load_explicit(&qp->stuck,
						     memory_order_relaxed)) &&
		    sr_now_ns() < qp->next_try_ns)
			return;
		uint32_t pos = qp->sq_exec;
		struct sr_swqe *w = sq_at(qp, pos);
		int st = execute(qp, w);
		if (st == SR_STALL) {
			if (!atomic_exchange(&qp->stuck, 1))
				sr_progress_kick();
			return;
		}
		atomic_store_explicit(&qp->stuck, 0, memory_order_relaxed);
		qp->rnr_tries = qp->retry_tries = 0;
		qp->sq_exec++;
		complete(qp, w, pos, st);
		if (SR_UNLIKELY(st != IBV_WC_SUCCESS)) {
			sr_qp_set_error(qp->ctx->fab, qp->shm);
			sr_sq_flush_locked(qp);
			return;
		}
	}
}

/* Hot path: one process-local lock; one process_vm_writev per WQE when the
 * peer is another process; a datagram only when the peer armed its CQ. */
int sr_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
		 struct ibv_send_wr **bad)
{
	if (SR_UNLIKELY(sr_fault_active)) {
		int e = sr_fault_hit("ibv_post_send");
		if (e) {
			*bad = wr;
			return e;
		}
	}
	struct sr_qp *qp = (struct sr_qp *)ibqp;
	int ret = 0;
	pthread_mutex_lock(&qp->sq_lock);
	uint32_t st = atomic_load_explicit(&qp->shm->state, memory_order_relaxed);
	if (SR_UNLIKELY(st != IBV_QPS_RTS && st != IBV_QPS_ERR)) {
		*bad = wr;
		ret = EINVAL;
		goto out;
	}
	for (; wr; wr = wr->next) {
		int inl = (wr->send_flags & IBV_SEND_INLINE) != 0;
		uint64_t len = 0;
		for (int i = 0; i < wr->num_sge && i < SR_MAX_SGE; i++)
			len += wr->sg_list[i].length;
		int ud = qp->qp.qp_type == IBV_QPT_UD;
		if (SR_UNLIKELY(ud && ((wr->opcode != IBV_WR_SEND &&
					wr->opcode != IBV_WR_SEND_WITH_IMM) ||
				       !wr->wr.ud.ah ||
				       wr->wr.ud.ah->pd != qp->qp.pd))) {
			*bad = wr;
			ret = EINVAL;
			break;
		}
		if (SR_UNLIKELY(wr->opcode > IBV_WR_RDMA_READ || wr->num_sge < 0 ||
				(uint32_t)wr->num_sge > qp->cap.max_send_sge ||
				(inl && (wr->opcode == IBV_WR_RDMA_READ ||
					 len > qp->cap.max_inline_data)) ||
				len > SR_MAX_MSG)) {
			*bad = wr;
			ret = EINVAL;
			break;
		}
		if (SR_UNLIKELY(qp->sq_post -
					atomic_load_explicit(&qp->sq_free,
							     memory_order_acquire) >=
				qp->cap.max_send_wr)) {
			*bad = wr;
			ret = ENOMEM;
			break;
		}
		struct sr_swqe *w = sq_at(qp, qp->sq_post);
		w->wr_id = wr->wr_id;
		w->opcode = wr->opcode;
		w->flags = wr->send_flags;
		if (qp->sq_sig_all)
			w->flags |= IBV_SEND_SIGNALED;
		w->imm_data = wr->imm_data;
		w->num_sge = (uint32_t)wr->num_sge;
		if (ud) {
			w->ah = wr->wr.ud.ah;
			w->remote_qpn = wr->wr.ud.remote_qpn;
			w->remote_qkey = wr->wr.ud.remote_qkey;
		} else {
			w->remote_addr = wr->wr.rdma.remote_addr;
			w->rkey = wr->wr.rdma.rkey;
		}
		w->length = (uint32_t)len;
		if (inl) {
			/* Inline data is copied now; the buffer is free on
			 * return and its lkey is not looked at. */
			uint8_t *d = wqe_inline(w);
			for (int i = 0; i < wr->num_sge; i++) {
				memcpy(d, (void *)(uintptr_t)wr->sg_list[i].addr,
				       wr->sg_list[i].length);
				d += wr->sg_list[i].length;
			}
		} else {
			for (int i = 0; i < wr->num_sge; i++)
				w->sge[i] = wr->sg_list[i];
		}
		qp->sq_post++;
	}
	sr_sq_progress_locked(qp);
	if (SR_UNLIKELY(qp->held != NULL))
		sr_ud_release_held(qp, 0);
out:
	pthread_mutex_unlock(&qp->sq_lock);
	return ret;
}

/* ---- the progress thread: retries WQEs waiting on RNR or transport timers ---- */

static pthread_mutex_t prog_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t prog_cond;
static int prog_running, prog_kicked;

static void *progress_main(void *arg)
{
	(void)arg;
	for (;;) {
		uint64_t now = sr_now_ns(), next = now + 1000000000ull;
		pthread_mutex_lock(&sr_registry_lock);
		for (int i = 0; i < SR_MAX_QPS; i++) {
			struct sr_qp *qp = atomic_load(&sr_local_qp[i]);
			if (!qp || !atomic_load(&qp->stuck))
				continue;
			if (pthread_mutex_trylock(&qp->sq_lock) == 0) {
				sr_sq_progress_locked(qp);
				if (atomic_load(&qp->stuck) && qp->next_try_ns < next)
					next = qp->next_try_ns;
				pthread_mutex_unlock(&qp->sq_lock);
			} else if (now + 100000 < next) {
				next = now + 100000; /* busy: look again soon */
			}
		}
		pthread_mutex_unlock(&sr_registry_lock);

		pthread_mutex_lock(&prog_lock);
		if (!prog_kicked) {
			struct timespec ts = {(time_t)(next / 1000000000ull),
					      (long)(next % 1000000000ull)};
			pthread_cond_timedwait(&prog_cond, &prog_lock, &ts);
		}
		prog_kicked = 0;
		pthread_mutex_unlock(&prog_lock);
	}
	return NULL;
}

void sr_progress_kick(void)
{
	pthread_mutex_lock(&prog_lock);
	if (!prog_running) {
		pthread_condattr_t ca;
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&prog_cond, &ca);
		pthread_condattr_destroy(&ca);
		pthread_attr_t a;
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		/* The thread must not take signals meant for the application. */
		sigset_t all, old;
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		pthread_t t;
		if (pthread_create(&t, &a, progress_main, NULL) == 0)
			prog_running = 1;
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		pthread_attr_destroy(&a);
	}
	prog_kicked = 1;
	if (prog_running)
		pthread_cond_signal(&prog_cond);
	pthread_mutex_unlock(&prog_lock);
}

void sr_progress_atfork_child(void)
{
	pthread_mutex_init(&prog_lock, NULL);
	prog_running = 0;
	prog_kicked = 0;
}
