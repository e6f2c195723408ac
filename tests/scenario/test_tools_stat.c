/*
 * tb-stat, run as the real binary against real tb-publish / tb-subscribe
 * processes whose counters files go to a directory of this test's own
 * ($TICKBUS_COUNTERS_DIR), so that other tickbus processes on the host do
 * not show.  Checks the --once table and --json against the processes
 * started (pids, roles, a rate near the publishing rate), that a process
 * killed and one started while tb-stat runs are reported as gone and as
 * new, that a corrupt counters file is skipped, and the argument errors.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/common/scenario.h"

#include <inttypes.h>
#include <sys/stat.h>

static char dir[128], ctrdir[160], ring[192];

static int setup(void **state)
{
	(void)state;
	if (scenario_dir_make(dir, sizeof(dir), "tb-tools-stat") != 0)
		return -1;
	snprintf(ctrdir, sizeof(ctrdir), "%s/ctr", dir);
	if (mkdir(ctrdir, 0755) != 0)
		return -1;
	setenv("TICKBUS_COUNTERS_DIR", ctrdir, 1);
	snprintf(ring, sizeof(ring), "/dev/shm/tb-tstat.%d", (int)getpid());
	unlink(ring);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return scenario_cleanup(dir, ring);
}

static void start_pub(proc_t *p, const char *count)
{
	char out[256];
	char *argv[] = {"tb-publish", "--shm", ring, "--count", (char *)count,
			"--rate", "2000", NULL};

	snprintf(out, sizeof(out), "%s/pub.out", dir);
	assert_int_equal(proc_start(p, out, argv), 0);
}

static void start_sub(proc_t *p, const char *name)
{
	char out[256];
	char *argv[] = {"tb-subscribe", "--shm", ring, "--timeout-ms", "120000",
			NULL};

	snprintf(out, sizeof(out), "%s/%s.out", dir, name);
	assert_int_equal(proc_start(p, out, argv), 0);
}

/* Runs tb-stat to the end with `args`. */
static int run(char **out, char *const args[])
{
	char path[256];

	snprintf(path, sizeof(path), "%s/stat.out", dir);
	return scenario_run_tool("tb-stat", path, args, 60000, out);
}

/* Waits until the counters directory holds `n` files. */
static void wait_files(int n)
{
	uint64_t until = proc_now_ms() + 30000;

	for (;;) {
		char cmd[256];
		FILE *f;
		int got = -1;

		snprintf(cmd, sizeof(cmd), "ls %s | grep -c tickbus-counters",
			 ctrdir);
		f = popen(cmd, "r");
		assert_non_null(f);
		if (fscanf(f, "%d", &got) != 1)
			got = -1;
		pclose(f);
		if (got >= n)
			return;
		assert_true(proc_now_ms() < until);
		usleep(20000);
	}
}

/* The JSON object of process `pid` in `text`, up to its streams' end. */
static const char *json_proc(const char *text, pid_t pid)
{
	char key[48];

	snprintf(key, sizeof(key), "{\"pid\":%d,", (int)pid);
	return strstr(text, key);
}

static double json_num(const char *from, const char *key)
{
	char k[64];
	const char *p;

	snprintf(k, sizeof(k), "\"%s\":", key);
	p = strstr(from, k);
	if (!p)
		fail_msg("no %s in %s", key, from);
	return atof(p + strlen(k));
}

static void test_once_table_and_json(void **state)
{
	proc_t pub, sub;
	char *out, pid[32];
	const char *p;
	(void)state;

	start_pub(&pub, "200000");
	start_sub(&sub, "sub1");
	wait_files(2);
	usleep(300000);
	{
		char *a[] = {"--once", "--interval-ms", "500", NULL};

		assert_int_equal(run(&out, a), 0);
	}
	assert_non_null(strstr(out, "processes=2 streams=2"));
	snprintf(pid, sizeof(pid), "\n%-7d tb-publish", (int)pub.pid);
	p = strstr(out, pid);
	assert_non_null(p);
	assert_non_null(strstr(p, "publisher  shm"));
	snprintf(pid, sizeof(pid), "\n%-7d tb-subscribe", (int)sub.pid);
	assert_non_null(strstr(out, pid));
	free(out);

	{
		char *a[] = {"--once", "--json", "--interval-ms", "500", NULL};

		assert_int_equal(run(&out, a), 0);
	}
	/* One JSON object; both processes; the publisher publishes at 2000/s:
	 * a rate between 500 and 4000 a second is that rate on a busy box. */
	assert_int_equal(out[0], '{');
	assert_non_null(strstr(out, "}\n"));
	p = json_proc(out, pub.pid);
	assert_non_null(p);
	assert_non_null(strstr(p, "\"role\":\"publisher\""));
	assert_true(json_num(p, "msgs_per_s") > 500);
	assert_true(json_num(p, "msgs_per_s") < 4000);
	assert_true(json_num(p, "published") > 0);
	p = json_proc(out, sub.pid);
	assert_non_null(p);
	assert_non_null(strstr(p, "\"role\":\"subscriber\""));
	assert_true(json_num(p, "delivered") > 0);
	assert_non_null(strstr(out, "\"gone\":[]"));
	free(out);
	kill(sub.pid, SIGKILL);
	kill(pub.pid, SIGKILL);
	proc_wait(&sub, 10000);
	proc_wait(&pub, 10000);
}

/* A subscriber killed and another started while tb-stat runs live. */
static void test_processes_come_and_go(void **state)
{
	proc_t pub, sub1, sub2, stat;
	char out_path[256], *out, gone[64], key[48];
	const char *a;
	(void)state;

	start_pub(&pub, "400000");
	start_sub(&sub1, "sub-a");
	wait_files(2);
	snprintf(out_path, sizeof(out_path), "%s/live.out", dir);
	{
		char *argv[] = {"tb-stat", "--json", "--interval-ms", "100",
				"--count", "40", NULL};

		assert_int_equal(proc_start(&stat, out_path, argv), 0);
	}
	usleep(800000);
	kill(sub1.pid, SIGKILL);
	proc_wait(&sub1, 10000);
	start_sub(&sub2, "sub-b");
	assert_int_equal(proc_wait(&stat, 60000), 0);
	out = proc_output(&stat);
	/* sub1 appears, then is reported gone once; sub2 appears later. */
	snprintf(key, sizeof(key), "{\"pid\":%d,", (int)sub1.pid);
	a = strstr(out, key);
	assert_non_null(a);
	snprintf(gone, sizeof(gone), "\"gone\":[%d]", (int)sub1.pid);
	assert_non_null(strstr(a, gone));
	assert_null(strstr(strstr(a, gone) + 1, gone));
	snprintf(key, sizeof(key), "{\"pid\":%d,", (int)sub2.pid);
	assert_non_null(strstr(out, key));
	/* Every refresh is one line of JSON. */
	{
		int lines = 0;

		for (const char *p = out; (p = strchr(p, '\n')); p++)
			lines++;
		assert_int_equal(lines, 40);
	}
	free(out);
	kill(sub2.pid, SIGKILL);
	kill(pub.pid, SIGKILL);
	proc_wait(&sub2, 10000);
	proc_wait(&pub, 10000);
}

/* A corrupt file with a live pid (this test's) is skipped, not shown. */
static void test_corrupt_file_skipped(void **state)
{
	char path[256], *out;
	FILE *f;
	(void)state;

	snprintf(path, sizeof(path), "%s/tickbus-counters.%d", ctrdir,
		 (int)getpid());
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("this is not a counters file, but it is long enough to be read "
	      "as a header if nobody checks the magic and the version........"
	      "................................................................",
	      f);
	fclose(f);
	{
		char *a[] = {"--once", "--interval-ms", "10", NULL};

		assert_int_equal(run(&out, a), 0);
	}
	assert_non_null(strstr(out, "processes=0 streams=0"));
	free(out);
	unlink(path);
}

/* The counters file of a SIGKILLed process (it could not remove it) is
 * removed by the next tb-stat, and kept with --no-reap. */
static void test_dead_process_reaped(void **state)
{
	char path[256], *out;
	struct stat st;
	proc_t sub;
	(void)state;

	start_sub(&sub, "doomed");
	snprintf(path, sizeof(path), "%s/tickbus-counters.%d", ctrdir,
		 (int)sub.pid);
	for (uint64_t until = proc_now_ms() + 30000; stat(path, &st) != 0;) {
		assert_true(proc_now_ms() < until);
		usleep(20000);
	}
	/* Neither world-readable nor writable by others. */
	assert_int_equal(st.st_mode & 0007, 0);
	kill(sub.pid, SIGKILL);
	proc_wait(&sub, 10000);
	assert_int_equal(stat(path, &st), 0);
	{
		char *a[] = {"--once", "--no-reap", "--interval-ms", "10", NULL};

		assert_int_equal(run(&out, a), 0);
	}
	assert_null(strstr(out, "reaped:"));
	free(out);
	assert_int_equal(stat(path, &st), 0);
	{
		char *a[] = {"--once", "--interval-ms", "10", NULL};

		assert_int_equal(run(&out, a), 0);
	}
	assert_non_null(strstr(out, "reaped: "));
	free(out);
	assert_int_equal(stat(path, &st), -1);
	assert_int_equal(errno, ENOENT);
}

static void expect(char *const args[], int status, const char *msg)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/stat.out", dir);
	scenario_expect_tool("tb-stat", path, args, 60000, status, msg);
}

static void test_bad_arguments(void **state)
{
	char missing[256];
	(void)state;

	snprintf(missing, sizeof(missing), "%s/nowhere", dir);
	{ char *a[] = {"--help", NULL}; expect(a, 0, "usage: tb-stat"); }
	{ char *a[] = {"--interval-ms", "5", NULL};
	  expect(a, 2, "--interval-ms '5' is not in 10..3600000"); }
	{ char *a[] = {"--count", "0", NULL}; expect(a, 2, "--count '0'"); }
	{ char *a[] = {"--count", "x", NULL}; expect(a, 2, "--count 'x'"); }
	{ char *a[] = {"--frobnicate", NULL}; expect(a, 2, "usage:"); }
	{ char *a[] = {"extra", NULL};
	  expect(a, 2, "unexpected argument 'extra'"); }
	{ char *a[] = {"--once", "--dir", missing, NULL};
	  expect(a, 1, "nowhere: No such file or directory"); }
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_once_table_and_json),
		cmocka_unit_test(test_processes_come_and_go),
		cmocka_unit_test(test_corrupt_file_skipped),
		cmocka_unit_test(test_dead_process_reaped),
		cmocka_unit_test(test_bad_arguments),
	};

	return cmocka_run_group_tests_name("tools_stat", tests, setup,
					   teardown);
}
