/*
 * demo_msg.h - the quote-like message that tb-publish sends and
 * tb-subscribe checks, and the stream their --shm PATH option names.
 *
 * Every byte of a message is a function of its sequence number, so a
 * subscriber can verify each payload on its own, and both ends keep a
 * running checksum of everything in sequence order: equal checksums at the
 * end prove the subscriber delivered exactly what was published.
 */
#ifndef TB_DEMO_MSG_H
#define TB_DEMO_MSG_H

#include <tickbus/tickbus.h>
#include "tools/hash.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define TB_DEMO_TEMPLATE_QUOTE 1
#define TB_DEMO_MIN_SIZE 48

typedef struct tb_demo_quote {
	uint64_t seq;        /* the message's own sequence number */
	uint32_t instrument;
	uint32_t bid_qty;
	int64_t bid_px;      /* price mantissa, exponent -4 */
	int64_t ask_px;
	uint32_t ask_qty;
	uint32_t flags;
	uint64_t mix;        /* the generator's state: one more check */
} tb_demo_quote_t;

_Static_assert(sizeof(tb_demo_quote_t) == TB_DEMO_MIN_SIZE, "quote layout");

/* Writes the `len`-byte message of sequence `seq` (len >= 48). */
static inline void tb_demo_fill(void *buf, uint32_t len, uint64_t seq)
{
	uint64_t m = tb_hash_mix64(seq + TB_HASH_GOLDEN);
	tb_demo_quote_t q;
	uint8_t *p = (uint8_t *)buf;
	uint32_t i;

	q.seq = seq;
	q.instrument = (uint32_t)(m % 500);
	q.bid_qty = 100 * (uint32_t)(1 + (m >> 12) % 50);
	q.bid_px = 1000000 + (int64_t)((m >> 20) % 20000);
	q.ask_px = q.bid_px + 1 + (int64_t)((m >> 40) % 5);
	q.ask_qty = 100 * (uint32_t)(1 + (m >> 50) % 50);
	q.flags = 0;
	q.mix = m;
	memcpy(p, &q, sizeof(q));
	for (i = sizeof(q); i < len; i++)
		p[i] = (uint8_t)(m >> ((i & 7) * 8)) ^ (uint8_t)i;
}

/* 1 if `buf` is exactly the message tb_demo_fill writes for `seq`. */
static inline int tb_demo_check(const void *buf, uint32_t len, uint64_t seq)
{
	uint8_t want[65536];

	if (len < TB_DEMO_MIN_SIZE || len > sizeof(want))
		return 0;
	tb_demo_fill(want, len, seq);
	return memcmp(want, buf, len) == 0;
}

/* Folds one message into a running checksum (FNV-1a over the bytes, then
 * mixed with the sequence so that order matters). */
static inline uint64_t tb_demo_sum(uint64_t sum, const void *buf, uint32_t len,
				   uint64_t seq)
{
	uint64_t h = tb_hash_fnv1a64(TB_HASH_FNV1A_INIT, buf, len);

	return tb_hash_mix64((sum ^ h ^ seq) + TB_HASH_GOLDEN);
}

/* The stream `--shm PATH` names, for a publisher and its subscribers to
 * meet without a configuration file: shm at `path`, stream id 1, name
 * "test", every other setting the default (tb_stream_cfg_init). */
static inline void tb_demo_shm_cfg(tb_stream_cfg_t *cfg, const char *path)
{
	tb_stream_cfg_init(cfg);
	snprintf(cfg->name, sizeof(cfg->name), "test");
	cfg->id = 1;
	cfg->transport = TB_TRANSPORT_SHM;
	snprintf(cfg->shm_path, sizeof(cfg->shm_path), "%s", path);
}

#endif
