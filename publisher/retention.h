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
 * A window (tb_retention_window_t) is the same over a ring of its own, for
 * a process that keeps the recent frames of a stream it does not publish:
 * tb-recoveryd answers from it, in memory and without its store's lock,
 * whatever is recent enough.  Its writer copies each frame in; a frame
 * that does not follow the last one (a hole, a new epoch) starts it again,
 * under a lock that readers hold shared while they read, so that no reader
 * ever sees frames of two runs.
 *
 * Threads: tb_retention_record on the publishing thread (hot: no
 * allocation, lock or system call); tb_retention_bounds/read on any
 * number of other threads at once.  A window: append and reset on one
 * writer thread, bounds and read on any others.
 */
#ifndef TB_RETENTION_H
#define TB_RETENTION_H

#include "bus/barrier.h"
#include "bus/recovery/store.h"
#include "bus/ring.h"

#include <pthread.h>
#include <stdint.h>

typedef struct tb_retention {
	_Atomic uint64_t *pos; /* ring position of seq, at seq & mask */
	uint64_t mask;
	uint64_t n;            /* messages kept: cfg.retention */
	const tb_ring_t *ring;
	uint64_t epoch;
	uint32_t stream_id;
	/* Readers: the first sequence still held when one last looked.  It
	 * only grows (the oldest frames go first), so the next look starts
	 * there: one probe of the ring, not a search of it. */
	_Atomic uint64_t first_hint;
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

/*
 * The recovery server's copy (recovery/server.h): up to `max` frames from
 * `first` written into `dst` (`cap` bytes, any alignment) back to back, as
 * they go on the wire (each exactly its length, TB_FRAME_F_REPLAY set),
 * their bytes in *len.  One copy per frame and one check against overwrite
 * for the whole batch: the writer overwrites the oldest frames first, so
 * if the first frame copied is intact after the copy, every later one is.
 * Returns the count, 0 when the first frame does not fit in `cap`, or
 * TB_STORE_TOO_OLD / TB_STORE_NOT_YET.
 */
int tb_retention_copy(void *r, uint64_t first, int max, void *dst, size_t cap,
		      size_t *len);

/* ------------------------------------------------------------ windows */

typedef struct tb_retention_window {
	tb_retention_t ret;
	tb_ring_t ring;
	void *mem;
	uint64_t size;
	uint64_t from;           /* the run it holds starts here (lock) */
	pthread_rwlock_t lock;   /* shared: readers; exclusive: a restart */
} tb_retention_window_t;

/*
 * A window of `ring_bytes` (a power of two within the ring bounds) of
 * stream `stream_id`, empty, of no epoch yet.  0, or TB_EINVAL / TB_ENOMEM
 * with a message.
 */
int tb_retention_window_init(tb_retention_window_t *w, uint64_t ring_bytes,
			     uint32_t stream_id);
void tb_retention_window_free(tb_retention_window_t *w);

/*
 * Writer: keeps a copy of frame `f` of `epoch`.  A frame of another epoch,
 * or one that does not follow the last one kept, starts the window again
 * with it.  A frame larger than the window's largest is not kept, and the
 * window starts again after it.  Never fails: a window is a cache.
 */
void tb_retention_window_append(tb_retention_window_t *w, uint64_t epoch,
				const tb_frame_hdr_t *f);

/* The epoch and range the window holds now ([0, 0] when none). */
void tb_retention_window_bounds(tb_retention_window_t *w, uint64_t *epoch,
				uint64_t *first, uint64_t *last);

/* Up to `max` frames of `epoch` from `first`, as tb_retention_read;
 * TB_STORE_TOO_OLD also when the window holds another epoch. */
int tb_retention_window_read(tb_retention_window_t *w, uint64_t epoch,
			     uint64_t first, int max, tb_store_read_fn fn,
			     void *clientd);

/* The same as tb_retention_copy. */
int tb_retention_window_copy(tb_retention_window_t *w, uint64_t epoch,
			     uint64_t first, int max, void *dst, size_t cap,
			     size_t *len);

#endif
