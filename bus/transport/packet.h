/*
 * packet.h - the datagram that carries frames over ud and udp multicast.
 *
 * One datagram is a 64-byte packet header followed by `count` whole frames
 * (frame.h), each at a TB_FRAME_ALIGN boundary, with consecutive sequence
 * numbers starting at `first_seq` (MoldUDP64's idea: a receiver knows from
 * the header alone which sequences the datagram covers, so loss is found
 * without looking inside).  A message never spans datagrams: the largest
 * message a stream carries is tb_packet_max_payload(mtu), and a bigger one is
 * refused at offer with TB_EMSGSIZE.
 *
 *   offset  size  field
 *        0     2  magic      TB_PACKET_MAGIC ("TP" on the wire)
 *        2     1  version    TB_PACKET_VERSION
 *        3     1  flags      TB_PACKET_F_*
 *        4     4  stream_id
 *        8     8  epoch      the publisher's epoch (> 0)
 *       16     8  first_seq  sequence of the first frame; for a heartbeat
 *                            or an end, the sequence the next frame would
 *                            carry (so a lost tail is seen as a gap)
 *       24     2  count      frames that follow; 0 for heartbeat and end
 *       26     2  mtu        the publisher's datagram bound in bytes, the
 *                            same in every datagram of the epoch, so that
 *                            a subscriber whose buffers are smaller can
 *                            say so (the group-wide bound, ud.h)
 *       28     4  length     bytes of the whole datagram, header included
 *       32     8  nonce      the datagram's number from its sender, unique
 *                            in the epoch: data from 0 up, heartbeats from
 *                            TB_PACKET_NONCE_BEAT up (two threads send)
 *       40     8  since      the epoch's start, the publisher's
 *                            CLOCK_REALTIME in ns: a later epoch never
 *                            starts earlier, so a recorded one replayed
 *                            after a restart is refused as older
 *       48    16  tag        GMAC of bytes 0..47 and the frames under the
 *                            epoch's key (dgram_auth.h)
 *
 * All fields little-endian.  On ud the immediate carries first_seq's low 32
 * bits, big-endian as verbs requires, as a cross-check.
 *
 * Versions.  1 had a 32-byte header without mtu, nonce, since and tag;
 * version 2 readers count a version-1 datagram as bad-version (and say once
 * which version they read), as version 1 readers count a version-2 one.
 * Magic and version sit where they did, so that check needs only 4 bytes.
 *
 * tb_packet_check() validates a datagram from the network before anything else
 * reads it, and names the first thing wrong so that the transport can count
 * malformed datagrams by kind; tb_packet_frame_next() then walks the frames,
 * each one checked (tb_frame_check) against the bytes that remain.  Neither
 * trusts the datagram: its tag is checked (dgram_auth.h) before any field is
 * acted on.
 */
#ifndef TB_PACKET_H
#define TB_PACKET_H

#include "bus/frame.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define TB_PACKET_MAGIC 0x5054u /* bytes 'T','P' */
#define TB_PACKET_VERSION 2u
#define TB_PACKET_HDR_LEN 64u
/* Bytes the tag covers in the header: all but the tag. */
#define TB_PACKET_AUTH_LEN 48u
#define TB_PACKET_TAG_LEN 16u
/* Nonces of the heartbeat thread's datagrams: the top bit set. */
#define TB_PACKET_NONCE_BEAT (1ull << 63)

enum tb_packet_flag {
	TB_PACKET_F_HEARTBEAT = 1u << 0, /* no frames: "I am alive, next is X" */
	TB_PACKET_F_END = 1u << 1,       /* no frames: the stream closed before X */
};
#define TB_PACKET_F_ALL (TB_PACKET_F_HEARTBEAT | TB_PACKET_F_END)

typedef struct tb_packet_hdr {
	uint16_t magic;
	uint8_t version;
	uint8_t flags;
	uint32_t stream_id;
	uint64_t epoch;
	uint64_t first_seq;
	uint16_t count;
	uint16_t mtu;
	uint32_t length;
	uint64_t nonce;
	uint64_t since;
	uint8_t tag[TB_PACKET_TAG_LEN];
} tb_packet_hdr_t;

_Static_assert(offsetof(tb_packet_hdr_t, magic) == 0, "packet layout");
_Static_assert(offsetof(tb_packet_hdr_t, version) == 2, "packet layout");
_Static_assert(offsetof(tb_packet_hdr_t, flags) == 3, "packet layout");
_Static_assert(offsetof(tb_packet_hdr_t, stream_id) == 4, "packet layout");
_Static_assert(offsetof(tb_packet_hdr_t, epoch) == 8, "packet layout");
_Static_assert(offsetof(tb_packet_hdr_t, first_seq) == 16, "packet layout");
_Static_assert(offsetof(tb_packet_hdr_t, count) == 24, "packet layout");
_Static_assert(offsetof(tb_packet_hdr_t, mtu) == 26, "packet layout");
_Static_assert(offsetof(tb_packet_hdr_t, length) == 28, "packet layout");
_Static_assert(offsetof(tb_packet_hdr_t, nonce) == 32, "packet layout");
_Static_assert(offsetof(tb_packet_hdr_t, since) == 40, "packet layout");
_Static_assert(offsetof(tb_packet_hdr_t, tag) == TB_PACKET_AUTH_LEN, "packet layout");
_Static_assert(sizeof(tb_packet_hdr_t) == TB_PACKET_HDR_LEN, "packet layout");
_Static_assert(TB_PACKET_HDR_LEN % TB_FRAME_ALIGN == 0, "frames stay aligned");

/* What tb_packet_check found wrong; a transport counts each kind. */
enum tb_packet_fault {
	TB_PACKET_OK = 0,
	TB_PACKET_SHORT,        /* fewer bytes than a header (or its first 4) */
	TB_PACKET_BAD_MAGIC,
	TB_PACKET_BAD_VERSION,
	TB_PACKET_BAD_LENGTH,   /* header length differs from the bytes received */
	TB_PACKET_BAD_FLAGS,    /* unknown flag, or frames in a heartbeat/end */
	TB_PACKET_BAD_COUNT,    /* more frames than the bytes could hold, or none */
	TB_PACKET_BAD_FRAME,    /* a frame is malformed or runs past the end */
	TB_PACKET_WRONG_STREAM, /* another stream's datagram, or a frame of one */
	TB_PACKET_BAD_SEQ,      /* a frame's sequence is not first_seq + i */
	TB_PACKET_FAULT_COUNT
};

/* Largest message payload a datagram of `mtu` bytes can carry (0 if none). */
static inline uint32_t tb_packet_max_payload(uint32_t mtu)
{
	uint32_t room = mtu & ~(uint32_t)(TB_FRAME_ALIGN - 1);

	if (room < TB_PACKET_HDR_LEN + TB_FRAME_ALIGN)
		return 0;
	return room - TB_PACKET_HDR_LEN - TB_FRAME_HDR_LEN;
}

/* Fills a packet header; `length` is the datagram's total.  mtu, nonce,
 * since and tag are zero: the sender sets them (dgram.h, dgram_auth.h). */
static inline void tb_packet_init(tb_packet_hdr_t *p, uint8_t flags,
			       uint32_t stream_id, uint64_t epoch,
			       uint64_t first_seq, uint16_t count,
			       uint32_t length)
{
	memset(p, 0, sizeof(*p));
	p->magic = TB_PACKET_MAGIC;
	p->version = TB_PACKET_VERSION;
	p->flags = flags;
	p->stream_id = stream_id;
	p->epoch = epoch;
	p->first_seq = first_seq;
	p->count = count;
	p->length = length;
}

/*
 * Validates the header of the `len`-byte datagram at `buf` for stream
 * `stream_id`.  Checks, in order: room for magic and version, magic,
 * version (so a datagram of another version is told as such, whatever its
 * size), room for a header, the header's length against `len`, flags,
 * stream, and that `count` frames of at least a header each could fit.
 * Frames themselves are checked as they are walked; the tag is not checked
 * here.  Never reads past `len`.
 */
static inline enum tb_packet_fault tb_packet_check(const void *buf, size_t len,
					     uint32_t stream_id)
{
	const tb_packet_hdr_t *p = (const tb_packet_hdr_t *)buf;

	if (tb_unlikely(len < 4))
		return TB_PACKET_SHORT;
	if (tb_unlikely(p->magic != TB_PACKET_MAGIC))
		return TB_PACKET_BAD_MAGIC;
	if (tb_unlikely(p->version != TB_PACKET_VERSION))
		return TB_PACKET_BAD_VERSION;
	if (tb_unlikely(len < TB_PACKET_HDR_LEN))
		return TB_PACKET_SHORT;
	if (tb_unlikely(p->length != len))
		return TB_PACKET_BAD_LENGTH;
	if (tb_unlikely(p->flags & ~TB_PACKET_F_ALL))
		return TB_PACKET_BAD_FLAGS;
	if (tb_unlikely(p->stream_id != stream_id))
		return TB_PACKET_WRONG_STREAM;
	if (p->flags) {
		if (tb_unlikely(p->count != 0 || len != TB_PACKET_HDR_LEN))
			return TB_PACKET_BAD_FLAGS;
		return TB_PACKET_OK;
	}
	if (tb_unlikely(p->count == 0 ||
			(uint64_t)p->count * TB_FRAME_ALIGN > len - TB_PACKET_HDR_LEN))
		return TB_PACKET_BAD_COUNT;
	return TB_PACKET_OK;
}

/* Walks the frames of a datagram that passed tb_packet_check. */
typedef struct tb_packet_iter {
	const uint8_t *next;
	size_t left;         /* bytes from `next` to the end of the datagram */
	uint64_t seq;        /* the sequence the next frame must carry */
	uint32_t stream_id;
	uint16_t remaining;  /* frames still to walk */
} tb_packet_iter_t;

static inline void tb_packet_iter_init(tb_packet_iter_t *it, const void *buf,
				    size_t len)
{
	const tb_packet_hdr_t *p = (const tb_packet_hdr_t *)buf;

	it->next = (const uint8_t *)buf + TB_PACKET_HDR_LEN;
	it->left = len - TB_PACKET_HDR_LEN;
	it->seq = p->first_seq;
	it->stream_id = p->stream_id;
	it->remaining = p->count;
}

/*
 * The next frame, or NULL at the end (*fault = TB_PACKET_OK) or at a bad frame
 * (*fault names why; the rest of the datagram is then untrusted).  A frame
 * must be a data frame of this stream carrying the expected sequence, and
 * every byte of it (padded to TB_FRAME_ALIGN, except the last) must lie
 * within the datagram.
 */
static inline const tb_frame_hdr_t *tb_packet_frame_next(tb_packet_iter_t *it,
						      enum tb_packet_fault *fault)
{
	const tb_frame_hdr_t *f = (const tb_frame_hdr_t *)it->next;
	int64_t flen;
	size_t space;

	*fault = TB_PACKET_OK;
	if (it->remaining == 0)
		return NULL;
	flen = tb_frame_check(it->next, it->left);
	if (tb_unlikely(flen < 0 || f->type != TB_FRAME_DATA)) {
		*fault = TB_PACKET_BAD_FRAME;
		return NULL;
	}
	if (tb_unlikely(f->stream_id != it->stream_id)) {
		*fault = TB_PACKET_WRONG_STREAM;
		return NULL;
	}
	if (tb_unlikely(f->seq != it->seq)) {
		*fault = TB_PACKET_BAD_SEQ;
		return NULL;
	}
	space = tb_frame_space((uint32_t)flen);
	if (space > it->left) {
		if (it->remaining != 1) {   /* only the last may end unpadded */
			*fault = TB_PACKET_BAD_FRAME;
			return NULL;
		}
		space = it->left;
	}
	it->next += space;
	it->left -= space;
	it->seq++;
	it->remaining--;
	return f;
}

/* A short name for a fault, for counters and logs. */
static inline const char *tb_packet_fault_name(enum tb_packet_fault f)
{
	static const char *const names[TB_PACKET_FAULT_COUNT] = {
		"ok", "short", "bad-magic", "bad-version", "bad-length",
		"bad-flags", "bad-count", "bad-frame", "wrong-stream",
		"bad-seq",
	};

	return (unsigned)f < TB_PACKET_FAULT_COUNT ? names[f] : "unknown";
}

#endif
