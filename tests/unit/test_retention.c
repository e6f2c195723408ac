/*
 * The publisher's retention buffer: the last N messages readable by
 * sequence from the ring they were published into; bounds that follow what
 * the ring still holds; frames the writer has overwritten (or is about to)
 * refused as too old, never served torn; and a real publisher answering the
 * recovery protocol on its retention_endpoint.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/recovery/client.h"
#include "publisher/retention.h"
#include "tests/common/frames.h"
#include "tests/common/proc.h"
#include <tickbus/tickbus.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RING (64u << 10)

struct fixture {
	tb_ring_t ring;
	tb_retention_t ret;
	uint8_t *mem;
	uint64_t next;
};

static void publish(struct fixture *x, uint32_t len)
{
	tb_frame_hdr_t *f = tb_ring_claim(&x->ring, len, x->next);
	uint64_t at = x->ring.claim_pos;

	assert_non_null(f);
	frames_put(f, 5, x->next, len, 1, x->next * 3, NULL);
	tb_ring_commit(&x->ring);
	tb_retention_record(&x->ret, x->next, at);
	x->next++;
}

static void fixture_init(struct fixture *x, uint64_t n)
{
	x->mem = aligned_alloc(64, RING);
	assert_non_null(x->mem);
	tb_ring_init(&x->ring, x->mem, RING, 5);
	assert_int_equal(tb_retention_init(&x->ret, n, &x->ring, 5, 99), 0);
	x->next = 1;
}

static void fixture_free(struct fixture *x)
{
	tb_retention_free(&x->ret);
	free(x->mem);
}

struct got {
	uint64_t n, next, bad;
};

static int on_frame(void *cd, const tb_frame_hdr_t *f)
{
	struct got *g = cd;

	if (g->next && f->seq != g->next)
		g->bad++;
	if (!(f->flags & TB_FRAME_F_REPLAY) || f->publish_ns != f->seq * 3)
		g->bad++;
	g->bad += frames_payload_bad(f);
	g->next = f->seq + 1;
	g->n++;
	return 0;
}

static int on_frame_any(void *cd, const tb_frame_hdr_t *f)
{
	(void)cd;
	(void)f;
	return 0;
}

static void test_empty_and_last_n(void **state)
{
	struct fixture x;
	uint64_t epoch, first, last;
	struct got g = {0};

	(void)state;
	fixture_init(&x, 100);
	tb_retention_bounds(&x.ret, &epoch, &first, &last);
	assert_int_equal(epoch, 99);
	assert_int_equal(first, 0);
	assert_int_equal(last, 0);
	assert_int_equal(tb_retention_read(&x.ret, 1, 10, on_frame, &g),
			 TB_STORE_NOT_YET);
	for (int i = 0; i < 150; i++)
		publish(&x, 48);
	tb_retention_bounds(&x.ret, &epoch, &first, &last);
	assert_int_equal(first, 51); /* the last 100 */
	assert_int_equal(last, 150);
	assert_int_equal(tb_retention_read(&x.ret, 50, 10, on_frame, &g),
			 TB_STORE_TOO_OLD);
	assert_int_equal(tb_retention_read(&x.ret, 151, 10, on_frame, &g),
			 TB_STORE_NOT_YET);
	assert_int_equal(tb_retention_read(&x.ret, 51, 1000, on_frame, &g), 100);
	assert_int_equal(g.n, 100);
	assert_int_equal(g.bad, 0);
	assert_int_equal(g.next, 151);
	fixture_free(&x);
}

static void test_ring_bounds_retention(void **state)
{
	struct fixture x;
	uint64_t epoch, first, last, held;
	struct got g = {0};

	(void)state;
	/* Retention asks for 100,000 but a 64 KiB ring of 160-byte frames
	 * holds 409: only what the ring still holds is served. */
	fixture_init(&x, 100000);
	for (int i = 0; i < 5000; i++)
		publish(&x, 100 + (uint32_t)(i % 7) * 8);
	tb_retention_bounds(&x.ret, &epoch, &first, &last);
	assert_int_equal(last, 5000);
	held = last - first + 1;
	assert_true(held > 300 && held < 700);
	assert_int_equal(tb_retention_read(&x.ret, first - 1, 10, on_frame, &g),
			 TB_STORE_TOO_OLD);
	assert_int_equal(tb_retention_read(&x.ret, first, 100000, on_frame, &g),
			 (int)held);
	assert_int_equal(g.bad, 0);
	fixture_free(&x);
}

static void test_frame_being_overwritten_is_refused(void **state)
{
	struct fixture x;
	uint64_t epoch, first, last;
	struct got g = {0};
	tb_frame_hdr_t *f;

	(void)state;
	fixture_init(&x, 1000);
	for (int i = 0; i < 600; i++) /* 600 128-byte frames: 512 fit */
		publish(&x, 96);
	tb_retention_bounds(&x.ret, &epoch, &first, &last);
	/* The writer announces its next frame (intent) over the oldest: that
	 * frame is gone even before a byte of it changes. */
	f = tb_ring_claim(&x.ring, 96, x.next);
	assert_non_null(f);
	assert_int_equal(tb_retention_read(&x.ret, first, 1, on_frame, &g),
			 TB_STORE_TOO_OLD);
	assert_int_equal(g.n, 0);
	tb_ring_abort(&x.ring);
	assert_int_equal(tb_retention_read(&x.ret, first, 1, on_frame, &g), 1);
	/* A frame whose bytes were scribbled over (a sequence that does not
	 * match its slot) is refused, not served. */
	memset(x.ring.base + (tb_atomic_load_relaxed(&x.ret.pos[(first + 5) & x.ret.mask]) &
			      x.ring.mask) + 16, 0x7f, 8);
	g.n = 0;
	g.next = 0;
	assert_int_equal(tb_retention_read(&x.ret, first + 1, 100, on_frame, &g), 4);
	assert_int_equal(g.bad, 0);
	fixture_free(&x);
}

/* As on_frame, without publish_ns (the publisher stamps its clock). */
static int on_frame_seq_only(void *cd, const tb_frame_hdr_t *f)
{
	struct got *g = cd;

	if (g->next && f->seq != g->next)
		g->bad++;
	if (f->stream_id != 5 || f->length != TB_FRAME_HDR_LEN + 40)
		g->bad++;
	g->bad += frames_payload_bad(f);
	g->next = f->seq + 1;
	g->n++;
	return 0;
}

static void test_publisher_serves_retention(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_recovery_proto_request_t q;
	tb_recovery_proto_reject_t rej;
	struct got g = {0};
	uint8_t payload[40];

	(void)state;
	tb_stream_cfg_init(&cfg);
	strcpy(cfg.name, "ret");
	cfg.id = 5;
	cfg.transport = TB_TRANSPORT_SHM;
	cfg.ring_size = 1u << 20;
	snprintf(cfg.shm_path, sizeof(cfg.shm_path), "/dev/shm/tb-test-ret.%d",
		 (int)getpid());
	strcpy(cfg.token, "pubtok");
	cfg.retention = 1000;
	strcpy(cfg.retention_endpoint.host, "127.0.0.1");
	cfg.retention_endpoint.port = (uint16_t)proc_free_port();
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	for (uint64_t s = 1; s <= 3000; s++) {
		memset(payload, (int)(s & 0xff), sizeof(payload));
		assert_int_equal(tb_pub_offer(pub, 1, payload, sizeof(payload)),
				 (int64_t)s);
	}
	memset(&q, 0, sizeof(q));
	q.stream_id = 5;
	q.epoch = tb_pub_epoch(pub);
	q.first = 2001;
	q.count = 1000;
	{
		struct got h = {0};
		uint64_t n = 0;

		assert_int_equal(tb_recovery_client_fetch_one(&cfg.retention_endpoint, "pubtok", &q,
						      2000, on_frame_seq_only, &h,
						      &rej, &n), 1000);
		assert_int_equal(h.n, 1000);
		assert_int_equal(h.bad, 0);
		assert_int_equal(h.next, 3001);
	}
	q.first = 2000;
	assert_int_equal(tb_recovery_client_fetch_one(&cfg.retention_endpoint, "pubtok", &q, 2000,
					      on_frame_seq_only, &g, &rej, NULL),
			 TB_RECOVERY_CLIENT_REJECTED);
	assert_int_equal(rej.reason, TB_RECOVERY_PROTO_REJ_TOO_OLD);
	assert_int_equal(rej.earliest_seq, 2001);
	q.first = 2001;
	assert_int_equal(tb_recovery_client_fetch_one(&cfg.retention_endpoint, "pubtoK", &q, 2000,
					      on_frame_seq_only, &g, &rej, NULL),
			 TB_RECOVERY_CLIENT_REJECTED);
	assert_int_equal(rej.reason, TB_RECOVERY_PROTO_REJ_UNAUTHORISED);
	assert_int_equal(tb_publisher_close(pub), 0);
	unlink(cfg.shm_path);
}

/* A publisher of `cfg` (retention 1000, an endpoint) keeps its small
 * offers, single and in bursts, for its own retention server: each
 * transport's offer has a copy of its own for a stream with retention
 * (publisher.c), and each must record every frame. */
static void small_offers_are_kept(tb_stream_cfg_t *cfg)
{
	tb_recovery_proto_request_t q;
	tb_recovery_proto_reject_t rej;
	tb_publisher_t *pub;
	uint8_t payload[10][40];
	tb_pub_msg_t m[10];
	struct got g = {0};
	uint64_t s = 1;

	cfg->id = 5;
	cfg->ring_size = 1u << 20;
	strcpy(cfg->token, "pubtok");
	cfg->retention = 1000;
	strcpy(cfg->retention_endpoint.host, "127.0.0.1");
	cfg->retention_endpoint.port = (uint16_t)proc_free_port();
	assert_int_equal(tb_publisher_open(&pub, cfg), 0);
	for (; s <= 2500; s++) {
		memset(payload[0], (int)(s & 0xff), sizeof(payload[0]));
		assert_int_equal(tb_pub_offer(pub, 1, payload[0], 40), (int64_t)s);
	}
	for (; s <= 3000; s += 10) {
		for (int i = 0; i < 10; i++) {
			memset(payload[i], (int)((s + (uint64_t)i) & 0xff), 40);
			m[i].template_id = 1;
			m[i].data = payload[i];
			m[i].len = 40;
		}
		assert_int_equal(tb_pub_offerv(pub, m, 10), 10);
	}
	memset(&q, 0, sizeof(q));
	q.stream_id = 5;
	q.epoch = tb_pub_epoch(pub);
	q.first = 2001;
	q.count = 1000;
	assert_int_equal(tb_recovery_client_fetch_one(&cfg->retention_endpoint,
						      "pubtok", &q, 2000,
						      on_frame_seq_only, &g,
						      &rej, NULL), 1000);
	assert_int_equal(g.n, 1000);
	assert_int_equal(g.bad, 0);
	assert_int_equal(g.next, 3001);
	assert_int_equal(tb_publisher_close(pub), 0);
}

static void test_small_offers_are_kept_on_every_transport(void **state)
{
	tb_stream_cfg_t cfg;

	(void)state;
	tb_stream_cfg_init(&cfg);
	strcpy(cfg.name, "kept-shm");
	cfg.transport = TB_TRANSPORT_SHM;
	snprintf(cfg.shm_path, sizeof(cfg.shm_path), "/dev/shm/tb-test-kept.%d",
		 (int)getpid());
	small_offers_are_kept(&cfg);
	unlink(cfg.shm_path);

	tb_stream_cfg_init(&cfg);
	strcpy(cfg.name, "kept-rc");
	cfg.transport = TB_TRANSPORT_RC; /* softrdma (run-tests.sh) */
	strcpy(cfg.control.host, "127.0.0.1");
	cfg.control.port = (uint16_t)proc_free_port();
	small_offers_are_kept(&cfg);

	tb_stream_cfg_init(&cfg);
	strcpy(cfg.name, "kept-ud");
	cfg.transport = TB_TRANSPORT_UD;
	strcpy(cfg.group.host, "239.192.77.5");
	cfg.group.port = (uint16_t)proc_free_port();
	small_offers_are_kept(&cfg);

	tb_stream_cfg_init(&cfg);
	strcpy(cfg.name, "kept-udp");
	cfg.transport = TB_TRANSPORT_UDP; /* the send op's copy */
	strcpy(cfg.group.host, "239.192.77.6");
	cfg.group.port = (uint16_t)proc_free_port();
	strcpy(cfg.interface, "127.0.0.1");
	small_offers_are_kept(&cfg);
}

/* Frames copied straight into an answer: each exactly its length, back to
 * back at any alignment, flagged replay; a first frame too large for the
 * room is 0 (send what you have and ask again); one overwritten while it
 * was copied is refused, not sent. */
static void test_copy_into_an_answer(void **state)
{
	struct fixture x;
	uint8_t raw[8192 + 3], *out = raw + 3;
	uint64_t epoch, first, last;
	size_t len, off = 0;
	tb_frame_hdr_t h;
	int n;

	(void)state;
	fixture_init(&x, 1000);
	for (int i = 0; i < 300; i++)
		publish(&x, 40 + (uint32_t)(i % 5));
	tb_retention_bounds(&x.ret, &epoch, &first, &last);
	n = tb_retention_copy(&x.ret, 100, 50, out, 8192, &len);
	assert_int_equal(n, 50);
	for (int i = 0; i < n; i++) {
		memcpy(&h, out + off, sizeof(h));
		assert_true(h.seq == 100 + (uint64_t)i);
		assert_int_equal(h.length, TB_FRAME_HDR_LEN + 40 + (99 + i) % 5);
		assert_true(h.flags & TB_FRAME_F_REPLAY);
		assert_true(h.publish_ns == h.seq * 3);
		for (uint32_t k = TB_FRAME_HDR_LEN; k < h.length; k++)
			assert_int_equal(out[off + k], (uint8_t)h.seq);
		off += h.length;
	}
	assert_int_equal(off, len);
	/* Room for some: as many as fit. */
	n = tb_retention_copy(&x.ret, 100, 50, out, 200, &len);
	assert_int_equal(n, 2);
	assert_true(len <= 200);
	/* Room for none. */
	assert_int_equal(tb_retention_copy(&x.ret, 100, 50, out, 10, &len), 0);
	assert_int_equal(len, 0);
	/* Outside what is held. */
	assert_int_equal(tb_retention_copy(&x.ret, last + 1, 5, out, 8192, &len),
			 TB_STORE_NOT_YET);
	/* The writer announces a frame over the oldest: gone. */
	for (int i = 0; i < 400; i++)
		publish(&x, 40);
	tb_retention_bounds(&x.ret, &epoch, &first, &last);
	assert_non_null(tb_ring_claim(&x.ring, 200, x.next));
	assert_int_equal(tb_retention_copy(&x.ret, first, 5, out, 8192, &len),
			 TB_STORE_TOO_OLD);
	tb_ring_abort(&x.ring);
	assert_int_equal(tb_retention_copy(&x.ret, first, 5, out, 8192, &len), 5);
	fixture_free(&x);
}

/* Bounds found from where they were last time agree with a search of
 * the whole range, round after round of overwriting. */
static void test_bounds_follow_the_ring(void **state)
{
	struct fixture x;
	uint64_t epoch, first, last;

	(void)state;
	fixture_init(&x, 100000);
	for (int round = 0; round < 50; round++) {
		uint64_t lo = 1;

		for (int i = 0; i < 97 + round * 13; i++)
			publish(&x, 40 + (uint32_t)((round + i) % 60));
		tb_retention_bounds(&x.ret, &epoch, &first, &last);
		while (lo <= last && tb_retention_read(&x.ret, lo, 1, on_frame_any,
						       NULL) != 1)
			lo++;
		assert_true(first == lo);
		assert_true(last == x.next - 1);
	}
	fixture_free(&x);
}

/* A window: what it holds follows the frames appended; a frame that does
 * not follow the last, or of another epoch, starts it again; a reader of
 * another epoch is told too old. */
static void test_window(void **state)
{
	tb_retention_window_t w;
	uint64_t buf[(TB_FRAME_HDR_LEN + 64) / 8];
	tb_frame_hdr_t *f = (tb_frame_hdr_t *)buf;
	uint64_t epoch, first, last;
	struct got g = {0};
	uint8_t out[4096];
	size_t len;

	(void)state;
	assert_int_equal(tb_retention_window_init(&w, 1000, 5), TB_EINVAL);
	assert_int_equal(tb_retention_window_init(&w, 64u << 10, 5), 0);
	tb_retention_window_bounds(&w, &epoch, &first, &last);
	assert_true(first == 0 && last == 0);
	for (uint64_t q = 1; q <= 100; q++) {
		frames_put(f, 5, q, 40, 1, q * 3, NULL);
		tb_retention_window_append(&w, 7, f);
	}
	tb_retention_window_bounds(&w, &epoch, &first, &last);
	assert_true(epoch == 7 && first == 1 && last == 100);
	assert_int_equal(tb_retention_window_read(&w, 7, 90, 100, on_frame, &g), 11);
	assert_int_equal(g.bad, 0);
	assert_int_equal(tb_retention_window_read(&w, 6, 90, 100, on_frame, &g),
			 TB_STORE_TOO_OLD);
	assert_int_equal(tb_retention_window_copy(&w, 7, 99, 10, out, sizeof(out),
						  &len), 2);
	/* A hole: it starts again at 150. */
	for (uint64_t q = 150; q <= 160; q++) {
		frames_put(f, 5, q, 40, 1, q * 3, NULL);
		tb_retention_window_append(&w, 7, f);
	}
	tb_retention_window_bounds(&w, &epoch, &first, &last);
	assert_true(first == 150 && last == 160);
	assert_int_equal(tb_retention_window_read(&w, 7, 100, 1, on_frame, &g),
			 TB_STORE_TOO_OLD);
	/* A new epoch, from 1 again. */
	frames_put(f, 5, 1, 40, 1, 3, NULL);
	tb_retention_window_append(&w, 8, f);
	tb_retention_window_bounds(&w, &epoch, &first, &last);
	assert_true(epoch == 8 && first == 1 && last == 1);
	assert_int_equal(tb_retention_window_copy(&w, 7, 150, 10, out, sizeof(out),
						  &len), TB_STORE_TOO_OLD);
	tb_retention_window_free(&w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_copy_into_an_answer),
		cmocka_unit_test(test_bounds_follow_the_ring),
		cmocka_unit_test(test_window),
		cmocka_unit_test(test_empty_and_last_n),
		cmocka_unit_test(test_ring_bounds_retention),
		cmocka_unit_test(test_frame_being_overwritten_is_refused),
		cmocka_unit_test(test_publisher_serves_retention),
		cmocka_unit_test(test_small_offers_are_kept_on_every_transport),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
