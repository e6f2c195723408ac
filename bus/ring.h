/*
 * ring.h - the single-writer frame ring every publisher writes into.
 *
 * A ring is `size` bytes (a power of two) of frames laid end to end
 * (frame.h), addressed by free-running 64-bit positions masked on access.
 * A frame never straddles the end of the ring: when one would, the writer
 * fills the tail with a padding frame (which carries the sequence number of
 * the frame after it) and starts again at offset 0.
 *
 * Commit word.  A frame's sequence number is written last, with release
 * (R1 in tb_ring_commit); 0 is never a sequence.  A reader in another
 * process (the shm transport, transport/shm.h) therefore needs no shared
 * tail: it polls the sequence word of the next frame itself, one cache
 * line it must fetch anyway, and finds the frame whole once the word holds
 * the sequence it expects.  For that the word must never hold stale bytes
 * of an earlier lap when the reader gets there: the claim of a shared
 * ring zeroes the sequence word of the frame after it (a position the
 * writer will write next anyway), and the reader comes to that position
 * only through this frame's commit.  A writer fills a frame's payload
 * first and its header last, so that the stores to the line the reader
 * polls go together.  A padding frame is committed after the frame that
 * follows it, so a reader that passes the pad finds that frame whole too.
 *
 * Intent and marks.  Before the writer stores a byte beyond what it
 * announced, it announces more: `intent` in tb_ring_lap_t, a position it
 * will not write at or beyond until it announces again, stored before a
 * release fence (R0).  A reader that copied a frame at `pos`, fenced (A0)
 * and then finds `intent - pos <= size` knows no byte of its copy was
 * overwritten: overwriting it takes an announcement past pos + size first.
 * A private ring (rc, ud, udp: the publisher's own memory) announces at
 * every claim, exactly the claim's end, because its readers (the retention
 * buffer's, publisher/retention.c) want every frame the ring still holds.
 * A shared ring announces a chunk ahead (min(size / 32, 32 KiB)), so the
 * line that holds intent is written once a chunk, not once a message: a
 * reader reads it after every copy from its own cache, and a reader more
 * than size - chunk behind counts as lapped (its lap margin).  With each
 * announcement a shared ring also records a *mark*: the position and
 * sequence of the frame being claimed, a boundary a lapped or late reader
 * can resynchronise at.  The marks change under a sequence count (`gen`,
 * odd while they change; W2 / R2), so a reader takes both or neither.
 *
 * Memory ordering, in one place:
 *   R0  tb_ring_claim_ (a private ring) and tb_ring_announce (a shared
 *       one): intent (and marks) before any byte it covers (release
 *       fence); pairs with A0 after a reader's copy.
 *   R1  tb_ring_commit: the sequence word, after the frame's bytes and the
 *       next frame's zeroed word (release store); pairs with a reader's
 *       acquire load of that word (A1).
 *   W2/R2  tb_ring_announce: gen odd, fence, marks, gen even (release);
 *       pairs with A2 in the readers' mark loads (transport/shm.c).
 *
 * Threads: one writer thread; claim, commit and abort are its hot path and
 * make no allocation, lock or system call, and no atomic read-modify-write
 * or fence per message beyond R1 (R0 and R2 come once a chunk on a shared
 * ring; on x86 R0 and R1 are plain moves either way).
 */
#ifndef TB_RING_H
#define TB_RING_H

#include "bus/barrier.h"
#include "bus/frame.h"

#include <stddef.h>
#include <stdint.h>

/* Ring sizes, one set for every transport, the control protocol and the
 * config file.  Smallest: the frames of one largest UDP datagram (65507
 * bytes).  Largest: a ring is pinned, registered memory, and its offsets
 * must fit the 32-bit immediate of an RDMA WRITE with room to spare. */
#define TB_RING_MIN (UINT64_C(64) << 10)
#define TB_RING_MAX (UINT64_C(1) << 30)

/* A shared ring announces intent this far ahead, at most: once every ~340
 * messages of 64 bytes; a late joiner's walk from the newest mark to the
 * live end reads about this many bytes of headers.  A ring's chunk is at
 * most a 32nd of it, so the lap margin costs a reader at most 3% of the
 * ring (and the retention buffer as much of what it can serve). */
#define TB_RING_CHUNK_MAX (UINT64_C(32) << 10)

/* 1 when `size` is a power of two within TB_RING_MIN..TB_RING_MAX. */
static inline int tb_ring_size_ok(uint64_t size)
{
	return size >= TB_RING_MIN && size <= TB_RING_MAX &&
	       (size & (size - 1)) == 0;
}

/* The writer's announcements: one cache line, written once a chunk by a
 * shared ring (see the essay). */
typedef struct tb_ring_lap {
	_Atomic uint64_t intent;   /* nothing at or beyond is being written */
	_Atomic uint64_t gen;      /* odd while the marks change */
	_Atomic uint64_t mark_pos; /* a frame boundary: where a claim began */
	_Atomic uint64_t mark_seq; /* the sequence of the frame there */
	uint8_t pad[32];
} tb_ring_lap_t;

_Static_assert(offsetof(tb_ring_lap_t, intent) == 0, "ring lap layout");
_Static_assert(offsetof(tb_ring_lap_t, gen) == 8, "ring lap layout");
_Static_assert(offsetof(tb_ring_lap_t, mark_pos) == 16, "ring lap layout");
_Static_assert(offsetof(tb_ring_lap_t, mark_seq) == 24, "ring lap layout");
_Static_assert(sizeof(tb_ring_lap_t) == TB_CACHE_LINE, "ring lap layout");

typedef struct tb_ring {
	uint8_t *base;
	uint64_t mask;               /* size - 1 */
	uint64_t tail;               /* where the next claim starts */
	uint64_t claim_tail;         /* tail after the open claim; 0 = none */
	uint64_t claim_pos;          /* where the open claim's frame starts */
	uint64_t claim_seq;          /* the open claim's sequence number */
	uint64_t intent;             /* the writer's copy of lap->intent
					(a shared ring's; a private one
					announces every claim, unread) */
	uint64_t ahead;              /* announce this far past a claim's end:
					a chunk (shared) or 0 (private) */
	uint64_t reach;              /* bytes past a claim's end a commit
					writes: a header (shared) or 0 */
	uint32_t max_frame;          /* largest frame, header included */
	uint32_t stream_id;
	_Atomic uint64_t *intent_pub; /* &lap->intent, for the readers */
	tb_ring_lap_t *lap;          /* in shared memory, or &own */
	tb_ring_lap_t own;           /* a private ring's */
} tb_ring_t;

/* One frame may take at most an eighth of the ring, so a single large
 * message can never lap a reader that is keeping up. */
static inline uint32_t tb_ring_max_frame(uint64_t size)
{
	uint64_t m = size / 8;

	return m > TB_FRAME_MAX_LEN ? TB_FRAME_MAX_LEN : (uint32_t)m;
}

/* How far ahead a shared ring of `size` bytes announces (see the essay). */
static inline uint64_t tb_ring_chunk(uint64_t size)
{
	return size / 32 < TB_RING_CHUNK_MAX ? size / 32 : TB_RING_CHUNK_MAX;
}

static inline void tb_ring_setup_(tb_ring_t *r, void *base, uint64_t size,
				  uint32_t stream_id, tb_ring_lap_t *lap)
{
	r->base = (uint8_t *)base;
	r->mask = size - 1;
	r->tail = 0;
	r->claim_tail = 0;
	r->claim_pos = 0;
	r->claim_seq = 0;
	r->intent = 0;
	r->max_frame = tb_ring_max_frame(size);
	r->stream_id = stream_id;
	r->lap = lap ? lap : &r->own;
	r->intent_pub = &r->lap->intent;
	/* Relaxed, unpaired: nothing is announced before the first claim.
	 * A shm ring's header says so already (published by its version,
	 * R2 in tb_shm_writer_open); a private ring has no reader yet. */
	tb_atomic_store_relaxed(&r->lap->intent, 0);
	tb_atomic_store_relaxed(&r->lap->gen, 0);
	tb_atomic_store_relaxed(&r->lap->mark_pos, 0);
	tb_atomic_store_relaxed(&r->lap->mark_seq, 1);
}

/* A private ring whose announcements go to `lap`, memory a reader
 * elsewhere reads (an rc subscriber reading back reads intent there
 * through the publisher's registered key, transport/rc.h), or to the
 * ring's own line when `lap` is NULL. */
static inline void tb_ring_init_at(tb_ring_t *r, void *base, uint64_t size,
				   uint32_t stream_id, tb_ring_lap_t *lap)
{
	tb_ring_setup_(r, base, size, stream_id, lap);
	r->ahead = 0;
	r->reach = 0;
}

/* Sets up a private ring over `size` bytes at `base` (a power of two):
 * the publisher's own memory, read by its own threads only. */
static inline void tb_ring_init(tb_ring_t *r, void *base, uint64_t size,
				uint32_t stream_id)
{
	tb_ring_init_at(r, base, size, stream_id, NULL);
}

/* Sets up a ring that readers in other processes poll (transport/shm.h):
 * its announcements go to `lap`, in the same shared memory.  The memory
 * must be zero (a fresh file): a zero sequence word is "not yet". */
static inline void tb_ring_init_shared(tb_ring_t *r, void *base, uint64_t size,
				       uint32_t stream_id, tb_ring_lap_t *lap)
{
	tb_ring_setup_(r, base, size, stream_id, lap);
	r->ahead = tb_ring_chunk(size);
	r->reach = TB_FRAME_HDR_LEN;
}

/* The frame at position `pos`. */
static inline tb_frame_hdr_t *tb_ring_at(const tb_ring_t *r, uint64_t pos)
{
	return (tb_frame_hdr_t *)(r->base + (pos & r->mask));
}

/*
 * Space the claim of a `payload_len` message would move the tail by,
 * padding included; 0 if the message is larger than max_frame allows.
 */
static inline uint64_t tb_ring_claim_span(const tb_ring_t *r, uint32_t payload_len)
{
	uint32_t space = tb_frame_space(payload_len + TB_FRAME_HDR_LEN);
	uint64_t off = r->tail & r->mask;

	if (tb_unlikely(payload_len > r->max_frame - TB_FRAME_HDR_LEN))
		return 0;
	if (tb_unlikely(off + space > r->mask + 1))
		return r->mask + 1 - off + space;
	return space;
}

/* A shared ring announces that the writer may write below `upto` (see the
 * essay), and marks where the open claim, of sequence `seq`, begins: once
 * a chunk, out of line.  (A private ring announces in tb_ring_claim_
 * itself, two stores a claim.) */
static __attribute__((unused, noinline, cold)) void
tb_ring_announce(tb_ring_t *r, uint64_t upto, uint64_t seq)
{
	tb_ring_lap_t *l = r->lap;
	/* Relaxed: the writer reads back its own last store. */
	uint64_t g = tb_atomic_load_relaxed(&l->gen);

	r->intent = upto + r->ahead;
	tb_atomic_store_relaxed(&l->gen, g + 1);
	tb_atomic_fence_release(); /* W2: odd before the marks */
	tb_atomic_store_relaxed(&l->mark_pos, r->tail);
	tb_atomic_store_relaxed(&l->mark_seq, seq);
	tb_atomic_store_relaxed(&l->intent, r->intent);
	/* R2: the marks are whole; pairs with A2 (transport/shm.c). */
	tb_atomic_store_release(&l->gen, g + 2);
	/* R0: intent visible before any byte it covers is written; pairs
	 * with A0 in tb_shm_reader_poll (shm.h). */
	tb_atomic_fence_release();
}

/* What a claim knows of its ring where it is written (tb_ring_claim_in_):
 * a constant, so that the test of r->ahead folds away.
 * TB_RING_PRIVATE_FITS: a private ring, and the caller has checked that
 * the frame ends at or before the ring's end (no pad), so the claim's own
 * test folds away too.  TB_RING_SHARED_FITS: a shared ring, and the caller
 * has checked that the frame needs no pad and its end no announcement
 * (end + reach <= intent): the claim calls nothing, so a writer's fast
 * path keeps nothing across a call. */
enum { TB_RING_ANY, TB_RING_PRIVATE, TB_RING_SHARED, TB_RING_PRIVATE_FITS,
       TB_RING_SHARED_FITS };

/*
 * tb_ring_claim_ for a message the caller knows fits (payload_len <=
 * max_frame - TB_FRAME_HDR_LEN), on a ring of `kind` (a constant: a
 * writer that knows its ring is private or shared names it, and the
 * compiler drops the other branch).  Hot path.
 */
static inline __attribute__((always_inline)) tb_frame_hdr_t *
tb_ring_claim_in_(tb_ring_t *r, uint32_t payload_len, uint64_t seq,
		  uint64_t *at, uint64_t *end_out, int kind)
{
	uint32_t space = tb_frame_space(payload_len + TB_FRAME_HDR_LEN);
	uint64_t pos = r->tail;
	uint64_t off = pos & r->mask;
	uint64_t pad = 0, end;
	const int fits = kind == TB_RING_PRIVATE_FITS || kind == TB_RING_SHARED_FITS;

	if (!fits && tb_unlikely(off + space > r->mask + 1))
		pad = r->mask + 1 - off;
	end = pos + pad + space;
	*at = pos + pad;
	*end_out = end;
	if (kind == TB_RING_SHARED || kind == TB_RING_SHARED_FITS ||
	    (kind == TB_RING_ANY && r->ahead)) {
		/* A shared ring: announces once a chunk, and zeroes the
		 * next frame's sequence word now, away from the stores to
		 * this frame's first line, which a reader polls (an abort
		 * leaves the zero beyond the tail, where the next claim
		 * writes anyway). */
		if (!fits && end + r->reach > r->intent)
			tb_ring_announce(r, end + r->reach, seq);
		tb_atomic_plain_store_relaxed(&tb_ring_at(r, end)->seq,
					      (uint64_t)0);
	} else {
		/* A private ring: every claim, exactly its end (always
		 * past the last announcement, which was the tail). */
		tb_atomic_store_relaxed(r->intent_pub, end);
		/* R0: intent visible before any byte it covers is written;
		 * pairs with A0 in copy_frame/held (retention.c) and an rc
		 * subscriber's read-back (transport/rc.h). */
		tb_atomic_fence_release();
	}
	if (tb_unlikely(pad)) {
		tb_frame_init_pad_body((tb_frame_hdr_t *)(r->base + off),
				       (uint32_t)pad, r->stream_id);
		off = 0;
	}
	return (tb_frame_hdr_t *)(r->base + off);
}

/*
 * Reserves a frame for `payload_len` bytes, to carry sequence `seq`, and
 * returns its header, or NULL if the message exceeds max_frame.  Pads the
 * end of the ring first when the frame would straddle it.  The caller
 * fills the header but its sequence (tb_frame_init_body) and the payload,
 * then commits or aborts.  Hot path: no allocation, lock or system call.
 * tb_ring_claim_ is the claim for a writer that commits at once and holds
 * the claim itself: it returns where the frame starts (`at`, past a pad)
 * and the tail after it (`end`), for tb_ring_commit_, and records nothing
 * of the claim in the ring (no abort).
 */
static inline __attribute__((always_inline)) tb_frame_hdr_t *
tb_ring_claim_(tb_ring_t *r, uint32_t payload_len, uint64_t seq,
	       uint64_t *at, uint64_t *end_out)
{
	if (tb_unlikely(payload_len > r->max_frame - TB_FRAME_HDR_LEN))
		return NULL;
	return tb_ring_claim_in_(r, payload_len, seq, at, end_out, TB_RING_ANY);
}

static inline __attribute__((always_inline)) tb_frame_hdr_t *
tb_ring_claim(tb_ring_t *r, uint32_t payload_len, uint64_t seq)
{
	uint64_t at, end;
	tb_frame_hdr_t *f = tb_ring_claim_(r, payload_len, seq, &at, &end);

	if (tb_likely(f != NULL)) {
		r->claim_pos = at;
		r->claim_tail = end;
		r->claim_seq = seq;
	}
	return f;
}

/*
 * tb_ring_commit with the claim's state passed in: `f` the claimed frame,
 * `seq` its sequence, `from` the tail before the claim, `at` where `f`
 * starts (beyond `from` when the claim padded), `end` the tail after it.
 * For a writer that read these before filling the frame through pointers
 * the compiler cannot tell from the ring's own fields (a payload copy),
 * so they stay in registers instead of being loaded again.  Hot path.
 */
static inline __attribute__((always_inline)) void
tb_ring_commit_(tb_ring_t *r, tb_frame_hdr_t *f, uint64_t seq, uint64_t from,
		uint64_t at, uint64_t end)
{
	/* R1: the frame (and the next one's zero) before its sequence;
	 * pairs with A1 in tb_shm_reader_poll and the shm reader's walks
	 * (transport/shm.h, shm.c). */
	tb_atomic_plain_store_release(&f->seq, seq);
	if (tb_unlikely(at != from))
		tb_atomic_plain_store_release(&tb_ring_at(r, from)->seq,
					      seq); /* R1, the pad */
	r->tail = end;
}

/* Publishes the claimed frame: its sequence word last.  Hot path: one
 * release store (R1); the pad's word too when the claim padded (once a
 * lap). */
static inline __attribute__((always_inline)) void tb_ring_commit(tb_ring_t *r)
{
	tb_ring_commit_(r, tb_ring_at(r, r->claim_pos), r->claim_seq, r->tail,
			r->claim_pos, r->claim_tail);
	r->claim_tail = 0;
}

/* Gives the claimed space back.  Nothing was committed, so no reader saw
 * any of it; the next claim writes it again.  A private ring takes its
 * intent back, so its readers keep every frame the ring holds; a shared
 * ring's announcement stands (it only ever covers more).  Hot path. */
static inline void tb_ring_abort(tb_ring_t *r)
{
	r->claim_tail = 0;
	if (!r->ahead) {
		/* Relaxed, unpaired: taking intent back promises readers
		 * nothing (they only test whether it passed what they
		 * copied). */
		tb_atomic_store_relaxed(r->intent_pub, r->tail);
	}
}

#endif
