/*
 * bench_book - the feed handler's per-message cost: ITCH decode, and decode
 * plus the order-book update with its events, against a floor.
 *
 * A seeded stream of order-by-order messages (adds, executions, cancels,
 * deletes, replaces over 64 instruments, about 20000 live orders) is encoded
 * once into memory.  The floor walks the same bytes (length and type of
 * each message, handed to an empty asm statement); "decode" adds
 * tb_itch_decode; "book" adds the book operation and an event callback that
 * only counts.  Each variant runs RUNS times interleaved, on a book emptied
 * between runs; the median run is reported, with the net cost over the
 * floor.
 *
 * Not a test: it prints figures and exits 0 unless it could not run.
 * Usage: bench_book [messages, default 2000000]
 * Output lines start with "bench book" for tests/bench/run-bench.sh.
 */
#include "tools/md/book.h"
#include "tools/md/itch.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RUNS 5
#define NINST 64
#define LIVE 20000

typedef struct live {
	uint64_t ref;
	uint32_t instr;
	uint32_t qty;
	uint32_t price;
	uint8_t side;
} live_t;

static uint8_t *stream;
static uint32_t *offs; /* message i is stream[offs[i] .. offs[i + 1]) */
static uint64_t nmsg;
static uint64_t events;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static int generate(uint64_t n)
{
	static live_t lv[LIVE];
	uint32_t nlive = 0, mid[NINST];
	uint64_t ref = 1, i, len = 0;
	tb_itch_msg_t m;

	stream = malloc(n * 40);
	offs = malloc((n + 1) * sizeof(*offs));
	if (!stream || !offs)
		return -1;
	for (i = 0; i < NINST; i++)
		mid[i] = 1000000 + (uint32_t)(next_rand() % 100) * 10000;
	for (i = 0; i < n; i++) {
		uint64_t r = next_rand() % 100;

		memset(&m, 0, sizeof(m));
		offs[i] = (uint32_t)len;
		if (nlive < 100 || (r < 45 && nlive < LIVE)) {
			live_t *o = &lv[nlive++];

			o->ref = ref++;
			o->instr = (uint32_t)(next_rand() % NINST);
			o->side = (uint8_t)(next_rand() % 2);
			o->price = mid[o->instr] + (o->side ? 1 : -1) *
				   (int32_t)(100 * (1 + next_rand() % 30));
			o->qty = 100 * (1 + (uint32_t)(next_rand() % 10));
			m.type = TB_ITCH_ADD_ORDER;
			m.locate = (uint16_t)o->instr;
			m.u.add.ref = o->ref;
			m.u.add.side = o->side ? 'S' : 'B';
			m.u.add.shares = o->qty;
			m.u.add.price = o->price;
		} else {
			uint32_t k = (uint32_t)(next_rand() % nlive);
			live_t *o = &lv[k];

			m.locate = (uint16_t)o->instr;
			if (r < 65) {
				uint32_t q = 1 + (uint32_t)(next_rand() % o->qty);

				m.type = TB_ITCH_ORDER_EXECUTED;
				m.u.exec.ref = o->ref;
				m.u.exec.shares = q;
				o->qty -= q;
			} else if (r < 80) {
				uint32_t q = 1 + (uint32_t)(next_rand() % o->qty);

				m.type = TB_ITCH_ORDER_CANCEL;
				m.u.cancel.ref = o->ref;
				m.u.cancel.shares = q;
				o->qty -= q;
			} else if (r < 90) {
				m.type = TB_ITCH_ORDER_DELETE;
				m.u.del.ref = o->ref;
				o->qty = 0;
			} else {
				m.type = TB_ITCH_ORDER_REPLACE;
				m.u.replace.orig_ref = o->ref;
				m.u.replace.new_ref = o->ref = ref++;
				m.u.replace.shares = o->qty = 100;
				m.u.replace.price = o->price;
			}
			if (o->qty == 0)
				lv[k] = lv[--nlive];
		}
		len += (uint64_t)tb_itch_encode(&m, stream + len, 64);
	}
	offs[n] = (uint32_t)len;
	nmsg = n;
	return 0;
}

static void on_event(void *ctx, const tb_book_event_t *ev)
{
	(void)ctx;
	__asm__ __volatile__("" : : "r"(ev->kind));
	events++;
}

static double run_floor(void)
{
	uint64_t t0 = now_ns();

	for (uint64_t i = 0; i < nmsg; i++) {
		const uint8_t *p = stream + offs[i];
		uint32_t n = offs[i + 1] - offs[i];

		__asm__ __volatile__("" : : "r"(p[0]), "r"(n));
	}
	return (double)(now_ns() - t0) / (double)nmsg;
}

static double run_decode(void)
{
	uint64_t t0 = now_ns();
	tb_itch_msg_t m;

	for (uint64_t i = 0; i < nmsg; i++) {
		int rc = tb_itch_decode(stream + offs[i], offs[i + 1] - offs[i], &m);

		__asm__ __volatile__("" : : "r"(rc), "r"(m.u.add.ref));
	}
	return (double)(now_ns() - t0) / (double)nmsg;
}

static double run_book(tb_book_t *b, uint64_t *errors)
{
	uint64_t t0 = now_ns(), err = 0;
	tb_itch_msg_t m;

	for (uint64_t i = 0; i < nmsg; i++) {
		int rc = tb_itch_decode(stream + offs[i], offs[i + 1] - offs[i], &m);

		switch (m.type) {
		case TB_ITCH_ADD_ORDER:
			rc = tb_book_add(b, m.locate, m.u.add.ref,
					 m.u.add.side == 'B' ? TB_BOOK_BID : TB_BOOK_ASK,
					 m.u.add.price, m.u.add.shares);
			break;
		case TB_ITCH_ORDER_EXECUTED:
			rc = tb_book_execute(b, m.u.exec.ref, m.u.exec.shares, 0, 0);
			break;
		case TB_ITCH_ORDER_CANCEL:
			rc = tb_book_cancel(b, m.u.cancel.ref, m.u.cancel.shares);
			break;
		case TB_ITCH_ORDER_DELETE:
			rc = tb_book_delete(b, m.u.del.ref);
			break;
		case TB_ITCH_ORDER_REPLACE:
			rc = tb_book_replace(b, m.u.replace.orig_ref, m.u.replace.new_ref,
					     m.u.replace.shares, m.u.replace.price);
			break;
		}
		err += rc != 0;
	}
	*errors = err;
	return (double)(now_ns() - t0) / (double)nmsg;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 0) : 2000000, errors = 0;
	double fl[RUNS], de[RUNS], bk[RUNS];
	tb_book_cfg_t cfg = { NINST, 1u << 16, 256 };
	tb_book_t *b;
	int r;

	if (n == 0 || n > 50000000 || generate(n) != 0 ||
	    tb_book_create(&b, &cfg) != 0) {
		fprintf(stderr, "bench_book: cannot set up %" PRIu64 " messages\n", n);
		return 1;
	}
	tb_book_set_cb(b, on_event, NULL);
	for (r = 0; r < RUNS; r++) {
		fl[r] = run_floor();
		de[r] = run_decode();
		tb_book_clear(b, UINT32_MAX);
		events = 0;
		bk[r] = run_book(b, &errors);
		if (errors) {
			fprintf(stderr, "bench_book: %" PRIu64 " book errors\n", errors);
			return 1;
		}
	}
	qsort(fl, RUNS, sizeof(double), cmp_double);
	qsort(de, RUNS, sizeof(double), cmp_double);
	qsort(bk, RUNS, sizeof(double), cmp_double);
	printf("bench book: messages=%" PRIu64 " events_per_msg=%.2f runs=%d (median)\n",
	       nmsg, (double)events / (double)nmsg, RUNS);
	printf("bench book: floor       %7.2f ns/msg\n", fl[RUNS / 2]);
	printf("bench book: decode      %7.2f ns/msg  net %6.2f ns  (%.1fx floor)\n",
	       de[RUNS / 2], de[RUNS / 2] - fl[RUNS / 2], de[RUNS / 2] / fl[RUNS / 2]);
	printf("bench book: decode+book %7.2f ns/msg  net %6.2f ns  (%.1fx floor)"
	       "  %.2f M msg/s\n", bk[RUNS / 2], bk[RUNS / 2] - fl[RUNS / 2],
	       bk[RUNS / 2] / fl[RUNS / 2], 1e3 / bk[RUNS / 2]);
	tb_book_destroy(b);
	free(stream);
	free(offs);
	return 0;
}
