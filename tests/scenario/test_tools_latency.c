/*
 * tb-latency, run as the real binary: ping-pong and one-way over shm (and
 * over rc, ud and udp), a size sweep, the two ends as one forked command or as two commands from a
 * config file, the .hgrm and interval-log outputs (decoded here with the
 * library), coordinated-omission correction proved by stopping the echo end
 * for a known time, and every option and error message.
 *
 * Counts are small and the idle strategy is spin-then-yield: this proves
 * behaviour on a busy 2-core machine, not speed (that is `make bench`).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/common/scenario.h"

#include <tickbus/hist.h>

#include <inttypes.h>
#include <math.h>

static char dir[128];

static int setup(void **state)
{
	(void)state;
	return scenario_dir_make(dir, sizeof(dir), "tb-tools-latency");
}

static int teardown(void **state)
{
	char cmd[256];

	(void)state;
	proc_kill_all();
	snprintf(cmd, sizeof(cmd), "rm -rf %s /dev/shm/tb-tlat.%d.*", dir,
		 (int)getpid());
	return system(cmd) == 0 ? 0 : -1;
}

/* Runs tb-latency with `args` (NULL-terminated), waits, returns the exit
 * status and (malloc'd) output. */
static int run(char **out, const char *name, char *const args[])
{
	char path[256];

	snprintf(path, sizeof(path), "%s/%s.out", dir, name);
	return scenario_run_tool("tb-latency", path, args, 120000, out);
}

/* The result line of `size` in `text`, copied into `line`. */
static int result_line(const char *text, unsigned size, char *line,
		       size_t cap)
{
	char key[64];
	const char *p, *e;

	snprintf(key, sizeof(key), " size=%u count=", size);
	p = strstr(text, key);
	if (!p)
		return -1;
	while (p > text && p[-1] != '\n')
		p--;
	e = strchr(p, '\n');
	snprintf(line, cap, " %.*s", (int)(e ? e - p : (long)strlen(p)), p);
	return 0;
}

/* The result line of `size`: `mode`, `count` messages measured and none
 * lost (with `may_lose`, count + lost; a datagram transport without
 * recovery loses what a descheduled subscriber's queue cannot hold, and
 * tb-latency fails when a message is neither measured nor reported lost),
 * percentiles in order. */
static void check_result_lossy(const char *text, unsigned size,
			       uint64_t count, const char *mode, int may_lose)
{
	char line[512], m[32];
	uint64_t p50, p90, p99, p999, p9999, max;

	assert_int_equal(result_line(text, size, line, sizeof(line)), 0);
	print_message("result:%s\n", line);
	assert_int_equal(proc_field(line, "mode", m, sizeof(m)), 0);
	assert_string_equal(m, mode);
	if (may_lose) {
		assert_int_equal(proc_field_u64(line, "count") +
				 proc_field_u64(line, "lost"), count);
		assert_true(proc_field_u64(line, "count") > 0);
	} else {
		assert_int_equal(proc_field_u64(line, "count"), count);
		assert_int_equal(proc_field_u64(line, "lost"), 0);
	}
	p50 = proc_field_u64(line, "p50");
	p90 = proc_field_u64(line, "p90");
	p99 = proc_field_u64(line, "p99");
	p999 = proc_field_u64(line, "p99.9");
	p9999 = proc_field_u64(line, "p99.99");
	max = proc_field_u64(line, "max");
	assert_true(p50 > 0);
	assert_true(p50 <= p90 && p90 <= p99 && p99 <= p999 && p999 <= p9999 &&
		    p9999 <= max);
	assert_true(max < UINT64_MAX);
}

static void check_result(const char *text, unsigned size, uint64_t count,
			 const char *mode)
{
	check_result_lossy(text, size, count, mode, 0);
}

/* Decodes an interval log: the samples of each tag must add up to `count`,
 * every interval must have a non-negative start and length. */
static void check_log(const char *path, const char *tags[], int n_tags,
		      int64_t count)
{
	FILE *f = fopen(path, "r");
	tb_hist_log_reader_t *r;
	tb_hist_log_entry_t e;
	int64_t got[8] = {0};
	int rc;

	assert_non_null(f);
	assert_int_equal(tb_hist_log_reader_open(&r, f), 0);
	while ((rc = tb_hist_log_read(r, &e)) == 1) {
		int k;

		for (k = 0; k < n_tags; k++)
			if (!strcmp(e.tag, tags[k]))
				break;
		assert_true(k < n_tags);
		assert_true(e.start_sec >= 0 && e.length_sec >= 0);
		got[k] += tb_hist_count(e.hist);
		tb_hist_free(e.hist);
	}
	assert_int_equal(rc, 0);
	assert_false(isnan(tb_hist_log_reader_start_time(r)));
	tb_hist_log_reader_close(r);
	fclose(f);
	for (int k = 0; k < n_tags; k++)
		assert_int_equal(got[k], count);
}

/* The "Total count" of a .hgrm footer. */
static int64_t hgrm_total(const char *path)
{
	char line[256];
	long long n = -1;
	FILE *f = fopen(path, "r");

	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, "Total count    =");

		if (p)
			n = atoll(p + 16);
	}
	fclose(f);
	return n;
}

static void test_pingpong_sweep_fork(void **state)
{
	char hgrm[256], log[256], h64[256], h256[256], *out;
	const char *tags[] = {"size-64", "size-256"};
	(void)state;

	snprintf(hgrm, sizeof(hgrm), "%s/pp.hgrm", dir);
	snprintf(log, sizeof(log), "%s/pp.hlog", dir);
	snprintf(h64, sizeof(h64), "%s/pp-64.hgrm", dir);
	snprintf(h256, sizeof(h256), "%s/pp-256.hgrm", dir);
	{
		char *a[] = {"-n", "3000", "-w", "300", "-s", "64,256",
			     "--idle", "spin-then-yield", "--hgrm", hgrm,
			     "--log", log, "--interval-ms", "50", NULL};

		assert_int_equal(run(&out, "pp", a), 0);
	}
	check_result(out, 64, 3000, "pingpong");
	check_result(out, 256, 3000, "pingpong");
	free(out);
	assert_int_equal(hgrm_total(h64), 3000);
	assert_int_equal(hgrm_total(h256), 3000);
	check_log(log, tags, 2, 3000);
}

static void test_oneway_fixed_rate(void **state)
{
	char log[256], *out;
	const char *tags[] = {"size-100"};
	(void)state;

	snprintf(log, sizeof(log), "%s/ow.hlog", dir);
	{
		char *a[] = {"-m", "oneway", "--rate", "20000", "-n", "4000",
			     "-w", "400", "-s", "100", "--idle",
			     "spin-then-yield", "--log", log, NULL};

		assert_int_equal(run(&out, "ow", a), 0);
	}
	check_result(out, 100, 4000, "oneway");
	/* Fixed rate: the uncorrected figures are printed beside. */
	assert_non_null(strstr(out, "uncorrected size=100 "));
	free(out);
	check_log(log, tags, 1, 4000);
}

/* Ping-pong and one-way over rc and ud (on softrdma, as make test runs)
 * and udp on loopback: every message measured, none lost, the .hgrm
 * holding them all; one-way at a fixed rate over ud and udp, every
 * message measured or reported lost (a loaded machine descheduling the
 * subscriber longer than its queue lasts loses datagrams: that is the
 * transport without recovery, and tb-latency counts it). */
static void test_every_network_transport(void **state)
{
	static const char *const transports[] = {"rc", "ud", "udp"};
	(void)state;

	for (int t = 0; t < 3; t++) {
		char cfg[256], hgrm[256], name[32], *out;
		unsigned port[2] = {proc_free_port(), proc_free_port()};
		FILE *f;

		snprintf(cfg, sizeof(cfg), "%s/%s.ini", dir, transports[t]);
		f = fopen(cfg, "w");
		assert_non_null(f);
		for (int k = 0; k < 2; k++) {
			fprintf(f, "[stream %s]\nid = %d\ntransport = %s\n"
				"ring_size = 1M\nidle = spin-then-yield\n",
				k ? "pong" : "ping", 21 + k, transports[t]);
			if (t == 0)
				fprintf(f, "control = 127.0.0.1:%u\ntoken = lat\n",
					port[k]);
			else
				fprintf(f, "group = 239.192.%d.%d:%u\n", 40 + t,
					(int)getpid() % 250 + k, port[k]);
			if (t == 2)
				fprintf(f, "interface = 127.0.0.1\nloopback = yes\n"
					"rcvbuf = 4M\n");
		}
		fclose(f);
		snprintf(hgrm, sizeof(hgrm), "%s/%s.hgrm", dir, transports[t]);
		snprintf(name, sizeof(name), "pp-%s", transports[t]);
		{
			char *a[] = {"-c", cfg, "-n", "2000", "-w", "200",
				     "--hgrm", hgrm, NULL};

			assert_int_equal(run(&out, name, a), 0);
		}
		print_message("%s: %s", transports[t], strstr(out, "mode="));
		check_result(out, 64, 2000, "pingpong");
		free(out);
		assert_int_equal(hgrm_total(hgrm), 2000);
		snprintf(name, sizeof(name), "ow-%s", transports[t]);
		{
			char *a[] = {"-c", cfg, "-m", "oneway", "--rate", "20000",
				     "-n", "2000", "-w", "200", "-s", "200", NULL};

			assert_int_equal(run(&out, name, a), 0);
		}
		check_result_lossy(out, 200, 2000, "oneway", t > 0);
		free(out);
	}
}

static void write_config(const char *path, const char *ping, const char *pong)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fprintf(f, "[stream %s]\nid = 11\ntransport = shm\nring_size = 1M\n"
		"shm_path = /dev/shm/tb-tlat.%d.%s\nidle = spin-then-yield\n\n"
		"[stream %s]\nid = 12\ntransport = shm\nring_size = 1M\n"
		"shm_path = /dev/shm/tb-tlat.%d.%s\nidle = spin-then-yield\n",
		ping, (int)getpid(), ping, pong, (int)getpid(), pong);
	fclose(f);
}

/* The two ends as two commands, from a config file, as on two hosts. */
static void test_roles_from_config(void **state)
{
	char cfg[256], pub_out[256], sub_out[256], *text;
	proc_t pub, sub;
	(void)state;

	snprintf(cfg, sizeof(cfg), "%s/lat.ini", dir);
	snprintf(pub_out, sizeof(pub_out), "%s/role-pub.out", dir);
	snprintf(sub_out, sizeof(sub_out), "%s/role-sub.out", dir);
	write_config(cfg, "lping", "lpong");
	{
		char *a[] = {"tb-latency", "-c", cfg, "--ping", "lping",
			     "--pong", "lpong", "--role", "sub", NULL};

		assert_int_equal(proc_start(&sub, sub_out, a), 0);
	}
	{
		char *a[] = {"tb-latency", "-c", cfg, "--ping", "lping",
			     "--pong", "lpong", "--role", "pub", "-n", "2000",
			     "-w", "100", NULL};

		assert_int_equal(proc_start(&pub, pub_out, a), 0);
	}
	assert_int_equal(proc_wait(&pub, 120000), 0);
	assert_int_equal(proc_wait(&sub, 30000), 0);
	text = proc_output(&pub);
	check_result(text, 64, 2000, "pingpong");
	free(text);
}

/*
 * Coordinated omission: at 1000 pings a second, the echo end is stopped
 * (SIGSTOP) for 400 ms.  Measured from the intended send times, the ~400
 * pings that should have gone out meanwhile wait 400, 399, ... 1 ms, so the
 * 300 slowest (10% of 3000) all exceed ~100 ms and p90 is well above 50 ms;
 * measured from the actual sends, only the one ping in flight saw the stall.
 */
static void test_coordinated_omission(void **state)
{
	char cfg[256], pub_out[256], sub_out[256], *text, line[512];
	proc_t pub, sub;
	uint64_t until, p90, raw_p99, max;
	(void)state;

	snprintf(cfg, sizeof(cfg), "%s/co.ini", dir);
	snprintf(pub_out, sizeof(pub_out), "%s/co-pub.out", dir);
	snprintf(sub_out, sizeof(sub_out), "%s/co-sub.out", dir);
	write_config(cfg, "cping", "cpong");
	{
		char *a[] = {"tb-latency", "-c", cfg, "--ping", "cping",
			     "--pong", "cpong", "--role", "sub", NULL};

		assert_int_equal(proc_start(&sub, sub_out, a), 0);
	}
	{
		char *a[] = {"tb-latency", "-c", cfg, "--ping", "cping",
			     "--pong", "cpong", "--role", "pub", "-n", "3000",
			     "-w", "0", "--rate", "1000", "--idle", "backoff",
			     "--msg-timeout-ms", "5000", NULL};

		assert_int_equal(proc_start(&pub, pub_out, a), 0);
	}
	/* Stop the echo end once measuring has started. */
	until = proc_now_ms() + 60000;
	for (;;) {
		text = proc_output(&pub);
		if (strstr(text, "measuring size=64"))
			break;
		free(text);
		assert_true(proc_now_ms() < until);
		usleep(20000);
	}
	free(text);
	usleep(300000);
	assert_int_equal(kill(sub.pid, SIGSTOP), 0);
	usleep(400000);
	assert_int_equal(kill(sub.pid, SIGCONT), 0);
	assert_int_equal(proc_wait(&pub, 120000), 0);
	assert_int_equal(proc_wait(&sub, 30000), 0);
	text = proc_output(&pub);
	assert_int_equal(result_line(text, 64, line, sizeof(line)), 0);
	p90 = proc_field_u64(line, "p90");
	max = proc_field_u64(line, "max");
	{
		const char *u = strstr(text, "uncorrected size=64 ");

		assert_non_null(u);
		raw_p99 = proc_field_u64(u - 1, "p99");
	}
	print_message("corrected p90=%" PRIu64 " max=%" PRIu64
		      " uncorrected p99=%" PRIu64 "\n", p90, max, raw_p99);
	assert_true(max >= 380000000ull);
	assert_true(p90 >= 50000000ull);
	/* Uncorrected, one sample in 3000 saw the stall: not even p99. */
	assert_true(raw_p99 < p90);
	free(text);
}

static void expect(char *const args[], int status, const char *msg)
{
	char *out;

	assert_int_equal(run(&out, "err", args), status);
	if (!strstr(out, msg))
		fail_msg("expected '%s' in: %s", msg, out);
	free(out);
}

static void test_bad_arguments(void **state)
{
	char cfg[256], missing[256];
	(void)state;

	snprintf(cfg, sizeof(cfg), "%s/one.ini", dir);
	snprintf(missing, sizeof(missing), "%s/nothing.ini", dir);
	{
		FILE *f = fopen(cfg, "w");

		assert_non_null(f);
		fprintf(f, "[stream ping]\nid = 1\ntransport = shm\n");
		fclose(f);
	}
	{ char *a[] = {"--help", NULL}; expect(a, 0, "usage: tb-latency"); }
	{ char *a[] = {"--mode", "sideways", NULL};
	  expect(a, 2, "bad value 'sideways' for --mode"); }
	{ char *a[] = {"--size", "8", NULL}; expect(a, 2, "--size"); }
	{ char *a[] = {"--size", "64,,x", NULL}; expect(a, 2, "--size"); }
	{ char *a[] = {"--count", "0", NULL}; expect(a, 2, "--count"); }
	{ char *a[] = {"--count", "-5", NULL}; expect(a, 2, "--count"); }
	{ char *a[] = {"--role", "middle", NULL}; expect(a, 2, "--role"); }
	{ char *a[] = {"--cores", "1", NULL}; expect(a, 2, "--cores: A,B"); }
	{ char *a[] = {"--idle", "nap", NULL}; expect(a, 2, "--idle"); }
	{ char *a[] = {"--rate", "fast", NULL}; expect(a, 2, "--rate"); }
	{ char *a[] = {"--interval-ms", "0", NULL};
	  expect(a, 2, "--interval-ms"); }
	{ char *a[] = {"--bogus", NULL}; expect(a, 2, "usage:"); }
	{ char *a[] = {"extra", NULL};
	  expect(a, 2, "unexpected argument 'extra'"); }
	{ char *a[] = {"--ping", "x", "--pong", "x", NULL};
	  expect(a, 2, "must be two streams"); }
	{ char *a[] = {"-c", missing, NULL}; expect(a, 1, "nothing.ini"); }
	{ char *a[] = {"-c", cfg, NULL}; expect(a, 1, "no stream 'pong'"); }
}

/* An end whose peer never comes gives up with a clear message and exit 4. */
static void test_peer_missing(void **state)
{
	char cfg[256];
	(void)state;

	snprintf(cfg, sizeof(cfg), "%s/alone.ini", dir);
	write_config(cfg, "aping", "apong");
	{
		char *a[] = {"-c", cfg, "--ping", "aping", "--pong", "apong",
			     "--role", "pub", "--timeout-ms", "300", NULL};

		expect(a, 4, "no answer on stream 'apong'");
	}
	{
		char *a[] = {"-c", cfg, "--ping", "aping", "--pong", "apong",
			     "--role", "sub", "--timeout-ms", "300", NULL};

		expect(a, 4, "nothing on stream 'aping'");
	}
}

static void test_unwritable_outputs(void **state)
{
	char bad[256];
	(void)state;

	snprintf(bad, sizeof(bad), "%s/no/such/dir/x.hlog", dir);
	{
		char *a[] = {"-n", "10", "-w", "0", "--idle", "spin-then-yield",
			     "--log", bad, NULL};

		expect(a, 1, "x.hlog: No such file or directory");
	}
	snprintf(bad, sizeof(bad), "%s/no/such/dir/x.hgrm", dir);
	{
		char *a[] = {"-n", "10", "-w", "0", "--idle", "spin-then-yield",
			     "--hgrm", bad, NULL};

		expect(a, 1, "cannot write");
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pingpong_sweep_fork),
		cmocka_unit_test(test_oneway_fixed_rate),
		cmocka_unit_test(test_roles_from_config),
		cmocka_unit_test(test_every_network_transport),
		cmocka_unit_test(test_coordinated_omission),
		cmocka_unit_test(test_bad_arguments),
		cmocka_unit_test(test_peer_missing),
		cmocka_unit_test(test_unwritable_outputs),
	};

	return cmocka_run_group_tests_name("tools_latency", tests, setup,
					   teardown);
}
