/*
 * rc read-back with the real binaries on softrdma: a subscriber that the
 * publisher skips fills the gap itself, with RDMA READ from the
 * publisher's ring, while the frames are still there; when they are not,
 * recovery comes from tb-recoveryd, as it always did.
 *
 *  - lapped while the frames are in the publisher's ring (a 4 MiB ring
 *    holds two seconds of the stream; the subscriber stalls for half a
 *    second, and its 2,048 receives run out after a tenth): it delivers
 *    exactly 1..N in order with the publisher's checksum, the read-back
 *    counted (read_filled) and tb-recoveryd never asked (its served=0,
 *    the subscriber's recovery_requests 0);
 *  - lapped after the publisher's ring has moved on (64 KiB: 34 ms of the
 *    stream, against a stall of half a second): the gaps go up as laps
 *    (read_missed) and tb-recoveryd fills them: exactly 1..N again;
 *  - the memory-registration audit (tb-doctor --audit) while an rc stream
 *    with a reading subscriber runs: every registration of the publisher
 *    and its two subscribers is there, with its one peer, and nothing is
 *    broader than its role (the publisher's ring and its position word
 *    REMOTE_READ, as recovery reads them); and the same of a ud stream
 *    opened in this process (its ring and send slabs with no remote
 *    access, its receive buffers LOCAL_WRITE), its records gone when it
 *    closes.
 *
 * The subscriber of the first two runs in this process, so that its
 * counters (bus/counters.h) are read directly; tb-publish, tb-recoveryd
 * and tb-doctor are the real programs.  run-tests.sh gives this binary
 * its own SOFTRDMA_FABRIC.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/counters.h"
#include "tests/common/scenario.h"
#include "tools/demo_msg.h"
#include <tickbus/tickbus.h>

#include <inttypes.h>
#include <sys/stat.h>
#include <time.h>

#define N 60000
#define TOKEN "read-token"

static char dir[128];
static char ini[192];
static char svc_ini[192]; /* tb-recoveryd's: see write_ini */

static int setup(void **state)
{
	(void)state;
	if (scenario_dir_make(dir, sizeof(dir), "tb-rc-read") != 0)
		return -1;
	snprintf(ini, sizeof(ini), "%s/rc.ini", dir);
	snprintf(svc_ini, sizeof(svc_ini), "%s/rc-service.ini", dir);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unsetenv("TICKBUS_COUNTERS_DIR");
	return scenario_cleanup(dir, NULL);
}

/* Stream "feed" in `path`: rc, lapping, on a ring of `ring`, recovered
 * from tb-recoveryd on `rec_port`, which fills its own holes from the
 * publisher's retention on `ret_port`. */
static void write_ini_at(const char *path, const char *ring, unsigned ctl_port,
			 unsigned rec_port, unsigned ret_port)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fprintf(f, "[stream feed]\nid = 11\ntransport = rc\n"
		"control = 127.0.0.1:%u\ntoken = " TOKEN "\nring_size = %s\n"
		"slow_consumer = lap\nidle = spin-then-yield\nheartbeat_ms = 50\n"
		"liveness_timeout_ms = 3000\nrecovery = 127.0.0.1:%u\n"
		"recovery_timeout_ms = 15000\nretention = 1000000\n"
		"retention_endpoint = 127.0.0.1:%u\n", ctl_port, ring, rec_port,
		ret_port);
	if (getenv("TICKBUS_RDMA_DEVICE") && getenv("TICKBUS_RDMA_DEVICE")[0])
		fprintf(f, "rdma_device = %s\n", getenv("TICKBUS_RDMA_DEVICE"));
	if (getenv("TICKBUS_RDMA_PORT") && getenv("TICKBUS_RDMA_PORT")[0])
		fprintf(f, "rdma_port = %s\n", getenv("TICKBUS_RDMA_PORT"));
	fclose(f);
}

/* The stream for the publisher and the subscribers (ring of `ring`), and
 * for tb-recoveryd, whose receive ring is always 4 MiB (two seconds of
 * the stream).  The publisher's retention is its ring: with 64 KiB, 34 ms
 * of the stream, so a service lapped on a ring that small (a stall of
 * the service, or a burst of the publisher after a stall of its own, on
 * a loaded machine) has a hole that no source holds any more, and the
 * subscriber then rightly gets TB_DATA_LOSS.  What is tested here is the
 * subscriber's fall-back, not the service's luck: the service is sized
 * for the stalls, as a deployment would size it. */
static void write_ini(const char *ring, unsigned ctl_port, unsigned rec_port,
		      unsigned ret_port)
{
	write_ini_at(ini, ring, ctl_port, rec_port, ret_port);
	write_ini_at(svc_ini, "4M", ctl_port, rec_port, ret_port);
}

/* Each start its own store and output: a run tried again does not
 * resume the last one's. */
static void start_recoveryd(proc_t *p, unsigned port)
{
	static int n;
	char out[256], store[256], listen[64];
	char *argv[] = {"tb-recoveryd", "-c", svc_ini, "-s", "feed", "--dir", store,
			"--listen", listen, NULL};

	n++;
	snprintf(out, sizeof(out), "%s/recoveryd-%d.out", dir, n);
	snprintf(store, sizeof(store), "%s/store-%d", dir, n);
	snprintf(listen, sizeof(listen), "127.0.0.1:%u", port);
	assert_int_equal(proc_start(p, out, argv), 0);
}

/* tb-publish, once `subs` subscribers are connected (a loaded machine
 * may take seconds to start them), then after `delay_ms` more. */
static void start_pub(proc_t *p, const char *count, const char *subs,
		      const char *delay_ms)
{
	char out[256];
	char *argv[] = {"tb-publish", "-c", ini, "-s", "feed", "--count",
			(char *)count, "--rate", "20000", "--wait-subscribers",
			(char *)subs, "--start-delay-ms", (char *)delay_ms,
			"--linger-ms", "500", NULL};

	snprintf(out, sizeof(out), "%s/pub.out", dir);
	assert_int_equal(proc_start(p, out, argv), 0);
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* What tb-recoveryd has said so far (its holes, if any): printed when
 * the subscriber fails, so that its loss can be told from the service's. */
static void show_service(const proc_t *p)
{
	char *out = proc_output(p);

	print_message("%s so far:\n%s", p->out, out ? out : "(none)\n");
	free(out);
}

/* Whether tb-recoveryd said it could not fill a hole of its own that
 * meets [first, last]: it was lapped itself, so the frames are held
 * nowhere and the subscriber's TB_DATA_LOSS is the right answer. */
static int service_lost(const proc_t *p, uint64_t first, uint64_t last)
{
	char *out = proc_output(p);
	int lost = 0;

	for (const char *h = out; (h = strstr(h, " hole ")) != NULL; h++) {
		unsigned long long a, b;

		if (sscanf(h, " hole %llu..%llu", &a, &b) == 2 &&
		    strstr(h, "could not be recovered") &&
		    a <= last && b >= first)
			lost = 1;
	}
	free(out);
	return lost;
}

/* What the subscriber of this process got, checked as tb-subscribe
 * checks it (tools/demo_msg.h). */
typedef struct got {
	uint64_t n, first, last, sum, order_errors, bad_payload, replayed;
} got_t;

static void on_msg(void *clientd, const tb_msg_t *m)
{
	got_t *g = clientd;

	if (!g->first)
		g->first = m->seq;
	if (g->last && m->seq != g->last + 1)
		g->order_errors++;
	if (!tb_demo_check(m->data, m->len, m->seq))
		g->bad_payload++;
	g->sum = tb_demo_sum(g->sum, m->data, m->len, m->seq);
	g->replayed += !!(m->flags & TB_MSG_F_REPLAY);
	g->last = m->seq;
	g->n++;
}

/* This process's counters of the subscriber of stream 11. */
static void sub_counters(uint64_t c[TB_CTR_CAPACITY])
{
	tb_counters_proc_t *p = malloc(sizeof(*p));
	int found = 0;

	assert_non_null(p);
	assert_int_equal(tb_counters_read_file(tb_counters_path(), p), 0);
	for (int i = 0; i < p->n_streams; i++)
		if (p->streams[i].stream_id == 11 &&
		    p->streams[i].role == TB_ROLE_SUBSCRIBER) {
			memcpy(c, p->streams[i].c, sizeof(p->streams[i].c));
			found = 1;
		}
	free(p);
	assert_true(found);
}

/*
 * Subscribes in this process and takes the stream to N, not polling for
 * `stall_ms` once it has delivered 20,000; a loss is never acceptable
 * (with recovery, the poll returns none but TB_EVICTED), except, when
 * `service_lapped` is given, one of frames tb-recoveryd itself says it
 * lost: then *service_lapped is set and nothing else is returned.
 * Returns the subscriber's counters in `c` and what it got in `g`; the
 * publisher's checksum is compared by the caller.
 */
static void subscribe_with_a_stall(got_t *g, unsigned stall_ms,
				   uint64_t c[TB_CTR_CAPACITY], const proc_t *rd,
				   int *service_lapped)
{
	tb_subscriber_t *sub;
	tb_idle_t idle;
	uint64_t until = mono_ms() + 120000;
	int stalled = 0;

	assert_int_equal(tb_subscriber_open_file(&sub, ini, "feed"), 0);
	tb_idle_init(&idle, TB_IDLE_SPIN_YIELD);
	while (g->last < N) {
		int rc = tb_sub_poll(sub, on_msg, g, 256);

		/* A machine loaded enough to keep the liveness reports from
		 * the publisher for 3 s gets this subscriber dropped; it
		 * reconnects and what it missed is recovered like a lap, so
		 * the stream is still whole (checked by the caller). */
		if (rc == TB_EVICTED) {
			print_message("evicted after %" PRIu64 "\n", g->last);
			rc = 0;
		}
		if (rc < 0 && rc != TB_NOT_CONNECTED) {
			uint64_t first = 0, last = 0;
			char why[256];

			tb_sub_loss(sub, &first, &last);
			snprintf(why, sizeof(why), "%s", tb_errmsg());
			/* Closed before failing: a subscriber left open keeps
			 * its counters registered, and the next test's
			 * tb_counters_close() would say TB_EBUSY. */
			tb_subscriber_close(sub);
			show_service(rd);
			if (service_lapped && rc == TB_DATA_LOSS &&
			    service_lost(rd, first, last)) {
				*service_lapped = 1;
				return;
			}
			fail_msg("poll: %s (%s), loss %" PRIu64 "..%" PRIu64
				 " after %" PRIu64, tb_strerror(rc), why, first,
				 last, g->last);
		}
		if (!stalled && g->last >= 20000) {
			stalled = 1;
			usleep(stall_ms * 1000u);
		}
		if (mono_ms() >= until) {
			tb_subscriber_close(sub);
			fail_msg("not at %d after 120 s: at %" PRIu64, N, g->last);
		}
		tb_idle_step(&idle, rc > 0 ? rc : 0);
	}
	sub_counters(c);
	tb_subscriber_close(sub);
	print_message("subscriber: delivered=%" PRIu64 " first=%" PRIu64
		      " last=%" PRIu64 " replayed=%" PRIu64 " read_filled=%"
		      PRIu64 " read_missed=%" PRIu64 " recovery_requests=%"
		      PRIu64 " lapped=%" PRIu64 " checksum=0x%016" PRIx64 "\n",
		      g->n, g->first, g->last, g->replayed, c[TB_CTR_READ_FILLED],
		      c[TB_CTR_READ_MISSED], c[TB_CTR_RECOVERY_REQUESTS],
		      c[TB_CTR_LAPPED], g->sum);
}

static void expect_exactly_1_to_n(const got_t *g, uint64_t checksum)
{
	assert_int_equal(g->n, N);
	assert_int_equal(g->first, 1);
	assert_int_equal(g->last, N);
	assert_int_equal(g->order_errors, 0);
	assert_int_equal(g->bad_payload, 0);
	assert_true(g->sum == checksum);
}

/* SIGTERM to tb-recoveryd; its summary line. */
static char *stop_recoveryd(proc_t *p)
{
	char *out;

	assert_int_equal(kill(p->pid, SIGTERM), 0);
	assert_int_equal(proc_wait(p, 20000), 0);
	out = proc_output(p);
	print_message("%s", out);
	return out;
}

static void lapped_while_in_the_ring_reads_back(void **state)
{
	unsigned rec = proc_free_port();
	static proc_t pub, rd;
	got_t g = {0};
	uint64_t c[TB_CTR_CAPACITY], checksum;
	char *out;

	(void)state;
	write_ini("4M", proc_free_port(), rec, proc_free_port());
	start_recoveryd(&rd, rec);
	start_pub(&pub, "60000", "2", "1500");
	subscribe_with_a_stall(&g, 500, c, &rd, NULL);
	checksum = scenario_finish_pub(&pub, N, 60000);
	expect_exactly_1_to_n(&g, checksum);
	/* It was skipped (10,000 published while it stalled, 2,048 of them
	 * written), and read every skipped frame back itself. */
	assert_true(c[TB_CTR_READ_FILLED] >= 5000);
	assert_int_equal(c[TB_CTR_READ_FILLED], g.replayed);
	assert_int_equal(c[TB_CTR_READ_MISSED], 0);
	assert_int_equal(c[TB_CTR_LAPPED], 0);
	assert_int_equal(c[TB_CTR_RECOVERY_REQUESTS], 0);
	assert_int_equal(c[TB_CTR_DATA_LOSS], 0);
	out = stop_recoveryd(&rd);
	assert_int_equal(proc_field_u64(out, "served"), 0);
	assert_int_equal(proc_field_u64(out, "holes"), 0);
	free(out);
}

static void ring_moved_on_falls_back_to_recoveryd(void **state)
{
	unsigned rec = proc_free_port();
	static proc_t pub, rd;
	got_t g = {0};
	uint64_t c[TB_CTR_CAPACITY], checksum;
	char *out;

	(void)state;
	/* The service is an rc subscriber of the same stream: stalled more
	 * than its 2,048 receives (a tenth of a second) on a loaded machine,
	 * it is skipped past what the publisher's 64 KiB still holds, and
	 * its hole is held nowhere (write_ini).  That is the machine, not
	 * the fall-back under test: such a run is tried again, three in all. */
	for (int run = 1;; run++) {
		int service_lapped = 0;

		memset(&g, 0, sizeof(g));
		rec = proc_free_port();
		write_ini("64K", proc_free_port(), rec, proc_free_port());
		start_recoveryd(&rd, rec);
		start_pub(&pub, "60000", "2", "1500");
		subscribe_with_a_stall(&g, 500, c, &rd, &service_lapped);
		if (!service_lapped)
			break;
		print_message("run %d: tb-recoveryd was lapped itself; again\n",
			      run);
		kill(pub.pid, SIGKILL);
		kill(rd.pid, SIGKILL);
		proc_wait(&pub, 20000);
		proc_wait(&rd, 20000);
		if (run == 3)
			fail_msg("tb-recoveryd was lapped itself in 3 runs of 3: "
				 "the machine stalled it past its receives each time");
	}
	checksum = scenario_finish_pub(&pub, N, 60000);
	expect_exactly_1_to_n(&g, checksum);
	/* Skipped for some 9,000 frames of which the publisher's ring holds
	 * the last 680 by the time it reads: no read-back, a lap, and
	 * tb-recoveryd's replay. */
	assert_true(c[TB_CTR_READ_MISSED] >= 1);
	assert_true(c[TB_CTR_LAPPED] >= 1);
	assert_true(c[TB_CTR_RECOVERY_REQUESTS] >= 1);
	assert_true(g.replayed >= 5000);
	assert_int_equal(c[TB_CTR_DATA_LOSS], 0);
	out = stop_recoveryd(&rd);
	assert_true(proc_field_u64(out, "served") >= 1);
	free(out);
}

/* The registrations tb-doctor --audit lists, one line each: "pid use
 * access peers verdict", through a real JSON parser. */
static char *audit(int *status)
{
	char ctr[160], outp[256], pp[256], cmd[768];
	char *argv[] = {"tb-doctor", "--audit", "--json", "--dir", ctr, NULL};
	char *out, *parsed = NULL;
	FILE *f;
	long len;

	snprintf(ctr, sizeof(ctr), "%s/ctr", dir);
	snprintf(outp, sizeof(outp), "%s/audit.json", dir);
	*status = scenario_run(outp, argv, 60000, &out);
	free(out);
	snprintf(pp, sizeof(pp), "%s/audit.parsed", dir);
	snprintf(cmd, sizeof(cmd), "/usr/bin/python3 -c 'import json,sys; "
		 "d=json.load(open(sys.argv[1])); [print(r[\"process\"], "
		 "r[\"use\"], r[\"access\"], r[\"peers\"], r[\"verdict\"]) for r "
		 "in d[\"registrations\"]]; print(\"flagged\", d[\"flagged\"])' "
		 "%s >%s 2>&1", outp, pp);
	assert_int_equal(system(cmd), 0);
	f = fopen(pp, "r");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	rewind(f);
	parsed = calloc(1, (size_t)len + 1);
	assert_int_equal(fread(parsed, 1, (size_t)len, f), (size_t)len);
	fclose(f);
	print_message("%s", parsed);
	return parsed;
}

static int count(const char *text, const char *line)
{
	int n = 0;

	for (const char *p = text; (p = strstr(p, line)); p += strlen(line))
		n++;
	return n;
}

static void the_audit_finds_each_key_where_its_role_needs_it(void **state)
{
	char ctr[160], *argv_sub[] = {"-c", ini, "-s", "feed", NULL};
	char *stall[] = {"--stall-every", "20000", "--stall-ms", "300", NULL};
	static proc_t pub, s1, s2;
	char *parsed = NULL, *out;
	uint64_t checksum;
	int status = -1;

	(void)state;
	snprintf(ctr, sizeof(ctr), "%s/ctr", dir);
	assert_int_equal(mkdir(ctr, 0755), 0);
	setenv("TICKBUS_COUNTERS_DIR", ctr, 1);
	/* No recovery service: the stall's gaps are read back or told. */
	write_ini("4M", proc_free_port(), proc_free_port(), proc_free_port());
	scenario_start_sub(&s1, dir, "s1", argv_sub, "60000", "120000", NULL);
	scenario_start_sub(&s2, dir, "s2", argv_sub, "60000", "120000", stall);
	start_pub(&pub, "60000", "2", "1000");
	/* Both joined and the stream running (the publisher starts a second
	 * in, takes three): every registration is made by now. */
	usleep(2500000);
	for (int tries = 0; tries < 20; tries++) {
		free(parsed);
		parsed = audit(&status);
		if (count(parsed, " credit ") == 2)
			break;
		usleep(250000);
	}
	unsetenv("TICKBUS_COUNTERS_DIR");
	/* The publisher: for each subscriber its credit slot (written by it
	 * alone), its ring and its ring's position word, each readable by
	 * that subscriber alone: REMOTE_READ is what recovery needs. */
	assert_int_equal(count(parsed, "tb-publish credit LOCAL_WRITE|REMOTE_WRITE 1 ok\n"), 2);
	assert_int_equal(count(parsed, "tb-publish replay REMOTE_READ 1 ok\n"), 4);
	/* Each subscriber: its ring, written by the publisher alone, and
	 * where its read-back lands, nothing remote. */
	assert_int_equal(count(parsed, "tb-subscribe ring_rx LOCAL_WRITE|REMOTE_WRITE 1 ok\n"), 2);
	assert_int_equal(count(parsed, "tb-subscribe recv LOCAL_WRITE 0 ok\n"), 2);
	assert_non_null(strstr(parsed, "flagged 0\n"));
	assert_int_equal(count(parsed, " flag\n"), 0);
	assert_int_equal(status, 0);
	free(parsed);
	checksum = scenario_finish_pub(&pub, 60000, 60000);
	free(expect_sub_complete(&s1, 60000, checksum, 60000));
	/* The stalled one, with no recovery service to ask: complete all
	 * the same, its gaps read back. */
	out = expect_sub_complete(&s2, 60000, checksum, 60000);
	assert_true(proc_field_u64(out, "replayed") > 0);
	free(out);
}

/* Stream "feed" again, over ud multicast: no key of it goes anywhere. */
static void write_ud_ini(unsigned port)
{
	FILE *f = fopen(ini, "w");

	assert_non_null(f);
	fprintf(f, "[stream feed]\nid = 12\ntransport = ud\n"
		"group = 239.192.%u.%u:%u\ntoken = " TOKEN "\nring_size = 4M\n"
		"idle = spin-then-yield\nheartbeat_ms = 50\n"
		"liveness_timeout_ms = 3000\n", 1 + port % 200, 1 + port / 200 % 250,
		port);
	if (getenv("TICKBUS_RDMA_DEVICE") && getenv("TICKBUS_RDMA_DEVICE")[0])
		fprintf(f, "rdma_device = %s\n", getenv("TICKBUS_RDMA_DEVICE"));
	if (getenv("TICKBUS_RDMA_PORT") && getenv("TICKBUS_RDMA_PORT")[0])
		fprintf(f, "rdma_port = %s\n", getenv("TICKBUS_RDMA_PORT"));
	fclose(f);
}

/* The audit of a ud stream, opened in this process so that what goes at
 * close is seen while the process lives: the publisher's ring and its two
 * send slabs (datagram headers, the heartbeat's) with no remote access
 * and no peer, the subscriber's receive buffers LOCAL_WRITE, nothing
 * flagged; and none of the four once both are closed. */
static void the_audit_finds_a_ud_stream_s_registrations(void **state)
{
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	char ctr[160], *parsed;
	int status = -1;

	(void)state;
	snprintf(ctr, sizeof(ctr), "%s/ctr", dir);
	assert_int_equal(mkdir(ctr, 0755), 0);
	/* This process's counters file anew, in ctr. */
	assert_int_equal(tb_counters_close(), 0);
	setenv("TICKBUS_COUNTERS_DIR", ctr, 1);
	write_ud_ini(proc_free_port());
	assert_int_equal(tb_subscriber_open_file(&sub, ini, "feed"), 0);
	assert_int_equal(tb_publisher_open_file(&pub, ini, "feed"), 0);
	parsed = audit(&status);
	assert_int_equal(count(parsed, " ring_tx none 0 ok\n"), 1);
	assert_int_equal(count(parsed, " send none 0 ok\n"), 2);
	assert_int_equal(count(parsed, " recv LOCAL_WRITE 0 ok\n"), 1);
	assert_non_null(strstr(parsed, "flagged 0\n"));
	assert_int_equal(count(parsed, " flag\n"), 0);
	assert_int_equal(status, 0);
	free(parsed);
	/* Each record goes before its registration does. */
	tb_subscriber_close(sub);
	tb_publisher_close(pub);
	parsed = audit(&status);
	assert_int_equal(count(parsed, " ring_tx "), 0);
	assert_int_equal(count(parsed, " send "), 0);
	assert_int_equal(count(parsed, " recv "), 0);
	free(parsed);
	assert_int_equal(tb_counters_close(), 0);
	unsetenv("TICKBUS_COUNTERS_DIR");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(lapped_while_in_the_ring_reads_back, setup, teardown),
		cmocka_unit_test_setup_teardown(ring_moved_on_falls_back_to_recoveryd, setup, teardown),
		cmocka_unit_test_setup_teardown(the_audit_finds_each_key_where_its_role_needs_it, setup, teardown),
		cmocka_unit_test_setup_teardown(the_audit_finds_a_ud_stream_s_registrations, setup, teardown),
	};

	/* TB_CMOCKA_FILTER=glob runs the matching tests alone. */
	if (getenv("TB_CMOCKA_FILTER"))
		cmocka_set_test_filter(getenv("TB_CMOCKA_FILTER"));
	return cmocka_run_group_tests_name("rc_read", tests, NULL, NULL);
}
