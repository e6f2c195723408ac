/*
 * fifo.h - a bounded single-producer single-consumer queue of variable-size
 * entries, the hand-off between a subscriber's poll thread and its recovery
 * thread, and the buffer of live frames held while a gap is recovered.
 *
 * The queue is `cap` bytes (a power of two) of entries laid end to end,
 * addressed by free-running 64-bit positions masked on access, as in ring.h.
 * Each entry is a 64-byte tb_fifo_ent_t followed by its payload, rounded up
 * to TB_FIFO_ALIGN; an entry never straddles the end: the producer fills the
 * rest with a PAD entry and starts again at offset 0.
 *
 * Positions: `tail` (written by the producer only) and `head` (consumer
 * only), on separate cache lines.  Each side also keeps the other's
 * position as it last read it (`head_seen`, `tail_seen`, on its own line),
 * and reads the other's line only when that copy says full or empty: a
 * burst of entries then costs one cache-line transfer each way per
 * refresh, not one per entry.
 *   Producer: reserve checks room against head (A1 pairs with R2), writes
 *   the entry, store-releases tail (R1).
 *   Consumer: load-acquire tail (A2 pairs with R1) to see whole entries,
 *   reads, store-releases head (R2) so the producer may reuse the bytes.
 * Used from one thread (the live buffer) the same calls are simply correct.
 *
 * Threads: tb_fifo_reserve/commit on the producer thread, peek/release on
 * the consumer thread.  No allocation, lock or system call in any of them.
 */
#ifndef TB_FIFO_H
#define TB_FIFO_H

#include "bus/barrier.h"

#include <stddef.h>
#include <stdint.h>

#define TB_FIFO_ALIGN 64u

enum tb_fifo_kind {
	TB_FIFO_PAD = 0,   /* filler to the end of the buffer */
	TB_FIFO_FRAME = 1, /* a message; payload follows */
	TB_FIFO_GAP = 2,   /* [seq, last] missing here: recover it */
	TB_FIFO_LOSS = 3,  /* [seq, last] lost for good: TB_DATA_LOSS */
	TB_FIFO_COND = 4,  /* a poll condition (`code`) at this place */
	TB_FIFO_DONE = 5,  /* end of one recovery job (`code`: 0 or error) */
};

typedef struct tb_fifo_ent {
	uint32_t space;       /* bytes of this entry, header included */
	uint16_t kind;        /* enum tb_fifo_kind */
	uint16_t template_id;
	uint32_t len;         /* payload bytes */
	uint32_t stream_id;
	int32_t code;         /* COND, DONE */
	uint32_t flags;       /* TB_MSG_F_* */
	uint64_t seq;         /* FRAME: its sequence; GAP, LOSS: first */
	uint64_t last;        /* GAP, LOSS: last of the range; DONE: stats */
	uint64_t publish_ns;
	uint64_t receive_ns;
	uint64_t aux;         /* DONE: stats */
} tb_fifo_ent_t;

_Static_assert(sizeof(tb_fifo_ent_t) == 64, "fifo entry");

typedef struct tb_fifo {
	uint8_t *base;
	uint64_t mask;
	uint64_t reserved_at; /* producer: where the open reservation goes */
	uint64_t reserved_end;
	tb_cache_aligned _Atomic uint64_t tail;
	uint64_t head_seen;   /* producer: head when it last read it */
	tb_cache_aligned _Atomic uint64_t head;
	uint64_t tail_seen;   /* consumer: tail when it last read it */
} tb_fifo_t;

static inline uint32_t tb_fifo_space(uint32_t payload)
{
	return (uint32_t)((sizeof(tb_fifo_ent_t) + payload + TB_FIFO_ALIGN - 1) &
			  ~(uint64_t)(TB_FIFO_ALIGN - 1));
}

/* Sets up a queue over `cap` bytes at `base` (a power of two, aligned to
 * TB_FIFO_ALIGN, at least two entries). */
static inline void tb_fifo_init(tb_fifo_t *q, void *base, uint64_t cap)
{
	q->base = (uint8_t *)base;
	q->mask = cap - 1;
	q->reserved_at = q->reserved_end = 0;
	/* Relaxed, unpaired: the queue is set up before either end runs;
	 * whatever hands it over (pthread_create) orders these. */
	tb_atomic_store_relaxed(&q->tail, 0);
	tb_atomic_store_relaxed(&q->head, 0);
	q->head_seen = q->tail_seen = 0;
}

/* Largest payload one entry may carry (it must fit twice, so a wrap can
 * never wedge the queue). */
static inline uint64_t tb_fifo_max_payload(const tb_fifo_t *q)
{
	return (q->mask + 1) / 2 - sizeof(tb_fifo_ent_t);
}

/* Producer: an entry for `payload` bytes, or NULL when there is no room
 * now.  Fill it, then tb_fifo_commit. */
static inline tb_fifo_ent_t *tb_fifo_reserve(tb_fifo_t *q, uint32_t payload)
{
	/* Relaxed: the producer reads back its own tail. */
	uint64_t tail = tb_atomic_load_relaxed(&q->tail);
	uint64_t cap = q->mask + 1, off = tail & q->mask;
	uint32_t space = tb_fifo_space(payload);
	uint64_t pad = off + space > cap ? cap - off : 0;
	tb_fifo_ent_t *e;

	if (tb_unlikely(payload > tb_fifo_max_payload(q)))
		return NULL;
	if (tail + pad + space - q->head_seen > cap) {
		/* A1 pairs with R2 in tb_fifo_peek / tb_fifo_release: the
		 * consumer is done with the bytes below head, so they may
		 * be written again.  (head_seen is an earlier such load: a
		 * lower bound, so room it shows is room.) */
		q->head_seen = tb_atomic_load_acquire(&q->head);
		if (tail + pad + space - q->head_seen > cap)
			return NULL;
	}
	if (pad) {
		e = (tb_fifo_ent_t *)(q->base + off);
		e->space = (uint32_t)pad;
		e->kind = TB_FIFO_PAD;
		tail += pad;
	}
	q->reserved_at = tail;
	q->reserved_end = tail + space;
	e = (tb_fifo_ent_t *)(q->base + (tail & q->mask));
	e->space = space;
	e->len = payload;
	return e;
}

static inline void tb_fifo_commit(tb_fifo_t *q)
{
	/* R1: the entry is written; pairs with A2 in tb_fifo_peek and
	 * tb_fifo_empty. */
	tb_atomic_store_release(&q->tail, q->reserved_end);
}

/* Consumer: the oldest entry, or NULL when empty.  PAD entries are stepped
 * over here. */
static inline tb_fifo_ent_t *tb_fifo_peek(tb_fifo_t *q)
{
	/* Relaxed: the consumer reads back its own head. */
	uint64_t head = tb_atomic_load_relaxed(&q->head);
	uint64_t tail = q->tail_seen;
	tb_fifo_ent_t *e;

	if (head == tail) {
		/* A2 pairs with R1 in tb_fifo_commit: entries below tail
		 * are whole.  (tail_seen is an earlier such load: entries
		 * below it were whole already.) */
		tail = q->tail_seen = tb_atomic_load_acquire(&q->tail);
		if (head == tail)
			return NULL;
	}
	e = (tb_fifo_ent_t *)(q->base + (head & q->mask));
	if (e->kind == TB_FIFO_PAD) {
		head += e->space;
		/* R2: pairs with A1 in tb_fifo_reserve. */
		tb_atomic_store_release(&q->head, head);
		if (head == tail) {
			/* A2 pairs with R1 in tb_fifo_commit. */
			tail = q->tail_seen = tb_atomic_load_acquire(&q->tail);
			if (head == tail)
				return NULL;
		}
		e = (tb_fifo_ent_t *)(q->base + (head & q->mask));
	}
	return e;
}

/* Consumer: drops the entry tb_fifo_peek returned. */
static inline void tb_fifo_release(tb_fifo_t *q, const tb_fifo_ent_t *e)
{
	/* R2: done with the entry's bytes; pairs with A1 in tb_fifo_reserve.
	 * The relaxed load reads back the consumer's own head. */
	tb_atomic_store_release(&q->head,
				tb_atomic_load_relaxed(&q->head) + e->space);
}

/* Consumer: nothing to peek.  Relaxed head (its own); A2 on tail, pairs
 * with R1 in tb_fifo_commit. */
static inline int tb_fifo_empty(tb_fifo_t *q)
{
	return tb_atomic_load_relaxed(&q->head) ==
	       tb_atomic_load_acquire(&q->tail);
}

static inline void *tb_fifo_payload(tb_fifo_ent_t *e)
{
	return (uint8_t *)e + sizeof(*e);
}

#endif
