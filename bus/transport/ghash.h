/*
 * ghash.h - GHASH, the universal hash inside GCM and GMAC (NIST SP 800-38D,
 * section 6.4), computed with carry-less multiplication: what makes a
 * datagram's tag (dgram_auth.h) cheap for a full datagram.
 *
 * The mathematics.  A 16-byte block X is an element of GF(2^128) =
 * GF(2)[x] / g, g = x^128 + x^7 + x^2 + x + 1, in GCM's bit order: the
 * most significant bit of byte 0 is the coefficient of x^0, the least
 * significant bit of byte 15 that of x^127.  With H = E_K(0^128),
 *
 *   GHASH_H(X_1 .. X_n) = X_1 H^n + X_2 H^(n-1) + ... + X_n H
 *
 * (Horner's rule: Y_i = (Y_(i-1) + X_i) H, Y_0 = 0), where the blocks are
 * the associated data zero-padded to whole blocks, then the length block
 * [bits of A]_64 [bits of C]_64 (C is empty here: GMAC).
 *
 * The representation.  A block byte-reversed and read as a 128-bit
 * little-endian integer has the coefficient of x^k at bit 127 - k: the
 * polynomial reflected.  PCLMULQDQ multiplies 64-bit halves as
 * polynomials over GF(2) in the integer's own order, so four of them give
 * the 255-bit product of two reflected operands, which holds the
 * coefficient of x^k of the (unreduced) product c at bit 254 - k.
 * Shifted left by one bit, its high 128 bits are the reflection of c's
 * terms of degree < 128, and its low 128 bits D the reflection of c_hi,
 * the terms from x^128 up.  Reduction: x^128 = x^7 + x^2 + x + 1 (mod g),
 * so c = c_lo + c_hi (1 + x + x^2 + x^7).  Multiplying by x^i is a right
 * shift by i of the reflected form; the i bits that fall off are terms of
 * degree >= 128, folded once more: they are D's lowest bits, and reduced
 * they land at the top, E = D << 127 + D << 126 + D << 121 (only D's low
 * 64-bit lane contributes, into its high lane), and E's terms times
 * (1 + x + x^2 + x^7) stay below x^128.  So with D' = D + E:
 *
 *   c mod g = c_lo + D' + D' >> 1 + D' >> 2 + D' >> 7      (all reflected)
 *
 * The aggregation.  Reduction is linear, so the products need not be
 * reduced one by one: S = X_1 H^n + ... + X_n H is summed unreduced and
 * reduced once.  The key keeps H^1 .. H^128 (TB_GHASH_POWERS), computed
 * when the key is set (per epoch), so a datagram of up to 127 blocks and
 * its length block (2032 bytes: a full udp datagram is 92) is one pass of
 * independent products and one reduction; a longer one is Horner's rule
 * over runs of 128 blocks, Y' = (Y + X_1) H^128 + ... + X_128 H, each run
 * waiting on the previous one's reduction (measured: a second run costs
 * as much as 20 more blocks, which is why the table is this long).
 *
 * The paths, chosen once at key set-up from what the CPU has:
 *   TB_GHASH_VCLMUL  VPCLMULQDQ on 512-bit registers (AVX-512): four
 *                    blocks and their four powers per multiply; a group of
 *                    fewer (a piece's end, a ragged last block) is loaded
 *                    under a byte mask, which is also the zero padding;
 *                    up to 160 bytes it takes TB_GHASH_AVX's steps, as
 *                    fast there without the lanes to gather;
 *   TB_GHASH_AVX     PCLMULQDQ on 128-bit registers, one block per step,
 *                    in AVX's three-operand encoding;
 *   TB_GHASH_CLMUL   the same in SSE's (a CPU without AVX);
 *   TB_GHASH_NETTLE  nettle's GHASH (gcm_update), anywhere else.
 * Every path gives the same value for the same input, bit for bit
 * (test_ghash checks each against nettle's GCM for every length 0..2048
 * and the SP 800-38D vectors; fuzz_ghash compares them on random input).
 *
 * Pieces.  The data may be given in pieces (a datagram's 48-byte header
 * and its frames, apart in memory), hashed as their concatenation when
 * every piece but the last is a whole number of blocks (the header is).
 * A ragged piece before another is zero-padded where it ends, as nettle's
 * gcm_update does, the same on every path.
 *
 * Threads: a key is written once (tb_ghash_key_init) and then only read;
 * digest keeps its state on the caller's stack.
 */
#ifndef TB_GHASH_H
#define TB_GHASH_H

#include <nettle/gcm.h>

#include <stddef.h>
#include <stdint.h>

#define TB_GHASH_BLOCK 16
/* Powers of H the key keeps: 128 is a datagram of up to 2032 bytes (a
 * udp mtu of 1472 with room) in one reduction, 2096 bytes of key (inside
 * nettle's 4 KiB table, which shares its room), and 128 multiplies to set
 * up, four at a time on the VPCLMULQDQ path.  A multiple of 16. */
#define TB_GHASH_POWERS 128

enum tb_ghash_path {
	TB_GHASH_AUTO = 0, /* the best this CPU has */
	TB_GHASH_NETTLE,
	TB_GHASH_CLMUL,
	TB_GHASH_VCLMUL,
	TB_GHASH_AVX,
	TB_GHASH_PATHS
};

/* A piece of the data: `len` bytes at `p`, any alignment. */
typedef struct tb_ghash_piece {
	const void *p;
	size_t len;
} tb_ghash_piece_t;

typedef struct tb_ghash_key tb_ghash_key_t;

typedef void tb_ghash_digest_fn(const tb_ghash_key_t *k,
				const tb_ghash_piece_t *pc, int n,
				uint8_t s[16]);

struct tb_ghash_key {
	union {
		/* pow[i] = H^(128 - i), reflected; pow[128..130] zero, so
		 * that a four-block load of the last powers stays inside. */
		uint8_t pow[TB_GHASH_POWERS + 3][TB_GHASH_BLOCK];
		struct gcm_key nettle;
	} u;
	tb_ghash_digest_fn *digest; /* the path's */
	int path;
};

/* Sets *k up for H (the 16 bytes E_K(0^128)) on `path`; TB_GHASH_AUTO
 * takes the best the CPU has (or the one tb_ghash_force named).  -1 when
 * the CPU lacks what `path` needs, else 0.  Set-up (128 multiplies). */
int tb_ghash_key_init(tb_ghash_key_t *k, const uint8_t h[16], int path);

/* 1 when this CPU can run `path` (TB_GHASH_NETTLE always), else 0. */
int tb_ghash_path_supported(int path);

/* "vpclmulqdq", "pclmulqdq", "nettle". */
const char *tb_ghash_path_name(int path);

/* Test hook: TB_GHASH_AUTO keys made after this call take `path` (which
 * must be supported) instead of the best; TB_GHASH_AUTO undoes it.  Not
 * thread-safe: for tests and benchmarks, before keys are made. */
void tb_ghash_force(int path);

/* S = GHASH_H(A, 0^v, [len(A)]_64, [0]_64) for A the `n` pieces at `pc`
 * (see the top), in GCM's byte order: GMAC's tag is S + E_K(J0).  Hot
 * path: no allocation, lock or system call. */
static inline void tb_ghash_digest(const tb_ghash_key_t *k,
				   const tb_ghash_piece_t *pc, int n,
				   uint8_t s[16])
{
	k->digest(k, pc, n, s);
}

#endif
