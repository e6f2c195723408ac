/*
 * hist_text.c - the histogram as text: the percentile distribution in
 * HdrHistogram's .hgrm format and as CSV, and the number formatting they
 * share with the interval log (hist_text.h).
 *
 * The distribution is printed from the public iterator alone, so this file
 * knows nothing of the counts array's layout (hist.c).  Every number is
 * printed in the C locale with Java's rounding, because the point of the
 * format is that HdrHistogram's plotter and log processor read it and
 * tickbus's files compare equal, digit for digit, with theirs.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* newlocale, uselocale */
#endif

#include "bus/hist_text.h"

#include <tickbus/hist.h>

#include "bus/error.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================= numbers as text */

/* Numbers in files are written and read in the C locale, whatever the
 * process chose with setlocale (a "," decimal point would break them). */
int tb_hist_text_locale_enter(tb_hist_text_locale_t *s)
{
	s->c = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
	if (!s->c)
		return tb_error_sys(errno, "hist: newlocale(C)");
	s->saved = uselocale(s->c);
	return 0;
}

void tb_hist_text_locale_leave(tb_hist_text_locale_t *s)
{
	uselocale(s->saved);
	freelocale(s->c);
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
void tb_hist_text_fixed(char *out, size_t cap, double v, int prec)
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

/* ========================================================= distribution */

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

typedef struct dist_line {
	double value;
	double level;    /* 0..100 */
	int64_t cumulative;
} dist_line_t;

static int put_line(FILE *out, bool csv, int digits, const dist_line_t *l)
{
	char v[TB_HIST_TEXT_NUM_MAX], p[TB_HIST_TEXT_NUM_MAX];
	char inv[TB_HIST_TEXT_NUM_MAX];
	bool last = l->level == 100.0;
	int n;

	tb_hist_text_fixed(v, sizeof(v), l->value, digits);
	tb_hist_text_fixed(p, sizeof(p), l->level / 100.0, 12);
	if (!last)
		tb_hist_text_fixed(inv, sizeof(inv),
				   1.0 / (1.0 - l->level / 100.0), 2);
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
 * Walks the non-empty buckets in order (tb_hist_iter); at each prints one
 * line per percentile level its cumulative share has reached (so a heavy
 * bucket repeats), and after the last sample one line at 100%.
 */
static int put_distribution(const tb_hist_t *h, FILE *out, double unit_ratio,
			    int ticks, bool csv)
{
	int64_t total = h->total_count, cum = 0;
	int digits = h->significant_digits;
	dist_line_t l = { 0, 0, 0 };
	tb_hist_iter_t it;
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
	tb_hist_iter_init(&it, h);
	while (cum < total && tb_hist_iter_next(&it)) {
		double share;

		cum += it.count;
		share = (100.0 * (double)cum) / (double)total;
		l.value = (double)it.value_hi / unit_ratio;
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
	char mean[TB_HIST_TEXT_NUM_MAX], sd[TB_HIST_TEXT_NUM_MAX];
	char max[TB_HIST_TEXT_NUM_MAX];
	tb_hist_text_locale_t loc;
	int d, rc;

	rc = check_output_args(h, out, unit_ratio, &ticks_per_half,
			       "hist_write_hgrm");
	if (rc || (rc = tb_hist_text_locale_enter(&loc)))
		return rc;
	d = h->significant_digits;
	tb_hist_text_fixed(mean, sizeof(mean), tb_hist_mean(h) / unit_ratio, d);
	tb_hist_text_fixed(sd, sizeof(sd), tb_hist_stddev(h) / unit_ratio, d);
	tb_hist_text_fixed(max, sizeof(max), (double)tb_hist_max(h) / unit_ratio,
			   d);
	if (put_distribution(h, out, unit_ratio, ticks_per_half, false) ||
	    fprintf(out, "#[Mean    = %12s, StdDeviation   = %12s]\n", mean,
		    sd) < 0 ||
	    fprintf(out, "#[Max     = %12s, Total count    = %12" PRId64 "]\n",
		    max, h->total_count) < 0 ||
	    fprintf(out, "#[Buckets = %12d, SubBuckets     = %12d]\n",
		    h->bucket_count, h->sub_bucket_count) < 0)
		rc = tb_error_set(TB_EIO, "hist_write_hgrm: write failed");
	tb_hist_text_locale_leave(&loc);
	return rc;
}

int tb_hist_write_csv(const tb_hist_t *h, FILE *out, double unit_ratio,
		      int ticks_per_half)
{
	tb_hist_text_locale_t loc;
	int rc;

	rc = check_output_args(h, out, unit_ratio, &ticks_per_half,
			       "hist_write_csv");
	if (rc || (rc = tb_hist_text_locale_enter(&loc)))
		return rc;
	if (put_distribution(h, out, unit_ratio, ticks_per_half, true))
		rc = tb_error_set(TB_EIO, "hist_write_csv: write failed");
	tb_hist_text_locale_leave(&loc);
	return rc;
}
