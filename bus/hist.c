/*
 * hist.c - latency histograms: layout, set-up, recording, queries, iteration
 * and merge.  The text outputs are in hist_text.c, the binary encoding in
 * hist_encoding.c, the interval log in hist_log.c and the lock-free interval
 * recorder in hist_recorder.c (HdrHistogram's C library splits the same way).
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
 * is the counts array as is).  The code is written from the published
 * description of the algorithm and formats.
 */
#include <tickbus/hist.h>

#include "bus/barrier.h"
#include "bus/error.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* ==================================================== merge, comparison */

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

/* The three counters may be read while another thread records (a monitor
 * peeking at a live histogram).  Relaxed and unpaired: they only promise an
 * untorn value, as the relaxed stores of tb_hist_add_ (hist.h) write it;
 * no other data is read on the strength of them. */
int64_t tb_hist_count(const tb_hist_t *h)
{
	return tb_atomic_plain_load_relaxed(&h->total_count);
}

int64_t tb_hist_overflow(const tb_hist_t *h)
{
	return tb_atomic_plain_load_relaxed(&h->overflow_count);
}

int64_t tb_hist_underflow(const tb_hist_t *h)
{
	return tb_atomic_plain_load_relaxed(&h->underflow_count);
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
