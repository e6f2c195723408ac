/*
 * test_idle.c - the idle strategies (bus/idle.c): defaults, the step
 * sequence of each kind, the saturating count, and the backoff's sleep
 * bound.
 */
#include "bus/idle.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>

#include <cmocka.h>

static long vol_switches(void)
{
	struct rusage ru;

	getrusage(RUSAGE_THREAD, &ru);
	return ru.ru_nvcsw;
}

static void test_idle_defaults(void **state)
{
	(void)state;
	tb_idle_t i;

	tb_idle_init(&i, TB_IDLE_BACKOFF);
	assert_int_equal(i.kind, TB_IDLE_BACKOFF);
	assert_int_equal(i.spins, 0);
	assert_int_equal(i.sleep_ns, 0);
	assert_true(i.spin_max > 0);
	assert_true(i.yield_max > i.spin_max);
	assert_int_equal(i.sleep_max_ns, 1000000);
}

/* Busy-spin never sleeps (no voluntary context switch), however long. */
static void test_idle_busy_spin(void **state)
{
	(void)state;
	tb_idle_t i;
	long v0;

	tb_idle_init(&i, TB_IDLE_BUSY_SPIN);
	v0 = vol_switches();
	for (int k = 1; k <= 100000; k++) {
		tb_idle_step(&i, 0);
		assert_int_equal(i.spins, (uint32_t)k);
		assert_int_equal(i.sleep_ns, 0);
	}
	assert_int_equal(vol_switches() - v0, 0);
	tb_idle_step(&i, 3);
	assert_int_equal(i.spins, 0);
	/* The count saturates instead of wrapping. */
	i.spins = UINT32_MAX - 1;
	tb_idle_step(&i, 0);
	tb_idle_step(&i, 0);
	assert_int_equal(i.spins, UINT32_MAX);
}

/* Spin-yield: spins, then yields on every step; never sleeps. */
static void test_idle_spin_yield(void **state)
{
	(void)state;
	tb_idle_t i;
	long v0;

	tb_idle_init(&i, TB_IDLE_SPIN_YIELD);
	i.spin_max = 5;
	v0 = vol_switches();
	for (int k = 1; k <= 2000; k++) {
		tb_idle_step(&i, 0);
		assert_int_equal(i.spins, (uint32_t)k);
		assert_int_equal(i.sleep_ns, 0);
	}
	/* A yield is an involuntary switch at most: no sleeping. */
	assert_int_equal(vol_switches() - v0, 0);
	tb_idle_step(&i, 1);
	assert_int_equal(i.spins, 0);
	tb_idle_step(&i, -2); /* an error result is not work */
	assert_int_equal(i.spins, 1);
}

/* Backoff: spin_max spins, yields up to yield_max, then sleeps doubling from
 * 1 us to sleep_max_ns; work resets everything. */
static void test_idle_backoff_sequence(void **state)
{
	(void)state;
	static const uint32_t want[] = { 1000, 2000, 4000, 8000, 16000,
					 32000, 50000, 50000, 50000 };
	tb_idle_t i;
	long v0;

	tb_idle_init(&i, TB_IDLE_BACKOFF);
	i.spin_max = 3;
	i.yield_max = 7;
	i.sleep_max_ns = 50000;
	v0 = vol_switches();
	for (int k = 1; k <= 7; k++) {
		tb_idle_step(&i, 0);
		assert_int_equal(i.spins, (uint32_t)k);
		assert_int_equal(i.sleep_ns, 0); /* spinning, then yielding */
	}
	assert_int_equal(vol_switches() - v0, 0);
	for (size_t k = 0; k < sizeof(want) / sizeof(want[0]); k++) {
		tb_idle_step(&i, 0);
		assert_int_equal(i.sleep_ns, want[k]);
	}
	/* Sleeping blocks: voluntary switches (a 1 us timer may expire
	 * before the thread gets to block, so not one per sleep). */
	assert_true(vol_switches() - v0 >= 3);

	tb_idle_step(&i, 1);
	assert_int_equal(i.spins, 0);
	assert_int_equal(i.sleep_ns, 0);
	for (int k = 0; k < 8; k++)
		tb_idle_step(&i, 0);
	assert_int_equal(i.sleep_ns, 1000); /* starts again from 1 us */
}

/* A backoff step at its longest sleeps about sleep_max_ns: really sleeps,
 * and not much longer. */
static void test_idle_backoff_bounded(void **state)
{
	(void)state;
	/* Timer slack (50 us) plus a busy 2-core VM's wake-up delay. */
	const uint64_t slack_ns = 20000000;
	uint64_t t0, per_step;
	tb_idle_t i;

	tb_idle_init(&i, TB_IDLE_BACKOFF);
	i.spin_max = 0;
	i.yield_max = 0;
	while (i.sleep_ns < i.sleep_max_ns)
		tb_idle_step(&i, 0);
	t0 = tb_clock_mono_ns();
	for (int k = 0; k < 5; k++) {
		tb_idle_step(&i, 0);
		assert_int_equal(i.sleep_ns, i.sleep_max_ns);
	}
	per_step = (tb_clock_mono_ns() - t0) / 5;
	printf("backoff step at sleep_max_ns=%u: %llu ns\n", i.sleep_max_ns,
	       (unsigned long long)per_step);
	assert_true(per_step >= i.sleep_max_ns);
	assert_true(per_step < i.sleep_max_ns + slack_ns);

	/* sleep_max_ns 0 means never sleep. */
	tb_idle_init(&i, TB_IDLE_BACKOFF);
	i.spin_max = 0;
	i.yield_max = 0;
	i.sleep_max_ns = 0;
	for (int k = 0; k < 10; k++)
		tb_idle_step(&i, 0);
	assert_int_equal(i.sleep_ns, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_idle_defaults),
		cmocka_unit_test(test_idle_busy_spin),
		cmocka_unit_test(test_idle_spin_yield),
		cmocka_unit_test(test_idle_backoff_sequence),
		cmocka_unit_test(test_idle_backoff_bounded),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
