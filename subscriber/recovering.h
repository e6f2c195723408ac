/*
 * recovering.h - a subscriber's gap recovery (subscriber/recovering.c): the
 * state machine that turns a gap or a lap into the missing frames, fetched
 * from the recovery services and delivered in order before the live ones
 * that came after, or into one TB_DATA_LOSS naming exactly what could not
 * be had.
 *
 * A subscriber with recovery endpoints opens one beside its transport.
 * While the transport delivers in order the machine is idle and costs
 * nothing: tb_sub_poll tests a flag of its own and calls in only after a
 * gap, a lap or a late join, until tb_recovering_active says it is done.
 * Nothing here is on the live hot path, so nothing needs to be inline.
 *
 * Results of the poll-side calls are tb_sub_poll's: a count of messages
 * delivered, or a condition at its place in the stream (TB_DATA_LOSS with
 * the range in *loss, or one the transport reported: TB_CLOSED,
 * TB_NEW_EPOCH, TB_PUBLISHER_DEAD, ...).
 *
 * Threads: every call is made by the subscriber's poll thread (open and
 * close by whoever opens and closes the subscriber).  The machine runs a
 * thread of its own for the blocking TCP work, from open to close; a gap
 * small enough for one request on an idle kept connection the poll
 * thread asks for itself, without waiting (recovering.c).
 */
#ifndef TB_RECOVERING_H
#define TB_RECOVERING_H

#include <tickbus/tickbus.h>

#include "bus/counters.h"
#include "bus/seq.h"
#include "bus/transport/transport.h"

#include <stdint.h>

typedef struct tb_recovering tb_recovering_t;

/*
 * Allocates the live and replay buffers for stream `cfg` (recovery
 * endpoints, token, recovery_buffer, recovery_timeout_ms, ring_size, idle)
 * and starts the recovery thread, which dials and authenticates to each
 * service at once and keeps those connections.  Returns 0 or TB_ENOMEM /
 * TB_ESYS (pthread_create) with a message; *r is NULL on failure.
 */
int tb_recovering_open(tb_recovering_t **r, const tb_stream_cfg_t *cfg);

/* Hands the machine the subscriber's transport, sequence tracker and
 * counters slot, which it polls, advances and counts into while active.
 * Once, after the transport is open and before the first poll. */
void tb_recovering_bind(tb_recovering_t *r, tb_rx_t *rx, tb_seq_t *seq,
			tb_counter_slot_t *ctr);

/* Stops and joins the recovery thread (at most its 100 ms poll), frees
 * everything.  NULL is a no-op. */
void tb_recovering_close(tb_recovering_t *r);

/*
 * The transport reported [first, last] missing (TB_GAP or TB_LAPPED): queue
 * it for recovery, buffer live frames from here on, and deliver what can be
 * delivered at once, as tb_recovering_poll.
 */
int tb_recovering_start_gap(tb_recovering_t *r, uint64_t first, uint64_t last,
			    tb_handler_t handler, void *clientd, int limit,
			    tb_seq_range_t *loss);

/*
 * A late joiner's first idle poll, its transport attached to `epoch`, or
 * to none yet (0: the services' newest epoch is asked, so that a late
 * joiner after the publisher is gone is still served): ask the services
 * for everything from the tracker's expected sequence up to the latest
 * they hold, then as tb_recovering_poll.
 */
int tb_recovering_start_probe(tb_recovering_t *r, uint64_t epoch,
			      tb_handler_t handler, void *clientd, int limit,
			      tb_seq_range_t *loss);

/*
 * While active: polls the transport into the live buffer, then delivers up
 * to `limit` messages in order, replayed ones first (TB_MSG_F_REPLAY).  A
 * loss or a condition is returned alone, on a poll of its own.  Never
 * blocks.
 */
int tb_recovering_poll(tb_recovering_t *r, tb_handler_t handler, void *clientd,
		       int limit, tb_seq_range_t *loss);

/* How the gaps were fetched (poll thread; tests and tools). */
typedef struct tb_recovering_stats {
	uint64_t quick_fetches;    /* asked by the poll thread itself */
	uint64_t quick_given_back; /* of those, finished by the thread */
	uint64_t thread_jobs;      /* jobs posted to the recovery thread */
	uint64_t wake_kicks;       /* of those, the ones that woke it from
				      its futex (a system call) */
	uint64_t connections_up;   /* kept connections authenticated and
				      open, as of the recovery thread's last
				      check (every 100 ms while idle) */
} tb_recovering_stats_t;

void tb_recovering_stats(const tb_recovering_t *r, tb_recovering_stats_t *st);

/* A subscriber's machine (subscriber.c), NULL without recovery endpoints:
 * for tests and benchmarks, not in the public API. */
tb_recovering_t *tb_sub_recovering_of(const tb_subscriber_t *s);

/* 1 while recovering (started and not yet drained), 0 when live again. */
int tb_recovering_active(const tb_recovering_t *r);

/* The live transport saw TB_NEW_EPOCH: sequences restart, so nothing below
 * the last one handed out is a duplicate any more. */
void tb_recovering_new_epoch(tb_recovering_t *r);

#endif
