/*
 * test_t2t.c - tick to trade with the real programs: tb-feedsim sends a
 * MoldUDP64/ITCH feed (with packets dropped), tb-feedhandler reads it and
 * publishes schema messages on a tickbus stream (shm, then rc on
 * softrdma), tb-strategy keeps the top of book and sends orders to
 * tb-gateway.  What is checked:
 *
 *  - every feed book event became a message (quotes + trades + level
 *    entries = book events), and the strategy received exactly what the
 *    handler published, per message type, with the same top-of-book
 *    checksum, and its BookLevelUpdates agree with its Quotes;
 *  - the feed's gaps were re-requested and filled (no sequence lost);
 *  - orders were sent and every one acked; each per-hop histogram holds
 *    one sample per acked order, the six stamps were in order for every
 *    order (strictly inside the strategy; across processes within 5 us of
 *    TSC skew between cores), and the .hgrm files were written;
 *  - malformed packets sent to the feed are counted by the handler;
 *  - a strategy stopped mid-stream on a lapping ring reports the laps and
 *    the lost ranges;
 *  - bad arguments of both tools are refused with a message naming them.
 *
 * Network: the test moves itself into a network namespace of its own
 * (unshare) with loopback up and a multicast route, as test_feed_scenario
 * does; without the privilege it skips (exit 77).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/common/scenario.h"
#include "tools/md/mold.h"

#define GROUP "239.194.7.1"
#define PORT 31001
#define RPORT 31002
#define NINST 6
#define SESSION "TBT2T00001"

static char tmpdir[128];
static char conf[192];

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

	snprintf(conf, sizeof(conf), "%s/t2t.ini", tmpdir);
	f = fopen(conf, "w");
	assert_non_null(f);
	fprintf(f,
		"[stream md_shm]\nid = 71\ntransport = shm\n"
		"shm_path = /dev/shm/tickbus.t2t-test-%d\nring_size = 16M\n"
		"slow_consumer = lap\n\n"
		"[stream md_rc]\nid = 72\ntransport = rc\n"
		"control = 127.0.0.1:%d\ntoken = t2t-token\nring_size = 8M\n"
		"slow_consumer = backpressure\nliveness_timeout_ms = 5000\n\n"
		"[stream md_lap]\nid = 73\ntransport = shm\n"
		"shm_path = /dev/shm/tickbus.t2t-lap-%d\nring_size = 64K\n"
		"slow_consumer = lap\n",
		(int)getpid(), 20000 + (int)(getpid() % 20000), (int)getpid());
	assert_int_equal(fclose(f), 0);
}

typedef struct run {
	char *sim, *fh, *st, *gw;
	int fh_rc, st_rc;
} run_t;

static void send_to(int fd, const char *addr, uint16_t port, const void *b,
		    size_t n)
{
	struct sockaddr_in sa;

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons(port);
	inet_pton(AF_INET, addr, &sa.sin_addr);
	assert_int_equal(sendto(fd, b, n, 0, (struct sockaddr *)&sa, sizeof(sa)),
			 (ssize_t)n);
}

/* Three malformed packets to the feed group, each counted by the feed
 * core as a malformed packet. */
static void send_malformed(void)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	unsigned char one = 1;
	uint8_t pkt[64];
	tb_mold_builder_t b;
	size_t n;

	assert_true(fd >= 0);
	setsockopt(fd, IPPROTO_IP, IP_MULTICAST_LOOP, &one, sizeof(one));
	send_to(fd, GROUP, PORT, "junk!", 5);           /* shorter than a header */
	tb_mold_build_begin(&b, pkt, sizeof(pkt), SESSION, 1);
	tb_mold_build_add(&b, "abc", 3);
	n = tb_mold_build_end(&b);
	pkt[19] = 3;                                     /* count 3, one block */
	send_to(fd, GROUP, PORT, pkt, n);
	tb_mold_write_ctl(pkt, SESSION, 0, 0);           /* sequence 0 */
	send_to(fd, GROUP, PORT, pkt, 20);
	close(fd);
}

/* gateway, strategy, feed handler on `stream`, then the simulator with
 * `sargs`; everything ends by itself (end of session closes the stream). */
static void run_t2t(run_t *r, const char *name, const char *stream,
		    char *const sargs[], int malformed)
{
	char out[4][256], gwport[32], gwaddr[64], *sargv[40];
	proc_t gw, st, fh, sim;
	int n = 0;

	snprintf(out[0], sizeof(out[0]), "%s/%s.gw", tmpdir, name);
	snprintf(out[1], sizeof(out[1]), "%s/%s.st", tmpdir, name);
	snprintf(out[2], sizeof(out[2]), "%s/%s.fh", tmpdir, name);
	snprintf(out[3], sizeof(out[3]), "%s/%s.sim", tmpdir, name);
	{
		char *gargv[] = { "tb-gateway", "-p", "0", NULL };
		char *g;

		assert_int_equal(proc_start(&gw, out[0], gargv), 0);
		assert_int_equal(proc_wait_output(&gw, "ready", 30000), 0);
		g = proc_output(&gw);
		snprintf(gwport, sizeof(gwport), "%" PRIu64, F(g, "port"));
		free(g);
	}
	snprintf(gwaddr, sizeof(gwaddr), "127.0.0.1:%s", gwport);
	{
		char *stargv[] = { "tb-strategy", "-c", conf, "-s", (char *)stream,
				   "-g", gwaddr, "-n", (char *)name,
				   "--core", "0", "--max-spread", "0.05",
				   "--min-interval-us",
				   "200", "--hgrm-dir", tmpdir, "--timeout-ms",
				   "180000", "--ack-wait-ms", "5000", NULL };

		assert_int_equal(proc_start(&st, out[1], stargv), 0);
		assert_int_equal(proc_wait_output(&st, "ready", 30000), 0);
	}
	{
		char *fhargv[] = { "tb-feedhandler", "-c", conf, "-s", (char *)stream,
				   "--session", SESSION, "--gap-timeout-ms", "100",
				   "--gap-retries", "8", "--timeout-ms", "180000",
				   "--linger-ms", "300", NULL };

		assert_int_equal(proc_start(&fh, out[2], fhargv), 0);
		assert_int_equal(proc_wait_output(&fh, "ready", 30000), 0);
	}
	sargv[n++] = "tb-feedsim";
	sargv[n++] = "--iface";
	sargv[n++] = "127.0.0.1";
	sargv[n++] = "--session";
	sargv[n++] = SESSION;
	sargv[n++] = "-N";
	sargv[n++] = "6";
	sargv[n++] = "--start-delay-ms";
	sargv[n++] = "1500";
	sargv[n++] = "--end-ms";
	sargv[n++] = "150000";
	for (; sargs && *sargs; sargs++)
		sargv[n++] = *sargs;
	sargv[n] = NULL;
	assert_int_equal(proc_start(&sim, out[3], sargv), 0);
	if (malformed) {
		usleep(300000); /* inside the start delay: the handler is reading */
		send_malformed();
	}
	r->fh_rc = proc_wait(&fh, 200000);
	r->st_rc = proc_wait(&st, 60000);
	kill(sim.pid, SIGTERM);
	kill(gw.pid, SIGTERM);
	assert_int_equal(proc_wait(&sim, 30000), 0);
	assert_int_equal(proc_wait(&gw, 30000), 0);
	r->sim = proc_output(&sim);
	r->fh = proc_output(&fh);
	r->st = proc_output(&st);
	r->gw = proc_output(&gw);
	fprintf(stderr, "%s:\n%s%s%s%s", name, r->sim, r->fh, r->st, r->gw);
}

static void run_free(run_t *r)
{
	free(r->sim);
	free(r->fh);
	free(r->st);
	free(r->gw);
}

static void assert_hgrm(const char *name, const char *hop)
{
	char path[512];
	struct stat sb;

	snprintf(path, sizeof(path), "%s/%s.%s.hgrm", tmpdir, name, hop);
	assert_int_equal(stat(path, &sb), 0);
	assert_true(sb.st_size > 100);
}

/* The whole story holds: see the top of the file. */
static void assert_t2t(const run_t *r, const char *name)
{
	static const char *const hops[] = {
		"feed_to_publish", "publish_to_receive", "receive_to_decision",
		"decision_to_send", "send_to_gateway", "tick_to_trade",
	};
	static const char *const same[] = {
		"quotes", "trades", "level_updates", "levels", "instruments",
		"statuses",
	};
	static const char *const cross[] = {
		"feed_to_publish_most_negative",
		"publish_to_receive_most_negative",
		"send_to_gateway_most_negative",
	};
	char a[64], b[64], key[64];
	uint64_t acks;
	size_t i;

	assert_int_equal(r->fh_rc, 0);
	assert_int_equal(r->st_rc, 0);
	assert_int_equal(F(r->fh, "ended"), 1);
	assert_int_equal(F(r->st, "closed"), 1);
	/* The feed: every sequence applied, gaps filled, books sound. */
	assert_int_equal(F(r->fh, "messages"), F(r->sim, "last_seq"));
	assert_int_equal(F(r->fh, "lost"), 0);
	assert_int_equal(F(r->fh, "stale"), 0);
	assert_int_equal(F(r->fh, "book_errors"), 0);
	assert_int_equal(F(r->fh, "filled"), F(r->fh, "feed_gaps"));
	/* Every book event became a message, and all went out. */
	assert_int_equal(F(r->fh, "book_events"),
			 F(r->fh, "quotes") + F(r->fh, "trades") + F(r->fh, "levels"));
	assert_true(F(r->fh, "level_updates") <= F(r->fh, "levels"));
	assert_int_equal(F(r->fh, "instruments"), NINST);
	/* tb-feedsim sends four system events, each a market state. */
	assert_int_equal(F(r->fh, "statuses"), 4);
	assert_int_equal(F(r->fh, "unsent"), 0);
	assert_int_equal(F(r->fh, "errors"), 0);
	assert_int_equal(F(r->fh, "published"),
			 F(r->fh, "quotes") + F(r->fh, "trades") +
			 F(r->fh, "level_updates") + F(r->fh, "instruments") +
			 F(r->fh, "statuses"));
	assert_true(F(r->fh, "quotes") > 0 && F(r->fh, "trades") > 0);
	/* The strategy got exactly that. */
	assert_int_equal(F(r->st, "messages"), F(r->fh, "published"));
	for (i = 0; i < sizeof(same) / sizeof(same[0]); i++)
		assert_int_equal(F(r->st, same[i]), F(r->fh, same[i]));
	assert_int_equal(F(r->st, "malformed"), 0);
	assert_int_equal(F(r->st, "unknown"), 0);
	assert_int_equal(F(r->st, "gaps"), 0);
	assert_int_equal(F(r->st, "laps"), 0);
	assert_int_equal(F(r->st, "lost"), 0);
	assert_int_equal(proc_field(r->fh, "top_checksum", a, sizeof(a)), 0);
	assert_int_equal(proc_field(r->st, "top_checksum", b, sizeof(b)), 0);
	assert_string_equal(a, b);
	/* Quotes and BookLevelUpdates tell the same book. */
	assert_true(F(r->st, "level_checks") > 0);
	assert_int_equal(F(r->st, "level_mismatch"), 0);
	/* Orders sent, all acked, the gateway saw each one once. */
	acks = F(r->st, "acks");
	assert_true(F(r->st, "orders") > 0);
	assert_int_equal(acks, F(r->st, "orders"));
	assert_int_equal(F(r->gw, "orders"), F(r->st, "orders"));
	assert_int_equal(F(r->st, "send_errors"), 0);
	assert_int_equal(F(r->st, "bad_acks") + F(r->st, "unmatched_acks"), 0);
	/* Per hop: one sample per acked order, stamps in order.  Within the
	 * strategy's thread strictly; across processes (feed handler ->
	 * strategy -> gateway) the stamps come from different cores' TSCs,
	 * which a virtual machine may not keep in step to the nanosecond, so
	 * a hop may read a little below zero there - never more than 5 us. */
	assert_int_equal(F(r->st, "receive_to_decision_negative"), 0);
	assert_int_equal(F(r->st, "decision_to_send_negative"), 0);
	for (i = 0; i < sizeof(cross) / sizeof(cross[0]); i++) {
		int64_t most;

		assert_int_equal(proc_field(r->st, cross[i], a, sizeof(a)), 0);
		most = strtoll(a, NULL, 10);
		if (most < -5000)
			fail_msg("%s = %" PRId64 " ns", cross[i], most);
	}
	for (i = 0; i < sizeof(hops) / sizeof(hops[0]); i++) {
		snprintf(key, sizeof(key), "%s_count", hops[i]);
		assert_int_equal(F(r->st, key), acks);
		snprintf(key, sizeof(key), "%s_max", hops[i]);
		assert_true(F(r->st, key) < 100000000000ull);
		assert_hgrm(name, hops[i]);
	}
	/* The whole is at least its slowest hop (same order, same clock). */
	for (i = 0; i + 1 < sizeof(hops) / sizeof(hops[0]); i++) {
		snprintf(key, sizeof(key), "%s_max", hops[i]);
		assert_true(F(r->st, "tick_to_trade_max") + 1000 >= F(r->st, key));
	}
}

static void test_shm_with_feed_loss(void **state)
{
	char *sargs[] = { "-n", "30000", "-r", "30000", "--drop", "0.03",
			  "-s", "21", NULL };
	run_t r;

	(void)state;
	run_t2t(&r, "shm", "md_shm", sargs, 1);
	assert_t2t(&r, "shm");
	assert_true(F(r.sim, "dropped") > 0);
	assert_true(F(r.fh, "feed_gaps") > 0);
	assert_int_equal(F(r.fh, "malformed"), 3);
	run_free(&r);
}

static void test_rc(void **state)
{
	char *sargs[] = { "-n", "20000", "-r", "20000", "-s", "22", NULL };
	run_t r;

	(void)state;
	run_t2t(&r, "rc", "md_rc", sargs, 0);
	assert_t2t(&r, "rc");
	assert_int_equal(F(r.fh, "malformed"), 0);
	assert_int_equal(F(r.fh, "feed_gaps"), 0);
	run_free(&r);
}

/* A strategy stopped (SIGSTOP) while the handler publishes on a small
 * lapping ring is overrun: it reports the laps and the ranges it lost. */
static void test_strategy_lapped(void **state)
{
	char out[3][256];
	char *stargv[] = { "tb-strategy", "-c", conf, "-s", "md_lap", "-g",
			   "127.0.0.1:9", "-n", "lapped", "--max-orders", "0",
			   "--timeout-ms", "120000", NULL };
	char *fhargv[] = { "tb-feedhandler", "-c", conf, "-s", "md_lap",
			   "--session", SESSION, "--timeout-ms", "120000", NULL };
	char *sargv[] = { "tb-feedsim", "--iface", "127.0.0.1", "--session",
			  SESSION, "-N", "6", "-n", "20000", "-r", "40000",
			  "--start-delay-ms", "300", "--end-ms", "150000", "-s",
			  "23", NULL };
	proc_t st, fh, sim;
	char *st_s, *fh_s;

	(void)state;
	snprintf(out[0], sizeof(out[0]), "%s/lap.st", tmpdir);
	snprintf(out[1], sizeof(out[1]), "%s/lap.fh", tmpdir);
	snprintf(out[2], sizeof(out[2]), "%s/lap.sim", tmpdir);
	/* The strategy first, so that it follows the handler's epoch from its
	 * first message; stopped before the feed starts. */
	assert_int_equal(proc_start(&st, out[0], stargv), 0);
	assert_int_equal(proc_wait_output(&st, "ready", 30000), 0);
	assert_int_equal(proc_start(&fh, out[1], fhargv), 0);
	assert_int_equal(proc_wait_output(&fh, "ready", 30000), 0);
	usleep(300000);
	kill(st.pid, SIGSTOP);
	assert_int_equal(proc_start(&sim, out[2], sargv), 0);
	assert_int_equal(proc_wait(&fh, 150000), 0);
	kill(st.pid, SIGCONT);
	assert_int_equal(proc_wait(&st, 60000), 0);
	kill(sim.pid, SIGTERM);
	assert_int_equal(proc_wait(&sim, 30000), 0);
	st_s = proc_output(&st);
	fh_s = proc_output(&fh);
	fprintf(stderr, "lapped:\n%s%s", fh_s, st_s);
	assert_true(F(st_s, "laps") > 0);
	assert_true(F(st_s, "lost") > 0);
	assert_true(F(st_s, "messages") + F(st_s, "lost") <= F(fh_s, "published"));
	assert_non_null(strstr(st_s, "loss kind="));
	assert_int_equal(F(st_s, "orders"), 0);
	free(st_s);
	free(fh_s);
}

/* SIGTERM stops both programs cleanly: exit 0 and a summary that says the
 * feed did not end and the stream did not close. */
static void test_signal_stops(void **state)
{
	char out[2][256], *text;
	char *stargv[] = { "tb-strategy", "-c", conf, "-s", "md_shm", "-g",
			   "127.0.0.1:9", "-n", "sig", "--core", "0",
			   "--timeout-ms", "120000", NULL };
	char *fhargv[] = { "tb-feedhandler", "-c", conf, "-s", "md_shm",
			   "--timeout-ms", "120000", NULL };
	proc_t st, fh;

	(void)state;
	snprintf(out[0], sizeof(out[0]), "%s/sig.st", tmpdir);
	snprintf(out[1], sizeof(out[1]), "%s/sig.fh", tmpdir);
	assert_int_equal(proc_start(&st, out[0], stargv), 0);
	assert_int_equal(proc_wait_output(&st, "ready", 30000), 0);
	assert_int_equal(proc_start(&fh, out[1], fhargv), 0);
	assert_int_equal(proc_wait_output(&fh, "ready", 30000), 0);
	kill(fh.pid, SIGTERM);
	assert_int_equal(proc_wait(&fh, 30000), 0);
	kill(st.pid, SIGTERM);
	assert_int_equal(proc_wait(&st, 30000), 0);
	text = proc_output(&fh);
	fprintf(stderr, "signal: %s", text);
	assert_int_equal(F(text, "ended"), 0);
	assert_int_equal(F(text, "published"), 0);
	free(text);
	text = proc_output(&st);
	fprintf(stderr, "signal: %s", text);
	assert_non_null(strstr(text, "strategy: name=sig "));
	assert_int_equal(F(text, "messages"), 0);
	assert_int_equal(F(text, "orders"), 0);
	free(text);
}

static void test_bad_arguments(void **state)
{
	static const char *cases[][8] = {
		{ "tb-feedhandler", "-s", "md_shm", NULL },                 /* no config */
		{ "tb-feedhandler", "-c", "CONF", NULL },                   /* no stream */
		{ "tb-feedhandler", "-c", "CONF", "-s", "md_shm", "-p", "0", NULL },
		{ "tb-feedhandler", "-c", "CONF", "-s", "md_shm", "-g", "not-an-ip", NULL },
		{ "tb-feedhandler", "-c", "CONF", "-s", "md_shm", "--instruments", "5000", NULL },
		{ "tb-feedhandler", "-c", "CONF", "-s", "md_shm", "--gap-retries", "x", NULL },
		{ "tb-feedhandler", "-c", "CONF", "-s", "md_shm", "extra", NULL },
		{ "tb-feedhandler", "-c", "CONF", "-s", "md_shm", "--session", "ELEVENCHARS", NULL },
		{ "tb-strategy", "-s", "md_shm", NULL },
		{ "tb-strategy", "-c", "CONF", "-s", "md_shm", "-g", "127.0.0.1", NULL },
		{ "tb-strategy", "-c", "CONF", "-s", "md_shm", "-g", "nohost:99", NULL },
		{ "tb-strategy", "-c", "CONF", "-s", "md_shm", "--max-spread", "-1", NULL },
		{ "tb-strategy", "-c", "CONF", "-s", "md_shm", "--qty", "0", NULL },
		{ "tb-strategy", "-c", "CONF", "-s", "md_shm", "--core", "99999", NULL },
		{ "tb-strategy", "-c", "CONF", "-s", "md_shm", "-n", "a/b", NULL },
		{ "tb-strategy", "-c", "CONF", "-s", "md_shm", "stray", NULL },
	};
	/* Set-up failures: exit 1 with the reason. */
	static const char *fail_cases[][6] = {
		{ "tb-feedhandler", "-c", "/nonexistent/t2t.ini", "-s", "md_shm", NULL },
		{ "tb-feedhandler", "-c", "CONF", "-s", "no_such_stream", NULL },
		{ "tb-strategy", "-c", "/nonexistent/t2t.ini", "-s", "md_shm", NULL },
		{ "tb-strategy", "-c", "CONF", "-s", "no_such_stream", NULL },
	};
	size_t i, j;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *argv[10], out[256], *text;

		for (j = 0; cases[i][j]; j++)
			argv[j] = strcmp(cases[i][j], "CONF") ? (char *)cases[i][j] : conf;
		argv[j] = NULL;
		snprintf(out, sizeof(out), "%s/badarg.%zu", tmpdir, i);
		assert_int_equal(scenario_run(out, argv, 30000, &text), 2);
		fprintf(stderr, "case %zu: %s", i, text);
		/* The tool names itself and what is wrong. */
		assert_non_null(strstr(text, cases[i][0]));
		assert_true(strstr(text, "bad value") || strstr(text, "required") ||
			    strstr(text, "unexpected argument"));
		free(text);
	}
	for (i = 0; i < sizeof(fail_cases) / sizeof(fail_cases[0]); i++) {
		char *argv[8], out[256], *text;

		for (j = 0; fail_cases[i][j]; j++)
			argv[j] = strcmp(fail_cases[i][j], "CONF") ?
				  (char *)fail_cases[i][j] : conf;
		argv[j] = NULL;
		snprintf(out, sizeof(out), "%s/badfail.%zu", tmpdir, i);
		assert_int_equal(scenario_run(out, argv, 30000, &text), 1);
		fprintf(stderr, "fail case %zu: %s", i, text);
		assert_non_null(strstr(text, fail_cases[i][0]));
		assert_true(strstr(text, "t2t.ini") != NULL);
		free(text);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_arguments),
		cmocka_unit_test(test_shm_with_feed_loss),
		cmocka_unit_test(test_rc),
		cmocka_unit_test(test_strategy_lapped),
		cmocka_unit_test(test_signal_stops),
	};
	int rc;

	if ((rc = proc_private_multicast_netns()) != 0)
		return rc;
	if (scenario_dir_make(tmpdir, sizeof(tmpdir), "tb-t2t-test") != 0) {
		perror("mkdtemp");
		return 1;
	}
	write_conf();
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	{
		char cmd[384];

		snprintf(cmd, sizeof(cmd), "rm -f /dev/shm/tickbus.t2t-test-%d "
			 "/dev/shm/tickbus.t2t-lap-%d", (int)getpid(), (int)getpid());
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove the test's rings\n");
		if (rc == 0) {
			snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
			if (system(cmd) != 0)
				fprintf(stderr, "could not remove %s\n", tmpdir);
		}
	}
	return rc;
}
