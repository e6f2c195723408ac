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
 * A session that ends without the application being told of the
 * publisher's end (RECONNECT: our side broke; EVICTED: it dropped us) is
 * followed by CONNECTING at once, and CONNECTING alone never ends: a
 * publisher that died meanwhile refuses every dial.  So a publisher not
 * reached again within liveness_timeout_ms of the last word from it
 * (last_beat_ns) is judged dead as a silent one is (ctl_unreached):
 * the frames it said it had published beyond ours go up as lost, then
 * TB_PUBLISHER_DEAD, once for the break; then the dialling goes on, for
 * a publisher that restarts (a new epoch).
 *
 * Reading back (rc.h).  A gap the publisher made by skipping us is read
 * back by the polling thread itself, from the publisher's ring, before it
 * is reported: the frame that shows the gap stays where it is (in our ring
 * and in r->wc: the publisher cannot write over what we have not
 * credited), the READs go out, and the same poll collects them (rd_wait,
 * keeping every completion that arrives meanwhile, in order, behind that
 * frame), checks what landed (rd_parse), delivers it in place from the
 * buffer it landed in (rd_deliver) and goes on with the frame: the gap,
 * then the frame after it, in the poll that found the gap, whatever the
 * caller does between polls (spin-then-yield's yield, backoff's sleep).
 * That poll waits for its READs RD_WAIT_NS at most, about three times a
 * READ's round trip on a NIC; a READ slower than that (retried on the
 * wire) is collected by later polls, which return 0 while it is out.
 * Whatever cannot be read back is reported as the lap it is (rd_fail),
 * exactly as without read-back.
 *
 * Edges between the two threads (barrier.h):
 *   R2 -> A2  session_open fills `sess` (and remakes `cq` if it broke),
 *             then bumps gen; rc_rx_poll sees the new gen and adopts it.
 *   R3 -> A3  rx_release lets go of the QP and CQ; rx_ctl_main may then
 *             destroy them and connect again.
 *   S4        ctl_state, the connection's state, which both threads
 *             change (sequentially consistent).  rx_idle's acquire read
 *             (A4) also carries pub_last_seq, stored before BYE's CLOSED
 *             and before the LOST of a publisher gone silent.
 *   S5        rc_rx_close stops rx_ctl_main.
 *   S6        cq_broken: the poller found the CQ overrun; the control
 *             thread makes a new one before the next session.
 *   R7 -> A7  pub_dead set: the control thread, CONNECTING, judged the
 *             publisher it cannot reach again dead; rx_idle reports it,
 *             with the pub_last_seq stored before.
 *   R8 -> A8  pub_dead cleared: rx_idle has reported it and is done with
 *             pub_last_seq; the control thread dials again (no dial while
 *             it is set, so the report comes before a new session's).
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
#include "bus/thread.h"
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
/* Completions r->wc holds while a read-back is out: every receive that can
 * complete (the receives posted) and every request of ours, and a poll's
 * worth. */
#define WC_HOLD (TB_RC_RECV_DEPTH + SUB_SQ_DEPTH + CQ_BATCH)
/* A read-back's work requests carry this bit in wr_id, with the request's
 * place in the send queue (cposted) below it. */
#define RD_TAG (1ull << 63)
/* A read-back of a quiet stream's range, whose end is not known, reads
 * this many bytes a frame (and a page more) at first. */
#define RD_GUESS 128u
/* How long the poll that posts a read-back's READs waits for them (the top
 * of this file). */
#define RD_WAIT_NS 10000u

#define SEND TB_RC_CTL_SEND

enum {
	CTL_CONNECTING, /* dialling; after a session, until the publisher
			 * is reached or judged dead (pub_dead) */
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
	tb_control_accept_t grant; /* its read-back fields (flags, read_*,
				    * pos_*, ring_id) */
} rc_session_t;

enum {
	RD_IDLE,       /* no read-back */
	RD_READING,    /* a window's READs are out */
	RD_DELIVER,    /* a window checked; its frames being delivered */
	RD_FAILED,     /* what is left goes up as a lap at the next poll */
};

/* Reading back (rc.h, and the top of this file).  Polling thread only. */
typedef struct rc_read {
	/* The session's grant (rx_adopt); ok = 0: none. */
	int ok;
	uint64_t raddr;            /* the publisher's ring ... */
	uint64_t psize;            /* ... its size ... */
	uint32_t rkey;             /* ... and read key */
	uint64_t pos_addr;         /* its position word (intent) */
	uint32_t pos_rkey;
	uint64_t margin;           /* rd_margin of its size */
	uint64_t ring_id;          /* the ring r->pmirror follows */
	int mirror_ok;             /* r->pmirror follows it */
	/* The last anchor. */
	uint64_t anchor_seq;       /* the frame it came with */
	uint64_t gap_start;        /* r->pmirror before it ... */
	int gap_start_ok;          /* ... when that followed the ring */
	/* A read-back in progress. */
	int state;                 /* RD_* */
	int quiet;                 /* of a heartbeat's range (end unknown) */
	uint64_t next, last;       /* the sequences still to fill */
	uint64_t at;               /* where `next` (or a padding frame before
				    * it) starts in the publisher's ring */
	uint64_t end;              /* where [next, last] ends (the anchor of
				    * last + 1); 0: not known */
	uint64_t wstart;           /* the window read: ring position ... */
	uint32_t wlen;             /* ... and bytes, into buf */
	uint32_t dpos, dend;       /* its frames being delivered */
	uint64_t wr_id;            /* the window's last READ (the position) */
	uint64_t filled;           /* frames delivered by this read-back */
	int status;                /* a READ's failure */
	/* Where windows land: `cap` bytes, then the position word. */
	uint8_t *buf;
	uint32_t cap;
	uint32_t lkey;             /* mr's, here: no pointer to chase */
	tb_mem_t mem;
	struct ibv_mr *mr;
	tb_counter_mr_t *rec;
} rc_read_t;

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
	uint64_t pmirror;           /* where the frame after our last one
				     * starts in the publisher's ring (rc.h) */
	uint64_t pmask;             /* the publisher's ring size - 1 */
	rc_read_t rd;
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
	_Atomic int pub_dead;       /* R7/A7: judged dead while CONNECTING;
				     * R8/A8: reported */
	rc_session_t sess;          /* published by R2 */
	int reject_code;            /* with CTL_REJECTED: what poll returns */
	/* Cold: the control thread. */
	tb_verbs_dev_t dev;
	tb_mem_t ring_mem;
	struct ibv_mr *ring_mr;
	tb_counter_mr_t *ring_rec;  /* the audit's record of it ... */
	char ring_peer[96];         /* ... and who has its key */
	tb_stream_cfg_t cfg;
	uint64_t dead_ns;
	pthread_t ctl;
	int ctl_started;
	int fd;
	tb_rc_ctl_in_t in;
	struct ibv_qp *old_qp;      /* waiting for the poller to release it */
	uint64_t old_gen;
	int rejoining;              /* a RECONNECT or EVICTED session ended;
				     * the publisher neither reached again
				     * nor judged dead since */
	char reject_text[TB_CONTROL_TEXT_LEN + 160];
	/* Completions taken from the CQ, not yet handled (r->wc_i ..
	 * r->wc_n); more than a poll's only while a read-back is out. */
	struct ibv_wc wc[WC_HOLD];
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
		.mtu = (uint8_t)r->dev.mtu,
		.flags = TB_CONTROL_SUB_F_CREDIT_SLOT | TB_CONTROL_SUB_F_READ,
		.ring_addr = (uintptr_t)r->ring, .ring_len = r->mask + 1,
		.rkey = r->ring_mr->rkey, .recv_depth = TB_RC_RECV_DEPTH,
		.lid = r->dev.lid,
	};
	tb_verbs_qp_cfg_t qc = {
		.type = IBV_QPT_RC, .cq = r->cq, .send_wr = SUB_SQ_DEPTH,
		.recv_wr = TB_RC_RECV_DEPTH, .send_sge = 1,
		.inline_want = SUB_INLINE, .inline_min = SUB_INLINE,
		.access = IBV_ACCESS_REMOTE_WRITE,
		.send_ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ,
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
	/* Our ring's key goes to this publisher: the audit's record. */
	{
		char peer_name[sizeof(r->ring_peer)];

		snprintf(peer_name, sizeof(peer_name), "publisher %s:%u",
			 r->cfg.control.host, r->cfg.control.port);
		if (strcmp(peer_name, r->ring_peer) != 0) {
			tb_counters_mr_peer(r->ring_rec, peer_name);
			memcpy(r->ring_peer, peer_name, sizeof(r->ring_peer));
		}
	}
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
		/* V: it answered, so it is alive (ctl_unreached). */
		tb_atomic_store_relaxed(&r->last_beat_ns, tb_clock_now_ns());
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
	if (m.accept.flags & TB_CONTROL_ACC_F_READ)
		path.rd_out = m.accept.rd_atomic < r->dev.rd_out_max
				      ? m.accept.rd_atomic : r->dev.rd_out_max;
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
				 .next_seq = m.accept.next_seq,
				 .grant = m.accept};
	skip_store(r, 0, 0);
	/* V: what this publisher says it has, not what the last one said. */
	tb_atomic_store_relaxed(&r->pub_last_seq,
				m.accept.next_seq ? m.accept.next_seq - 1 : 0);
	tb_atomic_store_relaxed(&r->last_beat_ns, tb_clock_now_ns()); /* by R2 */
	r->rejoining = 0;
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

/* A dial after a RECONNECT or EVICTED session failed: the publisher, not
 * reached again within liveness_timeout_ms of the last word from it, is
 * dead, as one gone silent is (the top of this file), once for the
 * break. */
static void ctl_unreached(rc_rx_t *r)
{
	if (!r->rejoining || tb_clock_now_ns() -
	    tb_atomic_load_relaxed(&r->last_beat_ns) <= r->dead_ns)
		return;
	tb_warn("stream '%s': the publisher, not heard from for %u ms, cannot "
		"be reached again: it is dead", r->cfg.name,
		r->cfg.liveness_timeout_ms);
	r->rejoining = 0;
	/* R7 pairs with A7 in rx_idle: pub_last_seq, stored before. */
	tb_atomic_store_release(&r->pub_dead, 1);
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
			/* One session at a time; and a publisher judged dead
			 * is reported before a new one's session (A8 pairs
			 * with R8 in rx_unreached). */
			if (r->old_qp || tb_atomic_load_acquire(&r->pub_dead)) {
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
					      CTL_REJECTED) {
				ctl_unreached(r);
				usleep(100 * 1000);
			}
			continue;
		}
		if (r->fd >= 0) {
			rx_ctl_live(r, beat_ns, &next_beat);
			continue;
		}
		/* CLOSED, LOST, EVICTED or RECONNECT with the socket gone:
		 * wait for the poller to release the session, then connect
		 * again (a publisher that restarts is a new epoch).  gen is this
		 * thread's own (R2).  The poller told its application of the
		 * publisher's end only after CLOSED and LOST; after the others,
		 * its death is still to be judged (ctl_unreached). */
		if (tb_atomic_load_acquire(&r->released) >=   /* A3 pairs with R3 */
		    tb_atomic_load_relaxed(&r->gen)) {
			r->old_qp = r->sess.qp;
			r->old_gen = tb_atomic_load_relaxed(&r->gen);
			r->sess.qp = NULL;
			r->rejoining = st == CTL_RECONNECT || st == CTL_EVICTED;
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
	if (r->ring_mr) {
		tb_counters_mr_remove(r->ring_rec);
		ibv_dereg_mr(r->ring_mr);
	}
	if (r->rd.mr) {
		tb_counters_mr_remove(r->rd.rec);
		ibv_dereg_mr(r->rd.mr);
	}
	tb_verbs_close(&r->dev);
	tb_mem_free(&r->ring_mem);
	tb_mem_free(&r->rd.mem);
	free(r);
}

/* Where read-back windows land: at most TB_RC_READ_BUF, at most our ring
 * (a stream's scale), then the position word on a line of its own. */
static uint32_t rd_cap_of(const tb_stream_cfg_t *cfg)
{
	return cfg->ring_size < TB_RC_READ_BUF ? (uint32_t)cfg->ring_size
					       : TB_RC_READ_BUF;
}

/* What a subscriber pins: its ring's registration, its read-back buffer's,
 * its CQ and its QP. */
static int rx_memlock(const tb_stream_cfg_t *cfg)
{
	char what[TB_NAME_MAX + 128];

	snprintf(what, sizeof(what), "stream '%s': an rc subscriber (its ring "
		 "of %llu bytes, its read-back buffer of %u and its queues)",
		 cfg->name, (unsigned long long)cfg->ring_size, rd_cap_of(cfg));
	return tb_memlock_check(tb_memlock_mr_bytes(NULL, cfg->ring_size) +
				tb_memlock_mr_bytes(NULL, rd_cap_of(cfg) + 64) +
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
	r->pmask = (1ull << 62) - 1;   /* no read-back: any value will do */
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
	r->ring_rec = tb_counters_mr_add(cfg->id, TB_ROLE_SUBSCRIBER, TB_MR_RING_RX,
					 "rc", r->ring_mr, IBV_ACCESS_LOCAL_WRITE |
					 IBV_ACCESS_REMOTE_WRITE);
	/* Read-back windows land here: ours alone, nothing remote. */
	r->rd.cap = rd_cap_of(cfg);
	if ((rc = tb_mem_alloc(&r->rd.mem, r->rd.cap + 64, node, 0)) < 0)
		goto fail;
	r->rd.buf = r->rd.mem.addr;
	r->rd.mr = ibv_reg_mr(r->dev.pd, r->rd.buf, r->rd.cap + 64,
			      IBV_ACCESS_LOCAL_WRITE);
	if (!r->rd.mr) {
		rc = tb_error_sys(errno, "ibv_reg_mr (read-back buffer, %u bytes)",
				  r->rd.cap + 64);
		goto fail;
	}
	r->rd.lkey = r->rd.mr->lkey;
	r->rd.rec = tb_counters_mr_add(cfg->id, TB_ROLE_SUBSCRIBER, TB_MR_RECV,
				       "rc", r->rd.mr, IBV_ACCESS_LOCAL_WRITE);
	r->cq = ibv_create_cq(r->dev.ctx, (int)SUB_CQE, NULL, NULL, 0);
	if (!r->cq) {
		rc = tb_error_sys(errno, "ibv_create_cq");
		goto fail;
	}
	if ((rc = tb_thread_start(&r->ctl, "tb-rc-sub-ctl", rx_ctl_main, r)) < 0)
		goto fail;
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

/* ------------------------------------------------------------ reading back */

/* Where the frame after one of `space` bytes starting at or after `pos`
 * starts in a ring of mask + 1 bytes laid out as ring.h lays it out: one
 * that would straddle the end starts at the next lap, behind padding.
 * Hot path: a few instructions, no branch the compiler cannot turn into a
 * conditional move. */
static inline uint64_t rc_ring_next(uint64_t pos, uint64_t mask, uint32_t space)
{
	uint64_t off = pos & mask;

	return pos + space + (off + space > mask + 1 ? mask + 1 - off : 0);
}

/*
 * How far past the publisher's intent its writing may have reached all the
 * same: a claim it gave back (tb_pub_abort) takes intent back to the tail,
 * but what it wrote (a padding frame at the end of the ring, a zero-copy
 * claim's payload) stays written over.  One claim is open at a time, and
 * reaches at most a padding frame and a frame past the tail, each at most
 * a largest frame (ring.h): two of those.
 */
static uint64_t rd_margin(uint64_t psize)
{
	return 2 * (uint64_t)tb_frame_space(tb_ring_max_frame(psize));
}

/* A new session's read-back grant (ACCEPT).  The position we follow stays
 * good across sessions of one ring (ring_id): what went missing while we
 * reconnected is read back too. */
static void rd_adopt(rc_rx_t *r, const tb_control_accept_t *a)
{
	rc_read_t *d = &r->rd;

	d->state = RD_IDLE;
	d->ok = (a->flags & TB_CONTROL_ACC_F_READ) != 0;
	if (!d->ok || a->ring_id != d->ring_id) {
		d->mirror_ok = 0;
		d->gap_start_ok = 0;
	}
	if (!d->ok)
		return;
	d->raddr = a->read_addr;
	d->psize = a->read_len;
	d->rkey = a->read_rkey;
	d->pos_addr = a->pos_addr;
	d->pos_rkey = a->pos_rkey;
	d->ring_id = a->ring_id;
	d->margin = rd_margin(a->read_len);
	r->pmask = a->read_len - 1;
}

/*
 * The completion for the frame at ring offset `target` names a place past
 * our read position: what lies between must be padding the publisher
 * wrote -- an anchor (rc.h) right before the frame, and/or one filling our
 * ring's tail, the frame then at the start.  Takes them (an anchor sets
 * where we are in the publisher's ring); 0, or -1 when what lies there is
 * anything else.  Warm: at a wrap, and at a frame after a skip.
 */
static int rx_pads(rc_rx_t *r, uint64_t target)
{
	uint64_t size = r->mask + 1;

	for (int k = 0; k < 2 && (r->cpos & r->mask) != target; k++) {
		uint64_t off = r->cpos & r->mask;
		const tb_frame_hdr_t *p = (const tb_frame_hdr_t *)(r->ring + off);
		const tb_frame_hdr_t *f = (const tb_frame_hdr_t *)(r->ring + target);

		if (p->version != TB_FRAME_VERSION || p->type != TB_FRAME_PAD ||
		    p->stream_id != r->stream_id)
			return -1;
		if (p->template_id == TB_RC_ANCHOR) {
			if (!r->rd.ok || p->length != TB_RC_ANCHOR_LEN ||
			    off + TB_RC_ANCHOR_LEN != target || p->seq != f->seq)
				return -1;
			r->rd.anchor_seq = p->seq;
			r->rd.gap_start = r->pmirror;
			r->rd.gap_start_ok = r->rd.mirror_ok;
			r->pmirror = p->publish_ns;
			r->rd.mirror_ok = 1;
			r->cpos += TB_RC_ANCHOR_LEN;
		} else if (p->template_id == 0 && p->length == size - off &&
			   (target == 0 || target == TB_RC_ANCHOR_LEN)) {
			r->cpos += size - off;
		} else {
			return -1;
		}
	}
	return (r->cpos & r->mask) == target ? 0 : -1;
}

/* Posts the READs of the next window: [at, ..) of the publisher's ring
 * (two READs where it wraps), then its position word, fenced behind them
 * and signalled.  0, or -1 when they could not go (nothing posted). */
static int rd_post(rc_rx_t *r)
{
	rc_read_t *d = &r->rd;
	uint64_t left = d->last - d->next + 1;
	uint64_t want = d->end ? d->end - d->at
		      : left > d->psize / RD_GUESS ? d->psize
						   : left * RD_GUESS + 4096;
	uint64_t off = d->at & (d->psize - 1);
	uint32_t w = (uint32_t)(want < d->cap ? want : d->cap), n1;
	struct ibv_sge sge[3];
	struct ibv_send_wr wr[3], *bad;
	int k = 0;

	if (w > d->psize)
		w = (uint32_t)d->psize;
	n1 = off + w > d->psize ? (uint32_t)(d->psize - off) : w;
	if (r->cposted + 3 - r->ccompleted >= SUB_SQ_DEPTH)
		return -1;
	sge[k] = (struct ibv_sge){.addr = (uintptr_t)d->buf, .length = n1,
				  .lkey = d->lkey};
	wr[k] = (struct ibv_send_wr){.wr_id = RD_TAG | (r->cposted + 1),
				     .sg_list = &sge[k], .num_sge = 1,
				     .opcode = IBV_WR_RDMA_READ,
				     .wr.rdma = {.remote_addr = d->raddr + off,
						 .rkey = d->rkey}};
	k++;
	if (n1 < w) {
		sge[k] = (struct ibv_sge){.addr = (uintptr_t)d->buf + n1,
					  .length = w - n1, .lkey = d->lkey};
		wr[k] = (struct ibv_send_wr){.wr_id = RD_TAG | (r->cposted + 2),
					     .sg_list = &sge[k], .num_sge = 1,
					     .opcode = IBV_WR_RDMA_READ,
					     .wr.rdma = {.remote_addr = d->raddr,
							 .rkey = d->rkey}};
		wr[k - 1].next = &wr[k];
		k++;
	}
	/* After every byte above has come: the fence holds it behind them. */
	sge[k] = (struct ibv_sge){.addr = (uintptr_t)d->buf + d->cap,
				  .length = sizeof(uint64_t), .lkey = d->lkey};
	wr[k] = (struct ibv_send_wr){.wr_id = RD_TAG | (r->cposted + (uint64_t)k + 1),
				     .sg_list = &sge[k], .num_sge = 1,
				     .opcode = IBV_WR_RDMA_READ,
				     .send_flags = IBV_SEND_FENCE | IBV_SEND_SIGNALED,
				     .wr.rdma = {.remote_addr = d->pos_addr,
						 .rkey = d->pos_rkey}};
	wr[k - 1].next = &wr[k];
	k++;
	if (ibv_post_send(r->qp, wr, &bad) != 0)
		return -1;
	r->cposted += (uint64_t)k;
	d->wr_id = wr[k - 1].wr_id;
	d->wstart = d->at;
	d->wlen = w;
	d->state = RD_READING;
	return 0;
}

/*
 * Starts reading back [first, last], which starts at `start` in the
 * publisher's ring and ends at `end` (0: not known: up to `last`); the
 * frame after it, when there is one, takes `next_space` bytes at `end`.
 * 0 when the READs are out; -1 when they cannot be (no grant, an
 * inconsistent span, the frames already written over, no room to post).
 */
static int rd_begin(rc_rx_t *r, uint64_t first, uint64_t last, uint64_t start,
		    uint64_t end, uint32_t next_space)
{
	rc_read_t *d = &r->rd;

	if (!d->ok || !r->qp || d->state != RD_IDLE || first == 0 || last < first)
		return -1;
	/* Writing the frame at `end` has claimed its way into the first
	 * one already: gone, no READ needed to know it. */
	if (end && (end <= start || end + next_space + d->margin >
						 start + d->psize))
		return -1;
	d->next = first;
	d->last = last;
	d->at = start;
	d->end = end;
	d->filled = 0;
	d->quiet = !end;
	return rd_post(r);
}

/*
 * Collects the window's READs: 1 when every one landed, 0 not yet, -1 when
 * one failed (or nothing can be collected).  Every other completion that
 * comes meanwhile is kept in r->wc, in order, behind the frame that showed
 * the gap.  Warm: polls while a read-back is out.
 */
static int rd_wait(rc_rx_t *r)
{
	rc_read_t *d = &r->rd;
	int room, k, keep, done = 0;

	if (r->wc_i) {
		memmove(r->wc, r->wc + r->wc_i,
			(size_t)(r->wc_n - r->wc_i) * sizeof(r->wc[0]));
		r->wc_n -= r->wc_i;
		r->wc_i = 0;
	}
	room = WC_HOLD - r->wc_n;
	if (room <= 0)
		return -1;   /* cannot happen: WC_HOLD holds what can come */
	k = ibv_poll_cq(r->cq, room < CQ_BATCH ? room : CQ_BATCH, r->wc + r->wc_n);
	if (k < 0) {
		/* Overrun: a new session on a new CQ follows (as in poll). */
		tb_atomic_store_seq_cst(&r->cq_broken, 1); /* S6 */
		ctl_leave_live(r, CTL_LOST);               /* S4 */
		return -1;
	}
	keep = r->wc_n;
	for (int i = r->wc_n; i < r->wc_n + k; i++) {
		const struct ibv_wc *wc = &r->wc[i];

		if (wc->qp_num == r->qp->qp_num && (wc->wr_id & RD_TAG)) {
			if ((wc->wr_id & ~RD_TAG) > r->ccompleted)
				r->ccompleted = wc->wr_id & ~RD_TAG;
			if (wc->status != IBV_WC_SUCCESS) {
				if (done >= 0)
					d->status = (int)wc->status;
				done = -1;
			} else if (wc->wr_id == d->wr_id && done == 0) {
				done = 1;
			}
			continue;
		}
		r->wc[keep++] = *wc;
	}
	r->wc_n = keep;
	return done;
}

/*
 * Checks the window that landed and finds the frames in it: each the next
 * sequence of our stream, whole, within the publisher's ring, padding only
 * where its ring wraps, nothing past the end; and the publisher's position
 * word, read after all of it, says nothing in the window had been claimed
 * for writing over by then (a frame is claimed before a byte of it is
 * written: ring.h), not even by a claim given back (rd_margin).  0 with [0, dend) of the buffer to deliver and `at`,
 * `next` moved past it; -1 when the window cannot be trusted.
 */
static int rd_parse(rc_rx_t *r)
{
	rc_read_t *d = &r->rd;
	uint64_t mask = d->psize - 1, intent, p = 0, next = d->next;
	uint32_t dend = 0;

	memcpy(&intent, d->buf + d->cap, sizeof(intent));
	if (intent + d->margin > d->wstart + d->psize ||
	    (d->end && intent < d->end))
		return -1;
	while (next <= d->last || (d->end && d->wstart + p < d->end)) {
		uint64_t pos = d->wstart + p, off = pos & mask;
		const tb_frame_hdr_t *h = (const tb_frame_hdr_t *)(d->buf + p);
		uint32_t sp;

		if (d->end && pos >= d->end)
			return -1;         /* at the anchor with frames missing */
		if (p + TB_FRAME_HDR_LEN > d->wlen)
			break;             /* the rest in the next window */
		if (h->version != TB_FRAME_VERSION || h->stream_id != r->stream_id)
			return -1;
		if (h->type == TB_FRAME_PAD) {
			/* The publisher's wrap: to the end of its ring, with
			 * the sequence of the frame after it. */
			if (h->template_id != 0 || h->length != d->psize - off ||
			    h->seq != next)
				return -1;
			p += h->length;
			continue;
		}
		if (next > d->last)
			return -1;         /* a frame between the last and the anchor */
		if (h->type != TB_FRAME_DATA || h->seq != next ||
		    h->length < TB_FRAME_HDR_LEN || h->length > TB_FRAME_MAX_LEN)
			return -1;
		sp = tb_frame_space(h->length);
		if (off + sp > d->psize || (d->end && pos + sp > d->end))
			return -1;
		if (p + h->length > d->wlen) {
			if (p == 0)
				return -1; /* larger than a window */
			break;
		}
		p += sp;
		dend = (uint32_t)p;
		next++;
	}
	if (p == 0)
		return -1;                 /* nothing taken: no progress */
	/* All of it holds: take it. */
	d->next = next;
	d->dpos = 0;
	d->dend = dend;
	d->at = d->wstart + p;
	return 0;
}

/* Delivers the checked frames, up to `limit`, with TB_MSG_F_REPLAY.
 * Returns how many.  Each is the next sequence as rd_parse saw to it,
 * unless `seq` moved on between the poll that posted the READs and the
 * one that collects them: several copies of one stream (sources.c) share
 * the tracker, and another may have delivered some of the gap meanwhile;
 * those are not delivered twice. */
static int rd_deliver(rc_rx_t *r, tb_seq_t *seq, tb_handler_t handler,
		      void *clientd, int limit)
{
	rc_read_t *d = &r->rd;
	uint64_t now_ns = tb_clock_now_ns_inline();
	tb_msg_t msg;
	int n = 0;

	while (d->dpos < d->dend && n < limit) {
		const tb_frame_hdr_t *h = (const tb_frame_hdr_t *)(d->buf + d->dpos);

		if (h->type == TB_FRAME_DATA) {
			/* NEXT, or a DUPLICATE (above); never a GAP: the
			 * tracker only moves forward, in steps of frames. */
			if (tb_seq_admit(seq, h->seq) == TB_SEQ_NEXT) {
				tb_frame_to_msg(h, &msg);
				msg.flags |= TB_MSG_F_REPLAY;
				msg.receive_ns = now_ns;
				handler(clientd, &msg);
				n++;
			}
			d->dpos += tb_frame_space(h->length);
		} else {
			d->dpos += h->length;
		}
	}
	d->filled += (uint64_t)n;
	if (n && r->base.ctr)
		tb_counter_add(r->base.ctr, TB_CTR_READ_FILLED, (uint64_t)n);
	return n;
}

/* The read-back ends short: what is left of it goes up as the lap it is
 * (TB_LAPPED, `loss` the range), or 0 when nothing is. */
static int rd_fail(rc_rx_t *r, tb_seq_t *seq, tb_seq_range_t *loss)
{
	rc_read_t *d = &r->rd;

	d->state = RD_IDLE;
	if (d->status) {
		/* The READ broke our queue pair.  A peer that stopped
		 * answering is as a credit write's would be (rx_other_wc);
		 * a READ refused is our request's doing: a new session. */
		if (r->base.ctr)
			tb_counter_inc(r->base.ctr, TB_CTR_ERRORS);
		if (d->status == IBV_WC_RETRY_EXC_ERR)
			ctl_leave_live(r, CTL_LOST);        /* S4 */
		else if (d->status != IBV_WC_WR_FLUSH_ERR)
			ctl_leave_live(r, CTL_RECONNECT);   /* S4 */
		d->status = 0;
	}
	if (d->quiet)
		d->mirror_ok = 0;  /* lost track: the next anchor sets it */
	if (seq->expected > d->last)
		return 0;
	if (r->base.ctr)
		tb_counter_inc(r->base.ctr, TB_CTR_READ_MISSED);
	tb_seq_gap_to(seq, d->last + 1, loss);
	return TB_LAPPED;
}

/* rd_wait, again and again for up to RD_WAIT_NS while the READs are out:
 * the poll that posted them.  Warm: once a gap. */
static int rd_wait_spin(rc_rx_t *r)
{
	uint64_t until = tb_clock_now_ns_inline() + RD_WAIT_NS;
	int rc;

	while ((rc = rd_wait(r)) == 0 && tb_clock_now_ns_inline() < until)
		tb_cpu_relax();
	return rc;
}

/* A poll while a read-back is on: collect (waiting for the READs when
 * `wait`: they were posted by this poll), check, deliver, read on.
 * Returns frames delivered, 0 (waiting), or TB_LAPPED; the read-back is
 * over when r->rd.state is RD_IDLE again. */
static int rd_poll(rc_rx_t *r, tb_seq_t *seq, tb_seq_range_t *loss,
		   tb_handler_t handler, void *clientd, int limit, int wait)
{
	rc_read_t *d = &r->rd;
	int rc, n;

	switch (d->state) {
	case RD_READING:
		rc = wait ? rd_wait_spin(r) : rd_wait(r);
		if (rc == 0)
			return 0;
		if (rc < 0 || rd_parse(r) < 0)
			return rd_fail(r, seq, loss);
		d->state = RD_DELIVER;
		/* fall through */
	case RD_DELIVER:
		n = rd_deliver(r, seq, handler, clientd, limit);
		if (d->dpos < d->dend)
			return n;  /* the limit: the rest at the next poll */
		if (d->next > d->last) {
			d->state = RD_IDLE;
			if (d->quiet)
				r->pmirror = d->at; /* after the last one */
			return n;
		}
		if (rd_post(r) == 0)
			return n;
		d->state = RD_FAILED;
		if (n)
			return n;  /* the loss on its own, next */
		/* fall through */
	default:
		return rd_fail(r, seq, loss);
	}
}

/* The frame `f` shows a gap: read it back (rd_poll's result: what it
 * delivered of the gap, f still waiting) or report it (TB_LAPPED).  The
 * gap can be read back when an anchor came with f and we knew where the
 * frame before the gap ended. */
static int rx_gap(rc_rx_t *r, tb_seq_t *seq, tb_seq_range_t *loss,
		  const tb_frame_hdr_t *f, tb_handler_t handler, void *clientd,
		  int limit)
{
	rc_read_t *d = &r->rd;

	if (d->ok && d->gap_start_ok && d->anchor_seq == f->seq &&
	    rd_begin(r, seq->expected, f->seq - 1, d->gap_start, r->pmirror,
		     tb_frame_space(f->length)) == 0)
		return rd_poll(r, seq, loss, handler, clientd, limit, 1);
	if (d->ok && r->base.ctr)
		tb_counter_inc(r->base.ctr, TB_CTR_READ_MISSED);
	tb_seq_gap_to(seq, f->seq, loss);
	return TB_LAPPED;   /* rc is reliable: we were skipped */
}

/* Lets go of the session: the control thread may destroy its QP. */
static void rx_release(rc_rx_t *r)
{
	r->qp = NULL;
	r->wc_n = r->wc_i = 0;
	r->rd.ok = 0;         /* the grant was this session's */
	r->rd.state = RD_IDLE;
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
	rd_adopt(r, &r->sess.grant);
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

/* The publisher's end: the frames it said (pub_last_seq) it had published
 * beyond ours never came; they are lost, and told (TB_LAPPED) before its
 * end is.  0 when there are none.  The caller's acquire carries
 * pub_last_seq. */
static int rx_final_lap(rc_rx_t *r, tb_seq_t *seq, tb_seq_range_t *loss)
{
	uint64_t final = tb_atomic_load_relaxed(&r->pub_last_seq);

	if (!seq->expected || final < seq->expected)
		return 0;
	tb_seq_gap_to(seq, final + 1, loss);
	return TB_LAPPED;
}

/* No session, and the control thread judged the publisher it cannot
 * reach again dead (ctl_unreached): told as a silent one's death is. */
static int rx_unreached(rc_rx_t *r, tb_seq_t *seq, tb_seq_range_t *loss)
{
	if (rx_final_lap(r, seq, loss))   /* pub_last_seq by A7 */
		return TB_LAPPED;
	/* R8 pairs with A8 in rx_ctl_main: reported; dial again. */
	tb_atomic_store_release(&r->pub_dead, 0);
	return TB_PUBLISHER_DEAD;
}

/* Nothing to deliver: the connection's conditions, checked now and then. */
static int rx_idle(rc_rx_t *r, tb_seq_t *seq, tb_seq_range_t *loss,
		   tb_handler_t handler, void *clientd, int limit)
{
	/* A4 pairs with S4 (CLOSED, LOST) in rx_ctl_main: the pub_last_seq
	 * of the heartbeat before BYE, or before the silence, is seen below. */
	int st = tb_atomic_load_acquire(&r->ctl_state);
	uint64_t first, last;

	if (!r->qp) {
		if (st == CTL_REJECTED)
			return tb_error_set(r->reject_code, "stream '%s': %s",
					    r->cfg.name, r->reject_text);
		/* A7 pairs with R7 in ctl_unreached. */
		if (tb_atomic_load_acquire(&r->pub_dead))
			return rx_unreached(r, seq, loss);
		return TB_NOT_CONNECTED;
	}
	if (r->cpos != r->credited || r->recv_owed)
		rx_credit(r);
	/* Skipped, and the stream went quiet: every frame before the range
	 * is here (the CQ is empty and we expect one of it), none of it
	 * ever will be.  Read back from where our last frame ended, or
	 * told. */
	skip_load(r, &first, &last);
	if (first && seq->expected >= first && seq->expected <= last) {
		if (r->rd.mirror_ok &&
		    rd_begin(r, seq->expected, last, r->pmirror, 0, 0) == 0)
			return rd_poll(r, seq, loss, handler, clientd, limit, 1);
		if (r->rd.ok && r->base.ctr)
			tb_counter_inc(r->base.ctr, TB_CTR_READ_MISSED);
		r->rd.mirror_ok = 0;
		tb_seq_gap_to(seq, last + 1, loss);
		return TB_LAPPED;
	}
	/* The end of the session only after a few hundred empty polls, so
	 * that no completion still on its way is left behind. */
	if (tb_likely(st == CTL_LIVE) || (++r->idle_polls & 255) != 0)
		return 0;
	switch (st) {
	case CTL_CLOSED:
		/* Frames it skipped us for at the very end (pub_last_seq by
		 * A4). */
		if (rx_final_lap(r, seq, loss))
			return TB_LAPPED;
		rx_release(r);
		return TB_CLOSED;
	case CTL_EVICTED:
		rx_release(r);
		return TB_EVICTED;
	case CTL_RECONNECT:
		/* What goes missing meanwhile shows with the next frame, or,
		 * if the publisher is not reached again, as its end
		 * (rx_unreached). */
		rx_release(r);
		return TB_NOT_CONNECTED;
	case CTL_LOST:
		/* It said it had published these and died (or went silent)
		 * before they came (pub_last_seq by A4). */
		if (rx_final_lap(r, seq, loss))
			return TB_LAPPED;
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
	if (wc->wr_id & RD_TAG) {
		/* A read-back's, after rd_fail left it: judged there. */
		if ((wc->wr_id & ~RD_TAG) > r->ccompleted)
			r->ccompleted = wc->wr_id & ~RD_TAG;
		return 0;
	}
	if (wc->status == IBV_WC_SUCCESS) {
		/* Read-back completions may have taken it further. */
		if (wc->opcode == IBV_WC_RDMA_WRITE && wc->wr_id > r->ccompleted)
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
		return rx_idle(r, seq, loss, handler, clientd, limit);
	if (tb_unlikely(r->rd.state != RD_IDLE)) {
		n = rd_poll(r, seq, loss, handler, clientd, limit, 0);
		if (n < 0 || r->rd.state != RD_IDLE || n >= limit)
			return n;
		/* Read back: the frame that showed the gap, in this poll. */
	}
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
			return n ? n : rx_idle(r, seq, loss, handler, clientd, limit);
		}
	}
	r->idle_polls = 0;
	now_ns = tb_clock_now_ns_inline();
	while (r->wc_i < r->wc_n && n < limit) {
		const struct ibv_wc *wc = &r->wc[r->wc_i];
		uint64_t off = r->cpos & r->mask;
		const tb_frame_hdr_t *f;
		uint32_t imm, space;

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
			/* Behind padding: an anchor, our ring's tail. */
			if (tb_rc_imm_offset(imm) >= size ||
			    rx_pads(r, tb_rc_imm_offset(imm)) < 0)
				goto corrupt;
			off = r->cpos & r->mask;
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
		case TB_SEQ_GAP: {
			int k;

			if (n > 0)
				goto out;         /* read back, or report, on its own */
			k = rx_gap(r, seq, loss, f, handler, clientd, limit);
			if (k < 0 || r->rd.state != RD_IDLE || k >= limit)
				return k;
			/* Read back in this poll: f is the next now (the
			 * completions held meanwhile stay behind it). */
			n = k;
			continue;
		}
		}
		/* The poll's clock read, again only if a frame written after
		 * it was reached: no receive time precedes its publish time. */
		if (tb_unlikely(f->publish_ns > now_ns))
			now_ns = tb_clock_now_ns_inline();
		tb_frame_to_msg(f, &msg);
		msg.receive_ns = now_ns;
		handler(clientd, &msg);
		n++;
consumed:
		space = tb_frame_space(f->length);
		r->cpos += space;
		r->pmirror = rc_ring_next(r->pmirror, r->pmask, space);
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
