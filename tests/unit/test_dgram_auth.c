/*
 * The datagram tag (dgram_auth.h) is what its header says, on every GHASH
 * path (ghash.h, forced through tb_ghash_force): K_e derived from the
 * token, stream and epoch with HMAC-SHA256 as written there, then nettle's
 * AES-128-GCM over the header's first 48 bytes and the frames, with the
 * nonce and four zero bytes as IV.  The test derives the key itself, so a
 * change to the wire format fails here, and so does any path whose tag
 * differs by one bit.  A tag made on one path verifies on every other, and
 * a flipped bit anywhere in the datagram fails on every path.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/transport/dgram_auth.h"
#include "tests/common/rng.h"

#include <nettle/gcm.h>
#include <nettle/hmac.h>
#include <nettle/sha2.h>

#include <stdio.h>
#include <string.h>

#define TOKEN "dgram-auth-test-token"
#define STREAM 0x01020304u

static const int paths[] = {TB_GHASH_NETTLE, TB_GHASH_CLMUL, TB_GHASH_AVX,
			    TB_GHASH_VCLMUL};
#define NPATHS ((int)(sizeof(paths) / sizeof(paths[0])))

/* K_e as dgram_auth.h's top defines it. */
static void epoch_key(const char *token, uint32_t stream, uint64_t epoch,
		      uint8_t ke[16])
{
	static const char label[] = "tickbus datagram v2";
	struct hmac_sha256_ctx h;
	uint8_t ks[SHA256_DIGEST_SIZE], id[4], e[8], out[SHA256_DIGEST_SIZE];

	for (int i = 0; i < 4; i++)
		id[i] = (uint8_t)(stream >> (8 * i));
	for (int i = 0; i < 8; i++)
		e[i] = (uint8_t)(epoch >> (8 * i));
	hmac_sha256_set_key(&h, strlen(token), (const uint8_t *)token);
	hmac_sha256_update(&h, sizeof(label) - 1, (const uint8_t *)label);
	hmac_sha256_update(&h, sizeof(id), id);
	hmac_sha256_digest(&h, sizeof(ks), ks);
	hmac_sha256_set_key(&h, sizeof(ks), ks);
	hmac_sha256_update(&h, sizeof(e), e);
	hmac_sha256_digest(&h, sizeof(out), out);
	memcpy(ke, out, 16);
}

/* nettle's GCM tag of a datagram whose frames are `len` bytes at `f`. */
static void nettle_tag(const uint8_t ke[16], const tb_packet_hdr_t *h,
		       const uint8_t *f, size_t len, uint8_t tag[16])
{
	struct gcm_aes128_ctx c;
	uint8_t iv[12] = {0};

	for (int i = 0; i < 8; i++)
		iv[i] = (uint8_t)(h->nonce >> (8 * i));
	gcm_aes128_set_key(&c, ke);
	gcm_aes128_set_iv(&c, sizeof(iv), iv);
	gcm_aes128_update(&c, TB_PACKET_AUTH_LEN, (const uint8_t *)h);
	gcm_aes128_update(&c, len, f);
	gcm_aes128_digest(&c, 16, tag);
}

static int path_key(int path, const tb_dgram_auth_t *a, uint64_t epoch,
		    tb_dgram_key_t *k)
{
	if (!tb_ghash_path_supported(path)) {
		fprintf(stderr, "test_dgram_auth: this CPU cannot run the %s "
			"path: not tested\n", tb_ghash_path_name(path));
		return 0;
	}
	tb_ghash_force(path);
	tb_dgram_auth_key(a, epoch, k);
	tb_ghash_force(TB_GHASH_AUTO);
	assert_int_equal(k->h.path, path);
	assert_int_equal(k->epoch, epoch);
	return 1;
}

/* Every frames length 0..2048 (0: a heartbeat, frames NULL), random
 * header fields and bytes, fresh epochs. */
static void tag_is_nettles_gcm_on_every_path(void **state)
{
	static uint8_t dg[TB_PACKET_HDR_LEN + 2048 + 64];
	tb_packet_hdr_t *h = (tb_packet_hdr_t *)dg;
	uint64_t r = 0x1234567887654321ull;
	tb_dgram_auth_t a;

	(void)state;
	tb_dgram_auth_init(&a, TOKEN, STREAM);
	for (size_t len = 0; len <= 2048; len++) {
		uint64_t epoch = rng_xorshift64s(&r);
		uint8_t ke[16], want[16];

		for (size_t i = 0; i < TB_PACKET_HDR_LEN + len; i++)
			dg[i] = (uint8_t)rng_xorshift64s(&r);
		epoch_key(TOKEN, STREAM, epoch, ke);
		nettle_tag(ke, h, dg + TB_PACKET_HDR_LEN, len, want);
		for (int p = 0; p < NPATHS; p++) {
			tb_dgram_key_t k;
			uint8_t tag[16];

			if (!path_key(paths[p], &a, epoch, &k))
				continue;
			tb_dgram_auth_tag(&k, h, len ? dg + TB_PACKET_HDR_LEN : NULL,
					  len, tag);
			if (memcmp(tag, want, 16) != 0)
				fail_msg("path %s, frames %zu bytes",
					 tb_ghash_path_name(paths[p]), len);
			tb_dgram_auth_sign(&k, h, dg + TB_PACKET_HDR_LEN, len);
			assert_memory_equal(h->tag, want, 16);
			assert_true(tb_dgram_auth_verify(&k, dg, TB_PACKET_HDR_LEN + len));
		}
	}
}

/* Signed on one path, checked on all; one flipped bit anywhere (header,
 * tag, frames) refused on all. */
static void paths_agree_and_refuse_a_flipped_bit(void **state)
{
	static uint8_t dg[1472];
	tb_packet_hdr_t *h = (tb_packet_hdr_t *)dg;
	uint64_t r = 99;
	tb_dgram_auth_t a;
	tb_dgram_key_t k[NPATHS];
	int have[NPATHS];

	(void)state;
	tb_dgram_auth_init(&a, TOKEN, STREAM);
	for (int p = 0; p < NPATHS; p++)
		have[p] = path_key(paths[p], &a, 77, &k[p]);
	for (int t = 0; t < 300; t++) {
		size_t len = TB_PACKET_HDR_LEN +
			     (size_t)(rng_xorshift64s(&r) % (sizeof(dg) - TB_PACKET_HDR_LEN + 1));
		size_t bit = (size_t)(rng_xorshift64s(&r) % (8 * len));
		int by = t % NPATHS;

		if (!have[by])
			continue;
		for (size_t i = 0; i < len; i++)
			dg[i] = (uint8_t)rng_xorshift64s(&r);
		tb_dgram_auth_sign(&k[by], h, dg + TB_PACKET_HDR_LEN,
				   len - TB_PACKET_HDR_LEN);
		for (int p = 0; p < NPATHS; p++)
			if (have[p])
				assert_true(tb_dgram_auth_verify(&k[p], dg, len));
		dg[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		for (int p = 0; p < NPATHS; p++)
			if (have[p])
				assert_false(tb_dgram_auth_verify(&k[p], dg, len));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(tag_is_nettles_gcm_on_every_path),
		cmocka_unit_test(paths_agree_and_refuse_a_flipped_bit),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
