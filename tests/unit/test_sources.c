/*
 * One stream from several identical copies (subscriber/sources.c, through
 * the public calls tb_publisher_open_epoch and tb_subscriber_open_sources),
 * in one process over shm, with copies that die in forked children:
 *  - each sequence is delivered once, in order, from whichever copy has
 *    it, however the copies run ahead of each other;
 *  - a gap on one copy (its reader lapped) is filled by the other and
 *    never seen above; a gap on both is reported once, with the range no
 *    copy holds;
 *  - a copy that dies says nothing while the other goes on; the last one
 *    to end is told (TB_CLOSED when one closed, TB_PUBLISHER_DEAD when
 *    all died), once; a copy restarted in the same epoch is followed again
 *    without TB_NEW_EPOCH;
 *  - a copy of another epoch is left alone until the followed one ends,
 *    then taken (TB_NEW_EPOCH) from its first message;
 *  - a plain shm subscriber of a ring replaced in the same epoch goes on
 *    without TB_CLOSED or TB_NEW_EPOCH;
 *  - config files: `sources`, the shared id, and what they refuse.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <tickbus/tickbus.h>

#include "subscriber/sources.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EPOCH 0x5eed5eed5eedull

static char path_a[128], path_b[128], conf[128];

static void copy_cfg(tb_stream_cfg_t *c, const char *name, const char *path,
		     uint64_t ring)
{
	tb_stream_cfg_init(c);
	snprintf(c->name, sizeof(c->name), "%s", name);
	c->id = 42;
	c->transport = TB_TRANSPORT_SHM;
	c->ring_size = ring;
	c->heartbeat_ms = 20;
	c->liveness_timeout_ms = 200;
	snprintf(c->shm_path, sizeof(c->shm_path), "%s", path);
}

static void whole_cfg(tb_stream_cfg_t *c)
{
	tb_stream_cfg_init(c);
	strcpy(c->name, "md");
	c->id = 42;
	c->transport = TB_TRANSPORT_SHM; /* not used */
	c->sources_wait_us = 2000;
}

struct sink {
	uint64_t next, n, bad, snap;
};

static void on_msg(void *cd, const tb_msg_t *m)
{
	struct sink *s = cd;
	uint64_t v = 0;

	if (m->len == sizeof(v))
		memcpy(&v, m->data, sizeof(v));
	if ((s->next && m->seq != s->next) || v != m->seq)
		s->bad++;
	s->next = m->seq + 1;
	s->n++;
}

static void offer_range(tb_publisher_t *p, uint64_t from, uint64_t to)
{
	for (uint64_t i = from; i <= to; i++) {
		assert_int_equal(tb_pub_next_seq(p), i);
		assert_int_equal(tb_pub_offer(p, 1, &i, sizeof(i)), (int64_t)i);
	}
}

static uint64_t now_ms(void)
{
	return tb_clock_mono_ms();
}

/* Polls until `want` messages were delivered in all, or a condition other
 * than TB_NOT_CONNECTED comes, or `ms` pass.  Returns the condition, or 0. */
static int poll_for(tb_subscriber_t *sub, struct sink *s, uint64_t want,
		    uint64_t ms)
{
	uint64_t until = now_ms() + ms;

	while (now_ms() < until) {
		int n = tb_sub_poll(sub, on_msg, s, 64);

		if (n < 0 && n != TB_NOT_CONNECTED)
			return n;
		if (want && s->n >= want)
			return 0;
		if (n <= 0)
			usleep(200);
	}
	return 0;
}

/* A copy in a child process: publishes 1..n in `epoch`, says so on the
 * pipe, and waits for SIGKILL. */
static pid_t spawn_copy(const tb_stream_cfg_t *cfg, uint64_t epoch, uint64_t n)
{
	int fd[2];
	pid_t child;
	char c;

	assert_int_equal(pipe(fd), 0);
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		tb_publisher_t *pub;

		if (tb_publisher_open_epoch(&pub, cfg, epoch) != 0)
			_exit(1);
		for (uint64_t i = 1; i <= n; i++)
			if (tb_pub_offer(pub, 1, &i, sizeof(i)) != (int64_t)i)
				_exit(1);
		if (write(fd[1], "x", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	assert_int_equal(read(fd[0], &c, 1), 1);
	close(fd[0]);
	close(fd[1]);
	return child;
}

static void kill_copy(pid_t child)
{
	int status;

	kill(child, SIGKILL);
	waitpid(child, &status, 0);
}

static int teardown(void **state)
{
	(void)state;
	unlink(path_a);
	unlink(path_b);
	return 0;
}

/* The rx level (sources.h), for its statistics: a tracker of our own. */
typedef struct rxsub {
	tb_rx_t *rx;
	tb_seq_t seq;
	tb_seq_range_t loss;
} rxsub_t;

static void rx_open(rxsub_t *r, const tb_stream_cfg_t *whole,
		    const tb_stream_cfg_t *src, int n)
{
	assert_int_equal(tb_sources_open(&r->rx, whole, src, n), 0);
	tb_seq_init(&r->seq, 0);
}

static int rx_poll_for(rxsub_t *r, struct sink *s, uint64_t want, uint64_t ms)
{
	uint64_t until = now_ms() + ms;

	while (now_ms() < until) {
		int n = r->rx->ops->poll(r->rx, &r->seq, &r->loss, on_msg, s, 64);

		if (n < 0 && n != TB_NOT_CONNECTED)
			return n;
		if (want && s->n >= want)
			return 0;
		if (n <= 0)
			usleep(200);
	}
	return 0;
}

/* ----------------------------------------------------------- the rule */

static void each_sequence_once_from_either(void **state)
{
	tb_stream_cfg_t whole, src[2];
	tb_publisher_t *a, *b;
	tb_sources_stats_t st;
	struct sink s = {0};
	rxsub_t r;

	(void)state;
	whole_cfg(&whole);
	copy_cfg(&src[0], "md_a", path_a, 1 << 20);
	copy_cfg(&src[1], "md_b", path_b, 1 << 20);
	assert_int_equal(tb_publisher_open_epoch(&a, &src[0], EPOCH), 0);
	assert_int_equal(tb_publisher_open_epoch(&b, &src[1], EPOCH), 0);
	assert_int_equal(tb_pub_epoch(a), EPOCH);
	assert_int_equal(tb_pub_epoch(b), EPOCH);
	rx_open(&r, &whole, src, 2);
	/* A leads, then B, then both: whichever has the next sequence
	 * delivers it. */
	offer_range(a, 1, 300);
	assert_int_equal(rx_poll_for(&r, &s, 300, 2000), 0);
	offer_range(b, 1, 500);
	assert_int_equal(rx_poll_for(&r, &s, 500, 2000), 0);
	offer_range(a, 301, 700);
	offer_range(b, 501, 700);
	assert_int_equal(rx_poll_for(&r, &s, 700, 2000), 0);
	assert_int_equal(rx_poll_for(&r, &s, 0, 50), 0);
	assert_int_equal(s.n, 700);
	assert_int_equal(s.bad, 0);
	assert_int_equal(r.seq.expected, 701);
	tb_sources_stats(r.rx, &st);
	assert_int_equal(st.n, 2);
	assert_int_equal(st.delivered[0] + st.delivered[1], 700);
	assert_true(st.delivered[0] >= 300);  /* 1..300 only A had */
	assert_true(st.delivered[1] >= 200);  /* 301..500 only B had */
	assert_int_equal(st.gaps, 0);
	assert_int_equal(st.epoch, EPOCH);
	r.rx->ops->close(r.rx);
	tb_publisher_close(a);
	tb_publisher_close(b);
}

/* A's reader is lapped (a 64 KiB ring, thousands of frames unread) and
 * tells its loss at once; B's 4 MiB ring holds them all and
 * fills it, within sources_wait_us: the subscriber never sees the loss. */
static void gap_on_one_copy_is_filled_by_the_other(void **state)
{
	tb_stream_cfg_t whole, src[2];
	tb_publisher_t *a, *b;
	tb_sources_stats_t st;
	struct sink s = {0};
	rxsub_t r;

	(void)state;
	whole_cfg(&whole);
	whole.sources_wait_us = 1000000; /* B is published at test speed */
	copy_cfg(&src[0], "md_a", path_a, 64 << 10);
	copy_cfg(&src[1], "md_b", path_b, 4 << 20);
	assert_int_equal(tb_publisher_open_epoch(&a, &src[0], EPOCH), 0);
	assert_int_equal(tb_publisher_open_epoch(&b, &src[1], EPOCH), 0);
	rx_open(&r, &whole, src, 2);
	offer_range(a, 1, 10);
	assert_int_equal(rx_poll_for(&r, &s, 10, 2000), 0);
	offer_range(a, 11, 20000);   /* laps A's reader many times over */
	assert_int_equal(rx_poll_for(&r, &s, 0, 20), 0);
	offer_range(a, 20001, 20010);
	assert_int_equal(rx_poll_for(&r, &s, 0, 20), 0);
	tb_sources_stats(r.rx, &st);
	assert_int_equal(st.losses[0], 1); /* A told it, and is held */
	assert_int_equal(s.n, 10);
	offer_range(b, 1, 20010);
	assert_int_equal(rx_poll_for(&r, &s, 20010, 5000), 0);
	assert_int_equal(s.n, 20010);
	assert_int_equal(s.bad, 0);
	tb_sources_stats(r.rx, &st);
	assert_int_equal(st.losses[1], 0);
	assert_int_equal(st.gaps, 0);
	assert_true(st.delivered[1] >= 19990);
	r.rx->ops->close(r.rx);
	tb_publisher_close(a);
	tb_publisher_close(b);
}

/* Both readers lapped: what neither holds is one loss, [E, the lowest
 * position either copy can go on from - 1], told at once (no copy could
 * fill it); delivery goes on after it. */
static void gap_on_both_copies_is_reported_once(void **state)
{
	tb_stream_cfg_t whole, src[2];
	tb_publisher_t *a, *b;
	tb_subscriber_t *sub;
	struct sink s = {0};
	uint64_t first = 0, last = 0;
	int rc;

	(void)state;
	whole_cfg(&whole);
	whole.sources_wait_us = 1000000; /* not waited for: nobody can fill */
	copy_cfg(&src[0], "md_a", path_a, 64 << 10);
	copy_cfg(&src[1], "md_b", path_b, 64 << 10);
	assert_int_equal(tb_publisher_open_epoch(&a, &src[0], EPOCH), 0);
	assert_int_equal(tb_publisher_open_epoch(&b, &src[1], EPOCH), 0);
	assert_int_equal(tb_subscriber_open_sources(&sub, &whole, src, 2), 0);
	offer_range(a, 1, 10);
	offer_range(b, 1, 10);
	assert_int_equal(poll_for(sub, &s, 10, 2000), 0);
	offer_range(a, 11, 20000);
	offer_range(b, 11, 20000);
	/* Told on the poll that finds it, the stream quiet (shm format 2). */
	rc = poll_for(sub, &s, 0, 1000);
	assert_int_equal(rc, TB_LAPPED);
	assert_int_equal(tb_sub_loss(sub, &first, &last), 0);
	assert_int_equal(first, 11);
	assert_int_equal(last, 20000);
	offer_range(a, 20001, 20010);
	offer_range(b, 20001, 20010);
	assert_int_equal(poll_for(sub, &s, 20, 2000), 0);
	assert_int_equal(poll_for(sub, &s, 0, 100), 0);
	assert_int_equal(s.n, 20);
	assert_int_equal(s.bad, 1); /* the jump over the loss */
	assert_int_equal(tb_sub_next_seq(sub), 20011);
	tb_subscriber_close(sub);
	tb_publisher_close(a);
	tb_publisher_close(b);
}

/* ---------------------------------------------------------------- ends */

/* A copy killed mid-stream says nothing; B goes on; B's close is told. */
static void a_dead_copy_says_nothing(void **state)
{
	tb_stream_cfg_t whole, src[2];
	tb_publisher_t *b;
	tb_subscriber_t *sub;
	struct sink s = {0};
	pid_t pa;

	(void)state;
	whole_cfg(&whole);
	copy_cfg(&src[0], "md_a", path_a, 1 << 20);
	copy_cfg(&src[1], "md_b", path_b, 1 << 20);
	pa = spawn_copy(&src[0], EPOCH, 400);
	assert_int_equal(tb_publisher_open_epoch(&b, &src[1], EPOCH), 0);
	assert_int_equal(tb_subscriber_open_sources(&sub, &whole, src, 2), 0);
	assert_int_equal(tb_sub_start_at(sub, 1), 0);
	assert_int_equal(poll_for(sub, &s, 400, 2000), 0);
	kill_copy(pa);
	offer_range(b, 1, 600);
	/* Well past A's liveness timeout (200 ms): nothing but messages. */
	assert_int_equal(poll_for(sub, &s, 0, 600), 0);
	assert_int_equal(s.n, 600);
	offer_range(b, 601, 650);
	assert_int_equal(poll_for(sub, &s, 0, 300), 0);
	assert_int_equal(s.n, 650);
	assert_int_equal(s.bad, 0);
	tb_publisher_close(b);
	/* One closed, one dead: the stream was finished. */
	assert_int_equal(poll_for(sub, &s, 0, 2000), TB_CLOSED);
	assert_int_equal(poll_for(sub, &s, 0, 300), 0); /* told once */
	tb_subscriber_close(sub);
}

/* Both die: TB_PUBLISHER_DEAD, once.  A restarted in the same epoch
 * republishes from 1 and goes on: the subscriber delivers what is new, no
 * new epoch, and an end is told again only when it ends again. */
static void both_dead_then_a_restart_in_the_same_epoch(void **state)
{
	tb_stream_cfg_t whole, src[2];
	tb_publisher_t *a;
	tb_subscriber_t *sub;
	struct sink s = {0};
	pid_t pa, pb;
	int rc;

	(void)state;
	whole_cfg(&whole);
	copy_cfg(&src[0], "md_a", path_a, 1 << 20);
	copy_cfg(&src[1], "md_b", path_b, 1 << 20);
	pa = spawn_copy(&src[0], EPOCH, 300);
	pb = spawn_copy(&src[1], EPOCH, 500);
	assert_int_equal(tb_subscriber_open_sources(&sub, &whole, src, 2), 0);
	assert_int_equal(tb_sub_start_at(sub, 1), 0);
	assert_int_equal(poll_for(sub, &s, 500, 2000), 0);
	kill_copy(pa);
	assert_int_equal(poll_for(sub, &s, 0, 500), 0); /* B lives */
	kill_copy(pb);
	assert_int_equal(poll_for(sub, &s, 0, 2000), TB_PUBLISHER_DEAD);
	assert_int_equal(poll_for(sub, &s, 0, 300), 0);
	/* A comes back in the same epoch, from the start. */
	assert_int_equal(tb_publisher_open_epoch(&a, &src[0], EPOCH), 0);
	offer_range(a, 1, 800);
	rc = poll_for(sub, &s, 800, 3000);
	assert_int_equal(rc, 0);
	assert_int_equal(s.n, 800);
	assert_int_equal(s.bad, 0);
	assert_int_equal(tb_sub_epoch(sub), EPOCH);
	tb_publisher_close(a);
	assert_int_equal(poll_for(sub, &s, 0, 2000), TB_CLOSED);
	tb_subscriber_close(sub);
}

/* A plain shm subscriber of a copy whose publisher is replaced in the same
 * epoch while it is still attached: it goes on after the messages it had,
 * with no TB_CLOSED (the old ring is marked replaced) and no new epoch. */
static void shm_ring_replaced_in_the_same_epoch(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *a;
	tb_subscriber_t *sub;
	struct sink s = {0};
	pid_t pa;

	(void)state;
	copy_cfg(&cfg, "md_a", path_a, 1 << 20);
	cfg.liveness_timeout_ms = 5000; /* still attached when replaced */
	pa = spawn_copy(&cfg, EPOCH, 100);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	assert_int_equal(tb_sub_start_at(sub, 1), 0);
	assert_int_equal(poll_for(sub, &s, 100, 2000), 0);
	kill_copy(pa);
	assert_int_equal(tb_publisher_open_epoch(&a, &cfg, EPOCH), 0);
	offer_range(a, 1, 150);
	assert_int_equal(poll_for(sub, &s, 150, 3000), 0);
	assert_int_equal(s.n, 150);
	assert_int_equal(s.bad, 0);
	assert_int_equal(tb_sub_epoch(sub), EPOCH);
	tb_publisher_close(a);
	assert_int_equal(poll_for(sub, &s, 0, 2000), TB_CLOSED);
	tb_subscriber_close(sub);
}

/* -------------------------------------------------------------- epochs */

/* B is of another epoch: left alone while A (followed) lives, taken when
 * A has ended, with TB_NEW_EPOCH and its messages from 1. */
static void a_copy_of_another_epoch_waits_its_turn(void **state)
{
	tb_stream_cfg_t whole, src[2];
	tb_publisher_t *a, *b;
	tb_subscriber_t *sub;
	struct sink s = {0};

	(void)state;
	whole_cfg(&whole);
	copy_cfg(&src[0], "md_a", path_a, 1 << 20);
	copy_cfg(&src[1], "md_b", path_b, 1 << 20);
	assert_int_equal(tb_publisher_open_epoch(&a, &src[0], EPOCH), 0);
	assert_int_equal(tb_publisher_open_epoch(&b, &src[1], EPOCH + 1), 0);
	assert_int_equal(tb_subscriber_open_sources(&sub, &whole, src, 2), 0);
	assert_int_equal(tb_sub_start_at(sub, 1), 0);
	offer_range(b, 1, 50);
	offer_range(a, 1, 20);
	assert_int_equal(poll_for(sub, &s, 0, 300), 0);
	assert_int_equal(s.n, 20);
	assert_int_equal(s.bad, 0);
	assert_int_equal(tb_sub_epoch(sub), EPOCH);
	tb_publisher_close(a);
	assert_int_equal(poll_for(sub, &s, 0, 2000), TB_NEW_EPOCH);
	assert_int_equal(tb_sub_epoch(sub), EPOCH + 1);
	s.next = 1;
	assert_int_equal(poll_for(sub, &s, 70, 2000), 0);
	assert_int_equal(s.n, 70);
	assert_int_equal(s.bad, 0);
	tb_subscriber_close(sub);
	tb_publisher_close(b);
}

/* ------------------------------------------------------------ refusals */

static void open_refuses_what_cannot_be(void **state)
{
	tb_stream_cfg_t whole, src[2];
	tb_subscriber_t *sub;

	(void)state;
	whole_cfg(&whole);
	copy_cfg(&src[0], "md_a", path_a, 1 << 20);
	copy_cfg(&src[1], "md_b", path_b, 1 << 20);
	src[1].id = 43;
	assert_int_equal(tb_subscriber_open_sources(&sub, &whole, src, 2), TB_EINVAL);
	assert_null(sub);
	assert_non_null(strstr(tb_errmsg(), "md_b"));
	assert_int_equal(tb_subscriber_open_sources(&sub, &whole, src, 0), TB_EINVAL);
	assert_int_equal(tb_subscriber_open_sources(&sub, &whole, src, 5), TB_EINVAL);
	whole.n_sources = 2;
	strcpy(whole.sources[0], "md_a");
	strcpy(whole.sources[1], "md_b");
	assert_int_equal(tb_subscriber_open(&sub, &whole), TB_EINVAL);
	assert_non_null(strstr(tb_errmsg(), "tb_subscriber_open_sources"));
	assert_int_equal(tb_publisher_open_epoch(NULL, &src[0], EPOCH), TB_EINVAL);
}

/* --------------------------------------------------------------- files */

static void write_conf(const char *text)
{
	FILE *f = fopen(conf, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void expect_refused(const char *text, const char *msg)
{
	tb_config_t *c = NULL;

	write_conf(text);
	assert_int_equal(tb_config_load(&c, conf), TB_ECONFIG);
	assert_null(c);
	if (!strstr(tb_errmsg(), msg))
		fail_msg("want '%s' in: %s", msg, tb_errmsg());
}

static void config_file_sources(void **state)
{
	char text[1024];
	const tb_stream_cfg_t *md;
	tb_subscriber_t *sub;
	tb_publisher_t *a;
	tb_config_t *c;
	struct sink s = {0};

	(void)state;
	snprintf(text, sizeof(text),
		 "[stream md]\nid = 42\nsources = md_a , md_b\n"
		 "sources_wait_us = 250\nidle = busy-spin\n"
		 "[stream md_a]\nid = 42\ntransport = shm\nshm_path = %s\n"
		 "[stream md_b]\nid = 42\ntransport = shm\nshm_path = %s\n"
		 "[stream other]\nid = 7\ntransport = shm\n", path_a, path_b);
	write_conf(text);
	assert_int_equal(tb_config_load(&c, conf), 0);
	md = tb_config_stream(c, "md");
	assert_non_null(md);
	assert_int_equal(md->n_sources, 2);
	assert_string_equal(md->sources[0], "md_a");
	assert_string_equal(md->sources[1], "md_b");
	assert_int_equal(md->sources_wait_us, 250);
	assert_int_equal(md->idle, TB_IDLE_BUSY_SPIN);
	assert_int_equal(tb_stream_cfg_validate(md), 0);
	tb_config_free(c);

	/* Opened by name: the copies come from the same file. */
	assert_int_equal(tb_subscriber_open_file(&sub, conf, "md"), 0);
	assert_int_equal(tb_publisher_open_file(&a, conf, "md_b"), 0);
	offer_range(a, 1, 5);
	assert_int_equal(poll_for(sub, &s, 5, 2000), 0);
	tb_subscriber_close(sub);
	tb_publisher_close(a);

	expect_refused("[stream md]\nid = 42\nsources = md_a, nope\n"
		       "[stream md_a]\nid = 42\ntransport = shm\n",
		       ":3: key 'sources': no stream 'nope' in this file");
	expect_refused("[stream md]\nid = 42\nsources = md_a\n"
		       "[stream md_a]\nid = 43\ntransport = shm\n",
		       ":5: key 'id': 43 is not the id of stream 'md'");
	expect_refused("[stream md]\nid = 42\nsources = md_a\ntransport = shm\n",
		       ":4: key 'transport': does not apply to a stream of "
		       "sources");
	expect_refused("[stream md]\nid = 42\nsources = md_a\nshm_path = /x\n"
		       "[stream md_a]\nid = 42\ntransport = shm\n",
		       "key 'shm_path': does not apply to a stream of sources");
	expect_refused("[stream md_a]\nid = 42\ntransport = shm\n"
		       "sources_wait_us = 5\n",
		       "key 'sources_wait_us': does not apply to transport shm");
	expect_refused("[stream md]\nid = 42\nsources = md_a, md_a\n",
		       "names 'md_a' twice");
	expect_refused("[stream md]\nid = 42\nsources = a,b,c,d,e\n",
		       "more than 4");
	expect_refused("[stream md]\nid = 42\nsources = md_x\n"
		       "[stream md_x]\nid = 42\nsources = md\n",
		       "has sources of its own");
	expect_refused("[stream md]\nid = 42\nsources = md_a\n"
		       "[stream md2]\nid = 42\nsources = md_a\n"
		       "[stream md_a]\nid = 42\ntransport = shm\n",
		       "'md_a' is already a source of stream 'md'");
	/* The exception is for a stream and its copies only. */
	expect_refused("[stream md]\nid = 42\nsources = md_a\n"
		       "[stream md_a]\nid = 42\ntransport = shm\n"
		       "[stream x]\nid = 42\ntransport = shm\n",
		       ":8: key 'id': 42 is already the id of stream 'md' (line "
		       "2); ids must be unique");
	expect_refused("[stream md]\nsources = md_a\n",
		       "missing required key 'id'");
	unlink(conf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(each_sequence_once_from_either, teardown),
		cmocka_unit_test_teardown(gap_on_one_copy_is_filled_by_the_other,
					  teardown),
		cmocka_unit_test_teardown(gap_on_both_copies_is_reported_once,
					  teardown),
		cmocka_unit_test_teardown(a_dead_copy_says_nothing, teardown),
		cmocka_unit_test_teardown(both_dead_then_a_restart_in_the_same_epoch,
					  teardown),
		cmocka_unit_test_teardown(shm_ring_replaced_in_the_same_epoch,
					  teardown),
		cmocka_unit_test_teardown(a_copy_of_another_epoch_waits_its_turn,
					  teardown),
		cmocka_unit_test_teardown(open_refuses_what_cannot_be, teardown),
		cmocka_unit_test_teardown(config_file_sources, teardown),
	};

	snprintf(path_a, sizeof(path_a), "/dev/shm/tb-test-src-a.%d", (int)getpid());
	snprintf(path_b, sizeof(path_b), "/dev/shm/tb-test-src-b.%d", (int)getpid());
	snprintf(conf, sizeof(conf), "/tmp/tb-test-src.%d.ini", (int)getpid());
	return cmocka_run_group_tests(tests, NULL, NULL);
}
