/*
 * book.c - order-by-order books (see book.h for the design and events).
 *
 * Invariants, checked by the unit test against a naive model:
 *  - every live order is in the table, reachable by linear probing from its
 *    home slot without crossing an empty slot;
 *  - the levels of a side are strictly ordered best first, and each level's
 *    qty and orders are the sums over the live orders at that price;
 *  - an operation that returns an error has changed nothing (all checks
 *    come before the first write).
 */
#include "tools/md/book.h"

#include "tools/md/md_error.h"
#include "tools/md/md_mem.h"

#include <stdlib.h>
#include <string.h>

#define unlikely(x) __builtin_expect(!!(x), 0)

typedef struct order_slot {
	uint64_t ref;
	int64_t price;
	uint64_t qty;
	uint32_t instrument;
	uint8_t side;
	uint8_t used;
	uint16_t pad_;
} order_slot_t;

struct tb_book {
	tb_book_cfg_t cfg;
	/* One pre-faulted, locked region (md_mem.h) for the table, the
	 * levels and the level counts: the first order in a slot, or the
	 * first level of an instrument, never takes a page fault. */
	tb_md_mem_t mem;
	order_slot_t *slots;
	uint64_t mask;          /* slot count - 1 (a power of two) */
	uint64_t live;          /* live orders */
	tb_book_level_t *levels; /* [instrument][side][max_levels] */
	uint32_t *nlev;          /* [instrument][side] */
	tb_book_cb_t cb;
	void *ctx;
};

/* ------------------------------------------------------------ the table */

static inline uint64_t home(const tb_book_t *b, uint64_t ref)
{
	return tb_hash_mix64(ref) & b->mask;
}

/* Slot index of `ref`, or -1. */
static inline int64_t find(const tb_book_t *b, uint64_t ref)
{
	uint64_t i = home(b, ref);

	while (b->slots[i].used) {
		if (b->slots[i].ref == ref)
			return (int64_t)i;
		i = (i + 1) & b->mask;
	}
	return -1;
}

/* Inserts (the caller checked that `ref` is absent and there is room). */
static inline void insert(tb_book_t *b, const order_slot_t *o)
{
	uint64_t i = home(b, o->ref);

	while (b->slots[i].used)
		i = (i + 1) & b->mask;
	b->slots[i] = *o;
	b->slots[i].used = 1;
	b->live++;
}

/* Backward-shift deletion: later members of the cluster that may live in
 * the hole are moved into it, so lookups never need tombstones. */
static inline void erase(tb_book_t *b, uint64_t i)
{
	uint64_t j = i;

	for (;;) {
		uint64_t k;

		j = (j + 1) & b->mask;
		if (!b->slots[j].used)
			break;
		k = home(b, b->slots[j].ref);
		/* Move j into the hole i unless its home lies cyclically in
		 * (i, j]. */
		if (i <= j ? (k <= i || k > j) : (k <= i && k > j)) {
			b->slots[i] = b->slots[j];
			i = j;
		}
	}
	b->slots[i].used = 0;
	b->live--;
}

/* ----------------------------------------------------------- the levels */

static inline tb_book_level_t *side_levels(const tb_book_t *b, uint32_t instr,
					   int side)
{
	return b->levels + ((size_t)instr * 2 + (size_t)side) * b->cfg.max_levels;
}

static inline uint32_t *side_count(const tb_book_t *b, uint32_t instr, int side)
{
	return b->nlev + (size_t)instr * 2 + (size_t)side;
}

/* Sort key: ascending key = best first on both sides. */
static inline int64_t lkey(int side, int64_t price)
{
	return side == TB_BOOK_BID ? -price : price;
}

/* Index of the first level whose key is >= that of `price`; `*found` says
 * whether that level has exactly `price`. */
static inline uint32_t lsearch(const tb_book_level_t *lv, uint32_t n, int side,
			       int64_t price, int *found)
{
	int64_t key = lkey(side, price);
	uint32_t lo = 0, hi = n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (lkey(side, lv[mid].price) < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = lo < n && lv[lo].price == price;
	return lo;
}

static inline int level_exists(const tb_book_t *b, uint32_t instr, int side,
			       int64_t price)
{
	int found;

	lsearch(side_levels(b, instr, side), *side_count(b, instr, side), side,
		price, &found);
	return found;
}

static inline void emit(const tb_book_t *b, const tb_book_event_t *ev)
{
	if (b->cb)
		b->cb(b->ctx, ev);
}

static inline void emit_level(const tb_book_t *b, uint8_t kind, uint32_t instr,
			      int side, uint32_t idx, const tb_book_level_t *l,
			      int64_t price)
{
	tb_book_event_t ev;

	memset(&ev, 0, sizeof(ev));
	ev.instrument = instr;
	ev.kind = kind;
	ev.side = (uint8_t)side;
	ev.level = (uint16_t)idx;
	ev.price = price;
	ev.qty = l ? l->qty : 0;
	ev.orders = l ? l->orders : 0;
	emit(b, &ev);
}

/* Adds one order's qty at `price` (the caller checked the level room). */
static void level_add(tb_book_t *b, uint32_t instr, int side, int64_t price,
		      uint64_t qty)
{
	tb_book_level_t *lv = side_levels(b, instr, side);
	uint32_t *n = side_count(b, instr, side);
	int found;
	uint32_t i = lsearch(lv, *n, side, price, &found);

	if (found) {
		lv[i].qty += qty;
		lv[i].orders++;
		emit_level(b, TB_BOOK_EV_LEVEL_MODIFY, instr, side, i, &lv[i], price);
		return;
	}
	memmove(&lv[i + 1], &lv[i], (*n - i) * sizeof(*lv));
	lv[i].price = price;
	lv[i].qty = qty;
	lv[i].orders = 1;
	lv[i].pad_ = 0;
	(*n)++;
	emit_level(b, TB_BOOK_EV_LEVEL_ADD, instr, side, i, &lv[i], price);
}

/* Takes `qty` off the level at `price`; `gone` = the order left it. */
static void level_sub(tb_book_t *b, uint32_t instr, int side, int64_t price,
		      uint64_t qty, int gone)
{
	tb_book_level_t *lv = side_levels(b, instr, side);
	uint32_t *n = side_count(b, instr, side);
	int found;
	uint32_t i = lsearch(lv, *n, side, price, &found);

	if (!found) /* cannot happen while the invariants hold */
		return;
	lv[i].qty -= qty;
	lv[i].orders -= gone ? 1u : 0u;
	if (lv[i].orders == 0) {
		memmove(&lv[i], &lv[i + 1], (*n - i - 1) * sizeof(*lv));
		(*n)--;
		emit_level(b, TB_BOOK_EV_LEVEL_DELETE, instr, side, i, NULL, price);
		return;
	}
	emit_level(b, TB_BOOK_EV_LEVEL_MODIFY, instr, side, i, &lv[i], price);
}

typedef struct top {
	int64_t bid_px, ask_px;
	uint64_t bid_qty, ask_qty;
} top_t;

static inline void top_read(const tb_book_t *b, uint32_t instr, top_t *t)
{
	const tb_book_level_t *bl = side_levels(b, instr, TB_BOOK_BID);
	const tb_book_level_t *al = side_levels(b, instr, TB_BOOK_ASK);
	int nb = *side_count(b, instr, TB_BOOK_BID) > 0;
	int na = *side_count(b, instr, TB_BOOK_ASK) > 0;

	t->bid_px = nb ? bl[0].price : 0;
	t->bid_qty = nb ? bl[0].qty : 0;
	t->ask_px = na ? al[0].price : 0;
	t->ask_qty = na ? al[0].qty : 0;
}

/* Emits TOP if the top of `instr` differs from `before`. */
static inline void top_check(const tb_book_t *b, uint32_t instr,
			     const top_t *before)
{
	top_t now;
	tb_book_event_t ev;

	if (!b->cb)
		return;
	top_read(b, instr, &now);
	if (memcmp(&now, before, sizeof(now)) == 0)
		return;
	memset(&ev, 0, sizeof(ev));
	ev.instrument = instr;
	ev.kind = TB_BOOK_EV_TOP;
	ev.bid_px = now.bid_px;
	ev.bid_qty = now.bid_qty;
	ev.ask_px = now.ask_px;
	ev.ask_qty = now.ask_qty;
	emit(b, &ev);
}

/* ------------------------------------------------------------ set-up */

int tb_book_create(tb_book_t **out, const tb_book_cfg_t *cfg)
{
	tb_book_t *b;
	uint64_t slots = 16;

	*out = NULL;
	if (!cfg || cfg->max_instruments == 0 || cfg->max_orders == 0 ||
	    cfg->max_levels == 0 || cfg->max_levels > 65535 ||
	    cfg->max_instruments > (1u << 20) || cfg->max_orders > (1u << 30))
		return tb_md_error_set(TB_EINVAL,
				       "book: max_instruments 1..1048576, "
				       "max_orders 1..2^30 and max_levels "
				       "1..65535 required");
	/* Load factor <= 1/2 keeps probe sequences short. */
	while (slots < (uint64_t)cfg->max_orders * 2)
		slots <<= 1;
	b = calloc(1, sizeof(*b));
	if (!b)
		return tb_md_error_set(TB_ENOMEM, "book: out of memory");
	b->cfg = *cfg;
	b->mask = slots - 1;
	{
		size_t s_bytes = slots * sizeof(*b->slots);
		size_t l_bytes = (size_t)cfg->max_instruments * 2 *
				 cfg->max_levels * sizeof(*b->levels);
		size_t n_bytes = (size_t)cfg->max_instruments * 2 *
				 sizeof(*b->nlev);
		int rc = tb_md_mem_alloc(&b->mem, s_bytes + l_bytes + n_bytes);

		if (rc) {
			free(b);
			return tb_md_error_prepend(rc, "book: %u orders, %u "
						   "instruments x %u levels",
						   cfg->max_orders,
						   cfg->max_instruments,
						   cfg->max_levels);
		}
		/* Slots and levels are multiples of 8 bytes: all aligned. */
		b->slots = b->mem.addr;
		b->levels = (tb_book_level_t *)((char *)b->mem.addr + s_bytes);
		b->nlev = (uint32_t *)((char *)b->mem.addr + s_bytes + l_bytes);
	}
	*out = b;
	return 0;
}

void tb_book_destroy(tb_book_t *b)
{
	if (!b)
		return;
	tb_md_mem_free(&b->mem);
	free(b);
}

void tb_book_set_cb(tb_book_t *b, tb_book_cb_t cb, void *ctx)
{
	b->cb = cb;
	b->ctx = ctx;
}

/* ------------------------------------------------------- operations */

int tb_book_add(tb_book_t *b, uint32_t instrument, uint64_t ref,
		tb_book_side_t side, int64_t price, uint64_t qty)
{
	order_slot_t o;
	top_t before;

	if (unlikely(instrument >= b->cfg.max_instruments))
		return TB_BOOK_EINSTR;
	if (unlikely(qty == 0 || price <= 0 ||
			(side != TB_BOOK_BID && side != TB_BOOK_ASK)))
		return TB_BOOK_EARG;
	if (unlikely(find(b, ref) >= 0))
		return TB_BOOK_EDUP;
	if (unlikely(b->live >= b->cfg.max_orders))
		return TB_BOOK_EFULL;
	if (unlikely(*side_count(b, instrument, side) >= b->cfg.max_levels &&
			!level_exists(b, instrument, side, price)))
		return TB_BOOK_ELEVELS;
	top_read(b, instrument, &before);
	memset(&o, 0, sizeof(o));
	o.ref = ref;
	o.price = price;
	o.qty = qty;
	o.instrument = instrument;
	o.side = (uint8_t)side;
	insert(b, &o);
	level_add(b, instrument, side, price, qty);
	top_check(b, instrument, &before);
	return 0;
}

/* Takes `qty` off the order in slot `i` (removing it when nothing is
 * left), with its level events and TOP. */
static void reduce(tb_book_t *b, int64_t i, uint64_t qty)
{
	order_slot_t *o = &b->slots[i];
	uint32_t instr = o->instrument;
	int side = o->side;
	int64_t price = o->price;
	int gone = qty == o->qty;
	top_t before;

	top_read(b, instr, &before);
	if (gone)
		erase(b, (uint64_t)i);
	else
		o->qty -= qty;
	level_sub(b, instr, side, price, qty, gone);
	top_check(b, instr, &before);
}

int tb_book_execute(tb_book_t *b, uint64_t ref, uint64_t qty, int64_t price,
		    uint64_t match)
{
	int64_t i = find(b, ref);
	tb_book_event_t ev;

	if (unlikely(i < 0))
		return TB_BOOK_ENOORDER;
	if (unlikely(qty == 0 || price < 0))
		return TB_BOOK_EARG;
	if (unlikely(qty > b->slots[i].qty))
		return TB_BOOK_EQTY;
	if (b->cb) {
		memset(&ev, 0, sizeof(ev));
		ev.instrument = b->slots[i].instrument;
		ev.kind = TB_BOOK_EV_TRADE;
		ev.side = b->slots[i].side;
		ev.price = price ? price : b->slots[i].price;
		ev.qty = qty;
		ev.order_ref = ref;
		ev.match = match;
		emit(b, &ev);
	}
	reduce(b, i, qty);
	return 0;
}

int tb_book_cancel(tb_book_t *b, uint64_t ref, uint64_t qty)
{
	int64_t i = find(b, ref);

	if (unlikely(i < 0))
		return TB_BOOK_ENOORDER;
	if (unlikely(qty == 0))
		return TB_BOOK_EARG;
	if (unlikely(qty > b->slots[i].qty))
		return TB_BOOK_EQTY;
	reduce(b, i, qty);
	return 0;
}

int tb_book_delete(tb_book_t *b, uint64_t ref)
{
	int64_t i = find(b, ref);

	if (unlikely(i < 0))
		return TB_BOOK_ENOORDER;
	reduce(b, i, b->slots[i].qty);
	return 0;
}

int tb_book_replace(tb_book_t *b, uint64_t old_ref, uint64_t new_ref,
		    uint64_t qty, int64_t price)
{
	int64_t i = find(b, old_ref);
	order_slot_t o;
	top_t before;
	int alone, exists_after;
	uint32_t n_after;

	if (unlikely(i < 0))
		return TB_BOOK_ENOORDER;
	if (unlikely(qty == 0 || price <= 0))
		return TB_BOOK_EARG;
	if (unlikely(new_ref != old_ref && find(b, new_ref) >= 0))
		return TB_BOOK_EDUP;
	o = b->slots[i];
	/* Room for the new level, counting the one the old order may free. */
	{
		tb_book_level_t *lv = side_levels(b, o.instrument, o.side);
		uint32_t n = *side_count(b, o.instrument, o.side);
		int found;
		uint32_t at = lsearch(lv, n, o.side, o.price, &found);

		alone = found && lv[at].orders == 1;
		n_after = n - (alone ? 1u : 0u);
		exists_after = level_exists(b, o.instrument, o.side, price) &&
			       !(price == o.price && alone);
		if (unlikely(!exists_after && n_after >= b->cfg.max_levels))
			return TB_BOOK_ELEVELS;
	}
	top_read(b, o.instrument, &before);
	erase(b, (uint64_t)i);
	level_sub(b, o.instrument, o.side, o.price, o.qty, 1);
	o.ref = new_ref;
	o.qty = qty;
	o.price = price;
	insert(b, &o);
	level_add(b, o.instrument, o.side, price, qty);
	top_check(b, o.instrument, &before);
	return 0;
}

int tb_book_trade(tb_book_t *b, uint32_t instrument, tb_book_side_t side,
		  int64_t price, uint64_t qty, uint64_t match)
{
	tb_book_event_t ev;

	if (unlikely(instrument >= b->cfg.max_instruments))
		return TB_BOOK_EINSTR;
	if (unlikely(qty == 0 || price <= 0 ||
			(side != TB_BOOK_BID && side != TB_BOOK_ASK)))
		return TB_BOOK_EARG;
	memset(&ev, 0, sizeof(ev));
	ev.instrument = instrument;
	ev.kind = TB_BOOK_EV_TRADE;
	ev.side = (uint8_t)side;
	ev.price = price;
	ev.qty = qty;
	ev.match = match;
	emit(b, &ev);
	return 0;
}

void tb_book_clear(tb_book_t *b, uint32_t instrument)
{
	uint64_t n = b->mask + 1, start = 0, k;
	int all = instrument == UINT32_MAX;

	if (all) {
		memset(b->slots, 0, n * sizeof(*b->slots));
		memset(b->nlev, 0, (size_t)b->cfg.max_instruments * 2 *
				   sizeof(*b->nlev));
		b->live = 0;
		return;
	}
	if (instrument >= b->cfg.max_instruments)
		return;
	/* An empty slot of the table as it is (there is one: the load factor
	 * is <= 1/2), so that no original cluster wraps past it. */
	while (b->slots[start].used)
		start++;
	for (k = 0; k < n; k++)
		if (b->slots[k].used && b->slots[k].instrument == instrument) {
			b->slots[k].used = 0;
			b->live--;
		}
	/* Re-seat the survivors cluster by cluster, from just after `start`:
	 * each entry reinserted finds the slots before it in its original
	 * cluster already settled, so it lands at or before where it was. */
	for (k = 1; k <= n; k++) {
		uint64_t i = (start + k) & b->mask;
		order_slot_t o;

		if (!b->slots[i].used)
			continue;
		o = b->slots[i];
		b->slots[i].used = 0;
		b->live--;
		insert(b, &o);
	}
	*side_count(b, instrument, TB_BOOK_BID) = 0;
	*side_count(b, instrument, TB_BOOK_ASK) = 0;
}

/* --------------------------------------------------------------- reads */

int tb_book_levels(const tb_book_t *b, uint32_t instrument,
		   tb_book_side_t side, tb_book_level_t *out, size_t n)
{
	uint32_t have;

	if (instrument >= b->cfg.max_instruments ||
	    (side != TB_BOOK_BID && side != TB_BOOK_ASK))
		return TB_BOOK_EINSTR;
	have = *side_count(b, instrument, side);
	if (n > have)
		n = have;
	memcpy(out, side_levels(b, instrument, side), n * sizeof(*out));
	return (int)n;
}

uint64_t tb_book_order_count(const tb_book_t *b)
{
	return b->live;
}

int tb_book_order(const tb_book_t *b, uint64_t ref, uint32_t *instrument,
		  tb_book_side_t *side, int64_t *price, uint64_t *qty)
{
	int64_t i = find(b, ref);

	if (i < 0)
		return TB_BOOK_ENOORDER;
	*instrument = b->slots[i].instrument;
	*side = (tb_book_side_t)b->slots[i].side;
	*price = b->slots[i].price;
	*qty = b->slots[i].qty;
	return 0;
}

uint64_t tb_book_checksum(const tb_book_t *b, uint32_t instrument)
{
	uint64_t sum = 0, k;

	for (k = 0; k <= b->mask; k++) {
		const order_slot_t *o = &b->slots[k];

		if (o->used && (instrument == UINT32_MAX ||
				o->instrument == instrument))
			sum += tb_book_order_hash(o->instrument, o->ref, o->side,
						  o->price, o->qty);
	}
	return sum;
}

const char *tb_book_strerror(int code)
{
	switch (code) {
	case 0: return "ok";
	case TB_BOOK_ENOORDER: return "no live order with that reference";
	case TB_BOOK_EDUP: return "order reference already live";
	case TB_BOOK_EQTY: return "more shares than the order has";
	case TB_BOOK_EFULL: return "order table full";
	case TB_BOOK_ELEVELS: return "too many price levels on that side";
	case TB_BOOK_EINSTR: return "instrument out of range";
	case TB_BOOK_EARG: return "zero quantity, bad side or bad price";
	default: return "unknown book error";
	}
}
