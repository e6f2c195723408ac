/*
 * frame.h - the tickbus frame: the unit every transport carries.
 *
 * A frame is a fixed 32-byte header followed by the payload.  Frames are laid
 * end to end at TB_FRAME_ALIGN boundaries in rings and datagrams; the header's
 * `length` is the unaligned length (header + payload), the space a frame
 * occupies is tb_frame_space(length).  A frame never straddles the end of a
 * ring: the writer fills the tail with one padding frame (type TB_FRAME_PAD)
 * and starts again at offset 0.
 *
 *   offset  size  field
 *        0     4  length       header + payload bytes, unaligned
 *        4     1  version      TB_FRAME_VERSION
 *        5     1  type         TB_FRAME_DATA, TB_FRAME_PAD, TB_FRAME_HEARTBEAT
 *        6     2  template_id  the payload's schema template
 *        8     2  flags        TB_FRAME_F_*
 *       10     2  reserved     zero
 *       12     4  stream_id
 *       16     8  seq          1, 2, 3, ... within a publisher epoch
 *       24     8  publish_ns   tb_clock_now_ns() at publish
 *
 * All fields little-endian (the hosts are).  Encoding and decoding are
 * static inline: they are on every hot path.  tb_frame_check() validates a
 * frame read from untrusted memory before anything else looks at it.
 */
#ifndef TB_FRAME_H
#define TB_FRAME_H

#include "bus/barrier.h"
#include <tickbus/tickbus.h>
#include <tickbus/tickbus_err.h>

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define TB_FRAME_VERSION 1
#define TB_FRAME_HDR_LEN 32
/* 32 bytes: a header plus up to 32 bytes of payload share one cache line
 * when the frame starts on one; keeps small quotes dense. */
#define TB_FRAME_ALIGN 32
/* A frame's length field is 32 bits, but no transport carries more than this
 * in one frame; larger messages are refused at offer with TB_EMSGSIZE. */
#define TB_FRAME_MAX_LEN (16u << 20)

enum tb_frame_type {
	TB_FRAME_DATA = 1,
	TB_FRAME_PAD = 2,
	TB_FRAME_HEARTBEAT = 3,
};

enum tb_frame_flag {
	TB_FRAME_F_REPLAY = 1u << 0,  /* delivered by recovery, not live */
};

typedef struct tb_frame_hdr {
	uint32_t length;
	uint8_t version;
	uint8_t type;
	uint16_t template_id;
	uint16_t flags;
	uint16_t reserved;
	uint32_t stream_id;
	uint64_t seq;
	uint64_t publish_ns;
} tb_frame_hdr_t;

_Static_assert(offsetof(tb_frame_hdr_t, length) == 0, "frame layout");
_Static_assert(offsetof(tb_frame_hdr_t, version) == 4, "frame layout");
_Static_assert(offsetof(tb_frame_hdr_t, type) == 5, "frame layout");
_Static_assert(offsetof(tb_frame_hdr_t, template_id) == 6, "frame layout");
_Static_assert(offsetof(tb_frame_hdr_t, flags) == 8, "frame layout");
_Static_assert(offsetof(tb_frame_hdr_t, reserved) == 10, "frame layout");
_Static_assert(offsetof(tb_frame_hdr_t, stream_id) == 12, "frame layout");
_Static_assert(offsetof(tb_frame_hdr_t, seq) == 16, "frame layout");
_Static_assert(offsetof(tb_frame_hdr_t, publish_ns) == 24, "frame layout");
_Static_assert(sizeof(tb_frame_hdr_t) == TB_FRAME_HDR_LEN, "frame layout");
_Static_assert((TB_FRAME_ALIGN & (TB_FRAME_ALIGN - 1)) == 0, "power of two");

/* A frame's version and type as one 16-bit word (bytes 4 and 5), so that a
 * hot path checks both with one compare: tb_frame_kind(f) ==
 * TB_FRAME_KIND(TB_FRAME_DATA). */
#define TB_FRAME_KIND(type) ((uint16_t)(TB_FRAME_VERSION | (unsigned)(type) << 8))

static inline uint16_t tb_frame_kind(const tb_frame_hdr_t *f)
{
	uint16_t k;

	memcpy(&k, &f->version, sizeof(k));
	return k;
}

/* Bytes a frame of `length` occupies in a ring or datagram. */
static inline uint32_t tb_frame_space(uint32_t length)
{
	return (length + (TB_FRAME_ALIGN - 1)) & ~(uint32_t)(TB_FRAME_ALIGN - 1);
}

static inline void *tb_frame_payload(tb_frame_hdr_t *f)
{
	return (uint8_t *)f + TB_FRAME_HDR_LEN;
}

static inline uint32_t tb_frame_payload_len(const tb_frame_hdr_t *f)
{
	return f->length - TB_FRAME_HDR_LEN;
}

/* Copies a message's `len` bytes into a frame.  Hot path: up to 64 bytes
 * (a quote) in a few overlapping moves inline, no call; more by memcpy. */
static inline void tb_frame_copy_payload(void *dst, const void *src,
					 uint32_t len)
{
	uint8_t *d = (uint8_t *)dst;
	const uint8_t *s = (const uint8_t *)src;

	if (tb_unlikely(len > 64)) {
		memcpy(d, s, len);
	} else if (tb_likely(len > 32)) {
		/* Head and tail 32 bytes, overlapping instead of looping.
		 * Tested first and laid out straight: most quotes are 33 to
		 * 64 bytes, and take one compare and no jump (2 instructions
		 * less than after the 16-byte case's). */
		memcpy(d, s, 32);
		memcpy(d + len - 32, s + len - 32, 32);
	} else if (len >= 16) {
		memcpy(d, s, 16);
		memcpy(d + len - 16, s + len - 16, 16);
	} else if (len >= 8) {
		memcpy(d, s, 8);
		memcpy(d + len - 8, s + len - 8, 8);
	} else if (len >= 4) {
		memcpy(d, s, 4);
		memcpy(d + len - 4, s + len - 4, 4);
	} else if (len >= 2) {
		memcpy(d, s, 2);
		memcpy(d + len - 2, s + len - 2, 2);
	} else if (len) {
		/* No loop: a loop's counter is a register more, saved by
		 * every offer that inlines this. */
		d[0] = s[0];
	}
}

/* What a handler sees of data frame `f`: everything but receive_ns, which
 * the transport stamps.  Hot path. */
static inline void tb_frame_to_msg(const tb_frame_hdr_t *f, tb_msg_t *m)
{
	m->data = (const uint8_t *)f + TB_FRAME_HDR_LEN;
	m->len = f->length - TB_FRAME_HDR_LEN;
	m->template_id = f->template_id;
	m->flags = f->flags & TB_FRAME_F_REPLAY ? TB_MSG_F_REPLAY : 0;
	m->stream_id = f->stream_id;
	m->seq = f->seq;
	m->publish_ns = f->publish_ns;
}

/* The header's bytes 8 to 15 of every data frame of stream `stream_id`
 * (flags and reserved 0, the stream), as one word for
 * tb_frame_init_body_ids.  Set-up. */
static inline uint64_t tb_frame_ids(uint32_t stream_id)
{
	tb_frame_hdr_t h;
	uint64_t w;

	memset(&h, 0, sizeof(h));
	h.stream_id = stream_id;
	memcpy(&w, &h.flags, sizeof(w));
	return w;
}

/* tb_frame_init_body (below) with flags, reserved and the stream as
 * `ids`, from tb_frame_ids: one store for the three, the word made once
 * (the publisher's offer).  Version, type and template go as one 32-bit
 * word too (tb_frame_kind's order): a shift and an or, where a 16-bit
 * constant costs a load and a store of its own (the compiler avoids
 * 16-bit immediates): 1 instruction an offer, bench_rc's and
 * bench_shm's callgrind.  Hot path. */
static inline void tb_frame_init_body_ids(tb_frame_hdr_t *f,
					  uint32_t payload_len,
					  uint16_t template_id, uint64_t ids,
					  uint64_t publish_ns)
{
	_Static_assert(offsetof(tb_frame_hdr_t, stream_id) ==
		       offsetof(tb_frame_hdr_t, flags) + 4 &&
		       offsetof(tb_frame_hdr_t, seq) ==
		       offsetof(tb_frame_hdr_t, flags) + 8,
		       "flags, reserved and the stream are one word");
	_Static_assert(offsetof(tb_frame_hdr_t, template_id) ==
		       offsetof(tb_frame_hdr_t, version) + 2,
		       "version, type and template are one word");
	uint32_t kind_template = TB_FRAME_KIND(TB_FRAME_DATA) |
				 (uint32_t)template_id << 16;

	f->length = payload_len + TB_FRAME_HDR_LEN;
	memcpy(&f->version, &kind_template, sizeof(kind_template));
	memcpy(&f->flags, &ids, sizeof(ids));
	f->publish_ns = publish_ns;
}

/* Fills the header of a data frame but its sequence number.  In a ring the
 * sequence is the frame's commit word: tb_ring_commit stores it last, with
 * release, so that a reader polling it finds the rest whole (ring.h).  Hot
 * path: no allocation, lock or system call. */
static inline void tb_frame_init_body(tb_frame_hdr_t *f, uint32_t payload_len,
				      uint16_t template_id, uint32_t stream_id,
				      uint64_t publish_ns)
{
	tb_frame_init_body_ids(f, payload_len, template_id,
			       tb_frame_ids(stream_id), publish_ns);
}

/* Fills the whole header of a data frame, for frames outside a ring (a
 * datagram, a replay buffer).  Hot path. */
static inline void tb_frame_init(tb_frame_hdr_t *f, uint32_t payload_len,
				 uint16_t template_id, uint32_t stream_id,
				 uint64_t seq, uint64_t publish_ns)
{
	tb_frame_init_body(f, payload_len, template_id, stream_id, publish_ns);
	f->seq = seq;
}

/* A padding frame's header covering `space` bytes (a multiple of
 * TB_FRAME_ALIGN, at least TB_FRAME_HDR_LEN), but its sequence number,
 * which a ring's commit stores last (ring.h). */
static inline void tb_frame_init_pad_body(tb_frame_hdr_t *f, uint32_t space,
					  uint32_t stream_id)
{
	f->length = space;
	f->version = TB_FRAME_VERSION;
	f->type = TB_FRAME_PAD;
	f->template_id = 0;
	f->flags = 0;
	f->reserved = 0;
	f->stream_id = stream_id;
	f->publish_ns = 0;
}

/* A whole padding frame.  It carries the sequence number of the frame that
 * follows it, so a reader can cross-check the wrap. */
static inline void tb_frame_init_pad(tb_frame_hdr_t *f, uint32_t space,
				     uint32_t stream_id, uint64_t next_seq)
{
	tb_frame_init_pad_body(f, space, stream_id);
	f->seq = next_seq;
}

/*
 * Validates the frame at `buf`, of which `avail` bytes may be read.  Checks,
 * in order: room for a header, version, type, length at least a header, length
 * within `avail` and TB_FRAME_MAX_LEN.  Returns the frame's length (> 0) or a
 * negative code: TB_EPROTO for a short buffer or bad length, TB_EFORMAT for
 * a bad version or type.  Never reads past `avail`.
 */
static inline int64_t tb_frame_check(const void *buf, size_t avail)
{
	const tb_frame_hdr_t *f = (const tb_frame_hdr_t *)buf;

	if (tb_unlikely(avail < TB_FRAME_HDR_LEN))
		return TB_EPROTO;
	if (tb_unlikely(f->version != TB_FRAME_VERSION))
		return TB_EFORMAT;
	if (tb_unlikely(f->type < TB_FRAME_DATA || f->type > TB_FRAME_HEARTBEAT))
		return TB_EFORMAT;
	if (tb_unlikely(f->length < TB_FRAME_HDR_LEN ||
			f->length > TB_FRAME_MAX_LEN || f->length > avail))
		return TB_EPROTO;
	return f->length;
}

#endif
