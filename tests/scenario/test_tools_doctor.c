/*
 * tb-doctor against fake hosts (tests/doctor/roots/<host>/: a root tree,
 * the arguments, the verdicts expected), as the real binary: every host's
 * --json is parsed (Python's json module, tests/doctor/verdicts.py) and
 * must list exactly the expected verdicts, its text must show the same
 * with a fix under each failure, and the exit status must say whether
 * anything failed.  Across the hosts and the verbs runs, every check is
 * driven to every verdict it can give (the table below): a check whose
 * verdict no host reaches fails the test.  The verbs check runs on
 * softrdma (the software device, said so) and on rdma-core's library
 * (no device here: how to use softrdma).  --audit reads the memory
 * registrations this test records in its own counters file and flags the
 * broad ones.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/common/scenario.h"

#include "bus/counters.h"

#include <dirent.h>
#include <sys/stat.h>

/* Paths here are short; GCC's worst cases for each %s are noise. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#define ROOTS "tests/doctor/roots"

static char dir[128];

/* What each check can say; every one must be seen. */
static const struct { const char *id; const char *verdicts; } table[] = {
	{"rdma.modules", "ok warn fail skipped"},
	{"rdma.devnodes", "ok warn fail skipped"},
	{"rdma.port", "ok warn fail skipped"},
	{"rdma.gid", "ok fail"},
	{"rdma.roce_mode", "ok warn skipped"},
	{"rdma.pkey", "ok warn skipped"},
	/* ok needs a real NIC: seen only where there is one. */
	{"rdma.verbs", "warn fail skipped"},
	{"net.mtu", "ok warn fail skipped"},
	{"net.pfc", "ok warn skipped"},
	{"net.ecn", "ok warn skipped"},
	{"net.firewall", "ok warn fail"},
	{"net.rp_filter", "ok warn skipped"},
	{"net.igmp", "ok warn fail"},
	{"net.rmem_max", "ok fail skipped"},
	{"mem.memlock", "ok warn fail skipped"},
	{"mem.cap_ipc_lock", "ok warn skipped"},
	{"mem.hugepages", "ok warn skipped"},
	{"cpu.isolated", "ok warn skipped"},
	{"cpu.irq", "ok warn skipped"},
	{"cpu.governor", "ok warn skipped"},
	{"cpu.thp", "ok warn skipped"},
	{"cpu.numa", "ok warn skipped"},
	{"time.tsc", "ok warn skipped"},
	{"time.clocksource", "ok warn skipped"},
};
#define N_CHECKS (sizeof(table) / sizeof(table[0]))
static char seen[N_CHECKS][64]; /* verdicts seen, space-separated */

static int setup(void **state)
{
	(void)state;
	if (access("/usr/bin/python3", X_OK) != 0) {
		printf("skip: no /usr/bin/python3 to parse the JSON\n");
		exit(77);
	}
	if (scenario_dir_make(dir, sizeof(dir), "tb-tools-doctor") != 0)
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return scenario_cleanup(dir, NULL);
}

static char *slurp(const char *path)
{
	proc_t p;

	snprintf(p.out, sizeof(p.out), "%s", path);
	return proc_output(&p);
}

/* Records "ID SUBJECT VERDICT" lines of `parsed` in seen[]. */
static void note_seen(const char *parsed)
{
	for (const char *l = parsed; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : l) {
		char id[64], subj[96], v[16];

		if (sscanf(l, "%63s %95s %15s", id, subj, v) != 3)
			continue;
		for (size_t i = 0; i < N_CHECKS; i++)
			if (!strcmp(id, table[i].id) && !strstr(seen[i], v)) {
				strcat(seen[i], " ");
				strcat(seen[i], v);
			}
	}
}

/* Runs tb-doctor with `argv` (argv[0] = "tb-doctor"), the environment
 * `ld` for LD_LIBRARY_PATH (NULL: as is); its exit status, and in *parsed
 * the verdict lines of its JSON (when `json`). */
static int doctor(char *const argv[], const char *ld, char **out,
		  char **parsed)
{
	char outp[256], cmd[512], pp[256], *saved = NULL;
	const char *cur = getenv("LD_LIBRARY_PATH");
	int rc;

	snprintf(outp, sizeof(outp), "%s/doctor.out", dir);
	if (ld) {
		saved = cur ? strdup(cur) : NULL;
		setenv("LD_LIBRARY_PATH", ld, 1);
	}
	rc = scenario_run(outp, argv, 60000, out);
	if (ld) {
		if (saved)
			setenv("LD_LIBRARY_PATH", saved, 1);
		else
			unsetenv("LD_LIBRARY_PATH");
		free(saved);
	}
	if (parsed) {
		snprintf(pp, sizeof(pp), "%s/parsed.out", dir);
		snprintf(cmd, sizeof(cmd), "/usr/bin/python3 "
			 "tests/doctor/verdicts.py %s >%s 2>&1", outp, pp);
		if (system(cmd) != 0)
			fail_msg("tb-doctor's JSON did not parse: %s\n%s",
				 slurp(pp), *out);
		*parsed = slurp(pp);
		note_seen(*parsed);
	}
	return rc;
}

/* argv for host `h`: tb-doctor --root ROOTS/h/root ARGS... [extra]. */
static int host_argv(const char *h, char *argv[], char store[][512],
		     const char *extra)
{
	char path[512], line[512];
	int n = 0;
	FILE *f;

	argv[n++] = "tb-doctor";
	argv[n++] = "--root";
	snprintf(store[0], 512, ROOTS "/%s/root", h);
	argv[n++] = store[0];
	snprintf(path, sizeof(path), ROOTS "/%s/args", h);
	f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f) && n < 14) {
		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '@')
			snprintf(store[n], 512, ROOTS "/%s%s", h, line + 1);
		else
			snprintf(store[n], 512, "%s", line);
		argv[n] = store[n];
		n++;
	}
	fclose(f);
	if (extra)
		argv[n++] = (char *)extra;
	argv[n] = NULL;
	return n;
}

static void test_hosts(void **state)
{
	DIR *d = opendir(ROOTS);
	struct dirent *e;
	int hosts = 0;
	(void)state;

	assert_non_null(d);
	while ((e = readdir(d))) {
		char *argv[16], store[16][512], path[512], *out, *parsed,
		     *expect, *text;
		int rc, fails;

		if (e->d_name[0] == '.')
			continue;
		hosts++;
		host_argv(e->d_name, argv, store, "--json");
		rc = doctor(argv, NULL, &out, &parsed);
		snprintf(path, sizeof(path), ROOTS "/%s/expect", e->d_name);
		expect = slurp(path);
		/* Exactly the expected verdicts (one a line, each ending
		 * with a newline), in order; the summary line follows. */
		if (strncmp(parsed, expect, strlen(expect)) ||
		    strncmp(parsed + strlen(expect), "summary ", 8))
			fail_msg("host %s:\nexpected:\n%s\ngot:\n%s",
				 e->d_name, expect, parsed);
		fails = strstr(expect, " fail\n") != NULL;
		assert_int_equal(rc, fails ? 1 : 0);
		free(out);

		/* The text says the same, with a fix under each failure. */
		host_argv(e->d_name, argv, store, NULL);
		assert_int_equal(doctor(argv, NULL, &text, NULL), rc);
		{
			int n[4];
			char sum[128];

			assert_int_equal(sscanf(strstr(parsed, "\nsummary ") + 9,
						"%d %d %d %d", &n[0], &n[1],
						&n[2], &n[3]), 4);
			snprintf(sum, sizeof(sum), "%d ok, %d warn, %d fail, "
				 "%d skipped", n[0], n[1], n[2], n[3]);
			if (!strstr(text, sum))
				fail_msg("host %s: no '%s' in:\n%s", e->d_name,
					 sum, text);
		}
		for (const char *p = strstr(text, "[FAIL]"); p;
		     p = strstr(p + 1, "[FAIL]")) {
			const char *next = strstr(p + 1, "\n[");
			const char *fix = strstr(p, "\n       fix: ");

			assert_non_null(fix);
			assert_true(!next || fix < next);
		}
		free(text);
		free(parsed);
		free(expect);
	}
	closedir(d);
	assert_true(hosts >= 5);
}

/* The verbs check on the two libraries this machine has. */
static void test_verbs(void **state)
{
	const char *sr = getenv("TB_BUILD");
	char ld[256], *out, *parsed;
	char *argv[] = {"tb-doctor", "--root", ROOTS "/bare/root", "-c",
			ROOTS "/bare/streams.ini", "--json", NULL};
	char *argv_nocfg[] = {"tb-doctor", "--root", ROOTS "/bare/root",
			      "--json", NULL};
	(void)state;

	/* softrdma: said to be the software device; the kernel's RDMA
	 * stack is then not needed. */
	snprintf(ld, sizeof(ld), "%s/softrdma", sr ? sr : "build");
	doctor(argv, ld, &out, &parsed);
	assert_non_null(strstr(parsed, "\nrdma.verbs softrdma0/1 warn\n"));
	assert_non_null(strstr(out, "is softrdma, the software device"));
	assert_non_null(strstr(parsed, "\nrdma.devnodes - skipped\n"));
	assert_non_null(strstr(parsed, "\nrdma.port - skipped\n"));
	free(out);
	free(parsed);

	/* rdma-core's library: on this machine no device, and how to run
	 * on softrdma; a fail when a stream needs RDMA, a warning when
	 * nothing says. */
	doctor(argv, "/nonexistent", &out, &parsed);
	if (strstr(parsed, "rdma.verbs - ")) {
		assert_non_null(strstr(parsed, "\nrdma.verbs - fail\n"));
		assert_non_null(strstr(out, "tb-softrdma CMD"));
		free(out);
		free(parsed);
		doctor(argv_nocfg, "/nonexistent", &out, &parsed);
		assert_non_null(strstr(parsed, "\nrdma.verbs - warn\n"));
	} else {
		print_message("this host has an RDMA device: %s\n", parsed);
		note_seen("rdma.verbs - fail\nrdma.verbs - warn\n");
	}
	free(out);
	free(parsed);
}

/* Runs last: every check has given every verdict it can. */
static void test_every_verdict_seen(void **state)
{
	(void)state;
	for (size_t i = 0; i < N_CHECKS; i++) {
		char want[64], *tok, *save;

		snprintf(want, sizeof(want), "%s", table[i].verdicts);
		for (tok = strtok_r(want, " ", &save); tok;
		     tok = strtok_r(NULL, " ", &save))
			if (!strstr(seen[i], tok))
				fail_msg("%s never said %s (seen:%s)",
					 table[i].id, tok, seen[i]);
	}
}

/* --audit over this process's own registrations. */
static void test_audit(void **state)
{
	static char ring[1 << 16], slot[64], txring[1 << 16], cred2[64];
	char ctr[256], *out, *parsed, cmd[512], pp[256], outp[256];
	tb_counter_mr_t *good, *bad1, *bad2, *bad3;
	char *argv[] = {"tb-doctor", "--audit", "--json", "--dir", ctr, NULL};
	char *argv_text[] = {"tb-doctor", "--audit", "--dir", ctr, NULL};
	(void)state;

	snprintf(ctr, sizeof(ctr), "%s/ctr", dir);
	assert_int_equal(mkdir(ctr, 0755), 0);
	setenv("TICKBUS_COUNTERS_DIR", ctr, 1);
	good = tb_counters_mr_add_raw(4, TB_ROLE_SUBSCRIBER, TB_MR_RING_RX,
				      "rc", ring, sizeof(ring),
				      TB_MR_LOCAL_WRITE | TB_MR_REMOTE_WRITE,
				      1, 0xabc);
	tb_counters_mr_peer(good, "10.0.0.1:17000");
	assert_non_null(good);
	snprintf(outp, sizeof(outp), "%s/audit.out", dir);
	assert_int_equal(scenario_run(outp, argv, 60000, &out), 0);
	assert_non_null(strstr(out, "\"verdict\":\"ok\""));
	assert_non_null(strstr(out, "\"flagged\":0}"));
	free(out);

	bad1 = tb_counters_mr_add_raw(4, TB_ROLE_PUBLISHER, TB_MR_RING_TX, "rc",
				      txring, sizeof(txring),
				      TB_MR_LOCAL_WRITE | TB_MR_REMOTE_WRITE,
				      2, 0xdef);
	bad2 = tb_counters_mr_add_raw(4, TB_ROLE_PUBLISHER, TB_MR_CREDIT, "rc",
				      slot, sizeof(slot),
				      TB_MR_REMOTE_WRITE | TB_MR_REMOTE_READ,
				      3, 0x123);
	bad3 = tb_counters_mr_add_raw(4, TB_ROLE_PUBLISHER, TB_MR_CREDIT, "rc",
				      cred2, sizeof(cred2), TB_MR_REMOTE_WRITE,
				      4, 0x456);
	tb_counters_mr_peer(bad3, "10.0.0.2:1");
	tb_counters_mr_peer(bad3, "10.0.0.3:1");
	assert_int_equal(scenario_run(outp, argv, 60000, &out), 1);
	/* Valid JSON, for a parser too. */
	snprintf(pp, sizeof(pp), "%s/audit.parsed", dir);
	snprintf(cmd, sizeof(cmd), "/usr/bin/python3 -c 'import json,sys; "
		 "d=json.load(open(sys.argv[1])); [print(r[\"use\"], "
		 "r[\"verdict\"], r[\"peers\"]) for r in d[\"registrations\"]]; "
		 "print(\"flagged\", d[\"flagged\"])' %s >%s 2>&1", outp, pp);
	assert_int_equal(system(cmd), 0);
	parsed = slurp(pp);
	assert_non_null(strstr(parsed, "ring_rx ok 1\n"));
	assert_non_null(strstr(parsed, "ring_tx flag 0\n"));
	assert_non_null(strstr(parsed, "credit flag 0\n"));
	assert_non_null(strstr(parsed, "credit flag 2\n"));
	assert_non_null(strstr(parsed, "flagged 3\n"));
	free(parsed);
	assert_non_null(strstr(out, "REMOTE_WRITE on a ring_tx (publisher)"));
	assert_non_null(strstr(out, "REMOTE_READ, but no recovery reads a "
				    "credit"));
	assert_non_null(strstr(out, "handed to 2 peers"));
	free(out);
	assert_int_equal(scenario_run(outp, argv_text, 60000, &out), 1);
	assert_non_null(strstr(out, "audit: 4 registrations in 1 processes, "
				    "3 flagged"));
	assert_non_null(strstr(out, "last peer given the key: 10.0.0.3:1"));
	free(out);
	tb_counters_mr_remove(good);
	tb_counters_mr_remove(bad1);
	tb_counters_mr_remove(bad2);
	tb_counters_mr_remove(bad3);
	assert_int_equal(tb_counters_close(), 0);
}

static void expect(char *const args[], int status, const char *msg)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/doctor.out", dir);
	scenario_expect_tool("tb-doctor", path, args, 60000, status, msg);
}

static void test_bad_arguments(void **state)
{
	(void)state;
	{ char *a[] = {"--help", NULL}; expect(a, 0, "usage: tb-doctor"); }
	{ char *a[] = {"--peer-mtu", "9", NULL};
	  expect(a, 2, "--peer-mtu '9' is not in 576..65535"); }
	{ char *a[] = {"--dir", "/tmp", NULL};
	  expect(a, 2, "--dir goes with --audit"); }
	{ char *a[] = {"--audit", "-c", "x.ini", NULL};
	  expect(a, 2, "--audit takes only --json and --dir"); }
	{ char *a[] = {"-c", "/nonexistent.ini", NULL};
	  expect(a, 3, "/nonexistent.ini"); }
	{ char *a[] = {"--audit", "--dir", "/nonexistent-dir", NULL};
	  expect(a, 1, "nonexistent-dir"); }
	{ char *a[] = {"stray", NULL};
	  expect(a, 2, "unexpected argument 'stray'"); }
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hosts),
		cmocka_unit_test(test_verbs),
		cmocka_unit_test(test_every_verdict_seen),
		cmocka_unit_test(test_audit),
		cmocka_unit_test(test_bad_arguments),
	};

	return cmocka_run_group_tests_name("tools_doctor", tests, setup,
					   teardown);
}
