/*
 * test_failover.c - hot failover with the real programs.  Two feed
 * handlers read one tb-feedsim feed and publish it in the epoch of the
 * feed (its session and first sequence): A on shm (md_a) and rc (md_c),
 * B on udp (md_b) and shm (md_d).  Two strategies each take one stream
 * from both handlers (`sources`): s1 md = md_a + md_b, s2 mdx = md_c +
 * md_d.  tb-recoveryd stores both streams, through both handlers too.
 *
 * Mid-stream A is killed with SIGKILL, restarted (it republishes the
 * session from sequence 1, the simulator's retransmission server filling
 * what it missed), and then B is killed: every strategy delivers exactly
 * 1..N, N being what the restarted A published, with its checksums, no
 * epoch change, no death and no gap reported; tb-recoveryd stored 1..N of
 * each stream with no hole.  And: every handler of the feed says the same
 * epoch; bad options of the new kind are refused.
 *
 * Network: a network namespace of the test's own, as test_feed_scenario
 * (skips without the privilege).  rc runs on softrdma (tests/run-tests.sh
 * sets LD_LIBRARY_PATH and the fabric).
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

#define SESSION "TBFAIL0001"

static char tmpdir[128];
static char conf[192];
static unsigned rd_port;

static uint64_t F(const char *text, const char *key)
{
	uint64_t v = proc_field_u64(text, key);

	if (v == UINT64_MAX)
		fail_msg("no %s= in: %s", key, text);
	return v;
}

/* The copies carry their stream's id and token; each keeps its last
 * messages (retention) for tb-recoveryd, which the strategies ask. */
static void write_conf(void)
{
	unsigned ret[4], ctl = proc_free_port();
	FILE *f;

	for (int i = 0; i < 4; i++)
		ret[i] = proc_free_port();
	rd_port = proc_free_port();
	snprintf(conf, sizeof(conf), "%s/failover.ini", tmpdir);
	f = fopen(conf, "w");
	assert_non_null(f);
	fprintf(f,
		"[stream md]\nid = 81\nsources = md_a, md_b\ntoken = fo\n"
		"recovery = 127.0.0.1:%u\n\n"
		"[stream md_a]\nid = 81\ntransport = shm\ntoken = fo\n"
		"shm_path = /dev/shm/tb-failover-%d-md_a\nring_size = 16M\nheartbeat_ms = 20\n"
		"liveness_timeout_ms = 300\nretention = 300000\n"
		"retention_endpoint = 127.0.0.1:%u\n\n"
		"[stream md_b]\nid = 81\ntransport = udp\ntoken = fo\n"
		"group = 239.192.0.81:5081\nring_size = 16M\nrcvbuf = 16M\n"
		"heartbeat_ms = 20\nliveness_timeout_ms = 300\n"
		"retention = 300000\nretention_endpoint = 127.0.0.1:%u\n\n"
		"[stream mdx]\nid = 82\nsources = md_c, md_d\ntoken = fo\n"
		"recovery = 127.0.0.1:%u\n\n"
		"[stream md_c]\nid = 82\ntransport = rc\ntoken = fo\n"
		"control = 127.0.0.1:%u\nring_size = 16M\nslow_consumer = lap\n"
		"heartbeat_ms = 20\nliveness_timeout_ms = 300\n"
		"retention = 300000\nretention_endpoint = 127.0.0.1:%u\n\n"
		"[stream md_d]\nid = 82\ntransport = shm\ntoken = fo\n"
		"shm_path = /dev/shm/tb-failover-%d-md_d\nring_size = 16M\nheartbeat_ms = 20\n"
		"liveness_timeout_ms = 300\nretention = 300000\n"
		"retention_endpoint = 127.0.0.1:%u\n",
		rd_port, (int)getpid(), ret[0], ret[1], rd_port, ctl, ret[2],
		(int)getpid(), ret[3]);
	assert_int_equal(fclose(f), 0);
}

static void start(proc_t *p, const char *name, char *const argv[])
{
	char out[256];

	snprintf(out, sizeof(out), "%s/%s.out", tmpdir, name);
	assert_int_equal(proc_start(p, out, argv), 0);
}

/* A feed handler of the feed: A publishes md_a and md_c, B md_b and md_d. */
static void start_handler(proc_t *p, const char *name, const char *s1,
			  const char *s2)
{
	char *argv[] = { "tb-feedhandler", "-c", conf, "-s", (char *)s1, "-s",
			 (char *)s2, "-g", "239.194.7.1", "-p", "31001", "-R",
			 "31002", "--session", SESSION, "--gap-timeout-ms", "50",
			 "--timeout-ms", "120000", "--linger-ms", "300", NULL };

	start(p, name, argv);
	assert_int_equal(proc_wait_output(p, "ready", 30000), 0);
}

static void sleep_ms(unsigned ms)
{
	usleep(ms * 1000u);
}

/* What a strategy delivered: 1..n exactly, in order, nothing lost or
 * reported, the handler's books. */
static void assert_whole(const char *st, uint64_t n, const char *fh)
{
	char a[64], b[64];

	assert_int_equal(F(st, "closed"), 1);
	assert_int_equal(F(st, "messages"), n);
	assert_int_equal(F(st, "first_seq"), 1);
	assert_int_equal(F(st, "last_seq"), n);
	assert_int_equal(F(st, "seq_errors"), 0);
	assert_int_equal(F(st, "epochs"), 0);
	assert_int_equal(F(st, "deaths"), 0);
	assert_int_equal(F(st, "gaps"), 0);
	assert_int_equal(F(st, "laps"), 0);
	assert_int_equal(F(st, "data_loss"), 0);
	assert_int_equal(F(st, "book_refused"), 0);
	assert_int_equal(F(st, "level_mismatch"), 0);
	assert_int_equal(proc_field(st, "top_checksum", a, sizeof(a)), 0);
	assert_int_equal(proc_field(fh, "top_checksum", b, sizeof(b)), 0);
	assert_string_equal(a, b);
	assert_int_equal(proc_field(st, "book_checksum", a, sizeof(a)), 0);
	assert_int_equal(proc_field(fh, "book_checksum", b, sizeof(b)), 0);
	assert_string_equal(a, b);
}

static void test_kill_primary_then_secondary(void **state)
{
	char rdl[64], *s1, *s2, *fa, *fa2, *fb, *sim, *rd, store[200];
	char ea[64], ea2[64], eb[64];
	char *s1v[] = { "tb-strategy", "-c", conf, "-s", "md", "-n", "s1",
			"-g", "127.0.0.1:31010", "--timeout-ms", "120000", NULL };
	char *s2v[] = { "tb-strategy", "-c", conf, "-s", "mdx", "-n", "s2",
			"-g", "127.0.0.1:31010", "--timeout-ms", "120000", NULL };
	char *gwv[] = { "tb-gateway", "-p", "31010", NULL };
	char *simv[] = { "tb-feedsim", "--iface", "127.0.0.1", "--session",
			 SESSION, "-N", "8", "-n", "150000", "-r", "25000",
			 "--start-delay-ms", "300", "--end-ms", "60000", "-s",
			 "23", NULL };
	char *rdv[] = { "tb-recoveryd", "-c", conf, "-s", "md", "-s", "mdx",
			"-d", store, "-l", rdl, NULL };
	proc_t gw, ps1, ps2, pa, pa2, pb, psim, prd;
	uint64_t n;

	(void)state;
	write_conf();
	snprintf(rdl, sizeof(rdl), "127.0.0.1:%u", rd_port);
	snprintf(store, sizeof(store), "%s/store", tmpdir);
	start(&gw, "gw", gwv);
	assert_int_equal(proc_wait_output(&gw, "ready", 30000), 0);
	start_handler(&pa, "fa", "md_a", "md_c");
	start_handler(&pb, "fb", "md_b", "md_d");
	start(&prd, "recoveryd", rdv);
	assert_int_equal(proc_wait_output(&prd, "listening", 30000), 0);
	start(&ps1, "s1", s1v);
	start(&ps2, "s2", s2v);
	assert_int_equal(proc_wait_output(&ps1, "ready", 30000), 0);
	assert_int_equal(proc_wait_output(&ps2, "ready", 30000), 0);
	start(&psim, "sim", simv);

	/* The session lasts 6 s (150,000 at 25,000/s): B is killed about
	 * half way, with seconds to spare for a loaded machine's slow
	 * restart of A (at 50,000/s B once finished before its kill). */
	sleep_ms(1300);                       /* a fifth of the way */
	kill(pa.pid, SIGKILL);
	assert_int_equal(proc_wait(&pa, 10000), 128 + SIGKILL);
	sleep_ms(500);
	start_handler(&pa2, "fa2", "md_a", "md_c");
	sleep_ms(1000);                       /* about half */
	kill(pb.pid, SIGKILL);
	assert_int_equal(proc_wait(&pb, 10000), 128 + SIGKILL);

	/* A2 reaches the end of session and closes its streams. */
	assert_int_equal(proc_wait(&pa2, 120000), 0);
	assert_int_equal(proc_wait(&ps1, 60000), 0);
	assert_int_equal(proc_wait(&ps2, 60000), 0);
	kill(psim.pid, SIGTERM);
	assert_int_equal(proc_wait(&psim, 30000), 0);
	kill(prd.pid, SIGTERM);
	assert_int_equal(proc_wait(&prd, 30000), 0);
	kill(gw.pid, SIGTERM);
	proc_wait(&gw, 30000);

	fa = proc_output(&pa);
	fa2 = proc_output(&pa2);
	fb = proc_output(&pb);
	s1 = proc_output(&ps1);
	s2 = proc_output(&ps2);
	sim = proc_output(&psim);
	rd = proc_output(&prd);
	fprintf(stderr, "%s%s%s%s%s%s%s", sim, fa, fb, fa2, s1, s2, rd);

	/* One epoch, that of the feed, for every handler and every run. */
	assert_int_equal(proc_field(fa, "epoch", ea, sizeof(ea)), 0);
	assert_int_equal(proc_field(fa2, "epoch", ea2, sizeof(ea2)), 0);
	assert_int_equal(proc_field(fb, "epoch", eb, sizeof(eb)), 0);
	assert_string_equal(ea, eb);
	assert_string_equal(ea, ea2);
	assert_non_null(strstr(fa2, "(of the feed)"));
	/* The restarted A published the whole session again. */
	assert_int_equal(F(fa2, "ended"), 1);
	assert_int_equal(F(fa2, "messages"), F(sim, "last_seq"));
	assert_int_equal(F(fa2, "lost"), 0);
	n = F(fa2, "published");
	assert_true(n > F(sim, "last_seq"));
	assert_whole(s1, n, fa2);
	assert_whole(s2, n, fa2);
	/* The store took every message of both streams, from either. */
	assert_non_null(strstr(rd, "stream md: stored="));
	assert_non_null(strstr(rd, "stream mdx: stored="));
	{
		char *md = strstr(rd, "stream md: "), *mdx = strstr(rd, "stream mdx: ");

		assert_int_equal(F(md, "stored"), n);
		assert_int_equal(F(md, "holes"), 0);
		assert_int_equal(F(md, "last"), n);
		assert_int_equal(F(mdx, "stored"), n);
		assert_int_equal(F(mdx, "holes"), 0);
	}
	free(fa);
	free(fa2);
	free(fb);
	free(s1);
	free(s2);
	free(sim);
	free(rd);
}

/* New options refuse bad values, naming them. */
static void test_bad_arguments(void **state)
{
	static const char *cases[][4] = {
		{ "tb-feedhandler", "--snapshot-every", "x", "--snapshot-every" },
		{ "tb-feedhandler", "--snapshot-ms", "-1", "--snapshot-ms" },
		{ "tb-feedhandler", "--group-b", "239.1", "--group-b" },
		{ "tb-feedhandler", "--port-b", "0", "--port-b" },
		{ "tb-feedhandler", "--ab-wait-us", "lots", "--ab-wait-us" },
		{ "tb-feedhandler", "--line-timeout-ms", "0", "--line-timeout-ms" },
		{ "tb-strategy", "--snapshot-wait-ms", "0", "--snapshot-wait-ms" },
		{ "tb-feedsim", "--drop-b", "2", "--drop-b" },
		{ "tb-feedsim", "--jitter-us", "x", "--jitter-us" },
		{ "tb-feedsim", "--group-b", "nowhere", "--group-b" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char out[256], *text;
		char *argv[] = { (char *)cases[i][0], (char *)cases[i][1],
				 (char *)cases[i][2], NULL };
		int rc;

		snprintf(out, sizeof(out), "%s/badarg%zu.out", tmpdir, i);
		rc = scenario_run(out, argv, 30000, &text);
		if (rc != 2 || !strstr(text, cases[i][3]))
			fail_msg("%s %s %s: want exit 2 naming '%s', got %d: %s",
				 cases[i][0], cases[i][1], cases[i][2], cases[i][3],
				 rc, text);
		free(text);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kill_primary_then_secondary),
		cmocka_unit_test(test_bad_arguments),
	};
	int rc;

	if ((rc = proc_private_multicast_netns()) != 0)
		return rc;
	if (scenario_dir_make(tmpdir, sizeof(tmpdir), "tb-failover-test") != 0) {
		perror("mkdtemp");
		return 1;
	}
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	{
		char ring[128];

		snprintf(ring, sizeof(ring), "/dev/shm/tb-failover-%d-md_a",
			 (int)getpid());
		unlink(ring);
		snprintf(ring, sizeof(ring), "/dev/shm/tb-failover-%d-md_d",
			 (int)getpid());
		unlink(ring);
	}
	if (scenario_cleanup(tmpdir, NULL) != 0)
		fprintf(stderr, "could not remove %s\n", tmpdir);
	return rc;
}
