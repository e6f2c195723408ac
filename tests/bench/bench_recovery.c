/*
 * bench_recovery - time from gap detection to in-order delivery resuming,
 * for gaps of 1, 100 and 10,000 messages, over shm, with the recovery
 * protocol served in process, from memory, on a kept connection: the
 * recovery server (the code tb-recoveryd and every publisher's retention
 * endpoint run) answering from a retention window (publisher/retention.h,
 * what tb-recoveryd keeps of the recent frames).
 *
 * One run: G messages are published (into the ring and the window), a
 * subscriber opens at the live position; once its recovery thread has
 * dialled and authenticated (the server has counted it; a subscriber does
 * that when it opens), it asks to start G messages back
 * (tb_sub_start_at) and one more message is published.  The clock starts
 * before the first poll, which finds the gap, and stops when the handler
 * gets that live message, after the G replayed ones.  So the time covers
 * one request on the kept connection (asked by the poll thread itself, a
 * quick fetch, when it fits in one request: recovering.c), the service's
 * answer, the transfer and the delivery of G + 1 messages.  Below each
 * row: how its gaps were fetched (by the poll thread, or by the recovery
 * thread, and the futex wakes that took).
 *
 * Two kinds of run: with idle = busy-spin the recovery thread never parks
 * (it spins, then yields the core), which is what a desk that spins its
 * subscriber runs; with the default spin-then-yield the run waits 20 ms,
 * until the recovery thread has parked on its futex (idle > 200 us), and
 * the service's thread is asleep too.
 *
 * A third kind: the parked subscriber against a service whose connection
 * threads busy-poll (the server's spin_us = always, tb-recoveryd
 * --spin-us always, a service on cores of its own): the service's side
 * has no wake-up left, so those rows are also given against the warm
 * floor.  They mean that only where the spinning thread has a core of its
 * own: here it runs in the bench's process beside the subscriber's poll
 * thread, and on a 2-core machine with anything else runnable the two
 * share a core, the spinner holding it until the scheduler's tick (a
 * flat 3.9 ms per gap on the 2-core VM at load 1.2, 11 ms at load 10).
 *
 * Cores, as a desk runs it: the poll thread (the bench's main thread,
 * which also publishes) pinned to core 0 by subscriber_core; the
 * subscriber's recovery thread, the service's threads and the floor's
 * answering thread are the library's helpers, started off the pinned
 * core (bus/thread.h), so on core 1.  Unpinned, the kernel woke the
 * service's thread on the poll thread's core half the time, where it
 * waited for the spinning poll thread to be preempted: 100-250 us a gap
 * of 1 against 65 when it did not.
 *
 * Floors, in the same run: one request/response on a kept loopback TCP
 * connection (32 bytes out, the 136 bytes of a one-frame answer back)
 * against a thread that answers at once, back to back, which is the least
 * a request to any recovery service costs; and the same after 20 ms of
 * silence, as the parked runs meet the service (its thread asleep in the
 * kernel, its core perhaps halted).  Reported: median of RUNS runs, its
 * ratio to the floor's median (the cold one's for parked runs), the goal
 * (DESIGN.md section 8) and the figure before the kept connection (issue
 * 15: one connection per fetch, an eventfd wake-up).  The machine is
 * shared: the load average is printed beside.
 *
 * And a floor in place: each awake or parked run is followed by one made
 * the same way (publish, open, wait, the same quiet) up to the moment the
 * gap would be asked, where the poll thread makes one plain request/
 * response on a kept connection to a helper thread that answers at once.
 * On the 2-core PVM guest that costs 2-3x the quiet floor (the first
 * send() after the run's set-up takes 25-60 us in the kernel, whatever
 * the socket: a timeline of the gap's stamps showed it in the quick
 * fetch's send, and a probe send on another connection took it instead),
 * so the gap's ratio to it is what tickbus adds where it stands.
 */
#include <tickbus/tickbus.h>

#include "bus/clock.h"
#include "bus/thread.h"
#include "bus/recovery/server.h"
#include "publisher/retention.h"
#include "subscriber/recovering.h"
#include "tests/common/proc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RUNS 9
#define PAYLOAD 48
#define FLOOR_ROUNDS 2000
#define COLD_ROUNDS 15
#define COLD_IDLE_US 20000
#define QUIET_ROUNDS 100
#define QUIET_NS 1000000
#define TOKEN "bench"
#define STREAM 3
#define POLL_CORE 0

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

static void load_average(const char *when)
{
	char buf[128] = "?";
	FILE *f = fopen("/proc/loadavg", "r");

	if (f) {
		if (!fgets(buf, sizeof(buf), f))
			snprintf(buf, sizeof(buf), "?\n");
		fclose(f);
	}
	printf("bench recovery: load average %s: %s", when, buf);
}

/* ----------------------------------------------------------------- floor */

static int echo_lfd;
static int place_fd = -1; /* the in-place floor's kept connection */

static int recv_n(int fd, void *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t k = recv(fd, (uint8_t *)buf + got, n - got, 0);

		if (k <= 0)
			return -1;
		got += (size_t)k;
	}
	return 0;
}

/* Answers each 32-byte request with 136 bytes at once, on the connection
 * `arg` (an fd + 1), or on the first one accepted when NULL. */
static void *echo_main(void *arg)
{
	uint8_t req[32], ans[136] = {0};
	int fd = arg ? (int)(intptr_t)arg - 1 : accept(echo_lfd, NULL, NULL);
	int one = 1;

	if (fd < 0)
		return NULL;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	while (recv_n(fd, req, sizeof(req)) == 0)
		if (send(fd, ans, sizeof(ans), MSG_NOSIGNAL) != (ssize_t)sizeof(ans))
			break;
	close(fd);
	return NULL;
}

/* The awake recovery thread's idle: sched_yield, over and over. */
static volatile int yield_stop;

static void *yield_main(void *arg)
{
	(void)arg;
	while (!yield_stop)
		sched_yield();
	return NULL;
}

/* Median of FLOOR_ROUNDS request/responses on one kept connection, back
 * to back; (*quiet) the median of QUIET_ROUNDS, each after QUIET_NS of
 * nothing, as the awake runs meet it: the asking thread spinning through
 * the quiet and for the answer (recv without waiting, as the poll thread
 * asks), a thread yielding over and over where the answering thread
 * wakes (as the awake recovery thread does); and (*cold) the median of
 * COLD_ROUNDS on the same connection, each after COLD_IDLE_US of silence,
 * as a gap after a quiet spell meets the service: its thread asleep in
 * the kernel, its core perhaps halted. */
static uint64_t tcp_floor(uint64_t *quiet, uint64_t *cold)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	static uint64_t t[FLOOR_ROUNDS], tq[QUIET_ROUNDS], tc[COLD_ROUNDS];
	uint8_t req[32] = {0}, ans[136];
	pthread_t th, yt;
	int fd, one = 1;

	echo_lfd = socket(AF_INET, SOCK_STREAM, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(echo_lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(echo_lfd, 4) < 0 ||
	    getsockname(echo_lfd, (struct sockaddr *)&sa, &sl) < 0)
		return 0;
	if (tb_thread_start(&th, "bench-echo", echo_main, NULL) < 0)
		return 0;
	fd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return 0;
	for (int i = 0; i < FLOOR_ROUNDS + 100; i++) {
		uint64_t t0 = tb_clock_mono_ns();

		if (send(fd, req, sizeof(req), 0) != (ssize_t)sizeof(req) ||
		    recv_n(fd, ans, sizeof(ans)) < 0)
			return 0;
		if (i >= 100) /* the first hundred warm up */
			t[i - 100] = tb_clock_mono_ns() - t0;
	}
	yield_stop = 0;
	if (tb_thread_start(&yt, "bench-yield", yield_main, NULL) < 0)
		return 0;
	for (int i = 0; i < QUIET_ROUNDS; i++) {
		uint64_t t0 = tb_clock_mono_ns() + QUIET_NS;
		size_t got = 0;

		while (tb_clock_mono_ns() < t0)
			;
		t0 = tb_clock_mono_ns();
		if (send(fd, req, sizeof(req), 0) != (ssize_t)sizeof(req))
			t0 = 0;
		while (t0 && got < sizeof(ans)) {
			ssize_t k = recv(fd, ans + got, sizeof(ans) - got, MSG_DONTWAIT);

			if (k == 0 || (k < 0 && errno != EAGAIN))
				break;
			got += k > 0 ? (size_t)k : 0;
		}
		if (got < sizeof(ans)) {
			yield_stop = 1;
			pthread_join(yt, NULL);
			return 0;
		}
		tq[i] = tb_clock_mono_ns() - t0;
	}
	yield_stop = 1;
	pthread_join(yt, NULL);
	*quiet = median(tq, QUIET_ROUNDS);
	for (int i = 0; i < COLD_ROUNDS; i++) {
		uint64_t t0;

		usleep(COLD_IDLE_US);
		t0 = tb_clock_mono_ns();
		if (send(fd, req, sizeof(req), 0) != (ssize_t)sizeof(req) ||
		    recv_n(fd, ans, sizeof(ans)) < 0)
			return 0;
		tc[i] = tb_clock_mono_ns() - t0;
	}
	*cold = median(tc, COLD_ROUNDS);
	close(fd);
	pthread_join(th, NULL);
	/* The in-place floor's connection (one_run), answered the same way
	 * by a helper thread that lives as long as the bench. */
	place_fd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(place_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(place_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    (fd = accept(echo_lfd, NULL, NULL)) < 0 ||
	    tb_thread_start(&th, "bench-echo", echo_main,
			    (void *)(intptr_t)(fd + 1)) < 0 ||
	    pthread_detach(th) != 0) {
		close(place_fd);
		place_fd = -1;
	}
	close(echo_lfd);
	return median(t, FLOOR_ROUNDS);
}

/* ------------------------------------------------- the window and server */

static tb_retention_window_t window;
static uint64_t epoch;

static void win_bounds(void *sd, uint64_t *e, uint64_t *first, uint64_t *last)
{
	tb_retention_window_bounds(sd, e, first, last);
}

static int win_read(void *sd, uint64_t first, int max, tb_store_read_fn fn,
		    void *clientd)
{
	return tb_retention_window_read(sd, epoch, first, max, fn, clientd);
}

static int win_copy(void *sd, uint64_t first, int max, void *dst, size_t cap,
		    size_t *len)
{
	return tb_retention_window_copy(sd, epoch, first, max, dst, cap, len);
}

/* Publishes one message, and keeps its frame in the window. */
static int64_t publish(tb_publisher_t *pub)
{
	uint64_t buf[(TB_FRAME_HDR_LEN + PAYLOAD) / 8 + 1];
	tb_frame_hdr_t *f = (tb_frame_hdr_t *)buf;
	uint8_t payload[PAYLOAD];
	int64_t seq;

	memset(payload, 0x5a, sizeof(payload));
	seq = tb_pub_offer(pub, 1, payload, sizeof(payload));
	if (seq < 0)
		return seq;
	tb_frame_init(f, PAYLOAD, 1, STREAM, (uint64_t)seq, 0);
	memcpy(tb_frame_payload(f), payload, PAYLOAD);
	tb_retention_window_append(&window, epoch, f);
	return seq;
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
		r->t_end = tb_clock_mono_ns();
}

/* How the runs' gaps were fetched, summed. */
static tb_recovering_stats_t how;

/* One request/response on the in-place floor's connection, asked and
 * awaited as the poll thread asks a quick fetch (send, then recv without
 * waiting until the answer is whole): its time, or 0. */
static uint64_t place_request(void)
{
	uint8_t req[32] = {0}, ans[136];
	uint64_t t0 = tb_clock_mono_ns();
	size_t got = 0;

	if (send(place_fd, req, sizeof(req), MSG_NOSIGNAL) != (ssize_t)sizeof(req))
		return 0;
	while (got < sizeof(ans)) {
		ssize_t k = recv(place_fd, ans + got, sizeof(ans) - got, MSG_DONTWAIT);

		if (k == 0 || (k < 0 && errno != EAGAIN))
			return 0;
		got += k > 0 ? (size_t)k : 0;
	}
	return tb_clock_mono_ns() - t0;
}

/* One run of `gap` (*ns: detection to the live message), or with `place`
 * the same run up to the moment the gap would be asked, where the poll
 * thread makes one plain request/response instead (*ns: its time). */
static int one_run(tb_publisher_t *pub, tb_recovery_server_t *srv,
		   const tb_stream_cfg_t *cfg, uint64_t gap, int place,
		   uint64_t *ns)
{
	tb_recovery_server_stats_t st;
	tb_subscriber_t *sub;
	tb_idle_t idle;
	struct run r;
	uint64_t first = tb_pub_next_seq(pub), t0, deadline, authenticated;

	memset(&r, 0, sizeof(r));
	for (uint64_t i = 0; i < gap; i++)
		if (publish(pub) < 0)
			return -1;
	tb_recovery_server_stats(srv, &st);
	authenticated = st.authenticated;
	if (tb_subscriber_open(&sub, cfg) < 0)
		return -1;
	/* Its recovery thread dials and authenticates when it opens. */
	deadline = tb_clock_mono_ms() + 5000;
	do {
		usleep(200);
		tb_recovery_server_stats(srv, &st);
	} while (st.authenticated == authenticated && tb_clock_mono_ms() < deadline);
	/* The WELCOME read: the connection is up and kept, as the recovery
	 * thread's check (every 100 ms) says; asked before that, on a loaded
	 * machine, the gap would go to the recovery thread, which is still
	 * dialling (a first gap at start-up, not the kept connection this
	 * measures).  Then, with spin-then-yield, well past the 200 us after
	 * which the recovery thread parks. */
	do {
		tb_recovering_stats_t up;

		tb_recovering_stats(tb_sub_recovering_of(sub), &up);
		if (up.connections_up > 0)
			break;
		usleep(1000);
	} while (tb_clock_mono_ms() < deadline);
	if (cfg->idle == TB_IDLE_BUSY_SPIN) {
		/* A desk that spins its subscriber polls without pause:
		 * 1 ms of polls (nothing new comes), not a sleep, after
		 * which the gap met a core just woken from halt. */
		uint64_t until = tb_clock_mono_ns() + 1000000;

		while (tb_clock_mono_ns() < until) {
			int n = tb_sub_poll(sub, on_msg, &r, 1024);

			if (n < 0 && n != TB_NOT_CONNECTED)
				return -1;
		}
	} else {
		usleep(20000);
	}
	if (place) {
		*ns = place_request();
		tb_subscriber_close(sub);
		return *ns ? 0 : -1;
	}
	if (tb_sub_start_at(sub, first) < 0)
		return -1;
	r.want = (uint64_t)publish(pub);
	r.next = first;
	t0 = tb_clock_mono_ns();
	deadline = t0 + 10000000000ull;
	tb_idle_init(&idle, TB_IDLE_SPIN_YIELD);
	while (!r.t_end && tb_clock_mono_ns() < deadline) {
		int n = tb_sub_poll(sub, on_msg, &r, 1024);

		if (n < 0 && n != TB_NOT_CONNECTED)
			break;
		tb_idle_step(&idle, n > 0 ? n : 0);
	}
	{
		tb_recovering_stats_t rs;

		tb_recovering_stats(tb_sub_recovering_of(sub), &rs);
		how.quick_fetches += rs.quick_fetches;
		how.quick_given_back += rs.quick_given_back;
		how.thread_jobs += rs.thread_jobs;
		how.wake_kicks += rs.wake_kicks;
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

/* Median of RUNS runs of `gap` (after one to warm up), in ns; 0 on error. */
/* Median of RUNS runs of `gap` (after one to warm up), in ns; 0 on error.
 * With `place`, each run is followed by one that makes the in-place
 * floor's request instead, and *place is their median. */
static uint64_t runs_of(tb_publisher_t *pub, tb_recovery_server_t *srv,
			const tb_stream_cfg_t *cfg, uint64_t gap, uint64_t *place)
{
	uint64_t t[RUNS], tp[RUNS], warm;

	if (one_run(pub, srv, cfg, gap, 0, &warm) < 0)
		return 0;
	for (int i = 0; i < RUNS; i++) {
		if (one_run(pub, srv, cfg, gap, 0, &t[i]) < 0)
			return 0;
		if (place && one_run(pub, srv, cfg, gap, 1, &tp[i]) < 0)
			return 0;
	}
	if (place)
		*place = median(tp, RUNS);
	return median(t, RUNS);
}

int main(int argc, char **argv)
{
	static const struct {
		uint64_t gap;
		double goal_us, before_us;
	} gaps[] = {{1, 30, 333}, {100, 50, 127}, {10000, 1000, 3500}};
	tb_recovery_server_source_t src;
	tb_recovery_server_cfg_t rcfg;
	tb_recovery_server_t *srv = NULL, *spin_srv = NULL;
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	uint64_t floor_ns, quiet_ns = 0, cold_ns = 0;
	int status = 0;

	setenv("TICKBUS_QUIET", "1", 0);
	load_average("at start");
	/* Before any thread starts: the helpers then keep off it. */
	if (tb_thread_pin(POLL_CORE) < 0) {
		fprintf(stderr, "bench recovery: %s\n", tb_errmsg());
		return 1;
	}
	floor_ns = tcp_floor(&quiet_ns, &cold_ns);
	tb_stream_cfg_init(&cfg);
	snprintf(cfg.name, sizeof(cfg.name), "bench_recovery");
	cfg.id = STREAM;
	cfg.transport = TB_TRANSPORT_SHM;
	cfg.ring_size = 64u << 20;
	cfg.subscriber_core = POLL_CORE;
	snprintf(cfg.shm_path, sizeof(cfg.shm_path), "/dev/shm/tb-bench-recovery.%d",
		 (int)getpid());
	snprintf(cfg.token, sizeof(cfg.token), TOKEN);
	if (tb_publisher_open(&pub, &cfg) < 0 ||
	    tb_retention_window_init(&window, 64u << 20, STREAM) < 0) {
		fprintf(stderr, "bench recovery: %s\n", tb_errmsg());
		return 1;
	}
	epoch = tb_pub_epoch(pub);
	memset(&src, 0, sizeof(src));
	src.stream_id = STREAM;
	src.token = TOKEN;
	src.bounds = win_bounds;
	src.read = win_read;
	src.copy = win_copy;
	src.sd = &window;
	tb_recovery_server_cfg_init(&rcfg);
	if (tb_recovery_server_open(&srv, &rcfg, &src, 1) < 0) {
		fprintf(stderr, "bench recovery: %s\n", tb_errmsg());
		status = 1;
		goto out;
	}
	rcfg.spin_us = TB_RECOVERY_SERVER_SPIN_ALWAYS;
	if (tb_recovery_server_open(&spin_srv, &rcfg, &src, 1) < 0) {
		fprintf(stderr, "bench recovery: %s\n", tb_errmsg());
		status = 1;
		goto out;
	}
	snprintf(cfg.recovery[0].host, sizeof(cfg.recovery[0].host), "127.0.0.1");
	cfg.recovery[0].port = tb_recovery_server_port(srv);
	cfg.n_recovery = 1;
	printf("bench recovery: shm, %d-byte payloads, in-process recovery server "
	       "answering from a retention window, kept connection, median of "
	       "%d runs; poll thread on core %d, the other threads off it\n",
	       PAYLOAD, RUNS, POLL_CORE);
	printf("bench recovery:   floor: one request/response on a kept loopback "
	       "TCP connection (32 B out, 136 B back) %8.1f us\n", floor_ns / 1e3);
	printf("bench recovery:   floor, quiet: the same after %u ms of nothing, "
	       "the asker spinning, a thread yielding on the answerer's core "
	       "(as the awake runs meet it) %8.1f us\n", QUIET_NS / 1000000,
	       quiet_ns / 1e3);
	printf("bench recovery:   floor, cold: the same after %u ms of silence "
	       "(the answering thread asleep) %8.1f us\n", COLD_IDLE_US / 1000,
	       cold_ns / 1e3);
	if (argc == 3) {
		/* bench_recovery GAP RUNS: that gap only, awake, for a
		 * profiler. */
		uint64_t gap = strtoull(argv[1], NULL, 10), t;
		int n = atoi(argv[2]);

		cfg.idle = TB_IDLE_BUSY_SPIN;
		for (int i = 0; i < n && status == 0; i++)
			if (one_run(pub, srv, &cfg, gap, 0, &t) < 0)
				status = 1;
			else
				printf("%.1f us\n", t / 1e3);
		goto out;
	}
	for (int mode = 0; mode < 3; mode++) {
		/* 0: awake; 1: parked; 2: parked, the service spinning. */
		int parked = mode > 0, spinning = mode == 2;
		tb_recovery_server_t *by = spinning ? spin_srv : srv;

		cfg.idle = parked ? TB_IDLE_SPIN_YIELD : TB_IDLE_BUSY_SPIN;
		cfg.recovery[0].port = tb_recovery_server_port(by);
		printf("bench recovery: %s\n", spinning ?
		       "parked subscriber, service spinning (the recovery "
		       "thread parked as below; the service's connection "
		       "thread busy-polls, spin_us = always: never asleep)" :
		       parked ?
		       "recovery thread parked (idle = spin-then-yield, the "
		       "default; gap after 20 ms idle)" :
		       "recovery thread awake (idle = busy-spin: it never parks)");
		for (size_t g = 0; g < sizeof(gaps) / sizeof(gaps[0]); g++) {
			uint64_t m, place = 0;

			memset(&how, 0, sizeof(how));
			m = runs_of(pub, by, &cfg, gaps[g].gap,
				    spinning || place_fd < 0 ? NULL : &place);

			if (m == 0) {
				status = 1;
				goto out;
			}
			printf("bench recovery:   gap %6" PRIu64 ": detection to "
			       "in-order live delivery %8.1f us | %7.1f ns per "
			       "missing message | %5.1fx %sfloor | goal %5.0f us%s "
			       "| before %5.0f us\n", gaps[g].gap, m / 1e3,
			       (double)m / (double)gaps[g].gap,
			       parked ? (cold_ns ? (double)m / cold_ns : 0.0) :
			       (floor_ns ? (double)m / floor_ns : 0.0),
			       parked ? "cold " : "",
			       gaps[g].goal_us,
			       m / 1e3 <= gaps[g].goal_us ? " (met)" : " (missed)",
			       gaps[g].before_us);
			if (spinning)
				printf("bench recovery:     %5.1fx the warm floor "
				       "(no wake-up on the service's side)\n",
				       floor_ns ? (double)m / floor_ns : 0.0);
			if (!parked)
				printf("bench recovery:     %5.1fx the quiet floor "
				       "(a request after %u ms of nothing)\n",
				       quiet_ns ? (double)m / quiet_ns : 0.0,
				       QUIET_NS / 1000000);
			if (place)
				printf("bench recovery:     %5.1fx the floor in "
				       "place (%.1f us: at the moment the gap "
				       "is asked, in a run like this one, the "
				       "poll thread's one request/response to a "
				       "thread that answers at once)\n",
				       (double)m / place, place / 1e3);
			printf("bench recovery:     %" PRIu64 " gaps asked by the "
			       "poll thread (%" PRIu64 " finished by the recovery "
			       "thread), %" PRIu64 " by the recovery thread, %"
			       PRIu64 " futex wakes\n", how.quick_fetches,
			       how.quick_given_back, how.thread_jobs,
			       how.wake_kicks);
		}
	}
	load_average("at end");
out:
	tb_recovery_server_close(spin_srv);
	tb_recovery_server_close(srv);
	tb_publisher_close(pub);
	tb_retention_window_free(&window);
	unlink(cfg.shm_path);
	return status;
}
