/*
 * scenario.h - the frame of a scenario test: a scratch directory of its
 * own, programs run to their end, a tb-publish waited for, and everything
 * stopped and removed at teardown.  Built on proc.h (starting and reading
 * programs) and expect.h (what is checked of a tb-subscribe).
 */
#ifndef TB_TEST_SCENARIO_H
#define TB_TEST_SCENARIO_H

#include "tests/common/expect.h"
#include "tests/common/proc.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

/* Makes /tmp/<name>.XXXXXX, its path in `dir` (`len` bytes); 0 or -1. */
static inline int scenario_dir_make(char *dir, size_t len, const char *name)
{
	snprintf(dir, len, "/tmp/%s.XXXXXX", name);
	return mkdtemp(dir) ? 0 : -1;
}

/* A teardown: kills what the test started and left running, unlinks
 * `ring` (NULL: none) and removes `dir` with all in it.  0, or -1 when
 * the directory could not be removed. */
static inline int scenario_cleanup(const char *dir, const char *ring)
{
	char cmd[256];

	proc_kill_all();
	if (ring)
		unlink(ring);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* Runs argv[0] (from the build) with argv to its end, killed after `ms`,
 * with its output in the file `out`.  Returns its exit status as
 * proc_wait does, and its output in *text (malloc'd). */
static inline int scenario_run(const char *out, char *const argv[], uint64_t ms,
			       char **text)
{
	proc_t p; /* proc_wait takes it off proc.h's list */
	int rc;

	assert_int_equal(proc_start(&p, out, argv), 0);
	rc = proc_wait(&p, ms);
	*text = proc_output(&p);
	return rc;
}

/* scenario_run of `prog` followed by `args` (NULL-terminated, at most
 * 38). */
static inline int scenario_run_tool(const char *prog, const char *out,
				    char *const args[], uint64_t ms, char **text)
{
	char *argv[40];
	int i = 0;

	argv[i++] = (char *)prog;
	for (; args[i - 1] && i < 39; i++)
		argv[i] = args[i - 1];
	argv[i] = NULL;
	return scenario_run(out, argv, ms, text);
}

/* Starts tb-subscribe as `name`, its output in dir/name.out:
 *   tb-subscribe STREAM... --count COUNT --name NAME --timeout-ms MS EXTRA...
 * where `stream` (NULL-terminated) names the stream ("--shm", path or
 * "-c", file, "-s", stream) and `extra` (NULL-terminated; NULL: none)
 * adds what the test needs.  At most 32 arguments in all. */
static inline void scenario_start_sub(proc_t *p, const char *dir,
				      const char *name, char *const stream[],
				      const char *count, const char *timeout_ms,
				      char *const extra[])
{
	char out[256], *argv[33];
	int i = 0;

	snprintf(out, sizeof(out), "%s/%s.out", dir, name);
	argv[i++] = "tb-subscribe";
	for (int k = 0; stream[k] && i < 24; k++)
		argv[i++] = stream[k];
	argv[i++] = "--count";
	argv[i++] = (char *)count;
	argv[i++] = "--name";
	argv[i++] = (char *)name;
	argv[i++] = "--timeout-ms";
	argv[i++] = (char *)timeout_ms;
	for (int k = 0; extra && extra[k] && i < 32; k++)
		argv[i++] = extra[k];
	argv[i] = NULL;
	assert_int_equal(proc_start(p, out, argv), 0);
}

/* Runs `prog` with `args` (as scenario_run_tool) and fails unless it
 * exits with `status` having printed `msg`. */
static inline void scenario_expect_tool(const char *prog, const char *out,
					char *const args[], uint64_t ms,
					int status, const char *msg)
{
	char *text;

	assert_int_equal(scenario_run_tool(prog, out, args, ms, &text), status);
	if (!strstr(text, msg))
		fail_msg("expected '%s' in: %s", msg, text);
	free(text);
}

/* Waits up to `ms` for tb-publish `pub` to exit 0, having published `n`
 * (0: any number); prints its summary and returns its checksum. */
static inline uint64_t scenario_finish_pub(proc_t *pub, uint64_t n, uint64_t ms)
{
	uint64_t checksum;
	char *out;

	assert_int_equal(proc_wait(pub, ms), 0);
	out = proc_output(pub);
	print_message("%s", out);
	if (n)
		assert_int_equal(proc_field_u64(out, "published"), n);
	checksum = proc_field_u64(out, "checksum");
	free(out);
	return checksum;
}

#endif
