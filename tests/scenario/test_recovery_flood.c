/*
 * Floods against tb-recoveryd without a token, while real subscribers
 * recover through it: each scenario runs one flood for the whole run, and
 * a late joiner from sequence 1 and a subscriber lapped every 7,000
 * messages must both deliver exactly 1..N with the publisher's checksum,
 * with nothing lost: their recovery happened within its normal time (a
 * recovery that had not made it within recovery_timeout_ms would have
 * been reported as TB_DATA_LOSS).  No figure is timed.
 *
 *  - 70 idle connections, each opened again a second after the service
 *    closed it, from the subscribers' own address;
 *  - slowloris: 70 connections sending a HELLO one byte a second, each
 *    opened again a second after it was closed, from the subscribers' own
 *    address;
 *  - thousands of connections: a new hundred every 10 ms, up to 2,000 held
 *    open, from another address;
 *  - a reconnect storm: 80 connections closed and opened again every
 *    1.5 s, from another address.
 *
 * Against a service with a fixed table of clients taken before
 * authentication and an idle timeout reset by every byte, any one of these
 * left the subscribers without recovery.  Other hosts are other loopback
 * addresses (127/8 is all loopback).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/common/scenario.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>

#define TOKEN "flood-token"
#define N_MSGS "20000"

static char dir[128];
static char ring[192];
static char ini[256];

static int setup(void **state)
{
	struct rlimit rl;

	(void)state;
	/* Room for the flood's own sockets. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 4096) {
		rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (scenario_dir_make(dir, sizeof(dir), "tb-recovery-flood") != 0)
		return -1;
	snprintf(ring, sizeof(ring), "/dev/shm/tb-recovery-flood.%d", (int)getpid());
	snprintf(ini, sizeof(ini), "%s/stream.ini", dir);
	unlink(ring);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return scenario_cleanup(dir, ring);
}

/* -------------------------------------------------------------- a flood */

enum kind { IDLE, SLOWLORIS, THOUSANDS, STORM };

struct slot {
	int fd;
	uint64_t opened_ms, byte_ms, closed_ms;
	uint32_t sent;
};

struct flood {
	enum kind kind;
	const char *from;
	unsigned port;
	int n;
	struct slot *slots;
	_Atomic int stop;
	uint64_t opened, refused;
	pthread_t t;
};

/* A non-blocking connection from `f->from`; -1 if none could be started. */
static int flood_dial(struct flood *f)
{
	struct sockaddr_in sa = {.sin_family = AF_INET}, me = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	inet_pton(AF_INET, f->from, &me.sin_addr);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons((uint16_t)f->port);
	if (bind(fd, (struct sockaddr *)&me, sizeof(me)) < 0 ||
	    (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 &&
	     errno != EINPROGRESS)) {
		close(fd);
		f->refused++;
		return -1;
	}
	f->opened++;
	return fd;
}

/* 1 when the service has closed `fd` (what it sent is dropped). */
static int closed_by_peer(int fd)
{
	struct pollfd pf = {.fd = fd, .events = POLLIN | POLLRDHUP};
	uint8_t buf[512];

	if (poll(&pf, 1, 0) <= 0)
		return 0;
	if (pf.revents & (POLLHUP | POLLERR | POLLRDHUP))
		return 1;
	return recv(fd, buf, sizeof(buf), MSG_DONTWAIT) == 0;
}

static void slot_close(struct slot *s)
{
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
}

static void *flood_main(void *arg)
{
	struct flood *f = arg;
	/* What a slow client trickles: the start of a recovery-protocol
	 * HELLO (magic "TR", version 2, type 5, 144 bytes), so that the
	 * service has every reason to go on reading. */
	uint8_t hello[144] = {'T', 'R', 2, 5, 144};
	uint64_t last_storm = 0;
	int next = 0;
	while (!f->stop) {
		uint64_t now = proc_now_ms();

		switch (f->kind) {
		case IDLE:
		case SLOWLORIS:
			for (int i = 0; i < f->n; i++) {
				struct slot *s = &f->slots[i];

				if (s->fd >= 0 && closed_by_peer(s->fd)) {
					slot_close(s);
					s->closed_ms = now;
				}
				if (s->fd < 0 && now - s->closed_ms >= 1000) {
					s->fd = flood_dial(f);
					s->opened_ms = s->byte_ms = now;
					s->sent = 0;
				} else if (f->kind == SLOWLORIS &&
					   now - s->byte_ms >= 1000 && s->sent < 144) {
					if (send(s->fd, hello + s->sent, 1,
						 MSG_NOSIGNAL) == 1)
						s->sent++;
					s->byte_ms = now;
				}
			}
			break;
		case THOUSANDS:
			/* A hundred new ones each turn, the oldest closed
			 * to make room once 2,000 are held. */
			for (int k = 0; k < 100; k++) {
				slot_close(&f->slots[next]);
				f->slots[next].fd = flood_dial(f);
				next = (next + 1) % f->n;
			}
			break;
		case STORM:
			if (now - last_storm >= 1500) {
				for (int i = 0; i < f->n; i++) {
					slot_close(&f->slots[i]);
					f->slots[i].fd = flood_dial(f);
				}
				last_storm = now;
			}
			break;
		}
		usleep(10000);
	}
	for (int i = 0; i < f->n; i++)
		slot_close(&f->slots[i]);
	return NULL;
}

static void flood_start(struct flood *f, enum kind kind, const char *from,
			unsigned port, int n)
{
	memset(f, 0, sizeof(*f));
	f->kind = kind;
	f->from = from;
	f->port = port;
	f->n = n;
	f->slots = calloc((size_t)n, sizeof(*f->slots));
	assert_non_null(f->slots);
	for (int i = 0; i < n; i++)
		f->slots[i].fd = -1;
	assert_int_equal(pthread_create(&f->t, NULL, flood_main, f), 0);
}

static void flood_stop(struct flood *f)
{
	f->stop = 1;
	pthread_join(f->t, NULL);
	print_message("flood from %s: %" PRIu64 " connections opened, %" PRIu64
		      " refused at once\n", f->from, f->opened, f->refused);
	free(f->slots);
}

/* ----------------------------------------------------------- the run */

static void write_ini(unsigned retention, unsigned recovery)
{
	FILE *f = fopen(ini, "w");

	assert_non_null(f);
	/* The normal recovery time: a gap not recovered in 5 s would be
	 * reported lost, which the checks below refuse. */
	fprintf(f, "[stream q]\nid = 7\ntransport = shm\nshm_path = %s\n"
		"ring_size = 1M\ntoken = %s\nrecovery_timeout_ms = 5000\n"
		"recovery = 127.0.0.1:%u\nretention = 1000000\n"
		"retention_endpoint = 127.0.0.1:%u\n", ring, TOKEN, recovery,
		retention);
	fclose(f);
}

/* tb-recoveryd, the flood, then a publisher and the two subscribers. */
static void recover_under(enum kind kind, const char *from, int n)
{
	unsigned pa = proc_free_port();
	static proc_t ra, pub, late, lapped;
	char out[256], store[256], listen[64], *text;
	char *rd[] = {"tb-recoveryd", "-c", ini, "-s", "q", "--dir", store,
		      "--listen", listen, NULL};
	char *pb[] = {"tb-publish", "-c", ini, "-s", "q", "--count", N_MSGS,
		      "--rate", "10000", "--start-delay-ms", "500",
		      "--linger-ms", "3000", NULL};
	char *where[] = {"-c", ini, "-s", "q", NULL};
	char *late_extra[] = {"--start-at", "1", NULL};
	char *lapped_extra[] = {"--stall-every", "7000", "--stall-ms", "2000", NULL};
	struct flood f;
	uint64_t checksum;

	write_ini(proc_free_port(), pa);
	snprintf(store, sizeof(store), "%s/store", dir);
	snprintf(listen, sizeof(listen), "127.0.0.1:%u", pa);
	snprintf(out, sizeof(out), "%s/ra.out", dir);
	assert_int_equal(proc_start(&ra, out, rd), 0);
	usleep(300000);
	flood_start(&f, kind, from, pa, n);
	usleep(1000000); /* the flood at full strength before anyone comes */
	scenario_start_sub(&lapped, dir, "lapped", where, N_MSGS, "60000",
			   lapped_extra);
	snprintf(out, sizeof(out), "%s/pub.out", dir);
	assert_int_equal(proc_start(&pub, out, pb), 0);
	usleep(1500000);
	scenario_start_sub(&late, dir, "late", where, N_MSGS, "60000", late_extra);
	checksum = scenario_finish_pub(&pub, 20000, 60000);
	text = expect_sub_complete(&late, 20000, checksum, 60000);
	assert_true(proc_field_u64(text, "replayed") > 0);
	free(text);
	/* Lapped, most likely, and recovered (a publisher slowed down by a
	 * busy machine may not lap it: complete either way). */
	text = expect_sub_complete(&lapped, 20000, checksum, 60000);
	free(text);
	flood_stop(&f);
	assert_int_equal(kill(ra.pid, SIGTERM), 0);
	assert_int_equal(proc_wait(&ra, 20000), 0);
	text = proc_output(&ra);
	print_message("%s", text);
	/* The defences were at work, and the subscribers were served. */
	assert_true(proc_field_u64(text, "served") >= 2);
	assert_true(proc_field_u64(text, "hello_timeouts") +
		    proc_field_u64(text, "evicted") +
		    proc_field_u64(text, "conn_limited") > 0);
	assert_int_equal(proc_field_u64(text, "holes"), 0);
	free(text);
}

static void idle_connections(void **state)
{
	(void)state;
	recover_under(IDLE, "127.0.0.1", 70);
}

static void slowloris(void **state)
{
	(void)state;
	recover_under(SLOWLORIS, "127.0.0.1", 70);
}

static void thousands_of_connections(void **state)
{
	(void)state;
	recover_under(THOUSANDS, "127.0.0.4", 2000);
}

static void reconnect_storm(void **state)
{
	(void)state;
	recover_under(STORM, "127.0.0.5", 80);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(idle_connections, setup, teardown),
		cmocka_unit_test_setup_teardown(slowloris, setup, teardown),
		cmocka_unit_test_setup_teardown(thousands_of_connections, setup,
						teardown),
		cmocka_unit_test_setup_teardown(reconnect_storm, setup, teardown),
	};
	return cmocka_run_group_tests_name("recovery_flood", tests, NULL, NULL);
}
