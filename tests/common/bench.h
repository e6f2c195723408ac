/*
 * bench.h - what the latency benchmarks share: a run's percentiles, the
 * median of several runs, and the table that sets tickbus beside its floor
 * (the least the same path takes without tickbus) with their ratio.
 */
#ifndef TB_TEST_BENCH_H
#define TB_TEST_BENCH_H

#include <tickbus/hist.h>
#include <tickbus/tickbus.h>

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One run's one-way latency, ns. */
typedef struct bench_result {
	int64_t p50, p99, p999, max;
} bench_result_t;

static inline void bench_summarise(const tb_hist_t *h, bench_result_t *r)
{
	r->p50 = tb_hist_value_at_percentile(h, 50);
	r->p99 = tb_hist_value_at_percentile(h, 99);
	r->p999 = tb_hist_value_at_percentile(h, 99.9);
	r->max = tb_hist_max(h);
}

static inline int bench_result_cmp(const void *a, const void *b)
{
	const bench_result_t *x = a, *y = b;

	return (x->p50 > y->p50) - (x->p50 < y->p50);
}

/* A handler that counts what it is given (clientd: a uint64_t). */
static inline void bench_count(void *clientd, const tb_msg_t *m)
{
	(void)m;
	(*(uint64_t *)clientd)++;
}

/* Sorts `runs` runs of the floor and of tickbus by p50 and prints the
 * median run of each and their ratio, each line led by `tag` ("bench
 * shm"), labels `width` wide; `goal` (may be "") ends the ratio line. */
static inline void bench_print_vs_floor(const char *tag, int width,
					bench_result_t *fl, const char *fl_label,
					bench_result_t *tb, const char *tb_label,
					int runs, const char *goal)
{
	bench_result_t f, t;

	qsort(fl, (size_t)runs, sizeof(fl[0]), bench_result_cmp);
	qsort(tb, (size_t)runs, sizeof(tb[0]), bench_result_cmp);
	f = fl[runs / 2];
	t = tb[runs / 2];
	printf("%s: %-*s %8s %8s %8s %8s\n", tag, width, "", "p50", "p99",
	       "p99.9", "max");
	printf("%s: %-*s %8" PRId64 " %8" PRId64 " %8" PRId64 " %8" PRId64 "\n",
	       tag, width, fl_label, f.p50, f.p99, f.p999, f.max);
	printf("%s: %-*s %8" PRId64 " %8" PRId64 " %8" PRId64 " %8" PRId64 "\n",
	       tag, width, tb_label, t.p50, t.p99, t.p999, t.max);
	printf("%s: %-*s %8.2f %8.2f %8.2f %8.2f%s\n", tag, width, "ratio",
	       (double)t.p50 / f.p50, (double)t.p99 / f.p99,
	       (double)t.p999 / f.p999, (double)t.max / f.max, goal);
}

/* A self-count line of callgrind_annotate that belongs to the publisher
 * core: tb_pub_offer's (and its copies') own lines from the publisher and
 * the headers of its claim, frame, clock and count.  (rc's and ud's sends are inlined into
 * tb_pub_offer too, from their transport's headers: the transport's.) */
static inline int bench_core_line(const char *line)
{
	static const char *const core[] = {
		"publisher/", "bus/ring.h:", "bus/frame.h:", "bus/clock.h:",
		"bus/counters.h:", "intrin.h:", NULL};
	const char *fn = strstr(line, "%)");

	/* tb_pub_offer, or the copy of its small offer it jumps to
	 * (publisher.c: tb_pub_offer_ud, _shm, _op). */
	if (!fn || !(strstr(fn, ":tb_pub_offer ") ||
		     strstr(fn, ":tb_pub_offer\n") ||
		     strstr(fn, ":tb_pub_offer_")))
		return 0;
	for (int i = 0; core[i]; i++)
		if (strstr(fn, core[i]))
			return 1;
	return 0;
}

#endif
