/*
 * idle.c - idle strategies: what a polling thread does after a poll that
 * found nothing.
 *
 * After each poll the thread calls tb_idle_step(&idle, n): with work (n > 0)
 * the strategy resets; without, it waits a little, in three grades of
 * politeness:
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
#include "bus/idle.h"

#include "bus/barrier.h"

#include <sched.h>
#include <stdint.h>
#include <time.h>

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
