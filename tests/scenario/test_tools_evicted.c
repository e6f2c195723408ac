/*
 * Dropped by a live rc publisher, a tool goes on: tb-dump and tb-strategy
 * are stopped (SIGSTOP) longer than the stream's liveness timeout, so
 * that tb-publish, alive, drops them (TB_EVICTED); run again, each must
 * say so, reconnect and read to the end of the stream (TB_CLOSED), with
 * what it missed told as a loss: every message printed or lost, none
 * twice.  And with a recovery service: tb-dump, dropped, stays stopped
 * until the publisher has finished and gone; with no publisher left to
 * show it a gap, it must still ask the service for everything after its
 * last message and print the whole stream, in order, nothing lost.
 * On softrdma (run-tests.sh), with the real binaries.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/common/scenario.h"

#include <inttypes.h>

#define TOTAL 20000

static char dir[128], conf[192], rconf[192];
static unsigned rec_port;

/* Stream "feed" over rc, written to `path`, with `extra` keys after the
 * common ones: dropped 200 ms after its last liveness report; a ring of
 * 64 KiB (about 500 messages) so that the second a tool is frozen for
 * (5,000 messages) is gone from it when it comes back: it cannot read
 * them back, and has a loss to tell. */
static int write_conf(const char *path, const char *extra)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -1;
	fprintf(f, "[stream feed]\nid = 7\ntransport = rc\n"
		"control = 127.0.0.1:%u\ntoken = evict-me\nring_size = 64K\n"
		"idle = spin-then-yield\nheartbeat_ms = 20\n"
		"liveness_timeout_ms = 200\n%s", proc_free_port(), extra);
	return fclose(f);
}

static int setup(void **state)
{
	char extra[192];

	(void)state;
	if (scenario_dir_make(dir, sizeof(dir), "tb-tools-evicted") != 0)
		return -1;
	snprintf(conf, sizeof(conf), "%s/rc.ini", dir);
	/* The same stream recovered from tb-recoveryd, which fills its own
	 * holes from the publisher's retention. */
	rec_port = proc_free_port();
	snprintf(rconf, sizeof(rconf), "%s/rc-recovered.ini", dir);
	snprintf(extra, sizeof(extra), "recovery = 127.0.0.1:%u\n"
		 "recovery_timeout_ms = 15000\nretention = 100000\n"
		 "retention_endpoint = 127.0.0.1:%u\n", rec_port,
		 proc_free_port());
	return write_conf(conf, "") != 0 || write_conf(rconf, extra) != 0 ? -1 : 0;
}

static int teardown(void **state)
{
	(void)state;
	return scenario_cleanup(dir, NULL);
}

static void start_pub_of(proc_t *p, char *config)
{
	char out[256];
	char *argv[] = {"tb-publish", "-c", config, "-s", "feed", "--count",
			"20000", "--rate", "5000", "--start-delay-ms", "500",
			"--linger-ms", "300", NULL};

	snprintf(out, sizeof(out), "%s/pub.out", dir);
	assert_int_equal(proc_start(p, out, argv), 0);
}

static void start_pub(proc_t *p)
{
	start_pub_of(p, conf);
}

/* Waits for `text` in the output of `tool`, then stops it for a second:
 * five liveness timeouts. */
static void freeze(proc_t *tool, const char *text)
{
	assert_int_equal(proc_wait_output(tool, text, 60000), 0);
	assert_int_equal(kill(tool->pid, SIGSTOP), 0);
	usleep(1000000);
	assert_int_equal(kill(tool->pid, SIGCONT), 0);
}

static void dump_goes_on(void **state)
{
	static proc_t dump, pub;
	char out[256], *text, *sum;
	char *argv[] = {"tb-dump", "-c", conf, "-s", "feed", "--timeout-ms",
			"120000", NULL};

	(void)state;
	snprintf(out, sizeof(out), "%s/dump.out", dir);
	assert_int_equal(proc_start(&dump, out, argv), 0);
	start_pub(&pub);
	freeze(&dump, "\nseq=1000 ");
	assert_int_equal(proc_wait(&dump, 120000), 0);
	scenario_finish_pub(&pub, TOTAL, 60000);
	text = proc_output(&dump);
	assert_non_null(strstr(text, "tb-dump: dropped by the publisher; "
			       "reconnecting"));
	sum = strstr(text, "tb-dump: printed=");
	assert_non_null(sum);
	print_message("%.200s\n", sum);
	assert_non_null(strstr(sum, "end=closed"));
	assert_true(proc_field_u64(sum, "lost") > 0);
	assert_int_equal(proc_field_u64(sum, "printed") +
			 proc_field_u64(sum, "lost"), TOTAL);
	free(text);
}

static void strategy_goes_on(void **state)
{
	static proc_t strat, pub;
	char out[256], gw[64], *text, *sum;
	char *argv[] = {"tb-strategy", "-c", conf, "-s", "feed", "--gateway",
			gw, "--timeout-ms", "120000", "--ack-wait-ms", "0", NULL};

	(void)state;
	/* Nobody listens there: tb-publish's messages are no quotes, so no
	 * order is ever sent. */
	snprintf(gw, sizeof(gw), "127.0.0.1:%u", proc_free_port());
	snprintf(out, sizeof(out), "%s/strategy.out", dir);
	assert_int_equal(proc_start(&strat, out, argv), 0);
	assert_int_equal(proc_wait_output(&strat, "ready stream=feed", 60000), 0);
	start_pub(&pub);
	/* About 1,000 messages in. */
	usleep(700000);
	freeze(&strat, "ready");
	assert_int_equal(proc_wait(&strat, 120000), 0);
	scenario_finish_pub(&pub, TOTAL, 60000);
	text = proc_output(&strat);
	assert_non_null(strstr(text, "dropped by the publisher; reconnecting"));
	sum = strstr(text, "strategy: name=");
	assert_non_null(sum);
	assert_non_null(strstr(sum, "closed=1 "));
	assert_true(proc_field_u64(sum, "evictions") >= 1);
	assert_true(proc_field_u64(sum, "lost") > 0);
	assert_int_equal(proc_field_u64(sum, "messages") +
			 proc_field_u64(sum, "lost"), TOTAL);
	assert_int_equal(proc_field_u64(sum, "first_seq"), 1);
	assert_int_equal(proc_field_u64(sum, "last_seq"), TOTAL);
	free(text);
}

/* The messages tb-dump printed (its "seq=" lines) are exactly 1..n, in
 * order, once each. */
static void expect_seqs_1_to_n(const char *text, uint64_t n)
{
	uint64_t want = 1;

	for (const char *p = text; (p = strstr(p, "seq=")) != NULL; p += 4) {
		if (p != text && p[-1] != '\n')
			continue; /* not a message line */
		if (strtoull(p + 4, NULL, 10) != want)
			fail_msg("printed seq=%llu where %llu belongs",
				 strtoull(p + 4, NULL, 10),
				 (unsigned long long)want);
		want++;
	}
	assert_int_equal(want - 1, n);
}

static void dropped_then_publisher_gone_recovers_the_rest(void **state)
{
	static proc_t dump, pub, rd;
	char out[256], store[256], listen[64], count[32], *text, *sum;
	char *rd_argv[] = {"tb-recoveryd", "-c", rconf, "-s", "feed", "--dir",
			   store, "--listen", listen, NULL};
	char *argv[] = {"tb-dump", "-c", rconf, "-s", "feed", "--count", count,
			"--timeout-ms", "120000", NULL};

	(void)state;
	snprintf(count, sizeof(count), "%d", TOTAL);
	snprintf(store, sizeof(store), "%s/store", dir);
	snprintf(listen, sizeof(listen), "127.0.0.1:%u", rec_port);
	snprintf(out, sizeof(out), "%s/recoveryd.out", dir);
	assert_int_equal(proc_start(&rd, out, rd_argv), 0);
	snprintf(out, sizeof(out), "%s/dump.out", dir);
	assert_int_equal(proc_start(&dump, out, argv), 0);
	start_pub_of(&pub, rconf);
	/* Stopped at message 1,000 until the publisher has published all
	 * and exited: dropped, and nothing will ever come over rc again. */
	assert_int_equal(proc_wait_output(&dump, "\nseq=1000 ", 60000), 0);
	assert_int_equal(kill(dump.pid, SIGSTOP), 0);
	scenario_finish_pub(&pub, TOTAL, 60000);
	assert_int_equal(kill(dump.pid, SIGCONT), 0);
	/* It asks tb-recoveryd for what followed its last message and
	 * prints to the count, not waiting for a publisher that is gone. */
	assert_int_equal(proc_wait(&dump, 60000), 0);
	text = proc_output(&dump);
	assert_non_null(strstr(text, "tb-dump: dropped by the publisher; "
			       "reconnecting"));
	sum = strstr(text, "tb-dump: printed=");
	assert_non_null(sum);
	print_message("%.200s\n", sum);
	assert_non_null(strstr(sum, "end=count"));
	assert_int_equal(proc_field_u64(sum, "printed"), TOTAL);
	assert_int_equal(proc_field_u64(sum, "lost"), 0);
	expect_seqs_1_to_n(text, TOTAL);
	free(text);
	assert_int_equal(kill(rd.pid, SIGTERM), 0);
	assert_int_equal(proc_wait(&rd, 20000), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(dump_goes_on, setup, teardown),
		cmocka_unit_test_setup_teardown(strategy_goes_on, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			dropped_then_publisher_gone_recovers_the_rest, setup,
			teardown),
	};

	return cmocka_run_group_tests_name("tools_evicted", tests, NULL, NULL);
}
