/*
 * recovery/proto.h - the recovery protocol: how a subscriber asks
 * tb-recoveryd (or a publisher's retention endpoint) for the frames it
 * missed, over TCP.  Pure codec: no sockets.
 *
 *   S -> R  HELLO           stream, token: the first message on a
 *                           connection, which it authenticates
 *   R -> S  WELCOME         stream, max_count, the newest epoch held and
 *                           its range
 *        or REJECT          (unknown stream, unauthorised, busy), and the
 *                           server closes the connection
 *   S -> R  REQUEST         stream, epoch, first sequence, count
 *   R -> S  RESPONSE_BEGIN  stream, epoch, first, count of frames to follow
 *           count tickbus frames (frame.h), each exactly its `length`
 *           bytes (no alignment padding on a byte stream), sequences
 *           first, first + 1, ... in order
 *           RESPONSE_END    last sequence sent, status
 *        or REJECT          why not, with the number that helps (earliest
 *                           sequence, latest, max count, retry delay,
 *                           current epoch) and a line of text
 *
 * A connection is kept: one HELLO, then any number of REQUESTs, which a
 * client may send without waiting for the answers (pipelining); the
 * server answers them one after the other, in the order they came.
 * Messages follow the convention of tickbus's TCP protocols (wire.h:
 * tb_wire_hdr_t with magic, version, type, length; a fixed body per type),
 * with this protocol's own magic, TB_RECOVERY_PROTO_MAGIC ("TR" on the
 * wire), so that a subscriber that dials the wrong port finds out at once.
 * The server compares tokens with tb_wire_token_equal() (constant time).
 *
 * Threads: every function is pure apart from the thread-local tb_errmsg().
 */
#ifndef TB_RECOVERY_PROTO_H
#define TB_RECOVERY_PROTO_H

#include "bus/frame.h"
#include "bus/wire.h"
#include <tickbus/tickbus.h>

#include <stddef.h>
#include <stdint.h>

#define TB_RECOVERY_PROTO_MAGIC 0x5254u   /* bytes 'T','R' */
/* Version 2 added HELLO and WELCOME (a kept, authenticated connection),
 * took the token out of REQUEST, and added the BUSY reject. */
#define TB_RECOVERY_PROTO_VERSION 2u
/* The biggest message (REJECT) is 224 bytes; 512 leaves later versions
 * room to grow a body without a reader having to trust a bigger length. */
#define TB_RECOVERY_PROTO_MSG_MAX 512u
/* Fixed string fields, as the control protocol's: the config file's token
 * (TB_TOKEN_MAX), and a line of text. */
#define TB_RECOVERY_PROTO_TOKEN_LEN TB_TOKEN_MAX
#define TB_RECOVERY_PROTO_TEXT_LEN 200u

/* Frames one request may ask for.  The 10,000-message gap of the recovery
 * benchmark fits in one request; a bigger gap is asked for in several, so
 * that one subscriber never holds the replay server for long. */
#define TB_RECOVERY_PROTO_COUNT_MAX 65536u
/* Longest retry delay a server may ask for.  A server that wants a
 * subscriber gone for longer should refuse it for good instead. */
#define TB_RECOVERY_PROTO_RETRY_MAX_MS 60000u

/* The numbers of version 1's types are kept, REJECT's above all: its
 * layout and number are the same in every version (wire.h). */
enum tb_recovery_proto_type {
	TB_RECOVERY_PROTO_REQUEST = 1,
	TB_RECOVERY_PROTO_RESPONSE_BEGIN = 2,
	TB_RECOVERY_PROTO_RESPONSE_END = 3,
	TB_RECOVERY_PROTO_REJECT = 4,
	TB_RECOVERY_PROTO_HELLO = 5,
	TB_RECOVERY_PROTO_WELCOME = 6,
};
#define TB_RECOVERY_PROTO_TYPE_MAX TB_RECOVERY_PROTO_WELCOME

enum tb_recovery_proto_end_status {
	TB_RECOVERY_PROTO_END_COMPLETE = 1,  /* every announced frame was sent */
	TB_RECOVERY_PROTO_END_TRUNCATED = 2, /* the server stopped after last_seq
					(store rotated, shutting down): ask
					again for the rest */
};
#define TB_RECOVERY_PROTO_END_MAX TB_RECOVERY_PROTO_END_TRUNCATED

/* Reject reasons; `detail` carries the number named in brackets, and is
 * zero for the others. */
enum tb_recovery_proto_reject_reason {
	TB_RECOVERY_PROTO_REJ_TOO_OLD = 1,        /* [earliest_seq] still stored, >= 1 */
	TB_RECOVERY_PROTO_REJ_NOT_YET = 2,        /* [latest_seq] published; 0 = none */
	TB_RECOVERY_PROTO_REJ_TOO_LARGE = 3,      /* [max_count], 1..COUNT_MAX */
	TB_RECOVERY_PROTO_REJ_RATE_LIMITED = 4,   /* [retry_after_ms], 1..RETRY_MAX_MS */
	TB_RECOVERY_PROTO_REJ_UNAUTHORISED = 5,
	TB_RECOVERY_PROTO_REJ_MALFORMED = 6,
	TB_RECOVERY_PROTO_REJ_UNKNOWN_STREAM = 7,
	TB_RECOVERY_PROTO_REJ_EPOCH_MISMATCH = 8, /* [current_epoch], >= 1 */
	TB_RECOVERY_PROTO_REJ_BUSY = 9,           /* [retry_after_ms], 1..RETRY_MAX_MS:
						     no room for another client */
};
#define TB_RECOVERY_PROTO_REJ_MAX TB_RECOVERY_PROTO_REJ_BUSY

/* --------------------------------------------------- decoded (host) form */

typedef struct tb_recovery_proto_hello {
	uint32_t stream_id;   /* > 0 */
	char token[TB_RECOVERY_PROTO_TOKEN_LEN]; /* printable, no spaces, not "" */
} tb_recovery_proto_hello_t;

typedef struct tb_recovery_proto_welcome {
	uint32_t stream_id;   /* > 0 */
	uint32_t max_count;   /* frames one REQUEST may ask for: 1..COUNT_MAX */
	uint64_t epoch;       /* the newest epoch held; 0: nothing yet */
	uint64_t first, last; /* its range held then: first <= last, both >= 1,
				 or both 0 (none yet, always with epoch 0) */
} tb_recovery_proto_welcome_t;

typedef struct tb_recovery_proto_request {
	uint32_t stream_id;   /* > 0: the stream of the HELLO */
	uint32_t count;       /* 1..TB_RECOVERY_PROTO_COUNT_MAX */
	uint64_t epoch;       /* > 0: the epoch the missing frames belong to */
	uint64_t first;       /* > 0; first + count does not overflow */
} tb_recovery_proto_request_t;

/* RESPONSE_BEGIN: the same fields and rules as a request. */
typedef tb_recovery_proto_request_t tb_recovery_proto_begin_t;

typedef struct tb_recovery_proto_end {
	uint32_t status;      /* enum tb_recovery_proto_end_status */
	uint64_t last_seq;    /* last sequence sent; > 0 when COMPLETE */
} tb_recovery_proto_end_t;

typedef struct tb_recovery_proto_reject {
	uint32_t stream_id;   /* 0 when the stream is not known */
	uint32_t reason;      /* enum tb_recovery_proto_reject_reason */
	union {               /* which name applies depends on `reason` */
		uint64_t detail;
		uint64_t earliest_seq;
		uint64_t latest_seq;
		uint64_t max_count;
		uint64_t retry_after_ms;
		uint64_t current_epoch;
	};
	char text[TB_RECOVERY_PROTO_TEXT_LEN]; /* printable, may be "" */
} tb_recovery_proto_reject_t;

typedef struct tb_recovery_proto_msg {
	uint8_t type;         /* enum tb_recovery_proto_type */
	uint8_t version;
	uint32_t length;
	union {
		tb_recovery_proto_request_t request;
		tb_recovery_proto_begin_t begin;
		tb_recovery_proto_end_t end;
		tb_recovery_proto_reject_t reject;
		tb_recovery_proto_hello_t hello;
		tb_recovery_proto_welcome_t welcome;
	};
} tb_recovery_proto_msg_t;

/* ------------------------------------------------------ wire layouts (v2) */

typedef struct tb_recovery_proto_wire_hello {
	tb_wire_hdr_t hdr;
	uint32_t stream_id;
	uint32_t reserved;    /* zero */
	char token[TB_RECOVERY_PROTO_TOKEN_LEN];
} tb_recovery_proto_wire_hello_t;

_Static_assert(offsetof(tb_recovery_proto_wire_hello_t, stream_id) == 8, "rproto layout");
_Static_assert(offsetof(tb_recovery_proto_wire_hello_t, reserved) == 12, "rproto layout");
_Static_assert(offsetof(tb_recovery_proto_wire_hello_t, token) == 16, "rproto layout");
_Static_assert(sizeof(tb_recovery_proto_wire_hello_t) == 144, "rproto layout");

typedef struct tb_recovery_proto_wire_welcome {
	tb_wire_hdr_t hdr;
	uint32_t stream_id;
	uint32_t max_count;
	uint64_t epoch;
	uint64_t first;
	uint64_t last;
} tb_recovery_proto_wire_welcome_t;

_Static_assert(offsetof(tb_recovery_proto_wire_welcome_t, stream_id) == 8, "rproto layout");
_Static_assert(offsetof(tb_recovery_proto_wire_welcome_t, max_count) == 12, "rproto layout");
_Static_assert(offsetof(tb_recovery_proto_wire_welcome_t, epoch) == 16, "rproto layout");
_Static_assert(offsetof(tb_recovery_proto_wire_welcome_t, first) == 24, "rproto layout");
_Static_assert(offsetof(tb_recovery_proto_wire_welcome_t, last) == 32, "rproto layout");
_Static_assert(sizeof(tb_recovery_proto_wire_welcome_t) == 40, "rproto layout");

/* REQUEST and RESPONSE_BEGIN: one layout. */
typedef struct tb_recovery_proto_wire_request {
	tb_wire_hdr_t hdr;
	uint32_t stream_id;
	uint32_t count;
	uint64_t epoch;
	uint64_t first;
} tb_recovery_proto_wire_request_t;

_Static_assert(offsetof(tb_recovery_proto_wire_request_t, stream_id) == 8, "rproto layout");
_Static_assert(offsetof(tb_recovery_proto_wire_request_t, count) == 12, "rproto layout");
_Static_assert(offsetof(tb_recovery_proto_wire_request_t, epoch) == 16, "rproto layout");
_Static_assert(offsetof(tb_recovery_proto_wire_request_t, first) == 24, "rproto layout");
_Static_assert(sizeof(tb_recovery_proto_wire_request_t) == 32, "rproto layout");

typedef tb_recovery_proto_wire_request_t tb_recovery_proto_wire_begin_t;

typedef struct tb_recovery_proto_wire_end {
	tb_wire_hdr_t hdr;
	uint32_t status;
	uint32_t reserved;    /* zero */
	uint64_t last_seq;
} tb_recovery_proto_wire_end_t;

_Static_assert(offsetof(tb_recovery_proto_wire_end_t, status) == 8, "rproto layout");
_Static_assert(offsetof(tb_recovery_proto_wire_end_t, reserved) == 12, "rproto layout");
_Static_assert(offsetof(tb_recovery_proto_wire_end_t, last_seq) == 16, "rproto layout");
_Static_assert(sizeof(tb_recovery_proto_wire_end_t) == 24, "rproto layout");

typedef struct tb_recovery_proto_wire_reject {
	tb_wire_hdr_t hdr;
	uint32_t stream_id;
	uint32_t reason;
	uint64_t detail;
	char text[TB_RECOVERY_PROTO_TEXT_LEN];
} tb_recovery_proto_wire_reject_t;

_Static_assert(offsetof(tb_recovery_proto_wire_reject_t, stream_id) == 8, "rproto layout");
_Static_assert(offsetof(tb_recovery_proto_wire_reject_t, reason) == 12, "rproto layout");
_Static_assert(offsetof(tb_recovery_proto_wire_reject_t, detail) == 16, "rproto layout");
_Static_assert(offsetof(tb_recovery_proto_wire_reject_t, text) == 24, "rproto layout");
_Static_assert(sizeof(tb_recovery_proto_wire_reject_t) == 224, "rproto layout");
_Static_assert(sizeof(tb_recovery_proto_wire_reject_t) <= TB_RECOVERY_PROTO_MSG_MAX, "rproto max");

/* ------------------------------------------------------------- functions */

/*
 * Encoders: one message into `buf` (`cap` bytes) in the current version.
 * Returns the bytes written, TB_EMSGSIZE when `cap` is too small, or
 * TB_EINVAL (naming the field) for anything the decoder would refuse.
 */
int tb_recovery_proto_encode_hello(void *buf, size_t cap,
				   const tb_recovery_proto_hello_t *m);
int tb_recovery_proto_encode_welcome(void *buf, size_t cap,
				     const tb_recovery_proto_welcome_t *m);
int tb_recovery_proto_encode_request(void *buf, size_t cap,
			     const tb_recovery_proto_request_t *m);
int tb_recovery_proto_encode_begin(void *buf, size_t cap, const tb_recovery_proto_begin_t *m);
int tb_recovery_proto_encode_end(void *buf, size_t cap, const tb_recovery_proto_end_t *m);
int tb_recovery_proto_encode_reject(void *buf, size_t cap,
			    const tb_recovery_proto_reject_t *m);

/*
 * Decodes the message at the start of `buf` (`len` readable bytes).
 * Returns the bytes it occupied (> 0) with `*out` filled, or, leaving `*out`
 * untouched, TB_EFORMAT (bad magic, other version) or TB_EPROTO (short,
 * unknown type, wrong length, a field out of range: the message names it).
 */
int tb_recovery_proto_decode(const void *buf, size_t len, tb_recovery_proto_msg_t *out);

/* Bytes still needed for one whole protocol message (0: decode it), or
 * TB_EPROTO for a header that can never be valid.  Bounded by
 * TB_RECOVERY_PROTO_MSG_MAX.  Not for the frames between BEGIN and END. */
int tb_recovery_proto_frame_need(const void *buf, size_t have);

/*
 * For the frames between RESPONSE_BEGIN and RESPONSE_END: bytes still
 * needed before `buf` holds one whole tickbus frame (0: it does).  A header
 * that can never be valid fails as tb_frame_check() would: TB_EFORMAT for a
 * version or type, TB_EPROTO for a length below a header or above
 * TB_FRAME_MAX_LEN.  `buf` may have any alignment.
 */
int tb_recovery_proto_replay_need(const void *buf, size_t have);

/*
 * Checks the whole frame at `buf` (`len` readable bytes) as frame number
 * `index` (0-based) of the response announced by `begin`: tb_frame_check(),
 * then a DATA frame of begin->stream_id carrying sequence begin->first +
 * index, with index < begin->count.  Returns the frame's length (> 0) or
 * TB_EPROTO / TB_EFORMAT with the field named.  `buf` may have any
 * alignment.
 */
int64_t tb_recovery_proto_replay_check(const void *buf, size_t len,
			       const tb_recovery_proto_begin_t *begin, uint64_t index);

/* Names for logs; "?" when out of range. */
const char *tb_recovery_proto_type_name(unsigned type);
const char *tb_recovery_proto_reject_name(unsigned reason);

#endif
