/*
 * udp multicast scenarios with the real binaries, each ending with proof of
 * what was delivered:
 *
 *  - one tb-publish and three tb-subscribe on loopback, paced: each
 *    delivers exactly 1..N in order with the publisher's checksum;
 *  - the same with datagrams lost on two of the subscribers (the udp loss
 *    interposer, tests/common/udp_loss.h, preloaded into them, each with a
 *    seed of its own): every range each one reports lost is exactly what
 *    its drop log says it dropped
 *    (adjacent drops merge into one range), nothing is delivered twice,
 *    and the third, undisturbed, still gets everything;
 *  - a publisher and a subscriber in two network namespaces joined by a
 *    veth pair that the test creates and removes (skipped, saying why,
 *    where the kernel refuses).
 *
 * UDP on loopback drops when a receiver falls a socket buffer behind, so
 * the publisher is paced and SO_RCVBUF sized for seconds of slack: this
 * test is about correctness, not speed (that is `make bench`).  Each run
 * takes its group and port from its pid so parallel runs never meet.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/common/scenario.h"
#include "tests/common/udp_loss.h"

#include <inttypes.h>

static char dir[128];
static char group[32];
static unsigned port;
static char ns_a[32], ns_b[32], veth_a[16], veth_b[16];
static int ns_made;

static int setup(void **state)
{
	unsigned p = (unsigned)getpid();

	(void)state;
	if (scenario_dir_make(dir, sizeof(dir), "tb-udp-scenario") != 0)
		return -1;
	snprintf(group, sizeof(group), "239.194.%u.%u", (p >> 8) & 0xff,
		 (p & 0xff) | 1);
	port = 20000 + p % 12000; /* below the ephemeral range */
	return 0;
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd);
}

static int teardown(void **state)
{
	(void)state;
	proc_kill_all();
	udp_loss_env_clear(); /* a failed test returns before it does */
	if (ns_made) {
		sh("ip netns del %s 2>/dev/null", ns_a);
		sh("ip netns del %s 2>/dev/null", ns_b);
		/* A veth left in this namespace by a failed move. */
		sh("ip link del %s 2>/dev/null", veth_a);
		ns_made = 0;
	}
	return scenario_cleanup(dir, NULL);
}

/* Writes a one-stream udp config to dir/name; returns its path. */
static const char *write_config_rcvbuf(const char *name, const char *iface,
				       int loopback, const char *rcvbuf)
{
	static char path[4][256];
	static int next;
	char *p = path[next++ & 3];
	FILE *f;

	snprintf(p, 256, "%s/%s", dir, name);
	f = fopen(p, "w");
	assert_non_null(f);
	fprintf(f, "[stream scen]\nid = 41\ntransport = udp\n"
		"group = %s:%u\ninterface = %s\nttl = 1\nloopback = %s\n"
		"rcvbuf = %s\nring_size = 4M\nheartbeat_ms = 50\n"
		"liveness_timeout_ms = 5000\n", group, port, iface,
		loopback ? "yes" : "no", rcvbuf);
	fclose(f);
	return p;
}

static const char *write_config(const char *name, const char *iface,
				int loopback)
{
	return write_config_rcvbuf(name, iface, loopback, "4M");
}

static void start_sub(proc_t *p, const char *conf, const char *name,
		      const char *count)
{
	char losslog[256];
	char *where[] = {"-c", (char *)conf, "-s", "scen", NULL};
	char *extra[] = {"--loss-log", losslog, NULL};

	snprintf(losslog, sizeof(losslog), "%s/%s.loss", dir, name);
	scenario_start_sub(p, dir, name, where, count, "120000", extra);
}

static void start_pub(proc_t *p, const char *conf, const char *count,
		      const char *rate)
{
	char out[256];
	char *argv[] = {"tb-publish", "-c", (char *)conf, "-s", "scen",
			"--count", (char *)count, "--rate", (char *)rate,
			"--start-delay-ms", "1000", NULL};

	snprintf(out, sizeof(out), "%s/pub.out", dir);
	assert_int_equal(proc_start(p, out, argv), 0);
}

static void paced_three_subscribers_get_every_message(void **state)
{
	const char *conf = write_config("udp.ini", "127.0.0.1", 1);
	proc_t pub, sub[3];
	char name[16];
	uint64_t checksum;

	(void)state;
	for (int i = 0; i < 3; i++) {
		snprintf(name, sizeof(name), "sub%d", i);
		start_sub(&sub[i], conf, name, "100000");
	}
	/* 25,000 a second, 4 s; a 4 MiB buffer holds over 100 ms of it. */
	start_pub(&pub, conf, "100000", "25000");
	checksum = scenario_finish_pub(&pub, 100000, 120000);
	for (int i = 0; i < 3; i++)
		free(expect_sub_complete(&sub[i], 100000, checksum, 120000));
}

/* Unpaced into a small socket buffer and a slow reader: the kernel drops
 * datagrams, and every one of them must come back as a reported gap --
 * each sequence delivered once or reported lost, in order, the tail
 * included (heartbeats name it while the publisher lingers). */
static void flooded_subscriber_reports_every_kernel_drop(void **state)
{
	const char *conf = write_config_rcvbuf("flood.ini", "127.0.0.1", 1, "64K");
	char out[256], *pout, *sout;
	char *pargv[] = {"tb-publish", "-c", (char *)conf, "-s", "scen",
			 "--count", "100000", "--rate", "0", "--start-delay-ms",
			 "1000", "--linger-ms", "1000", NULL};
	char *sargv[] = {"tb-subscribe", "-c", (char *)conf, "-s", "scen",
			 "--count", "100000", "--name", "slow", "--slow-ns",
			 "20000", "--timeout-ms", "120000", NULL};
	proc_t pub, sub;
	uint64_t lost;

	(void)state;
	snprintf(out, sizeof(out), "%s/slow.out", dir);
	assert_int_equal(proc_start(&sub, out, sargv), 0);
	snprintf(out, sizeof(out), "%s/pub.out", dir);
	assert_int_equal(proc_start(&pub, out, pargv), 0);
	assert_int_equal(proc_wait(&pub, 120000), 0);
	assert_int_equal(proc_wait(&sub, 120000), 0);
	pout = proc_output(&pub);
	sout = proc_output(&sub);
	print_message("%s%s", pout, sout);
	lost = proc_field_u64(sout, "lost");
	/* 20 us a message against an unpaced publisher: drops are certain. */
	assert_true(lost > 0);
	assert_int_equal(proc_field_u64(sout, "first"), 1);
	assert_int_equal(proc_field_u64(sout, "last"), 100000);
	assert_int_equal(proc_field_u64(sout, "delivered") + lost, 100000);
	assert_int_equal(proc_field_u64(sout, "order_errors"), 0);
	assert_int_equal(proc_field_u64(sout, "bad_payload"), 0);
	free(pout);
	free(sout);
}

typedef struct range {
	uint64_t first, last;
} range_t;

static int by_first(const void *a, const void *b)
{
	const range_t *x = a, *y = b;

	return x->first < y->first ? -1 : x->first > y->first;
}

/* Reads "drop FIRST COUNT" lines into merged, sorted ranges. */
static int read_drops(const char *path, range_t *r, int max)
{
	FILE *f = fopen(path, "r");
	unsigned long long first, count;
	int n = 0, m = 0;

	assert_non_null(f);
	while (fscanf(f, "drop %llu %llu\n", &first, &count) == 2) {
		assert_true(n < max);
		assert_true(count > 0);
		r[n].first = first;
		r[n].last = first + count - 1;
		n++;
	}
	assert_true(feof(f));
	fclose(f);
	qsort(r, (size_t)n, sizeof(*r), by_first);
	for (int i = 0; i < n; i++) {
		if (m && r[i].first == r[m - 1].last + 1)
			r[m - 1].last = r[i].last;
		else
			r[m++] = r[i];
	}
	return m;
}

/* Reads "FIRST LAST" lines, in the order reported, merging a range that
 * starts where the last one ended: a heartbeat can name part of a run of
 * drops before the rest is seen (both halves exact, reported apart). */
static int read_losses(const char *path, range_t *r, int max)
{
	FILE *f = fopen(path, "r");
	unsigned long long a, b;
	int n = 0;

	assert_non_null(f);
	while (fscanf(f, "%llu %llu\n", &a, &b) == 2) {
		assert_true(n < max);
		assert_true(a <= b);
		if (n && a == r[n - 1].last + 1) {
			r[n - 1].last = b;
			continue;
		}
		r[n].first = a;
		r[n].last = b;
		n++;
	}
	assert_true(feof(f));
	fclose(f);
	return n;
}

#define MAX_RANGES 20000

static void reported_gaps_equal_the_drop_log(void **state)
{
	const char *conf = write_config("udp.ini", "127.0.0.1", 1);
	static range_t drops[MAX_RANGES], losses[MAX_RANGES];
	char path[256], seed[16], *out;
	proc_t pub, sub[3];
	uint64_t n = 50000, checksum;

	(void)state;
	for (int i = 0; i < 2; i++) {
		char name[16];

		snprintf(path, sizeof(path), "%s/drop%d.log", dir, i);
		/* Seed 196 drops the very first datagram, 12 does not. */
		snprintf(seed, sizeof(seed), "%d", i == 0 ? 196 : 12);
		snprintf(name, sizeof(name), "lossy%d", i);
		udp_loss_env("0.01", seed, path);
		start_sub(&sub[i], conf, name, "50000");
	}
	udp_loss_env_clear();
	start_sub(&sub[2], conf, "clean", "50000");
	start_pub(&pub, conf, "50000", "25000");
	checksum = scenario_finish_pub(&pub, 0, 120000);

	for (int i = 0; i < 2; i++) {
		uint64_t start, lost = 0;
		int nd, nl, d = 0;

		assert_int_equal(proc_wait(&sub[i], 120000), 0);
		out = proc_output(&sub[i]);
		print_message("%s", out);
		snprintf(path, sizeof(path), "%s/drop%d.log", dir, i);
		nd = read_drops(path, drops, MAX_RANGES);
		snprintf(path, sizeof(path), "%s/lossy%d.loss", dir, i);
		nl = read_losses(path, losses, MAX_RANGES);
		/* About 1% of 50,000 single-message datagrams. */
		assert_true(nd > 100);
		/* The stream starts for this subscriber at the first thing
		 * it heard of: a message, or a gap a heartbeat or datagram
		 * named.  Drops before that are a late join, not a gap:
		 * exactly [1, start - 1]. */
		start = proc_field_u64(out, "first");
		if (nl > 0 && (start == 0 || losses[0].first < start))
			start = losses[0].first;
		if (start > 1) {
			assert_int_equal(drops[0].first, 1);
			assert_int_equal(drops[0].last, start - 1);
			d = 1;
		}
		assert_int_equal(nl, nd - d);
		for (int k = 0; k < nl; k++, d++) {
			assert_int_equal(losses[k].first, drops[d].first);
			assert_int_equal(losses[k].last, drops[d].last);
			lost += losses[k].last - losses[k].first + 1;
		}
		assert_int_equal(proc_field_u64(out, "lost"), lost);
		assert_int_equal(proc_field_u64(out, "delivered") + lost + start - 1, n);
		assert_int_equal(proc_field_u64(out, "last"), n);
		assert_int_equal(proc_field_u64(out, "order_errors"), 0);
		assert_int_equal(proc_field_u64(out, "bad_payload"), 0);
		free(out);
	}
	free(expect_sub_complete(&sub[2], n, checksum, 120000));
}

/* Starts `prog` (from the build) inside network namespace `ns`. */
static void start_in_ns(proc_t *p, const char *ns, const char *out,
			char *const args[])
{
	posix_spawn_file_actions_t fa;
	char prog[512];
	char *argv[24];
	int i = 0, rc;

	snprintf(prog, sizeof(prog), "%s/%s", proc_bin_dir(), args[0]);
	argv[i++] = "ip";
	argv[i++] = "netns";
	argv[i++] = "exec";
	argv[i++] = (char *)ns;
	argv[i++] = prog;
	for (int k = 1; args[k] && i < 23; k++)
		argv[i++] = args[k];
	argv[i] = NULL;
	memset(p, 0, sizeof(*p));
	snprintf(p->out, sizeof(p->out), "%s", out);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	posix_spawn_file_actions_adddup2(&fa, 1, 2);
	rc = posix_spawnp(&p->pid, "ip", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	assert_int_equal(rc, 0);
	/* `ip netns exec` execs the program: this pid is it. */
	for (int k = 0; k < PROC_MAX; k++)
		if (proc_live[k] == 0) {
			proc_live[k] = p->pid;
			break;
		}
}

static void start_sub_in_ns(proc_t *p, const char *ns, const char *conf,
			    const char *name, const char *count,
			    const char *timeout_ms)
{
	char out[256], losslog[256];
	char *args[] = {"tb-subscribe", "-c", (char *)conf, "-s", "scen",
			"--count", (char *)count, "--name", (char *)name,
			"--timeout-ms", (char *)timeout_ms, "--loss-log", losslog,
			NULL};

	snprintf(losslog, sizeof(losslog), "%s/%s.loss", dir, name);
	snprintf(out, sizeof(out), "%s/%s.out", dir, name);
	start_in_ns(p, ns, out, args);
}

static void across_two_namespaces_over_veth(void **state)
{
	unsigned id = (unsigned)getpid() % 100000, net = 1 + (unsigned)getpid() % 250;
	char addr_a[32], out[256];
	uint64_t checksum;
	const char *conf_pub, *conf_sub, *conf_near;
	proc_t pub, sub;

	(void)state;
	snprintf(ns_a, sizeof(ns_a), "tbudpA%u", id);
	snprintf(ns_b, sizeof(ns_b), "tbudpB%u", id);
	snprintf(veth_a, sizeof(veth_a), "tbva%u", id);
	snprintf(veth_b, sizeof(veth_b), "tbvb%u", id);
	snprintf(addr_a, sizeof(addr_a), "10.213.%u.1", net);
	if (sh("ip netns add %s 2>/dev/null", ns_a) != 0) {
		print_message("skip: cannot create a network namespace (needs "
			      "CAP_NET_ADMIN and iproute2)\n");
		skip();
	}
	ns_made = 1;
	if (sh("ip netns add %s", ns_b) != 0 ||
	    sh("ip link add %s type veth peer name %s 2>/dev/null", veth_a,
	       veth_b) != 0) {
		print_message("skip: the kernel refused a second namespace or a "
			      "veth pair\n");
		skip();
	}
	assert_int_equal(sh("ip link set %s netns %s", veth_a, ns_a), 0);
	assert_int_equal(sh("ip link set %s netns %s", veth_b, ns_b), 0);
	assert_int_equal(sh("ip -n %s addr add %s/24 dev %s", ns_a, addr_a, veth_a), 0);
	assert_int_equal(sh("ip -n %s addr add 10.213.%u.2/24 dev %s", ns_b, net,
			    veth_b), 0);
	assert_int_equal(sh("ip -n %s link set lo up && ip -n %s link set %s up",
			    ns_a, ns_a, veth_a), 0);
	assert_int_equal(sh("ip -n %s link set lo up && ip -n %s link set %s up",
			    ns_b, ns_b, veth_b), 0);

	/* The publisher picks its side by address, the subscribers by netdev
	 * name: both ways of choosing the interface cross a real link.  With
	 * loopback off, a subscriber beside the publisher hears nothing
	 * (IP_MULTICAST_LOOP; on lo it cannot be seen, lo loops everything);
	 * with it on, it hears everything. */
	for (int loop = 0; loop < 2; loop++) {
		const char *count = loop ? "2000" : "20000";
		proc_t near;
		char *nout;

		conf_pub = write_config("pub.ini", addr_a, loop);
		conf_sub = write_config("sub.ini", veth_b, 1);
		conf_near = write_config("near.ini", veth_a, 1);
		start_sub_in_ns(&sub, ns_b, conf_sub, "far", count, "120000");
		start_sub_in_ns(&near, ns_a, conf_near, "near", count,
				loop ? "120000" : "6000");
		{
			char *args[] = {"tb-publish", "-c", (char *)conf_pub, "-s",
					"scen", "--count", (char *)count, "--rate",
					"20000", "--start-delay-ms", "1000", NULL};

			snprintf(out, sizeof(out), "%s/pub.out", dir);
			start_in_ns(&pub, ns_a, out, args);
		}
		checksum = scenario_finish_pub(&pub, strtoull(count, NULL, 10),
					       120000);
		free(expect_sub_complete(&sub, strtoull(count, NULL, 10),
					 checksum, 120000));
		if (loop) {
			free(expect_sub_complete(&near, 2000, checksum, 120000));
		} else {
			/* Exit 4: timed out, having heard nothing. */
			assert_int_equal(proc_wait(&near, 120000), 4);
			nout = proc_output(&near);
			print_message("%s", nout);
			assert_int_equal(proc_field_u64(nout, "delivered"), 0);
			free(nout);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(paced_three_subscribers_get_every_message, setup, teardown),
		cmocka_unit_test_setup_teardown(reported_gaps_equal_the_drop_log, setup, teardown),
		cmocka_unit_test_setup_teardown(flooded_subscriber_reports_every_kernel_drop, setup, teardown),
		cmocka_unit_test_setup_teardown(across_two_namespaces_over_veth, setup, teardown),
	};
	return cmocka_run_group_tests_name("udp_scenario", tests, NULL, NULL);
}
