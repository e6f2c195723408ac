/*
 * wake.h - one thread wakes another, with a system call only when the one
 * waiting has been idle long enough to sleep.
 *
 * A hot thread that hands work to a helper (the subscriber's poll thread
 * posting a gap to its recovery thread) must not pay a system call for it,
 * nor must the helper pay a scheduler wake-up when work comes often.  So
 * the waiter does not block at once: it spins for `spin_ns` after it went
 * idle, then yields the core for up to `yield_ns`, and only then parks on a
 * futex.  The waker bumps a counter with one atomic add and looks at one
 * flag; only if the waiter has parked does it make the FUTEX_WAKE call
 * (tb_wake_kick, out of line).  While the waiter is awake, a signal costs
 * the waker a locked add and a load.
 *
 * The edge, Dekker style, a full fence on each side between its store and
 * its load:
 *   waker:  S1 seq += 1;   F1;  L1 parked?        -> kick
 *   waiter: S2 parked = 1; F2;  L2 seq changed?   -> do not sleep
 * F1 and F2 are sequentially consistent fences, so one of them comes first
 * in their single total order: if F1 does, L2 sees S1 (the waiter does not
 * sleep); if F2 does, L1 sees S2 (the waker wakes it).  A kick that comes
 * before the waiter reaches futex_wait makes that call return at once,
 * since the futex word (`parked`) is no longer 1.
 *
 * Threads: any number of wakers; one waiter.  tb_wake_signal is hot-path
 * safe (no allocation, lock or system call while the waiter is awake).
 */
#ifndef TB_WAKE_H
#define TB_WAKE_H

#include "bus/barrier.h"

#include <stdint.h>

/* A waiter that never parks: yield_ns of this. */
#define TB_WAKE_NEVER_PARK UINT64_MAX

typedef struct tb_wake {
	tb_cache_aligned _Atomic uint64_t seq;  /* signals so far */
	_Atomic uint32_t parked;    /* 1: the waiter sleeps, or is about to */
	uint64_t spin_ns;           /* idle time spent spinning */
	uint64_t yield_ns;          /* idle time, from going idle, after which
				       it parks; TB_WAKE_NEVER_PARK: never */
	_Atomic uint64_t kicks;     /* FUTEX_WAKE calls made (tests, stats) */
} tb_wake_t;

void tb_wake_init(tb_wake_t *w, uint64_t spin_ns, uint64_t yield_ns);

/* The FUTEX_WAKE half of tb_wake_signal. */
void tb_wake_kick(tb_wake_t *w);

/* Wakes the waiter (now or on its next look).  Hot path: a system call
 * only when the waiter has parked. */
static inline void tb_wake_signal(tb_wake_t *w)
{
	/* S1: seen by L2 in tb_wake_wait; a release of everything the waker
	 * wrote before it (pairs with the acquire of tb_wake_seen). */
	tb_atomic_fetch_add_acq_rel(&w->seq, 1);
	tb_atomic_fence_full(); /* F1: orders S1 before L1 (see above) */
	/* L1: sees S2 in tb_wake_wait, unless F2 came after F1. */
	if (tb_unlikely(tb_atomic_load_relaxed(&w->parked)))
		tb_wake_kick(w);
}

/* The signal count now, for a waiter to compare with later (acquire). */
static inline uint64_t tb_wake_seen(tb_wake_t *w)
{
	return tb_atomic_load_acquire(&w->seq); /* pairs with S1 */
}

/*
 * Waits until the signal count differs from `seen`, or the monotonic clock
 * (tb_clock_mono_ns) reaches `until_ns`.  `idle_since_ns` is when the
 * waiter last had work: the spin and yield phases are measured from it,
 * so that a waiter woken by its own timeout goes back to sleep at once.
 * Returns the signal count (== seen after a timeout).
 */
uint64_t tb_wake_wait(tb_wake_t *w, uint64_t seen, uint64_t idle_since_ns,
		      uint64_t until_ns);

#endif
