/*
 * codec_fuzz.h - what the tests of a wire codec (the control protocol, the
 * recovery protocol) share: little-endian stores written out byte by byte,
 * independent of the codec under test; the check of a refusal and its
 * message; truncation at every byte of a sample of each message type; and
 * the inputs of a seeded random-mutation loop.
 *
 * A codec is described by a codec_fuzz_codec_t: its message types 1..types,
 * the wire size of each, the length of its framing header, and four calls
 * the test supplies (a sample of each type, a decode that must fail and
 * leave its output alone, a decode that may succeed, and the framer).
 */
#ifndef TB_TEST_CODEC_FUZZ_H
#define TB_TEST_CODEC_FUZZ_H

#include "bus/error.h"
#include "tests/common/rng.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <string.h>

static inline void codec_put8(uint8_t *b, size_t off, uint8_t v)
{
	b[off] = v;
}

static inline void codec_put16(uint8_t *b, size_t off, uint16_t v)
{
	for (int i = 0; i < 2; i++)
		b[off + i] = (uint8_t)(v >> (8 * i));
}

static inline void codec_put32(uint8_t *b, size_t off, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		b[off + i] = (uint8_t)(v >> (8 * i));
}

static inline void codec_put64(uint8_t *b, size_t off, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		b[off + i] = (uint8_t)(v >> (8 * i));
}

/* Fails unless `rc` is `code` and tb_errmsg() names `needle`. */
static inline void codec_expect_err(int64_t rc, int code, const char *needle)
{
	if (rc != code)
		fail_msg("got %lld (%s), expected %d; errmsg: %s", (long long)rc,
			 tb_strerror((int)rc), code, tb_errmsg());
	if (!strstr(tb_errmsg(), needle))
		fail_msg("errmsg '%s' does not name '%s'", tb_errmsg(), needle);
}

typedef struct codec_fuzz_codec {
	int types;             /* message types are 1..types */
	const uint32_t *sizes; /* sizes[type]: the wire size of each */
	size_t hdr_len;        /* the framing header, read before the rest */
	size_t cap;            /* the largest message */
	/* Encodes the test's sample of `type`; returns its length. */
	int (*encode_sample)(int type, uint8_t *buf, size_t cap);
	/* Decodes what must be refused, checking the output is left alone;
	 * returns the code. */
	int (*decode_bad)(const uint8_t *buf, size_t len);
	/* Decodes; returns the length taken or a negative code. */
	int (*decode)(const uint8_t *buf, size_t len);
	/* The framer: bytes still needed, 0 when whole. */
	int (*frame_need)(const void *buf, size_t have);
} codec_fuzz_codec_t;

/* The sample of every type, cut at every byte: refused as TB_EPROTO
 * naming "truncated", and the framer asks for exactly what is missing
 * (the header first, then the rest); whole, it decodes and the framer
 * needs nothing more, nor with bytes after it.  `buf` holds c->cap. */
static inline void codec_fuzz_truncation(const codec_fuzz_codec_t *c,
					 uint8_t *buf)
{
	for (int t = 1; t <= c->types; t++) {
		int n = c->encode_sample(t, buf, c->cap);

		assert_int_equal(n, (int)c->sizes[t]);
		for (int have = 0; have < n; have++) {
			int need = have < (int)c->hdr_len ? (int)c->hdr_len - have
							  : n - have;

			codec_expect_err(c->decode_bad(buf, (size_t)have), TB_EPROTO,
					 "truncated");
			assert_int_equal(c->frame_need(buf, (size_t)have), need);
		}
		assert_int_equal(c->frame_need(buf, (size_t)n), 0);
		assert_int_equal(c->frame_need(buf, c->cap), 0);
		assert_int_equal(c->decode(buf, (size_t)n), n);
	}
}

/* One input of a random-mutation round, drawn from `rng`: the encoded
 * message `good` (`n` bytes) copied into `b` (`cap` bytes) and random
 * bytes after it; then one to four bytes changed (a bit flipped or the
 * byte replaced), each mostly within the first `hot` bytes, where the
 * rules are densest, else anywhere in the message (`wrap`: a position in
 * the hot bytes past a short message wraps into it); one time in eight the
 * length is random too (0..cap).  Returns the length to decode. */
static inline size_t codec_fuzz_mutate(uint64_t *rng, const uint8_t *good,
				       size_t n, uint8_t *b, size_t cap,
				       size_t hot, int wrap)
{
	int flips = 1 + (int)(rng_xorshift64s(rng) % 4);
	size_t len = n;

	memcpy(b, good, n);
	for (size_t i = n; i < cap; i++)
		b[i] = (uint8_t)rng_xorshift64s(rng);
	for (int f = 0; f < flips; f++) {
		size_t at = rng_xorshift64s(rng) % 2 ? rng_xorshift64s(rng) % hot
						     : rng_xorshift64s(rng) % n;

		if (wrap && at >= n)
			at %= n;
		if (rng_xorshift64s(rng) % 2)
			b[at] ^= (uint8_t)(1u << (rng_xorshift64s(rng) % 8));
		else
			b[at] = (uint8_t)rng_xorshift64s(rng);
	}
	if (rng_xorshift64s(rng) % 8 == 0)
		len = rng_xorshift64s(rng) % (cap + 1);
	return len;
}

#endif
