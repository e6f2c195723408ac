/*
 * bench_hist - the cost of one histogram record, against a floor.
 *
 * The floor is the same loop without the record: load the next value from a
 * small precomputed table (latency-like values, so that the records land in
 * many buckets) and hand it to an empty asm statement so that it is not
 * optimised away.  The figures are that loop with tb_hist_record, and with
 * tb_hist_recorder_record (the lock-free interval recorder, which adds the
 * epoch store that orders it against a sampling thread).  Each variant runs
 * RUNS times, interleaved so that all see the same machine noise; the median
 * run is reported, with the net cost over the floor.
 *
 * Not a test: it prints figures and exits 0 unless it could not run.
 * Usage: bench_hist [records per run, default 100000000]
 * Output lines start with "bench hist" for tests/bench/run-bench.sh.
 */
#include <tickbus/hist.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define RUNS 5
#define TABLE 4096 /* power of two; 32 KiB of values stays in L1/L2 */

static int64_t table[TABLE];

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double run_floor(uint64_t n)
{
	uint64_t t0 = now_ns();

	for (uint64_t i = 0; i < n; i++) {
		int64_t v = table[i & (TABLE - 1)];

		__asm__ __volatile__("" : : "r"(v));
	}
	return (double)(now_ns() - t0) / (double)n;
}

static double run_record(tb_hist_t *h, uint64_t n)
{
	uint64_t t0 = now_ns();

	for (uint64_t i = 0; i < n; i++)
		tb_hist_record(h, table[i & (TABLE - 1)]);
	return (double)(now_ns() - t0) / (double)n;
}

static double run_recorder(tb_hist_recorder_t *r, uint64_t n)
{
	uint64_t t0 = now_ns();

	for (uint64_t i = 0; i < n; i++)
		tb_hist_recorder_record(r, table[i & (TABLE - 1)]);
	return (double)(now_ns() - t0) / (double)n;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v)
{
	qsort(v, RUNS, sizeof(*v), cmp_double);
	return v[RUNS / 2];
}

int main(int argc, char **argv)
{
	uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 100000000ull;
	double floor_ns[RUNS], rec_ns[RUNS], recorder_ns[RUNS], f, a, b;
	uint64_t x = 88172645463325252ull;
	tb_hist_recorder_t *rec;
	tb_hist_t *h, *sample;

	if (n == 0) {
		fprintf(stderr, "usage: bench_hist [records per run]\n");
		return 2;
	}
	/* 1 ns .. 1 hour, 3 digits: the layout tb-latency uses. */
	if (tb_hist_init(&h, 1, 3600000000000ll, 3) ||
	    tb_hist_init(&sample, 1, 3600000000000ll, 3) ||
	    tb_hist_recorder_init(&rec, 1, 3600000000000ll, 3)) {
		fprintf(stderr, "bench hist: cannot allocate histograms\n");
		return 1;
	}
	for (int i = 0; i < TABLE; i++) { /* xorshift: 100 ns .. ~100 us */
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		table[i] = 100 + (int64_t)(x % (1u << (7 + x % 10)));
	}
	for (int r = 0; r < RUNS; r++) {
		floor_ns[r] = run_floor(n);
		rec_ns[r] = run_record(h, n);
		recorder_ns[r] = run_recorder(rec, n);
	}
	if (tb_hist_count(h) != (int64_t)(n * RUNS) ||
	    tb_hist_recorder_sample(rec, sample) ||
	    tb_hist_count(sample) != (int64_t)(n * RUNS)) {
		fprintf(stderr, "bench hist: counts do not add up\n");
		return 1;
	}
	f = median(floor_ns);
	a = median(rec_ns);
	b = median(recorder_ns);
	printf("bench hist: %" PRIu64 " records per run, median of %d runs\n",
	       n, RUNS);
	printf("bench hist floor                   %6.2f ns/iteration\n", f);
	printf("bench hist tb_hist_record          %6.2f ns/record (%.2f over "
	       "the floor, %.1fx)\n", a, a - f, a / f);
	printf("bench hist tb_hist_recorder_record %6.2f ns/record (%.2f over "
	       "the floor, %.1fx)\n", b, b - f, b / f);
	tb_hist_recorder_free(rec);
	tb_hist_free(sample);
	tb_hist_free(h);
	return 0;
}
