/*
 * retention.c - reading the publisher's retention buffer (see retention.h
 * for the design).  Everything here runs on recovery server threads.
 */
#include "publisher/retention.h"

#include "bus/error.h"

#include <stdlib.h>
#include <string.h>

int tb_retention_init(tb_retention_t *r, uint64_t n, const tb_ring_t *ring,
		      uint32_t stream_id, uint64_t epoch)
{
	uint64_t slots = 1;

	memset(r, 0, sizeof(*r));
	while (slots < n)
		slots <<= 1;
	r->pos = calloc(slots, sizeof(*r->pos));
	if (!r->pos)
		return tb_error_set(TB_ENOMEM, "retention of %llu messages: out "
				  "of memory", (unsigned long long)n);
	r->mask = slots - 1;
	r->n = n;
	r->ring = ring;
	r->stream_id = stream_id;
	r->epoch = epoch;
	/* Relaxed, unpaired: no reader runs before the recovery server is
	 * opened (after this, on this thread). */
	tb_atomic_store_relaxed(&r->last, 0);
	return 0;
}

void tb_retention_free(tb_retention_t *r)
{
	free(r->pos);
	r->pos = NULL;
}

/* Copies the frame of `seq` into `buf` (cap bytes) if the ring still holds
 * it.  Returns its length, 0 when it is gone, -1 when it does not fit. */
static int64_t copy_frame(const tb_retention_t *r, uint64_t seq, uint8_t *buf,
			  size_t cap)
{
	const tb_ring_t *ring = r->ring;
	uint64_t size = ring->mask + 1;
	/* Relaxed: seq <= last, which A3 loaded, so R3 ordered this. */
	uint64_t pos = tb_atomic_load_relaxed(&r->pos[seq & r->mask]);
	uint64_t off = pos & ring->mask;
	const tb_frame_hdr_t *f = (const tb_frame_hdr_t *)(ring->base + off);
	tb_frame_hdr_t *c = (tb_frame_hdr_t *)buf;
	uint32_t len;

	/* Relaxed, unpaired: an early out; the test that counts is after
	 * A0 below. */
	if (tb_atomic_load_relaxed(ring->intent_pub) - pos > size)
		return 0;
	len = f->length;
	if (len < TB_FRAME_HDR_LEN || len > ring->max_frame || off + len > size)
		len = TB_FRAME_HDR_LEN; /* judged after the check below */
	if (len > cap)
		return -1;
	memcpy(buf, f, len);
	/* A0 pairs with R0 in tb_ring_claim: if the writer had begun to
	 * overwrite what was copied, its intent store is seen now. */
	tb_atomic_fence_acquire();
	if (tb_atomic_load_relaxed(ring->intent_pub) - pos > size)
		return 0;
	if (tb_frame_check(c, len) < 0 || c->type != TB_FRAME_DATA ||
	    c->seq != seq || c->stream_id != r->stream_id)
		return 0;
	return c->length;
}

static int held(const tb_retention_t *r, uint64_t seq)
{
	uint8_t buf[TB_FRAME_HDR_LEN];
	const tb_ring_t *ring = r->ring;
	/* Relaxed: seq <= last, which A3 loaded, so R3 ordered this. */
	uint64_t pos = tb_atomic_load_relaxed(&r->pos[seq & r->mask]);
	tb_frame_hdr_t c;

	memcpy(buf, ring->base + (pos & ring->mask), sizeof(buf));
	tb_atomic_fence_acquire(); /* A0 pairs with R0 in tb_ring_claim */
	if (tb_atomic_load_relaxed(ring->intent_pub) - pos > ring->mask + 1)
		return 0;
	memcpy(&c, buf, sizeof(c));
	return c.type == TB_FRAME_DATA && c.seq == seq;
}

void tb_retention_bounds(void *arg, uint64_t *epoch, uint64_t *first,
			 uint64_t *last)
{
	tb_retention_t *r = arg;
	/* A3 pairs with R3 in tb_retention_record. */
	uint64_t l = tb_atomic_load_acquire(&r->last);
	uint64_t lo, hi;

	*epoch = r->epoch;
	*first = *last = 0;
	if (l == 0)
		return;
	lo = l > r->n ? l - r->n + 1 : 1;
	hi = l;
	/* What the ring still holds is a suffix of [lo, l]: the oldest
	 * frames are overwritten first.  Find its start. */
	if (!held(r, hi)) {
		*first = *last = 0;
		return;
	}
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;

		if (held(r, mid))
			hi = mid;
		else
			lo = mid + 1;
	}
	*first = lo;
	*last = l;
}

int tb_retention_read(void *arg, uint64_t first, int max, tb_store_read_fn fn,
		      void *clientd)
{
	tb_retention_t *r = arg;
	/* A3 pairs with R3 in tb_retention_record. */
	uint64_t l = tb_atomic_load_acquire(&r->last);
	/* Most frames are small: start with 4 KiB on the stack, take the
	 * ring's largest frame from the heap only when one needs it. */
	uint64_t small[512];
	size_t cap = sizeof(small);
	uint8_t *buf = (uint8_t *)small, *big = NULL;
	int n = 0;

	if (first > l)
		return TB_STORE_NOT_YET;
	if (first + r->n <= l)
		return TB_STORE_TOO_OLD;
	for (uint64_t seq = first; seq <= l && n < max; seq++) {
		int64_t len = copy_frame(r, seq, buf, cap);

		if (len < 0 && !big) {
			big = malloc(r->ring->max_frame);
			if (!big)
				break;
			buf = big;
			cap = r->ring->max_frame;
			len = copy_frame(r, seq, buf, cap);
		}
		if (len <= 0)
			break;
		((tb_frame_hdr_t *)buf)->flags |= TB_FRAME_F_REPLAY;
		n++;
		if (fn(clientd, (const tb_frame_hdr_t *)buf))
			break;
	}
	free(big);
	return n > 0 ? n : TB_STORE_TOO_OLD;
}
