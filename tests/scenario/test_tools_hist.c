/*
 * tb-hist, run as the real binary on files this test writes with the
 * library: the values are known here, so every figure tb-hist prints is
 * checked against a value computed in the test.  Covers print (summary,
 * .hgrm, CSV), compare, merge (to .hgrm and to a log, decoded back here),
 * plot (the SVG's structure, labels, escaping and ticks) and the errors: a
 * missing file, a corrupt log, a bad .hgrm, an empty file, bad arguments.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/common/scenario.h"

#include <tickbus/hist.h>

#include <inttypes.h>
#include <math.h>

static char dir[128];
static char hgrm_a[256], hgrm_b[256], log_ab[256];

/* a: the values 1..10000 ns once each; b: 2..20000 ns in steps of 2. */
static tb_hist_t *make(int64_t step)
{
	tb_hist_t *h;

	assert_int_equal(tb_hist_init(&h, 1, 3600000000000ll, 3), 0);
	for (int64_t v = 1; v <= 10000; v++)
		tb_hist_record(h, v * step);
	return h;
}

static int setup(void **state)
{
	tb_hist_t *a, *b;
	tb_hist_log_writer_t *w;
	FILE *f;

	(void)state;
	if (scenario_dir_make(dir, sizeof(dir), "tb-tools-hist") != 0)
		return -1;
	snprintf(hgrm_a, sizeof(hgrm_a), "%s/a.hgrm", dir);
	snprintf(hgrm_b, sizeof(hgrm_b), "%s/b.hgrm", dir);
	snprintf(log_ab, sizeof(log_ab), "%s/ab.hlog", dir);
	a = make(1);
	b = make(2);
	f = fopen(hgrm_a, "w");
	if (!f || tb_hist_write_hgrm(a, f, 1000.0, 0) || fclose(f))
		return -1;
	f = fopen(hgrm_b, "w");
	if (!f || tb_hist_write_hgrm(b, f, 1000.0, 0) || fclose(f))
		return -1;
	f = fopen(log_ab, "w");
	if (!f || tb_hist_log_writer_open(&w, f, 1700000000.0, 1e6) ||
	    tb_hist_log_writer_write(w, "a", 0, 1, a) ||
	    tb_hist_log_writer_write(w, "b", 1, 1, b) ||
	    tb_hist_log_writer_close(w) || fclose(f))
		return -1;
	tb_hist_free(a);
	tb_hist_free(b);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return scenario_cleanup(dir, NULL);
}

static int run(char **out, char *const args[])
{
	char path[256];

	snprintf(path, sizeof(path), "%s/run.out", dir);
	return scenario_run_tool("tb-hist", path, args, 60000, out);
}

static double field(const char *line, const char *key)
{
	char v[64];

	if (proc_field(line, key, v, sizeof(v)))
		fail_msg("no %s= in %s", key, line);
	return atof(v);
}

/* Within the histogram's precision (3 digits) of the exact value. */
static void near(double got, double want)
{
	if (fabs(got - want) > want * 0.001 + 1e-9)
		fail_msg("got %.6f, want %.6f within 0.1%%", got, want);
}

/* The exact percentile of 1..n x step: the ceil(p/100 n)-th value. */
static double exact(double p, int64_t n, int64_t step)
{
	return (double)((int64_t)ceil(p / 100.0 * (double)n) * step);
}

/* The line of `text` that starts with `prefix`, copied into `buf`. */
static char *line_of(const char *text, const char *prefix, char *buf,
		     size_t cap)
{
	const char *p = strstr(text, prefix), *e;

	if (!p)
		fail_msg("no line '%s' in %s", prefix, text);
	e = strchr(p, '\n');
	snprintf(buf, cap, " %.*s", (int)(e ? e - p : (long)strlen(p)), p);
	return buf;
}

static void test_print_summary(void **state)
{
	char *out, *line, buf[512];
	(void)state;
	{
		char *a[] = {"print", "-u", "ns", hgrm_a, log_ab, NULL};

		assert_int_equal(run(&out, a), 0);
	}
	/* The .hgrm line, then the log (both tags merged: 20000 samples). */
	line = line_of(out, "a.hgrm:", buf, sizeof(buf));
	assert_int_equal((int64_t)field(line, "count"), 10000);
	near(field(line, "p50"), exact(50, 10000, 1));
	near(field(line, "p90"), exact(90, 10000, 1));
	/* A .hgrm lists 99.0625% but not 99%: read back, p99 is the value of
	 * the next level listed. */
	assert_true(field(line, "p99") >= exact(99, 10000, 1));
	assert_true(field(line, "p99") <= exact(99.0625, 10000, 1) * 1.001);
	near(field(line, "max"), 10000);
	line = line_of(out, "ab.hlog:", buf, sizeof(buf));
	assert_int_equal((int64_t)field(line, "count"), 20000);
	assert_int_equal((int64_t)field(line, "intervals"), 2);
	/* a and b together: 1..10000 and 2..20000; the median is 6667. */
	near(field(line, "p50"), 6667);
	near(field(line, "max"), 20000);
	/* Mean of a alone is 5000.5, of b 10001, of both 7500.75 (ns). */
	near(field(line, "mean"), 7500.75);
	free(out);

	/* One tag only, in microseconds. */
	{
		char *a[] = {"print", "--tag", "b", log_ab, NULL};

		assert_int_equal(run(&out, a), 0);
	}
	assert_int_equal((int64_t)field(out, "count"), 10000);
	near(field(out, "p99.9"), exact(99.9, 10000, 2) / 1000);
	assert_non_null(strstr(out, "unit=us"));
	free(out);
}

static void test_print_full_and_csv(void **state)
{
	char *out;
	(void)state;
	{
		char *a[] = {"print", "--hgrm", hgrm_a, NULL};

		assert_int_equal(run(&out, a), 0);
	}
	/* The .hgrm header and footer, and the total. */
	assert_non_null(strstr(out, "Value     Percentile TotalCount "
				    "1/(1-Percentile)"));
	assert_non_null(strstr(out, "Total count    =        10000]"));
	assert_non_null(strstr(out, "#[Buckets = "));
	free(out);
	{
		char *a[] = {"print", "--csv", "-u", "ns", hgrm_a, NULL};

		assert_int_equal(run(&out, a), 0);
	}
	assert_int_equal(strncmp(out, "value,percentile,total_count,inverse\n",
				 37), 0);
	/* The 100% line: the max and all samples, inverse Infinity. */
	assert_non_null(strstr(out, ",1.000000000000,10000,Infinity\n"));
	free(out);
}

static void test_compare(void **state)
{
	char *out, *row;
	(void)state;
	{
		char *a[] = {"compare", "-l", "base", "-l", "double", hgrm_a,
			     hgrm_b, NULL};

		assert_int_equal(run(&out, a), 0);
	}
	assert_non_null(strstr(out, "base"));
	assert_non_null(strstr(out, "double"));
	/* b's values are a's doubled: every ratio is 2.00. */
	for (const char *r = "p50\0p90\0p99\0p99.9\0max\0"; *r;
	     r += strlen(r) + 1) {
		char key[16];
		double v1, v2, ratio;

		snprintf(key, sizeof(key), "\n%s ", r);
		row = strstr(out, key);
		assert_non_null(row);
		assert_int_equal(sscanf(row + strlen(key), "%lf %lf %lf", &v1,
					&v2, &ratio), 3);
		near(ratio, 2.0);
		near(v2, 2 * v1);
	}
	free(out);
	{
		char *a[] = {"compare", "--markdown", "-l", "base", "-l",
			     "double", hgrm_a, hgrm_b, NULL};

		assert_int_equal(run(&out, a), 0);
	}
	assert_int_equal(strncmp(out, "| us | base | double | double / base |\n"
				      "|---|---:|---:|---:|\n", 57), 0);
	assert_non_null(strstr(out, "| p50 | 5.003 | 10.007 | 2.00 |\n"));
	assert_non_null(strstr(out, "| count | 10000 | 10000 | |\n"));
	free(out);
}

static void test_merge(void **state)
{
	char out_hgrm[256], out_log[256], *out;
	tb_hist_log_reader_t *r;
	tb_hist_log_entry_t e;
	FILE *f;
	(void)state;

	snprintf(out_hgrm, sizeof(out_hgrm), "%s/m.hgrm", dir);
	snprintf(out_log, sizeof(out_log), "%s/m.hlog", dir);
	{
		char *a[] = {"merge", "-o", out_hgrm, hgrm_a, hgrm_b, NULL};

		assert_int_equal(run(&out, a), 0);
		free(out);
	}
	{
		char *a[] = {"print", "-u", "ns", out_hgrm, NULL};

		assert_int_equal(run(&out, a), 0);
		assert_int_equal((int64_t)field(out, "count"), 20000);
		near(field(out, "max"), 20000);
		free(out);
	}
	{
		char *a[] = {"merge", "-o", out_log, log_ab, NULL};

		assert_int_equal(run(&out, a), 0);
		free(out);
	}
	/* Decode the merged log here: one interval, exactly a + b as this
	 * test builds them. */
	f = fopen(out_log, "r");
	assert_non_null(f);
	assert_int_equal(tb_hist_log_reader_open(&r, f), 0);
	assert_int_equal(tb_hist_log_read(r, &e), 1);
	assert_int_equal(tb_hist_count(e.hist), 20000);
	{
		tb_hist_t *want = make(1), *b = make(2);

		assert_int_equal(tb_hist_merge(want, b), 0);
		assert_true(tb_hist_equal(e.hist, want));
		tb_hist_free(want);
		tb_hist_free(b);
	}
	tb_hist_free(e.hist);
	assert_int_equal(tb_hist_log_read(r, &e), 0);
	tb_hist_log_reader_close(r);
	fclose(f);
}

static int count_of(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
		n++;
	return n;
}

static void test_plot(void **state)
{
	char svg[256], *out, *text;
	proc_t fake;
	(void)state;

	snprintf(svg, sizeof(svg), "%s/p.svg", dir);
	{
		char *a[] = {"plot", "-o", svg, "--title", "shm <vs> rc",
			     "-l", "a&b", hgrm_a, log_ab, NULL};

		assert_int_equal(run(&out, a), 0);
		free(out);
	}
	memset(&fake, 0, sizeof(fake));
	snprintf(fake.out, sizeof(fake.out), "%s", svg);
	text = proc_output(&fake);
	assert_int_equal(strncmp(text, "<?xml", 5), 0);
	assert_non_null(strstr(text, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
	assert_non_null(strstr(text, "</svg>\n"));
	/* One line per run, labelled, with the text escaped. */
	assert_int_equal(count_of(text, "<polyline class=\"run\""), 2);
	assert_non_null(strstr(text, ">a&amp;b (p50"));
	assert_non_null(strstr(text, ">ab (p50"));
	assert_non_null(strstr(text, "shm &lt;vs&gt; rc"));
	/* 20000 samples: ticks up to 1/(1-p) = 10^5. */
	assert_non_null(strstr(text, ">90%<"));
	assert_non_null(strstr(text, ">99%<"));
	assert_non_null(strstr(text, ">99.9%<"));
	assert_non_null(strstr(text, ">99.999%<"));
	assert_null(strstr(text, ">99.9999%<"));
	assert_non_null(strstr(text, "Latency (us)"));
	free(text);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void expect(char *const args[], int status, const char *msg)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/run.out", dir);
	scenario_expect_tool("tb-hist", path, args, 60000, status, msg);
}

static void test_errors(void **state)
{
	char missing[256], corrupt[256], bad_hgrm[256], empty[256], svg[256];
	char down[256];
	(void)state;

	snprintf(missing, sizeof(missing), "%s/none.hgrm", dir);
	snprintf(corrupt, sizeof(corrupt), "%s/corrupt.hlog", dir);
	snprintf(bad_hgrm, sizeof(bad_hgrm), "%s/bad.hgrm", dir);
	snprintf(down, sizeof(down), "%s/down.hgrm", dir);
	snprintf(empty, sizeof(empty), "%s/empty.hlog", dir);
	snprintf(svg, sizeof(svg), "%s/x.svg", dir);
	write_file(corrupt, "#[Histogram log format version 1.3]\n"
			    "#[StartTime: 1.000 (seconds since epoch)]\n"
			    "0.000,1.000,0.001,HISTFAAA!!!notbase64\n");
	write_file(bad_hgrm, "       Value     Percentile TotalCount "
			     "1/(1-Percentile)\n\n       1.000 0.0 1 1.00\n"
			     "    garbage here\n");
	write_file(down, "       Value     Percentile TotalCount "
			 "1/(1-Percentile)\n\n       1.000 0.5 10 2.00\n"
			 "       2.000 0.9 5 10.00\n");
	write_file(empty, "\n\n");

	{ char *a[] = {"print", missing, NULL};
	  expect(a, 1, "none.hgrm: No such file or directory"); }
	{ char *a[] = {"print", corrupt, NULL};
	  expect(a, 1, "hist log line 3"); }
	{ char *a[] = {"print", corrupt, NULL}; expect(a, 1, "base64"); }
	{ char *a[] = {"print", bad_hgrm, NULL};
	  expect(a, 1, "line 4 is not a .hgrm line"); }
	{ char *a[] = {"print", down, NULL};
	  expect(a, 1, "is below the line before"); }
	{ char *a[] = {"print", empty, NULL}; expect(a, 1, "empty file"); }
	{ char *a[] = {"print", "--tag", "zzz", log_ab, NULL};
	  expect(a, 1, "no interval histograms tagged zzz"); }
	{ char *a[] = {"plot", "-o", "/nonexistent/dir/p.svg", hgrm_a,
		       NULL};
	  expect(a, 1, "No such file or directory"); }
	{ char *a[] = {NULL}; expect(a, 2, "usage: tb-hist"); }
	{ char *a[] = {"draw", hgrm_a, NULL};
	  expect(a, 2, "unknown command 'draw'"); }
	{ char *a[] = {"plot", hgrm_a, NULL}; expect(a, 2, "plot needs -o"); }
	{ char *a[] = {"merge", hgrm_a, NULL}; expect(a, 2, "merge needs -o"); }
	{ char *a[] = {"print", NULL}; expect(a, 2, "no input files"); }
	{ char *a[] = {"print", "-u", "furlongs", hgrm_a, NULL};
	  expect(a, 2, "unknown unit 'furlongs'"); }
	{ char *a[] = {"print", "--ticks", "0", hgrm_a, NULL};
	  expect(a, 2, "--ticks"); }
	{ char *a[] = {"compare", "-l", "x", "-l", "y", hgrm_a, NULL};
	  expect(a, 2, "2 labels for 1 files"); }
	{ char *a[] = {"--help", NULL}; expect(a, 0, "usage: tb-hist"); }
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_print_summary),
		cmocka_unit_test(test_print_full_and_csv),
		cmocka_unit_test(test_compare),
		cmocka_unit_test(test_merge),
		cmocka_unit_test(test_plot),
		cmocka_unit_test(test_errors),
	};

	return cmocka_run_group_tests_name("tools_hist", tests, setup,
					   teardown);
}
