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

/* An shm publisher does not know who reads its ring: it says so rather
 * than answer 0. */
static void shm_does_not_count_its_subscribers(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	struct sink s = {0, 1, 0, 0};

	(void)state;
	cfg_for(&cfg, 64 << 10);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(poll_until(sub, &s, 50), 0);
	assert_int_equal(tb_pub_subscribers(pub), TB_ENOTSUP);
	assert_non_null(strstr(tb_errmsg(), "shm stream does not know"));
	/* Asking changed nothing: the stream goes on. */
	assert_int_equal(offer(pub, 64), 1);
	assert_int_equal(tb_sub_poll(sub, on_msg, &s, 10), 1);
	tb_publisher_close(pub);
	tb_subscriber_close(sub);
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
	/* Old ring: closed (or replaced), then the new epoch from seq 1.  An
	 * idle reader looks for a replaced ring once in 256 polls; this one
	 * sleeps 100 us between polls, which a loaded machine stretched past
	 * a second (load 10): the bound is generous, not the wait. */
	{
		int rc = poll_until(sub, &s, 10000);

		if (rc == TB_CLOSED)
			rc = poll_until(sub, &s, 10000);
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

/* ------------------------------------------------ loss that must be told */

/* The ring of the file at `path`, mapped writable: the test plays a
 * faulty writer or a stray write. */
static uint8_t *map_ring(size_t *len)
{
	struct stat st;
	int fd = open(path, O_RDWR);
	uint8_t *base;

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED,
		    fd, 0);
	close(fd);
	assert_true(base != MAP_FAILED);
	*len = (size_t)st.st_size;
	return base;
}

/* The frame of `seq`, walking from the start of a ring that has not
 * wrapped. */
static tb_frame_hdr_t *frame_of(uint8_t *base, uint64_t seq)
{
	uint8_t *ring = base + TB_SHM_HDR_SIZE;
	uint64_t off = 0;

	for (;;) {
		tb_frame_hdr_t *f = (tb_frame_hdr_t *)(ring + off);

		assert_true(f->seq != 0);
		if (f->seq == seq && f->type == TB_FRAME_DATA)
			return f;
		off += tb_frame_space(f->length);
	}
}

/* Every sequence 1..last either delivered once in order or in exactly one
 * reported range: `s` saw the deliveries, `lost` counts what was reported,
 * `s->next` is where delivery stands. */
struct ledger {
	struct sink s;
	uint64_t lost;
	int reports;
};

/* Polls until a condition or `want` messages in all; a condition must be a
 * loss whose range starts exactly where delivery stands.  Returns the last
 * result. */
static int drain(tb_subscriber_t *sub, struct ledger *l, uint64_t want, int ms)
{
	uint64_t t0 = tb_clock_mono_ms();
	int rc = 0;

	while (l->s.count + l->lost < want) {
		rc = tb_sub_poll(sub, on_msg, &l->s, 1000);
		if (rc == TB_LAPPED || rc == TB_GAP) {
			uint64_t first, last;

			assert_int_equal(tb_sub_loss(sub, &first, &last), 0);
			assert_int_equal(first, l->s.next);
			assert_true(last >= first);
			l->lost += last - first + 1;
			l->s.next = last + 1;
			l->reports++;
		} else if (rc < 0) {
			fail_msg("poll: %s", tb_strerror(rc));
		}
		if (tb_clock_mono_ms() - t0 > (uint64_t)ms)
			break;
	}
	return rc;
}

/* A reader lapped in a burst after which the stream stays quiet is told on
 * its next poll, with the exact range; lapped again before it reads a
 * single frame past that point, it is told again. */
static void lapped_on_a_quiet_stream_is_told_at_once_and_again(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	uint64_t first, last, i;

	(void)state;
	cfg_for(&cfg, 64 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	for (i = 0; i < 10; i++)
		offer(pub, 100);
	{
		struct sink s = {0, 1, 0, 0};

		assert_int_equal(tb_sub_poll(sub, on_msg, &s, 1000), 10);
	}
	for (i = 0; i < 3000; i++) /* six rings, then nothing */
		offer(pub, 96);
	assert_int_equal(tb_sub_poll(sub, on_msg, NULL, 1000), TB_LAPPED);
	assert_int_equal(tb_sub_loss(sub, &first, &last), 0);
	assert_int_equal(first, 11);
	assert_int_equal(last, 3010);
	for (i = 0; i < 3000; i++) /* lapped again before reading a frame */
		offer(pub, 96);
	assert_int_equal(tb_sub_poll(sub, on_msg, NULL, 1000), TB_LAPPED);
	assert_int_equal(tb_sub_loss(sub, &first, &last), 0);
	assert_int_equal(first, 3011);
	assert_int_equal(last, 6010);
	/* Nothing more is pending: the stream is quiet. */
	assert_int_equal(tb_sub_poll(sub, on_msg, NULL, 1000), 0);
	{
		struct sink s = {0, 6011, 0, 0};

		offer(pub, 8);
		assert_int_equal(tb_sub_poll(sub, on_msg, &s, 1000), 1);
		assert_int_equal(s.bad, 0);
	}
	tb_publisher_close(pub);
	tb_subscriber_close(sub);
}

/* One sequence number corrupted to a far-future value (a forward jump a
 * single writer cannot make): that frame is reported, exactly, and the
 * rest of the stream is delivered, not skipped as duplicates.  The same
 * for a jump backwards. */
static void corrupt_sequence_is_reported_not_taken_for_a_gap(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	struct ledger l = {{0, 1, 0, 0}, 0, 0};
	uint64_t first, last, i;
	size_t len;
	uint8_t *base;

	(void)state;
	cfg_for(&cfg, 64 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	for (i = 0; i < 20; i++)
		offer(pub, 40);
	assert_int_equal(tb_sub_poll(sub, on_msg, &l.s, 5), 5);
	base = map_ring(&len);
	frame_of(base, 7)->seq = 7 + 1000000;
	frame_of(base, 12)->seq = 3;
	assert_int_equal(tb_sub_poll(sub, on_msg, &l.s, 1000), 1); /* 6 */
	assert_int_equal(tb_sub_poll(sub, on_msg, &l.s, 1000), TB_GAP);
	assert_int_equal(tb_sub_loss(sub, &first, &last), 0);
	assert_int_equal(first, 7);
	assert_int_equal(last, 7);
	l.s.next = 8;
	assert_int_equal(tb_sub_poll(sub, on_msg, &l.s, 1000), 4); /* 8..11 */
	assert_int_equal(tb_sub_poll(sub, on_msg, &l.s, 1000), TB_GAP);
	assert_int_equal(tb_sub_loss(sub, &first, &last), 0);
	assert_int_equal(first, 12);
	assert_int_equal(last, 12);
	l.s.next = 13;
	assert_int_equal(tb_sub_poll(sub, on_msg, &l.s, 1000), 8); /* 13..20 */
	for (i = 0; i < 20; i++)
		offer(pub, 40);
	assert_int_equal(tb_sub_poll(sub, on_msg, &l.s, 1000), 20);
	assert_int_equal(l.s.bad, 0);
	assert_int_equal(tb_sub_next_seq(sub), 41);
	munmap(base, len);
	tb_publisher_close(pub);
	tb_subscriber_close(sub);
}

/* The last frame before the stream goes quiet is the corrupt one: told
 * at once, not when (if ever) another frame comes. */
static void corrupt_last_frame_is_told_at_once(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	struct sink s = {0, 1, 0, 0};
	uint64_t first, last;
	size_t len;
	uint8_t *base;

	(void)state;
	cfg_for(&cfg, 64 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	for (int i = 0; i < 6; i++)
		offer(pub, 40);
	base = map_ring(&len);
	frame_of(base, 6)->seq = 1u << 30;
	assert_int_equal(tb_sub_poll(sub, on_msg, &s, 1000), 5);
	assert_int_equal(tb_sub_poll(sub, on_msg, &s, 1000), TB_GAP);
	assert_int_equal(tb_sub_loss(sub, &first, &last), 0);
	assert_int_equal(first, 6);
	assert_int_equal(last, 6);
	assert_int_equal(tb_sub_poll(sub, on_msg, &s, 1000), 0);
	s.next = 7;
	offer(pub, 40);
	assert_int_equal(tb_sub_poll(sub, on_msg, &s, 1000), 1);
	assert_int_equal(s.bad, 0);
	munmap(base, len);
	tb_publisher_close(pub);
	tb_subscriber_close(sub);
}

/* A corrupt length leaves no frame boundary to go on from: what the writer
 * says it published (its heartbeat) is reported within a few beats although
 * the stream is quiet; when it publishes again, the reader resynchronises
 * at its next mark and reports exactly what lies between.  Every sequence
 * is delivered once or reported once. */
static void corrupt_length_is_resynchronised_and_told(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	struct ledger l = {{0, 1, 0, 0}, 0, 0};
	uint64_t t0, i;
	size_t len;
	uint8_t *base;
	int rc;

	(void)state;
	cfg_for(&cfg, 64 << 10); /* heartbeat 10 ms */
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	for (i = 0; i < 5; i++)
		offer(pub, 40);
	assert_int_equal(tb_sub_poll(sub, on_msg, &l.s, 3), 3);
	base = map_ring(&len);
	frame_of(base, 4)->length = 7; /* below a header: no way past it */
	t0 = tb_clock_mono_ms();
	rc = drain(sub, &l, 5, 2000);
	assert_int_equal(rc, TB_GAP);
	assert_int_equal(l.s.count + l.lost, 5);
	assert_true(tb_clock_mono_ms() - t0 < 1000); /* a few 10 ms beats */
	/* A chunk (2 KiB) and more: the writer marks a boundary past it. */
	for (i = 0; i < 200; i++)
		offer(pub, 40);
	drain(sub, &l, 205, 5000);
	assert_int_equal(l.s.count + l.lost, 205);
	assert_int_equal(l.s.bad, 0);
	assert_true(l.s.count > 3); /* resumed at a mark, not at the end */
	munmap(base, len);
	tb_publisher_close(pub);
	tb_subscriber_close(sub);
}

/* A padding frame that stops short of the ring's end: the writer pads
 * only up to the end (ring.h), so this one is corruption, told like a
 * corrupt length, never stepped over as if the ring ended there. */
static void pad_short_of_the_end_is_corruption(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	struct ledger l = {{0, 1, 0, 0}, 0, 0};
	tb_frame_hdr_t *f;
	uint64_t i;
	size_t len;
	uint8_t *base;

	(void)state;
	cfg_for(&cfg, 64 << 10);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	for (i = 0; i < 5; i++)
		offer(pub, 40);
	assert_int_equal(tb_sub_poll(sub, on_msg, &l.s, 2), 2);
	base = map_ring(&len);
	f = frame_of(base, 3);
	f->type = TB_FRAME_PAD; /* its own length: far short of the end */
	assert_int_equal(drain(sub, &l, 5, 2000), TB_GAP);
	assert_int_equal(l.s.count + l.lost, 5);
	assert_true(l.lost >= 1); /* frame 3 at least, told */
	assert_int_equal(l.s.bad, 0);
	munmap(base, len);
	tb_publisher_close(pub);
	tb_subscriber_close(sub);
}

/* A handler that publishes the next message itself, so that one poll
 * reaches frames published after it first read the clock. */
struct echo {
	tb_publisher_t *pub;
	uint64_t count, early; /* messages; received before published */
};

static void on_msg_publish_more(void *clientd, const tb_msg_t *m)
{
	struct echo *e = clientd;

	e->count++;
	if (m->receive_ns < m->publish_ns)
		e->early++;
	if (e->count < 8) {
		uint64_t t0 = tb_clock_now_ns();

		while (tb_clock_now_ns() - t0 < 20000)
			; /* 20 us: the next one is clearly later */
		assert_true(offer(e->pub, 40) > 0);
	}
}

/* The reader reads the clock once per poll, yet no message is received
 * before it was published: a poll that reaches a frame published after
 * its clock read reads the clock again. */
static void receive_time_never_precedes_publish_time(void **state)
{
	tb_stream_cfg_t cfg;
	tb_subscriber_t *sub;
	struct echo e = {0};

	(void)state;
	cfg_for(&cfg, 64 << 10);
	assert_int_equal(tb_publisher_open(&e.pub, &cfg), 0);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	assert_true(offer(e.pub, 40) > 0);
	assert_int_equal(tb_sub_poll(sub, on_msg_publish_more, &e, 64), 8);
	assert_int_equal(e.count, 8);
	assert_int_equal(e.early, 0);
	tb_publisher_close(e.pub);
	tb_subscriber_close(sub);
}

/* ---------------------------------------------------- format versions */

/* The first 64 bytes of a format 1 header: magic, version, sizes. */
struct v1_hdr {
	uint64_t magic;
	uint32_t version, hdr_size;
	uint64_t ring_size, epoch;
	uint32_t stream_id;
	int32_t pid;
	uint64_t start_ns;
	uint32_t max_frame;
};

/* Format 1's acceptance test, as its readers apply it (first the version). */
static int v1_reader_accepts(const struct v1_hdr *h)
{
	return h->version == 1 && h->magic == TB_SHM_MAGIC &&
	       h->hdr_size == 4096;
}

static void format_versions_refuse_each_other(void **state)
{
	tb_stream_cfg_t cfg;
	tb_subscriber_t *sub;
	tb_publisher_t *pub;
	uint8_t page[TB_SHM_HDR_SIZE];
	struct v1_hdr v1;
	FILE *f;

	(void)state;
	cfg_for(&cfg, 64 << 10);
	/* A format 1 ring, live (this process, beating now): a format 2
	 * reader refuses it by its version; a format 2 publisher does not
	 * take the path over from a live format 1 publisher. */
	memset(page, 0, sizeof(page));
	memset(&v1, 0, sizeof(v1));
	v1.magic = TB_SHM_MAGIC;
	v1.version = 1;
	v1.hdr_size = 4096;
	v1.ring_size = 64 << 10;
	v1.stream_id = 9;
	v1.pid = (int32_t)getpid();
	v1.max_frame = 8192;
	memcpy(page, &v1, sizeof(v1));
	{
		uint64_t beat = tb_clock_now_ns();
		uint32_t open_state = 1;

		memcpy(page + 256, &beat, 8);       /* format 1 heartbeat_ns */
		memcpy(page + 264, &open_state, 4); /* format 1 state OPEN */
	}
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(page, sizeof(page), 1, f), 1);
	fclose(f);
	assert_int_equal(chmod(path, 0600), 0);
	assert_int_equal(truncate(path, TB_SHM_HDR_SIZE + (64 << 10)), 0);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), TB_EFORMAT);
	assert_non_null(strstr(tb_errmsg(), "format version 1, this reader reads 2"));
	assert_int_equal(tb_publisher_open(&pub, &cfg), TB_EBUSY);
	assert_non_null(strstr(tb_errmsg(), "format 1"));
	unlink(path);

	/* A format 2 ring: the version a format 1 reader checks first says
	 * 2, so it refuses it. */
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	f = fopen(path, "r");
	assert_non_null(f);
	assert_int_equal(fread(&v1, sizeof(v1), 1, f), 1);
	fclose(f);
	assert_int_equal(v1.magic, TB_SHM_MAGIC);
	assert_int_equal(v1.version, 2);
	assert_false(v1_reader_accepts(&v1));
	tb_publisher_close(pub);
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
		cmocka_unit_test_setup_teardown(shm_does_not_count_its_subscribers, setup, teardown),
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
		cmocka_unit_test_setup_teardown(lapped_on_a_quiet_stream_is_told_at_once_and_again, setup, teardown),
		cmocka_unit_test_setup_teardown(corrupt_sequence_is_reported_not_taken_for_a_gap, setup, teardown),
		cmocka_unit_test_setup_teardown(corrupt_last_frame_is_told_at_once, setup, teardown),
		cmocka_unit_test_setup_teardown(corrupt_length_is_resynchronised_and_told, setup, teardown),
		cmocka_unit_test_setup_teardown(format_versions_refuse_each_other, setup, teardown),
		cmocka_unit_test_setup_teardown(claim_commit_abort, setup, teardown),
		cmocka_unit_test_setup_teardown(pad_short_of_the_end_is_corruption, setup, teardown),
		cmocka_unit_test_setup_teardown(receive_time_never_precedes_publish_time, setup, teardown),
	};
	return cmocka_run_group_tests_name("transport_shm", tests, NULL, NULL);
}
