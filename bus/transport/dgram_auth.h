/*
 * dgram_auth.h - the tag that authenticates every ud and udp datagram
 * (packet.h), and the keys it is made with.
 *
 * Without it, anyone who can send to the group and has sniffed one datagram
 * (for the stream id and epoch) stops every subscriber with one forged END,
 * makes them drop the real stream with one far-future sequence, or takes it
 * over with epoch + 1.  With it, a subscriber acts on no field of a
 * datagram (END, epoch, sequence, frames) before its tag has verified.
 *
 * Keys.  The publisher and its subscribers already share a secret, the
 * stream's `token` (the one tb-recoveryd checks); nothing else is
 * exchanged.  Per stream and per publisher epoch:
 *
 *   stream key  K_s = HMAC-SHA256(key = token,
 *                                 "tickbus datagram v2" | stream_id LE32)
 *   epoch key   K_e = HMAC-SHA256(key = K_s, epoch LE64), first 16 bytes
 *
 * A subscriber derives K_e from the epoch in the header (HMAC, the AES
 * key schedule and the 128 powers of H that GHASH keeps: about 0.55 us
 * with VPCLMULQDQ, 0.9 us with PCLMULQDQ alone, measured; no more than
 * receiving the datagram cost, so a flood of datagrams with made-up epochs
 * buys an attacker little).
 *
 * Tag.  GMAC, i.e. AES-128-GCM with no plaintext (NIST SP 800-38D), under
 * K_e: the associated data is header bytes 0..47 (everything but the tag)
 * then the frames; the IV is the header's nonce (8 bytes LE) and 4 zero
 * bytes; the tag is the full 16 bytes.  GCM must never see one IV twice
 * under one key: each sender numbers its datagrams (the publishing thread
 * from 0, the heartbeat thread from TB_PACKET_NONCE_BEAT), and a key lives
 * one epoch, which a publisher opens once.
 *
 * What an attacker who sniffed epoch E can do:
 *   - forge nothing, in E or any later epoch: K_e is a PRF of the token, and
 *     tags of E say nothing about K_(E+1);
 *   - replay E's datagrams.  Within E a subscriber drops a nonce it has seen
 *     (dgram.h's replay window; a copy the fabric made counts the same).
 *     After the publisher restarts into E', replayed E datagrams carry an
 *     earlier `since` than E' and are refused as an older epoch;
 *   - read everything: this is authentication, not encryption;
 *   - guess the token offline from one sniffed datagram, if the token is
 *     guessable: it must be long and random (32 random bytes, say).
 * Whoever holds the token (every subscriber, and any host that can read it)
 * can forge the stream: the key is shared, so a tag proves "someone with the
 * token", not "the publisher".
 *
 * Why GMAC.  Measured on this machine's class (AES-NI, PCLMUL), nettle's
 * GMAC cost about 37 ns over a 128-byte datagram and 320 ns over 1440
 * bytes; UMAC-64 (nettle) 63 / 194 ns with an 8-byte tag and a 1.6 us key
 * schedule, OpenSSL's EVP GCM 183 / 272 ns (its per-call overhead
 * dominates small datagrams), libsodium's AES-GCM 55 / 282 ns and
 * Poly1305 90 / 425 ns.  What made a full datagram dear was nettle's
 * GHASH, one serial multiply per block (about 3.5 ns each); GHASH is now
 * tickbus's own (ghash.h: carry-less multiplication over the powers of H
 * kept in the key, one reduction per 128 blocks, VPCLMULQDQ where the CPU
 * has it), the same tag bit for bit; E_K(J0) stays nettle's AES.  Small
 * datagrams (one message each, batch_us = 0) are the latency path; a full
 * datagram's cost is shared by the messages in it.  `make bench`
 * (bench_udp) measures sign + verify against the udp round trip of small
 * and of full datagrams in the same run.
 *
 * Threads: a key is written once (tb_dgram_auth_key) and then only read,
 * so the publishing and heartbeat threads share one; each tag is computed
 * in a per-call state on the caller's stack.  sign and verify are hot: no
 * allocation, lock or system call.
 */
#ifndef TB_DGRAM_AUTH_H
#define TB_DGRAM_AUTH_H

#include "bus/transport/ghash.h"
#include "bus/transport/packet.h"

#include <nettle/aes.h>
#include <nettle/hmac.h>

#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The stream's root: HMAC-SHA256 keyed with K_s, ready to derive epochs. */
typedef struct tb_dgram_auth {
	struct hmac_sha256_ctx stream;
} tb_dgram_auth_t;

/* One epoch's key: GHASH's (H and its powers, ghash.h) and the AES key
 * schedule of K_e, for E_K(J0). */
typedef struct tb_dgram_key {
	tb_ghash_key_t h;
	struct aes128_ctx aes;
	uint64_t epoch;
} tb_dgram_key_t;

/* Derives K_s from `token` (NUL-terminated; "" is a key anyone can
 * derive, so a stream without a token is not protected) and `stream_id`.
 * Set-up; cannot fail. */
void tb_dgram_auth_init(tb_dgram_auth_t *a, const char *token,
			uint32_t stream_id);

/* Derives the key of `epoch` into *k.  About half a microsecond; not per
 * datagram, but may run on the receive path once per epoch seen. */
void tb_dgram_auth_key(const tb_dgram_auth_t *a, uint64_t epoch,
		       tb_dgram_key_t *k);

/* Forgets a key or a root (overwrites it). */
void tb_dgram_auth_wipe(void *p, size_t len);

/* GCM's J0 for a 96-bit IV (SP 800-38D): the datagram's nonce (8 bytes
 * little-endian, as the header carries it), 4 zero bytes, then the block
 * counter 1 (big-endian).  A sender that signs one datagram after another
 * keeps its next nonce here: only the first word changes per datagram, so
 * the AES input is ready without being built. */
typedef struct tb_dgram_j0 {
	uint64_t nonce;
	uint32_t zero;
	uint32_t one;  /* 1, big-endian */
} tb_dgram_j0_t;

_Static_assert(sizeof(tb_dgram_j0_t) == 16, "one AES block");

/* J0 of nonce `nonce`. */
static inline void tb_dgram_j0_init(tb_dgram_j0_t *j, uint64_t nonce)
{
	j->nonce = nonce;
	j->zero = 0;
	j->one = htobe32(1);
}

/* The tag from its two halves: E_K(J0) (already at `tag`) xor S.  Two
 * word operations: nettle's memxor3 is a call and a byte-length loop. */
static inline void tb_dgram_auth_mask(uint8_t tag[TB_PACKET_TAG_LEN],
				      const uint64_t s[2])
{
	uint64_t t[2];

	memcpy(t, tag, sizeof(t));
	t[0] ^= s[0];
	t[1] ^= s[1];
	memcpy(tag, t, sizeof(t));
}

/* The GMAC of the datagram whose authenticated bytes are the pieces at
 * `pc` (the header's first 48 bytes, then its frames), under J0 `j0`, into
 * `tag` (which no piece covers).  GHASH over the pieces, plus E_K(J0);
 * `s` holds the GHASH between the two.  The sender's fast path keeps `pc`
 * and `j0` ready between datagrams, and `s` beside them: with no buffer
 * on its stack, the offer has no frame to make (ud: 3 instructions an
 * offer). */
static inline void tb_dgram_auth_tag_pieces(const tb_dgram_key_t *k,
					    const tb_ghash_piece_t pc[2],
					    const tb_dgram_j0_t *j0,
					    uint8_t tag[TB_PACKET_TAG_LEN],
					    uint64_t s[2])
{
	_Static_assert(TB_PACKET_TAG_LEN == 16, "the full GCM tag");
	tb_ghash_digest(&k->h, pc, 2, (uint8_t *)s);
	aes128_encrypt(&k->aes, sizeof(*j0), tag, (const uint8_t *)j0);
	tb_dgram_auth_mask(tag, s);
}

/* The GMAC of a datagram whose header is `h` and whose frames (possibly
 * elsewhere in memory) are `frames_len` bytes at `frames`, into `tag`:
 * GHASH over the header's first 48 bytes (whole blocks) and the frames,
 * plus E_K(J0), J0 = nonce (LE64) | 0^32 | 1 (SP 800-38D, a 96-bit IV). */
static inline void tb_dgram_auth_tag(const tb_dgram_key_t *k,
				     const tb_packet_hdr_t *h,
				     const void *frames, size_t frames_len,
				     uint8_t tag[TB_PACKET_TAG_LEN])
{
	tb_dgram_j0_t j0;
	const tb_ghash_piece_t pc[2] = {{h, TB_PACKET_AUTH_LEN},
					{frames, frames_len}};
	uint64_t s[2];

	_Static_assert(TB_PACKET_AUTH_LEN % TB_GHASH_BLOCK == 0,
		       "the header is whole GHASH blocks");
	tb_dgram_j0_init(&j0, h->nonce); /* little-endian, as sent */
	tb_dgram_auth_tag_pieces(k, pc, &j0, tag, s);
}

/* Writes the tag of a datagram into its header.  Hot path. */
static inline void tb_dgram_auth_sign(const tb_dgram_key_t *k,
				      tb_packet_hdr_t *h, const void *frames,
				      size_t frames_len)
{
	tb_dgram_auth_tag(k, h, frames, frames_len, h->tag);
}

/* 1 when the `len`-byte datagram at `buf` (a whole header at least) carries
 * the right tag under `k`, else 0; compared in constant time.  Hot path. */
static inline int tb_dgram_auth_verify(const tb_dgram_key_t *k,
				       const void *buf, size_t len)
{
	const tb_packet_hdr_t *h = (const tb_packet_hdr_t *)buf;
	uint8_t tag[TB_PACKET_TAG_LEN];
	uint64_t want[2], got[2];

	tb_dgram_auth_tag(k, h, (const uint8_t *)buf + TB_PACKET_HDR_LEN,
			  len - TB_PACKET_HDR_LEN, tag);
	/* Constant time: every bit of both tags is read, one test at the
	 * end (in two words, not nettle's byte loop: it cost ~20 ns). */
	memcpy(want, h->tag, sizeof(want));
	memcpy(got, tag, sizeof(got));
	return ((want[0] ^ got[0]) | (want[1] ^ got[1])) == 0;
}

#endif
