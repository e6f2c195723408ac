/*
 * counters.h - a test's look at its own process's counters, as tb-stat
 * reads them from the counters file.
 */
#ifndef TB_TEST_COUNTERS_H
#define TB_TEST_COUNTERS_H

#include "bus/counters.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <setjmp.h>
#include <cmocka.h>

/* This process's counter `id` of stream `stream_id` in `role`; fails the
 * test when the file has no such stream. */
static inline uint64_t own_counter(uint32_t stream_id, tb_counter_role_t role,
				   tb_counter_id_t id)
{
	tb_counters_proc_t *p = malloc(sizeof(*p));
	uint64_t v = ~0ull;

	assert_non_null(p);
	assert_int_equal(tb_counters_read_file(tb_counters_path(), p), 0);
	for (int i = 0; i < p->n_streams; i++)
		if (p->streams[i].stream_id == stream_id &&
		    p->streams[i].role == role)
			v = p->streams[i].c[id];
	free(p);
	assert_true(v != ~0ull);
	return v;
}

#endif
