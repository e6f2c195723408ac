/*
 * Subscriber-side recovery (subscriber/recovering.c, through the public
 * tb_sub_* calls) in one process, over shm, served by the publisher's
 * retention endpoint:
 *  - a late joiner from sequence 1 gets 1..N exactly once, in order, the
 *    missed ones flagged TB_MSG_F_REPLAY, even with the smallest live
 *    buffer (64 KiB), which fills while the replay runs and pauses the
 *    live side instead of dropping anything;
 *  - with no service answering, the gap comes back once as TB_DATA_LOSS
 *    with its exact range after recovery_timeout_ms, and live delivery
 *    goes on after it;
 *  - tb_sub_start_at refuses sequence 0 and a subscriber that has already
 *    delivered;
 *  - gaps queued behind the one being recovered go in one request, and
 *    the frames between them, which come twice, are delivered once.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <tickbus/tickbus.h>

#include "bus/frame.h"
#include "bus/clock.h"
#include "bus/recovery/proto.h"
#include "bus/recovery/server.h"
#include "subscriber/recovering.h"
#include "tests/common/frames.h"
#include "tests/common/proc.h"
#include "tests/common/recovery_src.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void stream_cfg(tb_stream_cfg_t *c, int retention)
{
	tb_stream_cfg_init(c);
	strcpy(c->name, "subrec");
	c->id = 11;
	c->transport = TB_TRANSPORT_SHM;
	c->ring_size = 1u << 20;
	snprintf(c->shm_path, sizeof(c->shm_path), "/dev/shm/tb-test-subrec.%d",
		 (int)getpid());
	strcpy(c->token, "tok");
	if (retention) {
		c->retention = 200000;
		strcpy(c->retention_endpoint.host, "127.0.0.1");
		c->retention_endpoint.port = (uint16_t)proc_free_port();
		c->recovery[0] = c->retention_endpoint;
	} else {
		strcpy(c->recovery[0].host, "127.0.0.1");
		c->recovery[0].port = (uint16_t)proc_free_port(); /* nobody there */
	}
	c->n_recovery = 1;
}

struct got {
	uint64_t next, n, replayed, bad;
};

static void on_msg(void *cd, const tb_msg_t *m)
{
	struct got *g = cd;
	const uint8_t *p = m->data;

	if (m->seq != g->next)
		g->bad++;
	if (m->len != 24 || p[0] != (uint8_t)m->seq)
		g->bad++;
	if (m->flags & TB_MSG_F_REPLAY)
		g->replayed++;
	g->next = m->seq + 1;
	g->n++;
}

/* One poll that must not report a condition; names it if it does. */
static void poll_ok(tb_subscriber_t *sub, struct got *g)
{
	int n = tb_sub_poll(sub, on_msg, g, 64);

	if (n < 0)
		fail_msg("poll: %s at %llu", tb_strerror(n),
			 (unsigned long long)g->next);
}

static void offer(tb_publisher_t *pub, uint64_t seq)
{
	uint8_t payload[24];

	memset(payload, (int)(seq & 0xff), sizeof(payload));
	assert_int_equal(tb_pub_offer(pub, 1, payload, sizeof(payload)),
			 (int64_t)seq);
}

static void test_late_join_small_buffer(void **state)
{
	tb_stream_cfg_t c;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	struct got g = {1, 0, 0, 0};
	uint64_t seq = 1, until;

	(void)state;
	stream_cfg(&c, 1);
	c.recovery_buffer = 64u << 10;
	assert_int_equal(tb_publisher_open(&pub, &c), 0);
	for (; seq <= 5000; seq++)
		offer(pub, seq);
	assert_int_equal(tb_subscriber_open(&sub, &c), 0);
	assert_int_equal(tb_sub_start_at(sub, 1), 0);
	until = tb_clock_mono_ms() + 30000;
	/* The first poll finds the gap and starts the replay; a burst of
	 * 1,500 live frames (190 KiB of entries) then overflows the 64 KiB
	 * live buffer while it runs. */
	poll_ok(sub, &g);
	for (; seq <= 6500; seq++)
		offer(pub, seq);
	while (g.next <= 25000 && tb_clock_mono_ms() < until) {
		int n;

		/* Keep publishing while it recovers: 64 KiB holds about 700
		 * live frames, so the buffer fills and the live side waits. */
		if (seq <= 25000) {
			/* 20 us apart: the 1 MiB ring holds 16,384 of these
			 * frames, a third of a second, far more than a
			 * recovery round trip */
			struct timespec ts = {0, 20000};

			offer(pub, seq++);
			nanosleep(&ts, NULL);
		}
		n = tb_sub_poll(sub, on_msg, &g, 64);
		if (n < 0 && n != TB_NOT_CONNECTED)
			fail_msg("poll: %s at %llu", tb_strerror(n), (unsigned long long)g.next);
	}
	assert_int_equal(g.next, 25001);
	assert_int_equal(g.n, 25000);
	assert_int_equal(g.bad, 0);
	print_message("replayed %llu of 25000\n", (unsigned long long)g.replayed);
	assert_true(g.replayed > 5000); /* the overflow was replayed too */
	assert_int_equal(tb_sub_recovering(sub), 0);
	assert_int_equal(tb_sub_start_at(sub, 1), TB_ESTATE);
	tb_subscriber_close(sub);
	tb_publisher_close(pub);
	unlink(c.shm_path);
}

static void test_no_service_is_exact_data_loss(void **state)
{
	tb_stream_cfg_t c;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	struct got g = {101, 0, 0, 0};
	uint64_t first = 0, last = 0, until, t0;
	int losses = 0;

	(void)state;
	stream_cfg(&c, 0);
	c.recovery_timeout_ms = 300;
	assert_int_equal(tb_publisher_open(&pub, &c), 0);
	for (uint64_t s = 1; s <= 100; s++)
		offer(pub, s);
	assert_int_equal(tb_subscriber_open(&sub, &c), 0);
	assert_int_equal(tb_sub_start_at(sub, 0), TB_EINVAL);
	assert_int_equal(tb_sub_start_at(sub, 1), 0);
	assert_int_equal(tb_sub_loss(sub, &first, &last), TB_ENOENT);
	for (uint64_t s = 101; s <= 200; s++)
		offer(pub, s);
	t0 = tb_clock_mono_ms();
	until = t0 + 30000;
	while (g.next <= 200 && tb_clock_mono_ms() < until) {
		int n = tb_sub_poll(sub, on_msg, &g, 64);

		if (n == TB_DATA_LOSS) {
			losses++;
			assert_int_equal(g.n, 0); /* nothing before the loss */
			assert_int_equal(tb_sub_loss(sub, &first, &last), 0);
		} else {
			assert_true(n >= 0);
		}
	}
	assert_int_equal(losses, 1);
	assert_int_equal(first, 1);
	assert_int_equal(last, 100);
	assert_true(tb_clock_mono_ms() - t0 >= 250); /* it did try for its time */
	assert_int_equal(g.n, 100);
	assert_int_equal(g.next, 201);
	assert_int_equal(g.bad, 0);
	assert_int_equal(g.replayed, 0);
	tb_subscriber_close(sub);
	tb_publisher_close(pub);
	unlink(c.shm_path);
}

/* A late joiner on a quiet stream: nothing new is published after it
 * joins, yet it catches up (its first idle poll asks the service up to the
 * latest), and later live messages follow exactly once. */
static void test_late_join_quiet_stream(void **state)
{
	tb_stream_cfg_t c;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	struct got g = {1, 0, 0, 0};
	uint64_t until;

	(void)state;
	stream_cfg(&c, 1);
	assert_int_equal(tb_publisher_open(&pub, &c), 0);
	for (uint64_t s = 1; s <= 3000; s++)
		offer(pub, s);
	assert_int_equal(tb_subscriber_open(&sub, &c), 0);
	assert_int_equal(tb_sub_start_at(sub, 1), 0);
	until = tb_clock_mono_ms() + 20000;
	while (g.next <= 3000 && tb_clock_mono_ms() < until)
		poll_ok(sub, &g);
	assert_int_equal(g.n, 3000);
	assert_int_equal(g.replayed, 3000);
	assert_int_equal(g.bad, 0);
	for (uint64_t s = 3001; s <= 3100; s++)
		offer(pub, s);
	until = tb_clock_mono_ms() + 20000;
	while ((g.next <= 3100 || tb_sub_recovering(sub)) &&
	       tb_clock_mono_ms() < until)
		poll_ok(sub, &g);
	assert_int_equal(g.n, 3100);
	assert_int_equal(g.next, 3101);
	assert_int_equal(g.bad, 0);
	assert_int_equal(g.replayed, 3000);
	tb_subscriber_close(sub);
	tb_publisher_close(pub);
	unlink(c.shm_path);
}


/* A recovery service in this process, holding 1..last of one epoch, whose
 * first answer takes 300 ms: long enough for more gaps to queue behind. */
/*
 * Gap 1..100 is recovered slowly while the ring laps the reader twice, so
 * two more gaps queue behind it, with ten live frames after each.  The
 * service holds 1..`held`.  Returns the requests it answered; checks
 * that every sequence came once, in order, and that what the service
 * lacks (held+1 up to the end of the last gap) is one exact TB_DATA_LOSS.
 */
static uint64_t queued_gaps(uint64_t held)
{
	tb_stream_cfg_t c;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	tb_recovery_server_t *srv;
	tb_recovery_server_stats_t st;
	/* Holding 1..held, 300 ms to give its first answer: long enough
	 * for more gaps to queue behind. */
	recovery_src_t x = {.first = 1, .payload = 24,
			    .first_read_delay_ms = 300};
	struct got g = {1, 0, 0, 0};
	uint64_t seq = 1, until, last = 4000, gap3_first = 0, gap3_last = 0;
	uint64_t lost_first = 0, lost_last = 0;
	int laps = 0, losses = 0;

	stream_cfg(&c, 0);
	c.recovery_timeout_ms = 1000;
	c.ring_size = 64u << 10; /* 1,024 frames: easy to lap */
	assert_int_equal(tb_publisher_open(&pub, &c), 0);
	x.epoch = tb_pub_epoch(pub);
	x.last = held;
	x.stream_id = c.id;
	assert_int_equal(recovery_src_serve(&srv, &x, "tok", NULL), 0);
	c.recovery[0].port = tb_recovery_server_port(srv);

	for (; seq <= 100; seq++)
		offer(pub, seq);
	assert_int_equal(tb_subscriber_open(&sub, &c), 0);
	assert_int_equal(tb_sub_start_at(sub, 1), 0);
	for (; seq <= 110; seq++)
		offer(pub, seq);
	/* Gap 1..100: the first job, whose answer is slow. */
	poll_ok(sub, &g);
	assert_int_equal(tb_sub_recovering(sub), 1);
	/* Meanwhile the ring laps the reader twice: two more gaps queue in
	 * the live buffer behind the first, each followed by ten live
	 * frames.  (A lapped shm reader jumps to the tail; the next frame
	 * closes the range, on its own poll, and is read on the next.) */
	for (int lap = 0; lap < 2; lap++) {
		uint64_t end = seq + 1500;

		gap3_first = seq;
		for (; seq < end; seq++)
			offer(pub, seq);
		poll_ok(sub, &g);
		gap3_last = seq - 1;
		for (end = seq + 10; seq < end; seq++)
			offer(pub, seq);
		poll_ok(sub, &g);
		poll_ok(sub, &g);
	}
	for (; seq <= last; seq++)
		offer(pub, seq);
	until = tb_clock_mono_ms() + 20000;
	while ((g.next <= last || tb_sub_recovering(sub)) &&
	       tb_clock_mono_ms() < until) {
		int n = tb_sub_poll(sub, on_msg, &g, 64);

		if (n == TB_LAPPED) {
			laps++;
		} else if (n == TB_DATA_LOSS) {
			losses++;
			assert_int_equal(tb_sub_loss(sub, &lost_first, &lost_last), 0);
			g.next = lost_last + 1;
		} else if (n < 0) {
			fail_msg("poll: %s at %llu", tb_strerror(n),
				 (unsigned long long)g.next);
		}
	}
	assert_int_equal(laps, 0); /* recovered, never returned */
	assert_int_equal(g.next, last + 1);
	assert_int_equal(g.bad, 0);
	if (held >= gap3_last) {
		assert_int_equal(losses, 0);
		assert_int_equal(g.n, last);
	} else {
		/* Exactly what no one holds and the live buffer lacks:
		 * the live frames before and after it were delivered. */
		uint64_t from = held + 1 > gap3_first ? held + 1 : gap3_first;

		assert_int_equal(losses, 1);
		assert_int_equal(lost_first, from);
		assert_int_equal(lost_last, gap3_last);
		assert_int_equal(g.n, last - (gap3_last - from + 1));
	}
	tb_recovery_server_stats(srv, &st);
	print_message("requests %llu, frames served %llu, replayed %llu\n",
		      (unsigned long long)st.requests,
		      (unsigned long long)st.frames,
		      (unsigned long long)g.replayed);
	tb_subscriber_close(sub);
	tb_recovery_server_close(srv);
	tb_publisher_close(pub);
	unlink(c.shm_path);
	return st.requests;
}

static void test_queued_gaps_share_a_request(void **state)
{
	(void)state;
	/* One for 1..100; one for both laps (three without coalescing). */
	assert_int_equal(queued_gaps(4000), 2);
}

/* The shared request runs into what the service lacks from among the
 * live frames between the gaps (1611..1620; it holds up to 1615): only
 * the last gap is lost, not those live frames. */
static void test_shared_request_loses_only_the_gap(void **state)
{
	(void)state;
	queued_gaps(1615);
}

/* The publisher published 1..3000 and is gone; a service still holds
 * them.  A subscriber that joins now from 1 has no epoch to attach to,
 * yet gets all of them: its probe asks for the service's newest epoch. */
static void test_late_join_after_publisher_exit(void **state)
{
	tb_stream_cfg_t c;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	tb_recovery_server_t *srv;
	recovery_src_t x = {.first = 1, .last = 3000, .payload = 24};
	struct got g = {1, 0, 0, 0};
	uint64_t until;

	(void)state;
	stream_cfg(&c, 0);
	assert_int_equal(tb_publisher_open(&pub, &c), 0);
	for (uint64_t s = 1; s <= 3000; s++)
		offer(pub, s);
	x.epoch = tb_pub_epoch(pub);
	x.stream_id = c.id;
	assert_int_equal(tb_publisher_close(pub), 0);
	assert_int_equal(recovery_src_serve(&srv, &x, "tok", NULL), 0);
	c.recovery[0].port = tb_recovery_server_port(srv);
	assert_int_equal(tb_subscriber_open(&sub, &c), 0);
	assert_int_equal(tb_sub_start_at(sub, 1), 0);
	until = tb_clock_mono_ms() + 20000;
	while (g.next <= 3000 && tb_clock_mono_ms() < until) {
		int n = tb_sub_poll(sub, on_msg, &g, 64);

		if (n < 0 && n != TB_NOT_CONNECTED && n != TB_CLOSED)
			fail_msg("poll: %s", tb_strerror(n));
	}
	assert_int_equal(g.n, 3000);
	assert_int_equal(g.replayed, 3000);
	assert_int_equal(g.bad, 0);
	assert_int_equal(tb_sub_epoch(sub), 0); /* the transport never attached */
	tb_subscriber_close(sub);
	tb_recovery_server_close(srv);
	unlink(c.shm_path);
}

/* The recovery connection is made and authenticated when the subscriber
 * opens, before any gap, and kept: the gaps that follow use it. */
static void test_connection_made_at_open_and_kept(void **state)
{
	tb_stream_cfg_t c;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	tb_recovery_server_t *srv;
	tb_recovery_server_stats_t st;
	recovery_src_t x = {.first = 1, .last = 100000, .payload = 24};
	struct got g = {1, 0, 0, 0};
	uint64_t until, seq = 1;

	(void)state;
	stream_cfg(&c, 0);
	assert_int_equal(tb_publisher_open(&pub, &c), 0);
	x.epoch = tb_pub_epoch(pub);
	x.stream_id = c.id;
	assert_int_equal(recovery_src_serve(&srv, &x, "tok", NULL), 0);
	c.recovery[0].port = tb_recovery_server_port(srv);
	/* 1..50 go by before the subscriber attaches (at the live end). */
	for (; seq <= 50; seq++)
		offer(pub, seq);
	assert_int_equal(tb_subscriber_open(&sub, &c), 0);
	until = tb_clock_mono_ms() + 5000;
	do {
		usleep(1000);
		tb_recovery_server_stats(srv, &st);
	} while (st.authenticated == 0 && tb_clock_mono_ms() < until);
	assert_int_equal(st.authenticated, 1);
	assert_int_equal(st.requests, 0);
	/* Then it asks for them: a gap, recovered on that connection. */
	assert_int_equal(tb_sub_start_at(sub, 1), 0);
	for (; seq <= 60; seq++)
		offer(pub, seq);
	until = tb_clock_mono_ms() + 20000;
	while (g.next <= 60 && tb_clock_mono_ms() < until)
		poll_ok(sub, &g);
	assert_int_equal(g.n, 60);
	assert_int_equal(g.bad, 0);
	tb_recovery_server_stats(srv, &st);
	assert_int_equal(st.connections, 1);
	assert_int_equal(st.authenticated, 1);
	assert_true(st.served >= 1);
	tb_subscriber_close(sub);
	tb_recovery_server_close(srv);
	tb_publisher_close(pub);
	unlink(c.shm_path);
}

/* ------------------------------------------- gaps asked by the poll thread */

/* Waits until the server has authenticated `n` connections. */
static void wait_authenticated(tb_recovery_server_t *srv, uint64_t n)
{
	tb_recovery_server_stats_t st;
	uint64_t until = tb_clock_mono_ms() + 5000;

	do {
		usleep(1000);
		tb_recovery_server_stats(srv, &st);
	} while (st.authenticated < n && tb_clock_mono_ms() < until);
	assert_int_equal(st.authenticated, n);
}

/*
 * A service that fails mid-answer: it takes one connection, answers its
 * HELLO, sends the first `frames` frames of the answer to its first
 * REQUEST, then stays silent for hold_ms and closes, its listener too (so
 * that dialling it again is refused).
 */
struct dying {
	int lfd;
	uint16_t port;
	uint32_t stream_id;
	uint64_t epoch;
	int frames, hold_ms;
	_Atomic int requested;
	pthread_t t;
};

static int recv_exact(int fd, void *buf, size_t n)
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

static void *dying_main(void *arg)
{
	struct dying *d = arg;
	tb_recovery_proto_welcome_t w = {.stream_id = d->stream_id,
					 .max_count = 65536, .epoch = d->epoch,
					 .first = 1, .last = 1000000};
	static uint64_t out[4096];
	uint8_t in[sizeof(tb_recovery_proto_wire_hello_t)];
	tb_recovery_proto_msg_t m;
	int fd = accept(d->lfd, NULL, NULL), n;
	size_t len = 0;

	if (fd < 0)
		goto out;
	n = tb_recovery_proto_encode_welcome(out, sizeof(out), &w);
	if (recv_exact(fd, in, sizeof(tb_recovery_proto_wire_hello_t)) < 0 ||
	    send(fd, out, (size_t)n, MSG_NOSIGNAL) != n)
		goto out;
	if (recv_exact(fd, in, sizeof(tb_recovery_proto_wire_request_t)) < 0 ||
	    tb_recovery_proto_decode(in, sizeof(tb_recovery_proto_wire_request_t),
				     &m) < 0)
		goto out;
	d->requested = 1;
	len = (size_t)tb_recovery_proto_encode_begin(out, 64, &m.request);
	/* On the byte stream each frame is exactly its length (56 bytes),
	 * not the space it takes in a ring. */
	for (int i = 0; i < d->frames && i < (int)m.request.count; i++) {
		frames_put((uint8_t *)out + len, d->stream_id,
			   m.request.first + (uint64_t)i, 24, 1, 1, NULL);
		len += TB_FRAME_HDR_LEN + 24;
	}
	send(fd, out, len, MSG_NOSIGNAL);
	if (d->hold_ms)
		usleep((useconds_t)d->hold_ms * 1000);
out:
	if (fd >= 0)
		close(fd);
	close(d->lfd);
	return NULL;
}

static void dying_start(struct dying *d)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);

	d->lfd = socket(AF_INET, SOCK_STREAM, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(d->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(d->lfd, 4), 0);
	getsockname(d->lfd, (struct sockaddr *)&sa, &sl);
	d->port = ntohs(sa.sin_port);
	assert_int_equal(pthread_create(&d->t, NULL, dying_main, d), 0);
}

/*
 * Gap 1..50 of a subscriber with the default idle, whose recovery thread
 * has been idle long enough to park.  `d` (may be NULL) is a failing
 * service listed before the good one.  Every message comes once, in
 * order.  Fills *rs, and *waiting with the polls that returned while the
 * poll thread's own fetch was outstanding (a poll that waited for the
 * service would leave one or two).
 */
static void parked_gap(struct dying *d, uint32_t timeout_ms,
		       tb_recovering_stats_t *rs, uint64_t *waiting)
{
	tb_stream_cfg_t c;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	tb_recovery_server_t *srv;
	recovery_src_t x = {.first = 1, .last = 100000, .payload = 24};
	struct got g = {1, 0, 0, 0};
	uint64_t until, seq = 1, worst = 0;

	*waiting = 0;
	stream_cfg(&c, 0);
	c.recovery_timeout_ms = timeout_ms;
	assert_int_equal(c.idle, TB_IDLE_SPIN_YIELD); /* the default */
	assert_int_equal(tb_publisher_open(&pub, &c), 0);
	x.epoch = tb_pub_epoch(pub);
	x.stream_id = c.id;
	assert_int_equal(recovery_src_serve(&srv, &x, "tok", NULL), 0);
	c.recovery[0].port = tb_recovery_server_port(srv);
	if (d) {
		d->stream_id = c.id;
		d->epoch = x.epoch;
		dying_start(d);
		c.recovery[1] = c.recovery[0];
		c.recovery[0].port = d->port;
		c.n_recovery = 2;
	}
	for (; seq <= 50; seq++)
		offer(pub, seq);
	assert_int_equal(tb_subscriber_open(&sub, &c), 0);
	wait_authenticated(srv, 1);
	/* Both ends of each connection done with its HELLO: the recovery
	 * thread says so after its next check. */
	until = tb_clock_mono_ms() + 5000;
	do {
		usleep(1000);
		tb_recovering_stats(tb_sub_recovering_of(sub), rs);
	} while (rs->connections_up < (uint64_t)c.n_recovery &&
		 tb_clock_mono_ms() < until);
	assert_int_equal(rs->connections_up, c.n_recovery);
	/* Well past the 200 us after which the idle recovery thread parks. */
	usleep(30000);
	assert_int_equal(tb_sub_start_at(sub, 1), 0);
	for (; seq <= 60; seq++)
		offer(pub, seq);
	until = tb_clock_mono_ms() + 20000;
	while ((g.next <= 60 || tb_sub_recovering(sub)) &&
	       tb_clock_mono_ms() < until) {
		uint64_t t0 = tb_clock_mono_ms();

		poll_ok(sub, &g);
		if (tb_clock_mono_ms() - t0 > worst)
			worst = tb_clock_mono_ms() - t0;
		tb_recovering_stats(tb_sub_recovering_of(sub), rs);
		if (rs->quick_fetches == 1 && rs->quick_given_back == 0 &&
		    g.next <= 50)
			++*waiting;
	}
	assert_int_equal(g.n, 60);
	assert_int_equal(g.next, 61);
	assert_int_equal(g.replayed, 50);
	assert_int_equal(g.bad, 0);
	tb_recovering_stats(tb_sub_recovering_of(sub), rs);
	print_message("quick %llu, given back %llu, thread jobs %llu, futex "
		      "wakes %llu, %llu polls while it was outstanding, the "
		      "longest %llu ms\n",
		      (unsigned long long)rs->quick_fetches,
		      (unsigned long long)rs->quick_given_back,
		      (unsigned long long)rs->thread_jobs,
		      (unsigned long long)rs->wake_kicks,
		      (unsigned long long)*waiting, (unsigned long long)worst);
	tb_subscriber_close(sub);
	if (d)
		pthread_join(d->t, NULL);
	tb_recovery_server_close(srv);
	tb_publisher_close(pub);
	unlink(c.shm_path);
}

/* The recovery thread asleep: the poll thread asks itself, and nobody is
 * woken. */
static void test_gap_asked_by_poll_thread(void **state)
{
	tb_recovering_stats_t rs;
	uint64_t waiting;

	(void)state;
	parked_gap(NULL, 5000, &rs, &waiting);
	assert_int_equal(rs.quick_fetches, 1);
	assert_int_equal(rs.quick_given_back, 0);
	assert_int_equal(rs.thread_jobs, 0);
	assert_int_equal(rs.wake_kicks, 0);
}

/* The first service dies after 20 frames of its answer: those are
 * delivered, and the recovery thread (woken for it) fetches the rest from
 * the next service. */
static void test_service_dies_mid_answer(void **state)
{
	struct dying d = {.frames = 20};
	tb_recovering_stats_t rs;
	uint64_t waiting;

	(void)state;
	parked_gap(&d, 5000, &rs, &waiting);
	assert_true(d.requested);
	assert_int_equal(rs.quick_fetches, 1);
	assert_int_equal(rs.quick_given_back, 1);
	assert_int_equal(rs.thread_jobs, 1);
}

/* The first service sends 20 frames and then nothing, holding the
 * connection: no poll waits for it (the application polls on through
 * the silence), and after the I/O timeout (1 s: half of
 * recovery_timeout_ms) the rest comes from the next service. */
static void test_silent_service_given_up(void **state)
{
	struct dying d = {.frames = 20, .hold_ms = 2500};
	tb_recovering_stats_t rs;
	uint64_t waiting;

	(void)state;
	parked_gap(&d, 2000, &rs, &waiting);
	assert_true(waiting >= 10);
	assert_true(d.requested);
	assert_int_equal(rs.quick_fetches, 1);
	assert_int_equal(rs.quick_given_back, 1);
	assert_int_equal(rs.thread_jobs, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gap_asked_by_poll_thread),
		cmocka_unit_test(test_service_dies_mid_answer),
		cmocka_unit_test(test_silent_service_given_up),
		cmocka_unit_test(test_late_join_after_publisher_exit),
		cmocka_unit_test(test_connection_made_at_open_and_kept),
		cmocka_unit_test(test_late_join_small_buffer),
		cmocka_unit_test(test_no_service_is_exact_data_loss),
		cmocka_unit_test(test_late_join_quiet_stream),
		cmocka_unit_test(test_queued_gaps_share_a_request),
		cmocka_unit_test(test_shared_request_loses_only_the_gap),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
