/*
 * retention.c - reading the publisher's retention buffer (see retention.h
 * for the design).  Everything here runs on recovery server threads.
 */
#include "publisher/retention.h"

#include "bus/error.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* A window indexes one frame per this many bytes of its ring: every frame
 * of a stream of 64-byte frames or larger, the newest of smaller ones. */
#define WINDOW_BYTES_PER_FRAME 64u

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
	tb_atomic_store_relaxed(&r->first_hint, 0);
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
	uint64_t lo, hi, h;

	*epoch = r->epoch;
	*first = *last = 0;
	if (l == 0)
		return;
	lo = l > r->n ? l - r->n + 1 : 1;
	hi = l;
	/* What the ring still holds is a suffix of [lo, l]: the oldest
	 * frames are overwritten first.  Find its start, from where it was
	 * last time: it can only have moved on.  (Relaxed, unpaired: a
	 * hint, checked by held() like any guess.) */
	h = tb_atomic_load_relaxed(&r->first_hint);
	if (h > lo && h <= hi)
		lo = h;
	if (!held(r, hi)) {
		*first = *last = 0;
		return;
	}
	if (!held(r, lo)) {
		while (lo < hi) {
			uint64_t mid = lo + (hi - lo) / 2;

			if (held(r, mid))
				hi = mid;
			else
				lo = mid + 1;
		}
	}
	if (lo > h)
		tb_atomic_store_relaxed(&r->first_hint, lo);
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

int tb_retention_copy(void *arg, uint64_t first, int max, void *dst, size_t cap,
		      size_t *len)
{
	tb_retention_t *r = arg;
	const tb_ring_t *ring = r->ring;
	/* A3 pairs with R3 in tb_retention_record. */
	uint64_t l = tb_atomic_load_acquire(&r->last);
	uint64_t size = ring->mask + 1, pos0 = 0;
	uint8_t *d = dst;
	size_t used = 0;
	int n = 0;

	*len = 0;
	if (first > l)
		return TB_STORE_NOT_YET;
	if (first + r->n <= l)
		return TB_STORE_TOO_OLD;
	for (uint64_t seq = first; seq <= l && n < max; seq++) {
		/* Relaxed: seq <= last, which A3 loaded, so R3 ordered this. */
		uint64_t pos = tb_atomic_load_relaxed(&r->pos[seq & r->mask]);
		uint64_t off = pos & ring->mask;
		const tb_frame_hdr_t *f = (const tb_frame_hdr_t *)(ring->base + off);
		uint32_t flen = f->length;
		uint16_t flags;

		/* The header may be torn if the writer is overwriting it; a
		 * torn one stops the batch here, or fails the check below,
		 * and never sends a copy out of the ring's bounds. */
		if (n == 0)
			pos0 = pos;
		if (flen < TB_FRAME_HDR_LEN || flen > ring->max_frame ||
		    off + flen > size || f->type != TB_FRAME_DATA ||
		    f->seq != seq || f->stream_id != r->stream_id ||
		    used + flen > cap)
			break;
		memcpy(d + used, f, flen);
		flags = f->flags | TB_FRAME_F_REPLAY;
		memcpy(d + used + offsetof(tb_frame_hdr_t, flags), &flags,
		       sizeof(flags));
		used += flen;
		n++;
	}
	/* A0 pairs with R0 in tb_ring_claim: if the writer had begun to
	 * overwrite the oldest frame copied, its intent store is seen now. */
	tb_atomic_fence_acquire();
	if (n > 0 && tb_atomic_load_relaxed(ring->intent_pub) - pos0 > size)
		return TB_STORE_TOO_OLD;
	if (n == 0) {
		/* Gone, or just too big for `cap`. */
		uint64_t pos = tb_atomic_load_relaxed(&r->pos[first & r->mask]);
		const tb_frame_hdr_t *f = (const tb_frame_hdr_t *)
			(ring->base + (pos & ring->mask));

		return f->length > cap && held(r, first) ? 0 : TB_STORE_TOO_OLD;
	}
	*len = used;
	return n;
}

/* --------------------------------------------------------------- windows */

int tb_retention_window_init(tb_retention_window_t *w, uint64_t ring_bytes,
			     uint32_t stream_id)
{
	int rc;

	memset(w, 0, sizeof(*w));
	if (!tb_ring_size_ok(ring_bytes))
		return tb_error_set(TB_EINVAL, "retention window of %llu bytes: a "
				  "power of two from %llu to %llu is needed",
				  (unsigned long long)ring_bytes,
				  (unsigned long long)TB_RING_MIN,
				  (unsigned long long)TB_RING_MAX);
	w->mem = aligned_alloc(TB_CACHE_LINE, ring_bytes);
	if (!w->mem)
		return tb_error_set(TB_ENOMEM, "retention window of %llu bytes: "
				  "out of memory", (unsigned long long)ring_bytes);
	w->size = ring_bytes;
	tb_ring_init(&w->ring, w->mem, ring_bytes, stream_id);
	rc = tb_retention_init(&w->ret, ring_bytes / WINDOW_BYTES_PER_FRAME,
			       &w->ring, stream_id, 0);
	if (rc < 0) {
		free(w->mem);
		w->mem = NULL;
		return rc;
	}
	pthread_rwlock_init(&w->lock, NULL);
	return 0;
}

void tb_retention_window_free(tb_retention_window_t *w)
{
	if (!w->mem)
		return;
	pthread_rwlock_destroy(&w->lock);
	tb_retention_free(&w->ret);
	free(w->mem);
	w->mem = NULL;
}

/* Empties the window for a run of `epoch` from `from`: no reader is
 * reading (the lock).  The index keeps stale positions of the old run;
 * none below `from` is ever looked at, and the ring positions start again
 * from 0, so a stale one above that is beyond the writer's intent. */
static void window_restart(tb_retention_window_t *w, uint64_t epoch,
			   uint64_t from)
{
	pthread_rwlock_wrlock(&w->lock);
	tb_ring_init(&w->ring, w->mem, w->size, w->ret.stream_id);
	w->ret.epoch = epoch;
	w->from = from;
	/* Relaxed: readers come after the unlock, which orders it. */
	tb_atomic_store_relaxed(&w->ret.first_hint, 0);
	/* Relaxed: readers come after the unlock, which orders it. */
	tb_atomic_store_relaxed(&w->ret.last, 0);
	pthread_rwlock_unlock(&w->lock);
}

void tb_retention_window_append(tb_retention_window_t *w, uint64_t epoch,
				const tb_frame_hdr_t *f)
{
	/* Relaxed: the writer reads back its own store. */
	uint64_t last = tb_atomic_load_relaxed(&w->ret.last);
	uint32_t payload = f->length - TB_FRAME_HDR_LEN;
	tb_frame_hdr_t *dst;

	if (epoch != w->ret.epoch || (last ? f->seq != last + 1 : f->seq != w->from)) {
		window_restart(w, epoch, f->seq);
		last = 0;
	}
	dst = tb_ring_claim(&w->ring, payload, f->seq);
	if (!dst) {
		window_restart(w, epoch, f->seq + 1); /* too large: a hole */
		return;
	}
	memcpy(dst, f, f->length);
	dst->flags &= (uint16_t)~TB_FRAME_F_REPLAY;
	tb_ring_commit(&w->ring);
	tb_retention_record(&w->ret, f->seq, w->ring.claim_pos);
}

void tb_retention_window_bounds(tb_retention_window_t *w, uint64_t *epoch,
				uint64_t *first, uint64_t *last)
{
	pthread_rwlock_rdlock(&w->lock);
	tb_retention_bounds(&w->ret, epoch, first, last);
	if (*first && *first < w->from)
		*first = w->from;
	if (*first > *last)
		*first = *last = 0;
	pthread_rwlock_unlock(&w->lock);
}

int tb_retention_window_read(tb_retention_window_t *w, uint64_t epoch,
			     uint64_t first, int max, tb_store_read_fn fn,
			     void *clientd)
{
	int rc = TB_STORE_TOO_OLD;

	pthread_rwlock_rdlock(&w->lock);
	if (w->ret.epoch == epoch && first >= w->from)
		rc = tb_retention_read(&w->ret, first, max, fn, clientd);
	pthread_rwlock_unlock(&w->lock);
	return rc;
}

int tb_retention_window_copy(tb_retention_window_t *w, uint64_t epoch,
			     uint64_t first, int max, void *dst, size_t cap,
			     size_t *len)
{
	int rc = TB_STORE_TOO_OLD;

	*len = 0;
	pthread_rwlock_rdlock(&w->lock);
	if (w->ret.epoch == epoch && first >= w->from)
		rc = tb_retention_copy(&w->ret, first, max, dst, cap, len);
	pthread_rwlock_unlock(&w->lock);
	return rc;
}
