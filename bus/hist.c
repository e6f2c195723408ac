/*
 * hist.c - latency histograms: layout, queries, output formats, the interval
 * log codec and the lock-free interval recorder.
 *
 * Layout.  A value's bucket is the position of its top bit (above the
 * sub-bucket resolution), its sub-bucket the next few bits.  With
 * sub_bucket_count = 2^k >= 2 * 10^digits linear sub-buckets per bucket,
 * every sub-bucket at or above the half-way mark is at most 1/2^(k-1) <=
 * 10^-digits of its value wide, which is the precision promised.  Bucket 0
 * keeps all its sub-buckets (resolution 2^unit_magnitude, the largest power
 * of two not above lowest_discernible); every later bucket doubles the
 * resolution and keeps only its upper half, the lower half having been
 * covered by the bucket before.  The counts array therefore has
 * (bucket_count + 1) * sub_bucket_count / 2 cells and the cell of a value is
 * found with one clz, two shifts and an add (tb_hist_index_ in hist.h).
 *
 * Invariants: counts_len cells, each >= 0; total_count is their sum (both
 * maintained by the one recording thread); overflow and underflow count
 * samples that were clamped and are also in the cells.
 *
 * Why HdrHistogram's layout rather than our own: latency tooling already
 * reads its .hgrm and log formats (plotters, HistogramLogProcessor), and its
 * formats are defined in terms of this very index arithmetic (the V2 encoding
 * is the counts array as is).  The code below is written from the published
 * description of the algorithm and formats.
 *
 * The recorder.  One hot thread records, one sampling thread takes interval
 * snapshots; the hot thread must never wait.  The recorder holds two
 * histograms, `active` (recorded into) and `inactive` (empty, owned by the
 * sampler), and an `epoch` that only the recording thread writes: odd while
 * it is inside a record call, even outside.  A sample:
 *   X1  exchange `active` with the empty histogram;
 *   A1  load the epoch; if it is odd, a record call is in flight and may have
 *       loaded the old pointer before X1;
 *   A2  wait until the epoch moves past that odd value;
 * after which no record call can touch the old histogram: any call entered
 * after A1 loads `active` after X1 in the single total order of seq-cst
 * operations (S1 < L1 in the recorder, X1 < A1 here: if L1 read the old
 * pointer then L1 < X1, so S1 < A1 and A1 sees that odd epoch or a later
 * one).  The release store R1 that ends each record call pairs with A1 or
 * A2, so the sampler sees every count the old histogram received; the
 * exchange X1 pairs with L1, so the recorder sees the reset the sampler did
 * before publishing a histogram.  The counts themselves need no
 * read-modify-write, since only the recording thread writes them while they
 * are active.  The cost on the hot path is one locked store (S1).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* newlocale, uselocale, strtod_l, getline */
#endif

#include <tickbus/hist.h>

#include "bus/barrier.h"
#include "bus/error.h"

#include <errno.h>
#include <inttypes.h>
#include <locale.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

/* ================================================================ layout */

static int32_t bucket_of(const tb_hist_t *h, int64_t v)
{
	return h->leading_zero_count_base -
	       __builtin_clzll((uint64_t)v | h->sub_bucket_mask);
}

static int32_t sub_bucket_of(const tb_hist_t *h, int64_t v, int32_t bucket)
{
	return (int32_t)((uint64_t)v >> (bucket + h->unit_magnitude));
}

/* Lowest value counted in cell `index`. */
static int64_t value_of_index(const tb_hist_t *h, int32_t index)
{
	int32_t bucket = (index >> h->sub_bucket_half_count_magnitude) - 1;
	int32_t sub = (index & (h->sub_bucket_half_count - 1)) +
		      h->sub_bucket_half_count;

	if (bucket < 0) {
		sub -= h->sub_bucket_half_count;
		bucket = 0;
	}
	return (int64_t)sub << (bucket + h->unit_magnitude);
}

static int64_t clamp_value(const tb_hist_t *h, int64_t v)
{
	if (v < 0)
		return 0;
	return v > h->highest_trackable ? h->highest_trackable : v;
}

int64_t tb_hist_lowest_equivalent(const tb_hist_t *h, int64_t value)
{
	int64_t v = value < 0 ? 0 : value;
	int32_t bucket = bucket_of(h, v);

	return (int64_t)sub_bucket_of(h, v, bucket)
	       << (bucket + h->unit_magnitude);
}

int64_t tb_hist_equivalent_range(const tb_hist_t *h, int64_t value)
{
	int64_t v = value < 0 ? 0 : value;
	int32_t bucket = bucket_of(h, v);

	if (sub_bucket_of(h, v, bucket) >= h->sub_bucket_count)
		bucket++;
	return (int64_t)1 << (h->unit_magnitude + bucket);
}

int64_t tb_hist_highest_equivalent(const tb_hist_t *h, int64_t value)
{
	/* lowest + (range - 1): lowest + range may be 2^63. */
	return tb_hist_lowest_equivalent(h, value) +
	       (tb_hist_equivalent_range(h, value) - 1);
}

int64_t tb_hist_median_equivalent(const tb_hist_t *h, int64_t value)
{
	return tb_hist_lowest_equivalent(h, value) +
	       (tb_hist_equivalent_range(h, value) >> 1);
}

bool tb_hist_values_equivalent(const tb_hist_t *h, int64_t a, int64_t b)
{
	return tb_hist_lowest_equivalent(h, a) ==
	       tb_hist_lowest_equivalent(h, b);
}

/* Fills the derived fields of `t` from the three parameters.  Returns 0 or
 * TB_EINVAL. */
static int layout(tb_hist_t *t, int64_t lowest, int64_t highest, int digits)
{
	int64_t single_unit_max, untrackable;
	int32_t count_magnitude, buckets;

	if (digits < 1 || digits > 5)
		return tb_error_set(TB_EINVAL, "hist: significant_digits %d is "
				  "not in 1..5", digits);
	if (lowest < 1)
		return tb_error_set(TB_EINVAL, "hist: lowest_discernible %" PRId64
				  " is below 1", lowest);
	if (highest / 2 < lowest)
		return tb_error_set(TB_EINVAL, "hist: highest_trackable %" PRId64
				  " is below 2 * lowest_discernible (%" PRId64
				  ")", highest, lowest);

	/* Values up to 2 * 10^digits must be told apart one unit at a time, so
	 * that the upper half of every bucket has 10^digits sub-buckets. */
	single_unit_max = 2;
	for (int i = 0; i < digits; i++)
		single_unit_max *= 10;
	count_magnitude = 64 - __builtin_clzll((uint64_t)single_unit_max - 1);

	t->lowest_discernible = lowest;
	t->highest_trackable = highest;
	t->significant_digits = digits;
	t->unit_magnitude = 63 - __builtin_clzll((uint64_t)lowest);
	t->sub_bucket_half_count_magnitude = count_magnitude - 1;
	/* The top sub-bucket of the top bucket must still fit in an int64. */
	if (t->unit_magnitude + t->sub_bucket_half_count_magnitude > 61)
		return tb_error_set(TB_EINVAL, "hist: %d significant digits "
				  "above lowest_discernible %" PRId64 " need "
				  "more than 63 bits", digits, lowest);
	t->sub_bucket_count = (int32_t)1 << count_magnitude;
	t->sub_bucket_half_count = t->sub_bucket_count / 2;
	t->sub_bucket_mask = ((uint64_t)t->sub_bucket_count - 1)
			     << t->unit_magnitude;
	t->leading_zero_count_base = 64 - t->unit_magnitude - count_magnitude;

	/* Buckets, each doubling the range, until highest is covered. */
	untrackable = (int64_t)t->sub_bucket_count << t->unit_magnitude;
	buckets = 1;
	while (untrackable <= highest) {
		if (untrackable > INT64_MAX / 2) {
			buckets++;
			break;
		}
		untrackable <<= 1;
		buckets++;
	}
	t->bucket_count = buckets;
	t->counts_len = (buckets + 1) * t->sub_bucket_half_count;
	return 0;
}

/* ======================================================= set-up, teardown */

int tb_hist_init(tb_hist_t **h, int64_t lowest_discernible,
		 int64_t highest_trackable, int significant_digits)
{
	tb_hist_t t, *n;
	int rc;

	if (!h)
		return tb_error_set(TB_EINVAL, "hist: NULL result pointer");
	*h = NULL;
	memset(&t, 0, sizeof(t));
	rc = layout(&t, lowest_discernible, highest_trackable,
		    significant_digits);
	if (rc)
		return rc;
	/* One allocation: the struct, then the counts (8-byte aligned). */
	n = calloc(1, sizeof(*n) + (size_t)t.counts_len * sizeof(int64_t));
	if (!n)
		return tb_error_set(TB_ENOMEM, "hist: cannot allocate %d counts",
				  t.counts_len);
	*n = t;
	n->counts = (int64_t *)(n + 1);
	*h = n;
	return 0;
}

void tb_hist_free(tb_hist_t *h)
{
	free(h);
}

int tb_hist_copy(tb_hist_t **dst, const tb_hist_t *src)
{
	int rc;

	if (!dst || !src)
		return tb_error_set(TB_EINVAL, "hist_copy: NULL argument");
	rc = tb_hist_init(dst, src->lowest_discernible, src->highest_trackable,
			  src->significant_digits);
	if (rc)
		return rc;
	memcpy((*dst)->counts, src->counts,
	       (size_t)src->counts_len * sizeof(int64_t));
	(*dst)->total_count = src->total_count;
	(*dst)->overflow_count = src->overflow_count;
	(*dst)->underflow_count = src->underflow_count;
	return 0;
}

void tb_hist_reset(tb_hist_t *h)
{
	memset(h->counts, 0, (size_t)h->counts_len * sizeof(int64_t));
	h->total_count = 0;
	h->overflow_count = 0;
	h->underflow_count = 0;
}

int tb_hist_merge(tb_hist_t *dst, const tb_hist_t *src)
{
	int32_t src_top;

	if (!dst || !src)
		return tb_error_set(TB_EINVAL, "hist_merge: NULL argument");
	dst->underflow_count += src->underflow_count;

	/* Same index arithmetic, src no wider: cell i means the same values. */
	if (dst->unit_magnitude == src->unit_magnitude &&
	    dst->sub_bucket_half_count_magnitude ==
		    src->sub_bucket_half_count_magnitude &&
	    src->highest_trackable <= dst->highest_trackable) {
		for (int32_t i = 0; i < src->counts_len; i++)
			dst->counts[i] += src->counts[i];
		dst->total_count += src->total_count;
		dst->overflow_count += src->overflow_count;
		return 0;
	}

	/* Otherwise re-record each bucket at its lowest value.  src's own
	 * overflow sits in the cell of src's highest_trackable and stays
	 * overflow; other cells overflow if they lie beyond dst. */
	src_top = tb_hist_index_(src, src->highest_trackable);
	for (int32_t i = 0; i < src->counts_len; i++) {
		int64_t c = src->counts[i], v;

		if (c == 0)
			continue;
		v = value_of_index(src, i);
		if (v > dst->highest_trackable) {
			v = dst->highest_trackable;
			dst->overflow_count += c;
		} else if (i == src_top) {
			dst->overflow_count += src->overflow_count;
		}
		dst->counts[tb_hist_index_(dst, v)] += c;
		dst->total_count += c;
	}
	return 0;
}

bool tb_hist_equal(const tb_hist_t *a, const tb_hist_t *b)
{
	return a->lowest_discernible == b->lowest_discernible &&
	       a->highest_trackable == b->highest_trackable &&
	       a->significant_digits == b->significant_digits &&
	       a->total_count == b->total_count &&
	       memcmp(a->counts, b->counts,
		      (size_t)a->counts_len * sizeof(int64_t)) == 0;
}

/* ============================================================= recording */

void tb_hist_record_corrected(tb_hist_t *h, int64_t value,
			      int64_t expected_interval)
{
	int64_t x;

	tb_hist_record(h, value);
	/* value > interval first, so that value - interval cannot overflow */
	if (expected_interval <= 0 || value <= expected_interval ||
	    value - expected_interval < expected_interval)
		return;
	/* The missing samples x, x - i, x - 2i, ... >= i are recorded a bucket
	 * at a time: all of them down to the bottom of x's bucket at once. */
	x = value - expected_interval;
	while (x >= expected_interval) {
		int64_t floor, n;

		if (x > h->highest_trackable)
			floor = h->highest_trackable + 1;
		else
			floor = tb_hist_lowest_equivalent(h, x);
		if (floor < expected_interval)
			floor = expected_interval;
		n = (x - floor) / expected_interval + 1;
		tb_hist_record_n(h, x, n);
		x -= n * expected_interval;
	}
}

/* =============================================================== queries */

int64_t tb_hist_count(const tb_hist_t *h)
{
	return __atomic_load_n(&h->total_count, __ATOMIC_RELAXED);
}

int64_t tb_hist_overflow(const tb_hist_t *h)
{
	return __atomic_load_n(&h->overflow_count, __ATOMIC_RELAXED);
}

int64_t tb_hist_underflow(const tb_hist_t *h)
{
	return __atomic_load_n(&h->underflow_count, __ATOMIC_RELAXED);
}

int64_t tb_hist_lowest_discernible(const tb_hist_t *h)
{
	return h->lowest_discernible;
}

int64_t tb_hist_highest_trackable(const tb_hist_t *h)
{
	return h->highest_trackable;
}

int tb_hist_significant_digits(const tb_hist_t *h)
{
	return h->significant_digits;
}

int tb_hist_bucket_count(const tb_hist_t *h)
{
	return h->bucket_count;
}

int tb_hist_sub_bucket_count(const tb_hist_t *h)
{
	return h->sub_bucket_count;
}

int64_t tb_hist_count_at(const tb_hist_t *h, int64_t value)
{
	return h->counts[tb_hist_index_(h, clamp_value(h, value))];
}

int64_t tb_hist_min(const tb_hist_t *h)
{
	for (int32_t i = 0; i < h->counts_len; i++)
		if (h->counts[i])
			return value_of_index(h, i);
	return 0;
}

int64_t tb_hist_max(const tb_hist_t *h)
{
	for (int32_t i = h->counts_len - 1; i >= 0; i--)
		if (h->counts[i])
			return tb_hist_highest_equivalent(h,
							  value_of_index(h, i));
	return 0;
}

double tb_hist_mean(const tb_hist_t *h)
{
	double sum = 0;

	if (h->total_count == 0)
		return 0;
	for (int32_t i = 0; i < h->counts_len; i++)
		if (h->counts[i])
			sum += (double)tb_hist_median_equivalent(
				       h, value_of_index(h, i)) *
			       (double)h->counts[i];
	return sum / (double)h->total_count;
}

double tb_hist_stddev(const tb_hist_t *h)
{
	double mean, sum = 0;

	if (h->total_count == 0)
		return 0;
	mean = tb_hist_mean(h);
	for (int32_t i = 0; i < h->counts_len; i++) {
		double d;

		if (!h->counts[i])
			continue;
		d = (double)tb_hist_median_equivalent(h, value_of_index(h, i)) -
		    mean;
		sum += d * d * (double)h->counts[i];
	}
	return sqrt(sum / (double)h->total_count);
}

int64_t tb_hist_value_at_percentile(const tb_hist_t *h, double p)
{
	double requested;
	int64_t target, cum = 0;

	/* One ulp down, so that e.g. 99.9% of 1000 asks for 999, not 1000
	 * through 0.999000...01 * 1000 rounding up. */
	requested = nextafter(p, -INFINITY);
	if (!(requested > 0)) /* also NaN */
		requested = 0;
	if (requested > 100)
		requested = 100;
	target = (int64_t)ceil(requested * (double)h->total_count / 100.0);
	if (target < 1)
		target = 1;
	for (int32_t i = 0; i < h->counts_len; i++) {
		cum += h->counts[i];
		if (cum >= target) {
			int64_t v = value_of_index(h, i);

			return p == 0 ? v : tb_hist_highest_equivalent(h, v);
		}
	}
	return 0;
}

/* ============================================================= iteration */

void tb_hist_iter_init(tb_hist_iter_t *it, const tb_hist_t *h)
{
	memset(it, 0, sizeof(*it));
	it->hist_ = h;
}

bool tb_hist_iter_next(tb_hist_iter_t *it)
{
	const tb_hist_t *h = it->hist_;

	for (int32_t i = it->next_index_; i < h->counts_len; i++) {
		if (!h->counts[i])
			continue;
		it->value_lo = value_of_index(h, i);
		it->value_hi = tb_hist_highest_equivalent(h, it->value_lo);
		it->count = h->counts[i];
		it->cumulative += it->count;
		it->next_index_ = i + 1;
		return true;
	}
	it->next_index_ = h->counts_len;
	return false;
}

/* ================================================================ output */

/* Numbers in files are written and read in the C locale, whatever the
 * process chose with setlocale (a "," decimal point would break them). */
typedef struct c_numeric {
	locale_t c, saved;
} c_numeric_t;

static int c_numeric_enter(c_numeric_t *s)
{
	s->c = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
	if (!s->c)
		return tb_error_sys(errno, "hist: newlocale(C)");
	s->saved = uselocale(s->c);
	return 0;
}

static void c_numeric_leave(c_numeric_t *s)
{
	uselocale(s->saved);
	freelocale(s->c);
}

/*
 * The next percentile level of the distribution: ticks_per_half lines
 * between 0% and 50%, as many between 50% and 75%, and so on, each halving
 * of the distance to 100% getting the same number of lines.  The exact
 * arithmetic (log ratio, truncation) is HdrHistogram's, so that the levels
 * printed are the same to the last digit.
 */
static double next_level(double level, int ticks_per_half)
{
	double halvings = log(100.0 / (100.0 - level)) / log(2);

	if (!(halvings < 60)) /* level 100 (inf) or absurdly close to it */
		halvings = 60;
	return level + 100.0 / ((double)ticks_per_half *
				ldexp(1.0, (int)(int64_t)halvings + 1));
}

/*
 * Fixed-point formatting as HdrHistogram's Java code produces it.  printf's
 * %.Nf rounds the exact binary value with ties to even; Java's Formatter
 * rounds the shortest decimal that reads back as the value, ties away from
 * zero.  They differ on exact ties (0.9997802734375 is 0.999780273438 in a
 * Java .hgrm, 0.999780273437 from printf) and on near-ties (1.005).  This
 * writes Java's digits into `out` (at least 32 bytes plus the integer
 * digits of v); v must be finite.
 */
static void fixed_java(char *out, size_t cap, double v, int prec)
{
	char e[40], digits[24], r[400];
	int nd = 0, point, first, n, k, j, o = 0;
	bool neg = signbit(v);

	if (neg)
		v = -v;
	/* Shortest digits: the fewest significant digits that read back. */
	for (int sig = 1; sig <= 17; sig++) {
		snprintf(e, sizeof(e), "%.*e", sig - 1, v);
		if (strtod(e, NULL) == v)
			break;
	}
	for (const char *p = e; *p && *p != 'e'; p++)
		if (*p >= '0' && *p <= '9')
			digits[nd++] = *p;
	/* v = 0.d1 d2 ... dn x 10^point; the digit at decimal place i (1 =
	 * tenths, 0 = units, -1 = tens) is digits[point - 1 + i]. */
	point = atoi(strchr(e, 'e') + 1) + 1;
	first = 1 - (point > 1 ? point : 1);
	n = prec - first + 1;
	if (n + 2 > (int)sizeof(r) || cap < (size_t)n + 4) {
		snprintf(out, cap, "%.*f", prec, neg ? -v : v);
		return;
	}
	for (j = 0; j < n; j++) {
		k = point - 1 + first + j;
		r[j] = k >= 0 && k < nd ? digits[k] : '0';
	}
	k = point - 1 + prec + 1; /* the first digit dropped */
	if (k >= 0 && k < nd && digits[k] >= '5') {
		for (j = n - 1; j >= 0 && r[j] == '9'; j--)
			r[j] = '0';
		if (j >= 0) {
			r[j]++;
		} else {
			memmove(r + 1, r, (size_t)n);
			r[0] = '1';
			n++;
		}
	}
	if (neg)
		out[o++] = '-';
	for (j = 0; j < n - prec; j++)
		out[o++] = r[j];
	if (prec > 0) {
		out[o++] = '.';
		for (; j < n; j++)
			out[o++] = r[j];
	}
	out[o] = '\0';
}

#define NUM_MAX 400 /* room for any double printed by fixed_java */

typedef struct dist_line {
	double value;
	double level;    /* 0..100 */
	int64_t cumulative;
} dist_line_t;

static int put_line(FILE *out, bool csv, int digits, const dist_line_t *l)
{
	char v[NUM_MAX], p[NUM_MAX], inv[NUM_MAX];
	bool last = l->level == 100.0;
	int n;

	fixed_java(v, sizeof(v), l->value, digits);
	fixed_java(p, sizeof(p), l->level / 100.0, 12);
	if (!last)
		fixed_java(inv, sizeof(inv), 1.0 / (1.0 - l->level / 100.0), 2);
	if (csv)
		n = fprintf(out, "%s,%s,%" PRId64 ",%s\n", v, p, l->cumulative,
			    last ? "Infinity" : inv);
	else if (!last)
		n = fprintf(out, "%12s %2s %10" PRId64 " %14s\n", v, p,
			    l->cumulative, inv);
	else
		n = fprintf(out, "%12s %2s %10" PRId64 "\n", v, p,
			    l->cumulative);
	return n < 0 ? -1 : 0;
}

/*
 * Walks the buckets in order; at each bucket prints one line per percentile
 * level its cumulative share has reached (so a heavy bucket repeats), and
 * after the last sample one line at 100%.
 */
static int put_distribution(const tb_hist_t *h, FILE *out, double unit_ratio,
			    int ticks, bool csv)
{
	int64_t total = h->total_count, cum = 0;
	int digits = h->significant_digits;
	dist_line_t l = { 0, 0, 0 };
	double level = 0;

	if (csv) {
		if (fprintf(out, "value,percentile,total_count,inverse\n") < 0)
			return -1;
	} else if (fprintf(out, "%12s %14s %10s %14s\n\n", "Value",
			   "Percentile", "TotalCount",
			   "1/(1-Percentile)") < 0) {
		return -1;
	}
	if (total <= 0)
		return 0;
	for (int32_t i = 0; i < h->counts_len && cum < total; i++) {
		double share;

		if (!h->counts[i])
			continue;
		cum += h->counts[i];
		share = (100.0 * (double)cum) / (double)total;
		l.value = (double)tb_hist_highest_equivalent(
				  h, value_of_index(h, i)) / unit_ratio;
		l.cumulative = cum;
		while (share >= level) {
			l.level = level;
			if (put_line(out, csv, digits, &l))
				return -1;
			level = next_level(level, ticks);
			if (cum >= total)
				break;
		}
	}
	l.level = 100.0;
	return put_line(out, csv, digits, &l);
}

static int check_output_args(const tb_hist_t *h, FILE *out, double unit_ratio,
			     int *ticks, const char *who)
{
	if (!h || !out)
		return tb_error_set(TB_EINVAL, "%s: NULL argument", who);
	if (!(unit_ratio > 0) || !isfinite(unit_ratio))
		return tb_error_set(TB_EINVAL, "%s: unit_ratio %g is not a "
				  "positive number", who, unit_ratio);
	if (*ticks == 0)
		*ticks = TB_HIST_TICKS_DEFAULT;
	if (*ticks < 0 || *ticks > 1000000)
		return tb_error_set(TB_EINVAL, "%s: ticks_per_half %d is not in "
				  "1..1000000", who, *ticks);
	return 0;
}

int tb_hist_write_hgrm(const tb_hist_t *h, FILE *out, double unit_ratio,
		       int ticks_per_half)
{
	char mean[NUM_MAX], sd[NUM_MAX], max[NUM_MAX];
	c_numeric_t loc;
	int d, rc;

	rc = check_output_args(h, out, unit_ratio, &ticks_per_half,
			       "hist_write_hgrm");
	if (rc || (rc = c_numeric_enter(&loc)))
		return rc;
	d = h->significant_digits;
	fixed_java(mean, sizeof(mean), tb_hist_mean(h) / unit_ratio, d);
	fixed_java(sd, sizeof(sd), tb_hist_stddev(h) / unit_ratio, d);
	fixed_java(max, sizeof(max), (double)tb_hist_max(h) / unit_ratio, d);
	if (put_distribution(h, out, unit_ratio, ticks_per_half, false) ||
	    fprintf(out, "#[Mean    = %12s, StdDeviation   = %12s]\n", mean,
		    sd) < 0 ||
	    fprintf(out, "#[Max     = %12s, Total count    = %12" PRId64 "]\n",
		    max, h->total_count) < 0 ||
	    fprintf(out, "#[Buckets = %12d, SubBuckets     = %12d]\n",
		    h->bucket_count, h->sub_bucket_count) < 0)
		rc = tb_error_set(TB_EIO, "hist_write_hgrm: write failed");
	c_numeric_leave(&loc);
	return rc;
}

int tb_hist_write_csv(const tb_hist_t *h, FILE *out, double unit_ratio,
		      int ticks_per_half)
{
	c_numeric_t loc;
	int rc;

	rc = check_output_args(h, out, unit_ratio, &ticks_per_half,
			       "hist_write_csv");
	if (rc || (rc = c_numeric_enter(&loc)))
		return rc;
	if (put_distribution(h, out, unit_ratio, ticks_per_half, true))
		rc = tb_error_set(TB_EIO, "hist_write_csv: write failed");
	c_numeric_leave(&loc);
	return rc;
}

/* ======================================================= binary encoding */

/*
 * HdrHistogram V2, big-endian throughout:
 *   compressed envelope: u32 cookie 0x1c849314, u32 length, zlib stream;
 *   inside the stream:   u32 cookie 0x1c849313, u32 payload length,
 *                        u32 normalizing index offset (0), u32 digits,
 *                        u64 lowest, u64 highest, f64 integer-to-double
 *                        ratio (1.0), then the payload: the counts array
 *                        up to its last non-zero cell as ZigZag LEB128
 *                        varints, a run of n > 1 zero cells as -n.
 * The cookies' 0x10 bit is the "word size" nibble HdrHistogram sets for V2
 * (base cookies 0x1c849303 / 0x1c849304); readers compare cookie & ~0xf0.
 */
#define V2_COOKIE_BASE 0x1c849303u
#define V2_COMPRESSED_COOKIE_BASE 0x1c849304u
#define V2_WORD_SIZE_NIBBLE 0x10u
#define V2_COOKIE_MASK (~0xf0u)
#define V2_HEADER_SIZE 40   /* 4 x u32 + 2 x u64 + f64 */
#define V2_ENVELOPE_SIZE 8  /* cookie + length */
#define VARINT_MAX 9        /* 8 x 7 bits, then one full byte: 64 bits */

static void put_be32(uint8_t *p, uint32_t v)
{
	for (int i = 3; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static void put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static uint32_t get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static uint64_t get_be64(const uint8_t *p)
{
	return (uint64_t)get_be32(p) << 32 | get_be32(p + 4);
}

/* ZigZag (small magnitudes of either sign become small) then LEB128, the
 * ninth byte carrying a full 8 bits.  Returns the bytes written. */
static size_t put_varint(uint8_t *p, int64_t v)
{
	uint64_t z = ((uint64_t)v << 1) ^ (0 - ((uint64_t)v >> 63));
	size_t n = 0;

	while (n < VARINT_MAX - 1 && z >= 0x80) {
		p[n++] = (uint8_t)(z | 0x80);
		z >>= 7;
	}
	p[n++] = (uint8_t)z;
	return n;
}

/* Reads one varint from [*p, end); returns false when it runs past end. */
static bool get_varint(const uint8_t **p, const uint8_t *end, int64_t *v)
{
	uint64_t z = 0;
	const uint8_t *q = *p;
	int shift = 0;

	for (int i = 0; i < VARINT_MAX; i++) {
		uint8_t b;

		if (q == end)
			return false;
		b = *q++;
		if (i == VARINT_MAX - 1) {
			z |= (uint64_t)b << shift;
			break;
		}
		z |= (uint64_t)(b & 0x7f) << shift;
		shift += 7;
		if (!(b & 0x80))
			break;
	}
	*p = q;
	*v = (int64_t)((z >> 1) ^ (0 - (z & 1)));
	return true;
}

int tb_hist_encode(const tb_hist_t *h, uint8_t **buf, size_t *len)
{
	int32_t used = 0;
	size_t raw_len = V2_HEADER_SIZE, raw_cap;
	uLongf zlen;
	uint8_t *raw, *out;
	uint64_t ratio_bits;
	double ratio = 1.0;
	int zrc;

	if (!h || !buf || !len)
		return tb_error_set(TB_EINVAL, "hist_encode: NULL argument");
	*buf = NULL;
	*len = 0;
	for (int32_t i = h->counts_len - 1; i >= 0; i--)
		if (h->counts[i]) {
			used = i + 1;
			break;
		}
	raw_cap = V2_HEADER_SIZE + (size_t)used * VARINT_MAX;
	raw = malloc(raw_cap);
	if (!raw)
		return tb_error_set(TB_ENOMEM, "hist_encode: cannot allocate %zu "
				  "bytes", raw_cap);
	for (int32_t i = 0; i < used;) {
		int64_t c = h->counts[i++];
		int64_t zeros = 0;

		if (c == 0) {
			zeros = 1;
			while (i < used && h->counts[i] == 0) {
				zeros++;
				i++;
			}
		}
		raw_len += put_varint(raw + raw_len, zeros > 1 ? -zeros : c);
	}
	memcpy(&ratio_bits, &ratio, sizeof(ratio_bits));
	put_be32(raw, V2_COOKIE_BASE | V2_WORD_SIZE_NIBBLE);
	put_be32(raw + 4, (uint32_t)(raw_len - V2_HEADER_SIZE));
	put_be32(raw + 8, 0);
	put_be32(raw + 12, (uint32_t)h->significant_digits);
	put_be64(raw + 16, (uint64_t)h->lowest_discernible);
	put_be64(raw + 24, (uint64_t)h->highest_trackable);
	put_be64(raw + 32, ratio_bits);

	zlen = compressBound((uLong)raw_len);
	out = malloc(V2_ENVELOPE_SIZE + zlen);
	if (!out) {
		free(raw);
		return tb_error_set(TB_ENOMEM, "hist_encode: cannot allocate %lu "
				  "bytes", (unsigned long)zlen);
	}
	zrc = compress2(out + V2_ENVELOPE_SIZE, &zlen, raw, (uLong)raw_len,
			Z_DEFAULT_COMPRESSION);
	free(raw);
	if (zrc != Z_OK) {
		free(out);
		return tb_error_set(zrc == Z_MEM_ERROR ? TB_ENOMEM : TB_EINVAL,
				  "hist_encode: zlib compress2 failed (%d)",
				  zrc);
	}
	put_be32(out, V2_COMPRESSED_COOKIE_BASE | V2_WORD_SIZE_NIBBLE);
	put_be32(out + 4, (uint32_t)zlen);
	*buf = out;
	*len = V2_ENVELOPE_SIZE + zlen;
	return 0;
}

/* Inflates exactly `want` bytes into `dst`.  Returns 0, or TB_EFORMAT when
 * the stream is corrupt or ends early. */
static int inflate_exactly(z_stream *zs, uint8_t *dst, size_t want,
			   const char *what)
{
	zs->next_out = dst;
	zs->avail_out = (uInt)want;
	while (zs->avail_out > 0) {
		int zrc = inflate(zs, Z_NO_FLUSH);

		if (zrc == Z_STREAM_END)
			break;
		if (zrc == Z_BUF_ERROR) /* no input left: cut short */
			return tb_error_set(TB_EFORMAT, "hist_decode: compressed "
					  "data truncated in the %s", what);
		if (zrc != Z_OK)
			return tb_error_set(TB_EFORMAT, "hist_decode: bad zlib "
					  "data in the %s: %s", what,
					  zs->msg ? zs->msg : "unknown error");
	}
	if (zs->avail_out > 0)
		return tb_error_set(TB_EFORMAT, "hist_decode: %s is %zu bytes "
				  "short of its stated length", what,
				  (size_t)zs->avail_out);
	return 0;
}

/* After the payload: the zlib stream must end here, with no input left. */
static int inflate_end_check(z_stream *zs)
{
	uint8_t extra;
	int zrc;

	zs->next_out = &extra;
	zs->avail_out = 1;
	zrc = inflate(zs, Z_NO_FLUSH);
	if (zrc != Z_STREAM_END) {
		if (zs->avail_out == 0)
			return tb_error_set(TB_EFORMAT, "hist_decode: data goes "
					  "on past the stated payload length");
		if (zrc == Z_BUF_ERROR || zrc == Z_OK)
			return tb_error_set(TB_EFORMAT, "hist_decode: compressed "
					  "data truncated (no end of stream)");
		return tb_error_set(TB_EFORMAT, "hist_decode: bad zlib data: %s",
				  zs->msg ? zs->msg : "unknown error");
	}
	if (zs->avail_out == 0)
		return tb_error_set(TB_EFORMAT, "hist_decode: data goes on past "
				  "the stated payload length");
	if (zs->avail_in > 0)
		return tb_error_set(TB_EFORMAT, "hist_decode: %u bytes after the "
				  "end of the compressed data",
				  (unsigned)zs->avail_in);
	return 0;
}

/* Fills h's counts from a V2 payload. */
static int decode_counts(tb_hist_t *h, const uint8_t *p, const uint8_t *end)
{
	int64_t index = 0, total = 0;

	while (p < end) {
		int64_t v;

		if (!get_varint(&p, end, &v))
			return tb_error_set(TB_EFORMAT, "hist_decode: payload "
					  "ends inside a count");
		if (v < 0) {
			if (v == INT64_MIN || -v > h->counts_len - index)
				return tb_error_set(TB_EFORMAT, "hist_decode: "
						  "run of zeros goes past the "
						  "end of the %d counts",
						  h->counts_len);
			index += -v;
			continue;
		}
		if (index >= h->counts_len)
			return tb_error_set(TB_EFORMAT, "hist_decode: counts go "
					  "past the end of the %d counts of "
					  "this layout", h->counts_len);
		if (v > INT64_MAX - total)
			return tb_error_set(TB_EFORMAT, "hist_decode: total "
					  "count overflows 64 bits");
		h->counts[index++] = v;
		total += v;
	}
	h->total_count = total;
	return 0;
}

int tb_hist_decode(const void *buf, size_t len, tb_hist_t **out)
{
	const uint8_t *in = (const uint8_t *)buf;
	uint8_t hdr[V2_HEADER_SIZE], *payload = NULL;
	uint32_t cookie, zlen, payload_len;
	int64_t lowest, highest;
	uint64_t ratio_bits;
	double ratio;
	int32_t digits, offset;
	tb_hist_t *h = NULL;
	z_stream zs;
	int rc;

	if (!out || (!buf && len))
		return tb_error_set(TB_EINVAL, "hist_decode: NULL argument");
	*out = NULL;
	if (len < V2_ENVELOPE_SIZE)
		return tb_error_set(TB_EFORMAT, "hist_decode: %zu bytes, too "
				  "short for a compressed histogram", len);
	cookie = get_be32(in);
	if ((cookie & V2_COOKIE_MASK) != V2_COMPRESSED_COOKIE_BASE)
		return tb_error_set(TB_EFORMAT, "hist_decode: bad cookie 0x%08x "
				  "(want a V2 compressed histogram, 0x%08x)",
				  cookie, V2_COMPRESSED_COOKIE_BASE |
						  V2_WORD_SIZE_NIBBLE);
	zlen = get_be32(in + 4);
	if (zlen > len - V2_ENVELOPE_SIZE)
		return tb_error_set(TB_EFORMAT, "hist_decode: truncated: %u "
				  "compressed bytes announced, %zu present",
				  zlen, len - V2_ENVELOPE_SIZE);
	if (zlen < len - V2_ENVELOPE_SIZE)
		return tb_error_set(TB_EFORMAT, "hist_decode: %zu bytes after "
				  "the compressed histogram",
				  len - V2_ENVELOPE_SIZE - zlen);

	memset(&zs, 0, sizeof(zs));
	if (inflateInit(&zs) != Z_OK)
		return tb_error_set(TB_ENOMEM, "hist_decode: inflateInit failed");
	zs.next_in = (Bytef *)(uintptr_t)(in + V2_ENVELOPE_SIZE);
	zs.avail_in = zlen;
	rc = inflate_exactly(&zs, hdr, sizeof(hdr), "header");
	if (rc)
		goto out;

	cookie = get_be32(hdr);
	payload_len = get_be32(hdr + 4);
	offset = (int32_t)get_be32(hdr + 8);
	digits = (int32_t)get_be32(hdr + 12);
	lowest = (int64_t)get_be64(hdr + 16);
	highest = (int64_t)get_be64(hdr + 24);
	ratio_bits = get_be64(hdr + 32);
	memcpy(&ratio, &ratio_bits, sizeof(ratio));
	if ((cookie & V2_COOKIE_MASK) != V2_COOKIE_BASE) {
		rc = tb_error_set(TB_EFORMAT, "hist_decode: bad inner cookie "
				"0x%08x (want V2, 0x%08x)", cookie,
				V2_COOKIE_BASE | V2_WORD_SIZE_NIBBLE);
		goto out;
	}
	/* The normalizing offset says how the writer rotated its own counts
	 * array; the payload is in logical order whatever it is (HdrHistogram
	 * applies it before filling), so it is not needed here.  A ratio
	 * other than 1 is a DoubleHistogram, whose counts are not values.
	 * hdr-histogram-js writes the ratio as the integer 1, bits 0x1. */
	(void)offset;
	if (ratio != 1.0 && ratio_bits != 1) {
		rc = tb_error_set(TB_EFORMAT, "hist_decode: integer-to-double "
				"ratio %g: a DoubleHistogram, not supported",
				ratio);
		goto out;
	}
	rc = tb_hist_init(&h, lowest, highest, digits);
	if (rc == TB_EINVAL) {
		rc = tb_error_prepend(TB_EFORMAT, "hist_decode: bad parameters");
		goto out;
	} else if (rc) {
		goto out;
	}
	if (payload_len > (uint64_t)h->counts_len * VARINT_MAX) {
		rc = tb_error_set(TB_EFORMAT, "hist_decode: payload length %u is "
				"more than %d counts can take", payload_len,
				h->counts_len);
		goto out;
	}
	payload = malloc(payload_len ? payload_len : 1);
	if (!payload) {
		rc = tb_error_set(TB_ENOMEM, "hist_decode: cannot allocate %u "
				"bytes", payload_len);
		goto out;
	}
	rc = inflate_exactly(&zs, payload, payload_len, "payload");
	if (!rc)
		rc = inflate_end_check(&zs);
	if (!rc)
		rc = decode_counts(h, payload, payload + payload_len);
out:
	inflateEnd(&zs);
	free(payload);
	if (rc) {
		tb_hist_free(h);
		return rc;
	}
	*out = h;
	return 0;
}

/* ================================================================ base64 */

static const char b64_alphabet[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Standard alphabet with '=' padding.  `dst` holds 4 * ceil(n / 3) + 1. */
static void base64_encode(const uint8_t *src, size_t n, char *dst)
{
	size_t i = 0;

	for (; i + 3 <= n; i += 3) {
		uint32_t w = (uint32_t)src[i] << 16 |
			     (uint32_t)src[i + 1] << 8 | src[i + 2];

		*dst++ = b64_alphabet[w >> 18];
		*dst++ = b64_alphabet[(w >> 12) & 63];
		*dst++ = b64_alphabet[(w >> 6) & 63];
		*dst++ = b64_alphabet[w & 63];
	}
	if (i < n) {
		uint32_t w = (uint32_t)src[i] << 16;

		if (i + 1 < n)
			w |= (uint32_t)src[i + 1] << 8;
		*dst++ = b64_alphabet[w >> 18];
		*dst++ = b64_alphabet[(w >> 12) & 63];
		*dst++ = i + 1 < n ? b64_alphabet[(w >> 6) & 63] : '=';
		*dst++ = '=';
	}
	*dst = '\0';
}

static int b64_value(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

/* Strict decoding: length a multiple of 4, padding only at the end.
 * `dst` holds 3 * n / 4 bytes.  Returns 0 or TB_EFORMAT. */
static int base64_decode(const char *src, size_t n, uint8_t *dst,
			 size_t *out_len)
{
	size_t pad = 0, o = 0;

	if (n == 0 || n % 4 != 0)
		return tb_error_set(TB_EFORMAT, "bad base64: length %zu is not a "
				  "positive multiple of 4", n);
	if (src[n - 1] == '=')
		pad = src[n - 2] == '=' ? 2 : 1;
	for (size_t i = 0; i < n; i += 4) {
		uint32_t w = 0;

		for (size_t j = 0; j < 4; j++) {
			unsigned char c = (unsigned char)src[i + j];
			int v = b64_value((char)c);

			if (v < 0 && !(c == '=' && i + j >= n - pad))
				return tb_error_set(TB_EFORMAT, "bad base64: "
						  "character 0x%02x at offset "
						  "%zu", c, i + j);
			w = w << 6 | (uint32_t)(v < 0 ? 0 : v);
		}
		dst[o++] = (uint8_t)(w >> 16);
		if (i + 4 < n || pad < 2)
			dst[o++] = (uint8_t)(w >> 8);
		if (i + 4 < n || pad < 1)
			dst[o++] = (uint8_t)w;
	}
	*out_len = o;
	return 0;
}

/* ======================================================== interval log */

#define LOG_FORMAT_VERSION "1.3"
#define LOG_LEGEND "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\"," \
		   "\"Interval_Compressed_Histogram\""

struct tb_hist_log_writer {
	FILE *out;
	double max_unit_ratio;
};

int tb_hist_log_writer_open(tb_hist_log_writer_t **w, FILE *out,
			    double start_time_sec, double max_unit_ratio)
{
	char date[64] = "", start[NUM_MAX];
	time_t secs;
	struct tm tm;
	c_numeric_t loc;
	int rc, n;

	if (!w || !out)
		return tb_error_set(TB_EINVAL, "hist_log_writer_open: NULL "
				  "argument");
	*w = NULL;
	if (!(max_unit_ratio > 0) || !isfinite(max_unit_ratio) ||
	    !isfinite(start_time_sec) || start_time_sec < 0)
		return tb_error_set(TB_EINVAL, "hist_log_writer_open: start time "
				  "%g or max unit ratio %g out of range",
				  start_time_sec, max_unit_ratio);
	/* Java's Date.toString(), in UTC: "Tue Dec 01 10:00:00 UTC 2020". */
	secs = (time_t)start_time_sec;
	if (gmtime_r(&secs, &tm))
		strftime(date, sizeof(date), "%a %b %d %H:%M:%S UTC %Y", &tm);
	rc = c_numeric_enter(&loc);
	if (rc)
		return rc;
	fixed_java(start, sizeof(start), start_time_sec, 3);
	n = fprintf(out, "#[Histogram log format version " LOG_FORMAT_VERSION
		    "]\n#[StartTime: %s (seconds since epoch), %s]\n"
		    LOG_LEGEND "\n", start, date);
	c_numeric_leave(&loc);
	if (n < 0)
		return tb_error_set(TB_EIO, "hist_log_writer_open: write failed");
	*w = malloc(sizeof(**w));
	if (!*w)
		return tb_error_set(TB_ENOMEM, "hist_log_writer_open: out of "
				  "memory");
	(*w)->out = out;
	(*w)->max_unit_ratio = max_unit_ratio;
	return 0;
}

int tb_hist_log_writer_comment(tb_hist_log_writer_t *w, const char *text)
{
	if (!w || !text || strchr(text, '\n'))
		return tb_error_set(TB_EINVAL, "hist_log_writer_comment: NULL or "
				  "multi-line comment");
	if (fprintf(w->out, "#%s\n", text) < 0)
		return tb_error_set(TB_EIO, "hist_log_writer_comment: write "
				  "failed");
	return 0;
}

int tb_hist_log_writer_write(tb_hist_log_writer_t *w, const char *tag,
			     double start_sec, double length_sec,
			     const tb_hist_t *h)
{
	uint8_t *bin;
	size_t bin_len;
	char *text;
	c_numeric_t loc;
	int rc, n;

	if (!w || !h)
		return tb_error_set(TB_EINVAL, "hist_log_write: NULL argument");
	if (tag && (strlen(tag) >= TB_HIST_TAG_MAX ||
		    strpbrk(tag, ", \t\r\n")))
		return tb_error_set(TB_EINVAL, "hist_log_write: tag '%.80s' is "
				  "too long or holds ',' or white space", tag);
	if (!isfinite(start_sec) || !isfinite(length_sec))
		return tb_error_set(TB_EINVAL, "hist_log_write: times must be "
				  "finite");
	rc = tb_hist_encode(h, &bin, &bin_len);
	if (rc)
		return rc;
	text = malloc(4 * ((bin_len + 2) / 3) + 1);
	if (!text) {
		free(bin);
		return tb_error_set(TB_ENOMEM, "hist_log_write: out of memory");
	}
	base64_encode(bin, bin_len, text);
	free(bin);
	rc = c_numeric_enter(&loc);
	if (!rc) {
		char start[NUM_MAX], length[NUM_MAX], max[NUM_MAX];

		fixed_java(start, sizeof(start), start_sec, 3);
		fixed_java(length, sizeof(length), length_sec, 3);
		fixed_java(max, sizeof(max),
			   (double)tb_hist_max(h) / w->max_unit_ratio, 3);
		n = fprintf(w->out, "%s%s%s%s,%s,%s,%s\n",
			    tag && *tag ? "Tag=" : "", tag && *tag ? tag : "",
			    tag && *tag ? "," : "", start, length, max, text);
		c_numeric_leave(&loc);
		if (n < 0)
			rc = tb_error_set(TB_EIO, "hist_log_write: write failed");
	}
	free(text);
	return rc;
}

int tb_hist_log_writer_close(tb_hist_log_writer_t *w)
{
	int rc = 0;

	if (!w)
		return 0;
	if (fflush(w->out) != 0)
		rc = tb_error_sys(errno, "hist_log_writer_close: flush");
	free(w);
	return rc;
}

struct tb_hist_log_reader {
	FILE *in;
	char *line;
	size_t cap;
	long lineno;
	double start_time;
	double base_time;
	locale_t c; /* for strtod_l: the log's numbers are C-locale */
};

int tb_hist_log_reader_open(tb_hist_log_reader_t **r, FILE *in)
{
	tb_hist_log_reader_t *n;

	if (!r || !in)
		return tb_error_set(TB_EINVAL, "hist_log_reader_open: NULL "
				  "argument");
	*r = NULL;
	n = calloc(1, sizeof(*n));
	if (!n)
		return tb_error_set(TB_ENOMEM, "hist_log_reader_open: out of "
				  "memory");
	n->c = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
	if (!n->c) {
		free(n);
		return tb_error_sys(errno, "hist_log_reader_open: newlocale(C)");
	}
	n->in = in;
	n->start_time = NAN;
	n->base_time = NAN;
	*r = n;
	return 0;
}

void tb_hist_log_reader_close(tb_hist_log_reader_t *r)
{
	if (!r)
		return;
	freelocale(r->c);
	free(r->line);
	free(r);
}

double tb_hist_log_reader_start_time(const tb_hist_log_reader_t *r)
{
	return r->start_time;
}

double tb_hist_log_reader_base_time(const tb_hist_log_reader_t *r)
{
	return r->base_time;
}

/* Parses a finite number ending at `stop`; advances *p past the stop. */
static int parse_field(tb_hist_log_reader_t *r, char **p, char stop,
		       double *v, const char *name)
{
	char *end;

	*v = strtod_l(*p, &end, r->c);
	if (end == *p || *end != stop || !isfinite(*v))
		return tb_error_set(TB_EFORMAT, "bad %s field", name);
	*p = end + 1;
	return 0;
}

/* A "#[...]" line: takes in the times and checks the format version. */
static int parse_header(tb_hist_log_reader_t *r, const char *line)
{
	static const char version[] = "#[Histogram log format version ";
	static const char start[] = "#[StartTime: ";
	static const char base[] = "#[BaseTime: ";
	char *end;

	if (!strncmp(line, version, sizeof(version) - 1)) {
		const char *v = line + sizeof(version) - 1;

		if (v[0] != '1' || v[1] != '.')
			return tb_error_set(TB_EFORMAT, "unsupported log format "
					  "version '%.20s'", v);
	} else if (!strncmp(line, start, sizeof(start) - 1)) {
		double t = strtod_l(line + sizeof(start) - 1, &end, r->c);

		if (end == line + sizeof(start) - 1 || !isfinite(t))
			return tb_error_set(TB_EFORMAT, "bad StartTime");
		r->start_time = t;
	} else if (!strncmp(line, base, sizeof(base) - 1)) {
		double t = strtod_l(line + sizeof(base) - 1, &end, r->c);

		if (end == line + sizeof(base) - 1 || !isfinite(t))
			return tb_error_set(TB_EFORMAT, "bad BaseTime");
		r->base_time = t;
	}
	return 0;
}

/* "[Tag=t,]start,length,max,base64" into `e`. */
static int parse_interval(tb_hist_log_reader_t *r, char *line, size_t len,
			  tb_hist_log_entry_t *e)
{
	char *p = line;
	uint8_t *bin;
	size_t b64_len, bin_len = 0;
	int rc;

	if (!strncmp(p, "Tag=", 4)) {
		char *comma = strchr(p + 4, ',');
		size_t tag_len;

		if (!comma)
			return tb_error_set(TB_EFORMAT, "tag without a ','");
		tag_len = (size_t)(comma - (p + 4));
		if (tag_len >= TB_HIST_TAG_MAX)
			return tb_error_set(TB_EFORMAT, "tag longer than %d "
					  "bytes", TB_HIST_TAG_MAX - 1);
		memcpy(e->tag, p + 4, tag_len);
		e->tag[tag_len] = '\0';
		p = comma + 1;
	}
	if ((rc = parse_field(r, &p, ',', &e->start_sec, "StartTimestamp")) ||
	    (rc = parse_field(r, &p, ',', &e->length_sec, "Interval_Length")) ||
	    (rc = parse_field(r, &p, ',', &e->max, "Interval_Max")))
		return rc;
	b64_len = len - (size_t)(p - line);
	bin = malloc(b64_len / 4 * 3 + 1);
	if (!bin)
		return tb_error_set(TB_ENOMEM, "out of memory");
	rc = base64_decode(p, b64_len, bin, &bin_len);
	if (!rc)
		rc = tb_hist_decode(bin, bin_len, &e->hist);
	free(bin);
	return rc;
}

int tb_hist_log_read(tb_hist_log_reader_t *r, tb_hist_log_entry_t *e)
{
	if (!r || !e)
		return tb_error_set(TB_EINVAL, "hist_log_read: NULL argument");
	memset(e, 0, sizeof(*e));
	for (;;) {
		ssize_t n = getline(&r->line, &r->cap, r->in);
		int rc;

		if (n < 0) {
			if (ferror(r->in))
				return tb_error_set(TB_EIO, "hist_log_read: read "
						  "error after line %ld",
						  r->lineno);
			return 0;
		}
		r->lineno++;
		while (n > 0 && (r->line[n - 1] == '\n' ||
				 r->line[n - 1] == '\r' ||
				 r->line[n - 1] == ' '))
			r->line[--n] = '\0';
		if (n == 0)
			continue;
		if (memchr(r->line, '\0', (size_t)n))
			rc = tb_error_set(TB_EFORMAT, "NUL byte in line");
		else if (r->line[0] == '#')
			rc = parse_header(r, r->line);
		else if (!strncmp(r->line, "\"StartTimestamp\"", 16))
			continue; /* the legend */
		else if ((rc = parse_interval(r, r->line, (size_t)n, e)) == 0)
			return 1;
		if (rc) {
			tb_hist_free(e->hist);
			memset(e, 0, sizeof(*e));
			return tb_error_prepend(rc, "hist log line %ld",
					      r->lineno);
		}
	}
}

/* ============================================================== recorder */

/* Busy-wait rounds before the sampler starts yielding the core: a record
 * call lasts a few ns, so 100 pauses (~1-10 us) cover it unless the
 * recording thread was preempted, when only yielding helps. */
#define RECORDER_SPIN_MAX 100

int tb_hist_recorder_init(tb_hist_recorder_t **rec, int64_t lowest_discernible,
			  int64_t highest_trackable, int significant_digits)
{
	tb_hist_recorder_t *r;
	int rc;

	if (!rec)
		return tb_error_set(TB_EINVAL, "hist_recorder_init: NULL result "
				  "pointer");
	*rec = NULL;
	if (posix_memalign((void **)&r, TB_CACHE_LINE, sizeof(*r)))
		return tb_error_set(TB_ENOMEM, "hist_recorder_init: out of "
				  "memory");
	memset(r, 0, sizeof(*r));
	rc = tb_hist_init(&r->active, lowest_discernible, highest_trackable,
			  significant_digits);
	if (!rc)
		rc = tb_hist_init(&r->inactive, lowest_discernible,
				  highest_trackable, significant_digits);
	if (rc) {
		tb_hist_recorder_free(r);
		return rc;
	}
	*rec = r;
	return 0;
}

void tb_hist_recorder_free(tb_hist_recorder_t *rec)
{
	if (!rec)
		return;
	tb_hist_free(rec->active);
	tb_hist_free(rec->inactive);
	free(rec);
}

int tb_hist_recorder_sample(tb_hist_recorder_t *rec, tb_hist_t *out)
{
	tb_hist_t *old;
	uint64_t e;
	int rounds = 0;

	if (!rec || !out)
		return tb_error_set(TB_EINVAL, "hist_recorder_sample: NULL "
				  "argument");
	/* X1: publish the empty histogram (reset before, so the recorder's L1
	 * sees it empty); take back the one being recorded into. */
	old = __atomic_exchange_n(&rec->active, rec->inactive,
				  __ATOMIC_SEQ_CST);
	/* A1: pairs with R1 (and S1) in tb_hist_recorder_record_n.  Seq-cst
	 * so that it is ordered after X1 against the recorder's S1/L1. */
	e = __atomic_load_n(&rec->epoch, __ATOMIC_SEQ_CST);
	if (e & 1) {
		/* A2: pairs with R1: the call in flight may hold `old`. */
		while (__atomic_load_n(&rec->epoch, __ATOMIC_ACQUIRE) == e) {
			if (rounds < RECORDER_SPIN_MAX) {
				rounds++;
				tb_cpu_relax();
			} else {
				sched_yield();
			}
		}
	}
	/* `old` is ours now: no record call can reach it until X1 of the
	 * next sample. */
	tb_hist_reset(out);
	tb_hist_merge(out, old);
	tb_hist_reset(old);
	rec->inactive = old;
	return 0;
}
