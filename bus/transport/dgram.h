/*
 * dgram.h - the datagram core shared by the ud and udp transports: how
 * frames from a publisher's ring become datagrams (packet.h), and how a
 * subscriber turns received datagrams back into an ordered stream with
 * every loss named.  Nothing here moves bytes: a transport hands datagrams
 * to the wire (verbs, sockets) and received ones back.
 *
 * Publishing (tb_dgram_tx_t).  The publisher commits frames into its
 * private ring (ring.h); the transport's `send(from, to)` calls
 * tb_dgram_tx_pack(), which walks the new frames and packs consecutive ones
 * into datagrams of at most `mtu` bytes.  A datagram's frames are one span
 * of ring memory, so a ready datagram is described by two pieces, the
 * 64-byte header (kept here) and the frame span (in the ring): ud posts
 * them as two SGEs, udp as two iovecs, and the frames are never copied.
 * The common send of the latency path, one frame without batching, skips
 * the packing loop: tb_dgram_tx_one makes its datagram directly.
 * A wrap of the ring (a padding frame, or a frame ending exactly at the
 * end) ends the open datagram, since its frames would no longer be
 * contiguous.  A datagram leaves
 *
 *   - when the next frame would not fit (or it holds 65535 frames),
 *   - at every pack when batch_ns is 0 (each send),
 *   - at a pack or flush when its oldest frame is batch_ns old or older,
 *   - at flush (tb_pub_flush, and before close).
 *
 * Each datagram is numbered (its nonce) and signed as it closes
 * (dgram_auth.h: the tag covers the header and the frames, under the
 * epoch's key from the stream's token); heartbeats and ENDs are signed the
 * same way by tb_dgram_tx_beat and tb_dgram_tx_end.
 *
 * A ready datagram's pieces must stay untouched until the wire has read
 * them: the header sits in tx->hdr[] until the pack after
 * tb_dgram_tx_sent() (tb_dgram_tx_one's in tx->one until the next one),
 * the frames in the ring until the publisher writes over them.  udp's sendmsg copies both before it returns; ud, whose NIC
 * reads them later, posts a header inline (copied by the post) or copies
 * it into a registered slot of its own, and bounds its send queue so that
 * the ring cannot lap a datagram the NIC has not read (ud.h).
 *
 * The time bound is checked when the publishing thread calls in (send or
 * flush): nothing else may touch the ring.  A publisher that batches and
 * then goes quiet calls tb_pub_flush; heartbeats report only what has left
 * (sent_next), so a held datagram is never mistaken for a loss.
 *
 * Subscribing (tb_dgram_rx_t).  tb_dgram_rx_input() takes one received
 * datagram and, in order:
 *   1. checks its header (tb_packet_check): a malformed datagram is
 *      dropped and counted by kind, in faults[] and in the process counters
 *      (TB_CTR_MALFORMED and TB_CTR_MALFORMED_<kind>); one of another
 *      packet version is also told once, in words;
 *   2. authenticates it before acting on any field: a datagram of an epoch
 *      already left (below) is dropped as stale unread; otherwise its tag
 *      is checked under the key of the epoch it names (derived once per
 *      epoch, dgram_auth.h), and a wrong one is dropped and counted
 *      (forged, TB_CTR_DGRAM_FORGED); a nonce of the followed epoch seen
 *      before, or older than the replay window, is dropped and counted
 *      (replayed, TB_CTR_DGRAM_REPLAYED; a copy the fabric made is one);
 *   3. validates every frame (tb_packet_frame_next) before delivering
 *      anything: a datagram is delivered whole or not at all;
 *   4. checks the epoch: the first one seen is adopted (a late joiner
 *      starts at the first frame it sees); a different epoch is a publisher
 *      restart, reported once as TB_NEW_EPOCH, after which sequences start
 *      again from 1; a datagram of an epoch followed before (an older
 *      publisher still draining), or of an epoch that started before the
 *      followed one did (`since`: a recording replayed after a restart), is
 *      dropped and counted (stale_epoch, TB_CTR_STALE_EPOCH).
 *      Epoch values are not ordered (publisher.c mixes the pid in), so
 *      "older" means "one this receiver has already left", or an earlier
 *      `since`;
 *   3. classifies every frame with seq.h: the next one goes to the
 *      handler, an older one is dropped as a duplicate (TB_CTR_DUPLICATES),
 *      and a jump reports TB_GAP with the exact missing range before the
 *      frame that revealed it;
 *   4. heartbeats carry the next sequence to be sent: one beyond `expected`
 *      reveals a lost tail (TB_GAP); END does the same, then TB_CLOSED.
 * Silence for liveness_ns (no valid datagram of the followed epoch) is
 * reported once as TB_PUBLISHER_DEAD by tb_dgram_rx_idle(); datagrams that
 * arrive later resume the stream.
 *
 * Reordering: no reorder window.  A gap is reported the moment a datagram
 * beyond `expected` arrives; a datagram that then arrives late is counted
 * as reordered (its frames fall in the last reported gap; TB_CTR_REORDERED)
 * or duplicate, and dropped; either way its frames count as duplicates.  On one LAN segment multicast datagrams practically never
 * reorder, while a window would delay every real gap by its length; the
 * recovery service fills reported gaps, so a late datagram loses nothing.
 *
 * Conditions are returned only by a call that delivered nothing; a call
 * that delivered frames and then meets a condition returns the count and
 * keeps the datagram (`*done` = 0), so the next call reports the condition
 * and the one after goes on delivering.
 *
 * Threads: tb_dgram_tx_* from the publishing thread, except sent_next
 * which the heartbeat thread may read; tb_dgram_rx_* from the polling
 * thread.  pack, input and idle are hot: no allocation, lock or system
 * call.
 */
#ifndef TB_DGRAM_H
#define TB_DGRAM_H

#include "bus/barrier.h"
#include "bus/transport/dgram_auth.h"
#include "bus/clock.h"
#include "bus/counters.h"
#include "bus/frame.h"
#include "bus/ring.h"
#include "bus/seq.h"
#include "bus/transport/packet.h"
#include <tickbus/tickbus.h>

#include <stddef.h>
#include <stdint.h>

/* Datagrams one pack may make ready before the transport must send them:
 * a send adds a frame or two, so this only bounds a big flush; 64 fills
 * one sendmmsg and a ud send queue's worth of posts. */
#define TB_DGRAM_READY_MAX 64
/* Default datagram size for udp: 1500-byte Ethernet less IPv4 and UDP. */
#define TB_DGRAM_UDP_MTU 1472u
/* Largest frames per datagram: the header's count is 16 bits. */
#define TB_DGRAM_MAX_COUNT 65535u

/* One ready datagram, in two pieces: header, then frames (in the ring). */
typedef struct tb_dgram_out {
	const tb_packet_hdr_t *hdr;
	const void *frames;
	uint32_t frames_len;
	uint64_t first_seq;
	uint16_t count;
} tb_dgram_out_t;

typedef struct tb_dgram_tx {
	const tb_ring_t *ring;
	/* The ring's memory and mask, copied at init: the fast path finds
	 * its frame without going through `ring`. */
	const uint8_t *ring_base;
	uint64_t ring_mask;
	uint64_t epoch;
	uint64_t batch_ns;
	uint32_t room;          /* bytes of frames one datagram may carry */
	uint32_t stream_id;
	uint64_t pos;           /* ring position packed up to */
	/* The open datagram: frames [open_from, pos), if open_count > 0. */
	uint64_t open_from;
	uint64_t open_seq;
	uint64_t open_ns;       /* publish time of its oldest frame */
	/* open_count, and the datagrams ready to leave (headers beside
	 * them); `busy` is nonzero when either is, for tb_dgram_tx_one's
	 * test in one load. */
	union {
		struct {
			uint32_t open_count;
			int n_ready;
		};
		uint64_t busy;
	};
	uint64_t ready_next;    /* the sequence after the last ready frame */
	_Atomic uint64_t sent_next; /* sequence after the last one sent */
	/* The next data datagram's (and END's) number, kept as the first
	 * word of its GCM J0 (dgram_auth.h): the fast path's AES input. */
	tb_dgram_j0_t next;
	uint64_t ends;          /* END copies made (tb_dgram_tx_datagrams) */
	uint64_t frames;        /* packed, ever */
	/* What every header of the epoch carries: magic, version, stream,
	 * epoch, mtu, since; hdr[] starts as copies of it, and a datagram
	 * sets only its own fields. */
	tb_packet_hdr_t tmpl;
	tb_dgram_key_t key;     /* the epoch's; read by both threads */
	/* tb_dgram_tx_one's datagram: its header (the epoch's fields and a
	 * count of 1 since init) and what its tag covers, the header's first
	 * 48 bytes (since init) and the frame (set per datagram). */
	tb_packet_hdr_t one;
	tb_ghash_piece_t one_pc[2]; /* points into tx: not copied after init */
	uint64_t one_s[2];          /* its GHASH, on the way to its tag */
	uint64_t beat_nonce;    /* heartbeat thread: the next beat's number */
	tb_dgram_out_t out[TB_DGRAM_READY_MAX];
	tb_packet_hdr_t hdr[TB_DGRAM_READY_MAX];
} tb_dgram_tx_t;

/* Prepares packing of `ring` into datagrams of at most `mtu` bytes for
 * `stream_id` in `epoch`, signed with the key of `token` (dgram_auth.h);
 * batch_us as tb_stream_cfg_t.  The epoch's `since` is now.  Returns 0 or
 * TB_EINVAL (an mtu too small for one frame, or above 65535). */
int tb_dgram_tx_init(tb_dgram_tx_t *tx, const tb_ring_t *ring, uint32_t mtu,
		     uint32_t stream_id, uint64_t epoch, uint32_t batch_us,
		     const char *token);

/* Forgets the key. */
void tb_dgram_tx_fini(tb_dgram_tx_t *tx);

/* Warns (once per call) when `cfg` has no token: its datagrams are then
 * signed with a key anyone can derive.  Set-up. */
void tb_dgram_token_check(const tb_stream_cfg_t *cfg);

/* The largest frame (header included) a datagram of `mtu` bytes carries;
 * the transport caps ring.max_frame with it, so larger offers fail with
 * TB_EMSGSIZE. */
static inline uint32_t tb_dgram_max_frame(uint32_t mtu)
{
	uint32_t p = tb_packet_max_payload(mtu);

	return p ? p + TB_FRAME_HDR_LEN : 0;
}

/* Closes the open datagram into the ready list, numbered and signed. */
static inline void tb_dgram_tx_close_open_(tb_dgram_tx_t *tx)
{
	int i = tx->n_ready;
	uint32_t len = (uint32_t)(tx->pos - tx->open_from);
	tb_packet_hdr_t *h = &tx->hdr[i]; /* the epoch's fields: since init */
	const void *frames = tb_ring_at(tx->ring, tx->open_from);

	h->first_seq = tx->open_seq;
	h->count = (uint16_t)tx->open_count;
	h->length = TB_PACKET_HDR_LEN + len;
	h->nonce = tx->next.nonce++;
	tb_dgram_auth_sign(&tx->key, h, frames, len);
	tx->out[i].hdr = h;
	tx->out[i].frames = frames;
	tx->out[i].frames_len = len;
	tx->out[i].first_seq = tx->open_seq;
	tx->out[i].count = (uint16_t)tx->open_count;
	tx->n_ready = i + 1;
	tx->ready_next = tx->open_seq + tx->open_count;
	tx->open_count = 0;
}

/*
 * Packs the frames committed up to ring position `to` (the ring's tail)
 * and returns how many datagrams are ready in tx->out.  `now_ns` judges the
 * batch_ns bound; `flush` sends the open datagram whatever its age.  When
 * it returns TB_DGRAM_READY_MAX, more may be waiting: send those, call
 * tb_dgram_tx_sent(), and pack again.  Hot path: no allocation, lock or
 * system call.
 */
static inline int tb_dgram_tx_pack(tb_dgram_tx_t *tx, uint64_t to,
				   uint64_t now_ns, int flush)
{
	if (tx->open_count && tx->batch_ns &&
	    now_ns - tx->open_ns >= tx->batch_ns)
		tb_dgram_tx_close_open_(tx);
	while (tx->pos != to && tx->n_ready < TB_DGRAM_READY_MAX) {
		const tb_frame_hdr_t *f = tb_ring_at(tx->ring, tx->pos);
		uint32_t space;

		if (tb_unlikely(f->type == TB_FRAME_PAD)) {
			if (tx->open_count)
				tb_dgram_tx_close_open_(tx);
			tx->pos += f->length;
			continue;
		}
		space = tb_frame_space(f->length);
		/* Full, or the ring wrapped without a pad (the last frame
		 * ended exactly at its end): memory is no longer one span. */
		if (tx->open_count &&
		    (tx->pos - tx->open_from + space > tx->room ||
		     tx->open_count == TB_DGRAM_MAX_COUNT ||
		     (tx->pos & tx->ring->mask) == 0)) {
			tb_dgram_tx_close_open_(tx);
			if (tx->n_ready == TB_DGRAM_READY_MAX)
				break;
		}
		if (!tx->open_count) {
			tx->open_from = tx->pos;
			tx->open_seq = f->seq;
			tx->open_ns = f->publish_ns;
		}
		tx->open_count++;
		tx->frames++;
		tx->pos += space;
	}
	if (tx->open_count && tx->n_ready < TB_DGRAM_READY_MAX &&
	    (flush || !tx->batch_ns || tx->pos - tx->open_from == tx->room ||
	     now_ns - tx->open_ns >= tx->batch_ns))
		tb_dgram_tx_close_open_(tx);
	return tx->n_ready;
}

/*
 * The common send without batching: exactly one data frame committed since
 * the last send, nothing open or ready.  Returns that frame (the ring's
 * own bytes: zero copy) and its space in *space, or NULL when this is not
 * that case: then tb_dgram_tx_drain.  Nothing changes until
 * tb_dgram_tx_one_sign, so the transport can prepare its send in between
 * with the frame's fields in registers.  Hot path.
 */
static inline const tb_frame_hdr_t *tb_dgram_tx_one_frame(const tb_dgram_tx_t *tx,
							   uint64_t to,
							   uint32_t *space)
{
	const tb_frame_hdr_t *f;

	if (tx->batch_ns | tx->busy)
		return NULL;
	f = (const tb_frame_hdr_t *)(tx->ring_base + (tx->pos & tx->ring_mask));
	*space = tb_frame_space(f->length);
	if (tb_unlikely(tx->pos + *space != to || f->type != TB_FRAME_DATA))
		return NULL;
	return f;
}

/* 1 when a data frame just committed at ring position `at` is the only one
 * to send, nothing open or ready (tb_dgram_tx_one_frame's test, for a
 * caller that has the frame in hand), else 0.  For an unbatched tx only
 * (batch_ns 0, which its caller knows at open): batching is not tested
 * again for every frame.  Hot path. */
static inline int tb_dgram_tx_one_at(const tb_dgram_tx_t *tx, uint64_t at)
{
	return (tx->busy | (tx->pos ^ at)) == 0;
}

/* Numbers and signs the datagram of frame `f` (from tb_dgram_tx_one_frame,
 * sequence `seq`, `space` bytes, ending at `to`) in tx->one and returns
 * that header; the transport sends it with the frame and calls
 * tb_dgram_tx_sent_one().  Only the per-datagram fields are written: the
 * rest of the header, J0 and the first piece the tag covers are ready
 * since init.  `seq` is the caller's, in a register, not read back from
 * the frame.  Hot path. */
static inline tb_packet_hdr_t *tb_dgram_tx_one_sign(tb_dgram_tx_t *tx,
						    const tb_frame_hdr_t *f,
						    uint64_t seq,
						    uint32_t space, uint64_t to)
{
	tb_packet_hdr_t *h = &tx->one;

	tx->pos = to;
	tx->frames++;
	h->first_seq = seq;
	h->length = TB_PACKET_HDR_LEN + space;
	h->nonce = tx->next.nonce;
	tx->one_pc[1].p = f;
	tx->one_pc[1].len = space;
	tb_dgram_auth_tag_pieces(&tx->key, tx->one_pc, &tx->next, h->tag,
				 tx->one_s);
	tx->next.nonce++;
	return h;
}

/* Both of the above: the header of the one frame's datagram, signed, with
 * its frame in *frames and *len, or NULL (then tb_dgram_tx_drain). */
static inline const tb_packet_hdr_t *tb_dgram_tx_one(tb_dgram_tx_t *tx,
						     uint64_t to,
						     const void **frames,
						     uint32_t *len)
{
	const tb_frame_hdr_t *f = tb_dgram_tx_one_frame(tx, to, len);

	if (!f)
		return NULL;
	*frames = f;
	return tb_dgram_tx_one_sign(tx, f, f->seq, *len, to);
}

/* The datagram of tb_dgram_tx_one was sent (or is gone): publishes the new
 * sent_next, the sequence after its frame, for heartbeats (R1; the
 * heartbeat thread's A1). */
static inline void tb_dgram_tx_sent_one(tb_dgram_tx_t *tx)
{
	tb_atomic_store_release(&tx->sent_next, tx->one.first_seq + 1);
}

/* The same, told the sequence after the frame (`next`), which a caller
 * that had the frame in hand keeps in a register across the send. */
static inline void tb_dgram_tx_sent_to(tb_dgram_tx_t *tx, uint64_t next)
{
	tb_atomic_store_release(&tx->sent_next, next);
}

/*
 * The transport's send and flush: packs up to `to` and hands each batch of
 * ready datagrams to `emit(ctx, n)`, which sends tx->out[0..n) and calls
 * tb_dgram_tx_sent(), until no batch is left.  The clock is read only when
 * a time bound is set.  Returns 0, or TB_EIO when an emit failed (what it
 * could not send is gone: receivers see a gap).  Hot path.
 */
static inline int tb_dgram_tx_drain(tb_dgram_tx_t *tx, uint64_t to, int flush,
				    int (*emit)(void *ctx, int n), void *ctx)
{
	uint64_t now = tx->batch_ns ? tb_clock_now_ns_inline() : 0;
	int n, rc = 0;

	do {
		n = tb_dgram_tx_pack(tx, to, now, flush);
		if (n > 0 && emit(ctx, n) < 0)
			rc = TB_EIO;
	} while (n == TB_DGRAM_READY_MAX);
	return rc;
}

/* The transport sent every ready datagram: empties the list and publishes
 * the new sent_next for heartbeats (R1; the heartbeat thread's A1). */
static inline void tb_dgram_tx_sent(tb_dgram_tx_t *tx)
{
	if (tx->n_ready)
		tb_atomic_store_release(&tx->sent_next, tx->ready_next);
	tx->n_ready = 0;
}

/* The sequence a heartbeat or END should carry: the next one to be sent.
 * Any thread.  A1 pairs with R1 in tb_dgram_tx_sent. */
static inline uint64_t tb_dgram_tx_sent_next(tb_dgram_tx_t *tx)
{
	return tb_atomic_load_acquire(&tx->sent_next);
}

/* Fills `h` as a signed heartbeat or END (`flag`) naming `next`, numbered
 * `nonce`. */
static inline void tb_dgram_tx_control_(const tb_dgram_tx_t *tx,
					tb_packet_hdr_t *h, uint8_t flag,
					uint64_t next, uint64_t nonce)
{
	*h = tx->tmpl;
	h->flags = flag;
	h->first_seq = next;
	h->length = TB_PACKET_HDR_LEN;
	h->nonce = nonce;
	tb_dgram_auth_sign(&tx->key, h, NULL, 0);
}

/* Heartbeat thread: fills `h` as a heartbeat carrying `next` (what
 * tb_dgram_tx_sent_next said), numbered from the heartbeat thread's own
 * nonces. */
static inline void tb_dgram_tx_beat(tb_dgram_tx_t *tx, tb_packet_hdr_t *h,
				    uint64_t next)
{
	tb_dgram_tx_control_(tx, h, TB_PACKET_F_HEARTBEAT, next,
			     TB_PACKET_NONCE_BEAT | tx->beat_nonce++);
}

/* Publishing thread (at close, the heartbeat thread stopped): fills `h` as
 * one END of a stream whose last message was `final_seq`.  Each copy gets
 * a nonce of its own, so that copies are not taken for replays. */
static inline void tb_dgram_tx_end(tb_dgram_tx_t *tx, tb_packet_hdr_t *h,
				   uint64_t final_seq)
{
	tb_dgram_tx_control_(tx, h, TB_PACKET_F_END, final_seq + 1,
			     tx->next.nonce++);
	tx->ends++;
}

/* Data datagrams made ready, ever: every number the publishing thread
 * gave but the ENDs' (no count of its own on the hot path). */
static inline uint64_t tb_dgram_tx_datagrams(const tb_dgram_tx_t *tx)
{
	return tx->next.nonce - tx->ends;
}

/* ----------------------------------------------------------- subscribing */

/* Nonces a receiver remembers behind the highest it has seen, per sender:
 * datagrams of one sender arrive in order on a LAN, so this only has to
 * cover the fabric's rare reordering; anything older is taken as a replay
 * (its frames would have been dropped as reordered anyway). */
#define TB_DGRAM_REPLAY_WINDOW 64

_Static_assert(TB_CTR_MALFORMED_BAD_SEQ - TB_CTR_MALFORMED_SHORT ==
	       TB_PACKET_BAD_SEQ - TB_PACKET_SHORT &&
	       TB_PACKET_FAULT_COUNT == TB_PACKET_BAD_SEQ + 1,
	       "a counter for each kind of malformed datagram");

/* Previous epochs remembered as "already left": a restart or two in a
 * row is all one receiver sees in practice. */
#define TB_DGRAM_OLD_EPOCHS 4

enum tb_dgram_rx_state {
	TB_DGRAM_WAITING = 0,  /* no datagram of any epoch yet */
	TB_DGRAM_LIVE = 1,
	TB_DGRAM_DEAD = 2,     /* reported dead; resumes if it speaks again */
	TB_DGRAM_CLOSED = 3,   /* END seen; waits for a new epoch */
};

/* The nonces of one sender seen in the followed epoch: the highest, and a
 * bit for each of the TB_DGRAM_REPLAY_WINDOW up to it (bit i: top - i). */
typedef struct tb_dgram_window {
	uint64_t top;
	uint64_t seen;           /* 0: nothing yet */
} tb_dgram_window_t;

typedef struct tb_dgram_rx {
	uint32_t stream_id;
	int state;
	uint64_t epoch;          /* followed; 0 = none yet */
	uint64_t since;          /* the followed epoch's start */
	uint64_t old_epochs[TB_DGRAM_OLD_EPOCHS];
	/* Authentication: the stream's root, the followed epoch's key
	 * (keys[cur]) and the last other epoch's (keys[!cur], if cand). */
	tb_dgram_auth_t auth;
	tb_dgram_key_t keys[2];
	int cur, cand;
	tb_dgram_window_t win[2]; /* data, heartbeat sender */
	int held;                /* the next datagram is the last one again */
	uint32_t max_len;        /* largest datagram the transport receives */
	int told;                /* TB_DGRAM_TOLD_* said once already */
	uint64_t liveness_ns;
	uint64_t last_heard_ns;  /* last valid datagram of the epoch */
	tb_counter_slot_t *ctr;  /* the process counters, or &own_ctr */
	/* The datagram being delivered when `active`. */
	int active;
	int end_pending;         /* an END whose tail gap was reported */
	tb_packet_iter_t it;
	tb_seq_range_t last_gap; /* for telling reordered from duplicate */
	/* Statistics beyond the process counters. */
	uint64_t faults[TB_PACKET_FAULT_COUNT]; /* malformed datagrams by kind */
	uint64_t forged;         /* tags that did not verify */
	uint64_t replayed;       /* nonces seen before in the epoch */
	uint64_t mtu_over;       /* datagrams announcing an mtu above max_len */
	uint64_t stale_epoch;    /* datagrams of an epoch left behind */
	uint64_t reordered;      /* datagrams that came after their gap */
	uint64_t duplicates;     /* datagrams whose frames were all seen */
	uint64_t heartbeats;
	uint64_t datagrams;      /* valid datagrams of the followed epoch */
	tb_counter_slot_t own_ctr;
} tb_dgram_rx_t;

/* What a receiver has said once in words (tb_warn), so as not to flood. */
enum {
	TB_DGRAM_TOLD_VERSION = 1, /* a datagram of another packet version */
	TB_DGRAM_TOLD_MTU = 2,     /* a publisher mtu above max_len */
};

/* Prepares a receiver of `stream_id` whose datagrams are signed with the
 * key of `token` (dgram_auth.h); silence for `liveness_ms` is a dead
 * publisher; `max_len` is the largest datagram the transport can receive
 * (a publisher announcing more is told once). */
void tb_dgram_rx_init(tb_dgram_rx_t *rx, uint32_t stream_id,
		      uint32_t liveness_ms, const char *token,
		      uint32_t max_len);

/* Forgets the keys. */
void tb_dgram_rx_fini(tb_dgram_rx_t *rx);

/* Counts into `ctr` (a subscriber's slot) from now on; NULL: own slot. */
static inline void tb_dgram_rx_set_counters(tb_dgram_rx_t *rx,
					    tb_counter_slot_t *ctr)
{
	rx->ctr = ctr ? ctr : &rx->own_ctr;
}

/* The datagram being delivered, or given again after a condition, is gone
 * (its buffer is reused): nothing more is read from it.  What it still
 * held comes back as a gap at the next datagram or heartbeat. */
static inline void tb_dgram_rx_forget(tb_dgram_rx_t *rx)
{
	rx->active = 0;
	rx->held = 0;
}

/* Out of line: the parts of input that run once per epoch, gap or end. */
int tb_dgram_rx_begin(tb_dgram_rx_t *rx, tb_seq_t *seq, tb_seq_range_t *loss,
		      const void *buf, size_t len, uint64_t now_ns, int n_before,
		      int *done);

/*
 * Delivers the frames of one received datagram (`buf`, `len`) to `handler`,
 * at most `limit`.  `n_before` is what this poll already delivered: a
 * condition is returned only when it is 0.  Returns the count delivered, or
 * a condition (TB_GAP with *loss, TB_NEW_EPOCH, TB_CLOSED).  `*done` = 1
 * when the caller may move to its next datagram; 0 means call again with
 * the same one.  Hot path: no allocation, lock or system call.
 */
static inline int tb_dgram_rx_input(tb_dgram_rx_t *rx, tb_seq_t *seq,
				    tb_seq_range_t *loss, const void *buf,
				    size_t len, uint64_t now_ns,
				    tb_handler_t handler, void *clientd,
				    int limit, int n_before, int *done)
{
	enum tb_packet_fault fault;
	const tb_frame_hdr_t *f;
	tb_msg_t msg;
	int n = 0, rc;

	*done = 0;
	if (!rx->active) {
		rc = tb_dgram_rx_begin(rx, seq, loss, buf, len, now_ns,
				       n_before, done);
		if (!rx->active)
			return rc;
	}
	msg.receive_ns = now_ns;
	while (n < limit) {
		const tb_packet_iter_t at = rx->it;

		f = tb_packet_frame_next(&rx->it, &fault);
		if (!f) {
			rx->active = 0;
			*done = 1;
			break;
		}
		switch (tb_seq_admit(seq, f->seq)) {
		case TB_SEQ_NEXT:
			break;
		case TB_SEQ_DUPLICATE:
			tb_counter_inc(rx->ctr, TB_CTR_DUPLICATES);
			continue;
		case TB_SEQ_GAP:
			/* Only the first frame can jump (begin checked the
			 * rest are consecutive): report the gap alone. */
			rx->it = at;
			if (n + n_before > 0)
				return n;
			tb_seq_gap_to(seq, f->seq, loss);
			rx->last_gap = *loss;
			return TB_GAP;
		}
		tb_frame_to_msg(f, &msg);
		handler(clientd, &msg);
		n++;
	}
	if (n < limit || rx->it.remaining == 0) {
		rx->active = rx->it.remaining != 0;
		*done = !rx->active;
	}
	return n;
}

/*
 * The poll found nothing to receive: reports TB_NOT_CONNECTED before the
 * first datagram, TB_PUBLISHER_DEAD once after liveness_ns of silence, and
 * 0 otherwise.  Hot path (one comparison).
 */
static inline int tb_dgram_rx_idle(tb_dgram_rx_t *rx, uint64_t now_ns)
{
	if (tb_unlikely(rx->state != TB_DGRAM_LIVE))
		return rx->state == TB_DGRAM_WAITING ? TB_NOT_CONNECTED : 0;
	if (tb_unlikely(now_ns - rx->last_heard_ns > rx->liveness_ns &&
			(int64_t)(now_ns - rx->last_heard_ns) > 0)) {
		rx->state = TB_DGRAM_DEAD;
		return TB_PUBLISHER_DEAD;
	}
	return 0;
}

/* Malformed datagrams of one kind. */
static inline uint64_t tb_dgram_rx_faults(const tb_dgram_rx_t *rx,
					  enum tb_packet_fault kind)
{
	return (unsigned)kind < TB_PACKET_FAULT_COUNT ? rx->faults[kind] : 0;
}

#endif
