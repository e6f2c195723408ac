/*
 * The datagram core (dgram.h) without a network: packing ring frames into
 * datagrams by size, time and flush, and the receive side's classification
 * of every datagram: in order, gaps with exact ranges, duplicates,
 * reordering, every malformed kind, epochs, heartbeats, END and liveness.
 * Authentication: forged END, far-future sequence and epoch + 1 are dropped
 * and counted without effect, replays within an epoch and a recording of
 * an older epoch too, and a datagram is admitted once however many times a
 * condition makes the transport give it again.  One test feeds everything
 * the packer makes straight into a receiver.
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
#define TOKEN "dgram-test-token"

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
	assert_int_equal(tb_dgram_tx_init(&tx, &ring, 1472, STREAM, EPOCH, 0, TOKEN), 0);
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
	/* mtu 288: 224 bytes of frames; 72-byte frames take 96: two fit. */
	assert_int_equal(tb_dgram_tx_init(&tx, &ring, 288, STREAM, EPOCH,
					  1000000, TOKEN), 0);
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
	assert_int_equal(tx.out[0].hdr->length, 256);
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
	assert_int_equal(tb_dgram_tx_init(&tx, &ring, 288, STREAM, EPOCH,
					  1000000, TOKEN), 0);
	publish(40, 0);
	assert_int_equal(tb_dgram_tx_pack(&tx, ring.tail, 0, 0), 0);
	publish(96, 0);
	assert_int_equal(tb_dgram_tx_pack(&tx, ring.tail, 0, 0), 1);
	assert_int_equal(tx.out[0].hdr->count, 2);
	assert_int_equal(tx.out[0].hdr->length, 288);
}

static void batch_time_bound(void **state)
{
	tb_dgram_tx_t tx;
	uint64_t t0 = 5 * MS;

	(void)state;
	ring_reset(4096);
	assert_int_equal(tb_dgram_tx_init(&tx, &ring, 1472, STREAM, EPOCH, 100, TOKEN), 0);
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
	assert_int_equal(tb_dgram_tx_init(&tx, &ring, 288, STREAM, EPOCH, 0, TOKEN), 0);
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

/* The latency path's shortcut: one data frame since the last send and no
 * batching gives its datagram at once, numbered and signed like pack's;
 * anything else (two frames, batching, a wrap's padding) is left to
 * pack. */
static void one_frame_shortcut_and_when_it_steps_aside(void **state)
{
	tb_dgram_tx_t tx, btx;
	tb_dgram_auth_t a;
	tb_dgram_key_t k;
	const tb_packet_hdr_t *h;
	const void *frames;
	uint32_t len;
	uint64_t at;

	(void)state;
	ring_reset(4096);
	assert_int_equal(tb_dgram_tx_init(&tx, &ring, 1472, STREAM, EPOCH, 0,
					  TOKEN), 0);
	tb_dgram_auth_init(&a, TOKEN, STREAM);
	tb_dgram_auth_key(&a, EPOCH, &k);
	at = ring.tail;
	publish(20, 0);
	h = tb_dgram_tx_one(&tx, ring.tail, &frames, &len);
	assert_non_null(h);
	assert_ptr_equal(frames, tb_ring_at(&ring, at));
	assert_int_equal(len, 64);
	assert_int_equal(h->first_seq, 1);
	assert_int_equal(h->count, 1);
	assert_int_equal(h->length, TB_PACKET_HDR_LEN + 64);
	assert_int_equal(h->nonce, 0);
	assert_int_equal(h->mtu, 1472);
	assert_int_equal(h->epoch, EPOCH);
	assert_int_equal(h->version, TB_PACKET_VERSION);
	{
		uint8_t d[256];

		memcpy(d, h, TB_PACKET_HDR_LEN);
		memcpy(d + TB_PACKET_HDR_LEN, frames, len);
		assert_true(tb_dgram_auth_verify(&k, d, TB_PACKET_HDR_LEN + len));
	}
	/* Heartbeats learn of it only once it is sent. */
	assert_int_equal(tb_dgram_tx_sent_next(&tx), 1);
	tb_dgram_tx_sent_one(&tx);
	assert_int_equal(tb_dgram_tx_sent_next(&tx), 2);
	/* Two frames at once: pack's, with the next nonce. */
	publish(20, 0);
	publish(20, 0);
	assert_null(tb_dgram_tx_one(&tx, ring.tail, &frames, &len));
	assert_int_equal(tb_dgram_tx_pack(&tx, ring.tail, 0, 0), 1);
	assert_int_equal(tx.out[0].count, 2);
	assert_int_equal(tx.out[0].hdr->nonce, 1);
	tb_dgram_tx_sent(&tx);
	/* Then the shortcut again. */
	publish(20, 0);
	h = tb_dgram_tx_one(&tx, ring.tail, &frames, &len);
	assert_non_null(h);
	assert_int_equal(h->first_seq, 4);
	assert_int_equal(h->nonce, 2);
	tb_dgram_tx_sent_one(&tx);
	/* Up to the ring's end: the padding frame is pack's to skip. */
	while (4096 - (ring.tail & ring.mask) > 64) {
		publish(20, 0);
		assert_non_null(tb_dgram_tx_one(&tx, ring.tail, &frames, &len));
		tb_dgram_tx_sent_one(&tx);
	}
	publish(100, 0); /* 160 bytes in the 64 left: pads, lands at 0 */
	assert_null(tb_dgram_tx_one(&tx, ring.tail, &frames, &len));
	assert_int_equal(tb_dgram_tx_pack(&tx, ring.tail, 0, 0), 1);
	assert_int_equal(tx.out[0].frames, tb_ring_at(&ring, 0));
	tb_dgram_tx_sent(&tx);
	/* Batching: never the shortcut. */
	ring_reset(4096);
	assert_int_equal(tb_dgram_tx_init(&btx, &ring, 1472, STREAM, EPOCH, 100,
					  TOKEN), 0);
	publish(20, 0);
	assert_null(tb_dgram_tx_one(&btx, ring.tail, &frames, &len));
}

static void sizes_and_bad_mtu(void **state)
{
	tb_dgram_tx_t tx;

	(void)state;
	ring_reset(4096);
	/* 1472 less the 64-byte header: 1408 for one frame, header and all. */
	assert_int_equal(tb_dgram_max_frame(1472), 1408);
	assert_int_equal(tb_dgram_max_frame(64), 0);
	assert_int_equal(tb_dgram_tx_init(&tx, &ring, 80, STREAM, EPOCH, 0, TOKEN),
			 TB_EINVAL);
	/* The header names the mtu in 16 bits. */
	assert_int_equal(tb_dgram_tx_init(&tx, &ring, 65536, STREAM, EPOCH, 0,
					  TOKEN), TB_EINVAL);
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

/* The publisher's side of the keys, as the tests play it. */
static uint64_t nonce_next, beat_nonce_next;

/* The epoch's start a test publisher claims: later epochs, later starts. */
static uint64_t since_of(uint64_t epoch) { return epoch * 1000; }

/* Signs the `len`-byte datagram in `dg` with `token`'s key for its epoch,
 * as it stands (nonce, since and mtu included). */
static size_t sign_as(const char *token, size_t len)
{
	tb_packet_hdr_t *h = (tb_packet_hdr_t *)dg;
	tb_dgram_auth_t auth;
	tb_dgram_key_t key;

	tb_dgram_auth_init(&auth, token, h->stream_id);
	tb_dgram_auth_key(&auth, h->epoch, &key);
	tb_dgram_auth_sign(&key, h, dg + TB_PACKET_HDR_LEN,
			   len - TB_PACKET_HDR_LEN);
	return len;
}

/* Numbers the datagram in `dg` as its publisher would, and signs it. */
static size_t sign(size_t len)
{
	tb_packet_hdr_t *h = (tb_packet_hdr_t *)dg;

	h->mtu = 1472;
	h->since = since_of(h->epoch);
	h->nonce = h->flags & TB_PACKET_F_HEARTBEAT
			   ? TB_PACKET_NONCE_BEAT | beat_nonce_next++
			   : nonce_next++;
	return sign_as(TOKEN, len);
}

/* A data datagram of `count` frames from `first`, 8-byte payloads. */
static size_t data(uint64_t epoch, uint64_t first, int count)
{
	return sign(frames_datagram(dg, sizeof(dg), STREAM, epoch, first, count,
				    8, 1, NULL));
}

static size_t control(uint64_t epoch, uint8_t flag, uint64_t next)
{
	return sign(frames_control_datagram(dg, STREAM, epoch, flag, next));
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
	tb_dgram_rx_init(&r->rx, STREAM, 100, TOKEN, 1472);
	tb_dgram_rx_set_counters(&r->rx, &r->ctr);
	tb_seq_init(&r->seq, 0);
	r->now = 1000 * MS;
	return r;
}

static void rx_free(struct rxs *r)
{
	tb_dgram_rx_fini(&r->rx);
	free(r);
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
	rx_free(r);
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
	rx_free(r);
}

static void limit_splits_a_datagram_across_polls(void **state)
{
	struct rxs *r = rx_new();
	int done;

	(void)state;
	data(EPOCH, 1, 5);
	assert_int_equal(feed(r, 5 * 64 + 64, 2, 0, &done), 2);
	assert_int_equal(done, 0);
	assert_int_equal(feed(r, 5 * 64 + 64, 2, 0, &done), 2);
	assert_int_equal(done, 0);
	assert_int_equal(feed(r, 5 * 64 + 64, 2, 0, &done), 1);
	assert_int_equal(done, 1);
	assert_int_equal(r->sink.n, 5);
	assert_int_equal(r->sink.seqs[4], 5);
	rx_free(r);
}

static void duplicates_are_dropped_and_counted(void **state)
{
	struct rxs *r = rx_new();
	int conds[8];
	size_t len;

	(void)state;
	len = data(EPOCH, 1, 3);
	assert_int_equal(feed_all(r, len, conds), 3);
	/* The very same datagram again (a copy the fabric made, or a
	 * replay): dropped before its frames are looked at. */
	assert_int_equal(feed_all(r, len, conds), 0);
	assert_int_equal(conds[0], 0);
	assert_int_equal(r->rx.replayed, 1);
	assert_int_equal(tb_counter_get(&r->ctr, TB_CTR_DGRAM_REPLAYED), 1);
	assert_int_equal(r->seq.duplicates, 0);
	/* Sent again (a new datagram of frames already delivered): nothing
	 * delivered, the frames counted as duplicates. */
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
	rx_free(r);
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
	rx_free(r);
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
		/* Frame faults in datagrams that pass authentication: a
		 * publisher's bug, not an attacker's (whose are forged). */
		case TB_PACKET_BAD_FRAME: f2->length = 1000; sign_as(TOKEN, len); break;
		case TB_PACKET_WRONG_STREAM: f1->stream_id = STREAM + 1; sign_as(TOKEN, len); break;
		case TB_PACKET_BAD_SEQ: f2->seq = 9; sign_as(TOKEN, len); break;
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
	sign_as(TOKEN, len);
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
	assert_int_equal(r->rx.forged, 0);
	/* The stream is intact: 2 and 3 arrive and are delivered. */
	assert_int_equal(feed_all(r, data(EPOCH, 2, 2), conds), 2);
	assert_int_equal(conds[0], 0);
	assert_int_equal(r->sink.seqs[2], 3);
	assert_int_equal(r->seq.gaps, 0);
	rx_free(r);
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
	rx_free(r);
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
	rx_free(r);
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
	rx_free(r);
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
	rx_free(r);
}

/* ------------------------------------------------------ authentication */

/* A forged END, a forged far-future sequence and a forged epoch + 1 (the
 * attacker knows stream and epoch, not the token) are dropped and counted
 * as forged; the stream goes on as if they had never come. */
static void forgeries_are_dropped_before_anything_is_acted_on(void **state)
{
	struct rxs *r = rx_new();
	tb_packet_hdr_t *h = (tb_packet_hdr_t *)dg;
	int conds[8];
	size_t len;

	(void)state;
	assert_int_equal(feed_all(r, data(EPOCH, 1, 3), conds), 3);
	len = control(EPOCH, TB_PACKET_F_END, 4);
	sign_as("guessed-token", len);
	assert_int_equal(feed_all(r, len, conds), 0);
	assert_int_equal(conds[0], 0);
	len = data(EPOCH, 1000000004, 1);
	sign_as("guessed-token", len);
	assert_int_equal(feed_all(r, len, conds), 0);
	assert_int_equal(conds[0], 0);
	len = data(EPOCH + 1, 1, 1);
	sign_as("guessed-token", len);
	assert_int_equal(feed_all(r, len, conds), 0);
	assert_int_equal(conds[0], 0);
	/* A real datagram with one bit changed anywhere is forged too: in
	 * the header, in a frame, in the tag. */
	len = data(EPOCH, 4, 2);
	h->first_seq ^= 1;
	assert_int_equal(feed_all(r, len, conds), 0);
	len = data(EPOCH, 4, 2);
	dg[len - 1] ^= 0x10;
	assert_int_equal(feed_all(r, len, conds), 0);
	len = data(EPOCH, 4, 2);
	h->tag[15] ^= 1;
	assert_int_equal(feed_all(r, len, conds), 0);
	assert_int_equal(r->rx.forged, 6);
	assert_int_equal(tb_counter_get(&r->ctr, TB_CTR_DGRAM_FORGED), 6);
	assert_int_equal(tb_counter_get(&r->ctr, TB_CTR_MALFORMED), 0);
	assert_int_equal(r->rx.epoch, EPOCH);
	assert_int_equal(r->rx.state, TB_DGRAM_LIVE);
	assert_int_equal(r->seq.expected, 4);
	assert_int_equal(r->seq.gaps, 0);
	/* The real stream, unharmed. */
	assert_int_equal(feed_all(r, data(EPOCH, 4, 2), conds), 2);
	assert_int_equal(conds[0], 0);
	assert_int_equal(feed_all(r, control(EPOCH, TB_PACKET_F_END, 6), conds), 0);
	assert_int_equal(conds[0], TB_CLOSED);
	assert_int_equal(r->sink.n, 5);
	rx_free(r);
}

/* Within an epoch a nonce is taken once per sender (data and heartbeats
 * count apart); one older than the window is taken for a replay; a late
 * one inside the window is read (and its frames judged as usual). */
static void replay_window_per_sender(void **state)
{
	struct rxs *r = rx_new();
	static uint8_t keep[4096];
	int conds[8];
	size_t len, hb;

	(void)state;
	nonce_next = 1000;
	beat_nonce_next = 1000;
	assert_int_equal(feed_all(r, data(EPOCH, 1, 1), conds), 1);
	/* The heartbeat thread's number 1000 is not the data's. */
	hb = control(EPOCH, TB_PACKET_F_HEARTBEAT, 2);
	assert_int_equal(feed_all(r, hb, conds), 0);
	assert_int_equal(r->rx.heartbeats, 1);
	assert_int_equal(r->rx.replayed, 0);
	/* The heartbeat again: replayed. */
	assert_int_equal(feed_all(r, hb, conds), 0);
	assert_int_equal(r->rx.replayed, 1);
	assert_int_equal(r->rx.heartbeats, 1);
	/* Data 1001, kept; then far ahead (past the window); then 1001
	 * again: older than the window, a replay. */
	len = data(EPOCH, 2, 1);
	memcpy(keep, dg, len);
	assert_int_equal(feed_all(r, len, conds), 1);
	nonce_next += TB_DGRAM_REPLAY_WINDOW + 5;
	assert_int_equal(feed_all(r, data(EPOCH, 3, 1), conds), 1);
	memcpy(dg, keep, len);
	assert_int_equal(feed_all(r, len, conds), 0);
	assert_int_equal(r->rx.replayed, 2);
	/* A datagram numbered just below the highest, unseen: read; its
	 * frame is old, so it counts as a duplicate. */
	nonce_next -= 3;
	assert_int_equal(feed_all(r, data(EPOCH, 2, 1), conds), 0);
	assert_int_equal(r->rx.replayed, 2);
	assert_int_equal(r->rx.duplicates, 1);
	assert_int_equal(tb_counter_get(&r->ctr, TB_CTR_DGRAM_REPLAYED), 2);
	assert_int_equal(r->sink.n, 3);
	rx_free(r);
}

/* A restart reported while the same datagram is given again (the
 * condition first, its frames next call) admits it once: no replay. */
static void a_datagram_given_again_after_its_condition_is_admitted_once(void **state)
{
	struct rxs *r = rx_new();
	int conds[8], done;
	size_t len;

	(void)state;
	assert_int_equal(feed_all(r, data(EPOCH, 1, 2), conds), 2);
	len = data(EPOCH + 3, 1, 2);
	/* This poll delivered already: come back. */
	assert_int_equal(feed(r, len, 100, 2, &done), 0);
	assert_int_equal(done, 0);
	assert_int_equal(feed(r, len, 100, 0, &done), TB_NEW_EPOCH);
	assert_int_equal(done, 0);
	assert_int_equal(feed(r, len, 100, 0, &done), 2);
	assert_int_equal(done, 1);
	/* A gap then its END, the END given three times. */
	len = control(EPOCH + 3, TB_PACKET_F_END, 6);
	assert_int_equal(feed(r, len, 100, 0, &done), TB_GAP);
	assert_int_equal(done, 0);
	assert_int_equal(feed(r, len, 100, 0, &done), TB_CLOSED);
	assert_int_equal(done, 1);
	assert_int_equal(r->rx.replayed, 0);
	assert_int_equal(r->rx.forged, 0);
	assert_int_equal(r->loss.first, 3);
	assert_int_equal(r->loss.last, 5);
	rx_free(r);
}

/* An authentic epoch that started before the followed one (a recording
 * replayed after the publisher restarted) is refused as stale, even by a
 * receiver that never followed it; a later one is a restart. */
static void an_epoch_older_than_the_followed_one_is_stale(void **state)
{
	struct rxs *r = rx_new();
	int conds[8];

	(void)state;
	assert_int_equal(feed_all(r, data(EPOCH + 10, 1, 1), conds), 1);
	assert_int_equal(feed_all(r, data(EPOCH + 9, 7, 3), conds), 0);
	assert_int_equal(conds[0], 0);
	assert_int_equal(feed_all(r, control(EPOCH + 9, TB_PACKET_F_END, 11), conds), 0);
	assert_int_equal(conds[0], 0);
	assert_int_equal(r->rx.stale_epoch, 2);
	assert_int_equal(r->rx.epoch, EPOCH + 10);
	assert_int_equal(feed_all(r, data(EPOCH + 11, 1, 1), conds), 1);
	assert_int_equal(conds[0], TB_NEW_EPOCH);
	assert_int_equal(r->rx.epoch, EPOCH + 11);
	/* Now EPOCH + 10 is both left and older. */
	assert_int_equal(feed_all(r, data(EPOCH + 10, 2, 1), conds), 0);
	assert_int_equal(r->rx.stale_epoch, 3);
	assert_int_equal(r->rx.forged, 0);
	rx_free(r);
}

/* A token that differs (a misconfigured subscriber) makes every datagram
 * forged: nothing is delivered, and the counters say why. */
static void another_token_reads_nothing(void **state)
{
	struct rxs *r = calloc(1, sizeof(*r));
	int conds[8];

	(void)state;
	assert_non_null(r);
	tb_dgram_rx_init(&r->rx, STREAM, 100, "other-token", 1472);
	tb_dgram_rx_set_counters(&r->rx, &r->ctr);
	tb_seq_init(&r->seq, 0);
	assert_int_equal(feed_all(r, data(EPOCH, 1, 2), conds), 0);
	assert_int_equal(feed_all(r, control(EPOCH, TB_PACKET_F_HEARTBEAT, 3), conds), 0);
	assert_int_equal(r->rx.forged, 2);
	assert_int_equal(r->rx.state, TB_DGRAM_WAITING);
	assert_int_equal(tb_dgram_rx_idle(&r->rx, 1), TB_NOT_CONNECTED);
	rx_free(r);
}

/* A publisher whose datagrams are larger than this receiver can take is
 * noted (once in words, every time in mtu_over), and its datagrams that
 * do arrive are read. */
static void publisher_mtu_above_what_the_receiver_takes_is_told(void **state)
{
	struct rxs *r = calloc(1, sizeof(*r));
	tb_packet_hdr_t *h = (tb_packet_hdr_t *)dg;
	int conds[8];
	size_t len;

	(void)state;
	assert_non_null(r);
	tb_dgram_rx_init(&r->rx, STREAM, 100, TOKEN, 1024);
	tb_dgram_rx_set_counters(&r->rx, &r->ctr);
	tb_seq_init(&r->seq, 0);
	len = data(EPOCH, 1, 1); /* announces 1472 */
	assert_int_equal(feed_all(r, len, conds), 1);
	len = frames_control_datagram(dg, STREAM, EPOCH, TB_PACKET_F_HEARTBEAT, 2);
	h->mtu = 1024;
	h->since = since_of(EPOCH);
	h->nonce = TB_PACKET_NONCE_BEAT | beat_nonce_next++;
	sign_as(TOKEN, len);
	assert_int_equal(feed_all(r, len, conds), 0);
	assert_int_equal(r->rx.mtu_over, 1);
	assert_int_equal(tb_counter_get(&r->ctr, TB_CTR_ERRORS), 1);
	assert_int_equal(r->sink.n, 1);
	rx_free(r);
}

/* Keys: one per token, stream and epoch; a tag under one verifies under no
 * other. */
static void keys_differ_by_token_stream_and_epoch(void **state)
{
	tb_dgram_auth_t a;
	tb_dgram_key_t k[4];
	size_t len;

	(void)state;
	len = data(EPOCH, 1, 1);
	tb_dgram_auth_init(&a, TOKEN, STREAM);
	tb_dgram_auth_key(&a, EPOCH, &k[0]);
	assert_true(tb_dgram_auth_verify(&k[0], dg, len));
	tb_dgram_auth_key(&a, EPOCH + 1, &k[1]);
	tb_dgram_auth_init(&a, TOKEN, STREAM + 1);
	tb_dgram_auth_key(&a, EPOCH, &k[2]);
	tb_dgram_auth_init(&a, TOKEN "x", STREAM);
	tb_dgram_auth_key(&a, EPOCH, &k[3]);
	for (int i = 1; i < 4; i++)
		assert_false(tb_dgram_auth_verify(&k[i], dg, len));
	assert_int_equal(k[1].epoch, EPOCH + 1);
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
	assert_int_equal(tb_dgram_tx_init(&tx, &ring, 512, STREAM, EPOCH, 5, TOKEN),
			 0);
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
	assert_true(tb_dgram_tx_datagrams(&tx) < 3000 / 2);
	rx_free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(one_frame_per_datagram_without_batching),
		cmocka_unit_test(full_datagram_leaves_and_flush_sends_the_rest),
		cmocka_unit_test(exactly_full_datagram_leaves_at_once),
		cmocka_unit_test(batch_time_bound),
		cmocka_unit_test(big_send_fills_the_ready_list_then_continues),
		cmocka_unit_test(one_frame_shortcut_and_when_it_steps_aside),
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
		cmocka_unit_test(forgeries_are_dropped_before_anything_is_acted_on),
		cmocka_unit_test(replay_window_per_sender),
		cmocka_unit_test(a_datagram_given_again_after_its_condition_is_admitted_once),
		cmocka_unit_test(an_epoch_older_than_the_followed_one_is_stale),
		cmocka_unit_test(another_token_reads_nothing),
		cmocka_unit_test(publisher_mtu_above_what_the_receiver_takes_is_told),
		cmocka_unit_test(keys_differ_by_token_stream_and_epoch),
		cmocka_unit_test(packer_output_is_what_the_receiver_accepts),
	};
	return cmocka_run_group_tests_name("dgram", tests, NULL, NULL);
}
