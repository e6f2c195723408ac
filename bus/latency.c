/*
 * latency.c - tb_latency_*: an application's latency histogram in the
 * counters file (see latency.h).
 */
#include "bus/latency.h"

#include "bus/error.h"

#include <stdlib.h>
#include <string.h>

int tb_latency_open(tb_latency_t **out, uint32_t id, const char *name)
{
	tb_latency_t *l;

	if (!out || !name || !*name)
		return tb_error_set(TB_EINVAL, "tb_latency_open: NULL argument "
				  "or empty name");
	*out = NULL;
	/* The histogram's counts are on cache lines of their own. */
	if (posix_memalign((void **)&l, 64, sizeof(*l)) != 0)
		return tb_error_set(TB_ENOMEM, "tb_latency_open: out of memory");
	memset(l, 0, sizeof(*l));
	l->h = tb_counters_hist_add(id, TB_ROLE_SUBSCRIBER, name);
	if (!l->h)
		l->h = &l->own; /* the warning is said */
	*out = l;
	return 0;
}

void tb_latency_record(tb_latency_t *l, int64_t ns)
{
	/* Hot path: a bit scan and two relaxed load/store pairs
	 * (counters.h). */
	tb_counter_hist_record(l->h, ns);
}

uint64_t tb_latency_count(const tb_latency_t *l)
{
	uint64_t n = 0;

	/* Relaxed, unpaired: the owner thread's own counts, as
	 * tb_counter_get. */
	for (int b = 0; b < TB_COUNTERS_HIST_BUCKETS; b++)
		n += tb_atomic_load_relaxed(&l->h->b[b]);
	return n;
}

void tb_latency_close(tb_latency_t *l)
{
	if (!l)
		return;
	if (l->h != &l->own)
		tb_counters_hist_remove(l->h);
	free(l);
}
