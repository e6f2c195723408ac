/*
 * fuzz_util.h - what the libFuzzer targets share: reading a structured input
 * (numbers, then length-prefixed pieces) from the fuzzer's bytes, copying a
 * piece into a buffer of exactly its size (so that ASan sees a read past
 * it, and the piece is aligned as a datagram or a ring would be), and the
 * check that a message is safe to print.
 *
 * Structured inputs read past their end as zeros: every input means
 * something, so the fuzzer never wastes a run on one that is refused
 * before the code under test is reached.
 */
#ifndef TB_FUZZ_UTIL_H
#define TB_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* tb_errmsg()'s buffer (bus/error.c): a message is cut at 511 bytes. */
#define FUZZ_ERRMSG_MAX 512

typedef struct fuzz_in {
	const uint8_t *p;
	size_t left;
} fuzz_in_t;

static inline void fuzz_in_init(fuzz_in_t *in, const uint8_t *data, size_t size)
{
	in->p = data;
	in->left = size;
}

/* The next `n` bytes, little-endian, as a number; zeros past the end. */
static inline uint64_t fuzz_num(fuzz_in_t *in, size_t n)
{
	uint64_t v = 0;

	for (size_t i = 0; i < n; i++) {
		if (in->left) {
			v |= (uint64_t)*in->p << (8 * i);
			in->p++;
			in->left--;
		}
	}
	return v;
}

static inline uint8_t fuzz_u8(fuzz_in_t *in) { return (uint8_t)fuzz_num(in, 1); }
static inline uint16_t fuzz_u16(fuzz_in_t *in) { return (uint16_t)fuzz_num(in, 2); }
static inline uint32_t fuzz_u32(fuzz_in_t *in) { return (uint32_t)fuzz_num(in, 4); }
static inline uint64_t fuzz_u64(fuzz_in_t *in) { return fuzz_num(in, 8); }

/* Up to `n` bytes (fewer at the end of the input); *len gets how many. */
static inline const uint8_t *fuzz_bytes(fuzz_in_t *in, size_t n, size_t *len)
{
	const uint8_t *p = in->p;

	if (n > in->left)
		n = in->left;
	in->p += n;
	in->left -= n;
	*len = n;
	return p;
}

/* The next piece: a 16-bit length, then that many bytes (fewer at the
 * end).  Returns NULL when the input is used up. */
static inline const uint8_t *fuzz_piece(fuzz_in_t *in, size_t *len)
{
	size_t want;

	if (in->left == 0)
		return NULL;
	want = fuzz_u16(in);
	return fuzz_bytes(in, want, len);
}

/* A malloc'd copy of p[0..n) in a block of exactly n bytes (one byte for
 * n = 0, never read); malloc's alignment is what a receive buffer has. */
static inline uint8_t *fuzz_copy(const void *p, size_t n)
{
	uint8_t *b = malloc(n ? n : 1);

	if (!b)
		abort();
	if (n)
		memcpy(b, p, n);
	else
		b[0] = 0;
	return b;
}

/*
 * 1 if `s` can go to a terminal as it is: no control character, no DEL,
 * no C1 control (UTF-8 c2 80..c2 9f), no bidirectional override or
 * isolate, and only well-formed UTF-8, except for one character cut by
 * the end of a message that fills tb_errmsg()'s buffer.
 */
static inline int fuzz_text_safe(const char *s)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t n = strlen(s), i = 0;

	while (i < n) {
		uint32_t cp;
		size_t len;

		if (u[i] < 0x20 || u[i] == 0x7f)
			return 0;
		if (u[i] < 0x80) {
			i++;
			continue;
		}
		if (u[i] < 0xc2 || u[i] > 0xf4)
			return 0;
		len = u[i] < 0xe0 ? 2 : u[i] < 0xf0 ? 3 : 4;
		if (i + len > n)
			return n == FUZZ_ERRMSG_MAX - 1; /* cut at the end */
		cp = u[i] & (0x7f >> len);
		for (size_t k = 1; k < len; k++) {
			if ((u[i + k] & 0xc0) != 0x80)
				return 0;
			cp = cp << 6 | (u[i + k] & 0x3f);
		}
		if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
		    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) ||
		    cp <= 0x9f || (cp >= 0x202a && cp <= 0x202e) ||
		    (cp >= 0x2066 && cp <= 0x2069))
			return 0;
		i += len;
	}
	return 1;
}

#endif
