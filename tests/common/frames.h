/*
 * frames.h - tickbus frames and datagrams made by hand for tests, and the
 * check of what a receiver was given.
 *
 * The default payload of sequence s is every byte (uint8_t)s
 * (frames_fill_seq), so that any frame can be checked on its own
 * (frames_payload_bad) and a frame delivered under the wrong sequence
 * shows.
 */
#ifndef TB_TEST_FRAMES_H
#define TB_TEST_FRAMES_H

#include "bus/frame.h"
#include "bus/transport/packet.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Writes the payload of sequence `seq`. */
typedef void (*frames_fill_fn)(uint8_t *payload, uint32_t len, uint64_t seq);

static inline void frames_fill_seq(uint8_t *payload, uint32_t len, uint64_t seq)
{
	memset(payload, (int)(seq & 0xff), len);
}

/* Payload bytes of `f` other than what frames_fill_seq writes. */
static inline uint64_t frames_payload_bad(const tb_frame_hdr_t *f)
{
	const uint8_t *p = (const uint8_t *)f + TB_FRAME_HDR_LEN;
	uint64_t bad = 0;

	for (uint32_t i = 0; i < f->length - TB_FRAME_HDR_LEN; i++)
		if (p[i] != (uint8_t)(f->seq & 0xff))
			bad++;
	return bad;
}

/* Writes at `buf` a data frame of stream `stream`, sequence `seq`, with
 * `payload` bytes written by `fill` (NULL: frames_fill_seq); returns the
 * bytes it takes in a ring or datagram (tb_frame_space). */
static inline uint32_t frames_put(void *buf, uint32_t stream, uint64_t seq,
				  uint32_t payload, uint16_t template_id,
				  uint64_t publish_ns, frames_fill_fn fill)
{
	tb_frame_hdr_t *f = buf;

	tb_frame_init(f, payload, template_id, stream, seq, publish_ns);
	(fill ? fill : frames_fill_seq)(tb_frame_payload(f), payload, seq);
	return tb_frame_space(f->length);
}

/* Writes at `buf` (zeroed first, `cap` bytes, 8-byte aligned) a data
 * datagram of stream `stream` and `epoch`: the packet header, then
 * `count` frames from `first`, as frames_put writes them.  Returns its
 * length. */
static inline size_t frames_datagram(uint8_t *buf, size_t cap, uint32_t stream,
				     uint64_t epoch, uint64_t first, int count,
				     uint32_t payload, uint16_t template_id,
				     frames_fill_fn fill)
{
	size_t off = TB_PACKET_HDR_LEN;

	memset(buf, 0, cap);
	for (int i = 0; i < count; i++)
		off += frames_put(buf + off, stream, first + (uint64_t)i, payload,
				  template_id, 0, fill);
	tb_packet_init((tb_packet_hdr_t *)buf, 0, stream, epoch, first,
		       (uint16_t)count, (uint32_t)off);
	return off;
}

/* Writes at `buf` a heartbeat or END datagram (`flag`, TB_PACKET_F_*)
 * naming `next`; returns its length. */
static inline size_t frames_control_datagram(uint8_t *buf, uint32_t stream,
					     uint64_t epoch, uint8_t flag,
					     uint64_t next)
{
	tb_packet_init((tb_packet_hdr_t *)buf, flag, stream, epoch, next, 0,
		       TB_PACKET_HDR_LEN);
	return TB_PACKET_HDR_LEN;
}

/* What a receiver of frames was given: how many, the sequence it expects
 * next (0 before the first), and how many were wrong. */
typedef struct frames_got {
	uint64_t n, next, bad;
} frames_got_t;

/* Counts `f` into `g`: wrong unless it follows the last one given (any
 * sequence may come first) and carries frames_fill_seq's payload. */
static inline void frames_got_add(frames_got_t *g, const tb_frame_hdr_t *f)
{
	if (g->next && f->seq != g->next)
		g->bad++;
	g->bad += frames_payload_bad(f);
	g->next = f->seq + 1;
	g->n++;
}

#endif
