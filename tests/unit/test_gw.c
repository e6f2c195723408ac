/*
 * test_gw.c - unit tests of the order-gateway wire format
 * (tools/md/gw.h): the byte layout at the documented offsets, and
 * one refusal per malformed kind.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>
#include <string.h>

#include "tools/md/gw.h"

static void le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++, v >>= 8)
		p[i] = (uint8_t)v;
}

/* A valid order built byte by byte at the documented offsets. */
static void order_bytes(uint8_t w[48])
{
	memset(w, 0, 48);
	le(w + 0, TB_GW_MAGIC, 4);
	le(w + 4, 1, 2);
	le(w + 6, 1, 2);
	le(w + 8, 0x0102030405060708ull, 8);
	le(w + 16, 1111, 8);
	le(w + 24, 1234500, 8);
	le(w + 32, 300, 4);
	le(w + 36, 7, 4);
	w[40] = 'B';
}

static void test_order_layout(void **state)
{
	uint8_t w[48];
	tb_gw_order_t o, built;

	(void)state;
	order_bytes(w);
	assert_memory_equal(w, "BTGW", 4);
	assert_int_equal(tb_gw_order_check(w, sizeof(w), &o), 0);
	assert_int_equal(o.order_id, 0x0102030405060708ull);
	assert_int_equal(o.sent_ns, 1111);
	assert_int_equal(o.price, 1234500);
	assert_int_equal(o.qty, 300);
	assert_int_equal(o.instrument, 7);
	assert_int_equal(o.side, 'B');
	tb_gw_order_init(&built);
	built.order_id = 0x0102030405060708ull;
	built.sent_ns = 1111;
	built.price = 1234500;
	built.qty = 300;
	built.instrument = 7;
	built.side = 'B';
	assert_memory_equal(&built, w, sizeof(w));
}

static void test_order_malformed(void **state)
{
	uint8_t w[64];
	tb_gw_order_t o;

	(void)state;
	order_bytes(w);
	assert_int_equal(tb_gw_order_check(w, 47, &o), TB_GW_ESIZE);
	assert_int_equal(tb_gw_order_check(w, 49, &o), TB_GW_ESIZE);
	assert_int_equal(tb_gw_order_check(w, 0, &o), TB_GW_ESIZE);
	w[0] ^= 1;
	assert_int_equal(tb_gw_order_check(w, 48, &o), TB_GW_EMAGIC);
	order_bytes(w);
	w[4] = 2;
	assert_int_equal(tb_gw_order_check(w, 48, &o), TB_GW_EVERSION);
	order_bytes(w);
	w[6] = 2;
	assert_int_equal(tb_gw_order_check(w, 48, &o), TB_GW_ETYPE);
	order_bytes(w);
	le(w + 32, 0, 4);
	assert_int_equal(tb_gw_order_check(w, 48, &o), TB_GW_EFIELD);
	order_bytes(w);
	w[40] = 'X';
	assert_int_equal(tb_gw_order_check(w, 48, &o), TB_GW_EFIELD);
	order_bytes(w);
	w[47] = 1;
	assert_int_equal(tb_gw_order_check(w, 48, &o), TB_GW_EFIELD);
}

static void test_ack(void **state)
{
	uint8_t w[40];
	tb_gw_ack_t a;

	(void)state;
	memset(w, 0, sizeof(w));
	le(w + 0, TB_GW_MAGIC, 4);
	le(w + 4, 1, 2);
	le(w + 6, 2, 2);
	le(w + 8, 99, 8);
	le(w + 16, 5, 8);
	le(w + 24, 77777, 8);
	assert_int_equal(tb_gw_ack_check(w, 40, &a), 0);
	assert_int_equal(a.order_id, 99);
	assert_int_equal(a.sent_ns, 5);
	assert_int_equal(a.arrival_ns, 77777);
	assert_int_equal(a.status, 0);
	assert_int_equal(tb_gw_ack_check(w, 39, &a), TB_GW_ESIZE);
	w[6] = 1;
	assert_int_equal(tb_gw_ack_check(w, 40, &a), TB_GW_ETYPE);
	w[6] = 2;
	w[5] = 1;
	assert_int_equal(tb_gw_ack_check(w, 40, &a), TB_GW_EVERSION);
	w[5] = 0;
	w[39] = 1;
	assert_int_equal(tb_gw_ack_check(w, 40, &a), TB_GW_EFIELD);
	w[39] = 0;
	w[3] = 0;
	assert_int_equal(tb_gw_ack_check(w, 40, &a), TB_GW_EMAGIC);
	for (int c = TB_GW_EFIELD; c <= TB_GW_ESIZE; c++)
		assert_string_not_equal(tb_gw_strerror(c), "unknown gateway error");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order_layout),
		cmocka_unit_test(test_order_malformed),
		cmocka_unit_test(test_ack),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
