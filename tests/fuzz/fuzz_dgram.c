/*
 * fuzz_dgram.c - libFuzzer target for the datagram packet and the receive
 * path of ud and udp (bus/transport/packet.h, dgram.h, dgram.c): whole
 * datagrams, as a subscriber's socket or UD queue hands them over, fed
 * through tb_dgram_rx_input one after the other.
 *
 * The input is:
 *   u8   frames a call may deliver, 1 + b % 8
 *   then datagrams, each a u16 length and its bytes (fuzz_util.h), for
 *   stream 1; each is copied into a buffer of exactly its size.
 *
 * Each datagram is first checked and walked on its own (tb_packet_check,
 * tb_packet_frame_next), then given to a receiver that keeps its state
 * across the input's datagrams: input is called again while it says the
 * datagram is not done (a condition, or a full batch), as a transport's
 * poll does.
 *
 * What it asserts, beyond "no crash, no sanitizer report":
 *   - a datagram that checks has a header that says so: magic, version,
 *     length equal to the bytes, stream 1, known flags; a control one
 *     (heartbeat, end) is a bare header; frames walked are data frames of
 *     stream 1, inside the datagram, carrying first_seq, first_seq + 1, ...,
 *     at most `count` of them;
 *   - a call delivers at most its limit; every message lies inside the
 *     datagram, is a frame of stream 1, and carries the sequence the
 *     receiver expected (any, before it has started), which then moves one
 *     past it;
 *   - a condition comes only from a call that delivered nothing, and is one
 *     of TB_GAP (a range starting at the sequence expected, not empty, its
 *     end + 1 expected after it), TB_NEW_EPOCH (sequences restart at 1) or
 *     TB_CLOSED;
 *   - the receiver finishes with every datagram in a bounded number of
 *     calls.
 */
#include "bus/error.h"
#include "bus/transport/dgram.h"
#include "tests/fuzz/fuzz_util.h"

#include <stdlib.h>
#include <string.h>

#define STREAM 1

typedef struct seen {
	const uint8_t *buf;
	size_t len;
	uint64_t expected;
	int delivered;
} seen_t;

static void on_msg(void *clientd, const tb_msg_t *m)
{
	seen_t *s = clientd;

	const uint8_t *d = (const uint8_t *)m->data;

	if (d < s->buf + TB_PACKET_HDR_LEN + TB_FRAME_HDR_LEN ||
	    d + m->len > s->buf + s->len || m->stream_id != STREAM)
		abort();
	if (s->expected != 0 && m->seq != s->expected)
		abort();
	s->expected = m->seq + 1;
	s->delivered++;
}

/* The datagram on its own: what the check accepts, and the walk. */
static void check_packet(const uint8_t *buf, size_t len)
{
	const tb_packet_hdr_t *p = (const tb_packet_hdr_t *)buf;
	enum tb_packet_fault fault = tb_packet_check(buf, len, STREAM);
	const tb_frame_hdr_t *f;
	tb_packet_iter_t it;
	unsigned n = 0;

	if ((unsigned)fault >= TB_PACKET_FAULT_COUNT)
		abort();
	if (fault != TB_PACKET_OK)
		return;
	if (p->magic != TB_PACKET_MAGIC || p->version != TB_PACKET_VERSION ||
	    p->length != len || p->stream_id != STREAM ||
	    (p->flags & ~TB_PACKET_F_ALL))
		abort();
	if (p->flags) {
		if (p->count != 0 || len != TB_PACKET_HDR_LEN)
			abort();
		return;
	}
	tb_packet_iter_init(&it, buf, len);
	while ((f = tb_packet_frame_next(&it, &fault))) {
		const uint8_t *at = (const uint8_t *)f;

		if (at < buf + TB_PACKET_HDR_LEN || at + f->length > buf + len ||
		    f->type != TB_FRAME_DATA || f->stream_id != STREAM ||
		    f->seq != p->first_seq + n || ++n > p->count)
			abort();
	}
	if ((unsigned)fault >= TB_PACKET_FAULT_COUNT)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	tb_dgram_rx_t rx;
	tb_seq_range_t loss;
	tb_seq_t seq;
	fuzz_in_t in;
	const uint8_t *piece;
	size_t len;
	uint64_t now = 1000000000ull;
	int limit;

	fuzz_in_init(&in, data, size);
	limit = 1 + fuzz_u8(&in) % 8;
	tb_dgram_rx_init(&rx, STREAM, 1000);
	tb_seq_init(&seq, 0);
	while ((piece = fuzz_piece(&in, &len))) {
		uint8_t *buf = fuzz_copy(piece, len);
		int done = 0, calls = 0;

		check_packet(buf, len);
		/* A datagram holds at most len / 32 frames: that many full
		 * batches, plus a condition before each, plus the last call. */
		while (!done) {
			seen_t s = {buf, len, seq.expected, 0};
			uint64_t before = seq.expected;
			int n = tb_dgram_rx_input(&rx, &seq, &loss, buf, len, now,
						  on_msg, &s, limit, 0, &done);

			if (++calls > 2 * (int)(len / TB_FRAME_ALIGN) + 4)
				abort();
			if (n >= 0) {
				if (n > limit || n != s.delivered ||
				    (n > 0 && seq.expected != s.expected))
					abort();
				continue;
			}
			if (s.delivered != 0)
				abort();
			switch (n) {
			case TB_GAP:
				if (before == 0 || loss.first != before ||
				    loss.last < loss.first ||
				    seq.expected != loss.last + 1)
					abort();
				break;
			case TB_NEW_EPOCH:
				if (seq.expected != 1)
					abort();
				break;
			case TB_CLOSED:
				break;
			default:
				abort();
			}
		}
		free(buf);
		now += 1000;
	}
	return 0;
}
