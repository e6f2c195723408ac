/*
 * control.h - the control protocol: how a subscriber and a publisher set up
 * an rc (RDMA RC) feed over TCP.  Pure codec: no sockets here.
 *
 * A conversation, subscriber S and publisher P:
 *
 *   S -> P  HELLO      who I am, my token, the stream I want
 *   S -> P  SUBSCRIBE  my ring (address, length, rkey), my QP (number, GID,
 *                      LID, PSN, the port's MTU), where to start
 *   P -> S  ACCEPT     your feed: epoch, my QP (number, GID, LID, PSN), the
 *                      path MTU, service level and traffic class both ends
 *                      use, my credit slot, the sequence and ring offset the
 *                      first frame will carry
 *        or REJECT     why not (a reason code and a line of text)
 *   S -> P  READY      my QP is in RTR: you may write (before it, a WRITE
 *                      would meet a QP that cannot receive and wait out an
 *                      ACK timeout, or fail)
 *   either  HEARTBEAT  I am alive; the last sequence I know of; from the
 *                      publisher, also the range it skipped you for, if it
 *                      is skipping you now
 *   either  BYE        I am going, and why
 *
 * Version 2 added the LIDs (InfiniBand addresses a QP by LID), the path
 * MTU, service level and traffic class in ACCEPT (one value for both ends),
 * READY, and the skipped range in HEARTBEAT.  Version 1 peers are refused:
 * see control.c, "Versioning".
 *
 * Every message follows the convention of tickbus's TCP protocols (wire.h):
 * a fixed 8-byte header (magic TB_CONTROL_MAGIC, "TC" on the wire; version
 * TB_CONTROL_VERSION; type TB_CONTROL_HELLO .. TB_CONTROL_BYE; length of
 * the whole message) and a fixed body whose size depends only on (version,
 * type), all fields little-endian.  The recovery protocol
 * (recovery/proto.h) follows it too, with its own magic, types and bodies.
 * The body layouts are the tb_control_wire_* structs below, each offset
 * pinned by a _Static_assert; the decoded, host-order form a caller works
 * with is the tb_control_* structs.
 *
 * Threads: every function is pure apart from the thread-local tb_errmsg();
 * any thread may call any of them.
 */
#ifndef TB_CONTROL_H
#define TB_CONTROL_H

#include "bus/ring.h"
#include "bus/wire.h"
#include <tickbus/tickbus.h>

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------- constants */

#define TB_CONTROL_MAGIC 0x4354u   /* bytes 'T','C' */
#define TB_CONTROL_VERSION 2u
/* The oldest version whose REJECT this build reads (every version's REJECT
 * has the same layout), so that a refusal from an older peer is shown. */
#define TB_CONTROL_VERSION_OLDEST 1u
/* Largest message a reader ever buffers.  The biggest message (REJECT)
 * is 216 bytes; 512 leaves later versions room to grow a body without a
 * reader having to trust a bigger length. */
#define TB_CONTROL_MSG_MAX 512u

/* Fixed string fields: the text, a NUL, and zeros to the end of the field.
 * Token: the same 1..127 printable characters, no spaces, as the config
 * file's `token` key (TB_TOKEN_MAX). */
#define TB_CONTROL_CLIENT_ID_LEN 32u   /* up to 31 printable characters */
#define TB_CONTROL_TOKEN_LEN TB_TOKEN_MAX
#define TB_CONTROL_TEXT_LEN 200u       /* up to 199 printable characters */
#define TB_CONTROL_GID_LEN 16u

/* QP numbers and PSNs are 24-bit quantities in InfiniBand. */
#define TB_CONTROL_QPN_MASK 0xffffffu
#define TB_CONTROL_PSN_MASK 0xffffffu

/* A ring's length is what tb_stream_cfg accepts for ring_size; a peer that
 * asks for anything else was not configured through tickbus. */
/* Receives a subscriber may keep posted (its receive queue's depth). */
#define TB_CONTROL_RECV_MAX 65536u

enum tb_control_type {
	TB_CONTROL_HELLO = 1,
	TB_CONTROL_SUBSCRIBE = 2,
	TB_CONTROL_ACCEPT = 3,
	TB_CONTROL_REJECT = 4,
	TB_CONTROL_HEARTBEAT = 5,
	TB_CONTROL_BYE = 6,
	TB_CONTROL_READY = 7,
};
#define TB_CONTROL_TYPE_MAX TB_CONTROL_READY

/* Path MTU, numbered as verbs' enum ibv_mtu so it converts by a cast. */
enum tb_control_mtu {
	TB_CONTROL_MTU_256 = 1,
	TB_CONTROL_MTU_512 = 2,
	TB_CONTROL_MTU_1024 = 3,
	TB_CONTROL_MTU_2048 = 4,
	TB_CONTROL_MTU_4096 = 5,
};

#define TB_CONTROL_SL_MAX 15u        /* InfiniBand service levels 0..15 */

/* SUBSCRIBE flags. */
#define TB_CONTROL_SUB_F_CREDIT_SLOT 1u /* give me a credit slot to write into */
#define TB_CONTROL_SUB_F_ALL TB_CONTROL_SUB_F_CREDIT_SLOT

enum tb_control_reject_reason {
	TB_CONTROL_REJ_BAD_TOKEN = 1,
	TB_CONTROL_REJ_UNKNOWN_STREAM = 2,
	TB_CONTROL_REJ_BAD_VERSION = 3,
	TB_CONTROL_REJ_MALFORMED = 4,
	TB_CONTROL_REJ_FULL = 5,          /* no room for another subscriber */
	TB_CONTROL_REJ_UNSUPPORTED_TRANSPORT = 6,
	TB_CONTROL_REJ_INTERNAL = 7,
};
#define TB_CONTROL_REJ_MAX TB_CONTROL_REJ_INTERNAL

enum tb_control_bye_reason {
	TB_CONTROL_BYE_NORMAL = 1,   /* done: the subscriber is closing */
	TB_CONTROL_BYE_CLOSED = 2,   /* the publisher closed the stream */
	TB_CONTROL_BYE_TIMEOUT = 3,  /* the peer's heartbeats stopped */
	TB_CONTROL_BYE_ERROR = 4,    /* the peer broke the protocol */
};
#define TB_CONTROL_BYE_MAX TB_CONTROL_BYE_ERROR

/* --------------------------------------------------- decoded (host) form */

typedef struct tb_control_hello {
	uint32_t stream_id;                   /* > 0 */
	char client_id[TB_CONTROL_CLIENT_ID_LEN]; /* printable, no spaces; may be "" */
	char token[TB_CONTROL_TOKEN_LEN];         /* printable, no spaces; not "" */
} tb_control_hello_t;

typedef struct tb_control_subscribe {
	uint32_t stream_id;      /* > 0 */
	uint8_t transport;       /* tb_transport_t */
	uint8_t mtu;             /* enum tb_control_mtu */
	uint8_t flags;           /* TB_CONTROL_SUB_F_* */
	uint64_t ring_addr;      /* remote address of the subscriber's ring */
	uint64_t ring_len;       /* power of two, TB_RING_MIN..TB_RING_MAX */
	uint32_t rkey;
	uint32_t qpn;            /* 24 bits */
	uint8_t gid[TB_CONTROL_GID_LEN];
	uint32_t psn;            /* 24 bits: the first PSN the subscriber
				  * sends (the publisher's QP expects it) */
	uint32_t recv_depth;     /* receives kept posted: the publisher never
				  * has more frames in flight; 1..RECV_MAX */
	uint64_t start_seq;      /* late join from this sequence; 0 = live */
	uint16_t lid;            /* InfiniBand: the port's LID; 0 on RoCE */
} tb_control_subscribe_t;

typedef struct tb_control_accept {
	uint32_t stream_id;      /* > 0 */
	uint32_t qpn;            /* publisher's QP, 24 bits */
	uint64_t epoch;          /* > 0 */
	uint8_t gid[TB_CONTROL_GID_LEN];
	uint32_t psn;            /* 24 bits: the first PSN the publisher
				  * sends (the subscriber's QP expects it) */
	uint32_t credit_rkey;    /* credit slot; 0 and 0 if none was asked */
	uint64_t credit_addr;
	uint64_t next_seq;       /* sequence of the first frame written, > 0 */
	uint64_t ring_offset;    /* where it is written; TB_FRAME_ALIGN aligned */
	uint16_t lid;            /* InfiniBand: the publisher port's LID; 0 on
				  * RoCE */
	uint8_t mtu;             /* enum tb_control_mtu: the path MTU both QPs
				  * use, at most the subscriber's */
	uint8_t sl;              /* service level, 0..TB_CONTROL_SL_MAX */
	uint8_t traffic_class;   /* GRH traffic class (RoCE: DSCP << 2 | ECN) */
} tb_control_accept_t;

typedef struct tb_control_reject {
	uint32_t stream_id;      /* 0 when the stream is not known yet */
	uint32_t reason;         /* enum tb_control_reject_reason */
	char text[TB_CONTROL_TEXT_LEN]; /* printable, may be "" */
} tb_control_reject_t;

typedef struct tb_control_heartbeat {
	uint64_t timestamp_ns;   /* sender's tb_clock_now_ns() */
	uint64_t last_seq;       /* last sequence published or seen; 0 = none */
	/* Publisher to subscriber: the sequences it skipped this subscriber
	 * for (no room) since it last wrote to it, first..last; 0 and 0 when
	 * it is not skipping it.  Every frame before skip_first was written
	 * and will arrive; none of skip_first..skip_last ever will.  From a
	 * subscriber: 0 and 0. */
	uint64_t skip_first;
	uint64_t skip_last;      /* >= skip_first when skip_first != 0 */
} tb_control_heartbeat_t;

typedef struct tb_control_bye {
	uint32_t reason;         /* enum tb_control_bye_reason */
} tb_control_bye_t;

typedef struct tb_control_ready {
	uint32_t stream_id;      /* > 0 */
	uint32_t qpn;            /* the subscriber's QP, now in RTR; 24 bits */
} tb_control_ready_t;

/* One decoded message: `type` says which member of the union is valid. */
typedef struct tb_control_msg {
	uint8_t type;            /* enum tb_control_type */
	uint8_t version;         /* as received */
	uint32_t length;         /* bytes the message occupied */
	union {
		tb_control_hello_t hello;
		tb_control_subscribe_t subscribe;
		tb_control_accept_t accept;
		tb_control_reject_t reject;
		tb_control_heartbeat_t heartbeat;
		tb_control_bye_t bye;
		tb_control_ready_t ready;
	};
} tb_control_msg_t;

/* ------------------------------------------------------ wire layouts (v2) */

typedef struct tb_control_wire_hello {
	tb_wire_hdr_t hdr;
	uint32_t stream_id;
	uint32_t reserved;                    /* zero */
	char client_id[TB_CONTROL_CLIENT_ID_LEN];
	char token[TB_CONTROL_TOKEN_LEN];
} tb_control_wire_hello_t;

_Static_assert(offsetof(tb_control_wire_hello_t, stream_id) == 8, "ctl layout");
_Static_assert(offsetof(tb_control_wire_hello_t, reserved) == 12, "ctl layout");
_Static_assert(offsetof(tb_control_wire_hello_t, client_id) == 16, "ctl layout");
_Static_assert(offsetof(tb_control_wire_hello_t, token) == 48, "ctl layout");
_Static_assert(sizeof(tb_control_wire_hello_t) == 176, "ctl layout");

typedef struct tb_control_wire_subscribe {
	tb_wire_hdr_t hdr;
	uint32_t stream_id;
	uint8_t transport;
	uint8_t mtu;
	uint8_t flags;
	uint8_t reserved0;                    /* zero */
	uint64_t ring_addr;
	uint64_t ring_len;
	uint32_t rkey;
	uint32_t qpn;
	uint8_t gid[TB_CONTROL_GID_LEN];
	uint32_t psn;
	uint32_t recv_depth;
	uint64_t start_seq;
	uint16_t lid;
	uint16_t reserved1;                   /* zero */
	uint32_t reserved2;                   /* zero */
} tb_control_wire_subscribe_t;

_Static_assert(offsetof(tb_control_wire_subscribe_t, stream_id) == 8, "ctl layout");
_Static_assert(offsetof(tb_control_wire_subscribe_t, transport) == 12, "ctl layout");
_Static_assert(offsetof(tb_control_wire_subscribe_t, mtu) == 13, "ctl layout");
_Static_assert(offsetof(tb_control_wire_subscribe_t, flags) == 14, "ctl layout");
_Static_assert(offsetof(tb_control_wire_subscribe_t, reserved0) == 15, "ctl layout");
_Static_assert(offsetof(tb_control_wire_subscribe_t, ring_addr) == 16, "ctl layout");
_Static_assert(offsetof(tb_control_wire_subscribe_t, ring_len) == 24, "ctl layout");
_Static_assert(offsetof(tb_control_wire_subscribe_t, rkey) == 32, "ctl layout");
_Static_assert(offsetof(tb_control_wire_subscribe_t, qpn) == 36, "ctl layout");
_Static_assert(offsetof(tb_control_wire_subscribe_t, gid) == 40, "ctl layout");
_Static_assert(offsetof(tb_control_wire_subscribe_t, psn) == 56, "ctl layout");
_Static_assert(offsetof(tb_control_wire_subscribe_t, recv_depth) == 60, "ctl layout");
_Static_assert(offsetof(tb_control_wire_subscribe_t, start_seq) == 64, "ctl layout");
_Static_assert(offsetof(tb_control_wire_subscribe_t, lid) == 72, "ctl layout");
_Static_assert(offsetof(tb_control_wire_subscribe_t, reserved1) == 74, "ctl layout");
_Static_assert(offsetof(tb_control_wire_subscribe_t, reserved2) == 76, "ctl layout");
_Static_assert(sizeof(tb_control_wire_subscribe_t) == 80, "ctl layout");

typedef struct tb_control_wire_accept {
	tb_wire_hdr_t hdr;
	uint32_t stream_id;
	uint32_t qpn;
	uint64_t epoch;
	uint8_t gid[TB_CONTROL_GID_LEN];
	uint32_t psn;
	uint32_t credit_rkey;
	uint64_t credit_addr;
	uint64_t next_seq;
	uint64_t ring_offset;
	uint16_t lid;
	uint8_t mtu;
	uint8_t sl;
	uint8_t traffic_class;
	uint8_t reserved0;                    /* zero */
	uint16_t reserved1;                   /* zero */
} tb_control_wire_accept_t;

_Static_assert(offsetof(tb_control_wire_accept_t, stream_id) == 8, "ctl layout");
_Static_assert(offsetof(tb_control_wire_accept_t, qpn) == 12, "ctl layout");
_Static_assert(offsetof(tb_control_wire_accept_t, epoch) == 16, "ctl layout");
_Static_assert(offsetof(tb_control_wire_accept_t, gid) == 24, "ctl layout");
_Static_assert(offsetof(tb_control_wire_accept_t, psn) == 40, "ctl layout");
_Static_assert(offsetof(tb_control_wire_accept_t, credit_rkey) == 44, "ctl layout");
_Static_assert(offsetof(tb_control_wire_accept_t, credit_addr) == 48, "ctl layout");
_Static_assert(offsetof(tb_control_wire_accept_t, next_seq) == 56, "ctl layout");
_Static_assert(offsetof(tb_control_wire_accept_t, ring_offset) == 64, "ctl layout");
_Static_assert(offsetof(tb_control_wire_accept_t, lid) == 72, "ctl layout");
_Static_assert(offsetof(tb_control_wire_accept_t, mtu) == 74, "ctl layout");
_Static_assert(offsetof(tb_control_wire_accept_t, sl) == 75, "ctl layout");
_Static_assert(offsetof(tb_control_wire_accept_t, traffic_class) == 76, "ctl layout");
_Static_assert(offsetof(tb_control_wire_accept_t, reserved0) == 77, "ctl layout");
_Static_assert(offsetof(tb_control_wire_accept_t, reserved1) == 78, "ctl layout");
_Static_assert(sizeof(tb_control_wire_accept_t) == 80, "ctl layout");

typedef struct tb_control_wire_reject {
	tb_wire_hdr_t hdr;
	uint32_t stream_id;
	uint32_t reason;
	char text[TB_CONTROL_TEXT_LEN];
} tb_control_wire_reject_t;

_Static_assert(offsetof(tb_control_wire_reject_t, stream_id) == 8, "ctl layout");
_Static_assert(offsetof(tb_control_wire_reject_t, reason) == 12, "ctl layout");
_Static_assert(offsetof(tb_control_wire_reject_t, text) == 16, "ctl layout");
_Static_assert(sizeof(tb_control_wire_reject_t) == 216, "ctl layout");

typedef struct tb_control_wire_heartbeat {
	tb_wire_hdr_t hdr;
	uint64_t timestamp_ns;
	uint64_t last_seq;
	uint64_t skip_first;
	uint64_t skip_last;
} tb_control_wire_heartbeat_t;

_Static_assert(offsetof(tb_control_wire_heartbeat_t, timestamp_ns) == 8, "ctl layout");
_Static_assert(offsetof(tb_control_wire_heartbeat_t, last_seq) == 16, "ctl layout");
_Static_assert(offsetof(tb_control_wire_heartbeat_t, skip_first) == 24, "ctl layout");
_Static_assert(offsetof(tb_control_wire_heartbeat_t, skip_last) == 32, "ctl layout");
_Static_assert(sizeof(tb_control_wire_heartbeat_t) == 40, "ctl layout");

typedef struct tb_control_wire_bye {
	tb_wire_hdr_t hdr;
	uint32_t reason;
	uint32_t reserved;                    /* zero */
} tb_control_wire_bye_t;

_Static_assert(offsetof(tb_control_wire_bye_t, reason) == 8, "ctl layout");
_Static_assert(offsetof(tb_control_wire_bye_t, reserved) == 12, "ctl layout");
_Static_assert(sizeof(tb_control_wire_bye_t) == 16, "ctl layout");

typedef struct tb_control_wire_ready {
	tb_wire_hdr_t hdr;
	uint32_t stream_id;
	uint32_t qpn;
} tb_control_wire_ready_t;

_Static_assert(offsetof(tb_control_wire_ready_t, stream_id) == 8, "ctl layout");
_Static_assert(offsetof(tb_control_wire_ready_t, qpn) == 12, "ctl layout");
_Static_assert(sizeof(tb_control_wire_ready_t) == 16, "ctl layout");

_Static_assert(sizeof(tb_control_wire_reject_t) <= TB_CONTROL_MSG_MAX, "ctl max");
_Static_assert(sizeof(tb_control_wire_hello_t) <= TB_CONTROL_MSG_MAX, "ctl max");

/* ------------------------------------------------------------- functions */

/*
 * Encoders: write one message into `buf` (of `cap` bytes) in the current
 * version.  Each checks its struct with the rules the decoder applies, so
 * nothing is ever sent that a peer would refuse.  Returns the bytes written,
 * TB_EMSGSIZE when `cap` is too small, or TB_EINVAL for a field out of
 * range (the message names it).  String fields are copied up to their NUL
 * and the rest of the field is zero-filled.
 */
int tb_control_encode_hello(void *buf, size_t cap, const tb_control_hello_t *m);
int tb_control_encode_subscribe(void *buf, size_t cap,
			    const tb_control_subscribe_t *m);
int tb_control_encode_accept(void *buf, size_t cap, const tb_control_accept_t *m);
int tb_control_encode_reject(void *buf, size_t cap, const tb_control_reject_t *m);
int tb_control_encode_heartbeat(void *buf, size_t cap,
			    const tb_control_heartbeat_t *m);
int tb_control_encode_bye(void *buf, size_t cap, const tb_control_bye_t *m);
int tb_control_encode_ready(void *buf, size_t cap, const tb_control_ready_t *m);

/*
 * REJECT in an older `version` (TB_CONTROL_VERSION_OLDEST ..
 * TB_CONTROL_VERSION), for a peer that spoke it: REJECT's layout is the
 * same in every version, so that peer can read why it is refused.  Returns
 * as the encoders above; TB_EINVAL for a version out of that range.
 */
int tb_control_encode_reject_in(void *buf, size_t cap,
				const tb_control_reject_t *m, unsigned version);

/*
 * Decodes the message at the start of `buf` (`len` bytes readable; more
 * than one message may follow).  Checks everything before it trusts
 * anything: header, then every field.  Returns the bytes the message
 * occupied (> 0) with `*out` filled, or, leaving `*out` untouched:
 *   TB_EFORMAT  bad magic, or a version this build does not speak
 *   TB_EPROTO   too short, unknown type, length not the type's size, a
 *               field out of range (the message names the field)
 */
int tb_control_decode(const void *buf, size_t len, tb_control_msg_t *out);

/*
 * Decodes a REJECT of any version from TB_CONTROL_VERSION_OLDEST to
 * TB_CONTROL_VERSION (out->version says which), for a peer whose other
 * messages this build cannot read.  Returns as tb_control_decode; a
 * message of another type is TB_EPROTO.
 */
int tb_control_decode_refusal(const void *buf, size_t len,
			      tb_control_msg_t *out);

/* The version byte of the message at `buf` (`have` bytes) when its first
 * three bytes are there and carry this protocol's magic, else -1. */
int tb_control_version_of(const void *buf, size_t have);

/*
 * Stream framing: how many more bytes a reader holding `have` bytes at
 * `buf` needs before one whole message is there (0: it is; decode it).
 * Never more than TB_CONTROL_MSG_MAX in all, so a reader can use a fixed
 * buffer.  TB_EPROTO for a header that can never become valid (bad magic,
 * length below a header or above TB_CONTROL_MSG_MAX, or, in this version, an
 * unknown type or a length that is not the type's size): drop the peer.
 */
int tb_control_frame_need(const void *buf, size_t have);

/*
 * 1 if the NUL-terminated tokens `a` and `b` (each read up to
 * TB_CONTROL_TOKEN_LEN bytes) are equal, else 0, in constant time
 * (tb_wire_token_equal).  The recovery protocol's tokens are the same.
 */
int tb_control_token_equal(const char *a, const char *b);

/* Names for logs: "HELLO", "bad token", ...; "?" when out of range. */
const char *tb_control_type_name(unsigned type);
const char *tb_control_reject_name(unsigned reason);
const char *tb_control_bye_name(unsigned reason);

#endif
