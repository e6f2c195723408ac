/*
 * test_thread.c - pinning (affinity really changes; bad cores refused; the
 * not-isolated warning) and the CPU-list parser (bus/thread.c).  The idle
 * strategies are test_idle.c.
 *
 * Pinning runs in helper threads so the test runner's own affinity is never
 * changed.  Helper threads (tb_thread_start: kept off pinned cores) are
 * tested in forked children, since the cores a process has pinned are
 * remembered for its life.  The isolated-cores file is a temp file (TICKBUS_ISOLATED_FILE),
 * removed at the end.
 */
#include "bus/error.h"
#include "bus/thread.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

static char iso_path[128];

static void write_iso(const char *content)
{
	FILE *f = fopen(iso_path, "w");

	assert_non_null(f);
	fputs(content, f);
	fclose(f);
	setenv("TICKBUS_ISOLATED_FILE", iso_path, 1);
}

/* ------------------------------------------------------------ cpu lists */

static void test_cpulist_valid(void **state)
{
	(void)state;
	cpu_set_t s;

	assert_int_equal(tb_thread_cpulist_parse("", &s), 0);
	assert_int_equal(CPU_COUNT(&s), 0);
	assert_int_equal(tb_thread_cpulist_parse("\n", &s), 0);
	assert_int_equal(tb_thread_cpulist_parse("5", &s), 1);
	assert_true(CPU_ISSET(5, &s));
	assert_int_equal(tb_thread_cpulist_parse("1-3,5\n", &s), 4);
	assert_true(CPU_ISSET(1, &s) && CPU_ISSET(2, &s) && CPU_ISSET(3, &s) &&
		    CPU_ISSET(5, &s));
	assert_false(CPU_ISSET(0, &s) || CPU_ISSET(4, &s) || CPU_ISSET(6, &s));
	assert_int_equal(tb_thread_cpulist_parse("0-1023", &s), 1024);
	assert_int_equal(tb_thread_cpulist_parse(" 2 , 4-4 ,7 \n", &s), 3);
	assert_int_equal(tb_thread_cpulist_parse("3,3,1-3", &s), 3); /* overlaps */
	assert_int_equal(tb_thread_cpulist_parse("007", &s), 1);
	assert_true(CPU_ISSET(7, &s));
}

static void test_cpulist_malformed(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"a", "-1", "1-", "-", "3-1", "1,,2", "1,", ",1", "1 2",
		"1-2-3", "1024", "0-1024", "99999999999999999999", "1:2",
		"0-7:2/4", "1\n2", "+1", "0x3", "1;2",
	};
	cpu_set_t s;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		tb_error_clear();
		CPU_ZERO(&s);
		CPU_SET(0, &s);
		if (tb_thread_cpulist_parse(bad[i], &s) != TB_EINVAL)
			fail_msg("\"%s\" was accepted", bad[i]);
		assert_int_equal(CPU_COUNT(&s), 0);
		assert_non_null(strstr(tb_errmsg(), "malformed"));
	}
	assert_int_equal(tb_thread_cpulist_parse(NULL, &s), TB_EINVAL);
	assert_int_equal(tb_thread_cpulist_parse("1", NULL), TB_EINVAL);
}

/* -------------------------------------------------------------- pinning */

struct pin_job {
	int core;
	int rc;
	int cpus;  /* CPUs in the affinity mask after the call */
	int on;    /* sched_getcpu() after the call */
	int has_core;
	char err[256];
};

static void *pin_thread(void *arg)
{
	struct pin_job *j = arg;
	cpu_set_t s;

	j->rc = tb_thread_pin(j->core);
	snprintf(j->err, sizeof(j->err), "%s", tb_errmsg());
	CPU_ZERO(&s);
	sched_getaffinity(0, sizeof(s), &s);
	j->cpus = CPU_COUNT(&s);
	j->has_core = j->core >= 0 && j->core < CPU_SETSIZE &&
		      CPU_ISSET(j->core, &s);
	j->on = sched_getcpu();
	return NULL;
}

static void pin_in_thread(struct pin_job *j, int core)
{
	pthread_t t;

	memset(j, 0, sizeof(*j));
	j->core = core;
	assert_int_equal(pthread_create(&t, NULL, pin_thread, j), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
}

/* Runs a pin with stderr captured into `out`. */
static void pin_capturing(struct pin_job *j, int core, char *out, size_t len)
{
	FILE *tmp = tmpfile();
	int saved;
	size_t n;

	assert_non_null(tmp);
	fflush(stderr);
	saved = dup(2);
	dup2(fileno(tmp), 2);
	pin_in_thread(j, core);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	rewind(tmp);
	n = fread(out, 1, len - 1, tmp);
	out[n] = '\0';
	fclose(tmp);
}

static void test_pin_changes_affinity(void **state)
{
	(void)state;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	cpu_set_t mine;
	struct pin_job j;

	CPU_ZERO(&mine);
	assert_int_equal(sched_getaffinity(0, sizeof(mine), &mine), 0);
	write_iso("");
	for (int core = 0; core < ncpu && core < 4; core++) {
		if (!CPU_ISSET(core, &mine))
			continue;
		pin_in_thread(&j, core);
		assert_int_equal(j.rc, 0);
		assert_int_equal(j.cpus, 1);
		assert_true(j.has_core);
		assert_int_equal(j.on, core);
	}
	/* The runner's own mask is untouched. */
	cpu_set_t after;
	CPU_ZERO(&after);
	sched_getaffinity(0, sizeof(after), &after);
	assert_true(CPU_EQUAL(&mine, &after));
}

static void test_pin_bad_core(void **state)
{
	(void)state;
	long ncpu = sysconf(_SC_NPROCESSORS_CONF);
	struct pin_job j;
	cpu_set_t mine;

	CPU_ZERO(&mine);
	sched_getaffinity(0, sizeof(mine), &mine);
	pin_in_thread(&j, -1);
	assert_int_equal(j.rc, TB_EINVAL);
	assert_non_null(strstr(j.err, "core -1"));
	assert_int_equal(j.cpus, CPU_COUNT(&mine)); /* affinity unchanged */

	pin_in_thread(&j, (int)ncpu);
	assert_int_equal(j.rc, TB_EINVAL);
	assert_non_null(strstr(j.err, "does not exist"));

	pin_in_thread(&j, CPU_SETSIZE);
	assert_int_equal(j.rc, TB_EINVAL);
	pin_in_thread(&j, 1 << 30);
	assert_int_equal(j.rc, TB_EINVAL);
}

static void test_isolated_and_warning(void **state)
{
	(void)state;
	char out[1024];
	struct pin_job j;

	unsetenv("TICKBUS_QUIET");

	write_iso("1-3,5\n");
	assert_int_equal(tb_thread_core_isolated(0), 0);
	assert_int_equal(tb_thread_core_isolated(1), 1);
	assert_int_equal(tb_thread_core_isolated(5), 1);
	assert_int_equal(tb_thread_core_isolated(4), 0);

	/* Core 0 is not isolated: pinned, with a warning. */
	pin_capturing(&j, 0, out, sizeof(out));
	assert_int_equal(j.rc, 0);
	assert_non_null(strstr(out, "warning"));
	assert_non_null(strstr(out, "core 0 is not isolated"));

	/* An isolated core: no warning. */
	if (sysconf(_SC_NPROCESSORS_ONLN) > 1) {
		pin_capturing(&j, 1, out, sizeof(out));
		assert_int_equal(j.rc, 0);
		assert_null(strstr(out, "warning"));
	}

	/* An empty list (no isolated cores): a warning. */
	write_iso("\n");
	pin_capturing(&j, 0, out, sizeof(out));
	assert_int_equal(j.rc, 0);
	assert_non_null(strstr(out, "not isolated"));

	/* A malformed file: an error for the query, no warning on pin. */
	write_iso("1-x\n");
	assert_int_equal(tb_thread_core_isolated(0), TB_EINVAL);
	assert_non_null(strstr(tb_errmsg(), iso_path));
	pin_capturing(&j, 0, out, sizeof(out));
	assert_int_equal(j.rc, 0);
	assert_null(strstr(out, "warning"));

	/* No file at all (an old kernel): the pin still works. */
	unlink(iso_path);
	assert_int_equal(tb_thread_core_isolated(0), TB_ENOENT);
	pin_capturing(&j, 0, out, sizeof(out));
	assert_int_equal(j.rc, 0);
	assert_null(strstr(out, "warning"));

	setenv("TICKBUS_QUIET", "1", 1);
}

/* -------------------------------------------------------- helper threads */

/* In a forked child: a failed check exits with its line (1..254). */
#define CHILD_CHECK(cond) \
	do { \
		if (!(cond)) { \
			fprintf(stderr, "child check failed at line %d: %s\n", \
				__LINE__, #cond); \
			_exit(__LINE__ % 254 + 1); \
		} \
	} while (0)

/* Runs fn in a forked child (its pins end with it); skips where the
 * runner has fewer than two CPUs, as helpers then have nowhere to go. */
static void in_child(void (*fn)(const cpu_set_t *mine))
{
	cpu_set_t mine;
	int status = 0;
	pid_t pid;

	CPU_ZERO(&mine);
	assert_int_equal(sched_getaffinity(0, sizeof(mine), &mine), 0);
	if (CPU_COUNT(&mine) < 2)
		skip();
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		fn(&mine);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status) != 0)
		fail_msg("the child's check failed (exit %d; its message above)",
			 WEXITSTATUS(status));
}

static int first_cpu(const cpu_set_t *set)
{
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, set))
			return c;
	return -1;
}

struct helper_seen {
	cpu_set_t cpus;
	char name[16];
};

static void *helper_main(void *arg)
{
	struct helper_seen *h = arg;

	CPU_ZERO(&h->cpus);
	sched_getaffinity(0, sizeof(h->cpus), &h->cpus);
	pthread_getname_np(pthread_self(), h->name, sizeof(h->name));
	return NULL;
}

/* Starts a helper, returns what it saw of its CPUs and name. */
static void start_helper(struct helper_seen *h)
{
	pthread_t t;

	memset(h, 0, sizeof(*h));
	CHILD_CHECK(tb_thread_start(&t, "tb-test-helper", helper_main, h) == 0);
	CHILD_CHECK(pthread_join(t, NULL) == 0);
}

struct hot_job {
	int core;
	struct helper_seen seen;
};

/* A hot thread: pins itself, then starts a helper, as a publisher or
 * subscriber opened on a pinned thread starts its control, heartbeat and
 * recovery threads. */
static void *hot_main(void *arg)
{
	struct hot_job *j = arg;

	CHILD_CHECK(tb_thread_pin(j->core) == 0);
	start_helper(&j->seen);
	return NULL;
}

static void run_hot(struct hot_job *j, int core)
{
	pthread_t t;

	j->core = core;
	CHILD_CHECK(pthread_create(&t, NULL, hot_main, j) == 0);
	CHILD_CHECK(pthread_join(t, NULL) == 0);
}

static void helpers_child(const cpu_set_t *mine)
{
	int first = first_cpu(mine);
	struct helper_seen h;
	struct hot_job j;
	cpu_set_t rest, cpus, one;

	/* No pin yet: a helper keeps the caller's CPUs. */
	CHILD_CHECK(tb_thread_helper_cpus(&cpus) == 0);
	start_helper(&h);
	CHILD_CHECK(CPU_EQUAL(&h.cpus, mine));
	CHILD_CHECK(strcmp(h.name, "tb-test-helper") == 0);

	/* A helper started by a hot thread pinned to `first` runs on every
	 * other CPU the process had, not on `first`. */
	CPU_ZERO(&rest);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, mine) && c != first)
			CPU_SET(c, &rest);
	run_hot(&j, first);
	CHILD_CHECK(!CPU_ISSET(first, &j.seen.cpus));
	CHILD_CHECK(CPU_EQUAL(&j.seen.cpus, &rest));
	CHILD_CHECK(tb_thread_helper_cpus(&cpus) == CPU_COUNT(&rest));
	CHILD_CHECK(CPU_EQUAL(&cpus, &rest));

	/* Every CPU pinned: a helper has nowhere else to go and takes its
	 * starter's core. */
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &rest))
			run_hot(&j, c);
	CHILD_CHECK(tb_thread_helper_cpus(&cpus) == 0);
	run_hot(&j, first);
	CPU_ZERO(&one);
	CPU_SET(first, &one);
	CHILD_CHECK(CPU_EQUAL(&j.seen.cpus, &one));
}

static void test_helpers_keep_off_pinned_cores(void **state)
{
	(void)state;
	in_child(helpers_child);
}

/* A helper that runs until told to stop (bounded: 10 s). */
struct waiting_helper {
	atomic_int started, stop;
};

static void *waiting_main(void *arg)
{
	struct waiting_helper *w = arg;

	atomic_store(&w->started, 1);
	for (int i = 0; i < 10000 && !atomic_load(&w->stop); i++)
		usleep(1000);
	return NULL;
}

static void running_child(const cpu_set_t *mine)
{
	int first = first_cpu(mine);
	struct waiting_helper w;
	cpu_set_t rest, cpus;
	pthread_t t;

	/* Started before any pin: the caller's CPUs, `first` among them. */
	atomic_init(&w.started, 0);
	atomic_init(&w.stop, 0);
	CHILD_CHECK(tb_thread_start(&t, "tb-test-wait", waiting_main, &w) == 0);
	for (int i = 0; i < 10000 && !atomic_load(&w.started); i++)
		usleep(1000);
	CHILD_CHECK(atomic_load(&w.started));
	CHILD_CHECK(pthread_getaffinity_np(t, sizeof(cpus), &cpus) == 0);
	CHILD_CHECK(CPU_EQUAL(&cpus, mine));
	/* A later pin of `first` (here the child's main thread, as a
	 * subscriber opened after the publisher): the running helper
	 * leaves it, at once. */
	CHILD_CHECK(tb_thread_pin(first) == 0);
	CPU_ZERO(&rest);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, mine) && c != first)
			CPU_SET(c, &rest);
	CHILD_CHECK(pthread_getaffinity_np(t, sizeof(cpus), &cpus) == 0);
	CHILD_CHECK(CPU_EQUAL(&cpus, &rest));
	atomic_store(&w.stop, 1);
	CHILD_CHECK(pthread_join(t, NULL) == 0);
	/* Gone from the list: a further pin touches no thread that ended
	 * (its id may be another's by now). */
	CHILD_CHECK(tb_thread_pin(first_cpu(&rest)) == 0);
}

static void test_running_helpers_leave_a_later_pin(void **state)
{
	(void)state;
	in_child(running_child);
}

/* The affinity of this process's thread named `name`; 0 if found. */
static int thread_cpus(const char *name, cpu_set_t *cpus)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int rc = -1;

	if (!d)
		return -1;
	while (rc != 0 && (e = readdir(d))) {
		char path[300], comm[32] = "";
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		if (!(f = fopen(path, "r")))
			continue;
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = '\0';
		fclose(f);
		if (strcmp(comm, name) == 0) {
			CPU_ZERO(cpus);
			rc = sched_getaffinity(atoi(e->d_name), sizeof(*cpus), cpus);
		}
	}
	closedir(d);
	return rc;
}

/* The library's own threads: a publisher opened with publisher_core
 * starts its heartbeat thread, a subscriber opened with subscriber_core
 * its recovery thread, both off the pinned core (before: on it, taking it
 * from the hot thread whenever they woke). */
static void library_child(const cpu_set_t *mine)
{
	int first = first_cpu(mine);
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub = NULL;
	tb_subscriber_t *sub = NULL;
	cpu_set_t cpus;

	tb_stream_cfg_init(&cfg);
	snprintf(cfg.name, sizeof(cfg.name), "helpers");
	cfg.id = 7;
	cfg.transport = TB_TRANSPORT_SHM;
	cfg.ring_size = 1u << 16;
	snprintf(cfg.shm_path, sizeof(cfg.shm_path), "/dev/shm/tb-unit-thread.%d",
		 (int)getpid());
	cfg.publisher_core = first;
	if (tb_publisher_open(&pub, &cfg) != 0)
		fprintf(stderr, "%s\n", tb_errmsg());
	CHILD_CHECK(pub);
	CHILD_CHECK(thread_cpus("tb-beat", &cpus) == 0);
	CHILD_CHECK(!CPU_ISSET(first, &cpus));
	CHILD_CHECK(CPU_COUNT(&cpus) == CPU_COUNT(mine) - 1);

	cfg.subscriber_core = first;
	snprintf(cfg.recovery[0].host, sizeof(cfg.recovery[0].host), "127.0.0.1");
	cfg.recovery[0].port = 1; /* nothing answers: it keeps dialling */
	snprintf(cfg.token, sizeof(cfg.token), "unit");
	cfg.n_recovery = 1;
	if (tb_subscriber_open(&sub, &cfg) != 0)
		fprintf(stderr, "%s\n", tb_errmsg());
	CHILD_CHECK(sub);
	CHILD_CHECK(thread_cpus("tb-recovery", &cpus) == 0);
	CHILD_CHECK(!CPU_ISSET(first, &cpus));
	CHILD_CHECK(CPU_COUNT(&cpus) == CPU_COUNT(mine) - 1);
	tb_subscriber_close(sub);
	tb_publisher_close(pub);
	unlink(cfg.shm_path);
}

static void test_library_threads_keep_off_pinned_cores(void **state)
{
	(void)state;
	in_child(library_child);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		/* First, before any pin here: the cores a process pinned
		 * are remembered, and a forked child inherits them. */
		cmocka_unit_test(test_helpers_keep_off_pinned_cores),
		cmocka_unit_test(test_running_helpers_leave_a_later_pin),
		cmocka_unit_test(test_library_threads_keep_off_pinned_cores),
		cmocka_unit_test(test_cpulist_valid),
		cmocka_unit_test(test_cpulist_malformed),
		cmocka_unit_test(test_pin_changes_affinity),
		cmocka_unit_test(test_pin_bad_core),
		cmocka_unit_test(test_isolated_and_warning),
	};
	int rc;

	snprintf(iso_path, sizeof(iso_path), "/tmp/tbtest-isolated-%d",
		 (int)getpid());
	setenv("TICKBUS_QUIET", "1", 1);
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	unlink(iso_path);
	return rc;
}
