/*
 * Gap recovery with the real binaries: tb-publish, tb-subscribe and
 * tb-recoveryd, each scenario ending with proof of what was delivered.
 *
 *  - a subscriber lapped (it stalls for four seconds every 30,000
 *    messages on a 4 MiB ring) and a late joiner from sequence 1
 *    both deliver exactly 1..N with the publisher's checksum, while the
 *    first of their two recovery services is killed with SIGKILL and they
 *    fail over to the second; that one's store holds 1..N exactly once;
 *  - tb-recoveryd killed with SIGKILL and restarted fills what it missed
 *    from the publisher's retention buffer: its store again holds 1..N,
 *    no hole, and a late joiner served by it alone gets 1..N;
 *  - a range no one holds any more (the service started late, with no
 *    retention to fill from) reaches a late joiner as one TB_DATA_LOSS
 *    with the exact range, and the stream goes on to N;
 *  - an unauthorised subscriber (wrong token) and a malformed request get
 *    the right rejects, and the service goes on serving the others;
 *  - a late joiner a million messages behind catches up to live and
 *    delivers 1..N;
 *  - loss on the wire: ud with 1% and 5% of datagrams dropped by softrdma
 *    (plus duplicates and reordering), udp with 2% dropped on receipt by
 *    the udp loss interposer (tests/common/udp_loss.h, preloaded into
 *    tb-recoveryd and the subscribers), and rc with a stalling subscriber
 *    skipped by the publisher: three subscribers each deliver exactly
 *    1..N with the publisher's checksum, recovering from tb-recoveryd,
 *    whose store ends with 1..N and no hole.
 *
 * The stream's transport lines come from the file named by
 * $TB_RECOVERY_TRANSPORT_INI when it is set (default: shm on a ring of
 * the size each scenario asks for), so the same scenarios run over rc,
 * ud and udp by pointing it at, e.g., a file holding
 * "transport = udp\ngroup = 239.1.1.1:5000\n".
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/common/scenario.h"
#include "tests/common/udp_loss.h"

#include "bus/counters.h"
#include "bus/recovery/proto.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <sys/socket.h>

#define TOKEN "rec-token-1"

static char dir[128];
static char ring[192];
static char ini[256];
/* The stream's transport lines for the loss scenarios; "" = the default. */
static char transport_lines[512];

static int setup(void **state)
{
	(void)state;
	if (scenario_dir_make(dir, sizeof(dir), "tb-recovery") != 0)
		return -1;
	snprintf(ring, sizeof(ring), "/dev/shm/tb-recovery.%d", (int)getpid());
	snprintf(ini, sizeof(ini), "%s/stream.ini", dir);
	unlink(ring);
	transport_lines[0] = '\0';
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	/* a failed scenario returns before it unsets its hooks */
	unsetenv("SOFTRDMA_UD_LOG");
	unsetenv("SOFTRDMA_UD_DUP");
	unsetenv("SOFTRDMA_UD_REORDER");
	unsetenv("SOFTRDMA_UD_DROP");
	unsetenv("SOFTRDMA_SEED");
	udp_loss_env_clear();
	if (getenv("TB_KEEP")) {
		proc_kill_all();
		unlink(ring);
		return 0;
	}
	return scenario_cleanup(dir, ring);
}

/* Writes `path`: stream "q" for everyone (the publisher ignores
 * `recovery`, tb-recoveryd replaces it with the retention endpoint). */
static void write_ini(const char *path, const char *ring_size,
		      unsigned retention_port, const char *recovery,
		      const char *token)
{
	const char *tr = getenv("TB_RECOVERY_TRANSPORT_INI");
	char transport[512];
	FILE *f;

	if (transport_lines[0]) {
		snprintf(transport, sizeof(transport), "%s", transport_lines);
	} else if (tr && *tr) {
		FILE *t = fopen(tr, "r");
		size_t n;

		assert_non_null(t);
		n = fread(transport, 1, sizeof(transport) - 1, t);
		transport[n] = '\0';
		fclose(t);
	} else {
		snprintf(transport, sizeof(transport), "transport = shm\n"
			 "shm_path = %s\nring_size = %s\n", ring, ring_size);
	}
	f = fopen(path, "w");
	assert_non_null(f);
	/* A wrong token cannot succeed: give up on it sooner. */
	fprintf(f, "[stream q]\nid = 7\n%stoken = %s\nrecovery_timeout_ms = %d\n",
		transport, token, strcmp(token, TOKEN) ? 2000 : 15000);
	if (retention_port)
		fprintf(f, "retention = 1000000\n"
			"retention_endpoint = 127.0.0.1:%u\n", retention_port);
	if (recovery && *recovery)
		fprintf(f, "recovery = %s\n", recovery);
	fclose(f);
}

/* Output in <name>.out, store in store-<store>. */
static void run_recoveryd(proc_t *p, const char *name, const char *store_name,
			  unsigned port)
{
	char out[256], store[256], listen[64];
	char *argv[] = {"tb-recoveryd", "-c", ini, "-s", "q", "--dir", store,
			"--listen", listen, NULL};

	snprintf(out, sizeof(out), "%s/%s.out", dir, name);
	snprintf(store, sizeof(store), "%s/store-%s", dir, store_name);
	snprintf(listen, sizeof(listen), "127.0.0.1:%u", port);
	assert_int_equal(proc_start(p, out, argv), 0);
}

static void start_recoveryd(proc_t *p, const char *name, unsigned port)
{
	run_recoveryd(p, name, name, port);
}

/* A subscriber that stalls for `stall_ms` every `stall_every` messages
 * (NULL: never). */
static void start_sub_stalling(proc_t *p, const char *name, const char *count,
			       const char *start_at, const char *stall_every,
			       const char *stall_ms)
{
	char *where[] = {"-c", ini, "-s", "q", NULL};
	char *extra[8];
	int i = 0;

	if (start_at) {
		extra[i++] = "--start-at";
		extra[i++] = (char *)start_at;
	}
	if (stall_every) {
		extra[i++] = "--stall-every";
		extra[i++] = (char *)stall_every;
		extra[i++] = "--stall-ms";
		extra[i++] = (char *)stall_ms;
	}
	extra[i] = NULL;
	scenario_start_sub(p, dir, name, where, count, "120000", extra);
}

static void start_sub(proc_t *p, const char *name, const char *count,
		      const char *start_at, const char *stall_every)
{
	start_sub_stalling(p, name, count, start_at, stall_every, "1000");
}

static void start_pub_after(proc_t *p, const char *count, const char *rate,
			    const char *delay_ms)
{
	char out[256];
	char *argv[] = {"tb-publish", "-c", ini, "-s", "q", "--count",
			(char *)count, "--rate", (char *)rate,
			"--start-delay-ms", (char *)delay_ms, "--linger-ms", "3000",
			NULL};

	snprintf(out, sizeof(out), "%s/pub.out", dir);
	assert_int_equal(proc_start(p, out, argv), 0);
}

static void start_pub(proc_t *p, const char *count, const char *rate)
{
	start_pub_after(p, count, rate, "300");
}

/* What a running service has said so far (its holes, if any): printed
 * before a subscriber is judged, so that a loss can be told from the
 * service's own. */
static void show_service(const proc_t *p)
{
	char *out = proc_output(p);

	print_message("%s so far:\n%s", p->out, out);
	free(out);
}

/* SIGTERM, then the summary line of the store: 1..n, nothing missing. */
static char *stop_recoveryd(proc_t *p)
{
	char *out;

	assert_int_equal(kill(p->pid, SIGTERM), 0);
	assert_int_equal(proc_wait(p, 20000), 0);
	out = proc_output(p);
	print_message("%s", out);
	return out;
}

/* Waits (up to `ms`) until the service `p` has stored `n` messages of
 * stream q, by its counters file (delivered, role recovery): a store
 * append survives a SIGKILL once it has returned (store.h). */
static void wait_stored(const proc_t *p, uint64_t n, unsigned ms)
{
	const char *env = getenv("TICKBUS_COUNTERS_DIR");
	tb_counters_proc_t *c = malloc(sizeof(*c));
	char path[256];
	uint64_t stored = 0;

	assert_non_null(c);
	snprintf(path, sizeof(path), "%s/tickbus-counters.%d",
		 env && env[0] ? env : TB_COUNTERS_DIR_DEFAULT, (int)p->pid);
	for (unsigned waited = 0; waited < ms; waited += 10) {
		if (tb_counters_read_file(path, c) == 0)
			for (int i = 0; i < c->n_streams; i++)
				if (c->streams[i].stream_id == 7 &&
				    c->streams[i].role == TB_ROLE_RECOVERY)
					stored = c->streams[i].c[TB_CTR_DELIVERED];
		if (stored >= n)
			break;
		usleep(10000);
	}
	free(c);
	if (stored < n)
		fail_msg("%s: %" PRIu64 " stored after %u ms, not %" PRIu64,
			 p->out, stored, ms, n);
}

static uint64_t publish_and_wait(proc_t *pub)
{
	return scenario_finish_pub(pub, 0, 120000);
}

static void lapped_and_late_subscribers_fail_over(void **state)
{
	unsigned pa = proc_free_port(), pb = proc_free_port();
	/* static: teardown's proc_kill_all looks at them after we return */
	static proc_t ra, rb, pub, lapped, late;
	char recovery[64], *out;
	uint64_t checksum;

	(void)state;
	snprintf(recovery, sizeof(recovery), "127.0.0.1:%u,127.0.0.1:%u", pa, pb);
	/* The services read the ring the lapped subscriber reads, and the
	 * publisher's retention is that ring too (retention.h): a service
	 * lapped has a hole no source holds any more.  So the ring gives
	 * them room for the stalls of a loaded machine (4 MiB: two seconds
	 * of the stream; 1 MiB, half a second, was not enough at a load of
	 * 11, where the publisher, itself stalled, catches up in a burst). */
	write_ini(ini, "4M", proc_free_port(), recovery, TOKEN);
	start_recoveryd(&ra, "ra", pa);
	start_recoveryd(&rb, "rb", pb);
	/* The services subscribe before the first message: 1..N from the
	 * ring.  The lapped subscriber stalls 4 s every 30,000 messages:
	 * the rest of the stream, 70,000, is published during the first
	 * stall, well over the some 43,000 a 4 MiB ring holds. */
	start_sub_stalling(&lapped, "lapped", "100000", NULL, "30000", "4000");
	start_pub(&pub, "100000", "20000");
	usleep(1000000);
	assert_int_equal(kill(ra.pid, SIGKILL), 0);
	assert_int_equal(proc_wait(&ra, 5000), 128 + SIGKILL);
	usleep(1500000);
	start_sub(&late, "late", "100000", "1", NULL);
	checksum = publish_and_wait(&pub);
	show_service(&rb);
	out = expect_sub_complete(&lapped, 100000, checksum, 120000);
	assert_true(proc_field_u64(out, "replayed") > 10000);
	free(out);
	out = expect_sub_complete(&late, 100000, checksum, 120000);
	assert_true(proc_field_u64(out, "replayed") > 20000);
	free(out);
	out = stop_recoveryd(&rb);
	assert_int_equal(proc_field_u64(out, "stored"), 100000);
	assert_int_equal(proc_field_u64(out, "first"), 1);
	assert_int_equal(proc_field_u64(out, "last"), 100000);
	assert_int_equal(proc_field_u64(out, "holes"), 0);
	assert_true(proc_field_u64(out, "served") >= 2);
	free(out);
}

static void restarted_service_fills_from_retention(void **state)
{
	unsigned pa = proc_free_port();
	static proc_t ra, pub, late;
	char recovery[64], *out;
	uint64_t checksum;

	(void)state;
	snprintf(recovery, sizeof(recovery), "127.0.0.1:%u", pa);
	/* 16 MiB holds 170,000 frames: the whole run stays retained. */
	write_ini(ini, "16M", proc_free_port(), recovery, TOKEN);
	start_recoveryd(&ra, "ra", pa);
	start_pub(&pub, "80000", "20000");
	/* Killed once it has stored some of the stream (a loaded machine
	 * may not have let it store anything in a fixed second: it then
	 * fills all of it from retention on restart, and the test would
	 * not show a restart that resumes its store). */
	wait_stored(&ra, 5000, 60000);
	assert_int_equal(kill(ra.pid, SIGKILL), 0);
	assert_int_equal(proc_wait(&ra, 5000), 128 + SIGKILL);
	usleep(1000000); /* 20,000 messages published while it is down */
	run_recoveryd(&ra, "ra2", "ra", pa); /* same store, new process */
	usleep(1000000);
	start_sub(&late, "late", "80000", "1", NULL);
	checksum = publish_and_wait(&pub);
	show_service(&ra);
	out = expect_sub_complete(&late, 80000, checksum, 120000);
	free(out);
	out = stop_recoveryd(&ra);
	assert_non_null(strstr(out, "resuming at"));
	assert_int_equal(proc_field_u64(out, "first"), 1);
	assert_int_equal(proc_field_u64(out, "last"), 80000);
	assert_int_equal(proc_field_u64(out, "holes"), 0);
	/* Fewer than all were stored by this run: the rest was already on
	 * disk from the killed one. */
	assert_true(proc_field_u64(out, "stored") < 80000);
	free(out);
}

static void gone_range_is_data_loss_and_stream_goes_on(void **state)
{
	unsigned pa = proc_free_port();
	static proc_t ra, pub, late;
	char recovery[64], *out, want[64];
	uint64_t earliest;

	(void)state;
	snprintf(recovery, sizeof(recovery), "127.0.0.1:%u", pa);
	write_ini(ini, "1M", 0, recovery, TOKEN); /* no retention */
	start_pub(&pub, "60000", "20000");
	usleep(1000000);
	/* Starts late with nothing to fill from: its store begins where it
	 * joined, after a recorded hole. */
	start_recoveryd(&ra, "ra", pa);
	usleep(700000);
	start_sub(&late, "late", "60000", "1", NULL);
	publish_and_wait(&pub);
	assert_int_equal(proc_wait(&late, 120000), 0);
	out = stop_recoveryd(&ra);
	assert_int_equal(proc_field_u64(out, "holes"), 1);
	earliest = proc_field_u64(out, "first");
	assert_true(earliest > 1 && earliest < 60000);
	assert_int_equal(proc_field_u64(out, "last"), 60000);
	assert_non_null(strstr(out, "could not be recovered"));
	free(out);
	out = proc_output(&late);
	print_message("%s", out);
	/* One TB_DATA_LOSS for exactly 1..earliest-1, then everything. */
	assert_int_equal(proc_field_u64(out, "data_losses"), 1);
	snprintf(want, sizeof(want), " losses=1-%" PRIu64 " ", earliest - 1);
	assert_non_null(strstr(out, want));
	assert_int_equal(proc_field_u64(out, "lost"), earliest - 1);
	assert_int_equal(proc_field_u64(out, "delivered"), 60000 - (earliest - 1));
	assert_int_equal(proc_field_u64(out, "last"), 60000);
	assert_int_equal(proc_field_u64(out, "order_errors"), 0);
	assert_int_equal(proc_field_u64(out, "bad_payload"), 0);
	free(out);
}

/* Sends `len` raw bytes to the service; returns the reject reason. */
static uint32_t raw_request(unsigned port, const void *bytes, size_t len)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	uint8_t ans[TB_RECOVERY_PROTO_MSG_MAX];
	tb_recovery_proto_msg_t m;
	ssize_t n, got = 0;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons((uint16_t)port);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(send(fd, bytes, len, 0), (ssize_t)len);
	while ((n = recv(fd, ans + got, sizeof(ans) - (size_t)got, 0)) > 0)
		got += n;
	close(fd);
	assert_true(tb_recovery_proto_decode(ans, (size_t)got, &m) > 0);
	assert_int_equal(m.type, TB_RECOVERY_PROTO_REJECT);
	return m.reject.reason;
}

static void bad_requests_are_rejected_others_served(void **state)
{
	unsigned pa = proc_free_port();
	static proc_t ra, pub, late, intruder;
	char recovery[64], *out, bad_ini[256];
	uint8_t junk[200];
	uint64_t checksum;

	(void)state;
	snprintf(recovery, sizeof(recovery), "127.0.0.1:%u", pa);
	write_ini(ini, "1M", proc_free_port(), recovery, TOKEN);
	start_recoveryd(&ra, "ra", pa);
	start_pub(&pub, "40000", "20000");
	usleep(1500000);
	/* Malformed: garbage, then a header announcing a bad length. */
	memset(junk, 0x41, sizeof(junk));
	assert_int_equal(raw_request(pa, junk, sizeof(junk)),
			 TB_RECOVERY_PROTO_REJ_MALFORMED);
	/* The intruder's config differs only in its token.  It is told
	 * "unauthorised" until its deadline, then reports the whole gap
	 * lost; it never gets a frame from the service. */
	snprintf(bad_ini, sizeof(bad_ini), "%s", ini);
	snprintf(ini, sizeof(ini), "%s/intruder.ini", dir);
	write_ini(ini, "1M", 0, recovery, "wrong-token");
	start_sub(&intruder, "intruder", "40000", "1", NULL);
	snprintf(ini, sizeof(ini), "%s", bad_ini);
	start_sub(&late, "late", "40000", "1", NULL);
	checksum = publish_and_wait(&pub);
	show_service(&ra);
	out = expect_sub_complete(&late, 40000, checksum, 120000);
	free(out);
	assert_int_equal(proc_wait(&intruder, 120000), 0);
	out = proc_output(&intruder);
	print_message("%s", out);
	assert_int_equal(proc_field_u64(out, "replayed"), 0);
	/* At least its late start is a loss; it recovers nothing, so each
	 * time a loaded machine lets the ring lap it is one more (seen at
	 * load 10: 1-23751, then 24153-40000).  Every message is still
	 * either delivered or reported lost. */
	assert_true(proc_field_u64(out, "data_losses") >= 1);
	assert_int_equal(proc_field_u64(out, "order_errors"), 0);
	assert_int_equal(proc_field_u64(out, "last"), 40000);
	assert_int_equal(proc_field_u64(out, "delivered") +
			 proc_field_u64(out, "lost"), 40000);
	free(out);
	out = stop_recoveryd(&ra);
	assert_int_equal(proc_field_u64(out, "malformed"), 1);
	assert_true(proc_field_u64(out, "unauthorised") >= 1);
	assert_true(proc_field_u64(out, "served") >= 1);
	assert_int_equal(proc_field_u64(out, "holes"), 0);
	free(out);
}

static void late_joiner_a_million_behind_catches_up(void **state)
{
	unsigned pa = proc_free_port();
	static proc_t ra, pub, late;
	char recovery[64], *out;
	uint64_t checksum;

	(void)state;
	snprintf(recovery, sizeof(recovery), "127.0.0.1:%u", pa);
	/* 64 MiB holds 700,000 frames: seconds of slack for the service. */
	write_ini(ini, "64M", 0, recovery, TOKEN);
	start_recoveryd(&ra, "ra", pa);
	start_pub(&pub, "1100000", "100000");
	/* 10.3 s in: about 1,000,000 published, and still publishing. */
	usleep(10300000);
	start_sub(&late, "late", "1100000", "1", NULL);
	checksum = publish_and_wait(&pub);
	show_service(&ra);
	out = expect_sub_complete(&late, 1100000, checksum, 240000);
	assert_true(proc_field_u64(out, "replayed") >= 900000);
	free(out);
	out = stop_recoveryd(&ra);
	assert_int_equal(proc_field_u64(out, "last"), 1100000);
	assert_int_equal(proc_field_u64(out, "holes"), 0);
	free(out);
}

/* Runs a program to its end; returns its exit status, output in *out. */
static int run(const char *name, char *const argv[], char **out)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/%s.out", dir, name);
	return scenario_run(path, argv, 20000, out);
}

static void bad_arguments_get_clear_errors(void **state)
{
	char *out, noauth[256];
	FILE *f;

	(void)state;
	write_ini(ini, "1M", 0, NULL, TOKEN);
	{
		char *argv[] = {"tb-recoveryd", "-c", ini, "-s", "q", NULL};

		assert_int_equal(run("a1", argv, &out), 2); /* no --dir, --listen */
		assert_non_null(strstr(out, "usage: tb-recoveryd"));
		free(out);
	}
	{
		char *argv[] = {"tb-recoveryd", "-c", ini, "-s", "q", "-d", dir,
				"-l", "127.0.0.1:99999", NULL};

		assert_int_equal(run("a2", argv, &out), 2);
		assert_non_null(strstr(out, "--listen 127.0.0.1:99999"));
		free(out);
	}
	{
		char *argv[] = {"tb-recoveryd", "-c", ini, "-s", "q", "-d", dir,
				"-l", "127.0.0.1:7000", "--max-count", "0", NULL};

		assert_int_equal(run("a3", argv, &out), 2);
		free(out);
	}
	{
		char *argv[] = {"tb-recoveryd", "-c", ini, "-s", "nosuch", "-d",
				dir, "-l", "127.0.0.1:7000", NULL};

		assert_int_equal(run("a4", argv, &out), 1);
		assert_non_null(strstr(out, "nosuch"));
		free(out);
	}
	snprintf(noauth, sizeof(noauth), "%s/noauth.ini", dir);
	f = fopen(noauth, "w");
	assert_non_null(f);
	fprintf(f, "[stream q]\nid = 7\ntransport = shm\nshm_path = %s\n", ring);
	fclose(f);
	{
		char *argv[] = {"tb-recoveryd", "-c", noauth, "-s", "q", "-d", dir,
				"-l", "127.0.0.1:7000", NULL};

		assert_int_equal(run("a5", argv, &out), 1);
		assert_non_null(strstr(out, "has no token"));
		free(out);
	}
	{
		char *argv[] = {"tb-subscribe", "-c", ini, "-s", "q", "--start-at",
				"0", NULL};

		assert_int_equal(run("a6", argv, &out), 2);
		assert_non_null(strstr(out, "usage: tb-subscribe"));
		free(out);
	}
}


/* Counts the lines of `path` that start with `word` (0 if no file). */
static uint64_t count_lines(const char *path, const char *word)
{
	char line[256];
	uint64_t n = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		n += strncmp(line, word, strlen(word)) == 0;
	fclose(f);
	return n;
}

enum loss_at { LOSS_AT_PUBLISHER, LOSS_AT_SUBSCRIBERS };

/* Three subscribers and tb-recoveryd on the transport in transport_lines,
 * with `env`=`rate` (a loss hook; NULL = none) injected where `at` says,
 * and the first subscriber stalling 1 s every `stall_every` messages;
 * `seed_env`, when not NULL, seeds each process's hook differently.
 * Every subscriber delivers exactly 1..N in order with the publisher's
 * checksum, having recovered from the service (replayed > 0, for those
 * that lost any), and the service's store holds 1..N with no hole (its
 * own gaps filled from the publisher's retention). */
static void lossy_run(const char *env, const char *rate, enum loss_at at,
		      const char *stall_every, const char *seed_env)
{
	static const char *const names[] = {"s1", "s2", "s3"};
	static proc_t ra, pub, sub[3];
	unsigned pa = proc_free_port();
	char recovery[64], *out;
	uint64_t checksum;
	int i;

	snprintf(recovery, sizeof(recovery), "127.0.0.1:%u", pa);
	write_ini(ini, "4M", proc_free_port(), recovery, TOKEN);
	if (env && at == LOSS_AT_SUBSCRIBERS)
		setenv(env, rate, 1);
	if (seed_env)
		setenv(seed_env, "100", 1);
	start_recoveryd(&ra, "ra", pa);
	for (i = 0; i < 3; i++) {
		char seed[16];

		/* each its own losses */
		snprintf(seed, sizeof(seed), "%d", 101 + i);
		if (seed_env)
			setenv(seed_env, seed, 1);
		start_sub(&sub[i], names[i], "40000", NULL,
			  i == 0 ? stall_every : NULL);
	}
	if (seed_env)
		unsetenv(seed_env);
	if (env) {
		unsetenv(env);
		if (at == LOSS_AT_PUBLISHER)
			setenv(env, rate, 1);
	}
	/* A second for everyone to join before sequence 1. */
	start_pub_after(&pub, "40000", "20000", "1000");
	if (env)
		unsetenv(env);
	checksum = publish_and_wait(&pub);
	show_service(&ra);
	for (i = 0; i < 3; i++) {
		out = expect_sub_complete(&sub[i], 40000, checksum, 120000);
		/* every one lost something and got it back */
		if (env || (i == 0 && stall_every))
			assert_true(proc_field_u64(out, "replayed") > 0);
		free(out);
	}
	out = stop_recoveryd(&ra);
	assert_int_equal(proc_field_u64(out, "first"), 1);
	assert_int_equal(proc_field_u64(out, "last"), 40000);
	assert_int_equal(proc_field_u64(out, "stored"), 40000);
	assert_int_equal(proc_field_u64(out, "holes"), 0);
	assert_true(proc_field_u64(out, "served") > 0);
	free(out);
}

/* softrdma drops (and duplicates, and reorders) UD datagrams for each
 * receiver on its own, at the publisher's side; every event is logged. */
static void ud_lossy(const char *rate)
{
	char log[256];

	snprintf(transport_lines, sizeof(transport_lines),
		 "transport = ud\ngroup = 239.192.9.%u:%u\nring_size = 4M\n"
		 "idle = spin-then-yield\n", (unsigned)getpid() % 250 + 1,
		 proc_free_port());
	snprintf(log, sizeof(log), "%s/ud-events.log", dir);
	setenv("SOFTRDMA_UD_LOG", log, 1);
	setenv("SOFTRDMA_UD_DUP", "0.005", 1);
	setenv("SOFTRDMA_UD_REORDER", "0.005", 1);
	setenv("SOFTRDMA_SEED", "20261203", 1);
	lossy_run("SOFTRDMA_UD_DROP", rate, LOSS_AT_PUBLISHER, NULL, NULL);
	unsetenv("SOFTRDMA_UD_LOG");
	unsetenv("SOFTRDMA_UD_DUP");
	unsetenv("SOFTRDMA_UD_REORDER");
	unsetenv("SOFTRDMA_SEED");
	/* the loss was real: about rate x 40,000 x 4 receivers */
	print_message("softrdma dropped %" PRIu64 " datagrams\n",
		      count_lines(log, "drop"));
	assert_true(count_lines(log, "drop") > 0);
	assert_true(count_lines(log, "dup") > 0);
}

static void ud_one_percent_loss_recovered(void **state)
{
	(void)state;
	ud_lossy("0.01");
}

static void ud_five_percent_loss_recovered(void **state)
{
	(void)state;
	ud_lossy("0.05");
}

/* The udp loss interposer drops received datagrams, seeded for each
 * process on its own. */
static void udp_loss_recovered(void **state)
{
	char log[256];

	(void)state;
	snprintf(transport_lines, sizeof(transport_lines),
		 "transport = udp\ngroup = 239.192.9.%u:%u\ninterface = 127.0.0.1\n"
		 "loopback = yes\nrcvbuf = 4M\nring_size = 4M\n"
		 "idle = spin-then-yield\n", (unsigned)getpid() % 250 + 1,
		 proc_free_port());
	snprintf(log, sizeof(log), "%s/udp-drops.log", dir);
	udp_loss_env("0.02", NULL, log);
	lossy_run(UDP_LOSS_ENV_RATE, "0.02", LOSS_AT_SUBSCRIBERS, NULL,
		  UDP_LOSS_ENV_SEED);
	udp_loss_env_clear();
	print_message("the udp loss interposer dropped %" PRIu64 " datagrams\n",
		      count_lines(log, "drop"));
	assert_true(count_lines(log, "drop") > 0);
}

/* rc with slow_consumer = lap: the publisher skips a subscriber that has
 * no room, which the subscriber sees as a gap and recovers. */
static void rc_lapped_subscriber_recovers(void **state)
{
	(void)state;
	snprintf(transport_lines, sizeof(transport_lines),
		 "transport = rc\ncontrol = 127.0.0.1:%u\nring_size = 1M\n"
		 "slow_consumer = lap\nidle = spin-then-yield\n", proc_free_port());
	lossy_run(NULL, NULL, LOSS_AT_PUBLISHER, "15000", NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(bad_arguments_get_clear_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(lapped_and_late_subscribers_fail_over, setup, teardown),
		cmocka_unit_test_setup_teardown(restarted_service_fills_from_retention, setup, teardown),
		cmocka_unit_test_setup_teardown(gone_range_is_data_loss_and_stream_goes_on, setup, teardown),
		cmocka_unit_test_setup_teardown(bad_requests_are_rejected_others_served, setup, teardown),
		cmocka_unit_test_setup_teardown(late_joiner_a_million_behind_catches_up, setup, teardown),
		cmocka_unit_test_setup_teardown(ud_one_percent_loss_recovered, setup, teardown),
		cmocka_unit_test_setup_teardown(ud_five_percent_loss_recovered, setup, teardown),
		cmocka_unit_test_setup_teardown(udp_loss_recovered, setup, teardown),
		cmocka_unit_test_setup_teardown(rc_lapped_subscriber_recovers, setup, teardown),
	};
	/* TB_CMOCKA_FILTER=glob runs the matching tests alone. */
	if (getenv("TB_CMOCKA_FILTER"))
		cmocka_set_test_filter(getenv("TB_CMOCKA_FILTER"));
	return cmocka_run_group_tests_name("recovery_scenario", tests, NULL, NULL);
}
