/*
 * wake.c - the waiting half of wake.h, and the futex calls.
 */
#include "bus/wake.h"

#include "bus/clock.h"

#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Looks at the counter between two looks at the clock while spinning
 * (a look at the counter is a load; at the clock, some tens of ns). */
#define LOOKS_PER_CLOCK 32

void tb_wake_init(tb_wake_t *w, uint64_t spin_ns, uint64_t yield_ns)
{
	/* Relaxed, unpaired: set up before either side runs; whatever hands
	 * it over (pthread_create) orders these. */
	tb_atomic_store_relaxed(&w->seq, 0);
	tb_atomic_store_relaxed(&w->parked, 0);
	tb_atomic_store_relaxed(&w->kicks, 0);
	w->spin_ns = spin_ns;
	w->yield_ns = yield_ns;
}

void tb_wake_kick(tb_wake_t *w)
{
	/* Relaxed: the word only tells futex_wait not to sleep; the edge
	 * is F1/F2. */
	tb_atomic_store_relaxed(&w->parked, 0);
	tb_atomic_fetch_add_relaxed(&w->kicks, 1);
	syscall(SYS_futex, &w->parked, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Sleeps while the futex word is 1, at most until `until_ns`. */
static void park(tb_wake_t *w, uint64_t until_ns)
{
	uint64_t now = tb_clock_mono_ns(), left;
	struct timespec ts;

	if (now >= until_ns)
		return;
	left = until_ns - now;
	ts.tv_sec = (time_t)(left / 1000000000u);
	ts.tv_nsec = (long)(left % 1000000000u);
	/* EAGAIN (woken before it slept), EINTR, ETIMEDOUT: all mean look
	 * again. */
	syscall(SYS_futex, &w->parked, FUTEX_WAIT_PRIVATE, 1, &ts, NULL, 0);
}

uint64_t tb_wake_wait(tb_wake_t *w, uint64_t seen, uint64_t idle_since_ns,
		      uint64_t until_ns)
{
	for (;;) {
		uint64_t s = tb_wake_seen(w), now, idle;

		if (s != seen)
			return s;
		now = tb_clock_mono_ns();
		if (now >= until_ns)
			return seen;
		idle = now > idle_since_ns ? now - idle_since_ns : 0;
		if (idle < w->spin_ns) {
			for (int i = 0; i < LOOKS_PER_CLOCK; i++) {
				tb_cpu_relax();
				if (tb_atomic_load_relaxed(&w->seq) != seen)
					break; /* taken with acquire above */
			}
			continue;
		}
		if (w->yield_ns == TB_WAKE_NEVER_PARK || idle < w->yield_ns) {
			sched_yield();
			continue;
		}
		/* S2: seen by L1 in tb_wake_signal, unless F1 came after
		 * F2. */
		tb_atomic_store_relaxed(&w->parked, 1);
		tb_atomic_fence_full(); /* F2: orders S2 before L2 */
		/* L2 */
		if (tb_atomic_load_relaxed(&w->seq) != seen) {
			tb_atomic_store_relaxed(&w->parked, 0);
			continue;
		}
		park(w, until_ns);
		tb_atomic_store_relaxed(&w->parked, 0);
	}
}
