/*
 * clock.c - calibrating the invariant TSC, and sharing the calibration.
 *
 * Why the TSC.  clock_gettime() through the vDSO costs 20-60 ns and, under a
 * hypervisor clocksource, sometimes a system call; a timestamp on every
 * published and delivered message must cost less than that.  An invariant TSC
 * ticks at a constant rate in every P- and C-state and is synchronised across
 * the cores of a socket by the hardware, so one rdtsc plus a fixed-point
 * multiply gives nanoseconds.
 *
 * Calibration.  The tick rate is measured against CLOCK_MONOTONIC_RAW (never
 * slewed by NTP) between two points `window` apart (15 ms by default).  Each
 * point is the best of many samples of "clock_gettime, rdtsc, clock_gettime":
 * the sample with the narrowest bracket wins and the TSC is paired with the
 * bracket's midpoint, so the error of a point is at most half the narrowest
 * bracket (tens of ns).  The offset is then taken the same way against
 * CLOCK_REALTIME, so right after calibration the two clocks agree within a
 * bracket.  The rate becomes mult/shift with shift = 32, so that the hot path
 * is a 64x64->128 multiply and a shift, never a division.
 *
 * One calibration per host.  One-way latency is a publisher's timestamp
 * subtracted from a subscriber's, in two processes; each calibrating on its
 * own would add the difference of two calibration errors to every sample.  So
 * the first process writes its calibration to a small file
 * (/dev/shm/tickbus.clock, or $TICKBUS_CLOCK_FILE) and every later process of
 * the same boot reuses it.  The file carries a magic number, a format version
 * (written last, checked first), its own size, the boot id and a checksum;
 * anything that does not check out is ignored and replaced.  Creation is
 * serialised with flock() on the file itself: the winner calibrates, writes a
 * temp file and rename()s it over the path; a waiter that wakes up holding a
 * lock on an inode that is no longer at the path reopens and looks again.
 * Thus two processes never run on different calibrations.
 *
 * Whom to believe.  /dev/shm is writable by every user, and a calibration
 * shifts every timestamp of every process that loads it.  So the file is
 * opened without following a link or waiting on a FIFO (O_NOFOLLOW |
 * O_NONBLOCK), created new (O_EXCL), and trusted only when it is a regular
 * file owned by this user or root that nobody else may write (mode 0644).
 * One of this user's own files that is writable by others is replaced; one
 * of another user's is left alone, and this process calibrates privately
 * (tb_clock_load_or_create says why: TB_EAUTH).
 *
 * Drift bound (why there is no periodic re-sync).  Processes sharing the file
 * compute identical timestamps from the same TSC, so their differences are
 * exact for as long as the file lives; only the offset to CLOCK_REALTIME
 * drifts.  It drifts by (calibration rate error + NTP's frequency correction)
 * times the file's age: the first is about bracket/window, typically 1-5 ppm;
 * the second is bounded by the kernel at 500 ppm and is usually under 50 ppm.
 * With 10 ppm that is 36 ms per hour of file age, irrelevant for same-host
 * latency.  Timestamps that must match another host use clock_gettime
 * (DESIGN.md section 7); deleting the file recalibrates on the next start.
 */
#include "bus/clock.h"

#include "bus/error.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if TB_CLOCK_HAVE_TSC
#include <cpuid.h>
#endif

tb_clock_state_t tb_clock_state_;

static pthread_once_t clock_once = PTHREAD_ONCE_INIT;

/* 15 ms: long enough that a ~50 ns bracket error is ~3 ppm of rate, short
 * enough to go unnoticed at start-up. */
#define CLOCK_WINDOW_NS 15000000ull
/* Samples per calibration point: enough that at least one bracket escapes a
 * preemption or a hypervisor exit. */
#define CLOCK_SAMPLES 64
#define CLOCK_SHIFT TB_CLOCK_SHIFT

#define CLOCK_FILE_MAGIC 0x4b434f4c43425454ull /* "TTBCLOCK" little-endian */
#define CLOCK_FILE_VERSION 1u
#define CLOCK_BOOT_ID_LEN 40

/* The shared calibration file: fixed-width, native byte order (host-local). */
struct clock_file {
	uint64_t magic;                  /* CLOCK_FILE_MAGIC */
	uint32_t version;                /* written last, checked first */
	uint32_t size;                   /* sizeof(struct clock_file) */
	char boot_id[CLOCK_BOOT_ID_LEN]; /* NUL-padded */
	uint64_t base_tsc;
	uint64_t base_ns;
	uint64_t mult;
	uint32_t shift;
	uint32_t pad;
	uint64_t tsc_hz;
	uint64_t check; /* FNV-1a of bytes [16, offsetof(check)) */
};

_Static_assert(offsetof(struct clock_file, magic) == 0, "clock file layout");
_Static_assert(offsetof(struct clock_file, version) == 8, "clock file layout");
_Static_assert(offsetof(struct clock_file, size) == 12, "clock file layout");
_Static_assert(offsetof(struct clock_file, boot_id) == 16, "clock file layout");
_Static_assert(offsetof(struct clock_file, base_tsc) == 56, "clock file layout");
_Static_assert(offsetof(struct clock_file, base_ns) == 64, "clock file layout");
_Static_assert(offsetof(struct clock_file, mult) == 72, "clock file layout");
_Static_assert(offsetof(struct clock_file, shift) == 80, "clock file layout");
_Static_assert(offsetof(struct clock_file, tsc_hz) == 88, "clock file layout");
_Static_assert(offsetof(struct clock_file, check) == 96, "clock file layout");
_Static_assert(sizeof(struct clock_file) == 104, "clock file layout");

static uint64_t ts_ns(const struct timespec *ts)
{
	return (uint64_t)ts->tv_sec * 1000000000ull + (uint64_t)ts->tv_nsec;
}

/* One reading of a system clock, in ns. */
static uint64_t system_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return ts_ns(&ts);
}

/* ------------------------------------------------------------ detection */

/* Whether the first "flags" line of /proc/cpuinfo lists `flag`. */
static int cpuinfo_has(const char *flag)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char *line = NULL;
	size_t cap = 0;
	int found = 0;

	if (!f)
		return 0;
	while (getline(&line, &cap, f) > 0) {
		if (strncmp(line, "flags", 5) != 0)
			continue;
		for (char *save = NULL, *w = strtok_r(line, " \t\n", &save); w;
		     w = strtok_r(NULL, " \t\n", &save))
			if (strcmp(w, flag) == 0)
				found = 1;
		break;
	}
	free(line);
	fclose(f);
	return found;
}

int tb_clock_tsc_invariant(void)
{
	int by_cpuid = 0, by_kernel;

#if TB_CLOCK_HAVE_TSC
	unsigned a, b, c, d;

	/* unsigned: gcc's cpuid.h returns it so, clang's as an int. */
	if ((unsigned)__get_cpuid_max(0x80000000u, NULL) >= 0x80000007u &&
	    __get_cpuid(0x80000007u, &a, &b, &c, &d))
		by_cpuid = (d >> 8) & 1;
#else
	return 0;
#endif
	by_kernel = cpuinfo_has("constant_tsc") && cpuinfo_has("nonstop_tsc");
	if (by_cpuid != by_kernel)
		tb_info("clock: invariant TSC: CPUID says %s, /proc/cpuinfo "
			"constant_tsc+nonstop_tsc says %s; trusting %s",
			by_cpuid ? "yes" : "no", by_kernel ? "yes" : "no",
			by_cpuid ? "CPUID" : "the kernel");
	return by_cpuid || by_kernel;
}

/* ---------------------------------------------------------- calibration */

/* Pairs one TSC reading with clock `id`: the narrowest of CLOCK_SAMPLES
 * brackets wins; returns its width in ns. */
static uint64_t clock_sample(clockid_t id, uint64_t *tsc, uint64_t *ns)
{
	uint64_t best = UINT64_MAX;

	for (int i = 0; i < CLOCK_SAMPLES; i++) {
		struct timespec a, b;
		uint64_t t, w;

		clock_gettime(id, &a);
		t = tb_clock_tsc();
		clock_gettime(id, &b);
		w = ts_ns(&b) - ts_ns(&a);
		if (w < best) {
			best = w;
			*tsc = t;
			*ns = ts_ns(&a) + w / 2;
		}
	}
	return best;
}

int tb_clock_calibrate(tb_clock_calib_t *cal, uint64_t window_ns)
{
	uint64_t t0, n0, t1, n1, w0, w1, dt, dn;
	struct timespec start, now;
	unsigned __int128 m;

	if (!TB_CLOCK_HAVE_TSC)
		return tb_error_set(TB_ENOTSUP, "clock: this CPU has no TSC");
	if (!cal)
		return tb_error_set(TB_EINVAL, "clock: calibrate: cal is NULL");
	if (window_ns == 0)
		window_ns = CLOCK_WINDOW_NS;

	w0 = clock_sample(CLOCK_MONOTONIC_RAW, &t0, &n0);
	/* Sleep most of the window, then wait out the rest, so that a long
	 * oversleep on a busy machine only lengthens the window. */
	clock_gettime(CLOCK_MONOTONIC_RAW, &start);
	if (window_ns > 1000000) {
		struct timespec nap = { 0, (long)(window_ns - 1000000) };

		while (nanosleep(&nap, &nap) != 0 && errno == EINTR)
			;
	}
	do
		clock_gettime(CLOCK_MONOTONIC_RAW, &now);
	while (ts_ns(&now) - ts_ns(&start) < window_ns);
	w1 = clock_sample(CLOCK_MONOTONIC_RAW, &t1, &n1);

	dt = t1 - t0;
	dn = n1 - n0;
	if (t1 <= t0 || dn < window_ns / 2)
		return tb_error_set(TB_ESYS, "clock: calibration failed: TSC "
				  "advanced %llu ticks in %llu ns",
				  (unsigned long long)dt,
				  (unsigned long long)dn);
	m = ((unsigned __int128)dn << CLOCK_SHIFT) / dt;
	cal->mult = (uint64_t)m;
	cal->shift = CLOCK_SHIFT;
	cal->pad_ = 0;
	cal->tsc_hz = (uint64_t)((unsigned __int128)dt * 1000000000u / dn);
	if (cal->tsc_hz < 1000000 || cal->tsc_hz > 100000000000ull)
		return tb_error_set(TB_ESYS, "clock: calibration gave an "
				  "implausible TSC rate of %llu Hz",
				  (unsigned long long)cal->tsc_hz);

	clock_sample(CLOCK_REALTIME, &cal->base_tsc, &cal->base_ns);
	tb_info("clock: TSC %.3f MHz, calibrated over %.1f ms (brackets %llu "
		"and %llu ns, rate error <= %.2f ppm)",
		(double)cal->tsc_hz / 1e6, (double)dn / 1e6,
		(unsigned long long)w0, (unsigned long long)w1,
		(double)(w0 + w1) / 2 / (double)dn * 1e6);
	return 0;
}

/* ---------------------------------------------------------- shared file */

static void read_boot_id(char out[CLOCK_BOOT_ID_LEN])
{
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");

	memset(out, 0, CLOCK_BOOT_ID_LEN);
	if (!f || !fgets(out, CLOCK_BOOT_ID_LEN, f))
		snprintf(out, CLOCK_BOOT_ID_LEN, "unknown");
	out[strcspn(out, "\n")] = '\0';
	memset(out + strlen(out), 0, CLOCK_BOOT_ID_LEN - strlen(out));
	if (f)
		fclose(f);
}

static uint64_t file_check(const struct clock_file *cf)
{
	const unsigned char *p = (const unsigned char *)cf + 16;
	const unsigned char *end = (const unsigned char *)&cf->check;
	uint64_t h = 0xcbf29ce484222325ull;

	while (p < end)
		h = (h ^ *p++) * 0x100000001b3ull;
	return h;
}

/* How far a reused calibration may be from CLOCK_REALTIME: a second, and
 * 100 ppm of its age (the drift bound above, twice over). */
#define CLOCK_FILE_SLACK_NS 1000000000ull
#define CLOCK_FILE_DRIFT_DIV 10000u

/*
 * Why the calibration in `cf`, valid as a file, no longer tells the time,
 * or NULL.  A machine restored from a snapshot or migrated keeps its boot
 * id but not its TSC, and one that slept may have stopped the TSC: the
 * file then converts today's TSC to a time hours away (measured: 18.7 h
 * on a restored VM), and the publisher's offer, which takes the TSC as
 * never behind the file's base (tb_clock_fwd_t), to a time centuries
 * away.  Every timestamp of every process would be off by that much.
 */
static const char *file_off_time(const struct clock_file *cf)
{
#if TB_CLOCK_HAVE_TSC
	const tb_clock_calib_t c = {.base_tsc = cf->base_tsc,
				    .base_ns = cf->base_ns, .mult = cf->mult,
				    .shift = cf->shift};
	uint64_t tsc = tb_clock_tsc(), real = tb_clock_realtime_ns(), ns, off;

	if (tsc < cf->base_tsc)
		return "from a TSC ahead of this one (a restored or migrated "
		       "machine)";
	ns = tb_clock_calib_to_ns(&c, tsc);
	off = ns > real ? ns - real : real - ns;
	if (off > CLOCK_FILE_SLACK_NS +
		      (real > cf->base_ns ? real - cf->base_ns : 0) /
			      CLOCK_FILE_DRIFT_DIV)
		return "off CLOCK_REALTIME by more than drift explains (the "
		       "TSC stopped or jumped, or the time was set)";
#else
	(void)cf;
#endif
	return NULL;
}

/* Why `fd`'s content is not a usable calibration, or NULL if it is. */
static const char *file_invalid(int fd, const char *boot_id,
				struct clock_file *cf)
{
	struct stat st;
	ssize_t n;

	if (fstat(fd, &st) != 0)
		return "cannot stat";
	if (st.st_size == 0)
		return "empty";
	memset(cf, 0, sizeof(*cf));
	n = pread(fd, cf, sizeof(*cf), 0);
	if (n < (ssize_t)offsetof(struct clock_file, boot_id))
		return "truncated";
	if (cf->version != CLOCK_FILE_VERSION)
		return "unknown format version";
	if (cf->size != sizeof(*cf) || n != (ssize_t)sizeof(*cf) ||
	    st.st_size != (off_t)sizeof(*cf))
		return "wrong size";
	if (cf->magic != CLOCK_FILE_MAGIC)
		return "bad magic";
	if (cf->check != file_check(cf))
		return "bad checksum";
	if (memcmp(cf->boot_id, boot_id, CLOCK_BOOT_ID_LEN) != 0)
		return "written before the last boot";
	if (cf->mult == 0 || cf->shift != CLOCK_SHIFT)
		return "bad calibration values";
	return NULL;
}

/* The calibration file's mode: everyone may read it, only its owner write. */
#define CLOCK_FILE_MODE 0644

/* Why the file `st` at `path` is not to be trusted, or NULL: a regular file
 * of this user or root that only its owner may write.  *mine says whether
 * it is this user's own (and so may be replaced). */
static const char *file_untrusted(const struct stat *st, int *mine)
{
	*mine = st->st_uid == geteuid();
	if (!S_ISREG(st->st_mode))
		return "not a regular file";
	if (!*mine && st->st_uid != 0)
		return "owned by another user";
	if (st->st_mode & (S_IWGRP | S_IWOTH))
		return "writable by group or others";
	return NULL;
}

/* Writes `cal` to a temp file beside `path` and renames it into place. */
static int file_write(const char *path, const char *boot_id,
		      const tb_clock_calib_t *cal)
{
	struct clock_file cf;
	char tmp[TB_PATH_MAX + 32];
	uint32_t version = CLOCK_FILE_VERSION;
	int fd, rc = 0;

	memset(&cf, 0, sizeof(cf));
	cf.magic = CLOCK_FILE_MAGIC;
	cf.version = 0;
	cf.size = sizeof(cf);
	memcpy(cf.boot_id, boot_id, CLOCK_BOOT_ID_LEN);
	cf.base_tsc = cal->base_tsc;
	cf.base_ns = cal->base_ns;
	cf.mult = cal->mult;
	cf.shift = cal->shift;
	cf.tsc_hz = cal->tsc_hz;
	cf.check = file_check(&cf);

	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	/* New, never through a link: a name anyone could guess. */
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		  CLOCK_FILE_MODE);
	if (fd < 0 && errno == EEXIST && unlink(tmp) == 0)
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
			  O_CLOEXEC, CLOCK_FILE_MODE);
	if (fd < 0)
		return tb_error_sys(errno, "clock: create %s", tmp);
	if (fchmod(fd, CLOCK_FILE_MODE) != 0) {
		rc = tb_error_sys(errno, "clock: chmod %s", tmp);
		close(fd);
		unlink(tmp);
		return rc;
	}
	/* The version goes in last, so a reader never trusts a half file. */
	errno = 0;
	if (pwrite(fd, &cf, sizeof(cf), 0) != (ssize_t)sizeof(cf) ||
	    pwrite(fd, &version, sizeof(version),
		   offsetof(struct clock_file, version)) != sizeof(version))
		rc = tb_error_sys(errno ? errno : EIO, "clock: write %s", tmp);
	if (close(fd) != 0 && rc == 0)
		rc = tb_error_sys(errno, "clock: close %s", tmp);
	if (rc == 0 && rename(tmp, path) != 0)
		rc = tb_error_sys(errno, "clock: rename %s to %s", tmp, path);
	if (rc != 0)
		unlink(tmp);
	return rc;
}

int tb_clock_load_or_create(const char *path, tb_clock_calib_t *cal,
			    int *created)
{
	char boot_id[CLOCK_BOOT_ID_LEN];
	struct clock_file cf;

	if (!path || !cal || !created || !path[0] ||
	    strlen(path) >= TB_PATH_MAX)
		return tb_error_set(TB_EINVAL, "clock: load_or_create: bad "
				  "arguments (path empty, NULL or too long)");
	read_boot_id(boot_id);

	for (int tries = 0; tries < 100; tries++) {
		const int oflags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
		struct stat fst, pst;
		const char *why;
		int fd, rc, mine;

		fd = open(path, oflags);
		if (fd < 0 && errno == ENOENT) {
			/* The lock file is the file itself: made empty and
			 * new, then filled by rename. */
			fd = open(path, oflags | O_CREAT | O_EXCL, CLOCK_FILE_MODE);
			if (fd < 0 && errno == EEXIST)
				continue;
			if (fd >= 0 && fchmod(fd, CLOCK_FILE_MODE) != 0) {
				rc = tb_error_sys(errno, "clock: chmod %s", path);
				close(fd);
				return rc;
			}
		}
		if (fd < 0) {
			if (errno == ELOOP)
				return tb_error_set(TB_EAUTH, "clock: %s is a "
						  "symbolic link; not trusted",
						  path);
			return tb_error_sys(errno, "clock: open %s", path);
		}
		if (fstat(fd, &fst) != 0) {
			rc = tb_error_sys(errno, "clock: stat %s", path);
			close(fd);
			return rc;
		}
		why = file_untrusted(&fst, &mine);
		if (why && (!mine || !S_ISREG(fst.st_mode))) {
			close(fd);
			return tb_error_set(TB_EAUTH, "clock: %s is %s (uid %u, "
					  "mode %04o); not trusted", path, why,
					  (unsigned)fst.st_uid,
					  (unsigned)(fst.st_mode & 07777));
		}
		if (flock(fd, LOCK_EX) != 0) {
			rc = tb_error_sys(errno, "clock: lock %s", path);
			close(fd);
			return rc;
		}
		/* Someone may have renamed a new file in while we waited:
		 * then our lock is on the old inode; look again. */
		if (fstat(fd, &fst) != 0 || lstat(path, &pst) != 0 ||
		    fst.st_ino != pst.st_ino || fst.st_dev != pst.st_dev) {
			close(fd);
			continue;
		}
		why = file_untrusted(&fst, &mine);
		if (why && !mine) {
			close(fd);
			return tb_error_set(TB_EAUTH, "clock: %s is %s (uid %u); "
					  "not trusted", path, why,
					  (unsigned)fst.st_uid);
		}
		if (!why)
			why = file_invalid(fd, boot_id, &cf);
		if (!why && (why = file_off_time(&cf)) != NULL)
			tb_warn("clock: the calibration in %s is %s; "
				"recalibrating (processes still running on the "
				"old one keep their timestamps)", path, why);
		if (!why) {
			cal->base_tsc = cf.base_tsc;
			cal->base_ns = cf.base_ns;
			cal->mult = cf.mult;
			cal->shift = cf.shift;
			cal->pad_ = 0;
			cal->tsc_hz = cf.tsc_hz;
			*created = 0;
			close(fd);
			tb_info("clock: reusing the calibration in %s", path);
			return 0;
		}
		if (fst.st_size != 0)
			tb_info("clock: ignoring %s (%s); recalibrating", path,
				why);
		rc = tb_clock_calibrate(cal, 0);
		if (rc == 0)
			rc = file_write(path, boot_id, cal);
		close(fd); /* releases the lock after the rename */
		if (rc == 0)
			*created = 1;
		return rc;
	}
	return tb_error_set(TB_EBUSY, "clock: %s keeps being replaced", path);
}

/* ---------------------------------------------------------------- setup */

static void clock_setup(void)
{
	const char *env = getenv("TICKBUS_CLOCK");
	const char *path = getenv("TICKBUS_CLOCK_FILE");
	tb_clock_calib_t cal = { .mult = 1ull << CLOCK_SHIFT,
				 .shift = CLOCK_SHIFT };
	uint32_t mode = TB_CLOCK_MODE_TSC;
	int created = 0;

	if (env && strcmp(env, "gettime") == 0) {
		mode = TB_CLOCK_MODE_GETTIME;
		tb_info("clock: TICKBUS_CLOCK=gettime: using clock_gettime");
	} else if (env && strcmp(env, "tsc") == 0) {
		if (!tb_clock_tsc_invariant())
			tb_warn("clock: TICKBUS_CLOCK=tsc forces a TSC that "
				"is not invariant; timestamps may drift");
	} else {
		if (env && env[0])
			tb_warn("clock: ignoring TICKBUS_CLOCK=%s (expected "
				"tsc or gettime)", env);
		if (!tb_clock_tsc_invariant()) {
			mode = TB_CLOCK_MODE_GETTIME;
			tb_warn("clock: the TSC is not invariant; timestamps "
				"use clock_gettime (slower)");
		}
	}
	if (!TB_CLOCK_HAVE_TSC)
		mode = TB_CLOCK_MODE_GETTIME;

	if (mode == TB_CLOCK_MODE_TSC) {
		if (!path || !path[0])
			path = TB_CLOCK_FILE_DEFAULT;
		if (tb_clock_load_or_create(path, &cal, &created) != 0) {
			tb_warn("%s; calibrating privately: timestamps may "
				"not compare exactly with other processes",
				tb_errmsg());
			if (tb_clock_calibrate(&cal, 0) != 0) {
				tb_warn("%s; using clock_gettime", tb_errmsg());
				mode = TB_CLOCK_MODE_GETTIME;
			}
		} else {
			tb_clock_state_.from_file = !created;
		}
	} else if (TB_CLOCK_HAVE_TSC) {
		/* Private rate, so that tb_clock_tsc_to_ns still measures
		 * durations; a failure leaves the 1:1 placeholder. */
		tb_clock_calibrate(&cal, 0);
	}
	tb_clock_state_.cal = cal;
	/* R1: publishes cal; pairs with A1 in tb_clock_now_ns_inline (clock.h),
	 * tb_clock_now_ns_slow, tb_clock_source and tb_clock_get. */
	tb_atomic_store_release(&tb_clock_state_.mode, mode);
}

int tb_clock_init(void)
{
	pthread_once(&clock_once, clock_setup);
	return 0;
}

uint64_t tb_clock_now_ns_slow(void)
{
	/* A1 pairs with R1 in clock_setup: cal is complete once mode is set. */
	uint32_t mode = tb_atomic_load_acquire(&tb_clock_state_.mode);

	if (mode == TB_CLOCK_MODE_UNINIT) {
		tb_clock_init();
		mode = tb_atomic_load_acquire(&tb_clock_state_.mode); /* A1 */
	}
	if (mode == TB_CLOCK_MODE_TSC)
		return tb_clock_tsc_to_ns(tb_clock_tsc());
	return system_ns(CLOCK_REALTIME);
}

uint64_t tb_clock_now_ns(void)
{
	return tb_clock_now_ns_inline();
}

uint64_t tb_clock_mono_ns(void)
{
	return system_ns(CLOCK_MONOTONIC);
}

uint64_t tb_clock_mono_ms(void)
{
	return tb_clock_mono_ns() / 1000000u;
}

uint64_t tb_clock_mono_coarse_ns(void)
{
	return system_ns(CLOCK_MONOTONIC_COARSE);
}

uint64_t tb_clock_realtime_ns(void)
{
	return system_ns(CLOCK_REALTIME);
}

const char *tb_clock_source(void)
{
	tb_clock_init();
	/* A1 pairs with R1 in clock_setup (pthread_once has ordered it too). */
	return tb_atomic_load_acquire(&tb_clock_state_.mode) == TB_CLOCK_MODE_TSC
		       ? "tsc"
		       : "gettime";
}

int tb_clock_get(tb_clock_calib_t *cal, int *from_file)
{
	tb_clock_init();
	if (cal)
		*cal = tb_clock_state_.cal;
	if (from_file)
		*from_file = tb_clock_state_.from_file;
	/* A1 pairs with R1 in clock_setup; cal and from_file above are
	 * ordered already by tb_clock_init's pthread_once. */
	return (int)tb_atomic_load_acquire(&tb_clock_state_.mode);
}
