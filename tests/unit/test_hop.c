/*
 * hop: the per-hop differences recorded from known stamps (skipped hops,
 * negative differences from skewed clocks, the end-to-end figure), the
 * stamps taken from a tb_msg_t, the summary text, bad arguments, and the
 * clock behind tb_hop_stamp checked against clock_gettime: the calibrated
 * TSC must read CLOCK_REALTIME and advance at CLOCK_MONOTONIC's rate.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <tickbus/hop.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t gettime_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static tb_hop_recorder_t *recorder(void)
{
	tb_hop_recorder_t *r;

	assert_int_equal(tb_hop_recorder_init(&r, 3600000000000ll, 3), 0);
	return r;
}

static void test_every_hop(void **state)
{
	static const uint64_t at[TB_HOP_COUNT] = {1000, 1500, 2300, 2400, 2450,
						  2600};
	tb_hop_recorder_t *r = recorder();
	tb_hop_stamps_t s;
	(void)state;

	for (int n = 0; n < 3; n++) {
		for (int i = 0; i < TB_HOP_COUNT; i++)
			tb_hop_set(&s, (tb_hop_t)i, at[i] + 10000u * n);
		tb_hop_record(r, &s);
	}
	/* Nothing comes before the feed. */
	assert_int_equal(tb_hist_count(tb_hop_hist(r, TB_HOP_FEED_RECEIVE)), 0);
	for (int i = 1; i < TB_HOP_COUNT; i++) {
		const tb_hist_t *h = tb_hop_hist(r, i);

		assert_int_equal(tb_hist_count(h), 3);
		assert_int_equal(tb_hist_count_at(h, (int64_t)(at[i] - at[i - 1])),
				 3);
		assert_int_equal(tb_hist_underflow(h), 0);
	}
	assert_int_equal(tb_hist_count_at(tb_hop_total(r), 1600), 3);
	assert_int_equal(tb_hist_count(tb_hop_total(r)), 3);
	tb_hop_recorder_reset(r);
	for (int i = 0; i < TB_HOP_COUNT; i++)
		assert_int_equal(tb_hist_count(tb_hop_hist(r, i)), 0);
	assert_int_equal(tb_hist_count(tb_hop_total(r)), 0);
	tb_hop_recorder_free(r);
}

/* Hops left at 0 are skipped: each difference is from the last stamp. */
static void test_skipped_hops(void **state)
{
	tb_hop_recorder_t *r = recorder();
	tb_hop_stamps_t s;
	(void)state;

	memset(&s, 0, sizeof(s));
	tb_hop_set(&s, TB_HOP_PUBLISH, 5000);
	tb_hop_set(&s, TB_HOP_SUB_RECEIVE, 5700);
	tb_hop_set(&s, TB_HOP_ORDER_SENT, 6000);
	tb_hop_record(r, &s);
	assert_int_equal(tb_hist_count(tb_hop_hist(r, TB_HOP_PUBLISH)), 0);
	assert_int_equal(tb_hist_count_at(tb_hop_hist(r, TB_HOP_SUB_RECEIVE),
					  700), 1);
	assert_int_equal(tb_hist_count(tb_hop_hist(r, TB_HOP_HANDLER_DONE)), 0);
	assert_int_equal(tb_hist_count(tb_hop_hist(r, TB_HOP_DECISION)), 0);
	assert_int_equal(tb_hist_count_at(tb_hop_hist(r, TB_HOP_ORDER_SENT),
					  300), 1);
	assert_int_equal(tb_hist_count_at(tb_hop_total(r), 1000), 1);

	/* One stamp alone: no difference, nothing recorded. */
	memset(&s, 0, sizeof(s));
	tb_hop_set(&s, TB_HOP_DECISION, 123);
	tb_hop_record(r, &s);
	assert_int_equal(tb_hist_count(tb_hop_total(r)), 1);
	/* Out-of-range hops are ignored by tb_hop_set. */
	tb_hop_set(&s, (tb_hop_t)TB_HOP_COUNT, 1);
	tb_hop_set(&s, (tb_hop_t)-1, 1);
	assert_int_equal(s.ns[TB_HOP_DECISION], 123);
	tb_hop_recorder_free(r);
}

/* A receive stamped before the publish (clocks of two hosts apart). */
static void test_negative_difference(void **state)
{
	tb_hop_recorder_t *r = recorder();
	tb_hop_stamps_t s;
	const tb_hist_t *h;
	(void)state;

	memset(&s, 0, sizeof(s));
	tb_hop_set(&s, TB_HOP_PUBLISH, 10000);
	tb_hop_set(&s, TB_HOP_SUB_RECEIVE, 9000);
	tb_hop_set(&s, TB_HOP_HANDLER_DONE, 9400);
	tb_hop_record(r, &s);
	h = tb_hop_hist(r, TB_HOP_SUB_RECEIVE);
	assert_int_equal(tb_hist_underflow(h), 1);
	assert_int_equal(tb_hist_count_at(h, 0), 1);
	assert_int_equal(tb_hist_count_at(tb_hop_hist(r, TB_HOP_HANDLER_DONE),
					  400), 1);
	assert_int_equal(tb_hist_underflow(tb_hop_total(r)), 1);
	tb_hop_recorder_free(r);
}

static void test_begin_from_message(void **state)
{
	tb_msg_t m;
	tb_hop_stamps_t s;
	(void)state;

	memset(&m, 0, sizeof(m));
	memset(&s, 0xff, sizeof(s));
	m.publish_ns = 111;
	m.receive_ns = 222;
	tb_hop_begin(&s, &m);
	assert_int_equal(s.ns[TB_HOP_PUBLISH], 111);
	assert_int_equal(s.ns[TB_HOP_SUB_RECEIVE], 222);
	assert_int_equal(s.ns[TB_HOP_FEED_RECEIVE], 0);
	assert_int_equal(s.ns[TB_HOP_HANDLER_DONE], 0);
	assert_int_equal(s.ns[TB_HOP_DECISION], 0);
	assert_int_equal(s.ns[TB_HOP_ORDER_SENT], 0);
}

/* tb_hop_stamp reads the calibrated TSC: on CLOCK_REALTIME's epoch (within
 * a generous 2 ms of it, calibration and a preempted test included) and at
 * CLOCK_MONOTONIC's rate (within 0.1% over 50 ms, plus 50 us). */
static void test_stamp_agrees_with_clock_gettime(void **state)
{
	tb_hop_stamps_t s;
	uint64_t r0, r1, m0, m1, t0, t1;
	double rate_err;
	(void)state;

	tb_clock_now_ns(); /* calibrate outside the measured window */
	r0 = gettime_ns(CLOCK_REALTIME);
	tb_hop_stamp(&s, TB_HOP_DECISION);
	r1 = gettime_ns(CLOCK_REALTIME);
	assert_true(s.ns[TB_HOP_DECISION] + 2000000 >= r0);
	assert_true(s.ns[TB_HOP_DECISION] <= r1 + 2000000);

	m0 = gettime_ns(CLOCK_MONOTONIC);
	tb_hop_stamp(&s, TB_HOP_PUBLISH);
	t0 = s.ns[TB_HOP_PUBLISH];
	{
		struct timespec d = {0, 50000000};

		nanosleep(&d, NULL);
	}
	tb_hop_stamp(&s, TB_HOP_ORDER_SENT);
	m1 = gettime_ns(CLOCK_MONOTONIC);
	t1 = s.ns[TB_HOP_ORDER_SENT];
	assert_true(t1 > t0);
	/* The TSC interval lies inside the monotonic one, up to the rate
	 * error: [t0, t1] was read between m0 and m1. */
	rate_err = ((double)(t1 - t0) - (double)(m1 - m0)) / (double)(m1 - m0);
	print_message("tsc %llu ns vs monotonic %llu ns (%.5f%%)\n",
		      (unsigned long long)(t1 - t0),
		      (unsigned long long)(m1 - m0), rate_err * 100);
	assert_true((double)(t1 - t0) <= (double)(m1 - m0) * 1.001 + 50000);
	assert_true((double)(t1 - t0) >= 50000000.0 * 0.999 - 50000);
}

static void test_summary(void **state)
{
	tb_hop_recorder_t *r = recorder();
	tb_hop_stamps_t s;
	char buf[2048];
	FILE *f;
	size_t n;
	(void)state;

	memset(&s, 0, sizeof(s));
	for (uint64_t i = 1; i <= 100; i++) {
		tb_hop_set(&s, TB_HOP_PUBLISH, 1000000 * i);
		tb_hop_set(&s, TB_HOP_SUB_RECEIVE, 1000000 * i + i * 10);
		tb_hop_record(r, &s);
	}
	f = tmpfile();
	assert_non_null(f);
	assert_int_equal(tb_hop_write_summary(r, f), 0);
	rewind(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	/* 10, 20, ... 1000 ns: the median is 500, p90 900, max 1000 (all
	 * below 2048, so exact with 3 digits). */
	assert_non_null(strstr(buf, "hop sub_receive count=100 p50=500 p90=900 "
				    "p99=990 p99.9=1000 max=1000 negative=0\n"));
	assert_non_null(strstr(buf, "hop total count=100 p50=500 "));
	assert_null(strstr(buf, "hop publish"));
	assert_int_equal(tb_hop_write_summary(NULL, stdout), TB_EINVAL);
	assert_int_equal(tb_hop_write_summary(r, NULL), TB_EINVAL);
	tb_hop_recorder_free(r);
}

static void test_bad_arguments(void **state)
{
	tb_hop_recorder_t *r = (tb_hop_recorder_t *)1;
	(void)state;

	assert_int_equal(tb_hop_recorder_init(&r, 1000000, 0), TB_EINVAL);
	assert_null(r);
	assert_non_null(strstr(tb_errmsg(), "hop_recorder_init"));
	assert_non_null(strstr(tb_errmsg(), "significant_digits"));
	assert_int_equal(tb_hop_recorder_init(&r, 1, 3), TB_EINVAL);
	assert_int_equal(tb_hop_recorder_init(NULL, 1000000, 3), TB_EINVAL);
	assert_null(tb_hop_hist(NULL, 0));
	assert_null(tb_hop_total(NULL));
	tb_hop_recorder_free(NULL);
	assert_string_equal(tb_hop_name(TB_HOP_FEED_RECEIVE), "feed_receive");
	assert_string_equal(tb_hop_name(TB_HOP_ORDER_SENT), "order_sent");
	assert_string_equal(tb_hop_name(TB_HOP_COUNT), "?");
	assert_string_equal(tb_hop_name(-1), "?");
	r = recorder();
	assert_null(tb_hop_hist(r, TB_HOP_COUNT));
	assert_null(tb_hop_hist(r, -1));
	tb_hop_recorder_free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_hop),
		cmocka_unit_test(test_skipped_hops),
		cmocka_unit_test(test_negative_difference),
		cmocka_unit_test(test_begin_from_message),
		cmocka_unit_test(test_stamp_agrees_with_clock_gettime),
		cmocka_unit_test(test_summary),
		cmocka_unit_test(test_bad_arguments),
	};

	char clock_file[64];
	int rc;

	/* A calibration of this process's own: the shared file of a test run
	 * (/dev/shm/tickbus.clock) may be minutes old by now, and its offset
	 * to CLOCK_REALTIME drifts with its age by design (clock.c, "Drift
	 * bound"), past this test's 2 ms on a loaded machine.  What is
	 * tested here is a fresh calibration's epoch and rate. */
	snprintf(clock_file, sizeof(clock_file), "/tmp/tb-hop-clock.%d",
		 (int)getpid());
	setenv("TICKBUS_CLOCK_FILE", clock_file, 1);
	rc = cmocka_run_group_tests_name("hop", tests, NULL, NULL);
	unlink(clock_file);
	return rc;
}
