/*
 * Completion queues and completion channels.
 *
 * A CQ is a ring of 64-byte entries in the fabric.  Producers are any
 * process: the owner (requester completions, flushes) and every peer that
 * consumes one of the owner's receives.  They reserve a position by CAS on
 * tail after checking room against head, fill the entry, then publish it by
 * storing seq = position + 1 with release order (R1).  The single consumer,
 * ibv_poll_cq in the owner, reads an entry only once its seq says it is
 * published (A1 pairs with R1), and gives the slot back by a release store of
 * head (R2), which producers acquire before reusing the slot (A2).
 *
 * Overrun: a producer that finds cqe entries pending drops its completion,
 * marks the CQ in error and sends IBV_EVENT_CQ_ERR to the owner's async
 * queue, as a NIC does; every QP that completes into that CQ goes to ERR
 * and its owner gets IBV_EVENT_QP_FATAL.  The CQ then accepts nothing more;
 * ibv_poll_cq returns what was queued before the overrun, then nothing: the
 * overrun is reported only as the async event, never by ibv_poll_cq.
 *
 * Error completions carry only what ibv_poll_cq(3) promises for them:
 * wr_id, status, qp_num and vendor_err (an mlx5-style syndrome); every
 * other field is filled with a poison pattern, so that code which reads
 * the opcode or the length of a failed work request is caught here rather
 * than on a NIC, where those fields are garbage.
 *
 * Sizing: as mlx5, a CQ of cqe entries gets a ring of the next power of two
 * above cqe (cq->cqe reports ring - 1) of 64-byte entries, and those pages
 * are charged to RLIMIT_MEMLOCK (mr.c).
 *
 * ibv_poll_cq also drives this process's send engine (datapath.c) when it
 * has work, as a software provider progresses on poll; the work requests
 * still run after they were posted.
 *
 * Completion events: ibv_req_notify_cq arms the CQ; the producer that adds
 * the next (or next solicited / error) entry disarms it and sends a datagram
 * naming the CQ to the channel's socket, which is the channel's fd.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "softrdma.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct sr_chan_msg {
	uint32_t cq_id;
};

static int arm_matches(uint32_t arm, const struct sr_cqe *e)
{
	if (arm == SR_ARM_NEXT)
		return 1;
	return arm == SR_ARM_SOLICITED &&
	       ((e->flags & SR_CQE_SOLICITED) || e->status != IBV_WC_SUCCESS);
}

/* The error syndrome an mlx5 CQE carries for a status (vendor_err). */
static uint32_t syndrome(uint32_t st)
{
	switch (st) {
	case IBV_WC_LOC_LEN_ERR: return 0x01;
	case IBV_WC_LOC_QP_OP_ERR: return 0x02;
	case IBV_WC_LOC_PROT_ERR: return 0x04;
	case IBV_WC_WR_FLUSH_ERR: return 0x05;
	case IBV_WC_MW_BIND_ERR: return 0x06;
	case IBV_WC_BAD_RESP_ERR: return 0x10;
	case IBV_WC_LOC_ACCESS_ERR: return 0x11;
	case IBV_WC_REM_INV_REQ_ERR: return 0x12;
	case IBV_WC_REM_ACCESS_ERR: return 0x13;
	case IBV_WC_REM_OP_ERR: return 0x14;
	case IBV_WC_RETRY_EXC_ERR: return 0x15;
	case IBV_WC_RNR_RETRY_EXC_ERR: return 0x16;
	default: return 0x22;
	}
}

/* The CQ is in error: its owner hears of it, and so does the owner of each
 * QP that completes into it (those QPs go to ERR). */
static void overrun(struct sr_fabric *f, struct sr_cq_shm *cq)
{
	uint32_t slot = cq->id & (SR_MAX_CQS - 1);
	sr_async_post(f, cq->pid, cq->ctx_id, IBV_EVENT_CQ_ERR, SR_SLOT_CQ, slot,
		      cq->id);
	for (uint32_t i = 0; i < SR_MAX_QPS; i++) {
		struct sr_qp_shm *q = sr_fabric_qp(f, i);
		if (atomic_load_explicit(&q->in_use, memory_order_acquire) != 1)
			continue;
		if ((q->recv_cq == slot && q->recv_cq_id == cq->id) ||
		    (q->send_cq == slot && q->send_cq_id == cq->id))
			sr_qp_fatal(f, q);
	}
}

int sr_cq_push(struct sr_fabric *f, struct sr_cq_shm *cq, const struct sr_cqe *e)
{
	if (SR_UNLIKELY(sr_log_errors) && e->status != IBV_WC_SUCCESS &&
	    (e->status != IBV_WC_WR_FLUSH_ERR || sr_log_errors > 1))
		fprintf(stderr, "softrdma: pid %d: qp %u wr_id %llu: %s (%s)\n",
			(int)getpid(), e->qp_num, (unsigned long long)e->wr_id,
			ibv_wc_status_str((enum ibv_wc_status)e->status),
			e->flags & SR_CQE_SQ ? "requester" : "receive");
	if (SR_UNLIKELY(atomic_load_explicit(&cq->error, memory_order_relaxed)))
		return -1;
	uint64_t t = atomic_load_explicit(&cq->tail, memory_order_relaxed);
	for (;;) {
		/* A2 pairs with R2 in sr_poll_cq */
		uint64_t h = atomic_load_explicit(&cq->head, memory_order_acquire);
		if (SR_UNLIKELY((int64_t)(t - h) < 0)) {
			/* Our tail is stale: other producers pushed and the
			 * consumer took it all meanwhile.  Not an overrun. */
			t = atomic_load_explicit(&cq->tail, memory_order_relaxed);
			continue;
		}
		if (SR_UNLIKELY(t - h >= cq->cqe)) {
			if (!atomic_exchange(&cq->error, 1))
				overrun(f, cq);
			return -1;
		}
		if (atomic_compare_exchange_weak_explicit(
			    &cq->tail, &t, t + 1, memory_order_relaxed,
			    memory_order_relaxed))
			break;
	}
	struct sr_cqe *d = &cq->e[t & cq->mask];
	d->wr_id = e->wr_id;
	d->status = e->status;
	d->opcode = e->opcode;
	d->vendor_err = e->status == IBV_WC_SUCCESS ? 0 : syndrome(e->status);
	d->byte_len = e->byte_len;
	d->imm_data = e->imm_data;
	d->qp_num = e->qp_num;
	d->src_qp = e->src_qp;
	d->wc_flags = e->wc_flags;
	d->sq_index = e->sq_index;
	d->flags = e->flags;
	d->slid = e->slid;
	atomic_store_explicit(&d->seq, t + 1, memory_order_release); /* R1 */

	if (!cq->chan_id)
		return 0; /* no channel: nobody can wait for an event */
	/* F1 pairs with F2 in sr_req_notify_cq.  Without both fences the
	 * store of seq and the load of armed may pass each other (store-load
	 * reordering), as may the consumer's store of armed and its next
	 * poll: each side then misses the other and the event is lost. */
	atomic_thread_fence(memory_order_seq_cst);
	uint32_t arm = atomic_load_explicit(&cq->armed, memory_order_relaxed);
	if (SR_UNLIKELY(arm) && arm_matches(arm, e) &&
	    atomic_compare_exchange_strong(&cq->armed, &arm, SR_ARM_NONE)) {
		struct sr_chan_msg m = {cq->id};
		sr_fabric_notify(f, cq->pid, 'c', cq->chan_id, &m, sizeof m);
	}
	return 0;
}

/* The fields ibv_poll_cq(3) leaves undefined for a failed work request. */
#define SR_POISON 0xa5a5a5a5u

/* Hot path: no lock, no system call, no allocation (unless this process's
 * send engine has work, which the poll then runs). */
int sr_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
{
	if (SR_UNLIKELY(sr_fault_active) && sr_fault_hit("ibv_poll_cq")) {
		errno = EIO;
		return -1;
	}
	if (SR_UNLIKELY(atomic_load_explicit(&sr_exec_work, memory_order_relaxed)))
		sr_exec_poll();
	struct sr_cq_shm *cq = ((struct sr_cq *)ibcq)->shm;
	uint64_t h = atomic_load_explicit(&cq->head, memory_order_relaxed);
	int got = 0;
	while (got < n) {
		struct sr_cqe *e = &cq->e[h & cq->mask];
		/* A1 pairs with R1 in sr_cq_push */
		if (atomic_load_explicit(&e->seq, memory_order_acquire) != h + 1)
			break;
		struct ibv_wc *w = &wc[got++];
		w->wr_id = e->wr_id;
		w->status = e->status;
		w->qp_num = e->qp_num;
		w->vendor_err = e->vendor_err;
		if (SR_LIKELY(e->status == IBV_WC_SUCCESS) || !sr_poison_wc) {
			w->opcode = e->opcode;
			w->byte_len = e->byte_len;
			w->imm_data = e->imm_data;
			w->src_qp = e->src_qp;
			w->wc_flags = e->wc_flags;
			w->pkey_index = 0;
			w->slid = (uint16_t)e->slid;
			w->sl = 0;
			w->dlid_path_bits = 0;
		} else {
			w->opcode = (enum ibv_wc_opcode)SR_POISON;
			w->byte_len = SR_POISON;
			w->imm_data = SR_POISON;
			w->src_qp = SR_POISON;
			w->wc_flags = SR_POISON;
			w->pkey_index = (uint16_t)SR_POISON;
			w->slid = (uint16_t)SR_POISON;
			w->sl = (uint8_t)SR_POISON;
			w->dlid_path_bits = (uint8_t)SR_POISON;
		}
		if (e->flags & SR_CQE_SQ) {
			/* Polling a requester completion frees its SQ slot and
			 * those of the unsignalled WQEs before it. */
			struct sr_qp *qp = atomic_load_explicit(
				&sr_local_qp[e->qp_num & (SR_MAX_QPS - 1)],
				memory_order_acquire);
			if (qp && qp->qp.qp_num == e->qp_num)
				atomic_store_explicit(&qp->sq_free, e->sq_index + 1,
						      memory_order_release);
		}
		h++;
	}
	if (got)
		atomic_store_explicit(&cq->head, h, memory_order_release); /* R2 */
	return got;
}

int sr_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	if (SR_UNLIKELY(sr_fault_active)) {
		int e = sr_fault_hit("ibv_req_notify_cq");
		if (e)
			return e;
	}
	struct sr_cq *c = (struct sr_cq *)ibcq;
	atomic_store_explicit(&c->shm->armed,
			      solicited_only ? SR_ARM_SOLICITED : SR_ARM_NEXT,
			      memory_order_relaxed);
	/* F2 pairs with F1 in sr_cq_push: the caller's next poll sees an
	 * entry pushed before this point, or its producer sees the arm. */
	atomic_thread_fence(memory_order_seq_cst);
	return 0;
}

SR_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	SR_FAULT_RET("ibv_create_comp_channel", NULL);
	struct sr_channel *ch = calloc(1, sizeof *ch);
	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	struct sr_fabric *f = sr_ctx(context)->fab;
	ch->id = sr_fabric_next_id(f);
	ch->ch.context = context;
	ch->ch.fd = sr_fabric_bind_socket(f, 'c', ch->id);
	if (ch->ch.fd < 0) {
		int e = errno;
		free(ch);
		errno = e;
		return NULL;
	}
	return &ch->ch;
}

SR_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	SR_FAULT_RET("ibv_destroy_comp_channel", -1);
	if (__atomic_load_n(&channel->refcnt, __ATOMIC_ACQUIRE)) {
		errno = EBUSY;
		return -1;
	}
	close(channel->fd);
	free((struct sr_channel *)channel);
	return 0;
}

SR_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe,
				       void *cq_context,
				       struct ibv_comp_channel *channel,
				       int comp_vector)
{
	SR_FAULT_RET("ibv_create_cq", NULL);
	struct sr_context *c = sr_ctx(context);
	if (cqe < 1 || cqe > SR_MAX_CQE || comp_vector < 0 ||
	    comp_vector >= context->num_comp_vectors ||
	    (channel && channel->context != context)) {
		errno = EINVAL;
		return NULL;
	}
	uint32_t ring = 2;
	while (ring < (uint32_t)cqe + 1)
		ring <<= 1;
	/* mlx5: ring * 64-byte CQEs, in whole pages, pinned */
	uint64_t pages = ((uint64_t)ring * 64 + SR_PAGE - 1) / SR_PAGE;
	int err = sr_memlock_charge(pages);
	if (err) {
		errno = err;
		return NULL;
	}
	struct sr_cq *cq = calloc(1, sizeof *cq);
	uint32_t slot;
	if (!cq || sr_fabric_alloc_slot(c->fab, SR_SLOT_CQ, &slot) < 0) {
		free(cq);
		sr_memlock_uncharge(pages);
		errno = ENOMEM;
		return NULL;
	}
	cq->pages = pages;
	struct sr_cq_shm *s = sr_fabric_cq(c->fab, slot);
	s->gen = (s->gen + 1) & 0xffff;
	s->id = s->gen << SR_CQ_SLOT_BITS | slot;
	s->pid = c->fab->pid;
	s->ctx_id = c->id;
	s->mask = ring - 1;
	s->cqe = ring - 1; /* like mlx: round up, report the real capacity */
	s->chan_id = channel ? ((struct sr_channel *)channel)->id : 0;
	atomic_store(&s->armed, SR_ARM_NONE);
	atomic_store(&s->error, 0);
	atomic_store(&s->tail, 0);
	atomic_store(&s->head, 0);
	for (uint32_t i = 0; i < ring; i++)
		atomic_store_explicit(&s->e[i].seq, 0, memory_order_relaxed);
	atomic_store_explicit(&s->in_use, 1, memory_order_release);

	cq->shm = s;
	cq->slot = slot;
	cq->cq.context = context;
	cq->cq.channel = channel;
	cq->cq.cq_context = cq_context;
	cq->cq.handle = s->id;
	cq->cq.cqe = (int)s->cqe;
	pthread_mutex_init(&cq->cq.mutex, NULL);
	pthread_cond_init(&cq->cq.cond, NULL);
	if (channel)
		__atomic_fetch_add(&channel->refcnt, 1, __ATOMIC_ACQ_REL);
	atomic_store_explicit(&sr_local_cq[slot], cq, memory_order_release);
	return &cq->cq;
}
SR_DEFAULT_V11(ibv_create_cq);

SR_EXPORT int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	(void)cq; (void)cqe;
	return EOPNOTSUPP;
}
SR_DEFAULT_V11(ibv_resize_cq);

SR_EXPORT int ibv_destroy_cq(struct ibv_cq *ibcq)
{
	SR_FAULT_RET("ibv_destroy_cq", errno);
	struct sr_cq *cq = (struct sr_cq *)ibcq;
	if (atomic_load(&cq->refs))
		return EBUSY;
	struct sr_fabric *f = sr_ctx(ibcq->context)->fab;
	atomic_store(&sr_local_cq[cq->slot], NULL);
	sr_fabric_free_slot(f, SR_SLOT_CQ, cq->slot);
	sr_memlock_uncharge(cq->pages);
	if (ibcq->channel)
		__atomic_fetch_sub(&ibcq->channel->refcnt, 1, __ATOMIC_ACQ_REL);
	pthread_mutex_destroy(&ibcq->mutex);
	pthread_cond_destroy(&ibcq->cond);
	free(cq);
	return 0;
}
SR_DEFAULT_V11(ibv_destroy_cq);

SR_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel,
			       struct ibv_cq **cq, void **cq_context)
{
	SR_FAULT_RET("ibv_get_cq_event", -1);
	for (;;) {
		struct sr_chan_msg m;
		ssize_t n = recv(channel->fd, &m, sizeof m, 0);
		if (n < 0)
			return -1; /* EAGAIN on a non-blocking fd, EINTR */
		if (n != sizeof m)
			continue;
		struct sr_cq *c = atomic_load(&sr_local_cq[m.cq_id &
							   (SR_MAX_CQS - 1)]);
		if (!c || c->shm->id != m.cq_id || c->cq.channel != channel)
			continue; /* the CQ was destroyed since */
		*cq = &c->cq;
		*cq_context = c->cq.cq_context;
		return 0;
	}
}
SR_DEFAULT_V11(ibv_get_cq_event);

SR_EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}
SR_DEFAULT_V11(ibv_ack_cq_events);
