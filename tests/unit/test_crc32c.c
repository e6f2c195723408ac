/*
 * test_crc32c.c - CRC32C (bus/crc32c.c): known-answer vectors (the check
 * value of "123456789", RFC 3720's iSCSI vectors), the hardware and table
 * paths agreeing at every alignment and many lengths, and chaining.
 */
#include "bus/crc32c.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void crc32c_known_vectors_and_both_paths_agree(void **state)
{
	uint8_t b[1100];
	int i;

	(void)state;
	assert_int_equal(tb_crc32c(0, "123456789", 9), 0xE3069283u);
	assert_int_equal(tb_crc32c_sw(0, "123456789", 9), 0xE3069283u);
	assert_int_equal(tb_crc32c_hw(0, "123456789", 9), 0xE3069283u);
	/* RFC 3720 (iSCSI) B.4 vectors. */
	memset(b, 0, 32);
	assert_int_equal(tb_crc32c_sw(0, b, 32), 0x8A9136AAu);
	assert_int_equal(tb_crc32c_hw(0, b, 32), 0x8A9136AAu);
	memset(b, 0xff, 32);
	assert_int_equal(tb_crc32c_sw(0, b, 32), 0x62A8AB43u);
	assert_int_equal(tb_crc32c_hw(0, b, 32), 0x62A8AB43u);
	for (i = 0; i < 32; i++)
		b[i] = (uint8_t)i;
	assert_int_equal(tb_crc32c_sw(0, b, 32), 0x46DD794Eu);
	assert_int_equal(tb_crc32c_hw(0, b, 32), 0x46DD794Eu);
	assert_int_equal(tb_crc32c(0, b, 0), 0);

	srand(42);
	for (i = 0; i < (int)sizeof(b); i++)
		b[i] = (uint8_t)rand();
	for (size_t off = 0; off < 8; off++)
		for (size_t len = 0; len + off <= 1090; len += 1 + len / 16) {
			uint32_t sw = tb_crc32c_sw(0, b + off, len);
			size_t half = len / 3;

			assert_int_equal(tb_crc32c_hw(0, b + off, len), sw);
			assert_int_equal(tb_crc32c(0, b + off, len), sw);
			/* Chaining equals one pass. */
			assert_int_equal(tb_crc32c_sw(tb_crc32c_hw(0, b + off, half),
						      b + off + half, len - half), sw);
		}
	if (!tb_crc32c_hw_available())
		print_message("note: no SSE4.2 here; hw path checked as fallback\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(crc32c_known_vectors_and_both_paths_agree),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
