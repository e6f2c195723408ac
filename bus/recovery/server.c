/*
 * recovery/server.c - the recovery protocol's server side (see the header
 * for the order of checks).
 *
 * Connections live in a fixed table of max_clients slots, each served by
 * its own thread with time-bounded I/O (net.h: io_timeout_ms is the
 * deadline of each request's read and of each chunk's write).  The accept
 * thread joins a finished slot's thread before it reuses the slot; close
 * shuts every socket down so that each thread leaves its wait at once,
 * then joins them all.
 *
 * Edges between the threads (barrier.h), beside the lock:
 *   S1        close stops the accept thread and the connection threads.
 *   R2 -> A2  a connection thread marks its slot done (its socket closed);
 *             the accept thread joins it and reuses the slot.
 *
 * An answer is streamed in chunks: up to CHUNK_FRAMES frames are read from
 * the source into the connection's buffer (the source's lock, if any, is
 * held only for that), then sent.  A source that ends early (retention
 * deleted the rest meanwhile) yields RESPONSE_END TRUNCATED with the last
 * sequence sent, which the client follows with a new request.
 */
#include "bus/recovery/server.h"

#include "bus/barrier.h"
#include "bus/clock.h"
#include "bus/error.h"
#include "bus/net.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CHUNK_FRAMES 256
#define RATE_SLOTS 256 /* client addresses remembered by the rate limiter */

struct bucket {
	char addr[TB_NET_ADDR_MAX];
	double tokens;
	uint64_t last_ms;
};

struct slot {
	tb_recovery_server_t *srv;
	pthread_t thread;
	int fd;         /* -1: free */
	int running;    /* thread not yet joined */
	_Atomic int done;   /* R2: its thread is finishing, its socket closed */
	char addr[TB_NET_ADDR_MAX];
	uint8_t *buf;
	size_t cap, len;
};

struct tb_rsrv {
	tb_recovery_server_cfg_t cfg;
	tb_recovery_server_source_t *src;
	int n_src;
	int lfd;
	uint16_t port;
	_Atomic int stop;   /* S1 */
	pthread_t accept_thread;
	pthread_mutex_t lock; /* slots' fds, buckets, stats */
	struct slot *slots;
	struct bucket buckets[RATE_SLOTS];
	tb_recovery_server_stats_t st;
};

void tb_recovery_server_cfg_init(tb_recovery_server_cfg_t *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	snprintf(cfg->listen.host, sizeof(cfg->listen.host), "127.0.0.1");
	cfg->max_count = TB_RECOVERY_PROTO_COUNT_MAX;
	cfg->io_timeout_ms = 10000;
	cfg->max_clients = 64;
}

/* ------------------------------------------------------------------ I/O */

/* All of `buf` within the I/O timeout; -1 when the connection must end
 * (close() shuts it down to end a write in progress). */
static int send_all(struct slot *c, const void *buf, size_t n)
{
	return tb_net_send_all(c->fd, buf, n, c->srv->cfg.io_timeout_ms) < 0 ? -1 : 0;
}

/* Exactly `n` bytes within the I/O timeout: 0, or non-zero when the
 * connection ends (the client closed, went quiet, or broke). */
static int recv_all(struct slot *c, void *buf, size_t n)
{
	return tb_net_recv_all(c->fd, buf, n, c->srv->cfg.io_timeout_ms);
}

static int send_reject(struct slot *c, uint32_t stream_id, uint32_t reason,
		       uint64_t detail, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static int send_reject(struct slot *c, uint32_t stream_id, uint32_t reason,
		       uint64_t detail, const char *fmt, ...)
{
	uint8_t out[TB_RECOVERY_PROTO_MSG_MAX];
	tb_recovery_proto_reject_t r;
	va_list ap;
	int n;

	memset(&r, 0, sizeof(r));
	r.stream_id = stream_id;
	r.reason = reason;
	r.detail = detail;
	va_start(ap, fmt);
	vsnprintf(r.text, sizeof(r.text), fmt, ap);
	va_end(ap);
	/* The text must be printable: a decoder's message may quote bytes. */
	for (char *t = r.text; *t; t++)
		if (*t < 0x20 || *t > 0x7e)
			*t = '?';
	pthread_mutex_lock(&c->srv->lock);
	c->srv->st.rejects[reason <= TB_RECOVERY_PROTO_REJ_MAX ? reason : 0]++;
	pthread_mutex_unlock(&c->srv->lock);
	n = tb_recovery_proto_encode_reject(out, sizeof(out), &r);
	if (n < 0)
		return -1;
	return send_all(c, out, (size_t)n);
}

/* ------------------------------------------------------------ rate limit */

/* 0 if the client may ask now, else the milliseconds to wait. */
static uint32_t rate_check(tb_recovery_server_t *s, const char *addr)
{
	struct bucket *b = NULL, *oldest = &s->buckets[0];
	uint64_t now = tb_clock_mono_ms();
	uint32_t wait = 0;
	double burst;

	if (s->cfg.rate == 0)
		return 0;
	burst = s->cfg.burst ? s->cfg.burst : 2.0 * s->cfg.rate;
	pthread_mutex_lock(&s->lock);
	for (int i = 0; i < RATE_SLOTS; i++) {
		if (strcmp(s->buckets[i].addr, addr) == 0) {
			b = &s->buckets[i];
			break;
		}
		if (s->buckets[i].last_ms < oldest->last_ms)
			oldest = &s->buckets[i];
	}
	if (!b) {
		b = oldest;
		snprintf(b->addr, sizeof(b->addr), "%s", addr);
		b->tokens = burst;
		b->last_ms = now;
	}
	b->tokens += (double)(now - b->last_ms) * s->cfg.rate / 1000.0;
	if (b->tokens > burst)
		b->tokens = burst;
	b->last_ms = now;
	if (b->tokens >= 1.0) {
		b->tokens -= 1.0;
	} else {
		wait = (uint32_t)((1.0 - b->tokens) * 1000.0 / s->cfg.rate) + 1;
		if (wait > TB_RECOVERY_PROTO_RETRY_MAX_MS)
			wait = TB_RECOVERY_PROTO_RETRY_MAX_MS;
	}
	pthread_mutex_unlock(&s->lock);
	return wait;
}

/* --------------------------------------------------------------- serving */

static int add_frame(void *arg, const tb_frame_hdr_t *f)
{
	struct slot *c = arg;

	if (c->len + f->length > c->cap) {
		size_t cap = c->cap * 2 > c->len + f->length ? c->cap * 2 :
			     c->len + f->length;
		uint8_t *p = realloc(c->buf, cap);

		if (!p)
			return 1; /* the caller sees a short read */
		c->buf = p;
		c->cap = cap;
	}
	memcpy(c->buf + c->len, f, f->length);
	c->len += f->length;
	return 0;
}

/* Answers one decoded request.  0 to go on with the connection, -1 to
 * close it. */
static int serve(struct slot *c, const tb_recovery_proto_request_t *q)
{
	tb_recovery_server_t *s = c->srv;
	const tb_recovery_server_source_t *src = NULL;
	uint64_t epoch, first, last, next, end;
	uint8_t out[TB_RECOVERY_PROTO_MSG_MAX];
	tb_recovery_proto_begin_t b;
	tb_recovery_proto_end_t e;
	uint32_t wait, count;
	int n;

	wait = rate_check(s, c->addr);
	if (wait)
		return send_reject(c, q->stream_id, TB_RECOVERY_PROTO_REJ_RATE_LIMITED,
				   wait, "over %u requests per second; retry in "
				   "%u ms", s->cfg.rate, wait);
	for (int i = 0; i < s->n_src; i++)
		if (s->src[i].stream_id == q->stream_id)
			src = &s->src[i];
	if (!src)
		return send_reject(c, 0, TB_RECOVERY_PROTO_REJ_UNKNOWN_STREAM, 0,
				   "stream %u is not served here", q->stream_id);
	if (!tb_wire_token_equal(q->token, src->token,
				 TB_RECOVERY_PROTO_TOKEN_LEN))
		return send_reject(c, q->stream_id, TB_RECOVERY_PROTO_REJ_UNAUTHORISED, 0,
				   "bad token for stream %u", q->stream_id);
	src->bounds(src->sd, &epoch, &first, &last);
	if (epoch == 0 || q->epoch != epoch) {
		if (epoch == 0)
			return send_reject(c, q->stream_id, TB_RECOVERY_PROTO_REJ_NOT_YET, 0,
					   "nothing received on stream %u yet",
					   q->stream_id);
		return send_reject(c, q->stream_id, TB_RECOVERY_PROTO_REJ_EPOCH_MISMATCH,
				   epoch, "epoch %llu is not held; the current "
				   "one is %llu", (unsigned long long)q->epoch,
				   (unsigned long long)epoch);
	}
	if (q->count > s->cfg.max_count)
		return send_reject(c, q->stream_id, TB_RECOVERY_PROTO_REJ_TOO_LARGE,
				   s->cfg.max_count, "%u frames asked, at most "
				   "%u per request", q->count, s->cfg.max_count);
	if (last == 0 || q->first > last)
		return send_reject(c, q->stream_id, TB_RECOVERY_PROTO_REJ_NOT_YET, last,
				   "%llu is not published yet; the latest is "
				   "%llu", (unsigned long long)q->first,
				   (unsigned long long)last);
	if (q->first < first)
		return send_reject(c, q->stream_id, TB_RECOVERY_PROTO_REJ_TOO_OLD, first,
				   "%llu is no longer held; the earliest is %llu",
				   (unsigned long long)q->first,
				   (unsigned long long)first);
	end = q->first + q->count - 1 < last ? q->first + q->count - 1 : last;
	count = (uint32_t)(end - q->first + 1);
	b.stream_id = q->stream_id;
	b.epoch = epoch;
	b.first = q->first;
	b.count = count;
	n = tb_recovery_proto_encode_begin(out, sizeof(out), &b);
	if (n < 0 || send_all(c, out, (size_t)n) < 0)
		return -1;
	next = q->first;
	while (next <= end) {
		uint64_t want = end - next + 1;
		int got;

		c->len = 0;
		got = src->read(src->sd, next,
				(int)(want < CHUNK_FRAMES ? want : CHUNK_FRAMES),
				add_frame, c);
		if (got <= 0)
			break;
		if (send_all(c, c->buf, c->len) < 0)
			return -1;
		next += (uint64_t)got;
		pthread_mutex_lock(&s->lock);
		s->st.frames += (uint64_t)got;
		pthread_mutex_unlock(&s->lock);
	}
	e.status = next > end ? TB_RECOVERY_PROTO_END_COMPLETE : TB_RECOVERY_PROTO_END_TRUNCATED;
	e.last_seq = next - 1;
	if (e.status == TB_RECOVERY_PROTO_END_TRUNCATED && next == q->first) {
		/* Nothing went out after all: END needs a last_seq > 0 only
		 * when complete, and first - 1 may be 0. */
		e.last_seq = q->first - 1;
	}
	/* Counted before END goes out, so that a client that has its
	 * answer also sees it counted. */
	pthread_mutex_lock(&s->lock);
	s->st.served++;
	pthread_mutex_unlock(&s->lock);
	n = tb_recovery_proto_encode_end(out, sizeof(out), &e);
	if (n < 0 || send_all(c, out, (size_t)n) < 0)
		return -1;
	return 0;
}

static void *conn_main(void *arg)
{
	struct slot *c = arg;
	tb_recovery_server_t *s = c->srv;

	while (!tb_atomic_load_seq_cst(&s->stop)) { /* S1 pairs with S1 in close */
		uint8_t buf[TB_RECOVERY_PROTO_MSG_MAX];
		tb_recovery_proto_msg_t m;
		int need, rc;

		rc = recv_all(c, buf, TB_WIRE_HDR_LEN);
		if (rc != 0)
			break;
		need = tb_recovery_proto_frame_need(buf, TB_WIRE_HDR_LEN);
		if (need < 0 || TB_WIRE_HDR_LEN + (size_t)need > sizeof(buf)) {
			send_reject(c, 0, TB_RECOVERY_PROTO_REJ_MALFORMED, 0, "%s",
				    need < 0 ? tb_errmsg() : "message too long");
			break;
		}
		if (need > 0 && recv_all(c, buf + TB_WIRE_HDR_LEN, (size_t)need) != 0)
			break;
		pthread_mutex_lock(&s->lock);
		s->st.requests++;
		pthread_mutex_unlock(&s->lock);
		rc = tb_recovery_proto_decode(buf, TB_WIRE_HDR_LEN + (size_t)need, &m);
		if (rc < 0 || m.type != TB_RECOVERY_PROTO_REQUEST) {
			send_reject(c, 0, TB_RECOVERY_PROTO_REJ_MALFORMED, 0, "%s",
				    rc < 0 ? tb_errmsg() : "expected a REQUEST");
			break;
		}
		if (serve(c, &m.request) < 0)
			break;
	}
	pthread_mutex_lock(&s->lock);
	close(c->fd);
	c->fd = -1;
	pthread_mutex_unlock(&s->lock);
	tb_atomic_store_release(&c->done, 1); /* R2 pairs with A2 in accept_main */
	return NULL;
}

static void *accept_main(void *arg)
{
	tb_recovery_server_t *s = arg;

	while (!tb_atomic_load_seq_cst(&s->stop)) { /* S1 pairs with S1 in close */
		struct pollfd pfd = {.fd = s->lfd, .events = POLLIN};
		char addr[TB_NET_ADDR_MAX];
		struct slot *c = NULL;
		int fd;

		if (poll(&pfd, 1, 100) <= 0)
			continue;
		fd = tb_net_accept(s->lfd, addr, sizeof(addr));
		if (fd < 0)
			continue;
		pthread_mutex_lock(&s->lock);
		for (int i = 0; i < s->cfg.max_clients; i++) {
			struct slot *x = &s->slots[i];

			/* A2 pairs with R2 in conn_main: its thread is done
			 * with the slot. */
			if (x->running && tb_atomic_load_acquire(&x->done)) {
				pthread_mutex_unlock(&s->lock);
				pthread_join(x->thread, NULL);
				pthread_mutex_lock(&s->lock);
				x->running = 0;
			}
			if (!x->running && !c)
				c = x;
		}
		if (c) {
			c->fd = fd;
			c->running = 1;
			/* Relaxed: no thread runs on the slot; pthread_create
			 * below orders it before the new one. */
			tb_atomic_store_relaxed(&c->done, 0);
			s->st.connections++;
		}
		pthread_mutex_unlock(&s->lock);
		if (!c) {
			close(fd); /* full: the client fails over */
			continue;
		}
		snprintf(c->addr, sizeof(c->addr), "%s", addr);
		if (pthread_create(&c->thread, NULL, conn_main, c) != 0) {
			pthread_mutex_lock(&s->lock);
			close(fd);
			c->fd = -1;
			c->running = 0;
			pthread_mutex_unlock(&s->lock);
		}
	}
	return NULL;
}

static int listen_on(tb_recovery_server_t *s)
{
	int fd = tb_net_listen(&s->cfg.listen, &s->port);

	if (fd < 0)
		return fd;
	s->lfd = fd;
	return 0;
}

int tb_recovery_server_open(tb_recovery_server_t **out, const tb_recovery_server_cfg_t *cfg,
		 const tb_recovery_server_source_t *src, int n)
{
	tb_recovery_server_t *s;
	int rc;

	*out = NULL;
	if (n < 1 || !src || cfg->max_clients < 1 || cfg->max_count < 1 ||
	    cfg->max_count > TB_RECOVERY_PROTO_COUNT_MAX || cfg->io_timeout_ms < 1)
		return tb_error_set(TB_EINVAL, "recovery server: need sources, "
				  "max_clients >= 1, max_count 1..%u, a timeout",
				  TB_RECOVERY_PROTO_COUNT_MAX);
	s = calloc(1, sizeof(*s));
	if (!s)
		return tb_error_set(TB_ENOMEM, "recovery server: out of memory");
	s->cfg = *cfg;
	s->n_src = n;
	s->src = calloc((size_t)n, sizeof(*src));
	s->slots = calloc((size_t)cfg->max_clients, sizeof(*s->slots));
	if (!s->src || !s->slots) {
		free(s->src);
		free(s->slots);
		free(s);
		return tb_error_set(TB_ENOMEM, "recovery server: out of memory");
	}
	memcpy(s->src, src, (size_t)n * sizeof(*src));
	for (int i = 0; i < cfg->max_clients; i++) {
		s->slots[i].srv = s;
		s->slots[i].fd = -1;
	}
	pthread_mutex_init(&s->lock, NULL);
	rc = listen_on(s);
	if (rc == 0 && (rc = pthread_create(&s->accept_thread, NULL, accept_main,
					    s)) != 0) {
		close(s->lfd);
		rc = tb_error_sys(rc, "start the recovery server thread");
	}
	if (rc < 0) {
		pthread_mutex_destroy(&s->lock);
		free(s->src);
		free(s->slots);
		free(s);
		return tb_error_prepend(rc, "recovery server");
	}
	*out = s;
	return 0;
}

uint16_t tb_recovery_server_port(const tb_recovery_server_t *s) { return s->port; }

void tb_recovery_server_stats(const tb_recovery_server_t *s, tb_recovery_server_stats_t *st)
{
	pthread_mutex_lock((pthread_mutex_t *)&s->lock);
	*st = s->st;
	pthread_mutex_unlock((pthread_mutex_t *)&s->lock);
}

void tb_recovery_server_close(tb_recovery_server_t *s)
{
	if (!s)
		return;
	tb_atomic_store_seq_cst(&s->stop, 1); /* S1 pairs with S1 in the threads */
	pthread_join(s->accept_thread, NULL);
	close(s->lfd);
	pthread_mutex_lock(&s->lock);
	for (int i = 0; i < s->cfg.max_clients; i++)
		if (s->slots[i].fd >= 0)
			shutdown(s->slots[i].fd, SHUT_RDWR);
	pthread_mutex_unlock(&s->lock);
	for (int i = 0; i < s->cfg.max_clients; i++) {
		if (s->slots[i].running)
			pthread_join(s->slots[i].thread, NULL);
		free(s->slots[i].buf);
	}
	pthread_mutex_destroy(&s->lock);
	free(s->src);
	free(s->slots);
	free(s);
}
