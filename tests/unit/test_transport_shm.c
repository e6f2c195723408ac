/*
 * The shared-memory ring through the public API: wrap and padding, laps with
 * exact loss ranges told on the poll that finds them (also on a stream gone
 * quiet, and again when lapped again), frames the single writer could not
 * have written (corruption: reported exactly, never taken for duplicates),
 * late join, close, restart (new epoch), a dead publisher, a corrupt file,
 * the format version both ways, and the claim/commit/abort contract.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/transport/shm.h"
#include <tickbus/tickbus.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
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
		/* Not committed: no sequence word yet where a reader looks
		 * (the previous commit zeroed it). */
		assert_int_equal(tb_ring_at(r, before)->seq, 0);
		tb_frame_init_body(f, len, 1, 9, 0);
		tb_ring_commit(r);
		assert_int_equal(f->seq, i);
		/* The next frame's word is zero again, ready to be polled. */
		assert_int_equal(tb_ring_at(r, r->tail)->seq, 0);
		if ((before & r->mask) != off) { /* padded: check the pad frame */
			tb_frame_hdr_t *pad = tb_ring_at(r, before);

			assert_int_equal(off, 0);
			assert_int_equal(pad->type, TB_FRAME_PAD);
			assert_int_equal(pad->length, r->mask + 1 - (before & r->mask));
			assert_int_equal(pad->seq, i);
		}
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
	/* 5000 x 128 bytes is ten times the ring: the reader is lapped.  It
	 * is told on the very poll that finds it, with the exact range (up
	 * to the live end), although nothing more is published. */
	for (i = 0; i < 5000; i++)
		offer(pub, 96);
	rc = tb_sub_poll(sub, on_msg, &s, 1000);
	assert_int_equal(rc, TB_LAPPED);
	assert_int_equal(s.count, before);
	assert_int_equal(tb_sub_loss(sub, &first, &last), 0);
	assert_int_equal(first, 11);
	assert_int_equal(last, 5010);
	assert_int_equal(tb_sub_poll(sub, on_msg, &s, 1000), 0);
	offer(pub, 50); /* seq 5011 */
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
	assert_int_equal(tb_sub_poll(sub, on_msg, &s, 1000), TB_LAPPED);
	assert_int_equal(tb_sub_loss(sub, &first, &last), 0);
	assert_int_equal(first, 41);
	assert_int_equal(last, 2100);
	offer(pub, 200);
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
	hdr.version = 8;
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(&hdr, sizeof(hdr), 1, f), 1);
	fclose(f);
	assert_int_equal(chmod(path, 0600), 0);
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
	};
	return cmocka_run_group_tests_name("transport_shm", tests, NULL, NULL);
}
