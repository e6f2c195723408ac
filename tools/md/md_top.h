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

#include "tools/hash.h"

#include <stdint.h>

static inline uint64_t tb_md_top_hash(uint32_t instrument, int64_t bid_px,
				      uint64_t bid_qty, int64_t ask_px,
				      uint64_t ask_qty)
{
	uint64_t h = tb_hash_mix64(instrument + TB_HASH_GOLDEN);

	h = tb_hash_mix64(h ^ (uint64_t)bid_px);
	h = tb_hash_mix64(h ^ bid_qty);
	h = tb_hash_mix64(h ^ (uint64_t)ask_px);
	return tb_hash_mix64(h ^ ask_qty);
}

/* Feed prices (4 implied decimals) to the schema's exponent -9. */
#define TB_MD_TOP_PX_SCALE 100000

#endif
