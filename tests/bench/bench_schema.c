/*
 * bench_schema - the cost of the generated encoders and decoders
 * (tickbus_schema.h) on the hot path, against a floor.
 *
 * The floor is what any codec must do at least: copy the message's bytes.
 * Every loop walks SLOTS messages (about 72 KiB: in L2, as a busy feed's
 * recent messages are), so that no iteration reads what the previous one
 * just stored.  The figures are tb_md_quote_encode (struct -> wire),
 * tb_md_quote_decode (wire -> struct) and a BookLevelUpdate of 5 levels
 * decoded and iterated, each against the copy of the same bytes.  Variants
 * are interleaved over RUNS runs so that all see the same machine noise;
 * the median run is reported with its ratio to the floor.
 *
 * Instruction counts, free of machine noise: the run_* functions are not
 * inlined, so callgrind can count one of them alone, e.g.
 *   valgrind --tool=callgrind --toggle-collect=run_decode \
 *            build/bench/bench_schema 100000
 * and the total divided by RUNS x 100000 is the cost of one call
 * (2026-12: encode 19, decode 50, BookLevelUpdate of 5 levels 146).
 *
 * Not a test: it prints figures and exits 0 unless a check fails.
 * Usage: bench_schema [messages per run, default 20000000]
 * Output lines start with "bench schema" for tests/bench/run-bench.sh.
 */
#include "tickbus_schema.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RUNS 5
#define LEVELS 5
#define SLOTS 1024 /* power of two */
#define QLEN (TB_MD_HEADER_LEN + TB_MD_QUOTE_BLOCK_LENGTH)
#define BLEN (TB_MD_HEADER_LEN + TB_MD_BOOK_LEVEL_UPDATE_BLOCK_LENGTH + \
	      TB_MD_GROUP_HEADER_LEN + LEVELS * TB_MD_BOOK_LEVEL_UPDATE_LEVELS_BLOCK_LENGTH)

static tb_md_quote_t quotes[SLOTS];
static uint8_t wire[SLOTS][QLEN];
static uint8_t books[SLOTS][BLEN];
static uint8_t scratch[BLEN];

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Copies `len` bytes of each slot: the floor of a codec of that size.
 * Inlined with a constant `len`, as the codecs' copies are. */
static inline __attribute__((always_inline)) double run_copy(const uint8_t *src, size_t stride, size_t len, uint64_t n)
{
	uint64_t t0 = now_ns();

	for (uint64_t i = 0; i < n; i++) {
		memcpy(scratch, src + (i & (SLOTS - 1)) * stride, len);
		__asm__ __volatile__("" : : "r"(scratch) : "memory");
	}
	return (double)(now_ns() - t0) / (double)n;
}

static __attribute__((noinline)) double run_encode(uint64_t n)
{
	uint64_t t0 = now_ns();

	for (uint64_t i = 0; i < n; i++) {
		int64_t len = tb_md_quote_encode(wire[i & (SLOTS - 1)], QLEN,
						 &quotes[i & (SLOTS - 1)]);

		__asm__ __volatile__("" : : "r"(len) : "memory");
	}
	return (double)(now_ns() - t0) / (double)n;
}

static __attribute__((noinline)) double run_decode(uint64_t n, uint64_t *sum)
{
	tb_md_quote_t q;
	uint64_t t0 = now_ns();

	for (uint64_t i = 0; i < n; i++) {
		if (tb_md_quote_decode(wire[i & (SLOTS - 1)], QLEN, &q) < 0)
			abort();
		*sum += q.bid_qty;
	}
	return (double)(now_ns() - t0) / (double)n;
}

static __attribute__((noinline)) double run_book(uint64_t n, uint64_t *sum)
{
	tb_md_book_level_update_t m;
	tb_md_book_level_update_groups_t g;
	tb_md_book_level_update_levels_entry_t e;
	uint64_t t0 = now_ns();

	for (uint64_t i = 0; i < n; i++) {
		if (tb_md_book_level_update_decode(books[i & (SLOTS - 1)], BLEN,
						   &m, &g) < 0)
			abort();
		while (tb_md_book_level_update_levels_next(&g.levels, &e))
			*sum += e.qty;
	}
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
	uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 20000000ull;
	double fq[RUNS], fb[RUNS], enc[RUNS], dec[RUNS], bk[RUNS];
	double q_floor, b_floor, a, b, c;
	tb_md_book_level_update_levels_entry_t lv[LEVELS];
	tb_md_book_level_update_t m;
	uint64_t sum = 0;

	if (n == 0) {
		fprintf(stderr, "usage: bench_schema [messages per run]\n");
		return 2;
	}
	for (int s = 0; s < SLOTS; s++) {
		tb_md_quote_init(&quotes[s]);
		quotes[s].instrument_id = (uint32_t)s + 1;
		quotes[s].bid_px.mantissa = 101250000000 + s;
		quotes[s].bid_qty = (uint64_t)s + 1;
		tb_md_book_level_update_init(&m);
		for (int i = 0; i < LEVELS; i++) {
			tb_md_book_level_update_levels_entry_init(&lv[i]);
			lv[i].qty = (uint64_t)s + 1;
		}
		if (tb_md_quote_encode(wire[s], QLEN, &quotes[s]) != QLEN ||
		    tb_md_book_level_update_encode(books[s], BLEN, &m, lv, LEVELS) != BLEN) {
			fprintf(stderr, "bench schema: cannot encode\n");
			return 1;
		}
	}
	for (int r = 0; r < RUNS; r++) {
		fq[r] = run_copy(wire[0], QLEN, QLEN, n);
		fb[r] = run_copy(books[0], BLEN, BLEN, n);
		enc[r] = run_encode(n);
		dec[r] = run_decode(n, &sum);
		bk[r] = run_book(n, &sum);
	}
	if (sum == 0) {
		fprintf(stderr, "bench schema: decoders read nothing\n");
		return 1;
	}
	q_floor = median(fq);
	b_floor = median(fb);
	a = median(enc);
	b = median(dec);
	c = median(bk);
	printf("bench schema: %" PRIu64 " messages per run over %d slots, median "
	       "of %d runs\n", n, SLOTS, RUNS);
	printf("bench schema floor: copy of a %d-byte Quote    %6.2f ns\n", QLEN,
	       q_floor);
	printf("bench schema tb_md_quote_encode                %6.2f ns (%.1fx "
	       "the floor)\n", a, a / q_floor);
	printf("bench schema tb_md_quote_decode                %6.2f ns (%.1fx "
	       "the floor)\n", b, b / q_floor);
	printf("bench schema floor: copy of a %d-byte BookLevelUpdate %6.2f ns\n",
	       BLEN, b_floor);
	printf("bench schema BookLevelUpdate, %d levels, decode + iterate %6.2f ns "
	       "(%.1fx the floor)\n", LEVELS, c, c / b_floor);
	return 0;
}
