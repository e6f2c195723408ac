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

#endif
