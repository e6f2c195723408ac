/*
 * ring.h - the single-writer frame ring every publisher writes into.
 *
 * A ring is `size` bytes (a power of two) of frames laid end to end
 * (frame.h), addressed by free-running 64-bit positions masked on access.
 * The writer keeps two positions:
 *
 *   intent   where the writer is about to write up to: stored before it
 *            writes a byte of a frame
 *   tail     where committed frames end: stored after the frame is whole
 *
 * For the shm transport both live in the shared ring header, and readers in
 * other processes use them to find frames and to detect that they were
 * overrun (transport/shm.h).  For the network transports the ring is the
 * publisher's private, registered memory: the source of every RDMA WRITE or
 * datagram and, for as long as a frame stays in it, the publisher's
 * retention buffer; there the positions only serve the owner.
 *
 * A frame never straddles the end of the ring: when one would, the writer
 * fills the tail with a padding frame (which carries the sequence number of
 * the frame after it) and starts again at offset 0.
 *
 * Memory ordering: claim stores intent then fences (R0) before any frame
 * byte is written; commit store-releases tail (R1).  Readers pair A1 with
 * R1 and A0 with R0 (tb_shm_reader_poll in transport/shm.h; the
 * publisher's retention reads intent behind A0 too, publisher/retention.c).
 *
 * Threads: one writer thread; claim, commit and abort are its hot path and
 * make no allocation, lock or system call.
 */
#ifndef TB_RING_H
#define TB_RING_H

#include "bus/barrier.h"
#include "bus/frame.h"

#include <stdint.h>

/* Ring sizes, one set for every transport, the control protocol and the
 * config file.  Smallest: the frames of one largest UDP datagram (65507
 * bytes).  Largest: a ring is pinned, registered memory, and its offsets
 * must fit the 32-bit immediate of an RDMA WRITE with room to spare. */
#define TB_RING_MIN (UINT64_C(64) << 10)
#define TB_RING_MAX (UINT64_C(1) << 30)

/* 1 when `size` is a power of two within TB_RING_MIN..TB_RING_MAX. */
static inline int tb_ring_size_ok(uint64_t size)
{
	return size >= TB_RING_MIN && size <= TB_RING_MAX &&
	       (size & (size - 1)) == 0;
}

typedef struct tb_ring {
	uint8_t *base;
	uint64_t mask;               /* size - 1 */
	uint64_t tail;               /* the writer's copy of *tail_pub */
	uint64_t claim_tail;         /* tail after the open claim; 0 = none */
	uint64_t claim_pos;          /* where the open claim's frame starts */
	uint32_t max_frame;          /* largest frame, header included */
	uint32_t stream_id;
	_Atomic uint64_t *intent_pub; /* where intent is published */
	_Atomic uint64_t *tail_pub;   /* where tail is published */
	_Atomic uint64_t own[2];      /* intent and tail of a private ring */
} tb_ring_t;

/* One frame may take at most an eighth of the ring, so a single large
 * message can never lap a reader that is keeping up. */
static inline uint32_t tb_ring_max_frame(uint64_t size)
{
	uint64_t m = size / 8;

	return m > TB_FRAME_MAX_LEN ? TB_FRAME_MAX_LEN : (uint32_t)m;
}

/* Sets up a ring over `size` bytes at `base` (size a power of two).  The
 * positions are published at `intent_pub` and `tail_pub`, or inside the
 * ring struct when those are NULL (a private ring). */
static inline void tb_ring_init(tb_ring_t *r, void *base, uint64_t size,
				uint32_t stream_id, _Atomic uint64_t *intent_pub,
				_Atomic uint64_t *tail_pub)
{
	r->base = (uint8_t *)base;
	r->mask = size - 1;
	r->tail = 0;
	r->claim_tail = 0;
	r->claim_pos = 0;
	r->max_frame = tb_ring_max_frame(size);
	r->stream_id = stream_id;
	r->intent_pub = intent_pub ? intent_pub : &r->own[0];
	r->tail_pub = tail_pub ? tail_pub : &r->own[1];
	/* Relaxed, unpaired: both are 0 before the first frame.  A shm
	 * ring's header already says so (published by R2 in
	 * tb_shm_writer_open); a private ring has no reader yet. */
	tb_atomic_store_relaxed(r->intent_pub, 0);
	tb_atomic_store_relaxed(r->tail_pub, 0);
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

/*
 * Reserves a frame for `payload_len` bytes and returns its header, or NULL
 * if the message exceeds max_frame.  Pads the end of the ring first when
 * the frame would straddle it.  The caller fills the header and payload,
 * then commits or aborts.  Hot path: no allocation, lock or system call.
 */
static inline tb_frame_hdr_t *tb_ring_claim(tb_ring_t *r, uint32_t payload_len,
					    uint64_t next_seq)
{
	uint32_t space = tb_frame_space(payload_len + TB_FRAME_HDR_LEN);
	uint64_t pos = r->tail;
	uint64_t off = pos & r->mask;
	uint64_t pad = 0;

	if (tb_unlikely(payload_len > r->max_frame - TB_FRAME_HDR_LEN))
		return NULL;
	if (tb_unlikely(off + space > r->mask + 1))
		pad = r->mask + 1 - off;
	r->claim_pos = pos + pad;
	r->claim_tail = pos + pad + space;
	tb_atomic_store_relaxed(r->intent_pub, r->claim_tail);
	/* R0: intent visible before any byte is written; pairs with A0 in
	 * tb_shm_reader_poll (shm.h) and in copy_frame/held (retention.c). */
	tb_atomic_fence_release();
	if (pad) {
		tb_frame_init_pad((tb_frame_hdr_t *)(r->base + off), (uint32_t)pad,
				  r->stream_id, next_seq);
		off = 0;
	}
	return (tb_frame_hdr_t *)(r->base + off);
}

/* Publishes the claimed frame.  Hot path. */
static inline void tb_ring_commit(tb_ring_t *r)
{
	r->tail = r->claim_tail;
	r->claim_tail = 0;
	/* R1: the frame is whole; pairs with A1 in tb_shm_reader_poll and
	 * the reader's attach (transport/shm.h, shm.c). */
	tb_atomic_store_release(r->tail_pub, r->tail);
}

/* Gives the claimed space back.  A padding frame it wrote lies beyond the
 * tail, where no reader looks; the next claim writes it again.  Hot path. */
static inline void tb_ring_abort(tb_ring_t *r)
{
	r->claim_tail = 0;
	/* Relaxed, unpaired: taking intent back promises readers nothing
	 * (they only test whether it passed what they copied). */
	tb_atomic_store_relaxed(r->intent_pub, r->tail);
}

#endif
