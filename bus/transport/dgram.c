/*
 * dgram.c - the parts of the datagram core that run once, or once per
 * datagram before its frames are delivered: set-up, validation, epochs,
 * heartbeats and ends.  The per-frame paths are static inline in dgram.h.
 */
#include "bus/transport/dgram.h"

#include "bus/error.h"

#include <string.h>

int tb_dgram_tx_init(tb_dgram_tx_t *tx, const tb_ring_t *ring, uint32_t mtu,
		     uint32_t stream_id, uint64_t epoch, uint32_t batch_us)
{
	memset(tx, 0, sizeof(*tx));
	if (tb_packet_max_payload(mtu) == 0)
		return tb_error_set(TB_EINVAL, "datagram size %u cannot hold a "
				  "packet header and one frame", mtu);
	tx->ring = ring;
	tx->epoch = epoch;
	tx->batch_ns = (uint64_t)batch_us * 1000u;
	/* Frames start and (but for the last) end on TB_FRAME_ALIGN, so the
	 * usable room is the mtu rounded down to it, less the header. */
	tx->room = (mtu & ~(uint32_t)(TB_FRAME_ALIGN - 1)) - TB_PACKET_HDR_LEN;
	tx->stream_id = stream_id;
	tx->pos = ring->tail;
	tx->ready_next = 1;
	tb_atomic_store_relaxed(&tx->sent_next, 1);
	return 0;
}

void tb_dgram_rx_init(tb_dgram_rx_t *rx, uint32_t stream_id,
		      uint32_t liveness_ms)
{
	memset(rx, 0, sizeof(*rx));
	rx->stream_id = stream_id;
	rx->liveness_ns = (uint64_t)liveness_ms * 1000000ull;
	rx->state = TB_DGRAM_WAITING;
	rx->ctr = &rx->own_ctr;
}

static int malformed(tb_dgram_rx_t *rx, enum tb_packet_fault fault, int *done)
{
	rx->faults[fault]++;
	tb_counter_inc(rx->ctr, TB_CTR_MALFORMED);
	tb_counter_inc(rx->ctr, (tb_counter_id_t)(TB_CTR_MALFORMED_SHORT +
						  fault - TB_PACKET_SHORT));
	*done = 1;
	return 0;
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

int tb_dgram_rx_begin(tb_dgram_rx_t *rx, tb_seq_t *seq, tb_seq_range_t *loss,
		      const void *buf, size_t len, uint64_t now_ns, int n_before,
		      int *done)
{
	const tb_packet_hdr_t *p = buf;
	enum tb_packet_fault fault = tb_packet_check(buf, len, rx->stream_id);
	uint64_t last;

	*done = 0;
	if (tb_unlikely(fault != TB_PACKET_OK))
		return malformed(rx, fault, done);
	if (!p->flags) {
		/* Every frame is checked before the first is delivered, so a
		 * datagram is delivered whole or not at all. */
		tb_packet_iter_t it;

		tb_packet_iter_init(&it, buf, len);
		while (tb_packet_frame_next(&it, &fault))
			;
		if (tb_unlikely(fault != TB_PACKET_OK))
			return malformed(rx, fault, done);
		if (tb_unlikely(it.left != 0)) /* bytes beyond `count` frames */
			return malformed(rx, TB_PACKET_BAD_COUNT, done);
	}

	if (tb_unlikely(p->epoch != rx->epoch)) {
		if (p->epoch == 0 || epoch_left(rx, p->epoch)) {
			rx->stale_epoch++;
			tb_counter_inc(rx->ctr, TB_CTR_STALE_EPOCH);
			*done = 1;
			return 0;
		}
		if (rx->epoch == 0) {
			rx->epoch = p->epoch; /* the first: adopted quietly */
		} else {
			/* A restart: report it alone, then read this
			 * datagram again as the new epoch's. */
			if (n_before > 0)
				return 0;
			epoch_leave(rx);
			rx->epoch = p->epoch;
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
