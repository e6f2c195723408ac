/*
 * control.c - encoder and decoder of the control protocol (control.h), and
 * the header convention every tickbus TCP protocol shares.
 *
 * The protocol
 * ------------
 * A subscriber that wants an rc feed opens a TCP connection to the
 * publisher's control endpoint and says HELLO (its name, its token, the
 * stream), then SUBSCRIBE (everything the publisher needs to RDMA-WRITE into
 * the subscriber's ring).  The publisher answers ACCEPT (everything the
 * subscriber needs to bring its QP up and to return credits) or REJECT, and
 * from then on both sides send HEARTBEATs until one says BYE.  TCP carries
 * only this set-up and liveness; the data never touches it.
 *
 * Messages are fixed-size records, not self-describing ones: an 8-byte
 * header (magic, version, type, length) and a body whose size follows from
 * (version, type) alone.  That makes validation a short, total list of
 * checks: the length must equal the type's size exactly, every reserved
 * field and every byte after a string's NUL must be zero, every enum and
 * flag set must be one this version defines.  There is one valid encoding of
 * every message, which the tests exploit (decode, re-encode, compare bytes)
 * and which means a decoder never has to guess.
 *
 * A reader on a byte stream calls tb_control_frame_need() until it says 0, then
 * tb_control_decode().  No length is trusted beyond TB_CONTROL_MSG_MAX, so a hostile
 * peer can make a reader wait but never allocate: a fixed buffer of
 * TB_CONTROL_MSG_MAX bytes per connection is enough.
 *
 * Versioning
 * ----------
 *  - The header never changes, in any version: any peer can frame a
 *    message of any version and read its version (byte 2) and type.
 *  - A version fixes the size and layout of every body.  A field is never
 *    reinterpreted and there are no optional fields: adding or changing
 *    one, or defining a new type, enum value or flag, makes a new version.
 *    Reserved fields exist so that a later version can use them; this
 *    version insists they are zero.
 *  - REJECT's layout (stream id, reason, text at offsets 8, 12, 16) is the
 *    same in every version, so that a refusal is always readable.
 *  - The subscriber speaks first, in the highest version it knows.  A
 *    publisher that speaks that version answers in it: a newer publisher
 *    keeps the codecs of older versions and answers an older subscriber in
 *    the subscriber's version.  A publisher older than its subscriber
 *    answers REJECT(bad version) in its own version and closes.  The
 *    subscriber's decoder then fails with TB_EFORMAT naming both versions;
 *    if the subscriber also speaks the publisher's version it reconnects
 *    with it, and otherwise gives up with that message.
 *  - This build speaks version 1 only.
 *
 * Errors: decode failures are TB_EFORMAT (not this protocol, or not this
 * version) or TB_EPROTO (this protocol, broken); the tb_errmsg() text starts
 * "control <TYPE>:" and names the field.  Encoders refuse with TB_EINVAL
 * what a decoder would refuse, and TB_EMSGSIZE a buffer too small.
 */
#include "bus/transport/control.h"

#include "bus/error.h"
#include "bus/frame.h"

#include <endian.h>
#include <string.h>

/* --------------------------------------------- shared header convention */

void tb_wire_hdr_put(tb_wire_hdr_t *w, uint16_t magic, uint8_t version,
		     uint8_t type, uint32_t length)
{
	w->magic = htole16(magic);
	w->version = version;
	w->type = type;
	w->length = htole32(length);
}

static const char *type_name_of(const tb_wire_proto_t *p, unsigned type)
{
	return type >= 1 && type <= p->type_max ? p->type_name[type] : "?";
}

int tb_wire_frame_need(const tb_wire_proto_t *p, const void *buf,
		       size_t have)
{
	tb_wire_hdr_t w;
	uint16_t magic;
	uint32_t length;

	/* The magic alone already tells a stranger apart: fail early. */
	if (have >= sizeof(w.magic)) {
		memcpy(&magic, buf, sizeof(magic));
		magic = le16toh(magic);
		if (magic != p->magic)
			return tb_error_set(TB_EPROTO,
					  "%s: bad magic 0x%04x (expected 0x%04x)",
					  p->name, magic, p->magic);
	}
	if (have < TB_WIRE_HDR_LEN)
		return (int)(TB_WIRE_HDR_LEN - have);

	memcpy(&w, buf, sizeof(w));
	length = le32toh(w.length);
	if (length < TB_WIRE_HDR_LEN || length > p->msg_max)
		return tb_error_set(TB_EPROTO,
				  "%s: length %u is outside %u..%u", p->name,
				  length, TB_WIRE_HDR_LEN, p->msg_max);
	/* Another version's sizes are unknown here; tb_*_decode() will say
	 * which version it was once the bounded message is in. */
	if (w.version == p->version) {
		if (w.type < 1 || w.type > p->type_max)
			return tb_error_set(TB_EPROTO,
					  "%s: unknown message type %u",
					  p->name, w.type);
		if (length != p->size[w.type])
			return tb_error_set(TB_EPROTO,
					  "%s %s: length %u, but the message is %u bytes",
					  p->name, p->type_name[w.type], length,
					  p->size[w.type]);
	}
	return have >= length ? 0 : (int)(length - have);
}

int tb_wire_hdr_check(const tb_wire_proto_t *p, const void *buf, size_t len,
		      tb_wire_hdr_t *h)
{
	tb_wire_hdr_t w;

	if (len < TB_WIRE_HDR_LEN)
		return tb_error_set(TB_EPROTO,
				  "%s: truncated: %zu bytes, a header is %u",
				  p->name, len, TB_WIRE_HDR_LEN);
	memcpy(&w, buf, sizeof(w));
	h->magic = le16toh(w.magic);
	h->version = w.version;
	h->type = w.type;
	h->length = le32toh(w.length);

	if (h->magic != p->magic)
		return tb_error_set(TB_EFORMAT,
				  "%s: bad magic 0x%04x (expected 0x%04x)",
				  p->name, h->magic, p->magic);
	if (h->version != p->version)
		return tb_error_set(TB_EFORMAT,
				  "%s: protocol version %u is not supported; this peer speaks version %u",
				  p->name, h->version, p->version);
	if (h->type < 1 || h->type > p->type_max)
		return tb_error_set(TB_EPROTO, "%s: unknown message type %u",
				  p->name, h->type);
	if (h->length != p->size[h->type])
		return tb_error_set(TB_EPROTO,
				  "%s %s: length %u, but the message is %u bytes",
				  p->name, type_name_of(p, h->type), h->length,
				  p->size[h->type]);
	if (h->length > len)
		return tb_error_set(TB_EPROTO,
				  "%s %s: truncated: %zu of %u bytes (length)",
				  p->name, type_name_of(p, h->type), len,
				  h->length);
	return 0;
}

static int str_byte_ok(unsigned char c, enum tb_wire_str_rule rule)
{
	if (rule == TB_WIRE_STR_TEXT)
		return c >= 0x20 && c <= 0x7e;
	return c > 0x20 && c <= 0x7e;
}

static const char *str_rule_words(enum tb_wire_str_rule rule)
{
	return rule == TB_WIRE_STR_TEXT ? "printable ASCII"
					: "printable ASCII without spaces";
}

int tb_wire_str_check(const char *ctx, const char *what, const char *f,
		      size_t size, enum tb_wire_str_rule rule)
{
	size_t n = strnlen(f, size), i;

	if (n == size)
		return tb_error_set(TB_EPROTO, "%s: %s is not NUL-terminated "
				  "within its %zu bytes", ctx, what, size);
	for (i = 0; i < n; i++)
		if (!str_byte_ok((unsigned char)f[i], rule))
			return tb_error_set(TB_EPROTO,
					  "%s: %s has byte 0x%02x at %zu; it must be %s",
					  ctx, what, (unsigned char)f[i], i,
					  str_rule_words(rule));
	for (i = n + 1; i < size; i++)
		if (f[i] != 0)
			return tb_error_set(TB_EPROTO,
					  "%s: %s has non-zero bytes after its NUL",
					  ctx, what);
	if (rule == TB_WIRE_STR_TOKEN && n == 0)
		return tb_error_set(TB_EPROTO, "%s: %s is empty", ctx, what);
	return 0;
}

int tb_wire_str_put(const char *ctx, const char *what, char *dst,
		    const char *src, size_t size, enum tb_wire_str_rule rule)
{
	size_t n = strnlen(src, size), i;

	if (n == size)
		return tb_error_set(TB_EINVAL, "%s: %s is longer than %zu characters",
				  ctx, what, size - 1);
	for (i = 0; i < n; i++)
		if (!str_byte_ok((unsigned char)src[i], rule))
			return tb_error_set(TB_EINVAL,
					  "%s: %s has byte 0x%02x at %zu; it must be %s",
					  ctx, what, (unsigned char)src[i], i,
					  str_rule_words(rule));
	if (rule == TB_WIRE_STR_TOKEN && n == 0)
		return tb_error_set(TB_EINVAL, "%s: %s is empty", ctx, what);
	memset(dst, 0, size);
	memcpy(dst, src, n);
	return 0;
}

/* ------------------------------------------------------ the protocol table */

static const uint32_t ctl_size[TB_CONTROL_TYPE_MAX + 1] = {
	[TB_CONTROL_HELLO] = sizeof(tb_control_wire_hello_t),
	[TB_CONTROL_SUBSCRIBE] = sizeof(tb_control_wire_subscribe_t),
	[TB_CONTROL_ACCEPT] = sizeof(tb_control_wire_accept_t),
	[TB_CONTROL_REJECT] = sizeof(tb_control_wire_reject_t),
	[TB_CONTROL_HEARTBEAT] = sizeof(tb_control_wire_heartbeat_t),
	[TB_CONTROL_BYE] = sizeof(tb_control_wire_bye_t),
};

static const char *const ctl_type_names[TB_CONTROL_TYPE_MAX + 1] = {
	[TB_CONTROL_HELLO] = "HELLO",
	[TB_CONTROL_SUBSCRIBE] = "SUBSCRIBE",
	[TB_CONTROL_ACCEPT] = "ACCEPT",
	[TB_CONTROL_REJECT] = "REJECT",
	[TB_CONTROL_HEARTBEAT] = "HEARTBEAT",
	[TB_CONTROL_BYE] = "BYE",
};

static const tb_wire_proto_t ctl_proto = {
	.name = "control",
	.magic = TB_CONTROL_MAGIC,
	.version = TB_CONTROL_VERSION,
	.type_max = TB_CONTROL_TYPE_MAX,
	.msg_max = TB_CONTROL_MSG_MAX,
	.size = ctl_size,
	.type_name = ctl_type_names,
};

static const char *const reject_names[TB_CONTROL_REJ_MAX + 1] = {
	[TB_CONTROL_REJ_BAD_TOKEN] = "bad token",
	[TB_CONTROL_REJ_UNKNOWN_STREAM] = "unknown stream",
	[TB_CONTROL_REJ_BAD_VERSION] = "bad version",
	[TB_CONTROL_REJ_MALFORMED] = "malformed",
	[TB_CONTROL_REJ_FULL] = "full",
	[TB_CONTROL_REJ_UNSUPPORTED_TRANSPORT] = "unsupported transport",
	[TB_CONTROL_REJ_INTERNAL] = "internal error",
};

static const char *const bye_names[TB_CONTROL_BYE_MAX + 1] = {
	[TB_CONTROL_BYE_NORMAL] = "normal",
	[TB_CONTROL_BYE_CLOSED] = "stream closed",
	[TB_CONTROL_BYE_TIMEOUT] = "heartbeat timeout",
	[TB_CONTROL_BYE_ERROR] = "protocol error",
};

const char *tb_control_type_name(unsigned type)
{
	return type_name_of(&ctl_proto, type);
}

const char *tb_control_reject_name(unsigned reason)
{
	return reason >= 1 && reason <= TB_CONTROL_REJ_MAX ? reject_names[reason]
						       : "?";
}

const char *tb_control_bye_name(unsigned reason)
{
	return reason >= 1 && reason <= TB_CONTROL_BYE_MAX ? bye_names[reason] : "?";
}

int tb_control_frame_need(const void *buf, size_t have)
{
	return tb_wire_frame_need(&ctl_proto, buf, have);
}

/* -------------------------------------------- field rules, shared by both
 * directions: `code` is TB_EINVAL when encoding, TB_EPROTO when decoding. */

static int check_stream_id(const char *ctx, uint32_t id, int code)
{
	if (id == 0)
		return tb_error_set(code, "%s: stream_id 0 names no stream", ctx);
	return 0;
}

static int check_24bit(const char *ctx, const char *what, uint32_t v, int code)
{
	if (v & ~TB_CONTROL_QPN_MASK)
		return tb_error_set(code, "%s: %s 0x%x does not fit in 24 bits",
				  ctx, what, v);
	return 0;
}

static int check_hello(const tb_control_hello_t *m, int code)
{
	return check_stream_id("control HELLO", m->stream_id, code);
}

static int check_subscribe(const tb_control_subscribe_t *m, int code)
{
	const char *ctx = "control SUBSCRIBE";
	int rc;

	if ((rc = check_stream_id(ctx, m->stream_id, code)) < 0)
		return rc;
	if (m->transport > TB_TRANSPORT_UDP)
		return tb_error_set(code, "%s: transport %u is not a transport "
				  "kind (0..%u)", ctx, m->transport,
				  TB_TRANSPORT_UDP);
	if (m->mtu < TB_CONTROL_MTU_256 || m->mtu > TB_CONTROL_MTU_4096)
		return tb_error_set(code, "%s: mtu %u is not an MTU code (%u..%u)",
				  ctx, m->mtu, TB_CONTROL_MTU_256, TB_CONTROL_MTU_4096);
	if (m->flags & ~TB_CONTROL_SUB_F_ALL)
		return tb_error_set(code, "%s: flags 0x%x has unknown bits", ctx,
				  m->flags);
	if (m->ring_len == 0 || (m->ring_len & (m->ring_len - 1)) != 0)
		return tb_error_set(code, "%s: ring_len %llu is not a power of two",
				  ctx, (unsigned long long)m->ring_len);
	if (m->recv_depth == 0 || m->recv_depth > TB_CONTROL_RECV_MAX)
		return tb_error_set(code, "%s: recv_depth %u is outside 1..%u", ctx,
				  m->recv_depth, TB_CONTROL_RECV_MAX);
	if (m->ring_len < TB_RING_MIN || m->ring_len > TB_RING_MAX)
		return tb_error_set(code, "%s: ring_len %llu is outside %llu..%llu",
				  ctx, (unsigned long long)m->ring_len,
				  (unsigned long long)TB_RING_MIN,
				  (unsigned long long)TB_RING_MAX);
	if ((rc = check_24bit(ctx, "qpn", m->qpn, code)) < 0)
		return rc;
	return check_24bit(ctx, "psn", m->psn, code);
}

static int check_accept(const tb_control_accept_t *m, int code)
{
	const char *ctx = "control ACCEPT";
	int rc;

	if ((rc = check_stream_id(ctx, m->stream_id, code)) < 0)
		return rc;
	if ((rc = check_24bit(ctx, "qpn", m->qpn, code)) < 0)
		return rc;
	if ((rc = check_24bit(ctx, "psn", m->psn, code)) < 0)
		return rc;
	if (m->epoch == 0)
		return tb_error_set(code, "%s: epoch 0 is not an epoch", ctx);
	if (m->next_seq == 0)
		return tb_error_set(code, "%s: next_seq 0 (sequences start at 1)",
				  ctx);
	if (m->ring_offset % TB_FRAME_ALIGN != 0)
		return tb_error_set(code, "%s: ring_offset %llu is not a multiple "
				  "of %u", ctx, (unsigned long long)m->ring_offset,
				  TB_FRAME_ALIGN);
	return 0;
}

static int check_reject(const tb_control_reject_t *m, int code)
{
	if (m->reason < 1 || m->reason > TB_CONTROL_REJ_MAX)
		return tb_error_set(code, "control REJECT: reason %u is not a "
				  "reject reason (1..%u)", m->reason,
				  TB_CONTROL_REJ_MAX);
	return 0;
}

static int check_bye(const tb_control_bye_t *m, int code)
{
	if (m->reason < 1 || m->reason > TB_CONTROL_BYE_MAX)
		return tb_error_set(code, "control BYE: reason %u is not a bye "
				  "reason (1..%u)", m->reason, TB_CONTROL_BYE_MAX);
	return 0;
}

static int too_small(const char *type, size_t cap, size_t need)
{
	return tb_error_set(TB_EMSGSIZE, "control %s: buffer of %zu bytes, the "
			  "message is %zu", type, cap, need);
}

static int reserved_nonzero(const char *ctx, const char *what)
{
	return tb_error_set(TB_EPROTO, "%s: %s is not zero", ctx, what);
}

/* ---------------------------------------------------------------- encode */

int tb_control_encode_hello(void *buf, size_t cap, const tb_control_hello_t *m)
{
	const char *ctx = "control HELLO";
	tb_control_wire_hello_t w;
	int rc;

	if (cap < sizeof(w))
		return too_small("HELLO", cap, sizeof(w));
	if ((rc = check_hello(m, TB_EINVAL)) < 0)
		return rc;
	memset(&w, 0, sizeof(w));
	if ((rc = tb_wire_str_put(ctx, "client_id", w.client_id, m->client_id,
				  sizeof(w.client_id), TB_WIRE_STR_WORD)) < 0 ||
	    (rc = tb_wire_str_put(ctx, "token", w.token, m->token,
				  sizeof(w.token), TB_WIRE_STR_TOKEN)) < 0)
		return rc;
	tb_wire_hdr_put(&w.hdr, TB_CONTROL_MAGIC, TB_CONTROL_VERSION, TB_CONTROL_HELLO,
			sizeof(w));
	w.stream_id = htole32(m->stream_id);
	memcpy(buf, &w, sizeof(w));
	return (int)sizeof(w);
}

int tb_control_encode_subscribe(void *buf, size_t cap, const tb_control_subscribe_t *m)
{
	tb_control_wire_subscribe_t w;
	int rc;

	if (cap < sizeof(w))
		return too_small("SUBSCRIBE", cap, sizeof(w));
	if ((rc = check_subscribe(m, TB_EINVAL)) < 0)
		return rc;
	memset(&w, 0, sizeof(w));
	tb_wire_hdr_put(&w.hdr, TB_CONTROL_MAGIC, TB_CONTROL_VERSION, TB_CONTROL_SUBSCRIBE,
			sizeof(w));
	w.stream_id = htole32(m->stream_id);
	w.transport = m->transport;
	w.mtu = m->mtu;
	w.flags = m->flags;
	w.ring_addr = htole64(m->ring_addr);
	w.ring_len = htole64(m->ring_len);
	w.rkey = htole32(m->rkey);
	w.qpn = htole32(m->qpn);
	memcpy(w.gid, m->gid, sizeof(w.gid));
	w.psn = htole32(m->psn);
	w.recv_depth = htole32(m->recv_depth);
	w.start_seq = htole64(m->start_seq);
	memcpy(buf, &w, sizeof(w));
	return (int)sizeof(w);
}

int tb_control_encode_accept(void *buf, size_t cap, const tb_control_accept_t *m)
{
	tb_control_wire_accept_t w;
	int rc;

	if (cap < sizeof(w))
		return too_small("ACCEPT", cap, sizeof(w));
	if ((rc = check_accept(m, TB_EINVAL)) < 0)
		return rc;
	memset(&w, 0, sizeof(w));
	tb_wire_hdr_put(&w.hdr, TB_CONTROL_MAGIC, TB_CONTROL_VERSION, TB_CONTROL_ACCEPT,
			sizeof(w));
	w.stream_id = htole32(m->stream_id);
	w.qpn = htole32(m->qpn);
	w.epoch = htole64(m->epoch);
	memcpy(w.gid, m->gid, sizeof(w.gid));
	w.psn = htole32(m->psn);
	w.credit_rkey = htole32(m->credit_rkey);
	w.credit_addr = htole64(m->credit_addr);
	w.next_seq = htole64(m->next_seq);
	w.ring_offset = htole64(m->ring_offset);
	memcpy(buf, &w, sizeof(w));
	return (int)sizeof(w);
}

int tb_control_encode_reject(void *buf, size_t cap, const tb_control_reject_t *m)
{
	tb_control_wire_reject_t w;
	int rc;

	if (cap < sizeof(w))
		return too_small("REJECT", cap, sizeof(w));
	if ((rc = check_reject(m, TB_EINVAL)) < 0)
		return rc;
	memset(&w, 0, sizeof(w));
	if ((rc = tb_wire_str_put("control REJECT", "text", w.text, m->text,
				  sizeof(w.text), TB_WIRE_STR_TEXT)) < 0)
		return rc;
	tb_wire_hdr_put(&w.hdr, TB_CONTROL_MAGIC, TB_CONTROL_VERSION, TB_CONTROL_REJECT,
			sizeof(w));
	w.stream_id = htole32(m->stream_id);
	w.reason = htole32(m->reason);
	memcpy(buf, &w, sizeof(w));
	return (int)sizeof(w);
}

int tb_control_encode_heartbeat(void *buf, size_t cap, const tb_control_heartbeat_t *m)
{
	tb_control_wire_heartbeat_t w;

	if (cap < sizeof(w))
		return too_small("HEARTBEAT", cap, sizeof(w));
	memset(&w, 0, sizeof(w));
	tb_wire_hdr_put(&w.hdr, TB_CONTROL_MAGIC, TB_CONTROL_VERSION, TB_CONTROL_HEARTBEAT,
			sizeof(w));
	w.timestamp_ns = htole64(m->timestamp_ns);
	w.last_seq = htole64(m->last_seq);
	memcpy(buf, &w, sizeof(w));
	return (int)sizeof(w);
}

int tb_control_encode_bye(void *buf, size_t cap, const tb_control_bye_t *m)
{
	tb_control_wire_bye_t w;
	int rc;

	if (cap < sizeof(w))
		return too_small("BYE", cap, sizeof(w));
	if ((rc = check_bye(m, TB_EINVAL)) < 0)
		return rc;
	memset(&w, 0, sizeof(w));
	tb_wire_hdr_put(&w.hdr, TB_CONTROL_MAGIC, TB_CONTROL_VERSION, TB_CONTROL_BYE,
			sizeof(w));
	w.reason = htole32(m->reason);
	memcpy(buf, &w, sizeof(w));
	return (int)sizeof(w);
}

/* ---------------------------------------------------------------- decode
 * Each decode_* runs after tb_wire_hdr_check(): the whole fixed-size body
 * is in `buf`.  Wire bytes are copied into the aligned wire struct first,
 * so `buf` may have any alignment. */

static int decode_hello(const void *buf, tb_control_hello_t *m)
{
	const char *ctx = "control HELLO";
	tb_control_wire_hello_t w;
	int rc;

	memcpy(&w, buf, sizeof(w));
	if (w.reserved != 0)
		return reserved_nonzero(ctx, "reserved");
	if ((rc = tb_wire_str_check(ctx, "client_id", w.client_id,
				    sizeof(w.client_id), TB_WIRE_STR_WORD)) < 0 ||
	    (rc = tb_wire_str_check(ctx, "token", w.token, sizeof(w.token),
				    TB_WIRE_STR_TOKEN)) < 0)
		return rc;
	m->stream_id = le32toh(w.stream_id);
	memcpy(m->client_id, w.client_id, sizeof(m->client_id));
	memcpy(m->token, w.token, sizeof(m->token));
	return check_hello(m, TB_EPROTO);
}

static int decode_subscribe(const void *buf, tb_control_subscribe_t *m)
{
	const char *ctx = "control SUBSCRIBE";
	tb_control_wire_subscribe_t w;

	memcpy(&w, buf, sizeof(w));
	if (w.reserved0 != 0)
		return reserved_nonzero(ctx, "reserved0");
	m->stream_id = le32toh(w.stream_id);
	m->transport = w.transport;
	m->mtu = w.mtu;
	m->flags = w.flags;
	m->ring_addr = le64toh(w.ring_addr);
	m->ring_len = le64toh(w.ring_len);
	m->rkey = le32toh(w.rkey);
	m->qpn = le32toh(w.qpn);
	memcpy(m->gid, w.gid, sizeof(m->gid));
	m->psn = le32toh(w.psn);
	m->recv_depth = le32toh(w.recv_depth);
	m->start_seq = le64toh(w.start_seq);
	return check_subscribe(m, TB_EPROTO);
}

static int decode_accept(const void *buf, tb_control_accept_t *m)
{
	tb_control_wire_accept_t w;

	memcpy(&w, buf, sizeof(w));
	m->stream_id = le32toh(w.stream_id);
	m->qpn = le32toh(w.qpn);
	m->epoch = le64toh(w.epoch);
	memcpy(m->gid, w.gid, sizeof(m->gid));
	m->psn = le32toh(w.psn);
	m->credit_rkey = le32toh(w.credit_rkey);
	m->credit_addr = le64toh(w.credit_addr);
	m->next_seq = le64toh(w.next_seq);
	m->ring_offset = le64toh(w.ring_offset);
	return check_accept(m, TB_EPROTO);
}

static int decode_reject(const void *buf, tb_control_reject_t *m)
{
	tb_control_wire_reject_t w;
	int rc;

	memcpy(&w, buf, sizeof(w));
	m->stream_id = le32toh(w.stream_id);
	m->reason = le32toh(w.reason);
	if ((rc = check_reject(m, TB_EPROTO)) < 0)
		return rc;
	if ((rc = tb_wire_str_check("control REJECT", "text", w.text,
				    sizeof(w.text), TB_WIRE_STR_TEXT)) < 0)
		return rc;
	memcpy(m->text, w.text, sizeof(m->text));
	return 0;
}

static int decode_heartbeat(const void *buf, tb_control_heartbeat_t *m)
{
	tb_control_wire_heartbeat_t w;

	memcpy(&w, buf, sizeof(w));
	m->timestamp_ns = le64toh(w.timestamp_ns);
	m->last_seq = le64toh(w.last_seq);
	return 0;
}

static int decode_bye(const void *buf, tb_control_bye_t *m)
{
	tb_control_wire_bye_t w;

	memcpy(&w, buf, sizeof(w));
	if (w.reserved != 0)
		return reserved_nonzero("control BYE", "reserved");
	m->reason = le32toh(w.reason);
	return check_bye(m, TB_EPROTO);
}

int tb_control_decode(const void *buf, size_t len, tb_control_msg_t *out)
{
	tb_wire_hdr_t h;
	tb_control_msg_t m;
	int rc;

	if ((rc = tb_wire_hdr_check(&ctl_proto, buf, len, &h)) < 0)
		return rc;
	memset(&m, 0, sizeof(m));
	m.type = h.type;
	m.version = h.version;
	m.length = h.length;
	switch (h.type) {
	case TB_CONTROL_HELLO: rc = decode_hello(buf, &m.hello); break;
	case TB_CONTROL_SUBSCRIBE: rc = decode_subscribe(buf, &m.subscribe); break;
	case TB_CONTROL_ACCEPT: rc = decode_accept(buf, &m.accept); break;
	case TB_CONTROL_REJECT: rc = decode_reject(buf, &m.reject); break;
	case TB_CONTROL_HEARTBEAT: rc = decode_heartbeat(buf, &m.heartbeat); break;
	case TB_CONTROL_BYE: rc = decode_bye(buf, &m.bye); break;
	default: /* tb_wire_hdr_check() admits only known types */
		rc = tb_error_set(TB_EPROTO, "control: unknown message type %u",
				h.type);
	}
	if (rc < 0)
		return rc;
	*out = m;
	return (int)h.length;
}

/* ------------------------------------------------------------------ token */

int tb_control_token_equal(const char *a, const char *b)
{
	size_t la = strnlen(a, TB_CONTROL_TOKEN_LEN);
	size_t lb = strnlen(b, TB_CONTROL_TOKEN_LEN);
	unsigned diff = (unsigned)(la ^ lb);
	size_t i;

	/* Every position is visited whatever the contents; positions past a
	 * token's end compare as NUL.  Which branch `i < la` takes depends on
	 * the lengths alone. */
	for (i = 0; i < TB_CONTROL_TOKEN_LEN; i++) {
		unsigned char ca = i < la ? (unsigned char)a[i] : 0;
		unsigned char cb = i < lb ? (unsigned char)b[i] : 0;

		diff |= (unsigned)(ca ^ cb);
	}
	return diff == 0;
}
