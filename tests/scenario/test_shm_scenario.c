/*
 * Multi-process shm scenarios with the real binaries: one tb-publish, several
 * tb-subscribe processes, each ending with proof of what was delivered.
 *
 *  - three subscribers, 1,000,000 messages: each delivers exactly 1..N in
 *    order with the publisher's checksum;
 *  - a slow subscriber is lapped, told every lost range exactly, while the
 *    fast ones lose nothing;
 *  - a publisher killed with SIGKILL is reported by its readers.
 *
 * The publisher is paced so that the ring holds seconds of traffic: on a
 * shared 2-core machine a subscriber may lose its core for a while, and this
 * test is about correctness, not speed (that is `make bench`).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/common/scenario.h"

#include <inttypes.h>

static char dir[128];
static char ring[192];

static int setup(void **state)
{
	(void)state;
	if (scenario_dir_make(dir, sizeof(dir), "tb-scenario") != 0)
		return -1;
	snprintf(ring, sizeof(ring), "/dev/shm/tb-scenario.%d", (int)getpid());
	unlink(ring);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return scenario_cleanup(dir, ring);
}

static void start_sub(proc_t *p, const char *name, const char *count,
		      const char *slow_ns)
{
	char *where[] = {"--shm", ring, NULL};
	char *slow[] = {"--slow-ns", (char *)slow_ns, NULL};

	scenario_start_sub(p, dir, name, where, count, "240000",
			   slow_ns ? slow : NULL);
}

static void start_pub(proc_t *p, const char *count, const char *rate,
		      const char *ring_size)
{
	char out[256];
	char *argv[] = {"tb-publish", "--shm", ring, "--ring", (char *)ring_size,
			"--count", (char *)count, "--rate", (char *)rate,
			"--start-delay-ms", "300", NULL};

	snprintf(out, sizeof(out), "%s/pub.out", dir);
	assert_int_equal(proc_start(p, out, argv), 0);
}

static void three_subscribers_get_a_million_in_order(void **state)
{
	proc_t pub, sub[3];
	uint64_t checksum;
	char name[16];
	int i;

	(void)state;
	for (i = 0; i < 3; i++) {
		snprintf(name, sizeof(name), "sub%d", i);
		start_sub(&sub[i], name, "1000000", NULL);
	}
	/* 64 MiB holds 700,000 96-byte frames: seconds of slack at this rate. */
	start_pub(&pub, "1000000", "250000", "67108864");
	checksum = scenario_finish_pub(&pub, 1000000, 120000);
	for (i = 0; i < 3; i++)
		free(expect_sub_complete(&sub[i], 1000000, checksum, 120000));
}

static void slow_subscriber_is_lapped_others_lose_nothing(void **state)
{
	proc_t pub, fast[2], slow;
	uint64_t checksum;
	char *out;

	(void)state;
	start_sub(&fast[0], "fast0", "300000", NULL);
	start_sub(&fast[1], "fast1", "300000", NULL);
	/* 20 us a message: 50,000 a second against 100,000 published. */
	start_sub(&slow, "slow", "300000", "20000");
	start_pub(&pub, "300000", "100000", "4194304");
	checksum = scenario_finish_pub(&pub, 0, 120000);
	for (int i = 0; i < 2; i++)
		free(expect_sub_complete(&fast[i], 300000, checksum, 120000));
	assert_int_equal(proc_wait(&slow, 120000), 0);
	out = proc_output(&slow);
	/* Every sequence was either delivered or reported lost, in order. */
	expect_lapped(out, 300000);
	assert_int_equal(proc_field_u64(out, "last"), 300000);
	free(out);
}

static void killed_publisher_is_reported_by_readers(void **state)
{
	proc_t pub, sub[2];
	char *out;
	int i;

	(void)state;
	start_sub(&sub[0], "r0", "0", NULL);
	start_sub(&sub[1], "r1", "0", NULL);
	start_pub(&pub, "100000000", "20000", "4194304");
	usleep(1500000);
	assert_int_equal(kill(pub.pid, SIGKILL), 0);
	assert_int_equal(proc_wait(&pub, 5000), 128 + SIGKILL);
	for (i = 0; i < 2; i++) {
		/* Exit status 3: "publisher died". */
		assert_int_equal(proc_wait(&sub[i], 20000), 3);
		out = proc_output(&sub[i]);
		print_message("%s", out);
		assert_non_null(strstr(out, "end=dead"));
		assert_true(proc_field_u64(out, "delivered") > 1000);
		assert_int_equal(proc_field_u64(out, "first"), 1);
		assert_int_equal(proc_field_u64(out, "order_errors"), 0);
		assert_int_equal(proc_field_u64(out, "lost"), 0);
		free(out);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(three_subscribers_get_a_million_in_order, setup, teardown),
		cmocka_unit_test_setup_teardown(slow_subscriber_is_lapped_others_lose_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(killed_publisher_is_reported_by_readers, setup, teardown),
	};
	return cmocka_run_group_tests_name("shm_scenario", tests, NULL, NULL);
}
