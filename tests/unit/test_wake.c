/*
 * bus/wake.h: a waiter that is awake is signalled without a system call; one
 * that has parked is woken by exactly one FUTEX_WAKE, at once; a waiter set
 * never to park never does; a timeout returns with nothing seen; and no
 * signal is ever lost between a waiter deciding to park and parking (many
 * rounds of the race).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/clock.h"
#include "bus/wake.h"

#include <pthread.h>
#include <unistd.h>

struct waiter {
	tb_wake_t *w;
	uint64_t seen;
	uint64_t until_ns;
	uint64_t got;          /* the count tb_wake_wait returned */
	uint64_t woke_ns;      /* when it returned */
	int rounds;            /* >0: wait for that many signals */
	_Atomic uint64_t progress; /* rounds: the count it has seen */
};

static void *wait_main(void *arg)
{
	struct waiter *x = arg;

	if (x->rounds) {
		uint64_t seen = 0;

		while ((int)seen < x->rounds) {
			seen = tb_wake_wait(x->w, seen, tb_clock_mono_ns(),
					    tb_clock_mono_ns() + 5000000000ull);
			/* Relaxed: the test only polls it. */
			tb_atomic_store_relaxed(&x->progress, seen);
		}
		x->got = seen;
		return NULL;
	}
	x->got = tb_wake_wait(x->w, x->seen, tb_clock_mono_ns(), x->until_ns);
	x->woke_ns = tb_clock_mono_ns();
	return NULL;
}

static void parked_waiter_woken_by_one_kick(void **state)
{
	tb_wake_t w;
	struct waiter x = {.w = &w, .until_ns = tb_clock_mono_ns() + 10000000000ull};
	pthread_t t;
	uint64_t t0;

	(void)state;
	tb_wake_init(&w, 1000, 100000); /* spin 1 us, park after 100 us */
	assert_int_equal(pthread_create(&t, NULL, wait_main, &x), 0);
	usleep(50000); /* long parked by now */
	assert_int_equal(tb_atomic_load_relaxed(&w.parked), 1);
	t0 = tb_clock_mono_ns();
	tb_wake_signal(&w);
	pthread_join(t, NULL);
	assert_int_equal(x.got, 1);
	assert_int_equal(tb_atomic_load_relaxed(&w.kicks), 1);
	/* Woken by the kick, not by its ten-second timeout. */
	assert_true(x.woke_ns - t0 < 2000000000ull);
}

static void awake_waiter_costs_no_system_call(void **state)
{
	tb_wake_t w;
	struct waiter x = {.w = &w, .until_ns = tb_clock_mono_ns() + 10000000000ull};
	pthread_t t;

	(void)state;
	tb_wake_init(&w, 1000, TB_WAKE_NEVER_PARK);
	assert_int_equal(pthread_create(&t, NULL, wait_main, &x), 0);
	usleep(20000); /* yielding, never parked */
	assert_int_equal(tb_atomic_load_relaxed(&w.parked), 0);
	tb_wake_signal(&w);
	pthread_join(t, NULL);
	assert_int_equal(x.got, 1);
	assert_int_equal(tb_atomic_load_relaxed(&w.kicks), 0);
}

static void timeout_returns_what_it_saw(void **state)
{
	tb_wake_t w;
	uint64_t t0 = tb_clock_mono_ns();

	(void)state;
	tb_wake_init(&w, 1000, 100000);
	assert_int_equal(tb_wake_wait(&w, 0, t0, t0 + 30000000ull), 0);
	assert_true(tb_clock_mono_ns() - t0 >= 30000000ull);
	/* A signal given before the wait is seen at once. */
	tb_wake_signal(&w);
	assert_int_equal(tb_wake_wait(&w, 0, t0, t0 + 10000000000ull), 1);
	assert_int_equal(tb_wake_seen(&w), 1);
}

/* The waiter parks between every signal (it is told to park at once),
 * and each signal waits for the waiter to see it: a signal lost in the
 * race between deciding to park and parking would leave it asleep until
 * its five-second timeout. */
static void no_signal_lost(void **state)
{
	enum { ROUNDS = 2000 };
	tb_wake_t w;
	struct waiter x = {.w = &w, .rounds = ROUNDS};
	pthread_t t;
	uint64_t t0 = tb_clock_mono_ms(), slowest = 0;

	(void)state;
	tb_wake_init(&w, 0, 0);
	assert_int_equal(pthread_create(&t, NULL, wait_main, &x), 0);
	for (int i = 0; i < ROUNDS; i++) {
		uint64_t t1 = tb_clock_mono_ms();

		if (i % 3 == 0)
			usleep(20); /* sometimes after it parked */
		tb_wake_signal(&w);
		while (tb_atomic_load_relaxed(&x.progress) < (uint64_t)i + 1 &&
		       tb_clock_mono_ms() - t1 < 4000)
			sched_yield();
		if (tb_clock_mono_ms() - t1 > slowest)
			slowest = tb_clock_mono_ms() - t1;
	}
	pthread_join(t, NULL);
	assert_int_equal(x.got, ROUNDS);
	print_message("%d signals, %llu kicks, slowest %llu ms, %llu ms in all\n",
		      ROUNDS, (unsigned long long)tb_atomic_load_relaxed(&w.kicks),
		      (unsigned long long)slowest,
		      (unsigned long long)(tb_clock_mono_ms() - t0));
	assert_true(slowest < 4000);
	assert_true(tb_atomic_load_relaxed(&w.kicks) > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(parked_waiter_woken_by_one_kick),
		cmocka_unit_test(awake_waiter_costs_no_system_call),
		cmocka_unit_test(timeout_returns_what_it_saw),
		cmocka_unit_test(no_signal_lost),
	};

	return cmocka_run_group_tests_name("wake", tests, NULL, NULL);
}
