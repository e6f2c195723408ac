/*
 * wire.h - the message convention every tickbus TCP protocol shares: the
 * control protocol (transport/control.h) and the recovery protocol
 * (recovery/proto.h).  Pure codec: no sockets here.
 *
 * A message is a fixed 8-byte header followed by a fixed body whose size
 * depends only on (version, type).  All fields little-endian:
 *
 *   offset  size  field
 *        0     2  magic     the protocol's own ("TC", "TR" on the wire)
 *        2     1  version   the protocol's version
 *        3     1  type      1 .. the protocol's last type
 *        4     4  length    of the whole message, header included
 *
 * Messages are fixed-size records, not self-describing ones.  That makes
 * validation a short, total list of checks: the length must equal the
 * type's size exactly, every reserved field and every byte after a
 * string's NUL must be zero, every enum and flag set must be one this
 * version defines.  There is one valid encoding of every message, which
 * the tests exploit (decode, re-encode, compare bytes) and which means a
 * decoder never has to guess.  A reader on a byte stream calls
 * tb_wire_frame_need() until it says 0, then decodes; no length is trusted
 * beyond the protocol's msg_max, so a hostile peer can make a reader wait
 * but never allocate.
 *
 * Versioning, the same in every protocol:
 *  - The header never changes, in any version: any peer can frame a
 *    message of any version and read its version (byte 2) and type.
 *  - A version fixes the size and layout of every body.  A field is never
 *    reinterpreted and there are no optional fields: adding or changing
 *    one, or defining a new type, enum value or flag, makes a new version.
 *    Reserved fields exist so that a later version can use them; a version
 *    insists they are zero.
 *  - Each protocol keeps the layout of its refusal (REJECT) the same in
 *    every version, so that a refusal is always readable.
 *
 * A protocol describes itself once, as a table (tb_wire_proto_t): its
 * magic, version and, for each type, its name, size and the two functions
 * that move a body between its host struct and its wire struct, each
 * checking every field.  tb_wire_encode() and tb_wire_decode() do the rest
 * the same way for every protocol: buffer sizes, the header, alignment.
 *
 * Errors: decode failures are TB_EFORMAT (not this protocol, or not this
 * version) or TB_EPROTO (this protocol, broken); tb_errmsg() starts
 * "<protocol> <TYPE>:" and names the field.  Encoders refuse with
 * TB_EINVAL what a decoder would refuse, and TB_EMSGSIZE a buffer too small.
 *
 * Threads: every function is pure apart from the thread-local tb_errmsg();
 * any thread may call any of them.
 */
#ifndef TB_WIRE_H
#define TB_WIRE_H

#include <stddef.h>
#include <stdint.h>

typedef struct tb_wire_hdr {
	uint16_t magic;
	uint8_t version;
	uint8_t type;
	uint32_t length;
} tb_wire_hdr_t;

_Static_assert(offsetof(tb_wire_hdr_t, magic) == 0, "wire header layout");
_Static_assert(offsetof(tb_wire_hdr_t, version) == 2, "wire header layout");
_Static_assert(offsetof(tb_wire_hdr_t, type) == 3, "wire header layout");
_Static_assert(offsetof(tb_wire_hdr_t, length) == 4, "wire header layout");
_Static_assert(sizeof(tb_wire_hdr_t) == 8, "wire header layout");

#define TB_WIRE_HDR_LEN 8u
/* No protocol's msg_max may exceed this: the codec's aligned scratch copy
 * of one message. */
#define TB_WIRE_MSG_MAX 512u

/* One message type of a protocol, in the version the build speaks. */
typedef struct tb_wire_type {
	const char *name;          /* "HELLO": in messages after the protocol's */
	uint32_t size;             /* the whole message, header included */
	/* Host struct `m` -> wire struct `w` (zeroed; the header is filled
	 * afterwards).  Checks every field as the decoder would: 0, or
	 * TB_EINVAL naming the field. */
	int (*put)(void *w, const void *m);
	/* Wire struct `w` (aligned; the header already checked) -> host
	 * struct `m`.  Checks every field: 0, or TB_EPROTO naming it. */
	int (*get)(const void *w, void *m);
} tb_wire_type_t;

/* A protocol, as the shared codec needs to know it. */
typedef struct tb_wire_proto {
	const char *name;          /* "control", "recovery": starts messages */
	uint16_t magic;
	uint8_t version;           /* the one version this build speaks */
	uint8_t type_max;          /* types are 1..type_max */
	uint32_t msg_max;          /* no message is longer; <= TB_WIRE_MSG_MAX */
	const tb_wire_type_t *types; /* types[1..type_max], each complete */
} tb_wire_proto_t;

/*
 * Stream framing: how many more bytes a reader holding `have` bytes at
 * `buf` needs before one whole message is there (0: it is; decode it).
 * Never more than p->msg_max in all.  TB_EPROTO for a header that can never
 * become valid (bad magic, length below a header or above msg_max, or, in
 * this version, an unknown type or a length that is not the type's size).
 */
int tb_wire_frame_need(const tb_wire_proto_t *p, const void *buf,
		       size_t have);

/* Checks the header of the message at `buf` against `p` and `len` (magic,
 * version, type, length = the type's size, whole message present) and
 * returns it in host order in `*h`.  Returns 0, TB_EFORMAT or TB_EPROTO. */
int tb_wire_hdr_check(const tb_wire_proto_t *p, const void *buf, size_t len,
		      tb_wire_hdr_t *h);

/* Fills a header in wire order. */
void tb_wire_hdr_put(tb_wire_hdr_t *w, uint16_t magic, uint8_t version,
		     uint8_t type, uint32_t length);

/*
 * Encodes host struct `m` as a message of `type` (1..p->type_max) into
 * `buf` (`cap` bytes).  Returns the bytes written, TB_EMSGSIZE when `cap`
 * is too small, or what the type's put() refused (TB_EINVAL).
 */
int tb_wire_encode(const tb_wire_proto_t *p, unsigned type, void *buf,
		   size_t cap, const void *m);

/*
 * Decodes the message at the start of `buf` (`len` readable bytes; `buf`
 * may have any alignment) into host struct `m`, the one for the type named
 * in the header, which comes back in `*h`.  Returns the bytes the message
 * occupied (> 0), or TB_EFORMAT / TB_EPROTO; `m` may be partly written on
 * failure, so decode into a scratch struct.
 */
int tb_wire_decode(const tb_wire_proto_t *p, const void *buf, size_t len,
		   tb_wire_hdr_t *h, void *m);

/* The name of `type` in `p`, or "?" when out of range. */
const char *tb_wire_type_name(const tb_wire_proto_t *p, unsigned type);

/* names[v] for v in 1..max, else "?": reason and status names for logs. */
const char *tb_wire_enum_name(const char *const *names, unsigned max,
			      unsigned v);

/* ------------------------------------------------------- field checks
 * Rules fields obey in every protocol.  `ctx` starts the message
 * ("control HELLO"); `code` is TB_EINVAL when encoding, TB_EPROTO when
 * decoding.  Each returns 0 or `code`. */

/* A stream id: 0 names no stream. */
int tb_wire_stream_id_check(const char *ctx, uint32_t id, int code);

/* An epoch: 0 is not one. */
int tb_wire_epoch_check(const char *ctx, uint64_t epoch, int code);

/* A sequence number, field `what`: sequences start at 1. */
int tb_wire_seq_check(const char *ctx, const char *what, uint64_t seq,
		      int code);

/* An enum value `v` of `what` ("reason") in 1..max; `kind` names the enum
 * with its article ("a reject reason"). */
int tb_wire_enum_check(const char *ctx, const char *what, unsigned v,
		       unsigned max, const char *kind, int code);

/* A reserved field `what`, as received: it must be zero (TB_EPROTO). */
int tb_wire_reserved_check(const char *ctx, const char *what, uint64_t v);

/* String rules for a fixed field: `what` is the field's name in messages. */
enum tb_wire_str_rule {
	TB_WIRE_STR_TEXT = 0,     /* printable ASCII with spaces, may be "" */
	TB_WIRE_STR_WORD = 1,     /* printable ASCII without spaces, may be "" */
	TB_WIRE_STR_TOKEN = 2,    /* a WORD that must not be "" */
};

/* Checks a string field as received: a NUL within the `size` bytes, the
 * text before it obeys `rule`, only zeros after it.  0 or TB_EPROTO naming
 * `ctx` and `what`. */
int tb_wire_str_check(const char *ctx, const char *what, const char *f,
		      size_t size, enum tb_wire_str_rule rule);

/* Checks a host string against `rule` (a NUL within `size` bytes) and
 * copies it into wire field `dst` zero-padded.  0 or TB_EINVAL. */
int tb_wire_str_put(const char *ctx, const char *what, char *dst,
		    const char *src, size_t size, enum tb_wire_str_rule rule);

/*
 * 1 if the NUL-terminated tokens `a` and `b` (each read up to `size`
 * bytes) are equal, else 0.  The time taken depends on the two lengths
 * only, never on where the contents differ: every one of the `size`
 * positions is compared, with no early exit.
 */
int tb_wire_token_equal(const char *a, const char *b, size_t size);

#endif
