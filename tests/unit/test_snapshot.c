/*
 * Late join from a snapshot (subscriber/snapshot.c, tb_sub_start_at_snapshot)
 * over shm, in one process, with a schema of the test's own: template 1 an
 * incremental message carrying its sequence, 10 BEGIN and 12 END carrying
 * the incremental sequence S they are consistent with, 11 the body.
 *  - the first whole snapshot is handed over (every message flagged
 *    TB_MSG_F_SNAPSHOT), and the incremental stream goes on at S + 1 with
 *    nothing missing and nothing twice;
 *  - a snapshot cut by another BEGIN, or whose END names another S, is
 *    dropped and the next whole one taken;
 *  - a snapshot of another epoch than the incremental stream's is not
 *    taken; no snapshot at all is TB_ETIMEDOUT with what was seen;
 *  - what the incremental transport lost while the joiner waited (its
 *    reader lapped) is recovered from a recovery service and delivered
 *    in order before the live messages;
 *  - a subscriber that has delivered is refused (TB_ESTATE), and so are
 *    NULL arguments.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <tickbus/tickbus.h>

#include "tests/common/recovery_src.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define T_INC 1
#define T_BEGIN 10
#define T_BODY 11
#define T_END 12
#define EPOCH 0xabcdef01ull

static char path_inc[128], path_snap[128];

static void cfg_for(tb_stream_cfg_t *c, const char *name, const char *path,
		    uint32_t id, uint64_t ring)
{
	tb_stream_cfg_init(c);
	snprintf(c->name, sizeof(c->name), "%s", name);
	c->id = id;
	c->transport = TB_TRANSPORT_SHM;
	c->ring_size = ring;
	snprintf(c->shm_path, sizeof(c->shm_path), "%s", path);
}

static tb_snapshot_part_t part(void *clientd, const tb_msg_t *m, uint64_t *seq)
{
	(void)clientd;
	if (m->len == sizeof(*seq))
		memcpy(seq, m->data, sizeof(*seq));
	switch (m->template_id) {
	case T_BEGIN: return TB_SNAPSHOT_BEGIN;
	case T_BODY: return TB_SNAPSHOT_BODY;
	case T_END: return TB_SNAPSHOT_END;
	default: return TB_SNAPSHOT_NONE;
	}
}

/* What the joiner saw: the snapshot's messages, then the incremental. */
struct seen {
	uint64_t snap_msgs, snap_flagged, body_sum;
	uint64_t next, n, bad, replayed;
};

static void on_snapshot(void *cd, const tb_msg_t *m)
{
	struct seen *s = cd;
	uint64_t v = 0;

	s->snap_msgs++;
	s->snap_flagged += (m->flags & TB_MSG_F_SNAPSHOT) != 0;
	memcpy(&v, m->data, m->len < sizeof(v) ? m->len : sizeof(v));
	if (m->template_id == T_BODY)
		s->body_sum += v;
}

static void on_inc(void *cd, const tb_msg_t *m)
{
	struct seen *s = cd;
	uint64_t v = 0;

	memcpy(&v, m->data, sizeof(v));
	if (m->seq != s->next || v != m->seq || m->template_id != T_INC)
		s->bad++;
	s->next = m->seq + 1;
	s->n++;
	s->replayed += (m->flags & TB_MSG_F_REPLAY) != 0;
}

static void inc(tb_publisher_t *p, uint64_t to)
{
	for (uint64_t i = tb_pub_next_seq(p); i <= to; i++)
		assert_int_equal(tb_pub_offer(p, T_INC, &i, sizeof(i)), (int64_t)i);
}

static void msg(tb_publisher_t *p, uint16_t t, uint64_t v)
{
	assert_true(tb_pub_offer(p, t, &v, sizeof(v)) > 0);
}

/* A snapshot of S with bodies 1..n. */
static void snapshot(tb_publisher_t *p, uint64_t s, int n)
{
	msg(p, T_BEGIN, s);
	for (int i = 1; i <= n; i++)
		msg(p, T_BODY, (uint64_t)i);
	msg(p, T_END, s);
}

static void poll_to(tb_subscriber_t *sub, struct seen *s, uint64_t last)
{
	uint64_t until = tb_clock_mono_ms() + 5000;

	while (s->next <= last && tb_clock_mono_ms() < until) {
		int n = tb_sub_poll(sub, on_inc, s, 256);

		if (n < 0 && n != TB_NOT_CONNECTED)
			fail_msg("poll: %s (next %llu)", tb_strerror(n), (unsigned long long)s->next);
		if (n <= 0)
			usleep(100);
	}
}

static int teardown(void **state)
{
	(void)state;
	unlink(path_inc);
	unlink(path_snap);
	return 0;
}

static void joins_at_the_snapshot(void **state)
{
	tb_stream_cfg_t ci, cs;
	tb_publisher_t *pi, *ps;
	tb_subscriber_t *si, *ss;
	struct seen s = {0};
	uint64_t at = 0;

	(void)state;
	cfg_for(&ci, "inc", path_inc, 1, 1 << 20);
	cfg_for(&cs, "snap", path_snap, 2, 1 << 20);
	assert_int_equal(tb_publisher_open_epoch(&pi, &ci, EPOCH), 0);
	assert_int_equal(tb_publisher_open_epoch(&ps, &cs, EPOCH), 0);
	inc(pi, 100);
	snapshot(ps, 100, 4);              /* before the joiner: not its */
	assert_int_equal(tb_subscriber_open(&si, &ci), 0);
	assert_int_equal(tb_subscriber_open(&ss, &cs), 0);
	inc(pi, 150);
	snapshot(ps, 150, 3);
	inc(pi, 200);
	snapshot(ps, 200, 2);
	assert_int_equal(tb_sub_start_at_snapshot(si, ss, part, on_snapshot, &s,
						  2000, &at), 0);
	assert_int_equal(at, 150);
	assert_int_equal(s.snap_msgs, 5);
	assert_int_equal(s.snap_flagged, 5);
	assert_int_equal(s.body_sum, 1 + 2 + 3);
	s.next = 151;
	inc(pi, 260);
	poll_to(si, &s, 260);
	assert_int_equal(s.n, 110);
	assert_int_equal(s.bad, 0);
	/* Refused once it has delivered. */
	assert_int_equal(tb_sub_start_at_snapshot(si, ss, part, on_snapshot, &s,
						  100, &at), TB_ESTATE);
	assert_int_equal(tb_sub_start_at_snapshot(si, si, part, on_snapshot, &s,
						  100, &at), TB_EINVAL);
	assert_int_equal(tb_sub_start_at_snapshot(si, ss, NULL, on_snapshot, &s,
						  100, &at), TB_EINVAL);
	tb_subscriber_close(si);
	tb_subscriber_close(ss);
	tb_publisher_close(pi);
	tb_publisher_close(ps);
}

/* A BEGIN cut by another BEGIN, an END of another S: dropped. */
static void broken_snapshots_are_dropped(void **state)
{
	tb_stream_cfg_t ci, cs;
	tb_publisher_t *pi, *ps;
	tb_subscriber_t *si, *ss;
	struct seen s = {0};
	uint64_t at = 0;

	(void)state;
	cfg_for(&ci, "inc", path_inc, 1, 1 << 20);
	cfg_for(&cs, "snap", path_snap, 2, 1 << 20);
	assert_int_equal(tb_publisher_open_epoch(&pi, &ci, EPOCH), 0);
	assert_int_equal(tb_publisher_open_epoch(&ps, &cs, EPOCH), 0);
	assert_int_equal(tb_subscriber_open(&si, &ci), 0);
	assert_int_equal(tb_subscriber_open(&ss, &cs), 0);
	inc(pi, 10);
	msg(ps, T_BODY, 100);           /* the tail of one begun before */
	msg(ps, T_END, 5);
	msg(ps, T_BEGIN, 10);
	msg(ps, T_BODY, 1000);
	inc(pi, 20);
	msg(ps, T_BEGIN, 20);           /* cuts the one of 10 */
	msg(ps, T_BODY, 1000);
	msg(ps, T_END, 21);             /* not its END */
	inc(pi, 30);
	snapshot(ps, 30, 4);
	assert_int_equal(tb_sub_start_at_snapshot(si, ss, part, on_snapshot, &s,
						  2000, &at), 0);
	assert_int_equal(at, 30);
	assert_int_equal(s.snap_msgs, 6);
	assert_int_equal(s.body_sum, 10);
	s.next = 31;
	inc(pi, 40);
	poll_to(si, &s, 40);
	assert_int_equal(s.n, 10);
	assert_int_equal(s.bad, 0);
	tb_subscriber_close(si);
	tb_subscriber_close(ss);
	tb_publisher_close(pi);
	tb_publisher_close(ps);
}

/* Snapshots of another epoch are not taken: a timeout that says so. */
static void another_epoch_or_none_times_out(void **state)
{
	tb_stream_cfg_t ci, cs;
	tb_publisher_t *pi, *ps;
	tb_subscriber_t *si, *ss;
	struct seen s = {0};
	uint64_t at = 0;

	(void)state;
	cfg_for(&ci, "inc", path_inc, 1, 1 << 20);
	cfg_for(&cs, "snap", path_snap, 2, 1 << 20);
	assert_int_equal(tb_publisher_open_epoch(&pi, &ci, EPOCH), 0);
	assert_int_equal(tb_publisher_open_epoch(&ps, &cs, EPOCH + 1), 0);
	assert_int_equal(tb_subscriber_open(&si, &ci), 0);
	assert_int_equal(tb_subscriber_open(&ss, &cs), 0);
	inc(pi, 10);
	snapshot(ps, 10, 2);
	assert_int_equal(tb_sub_start_at_snapshot(si, ss, part, on_snapshot, &s,
						  300, &at), TB_ETIMEDOUT);
	assert_non_null(strstr(tb_errmsg(), "1 of another epoch"));
	assert_int_equal(s.snap_msgs, 0);
	assert_int_equal(tb_sub_start_at_snapshot(si, ss, part, on_snapshot, &s,
						  200, &at), TB_ETIMEDOUT);
	assert_non_null(strstr(tb_errmsg(), "0 begun"));
	tb_subscriber_close(si);
	tb_subscriber_close(ss);
	tb_publisher_close(pi);
	tb_publisher_close(ps);
}

/* The joiner's incremental reader (a 64 KiB ring) is lapped while it
 * waits for the snapshot: S + 1 onwards comes back from the recovery
 * service (one in this process, holding the stream), flagged replayed,
 * then live, all in order. */
static void fill_u64(uint8_t *payload, uint32_t len, uint64_t seq)
{
	memset(payload, 0, len);
	memcpy(payload, &seq, sizeof(seq));
}

static void inc_frame(const recovery_src_t *rs, uint8_t *buf, uint64_t seq)
{
	frames_put(buf, rs->stream_id, seq, sizeof(uint64_t), T_INC, 1, fill_u64);
}

static void what_the_wait_lost_is_recovered(void **state)
{
	recovery_src_t rs = {.stream_id = 1, .epoch = EPOCH, .first = 1,
			     .last = 20100, .frame = inc_frame};
	tb_recovery_server_t *srv;
	tb_stream_cfg_t ci, cs;
	tb_publisher_t *pi, *ps;
	tb_subscriber_t *si, *ss;
	struct seen s = {0};
	uint64_t at = 0;

	(void)state;
	assert_int_equal(recovery_src_serve(&srv, &rs, "tok", NULL), 0);
	cfg_for(&ci, "inc", path_inc, 1, 64 << 10);
	strcpy(ci.token, "tok");
	strcpy(ci.recovery[0].host, "127.0.0.1");
	ci.recovery[0].port = tb_recovery_server_port(srv);
	ci.n_recovery = 1;
	cfg_for(&cs, "snap", path_snap, 2, 1 << 20);
	assert_int_equal(tb_publisher_open_epoch(&pi, &ci, EPOCH), 0);
	assert_int_equal(tb_publisher_open_epoch(&ps, &cs, EPOCH), 0);
	inc(pi, 1000);
	assert_int_equal(tb_subscriber_open(&si, &ci), 0);
	assert_int_equal(tb_subscriber_open(&ss, &cs), 0);
	inc(pi, 2000);
	snapshot(ps, 2000, 3);
	inc(pi, 20000);                 /* laps the joiner's reader */
	assert_int_equal(tb_sub_start_at_snapshot(si, ss, part, on_snapshot, &s,
						  2000, &at), 0);
	assert_int_equal(at, 2000);
	s.next = 2001;
	inc(pi, 20100);
	poll_to(si, &s, 20100);
	assert_int_equal(s.n, 18100);
	assert_int_equal(s.bad, 0);
	assert_true(s.replayed > 0);
	tb_subscriber_close(si);
	tb_subscriber_close(ss);
	tb_publisher_close(pi);
	tb_publisher_close(ps);
	tb_recovery_server_close(srv);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(joins_at_the_snapshot, teardown),
		cmocka_unit_test_teardown(broken_snapshots_are_dropped, teardown),
		cmocka_unit_test_teardown(another_epoch_or_none_times_out, teardown),
		cmocka_unit_test_teardown(what_the_wait_lost_is_recovered, teardown),
	};

	snprintf(path_inc, sizeof(path_inc), "/dev/shm/tb-test-snap-i.%d", (int)getpid());
	snprintf(path_snap, sizeof(path_snap), "/dev/shm/tb-test-snap-s.%d", (int)getpid());
	return cmocka_run_group_tests(tests, NULL, NULL);
}
