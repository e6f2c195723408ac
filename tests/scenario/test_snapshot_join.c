/*
 * test_snapshot_join.c - late join from a snapshot with the real programs.
 * tb-feedsim sends some 900,000 ITCH messages; tb-feedhandler publishes
 * them (about 1.3 million messages) on shm stream md and a book snapshot
 * every 100,000 on stream snap; strategy s1 follows md from the start.
 * Once the handler has published a million messages, strategy s3 starts
 * with --snapshot snap.  What is checked:
 *
 *  - s3 took the first or second snapshot published after it started (one
 *    is at most one interval away), at a point past the millionth message;
 *  - the books it built from that snapshot are the handler's at that
 *    point (the book and top-of-book checksums the handler logged for the
 *    snapshot);
 *  - it then delivered exactly S + 1 .. N, in order, and ended with the
 *    handler's books, as s1 did from 1 - without replaying the stream from
 *    1 (it delivered N - S messages, none replayed);
 *  - it says how long the join took (join_ms, caught_up_ms).
 *
 * Network: a namespace of its own, as test_feed_scenario.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/common/scenario.h"

#define SESSION "TBSNAP0001"
#define EVERY 100000
#define LATE 1000000

static char tmpdir[128];
static char conf[192];
static char ring_md[128], ring_snap[128];

static uint64_t F(const char *text, const char *key)
{
	uint64_t v = proc_field_u64(text, key);

	if (v == UINT64_MAX)
		fail_msg("no %s= in: %s", key, text);
	return v;
}

static void write_conf(void)
{
	FILE *f;

	snprintf(ring_md, sizeof(ring_md), "/dev/shm/tb-snapjoin-%d-md",
		 (int)getpid());
	snprintf(ring_snap, sizeof(ring_snap), "/dev/shm/tb-snapjoin-%d-snap",
		 (int)getpid());
	snprintf(conf, sizeof(conf), "%s/snap.ini", tmpdir);
	f = fopen(conf, "w");
	assert_non_null(f);
	/* 64 MiB hold some 800,000 messages: more than one interval, so
	 * the joiner's ring still has what came after its snapshot. */
	fprintf(f,
		"[stream md]\nid = 91\ntransport = shm\nshm_path = %s\n"
		"ring_size = 64M\n\n"
		"[stream snap]\nid = 92\ntransport = shm\nshm_path = %s\n"
		"ring_size = 16M\n", ring_md, ring_snap);
	assert_int_equal(fclose(f), 0);
}

static void start(proc_t *p, const char *name, char *const argv[])
{
	char out[256];

	snprintf(out, sizeof(out), "%s/%s.out", tmpdir, name);
	assert_int_equal(proc_start(p, out, argv), 0);
}

/* The snapshot line of `text` with seq=`seq` (NULL if none), and the
 * highest snapshot sequence in it. */
static const char *snapshot_line(const char *text, uint64_t seq, uint64_t *max)
{
	const char *p = text, *hit = NULL;
	char want[64];

	snprintf(want, sizeof(want), " seq=%" PRIu64 " ", seq);
	*max = 0;
	while ((p = strstr(p, "feedhandler: snapshot id="))) {
		const char *eol = strchr(p, '\n'), *q = strstr(p, " seq=");
		uint64_t s;

		if (!eol || !q || q > eol)
			break;
		s = strtoull(q + 5, NULL, 10);
		if (s > *max)
			*max = s;
		if (strncmp(q, want, strlen(want)) == 0)
			hit = p;
		p = eol;
	}
	return hit;
}

/* The value of `key` within one line starting at `line`. */
static void line_field(const char *line, const char *key, char *out, size_t n)
{
	const char *eol = strchr(line, '\n');
	char buf[512];
	size_t len = eol ? (size_t)(eol - line) : strlen(line);

	if (len >= sizeof(buf))
		len = sizeof(buf) - 1;
	memcpy(buf, line, len);
	buf[len] = '\0';
	if (proc_field(buf, key, out, n) != 0)
		fail_msg("no %s= in: %s", key, buf);
}

static void test_join_a_million_messages_late(void **state)
{
	char *gwv[] = { "tb-gateway", "-p", "31010", NULL };
	char *fhv[] = { "tb-feedhandler", "-c", conf, "-s", "md", "--snapshot",
			"snap", "--snapshot-every", "100000", "-g", "239.194.7.1",
			"-p", "31001", "-R", "31002", "--session", SESSION,
			"--timeout-ms", "240000", "--linger-ms", "300", NULL };
	char *s1v[] = { "tb-strategy", "-c", conf, "-s", "md", "-n", "s1",
			"--timeout-ms", "240000", NULL };
	char *s3v[] = { "tb-strategy", "-c", conf, "-s", "md", "-n", "s3",
			"--snapshot", "snap", "--timeout-ms", "240000", NULL };
	char *simv[] = { "tb-feedsim", "--iface", "127.0.0.1", "--session",
			 SESSION, "-N", "8", "-n", "900000", "-r", "250000",
			 "--start-delay-ms", "300", "--end-ms", "120000", "-s",
			 "29", NULL };
	proc_t gw, fh, s1, s3, sim;
	char *fho, *s1o, *s3o, *simo, a[64], b[64];
	const char *snap, *joined;
	uint64_t before = 0, at, n, until;
	int rc[4];

	(void)state;
	write_conf();
	start(&gw, "gw", gwv);
	assert_int_equal(proc_wait_output(&gw, "ready", 30000), 0);
	start(&fh, "fh", fhv);
	assert_int_equal(proc_wait_output(&fh, "ready", 30000), 0);
	start(&s1, "s1", s1v);
	assert_int_equal(proc_wait_output(&s1, "ready", 30000), 0);
	start(&sim, "sim", simv);

	/* A million messages published: the late one starts. */
	until = proc_now_ms() + 180000;
	while (before < LATE && proc_now_ms() < until) {
		char *o = proc_output(&fh);

		snapshot_line(o, 0, &before);
		free(o);
		usleep(20000);
	}
	assert_true(before >= LATE);
	start(&s3, "s3", s3v);

	rc[0] = proc_wait(&fh, 240000);
	rc[1] = proc_wait(&s1, 60000);
	rc[2] = proc_wait(&s3, 60000);
	kill(sim.pid, SIGTERM);
	rc[3] = proc_wait(&sim, 30000);
	kill(gw.pid, SIGTERM);
	proc_wait(&gw, 30000);
	fho = proc_output(&fh);
	s1o = proc_output(&s1);
	s3o = proc_output(&s3);
	simo = proc_output(&sim);
	fprintf(stderr, "%s%s%s%s", simo, fho, s1o, s3o);
	for (int i = 0; i < 4; i++)
		assert_int_equal(rc[i], 0);

	n = F(fho, "published");
	assert_int_equal(F(fho, "ended"), 1);
	assert_int_equal(F(fho, "lost"), 0);
	/* s3 joined at a snapshot after the millionth message, the first
	 * or second after it started. */
	at = F(s3o, "joined_at");
	assert_true(at >= LATE);
	assert_true(at > before);
	assert_true(at <= before + 2 * EVERY + 64);
	snap = snapshot_line(fho, at, &before);
	assert_non_null(snap);
	/* The books the snapshot gave it are the handler's at that point. */
	joined = strstr(s3o, ": joined snapshot=");
	assert_non_null(joined);
	line_field(snap, "book_checksum", a, sizeof(a));
	line_field(joined, "book_checksum", b, sizeof(b));
	assert_string_equal(a, b);
	line_field(snap, "top_checksum", a, sizeof(a));
	line_field(joined, "top_checksum", b, sizeof(b));
	assert_string_equal(a, b);
	/* Then exactly S + 1 .. N, nothing replayed, and the handler's
	 * books at the end, as s1's from 1. */
	assert_int_equal(F(s3o, "first_seq"), at + 1);
	assert_int_equal(F(s3o, "last_seq"), n);
	assert_int_equal(F(s3o, "messages"), n - at);
	assert_int_equal(F(s3o, "seq_errors"), 0);
	assert_int_equal(F(s3o, "replayed"), 0);
	assert_int_equal(F(s3o, "book_refused"), 0);
	assert_int_equal(F(s3o, "gaps") + F(s3o, "laps") + F(s3o, "data_loss"), 0);
	assert_int_equal(F(s1o, "messages"), n);
	assert_int_equal(F(s1o, "seq_errors"), 0);
	assert_int_equal(proc_field(fho, "book_checksum", a, sizeof(a)), 0);
	assert_int_equal(proc_field(s3o, "book_checksum", b, sizeof(b)), 0);
	assert_string_equal(a, b);
	assert_int_equal(proc_field(s1o, "book_checksum", b, sizeof(b)), 0);
	assert_string_equal(a, b);
	assert_int_equal(proc_field(fho, "top_checksum", a, sizeof(a)), 0);
	assert_int_equal(proc_field(s3o, "top_checksum", b, sizeof(b)), 0);
	assert_string_equal(a, b);
	assert_true(F(s3o, "caught_up_ms") >= F(s3o, "join_ms"));
	print_message("late join: snapshot %" PRIu64 " of %" PRIu64 " messages, "
		      "join %" PRIu64 " ms, caught up %" PRIu64 " ms\n", at, n,
		      F(s3o, "join_ms"), F(s3o, "caught_up_ms"));
	free(fho);
	free(s1o);
	free(s3o);
	free(simo);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_join_a_million_messages_late),
	};
	int rc;

	if ((rc = proc_private_multicast_netns()) != 0)
		return rc;
	if (scenario_dir_make(tmpdir, sizeof(tmpdir), "tb-snapjoin-test") != 0) {
		perror("mkdtemp");
		return 1;
	}
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	unlink(ring_snap);
	if (scenario_cleanup(tmpdir, ring_md) != 0)
		fprintf(stderr, "could not remove %s\n", tmpdir);
	return rc;
}
