/*
 * tb_latency_*: an application's latency histogram, read back from the
 * process's counters file as tb-stat reads it (buckets, count, sum, name,
 * stream id, role); recorded privately when the file has no room; bad
 * arguments refused.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <tickbus/tickbus.h>

#include "bus/counters.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

/* This process's exported histograms, as a reader sees them. */
static void read_own(tb_counters_proc_t *p)
{
	assert_int_equal(tb_counters_read_file(tb_counters_path(), p), 0);
}

static const tb_counters_hist_t *find(const tb_counters_proc_t *p,
				      const char *name)
{
	for (int i = 0; i < p->n_hists; i++)
		if (!strcmp(p->hists[i].name, name))
			return &p->hists[i];
	return NULL;
}

static void recorded_into_the_counters_file(void **state)
{
	static tb_counters_proc_t p;
	const tb_counters_hist_t *h;
	tb_latency_t *lat;

	(void)state;
	assert_int_equal(tb_latency_open(&lat, 42, "Tick to-Trade"), 0);
	tb_latency_record(lat, 50);        /* bucket 0: <= 64 ns */
	tb_latency_record(lat, 1000);      /* <= 1024 ns */
	tb_latency_record(lat, 1000);
	tb_latency_record(lat, -5);        /* counts as 0 */
	tb_latency_record(lat, 3000000000ll);
	assert_int_equal(tb_latency_count(lat), 5);
	read_own(&p);
	h = find(&p, "tick_to_trade");
	assert_non_null(h);
	assert_int_equal(h->stream_id, 42);
	assert_int_equal(h->role, TB_ROLE_SUBSCRIBER);
	assert_int_equal(h->count, 5);
	assert_true(h->sum_ns == 50 + 1000 + 1000 + 3000000000ull);
	assert_int_equal(h->b[tb_counter_hist_bucket(50)], 2);
	assert_int_equal(h->b[tb_counter_hist_bucket(1000)], 2);
	assert_int_equal(h->b[tb_counter_hist_bucket(3000000000ll)], 1);
	tb_latency_close(lat);
	read_own(&p);
	assert_null(find(&p, "tick_to_trade"));
	tb_latency_close(NULL);
}

static void full_file_records_privately(void **state)
{
	static tb_counters_proc_t p;
	tb_latency_t *lat[TB_COUNTERS_HISTS + 1];

	(void)state;
	setenv("TICKBUS_QUIET", "1", 1);
	for (int i = 0; i <= TB_COUNTERS_HISTS; i++) {
		char name[16];

		snprintf(name, sizeof(name), "h%d", i);
		assert_int_equal(tb_latency_open(&lat[i], 1, name), 0);
		assert_non_null(lat[i]);
	}
	/* The one past the file's room counts all the same, seen by no
	 * tool. */
	tb_latency_record(lat[TB_COUNTERS_HISTS], 100);
	assert_int_equal(tb_latency_count(lat[TB_COUNTERS_HISTS]), 1);
	read_own(&p);
	assert_int_equal(p.n_hists, TB_COUNTERS_HISTS);
	assert_null(find(&p, "h16"));
	for (int i = 0; i <= TB_COUNTERS_HISTS; i++)
		tb_latency_close(lat[i]);
	read_own(&p);
	assert_int_equal(p.n_hists, 0);
}

static void bad_arguments(void **state)
{
	tb_latency_t *lat = (tb_latency_t *)1;

	(void)state;
	assert_int_equal(tb_latency_open(&lat, 1, ""), TB_EINVAL);
	assert_non_null(strstr(tb_errmsg(), "empty name"));
	assert_int_equal(tb_latency_open(&lat, 1, NULL), TB_EINVAL);
	assert_int_equal(tb_latency_open(NULL, 1, "x"), TB_EINVAL);
}

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/tb-latency-test.XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	setenv("TICKBUS_COUNTERS_DIR", dir, 1);
	return tb_counters_open();
}

static int teardown(void **state)
{
	(void)state;
	tb_counters_close();
	return rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(recorded_into_the_counters_file),
		cmocka_unit_test(full_file_records_privately),
		cmocka_unit_test(bad_arguments),
	};

	return cmocka_run_group_tests_name("latency", tests, setup, teardown);
}
