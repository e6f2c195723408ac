/*
 * publisher.c - the publishing end of a stream.
 *
 * A publisher numbers messages 1, 2, 3, ... within its epoch (a fresh 64-bit
 * value on every open, or one the caller gives: tb_publisher_open_epoch,
 * for publishers of identical copies of one stream) and writes each frame into its transport's ring
 * (transport.h).  The offer and claim/commit paths are one straight line for
 * every transport: ask for room (back-pressure), reserve a frame, fill the
 * header, copy or let the caller fill the payload, commit, and let the
 * transport send what was committed.  They do not allocate, lock or make
 * system calls.
 *
 * The common offer, a message of up to 64 bytes (OFFER_SMALL), is one
 * straight line per transport with no call but the provider's (and ud's
 * MAC): the clock is the publisher's own copy of the host's TSC
 * calibration (clock.h, tb_clock_fwd_t), the count of frames published is
 * the sequence just published (one store).  rc's copy (its send expanded
 * from rc_pub.h, tb_rc_pub_send_small), ud's (its send expanded from
 * ud.h), shm's and the other transports' are each a function of its own
 * that tb_pub_offer jumps to, with the frame's fields in registers, so
 * each saves only the registers its own path needs.
 * Anything else -- a claim open, back-pressure, no TSC, a larger message,
 * a frame that pads the end of an rc or ud ring -- takes offer_checked,
 * the same steps through the transport's ops.  tb_pub_offerv runs the
 * same ways in a loop, each transport's in a copy of its own, with one
 * reading of the clock for the whole burst.
 *
 * A background thread beats the stream's heartbeat every heartbeat_ms, so
 * subscribers can tell a quiet publisher from a dead one.
 *
 * Retention (cfg.retention > 0): the hot path also records where each frame
 * sits in the ring (retention.h: two stores, no copy), and, when
 * cfg.retention_endpoint is set, a recovery server (recovery/server.h)
 * answers recovery-protocol requests for those frames from its own
 * threads.
 */
#include <tickbus/tickbus.h>

#include "bus/clock.h"
#include "bus/config.h"
#include "bus/counters.h"
#include "bus/error.h"
#include "bus/frame.h"
#include "bus/recovery/server.h"
#include "bus/thread.h"
#include "bus/transport/rc_pub.h"
#include "bus/transport/transport.h"
#include "bus/transport/ud.h"
#include "publisher/retention.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The largest message tb_pub_offer copies inline (a larger one's copy is
 * a call to memcpy, so it goes the checked way). */
#define OFFER_SMALL 64u

struct tb_publisher {
	/* Hot: touched on every offer. */
	tb_tx_t *tx;
	tb_ring_t *ring;           /* &tx->ring */
	int (*room)(tb_tx_t *tx, uint64_t new_tail);
	int (*send)(tb_tx_t *tx, uint64_t from, uint64_t to);
	tb_rc_pub_t *rc;           /* an rc stream whose send the offer
				    * inlines (rc_pub.h), or NULL */
	tb_ud_tx_t *ud;            /* likewise a ud stream (ud.h) */
	/* The small offer's copy of offer_small for this stream's
	 * transport and retention, chosen at open: one indirect jump, not
	 * a test per transport (ud 136 -> 130 instructions an offer, shm
	 * 98 -> 89, rc 138 -> 140: its copy was the first test's, inline),
	 * nor a test of `ret`. */
	int64_t (*offer_small)(struct tb_publisher *p, uint16_t template_id,
			       const void *buf, uint32_t len);
	/* Its burst's copy (tb_pub_offerv), chosen with it. */
	int (*offerv)(struct tb_publisher *p, const tb_pub_msg_t *m, int n,
		      uint64_t now_ns);
	uint64_t next_seq;
	uint64_t small_off_max;    /* rc, ud, shm: a small offer at a ring
				    * offset above this may pad the ring's
				    * end (size - the largest small frame) */
	uint64_t small_reach;      /* shm: the largest small frame and the
				    * header beyond it a claim zeroes: a
				    * small offer from a tail past
				    * intent - this must announce first */
	uint64_t frame_ids;        /* tb_frame_ids(stream_id): every header's
				    * bytes 8 to 15 */
	uint32_t stream_id;
	uint32_t offer_lim;        /* an offer of this many bytes or more
				    * goes the checked way: OFFER_SMALL + 1,
				    * or 0 while a claim is open or when
				    * `slow` */
	int slow;                  /* `room` to ask, no TSC clock (`clk`
				    * unset) or frames too small for
				    * OFFER_SMALL: every offer checked */
	int shared_nosend;         /* a shared ring and no send op (shm):
				    * offer_small's SEND_NONE copy */
	int claim_open;
	uint16_t claim_template;
	tb_counter_slot_t *ctr;    /* in the counters file, or `own_ctr` */
	tb_retention_t *ret;       /* &own_ret, or NULL: retention off */
	tb_clock_fwd_t clk;        /* the process's TSC calibration, moved
				    * forward (clock.h): the offer's clock */

	/* Cold. */
	tb_counter_slot_t own_ctr; /* when the counters file is unavailable */
	uint64_t epoch;
	tb_stream_cfg_t cfg;
	pthread_t beat;
	pthread_mutex_t beat_lock;
	pthread_cond_t beat_cond;
	int beat_stop;
	int beat_started;
	tb_retention_t own_ret;
	tb_recovery_server_t *rsrv;           /* serves the retention buffer, or NULL */
};

/* Sets the stream's copies of offer_small and its burst (below). */
static void choose_offer(tb_publisher_t *p);

static void *beat_main(void *arg)
{
	tb_publisher_t *p = arg;
	struct timespec until;

	pthread_mutex_lock(&p->beat_lock);
	while (!p->beat_stop) {
		uint64_t next;

		p->tx->ops->beat(p->tx, tb_clock_now_ns(), p->next_seq - 1);
		/* The condition variable waits on CLOCK_MONOTONIC (start_beat). */
		next = tb_clock_mono_ns() + (uint64_t)p->cfg.heartbeat_ms * 1000000u;
		until.tv_sec = (time_t)(next / 1000000000u);
		until.tv_nsec = (long)(next % 1000000000u);
		while (!p->beat_stop &&
		       pthread_cond_timedwait(&p->beat_cond, &p->beat_lock, &until) == 0)
			;
	}
	pthread_mutex_unlock(&p->beat_lock);
	return NULL;
}

static int start_beat(tb_publisher_t *p)
{
	pthread_condattr_t attr;
	int rc;

	pthread_mutex_init(&p->beat_lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&p->beat_cond, &attr);
	pthread_condattr_destroy(&attr);
	rc = tb_thread_start(&p->beat, "tb-beat", beat_main, p);
	if (rc < 0)
		return rc;
	p->beat_started = 1;
	return 0;
}

static void stop_beat(tb_publisher_t *p)
{
	if (!p->beat_started)
		return;
	pthread_mutex_lock(&p->beat_lock);
	p->beat_stop = 1;
	pthread_cond_signal(&p->beat_cond);
	pthread_mutex_unlock(&p->beat_lock);
	pthread_join(p->beat, NULL);
	pthread_cond_destroy(&p->beat_cond);
	pthread_mutex_destroy(&p->beat_lock);
	p->beat_started = 0;
}

/* A new epoch: the wall clock in ns, made unique per process. */
static uint64_t new_epoch(void)
{
	return tb_clock_realtime_ns() ^ ((uint64_t)getpid() << 48);
}

static void stop_retention(tb_publisher_t *p)
{
	tb_recovery_server_close(p->rsrv); /* first: its threads read the ring */
	p->rsrv = NULL;
	if (p->ret)
		tb_retention_free(p->ret);
	p->ret = NULL;
}

static int start_retention(tb_publisher_t *p)
{
	tb_recovery_server_source_t src;
	tb_recovery_server_cfg_t rcfg;
	int rc;

	if (p->cfg.retention == 0)
		return 0;
	rc = tb_retention_init(&p->own_ret, p->cfg.retention, p->ring,
			       p->stream_id, p->epoch);
	if (rc < 0)
		return rc;
	p->ret = &p->own_ret;
	if (p->cfg.retention_endpoint.host[0] == '\0')
		return 0;
	memset(&src, 0, sizeof(src));
	src.stream_id = p->stream_id;
	src.token = p->cfg.token;
	src.bounds = tb_retention_bounds;
	src.read = tb_retention_read;
	src.copy = tb_retention_copy;
	src.sd = p->ret;
	tb_recovery_server_cfg_init(&rcfg);
	rcfg.listen = p->cfg.retention_endpoint;
	rc = tb_recovery_server_open(&p->rsrv, &rcfg, &src, 1);
	if (rc < 0) {
		stop_retention(p);
		return tb_error_prepend(rc, "retention_endpoint");
	}
	return 0;
}

/* Opens `cfg` in `epoch`: a fresh one (tb_publisher_open) or one the caller
 * shares with another publisher of the same stream (tb_publisher_open_epoch). */
static int open_in_epoch(tb_publisher_t **out, const tb_stream_cfg_t *cfg,
			 uint64_t epoch)
{
	const tb_tx_ops_t *ops;
	tb_clock_calib_t cal;
	tb_publisher_t *p;
	int rc;

	*out = NULL;
	rc = tb_stream_cfg_validate(cfg);
	if (rc < 0)
		return tb_error_prepend(rc, "tb_publisher_open");
	ops = tb_tx_ops_for(cfg->transport);
	if (!ops)
		return tb_error_prepend(TB_ENOTSUP, "tb_publisher_open: stream '%s'",
				      cfg->name);
	if (cfg->transport == TB_TRANSPORT_SHM &&
	    cfg->slow_consumer == TB_SLOW_BACKPRESSURE)
		return tb_error_set(TB_ENOTSUP, "tb_publisher_open: stream '%s': shm "
				  "never waits for readers; use slow_consumer = lap",
				  cfg->name);
	p = calloc(1, sizeof(*p));
	if (!p)
		return tb_error_set(TB_ENOMEM, "tb_publisher_open: out of memory");
	p->cfg = *cfg;
	p->stream_id = cfg->id;
	p->frame_ids = tb_frame_ids(cfg->id);
	p->next_seq = 1;
	p->epoch = epoch;
	p->ctr = tb_counters_take_stream(&p->own_ctr, cfg->id, cfg->name,
					 TB_ROLE_PUBLISHER, ops->name);
	if (cfg->publisher_core >= 0 && (rc = tb_thread_pin(cfg->publisher_core)) < 0)
		goto fail;
	rc = ops->open(&p->tx, cfg, p->epoch);
	if (rc < 0)
		goto fail;
	p->ring = &p->tx->ring;
	p->small_off_max = p->ring->mask + 1 -
			   tb_frame_space(OFFER_SMALL + TB_FRAME_HDR_LEN);
	p->small_reach = tb_frame_space(OFFER_SMALL + TB_FRAME_HDR_LEN) +
			 p->ring->reach;
	/* The transport may choose its ops per stream (rc: back-pressure). */
	p->room = p->tx->ops->room;
	p->send = p->tx->ops->send;
	p->rc = tb_rc_pub_of(p->tx);
	p->ud = tb_ud_tx_of(p->tx);
	/* ud's inline send posts every small frame inline, untested: a QP
	 * that takes less sends them the op's way (by reference). */
	if (p->ud && !tb_ud_tx_inline_takes(p->ud, tb_frame_space(OFFER_SMALL +
								  TB_FRAME_HDR_LEN)))
		p->ud = NULL;
	if (p->ud)
		p->ud->offer_ctr = p->ctr;
	p->shared_nosend = !p->send && p->ring->ahead != 0;
	/* The offer reads the TSC with the calibration every process of
	 * the host shares (clock.h), so its stamps agree with the
	 * subscribers' clock; without a TSC, offer_checked reads the clock
	 * the slower way. */
	if (tb_clock_get(&cal, NULL) == TB_CLOCK_MODE_TSC)
		tb_clock_fwd_init(&p->clk, &cal);
	/* A ring whose largest frame (ud's and udp's: a datagram's) cannot
	 * hold a small message: every offer checked, so offer_small need not
	 * check its message against max_frame. */
	p->slow = p->room != NULL || tb_clock_get(NULL, NULL) != TB_CLOCK_MODE_TSC ||
		  p->ring->max_frame < OFFER_SMALL + TB_FRAME_HDR_LEN;
	p->offer_lim = p->slow ? 0 : OFFER_SMALL + 1;
	rc = start_retention(p);
	if (rc < 0) {
		ops->close(p->tx, 0);
		goto fail;
	}
	choose_offer(p);
	rc = start_beat(p);
	if (rc < 0) {
		stop_retention(p);
		ops->close(p->tx, 0);
		goto fail;
	}
	*out = p;
	return 0;
fail:
	tb_counters_remove_stream(p->ctr);
	free(p);
	return tb_error_prepend(rc, "tb_publisher_open: stream '%s'", cfg->name);
}

int tb_publisher_open(tb_publisher_t **out, const tb_stream_cfg_t *cfg)
{
	return open_in_epoch(out, cfg, new_epoch());
}

int tb_publisher_open_epoch(tb_publisher_t **out, const tb_stream_cfg_t *cfg,
			    uint64_t epoch)
{
	if (!out)
		return tb_error_set(TB_EINVAL, "tb_publisher_open_epoch: pub is NULL");
	*out = NULL;
	if (epoch == 0)
		return tb_error_set(TB_EINVAL, "tb_publisher_open_epoch: epoch 0 "
				  "means \"none\" to subscribers; use any other "
				  "value");
	return open_in_epoch(out, cfg, epoch);
}

int tb_publisher_open_file(tb_publisher_t **out, const char *path,
			   const char *stream)
{
	tb_stream_cfg_t cfg;
	int rc;

	*out = NULL;
	rc = tb_config_load_stream(&cfg, path, stream);
	return rc < 0 ? rc : tb_publisher_open(out, &cfg);
}

int tb_publisher_close(tb_publisher_t *p)
{
	if (!p)
		return 0;
	stop_beat(p);
	stop_retention(p);
	if (p->tx->ops->flush)
		p->tx->ops->flush(p->tx);
	p->tx->ops->close(p->tx, p->next_seq - 1);
	tb_counters_remove_stream(p->ctr);
	free(p);
	return 0;
}

/* Asks the transport for room for a `len`-byte message (a back-pressure
 * stream only).  0, or the condition to return. */
static inline __attribute__((always_inline)) int room(tb_publisher_t *p,
						       uint32_t len)
{
	uint64_t span = tb_ring_claim_span(p->ring, len);
	int rc;

	if (tb_unlikely(span == 0))
		return TB_EMSGSIZE;
	rc = p->room(p->tx, p->ring->tail + span);
	if (tb_unlikely(rc == TB_BACK_PRESSURED))
		tb_counter_inc(p->ctr, TB_CTR_BACK_PRESSURED);
	return rc < 0 ? rc : 0;
}

/* Reserves the next frame, after asking the transport for room.  Always
 * inlined: a call costs more than the whole shm claim. */
static inline __attribute__((always_inline)) tb_frame_hdr_t *claim(tb_publisher_t *p, uint32_t len, int *rc)
{
	if (p->room && (*rc = room(p, len)) < 0)
		return NULL;
	*rc = TB_EMSGSIZE;
	return tb_ring_claim(p->ring, len, p->next_seq);
}

/* After the commit of frame `seq` at ring position `at` (the claim began
 * at `from`, before any pad, and ended at `end`): retention, the
 * transport's send, the count.  Always inlined, as claim. */
static inline __attribute__((always_inline)) int64_t
published(tb_publisher_t *p, uint64_t seq, uint64_t from, uint64_t at,
	  uint64_t end)
{
	if (p->ret)
		tb_retention_record(p->ret, seq, at);
	p->next_seq = seq + 1;
	tb_counter_inc(p->ctr, TB_CTR_PUBLISHED);
	if (p->send && tb_unlikely(p->send(p->tx, from, end) < 0))
		tb_counter_inc(p->ctr, TB_CTR_ERRORS);
	return (int64_t)seq;
}

/* Commits the claimed frame, hands it to the transport, counts it. */
static inline __attribute__((always_inline)) int64_t publish(tb_publisher_t *p)
{
	tb_ring_t *r = p->ring;
	uint64_t seq = p->next_seq, from = r->tail, at = r->claim_pos;
	uint64_t end = r->claim_tail;

	tb_ring_commit(r);
	return published(p, seq, from, at, end);
}

/* tb_pub_offer when a claim is open, the transport is to be asked for
 * room first (a back-pressure stream), the clock is not the TSC, or the
 * message is over 64 bytes:
 * out of line, so the common offer tests them at once.  `stamp`: the
 * frame's publish time, or 0 to read the clock. */
static __attribute__((noinline)) int64_t
offer_checked(tb_publisher_t *p, uint16_t template_id, const void *buf,
	      uint32_t len, uint64_t stamp);

/* A ring is at least TB_RING_MIN bytes, so its largest frame (an eighth
 * of it) holds a small message unless a transport caps it lower (ud's and
 * udp's datagrams: open then makes every offer checked); rc_pub.h's
 * small-frame send takes every small message. */
_Static_assert(TB_RING_MIN / 8 >= OFFER_SMALL + TB_FRAME_HDR_LEN &&
	       TB_FRAME_MAX_LEN >= OFFER_SMALL + TB_FRAME_HDR_LEN &&
	       OFFER_SMALL + TB_FRAME_HDR_LEN <= TB_RC_SMALL_FRAME,
	       "an rc offer of a small message always fits");

/* Which transport's send an offer inlines: a constant in each copy of
 * offer_small.  SEND_NONE: a shared ring and no send op (shm). */
enum { SEND_OP, SEND_RC, SEND_UD, SEND_NONE };

/* tb_pub_offer of a message of at most OFFER_SMALL bytes with no claim
 * open, no room to ask, the TSC for a clock and frames that hold it (not
 * p->slow).  `kind` (a constant): SEND_RC, p->rc is set, so the ring is
 * private and the send is rc's, inline.  SEND_UD: p->ud is set, the
 * ring is private and the send is ud's, inline.  With either, a frame
 * that would pad the ring's end (once a lap) goes the checked way, so
 * this one never pads.  SEND_NONE: a shared ring (shm) and no send.
 * SEND_OP: any ring, the transport's send op, if any.  `kept` (a
 * constant): retention is on (p->ret is &p->own_ret), and the frame is
 * recorded there; else p->ret is NULL and it is not.  `stamped` (a
 * constant): the frame's publish time is `stamp`, a burst's one reading
 * of the clock (tb_pub_offerv), and the offer reads none.  Hot path: no
 * allocation, lock or system call. */
static inline __attribute__((always_inline)) int64_t
offer_small(tb_publisher_t *p, uint16_t template_id, const void *buf,
	    uint32_t len, int kind, int kept, int stamped, uint64_t stamp)
{
	const int rc = kind == SEND_RC;
	tb_ring_t *r = p->ring;
	uint64_t seq = p->next_seq, from = r->tail, at, end;
	tb_frame_hdr_t *f;
	uint64_t now_ns;

	/* tb_pub_offer's test, told to the compiler: the copy needs no
	 * branch for larger messages. */
	if (len > OFFER_SMALL)
		__builtin_unreachable();
	/* One compare for any small message: the offset past which the
	 * largest would pad (a smaller one there goes the checked way too,
	 * and is claimed there without a pad if it fits: a few bytes a lap). */
	if (kind == SEND_RC || kind == SEND_UD) {
		if (tb_unlikely((from & r->mask) > p->small_off_max))
			return offer_checked(p, template_id, buf, len,
					     stamped ? stamp : 0);
	}
	/* shm: the same, and the largest small frame's end within what
	 * the ring announced (once a chunk it is not: the checked way
	 * announces).  Then nothing below calls, so nothing is kept across
	 * a call: 3 registers saved, not 6, and 72 instructions an offer,
	 * not 89 (bench_shm's callgrind). */
	if (kind == SEND_NONE) {
		if (tb_unlikely((from & r->mask) > p->small_off_max ||
				from + p->small_reach > r->intent))
			return offer_checked(p, template_id, buf, len,
					     stamped ? stamp : 0);
	}
	/* at and end in registers: the copy's stores below are ones the
	 * compiler cannot tell from the ring's fields. */
	f = tb_ring_claim_in_(r, len, seq, &at, &end,
			      kind == SEND_OP ? TB_RING_ANY :
			      kind == SEND_NONE ? TB_RING_SHARED_FITS :
			      TB_RING_PRIVATE_FITS);
	/* The payload first, the header last, next to the commit that
	 * stores its sequence word: a reader polls that word's cache line,
	 * so every store to it goes together, in one transfer (ring.h). */
	tb_frame_copy_payload(tb_frame_payload(f), buf, len);
	/* The clock after the copy, whose source and length are dead by
	 * then: fewer values live at once, fewer registers to save than
	 * when it was read first to overlap its latency with the copy
	 * (bench_rc's callgrind: rc and ud 2 instructions an offer less). */
	now_ns = stamped ? stamp : tb_clock_fwd_to_ns(&p->clk, tb_clock_tsc());
	tb_frame_init_body_ids(f, len, template_id, p->frame_ids, now_ns);
	tb_ring_commit_(r, f, seq, from, at, end);
	/* A copy of its own for each: with retention on, own_ret's fields
	 * at their offset from p, no load of p->ret and no test; with it
	 * off, nothing (bench_rc's callgrind, rc: 122 -> 119 instructions
	 * an offer on, 117 -> 110 off; ud with its MAC: 573 -> 570 on,
	 * 568 -> 565 off). */
	if (kept)
		tb_retention_record(&p->own_ret, seq, at);
	/* seq + 1, as one add to memory: nothing else moves it, and rc
	 * keeps no register for seq + 1 (1 instruction an offer less). */
	p->next_seq++;
	/* The count of frames published is the sequence just published
	 * (every publish takes the next, from 1, and the slot is this
	 * publisher's alone): one store, not a load and a store.  Relaxed,
	 * unpaired, as tb_counter_add. */
	tb_atomic_store_relaxed(&p->ctr->c[TB_CTR_PUBLISHED], seq);
	/* The transport's send, inline, with the frame's fields in hand. */
	if (rc)
		tb_rc_pub_send_small(p->rc, f, len + TB_FRAME_HDR_LEN, seq);
	else if (kind == SEND_UD) {
		tb_ud_tx_t *u = p->ud;

		/* No pad here: the frame is all of at..end.  A failure is
		 * counted through `u`, which the send keeps anyway. */
		if (tb_unlikely(tb_ud_send_frame(u, f, (uint32_t)(end - at),
						 seq, at, end) < 0))
			tb_counter_inc(u->offer_ctr, TB_CTR_ERRORS);
	} else if (kind == SEND_OP && p->send &&
		   tb_unlikely(p->send(p->tx, from, end) < 0))
		tb_counter_inc(p->ctr, TB_CTR_ERRORS);
	return (int64_t)seq;
}

/* tb_pub_offerv's loop for one kind of offer_small (constants), every
 * frame stamped `now_ns`: a message the single offer would check goes
 * the checked way, with the same stamp.  Returns as tb_pub_offerv. */
static inline __attribute__((always_inline)) int
offerv_in(tb_publisher_t *p, const tb_pub_msg_t *m, int n, uint64_t now_ns,
	  int kind, int kept)
{
	for (int i = 0; i < n; i++) {
		int64_t rc = tb_likely(m[i].len < p->offer_lim) ?
			offer_small(p, m[i].template_id, m[i].data, m[i].len,
				    kind, kept, 1, now_ns) :
			offer_checked(p, m[i].template_id, m[i].data, m[i].len,
				      now_ns);

		if (tb_unlikely(rc < 0))
			return i ? i : (int)rc;
	}
	return n;
}

/* offer_small's copies and their bursts', one pair per transport kind and
 * retention, each a function of its own, so that each saves the
 * registers of its own send only (tb_pub_offer jumps to these: no call,
 * no frame). */
typedef int64_t offer_fn(tb_publisher_t *p, uint16_t template_id,
			 const void *buf, uint32_t len);
typedef int offerv_fn(tb_publisher_t *p, const tb_pub_msg_t *m, int n,
		      uint64_t now_ns);

#define OFFER_COPIES(name, kind, kept)                                       \
	static __attribute__((noinline)) int64_t                             \
	tb_pub_offer_##name(tb_publisher_t *p, uint16_t template_id,         \
			    const void *buf, uint32_t len)                   \
	{                                                                    \
		return offer_small(p, template_id, buf, len, kind, kept, 0,   \
				   0);                                       \
	}                                                                    \
	static __attribute__((noinline)) int                                 \
	offerv_##name(tb_publisher_t *p, const tb_pub_msg_t *m, int n,       \
		      uint64_t now_ns)                                       \
	{                                                                    \
		return offerv_in(p, m, n, now_ns, kind, kept);               \
	}

OFFER_COPIES(rc, SEND_RC, 0)
OFFER_COPIES(rc_kept, SEND_RC, 1)
OFFER_COPIES(ud, SEND_UD, 0)
OFFER_COPIES(ud_kept, SEND_UD, 1)
OFFER_COPIES(shm, SEND_NONE, 0)
OFFER_COPIES(shm_kept, SEND_NONE, 1)
OFFER_COPIES(op, SEND_OP, 0)
OFFER_COPIES(op_kept, SEND_OP, 1)

/* [kind][kept] */
static const struct {
	offer_fn *offer;
	offerv_fn *offerv;
} offer_copies[4][2] = {
	[SEND_OP] = {{tb_pub_offer_op, offerv_op},
		     {tb_pub_offer_op_kept, offerv_op_kept}},
	[SEND_RC] = {{tb_pub_offer_rc, offerv_rc},
		     {tb_pub_offer_rc_kept, offerv_rc_kept}},
	[SEND_UD] = {{tb_pub_offer_ud, offerv_ud},
		     {tb_pub_offer_ud_kept, offerv_ud_kept}},
	[SEND_NONE] = {{tb_pub_offer_shm, offerv_shm},
		       {tb_pub_offer_shm_kept, offerv_shm_kept}},
};

static void choose_offer(tb_publisher_t *p)
{
	int kind = p->rc ? SEND_RC : p->ud ? SEND_UD :
		   p->shared_nosend ? SEND_NONE : SEND_OP;
	int kept = p->ret != NULL;

	p->offer_small = offer_copies[kind][kept].offer;
	p->offerv = offer_copies[kind][kept].offerv;
}

int tb_pub_offerv(tb_publisher_t *p, const tb_pub_msg_t *msgs, int n)
{
	/* Hot path: one reading of the clock for the burst, then each
	 * message as tb_pub_offer would take it. */
	if (tb_unlikely(n <= 0 || !msgs))
		return n == 0 ? 0 :
		       tb_error_set(TB_EINVAL, "tb_pub_offerv: %s",
				    n < 0 ? "n is negative" : "msgs is NULL");
	return p->offerv(p, msgs, n,
			 p->slow ? tb_clock_now_ns_inline() :
			 tb_clock_fwd_to_ns(&p->clk, tb_clock_tsc()));
}

int64_t tb_pub_offer(tb_publisher_t *p, uint16_t template_id, const void *buf,
		     uint32_t len)
{
	/* Hot path: no allocation, lock or system call.  A message over 64
	 * bytes goes the longer way too: its copy is a call to memcpy, and
	 * with none here but the transport's send, little must live in
	 * callee-saved registers. */
	if (tb_unlikely(len >= p->offer_lim))
		return offer_checked(p, template_id, buf, len, 0);
	return p->offer_small(p, template_id, buf, len);
}

static __attribute__((noinline)) int64_t
offer_checked(tb_publisher_t *p, uint16_t template_id, const void *buf,
	      uint32_t len, uint64_t stamp)
{
	tb_frame_hdr_t *f;
	uint64_t now_ns;
	int rc;

	if (p->claim_open)
		return TB_ESTATE;
	now_ns = stamp ? stamp : tb_clock_now_ns_inline();
	f = claim(p, len, &rc);
	if (tb_unlikely(!f))
		return rc;
	tb_frame_copy_payload(tb_frame_payload(f), buf, len);
	tb_frame_init_body_ids(f, len, template_id, p->frame_ids, now_ns);
	return publish(p);
}

int tb_pub_claim(tb_publisher_t *p, uint16_t template_id, uint32_t len,
		 tb_claim_t *claimed)
{
	tb_frame_hdr_t *f;
	int rc;

	/* Hot path. */
	if (tb_unlikely(p->claim_open))
		return TB_ESTATE;
	f = claim(p, len, &rc);
	if (tb_unlikely(!f))
		return rc;
	p->claim_open = 1;
	p->offer_lim = 0;
	p->claim_template = template_id;
	claimed->data = tb_frame_payload(f);
	claimed->len = len;
	claimed->seq = p->next_seq;
	claimed->frame_ = f;
	return 0;
}

int64_t tb_pub_commit(tb_publisher_t *p, tb_claim_t *claimed)
{
	/* Hot path.  The header is written last, with the publish time of the
	 * commit, so the timestamp covers the caller's fill too; the ring's
	 * commit stores the sequence after it. */
	if (tb_unlikely(!p->claim_open || claimed->seq != p->next_seq))
		return TB_ESTATE;
	tb_frame_init_body_ids(claimed->frame_, claimed->len, p->claim_template,
			       p->frame_ids, tb_clock_now_ns_inline());
	p->claim_open = 0;
	p->offer_lim = p->slow ? 0 : OFFER_SMALL + 1;
	claimed->frame_ = NULL;
	return publish(p);
}

int tb_pub_abort(tb_publisher_t *p, tb_claim_t *claimed)
{
	if (!p->claim_open || claimed->seq != p->next_seq)
		return TB_ESTATE;
	tb_ring_abort(p->ring);
	p->claim_open = 0;
	p->offer_lim = p->slow ? 0 : OFFER_SMALL + 1;
	claimed->frame_ = NULL;
	return 0;
}

int tb_pub_flush(tb_publisher_t *p)
{
	/* Hot path: what the transport's flush costs (a send, if it holds a
	 * datagram). */
	int rc;

	if (!p->tx->ops->flush)
		return 0;
	rc = p->tx->ops->flush(p->tx);
	if (tb_unlikely(rc < 0))
		tb_counter_inc(p->ctr, TB_CTR_ERRORS);
	return rc;
}

uint64_t tb_pub_next_seq(const tb_publisher_t *p) { return p->next_seq; }

uint64_t tb_pub_epoch(const tb_publisher_t *p) { return p->epoch; }

int tb_pub_subscribers(tb_publisher_t *p)
{
	if (!p->tx->ops->subscribers)
		return tb_error_set(TB_ENOTSUP, "tb_pub_subscribers: a %s stream "
				  "does not know its subscribers (only rc does)",
				  p->tx->ops->name);
	return p->tx->ops->subscribers(p->tx);
}
