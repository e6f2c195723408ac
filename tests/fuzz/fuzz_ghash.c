/*
 * fuzz_ghash.c - libFuzzer target comparing GHASH's paths (ghash.h) with
 * one another and with nettle's GCM, on data cut into pieces at the
 * fuzzer's choice.
 *
 * `make fuzz` builds it with libFuzzer and runs it; `make test` replays
 * its corpus, tests/fuzz/corpus/ghash/, through it (tests/fuzz/replay.c).
 *
 * The input: a 16-byte AES key, a 12-byte IV, a count byte c (1 + c % 8
 * pieces), then c % 8 little-endian 2-byte piece lengths (each cut to what
 * is left), then the data; the last piece takes the rest.  Checked: every
 * path this CPU runs gives the same S, bit for bit, the ragged pieces
 * included (each padded where it ends); and when every piece but the last
 * is whole blocks, S + E_K(J0) is nettle's GCM tag over the
 * concatenation.  Every piece is copied into a buffer of exactly its size,
 * so ASan sees a read past any of them.
 */
#include "bus/transport/ghash.h"
#include "tests/fuzz/fuzz_util.h"

#include <nettle/aes.h>
#include <nettle/gcm.h>
#include <nettle/memxor.h>

#define MAX_PIECES 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int paths[] = {TB_GHASH_NETTLE, TB_GHASH_CLMUL,
				    TB_GHASH_AVX, TB_GHASH_VCLMUL};
	uint8_t key[16], iv[12], h[16] = {0}, j0[16] = {0}, ek[16];
	uint8_t s[16], first[16], tag[16], want[16];
	tb_ghash_piece_t pc[MAX_PIECES];
	uint8_t *copy[MAX_PIECES];
	size_t cut[MAX_PIECES - 1], total, len;
	const uint8_t *rest;
	struct aes128_ctx aes;
	struct gcm_aes128_ctx gcm;
	int n, whole = 1, have = 0;
	fuzz_in_t in;

	fuzz_in_init(&in, data, size);
	for (size_t i = 0; i < sizeof(key); i++)
		key[i] = fuzz_u8(&in);
	for (size_t i = 0; i < sizeof(iv); i++)
		iv[i] = fuzz_u8(&in);
	n = 1 + fuzz_u8(&in) % MAX_PIECES;
	for (int i = 0; i < n - 1; i++)
		cut[i] = fuzz_u16(&in);
	rest = fuzz_bytes(&in, SIZE_MAX, &total);
	for (int i = 0; i < n; i++) {
		len = i < n - 1 && cut[i] < total ? cut[i] : total;
		copy[i] = fuzz_copy(rest, len);
		pc[i].p = copy[i];
		pc[i].len = len;
		if (i < n - 1 && len % 16)
			whole = 0;
		rest += len;
		total -= len;
	}
	aes128_set_encrypt_key(&aes, key);
	aes128_encrypt(&aes, sizeof(h), h, h);
	for (size_t p = 0; p < sizeof(paths) / sizeof(paths[0]); p++) {
		tb_ghash_key_t k;

		if (tb_ghash_key_init(&k, h, paths[p]) != 0)
			continue; /* not on this CPU */
		tb_ghash_digest(&k, pc, n, s);
		if (have++ && memcmp(s, first, sizeof(s)) != 0)
			abort(); /* two paths disagree */
		memcpy(first, s, sizeof(s));
	}
	if (whole) {
		memcpy(j0, iv, sizeof(iv));
		j0[15] = 1;
		aes128_encrypt(&aes, sizeof(j0), ek, j0);
		memxor3(tag, first, ek, sizeof(tag));
		gcm_aes128_set_key(&gcm, key);
		gcm_aes128_set_iv(&gcm, sizeof(iv), iv);
		for (int i = 0; i < n; i++)
			gcm_aes128_update(&gcm, pc[i].len, pc[i].p);
		gcm_aes128_digest(&gcm, sizeof(want), want);
		if (memcmp(tag, want, sizeof(tag)) != 0)
			abort(); /* not GCM's tag */
	}
	for (int i = 0; i < n; i++)
		free(copy[i]);
	return 0;
}
