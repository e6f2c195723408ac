/*
 * snapshot.c - late join from a snapshot (tb_sub_start_at_snapshot).
 *
 * A publisher of a book (a feed handler) publishes, beside its incremental
 * stream, a snapshot stream: now and then its whole state, as a BEGIN that
 * names the last incremental sequence S the state includes, the state in
 * any number of messages, and an END of the same S.  The bus knows no
 * schema, so the caller's tb_snapshot_fn says which message is which.
 *
 * A late joiner opens its incremental subscriber first, then the snapshot
 * subscriber, and calls tb_sub_start_at_snapshot.  This polls the snapshot
 * stream into a buffer until it holds one whole snapshot - BEGIN, body,
 * END of the same S, with no loss, new epoch or second BEGIN between them
 * (any of which throws the partial one away) - of the incremental stream's
 * epoch when both are known; hands it to the caller; and starts the
 * incremental subscriber at S + 1.  Why nothing is missed: the publisher
 * writes BEGIN right after incremental S, and nothing incremental until
 * the END, so a BEGIN seen by a snapshot subscriber opened after the
 * incremental one is for an S at or after the incremental one's first
 * position; whatever the incremental transport did not keep between that
 * position and S + 1 is a gap like any late join's, recovered through
 * cfg.recovery.
 *
 * The snapshot is buffered, not delivered as it comes, so the caller never
 * sees a partial one.  Everything here is a set-up call: it allocates, and
 * it blocks up to the caller's timeout.
 */
#include <tickbus/tickbus.h>

#include "bus/error.h"

#include <stdlib.h>
#include <string.h>

/* One message kept, its payload after it, 8-byte aligned. */
typedef struct kept {
	uint64_t seq, publish_ns, receive_ns;
	uint32_t len, stream_id;
	uint16_t template_id, flags;
	uint32_t pad_;
} kept_t;

typedef struct collect {
	tb_snapshot_fn part;
	void *clientd;
	uint8_t *buf;
	size_t len, cap;
	int in;               /* between a BEGIN and its END */
	int done;             /* a whole one is in buf */
	int failed;           /* out of memory */
	uint64_t seq;         /* its BEGIN's S */
	uint64_t begins, ends, broken;
} collect_t;

static int keep(collect_t *c, const tb_msg_t *m)
{
	size_t need = sizeof(kept_t) + ((m->len + 7u) & ~(size_t)7u);
	kept_t k;

	if (c->cap - c->len < need) {
		size_t cap = c->cap ? c->cap : 1u << 16;
		uint8_t *p;

		while (cap - c->len < need)
			cap *= 2;
		p = realloc(c->buf, cap);
		if (!p) {
			c->failed = 1;
			return -1;
		}
		c->buf = p;
		c->cap = cap;
	}
	memset(&k, 0, sizeof(k));
	k.seq = m->seq;
	k.publish_ns = m->publish_ns;
	k.receive_ns = m->receive_ns;
	k.len = m->len;
	k.stream_id = m->stream_id;
	k.template_id = m->template_id;
	k.flags = m->flags;
	memcpy(c->buf + c->len, &k, sizeof(k));
	memcpy(c->buf + c->len + sizeof(k), m->data, m->len);
	c->len += need;
	return 0;
}

static void on_snap(void *clientd, const tb_msg_t *m)
{
	collect_t *c = clientd;
	uint64_t seq = 0;
	tb_snapshot_part_t p;

	if (c->done || c->failed)
		return; /* the rest of this poll's batch: not needed */
	p = c->part(c->clientd, m, &seq);
	switch (p) {
	case TB_SNAPSHOT_BEGIN:
		c->begins++;
		if (c->in)
			c->broken++; /* a BEGIN before the last one's END */
		c->len = 0;
		c->in = 1;
		c->seq = seq;
		keep(c, m);
		return;
	case TB_SNAPSHOT_BODY:
		if (c->in)
			keep(c, m);
		return;
	case TB_SNAPSHOT_END:
		if (!c->in)
			return;
		c->ends++;
		c->in = 0;
		if (seq != c->seq) {
			c->broken++;
			return;
		}
		if (keep(c, m) == 0)
			c->done = 1;
		return;
	case TB_SNAPSHOT_NONE:
	default:
		return;
	}
}

static void deliver(const collect_t *c, tb_handler_t handler, void *clientd)
{
	size_t off = 0;

	while (off < c->len) {
		kept_t k;
		tb_msg_t m;

		memcpy(&k, c->buf + off, sizeof(k));
		m.data = c->buf + off + sizeof(k);
		m.len = k.len;
		m.template_id = k.template_id;
		m.flags = (uint16_t)(k.flags | TB_MSG_F_SNAPSHOT);
		m.stream_id = k.stream_id;
		m.seq = k.seq;
		m.publish_ns = k.publish_ns;
		m.receive_ns = k.receive_ns;
		handler(clientd, &m);
		off += sizeof(k) + ((k.len + 7u) & ~(size_t)7u);
	}
}

int tb_sub_start_at_snapshot(tb_subscriber_t *sub, tb_subscriber_t *snap,
			     tb_snapshot_fn part, tb_handler_t handler,
			     void *clientd, uint32_t timeout_ms, uint64_t *seq)
{
	collect_t c;
	uint64_t until, other_epoch = 0;
	const char *last = "none";
	tb_idle_t idle;
	int rc;

	if (!sub || !snap || !part || !handler || !seq)
		return tb_error_set(TB_EINVAL, "tb_sub_start_at_snapshot: NULL "
				  "argument");
	if (sub == snap)
		return tb_error_set(TB_EINVAL, "tb_sub_start_at_snapshot: the "
				  "stream and its snapshot stream are one "
				  "subscriber");
	/* Refused now rather than after the wait: a subscriber that has
	 * delivered cannot start anywhere (the real start is set below). */
	if (tb_sub_recovering(sub) || tb_sub_start_at(sub, 1) < 0)
		return tb_error_set(TB_ESTATE, "tb_sub_start_at_snapshot: the "
				  "subscriber has already delivered messages");
	memset(&c, 0, sizeof(c));
	c.part = part;
	c.clientd = clientd;
	tb_idle_init(&idle, TB_IDLE_BACKOFF);
	until = tb_clock_mono_ms() + timeout_ms;
	for (;;) {
		int n = tb_sub_poll(snap, on_snap, &c, 256);

		if (c.failed) {
			free(c.buf);
			return tb_error_set(TB_ENOMEM, "tb_sub_start_at_snapshot: "
					  "out of memory for a snapshot of %zu "
					  "bytes", c.len);
		}
		if (c.done) {
			uint64_t es = tb_sub_epoch(snap), ei = tb_sub_epoch(sub);

			if (es == 0 || ei == 0 || es == ei)
				break;
			other_epoch++; /* of a stream we do not follow */
			c.done = 0;
			c.len = 0;
		}
		if (n < 0) {
			if (n <= TB_EINVAL) { /* a set-up error of the stream */
				free(c.buf);
				return tb_error_prepend(n, "tb_sub_start_at_snapshot: "
						      "snapshot stream");
			}
			if (c.in && n != TB_NOT_CONNECTED) {
				c.in = 0;   /* lost part of it: the next one */
				c.broken++;
			}
			last = tb_strerror(n);
		}
		if (tb_clock_mono_ms() >= until) {
			free(c.buf);
			return tb_error_set(TB_ETIMEDOUT, "tb_sub_start_at_snapshot: "
					  "no whole snapshot in %u ms (%llu "
					  "begun, %llu ended, %llu broken, %llu "
					  "of another epoch; the snapshot "
					  "stream's last condition: %s)",
					  timeout_ms, (unsigned long long)c.begins,
					  (unsigned long long)c.ends,
					  (unsigned long long)c.broken,
					  (unsigned long long)other_epoch, last);
		}
		tb_idle_step(&idle, n > 0 ? n : 0);
	}
	deliver(&c, handler, clientd);
	free(c.buf);
	*seq = c.seq;
	rc = tb_sub_start_at(sub, c.seq + 1);
	return rc < 0 ? rc : 0;
}
