/*
 * test_book.c - unit tests of the order book (tools/md/book.c).
 *
 * A seeded random stream of adds, executions, cancels, deletes, replaces
 * and trades (with some invalid operations mixed in) is applied both to
 * the book and to a naive model here: a flat array of orders, with levels
 * computed by aggregation and sorting.  After every operation the test
 * checks the book's levels and checksum against the model, replays the
 * LEVEL_* events onto shadow level arrays that must equal the model too,
 * and checks that TOP came exactly when the model's top changed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tools/md/book.h"
#include "tools/md/md_error.h"

#define NINST 4
#define MAXLEV 64
#define MAXORD 400

/* ------------------------------------------------------------ the model */

typedef struct morder {
	uint64_t ref;
	uint32_t instr;
	int side;
	int64_t price;
	uint64_t qty;
} morder_t;

static morder_t model[MAXORD];
static int nmodel;

static uint64_t rng_state;

static uint64_t rng(void)
{
	uint64_t x = rng_state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rng_state = x;
}

static void model_remove(int i)
{
	model[i] = model[--nmodel];
}

static int cmp_best_first_side;

static int cmp_level(const void *a, const void *b)
{
	const tb_book_level_t *x = a, *y = b;

	if (x->price == y->price)
		return 0;
	if (cmp_best_first_side == TB_BOOK_BID)
		return x->price > y->price ? -1 : 1;
	return x->price < y->price ? -1 : 1;
}

/* The model's levels of one side, best first. */
static int model_levels(uint32_t instr, int side, tb_book_level_t *out)
{
	int n = 0, i, j;

	for (i = 0; i < nmodel; i++) {
		if (model[i].instr != instr || model[i].side != side)
			continue;
		for (j = 0; j < n; j++)
			if (out[j].price == model[i].price)
				break;
		if (j == n) {
			memset(&out[n], 0, sizeof(out[n]));
			out[n++].price = model[i].price;
		}
		out[j].qty += model[i].qty;
		out[j].orders++;
	}
	cmp_best_first_side = side;
	qsort(out, (size_t)n, sizeof(*out), cmp_level);
	return n;
}

static uint64_t model_checksum(void)
{
	uint64_t s = 0;
	int i;

	for (i = 0; i < nmodel; i++)
		s += tb_book_order_hash(model[i].instr, model[i].ref,
					model[i].side, model[i].price,
					model[i].qty);
	return s;
}

/* ------------------------------------------------ shadow from events */

static tb_book_level_t shadow[NINST][2][MAXLEV];
static int nshadow[NINST][2];
static int top_events[NINST];
static tb_book_event_t last_top[NINST];
static int trade_events;
static tb_book_event_t last_trade;

static void on_event(void *ctx, const tb_book_event_t *ev)
{
	tb_book_level_t *lv;
	int *n;

	(void)ctx;
	assert_true(ev->instrument < NINST);
	if (ev->kind == TB_BOOK_EV_TOP) {
		top_events[ev->instrument]++;
		last_top[ev->instrument] = *ev;
		return;
	}
	if (ev->kind == TB_BOOK_EV_TRADE) {
		trade_events++;
		last_trade = *ev;
		return;
	}
	lv = shadow[ev->instrument][ev->side];
	n = &nshadow[ev->instrument][ev->side];
	switch (ev->kind) {
	case TB_BOOK_EV_LEVEL_ADD:
		assert_true(ev->level <= *n && *n < MAXLEV);
		memmove(&lv[ev->level + 1], &lv[ev->level],
			(size_t)(*n - ev->level) * sizeof(*lv));
		(*n)++;
		break;
	case TB_BOOK_EV_LEVEL_MODIFY:
		assert_true(ev->level < *n);
		assert_int_equal(lv[ev->level].price, ev->price);
		break;
	case TB_BOOK_EV_LEVEL_DELETE:
		assert_true(ev->level < *n);
		assert_int_equal(lv[ev->level].price, ev->price);
		memmove(&lv[ev->level], &lv[ev->level + 1],
			(size_t)(*n - ev->level - 1) * sizeof(*lv));
		(*n)--;
		return;
	default:
		fail_msg("unknown event kind %d", ev->kind);
	}
	memset(&lv[ev->level], 0, sizeof(*lv));
	lv[ev->level].price = ev->price;
	lv[ev->level].qty = ev->qty;
	lv[ev->level].orders = ev->orders;
}

static void model_top(uint32_t instr, int64_t t[4])
{
	tb_book_level_t lv[MAXORD];
	int n;

	n = model_levels(instr, TB_BOOK_BID, lv);
	t[0] = n ? lv[0].price : 0;
	t[1] = n ? (int64_t)lv[0].qty : 0;
	n = model_levels(instr, TB_BOOK_ASK, lv);
	t[2] = n ? lv[0].price : 0;
	t[3] = n ? (int64_t)lv[0].qty : 0;
}

/* Everything about `instr` agrees: book levels, shadow levels, model. */
static void check_instr(const tb_book_t *b, uint32_t instr)
{
	tb_book_level_t want[MAXORD], got[MAXLEV];
	int side;

	for (side = 0; side < 2; side++) {
		int n = model_levels(instr, side, want);
		int g = tb_book_levels(b, instr, (tb_book_side_t)side, got, MAXLEV);

		assert_int_equal(g, n);
		assert_int_equal(nshadow[instr][side], n);
		for (int i = 0; i < n; i++) {
			assert_int_equal(got[i].price, want[i].price);
			assert_int_equal(got[i].qty, want[i].qty);
			assert_int_equal(got[i].orders, want[i].orders);
			assert_int_equal(shadow[instr][side][i].price, want[i].price);
			assert_int_equal(shadow[instr][side][i].qty, want[i].qty);
			assert_int_equal(shadow[instr][side][i].orders, want[i].orders);
		}
	}
}

static void reset_shadow(void)
{
	memset(shadow, 0, sizeof(shadow));
	memset(nshadow, 0, sizeof(nshadow));
	memset(top_events, 0, sizeof(top_events));
	trade_events = 0;
	nmodel = 0;
}

static tb_book_t *make_book(uint32_t max_orders, uint32_t max_levels)
{
	tb_book_cfg_t c = { NINST, max_orders, max_levels };
	tb_book_t *b = NULL;

	assert_int_equal(tb_book_create(&b, &c), 0);
	tb_book_set_cb(b, on_event, NULL);
	reset_shadow();
	return b;
}

/* ------------------------------------------------------ random stream */

static uint64_t next_ref = 1;

/* One random operation on book and model; checks the result code, the
 * TOP and TRADE events, and the touched instrument. */
static void random_op(tb_book_t *b, uint32_t max_orders)
{
	int op = (int)(rng() % 100), i = nmodel ? (int)(rng() % (uint64_t)nmodel) : -1;
	uint32_t instr = (uint32_t)(rng() % NINST);
	int64_t before[4], after[4];
	int tops, trades = trade_events, rc;
	uint64_t sum = model_checksum();

	if (i >= 0 && op >= 35)
		instr = model[i].instr;
	model_top(instr, before);
	tops = top_events[instr];

	if (op < 35 || i < 0) { /* add */
		int side = (int)(rng() % 2);
		int64_t price = side == TB_BOOK_BID ? 90 + (int64_t)(rng() % 15)
						    : 100 + (int64_t)(rng() % 15);
		uint64_t qty = 1 + rng() % 500;
		uint64_t ref = next_ref++;

		rc = tb_book_add(b, instr, ref, (tb_book_side_t)side, price, qty);
		if ((uint32_t)nmodel >= max_orders) {
			assert_int_equal(rc, TB_BOOK_EFULL);
		} else {
			assert_int_equal(rc, 0);
			model[nmodel++] = (morder_t){ ref, instr, side, price, qty };
		}
	} else if (op < 50) { /* execute, partial or full, maybe priced */
		uint64_t qty = 1 + rng() % model[i].qty;
		int64_t px = rng() % 2 ? 0 : model[i].price + 1;

		assert_int_equal(tb_book_execute(b, model[i].ref, qty, px, 7), 0);
		assert_int_equal(trade_events, trades + 1);
		assert_int_equal(last_trade.qty, qty);
		assert_int_equal(last_trade.price, px ? px : model[i].price);
		assert_int_equal(last_trade.side, model[i].side);
		assert_int_equal(last_trade.order_ref, model[i].ref);
		model[i].qty -= qty;
		if (model[i].qty == 0)
			model_remove(i);
	} else if (op < 65) { /* cancel */
		uint64_t qty = 1 + rng() % model[i].qty;

		assert_int_equal(tb_book_cancel(b, model[i].ref, qty), 0);
		model[i].qty -= qty;
		if (model[i].qty == 0)
			model_remove(i);
	} else if (op < 75) { /* delete */
		assert_int_equal(tb_book_delete(b, model[i].ref), 0);
		model_remove(i);
	} else if (op < 88) { /* replace */
		uint64_t ref = next_ref++, qty = 1 + rng() % 500;
		int64_t price = model[i].side == TB_BOOK_BID ?
				90 + (int64_t)(rng() % 15) : 100 + (int64_t)(rng() % 15);

		assert_int_equal(tb_book_replace(b, model[i].ref, ref, qty, price), 0);
		model[i].ref = ref;
		model[i].qty = qty;
		model[i].price = price;
	} else if (op < 92) { /* non-displayed trade: no book change */
		assert_int_equal(tb_book_trade(b, instr, TB_BOOK_ASK, 101, 5, 9), 0);
		assert_int_equal(trade_events, trades + 1);
		assert_int_equal(last_trade.order_ref, 0);
	} else { /* invalid operations change nothing */
		uint64_t unknown = next_ref + 1000000;

		switch (op % 6) {
		case 0:
			assert_int_equal(tb_book_execute(b, unknown, 1, 0, 0), TB_BOOK_ENOORDER);
			break;
		case 1:
			assert_int_equal(tb_book_cancel(b, model[i].ref, model[i].qty + 1),
					 TB_BOOK_EQTY);
			break;
		case 2:
			assert_int_equal(tb_book_add(b, instr, model[i].ref, TB_BOOK_BID, 95, 1),
					 TB_BOOK_EDUP);
			break;
		case 3:
			assert_int_equal(tb_book_execute(b, model[i].ref, model[i].qty + 1, 0, 0),
					 TB_BOOK_EQTY);
			break;
		case 4:
			assert_int_equal(tb_book_delete(b, unknown), TB_BOOK_ENOORDER);
			break;
		default:
			assert_int_equal(tb_book_replace(b, unknown, next_ref++, 1, 95),
					 TB_BOOK_ENOORDER);
			break;
		}
		assert_int_equal(trade_events, trades);
		assert_int_equal(tb_book_checksum(b, UINT32_MAX), sum);
	}
	model_top(instr, after);
	if (memcmp(before, after, sizeof(before)) != 0) {
		assert_int_equal(top_events[instr], tops + 1);
		assert_int_equal(last_top[instr].bid_px, after[0]);
		assert_int_equal((int64_t)last_top[instr].bid_qty, after[1]);
		assert_int_equal(last_top[instr].ask_px, after[2]);
		assert_int_equal((int64_t)last_top[instr].ask_qty, after[3]);
	} else {
		assert_int_equal(top_events[instr], tops);
	}
	check_instr(b, instr);
	assert_int_equal(tb_book_order_count(b), (uint64_t)nmodel);
	assert_int_equal(tb_book_checksum(b, UINT32_MAX), model_checksum());
}

static void run_stream(uint64_t seed, uint32_t max_orders, int ops)
{
	tb_book_t *b = make_book(max_orders, MAXLEV);
	uint32_t k;

	rng_state = seed;
	for (int n = 0; n < ops; n++)
		random_op(b, max_orders);
	for (k = 0; k < NINST; k++)
		check_instr(b, k);
	/* Every model order is found with its exact state. */
	for (int i = 0; i < nmodel; i++) {
		uint32_t in;
		tb_book_side_t s;
		int64_t px;
		uint64_t q;

		assert_int_equal(tb_book_order(b, model[i].ref, &in, &s, &px, &q), 0);
		assert_int_equal(in, model[i].instr);
		assert_int_equal((int)s, model[i].side);
		assert_int_equal(px, model[i].price);
		assert_int_equal(q, model[i].qty);
	}
	tb_book_destroy(b);
}

static void test_random_streams(void **state)
{
	(void)state;
	run_stream(0x1234567887654321ull, MAXORD, 20000);
	run_stream(0x0badc0ffee000001ull, MAXORD, 20000);
}

/* A tiny table (8 orders, 16 slots) under heavy churn exercises probe
 * clusters, wrap-around and backward-shift deletion, and EFULL. */
static void test_small_table_churn(void **state)
{
	(void)state;
	run_stream(0x5eed5eed5eed5eedull, 8, 30000);
}

static void test_clear_instrument(void **state)
{
	tb_book_t *b;
	uint32_t k;

	(void)state;
	b = make_book(MAXORD, MAXLEV);
	rng_state = 0xfeedfacecafebeefull;
	for (int n = 0; n < 3000; n++)
		random_op(b, MAXORD);
	tb_book_clear(b, 1);
	for (int i = nmodel - 1; i >= 0; i--)
		if (model[i].instr == 1)
			model_remove(i);
	nshadow[1][0] = nshadow[1][1] = 0;
	for (k = 0; k < NINST; k++)
		check_instr(b, k);
	assert_int_equal(tb_book_checksum(b, 1), 0);
	assert_int_equal(tb_book_checksum(b, UINT32_MAX), model_checksum());
	/* The table still works: more operations, all checked. */
	for (int n = 0; n < 3000; n++)
		random_op(b, MAXORD);
	tb_book_clear(b, UINT32_MAX);
	assert_int_equal(tb_book_order_count(b), 0);
	assert_int_equal(tb_book_checksum(b, UINT32_MAX), 0);
	tb_book_destroy(b);
}

static void test_level_limit(void **state)
{
	tb_book_t *b;
	tb_book_level_t lv[4];

	(void)state;
	b = make_book(16, 2);
	assert_int_equal(tb_book_add(b, 0, 1, TB_BOOK_BID, 100, 10), 0);
	assert_int_equal(tb_book_add(b, 0, 2, TB_BOOK_BID, 99, 10), 0);
	assert_int_equal(tb_book_add(b, 0, 3, TB_BOOK_BID, 98, 10), TB_BOOK_ELEVELS);
	/* An existing level still takes orders. */
	assert_int_equal(tb_book_add(b, 0, 3, TB_BOOK_BID, 99, 5), 0);
	/* Replace into a new level: only when the old level goes away. */
	assert_int_equal(tb_book_replace(b, 3, 4, 5, 97), TB_BOOK_ELEVELS);
	assert_int_equal(tb_book_replace(b, 1, 4, 5, 97), 0);
	assert_int_equal(tb_book_levels(b, 0, TB_BOOK_BID, lv, 4), 2);
	assert_int_equal(lv[0].price, 99);
	assert_int_equal(lv[0].qty, 15);
	assert_int_equal(lv[1].price, 97);
	/* The other side is independent. */
	assert_int_equal(tb_book_add(b, 0, 5, TB_BOOK_ASK, 101, 1), 0);
	tb_book_destroy(b);
}

static void test_bad_arguments(void **state)
{
	tb_book_t *b;
	tb_book_cfg_t c = { 0, 10, 10 };

	(void)state;
	assert_int_equal(tb_book_create(&b, &c), TB_EINVAL);
	assert_non_null(strstr(tb_md_error_msg(), "max_instruments"));
	c = (tb_book_cfg_t){ 1, 0, 10 };
	assert_int_equal(tb_book_create(&b, &c), TB_EINVAL);
	c = (tb_book_cfg_t){ 1, 10, 0 };
	assert_int_equal(tb_book_create(&b, &c), TB_EINVAL);
	c = (tb_book_cfg_t){ 1, 10, 70000 };
	assert_int_equal(tb_book_create(&b, &c), TB_EINVAL);
	assert_int_equal(tb_book_create(&b, NULL), TB_EINVAL);

	b = make_book(16, 8);
	assert_int_equal(tb_book_add(b, NINST, 1, TB_BOOK_BID, 100, 1), TB_BOOK_EINSTR);
	assert_int_equal(tb_book_add(b, 0, 1, TB_BOOK_BID, 100, 0), TB_BOOK_EARG);
	assert_int_equal(tb_book_add(b, 0, 1, TB_BOOK_BID, 0, 1), TB_BOOK_EARG);
	assert_int_equal(tb_book_add(b, 0, 1, (tb_book_side_t)2, 100, 1), TB_BOOK_EARG);
	assert_int_equal(tb_book_add(b, 0, 1, TB_BOOK_BID, 100, 10), 0);
	assert_int_equal(tb_book_cancel(b, 1, 0), TB_BOOK_EARG);
	assert_int_equal(tb_book_execute(b, 1, 0, 0, 0), TB_BOOK_EARG);
	assert_int_equal(tb_book_replace(b, 1, 2, 0, 100), TB_BOOK_EARG);
	assert_int_equal(tb_book_replace(b, 1, 2, 1, -5), TB_BOOK_EARG);
	assert_int_equal(tb_book_add(b, 0, 2, TB_BOOK_ASK, 101, 10), 0);
	assert_int_equal(tb_book_replace(b, 1, 2, 1, 100), TB_BOOK_EDUP);
	assert_int_equal(tb_book_trade(b, NINST, TB_BOOK_BID, 1, 1, 0), TB_BOOK_EINSTR);
	assert_int_equal(tb_book_trade(b, 0, TB_BOOK_BID, 1, 0, 0), TB_BOOK_EARG);
	assert_int_equal(tb_book_order_count(b), 2);
	assert_string_equal(tb_book_strerror(TB_BOOK_EQTY),
			    "more shares than the order has");
	assert_string_equal(tb_book_strerror(-1), "unknown book error");
	tb_book_destroy(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_random_streams),
		cmocka_unit_test(test_small_table_churn),
		cmocka_unit_test(test_clear_instrument),
		cmocka_unit_test(test_level_limit),
		cmocka_unit_test(test_bad_arguments),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
