/*
 * test_lvbook.c - unit tests of the level book (tools/md/lvbook.c).
 *
 *  - Add, Modify and Delete by depth move the levels behind as the
 *    BookLevelUpdate contract says; refused updates change nothing;
 *  - a seeded random stream of orders on an order book (book.h), whose
 *    LEVEL_* events are replayed onto a level book, leaves the two with
 *    the same levels and the same checksum (tb_lvbook_checksum against
 *    tb_lvbook_book_checksum) after every operation: the comparison the
 *    feed handler and the strategy make across processes;
 *  - clearing, and rebuilding from a snapshot (every level an Add, best
 *    first), gives the same checksum again.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tools/md/book.h"
#include "tools/md/lvbook.h"

#define SCALE 100000

static void contract(void **state)
{
	tb_lvbook_t *b;
	const tb_lvbook_level_t *l;
	uint64_t sum;

	(void)state;
	assert_int_equal(tb_lvbook_create(&b, 4), 0);
	assert_int_equal(tb_lvbook_apply(b, 1, 0, TB_LVBOOK_ADD, 0, 100, 10, 1), 0);
	assert_int_equal(tb_lvbook_apply(b, 1, 0, TB_LVBOOK_ADD, 1, 90, 20, 2), 0);
	assert_int_equal(tb_lvbook_apply(b, 1, 0, TB_LVBOOK_ADD, 0, 110, 30, 3), 0);
	assert_int_equal(tb_lvbook_depth(b, 1, 0), 3);
	assert_int_equal(tb_lvbook_level(b, 1, 0, 0)->px, 110);
	assert_int_equal(tb_lvbook_level(b, 1, 0, 1)->px, 100);
	assert_int_equal(tb_lvbook_level(b, 1, 0, 2)->px, 90);
	assert_int_equal(tb_lvbook_apply(b, 1, 0, TB_LVBOOK_MODIFY, 1, 100, 15, 4), 0);
	l = tb_lvbook_level(b, 1, 0, 1);
	assert_int_equal(l->qty, 15);
	assert_int_equal(l->orders, 4);
	assert_int_equal(tb_lvbook_apply(b, 1, 0, TB_LVBOOK_DELETE, 0, 0, 0, 0), 0);
	assert_int_equal(tb_lvbook_level(b, 1, 0, 0)->px, 100);
	assert_int_equal(tb_lvbook_level(b, 1, 0, 1)->px, 90);
	assert_null(tb_lvbook_level(b, 1, 0, 2));
	assert_int_equal(tb_lvbook_depth(b, 1, 1), 0);
	sum = tb_lvbook_checksum(b);
	assert_int_equal(sum, tb_lvbook_hash(1, 0, 0, 100, 15, 4) +
			      tb_lvbook_hash(1, 0, 1, 90, 20, 2));
	/* Refusals: nothing changes. */
	assert_int_equal(tb_lvbook_apply(b, 4, 0, TB_LVBOOK_ADD, 0, 1, 1, 1),
			 TB_LVBOOK_EINSTR);
	assert_int_equal(tb_lvbook_apply(b, 1, 2, TB_LVBOOK_ADD, 0, 1, 1, 1),
			 TB_LVBOOK_ESIDE);
	assert_int_equal(tb_lvbook_apply(b, 1, 0, TB_LVBOOK_ADD, 3, 1, 1, 1),
			 TB_LVBOOK_ELEVEL);
	assert_int_equal(tb_lvbook_apply(b, 1, 0, TB_LVBOOK_MODIFY, 2, 1, 1, 1),
			 TB_LVBOOK_ELEVEL);
	assert_int_equal(tb_lvbook_apply(b, 1, 1, TB_LVBOOK_DELETE, 0, 1, 1, 1),
			 TB_LVBOOK_ELEVEL);
	assert_int_equal(tb_lvbook_apply(b, 1, 0, 7, 0, 1, 1, 1), TB_LVBOOK_EACTION);
	assert_int_equal(tb_lvbook_checksum(b), sum);
	/* Full. */
	for (uint32_t k = 0; k < TB_LVBOOK_DEPTH; k++)
		assert_int_equal(tb_lvbook_apply(b, 2, 1, TB_LVBOOK_ADD, k,
						 (int64_t)k, 1, 1), 0);
	assert_int_equal(tb_lvbook_apply(b, 2, 1, TB_LVBOOK_ADD, 0, 1, 1, 1),
			 TB_LVBOOK_EFULL);
	tb_lvbook_clear(b, 2);
	assert_int_equal(tb_lvbook_depth(b, 2, 1), 0);
	assert_int_equal(tb_lvbook_checksum(b), sum);
	tb_lvbook_clear(b, UINT32_MAX);
	assert_int_equal(tb_lvbook_checksum(b), 0);
	tb_lvbook_destroy(b);
	assert_int_equal(tb_lvbook_create(&b, 0), -1);
	assert_null(b);
}

/* ------------------------------------------- an order book's events */

typedef struct replay {
	tb_lvbook_t *lv;
	int refused;
} replay_t;

static void on_book(void *ctx, const tb_book_event_t *ev)
{
	replay_t *r = ctx;
	int action;

	if (ev->kind < TB_BOOK_EV_LEVEL_ADD || ev->kind > TB_BOOK_EV_LEVEL_DELETE)
		return;
	action = ev->kind - TB_BOOK_EV_LEVEL_ADD;
	if (tb_lvbook_apply(r->lv, ev->instrument, ev->side, action, ev->level,
			    ev->price * SCALE, ev->qty, ev->orders) != 0)
		r->refused++;
}

static uint64_t rng_state = 0x1234567;

static uint64_t rng(void)
{
	uint64_t x = rng_state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rng_state = x;
}

static void replayed_events_give_the_same_books(void **state)
{
	tb_book_cfg_t bc = {4, 1000, 64};
	uint64_t refs[1000];
	int nrefs = 0;
	replay_t r = {0};
	tb_lvbook_t *snap;
	tb_book_t *book;

	(void)state;
	assert_int_equal(tb_book_create(&book, &bc), 0);
	assert_int_equal(tb_lvbook_create(&r.lv, 4), 0);
	tb_book_set_cb(book, on_book, &r);
	for (int op = 0; op < 20000; op++) {
		uint64_t x = rng() % 100;

		if (nrefs < 8 || (x < 45 && nrefs < 1000)) {
			uint64_t ref = 1 + (uint64_t)op;

			if (tb_book_add(book, (uint32_t)(rng() % 4), ref,
					(tb_book_side_t)(rng() % 2),
					(int64_t)(1000 + rng() % 40), 1 + rng() % 500) == 0)
				refs[nrefs++] = ref;
		} else {
			int i = (int)(rng() % (uint64_t)nrefs);
			uint64_t ref = refs[i];

			if (x < 70) {
				tb_book_delete(book, ref);
				refs[i] = refs[--nrefs];
			} else if (x < 85) {
				uint32_t in;
				tb_book_side_t sd;
				int64_t px;
				uint64_t q;

				if (tb_book_cancel(book, ref, 1) == 0 &&
				    tb_book_order(book, ref, &in, &sd, &px, &q) != 0)
					refs[i] = refs[--nrefs];
			} else {
				uint64_t nref = 100000 + (uint64_t)op;

				if (tb_book_replace(book, ref, nref, 1 + rng() % 300,
						    (int64_t)(1000 + rng() % 40)) == 0)
					refs[i] = nref;
			}
		}
		if (op % 97 == 0)
			assert_int_equal(tb_lvbook_checksum(r.lv),
					 tb_lvbook_book_checksum(book, 4, SCALE));
	}
	assert_int_equal(r.refused, 0);
	assert_true(tb_lvbook_checksum(r.lv) != 0);
	assert_int_equal(tb_lvbook_checksum(r.lv),
			 tb_lvbook_book_checksum(book, 4, SCALE));
	/* A snapshot: every level an Add, best first, onto an empty book. */
	assert_int_equal(tb_lvbook_create(&snap, 4), 0);
	for (uint32_t i = 0; i < 4; i++)
		for (int side = 0; side < 2; side++) {
			tb_book_level_t lv[64];
			int n = tb_book_levels(book, i, (tb_book_side_t)side, lv, 64);

			for (int k = 0; k < n; k++)
				assert_int_equal(tb_lvbook_apply(snap, i, side,
						TB_LVBOOK_ADD, (uint32_t)k,
						lv[k].price * SCALE, lv[k].qty,
						lv[k].orders), 0);
		}
	assert_int_equal(tb_lvbook_checksum(snap), tb_lvbook_checksum(r.lv));
	tb_lvbook_destroy(snap);
	tb_lvbook_destroy(r.lv);
	tb_book_destroy(book);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(contract),
		cmocka_unit_test(replayed_events_give_the_same_books),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
