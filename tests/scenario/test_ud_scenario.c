/*
 * ud scenarios on softrdma with the real binaries: one tb-publish and three
 * tb-subscribe processes in one multicast group.
 *
 *  - no injected loss: each subscriber delivers exactly 1..N in order with
 *    the publisher's checksum;
 *  - softrdma drops 1% of the datagrams, duplicates 1% and reorders 1%,
 *    for each subscriber on its own (SOFTRDMA_UD_*): every subscriber
 *    reports lost ranges that cover exactly what softrdma's log says it
 *    dropped for that subscriber's QP (plus, at most, datagrams it held
 *    back and delivered late, which arrive after their gap was reported),
 *    and delivers nothing twice;
 *  - ports with different MTUs (softrdma: SOFTRDMA_PORT_MTU, per
 *    process): a publisher on 4096 and a subscriber on 1024.  Without a
 *    group mtu the publisher's 1600-byte datagrams never reach that
 *    subscriber (dropped at its port, as a switch or its NIC would); it
 *    says why in words (the heartbeats get through, naming the
 *    publisher's mtu) and reports every message lost.  With mtu = 1024 on
 *    both ends every message arrives.
 *
 * The publisher batches (batch_us) so that a subscriber that loses its core
 * for a while on a shared 2-core machine still has receive buffers posted;
 * a datagram that finds none is logged by softrdma as "norecv" and counted
 * as a drop here, so the check stays exact either way.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/transport/packet.h"
#include "tests/common/scenario.h"

#include <inttypes.h>

#define N 200000u
#define FRAME 96u            /* tb-publish's 64-byte payload + header */
#define PKT_HDR TB_PACKET_HDR_LEN
#define GRH 40u

static char dir[128];
static char ini[192];
/* At file scope: proc.h keeps pointers to them until teardown. */
static proc_t pub, sub[3], bad;

static int setup(void **state)
{
	FILE *f;

	(void)state;
	if (scenario_dir_make(dir, sizeof(dir), "tb-ud-scenario") != 0)
		return -1;
	snprintf(ini, sizeof(ini), "%s/ud.ini", dir);
	f = fopen(ini, "w");
	if (!f)
		return -1;
	fprintf(f, "[stream ud-scenario]\nid = 61\ntransport = ud\n"
		"group = 239.192.61.1:5061\nbatch_us = 500\n"
		"heartbeat_ms = 50\nliveness_timeout_ms = 5000\n"
		"ring_size = 16M\ntoken = ud-scenario-token\n");
	return fclose(f);
}

static int teardown(void **state)
{
	(void)state;
	return scenario_cleanup(dir, NULL);
}

static void start_sub(proc_t *p, int i)
{
	char out[256], name[16], loss[256];
	char *argv[] = {"tb-subscribe", "-c", ini, "-s", "ud-scenario",
			"--count", "200000", "--name", name, "--timeout-ms",
			"120000", "--loss-log", loss, NULL};

	snprintf(name, sizeof(name), "sub%d", i);
	snprintf(out, sizeof(out), "%s/%s.out", dir, name);
	snprintf(loss, sizeof(loss), "%s/%s.loss", dir, name);
	assert_int_equal(proc_start(p, out, argv), 0);
}

/* The subscriber's QP number, from its "subscriber QP N joined" line, once
 * it has joined (the publisher must not start before that). */
static uint32_t wait_joined(proc_t *p)
{
	uint64_t until = proc_now_ms() + 30000;

	while (proc_now_ms() < until) {
		char *out = proc_output(p);
		const char *at = strstr(out, "subscriber QP ");
		unsigned qpn;

		if (at && sscanf(at, "subscriber QP %u joined", &qpn) == 1) {
			free(out);
			return qpn;
		}
		free(out);
		usleep(20000);
	}
	fail_msg("subscriber %s never joined", p->out);
	return 0;
}

static void start_pub(proc_t *p)
{
	char out[256];
	char *argv[] = {"tb-publish", "-c", ini, "-s", "ud-scenario", "--count",
			"200000", "--rate", "50000", "--start-delay-ms", "200",
			NULL};

	snprintf(out, sizeof(out), "%s/pub.out", dir);
	assert_int_equal(proc_start(p, out, argv), 0);
}

static void run(uint32_t qpn[3])
{
	for (int i = 0; i < 3; i++)
		start_sub(&sub[i], i);
	for (int i = 0; i < 3; i++)
		qpn[i] = wait_joined(&sub[i]);
	start_pub(&pub);
	assert_int_equal(proc_wait(&pub, 120000), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(proc_wait(&sub[i], 120000), 0);
}

static void no_loss_every_subscriber_gets_1_to_n(void **state)
{
	uint32_t qpn[3];
	char *pout, *out;
	uint64_t checksum;

	(void)state;
	unsetenv("SOFTRDMA_UD_DROP");
	unsetenv("SOFTRDMA_UD_DUP");
	unsetenv("SOFTRDMA_UD_REORDER");
	unsetenv("SOFTRDMA_UD_LOG");
	run(qpn);
	pout = proc_output(&pub);
	print_message("%s", pout);
	assert_int_equal(proc_field_u64(pout, "published"), N);
	checksum = proc_field_u64(pout, "checksum");
	for (int i = 0; i < 3; i++) {
		out = proc_output(&sub[i]);
		expect_complete(out, N, checksum);
		free(out);
	}
	free(pout);
}

/* Marks [first, first + count) in `set` (1-based sequences up to N). */
static void mark(uint8_t *set, uint64_t first, uint64_t count)
{
	for (uint64_t s = first; s < first + count && s <= N; s++)
		if (s >= 1)
			set[s] = 1;
}

static void loss_reported_exactly(void **state)
{
	uint32_t qpn[3];
	char log[256], path[256], what[16];
	uint8_t *dropped[3], *late[3], *lost[3];
	unsigned q, imm, len;
	uint64_t a, b, events[3][4] = {{0}};
	FILE *f;

	(void)state;
	snprintf(log, sizeof(log), "%s/softrdma-ud.log", dir);
	setenv("SOFTRDMA_UD_DROP", "0.01", 1);
	setenv("SOFTRDMA_UD_DUP", "0.01", 1);
	setenv("SOFTRDMA_UD_REORDER", "0.01", 1);
	setenv("SOFTRDMA_SEED", "20261203", 1);
	setenv("SOFTRDMA_UD_LOG", log, 1);
	run(qpn);
	unsetenv("SOFTRDMA_UD_DROP");
	unsetenv("SOFTRDMA_UD_DUP");
	unsetenv("SOFTRDMA_UD_REORDER");
	unsetenv("SOFTRDMA_UD_LOG");

	for (int i = 0; i < 3; i++) {
		dropped[i] = calloc(N + 1, 1);
		late[i] = calloc(N + 1, 1);
		lost[i] = calloc(N + 1, 1);
		assert_true(dropped[i] && late[i] && lost[i]);
	}
	/* What softrdma did to each subscriber's QP.  Data datagrams only:
	 * heartbeats and ENDs are a bare header. */
	f = fopen(log, "r");
	assert_non_null(f);
	while (fscanf(f, "%15s %u %u %u", what, &q, &imm, &len) == 4) {
		int i = q == qpn[0] ? 0 : q == qpn[1] ? 1 : q == qpn[2] ? 2 : -1;
		uint64_t count;

		assert_true(i >= 0);
		assert_true(len >= GRH + PKT_HDR);
		count = (len - GRH - PKT_HDR) / FRAME;
		assert_int_equal((len - GRH - PKT_HDR) % FRAME, 0);
		if (!strcmp(what, "drop") || !strcmp(what, "norecv")) {
			mark(dropped[i], imm, count);
			events[i][what[0] == 'd' ? 0 : 3]++;
		} else if (!strcmp(what, "reorder")) {
			mark(late[i], imm, count);
			events[i][2]++;
		} else {
			assert_string_equal(what, "dup");
			events[i][1]++;
		}
	}
	fclose(f);

	for (int i = 0; i < 3; i++) {
		char *out = proc_output(&sub[i]);
		uint64_t n_dropped = 0, n_lost = 0;

		print_message("%s", out);
		print_message("sub%d (QP %u): softrdma dropped %" PRIu64 ", duplicated %"
			      PRIu64 ", reordered %" PRIu64 ", no receive %" PRIu64
			      " datagrams\n", i, qpn[i], events[i][0], events[i][1],
			      events[i][2], events[i][3]);
		/* the faults really happened, to this subscriber */
		assert_true(events[i][0] > 0 && events[i][1] > 0 && events[i][2] > 0);
		snprintf(path, sizeof(path), "%s/sub%d.loss", dir, i);
		f = fopen(path, "r");
		assert_non_null(f);
		while (fscanf(f, "%" SCNu64 " %" SCNu64, &a, &b) == 2) {
			assert_true(a >= 1 && a <= b && b <= N);
			for (uint64_t s = a; s <= b; s++) {
				assert_int_equal(lost[i][s], 0); /* reported once */
				lost[i][s] = 1;
			}
		}
		fclose(f);
		for (uint64_t s = 1; s <= N; s++) {
			n_dropped += dropped[i][s];
			n_lost += lost[i][s];
			/* every dropped sequence is reported lost ... */
			if (dropped[i][s] && !lost[i][s])
				fail_msg("sub%d: %" PRIu64 " dropped, not reported", i, s);
			/* ... and nothing is reported that was not dropped or
			 * held back and delivered after its gap */
			if (lost[i][s] && !dropped[i][s] && !late[i][s])
				fail_msg("sub%d: %" PRIu64 " reported lost, never dropped",
					 i, s);
		}
		assert_true(n_dropped > 0);
		/* in order, nothing twice, every sequence delivered or lost */
		assert_int_equal(proc_field_u64(out, "order_errors"), 0);
		assert_int_equal(proc_field_u64(out, "bad_payload"), 0);
		assert_int_equal(proc_field_u64(out, "lost"), n_lost);
		assert_int_equal(proc_field_u64(out, "delivered") + n_lost, N);
		assert_int_equal(proc_field_u64(out, "last"), N);
		free(out);
	}
	/* each subscriber drew its own losses */
	assert_memory_not_equal(dropped[0], dropped[1], N + 1);
	assert_memory_not_equal(dropped[1], dropped[2], N + 1);
	for (int i = 0; i < 3; i++) {
		free(dropped[i]);
		free(late[i]);
		free(lost[i]);
	}
}

/* A subscriber on a port of `port_mtu` bytes (its own process's
 * softrdma port), stream `stream` of `conf`, `count` messages; and a
 * publisher of `count` messages of `size` bytes on the default 4096 port.
 * Returns the subscriber's output (malloc'd). */
static char *mixed_mtu_run(const char *conf, const char *stream, const char *port_mtu,
			   const char *count, const char *size)
{
	char out[256], *text;
	char *sub_argv[] = {"tb-subscribe", "-c", (char *)conf, "-s", (char *)stream,
			    "--count", (char *)count, "--name", "small-port",
			    "--timeout-ms", "60000", NULL};
	char *pub_argv[] = {"tb-publish", "-c", (char *)conf, "-s", (char *)stream,
			    "--count", (char *)count, "--size", (char *)size,
			    "--rate", "2000", "--start-delay-ms", "300",
			    "--linger-ms", "300", NULL};
	const char *quiet = getenv("TICKBUS_QUIET");
	char *saved = quiet ? strdup(quiet) : NULL;

	/* Its own port MTU, and its warnings printed. */
	setenv("SOFTRDMA_PORT_MTU", port_mtu, 1);
	unsetenv("TICKBUS_QUIET");
	snprintf(out, sizeof(out), "%s/%s-sub.out", dir, stream);
	assert_int_equal(proc_start(&sub[0], out, sub_argv), 0);
	unsetenv("SOFTRDMA_PORT_MTU");
	if (saved) {
		setenv("TICKBUS_QUIET", saved, 1);
		free(saved);
	}
	wait_joined(&sub[0]);
	snprintf(out, sizeof(out), "%s/%s-pub.out", dir, stream);
	assert_int_equal(proc_start(&pub, out, pub_argv), 0);
	assert_int_equal(proc_wait(&pub, 60000), 0);
	assert_int_equal(proc_wait(&sub[0], 60000), 0);
	text = proc_output(&sub[0]);
	print_message("%s", text);
	return text;
}

static void ports_with_different_mtus(void **state)
{
	char conf[256], *text;
	FILE *f;

	(void)state;
	snprintf(conf, sizeof(conf), "%s/mixed.ini", dir);
	f = fopen(conf, "w");
	assert_non_null(f);
	fprintf(f, "[stream port-mtu]\nid = 63\ntransport = ud\n"
		"group = 239.192.61.3:5063\nheartbeat_ms = 50\n"
		"liveness_timeout_ms = 5000\ntoken = mixed-mtu-token\n\n"
		"[stream group-mtu]\nid = 64\ntransport = ud\n"
		"group = 239.192.61.4:5064\nheartbeat_ms = 50\n"
		"liveness_timeout_ms = 5000\ntoken = mixed-mtu-token\n"
		"mtu = 1024\n");
	assert_int_equal(fclose(f), 0);

	/* No group mtu: nothing of 1600 bytes gets through; said, and lost. */
	text = mixed_mtu_run(conf, "port-mtu", "1024", "300", "1500");
	assert_non_null(strstr(text, "the publisher sends datagrams of up to "
			       "4096 bytes, this subscriber receives at most 1024"));
	assert_int_equal(proc_field_u64(text, "delivered"), 0);
	assert_int_equal(proc_field_u64(text, "lost"), 300);
	free(text);

	/* The group's mtu on both ends: everything arrives. */
	text = mixed_mtu_run(conf, "group-mtu", "1024", "300", "900");
	assert_null(strstr(text, "the publisher sends datagrams of up to"));
	assert_int_equal(proc_field_u64(text, "delivered"), 300);
	assert_int_equal(proc_field_u64(text, "lost"), 0);
	free(text);
}

/* Bad input to the tools: a clear message and exit status 1. */
static void bad_input_is_refused_clearly(void **state)
{
	proc_t *p = &bad;
	char out[256], bad_ini[256], *text;
	char *loss_argv[] = {"tb-subscribe", "-c", ini, "-s", "ud-scenario",
			     "--loss-log", "/nonexistent-dir/x", NULL};
	char *mtu_argv[] = {"tb-subscribe", "-c", bad_ini, "-s", "big", NULL};
	FILE *f;

	(void)state;
	snprintf(out, sizeof(out), "%s/bad1.out", dir);
	assert_int_equal(proc_start(p, out, loss_argv), 0);
	assert_int_equal(proc_wait(p, 20000), 1);
	text = proc_output(p);
	assert_non_null(strstr(text, "cannot write /nonexistent-dir/x"));
	free(text);

	snprintf(bad_ini, sizeof(bad_ini), "%s/big.ini", dir);
	f = fopen(bad_ini, "w");
	assert_non_null(f);
	fprintf(f, "[stream big]\nid = 62\ntransport = ud\n"
		"group = 239.192.61.2:5062\nmtu = 9000\n");
	assert_int_equal(fclose(f), 0);
	snprintf(out, sizeof(out), "%s/bad2.out", dir);
	assert_int_equal(proc_start(p, out, mtu_argv), 0);
	assert_int_equal(proc_wait(p, 20000), 1);
	text = proc_output(p);
	print_message("%s", text);
	assert_non_null(strstr(text, "mtu 9000 exceeds the path MTU 4096"));
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(no_loss_every_subscriber_gets_1_to_n,
						setup, teardown),
		cmocka_unit_test_setup_teardown(loss_reported_exactly, setup, teardown),
		cmocka_unit_test_setup_teardown(ports_with_different_mtus, setup,
						teardown),
		cmocka_unit_test_setup_teardown(bad_input_is_refused_clearly, setup,
						teardown),
	};

	if (!getenv("SOFTRDMA_FABRIC")) {
		char name[64];

		snprintf(name, sizeof(name), "t-ud-scenario-%d", (int)getpid());
		setenv("SOFTRDMA_FABRIC", name, 1);
	}
	setenv("TICKBUS_VERBOSE", "1", 1); /* subscribers print their QP */
	return cmocka_run_group_tests_name("ud_scenario", tests, NULL, NULL);
}
