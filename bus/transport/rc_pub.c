/*
 * transport/rc_pub.c - the rc transport's publisher (the design is in
 * transport/rc.h).
 *
 * The ops below write each committed frame to every subscriber in the
 * table with ibv_post_send; the control thread listens on cfg.control,
 * runs the HELLO / SUBSCRIBE / ACCEPT exchange, brings a queue pair up per
 * subscriber, heartbeats, and removes subscribers that leave, time out or
 * whose queue pair failed.  Table changes are published with
 * rcu_assign_pointer and freed after synchronize_rcu(), on the control
 * thread; the publishing thread is an RCU reader that is online only inside
 * send and room, so it never holds a grace period up while idle.
 *
 * Edges between the threads (barrier.h):
 *   R1 -> A1  the publishing thread marks a subscriber dead (why_dead set
 *             first); ctl_main reads it and drops the subscriber.
 *   S1        rc_tx_close stops ctl_main (then joins it).
 *   V1        rc_tx_beat stores the last sequence, a value on its own that
 *             the control thread puts in heartbeats and ACCEPT.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "bus/transport/rc.h"

#include "bus/barrier.h"
#include "bus/clock.h"
#include "bus/error.h"
#include "bus/frame.h"
#include "bus/mem.h"
#include "bus/net.h"
#include "bus/transport/control.h"
#include "bus/transport/rc_ctl.h"
#include "bus/transport/verbs.h"

#include <endian.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <urcu-qsbr.h>

/* How long close waits for a subscriber's last writes to complete. */
#define DRAIN_TIMEOUT_NS 1000000000ull

static enum ibv_mtu mtu_min(enum ibv_mtu a, uint8_t b)
{
	return (unsigned)a < b ? a : (enum ibv_mtu)b;
}

typedef struct rc_sub {
	/* Hot: read by the publishing thread for every frame.  The work
	 * requests are templates filled once at subscribe, so a frame costs
	 * a handful of stores, not a zeroed 128-byte struct. */
	struct ibv_send_wr wr;     /* the frame's WRITE_WITH_IMM */
	struct ibv_sge sge;
	struct ibv_send_wr pad_wr; /* the padding WRITE before a wrap */
	struct ibv_sge pad_sge;
	tb_frame_hdr_t pad_hdr;
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	uint64_t raddr;
	uint64_t rmask;            /* its ring's size - 1 */
	uint32_t rkey;
	uint32_t recv_depth;
	uint64_t wpos;             /* where its next frame goes (free-running) */
	uint64_t wframes;          /* WRITE_WITH_IMMs sent */
	const _Atomic uint64_t *credit; /* its slot, written by it over RDMA */
	uint64_t posted;           /* work requests posted */
	uint64_t completed;        /* known complete (last signalled wr_id) */
	uint64_t last_signal;      /* `posted` at the last signalled request */
	uint64_t pin;              /* our ring position its oldest may read */
	struct {
		uint64_t wr_id;    /* a signalled request ... */
		uint64_t pos_end;  /* ... and where its frame ends in our ring */
	} sig[32];
	uint32_t sig_head, sig_tail;
	uint32_t max_inline;
	uint64_t laps;             /* frames it was skipped for */
	int skipping;
	_Atomic int dead;          /* its queue pair failed; control removes it
				    * (R1 in the hot path, A1 in ctl_main) */
	const char *why_dead;      /* set before dead, read after it */
	/* Cold: control thread. */
	struct ibv_mr *credit_mr;
	int slot;
	char client[TB_CONTROL_CLIENT_ID_LEN];
} rc_sub_t;

typedef struct rc_table {
	int n;
	rc_sub_t *sub[TB_RC_MAX_SUBS];
} rc_table_t;

enum { CLIENT_HELLO, CLIENT_SUBSCRIBE, CLIENT_LIVE };

typedef struct rc_client {
	int fd;
	int state;
	tb_rc_ctl_in_t in;
	uint64_t last_rx_ns;
	uint64_t opened_ns;
	rc_sub_t *sub;
	char id[TB_CONTROL_CLIENT_ID_LEN];
} rc_client_t;

#define MAX_CLIENTS (TB_RC_MAX_SUBS + 16)

typedef struct rc_tx {
	tb_tx_t base;
	/* Hot. */
	rc_table_t *table;         /* RCU-protected */
	uint32_t lkey;
	int backpressure;
	uint64_t size;
	/* Cold. */
	tb_verbs_dev_t dev;
	tb_mem_t ring_mem;
	tb_mem_t slot_mem;
	struct ibv_mr *ring_mr;
	uint64_t slot_used;        /* bitmap of credit slots */
	tb_stream_cfg_t cfg;
	uint64_t epoch;
	uint32_t psn;
	int listen_fd;
	int wake_fd;
	pthread_t ctl;
	int ctl_started;
	_Atomic int stop;          /* S1: rc_tx_close -> ctl_main */
	_Atomic uint64_t last_seq; /* V1: rc_tx_beat -> the control thread */
	rc_client_t clients[MAX_CLIENTS];
	int n_clients;
	uint64_t rejected;
} rc_tx_t;

/* The publishing thread registers with RCU once, and unregisters when it
 * exits (a QSBR registry must not hold a dead thread). */
static pthread_key_t rcu_key;
static pthread_once_t rcu_key_once = PTHREAD_ONCE_INIT;
static __thread int rcu_registered __attribute__((tls_model("initial-exec")));

static void rcu_thread_gone(void *arg)
{
	(void)arg;
	rcu_unregister_thread();
}

static void rcu_key_init(void)
{
	pthread_key_create(&rcu_key, rcu_thread_gone);
}

static void rcu_register_once(void)
{
	pthread_once(&rcu_key_once, rcu_key_init);
	rcu_register_thread();
	rcu_thread_offline();
	pthread_setspecific(rcu_key, (void *)1);
	rcu_registered = 1;
}

static inline rc_table_t *reader_enter(rc_tx_t *t)
{
	if (tb_unlikely(!rcu_registered))
		rcu_register_once();
	rcu_thread_online();
	return rcu_dereference(t->table);
}

static inline void reader_leave(void)
{
	rcu_thread_offline();
}

/* Reaps a subscriber's send completions; marks it dead on an error. */
static int sub_reap(rc_sub_t *s)
{
	struct ibv_wc wc[16];
	int n = ibv_poll_cq(s->cq, 16, wc);

	for (int i = 0; i < n; i++) {
		if (tb_unlikely(wc[i].status != IBV_WC_SUCCESS)) {
			s->why_dead = ibv_wc_status_str(wc[i].status);
			/* R1 pairs with A1 in ctl_main: why_dead is set */
			tb_atomic_store_release(&s->dead, 1);
			return -1;
		}
		s->completed = wc[i].wr_id;
		while (s->sig_tail != s->sig_head &&
		       s->sig[s->sig_tail & 31].wr_id <= s->completed)
			s->pin = s->sig[s->sig_tail++ & 31].pos_end;
	}
	if (tb_unlikely(n < 0)) {
		s->why_dead = "polling its completion queue failed";
		tb_atomic_store_release(&s->dead, 1); /* R1 pairs with A1 in ctl_main */
		return -1;
	}
	return 0;
}

/*
 * `s` is about to be skipped with unsignalled writes outstanding: nothing
 * would ever report them complete, and its pin would hold until our ring
 * laps it (and `s` is failed for it).  One signalled zero-length WRITE,
 * which consumes no receive, reports them all.  `pos`: where the writes
 * before it end in our ring.  Cold.
 */
static void sub_fence(rc_sub_t *s, uint64_t pos)
{
	struct ibv_send_wr w = {.wr_id = s->posted + 1, .opcode = IBV_WR_RDMA_WRITE,
				.send_flags = IBV_SEND_SIGNALED,
				.wr.rdma = {.remote_addr = s->raddr, .rkey = s->rkey}};
	struct ibv_send_wr *bad;

	if (s->posted - s->completed + 1 > TB_RC_SQ_DEPTH ||
	    s->sig_head - s->sig_tail >= 32)
		return; /* signalled requests are outstanding: they will do */
	if (ibv_post_send(s->qp, &w, &bad) != 0) {
		s->why_dead = "ibv_post_send failed";
		tb_atomic_store_release(&s->dead, 1); /* R1 pairs with A1 in ctl_main */
		return;
	}
	s->posted++;
	s->last_signal = s->posted;
	s->sig[s->sig_head & 31].wr_id = s->posted;
	s->sig[s->sig_head++ & 31].pos_end = pos;
}

/* Frames and bytes `s` has not yet given back credit for. */
static inline int sub_has_room(const rc_sub_t *s, uint64_t need)
{
	/* Relaxed: the subscriber's RDMA WRITE stores it, not a thread of
	 * ours; a stale value only under-states its room. */
	uint64_t c = tb_atomic_load_relaxed(s->credit);
	uint64_t used = (s->wpos - c) & TB_RC_CREDIT_POS_MASK;
	uint32_t frames = (uint32_t)(s->wframes - (c >> TB_RC_CREDIT_POS_BITS)) &
			  TB_RC_CREDIT_RECV_MASK;

	return used + need <= s->rmask + 1 && frames < s->recv_depth;
}

/*
 * Writes the frame at our ring position `pos` into `s`'s ring: a padding
 * WRITE first when it would straddle the end, then the WRITE_WITH_IMM.
 * Returns 0, or 1 when `s` had no room (it is skipped and will see a gap).
 * Hot path.
 */
static inline int sub_write(rc_tx_t *t, rc_sub_t *s, const tb_frame_hdr_t *f,
			    uint64_t pos, uint64_t pub_tail)
{
	uint32_t space = tb_frame_space(f->length);
	uint64_t off = s->wpos & s->rmask;
	uint64_t pad = off + space > s->rmask + 1 ? s->rmask + 1 - off : 0;
	struct ibv_send_wr *w = &s->wr, *bad;
	unsigned nwr = 1;

	if (tb_unlikely(s->posted - s->completed + 2 > TB_RC_SQ_DEPTH ||
			(s->posted != s->completed && pub_tail - s->pin > t->size / 2))) {
		sub_reap(s);
		if (s->posted - s->completed + 2 > TB_RC_SQ_DEPTH)
			goto skip;
		if (s->posted != s->completed && pub_tail - s->pin > t->size / 2) {
			/* It holds requests that read frames we are about
			 * to overwrite: fail it rather than send it garbage. */
			struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};

			ibv_modify_qp(s->qp, &a, IBV_QP_STATE);
			s->why_dead = "its writes did not complete before the "
				      "frames they read were overwritten";
			/* R1 pairs with A1 in ctl_main */
			tb_atomic_store_release(&s->dead, 1);
			return 1;
		}
	}
	if (tb_unlikely(!sub_has_room(s, pad + space)))
		goto skip;
	(void)t;
	if (tb_unlikely(pad)) {
		/* Inline: copied at post time, so one header serves all. */
		tb_frame_init_pad(&s->pad_hdr, (uint32_t)pad, f->stream_id, f->seq);
		s->pad_wr.wr.rdma.remote_addr = s->raddr + off;
		w = &s->pad_wr;
		nwr = 2;
		off = 0;
	}
	s->sge.addr = (uintptr_t)f;
	s->sge.length = f->length;
	s->wr.imm_data = htobe32(tb_rc_imm(off, f->seq));
	s->wr.wr.rdma.remote_addr = s->raddr + off;
	s->wr.send_flags = f->length <= s->max_inline ? IBV_SEND_INLINE : 0;
	if (s->posted + nwr - s->last_signal >= TB_RC_SIGNAL_EVERY) {
		s->wr.send_flags |= IBV_SEND_SIGNALED;
		s->wr.wr_id = s->posted + nwr;
		s->last_signal = s->posted + nwr;
		s->sig[s->sig_head & 31].wr_id = s->wr.wr_id;
		s->sig[s->sig_head++ & 31].pos_end = pos + space;
	}
	if (s->posted == s->completed)
		s->pin = pos;
	if (tb_unlikely(ibv_post_send(s->qp, w, &bad) != 0)) {
		s->why_dead = "ibv_post_send failed";
		tb_atomic_store_release(&s->dead, 1); /* R1 pairs with A1 in ctl_main */
		return 1;
	}
	/* Reap with every signalled request: completions come back at the
	 * pace they are asked for, and an error shows within 64 frames. */
	if (s->wr.send_flags & IBV_SEND_SIGNALED)
		sub_reap(s);
	s->posted += nwr;
	s->wpos += pad + space;
	s->wframes++;
	s->skipping = 0;
	return 0;
skip:
	if (!s->skipping && s->posted != s->last_signal)
		sub_fence(s, pos);
	s->laps++;
	s->skipping = 1;
	return 1;
}

static int rc_tx_send(tb_tx_t *tx, uint64_t from, uint64_t to)
{
	rc_tx_t *t = (rc_tx_t *)tx;
	rc_table_t *tab = reader_enter(t);

	/* Hot path: one post per subscriber per frame. */
	for (uint64_t pos = from; pos != to;) {
		const tb_frame_hdr_t *f = tb_ring_at(&t->base.ring, pos);

		if (f->type == TB_FRAME_DATA) {
			for (int i = 0; i < tab->n; i++) {
				rc_sub_t *s = tab->sub[i];

				/* Relaxed: R1 is this thread's own store. */
				if (tb_likely(!tb_atomic_load_relaxed(&s->dead)))
					sub_write(t, s, f, pos, to);
			}
		}
		pos += tb_frame_space(f->length);
	}
	reader_leave();
	return 0;
}

/* Back-pressure: every live subscriber must have room for the frame (with
 * a padding frame's worth to spare, since its ring wraps on its own). */
static int rc_tx_room(tb_tx_t *tx, uint64_t new_tail)
{
	rc_tx_t *t = (rc_tx_t *)tx;
	uint64_t span = new_tail - t->base.ring.tail;
	rc_table_t *tab = reader_enter(t);
	int rc = 0;

	for (int i = 0; i < tab->n && rc == 0; i++) {
		rc_sub_t *s = tab->sub[i];

		/* Relaxed: R1 is this thread's own store. */
		if (!tb_atomic_load_relaxed(&s->dead) &&
		    !sub_has_room(s, 2 * span))
			rc = TB_BACK_PRESSURED;
	}
	reader_leave();
	return rc;
}

static void rc_tx_beat(tb_tx_t *tx, uint64_t now_ns, uint64_t last_seq)
{
	rc_tx_t *t = (rc_tx_t *)tx;

	(void)now_ns;
	/* V1, relaxed: a value on its own, read by the control thread. */
	tb_atomic_store_relaxed(&t->last_seq, last_seq);
}

/* ------------------------------------------- publisher: the control thread */

static void sub_free(rc_tx_t *t, rc_sub_t *s)
{
	if (s->qp)
		ibv_destroy_qp(s->qp);
	if (s->cq)
		ibv_destroy_cq(s->cq);
	if (s->credit_mr)
		ibv_dereg_mr(s->credit_mr);
	if (s->slot >= 0)
		t->slot_used &= ~(1ull << s->slot);
	free(s);
}

/* Publishes a copy of the table with `add` added or `del` removed. */
static int table_change(rc_tx_t *t, rc_sub_t *add, rc_sub_t *del)
{
	rc_table_t *old = t->table, *nt = calloc(1, sizeof(*nt));

	if (!nt)
		return tb_error_set(TB_ENOMEM, "out of memory");
	for (int i = 0; i < old->n; i++)
		if (old->sub[i] != del)
			nt->sub[nt->n++] = old->sub[i];
	if (add)
		nt->sub[nt->n++] = add;
	rcu_assign_pointer(t->table, nt);
	synchronize_rcu();     /* the publishing thread is done with `old` */
	free(old);
	return 0;
}

#define SEND TB_RC_CTL_SEND

static void reject(rc_tx_t *t, rc_client_t *c, uint32_t reason,
		   const char *text)
{
	tb_control_reject_t r = {.stream_id = t->cfg.id, .reason = reason};

	snprintf(r.text, sizeof(r.text), "%s", text);
	SEND(c->fd, reject, &r);
	t->rejected++;
	tb_warn("stream '%s': rejected subscriber '%s': %s", t->cfg.name,
		c->id[0] ? c->id : "?", text);
}

/* Drops client `i`: BYE `bye_reason` first (0 = none: it is gone), and
 * says `why` when it was a subscriber. */
static void client_drop(rc_tx_t *t, int i, uint32_t bye_reason, const char *why)
{
	rc_client_t *c = &t->clients[i];

	if (bye_reason) {
		tb_control_bye_t b = {.reason = bye_reason};

		SEND(c->fd, bye, &b);
	}
	if (c->sub) {
		tb_info("stream '%s': subscriber '%s' left: %s; it was lapped "
			"for %llu frames", t->cfg.name, c->id, why,
			(unsigned long long)c->sub->laps);
		table_change(t, NULL, c->sub);
		sub_free(t, c->sub);
	}
	close(c->fd);
	t->clients[i] = t->clients[--t->n_clients];
}

/* SUBSCRIBE: a queue pair and a credit slot for the subscriber, then
 * ACCEPT.  Returns 0, or < 0 after rejecting it. */
static int client_subscribe(rc_tx_t *t, rc_client_t *c,
			    const tb_control_subscribe_t *m)
{
	tb_control_accept_t a = {.stream_id = t->cfg.id, .epoch = t->epoch,
			     .psn = t->psn};
	tb_verbs_qp_cfg_t qc = {
		.type = IBV_QPT_RC, .send_wr = TB_RC_SQ_DEPTH, .recv_wr = 1,
		.send_sge = 1, .inline_want = TB_RC_INLINE,
		.inline_min = TB_RC_INLINE, .access = IBV_ACCESS_REMOTE_WRITE,
	};
	tb_verbs_peer_t peer = {0};
	uint32_t inline_got = 0;
	_Atomic uint64_t *slot;
	rc_sub_t *s;
	char why[160];

	if (m->stream_id != t->cfg.id) {
		reject(t, c, TB_CONTROL_REJ_UNKNOWN_STREAM, "SUBSCRIBE names another stream");
		return -1;
	}
	if (m->transport != TB_TRANSPORT_RC) {
		reject(t, c, TB_CONTROL_REJ_UNSUPPORTED_TRANSPORT, "this stream is rc");
		return -1;
	}
	if (m->ring_len < 2ull * t->base.ring.max_frame) {
		snprintf(why, sizeof(why), "ring of %llu bytes is under twice the "
			 "largest frame (%u)", (unsigned long long)m->ring_len,
			 t->base.ring.max_frame);
		reject(t, c, TB_CONTROL_REJ_MALFORMED, why);
		return -1;
	}
	if (t->table->n >= TB_RC_MAX_SUBS || t->slot_used == ~0ull) {
		reject(t, c, TB_CONTROL_REJ_FULL, "no room for another subscriber");
		return -1;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		goto internal;
	s->slot = __builtin_ctzll(~t->slot_used);
	t->slot_used |= 1ull << s->slot;
	slot = (_Atomic uint64_t *)((uint8_t *)t->slot_mem.addr +
				    (size_t)s->slot * TB_RC_SLOT_SIZE);
	/* Relaxed: before the slot is registered, nothing else sees it. */
	tb_atomic_store_relaxed(slot, 0);
	s->credit = slot;
	s->credit_mr = ibv_reg_mr(t->dev.pd, (void *)slot, TB_RC_SLOT_SIZE,
				  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	s->cq = ibv_create_cq(t->dev.ctx, (int)TB_RC_SQ_DEPTH + 16, NULL, NULL, 0);
	if (!s->credit_mr || !s->cq)
		goto internal;
	qc.cq = s->cq;
	s->qp = tb_verbs_qp_create(&t->dev, &qc, &inline_got);
	peer.qpn = m->qpn;
	peer.psn = m->psn;
	memcpy(peer.gid, m->gid, sizeof(peer.gid));
	if (!s->qp || tb_verbs_rc_connect(&t->dev, s->qp, &peer, t->psn,
					  mtu_min(t->dev.mtu, m->mtu)) < 0)
		goto internal;
	s->max_inline = inline_got < TB_RC_INLINE ? inline_got : TB_RC_INLINE;
	s->raddr = m->ring_addr;
	s->rkey = m->rkey;
	s->sge.lkey = t->lkey;
	s->wr = (struct ibv_send_wr){.sg_list = &s->sge, .num_sge = 1,
				     .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				     .wr.rdma.rkey = m->rkey};
	s->pad_sge = (struct ibv_sge){.addr = (uintptr_t)&s->pad_hdr,
				      .length = TB_FRAME_HDR_LEN};
	s->pad_wr = (struct ibv_send_wr){.next = &s->wr, .sg_list = &s->pad_sge,
					 .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_INLINE,
					 .wr.rdma.rkey = m->rkey};
	s->rmask = m->ring_len - 1;
	s->recv_depth = m->recv_depth;
	memcpy(s->client, c->id, sizeof(s->client));
	a.qpn = s->qp->qp_num;
	memcpy(a.gid, t->dev.gid.raw, 16);
	a.credit_rkey = s->credit_mr->rkey;
	a.credit_addr = (uintptr_t)slot;
	a.next_seq = tb_atomic_load_relaxed(&t->last_seq) + 1; /* V1 */
	a.ring_offset = 0;
	if (table_change(t, s, NULL) < 0)
		goto internal;
	c->sub = s;
	if (SEND(c->fd, accept, &a) < 0)
		return -1;   /* the caller drops it, and with it the sub */
	tb_info("stream '%s': subscriber '%s' joined (qp %u, ring %llu bytes)",
		t->cfg.name, c->id, s->qp->qp_num,
		(unsigned long long)m->ring_len);
	return 0;
internal:
	snprintf(why, sizeof(why), "publisher could not set up RDMA: %s",
		 tb_errmsg());
	if (s)
		sub_free(t, s);
	reject(t, c, TB_CONTROL_REJ_INTERNAL, why);
	return -1;
}

/* One message from client i; returns < 0 when the client must go. */
static int client_message(rc_tx_t *t, rc_client_t *c, const tb_control_msg_t *m)
{
	switch (c->state) {
	case CLIENT_HELLO:
		if (m->type != TB_CONTROL_HELLO)
			break;
		memcpy(c->id, m->hello.client_id, sizeof(c->id));
		if (m->hello.stream_id != t->cfg.id) {
			reject(t, c, TB_CONTROL_REJ_UNKNOWN_STREAM, "no such stream here");
			return -1;
		}
		if (t->cfg.token[0] && !tb_control_token_equal(m->hello.token, t->cfg.token)) {
			reject(t, c, TB_CONTROL_REJ_BAD_TOKEN, "token does not match");
			return -1;
		}
		c->state = CLIENT_SUBSCRIBE;
		return 0;
	case CLIENT_SUBSCRIBE:
		if (m->type != TB_CONTROL_SUBSCRIBE)
			break;
		if (client_subscribe(t, c, &m->subscribe) < 0)
			return -1;
		c->state = CLIENT_LIVE;
		return 0;
	case CLIENT_LIVE:
		if (m->type == TB_CONTROL_HEARTBEAT)
			return 0;
		if (m->type == TB_CONTROL_BYE)
			return -1;
		break;
	}
	reject(t, c, TB_CONTROL_REJ_MALFORMED, "unexpected message");
	return -1;
}

static void accept_clients(rc_tx_t *t)
{
	for (;;) {
		int fd = tb_net_accept(t->listen_fd, NULL, 0);
		rc_client_t *c;

		if (fd < 0)
			return;
		if (t->n_clients == MAX_CLIENTS) {
			close(fd);
			continue;
		}
		c = &t->clients[t->n_clients++];
		memset(c, 0, sizeof(*c));
		c->fd = fd;
		c->state = CLIENT_HELLO;
		c->opened_ns = c->last_rx_ns = tb_clock_now_ns();
	}
}

static void heartbeat_all(rc_tx_t *t, uint64_t now, uint64_t last_seq)
{
	tb_control_heartbeat_t hb = {.timestamp_ns = now, .last_seq = last_seq};

	for (int i = 0; i < t->n_clients; i++)
		if (t->clients[i].state == CLIENT_LIVE)
			SEND(t->clients[i].fd, heartbeat, &hb);
}

static void *ctl_main(void *arg)
{
	rc_tx_t *t = arg;
	uint64_t beat_ns = (uint64_t)t->cfg.heartbeat_ms * 1000000ull;
	uint64_t dead_ns = (uint64_t)t->cfg.liveness_timeout_ms * 1000000ull;
	uint64_t next_beat = 0;
	struct pollfd pf[MAX_CLIENTS + 2];

	while (!tb_atomic_load_seq_cst(&t->stop)) { /* S1 pairs with S1 in rc_tx_close */
		uint64_t now;
		int n = 0;

		pf[n++] = (struct pollfd){.fd = t->listen_fd, .events = POLLIN};
		pf[n++] = (struct pollfd){.fd = t->wake_fd, .events = POLLIN};
		for (int i = 0; i < t->n_clients; i++)
			pf[n++] = (struct pollfd){.fd = t->clients[i].fd, .events = POLLIN};
		poll(pf, (nfds_t)n, TB_RC_CTL_TICK_MS);
		if (pf[0].revents)
			accept_clients(t);
		now = tb_clock_now_ns();
		for (int i = t->n_clients - 1; i >= 0; i--) {
			rc_client_t *c = &t->clients[i];
			tb_control_msg_t m;
			int rc;

			while ((rc = tb_rc_ctl_read(c->fd, &c->in, &m, 0)) == 1) {
				c->last_rx_ns = now;
				if ((rc = client_message(t, c, &m)) < 0)
					break;
			}
			if (rc < 0 && rc != TB_CLOSED && c->state != CLIENT_LIVE &&
			    rc != -1)
				reject(t, c, TB_CONTROL_REJ_MALFORMED, tb_errmsg());
			if (rc < 0)
				client_drop(t, i, 0, "its control connection ended");
			else if (c->sub && /* A1 pairs with R1 in sub_reap, sub_fence, sub_write */
				 tb_atomic_load_acquire(&c->sub->dead))
				client_drop(t, i, TB_CONTROL_BYE_ERROR,
					    c->sub->why_dead ? c->sub->why_dead
							     : "a write failed");
			else if (now - c->last_rx_ns > dead_ns)
				client_drop(t, i, TB_CONTROL_BYE_TIMEOUT,
					    "silent for longer than liveness_timeout_ms");
		}
		if (now >= next_beat) {
			heartbeat_all(t, now, tb_atomic_load_relaxed(&t->last_seq)); /* V1 */
			next_beat = now + beat_ns;
		}
	}
	return NULL;
}

/* ------------------------------------------------ publisher: open, close */

static int listen_on(rc_tx_t *t)
{
	int fd;

	if (!t->cfg.control.port)
		return tb_error_set(TB_ECONFIG, "an rc stream needs `control = "
				  "host:port`");
	fd = tb_net_listen(&t->cfg.control, NULL);
	if (fd < 0)
		return tb_error_prepend(fd, "control endpoint");
	t->listen_fd = fd;
	return 0;
}

static void rc_tx_free(rc_tx_t *t)
{
	if (t->table) {
		for (int i = 0; i < t->table->n; i++)
			sub_free(t, t->table->sub[i]);
		free(t->table);
	}
	for (int i = 0; i < t->n_clients; i++)
		close(t->clients[i].fd);
	if (t->listen_fd >= 0)
		close(t->listen_fd);
	if (t->wake_fd >= 0)
		close(t->wake_fd);
	if (t->ring_mr)
		ibv_dereg_mr(t->ring_mr);
	tb_verbs_close(&t->dev);
	tb_mem_free(&t->ring_mem);
	tb_mem_free(&t->slot_mem);
	free(t);
}

static int rc_tx_open(tb_tx_t **out, const tb_stream_cfg_t *cfg, uint64_t epoch)
{
	int node = cfg->publisher_core >= 0 ? tb_mem_node_of_core(cfg->publisher_core) : -1;
	rc_tx_t *t = calloc(1, sizeof(*t));
	int rc;

	if (!t)
		return tb_error_set(TB_ENOMEM, "out of memory");
	t->listen_fd = t->wake_fd = -1;
	t->cfg = *cfg;
	t->epoch = epoch;
	t->psn = tb_verbs_psn_random();
	t->size = cfg->ring_size;
	t->backpressure = cfg->slow_consumer == TB_SLOW_BACKPRESSURE;
	t->table = calloc(1, sizeof(*t->table));
	if (!t->table) {
		free(t);
		return tb_error_set(TB_ENOMEM, "out of memory");
	}
	if ((rc = tb_verbs_open(&t->dev, cfg, TB_RC_CTL_NO_IB)) < 0 ||
	    (rc = tb_mem_alloc(&t->ring_mem, cfg->ring_size, node, 0)) < 0 ||
	    (rc = tb_mem_alloc(&t->slot_mem, TB_RC_MAX_SUBS * TB_RC_SLOT_SIZE,
			       node, 0)) < 0)
		goto fail;
	t->ring_mr = ibv_reg_mr(t->dev.pd, t->ring_mem.addr, cfg->ring_size,
				IBV_ACCESS_LOCAL_WRITE);
	if (!t->ring_mr) {
		rc = tb_error_sys(errno, "ibv_reg_mr (ring, %llu bytes)",
				(unsigned long long)cfg->ring_size);
		goto fail;
	}
	t->lkey = t->ring_mr->lkey;
	tb_ring_init(&t->base.ring, t->ring_mem.addr, cfg->ring_size, cfg->id);
	t->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (t->wake_fd < 0) {
		rc = tb_error_sys(errno, "eventfd");
		goto fail;
	}
	if ((rc = listen_on(t)) < 0)
		goto fail;
	rc = pthread_create(&t->ctl, NULL, ctl_main, t);
	if (rc != 0) {
		rc = tb_error_sys(rc, "start the control thread");
		goto fail;
	}
	t->ctl_started = 1;
	t->base.ops = t->backpressure ? &tb_rc_bp_tx_ops : &tb_rc_tx_ops;
	*out = &t->base;
	tb_info("stream '%s': rc publisher on %s port %u (gid index %d), control "
		"%s:%u", cfg->name, t->dev.name,
		t->dev.port, t->dev.gid_index, cfg->control.host, cfg->control.port);
	return 0;
fail:
	rc_tx_free(t);
	return rc;
}

/* Waits until everything posted to `s` has completed, so the last frames
 * are in its ring before BYE tells it the stream ended. */
static void sub_drain(rc_sub_t *s)
{
	struct ibv_send_wr wr = {.opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = {.remote_addr = s->raddr, .rkey = s->rkey}};
	struct ibv_send_wr *bad;
	uint64_t until = tb_clock_now_ns() + DRAIN_TIMEOUT_NS;

	if (tb_atomic_load_acquire(&s->dead)) /* A1 pairs with R1 in sub_reap, ... */
		return;
	while (s->posted - s->completed + 1 > TB_RC_SQ_DEPTH &&
	       tb_clock_now_ns() < until && sub_reap(s) == 0)
		usleep(100);
	wr.wr_id = s->posted + 1;
	if (ibv_post_send(s->qp, &wr, &bad) != 0)
		return;
	s->posted++;
	while (s->completed != s->posted && tb_clock_now_ns() < until &&
	       sub_reap(s) == 0)
		usleep(100);
}

static void rc_tx_close(tb_tx_t *tx, uint64_t final_seq)
{
	rc_tx_t *t = (rc_tx_t *)tx;
	uint64_t one = 1;

	tb_atomic_store_seq_cst(&t->stop, 1); /* S1 pairs with S1 in ctl_main */
	if (write(t->wake_fd, &one, sizeof(one)) < 0)
		(void)0;
	if (t->ctl_started)
		pthread_join(t->ctl, NULL);
	for (int i = 0; i < t->table->n; i++)
		sub_drain(t->table->sub[i]);
	/* The end: the last sequence, then BYE, to everyone still here. */
	heartbeat_all(t, tb_clock_now_ns(), final_seq);
	while (t->n_clients)
		client_drop(t, t->n_clients - 1, TB_CONTROL_BYE_CLOSED,
			    "the stream closed");
	rc_tx_free(t);
}

/* A lapping stream never asks for room: a slow subscriber is skipped. */
const tb_tx_ops_t tb_rc_tx_ops = {
	.name = "rc",
	.open = rc_tx_open,
	.room = NULL,
	.send = rc_tx_send,
	.flush = NULL,
	.beat = rc_tx_beat,
	.close = rc_tx_close,
};

/* Back-pressure streams ask for room before every claim. */
const tb_tx_ops_t tb_rc_bp_tx_ops = {
	.name = "rc",
	.open = rc_tx_open,
	.room = rc_tx_room,
	.send = rc_tx_send,
	.flush = NULL,
	.beat = rc_tx_beat,
	.close = rc_tx_close,
};

