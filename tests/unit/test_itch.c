/*
 * test_itch.c - unit tests of the ITCH message codec (tools/md/itch.c).
 *
 * Expected wire bytes are built here field by field at the offsets of the
 * public specifications, independently of the encoder; then every message
 * is decoded back, and every malformed case gets its own error code.
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

#include "tools/md/itch.h"

/* ------------------------------------------------------------ helpers */

static void be(uint8_t *p, uint64_t v, int n)
{
	int i;

	for (i = n - 1; i >= 0; i--) {
		p[i] = (uint8_t)v;
		v >>= 8;
	}
}

/* Common header: type, locate 0x0102, tracking 0x0304, timestamp
 * 0x0000A1B2C3D4E5F6 truncated to 48 bits. */
static void hdr(uint8_t *p, uint8_t type)
{
	p[0] = type;
	be(p + 1, 0x0102, 2);
	be(p + 3, 0x0304, 2);
	be(p + 5, 0xA1B2C3D4E5F6ull, 6);
}

static void mhdr(tb_itch_msg_t *m, uint8_t type)
{
	memset(m, 0, sizeof(*m));
	m->type = type;
	m->locate = 0x0102;
	m->tracking = 0x0304;
	m->timestamp = 0xA1B2C3D4E5F6ull;
}

/* Encodes m, compares with `want`, decodes back and compares fields via a
 * second encode.  `want` has room for n + 1 bytes (callers pass 64-byte
 * arrays). */
static void roundtrip(const tb_itch_msg_t *m, const uint8_t *want, size_t n)
{
	uint8_t buf[64], again[64];
	tb_itch_msg_t d;

	assert_int_equal(tb_itch_msg_len(m->type), n);
	assert_int_equal(tb_itch_encode(m, buf, sizeof(buf)), (int)n);
	assert_memory_equal(buf, want, n);
	assert_int_equal(tb_itch_decode(buf, n, &d), 0);
	assert_int_equal(d.type, m->type);
	assert_int_equal(d.locate, 0x0102);
	assert_int_equal(d.tracking, 0x0304);
	assert_int_equal(d.timestamp, 0xA1B2C3D4E5F6ull);
	assert_int_equal(tb_itch_encode(&d, again, sizeof(again)), (int)n);
	assert_memory_equal(again, want, n);
	/* One byte short and one byte long are both wrong lengths. */
	assert_int_equal(tb_itch_decode(buf, n - 1, &d), TB_ITCH_EMSGLEN);
	assert_int_equal(tb_itch_decode(want, n + 1, &d), TB_ITCH_EMSGLEN);
	assert_int_equal(tb_itch_decode(buf, 1, &d), TB_ITCH_EMSGLEN);
	/* Too small a buffer: nothing written. */
	memset(again, 0xEE, sizeof(again));
	assert_int_equal(tb_itch_encode(m, again, n - 1), TB_ITCH_ENOSPACE);
	assert_int_equal(again[0], 0xEE);
}

/* ----------------------------------------------------------- messages */

static void test_system_event(void **state)
{
	uint8_t w[64] = {0};
	tb_itch_msg_t m, d;

	(void)state;
	hdr(w, 'S');
	w[11] = 'O';
	mhdr(&m, 'S');
	m.u.sys.code = 'O';
	roundtrip(&m, w, 12);
	assert_int_equal(tb_itch_decode(w, 12, &d), 0);
	assert_int_equal(d.u.sys.code, 'O');
}

static void test_stock_directory(void **state)
{
	uint8_t w[64] = {0};
	tb_itch_msg_t m, d;

	(void)state;
	hdr(w, 'R');
	memcpy(w + 11, "AAPL    ", 8);
	w[19] = 'Q';
	w[20] = 'N';
	be(w + 21, 100, 4);
	w[25] = 'N';
	w[26] = 'C';
	memcpy(w + 27, "Z ", 2);
	w[29] = 'P';
	w[30] = 'N';
	w[31] = ' ';
	w[32] = '1';
	w[33] = 'N';
	be(w + 34, 0x01020304, 4);
	w[38] = 'N';
	mhdr(&m, 'R');
	memcpy(m.u.dir.stock, "AAPL    ", 8);
	m.u.dir.market_category = 'Q';
	m.u.dir.financial_status = 'N';
	m.u.dir.round_lot = 100;
	m.u.dir.round_lots_only = 'N';
	m.u.dir.issue_class = 'C';
	memcpy(m.u.dir.issue_subtype, "Z ", 2);
	m.u.dir.authenticity = 'P';
	m.u.dir.short_sale_threshold = 'N';
	m.u.dir.ipo_flag = ' ';
	m.u.dir.luld_tier = '1';
	m.u.dir.etp_flag = 'N';
	m.u.dir.etp_leverage = 0x01020304;
	m.u.dir.inverse = 'N';
	roundtrip(&m, w, 39);
	assert_int_equal(tb_itch_decode(w, 39, &d), 0);
	assert_memory_equal(d.u.dir.stock, "AAPL    ", 8);
	assert_int_equal(d.u.dir.round_lot, 100);
	assert_int_equal(d.u.dir.etp_leverage, 0x01020304);
}

static void test_add_order(void **state)
{
	uint8_t w[64] = {0};
	tb_itch_msg_t m, d;

	(void)state;
	hdr(w, 'A');
	be(w + 11, 0x1122334455667788ull, 8);
	w[19] = 'B';
	be(w + 20, 300, 4);
	memcpy(w + 24, "MSFT    ", 8);
	be(w + 32, 1234567, 4);
	mhdr(&m, 'A');
	m.u.add.ref = 0x1122334455667788ull;
	m.u.add.side = 'B';
	m.u.add.shares = 300;
	memcpy(m.u.add.stock, "MSFT    ", 8);
	m.u.add.price = 1234567;
	roundtrip(&m, w, 36);
	assert_int_equal(tb_itch_decode(w, 36, &d), 0);
	assert_int_equal(d.u.add.ref, 0x1122334455667788ull);
	assert_int_equal(d.u.add.side, 'B');
	assert_int_equal(d.u.add.shares, 300);
	assert_int_equal(d.u.add.price, 1234567);
	w[19] = 'X';
	assert_int_equal(tb_itch_decode(w, 36, &d), TB_ITCH_EFIELD);
}

static void test_add_order_mpid(void **state)
{
	uint8_t w[64] = {0};
	tb_itch_msg_t m, d;

	(void)state;
	hdr(w, 'F');
	be(w + 11, 77, 8);
	w[19] = 'S';
	be(w + 20, 5, 4);
	memcpy(w + 24, "IBM     ", 8);
	be(w + 32, 99, 4);
	memcpy(w + 36, "GSCO", 4);
	mhdr(&m, 'F');
	m.u.add.ref = 77;
	m.u.add.side = 'S';
	m.u.add.shares = 5;
	memcpy(m.u.add.stock, "IBM     ", 8);
	m.u.add.price = 99;
	memcpy(m.u.add.mpid, "GSCO", 4);
	roundtrip(&m, w, 40);
	assert_int_equal(tb_itch_decode(w, 40, &d), 0);
	assert_memory_equal(d.u.add.mpid, "GSCO", 4);
	assert_int_equal(d.u.add.side, 'S');
	w[19] = 0;
	assert_int_equal(tb_itch_decode(w, 40, &d), TB_ITCH_EFIELD);
}

static void test_order_executed(void **state)
{
	uint8_t w[64] = {0};
	tb_itch_msg_t m, d;

	(void)state;
	hdr(w, 'E');
	be(w + 11, 42, 8);
	be(w + 19, 17, 4);
	be(w + 23, 0xDEADBEEFCAFEull, 8);
	mhdr(&m, 'E');
	m.u.exec.ref = 42;
	m.u.exec.shares = 17;
	m.u.exec.match = 0xDEADBEEFCAFEull;
	roundtrip(&m, w, 31);
	assert_int_equal(tb_itch_decode(w, 31, &d), 0);
	assert_int_equal(d.u.exec.ref, 42);
	assert_int_equal(d.u.exec.shares, 17);
	assert_int_equal(d.u.exec.match, 0xDEADBEEFCAFEull);
	assert_int_equal(d.u.exec.price, 0);
}

static void test_order_executed_price(void **state)
{
	uint8_t w[64] = {0};
	tb_itch_msg_t m, d;

	(void)state;
	hdr(w, 'C');
	be(w + 11, 43, 8);
	be(w + 19, 18, 4);
	be(w + 23, 9, 8);
	w[31] = 'Y';
	be(w + 32, 1000100, 4);
	mhdr(&m, 'C');
	m.u.exec.ref = 43;
	m.u.exec.shares = 18;
	m.u.exec.match = 9;
	m.u.exec.printable = 'Y';
	m.u.exec.price = 1000100;
	roundtrip(&m, w, 36);
	assert_int_equal(tb_itch_decode(w, 36, &d), 0);
	assert_int_equal(d.u.exec.price, 1000100);
	assert_int_equal(d.u.exec.printable, 'Y');
	w[31] = 'Q';
	assert_int_equal(tb_itch_decode(w, 36, &d), TB_ITCH_EFIELD);
}

static void test_order_cancel(void **state)
{
	uint8_t w[64] = {0};
	tb_itch_msg_t m, d;

	(void)state;
	hdr(w, 'X');
	be(w + 11, 44, 8);
	be(w + 19, 50, 4);
	mhdr(&m, 'X');
	m.u.cancel.ref = 44;
	m.u.cancel.shares = 50;
	roundtrip(&m, w, 23);
	assert_int_equal(tb_itch_decode(w, 23, &d), 0);
	assert_int_equal(d.u.cancel.ref, 44);
	assert_int_equal(d.u.cancel.shares, 50);
}

static void test_order_delete(void **state)
{
	uint8_t w[64] = {0};
	tb_itch_msg_t m, d;

	(void)state;
	hdr(w, 'D');
	be(w + 11, 45, 8);
	mhdr(&m, 'D');
	m.u.del.ref = 45;
	roundtrip(&m, w, 19);
	assert_int_equal(tb_itch_decode(w, 19, &d), 0);
	assert_int_equal(d.u.del.ref, 45);
}

static void test_order_replace(void **state)
{
	uint8_t w[64] = {0};
	tb_itch_msg_t m, d;

	(void)state;
	hdr(w, 'U');
	be(w + 11, 46, 8);
	be(w + 19, 47, 8);
	be(w + 27, 60, 4);
	be(w + 31, 777, 4);
	mhdr(&m, 'U');
	m.u.replace.orig_ref = 46;
	m.u.replace.new_ref = 47;
	m.u.replace.shares = 60;
	m.u.replace.price = 777;
	roundtrip(&m, w, 35);
	assert_int_equal(tb_itch_decode(w, 35, &d), 0);
	assert_int_equal(d.u.replace.orig_ref, 46);
	assert_int_equal(d.u.replace.new_ref, 47);
	assert_int_equal(d.u.replace.shares, 60);
	assert_int_equal(d.u.replace.price, 777);
}

static void test_trade(void **state)
{
	uint8_t w[64] = {0};
	tb_itch_msg_t m, d;

	(void)state;
	hdr(w, 'P');
	be(w + 11, 0, 8);
	w[19] = 'B';
	be(w + 20, 70, 4);
	memcpy(w + 24, "GOOG    ", 8);
	be(w + 32, 888, 4);
	be(w + 36, 123456789, 8);
	mhdr(&m, 'P');
	m.u.trade.side = 'B';
	m.u.trade.shares = 70;
	memcpy(m.u.trade.stock, "GOOG    ", 8);
	m.u.trade.price = 888;
	m.u.trade.match = 123456789;
	roundtrip(&m, w, 44);
	assert_int_equal(tb_itch_decode(w, 44, &d), 0);
	assert_int_equal(d.u.trade.match, 123456789);
	assert_int_equal(d.u.trade.price, 888);
	w[19] = 'b';
	assert_int_equal(tb_itch_decode(w, 44, &d), TB_ITCH_EFIELD);
}

static void test_bad_messages(void **state)
{
	uint8_t w[64] = {0};
	tb_itch_msg_t m;

	(void)state;
	assert_int_equal(tb_itch_decode(w, 0, &m), TB_ITCH_EEMPTY);
	w[0] = 'Z';
	assert_int_equal(tb_itch_decode(w, 20, &m), TB_ITCH_ETYPE);
	w[0] = 0;
	assert_int_equal(tb_itch_decode(w, 1, &m), TB_ITCH_ETYPE);
	assert_int_equal(tb_itch_msg_len('Z'), 0);
	mhdr(&m, 'Z');
	assert_int_equal(tb_itch_encode(&m, w, sizeof(w)), TB_ITCH_ETYPE);
	/* Every known type: a one-byte message is a length error. */
	{
		const char *t = "SRAFECXDUP";

		for (; *t; t++) {
			w[0] = (uint8_t)*t;
			assert_int_equal(tb_itch_decode(w, 1, &m), TB_ITCH_EMSGLEN);
		}
	}
}

static void test_strerror(void **state)
{
	int c;

	(void)state;
	for (c = TB_ITCH_ENOSPACE; c <= TB_ITCH_EEMPTY; c++)
		assert_string_not_equal(tb_itch_strerror(c), "unknown itch error");
	assert_string_equal(tb_itch_strerror(-1), "unknown itch error");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_system_event),
		cmocka_unit_test(test_stock_directory),
		cmocka_unit_test(test_add_order),
		cmocka_unit_test(test_add_order_mpid),
		cmocka_unit_test(test_order_executed),
		cmocka_unit_test(test_order_executed_price),
		cmocka_unit_test(test_order_cancel),
		cmocka_unit_test(test_order_delete),
		cmocka_unit_test(test_order_replace),
		cmocka_unit_test(test_trade),
		cmocka_unit_test(test_bad_messages),
		cmocka_unit_test(test_strerror),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
