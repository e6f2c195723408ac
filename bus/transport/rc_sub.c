/*
 * transport/rc_sub.c - the rc transport's subscriber (the design is in
 * transport/rc.h).
 *
 * The control thread connects (and reconnects), creates the queue pair,
 * posts the first receives, runs HELLO / SUBSCRIBE / ACCEPT, brings the QP
 * up along the path ACCEPT names and says READY, then hands the ready
 * session to the polling thread through a generation number.  From then on
 * only the polling thread touches that queue pair, until it releases it;
 * then the control thread may destroy it and start the next session.
 *
 * The control thread also decides what the connection's state is: it reads
 * the publisher's heartbeats and BYE, and its device's asynchronous events,
 * and it alone judges the publisher dead (no heartbeat for
 * liveness_timeout_ms, after it has read everything the socket holds), so
 * that a subscriber that was itself stopped or starved does not blame a
 * publisher whose BYE is waiting in its socket.  The polling thread only
 * reports the state it finds, once, at its place in the stream.
 *
 * Edges between the two threads (barrier.h):
 *   R2 -> A2  session_open fills `sess` (and remakes `cq` if it broke),
 *             then bumps gen; rc_rx_poll sees the new gen and adopts it.
 *   R3 -> A3  rx_release lets go of the QP and CQ; rx_ctl_main may then
 *             destroy them and connect again.
 *   S4        ctl_state, the connection's state, which both threads
 *             change (sequentially consistent).  rx_idle's acquire read
 *             (A4) also carries pub_last_seq, stored before BYE's CLOSED.
 *   S5        rc_rx_close stops rx_ctl_main.
 *   S6        cq_broken: the poller found the CQ overrun; the control
 *             thread makes a new one before the next session.
 *   L1 -> L2  the range the publisher says it skipped us for, from its
 *             heartbeats: a seqlock the control thread writes and rx_idle
 *             reads.
 *   V         last_beat_ns, pub_last_seq: values on their own (relaxed),
 *             carried by the edges above where their order matters.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "bus/transport/rc.h"

#include "bus/barrier.h"
#include "bus/clock.h"
#include "bus/counters.h"
#include "bus/error.h"
#include "bus/frame.h"
#include "bus/mem.h"
#include "bus/memlock.h"
#include "bus/net.h"
#include "bus/transport/control.h"
#include "bus/transport/rc_ctl.h"
#include "bus/transport/verbs.h"
#include "bus/transport/verbs_events.h"

#include <endian.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CONNECT_TIMEOUT_MS 500u   /* the publisher's control endpoint */
#define REPLY_TIMEOUT_MS 3000u    /* ACCEPT or REJECT after SUBSCRIBE */
#define CQ_BATCH 32               /* completions taken per ibv_poll_cq */
#define SUB_SQ_DEPTH 64u          /* credit writes in flight */
#define SUB_SIGNAL_EVERY 16u      /* one signalled credit write in this many */
#define SUB_INLINE 8u             /* the credit, inline */
#define SUB_CQE ((TB_RC_RECV_DEPTH + SUB_SQ_DEPTH) * 2)

#define SEND TB_RC_CTL_SEND

enum {
	CTL_CONNECTING,
	CTL_LIVE,
	CTL_CLOSED,     /* BYE: the stream closed */
	CTL_LOST,       /* the publisher stopped answering, or the QP failed */
	CTL_EVICTED,    /* BYE: the publisher dropped us; it is alive */
	CTL_REJECTED,   /* for good: a wrong token or another version */
	CTL_RECONNECT,  /* our own side broke (QP, CQ, address): a new
			 * session; the publisher is not to blame */
};

typedef struct rc_session {
	struct ibv_qp *qp;
	uint64_t epoch;
	uint64_t credit_addr;
	uint32_t credit_rkey;
	uint64_t next_seq;
} rc_session_t;

typedef struct rc_rx {
	tb_rx_t base;
	/* Hot: the polling thread. */
	struct ibv_cq *cq;
	struct ibv_qp *qp;          /* of the adopted session; NULL = none */
	uint8_t *ring;
	uint64_t mask;
	uint64_t cpos;              /* consumed up to (free-running) */
	uint64_t credited;          /* cpos when credit was last returned */
	uint32_t regranted;         /* receives re-posted beyond the first */
	uint32_t recv_owed;         /* consumed, not yet re-posted */
	uint64_t credit_addr;
	uint32_t credit_rkey;
	uint64_t cposted, ccompleted, clast_signal;
	int wc_n, wc_i;
	_Atomic int cq_broken;      /* overrun: remade before the next session
				     * (S6, both threads) */
	uint32_t idle_polls;
	uint64_t epoch;
	uint64_t seen_gen;
	uint32_t stream_id;
	struct ibv_wc wc[CQ_BATCH];
	struct ibv_recv_wr rwr[TB_RC_RECV_BATCH];
	/* Shared with the control thread (the edges are listed above). */
	_Atomic uint64_t gen;       /* R2: bumped when `sess` is ready */
	_Atomic uint64_t released;  /* R3: last gen the poller let go of */
	_Atomic int ctl_state;      /* S4: CTL_*, both threads change it */
	_Atomic uint64_t last_beat_ns;  /* V: the last heartbeat's arrival */
	_Atomic uint64_t pub_last_seq;  /* V: the last sequence it announced */
	_Atomic uint64_t skip_lock;     /* L1: odd while skip_* change */
	_Atomic uint64_t skip_first;    /* the range it says it skipped us */
	_Atomic uint64_t skip_last;     /* for; 0 and 0 = none */
	_Atomic int stop;           /* S5 */
	rc_session_t sess;          /* published by R2 */
	int reject_code;            /* with CTL_REJECTED: what poll returns */
	/* Cold: the control thread. */
	tb_verbs_dev_t dev;
	tb_mem_t ring_mem;
	struct ibv_mr *ring_mr;
	tb_stream_cfg_t cfg;
	uint64_t dead_ns;
	pthread_t ctl;
	int ctl_started;
	int fd;
	tb_rc_ctl_in_t in;
	struct ibv_qp *old_qp;      /* waiting for the poller to release it */
	uint64_t old_gen;
	char reject_text[TB_CONTROL_TEXT_LEN + 160];
} rc_rx_t;

/* Posts `n` receives, TB_RC_RECV_BATCH to a call.  0, or the errno value
 * ibv_post_recv returned. */
static int post_recvs(rc_rx_t *r, struct ibv_qp *qp, uint32_t n)
{
	struct ibv_recv_wr *bad;

	while (n) {
		uint32_t k = n < TB_RC_RECV_BATCH ? n : TB_RC_RECV_BATCH;
		int e;

		r->rwr[k - 1].next = NULL;
		e = ibv_post_recv(qp, r->rwr, &bad);
		r->rwr[k - 1].next = k < TB_RC_RECV_BATCH ? &r->rwr[k] : NULL;
		if (e != 0)
			return e;
		n -= k;
	}
	return 0;
}

static void ctl_close_fd(rc_rx_t *r)
{
	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
	r->in.have = 0;
}

/* S4: LIVE -> `to`, unless the state is already something else (a BYE's
 * EVICTED or CLOSED is never overwritten by what follows from it). */
static void ctl_leave_live(rc_rx_t *r, int to)
{
	int live = CTL_LIVE;

	tb_atomic_cas_acq_rel(&r->ctl_state, &live, to); /* S4 */
}

/* L1: the control thread records the skipped range of a heartbeat. */
static void skip_store(rc_rx_t *r, uint64_t first, uint64_t last)
{
	uint64_t v = tb_atomic_load_relaxed(&r->skip_lock);  /* our own */

	tb_atomic_store_relaxed(&r->skip_lock, v + 1);
	tb_atomic_fence_release();   /* L1: odd before the values */
	tb_atomic_store_relaxed(&r->skip_first, first);
	tb_atomic_store_relaxed(&r->skip_last, last);
	tb_atomic_store_release(&r->skip_lock, v + 2);  /* L1: values before even */
}

/* L2 pairs with L1 in skip_store: the range as one pair; 0 when it is
 * changing now (the next idle poll looks again). */
static void skip_load(rc_rx_t *r, uint64_t *first, uint64_t *last)
{
	uint64_t v = tb_atomic_load_acquire(&r->skip_lock);  /* L2 */

	*first = tb_atomic_load_relaxed(&r->skip_first);
	*last = tb_atomic_load_relaxed(&r->skip_last);
	tb_atomic_fence_acquire();   /* L2: the values before the re-read */
	if ((v & 1) || tb_atomic_load_relaxed(&r->skip_lock) != v)
		*first = *last = 0;
}

/* Stops the subscriber for good with `code` (TB_EAUTH, TB_EFORMAT) and the
 * reason in reject_text. */
static int session_refused(rc_rx_t *r, int code)
{
	tb_warn("stream '%s': %s", r->cfg.name, r->reject_text);
	r->reject_code = code;
	tb_atomic_store_seq_cst(&r->ctl_state, CTL_REJECTED); /* S4 */
	return code;
}

/* What the publisher answered when it was not a message of ours: a
 * refusal in another version (control.h), told with which side to
 * upgrade. */
static int session_other_version(rc_rx_t *r)
{
	tb_control_msg_t m;

	if (tb_control_decode_refusal(r->in.buf, r->in.have, &m) < 0 ||
	    m.type != TB_CONTROL_REJECT)
		return TB_EPROTO;
	snprintf(r->reject_text, sizeof(r->reject_text), "the publisher speaks "
		 "control protocol version %u (an older tickbus) and this "
		 "subscriber version %u: upgrade tickbus on the publisher's "
		 "host; it said: %s", m.version, TB_CONTROL_VERSION, m.reject.text);
	return session_refused(r, TB_EFORMAT);
}

/* One attempt: connect, new QP, HELLO + SUBSCRIBE, ACCEPT, QP up, READY. */
static int session_open(rc_rx_t *r)
{
	tb_control_hello_t h = {.stream_id = r->cfg.id};
	tb_control_subscribe_t s = {
		.stream_id = r->cfg.id, .transport = TB_TRANSPORT_RC,
		.mtu = (uint8_t)r->dev.mtu, .flags = TB_CONTROL_SUB_F_CREDIT_SLOT,
		.ring_addr = (uintptr_t)r->ring, .ring_len = r->mask + 1,
		.rkey = r->ring_mr->rkey, .recv_depth = TB_RC_RECV_DEPTH,
		.lid = r->dev.lid,
	};
	tb_verbs_qp_cfg_t qc = {
		.type = IBV_QPT_RC, .cq = r->cq, .send_wr = SUB_SQ_DEPTH,
		.recv_wr = TB_RC_RECV_DEPTH, .send_sge = 1,
		.inline_want = SUB_INLINE, .inline_min = SUB_INLINE,
		.access = IBV_ACCESS_REMOTE_WRITE,
		.send_ops = IBV_QP_EX_WITH_RDMA_WRITE,
	};
	tb_verbs_peer_t peer = {0};
	tb_verbs_path_t path;
	tb_control_ready_t ready = {.stream_id = r->cfg.id};
	uint32_t psn = tb_verbs_psn_random();
	struct ibv_qp *qp;
	tb_control_msg_t m;
	int rc, e;

	if ((rc = tb_net_dial(&r->cfg.control, CONNECT_TIMEOUT_MS)) < 0)
		return rc;
	r->fd = rc;
	qp = tb_verbs_qp_create(&r->dev, &qc, NULL);
	if (!qp) {
		tb_warn("stream '%s': %s", r->cfg.name, tb_errmsg());
		ctl_close_fd(r);
		return TB_ESYS;
	}
	if ((e = post_recvs(r, qp, TB_RC_RECV_DEPTH)) != 0) {
		rc = tb_error_sys(e, "ibv_post_recv");
		goto fail;
	}
	snprintf(h.client_id, sizeof(h.client_id), "pid-%d", (int)getpid());
	snprintf(h.token, sizeof(h.token), "%s", r->cfg.token[0] ? r->cfg.token : "none");
	s.qpn = qp->qp_num;
	memcpy(s.gid, r->dev.gid.raw, 16);
	s.psn = psn;
	if ((rc = SEND(r->fd, hello, &h)) < 0 || (rc = SEND(r->fd, subscribe, &s)) < 0)
		goto fail;
	rc = tb_rc_ctl_read(r->fd, &r->in, &m, REPLY_TIMEOUT_MS);
	if (rc == 0)
		rc = tb_error_set(TB_ETIMEDOUT, "control: no answer within %u ms",
				  REPLY_TIMEOUT_MS);
	if (rc == TB_EFORMAT) {
		rc = session_other_version(r);
		goto fail;
	}
	if (rc == 1 && m.type == TB_CONTROL_REJECT) {
		snprintf(r->reject_text, sizeof(r->reject_text), "the publisher "
			 "rejected this subscriber: %s (reason %u, %s)",
			 m.reject.text, m.reject.reason,
			 tb_control_reject_name(m.reject.reason));
		if (m.reject.reason == TB_CONTROL_REJ_BAD_TOKEN)
			rc = session_refused(r, TB_EAUTH);
		else if (m.reject.reason == TB_CONTROL_REJ_BAD_VERSION)
			rc = session_refused(r, TB_EFORMAT);
		else {
			tb_warn("stream '%s': %s", r->cfg.name, r->reject_text);
			rc = TB_ESTATE;
		}
		goto fail;
	}
	if (rc != 1 || m.type != TB_CONTROL_ACCEPT) {
		rc = rc < 0 ? rc : TB_EPROTO;
		goto fail;
	}
	if (m.accept.mtu > r->dev.mtu) {
		rc = tb_error_set(TB_EPROTO, "control: the publisher chose a path "
				  "MTU of %u, above this port's %u",
				  tb_verbs_mtu_bytes((enum ibv_mtu)m.accept.mtu),
				  tb_verbs_mtu_bytes(r->dev.mtu));
		goto fail;
	}
	/* The publisher's path, our own ACK timeout and retries. */
	path = tb_verbs_path_of(&r->cfg, (enum ibv_mtu)m.accept.mtu);
	path.sl = m.accept.sl;
	path.traffic_class = m.accept.traffic_class;
	peer.qpn = m.accept.qpn;
	peer.psn = m.accept.psn;
	peer.lid = m.accept.lid;
	memcpy(peer.gid, m.accept.gid, sizeof(peer.gid));
	if ((rc = tb_verbs_rc_connect(&r->dev, qp, &peer, psn, &path)) < 0)
		goto fail;
	/* In RTR (and RTS): the publisher may write now. */
	ready.qpn = qp->qp_num;
	if ((rc = SEND(r->fd, ready, &ready)) < 0)
		goto fail;
	r->sess = (rc_session_t){.qp = qp, .epoch = m.accept.epoch,
				 .credit_addr = m.accept.credit_addr,
				 .credit_rkey = m.accept.credit_rkey,
				 .next_seq = m.accept.next_seq};
	skip_store(r, 0, 0);
	tb_atomic_store_relaxed(&r->last_beat_ns, tb_clock_now_ns()); /* by R2 */
	tb_atomic_store_seq_cst(&r->ctl_state, CTL_LIVE);              /* S4 */
	/* R2 pairs with A2 in rc_rx_poll and rx_adopt: sess is ready. */
	tb_atomic_fetch_add_release(&r->gen, 1);
	return 0;
fail:
	ibv_destroy_qp(qp);
	ctl_close_fd(r);
	return rc;
}

/* The device's asynchronous events: our QP or CQ failing ends the session
 * (a new one follows); a change of our own address too. */
static void rx_device_events(rc_rx_t *r)
{
	tb_verbs_event_t ev;

	while (tb_verbs_events_next(&r->dev, &ev) == 1) {
		const char *name = tb_verbs_event_name(&ev);

		switch (ev.kind) {
		case TB_VERBS_EV_QP_FATAL:
			if (!ev.qp || ev.qp != r->sess.qp)
				break;
			tb_warn("stream '%s': the queue pair failed (%s); "
				"reconnecting", r->cfg.name, name);
			/* A request error or an access error is the peer's
			 * doing: the publisher broke its side.  A fatal
			 * error is ours. */
			ctl_leave_live(r, ev.type == IBV_EVENT_QP_FATAL
					       ? CTL_RECONNECT : CTL_LOST);
			break;
		case TB_VERBS_EV_CQ_ERR:
			if (ev.cq && ev.cq == r->cq) {
				tb_atomic_store_seq_cst(&r->cq_broken, 1); /* S6 */
				ctl_leave_live(r, CTL_RECONNECT);
			}
			break;
		case TB_VERBS_EV_PORT_DOWN:
			if (tb_verbs_event_on_port(&r->dev, &ev))
				tb_warn("stream '%s': %s port %u is down",
					r->cfg.name, r->dev.name, r->dev.port);
			break;
		case TB_VERBS_EV_PORT_UP:
			if (tb_verbs_event_on_port(&r->dev, &ev))
				tb_info("stream '%s': %s port %u is active again",
					r->cfg.name, r->dev.name, r->dev.port);
			break;
		case TB_VERBS_EV_ADDR_CHANGE:
			if (tb_verbs_event_on_port(&r->dev, &ev) &&
			    tb_verbs_refresh(&r->dev) != 0) {
				tb_warn("stream '%s': our address changed (%s); "
					"reconnecting from the new one",
					r->cfg.name, name);
				ctl_leave_live(r, CTL_RECONNECT);
			}
			break;
		case TB_VERBS_EV_DEVICE_FATAL:
			tb_warn("stream '%s': %s failed (%s)", r->cfg.name,
				r->dev.name, name);
			ctl_leave_live(r, CTL_RECONNECT);
			break;
		default:
			break;
		}
	}
}

/* The live connection: heartbeats and BYE in, heartbeats out, and the
 * publisher's liveness judged once the socket is read. */
static void rx_ctl_live(rc_rx_t *r, uint64_t beat_ns, uint64_t *next_beat)
{
	tb_control_msg_t m;
	uint32_t wait = TB_RC_CTL_TICK_MS;
	uint64_t now;
	int rc;

	while ((rc = tb_rc_ctl_read(r->fd, &r->in, &m, wait)) == 1) {
		wait = 0;
		if (m.type == TB_CONTROL_HEARTBEAT) {
			/* V, relaxed: values; CLOSED (S4, below) publishes
			 * the last one to rx_idle's A4. */
			tb_atomic_store_relaxed(&r->pub_last_seq, m.heartbeat.last_seq);
			tb_atomic_store_relaxed(&r->last_beat_ns, tb_clock_now_ns());
			skip_store(r, m.heartbeat.skip_first, m.heartbeat.skip_last);
		} else if (m.type == TB_CONTROL_BYE) {
			/* S4, pairs with A4 in rx_idle. */
			if (m.bye.reason == TB_CONTROL_BYE_CLOSED) {
				tb_atomic_store_seq_cst(&r->ctl_state, CTL_CLOSED);
			} else {
				tb_warn("stream '%s': the publisher dropped this "
					"subscriber (%s); reconnecting",
					r->cfg.name, tb_control_bye_name(m.bye.reason));
				ctl_leave_live(r, CTL_EVICTED);
			}
			break;
		}
	}
	if (rc < 0)
		ctl_leave_live(r, CTL_LOST);
	rx_device_events(r);
	now = tb_clock_now_ns();
	/* Everything the socket held is read: a heartbeat this old means
	 * the publisher stopped, not that we did. */
	if (tb_atomic_load_seq_cst(&r->ctl_state) == CTL_LIVE &&
	    now - tb_atomic_load_relaxed(&r->last_beat_ns) > r->dead_ns) {
		tb_warn("stream '%s': no heartbeat from the publisher for %u ms",
			r->cfg.name, r->cfg.liveness_timeout_ms);
		ctl_leave_live(r, CTL_LOST);
	}
	if (tb_atomic_load_seq_cst(&r->ctl_state) == CTL_LIVE && now >= *next_beat) {
		tb_control_heartbeat_t hb = {.timestamp_ns = now};

		SEND(r->fd, heartbeat, &hb);
		*next_beat = now + beat_ns;
	}
	if (tb_atomic_load_seq_cst(&r->ctl_state) != CTL_LIVE) /* S4 */
		ctl_close_fd(r);
}

static void *rx_ctl_main(void *arg)
{
	rc_rx_t *r = arg;
	uint64_t beat_ns = (uint64_t)r->cfg.heartbeat_ms * 1000000ull;
	uint64_t next_beat = 0;

	while (!tb_atomic_load_seq_cst(&r->stop)) { /* S5 pairs with S5 in rc_rx_close */
		int st = tb_atomic_load_seq_cst(&r->ctl_state);   /* S4 */

		/* A3 pairs with R3 in rx_release: the poller is done with it. */
		if (r->old_qp && tb_atomic_load_acquire(&r->released) >= r->old_gen) {
			ibv_destroy_qp(r->old_qp);
			r->old_qp = NULL;
		}
		if (st == CTL_REJECTED) {
			usleep(TB_RC_CTL_TICK_MS * 1000);
			continue;
		}
		if (st == CTL_CONNECTING) {
			int rc;

			rx_device_events(r);
			if (r->old_qp) {   /* one session at a time */
				usleep(TB_RC_CTL_TICK_MS * 1000);
				continue;
			}
			/* S6 pairs with S6 in rc_rx_poll; the poller let go of
			 * the CQ with the session (A3 above). */
			if (tb_atomic_load_seq_cst(&r->cq_broken)) {
				struct ibv_cq *cq = ibv_create_cq(r->dev.ctx,
					(int)SUB_CQE, NULL, NULL, 0);

				if (!cq) {
					usleep(100 * 1000);
					continue;
				}
				tb_warn("stream '%s': completion queue overrun; "
					"reconnecting on a new one", r->cfg.name);
				ibv_destroy_cq(r->cq);
				r->cq = cq;   /* published by R2 with the session */
				tb_atomic_store_seq_cst(&r->cq_broken, 0); /* S6 */
			}
			rc = session_open(r);
			if (rc < 0 && tb_atomic_load_seq_cst(&r->ctl_state) !=
					      CTL_REJECTED)
				usleep(100 * 1000);
			continue;
		}
		if (r->fd >= 0) {
			rx_ctl_live(r, beat_ns, &next_beat);
			continue;
		}
		/* CLOSED, LOST, EVICTED or RECONNECT with the socket gone:
		 * wait for the poller to release the session, then connect
		 * again (a publisher that restarts is a new epoch).  gen is this
		 * thread's own (R2). */
		if (tb_atomic_load_acquire(&r->released) >=   /* A3 pairs with R3 */
		    tb_atomic_load_relaxed(&r->gen)) {
			r->old_qp = r->sess.qp;
			r->old_gen = tb_atomic_load_relaxed(&r->gen);
			r->sess.qp = NULL;
			tb_atomic_store_seq_cst(&r->ctl_state, CTL_CONNECTING); /* S4 */
		} else {
			usleep(TB_RC_CTL_TICK_MS * 1000);
		}
	}
	ctl_close_fd(r);
	return NULL;
}

static void rc_rx_free(rc_rx_t *r)
{
	if (r->sess.qp)
		ibv_destroy_qp(r->sess.qp);
	if (r->old_qp && r->old_qp != r->sess.qp)
		ibv_destroy_qp(r->old_qp);
	if (r->cq)
		ibv_destroy_cq(r->cq);
	if (r->ring_mr)
		ibv_dereg_mr(r->ring_mr);
	tb_verbs_close(&r->dev);
	tb_mem_free(&r->ring_mem);
	free(r);
}

/* What a subscriber pins: its ring's registration, its CQ and its QP. */
static int rx_memlock(const tb_stream_cfg_t *cfg)
{
	char what[TB_NAME_MAX + 96];

	snprintf(what, sizeof(what), "stream '%s': an rc subscriber (its ring "
		 "of %llu bytes and its queues)", cfg->name,
		 (unsigned long long)cfg->ring_size);
	return tb_memlock_check(tb_memlock_mr_bytes(NULL, cfg->ring_size) +
				tb_memlock_cq_bytes(SUB_CQE) +
				tb_memlock_qp_bytes(TB_MEMLOCK_WQE_RC_WRITE,
						    SUB_SQ_DEPTH, SUB_INLINE, 1,
						    TB_RC_RECV_DEPTH), what);
}

static int rc_rx_open(tb_rx_t **out, const tb_stream_cfg_t *cfg)
{
	int node = cfg->subscriber_core >= 0 ? tb_mem_node_of_core(cfg->subscriber_core) : -1;
	rc_rx_t *r = calloc(1, sizeof(*r));
	char what[TB_NAME_MAX + 32];
	int rc;

	if (!r)
		return tb_error_set(TB_ENOMEM, "out of memory");
	r->fd = -1;
	r->cfg = *cfg;
	r->stream_id = cfg->id;
	r->mask = cfg->ring_size - 1;
	r->dead_ns = (uint64_t)cfg->liveness_timeout_ms * 1000000ull;
	for (uint32_t i = 0; i < TB_RC_RECV_BATCH; i++)
		r->rwr[i].next = i + 1 < TB_RC_RECV_BATCH ? &r->rwr[i + 1] : NULL;
	if (!cfg->control.port) {
		free(r);
		return tb_error_set(TB_ECONFIG, "an rc stream needs `control = host:port`");
	}
	if ((rc = tb_verbs_open(&r->dev, cfg, NULL)) < 0 ||
	    (rc = rx_memlock(cfg)) < 0 ||
	    (rc = tb_mem_alloc(&r->ring_mem, cfg->ring_size, node, 0)) < 0 ||
	    (rc = tb_verbs_events_init(&r->dev)) < 0)
		goto fail;
	snprintf(what, sizeof(what), "stream '%s' (rc subscriber)", cfg->name);
	tb_verbs_numa_check(&r->dev, r->ring_mem.numa_node, what);
	r->ring = r->ring_mem.addr;
	/* Remote write on the ring alone: nothing else of ours is exposed. */
	r->ring_mr = ibv_reg_mr(r->dev.pd, r->ring, cfg->ring_size,
				IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!r->ring_mr) {
		rc = tb_error_sys(errno, "ibv_reg_mr (ring, %llu bytes)",
				(unsigned long long)cfg->ring_size);
		goto fail;
	}
	r->cq = ibv_create_cq(r->dev.ctx, (int)SUB_CQE, NULL, NULL, 0);
	if (!r->cq) {
		rc = tb_error_sys(errno, "ibv_create_cq");
		goto fail;
	}
	rc = pthread_create(&r->ctl, NULL, rx_ctl_main, r);
	if (rc != 0) {
		rc = tb_error_sys(rc, "start the control thread");
		goto fail;
	}
	r->ctl_started = 1;
	r->base.ops = &tb_rc_rx_ops;
	*out = &r->base;
	return 0;
fail:
	rc_rx_free(r);
	return rc;
}

static void rc_rx_close(tb_rx_t *rx)
{
	rc_rx_t *r = (rc_rx_t *)rx;

	tb_atomic_store_seq_cst(&r->stop, 1); /* S5 pairs with S5 in rx_ctl_main */
	if (r->ctl_started)
		pthread_join(r->ctl, NULL);
	if (r->fd >= 0) {
		tb_control_bye_t b = {.reason = TB_CONTROL_BYE_NORMAL};

		SEND(r->fd, bye, &b);
	}
	ctl_close_fd(r);
	rc_rx_free(r);
}

static uint64_t rc_rx_epoch(const tb_rx_t *rx)
{
	return ((const rc_rx_t *)rx)->epoch;
}

/* Lets go of the session: the control thread may destroy its QP. */
static void rx_release(rc_rx_t *r)
{
	r->qp = NULL;
	r->wc_n = r->wc_i = 0;
	/* R3 pairs with A3 in rx_ctl_main: the QP and the CQ are its now. */
	tb_atomic_store_release(&r->released, r->seen_gen);
}

/* Takes over a session the control thread made ready. */
static int rx_adopt(rc_rx_t *r, tb_seq_t *seq)
{
	uint64_t epoch = r->sess.epoch;

	/* A2 pairs with R2 in session_open: sess is complete. */
	r->seen_gen = tb_atomic_load_acquire(&r->gen);
	if (!r->sess.qp)
		return 0;
	r->qp = r->sess.qp;
	r->credit_addr = r->sess.credit_addr;
	r->credit_rkey = r->sess.credit_rkey;
	r->cpos = r->credited = 0;
	r->regranted = r->recv_owed = 0;
	r->cposted = r->ccompleted = r->clast_signal = 0;
	r->wc_n = r->wc_i = 0;
	r->idle_polls = 0;
	if (r->epoch && r->epoch != epoch) {
		r->epoch = epoch;
		tb_seq_init(seq, 0);
		return TB_NEW_EPOCH;
	}
	r->epoch = epoch;
	return 0;
}

/* Re-posts consumed receives and tells the publisher where we are. */
static void rx_credit(rc_rx_t *r)
{
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad;
	uint64_t value;

	/* S4 read relaxed: a hint; a credit written after all is harmless. */
	if (tb_unlikely(tb_atomic_load_relaxed(&r->ctl_state) == CTL_CLOSED))
		return;   /* the publisher is gone: nobody reads credits */
	if (r->recv_owed) {
		if (post_recvs(r, r->qp, r->recv_owed) != 0)
			return;
		r->regranted += r->recv_owed;
		r->recv_owed = 0;
	}
	if (r->cposted - r->ccompleted + 1 >= SUB_SQ_DEPTH)
		return;   /* the next poll reaps, then we write */
	value = tb_rc_credit(r->cpos, r->regranted);
	sge = (struct ibv_sge){.addr = (uintptr_t)&value, .length = sizeof(value)};
	wr = (struct ibv_send_wr){
		.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_INLINE,
		.wr.rdma = {.remote_addr = r->credit_addr, .rkey = r->credit_rkey},
	};
	if (r->cposted + 1 - r->clast_signal >= SUB_SIGNAL_EVERY) {
		wr.send_flags |= IBV_SEND_SIGNALED;
		wr.wr_id = r->cposted + 1;
		r->clast_signal = r->cposted + 1;
	}
	if (ibv_post_send(r->qp, &wr, &bad) != 0)
		return;
	r->cposted++;
	r->credited = r->cpos;
}

/* Nothing to deliver: the connection's conditions, checked now and then. */
static int rx_idle(rc_rx_t *r, tb_seq_t *seq, tb_seq_range_t *loss)
{
	/* A4 pairs with S4 (CLOSED) in rx_ctl_main: the pub_last_seq of the
	 * heartbeat before BYE is seen below. */
	int st = tb_atomic_load_acquire(&r->ctl_state);
	uint64_t first, last;

	if (!r->qp) {
		if (st == CTL_REJECTED)
			return tb_error_set(r->reject_code, "stream '%s': %s",
					    r->cfg.name, r->reject_text);
		return TB_NOT_CONNECTED;
	}
	if (r->cpos != r->credited || r->recv_owed)
		rx_credit(r);
	/* Skipped, and the stream went quiet: every frame before the range
	 * is here (the CQ is empty and we expect its first), none of it
	 * ever will be. */
	skip_load(r, &first, &last);
	if (first && seq->expected == first) {
		tb_seq_gap_to(seq, last + 1, loss);
		return TB_LAPPED;
	}
	/* The end of the session only after a few hundred empty polls, so
	 * that no completion still on its way is left behind. */
	if (tb_likely(st == CTL_LIVE) || (++r->idle_polls & 255) != 0)
		return 0;
	switch (st) {
	case CTL_CLOSED: {
		uint64_t final = tb_atomic_load_relaxed(&r->pub_last_seq); /* by A4 */

		if (seq->expected && final >= seq->expected) {
			/* Frames it skipped us for at the very end. */
			tb_seq_gap_to(seq, final + 1, loss);
			return TB_LAPPED;
		}
		rx_release(r);
		return TB_CLOSED;
	}
	case CTL_EVICTED:
		rx_release(r);
		return TB_EVICTED;
	case CTL_RECONNECT:
		/* What goes missing meanwhile shows with the next frame. */
		rx_release(r);
		return TB_NOT_CONNECTED;
	case CTL_LOST:
		rx_release(r);
		return TB_PUBLISHER_DEAD;
	default:
		return 0;
	}
}

/* A completion that is not a frame: our credit writes, or an error. */
static int rx_other_wc(rc_rx_t *r, const struct ibv_wc *wc)
{
	if (wc->qp_num != r->qp->qp_num)
		return 0;            /* a released session's leftovers */
	if (wc->status == IBV_WC_SUCCESS) {
		if (wc->opcode == IBV_WC_RDMA_WRITE && wc->wr_id)
			r->ccompleted = wc->wr_id;
		return 0;
	}
	if (tb_atomic_load_seq_cst(&r->ctl_state) == CTL_CLOSED) /* S4 */
		return 0;   /* a credit the closed publisher never took, and
			     * the receives flushed after it */
	if (wc->status == IBV_WC_WR_FLUSH_ERR)
		return -1;  /* the QP is in error: whatever put it there
			     * (an error completion before this, an event
			     * the control thread reads, a BYE) decides */
	if (r->base.ctr)
		tb_counter_inc(r->base.ctr, TB_CTR_ERRORS);
	ctl_leave_live(r, CTL_LOST); /* S4: a BYE's state stays */
	return -1;
}

static int rc_rx_poll(tb_rx_t *rx, tb_seq_t *seq, tb_seq_range_t *loss,
		      tb_handler_t handler, void *clientd, int limit)
{
	rc_rx_t *r = (rc_rx_t *)rx;
	uint64_t size = r->mask + 1, now_ns;
	tb_msg_t msg;
	int n = 0;

	/* Hot path: no allocation, lock or system call. */
	/* A2 pairs with R2 in session_open. */
	if (tb_unlikely(r->seen_gen != tb_atomic_load_acquire(&r->gen))) {
		int rc = rx_adopt(r, seq);

		if (rc < 0)
			return rc;
	}
	if (tb_unlikely(!r->qp))
		return rx_idle(r, seq, loss);
	if (r->wc_i == r->wc_n) {
		r->wc_i = 0;
		r->wc_n = ibv_poll_cq(r->cq, CQ_BATCH, r->wc);
		if (tb_unlikely(r->wc_n <= 0)) {
			if (r->wc_n < 0) {
				/* The CQ is in error (overrun): completions were
				 * lost.  A new session on a new CQ follows, and
				 * the frames missed show as a lap. */
				tb_atomic_store_seq_cst(&r->cq_broken, 1); /* S6 */
				ctl_leave_live(r, CTL_LOST);               /* S4 */
			}
			r->wc_n = 0;
			return rx_idle(r, seq, loss);
		}
	}
	r->idle_polls = 0;
	now_ns = tb_clock_now_ns_inline();
	while (r->wc_i < r->wc_n && n < limit) {
		const struct ibv_wc *wc = &r->wc[r->wc_i];
		uint64_t off = r->cpos & r->mask;
		const tb_frame_hdr_t *f;
		uint32_t imm;

		if (tb_unlikely(wc->status != IBV_WC_SUCCESS ||
				wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM ||
				wc->qp_num != r->qp->qp_num)) {
			r->wc_i++;
			if (rx_other_wc(r, wc) < 0)
				break;
			continue;
		}
		imm = be32toh(wc->imm_data);
		if (tb_unlikely(tb_rc_imm_offset(imm) != off)) {
			/* The only other place it may be: the start, after a
			 * padding frame that fills our tail. */
			const tb_frame_hdr_t *p = (const tb_frame_hdr_t *)(r->ring + off);

			if (tb_rc_imm_offset(imm) != 0 || p->type != TB_FRAME_PAD ||
			    p->length != size - off)
				goto corrupt;
			r->cpos += size - off;
			off = 0;
		}
		f = (const tb_frame_hdr_t *)(r->ring + off);
		if (tb_unlikely(tb_frame_check(f, size - off) < 0 ||
				f->type != TB_FRAME_DATA || f->stream_id != r->stream_id ||
				f->length != wc->byte_len ||
				(f->seq & TB_RC_IMM_SEQ_MASK) != tb_rc_imm_seq_bits(imm)))
			goto corrupt;
		switch (tb_seq_admit(seq, f->seq)) {
		case TB_SEQ_NEXT:
			break;
		case TB_SEQ_DUPLICATE:
			goto consumed;
		case TB_SEQ_GAP:
			if (n > 0)
				goto out;         /* report the loss on its own */
			tb_seq_gap_to(seq, f->seq, loss);
			return TB_LAPPED;  /* rc is reliable: we were skipped */
		}
		tb_frame_to_msg(f, &msg);
		msg.receive_ns = now_ns;
		handler(clientd, &msg);
		n++;
consumed:
		r->cpos += tb_frame_space(f->length);
		r->recv_owed++;
		r->wc_i++;
		continue;
corrupt:
		/* Never happens with a tickbus publisher; drop the session
		 * rather than deliver garbage, and let it reconnect. */
		if (r->base.ctr)
			tb_counter_inc(r->base.ctr, TB_CTR_MALFORMED);
		tb_warn("stream '%s': frame at ring offset %llu does not match its "
			"completion; reconnecting", r->cfg.name,
			(unsigned long long)off);
		ctl_leave_live(r, CTL_LOST); /* S4 */
		r->wc_i++;
		break;
	}
out:
	if (r->recv_owed >= TB_RC_RECV_BATCH || r->cpos - r->credited >= size / 8)
		rx_credit(r);
	return n;
}

const tb_rx_ops_t tb_rc_rx_ops = {
	.name = "rc",
	.open = rc_rx_open,
	.poll = rc_rx_poll,
	.epoch = rc_rx_epoch,
	.close = rc_rx_close,
};
