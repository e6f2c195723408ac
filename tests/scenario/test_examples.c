/* Every program under examples/ builds (make does that) and runs to
 * success: the README's API examples are not allowed to rot. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/common/scenario.h"

#include <dirent.h>

static void run_example(const char *name)
{
	char dir[512], out[256], *text;
	const char *build = getenv("TB_BUILD");
	char *argv[] = {(char *)name, NULL};
	int rc;

	snprintf(dir, sizeof(dir), "%s/examples", build && *build ? build : "build");
	setenv("TB_BIN", dir, 1);
	snprintf(out, sizeof(out), "/tmp/tb-example-%s.%d.out", name, (int)getpid());
	rc = scenario_run(out, argv, 30000, &text);
	print_message("%s: exit %d\n%s", name, rc, text);
	free(text);
	unlink(out);
	assert_int_equal(rc, 0);
}

static void offer(void **state) { (void)state; run_example("offer"); }
static void offerv(void **state) { (void)state; run_example("offerv"); }
static void claim_commit(void **state) { (void)state; run_example("claim_commit"); }
static void poll_loop(void **state) { (void)state; run_example("poll_loop"); }
static void config_file(void **state) { (void)state; run_example("config_file"); }
static void pin_and_idle(void **state) { (void)state; run_example("pin_and_idle"); }
static void udp_flush(void **state) { (void)state; run_example("udp_flush"); }
static void late_join(void **state) { (void)state; run_example("late_join"); }
static void open_epoch(void **state) { (void)state; run_example("open_epoch"); }
static void open_sources(void **state) { (void)state; run_example("open_sources"); }
static void start_at_snapshot(void **state) { (void)state; run_example("start_at_snapshot"); }
static void input_counters(void **state) { (void)state; run_example("input_counters"); }
static void latency_export(void **state) { (void)state; run_example("latency_export"); }

/* A new example must be added here too: this test counts them. */
static void every_example_is_run(void **state)
{
	const char *build = getenv("TB_BUILD");
	char dir[512];
	struct dirent *e;
	DIR *d;
	int n = 0;

	(void)state;
	snprintf(dir, sizeof(dir), "%s/examples", build && *build ? build : "build");
	d = opendir(dir);
	assert_non_null(d);
	while ((e = readdir(d)))
		if (e->d_name[0] != '.' && !strchr(e->d_name, '.'))
			n++;
	closedir(d);
	assert_int_equal(n, 13);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(offer),
		cmocka_unit_test(offerv),
		cmocka_unit_test(claim_commit),
		cmocka_unit_test(poll_loop),
		cmocka_unit_test(config_file),
		cmocka_unit_test(pin_and_idle),
		cmocka_unit_test(udp_flush),
		cmocka_unit_test(late_join),
		cmocka_unit_test(open_epoch),
		cmocka_unit_test(open_sources),
		cmocka_unit_test(start_at_snapshot),
		cmocka_unit_test(input_counters),
		cmocka_unit_test(latency_export),
		cmocka_unit_test(every_example_is_run),
	};
	return cmocka_run_group_tests_name("examples", tests, NULL, NULL);
}
