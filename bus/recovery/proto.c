/*
 * recovery/proto.c - encoder and decoder of the recovery protocol
 * (recovery/proto.h): a subscriber asks tb-recoveryd for a range of
 * sequence numbers it missed, and gets the frames or a refusal that says
 * what to do next.
 *
 * The protocol
 * ------------
 * A connection starts with HELLO: the stream and its token.  The server
 * answers WELCOME, with the most frames one request may ask for and the
 * newest epoch it holds with its range (which a subscriber that knows no
 * epoch yet, a late joiner after the publisher is gone, starts from), or a
 * REJECT after which it closes the connection.  The token is checked once,
 * here; the connection is then kept, and carries any number of
 * request/response rounds.  A client may send REQUESTs without waiting for
 * the answers (pipelining); the server reads one, answers it whole, and
 * reads the next, so answers come in request order and never interleave.
 * A REQUEST names the stream, the epoch the missing frames belong
 * to, the first sequence and how many.  The server either refuses with a
 * REJECT whose `detail` is the one number the subscriber needs to decide
 * (ask again from the earliest stored sequence, wait for the latest, split
 * the range, back off for so many milliseconds, move to the current epoch),
 * or it answers RESPONSE_BEGIN, then exactly the frames it announced, in
 * sequence order, as tickbus frames (frame.h) back to back, then
 * RESPONSE_END.  The frames are the very bytes the publisher wrote, so the
 * subscriber checks them exactly as it checks live ones (tb_frame_check)
 * and then against what BEGIN announced (tb_recovery_proto_replay_check).  END says
 * whether everything announced was sent; a server that must stop early says
 * TRUNCATED and where it stopped, and the subscriber asks again for the rest.
 *
 * Bounds a reader relies on: a protocol message is at most
 * TB_RECOVERY_PROTO_MSG_MAX bytes, a frame at most TB_FRAME_MAX_LEN, a response at
 * most TB_RECOVERY_PROTO_COUNT_MAX frames.  A reader never sizes anything from a
 * length it has not bounded first.
 *
 * Versioning
 * ----------
 * The rules are those of every tickbus TCP protocol (wire.h): a frozen
 * 8-byte header, one fixed layout per (version, type), reserved fields and
 * string tails zero, every new field, type, enum value or flag a new
 * version; this file is the protocol's table for the shared codec.  The
 * subscriber asks in the highest version it speaks; a newer server answers
 * in the subscriber's version; an older server answers REJECT(malformed) in
 * its own version, whose type (4) and layout (stream id, reason, detail,
 * text at 8, 12, 16, 24) never change, and the subscriber's decoder reports
 * TB_EFORMAT naming both versions.  The frames in a response carry their
 * own version (TB_FRAME_VERSION), checked frame by frame.  This build
 * speaks version 2, which added HELLO and WELCOME and took the token out of
 * REQUEST (version 1 sent it with every request, and had no way to hold a
 * connection open before the first gap).
 *
 * Errors: as wire.h; messages start "recovery <TYPE>:" and name the
 * field.
 */
#include "bus/recovery/proto.h"

#include "bus/error.h"

#include <endian.h>
#include <stddef.h>
#include <string.h>

static const char *const reject_names[TB_RECOVERY_PROTO_REJ_MAX + 1] = {
	[TB_RECOVERY_PROTO_REJ_BUSY] = "busy",
	[TB_RECOVERY_PROTO_REJ_TOO_OLD] = "too old",
	[TB_RECOVERY_PROTO_REJ_NOT_YET] = "not yet published",
	[TB_RECOVERY_PROTO_REJ_TOO_LARGE] = "too large",
	[TB_RECOVERY_PROTO_REJ_RATE_LIMITED] = "rate limited",
	[TB_RECOVERY_PROTO_REJ_UNAUTHORISED] = "unauthorised",
	[TB_RECOVERY_PROTO_REJ_MALFORMED] = "malformed",
	[TB_RECOVERY_PROTO_REJ_UNKNOWN_STREAM] = "unknown stream",
	[TB_RECOVERY_PROTO_REJ_EPOCH_MISMATCH] = "epoch mismatch",
};

const char *tb_recovery_proto_reject_name(unsigned reason)
{
	return tb_wire_enum_name(reject_names, TB_RECOVERY_PROTO_REJ_MAX, reason);
}

/* -------------------------------------------- field rules, shared by both
 * directions: `code` is TB_EINVAL when encoding, TB_EPROTO when decoding. */

/* The range rules a REQUEST and a RESPONSE_BEGIN share. */
static int check_range(const char *ctx, const tb_recovery_proto_begin_t *r,
		       int code)
{
	int rc;

	if ((rc = tb_wire_stream_id_check(ctx, r->stream_id, code)) < 0 ||
	    (rc = tb_wire_epoch_check(ctx, r->epoch, code)) < 0 ||
	    (rc = tb_wire_seq_check(ctx, "first", r->first, code)) < 0)
		return rc;
	if (r->count == 0 || r->count > TB_RECOVERY_PROTO_COUNT_MAX)
		return tb_error_set(code, "%s: count %u is outside 1..%u", ctx,
				  r->count, TB_RECOVERY_PROTO_COUNT_MAX);
	if (r->first > UINT64_MAX - r->count)
		return tb_error_set(code, "%s: first %llu + count %u overflows "
				  "64 bits", ctx, (unsigned long long)r->first,
				  r->count);
	return 0;
}

static int check_welcome(const tb_recovery_proto_welcome_t *m, int code)
{
	const char *ctx = "recovery WELCOME";
	int rc;

	if ((rc = tb_wire_stream_id_check(ctx, m->stream_id, code)) < 0)
		return rc;
	if (m->max_count == 0 || m->max_count > TB_RECOVERY_PROTO_COUNT_MAX)
		return tb_error_set(code, "%s: max_count %u is outside 1..%u", ctx,
				  m->max_count, TB_RECOVERY_PROTO_COUNT_MAX);
	if ((m->first == 0) != (m->last == 0) || m->first > m->last)
		return tb_error_set(code, "%s: first %llu, last %llu is not a "
				  "range (both 0, or 1 <= first <= last)", ctx,
				  (unsigned long long)m->first,
				  (unsigned long long)m->last);
	if (m->epoch == 0 && m->last != 0)
		return tb_error_set(code, "%s: epoch 0 (none held) with last %llu",
				  ctx, (unsigned long long)m->last);
	return 0;
}

static int check_end(const tb_recovery_proto_end_t *m, int code)
{
	const char *ctx = "recovery RESPONSE_END";
	int rc;

	if ((rc = tb_wire_enum_check(ctx, "status", m->status,
				     TB_RECOVERY_PROTO_END_MAX, "an end status",
				     code)) < 0)
		return rc;
	if (m->status == TB_RECOVERY_PROTO_END_COMPLETE && m->last_seq == 0)
		return tb_error_set(code, "%s: last_seq 0 with status complete",
				  ctx);
	return 0;
}

static int check_reject(const tb_recovery_proto_reject_t *m, int code)
{
	const char *ctx = "recovery REJECT";
	uint64_t lo = 0, hi = 0;
	const char *what = "detail";
	int rc;

	if ((rc = tb_wire_enum_check(ctx, "reason", m->reason,
				     TB_RECOVERY_PROTO_REJ_MAX, "a reject reason",
				     code)) < 0)
		return rc;
	switch (m->reason) {
	case TB_RECOVERY_PROTO_REJ_TOO_OLD:
		what = "earliest_seq", lo = 1, hi = UINT64_MAX;
		break;
	case TB_RECOVERY_PROTO_REJ_NOT_YET:
		what = "latest_seq", lo = 0, hi = UINT64_MAX;
		break;
	case TB_RECOVERY_PROTO_REJ_TOO_LARGE:
		what = "max_count", lo = 1, hi = TB_RECOVERY_PROTO_COUNT_MAX;
		break;
	case TB_RECOVERY_PROTO_REJ_RATE_LIMITED:
	case TB_RECOVERY_PROTO_REJ_BUSY:
		what = "retry_after_ms", lo = 1, hi = TB_RECOVERY_PROTO_RETRY_MAX_MS;
		break;
	case TB_RECOVERY_PROTO_REJ_EPOCH_MISMATCH:
		what = "current_epoch", lo = 1, hi = UINT64_MAX;
		break;
	default:
		break; /* unauthorised, malformed, unknown stream: detail 0 */
	}
	if (m->detail < lo || m->detail > hi)
		return tb_error_set(code, "%s: %s %llu is outside %llu..%llu for "
				  "reason '%s'", ctx, what,
				  (unsigned long long)m->detail,
				  (unsigned long long)lo, (unsigned long long)hi,
				  reject_names[m->reason]);
	return 0;
}

/* ------------------------------------------------------ bodies, both ways
 * put_*: host -> wire, into a zeroed wire struct (tb_wire_encode fills the
 * header); get_*: wire -> host, after tb_wire_hdr_check (the whole body is
 * there, aligned).  A REQUEST's body and a RESPONSE_BEGIN's are one layout
 * with one set of rules: only the context of a message differs. */

static void range_put(void *wire, const tb_recovery_proto_begin_t *r)
{
	tb_recovery_proto_wire_begin_t *w = wire;

	w->stream_id = htole32(r->stream_id);
	w->count = htole32(r->count);
	w->epoch = htole64(r->epoch);
	w->first = htole64(r->first);
}

static void range_get(const void *wire, tb_recovery_proto_begin_t *r)
{
	const tb_recovery_proto_wire_begin_t *w = wire;

	r->stream_id = le32toh(w->stream_id);
	r->count = le32toh(w->count);
	r->epoch = le64toh(w->epoch);
	r->first = le64toh(w->first);
}

static int put_request(void *wire, const void *msg)
{
	int rc;

	if ((rc = check_range("recovery REQUEST", msg, TB_EINVAL)) < 0)
		return rc;
	range_put(wire, msg);
	return 0;
}

static int get_request(const void *wire, void *msg)
{
	range_get(wire, msg);
	return check_range("recovery REQUEST", msg, TB_EPROTO);
}

static int put_begin(void *wire, const void *msg)
{
	int rc;

	if ((rc = check_range("recovery RESPONSE_BEGIN", msg, TB_EINVAL)) < 0)
		return rc;
	range_put(wire, msg);
	return 0;
}

static int get_begin(const void *wire, void *msg)
{
	range_get(wire, msg);
	return check_range("recovery RESPONSE_BEGIN", msg, TB_EPROTO);
}

static int put_hello(void *wire, const void *msg)
{
	tb_recovery_proto_wire_hello_t *w = wire;
	const tb_recovery_proto_hello_t *m = msg;
	int rc;

	if ((rc = tb_wire_stream_id_check("recovery HELLO", m->stream_id,
					  TB_EINVAL)) < 0 ||
	    (rc = tb_wire_str_put("recovery HELLO", "token", w->token, m->token,
				  sizeof(w->token), TB_WIRE_STR_TOKEN)) < 0)
		return rc;
	w->stream_id = htole32(m->stream_id);
	return 0;
}

static int get_hello(const void *wire, void *msg)
{
	const tb_recovery_proto_wire_hello_t *w = wire;
	tb_recovery_proto_hello_t *m = msg;
	int rc;

	m->stream_id = le32toh(w->stream_id);
	if ((rc = tb_wire_stream_id_check("recovery HELLO", m->stream_id,
					  TB_EPROTO)) < 0 ||
	    (rc = tb_wire_reserved_check("recovery HELLO", "reserved",
					 w->reserved)) < 0 ||
	    (rc = tb_wire_str_check("recovery HELLO", "token", w->token,
				    sizeof(w->token), TB_WIRE_STR_TOKEN)) < 0)
		return rc;
	memcpy(m->token, w->token, sizeof(m->token));
	return 0;
}

static int put_welcome(void *wire, const void *msg)
{
	tb_recovery_proto_wire_welcome_t *w = wire;
	const tb_recovery_proto_welcome_t *m = msg;
	int rc;

	if ((rc = check_welcome(m, TB_EINVAL)) < 0)
		return rc;
	w->stream_id = htole32(m->stream_id);
	w->max_count = htole32(m->max_count);
	w->epoch = htole64(m->epoch);
	w->first = htole64(m->first);
	w->last = htole64(m->last);
	return 0;
}

static int get_welcome(const void *wire, void *msg)
{
	const tb_recovery_proto_wire_welcome_t *w = wire;
	tb_recovery_proto_welcome_t *m = msg;

	m->stream_id = le32toh(w->stream_id);
	m->max_count = le32toh(w->max_count);
	m->epoch = le64toh(w->epoch);
	m->first = le64toh(w->first);
	m->last = le64toh(w->last);
	return check_welcome(m, TB_EPROTO);
}

static int put_end(void *wire, const void *msg)
{
	tb_recovery_proto_wire_end_t *w = wire;
	const tb_recovery_proto_end_t *m = msg;
	int rc;

	if ((rc = check_end(m, TB_EINVAL)) < 0)
		return rc;
	w->status = htole32(m->status);
	w->last_seq = htole64(m->last_seq);
	return 0;
}

static int get_end(const void *wire, void *msg)
{
	const tb_recovery_proto_wire_end_t *w = wire;
	tb_recovery_proto_end_t *m = msg;
	int rc;

	if ((rc = tb_wire_reserved_check("recovery RESPONSE_END", "reserved",
					 w->reserved)) < 0)
		return rc;
	m->status = le32toh(w->status);
	m->last_seq = le64toh(w->last_seq);
	return check_end(m, TB_EPROTO);
}

static int put_reject(void *wire, const void *msg)
{
	tb_recovery_proto_wire_reject_t *w = wire;
	const tb_recovery_proto_reject_t *m = msg;
	int rc;

	if ((rc = check_reject(m, TB_EINVAL)) < 0 ||
	    (rc = tb_wire_str_put("recovery REJECT", "text", w->text, m->text,
				  sizeof(w->text), TB_WIRE_STR_TEXT)) < 0)
		return rc;
	w->stream_id = htole32(m->stream_id);
	w->reason = htole32(m->reason);
	w->detail = htole64(m->detail);
	return 0;
}

static int get_reject(const void *wire, void *msg)
{
	const tb_recovery_proto_wire_reject_t *w = wire;
	tb_recovery_proto_reject_t *m = msg;
	int rc;

	m->stream_id = le32toh(w->stream_id);
	m->reason = le32toh(w->reason);
	m->detail = le64toh(w->detail);
	if ((rc = check_reject(m, TB_EPROTO)) < 0 ||
	    (rc = tb_wire_str_check("recovery REJECT", "text", w->text,
				    sizeof(w->text), TB_WIRE_STR_TEXT)) < 0)
		return rc;
	memcpy(m->text, w->text, sizeof(m->text));
	return 0;
}

/* ------------------------------------------------------ the protocol table */

static const tb_wire_type_t rproto_types[TB_RECOVERY_PROTO_TYPE_MAX + 1] = {
	[TB_RECOVERY_PROTO_REQUEST] = {"REQUEST",
		sizeof(tb_recovery_proto_wire_request_t), put_request, get_request},
	[TB_RECOVERY_PROTO_RESPONSE_BEGIN] = {"RESPONSE_BEGIN",
		sizeof(tb_recovery_proto_wire_begin_t), put_begin, get_begin},
	[TB_RECOVERY_PROTO_RESPONSE_END] = {"RESPONSE_END",
		sizeof(tb_recovery_proto_wire_end_t), put_end, get_end},
	[TB_RECOVERY_PROTO_REJECT] = {"REJECT",
		sizeof(tb_recovery_proto_wire_reject_t), put_reject, get_reject},
	[TB_RECOVERY_PROTO_HELLO] = {"HELLO",
		sizeof(tb_recovery_proto_wire_hello_t), put_hello, get_hello},
	[TB_RECOVERY_PROTO_WELCOME] = {"WELCOME",
		sizeof(tb_recovery_proto_wire_welcome_t), put_welcome, get_welcome},
};

static const tb_wire_proto_t rproto = {
	.name = "recovery",
	.magic = TB_RECOVERY_PROTO_MAGIC,
	.version = TB_RECOVERY_PROTO_VERSION,
	.type_max = TB_RECOVERY_PROTO_TYPE_MAX,
	.msg_max = TB_RECOVERY_PROTO_MSG_MAX,
	.types = rproto_types,
};

_Static_assert(TB_RECOVERY_PROTO_MSG_MAX <= TB_WIRE_MSG_MAX,
	       "recovery: wire scratch");

const char *tb_recovery_proto_type_name(unsigned type)
{
	return tb_wire_type_name(&rproto, type);
}

/* ------------------------------------------------------- encode, decode */

int tb_recovery_proto_frame_need(const void *buf, size_t have)
{
	return tb_wire_frame_need(&rproto, buf, have);
}

int tb_recovery_proto_encode_hello(void *buf, size_t cap,
				   const tb_recovery_proto_hello_t *m)
{
	return tb_wire_encode(&rproto, TB_RECOVERY_PROTO_HELLO, buf, cap, m);
}

int tb_recovery_proto_encode_welcome(void *buf, size_t cap,
				     const tb_recovery_proto_welcome_t *m)
{
	return tb_wire_encode(&rproto, TB_RECOVERY_PROTO_WELCOME, buf, cap, m);
}

int tb_recovery_proto_encode_request(void *buf, size_t cap,
				     const tb_recovery_proto_request_t *m)
{
	return tb_wire_encode(&rproto, TB_RECOVERY_PROTO_REQUEST, buf, cap, m);
}

int tb_recovery_proto_encode_begin(void *buf, size_t cap,
				   const tb_recovery_proto_begin_t *m)
{
	return tb_wire_encode(&rproto, TB_RECOVERY_PROTO_RESPONSE_BEGIN, buf, cap,
			      m);
}

int tb_recovery_proto_encode_end(void *buf, size_t cap,
				 const tb_recovery_proto_end_t *m)
{
	return tb_wire_encode(&rproto, TB_RECOVERY_PROTO_RESPONSE_END, buf, cap, m);
}

int tb_recovery_proto_encode_reject(void *buf, size_t cap,
				    const tb_recovery_proto_reject_t *m)
{
	return tb_wire_encode(&rproto, TB_RECOVERY_PROTO_REJECT, buf, cap, m);
}

int tb_recovery_proto_decode(const void *buf, size_t len,
			     tb_recovery_proto_msg_t *out)
{
	tb_recovery_proto_msg_t m;
	tb_wire_hdr_t h;
	int rc;

	memset(&m, 0, sizeof(m));
	/* The body goes to the union: every member starts where request does. */
	if ((rc = tb_wire_decode(&rproto, buf, len, &h, &m.request)) < 0)
		return rc;
	m.type = h.type;
	m.version = h.version;
	m.length = h.length;
	*out = m;
	return rc;
}

/* ------------------------------------------------ frames inside a response */

/* tb_frame_check() reads the header through a pointer, which must be
 * aligned; bytes from a socket buffer need not be.  It reads nothing but
 * the header (the length is compared with `avail`, not followed), so it is
 * given an aligned copy of the header and the true number of bytes. */
static int64_t frame_check_unaligned(const void *buf, size_t avail,
				     tb_frame_hdr_t *h)
{
	int64_t n;

	if (avail < TB_FRAME_HDR_LEN)
		return tb_error_set(TB_EPROTO, "recovery frame: truncated: %zu "
				  "bytes, a frame header is %u", avail,
				  TB_FRAME_HDR_LEN);
	memcpy(h, buf, sizeof(*h));
	n = tb_frame_check(h, avail);
	if (n == TB_EFORMAT)
		return tb_error_set(TB_EFORMAT, "recovery frame: version %u type "
				  "%u is not a tickbus frame of version %u",
				  h->version, h->type, TB_FRAME_VERSION);
	if (n < 0)
		return tb_error_set((int)n, "recovery frame: length %u is outside "
				  "%u..%u or beyond the %zu bytes at hand",
				  h->length, TB_FRAME_HDR_LEN,
				  TB_FRAME_MAX_LEN, avail);
	return n;
}

int tb_recovery_proto_replay_need(const void *buf, size_t have)
{
	tb_frame_hdr_t h;
	int64_t n;

	if (have < TB_FRAME_HDR_LEN)
		return (int)(TB_FRAME_HDR_LEN - have);
	/* Judge the header as if the whole frame were there; only the
	 * length is then compared with what has arrived. */
	n = frame_check_unaligned(buf, TB_FRAME_MAX_LEN, &h);
	if (n < 0)
		return (int)n;
	return (uint64_t)n <= have ? 0 : (int)((uint64_t)n - have);
}

int64_t tb_recovery_proto_replay_check(const void *buf, size_t len,
			       const tb_recovery_proto_begin_t *begin, uint64_t index)
{
	const char *ctx = "recovery frame";
	tb_frame_hdr_t h;
	int64_t n;

	n = frame_check_unaligned(buf, len, &h);
	if (n < 0)
		return n;
	if (index >= begin->count)
		return tb_error_set(TB_EPROTO, "%s: index %llu, but the response "
				  "announced %u frames (count)", ctx,
				  (unsigned long long)index, begin->count);
	if (h.type != TB_FRAME_DATA)
		return tb_error_set(TB_EPROTO, "%s: type %u; a response carries "
				  "only data frames", ctx, h.type);
	if (h.stream_id != begin->stream_id)
		return tb_error_set(TB_EPROTO, "%s: stream_id %u, the response is "
				  "for %u", ctx, h.stream_id, begin->stream_id);
	if (h.seq != begin->first + index)
		return tb_error_set(TB_EPROTO, "%s: seq %llu, expected %llu", ctx,
				  (unsigned long long)h.seq,
				  (unsigned long long)(begin->first + index));
	return n;
}
