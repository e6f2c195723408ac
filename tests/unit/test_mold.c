/*
 * test_mold.c - unit tests of the MoldUDP64 codec (tools/md/mold.c).
 *
 * Expected packets are built here field by field at the offsets of the
 * public specification, independently of the builder; then every packet is
 * parsed back, and every malformed case gets its own error code.
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

#include "tools/md/mold.h"

/* Writes the low `n` bytes of `v` big-endian at `p`. */
static void be(uint8_t *p, uint64_t v, int n)
{
	while (n-- > 0) {
		p[n] = (uint8_t)v;
		v >>= 8;
	}
}

static void test_mold_build_parse(void **state)
{
	uint8_t pkt[256], want[256] = {0};
	tb_mold_builder_t b;
	tb_mold_pkt_t p;
	const uint8_t *msg;
	size_t off = 0, len, n;
	int i;

	(void)state;
	assert_int_equal(tb_mold_build_begin(&b, pkt, sizeof(pkt), "SESSION001", 1000), 0);
	assert_int_equal(tb_mold_build_add(&b, "abc", 3), 0);
	assert_int_equal(tb_mold_build_add(&b, "", 0), 0);
	assert_int_equal(tb_mold_build_add(&b, "hello", 5), 0);
	n = tb_mold_build_end(&b);
	assert_int_equal(n, 20 + 2 + 3 + 2 + 0 + 2 + 5);
	memcpy(want, "SESSION001", 10);
	be(want + 10, 1000, 8);
	be(want + 18, 3, 2);
	be(want + 20, 3, 2);
	memcpy(want + 22, "abc", 3);
	be(want + 25, 0, 2);
	be(want + 27, 5, 2);
	memcpy(want + 29, "hello", 5);
	assert_memory_equal(pkt, want, n);

	assert_int_equal(tb_mold_parse(pkt, n, &p), 0);
	assert_memory_equal(p.session, "SESSION001", 10);
	assert_int_equal(p.seq, 1000);
	assert_int_equal(p.count, 3);
	for (i = 0; tb_mold_next(&p, &off, &msg, &len); i++) {
		if (i == 0)
			assert_true(len == 3 && memcmp(msg, "abc", 3) == 0);
		if (i == 1)
			assert_int_equal(len, 0);
		if (i == 2)
			assert_true(len == 5 && memcmp(msg, "hello", 5) == 0);
	}
	assert_int_equal(i, 3);
}

static void test_mold_builder_full(void **state)
{
	uint8_t pkt[30];
	tb_mold_builder_t b;

	(void)state;
	assert_int_equal(tb_mold_build_begin(&b, pkt, 19, "SESSION001", 1),
			 TB_MOLD_ENOSPACE);
	assert_int_equal(tb_mold_build_begin(&b, pkt, sizeof(pkt), "SESSION001", 1), 0);
	assert_int_equal(tb_mold_build_add(&b, "12345678", 8), 0); /* 30 */
	assert_int_equal(tb_mold_build_add(&b, "", 0), TB_MOLD_ENOSPACE);
	assert_int_equal(b.count, 1);
	assert_int_equal(tb_mold_build_end(&b), 30);
}

static void test_mold_ctl(void **state)
{
	uint8_t pkt[64];
	tb_mold_pkt_t p;

	(void)state;
	assert_int_equal(tb_mold_write_ctl(pkt, "SESSION001", 55, 0), 20);
	assert_int_equal(tb_mold_parse(pkt, 20, &p), 0);
	assert_int_equal(p.count, 0);
	assert_int_equal(p.seq, 55);
	assert_int_equal(p.blocks_len, 0);
	tb_mold_write_ctl(pkt, "SESSION001", 56, TB_MOLD_COUNT_END);
	assert_int_equal(tb_mold_parse(pkt, 20, &p), 0);
	assert_int_equal(p.count, 0xFFFF);
	/* A heartbeat or end with data behind it. */
	assert_int_equal(tb_mold_parse(pkt, 22, &p), TB_MOLD_ECTLLEN);
	tb_mold_write_ctl(pkt, "SESSION001", 56, 0);
	assert_int_equal(tb_mold_parse(pkt, 21, &p), TB_MOLD_ECTLLEN);
}

static void test_mold_malformed(void **state)
{
	uint8_t pkt[64];
	tb_mold_pkt_t p;
	tb_mold_builder_t b;
	size_t n;

	(void)state;
	memset(pkt, 0, sizeof(pkt));
	assert_int_equal(tb_mold_parse(pkt, 0, &p), TB_MOLD_ESHORT);
	assert_int_equal(tb_mold_parse(pkt, 19, &p), TB_MOLD_ESHORT);
	/* Sequence 0. */
	tb_mold_write_ctl(pkt, "SESSION001", 0, 0);
	assert_int_equal(tb_mold_parse(pkt, 20, &p), TB_MOLD_ESEQ);

	tb_mold_build_begin(&b, pkt, sizeof(pkt), "SESSION001", 7);
	tb_mold_build_add(&b, "abcd", 4);
	tb_mold_build_add(&b, "ef", 2);
	n = tb_mold_build_end(&b);
	assert_int_equal(tb_mold_parse(pkt, n, &p), 0);
	/* Truncated inside a block, and inside a length prefix. */
	assert_int_equal(tb_mold_parse(pkt, n - 1, &p), TB_MOLD_EBLOCK);
	assert_int_equal(tb_mold_parse(pkt, 27, &p), TB_MOLD_EBLOCK);
	/* Trailing bytes after the counted blocks. */
	assert_int_equal(tb_mold_parse(pkt, n + 1, &p), TB_MOLD_ECOUNT);
	/* Count says 1: the second block is left over. */
	be(pkt + 18, 1, 2);
	assert_int_equal(tb_mold_parse(pkt, n, &p), TB_MOLD_ECOUNT);
	/* Count says 3: a block is missing. */
	be(pkt + 18, 3, 2);
	assert_int_equal(tb_mold_parse(pkt, n, &p), TB_MOLD_EBLOCK);
	/* A block length far past the end. */
	be(pkt + 18, 2, 2);
	be(pkt + 20, 0xFFFF, 2);
	assert_int_equal(tb_mold_parse(pkt, n, &p), TB_MOLD_EBLOCK);
	/* seq + count overflows. */
	be(pkt + 20, 4, 2);
	be(pkt + 10, UINT64_MAX, 8);
	assert_int_equal(tb_mold_parse(pkt, n, &p), TB_MOLD_ESEQ);
}

static void test_mold_request(void **state)
{
	uint8_t req[32], want[20];
	tb_mold_req_t r;

	(void)state;
	assert_int_equal(tb_mold_req_encode(req, "SESSION001", 12345, 40), 20);
	memcpy(want, "SESSION001", 10);
	be(want + 10, 12345, 8);
	be(want + 18, 40, 2);
	assert_memory_equal(req, want, 20);
	assert_int_equal(tb_mold_req_decode(req, 20, &r), 0);
	assert_memory_equal(r.session, "SESSION001", 10);
	assert_int_equal(r.seq, 12345);
	assert_int_equal(r.count, 40);

	assert_int_equal(tb_mold_req_decode(req, 19, &r), TB_MOLD_EREQLEN);
	assert_int_equal(tb_mold_req_decode(req, 21, &r), TB_MOLD_EREQLEN);
	assert_int_equal(tb_mold_req_decode(req, 0, &r), TB_MOLD_EREQLEN);
	tb_mold_req_encode(req, "SESSION001", 12345, 0);
	assert_int_equal(tb_mold_req_decode(req, 20, &r), TB_MOLD_EREQCOUNT);
	tb_mold_req_encode(req, "SESSION001", 12345, 0xFFFF);
	assert_int_equal(tb_mold_req_decode(req, 20, &r), TB_MOLD_EREQCOUNT);
	tb_mold_req_encode(req, "SESSION001", 0, 1);
	assert_int_equal(tb_mold_req_decode(req, 20, &r), TB_MOLD_ESEQ);
	tb_mold_req_encode(req, "SESSION001", UINT64_MAX, 2);
	assert_int_equal(tb_mold_req_decode(req, 20, &r), TB_MOLD_ESEQ);
}

static void test_strerror(void **state)
{
	int c;

	(void)state;
	for (c = TB_MOLD_ENOSPACE; c <= TB_MOLD_ESHORT; c++)
		assert_string_not_equal(tb_mold_strerror(c), "unknown mold error");
	assert_string_equal(tb_mold_strerror(-1), "unknown mold error");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mold_build_parse),
		cmocka_unit_test(test_mold_builder_full),
		cmocka_unit_test(test_mold_ctl),
		cmocka_unit_test(test_mold_malformed),
		cmocka_unit_test(test_mold_request),
		cmocka_unit_test(test_strerror),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
