/*
 * GHASH (ghash.h) on each of its paths, against nettle's GCM: a GMAC made
 * from tb_ghash's S and E_K(J0) is nettle's tag, bit for bit, for random
 * keys and IVs and every length 0..2048, given in one piece, in two, or in
 * many (so that pieces meet runs at every offset), from every alignment;
 * and the NIST vectors with no plaintext.  A path this CPU lacks is said
 * so and skipped, not counted as passed.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/transport/ghash.h"
#include "tests/common/rng.h"

#include <nettle/aes.h>
#include <nettle/gcm.h>
#include <nettle/memxor.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LEN 2048

static const int carryless[] = {TB_GHASH_CLMUL, TB_GHASH_AVX, TB_GHASH_VCLMUL};
static const int all_paths[] = {TB_GHASH_NETTLE, TB_GHASH_CLMUL, TB_GHASH_AVX,
				TB_GHASH_VCLMUL};
#define N_CARRYLESS (sizeof(carryless) / sizeof(carryless[0]))
#define N_PATHS (sizeof(all_paths) / sizeof(all_paths[0]))

static void hex(const char *s, uint8_t *out, size_t n)
{
	assert_int_equal(strlen(s), 2 * n);
	for (size_t i = 0; i < n; i++) {
		unsigned v;

		assert_int_equal(sscanf(s + 2 * i, "%2x", &v), 1);
		out[i] = (uint8_t)v;
	}
}

/* nettle's AES-128-GCM tag over `len` bytes of associated data. */
static void gmac_nettle(const uint8_t key[16], const uint8_t iv[12],
			const uint8_t *a, size_t len, uint8_t tag[16])
{
	struct gcm_aes128_ctx c;

	gcm_aes128_set_key(&c, key);
	gcm_aes128_set_iv(&c, 12, iv);
	gcm_aes128_update(&c, len, a);
	gcm_aes128_digest(&c, 16, tag);
}

/* The same from tb_ghash on `path`: `a` given in the pieces whose ends are
 * cuts[0] < cuts[1] < ... = len. */
static void gmac_ours(int path, const uint8_t key[16], const uint8_t iv[12],
		      const uint8_t *a, const size_t *cuts, int ncuts,
		      uint8_t tag[16])
{
	struct aes128_ctx aes;
	tb_ghash_key_t k;
	tb_ghash_piece_t pieces[MAX_LEN / 16 + 2];
	uint8_t h[16] = {0}, j0[16] = {0}, ek[16], s[16];
	size_t at = 0;

	aes128_set_encrypt_key(&aes, key);
	aes128_encrypt(&aes, 16, h, h);
	assert_int_equal(tb_ghash_key_init(&k, h, path), 0);
	assert_int_equal(k.path, path);
	for (int i = 0; i < ncuts; i++) {
		pieces[i].p = a + at;
		pieces[i].len = cuts[i] - at;
		at = cuts[i];
	}
	tb_ghash_digest(&k, pieces, ncuts, s);
	memcpy(j0, iv, 12);
	j0[15] = 1;
	aes128_encrypt(&aes, 16, ek, j0);
	memxor3(tag, s, ek, 16);
}

static int supported(int path)
{
	if (tb_ghash_path_supported(path))
		return 1;
	fprintf(stderr, "test_ghash: this CPU cannot run the %s path: not tested\n",
		tb_ghash_path_name(path));
	return 0;
}

/* NIST CAVP gcmEncryptExtIV128 (PTlen = 0) and the GCM specification's
 * test case 1 (McGrew and Viega): key, IV, AAD, tag. */
static void sp800_38d_vectors_with_no_plaintext(void **state)
{
	static const char *const v[][4] = {
		{"00000000000000000000000000000000", "000000000000000000000000",
		 "", "58e2fccefa7e3061367f1d57a4e7455a"},
		{"11754cd72aec309bf52f7687212e8957", "3c819d9a9bed087615030b65",
		 "", "250327c674aaf477aef2675748cf6971"},
		{"77be63708971c4e240d1cb79e8d77feb", "e0e00f19fed7ba0136a797f3",
		 "7a43ec1d9c0a5a78a0b16533a6213cab",
		 "209fcc8d3675ed938e9c7166709dd946"},
		{"2fb45e5b8f993a2bfebc4b15b533e0b4", "5b05755f984d2b90f94b8027",
		 "e85491b2202caf1d7dce03b97e09331c32473941",
		 "c75b7832b2a2d9bd827412b6ef5769db"},
		{"99e3e8793e686e571d8285c564f75e2b", "c2dd0ab868da6aa8ad9c0d23",
		 "b668e42d4e444ca8b23cfdd95a9fedd5178aa521144890b093733cf5cf2252"
		 "6c5917ee476541809ac6867a8c399309fc",
		 "3f4fba100eaf1f34b0baadaae9995d85"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		uint8_t key[16], iv[12], a[64], want[16], tag[16];
		size_t len = strlen(v[i][2]) / 2;

		hex(v[i][0], key, 16);
		hex(v[i][1], iv, 12);
		hex(v[i][2], a, len);
		hex(v[i][3], want, 16);
		gmac_nettle(key, iv, a, len, tag);
		assert_memory_equal(tag, want, 16);
		for (size_t p = 0; p < N_PATHS; p++) {
			if (!supported(all_paths[p]))
				continue;
			memset(tag, 0, sizeof(tag));
			gmac_ours(all_paths[p], key, iv, a, &len, 1, tag);
			assert_memory_equal(tag, want, 16);
		}
	}
}

/* A buffer of exactly `len` bytes at `off` past a 64-byte boundary, so that
 * ASan sees any read past its end and every alignment is taken. */
static uint8_t *exact(size_t len, size_t off, uint8_t **base)
{
	*base = aligned_alloc(64, (off + len + 63) / 64 * 64 + 64);
	assert_non_null(*base);
	return *base + off;
}

static void random_bytes(uint64_t *r, uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)rng_xorshift64s(r);
}

/* For each length: one piece; two pieces cut at a random block boundary;
 * many pieces of random whole blocks (the last one ragged). */
static void every_path_is_nettles_tag_for_every_length(void **state)
{
	uint64_t r = 0x9e3779b97f4a7c15ull;

	(void)state;
	for (size_t len = 0; len <= MAX_LEN; len++) {
		uint8_t key[16], iv[12], want[16], tag[16], *base;
		uint8_t *a = exact(len, (size_t)(rng_xorshift64s(&r) % 64), &base);
		size_t one[1] = {len}, two[2], many[MAX_LEN / 16 + 2];
		int nmany = 0;

		random_bytes(&r, key, sizeof(key));
		random_bytes(&r, iv, sizeof(iv));
		random_bytes(&r, a, len);
		two[0] = (size_t)(rng_xorshift64s(&r) % (len / 16 + 1)) * 16;
		two[1] = len;
		for (size_t at = 0; at < len;) {
			size_t n = (size_t)(1 + rng_xorshift64s(&r) % 40) * 16;

			at = at + n < len ? at + n : len;
			many[nmany++] = at;
		}
		gmac_nettle(key, iv, a, len, want);
		for (size_t p = 0; p < N_PATHS; p++) {
			if (!tb_ghash_path_supported(all_paths[p]))
				continue;
			gmac_ours(all_paths[p], key, iv, a, one, 1, tag);
			if (memcmp(tag, want, 16) != 0)
				fail_msg("path %s, length %zu, one piece",
					 tb_ghash_path_name(all_paths[p]), len);
			gmac_ours(all_paths[p], key, iv, a, two, 2, tag);
			if (memcmp(tag, want, 16) != 0)
				fail_msg("path %s, length %zu, cut at %zu",
					 tb_ghash_path_name(all_paths[p]), len,
					 two[0]);
			if (nmany) {
				gmac_ours(all_paths[p], key, iv, a, many, nmany,
					  tag);
				if (memcmp(tag, want, 16) != 0)
					fail_msg("path %s, length %zu, %d pieces",
						 tb_ghash_path_name(all_paths[p]),
						 len, nmany);
			}
		}
		free(base);
	}
	for (size_t p = 0; p < N_CARRYLESS; p++)
		supported(carryless[p]);
}

/* A ragged piece before another is padded where it ends, the same on
 * every path (nettle's gcm_update pads it so). */
static void a_ragged_piece_is_padded_alike_on_every_path(void **state)
{
	uint64_t r = 12345;

	(void)state;
	for (int t = 0; t < 500; t++) {
		uint8_t key[16], iv[12], a[600], want[16], tag[16];
		size_t cuts[3];

		random_bytes(&r, key, sizeof(key));
		random_bytes(&r, iv, sizeof(iv));
		random_bytes(&r, a, sizeof(a));
		cuts[0] = (size_t)(rng_xorshift64s(&r) % 300);
		cuts[1] = cuts[0] + (size_t)(rng_xorshift64s(&r) % 300);
		cuts[2] = sizeof(a);
		gmac_ours(TB_GHASH_NETTLE, key, iv, a, cuts, 3, want);
		for (size_t p = 0; p < N_CARRYLESS; p++) {
			if (!tb_ghash_path_supported(carryless[p]))
				continue;
			gmac_ours(carryless[p], key, iv, a, cuts, 3, tag);
			assert_memory_equal(tag, want, 16);
		}
	}
}

/* A datagram's shape, whole blocks: its 48-byte header, perhaps an empty
 * piece, then its frames, up to the one-run bound (127 blocks and the
 * length block) and past it, the same tag as nettle's on every path. */
static void whole_blocks_up_to_one_run_and_past_it(void **state)
{
	static const size_t frames[] = {0, 32, 96, 1440, 1984, 2000};
	uint8_t key[16], iv[12], a[MAX_LEN], want[16], tag[16];
	uint64_t r = 0x6a09e667f3bcc908ull;

	(void)state;
	for (size_t f = 0; f < sizeof(frames) / sizeof(frames[0]); f++) {
		size_t two[2] = {48, 48 + frames[f]};
		size_t three[3] = {48, 48, 48 + frames[f]};

		random_bytes(&r, key, sizeof(key));
		random_bytes(&r, iv, sizeof(iv));
		random_bytes(&r, a, sizeof(a));
		gmac_nettle(key, iv, a, two[1], want);
		for (size_t p = 0; p < N_PATHS; p++) {
			if (!tb_ghash_path_supported(all_paths[p]))
				continue;
			gmac_ours(all_paths[p], key, iv, a, two, 2, tag);
			if (memcmp(tag, want, 16) != 0)
				fail_msg("path %s, 48 + %zu bytes",
					 tb_ghash_path_name(all_paths[p]),
					 frames[f]);
			gmac_ours(all_paths[p], key, iv, a, three, 3, tag);
			if (memcmp(tag, want, 16) != 0)
				fail_msg("path %s, 48 + empty + %zu bytes",
					 tb_ghash_path_name(all_paths[p]),
					 frames[f]);
		}
	}
}

/* AUTO takes the best the CPU has; tb_ghash_force overrides it; a path the
 * CPU lacks or that does not exist is refused. */
static void auto_takes_the_best_and_the_hook_forces(void **state)
{
	uint8_t h[16] = {1, 2, 3};
	tb_ghash_key_t k;
	int best = tb_ghash_path_supported(TB_GHASH_VCLMUL) ? TB_GHASH_VCLMUL
		   : tb_ghash_path_supported(TB_GHASH_AVX) ? TB_GHASH_AVX
		   : tb_ghash_path_supported(TB_GHASH_CLMUL) ? TB_GHASH_CLMUL
							   : TB_GHASH_NETTLE;

	(void)state;
	assert_int_equal(tb_ghash_key_init(&k, h, TB_GHASH_AUTO), 0);
	assert_int_equal(k.path, best);
	for (size_t p = 0; p < N_PATHS; p++) {
		if (!tb_ghash_path_supported(all_paths[p]))
			continue;
		tb_ghash_force(all_paths[p]);
		assert_int_equal(tb_ghash_key_init(&k, h, TB_GHASH_AUTO), 0);
		assert_int_equal(k.path, all_paths[p]);
	}
	tb_ghash_force(TB_GHASH_AUTO);
	assert_int_equal(tb_ghash_key_init(&k, h, TB_GHASH_AUTO), 0);
	assert_int_equal(k.path, best);
	assert_int_equal(tb_ghash_key_init(&k, h, TB_GHASH_PATHS), -1);
	assert_int_equal(tb_ghash_key_init(&k, h, -1), -1);
	assert_string_equal(tb_ghash_path_name(TB_GHASH_VCLMUL), "vpclmulqdq");
	assert_string_equal(tb_ghash_path_name(TB_GHASH_AVX), "avx-pclmulqdq");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sp800_38d_vectors_with_no_plaintext),
		cmocka_unit_test(every_path_is_nettles_tag_for_every_length),
		cmocka_unit_test(a_ragged_piece_is_padded_alike_on_every_path),
		cmocka_unit_test(whole_blocks_up_to_one_run_and_past_it),
		cmocka_unit_test(auto_takes_the_best_and_the_hook_forces),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
