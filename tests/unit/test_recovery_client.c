/*
 * Recovery client and server over loopback TCP: frames of a range in
 * order; every reject reason reaching the client with its number; answers
 * that are malformed, cut short or never come; failover between endpoints;
 * backoff under rate limiting; a range no service holds reported lost
 * exactly; a range one service lost to damage fetched from the next, or
 * reported lost exactly when none holds it, and the stream served on
 * after it, a late joiner's open fetch included; a server of version 2
 * asked in version 2.
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
#include <endian.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define EPOCH 77u
#define STREAM 9u
#define TOKEN "s3cret"
#define NFRAMES 3000u

/* ------------------------------------------------------------ a source */

/* The frame of `seq` as every source here holds it: frames.h's payload,
 * of a length that varies with the sequence. */
static void make_frame(uint8_t *buf, uint64_t seq)
{
	frames_put(buf, STREAM, seq, 40 + (uint32_t)(seq % 17), 3, seq * 10, NULL);
}

/* make_frame at any address; returns its length. */
static size_t copy_frame(uint8_t *at, uint64_t seq)
{
	uint64_t f[(TB_FRAME_HDR_LEN + RECOVERY_SRC_PAYLOAD_MAX) / 8];

	make_frame((uint8_t *)f, seq);
	memcpy(at, f, ((tb_frame_hdr_t *)f)->length);
	return ((tb_frame_hdr_t *)f)->length;
}

static void src_frame(const recovery_src_t *s, uint8_t *buf, uint64_t seq)
{
	(void)s;
	make_frame(buf, seq);
}

/* Holds 1..NFRAMES of EPOCH. */
static const recovery_src_t the_src = {.stream_id = STREAM, .epoch = EPOCH,
				       .first = 1, .last = NFRAMES,
				       .frame = src_frame};

static tb_recovery_server_t *start_server(recovery_src_t *s, uint32_t max_count,
			       uint32_t rate)
{
	tb_recovery_server_cfg_t cfg;
	tb_recovery_server_t *srv;

	tb_recovery_server_cfg_init(&cfg);
	cfg.max_count = max_count;
	cfg.rate = rate;
	cfg.burst = rate ? 1 : 0;
	cfg.io_timeout_ms = 2000;
	assert_int_equal(recovery_src_serve(&srv, s, TOKEN, &cfg), 0);
	return srv;
}

/* -------------------------------------------------------- what arrives */

struct got {
	uint64_t n, next, bad;
	uint64_t loss_first, loss_last;
	int losses;
};

static int on_frame(void *cd, const tb_frame_hdr_t *f)
{
	struct got *g = cd;
	uint64_t want[(TB_FRAME_HDR_LEN + RECOVERY_SRC_PAYLOAD_MAX) / 8];

	make_frame((uint8_t *)want, f->seq);
	if (g->next && f->seq != g->next)
		g->bad++;
	if (memcmp(f, want, f->length) != 0)
		g->bad++;
	g->next = f->seq + 1;
	g->n++;
	return 0;
}

static void on_loss(void *cd, uint64_t first, uint64_t last)
{
	struct got *g = cd;

	g->loss_first = first;
	g->loss_last = last;
	g->losses++;
	g->next = last + 1;
}

static void request(tb_recovery_proto_request_t *q, uint64_t first, uint32_t count)
{
	memset(q, 0, sizeof(*q));
	q->stream_id = STREAM;
	q->epoch = EPOCH;
	q->first = first;
	q->count = count;
}

static tb_endpoint_t ep_of(uint16_t port)
{
	tb_endpoint_t ep;

	memset(&ep, 0, sizeof(ep));
	strcpy(ep.host, "127.0.0.1");
	ep.port = port;
	return ep;
}

/* --------------------------------------------------------------- tests */

static void test_range_in_order(void **state)
{
	recovery_src_t x = the_src;
	tb_recovery_server_t *srv = start_server(&x, TB_RECOVERY_PROTO_COUNT_MAX, 0);
	tb_endpoint_t ep = ep_of(tb_recovery_server_port(srv));
	tb_recovery_proto_request_t q;
	tb_recovery_proto_reject_t rej;
	struct got g = {0};
	uint64_t delivered;
	tb_recovery_server_stats_t st;

	(void)state;
	request(&q, 10, 2000);
	assert_int_equal(tb_recovery_client_fetch_one(&ep, TOKEN, &q, 2000, on_frame, &g, &rej,
					      &delivered), 2000);
	assert_int_equal(g.n, 2000);
	assert_int_equal(g.bad, 0);
	assert_int_equal(g.next, 2010);
	assert_int_equal(delivered, 2000);
	/* A range past the latest is served up to the latest. */
	memset(&g, 0, sizeof(g));
	request(&q, NFRAMES - 4, 100);
	assert_int_equal(tb_recovery_client_fetch_one(&ep, TOKEN, &q, 2000, on_frame, &g, &rej,
					      NULL), 5);
	assert_int_equal(g.next, NFRAMES + 1);
	tb_recovery_server_stats(srv, &st);
	assert_int_equal(st.served, 2);
	assert_int_equal(st.frames, 2005);
	tb_recovery_server_close(srv);
}

static void expect_reject(const tb_endpoint_t *ep, const char *token,
			  const tb_recovery_proto_request_t *q,
			  uint32_t reason, uint64_t detail)
{
	tb_recovery_proto_reject_t rej;
	struct got g = {0};

	memset(&rej, 0, sizeof(rej));
	assert_int_equal(tb_recovery_client_fetch_one(ep, token, q, 2000, on_frame, &g, &rej,
					      NULL), TB_RECOVERY_CLIENT_REJECTED);
	assert_int_equal(rej.reason, reason);
	assert_int_equal(rej.detail, detail);
	assert_int_equal(g.n, 0);
	assert_non_null(strstr(tb_errmsg(), tb_recovery_proto_reject_name(reason)));
}

static void test_every_reject_reason(void **state)
{
	recovery_src_t held = the_src;
	tb_recovery_server_t *srv;
	tb_endpoint_t ep;
	tb_recovery_proto_request_t q;
	tb_recovery_server_stats_t st;

	(void)state;
	held.first = 100;
	held.last = 2000;
	srv = start_server(&held, 500, 0);
	ep = ep_of(tb_recovery_server_port(srv));

	request(&q, 50, 10);
	expect_reject(&ep, TOKEN, &q, TB_RECOVERY_PROTO_REJ_TOO_OLD, 100);
	request(&q, 2001, 10);
	expect_reject(&ep, TOKEN, &q, TB_RECOVERY_PROTO_REJ_NOT_YET, 2000);
	request(&q, 100, 501);
	expect_reject(&ep, TOKEN, &q, TB_RECOVERY_PROTO_REJ_TOO_LARGE, 500);
	request(&q, 100, 10);
	expect_reject(&ep, "s3creT", &q, TB_RECOVERY_PROTO_REJ_UNAUTHORISED, 0);
	request(&q, 100, 10);
	q.stream_id = STREAM + 1;
	expect_reject(&ep, TOKEN, &q, TB_RECOVERY_PROTO_REJ_UNKNOWN_STREAM, 0);
	request(&q, 100, 10);
	q.epoch = EPOCH + 1;
	expect_reject(&ep, TOKEN, &q, TB_RECOVERY_PROTO_REJ_EPOCH_MISMATCH, EPOCH);
	tb_recovery_server_stats(srv, &st);
	assert_int_equal(st.rejects[TB_RECOVERY_PROTO_REJ_TOO_OLD], 1);
	assert_int_equal(st.rejects[TB_RECOVERY_PROTO_REJ_UNAUTHORISED], 1);
	assert_int_equal(st.served, 0);
	tb_recovery_server_close(srv);

	/* Rate limit: one request per second, burst 1. */
	srv = start_server(&held, 500, 1);
	ep = ep_of(tb_recovery_server_port(srv));
	{
		tb_recovery_proto_reject_t rej;
		struct got g = {0};

		request(&q, 100, 10);
		assert_int_equal(tb_recovery_client_fetch_one(&ep, TOKEN, &q, 2000, on_frame, &g,
						      &rej, NULL), 10);
		memset(&rej, 0, sizeof(rej));
		assert_int_equal(tb_recovery_client_fetch_one(&ep, TOKEN, &q, 2000, on_frame, &g,
						      &rej, NULL),
				 TB_RECOVERY_CLIENT_REJECTED);
		assert_int_equal(rej.reason, TB_RECOVERY_PROTO_REJ_RATE_LIMITED);
		assert_true(rej.retry_after_ms >= 1 && rej.retry_after_ms <= 1001);
	}
	tb_recovery_server_close(srv);
}

/* Sends raw bytes to the server, reads its answer; the server must reject
 * with MALFORMED and keep serving others. */
static void test_malformed_request(void **state)
{
	recovery_src_t x = the_src;
	tb_recovery_server_t *srv = start_server(&x, 500, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET};
	uint8_t junk[64], ans[TB_RECOVERY_PROTO_MSG_MAX];
	tb_recovery_proto_msg_t m;
	tb_recovery_proto_request_t q;
	tb_recovery_proto_reject_t rej;
	struct got g = {0};
	tb_endpoint_t ep = ep_of(tb_recovery_server_port(srv));
	ssize_t n, got = 0;
	int fd;

	(void)state;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons(tb_recovery_server_port(srv));
	/* 1: a valid header claiming a REQUEST, with a bad body (count 0). */
	request(&q, 1, 1);
	assert_true(tb_recovery_proto_encode_request(junk, 31, &q) < 0); /* 31 < 32 */
	{
		uint8_t buf[TB_RECOVERY_PROTO_MSG_MAX];
		int len = tb_recovery_proto_encode_request(buf, sizeof(buf), &q);

		assert_true(len > 0);
		memset(buf + 12, 0, 4); /* count = 0 */
		fd = socket(AF_INET, SOCK_STREAM, 0);
		assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
		assert_int_equal(send(fd, buf, (size_t)len, 0), len);
		while ((n = recv(fd, ans + got, sizeof(ans) - (size_t)got, 0)) > 0)
			got += n;
		close(fd);
		assert_true(tb_recovery_proto_decode(ans, (size_t)got, &m) > 0);
		assert_int_equal(m.type, TB_RECOVERY_PROTO_REJECT);
		assert_int_equal(m.reject.reason, TB_RECOVERY_PROTO_REJ_MALFORMED);
		assert_non_null(strstr(m.reject.text, "count"));
	}
	/* 2: garbage from the first byte (bad magic). */
	memset(junk, 0xab, sizeof(junk));
	fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(send(fd, junk, sizeof(junk), 0), (ssize_t)sizeof(junk));
	got = 0;
	while ((n = recv(fd, ans + got, sizeof(ans) - (size_t)got, 0)) > 0)
		got += n;
	close(fd);
	assert_true(tb_recovery_proto_decode(ans, (size_t)got, &m) > 0);
	assert_int_equal(m.reject.reason, TB_RECOVERY_PROTO_REJ_MALFORMED);
	/* The server goes on serving. */
	request(&q, 1, 3);
	assert_int_equal(tb_recovery_client_fetch_one(&ep, TOKEN, &q, 2000, on_frame, &g, &rej,
					      NULL), 3);
	tb_recovery_server_close(srv);
}

/* ------------------------------------------------- a scripted bad server */

struct script {
	int lfd;
	uint16_t port;
	const uint8_t *bytes;  /* sent after reading the request */
	size_t len;
	int hold_ms;           /* then wait this long before closing */
	pthread_t t;
};

/* Reads exactly `n` bytes; 0 or -1. */
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

/* Answers the HELLO as a server would, reads the REQUEST, then sends the
 * script's bytes. */
static void *script_main(void *arg)
{
	struct script *s = arg;
	tb_recovery_proto_welcome_t w = {.stream_id = STREAM, .max_count = 100,
					 .epoch = EPOCH, .first = 1,
					 .last = NFRAMES};
	uint8_t in[sizeof(tb_recovery_proto_wire_hello_t)], out[64];
	int fd = accept(s->lfd, NULL, NULL), n;

	if (fd < 0)
		return NULL;
	n = tb_recovery_proto_encode_welcome(out, sizeof(out), &w);
	if (recv_n(fd, in, sizeof(tb_recovery_proto_wire_hello_t)) < 0 ||
	    send(fd, out, (size_t)n, MSG_NOSIGNAL) != n ||
	    recv_n(fd, in, sizeof(tb_recovery_proto_wire_request_t)) < 0)
		s->len = 0;
	if (s->len && send(fd, s->bytes, s->len, MSG_NOSIGNAL) < 0)
		s->len = 0;
	if (s->hold_ms)
		usleep((useconds_t)s->hold_ms * 1000);
	close(fd);
	return NULL;
}

static void script_start(struct script *s, const void *bytes, size_t len,
			 int hold_ms)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);

	s->lfd = socket(AF_INET, SOCK_STREAM, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(s->lfd, 4), 0);
	getsockname(s->lfd, (struct sockaddr *)&sa, &sl);
	s->port = ntohs(sa.sin_port);
	s->bytes = bytes;
	s->len = len;
	s->hold_ms = hold_ms;
	assert_int_equal(pthread_create(&s->t, NULL, script_main, s), 0);
}

static void script_stop(struct script *s)
{
	pthread_join(s->t, NULL);
	close(s->lfd);
}

/* Builds BEGIN(first, count) + frames [f0, f0 + nf) + END(status, last). */
static size_t build_answer(uint8_t *buf, uint64_t first, uint32_t count,
			   uint64_t f0, int nf, int with_end, uint32_t status,
			   uint64_t last)
{
	tb_recovery_proto_begin_t b = {STREAM, count, EPOCH, first};
	tb_recovery_proto_end_t e = {status, last};
	size_t n = 0;

	n += (size_t)tb_recovery_proto_encode_begin(buf, 64, &b);
	for (int i = 0; i < nf; i++)
		n += copy_frame(buf + n, f0 + (uint64_t)i);
	if (with_end)
		n += (size_t)tb_recovery_proto_encode_end(buf + n, 64, &e);
	return n;
}

static int answer_with(const void *bytes, size_t len, int hold_ms,
		       uint32_t io_ms, struct got *g)
{
	struct script s;
	tb_recovery_proto_request_t q;
	tb_recovery_proto_reject_t rej;
	tb_endpoint_t ep;
	int rc;

	script_start(&s, bytes, len, hold_ms);
	ep = ep_of(s.port);
	request(&q, 10, 5);
	memset(g, 0, sizeof(*g));
	rc = tb_recovery_client_fetch_one(&ep, TOKEN, &q, io_ms, on_frame, g, &rej, NULL);
	script_stop(&s);
	return rc;
}

static void test_malformed_answers(void **state)
{
	uint8_t buf[4096];
	struct got g;
	size_t n;

	(void)state;
	/* Good, as a control. */
	n = build_answer(buf, 10, 5, 10, 5, 1, TB_RECOVERY_PROTO_END_COMPLETE, 14);
	assert_int_equal(answer_with(buf, n, 0, 2000, &g), 5);
	/* Not our protocol at all. */
	memset(buf, 0x5a, 64);
	assert_int_equal(answer_with(buf, 64, 0, 2000, &g), TB_EPROTO);
	assert_non_null(strstr(tb_errmsg(), "bad magic"));
	/* BEGIN for another range. */
	n = build_answer(buf, 11, 5, 11, 5, 1, TB_RECOVERY_PROTO_END_COMPLETE, 15);
	assert_int_equal(answer_with(buf, n, 0, 2000, &g), TB_EPROTO);
	assert_non_null(strstr(tb_errmsg(), "RESPONSE_BEGIN announces"));
	/* A frame out of sequence (12 where 11 belongs). */
	n = build_answer(buf, 10, 5, 10, 1, 0, 0, 0);
	n += copy_frame(buf + n, 12);
	assert_int_equal(answer_with(buf, n, 0, 2000, &g), TB_EPROTO);
	assert_int_equal(g.n, 1);
	/* A frame header with a length below a header. */
	n = build_answer(buf, 10, 5, 10, 0, 0, 0, 0);
	copy_frame(buf + n, 10);
	{
		uint32_t eight = htole32(8); /* the frame's length */

		memcpy(buf + n, &eight, sizeof(eight));
	}
	n += 32;
	assert_int_equal(answer_with(buf, n, 0, 2000, &g), TB_EPROTO);
	/* END "complete" after 3 of 5 frames. */
	n = build_answer(buf, 10, 5, 10, 3, 1, TB_RECOVERY_PROTO_END_COMPLETE, 12);
	assert_int_equal(answer_with(buf, n, 0, 2000, &g), TB_EPROTO);
	assert_non_null(strstr(tb_errmsg(), "RESPONSE_END"));
	/* END "truncated" after 3: fine, 3 delivered. */
	n = build_answer(buf, 10, 5, 10, 3, 1, TB_RECOVERY_PROTO_END_TRUNCATED, 12);
	assert_int_equal(answer_with(buf, n, 0, 2000, &g), 3);
	/* Cut in the middle of a frame. */
	n = build_answer(buf, 10, 5, 10, 2, 0, 0, 0);
	assert_int_equal(answer_with(buf, n - 7, 0, 2000, &g), TB_EIO);
	assert_int_equal(g.n, 1);
	/* No answer at all within the I/O timeout. */
	assert_int_equal(answer_with(buf, 0, 1500, 200, &g), TB_ETIMEDOUT);
	/* Half an answer, then silence. */
	n = build_answer(buf, 10, 5, 10, 2, 0, 0, 0);
	assert_int_equal(answer_with(buf, n, 1500, 200, &g), TB_ETIMEDOUT);
	assert_int_equal(g.n, 2);
}

static void test_failover_and_loss(void **state)
{
	recovery_src_t older = the_src, newer = the_src;
	tb_recovery_server_t *a, *b;
	tb_endpoint_t eps[3];
	tb_recovery_client_cfg_t cfg;
	tb_recovery_client_stats_t st;
	struct got g = {0};
	uint64_t next;

	(void)state;
	older.first = 500;  /* holds 500.. */
	newer.first = 800;  /* holds 800.. */
	a = start_server(&newer, 100, 0);
	b = start_server(&older, 100, 0);
	eps[0] = ep_of(proc_free_port());          /* down */
	eps[1] = ep_of(tb_recovery_server_port(a));      /* too old below 800 */
	eps[2] = ep_of(tb_recovery_server_port(b));      /* has 500.. */
	tb_recovery_client_cfg_init(&cfg);
	cfg.endpoints = eps;
	cfg.n_endpoints = 3;
	cfg.stream_id = STREAM;
	cfg.token = TOKEN;
	cfg.deadline_ms = 20000;
	/* 600..1500: only b holds 600..799; a and b both 800..; requests of
	 * at most 100 (each server's WELCOME says so). */
	assert_int_equal(tb_recovery_client_fetch(&cfg, EPOCH, 600, 1500, on_frame,
					  on_loss, &g, &st, &next), 0);
	assert_int_equal(g.n, 901);
	assert_int_equal(g.bad, 0);
	assert_int_equal(next, 1501);
	assert_int_equal(g.losses, 0);
	assert_true(st.failures >= 1);
	assert_true(st.rejects >= 1);
	assert_int_equal(st.frames, 901);
	{
		tb_recovery_server_stats_t sa, sb;

		/* Nobody was asked for more than it serves at once. */
		tb_recovery_server_stats(a, &sa);
		tb_recovery_server_stats(b, &sb);
		assert_int_equal(sa.rejects[TB_RECOVERY_PROTO_REJ_TOO_LARGE] +
				 sb.rejects[TB_RECOVERY_PROTO_REJ_TOO_LARGE], 0);
		/* (a may have refused the requests pipelined behind the
		 * first before the client hung up) */
		assert_true(sa.rejects[TB_RECOVERY_PROTO_REJ_TOO_OLD] >= 1);
	}

	/* 100..700: nobody holds 100..499: reported lost exactly, then the
	 * rest delivered. */
	memset(&g, 0, sizeof(g));
	assert_int_equal(tb_recovery_client_fetch(&cfg, EPOCH, 100, 700, on_frame,
					  on_loss, &g, &st, &next), 0);
	assert_int_equal(g.losses, 1);
	assert_int_equal(g.loss_first, 100);
	assert_int_equal(g.loss_last, 499);
	assert_int_equal(g.n, 201);
	assert_int_equal(g.bad, 0);
	assert_int_equal(st.lost, 400);
	tb_recovery_server_close(a);
	tb_recovery_server_close(b);
}

static void test_deadline_and_backoff(void **state)
{
	recovery_src_t held = the_src;
	tb_endpoint_t eps[2];
	tb_recovery_client_cfg_t cfg;
	tb_recovery_client_stats_t st;
	struct got g = {0};
	uint64_t t0, next;
	tb_recovery_server_t *srv;
	double secs;

	(void)state;
	eps[0] = ep_of(proc_free_port());
	eps[1] = ep_of(proc_free_port());
	tb_recovery_client_cfg_init(&cfg);
	cfg.endpoints = eps;
	cfg.n_endpoints = 2;
	cfg.stream_id = STREAM;
	cfg.token = TOKEN;
	cfg.deadline_ms = 300;
	cfg.backoff_ms = 10;
	t0 = tb_clock_mono_ms();
	assert_int_equal(tb_recovery_client_fetch(&cfg, EPOCH, 5, 9, on_frame, on_loss,
					  &g, &st, &next), TB_ETIMEDOUT);
	secs = (double)(tb_clock_mono_ms() - t0) / 1e3;
	assert_int_equal(next, 5);
	assert_int_equal(g.n, 0);
	/* Retried with backoff, not once and not in a tight loop. */
	assert_true(st.requests >= 4);
	assert_true(st.requests < 100);
	assert_true(secs >= 0.29 && secs < 30);

	/* Rate-limited at the only endpoint: the client waits and gets all. */
	srv = start_server(&held, 10, 20);
	eps[0] = ep_of(tb_recovery_server_port(srv));
	cfg.n_endpoints = 1;
	cfg.deadline_ms = 20000;
	assert_int_equal(tb_recovery_client_fetch(&cfg, EPOCH, 1, 60, on_frame, on_loss,
					  &g, &st, &next), 0);
	assert_int_equal(g.n, 60);
	assert_int_equal(g.bad, 0);
	assert_true(st.rejects >= 1); /* too large, then rate limits */
	tb_recovery_server_close(srv);

	/* Bad arguments. */
	assert_int_equal(tb_recovery_client_fetch(&cfg, EPOCH, 9, 5, on_frame, on_loss,
					  &g, &st, &next), TB_EINVAL);
	cfg.n_endpoints = 0;
	assert_int_equal(tb_recovery_client_fetch(&cfg, EPOCH, 1, 5, on_frame, on_loss,
					  &g, &st, &next), TB_EINVAL);
}

/* One client, many fetches: one connection, dialled before the first
 * (maintain), authenticated once, requests pipelined; dialled again when
 * the service goes away and comes back on the same port. */
static void test_kept_connection(void **state)
{
	recovery_src_t x = the_src;
	tb_recovery_server_t *srv = start_server(&x, 100, 0);
	tb_recovery_server_cfg_t scfg;
	tb_endpoint_t ep = ep_of(tb_recovery_server_port(srv));
	tb_recovery_client_cfg_t cfg;
	tb_recovery_client_stats_t st;
	tb_recovery_server_stats_t ss;
	tb_recovery_client_t *c;
	struct got g = {0};
	uint64_t next;

	(void)state;
	tb_recovery_client_cfg_init(&cfg);
	cfg.endpoints = &ep;
	cfg.n_endpoints = 1;
	cfg.stream_id = STREAM;
	cfg.token = TOKEN;
	assert_int_equal(tb_recovery_client_open(&c, &cfg), 0);
	{
		/* maintain() begins a dial and finishes it on a later call. */
		uint64_t until = tb_clock_mono_ms() + 2000;
		int up;

		while ((up = tb_recovery_client_maintain(c)) == 0 &&
		       tb_clock_mono_ms() < until)
			usleep(1000);
		assert_int_equal(up, 1);
	}
	tb_recovery_server_stats(srv, &ss);
	assert_int_equal(ss.authenticated, 1);
	assert_int_equal(ss.requests, 0);
	/* 1,000 frames in requests of 100 (WELCOME's max_count), several in
	 * flight on the one connection. */
	assert_int_equal(tb_recovery_client_get(c, EPOCH, 1001, 2000, on_frame,
						on_loss, &g, &st, &next), 0);
	assert_int_equal(g.n, 1000);
	assert_int_equal(g.bad, 0);
	assert_int_equal(st.requests, 10);
	assert_int_equal(st.dials, 0); /* the connection was there */
	for (int i = 0; i < 20; i++) {
		memset(&g, 0, sizeof(g));
		assert_int_equal(tb_recovery_client_get(c, EPOCH, 5 + (uint64_t)i,
							5 + (uint64_t)i, on_frame,
							on_loss, &g, &st, &next), 0);
		assert_int_equal(g.n, 1);
	}
	/* Epoch 0: the service's newest. */
	memset(&g, 0, sizeof(g));
	assert_int_equal(tb_recovery_client_get(c, 0, 7, 9, on_frame, on_loss, &g,
						&st, &next), 0);
	assert_int_equal(g.n, 3);
	assert_true(st.epoch == EPOCH);
	tb_recovery_server_stats(srv, &ss);
	assert_int_equal(ss.connections, 1);
	assert_int_equal(ss.authenticated, 1);
	assert_int_equal(ss.requests, 31);
	/* The service restarts on the same port: the next fetch dials it
	 * again, and maintain() notices before that. */
	tb_recovery_server_cfg_init(&scfg);
	scfg.listen.port = ep.port;
	scfg.max_count = 100;
	tb_recovery_server_close(srv);
	assert_int_equal(recovery_src_serve(&srv, &x, TOKEN, &scfg), 0);
	memset(&g, 0, sizeof(g));
	assert_int_equal(tb_recovery_client_get(c, EPOCH, 10, 19, on_frame,
						on_loss, &g, &st, &next), 0);
	assert_int_equal(g.n, 10);
	assert_int_equal(st.dials, 1);
	tb_recovery_server_close(srv);
	usleep(50000);
	assert_int_equal(tb_recovery_client_maintain(c), 0);
	tb_recovery_client_close(c);
}

/* A client of `n` endpoints at the servers' ports. */
static void client_cfg(tb_recovery_client_cfg_t *cfg, tb_endpoint_t *eps,
		       tb_recovery_server_t **srv, int n)
{
	for (int i = 0; i < n; i++)
		eps[i] = ep_of(tb_recovery_server_port(srv[i]));
	tb_recovery_client_cfg_init(cfg);
	cfg->endpoints = eps;
	cfg->n_endpoints = n;
	cfg->stream_id = STREAM;
	cfg->token = TOKEN;
	cfg->deadline_ms = 5000;
}

static tb_recovery_server_t *start_damaged(recovery_damaged_t *d)
{
	tb_recovery_server_cfg_t cfg;
	tb_recovery_server_t *srv;

	tb_recovery_server_cfg_init(&cfg);
	cfg.max_count = 100;
	cfg.io_timeout_ms = 2000;
	assert_int_equal(recovery_damaged_serve(&srv, d, TOKEN, &cfg), 0);
	return srv;
}

/* 1..NFRAMES from services of which one lost 1500..1502 to damage. */
static void test_damaged_range(void **state)
{
	recovery_damaged_t d1 = {.src = the_src, .lost_first = 1500,
				 .lost_last = 1502};
	recovery_damaged_t d2 = {.src = the_src, .lost_first = 1501,
				 .lost_last = 1510};
	recovery_src_t whole = the_src;
	tb_recovery_server_t *srv[3];
	tb_endpoint_t eps[3];
	tb_recovery_client_cfg_t cfg;
	tb_recovery_client_stats_t st;
	tb_recovery_client_t *c;
	struct got g;
	uint64_t next;

	(void)state;
	srv[0] = start_damaged(&d1);
	srv[1] = start_server(&whole, 100, 0);
	srv[2] = start_damaged(&d2);

	/* It alone: exactly the damaged range lost, everything else
	 * delivered, the end reached. */
	client_cfg(&cfg, eps, srv, 1);
	memset(&g, 0, sizeof(g));
	assert_int_equal(tb_recovery_client_fetch(&cfg, EPOCH, 1, NFRAMES,
						  on_frame, on_loss, &g, &st,
						  &next), 0);
	assert_int_equal(g.losses, 1);
	assert_int_equal(g.loss_first, 1500);
	assert_int_equal(g.loss_last, 1502);
	assert_int_equal(g.n, NFRAMES - 3);
	assert_int_equal(g.bad, 0);
	assert_int_equal(st.lost, 3);
	assert_int_equal(next, NFRAMES + 1);
	assert_true(d1.lost_calls >= 1);

	/* A second service that holds it: nothing lost. */
	client_cfg(&cfg, eps, srv, 2);
	memset(&g, 0, sizeof(g));
	assert_int_equal(tb_recovery_client_fetch(&cfg, EPOCH, 1, NFRAMES,
						  on_frame, on_loss, &g, &st,
						  &next), 0);
	assert_int_equal(g.losses, 0);
	assert_int_equal(g.n, NFRAMES);
	assert_int_equal(g.bad, 0);
	assert_int_equal(st.lost, 0);

	/* Two services damaged over 1500..1502 and 1501..1510: lost is what
	 * neither holds, 1501..1502. */
	eps[1] = ep_of(tb_recovery_server_port(srv[2]));
	memset(&g, 0, sizeof(g));
	assert_int_equal(tb_recovery_client_fetch(&cfg, EPOCH, 1, NFRAMES,
						  on_frame, on_loss, &g, &st,
						  &next), 0);
	assert_int_equal(g.losses, 1);
	assert_int_equal(g.loss_first, 1501);
	assert_int_equal(g.loss_last, 1502);
	assert_int_equal(g.n, NFRAMES - 2);
	assert_int_equal(g.bad, 0);

	/* A late joiner's open fetch (up to the latest, epoch 0): it goes
	 * on past the damage to the end. */
	client_cfg(&cfg, eps, srv, 1);
	assert_int_equal(tb_recovery_client_open(&c, &cfg), 0);
	tb_recovery_client_until_latest(c, 1);
	memset(&g, 0, sizeof(g));
	assert_int_equal(tb_recovery_client_get(c, 0, 1,
						UINT64_MAX - TB_RECOVERY_PROTO_COUNT_MAX,
						on_frame, on_loss, &g, &st,
						&next), 0);
	assert_int_equal(g.losses, 1);
	assert_int_equal(g.loss_first, 1500);
	assert_int_equal(g.loss_last, 1502);
	assert_int_equal(g.n, NFRAMES - 3);
	assert_int_equal(next, NFRAMES + 1);
	tb_recovery_client_close(c);
	for (int i = 0; i < 3; i++)
		tb_recovery_server_close(srv[i]);
}

/* ------------------------------------------- a server of version 2 */

struct old_server {
	int lfd;
	uint16_t port;
	int connections, hellos_v3;
	pthread_t t;
};

/* Speaks version 2 only: a HELLO of another version is refused
 * malformed, in version 2, as such a server does; in version 2, one
 * request is answered whole. */
static void *old_server_main(void *arg)
{
	struct old_server *s = arg;
	uint8_t in[sizeof(tb_recovery_proto_wire_hello_t)], out[8192];

	for (int k = 0; k < 2; k++) {
		tb_recovery_proto_msg_t m;
		int fd = accept(s->lfd, NULL, NULL), n = 0;

		if (fd < 0)
			return NULL;
		s->connections++;
		if (recv_n(fd, in, sizeof(in)) < 0) {
			close(fd);
			return NULL;
		}
		if (in[2] != 2) {
			tb_recovery_proto_reject_t r = {
				.reason = TB_RECOVERY_PROTO_REJ_MALFORMED,
				.text = "recovery: protocol version 3 is not "
					"supported; this peer speaks version 2"};

			s->hellos_v3++;
			n = tb_recovery_proto_encode(out, sizeof(out), 2,
						     TB_RECOVERY_PROTO_REJECT, &r);
			send(fd, out, (size_t)n, MSG_NOSIGNAL);
			close(fd);
			continue;
		}
		{
			tb_recovery_proto_welcome_t w = {
				.stream_id = STREAM, .max_count = 100,
				.epoch = EPOCH, .first = 1, .last = NFRAMES};

			n = tb_recovery_proto_encode(out, sizeof(out), 2,
						     TB_RECOVERY_PROTO_WELCOME, &w);
			send(fd, out, (size_t)n, MSG_NOSIGNAL);
		}
		if (recv_n(fd, in, sizeof(tb_recovery_proto_wire_request_t)) == 0 &&
		    tb_recovery_proto_decode(in, sizeof(tb_recovery_proto_wire_request_t),
					     &m) > 0 && m.version == 2) {
			tb_recovery_proto_end_t e = {
				TB_RECOVERY_PROTO_END_COMPLETE,
				m.request.first + m.request.count - 1};

			n = tb_recovery_proto_encode(out, sizeof(out), 2,
						     TB_RECOVERY_PROTO_RESPONSE_BEGIN,
						     &m.request);
			for (uint32_t i = 0; i < m.request.count; i++)
				n += (int)copy_frame(out + n, m.request.first + i);
			n += tb_recovery_proto_encode(out + n, sizeof(out) - (size_t)n,
						      2, TB_RECOVERY_PROTO_RESPONSE_END,
						      &e);
			send(fd, out, (size_t)n, MSG_NOSIGNAL);
		}
		close(fd);
		return NULL;
	}
	return NULL;
}

static void test_old_server_asked_in_its_version(void **state)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	struct old_server s = {0};
	tb_recovery_proto_request_t q;
	tb_recovery_proto_reject_t rej;
	tb_endpoint_t ep;
	struct got g = {0};

	(void)state;
	s.lfd = socket(AF_INET, SOCK_STREAM, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(s.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(s.lfd, 4), 0);
	getsockname(s.lfd, (struct sockaddr *)&sa, &sl);
	s.port = ntohs(sa.sin_port);
	assert_int_equal(pthread_create(&s.t, NULL, old_server_main, &s), 0);
	ep = ep_of(s.port);
	request(&q, 10, 5);
	assert_int_equal(tb_recovery_client_fetch_one(&ep, TOKEN, &q, 2000,
						      on_frame, &g, &rej, NULL), 5);
	pthread_join(s.t, NULL);
	close(s.lfd);
	assert_int_equal(g.n, 5);
	assert_int_equal(g.bad, 0);
	assert_int_equal(s.connections, 2);
	assert_int_equal(s.hellos_v3, 1);
}

/* ------------------------------------------------------ the quick fetch */

/* A client of the one endpoint, its connection up (maintain). */
static tb_recovery_client_t *quick_client(tb_endpoint_t *ep, uint32_t io_ms)
{
	tb_recovery_client_cfg_t cfg;
	tb_recovery_client_t *c;
	uint64_t until = tb_clock_mono_ms() + 5000;
	int up;

	tb_recovery_client_cfg_init(&cfg);
	cfg.endpoints = ep;
	cfg.n_endpoints = 1;
	cfg.stream_id = STREAM;
	cfg.token = TOKEN;
	cfg.io_timeout_ms = io_ms;
	assert_int_equal(tb_recovery_client_open(&c, &cfg), 0);
	while ((up = tb_recovery_client_maintain(c)) == 0 &&
	       tb_clock_mono_ms() < until)
		usleep(1000);
	assert_int_equal(up, 1);
	return c;
}

/* Steps a quick fetch to its end, one frame a step at most (the caller's
 * limit is honoured); returns its result, *steps how many it took, and
 * the longest step in *worst_ms. */
static int quick_run(tb_recovery_client_t *c, struct got *g, uint64_t *next,
		     uint64_t *steps, uint64_t *worst_ms)
{
	int rc;

	*steps = 0;
	*worst_ms = 0;
	do {
		uint64_t t0 = tb_clock_mono_ms(), before = g->n;

		rc = tb_recovery_client_quick_step(c, on_frame, g, 1, next);
		assert_true(g->n - before <= 1);
		if (tb_clock_mono_ms() - t0 > *worst_ms)
			*worst_ms = tb_clock_mono_ms() - t0;
		++*steps;
		if (rc == 0)
			assert_int_equal(tb_recovery_client_claim(c), 0);
		else
			usleep(0);
	} while (rc == 0);
	return rc;
}

/* A range in one request, asked without blocking, its frames in order;
 * the client held by the quick fetch until it ends, then free again. */
static void test_quick_fetch(void **state)
{
	recovery_src_t x = the_src;
	tb_recovery_server_t *srv = start_server(&x, 100, 0);
	tb_endpoint_t ep = ep_of(tb_recovery_server_port(srv));
	tb_recovery_client_t *c = quick_client(&ep, 1000);
	tb_recovery_server_stats_t ss;
	struct got g = {0};
	uint64_t next, steps, worst;

	(void)state;
	/* Not one request (max_count 100), no epoch: the policy's. */
	assert_int_equal(tb_recovery_client_quick_start(c, EPOCH, 1, 101), TB_EBUSY);
	assert_int_equal(tb_recovery_client_quick_start(c, 0, 1, 10), TB_EBUSY);
	/* Held by the background: refused, and nothing sent. */
	assert_int_equal(tb_recovery_client_claim(c), 1);
	assert_int_equal(tb_recovery_client_quick_start(c, EPOCH, 1, 10), TB_EBUSY);
	tb_recovery_client_unclaim(c);
	for (int round = 0; round < 3; round++) {
		memset(&g, 0, sizeof(g));
		g.next = 201; /* on_frame checks the order from here */
		assert_int_equal(tb_recovery_client_quick_start(c, EPOCH, 201, 300), 0);
		assert_int_equal(tb_recovery_client_claim(c), 0);
		assert_int_equal(quick_run(c, &g, &next, &steps, &worst), 1);
		assert_int_equal(g.n, 100);
		assert_int_equal(g.next, 301);
		assert_int_equal(g.bad, 0);
		assert_int_equal(next, 301);
		assert_true(steps >= 100);
		assert_int_equal(tb_recovery_client_claim(c), 1);
		tb_recovery_client_unclaim(c);
	}
	tb_recovery_server_stats(srv, &ss);
	assert_int_equal(ss.connections, 1);
	assert_int_equal(ss.requests, 3);
	/* What the service does not hold: REJECT, given back, the
	 * connection kept for the policy's own request. */
	assert_int_equal(tb_recovery_client_quick_start(c, EPOCH, NFRAMES + 1,
							NFRAMES + 5), 0);
	memset(&g, 0, sizeof(g));
	assert_int_equal(quick_run(c, &g, &next, &steps, &worst), TB_EBUSY);
	assert_int_equal(next, NFRAMES + 1);
	assert_int_equal(tb_recovery_client_maintain(c), 1);
	tb_recovery_server_stats(srv, &ss);
	assert_int_equal(ss.connections, 1);
	tb_recovery_client_close(c);
	tb_recovery_server_close(srv);
}

/* A service that dies mid-answer, and one that stops answering: each step
 * returns at once, the fetch ends (with the connection closed) at the
 * first frame not delivered, and the client is free again. */
static void test_quick_fetch_broken_or_silent(void **state)
{
	static uint8_t buf[8192];
	size_t len = build_answer(buf, 10, 5, 10, 2, 0, 0, 0);
	struct got g = {0};
	uint64_t next, steps, worst, t0;

	(void)state;
	for (int silent = 0; silent < 2; silent++) {
		struct script s;
		tb_endpoint_t ep;
		tb_recovery_client_t *c;

		script_start(&s, buf, len, silent ? 1500 : 0);
		ep = ep_of(s.port);
		c = quick_client(&ep, 1000);
		memset(&g, 0, sizeof(g));
		assert_int_equal(tb_recovery_client_quick_start(c, EPOCH, 10, 14), 0);
		t0 = tb_clock_mono_ms();
		assert_int_equal(quick_run(c, &g, &next, &steps, &worst),
				 silent ? TB_ETIMEDOUT : TB_EIO);
		print_message("%s: %llu steps, the longest %llu ms, over after "
			      "%llu ms\n", silent ? "silent" : "closed",
			      (unsigned long long)steps, (unsigned long long)worst,
			      (unsigned long long)(tb_clock_mono_ms() - t0));
		assert_int_equal(g.n, 2);
		assert_int_equal(g.bad, 0);
		assert_int_equal(next, 12);
		assert_true(worst < 500); /* never waits for the 1000 ms */
		if (silent)
			assert_true(tb_clock_mono_ms() - t0 >= 990);
		assert_int_equal(tb_recovery_client_claim(c), 1);
		tb_recovery_client_unclaim(c);
		tb_recovery_client_close(c); /* the silent one's script returns */
		script_stop(&s);
	}
}

/* Frames of up to 200,000 bytes, 650,000 in all (the connection's buffer
 * holds 262,144), one of 200,000 starting 100,000 bytes into the buffer,
 * where it does not fit behind: the buffer makes room for it rather than
 * reading nothing into a full buffer. */
struct big {
	uint64_t n, next, bad;
};

static const uint32_t big_len[5] = {100000 - 32, 200000, 100000, 200000, 50000};

static int on_big(void *cd, const tb_frame_hdr_t *f)
{
	struct big *b = cd;
	const uint8_t *p = (const uint8_t *)f + TB_FRAME_HDR_LEN;

	uint32_t plen = f->length - TB_FRAME_HDR_LEN;

	if (f->seq != b->next || f->seq < 10 || f->seq > 14 ||
	    f->length != big_len[f->seq - 10] ||
	    p[0] != (uint8_t)f->seq || p[plen - 1] != (uint8_t)f->seq)
		b->bad++;
	b->next = f->seq + 1;
	b->n++;
	return 0;
}

static void test_quick_fetch_large_frames(void **state)
{
	static uint64_t buf[(650000 + 256) / 8];
	tb_recovery_proto_begin_t bg = {STREAM, 5, EPOCH, 10};
	tb_recovery_proto_end_t e = {TB_RECOVERY_PROTO_END_COMPLETE, 14};
	uint8_t *p = (uint8_t *)buf;
	size_t len;
	struct script s;
	tb_endpoint_t ep;
	tb_recovery_client_t *c;
	struct big b = {0, 10, 0};
	uint64_t next;
	int rc;

	(void)state;
	/* BEGIN is 32 bytes: the second frame starts at 100,000. */
	len = (size_t)tb_recovery_proto_encode_begin(p, 64, &bg);
	for (uint64_t seq = 10; seq < 15; seq++) {
		tb_frame_hdr_t *f = (tb_frame_hdr_t *)(p + len);

		uint32_t plen = big_len[seq - 10] - TB_FRAME_HDR_LEN;

		tb_frame_init(f, plen, 3, STREAM, seq, 1);
		memset(tb_frame_payload(f), (int)(seq & 0xff), plen);
		len += f->length;
	}
	len += (size_t)tb_recovery_proto_encode_end(p + len, 64, &e);
	script_start(&s, buf, len, 0);
	ep = ep_of(s.port);
	c = quick_client(&ep, 2000);
	assert_int_equal(tb_recovery_client_quick_start(c, EPOCH, 10, 14), 0);
	while ((rc = tb_recovery_client_quick_step(c, on_big, &b, 64, &next)) == 0)
		;
	assert_int_equal(rc, 1);
	assert_int_equal(b.n, 5);
	assert_int_equal(b.bad, 0);
	assert_int_equal(next, 15);
	tb_recovery_client_close(c);
	script_stop(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_quick_fetch),
		cmocka_unit_test(test_quick_fetch_broken_or_silent),
		cmocka_unit_test(test_quick_fetch_large_frames),
		cmocka_unit_test(test_kept_connection),
		cmocka_unit_test(test_range_in_order),
		cmocka_unit_test(test_every_reject_reason),
		cmocka_unit_test(test_malformed_request),
		cmocka_unit_test(test_malformed_answers),
		cmocka_unit_test(test_failover_and_loss),
		cmocka_unit_test(test_deadline_and_backoff),
		cmocka_unit_test(test_damaged_range),
		cmocka_unit_test(test_old_server_asked_in_its_version),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
