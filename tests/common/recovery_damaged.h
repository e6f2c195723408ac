/*
 * recovery_damaged.h - a recovery source (recovery_src.h) whose store lost
 * one range to damage, as tb_store_read reports it: a read that reaches
 * the range stops before it, a read that starts in it says
 * TB_STORE_LOST, and `lost` (tb_store_lost) names the whole range.
 */
#ifndef TB_TEST_RECOVERY_DAMAGED_H
#define TB_TEST_RECOVERY_DAMAGED_H

#include "tests/common/recovery_src.h"

typedef struct recovery_damaged {
	recovery_src_t src;             /* first: what it would hold whole */
	uint64_t lost_first, lost_last; /* the damaged range; [0, 0]: none */
	int lost_calls;                 /* `lost` asked so far */
} recovery_damaged_t;

static inline int recovery_damaged_in(const recovery_damaged_t *d,
				      uint64_t seq)
{
	return d->lost_first && seq >= d->lost_first && seq <= d->lost_last;
}

/* As tb_store_read across the damaged range. */
static inline int recovery_damaged_read(void *sd, uint64_t first, int max,
					tb_store_read_fn fn, void *cd)
{
	recovery_damaged_t *d = sd;

	if (recovery_damaged_in(d, first) && first <= d->src.last)
		return TB_STORE_LOST;
	if (d->lost_first && first < d->lost_first &&
	    first + (uint64_t)max > d->lost_first)
		max = (int)(d->lost_first - first);
	return recovery_src_read(&d->src, first, max, fn, cd);
}

/* As tb_store_lost: the range around `seq`, of the one epoch held. */
static inline int recovery_damaged_lost(void *sd, uint64_t epoch, uint64_t seq,
					uint64_t *first, uint64_t *last)
{
	recovery_damaged_t *d = sd;

	d->lost_calls++;
	if (epoch != d->src.epoch || !recovery_damaged_in(d, seq))
		return 0;
	*first = d->lost_first;
	*last = d->lost_last;
	return 1;
}

/* Serves `d` as recovery_src_serve serves a whole source. */
static inline int recovery_damaged_serve(tb_recovery_server_t **srv,
					 recovery_damaged_t *d,
					 const char *token,
					 const tb_recovery_server_cfg_t *cfg)
{
	tb_recovery_server_source_t src = {.stream_id = d->src.stream_id,
					   .token = token,
					   .bounds = recovery_src_bounds,
					   .read = recovery_damaged_read,
					   .lost = recovery_damaged_lost,
					   .sd = d};
	tb_recovery_server_cfg_t c;

	if (cfg)
		c = *cfg;
	else
		tb_recovery_server_cfg_init(&c);
	return tb_recovery_server_open(srv, &c, &src, 1);
}

#endif
