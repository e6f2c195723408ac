/*
 * tb-recoveryd as a service that outlives its publisher, with the real
 * binaries:
 *  - after the publisher restarts (a new epoch), the previous epoch is
 *    still served, from its store on disk: every frame, with the first
 *    publisher's checksum;
 *  - a subscriber that joins after the publisher has exited gets the whole
 *    stream from tb-recoveryd, and so does one that joins after
 *    tb-recoveryd itself was restarted with no publisher to follow;
 *  - a store that fails (the disk full: a small tmpfs of the test's own)
 *    ends tb-recoveryd with a non-zero status and a message, so that a
 *    supervisor restarts it, instead of a service that goes on serving
 *    "too old" for what it failed to keep.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/common/scenario.h"
#include "tools/demo_msg.h"

#include "bus/recovery/client.h"

#include <inttypes.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>

#define TOKEN "svc-token-1"

static char dir[128];
static char ring[192];
static char ini[256];

static int setup(void **state)
{
	(void)state;
	if (scenario_dir_make(dir, sizeof(dir), "tb-recovery-svc") != 0)
		return -1;
	snprintf(ring, sizeof(ring), "/dev/shm/tb-recovery-svc.%d", (int)getpid());
	snprintf(ini, sizeof(ini), "%s/stream.ini", dir);
	unlink(ring);
	return 0;
}

static int teardown(void **state)
{
	char small[256];

	(void)state;
	/* The small disk of store_failure_ends_the_service, if a failure
	 * left it mounted. */
	snprintf(small, sizeof(small), "%s/small", dir);
	umount2(small, MNT_DETACH);
	return scenario_cleanup(dir, ring);
}

/* Stream "q" on shm: the publisher's retention endpoint on `retention`
 * (0: none), tb-recoveryd at `recovery`. */
static void write_ini(unsigned retention, unsigned recovery)
{
	FILE *f = fopen(ini, "w");

	assert_non_null(f);
	fprintf(f, "[stream q]\nid = 7\ntransport = shm\nshm_path = %s\n"
		"ring_size = 4M\ntoken = %s\nrecovery_timeout_ms = 15000\n"
		"recovery = 127.0.0.1:%u\n", ring, TOKEN, recovery);
	if (retention)
		fprintf(f, "retention = 1000000\n"
			"retention_endpoint = 127.0.0.1:%u\n", retention);
	fclose(f);
}

static void start_recoveryd(proc_t *p, const char *name, const char *store,
			    unsigned port, const char *extra)
{
	char out[256], listen[64];
	char *argv[] = {"tb-recoveryd", "-c", ini, "-s", "q", "--dir",
			(char *)store, "--listen", listen, (char *)extra,
			extra ? "1048576" : NULL, NULL};

	snprintf(out, sizeof(out), "%s/%s.out", dir, name);
	snprintf(listen, sizeof(listen), "127.0.0.1:%u", port);
	assert_int_equal(proc_start(p, out, argv), 0);
}

static char *stop_recoveryd(proc_t *p)
{
	char *out;

	assert_int_equal(kill(p->pid, SIGTERM), 0);
	assert_int_equal(proc_wait(p, 20000), 0);
	out = proc_output(p);
	print_message("%s", out);
	return out;
}

/* Publishes `count` at `rate` and waits for the publisher to exit; its
 * checksum and epoch in *checksum, *epoch. */
static void publish(const char *name, const char *count, const char *rate,
		    uint64_t *checksum, uint64_t *epoch)
{
	char out[256], *text;
	char *argv[] = {"tb-publish", "-c", ini, "-s", "q", "--count",
			(char *)count, "--rate", (char *)rate,
			"--start-delay-ms", "300", "--linger-ms", "500", NULL};
	proc_t p;

	snprintf(out, sizeof(out), "%s/%s.out", dir, name);
	assert_int_equal(proc_start(&p, out, argv), 0);
	assert_int_equal(proc_wait(&p, 60000), 0);
	text = proc_output(&p);
	print_message("%s", text);
	*checksum = proc_field_u64(text, "checksum");
	*epoch = proc_field_u64(text, "epoch");
	free(text);
	assert_true(*epoch != 0 && *epoch != UINT64_MAX);
}

/* ---------------------------------------------------------- a fetch */

struct sum {
	uint64_t n, next, bad, checksum;
};

static int add(void *cd, const tb_frame_hdr_t *f)
{
	struct sum *s = cd;
	const uint8_t *p = (const uint8_t *)f + TB_FRAME_HDR_LEN;
	uint32_t len = f->length - TB_FRAME_HDR_LEN;

	if (f->seq != s->next || !tb_demo_check(p, len, f->seq))
		s->bad++;
	s->checksum = tb_demo_sum(s->checksum, p, len, f->seq);
	s->next = f->seq + 1;
	s->n++;
	return 0;
}

/* Fetches 1..n of `epoch` from the service at `port`, as a subscriber's
 * recovery would; 0 when all came. */
static int fetch(unsigned port, uint64_t epoch, uint64_t n, struct sum *s)
{
	tb_recovery_client_cfg_t cfg;
	tb_endpoint_t ep;
	uint64_t next;

	memset(&ep, 0, sizeof(ep));
	snprintf(ep.host, sizeof(ep.host), "127.0.0.1");
	ep.port = (uint16_t)port;
	tb_recovery_client_cfg_init(&cfg);
	cfg.endpoints = &ep;
	cfg.n_endpoints = 1;
	cfg.stream_id = 7;
	cfg.token = TOKEN;
	cfg.deadline_ms = 10000;
	memset(s, 0, sizeof(*s));
	s->next = 1;
	return tb_recovery_client_fetch(&cfg, epoch, 1, n, add, NULL, s, NULL,
					&next);
}

/* ----------------------------------------------------------- scenarios */

static void earlier_epoch_served_after_publisher_restart(void **state)
{
	unsigned pa = proc_free_port();
	static proc_t ra;
	char store[256], *out;
	uint64_t c1, e1, c2, e2;
	struct sum s;

	(void)state;
	write_ini(proc_free_port(), pa);
	snprintf(store, sizeof(store), "%s/store", dir);
	start_recoveryd(&ra, "ra", store, pa, NULL);
	publish("pub1", "20000", "40000", &c1, &e1);
	usleep(500000);
	publish("pub2", "5000", "40000", &c2, &e2);
	usleep(500000);
	assert_true(e2 != e1);
	/* The epoch the publisher has left behind: all of it, as published. */
	assert_int_equal(fetch(pa, e1, 20000, &s), 0);
	assert_int_equal(s.n, 20000);
	assert_int_equal(s.bad, 0);
	assert_true(s.checksum == c1);
	/* And the current one. */
	assert_int_equal(fetch(pa, e2, 5000, &s), 0);
	assert_int_equal(s.n, 5000);
	assert_true(s.checksum == c2);
	out = stop_recoveryd(&ra);
	assert_int_equal(proc_field_u64(out, "stored"), 25000);
	assert_int_equal(proc_field_u64(out, "holes"), 0);
	free(out);
}

static void late_joiner_after_publisher_exit(void **state)
{
	unsigned pa = proc_free_port();
	static proc_t ra, late, later;
	char store[256], *out;
	char *where[] = {"-c", ini, "-s", "q", NULL};
	char *extra[] = {"--start-at", "1", NULL};
	uint64_t checksum, epoch;

	(void)state;
	write_ini(proc_free_port(), pa);
	snprintf(store, sizeof(store), "%s/store", dir);
	start_recoveryd(&ra, "ra", store, pa, NULL);
	publish("pub", "30000", "40000", &checksum, &epoch);
	usleep(500000);
	/* The publisher is gone: the ring says closed, there is no epoch to
	 * attach to.  tb-recoveryd holds the stream. */
	scenario_start_sub(&late, dir, "late", where, "30000", "20000", extra);
	out = expect_sub_complete(&late, 30000, checksum, 30000);
	assert_int_equal(proc_field_u64(out, "replayed"), 30000);
	free(out);
	/* tb-recoveryd restarted with no publisher to follow: it serves the
	 * newest epoch it has on disk. */
	out = stop_recoveryd(&ra);
	free(out);
	start_recoveryd(&ra, "ra2", store, pa, NULL);
	usleep(500000);
	scenario_start_sub(&later, dir, "later", where, "30000", "20000", extra);
	out = expect_sub_complete(&later, 30000, checksum, 30000);
	free(out);
	out = stop_recoveryd(&ra);
	assert_non_null(strstr(out, "no publisher yet; serving epoch"));
	free(out);
}

static void store_failure_ends_the_service(void **state)
{
	unsigned pa = proc_free_port();
	static proc_t ra, pub;
	char small[256], out[256], *text;
	char *argv[] = {"tb-publish", "-c", ini, "-s", "q", "--count", "200000",
			"--rate", "200000", "--size", "256",
			"--start-delay-ms", "300", NULL};
	int rc;

	(void)state;
	/* A disk that fills: a 2 MiB tmpfs, in a mount namespace of this
	 * test's own (so the machine never sees it). */
	snprintf(small, sizeof(small), "%s/small", dir);
	assert_int_equal(mkdir(small, 0755), 0);
	if (unshare(CLONE_NEWNS) != 0 ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
	    mount("tmpfs", small, "tmpfs", 0, "size=2m") != 0) {
		print_message("skip: cannot mount a small tmpfs here (needs root)\n");
		skip();
	}
	write_ini(0, pa);
	start_recoveryd(&ra, "ra", small, pa, "--segment-bytes");
	snprintf(out, sizeof(out), "%s/pub.out", dir);
	assert_int_equal(proc_start(&pub, out, argv), 0);
	/* 200,000 frames of 288 bytes: 57 MB into 2 MiB.  It must stop by
	 * itself, with an error, long before the publisher is done. */
	rc = proc_wait(&ra, 30000);
	text = proc_output(&ra);
	print_message("%s", text);
	assert_true(rc != 0 && rc != -1);
	assert_int_equal(rc, 1);
	assert_non_null(strstr(text, "a store failed"));
	free(text);
	proc_wait(&pub, 30000);
	assert_int_equal(umount2(small, 0), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(earlier_epoch_served_after_publisher_restart,
						setup, teardown),
		cmocka_unit_test_setup_teardown(late_joiner_after_publisher_exit,
						setup, teardown),
		cmocka_unit_test_setup_teardown(store_failure_ends_the_service,
						setup, teardown),
	};
	return cmocka_run_group_tests_name("recovery_service", tests, NULL, NULL);
}
