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
 *    "too old" for what it failed to keep;
 *  - one corrupt record in the middle of a segment: a late joiner from 1
 *    is served everything else and told exactly that record's sequence
 *    as TB_DATA_LOSS; with a second service that holds the record,
 *    nothing is lost;
 *  - --log FILE: the log lines go there; renamed away and SIGHUP sent (as
 *    logrotate does), the next lines go to a new FILE; SIGHUP without
 *    --log changes nothing.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/common/scenario.h"
#include "tools/demo_msg.h"

#include "bus/recovery/client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <sys/socket.h>
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

/* Flips a payload byte of the record of sequence `seq` in the segment
 * file `seg` (store.c: a 64-byte header, then records of [u32 length]
 * [u32 CRC32C][frame] padded to 8 bytes), so that its CRC fails. */
static void corrupt_record(const char *seg, uint64_t seq)
{
	int fd = open(seg, O_RDWR);
	off_t size, off = 64;

	assert_true(fd >= 0);
	size = lseek(fd, 0, SEEK_END);
	while (off + 8 + TB_FRAME_HDR_LEN <= size) {
		uint32_t len;
		tb_frame_hdr_t h;
		uint8_t b;

		assert_int_equal(pread(fd, &len, 4, off), 4);
		assert_int_equal(pread(fd, &h, sizeof(h), off + 8), (ssize_t)sizeof(h));
		assert_true(len >= TB_FRAME_HDR_LEN && h.length == len);
		if (h.seq == seq) {
			off_t at = off + 8 + TB_FRAME_HDR_LEN + 1;

			assert_true(len > TB_FRAME_HDR_LEN + 1);
			assert_int_equal(pread(fd, &b, 1, at), 1);
			b ^= 0x40;
			assert_int_equal(pwrite(fd, &b, 1, at), 1);
			close(fd);
			return;
		}
		off += (8 + (off_t)len + 7) & ~(off_t)7;
	}
	close(fd);
	fail_msg("no record of sequence %" PRIu64 " in %s", seq, seg);
}

static void damaged_record_lost_alone_or_fetched_elsewhere(void **state)
{
	unsigned pa = proc_free_port(), pb = proc_free_port();
	static proc_t ra, rb, alone, both;
	char sa[256], sb[256], seg[512], log[256], ini2[256], *out, *losses;
	char *extra[] = {"--start-at", "1", "--loss-log", log, NULL};
	char *where_a[] = {"-c", ini, "-s", "q", NULL};
	char *where_b[] = {"-c", ini2, "-s", "q", NULL};
	uint64_t checksum, epoch;
	FILE *f;

	(void)state;
	/* ini: recovery from service A alone; ini2: A, then B. */
	write_ini(0, pa);
	snprintf(ini2, sizeof(ini2), "%s/both.ini", dir);
	f = fopen(ini2, "w");
	assert_non_null(f);
	fprintf(f, "[stream q]\nid = 7\ntransport = shm\nshm_path = %s\n"
		"ring_size = 4M\ntoken = %s\nrecovery_timeout_ms = 15000\n"
		"recovery = 127.0.0.1:%u, 127.0.0.1:%u\n", ring, TOKEN, pa, pb);
	fclose(f);
	snprintf(sa, sizeof(sa), "%s/store-a", dir);
	snprintf(sb, sizeof(sb), "%s/store-b", dir);
	/* Segments of 1 MiB: the damaged record lies in a sealed one, in
	 * its middle. */
	start_recoveryd(&ra, "ra", sa, pa, "--segment-bytes");
	start_recoveryd(&rb, "rb", sb, pb, "--segment-bytes");
	publish("pub", "30000", "40000", &checksum, &epoch);
	usleep(500000);
	free(stop_recoveryd(&ra));
	free(stop_recoveryd(&rb));
	snprintf(seg, sizeof(seg), "%s/7-%016" PRIx64 "/%020u.seg", sa, epoch, 1u);
	corrupt_record(seg, 5000);

	/* Both services again, with no publisher: everything from their
	 * stores. */
	start_recoveryd(&ra, "ra2", sa, pa, NULL);
	start_recoveryd(&rb, "rb2", sb, pb, NULL);
	usleep(500000);

	/* From A alone: exactly 5000 lost, the rest delivered in order. */
	snprintf(log, sizeof(log), "%s/alone.loss", dir);
	scenario_start_sub(&alone, dir, "alone", where_a, "30000", "30000", extra);
	assert_int_equal(proc_wait(&alone, 60000), 0);
	out = proc_output(&alone);
	print_message("%s", out);
	assert_int_equal(proc_field_u64(out, "delivered"), 29999);
	assert_int_equal(proc_field_u64(out, "last"), 30000);
	assert_int_equal(proc_field_u64(out, "lost"), 1);
	assert_int_equal(proc_field_u64(out, "data_losses"), 1);
	assert_int_equal(proc_field_u64(out, "order_errors"), 0);
	assert_int_equal(proc_field_u64(out, "bad_payload"), 0);
	assert_non_null(strstr(out, "losses=5000-5000 "));
	assert_non_null(strstr(out, "end=count"));
	free(out);
	{
		struct proc p;

		snprintf(p.out, sizeof(p.out), "%s", log);
		losses = proc_output(&p);
		assert_string_equal(losses, "5000 5000\n");
		free(losses);
	}

	/* A, then B, which holds it: nothing lost. */
	snprintf(log, sizeof(log), "%s/both.loss", dir);
	scenario_start_sub(&both, dir, "both", where_b, "30000", "30000", extra);
	out = expect_sub_complete(&both, 30000, checksum, 60000);
	assert_int_equal(proc_field_u64(out, "lost"), 0);
	assert_int_equal(proc_field_u64(out, "replayed"), 30000);
	free(out);

	out = stop_recoveryd(&ra);
	assert_true(proc_field_u64(out, "damaged") >= 2); /* LOST, to each */
	free(out);
	free(stop_recoveryd(&rb));
}

/* Sends `n` bytes to the service at `port` and closes. */
static void poke(unsigned port, const void *bytes, size_t n)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(send(fd, bytes, n, MSG_NOSIGNAL), (ssize_t)n);
	usleep(100000);
	close(fd);
}

static char *file_text(const char *path)
{
	proc_t f;

	snprintf(f.out, sizeof(f.out), "%s", path);
	return proc_output(&f);
}

static void log_file_reopened_on_sighup(void **state)
{
	unsigned pa = proc_free_port();
	static proc_t ra, plain;
	char out[256], listen[64], store[160], logf[200], rotated[220], bad[256];
	char *text;
	proc_t lf;
	struct stat stb;

	(void)state;
	write_ini(0, pa);
	snprintf(store, sizeof(store), "%s/store", dir);
	snprintf(logf, sizeof(logf), "%s/recoveryd.log", dir);
	snprintf(rotated, sizeof(rotated), "%s.1", logf);
	snprintf(listen, sizeof(listen), "127.0.0.1:%u", pa);
	snprintf(out, sizeof(out), "%s/ra.out", dir);
	{
		char *argv[] = {"tb-recoveryd", "-c", ini, "-s", "q", "--dir",
				store, "--listen", listen, "--log", logf, NULL};
		char *quiet = getenv("TICKBUS_QUIET");

		/* Its warnings are the log lines looked for. */
		quiet = quiet ? strdup(quiet) : NULL;
		unsetenv("TICKBUS_QUIET");
		assert_int_equal(proc_start(&ra, out, argv), 0);
		if (quiet)
			setenv("TICKBUS_QUIET", quiet, 1);
		free(quiet);
	}
	snprintf(lf.out, sizeof(lf.out), "%s", logf);
	assert_int_equal(proc_wait_output(&lf, "listening on", 20000), 0);
	assert_int_equal(stat(logf, &stb), 0);
	assert_int_equal(stb.st_mode & 0777, 0640);
	text = proc_output(&ra);
	assert_null(strstr(text, "listening on")); /* not on stderr */
	free(text);

	/* logrotate: rename, then SIGHUP. */
	assert_int_equal(rename(logf, rotated), 0);
	assert_int_equal(kill(ra.pid, SIGHUP), 0);
	assert_int_equal(proc_wait_output(&lf, "log reopened (SIGHUP)", 20000), 0);
	/* A line logged now (a stranger's bytes on the port) goes to the
	 * new file. */
	poke(pa, "NOT-A-TICKBUS-HELLO", 19);
	assert_int_equal(proc_wait_output(&lf, "bad magic", 20000), 0);
	text = file_text(rotated);
	assert_non_null(strstr(text, "listening on"));
	assert_null(strstr(text, "bad magic"));
	assert_null(strstr(text, "reopened"));
	free(text);
	text = stop_recoveryd(&ra); /* alive until now: SIGHUP did not end it */
	assert_non_null(strstr(text, "stored=")); /* the summary: stdout */
	free(text);

	/* Without --log, SIGHUP is harmless. */
	start_recoveryd(&plain, "plain", store, pa, NULL);
	assert_int_equal(proc_wait_output(&plain, "listening on", 20000), 0);
	assert_int_equal(kill(plain.pid, SIGHUP), 0);
	usleep(200000);
	free(stop_recoveryd(&plain));

	/* A log that cannot be opened: a clear error, status 1. */
	snprintf(bad, sizeof(bad), "%s/no/such/dir/x.log", dir);
	{
		char *a[] = {"-c", ini, "-s", "q", "--dir", store, "--listen",
			     listen, "--log", bad, NULL};

		scenario_expect_tool("tb-recoveryd", out, a, 20000, 1,
				     "No such file or directory");
	}
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
		cmocka_unit_test_setup_teardown(damaged_record_lost_alone_or_fetched_elsewhere,
						setup, teardown),
		cmocka_unit_test_setup_teardown(log_file_reopened_on_sighup,
						setup, teardown),
	};
	return cmocka_run_group_tests_name("recovery_service", tests, NULL, NULL);
}
