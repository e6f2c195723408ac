/*
 * recovery/server.c - the recovery protocol's server side (the admission
 * rules and the order of checks are in the header).
 *
 * Two kinds of thread.  The admission thread owns the listening socket and
 * every pending connection (accepted, no HELLO yet): one epoll set, a small
 * fixed table (`pend`), non-blocking reads of at most the bytes a HELLO
 * still needs, and deadlines it checks itself, so that any number of idle,
 * slow or hostile connections costs one thread and a table entry each, and
 * no more.  It reads exactly one message from a pending connection; what
 * the client sent after its HELLO (a pipelined REQUEST) stays in the
 * socket for the connection's own thread.  A HELLO with the right token
 * moves the socket to one of max_clients authenticated slots (`conns`),
 * each served by a thread of its own with time-bounded I/O (net.h).
 *
 * Per-address state (`addrs`: connection and request buckets, failed
 * tokens) is a small hash table; an address new to a full neighbourhood
 * takes the place of the one there seen longest ago, which costs an
 * attacker nothing it could not have had by waiting.
 *
 * Edges between the threads (barrier.h), beside the lock:
 *   S1        close stops the admission thread and the connection threads.
 *   R2 -> A2  a connection thread marks its slot done (its socket closed);
 *             the admission thread joins it and reuses the slot.
 *
 * An answer is built in the connection's buffer: RESPONSE_BEGIN, the
 * frames as the source hands them over (the source's lock, if any, is held
 * only while it copies), RESPONSE_END, and written once, or in buffers of
 * TB_RECOVERY_SERVER_FLUSH bytes when it is large.  A source that ends
 * early (retention deleted the rest meanwhile, or the store met a damaged
 * record) yields RESPONSE_END TRUNCATED with the last sequence sent, which
 * the client follows with a new request.  A request that starts in a
 * damaged range is refused LOST instead of BEGIN: the BEGIN already built
 * is dropped, which is possible as long as nothing of the answer has been
 * written.
 *
 * Spinning (cfg.spin_us): conn_read tries the socket without sleeping
 * (tb_net_reader_try) before the timed read, within that read's deadline,
 * and looks at `stop` between tries; close's shutdown() also ends a try
 * (the peer "closed"), so a spinning thread is joined as soon as a
 * sleeping one.
 *
 * Versions: the HELLO's version (proto.h: 2 or 3) is the connection's;
 * every answer and refusal on it is encoded in it, and so is the refusal
 * of a HELLO (in the current version when the HELLO's is not one spoken
 * here, which is what tells an older client why).
 */
#include "bus/recovery/server.h"

#include "bus/barrier.h"
#include "bus/clock.h"
#include "bus/error.h"
#include "bus/net.h"
#include "bus/thread.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define ADDR_SLOTS 1024   /* client addresses remembered */
#define ADDR_PROBE 8      /* slots an address may be found in */
#define ACCEPT_BATCH 64   /* accepts per turn, so pending reads are not starved */
#define AUTH_FORGET_MS 60000 /* an address's failed tokens are forgotten after
				a quiet minute */
#define BUSY_RETRY_MS 1000 /* what a client refused BUSY is told to wait */
#define ACCEPT_PAUSE_MS 10 /* after accept failed (out of descriptors) */
#define CONN_INBUF 4096   /* an authenticated connection's read buffer:
			     a burst of pipelined requests in one recv() */
#define EV_LISTEN 0ull
#define EV_WAKE 1ull

enum log_kind {
	LOG_CONN_RATE, LOG_EVICT, LOG_HELLO_TIMEOUT, LOG_AUTH, LOG_BUSY,
	LOG_MALFORMED, LOG_ACCEPT, LOG_KINDS
};

struct addr_state {
	char addr[TB_NET_ADDR_MAX];  /* "" = free */
	uint64_t seen_ms;
	double req_tokens, conn_tokens;
	uint64_t req_ms, conn_ms;
	uint32_t failures;           /* wrong tokens, until forgotten */
	uint64_t fail_ms;
};

enum { P_FREE = 0, P_HELLO, P_TARPIT };

struct pending {
	int state;
	int fd;
	int limited;                 /* over its address's connection rate:
					one look at what it sent, no more */
	uint32_t gen;                /* epoll events name (gen, index) */
	uint64_t order;              /* accept order: the oldest is smallest */
	uint64_t deadline_ms;        /* P_HELLO: for the HELLO; P_TARPIT: when
					the refusal goes out */
	uint32_t stream_id;          /* P_TARPIT: the stream asked for */
	uint8_t version;             /* P_TARPIT: the HELLO's version */
	uint32_t have;
	char addr[TB_NET_ADDR_MAX];
	uint8_t buf[TB_RECOVERY_PROTO_MSG_MAX];
};

struct conn {
	tb_recovery_server_t *srv;
	const tb_recovery_server_source_t *src;
	pthread_t thread;
	int fd;         /* -1: free */
	int running;    /* thread not yet joined */
	uint8_t version; /* its HELLO's: what it is answered in */
	_Atomic int done;   /* R2: its thread is finishing, its socket closed */
	char addr[TB_NET_ADDR_MAX];
	uint8_t *out;   /* the answer being built */
	size_t out_cap, out_len;
	tb_net_reader_t in;
	int blocking;   /* its socket is blocking: conn_idle's one recv() */
	uint8_t inbuf[CONN_INBUF];
};

struct loglimit {
	uint64_t last_ms;
	uint64_t folded;
};

struct tb_rsrv {
	tb_recovery_server_cfg_t cfg;
	tb_recovery_server_source_t *src;
	int n_src;
	int lfd, epfd, wfd;
	uint16_t port;
	_Atomic int stop;   /* S1 */
	pthread_t front;
	/* Admission thread only. */
	struct pending *pend;
	uint64_t pend_order;
	uint64_t accept_paused_until;
	/* The lock: addrs, logs, stats, conns' fds. */
	pthread_mutex_t lock;
	struct addr_state *addrs;
	struct loglimit logs[LOG_KINDS];
	tb_recovery_server_stats_t st;
	struct conn *conns;
};

void tb_recovery_server_cfg_init(tb_recovery_server_cfg_t *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	snprintf(cfg->listen.host, sizeof(cfg->listen.host), "127.0.0.1");
	cfg->max_count = TB_RECOVERY_PROTO_COUNT_MAX;
	cfg->io_timeout_ms = 10000;
	cfg->max_clients = 64;
	cfg->hello_timeout_ms = 1000;
	cfg->max_pending = 256;
	cfg->max_pending_per_addr = 16;
	cfg->conn_rate = 100;
	cfg->auth_delay_ms = 200;
	cfg->auth_delay_max_ms = 5000;
	cfg->log_interval_ms = 1000;
}

/* ------------------------------------------------------------ bookkeeping */

static void count(tb_recovery_server_t *s, uint64_t *field, uint64_t n)
{
	pthread_mutex_lock(&s->lock);
	*field += n;
	pthread_mutex_unlock(&s->lock);
}

/* One log line per kind per log_interval_ms; the lines held back are
 * counted and named by the next one. */
static void slog(tb_recovery_server_t *s, enum log_kind kind, const char *fmt,
		 ...) __attribute__((format(printf, 3, 4)));

static void slog(tb_recovery_server_t *s, enum log_kind kind, const char *fmt,
		 ...)
{
	struct loglimit *l = &s->logs[kind];
	uint64_t now = tb_clock_mono_ms(), folded;
	char line[256];
	va_list ap;

	pthread_mutex_lock(&s->lock);
	if (s->cfg.log_interval_ms && l->last_ms &&
	    now - l->last_ms < s->cfg.log_interval_ms) {
		l->folded++;
		s->st.logs_suppressed++;
		pthread_mutex_unlock(&s->lock);
		return;
	}
	folded = l->folded;
	l->folded = 0;
	l->last_ms = now;
	pthread_mutex_unlock(&s->lock);
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (folded)
		tb_warn("recovery server :%u: %s (and %llu more like it since "
			"the last such line)", s->port, line,
			(unsigned long long)folded);
	else
		tb_warn("recovery server :%u: %s", s->port, line);
}

/* FNV-1a of an address: where its state is looked for. */
static uint32_t addr_hash(const char *addr)
{
	uint32_t h = 2166136261u;

	for (; *addr; addr++)
		h = (h ^ (uint8_t)*addr) * 16777619u;
	return h;
}

/* The state of `addr`: looked for in ADDR_PROBE slots from its hash;
 * when it is new, it takes the one of them seen longest ago.  Under the
 * lock. */
static struct addr_state *addr_get(tb_recovery_server_t *s, const char *addr,
				   uint64_t now)
{
	uint32_t h = addr_hash(addr);
	struct addr_state *a = NULL, *old = NULL;

	for (int i = 0; i < ADDR_PROBE; i++) {
		struct addr_state *x = &s->addrs[(h + (uint32_t)i) % ADDR_SLOTS];

		if (strcmp(x->addr, addr) == 0) {
			a = x;
			break;
		}
		if (!old || x->seen_ms < old->seen_ms)
			old = x;
	}
	if (!a) {
		a = old;
		memset(a, 0, sizeof(*a));
		snprintf(a->addr, sizeof(a->addr), "%s", addr);
		a->req_tokens = s->cfg.burst ? s->cfg.burst : 2.0 * s->cfg.rate;
		a->conn_tokens = s->cfg.conn_burst ? s->cfg.conn_burst :
				 2.0 * s->cfg.conn_rate;
		a->req_ms = a->conn_ms = now;
	}
	a->seen_ms = now;
	return a;
}

/* A token bucket of `rate` a second holding at most `burst`: 0 when one
 * could be taken, else the milliseconds until one can. */
static uint32_t bucket_take(double *tokens, uint64_t *last_ms, uint32_t rate,
			    uint32_t burst, uint64_t now)
{
	double cap = burst ? burst : 2.0 * rate;
	uint32_t wait;

	*tokens += (double)(now - *last_ms) * rate / 1000.0;
	if (*tokens > cap)
		*tokens = cap;
	*last_ms = now;
	if (*tokens >= 1.0) {
		*tokens -= 1.0;
		return 0;
	}
	wait = (uint32_t)((1.0 - *tokens) * 1000.0 / rate) + 1;
	return wait < TB_RECOVERY_PROTO_RETRY_MAX_MS ? wait :
	       TB_RECOVERY_PROTO_RETRY_MAX_MS;
}

/* 0 if the client may ask now, else the milliseconds to wait. */
static uint32_t rate_check(tb_recovery_server_t *s, const char *addr)
{
	uint64_t now;
	uint32_t wait;

	if (s->cfg.rate == 0)
		return 0;
	now = tb_clock_mono_ms();
	pthread_mutex_lock(&s->lock);
	{
		struct addr_state *a = addr_get(s, addr, now);

		wait = bucket_take(&a->req_tokens, &a->req_ms, s->cfg.rate,
				   s->cfg.burst, now);
	}
	pthread_mutex_unlock(&s->lock);
	return wait;
}

/* --------------------------------------------------------------- refusals */

/* The version to answer the message at `buf` in: its own when spoken
 * here, else the current one. */
static uint8_t version_of(const uint8_t *buf, size_t have)
{
	uint8_t v = have > offsetof(tb_wire_hdr_t, version) ?
		    buf[offsetof(tb_wire_hdr_t, version)] : 0;

	return v >= TB_RECOVERY_PROTO_VERSION_MIN &&
	       v <= TB_RECOVERY_PROTO_VERSION ? v : TB_RECOVERY_PROTO_VERSION;
}

/* Sends a REJECT in `version` on `fd` within `timeout_ms` (0: only if the
 * socket takes it at once, as the admission thread must never wait).
 * Counted by reason.  0, or -1 when the connection must end. */
static int send_reject(tb_recovery_server_t *s, int fd, uint32_t timeout_ms,
		       uint8_t version, uint32_t stream_id, uint32_t reason,
		       uint64_t detail, const char *fmt, ...)
	__attribute__((format(printf, 8, 9)));

static int send_reject(tb_recovery_server_t *s, int fd, uint32_t timeout_ms,
		       uint8_t version, uint32_t stream_id, uint32_t reason,
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
	count(s, &s->st.rejects[reason <= TB_RECOVERY_PROTO_REJ_MAX ? reason : 0], 1);
	n = tb_recovery_proto_encode(out, sizeof(out), version,
				     TB_RECOVERY_PROTO_REJECT, &r);
	if (n < 0)
		return -1;
	return tb_net_send_all(fd, out, (size_t)n, timeout_ms) < 0 ? -1 : 0;
}

/* ------------------------------------------------------- pending: table */

static void pend_free(tb_recovery_server_t *s, struct pending *p)
{
	epoll_ctl(s->epfd, EPOLL_CTL_DEL, p->fd, NULL);
	close(p->fd);
	p->state = P_FREE;
	p->fd = -1;
}

/* The oldest pending connection, of `addr` when not NULL; NULL if none. */
static struct pending *pend_oldest(tb_recovery_server_t *s, const char *addr,
				   int *n_addr)
{
	struct pending *o = NULL;

	*n_addr = 0;
	for (int i = 0; i < s->cfg.max_pending; i++) {
		struct pending *p = &s->pend[i];

		if (p->state == P_FREE || (addr && strcmp(p->addr, addr) != 0))
			continue;
		(*n_addr)++;
		if (!o || p->order < o->order)
			o = p;
	}
	return o;
}

static void evict(tb_recovery_server_t *s, struct pending *p, const char *why)
{
	count(s, &s->st.evicted, 1);
	slog(s, LOG_EVICT, "%s: a connection without a HELLO closed to make "
	     "room (%s)", p->addr, why);
	pend_free(s, p);
}

/* Takes the new connection `fd` from `addr` into the pending table,
 * making room first by closing the oldest (of its address, or of all)
 * when `may_evict`; NULL when it could not (no room without evicting, or
 * epoll refused it): `fd` is then the caller's to close. */
static struct pending *pend_add(tb_recovery_server_t *s, int fd,
				 const char *addr, uint64_t now, int may_evict)
{
	struct pending *p = NULL, *o;
	struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP};
	int n;

	o = pend_oldest(s, addr, &n);
	if (o && n >= s->cfg.max_pending_per_addr) {
		if (!may_evict)
			return NULL;
		evict(s, o, "too many from one address");
	}
	o = pend_oldest(s, NULL, &n);
	if (o && n >= s->cfg.max_pending) {
		if (!may_evict)
			return NULL;
		evict(s, o, "too many in all");
	}
	for (int i = 0; i < s->cfg.max_pending && !p; i++)
		if (s->pend[i].state == P_FREE)
			p = &s->pend[i];
	p->state = P_HELLO;
	p->fd = fd;
	p->limited = 0;
	p->gen++;
	p->order = ++s->pend_order;
	p->deadline_ms = now + s->cfg.hello_timeout_ms;
	p->have = 0;
	p->stream_id = 0;
	snprintf(p->addr, sizeof(p->addr), "%s", addr);
	ev.data.u64 = ((uint64_t)p->gen << 32 | (uint64_t)(p - s->pend)) + 2;
	if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		p->state = P_FREE;
		p->fd = -1;
		return NULL;
	}
	return p;
}

/* -------------------------------------------------- authenticated slots */

static void *conn_main(void *arg);

/* Joins the threads of slots whose connection ended.  Admission thread. */
static void conns_reap(tb_recovery_server_t *s)
{
	for (int i = 0; i < s->cfg.max_clients; i++) {
		struct conn *x = &s->conns[i];

		/* A2 pairs with R2 in conn_main: its thread is done with
		 * the slot. */
		if (x->running && tb_atomic_load_acquire(&x->done)) {
			pthread_join(x->thread, NULL);
			x->running = 0;
		}
	}
}

/* Gives the pending connection `p`, authenticated for `src`, a slot and a
 * thread, or refuses it BUSY. */
static void admit(tb_recovery_server_t *s, struct pending *p,
		  const tb_recovery_server_source_t *src, uint8_t version)
{
	struct conn *c = NULL;
	int rc;

	conns_reap(s);
	for (int i = 0; i < s->cfg.max_clients && !c; i++)
		if (!s->conns[i].running)
			c = &s->conns[i];
	if (!c) {
		count(s, &s->st.busy, 1);
		slog(s, LOG_BUSY, "%s: authenticated, but all %d client slots "
		     "are taken; refused", p->addr, s->cfg.max_clients);
		send_reject(s, p->fd, 0, version, src->stream_id,
			    TB_RECOVERY_PROTO_REJ_BUSY, BUSY_RETRY_MS, "all %d "
			    "client slots are taken; retry in %u ms",
			    s->cfg.max_clients, BUSY_RETRY_MS);
		pend_free(s, p);
		return;
	}
	epoll_ctl(s->epfd, EPOLL_CTL_DEL, p->fd, NULL);
	pthread_mutex_lock(&s->lock);
	c->fd = p->fd;
	s->st.authenticated++;
	pthread_mutex_unlock(&s->lock);
	c->src = src;
	c->version = version;
	c->running = 1;
	/* Relaxed: no thread runs on the slot; pthread_create (in
	 * tb_thread_start) below orders it before the new one. */
	tb_atomic_store_relaxed(&c->done, 0);
	snprintf(c->addr, sizeof(c->addr), "%s", p->addr);
	p->state = P_FREE;
	p->fd = -1;
	rc = tb_thread_start(&c->thread, "tb-rsrv-conn", conn_main, c);
	if (rc < 0) {
		pthread_mutex_lock(&s->lock);
		close(c->fd);
		c->fd = -1;
		pthread_mutex_unlock(&s->lock);
		c->running = 0;
		slog(s, LOG_ACCEPT, "%s: no thread for a client: %s", c->addr,
		     tb_errmsg());
	}
}

/* ------------------------------------------------------ pending: HELLO */

static const tb_recovery_server_source_t *source_of(tb_recovery_server_t *s,
						    uint32_t stream_id)
{
	for (int i = 0; i < s->n_src; i++)
		if (s->src[i].stream_id == stream_id)
			return &s->src[i];
	return NULL;
}

/* A wrong token: counted, and answered only after the address's delay. */
static void tarpit(tb_recovery_server_t *s, struct pending *p, uint64_t now)
{
	uint64_t delay;
	uint32_t failures;

	if (p->limited) {
		/* No answer at all: an address over its connection rate
		 * must not learn faster than one within it. */
		count(s, &s->st.auth_failures, 1);
		pend_free(s, p);
		return;
	}

	pthread_mutex_lock(&s->lock);
	{
		struct addr_state *a = addr_get(s, p->addr, now);

		if (now - a->fail_ms > AUTH_FORGET_MS)
			a->failures = 0;
		delay = (uint64_t)s->cfg.auth_delay_ms << (a->failures < 20 ?
							   a->failures : 20);
		if (delay > s->cfg.auth_delay_max_ms)
			delay = s->cfg.auth_delay_max_ms;
		failures = ++a->failures;
		a->fail_ms = now;
		s->st.auth_failures++;
	}
	pthread_mutex_unlock(&s->lock);
	slog(s, LOG_AUTH, "%s: wrong token for stream %u (%u in a row from "
	     "there); refused in %llu ms", p->addr, p->stream_id, failures,
	     (unsigned long long)delay);
	/* No more reading: the answer is all it gets. */
	epoll_ctl(s->epfd, EPOLL_CTL_DEL, p->fd, NULL);
	p->state = P_TARPIT;
	p->deadline_ms = now + delay;
}

/* The whole first message of `p` is in its buffer. */
static void hello(tb_recovery_server_t *s, struct pending *p, uint64_t now)
{
	const tb_recovery_server_source_t *src;
	tb_recovery_proto_msg_t m;
	int rc = tb_recovery_proto_decode(p->buf, p->have, &m);

	if (rc < 0 || m.type != TB_RECOVERY_PROTO_HELLO) {
		char why[TB_RECOVERY_PROTO_TEXT_LEN];

		snprintf(why, sizeof(why), "%s", rc < 0 ? tb_errmsg() :
			 "the first message must be HELLO");
		slog(s, LOG_MALFORMED, "%s: %s", p->addr, why);
		send_reject(s, p->fd, 0, version_of(p->buf, p->have), 0,
			    TB_RECOVERY_PROTO_REJ_MALFORMED, 0, "%s", why);
		pend_free(s, p);
		return;
	}
	p->stream_id = m.hello.stream_id;
	p->version = m.version;
	src = source_of(s, m.hello.stream_id);
	if (!src) {
		send_reject(s, p->fd, 0, m.version, 0,
			    TB_RECOVERY_PROTO_REJ_UNKNOWN_STREAM, 0,
			    "stream %u is not served here", m.hello.stream_id);
		pend_free(s, p);
		return;
	}
	if (!tb_wire_token_equal(m.hello.token, src->token,
				 TB_RECOVERY_PROTO_TOKEN_LEN)) {
		tarpit(s, p, now);
		return;
	}
	admit(s, p, src, m.version);
}

/* Reads what `p` has sent, never more than its HELLO still needs. */
static void pend_read(tb_recovery_server_t *s, struct pending *p, uint64_t now)
{
	int need, n;

	if (p->state != P_HELLO)
		return;
	need = tb_recovery_proto_frame_need(p->buf, p->have);
	if (need < 0) {
		char why[TB_RECOVERY_PROTO_TEXT_LEN];

		snprintf(why, sizeof(why), "%s", tb_errmsg());
		slog(s, LOG_MALFORMED, "%s: %s", p->addr, why);
		send_reject(s, p->fd, 0, version_of(p->buf, p->have), 0,
			    TB_RECOVERY_PROTO_REJ_MALFORMED, 0, "%s", why);
		pend_free(s, p);
		return;
	}
	if (need > 0) {
		n = tb_net_recv_some(p->fd, p->buf + p->have, (size_t)need, 0);
		if (n == 0)
			return;      /* nothing after all */
		if (n < 0) {
			pend_free(s, p); /* closed or broken before a HELLO */
			return;
		}
		p->have += (uint32_t)n;
		/* The framer judges the header as soon as it is whole. */
		need = tb_recovery_proto_frame_need(p->buf, p->have);
		if (need != 0) {
			if (need < 0)
				pend_read(s, p, now); /* refuses it */
			return;
		}
	}
	hello(s, p, now);
}

/* Deadlines: a HELLO not whole in time; a refusal due. */
static uint64_t pend_expire(tb_recovery_server_t *s, uint64_t now)
{
	uint64_t next = now + 1000;

	for (int i = 0; i < s->cfg.max_pending; i++) {
		struct pending *p = &s->pend[i];

		if (p->state == P_FREE)
			continue;
		if (now < p->deadline_ms) {
			if (p->deadline_ms < next)
				next = p->deadline_ms;
			continue;
		}
		if (p->state == P_HELLO) {
			count(s, &s->st.hello_timeouts, 1);
			slog(s, LOG_HELLO_TIMEOUT, "%s: no HELLO within %u ms of "
			     "connecting (%u bytes); closed", p->addr,
			     s->cfg.hello_timeout_ms, p->have);
		} else {
			send_reject(s, p->fd, 0, p->version, p->stream_id,
				    TB_RECOVERY_PROTO_REJ_UNAUTHORISED, 0,
				    "bad token for stream %u", p->stream_id);
		}
		pend_free(s, p);
	}
	return next;
}

static void accept_some(tb_recovery_server_t *s, uint64_t now)
{
	for (int k = 0; k < ACCEPT_BATCH; k++) {
		char addr[TB_NET_ADDR_MAX];
		struct pending *p;
		uint32_t wait = 0;
		int fd = tb_net_accept(s->lfd, addr, sizeof(addr));

		if (fd == TB_NOT_CONNECTED)
			return;
		if (fd < 0) {
			/* Out of descriptors, most likely: make room, and
			 * stop accepting for a moment so that the listener's
			 * readiness is not a busy loop. */
			struct pending *o;
			struct epoll_event ev = {.events = 0,
						 .data.u64 = EV_LISTEN};
			int n;

			slog(s, LOG_ACCEPT, "accept: %s", tb_errmsg());
			o = pend_oldest(s, NULL, &n);
			if (o)
				evict(s, o, "out of descriptors");
			epoll_ctl(s->epfd, EPOLL_CTL_MOD, s->lfd, &ev);
			s->accept_paused_until = now + ACCEPT_PAUSE_MS;
			return;
		}
		pthread_mutex_lock(&s->lock);
		s->st.connections++;
		if (s->cfg.conn_rate) {
			struct addr_state *a = addr_get(s, addr, now);

			wait = bucket_take(&a->conn_tokens, &a->conn_ms,
					   s->cfg.conn_rate, s->cfg.conn_burst,
					   now);
		}
		pthread_mutex_unlock(&s->lock);
		/* One over its rate pushes no one out. */
		p = pend_add(s, fd, addr, now, wait == 0);
		if (!p) {
			if (wait) {
				count(s, &s->st.conn_limited, 1);
				slog(s, LOG_CONN_RATE, "%s: over %u connections "
				     "a second; closed", addr, s->cfg.conn_rate);
			}
			close(fd);
			continue;
		}
		p->limited = wait != 0;
		/* A client sends its HELLO as soon as it has connected: it
		 * is often here already, and is taken at once, before
		 * newer connections from its address can push it out. */
		pend_read(s, p, now);
		if (p->limited && p->state == P_HELLO && p->fd >= 0) {
			/* Over the rate and nothing whole to judge: gone. */
			count(s, &s->st.conn_limited, 1);
			slog(s, LOG_CONN_RATE, "%s: over %u connections a "
			     "second; closed", addr, s->cfg.conn_rate);
			pend_free(s, p);
		}
	}
}

static void *front_main(void *arg)
{
	tb_recovery_server_t *s = arg;
	struct epoll_event ev[64];
	uint64_t next = tb_clock_mono_ms();

	while (!tb_atomic_load_seq_cst(&s->stop)) { /* S1 pairs with S1 in close */
		uint64_t now = tb_clock_mono_ms();
		int n, listen_ready = 0;

		n = epoll_wait(s->epfd, ev, 64,
			       next > now ? (int)(next - now) : 0);
		now = tb_clock_mono_ms();
		/* Pending connections first: a HELLO that came is admitted
		 * before newer connections can push it out. */
		for (int i = 0; i < n; i++) {
			uint64_t d = ev[i].data.u64;
			struct pending *p;

			if (d == EV_LISTEN) {
				listen_ready = 1;
				continue;
			}
			if (d == EV_WAKE)
				continue;
			d -= 2;
			p = &s->pend[(uint32_t)d];
			if (p->state != P_FREE && p->gen == (uint32_t)(d >> 32))
				pend_read(s, p, now);
		}
		if (s->accept_paused_until && now >= s->accept_paused_until) {
			struct epoll_event lev = {.events = EPOLLIN,
						  .data.u64 = EV_LISTEN};

			s->accept_paused_until = 0;
			epoll_ctl(s->epfd, EPOLL_CTL_MOD, s->lfd, &lev);
			listen_ready = 1;
		}
		if (listen_ready && !s->accept_paused_until)
			accept_some(s, now);
		next = pend_expire(s, now);
		if (s->accept_paused_until && s->accept_paused_until < next)
			next = s->accept_paused_until;
	}
	return NULL;
}

/* --------------------------------------------------------------- serving */

/* Room for `n` more bytes in the answer buffer; 0 or -1. */
static int out_room(struct conn *c, size_t n)
{
	if (c->out_len + n > c->out_cap) {
		size_t cap = c->out_cap * 2 > c->out_len + n ? c->out_cap * 2 :
			     c->out_len + n;
		uint8_t *p = realloc(c->out, cap);

		if (!p)
			return -1;
		c->out = p;
		c->out_cap = cap;
	}
	return 0;
}

static int out_flush(struct conn *c)
{
	int rc = tb_net_send_all(c->fd, c->out, c->out_len,
				 c->srv->cfg.io_timeout_ms);

	c->out_len = 0;
	return rc < 0 ? -1 : 0;
}

/* The source's callback: the frame goes to the answer buffer; stop after
 * it once a buffer's worth is there, so that it is written. */
static int add_frame(void *arg, const tb_frame_hdr_t *f)
{
	struct conn *c = arg;

	if (out_room(c, f->length) < 0)
		return 1; /* the caller sees a short read */
	memcpy(c->out + c->out_len, f, f->length);
	c->out_len += f->length;
	return c->out_len >= TB_RECOVERY_SERVER_FLUSH;
}

/* Answers one decoded request.  0 to go on with the connection, -1 to
 * close it. */
static int serve(struct conn *c, const tb_recovery_proto_request_t *q)
{
	tb_recovery_server_t *s = c->srv;
	const tb_recovery_server_source_t *src = c->src;
	uint64_t epoch, first, last, next, end, lost_first, lost_last;
	tb_recovery_proto_begin_t b;
	tb_recovery_proto_end_t e;
	uint32_t wait, n_frames;
	int older = 0, flushed = 0, got = 0, n;

	wait = rate_check(s, c->addr);
	if (wait)
		return send_reject(s, c->fd, s->cfg.io_timeout_ms, c->version, q->stream_id,
				   TB_RECOVERY_PROTO_REJ_RATE_LIMITED, wait,
				   "over %u requests per second; retry in %u ms",
				   s->cfg.rate, wait);
	if (q->stream_id != src->stream_id) {
		slog(s, LOG_MALFORMED, "%s: a request for stream %u on a "
		     "connection for stream %u", c->addr, q->stream_id,
		     src->stream_id);
		send_reject(s, c->fd, s->cfg.io_timeout_ms, c->version, 0,
			    TB_RECOVERY_PROTO_REJ_MALFORMED, 0, "stream %u is "
			    "not the stream of this connection's HELLO (%u)",
			    q->stream_id, src->stream_id);
		return -1;
	}
	src->bounds(src->sd, &epoch, &first, &last);
	if (q->epoch != epoch) {
		if (src->epoch_bounds &&
		    src->epoch_bounds(src->sd, q->epoch, &first, &last) == 0)
			older = 1;
		else if (epoch == 0)
			return send_reject(s, c->fd, s->cfg.io_timeout_ms, c->version,
					   q->stream_id, TB_RECOVERY_PROTO_REJ_NOT_YET,
					   0, "nothing received on stream %u yet",
					   q->stream_id);
		else
			return send_reject(s, c->fd, s->cfg.io_timeout_ms, c->version,
					   q->stream_id,
					   TB_RECOVERY_PROTO_REJ_EPOCH_MISMATCH, epoch,
					   "epoch %llu is not held; the current "
					   "one is %llu",
					   (unsigned long long)q->epoch,
					   (unsigned long long)epoch);
	}
	if (q->count > s->cfg.max_count)
		return send_reject(s, c->fd, s->cfg.io_timeout_ms, c->version, q->stream_id,
				   TB_RECOVERY_PROTO_REJ_TOO_LARGE,
				   s->cfg.max_count, "%u frames asked, at most "
				   "%u per request", q->count, s->cfg.max_count);
	if (last == 0 || q->first > last)
		return send_reject(s, c->fd, s->cfg.io_timeout_ms, c->version, q->stream_id,
				   TB_RECOVERY_PROTO_REJ_NOT_YET, last,
				   "%llu is not published yet; the latest is %llu",
				   (unsigned long long)q->first,
				   (unsigned long long)last);
	if (q->first < first)
		return send_reject(s, c->fd, s->cfg.io_timeout_ms, c->version, q->stream_id,
				   TB_RECOVERY_PROTO_REJ_TOO_OLD, first,
				   "%llu is no longer held; the earliest is %llu",
				   (unsigned long long)q->first,
				   (unsigned long long)first);
	end = q->first + q->count - 1 < last ? q->first + q->count - 1 : last;
	n_frames = (uint32_t)(end - q->first + 1);
	b.stream_id = q->stream_id;
	b.epoch = q->epoch;
	b.first = q->first;
	b.count = n_frames;
	c->out_len = 0;
	if (out_room(c, TB_RECOVERY_SERVER_FLUSH) < 0)
		return -1;
	n = tb_recovery_proto_encode(c->out, c->out_cap, c->version,
				     TB_RECOVERY_PROTO_RESPONSE_BEGIN, &b);
	if (n < 0)
		return -1;
	c->out_len = (size_t)n;
	next = q->first;
	while (next <= end) {
		uint64_t want = end - next + 1;

		got = 0;
		if (src->copy && !older) {
			size_t used;

			got = src->copy(src->sd, next, (int)want,
					c->out + c->out_len,
					c->out_cap - c->out_len, &used);
			if (got == 0) {
				/* The next frame does not fit: send what is
				 * there, or make room for one that large. */
				if (c->out_len ? out_flush(c) < 0 :
				    out_room(c, c->out_cap * 2) < 0)
					return -1;
				flushed = 1;
				continue;
			}
			if (got > 0)
				c->out_len += used;
		}
		if (got == TB_STORE_TOO_OLD || !src->copy || older)
			got = older ? src->epoch_read(src->sd, q->epoch, next,
						      (int)want, add_frame, c)
				    : src->read(src->sd, next, (int)want,
						add_frame, c);
		if (got <= 0)
			break;
		next += (uint64_t)got;
		count(s, &s->st.frames, (uint64_t)got);
		if (c->out_len >= TB_RECOVERY_SERVER_FLUSH) {
			if (out_flush(c) < 0)
				return -1;
			flushed = 1;
		}
	}
	/* The request starts in a damaged range: LOST, with its end, in
	 * place of the answer begun (none of it has gone out). */
	if (got == TB_STORE_LOST && next == q->first && !flushed &&
	    c->version >= TB_RECOVERY_PROTO_REJ_LOST_VERSION && src->lost &&
	    src->lost(src->sd, q->epoch, next, &lost_first, &lost_last) &&
	    lost_first <= next && next <= lost_last) {
		c->out_len = 0;
		return send_reject(s, c->fd, s->cfg.io_timeout_ms, c->version,
				   q->stream_id, TB_RECOVERY_PROTO_REJ_LOST,
				   lost_last, "%llu..%llu was lost to damage "
				   "here (%llu..%llu unreadable in the store)",
				   (unsigned long long)next,
				   (unsigned long long)lost_last,
				   (unsigned long long)lost_first,
				   (unsigned long long)lost_last);
	}
	e.status = next > end ? TB_RECOVERY_PROTO_END_COMPLETE :
		   TB_RECOVERY_PROTO_END_TRUNCATED;
	/* Truncated before the first frame: first - 1, which END allows to
	 * be 0 then. */
	e.last_seq = next - 1;
	/* Counted before END goes out, so that a client that has its
	 * answer also sees it counted. */
	count(s, &s->st.served, 1);
	if (out_room(c, TB_RECOVERY_PROTO_MSG_MAX) < 0)
		return -1;
	n = tb_recovery_proto_encode(c->out + c->out_len,
				     c->out_cap - c->out_len, c->version,
				     TB_RECOVERY_PROTO_RESPONSE_END, &e);
	if (n < 0)
		return -1;
	c->out_len += (size_t)n;
	return out_flush(c);
}

/* tb_net_reader_read(&c->in, ...) with the same results and deadline,
 * after trying the socket without sleeping for up to cfg.spin_us of
 * timeout_ms when the bytes are not buffered yet. */
static int conn_read(struct conn *c, void *dst, size_t len, uint32_t timeout_ms)
{
	tb_recovery_server_t *s = c->srv;
	uint64_t t0, limit_ns, spin_ns, spent_ms;

	if (!s->cfg.spin_us || tb_net_reader_avail(&c->in) >= len)
		return tb_net_reader_read(&c->in, dst, len, timeout_ms);
	t0 = tb_clock_mono_ns();
	limit_ns = (uint64_t)timeout_ms * 1000000u;
	spin_ns = s->cfg.spin_us == TB_RECOVERY_SERVER_SPIN_ALWAYS ? limit_ns :
		  (uint64_t)s->cfg.spin_us * 1000u;
	if (spin_ns > limit_ns)
		spin_ns = limit_ns;
	while (tb_net_reader_avail(&c->in) < len) {
		int rc = tb_net_reader_try(&c->in);

		if (rc < 0)
			break;  /* closed or broken: the read below says so */
		if (rc > 0)
			continue;
		if (tb_atomic_load_seq_cst(&s->stop) || /* S1 pairs with S1 in close */
		    tb_clock_mono_ns() - t0 >= spin_ns)
			break;
		tb_cpu_relax();
	}
	/* What the spin took comes off the deadline, rounded up: it is
	 * never extended. */
	spent_ms = (tb_clock_mono_ns() - t0 + 999999u) / 1000000u;
	return tb_net_reader_read(&c->in, dst, len, spent_ms < timeout_ms ?
				  timeout_ms - (uint32_t)spent_ms : 0);
}

/* Between requests, without spinning: waits for the next one's bytes in
 * one blocking recv() (tb_net_reader_wait), so that a request on a kept,
 * idle connection costs the woken thread one system call before it is
 * served, not poll() and then recv().  Returns the ms it spent; the
 * bytes, or whatever ended the wait, are conn_read's to take or tell. */
static uint32_t conn_idle(struct conn *c, uint32_t idle)
{
	uint64_t t0;

	if (c->srv->cfg.spin_us || !c->blocking ||
	    tb_net_reader_avail(&c->in) > 0)
		return 0;
	t0 = tb_clock_mono_ms();
	(void)tb_net_reader_wait(&c->in, idle);
	return (uint32_t)(tb_clock_mono_ms() - t0);
}

/* Reads one whole message: 0, or non-zero when the connection ends (the
 * client closed, went quiet, broke, or sent something malformed, which
 * has been answered). */
static int read_request(struct conn *c, tb_recovery_proto_msg_t *m)
{
	tb_recovery_server_t *s = c->srv;
	uint8_t buf[TB_RECOVERY_PROTO_MSG_MAX];
	uint32_t idle = s->cfg.idle_timeout_ms ? s->cfg.idle_timeout_ms :
			UINT32_MAX;
	uint32_t spent;
	int need, rc;

	/* Between requests the connection may idle (a kept connection);
	 * once one has begun, its bytes are owed within the I/O timeout. */
	spent = conn_idle(c, idle);
	if (conn_read(c, buf, 1, spent < idle ? idle - spent : 0) != 0 ||
	    conn_read(c, buf + 1, TB_WIRE_HDR_LEN - 1,
		      s->cfg.io_timeout_ms) != 0)
		return -1;
	need = tb_recovery_proto_frame_need(buf, TB_WIRE_HDR_LEN);
	if (need > 0 && TB_WIRE_HDR_LEN + (size_t)need <= sizeof(buf) &&
	    conn_read(c, buf + TB_WIRE_HDR_LEN, (size_t)need,
		      s->cfg.io_timeout_ms) != 0)
		return -1;
	count(s, &s->st.requests, 1);
	rc = need < 0 ? need :
	     tb_recovery_proto_decode(buf, TB_WIRE_HDR_LEN + (size_t)need, m);
	if (rc >= 0 && m->type != TB_RECOVERY_PROTO_REQUEST)
		rc = tb_error_set(TB_EPROTO, "a %s where a REQUEST belongs",
				  tb_recovery_proto_type_name(m->type));
	else if (rc >= 0 && m->version != c->version)
		rc = tb_error_set(TB_EPROTO, "a REQUEST of version %u on a "
				  "connection of version %u (its HELLO's)",
				  m->version, c->version);
	if (rc < 0) {
		char why[TB_RECOVERY_PROTO_TEXT_LEN];

		snprintf(why, sizeof(why), "%s", tb_errmsg());
		slog(s, LOG_MALFORMED, "%s: %s", c->addr, why);
		send_reject(s, c->fd, s->cfg.io_timeout_ms, c->version, 0,
			    TB_RECOVERY_PROTO_REJ_MALFORMED, 0, "%s", why);
		return -1;
	}
	return 0;
}

static int welcome(struct conn *c)
{
	const tb_recovery_server_source_t *src = c->src;
	uint8_t out[TB_RECOVERY_PROTO_MSG_MAX];
	tb_recovery_proto_welcome_t w;
	int n;

	memset(&w, 0, sizeof(w));
	w.stream_id = src->stream_id;
	w.max_count = c->srv->cfg.max_count;
	src->bounds(src->sd, &w.epoch, &w.first, &w.last);
	if (w.epoch == 0 || w.first == 0 || w.last < w.first)
		w.first = w.last = 0;
	n = tb_recovery_proto_encode(out, sizeof(out), c->version,
				     TB_RECOVERY_PROTO_WELCOME, &w);
	if (n < 0)
		return -1;
	return tb_net_send_all(c->fd, out, (size_t)n,
			       c->srv->cfg.io_timeout_ms) < 0 ? -1 : 0;
}

static void *conn_main(void *arg)
{
	struct conn *c = arg;
	tb_recovery_server_t *s = c->srv;

	tb_net_reader_init(&c->in, c->fd, c->inbuf, sizeof(c->inbuf));
	c->blocking = tb_net_set_blocking(c->fd) == 0;
	/* The answer buffer, its pages touched now (once per slot: it is
	 * kept for the next connection), so that a kept connection's first
	 * answer does not take its page faults: they were 3-13 us of a gap's
	 * answer here (bench_recovery).  Without it, serve allocates. */
	if (!c->out && out_room(c, TB_RECOVERY_SERVER_FLUSH) == 0)
		memset(c->out, 0, c->out_cap);
	if (welcome(c) == 0) {
		while (!tb_atomic_load_seq_cst(&s->stop)) { /* S1 pairs with S1 in close */
			tb_recovery_proto_msg_t m;

			if (read_request(c, &m) != 0 || serve(c, &m.request) < 0)
				break;
		}
	}
	pthread_mutex_lock(&s->lock);
	close(c->fd);
	c->fd = -1;
	pthread_mutex_unlock(&s->lock);
	tb_atomic_store_release(&c->done, 1); /* R2 pairs with A2 in conns_reap */
	return NULL;
}

/* ------------------------------------------------------------ open, close */

static void free_server(tb_recovery_server_t *s)
{
	if (s->conns)
		for (int i = 0; i < s->cfg.max_clients; i++)
			free(s->conns[i].out);
	free(s->src);
	free(s->pend);
	free(s->conns);
	free(s->addrs);
	free(s);
}

int tb_recovery_server_open(tb_recovery_server_t **out, const tb_recovery_server_cfg_t *cfg,
		 const tb_recovery_server_source_t *src, int n)
{
	struct epoll_event ev = {.events = EPOLLIN};
	tb_recovery_server_t *s;
	int rc;

	*out = NULL;
	if (n < 1 || !src || cfg->max_clients < 1 || cfg->max_count < 1 ||
	    cfg->max_count > TB_RECOVERY_PROTO_COUNT_MAX || cfg->io_timeout_ms < 1 ||
	    cfg->hello_timeout_ms < 1 || cfg->max_pending < 1 ||
	    cfg->max_pending_per_addr < 1)
		return tb_error_set(TB_EINVAL, "recovery server: need sources, "
				  "max_clients, max_pending and "
				  "max_pending_per_addr >= 1, max_count 1..%u, "
				  "an I/O and a HELLO timeout",
				  TB_RECOVERY_PROTO_COUNT_MAX);
	if (cfg->spin_us > TB_RECOVERY_SERVER_SPIN_MAX &&
	    cfg->spin_us != TB_RECOVERY_SERVER_SPIN_ALWAYS)
		return tb_error_set(TB_EINVAL, "recovery server: spin_us %u: "
				  "at most %u, or TB_RECOVERY_SERVER_SPIN_ALWAYS",
				  cfg->spin_us, TB_RECOVERY_SERVER_SPIN_MAX);
	for (int i = 0; i < n; i++)
		if ((src[i].epoch_bounds == NULL) != (src[i].epoch_read == NULL))
			return tb_error_set(TB_EINVAL, "recovery server: stream "
					  "%u: epoch_bounds and epoch_read go "
					  "together", src[i].stream_id);
	s = calloc(1, sizeof(*s));
	if (!s)
		return tb_error_set(TB_ENOMEM, "recovery server: out of memory");
	s->cfg = *cfg;
	s->n_src = n;
	s->lfd = s->epfd = s->wfd = -1;
	s->src = calloc((size_t)n, sizeof(*src));
	s->conns = calloc((size_t)cfg->max_clients, sizeof(*s->conns));
	s->pend = calloc((size_t)cfg->max_pending, sizeof(*s->pend));
	s->addrs = calloc(ADDR_SLOTS, sizeof(*s->addrs));
	if (!s->src || !s->conns || !s->pend || !s->addrs) {
		free_server(s);
		return tb_error_set(TB_ENOMEM, "recovery server: out of memory");
	}
	memcpy(s->src, src, (size_t)n * sizeof(*src));
	for (int i = 0; i < cfg->max_clients; i++) {
		s->conns[i].srv = s;
		s->conns[i].fd = -1;
	}
	for (int i = 0; i < cfg->max_pending; i++)
		s->pend[i].fd = -1;
	pthread_mutex_init(&s->lock, NULL);
	rc = tb_net_listen(&s->cfg.listen, &s->port);
	if (rc >= 0) {
		s->lfd = rc;
		rc = 0;
		s->epfd = epoll_create1(EPOLL_CLOEXEC);
		s->wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		ev.data.u64 = EV_LISTEN;
		if (s->epfd < 0 || s->wfd < 0 ||
		    epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->lfd, &ev) < 0)
			rc = tb_error_sys(errno, "epoll");
		ev.data.u64 = EV_WAKE;
		if (rc == 0 && epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->wfd, &ev) < 0)
			rc = tb_error_sys(errno, "epoll");
	}
	if (rc == 0)
		rc = tb_thread_start(&s->front, "tb-rsrv", front_main, s);
	if (rc < 0) {
		if (s->lfd >= 0)
			close(s->lfd);
		if (s->epfd >= 0)
			close(s->epfd);
		if (s->wfd >= 0)
			close(s->wfd);
		pthread_mutex_destroy(&s->lock);
		free_server(s);
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
	uint64_t one = 1;

	if (!s)
		return;
	tb_atomic_store_seq_cst(&s->stop, 1); /* S1 pairs with S1 in the threads */
	if (write(s->wfd, &one, sizeof(one)) < 0) {
		/* the admission thread still sees `stop` within a second */
	}
	pthread_join(s->front, NULL);
	close(s->lfd);
	for (int i = 0; i < s->cfg.max_pending; i++)
		if (s->pend[i].state != P_FREE)
			close(s->pend[i].fd);
	close(s->epfd);
	close(s->wfd);
	pthread_mutex_lock(&s->lock);
	for (int i = 0; i < s->cfg.max_clients; i++)
		if (s->conns[i].fd >= 0)
			shutdown(s->conns[i].fd, SHUT_RDWR);
	pthread_mutex_unlock(&s->lock);
	for (int i = 0; i < s->cfg.max_clients; i++)
		if (s->conns[i].running)
			pthread_join(s->conns[i].thread, NULL);
	pthread_mutex_destroy(&s->lock);
	free_server(s);
}
