/*
 * The data path: ibv_post_send, ibv_post_recv, and the send engine that
 * executes send work requests, asynchronously, as a NIC does.
 *
 * Posting.  ibv_post_send validates each work request (opcode, sges,
 * inline size, the QP's state and send ops), copies it into the QP's send
 * queue (inline data is copied now, as a NIC copies it into the WQE; every
 * other buffer is only referenced), publishes it and rings the engine's
 * doorbell.  A work request does not run before ibv_post_send has
 * returned it to the engine: a buffer that is changed after posting and
 * before the work request runs is sent as it is then, and a send queue has
 * a backlog.
 *
 * The engine.  One per process, under sr_exec_lock: a progress thread
 * (started on the first post, all signals blocked, on the CPUs of the
 * process at load rather than the poster's core) runs it, and so does
 * ibv_poll_cq when the engine has work (software providers progress on
 * poll), and so does a poster whose queue is more than half unsent, for
 * what was posted before (sr_sq_help: a NIC keeps up with its queue).
 * Each pass goes over this process's QPs; for each it first completes, in
 * send-queue order, what has finished, then issues the next work
 * requests, each as the two NICs of a connection would handle it:
 *
 *   1. local buffers: lkeys, PD, bounds (local write for READ):
 *      IBV_WC_LOC_PROT_ERR.  Binds and local invalidates run here (mr.c);
 *   2. the path: the peer QP must exist, be in RTR or RTS and be connected
 *      back to us; both ports up; the request's address must reach the
 *      peer's port (RoCE: its dgid must be one of the peer port's GIDs, of
 *      the type of our source GID; InfiniBand: its dlid must be the peer
 *      port's LID); a packet larger than the active MTU of either port is
 *      dropped on the wire.  Anything else is a lost packet: the requester
 *      retries every 4.096 us * 2^timeout, retry_cnt times, then completes
 *      with IBV_WC_RETRY_EXC_ERR.  SOFTRDMA_RC_DROP loses request and
 *      acknowledgement packets the same way;
 *   3. the PSN: a request carries the requester's PSN (sq_psn at RTS,
 *      advanced by one per packet); the responder expects its own (rq_psn
 *      at RTR).  Ahead of it: a sequence-error NAK, retried and counted
 *      against retry_cnt.  Behind it (in the 2^23 window): a duplicate,
 *      acknowledged without being executed (a duplicate READ is answered
 *      again), as a responder does for retransmissions;
 *   4. the packet length rule: a message longer than the requester's path
 *      MTU goes as first/middle packets of exactly that MTU and a last one;
 *      the responder requires first and middle packets of exactly its own
 *      path MTU and no packet longer: a mismatch is NAKed as an invalid
 *      request (IBV_WC_REM_INV_REQ_ERR, responder QP to ERR).  READ
 *      responses are held to the same rule by the requester
 *      (IBV_WC_BAD_RESP_ERR);
 *   5. the responder: its QP's access flags (IBV_WC_REM_INV_REQ_ERR), the
 *      rkey (MR or window: key, PD, QP for a type 2 window, bounds, access:
 *      IBV_WC_REM_ACCESS_ERR), both putting the responder QP in ERR with
 *      IBV_EVENT_QP_REQ_ERR / IBV_EVENT_QP_ACCESS_ERR; READs in flight
 *      beyond its max_dest_rd_atomic: IBV_WC_REM_INV_REQ_ERR; a posted
 *      receive for SEND and WRITE-with-immediate, none being
 *      receiver-not-ready (retried after the responder's min_rnr_timer,
 *      rnr_retry times, 7 = forever, then IBV_WC_RNR_RETRY_EXC_ERR), too
 *      short IBV_WC_LOC_LEN_ERR there / IBV_WC_REM_INV_REQ_ERR here, bad
 *      lkey IBV_WC_LOC_PROT_ERR there / IBV_WC_REM_OP_ERR here;
 *   6. the bytes move (process_vm_writev / readv, memcpy within a process),
 *      read from the source when the request runs; the responder's
 *      completion is pushed; the acknowledgement must find its way back by
 *      the responder's own address vector (else it is lost: the requester
 *      retries, and its retransmission is a duplicate).
 *
 * An RDMA READ is in flight from its issue until the next pass, where its
 * response arrives and its data lands: at most max_rd_atomic of them at once (0 counts as 1,
 * as on mlx5), later work requests wait behind, and a work request with
 * IBV_SEND_FENCE waits for every READ before it.  Completions come in
 * send-queue order.  Any error completion is generated whether or not the
 * WQE was signalled, moves the QP to ERR and flushes everything behind it.
 * SOFTRDMA_DELAY_NS (+ _JITTER_NS) paces the engine: each work request of
 * a QP runs no earlier than that long after it was posted and after the
 * previous one ran.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "softrdma.h"

#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define SR_STALL (-1)           /* wait (timer), then try again */
#define SR_PENDING (-2)         /* a READ whose response is on its way */
#define SR_RNR (-3)             /* internal: no receive at the responder */
#define SR_LOST (-4)            /* internal: a response packet was lost */

struct sr_swqe *sr_sq_at(struct sr_qp *qp, uint32_t pos)
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

/* One receive at a time, never holding the ring's lock across a push: a
 * push that overruns the CQ puts QPs (maybe this one) in error and flushes
 * them from inside (cq.c). */
void sr_rq_flush(struct sr_fabric *f, struct sr_qp_shm *q)
{
	struct sr_cq_shm *cq = recv_cq_of(f, q);
	struct sr_rqe r;
	while (rq_pop(q, &r)) {
		struct sr_cqe e = {
			.wr_id = r.wr_id,
			.status = IBV_WC_WR_FLUSH_ERR,
			.opcode = IBV_WC_RECV,
			.qp_num = q->qpn,
		};
		if (cq)
			sr_cq_push(f, cq, &e);
	}
}

void sr_qp_set_error(struct sr_fabric *f, struct sr_qp_shm *q)
{
	uint32_t st = atomic_exchange(&q->state, IBV_QPS_ERR);
	if (st != IBV_QPS_ERR && st != IBV_QPS_RESET)
		sr_rq_flush(f, q);
}

/* A QP that can no longer complete (its CQ overran): ERR, and its owner
 * hears IBV_EVENT_QP_FATAL. */
void sr_qp_fatal(struct sr_fabric *f, struct sr_qp_shm *q)
{
	uint32_t st = atomic_exchange(&q->state, IBV_QPS_ERR);
	if (st == IBV_QPS_ERR || st == IBV_QPS_RESET)
		return;
	sr_rq_flush(f, q);
	sr_async_post(f, q->pid, q->ctx_id, IBV_EVENT_QP_FATAL, SR_SLOT_QP,
		      q->qpn & (SR_MAX_QPS - 1), q->qpn);
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

/* ---- the engine: completions ---- */

static void complete(struct sr_qp *qp, struct sr_swqe *w, uint32_t pos,
		     enum ibv_wc_status st)
{
	static const uint8_t wc_op[] = {
		[IBV_WR_RDMA_WRITE] = IBV_WC_RDMA_WRITE,
		[IBV_WR_RDMA_WRITE_WITH_IMM] = IBV_WC_RDMA_WRITE,
		[IBV_WR_SEND] = IBV_WC_SEND,
		[IBV_WR_SEND_WITH_IMM] = IBV_WC_SEND,
		[IBV_WR_RDMA_READ] = IBV_WC_RDMA_READ,
		[IBV_WR_LOCAL_INV] = IBV_WC_LOCAL_INV,
		[IBV_WR_BIND_MW] = IBV_WC_BIND_MW,
		[IBV_WR_SEND_WITH_INV] = IBV_WC_SEND,
	};
	if (st == IBV_WC_SUCCESS && !(w->flags & IBV_SEND_SIGNALED))
		return;
	struct sr_cqe e = {
		.wr_id = w->wr_id,
		.status = st,
		.opcode = w->opcode < sizeof wc_op ? wc_op[w->opcode] : 0,
		.byte_len = w->opcode == IBV_WR_RDMA_READ ? w->length : 0,
		.qp_num = qp->qp.qp_num,
		.sq_index = pos,
		.flags = SR_CQE_SQ,
	};
	sr_cq_push(qp->ctx->fab, qp->scq->shm, &e);
}

/* Everything not completed yet completes with IBV_WC_WR_FLUSH_ERR. */
void sr_exec_flush_locked(struct sr_qp *qp)
{
	uint32_t post = atomic_load_explicit(&qp->sq_post, memory_order_acquire); /* A5 */
	for (; qp->sq_done != post; qp->sq_done++)
		complete(qp, sr_sq_at(qp, qp->sq_done), qp->sq_done,
			 IBV_WC_WR_FLUSH_ERR);
	qp->sq_issue = qp->sq_done;
	atomic_store_explicit(&qp->sq_issued, qp->sq_issue, memory_order_relaxed);
	qp->reads_out = 0;
	qp->err_pending = 0;
	qp->stuck = 0;
	qp->doom = 0;
	qp->rnr_tries = qp->retry_tries = 0;
}

void sr_exec_reset_locked(struct sr_qp *qp)
{
	pthread_mutex_lock(&qp->sq_lock);
	atomic_store(&qp->sq_post, 0);
	atomic_store(&qp->sq_free, 0);
	qp->sq_issue = qp->sq_done = 0;
	atomic_store(&qp->sq_issued, 0);
	qp->reads_out = 0;
	qp->err_pending = 0;
	qp->stuck = 0;
	qp->doom = 0;
	qp->rnr_tries = qp->retry_tries = 0;
	qp->next_psn = 0;
	qp->last_exec_ns = 0;
	pthread_mutex_unlock(&qp->sq_lock);
}

static uint64_t exec_pass; /* passes of the engine; READ responses land on the next */

static int local_iov(struct sr_qp *qp, struct sr_swqe *w, struct iovec *liov,
		     int *ln);

/* A READ's response arrives: its data lands in the local buffers (read
 * from the responder now, as it sends the response). */
static uint32_t read_land(struct sr_qp *qp, struct sr_swqe *w)
{
	struct sr_fabric *f = qp->ctx->fab;
	struct iovec liov[SR_MAX_SGE], riov;
	int ln;
	if (local_iov(qp, w, liov, &ln) < 0)
		return IBV_WC_LOC_PROT_ERR;
	struct sr_qp_shm *peer = sr_fabric_qp(f, qp->attr.dest_qp_num & (SR_MAX_QPS - 1));
	if (atomic_load(&peer->in_use) != 1 || peer->qpn != qp->attr.dest_qp_num)
		return IBV_WC_RETRY_EXC_ERR; /* gone before it answered */
	riov.iov_base = sr_mr_translate(f, w->rkey, peer->pid, peer->pd_id,
					IBV_ACCESS_REMOTE_READ, w->remote_addr,
					w->length, peer->qpn);
	riov.iov_len = w->length;
	if (!riov.iov_base)
		return IBV_WC_REM_ACCESS_ERR;
	int r = xfer(f->pid, peer->pid, 0, liov, ln, &riov, 1, w->length);
	if (r == -ESRCH)
		return IBV_WC_RETRY_EXC_ERR;
	return r < 0 ? IBV_WC_LOC_PROT_ERR : IBV_WC_SUCCESS;
}

/* Completes, in order, what has finished.  0, or -1 when the QP went to
 * ERR (an error completion). */
static int complete_due(struct sr_qp *qp)
{
	while (qp->sq_done != qp->sq_issue) {
		struct sr_swqe *w = sr_sq_at(qp, qp->sq_done);
		if (w->xstate == SR_X_READ) {
			if (exec_pass < w->due_pass)
				return 0;
			qp->reads_out--;
			w->status = read_land(qp, w);
			w->xstate = SR_X_DONE;
		}
		uint32_t pos = qp->sq_done++;
		complete(qp, w, pos, w->status);
		if (SR_UNLIKELY(w->status != IBV_WC_SUCCESS)) {
			sr_qp_set_error(qp->ctx->fab, qp->shm);
			sr_exec_flush_locked(qp);
			return -1;
		}
	}
	return 0;
}

/* ---- the engine: retry timers ---- */

static int stall_rnr(struct sr_qp *qp, uint32_t timer)
{
	if (qp->attr.rnr_retry != 7 && qp->rnr_tries >= qp->attr.rnr_retry)
		return IBV_WC_RNR_RETRY_EXC_ERR;
	qp->rnr_tries++;
	qp->next_try_ns = sr_now_ns() + (uint64_t)rnr_timer_us[timer & 31] * 1000;
	return SR_STALL;
}

/* A lost packet: wait for the ACK timeout and retry, retry_cnt times; the
 * last retry's timeout ends in IBV_WC_RETRY_EXC_ERR. */
static int stall_transport(struct sr_qp *qp)
{
	uint64_t wait;
	if (qp->attr.timeout == 0) {
		wait = 1000000; /* infinite timeout: keep trying, never fail */
	} else {
		if (qp->retry_tries >= qp->attr.retry_cnt)
			qp->doom = IBV_WC_RETRY_EXC_ERR;
		qp->retry_tries++;
		wait = 4096ull << qp->attr.timeout; /* 4.096 us * 2^timeout */
	}
	qp->next_try_ns = sr_now_ns() + wait;
	return SR_STALL;
}

/* A sequence-error NAK: retransmit at once, counted against retry_cnt. */
static int stall_nak(struct sr_qp *qp)
{
	if (qp->retry_tries >= qp->attr.retry_cnt)
		return IBV_WC_RETRY_EXC_ERR;
	qp->retry_tries++;
	qp->next_try_ns = sr_now_ns();
	return SR_STALL;
}

/* ---- the engine: one work request ---- */

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
		void *p = sr_mr_translate(f, w->sge[i].lkey, f->pid, qp->pd->id,
					  need, w->sge[i].addr, w->sge[i].length, 0);
		if (SR_UNLIKELY(!p))
			return -1;
		liov[*ln].iov_base = p;
		liov[(*ln)++].iov_len = w->sge[i].length;
	}
	return 0;
}

static int port_up(struct sr_port_shm *p)
{
	return atomic_load_explicit(&p->state, memory_order_relaxed) == IBV_PORT_ACTIVE;
}

/* Does a packet addressed by (sgid_index, dgid / dlid) from port `from`
 * reach port `to`? */
static int reaches(struct sr_port_shm *from, struct sr_port_shm *to,
		   int is_global, uint8_t sgid_index, const uint8_t *dgid,
		   uint16_t dlid)
{
	if (!port_up(from) || !port_up(to) || from->link_layer != to->link_layer)
		return 0;
	if (to->link_layer == IBV_LINK_LAYER_INFINIBAND) {
		if (dlid != to->lid)
			return 0;
		return !is_global || sr_port_has_gid(to, dgid, IBV_GID_TYPE_IB + 1);
	}
	struct sr_gid_entry s;
	sr_port_gid(from, sgid_index, &s);
	return s.type != SR_GID_EMPTY && sr_port_has_gid(to, dgid, s.type);
}

static int route_fwd(struct sr_fabric *f, struct sr_qp *qp, struct sr_qp_shm *peer)
{
	const struct ibv_ah_attr *av = &qp->attr.ah_attr;
	return reaches(sr_port_self(f), sr_port_of(f, peer->proc), av->is_global,
		       av->grh.sgid_index, av->grh.dgid.raw, av->dlid);
}

static int route_ret(struct sr_fabric *f, struct sr_qp_shm *peer)
{
	return reaches(sr_port_of(f, peer->proc), sr_port_self(f), peer->av_is_global,
		       peer->av_sgid_index, peer->av_dgid, peer->av_dlid);
}

static inline uint32_t min_u32(uint32_t a, uint32_t b)
{
	return a < b ? a : b;
}

static inline uint32_t npkts(uint32_t len, uint32_t mtu)
{
	return len ? (len + mtu - 1) / mtu : 1;
}

/* What the responder does with a request whose PSN it expected (or a
 * duplicate READ): a status, SR_PENDING (READ answered), SR_RNR or
 * SR_LOST. */
static int respond(struct sr_qp *qp, struct sr_swqe *w, struct sr_qp_shm *peer,
		   struct iovec *liov, int ln, uint32_t wire, int dup)
{
	struct sr_fabric *f = qp->ctx->fab;
	uint32_t me = qp->qp.qp_num;
	int is_read = w->opcode == IBV_WR_RDMA_READ;
	int rdma = is_read || w->opcode == IBV_WR_RDMA_WRITE ||
		   w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
	int takes_recv = w->opcode == IBV_WR_SEND ||
			 w->opcode == IBV_WR_SEND_WITH_IMM ||
			 w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
	uint32_t req_mtu = sr_mtu_bytes(qp->attr.path_mtu);
	uint32_t resp_mtu = sr_mtu_bytes(peer->path_mtu);

	/* the packet length rule, at the responder */
	if (!is_read && (w->length > req_mtu ? req_mtu != resp_mtu
					     : w->length > resp_mtu)) {
		responder_error(f, peer, NULL, 0, IBV_EVENT_QP_REQ_ERR, me);
		return IBV_WC_REM_INV_REQ_ERR;
	}
	struct iovec riov[SR_MAX_SGE];
	int rn = 0;
	if (rdma) {
		unsigned need = is_read ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
		if (SR_UNLIKELY(!(atomic_load(&peer->access) & need))) {
			responder_error(f, peer, NULL, 0, IBV_EVENT_QP_REQ_ERR, me);
			return IBV_WC_REM_INV_REQ_ERR;
		}
		if (is_read && !dup && qp->reads_out >= peer->max_dest_rd_atomic) {
			/* more READs in flight than it has resources for */
			responder_error(f, peer, NULL, 0, IBV_EVENT_QP_REQ_ERR, me);
			return IBV_WC_REM_INV_REQ_ERR;
		}
		void *p = sr_mr_translate(f, w->rkey, peer->pid, peer->pd_id, need,
					  w->remote_addr, w->length, peer->qpn);
		if (SR_UNLIKELY(!p)) {
			responder_error(f, peer, NULL, 0, IBV_EVENT_QP_ACCESS_ERR, me);
			return IBV_WC_REM_ACCESS_ERR;
		}
		riov[0].iov_base = p;
		riov[0].iov_len = w->length;
		rn = 1;
	}
	struct sr_rqe rqe;
	if (takes_recv) {
		if (!rq_pop(peer, &rqe))
			return SR_RNR;
		if (!rdma) {
			uint64_t room = 0;
			for (uint32_t i = 0; i < rqe.num_sge; i++) {
				void *p = sr_mr_translate(f, rqe.sge[i].lkey, peer->pid,
							  peer->pd_id,
							  IBV_ACCESS_LOCAL_WRITE,
							  rqe.sge[i].addr,
							  rqe.sge[i].length, 0);
				if (SR_UNLIKELY(!p)) {
					responder_error(f, peer, &rqe,
							IBV_WC_LOC_PROT_ERR, -1, me);
					return IBV_WC_REM_OP_ERR;
				}
				riov[rn].iov_base = p;
				riov[rn++].iov_len = rqe.sge[i].length;
				room += rqe.sge[i].length;
			}
			if (SR_UNLIKELY(room < w->length)) {
				responder_error(f, peer, &rqe, IBV_WC_LOC_LEN_ERR,
						-1, me);
				return IBV_WC_REM_INV_REQ_ERR;
			}
		}
	}
	if (is_read) {
		/* the response packets: on the wire, then at the requester */
		if (min_u32(w->length, resp_mtu) > wire)
			return SR_LOST;
		if (w->length > resp_mtu ? resp_mtu != req_mtu : w->length > req_mtu)
			return IBV_WC_BAD_RESP_ERR;
	}
	/* A READ's data lands with its response, on the next pass (read_land). */
	int r = is_read ? 0 : xfer(f->pid, peer->pid, 1, liov, ln, riov, rn, w->length);
	if (SR_UNLIKELY(r == -ESRCH))
		return SR_LOST;
	if (SR_UNLIKELY(r < 0))
		return IBV_WC_REM_ACCESS_ERR;
	if (!dup) {
		uint32_t e = atomic_load_explicit(&peer->epsn, memory_order_relaxed);
		atomic_store_explicit(&peer->epsn,
				      (e + npkts(w->length, is_read ? resp_mtu : req_mtu)) &
					      SR_PSN_MASK,
				      memory_order_relaxed);
	}
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
			.src_qp = me,
			.wc_flags = imm ? IBV_WC_WITH_IMM : 0,
			.flags = (w->flags & IBV_SEND_SOLICITED) ? SR_CQE_SOLICITED : 0,
			.slid = sr_port_self(f)->link_layer == IBV_LINK_LAYER_INFINIBAND
					? sr_port_self(f)->lid : 0,
		};
		if (cq)
			sr_cq_push(f, cq, &e);
	}
	return is_read ? SR_PENDING : IBV_WC_SUCCESS;
}

/* For ud.c: the receive side of a datagram, with the same checks a SEND
 * gets.  Returns 1 delivered, 0 dropped (no receive, peer gone), or -1 when
 * the receive completed in error (the peer QP is now in ERR). */
int sr_ud_put(struct sr_qp *qp, struct sr_qp_shm *peer, struct iovec *liov,
	      int ln, uint32_t len, uint32_t imm, int has_imm, int solicited,
	      int grh)
{
	struct sr_fabric *f = qp->ctx->fab;
	struct sr_rqe rqe;
	if (!rq_pop(peer, &rqe))
		return 0;
	struct iovec riov[SR_MAX_SGE];
	int rn = 0;
	uint64_t room = 0;
	for (uint32_t i = 0; i < rqe.num_sge; i++) {
		void *p = sr_mr_translate(f, rqe.sge[i].lkey, peer->pid, peer->pd_id,
					  IBV_ACCESS_LOCAL_WRITE, rqe.sge[i].addr,
					  rqe.sge[i].length, 0);
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
	struct sr_port_shm *me = sr_port_self(f);
	struct sr_cq_shm *cq = recv_cq_of(f, peer);
	struct sr_cqe e = {
		.wr_id = rqe.wr_id,
		.status = IBV_WC_SUCCESS,
		.opcode = IBV_WC_RECV,
		.byte_len = len,
		.imm_data = has_imm ? imm : 0,
		.qp_num = peer->qpn,
		.src_qp = qp->qp.qp_num,
		.wc_flags = (grh ? IBV_WC_GRH : 0) | (has_imm ? IBV_WC_WITH_IMM : 0),
		.flags = solicited ? SR_CQE_SOLICITED : 0,
		.slid = me->link_layer == IBV_LINK_LAYER_INFINIBAND ? me->lid : 0,
	};
	if (cq)
		sr_cq_push(f, cq, &e);
	return 1;
}

static int lost(void)
{
	return SR_UNLIKELY(sr_rc_drop_p > 0) && sr_rc_rand() < sr_rc_drop_p;
}

/* Issues one RC WQE: an ibv_wc_status, SR_PENDING or SR_STALL. */
static int issue_rc(struct sr_qp *qp, struct sr_swqe *w)
{
	struct sr_fabric *f = qp->ctx->fab;
	if (w->opcode == IBV_WR_BIND_MW)
		return sr_mw_execute_bind(qp, w);
	if (w->opcode == IBV_WR_LOCAL_INV)
		return sr_mw_execute_inv(qp, w->imm_data);

	struct iovec liov[SR_MAX_SGE];
	int ln;
	if (SR_UNLIKELY(local_iov(qp, w, liov, &ln) < 0))
		return IBV_WC_LOC_PROT_ERR;

	uint32_t dq = qp->attr.dest_qp_num;
	struct sr_qp_shm *peer = sr_fabric_qp(f, dq & (SR_MAX_QPS - 1));
	uint32_t ps = atomic_load_explicit(&peer->state, memory_order_acquire);
	if (SR_UNLIKELY(atomic_load(&peer->in_use) != 1 || peer->qpn != dq ||
			(ps != IBV_QPS_RTR && ps != IBV_QPS_RTS) ||
			atomic_load(&peer->dest_qpn) != qp->qp.qp_num ||
			!route_fwd(f, qp, peer)))
		return stall_transport(qp);
	int is_read = w->opcode == IBV_WR_RDMA_READ;
	uint32_t req_mtu = sr_mtu_bytes(qp->attr.path_mtu);
	uint32_t wire = min_u32(sr_mtu_bytes(sr_port_self(f)->active_mtu),
				sr_mtu_bytes(sr_port_of(f, peer->proc)->active_mtu));
	if ((!is_read && min_u32(w->length, req_mtu) > wire) || lost())
		return stall_transport(qp); /* the request never arrives */

	if (!w->psn_set) {
		w->psn = qp->next_psn;
		w->psn_set = 1;
		qp->next_psn = (qp->next_psn + npkts(w->length, req_mtu)) & SR_PSN_MASK;
	}
	uint32_t d = (atomic_load_explicit(&peer->epsn, memory_order_relaxed) -
		      w->psn) & SR_PSN_MASK;
	int dup = d != 0 && d <= 0x800000;
	int st;
	if (d != 0 && !dup) {
		st = IBV_WC_RETRY_EXC_ERR; /* ahead: a sequence-error NAK */
		if (!route_ret(f, peer))
			return stall_transport(qp);
		return stall_nak(qp);
	}
	if (dup && !is_read)
		st = IBV_WC_SUCCESS; /* acknowledged again, not executed */
	else
		st = respond(qp, w, peer, liov, ln, wire, dup);
	if (!route_ret(f, peer) || st == SR_LOST || lost())
		return stall_transport(qp); /* the answer never arrives */
	if (st == SR_RNR)
		return stall_rnr(qp, atomic_load(&peer->min_rnr_timer));
	return st;
}

static int issue(struct sr_qp *qp, struct sr_swqe *w)
{
	if (qp->qp.qp_type == IBV_QPT_UD) {
		struct iovec liov[SR_MAX_SGE + 1];
		int ln;
		if (SR_UNLIKELY(local_iov(qp, w, liov + 1, &ln) < 0))
			return IBV_WC_LOC_PROT_ERR;
		return sr_ud_execute(qp, w, liov, ln + 1);
	}
	return issue_rc(qp, w);
}

/* Runs one QP: completes, issues, completes.  Returns its next deadline
 * (0: none); *busy when it can make progress on the next pass. */
static uint64_t run_qp(struct sr_qp *qp, uint64_t now, int *busy)
{
	uint32_t st = atomic_load_explicit(&qp->shm->state, memory_order_acquire);
	uint64_t deadline = 0;
	if (SR_UNLIKELY(st == IBV_QPS_ERR)) {
		sr_exec_flush_locked(qp);
		return 0;
	}
	if (st != IBV_QPS_RTS)
		return 0;
	if (complete_due(qp) < 0)
		return 0;
	uint32_t post = atomic_load_explicit(&qp->sq_post, memory_order_acquire); /* A5 */
	if (SR_UNLIKELY(qp->helping) && post - qp->sq_issue > qp->help_cap - qp->sq_issue)
		post = qp->help_cap;
	while (qp->sq_issue != post && !qp->err_pending) {
		struct sr_swqe *w = sr_sq_at(qp, qp->sq_issue);
		if (SR_UNLIKELY(sr_fault_delay_ns)) {
			if (!w->ready_ns)
				w->ready_ns = (w->post_ns > qp->last_exec_ns
						       ? w->post_ns : qp->last_exec_ns) +
					      sr_fault_delay();
			if (now < w->ready_ns) {
				deadline = w->ready_ns;
				break;
			}
		}
		if (qp->stuck && now < qp->next_try_ns) {
			deadline = qp->next_try_ns;
			break;
		}
		if (qp->reads_out &&
		    ((w->flags & IBV_SEND_FENCE) ||
		     (w->opcode == IBV_WR_RDMA_READ &&
		      qp->reads_out >= (qp->attr.max_rd_atomic ? qp->attr.max_rd_atomic : 1)))) {
			*busy = 1; /* a READ response lands on the next pass */
			break;
		}
		int doom = qp->doom;
		qp->doom = 0;
		int r = SR_UNLIKELY(doom) ? doom : issue(qp, w);
		if (r == SR_STALL) {
			qp->stuck = 1;
			deadline = qp->next_try_ns;
			break;
		}
		qp->stuck = 0;
		qp->rnr_tries = qp->retry_tries = 0;
		qp->last_exec_ns = sr_fault_delay_ns ? w->ready_ns : 0;
		qp->sq_issue++;
		if (r == SR_PENDING) {
			w->xstate = SR_X_READ;
			w->due_pass = exec_pass + 1;
			qp->reads_out++;
			*busy = 1;
		} else {
			w->xstate = SR_X_DONE;
			w->status = (uint32_t)r;
			if (r != IBV_WC_SUCCESS)
				qp->err_pending = 1;
		}
	}
	atomic_store_explicit(&qp->sq_issued, qp->sq_issue, memory_order_relaxed);
	if (complete_due(qp) < 0)
		return 0;
	if (qp->sq_done != qp->sq_issue)
		*busy = 1;
	return deadline;
}

/* ---- the engine: passes, the progress thread, the doorbell ---- */

static pthread_mutex_t exec_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct sr_qp *exec_list[SR_MAX_QPS];
static int exec_n;
_Atomic int sr_exec_work;
static _Atomic uint32_t doorbell;
static _Atomic int prog_sleeping;
static pthread_mutex_t prog_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int prog_running;
/* The CPUs the process could run on when the library was loaded, before
 * the application pinned any thread: the progress thread's own.  A NIC's
 * engine takes no CPU of the application's, so the thread must not
 * inherit the core of whichever thread posts first (a strategy's
 * busy-polling thread, pinned to an isolated core, would share its core
 * with the engine it waits on). */
static cpu_set_t prog_cpus;
static int prog_cpus_known;

void sr_progress_init(void)
{
	prog_cpus_known = sched_getaffinity(0, sizeof(prog_cpus), &prog_cpus) == 0;
}

void sr_exec_lock(void)
{
	pthread_mutex_lock(&exec_mutex);
}

void sr_exec_unlock(void)
{
	pthread_mutex_unlock(&exec_mutex);
}

void sr_exec_register(struct sr_qp *qp)
{
	sr_exec_lock();
	exec_list[exec_n++] = qp;
	sr_exec_unlock();
}

void sr_exec_unregister(struct sr_qp *qp)
{
	sr_exec_lock();
	for (int i = 0; i < exec_n; i++)
		if (exec_list[i] == qp) {
			exec_list[i] = exec_list[--exec_n];
			break;
		}
	sr_exec_unlock();
}

/* One pass over every QP of the process; exec_mutex held.  Returns the
 * earliest deadline (0: none); *busy when another pass is due at once. */
static uint64_t pass_locked(int *busy)
{
	exec_pass++;
	/* Cleared before looking: a post after this sets it again.  A7
	 * pairs with R7 in ring: having seen the 1, we see the WQEs. */
	atomic_exchange_explicit(&sr_exec_work, 0, memory_order_acq_rel);
	uint64_t now = sr_now_ns(), next = 0;
	for (int i = 0; i < exec_n; i++) {
		struct sr_qp *qp = exec_list[i];
		uint64_t d = run_qp(qp, now, busy);
		if (SR_UNLIKELY(qp->held != NULL)) {
			sr_ud_release_held(qp, 0);
			for (int k = 0; k < SR_UD_HOLD; k++)
				if (qp->held[k].used &&
				    (!d || qp->held[k].since_ns + SR_UD_HOLD_NS < d))
					d = qp->held[k].since_ns + SR_UD_HOLD_NS + 1;
		}
		if (d && (!next || d < next))
			next = d;
	}
	if (*busy)
		atomic_store_explicit(&sr_exec_work, 1, memory_order_relaxed);
	return next;
}

/* ibv_poll_cq: run a pass if nobody else is. */
void sr_exec_poll(void)
{
	if (pthread_mutex_trylock(&exec_mutex) != 0)
		return;
	int busy = 0;
	pass_locked(&busy);
	pthread_mutex_unlock(&exec_mutex);
}

static long futex(_Atomic uint32_t *addr, int op, uint32_t val,
		  const struct timespec *ts)
{
	return syscall(SYS_futex, addr, op, val, ts, NULL, 0);
}

static void *progress_main(void *arg)
{
	(void)arg;
	/* On the load-time CPUs before anything else (a test finds the
	 * thread by its name, set next); refused (a CPU taken offline
	 * since, a narrowed cpuset), it stays on the poster's, as before. */
	if (prog_cpus_known)
		pthread_setaffinity_np(pthread_self(), sizeof(prog_cpus), &prog_cpus);
	pthread_setname_np(pthread_self(), "sr-engine");
	for (;;) {
		uint32_t seen = atomic_load(&doorbell);
		int busy = 0;
		pthread_mutex_lock(&exec_mutex);
		uint64_t next = pass_locked(&busy);
		pthread_mutex_unlock(&exec_mutex);
		if (busy)
			continue;
		/* Spin a little for the next post, then sleep until it rings
		 * or the earliest timer is due. */
		uint64_t now = sr_now_ns(), spin_end = now + sr_spin_ns;
		while (atomic_load_explicit(&doorbell, memory_order_relaxed) == seen &&
		       now < spin_end && (!next || now < next)) {
			__builtin_ia32_pause();
			now = sr_now_ns();
		}
		if (atomic_load(&doorbell) != seen || (next && now >= next))
			continue;
		atomic_store(&prog_sleeping, 1);
		/* F3 pairs with F4 in ring: either we see the post, or the
		 * poster sees us asleep and wakes us. */
		atomic_thread_fence(memory_order_seq_cst);
		if (atomic_load(&doorbell) == seen) {
			struct timespec ts, *tp = NULL;
			if (next) {
				uint64_t d = next - now;
				ts.tv_sec = (time_t)(d / 1000000000ull);
				ts.tv_nsec = (long)(d % 1000000000ull);
				tp = &ts;
			}
			futex(&doorbell, FUTEX_WAIT_PRIVATE, seen, tp);
		}
		atomic_store(&prog_sleeping, 0);
	}
	return NULL;
}

static void start_progress(void)
{
	pthread_mutex_lock(&prog_lock);
	if (!atomic_load(&prog_running)) {
		pthread_attr_t a;
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		/* The thread must not take signals meant for the application. */
		sigset_t all, old;
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		pthread_t t;
		if (pthread_create(&t, &a, progress_main, NULL) == 0)
			atomic_store(&prog_running, 1);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		pthread_attr_destroy(&a);
	}
	pthread_mutex_unlock(&prog_lock);
}

static void ring(void)
{
	atomic_store_explicit(&sr_exec_work, 1, memory_order_release); /* R7 */
	atomic_fetch_add(&doorbell, 1);
	/* F4 pairs with F3 in progress_main */
	atomic_thread_fence(memory_order_seq_cst);
	if (SR_UNLIKELY(!atomic_load_explicit(&prog_running, memory_order_relaxed)))
		start_progress();
	else if (atomic_load_explicit(&prog_sleeping, memory_order_relaxed))
		futex(&doorbell, FUTEX_WAKE_PRIVATE, 1, NULL);
}

void sr_progress_atfork_child(void)
{
	pthread_mutex_init(&prog_lock, NULL);
	pthread_mutex_init(&exec_mutex, NULL);
	atomic_store(&prog_running, 0);
	atomic_store(&prog_sleeping, 0);
	atomic_store(&sr_exec_work, 0);
	exec_n = 0;
}

/* ---- posting ---- */

int sr_sq_room(struct sr_qp *qp, uint32_t pos)
{
	return pos - atomic_load_explicit(&qp->sq_free, memory_order_acquire) <
	       qp->cap.max_send_wr;
}

void sr_sq_fill(struct sr_qp *qp, struct sr_swqe *w)
{
	(void)qp;
	w->post_ns = SR_UNLIKELY(sr_fault_delay_ns) ? sr_now_ns() : 0;
	w->ready_ns = 0;
	w->psn_set = 0;
	w->xstate = SR_X_NEW;
	w->status = 0;
}

/* Publishes the WQEs before pos and rings the engine. */
void sr_sq_publish(struct sr_qp *qp, uint32_t pos)
{
	atomic_store_explicit(&qp->sq_post, pos, memory_order_release); /* R5 */
	ring();
}

/* A NIC keeps up with its send queue; when the engine does not (more than
 * half the queue not sent yet), the poster runs it on its way out of the
 * post, outside the send-queue lock, for the work requests posted before
 * this call only (those posted by it still run later): the poster is held
 * to the engine's pace. */
void sr_sq_help(struct sr_qp *qp, uint32_t before)
{
	uint32_t issued = atomic_load_explicit(&qp->sq_issued, memory_order_relaxed);
	if (SR_LIKELY(before - issued <= qp->cap.max_send_wr / 2) || sr_fault_delay_ns)
		return;
	int busy = 0;
	pthread_mutex_lock(&exec_mutex);
	qp->help_cap = before;
	qp->helping = 1;
	pass_locked(&busy);
	qp->helping = 0;
	pthread_mutex_unlock(&exec_mutex);
}

static uint64_t op_flag(enum ibv_wr_opcode op)
{
	switch (op) {
	case IBV_WR_RDMA_WRITE: return IBV_QP_EX_WITH_RDMA_WRITE;
	case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
	case IBV_WR_SEND: return IBV_QP_EX_WITH_SEND;
	case IBV_WR_SEND_WITH_IMM: return IBV_QP_EX_WITH_SEND_WITH_IMM;
	case IBV_WR_RDMA_READ: return IBV_QP_EX_WITH_RDMA_READ;
	case IBV_WR_BIND_MW: return IBV_QP_EX_WITH_BIND_MW;
	case IBV_WR_LOCAL_INV: return IBV_QP_EX_WITH_LOCAL_INV;
	default: return 0;      /* atomics, SEND_WITH_INV, TSO, ...: not here */
	}
}

/* Hot path: one process-local lock, no system call unless the engine's
 * thread sleeps. */
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
	uint32_t pos = atomic_load_explicit(&qp->sq_post, memory_order_relaxed);
	uint32_t before = pos;
	int ud = qp->qp.qp_type == IBV_QPT_UD;
	for (; wr; wr = wr->next) {
		int inl = (wr->send_flags & IBV_SEND_INLINE) != 0;
		uint64_t len = 0;
		for (int i = 0; i < wr->num_sge && i < SR_MAX_SGE; i++)
			len += wr->sg_list[i].length;
		uint64_t opf = op_flag(wr->opcode);
		int local = wr->opcode == IBV_WR_BIND_MW ||
			    wr->opcode == IBV_WR_LOCAL_INV;
		if (SR_UNLIKELY(!(opf & qp->send_ops) || wr->num_sge < 0 ||
				(uint32_t)wr->num_sge > qp->cap.max_send_sge ||
				(inl && (wr->opcode == IBV_WR_RDMA_READ || local ||
					 len > qp->cap.max_inline_data)) ||
				len > SR_MAX_MSG ||
				(ud && (!wr->wr.ud.ah ||
					wr->wr.ud.ah->pd != qp->qp.pd)) ||
				(wr->opcode == IBV_WR_BIND_MW &&
				 (!wr->bind_mw.mw || wr->bind_mw.mw->pd != qp->qp.pd ||
				  (wr->bind_mw.bind_info.mr &&
				   wr->bind_mw.bind_info.mr->pd != qp->qp.pd) ||
				  (wr->bind_mw.bind_info.mw_access_flags &
				   ~(unsigned)(IBV_ACCESS_REMOTE_WRITE |
					       IBV_ACCESS_REMOTE_READ |
					       IBV_ACCESS_REMOTE_ATOMIC)))))) {
			*bad = wr;
			ret = EINVAL;
			break;
		}
		if (SR_UNLIKELY(!sr_sq_room(qp, pos))) {
			*bad = wr;
			ret = ENOMEM;
			break;
		}
		struct sr_swqe *w = sr_sq_at(qp, pos);
		sr_sq_fill(qp, w);
		w->wr_id = wr->wr_id;
		w->opcode = wr->opcode;
		w->flags = wr->send_flags;
		if (qp->sq_sig_all)
			w->flags |= IBV_SEND_SIGNALED;
		w->imm_data = wr->imm_data;
		w->num_sge = local ? 0 : (uint32_t)wr->num_sge;
		w->length = local ? 0 : (uint32_t)len;
		if (ud) {
			w->ah = wr->wr.ud.ah;
			w->remote_qpn = wr->wr.ud.remote_qpn;
			w->remote_qkey = wr->wr.ud.remote_qkey;
		} else if (wr->opcode == IBV_WR_BIND_MW) {
			w->mw = wr->bind_mw.mw;
			w->rkey = wr->bind_mw.rkey;
			w->bind = wr->bind_mw.bind_info;
		} else if (wr->opcode == IBV_WR_LOCAL_INV) {
			w->imm_data = wr->invalidate_rkey;
		} else {
			w->remote_addr = wr->wr.rdma.remote_addr;
			w->rkey = wr->wr.rdma.rkey;
		}
		if (inl) {
			/* Inline data is copied now; the buffer is free on
			 * return and its lkey is not looked at. */
			uint8_t *d = wqe_inline(w);
			for (int i = 0; i < wr->num_sge; i++) {
				memcpy(d, (void *)(uintptr_t)wr->sg_list[i].addr,
				       wr->sg_list[i].length);
				d += wr->sg_list[i].length;
			}
		} else if (!local) {
			for (int i = 0; i < wr->num_sge; i++)
				w->sge[i] = wr->sg_list[i];
		}
		pos++;
	}
	if (pos != atomic_load_explicit(&qp->sq_post, memory_order_relaxed))
		sr_sq_publish(qp, pos);
	pthread_mutex_unlock(&qp->sq_lock);
	sr_sq_help(qp, before);
	return ret;
out:
	pthread_mutex_unlock(&qp->sq_lock);
	return ret;
}
