/*
 * hop.c - set-up, teardown and reporting of the per-hop recorder; the
 * stamping and recording are inline in hop.h.
 */
#include <tickbus/hop.h>

#include "bus/error.h"

#include <inttypes.h>
#include <stdlib.h>

static const char *const hop_names[TB_HOP_COUNT] = {
	"feed_receive", "publish", "sub_receive",
	"handler_done", "decision", "order_sent",
};

const char *tb_hop_name(int hop)
{
	return hop >= 0 && hop < TB_HOP_COUNT ? hop_names[hop] : "?";
}

int tb_hop_recorder_init(tb_hop_recorder_t **rec, int64_t highest_ns,
			 int significant_digits)
{
	tb_hop_recorder_t *r;
	int rc = 0;

	if (!rec)
		return tb_error_set(TB_EINVAL, "hop_recorder_init: NULL result "
				  "pointer");
	*rec = NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return tb_error_set(TB_ENOMEM, "hop_recorder_init: out of memory");
	for (int i = 0; i < TB_HOP_COUNT && !rc; i++)
		rc = tb_hist_init(&r->hop[i], 1, highest_ns,
				  significant_digits);
	if (!rc)
		rc = tb_hist_init(&r->total, 1, highest_ns, significant_digits);
	if (rc) {
		tb_hop_recorder_free(r);
		return tb_error_prepend(rc, "hop_recorder_init");
	}
	*rec = r;
	return 0;
}

void tb_hop_recorder_free(tb_hop_recorder_t *rec)
{
	if (!rec)
		return;
	for (int i = 0; i < TB_HOP_COUNT; i++)
		tb_hist_free(rec->hop[i]);
	tb_hist_free(rec->total);
	free(rec);
}

void tb_hop_recorder_reset(tb_hop_recorder_t *rec)
{
	for (int i = 0; i < TB_HOP_COUNT; i++)
		tb_hist_reset(rec->hop[i]);
	tb_hist_reset(rec->total);
}

const tb_hist_t *tb_hop_hist(const tb_hop_recorder_t *rec, int hop)
{
	return rec && hop >= 0 && hop < TB_HOP_COUNT ? rec->hop[hop] : NULL;
}

const tb_hist_t *tb_hop_total(const tb_hop_recorder_t *rec)
{
	return rec ? rec->total : NULL;
}

static int put(FILE *out, const char *name, const tb_hist_t *h)
{
	return fprintf(out, "hop %s count=%" PRId64 " p50=%" PRId64
		       " p90=%" PRId64 " p99=%" PRId64 " p99.9=%" PRId64
		       " max=%" PRId64 " negative=%" PRId64 "\n", name,
		       tb_hist_count(h), tb_hist_value_at_percentile(h, 50),
		       tb_hist_value_at_percentile(h, 90),
		       tb_hist_value_at_percentile(h, 99),
		       tb_hist_value_at_percentile(h, 99.9), tb_hist_max(h),
		       tb_hist_underflow(h)) < 0 ? -1 : 0;
}

int tb_hop_write_summary(const tb_hop_recorder_t *rec, FILE *out)
{
	if (!rec || !out)
		return tb_error_set(TB_EINVAL, "hop_write_summary: NULL argument");
	for (int i = 0; i < TB_HOP_COUNT; i++)
		if (tb_hist_count(rec->hop[i]) > 0 &&
		    put(out, hop_names[i], rec->hop[i]) < 0)
			return tb_error_set(TB_EIO, "hop_write_summary: write "
					  "failed");
	if (put(out, "total", rec->total) < 0)
		return tb_error_set(TB_EIO, "hop_write_summary: write failed");
	return 0;
}
