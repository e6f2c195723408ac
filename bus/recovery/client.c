/*
 * recovery/client.c - the recovery protocol's client side (see the header
 * for the policy).
 *
 * Every read is bounded twice: by the bytes the protocol allows at that
 * point (a protocol message by tb_recovery_proto_frame_need, at most
 * TB_RECOVERY_PROTO_MSG_MAX; a frame by tb_recovery_proto_replay_need, at most
 * TB_FRAME_MAX_LEN) and by the I/O timeout, a deadline for each message or
 * frame (net.h).  Reads go through a 64 KiB buffer (a tb_net_reader_t) so
 * that a replay of small frames costs one system call per buffer, not per
 * frame.
 */
#include "bus/recovery/client.h"

#include "bus/clock.h"
#include "bus/error.h"
#include "bus/net.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CONN_BUF (64u << 10)

typedef struct conn {
	int fd;
	uint32_t timeout_ms;
	tb_net_reader_t in;
	uint8_t buf[CONN_BUF];
} conn_t;

void tb_recovery_client_cfg_init(tb_recovery_client_cfg_t *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->io_timeout_ms = 1000;
	cfg->deadline_ms = 5000;
	cfg->backoff_ms = 10;
	cfg->backoff_max_ms = 500;
}

/* Copies exactly `n` bytes to `dst`, within the I/O timeout. */
static int read_exact(conn_t *c, void *dst, size_t n)
{
	int rc = tb_net_reader_read(&c->in, dst, n, c->timeout_ms);

	if (rc == TB_CLOSED)
		return tb_error_set(TB_EIO, "the server closed the connection "
				  "mid-answer");
	return rc;
}

/* Reads one protocol message (not a frame). */
static int read_msg(conn_t *c, tb_recovery_proto_msg_t *m)
{
	uint8_t buf[TB_RECOVERY_PROTO_MSG_MAX];
	size_t have = TB_WIRE_HDR_LEN;
	int need, rc;

	rc = read_exact(c, buf, have);
	if (rc < 0)
		return rc;
	need = tb_recovery_proto_frame_need(buf, have);
	if (need < 0)
		return need;
	if (have + (size_t)need > sizeof(buf))
		return tb_error_set(TB_EPROTO, "message of %zu bytes is over %u",
				  have + (size_t)need, TB_RECOVERY_PROTO_MSG_MAX);
	rc = read_exact(c, buf + have, (size_t)need);
	if (rc < 0)
		return rc;
	have += (size_t)need;
	rc = tb_recovery_proto_decode(buf, have, m);
	return rc < 0 ? rc : 0;
}

int tb_recovery_client_fetch_one(const tb_endpoint_t *ep, const tb_recovery_proto_request_t *req,
			 uint32_t io_timeout_ms, tb_recovery_client_frame_fn fn,
			 void *clientd, tb_recovery_proto_reject_t *reject,
			 uint64_t *delivered)
{
	uint8_t out[TB_RECOVERY_PROTO_MSG_MAX];
	tb_recovery_proto_msg_t m;
	tb_recovery_proto_begin_t begin;
	uint8_t *frame = NULL;
	size_t frame_cap = 0;
	uint64_t i = 0;
	conn_t *c;
	int rc, n;

	if (delivered)
		*delivered = 0;
	n = tb_recovery_proto_encode_request(out, sizeof(out), req);
	if (n < 0)
		return n;
	c = malloc(sizeof(*c));
	if (!c)
		return tb_error_set(TB_ENOMEM, "recovery client: out of memory");
	c->timeout_ms = io_timeout_ms;
	c->fd = tb_net_dial(ep, io_timeout_ms);
	if (c->fd < 0) {
		rc = c->fd;
		free(c);
		return rc;
	}
	tb_net_reader_init(&c->in, c->fd, c->buf, sizeof(c->buf));
	rc = tb_net_send_all(c->fd, out, (size_t)n, io_timeout_ms);
	if (rc < 0)
		goto out;
	rc = read_msg(c, &m);
	if (rc < 0)
		goto out;
	if (m.type == TB_RECOVERY_PROTO_REJECT) {
		*reject = m.reject;
		rc = tb_error_set(TB_RECOVERY_CLIENT_REJECTED, "rejected: %s (%llu): %s",
				tb_recovery_proto_reject_name(m.reject.reason),
				(unsigned long long)m.reject.detail, m.reject.text);
		goto out;
	}
	if (m.type != TB_RECOVERY_PROTO_RESPONSE_BEGIN) {
		rc = tb_error_set(TB_EPROTO, "answer starts with %s, not "
				"RESPONSE_BEGIN or REJECT",
				tb_recovery_proto_type_name(m.type));
		goto out;
	}
	begin = m.begin;
	if (begin.stream_id != req->stream_id || begin.epoch != req->epoch ||
	    begin.first != req->first || begin.count > req->count) {
		rc = tb_error_set(TB_EPROTO, "RESPONSE_BEGIN announces stream %u "
				"epoch %llu first %llu count %u for a request of "
				"stream %u epoch %llu first %llu count %u",
				begin.stream_id, (unsigned long long)begin.epoch,
				(unsigned long long)begin.first, begin.count,
				req->stream_id, (unsigned long long)req->epoch,
				(unsigned long long)req->first, req->count);
		goto out;
	}
	for (;;) {
		uint8_t hdr[TB_FRAME_HDR_LEN];
		uint32_t word;
		int need;
		int64_t len;

		/* A frame, or RESPONSE_END: the first word tells which.  A
		 * frame starts with its length, at most TB_FRAME_MAX_LEN
		 * (0x01000000); a message with the 'T','R' magic, a version
		 * and a type >= 1 reads as at least 0x01015254. */
		rc = read_exact(c, hdr, TB_WIRE_HDR_LEN);
		if (rc < 0)
			goto out;
		memcpy(&word, hdr, sizeof(word));
		if ((word & 0xffffu) == TB_RECOVERY_PROTO_MAGIC && word > TB_FRAME_MAX_LEN) {
			uint8_t buf[TB_RECOVERY_PROTO_MSG_MAX];

			memcpy(buf, hdr, TB_WIRE_HDR_LEN);
			need = tb_recovery_proto_frame_need(buf, TB_WIRE_HDR_LEN);
			if (need < 0 || TB_WIRE_HDR_LEN + (size_t)need > sizeof(buf)) {
				rc = need < 0 ? need : tb_error_set(TB_EPROTO,
					"oversized message after frames");
				goto out;
			}
			rc = read_exact(c, buf + TB_WIRE_HDR_LEN, (size_t)need);
			if (rc < 0)
				goto out;
			rc = tb_recovery_proto_decode(buf, TB_WIRE_HDR_LEN + (size_t)need, &m);
			if (rc < 0)
				goto out;
			if (m.type != TB_RECOVERY_PROTO_RESPONSE_END) {
				rc = tb_error_set(TB_EPROTO, "%s between frames",
						tb_recovery_proto_type_name(m.type));
				goto out;
			}
			if (m.end.status == TB_RECOVERY_PROTO_END_COMPLETE ?
			    (i != begin.count || m.end.last_seq != begin.first + i - 1) :
			    (i > 0 && m.end.last_seq != begin.first + i - 1)) {
				rc = tb_error_set(TB_EPROTO, "RESPONSE_END says last %llu "
						"(%s) after %llu of %u frames",
						(unsigned long long)m.end.last_seq,
						m.end.status == TB_RECOVERY_PROTO_END_COMPLETE ?
						"complete" : "truncated",
						(unsigned long long)i, begin.count);
				goto out;
			}
			rc = (int)i;
			goto out;
		}
		rc = read_exact(c, hdr + TB_WIRE_HDR_LEN,
				TB_FRAME_HDR_LEN - TB_WIRE_HDR_LEN);
		if (rc < 0)
			goto out;
		need = tb_recovery_proto_replay_need(hdr, TB_FRAME_HDR_LEN);
		if (need < 0) {
			rc = tb_error_prepend(need, "frame %llu", (unsigned long long)i);
			goto out;
		}
		len = TB_FRAME_HDR_LEN + need;
		if ((size_t)len > frame_cap) {
			uint8_t *p = realloc(frame, (size_t)len);

			if (!p) {
				rc = tb_error_set(TB_ENOMEM, "frame of %lld bytes",
						(long long)len);
				goto out;
			}
			frame = p;
			frame_cap = (size_t)len;
		}
		memcpy(frame, hdr, TB_FRAME_HDR_LEN);
		rc = read_exact(c, frame + TB_FRAME_HDR_LEN, (size_t)need);
		if (rc < 0)
			goto out;
		len = tb_recovery_proto_replay_check(frame, (size_t)len, &begin, i);
		if (len < 0) {
			rc = (int)len;
			goto out;
		}
		i++;
		if (delivered)
			*delivered = i;
		if (fn(clientd, (const tb_frame_hdr_t *)frame) != 0) {
			rc = tb_error_set(TB_ESTATE, "stopped by the caller");
			goto out;
		}
	}
out:
	close(c->fd);
	free(c);
	free(frame);
	return rc;
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

static void sleep_ms(uint32_t ms)
{
	struct timespec ts = {.tv_sec = ms / 1000,
			      .tv_nsec = (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

int tb_recovery_client_fetch(const tb_recovery_client_cfg_t *cfg, uint64_t epoch,
		     uint64_t first, uint64_t last, tb_recovery_client_frame_fn fn,
		     tb_recovery_client_loss_fn loss, void *clientd,
		     tb_recovery_client_stats_t *stats, uint64_t *next)
{
	tb_recovery_client_stats_t local;
	struct fetch x;
	uint64_t deadline, max_count = TB_RECOVERY_PROTO_COUNT_MAX;
	uint32_t backoff = cfg->backoff_ms ? cfg->backoff_ms : 1;

	if (!stats)
		stats = &local;
	memset(stats, 0, sizeof(*stats));
	x.fn = fn;
	x.clientd = clientd;
	x.next = first;
	x.st = stats;
	if (next)
		*next = first;
	if (!cfg->n_endpoints || first == 0 || last < first || !fn || !epoch)
		return tb_error_set(TB_EINVAL, "recovery fetch: %s",
				  !cfg->n_endpoints ? "no endpoints" :
				  "bad range, epoch or callback");
	deadline = tb_clock_mono_ms() + cfg->deadline_ms;
	while (x.next <= last) {
		uint64_t progress = x.next, oldest_earliest = 0;
		uint32_t wait_ms = 0;
		/* Lost means: every endpoint that answered said "too old"
		 * (one that is down cannot say otherwise). */
		int too_old = 0, other = 0;

		for (int i = 0; i < cfg->n_endpoints && x.next <= last; i++) {
			tb_recovery_proto_request_t req;
			tb_recovery_proto_reject_t rej;
			uint64_t want = last - x.next + 1;
			int rc;

			if (cfg->cancelled && cfg->cancelled(clientd))
				return tb_error_set(TB_ESTATE, "recovery cancelled");
			memset(&req, 0, sizeof(req));
			req.stream_id = cfg->stream_id;
			req.epoch = epoch;
			req.first = x.next;
			req.count = (uint32_t)(want < max_count ? want : max_count);
			snprintf(req.token, sizeof(req.token), "%s", cfg->token);
			stats->requests++;
			rc = tb_recovery_client_fetch_one(&cfg->endpoints[i], &req,
						  cfg->io_timeout_ms, on_frame, &x,
						  &rej, NULL);
			if (rc == TB_ESTATE)
				return rc;
			if (rc >= 0) {
				other++;
				if (cfg->until_latest && (uint32_t)rc < req.count)
					goto done; /* served up to the latest */
				if (rc > 0)
					i--; /* same endpoint again for the rest */
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
			if (rej.reason == TB_RECOVERY_PROTO_REJ_TOO_OLD) {
				if (rej.earliest_seq > oldest_earliest &&
				    oldest_earliest == 0)
					oldest_earliest = rej.earliest_seq;
				else if (rej.earliest_seq < oldest_earliest)
					oldest_earliest = rej.earliest_seq;
				too_old++;
				continue;
			}
			if (rej.reason != TB_RECOVERY_PROTO_REJ_TOO_LARGE)
				other++;
			if (rej.reason == TB_RECOVERY_PROTO_REJ_TOO_LARGE &&
			    rej.max_count >= 1 && rej.max_count < max_count) {
				max_count = rej.max_count;
				i--; /* ask the same one again, smaller */
			} else if (rej.reason == TB_RECOVERY_PROTO_REJ_RATE_LIMITED &&
				   (wait_ms == 0 || rej.retry_after_ms < wait_ms)) {
				wait_ms = (uint32_t)rej.retry_after_ms;
			}
		}
		if (x.next > last)
			break;
		if (too_old && !other && oldest_earliest > x.next) {
			uint64_t gone = oldest_earliest - 1 < last ?
					oldest_earliest - 1 : last;

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
