/*
 * memlock.c - the locked-memory budget of RDMA set-up (memlock.h).
 */
#include "bus/memlock.h"

#include "bus/error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define CAP_IPC_LOCK_BIT 14   /* linux/capability.h */
#define PAGE 4096u
#define WQE_BB 64u            /* mlx5's send WQE basic block */
#define CQE_SIZE 64u
#define DOORBELL PAGE         /* one doorbell record page per queue, at most */

/* Reads `key` ("VmPin:", "CapEff:") from /proc/self/status into *v, as kB
 * (decimal) or as a hexadecimal mask.  0 or -1. */
static int status_field(const char *key, int hex, uint64_t *v)
{
	char line[256];
	size_t klen = strlen(key);
	FILE *f = fopen("/proc/self/status", "r");
	int rc = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long x;

		if (strncmp(line, key, klen) != 0)
			continue;
		if (sscanf(line + klen, hex ? "%llx" : "%llu", &x) == 1) {
			*v = x;
			rc = 0;
		}
		break;
	}
	fclose(f);
	return rc;
}

int tb_memlock_read(tb_memlock_state_t *st)
{
	struct rlimit rl;
	uint64_t kb = 0, caps = 0;

	if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0)
		return tb_error_sys(errno, "getrlimit(RLIMIT_MEMLOCK)");
	st->limit = rl.rlim_cur == RLIM_INFINITY ? TB_MEMLOCK_UNLIMITED
						 : (uint64_t)rl.rlim_cur;
	/* Kernels without VmPin (before 3.2) pin nothing we could count. */
	st->pinned = status_field("VmPin:", 0, &kb) == 0 ? kb * 1024u : 0;
	st->cap_ipc_lock = status_field("CapEff:", 1, &caps) == 0 &&
			   (caps >> CAP_IPC_LOCK_BIT & 1u);
	return 0;
}

const char *tb_memlock_fmt(uint64_t v, char *buf, size_t len)
{
	if (v >= (1ull << 30))
		snprintf(buf, len, "%.1f GiB", (double)v / (1ull << 30));
	else if (v >= (1ull << 20))
		snprintf(buf, len, "%.1f MiB", (double)v / (1ull << 20));
	else if (v >= 1024u)
		snprintf(buf, len, "%.1f KiB", (double)v / 1024u);
	else
		snprintf(buf, len, "%llu bytes", (unsigned long long)v);
	return buf;
}

uint64_t tb_memlock_room_for(const tb_memlock_state_t *st, uint64_t each)
{
	if (st->cap_ipc_lock || st->limit == TB_MEMLOCK_UNLIMITED || !each)
		return UINT64_MAX;
	if (st->pinned >= st->limit)
		return 0;
	return (st->limit - st->pinned) / each;
}

int tb_memlock_fits(const tb_memlock_state_t *st, uint64_t need,
		    const char *what)
{
	char n[32], l[32], p[32];

	if (st->cap_ipc_lock || st->limit == TB_MEMLOCK_UNLIMITED ||
	    (st->pinned <= st->limit && need <= st->limit - st->pinned))
		return 0;
	return tb_error_set(TB_ENOMEM, "%s needs %s of locked memory, but "
			  "RLIMIT_MEMLOCK allows %s and %s is pinned already: "
			  "raise the limit (`ulimit -l unlimited` in the shell "
			  "that starts it, `LimitMEMLOCK=infinity` in its "
			  "systemd unit, or memlock in "
			  "/etc/security/limits.conf), or grant it "
			  "CAP_IPC_LOCK", what,
			  tb_memlock_fmt(need, n, sizeof(n)),
			  tb_memlock_fmt(st->limit, l, sizeof(l)),
			  tb_memlock_fmt(st->pinned, p, sizeof(p)));
}

int tb_memlock_check(uint64_t need, const char *what)
{
	tb_memlock_state_t st;
	int rc = tb_memlock_read(&st);

	return rc < 0 ? rc : tb_memlock_fits(&st, need, what);
}

/* ------------------------------------------------------------- estimates */

static uint64_t pow2_up(uint64_t v)
{
	uint64_t p = 1;

	while (p < v)
		p <<= 1;
	return p;
}

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

uint64_t tb_memlock_mr_bytes(const void *addr, size_t len)
{
	uintptr_t a = (uintptr_t)addr;

	if (!len)
		return 0;
	return align_up(a + len, PAGE) - a / PAGE * PAGE;
}

uint64_t tb_memlock_cq_bytes(uint32_t cqe)
{
	return align_up(pow2_up((uint64_t)cqe + 1) * CQE_SIZE, PAGE) + DOORBELL;
}

uint64_t tb_memlock_qp_bytes(uint32_t overhead, uint32_t send_wr,
			     uint32_t inline_bytes, uint32_t send_sge,
			     uint32_t recv_wr)
{
	uint64_t gather = overhead + 16ull * send_sge;
	uint64_t inl = inline_bytes ? overhead + align_up(4u + inline_bytes, 16)
				    : 0;
	uint64_t wqe = align_up(gather > inl ? gather : inl, WQE_BB);
	uint64_t sq = send_wr ? pow2_up(send_wr * wqe) : 0;
	uint64_t rq = recv_wr ? pow2_up(recv_wr) * 16u : 0;

	return align_up(sq + rq, PAGE) + DOORBELL;
}
