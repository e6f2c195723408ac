/*
 * Dropped by a live rc publisher, a tool goes on: tb-dump and tb-strategy
 * are stopped (SIGSTOP) longer than the stream's liveness timeout, so
 * that tb-publish, alive, drops them (TB_EVICTED); run again, each must
 * say so, reconnect and read to the end of the stream (TB_CLOSED), with
 * what it missed told as a loss: every message printed or lost, none
 * twice.  On softrdma (run-tests.sh), with the real binaries.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/common/scenario.h"

#include <inttypes.h>

#define TOTAL 20000

static char dir[128], conf[192];

static int setup(void **state)
{
	FILE *f;

	(void)state;
	if (scenario_dir_make(dir, sizeof(dir), "tb-tools-evicted") != 0)
		return -1;
	snprintf(conf, sizeof(conf), "%s/rc.ini", dir);
	f = fopen(conf, "w");
	if (!f)
		return -1;
	/* Dropped 200 ms after its last liveness report; a ring of 64 KiB
	 * (about 500 messages) so that the second it is frozen for (5,000
	 * messages) is gone from it when it comes back: it cannot read them
	 * back, and has a loss to tell. */
	fprintf(f, "[stream feed]\nid = 7\ntransport = rc\n"
		"control = 127.0.0.1:%u\ntoken = evict-me\nring_size = 64K\n"
		"idle = spin-then-yield\nheartbeat_ms = 20\n"
		"liveness_timeout_ms = 200\n", proc_free_port());
	fclose(f);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return scenario_cleanup(dir, NULL);
}

static void start_pub(proc_t *p)
{
	char out[256];
	char *argv[] = {"tb-publish", "-c", conf, "-s", "feed", "--count",
			"20000", "--rate", "5000", "--start-delay-ms", "500",
			"--linger-ms", "300", NULL};

	snprintf(out, sizeof(out), "%s/pub.out", dir);
	assert_int_equal(proc_start(p, out, argv), 0);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(dump_goes_on, setup, teardown),
		cmocka_unit_test_setup_teardown(strategy_goes_on, setup,
						teardown),
	};

	return cmocka_run_group_tests_name("tools_evicted", tests, NULL, NULL);
}
