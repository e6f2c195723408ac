/*
 * transport/rc_pub.c - the rc transport's publisher (the design is in
 * transport/rc.h).
 *
 * The ops below write each committed frame to every subscriber in the
 * table with ibv_post_send; the control thread listens on cfg.control,
 * runs the HELLO / SUBSCRIBE / ACCEPT / READY exchange, brings a queue pair
 * up per subscriber in a protection domain of its own, heartbeats, reads
 * the device's asynchronous events, and removes subscribers that leave,
 * time out or whose queue pair failed.
 *
 * The table's one reader
 * ----------------------
 * The publishing thread reads the subscriber table (a pointer to an
 * immutable array) on every send; the control thread replaces it when a
 * subscriber joins or leaves and must then know when the old one, and a
 * removed subscriber's QP, can be freed.  There is one reader by contract
 * (a publisher is used by one thread at a time), so instead of an RCU
 * flavour with a registry of reader threads the publisher carries one
 * counter, `reading`, odd while a send is inside the table:
 *
 *   reader (every send):   reading = odd (its own add); compiler fence;
 *                          table (or small_subs) = load; ... ;
 *                          reading = even (release)
 *   writer (control):      small_subs = new's list (release);
 *                          table = new (seq_cst); membarrier();
 *                          if reading is odd, wait until it changes
 *
 * membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) makes every running thread
 * of the process execute a full fence before it returns, so it supplies the
 * store-load fence the reader leaves out: after it, either the reader's
 * odd store is visible to the writer (which then waits for that send to
 * end), or the reader's load of the table comes after the fence and sees
 * the new one.  A send is a few microseconds, so the writer waits for that
 * and nothing more: an idle publisher never holds up a join or a leave (a
 * QSBR reader that stays online would, until its next quiescent state).
 * Where membarrier is missing (kernels before 4.14, or a seccomp filter),
 * the reader issues the full fence itself, which costs what it always did.
 * The per-message cost is two stores to a line the thread owns.
 *
 * Edges between the threads (barrier.h):
 *   R4 -> A4  rc_tx_send / rc_tx_room mark `reading` even when they leave
 *             the table; table_change waits for it after its membarrier.
 *   R1 -> A1  the publishing thread marks a subscriber dead (why_dead set
 *             first); ctl_main reads it and drops the subscriber.
 *   K1 -> K2  the publishing thread records the range it is skipping a
 *             subscriber for (skip_last, then skip_first); heartbeats read
 *             it (skip_first, skip_last, skip_first again).
 *   S1        rc_tx_close stops ctl_main (then joins it).
 *   V1        rc_tx_beat stores the last sequence, a value on its own that
 *             the control thread puts in heartbeats and ACCEPT.
 *
 * Batching
 * --------
 * A doorbell (the MMIO write that tells the NIC a send queue has work) is
 * the dearest part of a post, so with batch_us set a burst costs one post
 * per subscriber: each subscriber has a chain of TB_RC_CHAIN work
 * requests, linked by `next` and filled in once at join like its single
 * one, and a frame is written into the next of them instead of posted.
 * Everything else is done as if it had been posted (posted, wpos, the
 * signal due every TB_RC_SIGNAL_EVERY, which simply rides in the chain),
 * so the credit, the send queue's room and the pin -- which bounds what
 * our ring may overwrite -- cover chained frames exactly as posted ones.
 * The chains are posted, one ibv_post_send each:
 *
 *   - when TB_RC_CHAIN frames were sent since the last post (`held`;
 *     every frame adds at most one request to a chain, so none overflows),
 *   - at the first send once the oldest held frame is batch_us old (its
 *     publish_ns against the new frame's: no clock read),
 *   - at tb_pub_flush() and at close (tb_publisher_close flushes),
 *   - when back-pressure refuses room (held frames count as used room,
 *     which the subscriber cannot give back before it has them),
 *   - for one subscriber, before anything of the slow path other than the
 *     signal due: a pad or an anchor (inline from one header, copied at
 *     post time), a skip, a fence, a reap that may find its pin lapped.
 *
 * Only the publishing thread posts, as everywhere in this file: neither
 * the heartbeat thread nor the control thread may touch a subscriber's
 * QP or its counters, so the deadline is checked when the publishing
 * thread calls in, as ud's is (dgram.h).  A publisher that batches and
 * then goes quiet calls tb_pub_flush(), or its held frames wait for its
 * next offer.  A subscriber that dies drops what it held; one that leaves
 * the table takes its chain with it (its QP is destroyed: nothing of it
 * would arrive).  Without batch_us the ops are the unbatched ones and a
 * lone frame costs what it did; a send that carries several frames (a
 * caller that committed several) chains them all the same, batching or
 * not, and posts them at its end.
 *
 * Admission.  The control port is open to anyone who can reach it, so it
 * must not be possible to keep subscribers out without a token.  A new
 * connection is unauthenticated until its HELLO carries the token; such
 * connections get TB_RC_PENDING_MAX slots of their own (the authenticated
 * ones have theirs), at most TB_RC_PENDING_PER_ADDR from one address, and
 * TB_RC_HELLO_MS to deliver that HELLO, counted from the connect, not from
 * the last byte.  When their slots are full the oldest pending connection
 * (of that address first) makes room, so a flood of idle or slow
 * connections holds each slot for at most TB_RC_HELLO_MS while a real
 * subscriber, which sends its HELLO at once, is read as it is accepted.
 * A wrong token closes the connection and makes its address wait, doubling
 * from TB_RC_PENALTY_MS to TB_RC_PENALTY_MAX_MS, before its next
 * connection is read.  Every refusal is counted, and logged at most once
 * a second per kind, with the count of those not logged.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "bus/transport/rc_pub.h"

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
#include <linux/membarrier.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

/* How long close waits for a subscriber's last writes to complete. */
#define DRAIN_TIMEOUT_NS 1000000000ull
/* Completion queue of one subscriber's QP: its send queue and a margin. */
#define SUB_CQE (TB_RC_SQ_DEPTH + 16)
/* Room kept in a send queue for one frame's requests: its padding, its
 * anchor and itself. */
#define SQ_SLACK 3u

/* Admission (see the top of the file). */
#define TB_RC_PENDING_MAX 16       /* unauthenticated connections, in all */
#define TB_RC_PENDING_PER_ADDR 4   /* ... from one address */
#define TB_RC_HELLO_MS 1000u       /* connect to a valid HELLO */
#define TB_RC_SETUP_MS 5000u       /* HELLO to READY */
#define TB_RC_PENALTY_MS 250u      /* an address after a wrong token ... */
#define TB_RC_PENALTY_MAX_MS 8000u /* ... doubling up to this */
#define TB_RC_PENALTY_FORGET_MS 60000u /* a quiet address starts over */
/* Connections taken per turn of the control loop: a flood that reconnects
 * as fast as it is closed must not keep the loop from its live
 * subscribers and their heartbeats (unbounded, one pass took 300 ms on
 * the 2-core VM, and over the 3 s liveness timeout in CI). */
#define TB_RC_ACCEPT_BATCH 32
/* accept() failing (out of descriptors, most likely) leaves the
 * connection queued and the port readable: the loop stops watching the
 * port this long rather than spin on it. */
#define TB_RC_ACCEPT_PAUSE_MS 100u
#define TB_RC_ADDRS 64             /* addresses remembered */
#define TB_RC_LOG_EVERY_MS 1000u   /* one line a second per kind, at most */



enum {
	CLIENT_PENDING,     /* no valid HELLO yet: unauthenticated */
	CLIENT_SUBSCRIBE,   /* authenticated; SUBSCRIBE next */
	CLIENT_READY,       /* ACCEPT sent; READY next */
	CLIENT_LIVE,        /* in the table */
};

typedef struct rc_client {
	int fd;
	int state;
	tb_rc_ctl_in_t in;
	uint64_t last_rx_ns;
	uint64_t opened_ms;
	uint64_t deadline_ms;      /* before LIVE: the next step by then */
	int addr;                  /* index in rc_tx_t.addrs */
	tb_rc_pub_sub_t *sub;
	char id[TB_CONTROL_CLIENT_ID_LEN];
} rc_client_t;

/* What the publisher remembers of an address that connected. */
typedef struct rc_addr {
	char ip[48];
	int pending;               /* its unauthenticated connections */
	uint32_t bad_tokens;       /* wrong tokens in a row */
	uint64_t penalty_until_ms; /* its connections are closed until then */
	uint64_t last_ms;
} rc_addr_t;

/* A log line at most every TB_RC_LOG_EVERY_MS, with the count of those
 * held back. */
typedef struct rc_log {
	uint64_t next_ms;
	uint64_t held;
} rc_log_t;

#define MAX_CLIENTS (TB_RC_MAX_SUBS + TB_RC_PENDING_MAX)

typedef struct rc_tx {
	tb_rc_pub_t h;             /* first: the hot path's (rc_pub.h) */
	/* Cold. */
	tb_verbs_dev_t dev;
	tb_mem_t ring_mem;
	tb_mem_t slot_mem;         /* the credit slots, then a line with our
				    * ring's intent and tail (pos) */
	_Atomic uint64_t *pos;     /* [0] intent, [1] tail (ring.h) */
	uint64_t ring_id;          /* this ring, for read-back (control.h) */
	uint64_t slot_used;        /* bitmap of credit slots */
	uint64_t per_sub_pinned;   /* what each subscriber pins (memlock.h) */
	uint64_t pinned;           /* what our subscribers pin now: at least
				    * what the kernel's VmPin counts of us */
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
	int n_pending;
	rc_addr_t addrs[TB_RC_ADDRS];
	/* Counted refusals, and their log lines. */
	uint64_t rejected, bad_tokens, refused, timed_out;
	rc_log_t log_reject, log_refuse, log_timeout, log_accept;
	uint64_t accept_paused_until_ms;
} rc_tx_t;

/* ------------------------------------------------- the table's one reader */

static int membarrier_ok;   /* 1: registered for private expedited */
static pthread_once_t membarrier_once = PTHREAD_ONCE_INIT;

static void membarrier_init(void)
{
	membarrier_ok = syscall(__NR_membarrier,
				MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

/* Registers for private expedited membarrier, once per process: 1 when it
 * is there to use. */
static int membarrier_register(void)
{
	pthread_once(&membarrier_once, membarrier_init);
	return membarrier_ok;
}


/* After the table pointer changed: returns once no send can still be
 * reading the old one.  Control thread. */
static void readers_wait(rc_tx_t *t)
{
	uint64_t r;

	if (!t->h.fenced)
		syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
	r = tb_atomic_load_acquire(&t->h.reading); /* A4 pairs with R4 */
	while ((r & 1) && tb_atomic_load_acquire(&t->h.reading) == r) /* A4 */
		usleep(10);
}

/* ---------------------------------------------------------- the hot path */

static inline uint64_t min64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* Folds `s`'s state into the limits the hot path compares with; its
 * fast_tail is 0 (every frame slow) until sub_fast, which knows our
 * ring's tail, sets it.  Warm: after every slow-path step. */
static void sub_limits(rc_tx_t *t, tb_rc_pub_sub_t *s)
{
	uint64_t sq_limit = s->completed + TB_RC_SQ_DEPTH - SQ_SLACK;
	/* Slow when `posted` reaches this: the next request would pass the
	 * SQ's room, be the one to signal, or find no receive. */
	uint64_t check = min64(min64(sq_limit + 1, s->next_signal - 1),
			       s->room_frames + s->extra);

	s->left = check > s->posted ? (int64_t)(check - s->posted) : 0;
	s->left_end = s->posted + (uint64_t)s->left;
	s->limit_pos = min64(s->room_pos, (s->wpos | s->rmask) + 1);
	/* With nothing in flight, pin is where the last completed request's
	 * frame ended: every later frame lies at or past it, so it bounds
	 * the next one too (the slow path takes a stale one for what it is
	 * and sets pin afresh). */
	s->pin_limit = s->skipping || s->anchor_due ||
				       tb_atomic_load_relaxed(&s->dead) /* our R1 */
			       ? 0 : s->pin + t->h.half;
	/* A signal by bytes as well as by count: the pin moves only when a
	 * signalled request completes, so the requests after the last one
	 * may read at most a quarter of our ring, and the next signal has
	 * the rest of half of it to complete before our tail reaches the
	 * pin (64 frames of 1 KiB span more than half of a 64 KiB ring: a
	 * count alone would fail a subscriber whose NIC is not late). */
	s->signal_tail = s->pos_end[s->last_signal & (TB_RC_SQ_DEPTH - 1)] +
			 t->h.half * 2 / TB_RC_SIGNAL_SPAN;
	s->fast_tail = 0;
}

/* `posted` as the fast path has counted it (in `left`), and wpos moved
 * as far as the fast path moved the next frame's remote address (see
 * wpos_addr).  Where the slow path starts (and the few other ways in: a
 * flush's failed post, back-pressure, close): from there until its
 * sub_limits, `posted` is the count, and `left` is stale.  A second call
 * before the fast path runs again changes nothing.  Warm. */
static inline void sub_sync(tb_rc_pub_sub_t *s)
{
	uint64_t addr = s->small_wr.wr.rdma.remote_addr;

	s->posted = s->left_end - (uint64_t)s->left;
	s->wpos += addr - s->wpos_addr;
	s->wpos_addr = addr;
}

/* The hot path's one bound on our ring's tail, at the end of a slow-path
 * step, when `tail` is our ring's tail, s->wpos is where `s`'s next frame
 * goes and `next_seq` its sequence: pin_limit, signal_tail, and limit_pos
 * moved from s's ring to ours (each fast-path frame adds the same space
 * to both; a pad in our ring only brings the slow path sooner).  Warm. */
static void sub_fast(tb_rc_pub_sub_t *s, uint64_t tail, uint64_t next_seq)
{
	uint64_t off = s->wpos & s->rmask;

	/* The next frame's remote address and immediate (small_wr): wpos
	 * may have moved any way since the last step (a pad, an anchor). */
	s->small_wr.wr.rdma.remote_addr = s->raddr + off;
	s->wpos_addr = s->raddr + off;
	s->imm_next = tb_rc_imm(off, next_seq);
	s->fast_tail = s->limit_pos < s->wpos
			       ? 0
			       : min64(min64(s->pin_limit, s->signal_tail),
				       tail + (s->limit_pos - s->wpos));
}

/* `s` failed: why, then R1; its limits send every frame to the slow
 * path, which sees it dead. */
static void sub_dead(tb_rc_pub_sub_t *s, const char *why)
{
	s->why_dead = why;
	/* R1 pairs with A1 in ctl_main: why_dead is set */
	tb_atomic_store_release(&s->dead, 1);
	s->left = 0;
	s->left_end = s->posted;
	s->pin_limit = 0;
	s->fast_tail = 0;
	s->chained = 0;  /* what it held is dropped with it */
}

__attribute__((noinline, cold)) void tb_rc_pub_post_failed(tb_rc_pub_sub_t *s,
							  uint32_t space)
{
	s->left++;
	sub_sync(s);
	s->wpos -= space;
	sub_dead(s, "ibv_post_send failed");
}

/* tb_rc_pub_send_small (rc_pub.h) when some subscriber's QP does not take
 * a small frame inline: each its own request, by reference.  Out of line,
 * so that its registers are not saved in the common case. */
__attribute__((noinline, cold)) void
tb_rc_pub_send_by_ref(tb_rc_pub_t *t, const tb_rc_pub_table_t *tab,
		      const tb_frame_hdr_t *f, uint32_t len, uint64_t seq)
{
	uint64_t tail = t->base.ring.tail;

	tb_rc_pub_frame(t, tab, f, len, seq, tail - tb_frame_space(len), tail,
			0, 1);
}

/* Posts the requests `s` holds chained with one ibv_post_send (one
 * doorbell).  Hot path when batching: no allocation, lock or system call
 * beyond the provider's post. */
static inline void sub_chain_post(tb_rc_pub_sub_t *s)
{
	uint32_t n = s->chained;
	struct ibv_send_wr *last, *bad;

	if (!n)
		return;
	last = &s->chain[n - 1];
	last->next = NULL;
	s->chained = 0;
	if (tb_unlikely(ibv_post_send(s->qp, s->chain, &bad) != 0)) {
		sub_sync(s);  /* a flush's; the slow path's is a no-op */
		sub_dead(s, "ibv_post_send failed");
	}
	if (n < TB_RC_CHAIN)
		last->next = last + 1;
}


/* Reaps a subscriber's send completions; marks it dead on an error. */
static int sub_reap(rc_tx_t *t, tb_rc_pub_sub_t *s)
{
	struct ibv_wc wc[16];
	int n = ibv_poll_cq(s->cq, 16, wc);

	for (int i = 0; i < n; i++) {
		if (tb_unlikely(wc[i].status != IBV_WC_SUCCESS)) {
			sub_dead(s, ibv_wc_status_str(wc[i].status));
			return -1;
		}
		s->completed = wc[i].wr_id;
		s->pin = s->pos_end[wc[i].wr_id & (TB_RC_SQ_DEPTH - 1)];
	}
	if (tb_unlikely(n < 0)) {
		sub_dead(s, "polling its completion queue failed");
		return -1;
	}
	sub_limits(t, s);
	return 0;
}

/* Records a signalled request: its wr_id is `posted` after it, and the
 * frames before it end at `pos_end` in our ring. */
static void sub_signalled(tb_rc_pub_sub_t *s, uint64_t wr_id, uint64_t pos_end)
{
	s->pos_end[wr_id & (TB_RC_SQ_DEPTH - 1)] = pos_end;
	s->last_signal = wr_id;
	s->next_signal = wr_id + TB_RC_SIGNAL_EVERY;
}

/*
 * `s` is about to be skipped with unsignalled writes outstanding: nothing
 * would ever report them complete, and its pin would hold until our ring
 * laps it (and `s` is failed for it).  One signalled zero-length WRITE,
 * which consumes no receive, reports them all.  `pos`: where the writes
 * before it end in our ring.  Cold.
 */
static void sub_fence(tb_rc_pub_sub_t *s, uint64_t pos)
{
	struct ibv_send_wr w = {.wr_id = s->posted + 1, .opcode = IBV_WR_RDMA_WRITE,
				.send_flags = IBV_SEND_SIGNALED,
				.wr.rdma = {.remote_addr = s->raddr, .rkey = s->rkey}};
	struct ibv_send_wr *bad;

	if (s->posted + 1 > s->completed + TB_RC_SQ_DEPTH)
		return; /* the queue is full of requests that will report */
	if (ibv_post_send(s->qp, &w, &bad) != 0) {
		sub_dead(s, "ibv_post_send failed");
		return;
	}
	s->posted++;
	s->extra++;
	sub_signalled(s, s->posted, pos);
}

/* Reads the credit `s` wrote into its slot: how far wpos and the frames
 * may go.  Warm: when the room the last credit gave runs out. */
static void sub_room_refresh(rc_tx_t *t, tb_rc_pub_sub_t *s)
{
	/* Relaxed: the subscriber's RDMA WRITE stores it, not a thread of
	 * ours; a stale value only under-states its room. */
	uint64_t c = tb_atomic_load_relaxed(s->credit);
	uint64_t frames = s->posted - s->extra;
	uint64_t used = (s->wpos - c) & TB_RC_CREDIT_POS_MASK;
	uint64_t unread = (frames - (c >> TB_RC_CREDIT_POS_BITS)) &
			  TB_RC_CREDIT_RECV_MASK;

	s->room_pos = s->wpos - used + s->rmask + 1;
	s->room_frames = frames - unread + s->recv_depth;
	sub_limits(t, s);
}

/* Room for `need` bytes and one more frame in `s`'s ring. */
static int sub_has_room(rc_tx_t *t, tb_rc_pub_sub_t *s, uint64_t need)
{
	if (s->wpos + need <= s->room_pos && s->posted - s->extra < s->room_frames)
		return 1;
	sub_room_refresh(t, s);
	return s->wpos + need <= s->room_pos && s->posted - s->extra < s->room_frames;
}

/* `s` gets no frame at `seq`: the first of a skip starts the range a
 * heartbeat tells it (K1), and, with unsignalled writes outstanding, a
 * fence.  Cold. */
static void sub_skip(rc_tx_t *t, tb_rc_pub_sub_t *s, uint64_t pos, uint64_t seq)
{
	if (!s->skipping) {
		if (s->posted != s->last_signal)
			sub_fence(s, pos);
		s->skipping = 1;
		s->anchor_due = s->reads; /* where it resumes, for read-back */
		/* K1 pairs with K2 in skipped_range: last first, then the
		 * new first, so a reader that sees this first sees a last of
		 * this range. */
		tb_atomic_store_release(&s->skip_last, seq);
		tb_atomic_store_release(&s->skip_first, seq);
	} else {
		tb_atomic_store_release(&s->skip_last, seq); /* K1 */
	}
	s->laps++;
	sub_limits(t, s);
}

/*
 * Everything tb_rc_pub_write (rc_pub.h) leaves out: completions to take, a subscriber to
 * fail because what it still reads is about to be overwritten, a padding
 * WRITE at the end of its ring, an anchor before the first frame after
 * READY or a skip (rc.h, "Reading back"), credit to read again, a
 * signalled request, the end of a skip, and a skip.  Warm: once in
 * TB_RC_SIGNAL_EVERY frames, at a wrap, when credit runs out.
 */
__attribute__((noinline)) void
tb_rc_pub_write_slow(tb_rc_pub_t *h, tb_rc_pub_sub_t *s, const tb_frame_hdr_t *f,
		     uint64_t pos, uint64_t pub_tail, int chain)
{
	rc_tx_t *t = (rc_tx_t *)h;
	uint32_t space = tb_frame_space(f->length);
	uint32_t seq_bits = (uint32_t)(f->seq & TB_RC_IMM_SEQ_MASK)
			    << TB_RC_IMM_OFF_BITS;
	/* Relaxed, as in tb_rc_pub_frame: at most lower than the send saw (it
	 * only falls), which is as safe. */
	unsigned inl = f->length <= tb_atomic_load_relaxed(&t->h.inline_max)
		       ? IBV_SEND_INLINE : 0;
	uint64_t sq_limit = s->completed + TB_RC_SQ_DEPTH - SQ_SLACK;
	int in_flight;
	struct ibv_send_wr *w = &s->wr, *bad;
	uint64_t off, pad, anc, nwr = 1;

	/* The fast path took this frame's request from `left` on its way
	 * here: given back, and `posted` made the count. */
	s->left++;
	sub_sync(s);
	in_flight = s->posted != s->completed;
	if (tb_atomic_load_relaxed(&s->dead)) /* R1 is this thread's own */
		return;
	/* Nearly always the one reason: the request to signal is due (by
	 * count or by bytes), or this is a subscriber's first frame (whose
	 * sequence the fast path does not know yet: sub_fast), and every
	 * other limit holds (no wrap, room, credit, the SQ's room, no
	 * anchor, no skip), so there is nothing to work out but that. */
	if (s->posted <= sq_limit &&
	    s->posted - s->extra < s->room_frames && pub_tail <= s->pin_limit &&
	    s->wpos + space <= s->limit_pos) {
		int sig = s->posted + 1 == s->next_signal ||
			  pub_tail > s->signal_tail;
		struct ibv_send_wr *c;

		off = s->wpos & s->rmask;
		pad = anc = 0;
		if (!chain)
			goto post;   /* which signals it as `sig` says */
		/* Chaining: the request joins the chain.  A signalled one:
		 * the reap takes the one before it (TB_RC_SIGNAL_EVERY
		 * requests ago), so completions and errors come back at the
		 * unbatched pace. */
		c = tb_rc_pub_chain_add(s, f, f->length, s->raddr + off,
					(uint32_t)(off / TB_FRAME_ALIGN) | seq_bits,
					inl | (sig ? IBV_SEND_SIGNALED : 0));
		if (sig) {
			c->wr_id = s->posted + 1;
			sub_signalled(s, s->posted + 1, pos + space);
		}
		if (!in_flight)
			s->pin = pos;
		s->posted++;
		s->wpos += space;
		if (sig)
			sub_reap(t, s);
		else
			sub_limits(t, s);
		sub_fast(s, pub_tail, f->seq + 1);
		return;
	}
	/* Everything else: what is chained goes first, then as unbatched
	 * (a pad or an anchor is inline from one header, copied at post). */
	sub_chain_post(s);
	if (tb_atomic_load_relaxed(&s->dead)) /* R1 is this thread's own */
		return;
	if (s->posted > sq_limit || (in_flight && pub_tail - s->pin > t->h.half)) {
		if (sub_reap(t, s) < 0)
			return;
		sq_limit = s->completed + TB_RC_SQ_DEPTH - SQ_SLACK;
		in_flight = s->posted != s->completed;
	}
	if (s->posted > sq_limit)
		goto skip;
	if (in_flight && pub_tail - s->pin > t->h.half) {
		/* It holds requests that read frames we are about to
		 * overwrite: fail it rather than send it garbage. */
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};

		ibv_modify_qp(s->qp, &a, IBV_QP_STATE);
		sub_dead(s, "its writes did not complete before the frames they "
			 "read were overwritten (half of ring_size must hold "
			 "what the stream publishes in the time its NIC takes "
			 "to complete them, a retransmit's rdma_timeout "
			 "included)");
		return;
	}
	off = s->wpos & s->rmask;
	anc = s->anchor_due ? TB_RC_ANCHOR_LEN : 0;
	pad = off + anc + space > s->rmask + 1 ? s->rmask + 1 - off : 0;
	if (!sub_has_room(t, s, pad + anc + space))
		goto skip;
	/* Inline, both: copied at post time, so one header serves all. */
	if (pad) {
		tb_frame_init_pad(&s->pad_hdr, (uint32_t)pad, f->stream_id, f->seq);
		s->pad_wr.wr.rdma.remote_addr = s->raddr + off;
		off = 0;
	}
	if (anc) {
		tb_frame_init_pad(&s->anchor_hdr, TB_RC_ANCHOR_LEN, f->stream_id,
				  f->seq);
		s->anchor_hdr.template_id = TB_RC_ANCHOR;
		s->anchor_hdr.publish_ns = pos;  /* where f is in our ring */
		s->anchor_wr.wr.rdma.remote_addr = s->raddr + off;
		s->anchor_wr.next = w;
		w = &s->anchor_wr;
		nwr++;
		off += TB_RC_ANCHOR_LEN;
	}
	if (pad) {
		s->pad_wr.next = w;
		w = &s->pad_wr;
		nwr++;
	}
post:
	s->sge.addr = (uintptr_t)f;
	s->sge.length = f->length;
	s->wr.imm_data = htobe32((uint32_t)(off / TB_FRAME_ALIGN) | seq_bits);
	s->wr.wr.rdma.remote_addr = s->raddr + off;
	s->wr.send_flags = inl;
	if (s->posted + nwr >= s->next_signal || pub_tail > s->signal_tail) {
		s->wr.send_flags = inl | IBV_SEND_SIGNALED;
		s->wr.wr_id = s->posted + nwr;
		sub_signalled(s, s->posted + nwr, pos + space);
	}
	if (!in_flight)
		s->pin = pos;
	if (ibv_post_send(s->qp, w, &bad) != 0) {
		sub_dead(s, "ibv_post_send failed");
		return;
	}
	s->posted += nwr;
	s->extra += nwr - 1;
	s->wpos += pad + anc + space;
	s->anchor_due = 0;
	if (s->skipping) {
		/* Written to again: the range ends (K1; the release of the
		 * next range's skip_last orders this before it). */
		s->skipping = 0;
		tb_atomic_store_relaxed(&s->skip_first, 0);
	}
	/* Reap with every signalled request: completions come back at the
	 * pace they are asked for, and an error shows within
	 * TB_RC_SIGNAL_EVERY frames. */
	if (s->wr.send_flags & IBV_SEND_SIGNALED)
		sub_reap(t, s);
	else
		sub_limits(t, s);
	sub_fast(s, pub_tail, f->seq + 1);
	return;
skip:
	sub_skip(t, s, pos, f->seq);
}



/* Posts every subscriber's chain: one ibv_post_send each.  Hot path. */
static void tx_post(rc_tx_t *t, const tb_rc_pub_table_t *tab)
{
	for (int i = 0; i < tab->n; i++)
		sub_chain_post(tab->sub[i]);
	t->h.held = 0;
}

/* Data frame `f` was chained to every subscriber: counts it, and posts
 * the chains when they are full (each holds at most one request per
 * frame counted here, so none passes TB_RC_CHAIN). */
static inline __attribute__((always_inline)) void
tx_held(rc_tx_t *t, const tb_rc_pub_table_t *tab, const tb_frame_hdr_t *f)
{
	if (t->h.held++ == 0)
		t->h.held_ns = f->publish_ns;
	if (t->h.held == TB_RC_CHAIN)
		tx_post(t, tab);
}

/* Every frame of [from, to), chained (what a send is when it is not one
 * data frame: a pad before it, or a caller that committed several); the
 * caller posts what is left held, or keeps it for a batch. */
static __attribute__((noinline)) void
tx_frames(rc_tx_t *t, const tb_rc_pub_table_t *tab, uint64_t from, uint64_t to)
{
	for (uint64_t pos = from; pos != to;) {
		const tb_frame_hdr_t *f = tb_ring_at(&t->h.base.ring, pos);

		if (f->type == TB_FRAME_DATA) {
			tb_rc_pub_frame(&t->h, tab, f, f->length, f->seq, pos, to, 1, 0);
			tx_held(t, tab, f);
		}
		pos += tb_frame_space(f->length);
	}
}

/* Hot path: one post per subscriber per frame; several frames in one
 * send go as one chain per subscriber.  [from, to) holds at least one
 * frame; the common send is one data frame. */
static inline __attribute__((always_inline)) int
tx_send(tb_tx_t *tx, uint64_t from, uint64_t to, int fenced)
{
	rc_tx_t *t = (rc_tx_t *)tx;
	const tb_frame_hdr_t *f = tb_ring_at(&t->h.base.ring, from);
	const tb_rc_pub_table_t *tab = tb_rc_pub_enter(&t->h, fenced);

	if (tb_likely(f->type == TB_FRAME_DATA &&
		      from + tb_frame_space(f->length) == to)) {
		tb_rc_pub_frame(&t->h, tab, f, f->length, f->seq, from, to, 0, 0);
	} else {
		tx_frames(t, tab, from, to);
		tx_post(t, tab);
	}
	tb_rc_pub_leave(&t->h);
	return 0;
}

/* Batching (batch_us > 0): every frame is chained; the chains are posted
 * when full, when the oldest held frame is batch_us old at a send, and at
 * flush (rc_pub.c's "Batching").  Hot path. */
static inline __attribute__((always_inline)) int
tx_send_batched(tb_tx_t *tx, uint64_t from, uint64_t to, int fenced)
{
	rc_tx_t *t = (rc_tx_t *)tx;
	const tb_frame_hdr_t *f = tb_ring_at(&t->h.base.ring, from);
	uint64_t now;
	const tb_rc_pub_table_t *tab = tb_rc_pub_enter(&t->h, fenced);

	if (tb_likely(f->type == TB_FRAME_DATA &&
		      from + tb_frame_space(f->length) == to)) {
		tb_rc_pub_frame(&t->h, tab, f, f->length, f->seq, from, to, 1, 0);
		tx_held(t, tab, f);
		now = f->publish_ns;  /* stamped a moment ago */
	} else {
		tx_frames(t, tab, from, to);
		now = tb_clock_now_ns_inline();
	}
	if (t->h.held && now - t->h.held_ns >= t->h.batch_ns)
		tx_post(t, tab);
	tb_rc_pub_leave(&t->h);
	return 0;
}

static int rc_tx_send_batched(tb_tx_t *tx, uint64_t from, uint64_t to)
{
	return tx_send_batched(tx, from, to, 0);
}

static int rc_tx_send_batched_fenced(tb_tx_t *tx, uint64_t from, uint64_t to)
{
	return tx_send_batched(tx, from, to, 1);
}

/* tb_pub_flush: posts what the chains hold.  Hot path. */
static inline __attribute__((always_inline)) int
tx_flush(tb_tx_t *tx, int fenced)
{
	rc_tx_t *t = (rc_tx_t *)tx;
	const tb_rc_pub_table_t *tab;

	if (!t->h.held)
		return 0;
	tab = tb_rc_pub_enter(&t->h, fenced);
	tx_post(t, tab);
	tb_rc_pub_leave(&t->h);
	return 0;
}

static int rc_tx_flush(tb_tx_t *tx)
{
	return tx_flush(tx, 0);
}

static int rc_tx_flush_fenced(tb_tx_t *tx)
{
	return tx_flush(tx, 1);
}

static int rc_tx_send(tb_tx_t *tx, uint64_t from, uint64_t to)
{
	return tx_send(tx, from, to, 0);
}

/* Where membarrier is missing: the same with a full fence on entry. */
static int rc_tx_send_fenced(tb_tx_t *tx, uint64_t from, uint64_t to)
{
	return tx_send(tx, from, to, 1);
}

/* The send's two tests of `s`'s requests in flight, passed: its send
 * queue has room (else the send skips it), and our ring's tail may move
 * to `new_tail` without overwriting a frame one of them reads (else the
 * send drops it). */
static int sub_sq_ok(const rc_tx_t *t, const tb_rc_pub_sub_t *s,
		     uint64_t new_tail)
{
	return s->posted <= s->completed + TB_RC_SQ_DEPTH - SQ_SLACK &&
	       (s->posted == s->completed || new_tail - s->pin <= t->h.half);
}

/* sub_sq_ok, after reaping `s`'s completions when it fails.  Requests
 * posted since the last signalled one never report on their own (large
 * frames: 64 of them can span half our ring), so when they are what holds
 * the pin, a fence asks them to, and the next call finds them reported.
 * Warm. */
static int sub_send_room(rc_tx_t *t, tb_rc_pub_sub_t *s, uint64_t new_tail)
{
	if (sub_sq_ok(t, s, new_tail))
		return 1;
	if (sub_reap(t, s) < 0)
		return 1;   /* dead: the send leaves it alone */
	if (sub_sq_ok(t, s, new_tail))
		return 1;
	if (s->completed == s->last_signal && s->posted != s->last_signal) {
		sub_fence(s, t->h.base.ring.tail);
		sub_limits(t, s);
	}
	return 0;
}

/* Back-pressure: every live subscriber must have room for the frame (with
 * a padding frame's worth to spare, since its ring wraps on its own), and
 * its requests in flight must have completed far enough that its send
 * queue has room and the frame overwrites nothing they read: a
 * subscriber whose completions lag waits for them here rather than being
 * skipped or dropped by the send. */
static inline __attribute__((always_inline)) int
tx_room(tb_tx_t *tx, uint64_t new_tail, int fenced)
{
	rc_tx_t *t = (rc_tx_t *)tx;
	uint64_t span = new_tail - t->h.base.ring.tail;
	tb_rc_pub_table_t *tab = tb_rc_pub_enter(&t->h, fenced);
	int rc = 0;

	for (int i = 0; i < tab->n && rc == 0; i++) {
		tb_rc_pub_sub_t *s = tab->sub[i];

		/* `posted` as the fast path has counted it, before either
		 * test and the limits a refresh or a reap works out. */
		sub_sync(s);
		/* Relaxed: R1 is this thread's own store. */
		if (!tb_atomic_load_relaxed(&s->dead) &&
		    (!sub_has_room(t, s, 2 * (span + (s->anchor_due
						      ? TB_RC_ANCHOR_LEN : 0))) ||
		     !sub_send_room(t, s, new_tail)))
			rc = TB_BACK_PRESSURED;
	}
	/* What is held counts as used room, and the subscriber can give
	 * none of it back before it has it. */
	if (tb_unlikely(rc == TB_BACK_PRESSURED && t->h.held))
		tx_post(t, tab);
	tb_rc_pub_leave(&t->h);
	return rc;
}

static int rc_tx_room(tb_tx_t *tx, uint64_t new_tail)
{
	return tx_room(tx, new_tail, 0);
}

static int rc_tx_room_fenced(tb_tx_t *tx, uint64_t new_tail)
{
	return tx_room(tx, new_tail, 1);
}

static void rc_tx_beat(tb_tx_t *tx, uint64_t now_ns, uint64_t last_seq)
{
	rc_tx_t *t = (rc_tx_t *)tx;

	(void)now_ns;
	/* V1, relaxed: a value on its own, read by the control thread. */
	tb_atomic_store_relaxed(&t->last_seq, last_seq);
}

/* ------------------------------------------- publisher: the control thread */

/* A log line of `l`'s kind, unless one went out within the last second;
 * then it is counted and the next one says how many were held back. */
static void log_limited(rc_tx_t *t, rc_log_t *l, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void log_limited(rc_tx_t *t, rc_log_t *l, const char *fmt, ...)
{
	uint64_t now = tb_clock_mono_ms();
	char line[320];
	va_list ap;

	if (now < l->next_ms) {
		l->held++;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (l->held)
		tb_warn("stream '%s': %s; %llu more like it not logged since the "
			"last line", t->cfg.name, line, (unsigned long long)l->held);
	else
		tb_warn("stream '%s': %s", t->cfg.name, line);
	l->held = 0;
	l->next_ms = now + TB_RC_LOG_EVERY_MS;
}

static void sub_free(rc_tx_t *t, tb_rc_pub_sub_t *s)
{
	if (s->qp)
		ibv_destroy_qp(s->qp);
	if (s->cq)
		ibv_destroy_cq(s->cq);
	if (s->credit_mr) {
		tb_counters_mr_remove(s->credit_rec);
		ibv_dereg_mr(s->credit_mr);
	}
	if (s->ring_mr) {
		tb_counters_mr_remove(s->ring_rec);
		ibv_dereg_mr(s->ring_mr);
	}
	if (s->pos_mr) {
		tb_counters_mr_remove(s->pos_rec);
		ibv_dereg_mr(s->pos_mr);
	}
	if (s->pd)
		ibv_dealloc_pd(s->pd);
	if (s->slot >= 0) {
		t->slot_used &= ~(1ull << s->slot);
		t->pinned -= t->per_sub_pinned;
	}
	free(s);
}

/* The small send's list when it has none (tb_rc_pub_t's small_subs). */
static tb_rc_pub_sub_t *const no_subs[1];

/* Publishes a copy of the table with `add` added or `del` removed; when it
 * returns, no send reads the old one (nor `del`). */
static int table_change(rc_tx_t *t, tb_rc_pub_sub_t *add, tb_rc_pub_sub_t *del)
{
	tb_rc_pub_table_t *old = tb_atomic_load_relaxed(&t->h.table); /* our own */
	tb_rc_pub_table_t *nt = calloc(1, sizeof(*nt));

	if (!nt)
		return tb_error_set(TB_ENOMEM, "out of memory");
	for (int i = 0; i < old->n; i++)
		if (old->sub[i] != del)
			nt->sub[nt->n++] = old->sub[i];
	if (add)
		nt->sub[nt->n++] = add;
	/* inline_small is lowered before READY adds a subscriber whose QP
	 * takes less (rc_ready), so the flag read here covers every one. */
	tb_atomic_store_release(&t->h.small_subs,
				nt->n && tb_atomic_load_relaxed(&t->h.inline_small)
				? (tb_rc_pub_sub_t *const *)nt->sub : no_subs);
	/* Sequentially consistent: ordered before readers_wait's
	 * membarrier and its read of `reading` (and so is small_subs). */
	tb_atomic_store_seq_cst(&t->h.table, nt);
	readers_wait(t);
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
	log_limited(t, &t->log_reject, "rejected subscriber '%s' from %s: %s "
		    "(%llu rejected in all, %llu of them for a wrong token)",
		    c->id[0] ? c->id : "?", t->addrs[c->addr].ip, text,
		    (unsigned long long)t->rejected,
		    (unsigned long long)t->bad_tokens);
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
	if (c->sub && c->state == CLIENT_LIVE) {
		/* Dropped for a fault is the operator's business; a
		 * subscriber that left, or a stream that closed, is not. */
		if (bye_reason == TB_CONTROL_BYE_ERROR ||
		    bye_reason == TB_CONTROL_BYE_TIMEOUT)
			tb_warn("stream '%s': dropped subscriber '%s': %s; it "
				"was lapped for %llu frames", t->cfg.name,
				c->id, why, (unsigned long long)c->sub->laps);
		else
			tb_info("stream '%s': subscriber '%s' left: %s; it was "
				"lapped for %llu frames", t->cfg.name, c->id,
				why, (unsigned long long)c->sub->laps);
		table_change(t, NULL, c->sub);
	}
	if (c->sub)
		sub_free(t, c->sub);
	if (c->state == CLIENT_PENDING) {
		t->n_pending--;
		t->addrs[c->addr].pending--;
	}
	close(c->fd);
	t->clients[i] = t->clients[--t->n_clients];
}

/* The memory one subscriber pins: our ring, its credit slot and our
 * ring's position word registered in its PD, its CQ and QP (memlock.h). */
static uint64_t sub_pinned(const rc_tx_t *t)
{
	return tb_memlock_mr_bytes(t->ring_mem.addr, t->cfg.ring_size) +
	       tb_memlock_mr_bytes(t->slot_mem.addr, TB_RC_SLOT_SIZE) +
	       tb_memlock_mr_bytes((const uint8_t *)t->slot_mem.addr +
				   TB_RC_MAX_SUBS * TB_RC_SLOT_SIZE,
				   sizeof(uint64_t)) +
	       tb_memlock_cq_bytes(SUB_CQE) +
	       tb_memlock_qp_bytes(TB_MEMLOCK_WQE_RC_WRITE, TB_RC_SQ_DEPTH,
				   TB_RC_INLINE, 1, 1);
}

/* SUBSCRIBE: a PD, a queue pair in RTS and a credit slot for the
 * subscriber (and, when it reads back, our ring and its position word
 * readable), then ACCEPT.  Returns 0, or < 0 after rejecting it. */
static int client_subscribe(rc_tx_t *t, rc_client_t *c,
			    const tb_control_subscribe_t *m)
{
	enum ibv_mtu mtu = tb_verbs_mtu_min(t->dev.mtu, (enum ibv_mtu)m->mtu);
	tb_verbs_path_t path = tb_verbs_path_of(&t->cfg, mtu);
	int reads = (m->flags & TB_CONTROL_SUB_F_READ) != 0;
	/* Our ring: the source of our WRITEs (a local read needs no flag)
	 * and, for a subscriber that reads back, REMOTE_READ; nothing else. */
	unsigned ring_access = reads ? IBV_ACCESS_REMOTE_READ : 0;
	unsigned credit_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	tb_control_accept_t a = {.stream_id = t->cfg.id, .epoch = t->epoch,
				 .psn = t->psn, .lid = t->dev.lid,
				 .mtu = (uint8_t)mtu, .sl = path.sl,
				 .traffic_class = path.traffic_class};
	tb_verbs_qp_cfg_t qc = {
		.type = IBV_QPT_RC, .send_wr = TB_RC_SQ_DEPTH, .recv_wr = 1,
		.send_sge = 1, .inline_want = TB_RC_INLINE,
		/* the padding header goes inline: it is not registered */
		.inline_min = TB_FRAME_HDR_LEN,
		.access = IBV_ACCESS_REMOTE_WRITE | (reads ? IBV_ACCESS_REMOTE_READ : 0),
		.send_ops = IBV_QP_EX_WITH_RDMA_WRITE |
			    IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
	};
	tb_verbs_peer_t peer = {.qpn = m->qpn, .psn = m->psn, .lid = m->lid};
	_Atomic uint64_t *slot;
	tb_rc_pub_sub_t *s = NULL;
	tb_memlock_state_t ml;
	uint32_t inline_got = 0;
	char why[TB_CONTROL_TEXT_LEN], what[96], peer_name[96];

	if (m->stream_id != t->cfg.id) {
		reject(t, c, TB_CONTROL_REJ_UNKNOWN_STREAM, "SUBSCRIBE names another stream");
		return -1;
	}
	if (m->transport != TB_TRANSPORT_RC) {
		reject(t, c, TB_CONTROL_REJ_UNSUPPORTED_TRANSPORT, "this stream is rc");
		return -1;
	}
	if (m->ring_len < 2ull * t->h.base.ring.max_frame) {
		snprintf(why, sizeof(why), "ring of %llu bytes is under twice the "
			 "largest frame (%u)", (unsigned long long)m->ring_len,
			 t->h.base.ring.max_frame);
		reject(t, c, TB_CONTROL_REJ_MALFORMED, why);
		return -1;
	}
	if (!t->dev.global != !!m->lid) {
		snprintf(why, sizeof(why), "the publisher is on %s and the "
			 "subscriber on %s: both must be on the same link layer",
			 t->dev.global ? "RoCE" : "InfiniBand",
			 m->lid ? "InfiniBand" : "RoCE");
		reject(t, c, TB_CONTROL_REJ_MALFORMED, why);
		return -1;
	}
	if (tb_atomic_load_relaxed(&t->h.table)->n >= TB_RC_MAX_SUBS ||
	    t->slot_used == ~0ull) {
		reject(t, c, TB_CONTROL_REJ_FULL, "no room for another subscriber");
		return -1;
	}
	snprintf(what, sizeof(what), "stream '%s': the rc publisher's next "
		 "subscriber", t->cfg.name);
	if (tb_memlock_read(&ml) < 0 ||
	    (ml.pinned = ml.pinned > t->pinned ? ml.pinned : t->pinned,
	     tb_memlock_fits(&ml, t->per_sub_pinned, what) < 0)) {
		snprintf(why, sizeof(why), "the publisher is out of locked "
			 "memory (RLIMIT_MEMLOCK); its log says what to raise");
		tb_warn("%s", tb_errmsg());
		reject(t, c, TB_CONTROL_REJ_INTERNAL, why);
		return -1;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		goto internal;
	s->slot = __builtin_ctzll(~t->slot_used);
	t->slot_used |= 1ull << s->slot;
	t->pinned += t->per_sub_pinned;   /* sub_free gives it back */
	slot = (_Atomic uint64_t *)((uint8_t *)t->slot_mem.addr +
				    (size_t)s->slot * TB_RC_SLOT_SIZE);
	/* Relaxed: before the slot is registered, nothing else sees it. */
	tb_atomic_store_relaxed(slot, 0);
	s->credit = slot;
	s->pd = ibv_alloc_pd(t->dev.ctx);
	if (!s->pd) {
		tb_error_sys(errno, "ibv_alloc_pd");
		goto internal;
	}
	s->credit_mr = ibv_reg_mr(s->pd, (void *)slot, TB_RC_SLOT_SIZE,
				  (int)credit_access);
	s->ring_mr = ibv_reg_mr(s->pd, t->ring_mem.addr, t->cfg.ring_size,
				(int)ring_access);
	if (reads)
		s->pos_mr = ibv_reg_mr(s->pd, (void *)t->pos, sizeof(uint64_t),
				       IBV_ACCESS_REMOTE_READ);
	if (!s->credit_mr || !s->ring_mr || (reads && !s->pos_mr)) {
		tb_error_sys(errno, "ibv_reg_mr");
		goto internal;
	}
	s->credit_rec = tb_counters_mr_add(t->cfg.id, TB_ROLE_PUBLISHER,
					   TB_MR_CREDIT, "rc", s->credit_mr,
					   credit_access);
	s->ring_rec = tb_counters_mr_add(t->cfg.id, TB_ROLE_PUBLISHER,
					 reads ? TB_MR_REPLAY : TB_MR_RING_TX, "rc",
					 s->ring_mr, ring_access);
	if (reads)
		s->pos_rec = tb_counters_mr_add(t->cfg.id, TB_ROLE_PUBLISHER,
						TB_MR_REPLAY, "rc", s->pos_mr,
						IBV_ACCESS_REMOTE_READ);
	s->cq = ibv_create_cq(t->dev.ctx, (int)SUB_CQE, NULL, NULL, 0);
	if (!s->cq) {
		tb_error_sys(errno, "ibv_create_cq");
		goto internal;
	}
	qc.cq = s->cq;
	qc.pd = s->pd;
	s->qp = tb_verbs_qp_create(&t->dev, &qc, &inline_got);
	if (s->qp && inline_got < TB_FRAME_HDR_LEN) {
		tb_error_set(TB_ENOTSUP, "%s granted %u bytes of inline data, "
			     "under a frame header (%u)", t->dev.name, inline_got,
			     TB_FRAME_HDR_LEN);
		goto internal;
	}
	/* A provider may grant less inline than asked: frames above what
	 * this QP takes go by reference, to every subscriber (it is lowered
	 * before READY adds this one). */
	if (s->qp && inline_got < tb_atomic_load_relaxed(&t->h.inline_max)) {
		tb_atomic_store_relaxed(&t->h.inline_max, inline_got);
		if (inline_got < TB_RC_SMALL_FRAME)
			tb_atomic_store_relaxed(&t->h.inline_small, 0u);
	}
	memcpy(peer.gid, m->gid, sizeof(peer.gid));
	/* Its READs of our ring come two at a time at most (rc.h). */
	if (reads)
		path.rd_in = TB_RC_RD_ATOMIC < t->dev.rd_in_max ? TB_RC_RD_ATOMIC
								 : t->dev.rd_in_max;
	if (!s->qp || tb_verbs_rc_connect(&t->dev, s->qp, &peer, t->psn,
					  &path) < 0)
		goto internal;
	s->raddr = m->ring_addr;
	s->rkey = m->rkey;
	s->post_send = s->qp->context->ops.post_send;
	s->sge.lkey = s->ring_mr->lkey;
	s->wr = (struct ibv_send_wr){.sg_list = &s->sge, .num_sge = 1,
				     .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				     .wr.rdma.rkey = m->rkey};
	s->small_wr = (struct ibv_send_wr){.sg_list = &t->h.small_sge,
					   .num_sge = 1,
					   .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
					   .send_flags = IBV_SEND_INLINE,
					   .wr.rdma.rkey = m->rkey};
	s->pad_sge = (struct ibv_sge){.addr = (uintptr_t)&s->pad_hdr,
				      .length = TB_FRAME_HDR_LEN};
	s->pad_wr = (struct ibv_send_wr){.next = &s->wr, .sg_list = &s->pad_sge,
					 .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_INLINE,
					 .wr.rdma.rkey = m->rkey};
	s->anchor_sge = (struct ibv_sge){.addr = (uintptr_t)&s->anchor_hdr,
					 .length = TB_RC_ANCHOR_LEN};
	s->anchor_wr = (struct ibv_send_wr){.next = &s->wr,
					    .sg_list = &s->anchor_sge,
					    .num_sge = 1,
					    .opcode = IBV_WR_RDMA_WRITE,
					    .send_flags = IBV_SEND_INLINE,
					    .wr.rdma.rkey = m->rkey};
	for (uint32_t i = 0; i < TB_RC_CHAIN; i++) {
		s->chain_sge[i].lkey = s->ring_mr->lkey;
		s->chain[i] = (struct ibv_send_wr){
			.next = i + 1 < TB_RC_CHAIN ? &s->chain[i + 1] : NULL,
			.sg_list = &s->chain_sge[i], .num_sge = 1,
			.opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
			.wr.rdma.rkey = m->rkey};
	}
	s->reads = reads;
	s->anchor_due = reads;  /* its first frame comes behind one */
	s->rmask = m->ring_len - 1;
	s->recv_depth = m->recv_depth;
	s->mtu = mtu;
	s->next_signal = TB_RC_SIGNAL_EVERY;
	/* Its limits, with fast_tail 0: its first frame goes the slow way,
	 * which knows that frame's sequence (sub_fast). */
	sub_room_refresh(t, s);
	memcpy(s->client, c->id, sizeof(s->client));
	a.qpn = s->qp->qp_num;
	memcpy(a.gid, t->dev.gid.raw, 16);
	a.credit_rkey = s->credit_mr->rkey;
	a.credit_addr = (uintptr_t)slot;
	a.next_seq = tb_atomic_load_relaxed(&t->last_seq) + 1; /* V1 */
	a.ring_offset = 0;
	if (reads) {
		a.flags = TB_CONTROL_ACC_F_READ;
		a.rd_atomic = path.rd_in;
		a.read_addr = (uintptr_t)t->ring_mem.addr;
		a.read_len = t->cfg.ring_size;
		a.read_rkey = s->ring_mr->rkey;
		a.pos_addr = (uintptr_t)t->pos;
		a.pos_rkey = s->pos_mr->rkey;
		a.ring_id = t->ring_id;
	}
	/* The keys go to this subscriber alone: the audit's record of it. */
	snprintf(peer_name, sizeof(peer_name), "%s@%s qp %u",
		 c->id[0] ? c->id : "?", t->addrs[c->addr].ip, m->qpn);
	tb_counters_mr_peer(s->credit_rec, peer_name);
	if (reads) {
		tb_counters_mr_peer(s->ring_rec, peer_name);
		tb_counters_mr_peer(s->pos_rec, peer_name);
	}
	c->sub = s;
	if (SEND(c->fd, accept, &a) < 0)
		return -1;   /* the caller drops it, and with it the sub */
	return 0;
internal:
	snprintf(why, sizeof(why), "publisher could not set up RDMA: %s",
		 tb_errmsg());
	if (s)
		sub_free(t, s);
	reject(t, c, TB_CONTROL_REJ_INTERNAL, why);
	return -1;
}

/* A wrong token: the address waits before its next connection is read,
 * twice as long each time (TB_RC_PENALTY_MS .. TB_RC_PENALTY_MAX_MS). */
static void penalise(rc_tx_t *t, rc_addr_t *a, uint64_t now)
{
	uint32_t shift = a->bad_tokens < 6 ? a->bad_tokens : 6;
	uint64_t wait = (uint64_t)TB_RC_PENALTY_MS << shift;

	a->bad_tokens++;
	t->bad_tokens++;
	a->penalty_until_ms = now + (wait < TB_RC_PENALTY_MAX_MS ? wait
								  : TB_RC_PENALTY_MAX_MS);
}

/* One message from client `c`; returns < 0 when the client must go. */
static int client_message(rc_tx_t *t, rc_client_t *c, const tb_control_msg_t *m)
{
	uint64_t now = tb_clock_mono_ms();

	switch (c->state) {
	case CLIENT_PENDING:
		if (m->type != TB_CONTROL_HELLO)
			break;
		memcpy(c->id, m->hello.client_id, sizeof(c->id));
		if (m->hello.stream_id != t->cfg.id) {
			reject(t, c, TB_CONTROL_REJ_UNKNOWN_STREAM, "no such stream here");
			return -1;
		}
		if (t->cfg.token[0] && !tb_control_token_equal(m->hello.token, t->cfg.token)) {
			penalise(t, &t->addrs[c->addr], now);
			reject(t, c, TB_CONTROL_REJ_BAD_TOKEN, "token does not match");
			return -1;
		}
		t->addrs[c->addr].bad_tokens = 0;
		t->addrs[c->addr].pending--;
		t->n_pending--;
		c->state = CLIENT_SUBSCRIBE;
		c->deadline_ms = now + TB_RC_SETUP_MS;
		return 0;
	case CLIENT_SUBSCRIBE:
		if (m->type != TB_CONTROL_SUBSCRIBE)
			break;
		if (client_subscribe(t, c, &m->subscribe) < 0)
			return -1;
		c->state = CLIENT_READY;
		return 0;
	case CLIENT_READY:
		if (m->type != TB_CONTROL_READY)
			break;
		if (m->ready.stream_id != t->cfg.id) {
			reject(t, c, TB_CONTROL_REJ_MALFORMED, "READY names another stream");
			return -1;
		}
		if (table_change(t, c->sub, NULL) < 0)
			return -1;
		c->state = CLIENT_LIVE;
		tb_info("stream '%s': subscriber '%s' joined (qp %u, ring %llu "
			"bytes, path MTU %u)", t->cfg.name, c->id,
			c->sub->qp->qp_num, (unsigned long long)c->sub->rmask + 1,
			tb_verbs_mtu_bytes(c->sub->mtu));
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

/* The version of the protocol a client spoke, when it is not ours: it is
 * refused, in its own version when that is older (control.h), so that it
 * can say which side to upgrade. */
static void refuse_version(rc_tx_t *t, rc_client_t *c)
{
	int v = tb_control_version_of(c->in.buf, c->in.have);
	tb_control_reject_t r = {.stream_id = t->cfg.id,
				 .reason = TB_CONTROL_REJ_BAD_VERSION};
	uint8_t buf[TB_CONTROL_MSG_MAX];
	int n;

	snprintf(r.text, sizeof(r.text), "this publisher speaks control "
		 "protocol version %u and this subscriber version %d: upgrade "
		 "tickbus on the subscriber's host", TB_CONTROL_VERSION, v);
	n = tb_control_encode_reject_in(buf, sizeof(buf), &r,
					v >= (int)TB_CONTROL_VERSION_OLDEST &&
					v < (int)TB_CONTROL_VERSION
						? (unsigned)v : TB_CONTROL_VERSION);
	if (n > 0)
		tb_net_send_all(c->fd, buf, (size_t)n, TB_RC_CTL_SEND_MS);
	t->rejected++;
	log_limited(t, &t->log_reject, "rejected a subscriber from %s: it "
		    "speaks control protocol version %d, this publisher %u",
		    t->addrs[c->addr].ip, v, TB_CONTROL_VERSION);
}

/* Reads what client `i` sent and acts on it; drops it when it must go.
 * Returns 1 when it was dropped. */
static int client_read(rc_tx_t *t, int i, uint64_t now_ns)
{
	rc_client_t *c = &t->clients[i];
	tb_control_msg_t m;
	int rc;

	while ((rc = tb_rc_ctl_read(c->fd, &c->in, &m, 0)) == 1) {
		c->last_rx_ns = now_ns;
		if ((rc = client_message(t, c, &m)) < 0)
			break;
	}
	if (rc == 0)
		return 0;
	if (rc == TB_EFORMAT && c->state == CLIENT_PENDING)
		refuse_version(t, c);
	else if (rc < 0 && rc != TB_CLOSED && rc != -1 && c->state != CLIENT_LIVE)
		reject(t, c, TB_CONTROL_REJ_MALFORMED, tb_errmsg());
	client_drop(t, i, 0, "its control connection ended");
	return 1;
}

/* The address record of `ip`: found, or a new one in place of the least
 * recently seen that has no pending connection.  -1 when none is free. */
static int addr_of(rc_tx_t *t, const char *ip, uint64_t now)
{
	int oldest = -1;

	for (int i = 0; i < TB_RC_ADDRS; i++) {
		rc_addr_t *a = &t->addrs[i];

		if (a->ip[0] && strcmp(a->ip, ip) == 0) {
			if (now - a->last_ms > TB_RC_PENALTY_FORGET_MS &&
			    now >= a->penalty_until_ms)
				a->bad_tokens = 0;
			a->last_ms = now;
			return i;
		}
		if (a->pending == 0 && (oldest < 0 || a->last_ms < t->addrs[oldest].last_ms))
			oldest = i;
	}
	if (oldest >= 0) {
		/* Live and set-up clients keep their index into the old
		 * record: they only read .ip for log lines. */
		t->addrs[oldest] = (rc_addr_t){.last_ms = now};
		snprintf(t->addrs[oldest].ip, sizeof(t->addrs[oldest].ip), "%s", ip);
	}
	return oldest;
}

/* Closes the oldest pending connection (of address `addr`, or of any when
 * -1), making room for a new one.  Returns 1 when one was closed. */
static int evict_pending(rc_tx_t *t, int addr)
{
	int victim = -1;

	for (int i = 0; i < t->n_clients; i++) {
		rc_client_t *c = &t->clients[i];

		if (c->state == CLIENT_PENDING && (addr < 0 || c->addr == addr) &&
		    (victim < 0 || c->opened_ms < t->clients[victim].opened_ms))
			victim = i;
	}
	if (victim < 0)
		return 0;
	t->refused++;
	log_limited(t, &t->log_refuse, "closed a connection from %s to make "
		    "room: no HELLO yet, and %s (%llu refused in all)",
		    t->addrs[t->clients[victim].addr].ip,
		    addr < 0 ? "every slot for new connections is taken"
			     : "that address holds its share of them",
		    (unsigned long long)t->refused);
	client_drop(t, victim, 0, "");
	return 1;
}

static void accept_clients(rc_tx_t *t)
{
	for (int k = 0; k < TB_RC_ACCEPT_BATCH; k++) {
		char ip[48];
		int fd = tb_net_accept(t->listen_fd, ip, sizeof(ip));
		uint64_t now = tb_clock_mono_ms();
		rc_client_t *c;
		int a;

		if (fd == TB_NOT_CONNECTED)
			return;
		if (fd < 0) {
			/* Out of descriptors, most likely.  The oldest
			 * pending connection gives its back, and the next
			 * in the queue is taken, as when the pending slots
			 * are full: a flood holding every descriptor does
			 * not slow the queue down.  With none pending, the
			 * port waits rather than spin. */
			int made_room = evict_pending(t, -1);

			log_limited(t, &t->log_accept, "accept failed (%s): %s",
				    tb_errmsg(), made_room
				    ? "a pending connection made room"
				    : "no pending connection to close; not "
				      "accepting for a moment");
			if (made_room)
				continue;
			t->accept_paused_until_ms = now + TB_RC_ACCEPT_PAUSE_MS;
			return;
		}
		a = addr_of(t, ip, now);
		if (a >= 0 && t->addrs[a].pending >= TB_RC_PENDING_PER_ADDR)
			evict_pending(t, a);
		if (a >= 0 && (t->n_pending >= TB_RC_PENDING_MAX ||
			       t->n_clients >= MAX_CLIENTS))
			evict_pending(t, -1);
		if (a < 0 || now < t->addrs[a].penalty_until_ms ||
		    t->n_clients >= MAX_CLIENTS) {
			t->refused++;
			log_limited(t, &t->log_refuse, "refused a connection from "
				    "%s: %s (%llu refused in all)", ip,
				    a < 0 ? "too many addresses are connecting"
				    : t->n_clients >= MAX_CLIENTS
					    ? "every slot is taken by authenticated "
					      "subscribers"
					    : "it gave a wrong token and must wait",
				    (unsigned long long)t->refused);
			close(fd);
			continue;
		}
		c = &t->clients[t->n_clients++];
		memset(c, 0, sizeof(*c));
		c->fd = fd;
		c->state = CLIENT_PENDING;
		c->addr = a;
		c->opened_ms = now;
		c->deadline_ms = now + TB_RC_HELLO_MS;
		c->last_rx_ns = tb_clock_now_ns();
		t->addrs[a].pending++;
		t->n_pending++;
		/* A real subscriber sent its HELLO with the connect: read it
		 * now, before more connections can crowd it out. */
		client_read(t, t->n_clients - 1, c->last_rx_ns);
	}
}

/* The range `s` is being skipped for, as one consistent pair: K2 pairs
 * with K1 in sub_skip.  0 and 0 when none. */
static void skipped_range(tb_rc_pub_sub_t *s, uint64_t *first, uint64_t *last)
{
	for (int tries = 0; tries < 4; tries++) {
		uint64_t f1 = tb_atomic_load_acquire(&s->skip_first);  /* K2 */
		uint64_t l = tb_atomic_load_acquire(&s->skip_last);    /* K2 */
		uint64_t f2 = tb_atomic_load_acquire(&s->skip_first);  /* K2 */

		if (f1 == f2) {
			*first = f1;
			*last = f1 ? l : 0;
			return;
		}
	}
	*first = *last = 0;   /* changing under us: the next beat says */
}

static void heartbeat_all(rc_tx_t *t, uint64_t now, uint64_t last_seq)
{
	for (int i = 0; i < t->n_clients; i++) {
		rc_client_t *c = &t->clients[i];
		tb_control_heartbeat_t hb = {.timestamp_ns = now,
					     .last_seq = last_seq};

		if (c->state != CLIENT_LIVE)
			continue;
		skipped_range(c->sub, &hb.skip_first, &hb.skip_last);
		SEND(c->fd, heartbeat, &hb);
	}
}

/* Acts on the device's asynchronous events: a subscriber whose QP or CQ
 * failed is dropped (it reconnects); a port or address change is said, and
 * a change of our own GID or LID drops everyone (they address us by the
 * old one). */
static void device_events(rc_tx_t *t)
{
	tb_verbs_event_t ev;

	while (tb_verbs_events_next(&t->dev, &ev) == 1) {
		const char *name = tb_verbs_event_name(&ev);
		int drop_all = 0;

		switch (ev.kind) {
		case TB_VERBS_EV_QP_FATAL:
		case TB_VERBS_EV_CQ_ERR:
			for (int i = t->n_clients - 1; i >= 0; i--) {
				tb_rc_pub_sub_t *s = t->clients[i].sub;

				if (s && ((ev.qp && ev.qp == s->qp) ||
					  (ev.cq && ev.cq == s->cq))) {
					char why[96];

					snprintf(why, sizeof(why), "its %s had an "
						 "asynchronous error (%s)",
						 ev.qp ? "queue pair"
						       : "completion queue", name);
					client_drop(t, i, TB_CONTROL_BYE_ERROR, why);
				}
			}
			break;
		case TB_VERBS_EV_PORT_DOWN:
			if (tb_verbs_event_on_port(&t->dev, &ev))
				tb_warn("stream '%s': %s port %u is down: writes to "
					"subscribers retry until it is back or "
					"their retries run out (rdma_timeout, "
					"rdma_retry)", t->cfg.name, t->dev.name,
					t->dev.port);
			break;
		case TB_VERBS_EV_PORT_UP:
			if (tb_verbs_event_on_port(&t->dev, &ev))
				tb_info("stream '%s': %s port %u is active again",
					t->cfg.name, t->dev.name, t->dev.port);
			break;
		case TB_VERBS_EV_ADDR_CHANGE:
			if (tb_verbs_event_on_port(&t->dev, &ev) &&
			    tb_verbs_refresh(&t->dev) != 0) {
				tb_warn("stream '%s': %s port %u: our address "
					"changed (%s): every subscriber reconnects",
					t->cfg.name, t->dev.name, t->dev.port, name);
				drop_all = 1;
			}
			break;
		case TB_VERBS_EV_DEVICE_FATAL:
			tb_warn("stream '%s': %s failed (%s): no subscriber can "
				"be served", t->cfg.name, t->dev.name, name);
			drop_all = 1;
			break;
		default:
			break;
		}
		for (int i = t->n_clients - 1; drop_all && i >= 0; i--)
			if (t->clients[i].sub)
				client_drop(t, i, TB_CONTROL_BYE_ERROR, name);
	}
}

/* 1 when `qp` is in the error state (a write failed, or the device
 * failed it).  A query to the device: control thread only. */
static int qp_failed(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	return ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) == 0 &&
	       a.qp_state == IBV_QPS_ERR;
}

/* Every heartbeat: the publishing thread learns of a failed write only
 * when it reaps, which a quiet stream does not make it do; the QP's state
 * says it first. */
static void check_qps(rc_tx_t *t)
{
	for (int i = t->n_clients - 1; i >= 0; i--) {
		rc_client_t *c = &t->clients[i];

		if (c->state == CLIENT_LIVE && qp_failed(c->sub->qp))
			client_drop(t, i, TB_CONTROL_BYE_ERROR,
				    "its queue pair went to the error state");
	}
}

/* Deadlines of clients not yet live, liveness of live ones, failed QPs. */
static void client_check(rc_tx_t *t, int i, uint64_t now_ns, uint64_t now_ms,
			 uint64_t dead_ns)
{
	rc_client_t *c = &t->clients[i];

	if (c->state != CLIENT_LIVE) {
		if (now_ms < c->deadline_ms)
			return;
		t->timed_out++;
		log_limited(t, &t->log_timeout, "closed a connection from %s: "
			    "%s within %u ms (%llu closed so in all)",
			    t->addrs[c->addr].ip,
			    c->state == CLIENT_PENDING ? "no HELLO"
						       : "no SUBSCRIBE or READY",
			    c->state == CLIENT_PENDING ? TB_RC_HELLO_MS
						       : TB_RC_SETUP_MS,
			    (unsigned long long)t->timed_out);
		client_drop(t, i, 0, "");
	} else if (tb_atomic_load_acquire(&c->sub->dead)) { /* A1 pairs with R1 */
		client_drop(t, i, TB_CONTROL_BYE_ERROR,
			    c->sub->why_dead ? c->sub->why_dead : "a write failed");
	} else if (now_ns - c->last_rx_ns > dead_ns) {
		client_drop(t, i, TB_CONTROL_BYE_TIMEOUT,
			    "silent for longer than liveness_timeout_ms");
	}
}

static void *ctl_main(void *arg)
{
	rc_tx_t *t = arg;
	uint64_t beat_ns = (uint64_t)t->cfg.heartbeat_ms * 1000000ull;
	uint64_t dead_ns = (uint64_t)t->cfg.liveness_timeout_ms * 1000000ull;
	uint64_t next_beat = 0;
	struct pollfd pf[MAX_CLIENTS + 3];

	while (!tb_atomic_load_seq_cst(&t->stop)) { /* S1 pairs with S1 in rc_tx_close */
		uint64_t now, now_ms;
		int n = 0;

		/* (a paused port, fd -1, is not watched) */
		pf[n++] = (struct pollfd){.fd = tb_clock_mono_ms() <
						      t->accept_paused_until_ms
						? -1 : t->listen_fd,
					  .events = POLLIN};
		pf[n++] = (struct pollfd){.fd = t->wake_fd, .events = POLLIN};
		pf[n++] = (struct pollfd){.fd = tb_verbs_events_fd(&t->dev),
					  .events = POLLIN};
		for (int i = 0; i < t->n_clients; i++)
			pf[n++] = (struct pollfd){.fd = t->clients[i].fd, .events = POLLIN};
		poll(pf, (nfds_t)n, TB_RC_CTL_TICK_MS);
		if (pf[2].revents)
			device_events(t);
		now = tb_clock_now_ns();
		now_ms = tb_clock_mono_ms();
		for (int i = t->n_clients - 1; i >= 0; i--)
			if (!client_read(t, i, now))
				client_check(t, i, now, now_ms, dead_ns);
		if (pf[0].revents)
			accept_clients(t);
		if (now >= next_beat) {
			check_qps(t);
			heartbeat_all(t, now, tb_atomic_load_relaxed(&t->last_seq)); /* V1 */
			next_beat = now + beat_ns;
		}
	}
	return NULL;
}

/* ------------------------------------------------ publisher: open, close */

static const tb_tx_ops_t rc_fenced_tx_ops, rc_bp_fenced_tx_ops;

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
	tb_rc_pub_table_t *tab = tb_atomic_load_relaxed(&t->h.table);

	if (tab) {
		for (int i = 0; i < tab->n; i++)
			for (int k = 0; k < t->n_clients; k++)
				if (t->clients[k].sub == tab->sub[i])
					t->clients[k].sub = NULL;
		for (int i = 0; i < tab->n; i++)
			sub_free(t, tab->sub[i]);
		free(tab);
	}
	for (int i = 0; i < t->n_clients; i++) {
		if (t->clients[i].sub)
			sub_free(t, t->clients[i].sub);
		close(t->clients[i].fd);
	}
	if (t->listen_fd >= 0)
		close(t->listen_fd);
	if (t->wake_fd >= 0)
		close(t->wake_fd);
	tb_verbs_close(&t->dev);
	tb_mem_free(&t->ring_mem);
	tb_mem_free(&t->slot_mem);
	free(t);
}

/* At open: one subscriber's pinned memory must fit RLIMIT_MEMLOCK (and
 * the log says how many do). */
static int memlock_at_open(rc_tx_t *t)
{
	tb_memlock_state_t st;
	char what[256], each[32];
	uint64_t fit;
	int rc;

	t->per_sub_pinned = sub_pinned(t);
	tb_memlock_fmt(t->per_sub_pinned, each, sizeof(each));
	snprintf(what, sizeof(what), "stream '%s': an rc publisher (for each "
		 "subscriber, its ring of %llu bytes registered again and its "
		 "queues: %s)", t->cfg.name,
		 (unsigned long long)t->cfg.ring_size, each);
	if ((rc = tb_memlock_read(&st)) < 0 ||
	    (rc = tb_memlock_fits(&st, t->per_sub_pinned, what)) < 0)
		return rc;
	fit = tb_memlock_room_for(&st, t->per_sub_pinned);
	if (fit < TB_RC_MAX_SUBS)
		tb_warn("stream '%s': RLIMIT_MEMLOCK leaves room for %llu rc "
			"subscribers (%s each); raise it (`ulimit -l`, "
			"`LimitMEMLOCK=`) or grant CAP_IPC_LOCK for more",
			t->cfg.name, (unsigned long long)fit, each);
	return 0;
}

static int rc_tx_open(tb_tx_t **out, const tb_stream_cfg_t *cfg, uint64_t epoch)
{
	int node = cfg->publisher_core >= 0 ? tb_mem_node_of_core(cfg->publisher_core) : -1;
	rc_tx_t *t = calloc(1, sizeof(*t));
	char what[TB_NAME_MAX + 32];
	int rc;

	if (!t)
		return tb_error_set(TB_ENOMEM, "out of memory");
	t->listen_fd = t->wake_fd = -1;
	t->cfg = *cfg;
	t->epoch = epoch;
	t->psn = tb_verbs_psn_random();
	t->h.half = cfg->ring_size / 2;
	t->h.backpressure = cfg->slow_consumer == TB_SLOW_BACKPRESSURE;
	t->h.fenced = !membarrier_register();
	tb_atomic_store_relaxed(&t->h.inline_max, TB_RC_INLINE);
	tb_atomic_store_relaxed(&t->h.inline_small,
				TB_RC_INLINE >= TB_RC_SMALL_FRAME
				? (uint32_t)IBV_SEND_INLINE : 0u);
	tb_atomic_store_relaxed(&t->h.table, calloc(1, sizeof(tb_rc_pub_table_t)));
	tb_atomic_store_relaxed(&t->h.small_subs, no_subs);
	if (!tb_atomic_load_relaxed(&t->h.table)) {
		free(t);
		return tb_error_set(TB_ENOMEM, "out of memory");
	}
	if (getrandom(&t->ring_id, sizeof(t->ring_id), 0) != sizeof(t->ring_id))
		t->ring_id = tb_clock_now_ns() ^ ((uint64_t)getpid() << 40);
	t->ring_id |= 1;  /* never 0: "no ring" */
	if ((rc = tb_verbs_open(&t->dev, cfg, NULL)) < 0 ||
	    (rc = tb_mem_alloc(&t->ring_mem, cfg->ring_size, node, 0)) < 0 ||
	    (rc = tb_mem_alloc(&t->slot_mem, (TB_RC_MAX_SUBS + 1) * TB_RC_SLOT_SIZE,
			       node, 0)) < 0 ||
	    (rc = memlock_at_open(t)) < 0 ||
	    (rc = tb_verbs_events_init(&t->dev)) < 0)
		goto fail;
	snprintf(what, sizeof(what), "stream '%s' (rc publisher)", cfg->name);
	tb_verbs_numa_check(&t->dev, t->ring_mem.numa_node, what);
	/* The ring's positions on a line of their own after the credit
	 * slots: registered memory, so that a subscriber reading back can
	 * read intent (rc.h). */
	t->pos = (_Atomic uint64_t *)((uint8_t *)t->slot_mem.addr +
				      TB_RC_MAX_SUBS * TB_RC_SLOT_SIZE);
	tb_ring_init_at(&t->h.base.ring, t->ring_mem.addr, cfg->ring_size,
			cfg->id, (tb_ring_lap_t *)(void *)t->pos);
	t->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (t->wake_fd < 0) {
		rc = tb_error_sys(errno, "eventfd");
		goto fail;
	}
	if ((rc = listen_on(t)) < 0)
		goto fail;
	if ((rc = tb_thread_start(&t->ctl, "tb-rc-ctl", ctl_main, t)) < 0)
		goto fail;
	t->ctl_started = 1;
	t->h.base.ops = t->h.fenced ? (t->h.backpressure ? &rc_bp_fenced_tx_ops
						     : &rc_fenced_tx_ops)
				: (t->h.backpressure ? &tb_rc_bp_tx_ops : &tb_rc_tx_ops);
	if (cfg->batch_us) {
		/* Its own ops: the unbatched send keeps its cost. */
		t->h.batch_ns = (uint64_t)cfg->batch_us * 1000u;
		t->h.batch_ops = *t->h.base.ops;
		t->h.batch_ops.send = t->h.fenced ? rc_tx_send_batched_fenced
					      : rc_tx_send_batched;
		t->h.batch_ops.flush = t->h.fenced ? rc_tx_flush_fenced : rc_tx_flush;
		t->h.base.ops = &t->h.batch_ops;
	}
	*out = &t->h.base;
	tb_info("stream '%s': rc publisher on %s port %u (%s, gid index %d%s), "
		"control %s:%u", cfg->name, t->dev.name, t->dev.port,
		t->dev.global ? "RoCE" : "InfiniBand", t->dev.gid_index,
		t->h.fenced ? "; no membarrier: a fence per send" : "",
		cfg->control.host, cfg->control.port);
	return 0;
fail:
	rc_tx_free(t);
	return rc;
}

/* Close's heartbeat, due every heartbeat_ms while it drains: the control
 * thread that beats is stopped, and a drain may last DRAIN_TIMEOUT_NS per
 * subscriber, far past a subscriber's liveness; silent that long, we
 * would be judged dead with our last frames on their way. */
static void close_beat(rc_tx_t *t, uint64_t final_seq, uint64_t *next_ns)
{
	uint64_t now = tb_clock_now_ns();

	if (now < *next_ns)
		return;
	heartbeat_all(t, now, final_seq);
	*next_ns = now + (uint64_t)t->cfg.heartbeat_ms * 1000000ull;
}

/* Waits until everything posted to `s` has completed, so the last frames
 * are in its ring before BYE tells it the stream ended; beating. */
static void sub_drain(rc_tx_t *t, tb_rc_pub_sub_t *s, uint64_t final_seq,
		      uint64_t *next_beat)
{
	struct ibv_send_wr wr = {.opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = {.remote_addr = s->raddr, .rkey = s->rkey}};
	struct ibv_send_wr *bad;
	uint64_t until = tb_clock_now_ns() + DRAIN_TIMEOUT_NS;

	if (tb_atomic_load_acquire(&s->dead)) /* A1 pairs with R1 in sub_reap, ... */
		return;
	sub_sync(s);
	sub_chain_post(s);  /* the publisher flushed; in case it did not */
	if (tb_atomic_load_relaxed(&s->dead))
		return;
	while (s->posted + 1 > s->completed + TB_RC_SQ_DEPTH &&
	       tb_clock_now_ns() < until && sub_reap(t, s) == 0) {
		close_beat(t, final_seq, next_beat);
		usleep(100);
	}
	wr.wr_id = s->posted + 1;
	if (ibv_post_send(s->qp, &wr, &bad) != 0)
		return;
	s->posted++;
	s->extra++;
	sub_signalled(s, s->posted, s->pin);
	while (s->completed != s->posted && tb_clock_now_ns() < until &&
	       sub_reap(t, s) == 0) {
		close_beat(t, final_seq, next_beat);
		usleep(100);
	}
}

static void rc_tx_close(tb_tx_t *tx, uint64_t final_seq)
{
	rc_tx_t *t = (rc_tx_t *)tx;
	tb_rc_pub_table_t *tab;
	uint64_t one = 1, next_beat = 0;

	tb_atomic_store_seq_cst(&t->stop, 1); /* S1 pairs with S1 in ctl_main */
	if (write(t->wake_fd, &one, sizeof(one)) < 0)
		(void)0;
	if (t->ctl_started)
		pthread_join(t->ctl, NULL);
	tab = tb_atomic_load_relaxed(&t->h.table);  /* no other thread now */
	for (int i = 0; i < tab->n; i++)
		sub_drain(t, tab->sub[i], final_seq, &next_beat);
	/* The end: the last sequence, then BYE, to everyone still here. */
	heartbeat_all(t, tb_clock_now_ns(), final_seq);
	while (t->n_clients)
		client_drop(t, t->n_clients - 1, TB_CONTROL_BYE_CLOSED,
			    "the stream closed");
	rc_tx_free(t);
}

/* tb_pub_subscribers: the live subscribers in the table (one whose queue
 * pair failed is on its way out).  The publishing thread, as a send: the
 * table is read under `reading`, with the full fence (not the hot path). */
static int rc_tx_subscribers(tb_tx_t *tx)
{
	rc_tx_t *t = (rc_tx_t *)tx;
	const tb_rc_pub_table_t *tab = tb_rc_pub_enter(&t->h, 1);
	int live = 0;

	for (int i = 0; i < tab->n; i++)
		live += !tb_atomic_load_relaxed(&tab->sub[i]->dead);
	tb_rc_pub_leave(&t->h);
	return live;
}

/* Without membarrier, the same with a fence per send (open picks). */
static const tb_tx_ops_t rc_fenced_tx_ops = {
	.name = "rc",
	.open = rc_tx_open,
	.room = NULL,
	.send = rc_tx_send_fenced,
	.flush = NULL,
	.beat = rc_tx_beat,
	.close = rc_tx_close,
	.subscribers = rc_tx_subscribers,
};

static const tb_tx_ops_t rc_bp_fenced_tx_ops = {
	.name = "rc",
	.open = rc_tx_open,
	.room = rc_tx_room_fenced,
	.send = rc_tx_send_fenced,
	.flush = NULL,
	.beat = rc_tx_beat,
	.close = rc_tx_close,
	.subscribers = rc_tx_subscribers,
};

/* A lapping stream never asks for room: a slow subscriber is skipped. */
const tb_tx_ops_t tb_rc_tx_ops = {
	.name = "rc",
	.open = rc_tx_open,
	.room = NULL,
	.send = rc_tx_send,
	.flush = NULL,
	.beat = rc_tx_beat,
	.close = rc_tx_close,
	.subscribers = rc_tx_subscribers,
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
	.subscribers = rc_tx_subscribers,
};
