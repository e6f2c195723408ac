/*
 * control.c - encoder and decoder of the control protocol (control.h).
 *
 * The protocol
 * ------------
 * A subscriber that wants an rc feed opens a TCP connection to the
 * publisher's control endpoint and says HELLO (its name, its token, the
 * stream), then SUBSCRIBE (everything the publisher needs to RDMA-WRITE into
 * the subscriber's ring).  The publisher answers ACCEPT (everything the
 * subscriber needs to bring its QP up and to return credits) or REJECT; the
 * subscriber brings its QP to RTR and says READY, and only then does the
 * publisher write.  From then on both sides send HEARTBEATs until one says
 * BYE.  TCP carries only this set-up and liveness; the data never touches
 * it.
 *
 * Messages follow the convention of every tickbus TCP protocol (wire.h):
 * fixed-size records, one valid encoding each, every field checked.  This
 * file is the protocol's table for the shared codec: for each type its
 * size and the two functions that move its body between host and wire
 * order, checking every field.  A reader never needs more than
 * TB_CONTROL_MSG_MAX bytes per connection.
 *
 * Versioning
 * ----------
 * The rules are wire.h's.  In this protocol:
 *  - REJECT's layout (stream id, reason, text at offsets 8, 12, 16) is the
 *    same in every version, so that a refusal is always readable.
 *  - The subscriber speaks first, in the highest version it knows.  A
 *    publisher that does not speak that version answers REJECT(bad
 *    version) in the subscriber's version when it is older (REJECT's
 *    layout is the same in every version: tb_control_encode_reject_in),
 *    in its own otherwise, and closes.  Either way the subscriber can read
 *    the refusal (tb_control_decode_refusal) and say which side to
 *    upgrade.
 *  - This build speaks version 2 only.  Version 1 had no LIDs, so it
 *    could not reach an InfiniBand peer, no negotiated path MTU and no
 *    READY: a version 1 peer would misbehave on exactly the fabrics
 *    version 2 was made for, so it is refused rather than served.
 *
 * Errors: as wire.h; the tb_errmsg() text starts "control <TYPE>:" and
 * names the field.
 */
#include "bus/transport/control.h"

#include "bus/error.h"
#include "bus/frame.h"

#include <endian.h>
#include <string.h>

/* -------------------------------------------- field rules, shared by both
 * directions: `code` is TB_EINVAL when encoding, TB_EPROTO when decoding. */

static int check_24bit(const char *ctx, const char *what, uint32_t v, int code)
{
	if (v & ~TB_CONTROL_QPN_MASK)
		return tb_error_set(code, "%s: %s 0x%x does not fit in 24 bits",
				  ctx, what, v);
	return 0;
}

static int check_hello(const tb_control_hello_t *m, int code)
{
	return tb_wire_stream_id_check("control HELLO", m->stream_id, code);
}

static int check_subscribe(const tb_control_subscribe_t *m, int code)
{
	const char *ctx = "control SUBSCRIBE";
	int rc;

	if ((rc = tb_wire_stream_id_check(ctx, m->stream_id, code)) < 0)
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

	if (m->mtu < TB_CONTROL_MTU_256 || m->mtu > TB_CONTROL_MTU_4096)
		return tb_error_set(code, "%s: mtu %u is not an MTU code (%u..%u)",
				  ctx, m->mtu, TB_CONTROL_MTU_256, TB_CONTROL_MTU_4096);
	if (m->sl > TB_CONTROL_SL_MAX)
		return tb_error_set(code, "%s: sl %u is not a service level "
				  "(0..%u)", ctx, m->sl, TB_CONTROL_SL_MAX);

	if ((rc = tb_wire_stream_id_check(ctx, m->stream_id, code)) < 0 ||
	    (rc = check_24bit(ctx, "qpn", m->qpn, code)) < 0 ||
	    (rc = check_24bit(ctx, "psn", m->psn, code)) < 0 ||
	    (rc = tb_wire_epoch_check(ctx, m->epoch, code)) < 0 ||
	    (rc = tb_wire_seq_check(ctx, "next_seq", m->next_seq, code)) < 0)
		return rc;
	if (m->ring_offset % TB_FRAME_ALIGN != 0)
		return tb_error_set(code, "%s: ring_offset %llu is not a multiple "
				  "of %u", ctx, (unsigned long long)m->ring_offset,
				  TB_FRAME_ALIGN);
	return 0;
}

static int check_reject(const tb_control_reject_t *m, int code)
{
	return tb_wire_enum_check("control REJECT", "reason", m->reason,
				  TB_CONTROL_REJ_MAX, "a reject reason", code);
}

static int check_bye(const tb_control_bye_t *m, int code)
{
	return tb_wire_enum_check("control BYE", "reason", m->reason,
				  TB_CONTROL_BYE_MAX, "a bye reason", code);
}

static int check_heartbeat(const tb_control_heartbeat_t *m, int code)
{
	if ((m->skip_first == 0) != (m->skip_last == 0) ||
	    m->skip_last < m->skip_first)
		return tb_error_set(code, "control HEARTBEAT: skip_first %llu, "
				  "skip_last %llu is not a range (both 0, or "
				  "0 < first <= last)",
				  (unsigned long long)m->skip_first,
				  (unsigned long long)m->skip_last);
	return 0;
}

static int check_ready(const tb_control_ready_t *m, int code)
{
	int rc;

	if ((rc = tb_wire_stream_id_check("control READY", m->stream_id, code)) < 0)
		return rc;
	return check_24bit("control READY", "qpn", m->qpn, code);
}

/* ------------------------------------------------------ bodies, both ways
 * put_*: host -> wire, into a zeroed wire struct (tb_wire_encode fills the
 * header); get_*: wire -> host, after tb_wire_hdr_check (the whole body is
 * there, aligned). */

static int put_hello(void *wire, const void *msg)
{
	const char *ctx = "control HELLO";
	tb_control_wire_hello_t *w = wire;
	const tb_control_hello_t *m = msg;
	int rc;

	if ((rc = check_hello(m, TB_EINVAL)) < 0 ||
	    (rc = tb_wire_str_put(ctx, "client_id", w->client_id, m->client_id,
				  sizeof(w->client_id), TB_WIRE_STR_WORD)) < 0 ||
	    (rc = tb_wire_str_put(ctx, "token", w->token, m->token,
				  sizeof(w->token), TB_WIRE_STR_TOKEN)) < 0)
		return rc;
	w->stream_id = htole32(m->stream_id);
	return 0;
}

static int get_hello(const void *wire, void *msg)
{
	const char *ctx = "control HELLO";
	const tb_control_wire_hello_t *w = wire;
	tb_control_hello_t *m = msg;
	int rc;

	if ((rc = tb_wire_reserved_check(ctx, "reserved", w->reserved)) < 0 ||
	    (rc = tb_wire_str_check(ctx, "client_id", w->client_id,
				    sizeof(w->client_id), TB_WIRE_STR_WORD)) < 0 ||
	    (rc = tb_wire_str_check(ctx, "token", w->token, sizeof(w->token),
				    TB_WIRE_STR_TOKEN)) < 0)
		return rc;
	m->stream_id = le32toh(w->stream_id);
	memcpy(m->client_id, w->client_id, sizeof(m->client_id));
	memcpy(m->token, w->token, sizeof(m->token));
	return check_hello(m, TB_EPROTO);
}

static int put_subscribe(void *wire, const void *msg)
{
	tb_control_wire_subscribe_t *w = wire;
	const tb_control_subscribe_t *m = msg;
	int rc;

	if ((rc = check_subscribe(m, TB_EINVAL)) < 0)
		return rc;
	w->stream_id = htole32(m->stream_id);
	w->transport = m->transport;
	w->mtu = m->mtu;
	w->flags = m->flags;
	w->ring_addr = htole64(m->ring_addr);
	w->ring_len = htole64(m->ring_len);
	w->rkey = htole32(m->rkey);
	w->qpn = htole32(m->qpn);
	memcpy(w->gid, m->gid, sizeof(w->gid));
	w->psn = htole32(m->psn);
	w->recv_depth = htole32(m->recv_depth);
	w->start_seq = htole64(m->start_seq);
	w->lid = htole16(m->lid);
	return 0;
}

static int get_subscribe(const void *wire, void *msg)
{
	const tb_control_wire_subscribe_t *w = wire;
	tb_control_subscribe_t *m = msg;
	int rc;

	if ((rc = tb_wire_reserved_check("control SUBSCRIBE", "reserved0",
					 w->reserved0)) < 0 ||
	    (rc = tb_wire_reserved_check("control SUBSCRIBE", "reserved1",
					 w->reserved1)) < 0 ||
	    (rc = tb_wire_reserved_check("control SUBSCRIBE", "reserved2",
					 w->reserved2)) < 0)
		return rc;
	m->stream_id = le32toh(w->stream_id);
	m->transport = w->transport;
	m->mtu = w->mtu;
	m->flags = w->flags;
	m->ring_addr = le64toh(w->ring_addr);
	m->ring_len = le64toh(w->ring_len);
	m->rkey = le32toh(w->rkey);
	m->qpn = le32toh(w->qpn);
	memcpy(m->gid, w->gid, sizeof(m->gid));
	m->psn = le32toh(w->psn);
	m->recv_depth = le32toh(w->recv_depth);
	m->start_seq = le64toh(w->start_seq);
	m->lid = le16toh(w->lid);
	return check_subscribe(m, TB_EPROTO);
}

static int put_accept(void *wire, const void *msg)
{
	tb_control_wire_accept_t *w = wire;
	const tb_control_accept_t *m = msg;
	int rc;

	if ((rc = check_accept(m, TB_EINVAL)) < 0)
		return rc;
	w->stream_id = htole32(m->stream_id);
	w->qpn = htole32(m->qpn);
	w->epoch = htole64(m->epoch);
	memcpy(w->gid, m->gid, sizeof(w->gid));
	w->psn = htole32(m->psn);
	w->credit_rkey = htole32(m->credit_rkey);
	w->credit_addr = htole64(m->credit_addr);
	w->next_seq = htole64(m->next_seq);
	w->ring_offset = htole64(m->ring_offset);
	w->lid = htole16(m->lid);
	w->mtu = m->mtu;
	w->sl = m->sl;
	w->traffic_class = m->traffic_class;
	return 0;
}

static int get_accept(const void *wire, void *msg)
{
	const tb_control_wire_accept_t *w = wire;
	tb_control_accept_t *m = msg;
	int rc;

	if ((rc = tb_wire_reserved_check("control ACCEPT", "reserved0",
					 w->reserved0)) < 0 ||
	    (rc = tb_wire_reserved_check("control ACCEPT", "reserved1",
					 w->reserved1)) < 0)
		return rc;
	m->stream_id = le32toh(w->stream_id);
	m->qpn = le32toh(w->qpn);
	m->epoch = le64toh(w->epoch);
	memcpy(m->gid, w->gid, sizeof(m->gid));
	m->psn = le32toh(w->psn);
	m->credit_rkey = le32toh(w->credit_rkey);
	m->credit_addr = le64toh(w->credit_addr);
	m->next_seq = le64toh(w->next_seq);
	m->ring_offset = le64toh(w->ring_offset);
	m->lid = le16toh(w->lid);
	m->mtu = w->mtu;
	m->sl = w->sl;
	m->traffic_class = w->traffic_class;
	return check_accept(m, TB_EPROTO);
}

static int put_reject(void *wire, const void *msg)
{
	tb_control_wire_reject_t *w = wire;
	const tb_control_reject_t *m = msg;
	int rc;

	if ((rc = check_reject(m, TB_EINVAL)) < 0 ||
	    (rc = tb_wire_str_put("control REJECT", "text", w->text, m->text,
				  sizeof(w->text), TB_WIRE_STR_TEXT)) < 0)
		return rc;
	w->stream_id = htole32(m->stream_id);
	w->reason = htole32(m->reason);
	return 0;
}

static int get_reject(const void *wire, void *msg)
{
	const tb_control_wire_reject_t *w = wire;
	tb_control_reject_t *m = msg;
	int rc;

	m->stream_id = le32toh(w->stream_id);
	m->reason = le32toh(w->reason);
	if ((rc = check_reject(m, TB_EPROTO)) < 0 ||
	    (rc = tb_wire_str_check("control REJECT", "text", w->text,
				    sizeof(w->text), TB_WIRE_STR_TEXT)) < 0)
		return rc;
	memcpy(m->text, w->text, sizeof(m->text));
	return 0;
}

static int put_heartbeat(void *wire, const void *msg)
{
	tb_control_wire_heartbeat_t *w = wire;
	const tb_control_heartbeat_t *m = msg;
	int rc;

	if ((rc = check_heartbeat(m, TB_EINVAL)) < 0)
		return rc;
	w->timestamp_ns = htole64(m->timestamp_ns);
	w->last_seq = htole64(m->last_seq);
	w->skip_first = htole64(m->skip_first);
	w->skip_last = htole64(m->skip_last);
	return 0;
}

static int get_heartbeat(const void *wire, void *msg)
{
	const tb_control_wire_heartbeat_t *w = wire;
	tb_control_heartbeat_t *m = msg;

	m->timestamp_ns = le64toh(w->timestamp_ns);
	m->last_seq = le64toh(w->last_seq);
	m->skip_first = le64toh(w->skip_first);
	m->skip_last = le64toh(w->skip_last);
	return check_heartbeat(m, TB_EPROTO);
}

static int put_bye(void *wire, const void *msg)
{
	tb_control_wire_bye_t *w = wire;
	const tb_control_bye_t *m = msg;
	int rc;

	if ((rc = check_bye(m, TB_EINVAL)) < 0)
		return rc;
	w->reason = htole32(m->reason);
	return 0;
}

static int get_bye(const void *wire, void *msg)
{
	const tb_control_wire_bye_t *w = wire;
	tb_control_bye_t *m = msg;
	int rc;

	if ((rc = tb_wire_reserved_check("control BYE", "reserved",
					 w->reserved)) < 0)
		return rc;
	m->reason = le32toh(w->reason);
	return check_bye(m, TB_EPROTO);
}

static int put_ready(void *wire, const void *msg)
{
	tb_control_wire_ready_t *w = wire;
	const tb_control_ready_t *m = msg;
	int rc;

	if ((rc = check_ready(m, TB_EINVAL)) < 0)
		return rc;
	w->stream_id = htole32(m->stream_id);
	w->qpn = htole32(m->qpn);
	return 0;
}

static int get_ready(const void *wire, void *msg)
{
	const tb_control_wire_ready_t *w = wire;
	tb_control_ready_t *m = msg;

	m->stream_id = le32toh(w->stream_id);
	m->qpn = le32toh(w->qpn);
	return check_ready(m, TB_EPROTO);
}

/* ------------------------------------------------------ the protocol table */

static const tb_wire_type_t ctl_types[TB_CONTROL_TYPE_MAX + 1] = {
	[TB_CONTROL_HELLO] = {"HELLO", sizeof(tb_control_wire_hello_t),
			      put_hello, get_hello},
	[TB_CONTROL_SUBSCRIBE] = {"SUBSCRIBE", sizeof(tb_control_wire_subscribe_t),
				  put_subscribe, get_subscribe},
	[TB_CONTROL_ACCEPT] = {"ACCEPT", sizeof(tb_control_wire_accept_t),
			       put_accept, get_accept},
	[TB_CONTROL_REJECT] = {"REJECT", sizeof(tb_control_wire_reject_t),
			       put_reject, get_reject},
	[TB_CONTROL_HEARTBEAT] = {"HEARTBEAT", sizeof(tb_control_wire_heartbeat_t),
				  put_heartbeat, get_heartbeat},
	[TB_CONTROL_BYE] = {"BYE", sizeof(tb_control_wire_bye_t), put_bye, get_bye},
	[TB_CONTROL_READY] = {"READY", sizeof(tb_control_wire_ready_t),
			      put_ready, get_ready},
};

static const tb_wire_proto_t ctl_proto = {
	.name = "control",
	.magic = TB_CONTROL_MAGIC,
	.version = TB_CONTROL_VERSION,
	.type_max = TB_CONTROL_TYPE_MAX,
	.msg_max = TB_CONTROL_MSG_MAX,
	.types = ctl_types,
};

_Static_assert(TB_CONTROL_MSG_MAX <= TB_WIRE_MSG_MAX, "control: wire scratch");

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
	return tb_wire_type_name(&ctl_proto, type);
}

const char *tb_control_reject_name(unsigned reason)
{
	return tb_wire_enum_name(reject_names, TB_CONTROL_REJ_MAX, reason);
}

const char *tb_control_bye_name(unsigned reason)
{
	return tb_wire_enum_name(bye_names, TB_CONTROL_BYE_MAX, reason);
}

/* ------------------------------------------------------- encode, decode */

int tb_control_frame_need(const void *buf, size_t have)
{
	return tb_wire_frame_need(&ctl_proto, buf, have);
}

int tb_control_encode_hello(void *buf, size_t cap, const tb_control_hello_t *m)
{
	return tb_wire_encode(&ctl_proto, TB_CONTROL_HELLO, buf, cap, m);
}

int tb_control_encode_subscribe(void *buf, size_t cap,
				const tb_control_subscribe_t *m)
{
	return tb_wire_encode(&ctl_proto, TB_CONTROL_SUBSCRIBE, buf, cap, m);
}

int tb_control_encode_accept(void *buf, size_t cap, const tb_control_accept_t *m)
{
	return tb_wire_encode(&ctl_proto, TB_CONTROL_ACCEPT, buf, cap, m);
}

int tb_control_encode_reject(void *buf, size_t cap, const tb_control_reject_t *m)
{
	return tb_wire_encode(&ctl_proto, TB_CONTROL_REJECT, buf, cap, m);
}

int tb_control_encode_heartbeat(void *buf, size_t cap,
				const tb_control_heartbeat_t *m)
{
	return tb_wire_encode(&ctl_proto, TB_CONTROL_HEARTBEAT, buf, cap, m);
}

int tb_control_encode_bye(void *buf, size_t cap, const tb_control_bye_t *m)
{
	return tb_wire_encode(&ctl_proto, TB_CONTROL_BYE, buf, cap, m);
}

int tb_control_encode_ready(void *buf, size_t cap, const tb_control_ready_t *m)
{
	return tb_wire_encode(&ctl_proto, TB_CONTROL_READY, buf, cap, m);
}

/* REJECT is laid out the same in every version (control.h), so one
 * version's table entry reads and writes any version's. */
_Static_assert(sizeof(tb_control_wire_reject_t) == 216, "REJECT never changes");

/* ctl_proto, as if it spoke `version`: REJECT only. */
static void proto_for_reject(tb_wire_proto_t *p, unsigned version)
{
	*p = ctl_proto;
	p->version = (uint8_t)version;
}

int tb_control_encode_reject_in(void *buf, size_t cap,
				const tb_control_reject_t *m, unsigned version)
{
	tb_wire_proto_t p;

	if (version < TB_CONTROL_VERSION_OLDEST || version > TB_CONTROL_VERSION)
		return tb_error_set(TB_EINVAL, "control REJECT: version %u is "
				  "not one this build can write (%u..%u)",
				  version, TB_CONTROL_VERSION_OLDEST,
				  TB_CONTROL_VERSION);
	proto_for_reject(&p, version);
	return tb_wire_encode(&p, TB_CONTROL_REJECT, buf, cap, m);
}

int tb_control_version_of(const void *buf, size_t have)
{
	const uint8_t *b = buf;

	if (have < 3 || (uint16_t)(b[0] | b[1] << 8) != TB_CONTROL_MAGIC)
		return -1;
	return b[2];
}

int tb_control_decode_refusal(const void *buf, size_t len,
			      tb_control_msg_t *out)
{
	int v = tb_control_version_of(buf, len);
	tb_control_msg_t m;
	tb_wire_proto_t p;
	tb_wire_hdr_t h;
	int rc;

	if (v < (int)TB_CONTROL_VERSION_OLDEST || v > (int)TB_CONTROL_VERSION)
		return tb_control_decode(buf, len, out);  /* its own message */
	proto_for_reject(&p, (unsigned)v);
	memset(&m, 0, sizeof(m));
	if ((rc = tb_wire_decode(&p, buf, len, &h, &m.reject)) < 0)
		return rc;
	if (h.type != TB_CONTROL_REJECT)
		return tb_error_set(TB_EPROTO, "control: a %s of version %u where "
				  "only a REJECT is readable",
				  tb_control_type_name(h.type), h.version);
	m.type = h.type;
	m.version = h.version;
	m.length = h.length;
	*out = m;
	return rc;
}

int tb_control_decode(const void *buf, size_t len, tb_control_msg_t *out)
{
	tb_control_msg_t m;
	tb_wire_hdr_t h;
	int rc;

	memset(&m, 0, sizeof(m));
	/* The body goes to the union: every member starts where hello does. */
	if ((rc = tb_wire_decode(&ctl_proto, buf, len, &h, &m.hello)) < 0)
		return rc;
	m.type = h.type;
	m.version = h.version;
	m.length = h.length;
	*out = m;
	return rc;
}

int tb_control_token_equal(const char *a, const char *b)
{
	return tb_wire_token_equal(a, b, TB_CONTROL_TOKEN_LEN);
}
