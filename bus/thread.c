/*
 * thread.c - core pinning and the kernel's CPU-list format.
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
 * Helper threads.  The library's own threads (control, heartbeat,
 * recovery, a service's connections) wait in the kernel and wake now and
 * then; started on a pinned thread they would inherit its core, wake
 * there and take it from the spinning hot thread (on an isolated core
 * under a real-time policy, never run at all: no heartbeat, no recovery).
 * So tb_thread_pin remembers the CPUs the process had before its first
 * pin and every core pinned since, and tb_thread_start gives a helper
 * the first less the second; a pin also moves the helpers already
 * running off its core (a publisher's heartbeat started before a
 * subscriber's poll thread was pinned would otherwise wake there).
 */
#include "bus/thread.h"

#include "bus/error.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
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

/* The CPUs the process had before its first pin, and the cores pinned
 * since (helper threads keep off them). */
static pthread_mutex_t cores_lock = PTHREAD_MUTEX_INITIALIZER;
static cpu_set_t before, hot;
static int have_before;

/* The helpers running now (tb_thread_start), by kernel thread id: a pin
 * moves them off its core.  A helper is listed from before its function
 * runs until after it returns, under cores_lock, so an id on the list is
 * a live thread's. */
struct helper {
	void *(*fn)(void *);
	void *arg;
	char name[16];
	pid_t tid;
	struct helper *next;
};
static struct helper *helpers;

/* The CPUs a helper gets now: before less hot; 0 when none (no pin yet,
 * or every core pinned).  Under cores_lock. */
static int helper_cpus_locked(cpu_set_t *set)
{
	CPU_ZERO(set);
	if (!have_before)
		return 0;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &before) && !CPU_ISSET(c, &hot))
			CPU_SET(c, set);
	return CPU_COUNT(set);
}

/* A core was pinned: every running helper leaves it (best effort: one
 * whose CPUs a cpuset took away keeps what it has).  Under cores_lock. */
static void helpers_move_locked(void)
{
	cpu_set_t set;

	if (helper_cpus_locked(&set) == 0)
		return; /* nowhere else to go: they stay where they are */
	for (struct helper *h = helpers; h; h = h->next)
		(void)sched_setaffinity(h->tid, sizeof(set), &set);
}

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
	pthread_mutex_lock(&cores_lock);
	if (!have_before)
		have_before = sched_getaffinity(0, sizeof(before), &before) == 0;
	pthread_mutex_unlock(&cores_lock);
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
	pthread_mutex_lock(&cores_lock);
	if (!CPU_ISSET(core, &hot)) {
		CPU_SET(core, &hot);
		/* Helpers started before this pin (a publisher opened, then
		 * a subscriber pinned elsewhere) would wake on it. */
		helpers_move_locked();
	}
	pthread_mutex_unlock(&cores_lock);
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

/* ---------------------------------------------------------------- helpers */

int tb_thread_helper_cpus(cpu_set_t *set)
{
	int n;

	pthread_mutex_lock(&cores_lock);
	n = helper_cpus_locked(set);
	pthread_mutex_unlock(&cores_lock);
	return n;
}

/* What a helper runs: its name; its listing, and the CPUs of any pin made
 * since it was created; its function; then off the list. */
static void *helper_main(void *arg)
{
	struct helper *h = arg;
	struct helper **pp;
	cpu_set_t set;
	void *ret;

	/* What `top -H` and perf show for it, before it does anything
	 * (tb_thread_start names it too, for when it returns). */
	(void)pthread_setname_np(pthread_self(), h->name);
	h->tid = (pid_t)syscall(SYS_gettid);
	pthread_mutex_lock(&cores_lock);
	h->next = helpers;
	helpers = h;
	if (helper_cpus_locked(&set) > 0)
		(void)sched_setaffinity(0, sizeof(set), &set);
	pthread_mutex_unlock(&cores_lock);
	ret = h->fn(h->arg);
	pthread_mutex_lock(&cores_lock);
	for (pp = &helpers; *pp != h; pp = &(*pp)->next)
		;
	*pp = h->next;
	pthread_mutex_unlock(&cores_lock);
	free(h);
	return ret;
}

int tb_thread_start(pthread_t *t, const char *name, void *(*fn)(void *),
		    void *arg)
{
	struct helper *st = calloc(1, sizeof(*st));
	pthread_attr_t attr;
	cpu_set_t cpus;
	int rc = EINVAL;

	if (!st)
		return tb_error_set(TB_ENOMEM, "start the %s thread: out of "
				  "memory", name);
	st->fn = fn;
	st->arg = arg;
	snprintf(st->name, sizeof(st->name), "%s", name);
	if (tb_thread_helper_cpus(&cpus) > 0 && pthread_attr_init(&attr) == 0) {
		if (pthread_attr_setaffinity_np(&attr, sizeof(cpus), &cpus) == 0)
			rc = pthread_create(t, &attr, helper_main, st);
		pthread_attr_destroy(&attr);
	}
	/* No core is left to helpers (every one pinned, or none pinned
	 * yet), or the CPUs are no longer allowed (a cpuset changed):
	 * the caller's own. */
	if (rc == EINVAL)
		rc = pthread_create(t, NULL, helper_main, st);
	if (rc != 0) {
		free(st);
		return tb_error_sys(rc, "start the %s thread", name);
	}
	(void)pthread_setname_np(*t, name);
	return 0;
}
