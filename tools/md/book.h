/*
 * book.h - order-by-order books for a set of instruments.
 *
 * One tb_book_t holds every instrument of a feed.  Orders live in one
 * open-addressing hash table keyed by order reference (references are
 * unique across a feed's instruments, as in ITCH), sized at create for
 * `max_orders` at a load factor of at most 1/2, with linear probing and
 * backward-shift deletion so that no tombstones build up.  Price levels are
 * a sorted array per instrument and side (best first: bids descending, asks
 * ascending) of at most `max_levels` entries, so a level's index is its
 * depth.  Everything is allocated in tb_book_create(), pre-faulted and
 * locked (md_mem.h), so the per-message calls never allocate, lock, make a
 * system call or take a page fault.
 *
 * Every change is reported, in order, through the callback:
 *   LEVEL_ADD / LEVEL_MODIFY / LEVEL_DELETE  a level appeared at `level`
 *        (those behind it move one deeper), changed its qty/orders, or went
 *        away (those behind move one up);
 *   TOP   best bid or best ask (price or qty) changed: bid_* and ask_* hold
 *        the new top (qty 0 = that side is empty), once per operation;
 *   TRADE an execution against a resting order (side = the resting order's
 *        side) or a non-displayed trade; comes before the level change.
 *
 * Threads: a book belongs to one thread; nothing here is shared.
 * Errors (md_error.h): operations return 0 or a negative TB_BOOK_E* code
 * (own range, tb_book_strerror()), and a failed operation changes nothing.
 */
#ifndef TB_BOOK_H
#define TB_BOOK_H

#include "tools/hash.h"

#include <stddef.h>
#include <stdint.h>

enum tb_book_error {
	TB_BOOK_ENOORDER = -121, /* no live order with that reference */
	TB_BOOK_EDUP = -122,     /* an order with that reference is live */
	TB_BOOK_EQTY = -123,     /* more shares than the order has */
	TB_BOOK_EFULL = -124,    /* max_orders live orders already */
	TB_BOOK_ELEVELS = -125,  /* the side has max_levels levels already */
	TB_BOOK_EINSTR = -126,   /* instrument index out of range */
	TB_BOOK_EARG = -127,     /* zero qty, bad side, price <= 0 */
};

typedef enum tb_book_side {
	TB_BOOK_BID = 0,
	TB_BOOK_ASK = 1,
} tb_book_side_t;

typedef enum tb_book_ev_kind {
	TB_BOOK_EV_LEVEL_ADD = 1,
	TB_BOOK_EV_LEVEL_MODIFY = 2,
	TB_BOOK_EV_LEVEL_DELETE = 3,
	TB_BOOK_EV_TOP = 4,
	TB_BOOK_EV_TRADE = 5,
} tb_book_ev_kind_t;

typedef struct tb_book_event {
	uint32_t instrument;
	uint8_t kind;       /* tb_book_ev_kind_t */
	uint8_t side;       /* tb_book_side_t (LEVEL_*, TRADE) */
	uint16_t level;     /* LEVEL_*: depth, 0 = best */
	int64_t price;      /* LEVEL_*, TRADE */
	uint64_t qty;       /* LEVEL_*: level qty after (0 on delete);
			       TRADE: executed qty */
	uint32_t orders;    /* LEVEL_*: orders at the level after */
	uint32_t pad_;
	uint64_t order_ref; /* TRADE: the resting order (0 if none) */
	uint64_t match;     /* TRADE: match number */
	int64_t bid_px;     /* TOP */
	uint64_t bid_qty;
	int64_t ask_px;
	uint64_t ask_qty;
} tb_book_event_t;

typedef void (*tb_book_cb_t)(void *ctx, const tb_book_event_t *ev);

typedef struct tb_book_cfg {
	uint32_t max_instruments; /* instruments 0 .. max_instruments-1 */
	uint32_t max_orders;      /* live orders, all instruments together */
	uint32_t max_levels;      /* levels per instrument and side, <= 65535 */
} tb_book_cfg_t;

typedef struct tb_book_level {
	int64_t price;
	uint64_t qty;
	uint32_t orders;
	uint32_t pad_;
} tb_book_level_t;

typedef struct tb_book tb_book_t;

/* Allocates a book for `cfg` (all memory, once).  Returns 0 or TB_EINVAL /
 * TB_ENOMEM with a message (tb_md_error_msg()). */
int tb_book_create(tb_book_t **out, const tb_book_cfg_t *cfg);
void tb_book_destroy(tb_book_t *b);

/* Sets the event callback (NULL: no events).  Not during an operation. */
void tb_book_set_cb(tb_book_t *b, tb_book_cb_t cb, void *ctx);

/* Per-message operations (hot path: no allocation, lock or system call). */
int tb_book_add(tb_book_t *b, uint32_t instrument, uint64_t ref,
		tb_book_side_t side, int64_t price, uint64_t qty);
/* Executes `qty` of order `ref`: at `price`, or at the order's own price
 * when `price` is 0.  A full execution removes the order. */
int tb_book_execute(tb_book_t *b, uint64_t ref, uint64_t qty, int64_t price,
		    uint64_t match);
/* Removes `qty` shares from order `ref` (partial cancel; the whole
 * remainder removes the order). */
int tb_book_cancel(tb_book_t *b, uint64_t ref, uint64_t qty);
int tb_book_delete(tb_book_t *b, uint64_t ref);
/* Replaces order `old_ref` by `new_ref` with a new qty and price, same
 * instrument and side (the new order loses time priority). */
int tb_book_replace(tb_book_t *b, uint64_t old_ref, uint64_t new_ref,
		    uint64_t qty, int64_t price);
/* A trade against a non-displayed order: reported, the book is unchanged. */
int tb_book_trade(tb_book_t *b, uint32_t instrument, tb_book_side_t side,
		  int64_t price, uint64_t qty, uint64_t match);

/* Removes every order of `instrument` (UINT32_MAX: of all instruments)
 * without events, e.g. to resynchronise after data loss.  Walks the whole
 * order table: not for the hot path. */
void tb_book_clear(tb_book_t *b, uint32_t instrument);

/* Reads: the levels of one side, best first (at most `n`; returns how
 * many), the live order count, and one order. */
int tb_book_levels(const tb_book_t *b, uint32_t instrument,
		   tb_book_side_t side, tb_book_level_t *out, size_t n);
uint64_t tb_book_order_count(const tb_book_t *b);
int tb_book_order(const tb_book_t *b, uint64_t ref, uint32_t *instrument,
		  tb_book_side_t *side, int64_t *price, uint64_t *qty);

/* State checksum: the wrapping sum of tb_book_order_hash() over the live
 * orders of `instrument` (UINT32_MAX: all).  Independent of insertion
 * order, so a simulator can compute the same value from its own order
 * list and compare books without sharing any code but this hash. */
uint64_t tb_book_checksum(const tb_book_t *b, uint32_t instrument);

static inline uint64_t tb_book_order_hash(uint32_t instrument, uint64_t ref,
					  int side, int64_t price, uint64_t qty)
{
	uint64_t h = tb_hash_mix64(ref ^ ((uint64_t)instrument << 48));

	h = tb_hash_mix64(h ^ (uint64_t)price ^ ((uint64_t)side << 63));
	return tb_hash_mix64(h + qty);
}

const char *tb_book_strerror(int code);

#endif
