/*
 * lvbook.c - books of price levels from BookLevelUpdate (see lvbook.h).
 */
#include "tools/md/lvbook.h"

#include "tools/md/book.h"

#include <stdlib.h>
#include <string.h>

typedef struct side {
	uint32_t depth;
	uint32_t pad_;
	tb_lvbook_level_t lv[TB_LVBOOK_DEPTH];
} side_t;

struct tb_lvbook {
	uint32_t n;
	side_t *sides; /* 2 per instrument: bid, ask */
};

int tb_lvbook_create(tb_lvbook_t **out, uint32_t max_instruments)
{
	tb_lvbook_t *b;

	*out = NULL;
	if (max_instruments == 0)
		return -1;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -1;
	b->sides = calloc((size_t)max_instruments * 2, sizeof(side_t));
	if (!b->sides) {
		free(b);
		return -1;
	}
	b->n = max_instruments;
	*out = b;
	return 0;
}

void tb_lvbook_destroy(tb_lvbook_t *b)
{
	if (!b)
		return;
	free(b->sides);
	free(b);
}

void tb_lvbook_clear(tb_lvbook_t *b, uint32_t instrument)
{
	if (instrument == UINT32_MAX) {
		for (uint32_t i = 0; i < 2 * b->n; i++)
			b->sides[i].depth = 0;
	} else if (instrument < b->n) {
		b->sides[2 * instrument].depth = 0;
		b->sides[2 * instrument + 1].depth = 0;
	}
}

int tb_lvbook_apply(tb_lvbook_t *b, uint32_t instrument, int side, int action,
		    uint32_t level, int64_t px, uint64_t qty, uint32_t orders)
{
	side_t *s;
	tb_lvbook_level_t *l;

	/* Per message: no allocation, lock or system call. */
	if (instrument >= b->n)
		return TB_LVBOOK_EINSTR;
	if (side != 0 && side != 1)
		return TB_LVBOOK_ESIDE;
	s = &b->sides[2 * instrument + (uint32_t)side];
	switch (action) {
	case TB_LVBOOK_ADD:
		if (level > s->depth)
			return TB_LVBOOK_ELEVEL;
		if (s->depth == TB_LVBOOK_DEPTH)
			return TB_LVBOOK_EFULL;
		memmove(&s->lv[level + 1], &s->lv[level],
			(s->depth - level) * sizeof(s->lv[0]));
		s->depth++;
		break;
	case TB_LVBOOK_MODIFY:
	case TB_LVBOOK_DELETE:
		if (level >= s->depth)
			return TB_LVBOOK_ELEVEL;
		if (action == TB_LVBOOK_DELETE) {
			memmove(&s->lv[level], &s->lv[level + 1],
				(s->depth - level - 1) * sizeof(s->lv[0]));
			s->depth--;
			return 0;
		}
		break;
	default:
		return TB_LVBOOK_EACTION;
	}
	l = &s->lv[level];
	l->px = px;
	l->qty = qty;
	l->orders = orders;
	return 0;
}

uint32_t tb_lvbook_depth(const tb_lvbook_t *b, uint32_t instrument, int side)
{
	if (instrument >= b->n || (side != 0 && side != 1))
		return 0;
	return b->sides[2 * instrument + (uint32_t)side].depth;
}

const tb_lvbook_level_t *tb_lvbook_level(const tb_lvbook_t *b,
					 uint32_t instrument, int side,
					 uint32_t level)
{
	if (level >= tb_lvbook_depth(b, instrument, side))
		return NULL;
	return &b->sides[2 * instrument + (uint32_t)side].lv[level];
}

uint64_t tb_lvbook_checksum(const tb_lvbook_t *b)
{
	uint64_t sum = 0;

	for (uint32_t i = 0; i < b->n; i++)
		for (int side = 0; side < 2; side++) {
			const side_t *s = &b->sides[2 * i + (uint32_t)side];

			for (uint32_t k = 0; k < s->depth; k++)
				sum += tb_lvbook_hash(i, side, k, s->lv[k].px,
						      s->lv[k].qty,
						      s->lv[k].orders);
		}
	return sum;
}

uint64_t tb_lvbook_book_checksum(const tb_book_t *book, uint32_t max_instruments,
				 int64_t px_scale)
{
	tb_book_level_t lv[TB_LVBOOK_DEPTH];
	uint64_t sum = 0;

	for (uint32_t i = 0; i < max_instruments; i++)
		for (int side = 0; side < 2; side++) {
			int n = tb_book_levels(book, i, (tb_book_side_t)side, lv,
					       TB_LVBOOK_DEPTH);

			for (int k = 0; k < n; k++)
				sum += tb_lvbook_hash(i, side, (uint32_t)k,
						      lv[k].price * px_scale,
						      lv[k].qty, lv[k].orders);
		}
	return sum;
}
