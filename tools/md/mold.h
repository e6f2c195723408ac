/*
 * mold.h - MoldUDP64, the exchange feed's packet framing: sequenced
 * downstream packets of message blocks, heartbeats, end of session, and
 * re-requests to the retransmission server.  What the blocks carry is
 * another format's business (ITCH: itch.h).
 *
 * All integers big-endian:
 *
 *   downstream packet   session[10]  seq u64  count u16  then `count`
 *                       message blocks, each  length u16  bytes[length]
 *     seq is the sequence number of the first message; the i-th block
 *     carries seq + i.  count 0 is a heartbeat and count 0xFFFF the end of
 *     session, both with no blocks and with seq = the next sequence the
 *     sender will use (so a lost tail is seen as a gap).
 *   re-request packet   session[10]  seq u64  count u16  (exactly 20 bytes)
 *     asks the retransmission server for messages seq .. seq+count-1; the
 *     answer is an ordinary downstream packet sent back to the requester.
 *
 * The layout follows the public Nasdaq MoldUDP64 specification.
 *
 * Errors: every parser checks each length before it reads, and returns 0
 * or one of the negative TB_MOLD_E* codes below, which name the first thing
 * wrong so that a receiver can count malformed packets by kind.  They are
 * their own range (-101..-108, md_error.h) and never collide with tb_result
 * codes; tb_mold_strerror() names them.  Nothing here allocates, locks,
 * sets errno or makes a system call: all of it may run on a hot path, on
 * any thread.
 */
#ifndef TB_MOLD_H
#define TB_MOLD_H

#include "tools/md/be.h"

#include <stddef.h>
#include <stdint.h>

#define TB_MOLD_SESSION_LEN 10
#define TB_MOLD_HDR_LEN 20
#define TB_MOLD_REQ_LEN 20
#define TB_MOLD_COUNT_HEARTBEAT 0u
#define TB_MOLD_COUNT_END 0xFFFFu
/* Largest downstream packet built here: a 1500-byte Ethernet MTU less the
 * IPv4 (20) and UDP (8) headers, so a packet never fragments. */
#define TB_MOLD_MAX_PKT 1472u

enum tb_mold_error {
	TB_MOLD_ESHORT = -101,    /* shorter than the MoldUDP64 header */
	TB_MOLD_EBLOCK = -102,    /* a message block runs past the packet */
	TB_MOLD_ECOUNT = -103,    /* bytes left over after `count` blocks */
	TB_MOLD_ECTLLEN = -104,   /* heartbeat or end of session with data */
	TB_MOLD_ESEQ = -105,      /* sequence 0, or seq + count overflows */
	TB_MOLD_EREQLEN = -106,   /* re-request not exactly 20 bytes */
	TB_MOLD_EREQCOUNT = -107, /* re-request for 0 or 0xFFFF messages */
	TB_MOLD_ENOSPACE = -108,  /* build: the buffer is too small */
};
/* How many codes there are: a per-kind counter array is indexed
 * -(code) - 101. */
#define TB_MOLD_NERR 8

/* A downstream packet after tb_mold_parse(): the header, and the message
 * blocks (already checked to fit exactly). */
typedef struct tb_mold_pkt {
	char session[TB_MOLD_SESSION_LEN];
	uint64_t seq;
	uint16_t count;          /* 0 heartbeat, 0xFFFF end, else messages */
	const uint8_t *blocks;   /* the bytes after the header */
	size_t blocks_len;
} tb_mold_pkt_t;

typedef struct tb_mold_req {
	char session[TB_MOLD_SESSION_LEN];
	uint64_t seq;
	uint16_t count;
} tb_mold_req_t;

/* Checks a downstream packet of `len` bytes whole: header, every block
 * length against what remains, no trailing bytes, no data in a heartbeat or
 * end of session, seq > 0 and seq + count without overflow.  Returns 0 and
 * fills `p`, or a TB_MOLD_E* code (`p` then undefined). */
int tb_mold_parse(const void *buf, size_t len, tb_mold_pkt_t *p);

/* Walks the blocks of a parsed packet: `*off` starts at 0.  Returns 1 and
 * sets the message and its length, or 0 at the end.  Safe on any
 * tb_mold_parse()d packet (the walk re-checks bounds anyway). */
static inline int tb_mold_next(const tb_mold_pkt_t *p, size_t *off,
			       const uint8_t **msg, size_t *len)
{
	size_t n;

	if (*off + 2 > p->blocks_len)
		return 0;
	n = tb_be_get16(p->blocks + *off);
	if (*off + 2 + n > p->blocks_len)
		return 0;
	*msg = p->blocks + *off + 2;
	*len = n;
	*off += 2 + n;
	return 1;
}

/* Builds a downstream packet in a caller's buffer: begin, add messages,
 * end.  The builder never writes past `cap`. */
typedef struct tb_mold_builder {
	uint8_t *buf;
	size_t cap;
	size_t len;
	uint16_t count;
} tb_mold_builder_t;

/* Starts a packet of session/seq in `buf` (cap >= TB_MOLD_HDR_LEN, else
 * TB_MOLD_ENOSPACE).  `session` is 10 bytes, not NUL-terminated. */
int tb_mold_build_begin(tb_mold_builder_t *b, void *buf, size_t cap,
			const char *session, uint64_t seq);

/* Appends one message block; TB_MOLD_ENOSPACE when it does not fit or the
 * packet already holds 0xFFFE messages.  Nothing is written on error. */
int tb_mold_build_add(tb_mold_builder_t *b, const void *msg, size_t len);

/* Writes the final count and returns the packet length. */
size_t tb_mold_build_end(tb_mold_builder_t *b);

/* A heartbeat (count 0) or end of session (count 0xFFFF) packet: writes
 * TB_MOLD_HDR_LEN bytes into `buf` and returns that length. */
size_t tb_mold_write_ctl(void *buf, const char *session, uint64_t next_seq,
			 uint16_t count);

/* Re-request packet: writes exactly TB_MOLD_REQ_LEN bytes. */
size_t tb_mold_req_encode(void *buf, const char *session, uint64_t seq,
			  uint16_t count);

/* Checks a re-request: exactly 20 bytes, seq > 0, 0 < count < 0xFFFF, no
 * overflow.  Returns 0 or a TB_MOLD_E* code. */
int tb_mold_req_decode(const void *buf, size_t len, tb_mold_req_t *r);

/* Name and meaning of a TB_MOLD_E* code; never NULL. */
const char *tb_mold_strerror(int code);

#endif
