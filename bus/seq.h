/*
 * seq.h - sequence tracking shared by every transport.
 *
 * Each stream numbers its messages 1, 2, 3, ... within a publisher epoch.  A
 * receiver keeps the next sequence it expects; every arriving data frame is
 * classified against it:
 *
 *   seq == expected   TB_SEQ_NEXT       deliver, expected += 1
 *   seq <  expected   TB_SEQ_DUPLICATE  drop (already delivered)
 *   seq >  expected   TB_SEQ_GAP        [expected, seq - 1] is missing
 *
 * The tracker only classifies and counts; what to do about a gap (report it,
 * buffer and recover) is the caller's policy.  `expected == 0` means "not
 * started": the first frame seen sets the start (a late joiner begins at the
 * live position), unless the caller asked to start at a given sequence.
 *
 * tb_seq_admit() is that rule, and the one every transport's poll applies
 * (shm.h, rc, the datagram core dgram.h): a gap leaves the tracker as it
 * was, so that the transport can report it on its own (tb_seq_gap_to) before
 * it delivers the frame that revealed it.  tb_seq_classify() is the same
 * rule for a caller that takes the gap and the frame together.
 */
#ifndef TB_SEQ_H
#define TB_SEQ_H

#include "bus/barrier.h"

#include <stdint.h>

enum tb_seq_class {
	TB_SEQ_NEXT = 0,
	TB_SEQ_DUPLICATE = 1,
	TB_SEQ_GAP = 2,
};

/* An inclusive range of sequence numbers, [first, last]. */
typedef struct tb_seq_range {
	uint64_t first;
	uint64_t last;
} tb_seq_range_t;

typedef struct tb_seq {
	uint64_t expected;    /* next sequence to deliver; 0 = take the first */
	uint64_t delivered;   /* frames classified NEXT */
	uint64_t duplicates;  /* frames classified DUPLICATE */
	uint64_t gaps;        /* gap events */
	uint64_t missing;     /* sequences reported missing, summed */
} tb_seq_t;

/* Starts tracking; `first` = 0 takes whatever arrives first. */
static inline void tb_seq_init(tb_seq_t *s, uint64_t first)
{
	s->expected = first;
	s->delivered = s->duplicates = s->gaps = s->missing = 0;
}

/*
 * Admits `seq`, the one admission rule every transport's poll applies:
 *   TB_SEQ_NEXT       deliver it; expected = seq + 1, delivered counted.
 *                     With expected == 0 (not started) any seq is NEXT: a
 *                     late joiner starts where it joins.
 *   TB_SEQ_DUPLICATE  drop it; duplicates counted.
 *   TB_SEQ_GAP        [expected, seq - 1] is missing.  Nothing changes: the
 *                     caller reports the gap when it is ready to (on its own,
 *                     before any frame after it) with tb_seq_gap_to(), and
 *                     the frame is then admitted as NEXT.
 * Hot path: the in-order case is one comparison; no allocation, lock or
 * system call.
 */
static inline enum tb_seq_class tb_seq_admit(tb_seq_t *s, uint64_t seq)
{
	if (tb_unlikely(seq != s->expected)) {
		if (tb_unlikely(s->expected == 0)) {
			s->expected = seq;    /* late join: this is the first */
		} else if (seq < s->expected) {
			s->duplicates++;
			return TB_SEQ_DUPLICATE;
		} else {
			return TB_SEQ_GAP;
		}
	}
	s->expected++;
	s->delivered++;
	return TB_SEQ_NEXT;
}

/*
 * Records that [expected, seq - 1] is missing and moves on so that `seq` is
 * the next to deliver, without delivering it.  For callers that report a gap
 * before the frame that revealed it (after tb_seq_admit said TB_SEQ_GAP).
 * Requires seq > expected > 0.
 */
static inline void tb_seq_gap_to(tb_seq_t *s, uint64_t seq, tb_seq_range_t *gap)
{
	gap->first = s->expected;
	gap->last = seq - 1;
	s->gaps++;
	s->missing += seq - s->expected;
	s->expected = seq;
}

/*
 * tb_seq_admit for a caller that delivers the frame that revealed a gap at
 * once: on TB_SEQ_GAP `*gap` receives the missing range and the frame is
 * counted delivered (expected = seq + 1).  The caller that wants to hold the
 * frame back for recovery does so; the tracker does not.
 */
static inline enum tb_seq_class tb_seq_classify(tb_seq_t *s, uint64_t seq,
						 tb_seq_range_t *gap)
{
	enum tb_seq_class c = tb_seq_admit(s, seq);

	if (c == TB_SEQ_GAP) {
		tb_seq_gap_to(s, seq, gap);
		s->expected = seq + 1;
		s->delivered++;
	}
	return c;
}

#endif
