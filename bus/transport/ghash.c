/*
 * ghash.c - GHASH's three paths and the runs that feed them (see ghash.h
 * for the mathematics).
 *
 * The carry-less paths are compiled for their instructions with
 * __attribute__((target)), not for the whole library: the choice is made
 * at run time (tb_ghash_key_init), so one binary runs on any x86-64 and
 * takes VPCLMULQDQ where the CPU has it.
 */
#include "bus/transport/ghash.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TB_GHASH_X86 1
#include <immintrin.h>
#else
#define TB_GHASH_X86 0
#endif

static int forced; /* tb_ghash_force's path, or TB_GHASH_AUTO */

/* ------------------------------------------------------------ pclmulqdq */

#if TB_GHASH_X86

#define CLMUL_TARGET __attribute__((target("pclmul,sse2,ssse3")))
#define AVX_TARGET __attribute__((target("pclmul,sse2,ssse3,avx")))
#define VCLMUL_TARGET \
	__attribute__((target("pclmul,sse2,ssse3,avx,avx2,avx512f,avx512bw,vpclmulqdq")))

/* Byte 0 of a block to the top of the register: the reflected form. */
static inline CLMUL_TARGET __m128i reflect_mask(void)
{
	return _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
			    15);
}

/* The 128-bit value shifted right by k (0 < k < 64) across its lanes. */
static inline CLMUL_TARGET __m128i shr128(__m128i v, int k)
{
	return _mm_or_si128(_mm_srli_epi64(v, k),
			    _mm_srli_si128(_mm_slli_epi64(v, 64 - k), 8));
}

/* The reflected product held as lo + hi * 2^128 (bit 254 - k holding the
 * coefficient of x^k), reduced modulo g: the formula at ghash.h's top. */
static inline CLMUL_TARGET __m128i reduce(__m128i lo, __m128i hi)
{
	__m128i lc = _mm_srli_epi64(lo, 63), hc = _mm_srli_epi64(hi, 63);
	__m128i d, e, t;

	/* Shift the 256 bits left by one: each lane's top bit into the next
	 * lane up (the top lane's is 0: a product has 255 bits). */
	lo = _mm_or_si128(_mm_slli_epi64(lo, 1), _mm_slli_si128(lc, 8));
	hi = _mm_or_si128(_mm_slli_epi64(hi, 1), _mm_slli_si128(hc, 8));
	hi = _mm_or_si128(hi, _mm_srli_si128(lc, 8));
	/* lo is D, the terms from x^128 up; fold its overflow E in. */
	e = _mm_xor_si128(_mm_xor_si128(_mm_slli_epi64(lo, 63),
					_mm_slli_epi64(lo, 62)),
			  _mm_slli_epi64(lo, 57));
	d = _mm_xor_si128(lo, _mm_slli_si128(e, 8));
	t = _mm_xor_si128(_mm_xor_si128(d, shr128(d, 1)),
			  _mm_xor_si128(shr128(d, 2), shr128(d, 7)));
	return _mm_xor_si128(hi, t);
}

/* a * b mod g, both reflected. */
static inline CLMUL_TARGET __m128i mul(__m128i a, __m128i b)
{
	__m128i lo = _mm_clmulepi64_si128(a, b, 0x00);
	__m128i hi = _mm_clmulepi64_si128(a, b, 0x11);
	__m128i mid = _mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x01),
				    _mm_clmulepi64_si128(a, b, 0x10));

	lo = _mm_xor_si128(lo, _mm_slli_si128(mid, 8));
	hi = _mm_xor_si128(hi, _mm_srli_si128(mid, 8));
	return reduce(lo, hi);
}

static CLMUL_TARGET void powers(tb_ghash_key_t *k, const uint8_t h[16])
{
	__m128i p[TB_GHASH_POWERS + 1]; /* p[i] = H^i */

	p[1] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)h),
				reflect_mask());
	for (int i = 2; i <= 4; i++)
		p[i] = mul(p[i - 1], p[1]);
	/* Four chains, so that the multiplies overlap. */
	for (int i = 5; i <= TB_GHASH_POWERS; i++)
		p[i] = mul(p[i - 4], p[4]);
	for (int i = 1; i <= TB_GHASH_POWERS; i++)
		_mm_storeu_si128((__m128i *)k->u.pow[TB_GHASH_POWERS - i], p[i]);
	memset(k->u.pow[TB_GHASH_POWERS], 0, 3 * TB_GHASH_BLOCK);
}

/* The blocks in the pieces, with the length block; the exponent of the
 * first block: the first run takes what is left over by whole runs. */
static inline unsigned first_exponent(const tb_ghash_piece_t *pc, int n,
				      uint64_t *bits)
{
	uint64_t bytes = 0, blocks = 1;

	for (int i = 0; i < n; i++) {
		bytes += pc[i].len;
		blocks += (pc[i].len + TB_GHASH_BLOCK - 1) / TB_GHASH_BLOCK;
	}
	*bits = bytes * 8;
	return (unsigned)((blocks - 1) % TB_GHASH_POWERS) + 1;
}

/* The length block [bits]_64 [0]_64, reflected: bits in the high lane. */
static inline CLMUL_TARGET __m128i length_block(uint64_t bits)
{
	return _mm_set_epi64x((long long)bits, 0);
}

/* Adds x times h to the unreduced sums. */
static inline CLMUL_TARGET void mul1(__m128i x, __m128i h, __m128i *lo,
				    __m128i *mid, __m128i *hi)
{
	*lo = _mm_xor_si128(*lo, _mm_clmulepi64_si128(x, h, 0x00));
	*hi = _mm_xor_si128(*hi, _mm_clmulepi64_si128(x, h, 0x11));
	*mid = _mm_xor_si128(*mid, _mm_xor_si128(_mm_clmulepi64_si128(x, h, 0x01),
						 _mm_clmulepi64_si128(x, h, 0x10)));
}

/* The pieces' blocks when every piece is whole blocks and all of them,
 * with the length block, make one run (at most TB_GHASH_POWERS): what
 * a datagram of frames is, its header 48 bytes and each frame a multiple
 * of 32.  Each block times its power, from the first block's (H^(blocks
 * + 1)) down, summed unreduced; one reduction after the length block.
 * Nothing is tested per block but the loop's end. */
static inline CLMUL_TARGET void clmul_one_run(const tb_ghash_key_t *k,
					      const tb_ghash_piece_t *pc,
					      int n, size_t bytes,
					      uint8_t s[16])
{
	const __m128i rm = reflect_mask();
	__m128i lo = _mm_setzero_si128(), hi = lo, mid = lo, y;
	const uint8_t *pw = k->u.pow[TB_GHASH_POWERS - 1 -
				     bytes / TB_GHASH_BLOCK];

	for (int i = 0; i < n; i++) {
		const uint8_t *p = pc[i].p, *end = p + pc[i].len;

		/* Two blocks a turn: the loop's own instructions and the
		 * register copies it makes at each turn's end, halved (a
		 * 64-byte message's datagram: 21 instructions fewer; four
		 * a turn took 5 more again). */
#pragma GCC unroll 2
		while (p != end) {
			mul1(_mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)p),
					      rm),
			     _mm_loadu_si128((const __m128i *)pw), &lo, &mid,
			     &hi);
			p += TB_GHASH_BLOCK;
			pw += TB_GHASH_BLOCK;
		}
	}
	/* pw is at H^1, the length block's. */
	mul1(length_block(bytes * 8), _mm_loadu_si128((const __m128i *)pw),
	     &lo, &mid, &hi);
	y = reduce(_mm_xor_si128(lo, _mm_slli_si128(mid, 8)),
		   _mm_xor_si128(hi, _mm_srli_si128(mid, 8)));
	_mm_storeu_si128((__m128i *)s, _mm_shuffle_epi8(y, rm));
}

/* One block per step: x times its power, summed unreduced; a run's end
 * reduced and carried into the next run's first block: any pieces, any
 * length.  The body of both 128-bit paths' general way, compiled for each
 * one's instructions. */
static inline __attribute__((always_inline)) CLMUL_TARGET void
clmul_runs(const tb_ghash_key_t *k, const tb_ghash_piece_t *pc, int n,
	   uint8_t s[16])
{
	const __m128i rm = reflect_mask();
	__m128i lo = _mm_setzero_si128(), hi = lo, mid = lo, y = lo, x, h;
	uint64_t bits;
	unsigned e = first_exponent(pc, n, &bits);

	for (int i = 0; i < n; i++) {
		const uint8_t *p = pc[i].p;
		size_t len = pc[i].len;

		while (len) {
			/* Whole blocks up to the piece's end or the run's,
			 * then perhaps a ragged one. */
			size_t q = len / TB_GHASH_BLOCK < e ? len / TB_GHASH_BLOCK : e;
			const uint8_t *pw = k->u.pow[TB_GHASH_POWERS - e];

			for (size_t j = 0; j < q; j++) {
				x = _mm_loadu_si128((const __m128i *)(p + 16 * j));
				x = _mm_xor_si128(_mm_shuffle_epi8(x, rm), y);
				y = _mm_setzero_si128();
				h = _mm_loadu_si128((const __m128i *)(pw + 16 * j));
				mul1(x, h, &lo, &mid, &hi);
			}
			p += 16 * q;
			len -= 16 * q;
			e -= (unsigned)q;
			if (len && len < TB_GHASH_BLOCK && e) {
				uint8_t b[TB_GHASH_BLOCK] = {0};

				memcpy(b, p, len);
				x = _mm_loadu_si128((const __m128i *)b);
				x = _mm_xor_si128(_mm_shuffle_epi8(x, rm), y);
				y = _mm_setzero_si128();
				h = _mm_loadu_si128((const __m128i *)
							    k->u.pow[TB_GHASH_POWERS - e]);
				mul1(x, h, &lo, &mid, &hi);
				len = 0;
				e--;
			}
			if (e == 0) {
				y = reduce(_mm_xor_si128(lo, _mm_slli_si128(mid, 8)),
					   _mm_xor_si128(hi, _mm_srli_si128(mid, 8)));
				lo = hi = mid = _mm_setzero_si128();
				e = TB_GHASH_POWERS;
			}
		}
	}
	/* The length block, the last of the last run: e is 1. */
	x = _mm_xor_si128(length_block(bits), y);
	h = _mm_loadu_si128((const __m128i *)k->u.pow[TB_GHASH_POWERS - 1]);
	mul1(x, h, &lo, &mid, &hi);
	y = reduce(_mm_xor_si128(lo, _mm_slli_si128(mid, 8)),
		   _mm_xor_si128(hi, _mm_srli_si128(mid, 8)));
	_mm_storeu_si128((__m128i *)s, _mm_shuffle_epi8(y, rm));
}

static __attribute__((noinline)) CLMUL_TARGET void
clmul_runs_sse(const tb_ghash_key_t *k, const tb_ghash_piece_t *pc, int n,
	       uint8_t s[16])
{
	clmul_runs(k, pc, n, s);
}

static __attribute__((noinline)) AVX_TARGET void
clmul_runs_avx(const tb_ghash_key_t *k, const tb_ghash_piece_t *pc, int n,
	       uint8_t s[16])
{
	clmul_runs(k, pc, n, s);
}

/* 1 when the pieces are whole blocks that make one run with the length
 * block (clmul_one_run's case); their bytes in *bytes. */
static inline int one_run(const tb_ghash_piece_t *pc, int n, size_t *bytes)
{
	size_t b = 0, ragged = 0;

	for (int i = 0; i < n; i++) {
		b += pc[i].len;
		ragged |= pc[i].len;
	}
	*bytes = b;
	return ragged % TB_GHASH_BLOCK == 0 &&
	       b / TB_GHASH_BLOCK < TB_GHASH_POWERS;
}

/* The 128-bit paths: the same steps in SSE's encoding and in AVX's, whose
 * three operands leave out the register copies SSE's two-operand forms
 * need.  GHASH of a 64-byte message's datagram (48 + 96 bytes) took 403
 * instructions in the general loop alone; 293 with clmul_one_run, 246 in
 * AVX's encoding.  A full one (48 + 1440): 2167, 1721, 1422.  A ragged
 * one (48 + 100, which no datagram is) 456, 488, 440 (callgrind). */
static inline __attribute__((always_inline)) CLMUL_TARGET void
clmul_digest(const tb_ghash_key_t *k, const tb_ghash_piece_t *pc, int n,
	     uint8_t s[16], tb_ghash_digest_fn *runs)
{
	size_t bytes;

	if (__builtin_expect(one_run(pc, n, &bytes), 1))
		clmul_one_run(k, pc, n, bytes, s);
	else
		runs(k, pc, n, s);
}

static CLMUL_TARGET void tb_ghash_clmul_digest(const tb_ghash_key_t *k,
					       const tb_ghash_piece_t *pc,
					       int n, uint8_t s[16])
{
	clmul_digest(k, pc, n, s, clmul_runs_sse);
}

static AVX_TARGET void tb_ghash_avx_digest(const tb_ghash_key_t *k,
					   const tb_ghash_piece_t *pc, int n,
					   uint8_t s[16])
{
	clmul_digest(k, pc, n, s, clmul_runs_avx);
}

/* ----------------------------------------------------------- vpclmulqdq */

/* The four 128-bit lanes of v summed. */
static inline VCLMUL_TARGET __m128i lanes_sum(__m512i v)
{
	__m256i h = _mm256_xor_si256(_mm512_castsi512_si256(v),
				     _mm512_extracti64x4_epi64(v, 1));

	return _mm_xor_si128(_mm256_castsi256_si128(h),
			     _mm256_extracti128_si256(h, 1));
}

/* The unreduced sum of lo + mid * 2^64 + hi * 2^128 over four lanes,
 * reduced. */
static inline VCLMUL_TARGET __m128i reduce4(__m512i lo, __m512i mid,
					    __m512i hi)
{
	lo = _mm512_xor_si512(lo, _mm512_bslli_epi128(mid, 8));
	hi = _mm512_xor_si512(hi, _mm512_bsrli_epi128(mid, 8));
	return reduce(lanes_sum(lo), lanes_sum(hi));
}

/* Bytes from which the four-lane path is the faster. */
#define VCLMUL_FROM 160

/* shr128 in each lane. */
static inline VCLMUL_TARGET __m512i shr128x4(__m512i v, int k)
{
	return _mm512_or_si512(_mm512_srli_epi64(v, k),
			       _mm512_bsrli_epi128(_mm512_slli_epi64(v, 64 - k), 8));
}

/* mul in each lane: four products, four reductions (reduce's steps). */
static inline VCLMUL_TARGET __m512i mul4x(__m512i a, __m512i b)
{
	__m512i lo = _mm512_clmulepi64_epi128(a, b, 0x00);
	__m512i hi = _mm512_clmulepi64_epi128(a, b, 0x11);
	__m512i mid = _mm512_xor_si512(_mm512_clmulepi64_epi128(a, b, 0x01),
				       _mm512_clmulepi64_epi128(a, b, 0x10));
	__m512i lc, hc, e, d, t;

	lo = _mm512_xor_si512(lo, _mm512_bslli_epi128(mid, 8));
	hi = _mm512_xor_si512(hi, _mm512_bsrli_epi128(mid, 8));
	lc = _mm512_srli_epi64(lo, 63);
	hc = _mm512_srli_epi64(hi, 63);
	lo = _mm512_or_si512(_mm512_slli_epi64(lo, 1), _mm512_bslli_epi128(lc, 8));
	hi = _mm512_or_si512(_mm512_slli_epi64(hi, 1), _mm512_bslli_epi128(hc, 8));
	hi = _mm512_or_si512(hi, _mm512_bsrli_epi128(lc, 8));
	e = _mm512_ternarylogic_epi64(_mm512_slli_epi64(lo, 63),
				      _mm512_slli_epi64(lo, 62),
				      _mm512_slli_epi64(lo, 57), 0x96);
	d = _mm512_xor_si512(lo, _mm512_bslli_epi128(e, 8));
	t = _mm512_ternarylogic_epi64(d, shr128x4(d, 1), shr128x4(d, 2), 0x96);
	return _mm512_ternarylogic_epi64(hi, t, shr128x4(d, 7), 0x96);
}

/* The powers four at a time: P_j holds H^(4j+1) .. H^(4j+4) in its lanes,
 * P_(j+4) = P_j H^16, four chains; stored lanes reversed (the table runs
 * down). */
static VCLMUL_TARGET void powers4(tb_ghash_key_t *k, const uint8_t h[16])
{
	__m128i h1 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)h),
				      reflect_mask());
	__m128i h2 = mul(h1, h1), h3 = mul(h2, h1), h4 = mul(h3, h1);
	__m512i p[TB_GHASH_POWERS / 4], b;

	p[0] = _mm512_inserti32x4(
		_mm512_inserti32x4(
			_mm512_inserti32x4(_mm512_castsi128_si512(h1), h2, 1),
			h3, 2),
		h4, 3);
	b = _mm512_broadcast_i32x4(h4);
	for (int j = 1; j < 4; j++)
		p[j] = mul4x(p[j - 1], b);
	b = _mm512_broadcast_i32x4(_mm512_extracti32x4_epi32(p[3], 3));
	for (int j = 4; j < TB_GHASH_POWERS / 4; j++)
		p[j] = mul4x(p[j - 4], b);
	for (int j = 0; j < TB_GHASH_POWERS / 4; j++)
		_mm512_storeu_si512(k->u.pow[TB_GHASH_POWERS - 4 * j - 4],
				    _mm512_shuffle_i64x2(p[j], p[j], 0x1b));
	memset(k->u.pow[TB_GHASH_POWERS], 0, 3 * TB_GHASH_BLOCK);
}

/* Adds x times h, four blocks and their powers, to the unreduced sums. */
static inline VCLMUL_TARGET void mul4(__m512i x, __m512i h, __m512i *lo,
				      __m512i *mid, __m512i *hi)
{
	*lo = _mm512_xor_si512(*lo, _mm512_clmulepi64_epi128(x, h, 0x00));
	*hi = _mm512_xor_si512(*hi, _mm512_clmulepi64_epi128(x, h, 0x11));
	*mid = _mm512_ternarylogic_epi64(*mid, _mm512_clmulepi64_epi128(x, h, 0x01),
					 _mm512_clmulepi64_epi128(x, h, 0x10), 0x96);
}

/* Four blocks per multiply: lane l holds block j + l and its power.  Whole
 * groups of four go in a loop that checks nothing; a group ends early at
 * a piece's end or a run's, and is loaded under a byte mask, zero past
 * the piece (the padding of a ragged block, and lanes that add nothing). */
static VCLMUL_TARGET void tb_ghash_vclmul_wide(const tb_ghash_key_t *k,
					       const tb_ghash_piece_t *pc,
					       int n, uint8_t s[16])
{
	const __m512i rm = _mm512_broadcast_i32x4(reflect_mask());
	__m512i lo = _mm512_setzero_si512(), hi = lo, mid = lo, x;
	__m128i y = _mm_setzero_si128(), x1, h1;
	uint64_t bits;
	unsigned e = first_exponent(pc, n, &bits);

	for (int i = 0; i < n; i++) {
		const uint8_t *p = pc[i].p;
		size_t len = pc[i].len;

		while (len) {
			size_t q = len / 64, g, take;

			q = q < e / 4 ? q : e / 4;
			for (size_t j = 0; j < q; j++) {
				x = _mm512_shuffle_epi8(
					_mm512_loadu_si512(p + 64 * j), rm);
				x = _mm512_xor_si512(x, _mm512_zextsi128_si512(y));
				y = _mm_setzero_si128();
				mul4(x, _mm512_loadu_si512(
					     k->u.pow[TB_GHASH_POWERS - e + 4 * j]),
				     &lo, &mid, &hi);
			}
			p += 64 * q;
			len -= 64 * q;
			e -= 4 * (unsigned)q;
			if (len && e) {
				/* What is left of the piece or the run: 1 to 4
				 * blocks, the last one perhaps ragged. */
				g = (len + TB_GHASH_BLOCK - 1) / TB_GHASH_BLOCK;
				g = g < 4 ? g : 4;
				g = g < e ? g : e;
				take = g * TB_GHASH_BLOCK < len ? g * TB_GHASH_BLOCK : len;
				x = _mm512_maskz_loadu_epi8(
					take >= 64 ? ~0ull : (1ull << take) - 1, p);
				x = _mm512_xor_si512(_mm512_shuffle_epi8(x, rm),
						     _mm512_zextsi128_si512(y));
				y = _mm_setzero_si128();
				mul4(x, _mm512_loadu_si512(
					     k->u.pow[TB_GHASH_POWERS - e]),
				     &lo, &mid, &hi);
				p += take;
				len -= take;
				e -= (unsigned)g;
			}
			if (e == 0) {
				y = reduce4(lo, mid, hi);
				lo = hi = mid = _mm512_setzero_si512();
				e = TB_GHASH_POWERS;
			}
		}
	}
	/* The length block, the last of the last run (e is 1), in lane 0. */
	x1 = _mm_xor_si128(length_block(bits), y);
	h1 = _mm_loadu_si128((const __m128i *)k->u.pow[TB_GHASH_POWERS - 1]);
	lo = _mm512_xor_si512(lo, _mm512_zextsi128_si512(
					  _mm_clmulepi64_si128(x1, h1, 0x00)));
	hi = _mm512_xor_si512(hi, _mm512_zextsi128_si512(
					  _mm_clmulepi64_si128(x1, h1, 0x11)));
	mid = _mm512_xor_si512(
		mid, _mm512_zextsi128_si512(
			     _mm_xor_si128(_mm_clmulepi64_si128(x1, h1, 0x01),
					   _mm_clmulepi64_si128(x1, h1, 0x10))));
	y = reduce4(lo, mid, hi);
	_mm_storeu_si128((__m128i *)s, _mm_shuffle_epi8(y, reflect_mask()));
}

/* Below ten blocks or so one block per step is as fast (measured: 144
 * bytes 19.4 ns against 20.9, 176 bytes 21.5 against 20.6); chosen here,
 * before any 512-bit register is touched, with AVX's steps (AVX-512 has
 * AVX), from one look at the pieces. */
static AVX_TARGET void tb_ghash_vclmul_digest(const tb_ghash_key_t *k,
					      const tb_ghash_piece_t *pc, int n,
					      uint8_t s[16])
{
	size_t bytes;
	int whole = one_run(pc, n, &bytes);

	if (bytes > VCLMUL_FROM)
		tb_ghash_vclmul_wide(k, pc, n, s);
	else if (whole)
		clmul_one_run(k, pc, n, bytes, s);
	else
		clmul_runs_avx(k, pc, n, s);
}

#endif /* TB_GHASH_X86 */

/* --------------------------------------------------------------- set-up */

int tb_ghash_path_supported(int path)
{
	switch (path) {
	case TB_GHASH_NETTLE:
		return 1;
#if TB_GHASH_X86
	case TB_GHASH_CLMUL:
		__builtin_cpu_init();
		return __builtin_cpu_supports("pclmul") &&
		       __builtin_cpu_supports("ssse3");
	case TB_GHASH_AVX:
		__builtin_cpu_init();
		return tb_ghash_path_supported(TB_GHASH_CLMUL) &&
		       __builtin_cpu_supports("avx");
	case TB_GHASH_VCLMUL:
		__builtin_cpu_init();
		return tb_ghash_path_supported(TB_GHASH_AVX) &&
		       __builtin_cpu_supports("avx2") &&
		       __builtin_cpu_supports("avx512f") &&
		       __builtin_cpu_supports("avx512bw") &&
		       __builtin_cpu_supports("vpclmulqdq");
#endif
	default:
		return 0;
	}
}

const char *tb_ghash_path_name(int path)
{
	static const char *const names[TB_GHASH_PATHS] = {
		[TB_GHASH_AUTO] = "auto", [TB_GHASH_NETTLE] = "nettle",
		[TB_GHASH_CLMUL] = "pclmulqdq", [TB_GHASH_VCLMUL] = "vpclmulqdq",
		[TB_GHASH_AVX] = "avx-pclmulqdq"};

	return path >= 0 && path < TB_GHASH_PATHS ? names[path] : "?";
}

void tb_ghash_force(int path)
{
	forced = path;
}

/* nettle derives H by encrypting the zero block: this "cipher" gives H. */
static void give_h(const void *ctx, size_t len, uint8_t *dst,
		   const uint8_t *src)
{
	(void)src;
	memcpy(dst, ctx, len);
}

/* nettle's path: each piece through gcm_update (which pads a ragged
 * one), then the length block. */
static void tb_ghash_nettle_digest(const tb_ghash_key_t *k,
				   const tb_ghash_piece_t *pc, int n,
				   uint8_t s[16])
{
	struct gcm_ctx c = {0};
	uint8_t lb[TB_GHASH_BLOCK] = {0};
	uint64_t bits = 0;

	for (int i = 0; i < n; i++) {
		c.auth_size = 0; /* a piece may follow a ragged one */
		gcm_update(&c, &k->u.nettle, pc[i].len, pc[i].p);
		bits += pc[i].len * 8;
	}
	for (int i = 0; i < 8; i++)
		lb[i] = (uint8_t)(bits >> (56 - 8 * i));
	c.auth_size = 0;
	gcm_update(&c, &k->u.nettle, sizeof(lb), lb);
	memcpy(s, c.x.b, TB_GHASH_BLOCK);
}

int tb_ghash_key_init(tb_ghash_key_t *k, const uint8_t h[16], int path)
{
	if (path == TB_GHASH_AUTO && forced != TB_GHASH_AUTO)
		path = forced;
	if (path == TB_GHASH_AUTO)
		path = tb_ghash_path_supported(TB_GHASH_VCLMUL) ? TB_GHASH_VCLMUL
		       : tb_ghash_path_supported(TB_GHASH_AVX) ? TB_GHASH_AVX
		       : tb_ghash_path_supported(TB_GHASH_CLMUL) ? TB_GHASH_CLMUL
							       : TB_GHASH_NETTLE;
	if (!tb_ghash_path_supported(path))
		return -1;
	k->path = path;
	k->digest = tb_ghash_nettle_digest;
	if (path == TB_GHASH_NETTLE) {
		gcm_set_key(&k->u.nettle, h, give_h);
		return 0;
	}
#if TB_GHASH_X86
	if (path == TB_GHASH_VCLMUL) {
		powers4(k, h);
		k->digest = tb_ghash_vclmul_digest;
	} else {
		powers(k, h);
		k->digest = path == TB_GHASH_AVX ? tb_ghash_avx_digest
						 : tb_ghash_clmul_digest;
	}
#endif
	return 0;
}
