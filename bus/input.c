/*
 * input.c - an application's inputs in the counters file (see input.h).
 */
#include "bus/input.h"

#include "bus/error.h"

#include <stdlib.h>

/* tb_input_counter_t to the counter a subscriber's slot uses for it. */
static const tb_counter_id_t input_ctr[TB_INPUT_COUNTERS] = {
	[TB_INPUT_DELIVERED] = TB_CTR_DELIVERED,
	[TB_INPUT_DUPLICATES] = TB_CTR_DUPLICATES,
	[TB_INPUT_GAPS] = TB_CTR_GAPS,
	[TB_INPUT_ERRORS] = TB_CTR_ERRORS,
	[TB_INPUT_MALFORMED] = TB_CTR_MALFORMED,
};

int tb_input_open(tb_input_t **out, uint32_t id, const char *name,
		  const char *kind)
{
	tb_input_t *in;

	if (!out || !name || !kind || !*name)
		return tb_error_set(TB_EINVAL, "tb_input_open: NULL argument or "
				  "empty name");
	*out = NULL;
	in = calloc(1, sizeof(*in));
	if (!in)
		return tb_error_set(TB_ENOMEM, "tb_input_open: out of memory");
	in->ctr = tb_counters_take_stream(&in->own, id, name, TB_ROLE_SUBSCRIBER,
					  kind);
	*out = in;
	return 0;
}

void tb_input_add(tb_input_t *in, tb_input_counter_t c, uint64_t n)
{
	/* Hot path: one relaxed load and store (counters.h). */
	if (tb_likely((unsigned)c < TB_INPUT_COUNTERS))
		tb_counter_add(in->ctr, input_ctr[c], n);
}

uint64_t tb_input_get(const tb_input_t *in, tb_input_counter_t c)
{
	if ((unsigned)c >= TB_INPUT_COUNTERS)
		return 0;
	return tb_counter_get(in->ctr, input_ctr[c]);
}

void tb_input_close(tb_input_t *in)
{
	if (!in)
		return;
	tb_counters_remove_stream(in->ctr);
	free(in);
}
