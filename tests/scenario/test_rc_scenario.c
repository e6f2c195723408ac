/*
 * Multi-process rc scenarios on softrdma with the real binaries: one
 * tb-publish, several tb-subscribe processes, each ending with proof of what
 * was delivered.
 *
 *  - four subscribers, 1,000,000 messages on a back-pressured stream: each
 *    delivers exactly 1..N in order with the publisher's checksum;
 *  - a slow subscriber on a lapping stream is skipped and told every lost
 *    range, while the others lose nothing;
 *  - a subscriber killed with SIGKILL mid-stream: the others are unaffected
 *    and the publisher never stalls;
 *  - a subscriber that restarts reconnects and follows from the live point;
 *  - a subscriber with the wrong token is rejected and gets nothing;
 *  - a subscriber lapped by a burst after which the stream goes quiet is
 *    told the exact range within one heartbeat of having everything
 *    before it (this test's subscriber runs in the test process, to time
 *    the report);
 *  - on softrdma's strict device, each process a host of its own: both
 *    ends on InfiniBand ports (LIDs, no GRH); a publisher whose port MTU
 *    is below its subscriber's, with frames of several packets (the
 *    packet length rule holds only if both QPs use the one path MTU); a
 *    device that grants less inline data than asked; the subscriber's
 *    GID changing mid-stream (softrdma-ctl): it reads the asynchronous
 *    event, connects again at its new address and goes on, every loss
 *    told; and when the publisher dies while it connects again, it
 *    reports the publisher dead, as a silent one's, within the liveness
 *    timeout;
 *  - batch_us: bursts posted as one chain per subscriber reach two
 *    subscribers whole.
 *
 * run-tests.sh points LD_LIBRARY_PATH at softrdma and gives this test its
 * own SOFTRDMA_FABRIC; `make test-rdma` runs it on a real device instead
 * (TICKBUS_RDMA_DEVICE and TICKBUS_RDMA_PORT name the port it chose).  Each
 * test's control port is one the kernel says is free.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/common/scenario.h"
#include <tickbus/tickbus.h>

#include <inttypes.h>
#include <time.h>

static char dir[128];
static char conf[192];
static char conf_bad[192];   /* the same stream, another token */
static int port;

/* Subscribers' liveness timeout in the next write_conf (then 3 s again). */
static int liveness_ms = 3000;
/* Lines added to the stream in the next write_conf (then none again). */
static const char *conf_extra = "";

static void write_conf(const char *policy, const char *ring)
{
	FILE *f = fopen(conf, "w");

	assert_non_null(f);
	fprintf(f, "[stream feed]\nid = 7\ntransport = rc\ncontrol = 127.0.0.1:%d\n"
		"token = good-token\nring_size = %s\nslow_consumer = %s\n"
		"idle = spin-then-yield\nheartbeat_ms = 50\nliveness_timeout_ms = %d\n",
		port, ring, policy, liveness_ms);
	fputs(conf_extra, f);
	liveness_ms = 3000;
	conf_extra = "";
	/* make test-rdma: the real device it found. */
	if (getenv("TICKBUS_RDMA_DEVICE") && getenv("TICKBUS_RDMA_DEVICE")[0])
		fprintf(f, "rdma_device = %s\n", getenv("TICKBUS_RDMA_DEVICE"));
	if (getenv("TICKBUS_RDMA_PORT") && getenv("TICKBUS_RDMA_PORT")[0])
		fprintf(f, "rdma_port = %s\n", getenv("TICKBUS_RDMA_PORT"));
	fclose(f);
	f = fopen(conf_bad, "w");
	assert_non_null(f);
	fprintf(f, "[stream feed]\nid = 7\ntransport = rc\ncontrol = 127.0.0.1:%d\n"
		"token = bad-token\nring_size = %s\n", port, ring);
	fclose(f);
}

static int setup(void **state)
{
	(void)state;
	if (scenario_dir_make(dir, sizeof(dir), "tb-rc-scenario") != 0)
		return -1;
	snprintf(conf, sizeof(conf), "%s/rc.ini", dir);
	snprintf(conf_bad, sizeof(conf_bad), "%s/rc-bad.ini", dir);
	/* A port the kernel says is free now: one derived from the pid
	 * meets other tests' listeners on a shared machine. */
	port = (int)proc_free_port();
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return scenario_cleanup(dir, NULL);
}

static void start_sub(proc_t *p, const char *name, const char *stream,
		      const char *count, const char *slow_ns)
{
	char *where[] = {"-c", strcmp(stream, "wrongtoken") == 0 ? conf_bad : conf,
			 "-s", "feed", NULL};
	char *slow[] = {"--slow-ns", (char *)slow_ns, NULL};

	scenario_start_sub(p, dir, name, where, count, "240000",
			   slow_ns ? slow : NULL);
}

/* tb-publish, once `subs` subscribers are connected (a loaded machine
 * may take seconds to start them), then after `delay_ms` more. */
static void start_pub(proc_t *p, const char *count, const char *rate,
		      const char *subs, const char *delay_ms)
{
	char out[256];
	char *argv[] = {"tb-publish", "-c", conf, "-s", "feed", "--count",
			(char *)count, "--rate", (char *)rate,
			"--wait-subscribers", (char *)subs, "--start-delay-ms",
			(char *)delay_ms, "--linger-ms", "200", NULL};

	snprintf(out, sizeof(out), "%s/pub.out", dir);
	assert_int_equal(proc_start(p, out, argv), 0);
}

/* Sets (set = 1) or removes the variables of `env`, "NAME=value[
 * NAME=value]" (NULL: none), around starting a process. */
static void env_apply(const char *env, int set)
{
	char e[256], *save = NULL;

	snprintf(e, sizeof(e), "%s", env ? env : "");
	for (char *kv = strtok_r(e, " ", &save); kv; kv = strtok_r(NULL, " ", &save)) {
		char *eq = strchr(kv, '=');

		assert_non_null(eq);
		*eq = '\0';
		if (set)
			assert_int_equal(setenv(kv, eq + 1, 1), 0);
		else
			unsetenv(kv);
	}
}

/* tb-publish with `size`-byte payloads, in an environment of its own. */
static void start_pub_env(proc_t *p, const char *count, const char *size,
			  const char *env)
{
	char out[256];
	char *argv[] = {"tb-publish", "-c", conf, "-s", "feed", "--count",
			(char *)count, "--rate", "20000", "--size", (char *)size,
			"--wait-subscribers", "1", "--start-delay-ms", "200",
			"--linger-ms", "200", NULL};

	snprintf(out, sizeof(out), "%s/pub.out", dir);
	env_apply(env, 1);
	assert_int_equal(proc_start(p, out, argv), 0);
	env_apply(env, 0);
}

/* tb-subscribe as `name`, in an environment of its own. */
static void start_sub_env(proc_t *p, const char *name, const char *count,
			  const char *env)
{
	char *where[] = {"-c", conf, "-s", "feed", NULL};

	env_apply(env, 1);
	scenario_start_sub(p, dir, name, where, count, "120000", NULL);
	env_apply(env, 0);
}

/* batch_us on rc: frames held per subscriber and posted as chains, in
 * bursts of 20 (a full chain of 16 posted at once, the other 4 at the
 * flush that ends the burst), through wraps of both rings, signalled
 * requests and back-pressure; the last 3 frames leave at the final
 * flush.  Two subscribers each get exactly 1..N with the checksum. */
static void batched_bursts_reach_two_subscribers_whole(void **state)
{
	proc_t pub, sub[2];
	char out[256];
	char *argv[] = {"tb-publish", "-c", conf, "-s", "feed", "--count",
			"100003", "--burst", "20", "--rate", "2000",
			"--wait-subscribers", "2", "--start-delay-ms", "200",
			"--linger-ms", "200", NULL};
	uint64_t checksum;

	(void)state;
	conf_extra = "batch_us = 50\n";
	write_conf("backpressure", "1M");
	start_sub(&sub[0], "batch0", "feed", "100003", NULL);
	start_sub(&sub[1], "batch1", "feed", "100003", NULL);
	snprintf(out, sizeof(out), "%s/pub.out", dir);
	assert_int_equal(proc_start(&pub, out, argv), 0);
	checksum = scenario_finish_pub(&pub, 100003, 120000);
	for (int i = 0; i < 2; i++)
		free(expect_sub_complete(&sub[i], 100003, checksum, 60000));
}

/* Bursts of 20, each offered with one tb_pub_offerv (tb-publish
 * --offerv: one clock reading a burst, the bursts' ends flushed), into a
 * back-pressure stream, through wraps of both rings and the signalled
 * requests: the subscriber gets exactly 1..N with the checksum. */
static void offerv_bursts_reach_a_subscriber_whole(void **state)
{
	proc_t pub, sub;
	char out[256];
	char *argv[] = {"tb-publish", "-c", conf, "-s", "feed", "--count",
			"50003", "--burst", "20", "--offerv", "--rate", "2000",
			"--wait-subscribers", "1", "--start-delay-ms", "200",
			"--linger-ms", "200", NULL};
	uint64_t checksum;

	(void)state;
	write_conf("backpressure", "1M");
	start_sub(&sub, "offerv", "feed", "50003", NULL);
	snprintf(out, sizeof(out), "%s/pub.out", dir);
	assert_int_equal(proc_start(&pub, out, argv), 0);
	checksum = scenario_finish_pub(&pub, 50003, 120000);
	free(expect_sub_complete(&sub, 50003, checksum, 60000));
}

/* Back-pressure when the publisher's own completions lag: its device
 * runs each request no sooner than 3 us after the one before
 * (SOFTRDMA_DELAY_NS), so requests pile up in flight faster than they
 * complete, and its 64 KiB ring would soon overwrite frames they still
 * read.  A lapping stream drops such a subscriber; a back-pressure stream
 * must wait for the completions instead.  As fast as it can, in bursts of
 * 64 a tb_pub_offerv: the subscriber gets exactly 1..N, never lapped nor
 * dropped. */
static void back_pressure_waits_for_lagging_completions(void **state)
{
	proc_t pub, sub;
	char out[256];
	char *argv[] = {"tb-publish", "-c", conf, "-s", "feed", "--count",
			"20003", "--burst", "64", "--offerv",
			"--wait-subscribers", "1", "--start-delay-ms", "200",
			"--linger-ms", "200", NULL};
	uint64_t checksum;

	(void)state;
	write_conf("backpressure", "64K");
	start_sub(&sub, "lagging", "feed", "20003", NULL);
	snprintf(out, sizeof(out), "%s/pub.out", dir);
	env_apply("SOFTRDMA_DELAY_NS=3000", 1);
	assert_int_equal(proc_start(&pub, out, argv), 0);
	env_apply("SOFTRDMA_DELAY_NS=3000", 0);
	checksum = scenario_finish_pub(&pub, 20003, 120000);
	free(expect_sub_complete(&sub, 20003, checksum, 60000));
}

/* Both ends on InfiniBand ports: addressed by LID (no GRH), at the
 * service level the publisher names. */
static void infiniband_ports_carry_the_stream(void **state)
{
	proc_t pub, sub;
	uint64_t checksum;

	(void)state;
	if (getenv("TICKBUS_RDMA_DEVICE")) {
		print_message("on a real device: its own link layer decides\n");
		return;
	}
	write_conf("backpressure", "4M");
	start_sub_env(&sub, "ib", "20000", "SOFTRDMA_LINK_LAYER=ib SOFTRDMA_LID=21");
	start_pub_env(&pub, "20000", "64", "SOFTRDMA_LINK_LAYER=ib SOFTRDMA_LID=20");
	checksum = scenario_finish_pub(&pub, 20000, 120000);
	free(expect_sub_complete(&sub, 20000, checksum, 60000));
}

/* The publisher's port MTU (1024) is below the subscriber's (4096):
 * frames of 3000 bytes travel as three packets of the one path MTU both
 * QPs use; a subscriber at its own MTU would refuse the first. */
static void ports_with_different_mtus_agree_on_one(void **state)
{
	proc_t pub, sub;
	uint64_t checksum;

	(void)state;
	if (getenv("TICKBUS_RDMA_DEVICE")) {
		print_message("on a real device: the ports' own MTUs decide\n");
		return;
	}
	write_conf("backpressure", "4M");
	start_sub_env(&sub, "mtu4096", "20000", "SOFTRDMA_PORT_MTU=4096");
	start_pub_env(&pub, "20000", "3000", "SOFTRDMA_PORT_MTU=1024");
	checksum = scenario_finish_pub(&pub, 20000, 120000);
	free(expect_sub_complete(&sub, 20000, checksum, 60000));
}

/* 20,000 messages of `size` bytes on a `policy` stream from a publisher
 * whose device grants the inline data `grant` says (an environment
 * setting): all arrive, with their checksum. */
static void through_a_grant(const char *policy, const char *size,
			    const char *grant)
{
	proc_t pub, sub;
	uint64_t checksum;

	if (getenv("TICKBUS_RDMA_DEVICE")) {
		print_message("on a real device: its own grant decides\n");
		return;
	}
	write_conf(policy, "4M");
	start_sub(&sub, "grant", "feed", "20000", NULL);
	start_pub_env(&pub, "20000", size, grant);
	checksum = scenario_finish_pub(&pub, 20000, 120000);
	free(expect_sub_complete(&sub, 20000, checksum, 60000));
}

/* A device that grants 100 bytes of inline data where 220 were asked:
 * frames between 101 and 220 bytes go by reference, not inline (which it
 * would refuse). */
static void a_device_granting_less_inline(void **state)
{
	(void)state;
	through_a_grant("backpressure", "150", "SOFTRDMA_GRANT_INLINE=100");
}

/* A device that grants 64 bytes of inline data, less than a small offer's
 * frame (a 64-byte message: 96 bytes): the offer's inline send, which is
 * a lapping stream's, must send every frame by reference, not inline
 * (which it would refuse). */
static void a_device_granting_less_than_a_small_frame(void **state)
{
	(void)state;
	through_a_grant("lap", "64", "SOFTRDMA_GRANT_INLINE=64");
}

/* softrdma-ctl with `args` (NULL-terminated, at most 12) on this test's
 * fabric; its exit status. */
static int softrdma_ctl(char *const args[])
{
	char out[256], *argv[16], *text;
	int i = 0, rc;

	snprintf(out, sizeof(out), "%s/ctl.out", dir);
	/* proc_start runs argv[0] from the build's bin/ */
	argv[i++] = "../softrdma/softrdma-ctl";
	argv[i++] = "-f";
	argv[i++] = getenv("SOFTRDMA_FABRIC") ? getenv("SOFTRDMA_FABRIC") : "default";
	for (; *args && i < 15; args++)
		argv[i++] = *args;
	argv[i] = NULL;
	rc = scenario_run(out, argv, 10000, &text);
	print_message("softrdma-ctl: %s", text);
	free(text);
	return rc;
}

/* The subscriber's GID (index 3, ::ffff:127.0.0.1) becomes ::ffff:127.0.0.2
 * mid-stream: writes to the old one are lost from then on.  It reads the
 * GID_CHANGE event, connects again from its new address and goes on:
 * every sequence delivered or told lost, in order, to the end. */
static void a_new_gid_means_a_new_connection(void **state)
{
	proc_t pub, sub;
	char pid[16], *out;
	char *gid[] = {"gid", pid, "3", "::ffff:127.0.0.2", "v2", NULL};
	int rc;

	(void)state;
	if (getenv("TICKBUS_RDMA_DEVICE")) {
		print_message("on a real device: no softrdma-ctl\n");
		return;
	}
	write_conf("lap", "4M");
	start_sub(&sub, "gid", "feed", "60000", NULL);
	start_pub(&pub, "60000", "20000", "1", "1500");
	usleep(2500000);   /* a second into the stream */
	snprintf(pid, sizeof(pid), "%d", (int)sub.pid);
	assert_int_equal(softrdma_ctl(gid), 0);
	scenario_finish_pub(&pub, 60000, 200000);
	/* Not ended by then: SIGTERM, for its summary (end=signal) of where
	 * it stopped. */
	if (proc_wait_output(&sub, "end=", 60000) != 0)
		kill(sub.pid, SIGTERM);
	rc = proc_wait(&sub, 10000);
	out = proc_output(&sub);
	print_message("%s", out);
	assert_int_equal(rc, 0);
	assert_int_equal(proc_field_u64(out, "last"), 60000);
	assert_int_equal(proc_field_u64(out, "order_errors"), 0);
	assert_int_equal(proc_field_u64(out, "bad_payload"), 0);
	assert_int_equal(proc_field_u64(out, "delivered") + proc_field_u64(out, "lost"),
			 60000 - proc_field_u64(out, "first") + 1);
	free(out);
}

/* The publisher stops (SIGSTOP: no heartbeat, its socket still open) and
 * the subscriber's GID changes at once: the session ends on the
 * subscriber's side (RECONNECT), long before the silence could be judged.
 * The publisher is then killed while the subscriber dials it again, and
 * every dial is refused from then on.  The subscriber, which heard its
 * last heartbeat when it stopped, reports it dead (end=dead) about the
 * liveness timeout later, every sequence delivered or told lost, in
 * order; without that report it would poll TB_NOT_CONNECTED for ever. */
static void publisher_dead_while_reconnecting_is_reported(void **state)
{
	proc_t pub, sub;
	char pid[16], end[16], *out;
	char *gid[] = {"gid", pid, "3", "::ffff:127.0.0.2", "v2", NULL};
	uint64_t killed_ms;
	int rc;

	(void)state;
	if (getenv("TICKBUS_RDMA_DEVICE")) {
		print_message("on a real device: no softrdma-ctl\n");
		return;
	}
	write_conf("lap", "4M");   /* liveness 3 s */
	setenv("TICKBUS_QUIET", "0", 1);   /* the subscriber's warnings, please */
	start_sub(&sub, "unreached", "feed", "1000000", NULL);
	setenv("TICKBUS_QUIET", "1", 1);
	start_pub(&pub, "1000000", "20000", "1", "1500");
	usleep(2500000);   /* a second into the stream */
	assert_int_equal(kill(pub.pid, SIGSTOP), 0);
	snprintf(pid, sizeof(pid), "%d", (int)sub.pid);
	assert_int_equal(softrdma_ctl(gid), 0);
	assert_int_equal(proc_wait_output(&sub, "our address changed", 10000), 0);
	assert_int_equal(kill(pub.pid, SIGKILL), 0);
	assert_int_equal(proc_wait(&pub, 5000), 128 + SIGKILL);
	killed_ms = proc_now_ms();
	/* Ten times the liveness timeout, for a busy machine.  Not ended by
	 * then: SIGTERM, for its summary (end=signal). */
	if (proc_wait_output(&sub, "end=", 30000) != 0)
		kill(sub.pid, SIGTERM);
	rc = proc_wait(&sub, 10000);
	out = proc_output(&sub);
	print_message("%s", out);
	print_message("ended %" PRIu64 " ms after the publisher was killed\n",
		      proc_now_ms() - killed_ms);
	assert_int_equal(proc_field(out, "end", end, sizeof(end)), 0);
	assert_string_equal(end, "dead");
	assert_int_equal(rc, 3);
	/* Its end came by way of the reconnect, not the silence. */
	assert_null(strstr(out, "no heartbeat from the publisher"));
	assert_int_equal(proc_field_u64(out, "first"), 1);
	assert_true(proc_field_u64(out, "last") > 1);
	assert_int_equal(proc_field_u64(out, "order_errors"), 0);
	assert_int_equal(proc_field_u64(out, "bad_payload"), 0);
	assert_int_equal(proc_field_u64(out, "delivered") + proc_field_u64(out, "lost"),
			 proc_field_u64(out, "last"));
	free(out);
}

/* --wait-subscribers with nobody coming: tb-publish gives up at
 * --wait-ms, says how many came, and publishes nothing. */
static void waiting_for_subscribers_gives_up_in_time(void **state)
{
	proc_t pub;
	char out[256], *text;
	char *argv[] = {"tb-publish", "-c", conf, "-s", "feed", "--count", "10",
			"--wait-subscribers", "1", "--wait-ms", "300", NULL};
	uint64_t t0;

	(void)state;
	write_conf("lap", "4M");
	snprintf(out, sizeof(out), "%s/pub.out", dir);
	t0 = tb_clock_mono_ms();
	assert_int_equal(proc_start(&pub, out, argv), 0);
	assert_int_equal(proc_wait(&pub, 30000), 1);
	assert_true(tb_clock_mono_ms() - t0 >= 300);
	text = proc_output(&pub);
	print_message("%s", text);
	assert_non_null(strstr(text, "0 of 1 subscribers connected after 300 ms; "
				 "not publishing"));
	assert_null(strstr(text, "published="));
	free(text);
}

static void four_subscribers_get_a_million_in_order(void **state)
{
	proc_t pub, sub[4];
	uint64_t checksum;
	char name[16];

	(void)state;
	/* Back-pressure: on a shared 2-core machine a subscriber may lose
	 * its core for a while; this test is about exactness. */
	write_conf("backpressure", "4M");
	for (int i = 0; i < 4; i++) {
		snprintf(name, sizeof(name), "sub%d", i);
		start_sub(&sub[i], name, "feed", "1000000", NULL);
	}
	start_pub(&pub, "1000000", "0", "4", "200");
	checksum = scenario_finish_pub(&pub, 1000000, 200000);
	for (int i = 0; i < 4; i++)
		free(expect_sub_complete(&sub[i], 1000000, checksum, 120000));
}

static void slow_subscriber_is_lapped_others_lose_nothing(void **state)
{
	proc_t pub, fast[2], slow;
	uint64_t checksum;
	char *out;

	(void)state;
	write_conf("lap", "1M");
	start_sub(&fast[0], "fast0", "feed", "100000", NULL);
	start_sub(&fast[1], "fast1", "feed", "100000", NULL);
	/* 200 us a message: 5,000 a second against 20,000 published. */
	start_sub(&slow, "slow", "feed", "100000", "200000");
	start_pub(&pub, "100000", "20000", "3", "200");
	checksum = scenario_finish_pub(&pub, 100000, 200000);
	for (int i = 0; i < 2; i++)
		free(expect_sub_complete(&fast[i], 100000, checksum, 120000));
	assert_int_equal(proc_wait(&slow, 120000), 0);
	out = proc_output(&slow);
	/* Every sequence was either delivered or reported lost, in order. */
	expect_lapped(out, 100000);
	assert_int_equal(proc_field_u64(out, "first"), 1);
	free(out);
}

static void killed_subscriber_does_not_stall_the_others(void **state)
{
	proc_t pub, sub[2], victim;
	uint64_t checksum;
	char *out;

	(void)state;
	write_conf("lap", "4M");
	start_sub(&sub[0], "keep0", "feed", "60000", NULL);
	start_sub(&sub[1], "keep1", "feed", "60000", NULL);
	start_sub(&victim, "victim", "feed", "60000", NULL);
	start_pub(&pub, "60000", "20000", "3", "1500");
	usleep(2500000);   /* all three connected, 1.5 s, then traffic */
	assert_int_equal(kill(victim.pid, SIGKILL), 0);
	assert_int_equal(proc_wait(&victim, 5000), 128 + SIGKILL);
	checksum = scenario_finish_pub(&pub, 60000, 200000);
	for (int i = 0; i < 2; i++)
		free(expect_sub_complete(&sub[i], 60000, checksum, 120000));
	/* The publisher never waited for the dead one: a stall would have
	 * held it at the retry timeout for every frame. */
	out = proc_output(&pub);
	assert_true(strtod(strstr(out, "seconds=") + 8, NULL) < 3 * 3.0 + 5);
	free(out);
}

static void restarted_subscriber_reconnects(void **state)
{
	proc_t pub, first, again;
	char *out;

	(void)state;
	write_conf("lap", "4M");
	start_sub(&first, "first", "feed", "60000", NULL);
	start_pub(&pub, "60000", "20000", "1", "1500");
	usleep(2000000);
	assert_int_equal(kill(first.pid, SIGKILL), 0);
	assert_int_equal(proc_wait(&first, 5000), 128 + SIGKILL);
	start_sub(&again, "again", "feed", "60000", NULL);
	scenario_finish_pub(&pub, 60000, 200000);
	assert_int_equal(proc_wait(&again, 120000), 0);
	out = proc_output(&again);
	print_message("%s", out);
	/* It joined live: from some later sequence to the end, every
	 * sequence delivered or (if a busy machine kept it off its core long
	 * enough to be lapped) reported lost, in order. */
	assert_true(proc_field_u64(out, "first") > 1);
	assert_int_equal(proc_field_u64(out, "last"), 60000);
	assert_int_equal(proc_field_u64(out, "delivered") +
				 proc_field_u64(out, "lost"),
			 60000 - proc_field_u64(out, "first") + 1);
	assert_int_equal(proc_field_u64(out, "order_errors"), 0);
	assert_int_equal(proc_field_u64(out, "bad_payload"), 0);
	free(out);
}

static void wrong_token_is_rejected(void **state)
{
	proc_t pub, good, bad;
	uint64_t checksum;
	char *out;

	(void)state;
	write_conf("lap", "4M");
	start_sub(&good, "good", "feed", "20000", NULL);
	start_sub(&bad, "bad", "wrongtoken", "20000", NULL);
	setenv("TICKBUS_QUIET", "0", 1);   /* the publisher's warning, please */
	start_pub(&pub, "20000", "20000", "1", "200");
	setenv("TICKBUS_QUIET", "1", 1);
	/* Exit status 1: the poll failed with an authentication error. */
	assert_int_equal(proc_wait(&bad, 30000), 1);
	out = proc_output(&bad);
	print_message("%s", out);
	assert_non_null(strstr(out, "token does not match"));
	assert_int_equal(proc_field_u64(out, "delivered"), 0);
	free(out);
	checksum = scenario_finish_pub(&pub, 20000, 200000);
	free(expect_sub_complete(&good, 20000, checksum, 60000));
	out = proc_output(&pub);
	assert_non_null(strstr(out, "rejected subscriber"));
	free(out);
}

typedef struct quiet_got {
	uint64_t first, last, n, order_errors;
} quiet_got_t;

static void quiet_on_msg(void *clientd, const tb_msg_t *m)
{
	quiet_got_t *g = clientd;

	if (!g->first)
		g->first = m->seq;
	else if (m->seq != g->last + 1)
		g->order_errors++;
	g->last = m->seq;
	g->n++;
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/*
 * Burst, then silence: a subscriber that did not keep up with a burst
 * (here: it did not poll at all) is skipped for the rest of it, and the
 * stream then goes quiet for seconds.  No frame will come to show the
 * gap; the publisher's heartbeat names the range, and the subscriber
 * reports it once it has delivered everything before it: within one
 * heartbeat (50 ms here) of that, not when the stream closes.
 */
static void lapped_on_a_quiet_stream_is_told_within_a_heartbeat(void **state)
{
	tb_subscriber_t *sub;
	proc_t pub;
	quiet_got_t g = {0};
	uint64_t until, drained_ms = 0, told_ms = 0, first = 0, last = 0;
	char *argv[] = {"tb-publish", "-c", conf, "-s", "feed", "--count", "20000",
			"--rate", "20000", "--start-delay-ms", "300", "--linger-ms",
			"6000", NULL};
	char out[256];
	int rc;

	(void)state;
	/* It does not poll while the burst goes out, which on a loaded host
	 * can take seconds: its liveness must outlast that, or it is dropped
	 * (TB_EVICTED) instead of lapped. */
	liveness_ms = 20000;
	/* 512 KiB, and a burst at 20,000 frames a second.  The subscriber is
	 * lapped by its receives (2,048 posted, none reposted while it does
	 * not poll); the publisher's ring must then overwrite the frames it
	 * was skipped for, or it would read them back instead of being told
	 * they are lost.  Going that far round means going past the skip's
	 * fence: if the fence has not completed by then, the publisher fails
	 * the subscriber, rightly (its writes could read overwritten frames).
	 * Half the ring (some 2,700 frames) then takes 135 ms, where a fence
	 * takes microseconds; at full speed it took 4 ms, and an overloaded
	 * 2-core host sometimes did not run the software device that long. */
	write_conf("lap", "512K");
	snprintf(out, sizeof(out), "%s/pub.out", dir);
	/* Its log, to say why if it drops this subscriber. */
	setenv("TICKBUS_QUIET", "0", 1);
	assert_int_equal(proc_start(&pub, out, argv), 0);
	setenv("TICKBUS_QUIET", "1", 1);
	assert_int_equal(tb_subscriber_open_file(&sub, conf, "feed"), 0);
	/* Connected: polls stop saying TB_NOT_CONNECTED. */
	until = mono_ms() + 10000;
	while ((rc = tb_sub_poll(sub, quiet_on_msg, &g, 0)) == TB_NOT_CONNECTED &&
	       mono_ms() < until)
		usleep(1000);
	assert_int_equal(rc, 0);
	/* Not polling while the burst goes out: its 2,048 receives are
	 * used up, the rest of the burst is skipped. */
	assert_int_equal(proc_wait_output(&pub, "published=20000", 60000), 0);
	usleep(300000);
	/* Now drain, and time the report from the last poll that delivered:
	 * from then on it had everything before the range. */
	until = mono_ms() + 5000;
	while (!told_ms && mono_ms() < until) {
		rc = tb_sub_poll(sub, quiet_on_msg, &g, 256);
		if (rc > 0)
			drained_ms = mono_ms();
		if (rc == TB_LAPPED) {
			told_ms = mono_ms();
			assert_int_equal(tb_sub_loss(sub, &first, &last), 0);
		} else if (rc < 0) {
			char *text = proc_output(&pub);

			print_message("the publisher's log:\n%s", text ? text : "");
			free(text);
			fail_msg("poll: %s: %s", tb_strerror(rc), tb_errmsg());
		}
		if (rc == 0)
			usleep(100);
	}
	print_message("delivered %" PRIu64 " (%" PRIu64 "..%" PRIu64 "), told "
		      "%" PRIu64 "..%" PRIu64 " lost %" PRIu64 " ms after the "
		      "last delivery\n", g.n, g.first, g.last, first, last,
		      told_ms ? told_ms - drained_ms : 0);
	assert_true(told_ms != 0 && drained_ms != 0);
	/* A heartbeat (50 ms), and a margin for a loaded machine. */
	assert_true(told_ms - drained_ms <= 50 + 200);
	/* Exact: everything before the range delivered, in order, and the
	 * range runs to the end of the burst. */
	assert_int_equal(g.order_errors, 0);
	assert_int_equal(first, g.last + 1);
	assert_int_equal(last, 20000);
	assert_int_equal(g.n, g.last - g.first + 1);
	tb_subscriber_close(sub);
	assert_int_equal(proc_wait(&pub, 30000), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(waiting_for_subscribers_gives_up_in_time, setup, teardown),
		cmocka_unit_test_setup_teardown(four_subscribers_get_a_million_in_order, setup, teardown),
		cmocka_unit_test_setup_teardown(slow_subscriber_is_lapped_others_lose_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(killed_subscriber_does_not_stall_the_others, setup, teardown),
		cmocka_unit_test_setup_teardown(restarted_subscriber_reconnects, setup, teardown),
		cmocka_unit_test_setup_teardown(wrong_token_is_rejected, setup, teardown),
		cmocka_unit_test_setup_teardown(lapped_on_a_quiet_stream_is_told_within_a_heartbeat, setup, teardown),
		cmocka_unit_test_setup_teardown(infiniband_ports_carry_the_stream, setup, teardown),
		cmocka_unit_test_setup_teardown(ports_with_different_mtus_agree_on_one, setup, teardown),
		cmocka_unit_test_setup_teardown(a_device_granting_less_inline, setup, teardown),
		cmocka_unit_test_setup_teardown(a_device_granting_less_than_a_small_frame, setup, teardown),
		cmocka_unit_test_setup_teardown(a_new_gid_means_a_new_connection, setup, teardown),
		cmocka_unit_test_setup_teardown(publisher_dead_while_reconnecting_is_reported, setup, teardown),
		cmocka_unit_test_setup_teardown(batched_bursts_reach_two_subscribers_whole, setup, teardown),
		cmocka_unit_test_setup_teardown(offerv_bursts_reach_a_subscriber_whole, setup, teardown),
		cmocka_unit_test_setup_teardown(back_pressure_waits_for_lagging_completions, setup, teardown),
	};
	/* TB_CMOCKA_FILTER=glob runs the matching tests alone. */
	if (getenv("TB_CMOCKA_FILTER"))
		cmocka_set_test_filter(getenv("TB_CMOCKA_FILTER"));
	return cmocka_run_group_tests_name("rc_scenario", tests, NULL, NULL);
}
