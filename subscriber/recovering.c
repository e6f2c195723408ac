/*
 * recovering.c - a subscriber's gap recovery: the RECOVERING state of the
 * poll loop, and the thread that fetches what was lost.
 *
 * With recovery endpoints, a gap or a lap is recovered above the transport,
 * so the same code serves shm, rc, ud and udp:
 *
 *   live ──gap──> RECOVERING ──replay done, buffer drained──> live
 *
 * - The poll thread keeps a bounded live buffer (`live`, a tb_fifo of
 *   cfg.recovery_buffer bytes).  From the gap on, frames the transport
 *   delivers are copied into it (a ring slot may be reused as soon as the
 *   transport moves on), after a GAP marker for the missing range; further
 *   gaps and conditions (TB_CLOSED, TB_NEW_EPOCH, ...) go in as markers at
 *   their place.  When the buffer is full, the frames that do not fit are
 *   not kept: a GAP marker takes their place and they are recovered in
 *   their turn, and while it stays full the transport is not polled (its
 *   own loss detection then names whatever it loses, recovered likewise).
 *   So a full buffer costs recovery work, never a message.
 * - A recovery thread per subscriber runs the blocking TCP work
 *   (recovery/client.h: endpoints in order, timeouts, backoff, failover),
 *   handing frames back through a lock-free SPSC queue (`replay`), then a
 *   LOSS entry for anything that could not be had within
 *   cfg.recovery_timeout_ms (or that no service holds), then DONE.  It
 *   keeps a connection to each service, dialled and authenticated when the
 *   subscriber opens and checked (and dialled again) every MAINTAIN_MS
 *   while idle, so that a gap costs one request on a warm connection.
 * - The poll thread wakes it without a system call (bus/wake.h): the
 *   recovery thread spins and then yields for a while after its last
 *   work, watching a counter the poll thread bumps; only once it has been
 *   idle long (PARK_AFTER_NS; never with cfg.idle = busy-spin, at once
 *   after the spin with backoff) does it park on a futex, and only then
 *   does posting a gap cost the poll thread a FUTEX_WAKE.
 * - A small gap wakes nobody: when the job's range fits in one request on
 *   a kept connection that is up and idle, the poll thread asks for it
 *   itself (a quick fetch, recovery/client.h): one non-blocking send()
 *   when it posts the job, then on each of its polls at most one
 *   non-blocking recv(), the frames checked where they lie in the
 *   connection's buffer and handed to the handler from there (no replay
 *   queue, no copy).  It was waiting on the gap anyway; a parked recovery
 *   thread's FUTEX_WAKE and scheduler wake-up were most of a small gap's
 *   cost.  Whatever the quick fetch cannot settle (no connection up, a
 *   range too large or open-ended, a REJECT, an answer cut short, a
 *   service that closes, breaks, or sends nothing for the I/O timeout)
 *   goes to the recovery thread as an ordinary job from the first
 *   sequence not delivered, and its policy (failover, backoff, LOST and
 *   TOO_OLD, data loss) does the rest.  So the poll thread never waits:
 *   each poll costs one recv() while an answer is outstanding, and the
 *   I/O timeout bounds how long it is tried.
 * - The connections belong to one thread at a time, by the client's claim
 *   (recovery/client.h: A6/R6).  The poll thread holds it from the quick
 *   fetch's start until its step ends it, and gives it back before it
 *   posts a job for the rest; the recovery thread takes it for each job
 *   (always free then: the poll thread posts no job while it holds it)
 *   and gives it back before DONE is queued, and takes it for its
 *   periodic maintenance only if it is free (else tries again a
 *   millisecond later).  A quick fetch tried while maintenance holds the
 *   connections becomes a job for the thread.
 * - A job also covers the gaps already queued behind its own (up to
 *   COALESCE_MAX sequences on), so that heavy loss costs a round trip per
 *   round trip, not one per gap; what it fetches twice, deliver drops, and
 *   a loss it meets past its own gap is left to the live buffer and the
 *   later gaps' jobs (rec_loss).
 * - The poll thread delivers the replayed frames (TB_MSG_F_REPLAY), returns
 *   TB_DATA_LOSS once for a lost range (tb_sub_loss gives it exactly), then
 *   drains the live buffer, starting the next job at the next GAP marker,
 *   and goes live again once everything is delivered.  Every sequence is
 *   thus delivered once, in order, or reported lost: while recovering,
 *   `deliver_next` drops anything already handed out and clips ranges to
 *   what is not.
 * - Late join (tb_sub_start_at): the transport's tracker starts at the
 *   asked sequence, so the first live frame is a gap like any other.  On a
 *   quiet stream there may be no such frame for a long time, so the first
 *   idle poll posts an open job ("from seq up to the latest you hold");
 *   live frames and a later gap then overlap it and are deduplicated.
 * - Late join after the publisher is gone: a transport that has no epoch
 *   (nothing to attach to) still lets the first idle poll post its open
 *   job, with epoch 0: the services' newest epoch (their WELCOME) is asked.
 *
 * Between the two threads: the connections go by the client's claim
 * (A6/R6, above); the job by job_gen (R4 in post_thread, A4 in rec_main),
 * and the wake-up by `wake` (wake.h, after R4); frames and markers come
 * back through the replay fifo (its R1/A2, fifo.h); the stop flag goes one
 * way (R5 in tb_recovering_close, A5 in the thread).  The poll side never
 * blocks: it peeks at the queues and tries its socket without waiting.
 */
#include "subscriber/recovering.h"

#include "bus/barrier.h"
#include "bus/clock.h"
#include "bus/error.h"
#include "bus/fifo.h"
#include "bus/frame.h"
#include "bus/recovery/client.h"
#include "bus/thread.h"
#include "bus/wake.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Replay queue: at least this big, and room for four largest frames. */
#define REPLAY_MIN (4u << 20)
/* How long the recovery thread waits for room in a full replay queue
 * before it looks at its stop flag again. */
#define PUSH_WAIT_NS 50000L
/* A recovery job covers the gaps queued behind its own up to this many
 * sequences past it (see post_job). */
#define COALESCE_MAX 4096u
/* The recovery thread's idle time: it spins for SPIN_NS after its last
 * work (a gap that follows another at once is taken up in well under a
 * microsecond), then yields the core until PARK_AFTER_NS, then sleeps on a
 * futex, checking its connections every MAINTAIN_MS.  Short, so that a
 * stream with frequent small losses does not keep a core yielding on a
 * machine that has few (a desk that wants it never to sleep says idle =
 * busy-spin). */
#define SPIN_NS 20000u
#define PARK_AFTER_NS 200000u
#define MAINTAIN_MS 100u
/* While the poll thread holds the connections, maintain is tried again
 * after this. */
#define MAINTAIN_RETRY_MS 1u
/* How long the recovery thread busy-polls its socket for an answer before
 * it sleeps in poll() (less with spin-then-yield, none with backoff): a
 * loopback or LAN answer comes within tens of microseconds. */
#define ANSWER_SPIN_US 100u
struct tb_recovering {
	/* Poll thread only.  The subscriber's transport, sequence tracker
	 * and counters (tb_recovering_bind). */
	tb_rx_t *rx;
	tb_seq_t *seq;
	tb_counter_slot_t *ctr;
	int active;          /* recovering: tb_recovering_poll has work */
	uint64_t deliver_next; /* while active: next sequence to hand out;
				  anything below is a duplicate; 0: none */
	tb_fifo_t live;
	int job_active;      /* a job is posted and its DONE not yet seen,
				or a quick fetch is under way */
	int job_quick;       /* the job is the poll thread's quick fetch: it
				holds the client (see the essay) */
	/* The quick fetch's delivery, for quick_frame: set by each poll. */
	tb_handler_t q_handler;
	void *q_clientd;
	uint64_t q_now;      /* the poll's stamp for replayed frames */
	uint64_t q_delivered;
	tb_recovering_stats_t stats;
	_Atomic uint32_t up;     /* recovery thread: connections up, as of
				    its last maintenance */
	int live_paused;     /* a condition is queued: do not poll the
				transport until it is delivered */
	uint64_t dropped;    /* first frame the live buffer had no room
				for (0: none); see buffer_frame */
	tb_fifo_t replay;    /* consumer side */
	uint64_t tail_gap_last, tail_gap_epoch; /* the newest GAP marker */

	/* The job, handed over by job_gen (R4 / A4). */
	uint64_t job_epoch, job_first, job_last;
	uint64_t job_gap_last; /* the gap's own end; job_last may go on to
				  cover the gaps queued after it */
	int job_open;        /* fetch up to the latest (a late join's probe) */
	int job_cut;         /* recovery thread: the fetch went past a loss
				beyond the gap; the rest is left to live */
	uint64_t job_lost;   /* recovery thread: sequences reported lost */
	_Atomic uint64_t job_gen;
	tb_wake_t wake;      /* poll thread (and close) -> recovery thread */
	_Atomic int stop;    /* R5 / A5: tb_recovering_close to the thread */
	pthread_t thread;
	int started;
	tb_recovery_client_cfg_t ccfg;
	tb_recovery_client_t *client; /* recovery thread: kept connections */
	tb_endpoint_t eps[TB_RECOVERY_MAX];
	char token[TB_TOKEN_MAX];
	uint32_t stream_id;
	void *live_mem, *replay_mem;
};

/* ---------------------------------------------------- the recovery thread */

/* The recovery client's cancel test: stop asked (A5 pairs with R5 in
 * tb_recovering_close). */
static int rec_cancelled(void *arg)
{
	tb_recovering_t *r = arg;

	return tb_atomic_load_seq_cst(&r->stop);
}

/* Reserves a replay entry, waiting while the poll thread drains the
 * queue; NULL when stopping. */
static tb_fifo_ent_t *replay_reserve(tb_recovering_t *r, uint32_t payload)
{
	struct timespec ts = {0, PUSH_WAIT_NS};
	tb_fifo_ent_t *e;

	while (!(e = tb_fifo_reserve(&r->replay, payload))) {
		if (tb_atomic_load_seq_cst(&r->stop)) /* A5 pairs with R5 */
			return NULL;
		nanosleep(&ts, NULL);
	}
	return e;
}

/* Fills a marker entry (GAP, LOSS, COND, DONE: no payload). */
static void marker_fill(tb_fifo_ent_t *e, int kind, uint64_t first,
			uint64_t last, int code, uint64_t aux)
{
	e->kind = (uint16_t)kind;
	e->seq = first;
	e->last = last;
	e->code = code;
	e->aux = aux;
}

static void replay_marker(tb_recovering_t *r, int kind, uint64_t first,
			  uint64_t last, int code, uint64_t aux)
{
	tb_fifo_ent_t *e = replay_reserve(r, 0);

	if (!e)
		return;
	marker_fill(e, kind, first, last, code, aux);
	tb_fifo_commit(&r->replay);
}

static int rec_frame(void *arg, const tb_frame_hdr_t *f)
{
	tb_recovering_t *r = arg;
	uint32_t len = f->length - TB_FRAME_HDR_LEN;
	tb_fifo_ent_t *e;

	if (r->job_cut)
		return 1; /* stops the fetch */
	if (len > tb_fifo_max_payload(&r->replay)) {
		/* Cannot happen with frames of this stream's ring; if a
		 * server sends one anyway, it is reported, not dropped. */
		replay_marker(r, TB_FIFO_LOSS, f->seq, f->seq, 0, 0);
		return 0;
	}
	e = replay_reserve(r, len);
	if (!e)
		return 1;
	e->kind = TB_FIFO_FRAME;
	e->template_id = f->template_id;
	e->stream_id = f->stream_id;
	e->flags = TB_MSG_F_REPLAY;
	e->seq = f->seq;
	e->publish_ns = f->publish_ns;
	memcpy(tb_fifo_payload(e), (const uint8_t *)f + TB_FRAME_HDR_LEN, len);
	tb_fifo_commit(&r->replay);
	return 0;
}

/*
 * A coalesced job (job_last > job_gap_last) fetches the frames between
 * the gaps too, which the live buffer also holds.  A loss past the first
 * gap must then not be reported whole: some of it may be in the live
 * buffer.  The job reports the loss up to the gap's end and stops there
 * (job_cut); the live buffer and the later gaps' own jobs do the rest.
 */
static void rec_loss(void *arg, uint64_t first, uint64_t last)
{
	tb_recovering_t *r = arg;

	if (r->job_cut)
		return;
	if (first <= r->job_gap_last) {
		uint64_t end = last < r->job_gap_last ? last : r->job_gap_last;

		replay_marker(r, TB_FIFO_LOSS, first, end, 0, 0);
		r->job_lost += end - first + 1;
	}
	if (last > r->job_gap_last)
		r->job_cut = 1;
}

/* Takes the client for a job.  The poll thread gives it back before it
 * posts one, so this waits only if a claim is on its way out. */
static int rec_claim(tb_recovering_t *r)
{
	while (!tb_recovery_client_claim(r->client)) {
		if (tb_atomic_load_seq_cst(&r->stop)) /* A5 pairs with R5 */
			return 0;
		sched_yield();
	}
	return 1;
}

/* Runs the job published by job_gen. */
static void rec_job(tb_recovering_t *r)
{
	tb_recovery_client_stats_t st;
	uint64_t next;
	int rc;

	if (!rec_claim(r))
		return;
	tb_recovery_client_until_latest(r->client, r->job_open);
	r->job_cut = 0;
	r->job_lost = 0;
	rc = tb_recovery_client_get(r->client, r->job_epoch, r->job_first,
				    r->job_last, rec_frame, rec_loss, r, &st,
				    &next);
	/* Given back before DONE is queued: the poll thread, once it has
	 * seen DONE, may take the client for a quick fetch. */
	tb_recovery_client_unclaim(r->client);
	if (rc == TB_ESTATE && tb_atomic_load_seq_cst(&r->stop)) /* A5 */
		return;
	/* A probe that finds no service says nothing about loss: the next
	 * live frame names the gap, recovered then. */
	if (rc < 0 && !r->job_cut && next <= r->job_gap_last && !r->job_open) {
		/* Nobody answered in time: the rest of the gap is lost (what
		 * lies past it is left to live). */
		replay_marker(r, TB_FIFO_LOSS, next, r->job_gap_last, 0, 0);
		r->job_lost += r->job_gap_last - next + 1;
	}
	/* DONE carries the job's figures for the owner's counters.  Failed:
	 * something was lost, or a probe found no service; not a shared
	 * request that only missed what lies past its own gap. */
	replay_marker(r, TB_FIFO_DONE, st.requests, r->job_lost,
		      r->job_lost || (rc < 0 && r->job_open) ? 1 : 0, st.frames);
}

static void *rec_main(void *arg)
{
	tb_recovering_t *r = arg;
	uint64_t done_gen = 0, seen = 0, idle_since = tb_clock_mono_ns();
	uint64_t next_maintain = 0;

	while (!tb_atomic_load_seq_cst(&r->stop)) { /* A5 pairs with R5 */
		uint64_t gen = tb_atomic_load_acquire(&r->job_gen); /* A4 pairs with R4 */
		uint64_t now;

		if (gen != done_gen) {
			rec_job(r);
			done_gen = gen;
			idle_since = tb_clock_mono_ns();
			continue;
		}
		now = tb_clock_mono_ns();
		if (now >= next_maintain && tb_recovery_client_claim(r->client)) {
			int up = tb_recovery_client_maintain(r->client);

			tb_recovery_client_unclaim(r->client);
			/* Unpaired, for tb_recovering_stats: a figure. */
			tb_atomic_store_relaxed(&r->up, (uint32_t)up);
			now = tb_clock_mono_ns();
			next_maintain = now + MAINTAIN_MS * 1000000ull;
		} else if (now >= next_maintain) {
			/* A quick fetch holds the connections: after it. */
			next_maintain = now + MAINTAIN_RETRY_MS * 1000000ull;
		}
		seen = tb_wake_wait(&r->wake, seen, idle_since, next_maintain);
	}
	return NULL;
}

static uint64_t pow2_at_least(uint64_t v)
{
	uint64_t p = 1;

	while (p < v)
		p <<= 1;
	return p;
}

void tb_recovering_close(tb_recovering_t *r)
{
	if (!r)
		return;
	if (r->started) {
		/* R5: pairs with A5 in rec_main, replay_reserve and
		 * rec_cancelled.  Seq-cst, as a stop flag. */
		tb_atomic_store_seq_cst(&r->stop, 1);
		tb_wake_signal(&r->wake);
		pthread_join(r->thread, NULL);
	}
	tb_recovery_client_close(r->client);
	free(r->live_mem);
	free(r->replay_mem);
	free(r);
}

int tb_recovering_open(tb_recovering_t **out, const tb_stream_cfg_t *cfg)
{
	uint64_t max_entry = tb_fifo_space(tb_ring_max_frame(cfg->ring_size));
	uint64_t live_cap = pow2_at_least(cfg->recovery_buffer);
	uint64_t replay_cap = pow2_at_least(4 * max_entry);
	tb_recovering_t *r;
	int rc;

	*out = NULL;
	if (replay_cap < REPLAY_MIN)
		replay_cap = REPLAY_MIN;
	r = calloc(1, sizeof(*r));
	if (!r)
		return tb_error_set(TB_ENOMEM, "recovery: out of memory");
	r->live_mem = aligned_alloc(TB_FIFO_ALIGN, live_cap);
	r->replay_mem = aligned_alloc(TB_FIFO_ALIGN, replay_cap);
	if (!r->live_mem || !r->replay_mem) {
		tb_recovering_close(r);
		return tb_error_set(TB_ENOMEM, "recovery: buffers of %llu and "
				  "%llu bytes", (unsigned long long)live_cap,
				  (unsigned long long)replay_cap);
	}
	tb_fifo_init(&r->live, r->live_mem, live_cap);
	tb_fifo_init(&r->replay, r->replay_mem, replay_cap);
	memcpy(r->eps, cfg->recovery, sizeof(r->eps));
	memcpy(r->token, cfg->token, sizeof(r->token));
	tb_recovery_client_cfg_init(&r->ccfg);
	r->ccfg.endpoints = r->eps;
	r->ccfg.n_endpoints = cfg->n_recovery;
	r->ccfg.stream_id = cfg->id;
	r->ccfg.token = r->token;
	r->ccfg.deadline_ms = cfg->recovery_timeout_ms;
	if (r->ccfg.io_timeout_ms > cfg->recovery_timeout_ms / 2)
		r->ccfg.io_timeout_ms = cfg->recovery_timeout_ms / 2;
	r->ccfg.cancelled = rec_cancelled;
	/* An answer is awaited spinning, as the poll thread waits. */
	r->ccfg.spin_us = cfg->idle == TB_IDLE_BUSY_SPIN ? ANSWER_SPIN_US :
			  cfg->idle == TB_IDLE_SPIN_YIELD ? ANSWER_SPIN_US / 4 : 0;
	rc = tb_recovery_client_open(&r->client, &r->ccfg);
	if (rc < 0) {
		tb_recovering_close(r);
		return tb_error_prepend(rc, "recovery");
	}
	/* A desk that spins its subscriber spins its recovery thread too;
	 * the others let it sleep once it has been idle a while. */
	tb_wake_init(&r->wake, SPIN_NS,
		     cfg->idle == TB_IDLE_BUSY_SPIN ? TB_WAKE_NEVER_PARK :
		     cfg->idle == TB_IDLE_BACKOFF ? SPIN_NS : PARK_AFTER_NS);
	rc = tb_thread_start(&r->thread, "tb-recovery", rec_main, r);
	if (rc < 0) {
		tb_recovering_close(r);
		return tb_error_prepend(rc, "recovery");
	}
	r->started = 1;
	*out = r;
	return 0;
}

void tb_recovering_bind(tb_recovering_t *r, tb_rx_t *rx, tb_seq_t *seq,
			tb_counter_slot_t *ctr)
{
	r->rx = rx;
	r->seq = seq;
	r->ctr = ctr;
}

/* ----------------------------------------------------------- poll thread */

/* Markers are 64-byte entries, which never need a padding entry before
 * them, so this reserve always holds one. */
static int live_marker(tb_recovering_t *r, int kind, uint64_t first,
		       uint64_t last, int code, uint64_t aux)
{
	tb_fifo_ent_t *e = tb_fifo_reserve(&r->live, 0);

	if (tb_unlikely(!e))
		return -1;
	marker_fill(e, kind, first, last, code, aux);
	tb_fifo_commit(&r->live);
	if (kind == TB_FIFO_GAP) {
		r->tail_gap_last = last;
		r->tail_gap_epoch = aux;
	}
	return 0;
}

/* Room for one more live frame of `len` bytes: its entry, a padding entry
 * before it in the worst case, and two marker entries behind it. */
static int live_fits(const tb_fifo_t *q, uint32_t len)
{
	/* Relaxed, unpaired: the poll thread is both ends of the live
	 * buffer, so it reads back its own stores. */
	uint64_t used = tb_atomic_load_relaxed(&q->tail) -
			tb_atomic_load_relaxed(&q->head);
	uint64_t need = 2 * (uint64_t)tb_fifo_space(len) + 2 * sizeof(tb_fifo_ent_t);

	return len <= tb_fifo_max_payload(q) && used + need <= q->mask + 1;
}

/* The handler the transport calls while recovering: copy the frame out
 * (the transport may reuse its slot as soon as it moves on). */
static void buffer_frame(void *clientd, const tb_msg_t *m)
{
	tb_recovering_t *r = clientd;
	tb_fifo_ent_t *e;

	if (r->dropped) /* frames after a dropped one are dropped too */
		return;
	if (tb_unlikely(!live_fits(&r->live, m->len) ||
			!(e = tb_fifo_reserve(&r->live, m->len)))) {
		/* The buffer is full: this frame and the rest of this poll
		 * become a gap, recovered in their turn (poll_live). */
		r->dropped = m->seq;
		return;
	}
	e->kind = TB_FIFO_FRAME;
	e->template_id = m->template_id;
	e->stream_id = m->stream_id;
	e->flags = m->flags;
	e->seq = m->seq;
	e->publish_ns = m->publish_ns;
	e->receive_ns = m->receive_ns;
	memcpy(tb_fifo_payload(e), m->data, m->len);
	tb_fifo_commit(&r->live);
}

/* Polls the transport into the live buffer.  While the buffer is full the
 * transport is not polled; frames that did not fit are marked as a gap. */
static void poll_live(tb_recovering_t *r)
{
	tb_seq_range_t loss;
	int n;

	if (r->live_paused || !live_fits(&r->live, 0))
		return;
	n = r->rx->ops->poll(r->rx, r->seq, &loss, buffer_frame, r, 256);
	if (tb_unlikely(r->dropped)) {
		live_marker(r, TB_FIFO_GAP, r->dropped, r->seq->expected - 1, 0,
			    r->rx->ops->epoch(r->rx));
		r->dropped = 0;
	}
	if (n >= 0 || n == TB_NOT_CONNECTED)
		return;
	if (n == TB_GAP || n == TB_LAPPED) {
		tb_counter_inc(r->ctr, n == TB_LAPPED ? TB_CTR_LAPPED : TB_CTR_GAPS);
		live_marker(r, TB_FIFO_GAP, loss.first, loss.last, 0,
			    r->rx->ops->epoch(r->rx));
		return;
	}
	/* TB_CLOSED, TB_NEW_EPOCH, TB_PUBLISHER_DEAD, an error: delivered
	 * at its place, after everything before it. */
	live_marker(r, TB_FIFO_COND, 0, 0, n, 0);
	r->live_paused = 1;
}

/* Hands the job in job_* to the recovery thread. */
static void post_thread(tb_recovering_t *r)
{
	/* R4: publishes the job fields; pairs with A4 in rec_main.  The
	 * relaxed load reads back the poll thread's own last store. */
	tb_atomic_store_release(&r->job_gen,
				tb_atomic_load_relaxed(&r->job_gen) + 1);
	/* A store while the recovery thread is awake; a FUTEX_WAKE only if
	 * it has been idle long enough to park. */
	tb_wake_signal(&r->wake);
	r->stats.thread_jobs++;
	r->job_active = 1;
}

static void post_job(tb_recovering_t *r, const tb_fifo_ent_t *gap)
{
	r->job_epoch = gap->aux;
	r->job_first = gap->seq;
	r->job_last = r->job_gap_last = gap->last;
	r->job_open = gap->code;
	/* Gaps queued behind this one go in the same request: one round
	 * trip for all the loss of the last round trip, not one each.
	 * The frames between them come twice and are dropped by deliver. */
	if (!gap->code && r->tail_gap_epoch == gap->aux &&
	    r->tail_gap_last > gap->last)
		r->job_last = r->tail_gap_last - gap->last > COALESCE_MAX ?
			      gap->last + COALESCE_MAX : r->tail_gap_last;
	/* A known epoch and a closed range: asked by this thread itself if
	 * a kept connection is up and idle and the range fits in one
	 * request; no thread to wake. */
	if (!r->job_open && tb_recovery_client_quick_start(r->client,
							     r->job_epoch,
							     r->job_first,
							     r->job_last) == 0) {
		tb_counter_inc(r->ctr, TB_CTR_RECOVERY_REQUESTS);
		r->stats.quick_fetches++;
		r->job_quick = 1;
		r->job_active = 1;
		return;
	}
	post_thread(r);
}

/* The quick fetch's frames, checked by the client where they lie in its
 * buffer: handed out at once, as deliver does. */
static int quick_frame(void *arg, const tb_frame_hdr_t *f)
{
	tb_recovering_t *r = arg;
	tb_msg_t m;

	if (r->deliver_next && f->seq < r->deliver_next) {
		r->seq->duplicates++;
		tb_counter_inc(r->ctr, TB_CTR_DUPLICATES);
		return 0;
	}
	r->deliver_next = f->seq + 1;
	if (!r->q_now)
		r->q_now = tb_clock_now_ns_inline();
	m.data = (const uint8_t *)f + TB_FRAME_HDR_LEN;
	m.len = f->length - TB_FRAME_HDR_LEN;
	m.template_id = f->template_id;
	m.flags = TB_MSG_F_REPLAY;
	m.stream_id = f->stream_id;
	m.seq = f->seq;
	m.publish_ns = f->publish_ns;
	m.receive_ns = r->q_now;
	r->q_delivered++;
	r->q_handler(r->q_clientd, &m);
	return 0;
}

/*
 * One step of the quick fetch: up to `room` frames delivered (returns how
 * many).  When it ends, the job is done, or what is left of the gap goes
 * to the recovery thread, whose policy (failover, backoff, rejects, loss)
 * takes it from the first sequence not delivered.
 */
static int poll_quick(tb_recovering_t *r, tb_handler_t handler,
		      void *clientd, int room)
{
	uint64_t next;
	int rc;

	r->q_handler = handler;
	r->q_clientd = clientd;
	r->q_delivered = 0;
	rc = tb_recovery_client_quick_step(r->client, quick_frame, r, room,
					   &next);
	if (rc == 0)
		return (int)r->q_delivered;
	r->job_quick = 0;
	if (rc == 1 || next > r->job_gap_last) {
		/* The gap is whole (what lies past it is the live buffer's
		 * and the later gaps' jobs'). */
		tb_counter_inc(r->ctr, TB_CTR_RECOVERY_OK);
		r->job_active = 0;
		return (int)r->q_delivered;
	}
	if (rc != TB_EBUSY)
		tb_info("recovery: %s; the recovery thread takes over from %llu",
			tb_errmsg(), (unsigned long long)next);
	r->stats.quick_given_back++;
	r->job_first = next;
	post_thread(r);
	return (int)r->q_delivered;
}

/* Hands out one frame unless it was handed out already (a probe and a
 * live gap may both bring it).  Returns 1 if delivered. */
static int deliver(tb_recovering_t *r, tb_fifo_ent_t *e, tb_handler_t handler,
		   void *clientd)
{
	tb_msg_t m;

	if (r->deliver_next && e->seq < r->deliver_next) {
		r->seq->duplicates++;
		tb_counter_inc(r->ctr, TB_CTR_DUPLICATES);
		return 0;
	}
	r->deliver_next = e->seq + 1;

	m.data = tb_fifo_payload(e);
	m.len = e->len;
	m.template_id = e->template_id;
	m.flags = (uint16_t)e->flags;
	m.stream_id = e->stream_id;
	m.seq = e->seq;
	m.publish_ns = e->publish_ns;
	m.receive_ns = e->kind == TB_FIFO_FRAME && e->receive_ns ?
		       e->receive_ns : tb_clock_now_ns_inline();
	handler(clientd, &m);
	return 1;
}

/* Clips a GAP or LOSS range to what is not yet delivered; 0 when nothing
 * of it is left. */
static int clip(const tb_recovering_t *r, uint64_t *first, uint64_t last)
{
	if (r->deliver_next && last < r->deliver_next)
		return 0;
	if (r->deliver_next && *first < r->deliver_next)
		*first = r->deliver_next;
	return 1;
}

int tb_recovering_poll(tb_recovering_t *r, tb_handler_t handler, void *clientd,
		       int limit, tb_seq_range_t *loss)
{
	/* Replayed frames are stamped when handed over: once per poll, as
	 * they all go within the same few microseconds. */
	uint64_t now = 0, replayed = 0;
	int n = 0;

	r->q_now = 0;
	poll_live(r);
	while (n < limit) {
		tb_fifo_ent_t *e;

		if (r->job_quick) {
			int got = poll_quick(r, handler, clientd, limit - n);

			n += got;
			replayed += (uint64_t)got;
			if (r->job_quick)
				break; /* the answer is on its way */
			continue;
		}
		if (r->job_active) {
			e = tb_fifo_peek(&r->replay);
			if (!e)
				break; /* the recovery thread is working */
			if (e->kind == TB_FIFO_FRAME) {
				if (!now)
					now = tb_clock_now_ns_inline();
				e->receive_ns = now;
				if (deliver(r, e, handler, clientd)) {
					replayed++;
					n++;
				}
				tb_fifo_release(&r->replay, e);
				continue;
			}
			if (e->kind == TB_FIFO_LOSS) {
				uint64_t first = e->seq;

				if (!clip(r, &first, e->last)) {
					tb_fifo_release(&r->replay, e);
					continue;
				}
				if (n > 0)
					break; /* the loss on its own poll */
				loss->first = first;
				loss->last = e->last;
				r->deliver_next = e->last + 1;
				tb_fifo_release(&r->replay, e);
				tb_counter_inc(r->ctr, TB_CTR_DATA_LOSS);
				return TB_DATA_LOSS;
			}
			/* DONE: seq = requests, last = lost, aux = frames. */
			tb_counter_add(r->ctr, TB_CTR_RECOVERY_REQUESTS, e->seq);
			tb_counter_inc(r->ctr, e->code ? TB_CTR_RECOVERY_FAILED :
				       TB_CTR_RECOVERY_OK);
			tb_fifo_release(&r->replay, e);
			r->job_active = 0;
			continue;
		}
		e = tb_fifo_peek(&r->live);
		if (!e) {
			/* Caught up: live again, once the transport is past
			 * what recovery delivered (a probe may have fetched
			 * beyond what the transport has read). */
			if (!r->live_paused &&
			    (!r->deliver_next ||
			     r->seq->expected >= r->deliver_next))
				r->active = 0;
			break;
		}
		if (e->kind == TB_FIFO_FRAME) {
			n += deliver(r, e, handler, clientd);
			tb_fifo_release(&r->live, e);
			continue;
		}
		if (e->kind == TB_FIFO_GAP) {
			uint64_t first = e->seq;

			if (clip(r, &first, e->last)) {
				e->seq = first;
				post_job(r, e);
			}
			tb_fifo_release(&r->live, e);
			continue;
		}
		/* COND */
		if (n > 0)
			break;
		{
			int code = e->code;

			tb_fifo_release(&r->live, e);
			r->live_paused = 0;
			if (code == TB_NEW_EPOCH)
				r->deliver_next = 0; /* sequences restart */
			if (tb_fifo_empty(&r->live))
				r->active = 0;
			return code;
		}
	}
	if (replayed)
		tb_counter_add(r->ctr, TB_CTR_REPLAYED, replayed);
	if (n > 0)
		tb_counter_add(r->ctr, TB_CTR_DELIVERED, (uint64_t)n);
	return n;
}

int tb_recovering_start_gap(tb_recovering_t *r, uint64_t first, uint64_t last,
			    tb_handler_t handler, void *clientd, int limit,
			    tb_seq_range_t *loss)
{
	/* Everything before the gap is delivered; after a probe, perhaps
	 * some of the gap too. */
	if (r->deliver_next < first)
		r->deliver_next = first;
	live_marker(r, TB_FIFO_GAP, first, last, 0, r->rx->ops->epoch(r->rx));
	r->active = 1;
	return tb_recovering_poll(r, handler, clientd, limit, loss);
}

/*
 * A late joiner (tb_sub_start_at) on a stream with nothing new to read
 * would not see its gap until the next message is published.  So on its
 * first idle poll it asks the recovery services for everything from the
 * start sequence up to the latest they hold (an open job: it ends at the
 * first answer that stops short of what it asked); live frames are
 * buffered meanwhile, and whatever both bring is delivered once.  With no
 * epoch from the transport (epoch 0: no publisher to attach to, yet or any
 * more), the services' newest epoch is asked.
 */
int tb_recovering_start_probe(tb_recovering_t *r, uint64_t epoch,
			      tb_handler_t handler, void *clientd, int limit,
			      tb_seq_range_t *loss)
{
	uint64_t from = r->seq->expected;

	r->deliver_next = from;
	live_marker(r, TB_FIFO_GAP, from, UINT64_MAX - TB_RECOVERY_PROTO_COUNT_MAX,
		    1, epoch);
	r->active = 1;
	return tb_recovering_poll(r, handler, clientd, limit, loss);
}

void tb_recovering_stats(const tb_recovering_t *r, tb_recovering_stats_t *st)
{
	*st = r->stats;
	st->wake_kicks = tb_atomic_load_relaxed(&r->wake.kicks);
	st->connections_up = tb_atomic_load_relaxed(&r->up);
}

int tb_recovering_active(const tb_recovering_t *r)
{
	return r->active;
}

void tb_recovering_new_epoch(tb_recovering_t *r)
{
	r->deliver_next = 0; /* sequences restart */
}
