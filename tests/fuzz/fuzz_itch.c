/*
 * fuzz_itch.c - libFuzzer target for the MoldUDP64 and ITCH decoders
 * (tools/md/mold.c, tools/md/itch.c), the feed's first contact with bytes
 * from the network.
 *
 * `make fuzz` builds it with libFuzzer and runs it (see the Makefile's
 * top); `make test` replays its corpus, tests/fuzz/corpus/itch/, through
 * it (tests/fuzz/replay.c).
 *
 * The input is read as a downstream packet (a packet that parses must walk
 * to exactly its blocks, every message in it that decodes must re-encode
 * to the same bytes, and the packet built again by the feed simulator's
 * builder from its header and blocks is the same bytes), as one ITCH
 * message on its own, and as a re-request (one that decodes re-encodes to
 * the same 20 bytes).  Every refusal has a name.
 */
#include "tools/md/itch.h"
#include "tools/md/mold.h"

#include <stdlib.h>
#include <string.h>

static void check_msg(const uint8_t *msg, size_t len)
{
	tb_itch_msg_t m;
	uint8_t again[64];
	int rc = tb_itch_decode(msg, len, &m);

	if (!tb_itch_strerror(rc) || (len && tb_itch_msg_len(msg[0]) > 64))
		abort();
	if (rc != 0)
		return;
	if (tb_itch_encode(&m, again, sizeof(again)) != (int)len ||
	    memcmp(again, msg, len) != 0)
		abort();
}

/* The packet built again from what parse found: the same bytes. */
static void rebuild(const tb_mold_pkt_t *p, const uint8_t *data, size_t size)
{
	static uint8_t again[65536 + TB_MOLD_HDR_LEN];
	tb_mold_builder_t b;
	const uint8_t *msg;
	size_t off = 0, len, n;

	if (p->count == TB_MOLD_COUNT_HEARTBEAT || p->count == TB_MOLD_COUNT_END) {
		n = tb_mold_write_ctl(again, p->session, p->seq, p->count);
	} else {
		if (tb_mold_build_begin(&b, again, sizeof(again), p->session,
					p->seq) != 0)
			abort();
		while (tb_mold_next(p, &off, &msg, &len))
			if (tb_mold_build_add(&b, msg, len) != 0)
				abort();
		n = tb_mold_build_end(&b);
	}
	if (n != size || memcmp(again, data, size) != 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	tb_mold_pkt_t p;
	tb_mold_req_t r;

	int rc = tb_mold_parse(data, size, &p);

	if (!tb_mold_strerror(rc))
		abort();
	if (rc == 0) {
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
		rebuild(&p, data, size);
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
