/*
 * The recovery server's admission and answers, over loopback TCP, from raw
 * sockets (so each test can misbehave as an attacker would) and from the
 * real client:
 *  - a pending connection's HELLO deadline is not extended by its bytes;
 *  - idle connections never take a slot reserved for authenticated
 *    clients: 70 of them, and a real client is served at once;
 *  - one address's pending connections are capped, the oldest closed;
 *  - one address's connection rate is capped;
 *  - wrong tokens are answered only after a doubling delay, counted, and a
 *    right token from the same address still gets in at once;
 *  - every slot taken: BUSY with a retry delay;
 *  - log lines held back are counted;
 *  - a connection is authenticated once: HELLO, then pipelined requests
 *    answered in order; a request for another stream is refused and the
 *    connection closed;
 *  - an earlier epoch is served by a source that keeps one;
 *  - a range the source lost to damage: an answer stops before it
 *    (TRUNCATED), a request that starts in it is refused LOST with the
 *    range's end, and the frames after it are served; a connection of
 *    version 2 is answered in version 2 throughout, never with LOST.
 *  - with spin_us (a connection's thread busy-polls for its next request):
 *    requests are answered as without it, pipelined or one at a time, after
 *    a spin that ran out or one that never does; close ends spinning
 *    connections promptly; the idle and I/O timeouts still close them; a
 *    spin_us over the maximum is refused, and so are tb-recoveryd's bad
 *    --spin-us values, with a message naming the option.
 * Source addresses 127.0.0.2 and up stand for other hosts: the whole of
 * 127/8 is the loopback.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/clock.h"
#include "bus/recovery/client.h"
#include "bus/recovery/server.h"
#include "tests/common/proc.h"
#include "tests/common/recovery_damaged.h"
#include "tests/common/recovery_src.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define EPOCH 41u
#define STREAM 6u
#define TOKEN "t0ken"

static recovery_src_t held = {.stream_id = STREAM, .epoch = EPOCH,
			      .first = 1, .last = 5000, .payload = 40};

static tb_recovery_server_t *serve(tb_recovery_server_cfg_t *cfg)
{
	tb_recovery_server_t *srv;

	assert_int_equal(recovery_src_serve(&srv, &held, TOKEN, cfg), 0);
	return srv;
}

static void cfg_init(tb_recovery_server_cfg_t *cfg)
{
	tb_recovery_server_cfg_init(cfg);
	cfg->log_interval_ms = 1000;
}

static tb_recovery_server_stats_t stats(tb_recovery_server_t *srv)
{
	tb_recovery_server_stats_t st;

	tb_recovery_server_stats(srv, &st);
	return st;
}

/* A blocking TCP connection to the server from source address `from`
 * ("127.0.0.x"). */
static int dial_from(const char *from, uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET}, me = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(inet_pton(AF_INET, from, &me.sin_addr), 1);
	assert_int_equal(bind(fd, (struct sockaddr *)&me, sizeof(me)), 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons(port);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

static void send_bytes(int fd, const void *buf, size_t n)
{
	assert_int_equal(send(fd, buf, n, MSG_NOSIGNAL), (ssize_t)n);
}

static int hello(uint8_t *buf, const char *token, uint32_t stream)
{
	tb_recovery_proto_hello_t h;

	memset(&h, 0, sizeof(h));
	h.stream_id = stream;
	snprintf(h.token, sizeof(h.token), "%s", token);
	return tb_recovery_proto_encode_hello(buf, TB_RECOVERY_PROTO_MSG_MAX, &h);
}

/* Waits up to `ms` for `fd` to be closed by the server; the milliseconds
 * it took, or -1 if it stayed open.  Whatever the server sent first is
 * read and dropped. */
static int64_t closed_within(int fd, uint64_t ms)
{
	uint64_t t0 = tb_clock_mono_ms();
	uint8_t buf[4096];

	for (;;) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		uint64_t now = tb_clock_mono_ms();
		ssize_t n;

		if (now - t0 >= ms)
			return -1;
		if (poll(&pf, 1, (int)(ms - (now - t0))) <= 0)
			continue;
		n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN))
			return (int64_t)(tb_clock_mono_ms() - t0);
	}
}

/* Reads one whole protocol message within `ms`: 0, or -1. */
static int read_msg(int fd, tb_recovery_proto_msg_t *m, uint64_t ms)
{
	uint8_t buf[TB_RECOVERY_PROTO_MSG_MAX];
	size_t have = 0;
	uint64_t until = tb_clock_mono_ms() + ms;

	for (;;) {
		int need = tb_recovery_proto_frame_need(buf, have);
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		ssize_t n;

		if (need < 0)
			return -1;
		if (need == 0)
			return tb_recovery_proto_decode(buf, have, m) > 0 ? 0 : -1;
		if (tb_clock_mono_ms() >= until ||
		    poll(&pf, 1, (int)(until - tb_clock_mono_ms())) <= 0)
			return -1;
		n = recv(fd, buf + have, (size_t)need, 0);
		if (n <= 0)
			return -1;
		have += (size_t)n;
	}
}

static int count_frame(void *cd, const tb_frame_hdr_t *f)
{
	(*(uint64_t *)cd) += f->seq != 0;
	return 0;
}

/* The real client, one request of `count` frames from 100: 0 when all
 * came, with the milliseconds it took in *ms. */
static int fetch(uint16_t port, const char *token, uint32_t count, uint64_t *ms)
{
	tb_endpoint_t ep;
	tb_recovery_proto_request_t q = {.stream_id = STREAM, .count = count,
					 .epoch = EPOCH, .first = 100};
	tb_recovery_proto_reject_t rej;
	uint64_t t0 = tb_clock_mono_ms(), n = 0;
	int rc;

	memset(&ep, 0, sizeof(ep));
	strcpy(ep.host, "127.0.0.1");
	ep.port = port;
	rc = tb_recovery_client_fetch_one(&ep, token, &q, 5000, count_frame, &n,
					  &rej, NULL);
	if (ms)
		*ms = tb_clock_mono_ms() - t0;
	return rc == (int)count && n == count ? 0 : rc < 0 ? rc : -1;
}

/* ------------------------------------------------------------------ tests */

static void hello_deadline_is_not_extended_by_bytes(void **state)
{
	tb_recovery_server_cfg_t cfg;
	tb_recovery_server_t *srv;
	uint8_t h[TB_RECOVERY_PROTO_MSG_MAX];
	uint64_t t0;
	int fd, n;

	(void)state;
	cfg_init(&cfg);
	cfg.hello_timeout_ms = 500;
	srv = serve(&cfg);
	n = hello(h, TOKEN, STREAM);
	fd = dial_from("127.0.0.1", tb_recovery_server_port(srv));
	t0 = tb_clock_mono_ms();
	/* Slowloris: a byte of a valid HELLO every 100 ms, which would take
	 * 14 s to complete.  The connection goes at its deadline. */
	for (int i = 0; i < n; i++) {
		if (send(fd, h + i, 1, MSG_NOSIGNAL) != 1)
			break;
		if (closed_within(fd, 100) >= 0)
			break;
	}
	print_message("closed after %llu ms\n",
		      (unsigned long long)(tb_clock_mono_ms() - t0));
	assert_true(tb_clock_mono_ms() - t0 < 2000);
	assert_true(tb_clock_mono_ms() - t0 >= 400);
	close(fd);
	assert_int_equal(stats(srv).hello_timeouts, 1);
	assert_int_equal(stats(srv).authenticated, 0);
	tb_recovery_server_close(srv);
}

static void idle_connections_take_no_client_slot(void **state)
{
	tb_recovery_server_cfg_t cfg;
	tb_recovery_server_t *srv;
	uint64_t ms;
	int fds[70];

	(void)state;
	cfg_init(&cfg);
	cfg.max_clients = 4;
	cfg.hello_timeout_ms = 10000;
	cfg.max_pending = 128;
	cfg.max_pending_per_addr = 128;
	srv = serve(&cfg);
	for (int i = 0; i < 70; i++)
		fds[i] = dial_from("127.0.0.2", tb_recovery_server_port(srv));
	/* Four real clients one after the other, each served at once, while
	 * the 70 hold their connections open without a word. */
	for (int i = 0; i < 4; i++) {
		assert_int_equal(fetch(tb_recovery_server_port(srv), TOKEN, 10, &ms), 0);
		assert_true(ms < 2000);
	}
	assert_int_equal(stats(srv).authenticated, 4);
	for (int i = 0; i < 70; i++)
		assert_int_equal(closed_within(fds[i], 0), -1); /* still open */
	for (int i = 0; i < 70; i++)
		close(fds[i]);
	tb_recovery_server_close(srv);
}

static void one_address_pending_capped_oldest_first(void **state)
{
	tb_recovery_server_cfg_t cfg;
	tb_recovery_server_t *srv;
	int fds[10];

	(void)state;
	cfg_init(&cfg);
	cfg.max_pending_per_addr = 4;
	cfg.hello_timeout_ms = 10000;
	srv = serve(&cfg);
	for (int i = 0; i < 10; i++) {
		fds[i] = dial_from("127.0.0.3", tb_recovery_server_port(srv));
		usleep(20000); /* accepted in this order */
	}
	/* The six oldest were closed to make room; the newest four wait. */
	for (int i = 0; i < 6; i++)
		assert_true(closed_within(fds[i], 2000) >= 0);
	for (int i = 6; i < 10; i++)
		assert_int_equal(closed_within(fds[i], 100), -1);
	assert_int_equal(stats(srv).evicted, 6);
	/* Another address is not touched by it. */
	assert_int_equal(fetch(tb_recovery_server_port(srv), TOKEN, 10, NULL), 0);
	for (int i = 0; i < 10; i++)
		close(fds[i]);
	tb_recovery_server_close(srv);
}

static void one_address_connection_rate_capped(void **state)
{
	tb_recovery_server_cfg_t cfg;
	tb_recovery_server_t *srv;
	int fds[60], closed = 0;

	(void)state;
	cfg_init(&cfg);
	cfg.conn_rate = 10;
	cfg.conn_burst = 10;
	cfg.hello_timeout_ms = 10000;
	cfg.max_pending_per_addr = 100;
	srv = serve(&cfg);
	for (int i = 0; i < 60; i++)
		fds[i] = dial_from("127.0.0.4", tb_recovery_server_port(srv));
	for (int i = 0; i < 60; i++)
		closed += closed_within(fds[i], 300) >= 0;
	print_message("closed %d of 60, conn_limited %llu\n", closed,
		      (unsigned long long)stats(srv).conn_limited);
	/* A burst of 10, and a few more as the bucket refills. */
	assert_true(closed >= 40);
	assert_true(stats(srv).conn_limited >= 40);
	assert_int_equal(stats(srv).conn_limited, (uint64_t)closed);
	for (int i = 0; i < 60; i++)
		close(fds[i]);
	assert_int_equal(fetch(tb_recovery_server_port(srv), TOKEN, 10, NULL), 0);
	tb_recovery_server_close(srv);
}

static void wrong_tokens_slowed_and_counted(void **state)
{
	tb_recovery_server_cfg_t cfg;
	tb_recovery_server_t *srv;
	uint8_t h[TB_RECOVERY_PROTO_MSG_MAX];
	uint64_t t0, ms, answered = 0;
	int n;

	(void)state;
	cfg_init(&cfg);
	cfg.auth_delay_ms = 100;
	cfg.auth_delay_max_ms = 1000;
	srv = serve(&cfg);
	n = hello(h, "guess", STREAM);
	/* One guess after another for two seconds: 100, 200, 400, 800 ms,
	 * then 1 s each. */
	t0 = tb_clock_mono_ms();
	while (tb_clock_mono_ms() - t0 < 2000) {
		int fd = dial_from("127.0.0.5", tb_recovery_server_port(srv));
		tb_recovery_proto_msg_t m;

		send_bytes(fd, h, (size_t)n);
		if (read_msg(fd, &m, 3000) == 0) {
			assert_int_equal(m.type, TB_RECOVERY_PROTO_REJECT);
			assert_int_equal(m.reject.reason,
					 TB_RECOVERY_PROTO_REJ_UNAUTHORISED);
			answered++;
		}
		/* ... and the connection is closed after the answer. */
		assert_true(closed_within(fd, 1000) >= 0);
		close(fd);
	}
	print_message("%llu guesses answered in 2 s\n", (unsigned long long)answered);
	assert_true(answered >= 3 && answered <= 6);
	/* Many at once are no faster: each waits its turn's delay. */
	{
		int fds[12];
		uint64_t t1 = tb_clock_mono_ms();

		for (int i = 0; i < 12; i++) {
			fds[i] = dial_from("127.0.0.5", tb_recovery_server_port(srv));
			send_bytes(fds[i], h, (size_t)n);
		}
		for (int i = 0; i < 12; i++) {
			tb_recovery_proto_msg_t m;

			if (read_msg(fds[i], &m, 3000) == 0)
				answered++;
			close(fds[i]);
		}
		assert_true(tb_clock_mono_ms() - t1 >= 900);
	}
	/* Every one counted. */
	assert_int_equal(stats(srv).auth_failures, answered);
	assert_true(stats(srv).rejects[TB_RECOVERY_PROTO_REJ_UNAUTHORISED] <= answered);
	/* The right token from another address gets in at once, and from
	 * the guesser's address too: only wrong ones wait. */
	assert_int_equal(fetch(tb_recovery_server_port(srv), TOKEN, 10, &ms), 0);
	assert_true(ms < 500);
	{
		tb_recovery_proto_msg_t m;
		uint64_t t1 = tb_clock_mono_ms();
		int fd = dial_from("127.0.0.5", tb_recovery_server_port(srv));

		n = hello(h, TOKEN, STREAM);
		send_bytes(fd, h, (size_t)n);
		assert_int_equal(read_msg(fd, &m, 2000), 0);
		assert_int_equal(m.type, TB_RECOVERY_PROTO_WELCOME);
		assert_true(tb_clock_mono_ms() - t1 < 500);
		close(fd);
	}
	tb_recovery_server_close(srv);
}

static void every_slot_taken_is_busy(void **state)
{
	tb_recovery_server_cfg_t cfg;
	tb_recovery_server_t *srv;
	tb_recovery_proto_msg_t m;
	uint8_t h[TB_RECOVERY_PROTO_MSG_MAX];
	int a, b, n;

	(void)state;
	cfg_init(&cfg);
	cfg.max_clients = 1;
	srv = serve(&cfg);
	n = hello(h, TOKEN, STREAM);
	a = dial_from("127.0.0.1", tb_recovery_server_port(srv));
	send_bytes(a, h, (size_t)n);
	assert_int_equal(read_msg(a, &m, 2000), 0);
	assert_int_equal(m.type, TB_RECOVERY_PROTO_WELCOME);
	b = dial_from("127.0.0.1", tb_recovery_server_port(srv));
	send_bytes(b, h, (size_t)n);
	assert_int_equal(read_msg(b, &m, 2000), 0);
	assert_int_equal(m.type, TB_RECOVERY_PROTO_REJECT);
	assert_int_equal(m.reject.reason, TB_RECOVERY_PROTO_REJ_BUSY);
	assert_true(m.reject.retry_after_ms >= 1);
	assert_true(closed_within(b, 2000) >= 0);
	assert_int_equal(stats(srv).busy, 1);
	close(b);
	/* The slot comes back when its connection ends. */
	close(a);
	usleep(100000);
	assert_int_equal(fetch(tb_recovery_server_port(srv), TOKEN, 10, NULL), 0);
	tb_recovery_server_close(srv);
}

static void log_lines_held_back_are_counted(void **state)
{
	tb_recovery_server_cfg_t cfg;
	tb_recovery_server_t *srv;
	int fds[30];

	(void)state;
	cfg_init(&cfg);
	cfg.hello_timeout_ms = 200;
	cfg.max_pending_per_addr = 64;
	srv = serve(&cfg);
	for (int i = 0; i < 30; i++)
		fds[i] = dial_from("127.0.0.6", tb_recovery_server_port(srv));
	for (int i = 0; i < 30; i++)
		assert_true(closed_within(fds[i], 3000) >= 0);
	assert_int_equal(stats(srv).hello_timeouts, 30);
	/* One line for the first, the rest folded into a count. */
	assert_true(stats(srv).logs_suppressed >= 25);
	for (int i = 0; i < 30; i++)
		close(fds[i]);
	tb_recovery_server_close(srv);
}

/* Frames of one answer read from a raw socket: BEGIN, count frames, END. */
static void expect_answer(int fd, uint64_t first, uint32_t count)
{
	tb_recovery_proto_msg_t m;
	uint8_t frame[TB_FRAME_HDR_LEN + RECOVERY_SRC_PAYLOAD_MAX];

	assert_int_equal(read_msg(fd, &m, 2000), 0);
	assert_int_equal(m.type, TB_RECOVERY_PROTO_RESPONSE_BEGIN);
	assert_true(m.begin.first == first);
	assert_int_equal(m.begin.count, count);
	for (uint32_t i = 0; i < count; i++) {
		tb_frame_hdr_t h;

		assert_int_equal(recv(fd, frame, TB_FRAME_HDR_LEN, MSG_WAITALL),
				 TB_FRAME_HDR_LEN);
		memcpy(&h, frame, sizeof(h));
		assert_true(h.seq == first + i);
		assert_int_equal(recv(fd, frame + TB_FRAME_HDR_LEN,
				      h.length - TB_FRAME_HDR_LEN, MSG_WAITALL),
				 (ssize_t)(h.length - TB_FRAME_HDR_LEN));
	}
	assert_int_equal(read_msg(fd, &m, 2000), 0);
	assert_int_equal(m.type, TB_RECOVERY_PROTO_RESPONSE_END);
	assert_true(m.end.last_seq == first + count - 1);
}

static void authenticated_once_then_pipelined(void **state)
{
	tb_recovery_server_cfg_t cfg;
	tb_recovery_server_t *srv;
	tb_recovery_proto_msg_t m;
	uint8_t out[4 * TB_RECOVERY_PROTO_MSG_MAX];
	int fd, n = 0;

	(void)state;
	cfg_init(&cfg);
	cfg.max_count = 1000;
	srv = serve(&cfg);
	/* HELLO and three requests in one write. */
	n += hello(out, TOKEN, STREAM);
	for (int i = 0; i < 3; i++) {
		tb_recovery_proto_request_t q = {.stream_id = STREAM, .count = 5,
						 .epoch = EPOCH,
						 .first = 10 + 100 * (uint64_t)i};

		n += tb_recovery_proto_encode_request(out + n, sizeof(out) - (size_t)n, &q);
	}
	fd = dial_from("127.0.0.1", tb_recovery_server_port(srv));
	send_bytes(fd, out, (size_t)n);
	assert_int_equal(read_msg(fd, &m, 2000), 0);
	assert_int_equal(m.type, TB_RECOVERY_PROTO_WELCOME);
	assert_int_equal(m.welcome.stream_id, STREAM);
	assert_int_equal(m.welcome.max_count, 1000);
	assert_true(m.welcome.epoch == EPOCH);
	assert_true(m.welcome.first == 1 && m.welcome.last == 5000);
	for (int i = 0; i < 3; i++)
		expect_answer(fd, 10 + 100 * (uint64_t)i, 5);
	/* A request for another stream: refused, and the connection ends. */
	{
		tb_recovery_proto_request_t q = {.stream_id = STREAM + 1, .count = 5,
						 .epoch = EPOCH, .first = 10};

		n = tb_recovery_proto_encode_request(out, sizeof(out), &q);
		send_bytes(fd, out, (size_t)n);
		assert_int_equal(read_msg(fd, &m, 2000), 0);
		assert_int_equal(m.type, TB_RECOVERY_PROTO_REJECT);
		assert_int_equal(m.reject.reason, TB_RECOVERY_PROTO_REJ_MALFORMED);
		assert_true(closed_within(fd, 2000) >= 0);
	}
	close(fd);
	assert_int_equal(stats(srv).authenticated, 1);
	assert_int_equal(stats(srv).served, 3);
	tb_recovery_server_close(srv);
}

/* A source that holds epoch EPOCH (current) and EPOCH - 1 (1..300). */
static int old_bounds(void *sd, uint64_t epoch, uint64_t *first, uint64_t *last)
{
	(void)sd;
	if (epoch != EPOCH - 1)
		return TB_ENOENT;
	*first = 1;
	*last = 300;
	return 0;
}

static int old_read(void *sd, uint64_t epoch, uint64_t first, int max,
		    tb_store_read_fn fn, void *cd)
{
	recovery_src_t old = *(recovery_src_t *)sd;

	assert_true(epoch == EPOCH - 1);
	old.last = 300;
	return recovery_src_read(&old, first, max, fn, cd);
}

static void earlier_epoch_served(void **state)
{
	tb_recovery_server_source_t src = {.stream_id = STREAM, .token = TOKEN,
					   .bounds = recovery_src_bounds,
					   .read = recovery_src_read, .sd = &held,
					   .epoch_bounds = old_bounds,
					   .epoch_read = old_read};
	tb_recovery_server_cfg_t cfg;
	tb_recovery_server_t *srv;
	tb_recovery_proto_request_t q = {.stream_id = STREAM, .count = 50,
					 .epoch = EPOCH - 1, .first = 251};
	tb_recovery_proto_reject_t rej;
	tb_endpoint_t ep;
	uint64_t n = 0;

	(void)state;
	cfg_init(&cfg);
	assert_int_equal(tb_recovery_server_open(&srv, &cfg, &src, 1), 0);
	memset(&ep, 0, sizeof(ep));
	strcpy(ep.host, "127.0.0.1");
	ep.port = tb_recovery_server_port(srv);
	assert_int_equal(tb_recovery_client_fetch_one(&ep, TOKEN, &q, 2000,
						      count_frame, &n, &rej, NULL), 50);
	assert_int_equal(n, 50);
	/* Past its end: not yet (that epoch ended at 300). */
	q.first = 301;
	assert_int_equal(tb_recovery_client_fetch_one(&ep, TOKEN, &q, 2000,
						      count_frame, &n, &rej, NULL),
			 TB_RECOVERY_CLIENT_REJECTED);
	assert_int_equal(rej.reason, TB_RECOVERY_PROTO_REJ_NOT_YET);
	assert_true(rej.latest_seq == 300);
	/* An epoch held nowhere. */
	q.epoch = EPOCH - 2;
	q.first = 1;
	assert_int_equal(tb_recovery_client_fetch_one(&ep, TOKEN, &q, 2000,
						      count_frame, &n, &rej, NULL),
			 TB_RECOVERY_CLIENT_REJECTED);
	assert_int_equal(rej.reason, TB_RECOVERY_PROTO_REJ_EPOCH_MISMATCH);
	assert_true(rej.current_epoch == EPOCH);
	tb_recovery_server_close(srv);
}

/* Reads one answer from a raw socket in `version`: BEGIN of `count` from
 * `first`, `frames` frames, END with `status` and `last`. */
static void expect_cut(int fd, unsigned version, uint64_t first, uint32_t count,
		       uint32_t frames, uint32_t status, uint64_t last)
{
	uint8_t frame[TB_FRAME_HDR_LEN + RECOVERY_SRC_PAYLOAD_MAX];
	tb_recovery_proto_msg_t m;

	assert_int_equal(read_msg(fd, &m, 2000), 0);
	assert_int_equal(m.version, version);
	assert_int_equal(m.type, TB_RECOVERY_PROTO_RESPONSE_BEGIN);
	assert_true(m.begin.first == first);
	assert_int_equal(m.begin.count, count);
	for (uint32_t i = 0; i < frames; i++) {
		tb_frame_hdr_t h;

		assert_int_equal(recv(fd, frame, TB_FRAME_HDR_LEN, MSG_WAITALL),
				 TB_FRAME_HDR_LEN);
		memcpy(&h, frame, sizeof(h));
		assert_true(h.seq == first + i);
		assert_int_equal(recv(fd, frame + TB_FRAME_HDR_LEN,
				      h.length - TB_FRAME_HDR_LEN, MSG_WAITALL),
				 (ssize_t)(h.length - TB_FRAME_HDR_LEN));
	}
	assert_int_equal(read_msg(fd, &m, 2000), 0);
	assert_int_equal(m.version, version);
	assert_int_equal(m.type, TB_RECOVERY_PROTO_RESPONSE_END);
	assert_int_equal(m.end.status, status);
	assert_true(m.end.last_seq == last);
}

static void send_request(int fd, unsigned version, uint64_t first,
			 uint32_t count)
{
	tb_recovery_proto_request_t q = {.stream_id = STREAM, .count = count,
					 .epoch = EPOCH, .first = first};
	uint8_t out[TB_RECOVERY_PROTO_MSG_MAX];
	int n = tb_recovery_proto_encode(out, sizeof(out), version,
					 TB_RECOVERY_PROTO_REQUEST, &q);

	assert_int_equal(n, 32);
	send_bytes(fd, out, (size_t)n);
}

static int hello_in(uint8_t *buf, unsigned version, uint32_t stream)
{
	tb_recovery_proto_hello_t h;

	memset(&h, 0, sizeof(h));
	h.stream_id = stream;
	snprintf(h.token, sizeof(h.token), "%s", TOKEN);
	return tb_recovery_proto_encode(buf, TB_RECOVERY_PROTO_MSG_MAX, version,
					TB_RECOVERY_PROTO_HELLO, &h);
}

static void damaged_range_is_lost_not_an_end(void **state)
{
	recovery_damaged_t d = {.src = held, .lost_first = 1500,
				.lost_last = 1502};
	tb_recovery_server_cfg_t cfg;
	tb_recovery_server_t *srv;
	tb_recovery_proto_msg_t m;
	uint8_t out[TB_RECOVERY_PROTO_MSG_MAX];
	int fd;

	(void)state;
	cfg_init(&cfg);
	cfg.max_count = 1000;
	assert_int_equal(recovery_damaged_serve(&srv, &d, TOKEN, &cfg), 0);

	/* Version 3. */
	fd = dial_from("127.0.0.1", tb_recovery_server_port(srv));
	send_bytes(fd, out, (size_t)hello_in(out, 3, STREAM));
	assert_int_equal(read_msg(fd, &m, 2000), 0);
	assert_int_equal(m.type, TB_RECOVERY_PROTO_WELCOME);
	assert_int_equal(m.version, 3);
	/* Reaching the damage: the frames before it, cut short there. */
	send_request(fd, 3, 1490, 20);
	expect_cut(fd, 3, 1490, 20, 10, TB_RECOVERY_PROTO_END_TRUNCATED, 1499);
	/* Starting in it: LOST, up to its end. */
	send_request(fd, 3, 1501, 20);
	assert_int_equal(read_msg(fd, &m, 2000), 0);
	assert_int_equal(m.type, TB_RECOVERY_PROTO_REJECT);
	assert_int_equal(m.reject.reason, TB_RECOVERY_PROTO_REJ_LOST);
	assert_true(m.reject.lost_last == 1502);
	assert_non_null(strstr(m.reject.text, "1501..1502"));
	assert_non_null(strstr(m.reject.text, "1500..1502"));
	/* The connection goes on, and so does the stream after it. */
	send_request(fd, 3, 1503, 5);
	expect_cut(fd, 3, 1503, 5, 5, TB_RECOVERY_PROTO_END_COMPLETE, 1507);
	close(fd);
	assert_int_equal(stats(srv).rejects[TB_RECOVERY_PROTO_REJ_LOST], 1);

	/* Version 2: the same answers in its bytes, and no LOST. */
	fd = dial_from("127.0.0.1", tb_recovery_server_port(srv));
	send_bytes(fd, out, (size_t)hello_in(out, 2, STREAM));
	assert_int_equal(read_msg(fd, &m, 2000), 0);
	assert_int_equal(m.type, TB_RECOVERY_PROTO_WELCOME);
	assert_int_equal(m.version, 2);
	send_request(fd, 2, 1490, 20);
	expect_cut(fd, 2, 1490, 20, 10, TB_RECOVERY_PROTO_END_TRUNCATED, 1499);
	send_request(fd, 2, 1500, 20);
	expect_cut(fd, 2, 1500, 20, 0, TB_RECOVERY_PROTO_END_TRUNCATED, 1499);
	send_request(fd, 2, 1503, 5);
	expect_cut(fd, 2, 1503, 5, 5, TB_RECOVERY_PROTO_END_COMPLETE, 1507);
	/* A request of another version than its HELLO's: malformed, in
	 * the connection's version, and the end of it. */
	send_request(fd, 3, 1503, 5);
	assert_int_equal(read_msg(fd, &m, 2000), 0);
	assert_int_equal(m.version, 2);
	assert_int_equal(m.type, TB_RECOVERY_PROTO_REJECT);
	assert_int_equal(m.reject.reason, TB_RECOVERY_PROTO_REJ_MALFORMED);
	assert_non_null(strstr(m.reject.text, "version 3"));
	assert_true(closed_within(fd, 2000) >= 0);
	close(fd);
	assert_int_equal(stats(srv).rejects[TB_RECOVERY_PROTO_REJ_LOST], 1);

	/* A HELLO of version 2 is refused in version 2. */
	fd = dial_from("127.0.0.1", tb_recovery_server_port(srv));
	send_bytes(fd, out, (size_t)hello_in(out, 2, STREAM + 5));
	assert_int_equal(read_msg(fd, &m, 2000), 0);
	assert_int_equal(m.version, 2);
	assert_int_equal(m.reject.reason, TB_RECOVERY_PROTO_REJ_UNKNOWN_STREAM);
	close(fd);
	tb_recovery_server_close(srv);
}

/* ------------------------------------------------------------- spinning */

/* An authenticated connection: HELLO sent, WELCOME read. */
static int authenticated(uint16_t port)
{
	tb_recovery_proto_msg_t m;
	uint8_t out[TB_RECOVERY_PROTO_MSG_MAX];
	int fd = dial_from("127.0.0.1", port);

	send_bytes(fd, out, (size_t)hello(out, TOKEN, STREAM));
	assert_int_equal(read_msg(fd, &m, 5000), 0);
	assert_int_equal(m.type, TB_RECOVERY_PROTO_WELCOME);
	return fd;
}

/* `n` requests of 5 frames from first, 100 apart, in one write. */
static void send_requests(int fd, uint64_t first, int n)
{
	uint8_t out[8 * TB_RECOVERY_PROTO_MSG_MAX];
	int len = 0;

	assert_true(n <= 8);
	for (int i = 0; i < n; i++) {
		tb_recovery_proto_request_t q = {.stream_id = STREAM, .count = 5,
						 .epoch = EPOCH,
						 .first = first + 100 * (uint64_t)i};

		len += tb_recovery_proto_encode_request(out + len,
							sizeof(out) - (size_t)len, &q);
	}
	send_bytes(fd, out, (size_t)len);
}

static void spinning_answers_as_before(void **state)
{
	/* A spin that runs out before the next request (the thread then
	 * sleeps as without it), and one that never does. */
	const uint32_t spins[] = {50, TB_RECOVERY_SERVER_SPIN_ALWAYS};

	(void)state;
	for (size_t k = 0; k < sizeof(spins) / sizeof(spins[0]); k++) {
		tb_recovery_server_cfg_t cfg;
		tb_recovery_server_t *srv;
		int fd;

		cfg_init(&cfg);
		cfg.spin_us = spins[k];
		srv = serve(&cfg);
		fd = authenticated(tb_recovery_server_port(srv));
		/* Pipelined: three in one write. */
		send_requests(fd, 10, 3);
		for (int i = 0; i < 3; i++)
			expect_answer(fd, 10 + 100 * (uint64_t)i, 5);
		/* One at a time, each after the thread has waited a while. */
		for (int i = 0; i < 4; i++) {
			usleep(20000);
			send_requests(fd, 1000 + (uint64_t)i, 1);
			expect_answer(fd, 1000 + (uint64_t)i, 5);
		}
		/* A request in two pieces: the rest comes after a pause. */
		{
			tb_recovery_proto_request_t q = {.stream_id = STREAM,
							 .count = 5, .epoch = EPOCH,
							 .first = 2000};
			uint8_t out[TB_RECOVERY_PROTO_MSG_MAX];
			int n = tb_recovery_proto_encode_request(out, sizeof(out), &q);

			send_bytes(fd, out, 3);
			usleep(20000);
			send_bytes(fd, out + 3, (size_t)n - 3);
			expect_answer(fd, 2000, 5);
		}
		close(fd);
		assert_int_equal(stats(srv).served, 8);
		tb_recovery_server_close(srv);
	}
}

static void spinning_connections_end_at_close(void **state)
{
	tb_recovery_server_cfg_t cfg;
	tb_recovery_server_t *srv;
	uint64_t t0;
	int fd[2];

	(void)state;
	cfg_init(&cfg);
	cfg.spin_us = TB_RECOVERY_SERVER_SPIN_ALWAYS;
	srv = serve(&cfg);
	for (int i = 0; i < 2; i++) {
		fd[i] = authenticated(tb_recovery_server_port(srv));
		send_requests(fd[i], 10, 1);
		expect_answer(fd[i], 10, 5);
	}
	usleep(50000); /* both threads spinning for their next request */
	t0 = tb_clock_mono_ms();
	tb_recovery_server_close(srv);
	/* As prompt as for sleeping threads: a bound only a spin that missed
	 * the close would reach. */
	assert_true(tb_clock_mono_ms() - t0 < 3000);
	for (int i = 0; i < 2; i++) {
		assert_true(closed_within(fd[i], 2000) >= 0);
		close(fd[i]);
	}
}

static void spinning_still_times_out(void **state)
{
	tb_recovery_server_cfg_t cfg;
	tb_recovery_server_t *srv;
	int64_t idle_ms, io_ms;
	int idle, io;

	(void)state;
	cfg_init(&cfg);
	cfg.spin_us = TB_RECOVERY_SERVER_SPIN_ALWAYS;
	cfg.idle_timeout_ms = 300;
	cfg.io_timeout_ms = 300;
	srv = serve(&cfg);
	idle = authenticated(tb_recovery_server_port(srv));
	io = authenticated(tb_recovery_server_port(srv));
	/* A request begun and never finished: the I/O timeout. */
	{
		tb_recovery_proto_request_t q = {.stream_id = STREAM, .count = 5,
						 .epoch = EPOCH, .first = 10};
		uint8_t out[TB_RECOVERY_PROTO_MSG_MAX];

		assert_true(tb_recovery_proto_encode_request(out, sizeof(out), &q) > 3);
		send_bytes(io, out, 3);
	}
	io_ms = closed_within(io, 5000);
	idle_ms = closed_within(idle, 5000);
	/* Closed, and not at once for some other reason (the server's
	 * clock started before ours: a little under 300 ms is possible). */
	assert_true(io_ms >= 150 && io_ms < 5000);
	assert_true(idle_ms >= 0 && idle_ms < 5000);
	close(io);
	close(idle);
	assert_int_equal(stats(srv).served, 0);
	tb_recovery_server_close(srv);
}

static void spin_over_the_maximum_refused(void **state)
{
	tb_recovery_server_cfg_t cfg;
	tb_recovery_server_t *srv = NULL;

	(void)state;
	cfg_init(&cfg);
	cfg.spin_us = TB_RECOVERY_SERVER_SPIN_MAX + 1;
	assert_int_equal(recovery_src_serve(&srv, &held, TOKEN, &cfg), TB_EINVAL);
	assert_null(srv);
	assert_non_null(strstr(tb_errmsg(), "spin_us"));
	cfg.spin_us = TB_RECOVERY_SERVER_SPIN_MAX;
	srv = serve(&cfg);
	tb_recovery_server_close(srv);
}

/* tb-recoveryd --spin-us: bad values are usage errors naming the option;
 * good ones pass the parser (and the run then stops at the missing
 * configuration file, exit 1, not 2). */
static void recoveryd_spin_option(void **state)
{
	const char *bad[] = {"-1", "1000001", "x", "", "10us", "ALWAYS"};
	const char *good[] = {"0", "1000000", "always"};
	char out[64];

	(void)state;
	snprintf(out, sizeof(out), "/tmp/tb-spin-opt.%d", (int)getpid());
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]) +
			       sizeof(good) / sizeof(good[0]); i++) {
		int is_bad = i < sizeof(bad) / sizeof(bad[0]);
		const char *v = is_bad ? bad[i] : good[i - sizeof(bad) / sizeof(bad[0])];
		char *argv[] = {"tb-recoveryd", "-c", "/nonexistent/tb.ini", "-s",
				"x", "-d", "/tmp", "-l", "127.0.0.1:1",
				"--spin-us", (char *)v, NULL};
		proc_t p;
		char *text;

		assert_int_equal(proc_start(&p, out, argv), 0);
		assert_int_equal(proc_wait(&p, 10000), is_bad ? 2 : 1);
		text = proc_output(&p);
		if (is_bad)
			assert_non_null(strstr(text, "--spin-us"));
		else
			assert_null(strstr(text, "--spin-us"));
		free(text);
	}
	unlink(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(hello_deadline_is_not_extended_by_bytes),
		cmocka_unit_test(idle_connections_take_no_client_slot),
		cmocka_unit_test(one_address_pending_capped_oldest_first),
		cmocka_unit_test(one_address_connection_rate_capped),
		cmocka_unit_test(wrong_tokens_slowed_and_counted),
		cmocka_unit_test(every_slot_taken_is_busy),
		cmocka_unit_test(log_lines_held_back_are_counted),
		cmocka_unit_test(authenticated_once_then_pipelined),
		cmocka_unit_test(earlier_epoch_served),
		cmocka_unit_test(damaged_range_is_lost_not_an_end),
		cmocka_unit_test(spinning_answers_as_before),
		cmocka_unit_test(spinning_connections_end_at_close),
		cmocka_unit_test(spinning_still_times_out),
		cmocka_unit_test(spin_over_the_maximum_refused),
		cmocka_unit_test(recoveryd_spin_option),
	};

	return cmocka_run_group_tests_name("recovery_server", tests, NULL, NULL);
}
