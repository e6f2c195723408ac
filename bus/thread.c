/*
 * thread.c - core pinning and idle strategies.
 *
 * Pinning.  A hot thread polls one ring or CQ without pause; letting the
 * scheduler move it costs cold caches and, across sockets, remote memory.
 * tb_thread_pin() binds the calling thread to one core.  The core must exist
 * and be allowed to this process (a cpuset cgroup may forbid it); anything
 * else is refused with TB_EINVAL, since running on another core than the one
 * configured would silently break the NUMA placement of its rings.  A core
 * that is allowed but not isolated (isolcpus=, listed in
 * /sys/devices/system/cpu/isolated) is accepted with a warning: it works, but
 * the kernel and other tasks will run there too and add jitter.
 *
 * Idle strategies.  After each poll the thread calls tb_idle_step(&idle, n):
 * with work (n > 0) the strategy resets; without, it waits a little, in three
 * grades of politeness:
 *
 *   busy-spin     PAUSE only: never leaves the core; the lowest latency, and
 *                 the right choice only on an isolated core.
 *   spin-yield    spin_max PAUSE steps, then sched_yield() on every step: a
 *                 thread that shares its core lets the other one run.
 *   backoff       spin_max PAUSE steps, yields up to step yield_max, then
 *                 nanosleep() doubling from 1 us up to sleep_max_ns (1 ms):
 *                 an idle thread costs almost nothing, and its wake-up delay
 *                 is bounded by sleep_max_ns plus timer slack.
 *
 * The state is plain fields of tb_idle_t, so a caller (or a test) can see
 * which phase it is in: `spins` counts consecutive idle steps (saturating),
 * `sleep_ns` is the last sleep (0 until backoff sleeps).
 */
#include "bus/thread.h"

#include "bus/barrier.h"
#include "bus/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------- cpu lists */

/* Reads a decimal CPU number at *p; 0 or -1 when there is none or it is too
 * large for a cpu_set_t. */
static int parse_cpu(const char **p, int *cpu)
{
	const char *s = *p;
	long v = 0;

	if (*s < '0' || *s > '9')
		return -1;
	while (*s >= '0' && *s <= '9') {
		v = v * 10 + (*s++ - '0');
		if (v >= CPU_SETSIZE)
			return -1;
	}
	*p = s;
	*cpu = (int)v;
	return 0;
}

static const char *skip_blanks(const char *p)
{
	while (*p == ' ' || *p == '\t')
		p++;
	return p;
}

int tb_thread_cpulist_parse(const char *list, cpu_set_t *set)
{
	const char *p;

	if (!set)
		return tb_error_set(TB_EINVAL, "cpulist: set is NULL");
	CPU_ZERO(set);
	if (!list)
		return tb_error_set(TB_EINVAL, "cpulist: list is NULL");
	p = list;
	while (*p == ' ' || *p == '\t' || *p == '\n')
		p++;
	if (*p == '\0')
		return 0;
	for (;;) {
		int lo, hi;

		p = skip_blanks(p);
		if (parse_cpu(&p, &lo) != 0)
			goto bad;
		hi = lo;
		if (*p == '-') {
			p++;
			if (parse_cpu(&p, &hi) != 0 || hi < lo)
				goto bad;
		}
		for (int c = lo; c <= hi; c++)
			CPU_SET(c, set);
		p = skip_blanks(p);
		if (*p == ',') {
			p++;
			continue;
		}
		while (*p == '\n' || *p == ' ' || *p == '\t')
			p++;
		if (*p == '\0')
			return CPU_COUNT(set);
		goto bad;
	}
bad:
	CPU_ZERO(set);
	return tb_error_set(TB_EINVAL, "cpulist: malformed CPU list \"%.64s\" "
			  "at \"%.16s\" (expected e.g. \"0-3,8\", CPUs below "
			  "%d)", list, p, CPU_SETSIZE);
}

/* ---------------------------------------------------------------- pinning */

static const char *isolated_path(void)
{
	const char *env = getenv("TICKBUS_ISOLATED_FILE");

	return env && env[0] ? env : TB_THREAD_ISOLATED_FILE;
}

int tb_thread_core_isolated(int core)
{
	const char *path = isolated_path();
	char buf[4096];
	cpu_set_t set;
	ssize_t n;
	int fd, rc;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return tb_error_sys(errno, "open %s", path);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return tb_error_sys(errno, "read %s", path);
	buf[n] = '\0';
	if ((rc = tb_thread_cpulist_parse(buf, &set)) < 0)
		return tb_error_prepend(rc, "%s", path);
	return core >= 0 && core < CPU_SETSIZE && CPU_ISSET(core, &set);
}

/* The process's allowed CPUs as the kernel lists them, for messages. */
static void allowed_list(char *buf, size_t len)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[512];

	snprintf(buf, len, "unknown");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "Cpus_allowed_list:", 18) == 0) {
			const char *v = skip_blanks(line + 18);

			snprintf(buf, len, "%.*s", (int)strcspn(v, "\n"), v);
			break;
		}
	fclose(f);
}

int tb_thread_pin(int core)
{
	long ncpu = sysconf(_SC_NPROCESSORS_CONF);
	char allowed[256];
	cpu_set_t set;
	int iso;

	if (core < 0 || core >= CPU_SETSIZE || (ncpu > 0 && core >= ncpu))
		return tb_error_set(TB_EINVAL, "tb_thread_pin: core %d does not "
				  "exist (this machine has cores 0-%ld)", core,
				  ncpu - 1);
	CPU_ZERO(&set);
	CPU_SET(core, &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0) {
		int e = errno;

		allowed_list(allowed, sizeof(allowed));
		if (e == EINVAL)
			return tb_error_set(TB_EINVAL, "tb_thread_pin: core %d "
					  "is offline or not allowed to this "
					  "process (allowed: %s)", core,
					  allowed);
		return tb_error_sys(e, "tb_thread_pin: sched_setaffinity core "
				  "%d", core);
	}
	iso = tb_thread_core_isolated(core);
	if (iso == 0)
		tb_warn("core %d is not isolated (not listed in %s): other "
			"tasks and kernel work share it and add jitter; boot "
			"with isolcpus=/nohz_full= to reserve it", core,
			isolated_path());
	else if (iso < 0) {
		tb_info("cannot tell whether core %d is isolated: %s", core,
			tb_errmsg());
		tb_error_clear();
	}
	tb_info("pinned thread to core %d", core);
	return 0;
}

/* --------------------------------------------------------- idle strategies */

void tb_idle_init(tb_idle_t *idle, tb_idle_kind_t kind)
{
	idle->kind = kind;
	idle->spins = 0;
	idle->spin_max = TB_IDLE_SPIN_MAX;
	idle->yield_max = TB_IDLE_YIELD_MAX;
	idle->sleep_ns = 0;
	idle->sleep_max_ns = TB_IDLE_SLEEP_MAX_NS;
}

static void idle_sleep(tb_idle_t *idle)
{
	uint64_t next = idle->sleep_ns ? (uint64_t)idle->sleep_ns * 2
				       : TB_IDLE_SLEEP_MIN_NS;
	struct timespec ts;

	if (next > idle->sleep_max_ns)
		next = idle->sleep_max_ns;
	if (next == 0) { /* sleep_max_ns 0: never sleep */
		sched_yield();
		return;
	}
	idle->sleep_ns = (uint32_t)next;
	ts.tv_sec = (time_t)(next / 1000000000u);
	ts.tv_nsec = (long)(next % 1000000000u);
	nanosleep(&ts, NULL); /* an interrupted sleep is just a shorter one */
}

void tb_idle_step(tb_idle_t *idle, int work)
{
	if (work > 0) {
		idle->spins = 0;
		idle->sleep_ns = 0;
		return;
	}
	if (idle->spins != UINT32_MAX)
		idle->spins++;
	switch (idle->kind) {
	case TB_IDLE_BUSY_SPIN:
		tb_cpu_relax();
		break;
	case TB_IDLE_SPIN_YIELD:
		if (idle->spins <= idle->spin_max)
			tb_cpu_relax();
		else
			sched_yield();
		break;
	case TB_IDLE_BACKOFF:
	default: /* an unknown kind gets the most polite strategy */
		if (idle->spins <= idle->spin_max)
			tb_cpu_relax();
		else if (idle->spins <= idle->yield_max)
			sched_yield();
		else
			idle_sleep(idle);
		break;
	}
}
