/*
 * Loss on shm is never silent, and is told within one heartbeat: a
 * publisher in a process of its own, driven by this test over a pipe, and
 * this process subscribing through the public API.
 *
 *  - a reader lapped during a burst after which the stream goes quiet is
 *    told at once (within a heartbeat, measured from the end of the burst),
 *    with the exact range; lapped again before it reads a frame past its
 *    resynchronisation point, it is told again;
 *  - a corrupt length (no frame boundary left to go on from) on a stream
 *    that then goes quiet is told within a heartbeat and a margin, from the
 *    writer's own heartbeat;
 *  - with recovery configured (a recovery service in this process that
 *    holds the whole stream), the same lap and a corrupt sequence number
 *    are recovered instead: every sequence delivered once, in order, with
 *    its payload, none reported.
 *
 * Times are bounds with generous margins (a heartbeat of 200 ms against a
 * report that takes microseconds), never measurements of speed.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <tickbus/tickbus.h>

#include "bus/recovery/server.h"
#include "bus/transport/shm.h"
#include "tests/common/recovery_src.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define HEARTBEAT_MS 200u
#define PAYLOAD 24u

static char path[128];

static void cfg_for(tb_stream_cfg_t *cfg)
{
	tb_stream_cfg_init(cfg);
	snprintf(cfg->name, sizeof(cfg->name), "loss");
	cfg->id = 21;
	cfg->transport = TB_TRANSPORT_SHM;
	cfg->ring_size = 64 << 10; /* easy to lap */
	cfg->heartbeat_ms = HEARTBEAT_MS;
	cfg->liveness_timeout_ms = 10 * HEARTBEAT_MS;
	snprintf(cfg->shm_path, sizeof(cfg->shm_path), "%s", path);
}

static int setup(void **state)
{
	(void)state;
	snprintf(path, sizeof(path), "/dev/shm/tb-test-shm-loss.%d", (int)getpid());
	unlink(path);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unlink(path);
	return 0;
}

/* ------------------------------------------------- the publisher process */

struct pub {
	pid_t pid;
	int cmd, ack; /* our ends of the two pipes */
	uint64_t epoch, last;
};

/* In the child: publishes what it is told, answers with the last sequence
 * published (the epoch first), exits when told 0.  Payload: frames.h's
 * (every byte the sequence's low byte), template 1, so that a recovery
 * source can make the same frames. */
static void pub_main(const tb_stream_cfg_t *cfg, int cmd, int ack)
{
	tb_publisher_t *p;
	uint8_t buf[PAYLOAD];
	uint64_t n, last = 0;

	if (tb_publisher_open(&p, cfg) < 0)
		_exit(1);
	n = tb_pub_epoch(p);
	if (write(ack, &n, sizeof(n)) != sizeof(n))
		_exit(1);
	while (read(cmd, &n, sizeof(n)) == sizeof(n) && n > 0) {
		for (uint64_t i = 0; i < n; i++) {
			frames_fill_seq(buf, sizeof(buf), tb_pub_next_seq(p));
			if (tb_pub_offer(p, 1, buf, sizeof(buf)) < 0)
				_exit(2);
		}
		last = tb_pub_next_seq(p) - 1;
		if (write(ack, &last, sizeof(last)) != sizeof(last))
			_exit(1);
	}
	tb_publisher_close(p);
	_exit(0);
}

static void pub_start(struct pub *p, const tb_stream_cfg_t *cfg)
{
	int c[2], a[2];

	assert_int_equal(pipe(c), 0);
	assert_int_equal(pipe(a), 0);
	p->pid = fork();
	assert_true(p->pid >= 0);
	if (p->pid == 0) {
		close(c[1]);
		close(a[0]);
		alarm(120); /* never outlive a failed test */
		pub_main(cfg, c[0], a[1]);
	}
	close(c[0]);
	close(a[1]);
	p->cmd = c[1];
	p->ack = a[0];
	assert_int_equal(read(p->ack, &p->epoch, sizeof(p->epoch)),
			 sizeof(p->epoch));
	p->last = 0;
}

/* Publishes n messages in the child; returns when they are all out. */
static void pub_send(struct pub *p, uint64_t n)
{
	assert_int_equal(write(p->cmd, &n, sizeof(n)), sizeof(n));
	assert_int_equal(read(p->ack, &p->last, sizeof(p->last)),
			 sizeof(p->last));
}

static void pub_stop(struct pub *p)
{
	uint64_t zero = 0;
	int status;

	assert_int_equal(write(p->cmd, &zero, sizeof(zero)), sizeof(zero));
	assert_int_equal(waitpid(p->pid, &status, 0), p->pid);
	close(p->cmd);
	close(p->ack);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* ------------------------------------------------------- the subscriber */

struct got {
	uint64_t next, n, replayed, bad;
};

static void on_msg(void *cd, const tb_msg_t *m)
{
	struct got *g = cd;
	const uint8_t *p = m->data;

	if (m->seq != g->next)
		g->bad++;
	if (m->len != PAYLOAD || p[0] != (uint8_t)m->seq ||
	    p[PAYLOAD - 1] != (uint8_t)m->seq || m->template_id != 1)
		g->bad++;
	if (m->flags & TB_MSG_F_REPLAY)
		g->replayed++;
	g->next = m->seq + 1;
	g->n++;
}

/* Polls (spin, then yield) until a result other than 0 or a delivery
 * reaching `until_seq`, at most `ms`.  Returns the last result, and in
 * *elapsed_ms how long it took. */
static int poll_for(tb_subscriber_t *sub, struct got *g, uint64_t until_seq,
		    uint64_t ms, uint64_t *elapsed_ms)
{
	uint64_t t0 = tb_clock_mono_ms();
	tb_idle_t idle;
	int rc = 0;

	tb_idle_init(&idle, TB_IDLE_SPIN_YIELD);
	while (tb_clock_mono_ms() - t0 <= ms) {
		rc = tb_sub_poll(sub, on_msg, g, 256);
		if (rc < 0 && rc != TB_NOT_CONNECTED)
			break;
		if (until_seq && g->next > until_seq)
			break;
		tb_idle_step(&idle, rc > 0 ? rc : 0);
	}
	*elapsed_ms = tb_clock_mono_ms() - t0;
	return rc;
}

/* ------------------------------------------------------------- the tests */

static void lapped_in_a_burst_then_quiet_is_told_within_a_heartbeat(void **state)
{
	tb_stream_cfg_t cfg;
	tb_subscriber_t *sub;
	struct got g = {1, 0, 0, 0};
	struct pub p;
	uint64_t first, last, ms;

	(void)state;
	cfg_for(&cfg);
	pub_start(&p, &cfg);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	pub_send(&p, 10);
	assert_int_equal(poll_for(sub, &g, 10, 10000, &ms), 10);
	assert_int_equal(g.next, 11);

	/* 3,000 frames of 64 bytes: three rings.  Then nothing. */
	pub_send(&p, 3000);
	assert_int_equal(poll_for(sub, &g, 0, 10 * HEARTBEAT_MS, &ms), TB_LAPPED);
	print_message("lap told %llu ms after the burst\n", (unsigned long long)ms);
	assert_true(ms <= HEARTBEAT_MS);
	assert_int_equal(tb_sub_loss(sub, &first, &last), 0);
	assert_int_equal(first, 11);
	assert_int_equal(last, p.last);

	/* Lapped again before a single frame past that point. */
	pub_send(&p, 3000);
	assert_int_equal(poll_for(sub, &g, 0, 10 * HEARTBEAT_MS, &ms), TB_LAPPED);
	assert_true(ms <= HEARTBEAT_MS);
	assert_int_equal(tb_sub_loss(sub, &first, &last), 0);
	assert_int_equal(first, 3011);
	assert_int_equal(last, p.last);

	/* And on: the next frames are delivered. */
	g.next = p.last + 1;
	pub_send(&p, 10);
	poll_for(sub, &g, p.last, 10000, &ms);
	assert_int_equal(g.next, p.last + 1);
	assert_int_equal(g.n, 20);
	assert_int_equal(g.bad, 0);
	tb_subscriber_close(sub);
	pub_stop(&p);
}

/* The frame of `seq` in the ring file, walking from the start of a ring
 * that has not wrapped; the file mapped writable in *base. */
static tb_frame_hdr_t *frame_in_file(uint64_t seq, uint8_t **base, size_t *len)
{
	struct stat st;
	int fd = open(path, O_RDWR);
	uint64_t off = 0;

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	*len = (size_t)st.st_size;
	*base = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	assert_true(*base != MAP_FAILED);
	for (;;) {
		tb_frame_hdr_t *f =
			(tb_frame_hdr_t *)(*base + TB_SHM_HDR_SIZE + off);

		assert_true(f->seq != 0);
		if (f->seq == seq && f->type == TB_FRAME_DATA)
			return f;
		off += tb_frame_space(f->length);
	}
}

static void corrupt_length_on_a_quiet_stream_is_told_from_the_heartbeat(void **state)
{
	tb_stream_cfg_t cfg;
	tb_subscriber_t *sub;
	struct got g = {1, 0, 0, 0};
	struct pub p;
	uint64_t first, last, ms;
	uint8_t *base;
	size_t len;

	(void)state;
	cfg_for(&cfg);
	pub_start(&p, &cfg);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	pub_send(&p, 3);
	assert_int_equal(poll_for(sub, &g, 3, 10000, &ms), 3);
	pub_send(&p, 5); /* 4..8, then quiet */
	frame_in_file(4, &base, &len)->length = 7;
	assert_int_equal(poll_for(sub, &g, 0, 10 * HEARTBEAT_MS, &ms), TB_GAP);
	print_message("told %llu ms after the last frame\n", (unsigned long long)ms);
	/* The writer's next beat says 8; two looks a millisecond apart. */
	assert_true(ms <= 2 * HEARTBEAT_MS);
	assert_int_equal(tb_sub_loss(sub, &first, &last), 0);
	assert_int_equal(first, 4);
	assert_int_equal(last, 8);
	assert_int_equal(g.bad, 0);
	munmap(base, len);
	tb_subscriber_close(sub);
	pub_stop(&p);
}

/* The subscriber's stream with recovery from `src`, served in this
 * process; the source learns the epoch from the publisher. */
static void with_recovery(tb_stream_cfg_t *cfg, recovery_src_t *src,
			  tb_recovery_server_t **srv, uint64_t epoch,
			  uint64_t last)
{
	memset(src, 0, sizeof(*src));
	src->stream_id = cfg->id;
	src->epoch = epoch;
	src->first = 1;
	src->last = last;
	src->payload = PAYLOAD;
	snprintf(cfg->token, sizeof(cfg->token), "tok");
	assert_int_equal(recovery_src_serve(srv, src, "tok", NULL), 0);
	strcpy(cfg->recovery[0].host, "127.0.0.1");
	cfg->recovery[0].port = tb_recovery_server_port(*srv);
	cfg->n_recovery = 1;
}

static void with_recovery_a_lap_and_a_corrupt_frame_are_recovered(void **state)
{
	tb_stream_cfg_t cfg, sub_cfg;
	tb_subscriber_t *sub;
	tb_recovery_server_t *srv;
	recovery_src_t src;
	struct got g = {1, 0, 0, 0};
	struct pub p;
	uint64_t ms, n;
	uint8_t *base;
	size_t len;
	int rc;

	(void)state;
	cfg_for(&cfg);
	pub_start(&p, &cfg);
	sub_cfg = cfg;
	/* The source holds everything the test will publish: 10 + 3000 + 20. */
	with_recovery(&sub_cfg, &src, &srv, p.epoch, 3030);
	assert_int_equal(tb_subscriber_open(&sub, &sub_cfg), 0);
	pub_send(&p, 10);
	assert_true(poll_for(sub, &g, 10, 10000, &ms) >= 0);
	assert_int_equal(g.next, 11);

	/* Lapped in a burst, then quiet: recovered, never reported. */
	pub_send(&p, 3000);
	rc = poll_for(sub, &g, 3010, 20000, &ms);
	assert_true(rc >= 0);
	print_message("lap of 3,000 recovered in %llu ms\n", (unsigned long long)ms);
	assert_int_equal(g.next, 3011);
	assert_true(g.replayed > 0);

	/* A corrupt sequence number: recovered too. */
	pub_send(&p, 20); /* 3011..3030; the ring wrapped, so find it live */
	{
		struct stat st;
		int fd = open(path, O_RDWR);
		uint64_t off;

		assert_true(fd >= 0);
		assert_int_equal(fstat(fd, &st), 0);
		len = (size_t)st.st_size;
		base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		close(fd);
		assert_true(base != MAP_FAILED);
		/* Sequences are unique within a ring: find 3015's frame. */
		for (off = 0; off < cfg.ring_size; off += TB_FRAME_ALIGN) {
			tb_frame_hdr_t *f =
				(tb_frame_hdr_t *)(base + TB_SHM_HDR_SIZE + off);

			if (f->seq == 3015 && f->type == TB_FRAME_DATA &&
			    f->stream_id == cfg.id &&
			    f->length == TB_FRAME_HDR_LEN + PAYLOAD) {
				f->seq = 99999999;
				break;
			}
		}
		assert_true(off < cfg.ring_size);
	}
	n = g.n;
	rc = poll_for(sub, &g, 3030, 20000, &ms);
	assert_true(rc >= 0);
	assert_int_equal(g.next, 3031);
	assert_int_equal(g.n - n, 20);
	assert_int_equal(g.n, 3030);
	assert_int_equal(g.bad, 0);
	print_message("replayed %llu of 3030\n", (unsigned long long)g.replayed);
	munmap(base, len);
	tb_subscriber_close(sub);
	tb_recovery_server_close(srv);
	pub_stop(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(lapped_in_a_burst_then_quiet_is_told_within_a_heartbeat, setup, teardown),
		cmocka_unit_test_setup_teardown(corrupt_length_on_a_quiet_stream_is_told_from_the_heartbeat, setup, teardown),
		cmocka_unit_test_setup_teardown(with_recovery_a_lap_and_a_corrupt_frame_are_recovered, setup, teardown),
	};
	return cmocka_run_group_tests_name("shm_loss", tests, NULL, NULL);
}
