/*
 * expect.h - what the scenario tests check of a tb-subscribe summary line.
 */
#ifndef TB_TEST_EXPECT_H
#define TB_TEST_EXPECT_H

#include "tests/common/proc.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

/* `out` (tb-subscribe's output) delivered exactly 1..n, in order, with
 * the publisher's checksum, nothing lost or given up. */
static inline void expect_complete(const char *out, uint64_t n, uint64_t checksum)
{
	print_message("%s", out);
	assert_int_equal(proc_field_u64(out, "delivered"), n);
	assert_int_equal(proc_field_u64(out, "first"), 1);
	assert_int_equal(proc_field_u64(out, "last"), n);
	assert_int_equal(proc_field_u64(out, "order_errors"), 0);
	assert_int_equal(proc_field_u64(out, "bad_payload"), 0);
	assert_int_equal(proc_field_u64(out, "lost"), 0);
	assert_int_equal(proc_field_u64(out, "data_losses"), 0);
	assert_int_equal(proc_field_u64(out, "checksum"), checksum);
}

/* Waits up to `ms` for tb-subscribe `p` to exit 0 having delivered 1..n
 * complete (expect_complete); returns its output (malloc'd) for any
 * further check. */
static inline char *expect_sub_complete(proc_t *p, uint64_t n,
					uint64_t checksum, uint64_t ms)
{
	char *out;

	assert_int_equal(proc_wait(p, ms), 0);
	out = proc_output(p);
	expect_complete(out, n, checksum);
	return out;
}

/* `out` (tb-subscribe's output) was lapped at least once and told of
 * every loss: each of the n sequences delivered or reported lost, in
 * order, nothing corrupt. */
static inline void expect_lapped(const char *out, uint64_t n)
{
	uint64_t lost = proc_field_u64(out, "lost");

	print_message("%s", out);
	assert_true(proc_field_u64(out, "laps") >= 1);
	assert_true(lost > 0);
	assert_int_equal(proc_field_u64(out, "delivered") + lost, n);
	assert_int_equal(proc_field_u64(out, "order_errors"), 0);
	assert_int_equal(proc_field_u64(out, "bad_payload"), 0);
}

#endif
