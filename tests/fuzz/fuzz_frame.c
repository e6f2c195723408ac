/*
 * fuzz_frame.c - libFuzzer target for the frame decoder (bus/frame.h):
 * tb_frame_check, the walk from frame to frame by tb_frame_space, and
 * tb_frame_to_msg.
 *
 * The input is a stretch of ring memory: frames end to end from offset 0,
 * each at a TB_FRAME_ALIGN boundary, copied into a buffer of exactly the
 * input's size (malloc-aligned, as a ring is) so that ASan sees any read
 * past it.  The walk checks each frame against the bytes that remain and
 * stops at the first one that does not check.
 *
 * What it asserts, beyond "no crash, no sanitizer report":
 *   - tb_frame_check returns a length of at least a header, within the
 *     bytes given and TB_FRAME_MAX_LEN, for a frame of the known version
 *     and types, or TB_EPROTO / TB_EFORMAT; fewer bytes than a header is
 *     always TB_EPROTO;
 *   - checking the same frame with exactly its length available gives
 *     the same answer (the check reads nothing past the frame);
 *   - tb_frame_space is the length rounded up to TB_FRAME_ALIGN;
 *   - a data frame's message covers exactly its payload, and its header
 *     written again by tb_frame_init (with its flags and reserved field)
 *     is the same 32 bytes.
 */
#include "bus/error.h"
#include "bus/frame.h"
#include "tests/fuzz/fuzz_util.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_one(const uint8_t *buf, size_t avail, int64_t n)
{
	const tb_frame_hdr_t *f = (const tb_frame_hdr_t *)buf;
	tb_frame_hdr_t again;
	uint32_t space;
	tb_msg_t m;

	if (n < TB_FRAME_HDR_LEN || (size_t)n > avail || n > TB_FRAME_MAX_LEN ||
	    n != f->length || f->version != TB_FRAME_VERSION ||
	    f->type < TB_FRAME_DATA || f->type > TB_FRAME_HEARTBEAT)
		abort();
	if (tb_frame_check(buf, (size_t)n) != n)
		abort();
	space = tb_frame_space((uint32_t)n);
	if (space < n || space - n >= TB_FRAME_ALIGN || space % TB_FRAME_ALIGN)
		abort();
	if (f->type != TB_FRAME_DATA)
		return;
	tb_frame_to_msg(f, &m);
	if ((const uint8_t *)m.data != buf + TB_FRAME_HDR_LEN || m.len != n - TB_FRAME_HDR_LEN ||
	    m.seq != f->seq || m.stream_id != f->stream_id ||
	    m.template_id != f->template_id ||
	    (m.flags != 0) != ((f->flags & TB_FRAME_F_REPLAY) != 0))
		abort();
	tb_frame_init(&again, m.len, f->template_id, f->stream_id, f->seq,
		      f->publish_ns);
	again.flags = f->flags;
	again.reserved = f->reserved;
	if (memcmp(&again, f, sizeof(again)) != 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *ring = fuzz_copy(data, size);
	size_t off = 0;

	while (off <= size) {
		const uint8_t *at = ring + off;
		size_t avail = size - off;
		int64_t n = tb_frame_check(at, avail);
		const tb_frame_hdr_t *f = (const tb_frame_hdr_t *)at;

		if (n < 0) {
			if (n != TB_EPROTO && n != TB_EFORMAT)
				abort();
			if (avail < TB_FRAME_HDR_LEN && n != TB_EPROTO)
				abort();
			break;
		}
		check_one(at, avail, n);
		/* A padding frame's length is the space it covers. */
		off += f->type == TB_FRAME_PAD ? (size_t)n :
		       tb_frame_space((uint32_t)n);
		if (off % TB_FRAME_ALIGN)
			break; /* a pad of an odd length: nothing after it aligns */
	}
	free(ring);
	return 0;
}
