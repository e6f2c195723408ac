/*
 * md_top.h - the top-of-book checksum the reference feed handler and the
 * reference strategy both print, so a test can prove that what the handler
 * published is what the strategy kept.
 *
 * Each instrument's last Quote is hashed (instrument, bid price, bid qty,
 * ask price, ask qty, as carried in the schema: -9 exponent, null values
 * as encoded), and the hashes are summed, wrapping, over instruments.  The
 * sum does not depend on the order instruments were seen in.
 */
#ifndef TB_MD_TOP_H
#define TB_MD_TOP_H

#include <stdint.h>

/* splitmix64 finaliser. */
static inline uint64_t tb_md_top_mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

static inline uint64_t tb_md_top_hash(uint32_t instrument, int64_t bid_px,
				      uint64_t bid_qty, int64_t ask_px,
				      uint64_t ask_qty)
{
	uint64_t h = tb_md_top_mix(instrument + 0x9e3779b97f4a7c15ull);

	h = tb_md_top_mix(h ^ (uint64_t)bid_px);
	h = tb_md_top_mix(h ^ bid_qty);
	h = tb_md_top_mix(h ^ (uint64_t)ask_px);
	return tb_md_top_mix(h ^ ask_qty);
}

/* Feed prices (4 implied decimals) to the schema's exponent -9. */
#define TB_MD_TOP_PX_SCALE 100000

#endif
