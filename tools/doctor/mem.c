/*
 * mem.c - memory the streams pin: RLIMIT_MEMLOCK against what the
 * configured streams lock (a memory access error waits for a process whose
 * registration fails), hugepages reserved and free for the rings, and
 * CAP_IPC_LOCK, which lifts the limit.
 *
 * What a stream pins, counted for one process of each role on this host:
 * its ring (the publisher's frame ring, the subscriber's ring) and, with
 * recovery, the subscriber's recovery buffer.
 */
#include "tools/doctor/doctor.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1024.0 * 1024.0)

static uint64_t pinned_bytes(const tb_doctor_t *d)
{
	uint64_t sum = 0;

	for (int i = 0; i < d->n_streams; i++) {
		const tb_stream_cfg_t *s = d->streams[i];

		sum += 2 * s->ring_size;
		if (s->n_recovery)
			sum += s->recovery_buffer;
	}
	return sum;
}

/* "Max locked memory   65536   65536   bytes": the soft limit, or -1 for
 * unlimited; -2 when it cannot be read. */
static long long memlock_limit(const tb_doctor_t *d)
{
	static char limits[8192];
	const char *p;

	if (tb_doctor_read(d, "/proc/self/limits", limits, sizeof(limits)) < 0)
		return -2;
	p = strstr(limits, "Max locked memory");
	if (!p)
		return -2;
	p += strlen("Max locked memory");
	while (*p == ' ')
		p++;
	if (!strncmp(p, "unlimited", 9))
		return -1;
	return strtoll(p, NULL, 10);
}

/* 1 if CapEff in /proc/self/status has CAP_IPC_LOCK (bit 14); -1 when it
 * cannot be read. */
static int cap_ipc_lock(const tb_doctor_t *d)
{
	static char status[8192];
	const char *p;

	if (tb_doctor_read(d, "/proc/self/status", status, sizeof(status)) < 0 ||
	    !(p = strstr(status, "CapEff:")))
		return -1;
	return (strtoull(p + 7, NULL, 16) >> 14) & 1;
}

static void memlock(tb_doctor_t *d)
{
	long long lim = memlock_limit(d);
	uint64_t need = pinned_bytes(d);
	int cap = cap_ipc_lock(d);
	char fix[512];

	snprintf(fix, sizeof(fix), "raise the limit for the user that runs "
		 "tickbus: LimitMEMLOCK=infinity in its systemd unit, or "
		 "'USER - memlock unlimited' in /etc/security/limits.d/; or "
		 "give it CAP_IPC_LOCK (AmbientCapabilities=CAP_IPC_LOCK)");
	if (lim == -2) {
		tb_doctor_report(d, "mem.memlock", "", TB_DOCTOR_SKIPPED,
				 "mount /proc", "cannot read /proc/self/limits");
	} else if (lim == -1) {
		tb_doctor_report(d, "mem.memlock", "", TB_DOCTOR_OK, NULL,
				 "RLIMIT_MEMLOCK unlimited");
	} else if (cap == 1) {
		tb_doctor_report(d, "mem.memlock", "", TB_DOCTOR_OK, NULL,
				 "RLIMIT_MEMLOCK %.1f MiB, but CAP_IPC_LOCK "
				 "lifts it", (double)lim / MIB);
	} else if (!d->cfg) {
		tb_doctor_report(d, "mem.memlock", "",
				 (uint64_t)lim < (64u << 20) ? TB_DOCTOR_WARN
							    : TB_DOCTOR_OK,
				 (uint64_t)lim < (64u << 20) ? fix : NULL,
				 "RLIMIT_MEMLOCK %.1f MiB (no -c FILE to size "
				 "the streams: a 4 MiB ring pins 4 MiB a "
				 "process)", (double)lim / MIB);
	} else if ((uint64_t)lim < need) {
		tb_doctor_report(d, "mem.memlock", "", TB_DOCTOR_FAIL, fix,
				 "RLIMIT_MEMLOCK %.1f MiB < %.1f MiB the "
				 "configured streams pin: ibv_reg_mr and mlock "
				 "fail (ENOMEM), RDMA reports memory access "
				 "errors", (double)lim / MIB, (double)need / MIB);
	} else {
		tb_doctor_report(d, "mem.memlock", "", TB_DOCTOR_OK, NULL,
				 "RLIMIT_MEMLOCK %.1f MiB >= %.1f MiB the "
				 "streams pin", (double)lim / MIB,
				 (double)need / MIB);
	}
	if (cap < 0)
		tb_doctor_report(d, "mem.cap_ipc_lock", "", TB_DOCTOR_SKIPPED,
				 "mount /proc", "cannot read /proc/self/status");
	else
		tb_doctor_report(d, "mem.cap_ipc_lock", "",
				 cap || lim == -1 ? TB_DOCTOR_OK : TB_DOCTOR_WARN,
				 cap || lim == -1 ? NULL
				 : "not needed with an unlimited memlock; "
				   "otherwise AmbientCapabilities=CAP_IPC_LOCK "
				   "in the unit (or setcap cap_ipc_lock+ep on "
				   "the binary)",
				 "CAP_IPC_LOCK %s", cap ? "held" : "not held");
}

static long meminfo(const char *text, const char *key)
{
	const char *p = strstr(text, key);

	return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

static void hugepages(tb_doctor_t *d)
{
	static char mi[8192];
	long total, freep, size_kb;
	uint64_t need = pinned_bytes(d), pages;
	char fix[256];

	if (tb_doctor_read(d, "/proc/meminfo", mi, sizeof(mi)) < 0) {
		tb_doctor_report(d, "mem.hugepages", "", TB_DOCTOR_SKIPPED,
				 "mount /proc", "cannot read /proc/meminfo");
		return;
	}
	total = meminfo(mi, "HugePages_Total:");
	freep = meminfo(mi, "HugePages_Free:");
	size_kb = meminfo(mi, "Hugepagesize:");
	if (size_kb <= 0)
		size_kb = 2048;
	pages = (need + (uint64_t)size_kb * 1024 - 1) / ((uint64_t)size_kb * 1024);
	snprintf(fix, sizeof(fix), "reserve them: sysctl -w vm.nr_hugepages=%"
		 PRIu64 " (and in /etc/sysctl.d/; on a NUMA host per node: "
		 "/sys/devices/system/node/nodeN/hugepages/)",
		 (uint64_t)(total > 0 ? total : 0) + (pages ? pages : 512));
	if (total <= 0)
		tb_doctor_report(d, "mem.hugepages", "", TB_DOCTOR_WARN, fix,
				 "no hugepages reserved: rings fall back to "
				 "transparent hugepages, then 4 KiB pages (TLB "
				 "misses on the hot path)");
	else if (d->cfg && (uint64_t)freep < pages)
		tb_doctor_report(d, "mem.hugepages", "", TB_DOCTOR_WARN, fix,
				 "%ld of %ld hugepages of %ld KiB free; the "
				 "streams want %" PRIu64, freep, total, size_kb,
				 pages);
	else
		tb_doctor_report(d, "mem.hugepages", "", TB_DOCTOR_OK, NULL,
				 "%ld of %ld hugepages of %ld KiB free%s",
				 freep, total, size_kb, d->cfg ? ", enough for "
				 "the streams" : "");
}

void tb_doctor_check_mem(tb_doctor_t *d)
{
	memlock(d);
	hugepages(d);
}
