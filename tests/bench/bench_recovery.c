/*
 * bench_recovery - time from gap detection to in-order delivery resuming,
 * for gaps of 1, 100 and 10,000 messages, over shm with the recovery
 * protocol served in process (the publisher's retention endpoint, the same
 * server code tb-recoveryd runs).
 *
 * One run: G messages are published, a subscriber opens at the live
 * position and asks to start G messages back (tb_sub_start_at), one more
 * message is published; the clock starts before the first poll, which
 * finds the gap, and stops when the handler gets that live message, after
 * the G replayed ones.  So the time covers waking the recovery thread, one
 * TCP connection and request, the transfer, the hand-over queue and the
 * delivery of G + 1 messages.
 *
 * Floor, in the same run: one TCP transaction on loopback (connect, send
 * 160 bytes, receive 24, close) against a thread that answers at once,
 * which is the least a request to any recovery service costs.  Reported:
 * median of RUNS runs, and its ratio to the floor's median.
 */
#include <tickbus/tickbus.h>

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RUNS 9
#define PAYLOAD 48

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_u64);
	return v[n / 2];
}

/* ----------------------------------------------------------------- floor */

static int echo_fd;

static void *echo_main(void *arg)
{
	uint8_t buf[160], ans[24] = {0};

	(void)arg;
	for (;;) {
		int fd = accept(echo_fd, NULL, NULL);
		size_t got = 0;

		if (fd < 0)
			return NULL;
		while (got < sizeof(buf)) {
			ssize_t n = recv(fd, buf + got, sizeof(buf) - got, 0);

			if (n <= 0)
				break;
			got += (size_t)n;
		}
		if (got == sizeof(buf) && send(fd, ans, sizeof(ans), MSG_NOSIGNAL) < 0)
			got = 0;
		close(fd);
	}
}

static uint64_t tcp_floor(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	uint64_t t[RUNS * 3];
	pthread_t th;
	uint8_t req[160] = {0}, ans[24];

	echo_fd = socket(AF_INET, SOCK_STREAM, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(echo_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(echo_fd, 16) < 0)
		return 0;
	getsockname(echo_fd, (struct sockaddr *)&sa, &sl);
	pthread_create(&th, NULL, echo_main, NULL);
	for (int i = 0; i < RUNS * 3; i++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
		size_t got = 0;
		uint64_t t0 = now_ns();

		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
		    send(fd, req, sizeof(req), 0) != (ssize_t)sizeof(req))
			return 0;
		while (got < sizeof(ans)) {
			ssize_t n = recv(fd, ans + got, sizeof(ans) - got, 0);

			if (n <= 0)
				break;
			got += (size_t)n;
		}
		close(fd);
		t[i] = now_ns() - t0;
	}
	shutdown(echo_fd, SHUT_RDWR);
	close(echo_fd);
	pthread_join(th, NULL);
	return median(t, RUNS * 3);
}

/* -------------------------------------------------------------- recovery */

struct run {
	uint64_t want;      /* the live message that ends the run */
	uint64_t delivered, replayed, out_of_order, next;
	uint64_t t_end;
};

static void on_msg(void *clientd, const tb_msg_t *m)
{
	struct run *r = clientd;

	if (m->seq != r->next)
		r->out_of_order++;
	r->next = m->seq + 1;
	r->delivered++;
	if (m->flags & TB_MSG_F_REPLAY)
		r->replayed++;
	if (m->seq == r->want)
		r->t_end = now_ns();
}

static uint16_t free_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return 0;
	getsockname(fd, (struct sockaddr *)&sa, &sl);
	close(fd);
	return ntohs(sa.sin_port);
}

static int one_run(tb_publisher_t *pub, const tb_stream_cfg_t *cfg,
		   uint64_t gap, uint64_t *ns)
{
	uint8_t payload[PAYLOAD] = {0};
	tb_subscriber_t *sub;
	tb_idle_t idle;
	struct run r;
	uint64_t first = tb_pub_next_seq(pub), t0, deadline;

	memset(&r, 0, sizeof(r));
	for (uint64_t i = 0; i < gap; i++)
		if (tb_pub_offer(pub, 1, payload, sizeof(payload)) < 0)
			return -1;
	if (tb_subscriber_open(&sub, cfg) < 0)
		return -1;
	if (tb_sub_start_at(sub, first) < 0)
		return -1;
	r.want = (uint64_t)tb_pub_offer(pub, 1, payload, sizeof(payload));
	r.next = first;
	t0 = now_ns();
	deadline = t0 + 10000000000ull;
	tb_idle_init(&idle, TB_IDLE_SPIN_YIELD);
	while (!r.t_end && now_ns() < deadline) {
		int n = tb_sub_poll(sub, on_msg, &r, 1024);

		if (n < 0 && n != TB_NOT_CONNECTED)
			break;
		tb_idle_step(&idle, n > 0 ? n : 0);
	}
	tb_subscriber_close(sub);
	if (!r.t_end || r.out_of_order || r.replayed != gap ||
	    r.delivered != gap + 1) {
		fprintf(stderr, "bench recovery: gap %" PRIu64 ": delivered %"
			PRIu64 " replayed %" PRIu64 " out of order %" PRIu64 "%s\n",
			gap, r.delivered, r.replayed, r.out_of_order,
			r.t_end ? "" : " (timed out)");
		return -1;
	}
	*ns = r.t_end - t0;
	return 0;
}

int main(void)
{
	static const uint64_t gaps[] = {1, 100, 10000};
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	uint64_t floor_ns;
	int status = 0;

	setenv("TICKBUS_QUIET", "1", 0);
	floor_ns = tcp_floor();
	tb_stream_cfg_init(&cfg);
	snprintf(cfg.name, sizeof(cfg.name), "bench_recovery");
	cfg.id = 3;
	cfg.transport = TB_TRANSPORT_SHM;
	cfg.ring_size = 64u << 20;
	snprintf(cfg.shm_path, sizeof(cfg.shm_path), "/dev/shm/tb-bench-recovery.%d",
		 (int)getpid());
	snprintf(cfg.token, sizeof(cfg.token), "bench");
	cfg.retention = 100000;
	snprintf(cfg.retention_endpoint.host, sizeof(cfg.retention_endpoint.host),
		 "127.0.0.1");
	cfg.retention_endpoint.port = free_port();
	cfg.recovery[0] = cfg.retention_endpoint;
	cfg.n_recovery = 1;
	if (tb_publisher_open(&pub, &cfg) < 0) {
		fprintf(stderr, "bench recovery: %s\n", tb_errmsg());
		return 1;
	}
	printf("bench recovery: shm, %d-byte payloads, in-process recovery server "
	       "(publisher retention), median of %d runs\n", PAYLOAD, RUNS);
	printf("bench recovery:   floor: one loopback TCP transaction (connect, "
	       "160 B out, 24 B back) %8.1f us\n", floor_ns / 1e3);
	for (size_t g = 0; g < sizeof(gaps) / sizeof(gaps[0]); g++) {
		uint64_t t[RUNS], m, warm;

		if (one_run(pub, &cfg, gaps[g], &warm) < 0) { /* warm-up */
			status = 1;
			goto out;
		}
		for (int i = 0; i < RUNS; i++) {
			if (one_run(pub, &cfg, gaps[g], &t[i]) < 0) {
				status = 1;
				goto out;
			}
		}
		m = median(t, RUNS);
		printf("bench recovery:   gap %6" PRIu64 ": detection to in-order "
		       "live delivery %9.1f us | %7.1f ns per missing message | "
		       "ratio to floor %.1fx\n", gaps[g], m / 1e3,
		       (double)m / (double)gaps[g], floor_ns ? (double)m / floor_ns : 0.0);
	}
out:
	tb_publisher_close(pub);
	unlink(cfg.shm_path);
	return status;
}
