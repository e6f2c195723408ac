/*
 * test_clock.c - the TSC clock: accuracy against clock_gettime, monotonicity,
 * the shared calibration file (trusted only from this user or root, never
 * writable by others), two processes agreeing, the gettime fallback;
 * and the system clocks' wrappers (mono, mono coarse, realtime).
 *
 * The whole binary uses its own calibration file (TICKBUS_CLOCK_FILE, set in
 * main) and removes it at the end.  Child processes are this binary again,
 * exec'd with --child, so that they initialise from scratch as a separate
 * program would.
 */
#include "bus/clock.h"
#include "bus/error.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

/* Agreement with CLOCK_REALTIME right after calibration.  The calibration
 * itself is good to a bracket (~0.1 us); 50 us leaves room for a preempted
 * vCPU and still catches any wrong offset or unit. */
#define OFFSET_BOUND_NS 50000
/* Rate error over 50 ms: a real calibration is within a few ppm; 100 ppm
 * (5 us over 50 ms) catches a wrong rate while tolerating a noisy VM. */
#define RATE_BOUND_PPM 100.0
/* How many times a timing measurement may be repeated on a noisy machine. */
#define ATTEMPTS 5

static char clock_path[256];

static uint64_t ts_now(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Best-of-64 pairing of a TSC reading with clock `id`. */
static uint64_t pair(clockid_t id, uint64_t *tsc, uint64_t *ns)
{
	uint64_t best = UINT64_MAX;

	for (int i = 0; i < 64; i++) {
		uint64_t a = ts_now(id), t = tb_clock_tsc(), b = ts_now(id);

		if (b - a < best) {
			best = b - a;
			*tsc = t;
			*ns = a + (b - a) / 2;
		}
	}
	return best;
}

static int skip_unless_tsc(void)
{
	if (!tb_clock_tsc_invariant()) {
		fprintf(stderr, "no invariant TSC on this machine\n");
		skip();
		return 1;
	}
	return 0;
}

static void test_invariant_detection(void **state)
{
	(void)state;
	/* The machine the tests run on reports both flags; CPUID agrees. */
	FILE *f = popen("grep -m1 -c -w nonstop_tsc /proc/cpuinfo", "r");
	int kernel = 0;

	assert_non_null(f);
	assert_int_equal(fscanf(f, "%d", &kernel), 1);
	pclose(f);
	if (kernel)
		assert_int_equal(tb_clock_tsc_invariant(), 1);
}

static void test_calibration_accuracy(void **state)
{
	(void)state;
	tb_clock_calib_t cal;
	int64_t off = 0;
	double ppm = 0;
	int ok = 0;

	if (skip_unless_tsc())
		return;
	for (int attempt = 0; attempt < ATTEMPTS && !ok; attempt++) {
		uint64_t t, n, t0, n0, t1, n1;

		assert_int_equal(tb_clock_calibrate(&cal, 0), 0);
		assert_true(cal.tsc_hz > 1000000);
		pair(CLOCK_REALTIME, &t, &n);
		off = (int64_t)(tb_clock_calib_to_ns(&cal, t) - n);

		pair(CLOCK_MONOTONIC_RAW, &t0, &n0);
		usleep(50000);
		pair(CLOCK_MONOTONIC_RAW, &t1, &n1);
		ppm = ((double)(tb_clock_calib_to_ns(&cal, t1) -
				tb_clock_calib_to_ns(&cal, t0)) -
		       (double)(n1 - n0)) /
		      (double)(n1 - n0) * 1e6;
		printf("attempt %d: offset %lld ns, rate error %.3f ppm, "
		       "TSC %.3f MHz\n",
		       attempt, (long long)off, ppm, (double)cal.tsc_hz / 1e6);
		ok = llabs(off) < OFFSET_BOUND_NS &&
		     ppm < RATE_BOUND_PPM && ppm > -RATE_BOUND_PPM;
	}
	assert_true(ok);
}

static void test_conversion_arithmetic(void **state)
{
	(void)state;
	/* 2.5 GHz: 0.4 ns per tick. */
	tb_clock_calib_t c = { .base_tsc = 1000000, .base_ns = 5000000000ull,
			       .mult = (uint64_t)(0.4 * 4294967296.0),
			       .shift = 32 };

	assert_int_equal(tb_clock_calib_to_ns(&c, 1000000), 5000000000ull);
	assert_int_equal(tb_clock_calib_to_ns(&c, 1000000 + 2500000000ull),
			 5000000000ull + 1000000000ull - 1);
	/* A read a little before the base (another core) goes backwards
	 * a little, not to the far future. */
	assert_true(tb_clock_calib_to_ns(&c, 1000000 - 250) >=
		    5000000000ull - 101);
	assert_true(tb_clock_calib_to_ns(&c, 1000000 - 250) < 5000000000ull);
	/* Ten years of ticks do not overflow. */
	uint64_t ten_years = 10ull * 365 * 86400 * 2500000000ull;
	uint64_t ns = tb_clock_calib_to_ns(&c, 1000000 + ten_years);
	assert_true(ns - 5000000000ull > 10ull * 365 * 86400 * 999999999ull);
}

static void test_now_agrees_with_realtime(void **state)
{
	(void)state;
	int64_t off = 0;

	tb_clock_init();
	if (strcmp(tb_clock_source(), "tsc") != 0) {
		skip();
		return;
	}
	for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
		uint64_t a = ts_now(CLOCK_REALTIME);
		uint64_t t = tb_clock_now_ns_inline();
		uint64_t b = ts_now(CLOCK_REALTIME);

		off = (int64_t)(t - (a + (b - a) / 2));
		if (llabs(off) < OFFSET_BOUND_NS)
			break;
	}
	printf("tb_clock_now_ns - CLOCK_REALTIME = %lld ns\n", (long long)off);
	assert_true(llabs(off) < OFFSET_BOUND_NS);
}

static void test_monotonic(void **state)
{
	(void)state;
	uint64_t prev = tb_clock_now_ns_inline(), backwards = 0;

	for (int i = 0; i < 1000000; i++) {
		uint64_t t = tb_clock_now_ns_inline();

		if (t < prev)
			backwards++;
		prev = t;
	}
	assert_int_equal(backwards, 0);
}

/* The system clocks' wrappers read the clock they name: each result lies
 * between two direct readings of it. */
static void test_system_clocks(void **state)
{
	(void)state;
	uint64_t a, t, b, prev = 0;

	a = ts_now(CLOCK_REALTIME);
	t = tb_clock_realtime_ns();
	b = ts_now(CLOCK_REALTIME);
	assert_true(a <= t && t <= b);

	a = ts_now(CLOCK_MONOTONIC);
	t = tb_clock_mono_ns();
	b = ts_now(CLOCK_MONOTONIC);
	assert_true(a <= t && t <= b);
	assert_true(a / 1000000u <= tb_clock_mono_ms());

	for (int i = 0; i < 1000; i++) {
		a = ts_now(CLOCK_MONOTONIC_COARSE);
		t = tb_clock_mono_coarse_ns();
		b = ts_now(CLOCK_MONOTONIC_COARSE);
		assert_true(a <= t && t <= b);
		assert_true(t >= prev);
		prev = t;
	}
}

/* -------------------------------------------------------- the shared file */

static void temp_path(char *buf, size_t len, const char *tag)
{
	snprintf(buf, len, "/dev/shm/tbtest-clock-%d-%s", (int)getpid(), tag);
}

static void test_file_created_then_reused(void **state)
{
	(void)state;
	tb_clock_calib_t a, b;
	char path[128];
	int created;

	if (skip_unless_tsc())
		return;
	temp_path(path, sizeof(path), "reuse");
	unlink(path);
	assert_int_equal(tb_clock_load_or_create(path, &a, &created), 0);
	assert_int_equal(created, 1);
	assert_int_equal(tb_clock_load_or_create(path, &b, &created), 0);
	assert_int_equal(created, 0);
	assert_memory_equal(&a, &b, sizeof(a));
	assert_int_equal(unlink(path), 0);
}

static void write_bytes(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

static size_t read_bytes(const char *path, void *buf, size_t cap)
{
	int fd = open(path, O_RDONLY);
	ssize_t n;

	assert_true(fd >= 0);
	n = read(fd, buf, cap);
	close(fd);
	assert_true(n >= 0);
	return (size_t)n;
}

/* A file that does not check out is replaced by a valid one. */
static void expect_replaced(const char *path)
{
	tb_clock_calib_t a, b;
	int created;

	assert_int_equal(tb_clock_load_or_create(path, &a, &created), 0);
	assert_int_equal(created, 1);
	assert_int_equal(tb_clock_load_or_create(path, &b, &created), 0);
	assert_int_equal(created, 0);
	assert_memory_equal(&a, &b, sizeof(a));
}

static void test_file_bad_is_replaced(void **state)
{
	(void)state;
	unsigned char good[104], bad[104];
	tb_clock_calib_t cal;
	char path[128];
	int created;

	if (skip_unless_tsc())
		return;
	temp_path(path, sizeof(path), "bad");
	unlink(path);
	assert_int_equal(tb_clock_load_or_create(path, &cal, &created), 0);
	assert_int_equal(read_bytes(path, good, sizeof(good)), sizeof(good));

	/* Garbage of the right size. */
	memset(bad, 0x5a, sizeof(bad));
	write_bytes(path, bad, sizeof(bad));
	expect_replaced(path);

	/* Wrong format version (offset 8). */
	memcpy(bad, good, sizeof(bad));
	bad[8] = 99;
	write_bytes(path, bad, sizeof(bad));
	expect_replaced(path);

	/* Version 0: a writer that never finished. */
	memcpy(bad, good, sizeof(bad));
	memset(bad + 8, 0, 4);
	write_bytes(path, bad, sizeof(bad));
	expect_replaced(path);

	/* Another boot id (offset 16). */
	memcpy(bad, good, sizeof(bad));
	bad[16] ^= 1;
	write_bytes(path, bad, sizeof(bad));
	expect_replaced(path);

	/* A flipped calibration bit (checksum). */
	memcpy(bad, good, sizeof(bad));
	bad[75] ^= 0x10;
	write_bytes(path, bad, sizeof(bad));
	expect_replaced(path);

	/* Truncated, and too long. */
	write_bytes(path, good, 50);
	expect_replaced(path);
	write_bytes(path, good, 5);
	expect_replaced(path);
	memcpy(bad, good, sizeof(bad));
	{
		unsigned char longer[200];

		memset(longer, 0, sizeof(longer));
		memcpy(longer, good, sizeof(good));
		write_bytes(path, longer, sizeof(longer));
		expect_replaced(path);
	}

	/* Empty. */
	write_bytes(path, good, 0);
	expect_replaced(path);

	assert_int_equal(unlink(path), 0);
}

/* FNV-1a of bytes [16, 96) of the 104-byte file: its checksum (clock.c). */
static uint64_t file_check(const unsigned char *b)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (int i = 16; i < 96; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

/* The calibration at `path` is `want`, and is reused. */
static void expect_reused(const char *path, const tb_clock_calib_t *want)
{
	tb_clock_calib_t again;
	int created;

	assert_int_equal(tb_clock_load_or_create(path, &again, &created), 0);
	assert_int_equal(created, 0);
	assert_memory_equal(&again, want, sizeof(again));
}

/* Half a second: within what a reused calibration may be off the
 * real-time clock (a second), so a file shifted by it is still used. */
#define SHIFT_NS 500000000ull

/* A valid calibration file whose time is `ns` later (base_ns at 64) and
 * whose TSC base is `ticks` later (base_tsc at 56), checksum and all: what
 * a user on the host could write, or what a machine whose TSC went back
 * finds. */
static void write_moved(const char *path, const unsigned char *good,
			uint64_t ns, uint64_t ticks)
{
	unsigned char b[104];
	uint64_t v, check;

	memcpy(b, good, sizeof(b));
	memcpy(&v, b + 64, 8);
	v += ns;
	memcpy(b + 64, &v, 8);
	memcpy(&v, b + 56, 8);
	v += ticks;
	memcpy(b + 56, &v, 8);
	check = file_check(b);
	memcpy(b + 96, &check, 8);
	write_bytes(path, b, sizeof(b));
}

static void write_shifted(const char *path, const unsigned char *good)
{
	write_moved(path, good, SHIFT_NS, 0);
}

/*
 * A calibration file that checks out but no longer tells the time is
 * replaced: an hour off CLOCK_REALTIME (the TSC stopped in a sleep, or the
 * time was set), or made on a TSC ahead of today's (a VM restored from a
 * snapshot keeps its boot id; measured 18.7 h off, and every offer stamped
 * centuries away).  Half a second off is drift, and kept.
 */
static void test_file_off_the_clock_is_replaced(void **state)
{
	unsigned char good[104];
	tb_clock_calib_t cal, got;
	char path[128];
	int created;

	(void)state;
	if (skip_unless_tsc())
		return;
	temp_path(path, sizeof(path), "off");
	unlink(path);
	assert_int_equal(tb_clock_load_or_create(path, &cal, &created), 0);
	assert_int_equal(read_bytes(path, good, sizeof(good)), sizeof(good));

	write_moved(path, good, SHIFT_NS, 0);
	assert_int_equal(tb_clock_load_or_create(path, &got, &created), 0);
	assert_int_equal(created, 0);
	assert_true(got.base_ns == cal.base_ns + SHIFT_NS);

	write_moved(path, good, 3600ull * 1000000000ull, 0);
	assert_int_equal(tb_clock_load_or_create(path, &got, &created), 0);
	assert_int_equal(created, 1);
	assert_true(got.base_ns != cal.base_ns + 3600ull * 1000000000ull);
	expect_reused(path, &got);

	/* Its TSC base ahead of ours by 2^44 ticks (hours), its time the
	 * same: today's TSC is behind it. */
	write_moved(path, good, 0, 1ull << 44);
	assert_int_equal(tb_clock_load_or_create(path, &got, &created), 0);
	assert_int_equal(created, 1);
	assert_true(got.base_tsc < cal.base_tsc + (1ull << 44));
	assert_true(tb_clock_calib_to_ns(&got, tb_clock_tsc()) <
		    tb_clock_realtime_ns() + 1000000000ull);
	expect_reused(path, &got);
	assert_int_equal(unlink(path), 0);
}

static int load_from(const char *path)
{
	tb_clock_calib_t cal;
	int created;

	return tb_clock_load_or_create(path, &cal, &created) == TB_EAUTH ? 0 : 1;
}

/* The file is trusted only when it is a regular file of this user or root
 * that nobody else may write: a world-writable one is replaced, another
 * user's is not used (nor touched), a FIFO or a link neither hangs nor is
 * followed. */
static void test_file_untrusted_is_not_used(void **state)
{
	(void)state;
	unsigned char good[104];
	tb_clock_calib_t cal, shifted;
	char path[128], target[160];
	int created, status;
	pid_t pid;
	struct stat st;

	if (skip_unless_tsc())
		return;
	temp_path(path, sizeof(path), "trust");
	unlink(path);
	assert_int_equal(tb_clock_load_or_create(path, &cal, &created), 0);
	assert_int_equal(read_bytes(path, good, sizeof(good)), sizeof(good));
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0644);

	/* The shifted file is valid: with a sane mode it is used. */
	write_shifted(path, good);
	assert_int_equal(tb_clock_load_or_create(path, &shifted, &created), 0);
	assert_int_equal(created, 0);
	assert_true(shifted.base_ns == cal.base_ns + SHIFT_NS);

	/* World-writable: anyone could have written it.  Replaced. */
	assert_int_equal(chmod(path, 0666), 0);
	assert_int_equal(tb_clock_load_or_create(path, &shifted, &created), 0);
	assert_int_equal(created, 1);
	assert_true(shifted.base_ns != cal.base_ns + SHIFT_NS);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0644);

	/* Another user's: not used, not replaced. */
	if (geteuid() == 0) {
		write_shifted(path, good);
		assert_int_equal(chown(path, 65534, 65534), 0);
		assert_int_equal(tb_clock_load_or_create(path, &shifted, &created),
				 TB_EAUTH);
		assert_non_null(strstr(tb_errmsg(), "owned by another user"));
		assert_int_equal(stat(path, &st), 0);
		assert_int_equal(st.st_uid, 65534);
	} else {
		print_message("another user's file: needs root (chown); "
			      "not checked\n");
	}
	unlink(path);

	/* A link: not followed, its target untouched. */
	snprintf(target, sizeof(target), "%s.target", path);
	write_bytes(target, "keep", 4);
	assert_int_equal(symlink(target, path), 0);
	assert_int_equal(tb_clock_load_or_create(path, &shifted, &created),
			 TB_EAUTH);
	assert_int_equal(read_bytes(target, good, sizeof(good)), 4);
	unlink(path);
	unlink(target);

	/* A FIFO: refused at once (a child with an alarm: a hang fails). */
	temp_path(path, sizeof(path), "fifo");
	unlink(path);
	assert_int_equal(mkfifo(path, 0644), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(20);
		_exit(load_from(path));
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	unlink(path);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* Processes that start together end up on one calibration: exactly one
 * creates the file, the others wait on its lock and reuse it. */
static void test_file_race_one_calibration(void **state)
{
	(void)state;
	enum { N = 4 };
	struct { unsigned long long mult, base_ns; int created; } got[N];
	int fds[N][2], status, creators = 0;
	char path[128];
	pid_t pids[N];

	if (skip_unless_tsc())
		return;
	temp_path(path, sizeof(path), "race");
	unlink(path);
	for (int i = 0; i < N; i++) {
		assert_int_equal(pipe(fds[i]), 0);
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0) {
			tb_clock_calib_t c;
			int created = 0;
			char line[128];
			int n;

			if (tb_clock_load_or_create(path, &c, &created) != 0)
				_exit(1);
			n = snprintf(line, sizeof(line), "%llu %llu %d",
				     (unsigned long long)c.mult,
				     (unsigned long long)c.base_ns, created);
			_exit(write(fds[i][1], line, (size_t)n) == n ? 0 : 2);
		}
		close(fds[i][1]);
	}
	for (int i = 0; i < N; i++) {
		char line[128];
		ssize_t n = read(fds[i][0], line, sizeof(line) - 1);

		close(fds[i][0]);
		assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		assert_true(n > 0);
		line[n] = '\0';
		assert_int_equal(sscanf(line, "%llu %llu %d", &got[i].mult,
					&got[i].base_ns, &got[i].created),
				 3);
		creators += got[i].created;
	}
	assert_int_equal(creators, 1);
	for (int i = 1; i < N; i++) {
		assert_int_equal(got[i].mult, got[0].mult);
		assert_int_equal(got[i].base_ns, got[0].base_ns);
	}
	assert_int_equal(unlink(path), 0);
}

static void test_file_bad_args(void **state)
{
	(void)state;
	tb_clock_calib_t cal;
	char longpath[400];
	int created;

	assert_int_equal(tb_clock_load_or_create(NULL, &cal, &created),
			 TB_EINVAL);
	assert_int_equal(tb_clock_load_or_create("", &cal, &created),
			 TB_EINVAL);
	memset(longpath, 'a', sizeof(longpath) - 1);
	longpath[sizeof(longpath) - 1] = '\0';
	assert_int_equal(tb_clock_load_or_create(longpath, &cal, &created),
			 TB_EINVAL);
	assert_true(tb_clock_load_or_create("/nonexistent-dir/x", &cal,
					    &created) < 0);
	assert_non_null(strstr(tb_errmsg(), "/nonexistent-dir/x"));
	assert_int_equal(tb_clock_calibrate(NULL, 0), TB_EINVAL);
}

/* ---------------------------------------------------------- two processes */

struct child_report {
	char source[16];
	int from_file;
	unsigned long long mult, base_ns, ts;
};

/* Runs this binary with --child and `env_kv` (NAME=value or NULL) added. */
static void run_child(const char *env_kv, struct child_report *r)
{
	int fds[2], status;
	char buf[256];
	ssize_t n;
	pid_t pid;

	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		close(fds[1]);
		if (env_kv)
			putenv((char *)env_kv);
		execl("/proc/self/exe", "test_clock", "--child", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	n = read(fds[0], buf, sizeof(buf) - 1);
	close(fds[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_true(n > 0);
	buf[n] = '\0';
	assert_int_equal(sscanf(buf, "%15s %d %llu %llu %llu", r->source,
				&r->from_file, &r->mult, &r->base_ns, &r->ts),
			 5);
}

static int child_main(void)
{
	tb_clock_calib_t cal;
	int from_file = 0;
	uint64_t ts;

	tb_clock_init();
	ts = tb_clock_now_ns();
	tb_clock_get(&cal, &from_file);
	printf("%s %d %llu %llu %llu\n", tb_clock_source(), from_file,
	       (unsigned long long)cal.mult, (unsigned long long)cal.base_ns,
	       (unsigned long long)ts);
	return 0;
}

static void test_two_processes_agree(void **state)
{
	(void)state;
	struct child_report r;
	tb_clock_calib_t cal;
	uint64_t before, after;

	tb_clock_init();
	if (strcmp(tb_clock_source(), "tsc") != 0) {
		skip();
		return;
	}
	tb_clock_get(&cal, NULL);
	before = tb_clock_now_ns();
	run_child(NULL, &r);
	after = tb_clock_now_ns();
	printf("parent before %llu, child %llu, parent after %llu\n",
	       (unsigned long long)before, r.ts, (unsigned long long)after);
	assert_string_equal(r.source, "tsc");
	assert_int_equal(r.from_file, 1);
	assert_int_equal(r.mult, cal.mult);
	assert_int_equal(r.base_ns, cal.base_ns);
	assert_true(before <= r.ts);
	assert_true(r.ts <= after);
}

static void test_gettime_fallback(void **state)
{
	(void)state;
	struct child_report r;
	uint64_t before, after;

	before = ts_now(CLOCK_REALTIME);
	run_child("TICKBUS_CLOCK=gettime", &r);
	after = ts_now(CLOCK_REALTIME);
	assert_string_equal(r.source, "gettime");
	assert_int_equal(r.from_file, 0);
	assert_true(before <= r.ts);
	assert_true(r.ts <= after);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_invariant_detection),
		cmocka_unit_test(test_conversion_arithmetic),
		cmocka_unit_test(test_calibration_accuracy),
		cmocka_unit_test(test_now_agrees_with_realtime),
		cmocka_unit_test(test_monotonic),
		cmocka_unit_test(test_system_clocks),
		cmocka_unit_test(test_file_created_then_reused),
		cmocka_unit_test(test_file_bad_is_replaced),
		cmocka_unit_test(test_file_untrusted_is_not_used),
		cmocka_unit_test(test_file_off_the_clock_is_replaced),
		cmocka_unit_test(test_file_race_one_calibration),
		cmocka_unit_test(test_file_bad_args),
		cmocka_unit_test(test_two_processes_agree),
		cmocka_unit_test(test_gettime_fallback),
	};
	int rc;

	if (argc > 1 && strcmp(argv[1], "--child") == 0)
		return child_main();
	snprintf(clock_path, sizeof(clock_path), "/dev/shm/tbtest-clock-%d",
		 (int)getpid());
	unlink(clock_path);
	setenv("TICKBUS_CLOCK_FILE", clock_path, 1);
	unsetenv("TICKBUS_CLOCK");
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	unlink(clock_path);
	return rc;
}
