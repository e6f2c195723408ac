/*
 * sources.h - one stream taken from several identical copies of it: the
 * subscribing side of hot failover (subscriber/sources.c).
 *
 * Two or more publishers (feed handlers on one or two hosts) publish the
 * same messages under the same sequence numbers and one epoch they agree
 * on (tb_publisher_open_epoch), each on a stream of its own: a transport,
 * its ring or group, its liveness.  The subscriber opens every copy's
 * transport and presents them to the rest of the subscriber - the poll
 * loop, the recovering machine, late join - as one transport (a tb_rx_t
 * like any other), so that nothing above it knows there are several.
 *
 * The rule.  The subscriber's tracker (`seq`, the one tb_sub_poll and the
 * recovering machine advance) holds the next sequence to deliver, E.  Each
 * copy keeps a tracker of its own.  Before a copy is polled its tracker is
 * raised to E, so that what another copy delivered is a duplicate to it
 * (dropped by the transport's own admission, tb_seq_admit, at the cost of
 * a comparison) and whatever it delivers is E, E + 1, ...: the copy that
 * brings a sequence first delivers it, straight to the caller's handler,
 * and the subscriber's E follows that copy's.  No frame is copied and no
 * handler wrapped on the live path; the price of arbitration is one more
 * poll of one more transport per call.
 *
 * Gaps.  A copy that loses frames reports the gap on its own tracker, which
 * then stands beyond E: the copy is *held* (not polled) while another copy
 * may still bring E.  When the others' deliveries reach the held copy's
 * position it is polled again, and the gap was never seen above.  When no
 * copy can bring E - every copy is held, ended or not yet there - or a
 * copy has been held for `sources_wait_us` with E not moving, the part no
 * copy holds, [E, lowest held position - 1], is the subscriber's gap
 * (TB_GAP, or TB_LAPPED when that copy was lapped), handled above as on
 * one stream: recovered, or reported.
 *
 * Ends.  A copy that reports TB_PUBLISHER_DEAD or TB_CLOSED is *ended*,
 * and still polled: a publisher restarted in the same epoch republishes
 * from 1, which its transport delivers as duplicates (the copy is then
 * live again, and catches up) or, past E, as new.  Nothing is reported
 * while another copy is live.  When every copy has ended the poll reports
 * it once: TB_CLOSED if one of them closed (the stream was finished),
 * else TB_PUBLISHER_DEAD; and again after a copy came back and every one
 * ended again.  TB_NOT_CONNECTED while no copy has appeared.
 *
 * Epochs.  The first epoch a copy attaches to is followed.  A copy that
 * shows another epoch (a restart that did not keep the epoch) is *foreign*
 * and left unpolled, so its frames wait in its transport; when no copy of
 * the followed epoch is live any more, the first foreign one's epoch is
 * taken: TB_NEW_EPOCH, and its frames from 1.  A copy that attaches for
 * the first time delivers in the same poll; its first message is checked
 * against the followed epoch before it is passed on, and a copy of another
 * epoch delivers nothing.
 *
 * Threads: everything runs on the subscriber's polling thread (open and
 * close on whoever opens and closes the subscriber).
 */
#ifndef TB_SOURCES_H
#define TB_SOURCES_H

#include <tickbus/tickbus.h>

#include "bus/counters.h"
#include "bus/transport/transport.h"

#include <stdint.h>

/* Opens the transport of each of `n` copies (1..TB_SOURCES_MAX; each
 * validated, with cfg's id) as one tb_rx_t.  `cfg` gives
 * sources_wait_us.  Returns 0 or a set-up error with a message naming the
 * copy. */
int tb_sources_open(tb_rx_t **rx, const tb_stream_cfg_t *cfg,
		    const tb_stream_cfg_t *srcs, int n);

/* The subscriber's counters slot, for the copies' transports to count
 * duplicates and malformed input into (tb_rx_t.ctr of each).  Once, after
 * open, before the first poll. */
void tb_sources_set_counters(tb_rx_t *rx, tb_counter_slot_t *ctr);

/* What the arbitration did, for tests and tools. */
typedef struct tb_sources_stats {
	int n;                               /* copies */
	uint64_t delivered[TB_SOURCES_MAX];  /* messages each brought first */
	uint64_t losses[TB_SOURCES_MAX];     /* gaps and laps each reported */
	uint64_t ends[TB_SOURCES_MAX];       /* deaths and closes of each */
	int live[TB_SOURCES_MAX];            /* 1: attached and not ended */
	uint64_t gaps;                       /* gaps no copy could fill */
	uint64_t epoch;                      /* followed; 0 = none yet */
} tb_sources_stats_t;

void tb_sources_stats(const tb_rx_t *rx, tb_sources_stats_t *out);

extern const tb_rx_ops_t tb_sources_rx_ops;

#endif
