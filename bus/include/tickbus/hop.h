/*
 * hop.h - per-hop timestamps along the tick-to-trade path, and a histogram
 * per hop.
 *
 * A message crosses these points, in this order; each is a nanosecond
 * timestamp on the CLOCK_REALTIME epoch (tb_clock_now_ns(): the calibrated
 * invariant TSC, comparable across the processes of one host; across hosts
 * comparable as far as the hosts' clocks are synchronised, PTP typically
 * keeping them within a microsecond or better):
 *
 *   TB_HOP_FEED_RECEIVE   the feed handler got the exchange packet
 *   TB_HOP_PUBLISH        the publisher stamped the frame (tb_msg_t.publish_ns)
 *   TB_HOP_SUB_RECEIVE    the subscriber polled it (tb_msg_t.receive_ns)
 *   TB_HOP_HANDLER_DONE   the strategy's handler finished with it
 *   TB_HOP_DECISION       the strategy decided what to do
 *   TB_HOP_ORDER_SENT     the order left for the exchange
 *
 * Typical use in a strategy's handler:
 *
 *   tb_hop_stamps_t s;
 *   tb_hop_begin(&s, msg);                     // publish and receive
 *   tb_hop_set(&s, TB_HOP_FEED_RECEIVE, feed_ns_from_payload);
 *   ... decide ...  tb_hop_stamp(&s, TB_HOP_DECISION);
 *   ... send ...    tb_hop_stamp(&s, TB_HOP_ORDER_SENT);
 *   tb_hop_record(rec, &s);
 *
 * tb_hop_record puts into hop h's histogram the time from the nearest
 * earlier stamped hop to h (hops left at 0 are skipped, so a strategy that
 * never decides still gets receive -> order), and the time from the first
 * to the last stamped hop into the end-to-end histogram.  A negative
 * difference (hosts whose clocks disagree) is recorded as 0 and counted in
 * that histogram's tb_hist_underflow(): a non-zero underflow on a
 * cross-host hop means the clocks need attention, not that the bus is fast.
 *
 * Threads: a tb_hop_stamps_t belongs to the thread that fills it; a
 * tb_hop_recorder_t is used by one thread at a time (record on the hot
 * thread, read the histograms after it stops, or give each thread its own
 * recorder and merge them; for interval reporting while recording, use a
 * tb_hist_recorder_t per hop, hist.h).
 *
 * This header is public and compiles as C++.
 */
#ifndef TB_HOP_H
#define TB_HOP_H

#include "hist.h"
#include "tickbus.h"

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tb_hop {
	TB_HOP_FEED_RECEIVE = 0,
	TB_HOP_PUBLISH = 1,
	TB_HOP_SUB_RECEIVE = 2,
	TB_HOP_HANDLER_DONE = 3,
	TB_HOP_DECISION = 4,
	TB_HOP_ORDER_SENT = 5,
	TB_HOP_COUNT = 6,
} tb_hop_t;

/* The timestamps of one message; 0 = not stamped. */
typedef struct tb_hop_stamps {
	uint64_t ns[TB_HOP_COUNT];
} tb_hop_stamps_t;

typedef struct tb_hop_recorder tb_hop_recorder_t;

/* "feed_receive", "publish", ...; "?" for a value out of range.
 * Errors: none. */
const char *tb_hop_name(int hop);

/*
 * Allocates a recorder: one histogram per hop plus the end-to-end one, each
 * tracking 1 ns .. highest_ns with `significant_digits` (1..5).  Returns 0
 * with *rec set, or an error with a message and *rec NULL.
 * Errors: TB_EINVAL (rec NULL, highest_ns below 2, digits not in 1..5),
 * TB_ENOMEM.
 */
int tb_hop_recorder_init(tb_hop_recorder_t **rec, int64_t highest_ns,
			 int significant_digits);
/* Frees the recorder and its histograms; NULL is a no-op.  Errors: none. */
void tb_hop_recorder_free(tb_hop_recorder_t *rec);
/* Zeroes every histogram.  Errors: none. */
void tb_hop_recorder_reset(tb_hop_recorder_t *rec);

/* The histogram of the time into `hop` from the stamped hop before it (NULL
 * when hop is out of range, or rec NULL), and the end-to-end one.
 * Errors: none (no message is set for a NULL result). */
const tb_hist_t *tb_hop_hist(const tb_hop_recorder_t *rec, int hop);
const tb_hist_t *tb_hop_total(const tb_hop_recorder_t *rec);

/*
 * Writes one line per hop that has samples, in path order, then the
 * end-to-end line ("hop total ..."):
 *   hop NAME count=N p50=.. p90=.. p99=.. p99.9=.. max=.. negative=N
 * values in ns, NAME being the hop measured into (from the stamped hop
 * before it).  Returns 0.
 * Errors: TB_EINVAL (rec or out NULL), TB_EIO (a write failed).
 */
int tb_hop_write_summary(const tb_hop_recorder_t *rec, FILE *out);

/* ------------------------------------------------------------ hot path */

/* Clears `s` and takes the publish and receive stamps from `msg`.
 * Hot path: no allocation, lock or system call. */
static inline void tb_hop_begin(tb_hop_stamps_t *s, const tb_msg_t *msg)
{
	for (int i = 0; i < TB_HOP_COUNT; i++)
		s->ns[i] = 0;
	s->ns[TB_HOP_PUBLISH] = msg->publish_ns;
	s->ns[TB_HOP_SUB_RECEIVE] = msg->receive_ns;
}

/* Sets a stamp taken elsewhere (a NIC timestamp, a time carried in the
 * payload).  Hot path. */
static inline void tb_hop_set(tb_hop_stamps_t *s, tb_hop_t hop, uint64_t ns)
{
	if ((unsigned)hop < (unsigned)TB_HOP_COUNT)
		s->ns[hop] = ns;
}

/* Stamps `hop` now (tb_clock_now_ns).  Hot path: one TSC read. */
static inline void tb_hop_stamp(tb_hop_stamps_t *s, tb_hop_t hop)
{
	tb_hop_set(s, hop, tb_clock_now_ns());
}

/* The recorder's layout is ABI (used by the inline tb_hop_record). */
struct tb_hop_recorder {
	tb_hist_t *hop[TB_HOP_COUNT]; /* [0] stays empty: nothing before */
	tb_hist_t *total;
};

/*
 * Records the per-hop differences of `s` (see the top of this file).
 * Hot path: constant time (at most 7 histogram records); no allocation,
 * lock or system call.
 */
static inline void tb_hop_record(tb_hop_recorder_t *rec,
				 const tb_hop_stamps_t *s)
{
	int first = -1, prev = -1;

	for (int i = 0; i < TB_HOP_COUNT; i++) {
		if (!s->ns[i])
			continue;
		if (prev >= 0)
			tb_hist_record(rec->hop[i],
				       (int64_t)(s->ns[i] - s->ns[prev]));
		else
			first = i;
		prev = i;
	}
	if (first >= 0 && prev > first)
		tb_hist_record(rec->total,
			       (int64_t)(s->ns[prev] - s->ns[first]));
}

#ifdef __cplusplus
}
#endif
#endif
