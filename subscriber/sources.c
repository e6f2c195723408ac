/*
 * sources.c - one stream taken from several identical copies (the design
 * is in subscriber/sources.h).
 *
 * The live path is sources_poll's loop: per copy, a test of two flags, a
 * comparison and a store on its tracker, and its transport's poll.  What
 * happens when nothing was delivered - a copy held at a gap, ends, epochs,
 * not connected yet - is settle()'s, out of the way.
 */
#include "subscriber/sources.h"

#include "bus/clock.h"
#include "bus/error.h"

#include <stdlib.h>
#include <string.h>

enum copy_state {
	COPY_WAITING = 0, /* not attached to any epoch yet */
	COPY_LIVE = 1,
	COPY_ENDED = 2,   /* said dead or closed; polled for its return */
};

typedef struct copy {
	tb_rx_t *rx;
	tb_seq_t seq;        /* this copy's own tracker */
	tb_seq_range_t loss; /* its last gap (its own business) */
	int state;           /* enum copy_state */
	int foreign;         /* of another epoch than the followed: unpolled */
	int lapped;          /* its last loss was a lap */
	int end;             /* TB_CLOSED, TB_PUBLISHER_DEAD or an error */
	uint64_t delivered;
	uint64_t losses;
	uint64_t ends;
} copy_t;

typedef struct tb_sources {
	tb_rx_t base;             /* first: the transport interface */
	int n;
	int first;                /* the copy polled first */
	uint64_t epoch;           /* followed; 0 until a copy attaches */
	uint64_t wait_ns;         /* sources_wait_us */
	uint64_t held_since_ns;   /* a copy is held and E has not moved since;
				     0 = none */
	int end_told;             /* every copy ended, and that was told */
	uint64_t gaps;
	copy_t copy[TB_SOURCES_MAX];
} tb_sources_t;

/* ------------------------------------------------------------ set-up */

static uint64_t copy_epoch(const copy_t *c)
{
	return c->rx->ops->epoch(c->rx);
}

/* A copy that shows epoch `e` (> 0): followed, or foreign. */
static void place(tb_sources_t *s, copy_t *c, uint64_t e)
{
	if (s->epoch == 0)
		s->epoch = e;
	c->foreign = e != s->epoch;
	if (c->state == COPY_WAITING)
		c->state = COPY_LIVE;
}

int tb_sources_open(tb_rx_t **out, const tb_stream_cfg_t *cfg,
		    const tb_stream_cfg_t *srcs, int n)
{
	tb_sources_t *s;
	int rc = 0;

	*out = NULL;
	if (n < 1 || n > TB_SOURCES_MAX)
		return tb_error_set(TB_EINVAL, "sources: %d copies; allowed: 1 to "
				  "%d", n, TB_SOURCES_MAX);
	s = calloc(1, sizeof(*s));
	if (!s)
		return tb_error_set(TB_ENOMEM, "sources: out of memory");
	s->base.ops = &tb_sources_rx_ops;
	s->wait_ns = (uint64_t)cfg->sources_wait_us * 1000u;
	for (int i = 0; i < n; i++) {
		const tb_rx_ops_t *ops = tb_rx_ops_for(srcs[i].transport);
		copy_t *c = &s->copy[i];

		if (!ops) {
			rc = tb_error_prepend(TB_ENOTSUP, "source '%s'",
					      srcs[i].name);
			break;
		}
		rc = ops->open(&c->rx, &srcs[i]);
		if (rc < 0) {
			tb_error_prepend(rc, "source '%s'", srcs[i].name);
			break;
		}
		s->n++;
		tb_seq_init(&c->seq, 0);
		if (copy_epoch(c) != 0)
			place(s, c, copy_epoch(c));
	}
	if (rc < 0) {
		tb_sources_rx_ops.close(&s->base);
		return rc;
	}
	*out = &s->base;
	return 0;
}

void tb_sources_set_counters(tb_rx_t *rx, tb_counter_slot_t *ctr)
{
	tb_sources_t *s = (tb_sources_t *)rx;

	for (int i = 0; i < s->n; i++)
		s->copy[i].rx->ctr = ctr;
}

void tb_sources_stats(const tb_rx_t *rx, tb_sources_stats_t *out)
{
	const tb_sources_t *s = (const tb_sources_t *)rx;

	memset(out, 0, sizeof(*out));
	out->n = s->n;
	for (int i = 0; i < s->n; i++) {
		out->delivered[i] = s->copy[i].delivered;
		out->losses[i] = s->copy[i].losses;
		out->ends[i] = s->copy[i].ends;
		out->live[i] = s->copy[i].state == COPY_LIVE &&
			       !s->copy[i].foreign;
	}
	out->gaps = s->gaps;
	out->epoch = s->epoch;
}

/* --------------------------------------------------- off the live path */

/* The handler of a copy that has not attached before: its first message
 * says whether it is of the followed epoch; if not, it delivers nothing. */
typedef struct guard {
	tb_sources_t *s;
	copy_t *c;
	tb_handler_t handler;
	void *clientd;
	int checked, ok;
	int dropped;
} guard_t;

static void guarded(void *clientd, const tb_msg_t *m)
{
	guard_t *g = clientd;

	if (!g->checked) {
		uint64_t e = copy_epoch(g->c);

		g->checked = 1;
		if (e != 0)
			place(g->s, g->c, e);
		g->ok = e != 0 && !g->c->foreign;
	}
	if (g->ok)
		g->handler(g->clientd, m);
	else
		g->dropped++;
}

/* Polls a copy that is waiting or ended: the first through the guard, and
 * either comes back to life when its transport shows activity again (a
 * frame, or duplicates: a restarted publisher catching up). */
static int poll_unsettled(tb_sources_t *s, copy_t *c, tb_handler_t handler,
			  void *clientd, int limit)
{
	uint64_t dups = c->seq.duplicates;
	int r;

	if (c->state == COPY_WAITING) {
		guard_t g = {s, c, handler, clientd, 0, 0, 0};

		r = c->rx->ops->poll(c->rx, &c->seq, &c->loss, guarded, &g, limit);
		if (c->state == COPY_WAITING && copy_epoch(c) != 0)
			place(s, c, copy_epoch(c));
		if (r > 0)
			r -= g.dropped;
		return r;
	}
	r = c->rx->ops->poll(c->rx, &c->seq, &c->loss, handler, clientd, limit);
	if (r > 0 || c->seq.duplicates != dups) {
		c->state = COPY_LIVE;
		s->end_told = 0;
	}
	return r;
}

/* A condition one copy reported.  Returns 1 if the copy now stands beyond
 * E (held), else 0. */
static int copy_condition(tb_sources_t *s, copy_t *c, const tb_seq_t *seq,
			  int r)
{
	switch (r) {
	case TB_GAP:
	case TB_LAPPED:
		c->losses++;
		c->lapped = r == TB_LAPPED;
		if (c->state == COPY_ENDED) {
			c->state = COPY_LIVE;
			s->end_told = 0;
		}
		return seq->expected != 0 && c->seq.expected > seq->expected;
	case TB_NOT_CONNECTED:
		return 0;
	case TB_NEW_EPOCH:
		/* Its tracker starts again (the transport reset it); a copy
		 * back in the followed epoch simply goes on. */
		place(s, c, copy_epoch(c));
		if (c->state == COPY_ENDED)
			c->state = COPY_LIVE;
		return 0;
	default: /* closed, dead, or an error of its transport */
		if (c->state != COPY_ENDED)
			c->ends++;
		c->state = COPY_ENDED;
		c->end = r;
		return 0;
	}
}

/* Nothing was delivered: is there something to say?  `held` copies stand
 * beyond E. */
static int settle(tb_sources_t *s, tb_seq_t *seq, tb_seq_range_t *loss,
		  int held)
{
	int can_fill = 0, attached = 0, ended = 0, closed = 0, error = 0;
	copy_t *low = NULL, *foreign = NULL;

	for (int i = 0; i < s->n; i++) {
		copy_t *c = &s->copy[i];

		if (c->foreign) {
			if (!foreign)
				foreign = c;
			continue;
		}
		if (c->state == COPY_WAITING)
			continue;
		attached++;
		if (seq->expected != 0 && c->seq.expected > seq->expected) {
			if (!low || c->seq.expected < low->seq.expected)
				low = c;
			if (c->state == COPY_ENDED)
				ended++;
			continue;
		}
		if (c->state == COPY_ENDED) {
			ended++;
			closed += c->end == TB_CLOSED;
			if (c->end != TB_CLOSED && c->end != TB_PUBLISHER_DEAD)
				error = c->end;
			continue;
		}
		can_fill++;
	}
	if (held && low) {
		/* E is missing on the held copies; another may bring it. */
		if (can_fill) {
			uint64_t now = tb_clock_now_ns();

			if (s->held_since_ns == 0) {
				s->held_since_ns = now ? now : 1;
				return 0;
			}
			if (now - s->held_since_ns < s->wait_ns)
				return 0;
		}
		s->held_since_ns = 0;
		s->gaps++;
		tb_seq_gap_to(seq, low->seq.expected, loss);
		return low->lapped ? TB_LAPPED : TB_GAP;
	}
	s->held_since_ns = 0;
	if (attached == 0) {
		if (foreign)
			goto adopt;
		return TB_NOT_CONNECTED;
	}
	if (ended < attached || held)
		return 0;
	/* Every copy of the followed epoch has ended. */
	if (foreign)
		goto adopt;
	if (s->end_told)
		return 0;
	s->end_told = 1;
	if (closed)
		return TB_CLOSED;
	return error ? error : TB_PUBLISHER_DEAD;
adopt:
	/* No copy of the followed epoch is left: the first of another takes
	 * over, from where its transport restarted it. */
	s->epoch = copy_epoch(foreign);
	for (int i = 0; i < s->n; i++)
		s->copy[i].foreign = s->copy[i].state != COPY_WAITING &&
				     copy_epoch(&s->copy[i]) != s->epoch;
	tb_seq_init(seq, foreign->seq.expected);
	s->end_told = 0;
	return TB_NEW_EPOCH;
}

/* ------------------------------------------------------------- hot path */

static int sources_poll(tb_rx_t *rx, tb_seq_t *seq, tb_seq_range_t *loss,
			tb_handler_t handler, void *clientd, int limit)
{
	tb_sources_t *s = (tb_sources_t *)rx;
	int n = 0, held = 0, i = s->first;

	/* Hot path: no allocation, lock or system call; one transport poll
	 * per copy. */
	for (int k = 0; k < s->n; k++, i = i + 1 == s->n ? 0 : i + 1) {
		copy_t *c = &s->copy[i];
		int r;

		if (tb_unlikely(c->foreign))
			continue;
		if (tb_likely(seq->expected != 0)) {
			if (tb_unlikely(c->seq.expected > seq->expected)) {
				held++;  /* past a gap of its own */
				continue;
			}
			c->seq.expected = seq->expected;
		}
		if (tb_likely(c->state == COPY_LIVE))
			r = c->rx->ops->poll(c->rx, &c->seq, &c->loss, handler,
					     clientd, limit - n);
		else
			r = poll_unsettled(s, c, handler, clientd, limit - n);
		if (tb_likely(r > 0)) {
			seq->expected = c->seq.expected;
			seq->delivered += (uint64_t)r;
			c->delivered += (uint64_t)r;
			n += r;
			if (n >= limit) {
				/* The others wait: the next poll starts
				 * with the one after this. */
				s->first = i + 1 == s->n ? 0 : i + 1;
				break;
			}
		} else if (tb_unlikely(r < 0)) {
			held += copy_condition(s, c, seq, r);
		}
	}
	if (tb_likely(n > 0)) {
		s->held_since_ns = 0;
		return n;
	}
	return settle(s, seq, loss, held);
}

static uint64_t sources_epoch(const tb_rx_t *rx)
{
	const tb_sources_t *s = (const tb_sources_t *)rx;

	if (s->epoch)
		return s->epoch;
	for (int i = 0; i < s->n; i++) {
		uint64_t e = copy_epoch(&s->copy[i]);

		if (e)
			return e;
	}
	return 0;
}

static int sources_open_one(tb_rx_t **rx, const tb_stream_cfg_t *cfg)
{
	(void)rx;
	return tb_error_set(TB_EINVAL, "stream '%s': a stream of sources is "
			  "opened with its copies (tb_sources_open)", cfg->name);
}

static void sources_close(tb_rx_t *rx)
{
	tb_sources_t *s = (tb_sources_t *)rx;

	for (int i = 0; i < s->n; i++)
		s->copy[i].rx->ops->close(s->copy[i].rx);
	free(s);
}

const tb_rx_ops_t tb_sources_rx_ops = {
	.name = "sources",
	.open = sources_open_one,
	.poll = sources_poll,
	.epoch = sources_epoch,
	.close = sources_close,
};
