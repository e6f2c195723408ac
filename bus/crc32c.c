/*
 * crc32c.c - CRC32C (Castagnoli), the checksum of the retransmit store's
 * records, headers and index entries.
 *
 * Two implementations of one function: the SSE4.2 crc32 instruction, eight
 * bytes per instruction, where the CPU has it; else slicing-by-8 over eight
 * 256-entry tables built once (pthread_once), eight lookups per eight
 * bytes.  Both take the register form of the CRC (inverted on the way in
 * and out by the public wrappers), so results chain: tb_crc32c(tb_crc32c(0,
 * a, n), b, m) is the CRC of a followed by b.  The CPU check is
 * __builtin_cpu_supports, which reads a value the runtime filled at start-up,
 * so the dispatch costs a load and a predictable branch.
 *
 * zlib's crc32 uses the IEEE polynomial, not Castagnoli's, and has no
 * hardware path for this one; hence this file.
 */
#include "bus/crc32c.h"

#include "bus/barrier.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

/* Reflected Castagnoli polynomial. */
#define CRC32C_POLY 0x82f63b78u

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_table_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;

		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (CRC32C_POLY & (0u - (c & 1)));
		crc_table[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^
					  crc_table[0][crc_table[t - 1][i] & 0xff];
}

/* Slicing by 8: eight table lookups per 8 bytes. */
static uint32_t crc_sw(uint32_t c, const uint8_t *p, size_t n)
{
	pthread_once(&crc_once, crc_table_init);
	for (; n && ((uintptr_t)p & 7); n--)
		c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
	for (; n >= 8; n -= 8, p += 8) {
		uint64_t v;

		memcpy(&v, p, 8);
		v ^= c;
		c = crc_table[7][v & 0xff] ^ crc_table[6][(v >> 8) & 0xff] ^
		    crc_table[5][(v >> 16) & 0xff] ^ crc_table[4][(v >> 24) & 0xff] ^
		    crc_table[3][(v >> 32) & 0xff] ^ crc_table[2][(v >> 40) & 0xff] ^
		    crc_table[1][(v >> 48) & 0xff] ^ crc_table[0][v >> 56];
	}
	while (n--)
		c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
	return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2")))
static uint32_t crc_hw(uint32_t c, const uint8_t *p, size_t n)
{
	uint64_t c64;

	for (; n && ((uintptr_t)p & 7); n--)
		c = __builtin_ia32_crc32qi(c, *p++);
	c64 = c;
	for (; n >= 8; n -= 8, p += 8) {
		uint64_t v;

		memcpy(&v, p, 8);
		c64 = __builtin_ia32_crc32di(c64, v);
	}
	c = (uint32_t)c64;
	while (n--)
		c = __builtin_ia32_crc32qi(c, *p++);
	return c;
}

int tb_crc32c_hw_available(void)
{
	return __builtin_cpu_supports("sse4.2") != 0;
}
#else
static uint32_t crc_hw(uint32_t c, const uint8_t *p, size_t n)
{
	return crc_sw(c, p, n);
}

int tb_crc32c_hw_available(void) { return 0; }
#endif

uint32_t tb_crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
	return ~crc_sw(~crc, buf, len);
}

uint32_t tb_crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
	if (!tb_crc32c_hw_available())
		return tb_crc32c_sw(crc, buf, len);
	return ~crc_hw(~crc, buf, len);
}

uint32_t tb_crc32c(uint32_t crc, const void *buf, size_t len)
{
	if (tb_likely(tb_crc32c_hw_available()))
		return ~crc_hw(~crc, buf, len);
	return ~crc_sw(~crc, buf, len);
}
