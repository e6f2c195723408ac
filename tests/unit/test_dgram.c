/*
 * The datagram core (dgram.h) without a network: packing ring frames into
 * datagrams by size, time and flush, and the receive side's classification
 * of every datagram: in order, gaps with exact ranges, duplicates,
 * reordering, every malformed kind, epochs, heartbeats, END and liveness.
 * One test feeds everything the packer makes straight into a receiver.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/transport/dgram.h"
#include "tests/common/frames.h"

#include <stdlib.h>
#include <string.h>

#define STREAM 5
#define EPOCH 1111
#define MS 1000000ull

/* ------------------------------------------------------------ publishing */

static uint8_t ring_mem[1 << 16] __attribute__((aligned(64)));
static tb_ring_t ring;
static uint64_t next_seq;

static void ring_reset(uint64_t size)
{
	memset(ring_mem, 0, sizeof(ring_mem));
	tb_ring_init(&ring, ring_mem, size, STREAM);
	next_seq = 1;
}

/* Commits one frame of `len` payload bytes published at `ns`. */
static void publish(uint32_t len, uint64_t ns)
{
	tb_frame_hdr_t *f = tb_ring_claim(&ring, len, next_seq);

	assert_non_null(f);
	tb_frame_init(f, len, 1, STREAM, next_seq, ns);
	memset(tb_frame_payload(f), (int)next_seq, len);
	tb_ring_commit(&ring);
	next_seq++;
}

static void one_frame_per_datagram_without_batching(void **state)
{
	tb_dgram_tx_t tx;

	(void)state;
	ring_reset(4096);
	assert_int_equal(tb_dgram_tx_init(&tx, &ring, 1472, STREAM, EPOCH, 0), 0);
	assert_int_equal(tb_dgram_tx_sent_next(&tx), 1);
	for (int i = 1; i <= 3; i++) {
		uint64_t at = ring.tail;

		publish(20, 0);
		assert_int_equal(tb_dgram_tx_pack(&tx, ring.tail, 0, 0), 1);
		assert_int_equal(tx.out[0].hdr->first_seq, i);
		assert_int_equal(tx.out[0].hdr->count, 1);
		assert_int_equal(tx.out[0].hdr->epoch, EPOCH);
		assert_int_equal(tx.out[0].hdr->stream_id, STREAM);
		assert_int_equal(tx.out[0].hdr->flags, 0);
		assert_int_equal(tx.out[0].hdr->length, TB_PACKET_HDR_LEN + 64);
		/* Zero copy: the frames are the ring's own bytes. */
		assert_ptr_equal(tx.out[0].frames, tb_ring_at(&ring, at));
		assert_int_equal(tx.out[0].frames_len, 64);
		tb_dgram_tx_sent(&tx);
		assert_int_equal(tb_dgram_tx_sent_next(&tx), i + 1);
	}
	/* Nothing new: nothing to send. */
	assert_int_equal(tb_dgram_tx_pack(&tx, ring.tail, 0, 0), 0);
}

static void full_datagram_leaves_and_flush_sends_the_rest(void **state)
{
	tb_dgram_tx_t tx;

	(void)state;
	ring_reset(4096);
	/* mtu 256: 224 bytes of frames; 72-byte frames take 96: two fit. */
	assert_int_equal(tb_dgram_tx_init(&tx, &ring, 256, STREAM, EPOCH,
					  1000000), 0);
	publish(40, 0);
	assert_int_equal(tb_dgram_tx_pack(&tx, ring.tail, 1, 0), 0);
	publish(40, 0);
	assert_int_equal(tb_dgram_tx_pack(&tx, ring.tail, 2, 0), 0);
	/* Held datagrams are not announced to heartbeats. */
	assert_int_equal(tb_dgram_tx_sent_next(&tx), 1);
	publish(40, 0);
	assert_int_equal(tb_dgram_tx_pack(&tx, ring.tail, 3, 0), 1);
	assert_int_equal(tx.out[0].hdr->first_seq, 1);
	assert_int_equal(tx.out[0].hdr->count, 2);
	assert_int_equal(tx.out[0].frames_len, 192);
	assert_int_equal(tx.out[0].hdr->length, 224);
	tb_dgram_tx_sent(&tx);
	assert_int_equal(tb_dgram_tx_sent_next(&tx), 3);
	assert_int_equal(tb_dgram_tx_pack(&tx, ring.tail, 4, 1), 1);
	assert_int_equal(tx.out[0].hdr->first_seq, 3);
	assert_int_equal(tx.out[0].hdr->count, 1);
	tb_dgram_tx_sent(&tx);
	assert_int_equal(tb_dgram_tx_sent_next(&tx), 4);
	assert_int_equal(tb_dgram_tx_pack(&tx, ring.tail, 5, 1), 0);
}

static void exactly_full_datagram_leaves_at_once(void **state)
{
	tb_dgram_tx_t tx;

	(void)state;
	ring_reset(4096);
	/* 224 bytes of room: 96 + 128 fill it exactly. */
	assert_int_equal(tb_dgram_tx_init(&tx, &ring, 256, STREAM, EPOCH,
					  1000000), 0);
	publish(40, 0);
	assert_int_equal(tb_dgram_tx_pack(&tx, ring.tail, 0, 0), 0);
	publish(96, 0);
	assert_int_equal(tb_dgram_tx_pack(&tx, ring.tail, 0, 0), 1);
	assert_int_equal(tx.out[0].hdr->count, 2);
	assert_int_equal(tx.out[0].hdr->length, 256);
}

static void batch_time_bound(void **state)
{
	tb_dgram_tx_t tx;
	uint64_t t0 = 5 * MS;

	(void)state;
	ring_reset(4096);
	assert_int_equal(tb_dgram_tx_init(&tx, &ring, 1472, STREAM, EPOCH, 100), 0);
	publish(8, t0);
	assert_int_equal(tb_dgram_tx_pack(&tx, ring.tail, t0 + 10000, 0), 0);
	publish(8, t0 + 50000);
	/* The oldest frame is 99 us old: still held. */
	assert_int_equal(tb_dgram_tx_pack(&tx, ring.tail, t0 + 99999, 0), 0);
	/* 100 us: it leaves, with both frames, even with nothing new. */
	assert_int_equal(tb_dgram_tx_pack(&tx, ring.tail, t0 + 100000, 0), 1);
	assert_int_equal(tx.out[0].hdr->count, 2);
	tb_dgram_tx_sent(&tx);
	/* A new frame arriving after the bound opens a fresh datagram. */
	publish(8, t0 + 300000);
	assert_int_equal(tb_dgram_tx_pack(&tx, ring.tail, t0 + 300001, 0), 0);
	publish(8, t0 + 500000);
	/* The first frame was already 200 us old: it leaves alone, the new
	 * one waits. */
	assert_int_equal(tb_dgram_tx_pack(&tx, ring.tail, t0 + 500001, 0), 1);
	assert_int_equal(tx.out[0].hdr->first_seq, 3);
	assert_int_equal(tx.out[0].hdr->count, 1);
}

static void big_send_fills_the_ready_list_then_continues(void **state)
{
	tb_dgram_tx_t tx;
	uint64_t seq = 1, total = 0;
	int n;

	(void)state;
	ring_reset(1 << 16);
	assert_int_equal(tb_dgram_tx_init(&tx, &ring, 256, STREAM, EPOCH, 0), 0);
	for (int i = 0; i < 200; i++)
		publish(40, 0);
	/* 200 frames, two per datagram: 100 datagrams, 64 at a time. */
	n = tb_dgram_tx_pack(&tx, ring.tail, 0, 0);
	assert_int_equal(n, TB_DGRAM_READY_MAX);
	do {
		for (int i = 0; i < n; i++) {
			assert_int_equal(tx.out[i].first_seq, seq);
			assert_int_equal(tx.out[i].count, 2);
			seq += tx.out[i].count;
		}
		total += (uint64_t)n;
		tb_dgram_tx_sent(&tx);
		n = tb_dgram_tx_pack(&tx, ring.tail, 0, 0);
	} while (n > 0);
	assert_int_equal(total, 100);
	assert_int_equal(seq, 201);
	assert_int_equal(tb_dgram_tx_sent_next(&tx), 201);
}

static void sizes_and_bad_mtu(void **state)
{
	tb_dgram_tx_t tx;

	(void)state;
	ring_reset(4096);
	assert_int_equal(tb_dgram_max_frame(1472), 1440);
	assert_int_equal(tb_dgram_max_frame(32), 0);
	assert_int_equal(tb_dgram_tx_init(&tx, &ring, 40, STREAM, EPOCH, 0),
			 TB_EINVAL);
}

/* ------------------------------------------------------------- receiving */

struct sink {
	uint64_t seqs[4096];
	int n;
	int bad;
};

static void on_msg(void *clientd, const tb_msg_t *m)
{
	struct sink *s = clientd;
	const uint8_t *p = m->data;

	for (uint32_t i = 0; i < m->len; i++)
		if (p[i] != (uint8_t)m->seq)
			s->bad++;
	if (m->stream_id != STREAM)
		s->bad++;
	if (s->n < 4096)
		s->seqs[s->n] = m->seq;
	s->n++;
}

static uint8_t dg[4096] __attribute__((aligned(64)));

/* A data datagram of `count` frames from `first`, 8-byte payloads. */
static size_t data(uint64_t epoch, uint64_t first, int count)
{
	return frames_datagram(dg, sizeof(dg), STREAM, epoch, first, count, 8, 1,
			       NULL);
}

static size_t control(uint64_t epoch, uint8_t flag, uint64_t next)
{
	return frames_control_datagram(dg, STREAM, epoch, flag, next);
}

struct rxs {
	tb_dgram_rx_t rx;
	tb_seq_t seq;
	tb_seq_range_t loss;
	struct sink sink;
	tb_counter_slot_t ctr;
	uint64_t now;
};

static struct rxs *rx_new(void)
{
	struct rxs *r = calloc(1, sizeof(*r));

	assert_non_null(r);
	tb_dgram_rx_init(&r->rx, STREAM, 100);
	tb_dgram_rx_set_counters(&r->rx, &r->ctr);
	tb_seq_init(&r->seq, 0);
	r->now = 1000 * MS;
	return r;
}

/* Feeds the datagram in `dg` once; returns the result and sets *done. */
static int feed(struct rxs *r, size_t len, int limit, int n_before, int *done)
{
	return tb_dgram_rx_input(&r->rx, &r->seq, &r->loss, dg, len, r->now,
				 on_msg, &r->sink, limit, n_before, done);
}

/* Feeds until done, with a fresh poll each time; returns the conditions
 * met, in order, in `conds` (0-terminated), and the frames delivered. */
static int feed_all(struct rxs *r, size_t len, int *conds)
{
	int done = 0, delivered = 0, nc = 0, guard = 0;

	while (!done) {
		int rc = feed(r, len, 1000, 0, &done);

		assert_true(++guard < 10);
		if (rc < 0)
			conds[nc++] = rc;
		else
			delivered += rc;
	}
	conds[nc] = 0;
	return delivered;
}

static void in_order_late_join_at_first_frame(void **state)
{
	struct rxs *r = rx_new();
	int conds[8];

	(void)state;
	assert_int_equal(tb_dgram_rx_idle(&r->rx, r->now), TB_NOT_CONNECTED);
	/* The first datagram seen starts the stream, wherever it is. */
	assert_int_equal(feed_all(r, data(EPOCH, 100, 3), conds), 3);
	assert_int_equal(conds[0], 0);
	assert_int_equal(feed_all(r, data(EPOCH, 103, 2), conds), 2);
	assert_int_equal(r->sink.n, 5);
	for (int i = 0; i < 5; i++)
		assert_int_equal(r->sink.seqs[i], 100 + i);
	assert_int_equal(r->sink.bad, 0);
	assert_int_equal(r->seq.expected, 105);
	assert_int_equal(r->rx.epoch, EPOCH);
	assert_int_equal(tb_dgram_rx_idle(&r->rx, r->now), 0);
	free(r);
}

static void gap_is_reported_with_its_exact_range_before_the_frames(void **state)
{
	struct rxs *r = rx_new();
	int done, rc;

	(void)state;
	assert_int_equal(feed(r, data(EPOCH, 1, 3), 100, 0, &done), 3);
	assert_int_equal(done, 1);
	/* 4 and 5 are lost; this poll already delivered: just stop. */
	assert_int_equal(feed(r, data(EPOCH, 6, 3), 100, 3, &done), 0);
	assert_int_equal(done, 0);
	/* Next poll: the gap, alone. */
	rc = feed(r, data(EPOCH, 6, 3), 100, 0, &done);
	assert_int_equal(rc, TB_GAP);
	assert_int_equal(done, 0);
	assert_int_equal(r->loss.first, 4);
	assert_int_equal(r->loss.last, 5);
	/* Then the frames that revealed it. */
	assert_int_equal(feed(r, data(EPOCH, 6, 3), 100, 0, &done), 3);
	assert_int_equal(done, 1);
	assert_int_equal(r->sink.n, 6);
	assert_int_equal(r->sink.seqs[3], 6);
	assert_int_equal(r->seq.gaps, 1);
	assert_int_equal(r->seq.missing, 2);
	free(r);
}

static void limit_splits_a_datagram_across_polls(void **state)
{
	struct rxs *r = rx_new();
	int done;

	(void)state;
	data(EPOCH, 1, 5);
	assert_int_equal(feed(r, 5 * 64 + 32, 2, 0, &done), 2);
	assert_int_equal(done, 0);
	assert_int_equal(feed(r, 5 * 64 + 32, 2, 0, &done), 2);
	assert_int_equal(done, 0);
	assert_int_equal(feed(r, 5 * 64 + 32, 2, 0, &done), 1);
	assert_int_equal(done, 1);
	assert_int_equal(r->sink.n, 5);
	assert_int_equal(r->sink.seqs[4], 5);
	free(r);
}

static void duplicates_are_dropped_and_counted(void **state)
{
	struct rxs *r = rx_new();
	int conds[8];

	(void)state;
	assert_int_equal(feed_all(r, data(EPOCH, 1, 3), conds), 3);
	/* The same datagram again: nothing delivered. */
	assert_int_equal(feed_all(r, data(EPOCH, 1, 3), conds), 0);
	assert_int_equal(conds[0], 0);
	assert_int_equal(r->rx.duplicates, 1);
	assert_int_equal(r->seq.duplicates, 3);
	assert_int_equal(tb_counter_get(&r->ctr, TB_CTR_DUPLICATES), 3);
	/* Overlapping: 2..5 delivers only 4 and 5. */
	assert_int_equal(feed_all(r, data(EPOCH, 2, 4), conds), 2);
	assert_int_equal(r->seq.duplicates, 5);
	assert_int_equal(tb_counter_get(&r->ctr, TB_CTR_DUPLICATES), 5);
	assert_int_equal(r->sink.n, 5);
	for (int i = 0; i < 5; i++)
		assert_int_equal(r->sink.seqs[i], i + 1);
	free(r);
}

static void late_datagram_after_its_gap_counts_as_reordered(void **state)
{
	struct rxs *r = rx_new();
	int conds[8];

	(void)state;
	assert_int_equal(feed_all(r, data(EPOCH, 1, 2), conds), 2);
	/* 5..6 overtakes 3..4: the gap is reported at once (no window). */
	assert_int_equal(feed_all(r, data(EPOCH, 5, 2), conds), 2);
	assert_int_equal(conds[0], TB_GAP);
	assert_int_equal(r->loss.first, 3);
	assert_int_equal(r->loss.last, 4);
	/* 3..4 arrives late: dropped, counted as reordered, not delivered. */
	assert_int_equal(feed_all(r, data(EPOCH, 3, 2), conds), 0);
	assert_int_equal(conds[0], 0);
	assert_int_equal(r->rx.reordered, 1);
	assert_int_equal(tb_counter_get(&r->ctr, TB_CTR_REORDERED), 1);
	assert_int_equal(r->rx.duplicates, 0);
	assert_int_equal(r->sink.n, 4);
	assert_int_equal(r->sink.seqs[2], 5);
	free(r);
}

/* One malformed datagram of each kind: each counted under its kind, none
 * delivered, and the stream goes on unharmed. */
static void every_malformed_kind_is_counted_and_dropped(void **state)
{
	struct rxs *r = rx_new();
	tb_packet_hdr_t *h = (tb_packet_hdr_t *)dg;
	tb_frame_hdr_t *f1 = (tb_frame_hdr_t *)(dg + TB_PACKET_HDR_LEN);
	tb_frame_hdr_t *f2 = (tb_frame_hdr_t *)(dg + TB_PACKET_HDR_LEN + 64);
	int conds[8], kinds = 0;
	size_t len;

	(void)state;
	assert_int_equal(feed_all(r, data(EPOCH, 1, 1), conds), 1);
	for (int k = TB_PACKET_SHORT; k < TB_PACKET_FAULT_COUNT; k++) {
		len = data(EPOCH, 2, 2);
		switch ((enum tb_packet_fault)k) {
		case TB_PACKET_SHORT: len = 20; break;
		case TB_PACKET_BAD_MAGIC: h->magic = 0x1234; break;
		case TB_PACKET_BAD_VERSION: h->version = 7; break;
		case TB_PACKET_BAD_LENGTH: len -= 8; break;
		case TB_PACKET_BAD_FLAGS: h->flags = 0x10; break;
		case TB_PACKET_BAD_COUNT: h->count = 9; break;
		case TB_PACKET_BAD_FRAME: f2->length = 1000; break;
		case TB_PACKET_WRONG_STREAM: f1->stream_id = STREAM + 1; break;
		case TB_PACKET_BAD_SEQ: f2->seq = 9; break;
		default: fail();
		}
		assert_int_equal(feed_all(r, len, conds), 0);
		assert_int_equal(conds[0], 0);
		assert_int_equal(tb_dgram_rx_faults(&r->rx, (enum tb_packet_fault)k), 1);
		/* And in the process counters, under its own name. */
		assert_int_equal(tb_counter_get(&r->ctr, (tb_counter_id_t)
				 (TB_CTR_MALFORMED_SHORT + k - TB_PACKET_SHORT)), 1);
		kinds++;
	}
	assert_int_equal(kinds, TB_PACKET_FAULT_COUNT - 1);
	/* Bytes beyond the frames the header counts. */
	len = data(EPOCH, 2, 2);
	h->count = 1;
	assert_int_equal(feed_all(r, len, conds), 0);
	assert_int_equal(tb_dgram_rx_faults(&r->rx, TB_PACKET_BAD_COUNT), 2);
	/* A datagram with a bad frame delivers none of its good ones. */
	assert_int_equal(r->sink.n, 1);
	assert_int_equal(tb_counter_get(&r->ctr, TB_CTR_MALFORMED), kinds + 1);
	/* Another stream's datagram is counted, not delivered. */
	len = data(EPOCH, 2, 2);
	h->stream_id = STREAM + 1;
	assert_int_equal(feed_all(r, len, conds), 0);
	assert_int_equal(tb_dgram_rx_faults(&r->rx, TB_PACKET_WRONG_STREAM), 2);
	/* The stream is intact: 2 and 3 arrive and are delivered. */
	assert_int_equal(feed_all(r, data(EPOCH, 2, 2), conds), 2);
	assert_int_equal(conds[0], 0);
	assert_int_equal(r->sink.seqs[2], 3);
	assert_int_equal(r->seq.gaps, 0);
	free(r);
}

static void new_epoch_once_then_old_epoch_is_stale(void **state)
{
	struct rxs *r = rx_new();
	int conds[8], done;

	(void)state;
	assert_int_equal(feed_all(r, data(EPOCH, 50, 2), conds), 2);
	/* The publisher restarted; this poll delivered already: wait. */
	assert_int_equal(feed(r, data(EPOCH + 7, 2, 2), 100, 5, &done), 0);
	assert_int_equal(done, 0);
	/* Its first datagram was lost: new epoch, then gap 1..1, then 2..3. */
	assert_int_equal(feed_all(r, data(EPOCH + 7, 2, 2), conds), 2);
	assert_int_equal(conds[0], TB_NEW_EPOCH);
	assert_int_equal(conds[1], TB_GAP);
	assert_int_equal(conds[2], 0);
	assert_int_equal(r->loss.first, 1);
	assert_int_equal(r->loss.last, 1);
	assert_int_equal(r->rx.epoch, EPOCH + 7);
	/* A straggler from the old epoch: dropped and counted. */
	assert_int_equal(feed_all(r, data(EPOCH, 52, 2), conds), 0);
	assert_int_equal(conds[0], 0);
	assert_int_equal(r->rx.stale_epoch, 1);
	/* Epoch 0 is never valid. */
	assert_int_equal(feed_all(r, data(0, 4, 1), conds), 0);
	assert_int_equal(r->rx.stale_epoch, 2);
	assert_int_equal(tb_counter_get(&r->ctr, TB_CTR_STALE_EPOCH), 2);
	/* The new epoch goes on. */
	assert_int_equal(feed_all(r, data(EPOCH + 7, 4, 1), conds), 1);
	assert_int_equal(conds[0], 0);
	assert_int_equal(r->sink.seqs[r->sink.n - 1], 4);
	free(r);
}

static void heartbeat_reveals_a_lost_tail(void **state)
{
	struct rxs *r = rx_new();
	int conds[8];

	(void)state;
	/* Joining on a heartbeat: the stream starts at its next sequence. */
	assert_int_equal(feed_all(r, control(EPOCH, TB_PACKET_F_HEARTBEAT, 10), conds), 0);
	assert_int_equal(conds[0], 0);
	assert_int_equal(r->seq.expected, 10);
	assert_int_equal(feed_all(r, data(EPOCH, 10, 2), conds), 2);
	/* Up to date: nothing to say. */
	assert_int_equal(feed_all(r, control(EPOCH, TB_PACKET_F_HEARTBEAT, 12), conds), 0);
	assert_int_equal(conds[0], 0);
	/* 12..14 were sent and lost, and nothing followed. */
	assert_int_equal(feed_all(r, control(EPOCH, TB_PACKET_F_HEARTBEAT, 15), conds), 0);
	assert_int_equal(conds[0], TB_GAP);
	assert_int_equal(conds[1], 0);
	assert_int_equal(r->loss.first, 12);
	assert_int_equal(r->loss.last, 14);
	assert_int_equal(r->seq.expected, 15);
	/* An old heartbeat (behind what arrived) is harmless. */
	assert_int_equal(feed_all(r, control(EPOCH, TB_PACKET_F_HEARTBEAT, 13), conds), 0);
	assert_int_equal(conds[0], 0);
	assert_int_equal(r->rx.heartbeats, 4);
	free(r);
}

static void end_reports_tail_gap_then_closed(void **state)
{
	struct rxs *r = rx_new();
	int conds[8];

	(void)state;
	assert_int_equal(feed_all(r, data(EPOCH, 1, 4), conds), 4);
	assert_int_equal(feed_all(r, control(EPOCH, TB_PACKET_F_END, 8), conds), 0);
	assert_int_equal(conds[0], TB_GAP);
	assert_int_equal(conds[1], TB_CLOSED);
	assert_int_equal(conds[2], 0);
	assert_int_equal(r->loss.first, 5);
	assert_int_equal(r->loss.last, 7);
	/* The copies of END and late data after it change nothing. */
	assert_int_equal(feed_all(r, control(EPOCH, TB_PACKET_F_END, 8), conds), 0);
	assert_int_equal(conds[0], 0);
	assert_int_equal(r->rx.stale_epoch, 0);
	assert_int_equal(feed_all(r, data(EPOCH, 6, 1), conds), 0);
	assert_int_equal(r->rx.stale_epoch, 1);
	assert_int_equal(r->sink.n, 4);
	assert_int_equal(tb_dgram_rx_idle(&r->rx, r->now + 10000 * MS), 0);
	/* A new publisher: new epoch, from 1. */
	assert_int_equal(feed_all(r, data(EPOCH + 1, 1, 1), conds), 1);
	assert_int_equal(conds[0], TB_NEW_EPOCH);
	assert_int_equal(conds[1], 0);
	free(r);
}

static void silence_is_a_dead_publisher_once(void **state)
{
	struct rxs *r = rx_new();
	int conds[8];

	(void)state;
	assert_int_equal(feed_all(r, data(EPOCH, 1, 1), conds), 1);
	assert_int_equal(tb_dgram_rx_idle(&r->rx, r->now + 100 * MS), 0);
	assert_int_equal(tb_dgram_rx_idle(&r->rx, r->now + 101 * MS),
			 TB_PUBLISHER_DEAD);
	assert_int_equal(tb_dgram_rx_idle(&r->rx, r->now + 500 * MS), 0);
	/* It was only starved: it speaks again and the stream goes on. */
	r->now += 600 * MS;
	assert_int_equal(feed_all(r, data(EPOCH, 2, 1), conds), 1);
	assert_int_equal(conds[0], 0);
	assert_int_equal(tb_dgram_rx_idle(&r->rx, r->now + 50 * MS), 0);
	assert_int_equal(tb_dgram_rx_idle(&r->rx, r->now + 200 * MS),
			 TB_PUBLISHER_DEAD);
	free(r);
}

/* Everything the packer makes, fed to a receiver, is the stream again:
 * wraps, varied sizes, batching and flushes, every frame exactly once. */
static void packer_output_is_what_the_receiver_accepts(void **state)
{
	struct rxs *r = rx_new();
	tb_dgram_tx_t tx;
	uint64_t now = 0;
	int conds[8], total = 0;
	unsigned rnd = 12345;

	(void)state;
	ring_reset(4096);
	assert_int_equal(tb_dgram_tx_init(&tx, &ring, 512, STREAM, EPOCH, 5), 0);
	for (int i = 0; i < 3000; i++) {
		int n;

		rnd = rnd * 1103515245u + 12345u;
		now += 1000 + (rnd >> 16) % 3000;
		publish((rnd >> 8) % 200, now);
		n = tb_dgram_tx_pack(&tx, ring.tail, now, i % 97 == 0);
		for (int k = 0; k < n; k++) {
			const tb_dgram_out_t *o = &tx.out[k];
			size_t off = (size_t)((const uint8_t *)o->frames - ring_mem);

			/* Never across the ring's end, never over the mtu. */
			assert_true(off + o->frames_len <= 4096);
			assert_true(TB_PACKET_HDR_LEN + o->frames_len <= 512);
			memcpy(dg, o->hdr, TB_PACKET_HDR_LEN);
			memcpy(dg + TB_PACKET_HDR_LEN, o->frames, o->frames_len);
			total += feed_all(r, TB_PACKET_HDR_LEN + o->frames_len, conds);
			assert_int_equal(conds[0], 0);
		}
		tb_dgram_tx_sent(&tx);
	}
	assert_int_equal(tb_dgram_tx_pack(&tx, ring.tail, now, 1), 1);
	memcpy(dg, tx.out[0].hdr, TB_PACKET_HDR_LEN);
	memcpy(dg + TB_PACKET_HDR_LEN, tx.out[0].frames, tx.out[0].frames_len);
	total += feed_all(r, TB_PACKET_HDR_LEN + tx.out[0].frames_len, conds);
	assert_int_equal(total, 3000);
	assert_int_equal(r->sink.bad, 0);
	assert_int_equal(r->seq.expected, 3001);
	assert_int_equal(r->seq.gaps, 0);
	/* Batching put several frames in most datagrams. */
	assert_true(tx.datagrams < 3000 / 2);
	free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(one_frame_per_datagram_without_batching),
		cmocka_unit_test(full_datagram_leaves_and_flush_sends_the_rest),
		cmocka_unit_test(exactly_full_datagram_leaves_at_once),
		cmocka_unit_test(batch_time_bound),
		cmocka_unit_test(big_send_fills_the_ready_list_then_continues),
		cmocka_unit_test(sizes_and_bad_mtu),
		cmocka_unit_test(in_order_late_join_at_first_frame),
		cmocka_unit_test(gap_is_reported_with_its_exact_range_before_the_frames),
		cmocka_unit_test(limit_splits_a_datagram_across_polls),
		cmocka_unit_test(duplicates_are_dropped_and_counted),
		cmocka_unit_test(late_datagram_after_its_gap_counts_as_reordered),
		cmocka_unit_test(every_malformed_kind_is_counted_and_dropped),
		cmocka_unit_test(new_epoch_once_then_old_epoch_is_stale),
		cmocka_unit_test(heartbeat_reveals_a_lost_tail),
		cmocka_unit_test(end_reports_tail_gap_then_closed),
		cmocka_unit_test(silence_is_a_dead_publisher_once),
		cmocka_unit_test(packer_output_is_what_the_receiver_accepts),
	};
	return cmocka_run_group_tests_name("dgram", tests, NULL, NULL);
}
