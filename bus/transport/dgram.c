/*
 * dgram.c - the parts of the datagram core that run once, or once per
 * datagram before its frames are delivered: set-up, validation,
 * authentication, epochs, heartbeats and ends.  The per-frame paths are
 * static inline in dgram.h.
 */
#include "bus/transport/dgram.h"

#include "bus/clock.h"
#include "bus/config.h"
#include "bus/error.h"

#include <string.h>

int tb_dgram_tx_init(tb_dgram_tx_t *tx, const tb_ring_t *ring, uint32_t mtu,
		     uint32_t stream_id, uint64_t epoch, uint32_t batch_us,
		     const char *token)
{
	tb_dgram_auth_t auth;

	memset(tx, 0, sizeof(*tx));
	if (tb_packet_max_payload(mtu) == 0)
		return tb_error_set(TB_EINVAL, "datagram size %u cannot hold a "
				  "packet header and one frame", mtu);
	if (mtu > UINT16_MAX)
		return tb_error_set(TB_EINVAL, "datagram size %u is above the "
				  "largest a packet header names (65535)", mtu);
	tx->ring = ring;
	tx->ring_base = ring->base;
	tx->ring_mask = ring->mask;
	tx->epoch = epoch;
	tx->batch_ns = (uint64_t)batch_us * 1000u;
	/* Frames start and (but for the last) end on TB_FRAME_ALIGN, so the
	 * usable room is the mtu rounded down to it, less the header. */
	tx->room = (mtu & ~(uint32_t)(TB_FRAME_ALIGN - 1)) - TB_PACKET_HDR_LEN;
	tx->stream_id = stream_id;
	tx->pos = ring->tail;
	tx->ready_next = 1;
	tb_atomic_store_relaxed(&tx->sent_next, 1);
	tb_packet_init(&tx->tmpl, 0, stream_id, epoch, 0, 0, 0);
	tx->tmpl.mtu = (uint16_t)mtu;
	tx->tmpl.since = tb_clock_realtime_ns();
	for (int i = 0; i < TB_DGRAM_READY_MAX; i++)
		tx->hdr[i] = tx->tmpl;
	tx->one = tx->tmpl;
	tx->one.count = 1;
	tx->one_pc[0].p = &tx->one;
	tx->one_pc[0].len = TB_PACKET_AUTH_LEN;
	tb_dgram_j0_init(&tx->next, 0);
	tb_dgram_auth_init(&auth, token, stream_id);
	tb_dgram_auth_key(&auth, epoch, &tx->key);
	tb_dgram_auth_wipe(&auth, sizeof(auth));
	return 0;
}

void tb_dgram_tx_fini(tb_dgram_tx_t *tx)
{
	tb_dgram_auth_wipe(&tx->key, sizeof(tx->key));
}

void tb_dgram_token_check(const tb_stream_cfg_t *cfg)
{
	if (cfg->token[0])
		return;
	tb_warn("%s: stream '%s' has no token: its datagrams are signed with a "
		"key anyone can derive, so any host that reaches the group can "
		"forge them; set token (long and random) on every member",
		tb_config_transport_name(cfg->transport), cfg->name);
}

void tb_dgram_rx_init(tb_dgram_rx_t *rx, uint32_t stream_id,
		      uint32_t liveness_ms, const char *token,
		      uint32_t max_len)
{
	memset(rx, 0, sizeof(*rx));
	rx->stream_id = stream_id;
	rx->liveness_ns = (uint64_t)liveness_ms * 1000000ull;
	rx->state = TB_DGRAM_WAITING;
	rx->ctr = &rx->own_ctr;
	rx->max_len = max_len;
	tb_dgram_auth_init(&rx->auth, token, stream_id);
}

void tb_dgram_rx_fini(tb_dgram_rx_t *rx)
{
	tb_dgram_auth_wipe(&rx->auth, sizeof(rx->auth));
	tb_dgram_auth_wipe(rx->keys, sizeof(rx->keys));
}

static int malformed(tb_dgram_rx_t *rx, const void *buf,
		     enum tb_packet_fault fault, int *done)
{
	rx->faults[fault]++;
	tb_counter_inc(rx->ctr, TB_CTR_MALFORMED);
	tb_counter_inc(rx->ctr, (tb_counter_id_t)(TB_CTR_MALFORMED_SHORT +
						  fault - TB_PACKET_SHORT));
	if (fault == TB_PACKET_BAD_VERSION && !(rx->told & TB_DGRAM_TOLD_VERSION)) {
		/* Once: a mixed deployment is a mistake to be told in words. */
		rx->told |= TB_DGRAM_TOLD_VERSION;
		tb_warn("stream %u: refusing datagrams of packet version %u; this "
			"subscriber reads version %u (authenticated, 64-byte "
			"header): run the same tickbus release on the publisher",
			rx->stream_id, ((const tb_packet_hdr_t *)buf)->version,
			TB_PACKET_VERSION);
	}
	*done = 1;
	return 0;
}

static int dropped(tb_dgram_rx_t *rx, uint64_t *stat, tb_counter_id_t ctr,
		   int *done)
{
	(*stat)++;
	tb_counter_inc(rx->ctr, ctr);
	*done = 1;
	return 0;
}

static int epoch_left(const tb_dgram_rx_t *rx, uint64_t epoch);
static void epoch_leave(tb_dgram_rx_t *rx);

/* ------------------------------------------------------ authentication */

/* The key of `epoch`: the followed one's, or the candidate's, derived now
 * if it is another. */
static const tb_dgram_key_t *key_for(tb_dgram_rx_t *rx, uint64_t epoch)
{
	tb_dgram_key_t *c = &rx->keys[!rx->cur];

	if (epoch == rx->epoch)
		return &rx->keys[rx->cur];
	if (!rx->cand || c->epoch != epoch) {
		tb_dgram_auth_key(&rx->auth, epoch, c);
		rx->cand = 1;
	}
	return c;
}

/* 1 if `nonce` was seen in the followed epoch or is older than the window
 * of its sender. */
static int window_seen(const tb_dgram_rx_t *rx, uint64_t nonce)
{
	const tb_dgram_window_t *w = &rx->win[nonce >> 63];
	uint64_t n = nonce & ~TB_PACKET_NONCE_BEAT;

	if (!w->seen || n > w->top)
		return 0;
	if (w->top - n >= TB_DGRAM_REPLAY_WINDOW)
		return 1;
	return (w->seen >> (w->top - n)) & 1;
}

static void window_mark(tb_dgram_rx_t *rx, uint64_t nonce)
{
	tb_dgram_window_t *w = &rx->win[nonce >> 63];
	uint64_t n = nonce & ~TB_PACKET_NONCE_BEAT;

	if (!w->seen) {
		w->top = n;
		w->seen = 1;
	} else if (n > w->top) {
		w->seen = n - w->top >= TB_DGRAM_REPLAY_WINDOW
				  ? 1 : (w->seen << (n - w->top)) | 1;
		w->top = n;
	} else {
		w->seen |= 1ull << (w->top - n);
	}
}

/* Follows the epoch of `p`, whose key is the candidate: its nonces start
 * afresh. */
static void follow(tb_dgram_rx_t *rx, const tb_packet_hdr_t *p)
{
	if (rx->epoch)
		epoch_leave(rx);
	rx->epoch = p->epoch;
	rx->since = p->since;
	rx->cur = !rx->cur;
	rx->cand = 0;
	memset(rx->win, 0, sizeof(rx->win));
	window_mark(rx, p->nonce);
}

/* A publisher announcing datagrams larger than this end can receive: they
 * will be lost (and told as gaps); say why, once. */
static void mtu_over(tb_dgram_rx_t *rx, const tb_packet_hdr_t *p)
{
	rx->mtu_over++;
	if (rx->told & TB_DGRAM_TOLD_MTU)
		return;
	rx->told |= TB_DGRAM_TOLD_MTU;
	tb_counter_inc(rx->ctr, TB_CTR_ERRORS);
	tb_warn("stream %u: the publisher sends datagrams of up to %u bytes, "
		"this subscriber receives at most %u: larger ones are lost; "
		"set the same mtu (<= %u) for every member of the group",
		rx->stream_id, p->mtu, rx->max_len, rx->max_len);
}

static int epoch_left(const tb_dgram_rx_t *rx, uint64_t epoch)
{
	for (int i = 0; i < TB_DGRAM_OLD_EPOCHS; i++)
		if (rx->old_epochs[i] == epoch)
			return 1;
	return 0;
}

static void epoch_leave(tb_dgram_rx_t *rx)
{
	memmove(&rx->old_epochs[1], &rx->old_epochs[0],
		sizeof(rx->old_epochs[0]) * (TB_DGRAM_OLD_EPOCHS - 1));
	rx->old_epochs[0] = rx->epoch;
}

/* Heartbeat or END of the followed epoch. */
static int control(tb_dgram_rx_t *rx, tb_seq_t *seq, tb_seq_range_t *loss,
		   const tb_packet_hdr_t *p, int n_before, int *done)
{
	uint64_t next = p->first_seq;

	if (p->flags & TB_PACKET_F_HEARTBEAT)
		rx->heartbeats++;
	if (seq->expected == 0) {
		/* Joining: nothing before `next` was ours to see. */
		if (next > 0)
			seq->expected = next;
	} else if (next > seq->expected) {
		/* The tail [expected, next - 1] never arrived. */
		if (n_before > 0)
			return 0;
		tb_seq_gap_to(seq, next, loss);
		rx->last_gap = *loss;
		*done = !(p->flags & TB_PACKET_F_END); /* END: TB_CLOSED next */
		return TB_GAP;
	}
	if (p->flags & TB_PACKET_F_HEARTBEAT) {
		*done = 1;
		return 0;
	}
	if (n_before > 0)
		return 0;
	rx->state = TB_DGRAM_CLOSED;
	*done = 1;
	return TB_CLOSED;
}

/*
 * Checks a datagram before anything in it is acted on: header, epoch left
 * behind, tag, replay, frames.  Returns 1 when it may be read (the nonce is
 * then marked seen, for the followed epoch), else 0 with it counted and
 * *done set.
 */
static int admit(tb_dgram_rx_t *rx, const void *buf, size_t len, int *done)
{
	const tb_packet_hdr_t *p = buf;
	enum tb_packet_fault fault = tb_packet_check(buf, len, rx->stream_id);
	tb_packet_iter_t it;

	if (tb_unlikely(fault != TB_PACKET_OK))
		return malformed(rx, buf, fault, done);
	/* Epoch 0 is no publisher's, also before one is followed (when
	 * rx->epoch is 0 too and no key is derived for it). */
	if (tb_unlikely(p->epoch == 0 || (p->epoch != rx->epoch &&
					  epoch_left(rx, p->epoch))))
		return dropped(rx, &rx->stale_epoch, TB_CTR_STALE_EPOCH, done);
	if (tb_unlikely(!tb_dgram_auth_verify(key_for(rx, p->epoch), buf, len)))
		return dropped(rx, &rx->forged, TB_CTR_DGRAM_FORGED, done);
	if (p->epoch == rx->epoch) {
		if (tb_unlikely(window_seen(rx, p->nonce)))
			return dropped(rx, &rx->replayed, TB_CTR_DGRAM_REPLAYED,
				       done);
		window_mark(rx, p->nonce);
	}
	if (tb_unlikely(p->mtu > rx->max_len))
		mtu_over(rx, p);
	if (p->flags)
		return 1;
	/* Every frame is checked before the first is delivered, so a
	 * datagram is delivered whole or not at all. */
	tb_packet_iter_init(&it, buf, len);
	while (tb_packet_frame_next(&it, &fault))
		;
	if (tb_unlikely(fault != TB_PACKET_OK))
		return malformed(rx, buf, fault, done);
	if (tb_unlikely(it.left != 0)) /* bytes beyond `count` frames */
		return malformed(rx, buf, TB_PACKET_BAD_COUNT, done);
	return 1;
}

static int begin(tb_dgram_rx_t *rx, tb_seq_t *seq, tb_seq_range_t *loss,
		 const void *buf, size_t len, uint64_t now_ns, int n_before,
		 int *done)
{
	const tb_packet_hdr_t *p = buf;
	uint64_t last;

	*done = 0;
	/* A datagram given again after a condition it caused was admitted
	 * then; admitting it twice would take it for its own replay. */
	if (rx->held)
		rx->held = 0;
	else if (!admit(rx, buf, len, done))
		return 0;

	if (tb_unlikely(p->epoch != rx->epoch)) {
		if (rx->epoch != 0 && p->since < rx->since) {
			/* Authentic, but started before the followed epoch
			 * did: a recording of an older epoch. */
			rx->stale_epoch++;
			tb_counter_inc(rx->ctr, TB_CTR_STALE_EPOCH);
			*done = 1;
			return 0;
		}
		if (rx->epoch == 0) {
			follow(rx, p); /* the first: adopted quietly */
		} else {
			/* A restart: report it alone, then read this
			 * datagram again as the new epoch's. */
			if (n_before > 0)
				return 0;
			follow(rx, p);
			rx->state = TB_DGRAM_LIVE;
			rx->last_heard_ns = now_ns;
			rx->last_gap.first = rx->last_gap.last = 0;
			tb_seq_init(seq, 1);
			return TB_NEW_EPOCH;
		}
	}
	if (tb_unlikely(rx->state == TB_DGRAM_CLOSED)) {
		/* After its END nothing more is read; END's own copies are
		 * expected and not counted. */
		if (!(p->flags & TB_PACKET_F_END)) {
			rx->stale_epoch++;
			tb_counter_inc(rx->ctr, TB_CTR_STALE_EPOCH);
		}
		*done = 1;
		return 0;
	}
	rx->state = TB_DGRAM_LIVE;
	rx->last_heard_ns = now_ns;
	rx->datagrams++;
	if (p->flags)
		return control(rx, seq, loss, p, n_before, done);

	if (seq->expected == 0)
		seq->expected = p->first_seq; /* a late joiner starts here */
	last = p->first_seq + p->count - 1;
	if (last < seq->expected) {
		/* All seen, or all reported lost: a duplicate, or a datagram
		 * that came after the gap it caused. */
		if (p->first_seq >= rx->last_gap.first &&
		    last <= rx->last_gap.last) {
			rx->reordered++;
			tb_counter_inc(rx->ctr, TB_CTR_REORDERED);
		} else {
			rx->duplicates++;
		}
		seq->duplicates += p->count;
		tb_counter_add(rx->ctr, TB_CTR_DUPLICATES, p->count);
		*done = 1;
		return 0;
	}
	tb_packet_iter_init(&rx->it, buf, len);
	rx->active = 1;
	return 0;
}

int tb_dgram_rx_begin(tb_dgram_rx_t *rx, tb_seq_t *seq, tb_seq_range_t *loss,
		      const void *buf, size_t len, uint64_t now_ns, int n_before,
		      int *done)
{
	int rc = begin(rx, seq, loss, buf, len, now_ns, n_before, done);

	/* Not done and not being delivered: the caller gives this datagram
	 * again next time (dgram.h's contract). */
	rx->held = !*done && !rx->active;
	return rc;
}
