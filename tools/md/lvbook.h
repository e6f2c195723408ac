/*
 * lvbook.h - books of price levels, kept from the market-data schema's
 * BookLevelUpdate messages (the subscriber's side of book.h).
 *
 * A publisher of BookLevelUpdate tells each change of a side's levels by
 * its depth: Add at level i (the levels from i on move one deeper), Modify
 * at i (its quantity and order count), Delete at i (those behind move one
 * up).  Applied in sequence order, from an empty book or from a snapshot
 * (whose levels come as Adds, best first), these rebuild the publisher's
 * levels exactly, to the depth the schema can say (Level is a uint8 whose
 * null is 255, so levels 0..254).
 *
 * tb_lvbook_checksum() sums tb_lvbook_hash() over every level of every
 * instrument, wrapping: the feed handler computes the same sum from its
 * order books (book.h) so that a test, or a person, can compare the books
 * a strategy holds with the handler's without moving them.
 *
 * Each instrument and side is a fixed array of TB_LVBOOK_DEPTH levels,
 * allocated at create (calloc: only what is touched costs memory).  The
 * per-update calls do not allocate, lock or make a system call.
 *
 * Threads: a book belongs to one thread.
 * Errors: tb_lvbook_apply returns 0 or a negative TB_LVBOOK_E* code (its
 * own range, -141..-145), and a refused update changes nothing.
 */
#ifndef TB_LVBOOK_H
#define TB_LVBOOK_H

#include "tools/hash.h"

#include <stddef.h>
#include <stdint.h>

#define TB_LVBOOK_DEPTH 255 /* levels 0..254: the schema's Level, less null */

enum tb_lvbook_error {
	TB_LVBOOK_EINSTR = -141,  /* instrument out of range */
	TB_LVBOOK_ESIDE = -142,   /* side not 0 (bid) or 1 (ask) */
	TB_LVBOOK_ELEVEL = -143,  /* no such level (Modify, Delete), or an Add
				     beyond the side's depth + 1 */
	TB_LVBOOK_EFULL = -144,   /* an Add to a side of TB_LVBOOK_DEPTH */
	TB_LVBOOK_EACTION = -145, /* action not Add, Modify or Delete */
};

enum tb_lvbook_action {
	TB_LVBOOK_ADD = 0,
	TB_LVBOOK_MODIFY = 1,
	TB_LVBOOK_DELETE = 2,
};

typedef struct tb_lvbook_level {
	int64_t px;
	uint64_t qty;
	uint32_t orders;
	uint32_t pad_;
} tb_lvbook_level_t;

typedef struct tb_lvbook tb_lvbook_t;

/* Books for instruments 0..max_instruments-1.  Returns 0, or -1 when out
 * of memory (or max_instruments is 0). */
int tb_lvbook_create(tb_lvbook_t **b, uint32_t max_instruments);
void tb_lvbook_destroy(tb_lvbook_t *b);

/* Empties every instrument's book (`instrument` = UINT32_MAX) or one. */
void tb_lvbook_clear(tb_lvbook_t *b, uint32_t instrument);

/* Applies one level change; `side` 0 = bid, 1 = ask (the schema's Side
 * less one). */
int tb_lvbook_apply(tb_lvbook_t *b, uint32_t instrument, int side, int action,
		    uint32_t level, int64_t px, uint64_t qty, uint32_t orders);

/* Levels of one side (0 for an instrument out of range), and one of them
 * (NULL beyond the depth). */
uint32_t tb_lvbook_depth(const tb_lvbook_t *b, uint32_t instrument, int side);
const tb_lvbook_level_t *tb_lvbook_level(const tb_lvbook_t *b,
					 uint32_t instrument, int side,
					 uint32_t level);

/* The sum of tb_lvbook_hash over every level held. */
uint64_t tb_lvbook_checksum(const tb_lvbook_t *b);

/* The same sum over the levels of order books (book.h) - instruments
 * 0..max_instruments-1, levels 0..TB_LVBOOK_DEPTH-1 - their prices
 * multiplied by `px_scale` (feed prices to the schema's): what a
 * subscriber's lvbook holds when it has every BookLevelUpdate of them.
 * Walks every level: not for a hot path. */
struct tb_book;
uint64_t tb_lvbook_book_checksum(const struct tb_book *book,
				 uint32_t max_instruments, int64_t px_scale);

/* One level's share of the checksum: its place (instrument, side, depth)
 * and contents (price as the schema carries it, exponent -9). */
static inline uint64_t tb_lvbook_hash(uint32_t instrument, int side,
				      uint32_t level, int64_t px, uint64_t qty,
				      uint32_t orders)
{
	uint64_t h = tb_hash_mix64(((uint64_t)instrument << 32 |
				    (uint64_t)side << 16 | level) + TB_HASH_GOLDEN);

	h = tb_hash_mix64(h ^ (uint64_t)px);
	h = tb_hash_mix64(h ^ qty);
	return tb_hash_mix64(h ^ orders);
}

#endif
