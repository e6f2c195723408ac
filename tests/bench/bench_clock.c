/*
 * bench_clock.c - what one timestamp costs: tb_clock_now_ns_inline() against
 * clock_gettime(CLOCK_REALTIME) and a bare rdtsc, in the same run.
 *
 * Each clock is read N times in a loop, five runs each, interleaved so that
 * a noisy neighbour hurts all three alike; the table gives the median ns per
 * read and the ratio to rdtsc (the floor: nothing TSC-based can be cheaper).
 * Not a test: it asserts nothing.
 */
#include "bus/clock.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define READS 2000000
#define RUNS 5

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The sums keep the compiler from dropping the reads. */
static volatile uint64_t sink;

static double run_inline(void)
{
	uint64_t s = 0, t0 = mono_ns();

	for (int i = 0; i < READS; i++)
		s += tb_clock_now_ns_inline();
	sink = s;
	return (double)(mono_ns() - t0) / READS;
}

static double run_gettime(void)
{
	uint64_t s = 0, t0 = mono_ns();
	struct timespec ts;

	for (int i = 0; i < READS; i++) {
		clock_gettime(CLOCK_REALTIME, &ts);
		s += (uint64_t)ts.tv_nsec;
	}
	sink = s;
	return (double)(mono_ns() - t0) / READS;
}

static double run_rdtsc(void)
{
	uint64_t s = 0, t0 = mono_ns();

	for (int i = 0; i < READS; i++)
		s += tb_clock_tsc();
	sink = s;
	return (double)(mono_ns() - t0) / READS;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v)
{
	qsort(v, RUNS, sizeof(*v), cmp);
	return v[RUNS / 2];
}

int main(void)
{
	double in[RUNS], gt[RUNS], ts[RUNS], m_in, m_gt, m_ts;

	tb_clock_init();
	for (int r = 0; r < RUNS; r++) {
		in[r] = run_inline();
		gt[r] = run_gettime();
		ts[r] = run_rdtsc();
	}
	m_in = median(in);
	m_gt = median(gt);
	m_ts = median(ts);

	printf("clock source: %s; %d reads x %d runs, median ns per read\n\n",
	       tb_clock_source(), READS, RUNS);
	printf("| clock                          | ns/read | x rdtsc |\n");
	printf("|--------------------------------|--------:|--------:|\n");
	printf("| rdtsc (floor)                  | %7.2f | %7.2f |\n", m_ts,
	       1.0);
	printf("| tb_clock_now_ns_inline         | %7.2f | %7.2f |\n", m_in,
	       m_in / m_ts);
	printf("| clock_gettime(CLOCK_REALTIME)  | %7.2f | %7.2f |\n", m_gt,
	       m_gt / m_ts);
	return 0;
}
