/*
 * retention.h - the publisher's retention buffer: the last N messages of
 * the stream, served to recovery clients (a restarted tb-recoveryd, a
 * subscriber only just behind) by the publisher itself.
 *
 * Design: no second copy.  Every publisher already writes each frame into
 * its transport's ring (ring.h), where it stays until the writer comes
 * round again.  Retention adds an index of N ring positions (N a power of
 * two >= cfg.retention), slot seq & (N-1), and the last sequence recorded.
 * The hot path does two stores per message; the reader (a recovery server
 * thread) finds a frame by its slot, copies it out of the ring, and then
 * validates the copy against overwrite exactly as a shm reader does: if
 * the writer's intent has moved more than a ring past the frame, or the
 * copy carries another sequence (the slot was reused), the frame is gone.
 * So what is served is the last min(retention, what the ring still holds)
 * messages: size the ring for the retention wanted.
 *
 * Memory ordering: the writer stores the slot, then store-releases `last`
 * (R3); a reader load-acquires `last` (A3 pairs with R3) before it reads
 * slots up to it.  The ring's own R0/R1 (ring.h) order the frame bytes:
 * the reader copies, fences (A0 pairs with R0), then reads the intent.
 *
 * Threads: tb_retention_record on the publishing thread (hot: no
 * allocation, lock or system call); tb_retention_bounds/read on any
 * number of other threads at once.
 */
#ifndef TB_RETENTION_H
#define TB_RETENTION_H

#include "bus/barrier.h"
#include "bus/recovery/store.h"
#include "bus/ring.h"

#include <stdint.h>

typedef struct tb_retention {
	_Atomic uint64_t *pos; /* ring position of seq, at seq & mask */
	uint64_t mask;
	uint64_t n;            /* messages kept: cfg.retention */
	const tb_ring_t *ring;
	uint64_t epoch;
	uint32_t stream_id;
	tb_cache_aligned _Atomic uint64_t last; /* last sequence recorded */
} tb_retention_t;

/* Allocates the index for `n` messages of `ring`.  0 or TB_ENOMEM. */
int tb_retention_init(tb_retention_t *r, uint64_t n, const tb_ring_t *ring,
		      uint32_t stream_id, uint64_t epoch);
void tb_retention_free(tb_retention_t *r);

/* Records that the frame of `seq` starts at ring position `pos` (after its
 * commit).  Hot path: two stores. */
static inline void tb_retention_record(tb_retention_t *r, uint64_t seq,
				       uint64_t pos)
{
	/* Relaxed: ordered for readers by R3 just after. */
	tb_atomic_store_relaxed(&r->pos[seq & r->mask], pos);
	/* R3: pairs with A3 in tb_retention_bounds / tb_retention_read.  It
	 * comes after the frame's commit (R1 in tb_ring_commit), so a reader
	 * that sees `seq` sees its frame's bytes too. */
	tb_atomic_store_release(&r->last, seq);
}

/* The epoch, and the range that can be read now ([0, 0] before the first
 * message).  The range may shrink at its start at any moment. */
void tb_retention_bounds(void *r, uint64_t *epoch, uint64_t *first,
			 uint64_t *last);

/* Up to `max` frames from `first` to `fn`, as tb_store_read: the count,
 * TB_STORE_TOO_OLD or TB_STORE_NOT_YET.  Frames are handed over with
 * TB_FRAME_F_REPLAY set. */
int tb_retention_read(void *r, uint64_t first, int max, tb_store_read_fn fn,
		      void *clientd);

#endif
