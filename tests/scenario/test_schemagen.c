/*
 * test_schemagen.c - runs the real tb-schemagen on the schema and on every
 * broken schema under tests/schema/ (run from the repository root, as
 * tests/run-tests.sh does).
 *
 * Each broken file marks the line where the error is with a comment
 * "<!-- expect: TEXT -->"; the generator must exit 1 with a message that
 * names the file and that line and contains TEXT, and must leave no output
 * file behind.  The good schema must generate, with --version 1 giving the
 * version-1 view.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/common/scenario.h"

#include <glob.h>
#include <sys/stat.h>

static char dir[] = "/tmp/tb-test-schemagen-XXXXXX";
static char outh[128];

static int setup(void **state)
{
	(void)state;
	if (!mkdtemp(dir))
		return -1;
	snprintf(outh, sizeof(outh), "%s/out.h", dir);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return scenario_cleanup(dir, NULL);
}

/* Runs tb-schemagen with argv[1..]; returns its exit status, output in *text. */
static int run(char **argv, char **text)
{
	char log[192];

	snprintf(log, sizeof(log), "%s/run.log", dir);
	return scenario_run(log, argv, 60000, text);
}

/* The line number and text of the "<!-- expect: TEXT -->" mark in `path`. */
static int expectation(const char *path, char *want, size_t len)
{
	FILE *f = fopen(path, "r");
	char line[512];
	int n = 0;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		char *m = strstr(line, "<!-- expect: "), *e;

		n++;
		if (!m)
			continue;
		m += strlen("<!-- expect: ");
		e = strstr(m, " -->");
		assert_non_null(e);
		snprintf(want, len, "%.*s", (int)(e - m), m);
		fclose(f);
		return n;
	}
	fclose(f);
	fail_msg("%s has no expect: mark", path);
	return -1;
}

static void broken_schemas_name_the_line(void **state)
{
	glob_t g;
	size_t i;

	(void)state;
	assert_int_equal(glob("tests/schema/bad_*.xml", 0, NULL, &g), 0);
	assert_true(g.gl_pathc >= 10);
	for (i = 0; i < g.gl_pathc; i++) {
		char *argv[] = {"tb-schemagen", "-o", outh, g.gl_pathv[i], NULL};
		char want[256], where[320];
		struct stat st;
		char *text;
		int line = expectation(g.gl_pathv[i], want, sizeof(want));
		int rc = run(argv, &text);

		snprintf(where, sizeof(where), "tb-schemagen: %s:%d: ",
			 g.gl_pathv[i], line);
		if (rc != 1 || !strstr(text, where) || !strstr(text, want))
			fail_msg("%s: exit %d, want 1 and \"%s...%s\"; got: %s",
				 g.gl_pathv[i], rc, where, want, text);
		assert_int_not_equal(stat(outh, &st), 0);
		free(text);
	}
	globfree(&g);
}

static void good_schema_generates_both_versions(void **state)
{
	char *v2[] = {"tb-schemagen", "-o", outh, "schema/tickbus.xml", NULL};
	char *v1[] = {"tb-schemagen", "--version", "1", "--prefix", "old",
		      "-o", outh, "schema/tickbus.xml", NULL};
	char *text, *hdr;
	proc_t fake;

	(void)state;
	assert_int_equal(run(v2, &text), 0);
	assert_string_equal(text, "");
	free(text);
	snprintf(fake.out, sizeof(fake.out), "%s", outh);
	hdr = proc_output(&fake);
	assert_non_null(strstr(hdr, "#define TB_MD_SCHEMA_VERSION 2\n"));
	assert_non_null(strstr(hdr, "uint32_t bid_orders;"));
	assert_non_null(strstr(hdr, "_Static_assert(offsetof(tb_md_quote_t, bid_orders) == 56"));
	assert_non_null(strstr(hdr, "_Static_assert(sizeof(tb_md_quote_t) == 64"));
	free(hdr);

	assert_int_equal(run(v1, &text), 0);
	free(text);
	hdr = proc_output(&fake);
	assert_non_null(strstr(hdr, "#define OLD_SCHEMA_VERSION 1\n"));
	assert_non_null(strstr(hdr, "_Static_assert(sizeof(old_quote_t) == 56"));
	assert_null(strstr(hdr, "bid_orders"));
	assert_null(strstr(hdr, "order_count"));
	assert_null(strstr(hdr, "tb_md_"));
	free(hdr);
}

static void bad_usage_is_refused(void **state)
{
	char *noout[] = {"tb-schemagen", "schema/tickbus.xml", NULL};
	char *newer[] = {"tb-schemagen", "--version", "3", "-o", outh,
			 "schema/tickbus.xml", NULL};
	char *badver[] = {"tb-schemagen", "--version", "x", "-o", outh,
			  "schema/tickbus.xml", NULL};
	char *missing[] = {"tb-schemagen", "-o", outh, "tests/schema/none.xml", NULL};
	char *text;

	(void)state;
	unlink(outh);
	assert_int_equal(run(noout, &text), 2);
	assert_non_null(strstr(text, "usage: tb-schemagen"));
	free(text);
	assert_int_equal(run(newer, &text), 1);
	assert_non_null(strstr(text, "schema/tickbus.xml:"));
	assert_non_null(strstr(text, "--version 3 is newer than the schema version 2"));
	free(text);
	assert_int_equal(run(badver, &text), 2);
	assert_non_null(strstr(text, "--version 'x'"));
	free(text);
	assert_int_equal(run(missing, &text), 1);
	assert_non_null(strstr(text, "tests/schema/none.xml: No such file"));
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(broken_schemas_name_the_line),
		cmocka_unit_test(good_schema_generates_both_versions),
		cmocka_unit_test(bad_usage_is_refused),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
