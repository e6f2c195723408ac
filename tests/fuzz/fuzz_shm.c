/*
 * fuzz_shm.c - libFuzzer target for the shm reader's frame path
 * (bus/transport/shm.h, tb_shm_reader_poll): what a subscriber does with
 * the bytes of a ring it maps, whoever wrote them.
 *
 * The input sets up a reader attached to a format-2 ring in memory (the
 * reader polls each frame's own sequence word; transport/shm.h), then
 * fills the ring:
 *   u8   ring size 1 KiB << (b & 3), the largest frame a ring of it allows
 *        (tb_ring_max_frame); bit 2: the reader's tracker has started
 *        (expected sequence from the input) or takes the first frame it
 *        sees; bit 3: the writer's marks are changing (gen odd)
 *   u64  the reader's position (free-running; only its low bits place it;
 *        rounded down to TB_FRAME_ALIGN, as positions always are)
 *   u16  the writer's intent, ahead of the position by this much modulo
 *        two ring sizes (beyond one ring: the reader was lapped)
 *   u16  the writer's newest mark, ahead of the position by this much
 *        modulo two ring sizes (aligned), and
 *   u64  the sequence of the frame there
 *   u64  the sequence the frame at the position must carry (0 means 1)
 *   u8   frames a poll may deliver, 1..16
 *   ...  the ring's bytes from offset 0 (the rest is zero)
 * The ring, the header and the reader's frame buffer are each allocated
 * at exactly their size, so that ASan sees any read past them.  The reader
 * then polls 64 times (fewer than the 256 empty polls after which it would
 * look at the writer's liveness).
 *
 * What it asserts, beyond "no crash, no sanitizer report":
 *   - every message handed to the handler is a data frame's payload in the
 *     reader's own buffer, no larger than the ring's largest frame allows;
 *   - messages come in sequence order: each carries the sequence expected
 *     before it (or, before the reader started, any), and the tracker moves
 *     one past it;
 *   - a poll returns a count of at most its limit, or a loss: TB_GAP or
 *     TB_LAPPED with a range that starts at the sequence expected and is
 *     not empty, after which that range's end + 1 is expected; nothing
 *     else on an attached, open ring.
 */
#include "bus/error.h"
#include "bus/ring.h"
#include "bus/transport/shm.h"
#include "tests/fuzz/fuzz_util.h"

#include <stdlib.h>
#include <string.h>

typedef struct seen {
	tb_shm_reader_t *r;
	tb_seq_t *seq;
	uint64_t expected; /* before this message */
	int delivered;
} seen_t;

static void on_msg(void *clientd, const tb_msg_t *m)
{
	seen_t *s = clientd;

	if ((const uint8_t *)m->data != s->r->scratch + TB_FRAME_HDR_LEN ||
	    m->len > s->r->max_frame - TB_FRAME_HDR_LEN)
		abort();
	if (s->expected != 0 && m->seq != s->expected)
		abort();
	s->expected = m->seq + 1;
	s->delivered++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	tb_shm_reader_t r;
	tb_shm_hdr_t *hdr;
	tb_seq_range_t loss;
	tb_seq_t seq;
	fuzz_in_t in;
	uint64_t ring_size, expected;
	uint8_t *ring, sel;
	const uint8_t *fill;
	size_t fill_len;
	int limit;

	fuzz_in_init(&in, data, size);
	sel = fuzz_u8(&in);
	ring_size = UINT64_C(1024) << (sel & 3);
	hdr = aligned_alloc(64, sizeof(*hdr));
	ring = aligned_alloc(64, ring_size);
	if (!hdr || !ring)
		abort();
	memset(hdr, 0, sizeof(*hdr));
	memset(ring, 0, ring_size);

	memset(&r, 0, sizeof(r));
	r.hdr = hdr;
	r.lap = &hdr->lap;
	r.ring = ring;
	r.mask = ring_size - 1;
	r.max_frame = tb_ring_max_frame(ring_size);
	r.max_space = tb_frame_space(r.max_frame);
	r.max_body = r.max_space - TB_FRAME_HDR_LEN;
	r.scratch = malloc(r.max_space);
	if (!r.scratch)
		abort();
	r.state = TB_SHM_R_ATTACHED;
	r.epoch = 1;
	r.stream_id = 1;
	r.liveness_ns = UINT64_MAX; /* never judged dead here */
	/* Frames start at TB_FRAME_ALIGN boundaries, so positions do. */
	r.pos = fuzz_u64(&in) & ~(uint64_t)(TB_FRAME_ALIGN - 1);
	hdr->ring_size = ring_size;
	hdr->max_frame = r.max_frame;
	hdr->chunk = (uint32_t)tb_ring_chunk(ring_size);
	hdr->state = TB_SHM_OPEN;
	hdr->lap.intent = r.pos + fuzz_u16(&in) % (2 * ring_size + 1);
	hdr->lap.mark_pos = (r.pos + fuzz_u16(&in) % (2 * ring_size + 1)) &
			    ~(uint64_t)(TB_FRAME_ALIGN - 1);
	hdr->lap.mark_seq = fuzz_u64(&in);
	hdr->lap.gen = sel & 8 ? 1 : 2;
	expected = fuzz_u64(&in);
	r.next = expected ? expected : 1;
	tb_seq_init(&seq, sel & 4 ? r.next : 0);
	limit = 1 + fuzz_u8(&in) % 16;
	fill = fuzz_bytes(&in, ring_size, &fill_len);
	memcpy(ring, fill, fill_len);

	for (int poll = 0; poll < 64; poll++) {
		seen_t s = {&r, &seq, seq.expected, 0};
		uint64_t before = seq.expected;
		int n = tb_shm_reader_poll(&r, &seq, &loss, on_msg, &s, limit);

		if (n >= 0) {
			if (n > limit || n != s.delivered)
				abort();
			if (n > 0 && seq.expected != s.expected)
				abort();
			continue;
		}
		if (n != TB_GAP && n != TB_LAPPED)
			abort();
		if (s.delivered != 0 || before == 0 || loss.first != before ||
		    loss.last < loss.first || seq.expected != loss.last + 1)
			abort();
	}
	free(r.scratch);
	free(ring);
	free(hdr);
	return 0;
}
