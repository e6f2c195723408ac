/*
 * `make install DESTDIR=...` into a directory of this test's own: the
 * libraries, every tool with its man page, the man pages of sections 3, 5
 * and 7, the Wireshark dissector, softrdma's libibverbs.so.1 and the
 * tb-softrdma wrapper; then a verbs program (rdma-core's ibv_devices, and
 * the installed tb-doctor) run through the installed wrapper, with no
 * LD_LIBRARY_PATH of the build tree, finds the software device.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/common/scenario.h"

#include <dirent.h>
#include <sys/stat.h>

static char dir[128], prefix[256];

static int setup(void **state)
{
	(void)state;
	if (scenario_dir_make(dir, sizeof(dir), "tb-install") != 0)
		return -1;
	snprintf(prefix, sizeof(prefix), "%s/usr/local", dir);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return scenario_cleanup(dir, NULL);
}

static int sh(const char *cmd, char **out)
{
	char path[256], full[2048];
	proc_t p;
	int rc;

	snprintf(path, sizeof(path), "%s/sh.out", dir);
	snprintf(full, sizeof(full), "( %s ) >%s 2>&1", cmd, path);
	rc = system(full);
	snprintf(p.out, sizeof(p.out), "%s", path);
	*out = proc_output(&p);
	return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

static void need(const char *rel)
{
	char path[512];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", prefix, rel);
	if (stat(path, &st) != 0 || st.st_size == 0)
		fail_msg("not installed: %s", path);
}

static void test_install_tree(void **state)
{
	const char *build = getenv("BUILD"), *san = getenv("SAN");
	char cmd[1024], *out, bindir[300];
	struct dirent *e;
	DIR *d;
	int tools = 0;
	(void)state;

	snprintf(cmd, sizeof(cmd), "make -s --no-print-directory install "
		 "DESTDIR=%s PREFIX=/usr/local BUILD=%s SAN=%s NODEPS=1", dir,
		 build && *build ? build : "build", san && *san ? san : "0");
	if (sh(cmd, &out) != 0)
		fail_msg("%s: %s", cmd, out);
	free(out);
	need("include/tickbus/tickbus.h");
	need("lib/libtickbus.a");
	need("lib/pkgconfig/tickbus.pc");
	need("lib/tickbus/softrdma/libibverbs.so.1");
	need("bin/tb-softrdma");
	need("share/tickbus/wireshark/tickbus.lua");
	need("share/man/man3/tickbus.3");
	need("share/man/man5/tickbus.ini.5");
	need("share/man/man5/tickbus-counters.5");
	need("share/man/man5/tickbus-ring.5");
	need("share/man/man5/tickbus-store.5");
	need("share/man/man7/tickbus.7");
	/* Every installed tool has its page. */
	snprintf(bindir, sizeof(bindir), "%s/bin", prefix);
	d = opendir(bindir);
	assert_non_null(d);
	while ((e = readdir(d))) {
		char page[300];

		if (strncmp(e->d_name, "tb-", 3))
			continue;
		tools++;
		snprintf(page, sizeof(page), "share/man/man1/%s.1", e->d_name);
		need(page);
	}
	closedir(d);
	assert_true(tools >= 10);
}

/* Runs after test_install_tree. */
static void test_wrapper_runs_verbs_programs(void **state)
{
	char cmd[1024], *out;
	(void)state;

	if (access("/usr/bin/ibv_devices", X_OK) == 0) {
		snprintf(cmd, sizeof(cmd), "env -u LD_LIBRARY_PATH "
			 "%s/bin/tb-softrdma ibv_devices", prefix);
		assert_int_equal(sh(cmd, &out), 0);
		if (!strstr(out, "softrdma0"))
			fail_msg("ibv_devices through tb-softrdma: %s", out);
		free(out);
	} else {
		print_message("no ibv_devices (ibverbs-utils): checked with "
			      "tb-doctor only\n");
	}
	snprintf(cmd, sizeof(cmd), "env -u LD_LIBRARY_PATH "
		 "%s/bin/tb-softrdma -f tb-install-%d %s/bin/tb-doctor -q",
		 prefix, (int)getpid(), prefix);
	sh(cmd, &out);
	if (!strstr(out, "softrdma0 is softrdma, the software device "
			 "(SOFTRDMA_FABRIC=tb-install-"))
		fail_msg("tb-doctor through tb-softrdma: %s", out);
	free(out);

	/* Without a command: usage, exit 2; a missing library: said so. */
	snprintf(cmd, sizeof(cmd), "%s/bin/tb-softrdma", prefix);
	assert_int_equal(sh(cmd, &out), 2);
	assert_non_null(strstr(out, "usage: tb-softrdma"));
	free(out);
	snprintf(cmd, sizeof(cmd), "mv %s/lib/tickbus/softrdma %s/moved && "
		 "%s/bin/tb-softrdma true", prefix, dir, prefix);
	assert_int_equal(sh(cmd, &out), 1);
	assert_non_null(strstr(out, "no libibverbs.so.1"));
	free(out);
}

/* The systemd unit (config/tb-recoveryd.service) is one systemd accepts:
 * every key known, every value valid, its ExecStart (pointed at the
 * installed binary) executable. */
static void test_systemd_unit_verifies(void **state)
{
	char cmd[1024], *out;
	(void)state;

	if (system("command -v systemd-analyze >/dev/null 2>&1") != 0) {
		print_message("no systemd-analyze: the unit is not verified\n");
		return;
	}
	snprintf(cmd, sizeof(cmd), "sed 's|/usr/local/bin/tb-recoveryd|%s/bin/"
		 "tb-recoveryd|' config/tb-recoveryd.service > "
		 "%s/tb-recoveryd.service && systemd-analyze verify --man=no "
		 "%s/tb-recoveryd.service", prefix, dir, dir);
	if (sh(cmd, &out) != 0 || out[0])
		fail_msg("systemd-analyze verify: %s", out);
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_install_tree),
		cmocka_unit_test(test_wrapper_runs_verbs_programs),
		cmocka_unit_test(test_systemd_unit_verifies),
	};

	return cmocka_run_group_tests_name("install", tests, setup, teardown);
}
