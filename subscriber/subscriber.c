/*
 * subscriber.c - the subscribing end of a stream.
 *
 * A subscriber polls its transport and delivers frames in sequence order.
 * Loss is never silent: a lap or a gap stops delivery at the point of loss,
 * the poll returns TB_LAPPED or TB_GAP once, tb_sub_loss() names the range,
 * and the next poll goes on with the frame after it.
 */
#include "tickbus.h"

#include "counters.h"
#include "error.h"
#include "seq.h"
#include "transport.h"

#include <stdlib.h>

struct tb_subscriber {
	tb_rx_t *rx;
	tb_seq_t seq;
	tb_seq_range_t loss;
	int has_loss;
	tb_counter_slot_t *ctr;    /* in the counters file, or `own_ctr` */
	tb_stream_cfg_t cfg;
	tb_counter_slot_t own_ctr;
};

int tb_subscriber_open(tb_subscriber_t **out, const tb_stream_cfg_t *cfg)
{
	const tb_rx_ops_t *ops;
	tb_subscriber_t *s;
	int rc;

	*out = NULL;
	rc = tb_stream_cfg_validate(cfg);
	if (rc < 0)
		return tb_err_prepend(rc, "tb_subscriber_open");
	ops = tb_rx_ops_for(cfg->transport);
	if (!ops)
		return tb_err_prepend(TB_ENOTSUP, "tb_subscriber_open: stream '%s'",
				      cfg->name);
	s = calloc(1, sizeof(*s));
	if (!s)
		return tb_err_set(TB_ENOMEM, "tb_subscriber_open: out of memory");
	s->cfg = *cfg;
	tb_seq_init(&s->seq, 0);
	s->ctr = tb_counters_add_stream(cfg->id, cfg->name, TB_ROLE_SUBSCRIBER,
					ops->name);
	if (!s->ctr) {
		tb_warn("stream '%s': counters not shared (%s)", cfg->name, tb_errmsg());
		s->ctr = &s->own_ctr;
	}
	if (cfg->subscriber_core >= 0 && (rc = tb_thread_pin(cfg->subscriber_core)) < 0)
		goto fail;
	rc = ops->open(&s->rx, cfg);
	if (rc < 0)
		goto fail;
	s->rx->ctr = s->ctr;
	*out = s;
	return 0;
fail:
	if (s->ctr != &s->own_ctr)
		tb_counters_remove_stream(s->ctr);
	free(s);
	return tb_err_prepend(rc, "tb_subscriber_open: stream '%s'", cfg->name);
}

int tb_subscriber_open_file(tb_subscriber_t **out, const char *path,
			    const char *stream)
{
	const tb_stream_cfg_t *cfg;
	tb_config_t *file;
	int rc;

	*out = NULL;
	rc = tb_config_load(&file, path);
	if (rc < 0)
		return rc;
	cfg = tb_config_stream(file, stream);
	rc = cfg ? tb_subscriber_open(out, cfg) : TB_ENOENT;
	tb_config_free(file);
	return rc;
}

int tb_subscriber_close(tb_subscriber_t *s)
{
	if (!s)
		return 0;
	s->rx->ops->close(s->rx);
	if (s->ctr != &s->own_ctr)
		tb_counters_remove_stream(s->ctr);
	free(s);
	return 0;
}

int tb_sub_poll(tb_subscriber_t *s, tb_handler_t handler, void *clientd,
		int limit)
{
	/* Hot path: one indirect call per poll, not per message. */
	int n = s->rx->ops->poll(s->rx, &s->seq, &s->loss, handler, clientd, limit);

	if (tb_likely(n > 0)) {
		tb_counter_add(s->ctr, TB_CTR_DELIVERED, (uint64_t)n);
	} else if (n == TB_LAPPED || n == TB_GAP) {
		s->has_loss = 1;
		tb_counter_inc(s->ctr, n == TB_LAPPED ? TB_CTR_LAPPED : TB_CTR_GAPS);
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
