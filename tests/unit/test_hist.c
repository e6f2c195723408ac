/*
 * test_hist.c - unit tests of the histogram module: bus/hist.c (layout,
 * recording, queries, iteration, merge), hist_text.c (.hgrm, CSV),
 * hist_encoding.c (V2 encoding, base64), hist_log.c (interval log) and
 * hist_recorder.c (the interval recorder), all through <tickbus/hist.h>.
 *
 * Expected values are computed here independently of the module wherever
 * that is possible: exact percentiles from a sorted array, exact mean and
 * standard deviation, the documented precision bound of each bucket, the
 * .hgrm layout column by column, the V2 encoding byte by byte.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "bus/error.h"
#include <tickbus/hist.h>

#define HOUR_US 3600000000LL /* one hour in microseconds */

/* ------------------------------------------------------------ helpers */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void)
{
	uint64_t x = rng_state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rng_state = x;
}

/* A latency-like value: mostly small, a long tail up to ~1e9. */
static int64_t rng_latency(void)
{
	int shift = (int)(rng_next() % 30);

	return (int64_t)(rng_next() % ((uint64_t)1 << shift)) + 1;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

static int64_t pow10i(int d)
{
	int64_t p = 1;

	while (d-- > 0)
		p *= 10;
	return p;
}

static tb_hist_t *new_hist(int64_t lo, int64_t hi, int d)
{
	tb_hist_t *h = NULL;

	assert_int_equal(tb_hist_init(&h, lo, hi, d), TB_OK);
	assert_non_null(h);
	return h;
}

/* Reads the whole of `f` (rewound) into a NUL-terminated string. */
static char *slurp(FILE *f)
{
	long n;
	char *s;

	assert_int_equal(fflush(f), 0);
	n = ftell(f);
	assert_true(n >= 0);
	rewind(f);
	s = malloc((size_t)n + 1);
	assert_non_null(s);
	assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
	s[n] = '\0';
	return s;
}

/* Our own base64 encoder for crafting log lines (independent of
 * hist_encoding.c). */
static char *b64(const uint8_t *p, size_t n)
{
	static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char *s = malloc(4 * ((n + 2) / 3) + 1), *o = s;

	assert_non_null(s);
	for (size_t i = 0; i < n; i += 3) {
		uint32_t w = (uint32_t)p[i] << 16;
		size_t left = n - i;

		if (left > 1)
			w |= (uint32_t)p[i + 1] << 8;
		if (left > 2)
			w |= p[i + 2];
		*o++ = a[w >> 18 & 63];
		*o++ = a[w >> 12 & 63];
		*o++ = left > 1 ? a[w >> 6 & 63] : '=';
		*o++ = left > 2 ? a[w & 63] : '=';
	}
	*o = '\0';
	return s;
}

static void be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static void be64(uint8_t *p, uint64_t v)
{
	be32(p, (uint32_t)(v >> 32));
	be32(p + 4, (uint32_t)v);
}

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

/* A V2 header (40 bytes) as HdrHistogram lays it out. */
static void v2_header(uint8_t *p, uint32_t cookie, uint32_t payload_len,
		      uint32_t offset, uint32_t digits, int64_t lo, int64_t hi,
		      double ratio)
{
	uint64_t bits;

	memcpy(&bits, &ratio, sizeof(bits));
	be32(p, cookie);
	be32(p + 4, payload_len);
	be32(p + 8, offset);
	be32(p + 12, digits);
	be64(p + 16, (uint64_t)lo);
	be64(p + 24, (uint64_t)hi);
	be64(p + 32, bits);
}

/* Wraps raw V2 bytes in the compressed envelope; returns malloc'd bytes. */
static uint8_t *envelope(const uint8_t *raw, size_t raw_len, uint32_t cookie,
			 size_t *len)
{
	uLongf zlen = compressBound((uLong)raw_len);
	uint8_t *out = malloc(8 + zlen);

	assert_non_null(out);
	assert_int_equal(compress(out + 8, &zlen, raw, (uLong)raw_len), Z_OK);
	be32(out, cookie);
	be32(out + 4, (uint32_t)zlen);
	*len = 8 + zlen;
	return out;
}

/* Decodes crafted bytes, expecting TB_EFORMAT with `needle` in the message. */
static void expect_corrupt(const uint8_t *buf, size_t len, const char *needle)
{
	tb_hist_t *h = (tb_hist_t *)1;

	assert_int_equal(tb_hist_decode(buf, len, &h), TB_EFORMAT);
	assert_null(h);
	if (!strstr(tb_errmsg(), needle))
		fail_msg("message '%s' lacks '%s'", tb_errmsg(), needle);
}

/* ----------------------------------------------------------- set-up */

static void test_init_rejects_bad_arguments(void **state)
{
	tb_hist_t *h = (tb_hist_t *)1;

	(void)state;
	assert_int_equal(tb_hist_init(&h, 1, 1000, 0), TB_EINVAL);
	assert_null(h);
	assert_int_equal(tb_hist_init(&h, 1, 1000, 6), TB_EINVAL);
	assert_int_equal(tb_hist_init(&h, 0, 1000, 3), TB_EINVAL);
	assert_int_equal(tb_hist_init(&h, -5, 1000, 3), TB_EINVAL);
	assert_int_equal(tb_hist_init(&h, 100, 199, 3), TB_EINVAL);
	assert_non_null(strstr(tb_errmsg(), "highest_trackable"));
	/* 5 digits above 2^50 cannot fit 63 bits. */
	assert_int_equal(tb_hist_init(&h, (int64_t)1 << 50, INT64_MAX, 5),
			 TB_EINVAL);
	assert_int_equal(tb_hist_init(NULL, 1, 1000, 3), TB_EINVAL);
}

static void test_layout_matches_hdrhistogram(void **state)
{
	tb_hist_t *h;

	(void)state;
	/* 2 * 10^3 -> 2048 sub-buckets; 2048 * 2^21 > 3.6e9 -> 22 buckets. */
	h = new_hist(1, HOUR_US, 3);
	assert_int_equal(tb_hist_sub_bucket_count(h), 2048);
	assert_int_equal(tb_hist_bucket_count(h), 22);
	assert_int_equal(tb_hist_lowest_discernible(h), 1);
	assert_int_equal(tb_hist_highest_trackable(h), HOUR_US);
	assert_int_equal(tb_hist_significant_digits(h), 3);
	tb_hist_free(h);
	/* An hour in ns: 2048 * 2^31 > 3.6e12 -> 32 buckets. */
	h = new_hist(1, HOUR_US * 1000, 3);
	assert_int_equal(tb_hist_bucket_count(h), 32);
	tb_hist_free(h);
	/* 2 * 10^1 -> 32, 2 * 10^5 -> 262144 sub-buckets. */
	h = new_hist(1, 1000, 1);
	assert_int_equal(tb_hist_sub_bucket_count(h), 32);
	tb_hist_free(h);
	h = new_hist(1, 1000000, 5);
	assert_int_equal(tb_hist_sub_bucket_count(h), 262144);
	tb_hist_free(h);
	tb_hist_free(NULL);
}

/* ---------------------------------------------------- bucket arithmetic */

/* For each digits setting: every value lies in its bucket, buckets tile the
 * line without gaps, and no bucket above the unit resolution is wider than
 * 10^-digits of its lowest value. */
static void check_equivalence(int64_t lowest, int64_t highest, int d)
{
	tb_hist_t *h = new_hist(lowest, highest, d);
	int64_t unit = (int64_t)1 << (63 - __builtin_clzll((uint64_t)lowest));
	int64_t scale = pow10i(d);

	for (int i = 0; i < 20000; i++) {
		int64_t v, lo, hi, range, next;

		if (i < 4000) { /* dense near the bottom */
			v = i * unit / 3;
		} else {
			int shift = 1 + (int)(rng_next() % 62);

			v = (int64_t)(rng_next() & (((uint64_t)1 << shift) - 1));
			if (v > highest)
				v = highest - (int64_t)(rng_next() % 1000);
		}
		lo = tb_hist_lowest_equivalent(h, v);
		hi = tb_hist_highest_equivalent(h, v);
		range = tb_hist_equivalent_range(h, v);
		assert_true(lo <= v && v <= hi);
		assert_int_equal(hi - lo + 1, range);
		assert_int_equal(tb_hist_median_equivalent(h, v), lo + range / 2);
		assert_true(range >= unit);
		assert_true((range & (range - 1)) == 0);
		if (range > unit && lo / scale < range) /* precision promise */
			fail_msg("d=%d v=%" PRId64 ": width %" PRId64
				 " > %" PRId64 " * 10^-%d", d, v, range, lo, d);
		assert_true(tb_hist_values_equivalent(h, v, lo));
		assert_true(tb_hist_values_equivalent(h, v, hi));
		if (hi < highest) {
			next = hi + 1;
			assert_int_equal(tb_hist_lowest_equivalent(h, next), next);
			assert_false(tb_hist_values_equivalent(h, v, next));
		}
		if (lo > 0)
			assert_int_equal(tb_hist_highest_equivalent(h, lo - 1),
					 lo - 1);
	}
	/* Each value round-trips through the counts as its bucket (few rounds
	 * at 4-5 digits, where each reset clears tens of MB). */
	for (int i = 0; i < (d >= 4 ? 10 : 200); i++) {
		int64_t v = (int64_t)(rng_next() % (uint64_t)highest);

		tb_hist_reset(h);
		tb_hist_record(h, v);
		assert_int_equal(tb_hist_count_at(h, v), 1);
		assert_int_equal(tb_hist_min(h), tb_hist_lowest_equivalent(h, v));
		assert_int_equal(tb_hist_max(h), tb_hist_highest_equivalent(h, v));
	}
	tb_hist_free(h);
}

static void test_equivalence_bounds_each_digits(void **state)
{
	(void)state;
	for (int d = 1; d <= 5; d++) {
		check_equivalence(1, INT64_MAX / 4, d);
		check_equivalence(1000, 1000000000000LL, d);
		check_equivalence(1, HOUR_US, d);
	}
}

/* Small range walked value by value: widths only grow, by doubling. */
static void test_buckets_walked_exhaustively(void **state)
{
	tb_hist_t *h = new_hist(1, 1 << 20, 2);
	int64_t v = 0, prev_width = 0, buckets = 0;

	(void)state;
	while (v <= (1 << 20)) {
		int64_t w = tb_hist_equivalent_range(h, v);

		assert_int_equal(tb_hist_lowest_equivalent(h, v), v);
		for (int64_t u = v; u < v + w; u++)
			assert_int_equal(tb_hist_lowest_equivalent(h, u), v);
		assert_true(w == prev_width || w == 2 * prev_width ||
			    prev_width == 0);
		prev_width = w;
		v += w;
		buckets++;
	}
	/* 256 sub-buckets: 256 of width 1, then 128 per doubling to 2^20. */
	assert_int_equal(buckets, 256 + 128 * 12 + 1);
	tb_hist_free(h);
}

/* ------------------------------------------------------------ statistics */

/* Percentile p given as p_e4 = p * 10^4, exactly: rank = ceil(p * n / 100). */
static int64_t exact_rank(int64_t p_e4, int64_t n)
{
	int64_t r = (p_e4 * n + 1000000 - 1) / 1000000;

	return r < 1 ? 1 : r;
}

static const int64_t percentiles_e4[] = {
	0, 1, 10, 100, 1000, 5000, 100000, 250000, 333300, 500000, 666600,
	750000, 900000, 950000, 990000, 999000, 999900, 999990, 1000000,
};

static void check_percentiles(tb_hist_t *h, int64_t *vals, int64_t n)
{
	qsort(vals, (size_t)n, sizeof(*vals), cmp_i64);
	for (size_t i = 0; i < sizeof(percentiles_e4) / sizeof(int64_t); i++) {
		int64_t pe4 = percentiles_e4[i];
		int64_t exact = vals[exact_rank(pe4, n) - 1];
		int64_t got = tb_hist_value_at_percentile(h, (double)pe4 / 1e4);

		if (pe4 == 0)
			assert_int_equal(got, tb_hist_lowest_equivalent(h, exact));
		else
			assert_int_equal(got, tb_hist_highest_equivalent(h, exact));
		/* and so within the stated precision */
		assert_true(got - exact <= exact / 1000 + 1 || pe4 == 0);
	}
	assert_int_equal(tb_hist_value_at_percentile(h, 100), tb_hist_max(h));
	assert_int_equal(tb_hist_value_at_percentile(h, 0), tb_hist_min(h));
	assert_int_equal(tb_hist_value_at_percentile(h, 250), tb_hist_max(h));
	assert_int_equal(tb_hist_value_at_percentile(h, -3), tb_hist_min(h));
	assert_int_equal(tb_hist_value_at_percentile(h, NAN), tb_hist_min(h));
	assert_int_equal(tb_hist_min(h), tb_hist_lowest_equivalent(h, vals[0]));
	assert_int_equal(tb_hist_max(h),
			 tb_hist_highest_equivalent(h, vals[n - 1]));
}

static void test_percentiles_1_to_10000(void **state)
{
	tb_hist_t *h = new_hist(1, HOUR_US, 3);
	int64_t vals[10000];

	(void)state;
	for (int64_t i = 0; i < 10000; i++) {
		vals[i] = 10000 - i;
		tb_hist_record(h, vals[i]);
	}
	assert_int_equal(tb_hist_count(h), 10000);
	check_percentiles(h, vals, 10000);
	/* Spot values: below 2048 exact; above, 1 unit of 2048..4095 wide 2. */
	assert_int_equal(tb_hist_value_at_percentile(h, 10), 1000);
	assert_int_equal(tb_hist_value_at_percentile(h, 50), 5003);
	assert_int_equal(tb_hist_value_at_percentile(h, 99.9), 9991);
	assert_int_equal(tb_hist_value_at_percentile(h, 99.99), 9999);
	assert_int_equal(tb_hist_value_at_percentile(h, 100), 10007);
	tb_hist_free(h);
}

static void test_percentiles_random(void **state)
{
	enum { N = 200000 };
	tb_hist_t *h = new_hist(1, INT64_MAX / 2, 3);
	int64_t *vals = malloc(N * sizeof(int64_t));

	(void)state;
	assert_non_null(vals);
	for (int i = 0; i < N; i++) {
		vals[i] = rng_latency();
		if (i % 7 == 0) /* duplicates */
			vals[i] = 777;
		tb_hist_record(h, vals[i]);
	}
	check_percentiles(h, vals, N);
	free(vals);
	tb_hist_free(h);
}

static void test_mean_stddev(void **state)
{
	tb_hist_t *h = new_hist(1, HOUR_US, 3);
	double n = 10000, true_mean = (n + 1) / 2;
	double true_sd = sqrt((n * n - 1) / 12); /* population, 1..n */
	double m = 0, s = 0;

	(void)state;
	assert_true(tb_hist_mean(h) == 0 && tb_hist_stddev(h) == 0);
	for (int i = 1; i <= 10000; i++)
		tb_hist_record(h, i);
	assert_true(fabs(tb_hist_mean(h) - true_mean) <= true_mean * 1e-3);
	assert_true(fabs(tb_hist_stddev(h) - true_sd) <= true_sd * 1e-3);
	/* Exactly: each sample at the middle of its bucket. */
	for (int i = 1; i <= 10000; i++)
		m += (double)tb_hist_median_equivalent(h, i);
	m /= n;
	for (int i = 1; i <= 10000; i++) {
		double d = (double)tb_hist_median_equivalent(h, i) - m;

		s += d * d;
	}
	s = sqrt(s / n);
	assert_true(fabs(tb_hist_mean(h) - m) <= m * 1e-12);
	assert_true(fabs(tb_hist_stddev(h) - s) <= s * 1e-12);
	tb_hist_free(h);

	/* Skewed data, 5 digits: close to the exact moments. */
	h = new_hist(1, INT64_MAX / 2, 5);
	m = s = 0;
	rng_state = 12345;
	for (int i = 0; i < 50000; i++) {
		int64_t v = rng_latency();

		m += (double)v;
		s += (double)v * (double)v;
		tb_hist_record(h, v);
	}
	m /= 50000;
	s = sqrt(s / 50000 - m * m);
	assert_true(fabs(tb_hist_mean(h) - m) <= m * 1e-5);
	assert_true(fabs(tb_hist_stddev(h) - s) <= s * 1e-4);
	tb_hist_free(h);
}

/* ------------------------------------------------------- out of range */

static void test_overflow_underflow(void **state)
{
	tb_hist_t *h = new_hist(1, 1000, 2);

	(void)state;
	tb_hist_record(h, 5000);
	assert_int_equal(tb_hist_count(h), 1);
	assert_int_equal(tb_hist_overflow(h), 1);
	assert_int_equal(tb_hist_count_at(h, 1000), 1);
	assert_int_equal(tb_hist_max(h), tb_hist_highest_equivalent(h, 1000));
	tb_hist_record_n(h, INT64_MAX, 3);
	assert_int_equal(tb_hist_overflow(h), 4);
	assert_int_equal(tb_hist_count_at(h, 1000), 4);
	tb_hist_record(h, 1000); /* at the limit: not overflow */
	assert_int_equal(tb_hist_overflow(h), 4);

	tb_hist_record(h, -5);
	tb_hist_record(h, INT64_MIN);
	assert_int_equal(tb_hist_underflow(h), 2);
	assert_int_equal(tb_hist_count_at(h, 0), 2);
	assert_int_equal(tb_hist_min(h), 0);
	assert_int_equal(tb_hist_count(h), 7);
	tb_hist_free(h);

	/* Below lowest is not underflow: it lands in the first bucket. */
	h = new_hist(1000, 1000000, 3);
	tb_hist_record(h, 10);
	assert_int_equal(tb_hist_underflow(h), 0);
	assert_int_equal(tb_hist_lowest_equivalent(h, 10), 0);
	assert_int_equal(tb_hist_equivalent_range(h, 10), 512);
	assert_int_equal(tb_hist_count_at(h, 0), 1);
	assert_int_equal(tb_hist_min(h), 0);
	tb_hist_free(h);

	/* The extreme top of the int64 range, at every precision. */
	for (int d = 1; d <= 5; d++) {
		h = new_hist(1, INT64_MAX, d);
		tb_hist_record(h, INT64_MAX);
		tb_hist_record(h, INT64_MAX - 1);
		tb_hist_record(h, (int64_t)1 << 62);
		assert_int_equal(tb_hist_overflow(h), 0);
		assert_int_equal(tb_hist_max(h), INT64_MAX);
		assert_int_equal(tb_hist_value_at_percentile(h, 100), INT64_MAX);
		assert_int_equal(tb_hist_count_at(h, INT64_MAX), 2);
		tb_hist_free(h);
	}
}

/* --------------------------------------------- merge, copy, reset, CO */

static void test_merge_same_layout(void **state)
{
	tb_hist_t *a = new_hist(1, HOUR_US, 3), *b = new_hist(1, HOUR_US, 3);
	tb_hist_t *all = new_hist(1, HOUR_US, 3);

	(void)state;
	for (int i = 0; i < 20000; i++) {
		int64_t v = rng_latency() % HOUR_US;

		tb_hist_record(i % 2 ? a : b, v);
		tb_hist_record(all, v);
	}
	tb_hist_record(a, HOUR_US * 2);
	tb_hist_record(all, HOUR_US * 2);
	tb_hist_record(b, -1);
	tb_hist_record(all, -1);
	assert_int_equal(tb_hist_merge(a, b), TB_OK);
	assert_true(tb_hist_equal(a, all));
	assert_int_equal(tb_hist_overflow(a), 1);
	assert_int_equal(tb_hist_underflow(a), 1);
	assert_int_equal(tb_hist_merge(NULL, b), TB_EINVAL);
	assert_int_equal(tb_hist_merge(a, NULL), TB_EINVAL);
	tb_hist_free(a);
	tb_hist_free(b);
	tb_hist_free(all);
}

static void test_merge_other_layout(void **state)
{
	tb_hist_t *src = new_hist(1, 10000000, 3), *dst = new_hist(10, 1000000, 2);
	int64_t n = 0;

	(void)state;
	for (int64_t v = 1; v <= 10000000; v = v * 3 / 2 + 1) {
		tb_hist_record_n(src, v, 2);
		n += 2;
	}
	tb_hist_record(src, 20000000); /* src overflow: stays overflow */
	n++;
	assert_int_equal(tb_hist_merge(dst, src), TB_OK);
	assert_int_equal(tb_hist_count(dst), n);
	/* Every src value above dst's highest (1e6) is now dst overflow. */
	{
		int64_t beyond = 0;
		tb_hist_iter_t it;

		tb_hist_iter_init(&it, src);
		while (tb_hist_iter_next(&it))
			if (it.value_lo > 1000000)
				beyond += it.count;
		assert_int_equal(tb_hist_overflow(dst), beyond);
	}
	/* Below dst's highest, each count lands where its value does. */
	for (int64_t v = 1; v <= 1000000; v = v * 3 / 2 + 1)
		assert_true(tb_hist_count_at(dst, v) >= 2);
	assert_int_equal(tb_hist_max(dst), tb_hist_highest_equivalent(dst, 1000000));
	tb_hist_free(src);
	tb_hist_free(dst);
}

static void test_copy_reset(void **state)
{
	tb_hist_t *h = new_hist(1, HOUR_US, 3), *c = NULL, *empty;

	(void)state;
	for (int i = 0; i < 1000; i++)
		tb_hist_record(h, rng_latency());
	tb_hist_record(h, -1);
	assert_int_equal(tb_hist_copy(&c, h), TB_OK);
	assert_true(tb_hist_equal(c, h));
	assert_int_equal(tb_hist_underflow(c), 1);
	assert_int_equal(tb_hist_overflow(c), tb_hist_overflow(h));
	tb_hist_reset(h);
	empty = new_hist(1, HOUR_US, 3);
	assert_true(tb_hist_equal(h, empty));
	assert_false(tb_hist_equal(c, empty));
	assert_int_equal(tb_hist_count(h), 0);
	assert_int_equal(tb_hist_underflow(h), 0);
	assert_int_equal(tb_hist_max(h), 0);
	assert_int_equal(tb_hist_value_at_percentile(h, 99), 0);
	assert_int_equal(tb_hist_copy(NULL, h), TB_EINVAL);
	tb_hist_free(h);
	tb_hist_free(c);
	tb_hist_free(empty);
}

static void record_corrected_naive(tb_hist_t *h, int64_t v, int64_t interval)
{
	tb_hist_record(h, v);
	if (interval <= 0)
		return;
	for (int64_t m = v - interval; m >= interval; m -= interval)
		tb_hist_record(h, m);
}

static void test_corrected(void **state)
{
	tb_hist_t *h = new_hist(1, HOUR_US, 3), *ref = new_hist(1, HOUR_US, 3);

	(void)state;
	/* The textbook case: a 10 ms stall at 1 ms intervals. */
	tb_hist_record_corrected(h, 10000, 1000);
	assert_int_equal(tb_hist_count(h), 10);
	for (int64_t v = 1000; v <= 10000; v += 1000)
		assert_int_equal(tb_hist_count_at(h, v), 1);
	assert_int_equal(tb_hist_count_at(h, 500), 0);
	/* No correction at or below the interval, nor with interval <= 0. */
	tb_hist_reset(h);
	tb_hist_record_corrected(h, 1000, 1000);
	tb_hist_record_corrected(h, 1999, 1000);
	tb_hist_record_corrected(h, 50000, 0);
	tb_hist_record_corrected(h, 50000, -7);
	tb_hist_record_corrected(h, INT64_MIN, 5); /* no overflow, one sample */
	assert_int_equal(tb_hist_count(h), 5);

	/* Against the naive loop, for random pairs. */
	tb_hist_reset(h);
	for (int i = 0; i < 2000; i++) {
		int64_t interval = (int64_t)(rng_next() % 5000) + 1;
		int64_t v = (int64_t)(rng_next() % (uint64_t)(interval * 300));

		tb_hist_record_corrected(h, v, interval);
		record_corrected_naive(ref, v, interval);
	}
	assert_true(tb_hist_equal(h, ref));

	/* A huge stall is not a huge loop; its count is v / interval. */
	tb_hist_reset(h);
	tb_hist_record_corrected(h, 3000000000LL, 7);
	assert_int_equal(tb_hist_count(h), 3000000000LL / 7);
	tb_hist_free(h);
	tb_hist_free(ref);

	/* Missing samples above highest clamp and count as overflow:
	 * 5e6 and 4.9e6 .. 1.1e6 (39 samples) exceed 1e6. */
	h = new_hist(1, 1000000, 3);
	ref = new_hist(1, 1000000, 3);
	tb_hist_record_corrected(h, 5000000, 100000);
	record_corrected_naive(ref, 5000000, 100000);
	assert_int_equal(tb_hist_count(h), 50);
	assert_int_equal(tb_hist_overflow(h), 40);
	assert_true(tb_hist_equal(h, ref));
	tb_hist_free(h);
	tb_hist_free(ref);
}

static void test_iteration(void **state)
{
	tb_hist_t *h = new_hist(1, HOUR_US, 3);
	tb_hist_iter_t it;
	int64_t vals[] = { 5, 5, 9, 3000, 3001, 1000000 }, prev_hi = -1;
	int64_t expect_counts[] = { 2, 1, 2, 1 }; /* 3000, 3001 share a bucket */
	int n = 0;

	(void)state;
	tb_hist_iter_init(&it, h);
	assert_false(tb_hist_iter_next(&it));
	for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++)
		tb_hist_record(h, vals[i]);
	tb_hist_iter_init(&it, h);
	while (tb_hist_iter_next(&it)) {
		assert_true(it.value_lo > prev_hi);
		assert_int_equal(it.value_lo, tb_hist_lowest_equivalent(h, it.value_hi));
		assert_int_equal(it.value_hi, tb_hist_highest_equivalent(h, it.value_lo));
		assert_int_equal(it.count, expect_counts[n]);
		prev_hi = it.value_hi;
		n++;
	}
	assert_int_equal(n, 4);
	assert_int_equal(it.cumulative, 6);
	assert_int_equal(it.value_hi, tb_hist_max(h));
	assert_false(tb_hist_iter_next(&it));
	tb_hist_free(h);
}

/* ------------------------------------------------------------- outputs */

/* 1, 2, 3, 4 by hand from the format: levels 0..50 step 10, 50..75 step 5,
 * then 77.5 reaches the last value, then the 100% line. */
static const char golden_hgrm[] =
	"       Value     Percentile TotalCount 1/(1-Percentile)\n"
	"\n"
	"       1.000 0.000000000000          1           1.00\n"
	"       1.000 0.100000000000          1           1.11\n"
	"       1.000 0.200000000000          1           1.25\n"
	"       2.000 0.300000000000          2           1.43\n"
	"       2.000 0.400000000000          2           1.67\n"
	"       2.000 0.500000000000          2           2.00\n"
	"       3.000 0.550000000000          3           2.22\n"
	"       3.000 0.600000000000          3           2.50\n"
	"       3.000 0.650000000000          3           2.86\n"
	"       3.000 0.700000000000          3           3.33\n"
	"       3.000 0.750000000000          3           4.00\n"
	"       4.000 0.775000000000          4           4.44\n"
	"       4.000 1.000000000000          4\n"
	"#[Mean    =        2.500, StdDeviation   =        1.118]\n"
	"#[Max     =        4.000, Total count    =            4]\n"
	"#[Buckets =           22, SubBuckets     =         2048]\n";

static void test_hgrm_golden(void **state)
{
	tb_hist_t *h = new_hist(1, HOUR_US, 3);
	FILE *f = tmpfile();
	char *s;

	(void)state;
	assert_non_null(f);
	for (int v = 1; v <= 4; v++)
		tb_hist_record(h, v);
	assert_int_equal(tb_hist_write_hgrm(h, f, 1.0, 5), TB_OK);
	s = slurp(f);
	assert_string_equal(s, golden_hgrm);
	free(s);
	fclose(f);

	/* Empty: header and footer only. */
	f = tmpfile();
	tb_hist_reset(h);
	assert_int_equal(tb_hist_write_hgrm(h, f, 1.0, 0), TB_OK);
	s = slurp(f);
	assert_string_equal(s,
		"       Value     Percentile TotalCount 1/(1-Percentile)\n\n"
		"#[Mean    =        0.000, StdDeviation   =        0.000]\n"
		"#[Max     =        0.000, Total count    =            0]\n"
		"#[Buckets =           22, SubBuckets     =         2048]\n");
	free(s);
	assert_int_equal(tb_hist_write_hgrm(h, f, 0.0, 5), TB_EINVAL);
	assert_int_equal(tb_hist_write_hgrm(h, f, 1.0, -1), TB_EINVAL);
	assert_int_equal(tb_hist_write_hgrm(h, NULL, 1.0, 5), TB_EINVAL);
	fclose(f);
	tb_hist_free(h);
}

/* The levels HdrHistogram prints: within the k-th halving of the distance
 * to 100% (from 100 (1 - 2^-k)), `ticks` equal steps. */
static double expected_level(int i, int ticks)
{
	int k = i / ticks, j = i % ticks;

	return 100.0 * (1.0 - ldexp(1.0, -k)) + j * 100.0 / (ticks * ldexp(1.0, k + 1));
}

typedef struct parsed_line {
	double value, pct, inverse;
	long long count;
	bool last;
} parsed_line_t;

/* Parses the .hgrm data lines of `s` into `out`; checks every column's
 * width on the way.  Returns the number of lines. */
static int parse_hgrm(const char *s, parsed_line_t *out, int max, int digits,
		      double *mean, double *sd, double *maxv, long long *total,
		      int *buckets, int *subs)
{
	const char *p = s;
	int n = 0;
	char head[128];

	assert_int_equal(sscanf(p, "%127[^\n]", head), 1);
	assert_string_equal(head, "       Value     Percentile TotalCount 1/(1-Percentile)");
	p = strchr(p, '\n') + 1;
	assert_true(*p == '\n');
	p++;
	while (*p && *p != '#') {
		const char *eol = strchr(p, '\n');
		size_t len = (size_t)(eol - p);
		parsed_line_t *l = &out[n];

		assert_true(n < max);
		assert_non_null(eol);
		/* %12.{digits}f, ' ', 14-char %2.12f, ' ', %10d[, ' ', %14.2f] */
		assert_true(p[12] == ' ' && p[27] == ' ');
		assert_true(p[14] == '.' && p[13] >= '0' && p[13] <= '1');
		assert_true(p[11 - digits] == '.');
		l->last = len == 38;
		assert_true(len == 53 || l->last);
		if (!l->last)
			assert_true(p[38] == ' ' && p[50] == '.');
		assert_int_equal(sscanf(p, "%lf %lf %lld %lf", &l->value, &l->pct,
					&l->count, &l->inverse), l->last ? 3 : 4);
		n++;
		p = eol + 1;
	}
	assert_int_equal(sscanf(p, "#[Mean    = %lf, StdDeviation   = %lf]\n"
				"#[Max     = %lf, Total count    = %lld]\n"
				"#[Buckets = %d, SubBuckets     = %d]",
				mean, sd, maxv, total, buckets, subs), 6);
	return n;
}

static void test_hgrm_parsed_back(void **state)
{
	enum { MAXL = 400 };
	tb_hist_t *h = new_hist(1, HOUR_US, 3);
	parsed_line_t *l = calloc(MAXL, sizeof(*l));
	double mean, sd, maxv;
	long long total;
	int buckets, subs, n;
	FILE *f = tmpfile();
	char *s;

	(void)state;
	assert_non_null(l);
	for (int v = 1; v <= 10000; v++)
		tb_hist_record(h, v);
	assert_int_equal(tb_hist_write_hgrm(h, f, 1.0, 5), TB_OK);
	s = slurp(f);
	n = parse_hgrm(s, l, MAXL, 3, &mean, &sd, &maxv, &total, &buckets, &subs);
	assert_true(n > 50);
	for (int i = 0; i < n - 1; i++) {
		double level = expected_level(i, 5);

		assert_false(l[i].last);
		assert_true(fabs(l[i].pct * 100 - level) < 1e-9);
		/* Values 1..10000 once each: count up to V is exactly V. */
		assert_true(fmin(l[i].value, 10000) == (double)l[i].count);
		/* The first bucket to reach the level... */
		assert_true(100.0 * (double)l[i].count / 10000 >= level);
		/* ...the one below it did not. */
		if (i > 0)
			assert_true(100.0 * (double)(tb_hist_lowest_equivalent(
				h, (int64_t)l[i].value) - 1) / 10000 < level);
		assert_true(fabs(l[i].inverse - 1 / (1 - level / 100)) < 0.0051);
		if (i > 0)
			assert_true(l[i].value >= l[i - 1].value);
	}
	assert_true(l[n - 1].last);
	assert_true(l[n - 1].pct == 1.0 && l[n - 1].count == 10000);
	assert_true(l[n - 1].value == (double)tb_hist_max(h));
	assert_true(l[n - 2].count == 10000);
	assert_true(fabs(mean - tb_hist_mean(h)) < 0.0005);
	assert_true(fabs(sd - tb_hist_stddev(h)) < 0.0005);
	assert_true(maxv == (double)tb_hist_max(h));
	assert_int_equal(total, 10000);
	assert_int_equal(buckets, 22);
	assert_int_equal(subs, 2048);
	/* Java rounds ties away from zero: level 99.97802734375% is exactly
	 * 0.9997802734375, which printf would round to ...437. */
	assert_non_null(strstr(s, " 0.999780273438 "));
	assert_null(strstr(s, " 0.999780273437 "));
	free(s);
	fclose(f);

	/* Scaled by 1000 (ns -> us): the same lines, values / 1000. */
	{
		parsed_line_t *m = calloc(MAXL, sizeof(*m));
		int n2;

		f = tmpfile();
		assert_int_equal(tb_hist_write_hgrm(h, f, 1000.0, 5), TB_OK);
		s = slurp(f);
		n2 = parse_hgrm(s, m, MAXL, 3, &mean, &sd, &maxv, &total,
				&buckets, &subs);
		assert_int_equal(n2, n);
		for (int i = 0; i < n; i++) {
			assert_true(fabs(m[i].value * 1000 - l[i].value) < 0.51);
			assert_true(m[i].count == l[i].count);
		}
		assert_true(fabs(mean * 1000 - tb_hist_mean(h)) < 0.51);
		free(m);
		free(s);
		fclose(f);
	}
	free(l);
	tb_hist_free(h);
}

static void test_csv(void **state)
{
	tb_hist_t *h = new_hist(1, HOUR_US, 3);
	FILE *f = tmpfile();
	char *s, *line, *save = NULL;
	int rows = 0, ticks = 3;

	(void)state;
	for (int v = 1; v <= 4; v++)
		tb_hist_record(h, v);
	assert_int_equal(tb_hist_write_csv(h, f, 1.0, 0), TB_OK);
	s = slurp(f);
	/* The same distribution as the golden .hgrm, comma-separated. */
	assert_non_null(strstr(s, "value,percentile,total_count,inverse\n"
				  "1.000,0.000000000000,1,1.00\n"
				  "1.000,0.100000000000,1,1.11\n"));
	assert_non_null(strstr(s, "4.000,0.775000000000,4,4.44\n"
				  "4.000,1.000000000000,4,Infinity\n"));
	free(s);
	fclose(f);

	/* 1..10000 with 3 ticks: every row parses, levels as expected. */
	f = tmpfile();
	tb_hist_reset(h);
	for (int v = 1; v <= 10000; v++)
		tb_hist_record(h, v);
	assert_int_equal(tb_hist_write_csv(h, f, 1.0, ticks), TB_OK);
	s = slurp(f);
	line = strtok_r(s, "\n", &save);
	assert_string_equal(line, "value,percentile,total_count,inverse");
	while ((line = strtok_r(NULL, "\n", &save))) {
		double v, p, inv;
		long long c;
		char tail[16];

		if (!strstr(line, "Infinity")) {
			assert_int_equal(sscanf(line, "%lf,%lf,%lld,%lf", &v, &p,
						&c, &inv), 4);
			assert_true(fabs(p * 100 - expected_level(rows, ticks)) < 1e-9);
			assert_true(fmin(v, 10000) == (double)c);
		} else {
			assert_int_equal(sscanf(line, "%lf,%lf,%lld,%15s", &v, &p,
						&c, tail), 4);
			assert_string_equal(tail, "Infinity");
			assert_true(p == 1.0 && c == 10000);
			assert_null(strtok_r(NULL, "\n", &save));
			break;
		}
		rows++;
	}
	assert_true(rows > 20);
	assert_int_equal(tb_hist_write_csv(h, f, -1.0, 5), TB_EINVAL);
	free(s);
	fclose(f);
	tb_hist_free(h);
}

/* ------------------------------------------------------------ encoding */

/* Inflates the inside of an encoded histogram (with zlib, not hist.c). */
static uint8_t *inner_of(const uint8_t *buf, size_t len, uLongf *raw_len)
{
	uLongf cap = 1 << 20;
	uint8_t *raw = malloc(cap);

	assert_non_null(raw);
	assert_true(len > 8);
	assert_int_equal(rd32(buf + 4), len - 8);
	*raw_len = cap;
	assert_int_equal(uncompress(raw, raw_len, buf + 8, (uLong)(len - 8)), Z_OK);
	return raw;
}

static void test_encoding_bytes(void **state)
{
	tb_hist_t *h = new_hist(1, HOUR_US, 3);
	uint8_t *buf, *raw;
	size_t len;
	uLongf raw_len;
	static const uint8_t header[] = {
		0x1c, 0x84, 0x93, 0x13, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 3,
		0, 0, 0, 0, 0, 0, 0, 1,             /* lowest 1 */
		0, 0, 0, 0, 0xd6, 0x93, 0xa4, 0,    /* highest 3.6e9 */
		0x3f, 0xf0, 0, 0, 0, 0, 0, 0,       /* 1.0 */
	};

	(void)state;
	/* counts[1] = 1, [2..4] = 0, [5] = 1, [6] = 300 */
	tb_hist_record(h, 1);
	tb_hist_record(h, 5);
	tb_hist_record_n(h, 6, 300);
	assert_int_equal(tb_hist_encode(h, &buf, &len), TB_OK);
	assert_int_equal(rd32(buf), 0x1c849314);
	raw = inner_of(buf, len, &raw_len);
	assert_int_equal(raw_len, 40 + 6);
	assert_memory_equal(raw, header, 40);
	/* zigzag: 0 -> 0 (a single zero is not a run), 1 -> 2, run of 3 zeros
	 * -3 -> 5, 300 -> 600 = LEB128 0xd8 0x04 */
	{
		static const uint8_t payload[] = { 0x00, 0x02, 0x05, 0x02, 0xd8, 0x04 };

		assert_memory_equal(raw + 40, payload, sizeof(payload));
	}
	free(raw);
	free(buf);

	/* Empty histogram: header only. */
	tb_hist_reset(h);
	assert_int_equal(tb_hist_encode(h, &buf, &len), TB_OK);
	raw = inner_of(buf, len, &raw_len);
	assert_int_equal(raw_len, 40);
	assert_int_equal(rd32(raw + 4), 0);
	free(raw);
	free(buf);
	assert_int_equal(tb_hist_encode(NULL, &buf, &len), TB_EINVAL);
	tb_hist_free(h);
}

static void roundtrip(tb_hist_t *h)
{
	uint8_t *buf;
	size_t len;
	tb_hist_t *back = NULL;

	assert_int_equal(tb_hist_encode(h, &buf, &len), TB_OK);
	assert_int_equal(tb_hist_decode(buf, len, &back), TB_OK);
	assert_true(tb_hist_equal(h, back));
	assert_int_equal(tb_hist_count(back), tb_hist_count(h));
	assert_int_equal(tb_hist_max(back), tb_hist_max(h));
	free(buf);
	tb_hist_free(back);
}

static void test_encode_decode_roundtrip(void **state)
{
	(void)state;
	for (int d = 1; d <= 5; d++) {
		tb_hist_t *h = new_hist(d * 7, INT64_MAX / (d * 3), d);

		roundtrip(h); /* empty */
		tb_hist_record(h, 0);
		roundtrip(h);
		for (int i = 0; i < 5000; i++)
			tb_hist_record_n(h, rng_latency() << (i % 20),
					 (int64_t)(rng_next() % 1000) + 1);
		tb_hist_record_n(h, 12345, (int64_t)1 << 61); /* 9-byte varint */
		roundtrip(h);
		tb_hist_free(h);
	}
}

static void test_decode_corrupt(void **state)
{
	tb_hist_t *h = new_hist(1, 1000000, 3), *out;
	uint8_t *good, *bad, raw[40 + 64];
	size_t len, blen;
	int counts_len;

	(void)state;
	tb_hist_record(h, 7);
	tb_hist_record(h, 900000);
	assert_int_equal(tb_hist_encode(h, &good, &len), TB_OK);
	bad = malloc(len + 16);
	assert_non_null(bad);

	expect_corrupt(good, 5, "too short");
	memcpy(bad, good, len);
	bad[0] ^= 0x40;
	expect_corrupt(bad, len, "bad cookie");
	memcpy(bad, good, len);
	be32(bad, 0x1c849313); /* uncompressed cookie where compressed belongs */
	expect_corrupt(bad, len, "bad cookie");
	expect_corrupt(good, len - 3, "truncated");          /* cut short */
	memcpy(bad, good, len);
	bad[len] = 0;
	expect_corrupt(bad, len + 1, "after the compressed"); /* trailing byte */
	memcpy(bad, good, len);
	be32(bad + 4, (uint32_t)(len - 8 - 4));              /* zlib cut short */
	expect_corrupt(bad, len - 4, "truncated");
	memcpy(bad, good, len);
	memset(bad + 8, 0x5a, len - 8);                      /* not zlib at all */
	expect_corrupt(bad, len, "bad zlib");
	memcpy(bad, good, len);
	bad[len - 1] ^= 0xff;                                /* adler32 broken */
	expect_corrupt(bad, len, "bad zlib");
	assert_int_equal(tb_hist_decode(NULL, 5, &out), TB_EINVAL);
	assert_int_equal(tb_hist_decode(good, len, NULL), TB_EINVAL);
	free(bad);
	free(good);

	/* Crafted insides. */
	tb_hist_free(h);
	h = new_hist(1, 1000, 3);
	counts_len = (tb_hist_bucket_count(h) + 1) * tb_hist_sub_bucket_count(h) / 2;
	tb_hist_free(h);
#define CRAFT(len_, needle_)                                                   \
	do {                                                                   \
		bad = envelope(raw, (len_), 0x1c849314, &blen);                \
		expect_corrupt(bad, blen, (needle_));                          \
		free(bad);                                                     \
	} while (0)

	v2_header(raw, 0x1c849399, 0, 0, 3, 1, 1000, 1.0);
	CRAFT(40, "inner cookie");
	v2_header(raw, 0x1c849313, 0, 0, 3, 1, 1000, 1.0);
	CRAFT(20, "header is 20 bytes short");
	v2_header(raw, 0x1c849313, 0, 0, 7, 1, 1000, 1.0);
	CRAFT(40, "bad parameters");
	v2_header(raw, 0x1c849313, 0, 0, 3, 0, 1000, 1.0);
	CRAFT(40, "bad parameters");
	v2_header(raw, 0x1c849313, 0, 0, 3, 600, 1000, 1.0);
	CRAFT(40, "bad parameters");
	v2_header(raw, 0x1c849313, 0, 0, 3, 1, 1000, 0.001);
	CRAFT(40, "DoubleHistogram");
	v2_header(raw, 0x1c849313, 10, 0, 3, 1, 1000, 1.0); /* says 10, has 2 */
	raw[40] = 2;
	raw[41] = 2;
	CRAFT(42, "short of its stated length");
	v2_header(raw, 0x1c849313, 1, 0, 3, 1, 1000, 1.0);  /* says 1, has 2 */
	CRAFT(42, "past the stated payload length");
	v2_header(raw, 0x1c849313, 0x7fffffff, 0, 3, 1, 1000, 1.0);
	CRAFT(42, "more than");
	/* A zero run to the end of the counts, then one more count. */
	v2_header(raw, 0x1c849313, 3, 0, 3, 1, 1000, 1.0);
	{
		uint64_t z = ((uint64_t)counts_len << 1) - 1; /* zigzag(-len) */

		raw[40] = (uint8_t)(z | 0x80);
		raw[41] = (uint8_t)(z >> 7);
		assert_true(z >> 14 == 0);
		raw[42] = 2;
		CRAFT(43, "past the end");
		/* A run one longer than the counts. */
		z += 2;
		raw[40] = (uint8_t)(z | 0x80);
		raw[41] = (uint8_t)(z >> 7);
		v2_header(raw, 0x1c849313, 2, 0, 3, 1, 1000, 1.0);
		CRAFT(42, "past the end");
	}
	v2_header(raw, 0x1c849313, 2, 0, 3, 1, 1000, 1.0);
	raw[40] = 2;
	raw[41] = 0x80; /* a varint that never ends */
	CRAFT(42, "ends inside a count");
	/* Two counts of 2^62 + ... overflow the total. */
	v2_header(raw, 0x1c849313, 18, 0, 3, 1, 1000, 1.0);
	for (int k = 0; k < 2; k++) {
		uint8_t *p = raw + 40 + 9 * k;

		/* zigzag(INT64_MAX) = 2^64 - 2: 0x7e, then all ones */
		p[0] = 0xfe;
		for (int j = 1; j < 9; j++)
			p[j] = 0xff;
	}
	CRAFT(58, "overflows");
#undef CRAFT

	/* Accepted: any normalizing offset (the payload is in logical order),
	 * and hdr-histogram-js's ratio written as the integer 1. */
	v2_header(raw, 0x1c849313, 2, 1, 3, 1, 1000, 1.0);
	be64(raw + 32, 1);
	raw[40] = 0x03; /* zigzag(-2): two zeros */
	raw[41] = 0x0e; /* zigzag(7): count 7 at index 2 */
	bad = envelope(raw, 42, 0x1c849314, &blen);
	assert_int_equal(tb_hist_decode(bad, blen, &out), TB_OK);
	assert_int_equal(tb_hist_count(out), 7);
	assert_int_equal(tb_hist_count_at(out, 2), 7);
	tb_hist_free(out);
	free(bad);
}

/* ---------------------------------------------------------- interval log */

static void test_log_roundtrip(void **state)
{
	tb_hist_log_writer_t *w;
	tb_hist_log_reader_t *r;
	tb_hist_log_entry_t e;
	tb_hist_t *a = new_hist(1, HOUR_US * 1000, 3), *b = new_hist(1, 1000000, 2);
	tb_hist_t *empty = new_hist(1, 1000, 1);
	FILE *f = tmpfile();
	char *s;

	(void)state;
	for (int i = 0; i < 10000; i++)
		tb_hist_record(a, rng_latency());
	tb_hist_record(b, 12345);
	assert_int_equal(tb_hist_log_writer_open(&w, f, 1700000000.123, 1e6), TB_OK);
	assert_int_equal(tb_hist_log_writer_comment(w, "[Logged with tickbus test]"), TB_OK);
	assert_int_equal(tb_hist_log_writer_write(w, NULL, 0.127, 1.0, a), TB_OK);
	assert_int_equal(tb_hist_log_writer_write(w, "quotes", 1.127, 1.0, b), TB_OK);
	assert_int_equal(tb_hist_log_writer_write(w, "", 2.127, 0.5, empty), TB_OK);
	/* Java's rounding of the time columns: 0.0625 is a tie (up, not to
	 * even), 1.0005 is 1.000499.. in binary but "1.0005" to Java. */
	assert_int_equal(tb_hist_log_writer_write(w, NULL, 0.0625, 1.0005, empty), TB_OK);
	assert_int_equal(tb_hist_log_writer_write(w, "a,b", 3, 1, b), TB_EINVAL);
	assert_int_equal(tb_hist_log_writer_write(w, "a b", 3, 1, b), TB_EINVAL);
	assert_int_equal(tb_hist_log_writer_close(w), TB_OK);

	s = slurp(f);
	{
		static const char head[] =
			"#[Histogram log format version 1.3]\n"
			"#[StartTime: 1700000000.123 (seconds since epoch), Tue Nov 14 22:13:20 UTC 2023]\n"
			"\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n"
			"#[Logged with tickbus test]\n"
			"0.127,1.000,";

		assert_memory_equal(s, head, strlen(head));
	}
	assert_non_null(strstr(s, "\nTag=quotes,1.127,1.000,0.012,HISTFAAA"));
	assert_non_null(strstr(s, "\n2.127,0.500,0.000,HISTFAAA"));
	assert_non_null(strstr(s, "\n0.063,1.001,0.000,HISTFAAA"));
	free(s);

	rewind(f);
	assert_int_equal(tb_hist_log_reader_open(&r, f), TB_OK);
	assert_true(isnan(tb_hist_log_reader_start_time(r)));
	assert_int_equal(tb_hist_log_read(r, &e), 1);
	assert_true(fabs(tb_hist_log_reader_start_time(r) - 1700000000.123) < 1e-6);
	assert_true(isnan(tb_hist_log_reader_base_time(r)));
	assert_string_equal(e.tag, "");
	assert_true(fabs(e.start_sec - 0.127) < 1e-9 && e.length_sec == 1.0);
	assert_true(fabs(e.max - (double)tb_hist_max(a) / 1e6) < 0.0005);
	assert_true(tb_hist_equal(e.hist, a));
	tb_hist_free(e.hist);
	assert_int_equal(tb_hist_log_read(r, &e), 1);
	assert_string_equal(e.tag, "quotes");
	assert_true(tb_hist_equal(e.hist, b));
	tb_hist_free(e.hist);
	assert_int_equal(tb_hist_log_read(r, &e), 1);
	assert_true(tb_hist_equal(e.hist, empty));
	assert_true(e.length_sec == 0.5);
	tb_hist_free(e.hist);
	assert_int_equal(tb_hist_log_read(r, &e), 1);
	assert_true(e.start_sec == 0.063 && e.length_sec == 1.001);
	tb_hist_free(e.hist);
	assert_int_equal(tb_hist_log_read(r, &e), 0);
	assert_null(e.hist);
	tb_hist_log_reader_close(r);
	fclose(f);
	tb_hist_free(a);
	tb_hist_free(b);
	tb_hist_free(empty);
}

/* Writes `text` to a temporary file and expects the reader to fail on the
 * first interval line with TB_EFORMAT and `needle`, then to read the good
 * line that follows. */
static void expect_bad_log(const char *text, const char *needle)
{
	tb_hist_t *h = new_hist(1, 1000, 2);
	tb_hist_log_writer_t *w;
	tb_hist_log_reader_t *r;
	tb_hist_log_entry_t e;
	FILE *f = tmpfile();

	assert_non_null(f);
	fputs(text, f);
	tb_hist_record(h, 42);
	assert_int_equal(tb_hist_log_writer_open(&w, f, 1.0, 1.0), TB_OK);
	assert_int_equal(tb_hist_log_writer_write(w, NULL, 9, 1, h), TB_OK);
	assert_int_equal(tb_hist_log_writer_close(w), TB_OK);
	rewind(f);
	assert_int_equal(tb_hist_log_reader_open(&r, f), TB_OK);
	assert_int_equal(tb_hist_log_read(r, &e), TB_EFORMAT);
	assert_null(e.hist);
	if (!strstr(tb_errmsg(), needle) || !strstr(tb_errmsg(), "hist log line "))
		fail_msg("message '%s' lacks '%s'", tb_errmsg(), needle);
	/* The bad line is behind us: the good one still reads. */
	assert_int_equal(tb_hist_log_read(r, &e), 1);
	assert_true(tb_hist_equal(e.hist, h));
	tb_hist_free(e.hist);
	assert_int_equal(tb_hist_log_read(r, &e), 0);
	tb_hist_log_reader_close(r);
	fclose(f);
	tb_hist_free(h);
}

static void test_log_corrupt(void **state)
{
	tb_hist_t *h = new_hist(1, 1000, 1);
	uint8_t *bin, raw[48];
	size_t len;
	char *line, *enc;

	(void)state;
	tb_hist_record(h, 42);
	assert_int_equal(tb_hist_encode(h, &bin, &len), TB_OK);
	enc = b64(bin, len);
	line = malloc(strlen(enc) + 100);
	assert_non_null(line);

	expect_bad_log("0.0,1.0,0.0,HIST*AAA\n", "character 0x2a");
	expect_bad_log("0.0,1.0,0.0,HISTF\n", "multiple of 4");
	expect_bad_log("0.0,1.0,0.0,\n", "multiple of 4");
	expect_bad_log("0.0,1.0,0.0,HI=TFAAA\n", "character 0x3d");
	expect_bad_log("0.0,1.0\n", "Interval_Length");
	expect_bad_log("0.0,1.0,x\n", "Interval_Max");
	expect_bad_log("zero,1.0,0.0,HISTFAAA\n", "StartTimestamp");
	expect_bad_log("1.0,nan,0.0,HISTFAAA\n", "Interval_Length");
	expect_bad_log("Tag=abc\n", "tag without");
	expect_bad_log("Tag=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa,1,1,1,HISTFAAA\n",
		       "tag longer");
	expect_bad_log("#[Histogram log format version 2.0]\n", "version");
	expect_bad_log("#[StartTime: soon]\n", "StartTime");
	/* Valid base64, but the histogram inside is cut short. */
	enc[strlen(enc) - 8] = '\0';
	sprintf(line, "0.0,1.0,0.0,%s\n", enc);
	expect_bad_log(line, "truncated");
	free(enc);
	/* Valid base64 of a bad cookie. */
	memcpy(raw, bin, 8);
	raw[3] = 0x77;
	enc = b64(raw, 8);
	sprintf(line, "0.0,1.0,0.0,%s\n", enc);
	expect_bad_log(line, "bad cookie");
	free(enc);
	/* Counts past the end of the 1..1000, 1 digit layout: a run of zeros
	 * over all its cells, then one count. */
	{
		int cells = (tb_hist_bucket_count(h) + 1) *
			    tb_hist_sub_bucket_count(h) / 2;
		uint64_t z = (uint64_t)cells * 2 - 1; /* zigzag(-cells) */
		size_t blen;
		uint8_t *env;

		assert_true(z < (1 << 14));
		v2_header(raw, 0x1c849313, 3, 0, 1, 1, 1000, 1.0);
		raw[40] = (uint8_t)(z | 0x80);
		raw[41] = (uint8_t)(z >> 7);
		raw[42] = 0x02;
		env = envelope(raw, 43, 0x1c849314, &blen);

		enc = b64(env, blen);
		free(env);
	}
	sprintf(line, "0.0,1.0,0.0,%s\n", enc);
	expect_bad_log(line, "past the end");
	free(enc);
	/* A NUL byte inside a line. */
	{
		tb_hist_log_reader_t *r;
		tb_hist_log_entry_t e;
		FILE *f = tmpfile();

		fwrite("1,1,1,HI\0TFAAA\n", 1, 15, f);
		rewind(f);
		assert_int_equal(tb_hist_log_reader_open(&r, f), TB_OK);
		assert_int_equal(tb_hist_log_read(r, &e), TB_EFORMAT);
		assert_non_null(strstr(tb_errmsg(), "NUL"));
		assert_int_equal(tb_hist_log_read(r, &e), 0);
		tb_hist_log_reader_close(r);
		fclose(f);
	}
	free(line);
	free(bin);
	tb_hist_free(h);
}

/* Lines as HdrHistogram's own writers lay them out: BaseTime header, CRLF
 * endings, a legend with EndTimestamp (HdrHistogram_c). */
static void test_log_reader_tolerates_variants(void **state)
{
	tb_hist_t *h = new_hist(1, 1000000, 3);
	tb_hist_log_reader_t *r;
	tb_hist_log_entry_t e;
	uint8_t *bin;
	size_t len;
	char *enc;
	FILE *f = tmpfile();

	(void)state;
	tb_hist_record_n(h, 999, 5);
	assert_int_equal(tb_hist_encode(h, &bin, &len), TB_OK);
	enc = b64(bin, len);
	fprintf(f, "#[Logged with jHiccup version 2.0.7]\r\n"
		   "#[Histogram log format version 1.2]\r\n"
		   "#[StartTime: 1441812279.474 (seconds since epoch), Wed Sep 09 08:24:39 PDT 2015]\r\n"
		   "#[BaseTime: 1441812123.000 (seconds since epoch)]\r\n"
		   "\"StartTimestamp\",\"EndTimestamp\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\r\n"
		   "\r\n"
		   "156.474,1.000,0.001,%s\r\n", enc);
	rewind(f);
	assert_int_equal(tb_hist_log_reader_open(&r, f), TB_OK);
	assert_int_equal(tb_hist_log_read(r, &e), 1);
	assert_true(tb_hist_log_reader_start_time(r) == 1441812279.474);
	assert_true(tb_hist_log_reader_base_time(r) == 1441812123.0);
	assert_true(e.start_sec == 156.474 && e.max == 0.001);
	assert_true(tb_hist_equal(e.hist, h));
	tb_hist_free(e.hist);
	assert_int_equal(tb_hist_log_read(r, &e), 0);
	tb_hist_log_reader_close(r);
	fclose(f);
	free(enc);
	free(bin);
	tb_hist_free(h);
}

/* ------------------------------------------------------------ recorder */

static void test_recorder_single_thread(void **state)
{
	tb_hist_recorder_t *rec;
	tb_hist_t *out = new_hist(1, 100, 1); /* any layout will do */

	(void)state;
	assert_int_equal(tb_hist_recorder_init(&rec, 1, HOUR_US, 3), TB_OK);
	tb_hist_recorder_record(rec, 10);
	tb_hist_recorder_record_n(rec, 20, 4);
	assert_int_equal(tb_hist_recorder_sample(rec, out), TB_OK);
	assert_int_equal(tb_hist_count(out), 5);
	assert_int_equal(tb_hist_count_at(out, 20), 4);
	assert_int_equal(tb_hist_recorder_sample(rec, out), TB_OK);
	assert_int_equal(tb_hist_count(out), 0);
	tb_hist_recorder_record(rec, 30);
	assert_int_equal(tb_hist_recorder_sample(rec, out), TB_OK);
	assert_int_equal(tb_hist_count(out), 1);
	assert_int_equal(tb_hist_recorder_sample(NULL, out), TB_EINVAL);
	tb_hist_recorder_free(rec);
	assert_int_equal(tb_hist_recorder_init(&rec, 1, 1, 3), TB_EINVAL);
	assert_null(rec);
	tb_hist_free(out);
}

enum { REC_N = 2000000 };

typedef struct rec_ctx {
	tb_hist_recorder_t *rec;
	tb_hist_t *expect;  /* what was recorded; the recording thread's */
	int samples;        /* intervals taken so far (sampler writes) */
	int done;
} rec_ctx_t;

static int64_t rec_value(int64_t i)
{
	return (i * 7919) % 100000 + 1;
}

/* Records at least REC_N samples and goes on until the sampler has taken
 * 200 intervals, so that sampling really overlaps recording (bounded at
 * 50 * REC_N all the same). */
static void *recording_thread(void *arg)
{
	rec_ctx_t *c = arg;

	for (int64_t i = 0; i < 50 * REC_N; i++) {
		int64_t n = i % 1000 == 999 ? 3 : 1;

		if (i >= REC_N && __atomic_load_n(&c->samples, __ATOMIC_RELAXED) >= 200)
			break;
		if (n == 1)
			tb_hist_recorder_record(c->rec, rec_value(i));
		else
			tb_hist_recorder_record_n(c->rec, rec_value(i), n);
		tb_hist_record_n(c->expect, rec_value(i), n);
	}
	__atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* One thread records (2M samples or more) while this one samples intervals
 * as fast as it can; the intervals add up exactly to what was recorded. */
static void test_recorder_concurrent(void **state)
{
	tb_hist_t *interval = new_hist(1, HOUR_US, 3);
	tb_hist_t *sum = new_hist(1, HOUR_US, 3), *expect = new_hist(1, HOUR_US, 3);
	rec_ctx_t c = { NULL, expect, 0, 0 };
	pthread_t t;
	int samples = 0, nonempty = 0;

	(void)state;
	assert_int_equal(tb_hist_recorder_init(&c.rec, 1, HOUR_US, 3), TB_OK);
	assert_int_equal(pthread_create(&t, NULL, recording_thread, &c), 0);
	while (!__atomic_load_n(&c.done, __ATOMIC_ACQUIRE)) {
		assert_int_equal(tb_hist_recorder_sample(c.rec, interval), TB_OK);
		nonempty += tb_hist_count(interval) > 0;
		assert_int_equal(tb_hist_merge(sum, interval), TB_OK);
		__atomic_store_n(&c.samples, ++samples, __ATOMIC_RELAXED);
		sched_yield();
	}
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(tb_hist_recorder_sample(c.rec, interval), TB_OK);
	assert_int_equal(tb_hist_merge(sum, interval), TB_OK);
	print_message("recorder: %d samples, %d non-empty\n", samples, nonempty);
	assert_true(tb_hist_count(expect) >= REC_N);
	assert_int_equal(tb_hist_count(sum), tb_hist_count(expect));
	assert_true(tb_hist_equal(sum, expect));
	tb_hist_recorder_free(c.rec);
	tb_hist_free(interval);
	tb_hist_free(sum);
	tb_hist_free(expect);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_init_rejects_bad_arguments),
		cmocka_unit_test(test_layout_matches_hdrhistogram),
		cmocka_unit_test(test_equivalence_bounds_each_digits),
		cmocka_unit_test(test_buckets_walked_exhaustively),
		cmocka_unit_test(test_percentiles_1_to_10000),
		cmocka_unit_test(test_percentiles_random),
		cmocka_unit_test(test_mean_stddev),
		cmocka_unit_test(test_overflow_underflow),
		cmocka_unit_test(test_merge_same_layout),
		cmocka_unit_test(test_merge_other_layout),
		cmocka_unit_test(test_copy_reset),
		cmocka_unit_test(test_corrected),
		cmocka_unit_test(test_iteration),
		cmocka_unit_test(test_hgrm_golden),
		cmocka_unit_test(test_hgrm_parsed_back),
		cmocka_unit_test(test_csv),
		cmocka_unit_test(test_encoding_bytes),
		cmocka_unit_test(test_encode_decode_roundtrip),
		cmocka_unit_test(test_decode_corrupt),
		cmocka_unit_test(test_log_roundtrip),
		cmocka_unit_test(test_log_corrupt),
		cmocka_unit_test(test_log_reader_tolerates_variants),
		cmocka_unit_test(test_recorder_single_thread),
		cmocka_unit_test(test_recorder_concurrent),
	};

	return cmocka_run_group_tests_name("hist", tests, NULL, NULL);
}
