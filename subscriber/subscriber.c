/*
 * subscriber.c - the subscribing end of a stream: open and close, the poll
 * loop, late join, and the small accessors.
 *
 * A subscriber polls its transport and delivers frames in sequence order.
 * Loss is never silent.
 *
 * Without recovery endpoints (cfg.recovery empty) a lap or a gap stops
 * delivery at the point of loss, the poll returns TB_LAPPED or TB_GAP once,
 * tb_sub_loss() names the range, and the next poll goes on with the frame
 * after it.
 *
 * With recovery endpoints, a gap, a lap or a late join hands the poll loop
 * to the recovering state machine (subscriber/recovering.c, whose essay
 * tells how): tb_sub_poll then calls tb_recovering_poll until it is live
 * again, and the missing frames come back in order (TB_MSG_F_REPLAY) or as
 * one TB_DATA_LOSS with its exact range.
 *
 * A stream of sources (hot failover) has, in place of one transport, the
 * sources module (subscriber/sources.c), which polls every copy and looks
 * to everything here like one transport.
 *
 * The live hot path is tb_sub_poll's first lines: one test of `recovering`,
 * one indirect call into the transport per poll, a counter add.
 */
#include <tickbus/tickbus.h>

#include "bus/config.h"
#include "bus/counters.h"
#include "bus/error.h"
#include "bus/seq.h"
#include "bus/transport/shm.h"
#include "bus/transport/transport.h"
#include "subscriber/recovering.h"
#include "subscriber/sources.h"

#include <stdlib.h>

/* Why the next idle poll asks the recovery services for everything from
 * the next expected sequence up to the latest they hold (start_probe). */
enum {
	PROBE_NONE = 0,
	PROBE_LATE_JOIN = 1, /* tb_sub_start_at, nothing delivered yet */
	PROBE_DROPPED = 2,   /* TB_EVICTED: what followed is unknown here */
};

struct tb_subscriber {
	tb_rx_t *rx;
	tb_seq_t seq;
	tb_seq_range_t loss;
	int has_loss;
	int recovering;            /* the hot path's one extra test: mirrors
				      tb_recovering_active(rec) */
	int probe;                 /* PROBE_*: see start_probe */
	tb_counter_slot_t *ctr;    /* in the counters file, or `own_ctr` */
	tb_recovering_t *rec;      /* NULL: no recovery endpoints */
	tb_counter_slot_t own_ctr;
};

/* ------------------------------------------------------------ open/close */

/* Opens the subscriber of `cfg`: over its transport, or, with `n` > 0,
 * over the copies `srcs` (sources.h). */
static int open_sub(tb_subscriber_t **out, const tb_stream_cfg_t *cfg,
		    const tb_stream_cfg_t *srcs, int n)
{
	const tb_rx_ops_t *ops = n ? &tb_sources_rx_ops : NULL;
	tb_subscriber_t *s;
	int rc;

	if (!ops) {
		ops = tb_rx_ops_for(cfg->transport);
		if (!ops)
			return tb_error_prepend(TB_ENOTSUP, "tb_subscriber_open: "
					      "stream '%s'", cfg->name);
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return tb_error_set(TB_ENOMEM, "tb_subscriber_open: out of memory");
	tb_seq_init(&s->seq, 0);
	s->ctr = tb_counters_take_stream(&s->own_ctr, cfg->id, cfg->name,
					 TB_ROLE_SUBSCRIBER, ops->name);
	if (cfg->subscriber_core >= 0 && (rc = tb_thread_pin(cfg->subscriber_core)) < 0)
		goto fail;
	if (cfg->n_recovery > 0 && (rc = tb_recovering_open(&s->rec, cfg)) < 0)
		goto fail;
	rc = n ? tb_sources_open(&s->rx, cfg, srcs, n) : ops->open(&s->rx, cfg);
	if (rc < 0)
		goto fail;
	s->rx->ctr = s->ctr;
	if (n)
		tb_sources_set_counters(s->rx, s->ctr);
	if (s->rec)
		tb_recovering_bind(s->rec, s->rx, &s->seq, s->ctr);
	*out = s;
	return 0;
fail:
	tb_recovering_close(s->rec);
	tb_counters_remove_stream(s->ctr);
	free(s);
	return tb_error_prepend(rc, "tb_subscriber_open: stream '%s'", cfg->name);
}

int tb_subscriber_open(tb_subscriber_t **out, const tb_stream_cfg_t *cfg)
{
	int rc;

	*out = NULL;
	rc = tb_stream_cfg_validate(cfg);
	if (rc < 0)
		return tb_error_prepend(rc, "tb_subscriber_open");
	if (cfg->n_sources)
		return tb_error_set(TB_EINVAL, "tb_subscriber_open: stream '%s' "
				  "is taken from sources; open it with "
				  "tb_subscriber_open_file or "
				  "tb_subscriber_open_sources", cfg->name);
	return open_sub(out, cfg, NULL, 0);
}

int tb_subscriber_open_sources(tb_subscriber_t **out, const tb_stream_cfg_t *cfg,
			       const tb_stream_cfg_t *srcs, int n)
{
	tb_stream_cfg_t whole;
	int rc;

	if (!out || !cfg || !srcs)
		return tb_error_set(TB_EINVAL, "tb_subscriber_open_sources: NULL "
				  "argument");
	*out = NULL;
	if (n < 1 || n > TB_SOURCES_MAX)
		return tb_error_set(TB_EINVAL, "tb_subscriber_open_sources: %d "
				  "sources; allowed: 1 to %d", n, TB_SOURCES_MAX);
	rc = tb_stream_cfg_validate(cfg);
	if (rc < 0)
		return tb_error_prepend(rc, "tb_subscriber_open_sources");
	whole = *cfg;
	for (int i = 0; i < n; i++) {
		rc = tb_stream_cfg_validate(&srcs[i]);
		if (rc < 0)
			return tb_error_prepend(rc, "tb_subscriber_open_sources: "
					      "source %d", i + 1);
		if (srcs[i].n_sources || srcs[i].id != cfg->id)
			return tb_error_set(TB_EINVAL, "tb_subscriber_open_sources: "
					  "source '%s' %s", srcs[i].name,
					  srcs[i].n_sources ? "has sources of "
					  "its own" : "does not carry the "
					  "stream's id");
		/* Recovery holds frames of the largest copy's size. */
		if (srcs[i].ring_size > whole.ring_size)
			whole.ring_size = srcs[i].ring_size;
	}
	return open_sub(out, &whole, srcs, n);
}

int tb_subscriber_open_file(tb_subscriber_t **out, const char *path,
			    const char *stream)
{
	tb_stream_cfg_t srcs[TB_SOURCES_MAX];
	const tb_stream_cfg_t *cfg;
	tb_config_t *file;
	int rc;

	*out = NULL;
	rc = tb_config_load(&file, path);
	if (rc < 0)
		return rc;
	cfg = tb_config_stream(file, stream);
	if (!cfg) {
		rc = TB_ENOENT;
	} else if (cfg->n_sources == 0) {
		rc = tb_subscriber_open(out, cfg);
	} else {
		/* tb_config_load checked that each names a stream of it. */
		for (int i = 0; i < cfg->n_sources; i++)
			srcs[i] = *tb_config_stream(file, cfg->sources[i]);
		rc = tb_subscriber_open_sources(out, cfg, srcs, cfg->n_sources);
	}
	tb_config_free(file);
	return rc;
}

int tb_subscriber_close(tb_subscriber_t *s)
{
	if (!s)
		return 0;
	tb_recovering_close(s->rec);
	s->rx->ops->close(s->rx);
	tb_counters_remove_stream(s->ctr);
	free(s);
	return 0;
}

int tb_sub_start_at(tb_subscriber_t *s, uint64_t seq)
{
	if (seq == 0)
		return tb_error_set(TB_EINVAL, "tb_sub_start_at: sequence 0; "
				  "sequences start at 1");
	if (s->seq.delivered > 0 || s->recovering)
		return tb_error_set(TB_ESTATE, "tb_sub_start_at: the subscriber "
				  "has already delivered messages");
	tb_seq_init(&s->seq, seq);
	s->probe = s->rec ? PROBE_LATE_JOIN : PROBE_NONE;
	return 0;
}

/* ------------------------------------------------------------- hot path */

/* After a call into the recovering machine: the hot path's flag follows
 * it, and a TB_DATA_LOSS is remembered for tb_sub_loss. */
static int recovered(tb_subscriber_t *s, int n)
{
	s->recovering = tb_recovering_active(s->rec);
	if (n == TB_DATA_LOSS)
		s->has_loss = 1;
	return n;
}

/* The first idle poll of a late joiner, or of a subscriber its publisher
 * dropped (see tb_recovering_start_probe).  A dropped one knows where it
 * stopped but not what the publisher sent after: that shows only with the
 * publisher's next frame, which never comes if it has finished or died
 * meanwhile, so it asks the services at once.  The epoch is the
 * transport's (the one followed); with none (no publisher, yet or any
 * more), the services' newest. */
static int start_probe(tb_subscriber_t *s, tb_handler_t handler,
		       void *clientd, int limit)
{
	uint64_t epoch = s->rx->ops->epoch(s->rx);
	int why = s->probe;

	s->probe = PROBE_NONE;
	if (why == PROBE_LATE_JOIN && s->seq.delivered > 0)
		return 0;
	return recovered(s, tb_recovering_start_probe(s->rec, epoch, handler,
						      clientd, limit, &s->loss));
}

int tb_sub_poll(tb_subscriber_t *s, tb_handler_t handler, void *clientd,
		int limit)
{
	int n;

	/* Hot path: one indirect call per poll, not per message; no
	 * allocation, lock or system call while live. */
	if (tb_unlikely(s->recovering))
		return recovered(s, tb_recovering_poll(s->rec, handler, clientd,
						       limit, &s->loss));
	/* shm, the one-host latency path, without the indirect call: its
	 * reader inlined here. */
	if (tb_likely(s->rx->ops == &tb_shm_rx_ops))
		n = tb_shm_reader_poll((tb_shm_reader_t *)s->rx, &s->seq,
				       &s->loss, handler, clientd, limit);
	else
		n = s->rx->ops->poll(s->rx, &s->seq, &s->loss, handler,
				     clientd, limit);
	if (tb_likely(n > 0)) {
		tb_counter_add(s->ctr, TB_CTR_DELIVERED, (uint64_t)n);
	} else if (n == 0 || n == TB_NOT_CONNECTED) {
		if (tb_unlikely(s->probe))
			return start_probe(s, handler, clientd, limit);
	} else if (n == TB_NEW_EPOCH) {
		if (s->rec)
			tb_recovering_new_epoch(s->rec);
		s->probe = PROBE_NONE;
	} else if (n == TB_EVICTED) {
		if (s->rec && s->seq.expected)
			s->probe = PROBE_DROPPED;
	} else if (n == TB_LAPPED || n == TB_GAP) {
		tb_counter_inc(s->ctr, n == TB_LAPPED ? TB_CTR_LAPPED : TB_CTR_GAPS);
		if (s->rec) {
			s->probe = PROBE_NONE;
			return recovered(s, tb_recovering_start_gap(
					s->rec, s->loss.first, s->loss.last,
					handler, clientd, limit, &s->loss));
		}
		s->has_loss = 1;
	}
	return n;
}

int tb_sub_loss(const tb_subscriber_t *s, uint64_t *first, uint64_t *last)
{
	if (!s->has_loss)
		return TB_ENOENT;
	*first = s->loss.first;
	*last = s->loss.last;
	return 0;
}

uint64_t tb_sub_epoch(const tb_subscriber_t *s) { return s->rx->ops->epoch(s->rx); }

uint64_t tb_sub_next_seq(const tb_subscriber_t *s) { return s->seq.expected; }

int tb_sub_recovering(const tb_subscriber_t *s) { return s->recovering; }

tb_recovering_t *tb_sub_recovering_of(const tb_subscriber_t *s) { return s->rec; }
