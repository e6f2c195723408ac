/*
 * fuzz_itch.c - libFuzzer target for the MoldUDP64 and ITCH decoders
 * (tools/md/mold.c, tools/md/itch.c), the feed's first contact with bytes
 * from the network.
 *
 * Build and run (from the top of the tree; not part of `make`):
 *
 *   mkdir -p build/fuzz
 *   clang -std=gnu11 -D_GNU_SOURCE -g -O1 -I. \
 *       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
 *       tests/fuzz/fuzz_itch.c tools/md/mold.c tools/md/itch.c \
 *       -o build/fuzz/fuzz_itch
 *   build/fuzz/fuzz_itch -max_total_time=20 -max_len=1500
 *
 * The input is read as a downstream packet (a packet that parses must walk
 * to exactly its blocks, and every message in it that decodes must
 * re-encode to the same bytes), as one ITCH message on its own, and as a
 * re-request (one that decodes re-encodes to the same 20 bytes).
 */
#include "tools/md/itch.h"
#include "tools/md/mold.h"

#include <stdlib.h>
#include <string.h>

static void check_msg(const uint8_t *msg, size_t len)
{
	tb_itch_msg_t m;
	uint8_t again[64];

	if (tb_itch_decode(msg, len, &m) != 0)
		return;
	if (tb_itch_encode(&m, again, sizeof(again)) != (int)len ||
	    memcmp(again, msg, len) != 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	tb_mold_pkt_t p;
	tb_mold_req_t r;

	if (tb_mold_parse(data, size, &p) == 0) {
		const uint8_t *msg;
		size_t off = 0, len, n = 0;

		while (tb_mold_next(&p, &off, &msg, &len)) {
			if (msg < p.blocks || msg + len > p.blocks + p.blocks_len)
				abort();
			check_msg(msg, len);
			n++;
		}
		if (p.count == TB_MOLD_COUNT_HEARTBEAT ||
		    p.count == TB_MOLD_COUNT_END) {
			if (n != 0 || p.blocks_len != 0)
				abort();
		} else if (n != p.count || off != p.blocks_len) {
			abort();
		}
	}
	check_msg(data, size);
	if (tb_mold_req_decode(data, size, &r) == 0) {
		uint8_t again[TB_MOLD_REQ_LEN];

		tb_mold_req_encode(again, r.session, r.seq, r.count);
		if (memcmp(again, data, TB_MOLD_REQ_LEN) != 0)
			abort();
	}
	return 0;
}
