/*
 * The shared-memory ring through the public API: wrap and padding, laps with
 * exact loss ranges, late join, close, restart (new epoch), a dead
 * publisher, a corrupt file, and the claim/commit/abort contract.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/transport/shm.h"
#include <tickbus/tickbus.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char path[128];

static void cfg_for(tb_stream_cfg_t *cfg, uint64_t ring_size)
{
	tb_stream_cfg_init(cfg);
	snprintf(cfg->name, sizeof(cfg->name), "unit");
	cfg->id = 9;
	cfg->transport = TB_TRANSPORT_SHM;
	cfg->ring_size = ring_size;
	cfg->heartbeat_ms = 10;
	cfg->liveness_timeout_ms = 200;
	snprintf(cfg->shm_path, sizeof(cfg->shm_path), "%s", path);
}

static int setup(void **state)
{
	(void)state;
	snprintf(path, sizeof(path), "/dev/shm/tb-unit-shm.%d", (int)getpid());
	unlink(path);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unlink(path);
	return 0;
}

/* A message whose every byte is derived from its sequence number. */
static void fill(uint8_t *p, uint32_t len, uint64_t seq)
{
	uint32_t i;

	for (i = 0; i < len; i++)
		p[i] = (uint8_t)(seq * 131 + i);
}

struct sink {
	uint64_t count;
	uint64_t next;      /* expected seq; 0 = any */
	uint64_t bad;
	uint64_t last_len;
};

static void on_msg(void *clientd, const tb_msg_t *m)
{
	struct sink *s = clientd;
	uint8_t want[16384];

	if (s->next && m->seq != s->next)
		s->bad++;
	s->next = m->seq + 1;
	if (m->len > sizeof(want))
		s->bad++;
	else
		fill(want, m->len, m->seq);
	if (m->len > sizeof(want) || memcmp(want, m->data, m->len) != 0 ||
	    m->template_id != (uint16_t)m->seq || m->stream_id != 9)
		s->bad++;
	s->last_len = m->len;
	s->count++;
}

static int64_t offer(tb_publisher_t *pub, uint32_t len)
{
	uint8_t buf[4096];
	uint64_t seq = tb_pub_next_seq(pub);

	fill(buf, len, seq);
	return tb_pub_offer(pub, (uint16_t)seq, buf, len);
}

/* Polls until the result is neither 0 nor TB_NOT_CONNECTED, or the deadline
 * passes (returns 0). */
static int poll_until(tb_subscriber_t *sub, struct sink *s, int ms)
{
	struct timespec t0, t;
	int rc;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		rc = tb_sub_poll(sub, on_msg, s, 1000);
		if (rc != 0 && rc != TB_NOT_CONNECTED)
			return rc;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > ms)
			return 0;
		usleep(100);
	}
}

static void wrap_pads_and_delivers_everything(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	struct sink s = {0, 1, 0, 0};
	uint64_t i;

	(void)state;
	cfg_for(&cfg, 64 << 10);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(poll_until(sub, &s, 50), 0); /* attaches, nothing yet */
	/* Odd sizes so that the end of the ring is hit at every offset. */
	for (i = 1; i <= 20000; i++) {
		uint32_t len = (uint32_t)((i * 37) % 700);
		int64_t seq = offer(pub, len);

		assert_int_equal(seq, (int64_t)i);
		assert_int_equal(tb_sub_poll(sub, on_msg, &s, 100), 1);
		assert_int_equal(s.last_len, len);
	}
	/* About 7 MB went through a 64 KiB ring: it wrapped over a hundred
	 * times at ever different offsets. */
	assert_int_equal(s.count, 20000);
	assert_int_equal(s.bad, 0);
	assert_int_equal(tb_sub_next_seq(sub), 20001);
	tb_publisher_close(pub);
	tb_subscriber_close(sub);
}

static void frames_never_straddle_the_end(void **state)
{
	tb_stream_cfg_t cfg;
	tb_shm_writer_t w;
	uint64_t i;

	(void)state;
	cfg_for(&cfg, 64 << 10);
	assert_int_equal(tb_shm_writer_open(&w, &cfg, 1), 0);
	for (i = 1; i <= 5000; i++) {
		uint32_t len = (uint32_t)((i * 53) % 900);
		tb_ring_t *r = &w.tx.ring;
		uint64_t before = r->tail;
		tb_frame_hdr_t *f = tb_ring_claim(r, len, i);
		uint64_t off = (uint64_t)((uint8_t *)f - r->base);

		assert_non_null(f);
		assert_true(off + tb_frame_space(len + TB_FRAME_HDR_LEN) <= r->mask + 1);
		if ((before & r->mask) != off) { /* padded: check the pad frame */
			tb_frame_hdr_t *pad = tb_ring_at(r, before);

			assert_int_equal(off, 0);
			assert_int_equal(pad->type, TB_FRAME_PAD);
			assert_int_equal(pad->length, r->mask + 1 - (before & r->mask));
			assert_int_equal(pad->seq, i);
		}
		tb_frame_init(f, len, 1, 9, i, 0);
		tb_ring_commit(r);
	}
	tb_shm_writer_close(&w, 5000, 1);
}

static void lapped_reader_gets_exact_range_then_resumes(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	struct sink s = {0, 0, 0, 0};
	uint64_t first = 0, last = 0, i, before;
	int rc;

	(void)state;
	cfg_for(&cfg, 64 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	assert_int_equal(tb_sub_loss(sub, &first, &last), TB_ENOENT);
	for (i = 0; i < 10; i++)
		offer(pub, 100);
	assert_int_equal(tb_sub_poll(sub, on_msg, &s, 1000), 10);
	before = s.count;
	/* 5000 x 128 bytes is ten times the ring: the reader is lapped. */
	for (i = 0; i < 5000; i++)
		offer(pub, 96);
	rc = tb_sub_poll(sub, on_msg, &s, 1000);
	assert_int_equal(rc, 0); /* it notices and jumps to the live tail */
	assert_int_equal(s.count, before);
	offer(pub, 50); /* seq 5011 */
	rc = tb_sub_poll(sub, on_msg, &s, 1000);
	assert_int_equal(rc, TB_LAPPED);
	assert_int_equal(tb_sub_loss(sub, &first, &last), 0);
	assert_int_equal(first, 11);
	assert_int_equal(last, 5010);
	s.next = 5011;
	assert_int_equal(tb_sub_poll(sub, on_msg, &s, 1000), 1);
	assert_int_equal(s.bad, 0);
	assert_int_equal(tb_sub_next_seq(sub), 5012);
	tb_publisher_close(pub);
	tb_subscriber_close(sub);
}

static void lap_after_partial_read_loses_from_first_unread(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	struct sink s = {0, 0, 0, 0};
	uint64_t first = 0, last = 0, i;

	(void)state;
	cfg_for(&cfg, 64 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	for (i = 0; i < 100; i++)
		offer(pub, 200);
	assert_int_equal(tb_sub_poll(sub, on_msg, &s, 40), 40);
	for (i = 0; i < 2000; i++)
		offer(pub, 200);
	assert_int_equal(tb_sub_poll(sub, on_msg, &s, 1000), 0);
	offer(pub, 200);
	assert_int_equal(tb_sub_poll(sub, on_msg, &s, 1000), TB_LAPPED);
	assert_int_equal(tb_sub_loss(sub, &first, &last), 0);
	assert_int_equal(first, 41);
	assert_int_equal(last, 2100);
	s.next = 2101;
	assert_int_equal(tb_sub_poll(sub, on_msg, &s, 1000), 1);
	assert_int_equal(s.bad, 0);
	tb_publisher_close(pub);
	tb_subscriber_close(sub);
}

static void late_joiner_starts_live(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	struct sink s = {0, 11, 0, 0};
	int i;

	(void)state;
	cfg_for(&cfg, 64 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	for (i = 0; i < 10; i++)
		offer(pub, 8);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	assert_int_equal(tb_sub_poll(sub, on_msg, &s, 100), 0);
	for (i = 0; i < 5; i++)
		offer(pub, 8);
	assert_int_equal(tb_sub_poll(sub, on_msg, &s, 100), 5);
	assert_int_equal(s.bad, 0);
	assert_int_equal(tb_sub_next_seq(sub), 16);
	tb_publisher_close(pub);
	tb_subscriber_close(sub);
}

static void early_subscriber_waits_then_reads_from_one(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	struct sink s = {0, 1, 0, 0};
	int i;

	(void)state;
	cfg_for(&cfg, 64 << 10);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	assert_int_equal(tb_sub_poll(sub, on_msg, &s, 100), TB_NOT_CONNECTED);
	assert_int_equal(tb_sub_epoch(sub), 0);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	for (i = 0; i < 7; i++)
		offer(pub, 16);
	assert_int_equal(poll_until(sub, &s, 1000), 7);
	assert_int_equal(tb_sub_epoch(sub), tb_pub_epoch(pub));
	assert_int_equal(s.bad, 0);
	tb_publisher_close(pub);
	tb_subscriber_close(sub);
}

static void ring_left_closed_is_waited_past(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	struct sink s = {0, 1, 0, 0};

	(void)state;
	cfg_for(&cfg, 64 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	offer(pub, 8);
	tb_publisher_close(pub); /* the file stays, marked closed */
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	assert_int_equal(tb_sub_poll(sub, on_msg, &s, 100), TB_NOT_CONNECTED);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	offer(pub, 8);
	offer(pub, 8);
	/* The next publisher's epoch is read from its first message. */
	assert_int_equal(poll_until(sub, &s, 1000), 2);
	assert_int_equal(s.bad, 0);
	assert_int_equal(tb_sub_epoch(sub), tb_pub_epoch(pub));
	tb_publisher_close(pub);
	tb_subscriber_close(sub);
}

static void close_is_reported_after_the_last_frame(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	struct sink s = {0, 0, 0, 0};

	(void)state;
	cfg_for(&cfg, 64 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	offer(pub, 8);
	offer(pub, 8);
	tb_publisher_close(pub);
	assert_int_equal(poll_until(sub, &s, 1000), 2);
	assert_int_equal(poll_until(sub, &s, 1000), TB_CLOSED);
	assert_int_equal(poll_until(sub, &s, 50), 0); /* reported once */
	tb_subscriber_close(sub);
}

static void restart_is_a_new_epoch_from_one(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub, *pub2;
	tb_subscriber_t *sub;
	struct sink s = {0, 0, 0, 0};
	uint64_t epoch1;

	(void)state;
	cfg_for(&cfg, 64 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	epoch1 = tb_pub_epoch(pub);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	offer(pub, 8);
	assert_int_equal(poll_until(sub, &s, 1000), 1);
	/* A second live publisher on the same path is refused. */
	assert_int_equal(tb_publisher_open(&pub2, &cfg), TB_EBUSY);
	assert_non_null(strstr(tb_errmsg(), path));
	tb_publisher_close(pub);
	assert_int_equal(tb_publisher_open(&pub2, &cfg), 0);
	assert_true(tb_pub_epoch(pub2) != epoch1);
	offer(pub2, 8);
	offer(pub2, 8);
	/* Old ring: closed (or replaced), then the new epoch from seq 1. */
	{
		int rc = poll_until(sub, &s, 1000);

		if (rc == TB_CLOSED)
			rc = poll_until(sub, &s, 1000);
		assert_int_equal(rc, TB_NEW_EPOCH);
	}
	assert_int_equal(tb_sub_epoch(sub), tb_pub_epoch(pub2));
	s.next = 1;
	assert_int_equal(poll_until(sub, &s, 1000), 2);
	assert_int_equal(s.bad, 0);
	tb_publisher_close(pub2);
	tb_subscriber_close(sub);
}

static void killed_publisher_is_reported_dead(void **state)
{
	tb_stream_cfg_t cfg;
	tb_subscriber_t *sub;
	struct sink s = {0, 0, 0, 0};
	int pipefd[2], status;
	pid_t child;
	char c;

	(void)state;
	cfg_for(&cfg, 64 << 10);
	assert_int_equal(pipe(pipefd), 0);
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		tb_publisher_t *pub;

		if (tb_publisher_open(&pub, &cfg) != 0)
			_exit(1);
		offer(pub, 8);
		if (write(pipefd[1], "x", 1) != 1)
			_exit(1);
		pause(); /* until SIGKILL */
		_exit(0);
	}
	assert_int_equal(read(pipefd[0], &c, 1), 1);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	assert_int_equal(poll_until(sub, &s, 100), 0); /* alive: nothing */
	kill(child, SIGKILL);
	waitpid(child, &status, 0);
	assert_int_equal(poll_until(sub, &s, 3000), TB_PUBLISHER_DEAD);
	tb_subscriber_close(sub);
	close(pipefd[0]);
	close(pipefd[1]);
}

static void corrupt_file_is_refused_with_a_message(void **state)
{
	tb_stream_cfg_t cfg;
	tb_subscriber_t *sub;
	tb_shm_hdr_t hdr;
	FILE *f;

	(void)state;
	cfg_for(&cfg, 64 << 10);
	memset(&hdr, 0, sizeof(hdr));
	hdr.magic = TB_SHM_MAGIC;
	hdr.version = TB_SHM_VERSION + 7;
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(&hdr, sizeof(hdr), 1, f), 1);
	fclose(f);
	assert_int_equal(truncate(path, TB_SHM_HDR_SIZE + (64 << 10)), 0);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), TB_EFORMAT);
	assert_null(sub);
	assert_non_null(strstr(tb_errmsg(), "format version 8"));
	/* Right version, wrong ring size for the file. */
	hdr.version = TB_SHM_VERSION;
	hdr.hdr_size = TB_SHM_HDR_SIZE;
	hdr.ring_size = 1 << 20;
	hdr.stream_id = 9;
	f = fopen(path, "r+");
	assert_non_null(f);
	assert_int_equal(fwrite(&hdr, sizeof(hdr), 1, f), 1);
	fclose(f);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), TB_EFORMAT);
}

/* A reader attached to a ring in memory that the test writes by hand, as
 * a corrupt or hostile writer could: the header, a 64 KiB ring, the
 * reader's frame buffer. */
struct hand_ring {
	tb_shm_hdr_t *hdr;
	uint8_t *ring;
	tb_shm_reader_t r;
	tb_seq_t seq;
};

static void hand_ring_open(struct hand_ring *h, uint64_t pos, uint64_t expected)
{
	const uint64_t size = 64 << 10;

	h->hdr = aligned_alloc(64, sizeof(*h->hdr));
	h->ring = aligned_alloc(64, size);
	assert_non_null(h->hdr);
	assert_non_null(h->ring);
	memset(h->hdr, 0, sizeof(*h->hdr));
	memset(h->ring, 0, size);
	memset(&h->r, 0, sizeof(h->r));
	h->hdr->ring_size = size;
	h->hdr->state = TB_SHM_OPEN;
	h->r.hdr = h->hdr;
	h->r.ring = h->ring;
	h->r.mask = size - 1;
	h->r.max_frame = (uint32_t)(size / 8);
	h->r.scratch = malloc(h->r.max_frame);
	assert_non_null(h->r.scratch);
	h->r.state = TB_SHM_R_ATTACHED;
	h->r.stream_id = 9;
	h->r.pos = pos;
	tb_seq_init(&h->seq, expected);
}

/* Writes a data frame of 16 bytes with sequence `seq` at ring offset
 * `off`; returns the space it takes. */
static uint32_t hand_frame(struct hand_ring *h, uint64_t off, uint64_t seq)
{
	tb_frame_hdr_t f;

	tb_frame_init(&f, 16, (uint16_t)seq, 9, seq, 0);
	memcpy(h->ring + off, &f, sizeof(f));
	fill(h->ring + off + TB_FRAME_HDR_LEN, 16, seq);
	return tb_frame_space(f.length);
}

static void hand_ring_close(struct hand_ring *h)
{
	free(h->r.scratch);
	free(h->ring);
	free(h->hdr);
}

/* The writer pads only from a frame that would straddle the end up to the
 * end (ring.h), so a padding frame that stops short of the end is
 * corruption: the reader resynchronises at the tail, as for any frame that
 * does not check, and delivers nothing after it.  Found by fuzz_shm: a pad
 * of an odd length (40) moved the reader to a misaligned position, and it
 * read the next "frame" there (UBSan: misaligned tb_frame_hdr_t access in
 * tb_shm_reader_poll); one of an aligned length (64) let it skip to bytes
 * the writer never put a frame at. */
static void pad_short_of_the_end_is_corruption(void **state)
{
	static const uint32_t pads[] = {40, 64};
	struct hand_ring h;
	tb_seq_range_t loss;
	struct sink s;
	uint64_t tail;

	(void)state;
	for (size_t i = 0; i < sizeof(pads) / sizeof(pads[0]); i++) {
		hand_ring_open(&h, 0, 1);
		tb_frame_init_pad((tb_frame_hdr_t *)h.ring, pads[i], 9, 1);
		tail = pads[i] + hand_frame(&h, pads[i], 1);
		h.hdr->tail = h.hdr->tail_intent = tail;
		memset(&s, 0, sizeof(s));
		s.next = 1;
		assert_int_equal(tb_shm_reader_poll(&h.r, &h.seq, &loss, on_msg,
						    &s, 16), 0);
		assert_int_equal(s.count, 0);
		assert_int_equal(h.r.pos, tail); /* resynchronised at the tail */
		hand_ring_close(&h);
	}

	/* The pad the writer does write, up to the end, is stepped over. */
	hand_ring_open(&h, (64 << 10) - 64, 1);
	tb_frame_init_pad((tb_frame_hdr_t *)(h.ring + (64 << 10) - 64), 64, 9, 1);
	tail = (64 << 10) + hand_frame(&h, 0, 1);
	h.hdr->tail = h.hdr->tail_intent = tail;
	memset(&s, 0, sizeof(s));
	s.next = 1;
	assert_int_equal(tb_shm_reader_poll(&h.r, &h.seq, &loss, on_msg, &s, 16),
			 1);
	assert_int_equal(s.count, 1);
	assert_int_equal(s.bad, 0);
	hand_ring_close(&h);
}

static void claim_commit_abort(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	struct sink s = {0, 1, 0, 0};
	tb_claim_t c;
	uint8_t big[16384];

	(void)state;
	cfg_for(&cfg, 64 << 10);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(tb_pub_claim(pub, 1, 40, &c), 0);
	assert_int_equal(c.seq, 1);
	assert_int_equal(tb_pub_offer(pub, 1, "x", 1), TB_ESTATE);
	assert_int_equal(tb_pub_abort(pub, &c), 0);
	assert_int_equal(tb_pub_next_seq(pub), 1); /* not consumed */
	assert_int_equal(tb_pub_claim(pub, 1, 40, &c), 0);
	fill(c.data, 40, c.seq);
	assert_int_equal(tb_pub_commit(pub, &c), 1);
	assert_int_equal(tb_pub_commit(pub, &c), TB_ESTATE);
	/* An eighth of the ring is the largest frame. */
	fill(big, sizeof(big), 2);
	assert_int_equal(tb_pub_offer(pub, 2, big, sizeof(big)), TB_EMSGSIZE);
	assert_int_equal(tb_pub_offer(pub, 2, big, 8192 - 32), 2);
	assert_int_equal(poll_until(sub, &s, 1000), 2);
	assert_int_equal(s.bad, 0);
	tb_publisher_close(pub);
	tb_subscriber_close(sub);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(wrap_pads_and_delivers_everything, setup, teardown),
		cmocka_unit_test_setup_teardown(frames_never_straddle_the_end, setup, teardown),
		cmocka_unit_test_setup_teardown(lapped_reader_gets_exact_range_then_resumes, setup, teardown),
		cmocka_unit_test_setup_teardown(lap_after_partial_read_loses_from_first_unread, setup, teardown),
		cmocka_unit_test_setup_teardown(late_joiner_starts_live, setup, teardown),
		cmocka_unit_test_setup_teardown(early_subscriber_waits_then_reads_from_one, setup, teardown),
		cmocka_unit_test_setup_teardown(ring_left_closed_is_waited_past, setup, teardown),
		cmocka_unit_test_setup_teardown(close_is_reported_after_the_last_frame, setup, teardown),
		cmocka_unit_test_setup_teardown(restart_is_a_new_epoch_from_one, setup, teardown),
		cmocka_unit_test_setup_teardown(killed_publisher_is_reported_dead, setup, teardown),
		cmocka_unit_test_setup_teardown(corrupt_file_is_refused_with_a_message, setup, teardown),
		cmocka_unit_test_setup_teardown(claim_commit_abort, setup, teardown),
		cmocka_unit_test(pad_short_of_the_end_is_corruption),
	};
	return cmocka_run_group_tests_name("transport_shm", tests, NULL, NULL);
}
