/*
 * recovery/client.c - the recovery protocol's client side (see the header
 * for the policy).
 *
 * Each endpoint has a kept connection (`struct rconn`): dialled, HELLO
 * sent, WELCOME read, and then used for request after request.  A
 * connection that fails in any way (timeout, garbage, closed) is closed and
 * dialled again when next needed; one whose answers can no longer be
 * matched to its requests (a pipelined request behind one that was
 * refused or cut short) is closed too, rather than read to its end.
 *
 * Every read is bounded twice: by the bytes the protocol allows at that
 * point (a protocol message by tb_recovery_proto_frame_need, at most
 * TB_RECOVERY_PROTO_MSG_MAX; a frame by tb_recovery_proto_replay_need, at
 * most TB_FRAME_MAX_LEN) and by the I/O timeout, a deadline for each
 * message or frame (net.h).  Reads go through a buffer of CONN_BUF bytes
 * (tb_net_reader_t), and a frame is checked and handed over where it lies
 * in that buffer, so that a replay of small frames costs one system call
 * per buffer and no copy; only a frame that is misaligned or larger than
 * the buffer is copied first.
 *
 * The quick fetch (the header) reads the same buffer without waiting: one
 * recv() a step at most, the frames checked where they lie by the same
 * tests as read_answer's, and a deadline of io_timeout_ms from the last
 * byte that came.  It takes the client by its claim (`owner`, A6) and
 * gives it back (R6) whenever it ends, so that the thread that blocks
 * never finds a connection mid-answer.
 *
 * Versions (proto.h): a connection asks in the current version; a server
 * of version 2 refuses that HELLO as malformed, in version 2, and is then
 * dialled again and asked in version 2 (which has no LOST reject: such a
 * server cuts an answer short at a damaged record, and the client waits
 * for another service or its deadline, as before version 3).  Every
 * answer on a connection must come in its version.
 */
#include "bus/recovery/client.h"

#include "bus/clock.h"
#include "bus/error.h"
#include "bus/net.h"

#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CONN_BUF (256u << 10)
#define PIPELINE_MAX 16
/* A WELCOME's newest epoch older than this is asked again before a fetch
 * relies on it (tb_recovery_client_get with epoch 0). */
#define WELCOME_FRESH_MS 1000

struct rconn {
	int fd;                 /* -1: not connected */
	int connecting;         /* fd is a dial in progress (maintain) */
	uint64_t connect_until_ms; /* when that dial is given up */
	tb_net_reader_t in;
	uint8_t *buf;           /* CONN_BUF bytes */
	tb_recovery_proto_welcome_t welcome;
	uint64_t welcome_ms;
	uint32_t max_count;     /* what a request may ask: WELCOME, or less
				   after a TOO_LARGE */
	uint8_t version;        /* spoken on this connection */
	uint64_t retry_ms;      /* maintain: do not dial before */
	uint32_t backoff_ms;
};

/* A quick fetch in progress (tb_recovery_client_quick_start). */
struct quick {
	int conn;               /* the endpoint asked */
	int begun;              /* its RESPONSE_BEGIN is read */
	tb_recovery_proto_request_t req;
	tb_recovery_proto_begin_t begin;
	uint64_t i;             /* frames delivered */
	uint64_t until_ms;      /* no byte by then: the service is given up */
};

struct tb_recovery_client {
	tb_recovery_client_cfg_t cfg;
	tb_endpoint_t *eps;
	char token[TB_TOKEN_MAX];
	struct rconn *conns;
	uint8_t *scratch;       /* a frame that must be copied */
	size_t scratch_cap;
	/* Who holds the client, TB_RECOVERY_CLIENT_*: taken by A6 (a
	 * compare-and-swap from FREE), given back by R6. */
	_Atomic uint32_t owner;
	struct quick q;         /* the QUICK holder's */
};

void tb_recovery_client_cfg_init(tb_recovery_client_cfg_t *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->io_timeout_ms = 1000;
	cfg->deadline_ms = 5000;
	cfg->backoff_ms = 10;
	cfg->backoff_max_ms = 500;
}

/* ------------------------------------------------------------- open, close */

static void conn_close(struct rconn *k)
{
	if (k->fd >= 0)
		close(k->fd);
	k->fd = -1;
	k->connecting = 0;
}

int tb_recovery_client_open(tb_recovery_client_t **out,
			    const tb_recovery_client_cfg_t *cfg)
{
	tb_recovery_client_t *c;

	*out = NULL;
	if (cfg->n_endpoints < 1 || !cfg->endpoints || !cfg->token ||
	    strlen(cfg->token) >= TB_TOKEN_MAX)
		return tb_error_set(TB_EINVAL, "recovery client: %s",
				  cfg->n_endpoints < 1 ? "no endpoints" :
				  "a token of 1..127 characters is needed");
	c = calloc(1, sizeof(*c));
	if (!c)
		return tb_error_set(TB_ENOMEM, "recovery client: out of memory");
	c->cfg = *cfg;
	if (c->cfg.pipeline == 0)
		c->cfg.pipeline = TB_RECOVERY_CLIENT_PIPELINE;
	if (c->cfg.pipeline > PIPELINE_MAX)
		c->cfg.pipeline = PIPELINE_MAX;
	snprintf(c->token, sizeof(c->token), "%s", cfg->token);
	c->cfg.token = c->token;
	c->eps = calloc((size_t)cfg->n_endpoints, sizeof(*c->eps));
	c->conns = calloc((size_t)cfg->n_endpoints, sizeof(*c->conns));
	if (!c->eps || !c->conns) {
		tb_recovery_client_close(c);
		return tb_error_set(TB_ENOMEM, "recovery client: out of memory");
	}
	memcpy(c->eps, cfg->endpoints, (size_t)cfg->n_endpoints * sizeof(*c->eps));
	c->cfg.endpoints = c->eps;
	for (int i = 0; i < cfg->n_endpoints; i++)
		c->conns[i].fd = -1;
	*out = c;
	return 0;
}

void tb_recovery_client_close(tb_recovery_client_t *c)
{
	if (!c)
		return;
	if (c->conns)
		for (int i = 0; i < c->cfg.n_endpoints; i++) {
			conn_close(&c->conns[i]);
			free(c->conns[i].buf);
		}
	free(c->conns);
	free(c->eps);
	free(c->scratch);
	free(c);
}

void tb_recovery_client_until_latest(tb_recovery_client_t *c, int on)
{
	c->cfg.until_latest = on;
}

/* ----------------------------------------------------------------- reading */

/* The result of a read that found the connection closed: between
 * messages that is still a broken answer, since one was owed. */
static int closed_mid_answer(int rc)
{
	if (rc == TB_CLOSED)
		return tb_error_set(TB_EIO, "the server closed the connection "
				  "mid-answer");
	return rc;
}

/* Reads one protocol message (not a frame). */
static int read_msg(tb_recovery_client_t *c, struct rconn *k,
		    tb_recovery_proto_msg_t *m)
{
	uint32_t t = c->cfg.io_timeout_ms;
	int need, rc;

	if ((rc = tb_net_reader_fill(&k->in, TB_WIRE_HDR_LEN, t)) < 0)
		return closed_mid_answer(rc);
	need = tb_recovery_proto_frame_need(tb_net_reader_peek(&k->in),
					    TB_WIRE_HDR_LEN);
	if (need < 0)
		return need;
	if ((rc = tb_net_reader_fill(&k->in, TB_WIRE_HDR_LEN + (size_t)need, t)) < 0)
		return closed_mid_answer(rc);
	rc = tb_recovery_proto_decode(tb_net_reader_peek(&k->in),
				      TB_WIRE_HDR_LEN + (size_t)need, m);
	if (rc < 0)
		return rc;
	tb_net_reader_take(&k->in, (size_t)rc);
	return 0;
}

static uint8_t *scratch(tb_recovery_client_t *c, size_t n)
{
	if (n > c->scratch_cap) {
		uint8_t *p = realloc(c->scratch, n);

		if (!p)
			return NULL;
		c->scratch = p;
		c->scratch_cap = n;
	}
	return c->scratch;
}

/* The next frame of an answer, whole and aligned, in *f (taken from the
 * reader: valid until the next read). */
static int read_frame(tb_recovery_client_t *c, struct rconn *k, uint64_t i,
		      const tb_frame_hdr_t **f)
{
	uint32_t t = c->cfg.io_timeout_ms;
	const uint8_t *p;
	int64_t len;
	int need, rc;

	if ((rc = tb_net_reader_fill(&k->in, TB_FRAME_HDR_LEN, t)) < 0)
		return closed_mid_answer(rc);
	need = tb_recovery_proto_replay_need(tb_net_reader_peek(&k->in),
					     TB_FRAME_HDR_LEN);
	if (need < 0)
		return tb_error_prepend(need, "frame %llu", (unsigned long long)i);
	len = TB_FRAME_HDR_LEN + need;
	if ((size_t)len <= k->in.cap) {
		if ((rc = tb_net_reader_fill(&k->in, (size_t)len, t)) < 0)
			return closed_mid_answer(rc);
		p = tb_net_reader_peek(&k->in);
		if ((uintptr_t)p % 8) {
			uint8_t *s = scratch(c, (size_t)len);

			if (!s)
				return tb_error_set(TB_ENOMEM, "frame of %lld bytes",
						  (long long)len);
			memcpy(s, p, (size_t)len);
			p = s;
		}
		tb_net_reader_take(&k->in, (size_t)len);
	} else {
		uint8_t *s = scratch(c, (size_t)len);

		if (!s)
			return tb_error_set(TB_ENOMEM, "frame of %lld bytes",
					  (long long)len);
		if ((rc = tb_net_reader_read(&k->in, s, (size_t)len, t)) < 0)
			return closed_mid_answer(rc);
		p = s;
	}
	*f = (const tb_frame_hdr_t *)p;
	return 0;
}

/* A message of another version than the connection's: broken. */
static int version_check(const struct rconn *k,
			 const tb_recovery_proto_msg_t *m)
{
	if (m->version == k->version)
		return 0;
	return tb_error_set(TB_EPROTO, "a %s of version %u on a connection of "
			  "version %u", tb_recovery_proto_type_name(m->type),
			  m->version, k->version);
}

/* The fast paths' check of a frame where it lies in the buffer (`avail`
 * bytes from it): whole, well formed, of the stream, and frame `i` of the
 * answer `begin` announced (tb_recovery_proto_replay_check's tests, on
 * the header in place; it also names what is wrong with a bad frame). */
static inline int frame_is_next(const tb_frame_hdr_t *f, size_t avail,
				const tb_recovery_proto_begin_t *begin,
				uint64_t i)
{
	return f->length >= TB_FRAME_HDR_LEN && f->length <= avail &&
	       f->length <= TB_FRAME_MAX_LEN &&
	       f->version == TB_FRAME_VERSION && f->type == TB_FRAME_DATA &&
	       f->stream_id == begin->stream_id && i < begin->count &&
	       f->seq == begin->first + i;
}

/*
 * Reads the answer to `req` on `k`: its frames go to `fn` in order.
 * Returns the frames delivered (fewer than asked when the server served up
 * to the latest it holds, or cut the answer short: then *cut is 1),
 * TB_RECOVERY_CLIENT_REJECTED with *reject, or an error; *delivered counts
 * what went to `fn` either way.
 */
static int read_answer(tb_recovery_client_t *c, struct rconn *k,
		       const tb_recovery_proto_request_t *req,
		       tb_recovery_client_frame_fn fn, void *clientd,
		       tb_recovery_proto_reject_t *reject, uint64_t *delivered,
		       int *cut)
{
	tb_recovery_proto_msg_t m;
	tb_recovery_proto_begin_t begin;
	uint64_t i = 0;
	int rc;

	*delivered = 0;
	*cut = 0;
	if ((rc = read_msg(c, k, &m)) < 0 || (rc = version_check(k, &m)) < 0)
		return rc;
	if (m.type == TB_RECOVERY_PROTO_REJECT) {
		*reject = m.reject;
		return tb_error_set(TB_RECOVERY_CLIENT_REJECTED, "rejected: %s (%llu): %s",
				  tb_recovery_proto_reject_name(m.reject.reason),
				  (unsigned long long)m.reject.detail, m.reject.text);
	}
	if (m.type != TB_RECOVERY_PROTO_RESPONSE_BEGIN)
		return tb_error_set(TB_EPROTO, "answer starts with %s, not "
				  "RESPONSE_BEGIN or REJECT",
				  tb_recovery_proto_type_name(m.type));
	begin = m.begin;
	if (begin.stream_id != req->stream_id || begin.epoch != req->epoch ||
	    begin.first != req->first || begin.count > req->count)
		return tb_error_set(TB_EPROTO, "RESPONSE_BEGIN announces stream %u "
				  "epoch %llu first %llu count %u for a request of "
				  "stream %u epoch %llu first %llu count %u",
				  begin.stream_id, (unsigned long long)begin.epoch,
				  (unsigned long long)begin.first, begin.count,
				  req->stream_id, (unsigned long long)req->epoch,
				  (unsigned long long)req->first, req->count);
	for (;;) {
		const tb_frame_hdr_t *f = NULL;
		const uint8_t *p = tb_net_reader_peek(&k->in);
		size_t avail = tb_net_reader_avail(&k->in);
		uint32_t word;
		int64_t len;

		/* The fast path: each whole, aligned frame in the buffer is
		 * checked where it lies (the checks of
		 * tb_recovery_proto_replay_check, on the header in place)
		 * and handed over.  Anything else, RESPONSE_END included,
		 * takes the careful path below, which also names what is
		 * wrong with a bad frame. */
		while (avail >= TB_FRAME_HDR_LEN && (uintptr_t)p % 8 == 0) {
			f = (const tb_frame_hdr_t *)p;
			if (tb_unlikely(!frame_is_next(f, avail, &begin, i)))
				break;
			len = f->length;
			tb_net_reader_take(&k->in, (size_t)len);
			p += len;
			avail -= (size_t)len;
			*delivered = ++i;
			if (fn(clientd, f) != 0)
				return tb_error_set(TB_ESTATE, "stopped by the caller");
		}

		/* A frame, or RESPONSE_END: the first word tells which.  A
		 * frame starts with its length, at most TB_FRAME_MAX_LEN
		 * (0x01000000); a message with the 'T','R' magic, a version
		 * and a type >= 1 reads as at least 0x01015254. */
		if ((rc = tb_net_reader_fill(&k->in, sizeof(word),
					     c->cfg.io_timeout_ms)) < 0)
			return closed_mid_answer(rc);
		memcpy(&word, tb_net_reader_peek(&k->in), sizeof(word));
		word = le32toh(word);
		if ((word & 0xffffu) == TB_RECOVERY_PROTO_MAGIC &&
		    word > TB_FRAME_MAX_LEN) {
			if ((rc = read_msg(c, k, &m)) < 0 ||
			    (rc = version_check(k, &m)) < 0)
				return rc;
			if (m.type != TB_RECOVERY_PROTO_RESPONSE_END)
				return tb_error_set(TB_EPROTO, "%s between frames",
						  tb_recovery_proto_type_name(m.type));
			if (m.end.status == TB_RECOVERY_PROTO_END_COMPLETE ?
			    (i != begin.count || m.end.last_seq != begin.first + i - 1) :
			    (i > 0 && m.end.last_seq != begin.first + i - 1))
				return tb_error_set(TB_EPROTO, "RESPONSE_END says last "
						  "%llu (%s) after %llu of %u frames",
						  (unsigned long long)m.end.last_seq,
						  m.end.status == TB_RECOVERY_PROTO_END_COMPLETE ?
						  "complete" : "truncated",
						  (unsigned long long)i, begin.count);
			*cut = m.end.status == TB_RECOVERY_PROTO_END_TRUNCATED;
			return (int)i;
		}
		if ((rc = read_frame(c, k, i, &f)) < 0)
			return rc;
		len = tb_recovery_proto_replay_check(f, f->length, &begin, i);
		if (len < 0)
			return (int)len;
		*delivered = ++i;
		if (fn(clientd, f) != 0)
			return tb_error_set(TB_ESTATE, "stopped by the caller");
	}
}

/* ---------------------------------------------------------------- dialling */

static int send_request(tb_recovery_client_t *c, struct rconn *k,
			const void *buf, size_t n)
{
	return tb_net_send_all(k->fd, buf, n, c->cfg.io_timeout_ms);
}

/* Authenticates the connected socket of endpoint `i`: HELLO, then the
 * WELCOME.  0, TB_RECOVERY_CLIENT_REJECTED (*reject filled: unknown
 * stream, unauthorised, busy), or an error; the connection is closed on
 * failure. */
static int conn_hello(tb_recovery_client_t *c, int i,
		      tb_recovery_proto_reject_t *reject)
{
	struct rconn *k = &c->conns[i];
	tb_recovery_proto_hello_t h;
	tb_recovery_proto_msg_t m;
	uint8_t out[TB_RECOVERY_PROTO_MSG_MAX];
	int n, rc;

	k->connecting = 0;
	k->version = TB_RECOVERY_PROTO_VERSION;
again:
	memset(&h, 0, sizeof(h));
	h.stream_id = c->cfg.stream_id;
	snprintf(h.token, sizeof(h.token), "%s", c->token);
	tb_net_reader_init(&k->in, k->fd, k->buf, CONN_BUF);
	tb_net_reader_spin(&k->in, (uint64_t)c->cfg.spin_us * 1000u);
	if ((n = tb_recovery_proto_encode(out, sizeof(out), k->version,
					  TB_RECOVERY_PROTO_HELLO, &h)) < 0) {
		rc = n;
		goto fail;
	}
	if ((rc = send_request(c, k, out, (size_t)n)) < 0 ||
	    (rc = read_msg(c, k, &m)) < 0)
		goto fail;
	if (m.type == TB_RECOVERY_PROTO_REJECT &&
	    m.reject.reason == TB_RECOVERY_PROTO_REJ_MALFORMED &&
	    m.version < k->version) {
		/* A server of an older version: ask again in its own. */
		tb_info("recovery: %s:%u speaks version %u; asking in it",
			c->eps[i].host, c->eps[i].port, m.version);
		close(k->fd);
		k->fd = -1;
		if ((rc = tb_net_dial(&c->eps[i], c->cfg.io_timeout_ms)) < 0)
			goto fail;
		k->fd = rc;
		k->version = m.version;
		goto again;
	}
	if ((rc = version_check(k, &m)) < 0)
		goto fail;
	if (m.type == TB_RECOVERY_PROTO_REJECT) {
		*reject = m.reject;
		rc = tb_error_set(TB_RECOVERY_CLIENT_REJECTED, "HELLO rejected: %s "
				"(%llu): %s",
				tb_recovery_proto_reject_name(m.reject.reason),
				(unsigned long long)m.reject.detail, m.reject.text);
		goto fail;
	}
	if (m.type != TB_RECOVERY_PROTO_WELCOME ||
	    m.welcome.stream_id != c->cfg.stream_id) {
		rc = tb_error_set(TB_EPROTO, "HELLO answered with %s of stream %u, "
				"not WELCOME of stream %u",
				tb_recovery_proto_type_name(m.type),
				m.welcome.stream_id, c->cfg.stream_id);
		goto fail;
	}
	k->welcome = m.welcome;
	k->welcome_ms = tb_clock_mono_ms();
	k->max_count = m.welcome.max_count;
	k->backoff_ms = 0;
	k->retry_ms = 0;
	return 0;
fail:
	conn_close(k);
	return rc;
}

/* The connection's read buffer, kept for its redials; its pages are
 * touched when it is allocated (by the recovery thread, at the first
 * dial), so that the answers to the first gaps are not read into page
 * faults (a large answer's recv() faulted its pages in on the poll
 * thread's quick fetch). */
static int conn_buf(struct rconn *k)
{
	if (k->buf)
		return 0;
	if (!(k->buf = aligned_alloc(64, CONN_BUF)))
		return tb_error_set(TB_ENOMEM, "recovery client: out of memory");
	memset(k->buf, 0, CONN_BUF);
	return 0;
}

/* Dials endpoint `i`, waiting (a dial maintain() began is waited for), and
 * authenticates: as conn_hello. */
static int conn_dial(tb_recovery_client_t *c, int i,
		     tb_recovery_proto_reject_t *reject)
{
	struct rconn *k = &c->conns[i];
	int rc;

	if ((rc = conn_buf(k)) < 0)
		return rc;
	if (k->fd >= 0 && k->connecting) {
		uint64_t until = tb_clock_mono_ms() + c->cfg.io_timeout_ms;
		struct pollfd pf = {.fd = k->fd, .events = POLLOUT};

		while ((rc = tb_net_dial_done(k->fd, &c->eps[i])) == 0 &&
		       tb_clock_mono_ms() < until)
			poll(&pf, 1, (int)(until - tb_clock_mono_ms()));
		if (rc <= 0) {
			conn_close(k);
			return rc < 0 ? rc : tb_error_set(TB_ETIMEDOUT, "connect "
						     "%s:%u: no answer within %u ms",
						     c->eps[i].host, c->eps[i].port,
						     c->cfg.io_timeout_ms);
		}
	} else {
		conn_close(k);
		if ((rc = tb_net_dial(&c->eps[i], c->cfg.io_timeout_ms)) < 0)
			return rc;
		k->fd = rc;
	}
	return conn_hello(c, i, reject);
}

/* After a dial that failed: not again from maintain() before the backoff. */
static void dial_failed(tb_recovery_client_t *c, struct rconn *k,
			const tb_recovery_proto_reject_t *rej, int rc)
{
	uint32_t b = k->backoff_ms ? k->backoff_ms * 2 : c->cfg.backoff_ms;

	if (b > c->cfg.backoff_max_ms)
		b = c->cfg.backoff_max_ms;
	if (b == 0)
		b = 1;
	k->backoff_ms = b;
	if (rc == TB_RECOVERY_CLIENT_REJECTED &&
	    (rej->reason == TB_RECOVERY_PROTO_REJ_BUSY ||
	     rej->reason == TB_RECOVERY_PROTO_REJ_RATE_LIMITED) &&
	    rej->retry_after_ms > b)
		b = (uint32_t)rej->retry_after_ms;
	k->retry_ms = tb_clock_mono_ms() + b;
}

int tb_recovery_client_maintain(tb_recovery_client_t *c)
{
	int up = 0;

	for (int i = 0; i < c->cfg.n_endpoints; i++) {
		struct rconn *k = &c->conns[i];
		tb_recovery_proto_reject_t rej;
		int rc = 0;

		memset(&rej, 0, sizeof(rej));
		if (k->fd >= 0 && !k->connecting && tb_net_idle_ok(k->fd) != 1)
			conn_close(k); /* closed, broken, or talking nonsense */
		/* A dial is begun here and finished on a later call: the
		 * recovery thread never waits for a service that does not
		 * answer while a gap may be waiting for it. */
		if (k->fd < 0 && tb_clock_mono_ms() >= k->retry_ms &&
		    (rc = conn_buf(k)) == 0) {
			rc = tb_net_dial_start(&c->eps[i]);
			if (rc >= 0) {
				k->fd = rc;
				k->connecting = 1;
				k->connect_until_ms = tb_clock_mono_ms() +
						      c->cfg.io_timeout_ms;
				rc = 0;
			}
		}
		if (rc == 0 && k->fd >= 0 && k->connecting) {
			rc = tb_net_dial_done(k->fd, &c->eps[i]);
			if (rc == 0 && tb_clock_mono_ms() >= k->connect_until_ms)
				rc = tb_error_set(TB_ETIMEDOUT, "connect %s:%u: no "
						  "answer within %u ms",
						  c->eps[i].host, c->eps[i].port,
						  c->cfg.io_timeout_ms);
			if (rc == 1)
				rc = conn_hello(c, i, &rej);
		}
		if (rc < 0) {
			tb_info("recovery: %s:%u: %s", c->eps[i].host,
				c->eps[i].port, tb_errmsg());
			conn_close(k);
			dial_failed(c, k, &rej, rc);
		}
		up += k->fd >= 0 && !k->connecting;
	}
	return up;
}

/* ------------------------------------------------------------- the policy */

struct fetch {
	tb_recovery_client_frame_fn fn;
	void *clientd;
	uint64_t next;
	tb_recovery_client_stats_t *st;
};

static int on_frame(void *arg, const tb_frame_hdr_t *f)
{
	struct fetch *x = arg;

	x->next = f->seq + 1;
	x->st->frames++;
	return x->fn(x->clientd, f);
}

enum { ASK_DONE = 0, ASK_SHORT = 1, ASK_CUT = 2 };

/*
 * Asks endpoint `i` for [x->next, last] of *epoch, several requests in
 * flight.  ASK_DONE when all came; ASK_SHORT when an answer stopped short
 * of what was asked at the latest the service holds, ASK_CUT when the
 * service cut it short (*got: the frames of this call); or
 * TB_RECOVERY_CLIENT_REJECTED (*rej), TB_ESTATE, or another error, after
 * which the connection is closed.
 */
static int ask(tb_recovery_client_t *c, int i, uint64_t *epoch, uint64_t last,
	       struct fetch *x, tb_recovery_proto_reject_t *rej, uint64_t *got)
{
	struct rconn *k = &c->conns[i];
	tb_recovery_proto_request_t q[PIPELINE_MAX];
	uint32_t depth = c->cfg.until_latest ? 1 : c->cfg.pipeline;
	uint64_t send_next = x->next;
	uint32_t head = 0, n_in = 0;
	int rc;

	*got = 0;
	if (k->fd < 0 && tb_clock_mono_ms() < k->retry_ms)
		/* It failed a moment ago: the next endpoint now, this one
		 * again after its backoff. */
		return tb_error_set(TB_ESYS, "%s:%u failed less than %u ms ago; "
				  "not dialled again yet", c->eps[i].host,
				  c->eps[i].port, k->backoff_ms);
	if (k->fd >= 0 && !k->connecting && *epoch == 0 &&
	    tb_clock_mono_ms() - k->welcome_ms > WELCOME_FRESH_MS)
		conn_close(k); /* its WELCOME's epoch may be stale */
	if (k->fd < 0 || k->connecting || tb_net_idle_ok(k->fd) != 1) {
		memset(rej, 0, sizeof(*rej));
		if ((rc = conn_dial(c, i, rej)) < 0) {
			x->st->requests++; /* asked, in vain */
			dial_failed(c, k, rej, rc);
			return rc;
		}
		x->st->dials++;
	}
	if (*epoch == 0) {
		if (k->welcome.epoch == 0) {
			memset(rej, 0, sizeof(*rej));
			rej->reason = TB_RECOVERY_PROTO_REJ_NOT_YET;
			return tb_error_set(TB_RECOVERY_CLIENT_REJECTED, "the service "
					  "holds nothing of stream %u yet",
					  c->cfg.stream_id);
		}
		*epoch = k->welcome.epoch;
		x->st->epoch = *epoch;
	}
	for (;;) {
		uint8_t out[PIPELINE_MAX * sizeof(tb_recovery_proto_wire_request_t)];
		size_t olen = 0;
		uint64_t delivered;
		tb_recovery_proto_request_t *r;
		int cut;

		while (n_in < depth && send_next <= last) {
			r = &q[(head + n_in) % PIPELINE_MAX];
			memset(r, 0, sizeof(*r));
			r->stream_id = c->cfg.stream_id;
			r->epoch = *epoch;
			r->first = send_next;
			r->count = last - send_next + 1 < k->max_count ?
				   (uint32_t)(last - send_next + 1) : k->max_count;
			rc = tb_recovery_proto_encode(out + olen,
						      sizeof(out) - olen,
						      k->version,
						      TB_RECOVERY_PROTO_REQUEST, r);
			if (rc < 0)
				return rc;
			olen += (size_t)rc;
			send_next += r->count;
			n_in++;
			x->st->requests++;
		}
		if (n_in == 0)
			return ASK_DONE;
		if (olen && (rc = send_request(c, k, out, olen)) < 0)
			goto broken;
		r = &q[head % PIPELINE_MAX];
		rc = read_answer(c, k, r, on_frame, x, rej, &delivered, &cut);
		*got += delivered;
		head++;
		n_in--;
		if (rc == TB_RECOVERY_CLIENT_REJECTED) {
			/* The answers behind it are for ranges after a hole:
			 * of no use, and not worth reading. */
			if (n_in)
				conn_close(k);
			return rc;
		}
		if (rc < 0)
			goto broken;
		if ((uint32_t)rc < r->count) {
			if (n_in)
				conn_close(k);
			return cut ? ASK_CUT : ASK_SHORT;
		}
	}
broken:
	conn_close(k);
	return rc;
}

static void sleep_ms(uint32_t ms)
{
	struct timespec ts = {.tv_sec = ms / 1000,
			      .tv_nsec = (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

int tb_recovery_client_get(tb_recovery_client_t *c, uint64_t epoch,
			   uint64_t first, uint64_t last,
			   tb_recovery_client_frame_fn fn,
			   tb_recovery_client_loss_fn loss, void *clientd,
			   tb_recovery_client_stats_t *stats, uint64_t *next)
{
	const tb_recovery_client_cfg_t *cfg = &c->cfg;
	tb_recovery_client_stats_t local;
	struct fetch x;
	uint64_t deadline;
	uint32_t backoff = cfg->backoff_ms ? cfg->backoff_ms : 1;

	if (!stats)
		stats = &local;
	memset(stats, 0, sizeof(*stats));
	stats->epoch = epoch;
	x.fn = fn;
	x.clientd = clientd;
	x.next = first;
	x.st = stats;
	if (next)
		*next = first;
	if (first == 0 || last < first || !fn)
		return tb_error_set(TB_EINVAL, "recovery fetch: bad range or "
				  "callback");
	deadline = tb_clock_mono_ms() + cfg->deadline_ms;
	while (x.next <= last) {
		uint64_t progress = x.next, held_from = 0;
		uint32_t wait_ms = 0;
		/* Lost means: every endpoint that answered said it does not
		 * hold x.next ("too old", or "lost" to damage; one that is
		 * down cannot say otherwise); what is lost is what none of
		 * them holds, up to the first sequence one of them does
		 * (held_from). */
		int unheld = 0, other = 0;

		for (int i = 0; i < cfg->n_endpoints && x.next <= last; i++) {
			tb_recovery_proto_reject_t rej;
			uint64_t got;
			int rc;

			if (cfg->cancelled && cfg->cancelled(clientd))
				return tb_error_set(TB_ESTATE, "recovery cancelled");
			rc = ask(c, i, &epoch, last, &x, &rej, &got);
			if (rc == TB_ESTATE)
				return rc;
			if (rc == ASK_DONE)
				break;
			if (rc == ASK_SHORT || rc == ASK_CUT) {
				if (cfg->until_latest && rc == ASK_SHORT)
					goto done; /* served up to the latest */
				if (got > 0) {
					/* The same endpoint again for the
					 * rest: its answer then counts. */
					i--;
					continue;
				}
				other++;
				continue;
			}
			if (rc != TB_RECOVERY_CLIENT_REJECTED) {
				stats->failures++;
				tb_info("recovery: %s:%u: %s", cfg->endpoints[i].host,
					cfg->endpoints[i].port, tb_errmsg());
				continue;
			}
			stats->rejects++;
			tb_info("recovery: %s:%u: %s", cfg->endpoints[i].host,
				cfg->endpoints[i].port, tb_errmsg());
			if (cfg->until_latest && rej.reason == TB_RECOVERY_PROTO_REJ_NOT_YET &&
			    rej.latest_seq < x.next)
				goto done; /* nothing beyond what we have */
			if ((rej.reason == TB_RECOVERY_PROTO_REJ_TOO_OLD &&
			     rej.earliest_seq > x.next) ||
			    (rej.reason == TB_RECOVERY_PROTO_REJ_LOST &&
			     rej.lost_last >= x.next)) {
				/* Not held here up to `from` - 1: the next
				 * endpoint may have it. */
				uint64_t from = rej.reason == TB_RECOVERY_PROTO_REJ_LOST ?
						(rej.lost_last == UINT64_MAX ?
						 UINT64_MAX : rej.lost_last + 1) :
						rej.earliest_seq;

				if (held_from == 0 || from < held_from)
					held_from = from;
				unheld++;
				continue;
			}
			if (rej.reason == TB_RECOVERY_PROTO_REJ_TOO_LARGE &&
			    rej.max_count >= 1 &&
			    rej.max_count < c->conns[i].max_count) {
				c->conns[i].max_count = (uint32_t)rej.max_count;
				i--; /* ask the same one again, smaller */
				continue;
			}
			other++;
			if ((rej.reason == TB_RECOVERY_PROTO_REJ_RATE_LIMITED ||
			     rej.reason == TB_RECOVERY_PROTO_REJ_BUSY) &&
			    (wait_ms == 0 || rej.retry_after_ms < wait_ms))
				wait_ms = (uint32_t)rej.retry_after_ms;
		}
		if (x.next > last)
			break;
		if (unheld && !other) {
			uint64_t gone = held_from - 1 < last ? held_from - 1 : last;

			stats->lost += gone - x.next + 1;
			if (loss)
				loss(clientd, x.next, gone);
			x.next = gone + 1;
			continue;
		}
		if (x.next > progress) {
			backoff = cfg->backoff_ms ? cfg->backoff_ms : 1;
			continue;
		}
		if (tb_clock_mono_ms() >= deadline)
			break;
		if (wait_ms < backoff)
			wait_ms = backoff;
		if (tb_clock_mono_ms() + wait_ms > deadline)
			wait_ms = (uint32_t)(deadline - tb_clock_mono_ms());
		sleep_ms(wait_ms);
		backoff = backoff * 2 > cfg->backoff_max_ms ? cfg->backoff_max_ms :
			  backoff * 2;
		if (backoff == 0)
			backoff = 1;
	}
	if (next)
		*next = x.next;
	if (x.next <= last && !cfg->until_latest)
		return tb_error_set(TB_ETIMEDOUT, "recovery of %llu..%llu: no "
				  "service delivered %llu.. within %u ms",
				  (unsigned long long)first,
				  (unsigned long long)last,
				  (unsigned long long)x.next, cfg->deadline_ms);
	if (x.next <= last)
		return tb_error_set(TB_ETIMEDOUT, "recovery from %llu: no service "
				  "answered within %u ms",
				  (unsigned long long)x.next, cfg->deadline_ms);
	return 0;
done:
	if (next)
		*next = x.next;
	return 0;
}

int tb_recovery_client_fetch(const tb_recovery_client_cfg_t *cfg, uint64_t epoch,
		     uint64_t first, uint64_t last, tb_recovery_client_frame_fn fn,
		     tb_recovery_client_loss_fn loss, void *clientd,
		     tb_recovery_client_stats_t *stats, uint64_t *next)
{
	tb_recovery_client_t *c;
	int rc;

	if (stats)
		memset(stats, 0, sizeof(*stats));
	if (next)
		*next = first;
	if ((rc = tb_recovery_client_open(&c, cfg)) < 0)
		return tb_error_prepend(rc, "recovery fetch");
	rc = tb_recovery_client_get(c, epoch, first, last, fn, loss, clientd,
				    stats, next);
	tb_recovery_client_close(c);
	return rc;
}

int tb_recovery_client_fetch_one(const tb_endpoint_t *ep, const char *token,
			 const tb_recovery_proto_request_t *req,
			 uint32_t io_timeout_ms, tb_recovery_client_frame_fn fn,
			 void *clientd, tb_recovery_proto_reject_t *reject,
			 uint64_t *delivered)
{
	uint8_t out[TB_RECOVERY_PROTO_MSG_MAX];
	tb_recovery_client_cfg_t cfg;
	tb_recovery_client_t *c;
	uint64_t got = 0;
	int n, rc, cut;

	if (delivered)
		*delivered = 0;
	/* Checked before anything is dialled; sent in the connection's
	 * version below. */
	if ((n = tb_recovery_proto_encode_request(out, sizeof(out), req)) < 0)
		return n;
	tb_recovery_client_cfg_init(&cfg);
	cfg.endpoints = ep;
	cfg.n_endpoints = 1;
	cfg.stream_id = req->stream_id;
	cfg.token = token;
	cfg.io_timeout_ms = io_timeout_ms;
	if ((rc = tb_recovery_client_open(&c, &cfg)) < 0)
		return rc;
	memset(reject, 0, sizeof(*reject));
	rc = conn_dial(c, 0, reject);
	if (rc == 0 && (n = tb_recovery_proto_encode(out, sizeof(out),
						     c->conns[0].version,
						     TB_RECOVERY_PROTO_REQUEST,
						     req)) < 0)
		rc = n;
	if (rc == 0 && (rc = send_request(c, &c->conns[0], out, (size_t)n)) == 0)
		rc = read_answer(c, &c->conns[0], req, fn, clientd, reject, &got,
				 &cut);
	if (delivered)
		*delivered = got;
	tb_recovery_client_close(c);
	return rc;
}

/* ------------------------------------------------------- the quick fetch */

/* Takes the client for `who` if nobody holds it. */
static int claim(tb_recovery_client_t *c, uint32_t who)
{
	uint32_t expected = TB_RECOVERY_CLIENT_FREE;

	/* A6: pairs with R6 in unclaim; the new holder sees every write of
	 * the last one (connections, buffers, the quick state). */
	return tb_atomic_cas_acq_rel(&c->owner, &expected, who);
}

int tb_recovery_client_claim(tb_recovery_client_t *c)
{
	return claim(c, TB_RECOVERY_CLIENT_BACKGROUND);
}

void tb_recovery_client_unclaim(tb_recovery_client_t *c)
{
	/* R6: pairs with A6 in claim. */
	tb_atomic_store_release(&c->owner, TB_RECOVERY_CLIENT_FREE);
}

int tb_recovery_client_quick_start(tb_recovery_client_t *c, uint64_t epoch,
				   uint64_t first, uint64_t last)
{
	uint8_t out[sizeof(tb_recovery_proto_wire_request_t)];
	struct rconn *k = NULL;
	struct quick *q = &c->q;
	ssize_t sent;
	int i, n;

	if (epoch == 0 || first == 0 || last < first ||
	    !claim(c, TB_RECOVERY_CLIENT_QUICK))
		return TB_EBUSY;
	for (i = 0; i < c->cfg.n_endpoints && !k; i++)
		if (c->conns[i].fd >= 0 && !c->conns[i].connecting)
			k = &c->conns[i];
	/* One request, on a connection with nothing left over from the last
	 * answer. */
	if (!k || last - first >= k->max_count || tb_net_reader_avail(&k->in))
		goto busy;
	memset(q, 0, sizeof(*q));
	q->conn = (int)(k - c->conns);
	q->req.stream_id = c->cfg.stream_id;
	q->req.epoch = epoch;
	q->req.first = first;
	q->req.count = (uint32_t)(last - first + 1);
	n = tb_recovery_proto_encode(out, sizeof(out), k->version,
				     TB_RECOVERY_PROTO_REQUEST, &q->req);
	if (n < 0)
		goto busy;
	sent = send(k->fd, out, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (sent != n) {
		/* Half a request spoils the stream; a broken socket is
		 * dialled again by maintain.  A full send buffer on an idle
		 * connection is neither: left as it is. */
		if (sent > 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
			conn_close(k);
		goto busy;
	}
	q->until_ms = tb_clock_mono_ms() + c->cfg.io_timeout_ms;
	return 0;
busy:
	tb_recovery_client_unclaim(c);
	return TB_EBUSY;
}

/* One recv() that does not wait, into the reader's buffer (moving what is
 * buffered to its start when the rest of the buffer is short): > 0 when
 * bytes came, 0 when none yet, or an error. */
static int quick_recv(struct rconn *k)
{
	tb_net_reader_t *in = &k->in;
	ssize_t got;

	if (in->off == in->have) {
		in->off = in->have = 0;
	} else if (in->off > in->cap / 2 || in->have == in->cap) {
		/* What is buffered is less than a whole frame, and a frame
		 * fits in the buffer (quick_step): this makes room for it. */
		memmove(in->buf, in->buf + in->off, in->have - in->off);
		in->have -= in->off;
		in->off = 0;
	}
	got = recv(k->fd, in->buf + in->have, in->cap - in->have, MSG_DONTWAIT);
	if (got > 0) {
		in->have += (size_t)got;
		return 1;
	}
	if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return 0;
	if (got == 0)
		return tb_error_set(TB_EIO, "the server closed the connection "
				  "mid-answer");
	return tb_error_sys(errno, "recv");
}

/* The quick fetch's protocol message at the head of the buffer: BEGIN or
 * REJECT first, END after the frames.  1 when the fetch is over (*rc:
 * 1 done, TB_EBUSY given back, or an error), 0 when it goes on. */
static int quick_msg(tb_recovery_client_t *c, struct rconn *k, size_t len,
		     int *rc)
{
	struct quick *q = &c->q;
	tb_recovery_proto_msg_t m;
	int n = tb_recovery_proto_decode(tb_net_reader_peek(&k->in), len, &m);

	if (n < 0 || (n = version_check(k, &m)) < 0) {
		*rc = n;
		return 1;
	}
	tb_net_reader_take(&k->in, len);
	if (!q->begun && m.type == TB_RECOVERY_PROTO_REJECT) {
		*rc = TB_EBUSY; /* the policy's to judge */
		return 1;
	}
	if (!q->begun) {
		if (m.type != TB_RECOVERY_PROTO_RESPONSE_BEGIN ||
		    m.begin.stream_id != q->req.stream_id ||
		    m.begin.epoch != q->req.epoch ||
		    m.begin.first != q->req.first ||
		    m.begin.count > q->req.count) {
			*rc = tb_error_set(TB_EPROTO, "a %s that is not the "
					   "RESPONSE_BEGIN of %llu+%u",
					   tb_recovery_proto_type_name(m.type),
					   (unsigned long long)q->req.first,
					   q->req.count);
			return 1;
		}
		q->begin = m.begin;
		q->begun = 1;
		return 0;
	}
	if (m.type != TB_RECOVERY_PROTO_RESPONSE_END ||
	    (m.end.status == TB_RECOVERY_PROTO_END_COMPLETE ?
	     (q->i != q->begin.count || m.end.last_seq != q->begin.first + q->i - 1) :
	     (q->i > 0 && m.end.last_seq != q->begin.first + q->i - 1))) {
		*rc = tb_error_set(TB_EPROTO, "%s after %llu of %u frames",
				   tb_recovery_proto_type_name(m.type),
				   (unsigned long long)q->i, q->begin.count);
		return 1;
	}
	/* Cut short (the service's latest, or TRUNCATED): the rest is the
	 * policy's.  Bytes after the END were never asked for. */
	*rc = q->i < q->req.count ? TB_EBUSY : 1;
	if (tb_net_reader_avail(&k->in))
		*rc = tb_error_set(TB_EPROTO, "%zu bytes after RESPONSE_END",
				   tb_net_reader_avail(&k->in));
	return 1;
}

int tb_recovery_client_quick_step(tb_recovery_client_t *c,
				  tb_recovery_client_frame_fn fn, void *clientd,
				  int limit, uint64_t *next)
{
	struct quick *q = &c->q;
	struct rconn *k = &c->conns[q->conn];
	int done = 0, read = 0, rc = 0;

	for (;;) {
		const uint8_t *p = tb_net_reader_peek(&k->in);
		size_t avail = tb_net_reader_avail(&k->in);
		const tb_frame_hdr_t *f;
		uint32_t word;
		int need;

		/* The fast path, read_answer's: each whole, aligned frame
		 * in the buffer is checked where it lies and handed over. */
		while (q->begun && done < limit && avail >= TB_FRAME_HDR_LEN &&
		       (uintptr_t)p % 8 == 0) {
			f = (const tb_frame_hdr_t *)p;
			if (tb_unlikely(!frame_is_next(f, avail, &q->begin,
						       q->i)))
				break;
			tb_net_reader_take(&k->in, f->length);
			p += f->length;
			avail -= f->length;
			q->i++;
			done++;
			fn(clientd, f);
		}
		if (done >= limit)
			return 0;
		/* A protocol message (BEGIN, REJECT, END), or a frame the
		 * fast path left (misaligned, or bad: named below).  A frame
		 * starts with its length, at most TB_FRAME_MAX_LEN; a
		 * message with the magic reads as more. */
		if (avail >= sizeof(word)) {
			memcpy(&word, p, sizeof(word));
			word = le32toh(word);
		}
		if (avail < sizeof(word)) {
			need = (int)(sizeof(word) - avail);
		} else if (!q->begun || ((word & 0xffffu) == TB_RECOVERY_PROTO_MAGIC &&
					 word > TB_FRAME_MAX_LEN)) {
			if ((need = tb_recovery_proto_frame_need(p, avail)) < 0) {
				rc = need;
				goto broken;
			}
			if (need == 0) {
				tb_wire_hdr_t h;

				memcpy(&h, p, sizeof(h));
				if (quick_msg(c, k, le32toh(h.length), &rc))
					goto over;
				continue;
			}
		} else {
			int64_t len;

			if ((need = tb_recovery_proto_replay_need(p, avail)) < 0) {
				rc = tb_error_prepend(need, "frame %llu",
						      (unsigned long long)q->i);
				goto broken;
			}
			if (need == 0) {
				memcpy(&word, p, sizeof(word));
				len = le32toh(word);
				if ((uintptr_t)p % 8) {
					uint8_t *s = scratch(c, (size_t)len);

					if (!s) {
						rc = tb_error_set(TB_ENOMEM, "frame of "
								  "%lld bytes",
								  (long long)len);
						goto broken;
					}
					memcpy(s, p, (size_t)len);
					p = s;
				}
				if ((len = tb_recovery_proto_replay_check(p, (size_t)len,
									  &q->begin,
									  q->i)) < 0) {
					rc = (int)len;
					goto broken;
				}
				tb_net_reader_take(&k->in, (size_t)len);
				q->i++;
				done++;
				fn(clientd, (const tb_frame_hdr_t *)p);
				continue;
			}
			if (avail + (size_t)need > k->in.cap) {
				rc = tb_error_set(TB_EPROTO, "frame %llu of %zu bytes: "
						  "larger than the buffer",
						  (unsigned long long)q->i,
						  avail + (size_t)need);
				goto broken;
			}
		}
		/* More bytes are needed: one recv() a step. */
		if (!read) {
			read = 1;
			if ((rc = quick_recv(k)) < 0)
				goto broken;
			if (rc > 0) {
				q->until_ms = tb_clock_mono_ms() + c->cfg.io_timeout_ms;
				continue;
			}
		}
		if (tb_clock_mono_ms() < q->until_ms)
			return 0;
		rc = tb_error_set(TB_ETIMEDOUT, "no answer from %s:%u within %u ms",
				  c->eps[q->conn].host, c->eps[q->conn].port,
				  c->cfg.io_timeout_ms);
		goto broken;
	}
broken:
	if (rc == TB_EBUSY)
		rc = TB_EIO;
over:
	if (rc < 0 && rc != TB_EBUSY)
		conn_close(k);
	*next = q->req.first + q->i;
	tb_recovery_client_unclaim(c);
	return rc;
}
