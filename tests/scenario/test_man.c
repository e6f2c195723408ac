/*
 * The man pages lint clean: every hand-written page (tools/man/) and every
 * page made from a tool's --help ($BUILD/man/) passes `mandoc -T lint -W
 * warning` without a message, and every program the build makes has a
 * section-1 page.  Skips (77) without mandoc.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/common/scenario.h"

#include <dirent.h>
#include <sys/stat.h>

static char dir[128];

static int lint(const char *page, char **out)
{
	char cmd[1024], path[256];
	proc_t p;
	int rc;

	snprintf(path, sizeof(path), "%s/lint.out", dir);
	snprintf(cmd, sizeof(cmd), "mandoc -T lint -W warning %s >%s 2>&1",
		 page, path);
	rc = system(cmd);
	snprintf(p.out, sizeof(p.out), "%s", path);
	*out = proc_output(&p);
	return rc;
}

static int lint_dir(const char *d, const char *what)
{
	struct dirent *e;
	DIR *dp = opendir(d);
	int n = 0;

	assert_non_null(dp);
	while ((e = readdir(dp))) {
		size_t l = strlen(e->d_name);
		char page[512], *out;

		if (l < 3 || e->d_name[l - 2] != '.' ||
		    !strchr("1357", e->d_name[l - 1]))
			continue;
		snprintf(page, sizeof(page), "%s/%s", d, e->d_name);
		if (lint(page, &out) != 0 || out[0])
			fail_msg("%s page %s: %s", what, page, out);
		free(out);
		n++;
	}
	closedir(dp);
	return n;
}

static void test_pages_lint_clean(void **state)
{
	const char *build = getenv("TB_BUILD");
	char gen[512];
	(void)state;

	assert_true(lint_dir("tools/man", "hand-written") >= 9);
	snprintf(gen, sizeof(gen), "%s/man", build ? build : "build");
	assert_true(lint_dir(gen, "generated") >= 1);
}

/* The linter is not a rubber stamp: a broken page makes it speak. */
static void test_lint_catches_a_bad_page(void **state)
{
	char page[256], *out;
	FILE *f;
	(void)state;

	snprintf(page, sizeof(page), "%s/bad.1", dir);
	f = fopen(page, "w");
	assert_non_null(f);
	fputs(".Dd July 1, 2025\n.Dt BAD 1\n.Os\n.Sh NAME\n.Nm bad\n"
	      ".Sh DESCRIPTION\n.Bl -tag\n.It x\n", f);
	fclose(f);
	lint(page, &out);
	assert_true(out[0] != '\0');
	free(out);
}

static void test_every_program_has_a_page(void **state)
{
	const char *bin = getenv("TB_BIN"), *build = getenv("TB_BUILD");
	struct dirent *e;
	DIR *d;
	(void)state;

	d = opendir(bin ? bin : "build/bin");
	assert_non_null(d);
	while ((e = readdir(d))) {
		char a[512], b[512];
		struct stat st;

		if (strncmp(e->d_name, "tb-", 3) ||
		    !strcmp(e->d_name, "tb-schemagen"))
			continue;
		snprintf(a, sizeof(a), "tools/man/%s.1", e->d_name);
		snprintf(b, sizeof(b), "%s/man/%s.1", build ? build : "build",
			 e->d_name);
		if (stat(a, &st) != 0 && stat(b, &st) != 0)
			fail_msg("no man page for %s", e->d_name);
	}
	closedir(d);
}

static int setup(void **state)
{
	(void)state;
	if (system("command -v mandoc >/dev/null 2>&1") != 0) {
		printf("skip: no mandoc (apt-get install mandoc)\n");
		exit(77);
	}
	return scenario_dir_make(dir, sizeof(dir), "tb-man");
}

static int teardown(void **state)
{
	(void)state;
	return scenario_cleanup(dir, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pages_lint_clean),
		cmocka_unit_test(test_lint_catches_a_bad_page),
		cmocka_unit_test(test_every_program_has_a_page),
	};

	return cmocka_run_group_tests_name("man", tests, setup, teardown);
}
