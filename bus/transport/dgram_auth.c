/*
 * dgram_auth.c - key derivation for datagram tags (see dgram_auth.h).
 */
#include "bus/transport/dgram_auth.h"

#include <nettle/sha2.h>

/* Binds the stream key to this use and this format version: a token used
 * elsewhere (tb-recoveryd, the rc control protocol) never yields a key
 * that means anything there. */
static const char label[] = "tickbus datagram v2";

void tb_dgram_auth_init(tb_dgram_auth_t *a, const char *token,
			uint32_t stream_id)
{
	struct hmac_sha256_ctx h;
	uint8_t ks[SHA256_DIGEST_SIZE], id[4];

	for (int i = 0; i < 4; i++)
		id[i] = (uint8_t)(stream_id >> (8 * i));
	hmac_sha256_set_key(&h, strlen(token), (const uint8_t *)token);
	hmac_sha256_update(&h, sizeof(label) - 1, (const uint8_t *)label);
	hmac_sha256_update(&h, sizeof(id), id);
	hmac_sha256_digest(&h, sizeof(ks), ks);
	hmac_sha256_set_key(&a->stream, sizeof(ks), ks);
	tb_dgram_auth_wipe(&h, sizeof(h));
	tb_dgram_auth_wipe(ks, sizeof(ks));
}

void tb_dgram_auth_key(const tb_dgram_auth_t *a, uint64_t epoch,
		       tb_dgram_key_t *k)
{
	struct hmac_sha256_ctx h = a->stream;
	uint8_t ke[SHA256_DIGEST_SIZE], e[8], h0[16] = {0};

	for (int i = 0; i < 8; i++)
		e[i] = (uint8_t)(epoch >> (8 * i));
	hmac_sha256_update(&h, sizeof(e), e);
	hmac_sha256_digest(&h, sizeof(ke), ke);
	aes128_set_encrypt_key(&k->aes, ke);
	aes128_encrypt(&k->aes, sizeof(h0), h0, h0); /* H = E_K(0^128) */
	tb_ghash_key_init(&k->h, h0, TB_GHASH_AUTO); /* AUTO cannot fail */
	k->epoch = epoch;
	tb_dgram_auth_wipe(&h, sizeof(h));
	tb_dgram_auth_wipe(ke, sizeof(ke));
	tb_dgram_auth_wipe(h0, sizeof(h0));
}

void tb_dgram_auth_wipe(void *p, size_t len)
{
	/* Through a volatile pointer, so the stores are not dropped as dead. */
	volatile uint8_t *b = p;

	while (len--)
		*b++ = 0;
}
