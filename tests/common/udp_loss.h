/*
 * udp_loss.h - loss on udp multicast, injected from outside the transport.
 *
 * The udp transport has no test hook: a test that wants received datagrams
 * lost wraps the socket calls instead (Aeron's loss interceptor, in the
 * spirit of LD_PRELOAD).  tests/common/udp_loss.c defines recvmmsg,
 * recvmsg, recvfrom and recv; each calls the C library's and then, when
 * armed, loses each tickbus data datagram (packet.h: right magic, flags 0,
 * count > 0) received on a socket bound to a multicast group with
 * probability UDP_LOSS_ENV_RATE, drawn from splitmix64 seeded by
 * UDP_LOSS_ENV_SEED (default 1): one draw per data datagram, in the order
 * received, so a seed names the same losses run after run.  Heartbeats,
 * ENDs and every other socket pass untouched.  With UDP_LOSS_ENV_LOG set,
 * each loss appends "drop <first_seq> <count>\n" to that file, so a test
 * can hold the gaps a subscriber reports against what was lost.
 *
 * Two ways in:
 *  - a program started by a scenario test: $(BUILD)/tests/libtb_udp_loss.so
 *    in LD_PRELOAD, armed from the environment when it loads (a bad value
 *    ends the program with exit status 2 and a message naming the
 *    variable).  udp_loss_env() sets all of that for the programs started
 *    next, udp_loss_env_clear() takes it away again.
 *  - a unit test linked with udp_loss.o (the Makefile does this for
 *    test_transport_udp): the wrappers then stand in for the C library's
 *    calls in the whole binary, off until udp_loss_arm() reads the
 *    environment.
 *
 * Sanitizers: ASan insists on being the first library a process loads,
 * and LD_PRELOAD comes before everything, so under SAN=1 udp_loss_env()
 * puts the ASan runtime this test runs with first in LD_PRELOAD, then the
 * interposer.  The interposer itself is built without sanitizers, so it
 * can be preloaded into any program, instrumented or not.
 */
#ifndef TB_TEST_UDP_LOSS_H
#define TB_TEST_UDP_LOSS_H

#include <limits.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UDP_LOSS_ENV_RATE "TB_UDP_LOSS"      /* probability, 0..1 */
#define UDP_LOSS_ENV_SEED "TB_UDP_LOSS_SEED" /* unsigned, default 1 */
#define UDP_LOSS_ENV_LOG "TB_UDP_LOSS_LOG"   /* file for "drop" lines */

/* In udp_loss.c (only for a binary linked with it). */

/* (Re)reads the three variables: 0, armed or (rate unset or empty) off;
 * -1 on a bad value, which leaves it off and says why in
 * udp_loss_error().  Not to be called while another thread receives. */
int udp_loss_arm(void);

/* The message of the last udp_loss_arm that failed. */
const char *udp_loss_error(void);

/* Data datagrams lost since the last udp_loss_arm. */
uint64_t udp_loss_dropped(void);

/* For scenario tests that start programs (header only). */

/* The interposer library: $TB_BUILD/tests/libtb_udp_loss.so ($TB_BUILD is
 * set by tests/run-tests.sh), else build/tests/libtb_udp_loss.so made
 * absolute. */
static inline const char *udp_loss_library(void)
{
	static char path[PATH_MAX];
	const char *b = getenv("TB_BUILD");
	char rel[PATH_MAX];

	snprintf(rel, sizeof(rel), "%s/tests/libtb_udp_loss.so",
		 b && *b ? b : "build");
	if (!realpath(rel, path))
		snprintf(path, sizeof(path), "%s", rel);
	return path;
}

static inline int udp_loss_find_asan(struct dl_phdr_info *info, size_t size, void *out)
{
	(void)size;
	if (info->dlpi_name && strstr(info->dlpi_name, "/libasan.so")) {
		snprintf(out, PATH_MAX, "%s", info->dlpi_name);
		return 1;
	}
	return 0;
}

/* The LD_PRELOAD this process had before udp_loss_env changed it. */
static char udp_loss_saved_preload[2 * PATH_MAX];
static int udp_loss_saved, udp_loss_had_preload;

/* Programs started from now on lose `rate` of their data datagrams (see
 * above), seeded by `seed` (NULL: the default), logging to `log` (NULL:
 * no log).  Until udp_loss_env_clear. */
static inline void udp_loss_env(const char *rate, const char *seed,
				const char *log)
{
	char asan[PATH_MAX] = "", preload[4 * PATH_MAX + 8];
	const char *old = getenv("LD_PRELOAD");

	if (!udp_loss_saved) {
		udp_loss_had_preload = old != NULL;
		snprintf(udp_loss_saved_preload, sizeof(udp_loss_saved_preload),
			 "%s", old ? old : "");
		udp_loss_saved = 1;
	}
	dl_iterate_phdr(udp_loss_find_asan, asan);
	snprintf(preload, sizeof(preload), "%s%s%s%s%s", asan, asan[0] ? " " : "",
		 udp_loss_library(), udp_loss_saved_preload[0] ? " " : "",
		 udp_loss_saved_preload);
	setenv("LD_PRELOAD", preload, 1);
	setenv(UDP_LOSS_ENV_RATE, rate, 1);
	if (seed)
		setenv(UDP_LOSS_ENV_SEED, seed, 1);
	else
		unsetenv(UDP_LOSS_ENV_SEED);
	if (log)
		setenv(UDP_LOSS_ENV_LOG, log, 1);
	else
		unsetenv(UDP_LOSS_ENV_LOG);
}

/* Programs started from now on run as they are: LD_PRELOAD as it was
 * before udp_loss_env, the three variables unset.  Harmless when nothing
 * was set (a teardown calls it after a test that may have failed early). */
static inline void udp_loss_env_clear(void)
{
	unsetenv(UDP_LOSS_ENV_RATE);
	unsetenv(UDP_LOSS_ENV_SEED);
	unsetenv(UDP_LOSS_ENV_LOG);
	if (!udp_loss_saved)
		return;
	if (udp_loss_had_preload)
		setenv("LD_PRELOAD", udp_loss_saved_preload, 1);
	else
		unsetenv("LD_PRELOAD");
	udp_loss_saved = 0;
}

#endif
