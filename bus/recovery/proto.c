/*
 * recovery/proto.c - encoder and decoder of the recovery protocol
 * (recovery/proto.h): a subscriber asks tb-recoveryd for a range of
 * sequence numbers it missed, and gets the frames or a refusal that says
 * what to do next.
 *
 * The protocol
 * ------------
 * One TCP connection carries any number of request/response rounds, one at
 * a time.  A REQUEST names the stream, the epoch the missing frames belong
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
 * The rules are those of the control protocol (control.c): a frozen 8-byte
 * header, one fixed layout per (version, type), reserved fields and string
 * tails zero, every new field, type, enum value or flag a new version.  The
 * subscriber asks in the highest version it speaks; a newer server answers
 * in the subscriber's version; an older server answers REJECT(malformed) in
 * its own version, whose layout (stream id, reason, detail, text at 8, 12,
 * 16, 24) never changes, and the subscriber's decoder reports TB_EFORMAT
 * naming both versions.  The frames in a response carry their own version
 * (TB_FRAME_VERSION), checked frame by frame.  This build speaks version 1.
 *
 * Errors: as control.c; messages start "recovery <TYPE>:" and name the
 * field.
 */
#include "bus/recovery/proto.h"

#include "bus/error.h"

#include <endian.h>
#include <string.h>

static const uint32_t rproto_size[TB_RECOVERY_PROTO_TYPE_MAX + 1] = {
	[TB_RECOVERY_PROTO_REQUEST] = sizeof(tb_recovery_proto_wire_request_t),
	[TB_RECOVERY_PROTO_RESPONSE_BEGIN] = sizeof(tb_recovery_proto_wire_begin_t),
	[TB_RECOVERY_PROTO_RESPONSE_END] = sizeof(tb_recovery_proto_wire_end_t),
	[TB_RECOVERY_PROTO_REJECT] = sizeof(tb_recovery_proto_wire_reject_t),
};

static const char *const rproto_type_names[TB_RECOVERY_PROTO_TYPE_MAX + 1] = {
	[TB_RECOVERY_PROTO_REQUEST] = "REQUEST",
	[TB_RECOVERY_PROTO_RESPONSE_BEGIN] = "RESPONSE_BEGIN",
	[TB_RECOVERY_PROTO_RESPONSE_END] = "RESPONSE_END",
	[TB_RECOVERY_PROTO_REJECT] = "REJECT",
};

static const tb_wire_proto_t rproto = {
	.name = "recovery",
	.magic = TB_RECOVERY_PROTO_MAGIC,
	.version = TB_RECOVERY_PROTO_VERSION,
	.type_max = TB_RECOVERY_PROTO_TYPE_MAX,
	.msg_max = TB_RECOVERY_PROTO_MSG_MAX,
	.size = rproto_size,
	.type_name = rproto_type_names,
};

static const char *const reject_names[TB_RECOVERY_PROTO_REJ_MAX + 1] = {
	[TB_RECOVERY_PROTO_REJ_TOO_OLD] = "too old",
	[TB_RECOVERY_PROTO_REJ_NOT_YET] = "not yet published",
	[TB_RECOVERY_PROTO_REJ_TOO_LARGE] = "too large",
	[TB_RECOVERY_PROTO_REJ_RATE_LIMITED] = "rate limited",
	[TB_RECOVERY_PROTO_REJ_UNAUTHORISED] = "unauthorised",
	[TB_RECOVERY_PROTO_REJ_MALFORMED] = "malformed",
	[TB_RECOVERY_PROTO_REJ_UNKNOWN_STREAM] = "unknown stream",
	[TB_RECOVERY_PROTO_REJ_EPOCH_MISMATCH] = "epoch mismatch",
};

const char *tb_recovery_proto_type_name(unsigned type)
{
	return type >= 1 && type <= TB_RECOVERY_PROTO_TYPE_MAX ? rproto_type_names[type]
						       : "?";
}

const char *tb_recovery_proto_reject_name(unsigned reason)
{
	return reason >= 1 && reason <= TB_RECOVERY_PROTO_REJ_MAX ? reject_names[reason]
							  : "?";
}

int tb_recovery_proto_frame_need(const void *buf, size_t have)
{
	return tb_wire_frame_need(&rproto, buf, have);
}

/* -------------------------------------------- field rules, shared by both
 * directions: `code` is TB_EINVAL when encoding, TB_EPROTO when decoding. */

/* The range rules a REQUEST and a RESPONSE_BEGIN share. */
static int check_range(const char *ctx, uint32_t stream_id, uint64_t epoch,
		       uint64_t first, uint32_t count, int code)
{
	if (stream_id == 0)
		return tb_error_set(code, "%s: stream_id 0 names no stream", ctx);
	if (epoch == 0)
		return tb_error_set(code, "%s: epoch 0 is not an epoch", ctx);
	if (first == 0)
		return tb_error_set(code, "%s: first 0 (sequences start at 1)",
				  ctx);
	if (count == 0 || count > TB_RECOVERY_PROTO_COUNT_MAX)
		return tb_error_set(code, "%s: count %u is outside 1..%u", ctx,
				  count, TB_RECOVERY_PROTO_COUNT_MAX);
	if (first > UINT64_MAX - count)
		return tb_error_set(code, "%s: first %llu + count %u overflows "
				  "64 bits", ctx, (unsigned long long)first,
				  count);
	return 0;
}

static int check_request(const tb_recovery_proto_request_t *m, int code)
{
	return check_range("recovery REQUEST", m->stream_id, m->epoch,
			   m->first, m->count, code);
}

static int check_begin(const tb_recovery_proto_begin_t *m, int code)
{
	return check_range("recovery RESPONSE_BEGIN", m->stream_id, m->epoch,
			   m->first, m->count, code);
}

static int check_end(const tb_recovery_proto_end_t *m, int code)
{
	const char *ctx = "recovery RESPONSE_END";

	if (m->status < 1 || m->status > TB_RECOVERY_PROTO_END_MAX)
		return tb_error_set(code, "%s: status %u is not an end status "
				  "(1..%u)", ctx, m->status, TB_RECOVERY_PROTO_END_MAX);
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
		what = "retry_after_ms", lo = 1, hi = TB_RECOVERY_PROTO_RETRY_MAX_MS;
		break;
	case TB_RECOVERY_PROTO_REJ_EPOCH_MISMATCH:
		what = "current_epoch", lo = 1, hi = UINT64_MAX;
		break;
	case TB_RECOVERY_PROTO_REJ_UNAUTHORISED:
	case TB_RECOVERY_PROTO_REJ_MALFORMED:
	case TB_RECOVERY_PROTO_REJ_UNKNOWN_STREAM:
		break; /* detail must be 0 */
	default:
		return tb_error_set(code, "%s: reason %u is not a reject reason "
				  "(1..%u)", ctx, m->reason, TB_RECOVERY_PROTO_REJ_MAX);
	}
	if (m->detail < lo || m->detail > hi)
		return tb_error_set(code, "%s: %s %llu is outside %llu..%llu for "
				  "reason '%s'", ctx, what,
				  (unsigned long long)m->detail,
				  (unsigned long long)lo, (unsigned long long)hi,
				  reject_names[m->reason]);
	return 0;
}

static int too_small(const char *type, size_t cap, size_t need)
{
	return tb_error_set(TB_EMSGSIZE, "recovery %s: buffer of %zu bytes, the "
			  "message is %zu", type, cap, need);
}

/* ---------------------------------------------------------------- encode */

int tb_recovery_proto_encode_request(void *buf, size_t cap,
			     const tb_recovery_proto_request_t *m)
{
	tb_recovery_proto_wire_request_t w;
	int rc;

	if (cap < sizeof(w))
		return too_small("REQUEST", cap, sizeof(w));
	if ((rc = check_request(m, TB_EINVAL)) < 0)
		return rc;
	memset(&w, 0, sizeof(w));
	if ((rc = tb_wire_str_put("recovery REQUEST", "token", w.token,
				  m->token, sizeof(w.token),
				  TB_WIRE_STR_TOKEN)) < 0)
		return rc;
	tb_wire_hdr_put(&w.hdr, TB_RECOVERY_PROTO_MAGIC, TB_RECOVERY_PROTO_VERSION,
			TB_RECOVERY_PROTO_REQUEST, sizeof(w));
	w.stream_id = htole32(m->stream_id);
	w.count = htole32(m->count);
	w.epoch = htole64(m->epoch);
	w.first = htole64(m->first);
	memcpy(buf, &w, sizeof(w));
	return (int)sizeof(w);
}

int tb_recovery_proto_encode_begin(void *buf, size_t cap, const tb_recovery_proto_begin_t *m)
{
	tb_recovery_proto_wire_begin_t w;
	int rc;

	if (cap < sizeof(w))
		return too_small("RESPONSE_BEGIN", cap, sizeof(w));
	if ((rc = check_begin(m, TB_EINVAL)) < 0)
		return rc;
	memset(&w, 0, sizeof(w));
	tb_wire_hdr_put(&w.hdr, TB_RECOVERY_PROTO_MAGIC, TB_RECOVERY_PROTO_VERSION,
			TB_RECOVERY_PROTO_RESPONSE_BEGIN, sizeof(w));
	w.stream_id = htole32(m->stream_id);
	w.count = htole32(m->count);
	w.epoch = htole64(m->epoch);
	w.first = htole64(m->first);
	memcpy(buf, &w, sizeof(w));
	return (int)sizeof(w);
}

int tb_recovery_proto_encode_end(void *buf, size_t cap, const tb_recovery_proto_end_t *m)
{
	tb_recovery_proto_wire_end_t w;
	int rc;

	if (cap < sizeof(w))
		return too_small("RESPONSE_END", cap, sizeof(w));
	if ((rc = check_end(m, TB_EINVAL)) < 0)
		return rc;
	memset(&w, 0, sizeof(w));
	tb_wire_hdr_put(&w.hdr, TB_RECOVERY_PROTO_MAGIC, TB_RECOVERY_PROTO_VERSION,
			TB_RECOVERY_PROTO_RESPONSE_END, sizeof(w));
	w.status = htole32(m->status);
	w.last_seq = htole64(m->last_seq);
	memcpy(buf, &w, sizeof(w));
	return (int)sizeof(w);
}

int tb_recovery_proto_encode_reject(void *buf, size_t cap, const tb_recovery_proto_reject_t *m)
{
	tb_recovery_proto_wire_reject_t w;
	int rc;

	if (cap < sizeof(w))
		return too_small("REJECT", cap, sizeof(w));
	if ((rc = check_reject(m, TB_EINVAL)) < 0)
		return rc;
	memset(&w, 0, sizeof(w));
	if ((rc = tb_wire_str_put("recovery REJECT", "text", w.text, m->text,
				  sizeof(w.text), TB_WIRE_STR_TEXT)) < 0)
		return rc;
	tb_wire_hdr_put(&w.hdr, TB_RECOVERY_PROTO_MAGIC, TB_RECOVERY_PROTO_VERSION,
			TB_RECOVERY_PROTO_REJECT, sizeof(w));
	w.stream_id = htole32(m->stream_id);
	w.reason = htole32(m->reason);
	w.detail = htole64(m->detail);
	memcpy(buf, &w, sizeof(w));
	return (int)sizeof(w);
}

/* ---------------------------------------------------------------- decode
 * Each decode_* runs after tb_wire_hdr_check(): the whole body is there. */

static int decode_request(const void *buf, tb_recovery_proto_request_t *m)
{
	tb_recovery_proto_wire_request_t w;
	int rc;

	memcpy(&w, buf, sizeof(w));
	m->stream_id = le32toh(w.stream_id);
	m->count = le32toh(w.count);
	m->epoch = le64toh(w.epoch);
	m->first = le64toh(w.first);
	if ((rc = check_request(m, TB_EPROTO)) < 0)
		return rc;
	if ((rc = tb_wire_str_check("recovery REQUEST", "token", w.token,
				    sizeof(w.token), TB_WIRE_STR_TOKEN)) < 0)
		return rc;
	memcpy(m->token, w.token, sizeof(m->token));
	return 0;
}

static int decode_begin(const void *buf, tb_recovery_proto_begin_t *m)
{
	tb_recovery_proto_wire_begin_t w;

	memcpy(&w, buf, sizeof(w));
	m->stream_id = le32toh(w.stream_id);
	m->count = le32toh(w.count);
	m->epoch = le64toh(w.epoch);
	m->first = le64toh(w.first);
	return check_begin(m, TB_EPROTO);
}

static int decode_end(const void *buf, tb_recovery_proto_end_t *m)
{
	tb_recovery_proto_wire_end_t w;

	memcpy(&w, buf, sizeof(w));
	if (w.reserved != 0)
		return tb_error_set(TB_EPROTO, "recovery RESPONSE_END: reserved "
				  "is not zero");
	m->status = le32toh(w.status);
	m->last_seq = le64toh(w.last_seq);
	return check_end(m, TB_EPROTO);
}

static int decode_reject(const void *buf, tb_recovery_proto_reject_t *m)
{
	tb_recovery_proto_wire_reject_t w;
	int rc;

	memcpy(&w, buf, sizeof(w));
	m->stream_id = le32toh(w.stream_id);
	m->reason = le32toh(w.reason);
	m->detail = le64toh(w.detail);
	if ((rc = check_reject(m, TB_EPROTO)) < 0)
		return rc;
	if ((rc = tb_wire_str_check("recovery REJECT", "text", w.text,
				    sizeof(w.text), TB_WIRE_STR_TEXT)) < 0)
		return rc;
	memcpy(m->text, w.text, sizeof(m->text));
	return 0;
}

int tb_recovery_proto_decode(const void *buf, size_t len, tb_recovery_proto_msg_t *out)
{
	tb_wire_hdr_t h;
	tb_recovery_proto_msg_t m;
	int rc;

	if ((rc = tb_wire_hdr_check(&rproto, buf, len, &h)) < 0)
		return rc;
	memset(&m, 0, sizeof(m));
	m.type = h.type;
	m.version = h.version;
	m.length = h.length;
	switch (h.type) {
	case TB_RECOVERY_PROTO_REQUEST: rc = decode_request(buf, &m.request); break;
	case TB_RECOVERY_PROTO_RESPONSE_BEGIN: rc = decode_begin(buf, &m.begin); break;
	case TB_RECOVERY_PROTO_RESPONSE_END: rc = decode_end(buf, &m.end); break;
	case TB_RECOVERY_PROTO_REJECT: rc = decode_reject(buf, &m.reject); break;
	default: /* tb_wire_hdr_check() admits only known types */
		rc = tb_error_set(TB_EPROTO, "recovery: unknown message type %u",
				h.type);
	}
	if (rc < 0)
		return rc;
	*out = m;
	return (int)h.length;
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
