/*
 * hist.h - latency histograms with bounded relative error (HdrHistogram-style).
 *
 * A tb_hist_t counts int64 values (nanoseconds, usually) in log-linear
 * buckets: the range [lowest_discernible, highest_trackable] is cut into
 * power-of-two "buckets", and each bucket into the same number of linear
 * "sub-buckets", so that every value is stored with a relative error below
 * 10^-significant_digits.  Three digits from 1 ns to one hour (3.6e12)
 * take 32 buckets, 33 * 1024 counts, 264 KiB.  Everything is allocated
 * once, in tb_hist_init; recording is an index computation and one add, in
 * constant time.
 *
 * The layout and the on-disk formats follow Gil Tene's HdrHistogram, so that
 * its tools read what tickbus writes:
 *   - tb_hist_write_hgrm: the percentile distribution (".hgrm") exactly as
 *     HdrHistogram's outputPercentileDistribution prints it, which its online
 *     plotter reads;
 *   - tb_hist_write_csv: the same distribution as CSV;
 *   - tb_hist_log_*: the interval histogram log (format 1.3), each line a
 *     base64 V2 compressed histogram, and a reader that checks every length.
 *
 * Out-of-range values are never dropped: a value above highest_trackable is
 * counted in the top bucket and in tb_hist_overflow(); a negative value is
 * counted as 0 and in tb_hist_underflow(); a value in [0, lowest) lands in the
 * first bucket, as in HdrHistogram.  The overflow and underflow counters
 * live only in memory (the log format has no field for them).
 *
 * Threads:
 *   | object             | who may call what                                 |
 *   |--------------------|---------------------------------------------------|
 *   | tb_hist_t          | one thread at a time, all functions               |
 *   | tb_hist_recorder_t | tb_hist_recorder_record*: one recording thread    |
 *   |                    | tb_hist_recorder_sample: one sampling thread      |
 *   |                    | init/free: while neither of the others runs       |
 *
 * Results: set-up, output and decoding calls return 0 (or a count) or a
 * negative TB_* code from tickbus_err.h, with a message in tb_errmsg(); the
 * "Errors:" line of each lists the codes it can return ("none": it cannot
 * fail).  Recording returns nothing and cannot fail.
 *
 * Where each part lives (this one header declares them all, its sections in
 * this order):
 *   set-up, recording, queries, iteration, merge   bus/hist.c
 *   output (.hgrm, CSV)                             bus/hist_text.c
 *   binary encoding (V2, and its base64)            bus/hist_encoding.c
 *   interval histogram log                          bus/hist_log.c
 *   recorder                                        bus/hist_recorder.c
 *   inline internals (record, recorder record)      here, at the end
 *
 * This header is public and compiles as C++ as well as C11, which is why it
 * uses the GCC __atomic builtins rather than <stdatomic.h> (barrier.h, which
 * is internal): they give the same orderings and exist in both languages.
 * Each one is labelled with the operation it pairs with, as barrier.h's are.
 */
#ifndef TB_HIST_H
#define TB_HIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Default percentile ticks per half distance of the .hgrm and CSV outputs:
 * 5 lines from 0% to 50%, 5 more to 75%, 5 to 87.5%, ... as HdrHistogram. */
#define TB_HIST_TICKS_DEFAULT 5

/* Longest tag of an interval log line, terminating NUL included. */
#define TB_HIST_TAG_MAX 64

typedef struct tb_hist tb_hist_t;
typedef struct tb_hist_recorder tb_hist_recorder_t;

/* ---------------------------------------------- set-up, teardown (hist.c) */

/*
 * Allocates an empty histogram tracking [lowest_discernible,
 * highest_trackable] with `significant_digits` (1..5) decimal digits of
 * precision.  lowest_discernible >= 1 is the finest resolution wanted (1 for
 * ns-exact); highest_trackable >= 2 * lowest_discernible.  Returns 0; *h
 * is NULL on failure.
 * Errors: TB_EINVAL (h NULL, digits not in 1..5, lowest below 1, highest
 * below 2 * lowest, or digits above lowest needing more than 63 bits),
 * TB_ENOMEM.
 */
int tb_hist_init(tb_hist_t **h, int64_t lowest_discernible,
		 int64_t highest_trackable, int significant_digits);

/* Frees `h`; NULL is a no-op.  Errors: none. */
void tb_hist_free(tb_hist_t *h);

/* Allocates *dst as an exact copy of `src` (layout, counts and counters).
 * Returns 0.  Errors: TB_EINVAL (dst or src NULL), TB_ENOMEM. */
int tb_hist_copy(tb_hist_t **dst, const tb_hist_t *src);

/* Zeroes every count and counter; keeps the layout.  Errors: none. */
void tb_hist_reset(tb_hist_t *h);

/*
 * Adds every count of `src` to `dst`.  With the same lowest and digits (any
 * highest not above dst's) this is an add per cell; otherwise each src bucket
 * is re-recorded at its lowest equivalent value, values beyond dst's range
 * clamping as tb_hist_record does.  Returns 0.
 * Errors: TB_EINVAL (dst or src NULL).
 */
int tb_hist_merge(tb_hist_t *dst, const tb_hist_t *src);

/* ----------------------------------------------------- recording (hist.c) */

static inline void tb_hist_record_n(tb_hist_t *h, int64_t value,
				    int64_t count);

/* Counts `value` once.  Constant time, never fails (see record_n). */
static inline void tb_hist_record(tb_hist_t *h, int64_t value);

/*
 * Records `value`, then, when it exceeds `expected_interval` (> 0), the
 * samples a stalled load generator failed to take meanwhile: value -
 * interval, value - 2 * interval, ... down to expected_interval
 * (coordinated-omission correction, as HdrHistogram's
 * recordValueWithExpectedInterval).  Time is proportional to the number of
 * buckets the missing samples span, not to their count.  Not for the hot
 * path.  Errors: none.
 */
void tb_hist_record_corrected(tb_hist_t *h, int64_t value,
			      int64_t expected_interval);

/* ------------------------------------------------------- queries (hist.c) */

/* The queries read the histogram and cannot fail: Errors: none, for each. */

int64_t tb_hist_count(const tb_hist_t *h);     /* all recorded samples */
int64_t tb_hist_overflow(const tb_hist_t *h);  /* samples > highest */
int64_t tb_hist_underflow(const tb_hist_t *h); /* negative samples */

/* Lowest equivalent value of the smallest recorded sample; 0 when empty. */
int64_t tb_hist_min(const tb_hist_t *h);
/* Highest equivalent value of the largest recorded sample; 0 when empty. */
int64_t tb_hist_max(const tb_hist_t *h);
/* Mean and population standard deviation, each sample taken at the middle of
 * its bucket (HdrHistogram's medianEquivalentValue); 0 when empty. */
double tb_hist_mean(const tb_hist_t *h);
double tb_hist_stddev(const tb_hist_t *h);

/*
 * The value at percentile `p` (clamped to 0..100): the highest equivalent
 * value of the first bucket at which the cumulative count reaches
 * ceil(p / 100 * count), p being first nudged down one ulp against rounding
 * up (as HdrHistogram).  p = 0 gives tb_hist_min, p = 100 tb_hist_max.
 * Returns 0 when empty.
 */
int64_t tb_hist_value_at_percentile(const tb_hist_t *h, double p);

/* The count of the bucket holding `value` (clamped as recording does). */
int64_t tb_hist_count_at(const tb_hist_t *h, int64_t value);

/* Bucket arithmetic: the values that `value` cannot be told apart from are
 * [lowest_equivalent, highest_equivalent]; `equivalent_range` is their
 * number, `median_equivalent` their middle. */
int64_t tb_hist_lowest_equivalent(const tb_hist_t *h, int64_t value);
int64_t tb_hist_highest_equivalent(const tb_hist_t *h, int64_t value);
int64_t tb_hist_median_equivalent(const tb_hist_t *h, int64_t value);
int64_t tb_hist_equivalent_range(const tb_hist_t *h, int64_t value);
bool tb_hist_values_equivalent(const tb_hist_t *h, int64_t a, int64_t b);

/* The layout, as given to tb_hist_init and as derived from it. */
int64_t tb_hist_lowest_discernible(const tb_hist_t *h);
int64_t tb_hist_highest_trackable(const tb_hist_t *h);
int tb_hist_significant_digits(const tb_hist_t *h);
int tb_hist_bucket_count(const tb_hist_t *h);
int tb_hist_sub_bucket_count(const tb_hist_t *h);

/* True when both have the same layout and the same counts (the overflow and
 * underflow counters, which no file carries, are not compared). */
bool tb_hist_equal(const tb_hist_t *a, const tb_hist_t *b);

/* ----------------------------------------------------- iteration (hist.c) */

/* One non-empty bucket, as visited by tb_hist_iter_next. */
typedef struct tb_hist_iter {
	int64_t value_lo;    /* lowest value counted in this bucket */
	int64_t value_hi;    /* highest value counted in this bucket */
	int64_t count;       /* samples in this bucket (> 0) */
	int64_t cumulative;  /* samples in this bucket and all below it */
	const tb_hist_t *hist_;  /* private */
	int32_t next_index_;     /* private */
} tb_hist_iter_t;

/* Positions `it` before the first bucket of `h`.  `h` must not change while
 * it is iterated.  Errors: none. */
void tb_hist_iter_init(tb_hist_iter_t *it, const tb_hist_t *h);

/* Moves to the next non-empty bucket, in ascending value order; returns false
 * (leaving `it` unchanged) when there is none.  Errors: none. */
bool tb_hist_iter_next(tb_hist_iter_t *it);

/* --------------------------------------------------- output (hist_text.c) */

/*
 * Writes the percentile distribution in HdrHistogram's .hgrm text format:
 * values divided by `unit_ratio` (1000.0 prints microseconds from ns data),
 * `ticks_per_half` lines per halving of the distance to 100% (0 means
 * TB_HIST_TICKS_DEFAULT), then the Mean/StdDeviation, Max/Total count and
 * Buckets/SubBuckets footer.  Numbers use the C locale whatever the process
 * locale.  Returns 0.
 * Errors: TB_EINVAL (h or out NULL, unit_ratio not a positive number,
 * ticks_per_half negative or above 1000000), TB_ENOMEM (no C locale
 * object), TB_EIO (a write failed).
 */
int tb_hist_write_hgrm(const tb_hist_t *h, FILE *out, double unit_ratio,
		       int ticks_per_half);

/* The same distribution as CSV: a "value,percentile,total_count,inverse"
 * header, then one line per tick; the last line's inverse is "Infinity".
 * Returns 0.  Errors: as tb_hist_write_hgrm. */
int tb_hist_write_csv(const tb_hist_t *h, FILE *out, double unit_ratio,
		      int ticks_per_half);

/* -------------------------------------- binary encoding (hist_encoding.c) */

/*
 * Encodes `h` as HdrHistogram's V2 compressed histogram: big-endian cookie
 * 0x1c849314 and length, then zlib-deflated V2 (cookie 0x1c849313, payload
 * length, normalizing offset, digits, lowest, highest, ratio 1.0, ZigZag
 * LEB128 counts, zero runs as negative counts).  *buf is malloc'd, to be
 * freed by the caller.  Returns 0.
 * Errors: TB_EINVAL (a NULL argument, or zlib's compress2 failing other
 * than for memory), TB_ENOMEM.
 */
int tb_hist_encode(const tb_hist_t *h, uint8_t **buf, size_t *len);

/*
 * Decodes what tb_hist_encode (or HdrHistogram) wrote into a new histogram.
 * Every length is checked: bad cookie, truncation, bad zlib data, bad
 * parameters, counts past the end of the layout or trailing bytes give
 * TB_EFORMAT and a message saying which.  Returns 0; *h is NULL on failure.
 * Errors: TB_EINVAL (h NULL, or buf NULL with len > 0), TB_EFORMAT,
 * TB_ENOMEM.
 */
int tb_hist_decode(const void *buf, size_t len, tb_hist_t **h);

/* ------------------------------------ interval histogram log (hist_log.c) */

typedef struct tb_hist_log_writer tb_hist_log_writer_t;
typedef struct tb_hist_log_reader tb_hist_log_reader_t;

/*
 * Starts an interval log on `out` (left open by close): writes the format
 * version 1.3, the StartTime `start_time_sec` (seconds since the epoch) and
 * the column legend.  `max_unit_ratio` divides the Interval_Max column
 * (1e6: milliseconds from ns, HdrHistogram's default).  Returns 0.
 * Errors: TB_EINVAL (w or out NULL, start time negative or not finite,
 * max_unit_ratio not a positive number), TB_ENOMEM, TB_EIO (the header's
 * write failed).
 */
int tb_hist_log_writer_open(tb_hist_log_writer_t **w, FILE *out,
			    double start_time_sec, double max_unit_ratio);

/* Writes "#<text>" as a comment line.  Returns 0.
 * Errors: TB_EINVAL (w or text NULL, or text holds a newline), TB_EIO. */
int tb_hist_log_writer_comment(tb_hist_log_writer_t *w, const char *text);

/*
 * Appends one interval: "[Tag=<tag>,]start,length,max,<base64 histogram>".
 * Times are seconds, relative to StartTime or absolute as the caller
 * chooses (HdrHistogram's readers accept both).  `tag` may be NULL; else
 * it must be shorter than TB_HIST_TAG_MAX and hold no ',' or white space.
 * Returns 0.
 * Errors: TB_EINVAL (w or h NULL, a bad tag, times not finite; or zlib
 * failing, as tb_hist_encode), TB_ENOMEM, TB_EIO.
 */
int tb_hist_log_writer_write(tb_hist_log_writer_t *w, const char *tag,
			     double start_sec, double length_sec,
			     const tb_hist_t *h);

/* Frees the writer and flushes its stream (which stays open); NULL is a
 * no-op.  Returns 0; the writer is freed either way.
 * Errors: the flush's errno as tb_error_sys maps it: TB_EIO, or TB_ESYS
 * (e.g. ENOSPC). */
int tb_hist_log_writer_close(tb_hist_log_writer_t *w);

/* One interval read back from a log. */
typedef struct tb_hist_log_entry {
	char tag[TB_HIST_TAG_MAX]; /* "" when the line has no tag */
	double start_sec;          /* StartTimestamp column */
	double length_sec;         /* Interval_Length column */
	double max;                /* Interval_Max column, as written */
	tb_hist_t *hist;           /* the caller's, to tb_hist_free */
} tb_hist_log_entry_t;

/* Opens a reader on `in` (left open by close).  Returns 0.
 * Errors: TB_EINVAL (r or in NULL), TB_ENOMEM. */
int tb_hist_log_reader_open(tb_hist_log_reader_t **r, FILE *in);

/*
 * Reads up to the next interval line, taking in the header lines on the way.
 * Returns 1 with `e` filled, 0 at end of input, or an error; on TB_EFORMAT
 * the bad line is consumed, so reading may go on.
 * Errors: TB_EINVAL (r or e NULL), TB_EIO (a read error), TB_EFORMAT (a bad
 * line: the message gives its number and what is wrong), TB_ENOMEM.
 */
int tb_hist_log_read(tb_hist_log_reader_t *r, tb_hist_log_entry_t *e);

/* The "#[StartTime: ...]" and "#[BaseTime: ...]" seen so far, in seconds
 * since the epoch, or NaN when there has been none.  Errors: none. */
double tb_hist_log_reader_start_time(const tb_hist_log_reader_t *r);
double tb_hist_log_reader_base_time(const tb_hist_log_reader_t *r);

/* Frees the reader (its stream stays open); NULL is a no-op.
 * Errors: none. */
void tb_hist_log_reader_close(tb_hist_log_reader_t *r);

/* ------------------------ recorder: lock-free intervals (hist_recorder.c) */

/*
 * A recorder lets one hot thread record while another takes interval
 * snapshots, without a lock on the recording side (a writer/reader phaser
 * with one writer).  Allocates its two histograms with the given layout.
 * Returns 0; *rec is NULL on failure.
 * Errors: TB_EINVAL (rec NULL, or a layout tb_hist_init refuses),
 * TB_ENOMEM.
 */
int tb_hist_recorder_init(tb_hist_recorder_t **rec, int64_t lowest_discernible,
			  int64_t highest_trackable, int significant_digits);

/* Frees the recorder and its histograms; NULL is a no-op.  Errors: none. */
void tb_hist_recorder_free(tb_hist_recorder_t *rec);

static inline void tb_hist_recorder_record_n(tb_hist_recorder_t *rec,
					     int64_t value, int64_t count);
static inline void tb_hist_recorder_record(tb_hist_recorder_t *rec,
					   int64_t value);

/*
 * Sampling thread: replaces *out's counts with everything recorded since the
 * previous sample (or init), and starts a new interval.  Waits at most for
 * one record call in flight to finish (spinning a bounded number of times,
 * then sched_yield()ing).  `out` may have any layout.  Returns 0.
 * Errors: TB_EINVAL (rec or out NULL).
 */
int tb_hist_recorder_sample(tb_hist_recorder_t *rec, tb_hist_t *out);

/* =====================================================================
 * Inline internals.  Everything below is ABI: whatever is inlined into a
 * caller's binary reads these fields.  Do not touch them from outside.
 * ===================================================================== */

struct tb_hist {
	/* Read or written by every record. */
	int64_t *counts;            /* counts_len cells, same allocation */
	int64_t total_count;
	int64_t highest_trackable;
	uint64_t sub_bucket_mask;   /* values below it go to bucket 0 */
	int32_t unit_magnitude;     /* log2 of the finest resolution */
	int32_t sub_bucket_half_count_magnitude;
	int32_t sub_bucket_half_count;
	int32_t leading_zero_count_base;
	/* Rarely touched. */
	int64_t overflow_count;
	int64_t underflow_count;
	int64_t lowest_discernible;
	int32_t significant_digits;
	int32_t sub_bucket_count;
	int32_t bucket_count;
	int32_t counts_len;
};

/*
 * Index of the counts cell of `v` (0 <= v <= highest_trackable).  The bucket
 * is found from the position of v's top bit (one clz), the sub-bucket is v
 * shifted down to the bucket's resolution; buckets after the first use only
 * their upper half of sub-buckets, the lower half being the previous bucket.
 */
static inline int32_t tb_hist_index_(const tb_hist_t *h, int64_t v)
{
	int32_t bucket = h->leading_zero_count_base -
			 __builtin_clzll((uint64_t)v | h->sub_bucket_mask);
	int32_t sub = (int32_t)((uint64_t)v >> (bucket + h->unit_magnitude));

	return ((bucket + 1) << h->sub_bucket_half_count_magnitude) +
	       (sub - h->sub_bucket_half_count);
}

/* Single-writer add: a relaxed load and a relaxed store, not a locked
 * read-modify-write.  Atomic so that a reader peeking concurrently (a
 * monitor reading tb_hist_count) sees no torn value; plain moves on x86. */
static inline void tb_hist_add_(int64_t *cell, int64_t n)
{
	/* Relaxed, unpaired: the load reads this thread's own last store;
	 * the store pairs with no acquire, only with the relaxed peeks of
	 * tb_hist_count/overflow/underflow (hist.c), which order nothing on
	 * it.  A sampler's view is ordered by the recorder's R1 instead. */
	__atomic_store_n(cell, __atomic_load_n(cell, __ATOMIC_RELAXED) + n,
			 __ATOMIC_RELAXED);
}

/* Out-of-range value: counts it as overflow or underflow, returns the value
 * to record instead. */
static inline int64_t tb_hist_clamp_(tb_hist_t *h, int64_t value,
				     int64_t count)
{
	if (value < 0) {
		tb_hist_add_(&h->underflow_count, count);
		return 0;
	}
	tb_hist_add_(&h->overflow_count, count);
	return h->highest_trackable;
}

/*
 * Counts `value` `count` (>= 0) times.
 * Hot path: constant time; no allocation, lock, system call or failure.
 */
static inline void tb_hist_record_n(tb_hist_t *h, int64_t value,
				    int64_t count)
{
	/* One unsigned compare catches both negative and too-large values. */
	if (__builtin_expect((uint64_t)value > (uint64_t)h->highest_trackable,
			     0))
		value = tb_hist_clamp_(h, value, count);
	tb_hist_add_(&h->counts[tb_hist_index_(h, value)], count);
	tb_hist_add_(&h->total_count, count);
}

/* Hot path: constant time; no allocation, lock, system call or failure. */
static inline void tb_hist_record(tb_hist_t *h, int64_t value)
{
	tb_hist_record_n(h, value, 1);
}

/*
 * The recorder (see the essay in hist_recorder.c for the full argument).
 * `epoch` is odd while the recording thread is inside a record call; the
 * sampler swaps `active` and then waits for the epoch to move past an odd
 * value it saw.
 * The two words sit on their own cache lines: `epoch` is written by the
 * recorder on every call, `active` by the sampler once per interval.
 */
struct tb_hist_recorder {
	uint64_t epoch __attribute__((aligned(64)));   /* recorder writes */
	tb_hist_t *active __attribute__((aligned(64))); /* sampler writes */
	tb_hist_t *inactive;                           /* sampler only */
};

/*
 * Recording thread only.  Counts `value` `count` times into the current
 * interval.
 * Hot path: constant time; no allocation, lock or system call.  Costs one
 * locked instruction (the entering epoch store, which must be ordered
 * before the load of `active`).
 */
static inline void tb_hist_recorder_record_n(tb_hist_recorder_t *rec,
					     int64_t value, int64_t count)
{
	/* Relaxed, unpaired: only this thread writes epoch, so this reads
	 * back our own last store (R1 of the previous call). */
	uint64_t e = __atomic_load_n(&rec->epoch, __ATOMIC_RELAXED);
	tb_hist_t *h;

	/* S1: enter (odd).  Seq-cst, with L1 and X1/A1 in the sampler: either
	 * L1 sees the sampler's new histogram or A1 sees this odd epoch. */
	__atomic_store_n(&rec->epoch, e + 1, __ATOMIC_SEQ_CST);
	/* L1: pairs with X1 in tb_hist_recorder_sample (hist_recorder.c; the
	 * histogram it publishes was reset before X1). */
	h = __atomic_load_n(&rec->active, __ATOMIC_SEQ_CST);
	tb_hist_record_n(h, value, count);
	/* R1: leave (even); pairs with A1/A2 in tb_hist_recorder_sample, which
	 * then sees every count added above. */
	__atomic_store_n(&rec->epoch, e + 2, __ATOMIC_RELEASE);
}

/* Recording thread only.
 * Hot path: constant time; no allocation, lock or system call. */
static inline void tb_hist_recorder_record(tb_hist_recorder_t *rec,
					   int64_t value)
{
	tb_hist_recorder_record_n(rec, value, 1);
}

#ifdef __cplusplus
}
#endif
#endif
